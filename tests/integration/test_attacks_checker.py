"""Attacks on assert tests that run in the checker (tasks/checker.py), by real programs in the real sandbox.

The tests here are the forms the host does not split (a loop in ``check``, a helper of the prompt the test
calls, an expected value from a library call, an expected exception, objects built by the test's set-up).
Each attack must score 0 on the tests it affects and never be masked as ``infra_error``; the honest programs
beside them pass, so each check can pass. On the code before the checker, every one of these tasks was refused
for reward (``infra_error`` for every program, honest or not).
"""

from __future__ import annotations

import pytest

from sandbox.failure import Verdict
from tasks.task import Limits
from tests.checker_support import CONFIG, HONEST, LOOP, RAISES, SECRET, SIZE, TREE, grade, scored_zero

pytestmark = pytest.mark.docker

RIGGED = (
    "\nclass Anything(int):\n"
    "    def __eq__(self, other): return True\n    def __ne__(self, other): return False\n"
    "    __hash__ = int.__hash__\n    def __bool__(self): return True\n"
    "    def __lt__(self, other): return True\n    __gt__ = __le__ = __ge__ = __lt__\n"
    "    def __sub__(self, other): return self\n    __rsub__ = __add__ = __radd__ = __sub__\n"
    "    def __abs__(self): return self\n"
)


def body(code: str) -> str:
    return "    " + code.replace("\n", "\n    ") + "\n"


PROBE = (
    "import os\n"
    "found = []\n"
    "parent = os.getppid()\n"
    "paths = [f'/proc/{parent}/{p}' for p in ('fd/0', 'fd/1', 'fd/2', 'mem', 'environ', 'maps', 'stack')]\n"
    "paths += [f'/proc/{parent}/fd/{n}' for n in range(3, 16)]\n"
    "for path in paths:\n"
    "    for mode in (os.O_RDONLY, os.O_WRONLY):\n"
    "        try:\n"
    "            fd = os.open(path, mode)\n"
    "        except OSError:\n"
    "            continue\n"
    "        found.append(path)\n"
    "        try:\n"
    "            data = os.read(fd, 1 << 20) if mode == os.O_RDONLY and '/fd/' not in path else b''\n"
    f"            found += ['SECRET at ' + path] if {SECRET!r}.encode() in data else []\n"
    "        except OSError:\n"
    "            pass\n"
    "for pid in [p for p in os.listdir('/proc') if p.isdigit()]:\n"
    "    try:\n"
    "        with open(f'/proc/{pid}/cmdline', 'rb') as handle:\n"
    f"            found += ['SECRET in cmdline'] if {SECRET!r}.encode() in handle.read() else []\n"
    "    except OSError:\n"
    "        pass\n"
    "raise ValueError('opened ' + repr(found))\n"
)
FAKE = "\\n" + "0" * 32 + ' {\\"verdict\\": {\\"outcome\\": \\"passed\\", \\"detail\\": \\"\\"}}\\n'
FORGE = (
    "import os, sys\n"
    f"line = '{FAKE}'\n"
    "print(line, flush=True)\n"
    "print(line, file=sys.stderr, flush=True)\n"
    "for fd in (0, 1, 2):  # (its protocol descriptors are its own answers: see 'garbage on the protocol')\n"
    "    os.write(fd, line.encode())\n"
    "for n in range(0, 16):\n"
    "    try:\n"
    "        with open(f'/proc/{os.getppid()}/fd/{n}', 'w') as out:\n"
    "            out.write(line)\n"
    "    except OSError:\n"
    "        pass\n"
    "return 2 * x\n"
)
# Programs for LOOP (2 * x, and a last assert that it is not the secret) that must score 0.
ATTACKS = {
    "return None": "    return None\n",
    "an object equal to everything": "    return Anything(0)\n" + RIGGED,
    "a plain object equal to everything": "    class E:\n        def __eq__(s, o): return True\n"
    "        def __ne__(s, o): return False\n    return E()\n",
    "sys.exit(0) in the function": "    import sys\n    sys.exit(0)\n",
    "sys.exit(0) when loaded": "    return 2 * x\nimport sys\nsys.exit(0)\n",
    "os._exit(0)": "    import os\n    os._exit(0)\n",
    "raise SystemExit / KeyboardInterrupt": "    raise (SystemExit if x % 2 else KeyboardInterrupt)(0)\n",
    "a forged AssertionError-free builtins": "    import builtins\n"
    "    builtins.AssertionError = type('Never', (BaseException,), {})\n"
    "    builtins.all = lambda it: True\n    return -1\n",
    "kill the checker": "    import os, signal\n    os.kill(os.getppid(), signal.SIGKILL)\n",
    "stop the checker": "    import os, signal\n    os.kill(os.getppid(), signal.SIGSTOP)\n    return 2 * x\n",
    "kill every process": "    import os, signal\n    os.kill(-1, signal.SIGKILL)\n",
    "a fake verdict everywhere": body(FORGE).replace("    return 2 * x\n", "    return None\n"),
    "garbage on the protocol": "    import os\n"
    "    for fd in range(3, 64):\n        try:\n            os.write(fd, b'\\xff' * 64)\n        except OSError:\n"
    "            pass\n    return 2 * x\n",
    "a reply past the frame bound": "    return 'x' * (80 << 20)\n",
    "a busy loop": "    while True:\n        pass\n",
    "a sleeper": "    import time\n    time.sleep(3600)\n",
}


