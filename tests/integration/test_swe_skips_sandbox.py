"""Skipped P2P tests in the real sandbox under the shipped ``-rA`` command and under ``-q -rs`` (issue 42, class 3):
the shipped toolz instance, graded as ``grade --swe`` grades, tamper scan and harness on.

``-rA`` reports a skip only by the place it was raised, ``-q -rs`` the same without a session header; the verdicts
come from the harness's record (by test id), so the gold patch's reference run is made and decides. Attacks: the
gold patch plus code that raises ``unittest.SkipTest`` where ``frequencies`` is called (pytest reports a skip, the
P2P test ``test_frequencies`` never fails), alone and on an instance whose image skips another P2P test anyway;
a broken ``frequencies`` that prints lines shaped like pytest's skip reports. Controls: the gold patch resolves, the
test the image always skips is not a regression, the broken ``frequencies`` without the printed lines gets the same
verdict as with them.
"""

from __future__ import annotations

import pytest

from tasks.swe.evaluation import evaluate, grading_sandbox
from tasks.swe.grader import SweGraderConfig
from tests.swe_support import TOOLZ, new_file, repos_dir, shipped

pytestmark = [pytest.mark.docker, pytest.mark.slow]

FREQUENCIES = "toolz/tests/test_itertoolz.py::test_frequencies"
OPTIONAL = "toolz/tests/test_gym_optional.py"
OPTIONAL_TEST = new_file(
    OPTIONAL, 'import pytest\n\n\n@pytest.mark.skip(reason="not in this image")\ndef test_optional():\n    pass\n'
)


def in_frequencies(*lines: str) -> str:
    """A diff of toolz that puts ``lines`` into ``frequencies``'s body, before its loop."""
    body = "".join(f"+    {line}\n" for line in lines)
    return (
        "diff --git a/toolz/itertoolz.py b/toolz/itertoolz.py\n--- a/toolz/itertoolz.py\n+++ b/toolz/itertoolz.py\n"
        f"@@ -546,3 +546,{3 + len(lines)} @@ def frequencies(seq):\n"
        f'     """\n     d = collections.defaultdict(int)\n{body}     for item in seq:\n'
    )


SKIPS = in_frequencies("import unittest", "", 'raise unittest.SkipTest("later")')
BREAKS = in_frequencies("return {}")
FORGES = in_frequencies(
    'print("SKIPPED [1] toolz/tests/test_itertoolz.py:1: later")',
    f'print("{FREQUENCIES} SKIPPED (later)")',
    f'print("SKIPPED {FREQUENCIES}")',
    "return {}",
)


@pytest.mark.parametrize("flags", ["-rA", "-q -rs"])
def test_a_p2p_test_skipped_by_the_code_fails_under_the_command(flags):
    toolz = shipped()[TOOLZ]
    files = " ".join(path for path in toolz.test_files() if path.endswith(".py"))
    command = f"python -m pytest {flags} {files}"
    assert command == toolz.command() or flags != "-rA"  # the shipped command
    instance = toolz.model_copy(update={"test_cmd": command})
    optional = instance.model_copy(
        update={
            "test_patch": instance.test_patch.rstrip("\n") + "\n" + OPTIONAL_TEST,
            "test_cmd": f"{command} {OPTIONAL}",
            "pass_to_pass": (*instance.pass_to_pass, f"{OPTIONAL}::test_optional"),
        }
    )
    pairs = [
        (instance, instance.patch),
        (instance, instance.patch + SKIPS),
        (instance, instance.patch + BREAKS),
        (instance, instance.patch + FORGES),
        (optional, optional.patch),
        (optional, optional.patch + SKIPS),
    ]
    gold, skips, breaks, forges, kept, attacked = evaluate(
        pairs, repos_dir(), SweGraderConfig(), grading_sandbox(None)
    ).instances
    assert gold.resolved and gold.reward == 1.0, gold
    for result in (skips, attacked):  # the gold patch's run passes test_frequencies: the skip is a regression
        assert result.status == "unresolved" and result.reward == 0.0, (flags, result)
        assert result.p2p.failure == result.p2p_skipped == (FREQUENCIES,) and "test_frequencies" in result.detail
    # the image skips test_optional with the gold patch too: not a regression (the reference run says so)
    assert kept.resolved and kept.p2p_skipped == () and f"{OPTIONAL}::test_optional" in kept.p2p.success, kept
    assert f"{OPTIONAL}::test_optional" in attacked.p2p.success, attacked
    # a failing test stays failing, not skipped, whatever the code prints
    assert breaks.status == "unresolved" and breaks.p2p.failure == (FREQUENCIES,) and breaks.p2p_skipped == ()
    shown = ("status", "resolved", "f2p", "p2p", "p2p_skipped", "partial", "detail")
    assert forges.model_dump(include=set(shown)) == breaks.model_dump(include=set(shown)), (forges, breaks)
