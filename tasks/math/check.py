"""The math answer check, run on the host in its own process (`tasks.math.grader` starts it with a deadline).

Reads one JSON object ``{"gold": str, "answer": str, "max_chars": int, "max_answers": int}`` on
stdin and writes ``{"verdict": ..., "detail": ...}`` on stdout; given ``{"golds": [...], ...}`` instead, it writes
one line ``{"why": ...}`` per gold (`gold_finding`, for `tasks.math.golds` at load time). It imports the standard
library, ``math_verify`` (sympy underneath) and its siblings `tasks.math.forms` and `tasks.math.reading`: a power
tower or a huge expression can make sympy run for minutes or eat memory, which is why it never runs inside the
gym's process.

The gold's form decides how an answer is compared (`read_gold`, `Gold`): text (``\\text{east}``), a numeral in
another base (``40_9``; both `tasks.math.forms`), a list of values (``1,-2``, ``3, 5, 7``: cut like a reply, see
below), or one value. Before that, money signs, units in text after a value (``15\\mbox{ cm}^2``) and LaTeX
thousands separators (``10,\\!080``) are dropped on both sides, and a ratio ``3:1`` is the pair ``(3, 1)``.

What passes: a text answer whose items (case, spaces, periods, wrappers and the punctuation around them aside) are
the gold's, in any order; one numeral of the gold's base (the subscript may be left off) with its value; against a
list, the same values in any order (a value stated twice is one value; one fewer or one more fails); otherwise the
answer, as ``math_verify`` parses it (plain numbers, ``1/2``, ``0.5``, LaTeX with or without ``$``, ``\\boxed{}``,
``x = 5``, thousands separators ``1,000``), is equivalent to the gold; a percentage (``25%``) also passes for a gold
without a percent sign (``25``), as GSM8K asks, and the sign may be left off for a gold with one (``50`` for
``50\\%``). What fails (``wrong_answer``, with the reason in ``detail``):

* an empty answer, or one longer than ``max_chars`` (never parsed), or nested deeper than
  ``reading.MAX_DEPTH`` brackets (or signs in a row);
* several answers: the reply is cut into candidates at newlines, ``;``, sentence ends, the words
  ``or``/``and``, prose words (``6 wait 5``) and commas outside brackets that are not thousands
  separators; candidates that parse to different values are a hedge, so a reply that lists guesses
  never passes on one of them. A candidate that is a chain of relations (``=``, ``\\equiv``, ``\\cong``,
  ``\\implies``, ``≡``, ...) is a hedge when two of its value sides differ (`_values`: the constant sides,
  ``6 = 5``, ``\\{6\\} = 5``; against a gold with unknowns every side but a name, ``1 = 4x+5``; ``x = 5``,
  ``f(2) = 4`` and ``x^2+y^2=25`` are one answer), and against a relation gold when it chains more value sides
  than the gold. A modulus in any spelling (``\\pmod{7}``, ``\\bmod 7``,
  ``(\\text{mod } 7)``) and a relation's label (``\\stackrel{7}{=}``, ``\\equiv_7``) are cut first (`unqualified`)
  and never read: ``6 \\equiv 5 \\pmod{7}`` is ``6 = 5``, ``x \\equiv 5 \\pmod{7}`` is 5; against a gold that is
  a class (``3 \\pmod{7}``) a stated modulus must be the gold's and any integer of the class passes. Before
  the cut the reply is normalised (`normal`) so that no spelling hides a separator: full-width and font
  forms (``，；５𝟓``, never ``²``), LaTeX line breaks and spacing (``\\\\``, ``~``, ``\\quad``), ``\\text{...}``
  around separators and nested ``\\boxed{}`` (each box becomes brackets, so ``\\boxed{\\boxed{5}, 6}`` is the
  pair it states; two boxes side by side are two candidates);
* a number math-verify did not read (`unread_number`: deleting it leaves the parse unchanged, as in
  ``6 \\hskip1em 5`` or ``\\cancel{6} 5``, read as 5): a second answer the checker skipped, whatever
  LaTeX sits between the two; more than ``MAX_NUMBERS`` numbers are refused rather than left unprobed;
* an answer ``math_verify`` cannot parse.

Matrices (``\\begin{pmatrix}``, ``bmatrix``, ...) are read as tuples on both sides (math-verify alone reads
their last entry). A gold with a number the checker does not read is ``gold_error``, as the last entry
alone would pass for it.

``gold_error`` means the gold itself did not parse or raised (the task's fault, never the candidate's); loading
skips such a task with its reason (`tasks.math.golds`), so grading meets one only in a task built elsewhere.
The gold is read first and ``GOLD_READ`` written to stderr after it, so the grader can tell a check
that died or hung on the gold (the task's fault) from one the answer killed (the candidate's).
"""

