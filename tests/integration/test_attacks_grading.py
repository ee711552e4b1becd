"""Attacks on CP grading and on the tools by real programs in the real sandbox, as a policy would submit them:
output tricks, float-tolerance abuse, exit codes and stderr, a child that answers after its parent exits or after
the time limit, values the host cannot read back, sabotage of the grading container for the tests that follow, and
hostile tool calls. Each attack must score 0 on the tests it affects and never be masked as ``infra_error`` (only
the engine or the host may mask a sample); the honest programs beside them pass, so the check can pass."""

from __future__ import annotations

import pytest

from gym.format.message import ToolCall
from gym.tools import ALL_TOOLS, Toolbox, ToolsConfig
from sandbox.config import SandboxConfig
from sandbox.failure import FailureKind, Verdict
from tasks.grader import GraderConfig, grade_pairs
from tasks.result import TaskResult
from tasks.submission import Submission
from tasks.task import CallTest, Task
from tests.sandbox_support import in_workspace, small_config
from tests.task_support import stdin_task

pytestmark = pytest.mark.docker

SANDBOX = SandboxConfig.model_validate({"pool": {"size": 2}, "episode": {"wall_s": 3600.0}})
CONFIG = GraderConfig(default_time_s=1.0, min_time_s=1.0)
READ = "import os, sys, time\na, b = map(int, sys.stdin.read().split())\n"


DOUBLE = Task(
    task_id="double",
    source_format="lcb",
    kind="call",
    prompt="p",
    fn_name="solve",
    tests=(CallTest(args=[2], expected=4), CallTest(args=[5], expected=10)),
)
SUM = stdin_task("sum", [("1 2\n", "3\n"), ("5 5\n", "10\n"), ("-1 1\n", "0\n")])
RATIO = stdin_task("ratio", [("1 3\n", "0.333333333\n"), ("2 3\n", "0.666666667\n"), ("7 2\n", "3.5\n")])

# Programs for SUM that must score 0 on every test (the true sum is a + b).
WRONG_EVERYWHERE = {
    "trailing data": READ + "print(a + b)\nprint('extra')\n",
    "every candidate answer": READ + "print(*range(-20, 21), sep='\\n')\n",
    "answer on stderr": READ + "print(a + b, file=sys.stderr)\n",
    "answer then nonzero exit": READ + "print(a + b, flush=True)\nsys.exit(3)\n",
    "answer then SIGKILL": READ + "print(a + b, flush=True)\nos.kill(os.getpid(), 9)\n",
    "answer with a NUL": READ + "print(f'{a + b}\\0')\n",
    "answer in full-width digits": READ + "print(str(a + b).translate({48 + i: 0xFF10 + i for i in range(10)}))\n",
    "answer as a float": READ + "print(float(a + b))\n",
    "child answers after the time limit": READ + "sys.stdout.flush()\n"
    "if os.fork() == 0:\n    time.sleep(3)\n    print(a + b, flush=True)\n    os._exit(0)\n",
    "answer padded past the output limit": READ + "print(a + b)\nsys.stdout.write(' ' * (64 << 20))\n",
    "success marker and exit 0": "print('PASSED', flush=True)\nimport os\nos._exit(0)\n",
}
# Programs for RATIO that must score 0 on every test (the true ratio is a / b to 1e-6).
WRONG_FLOATS = {
    "nan": "print('nan')\n",
    "inf": "print('inf')\n",
    "huge exponent": "print('1e999')\n",
    "hex float": READ + "print((a / b).hex())\n",
    "every ratio": READ + "print(*[k / 100 for k in range(400)])\n",
    "off past the tolerance": READ + "print(f'{a / b + 1e-4:.9f}')\n",
}
# Programs for SUM that answer test 1 right and sabotage the container for the tests after it; the first three
# break the tests that follow (scored as the candidate's failures), the last two leave them able to pass.
SABOTAGE = {
    "delete the program": READ + "os.remove('solution.py') if a == 1 else None\nprint(a + b)\n",
    "make the workspace unreadable": READ + "os.chmod('.', 0) if a == 1 else None\nprint(a + b)\n",
    "replace the program with a directory": READ
    + "(os.remove('solution.py'), os.mkdir('solution.py')) if a == 1 else None\nprint(a + b)\n",
    "fill the disk": READ + "f = open('fill', 'wb')\n"
    "try:\n    [f.write(b'x' * (1 << 20)) for _ in range(1 << 14)] if a == 1 else None\n"
    "except OSError:\n    pass\nprint(a + b)\n",
    "leave a process holding stdout": READ + "print(a + b, flush=True)\nif a == 1 and os.fork() == 0:\n"
    "    time.sleep(30)\n",
}
# Functions for DOUBLE that must score 0: values the host cannot read back must be the candidate's failure.
WRONG_VALUES = {
    "an int past the host's digit limit": "import sys\nsys.set_int_max_str_digits(0)\n"
    "def solve(x):\n    return 10 ** 5000\n",
    "a float past the host's digit limit": "def solve(x):\n    return float('1' + '0' * 400)\n",
    "a list nested past the decoder's depth": "def solve(x):\n    v = []\n    for _ in range(300):\n"
    "        v = [v]\n    return v\n",
    "a set for a list": "def solve(x):\n    return {2 * x}\n",
    "a bool for an int": "def solve(x):\n    return True\n",
    "the right value as a string": "def solve(x):\n    return str(2 * x)\n",
}
HONEST = {
    SUM.task_id: READ + "print(a + b)\n",
    RATIO.task_id: READ + "print(f'{a / b:.9f}')\n",
    DOUBLE.task_id: "def solve(x):\n    return 2 * x\n",
}


