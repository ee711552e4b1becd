"""Attacks on `gym sandbox-serve` (issue 44 item 1), each beside an honest control, against a real server process on
127.0.0.1 over the real Docker engine (tests/sandbox_serve_support.CONFIG: a 1 MiB body, 64 KiB of code, 2 s runs,
256 MiB workspaces, 6 requests in flight, 2 running).

The request side: bodies past the bound (413 before a byte is read, a gzip bomb, chunked), a body that never
arrives (408), fields past their bounds, traversal in files and fetch_files (and symlinks the code makes to get out),
negative, infinite and huge timeouts and memory, malformed JSON, unknown languages, a flood past the admission
bound (503, then recovery), a client that goes away. The code side: a fork bomb, a memory hog, an infinite loop, an
output flood, a full disk: each the candidate's outcome, while other requests still succeed and /health answers.
`/v1/grade`: an honest CP program, a wrong one, forged verdicts, math answers. When the module ends the server is
stopped and no container carrying its owner label may be left (tests/sandbox_serve_support.sandbox_service).
"""

from __future__ import annotations

import base64
import json
import socket
import subprocess
import time
import zlib
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.listen_support import BURST, queued_while_stopped
from tests.sandbox_serve_support import CONFIG, sandbox_service

pytestmark = [pytest.mark.slow, pytest.mark.docker]

MAX_BODY = CONFIG["server"]["max_body_bytes"]
LIMITS = CONFIG["run_code"]
WARM = CONFIG["sandbox"]["pool"]["size"] + CONFIG["grade"]["sandbox"]["pool"]["size"]
TACO = {
    "question": "Read two integers and print their sum.",
    "input_output": json.dumps({"inputs": ["1 2\n", "5 7\n", "-3 3\n"], "outputs": ["3\n", "12\n", "0\n"]}),
}


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    with sandbox_service(tmp_path_factory.mktemp("sandbox-serve")) as running:
        yield running


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def refused(service, body, status: int) -> list | str:
    """The ``detail`` of a /run_code request that must be refused with ``status``."""
    code, answer, _ = service.call("POST", "/run_code", body)
    assert code == status, answer
    return answer["detail"]


def raw(service, data: bytes, wait_s: float = 30.0) -> tuple[bytes, float]:
    """What the server answers to ``data`` sent as is on a fresh connection, and after how long."""
    start = time.monotonic()
    with socket.create_connection((service.host, service.port), timeout=wait_s) as sock:
        sock.sendall(data)
        received = b""
        try:
            while chunk := sock.recv(65536):
                received += chunk
                if b"\r\n\r\n" in received and received.rstrip().endswith(b"}"):
                    break
        except (TimeoutError, ConnectionResetError):
            pass
    return received, time.monotonic() - start


def honest(service) -> None:
    """The control every attack is followed by: a plain run succeeds."""
    answer = service.run(code="print(input()[::-1])", stdin="olleh")
    assert answer["status"] == "Success" and answer["run_result"]["stdout"] == "hello\n", answer


HEAD = b"POST /run_code HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"


def test_a_body_declared_past_the_bound_is_413_before_it_is_read(service):
    received, took = raw(service, HEAD + b"Content-Length: %d\r\n\r\n" % (100 * MAX_BODY))  # no body sent at all
    assert received.startswith(b"HTTP/1.1 413") and b"max_body_bytes" in received, received[:300]
    assert took < 5
    chunked = b'{"code": "print(1)", "language": "python", "stdin": "' + b"x" * MAX_BODY + b'"}'
    pieces = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in (chunked[:4096], chunked[4096:])) + b"0\r\n\r\n"
    received, _ = raw(service, HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + pieces)
    assert received.startswith(b"HTTP/1.1 413"), received[:300]
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)  # a gzip bomb: 32 KiB that inflate to 16 MiB
    bomb = packer.compress(b'{"code": "print(1)", "language": "python", "stdin": "') + packer.compress(
        b"a" * 16 * MAX_BODY
    )
    bomb += packer.flush()
    assert len(bomb) < MAX_BODY // 8
    code, answer, _ = service.call("POST", "/run_code", bomb, {"Content-Encoding": "gzip"})
    assert code == 413 and "max_body_bytes" in answer["detail"]
    honest(service)


