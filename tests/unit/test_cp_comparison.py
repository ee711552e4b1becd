"""Output comparison: whitespace-normalised tokens, float tolerance, typed call results."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tasks.comparison import Tolerance, graded_as_floats, outputs_match, values_match

TOL = Tolerance()


@pytest.mark.parametrize(
    "actual, expected, ok",
    [
        ("3\n7\n", "3\n7\n", True),
        ("3 7", "3\n7\n", True),  # whitespace-normalised
        ("  3\t\n 7  \n\n", "3\n7", True),
        ("3\n", "3\n7\n", False),  # missing token
        ("3 7 8", "3 7", False),  # extra token
        ("yes", "YES", False),  # case-sensitive
        ("1.0000004", "1.0", True),  # within 1e-6 absolute
        ("1.00001", "1.0", False),
        ("1000000.5", "1000000.0", True),  # relative 1e-6 of 1e6 is 1
        ("1000000.5", "1000000", False),  # an integer expected token needs an integer answer
        ("1000000020.0", "1000000007", False),  # within the relative tolerance as floats: not an answer
        ("1000000007.0", "1000000007", False),
        ("+007", "7", True),
        ("11", "0011", False),  # an expected token with leading zeros is text (a binary string, a code)
        ("0011", "0011", True),
        ("007", "0007", False),
        ("5", "+5", False),
        ("0", "-0", True),
        ("-0", "0", True),
        ("-7", "7", False),
        ("1" * 5000, "1" * 5000, True),  # past Python's int-string digit limit: compared as digits
        ("1" * 5000, "1" * 4999 + "2", False),
        ("1" * 5001, "5", False),
        ("1.5", "1.500000000", True),
        ("2", "2.0000000001", True),  # an integer token against a decimal compares as floats
        ("12345678901234567891", "12345678901234567890", False),  # big integers compare exactly
        ("-0", "0", True),
        ("nan", "nan", True),  # identical text
        ("1e-7", "0", False),  # the expected token is an integer: a float is no answer
        ("1e-7", "0.0", True),  # a decimal expected token: compared as floats, within 1e-6
        ("1e-5", "0", False),
        ("abc", "abd", False),
        ("", "", True),
    ],
)
def test_outputs_match(actual, expected, ok):
    assert outputs_match(actual, expected, TOL) is ok


def test_tolerance_is_configurable():
    loose = Tolerance(abs_tol=0.1, rel_tol=0.0)
    assert outputs_match("1.05", "1.0", loose)
    assert not outputs_match("1.05", "1.0", Tolerance(abs_tol=0.0, rel_tol=0.0))


@given(
    st.lists(st.text(alphabet="abc123.-", min_size=1, max_size=5), max_size=8),
    st.sampled_from([" ", "\n", "\t ", "  \n"]),
)
def test_any_output_matches_itself_under_any_whitespace(tokens, separator):
    assert outputs_match(separator.join(tokens) + "\n", " ".join(tokens), TOL)


@given(st.integers(), st.integers())
def test_integer_tokens_match_only_when_equal(a, b):
    assert outputs_match(str(a), str(b), TOL) is (a == b)


@pytest.mark.parametrize(
    "actual, expected, ok",
    [
        (3, 3, True),
        (True, 1, False),  # a bool is not an int
        (1, True, False),  # an int is not a bool
        (3.0, 3, False),  # an expected int needs an int
        (3, 3.0, True),  # an expected float accepts an int
        (0.1 + 0.2, 0.3, True),  # within tolerance
        (0.31, 0.3, False),
        (math.nan, math.nan, True),
        (10**400, 1.0, False),  # too large for a float: no crash
        ("a", "a", True),
        (None, None, True),
        (None, 0, False),
        ((1, 2), [1, 2], True),  # JSON has no tuples
        ([1, [2.0000000001]], [1, [2.0]], True),
        ([1, 2], [1, 2, 3], False),
        ({1, 2}, [1, 2], False),  # a set is not a list
        ({"a": 1}, {"a": 1}, True),
        ({1: "x"}, {"1": "x"}, True),  # keys as JSON writes them
        ({1: "x", "1": "y"}, {"1": "x"}, False),
        ({"a": 1}, {"a": 1, "b": 2}, False),
        ((1,), [[1]], False),
    ],
)
def test_values_match(actual, expected, ok):
    assert values_match(actual, expected, TOL) is ok


NUMBERS = Tolerance(numbers=True)  # a task graded with a float tolerance (graded_as_floats)


@pytest.mark.parametrize(
    "actual, expected, ok",
    [
        ("1.0", "1", True),  # an expected integer token accepts a decimal within tolerance
        ("1.000000", "1", True),
        ("0.9999999", "1", True),
        ("1e0", "1", True),
        ("1.001", "1", False),
        ("1", "1", True),
        ("+1", "1", True),
        ("1000000000000000001", "1000000000000000000", False),  # two integers: still exact digits
        ("2", "1", False),
        ("nan", "1", False),
        ("inf", "1", False),
        ("1e999", "1" + "0" * 400, False),
        ("one", "1", False),
    ],
)
def test_a_tolerant_task_compares_numbers_as_numbers(actual, expected, ok):
    assert outputs_match(actual, expected, NUMBERS) is ok
    if "." in actual or "e" in actual:
        assert not outputs_match(actual, expected, TOL)  # a task graded as integers never takes a decimal


@pytest.mark.parametrize(
    "actual, expected, ok",
    [
        (1.0, 1, True),
        (0.9999999, 1, True),
        (1.01, 1, False),
        (True, 1, False),
        (1, 1, True),
        ([1.0, 2.0], [1, 2], True),
    ],
)
def test_a_tolerant_task_takes_a_float_for_an_int_result(actual, expected, ok):
    assert values_match(actual, expected, NUMBERS) is ok
    if isinstance(actual, float):
        assert not values_match(actual, expected, TOL)


@pytest.mark.parametrize(
    "outputs, values, floats",
    [
        (["1\n", "1.5\n"], [], True),
        (["3 7\n", "-2\n"], [], False),
        (["1e5\n"], [], True),
        (["v1.2.3 done\n"], [], False),  # not a number: text
        ([], [1, [2, {"a": 3}]], False),
        ([], [1, [2, {"a": 3.5}]], True),
    ],
)
def test_which_tasks_are_graded_as_floats(outputs, values, floats):
    assert graded_as_floats(outputs, values) is floats


@given(st.integers(min_value=-(10**30), max_value=10**30), st.integers(min_value=-(10**30), max_value=10**30))
def test_integers_stay_exact_in_a_tolerant_task(a, b):
    assert outputs_match(str(a), str(b), NUMBERS) is (a == b)
