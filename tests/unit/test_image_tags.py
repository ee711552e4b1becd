"""Content-addressed image tags: the runner's tag follows its inputs' bytes, and the config defaults to it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from images.inputs import (
    RUNNER_DOCKERFILE,
    base_inputs,
    checkout_runner_inputs,
    runner_image,
    runner_inputs,
    runner_sources,
    runner_tag,
)
from sandbox.config import SandboxConfig

ROOT = Path(__file__).resolve().parents[2]
BASE = base_inputs("bookworm")
DOCKERFILE = b"ARG BASE\nFROM ${BASE}\nCOPY sandbox /opt/gym/sandbox\n"
RUNNER = {"sandbox/runner/__main__.py": b"print('runner')\n", "sandbox/wire.py": b"HEADER = 4\n"}


def test_the_tag_changes_with_the_runner_bytes_and_only_with_the_inputs():
    tag = runner_tag(runner_inputs(BASE, DOCKERFILE, RUNNER))
    assert re.fullmatch(r"gym-runner:[0-9a-f]{16}", tag)
    assert tag == runner_tag(runner_inputs(BASE, DOCKERFILE, dict(reversed(RUNNER.items()))))  # same files, same tag
    main, wire = RUNNER["sandbox/runner/__main__.py"], RUNNER["sandbox/wire.py"]
    changed = {
        runner_tag(runner_inputs(BASE, DOCKERFILE, {**RUNNER, "sandbox/wire.py": wire + b"# one more line\n"})),
        runner_tag(runner_inputs(BASE, DOCKERFILE, {**RUNNER, "sandbox/runner/__main__.py": main.upper()})),
        runner_tag(runner_inputs(BASE, DOCKERFILE, {**RUNNER, "sandbox/runner/serve.py": b""})),  # one more file
        runner_tag(runner_inputs(BASE, DOCKERFILE, {"sandbox/runner/main.py": main, "sandbox/wire.py": wire})),
        runner_tag(runner_inputs(BASE, DOCKERFILE + b"ENV X=1\n", RUNNER)),
        runner_tag(runner_inputs(base_inputs("trixie"), DOCKERFILE, RUNNER)),
    }
    assert tag not in changed and len(changed) == 6
    # the parts are delimited: moving bytes from one input to the next is another tag
    moved = {"sandbox/runner/__main__.py": main[3:], "sandbox/wire.py": wire}
    assert runner_inputs(BASE, DOCKERFILE + main[:3], moved) != runner_inputs(BASE, DOCKERFILE, RUNNER)


def test_the_default_image_is_this_checkouts_runner_tag(tmp_path):
    base, dockerfile, runner = checkout_runner_inputs()
    assert dockerfile == RUNNER_DOCKERFILE.read_bytes() and runner == runner_sources()
    # the runner package, the wire constants it shares with the host and the grader's driver, nothing else
    assert {"sandbox/wire.py", "sandbox/runner/__main__.py", "sandbox/runner/serve.py", "tasks/driver.py"} <= set(
        runner
    )
    assert all(path in ("sandbox/wire.py", "tasks/driver.py") or path.startswith("sandbox/runner/") for path in runner)
    assert runner["sandbox/wire.py"] == (ROOT / "sandbox/wire.py").read_bytes()
    assert runner["tasks/driver.py"] == (ROOT / "tasks/driver.py").read_bytes()  # a changed driver is another tag
    assert runner_image() == runner_tag(runner_inputs(base, dockerfile, runner)) == runner_image()
    assert SandboxConfig().image == runner_image()
    (tmp_path / "sandbox.yaml").write_text("sandbox:\n  pool: {size: 1}\n")
    assert SandboxConfig.from_yaml(tmp_path / "sandbox.yaml").image == runner_image()


def test_an_explicit_image_is_kept():
    assert SandboxConfig(image="gym-swe-instance:x-0123").image == "gym-swe-instance:x-0123"
    assert SandboxConfig.model_validate({"image": "gym-runner:latest"}).image == "gym-runner:latest"


def test_importing_the_config_reads_no_file():
    code = (
        "import images.inputs, sandbox.config, sandbox.pool, gym.cli; "
        "print(images.inputs.runner_image.cache_info().misses)"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "0"
