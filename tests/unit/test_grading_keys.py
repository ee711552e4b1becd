"""`tasks.grader.grading_keys`: tasks that show a candidate the same problem or the same inputs share a key, however
their rows write them; tasks of other problems and inputs share none (so their containers can be recycled); no row
makes the keys raise."""

from __future__ import annotations

import pytest

from tasks.grader import grading_keys
from tasks.task import AssertTest, CallTest, StdinTest, Task


def stdin(prompt: str, *inputs: str) -> Task:
    tests = tuple(StdinTest(input=text, output="0\n") for text in inputs)
    return Task(task_id=prompt, source_format="codecontests", kind="stdin", prompt=prompt, tests=tests)


def asserts(prompt: str, *sources: str) -> Task:
    tests = tuple(AssertTest(source=text) for text in sources)
    return Task(task_id=prompt, source_format="mbpp", kind="assert", prompt=prompt, tests=tests, fn_name="f")


def calls(prompt: str, *args: list) -> Task:
    tests = tuple(CallTest(args=a, expected=0) for a in args)
    return Task(task_id=prompt, source_format="taco", kind="call", prompt=prompt, tests=tests, fn_name="f")


def shared(a: Task, b: Task) -> int:
    return len(grading_keys(a) & grading_keys(b))


@pytest.mark.parametrize(
    "a, b",
    [
        (asserts("p", "assert f(1) == 5"), asserts("q", "assert f(1)==5  # spaced otherwise")),
        (asserts("p", "assert f(1) == 5"), asserts("q", "assert 5 == f(1)")),
        (asserts("p", "assert f(1) == 5"), calls("q", [1])),
        (asserts("p", "assert f(True) == 5"), calls("q", [1.0])),
        (asserts("p", "assert candidate((1, 2)) == 3"), calls("q", [[1, 2]])),
        (stdin("p", "1\n"), stdin("q", "1")),
        (stdin("p", "1 2\n3\n"), stdin("q", "1  2\r\n3")),
        (stdin("p", "1\n"), stdin("p", "2\n")),  # the same statement, other tests
        (stdin("the  same\nstatement", "1\n"), stdin("the same statement", "2\n")),
    ],
    ids=[
        "spacing",
        "sides",
        "assert-call",
        "bool-float",
        "tuple-list",
        "newline",
        "whitespace",
        "problem",
        "prompt-ws",
    ],
)
def test_the_same_problem_or_input_written_otherwise_shares_a_key(a, b):
    assert shared(a, b) >= 1


def test_other_problems_on_other_inputs_share_nothing():
    assert shared(stdin("p", "1\n", "2\n"), stdin("q", "3\n", "4\n")) == 0
    assert shared(asserts("p", "assert f(1) == 5"), asserts("q", "assert f(2) == 10")) == 0
    assert shared(calls("p", [1], [2]), calls("q", [3])) == 0


@pytest.mark.parametrize(
    "source",
    [
        "assert f(",  # not Python
        "assert f(" + "[" * 5000 + "]" * 5000 + ")",  # too deep for the parser
        "assert f({1: {2, 3}}, b'x', 1j, ...) == 0",  # literals JSON cannot write
        "assert f(*[1]) == g(x=1)",  # calls no literal evaluation reads
    ],
    ids=["syntax", "deep", "odd-literals", "starred"],
)
def test_any_assert_gets_keys_and_nothing_raises(source):
    assert len(grading_keys(asserts("p", source))) >= 2  # the statement and the test
