"""The bodies the ops reply with, as dicts with the field names of `sandbox.protocol`'s result models.

Bytes travel as standard base64 (`b64`). Every failure is one of the host's FailureKind values, by name.
"""

import base64


def b64(data):
    return base64.b64encode(data).decode("ascii")


def exec_result(**fields):
    """An ExecResult: ``fields`` over the defaults, stdout and stderr given as bytes."""
    result = {
        "exit_code": None,
        "signal": None,
        "stdout": b"",
        "stderr": b"",
        "wall_s": 0.0,
        "cpu_s": 0.0,
        "max_rss_kb": 0,
        "failure": "ok",
        "truncated": False,
        "detail": "",
        "run_delay_s": None,
        "starved": False,
    }
    result.update(fields)
    result["stdout"] = b64(result["stdout"])
    result["stderr"] = b64(result["stderr"])
    return result


def file_result(failure="ok", detail="", **fields):
    """The body of a file or archive op (ReadFileResult, FileResult, ListDirResult, GetArchiveResult)."""
    fields.update(failure=failure, detail=detail)
    return fields
