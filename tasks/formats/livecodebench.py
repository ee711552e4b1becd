"""LiveCodeBench code-generation rows (stdin/stdout or functional).

Row shape::

    {"question_id": str, "question_title": str, "question_content": str, "starter_code": str,
     "public_test_cases": JSON string of [{"input": str, "output": str, "testtype": "stdin"|"functional"}],
     "private_test_cases": the same JSON, or base64(zlib(pickle(that JSON string))) as released,
     "metadata": JSON string of {"func_name": str} (functional problems)}

Functional inputs hold one JSON value per line (the arguments); the output is
one JSON value. The released private tests are a pickled string: they are
unpickled with an unpickler that refuses every global, so only plain values
(the JSON string) can come out of it, never code.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import pickle
import zlib
from typing import Any

from tasks.errors import MalformedRow
from tasks.formats import field
from tasks.task import CallTest, StdinTest, Task

# The release's largest private test sets inflate to a few MiB; far above that is a bomb.
MAX_INFLATED_BYTES = 64 << 20


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refusing global {module}.{name} in a test-case pickle")


def _inflate(data: bytes, path: str) -> bytes:
    """zlib-decompress at most ``MAX_INFLATED_BYTES``: a crafted row must not inflate without bound."""
    inflater = zlib.decompressobj()
    raw = inflater.decompress(data, MAX_INFLATED_BYTES)
    if inflater.unconsumed_tail:
        raise MalformedRow(f"{path} decompresses to more than {MAX_INFLATED_BYTES >> 20} MiB")
    return raw


def looks_like(row: dict[str, Any]) -> bool:
    return "question_content" in row and "public_test_cases" in row


def _cases(value: Any, path: str) -> list[dict[str, Any]]:
    if value is None or value == "":
        return []
    if isinstance(value, str):
        try:
            value = json.loads(value)
            if isinstance(value, str):  # JSON-encoded twice by a re-export
                value = field.decoded(value, path)
        except json.JSONDecodeError:
            try:
                raw = _inflate(base64.b64decode(value.encode(), validate=True), path)
                value = json.loads(_PlainUnpickler(io.BytesIO(raw)).load())
            except (binascii.Error, zlib.error, pickle.UnpicklingError, EOFError, TypeError, ValueError) as err:
                raise MalformedRow(f"{path} is neither JSON nor the compressed release encoding: {err}") from err
    if not isinstance(value, list) or not all(isinstance(case, dict) for case in value):
        raise MalformedRow(f"{path} must be a list of test-case objects")
    return value


def _arguments(text: str, path: str) -> list[Any]:
    try:
        return [json.loads(line) for line in text.split("\n") if line.strip()]
    except json.JSONDecodeError as err:
        raise MalformedRow(f"{path}: functional input line is not JSON: {err}") from err


def _test(case: dict[str, Any], path: str) -> StdinTest | CallTest:
    kind, given, wanted = case.get("testtype"), case.get("input"), case.get("output")
    if not isinstance(given, str) or not isinstance(wanted, str):
        raise MalformedRow(f"{path}: input and output must be strings")
    if kind == "stdin":
        return StdinTest(input=given, output=wanted)
    if kind == "functional":
        try:
            expected = json.loads(wanted)
        except json.JSONDecodeError as err:
            raise MalformedRow(f"{path}: functional output is not JSON: {err}") from err
        return CallTest(args=_arguments(given, path), expected=expected)
    raise MalformedRow(f"{path}: testtype {kind!r} is neither 'stdin' nor 'functional'")


def parse(index: int, row: dict[str, Any], name: str = "lcb") -> Task:
    public = tuple(
        _test(c, f"public_test_cases[{n}]") for n, c in enumerate(_cases(row.get("public_test_cases"), "public"))
    )
    private = tuple(
        _test(c, f"private_test_cases[{n}]") for n, c in enumerate(_cases(row.get("private_test_cases"), "private"))
    )
    tests = public + private
    if not tests:
        raise MalformedRow("no public or private test cases")
    kinds = {t.type for t in tests}
    if len(kinds) != 1:
        raise MalformedRow("mixes stdin and functional test cases")
    kind = "call" if kinds == {"call"} else "stdin"
    metadata = field.decoded(row.get("metadata") or {}, "metadata")
    fn_name = metadata.get("func_name") if isinstance(metadata, dict) else None
    if kind == "call" and not (isinstance(fn_name, str) and fn_name.isidentifier()):
        raise MalformedRow("functional problem without metadata.func_name")
    return Task(
        task_id=field.task_id(row, ("task_id", "question_id"), index),
        source_format="lcb",
        kind=kind,
        prompt=field.get(row, "question_content", str),
        tests=tests,
        public_tests=public,
        fn_name=fn_name if kind == "call" else None,
        starter_code=field.get(row, "starter_code", str, ""),
    )
