"""Number tokens past a float's range: compared by exact value, within bounded work.

`float()` turns every magnitude past ~1.8e308 into ``inf`` and every one below ~2.2e-308 into 0 (or a subnormal),
so two such tokens read alike whatever their values. Those are compared as exact decimals with the tolerance; the
rest keep the float comparison. A candidate writes its tokens, so a megabyte of digits or a megabyte-long exponent
must cost milliseconds, never a conversion of the whole value to an integer.
"""

from __future__ import annotations

import sys
import time
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tasks.comparison import Tolerance, outputs_match

TOL = Tolerance()
EXACT = Tolerance(abs_tol=0.0, rel_tol=0.0)
HUGE = "1" + "0" * 400 + ".5"  # 10**400 + 0.5
MEGABYTE = 1 << 20


@pytest.mark.parametrize(
    "actual",
    ["1e999", "9e400", "1e309", "1" + "0" * 500 + ".0", "2e400", "-1e999", "inf", "Infinity", "nan", "0"],
)
def test_a_huge_decimal_is_not_passed_by_another_reading_of_inf(actual):
    assert not outputs_match(actual, HUGE, TOL)
    assert not outputs_match(f"1.5 {actual}", f"1.5 {HUGE}", TOL)


@pytest.mark.parametrize(
    "actual",
    [HUGE, "+" + HUGE, HUGE + "000", "0" * 30 + HUGE, "1" + "0" * 399 + "05e-1", "1." + "0" * 400 + "5e400"],
    ids=["same", "plus", "trailing zeros", "leading zeros", "shifted down", "shifted up"],
)
def test_the_exact_huge_value_passes_however_written(actual):
    assert outputs_match(actual, HUGE, TOL)
    assert outputs_match(actual, HUGE, EXACT)


def test_a_huge_negative_value_keeps_its_sign():
    assert outputs_match("-" + HUGE, "-" + HUGE, TOL)
    assert outputs_match("-1." + "0" * 400 + "5e400", "-" + HUGE, EXACT)
    assert not outputs_match("-1e999", "-" + HUGE, TOL)
    assert not outputs_match("-9e400", "-" + HUGE, TOL)
    assert not outputs_match(HUGE, "-" + HUGE, TOL)
    assert not outputs_match("-" + HUGE, HUGE, TOL)


@pytest.mark.parametrize(
    "actual, ok",
    [
        ("1e400", True),  # 0.5 away from 10**400 + 0.5: far inside rel_tol * 10**400
        ("1.0000009e400", True),
        ("0.9999991e400", True),
        ("1.0000011e400", False),
        ("0.999998e400", False),
        ("1" + "0" * 400, True),  # an integer answer against a decimal expected token: within tolerance
    ],
)
def test_a_huge_value_within_the_relative_tolerance_passes(actual, ok):
    assert outputs_match(actual, HUGE, TOL) is ok
    assert not outputs_match(actual, HUGE, EXACT)  # none of them is exactly 10**400 + 0.5


def test_the_relative_tolerance_is_exact_at_its_edge():
    # rel_tol 1/4 is a float exactly: 1.25e400 is on the edge, 1.25 + 10**-30 past it.
    quarter = Tolerance(abs_tol=0.0, rel_tol=0.25)
    assert outputs_match("1.25e400", "1e400", quarter)
    assert not outputs_match("1.25" + "0" * 29 + "1e400", "1e400", quarter)


@pytest.mark.parametrize(
    "actual, expected, tolerance, ok",
    [
        ("1e-400", "0.0", TOL, True),  # below the float range, within abs_tol of 0
        ("1e-400", "0.0", EXACT, False),  # read as 0.0 it would equal 0.0: exactly it does not
        ("2e-400", "1e-400", Tolerance(abs_tol=0.0), False),
        ("1.0000001e-400", "1e-400", Tolerance(abs_tol=0.0), True),
        ("1e-99999", "1e-7", TOL, True),
        ("5e-320", "4e-320", Tolerance(abs_tol=0.0), False),  # subnormal: the reading keeps too few bits
        ("1e-400", "0", Tolerance(numbers=True), True),  # an integer expected token in a tolerant task
        ("1e-400", "0", Tolerance(numbers=True, abs_tol=0.0), False),
    ],
)
def test_values_below_the_float_range_compare_exactly(actual, expected, tolerance, ok):
    assert outputs_match(actual, expected, tolerance) is ok


@pytest.mark.parametrize(
    "actual, expected, ok",
    [
        ("inf", "inf", True),  # words, matched as text only
        ("nan", "nan", True),
        ("inf", "1e999", False),
        ("1e999", "inf", False),
        ("1e999", "1e999", True),  # the same text
        ("1e999", "10e998", True),  # the same value
        ("1e999", "1.0000001e999", True),  # within rel_tol
        ("1e999", "1.00001e999", False),
        ("-1e999", "1e999", False),
    ],
)
def test_infinities_written_as_numbers_are_their_exact_values(actual, expected, ok):
    assert outputs_match(actual, expected, TOL) is ok


def cpu_seconds(actual: str, expected: str, tolerance: Tolerance = TOL) -> tuple[bool, float]:
    start = time.process_time()
    result = outputs_match(actual, expected, tolerance)
    return result, time.process_time() - start