from __future__ import annotations

import json
import re
import sys
import unicodedata
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Literal

if __package__ in (None, ""):  # run as a script (python -I tasks/math/check.py): the repository root is not on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tasks.math import forms  # noqa: E402
from tasks.math.reading import MAX_DEPTH, nesting, parsed, same  # noqa: E402

RECURSION_LIMIT = 10_000  # frames: latex2sympy and sympy recurse ~7 per nesting level, MAX_DEPTH levels at most

_SENTENCE = re.compile(r"\.\s+")
_WORDS = re.compile(r"(?<![\\a-zA-Z])(?:or|and)(?![a-zA-Z])", re.IGNORECASE)
_THOUSANDS = re.compile(r"\d,\d{3}(?!\d)")
_NUMBERS_APART = re.compile(r"(?<=\d)\s+(?=[-+]?\d)")  # "5 6 7": three answers, not the product LaTeX reads


_FUNCTIONS = {"sin", "cos", "tan", "cot", "sec", "csc", "log", "exp", "sqrt", "arcsin", "arccos", "arctan", "sinh"}
_FUNCTIONS |= {"cosh", "tanh", "gcd", "lcm", "max", "min", "mod", "det", "frac", "dfrac", "tfrac", "cdot", "times"}
_LINE_BREAK = re.compile(r"\\\\(?:\[[^\]]*\])?|\\(?:newline|cr)(?![a-zA-Z])|[\u3002\u2028\u2029\x0b\x0c\x1c-\x1e\x85]")
_SPACE = re.compile(
    r"~|\\[,;:! ]|\\(?:q?quad|enspace|thinspace|medspace|thickspace|hfill)(?![a-zA-Z])|\\[hv]space\*?\{[^{}]*\}"
)
_LATEX_THOUSANDS = re.compile(r"(?<=\d)(?:\\,|\{,\}|,\s*\\!\s*)(?=\d{3}(?!\d))")  # 1\,000, 1{,}000, 1,\!000: 1,000
_BOX = re.compile(r"\\(?:boxed|fbox|framebox)\s*\{")
_TEXT = re.compile(r"\\(?:text|textbf|textit|textrm|textnormal|mathrm|mathbf|mathit|mbox|operatorname)\s*\{([^{}]*)\}")
_RELATION = re.compile(
    r":?=|\\(?:implies|impliedby|iff|to|gets|(?:[lL]ong)?(?:[rR]ight|[lL]eft|[lL]eftright)arrow"
    r"|approx|approxeq|equiv|sim|simeq|cong|therefore|because|doteq|doteqdot|Doteq|eqsim|backsim|backsimeq|thicksim"
    r"|thickapprox|triangleq|coloneqq|eqqcolon|coloneq|eqcolon|asymp|bumpeq|Bumpeq|eqcirc|circeq|risingdotseq"
    r"|fallingdotseq|propto|mapsto|longmapsto|leadsto|models|vdash)(?![a-zA-Z])"
    r"|[\u21d2\u2192\u2234\u2235\u2248\u2261\u2245\u2243\u223c\u224a-\u224e\u2250-\u225f\u2263\u21d0\u21d4\u2190\u2194\u21a6"
    r"\u27f5-\u27fa\u2a75\u2a76\ufe66]"
)
# Qualifiers (`unqualified`): a modulus in any spelling, with the parentheses around it when they are its own
_GAP = r"(?:\s|~|\\[,;:! ]|\\q?quad(?![a-zA-Z]))*"
_OPENING = rf"(?:\\(?:left|[bB]igg?l?)(?![a-zA-Z]){_GAP})?\({_GAP}"  # (, \left(, \bigl(
_MODULUS = re.compile(
    rf"(?P<open>{_OPENING})?"
    rf"(?:\\[pb]?mod|\\pod|(?<![a-zA-Z\\])(?i:mod(?:ulo)?))(?![a-zA-Z]){_GAP}"
)
_SIZED = r"\\(?:left|right|[bB]igg?[lr]?)(?![a-zA-Z])"  # \left( \bigr): a bracket's size, never an operand
_SIZED_BRACKET = re.compile(_SIZED)
_SHORT_WORD = re.compile(r"(?<!\S)[a-zA-Z]{1,2}(?!\S)")  # "So", "is": words too short to be cut as prose
_OPERAND = re.compile(rf"[-+]?\s*(?:\d+(?:\.\d+)?|(?!{_SIZED})\\[a-zA-Z]+|[a-zA-Z](?![a-zA-Z]))")
_PARENTHESIS = re.compile(_OPENING)  # \pmod (7), \bmod \left(7\right)
_CLOSING = re.compile(rf"{_GAP}(?:\\(?:right|[bB]igg?r?)(?![a-zA-Z]){_GAP})?\)$")
_WRAPPER = re.compile(r"\\(?:mathbin|mathrel|mathop|mathsf|mathtt|texttt|textsf|textup|hbox)\s*\{([^{}]*)\}")
# a relation's own modifier: \stackrel{7}{=}, \overset{?}{\equiv}, \equiv_{7}, =_7, \xrightarrow{7}
_STACKED = re.compile(r"\\(?:stackrel|overset|underset)\s*\{(?:[^{}]|\{[^{}]*\})*\}\s*\{([^{}]*)\}")
_SUBSCRIPTED = re.compile(rf"({_RELATION.pattern})\s*[_^]\s*(?:\{{[^{{}}]*\}}|\\[a-zA-Z]+|[^\s{{}}\\])")
_DELIMITER = re.compile(r"\\[()\[\]]")  # \(6 = 5\): math delimiters, read on a side as part of its number
_ARROW = re.compile(r"\\x[a-zA-Z]*arrow\s*(?:\[[^\[\]]*\])?\s*(?:\{[^{}]*\})?")


