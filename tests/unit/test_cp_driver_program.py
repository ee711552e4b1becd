"""`tasks.grader.driver_program`: the ``-c`` program that runs the CP driver from the runner image's compiled copy
when, and only when, that copy is of this host's driver and of the running interpreter; the driver compiled from
the source it carries otherwise. Run here as host subprocesses against compiled pairs laid out in a temporary
folder (the image's own pair, root's and read-only, is checked in tests/integration/test_cp_driver_image.py)."""

from __future__ import annotations

import importlib.util
import marshal
import subprocess
import sys

import pytest

from tasks.encoding import parse_report
from tasks.grader import PRECOMPILED_DRIVER, _driver_program, driver_program, driver_source

NONCE = "0123456789abcdef"
IMPOSTOR = "import os\nos.write(1, b'IMPOSTOR\\n')\n"  # compiled code that is not the driver: shows which path ran
AUDIT = "import sys\nsys.addaudithook(lambda e, a: e == 'compile' and a[1] == '<string>' and print('COMPILED', file=sys.stderr))\n"


def lay_out(tmp_path, source: str = "", compiled: bytes | None = None) -> tuple[str, str]:
    """A driver source file and its compiled copy (by default the impostor's code under the real header)."""
    folder = tmp_path / "opt"
    folder.mkdir(exist_ok=True)
    (folder / "driver.py").write_text(source or driver_source())
    if compiled is None:
        compiled = (
            importlib.util.MAGIC_NUMBER
            + b"\x01\x00\x00\x00"
            + bytes(8)
            + marshal.dumps(compile(IMPOSTOR, "<string>", "exec"))
        )
    (folder / "driver.pyc").write_bytes(compiled)
    return str(folder / "driver.py"), str(folder / "driver.pyc")


def run(tmp_path, program: str) -> subprocess.CompletedProcess:
    solution = tmp_path / "solution.py"
    solution.write_text("def f(a, b):\n    return a + b\n")
    payload = marshal.dumps(
        {"nonce": NONCE, "program": str(solution), "mode": "call", "fn_name": "f", "args": [1, 2]}, 4
    )
    return subprocess.run(
        [sys.executable, "-I", "-S", "-c", AUDIT + program], input=payload, capture_output=True, timeout=60
    )


def graded_by_the_driver(done: subprocess.CompletedProcess) -> bool:
    report = parse_report(done.stdout, NONCE)
    return done.returncode == 0 and report.kind == "value" and report.payload == 3 and b"IMPOSTOR" not in done.stdout


def test_without_the_image_files_the_driver_is_compiled_from_the_source_it_carries(tmp_path):
    missing = (str(tmp_path / "absent.py"), str(tmp_path / "absent.pyc"))
    done = run(tmp_path, _driver_program(driver_source(), missing))
    assert graded_by_the_driver(done) and b"COMPILED" in done.stderr, done
    # the shipped program names the image's paths; on this host they are absent, and it grades all the same
    assert PRECOMPILED_DRIVER[0].startswith("/opt/gym/")
    assert graded_by_the_driver(run(tmp_path, driver_program()))


def test_a_compiled_copy_of_this_driver_is_loaded_not_compiled(tmp_path):
    paths = lay_out(tmp_path)
    done = run(tmp_path, _driver_program(driver_source(), paths))
    assert done.stdout == b"IMPOSTOR\n" and b"COMPILED" not in done.stderr, done  # the compiled copy ran
    real = importlib.util.MAGIC_NUMBER + bytes(12) + marshal.dumps(compile(driver_source(), "<string>", "exec"))
    paths = lay_out(tmp_path, compiled=real)
    done = run(tmp_path, _driver_program(driver_source(), paths))
    assert graded_by_the_driver(done) and b"COMPILED" not in done.stderr, done


@pytest.mark.parametrize(
    "image_source",
    [
        pytest.param(lambda s: s.replace("BIG_INT_BITS = 14_000", "BIG_INT_BITS = 14_001"), id="another-driver"),
        pytest.param(lambda s: s + "\n", id="the-driver-and-more"),
        pytest.param(lambda s: s[:-1], id="a-prefix-of-the-driver"),
        pytest.param(lambda s: "", id="empty"),
    ],
)
def test_a_compiled_copy_of_another_source_is_never_loaded(tmp_path, image_source):
    folder = tmp_path / "opt"
    folder.mkdir()
    paths = lay_out(tmp_path)
    (folder / "driver.py").write_text(image_source(driver_source()))
    done = run(tmp_path, _driver_program(driver_source(), paths))
    assert graded_by_the_driver(done) and b"COMPILED" in done.stderr, done


@pytest.mark.parametrize(
    "compiled",
    [
        pytest.param(
            b"\x00\x00\r\n" + bytes(12) + marshal.dumps(compile("pass", "<string>", "exec")),
            id="magic-of-another-python",
        ),
        pytest.param(importlib.util.MAGIC_NUMBER + bytes(12) + b"\xff\xfe", id="not-marshal"),
        pytest.param(importlib.util.MAGIC_NUMBER + bytes(12) + marshal.dumps(42), id="not-code"),
        pytest.param(importlib.util.MAGIC_NUMBER + bytes(12), id="header-only"),
        pytest.param(importlib.util.MAGIC_NUMBER[:2], id="truncated"),
        pytest.param(b"", id="empty"),
    ],
)
def test_a_compiled_copy_that_is_no_code_of_this_interpreter_falls_back_to_the_source(tmp_path, compiled):
    paths = lay_out(tmp_path, compiled=compiled)
    done = run(tmp_path, _driver_program(driver_source(), paths))
    assert graded_by_the_driver(done) and b"COMPILED" in done.stderr, done


def test_unreadable_image_files_fall_back_to_the_source(tmp_path):
    folder = tmp_path / "opt"
    (folder / "driver.pyc").mkdir(parents=True)  # a directory where the compiled copy should be
    (folder / "driver.py").write_text(driver_source())
    done = run(tmp_path, _driver_program(driver_source(), (str(folder / "driver.py"), str(folder / "driver.pyc"))))
    assert graded_by_the_driver(done) and b"COMPILED" in done.stderr, done
