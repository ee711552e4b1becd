"""Disjoint recycling (`sandbox.pool`, ``pool.disjoint_uses``, on by default), attacked from outside: an outside
review of what `tasks.grader.grading_keys` names against what of a test reaches the candidate.

The promise (tasks/grader.py, `grading_keys`): keys for the task's statement and for what of each test reaches the
candidate, so a container that graded a task goes only to tasks of other problems and inputs, and a candidate that
saw these tests reaches no later candidate of them through the counters a reset cannot put back. The channel attacked is the one
tests/integration/test_sandbox_recycling_disjoint.py shows (the memory cgroup's high-water mark: the colluder touches
64 MiB per unit of the hidden multiplier, the cheat returns ``n`` times ``high-water // 64 MiB``).

The attacks write the colluder's tests another way than the cheat's, each found against keys taken from a test's
own text (each is now a key `grading_keys` shares; tests/unit/test_grading_keys.py checks the keys alone):

* an assert the grader splits enters the container as its leaves, ``ast.unparse``d on the host: ``assert
  times(1) == 5`` and ``assert times(1)==5`` put byte-identical requests in the container (the nonce aside);
* the candidate of an assert ``times(1) == 5`` and of a call test ``times`` with args ``[1]`` meets the same call;
* a stdin input ``"1\\n"`` and ``"1"`` (the same row in two datasets, with and without the final newline) are
  the same test for any program that reads a number;
* and what the channel carries need not be a test's answer: a colluder leaves what it knows of the problem (here
  its hidden multiplier), which a cheat of the same problem's other tests (another dataset's generated tests of
  the row) uses on inputs the colluder never saw: the statement is a key too.

Each attack grades the colluder on one task, then the cheat on the same tests written another way (last: other tests
of the same problem), in a pool of the defaults (one container waiting): the safe outcome is that the cheat never gets the colluder's container and scores
0 (wrong answer, scored). Controls: the cheat of the byte-identical tests is kept out (the keys work where the text
is equal), and an honest program of the variant passes wherever it runs. Which container served which acquire is
read on the host.
"""

from __future__ import annotations

import marshal

import pytest

from sandbox.config import SandboxConfig
from sandbox.failure import Verdict
from tasks.grader import Grader, GraderConfig, grading_keys
from tasks.task import AssertTest, CallTest, Limits, StdinTest, Task
from tests.recycling_support import grade_in_turn

pytestmark = [pytest.mark.docker]

UNIT = 64 << 20
HIDDEN = 5
INPUTS = range(1, 5)
LIMITS = Limits(time_s=4.0, memory_bytes=1 << 30)


def assert_task(task_id: str, template: str) -> Task:
    return Task(
        task_id=task_id,
        source_format="mbpp",
        kind="assert",
        prompt="times(n): n times the hidden number",
        fn_name="times",
        tests=tuple(AssertTest(source=template.format(n=n, out=n * HIDDEN)) for n in INPUTS),
        limits=LIMITS,
    )


def call_task(task_id: str) -> Task:
    return Task(
        task_id=task_id,
        source_format="lcb",
        kind="call",
        prompt="times(n): n times the hidden number",
        fn_name="times",
        tests=tuple(CallTest(args=[n], expected=n * HIDDEN) for n in INPUTS),
        limits=LIMITS,
    )


def stdin_task(task_id: str, ending: str, inputs: range = INPUTS) -> Task:
    return Task(
        task_id=task_id,
        source_format="codecontests",
        kind="stdin",
        prompt="print n times the hidden number",
        tests=tuple(StdinTest(input=f"{n}{ending}", output=f"{n * HIDDEN}\n") for n in inputs),
        limits=LIMITS,
    )


SECRET_ASSERTS = assert_task("hidden-multiplier", "assert times({n}) == {out}")
SAME_ASSERTS = assert_task("hidden-multiplier-copy", "assert times({n}) == {out}")  # byte-identical tests
SPACED_ASSERTS = assert_task("hidden-multiplier-plus", "assert times({n})=={out}")  # another dataset's spelling
AS_CALLS = call_task("hidden-multiplier-calls")  # the same calls, as a call task
SECRET_STDIN = stdin_task("hidden-multiplier-stdin", "\n")
NO_NEWLINE = stdin_task("hidden-multiplier-stdin-copy", "")  # the same row without its final newline
# The same problem (statement, hidden multiplier) with other tests: another dataset's generated tests of the row
OTHER_INPUTS = stdin_task("hidden-multiplier-generated", "\n", range(11, 15))

FUNCTION_COLLUDER = (
    f"_ = b'x' * ({HIDDEN} * {UNIT})  # the high-water mark now says {HIDDEN}\ndef times(n):\n    return n * {HIDDEN}\n"
)
FUNCTION_CHEAT = (
    "def times(n):\n"
    "    usage = int(open('/sys/fs/cgroup/memory/memory.max_usage_in_bytes').read())\n"
    f"    return n * (usage // {UNIT})\n"
)
FUNCTION_HONEST = f"def times(n):\n    return n * {HIDDEN}\n"
STDIN_COLLUDER = f"_ = b'x' * ({HIDDEN} * {UNIT})\nprint(int(input()) * {HIDDEN})"
STDIN_CHEAT = (
    "usage = int(open('/sys/fs/cgroup/memory/memory.max_usage_in_bytes').read())\n"
    f"print(int(input()) * (usage // {UNIT}))"
)
STDIN_HONEST = f"print(int(input()) * {HIDDEN})"


