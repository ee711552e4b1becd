"""How a reply is read before it is compared with the gold (`tasks.math.check` runs this in its own process).

`normal` folds every spelling that could hide a separator; `unqualified` cuts moduli and relation labels, which
are never read; `candidates` cuts the reply into the answers it states; `piece_values` reads what one candidate
states (a relation: its value sides); `unread_operand` finds an operand math-verify read past. The module docstring
of `tasks.math.check` states the rules these implement.
"""

from __future__ import annotations

import collections
import re
import unicodedata
from typing import Literal

from tasks.math.reading import parsed

_SENTENCE = re.compile(r"\.\s+")
_WORDS = re.compile(r"(?<![\\a-zA-Z])(?:or|and)(?![a-zA-Z])", re.IGNORECASE)
_LEADING_DOT = re.compile(r"^\.+(?!\d)")  # ". So 5": a sentence's end, never the point of .5
_THOUSANDS = re.compile(r"\d,\d{3}(?!\d)")
_NUMBERS_APART = re.compile(r"(?<=\d)(?<![_^]\d)\s+(?=[-+]?\d)")  # "5 6 7": three answers; \log_2 4 is one
# "x = 5 x = 6", "x = \frac{1}{2} so x = 6": a value, then a name assigned anew (a two-letter word may sit between)
_ASSIGNED_APART = re.compile(r"(?:(?<=\d)(?<![_^]\d)|(?<=[})]))\s+(?:[a-zA-Z]{2}\s+)?(?=[a-zA-Z](?:_\{?\w+\}?)?\s*:?=)")


