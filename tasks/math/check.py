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
list, the same values in any order (a value stated twice is one value; one fewer or one more fails); against a set or
a pair (``\\{1, 2\\}``, ``(5, 6)``), its elements listed without the brackets (a set's in any order, ``2, 1``; a pair's
in its order, ``x = 5, y = 6``); otherwise the
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
  ``\\implies``, ``≡``, ...) is a hedge when two of its value sides differ (`piece_values`: the constant sides,
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
* a number math-verify did not read (`unread_operand`: deleting it leaves the parse unchanged, as in
  ``6 \\hskip1em 5`` or ``\\cancel{6} 5``, read as 5): a second answer the checker skipped, whatever
  LaTeX sits between the two; more than ``MAX_OPERANDS`` numbers are refused rather than left unprobed;
* an answer ``math_verify`` cannot parse.

What is compared is always the reading of the candidates probed above (`reply.read_side`: a candidate's text once its
prose words and glue are dropped), never math-verify's reading of the whole reply, which is its last value:
``6 \\mathrel{\\text{is}} 5`` and ``6 \\bar{\\text{is}} 5 = 5`` state 6 and 5, never 5. Numbers grouped by threes
with spaces (``1 000``, ``12\\ 345``) are one number; a subscript's digit and the number after it are one value
(``\\log_2 4``).

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
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Literal

if __package__ in (None, ""):  # run as a script (python -I tasks/math/check.py): the repository root is not on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tasks.math import forms  # noqa: E402
from tasks.math.reading import MAX_DEPTH, nesting, parsed, same  # noqa: E402
from tasks.math.reply import (  # noqa: E402
    MAX_OPERANDS,
    OPERAND,
    RELATION,
    SIZED_BRACKET,
    Sides,
    candidates,
    closing_paren,
    is_constant,
    is_name,
    is_relation,
    normal,
    open_brackets,
    piece_values,
    top_level_commas,
    unqualified,
    unread_numeral,
    unread_operand,
    unread_word,
    value_sides,
)

RECURSION_LIMIT = 10_000  # frames: latex2sympy and sympy recurse ~7 per nesting level, MAX_DEPTH levels at most


GOLD_READ = "gold read"  # written to stderr once the gold parsed: from then on a death is the answer's doing
_PERCENT = re.compile(r"\\?%")
# a word of prose left before a relation once longer words were cut (The line is $y = 2x$: is y = 2x)
_LEADING_PROSE = re.compile(r"^\s*(?:(?:is|so|as|be|by|if|of|on|to|at|it|we|us)\s+)+", re.IGNORECASE)
_PERCENT_SIGN = re.compile(r"\s*\\?%\s*$")  # the sign that ends a percentage: 25%, 25 \%
_PLAIN_NUMBER = re.compile(r"^\s*(?:[a-zA-Z]\s*=\s*)?[-+]?\d+(?:\.\d+)?\s*$")  # 25, -2.5, x = 25


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
    sides: int = 0  # value: how many sides of its chain of relations are values (`value_sides`: 1 for y = 2x)


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
        if len(pieces) > 1:
            return _read_values(gold, pieces)
        return _read_value(gold, pieces[0] if pieces else residue, moduli)  # read as an answer's one piece is
    except Exception as exc:  # sympy on a malformed gold: the row's fault, never the candidate's
        return None, f"the gold {gold[:80]!r} does not parse ({type(exc).__name__})"


def _read_value(gold: str, residue: str, moduli: list[str]) -> tuple[Gold | None, str]:
    value = parsed(residue)
    itself = bool(value) and same(value, value)
    same(value, parsed("0"))  # a probe: a gold sympy cannot compare hangs here
    if not value:
        return None, f"the gold {gold[:80]!r} does not parse"
    if (skipped := unread_operand(residue)) is not None:  # the last entry alone would pass for it
        return None, f"the checker does not read the operand {skipped} of the gold {gold[:80]!r}"
    if not itself:
        return None, f"the gold {gold[:80]!r} is not equal to itself"
    percent = parsed(_PERCENT.sub("", residue)) if "%" in residue else []
    sides = value_sides(residue) if is_relation(value) else 0
    return Gold(gold, "value", value=value, modulus=(moduli or [""])[0], percent=percent, sides=sides), ""


def _read_values(gold: str, pieces: list[str]) -> tuple[Gold | None, str]:
    """A gold that lists several values (``1,-2``, ``3, 5, 7``, ``12\\text{ and }13``): each piece read like a reply's."""
    values: list[list] = []
    for piece in pieces:
        if (skipped := unread_operand(piece)) is not None:
            return None, f"the checker does not read the operand {skipped} of the gold {gold[:80]!r}"
        if not (read := piece_values(piece, "expressions")):
            return None, f"the value {piece[:40]!r} of the gold {gold[:80]!r} does not parse"
        values += read
    if not all(same(value, value) for value in values):
        return None, f"a value of the gold {gold[:80]!r} is not equal to itself"
    return Gold(gold, "values", values=tuple(values)), ""


def _sides(gold: Gold) -> Sides:
    """Which sides of an answer's relation `piece_values` reads as values against ``gold``."""
    if gold.form == "values":
        return "expressions"
    if is_relation(gold.value) or is_constant(gold.value):
        return "constants"
    return "all" if is_name(gold.value) else "expressions"


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
    if (numeral := unread_numeral(text)) is not None:
        return "wrong_answer", f"a number written as {numeral!r} is not read (write it with digits)"
    if (deep := nesting(text)) > MAX_DEPTH:
        return "wrong_answer", f"brackets nested {deep} deep (at most {MAX_DEPTH} are read)"
    if gold.form == "text":
        items = forms.words(text)
        return (
            ("passed", "")
            if items == gold.words
            else ("wrong_answer", f"{', '.join(items)[:80]} is not {gold.written}")
        )
    if (word := unread_word(text)) is not None:  # 5 or six, 5 \text{or three}: a value the check does not read
        return "wrong_answer", f"a number written as the word {word!r} is not read (write it with digits)"
    text = forms.plain(text).strip()
    if gold.form == "base":
        return _judge_numeral(gold, text)
    text, moduli = unqualified(text)
    for modulus in moduli:  # cut, never compared (but with a class gold): one value, with nothing else in it
        if len(candidates(modulus)) > 1 or RELATION.search(modulus) or unread_operand(modulus) is not None:
            return "wrong_answer", f"the modulus {modulus[:40]!r} is not one value"
    if gold.modulus and (other := _other_modulus(moduli, gold.modulus)) is not None:
        return "wrong_answer", f"modulus {other[:40]} is not the gold's {gold.modulus[:40]}"
    pieces = candidates(_unbracketed(text) if gold.form == "values" else text)
    if len(pieces) > max(max_answers, len(gold.values)):
        return "wrong_answer", f"{len(pieces)} separate answers (one answer is graded)"
    if len(OPERAND.findall(text)) > MAX_OPERANDS:
        return "wrong_answer", f"more than {MAX_OPERANDS} operands (numbers, letters, commands) in one answer"
    for piece in pieces:
        if (skipped := unread_operand(piece)) is not None:
            return (
                "wrong_answer",
                f"the checker does not read the operand {skipped} in {piece[:60]!r} (several answers)",
            )
    relation = gold.form == "value" and is_relation(gold.value)
    for piece in pieces if relation else ():  # y = x+3 = y = 2x chains two equations where the gold states one
        if (count := value_sides(piece)) > gold.sides:
            return "wrong_answer", f"a chain of relations with {count} values where the gold states {gold.sides}"
    if len(pieces) > 1 and (listed := _elements(gold)) is not None:  # 1, 2 for \{1, 2\}; x = 5, y = 6 for (5, 6)
        return _judge_elements(listed, [value for piece in pieces for value in piece_values(piece, "expressions")])
    values = [value for piece in pieces for value in piece_values(piece, _sides(gold))]
    if gold.form == "values":
        return _judge_values(gold, values)
    if (several := _several(values)) is not None:
        return several
    # What is compared is a reading of the pieces probed above, never of the text around them: math-verify reads
    # `6 \mathrel{\text{is}} 5` whole as its last value, 5, while the piece states 6*is*5.
    whole = [reading for piece in pieces if (reading := parsed(_LEADING_PROSE.sub("", piece)))] if relation else values
    if relation and (several := _several(whole)) is not None:  # values were compared just above
        return several
    if not whole:
        return "wrong_answer", f"no mathematical answer found in {text[:80]!r}"
    stated = whole[0]
    if same(gold.value, stated) or (gold.modulus and _same_class(gold.value, stated, gold.modulus)):
        return "passed", ""
    if "%" in text or gold.percent:  # 25% for a GSM8K gold of 25, 50 for a gold of 50\%: the sign is optional
        # the probed pieces again, read as above, never the whole text (`= {6} 5%` states 11, not 5); a sign is
        # only left off a number it ends (`25%`), never deleted inside an expression (`5 + \log_{100}100\%`)
        unsigned = [_PERCENT_SIGN.sub("", piece) for piece in pieces]
        if any(
            "%" in piece or (piece != signed and not _PLAIN_NUMBER.match(piece))
            for piece, signed in zip(unsigned, pieces)
        ):
            return "wrong_answer", f"{str(stated[-1])[:80]} is not {str(gold.value[-1])[:80]}"
        bare = (
            [parsed(piece) for piece in unsigned]
            if relation
            else [value for piece in unsigned for value in piece_values(piece, _sides(gold))]
        )
        if bare and all(bare) and all(same(gold.percent or gold.value, reading) for reading in bare):
            return "passed", ""
    return "wrong_answer", f"{str(stated[-1])[:80]} is not {str(gold.value[-1])[:80]}"


def _several(readings: list[list]) -> tuple[str, str] | None:
    """The verdict on readings that are not all one value (a hedge), or None when they are."""
    for first, other in zip(readings, readings[1:]):
        if not same(first, other):
            return "wrong_answer", f"several different answers: {', '.join(str(v[-1])[:40] for v in readings[:4])}"
    return None


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


def _elements(gold: Gold) -> tuple[Gold, bool] | None:
    """A gold that is a set or a pair in brackets (``\\{1, 2\\}``, ``(5, 6)``, ``(1, \\frac{1}{2})``) as the list of
    its elements, and whether their order counts (a tuple's does, a set's does not); None for any other gold. An
    answer may state them without the brackets: ``1, 2`` or ``2, 1`` for the set, ``x = 5, y = 6`` for the pair (math
    -verify reads ``(5, 6)`` as an open interval too: its two ends are the pair)."""
    from sympy import FiniteSet, Interval, Tuple

    value = gold.value[0] if gold.form == "value" and gold.value else None
    if isinstance(value, FiniteSet) and len(value.args) > 1:
        items, ordered = value.args, False
    elif isinstance(value, Tuple) and len(value.args) > 1:
        items, ordered = value.args, True
    elif isinstance(value, Interval) and value.left_open and value.right_open and value.measure.is_finite:
        items, ordered = (value.left, value.right), True
    else:
        return None
    return Gold(gold.written, "values", values=tuple([item] for item in items)), ordered


def _judge_elements(listed: tuple[Gold, bool], values: list[list]) -> tuple[str, str]:
    """An answer that lists a set's or a pair's elements without the brackets: a set's in any order (`_judge_values`),
    a pair's one for one in its order."""
    gold, ordered = listed
    if not ordered:
        return _judge_values(gold, values)
    if len(values) == len(gold.values) and all(same(item, value) for item, value in zip(gold.values, values)):
        return "passed", ""
    return "wrong_answer", f"{', '.join(str(v[-1])[:30] for v in values[:4])} is not the pair {gold.written[:60]}"


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
    bare = SIZED_BRACKET.sub("", text).strip()
    if bare.startswith("\\{") and bare.endswith("\\}"):
        inner = bare[2:-2]
    elif bare.startswith("(") and closing_paren(bare, 1) == len(bare) - 1:
        inner = bare[1:-1]
    else:
        return text
    return inner if len(top_level_commas(inner)) > 1 and open_brackets(inner) == 0 else text


def _other_modulus(moduli: list[str], gold_modulus: str) -> str | None:
    """The first of ``moduli`` that is not ``gold_modulus``: a class modulo 5 is not the gold's class modulo 7."""
    gold_value = parsed(gold_modulus)
    for modulus in moduli:
        value = parsed(modulus)
        if not (value and gold_value and same(gold_value, value)) or unread_operand(modulus) is not None:
            return modulus  # 5 \mid 7 reads as 7: a modulus is probed like an answer
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
