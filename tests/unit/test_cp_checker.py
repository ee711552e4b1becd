"""The checker (tasks/checker.py) and the driver's serve mode, run here as host subprocesses.

The test's code runs in the checker; the candidate's in the driver's serve mode, a child process reached with
plain data only. (The same programs in the real sandbox, attacked: tests/integration/test_attacks_checker.py.)
"""

from __future__ import annotations

import marshal
import subprocess
import sys

import pytest

from tasks.encoding import parse_report
from tasks.grader import checker_source, driver_source

NONCE = "0123456789abcdef" * 2


def run_checker(tmp_path, program: str, test: str, names=(), candidate=None, prelude="", setup=""):
    path = tmp_path / "solution.py"
    path.write_text(program)
    request = {
        "nonce": NONCE,
        "program": str(path),
        "driver": driver_source(),
        "python": [sys.executable, "-I", "-S"],
        "names": list(names),
        "candidate": candidate,
        "prelude": prelude,
        "setup": setup,
        "test": test,
    }
    command = [sys.executable, "-I", "-S", "-c", checker_source()]
    return subprocess.run(command, input=marshal.dumps(request, 4), capture_output=True, timeout=60)


def check(tmp_path, program: str, test: str, **fields) -> dict:
    """The checker's verdict payload for ``test`` over ``program``."""
    proc = run_checker(tmp_path, program, test, **fields)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    report = parse_report(proc.stdout, NONCE)
    assert report is not None and report.kind == "verdict", proc.stdout
    return report.payload


def outcome(tmp_path, program: str, test: str, **fields) -> str:
    return check(tmp_path, program, test, **fields)["outcome"]


DOUBLE = "def f(x):\n    return 2 * x\n"


def test_a_loop_over_proxied_calls_passes_and_fails_on_the_answers(tmp_path):
    loop = "for x in range(30):\n    assert f(x) == x * 2\n"
    assert outcome(tmp_path, DOUBLE, loop, names=["f"]) == "passed"
    assert outcome(tmp_path, "def f(x):\n    return x * 2 if x < 29 else 0\n", loop, names=["f"]) == "assertion"
    verdict = check(tmp_path, "def f(x):\n    return None\n", loop, names=["f"])
    assert verdict == {"outcome": "assertion", "detail": "an assert of the test failed (line 2 of the test)"}


def test_humaneval_binds_candidate_and_takes_prompt_helpers_from_the_prompt(tmp_path):
    prelude = "def encode(s):\n    return s[1:] + s[:1]"
    test = "def check(candidate):\n    for s in ['abc', 'xy']:\n        assert candidate(encode(s)) == s\n\ncheck(decode)\n"
    program = "def encode(s):\n    return 'hijacked'\n\ndef decode(s):\n    return s[-1:] + s[:-1]\n"
    fields = {"names": ["decode"], "candidate": "decode", "prelude": prelude}
    assert outcome(tmp_path, program, test, **fields) == "passed"  # the prompt's encode, not the program's
    assert outcome(tmp_path, "def decode(s):\n    return 'abc'\n", test, **fields) == "assertion"
    assert check(tmp_path, "x = 1\n", test, **fields)["detail"] == "the program defines no function decode"


@pytest.mark.parametrize(
    "raised, outcome_",
    [
        ("ValueError('negative')", "passed"),
        ("type('Negative', (ValueError,), {})('x')", "passed"),  # a subclass crosses as its builtin class
        ("type('ValueError', (Exception,), {})('forged')", "raised"),  # a class named ValueError is no ValueError
        ("KeyError('k')", "raised"),
        ("SystemExit(0)", "aborted"),
        ("KeyboardInterrupt()", "aborted"),
    ],
)
def test_the_candidates_exceptions_are_rebuilt_by_builtin_class(tmp_path, raised, outcome_):
    program = f"def root(x):\n    if x < 0:\n        raise {raised}\n    return x ** 0.5\n"
    test = "assert root(4) == 2\ntry:\n    root(-1)\nexcept ValueError:\n    pass\nelse:\n    assert False\n"
    assert outcome(tmp_path, program, test, names=["root"]) == outcome_


def test_an_abort_holds_even_when_the_test_swallows_everything(tmp_path):
    test = "try:\n    f(1)\nexcept BaseException:\n    pass\n"
    assert outcome(tmp_path, "def f(x):\n    import sys\n    sys.exit(0)\n", test, names=["f"]) == "aborted"
    died = check(tmp_path, "def f(x):\n    import os\n    os._exit(0)\n", test, names=["f"])
    assert died["outcome"] == "aborted" and "process ended" in died["detail"]
    assert outcome(tmp_path, "import sys\nsys.exit(0)\ndef f(x):\n    return 1\n", "f(1)\n", names=["f"]) == "aborted"


def test_objects_that_are_not_plain_data_stay_in_the_candidates_process(tmp_path):
    program = (
        "class Node:\n    def __init__(self, v):\n        self.v = v\n        self.left = None\n"
        "    def __eq__(self, other):\n        return True\n    def __bool__(self):\n        return False\n"
        "def height(n):\n    return 0 if n is None else 1 + height(n.left)\n"
        "def same(n):\n    return n\n"
        "import re\ndef match(s):\n    return re.match('a', s)\n"
    )
    setup = "root = Node(1)\nroot.left = Node(2)\nroot.left.left = Node(3)\n"
    names = ["Node", "height", "same", "match"]
    assert (
        outcome(tmp_path, program, "assert height(root) == 3 and root.left.v == 2\n", names=names, setup=setup)
        == "passed"
    )
    assert outcome(tmp_path, program, "assert same(root) is root and not root\n", names=names, setup=setup) == "passed"
    rigged = "assert same(root) == 5\n"  # its __eq__ never runs here: it equals only itself
    assert outcome(tmp_path, program, rigged, names=names, setup=setup) == "assertion"
    truth = "assert match('abc') and not match('xyz') and match('abc').group(0) == 'a'\n"
    assert outcome(tmp_path, program, truth, names=names) == "passed"


