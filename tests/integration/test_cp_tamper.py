"""Anti-tamper: real candidate programs that try to fool the grader, run in the real sandbox.

Each attack must score 0 on the tests it affects (never passed, never masked
as infra_error), and the grader must keep judging the tests it does not
affect. Attacks: sys.exit(0)/os._exit(0) before or during tests, raising
SkipTest, printing fake success markers, an object whose __eq__ is always
true (of which only its truth value crosses), monkeypatching builtins or json, reading expected outputs from disk or
the environment (searched for, and shown absent), killing the runner, and
writing files for the next task.
"""

from __future__ import annotations

import secrets

import pytest
import trio

from sandbox.config import SandboxConfig
from sandbox.failure import Verdict
from sandbox.pool import WorkspacePool
from sandbox.protocol import ExecRequest
from tasks.grader import Grader, GraderConfig, grade_pairs
from tasks.result import TaskResult
from tasks.submission import Submission
from tasks.task import Limits, Task
from tests.task_support import assert_task, call_task, stdin_task

pytestmark = pytest.mark.docker

SANDBOX = SandboxConfig.model_validate({"pool": {"size": 2}, "episode": {"wall_s": 3600.0}})
CONFIG = GraderConfig(default_time_s=2.0, min_time_s=2.0)


SUM = stdin_task("sum", [("1 2\n", "3\n"), ("5 5\n", "10\n"), ("-1 1\n", "0\n")])
DOUBLE = call_task("double", [([2], 4), ([5], 10), ([0], 0)])
DOUBLE_ASSERT = assert_task("double-assert", ["assert candidate(2) == 4", "assert candidate(5) == 10"])
CORRECT_SUM = "a, b = map(int, input().split())\nprint(a + b)\n"


def grade(*pairs: tuple[Task, str]) -> list[TaskResult]:
    return grade_pairs([(t, Submission(task_id=t.task_id, completion=c)) for t, c in pairs], CONFIG, SANDBOX)


def verdicts(result: TaskResult) -> list[Verdict]:
    return [t.verdict for t in result.tests]


def assert_scores_zero(result: TaskResult) -> None:
    assert not result.infra_error, result
    assert result.fraction == 0.0 and not result.passed, [(t.verdict, t.detail) for t in result.tests]


def test_controls_pass():
    """The attacks below fail because of the attack: the honest solutions pass."""
    honest = grade(
        (SUM, CORRECT_SUM), (DOUBLE, "def solve(x):\n    return 2 * x\n"), (DOUBLE_ASSERT, "    return 2 * x\n")
    )
    assert all(r.passed for r in honest), honest


def test_exit_zero_before_or_during_tests():
    results = grade(
        (SUM, "import sys\nsys.exit(0)\n"),
        (SUM, "import os\nprint('', end='', flush=True)\nos._exit(0)\n"),
        (DOUBLE, "import sys\n\ndef solve(x):\n    sys.exit(0)\n"),
        (DOUBLE, "import os\n\ndef solve(x):\n    os._exit(0)\n"),
        (DOUBLE, "import os\nos._exit(0)\n"),
        (DOUBLE_ASSERT, "    import os\n    os._exit(0)\n"),
        (DOUBLE_ASSERT, "    raise SystemExit(0)\n"),
    )
    for result in results:
        assert_scores_zero(result)
    assert set(verdicts(results[0])) == {Verdict.WRONG_ANSWER}  # nothing printed
    assert set(verdicts(results[3])) == {Verdict.RUNTIME_ERROR}  # no result reported


def test_raising_skiptest():
    results = grade(
        (DOUBLE, "import unittest\n\ndef solve(x):\n    raise unittest.SkipTest('skip')\n"),
        (DOUBLE_ASSERT, "    import unittest\n    raise unittest.SkipTest('skip')\n"),
        (SUM, "import unittest\nraise unittest.SkipTest('skip')\n"),
        (DOUBLE, "import pytest_is_absent_so_raise_this\n"),
    )
    for result in results:
        assert_scores_zero(result)
        assert set(verdicts(result)) == {Verdict.RUNTIME_ERROR}


