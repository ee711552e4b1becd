"""Tasks whose assert tests run in the checker (tasks/checker.py), and honest programs for them: the checker's attack
modules share them (tests/integration/test_attacks_checker.py, test_checker_names.py, test_checker_signals.py)."""

from __future__ import annotations

import secrets

from tasks.formats import humaneval, mbpp
from tasks.grader import GraderConfig, grade_pairs
from tasks.result import TaskResult
from tasks.submission import Submission
from tasks.task import Task
from tests.sandbox_support import sandbox_config

# 2 s limits; the wall-clock backstop of a sleeper or a stopped checker at 3 x 2 + 1 = 7 s (the default factor's 21 s
# proves nothing more: a starved honest test still runs on past it, tasks.grader's starved grace)
CONFIG = GraderConfig(default_time_s=2.0, min_time_s=2.0, backstop_factor=3.0)


def grade(*pairs: tuple[Task, str]) -> list[TaskResult]:
    """Each ``(task, completion)`` graded in the real sandbox (2 s limits)."""
    submissions = [(task, Submission(task_id=task.task_id, completion=code)) for task, code in pairs]
    return grade_pairs(submissions, CONFIG, sandbox_config())


def scored_zero(result: TaskResult) -> bool:
    """Failed and scored: not passed, nothing passed, not masked."""
    return not result.infra_error and not result.passed and result.fraction == 0.0


SECRET = "GYMSECRET-" + secrets.token_hex(8)

# HumanEval rows: a loop with random inputs, a prompt helper the test calls, an exception the test expects.
LOOP = humaneval.parse(
    0,
    {
        "task_id": "loop",
        "prompt": "def twice(x):\n    '''2 * x'''\n",
        "entry_point": "twice",
        "canonical_solution": "    return 2 * x\n",
        "test": "import random\n\ndef check(candidate):\n"
        "    rng = random.Random(7)\n"
        "    for _ in range(50):\n"
        "        x = rng.randint(-100, 100)\n"
        "        assert candidate(x) == 2 * x\n"
        f"    assert candidate(0) != {SECRET!r}\n",
    },
)
HELPER = humaneval.parse(
    0,
    {
        "task_id": "helper",
        "prompt": "def encode(s):\n    return s[1:] + s[:1]\n\n\ndef decode(s):\n    '''undo encode'''\n",
        "entry_point": "decode",
        "canonical_solution": "    return s[-1:] + s[:-1]\n",
        "test": "def check(candidate):\n    for s in ['abc', 'hello', 'x', '']:\n        assert candidate(encode(s)) == s\n",
    },
)
RAISES = humaneval.parse(
    0,
    {
        "task_id": "raises",
        "prompt": "def root(x):\n    '''sqrt of x >= 0; ValueError otherwise'''\n",
        "entry_point": "root",
        "canonical_solution": "    if x < 0:\n        raise ValueError(x)\n    return x ** 0.5\n",
        "test": "def check(candidate):\n"
        "    assert [candidate(x) for x in (0, 4, 9)] == [0, 2, 3]\n"
        "    try:\n        candidate(-1)\n    except ValueError:\n        pass\n    else:\n        assert False\n",
    },
)
# MBPP rows: an expected value computed with a module the reference imports, objects built by set-up.
SIZE = mbpp.parse(
    0,
    {
        "task_id": 596,
        "text": "size of a tuple",
        "code": "import sys\ndef tuple_size(t):\n    return sys.getsizeof(t)",
        "test_setup_code": "",
        "test_list": ["assert tuple_size((1, 'a', 2.5)) == sys.getsizeof((1, 'a', 2.5))"],
        "challenge_test_list": [],
    },
)
TREE = mbpp.parse(
    0,
    {
        "task_id": 927,
        "text": "height of a tree",
        "code": "class Node:\n    def __init__(self, data):\n        self.data = data\n        self.left = None\n"
        "        self.right = None\n"
        "def max_height(node):\n    if node is None:\n        return 0\n"
        "    return 1 + max(max_height(node.left), max_height(node.right))",
        "test_setup_code": "root = Node(1)\nroot.left = Node(2)\nroot.left.left = Node(3)",
        "test_list": ["assert all(max_height(n) == h for n, h in [(root, 3), (root.left, 2)])"],
        "challenge_test_list": [],
    },
)
HONEST = {
    "loop": (LOOP, "    return x + x\n"),
    "helper": (HELPER, "    return s[-1:] + s[:-1]\n\n\ndef encode(s):\n    return 'redefined'\n"),
    "raises": (RAISES, "    if x < 0:\n        raise ValueError('negative')\n    return x ** 0.5\n"),
    "raises, a subclass": (
        RAISES,
        "    class Negative(ValueError):\n        pass\n    if x < 0:\n        raise Negative(x)\n    return x ** 0.5\n",
    ),
    "size": (SIZE, "import sys\ndef tuple_size(t):\n    return sys.getsizeof(t)\n"),
    "tree": (TREE, TREE.solutions[0]),
}
