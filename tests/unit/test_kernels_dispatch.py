"""The one dispatch point: what runs where, and every way to override it."""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

import kernels
from kernels import backend as dispatch

CPU, CUDA = torch.device("cpu"), torch.device("cuda")


@pytest.fixture(autouse=True)
def _no_env_override(monkeypatch):
    monkeypatch.delenv(dispatch.ENV_VAR, raising=False)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)


def test_auto_picks_reference_on_cpu_and_triton_on_cuda(monkeypatch):
    assert dispatch.resolve(None, CPU) == "reference"
    monkeypatch.setattr(dispatch, "triton_available", lambda: True)
    assert dispatch.resolve(None, CUDA) == "triton"  # the device is only inspected, never touched
    monkeypatch.setattr(dispatch, "triton_available", lambda: False)
    assert dispatch.resolve(None, CUDA) == "reference"


def test_precedence_argument_then_context_then_env(monkeypatch):
    monkeypatch.setattr(dispatch, "triton_available", lambda: True)
    monkeypatch.setenv(dispatch.ENV_VAR, "reference")
    assert dispatch.resolve(None, CUDA) == "reference"
    with kernels.use_backend("triton"):
        assert dispatch.resolve(None, CUDA) == "triton"
        assert dispatch.resolve("reference", CUDA) == "reference"
        with kernels.use_backend("auto"):
            assert dispatch.requested() == "auto"
        assert dispatch.requested() == "triton"
    assert dispatch.requested() == "reference"


def test_triton_on_cpu_needs_the_interpreter(monkeypatch):
    monkeypatch.setattr(dispatch, "triton_available", lambda: True)
    with pytest.raises(kernels.KernelBackendError, match="TRITON_INTERPRET=1"):
        dispatch.resolve("triton", CPU)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert dispatch.resolve("triton", CPU) == "triton"


def test_bad_names_are_refused(monkeypatch):
    with pytest.raises(kernels.KernelBackendError, match="backend='cuda'"):
        dispatch.resolve("cuda", CPU)
    monkeypatch.setenv(dispatch.ENV_VAR, "fast")
    with pytest.raises(kernels.KernelBackendError, match="GYM_KERNELS='fast'"):
        dispatch.resolve(None, CPU)
    with pytest.raises(kernels.KernelBackendError):
        with kernels.use_backend("nope"):  # type: ignore[arg-type]
            pass


def _recording_module(calls: list[str]) -> types.ModuleType:
    """Stands in for every ``*_triton`` module and records which entry point a public call reached."""
    fake = types.ModuleType("fake_triton_kernels")

    def record(name, result):
        def entry(*args, **kwargs):
            calls.append(name)
            return result(*args)

        return entry

    fake.permute = record("permute", lambda x, row_map, k: x[row_map // k])
    fake.unpermute = record("unpermute", lambda y, row_map, gate: y[: gate.shape[0]])
    fake.grouped_swiglu = record("grouped_swiglu", lambda x, *rest: x)
    fake.stats = record("stats", lambda h, w, t, temp, c: (h[:, 0], h[:, 0] + 1, h[:, 0]))
    return fake


def test_public_calls_route_through_the_dispatch(monkeypatch):
    calls: list[str] = []
    loaded: list[str] = []
    monkeypatch.setattr(dispatch, "triton_available", lambda: True)
    monkeypatch.setattr(dispatch, "triton_module", lambda name: loaded.append(name) or _recording_module(calls))
    x, idx = torch.randn(3, 4), torch.tensor([[0], [1], [0]])
    w = (torch.randn(2, 5, 4), torch.randn(2, 5, 4), torch.randn(2, 4, 5))

    def everything(backend=None):
        permuted, row_map, counts = kernels.moe_permute(x, idx, 2, backend=backend)
        y = kernels.grouped_swiglu(permuted, counts, *w, backend=backend)
        kernels.moe_unpermute(y, row_map, torch.ones(3, 1), 3, backend=backend)
        kernels.token_logprob_entropy(x, torch.randn(7, 4), torch.zeros(3, dtype=torch.int64), backend=backend)

    everything()  # CPU + auto: the reference, no Triton module is even imported
    assert loaded == [] and calls == []
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    everything("triton")
    assert calls == ["permute", "grouped_swiglu", "unpermute", "stats"]
    assert loaded == ["permute_triton", "swiglu_triton", "permute_triton", "logprob_triton"]
    calls.clear()
    monkeypatch.setenv(dispatch.ENV_VAR, "triton")
    everything()
    assert calls == ["permute", "grouped_swiglu", "unpermute", "stats"]


def test_importing_the_package_imports_neither_triton_nor_a_kernel():
    code = "import sys, kernels; bad = [m for m in sys.modules if m == 'triton' or m.endswith('_triton')]; print(bad)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert out.stdout.strip() == "[]"