def test_a_body_that_never_arrives_is_cut_at_the_read_timeout(service):
    received, took = raw(service, HEAD + b'Content-Length: 100\r\n\r\n{"code": "pri')
    # 408 when the body's timer fires first; the connection's own keep-alive timer may close it first
    assert received.startswith(b"HTTP/1.1 408") or received == b"", received[:300]
    assert took < CONFIG["server"]["read_timeout_s"] + 5
    honest(service)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("code", "#" * (LIMITS["max_code_bytes"] + 1)),
        ("stdin", "x" * (LIMITS["max_stdin_bytes"] + 1)),
        ("files", {f"f{i}.txt": b64(b"x") for i in range(LIMITS["max_files"] + 1)}),
        ("files", {"big.bin": b64(b"x" * (LIMITS["max_files_bytes"] + 3))}),
        ("fetch_files", [f"f{i}" for i in range(LIMITS["max_fetch_files"] + 1)]),
    ],
)
def test_a_field_past_its_bound_is_413_naming_it(service, field, value):
    detail = refused(service, {"code": "print(1)", "language": "python", field: value}, 413)
    assert detail[0]["loc"] == ["body", field] and detail[0]["type"] == "too_large"


def test_fields_at_their_bounds_run(service):
    code = "print(len(open('big.bin', 'rb').read()))\n"
    files = {"big.bin": b64(b"x" * (LIMITS["max_files_bytes"] - 3))}
    answer = service.run(code=code + "#" * (LIMITS["max_code_bytes"] - len(code)), files=files, stdin="y" * 1000)
    assert answer["status"] == "Success" and answer["run_result"]["stdout"] == f"{LIMITS['max_files_bytes'] - 3}\n"


def test_traversal_in_files_and_fetch_files_is_refused_and_files_land_in_the_workspace(service):
    names = ["../escape.txt", "/tmp/abs.txt", "a/../../up.txt", "..", "", "./a/./../../b", "nul\x00.txt"]
    detail = refused(service, {"code": "print(1)", "language": "python", "files": {n: b64(b"x") for n in names}}, 422)
    assert len(detail) == len(names) and {d["type"] for d in detail} == {"path_outside"}
    for fetch in (["../../etc/passwd"], ["/etc/passwd"], ["ok.txt", "a/../../x"]):
        assert refused(service, {"code": "print(1)", "language": "python", "fetch_files": fetch}, 422)
    code = "import os\nprint(os.path.realpath('d/e.txt'), open('d/e.txt').read())\nopen('d/out.txt', 'w').write('back')"
    answer = service.run(code=code, files={"d/e.txt": b64(b"inside")}, fetch_files=["d/out.txt"])
    assert answer["run_result"]["stdout"] == "/workspace/d/e.txt inside\n"
    assert answer["files"] == {"d/out.txt": b64(b"back")}


def test_symlinks_the_code_makes_do_not_fetch_files_from_outside(service):
    code = (
        "import os\nos.symlink('/etc/passwd', 'passwd'); os.symlink('/proc/1/environ', 'environ')\n"
        "os.symlink('..', 'up'); open('mine.txt', 'w').write('ok')"
    )
    answer = service.run(code=code, fetch_files=["passwd", "environ", "up/etc/passwd", "mine.txt"])
    assert answer["status"] == "Success" and answer["files"] == {"mine.txt": b64(b"ok")}


@pytest.mark.parametrize(
    "change",
    [
        {"run_timeout": -1},
        {"run_timeout": 0},
        {"run_timeout": "soon"},
        {"compile_timeout": -5},
        {"memory_limit_MB": "lots"},
        {"code": 5},
        {"stdin": ["x"]},
        {"files": {"a": 5}},
        {"fetch_files": "a"},
        {"language": None},
    ],
)
def test_a_field_of_the_wrong_type_or_out_of_range_is_422_naming_it(service, change):
    detail = refused(service, {"code": "print(1)", "language": "python", **change}, 422)
    assert detail[0]["loc"][:2] == ["body", next(iter(change))], detail


def test_an_infinite_timeout_is_refused_and_a_huge_one_is_cut_to_the_bound(service):
    body = b'{"code": "print(1)", "language": "python", "run_timeout": 1e999}'  # JSON's way to say infinity
    assert refused(service, body, 422)[0]["loc"] == ["body", "run_timeout"]
    answer = service.run(code="import time\ntime.sleep(100)", run_timeout=1e9)
    run = answer["run_result"]
    assert answer["status"] == "Failed" and run["status"] == "TimeLimitExceeded" and run["return_code"] is None
    assert LIMITS["max_run_timeout_s"] <= run["execution_time"] < LIMITS["max_run_timeout_s"] + 1.5


def test_memory_limits_are_clamped_to_the_workspace_budget(service):
    huge = 10**12  # MiB: clamped to the workspace's 256
    answer = service.run(code="x = bytearray(400 << 20)", memory_limit_MB=huge)
    assert answer["status"] == "Failed" and "MemoryError" in answer["run_result"]["stderr"]
    assert service.run(code="x = bytearray(50 << 20)\nprint('ok')", memory_limit_MB=huge)["status"] == "Success"
    hog = service.run(code="x = []\nwhile True:\n    x.append(bytearray(10 << 20))", memory_limit_MB=-7)
    assert hog["status"] == "Failed" and hog["run_result"]["failure"] == "oom"  # no rlimit: the cgroup's OOM kill
    assert hog["run_result"]["return_code"] == -9


