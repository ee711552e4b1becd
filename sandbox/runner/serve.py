"""The request loop: start-up (privileges down, the hello), then one request at a time until the host
hangs up. Nothing a request or the workspace's content does may end the loop: every failure becomes a reply.
"""

import os
import signal
import sys

from sandbox import wire
from sandbox.runner import forkserver
from sandbox.runner.archives import op_get_archive, op_put_archive
from sandbox.runner.command import SANDBOX_ENV, op_exec, op_exec_batch
from sandbox.runner.files import op_list_dir, op_read_file, op_write_file
from sandbox.runner.framing import read_frame, write_frame
from sandbox.runner.privileges import drop_bounding_set
from sandbox.runner.reset import op_reset, remember_boot
from sandbox.runner.sweep import clean_up, live_processes


class HostGone(Exception):
    """The host's end of the stream is closed."""


def op_ping(body, fs_paths, emit):
    return {"pid": os.getpid(), "processes": len(live_processes())}


OPS = {
    wire.EXEC: op_exec,
    wire.EXEC_BATCH: op_exec_batch,
    wire.READ_FILE: op_read_file,
    wire.WRITE_FILE: op_write_file,
    wire.LIST_DIR: op_list_dir,
    wire.PUT_ARCHIVE: op_put_archive,
    wire.GET_ARCHIVE: op_get_archive,
    wire.PING: op_ping,
    wire.RESET: op_reset,
}


def failed_op(exc):
    """The reply body of an operation that raised (the workspace's content made it fail, e.g. a
    directory tree too deep to archive): the candidate's ``tool_error``, after the same sweep as any
    call so nothing it started outlives it."""
    clean_up()
    return {"failure": "tool_error", "detail": ("%s: %s" % (type(exc).__name__, exc))[:2000]}


def serve(stdin, stdout):
    """Answer requests until the host closes the stream. Nothing a request or the workspace's content
    does may end this loop: every failure becomes a reply."""
    fs_paths = [p for p in os.environ.get("GYM_FS_PATHS", "/workspace:/tmp").split(":") if p]
    while True:
        try:
            request = read_frame(stdin)
        except ValueError as exc:  # JSON the host never sends: answer it, the stream stays in step
            write_frame(stdout, {wire.ID: None, wire.OK: False, wire.ERROR: "bad frame: %s" % exc})
            continue
        if request is None:
            return 0
        request_id = request.get(wire.ID) if isinstance(request, dict) else None
        op = OPS.get(request.get(wire.OP)) if isinstance(request, dict) else None
        if op is None:
            write_frame(stdout, {wire.ID: request_id, wire.OK: False, wire.ERROR: "unknown op in %.200r" % (request,)})
            continue

        forkserver.SERVER.settle()  # before the first sweep: the server's start-up is over

        def emit(body, request_id=request_id):
            try:
                write_frame(stdout, {wire.ID: request_id, wire.OK: True, wire.PARTIAL: True, wire.BODY: body})
            except OSError as exc:
                raise HostGone(exc) from exc

        try:
            body = op(request.get(wire.BODY) or {}, fs_paths, emit)
        except HostGone:
            raise
        except Exception as exc:  # RecursionError, MemoryError, OSError from the workspace's content
            body = failed_op(exc)
        write_frame(stdout, {wire.ID: request_id, wire.OK: True, wire.BODY: body})


def main():
    # The fork server first: it needs the capabilities the bounding set still grants (it empties its own)
    forkserver.SERVER.start(SANDBOX_ENV)
    drop_bounding_set()
    # No supplementary groups: file operations under SandboxIdentity must carry the sandbox
    # user's credentials only (group 0 would open root-group-readable files).
    os.setgroups([])
    # A command that exits without reading all of its stdin closes the pipe under our writes: that
    # must be an EPIPE we handle, never a SIGPIPE that kills the supervisor (and masks the call).
    # Children get SIGPIPE back at its default (subprocess restores it before exec).
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    if os.environ.get("GYM_RESET") == "1":  # set where the pool recycles: what a reset puts back
        remember_boot()
    stdin, stdout = sys.stdin.fileno(), sys.stdout.fileno()
    hello = {wire.HELLO: wire.RUNNER_NAME, wire.VERSION: wire.PROTOCOL_VERSION}
    write_frame(stdout, {wire.ID: 0, wire.OK: True, wire.BODY: hello})
    try:
        return serve(stdin, stdout)
    except (HostGone, OSError):  # the host closed the stream: nothing left to answer
        return 0
