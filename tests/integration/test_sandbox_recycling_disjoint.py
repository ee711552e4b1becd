"""Disjoint recycling (`sandbox.pool`, ``pool.disjoint_uses``, on by default): the CP grader's containers serve many
tasks, never two tasks that share a test, and never an acquire that names no keys (an episode's tools).

The attack is the one docs/sandbox.md names for recycling: a candidate passes what it computed to a later candidate of
the same tests through a counter no reset can put back, here the memory cgroup's high-water mark (the colluder
touches 64 MiB per unit of the task's hidden multiplier; the cheat prints ``n`` times ``high-water // 64 MiB``). With
every release recycled (``recycle_uses``, the trusted opt-in) the cheat passes: the channel is real. With the
default, the cheat's grading gets a container that never ran these tests and it scores 0 (wrong answer, scored, not
masked), while the container goes on to grade other tasks, whose honest programs pass. Which container served which
acquire is read on the host (the pool's own workspace ids), not from what the programs print.
"""

from __future__ import annotations

import pytest
import trio

from sandbox.config import SandboxConfig
from sandbox.failure import Verdict
from tasks.grader import Grader, GraderConfig, grading_keys
from tasks.submission import Submission
from tasks.task import Limits, StdinTest, Task
from tests.recycling_support import RecordingPool, fenced, grade_in_turn, one_container

pytestmark = [pytest.mark.docker]

UNIT = 64 << 20
HIDDEN = 5


def task(task_id: str, inputs: range, factor: int = HIDDEN, prompt: str = "print n times the hidden number") -> Task:
    return Task(
        task_id=task_id,
        source_format="codecontests",
        kind="stdin",
        prompt=prompt,
        tests=tuple(StdinTest(input=f"{n}\n", output=f"{n * factor}\n") for n in inputs),
        limits=Limits(time_s=4.0, memory_bytes=1 << 30),
    )


SECRET = task("hidden-multiplier", range(1, 5))
SAME_TESTS = task("hidden-multiplier-copy", range(1, 5))  # another id, the same tests (a duplicate row)
ONE_SHARED = task("overlaps", range(4, 8), prompt="print n times the number")  # shares the input "4\n" with SECRET
SAME_PROBLEM = task("other-tests", range(11, 15))  # the same statement, other tests
OTHERS = [task(f"other-{k}", range(100 * k, 100 * k + 3), k, f"print n times {k}") for k in range(1, 5)]

HONEST = "print(int(input()) * {factor})"
COLLUDER = f"_ = b'x' * ({HIDDEN} * {UNIT})  # the high-water mark now says {HIDDEN}\nprint(int(input()) * {HIDDEN})"
CHEAT = (
    "usage = int(open('/sys/fs/cgroup/memory/memory.max_usage_in_bytes').read())\n"
    f"print(int(input()) * (usage // {UNIT}))"
)


def default_pool(size: int = 1) -> SandboxConfig:
    return SandboxConfig.model_validate({"pool": {"size": size}, "episode": {"wall_s": 600.0}})


def test_the_channel_is_real_where_every_release_is_recycled():
    verdicts, handed, stats = grade_in_turn(one_container(), [(SECRET, COLLUDER), (SECRET, CHEAT)])
    assert verdicts == [[Verdict.PASSED] * 4, [Verdict.PASSED] * 4]  # the cheat read the colluder's multiplier
    assert handed[0][0] == handed[1][0] and stats["recycled"] >= 1


def test_a_cheat_of_the_same_tests_never_meets_the_colluders_container():
    honest = [(t, HONEST.format(factor=k)) for k, t in enumerate(OTHERS, 1)]
    cheats = [(SECRET, CHEAT), (SAME_TESTS, CHEAT), (ONE_SHARED, CHEAT), (SAME_PROBLEM, CHEAT)]
    verdicts, handed, stats = grade_in_turn(default_pool(), [(SECRET, COLLUDER), honest[0], *cheats, *honest[1:]])
    assert verdicts[0] == [Verdict.PASSED] * 4
    assert all(v == Verdict.WRONG_ANSWER for vs in verdicts[2:6] for v in vs)  # scored, never masked
    assert all(vs == [Verdict.PASSED] * 3 for vs in verdicts[1:2] + verdicts[6:])  # honest work passes
    colluders = handed[0][0]
    assert handed[1][0] == colluders  # it went on to grade another task
    assert colluders not in {ws for ws, _ in handed[2:6]}
    assert stats["recycled"] >= 4 and stats["resets_refused"] == 0


