"""The checker binds, in the test's namespace, only the names the host asked the candidate for (tasks/checker.py).

The checker sends the candidate's process ``{"program", "names": [...]}`` and binds what the reply's ``names`` says
of each name asked for. The candidate's code runs in the driver's serve process before that reply is written, so it
can add names to the request the driver answers, or write the reply itself on the protocol descriptors. A name it
adds (a builtin such as ``range`` or ``all``) is ignored: the test's own ``for _ in range(50)`` and ``all(...)``
stay Python's, so a wrong program fails. A builtin bound to a module would not cross when the test passes it to the
candidate (``unsupported``, masked); it is never bound, and a name the host did ask for that the candidate makes a
module is the candidate's doing when it cannot cross (``aborted``, scored).

Each attack below is a wrong program that scores 0 (never passed, never masked); the honest controls pass.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tasks.formats import humaneval, mbpp
from tasks.loader import load_tasks
from tests.checker_support import HONEST, LOOP, TREE, grade, scored_zero

PUBLISHED = Path(__file__).resolve().parents[2] / "tasks" / "samples" / "published" / "humaneval.jsonl.gz"

pytestmark = pytest.mark.docker


# Added to the names the driver's serve mode describes in its hello (the request dict `start` of `serve()`, reached
# through the candidate's own frames while the driver loads it): the test's namespace then takes them from here.
HIJACK = (
    "import sys as _sys\n"
    "_frame = _sys._getframe(0)\n"
    "while _frame is not None:\n"
    "    _start = _frame.f_locals.get('start')\n"
    "    if isinstance(_start, dict) and 'names' in _start:\n"
    "        _start['names'] = list(_start['names']) + {names!r}\n"
    "        break\n"
    "    _frame = _frame.f_back\n"
)

# LOOP checks 2 * x on 50 random inputs, then that candidate(0) is not a secret: -1 is wrong on every input.
WRONG_LOOP = "    return -1\n\n\ndef range(*args, **kwargs):\n    return []\n\n\n" + HIJACK.format(names=["range"])
# TREE asserts all(max_height(n) == h ...): a max_height that returns -1 is wrong on every node.
WRONG_TREE = (
    "class Node:\n    def __init__(self, data):\n        self.data = data\n        self.left = None\n"
    "        self.right = None\n"
    "def max_height(node):\n    return -1\n"
    "def all(iterable):\n    return True\n" + HIJACK.format(names=["all"])
)

# The same without the driver's help: at load, the candidate writes the hello itself on the protocol descriptors the
# driver keeps (fds 3 and 4, its dups of 0 and 1) and answers every request, never returning to the driver; hardening
# the driver cannot stop this, only the checker binding no more than the names it asked for.
OWN_SERVER = (
    "    return -1\n\n\n"
    "import json as _json, marshal as _marshal, os as _os\n"
    "def _read(n):\n"
    "    data = b''\n"
    "    while len(data) < n:\n"
    "        chunk = _os.read(3, n - len(data))\n"
    "        if not chunk:\n"
    "            _os._exit(0)\n"
    "        data += chunk\n"
    "    return data\n"
    "def _send(obj):\n"
    "    body = _json.dumps(obj).encode()\n"
    "    _os.write(4, len(body).to_bytes(4, 'big') + body)\n"
    "_send({'names': {'twice': ['function'], 'range': ['function']}})\n"
    "while True:\n"
    "    request = _marshal.loads(_read(int.from_bytes(_read(4), 'big')))\n"
    "    _send({'value': ['l', []] if request.get('target') == 'range' else ['i', -1]})\n"
)


def test_honest_controls_pass():
    """Control: the honest programs of the two tasks pass, and the same wrong answers without the hijack score 0."""
    loop, tree, plain_loop, plain_tree = grade(
        HONEST["loop"],
        HONEST["tree"],
        (LOOP, "    return -1\n"),
        (TREE, WRONG_TREE.split("def all(")[0]),
    )
    assert loop.passed and tree.passed, (loop.tests, tree.tests)
    assert scored_zero(plain_loop) and scored_zero(plain_tree), (plain_loop.tests, plain_tree.tests)


def test_a_hijacked_range_does_not_empty_the_tests_loop():
    """`range` of the test's `for _ in range(50)` stays the builtin, whatever the candidate's hello lists."""
    (result,) = grade((LOOP, WRONG_LOOP))
    assert scored_zero(result), [(t.verdict, t.detail) for t in result.tests]


def test_a_hijacked_all_does_not_answer_for_the_test():
    """`all` of the test's `assert all(max_height(n) == h ...)` stays the builtin."""
    (result,) = grade((TREE, WRONG_TREE))
    assert scored_zero(result), [(t.verdict, t.detail) for t in result.tests]


