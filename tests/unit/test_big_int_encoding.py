"""Ints past 4,300 decimal digits between the driver and the host: the ``["ix", hex]`` tag (tasks/encoding.py) and
the judge's details (`tasks.judge.shown`), which never write such an int in decimal (``repr`` refuses it).
End to end in the real sandbox: tests/integration/test_big_int_answers.py."""

from __future__ import annotations

import math

import pytest

from tasks.encoding import EncodingError, decode
from tasks.judge import shown

BIG = math.factorial(2000)  # 5736 digits


def test_a_hexadecimal_int_decodes_to_its_value_either_sign():
    assert decode(["ix", format(BIG, "x")]) == BIG
    assert decode(["ix", format(-BIG, "x")]) == -BIG
    assert decode(["l", [["ix", "ff"], ["i", 3]]]) == [255, 3]


@pytest.mark.parametrize("payload", ["", "-", "--ff", "0xff", "f_f", "FF", " ff", "ff\n", "+ff", 255, None, ["ff"]])
def test_anything_but_lowercase_hexadecimal_digits_is_refused(payload):
    with pytest.raises(EncodingError):
        decode(["ix", payload])


def test_a_megabyte_of_hexadecimal_decodes_in_linear_time():
    """4 million bits: decimal text of that size takes the host seconds to read; hexadecimal, milliseconds."""
    import time

    started = time.process_time()
    value = decode(["ix", "f" * (1 << 20)])
    assert value.bit_length() == 4 << 20 and time.process_time() - started < 1.0


def test_details_name_a_value_too_long_for_decimal_instead_of_raising():
    assert shown(BIG, 80) == "<a int holding an int too long to write in decimal>"
    assert shown([1, BIG], 60).startswith("<a list holding an int too long")
    assert shown(12345, 80) == "12345" and shown("x" * 100, 10) == "'xxxxxxxxx"
