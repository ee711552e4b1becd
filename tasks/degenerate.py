"""Degenerate programs a task's tests must reject, judged on the host exactly as the grader judges.

A test set is *weak* when a program that does not solve the task passes every graded test. The family
every generated task (`tasks/generator.py`) is checked against:

* **constants**: each distinct expected output of the task's tests (so each example's output, since the
  public tests are graded too), and ``YES``, ``NO``, ``0``, ``1``, ``-1`` and the empty output, printed
  whatever the input;
* **echo**: the input printed back;
* **off by one**: the reference program with one integer parameter one lower or one higher (the task's
  family supplies these, `Degenerate` with its own source).

A program passes a test when it does not fail and its stdout matches the expected output under
`tasks.comparison.outputs_match` with the grader's default tolerance (`GraderConfig.tolerance`), the
comparison `tasks.judge.judge_stdin` makes; a task passes when every test does (the rubric's
``all_pass``). Each program's stdout is computed on the host without running its source (a constant, the
input, an oracle): only the project's own trusted programs are ever evaluated here, never a candidate's.
The sources are what the fast paths stand for; the unit tests run them in an interpreter and check both
give the same stdout.

`strengthen` adds tests drawn from the task's own input distribution, each one that rejects a
program still passing, until none passes or the draws run out (the task is then dropped by its family).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from tasks.comparison import Tolerance, outputs_match

T = TypeVar("T")
Test = tuple[str, str]  # (stdin, expected stdout)

CONSTANTS = ("YES\n", "NO\n", "0\n", "1\n", "-1\n", "")
TOLERANCE = Tolerance()  # the grader's default (GraderConfig.tolerance); generated outputs are integers and text


@dataclass(frozen=True)
class Degenerate:
    """A program that must not pass: its name, its Python 3 source, and its stdout on an input computed on
    the host (None: it fails, as a crash does in the grader)."""

    name: str
    source: str
    run: Callable[[str], str | None]


def constant(value: str) -> Degenerate:
    return Degenerate(f"constant {value!r}", f"import sys\nsys.stdout.write({value!r})\n", lambda _: value)


ECHO = Degenerate("echo", "import sys\nsys.stdout.write(sys.stdin.read())\n", lambda text: text)


def family(tests: Sequence[Test], others: Sequence[Degenerate] = ()) -> list[Degenerate]:
    """The constants of ``tests`` (module docstring), echo, then ``others`` (the task's off-by-one programs)."""
    values = dict.fromkeys([expected for _, expected in tests] + list(CONSTANTS))
    return [constant(value) for value in values] + [ECHO, *others]


def passes(program: Degenerate, test: Test) -> bool:
    """Whether ``program`` passes ``test`` as the grader judges it."""
    stdin, expected = test
    out = program.run(stdin)
    return out is not None and outputs_match(out, expected, TOLERANCE)


def survivors(programs: Sequence[Degenerate], tests: Sequence[Test]) -> list[str]:
    """The names of ``programs`` that pass every one of ``tests``."""
    return [p.name for p in programs if all(passes(p, test) for test in tests)]


def strengthen(
    tests: Sequence[T], draw: Callable[[], T], surviving: Callable[[Sequence[T]], set[str]], tries: int
) -> tuple[list[T], set[str]]:
    """Tests from ``draw`` appended to ``tests``, each kept only when it leaves fewer ``surviving`` programs,
    until none survives or ``tries`` draws are spent: ``(the tests kept, the programs still surviving)``.

    ``T`` is whatever the family draws (its cases); ``surviving`` judges a whole list of them, so a new test's
    expected output joins the constants it is checked against."""
    kept: list[T] = []
    alive = surviving(tests)
    for _ in range(tries if alive else 0):
        candidate = draw()
        if alive <= surviving([candidate]):  # rejects none of them (the cheap check: one test)
            continue
        now = surviving([*tests, *kept, candidate])
        if now < alive:
            kept.append(candidate)
            alive = now
            if not alive:
                break
    return kept, alive
