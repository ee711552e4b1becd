"""The math answer check, run on the host in its own process (`tasks.math.grader` starts it with a deadline).

Reads one JSON object ``{"gold": str, "answer": str, "max_chars": int, "max_answers": int}`` on
stdin and writes ``{"verdict": ..., "detail": ...}`` on stdout. It imports only the standard
library and ``math_verify`` (sympy underneath): a power tower or a huge expression can make sympy
run for minutes or eat memory, which is why it never runs inside the gym's process.

What passes: the answer, as ``math_verify`` parses it (plain numbers, ``1/2``, ``0.5``, LaTeX
with or without ``$``, ``\\boxed{}``, ``x = 5``, thousands separators ``1,000``), is equivalent to
the gold; a percentage (``25%``) also passes for a gold without a percent sign (``25``), as GSM8K
asks. What fails (``wrong_answer``, with the reason in ``detail``):

* an empty answer, or one longer than ``max_chars`` (never parsed);
* several answers: the reply is cut into candidates at newlines, ``;``, sentence ends, the words
  ``or``/``and``, prose words (``6 wait 5``) and commas outside brackets that are not thousands
  separators; candidates that parse to different values are a hedge, so a reply that lists guesses
  never passes on one of them. A candidate that is a chain of relations (``=``, ``\\equiv``, ``\\cong``,
  ``\\implies``, ``≡``, ...) is a hedge when two of its constant sides differ (``6 = 5``, ``\\{6\\} = 5``;
  ``x = 5`` and ``x^2+y^2=25`` are one answer). A modulus in any spelling (``\\pmod{7}``, ``\\bmod 7``,
  ``(\\text{mod } 7)``) and a relation's label (``\\stackrel{7}{=}``, ``\\equiv_7``) are cut first (`unqualified`)
  and never read: ``6 \\equiv 5 \\pmod{7}`` is ``6 = 5``, ``x \\equiv 5 \\pmod{7}`` is 5; against a gold that is
  a class (``3 \\pmod{7}``) a stated modulus must be the gold's and any integer of the class passes. Before
  the cut the reply is normalised (`normal`) so that no spelling hides a separator: full-width and font
  forms (``，；５𝟓``, never ``²``), LaTeX line breaks and spacing (``\\\\``, ``~``, ``\\quad``), ``\\text{...}``
  around separators and nested ``\\boxed{}`` (each box becomes brackets, so ``\\boxed{\\boxed{5}, 6}`` is the
  pair it states);
* a number math-verify did not read (`unread_number`: deleting it leaves the parse unchanged, as in
  ``6 \\hskip1em 5`` or ``\\cancel{6} 5``, read as 5): a second answer the checker skipped, whatever
  LaTeX sits between the two; more than ``MAX_NUMBERS`` numbers are refused rather than left unprobed;
* an answer ``math_verify`` cannot parse.

Matrices (``\\begin{pmatrix}``, ``bmatrix``, ...) are read as tuples on both sides (math-verify alone reads
their last entry). A gold with a number the checker does not read is ``gold_error``, as the last entry
alone would pass for it.

``gold_error`` means the gold itself did not parse or raised (the task's fault, never the candidate's).
The gold is read first and ``GOLD_READ`` written to stderr after it, so the grader can tell a check
that died or hung on the gold (the task's fault) from one the answer killed (the candidate's).
"""

from __future__ import annotations

import json
import re
import sys
import unicodedata

_SENTENCE = re.compile(r"\.\s+")
_WORDS = re.compile(r"(?<![\\a-zA-Z])(?:or|and)(?![a-zA-Z])", re.IGNORECASE)
_THOUSANDS = re.compile(r"\d,\d{3}(?!\d)")
_NUMBERS_APART = re.compile(r"(?<=\d)\s+(?=[-+]?\d)")  # "5 6 7": three answers, not the product LaTeX reads
_WORD = re.compile(r"(?<![\\a-zA-Z])[a-zA-Z]{3,}")  # prose, not a LaTeX command or a variable


_FUNCTIONS = {"sin", "cos", "tan", "cot", "sec", "csc", "log", "exp", "sqrt", "arcsin", "arccos", "arctan", "sinh"}
_FUNCTIONS |= {"cosh", "tanh", "gcd", "lcm", "max", "min", "mod", "det", "frac", "dfrac", "tfrac", "cdot", "times"}
_LINE_BREAK = re.compile(r"\\\\(?:\[[^\]]*\])?|\\(?:newline|cr)(?![a-zA-Z])|[\u3002\u2028\u2029\x0b\x0c\x1c-\x1e\x85]")
_SPACE = re.compile(
    r"~|\\[,;:! ]|\\(?:q?quad|enspace|thinspace|medspace|thickspace|hfill)(?![a-zA-Z])|\\[hv]space\*?\{[^{}]*\}"
)
_LATEX_THOUSANDS = re.compile(r"(?<=\d)(?:\\,|\{,\})(?=\d{3}(?!\d))")  # 1\,000 and 1{,}000 are 1,000
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
_MATRIX = re.compile(r"\\begin\{([pbB]?matrix|smallmatrix)\}(.*?)\\end\{\1\}", re.DOTALL)
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
MAX_NUMBERS = 64  # numbers probed per answer (one parse each); more is refused, not skipped
_INVISIBLE = ("Cc", "Cf", "Cs")  # controls, zero-width and format characters, lone surrogates: "42\u200b43" is two