@pytest.fixture(scope="module")
def graded() -> dict[str, TaskResult]:
    named = [(f"honest {t.task_id}", t, HONEST[t.task_id]) for t in (SUM, RATIO, DOUBLE)]
    named += [(name, DOUBLE, code) for name, code in WRONG_VALUES.items()]
    named += [(name, SUM, code) for name, code in {**WRONG_EVERYWHERE, **SABOTAGE}.items()]
    named += [(name, RATIO, code) for name, code in WRONG_FLOATS.items()]
    pairs = [(task, Submission(task_id=task.task_id, completion=code)) for _, task, code in named]
    return dict(zip([name for name, _, _ in named], grade_pairs(pairs, CONFIG, SANDBOX)))


def test_honest_programs_pass(graded):
    for task in (SUM, RATIO, DOUBLE):
        result = graded[f"honest {task.task_id}"]
        assert result.passed and result.fraction == 1.0 and not result.infra_error, result


@pytest.mark.parametrize("name", [*WRONG_EVERYWHERE, *WRONG_FLOATS, *WRONG_VALUES])
def test_an_output_trick_scores_zero_and_is_never_masked(graded, name):
    result = graded[name]
    assert not result.infra_error, result
    assert result.fraction == 0.0 and not result.passed, result
    assert all(t.verdict not in (Verdict.PASSED, Verdict.INFRA_ERROR) for t in result.tests), result


@pytest.mark.parametrize("name", list(SABOTAGE))
def test_sabotage_of_the_container_is_the_candidates_failure(graded, name):
    result = graded[name]
    assert not result.infra_error and all(t.verdict != Verdict.INFRA_ERROR for t in result.tests), (name, result)
    assert result.tests[0].verdict == Verdict.PASSED, result  # the check itself could pass
    breaks = list(SABOTAGE).index(name) < 3
    assert result.passed != breaks, result


# -- tool calls a policy samples, in a real workspace ---------------------------------------------------------

HOSTILE_TOOL_CALLS = [
    ("write_file", {"path": "a\x00b", "content": "x"}),
    ("write_file", {"path": "\ud800", "content": "x"}),
    ("write_file", {"path": "x" * 300, "content": "x"}),
    ("write_file", {"path": "d/" * 2_000 + "x", "content": "x"}),
    ("write_file", {"path": "", "content": "x"}),
    ("write_file", {"path": ".", "content": "x"}),
    ("write_file", {"path": "/proc/self/mem", "content": "x"}),
    ("write_file", {"path": "../../etc/passwd", "content": "x"}),
    ("write_file", {"path": "new\nline", "content": "\ud800"}),
    ("write_file", {"path": "big", "content": "x" * (8 << 20)}),
    ("read_file", {"path": "/proc/1/environ"}),
    ("read_file", {"path": "a\x00b"}),
    ("list_dir", {"path": "\udcff"}),
    ("python", {"code": "import sys; sys.stdout.buffer.write(bytes(range(256)) * 64)"}),
    ("python", {"code": "print(1)", "cwd": "\x00"}),
    ("bash", {"command": "printf '\\xff\\xfe'; printf '\\xc3' >&2"}),
    ("apply_patch", {"patch": "--- a/\x00\n+++ b/\x00\n@@ -0,0 +1 @@\n+x\n"}),
    ("submit", {"path": "a\x00b"}),
    ("bash", {"command": "echo still here"}),
]


def test_hostile_tool_calls_in_a_real_workspace_are_scored_data():
    box = Toolbox(ToolsConfig(enabled=ALL_TOOLS, timeout_s=5))
    calls = [ToolCall(namespace="functions", name=n, arguments=a, raw="{}") for n, a in HOSTILE_TOOL_CALLS]

    async def go(ws):
        return [await box.call(ws, call) for call in calls]

    outcomes = in_workspace(go, small_config())
    for (name, arguments), outcome in zip(HOSTILE_TOOL_CALLS, outcomes):
        assert outcome.failure != FailureKind.INFRA_ERROR, (name, ascii(arguments)[:80], outcome)
        outcome.output.encode("utf-8")
    assert outcomes[-1].failure == FailureKind.OK and "still here" in outcomes[-1].output  # the workspace lives on
    assert {o.failure for o in outcomes} >= {FailureKind.OK, FailureKind.TOOL_ERROR, FailureKind.SANDBOX_DENIED}