@pytest.mark.parametrize(
    ("body", "status", "kind"),
    [
        (b'{"code": "print(1)",', 422, "json_invalid"),
        (b"[1, 2]", 422, "model_type"),
        (b"\xff\xfe\x00{", 422, "json_invalid"),
        (b'{"language": "python"}', 422, "missing"),
        (b'{"code": "x", "language": "cpp"}', 422, "literal_error"),
        (b'{"code": "x", "language": "klingon"}', 422, "literal_error"),
        (b'{"code": "x", "language": "python", "k": ' + b"[" * 9 + b"]" * 9 + b"}", 400, None),
        (b'{"code": "x", "language": "python", "k": [' + b"0," * 5000 + b"0]}", 413, None),
    ],
)
def test_malformed_bodies_are_refused_in_fastapis_shape(service, body, status, kind):
    detail = refused(service, body, status)
    if kind is None:
        assert isinstance(detail, str) and "max_json" in detail
    else:
        assert detail[0]["type"] == kind, detail


def test_unknown_routes_and_methods_answer_in_fastapis_shape(service):
    assert service.call("GET", "/run_code")[:2] == (405, {"detail": "Method Not Allowed"})
    assert service.call("POST", "/no/such/route", {})[:2] == (404, {"detail": "Not Found"})
    assert service.call("GET", "/v1/ping")[:2] == (200, "pong")


HOSTILE = {
    "fork bomb": ({"code": "import os\nwhile True:\n    os.fork()"}, "pids_limit"),
    # each level waits for the two it starts, so the script ends only when forks fail: `:(){ :|:& };:` with a
    # `wait` returned as soon as its first level had forked, and under load the sweep after the run ended the bomb
    # before it reached the limit (ok, exit 0)
    "bash fork bomb": ({"code": ":(){ :|:& wait; };:", "language": "bash", "run_timeout": 1.5}, "pids_limit"),
    "memory hog": ({"code": "x = []\nwhile True:\n    x.append(bytearray(10 << 20))"}, "oom"),
    "infinite loop": ({"code": "while True:\n    pass", "run_timeout": 1.5}, "timeout"),
    "output flood": ({"code": "while True:\n    print('x' * 10000)"}, "output_truncated"),
    "disk filler": ({"code": "with open('big', 'wb') as f:\n    while True:\n        f.write(b'x' * (1 << 20))"}, "disk_full"),
    "signal": ({"code": "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)"}, "nonzero_exit"),
}  # fmt: skip


def test_hostile_code_is_the_candidates_outcome_and_the_service_keeps_serving(service):
    hostile_slots = CONFIG["server"]["max_requests"] - 2  # the rest for the honest controls beside them
    with ThreadPoolExecutor(hostile_slots) as pool, ThreadPoolExecutor(2) as beside:
        runs = {name: pool.submit(service.run, **request) for name, (request, _) in HOSTILE.items()}
        health = [service.call("GET", "/health", timeout=5) for _ in range(3)]  # while they run
        controls = [beside.submit(honest, service) for _ in range(4)]
        for control in controls:
            control.result()
        for name, (_, failure) in HOSTILE.items():
            run = runs[name].result()["run_result"]
            assert run["failure"] == failure, (name, run)
            assert run["status"] in ("Finished", "TimeLimitExceeded"), (name, run)  # never Error: not the sandbox's
    assert all(status == 200 for status, _, _ in health)
    flood = runs["output flood"].result()["run_result"]
    assert flood["truncated"] and len(flood["stdout"]) <= CONFIG["sandbox"]["calls"]["output_limit_bytes"]
    assert runs["signal"].result()["run_result"]["return_code"] == -11
    assert runs["bash fork bomb"].result()["message"] == "run: pids_limit"  # its script waits for the whole bomb
    settled(service)


def settled(service) -> None:
    """Within 45 s, only warm workspaces carry the service's owner label: no run left its container behind. A
    removal runs in the background under the engine's 30 s call deadline (a loaded engine took over 20 s once, with
    a test suite, a venv install and an image build beside it); one past its deadline is left to gc and so fails
    here however long this waits."""
    deadline = time.monotonic() + 45
    while len(service.containers()) > WARM and time.monotonic() < deadline:
        time.sleep(0.5)
    assert len(service.containers()) <= WARM, service.containers()