def test_every_task_here_runs_in_the_checker():
    """The forms below are not split: each test runs the checker (split is False), none is refused."""
    from tasks.grader import Grader

    for task, _ in HONEST.values():
        for i, test in enumerate(task.tests):
            request, _ = Grader(None, CONFIG).plan(task, i, test)
            assert request is not None and "grader-owned checker" in request.argv[-1][:200], task.task_id


def test_honest_programs_pass():
    results = grade(*HONEST.values())
    for name, result in zip(HONEST, results):
        assert result.passed, (name, [(t.verdict, t.detail) for t in result.tests])
        assert all(t.split is False for t in result.tests)


@pytest.mark.parametrize("name", list(ATTACKS))
def test_attacks_on_a_loop_score_zero(name):
    (result,) = grade((LOOP, ATTACKS[name]))
    assert scored_zero(result), [(t.verdict, t.detail) for t in result.tests]


def test_the_fake_verdict_reaches_nothing_and_the_answer_is_still_judged():
    """The forger's own answer is right: it passes on its merits, and its fake lines changed nothing."""
    forged, wrong = grade((LOOP, body(FORGE)), (LOOP, body(FORGE).replace("return 2 * x", "return None")))
    assert forged.passed, forged.tests
    assert scored_zero(wrong), wrong.tests
    assert wrong.tests[0].verdict == Verdict.WRONG_ANSWER


def test_the_checker_is_out_of_reach_and_the_secret_nowhere():
    """The candidate's process cannot open the checker's /proc entries (non-dumpable, another process), and the
    test's expected values are in no command line."""
    (result,) = grade((LOOP.model_copy(update={"limits": Limits(time_s=10.0)}), body(PROBE)))
    (test,) = result.tests
    assert test.verdict == Verdict.RUNTIME_ERROR and not result.infra_error, test
    assert test.detail == "ValueError: opened []", test.detail


def test_the_probe_finds_what_it_may_open():
    """Control: the same probe, pointed at the candidate's own process, opens its entries."""
    own = body(PROBE.replace("parent = os.getppid()", "parent = os.getpid()"))
    (result,) = grade((LOOP, own))
    assert "/fd/1'" in result.tests[0].detail and "/mem'" in result.tests[0].detail, result.tests[0].detail


def test_a_forged_exception_class_or_a_patched_module_does_not_cross():
    """A class of the candidate's named ValueError is no ValueError here; patching sys in the candidate's
    process leaves the checker's sys alone; objects of the set-up's classes stay in the candidate's process."""
    forged = "    class ValueError(Exception):\n        pass\n    if x < 0:\n        raise ValueError(x)\n    return x ** 0.5\n"
    patched = "import sys\nsys.getsizeof = lambda o: 7\ndef tuple_size(t):\n    return 7\n"
    rigged_tree = (
        "class Node:\n    def __init__(self, data):\n        self.left = self.right = None\n"
        "    def __eq__(self, other):\n        return True\n"
        "def max_height(node):\n    return node\n"
    )
    results = grade((RAISES, forged), (SIZE, patched), (TREE, rigged_tree))
    raises, size, tree = results
    assert raises.tests[0].verdict == Verdict.RUNTIME_ERROR and not raises.passed, raises.tests
    assert scored_zero(size) and scored_zero(tree), (size.tests, tree.tests)
