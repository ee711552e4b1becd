"""Assert tests the host does not split: what it sends the checker, how it judges the verdict, and the plan of
every published HumanEval and MBPP test (none refused for reward)."""

from __future__ import annotations

from collections import Counter

import pytest

from sandbox.failure import FailureKind, Verdict
from sandbox.protocol import ExecResult
from tasks.checking import checker_request, free_names, prompt_helpers, reference_imports, shadowed
from tasks.encoding import Opaque, decode
from tasks.formats import humaneval, mbpp
from tasks.grader import Grader, GraderConfig
from tasks.judge import judge_checked
from tests.published_support import SETS, published

NONCE = "ab" * 16


def test_free_names_are_what_the_test_reads_and_binds_nowhere():
    code = (
        "import math as m\nroot = Node(1)\ndef helper(y):\n    return y + z\nassert f(root, [i for i in r]) == m.pi\n"
    )
    assert free_names(code) == {"Node", "z", "f", "r"}
    assert free_names("assert sorted(f(x)) == list(range(3))\n") == {"f", "x"}  # builtins aside
    assert free_names("def (:\n") == set()


def test_prompt_helpers_keep_the_prompts_definitions_but_the_entry_points_stub():
    prompt = (
        "import math\nfrom typing import List\n\nR = 3\n\ndef poly(xs: list, x: float):\n    return sum(xs)\n\n"
        "def find_zero(xs: list):\n    '''find x with poly(x) = 0'''\n"
    )
    helpers = prompt_helpers(prompt, "find_zero")
    assert "import math" in helpers and "def poly" in helpers and "R = 3" in helpers and "find_zero" not in helpers
    assert prompt_helpers("def f(x):\n    '''doc'''\n    if x", "f") == ""  # does not parse: nothing


def test_reference_imports_bind_only_what_the_test_uses():
    reference = "import sys\nimport heapq as hq\nfrom collections import Counter, OrderedDict\nimport os\ndef f(): pass"
    kept = reference_imports(reference, {"sys", "hq", "Counter"})
    assert kept.splitlines() == ["import sys", "import heapq as hq", "from collections import Counter, OrderedDict"]


def row(tests, code="def f(a, b):\n    return a + b", setup=""):
    return {"task_id": 1, "text": "t", "code": code, "test_setup_code": setup, "test_list": tests}


def test_mbpp_requests_take_functions_from_the_candidate_and_imports_from_the_reference():
    task = mbpp.parse(0, row(["assert f(1, 2) == sys.getsizeof(3)"], code="import sys\ndef f(a, b):\n    return 3"))
    request = checker_request(task, task.tests[0])
    assert request["names"] == ["f"] and request["prelude"] == "import sys" and request["candidate"] is None


def test_a_builtin_name_the_reference_defines_is_the_candidates():
    """MBPP 126 defines ``sum(a, b)`` and its tests call ``sum(10, 15)``: split on the host, the builtin sum ran."""
    task = mbpp.parse(0, row(["assert sum(10, 15) == 6"], code="def sum(a, b):\n    return 6"))
    assert shadowed(task, task.tests[0]) == {"sum"}
    assert checker_request(task, task.tests[0])["names"] == ["sum"]
    request, _ = Grader(None, GraderConfig(speed_factor=1.0)).plan(task, 0, task.tests[0])
    assert "grader-owned checker" in request.argv[-1][:200]
    plain = mbpp.parse(0, row(["assert sorted(f(1, 2)) == [3]"]))
    assert shadowed(plain, plain.tests[0]) == set()


def test_humaneval_requests_take_only_the_entry_point():
    task = humaneval.parse(
        0,
        {
            "task_id": "HumanEval/38",
            "prompt": "def encode(s):\n    return s\n\ndef decode(s):\n    '''doc'''\n",
            "entry_point": "decode",
            "canonical_solution": "    return s\n",
            "test": "def check(candidate):\n    for s in 'ab':\n        assert candidate(encode(s)) == s\n",
        },
    )
    (test,) = task.tests
    request = checker_request(task, test)
    assert request["names"] == ["decode"] and request["candidate"] == "decode"
    assert request["prelude"].startswith("def encode(s):") and "decode" not in request["prelude"]
    assert request["test"].endswith("check(decode)\n")