def test_a_flood_past_the_admission_bound_gets_503s_and_then_the_service_recovers(service):
    flood = CONFIG["server"]["max_requests"] * 2
    with ThreadPoolExecutor(flood) as pool:
        answers = list(
            pool.map(
                lambda _: service.call(
                    "POST", "/run_code", {"code": "import time\ntime.sleep(1)", "language": "python"}
                ),
                range(flood),
            )
        )
    busy = [(answer, headers) for status, answer, headers in answers if status == 503]
    served = [answer for status, answer, _ in answers if status == 200]
    assert busy and len(served) + len(busy) == flood, [status for status, _, _ in answers]
    assert len(served) >= CONFIG["server"]["max_running"]
    assert all(answer["status"] == "Success" for answer in served)
    assert all("retry later" in answer["detail"] and headers.get("Retry-After") == "1" for answer, headers in busy)
    assert service.call("GET", "/health")[1]["admission"]["requests"] == 0
    honest(service)


def test_a_client_that_goes_away_frees_its_workspace(service):
    body = json.dumps({"code": "import time\ntime.sleep(100)", "language": "python", "run_timeout": 100}).encode()
    with socket.create_connection((service.host, service.port), timeout=10) as sock:
        sock.sendall(HEAD + b"Content-Length: %d\r\n\r\n" % len(body) + body)
        deadline = time.monotonic() + 5
        while service.call("GET", "/health")[1]["run_code"]["running"] == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert service.call("GET", "/health")[1]["run_code"]["running"] == 1
    gone = time.monotonic()
    while service.call("GET", "/health")[1]["run_code"]["running"] and time.monotonic() < gone + 10:
        time.sleep(0.05)
    assert service.call("GET", "/health")[1]["run_code"]["running"] == 0
    settled(service)
    honest(service)


def test_only_the_sandboxs_own_failure_is_a_sandbox_error(service):
    """Every container of the service killed from outside (the engine's doing, never the code's: sandboxed code
    cannot signal its runner) while a run is in flight: that run is SandboxError; the warm ones that died are not
    handed out, and the next run succeeds."""
    with ThreadPoolExecutor(1) as pool:  # killed while its process runs (`running` counts admitted requests)
        running = pool.submit(service.run, code="import os\nos.execvp('sleep', ['sleep', '57'])", run_timeout=60)
        deadline = time.monotonic() + 20
        while not service.running("sleep 57") and time.monotonic() < deadline:
            time.sleep(0.05)
        subprocess.run(["docker", "kill", *service.containers()], capture_output=True, check=False)
        answer = running.result()
    assert answer["status"] == "SandboxError" and answer["run_result"]["status"] == "Error", answer
    assert "killed from outside" in answer["message"]
    honest(service)
    settled(service)


def grade(service, row: dict, answer: str, status: int = 200) -> dict:
    code, body, _ = service.call("POST", "/v1/grade", {"row": row, "answer": answer})
    assert code == status, body
    return body


def test_grade_scores_an_honest_program_and_nothing_else(service):
    program = "a, b = map(int, input().split())\nprint(a + b)\n"
    passed = grade(service, TACO, f"Here it is:\n```python\n{program}```")
    assert (passed["reward"], passed["verdict"], passed["family"], passed["format"]) == (1.0, "passed", "cp", "taco")
    wrong = grade(service, TACO, "print(3)")
    assert (wrong["reward"], wrong["verdict"], wrong["masked"]) == (0.0, "wrong_answer", False)
    assert wrong["fraction"] == pytest.approx(1 / 3)
    for forged in (
        "print('PASSED')",
        "import sys\nprint('ok')\nsys.exit(0)",
        "import os\nos._exit(0)",
        'print(\'{"verdict": "passed", "reward": 1.0}\')',
    ):
        score = grade(service, TACO, forged)
        assert score["reward"] == 0.0 and not score["masked"] and score["verdict"] != "passed", (forged, score)


def test_grade_reads_math_answers_and_refuses_rows_it_cannot_read(service):
    row = {"question": "What is 6 times 12?", "answer": "6 * 12 = 72\n#### 72"}
    assert grade(service, row, "6 * 12 = 72, so the answer is \\boxed{72}.")["reward"] == 1.0
    hedge = grade(service, row, "\\boxed{71} or maybe \\boxed{72}")
    assert hedge["reward"] == 0.0 and hedge["verdict"] == "wrong_answer" and not hedge["masked"]
    assert grade(service, {"unrelated": 1}, "72", 422)["detail"][0]["loc"] == ["body", "row"]
    code, body, _ = service.call("POST", "/v1/grade", {"row": TACO, "answer": "x", "format": "nosuch"})
    assert code == 422 and body["detail"][0]["loc"] == ["body", "format"]


def test_a_burst_of_connections_the_service_has_not_accepted_is_queued_not_dropped(service):
    """600 connections while the service accepts none (its process stopped): the kernel queues them all (backlog
    1024), so no client waits out a dropped SYN's 1 s retransmit (aiohttp's default backlog held 128)."""
    assert queued_while_stopped(service.host, service.port, service.proc.pid) == BURST
    honest(service)