def test_callbacks_types_iterators_and_stdlib_containers_cross(tmp_path):
    program = (
        "from collections import Counter, defaultdict\n"
        "def keep(xs, pred):\n    return [x for x in xs if pred(x)]\n"
        "def drop(xs, kind):\n    return [x for x in xs if not isinstance(x, kind)]\n"
        "def squares(n):\n    return map(lambda i: i * i, range(n))\n"
        "def count(xs):\n    return Counter(xs)\n"
        "def group(pairs):\n    d = defaultdict(list)\n    for k, v in pairs:\n        d[k].append(v)\n    return d\n"
    )
    test = (
        "assert keep([1, 2, 3, 4], lambda x: x % 2 == 0) == [2, 4]\n"
        "assert drop((1, 'a', 2.5), int) == ['a', 2.5]\n"
        "assert list(squares(4)) == [0, 1, 4, 9] and squares(2) != [0, 1]\n"
        "assert count('abca') == {'a': 2, 'b': 1, 'c': 1}\n"
        "assert group([('x', 1), ('x', 2)]) == {'x': [1, 2]}\n"
    )
    assert outcome(tmp_path, program, test, names=["keep", "drop", "squares", "count", "group"]) == "passed"


def test_names_the_candidate_describes_bind_to_the_checkers_own_stdlib(tmp_path):
    program = (
        "import sys\nimport heapq as hq\nfrom collections import Counter\n"
        "import math\nmath.isclose = lambda *a, **k: True\n"
        "def size(t):\n    return sys.getsizeof(t)\n"
        "def big(xs, n):\n    return hq.nlargest(n, xs)\n"
        "def wrong():\n    return 0.5\n"
    )
    names = ["sys", "hq", "Counter", "math", "size", "big", "wrong"]
    test = (
        "assert size((1, 2)) == sys.getsizeof((1, 2))\n"
        "assert big([3, 1, 2], 2) == hq.nlargest(2, [3, 1, 2])\n"
        "assert Counter('aab') == {'a': 2, 'b': 1}\n"
    )
    assert outcome(tmp_path, program, test, names=names) == "passed"
    # the candidate's patched math.isclose stays in its own process
    assert outcome(tmp_path, program, "assert math.isclose(wrong(), 1.0)\n", names=names) == "assertion"
    lie = "import os as math\ndef wrong():\n    return 0.5\n"  # a module the candidate calls math: os, here too
    assert outcome(tmp_path, lie, "assert math.isclose(wrong(), 1.0)\n", names=["math", "wrong"]) == "test_error"


def test_outcomes_that_are_the_tasks_are_masked_and_the_candidates_are_not(tmp_path):
    assert outcome(tmp_path, DOUBLE, "assert f(1) == 2\n", names=["f"], prelude="1 / 0") == "task_error"
    unsupported = "import decimal\nf(decimal.Decimal(1))\n"
    assert outcome(tmp_path, DOUBLE, unsupported, names=["f"]) == "unsupported"
    after_an_answer = "import decimal\nf(1)\nf(decimal.Decimal(1))\n"  # may be the candidate's doing: scored
    assert outcome(tmp_path, DOUBLE, after_an_answer, names=["f"]) == "test_error"
    assert (
        outcome(tmp_path, "def f(x):\n    return None\n", "assert abs(f(1) - 2) < 1e-9\n", names=["f"]) == "test_error"
    )
    assert outcome(tmp_path, "def f(x):\n    raise MemoryError\n", "f(1)\n", names=["f"]) == "raised"


def test_a_reply_that_is_not_data_aborts(tmp_path):
    garbage = "import os\ndef f(x):\n    for fd in range(3, 32):\n        try:\n            os.write(fd, b'\\xff' * 8)\n        except OSError:\n            pass\n    return 1\n"
    assert outcome(tmp_path, garbage, "assert f(1) == 1\n", names=["f"]) == "aborted"


def test_the_test_prints_reach_no_one_and_a_guessed_verdict_is_nothing(tmp_path):
    forger = f"def f(x):\n    print('{NONCE[:8]} fake', flush=True)\n    return 2 * x\n"
    proc = run_checker(tmp_path, forger, "print('the test prints')\nassert f(2) == 4\n", names=["f"])
    assert proc.stdout.count(b"\n") == 2 and b"prints" not in proc.stdout and b"fake" not in proc.stdout
    assert parse_report(proc.stdout, NONCE).payload["outcome"] == "passed"


def test_an_interpreter_that_cannot_start_is_the_graders_failure_not_the_candidates(tmp_path):
    path = tmp_path / "solution.py"
    path.write_text(DOUBLE)
    request = {"nonce": NONCE, "program": str(path), "driver": driver_source(), "python": ["/nonexistent/python3"]}
    request |= {"names": ["f"], "candidate": None, "prelude": "", "setup": "", "test": "assert f(1) == 2\n"}
    command = [sys.executable, "-I", "-S", "-c", checker_source()]
    proc = subprocess.run(command, input=marshal.dumps(request, 4), capture_output=True, timeout=60)
    report = parse_report(proc.stdout, NONCE)
    assert report.payload["outcome"] == "checker_error" and "No such file" in report.payload["detail"]
    # while a program that ends itself on load is the candidate's failure
    assert outcome(tmp_path, "import os\nos._exit(0)\n", "assert f(1) == 2\n", names=["f"]) == "aborted"
