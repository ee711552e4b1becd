"""llm-sandbox under `python -m gym bench peers`: run by the python of llm-sandbox's own venv, never imported by the gym.

``python peer_llm_sandbox.py SPEC``: llm-sandbox's Docker backend opens a session on the local image
``SPEC["image"]`` (the gym's runner image, as it is) in a container labelled ``SPEC["label_key"]``, and
times the workloads of `peer_workloads`: commands by ``execute_command`` (``sh -c`` for the session's
turns), files by ``copy_to_runtime`` / ``copy_from_runtime``. ``skip_environment_setup``: its Python
set-up makes a venv and upgrades pip from the network, which a local image without network cannot
do, and no workload needs it. The container's command is ``sleep infinity`` under ``--init`` (the image's
own is the gym's runner). The set-up (container create and start, first command) is timed apart.
Prints the report of `peer_workloads.emit`; the session is closed (container stopped and removed) on
every path.
"""

from __future__ import annotations

import itertools
import shlex
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

import peer_workloads as w


def measure(spec: dict) -> dict:
    from llm_sandbox import SandboxSession

    report: dict = {"version": version("llm-sandbox"), "samples_ms": {}, "errors": {}}
    stdio, text = w.payload(w.STDIO_BYTES), w.payload(w.FILE_BYTES, seed=1)
    scratch = Path(tempfile.mkdtemp(prefix="gym-bench-llm-sandbox-"))
    (scratch / "stdin").write_text(stdio)
    (scratch / "file_rw").write_text(text)
    started = time.perf_counter()
    try:
        session = SandboxSession(
            backend="docker",
            lang="python",
            image=spec["image"],
            keep_template=True,
            skip_environment_setup=True,
            workdir="/tmp",
            runtime_configs={
                "labels": {spec["label_key"]: spec["label_value"]},
                "command": ["sleep", "infinity"],
                "init": True,
                "working_dir": "/tmp",
            },
        )
        session.open()
    except Exception as exc:  # a peer that cannot start is reported with its error, never skipped
        report["errors"]["setup"] = f"{type(exc).__name__}: {exc}"
        return report

    def run(command: str) -> str:
        result = session.execute_command(command, workdir="/tmp")
        if result.exit_code != 0:
            raise RuntimeError(f"{command[:60]!r} exited {result.exit_code}: {result.stderr[-300:]}")
        return result.stdout

    def stdio_1mib() -> None:
        session.copy_to_runtime(str(scratch / "stdin"), "/tmp/stdin")
        w.check_output("stdio_1mib", run("cat /tmp/stdin"), stdio)

    def file_rw() -> None:
        session.copy_to_runtime(str(scratch / "file_rw"), "/tmp/file_rw")
        session.copy_from_runtime("/tmp/file_rw", str(scratch / "back"))
        w.check_output("file_rw", (scratch / "back").read_text(), text)

    sessions = itertools.count()

    def session_50() -> None:
        k = next(sessions)
        for turn in range(w.TURNS):
            w.check_output("session_50", run("sh -c " + shlex.quote(w.turn_command(k, turn))), str(turn + 1))

    try:
        try:
            run("true")
            report["setup_ms"] = (time.perf_counter() - started) * 1000
        except Exception as exc:
            report["errors"]["setup"] = f"{type(exc).__name__}: {exc}"
            return report
        calls = {"tiny": lambda: run("true"), "stdio_1mib": stdio_1mib, "file_rw": file_rw, "session_50": session_50}
        return {**report, **w.run_workloads(calls, spec)}
    finally:
        session.close()


if __name__ == "__main__":
    w.emit(measure(w.spec_from_argv()))
