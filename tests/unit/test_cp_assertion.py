"""Assert splitting: candidate-side leaves go inside, expected values stay on the host."""

from __future__ import annotations

import pytest

from tasks.assertion import HostEvalError, holds, names_in, split


@pytest.mark.parametrize(
    "source, leaves, host",
    [
        ("assert candidate([1, 2, 3]) == 6", ("candidate([1, 2, 3])",), "__leaf0 == 6"),
        ("assert abs(candidate(1.5) - 0.5) < 1e-06", ("candidate(1.5)",), "abs(__leaf0 - 0.5) < 1e-06"),
        (
            "assert math.isclose(candidate(2), 4.0, rel_tol=1e-09)",
            ("candidate(2)",),
            "math.isclose(__leaf0, 4.0, rel_tol=1e-09)",
        ),
        ("assert not candidate(3)", ("candidate(3)",), "not __leaf0"),
        ("assert candidate(3)", ("candidate(3)",), "__leaf0"),
        ("assert candidate('ab').upper() == 'AB'", ("candidate('ab').upper()",), "__leaf0 == 'AB'"),
        ("assert set(f(1)) == {1, 2}", ("f(1)",), "set(__leaf0) == {1, 2}"),
        ("assert Solution().solve(2)[0] == -1", ("Solution().solve(2)",), "__leaf0[0] == -1"),
        ("assert f(1) == f(2)", ("f(1)", "f(2)"), "__leaf0 == __leaf1"),
        ("assert f(1) is None", ("f(1)",), "__leaf0 is None"),
    ],
)
def test_split_forms(source, leaves, host):
    result = split(source)
    assert result is not None
    assert result.leaves == leaves
    assert result.host_source == host


@pytest.mark.parametrize(
    "source",
    [
        "assert [candidate(i) for i in range(3)] == [0, 1, 2]",  # comprehension
        "assert all(candidate(x) == y for x, y in [(1, 2)])",  # generator with expected values
        "assert sorted(*candidate(1)) == [1]",  # starred host call
        "assert (lambda: candidate(1))() == 1",  # lambda
        "assert (lambda r: r == 5)(candidate(1))",  # test logic inside a call: would judge inside
        "assert check(candidate(1) == 5)",  # a comparison inside a candidate-side call
        "assert candidate(1 if x else 2) == 1",  # conditional inside
        "x = candidate(1)",  # not an assert
        "assert candidate(1) == 1\nassert candidate(2) == 2",  # two statements
        "assert candidate(",  # syntax error
    ],
)
def test_unsplittable_forms_return_none(source):
    assert split(source) is None


def test_expected_values_are_not_in_the_leaves():
    result = split("assert abs(candidate(7) - 0.123456) < 1e-9 and candidate(8) == [424242]")
    assert result is not None
    assert all("0.123456" not in leaf and "424242" not in leaf for leaf in result.leaves)


@pytest.mark.parametrize(
    "source, values, ok",
    [
        ("assert candidate(1) == 6", [6], True),
        ("assert candidate(1) == 6", [7], False),
        ("assert candidate(1) == (1, 2)", [[1, 2]], False),  # Python semantics: a list is not a tuple
        ("assert candidate(1) == (1, 2)", [(1, 2)], True),
        ("assert candidate(1) == True", [1], True),  # Python semantics: 1 == True
        ("assert candidate(1) is True", [1], False),
        ("assert abs(candidate(1) - 0.5) < 1e-6", [0.5000001], True),
        ("assert abs(candidate(1) - 0.5) < 1e-6", [0.6], False),
        ("assert math.isclose(candidate(1), 1.0)", [1.0 + 1e-12], True),
        ("assert not candidate(1)", [[]], True),
        ("assert not candidate(1)", [[0]], False),
        ("assert 1 < candidate(1) <= 3", [3], True),
        ("assert 1 < candidate(1) <= 3", [4], False),
        ("assert candidate(1) in ('a', 'b')", ["b"], True),
        ("assert candidate(1) or candidate(2)", [0, 5], True),
        ("assert candidate(1) and candidate(2)", [0, 5], False),
        ("assert candidate(1)[1:] == [2]", [[1, 2]], True),
        ("assert (candidate(1) if True else 0) == -3", [-3], True),
        ("assert set(candidate(1)) == {1, 2}", [[2, 1, 1]], True),
        ("assert len(candidate(1)) == 2", [{"a": 1, "b": 2}], True),
    ],
)
def test_holds_has_python_semantics(source, values, ok):
    assert holds(split(source), values) is ok


def test_host_errors_are_failures_not_crashes():
    with pytest.raises(HostEvalError):
        holds(split("assert candidate(1) + 1 == 2"), ["a"])  # str + int raises, as it would inside
    with pytest.raises(HostEvalError):
        holds(split("assert candidate(1) ** 2 == 4"), [2, 3])  # wrong number of values
    with pytest.raises(HostEvalError):
        holds(split("assert 2 ** candidate(1) > 0"), [10**9])  # refused: exponent too large
    with pytest.raises(HostEvalError):
        holds(split("assert 'x' * candidate(1) == ''"), [10**12])  # refused: repeat too large


def test_names_in_ignores_whitelisted_host_names():
    import ast

    tree = ast.parse("math.isclose(candidate(x), math.pi) and len(y) == abs(z)")
    assert names_in(tree) == {"candidate", "x", "y", "z"}


CANDIDATES = frozenset({"candidate", "f", "Solution"})


@pytest.mark.parametrize(
    "source, leaves, host",
    [
        ("assert candidate(5) == math.factorial(5)", ("candidate(5)",), "__leaf0 == math.factorial(5)"),
        ("assert f(3) == math.comb(5, 2) + ord('a')", ("f(3)",), "__leaf0 == math.comb(5, 2) + ord('a')"),
        ("assert Solution().solve(2)[0] == -1", ("Solution().solve(2)",), "__leaf0[0] == -1"),
        ("assert candidate('ab').upper() == 'AB'", ("candidate('ab').upper()",), "__leaf0 == 'AB'"),
    ],
)
def test_expected_sides_computed_by_calls_stay_on_the_host(source, leaves, host):
    """`== math.factorial(5)` once went inside as a leaf: the candidate could patch math.factorial."""
    result = split(source, CANDIDATES)
    assert result is not None and result.leaves == leaves and result.host_source == host


@pytest.mark.parametrize(
    "source",
    [
        "assert candidate(5) == helper(5)",  # an expected value computed by a test-defined function
        "assert check(candidate(1))",  # a check run on a candidate value, inside
        "assert candidate(1) == random.randint(0, 9)",  # a module the candidate can patch
        "assert g(1) == 1",  # not the candidate at all
    ],
)
def test_leaves_not_rooted_in_the_candidate_do_not_split(source):
    assert split(source, CANDIDATES) is None


def test_host_factorial_is_bounded():
    with pytest.raises(HostEvalError):
        holds(split("assert candidate(1) == math.factorial(10 ** 6)", CANDIDATES), [1])
