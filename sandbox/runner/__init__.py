"""The in-container runner: one persistent supervisor per workspace container.

Stdlib only: this package and `sandbox/wire.py` are copied into the runner image under /opt/gym (the
same paths as here) and started by tini as ``python3 -I -S -B /opt/gym/sandbox/runner`` (``__main__``).
It speaks length-prefixed JSON frames on stdin/stdout (the container's attached stream) and handles one
request at a time. The frame, its bounds, the op names and the envelope's fields are `sandbox.wire`'s,
shared with the host; the fields of each body match ``sandbox.protocol``'s models exactly.

Privilege model (why the runner is uid 0): the runner must stay out of reach of the code it supervises.
It runs as uid 0 holding only CAP_KILL, CAP_SETUID, CAP_SETGID and CAP_SETPCAP (granted by the
container), drops the whole capability bounding set at start, and runs every sandboxed command as
uid/gid SANDBOX_UID with every capability set empty and no_new_privs set. A different uid means
sandboxed code cannot signal it, ptrace it (also denied by seccomp), read its /proc entries or write
into its stdout, so nothing a candidate does can forge what the runner reports. File operations run
with the effective uid of the sandbox user, so a path trick can reach nothing the sandbox user could
not reach with ``cat`` anyway; and after every call every process of the sandbox user is killed, so no
attacker process is alive during a file operation (and every System V IPC object is removed, so no
memory outlives the call either).

Modules: ``serve`` (the request loop, the op table, start-up), ``framing`` (frames on the stream),
``replies`` (the result bodies), ``privileges`` (the sandbox identity, the path allowlist),
``command`` (exec: one command under its deadline, CPU and output bounds), ``watch`` (the starvation
watch), ``cgroup`` (the container's kernel counters and CPU clock), ``sweep`` (processes and IPC
objects after a call), ``files`` (read, write, list) and ``archives`` (put and get a tar).
"""
