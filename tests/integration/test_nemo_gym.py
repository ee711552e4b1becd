"""NeMo-Gym's own resources-server classes grade through `gym sandbox-serve` (issue 44): nemo-gym 0.4.0, installed
from the package registry into a cached venv of Python 3.12 (it needs >= 3.12; this project runs on 3.11), builds
`gym/integrations/nemo_gym.py` as NeMo-Gym's tests build a server (its config, a mocked ServerClient,
``setup_webserver()``) and POSTs ``/verify`` through the real FastAPI app; the adapter calls a real service, which
grades in its own containers and leaves none behind. The driver runs from a temporary directory with no PYTHONPATH:
the adapter works with nemo_gym alone, as it must inside NeMo-Gym."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.install_support import ROOT, cached_foreign_venv
from tests.sandbox_serve_support import sandbox_service

NEMO_GYM = "0.4.0"
ADAPTER = ROOT / "gym" / "integrations" / "nemo_gym.py"


def newer_python() -> Path | None:
    """A Python >= 3.12: ``NEMO_GYM_PYTHON``, else python3.12/3.13 on PATH, else one pyenv installed."""
    named = os.environ.get("NEMO_GYM_PYTHON")
    candidates = [Path(named)] if named else []
    candidates += [Path(d) / f"python3.{minor}" for minor in (12, 13) for d in os.get_exec_path()]
    candidates += sorted((Path.home() / ".pyenv" / "versions").glob("3.1[23].*/bin/python3"))
    for python in candidates:
        probe = subprocess.run(
            [str(python), "-c", "import sys; assert sys.version_info >= (3, 12)"], capture_output=True, check=False
        ) if python.is_file() else None  # fmt: skip
        if probe is not None and probe.returncode == 0:  # a pyenv shim of a version not selected exits 127
            return python
    return None


# The driver, run by the venv's python: each case is one POST /verify; its JSON summary is the last line printed.
DRIVER = r"""
import importlib.util, json, socket, sys, time
from unittest.mock import MagicMock

from fastapi.testclient import TestClient
from nemo_gym import __version__
from nemo_gym.base_resources_server import BaseVerifyResponse
from nemo_gym.openai_utils import NeMoGymResponse, NeMoGymResponseOutputMessage, NeMoGymResponseOutputText
from nemo_gym.server_utils import ServerClient

adapter, url = sys.argv[1], sys.argv[2]
spec = importlib.util.spec_from_file_location("code_rl_gym_app", adapter)  # as NeMo-Gym runs a server's app.py
app_module = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = app_module
spec.loader.exec_module(app_module)


def client(**config):
    settings = app_module.GymGradeConfig(host="127.0.0.1", port=0, entrypoint="app.py", name="code_rl_gym", **config)
    server = app_module.GymGradeResourcesServer(config=settings, server_client=MagicMock(spec=ServerClient))
    return TestClient(server.setup_webserver())


def response(text):
    return NeMoGymResponse(
        id="resp", created_at=0.0, model="policy", object="response", parallel_tool_calls=False, tool_choice="none",
        tools=[], output=[NeMoGymResponseOutputMessage(id="msg", role="assistant", status="completed", type="message",
        content=[NeMoGymResponseOutputText(annotations=[], text=text, type="output_text")])],
    ).model_dump(mode="json")


def math_row(question, gold):  # math_with_judge's rows
    return {"responses_create_params": {"input": [{"role": "user", "content": question}]},
            "question": question, "expected_answer": gold}


def code_row(inputs, outputs):  # code_gen's rows (Nemotron-RL competitive coding)
    statement = "Read two integers on one line and print their sum."
    return {"responses_create_params": {"input": [{"role": "user", "content": [{"type": "input_text", "text": statement}]}]},
            "verifier_metadata": {"unit_tests": {"inputs": inputs, "outputs": outputs}}, "hash_id": "sum-two"}


