"""Degenerate programs a task's tests must reject, judged on the host exactly as the grader judges.

A test set is *weak* when a program that does not solve the task passes every graded test. The family every
generated task (`tasks/generator.py`) is checked against:

* **constants**: each distinct expected output of the task's tests (so each example's output), each answer value
  the tests use (every distinct output line and token) and ``YES``, ``NO``, ``0``, ``1``, ``-1`` and the empty
  output, printed once whatever the input;
* **per case** (tasks with several cases a test): each of those values printed once per case, the cases read as
  the reference reads them; and the reference's answer to the first case printed for every case;
* **per line**: each value printed once per input line, and once per input line after the first;
* **echo**: the input printed back;
* **the reference with other parameters** (the task's family supplies these, each `Degenerate` with its own
  source): every parameter moved, swapped, or set to any other value of the generator's ranges, and the
  template's other operation.

A program passes a test when it does not fail and its stdout matches the expected output under
`tasks.comparison.outputs_match` with the grader's default tolerance (`GraderConfig.tolerance`), the comparison
`tasks.judge.judge_stdin` makes; a task passes when every test does (the rubric's ``all_pass``). Each program's
stdout is computed on the host without running its source (a constant, the input, an oracle): only the project's
own trusted programs are ever evaluated here, never a candidate's. The sources are what the fast paths stand for;
the unit tests run them in an interpreter and check both give the same stdout.

`strengthen` adds tests drawn from the task's own input distribution, each one that rejects a program still
passing, until none passes or the draws run out (the task is then dropped by its family).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from tasks.comparison import Tolerance, outputs_match

T = TypeVar("T")
P = TypeVar("P")
Test = tuple[str, str]  # (stdin, expected stdout)

VALUES = ("YES", "NO", "0", "1", "-1", "")  # answer values every task's tests must reject, besides their own
TOLERANCE = Tolerance()  # the grader's default (GraderConfig.tolerance); generated outputs are integers and text

# A program whose print() writes the first answer it is given, every time: prepended to a reference, it answers
# every case as it answered the first (module-level ``print`` shadows the builtin in the program's namespace).
FIRST_ANSWER = """import builtins, io
_first = []
def print(*args, **kwargs):
    if not _first:
        buffer = io.StringIO()
        builtins.print(*args, file=buffer, **kwargs)
        _first.append(buffer.getvalue())
    builtins.print(_first[0], end="")
"""


@dataclass(frozen=True)
class Degenerate:
    """A program that must not pass: its name, how to write its Python 3 source (on demand: a task has hundreds
    of these), and its stdout on an input computed on the host (None: it fails, as a crash does in the grader)."""

    name: str
    write: Callable[[], str]
    run: Callable[[str], str | None]

    @property
    def source(self) -> str:
        return self.write()


@dataclass(frozen=True)
class Reading:
    """How a reference reads a test of several cases: ``count`` the cases in an input, ``program`` the source of
    a program that reads every case as the reference does and runs ``body`` (Python) once per case."""

    count: Callable[[str], int]
    program: Callable[[str], str]


def constant(value: str) -> Degenerate:
    return Degenerate(f"constant {value!r}", lambda: f"import sys\nsys.stdout.write({value!r})\n", lambda _: value)


ECHO = Degenerate("echo", lambda: "import sys\nsys.stdout.write(sys.stdin.read())\n", lambda text: text)


def per_line(value: str, skip: int) -> Degenerate:
    """``value`` on a line of its own once per input line after the first ``skip``."""
    source = f"import sys\nfor _ in sys.stdin.read().splitlines()[{skip}:]:\n    print({value!r})\n"
    return Degenerate(
        f"per line after {skip} {value!r}",
        lambda: source,
        lambda text: (value + "\n") * max(0, len(text.splitlines()) - skip),
    )


def per_case(value: str, reading: Reading) -> Degenerate:
    """``value`` on a line of its own once per case."""
    return Degenerate(
        f"per case {value!r}",
        lambda: reading.program(f"print({value!r})"),
        lambda text: (value + "\n") * reading.count(text),
    )


def first_answer(reference: str, answers: Callable[[str], list[str] | None]) -> Degenerate:
    """``reference`` answering every case as it answered the first; ``answers``: the reference's answer lines."""

    def run(text: str) -> str | None:
        lines = answers(text)
        return None if lines is None else (lines[0] + "\n") * len(lines)

    return Degenerate("first answer for every case", lambda: FIRST_ANSWER + reference, run)


