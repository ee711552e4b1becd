"""A seeded family of small competitive-programming tasks, written as CodeContests rows.

Each task is a **template** (an operation on a number, a word, a line of
words or an array), a **level** and **parameters** stated in the statement
(``Parameters: K = 17.``). The reference program starts with the same
parameters as assignments (``K = 17``) followed by a body that depends only on
the template and level, so what a policy must learn is: recognise the
operation from the sentence, copy the parameters, read the input in the
level's layout.

* Level 1: the base operation on one input.
* Level 2: the base operation on ``t`` test cases (first line ``t``; one
  answer line per case).
* Level 3: a harder variant of the operation (a second parameter or a
  combined condition) on ``t`` test cases.

Expected outputs come from a host-side oracle per variant, independent of the
reference program (tests check that the two agree in a real interpreter).
Each row also carries a deliberately wrong program (``incorrect_solutions``).

Every task's tests reject a family of degenerate programs (`tasks/degenerate.py`: constants, per case and per
line, echo, the reference with other parameter values or the template's other operation; `degenerates`), judged at
generation time as the grader judges; where the tests as drawn do not, hidden tests that separate are added
(`drawn_tests`), and a task no such test can fix is never drawn. A program with the task's meaning
(`Variant.meaning`) is a solution, not a degenerate program; the catalogue holds one task per meaning.

Split: for each variant, the HELDOUT_PERCENT of its parameter tuples with the
smallest sha256 of (template, variant, parameters) are held out (at least
one, never all); levels 1 and 2 of the same parameters share a variant, so
they land on the same side. The split does not depend on the seed. Every
template and level has parameter values on both sides, so held-out tasks are
new parameters of operations seen in training. The seed picks which tasks are
drawn and every test input: the same seed writes the same bytes.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import string
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache, cached_property, lru_cache, partial
from itertools import combinations, permutations, product
from pathlib import Path
from typing import Any, Literal

from tasks import degenerate
from tasks.degenerate import Degenerate
from tasks.errors import TaskError

Split = Literal["train", "heldout"]
ParamsIn = Literal["statement", "input"]
Kind = Literal["int", "word", "line", "ints"]
Params = dict[str, Any]

LEVELS = (1, 2, 3)
HELDOUT_PERCENT = 20  # share of each variant's parameter values held out
PUBLIC_TESTS = 1  # shown in the statement as the example; graded too
HIDDEN_TESTS = 6
# Draws of the task's own stream spent looking for a hidden test that rejects a degenerate program still passing
# (docs/generated_tasks.md "Degenerate programs: the whole family"); then a test is built on a case that separates
# one, searched among every n the statement allows (one-integer inputs) or WITNESS_DRAWS cases of the task's own
# distribution: at seeds 0, 1, 2 and 7, every task but the two whose every answer is 0 ends with none passing (two
# of seed 0's needed the search: divisible/L1 with D/2 or D/3, a multiple of D/2 not of D is 1 draw in 300).
STRENGTHEN_TRIES = 400
WITNESS_DRAWS = 2000
TIME_LIMIT_S = 2
MEMORY_LIMIT_BYTES = 256 << 20
LETTERS = string.ascii_lowercase

# How one case of each kind is read by the reference program, and described in the statement.
READ: dict[Kind, str] = {
    "int": "n = int(input())",
    "word": "s = input().strip()",
    "line": "s = input()",
    "ints": "n = int(input())\na = list(map(int, input().split()))",
}
DESCRIBE: dict[Kind, str] = {
    "int": "a line with an integer n (1 <= n <= 10000)",
    "word": "a line with a string s of 1 to 12 lowercase letters",
    "line": "a line with 2 to 6 words of lowercase letters separated by single spaces",
    "ints": "a line with n (1 <= n <= 20), then a line with n integers a_1 ... a_n (0 <= a_i <= 99)",
}


class GeneratorError(TaskError):
    """A generation request the family cannot satisfy (unknown level, more tasks than exist)."""


@dataclass(frozen=True)
class Variant:
    """One operation: its sentence, parameter space, program bodies, oracle and input generator."""

    name: str
    sentence: str  # names the parameters; their values follow on the "Parameters:" line
    params: Callable[[], list[Params]]
    body: str  # reference body, reads nothing: the case is already in n / s / a
    wrong: str  # a deliberately wrong body
    answer: Callable[[Any, Params], str]  # oracle: one case -> its answer line
    case: Callable[[random.Random, Params], Any]  # one random case
    key: Callable[[Params], Any] | None = None  # `meaning`, where several parameter values mean one thing

    def meaning(self, params: Params) -> Any:
        """What the variant computes with ``params``: two meanings equal within a template give the same answers on
        every input the statement allows (one task per meaning; a program with the task's own meaning is no
        degenerate program). ``key`` for any parameter values (it never raises), else the variant and values."""
        return self.key(params) if self.key else (self.name, tuple(sorted(params.items())))


@dataclass(frozen=True)
class Template:
    """An operation family on one kind of input: its base variant and its harder one."""

    name: str
    kind: Kind
    base: Variant  # levels 1 and 2
    hard: Variant  # level 3


@dataclass(frozen=True)
class TaskSpec:
    """A distinct task: template, level, parameter values (before any test is drawn)."""

    template: str
    level: int
    params: tuple[tuple[str, Any], ...]

    @property
    def variant(self) -> Variant:
        template = TEMPLATES[self.template]
        return template.base if self.level < 3 else template.hard

    @property
    def task_id(self) -> str:
        return f"{self.template}/L{self.level}/" + ",".join(f"{k}={v}" for k, v in self.params)

    @property
    def split(self) -> Split:
        return "heldout" if self.params in _heldout(self.template, self.level == 3) else "train"


Cases = tuple[Any, ...]  # one test: its cases (one at level 1), as the variant's input generator drew them


@dataclass(frozen=True)
class DrawnTests:
    """A task's tests as drawn cases, and what the degenerate-program check (`tasks/degenerate.py`) made of them."""

    public: tuple[Cases, ...]
    hidden: tuple[Cases, ...]  # the HIDDEN_TESTS drawn, then the ones added to reject a degenerate program
    added: int  # hidden tests added (0: the task was strong as drawn)
    survivors: tuple[str, ...]  # degenerate programs that still pass every test: `draw` drops the task


