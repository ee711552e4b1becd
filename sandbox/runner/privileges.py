"""Who runs what: the runner's own capabilities, the sandbox user's identity, and the paths it may reach.

The runner is uid 0 with four capabilities and empties the bounding set at start; commands run as
SANDBOX_UID, and file operations under `SandboxIdentity`, so they reach only what the sandbox user could.
"""

import ctypes
import os

SANDBOX_UID = 1000
SANDBOX_GID = 1000
PR_CAPBSET_DROP = 24
LAST_CAP = 40


class Denied(Exception):
    """A path or cwd outside the allowlist."""


def drop_bounding_set():
    """Empty the capability bounding set so no child can ever regain a capability."""
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in range(LAST_CAP + 1):
        libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)


class SandboxIdentity:
    """Run a block with the effective uid/gid of the sandbox user (saved uid stays 0)."""

    def __enter__(self):
        os.setresgid(-1, SANDBOX_GID, -1)
        os.setresuid(-1, SANDBOX_UID, -1)

    def __exit__(self, *exc):
        os.setresuid(-1, 0, -1)
        os.setresgid(-1, 0, -1)


def resolve(path, allow):
    """Resolve ``path`` (symlinks followed) and require it inside one of ``allow``.

    Runs under SandboxIdentity so resolution sees exactly what the sandbox user sees.
    """
    if "\x00" in path:
        raise Denied("path contains a NUL byte")
    if not os.path.isabs(path):
        raise Denied("path must be absolute after normalisation: %r" % path)
    real = os.path.realpath(path)
    for root in allow:
        root_real = os.path.realpath(root)
        if real == root_real or real.startswith(root_real.rstrip("/") + "/"):
            return real
    raise Denied("%r resolves to %r, outside the allowlist %r" % (path, real, list(allow)))