def normal(answer: str) -> str:
    """``answer`` with no separator hidden in another spelling (see the module docstring).

    Full-width, narrow and mathematical-font characters become ASCII (`_plain`); the ideographic full stop
    and other line separators become a newline, invisible characters (zero-width, controls, lone surrogates)
    a space; outside ``\\begin{...}...\\end{...}`` (a matrix's rows are one answer) LaTeX line breaks become
    a newline and LaTeX spacing a space; every ``\\boxed{X}`` (nested ones too) becomes ``X``, or ``(X)``
    when X is a list: math-verify would otherwise grade the last box alone.
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
        text = f"{text[: match.start()]}{inside}{text[close + 1 :]}"
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


def _values(piece: str) -> list[object]:
    """What one candidate states: its parse, or the constant sides of a chain of relations (``6 = 5``)."""
    sides = _RELATION.split(piece)
    if len(sides) == 1:
        value = parsed(piece)
        return [value] if value else []
    constants = [value for value in map(_side, sides) if value and _constant(value)]
    return constants or ([value] if (value := parsed(piece)) else [])


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


def parsed(text: str) -> list[object]:
    """What ``math_verify`` reads in ``text``.

    An expression without ``$`` (``3\\sqrt{2}``, ``1+x^2``, ``(1, 2)``) is read as LaTeX math: read as
    prose, only its first number would count. Text with words in it is read as prose, where
    ``math_verify`` finds the answer after phrases like "the answer is".
    """
    from math_verify import parse

    text = _MATRIX.sub(_tuple_of, text)
    if "$" in text or _WORD.search(text):
        return parse(text, parsing_timeout=None)
    return parse(f"${text}$", parsing_timeout=None) or parse(text, parsing_timeout=None)


def _tuple_of(matrix: re.Match) -> str:
    """A matrix as the tuple math-verify reads (it reads only the last entry of ``\\begin{pmatrix}``): a column or
    a row is a flat tuple, a matrix a tuple of rows."""
    rows = [[cell.strip() for cell in row.split("&")] for row in re.split(r"\\\\", matrix[2]) if row.strip()]
    if all(len(row) == 1 for row in rows) or len(rows) == 1:
        return _tuple([cell for row in rows for cell in row])
    return _tuple([_tuple(row) for row in rows])


def _tuple(items: list[str]) -> str:
    return "(" + ", ".join(items) + ")"


def unread_number(text: str) -> str | None:
    """A number of ``text`` whose deletion leaves what math-verify reads unchanged, or None.

    math-verify reads the last value of what it cannot parse whole (``6 \\hskip1em 5``, ``\\cancel{6} 5``,
    ``6 | 5`` read as 5): whatever LaTeX sits between two values, a number the checker skipped is a second
    answer it did not see. Each side of a relation is tested on its own (``x_1 = 13``). Checks what was
    read, not how it was spelled, so it needs no list of separators.
    """
    for side in _RELATION.split(text):
        value = parsed(side) if side.strip() else []
        if not value:
            continue
        for match in _NUMBER.finditer(side):
            again = parsed(f"{side[: match.start()]} {side[match.end() :]}")
            if again and str(again[0]) == str(value[0]):
                return match[0]
    return None


GOLD_READ = "gold read"  # written to stderr once the gold parsed: from then on a death is the answer's doing


def read_gold(gold: str) -> tuple[list[object], str]:
    """``(parsed gold, "")``, or ``([], why)`` when the gold cannot be read: it does not parse, raises, or is not
    equal to itself. Comparing it with itself and with 0 here, before ``GOLD_READ``, puts a gold that hangs
    sympy (``9^{9^{9^9}}``) on the task, not on the answer checked after it."""
    from math_verify import verify

    residue, _ = unqualified(gold)  # a class (3 \\pmod{7}) is read as its residue; `judge_read` checks the modulus
    try:
        gold_parsed = parsed(residue)
        itself = bool(gold_parsed) and verify(gold_parsed, gold_parsed, timeout_seconds=None)
        verify(gold_parsed, parsed("0"), timeout_seconds=None)  # a probe: a gold sympy cannot compare hangs here
    except Exception as exc:  # sympy on a malformed gold: the row's fault, never the candidate's
        return [], f"the gold {gold[:80]!r} does not parse ({type(exc).__name__})"
    if not gold_parsed:
        return [], f"the gold {gold[:80]!r} does not parse"
    if (skipped := unread_number(residue)) is not None:  # the last entry alone would pass for it
        return [], f"the checker does not read the number {skipped} of the gold {gold[:80]!r}"
    return (gold_parsed, "") if itself else ([], f"the gold {gold[:80]!r} is not equal to itself")


def judge(gold: str, answer: str, max_chars: int = 512, max_answers: int = 8) -> tuple[str, str]:
    """``(verdict, detail)`` of ``answer`` against ``gold`` (see the module docstring)."""
    gold_parsed, why = read_gold(gold)
    if not gold_parsed:
        return "gold_error", why
    return judge_read(gold_parsed, gold, answer, max_chars, max_answers)


def judge_read(gold_parsed: list[object], gold: str, answer: str, max_chars: int, max_answers: int) -> tuple[str, str]:
    """``judge`` with the gold already read."""
    from math_verify import verify

    text = normal(answer).strip().replace("\\$", "")  # \\$: a dollar sign
    if not text:
        return "wrong_answer", "empty answer"
    if len(text) > max_chars:
        return "wrong_answer", f"answer of {len(text)} characters (at most {max_chars} are read)"
    text, moduli = unqualified(text)
    if (gold_moduli := unqualified(gold)[1]) and (other := _other_modulus(moduli, gold_moduli[0])) is not None:
        return "wrong_answer", f"modulus {other[:40]} is not the gold's {gold_moduli[0][:40]}"
    pieces = candidates(text)
    if len(pieces) > max_answers:
        return "wrong_answer", f"{len(pieces)} separate answers (one answer is graded)"
    if len(_NUMBER.findall(text)) > MAX_NUMBERS:
        return "wrong_answer", f"more than {MAX_NUMBERS} numbers in one answer"
    for piece in pieces:
        if (skipped := unread_number(piece)) is not None:
            return "wrong_answer", f"the checker does not read the number {skipped} in {piece[:60]!r} (several answers)"
    values = [value for piece in pieces for value in _values(piece)]
    for first, other in zip(values, values[1:]):
        if not verify(first, other, timeout_seconds=None):
            return "wrong_answer", f"several different answers: {', '.join(str(v[-1])[:40] for v in values[:4])}"
    whole = parsed(text)
    if not whole:
        return "wrong_answer", f"no mathematical answer found in {text[:80]!r}"
    if verify(gold_parsed, whole, timeout_seconds=None) or (
        gold_moduli and _same_class(gold_parsed, whole, gold_moduli[0])
    ):
        return "passed", ""
    if "%" in text and "%" not in gold:  # "25%" for a GSM8K gold of 25 (the question asked for a percentage)
        bare = parsed(text.replace("\\%", "").replace("%", ""))
        if bare and verify(gold_parsed, bare, timeout_seconds=None):
            return "passed", ""
    return "wrong_answer", f"{str(whole[-1])[:80]} is not {str(gold_parsed[-1])[:80]}"


def _other_modulus(moduli: list[str], gold_modulus: str) -> str | None:
    """The first of ``moduli`` that is not ``gold_modulus``: a class modulo 5 is not the gold's class modulo 7."""
    from math_verify import verify

    gold_value = parsed(gold_modulus)
    for modulus in moduli:
        value = parsed(modulus)
        if not (value and gold_value and verify(gold_value, value, timeout_seconds=None)):
            return modulus
    return None


