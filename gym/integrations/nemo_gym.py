"""A NeMo-Gym resources server whose ``/verify`` grades with the gym's sandbox service (``POST /v1/grade`` of
``python -m gym sandbox-serve``, docs/sandbox_serve.md).

NeMo-Gym (``pip install nemo-gym``) needs Python 3.12 or later and runs each server in a venv of its own; this
project runs on 3.11. So this file is self-contained: it imports only the standard library, ``nemo_gym`` and what
nemo_gym brings (pydantic, fastapi), never another module of this project, and it is used as NeMo-Gym uses any
server: copied as ``resources_servers/code_rl_gym/app.py`` of a NeMo-Gym checkout (docs/integrations.md), or loaded
by path. The grading itself (the hidden tests in a fresh hardened container, the math check) stays in the service.

The mapping. NeMo-Gym hands ``/verify`` the dataset row's fields beside ``responses_create_params`` and the
model's ``response``, as its own servers read them (``verifier_metadata`` for code_gen, ``question`` and
``expected_answer`` for math_with_judge). The request becomes ``{"row": ROW, "format": config.row_format,
"answer": response.output_text}``, ROW being those fields, plus ``responses_create_params.input`` (a Nemotron-RL
row reads its statement there), and a NeMo-Gym math row ``{question, expected_answer}`` renamed to the gym's plain
math row ``{problem, answer}`` (the gold as written; ``question`` + ``answer`` would read as GSM8K's ``#### N``).

The result is NeMo-Gym's verify response: ``reward`` and the service's ``verdict``, ``reason``, ``passed``,
``fraction``, ``masked``, ``task_id``, ``family``, ``row_format``. A failure is never raised through NeMo-Gym; it is
a result with ``error`` naming its class and ``reason`` what the service said:

* the sample's fault, reward 0.0 as every adapter of the gym scores it: ``bad_row`` (422/400: no format reads the
  row, or it is malformed), ``too_large`` (413: the row or answer is past the service's bounds);
* the service's or the network's, ``masked`` true: ``busy`` (503 after ``busy_retries``), ``refused`` (another
  4xx: the URL names no grade route), ``service_error`` (5xx), ``timeout``, ``unreachable``, ``bad_reply`` (not
  the grade's JSON, or past ``max_reply_bytes``). A grade the service masked (the sandbox failed) is masked too.

NeMo-Gym has no per-sample mask: a masked result carries reward 0.0 with ``masked: true`` (its rollouts keep the
field, so a trainer reading them can leave those samples out); ``on_infra_error: fail`` answers 503 instead, so the
rollout fails rather than carry a 0 the policy did not earn.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import math
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

from fastapi import HTTPException
from nemo_gym.base_resources_server import (
    BaseResourcesServerConfig,
    BaseVerifyRequest,
    BaseVerifyResponse,
    SimpleResourcesServer,
)
from pydantic import ConfigDict, Field

GRADE_PATH = "/v1/grade"
ErrorKind = Literal["bad_row", "too_large", "busy", "refused", "service_error", "timeout", "unreachable", "bad_reply"]
SAMPLE_FAULTS = ("bad_row", "too_large")  # the rest are the service's or the network's: masked
MAX_ERROR_BYTES = 8192  # of a refusal's body: FastAPI's ``detail``, the reason shown
MAX_REASON_CHARS = 1000


class GymGradeConfig(BaseResourcesServerConfig):
    # Not extra="forbid": NeMo-Gym's server YAML carries keys no server declares (description, value, verified).

    sandbox_serve_url: str = "http://127.0.0.1:8080"
    """The sandbox service (``python -m gym sandbox-serve``): http(s)://HOST:PORT; ``/v1/grade`` is appended."""
    row_format: str = "auto"
    """The rows' format as the gym names it (nemotron, taco, math, ...); auto: the service tells it from the fields."""
    timeout_s: float = Field(300.0, gt=0)
    """Longest wait for one grade, retries included; a CP answer runs every hidden test in a container."""
    max_concurrency: int = Field(32, ge=1)
    """Grades in flight at once (each holds a thread); keep at or under the service's ``server.max_requests``."""
    busy_retries: int = Field(5, ge=0)
    """How many times a 503 (the service full) is retried after its ``Retry-After``, before ``busy``."""
    max_reply_bytes: int = Field(1 << 20, ge=1024)
    """Most bytes of a grade read; a longer reply is ``bad_reply``."""
    on_infra_error: Literal["zero", "fail"] = "zero"
    """A masked result: ``zero`` answers reward 0.0 with ``masked: true``; ``fail`` answers 503 with the reason."""


