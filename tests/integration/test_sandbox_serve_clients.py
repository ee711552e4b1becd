"""Real clients drive `gym sandbox-serve` (issue 44 item 1), each installed from the package registry into a cached
venv of its own (tests/install_support.cached_venv), never into the project's dependencies:

* SandboxFusion's official client, ``sandbox-fusion`` 0.3.7 (tests/sandbox_fusion_driver.py): ``run_code`` and
  ``run_code_async`` for stdout, stdin, a deadline (TimeLimitExceeded), a non-zero exit, files in and back, bash;
  its ``summary_run_code_result`` reads each; traversal and a language this image lacks reach it as refusals.
* verl 0.9.1's sandbox-fusion reward path (tests/verl_sandbox_driver.py): ``load_reward_manager`` with
  ``reward.sandbox_fusion.url``, its reward loop's naive manager over a batch of token ids, and
  ``check_correctness`` for its per-case codes.
"""

from __future__ import annotations

import pytest

from tests.install_support import cached_venv, driven
from tests.sandbox_serve_support import CONFIG, sandbox_service
from tests.tokenizer_support import train_tokenizer

pytestmark = [pytest.mark.slow, pytest.mark.docker]

CLIENT = "0.3.7"
VERL = "0.9.1"


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    # verl retries a 504 only: a 503 (the service full) would score its test case as failed, so the service admits
    # more requests than verl's reward.sandbox_fusion.max_concurrent (8 here) sends at once
    config = {**CONFIG, "server": {**CONFIG["server"], "max_requests": 16}}
    with sandbox_service(tmp_path_factory.mktemp("sandbox-serve"), config) as running:
        yield running


def test_the_official_sandbox_fusion_client_runs_code(service):
    python = cached_venv(f"sandbox-fusion-{CLIENT}", (f"sandbox-fusion=={CLIENT}",))
    out = driven(python, "tests.sandbox_fusion_driver", service.url)
    assert out["client"] == CLIENT
    assert out["stdout"] | {"execution_time": 0} == {
        "status": "Success",
        "run_status": "Finished",
        "return_code": 0,
        "stdout": "hello\n",
        "execution_time": 0,
        "files": {},
        "summary": "pass",
    }
    assert out["stdin"]["stdout"] == "cba\n" and out["stdin"]["summary"] == "pass"
    timeout = out["timeout"]
    assert (timeout["status"], timeout["run_status"], timeout["return_code"]) == ("Failed", "TimeLimitExceeded", None)
    assert timeout["summary"] == "timeout" and 1.0 <= timeout["execution_time"] < 2.0
    assert out["exit"] | {"execution_time": 0} == {
        "status": "Failed",
        "run_status": "Finished",
        "return_code": 3,
        "stdout": "partial\n",
        "execution_time": 0,
        "files": {},
        "summary": "crash",
    }
    assert out["files"]["stdout"] == "21\n" and out["files"]["files"] == {"out.txt": "42"}  # not-written.txt: absent
    assert (out["bash"]["stdout"], out["bash"]["return_code"]) == ("got 7\n", 4)
    assert out["async"] == {"status": "Success", "stdout": "6\n"}
    assert "422" in out["traversal"] and "path_outside" in out["traversal"]
    assert "422" in out["absolute"] and "fetch_files" in out["absolute"]
    assert "422" in out["language"] and "literal_error" in out["language"]


def test_verls_sandbox_fusion_reward_calls_run_code(service, tmp_path):
    python = cached_venv(
        f"verl-{VERL}",
        ("--no-deps", f"verl=={VERL}"),
        ("tensordict>=0.8.0,<=0.10.0,!=0.9.0", "codetiming", "omegaconf"),
    )
    tokenizer = train_tokenizer(tmp_path / "tokenizer.json")
    out = driven(python, "tests.verl_sandbox_driver", service.url, str(tokenizer))
    assert out["verl"] == VERL and out["manager"] == "NaiveRewardManager"
    # honest, one case of two, time out (verl's 10 s cut to the service's 2 s), crash, no code block, call wrapper
    assert out["scores"] == [1.0, 0.5, 0.0, 0.0, 0.0, 1.0]
    assert out["cases"] == {
        "honest": {"codes": [True, True], "status": ["success", "success"]},
        "wrong": {"codes": [True, False], "status": ["success", "wrong_answer"]},
        "timeout": {"codes": [-3, -3], "status": ["timeout", "timeout"]},
        "crash": {"codes": [-2, -2], "status": ["runtime_error", "runtime_error"]},
    }