def _same_class(gold: list[object], answer: list[object], modulus: str) -> bool:
    """Whether ``answer`` is an integer of the gold's class (10 for ``3 \\pmod{7}``); ``x \\equiv 10`` reads as 10."""
    values = [value[0].rhs if getattr(value[0], "is_Equality", False) else value[0] for value in (gold, answer)]
    m = parsed(modulus)
    if not m or not all(getattr(v, "is_Integer", False) for v in [*values, m[0]]) or m[0] == 0:
        return False
    return (values[0] - values[1]) % m[0] == 0


def main() -> None:
    request = json.loads(sys.stdin.read())
    gold_parsed, why = read_gold(request["gold"])
    if not gold_parsed:
        sys.stdout.write(json.dumps({"verdict": "gold_error", "detail": why}))
        return
    sys.stderr.write(f"{GOLD_READ}\n")
    sys.stderr.flush()
    try:
        verdict, detail = judge_read(
            gold_parsed, request["gold"], request["answer"], request["max_chars"], request["max_answers"]
        )
    except Exception as exc:  # whatever sympy raises on the candidate's expression: its failure, classified
        verdict, detail = "wrong_answer", f"the checker could not read the answer: {type(exc).__name__}"
    sys.stdout.write(json.dumps({"verdict": verdict, "detail": detail}))


if __name__ == "__main__":
    main()
