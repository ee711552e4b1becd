"""Answer forms the math check compares without math-verify's reading: text, numerals in another base, and the
money, unit and separator spellings around a number. Pure string work (no sympy): `tasks.math.check` decides
the gold's form with these and compares an answer in that form.

* **Text** (`is_text`): a gold wholly inside ``\\text{...}``/``\\mbox{...}``/``\\textbf{...}`` with a letter in it
  (``\\text{east}``, ``\\text{(C)}``, ``\\text{A,C,F}``), a bare word (``Evelyn``), multiple-choice capitals (``C``,
  ``(E)``, ``B, C``) or a clock time (``9\\text{ a.m.}``).
  An answer passes when its items (`words`: cut at commas, each without case, spaces, periods and the punctuation
  around it) are the gold's, in any order: ``East.``, ``\\textbf{east}``, ``$\\text{East}$`` pass for ``\\text{east}``;
  ``east or west`` does not (never a substring).
* **Base-n numerals** (`numeral`): a gold ``40_9``, ``4210_{5}``, ``0.0011_{2}``, ``152A_{11}``. An answer passes
  when it is one numeral of the same base (subscript written, or left off since the question names the base: ``40``)
  with the same value (``040_9``); ``36`` (the value in base 10) and ``40_{10}`` do not.
* **Money, units** (`plain`): ``\\$`` goes, and a unit in text that ends a value (``15\\mbox{ cm}^2``,
  ``\\text{ square inches}``, ``\\text{ dollars}``) is not read, on either side: the value is compared, never the
  unit; so is a common unit written bare after a number at the end of a value (``12 km/h``, ``5 cm^2``,
  ``3 hours``, ``25 m^2``; two letters at least but for the metre with its power, so a variable such as ``5 m`` or
  ``5 x`` is never taken for one; the scale after degrees, ``25°C``, goes too). A ratio of two numbers (``3:1``) is the pair ``(3, 1)``. (LaTeX thousands separators, ``10,\\!080``, are
  `tasks.math.check.normal`'s.)
"""

from __future__ import annotations

import re
from fractions import Fraction

# Commands whose argument is text, not mathematics.
_TEXT_COMMAND = r"\\(?:text|textbf|textit|textrm|textsf|texttt|textnormal|textup|mbox|hbox)\s*\{"
_WHOLE_TEXT = re.compile(rf"^\s*{_TEXT_COMMAND}")
_ANY_TEXT = re.compile(rf"{_TEXT_COMMAND}|\\(?:mathrm|mathbf|mathit|mathsf|operatorname)\s*\{{")
_TEXT_ARGUMENT = re.compile(rf"(?:{_ANY_TEXT.pattern})([^{{}}]*)\}}")
_BARE_WORDS = re.compile(r"^[A-Za-z][A-Za-z .'\-]*$")
_LONG_WORD = re.compile(r"[A-Za-z]{3,}")
_CHOICES = re.compile(r"^\(?[A-Z]\)?(?:\s*,\s*\(?[A-Z]\)?)*$")  # multiple-choice letters
_MATH_WORDS = {"sin", "cos", "tan", "cot", "sec", "csc", "log", "exp", "sqrt", "ln", "pi", "infty", "inf"}
_CLOCK = re.compile(r"(?<![A-Za-z])[ap]\.?\s*m\.?(?![A-Za-z])", re.IGNORECASE)
_DELIMITERS = re.compile(r"\$|\\[()\[\]]")
_SURROUNDING = ".,;:!?()[]'\"`"

_NUMERAL = re.compile(
    r"^(?P<sign>-?)\(?(?P<digits>[0-9A-Za-z]+(?:\.[0-9A-Za-z]+)?)\)?"
    r"(?:_\s*(?:\{\s*\(?\s*(?P<braced>\d{1,2})\s*\)?\s*\}|(?P<bare>\d)))?$"
)

