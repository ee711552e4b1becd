"""Archive ops: put a tar into the workspace (regular files and directories only) and get one out of it.

Both run as the sandbox user inside the allowlist. An archive coming out is bounded twice before it is
built: by its size (MAX_DATA, sparse files counted at their full size) and by the container's free memory.
"""

import base64
import io
import os
import stat

from sandbox.runner.cgroup import memory_headroom
from sandbox.runner.privileges import Denied, SandboxIdentity, resolve
from sandbox.runner.replies import b64, file_result
from sandbox.wire import MAX_DATA

ARCHIVE_MEMORY_FACTOR = 5  # copies of an archive alive at once while it is sent (see op_get_archive)
ARCHIVE_MEMORY_MARGIN = 16 << 20


def op_put_archive(body, fs_paths, emit):
    """Extract a tar into ``dest`` as the sandbox user: regular files and directories only."""
    import tarfile

    try:
        with SandboxIdentity():
            dest = resolve(body["dest"], body["allow"])
            with tarfile.open(fileobj=io.BytesIO(base64.b64decode(body["tar"])), mode="r:*") as tar:
                for member in tar.getmembers():
                    _extract_member(tar, member, dest, body["allow"])
    except Denied as exc:
        return file_result("sandbox_denied", str(exc))
    except (OSError, tarfile.TarError) as exc:
        failure = "disk_full" if getattr(exc, "errno", None) in (28, 27, 122) else "tool_error"
        return file_result(failure, "put_archive into %s: %s" % (body["dest"], exc))
    return file_result()


def _extract_member(tar, member, dest, allow):
    name = os.path.normpath(member.name)
    if name.startswith("/") or name == ".." or name.startswith("../"):
        raise Denied("archive member %r escapes the destination" % member.name)
    target = os.path.join(dest, name)
    resolve(os.path.dirname(target), allow)
    mode = (member.mode or 0o644) & 0o777
    if member.isdir():
        os.makedirs(target, mode=mode | 0o700, exist_ok=True)
    elif member.isfile():
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if os.path.islink(target):
            os.unlink(target)
        source = tar.extractfile(member)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
        with os.fdopen(fd, "wb") as handle:
            while True:
                chunk = source.read(1 << 20)
                if not chunk:
                    break
                handle.write(chunk)
    else:
        raise Denied("archive member %r is not a regular file or directory" % member.name)


class BoundedBuffer(io.BytesIO):
    """An archive buffer that refuses to grow past ``limit`` while it is written.

    Sparse files cost no disk but archive at their full size: unbounded, a workspace
    could make the runner build gigabytes and be OOM-killed in the middle of a copy-out.
    """

    def __init__(self, limit):
        super().__init__()
        self.limit = limit

    def write(self, data):
        if self.tell() + len(data) > self.limit:
            raise OSError(27, "archive larger than %d bytes" % self.limit)
        return super().write(data)


def tree_size(path, limit):
    """The size an archive of ``path`` will have (a header per entry plus file sizes), counted up to ``limit``."""
    st = os.lstat(path)
    total = 512 + (st.st_size if stat.S_ISREG(st.st_mode) else 0)
    for root, dirs, files in os.walk(path):  # symlinks are archived as links, never followed
        for name in dirs + files:
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            total += 512 + (st.st_size if stat.S_ISREG(st.st_mode) else 0)
            if total > limit:
                return total
    return total


def op_get_archive(body, fs_paths, emit):
    import tarfile

    limit = min(int(body["max_bytes"]), MAX_DATA)
    buffer = BoundedBuffer(limit)
    try:
        with SandboxIdentity():
            path = resolve(body["path"], body["allow"])
            size = tree_size(path, limit)
            if size > limit:
                raise OSError(27, "archive larger than %d bytes" % limit)
            # The tar, its base64 and the reply's JSON text and bytes are alive at once, inside the
            # container's memory limit next to the workspace's tmpfs pages: refuse rather than be OOM-killed.
            headroom = memory_headroom()
            if headroom is not None and ARCHIVE_MEMORY_FACTOR * size + ARCHIVE_MEMORY_MARGIN > headroom:
                raise OSError(12, "workspace memory too full to copy out %d bytes (%d free)" % (size, headroom))
            with tarfile.open(fileobj=buffer, mode="w") as tar:
                tar.add(path, arcname=os.path.basename(path) or ".", recursive=True)
    except Denied as exc:
        return file_result("sandbox_denied", str(exc), tar="")
    except OSError as exc:
        return file_result("tool_error", "get_archive %s: %s" % (body["path"], exc.strerror or exc), tar="")
    return file_result(tar=b64(buffer.getbuffer()))
