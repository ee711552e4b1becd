"""SWE-ReX under `python -m gym bench peers`: run by the python of SWE-ReX's own venv, never imported by the gym.

``python peer_swerex.py SPEC``: SWE-ReX's `DockerDeployment` (``pull="never"``) starts a container of
``SPEC["image"]`` (the gym's runner image with SWE-ReX's server added, `gym.bench.peer_env`) labelled
``SPEC["label"]``, opens the default ``bash`` session, and times the workloads of `peer_workloads`
through the runtime: commands by ``run_in_session``, files by ``write_file`` / ``read_file``. The
set-up (container start, server up, session open, first command) is timed apart. Prints the report
of `peer_workloads.emit`; every failure is a message in it, and the container is stopped (``--rm``)
on every path.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from importlib.metadata import version

import peer_workloads as w


async def measure(spec: dict) -> dict:
    from swerex.deployment.docker import DockerDeployment
    from swerex.runtime.abstract import BashAction, CreateBashSessionRequest, ReadFileRequest, WriteFileRequest

    report: dict = {"version": version("swe-rex"), "samples_ms": {}, "errors": {}}
    deployment = DockerDeployment(
        image=spec["image"],
        pull="never",
        docker_args=["--pull", "never", "--label", spec["label"]],
        startup_timeout=120.0,
    )
    stdio, text = w.payload(w.STDIO_BYTES), w.payload(w.FILE_BYTES, seed=1)

    async def run(command: str) -> str:
        return (await deployment.runtime.run_in_session(BashAction(command=command, check="raise"))).output

    async def tiny() -> None:
        await run("true")

    async def stdio_1mib() -> None:
        await deployment.runtime.write_file(WriteFileRequest(content=stdio, path="/tmp/stdin"))
        w.check_output("stdio_1mib", await run("cat /tmp/stdin"), stdio)

    async def file_rw() -> None:
        await deployment.runtime.write_file(WriteFileRequest(content=text, path="/tmp/file_rw"))
        w.check_output(
            "file_rw", (await deployment.runtime.read_file(ReadFileRequest(path="/tmp/file_rw"))).content, text
        )

    sessions = itertools.count()

    async def session_50() -> None:
        k = next(sessions)
        for turn in range(w.TURNS):
            w.check_output("session_50", await run(w.turn_command(k, turn)), str(turn + 1))

    started = time.perf_counter()
    try:
        try:
            await deployment.start()
            await deployment.runtime.create_session(CreateBashSessionRequest(startup_timeout=30.0))
            await run("cd /tmp && true")
            report["setup_ms"] = (time.perf_counter() - started) * 1000
        except Exception as exc:  # a peer that cannot start is reported with its error, never skipped
            report["errors"]["setup"] = f"{type(exc).__name__}: {exc}"
            return report
        calls = {"tiny": tiny, "stdio_1mib": stdio_1mib, "file_rw": file_rw, "session_50": session_50}
        return {**report, **await w.run_workloads_async(calls, spec)}
    finally:
        try:
            await deployment.stop()
        except Exception as exc:  # stopping a deployment that never came up asks its dead server to close
            report["errors"].setdefault(
                "setup" if "setup_ms" not in report else "teardown", f"{type(exc).__name__}: {exc}"
            )


if __name__ == "__main__":
    w.emit(asyncio.run(measure(w.spec_from_argv())))