def test_no_container_serves_two_acquires_that_share_a_key_nor_one_without_keys():
    pairs = [(t, HONEST.format(factor=k)) for k, t in enumerate(OTHERS, 1)] * 3 + [(SECRET, COLLUDER)] * 2
    pairs += [(SAME_TESTS, COLLUDER), (ONE_SHARED, COLLUDER)]
    verdicts, handed, stats = grade_in_turn(default_pool(size=2), pairs, unkeyed=4)
    assert all(v == Verdict.PASSED for vs in verdicts for v in vs)
    served: dict[str, list[frozenset[str]]] = {}
    for ws, keys in handed:
        served.setdefault(ws, []).append(keys)
    for ws, uses in served.items():
        keyed = [keys for keys in uses if keys is not None]
        assert len(keyed) == len(uses) or len(uses) == 1, f"{ws[:12]} served an acquire without keys after others"
        for i, a in enumerate(keyed):
            assert all(a.isdisjoint(b) for b in keyed[i + 1 :]), f"{ws[:12]} served two tasks that share a test"
    assert len(served) < len(handed) - 4  # containers were reused
    assert stats["recycled"] >= len(pairs) // 2


def test_disjoint_uses_zero_destroys_every_container():
    config = SandboxConfig.model_validate({"pool": {"size": 1, "disjoint_uses": 0}, "episode": {"wall_s": 600.0}})
    pairs = [(t, HONEST.format(factor=k)) for k, t in enumerate(OTHERS, 1)]
    verdicts, handed, stats = grade_in_turn(config, pairs)
    assert all(v == Verdict.PASSED for vs in verdicts for v in vs)
    assert len({ws for ws, _ in handed}) == len(handed) and stats["recycled"] == 0


def test_a_container_serves_at_most_disjoint_uses_tasks():
    config = SandboxConfig.model_validate({"pool": {"size": 1, "disjoint_uses": 2}, "episode": {"wall_s": 600.0}})
    pairs = [(t, HONEST.format(factor=k)) for k, t in enumerate(OTHERS, 1)]
    _, handed, _ = grade_in_turn(config, pairs)
    uses: dict[str, int] = {}
    for ws, _ in handed:
        uses[ws] = uses.get(ws, 0) + 1
    assert max(uses.values()) == 2


def test_the_keys_are_the_problem_and_its_inputs_not_the_task_id():
    assert grading_keys(SECRET) == grading_keys(SAME_TESTS)
    assert len(grading_keys(SECRET) & grading_keys(ONE_SHARED)) == 1  # the input "4\n"
    assert len(grading_keys(SECRET) & grading_keys(SAME_PROBLEM)) == 1  # the statement
    assert not grading_keys(SECRET) & grading_keys(OTHERS[0])


def test_a_container_that_waited_past_half_its_ttl_is_never_handed_out():
    """gc may remove a container past its deadline label (created + ttl_s): a waiting one, fresh or served, is
    destroyed instead of handed out once it is past half of it."""
    config = SandboxConfig.model_validate({"pool": {"size": 1, "ttl_s": 4.0}, "episode": {"wall_s": 60.0}})

    async def main():
        async with RecordingPool(config) as pool:
            await pool.wait_ready(60)
            grader = Grader(pool, GraderConfig(concurrency=1))
            first = await grader.grade(OTHERS[0], Submission(task_id="a", completion=fenced(HONEST.format(factor=1))))
            await trio.sleep(2.5)  # the served one and the fresh one waiting beside it are both past 2 s
            second = await grader.grade(OTHERS[1], Submission(task_id="b", completion=fenced(HONEST.format(factor=2))))
            return [first, second], pool.handed, pool.stats()

    results, handed, stats = trio.run(main)
    assert all(t.verdict == Verdict.PASSED for r in results for t in r.tests)
    assert handed[0][0] != handed[1][0] and stats["expired"] >= 1, stats
