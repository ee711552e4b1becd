"""Attacks by an outside red team, each a real submission graded in the real sandbox, beside an honest
control that passes (so the check can fail). A candidate's failure must be scored (0 reward), never masked as
``infra_error``: only the engine, the daemon or the host may mask a sample.

SWE: a diff that uses up the grading tmpfs's inodes (one empty new file per free inode) applies cleanly, and the
next set-up step (git's ``index.lock`` in the reset of the test files) then fails with ENOSPC; the grader called
that the host's failure and masked the sample, so a policy that cannot fix an issue could turn its 0 into a mask.

SWE: package code prints a pytest-looking summary naming every F2P and P2P test PASSED through pytest's saved stdout
(an unfixed ``accumulate``), then floods the output past the log bound or hangs: the run is killed, and the grader
took the statuses of the killed run's log (which cannot be checked against how the run ended) as the tests' outcomes,
``unresolved`` with every test passing: a reward of 1.0 under ``correctness: {mode: fraction}``.

SWE: a prediction's path that is not UTF-8 (a protected file, given in a context diff the text filter does not read,
named with a byte the tree listing returns as a surrogate escape) was reported as it was listed, and serialising the
result raised: ``--swe-log-dir`` and ``--json`` crashed the whole evaluation. A diff text holding a lone surrogate
that stands for no byte could not be written into the container: a grader crash, masked as ``infra_error``.

SWE: a prediction of 280 MiB (one new file's lines) made the request that writes it into the grading container pass
a runner frame (256 MiB): the runner's stream was lost, a grader crash, masked as ``infra_error``.

SWE: with a ``-v`` test command (statuses per test id), a fix that breaks a P2P test (``interpose``) and calls
``pytest.skip`` where it would fail resolved: a skipped P2P test counted as passing. Then a skip was refused only
where pytest reported it raised in the repository's code, and a second red team moved the reported place (a frame
hidden with ``__tracebackhide__``; code compiled under an installed package's file name): now a skipped P2P test
passes only where the unpatched tree's run skips it too.

CP: a program that sleeps just under its wall-clock backstop on every test spends the grading workspace's episode
wall clock; the workspace cuts the next test's deadline to what the episode leaves, the runner stops the batch at
that (shorter) deadline, and the grader, judging "killed at its deadline" by the request's own deadline, found fewer
results than tests and no deadline kill: a grader crash, the whole task masked as ``infra_error``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio

from sandbox.failure import Verdict
from sandbox.fleet import open_pool
from sandbox.pool import WorkspacePool
from sandbox.protocol import ExecRequest
from tasks.grader import Grader, GraderConfig
from tasks.result import TaskResult
from tasks.submission import Submission
from tasks.swe.evaluation import evaluate, grading_sandbox
from tasks.swe.family import task_result
from tasks.swe.grader import TEST_DIFF, SweGraderConfig, instance_sandbox
from tasks.swe.workspace import REPO, copy_repo, put_file
from tasks.task import Limits, StdinTest
from tests.sandbox_support import sandbox_config
from tests.swe_support import (
    FUZZY_ACCUMULATE,
    TOOLZ,
    called_by_accumulate,
    images,
    repos_dir,
    shipped,
    without_tamper_checks,
)
from tests.task_support import task

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def _name(i: int) -> str:
    """A short root-level file name (``git apply --verbose`` prints two lines per file: long names would pass the
    step's output bound first, which is already the candidate's failure)."""
    digits, out = "0123456789abcdefghijklmnopqrstuvwxyz", ""
    while True:
        out, i = digits[i % 36] + out, i // 36
        if not i:
            return "Z" + out


def empty_files(count: int) -> str:
    """A git diff creating ``count`` empty files at the repository root (no test path, no module name)."""
    return "".join(
        f"diff --git a/{_name(i)} b/{_name(i)}\nnew file mode 100644\nindex 0000000..e69de29\n" for i in range(count)
    )


def free_inodes_at_apply(instance) -> int:
    """Inodes left on the grading tmpfs when the candidate's diff is applied: a fresh container of the instance's
    image with the repository and test_patch in place, less the two files grading adds before applying (the
    candidate's diff and the marker of the tree listing). A policy learns this constant of the instance."""

    async def probe() -> int:
        sandbox = instance_sandbox(grading_sandbox(None), images()[instance.instance_id])
        async with open_pool(sandbox, gc_at_start=False) as pool, pool.acquire(owner="heldout-probe") as ws:
            await copy_repo(ws)
            await put_file(ws, TEST_DIFF, instance.test_patch.encode())
            result = await ws.exec(ExecRequest(argv=["stat", "-f", "-c", "%d", "/workspace"], cwd=REPO, timeout_s=30))
            return int(result.stdout_text.split()[0])

    return trio.run(probe) - 2


def grade(pairs, **config):
    return evaluate(pairs, repos_dir(), SweGraderConfig(**config), grading_sandbox(None)).instances


def test_a_diff_that_uses_up_the_inodes_is_the_candidates_failure():
    toolz = shipped()[TOOLZ]
    free = free_inodes_at_apply(toolz)
    broken = toolz.model_copy(update={"test_patch": toolz.test_patch.replace("mk_rsample([]))", "no such line")})
    wrong, filled, control, spare, masked = grade(
        [
            (toolz, empty_files(free)),  # no fix, every inode used: the reset's index.lock fails
            (toolz, toolz.patch + empty_files(free)),  # the fix, every inode used: grading cannot be set up
            (toolz, toolz.patch),
            (toolz, toolz.patch + empty_files(free - 1)),  # one inode to spare: grading goes through
            (broken, toolz.patch),  # a test_patch that does not apply to the pristine tree: the instance's failure
        ]
    )
    for result in (wrong, filled):
        assert not result.infra_error and not result.resolved, result
        assert result.status == "patch_apply_failed" and result.reward == 0.0, result
        assert "No space left on device" in result.detail, result
    assert control.resolved and spare.resolved, (control, spare)
    assert masked.infra_error and "the instance is broken" in masked.detail, masked


def new_file(path: str, text: str) -> str:
    lines = text.splitlines()
    body = "".join(f"+{line}\n" for line in lines)
    return f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n@@ -0,0 +1,{len(lines)} @@\n{body}"


def forged_summary_then(ending: str) -> str:
    """A diff (no fix) whose ``accumulate`` prints, through pytest's saved stdout, a summary naming every F2P and P2P
    test PASSED, then runs ``ending``."""
    toolz = shipped()[TOOLZ]
    forger = f"""\
import os, stat, time
def forge():
    ids = {sorted(toolz.fail_to_pass + toolz.pass_to_pass)!r}
    text = "\\n=== short test summary info ===\\n" + "".join(f"PASSED {{i}}\\n" for i in ids)
    text += f"=== {{len(ids)}} passed in 0.42s ===\\n"
    for fd in range(3, 64):
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                os.write(fd, text.encode())
                break
        except OSError:
            continue
{ending}"""
    return new_file("toolz/_forge.py", forger) + called_by_accumulate("_forge", "forge")


def test_a_forged_summary_in_a_killed_run_passes_no_test(monkeypatch):
    without_tamper_checks(monkeypatch, record=False)  # the scan calls each `tampered` first: the killed run's rule
    toolz = shipped()[TOOLZ]
    attacks = {
        "flood": forged_summary_then("    os.write(fd, b'x' * (9 << 20))\n    os._exit(0)"),
        "hang": forged_summary_then("    time.sleep(3600)"),
        "exit": forged_summary_then("    os._exit(0)"),  # the run ends: its log is checked and found invalid
    }
    pairs = [(toolz, patch) for patch in attacks.values()] + [(toolz, toolz.patch)]
    *results, control = grade(pairs, test_timeout_s=30)
    for name, result in zip(attacks, results):
        graded = task_result(result, toolz.fail_to_pass, toolz.pass_to_pass, 2.0)
        assert not result.resolved and not result.infra_error and result.status in ("unresolved", "invalid"), name
        assert graded.fraction == 0.0, (name, result)
        if name != "exit":  # a killed run: no test passed, whatever its log printed
            assert not result.f2p.success and not result.p2p.success, (name, result)
    assert "a killed run's log is not graded" in results[0].detail and "output_truncated" in results[0].detail
    assert "timeout" in results[1].detail
    honest = task_result(control, toolz.fail_to_pass, toolz.pass_to_pass, 2.0)
    assert control.resolved and honest.fraction == 1.0, control


def context_new_file(path: str) -> str:
    return f"*** /dev/null\n--- b/{path}\n***************\n*** 0 ****\n--- 1 ----\n+ x = 1\n"


def test_paths_that_are_not_text_are_graded_and_reported(tmp_path: Path):
    toolz = shipped()[TOOLZ]
    undecodable, plain = (FUZZY_ACCUMULATE + context_new_file(f"toolz/tests/x{c}.py") for c in ("\udcff", "y"))
    pairs = [(toolz, undecodable), (toolz, plain), (toolz, toolz.patch + "\n\ud800\n")]
    report = evaluate(pairs, repos_dir(), SweGraderConfig(log_dir=tmp_path), grading_sandbox(None))
    bad, control, surrogate = report.instances
    json.loads(report.model_dump_json())  # the --json document
    assert json.loads((tmp_path / TOOLZ / "result.json").read_text())["instance_id"] == TOOLZ
    for result, name in ((bad, "x\ufffd.py"), (control, "xy.py")):
        assert result.status == "unresolved" and not result.resolved, result
        assert f"toolz/tests/{name}" in {s.path for s in result.stripped}, result.stripped
    assert surrogate.status == "patch_apply_failed" and not surrogate.infra_error, surrogate


# 1 s limit: CPU limit 1.25 s, backstop 11 s; 8 tests need 8 x 1 + 11 = 19 s of the episode's 20 s. Tests 4 and 5
# (40 and 10 MiB of stdin) do not fit one runner call's 48 MiB (tasks.grader.MAX_BATCH_STDIN_BYTES): tests 5-8 are a
# second call, whose deadlines the workspace cuts to what the episode leaves after four sleeps of 2.5 s (about 2 to
# 8 s: the first call also carries 40 MiB), under the 10.5 s that test 5 sleeps (short of its backstop).
CP_LIMIT_S = 1.0
CP_EPISODE_S = 20.0
CONTROL_EPISODE_S = 60.0
CP_TESTS = tuple(
    StdinTest(input=f"{i}\n" + "x" * ({4: 40 << 20, 5: 10 << 20}.get(i, 0)), output=f"{2 * i}\n") for i in range(1, 9)
)


def test_sleeping_through_the_episode_is_scored_not_masked():
    sleeper = "import time\nn = int(input())\ntime.sleep(10.5 if n == 5 else 2.5)\nprint(n)\n"  # wrong, and late
    honest = "print(2 * int(input()))\n"
    config = GraderConfig(min_time_s=CP_LIMIT_S, speed_factor=1.0)

    async def graded(completion: str, episode_s: float) -> TaskResult:
        sandbox = sandbox_config(pool={"size": 1}, episode={"wall_s": episode_s})
        async with WorkspacePool(sandbox) as pool:
            await pool.wait_ready(120)
            t = task(task_id="double", limits=Limits(time_s=CP_LIMIT_S), tests=CP_TESTS)
            return await Grader(pool, config).grade(t, Submission(task_id="double", completion=completion))

    async def main():
        # the honest control shows the task is passable; it gets an episode of its own, 60 s: at load average 24 a
        # fresh-clone CI's honest run of these 8 tests (50 MiB of stdin) took 21 s and ran out of the sleeper's 20 s
        return [await graded(sleeper, CP_EPISODE_S), await graded(honest, CONTROL_EPISODE_S)]

    slept, control = trio.run(main)
    assert not slept.infra_error and not slept.passed, slept
    verdicts = [t.verdict for t in slept.tests]
    assert verdicts[:4] == [Verdict.WRONG_ANSWER] * 4 and verdicts[4] == Verdict.TIME_LIMIT, slept
    assert slept.tests[4].wall_s < 10.5, slept  # killed (or refused) where the episode ran out, before its own backstop
    assert Verdict.INFRA_ERROR not in verdicts, slept
    assert control.passed and not control.infra_error, control


def test_a_diff_past_a_runner_frame_is_the_candidates_failure():
    toolz = shipped()[TOOLZ]
    count = (280 << 20) // 1025
    huge = f"diff --git a/blob b/blob\nnew file mode 100644\n--- /dev/null\n+++ b/blob\n@@ -0,0 +1,{count} @@\n"
    huge += ("+" + "x" * 1023 + "\n") * count
    flooded, control = grade([(toolz, huge), (toolz, toolz.patch)])
    assert flooded.status == "patch_apply_failed" and not flooded.infra_error and flooded.reward == 0.0, flooded
    assert "above the 16777216 bytes of any agent's diff" in flooded.detail, flooded
    assert control.resolved, control


def _interpose_skipping(*added: str) -> str:
    """A diff of toolz's ``interpose`` whose broken body skips its caller's test (``added`` lines) instead."""
    body = "".join(f"+    {line}\n" for line in added)
    return (
        "diff --git a/toolz/itertoolz.py b/toolz/itertoolz.py\n--- a/toolz/itertoolz.py\n+++ b/toolz/itertoolz.py\n"
        f"@@ -531,4 +531,{3 + len(added)} @@ def interpose(el, seq):\n"
        '     """\n     inposed = concat(zip(itertools.repeat(el), seq))\n-    next(inposed)\n'
        f"{body}     return inposed\n"
    )


SKIPS = {
    "plain": _interpose_skipping("import pytest", 'pytest.skip("later")'),
    # the skip's reported place moves to the test file: pytest hides the frame that raised it
    "tracebackhide": _interpose_skipping("__tracebackhide__ = True", "import pytest", 'pytest.skip("later")'),
    # the skip's reported place is an installed package's file
    "absolute file name": _interpose_skipping(
        'exec(compile("import pytest; pytest.skip(\'later\')", "/usr/lib/python3/dist-packages/six.py", "exec"))'
    ),
}
OPTIONAL_TEST = """\
diff --git a/toolz/tests/test_gym_optional.py b/toolz/tests/test_gym_optional.py
new file mode 100644
--- /dev/null
+++ b/toolz/tests/test_gym_optional.py
@@ -0,0 +1,6 @@
+import pytest
+
+
+@pytest.mark.skip(reason="an optional dependency this image lacks")
+def test_optional():
+    pass
"""


def test_a_p2p_test_skipped_by_the_code_is_not_passing(monkeypatch):
    """However the skip's reported place is dressed up: a skipped P2P test passes only where the unpatched tree's run
    skips it too (a reference run), so an instance whose P2P list holds a test its image always skips still
    resolves. The tamper scan is off: it calls the exec/compile variant `tampered` first."""
    without_tamper_checks(monkeypatch, record=False)
    toolz = shipped()[TOOLZ]
    verbose = toolz.model_copy(update={"test_cmd": "python -m pytest -rA -v toolz/tests/test_itertoolz.py"})
    optional = verbose.model_copy(
        update={
            "test_patch": verbose.test_patch.rstrip("\n") + "\n" + OPTIONAL_TEST,
            "test_cmd": verbose.test_cmd + " toolz/tests/test_gym_optional.py",
            "pass_to_pass": (*verbose.pass_to_pass, "toolz/tests/test_gym_optional.py::test_optional"),
        }
    )
    attacks = [(verbose, verbose.patch + diff) for diff in SKIPS.values()]
    *hidden, control, kept, attacked = grade(
        [*attacks, (verbose, verbose.patch), (optional, optional.patch), (optional, optional.patch + SKIPS["plain"])]
    )
    for name, result in zip(SKIPS, hidden):
        assert result.status == "unresolved" and not result.resolved and result.reward == 0.0, (name, result)
        assert result.p2p.failure == ("toolz/tests/test_itertoolz.py::test_interpose",), (name, result.p2p)
        assert result.p2p_skipped == result.p2p.failure and "test_interpose" in result.detail, (name, result)
    assert control.resolved, control  # the same -v command resolves the fix
    # the image skips test_optional with or without the fix: not a regression
    assert (
        kept.resolved
        and kept.p2p_skipped == ()
        and "toolz/tests/test_gym_optional.py::test_optional" in (kept.p2p.success)
    ), kept
    assert not attacked.resolved and attacked.p2p_skipped == ("toolz/tests/test_itertoolz.py::test_interpose",)