_DOLLAR = re.compile(r"\\\$")
_SEPARATORS = {"or", "and", "either", "nor"}
_SEPARATED = re.compile(r"(?<![A-Za-z])(?:or|and|either|nor)\s*$", re.IGNORECASE)
# A unit: a text argument of letters (``\text{ square inches}``, ``\mbox{ m}``) with the square or cube after it.
_UNIT = re.compile(
    r"(?<=[0-9A-Za-z}).%\]])[ \t]*"  # after a value on its line: text on a line of its own is an answer of its own
    r"\\(?P<command>text|textrm|textnormal|textup|mbox|mathrm)\s*\{(?P<words>\s*[A-Za-z][A-Za-z. ]*(?:/\s*[A-Za-z]+)?)\}"
    r"(?:\s*\^\s*(?:\{\s*[23]\s*\}|[23]))?"
    r"(?=\s*(?:$|[,;)\]}]|\\\}|\\right|\\\\))"  # it ends a value: text between two values is prose, cut there
)
_UNIT_WORDS = (
    "km|cm|mm|nm|kg|mg|ml|mL|kW|kWh|mph|kph|ft|yd|mi|lb|lbs|oz|hr|hrs|min|mins|sec|secs|"
    "hours?|minutes?|seconds?|days?|weeks?|months?|years?|dollars?|cents?|euros?|"
    "meters?|metres?|centimeters?|centimetres?|millimeters?|kilometers?|kilometres?|miles?|feet|foot|inches|"
    "yards?|pounds?|ounces?|grams?|kilograms?|liters?|litres?|gallons?|degrees?|units?|"
    "apples?|people|students?|pages?|books?|marbles?|cookies?|eggs?|pieces?"
)
_POWER = r"\s*\^\s*(?:\{\s*[23]\s*\}|[23])"  # a square or a cube: cm^2, m^{3}
# a unit word, or the metre with its power (25 m^2: a bare 5 m is a variable, never a unit)
_UNIT_TERM = rf"(?:(?:{_UNIT_WORDS})(?:{_POWER})?|m{_POWER})"
# the scale after a degree sign (25°C, 25^\circ F): the degrees are read, the scale is a unit
_SCALE = re.compile(r"(?<=\d)(\s*(?:°|\^\s*\{?\s*\\circ\s*\}?))\s*[CFK](?![A-Za-z])")
# a bare unit ending a value: 12 km/h, 5 cm^2, 3 hours; the number before it and the end of the value after it
_BARE_UNIT = re.compile(
    rf"(?<=\d)[ \t]+(?:sq\.?[ \t]+|square[ \t]+|cubic[ \t]+)?{_UNIT_TERM}(?:\s*/\s*(?:{_UNIT_TERM}|[hsm]))?"
    r"(?![A-Za-z])(?=\s*(?:$|[,;)\]}]|\\\}|\\right|\\\\))"
)
_RATIO = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*:\s*(-?\d+(?:\.\d+)?)\s*$")


def is_text(gold: str) -> bool:
    """Whether the gold is text (see the module docstring)."""
    if _WHOLE_TEXT.match(gold) and (inner := _unwrapped(gold)) is not None:
        return bool(re.search(r"[A-Za-z]", inner))  # \\text{13} is a number
    if _CLOCK.search(gold) and re.search(r"\d", gold) and _ANY_TEXT.search(gold):
        return True  # 9\\text{ a.m.}: the clock is part of the value, never a unit to drop
    bare = gold.strip()
    if _CHOICES.match(bare):
        return True  # C, (E), B, C: choices, never the symbols C and E
    return bool(_BARE_WORDS.match(bare)) and any(w.lower() not in _MATH_WORDS for w in _LONG_WORD.findall(bare))


def _unwrapped(text: str) -> str | None:
    """The argument of the text command that spans all of ``text``, or None when it does not."""
    start = text.index("{")
    depth = 0
    for i in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[start + 1 : i] if not text[i + 1 :].strip() else None
    return None


def words(text: str) -> tuple[str, ...]:
    """``text``'s items as compared with a text gold (pass it LaTeX spacing already folded, as `check.normal` does):
    text commands unwrapped, math delimiters dropped, cut at commas, each item without case, spaces, periods and
    the punctuation around it; sorted (order is not read)."""
    while (unwrapped := _TEXT_ARGUMENT.sub(r" \1 ", text)) != text:
        text = unwrapped
    items = []
    for item in _DELIMITERS.sub(" ", text).split(","):
        item = re.sub(r"^\s*and\s+", "", item.casefold())
        items.append(re.sub(r"[\s.]+", "", item).strip(_SURROUNDING))
    return tuple(sorted(items))


def numeral(text: str, base: int | None = None) -> tuple[Fraction, int] | None:
    """``(value, base)`` of ``text`` when it is one numeral with a base subscript (``40_9``, ``4210_{5}``); with
    ``base``, a numeral without one is read in that base (``40``). None when it is none, or a digit is not one of
    its base's."""
    found = _NUMERAL.match(_DELIMITERS.sub("", text).strip().replace(" ", ""))
    if not found or not re.search(r"\d", found["digits"]):
        return None  # a_{12} is a variable
    written = found["braced"] or found["bare"]
    if written is None and base is None:
        return None
    base = int(written) if written else base
    if not 2 <= base <= 36:
        return None
    whole, _, fraction = found["digits"].upper().partition(".")
    try:
        digits = [int(d, 36) for d in whole + fraction]
    except ValueError:
        return None
    if any(d >= base for d in digits):
        return None
    value = Fraction(sum(d * base ** (len(digits) - 1 - i) for i, d in enumerate(digits)), base ** len(fraction))
    return (-value if found["sign"] else value), base


def plain(text: str) -> str:
    """``text`` with its money sign, LaTeX thousands separators and units dropped, and a ratio as a pair (see the
    module docstring). A text argument that holds a separator word (``\\text{ or }``) is not a unit and stays."""
    text = _BARE_UNIT.sub(" ", _UNIT.sub(_unit, _SCALE.sub(r"\1", _DOLLAR.sub(" ", text))))
    return _RATIO.sub(r"(\1, \2)", text)


def _unit(match: re.Match) -> str:
    unit = match["words"].strip()
    if _SEPARATED.search(match.string[: match.start()]):
        return match[0]  # 5 or \\text{VW}: an answer after a separator word, not a unit
    if set(unit.lower().replace(".", " ").split()) & _SEPARATORS:
        return match[0]
    if match["command"] == "mathrm" and len(unit) < 2:
        return match[0]  # \mathrm{e}, \mathrm{i}, \mathrm{d}: constants and differentials, not units
    return " "
