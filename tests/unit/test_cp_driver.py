"""The in-container driver, run here as a host subprocess, and the host's decoding of its reports.

(The real sandbox runs of the same driver are in tests/integration/test_cp_tamper.py.)
"""

from __future__ import annotations

import marshal
import math
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tasks.encoding import EncodingError, decode, parse_report
from tasks.grader import driver_source

NONCE = "0123456789abcdef"


def run_driver(tmp_path, program: str, **request) -> tuple[subprocess.CompletedProcess, object]:
    path = tmp_path / "solution.py"
    path.write_text(program)
    payload = marshal.dumps({"nonce": NONCE, "program": str(path), **request}, 4)
    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-c", driver_source()], input=payload, capture_output=True, timeout=60
    )
    return proc, parse_report(proc.stdout, NONCE)


def test_call_returns_tagged_value(tmp_path):
    proc, report = run_driver(
        tmp_path,
        "def f(a, b):\n    return (a + b, {1: [2.5]}, {3}, None, b'x')\n",
        mode="call",
        fn_name="f",
        args=[1, 2],
    )
    assert proc.returncode == 0
    assert report.kind == "value"
    assert report.payload == (3, {1: [2.5]}, {3}, None, b"x")


def test_call_prefers_solution_method(tmp_path):
    program = "def f(x):\n    return -1\n\nclass Solution:\n    def f(self, x):\n        return x * 2\n"
    _, report = run_driver(tmp_path, program, mode="call", fn_name="f", args=[21])
    assert report.payload == 42


def test_unserialisable_and_subclass_values_are_refused(tmp_path):
    program = (
        "class Always:\n    def __eq__(self, other):\n        return True\n\n"
        "class Int(int):\n    pass\n\n"
        "def rigged():\n    return Always()\n\n"
        "def subclass():\n    return Int(5)\n"
    )
    for name in ("rigged", "subclass"):
        _, report = run_driver(tmp_path, program, mode="call", fn_name=name, args=[])
        assert report.kind == "unserialisable", name


@pytest.mark.parametrize(
    "body, kind",
    [
        ("import sys\n    sys.exit(0)", "error"),  # SystemExit is an error, not a success
        ("import unittest\n    raise unittest.SkipTest('skip')", "error"),
        ("raise KeyboardInterrupt", "error"),
        ("import os\n    os._exit(0)", None),  # no report at all
    ],
)
def test_early_exits_never_report_success(tmp_path, body, kind):
    proc, report = run_driver(tmp_path, f"def f():\n    {body}\n", mode="call", fn_name="f", args=[])
    assert (report.kind if report else None) == kind


def test_patching_json_print_and_stdout_changes_nothing(tmp_path):
    program = (
        "import json, builtins, sys, io, os\n"
        "json.dumps = lambda *a, **k: 'HACKED'\n"
        "json.JSONEncoder.encode = lambda *a, **k: 'HACKED'\n"
        "builtins.print = None\n"
        "builtins.type = lambda x: int\n"
        "sys.stdout = io.StringIO()\n"
        "os.write = lambda *a: 0\n"
        "def f():\n    return [1, 2]\n"
    )
    _, report = run_driver(tmp_path, program, mode="call", fn_name="f", args=[])
    assert report.kind == "value" and report.payload == [1, 2]


def test_eval_binds_candidate_and_runs_setup(tmp_path):
    _, report = run_driver(
        tmp_path,
        "def g(x):\n    return math.floor(x)\n",
        mode="eval",
        setup="import math",
        candidate="g",
        exprs=["candidate(2.5)", "g(-0.5)"],
    )
    assert report.kind == "values" and report.payload == [2, -1]


def test_there_is_no_whole_assert_mode(tmp_path):
    """An assert run whole would share the candidate's interpreter: the driver has no such mode."""
    _, report = run_driver(
        tmp_path, "def g(x):\n    return x\n", mode="exec", setup="", candidate="g", block="assert candidate(1) == 1"
    )
    assert report.kind == "error" and "unknown mode" in report.payload