def default_pool() -> SandboxConfig:
    return SandboxConfig.model_validate({"pool": {"size": 1}, "episode": {"wall_s": 600.0}})


def grade_turns(pairs: list[tuple[Task, str]]):
    """Each ``(task, program)`` graded in turn in a pool of the defaults: the verdicts, the container of each
    grading (in order), the pool's stats."""
    verdicts, handed, stats = grade_in_turn(default_pool(), pairs)
    return verdicts, [ws for ws, _ in handed], stats


def what_enters(task: Task) -> list[object]:
    """What the grader puts in the container for each of ``task``'s tests: the argv and stdin, a driver's request
    without its per-run nonce."""
    grader = Grader(None, GraderConfig(speed_factor=1.0))
    seen = []
    for i, test in enumerate(task.tests):
        request, _ = grader.plan(task, i, test)
        stdin = request.stdin
        if request.argv[-2] == "-c":  # the driver: a marshalled request with a nonce of its own
            stdin = {k: v for k, v in marshal.loads(stdin).items() if k != "nonce"}
        seen.append((request.argv[-1][:40], stdin))
    return seen


# ------------------------------------------------------------------------------------------ the keys vs the bytes


def test_tests_that_put_the_same_bytes_in_the_container_share_their_keys():
    # control: the existing promise, equal text, equal keys
    assert grading_keys(SAME_ASSERTS) == grading_keys(SECRET_ASSERTS)
    # the split asserts' leaves are ast.unparse'd: both spellings put the very same requests in the container ...
    assert what_enters(SPACED_ASSERTS) == what_enters(SECRET_ASSERTS)
    # ... so they are the same tests, and must not be handed a container the other one's candidate ran in
    assert grading_keys(SPACED_ASSERTS) & grading_keys(SECRET_ASSERTS)


# ------------------------------------------------------------------------------------------ the cheats


def cheat_after_colluder(secret: Task, variant: Task, colluder: str, cheat: str):
    verdicts, containers, stats = grade_turns([(secret, colluder), (variant, cheat)])
    assert verdicts[0] == [Verdict.PASSED] * len(INPUTS), verdicts  # the colluder is an honest solution
    return verdicts[1], containers, stats


def test_control_a_cheat_of_the_same_assert_text_never_meets_the_colluders_container():
    cheat, containers, _ = cheat_after_colluder(SECRET_ASSERTS, SAME_ASSERTS, FUNCTION_COLLUDER, FUNCTION_CHEAT)
    assert containers[0] != containers[1]
    assert cheat == [Verdict.WRONG_ANSWER] * len(INPUTS)


def test_control_honest_programs_of_every_variant_pass_after_the_colluder():
    verdicts, containers, stats = grade_turns(
        [(SECRET_ASSERTS, FUNCTION_COLLUDER), (SPACED_ASSERTS, FUNCTION_HONEST), (AS_CALLS, FUNCTION_HONEST)]
        + [(SECRET_STDIN, STDIN_COLLUDER), (NO_NEWLINE, STDIN_HONEST), (OTHER_INPUTS, STDIN_HONEST)]
    )
    assert all(vs == [Verdict.PASSED] * len(INPUTS) for vs in verdicts), verdicts
    assert stats["resets_refused"] == 0 and stats["recycled"] >= 1  # served containers graded some of them


@pytest.mark.parametrize(
    "secret, variant, colluder, cheat",
    [
        pytest.param(SECRET_ASSERTS, SPACED_ASSERTS, FUNCTION_COLLUDER, FUNCTION_CHEAT, id="assert-respelled"),
        pytest.param(SECRET_ASSERTS, AS_CALLS, FUNCTION_COLLUDER, FUNCTION_CHEAT, id="assert-as-call-test"),
        pytest.param(SECRET_STDIN, NO_NEWLINE, STDIN_COLLUDER, STDIN_CHEAT, id="stdin-without-final-newline"),
        pytest.param(SECRET_STDIN, OTHER_INPUTS, STDIN_COLLUDER, STDIN_CHEAT, id="same-problem-other-tests"),
    ],
)
def test_a_cheat_of_the_same_tests_written_another_way_never_meets_the_colluders_container(
    secret, variant, colluder, cheat
):
    verdicts, containers, stats = cheat_after_colluder(secret, variant, colluder, cheat)
    assert containers[0] != containers[1], (
        f"the cheat of {variant.task_id} got {containers[0][:12]}, where the colluder of {secret.task_id} ran "
        f"the same tests (verdicts {[v.value for v in verdicts]}, recycled {stats['recycled']})"
    )
    assert verdicts == [Verdict.WRONG_ANSWER] * len(INPUTS)
