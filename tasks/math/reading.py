"""What math-verify reads in a text (`parsed`) and whether two readings are equal (`same`), in time linear in how
deeply the text nests. Imported only by `tasks.math.check`, in the check's own process.

Two costs grew faster than the nesting depth, so a correct answer nested ~80 deep ran past the check's deadline:

* latex2sympy's ANTLR parser predicts with full LL, whose cost per decision grows with the depth (80 nested
  parentheses: 13 s to parse). `parsed` makes it try SLL prediction first, which returns the same tree whenever
  it succeeds (ANTLR's guarantee); only a syntax error is parsed again with LL, so what parsed before parses the
  same, and what did not still does not.
* sympy evaluates an unevaluated nested product (``\\frac{\\frac{\\frac{1}{2}}{2}}{2}``) in time exponential in its
  depth (14 deep: 2 s; 20 deep: 150 s), and compares nested sets (``{{{5}}}``) likewise. `same` compares a deep
  reading with its arithmetic evaluated (the same value), and `parsed` reads a group that only wraps another
  (``{{X}}``, ``((X))``) as that group.

Past `MAX_DEPTH` nested brackets an answer is refused before anything parses (`nesting`): no honest answer nests
that deep (the 5,000 MATH test golds: 3 at most), and 100 deep still parses well within the deadline.
"""

from __future__ import annotations

import re

_WORD = re.compile(r"(?<![\\a-zA-Z])[a-zA-Z]{3,}")  # prose, not a LaTeX command or a variable
_MATRIX = re.compile(r"\\begin\{([pbB]?matrix|smallmatrix)\}(.*?)\\end\{\1\}", re.DOTALL)
# \frac's arguments left unbraced are one token each (\frac\pi4 is \frac{\pi}{4}); latex2sympy splits a command there
_FRAC_FIRST = re.compile(r"(\\[dt]?frac)\s*(\\[a-zA-Z]+|[0-9a-zA-Z])")
_FRAC_SECOND = re.compile(r"(\\[dt]?frac\{[^{}]*\})\s*(\\[a-zA-Z]+|[0-9a-zA-Z])")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")  # 5,525 is 5525 outside brackets; \frac{12}{5,525} too
MAX_DEPTH = 100  # nested brackets read; deeper answers are refused unread
SHALLOW = 8  # a reading nested deeper than this is compared with its arithmetic evaluated


def nesting(text: str) -> int:
    """How deeply ``text`` nests: brackets of any kind (``(``, ``[``, ``{``, ``\\{``, ``\\left(``), and a chain of signs
    (``---5`` is ``-(-(-5))``) as deep as it is long."""
    depth = deepest = signs = 0
    for char in text:
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth = max(0, depth - 1)
        if char in "+-":
            signs += 1
        elif not char.isspace():
            signs = 0
        deepest = max(deepest, depth + signs)
    return deepest


def parsed(text: str) -> list[object]:
    """What ``math_verify`` reads in ``text``.

    An expression without ``$`` (``3\\sqrt{2}``, ``1+x^2``, ``(1, 2)``) is read as LaTeX math: read as
    prose, only its first number would count. Text with words in it is read as prose, where
    ``math_verify`` finds the answer after phrases like "the answer is".
    """
    from math_verify import parse

    _two_stage_parsing()
    text = _ungrouped(_MATRIX.sub(_tuple_of, text))
    text = _FRAC_SECOND.sub(r"\1{\2}", _FRAC_FIRST.sub(r"\1{\2}", thousands_joined(text)))
    if "$" in text or _WORD.search(text):
        return parse(text, parsing_timeout=None)
    return parse(f"${text}$", parsing_timeout=None) or parse(text, parsing_timeout=None)


def thousands_joined(text: str) -> str:
    """``text`` with each thousands comma (``5,525``) dropped, but inside parentheses, square brackets and a set's
    braces (``\\{``), where a comma separates elements: ``(3,125)`` is a pair and ``[-36,104]`` an interval, never
    one number (``\\frac{12}{5,525}``'s braces are a group: 5525)."""
    kept = set()
    depth = 0  # of brackets whose commas separate elements
    stack: list[bool] = []
    for i, char in enumerate(text):
        if char in "([{":
            element = char != "{" or text[i - 1 : i] == "\\"
            stack.append(element)
            depth += element
        elif char in ")]}" and stack:
            depth -= stack.pop()
        elif char == "," and depth:
            kept.add(i)
    return "".join(
        char for i, char in enumerate(text) if not (char == "," and i not in kept and _THOUSANDS.match(text, i))
    )