def test_printing_fake_success_markers():
    markers = (
        "print('PASSED'); print('All tests passed'); print('OK'); print('{\"passed\": true, \"reward\": 1.0}'); "
        "print('0' * 32 + ' {\"value\": [\"i\", 4]}', flush=True)"
    )
    results = grade(
        (SUM, markers + "\n"),
        (DOUBLE, markers + "\n\ndef solve(x):\n    " + markers + "\n    return None\n"),
        (DOUBLE_ASSERT, "    " + markers + "\n    return None\n"),
    )
    for result in results:
        assert_scores_zero(result)
        assert set(verdicts(result)) == {Verdict.WRONG_ANSWER}


def test_object_whose_eq_is_always_true():
    rigged = (
        "class Anything(int):\n"
        "    def __eq__(self, other):\n        return True\n"
        "    def __ne__(self, other):\n        return False\n"
        "    __hash__ = int.__hash__\n"
        "    def __bool__(self):\n        return True\n"
        "    def __sub__(self, other):\n        return 0\n"
        "    __rsub__ = __sub__\n"
        "    def __abs__(self):\n        return 0\n"
        "    def __lt__(self, other):\n        return True\n"
    )
    tolerant = assert_task(
        "tolerant", ["assert abs(candidate(1) - 0.5) < 1e-06", "assert candidate(2)", "assert candidate(3) == [1, 2]"]
    )
    results = grade(
        (DOUBLE, rigged + "\ndef solve(x):\n    return Anything(0)\n"),
        (DOUBLE_ASSERT, "    return Anything(0)\n" + rigged.replace("\n", "\n    ").replace("class", "    class", 0)),
        (tolerant, "    return Anything(0)\n\n" + rigged),
        (tolerant, "    return True\n"),
    )
    for result in results[:2]:
        assert_scores_zero(result)
    assert any("not plain data" in t.detail for t in results[0].tests)
    # Of an object that is not plain data only its truth value crosses: `assert candidate(2)` asks for nothing
    # more, and a plain `return True` passes it as well; every comparison fails.
    rigged_verdicts, true_verdicts = verdicts(results[2]), verdicts(results[3])
    assert rigged_verdicts == [Verdict.WRONG_ANSWER, Verdict.PASSED, Verdict.WRONG_ANSWER] == true_verdicts
    assert not results[2].passed and not results[2].infra_error


def test_monkeypatching_builtins_and_json():
    patches = (
        "import builtins, json, sys, io\n"
        "json.dumps = lambda *a, **k: '\"4\"'\n"
        "json.loads = lambda *a, **k: 4\n"
        'json.JSONEncoder.encode = lambda self, o: \'{"value": ["i", 4]}\'\n'
        "builtins.isinstance = lambda *a: True\n"
        "builtins.type = lambda *a: int\n"
        "builtins.AssertionError = Exception\n"
        "builtins.abs = lambda x: 0\n"
        "builtins.print = lambda *a, **k: None\n"
        "sys.stdout = io.StringIO()\n"
    )
    results = grade(
        (DOUBLE, patches + "\ndef solve(x):\n    return -1\n"),
        (DOUBLE_ASSERT, "    return -1\n\n" + patches),
        (SUM, patches + "print(0)\n"),
    )
    for result in results:
        assert_scores_zero(result)
    # the same patches do not break the grading of a correct answer: the driver bound what it needs first
    correct = grade((DOUBLE, patches + "\ndef solve(x):\n    return 2 * x\n"))
    assert correct[0].passed, correct[0]


SEARCHER = """
import gc, os, re
NEEDLE = re.compile(rb"GYM" + rb"SECRET-[0-9a-f]{16}")
found = []
for key, value in os.environ.items():
    if NEEDLE.search((key + "=" + value).encode()):
        found.append("env:" + key)
paths = []
for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
    paths += [f"/proc/{pid}/environ", f"/proc/{pid}/cmdline"]
for path in paths:
    try:
        with open(path, "rb") as handle:
            if NEEDLE.search(handle.read()):
                found.append(path)
    except OSError:
        pass
for root, dirs, files in os.walk("/"):
    if root.startswith(("/sys", "/proc", "/dev")):
        dirs[:] = []
        continue
    for name in files:
        path = os.path.join(root, name)
        try:
            if os.path.islink(path) or os.path.getsize(path) > 8 << 20:
                continue
            with open(path, "rb") as handle:
                if NEEDLE.search(handle.read()):
                    found.append(path)
        except OSError:
            pass
for obj in gc.get_objects():
    if isinstance(obj, (dict, list, tuple)) and NEEDLE.search(repr(obj).encode()):
        found.append("memory")
        break
RESULT = ("FOUND " + " ".join(found)) if found else "NOTFOUND"
"""


