"""The sandbox service's guards and config without a server or Docker: the JSON shape counted in raw bytes, the
admission budget, the config's fit checks, and how a /v1/grade row becomes a task."""

from __future__ import annotations

import json

import pytest

from gym.service.admission import Admission, Refused, check_shape
from gym.service.app import SandboxServeConfig, SandboxServeConfigError
from gym.service.grade_request import BadRow, GradeRequest, task_of
from tasks.math.problem import MathTask
from tasks.task import Task


def test_values_and_nesting_are_counted_outside_strings():
    honest = json.dumps({"code": "a, b = [1, 2], {3: [4]}\n" * 5000, "stdin": '",[{' * 1000}).encode()
    check_shape(honest, max_values=100, max_depth=3)  # ~60,000 commas and brackets, all inside strings
    many = b'{"code": "x", "junk": [' + b",".join([b"[]"] * 200) + b"]}"
    with pytest.raises(Refused) as caught:
        check_shape(many, max_values=100, max_depth=8)
    assert caught.value.status == 413
    deep = b'{"a": ' + b"[" * 9 + b"]" * 9 + b"}"
    with pytest.raises(Refused) as caught:
        check_shape(deep, max_values=100, max_depth=8)
    assert caught.value.status == 400
    check_shape(b'{"a": ' + b"[" * 7 + b"]" * 7 + b"}", max_values=100, max_depth=8)


def test_escaped_quotes_do_not_end_a_string():
    body = json.dumps({"code": 'print("\\",[[[[")' * 100}).encode()
    check_shape(body, max_values=10, max_depth=2)


def test_admission_refuses_past_either_total_and_gives_back_on_exit():
    admission = Admission(max_requests=2, total_bytes=100)
    with admission.enter(60, "a"), admission.enter(30, "b"):
        with pytest.raises(Refused) as caught, admission.enter(1, "c"):
            pass
        assert caught.value.status == 503 and "requests in flight" in str(caught.value)
    with admission.enter(60, "a"):
        with pytest.raises(Refused, match="max_inflight_memory_bytes"), admission.enter(41, "b"):
            pass
    assert admission.counts() == {"requests": 0, "reserved_mib": 0, "refused_busy": 2}


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"run_code": {"max_files_bytes": 64 << 20}, "sandbox": {"budgets": {"workspace_mb": 32}}}, "workspace_mb"),
        ({"run_code": {"max_fetch_files": 63}}, "max_calls"),
        ({"run_code": {"max_run_timeout_s": 600}}, "wall_s"),
        ({"server": {"max_running": 0}}, "max_running"),
        ({"server": {"max_body_bytes": 1 << 30, "max_inflight_memory_bytes": 1 << 30}}, "could never be admitted"),
        ({"server": {"unknown": 1}}, "unknown"),
        ({"swe": {"max_request_s": 100, "grader": {"test_timeout_s": 90}}}, "swe.max_request_s"),
        ({"swe": {"max_patch_bytes": 1 << 30}}, "max_patch_bytes"),
        ({"swe": {"max_predictions": 0}}, "max_predictions"),
    ],
)
def test_a_config_whose_limits_cannot_hold_is_refused(tmp_path, data, field):
    path = tmp_path / "serve.yaml"
    path.write_text(json.dumps(data))
    with pytest.raises(SandboxServeConfigError, match=field):
        SandboxServeConfig.load(path)


def test_the_shipped_config_loads():
    config = SandboxServeConfig.load("configs/sandbox_serve.yaml")
    assert config.server.host == "127.0.0.1" and config.sandbox.budgets.memory_mb == 1024


def test_a_grade_row_is_read_in_its_format():
    cp = {"question": "add", "input_output": json.dumps({"inputs": ["1 2\n"], "outputs": ["3\n"]})}
    task, name = task_of(GradeRequest(row=cp, answer="print(3)"))
    assert isinstance(task, Task) and name == "taco" and task.tests[0].output == "3\n"
    task, name = task_of(GradeRequest(row={"question": "6*12?", "answer": "#### 72"}, answer="72"))
    assert isinstance(task, MathTask) and task.gold == "72" and name == "math"
    with pytest.raises(BadRow, match="no known format"):
        task_of(GradeRequest(row={"foo": 1}, answer="x"))
    with pytest.raises(BadRow, match="taco row"):
        task_of(GradeRequest(row={"question": "q", "input_output": "{not json"}, format="taco", answer="x"))