class GymVerifyRequest(BaseVerifyRequest):
    # The dataset row's fields arrive beside responses_create_params and response, as NeMo-Gym's agents send them.
    model_config = ConfigDict(extra="allow")


class GymVerifyResponse(BaseVerifyResponse):
    # The row's fields come back with the grade, as NeMo-Gym's agents keep them.
    model_config = ConfigDict(extra="allow")

    verdict: str
    """passed, the first failing test's verdict (wrong_answer, ...), the service's own, or ``error`` when there is one."""
    reason: str = ""
    masked: bool = False
    """The sandbox, the service or the network failed: the reward (0.0) is not the answer's."""
    passed: bool = False
    fraction: float = 0.0
    """Fraction of the hidden tests passed."""
    task_id: str | None = None
    family: str | None = None
    """cp or math, the family that graded it."""
    row_format: str | None = None
    """The format the service read the row in."""
    error: ErrorKind | None = None
    """Why there is no grade (see the module docstring); null for a grade."""


def prompt_text(given: Any) -> str:
    """The text of ``responses_create_params.input``: a string, or its system, developer and user messages."""
    if isinstance(given, str):
        return given
    texts = []
    for message in given if isinstance(given, list) else []:
        if isinstance(message, dict) and message.get("role", "user") in ("system", "developer", "user"):
            content = message.get("content")
            parts = content if isinstance(content, list) else [{"text": content}]
            texts += [part["text"] for part in parts if isinstance(part, dict) and isinstance(part.get("text"), str)]
    return "\n\n".join(texts)


def row_of(body: GymVerifyRequest) -> dict[str, Any]:
    """The gym's dataset row that ``body`` carries (see the module docstring)."""
    row = dict(body.model_extra or {})
    given = body.responses_create_params.model_dump(mode="json", include={"input"})
    row["responses_create_params"] = given
    if "expected_answer" in row and "answer" not in row:  # NeMo-Gym's math rows, the gold as written
        row["answer"] = row.pop("expected_answer")
        question = row.pop("question", None)
        if "problem" not in row:
            row["problem"] = question if isinstance(question, str) else prompt_text(given["input"])
    return row


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes
    retry_after: float


def post(url: str, payload: bytes, timeout_s: float, limit: int) -> Reply:
    """One POST on a fresh connection (no proxy, no redirect); at most ``limit`` + 1 bytes of the body read."""
    parts = urlsplit(url)
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    connection = kind(parts.hostname or "127.0.0.1", parts.port, timeout=timeout_s)
    try:
        try:
            connection.request("POST", parts.path or "/", body=payload, headers={"Content-Type": "application/json"})
        except (BrokenPipeError, ConnectionResetError):
            pass  # a refusal (413) may be answered, and the socket closed, before the whole body is sent: read it
        response = connection.getresponse()
        try:
            retry_after = float(response.getheader("Retry-After") or 1)
        except ValueError:
            retry_after = 1.0
        return Reply(response.status, response.read(limit + 1), retry_after)
    finally:
        connection.close()


def detail_of(body: bytes) -> str:
    """The reason of a refusal in FastAPI's shape (``{"detail": str | [{"loc", "msg"}]}``), else its text."""
    try:
        detail = json.loads(body)["detail"]
    except (ValueError, KeyError, TypeError):
        return body[:MAX_REASON_CHARS].decode(errors="replace")
    if isinstance(detail, list):
        said = [
            f"{'.'.join(map(str, item.get('loc', [])))}: {item.get('msg', '')}" if isinstance(item, dict) else str(item)
            for item in detail
        ]
        return "; ".join(said)[:MAX_REASON_CHARS]
    return str(detail)[:MAX_REASON_CHARS]


