"""One malformed body does not stall the other requests of the sandbox service (a real sandbox-serve).

`gym.service.admission.check_shape` counts a body's JSON values and nesting before it is parsed, on the service's
single parse thread, the thread every ``/run_code`` and ``/v1/grade`` request needs to read its body and write its
answer; it takes time linear in the body's size whatever the body holds (tests/unit/test_service_body_shape.py). A
body as large as the service here takes (~1 MB; ``max_body_bytes`` is 1 MiB) holding one string that never closes,
made of ``\\"`` pairs (quadratic for a check that tries a whole string at each quote: about an hour of CPU), is
refused at once (400, the string never closes), and a plain run sent beside it answers within seconds.

Control: a well-formed body as large, with as many brackets (refused at once, 400: nested too deep), leaves the
plain run beside it unhurt the same way.
"""

from __future__ import annotations

import threading
import time

import pytest

from tests.sandbox_serve_support import sandbox_service

pytestmark = pytest.mark.docker

PAIRS = 500_000  # 1 MB of `\"`, within the service's max_body_bytes (1 MiB, tests/sandbox_serve_support.py)
BODY = b'{"language": "python", "code": "' + b'\\"' * PAIRS + b"[" * 40  # never closes its string
# the control: as large, as many brackets, its string closed (refused at once, 400: nested too deep)
WELL_FORMED = b'{"language": "python", "code": "' + b'\\"' * PAIRS + b'", "x": ' + b"[" * 40 + b"]" * 40 + b"}"
WAIT_S = 10.0  # a plain run takes well under a second; a quadratic check holds the parse thread an hour


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    with sandbox_service(tmp_path_factory.mktemp("sandbox-serve")) as running:
        yield running


def timed_run(service) -> float:
    start = time.monotonic()
    answer = service.run(code="print(6 * 7)")
    assert answer["status"] == "Success" and answer["run_result"]["stdout"] == "42\n", answer
    return time.monotonic() - start


def run_beside(service, body: bytes) -> tuple[int, object, float]:
    """The status and answer of ``body`` sent to /run_code, and how long a plain run sent a second later took."""
    answered = []
    sender = threading.Thread(target=lambda: answered.append(service.call("POST", "/run_code", body, timeout=600)))
    sender.start()
    time.sleep(1.0)  # the body is read and on the parse thread
    try:
        took = timed_run(service)
    finally:
        sender.join()
    return answered[0][0], answered[0][1], took


def test_control_a_well_formed_body_as_large_does_not_stall_other_runs(service):
    assert len(WELL_FORMED) < 1 << 20 and timed_run(service) < WAIT_S
    status, answer, took = run_beside(service, WELL_FORMED)
    assert status == 400 and "max_json_depth" in answer["detail"], (status, answer)
    assert took < WAIT_S, f"a plain run waited {took:.1f} s behind one well-formed body"


def test_a_body_whose_string_never_closes_does_not_stall_other_runs(service):
    assert len(BODY) < 1 << 20
    status, answer, took = run_beside(service, BODY)
    assert status == 400 and "never closes" in answer["detail"], (status, answer)
    assert took < WAIT_S, f"a plain run waited {took:.1f} s behind one malformed body"
