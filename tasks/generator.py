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

Every task's tests reject a family of degenerate programs (`tasks/degenerate.py`: constants, echo, the
reference off by one), judged at generation time as the grader judges; where the tests as drawn do not, hidden
tests drawn on from the task's stream are added (`drawn_tests`), and a task no such test can fix is never drawn.

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
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import cache, lru_cache, partial
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
# Draws spent looking for a hidden test that rejects a degenerate program still passing (docs/generated_tasks.md
# "Degenerate programs"). The rarest fixable miss needs a random value to land one above a parameter (about 1
# test in 20 at level 1): at seeds 0-2 the 555 strengthened tasks needed 7 draws (median), 129 at most. A task
# whose miss no test of its distribution can catch (an off-by-one program equal to the reference on every input
# the statement allows) spends them all and is dropped.
STRENGTHEN_TRIES = 400
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
                lambda s, p: "".join({p["A"]: p["B"], p["B"]: p["A"]}.get(c, c) for c in s),
                _word,
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
            ),
            Variant(
                "k_largest_sum",
                "Print the sum of the K largest numbers (n > K).",
                _grid(K=range(1, 16)),
                "print(sum(sorted(a, reverse=True)[:K]))",
                "print(sum(sorted(a)[:K]))",
                lambda a, p: str(sum(sorted(a, reverse=True)[: p["K"]])),
                lambda r, p: _ints(r, p["K"] + 1, p["K"] + 5),
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
                lambda: [{"D": d, "E": e} for d in range(2, 21) for e in range(2, 21) if d != e and d % e],
                "print('YES' if n % D == 0 and n % E != 0 else 'NO')",
                "print('YES' if n % D == 0 else 'NO')",
                lambda n, p: "YES" if n % p["D"] == 0 and n % p["E"] else "NO",
                lambda r, p: _multiple(r, p["D"], p["E"]),
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
                _grid(A=range(2, 10), B=range(1, 10), M=(7, 9, 10, 11, 13, 100)),
                "print((A * n + B) % M)",
                "print(A * n + B % M)",
                lambda n, p: str((p["A"] * n + p["B"]) % p["M"]),
                lambda r, p: r.randint(1, 10000),
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
            ),
            Variant(
                "between",
                "Print how many of the numbers x satisfy L <= x <= R.",
                lambda: [{"L": lo, "R": lo + d} for lo in range(0, 95, 5) for d in range(5, 45, 5) if lo + d <= 99],
                "print(sum(1 for x in a if L <= x <= R))",
                "print(sum(1 for x in a if L < x < R))",
                lambda a, p: str(sum(p["L"] <= x <= p["R"] for x in a)),
                lambda r, p: _ints(r, plant=[p["L"], p["R"]]),
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
            ),
            Variant(
                "remove_two",
                "Print s with every letter C and every letter D removed (at least one letter remains).",
                _pairs("C", "D", ordered=False),
                "print(s.replace(C, '').replace(D, ''))",
                "print(s.replace(C, ''))",
                lambda s, p: s.replace(p["C"], "").replace(p["D"], ""),
                lambda r, p: _word(r, p, keep=True),
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
def _heldout(template: str, hard: bool) -> frozenset[tuple[tuple[str, Any], ...]]:
    """The held-out parameters of a variant: the HELDOUT_PERCENT of its parameter tuples (at least one, never
    all) whose sha256 of (template, variant, parameters) is smallest. A rank, not a threshold, so that a small
    parameter space still has values on both sides."""
    variant = TEMPLATES[template].hard if hard else TEMPLATES[template].base
    keyed = sorted(
        (hashlib.sha256(json.dumps([template, variant.name, list(p.items())]).encode()).hexdigest(), tuple(p.items()))
        for p in variant.params()
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
        for params in (template.base if level < 3 else template.hard).params()
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


def _parse(spec: TaskSpec, text: str, params_in: ParamsIn) -> tuple[Params, list[Any]]:
    """The parameters and cases a program reads from a test input in ``params_in`` layout."""
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
    return params, cases


def _shifted(spec: TaskSpec, name: str, delta: int, params_in: ParamsIn, text: str) -> str | None:
    """What the reference with parameter ``name`` moved by ``delta`` prints on ``text``, by the variant's oracle."""
    params, cases = _parse(spec, text, params_in)
    params[name] += delta
    try:
        return "".join(spec.variant.answer(case, params) + "\n" for case in cases)
    except (LookupError, ArithmeticError, ValueError):  # the program raises the same, and fails the test
        return None


def degenerates(spec: TaskSpec, tests: Sequence[tuple[str, str]], params_in: ParamsIn) -> list[Degenerate]:
    """The degenerate programs ``tests`` must reject (`tasks.degenerate.family`), with the reference off by one
    in each integer parameter, both ways."""
    shifted = []
    for name, value in spec.params:
        if not isinstance(value, int):
            continue
        for delta in (-1, 1):
            if params_in == "input":
                source = _read_params(spec) + f"{name} += {delta}\n" + _solve(spec, spec.variant.body)
            else:
                moved = tuple((k, v + delta if k == name else v) for k, v in spec.params)
                source = program(TaskSpec(spec.template, spec.level, moved), spec.variant.body)
            run = partial(_shifted, spec, name, delta, params_in)
            shifted.append(Degenerate(f"{name}{delta:+d}", source, run))
    return degenerate.family(tests, shifted)


def _surviving(spec: TaskSpec, tests: Sequence[Cases]) -> set[str]:
    """The degenerate programs that pass every one of ``tests`` in either layout (they differ in echo only)."""
    alive: set[str] = set()
    for params_in in ("statement", "input"):
        rendered = [_layout(spec, cases, params_in) for cases in tests]
        alive.update(degenerate.survivors(degenerates(spec, rendered, params_in), rendered))
    return alive


@lru_cache(maxsize=8192)  # `draw` checks a task and `render` lays it out; the whole catalogue is 5103 tasks
def drawn_tests(spec: TaskSpec, seed: int, tries: int = STRENGTHEN_TRIES) -> DrawnTests:
    """The task's tests, from ``(seed, task_id)`` alone: PUBLIC_TESTS + HIDDEN_TESTS drawn, then hidden tests
    drawn on from the same stream (so the first ones never change) while a degenerate program passes them all,
    each kept only when it rejects one; ``tries`` draws at most (0: the tests as first drawn). Shared by every
    caller: never mutate the cases."""
    rng = random.Random(f"{seed}:{spec.task_id}")
    # the example (in the statement) has at most 3 cases: shorter prompts for small policies
    drawn = [_cases(spec, rng, 3 if n < PUBLIC_TESTS else 5) for n in range(PUBLIC_TESTS + HIDDEN_TESTS)]
    added, alive = degenerate.strengthen(drawn, lambda: _cases(spec, rng, 5), partial(_surviving, spec), tries)
    return DrawnTests(
        tuple(drawn[:PUBLIC_TESTS]), tuple(drawn[PUBLIC_TESTS:] + added), len(added), tuple(sorted(alive))
    )


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