def failure(error: ErrorKind, reason: str) -> dict[str, Any]:
    return {"reward": 0.0, "verdict": error, "reason": reason, "masked": error not in SAMPLE_FAULTS, "error": error}


def graded(reply: Reply, limit: int) -> dict[str, Any]:
    """The result fields of the service's answer to one grade request."""
    if reply.status == 200:
        if len(reply.body) > limit:
            return failure("bad_reply", f"the grade is longer than max_reply_bytes ({limit})")
        try:
            grade = json.loads(reply.body)
            reward, verdict = grade["reward"], grade["verdict"]
            if not (reward is None or isinstance(reward, int | float) and math.isfinite(reward)) or not isinstance(
                verdict, str
            ):
                raise TypeError(f"reward {reward!r}, verdict {verdict!r}")
        except (ValueError, KeyError, TypeError) as exc:
            return failure("bad_reply", f"not a grade: {type(exc).__name__}: {str(exc)[:200]}")
        return {
            "reward": 0.0 if reward is None else float(reward),
            "verdict": verdict,
            "reason": str(grade.get("reason", ""))[:MAX_REASON_CHARS],
            "masked": reward is None or bool(grade.get("masked")),
            "passed": bool(grade.get("passed")),
            "fraction": float(grade.get("fraction") or 0.0),
            "task_id": grade.get("task_id"),
            "family": grade.get("family"),
            "row_format": grade.get("format"),
        }
    said = f"{reply.status}: {detail_of(reply.body[:MAX_ERROR_BYTES])}"
    if reply.status in (400, 422):
        return failure("bad_row", said)
    if reply.status == 413:
        return failure("too_large", said)
    if reply.status == 503:
        return failure("busy", said)
    return failure("service_error" if reply.status >= 500 else "refused", said)


class GymGradeResourcesServer(SimpleResourcesServer):
    """``/verify``: the row and the response's text graded by the gym's sandbox service (module docstring)."""

    config: GymGradeConfig

    def model_post_init(self, context: Any) -> None:
        super().model_post_init(context)
        self._slots = asyncio.Semaphore(self.config.max_concurrency)

    async def verify(self, body: GymVerifyRequest) -> GymVerifyResponse:
        result = await self.grade(row_of(body), body.response.output_text)
        if result["masked"] and self.config.on_infra_error == "fail":
            raise HTTPException(503, f"{result['verdict']}: {result['reason']}")
        return GymVerifyResponse.model_validate({**body.model_dump(), **result})

    async def grade(self, row: dict[str, Any], answer: str) -> dict[str, Any]:
        """The result fields of grading ``answer`` against ``row``; never raises for the service or the network."""
        try:
            payload = json.dumps({"row": row, "format": self.config.row_format, "answer": answer}, allow_nan=False)
        except ValueError as exc:
            return failure("bad_row", f"the row is not JSON: {exc}")
        url = self.config.sandbox_serve_url.rstrip("/") + GRADE_PATH
        try:
            # The deadline bounds the whole grade; a thread abandoned by it ends at its socket timeout (the same).
            async with asyncio.timeout(self.config.timeout_s), self._slots:
                return await self._post(url, payload.encode())
        except TimeoutError:
            return failure("timeout", f"no grade from {url} within timeout_s ({self.config.timeout_s} s)")

    async def _post(self, url: str, payload: bytes) -> dict[str, Any]:
        limit, attempt = self.config.max_reply_bytes, 0
        while True:
            try:
                reply = await asyncio.to_thread(post, url, payload, self.config.timeout_s, limit)
            except TimeoutError:  # the socket's: the same deadline as the caller's
                raise
            except OSError as exc:  # refused, reset, no route, the name does not resolve
                return failure("unreachable", f"{url}: {type(exc).__name__}: {exc}")
            except http.client.HTTPException as exc:  # not HTTP: a garbled status line or headers
                return failure("bad_reply", f"{url}: {type(exc).__name__}: {exc}")
            if reply.status != 503 or attempt == self.config.busy_retries:
                return graded(reply, limit)
            attempt += 1
            await asyncio.sleep(min(max(reply.retry_after, 0.1), 10.0))


if __name__ == "__main__":
    GymGradeResourcesServer.run_webserver()