SUM = "```python\nprint(sum(map(int, input().split())))\n```"
DIFF = "```python\na, b = map(int, input().split())\nprint(a - b)\n```"
TESTS = (["1 2\n", "5 7\n"], ["3\n", "12\n"])
CASES = {
    "math_right": (math_row("What is 6 times 7?", "42"), "6 * 7 = 42, so the answer is \\boxed{42}."),
    "math_wrong": (math_row("What is 6 times 7?", "42"), "The answer is \\boxed{41}."),
    "math_hedge": (math_row("What is 6 times 7?", "42"), "Either \\boxed{42} or \\boxed{41}."),
    "code_right": (code_row(*TESTS), "Here it is:\n" + SUM),
    "code_wrong": (code_row(*TESTS), DIFF),
    "row_malformed": (code_row(["1 2\n", "5 7\n"], ["3\n"]), SUM),
    "row_unknown": ({"responses_create_params": {"input": "Add."}, "colour": "blue"}, SUM),
    "answer_too_large": (code_row(*TESTS), SUM + "\n#" + "x" * (1 << 20)),
}


def verify(http, row, text):
    started = time.monotonic()
    answered = http.post("/verify", json={**row, "response": response(text)})
    took = round(time.monotonic() - started, 2)
    if answered.status_code != 200:
        return {"status": answered.status_code, "detail": answered.json().get("detail"), "s": took}
    body = answered.json()
    BaseVerifyResponse.model_validate(body)  # what NeMo-Gym's agents read
    keep = ("reward", "verdict", "reason", "masked", "passed", "fraction", "task_id", "family", "row_format", "error")
    return {"status": 200, **{key: body.get(key) for key in keep}, "echoed": sorted(set(row) & set(body)), "s": took}


out = {"nemo_gym": __version__, "cases": {}}
with client(sandbox_serve_url=url) as http:
    for name, (row, text) in CASES.items():
        out["cases"][name] = verify(http, row, text)
silent = socket.create_server(("127.0.0.1", 0))  # accepts (the kernel's backlog) and never answers
closed = socket.create_server(("127.0.0.1", 0))
closed_port = closed.getsockname()[1]
closed.close()
right = CASES["math_right"]
with client(sandbox_serve_url=f"http://127.0.0.1:{silent.getsockname()[1]}", timeout_s=1.5) as http:
    out["cases"]["service_silent"] = verify(http, *right)
with client(sandbox_serve_url=f"http://127.0.0.1:{closed_port}") as http:
    out["cases"]["service_down"] = verify(http, *right)
with client(sandbox_serve_url=f"http://127.0.0.1:{closed_port}", on_infra_error="fail") as http:
    out["cases"]["service_down_fail"] = verify(http, *right)
with client(sandbox_serve_url=url.rstrip("/") + "/nowhere") as http:
    out["cases"]["wrong_url"] = verify(http, *right)
silent.close()

# A stand-in service for what the real one does only under load or when it breaks: the first path segment of the
# URL the adapter is given picks the reply (the adapter appends /v1/grade).
import http.server, threading
calls = {}


class Stub(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        kind = self.path.split("/")[1]
        calls[kind] = calls.get(kind, 0) + 1
        status, body, headers = {
            "busy": (503, b'{"error": "full"}', {"Retry-After": "0"}),
            "broken": (500, b"Internal Server Error", {}),
            "garbage": (200, b"<html>not a grade</html>", {}),
            "huge": (200, b'{"reward": 1.0, "pad": "' + b"x" * (2 << 20) + b'"}', {}),
            "masked": (200, json.dumps({"task_id": "t", "format": "math", "family": "math", "reward": None,
                                        "masked": True, "passed": False, "fraction": 0.0, "verdict": "infra_error",
                                        "reason": "the sandbox failed"}).encode(), {}),
        }[kind]
        self.send_response(status)
        for key, value in {"Content-Type": "application/json", "Content-Length": str(len(body)), **headers}.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


stub = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Stub)
threading.Thread(target=stub.serve_forever, daemon=True).start()
base = f"http://127.0.0.1:{stub.server_address[1]}"
for kind in ("busy", "broken", "garbage", "huge", "masked"):
    with client(sandbox_serve_url=f"{base}/{kind}", busy_retries=2, max_reply_bytes=1 << 20) as http_client:
        out["cases"][f"stub_{kind}"] = verify(http_client, *right)
