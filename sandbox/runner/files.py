"""File ops: read, write and list a path in the workspace, as the sandbox user, inside the allowlist.

Each reply is bounded where it is made: MAX_DATA bytes read, MAX_LIST_ENTRIES entries listed.
"""

import base64
import os
import stat

from sandbox.runner.privileges import Denied, SandboxIdentity, resolve
from sandbox.runner.replies import b64, file_result
from sandbox.wire import MAX_DATA, MAX_LIST_ENTRIES

LIST_SCAN_ENTRIES = 1000000  # a listing stops counting here (the total it reports is then a floor)


def op_read_file(body, fs_paths, emit):
    limit = min(int(body["max_bytes"]), MAX_DATA)
    try:
        with SandboxIdentity():
            path = resolve(body["path"], body["allow"])
            with open(path, "rb") as handle:
                data = handle.read(limit + 1)
    except Denied as exc:
        return file_result("sandbox_denied", str(exc), data="")
    except OSError as exc:
        return file_result("tool_error", "%s: %s" % (body["path"], exc.strerror or exc), data="")
    truncated = len(data) > limit
    return file_result("output_truncated" if truncated else "ok", data=b64(data[:limit]), truncated=truncated)


def op_write_file(body, fs_paths, emit):
    data = base64.b64decode(body["data"])
    try:
        with SandboxIdentity():
            parent = resolve(os.path.dirname(body["path"]) or "/", body["allow"])
            target = os.path.join(parent, os.path.basename(body["path"]))
            if os.path.islink(target):
                resolve(target, body["allow"])
            if body.get("mkdir", True):
                os.makedirs(parent, exist_ok=True)
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, int(body.get("mode", 0o644)))
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
    except Denied as exc:
        return file_result("sandbox_denied", str(exc))
    except OSError as exc:
        failure = "disk_full" if exc.errno in (28, 27, 122) else "tool_error"
        return file_result(failure, "%s: %s" % (body["path"], exc.strerror or exc))
    return file_result(bytes_written=len(data))


def op_list_dir(body, fs_paths, emit):
    """The directory's entries, the first ``max_entries`` by name (a bounded heap: however many
    entries the candidate made, the reply and the runner's memory stay bounded); past the bound the
    reply says output_truncated and how many entries there are (a floor past LIST_SCAN_ENTRIES)."""
    import heapq

    limit = max(1, min(int(body.get("max_entries") or MAX_LIST_ENTRIES), MAX_LIST_ENTRIES))
    try:
        with SandboxIdentity():
            path = resolve(body["path"], body["allow"])
            names, total = [], 0
            with os.scandir(path) as it:
                for entry in it:
                    total += 1
                    key = os.fsencode(entry.name)
                    if len(names) < limit:
                        heapq.heappush(names, _Desc(key))
                    elif key < names[0].key:
                        heapq.heapreplace(names, _Desc(key))
                    if total >= LIST_SCAN_ENTRIES:
                        break
            entries = []
            for item in sorted(names, key=lambda d: d.key):
                name = os.fsdecode(item.key)
                try:
                    st = os.stat(os.path.join(path, name), follow_symlinks=False)
                except OSError:  # removed meanwhile (nothing of the sandbox user runs now, but a listing is data)
                    continue
                kind = "dir" if stat.S_ISDIR(st.st_mode) else "link" if stat.S_ISLNK(st.st_mode) else "file"
                entries.append({"name": name, "kind": kind, "size": st.st_size})
    except Denied as exc:
        return file_result("sandbox_denied", str(exc), entries=[])
    except OSError as exc:
        return file_result("tool_error", "%s: %s" % (body["path"], exc.strerror or exc), entries=[])
    if total <= limit:
        return file_result(entries=entries, total=total)
    more = "at least %d" % total if total >= LIST_SCAN_ENTRIES else "%d" % total
    detail = "%s entries; the first %d by name are listed" % (more, limit)
    return file_result("output_truncated", detail, entries=entries, total=total, truncated=True)


class _Desc:
    """A heap item ordered backwards, so heapq's min-heap keeps the largest of the smallest names on top."""

    __slots__ = ("key",)

    def __init__(self, key):
        self.key = key

    def __lt__(self, other):
        return self.key > other.key
