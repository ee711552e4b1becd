"""`tasks.grader.driver_program`: the ``-c`` program that runs the CP driver from the runner image's compiled copy
when, and only when, that copy is of this host's driver and of the running interpreter; the driver compiled from
the source it carries otherwise. Run here as host subprocesses against compiled pairs laid out in a temporary
folder (the image's own pair, root's and read-only, is checked in tests/integration/test_cp_driver_image.py)."""

from __future__ import annotations

import importlib.util
import marshal
import os
import subprocess
import sys

import pytest

from tasks.encoding import parse_report
from tasks.grader import PRECOMPILED_DRIVER, _driver_program, driver_program, driver_source

NONCE = "0123456789abcdef"
DRIVER = driver_source().encode()
IMPOSTOR = "import os\ndef _main():\n    os.write(1, b'IMPOSTOR\\n')\n"  # compiled code that is not the driver
AUDIT = "import sys\nsys.addaudithook(lambda e, a: e == 'compile' and a[1] == '<string>' and print('COMPILED', file=sys.stderr))\n"
SUM = "def f(a, b):\n    return a + b\n"


def header(source: bytes, magic: bytes = importlib.util.MAGIC_NUMBER) -> bytes:
    """The header `py_compile` writes for an unchecked hash-based compiled file of ``source``."""
    return magic + b"\x01\x00\x00\x00" + importlib.util.source_hash(source)


def compiled_of(source: str) -> bytes:
    return marshal.dumps(compile(source, "<string>", "exec"))


def lay_out(tmp_path, source: str = "", compiled: bytes | None = None) -> tuple[str, str]:
    """A driver source file and its compiled copy (by default the impostor's code under the real driver's header)."""
    folder = tmp_path / "opt"
    folder.mkdir(exist_ok=True)
    (folder / "driver.py").write_text(source or driver_source())
    (folder / "driver.pyc").write_bytes(header(DRIVER) + compiled_of(IMPOSTOR) if compiled is None else compiled)
    return str(folder / "driver.py"), str(folder / "driver.pyc")


def run(tmp_path, program: str, solution: str = SUM) -> subprocess.CompletedProcess:
    path = tmp_path / "solution.py"
    path.write_text(solution)
    payload = marshal.dumps({"nonce": NONCE, "program": str(path), "mode": "call", "fn_name": "f", "args": [1, 2]}, 4)
    return subprocess.run(
        [sys.executable, "-I", "-S", "-c", AUDIT + program], input=payload, capture_output=True, timeout=60
    )


def graded_by_the_driver(done: subprocess.CompletedProcess) -> bool:
    report = parse_report(done.stdout, NONCE)
    return done.returncode == 0 and report.kind == "value" and report.payload == 3 and b"IMPOSTOR" not in done.stdout


def test_without_the_image_files_the_driver_is_compiled_from_the_source_it_carries(tmp_path):
    missing = (str(tmp_path / "absent.py"), str(tmp_path / "absent.pyc"))
    done = run(tmp_path, _driver_program(DRIVER, missing))
    assert graded_by_the_driver(done) and b"COMPILED" in done.stderr, done
    # the shipped program names the image's paths; on this host they are absent, and it grades all the same
    assert PRECOMPILED_DRIVER[0].startswith("/opt/gym/")
    assert graded_by_the_driver(run(tmp_path, driver_program()))


def test_a_compiled_copy_of_this_driver_is_loaded_not_compiled(tmp_path):
    paths = lay_out(tmp_path)
    done = run(tmp_path, _driver_program(DRIVER, paths))
    assert done.stdout == b"IMPOSTOR\n" and b"COMPILED" not in done.stderr, done  # the compiled copy ran
    paths = lay_out(tmp_path, compiled=header(DRIVER) + compiled_of(driver_source()))
    done = run(tmp_path, _driver_program(DRIVER, paths))
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
def test_a_compiled_copy_beside_another_source_is_never_loaded(tmp_path, image_source):
    paths = lay_out(tmp_path)
    (tmp_path / "opt/driver.py").write_text(image_source(driver_source()))
    done = run(tmp_path, _driver_program(DRIVER, paths))
    assert graded_by_the_driver(done) and b"COMPILED" in done.stderr, done


@pytest.mark.parametrize(
    "compiled",
    [
        pytest.param(header(DRIVER, b"\x00\x00\r\n") + compiled_of(IMPOSTOR), id="magic-of-another-python"),
        pytest.param(header(DRIVER + b"\n") + compiled_of(IMPOSTOR), id="hash-of-another-source"),
        pytest.param(importlib.util.MAGIC_NUMBER + bytes(12) + compiled_of(IMPOSTOR), id="no-hash"),
        pytest.param(header(DRIVER) + b"\xff\xfe", id="not-marshal"),
        pytest.param(header(DRIVER) + marshal.dumps(42), id="not-code"),
        pytest.param(header(DRIVER), id="header-only"),
        pytest.param(importlib.util.MAGIC_NUMBER[:2], id="truncated"),
        pytest.param(b"", id="empty"),
    ],
)
def test_a_compiled_copy_that_is_not_this_drivers_code_falls_back_to_the_source(tmp_path, compiled):
    paths = lay_out(tmp_path, compiled=compiled)
    done = run(tmp_path, _driver_program(DRIVER, paths))
    assert graded_by_the_driver(done) and b"COMPILED" in done.stderr, done


@pytest.mark.parametrize("make", [os.mkdir, os.mkfifo], ids=["a-directory", "a-fifo"])
def test_what_is_no_regular_file_falls_back_without_blocking(tmp_path, make):
    folder = tmp_path / "opt"
    folder.mkdir()
    (folder / "driver.py").write_text(driver_source())
    make(folder / "driver.pyc")  # a FIFO opened to read would wait for a writer forever
    done = run(tmp_path, _driver_program(DRIVER, (str(folder / "driver.py"), str(folder / "driver.pyc"))))
    assert graded_by_the_driver(done) and b"COMPILED" in done.stderr, done


DEEP = """
def f(a, b):
    def down(n):
        try:
            return down(n + 1)
        except RecursionError:
            return n
    return down(0)
"""


def test_a_candidate_recurses_as_deep_as_under_the_drivers_source(tmp_path):
    """The driver's module runs apart and its `_main` is called from the program's own frame: the candidate has the
    recursion room it had when the driver's source was the `-c` program (an honest deep recursion passes as before)."""

    def depth(program: str) -> int:
        done = run(tmp_path, program, DEEP)
        report = parse_report(done.stdout, NONCE)
        assert report.kind == "value", done
        return report.payload

    baseline = depth(driver_source())
    compiled = lay_out(tmp_path, compiled=header(DRIVER) + compiled_of(driver_source()))
    missing = (str(tmp_path / "absent.py"), str(tmp_path / "absent.pyc"))
    assert depth(_driver_program(DRIVER, compiled)) == depth(_driver_program(DRIVER, missing)) == baseline > 900
