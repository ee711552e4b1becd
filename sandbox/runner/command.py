"""Exec: one command at a time, as the sandbox user in its own process group, under its wall-clock
deadline, the CPU limit of its whole tree, its output bound and its memory limit; then the sweep.

A call's failure is classified from kernel counters and the exit status, never from output text
(`_classify`). `op_exec_batch` runs several in one round trip, each item's result in a frame of its own.
"""

import base64
import os
import selectors
import signal
import subprocess
import time

from sandbox.runner import forkserver
from sandbox.runner.cgroup import TreeClock, counters
from sandbox.runner.privileges import SANDBOX_GID, SANDBOX_UID, Denied, SandboxIdentity, resolve
from sandbox.runner.replies import exec_result
from sandbox.runner.sweep import clean_up, sweep
from sandbox.runner.watch import StarvationWatch
from sandbox.wire import ITEM, MAX_DATA, RESULT

SANDBOX_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": "/workspace",
    "LANG": "C.UTF-8",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONUNBUFFERED": "1",
}
CPU_POLL_S = 0.02
OOM_SCORE_ADJ = "/proc/self/oom_score_adj"


def _set_oom_score_adj(value):
    """Raising one's own score needs no privilege; lowering it back to 0 (the minimum) neither."""
    try:
        with open(OOM_SCORE_ADJ, "w") as handle:
            handle.write(str(value))
    except OSError:
        pass


def _child_setup(memory_limit, cpu_limit):
    def setup():
        import resource

        if memory_limit:
            resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))
        if cpu_limit:  # a backstop for the command's own process when the cgroup cannot be read
            seconds = int(cpu_limit) + 2
            resource.setrlimit(resource.RLIMIT_CPU, (seconds, seconds + 1))

    return setup


def run_command(body, fs_paths):
    """Run one command to completion under its deadline and output bound."""
    allow = body["allow"]
    try:
        with SandboxIdentity():
            cwd = resolve(body["cwd"], allow)
            if not os.path.isdir(cwd):
                raise Denied("cwd %r is not a directory" % body["cwd"])
    except (Denied, OSError) as exc:
        return exec_result(failure="sandbox_denied", detail=str(exc))

    env = dict(SANDBOX_ENV)
    env.update(body.get("env") or {})
    limit = min(int(body["output_limit_bytes"]), MAX_DATA)
    timeout = float(body["timeout_s"])
    memory_limit = body.get("memory_limit_bytes")
    cpu_limit = body.get("cpu_limit_s")
    stdin_data = base64.b64decode(body.get("stdin") or "")
    before = counters(fs_paths)
    clock = TreeClock()
    started = time.monotonic()
    forked = forkserver.takes(body)
    proc = None
    if forked is not None:
        proc = forkserver.SERVER.spawn(forked, cwd, env, memory_limit, cpu_limit)
        if isinstance(proc, str):  # its fork failed where the runner's spawn would have failed too (pids limit)
            return _not_started(body, proc)
    if proc is None:
        proc = _spawn(body, cwd, env, memory_limit, cpu_limit)
        if isinstance(proc, dict):
            return proc

    watch = StarvationWatch.of(clock, started, timeout, body.get("starved_grace_s"), cpu_limit)
    try:
        out, err, timed_out, truncated, status, rusage, cpu_out = _supervise(
            proc, stdin_data, timeout, limit, started, cpu_limit, clock, watch
        )
    except forkserver.Lost as exc:  # a root process the candidate cannot reach: the sandbox's failure
        clean_up()
        return exec_result(failure="infra_error", detail="the fork server was lost while the command ran: %s" % exc)
    except BaseException:
        if isinstance(proc, forkserver.Child):
            proc.abandon()
        raise
    wall = time.monotonic() - started
    tree_cpu = clock.used()
    survivors = clean_up()
    after = counters(fs_paths)
    exit_code = os.waitstatus_to_exitcode(status)
    sig = -exit_code if exit_code < 0 else None
    cpu_out = cpu_out or bool(cpu_limit) and sig == signal.SIGXCPU  # the RLIMIT_CPU backstop fired
    failure = _classify(before, after, exit_code, sig, timed_out or cpu_out, truncated)
    detail = "" if not survivors else "%d processes survived the sweep" % survivors
    if cpu_out:
        detail = ("CPU limit of %.3fs passed; process group killed. " % cpu_limit) + detail
    elif timed_out:
        detail = _deadline_detail(timeout, watch) + detail
    return exec_result(
        exit_code=None if sig else exit_code,
        signal=sig,
        stdout=out,
        stderr=err,
        wall_s=wall,
        cpu_s=tree_cpu if tree_cpu is not None else rusage.ru_utime + rusage.ru_stime,
        max_rss_kb=rusage.ru_maxrss,
        failure=failure,
        truncated=truncated,
        detail=detail.strip(),
        run_delay_s=None if watch is None else watch.wait_s,
        starved=bool(timed_out and not cpu_out and watch is not None and watch.starved),
    )