_ENVIRONMENT = re.compile(r"\\begin\{([a-zA-Z]+\*?)\}.*?\\end\{\1\}", re.DOTALL)
# a word of prose: {pmatrix} names an environment and ABC points, not prose (unread_number backs this up)
_PROSE = re.compile(r"(?<![\\a-zA-Z{])(?=[A-Z]?[a-z])[a-zA-Z]{3,}")
_SAME_VALUE = ("<wide>", "<narrow>", "<font>", "<noBreak>")  # compatibility forms that only restyle a character
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_ANOTHER_DIGIT = str.maketrans("0123456789", "1234567890")
MAX_NUMBERS = 64  # numbers probed per answer (one parse each); more is refused, not skipped
_INVISIBLE = ("Cc", "Cf", "Cs")  # controls, zero-width and format characters, lone surrogates: "42\u200b43" is two


def normal(answer: str) -> str:
    """``answer`` with no separator hidden in another spelling (see the module docstring).

    Full-width, narrow and mathematical-font characters become ASCII (`_plain`); the ideographic full stop
    and other line separators become a newline, invisible characters (zero-width, controls, lone surrogates)
    a space; outside ``\\begin{...}...\\end{...}`` (a matrix's rows are one answer) LaTeX line breaks become
    a newline and LaTeX spacing a space; every ``\\boxed{X}`` (nested ones too) becomes ``X``, or ``(X)``
    when X is a list: math-verify would otherwise grade the last box alone; a box right after another is on its
    own line (``\\boxed{0} \\boxed{\\frac{5}{9}}`` is two answers, not the mixed number 0 5/9).
    """
    text = _LATEX_THOUSANDS.sub(",", "".join(map(_plain, answer)).replace("\u3001", ","))
    kept = [match.span() for match in _ENVIRONMENT.finditer(text)]  # a matrix's rows are one answer
    edges = [0, *(i for span in kept for i in span), len(text)]
    text = "".join(
        text[a:b] if k % 2 else _SPACE.sub(" ", _LINE_BREAK.sub("\n", text[a:b]))
        for k, (a, b) in enumerate(zip(edges, edges[1:]))
    )
    text = "".join(" " if char not in "\n\t" and unicodedata.category(char) in _INVISIBLE else char for char in text)
    while match := _BOX.search(text):
        close = _closing_brace(text, match.end() - 1)
        if close < 0:
            break  # unbalanced: left for math-verify to refuse
        inside = text[match.end() : close]
        inside = f"({inside})" if len(_top_level_commas(inside)) > 1 else f" {inside} "  # a box of a pair is a pair
        rest = text[close + 1 :]
        apart = "\n" if _BOX.match(rest.lstrip()) else ""  # two boxes side by side are two answers, never 0 \frac{5}{9}
        text = f"{text[: match.start()]}{inside}{apart}{rest}"
    return text