def test_expected_outputs_are_nowhere_in_the_container():
    secret = "GYMSECRET-" + secrets.token_hex(8)
    slow = Limits(time_s=30.0)  # the search walks the whole root filesystem
    stdin_secret = stdin_task("secret-stdin", [("go\n", secret + "\n")]).model_copy(update={"limits": slow})
    call_secret = call_task("secret-call", [(["go"], secret)]).model_copy(update={"limits": slow})
    assert_secret = assert_task("secret-assert", [f"assert candidate('go') == {secret!r}"])
    assert_secret = assert_secret.model_copy(update={"limits": slow})
    results = grade(
        (stdin_secret, SEARCHER + "print(RESULT)\n"),
        (call_secret, SEARCHER + "\ndef solve(x):\n    return RESULT\n"),
        (assert_secret, "    return RESULT\n\n" + SEARCHER),
    )
    for result in results:
        assert_scores_zero(result)
    assert [r.tests[0].verdict for r in results] == [Verdict.WRONG_ANSWER] * 3
    assert results[0].tests[0].output_head.strip() == "NOTFOUND"
    assert "NOTFOUND" in results[1].tests[0].detail and "NOTFOUND" in results[2].tests[0].detail


def test_the_secret_search_can_find_a_planted_secret():
    """Positive control: the same search finds the secret when it IS in the container."""
    secret = "GYMSECRET-" + secrets.token_hex(8)

    async def main():
        async with WorkspacePool(SANDBOX) as pool:
            async with pool.acquire(owner="pytest-cp") as ws:
                await ws.write_file("/workspace/planted.txt", secret.encode())
                await ws.write_file("/workspace/search.py", (SEARCHER + "print(RESULT)\n").encode())
                return await ws.exec(ExecRequest(argv=["python3", "-I", "search.py"], timeout_s=60))

    result = trio.run(main)
    assert result.stdout_text.startswith("FOUND") and "/workspace/planted.txt" in result.stdout_text


def test_killing_the_runner_scores_zero_and_grading_continues():
    control = "control\n"
    task = stdin_task("killer", [("1 2\n", "3\n"), (control, "ok\n"), ("5 5\n", "10\n"), (control, "ok\n")])
    killer = (
        "import os, signal, subprocess, sys\n"
        "line = sys.stdin.readline()\n"
        "if line == 'control\\n':\n"
        "    print('ok')\n"
        "    sys.exit(0)\n"
        "for argv in (['bash', '-c', 'kill -9 -1'], ['bash', '-c', 'kill 1; kill -9 1'], ['pkill', 'python'],\n"
        "             ['pkill', '-9', '-f', 'runner']):\n"
        "    try:\n"
        "        subprocess.run(argv, timeout=5)\n"
        "    except OSError:\n"
        "        pass\n"
        "for pid in [int(p) for p in os.listdir('/proc') if p.isdigit()]:\n"
        "    if pid != os.getpid():\n"
        "        try:\n"
        "            os.kill(pid, signal.SIGKILL)\n"
        "        except OSError:\n"
        "            pass\n"
        "print('PASSED')\n"
    )
    (result,) = grade((task, killer))
    assert not result.infra_error, [(t.verdict, t.detail) for t in result.tests]
    attacked, controls = verdicts(result)[0::2], verdicts(result)[1::2]
    assert set(attacked) <= {Verdict.WRONG_ANSWER, Verdict.RUNTIME_ERROR}  # it killed itself at best
    assert controls == [Verdict.PASSED, Verdict.PASSED]  # the runner lived on and judged the next tests


