"""Triton kernels under the CPU interpreter: each case of ``kernels_interpret_cases.py`` reported here.

Triton decides interpreted vs compiled once, when ``triton`` is first imported (its own ``tl`` helpers
are decorated then), so ``TRITON_INTERPRET=1`` cannot be switched on inside this process, where another
test may already have imported Triton. One child pytest runs every case with the flag set; each test
here asserts the outcome of the cases of one function.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

# Triton itself is not imported here (see above); its version is read from the package metadata.
if importlib.util.find_spec("triton") is None:
    pytest.skip("triton is not installed: the interpreter tests need it", allow_module_level=True)
_TRITON = tuple(int(p) for p in importlib.metadata.version("triton").split(".")[:2])
if _TRITON < (3, 8):
    pytest.skip(
        f"triton {importlib.metadata.version('triton')}: before 3.8 its interpreter cannot loop over runtime "
        "bounds with numpy 2 (int() of a 1-element array); the compiled kernels are unaffected",
        allow_module_level=True,
    )

ROOT = Path(__file__).resolve().parents[2]
CASES = Path(__file__).with_name("kernels_interpret_cases.py")
CASE_FUNCTIONS = [
    node.name
    for node in ast.parse(CASES.read_text()).body
    if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")
]


@pytest.fixture(scope="module")
def child_outcomes(tmp_path_factory) -> tuple[dict[str, str | None], str]:
    """{case id: None if passed, else the failure text} and the child's output."""
    report = tmp_path_factory.mktemp("interpret") / "report.xml"
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", str(CASES), "-q", "-p", "no:cacheprovider", f"--junitxml={report}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    outcomes: dict[str, str | None] = {}
    if report.exists():
        for case in ET.parse(report).getroot().iter("testcase"):
            problem = next((c for c in case if c.tag in ("failure", "error", "skipped")), None)
            outcomes[case.get("name", "")] = None if problem is None else f"{problem.tag}: {problem.get('message')}"
    return outcomes, proc.stdout[-4000:] + proc.stderr[-4000:]


@pytest.mark.parametrize("function", CASE_FUNCTIONS)
def test_interpreted_kernel_case(function, child_outcomes):
    outcomes, output = child_outcomes
    mine = {name: problem for name, problem in outcomes.items() if name.split("[")[0] == function}
    assert mine, f"the child run reported no case of {function}:\n{output}"
    failed = {name: problem for name, problem in mine.items() if problem is not None}
    assert not failed, f"{failed}\n{output}"