def same(gold: list[object], answer: list[object]) -> bool:
    """Whether math-verify finds ``answer`` equal to ``gold``; a reading nested deeper than `SHALLOW` is compared
    with its arithmetic evaluated (`_evaluated`), which sympy's comparison would otherwise redo exponentially."""
    from math_verify import verify

    return verify(_flat(gold), _flat(answer), timeout_seconds=None)


def _flat(reading: list[object]) -> list[object]:
    from sympy import Basic

    return [_evaluated(x) if isinstance(x, Basic) and _depth(x) > SHALLOW else x for x in reading]


def _depth(expr) -> int:
    """The depth of sympy tree ``expr``, counted without recursion (a deep tree must not raise here)."""
    deepest, stack = 0, [(expr, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((arg, depth + 1) for arg in getattr(node, "args", ()))
    return deepest


def _evaluated(expr):
    """``expr`` with each sum, product and power rebuilt with sympy's evaluation (``((1/2)/2)/2`` is ``1/8``): the
    same value, and a tree no deeper than its non-arithmetic nodes. Relations and logic keep their form (``2+3=5``
    stays an equation, never ``True``); anything that cannot be rebuilt is kept as it was."""
    from sympy import Add, Basic, Mul, Pow
    from sympy.logic.boolalg import Boolean

    if not isinstance(expr, Basic) or not expr.args:
        return expr
    args = tuple(_evaluated(arg) for arg in expr.args)
    try:
        if isinstance(expr, (Add, Mul, Pow)):  # read unevaluated: rebuilt even when its arguments are unchanged
            return expr.func(*args)
        if args == expr.args:
            return expr
        if isinstance(expr, Boolean):
            return expr.func(*args, evaluate=False)
        return expr.func(*args)
    except Exception:  # a node whose constructor wants other arguments: left as read
        return expr


def _ungrouped(text: str) -> str:
    """``text`` with each group that only wraps another of its kind (``{{X}}``, ``((X))``) read as that group
    (``{X}``, ``(X)``): both render and mean the same, but latex2sympy reads nested braces as nested sets, which
    sympy compares in exponential time, and pays for each level of parentheses on a first parse. Escaped ones
    (``\\{``, a set; ``\\(``, a math delimiter) stay."""
    dropped: set[int] = set()
    for opening, closing in ("{}", "()"):
        opened: list[int] = []
        pairs: dict[int, int] = {}
        for i, char in enumerate(text):
            if i and text[i - 1] == "\\":
                continue
            if char == opening:
                opened.append(i)
            elif char == closing and opened:
                pairs[opened.pop()] = i
        inner = {i for i, close in pairs.items() if i > 0 and pairs.get(i - 1) == close + 1}
        if opening == "(":  # f((1, 2)) calls f with a pair, f(1, 2) with two arguments: only bare parentheses
            inner = {i for i in inner if i < 2 or not (text[i - 2].isalnum() or text[i - 2] in ")]}")}
        dropped |= inner | {pairs[i] for i in inner}
    return "".join(char for i, char in enumerate(text) if i not in dropped) if dropped else text


def _two_stage_parsing() -> None:
    """Make latex2sympy predict with SLL and fall back to LL on a syntax error (see the module docstring)."""
    from antlr4.atn.PredictionMode import PredictionMode
    from latex2sympy2_extended.latex2sympy2 import _Latex2Sympy

    if getattr(_Latex2Sympy, "two_stage", False):
        return
    create = _Latex2Sympy.create_parser

    def create_parser(self, latex_str: str):
        parser = create(self, latex_str)
        ll_math = parser.math

        def math():
            parser._interp.predictionMode = PredictionMode.SLL
            try:
                return ll_math()
            except Exception:  # the error listeners raise on a syntax error: SLL may be too weak, LL decides
                return create(self, latex_str).math()  # a fresh lexer too: the failed one may have moved on

        parser.math = math
        return parser

    _Latex2Sympy.create_parser, _Latex2Sympy.two_stage, _Latex2Sympy.ll_parser = create_parser, True, create


def _tuple_of(matrix: re.Match) -> str:
    """A matrix as the tuple math-verify reads (it reads only the last entry of ``\\begin{pmatrix}``): a column or
    a row is a flat tuple, a matrix a tuple of rows."""
    rows = [[cell.strip() for cell in row.split("&")] for row in re.split(r"\\\\", matrix[2]) if row.strip()]
    if all(len(row) == 1 for row in rows) or len(rows) == 1:
        return _tuple([cell for row in rows for cell in row])
    return _tuple([_tuple(row) for row in rows])


def _tuple(items: list[str]) -> str:
    return "(" + ", ".join(items) + ")"