def _not_started(body, why):
    return exec_result(exit_code=127, failure="nonzero_exit", detail="cannot start %r: %s" % (body["argv"][0], why))


def _spawn(body, cwd, env, memory_limit, cpu_limit):
    """The command as a child of the runner: a Popen, or the reply when it could not start."""
    # The command (and all it forks) inherits an OOM score of 1000: when the container runs out of
    # memory the kernel kills the candidate's processes, not this supervisor. The command runs under
    # another uid, non-dumpable, so it cannot write its score back down.
    _set_oom_score_adj(1000)
    try:
        return subprocess.Popen(
            body["argv"],
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            user=SANDBOX_UID,
            group=SANDBOX_GID,
            extra_groups=[],
            process_group=0,
            close_fds=True,
            restore_signals=True,  # SIGPIPE and SIGXFSZ back at their defaults in the command
            preexec_fn=_child_setup(memory_limit, cpu_limit) if memory_limit or cpu_limit else None,
        )
    except OSError as exc:
        return _not_started(body, exc)
    finally:
        _set_oom_score_adj(0)


def _deadline_detail(timeout, watch):
    if watch is None:
        return "deadline of %.3fs passed; process group killed. " % timeout
    waited = "its most-delayed task waited %.2fs for a CPU in %.2fs of wall time" % (watch.wait_s, watch.wall_s)
    if watch.starved:
        return "starved of CPU by the host: %s; process group killed at the deadline of %.3fs plus its grace. " % (
            waited,
            timeout,
        )
    why = "; not extended: %s" % watch.why if watch.why else ""
    return "deadline of %.3fs passed (%s%s); process group killed. " % (timeout, waited, why)