def test_a_hello_written_by_the_candidate_binds_only_the_names_asked_for():
    """A hello the candidate writes itself (no driver involved) binds only the names asked for."""
    (result,) = grade((LOOP, OWN_SERVER))
    assert scored_zero(result), [(t.verdict, t.detail) for t in result.tests]


def find_zero():
    """Published HumanEval/32: its whole check is `for _ in range(100)` over random polynomials."""
    (task,) = [t for t in load_tasks(PUBLISHED).tasks if t.task_id == "HumanEval/32"]
    return task


def test_published_humaneval_32_control():
    """Control: the canonical solution passes, and `return 0.0` (wrong for almost every polynomial) scores 0."""
    task = find_zero()
    canonical, zero = grade((task, task.solutions[0][len(task.completion_prefix) :]), (task, "    return 0.0\n"))
    assert canonical.passed, canonical.tests
    assert scored_zero(zero), zero.tests


def test_published_humaneval_32_is_not_passed_by_an_emptied_loop():
    """On published data: `return 0.0` with `range` added to its hello scores 0 on HumanEval/32."""
    task = find_zero()
    wrong = "    return 0.0\n\n\ndef range(*args, **kwargs):\n    return []\n\n\n" + HIJACK.format(names=["range"])
    (result,) = grade((task, wrong))
    assert scored_zero(result), [(t.verdict, t.detail) for t in result.tests]


# A test that passes a builtin to the candidate (a sort key) before any answer: bound to a module, the builtin could
# not cross, and the checker's `unsupported` (nothing the candidate did) would mask the wrong program.
SORT_BY = humaneval.parse(
    0,
    {
        "task_id": "sort-by",
        "prompt": "def sort_by(words, key):\n    '''words sorted by key'''\n",
        "entry_point": "sort_by",
        "canonical_solution": "    return sorted(words, key=key)\n",
        "test": "def check(candidate):\n"
        "    for words in (['bb', 'a', 'ccc'], ['xy', 'z']):\n"
        "        assert candidate(words, len) == sorted(words, key=len)\n",
    },
)
WRONG_SORT = "    return words\n\n\nimport os as len\n\n\n" + HIJACK.format(names=["len"])


def test_sort_by_controls():
    """Control: the honest program passes, the wrong one (words unsorted) scores 0 without the hijack."""
    honest, wrong = grade((SORT_BY, "    return sorted(words, key=key)\n"), (SORT_BY, "    return words\n"))
    assert honest.passed and honest.tests[0].split is False, honest.tests
    assert scored_zero(wrong), wrong.tests


def test_a_builtin_bound_to_a_module_does_not_mask_a_wrong_program():
    """`len` named by the candidate as the module os is not bound: the wrong program is scored, not masked."""
    (result,) = grade((SORT_BY, WRONG_SORT))
    assert scored_zero(result), [(t.verdict, t.detail) for t in result.tests]


# An MBPP-style task whose test passes a name of the candidate's module (its key function) to the candidate: the host
# asks for `key`; a candidate that makes `key` a module has it bound (the checker's own import of the module), and
# when the test passes it on, it cannot cross: the candidate's doing, scored.
BY_KEY = mbpp.parse(
    0,
    {
        "task_id": 9001,
        "text": "words sorted by a key function",
        "code": "def key(word):\n    return len(word)\ndef sort_by(words, key):\n    return sorted(words, key=key)",
        "test_setup_code": "",
        "test_list": ["assert all(sort_by(w, key) == s for w, s in [(['bb', 'a', 'ccc'], ['a', 'bb', 'ccc'])])"],
        "challenge_test_list": [],
    },
)


def test_a_name_asked_for_that_the_candidate_makes_a_module_is_its_failure_not_masked():
    honest, wrong = grade(
        (BY_KEY, BY_KEY.solutions[0]),
        (BY_KEY, "import os as key\ndef sort_by(words, key):\n    return words\n"),
    )
    assert honest.passed and honest.tests[0].split is False, honest.tests
    assert scored_zero(wrong), [(t.verdict, t.detail) for t in wrong.tests]
    assert "is a module" in wrong.tests[0].detail, wrong.tests