def values(tests: Sequence[Test]) -> list[str]:
    """Every answer value ``tests`` use (each distinct output line, then each distinct token), then VALUES."""
    lines = [line.strip() for _, expected in tests for line in expected.splitlines()]
    tokens = [token for line in lines for token in line.split()]
    return list(dict.fromkeys(lines + tokens + list(VALUES)))


def family(
    tests: Sequence[Test], reading: Reading | None = None, others: Sequence[Degenerate] = ()
) -> list[Degenerate]:
    """The family of the module docstring for ``tests``: constants, per-case programs (``reading``: the tests
    hold several cases each), per-line programs, echo, then ``others`` (the task's reference with other
    parameters, and its first-answer program)."""
    answers = values(tests)
    outputs = [expected for _, expected in tests] + [value + "\n" for value in answers] + [""]
    programs = [constant(value) for value in dict.fromkeys(outputs)]
    if reading is not None:
        programs += [per_case(value, reading) for value in answers]
    return programs + textual(tests) + list(others)


def textual(tests: Sequence[Test]) -> list[Degenerate]:
    """The programs of the family whose output depends on the input's text, not only on what it holds: per line
    and echo (a task laid out two ways is judged in both for these)."""
    return [per_line(value, skip) for value in values(tests) for skip in (0, 1)] + [ECHO]


def passes(program: Degenerate, test: Test) -> bool:
    """Whether ``program`` passes ``test`` as the grader judges it."""
    stdin, expected = test
    out = program.run(stdin)
    return out is not None and (out == expected or outputs_match(out, expected, TOLERANCE))


def survivors(programs: Sequence[Degenerate], tests: Sequence[Test]) -> list[str]:
    """The names of ``programs`` that pass every one of ``tests``."""
    return [p.name for p in programs if all(passes(p, test) for test in tests)]


def strengthen(
    tests: Sequence[T],
    draw: Callable[[Mapping[str, P]], T | None],
    programs: Callable[[Sequence[T]], Mapping[str, P]],
    passes: Callable[[P, T], bool],
    tries: int,
) -> tuple[list[T], set[str]]:
    """Tests from ``draw`` appended to ``tests``, each kept only when it rejects a program still passing, until
    none passes, ``tries`` draws are spent or ``draw`` has none left (None): ``(the tests kept, the names of the
    programs still passing)``.

    ``T`` is whatever the family draws (its cases); ``programs(tests)`` is the family for those tests by name (a
    new test's expected output joins the values the family prints), ``passes`` judges one program on one test,
    and ``draw`` is given the programs still passing (to look for a test that rejects one)."""
    family = programs(tests)
    first, *rest = tests  # most programs fail the first test: judge it alone before the others
    alive = {n for n, p in family.items() if passes(p, first) and all(passes(p, test) for test in rest)}
    kept: list[T] = []
    for _ in range(tries if alive else 0):
        candidate = draw({name: family[name] for name in sorted(alive)})
        if candidate is None:
            break
        still = {name for name in alive if passes(family[name], candidate)}
        if still == alive:
            continue
        kept.append(candidate)
        everything = [*tests, *kept]
        grown = programs(everything)  # the values of the new test's output, judged on every test
        fresh = {n for n, p in grown.items() if n not in family and all(passes(p, test) for test in everything)}
        family, alive = grown, still | fresh
        if not alive:
            break
    return kept, alive