def unqualified(text: str) -> tuple[str, list[str]]:
    """``(text without its moduli, the moduli)``: a qualifier is not a value, so it is cut before anything is
    read and the sides left are judged as plain relations (``6 \\equiv 5 \\pmod{7}`` is ``6 = 5``, a hedge).

    A modulus is ``\\pmod``, ``\\pod``, ``\\mod``, ``\\bmod`` or the word ``mod``/``modulo`` (bare, or in ``\\text``,
    ``\\mathrm``, ``\\operatorname``, ...) with its operand (a braced group, a number, a letter or a command;
    inside parentheses, all up to the closing one) and those parentheses; ``a \\bmod m`` is never evaluated, ``a``
    is what is read. A relation's own modifier (``\\stackrel{7}{=}``, ``\\equiv_{7}``, ``\\xrightarrow{7}``) is
    dropped the same way. What is cut is never read, so it can hold no second answer.
    """
    text = _SUBSCRIPTED.sub(r" \1 ", _STACKED.sub(_stacked_relation, _ARROW.sub(r" \\to ", text)))
    unwrapped = text
    while (again := _WRAPPER.sub(r" \1 ", _TEXT.sub(r" \1 ", unwrapped))) != unwrapped:
        unwrapped = again
    if not _MODULUS.search(unwrapped):
        return text, []  # \text{...} left as written: only a modulus needs it unwrapped
    moduli: list[str] = []
    while match := _MODULUS.search(unwrapped):
        operand, end = _operand(unwrapped, match)
        moduli += [operand] if operand else []
        unwrapped = f"{unwrapped[: match.start()]} {unwrapped[end:]}"
    return unwrapped, moduli


def _stacked_relation(match: re.Match) -> str:
    """``\\stackrel{7}{=}`` as ``=``; a stack of anything but a relation stays as written."""
    return f" {match[1]} " if _RELATION.fullmatch(match[1].strip()) else match[0]


def _operand(text: str, match: re.Match) -> tuple[str, int]:
    """``(the modulus, where its cut ends)`` after the ``mod`` that ``match`` found."""
    start = match.end()
    if match["open"] and (close := _closing_paren(text, start)) > 0:  # (mod n+1): up to the closing parenthesis
        return _CLOSING.sub("", text[start : close + 1]).strip(), close + 1
    if text.startswith("{", start) and (close := _closing_brace(text, start)) > 0:
        return text[start + 1 : close].strip(), close + 1
    if (opening := _PARENTHESIS.match(text, start)) and (close := _closing_paren(text, opening.end())) > 0:
        return _CLOSING.sub("", text[opening.end() : close + 1]).strip(), close + 1
    token = _OPERAND.match(text, start)
    return (token[0].strip(), token.end()) if token else ("", start)