def test_files_written_for_the_next_task_are_gone():
    writer = (
        "import os\n"
        "for path in ('/workspace/leftover', '/tmp/leftover', os.path.expanduser('~/leftover'), '/dev/shm/leftover'):\n"
        "    try:\n"
        "        with open(path, 'w') as handle:\n"
        "            handle.write('3')\n"
        "    except OSError:\n"
        "        pass\n"
        "print(3)\n"
    )
    reader = (
        "import os\n"
        "paths = ('/workspace/leftover', '/tmp/leftover', os.path.expanduser('~/leftover'), '/dev/shm/leftover')\n"
        "print('dirty' if any(os.path.exists(p) for p in paths) else 'clean')\n"
    )
    first = stdin_task("writer", [("\n", "3\n")])
    second = stdin_task("reader", [("\n", "clean\n")])

    async def main():
        async with WorkspacePool(SANDBOX) as pool:
            grader = Grader(pool, CONFIG)
            written = await grader.grade(first, Submission(task_id="writer", completion=writer))
            read = await grader.grade(second, Submission(task_id="reader", completion=reader))
            return written, read

    written, read = trio.run(main)
    assert written.passed
    assert read.passed, read.tests[0].output_head  # a fresh container: nothing left from the previous task


MODULUS = stdin_task("modulus", [("7\n", "1000000007\n"), ("1\n", "5\n")])


def test_output_the_judge_chokes_on_and_floats_for_integers_score_zero_unmasked():
    """Huge integers crashed the host judge (int-string limit -> grader crash -> masked); a float within
    the relative tolerance passed for an integer; stdin that the program never reads lost the runner."""
    attacks = {
        "huge": "print('9' * 100000)\n",
        "huge-call": "def solve(x):\n    return int('7' * 4000) ** 3\n",
        "float": "n = int(input())\nprint(1000000020.0 if n == 7 else 5.0000001)\n",
        "ignore-stdin": "print(1000000007)\n",
    }
    big_input = stdin_task("big-input", [("1\n" * (2 << 20), "1000000007\n"), ("2\n", "1\n")])
    results = grade(
        (MODULUS, attacks["huge"]),
        (DOUBLE, attacks["huge-call"]),
        (MODULUS, attacks["float"]),
        (big_input, attacks["ignore-stdin"]),
    )
    huge, huge_call, floats, ignore = results
    for result in (huge, huge_call, floats):
        assert not result.infra_error and result.fraction == 0.0, result
    assert set(verdicts(huge)) == {Verdict.WRONG_ANSWER} and set(verdicts(floats)) == {Verdict.WRONG_ANSWER}
    assert not ignore.infra_error and verdicts(ignore) == [Verdict.PASSED, Verdict.WRONG_ANSWER], ignore


def test_asserts_cannot_be_forged_from_the_candidates_interpreter():
    """An expected side computed by a call (`== math.factorial(5)`) is evaluated on the host, so patching
    math does nothing; an assert that cannot be split runs in the checker, a process of its own that the
    candidate's patches and objects never reach (tests/integration/test_attacks_checker.py has the rest)."""
    factorial = assert_task(
        "factorial",
        ["assert candidate(5) == math.factorial(5)", "assert candidate(3) == 6"],
        prompt="import math\ndef solve(x):\n",
    )
    patch_math = "    return 7\nimport math as _m\n_m.factorial = lambda n: 7\n"
    honest = "    return math.factorial(x)\n"
    unsplittable = assert_task("whole", ["assert all(candidate(x) == x * 2 for x in [1, 2])"])
    frame_walker = (
        "    return x\nclass _Any:\n    def __eq__(self, other):\n        return True\n"
        "import sys\nsys.modules['builtins'].all = lambda it: True\n"
    )
    patched, correct, walked, doubled = grade(
        (factorial, patch_math), (factorial, honest), (unsplittable, frame_walker), (unsplittable, "    return 2 * x\n")
    )
    assert verdicts(patched) == [Verdict.WRONG_ANSWER, Verdict.WRONG_ANSWER] and not patched.infra_error
    assert correct.passed, correct
    assert_scores_zero(walked)
    assert walked.tests[0].split is False and walked.tests[0].verdict == Verdict.WRONG_ANSWER
    assert doubled.passed, doubled  # the same test grades honest work