@dataclass(frozen=True)
class GeneratedTask:
    """A rendered task: the row the loader reads and its two programs."""

    spec: TaskSpec
    row: dict[str, Any]  # a CodeContests row
    reference: str
    wrong: str
    added: int = 0  # hidden tests added to reject a degenerate program
    survivors: tuple[str, ...] = ()  # degenerate programs passing every test (never in what `draw` returns)


# ---- input generators -------------------------------------------------------------------------------


def _letters(p: Params) -> list[str]:
    return [v for v in p.values() if isinstance(v, str)]


def _word(rng: random.Random, p: Params, lo: int = 1, hi: int = 12, keep: bool = False) -> str:
    """Letters biased towards the parameters' letters; ``keep``: at least one other letter survives removal."""
    pool = _letters(p) * 2 + rng.sample(LETTERS, 3)
    word = "".join(rng.choice(pool) for _ in range(rng.randint(lo, hi)))
    others = [c for c in LETTERS if c not in _letters(p)]
    return word[:-1] + rng.choice(others) if keep and not set(word) - set(_letters(p)) else word


def _line(rng: random.Random, p: Params) -> str:
    """Words biased towards the parameters' letters, one of them without those letters and no palindrome."""
    words = [_word(rng, p, 1, 6) for _ in range(rng.randint(1, 5))]
    plain = rng.sample([c for c in LETTERS if c not in _letters(p)], rng.randint(2, 4))
    words.insert(rng.randint(0, len(words)), "".join(plain))
    return " ".join(words)


def _ints(rng: random.Random, lo_n: int = 1, hi_n: int = 10, plant: Sequence[int] = ()) -> list[int]:
    """n random values in 0..99; each of ``plant`` (boundary values) replaces one of them half the time."""
    values = [rng.randint(0, 99) for _ in range(rng.randint(lo_n, hi_n))]
    for value in plant:
        if rng.random() < 0.5:
            values[rng.randrange(len(values))] = value
    return values


