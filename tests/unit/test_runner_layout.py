"""The runner as the image holds it: `images.inputs.runner_sources()` laid out under a folder as under /opt/gym
(`sandbox` an empty package), started as a directory under -I -S -B. It needs nothing but the standard library,
its modules are not importable by bare names nor shadowed by a file beside `sandbox/`, and it answers frames.
The same in a real container: tests/integration (every workspace call goes through it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from images.inputs import runner_sources
from sandbox import wire
from sandbox.protocol import FrameDecoder, encode_frame

ISOLATED = [sys.executable, "-I", "-S", "-B"]  # as sandbox.docker_engine.RUNNER_COMMAND starts it


def lay_out(root: Path) -> Path:
    """The image's /opt/gym under ``root`` (images/runner/Dockerfile); returns the runner's directory."""
    for path, data in runner_sources().items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)
    (root / "sandbox/__init__.py").write_text("")
    return root / "sandbox/runner"


def imports_isolated(root: Path) -> subprocess.CompletedProcess[str]:
    code = f"import sys; sys.path.append({str(root)!r}); import sandbox.runner.serve"
    return subprocess.run([*ISOLATED, "-c", code], capture_output=True, text=True, timeout=60)


def test_the_runner_needs_nothing_but_the_standard_library(tmp_path):
    lay_out(tmp_path)
    done = imports_isolated(tmp_path)
    assert done.returncode == 0, done.stderr
    # the check can fail: a module that imports a third-party package does not import under -I -S
    serve = tmp_path / "sandbox/runner/serve.py"
    serve.write_text("import pydantic\n" + serve.read_text())
    done = imports_isolated(tmp_path)
    assert done.returncode != 0 and "No module named 'pydantic'" in done.stderr


def test_run_as_a_directory_the_runner_imports_its_package_and_the_stdlib_first(tmp_path):
    runner = lay_out(tmp_path)
    (runner / "serve.py").write_text(
        "import heapq, json, sys\n"
        "import sandbox.wire\n"
        "def main():\n"
        "    print(json.dumps({'path': sys.path, 'heapq': heapq.__file__, 'wire': sandbox.wire.__file__}))\n"
        "    return 0\n"
    )
    (tmp_path / "heapq.py").write_text("raise SystemExit('shadowed')\n")  # beside sandbox/: must not win
    (runner / "json.py").write_text("raise SystemExit('shadowed')\n")  # a bare name in the runner's directory
    done = subprocess.run([*ISOLATED, str(runner)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["path"][-1] == str(tmp_path) and str(runner) not in seen["path"]
    assert Path(seen["wire"]) == tmp_path / "sandbox/wire.py"
    assert not seen["heapq"].startswith(str(tmp_path))


@pytest.mark.skipif(os.geteuid() != 0, reason="the runner sets its groups at start: root only (as in its container)")
def test_the_laid_out_runner_says_hello_and_answers_a_ping(tmp_path):
    runner = lay_out(tmp_path)
    request = encode_frame({wire.ID: 1, wire.OP: wire.PING, wire.BODY: {}})
    done = subprocess.run([*ISOLATED, str(runner)], input=request, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    hello, pong = FrameDecoder().feed(done.stdout)
    assert hello == {wire.ID: 0, wire.OK: True, wire.BODY: {wire.HELLO: wire.RUNNER_NAME, wire.VERSION: 1}}
    assert pong[wire.ID] == 1 and pong[wire.OK] and pong[wire.BODY]["pid"] > 1