@pytest.mark.parametrize(
    "actual, expected",
    [
        ("1e" + "9" * MEGABYTE, HUGE),  # an exponent a megabyte long: never read as an integer
        ("1e-" + "9" * MEGABYTE, "0.0"),
        ("1e99999999999", HUGE),  # 10**(10**11): a Fraction or int of it would never finish
        ("1e-99999999999", "1e-400"),
        ("1e999999999999999", "1e999999999999999.5"),  # not a number: text
        ("9" * MEGABYTE + ".5", HUGE),  # a megabyte of digits
        ("9" * MEGABYTE + ".5", "9" * MEGABYTE + ".4"),  # two megabytes of digits: past the exact bound
        ("." + "0" * MEGABYTE + "1", "1e-400"),
        ("9" * MEGABYTE + "x", "1.5"),  # a digit run ending in a letter: no regex backtracking
        ("1" + "0" * MEGABYTE + "e-" + str(MEGABYTE - 401), "1e400"),  # 1e401 spelt in a megabyte
    ],
    ids=[
        "long exponent",
        "long negative exponent",
        "1e(10**11)",
        "1e-(10**11)",
        "exponent not a number",
        "digits",
        "digits against digits",
        "fraction digits",
        "digits then a letter",
        "long 1e401",
    ],
)
def test_tokens_with_enormous_exponents_or_digits_fail_fast(actual, expected):
    result, seconds = cpu_seconds(actual, expected)
    assert not result
    assert seconds < 0.1, f"{seconds:.3f} s CPU for a {len(actual)}-character token"


def test_a_megabyte_token_of_the_right_value_passes_fast():
    expected = "1" * MEGABYTE + ".5"
    result, seconds = cpu_seconds("+" + expected + "0" * 1000, expected)
    assert result and seconds < 0.1, seconds
    # Past the exact bound only the same value matches, even one within the tolerance.
    result, seconds = cpu_seconds("1" * MEGABYTE + ".6", expected)
    assert not result and seconds < 0.1, seconds


@pytest.mark.parametrize(
    "actual, expected, ok",
    [
        ("1.0000004", "1.0", True),
        ("1.00001", "1.0", False),
        ("1000000.5", "1000000.0", True),
        ("1.000001", "1.0", True),  # on the abs_tol edge as floats: 1.000001 - 1.0 < 1e-6 in binary
        ("1e308", "1.0000001e308", True),
        ("1e308", "1.00001e308", False),
        ("1.7976931348623157e308", "1.7976931348623157e308", True),
        ("2.2250738585072014e-308", "0.0", True),
        ("-0.0", "0.0", True),
        ("0e99999999999999999999", "0.0", True),  # zero whatever its exponent
        ("1e-7", "0.0", True),
        ("3", "3.0000001", True),
    ],
)
def test_ordinary_floats_compare_as_before(actual, expected, ok):
    assert outputs_match(actual, expected, TOL) is ok


normal_floats = st.floats(
    allow_nan=False, allow_infinity=False, allow_subnormal=False, min_value=-1e300, max_value=1e300
)


@given(normal_floats, normal_floats)
def test_floats_inside_the_range_compare_as_floats(a, b):
    assert outputs_match(repr(a), repr(b), TOL) is TOL.close(a, b)


digits = st.text(alphabet="0123456789", min_size=1, max_size=30)
huge_tokens = st.builds(
    lambda sign, whole, fraction, exponent: f"{sign}{whole}.{fraction}e{exponent}",
    st.sampled_from(["", "-"]),
    digits,
    digits,
    st.integers(min_value=300, max_value=420) | st.integers(min_value=-420, max_value=-300),
)


def in_float_range(value: Fraction) -> bool:
    return value == 0 or Fraction(sys.float_info.min) <= abs(value) <= Fraction(sys.float_info.max)


def exact(token: str) -> Fraction:
    mantissa, exponent = token.split("e")
    return Fraction(mantissa) * Fraction(10) ** int(exponent)


@given(huge_tokens, huge_tokens, st.sampled_from([TOL, EXACT, Tolerance(abs_tol=0.0, rel_tol=1e-3)]))
def test_tokens_past_the_range_agree_with_fractions(actual, expected, tolerance):
    a, e = exact(actual), exact(expected)
    if in_float_range(a) and in_float_range(e):
        return  # compared as floats (test above)
    within = abs(a - e) <= max(Fraction(tolerance.abs_tol), Fraction(tolerance.rel_tol) * abs(e))
    assert outputs_match(actual, expected, tolerance) is within


@given(huge_tokens)
def test_a_token_past_the_range_matches_itself_shifted(token):
    mantissa, exponent = token.split("e")
    shifted = f"{mantissa}000e{int(exponent)}"
    assert outputs_match(shifted, token, EXACT)


@given(
    st.integers(min_value=1, max_value=10**30),
    # 10**309 and up, 10**-310 and down (mantissa below 10**30): outside the float range
    st.integers(min_value=309, max_value=420) | st.integers(min_value=-420, max_value=-340),
    st.integers(min_value=-20, max_value=20),
    st.sampled_from(["", "-"]),
)
def test_the_relative_tolerance_edge_past_the_range(mantissa, exponent, k, sign):
    # actual = expected * (1 + k / 10**7): rel_tol 1e-6 as a float is just below 10**-6, so k = 10 is past it.
    expected = f"{sign}{mantissa}e{exponent}"
    actual = f"{sign}{mantissa * 10**7 + k * mantissa}e{exponent - 7}"
    assert outputs_match(actual, expected, Tolerance(abs_tol=0.0)) is (abs(k) < 10)