def _supervise(proc, stdin_data, timeout, limit, started, cpu_limit=None, clock=None, watch=None):
    """Feed stdin, read stdout/stderr through a bounded reader, enforce the deadline (and the CPU limit
    of the process tree, polled every CPU_POLL_S; past the deadline, ``watch`` may let a starved tree run on)."""
    sel = selectors.DefaultSelector()
    pidfd = os.pidfd_open(proc.pid)
    sel.register(pidfd, selectors.EVENT_READ, "exit")
    buffers = {"stdout": bytearray(), "stderr": bytearray()}
    for name in buffers:
        stream = getattr(proc, name)
        os.set_blocking(stream.fileno(), False)
        sel.register(stream, selectors.EVENT_READ, name)
    if stdin_data:
        os.set_blocking(proc.stdin.fileno(), False)
        sel.register(proc.stdin, selectors.EVENT_WRITE, "stdin")
    else:
        proc.stdin.close()
    pending = memoryview(stdin_data)
    total = 0
    timed_out = truncated = exited = cpu_out = False
    deadline = started + timeout
    while not exited:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            later = None if watch is None else watch.later(time.monotonic())
            if later is None:
                timed_out = True
                break
            deadline = later
            continue
        if cpu_limit:
            used = clock.used()
            if used is not None and used > cpu_limit:
                timed_out = cpu_out = True
                break
            remaining = min(remaining, CPU_POLL_S)
        if watch is not None:
            watch.sample(time.monotonic())
        for key, _ in sel.select(remaining):
            if key.data == "exit":
                exited = True
            elif key.data == "stdin":
                try:
                    pending = pending[os.write(key.fd, pending[: 1 << 16]) :]
                except (BrokenPipeError, BlockingIOError) as exc:
                    if isinstance(exc, BrokenPipeError):
                        pending = pending[:0]
                if not pending:
                    sel.unregister(key.fileobj)
                    key.fileobj.close()
            else:
                chunk = _read_some(key.fd)
                if chunk is None:
                    continue
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                room = limit - total
                buffers[key.data] += chunk[: max(room, 0)]
                total += len(chunk)
                if total > limit:
                    truncated = True
        if truncated:
            break
    if timed_out or truncated:
        _killpg(proc.pid)
        sweep()  # children that left the group die too, before we block in wait4
    # Leftover holders of the pipes (background children) die in the sweep that
    # follows; read what is already buffered without waiting for them.
    for name in ("stdout", "stderr"):
        stream = getattr(proc, name)
        while total <= limit:
            chunk = _read_some(stream.fileno())
            if not chunk:
                break
            room = limit - total
            buffers[name] += chunk[: max(room, 0)]
            total += len(chunk)
            truncated = truncated or total > limit
        stream.close()
    if proc.stdin and not proc.stdin.closed:
        try:
            proc.stdin.close()
        except OSError:
            pass
    sel.close()
    os.close(pidfd)
    if isinstance(proc, forkserver.Child):
        status, rusage = proc.wait4(killed=timed_out or truncated)
    else:
        _, status, rusage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return bytes(buffers["stdout"]), bytes(buffers["stderr"]), timed_out, truncated, status, rusage, cpu_out


def _read_some(fd):
    try:
        return os.read(fd, 1 << 16)
    except BlockingIOError:
        return None


def _killpg(pid):
    """The command's process group, and the command itself (it may have left its group)."""
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _classify(before, after, exit_code, sig, timed_out, truncated):
    """One FailureKind per call, from counters and exit status (never from output text)."""
    if after["oom_kill"] > before["oom_kill"]:
        return "oom"
    if after["pids_max"] > before["pids_max"]:
        return "pids_limit"
    became_full = set(after["full"]) - set(before["full"])
    # SIGXFSZ directly, or as a shell reports a child's death by it (128 + signal).
    if sig == signal.SIGXFSZ or exit_code == 128 + signal.SIGXFSZ or (became_full or after["full"]) and exit_code != 0:
        return "disk_full"
    if timed_out:
        return "timeout"
    if truncated:
        return "output_truncated"
    if exit_code != 0:
        return "nonzero_exit"
    return "ok"


def op_exec(body, fs_paths, emit):
    return run_command(body, fs_paths)


def op_exec_batch(body, fs_paths, emit):
    """Run the items one after another; each item's result goes out in a frame of its own as soon as
    it is known, so the host holds every finished result even if a later item takes the runner down,
    and bounds each item by its own deadline rather than the sum of all."""
    for index, item in enumerate(body["items"]):
        result = run_command(dict(item, allow=body["allow"]), fs_paths)
        emit({ITEM: index, RESULT: result})
        if body.get("stop_on_failure") and result["failure"] != "ok":
            break
        cpu_limit = item.get("cpu_limit_s")
        killed_at_deadline = (
            result["failure"] == "timeout"
            and result["wall_s"] >= float(item["timeout_s"] or 0)
            and not (cpu_limit and result["cpu_s"] > cpu_limit)  # a starved test run on to its CPU limit
        )
        if body.get("stop_on_deadline") and killed_at_deadline:
            break
    return {"results": []}
