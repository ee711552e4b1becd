"""The real `python -m gym serve` process on 127.0.0.1 (port 0), for the tests that drive it over HTTP."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.policy_support import SMALL

REPO = Path(__file__).resolve().parents[1]
MODEL = {**SMALL, "vocab_size": 512, "max_position_embeddings": 256}


def start_server(
    config: Path, seen: list[str] | None = None, command: str = "serve", python: Path | None = None
) -> tuple[subprocess.Popen, str]:
    """The server of ``command`` (`gym serve`, `gym sandbox-serve`) and its URL; ``seen`` collects its log lines up
    to "listening". ``python``: another interpreter (a test venv), running this checkout's gym."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "2"}
    if python is not None:
        env["PYTHONPATH"] = str(REPO)
    proc = subprocess.Popen(
        [str(python or sys.executable), "-m", "gym", command, str(config), "--port", "0"],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        # SIGINT as a terminal gives it: a suite started in the background (`make test &`, CI) ignores SIGINT and
        # its children inherit that, so Ctrl-C tests found the server still running (py-spy: its loop idle)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stderr], daemon=True).start()
    seen = [] if seen is None else seen
    deadline = time.monotonic() + 120
    while True:
        try:
            line = lines.get(timeout=1)
        except queue.Empty:
            if proc.poll() is not None:  # exited without another line (a config error said in one)
                raise RuntimeError("server exited:\n" + "".join(seen)) from None
            if time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError("server did not start in 120s:\n" + "".join(seen)) from None
            continue
        seen.append(line)
        match = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
        if match:
            return proc, match.group(1)
        if proc.poll() is not None:
            raise RuntimeError("server exited:\n" + "".join(seen))


def stop_server(proc: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL if it has not exited within 20 s."""
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