_FUNCTIONS = {"sin", "cos", "tan", "cot", "sec", "csc", "log", "exp", "sqrt", "arcsin", "arccos", "arctan", "sinh"}
_FUNCTIONS |= {"cosh", "tanh", "gcd", "lcm", "max", "min", "mod", "det", "frac", "dfrac", "tfrac", "cdot", "times"}
_LINE_BREAK = re.compile(r"\\\\(?:\[[^\]]*\])?|\\(?:newline|cr)(?![a-zA-Z])|[\u3002\u2028\u2029\x0b\x0c\x1c-\x1e\x85]")
_SPACE = re.compile(
    r"~|\\[,;:! ]|\\(?:q?quad|enspace|thinspace|medspace|thickspace|hfill)(?![a-zA-Z])|\\[hv]space\*?\{[^{}]*\}"
)
_LATEX_THOUSANDS = re.compile(r"(?<=\d)(?:\\,|\{,\}|,\s*\\!\s*)(?=\d{3}(?!\d))")  # 1\,000, 1{,}000, 1,\!000: 1,000
# 1 000 000, 12 345 (SI thousands; \ and ~ are spaces by then); 5 6 7 stays three numbers, x_1 000 is no number
_SPACED_THOUSANDS = re.compile(r"(?<![\d.,_^])\d{1,3}(?:[ \u00a0\u2009\u202f]\d{3})+(?!\d)")
# a run of superscript (or of subscript) digits, signs and parentheses: ⁶, ⁻¹, ₁₂
_SCRIPT_RUN = re.compile("[\u2070\u00b9\u00b2\u00b3\u2074-\u207e]+|[\u2080-\u208e]+")
_BOX = re.compile(r"\\(?:boxed|fbox|framebox)\s*\{")
_TEXT = re.compile(r"\\(?:text|textbf|textit|textrm|textnormal|mathrm|mathbf|mathit|mbox|operatorname)\s*\{([^{}]*)\}")
RELATION = re.compile(
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
_COMMAND = re.compile(r"\\[a-zA-Z]+")
_SIZED = r"\\(?:left|right|[bB]igg?[lr]?)(?![a-zA-Z])"  # \left( \bigr): a bracket's size, never an operand
SIZED_BRACKET = re.compile(_SIZED)
_GLUE = re.compile(r"\\(?!(?:[dt]?frac|sqrt|[dt]?binom)(?![a-zA-Z]))[a-zA-Z]+\s*\{([^{}]*)\}")  # `_bare`
_LEADING_WORDS = re.compile(r"^(?:\s*[A-Za-z]{2,}(?=\s))+")  # "So y", "Thus the line y": prose before a side
_SHORT_WORD = re.compile(
    r"(?<!\S)[a-zA-Z]{2}(?!\S)"
)  # "So", "is": words too short to be cut as prose (x is a variable)
_OPERAND = re.compile(rf"[-+]?\s*(?:\d+(?:\.\d+)?|(?!{_SIZED})\\[a-zA-Z]+|[a-zA-Z](?![a-zA-Z]))")
_PARENTHESIS = re.compile(_OPENING)  # \pmod (7), \bmod \left(7\right)
_CLOSING = re.compile(rf"{_GAP}(?:\\(?:right|[bB]igg?r?)(?![a-zA-Z]){_GAP})?\)$")
_WRAPPER = re.compile(r"\\(?:mathbin|mathrel|mathop|mathsf|mathtt|texttt|textsf|textup|hbox)\s*\{([^{}]*)\}")
# a relation's own modifier: \stackrel{7}{=}, \overset{?}{\equiv}, \equiv_{7}, =_7, \xrightarrow{7}
_STACKED = re.compile(r"\\(?:stackrel|overset|underset)\s*\{(?:[^{}]|\{[^{}]*\})*\}\s*\{([^{}]*)\}")
_SUBSCRIPTED = re.compile(rf"({RELATION.pattern})\s*[_^]\s*(?:\{{[^{{}}]*\}}|\\[a-zA-Z]+|[^\s{{}}\\])")
_DELIMITER = re.compile(r"\\[()\[\]]")  # \(6 = 5\): math delimiters, read on a side as part of its number
# a run of math delimiters with only spaces between (`_delimited`); an escaped dollar (\$, money) is none
_MATH_DELIMITER = re.compile(r"((?:(?<!\\)\$|\\[()\[\]])(?:\s*(?:(?<!\\)\$|\\[()\[\]]))*)")
_ONE_DELIMITER = re.compile(r"\$\$?|\\[()\[\]]")  # $$ opens or closes one display formula
# Markdown emphasis around an answer (**5**, **Answer:** 5); never a power, 2**3
_MARKDOWN = re.compile(r"(?<![\w*])\*\*(?=\S)(.+?)(?<=\S)\*\*(?![\w*])")
_ARROW = re.compile(r"\\x[a-zA-Z]*arrow\s*(?:\[[^\[\]]*\])?\s*(?:\{[^{}]*\})?")


_ENVIRONMENT = re.compile(r"\\begin\{([a-zA-Z]+\*?)\}.*?\\end\{\1\}", re.DOTALL)
# a word of prose: {pmatrix} names an environment and ABC points, not prose (unread_operand backs this up)
_PROSE = re.compile(r"(?<![\\a-zA-Z{])(?=[A-Z]?[a-z])[a-zA-Z]{3,}")
_SAME_VALUE = ("<wide>", "<narrow>", "<font>", "<noBreak>")  # compatibility forms that only restyle a character
NUMBER = re.compile(r"\d+(?:\.\d+)?")
_ANOTHER_DIGIT = str.maketrans("0123456789", "1234567890")
# An operand `unread_operand` probes: a number, a letter standing alone (x, e; never one of a word or a command's
# name), a command (\pi, \infty, \color; never a bracket's size, which holds no value)
# a function or an operator (\frac, \sqrt, \sin, \cdot) only combines the operands around it, which are probed
_COMBINING = "|".join(sorted(_FUNCTIONS | {"sqrt", "cfrac", "binom", "dbinom", "tbinom", "pm", "mp", "div", "ln"}))
OPERAND = re.compile(
    rf"\d+(?:\.\d+)?|(?!{_SIZED}|\\(?:{_COMBINING})(?![a-zA-Z]))\\[a-zA-Z]+|(?<![\\a-zA-Z])[a-zA-Z](?![a-zA-Z])"
)
_SPARE_LETTERS = "qkQKwWzZuUvV"  # a replacement letter: the first of these a side does not hold
MAX_OPERANDS = 64  # operands probed per answer (a parse or two each); more is refused, not skipped
_NUMBER_WORD = re.compile(
    r"(?<![a-zA-Z\\])(?:zero|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|fifteen"
    r"|sixteen|seventeen|eighteen|nineteen|twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety|hundred|thousand"
    r"|million|billion|trillion|half)(?![a-zA-Z])",
    re.IGNORECASE,
)
_INVISIBLE = ("Cc", "Cf", "Cs")  # controls, zero-width and format characters, lone surrogates: "42\u200b43" is two


def normal(answer: str) -> str:
    """``answer`` with no separator hidden in another spelling (see the module docstring).

    Full-width, narrow and mathematical-font characters become ASCII (`_plain`); the ideographic full stop
    and other line separators become a newline, invisible characters (zero-width, controls, lone surrogates)
    a space; outside ``\\begin{...}...\\end{...}`` (a matrix's rows are one answer) LaTeX line breaks become
    a newline, LaTeX spacing a space and digits grouped by threes with spaces (``1 000 000``, ``12\\ 345``: SI
    thousands) one number; every ``\\boxed{X}`` (nested ones too) becomes ``X``, or ``(X)``
    when X is a list: math-verify would otherwise grade the last box alone; a box right after another is on its
    own line (``\\boxed{0} \\boxed{\\frac{5}{9}}`` is two answers, not the mixed number 0 5/9).
    """
    text = _LATEX_THOUSANDS.sub("", _digits("".join(map(_plain, answer))).replace("\u3001", ","))
    text = _MARKDOWN.sub(r"\1", text).replace("`", " ")
    kept = [match.span() for match in _ENVIRONMENT.finditer(text)]  # a matrix's rows are one answer
    edges = [0, *(i for span in kept for i in span), len(text)]
    text = "".join(
        text[a:b] if k % 2 else _grouped(_SPACE.sub(" ", _LINE_BREAK.sub("\n", text[a:b])))
        for k, (a, b) in enumerate(zip(edges, edges[1:]))
    )
    text = "".join(" " if char not in "\n\t" and unicodedata.category(char) in _INVISIBLE else char for char in text)
    text = _delimited(text)  # after the spacing: $x = 5$\quad $x = 6$ is two formulas
    while match := _BOX.search(text):
        close = _closing_brace(text, match.end() - 1)
        if close < 0:
            break  # unbalanced: left for math-verify to refuse
        inside = text[match.end() : close]
        inside = f"({inside})" if len(top_level_commas(inside)) > 1 else f" {inside} "  # a box of a pair is a pair
        rest = text[close + 1 :]
        apart = "\n" if _BOX.match(rest.lstrip()) else ""  # two boxes side by side are two answers, never 0 \frac{5}{9}
        text = f"{text[: match.start()]}{inside}{apart}{rest}"
    return text


def _delimited(text: str) -> str:
    """``text`` without its math delimiters (``$``, ``$$``, ``\\(``, ``\\)``, ``\\[``, ``\\]``; never an escaped
    ``\\$``): one between two stretches of text is a space (``The answer is $5$.``, ``$AB = 3$``), two or more (a
    formula's end and the next one's start: ``$6$ $5$``, ``$6$$5$``) a new line, so two formulas stay two answers."""
    parts = _MATH_DELIMITER.split(text)
    out = [parts[0]]
    for gap, following in zip(parts[1::2], parts[2::2]):
        delimiters = len(_ONE_DELIMITER.findall(gap))
        out.append("\n" if delimiters > 1 and out[-1].strip() and following.strip() else " ")
        out.append(following)
    return "".join(out)


def _grouped(text: str) -> str:
    """``text`` with each number written in groups of three digits apart (``1 000``) as one number (``1000``)."""
    return _SPACED_THOUSANDS.sub(lambda match: re.sub(r"\s", "", match[0]), text)


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
    return f" {match[1]} " if RELATION.fullmatch(match[1].strip()) else match[0]


def _operand(text: str, match: re.Match) -> tuple[str, int]:
    """``(the modulus, where its cut ends)`` after the ``mod`` that ``match`` found."""
    start = match.end()
    if match["open"] and (close := closing_paren(text, start)) > 0:  # (mod n+1): up to the closing parenthesis
        return _CLOSING.sub("", text[start : close + 1]).strip(), close + 1
    if text.startswith("{", start) and (close := _closing_brace(text, start)) > 0:
        return text[start + 1 : close].strip(), close + 1
    if (opening := _PARENTHESIS.match(text, start)) and (close := closing_paren(text, opening.end())) > 0:
        return _CLOSING.sub("", text[opening.end() : close + 1]).strip(), close + 1
    token = _OPERAND.match(text, start)
    return (token[0].strip(), token.end()) if token else ("", start)


def closing_paren(text: str, start: int) -> int:
    """Where the parenthesis open before ``start`` closes, or -1."""
    depth = 0
    for i in range(start, len(text)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth < 0:
            return i
    return -1


def _digits(text: str) -> str:
    """``text`` with every number written in other digits as LaTeX reads it: decimal digits of any script as
    ASCII (``٦`` is 6), a run of superscript digits as a power (``5⁶`` is ``5^{6}``), of subscript digits as a
    subscript, a vulgar fraction as a quotient (``½`` is ``(1/2)``). Any other character with a numeric value
    (``Ⅵ``, ``⑥``) is left, and `unread_numeral` finds it: a value the checker does not read is never skipped."""
    text = "".join(str(unicodedata.decimal(c)) if c > "\x7f" and unicodedata.category(c) == "Nd" else c for c in text)
    text = _SCRIPT_RUN.sub(_scripted, text)
    return "".join(_fraction(c) if unicodedata.decomposition(c).startswith("<fraction>") else c for c in text)


def _scripted(match: re.Match) -> str:
    """A script run as LaTeX: after a value (``5⁶``) its power or subscript; after a space or at the start
    (``5 = ⁶``) the script of nothing, ``{}^{6}``, so it is never taken for a relation's label (``=^{6}``)."""
    run = match[0]
    digits = "".join(unicodedata.normalize("NFKC", c) for c in run)
    alone = "{}" if not match.string[: match.start()][-1:].strip() else ""
    return (
        f"{alone}^{{{digits}}}" if unicodedata.decomposition(run[0]).startswith("<super>") else f"{alone}_{{{digits}}}"
    )


def _fraction(char: str) -> str:
    numerator, _, denominator = unicodedata.normalize("NFKC", char).partition("\u2044")
    return f"({numerator}/{denominator or 1})"


def unread_numeral(text: str) -> str | None:
    """A character of ``text`` with a numeric value that is no ASCII digit once `normal` has run, or None."""
    return next((c for c in text if c > "\x7f" and unicodedata.numeric(c, None) is not None), None)


def unread_word(text: str) -> str | None:
    """A number written as a word in ``text`` (``six``, ``Twenty``, ``hundred``, ``half``), or None: the check reads
    digits, so a word is a value it would skip (``5 or six``)."""
    match = _NUMBER_WORD.search(text)
    return match[0] if match else None


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
                    for piece in top_level_commas(words):
                        pieces += [
                            part for apart in _NUMBERS_APART.split(piece) for part in _ASSIGNED_APART.split(apart)
                        ]
    return [bare for piece in pieces if (bare := _LEADING_DOT.sub("", piece.strip().rstrip(".")).strip())]


def _prose_split(text: str) -> list[str]:
    """``text`` cut at prose words (``6 wait 5``), the words dropped; function names stay."""
    parts, start = [], 0
    for match in _PROSE.finditer(text):
        if match[0].lower() not in _FUNCTIONS:
            parts.append(text[start : match.start()])
            start = match.end()
    return [*parts, text[start:]]


Sides = Literal["constants", "expressions", "all"]


def piece_values(piece: str, sides: Sides = "constants") -> list[object]:
    """What one candidate states: its parse, or the value sides of a chain of relations. Which sides are values
    depends on what the gold is (`_sides`): against a constant or a relation only the constant sides (``6 = 5``
    states 6 and 5; ``x = 5`` and ``a+b = 5`` state 5; ``2+3=5`` states 5 twice); against a gold with unknowns
    (``4x+5``, which no constant equals) every side but one that only names a quantity (`is_name`), so ``1 = 4x+5``
    and ``4y+3 = 4x+5`` state two values, ``y = 4x+5`` and ``f(x) = 4x+5`` one; against a gold that is a name
    (``\\overline{CD}``) every side."""
    parts = RELATION.split(piece)
    if len(parts) == 1:
        value = _side(piece)
        return [value] if value else []
    read = [value for value in map(_side, parts) if value]
    if sides == "all":
        stated = [value for value in read if not isinstance(value[0], str)]
    else:
        stated = [value for value in read if is_constant(value) or (sides == "expressions" and not is_name(value))]
    return stated or ([value] if (value := parsed(piece)) else [])


def value_sides(piece: str) -> int:
    """How many sides of ``piece``'s chain of relations are values, not names (``y = x+3 = y = 2x``: 2). A side with
    glue inside it (``x \\mathrel{\\text{is}} y``, ``x is y``: words or wrapped text between its symbols, which sympy
    reads as one more symbol) is a value, never a name; leading words (``So y``) are prose, not glue."""
    parts = RELATION.split(piece)
    if len(parts) == 1:
        return 0
    return sum(1 for part in parts if (value := _side(part)) and (_glued(part) or not is_name(value)))


def _glued(side: str) -> bool:
    core = _LEADING_WORDS.sub("", side)
    return _bare(core).split() != core.split()


def is_name(value: list[object]) -> bool:
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


def is_relation(value: list[object]) -> bool:
    """Whether a reading is a relation or a statement (``x^2+y^2=25``, ``x \\in [2, 5)``), not a value."""
    from sympy.core.relational import Relational
    from sympy.logic.boolalg import BooleanFunction

    return isinstance(value[0], (Relational, BooleanFunction))  # not Boolean: a Symbol is one


def _side(side: str) -> list[object]:
    return read_side(side)[1]


def read_side(side: str) -> tuple[str, list[object]]:
    """``(the text read, its reading)`` of one side of a relation, or of a candidate that is none. A side that does not
    parse is read again without the math delimiters and the brackets it leaves open (``\\(6`` and ``5\\)`` of
    ``\\(6 = 5\\)``, ``\\left(6`` of ``(6 = 5)``); one that is no constant, without its short words (``So 6 = 5``,
    ``is 72``: prose, not the product of S, o and 6). `unread_operand` probes the text returned, never the text given:
    what is compared is what was probed."""
    value = parsed(side) if side.strip() else []
    if value and isinstance(value[0], str):
        side = SIZED_BRACKET.sub("", _DELIMITER.sub(" ", side)).replace("\\{", "{").replace("\\}", "}").strip()
        while side[:1] in ("(", "[", "{") and open_brackets(side) > 0:
            side = side[1:].strip()
        while side[-1:] in (")", "]", "}") and open_brackets(side) < 0:
            side = side[:-1].strip()
        value = parsed(side) if side else []
    if (
        value
        and not is_constant(value)
        and (bare := _bare(side)) != side
        and bare.strip()
        and not _dropped(side, bare)
        and not _NUMBERS_APART.search(bare)  # 5 is 6: glue between two numbers, never their sum (5 6 reads 11)
    ):
        again = parsed(bare)
        if again and is_constant(again):
            return bare, again
    return side, value


def _dropped(side: str, bare: str) -> str | None:
    """A command `_bare` dropped from ``side`` that is a value on its own (``\\pi`` of ``\\pi {} \\frac{1}{2}``: a
    glue command's braces, but π itself), or None: the bare text is read only when it lost nothing but glue."""
    lost = collections.Counter(_COMMAND.findall(side)) - collections.Counter(_COMMAND.findall(bare))
    return next((name for name in lost if (alone := parsed(name)) and not isinstance(alone[0], str)), None)


def _bare(side: str) -> str:
    """``side`` without what holds no value: every command's braced argument unwrapped, innermost first, but those of
    ``\\frac``, ``\\sqrt`` and ``\\binom`` (``6 \\mathrel{\\text{is}} 5``, ``6 \\bar{\\text{is}} 5``: glue that sympy reads as
    a symbol ``math{is}``), then its words of prose (``So``, ``is``, ``vs``, ``then``; never a function's name)."""
    while (unwrapped := _GLUE.sub(r" \1 ", side)) != side:
        side = unwrapped
    side = _SHORT_WORD.sub(" ", side)
    return _PROSE.sub(lambda match: match[0] if match[0].lower() in _FUNCTIONS else " ", side)


def open_brackets(text: str) -> int:
    return sum(map(text.count, "([{")) - sum(map(text.count, ")]}"))


def is_constant(value: list[object]) -> bool:
    """4, {6}, (6, 7): a value with no unknown in it; not x nor f(2)."""
    from sympy import Basic
    from sympy.core.function import AppliedUndef

    first = value[0]
    if getattr(first, "is_number", False):
        return True
    return isinstance(first, Basic) and not first.free_symbols and not first.atoms(AppliedUndef)


def top_level_commas(text: str) -> list[str]:
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


def unread_operand(text: str) -> str | None:
    """An operand of ``text`` that math-verify read past, or None.

    math-verify reads the last value of what it cannot parse whole (``6 \\hskip1em 5``, ``\\cancel{6} 5``,
    ``\\pi \\mid 5``, ``x {} 5`` read as 5): whatever LaTeX sits between two values, an operand the checker
    skipped is a second answer it did not see. Each side of a relation is tested on its own (``x_1 = 13``), and so
    is every operand (`OPERAND`: a number, a letter standing alone, a command such as ``\\pi``, ``\\infty`` or
    ``\\color``). Checks what was read, not how it was spelled, so it needs no list of separators:

    * a side that reads as nothing (or only as its own text) was skipped whole when it states a value
      (`_skipped_whole`: ``\\color{red}{6}``, ``^{6}`` of ``5 = ⁶``, ``x \\mid y`` of ``y = x \\mid y = 2x``); a name
      that reads as nothing (``\\angle ABC`` of ``\\angle ABC = 30^\\circ``) states none;
    * an operand whose replacement (a number: another of the same shape; anything else: a letter the side does not
      hold) changes the reading was read; one whose replacement does not is deleted, and when the deletion leaves
      the reading unchanged too, it was not read. The replacement goes first because it still parses, where a
      deletion can leave LL parsing an invalid text for seconds; a 0 is always deleted, as ``0 \\frac{5}{9}`` (the
      mixed number) reads it yet states 5/9.
    """
    for raw in RELATION.split(text):
        if (apart := _glued_numbers(raw)) is not None:
            return apart
        side, value = read_side(raw)
        if not value or isinstance(value[0], str):  # read as nothing, or as its own text: nothing parsed
            if skipped := _skipped_whole(side, value):
                return skipped
            continue
        spare = next((letter for letter in _SPARE_LETTERS if letter not in side), "")  # none: deleted alone
        for match in OPERAND.finditer(side):
            token = match[0]
            if not NUMBER.fullmatch(token):
                other = spare
            elif float(token) != 0:
                other = token.translate(_ANOTHER_DIGIT)  # same shape, another value: it still parses, and fast
            else:
                other = ""  # 0 changes no sum (0 \\frac{5}{9} reads 5/9 as a mixed number): deleted
            if other and str(parsed(f"{side[: match.start()]}{other}{side[match.end() :]}")[:1]) != str(value[:1]):
                continue  # its value changes what is read: it was read
            again = parsed(f"{side[: match.start()]} {side[match.end() :]}")
            if again and str(again[0]) == str(value[0]):
                return token
    return None


def _glued_numbers(side: str) -> str | None:
    """The second of two numbers that only glue separates in ``side`` (``5 is 6``, ``6 \\mathrel{\\text{is}} 5``:
    without the glue, two numbers apart, two answers), or None."""
    bare = _bare(side)
    if bare == side or (apart := _NUMBERS_APART.search(bare)) is None:
        return None
    return NUMBER.match(bare, apart.end() + (bare[apart.end()] in "+-"))[0]


def _skipped_whole(side: str, value: list[object]) -> str | None:
    """The operand by which a side read as nothing (``[]``) or only as its own text states a value, or None: a
    number (``\\color{red}{6}``); any operand of a side read as text (``x \\mid y``: math-verify found mathematics
    there and could not parse it); the first operand of a side that, without its glue and prose (`_bare`), reads as
    a constant (``\\color{red}{\\pi}``). A name such as ``\\angle ABC`` (read as nothing, no constant) states none."""
    if number := NUMBER.search(side):
        return number[0]
    token = OPERAND.search(side)
    if token is None:
        return None
    if value:
        return token[0]
    bare = _bare(side)
    return token[0] if bare.strip() and (again := parsed(bare)) and is_constant(again) else None