def _closing_paren(text: str, start: int) -> int:
    """Where the parenthesis open before ``start`` closes, or -1."""
    depth = 0
    for i in range(start, len(text)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth < 0:
            return i
    return -1


def _plain(char: str) -> str:
    """``char``'s compatibility form when it is only another width or font of it (``５``, ``𝟓``, ``，``); never
    a superscript or a fraction, whose compatibility form changes the value (``5²`` is not ``52``)."""
    if unicodedata.decomposition(char).startswith(_SAME_VALUE):
        return unicodedata.normalize("NFKC", char)
    return char


def _closing_brace(text: str, opening: int) -> int:
    depth = 0
    for i in range(opening, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return i
    return -1


def candidates(answer: str) -> list[str]:
    """The separate answers a reply states (see the module docstring); one for a single answer."""
    pieces: list[str] = []
    unwrapped = _TEXT.sub(lambda match: f" {match[1]} ", normal(answer))
    for line in re.split(r"[\n;]", unwrapped):
        for sentence in _SENTENCE.split(line):
            for part in _WORDS.split(sentence):
                for words in _prose_split(part):
                    for piece in _top_level_commas(words):
                        pieces += _NUMBERS_APART.split(piece)
    return [piece.strip().strip(".") for piece in pieces if piece.strip().strip(".")]


def _prose_split(text: str) -> list[str]:
    """``text`` cut at prose words (``6 wait 5``), the words dropped; function names stay."""
    parts, start = [], 0
    for match in _PROSE.finditer(text):
        if match[0].lower() not in _FUNCTIONS:
            parts.append(text[start : match.start()])
            start = match.end()
    return [*parts, text[start:]]


Sides = Literal["constants", "expressions", "all"]


def _values(piece: str, sides: Sides = "constants") -> list[object]:
    """What one candidate states: its parse, or the value sides of a chain of relations. Which sides are values
    depends on what the gold is (`_sides`): against a constant or a relation only the constant sides (``6 = 5``
    states 6 and 5; ``x = 5`` and ``a+b = 5`` state 5; ``2+3=5`` states 5 twice); against a gold with unknowns
    (``4x+5``, which no constant equals) every side but one that only names a quantity (`_named`), so ``1 = 4x+5``
    and ``4y+3 = 4x+5`` state two values, ``y = 4x+5`` and ``f(x) = 4x+5`` one; against a gold that is a name
    (``\\overline{CD}``) every side."""
    parts = _RELATION.split(piece)
    if len(parts) == 1:
        value = parsed(piece)
        return [value] if value else []
    read = [value for value in map(_side, parts) if value]
    if sides == "all":
        stated = [value for value in read if not isinstance(value[0], str)]
    else:
        stated = [value for value in read if _constant(value) or (sides == "expressions" and not _named(value))]
    return stated or ([value] if (value := parsed(piece)) else [])


def _value_sides(piece: str) -> int:
    """How many sides of ``piece``'s chain of relations are values, not names (``y = x+3 = y = 2x``: 2)."""
    parts = _RELATION.split(piece)
    return sum(1 for value in map(_side, parts) if value and not _named(value)) if len(parts) > 1 else 0


def _sides(gold: Gold) -> Sides:
    """Which sides of an answer's relation `_values` reads as values against ``gold``."""
    if gold.form == "values":
        return "expressions"
    if _relation(gold.value) or _constant(gold.value):
        return "constants"
    return "all" if _named(gold.value) else "expressions"


def _named(value: list[object]) -> bool:
    """Whether a relation's side only names a quantity: a symbol or a product of them, signed or not (``x``, ``x_1``,
    ``-y``, ``AB``, ``m\\angle A``), or a function's value (``f(2)``). A side read as no expression (prose) is no
    value either; ``x+1`` and ``2x`` are values."""
    from sympy import Basic, Mul, Symbol
    from sympy.core.function import AppliedUndef

    first = value[0]
    if not isinstance(first, Basic):
        return True
    factors = first.args if isinstance(first, Mul) else (first,)
    return all(isinstance(factor, (Symbol, AppliedUndef)) or factor == -1 for factor in factors)


def _relation(value: list[object]) -> bool:
    """Whether a reading is a relation or a statement (``x^2+y^2=25``, ``x \\in [2, 5)``), not a value."""
    from sympy.core.relational import Relational
    from sympy.logic.boolalg import BooleanFunction

    return isinstance(value[0], (Relational, BooleanFunction))  # not Boolean: a Symbol is one


def _side(side: str) -> list[object]:
    """What one side of a relation reads as. A side that does not parse is read again without the math delimiters
    and the brackets it leaves open (``\\(6`` and ``5\\)`` of ``\\(6 = 5\\)``, ``\\left(6`` of ``(6 = 5)``); one that
    is no constant, without its short words (``So 6 = 5``: prose, not the product of S, o and 6)."""
    value = parsed(side) if side.strip() else []
    if value and isinstance(value[0], str):
        side = _SIZED_BRACKET.sub("", _DELIMITER.sub(" ", side)).replace("\\{", "{").replace("\\}", "}").strip()
        while side[:1] in ("(", "[", "{") and _open_brackets(side) > 0:
            side = side[1:].strip()
        while side[-1:] in (")", "]", "}") and _open_brackets(side) < 0:
            side = side[:-1].strip()
        value = parsed(side) if side else []
    if value and not _constant(value) and (bare := _SHORT_WORD.sub(" ", side)) != side and bare.strip():
        again = parsed(bare)
        value = again if again and _constant(again) else value
    return value


def _open_brackets(text: str) -> int:
    return sum(map(text.count, "([{")) - sum(map(text.count, ")]}"))


def _constant(value: list[object]) -> bool:
    """4, {6}, (6, 7): a value with no unknown in it; not x nor f(2)."""
    from sympy import Basic
    from sympy.core.function import AppliedUndef

    first = value[0]
    if getattr(first, "is_number", False):
        return True
    return isinstance(first, Basic) and not first.free_symbols and not first.atoms(AppliedUndef)


def _top_level_commas(text: str) -> list[str]:
    """``text`` cut at commas outside brackets, keeping thousands separators (``1,000``) whole."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth = max(0, depth - 1)
        elif char == "," and depth == 0 and not _THOUSANDS.match(text, max(0, i - 1)):
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def unread_number(text: str) -> str | None:
    """A number of ``text`` whose deletion leaves what math-verify reads unchanged, or None.

    math-verify reads the last value of what it cannot parse whole (``6 \\hskip1em 5``, ``\\cancel{6} 5``,
    ``6 | 5`` read as 5): whatever LaTeX sits between two values, a number the checker skipped is a second
    answer it did not see. Each side of a relation is tested on its own (``x_1 = 13``). Checks what was
    read, not how it was spelled, so it needs no list of separators.

    A number whose value changes the reading when replaced (same digits' shape, another value: it still parses,
    where a deletion can leave LL parsing an invalid text for seconds) was read and needs no deletion; a 0 is always
    deleted, as ``0 \\frac{5}{9}`` (the mixed number) reads it yet states 5/9.
    """
    for side in _RELATION.split(text):
        value = parsed(side) if side.strip() else []
        if not value:
            continue
        for match in _NUMBER.finditer(side):
            if float(match[0]) != 0:  # 0 changes no sum (0 \\frac{5}{9} reads 5/9 as a mixed number): deleted
                other = match[0].translate(_ANOTHER_DIGIT)  # same shape, another value: it still parses, and fast
                if str(parsed(f"{side[: match.start()]}{other}{side[match.end() :]}")[:1]) != str(value[:1]):
                    continue  # its value changes what is read: it was read
            again = parsed(f"{side[: match.start()]} {side[match.end() :]}")
            if again and str(again[0]) == str(value[0]):
                return match[0]
    return None


GOLD_READ = "gold read"  # written to stderr once the gold parsed: from then on a death is the answer's doing
_PERCENT = re.compile(r"\\?%")


@dataclass(frozen=True)
class Gold:
    """A gold as the check compares answers with it (see the module docstring): its form and what it states."""

    written: str
    form: Literal["value", "values", "text", "base"]
    value: list = field(default_factory=list)  # value: math-verify's reading
    values: tuple[list, ...] = ()  # values: each listed value's reading
    words: tuple[str, ...] = ()  # text: its items (`forms.words`)
    numeral: tuple[Fraction, int] | None = None  # base: (value, base)
    modulus: str = ""  # value: the modulus of a class (3 \pmod 7)
    percent: list = field(default_factory=list)  # value: a percentage's number without its sign (50 for 50\%)
    sides: int = 0  # value: how many sides of its chain of relations are values (`_value_sides`: 1 for y = 2x)


def read_gold(gold: str) -> tuple[Gold | None, str]:
    """``(the gold read, "")``, or ``(None, why)`` when it cannot be read: it does not parse, raises, has a number the
    checker does not read, or is not equal to itself. Comparing it with itself and with 0 here, before ``GOLD_READ``,
    puts a gold that hangs sympy (``9^{9^{9^9}}``) on the task, not on the answer checked after it."""
    if forms.is_text(gold):
        items = forms.words(normal(gold))
        return (
            (Gold(gold, "text", words=items), "")
            if all(items)
            else (None, f"the gold {gold[:80]!r} lists an empty item")
        )
    text = forms.plain(normal(gold)).strip()
    if (numeral := forms.numeral(text)) is not None:
        return Gold(gold, "base", numeral=numeral), ""
    residue, moduli = unqualified(text)  # a class (3 \pmod{7}) is read as its residue; `judge_read` checks the modulus
    try:
        pieces = candidates(residue)
        return _read_values(gold, pieces) if len(pieces) > 1 else _read_value(gold, residue, moduli)
    except Exception as exc:  # sympy on a malformed gold: the row's fault, never the candidate's
        return None, f"the gold {gold[:80]!r} does not parse ({type(exc).__name__})"


def _read_value(gold: str, residue: str, moduli: list[str]) -> tuple[Gold | None, str]:
    value = parsed(residue)
    itself = bool(value) and same(value, value)
    same(value, parsed("0"))  # a probe: a gold sympy cannot compare hangs here
    if not value:
        return None, f"the gold {gold[:80]!r} does not parse"
    if (skipped := unread_number(residue)) is not None:  # the last entry alone would pass for it
        return None, f"the checker does not read the number {skipped} of the gold {gold[:80]!r}"
    if not itself:
        return None, f"the gold {gold[:80]!r} is not equal to itself"
    percent = parsed(_PERCENT.sub("", residue)) if "%" in residue else []
    sides = _value_sides(residue) if _relation(value) else 0
    return Gold(gold, "value", value=value, modulus=(moduli or [""])[0], percent=percent, sides=sides), ""


def _read_values(gold: str, pieces: list[str]) -> tuple[Gold | None, str]:
    """A gold that lists several values (``1,-2``, ``3, 5, 7``, ``12\\text{ and }13``): each piece read like a reply's."""
    values: list[list] = []
    for piece in pieces:
        if (skipped := unread_number(piece)) is not None:
            return None, f"the checker does not read the number {skipped} of the gold {gold[:80]!r}"
        if not (read := _values(piece, "expressions")):
            return None, f"the value {piece[:40]!r} of the gold {gold[:80]!r} does not parse"
        values += read
    if not all(same(value, value) for value in values):
        return None, f"a value of the gold {gold[:80]!r} is not equal to itself"
    return Gold(gold, "values", values=tuple(values)), ""


def judge(gold: str, answer: str, max_chars: int = 512, max_answers: int = 8) -> tuple[str, str]:
    """``(verdict, detail)`` of ``answer`` against ``gold`` (see the module docstring)."""
    read, why = read_gold(gold)
    if read is None:
        return "gold_error", why
    return judge_read(read, answer, max_chars, max_answers)


def judge_read(gold: Gold, answer: str, max_chars: int, max_answers: int) -> tuple[str, str]:
    """``judge`` with the gold already read."""
    text = normal(answer).strip()
    if not text:
        return "wrong_answer", "empty answer"
    if len(text) > max_chars:
        return "wrong_answer", f"answer of {len(text)} characters (at most {max_chars} are read)"
    if (deep := nesting(text)) > MAX_DEPTH:
        return "wrong_answer", f"brackets nested {deep} deep (at most {MAX_DEPTH} are read)"
    if gold.form == "text":
        items = forms.words(text)
        return (
            ("passed", "")
            if items == gold.words
            else ("wrong_answer", f"{', '.join(items)[:80]} is not {gold.written}")
        )
    text = forms.plain(text).strip()
    if gold.form == "base":
        return _judge_numeral(gold, text)
    text, moduli = unqualified(text)
    if gold.modulus and (other := _other_modulus(moduli, gold.modulus)) is not None:
        return "wrong_answer", f"modulus {other[:40]} is not the gold's {gold.modulus[:40]}"
    pieces = candidates(_unbracketed(text) if gold.form == "values" else text)
    if len(pieces) > max(max_answers, len(gold.values)):
        return "wrong_answer", f"{len(pieces)} separate answers (one answer is graded)"
    if len(_NUMBER.findall(text)) > MAX_NUMBERS:
        return "wrong_answer", f"more than {MAX_NUMBERS} numbers in one answer"
    for piece in pieces:
        if (skipped := unread_number(piece)) is not None:
            return "wrong_answer", f"the checker does not read the number {skipped} in {piece[:60]!r} (several answers)"
    relation = gold.form == "value" and _relation(gold.value)
    for piece in pieces if relation else ():  # y = x+3 = y = 2x chains two equations where the gold states one
        if (count := _value_sides(piece)) > gold.sides:
            return "wrong_answer", f"a chain of relations with {count} values where the gold states {gold.sides}"
    values = [value for piece in pieces for value in _values(piece, _sides(gold))]
    if gold.form == "values":
        return _judge_values(gold, values)
    for first, other in zip(values, values[1:]):
        if not same(first, other):
            return "wrong_answer", f"several different answers: {', '.join(str(v[-1])[:40] for v in values[:4])}"
    whole = parsed(text)
    if not whole:
        return "wrong_answer", f"no mathematical answer found in {text[:80]!r}"
    # a relation states its value side (x = 5 states 5, 18 = C states 18, not C); anything else reads whole
    stated = values[0] if values and not relation and len(_RELATION.split(text)) > 1 else whole
    if same(gold.value, stated) or (gold.modulus and _same_class(gold.value, stated, gold.modulus)):
        return "passed", ""
    if "%" in text or gold.percent:  # 25% for a GSM8K gold of 25, 50 for a gold of 50\%: the sign is optional
        bare = parsed(_PERCENT.sub("", text))
        if bare and same(gold.percent or gold.value, bare):
            return "passed", ""
    return "wrong_answer", f"{str(stated[-1])[:80]} is not {str(gold.value[-1])[:80]}"


def _judge_values(gold: Gold, values: list[list]) -> tuple[str, str]:
    """A listed gold's verdict: the answer states each of its values and no other, in any order (a value stated twice
    is one value); one of them alone or one more is wrong."""
    if not values:
        return "wrong_answer", "no mathematical answer found"
    found = [[same(expected, value) for value in values] for expected in gold.values]
    missing = [str(expected[-1])[:30] for expected, row in zip(gold.values, found) if not any(row)]
    extra = [str(value[-1])[:30] for j, value in enumerate(values) if not any(row[j] for row in found)]
    if missing or extra:
        return (
            "wrong_answer",
            f"the gold lists {len(gold.values)} values; missing {missing[:4]}, not listed {extra[:4]}",
        )
    return "passed", ""


def _judge_numeral(gold: Gold, text: str) -> tuple[str, str]:
    """A base-n gold's verdict: one numeral of its base (subscript written or not) with its value."""
    assert gold.numeral is not None
    pieces = candidates(text)
    read = [forms.numeral(piece, gold.numeral[1]) for piece in pieces]
    if not pieces or None in read:
        return "wrong_answer", f"{text[:60]!r} is not one base-{gold.numeral[1]} numeral"
    if any(numeral != gold.numeral for numeral in read):
        return "wrong_answer", f"{text[:60]!r} is not {gold.written}"
    return "passed", ""


def _unbracketed(text: str) -> str:
    """A list inside one pair of brackets, ``(1, -2)`` (a boxed list) or ``\\{1, -2\\}``, as the list it holds."""
    bare = _SIZED_BRACKET.sub("", text).strip()
    if bare.startswith("\\{") and bare.endswith("\\}"):
        inner = bare[2:-2]
    elif bare.startswith("(") and _closing_paren(bare, 1) == len(bare) - 1:
        inner = bare[1:-1]
    else:
        return text
    return inner if len(_top_level_commas(inner)) > 1 and _open_brackets(inner) == 0 else text


def _other_modulus(moduli: list[str], gold_modulus: str) -> str | None:
    """The first of ``moduli`` that is not ``gold_modulus``: a class modulo 5 is not the gold's class modulo 7."""
    gold_value = parsed(gold_modulus)
    for modulus in moduli:
        value = parsed(modulus)
        if not (value and gold_value and same(gold_value, value)):
            return modulus
    return None


def _same_class(gold: list[object], answer: list[object], modulus: str) -> bool:
    """Whether ``answer`` is an integer of the gold's class (10 for ``3 \\pmod{7}``); ``x \\equiv 10`` reads as 10."""
    values = [value[0].rhs if getattr(value[0], "is_Equality", False) else value[0] for value in (gold, answer)]
    m = parsed(modulus)
    if not m or not all(getattr(v, "is_Integer", False) for v in [*values, m[0]]) or m[0] == 0:
        return False
    return (values[0] - values[1]) % m[0] == 0


def gold_finding(gold: str, max_chars: int = 512, max_answers: int = 8) -> str:
    """Why no answer can be graded against ``gold`` ("" when one can): the check cannot read it, or the gold itself,
    given as the answer, does not pass. `tasks.math.golds` asks this of every gold when tasks are loaded."""
    read, why = read_gold(gold)
    if read is None:
        return why
    try:
        verdict, detail = judge_read(read, gold, max_chars, max_answers)
    except Exception as exc:  # noqa: BLE001 - whatever sympy raises, the gold is what it raised on
        verdict, detail = "raised", type(exc).__name__
    return "" if verdict == "passed" else f"the gold {gold[:80]!r} given as the answer does not pass: {detail[:200]}"


def main() -> None:
    sys.setrecursionlimit(max(sys.getrecursionlimit(), RECURSION_LIMIT))
    request = json.loads(sys.stdin.read())
    if "golds" in request:  # the load-time reading (`tasks.math.golds`): one line per gold, as each is judged
        for gold in request["golds"]:
            finding = gold_finding(gold, request["max_chars"], request["max_answers"])
            sys.stdout.write(json.dumps({"why": finding}) + "\n")
            sys.stdout.flush()
        return
    gold, why = read_gold(request["gold"])
    if gold is None:
        sys.stdout.write(json.dumps({"verdict": "gold_error", "detail": why}))
        return
    sys.stderr.write(f"{GOLD_READ}\n")
    sys.stderr.flush()
    try:
        verdict, detail = judge_read(gold, request["answer"], request["max_chars"], request["max_answers"])
    except Exception as exc:  # whatever sympy raises on the candidate's expression: its failure, classified
        verdict, detail = "wrong_answer", f"the checker could not read the answer: {type(exc).__name__}"
    sys.stdout.write(json.dumps({"verdict": verdict, "detail": detail}))


if __name__ == "__main__":
    main()