def _multiple(rng: random.Random, *divisors: int) -> int:
    """A third of the time any n in 1..10000, else a multiple of one of ``divisors`` or (as often as of all
    of them together) of their lcm."""
    if rng.random() < 1 / 3:
        return rng.randint(1, 10000)
    step = rng.choice(list(divisors) + [math.lcm(*divisors)] * len(divisors))
    return step * rng.randint(1, 10000 // step)


def _yes_or_no(rng: random.Random, d: int, e: int) -> int:
    """A third of the time any n in 1..10000; else as often a multiple of D that E does not divide (YES; E never
    divides D) as a multiple of E or of lcm(D, E) (NO: what a program ignoring E or D answers wrong)."""
    roll = rng.random()
    if roll < 1 / 3:
        return rng.randint(1, 10000)
    if roll < 2 / 3:
        return next(n for n in iter(lambda: d * rng.randint(1, 10000 // d), None) if n % e)
    step = rng.choice([e, math.lcm(d, e)])
    return step * rng.randint(1, 10000 // step)


def _divisible_not_key(p: Params) -> Any:
    """YES when D divides n and E does not: the same answers as D and lcm(D, E) (n >= 1)."""
    return ("divisible_not", abs(p["D"]), math.lcm(p["D"], p["E"])) if p["D"] and p["E"] else tuple(p.items())


def _unordered(name: str, a: str, b: str) -> Callable[[Params], Any]:
    """The key of a symmetric operation of two letters: (C, D) and (D, C) are one task."""
    return lambda p: (name, frozenset((p[a], p[b])))


def _largest(name: str) -> Callable[[Params], Any]:
    """The K-th largest and the sum of the K largest are one operation at K = 1: the largest."""
    return lambda p: ("largest",) if p["K"] == 1 else (name, p["K"])


def _shift(c: str, k: int) -> str:
    return chr((ord(c) - 97 + k) % 26 + 97)


def _grid(**ranges: Iterable[Any]) -> Callable[[], list[Params]]:
    """Every combination of the named ranges."""
    return lambda: [dict(zip(ranges, values)) for values in product(*ranges.values())]


def _pairs(a: str, b: str, ordered: bool) -> Callable[[], list[Params]]:
    """Two distinct letters; unordered pairs when the operation is symmetric (else (C, D) and (D, C) would
    be two tasks with one meaning, and the split could put them on different sides)."""
    return lambda: [{a: x, b: y} for x, y in (permutations if ordered else combinations)(LETTERS, 2)]


def _join(values: Iterable[Any]) -> str:
    return " ".join(map(str, values))


# ---- the templates ----------------------------------------------------------------------------------

_CAESAR = "''.join(chr((ord(c) - 97 + K) % 26 + 97){} for {})"
_ODD = "[x * K if i % 2 == {} else x for i, x in enumerate(a)]"

TEMPLATES: dict[str, Template] = {
    t.name: t
    for t in [
        Template(
            "sum_plus",
            "ints",
            Variant(
                "sum_plus",
                "Print the sum of the numbers plus K.",
                _grid(K=range(1, 201)),
                "print(sum(a) + K)",
                "print(sum(a))",
                lambda a, p: str(sum(a) + p["K"]),
                lambda r, p: _ints(r),
            ),
            Variant(
                "sum_mod",
                "Print the sum of the numbers modulo M.",
                _grid(M=range(2, 201)),
                "print(sum(a) % M)",
                "print(sum(a) // M)",
                lambda a, p: str(sum(a) % p["M"]),
                lambda r, p: _ints(r),
            ),
        ),
        Template(
            "count_char",
            "word",
            Variant(
                "count_one",
                "Print how many times the letter C occurs in s.",
                _grid(C=LETTERS),
                "print(s.count(C))",
                "print(len(s) - s.count(C))",
                lambda s, p: str(s.count(p["C"])),
                _word,
            ),
            Variant(
                "count_two",
                "Print how many letters of s are C or D.",
                _pairs("C", "D", ordered=False),
                "print(s.count(C) + s.count(D))",
                "print(s.count(C))",
                lambda s, p: str(s.count(p["C"]) + s.count(p["D"])),
                _word,
                _unordered("count_two", "C", "D"),
            ),
        ),
        Template(
            "replace_char",
            "word",
            Variant(
                "replace",
                "Print s with every letter A replaced by B.",
                _pairs("A", "B", ordered=True),
                "print(s.replace(A, B))",
                "print(s.replace(B, A))",
                lambda s, p: s.replace(p["A"], p["B"]),
                _word,
            ),
            Variant(
                "swap",
                "Print s with every letter A replaced by B and every letter B replaced by A.",
                _pairs("A", "B", ordered=False),
                "print(''.join(B if c == A else A if c == B else c for c in s))",
                "print(s.replace(A, B).replace(B, A))",
                lambda s, p: s.translate(str.maketrans(p["A"] + p["B"], p["B"] + p["A"])),
                _word,
                _unordered("swap", "A", "B"),
            ),
        ),
        Template(
            "reverse_words",
            "line",
            Variant(
                "reverse_with",
                "Reverse every word that contains the letter C; print the words in their order, separated by spaces.",
                _grid(C=LETTERS),
                "print(*[w[::-1] if C in w else w for w in s.split()])",
                "print(*[w[::-1] for w in s.split()])",
                lambda s, p: _join(w[::-1] if p["C"] in w else w for w in s.split()),
                _line,
            ),
            Variant(
                "reverse_with_order",
                "Reverse every word that contains the letter C, and print the words in reverse "
                "order, separated by spaces.",
                _grid(C=LETTERS),
                "print(*[w[::-1] if C in w else w for w in s.split()][::-1])",
                "print(*[w[::-1] if C in w else w for w in s.split()])",
                lambda s, p: _join([w[::-1] if p["C"] in w else w for w in s.split()][::-1]),
                _line,
            ),
        ),
        Template(
            "kth_largest",
            "ints",
            Variant(
                "kth_largest",
                "Print the K-th largest number (equal numbers count separately; n >= K).",
                _grid(K=range(1, 16)),
                "print(sorted(a, reverse=True)[K - 1])",
                "print(sorted(a)[K - 1])",
                lambda a, p: str(sorted(a, reverse=True)[p["K"] - 1]),
                lambda r, p: _ints(r, p["K"], p["K"] + 5),
                _largest("kth_largest"),
            ),
            Variant(
                "k_largest_sum",
                "Print the sum of the K largest numbers (n > K).",
                _grid(K=range(2, 16)),  # the sum of the 1 largest is the base operation
                "print(sum(sorted(a, reverse=True)[:K]))",
                "print(sum(sorted(a)[:K]))",
                lambda a, p: str(sum(sorted(a, reverse=True)[: p["K"]])),
                lambda r, p: _ints(r, p["K"] + 1, p["K"] + 5),
                _largest("k_largest_sum"),
            ),
        ),
        Template(
            "rotate",
            "ints",
            Variant(
                "rotate_left",
                "Rotate the numbers left by K positions (the first K numbers move to the end, in "
                "order) and print them (n > K).",
                _grid(K=range(1, 13)),
                "print(*(a[K:] + a[:K]))",
                "print(*(a[-K:] + a[:-K]))",
                lambda a, p: _join(a[p["K"] :] + a[: p["K"]]),
                lambda r, p: _ints(r, p["K"] + 1, p["K"] + 6),
            ),
            Variant(
                "rotate_right",
                "Rotate the numbers right by K positions (the last number moves to the front, K "
                "times; K may exceed n) and print them.",
                _grid(K=range(1, 21)),
                "k = K % n\nprint(*(a[n - k:] + a[:n - k]))",
                "k = K % n\nprint(*(a[k:] + a[:k]))",
                lambda a, p: _join(a[len(a) - p["K"] % len(a) :] + a[: len(a) - p["K"] % len(a)]),
                lambda r, p: _ints(r, 2, 9),
            ),
        ),
        Template(
            "divisible",
            "int",
            Variant(
                "divisible",
                "Print YES if n is divisible by D, otherwise print NO.",
                _grid(D=range(2, 101)),
                "print('YES' if n % D == 0 else 'NO')",
                "print('YES' if n % D else 'NO')",
                lambda n, p: "YES" if n % p["D"] == 0 else "NO",
                lambda r, p: _multiple(r, p["D"]),
            ),
            Variant(
                "divisible_not",
                "Print YES if n is divisible by D but not by E, otherwise print NO.",
                lambda: [{"D": d, "E": e} for d in range(2, 21) for e in range(2, 21) if d % e],  # E | D: always NO
                "print('YES' if n % D == 0 and n % E != 0 else 'NO')",
                "print('YES' if n % D == 0 else 'NO')",
                lambda n, p: "YES" if n % p["D"] == 0 and n % p["E"] else "NO",
                lambda r, p: _yes_or_no(r, p["D"], p["E"]),
                _divisible_not_key,
            ),
        ),
        Template(
            "linear",
            "int",
            Variant(
                "linear",
                "Print A * n + B.",
                _grid(A=range(2, 10), B=range(1, 21)),
                "print(A * n + B)",
                "print(A * (n + B))",
                lambda n, p: str(p["A"] * n + p["B"]),
                lambda r, p: r.randint(1, 10000),
            ),
            Variant(
                "linear_mod",
                "Print (A * n + B) modulo M.",
                lambda: [
                    p for p in _grid(A=range(2, 10), B=range(1, 10), M=(7, 9, 10, 11, 13, 100))() if p["A"] % p["M"]
                ],
                "print((A * n + B) % M)",
                "print(A * n + B % M)",
                lambda n, p: str((p["A"] * n + p["B"]) % p["M"]),
                lambda r, p: r.randint(1, 10000),
                lambda p: ("linear_mod", p["A"] % p["M"], p["B"] % p["M"], p["M"]) if p["M"] else tuple(p.items()),
            ),
        ),
        Template(
            "caesar",
            "word",
            Variant(
                "shift",
                "Shift every letter of s forward by K places in the alphabet (after z comes a) and print the result.",
                _grid(K=range(1, 26)),
                "print(" + _CAESAR.format("", "c in s") + ")",
                "print(''.join(chr((ord(c) - 96 + K) % 26 + 97) for c in s))",
                lambda s, p: "".join(_shift(c, p["K"]) for c in s),
                lambda r, p: _word(r, p),
            ),
            Variant(
                "shift_odd",
                "Shift the 1st, 3rd, 5th, ... letters of s forward by K places in the alphabet (after z "
                "comes a), keep the other letters, and print the result.",
                _grid(K=range(1, 26)),
                "print(" + _CAESAR.format(" if i % 2 == 0 else c", "i, c in enumerate(s)") + ")",
                "print(" + _CAESAR.format(" if i % 2 == 1 else c", "i, c in enumerate(s)") + ")",
                lambda s, p: "".join(_shift(c, p["K"]) if i % 2 == 0 else c for i, c in enumerate(s)),
                lambda r, p: _word(r, p, 2),
            ),
        ),
        Template(
            "repeat_char",
            "word",
            Variant(
                "repeat_all",
                "Print s with every letter repeated K times.",
                _grid(K=range(2, 10)),
                "print(''.join(c * K for c in s))",
                "print(s * K)",
                lambda s, p: "".join(c * p["K"] for c in s),
                lambda r, p: _word(r, p, 2, 8),
            ),
            Variant(
                "repeat_one",
                "Print s with every letter C repeated K times; the other letters stay as they are.",
                _grid(C=LETTERS, K=range(2, 6)),
                "print(''.join(c * K if c == C else c for c in s))",
                "print(s.replace(C, C * (K - 1)))",
                lambda s, p: s.replace(p["C"], p["C"] * p["K"]),
                _word,
            ),
        ),
        Template(
            "count_greater",
            "ints",
            Variant(
                "greater",
                "Print how many of the numbers are greater than K.",
                _grid(K=range(0, 100)),
                "print(sum(1 for x in a if x > K))",
                "print(sum(1 for x in a if x >= K))",
                lambda a, p: str(sum(x > p["K"] for x in a)),
                lambda r, p: _ints(r, plant=[p["K"]] * 2),
                lambda p: ("greater", min(max(p["K"], -1), 99)),  # a_i in 0..99
            ),
            Variant(
                "between",
                "Print how many of the numbers x satisfy L <= x <= R.",
                lambda: [{"L": lo, "R": lo + d} for lo in range(0, 95, 5) for d in range(5, 45, 5) if lo + d <= 99],
                "print(sum(1 for x in a if L <= x <= R))",
                "print(sum(1 for x in a if L < x < R))",
                lambda a, p: str(sum(p["L"] <= x <= p["R"] for x in a)),
                lambda r, p: _ints(r, plant=[p["L"], p["R"]]),
                lambda p: ("between", max(p["L"], 0), min(p["R"], 99)) if max(p["L"], 0) <= min(p["R"], 99) else (),
            ),
        ),
        Template(
            "remove_char",
            "word",
            Variant(
                "remove_one",
                "Print s with every letter C removed (at least one letter remains).",
                _grid(C=LETTERS),
                "print(s.replace(C, ''))",
                "print(s.replace(C, '', 1))",
                lambda s, p: s.replace(p["C"], ""),
                lambda r, p: _word(r, p, keep=True),
                lambda p: ("remove", frozenset((p["C"],))),  # the letters removed: remove_two with C = D is this
            ),
            Variant(
                "remove_two",
                "Print s with every letter C and every letter D removed (at least one letter remains).",
                _pairs("C", "D", ordered=False),
                "print(s.replace(C, '').replace(D, ''))",
                "print(s.replace(C, ''))",
                lambda s, p: s.replace(p["C"], "").replace(p["D"], ""),
                lambda r, p: _word(r, p, keep=True),
                lambda p: ("remove", frozenset((p["C"], p["D"]))),
            ),
        ),
        Template(
            "scale",
            "ints",
            Variant(
                "scale_all",
                "Print every number multiplied by K, separated by spaces.",
                _grid(K=range(2, 51)),
                "print(*[x * K for x in a])",
                "print(*[x + K for x in a])",
                lambda a, p: _join(x * p["K"] for x in a),
                lambda r, p: _ints(r),
            ),
            Variant(
                "scale_odd",
                "Multiply the 1st, 3rd, 5th, ... numbers by K and print all the numbers, separated by spaces.",
                _grid(K=range(2, 51)),
                "print(*" + _ODD.format(0) + ")",
                "print(*" + _ODD.format(1) + ")",
                lambda a, p: _join(x * p["K"] if i % 2 == 0 else x for i, x in enumerate(a)),
                lambda r, p: _ints(r, 2),
            ),
        ),
        Template(
            "every_kth",
            "ints",
            Variant(
                "every_from_first",
                "Print the 1st, (K+1)-th, (2K+1)-th, ... numbers, separated by spaces.",
                _grid(K=range(2, 11)),
                "print(*a[::K])",
                "print(*a[K - 1::K])",
                lambda a, p: _join(a[:: p["K"]]),
                lambda r, p: _ints(r, p["K"] + 1, p["K"] + 8),
            ),
            Variant(
                "every_from_kth",
                "Print the K-th, 2K-th, 3K-th, ... numbers, separated by spaces (n >= K).",
                _grid(K=range(2, 11)),
                "print(*a[K - 1::K])",
                "print(*a[::K])",
                lambda a, p: _join(a[p["K"] - 1 :: p["K"]]),
                lambda r, p: _ints(r, p["K"], p["K"] + 8),
            ),
        ),
    ]
}


@cache
def tasks_of(variant: Variant) -> tuple[Params, ...]:
    """The variant's parameter values, one per meaning (`Variant.meaning`; the first in the grid's order)."""
    kept: dict[Any, Params] = {}
    for p in variant.params():
        kept.setdefault(variant.meaning(p), p)
    return tuple(kept.values())


@cache
def _heldout(template: str, hard: bool) -> frozenset[tuple[tuple[str, Any], ...]]:
    """The held-out parameters of a variant: the HELDOUT_PERCENT of its parameter tuples (at least one, never
    all) whose sha256 of (template, variant, parameters) is smallest. A rank, not a threshold, so that a small
    parameter space still has values on both sides."""
    variant = TEMPLATES[template].hard if hard else TEMPLATES[template].base
    keyed = sorted(
        (hashlib.sha256(json.dumps([template, variant.name, list(p.items())]).encode()).hexdigest(), tuple(p.items()))
        for p in tasks_of(variant)
    )
    share = min(len(keyed) - 1, max(1, round(len(keyed) * HELDOUT_PERCENT / 100)))
    return frozenset(params for _, params in keyed[:share])


# ---- rendering --------------------------------------------------------------------------------------


def catalogue(levels: Sequence[int] = LEVELS, templates: Sequence[str] | None = None) -> list[TaskSpec]:
    """Every distinct task of the given levels (and templates; default all), in template, level, parameter order."""
    unknown = sorted(set(levels) - set(LEVELS))
    if unknown:
        raise GeneratorError(f"unknown level(s) {unknown}; levels are {list(LEVELS)}")
    names = list(TEMPLATES) if templates is None else list(dict.fromkeys(templates))
    strangers = [name for name in names if name not in TEMPLATES]
    if strangers or not names:
        raise GeneratorError(f"unknown template(s) {strangers or '(none given)'}; templates are {', '.join(TEMPLATES)}")
    return [
        TaskSpec(template.name, level, tuple(params.items()))
        for template in (TEMPLATES[name] for name in names)
        for level in sorted(set(levels))
        for params in tasks_of(template.base if level < 3 else template.hard)
    ]


def _render_case(kind: Kind, case: Any) -> str:
    return f"{len(case)}\n{_join(case)}\n" if kind == "ints" else f"{case}\n"


def _read_params(spec: TaskSpec) -> str:
    """The lines that read the parameters from the first input line (``params_in="input"``)."""
    names = [k for k, _ in spec.params]
    ints = [k for k, v in spec.params if isinstance(v, int)]
    if len(names) == 1:
        return f"{names[0]} = " + ("int(input())" if ints else "input().strip()") + "\n"
    if len(ints) == len(names):
        return f"{', '.join(names)} = map(int, input().split())\n"
    return f"{', '.join(names)} = input().split()\n" + "".join(f"{k} = int({k})\n" for k in ints)


def _name_params(spec: TaskSpec) -> str:
    """``the integer K``, ``the letters C and D``, ``the letter C and the integer K``."""
    kinds = ["integer" if isinstance(v, int) else "letter" for _, v in spec.params]
    names = [k for k, _ in spec.params]
    if len(set(kinds)) == 1:
        return f"the {kinds[0]}{'s' if len(names) > 1 else ''} {' and '.join(names)}"
    return " and ".join(f"the {kind} {name}" for kind, name in zip(kinds, names))


def program(spec: TaskSpec, body: str, params_in: ParamsIn = "statement") -> str:
    """Parameter assignments (or their read from the first input line), then the case read and ``body``,
    inside a test-case loop above level 1."""
    head = _read_params(spec) if params_in == "input" else "".join(f"{k} = {v!r}\n" for k, v in spec.params)
    return head + _solve(spec, body)


def _solve(spec: TaskSpec, body: str) -> str:
    """The case read and ``body``, inside a test-case loop above level 1 (the parameters already set)."""
    code = READ[TEMPLATES[spec.template].kind] + "\n" + body
    if spec.level == 1:
        return code + "\n"
    return "for _ in range(int(input())):\n" + "".join(f"    {line}\n" for line in code.splitlines())


def _cases(spec: TaskSpec, rng: random.Random, most_cases: int) -> Cases:
    """One test's cases (one at level 1, else 2..most_cases)."""
    params = dict(spec.params)
    return tuple(spec.variant.case(rng, params) for _ in range(1 if spec.level == 1 else rng.randint(2, most_cases)))


def _layout(spec: TaskSpec, cases: Cases, params_in: ParamsIn) -> tuple[str, str]:
    """One test's (input, expected output) text."""
    variant, kind = spec.variant, TEMPLATES[spec.template].kind
    params = dict(spec.params)
    text = "".join(_render_case(kind, c) for c in cases)
    answers = "".join(variant.answer(c, params) + "\n" for c in cases)
    head = _join(v for _, v in spec.params) + "\n" if params_in == "input" else ""
    return head + (text if spec.level == 1 else f"{len(cases)}\n{text}"), answers


# ---- degenerate programs (tasks/degenerate.py) ------------------------------------------------------


@lru_cache(maxsize=4096)
def _parse(spec: TaskSpec, text: str, params_in: ParamsIn) -> tuple[Params, tuple[Any, ...]]:
    """The parameters and cases a program reads from a test input in ``params_in`` layout (shared: never mutate)."""
    lines = iter(text.splitlines())
    params = dict(spec.params)
    if params_in == "input":
        values = next(lines).split()
        params = {k: int(x) if isinstance(v, int) else x for (k, v), x in zip(spec.params, values, strict=True)}
    kind = TEMPLATES[spec.template].kind
    cases: list[Any] = []
    for _ in range(1 if spec.level == 1 else int(next(lines))):
        if kind == "ints":
            next(lines)  # n: the reference reads it and never uses it
            cases.append([int(x) for x in next(lines).split()])
        else:
            line = next(lines)
            cases.append(int(line) if kind == "int" else line.strip() if kind == "word" else line)
    return params, tuple(cases)


def _answers(
    spec: TaskSpec, variant: Variant, params: Params | None, params_in: ParamsIn, text: str
) -> list[str] | None:
    """The answer lines the reference of ``variant`` with ``params`` (None: the ones it reads) prints on ``text``,
    by the variant's oracle; None when the program raises."""
    read, cases = _parse(spec, text, params_in)
    try:
        return [variant.answer(case, read if params is None else params) for case in cases]
    except (LookupError, ArithmeticError, ValueError):  # the program raises the same, and fails the test
        return None


def _moves(name: str, value: int) -> list[tuple[str, str, int]]:
    """Integer parameter ``name`` moved by 1, 2, 3 either way, doubled and (when even) halved: ``(label, the line
    that moves it once read, the value)``."""
    moves = [(f"{name}{d:+d}", f"{name} {'+-'[d < 0]}= {abs(d)}\n", value + d) for d in (-1, 1, -2, 2, -3, 3)]
    moves.append((f"{name}*2", f"{name} *= 2\n", value * 2))
    if value % 2 == 0:
        moves.append((f"{name}/2", f"{name} //= 2\n", value // 2))
    return moves


@dataclass(frozen=True)
class _Other:
    """The task's reference with other parameter values, or the template's other operation: what it computes, and
    the lines that turn the parameters it read (``params_in="input"``) into these."""

    name: str
    variant: Variant
    params: Params
    adjust: str


@cache
def _as_others(variant: Variant) -> tuple[tuple[Any, _Other], ...]:
    """Every task of ``variant`` (`tasks_of`) as another task's alternative, with its meaning."""
    return tuple((variant.meaning(p), _other(variant, p)) for p in tasks_of(variant))


def _other(variant: Variant, params: Params, name: str = "", adjust: str = "") -> _Other:
    """``variant`` with ``params``; the name and input-layout lines default to the values, all assigned."""
    return _Other(
        name or f"{variant.name}(" + ",".join(f"{k}={v}" for k, v in params.items()) + ")",
        variant,
        params,
        adjust or "".join(f"{k} = {v!r}\n" for k, v in params.items()),
    )


@lru_cache(maxsize=64)  # a task's check asks for these once per kept test; the catalogue's would not fit
def _others(spec: TaskSpec) -> tuple[_Other, ...]:
    """The reference's neighbours (each integer parameter moved by `_moves`, each letter parameter set to every
    other letter, two parameters of one type swapped), every parameter value of the template's two operations in
    the generator's ranges (`tasks_of`), and the other operation with the task's own values where it has the same
    parameter: each meaning (`Variant.meaning`) once, never the task's own."""
    template, params, variant = TEMPLATES[spec.template], dict(spec.params), spec.variant
    other = template.hard if spec.level < 3 else template.base
    near: list[_Other] = []
    for name, value in spec.params:
        if isinstance(value, int):
            near += [_other(variant, {**params, name: v}, label, line) for label, line, v in _moves(name, value)]
        else:
            near += [_other(variant, {**params, name: c}, f"{name}={c}", f"{name} = {c!r}\n") for c in LETTERS]
    for a, b in combinations(params, 2):
        if type(params[a]) is type(params[b]):
            swapped = {**params, a: params[b], b: params[a]}
            near.append(_other(variant, swapped, f"swap {a},{b}", f"{a}, {b} = {b}, {a}\n"))
    shared = {k: v for k, v in params.items() if k in tasks_of(other)[0]}
    merged = {tuple({**p.params, **shared}.items()): None for _, p in _as_others(other)} if shared else {}
    near += [_other(other, dict(values)) for values in merged]
    candidates = [(o.variant.meaning(o.params), o) for o in near] + [*_as_others(variant), *_as_others(other)]
    seen = {variant.meaning(params)}
    others = []
    for meaning, candidate in candidates:
        if meaning not in seen:
            seen.add(meaning)
            others.append(candidate)
    return tuple(others)


def _other_source(spec: TaskSpec, other: _Other, params_in: ParamsIn) -> str:
    if params_in == "input":
        head = _read_params(spec) + other.adjust
    else:
        head = "".join(f"{k} = {v!r}\n" for k, v in other.params.items())
    return head + _solve(spec, other.variant.body)


def _other_run(spec: TaskSpec, other: _Other, params_in: ParamsIn, text: str) -> str | None:
    lines = _answers(spec, other.variant, other.params, params_in, text)
    return None if lines is None else "".join(line + "\n" for line in lines)


def _first_answer(spec: TaskSpec, params_in: ParamsIn) -> Degenerate:
    """The reference answering every case as it answered the first."""
    reference = program(spec, spec.variant.body, params_in)
    return degenerate.first_answer(reference, partial(_answers, spec, spec.variant, None, params_in))


def _case_count(spec: TaskSpec, params_in: ParamsIn, text: str) -> int:
    return len(_parse(spec, text, params_in)[1])


def _reading(spec: TaskSpec, params_in: ParamsIn) -> degenerate.Reading | None:
    """How the reference reads a test's cases (None at level 1: one case)."""
    if spec.level == 1:
        return None
    return degenerate.Reading(partial(_case_count, spec, params_in), partial(program, spec, params_in=params_in))


def degenerates(spec: TaskSpec, tests: Sequence[tuple[str, str]], params_in: ParamsIn) -> list[Degenerate]:
    """The degenerate programs ``tests`` (laid out in ``params_in``) must reject: `tasks.degenerate.family`, the
    cases read as the reference reads them, with the reference's `_others` and (several cases a test) the
    reference answering every case as the first."""
    others = [
        Degenerate(
            other.name, partial(_other_source, spec, other, params_in), partial(_other_run, spec, other, params_in)
        )
        for other in _others(spec)
    ]
    first = [_first_answer(spec, params_in)] if spec.level > 1 else []
    return degenerate.family(tests, _reading(spec, params_in), first + others)


class _Probe:
    """A drawn test for the check: its cases, their expected answer lines and tokens, and (on first use) its
    (input, expected output) in each layout."""

    def __init__(self, spec: TaskSpec, cases: Cases) -> None:
        self.spec, self.cases = spec, cases
        self.answers = [spec.variant.answer(case, dict(spec.params)) for case in cases]
        self.tokens = " ".join(self.answers).split()
        self.plain = all(answer and " " not in answer for answer in self.answers)  # one token a line

    @cached_property
    def laid(self) -> dict[str, tuple[str, str]]:
        return {layout: _layout(self.spec, self.cases, layout) for layout in ("statement", "input")}


Judged = _Other | tuple[Degenerate, ParamsIn]  # a program of the check: an alternative, or a program and its layout


def _passes(program: Judged, probe: _Probe) -> bool:
    """Whether ``program`` passes ``probe`` as `degenerate.passes` judges it. An alternative is judged on the drawn
    cases (the same in both layouts): generated outputs are canonical integers and words of letters, whose tokens
    match (`tasks.comparison.outputs_match`) exactly when they are equal."""
    if isinstance(program, tuple):
        return degenerate.passes(program[0], probe.laid[program[1]])
    answer, params = program.variant.answer, program.params
    try:
        for case, want in zip(probe.cases, probe.answers):
            line = answer(case, params)
            if line != want:
                break
        else:
            return True
        if probe.plain and line and " " not in line:  # the lines so far are equal: this token differs
            return False
        lines = [answer(case, params) for case in probe.cases]
    except (LookupError, ArithmeticError, ValueError):  # the program raises the same, and fails the test
        return False
    return " ".join(lines).split() == probe.tokens


@lru_cache(maxsize=64)
def _others_by_name(spec: TaskSpec) -> dict[str, Judged]:
    return {other.name: other for other in _others(spec)}


def _family(spec: TaskSpec, probes: Sequence[_Probe]) -> dict[str, Judged]:
    """The family for ``probes`` (`degenerates`) by name. The reference's `_others` print the same in both layouts
    (from the parameters and cases alone); the programs that print what the input's text holds (echo, per line)
    are judged in both layouts."""
    tests = [probe.laid["statement"] for probe in probes]
    first = [_first_answer(spec, "statement")] if spec.level > 1 else []
    family: dict[str, Judged] = {
        p.name: (p, "statement") for p in degenerate.family(tests, _reading(spec, "statement"), first)
    }
    for p in degenerate.textual([probe.laid["input"] for probe in probes]):
        family[f"{p.name} (parameters in the input)"] = (p, "input")
    return family | _others_by_name(spec)


def _stream(spec: TaskSpec, rng: random.Random, _: Mapping[str, Judged]) -> _Probe:
    """The next test of the task's own stream."""
    return _Probe(spec, _cases(spec, rng, 5))


def _witness(
    spec: TaskSpec, rng: random.Random, candidates: Iterator[Any], alive: Mapping[str, Judged]
) -> _Probe | None:
    """A test that rejects a program of ``alive``: the next of ``candidates`` (cases) on which one of them answers
    otherwise than the reference, alone at level 1, else in place of one case of the stream's next test. None when
    the candidates run out."""
    for case in candidates:
        alone = _Probe(spec, (case,))
        if any(not _passes(program, alone) for program in alive.values()):
            if spec.level == 1:
                return alone
            cases = list(_cases(spec, rng, 5))
            cases[rng.randrange(len(cases))] = case
            return _Probe(spec, tuple(cases))
    return None


@lru_cache(maxsize=8192)  # `draw` checks a task and `render` lays it out; the whole catalogue is 4999 tasks
def drawn_tests(spec: TaskSpec, seed: int, tries: int = STRENGTHEN_TRIES) -> DrawnTests:
    """The task's tests, from ``(seed, task_id)`` alone: PUBLIC_TESTS + HIDDEN_TESTS drawn; then, while a
    degenerate program passes them all, hidden tests drawn on from the same stream (so the first ones never
    change), each kept only when it rejects one, ``tries`` draws at most (0: the tests as first drawn); then tests
    built on a case that separates a program still passing (`_witness`), searched among every n the statement
    allows (one integer a case) or WITNESS_DRAWS cases of the task's own distribution. Shared by every caller:
    never mutate the cases."""
    rng = random.Random(f"{seed}:{spec.task_id}")
    # the example (in the statement) has at most 3 cases: shorter prompts for small policies
    drawn = [_cases(spec, rng, 3 if n < PUBLIC_TESTS else 5) for n in range(PUBLIC_TESTS + HIDDEN_TESTS)]
    probes = [_Probe(spec, cases) for cases in drawn]
    family = partial(_family, spec)
    added, alive = degenerate.strengthen(probes, partial(_stream, spec, rng), family, _passes, tries)
    if alive and tries:
        search = random.Random(f"{seed}:{spec.task_id}:witness")
        if TEMPLATES[spec.template].kind == "int":
            candidates: Iterator[Any] = iter(search.sample(range(1, 10001), 10000))
        else:
            candidates = (spec.variant.case(search, dict(spec.params)) for _ in range(WITNESS_DRAWS))
        witness = partial(_witness, spec, rng, candidates)
        more, alive = degenerate.strengthen(probes + added, witness, family, _passes, tries)
        added += more
    hidden = tuple(drawn[PUBLIC_TESTS:]) + tuple(probe.cases for probe in added)
    return DrawnTests(tuple(drawn[:PUBLIC_TESTS]), hidden, len(added), tuple(sorted(alive)))


def statement(spec: TaskSpec, example: tuple[str, str], params_in: ParamsIn = "statement") -> str:
    describe = DESCRIBE[TEMPLATES[spec.template].kind]
    if spec.level == 1:
        layout, output = describe[0].upper() + describe[1:], "the answer on one line"
    else:
        layout = f"The first line holds t (1 <= t <= 5), the number of test cases; each test case is {describe}"
        output = "one line per test case, in order"
    if params_in == "input":
        what = _name_params(spec) + ("" if len(spec.params) == 1 else ", separated by a space")
        rest = layout.replace("The first line holds t", "the next line holds t")
        layout = f"The first line holds {what}; then {rest[0].lower()}{rest[1:]}"
        stated = ""
    else:
        stated = "Parameters: " + ", ".join(f"{k} = {v!r}" for k, v in spec.params) + ".\n"
    return (
        f"{spec.variant.sentence}\n{stated}\nInput: {layout}.\nOutput: {output}.\n\n"
        f"Example input:\n{example[0]}Example output:\n{example[1]}"
    )


def render(spec: TaskSpec, seed: int, params_in: ParamsIn = "statement") -> GeneratedTask:
    """The task's row with its tests drawn from ``(seed, task_id)`` alone (not from what else is drawn).

    ``params_in``: ``statement`` states the parameter values (``Parameters: K = 17.``) and the program
    assigns them; ``input`` names the parameters only, every test's first line holds their values and the
    program reads them, so one program per (variant, level) solves every parameter value."""
    drawn = drawn_tests(spec, seed)
    public = [_layout(spec, cases, params_in) for cases in drawn.public]
    hidden = [_layout(spec, cases, params_in) for cases in drawn.hidden]
    reference, wrong = program(spec, spec.variant.body, params_in), program(spec, spec.variant.wrong, params_in)
    row = {
        "name": spec.task_id,
        "description": statement(spec, public[0], params_in),
        "public_tests": {"input": [i for i, _ in public], "output": [o for _, o in public]},
        "private_tests": {"input": [i for i, _ in hidden], "output": [o for _, o in hidden]},
        "generated_tests": {"input": [], "output": []},
        "time_limit": {"seconds": TIME_LIMIT_S, "nanos": 0},
        "memory_limit_bytes": MEMORY_LIMIT_BYTES,
        "solutions": {"language": [3], "solution": [reference]},
        "incorrect_solutions": {"language": [3], "solution": [wrong]},
        "generator": {
            "template": spec.template,
            "variant": spec.variant.name,
            "level": spec.level,
            "params": dict(spec.params),
            "params_in": params_in,
            "split": spec.split,
            "seed": seed,
        },
    }
    return GeneratedTask(
        spec=spec, row=row, reference=reference, wrong=wrong, added=drawn.added, survivors=drawn.survivors
    )


def draw(
    split: Split, count: int, seed: int, levels: Sequence[int] = LEVELS, templates: Sequence[str] | None = None
) -> list[TaskSpec]:
    """``count`` tasks of ``split``, round-robin over (template, level) buckets each shuffled by ``seed``,
    so every template and level is drawn about equally often. A task whose tests cannot be made to reject
    every degenerate program (`drawn_tests`) is dropped: the next task of its bucket takes its turn."""
    return _draw(split, count, seed, levels, templates)[0]


def _draw(
    split: Split, count: int, seed: int, levels: Sequence[int], templates: Sequence[str] | None
) -> tuple[list[TaskSpec], list[TaskSpec]]:
    """``(drawn, dropped)``: `draw`'s tasks and the ones it passed over."""
    buckets: dict[tuple[str, int], list[TaskSpec]] = {}
    for spec in catalogue(levels, templates):
        if spec.split == split:
            buckets.setdefault((spec.template, spec.level), []).append(spec)
    for (template, level), specs in buckets.items():
        random.Random(f"{seed}:{split}:{template}:{level}").shuffle(specs)
    drawn: list[TaskSpec] = []
    dropped: list[TaskSpec] = []
    queues = list(buckets.values())
    # the cheap refusal first: more than the buckets hold, dropped ones or not (checking them all takes seconds)
    total = sum(map(len, queues))
    while len(drawn) < count <= total and any(queues):
        for queue in queues:
            while queue and len(drawn) < count:
                spec = queue.pop()
                if not drawn_tests(spec, seed).survivors:
                    drawn.append(spec)
                    break
                dropped.append(spec)
    if len(drawn) < count:
        which = "" if templates is None else f" of templates {', '.join(templates)}"
        exist = f"{total} exist" if count > total else f"{len(drawn)} exist ({len(dropped)} more dropped as weak)"
        raise GeneratorError(f"{count} {split} tasks asked for levels {sorted(set(levels))}{which}, {exist}")
    return drawn, dropped


@dataclass(frozen=True)
class Written:
    """What `write` wrote, per split."""

    rows: dict[str, int]  # rows in each file
    strengthened: dict[str, int]  # written tasks given hidden tests to reject a degenerate program
    dropped: dict[str, int]  # tasks passed over in the draw: no test of theirs rejects some degenerate program


def write(
    out: Path, seed: int, train: int, heldout: int, levels: Sequence[int] = LEVELS, params_in: ParamsIn = "statement"
) -> Written:
    """``out/{train,heldout}.jsonl`` and ``out/{train,heldout}.solutions.jsonl``; rows, strengthened and dropped
    tasks per split."""
    out.mkdir(parents=True, exist_ok=True)
    written = Written({}, {}, {})
    for split, count in (("train", train), ("heldout", heldout)):
        specs, dropped = _draw(split, count, seed, levels, None)
        tasks = [render(spec, seed, params_in) for spec in specs]
        rows = (json.dumps(t.row) + "\n" for t in tasks)
        solutions = (
            json.dumps({"task_id": t.spec.task_id, "completion": t.reference, "expect": "passed"}) + "\n" for t in tasks
        )
        (out / f"{split}.jsonl").write_text("".join(rows))
        (out / f"{split}.solutions.jsonl").write_text("".join(solutions))
        written.rows[split] = len(tasks)
        written.strengthened[split] = sum(t.added > 0 for t in tasks)
        written.dropped[split] = len(dropped)
    return written