out["stub_calls"] = calls
stub.shutdown()
print(json.dumps(out))
"""


@pytest.mark.slow
def test_the_adapter_imports_nothing_of_the_project():
    """It runs in NeMo-Gym's venv: the standard library, nemo_gym and what nemo_gym brings, nothing else."""
    tree = ast.parse(ADAPTER.read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    roots = {name.split(".")[0] for name in imported}
    assert roots - set(sys.stdlib_module_names) == {"nemo_gym", "fastapi", "pydantic"}, roots
    assert "nemo_gym" in roots  # the check can fail: it sees the imports


@pytest.mark.slow
@pytest.mark.docker
def test_nemo_gym_verify_grades_through_sandbox_serve(tmp_path):
    interpreter = newer_python()
    if interpreter is None:
        pytest.skip("no Python >= 3.12 here (nemo-gym needs one): set NEMO_GYM_PYTHON")
    python = cached_foreign_venv(interpreter, f"nemo-gym-{NEMO_GYM}", (f"nemo-gym=={NEMO_GYM}",))
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    (tmp_path / "service").mkdir()
    with sandbox_service(tmp_path / "service") as service:
        proc = subprocess.run(
            [str(python), str(driver), str(ADAPTER), service.url],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    cases = out["cases"]
    assert out["nemo_gym"] == NEMO_GYM

    def seen(name: str, *keys: str) -> tuple:
        return tuple(cases[name][key] for key in keys)

    graded = ("status", "reward", "masked", "error")
    assert seen("math_right", *graded, "verdict", "family") == (200, 1.0, False, None, "passed", "math")
    assert cases["math_right"]["row_format"] == "math"
    assert seen("math_wrong", *graded, "passed") == (200, 0.0, False, None, False)
    assert seen("math_hedge", *graded, "passed") == (200, 0.0, False, None, False)
    assert cases["math_right"]["echoed"] == ["expected_answer", "question", "responses_create_params"]
    assert seen("code_right", *graded, "verdict", "fraction", "family", "row_format", "task_id") == (
        200, 1.0, False, None, "passed", 1.0, "cp", "nemotron", "sum-two",
    )  # fmt: skip
    assert seen("code_wrong", *graded, "verdict", "fraction") == (200, 0.0, False, None, "wrong_answer", 0.0)
    # the sample's fault: 0.0 with the service's reason, never a traceback
    assert seen("row_malformed", *graded, "verdict") == (200, 0.0, False, "bad_row", "bad_row")
    assert "422" in cases["row_malformed"]["reason"] and "2 inputs but 1 outputs" in cases["row_malformed"]["reason"]
    assert seen("row_unknown", *graded) == (200, 0.0, False, "bad_row")
    assert "matches no known format" in cases["row_unknown"]["reason"]
    assert seen("answer_too_large", *graded) == (200, 0.0, False, "too_large")
    assert cases["answer_too_large"]["reason"].startswith("413")
    # the service's or the network's: masked, classified
    assert seen("service_silent", *graded) == (200, 0.0, True, "timeout")
    assert 1.4 < cases["service_silent"]["s"] < 10
    assert seen("service_down", *graded) == (200, 0.0, True, "unreachable")
    assert "ConnectionRefusedError" in cases["service_down"]["reason"]
    assert cases["service_down_fail"]["status"] == 503 and "unreachable" in cases["service_down_fail"]["detail"]
    assert seen("wrong_url", *graded) == (200, 0.0, True, "refused")
    assert cases["wrong_url"]["reason"].startswith("404")
    # a full service is retried after its Retry-After, then busy; a broken one, a reply that is no grade or is too
    # long, and a grade the service itself masked: all masked, none a traceback
    assert seen("stub_busy", *graded) == (200, 0.0, True, "busy") and out["stub_calls"]["busy"] == 3
    assert seen("stub_broken", *graded) == (200, 0.0, True, "service_error")
    assert seen("stub_garbage", *graded) == (200, 0.0, True, "bad_reply")
    assert seen("stub_huge", *graded) == (200, 0.0, True, "bad_reply")
    assert seen("stub_masked", "status", "reward", "masked") == (200, 0.0, True)