def test_mbpp_challenge_tests_are_graded():
    task = mbpp.parse(0, {**row(["assert f(1, 2) == 3"]), "challenge_test_list": ["assert f(2, 2) == 4"]})
    assert [t.source for t in task.tests] == ["assert f(1, 2) == 3", "assert f(2, 2) == 4"]
    assert len(mbpp.parse(0, {**row(["assert f(1, 2) == 3"]), "challenge_test_list": None}).tests) == 1


def verdict_line(outcome: str, detail: str = "") -> bytes:
    return f'\n{NONCE} {{"verdict": {{"outcome": "{outcome}", "detail": "{detail}"}}}}\n'.encode()


@pytest.mark.parametrize(
    "outcome, detail, verdict",
    [
        ("passed", "", Verdict.PASSED),
        ("assertion", "an assert of the test failed (line 3 of the test)", Verdict.WRONG_ANSWER),
        ("test_error", "the test raised TypeError", Verdict.WRONG_ANSWER),
        ("raised", "ValueError: x", Verdict.RUNTIME_ERROR),
        ("raised", "MemoryError: ", Verdict.MEMORY_LIMIT),
        ("aborted", "the candidate raised SystemExit", Verdict.RUNTIME_ERROR),
        ("unsupported", "the test passed a Decimal", Verdict.INFRA_ERROR),
        ("task_error", "the task's own code raised", Verdict.INFRA_ERROR),
        ("checker_error", "prctl failed", Verdict.INFRA_ERROR),
        ("something else", "", Verdict.WRONG_ANSWER),
    ],
)
def test_checker_outcomes_map_to_verdicts(outcome, detail, verdict):
    judged = judge_checked(0, ExecResult(stdout=verdict_line(outcome, detail)), NONCE)
    assert judged.verdict == verdict and judged.split is False


def test_no_verdict_or_a_forged_second_one_is_the_candidates_failure():
    killed = judge_checked(0, ExecResult(failure=FailureKind.NONZERO_EXIT, signal=9), NONCE)
    assert killed.verdict == Verdict.RUNTIME_ERROR
    assert judge_checked(0, ExecResult(stdout=b""), NONCE).verdict == Verdict.RUNTIME_ERROR
    twice = judge_checked(0, ExecResult(stdout=verdict_line("passed") * 2), NONCE)
    assert twice.verdict == Verdict.WRONG_ANSWER


def test_new_tags_decode_to_plain_values_or_an_opaque_truth():
    assert list(decode(["I", [["i", 1], ["i", 2]]])) == [1, 2]
    assert decode(["T", "int"]) is int
    truthy = decode(["o", True])
    assert isinstance(truthy, Opaque) and truthy and not decode(["o", False])
    assert truthy != True and truthy != 1 and truthy is not None  # noqa: E712 - it equals only itself
    assert decode(["d", [[["s", "a"], ["i", 2]]]]) == Counter(a=2)


@pytest.mark.parametrize("name", list(SETS))
def test_every_published_test_is_planned_none_refused(name):
    """HumanEval: 7 of 164 tasks were refused for reward (every program masked); MBPP 126 scored its own
    reference 0 (the builtin ``sum`` ran on the host) and 596 was refused. Now each test has a process."""
    grader = Grader(None, GraderConfig(speed_factor=1.0))
    tasks = published(name)
    plans = [grader.plan(task, i, test)[0] for task in tasks for i, test in enumerate(task.tests)]
    assert all(plan is not None for plan in plans)
    checked = {
        task.task_id
        for task in tasks
        for i, test in enumerate(task.tests)
        if "grader-owned checker" in grader.plan(task, i, test)[0].argv[-1][:200]
    }
    expected = {
        "humaneval": {f"HumanEval/{n}" for n in (32, 38, 44, 50, 53, 129, 151)},
        "mbpp": {"126", "596"},
        "mbpp-sanitized": {"126", "596"},
    }
    assert checked == expected[name]