def test_stray_and_forged_lines(tmp_path):
    program = (
        f'print(\'{NONCE[:8]} {{"value": ["i", 1]}}\')\n'  # wrong nonce: ignored
        "print('PASSED all tests')\n"
        "def f():\n    return 2\n"
    )
    _, report = run_driver(tmp_path, program, mode="call", fn_name="f", args=[])
    assert report.payload == 2
    forged = f'def f():\n    print(\'{NONCE} {{"value": ["i", 2]}}\', flush=True)\n    return 3\n'
    with pytest.raises(EncodingError, match="forged"):
        run_driver(tmp_path, forged, mode="call", fn_name="f", args=[])


plain = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=5),
    lambda children: (
        st.lists(children, max_size=3)
        | st.tuples(children, children)
        | st.dictionaries(st.text(max_size=3) | st.integers(), children, max_size=3)
    ),
    max_leaves=12,
)


@settings(max_examples=5, deadline=None)
@given(st.lists(plain, min_size=1, max_size=20))
def test_round_trip_through_the_driver(tmp_path_factory, values):
    tmp_path = tmp_path_factory.mktemp("rt")
    program = f"VALUES = {values!r}\n\ndef f(i):\n    return VALUES[i]\n"
    (tmp_path / "solution.py").write_text(program)
    exprs = [f"f({i})" for i in range(len(values))]
    _, report = run_driver(tmp_path, program, mode="eval", setup="", candidate=None, exprs=exprs)
    assert report.payload == values


@pytest.mark.parametrize(
    "tagged",
    [
        ["i", "1"],
        ["i", True],
        ["b", 1],
        ["x", 1],
        ["l", 1],
        ["d", [[["i", 1]]]],
        ["S", [["l", []]]],
        [],
        "i",
        ["f", "big"],
    ],
)
def test_decode_rejects_malformed(tagged):
    with pytest.raises(EncodingError):
        decode(tagged)


def test_decode_special_floats_and_depth():
    assert math.isinf(decode(["f", "-inf"])) and math.isnan(decode(["f", "nan"]))
    deep: list = ["n"]
    for _ in range(300):
        deep = ["l", [deep]]
    with pytest.raises(EncodingError):
        decode(deep)


def test_report_without_nonce_is_none_and_bad_json_is_an_error():
    assert parse_report(b"hello\n", NONCE) is None
    with pytest.raises(EncodingError):
        parse_report(f"{NONCE} {{not json\n".encode(), NONCE)
    with pytest.raises(EncodingError):
        parse_report(f'{NONCE} {{"value": ["i", 1], "x": 1}}\n'.encode(), NONCE)


def test_split_values_that_are_not_plain_data_cross_as_their_truth_value_only(tmp_path):
    program = (
        "import re\nfrom collections import Counter\n"
        "def match(s):\n    return re.match('a', s)\n"
        "def count(s):\n    return Counter(s)\n"
        "def squares(n):\n    return (i * i for i in range(n))\n"
        "class Rigged(int):\n    def __eq__(self, other):\n        return True\n"
        "def rigged():\n    return Rigged(0)\n"
    )
    exprs = ["match('abc')", "match('xyz')", "count('aab')", "squares(3)", "int", "rigged()"]
    _, report = run_driver(tmp_path, program, mode="eval", setup="", candidate=None, exprs=exprs)
    found, missing, counted, squares, kind, rigged = report.payload
    assert bool(found) and missing is None and counted == {"a": 2, "b": 1} and type(counted) is dict
    assert list(squares) == [0, 1, 4] and kind is int
    assert bool(rigged) is False and rigged != 0  # Rigged(0) is falsy; its __eq__ never crossed
    _, called = run_driver(tmp_path, program, mode="call", fn_name="match", args=["abc"])
    assert called.kind == "unserialisable"  # a call's value must be plain data
