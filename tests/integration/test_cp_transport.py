"""What the grader sends into the container arrives byte for byte: the program file and each test's stdin.

Grading is only as honest as this: a corrupted program or input would turn
into a wrong verdict charged to the candidate. The payloads are chosen so
their base64 form contains both '+' and '/' (the characters on which the
standard and URL-safe alphabets differ).
"""

from __future__ import annotations

import base64
import hashlib

import pytest
import trio

from sandbox.config import SandboxConfig
from sandbox.pool import WorkspacePool
from sandbox.protocol import BatchExecRequest, ExecRequest

pytestmark = pytest.mark.docker

PAYLOAD = bytes(range(256)) * 4 + "def f(x) -> list[int]:  # ?>>? ~~~ ünïcödé\n".encode()
HASHER = "import hashlib, sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())"


def test_payload_exercises_both_alphabets():
    encoded = base64.b64encode(PAYLOAD)
    assert b"+" in encoded and b"/" in encoded


def test_written_file_and_stdin_arrive_intact():
    async def main():
        async with WorkspacePool(SandboxConfig.model_validate({"pool": {"size": 0}})) as pool:
            async with pool.acquire(owner="pytest-cp-transport") as ws:
                await ws.write_file("/workspace/payload.bin", PAYLOAD)
                batch = await ws.exec_batch(
                    BatchExecRequest(
                        items=[
                            ExecRequest(argv=["python3", "-I", "-c", HASHER], stdin=PAYLOAD, timeout_s=30),
                            ExecRequest(argv=["sha256sum", "/workspace/payload.bin"], timeout_s=30),
                        ]
                    )
                )
                return batch.results

    via_stdin, via_file = trio.run(main)
    digest = hashlib.sha256(PAYLOAD).hexdigest()
    assert via_stdin.stdout_text.strip() == digest, "stdin bytes were altered on the way into the container"
    assert via_file.stdout_text.split()[0] == digest, "write_file bytes were altered on the way into the container"
