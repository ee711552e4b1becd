"""Held-out attacks by an outside red team, each a real submission graded in the real sandbox, beside an honest
control that passes (so the check can fail). A candidate's failure must be scored (0 reward), never masked as
``infra_error``: only the engine, the daemon or the host may mask a sample.

SWE: a diff that uses up the grading tmpfs's inodes (one empty new file per free inode) applies cleanly, and the
next set-up step (git's ``index.lock`` in the reset of the test files) then fails with ENOSPC; the grader called
that the host's failure and masked the sample, so a policy that cannot fix an issue could turn its 0 into a mask.

SWE: package code prints a pytest-looking summary naming every F2P and P2P test PASSED through pytest's saved stdout
(an unfixed ``accumulate``), then floods the output past the log bound or hangs: the run is killed, and the grader
took the statuses of the killed run's log (which cannot be checked against how the run ended) as the tests' outcomes,
``unresolved`` with every test passing: a reward of 1.0 under ``correctness: {mode: fraction}``.
"""

from __future__ import annotations

import pytest
import trio

from sandbox.fleet import open_pool
from sandbox.protocol import ExecRequest
from tasks.swe.evaluation import evaluate, grading_sandbox
from tasks.swe.family import task_result
from tasks.swe.grader import TEST_DIFF, SweGraderConfig, instance_sandbox
from tasks.swe.workspace import REPO, copy_repo, put_file
from tests.swe_support import TOOLZ, images, repos_dir, shipped

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
    call = """\
diff --git a/toolz/itertoolz.py b/toolz/itertoolz.py
--- a/toolz/itertoolz.py
+++ b/toolz/itertoolz.py
@@ -54,6 +54,8 @@ def accumulate(binop, seq, initial=no_default):
     See Also:
         itertools.accumulate :  In standard itertools for Python 3.2+
     \"\"\"
+    from ._forge import forge
+    forge()
     seq = iter(seq)
     if not initial or initial == no_default:
         try:
"""
    return new_file("toolz/_forge.py", forger) + call


def test_a_forged_summary_in_a_killed_run_passes_no_test():
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
