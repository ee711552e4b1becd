"""The soak's call mix: deterministic under a seed, every kind reachable, expectations that can fail."""

from __future__ import annotations

from sandbox.failure import FailureKind
from sandbox.protocol import ExecResult
from sandbox.soak import EXEC_KINDS, WEIGHTS, Call, Expect, Mix, SoakReport, exec_plan, mismatch, payload


def _plan(seed: int, worker: int, n: int = 400) -> list[Call]:
    mix = Mix(seed, worker)
    return [mix.draw() for _ in range(n)]


def _lifetimes(seed: int, worker: int) -> list[int]:
    mix = Mix(seed, worker)
    return [mix.lifetime(64) for _ in range(20)]


def test_same_seed_same_calls_other_seed_or_worker_other_calls():
    assert _plan(7, 0) == _plan(7, 0)
    assert _plan(7, 0) != _plan(8, 0)
    assert _plan(7, 0) != _plan(7, 1)
    assert _lifetimes(3, 2) == _lifetimes(3, 2) != _lifetimes(4, 2)


def test_every_kind_is_drawn_and_lifetimes_fit_the_episode_budget():
    calls = _plan(0, 0, 2000)
    assert {call.kind for call in calls} == set(WEIGHTS)
    assert all(2 <= len(call.items) <= 5 for call in calls if call.kind == "batch")
    mix = Mix(0, 0)
    assert all(4 <= mix.lifetime(64) <= 60 for _ in range(500))
    assert {mix.lifetime(3) for _ in range(50)} == {1}


def test_payload_is_determined_by_the_call():
    call = Call("stdin_large", size=3 * 1024 * 1024 + 5, salt=11)
    assert payload(call) == payload(call) and len(payload(call)) == call.size
    assert payload(call) != payload(Call("stdin_large", size=call.size, salt=12))
    assert payload(Call("true")) == b""


def test_every_exec_kind_has_a_plan_with_a_benign_expectation():
    for call in _plan(1, 0, 1000):
        for item in (call, *call.items):
            if item.kind in EXEC_KINDS:
                request, expect = exec_plan(item)
                assert expect.failure in {
                    FailureKind.OK,
                    FailureKind.NONZERO_EXIT,
                    FailureKind.TIMEOUT,
                    FailureKind.OUTPUT_TRUNCATED,
                }
                assert request.argv


def test_mismatch_names_what_differs():
    expect = Expect(FailureKind.OK, 0, b"42\n")
    assert mismatch(expect, ExecResult(exit_code=0, stdout=b"42\n")) is None
    assert "failure infra_error" in mismatch(expect, ExecResult(failure=FailureKind.INFRA_ERROR))
    assert "exit code 1" in mismatch(expect, ExecResult(exit_code=1))
    assert "stdout" in mismatch(expect, ExecResult(exit_code=0, stdout=b"41\n"))
    assert "lacks" in mismatch(
        Expect(FailureKind.NONZERO_EXIT, 1, stderr_has=b"SyntaxError"),
        ExecResult(exit_code=1, failure=FailureKind.NONZERO_EXIT, stderr=b"NameError"),
    )


def test_exit_code_is_nonzero_on_infra_errors_deaths_or_leaks_only():
    assert SoakReport(calls=10, unexpected=1).exit_code == 0
    assert SoakReport(infra_errors=1).exit_code == 1
    assert SoakReport(runner_deaths=1).exit_code == 1
    assert SoakReport(leaked_containers=1).exit_code == 1
