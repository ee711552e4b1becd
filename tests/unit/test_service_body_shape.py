"""The sandbox service's pre-parse shape check costs time linear in a body's size, whatever the body holds.

`gym.service.admission.check_shape` runs before any JSON is parsed, on every ``/run_code`` and ``/v1/grade`` body
past its quick count (more than ``max_json_depth`` brackets is enough), on the service's single parse thread
(``ThreadPoolExecutor(1)`` in gym/service/app.py) that every request needs to parse its body and write its answer.
A check that tried a whole string at each ``"`` would rescan the rest of the body from every quote of a string that
never closes: O(n^2) on a string of many escaped quotes (20 kB of ``\\"`` pairs is ~1 s of CPU that way, 2 MB
hours). Strings that never close, ~2 MB each, in the shapes that hold many quotes and in the shapes an escape
scanner can get wrong (backslash runs of odd and even length, a trailing backslash), are refused (400) within 2 s
of CPU (~0.1 s measured; the module's timeout stops a quadratic check); their closed controls pass; and the counts
the check exists for stay exact: values (413) and nesting (400) outside strings, on bodies the quick count cannot
decide.
"""

from __future__ import annotations

import json
import time

import pytest

from gym.service.admission import Refused, check_shape

pytestmark = pytest.mark.timeout(60)  # a quadratic check is hours on these bodies: fail, do not hang

MAX_VALUES, MAX_DEPTH = 1 << 18, 32
SIZE = 2 << 20  # bytes of each hostile body
CPU_BOUND_S = 2.0  # ~0.1 s measured for 2 MB: a wide margin on a loaded 2-core machine; a quadratic check, hours
OPEN = b"[" * 40  # past MAX_DEPTH, so the quick count cannot pass the body and every byte is looked at

UNTERMINATED = {
    # the string opens and every later quote is escaped: n/2 quotes, each the start of a candidate string
    "escaped quote pairs": b'{"code": "' + b'\\"' * (SIZE // 2) + OPEN,
    # a run of backslashes of odd length escapes the quote after it
    "odd backslash run": b'{"code": "' + OPEN + b"\\" * (SIZE - 1) + b'"',
    # a run of even length escapes only itself, and no quote follows
    "even backslash run": b'{"code": "' + OPEN + b"\\" * SIZE,
    # the last byte is a backslash that has nothing left to escape
    "lone trailing backslash": b'{"code": "' + OPEN + b"x" * SIZE + b"\\",
    # what reads as many short strings, each closing quote escaped (`"a\"a\"a\"...`): one string that never ends
    "many short strings": b'{"code": "' + b'a\\"' * (SIZE // 3) + OPEN,
    # many strings that close (fewer than MAX_VALUES), then one that does not
    "the last of many strings": b"[" + b'"abcdefghijklmn", ' * (SIZE // 20) + b'"x' + OPEN,
}


def cpu_of(body: bytes, max_values: int = MAX_VALUES, max_depth: int = MAX_DEPTH) -> tuple[Refused | None, float]:
    """What ``check_shape`` raised (None when it passed the body) and the CPU it took."""
    started = time.process_time()
    try:
        check_shape(body, max_values, max_depth)
    except Refused as exc:
        return exc, time.process_time() - started
    return None, time.process_time() - started


def refusal(body: bytes, max_values: int, max_depth: int) -> tuple[int, str] | None:
    refused, _ = cpu_of(body, max_values, max_depth)
    return None if refused is None else (refused.status, str(refused))


def test_control_a_well_formed_body_as_large_is_measured_in_linear_time():
    body = b'{"code": "' + b'\\"' * (SIZE // 2) + b'", "x": ' + OPEN + b"]" * 40 + b"}"
    refused, cpu = cpu_of(body)
    assert refused is not None and refused.status == 400 and "max_json_depth" in str(refused)
    assert cpu < CPU_BOUND_S, f"{cpu:.2f} s of CPU for {len(body)} bytes"


@pytest.mark.parametrize("shape", sorted(UNTERMINATED))
def test_a_string_that_never_closes_is_refused_in_linear_time(shape):
    body = UNTERMINATED[shape]
    refused, cpu = cpu_of(body)
    assert refused is not None and refused.status == 400 and "never closes" in str(refused), refused
    assert cpu < CPU_BOUND_S, f"{shape}: {cpu:.2f} s of CPU for {len(body)} bytes"


def test_the_same_strings_closed_pass():
    """The controls of the shapes above: closed, each is one string, and what it holds is not counted."""
    assert refusal(b'{"code": "' + OPEN + b"\\" * 1000 + b'"}', 10, 2) is None  # even run: the quote closes
    assert refusal(b'{"code": "' + OPEN + b"\\" * 1001 + b'""}', 10, 2) is None  # odd run: the next one does
    assert refusal(b'{"code": "' + b'a\\"' * 1000 + OPEN + b'"}', 10, 2) is None
    many = b"[" + b'"x,[{", ' * 1000 + b'"x"]'  # the array and its 1001 strings: 1002 values
    assert refusal(many, 1002, 2) is None
    assert refusal(many, 1001, 2) == (413, "body holds more than max_json_values=1001 JSON values")


# 12 commas and brackets outside strings (1 + 12 values counted: the empty array counts its own), 4 inside;
# nesting 3 deep at most, 8 brackets in all
MIXED = rb'{"a": [1, "x,[{", {"b": "\\"}, [], "\",]"], "c": {"d": [true, null]}}'


def test_values_are_counted_exactly_on_a_mixed_body():
    assert json.loads(MIXED)["a"][4] == '",]'  # the body is JSON, and its escaped quote does not end the string
    assert refusal(MIXED, 13, 3) is None
    assert refusal(MIXED, 12, 3) == (413, "body holds more than max_json_values=12 JSON values")


def test_nesting_is_counted_exactly_and_closes_give_depth_back():
    assert refusal(MIXED, 13, 2) == (400, "body nests arrays and objects deeper than max_json_depth=2")
    siblings = b"[" + b",".join([b"[" * 4 + b"]" * 4] * 100) + b"]"  # 5 deep, 100 times over
    assert refusal(siblings, 1000, 5) is None
    assert refusal(siblings, 1000, 4) == (400, "body nests arrays and objects deeper than max_json_depth=4")
    in_strings = b'{"a": ["\\"[[[[[[", [[[{"b": "]]]]"}]]]]}'  # 6 deep outside strings, the brackets inside ignored
    assert refusal(in_strings, 100, 6) is None
    assert refusal(in_strings, 100, 5) == (400, "body nests arrays and objects deeper than max_json_depth=5")
