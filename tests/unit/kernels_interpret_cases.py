"""Every Triton kernel, run by Triton's CPU interpreter, against the torch reference (values and gradients).

Not collected by itself: ``test_kernels_triton.py`` runs this file in a child pytest with
``TRITON_INTERPRET=1`` set before Triton is imported (Triton reads the flag once, at import).

Shapes are small and deliberately not multiples of the 16-wide interpreter tiles; routing has K > 1,
ragged expert sizes and empty experts (first, middle and last). Tolerances are relative to the largest
magnitude of the expected tensor (``_assert_close``) and carry the measured error.
"""

from __future__ import annotations

import os

import pytest
import torch

if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("run by test_kernels_triton.py in a child process with TRITON_INTERPRET=1", allow_module_level=True)
pytest.importorskip("triton", reason="triton is not installed: the interpreter tests need it")

from kernels import grouped_swiglu, moe_permute, moe_unpermute, token_logprob_entropy  # noqa: E402


def _assert_close(actual: torch.Tensor, expected: torch.Tensor, tol: float, what: str) -> None:
    """max |actual - expected| <= tol * max |expected|."""
    scale = expected.double().abs().max().clamp_min(1e-30)
    err = ((actual.double() - expected.double()).abs().max() / scale).item()
    assert err <= tol, f"{what}: relative max error {err:.2e} > {tol:.0e}"


def _run_logprob(backend, hidden, weight, targets, g_lp, g_ent, temperature, chunk_size):
    hidden = hidden.detach().requires_grad_()
    weight = weight.detach().requires_grad_()
    logprob, entropy = token_logprob_entropy(hidden, weight, targets, temperature, chunk_size, backend=backend)
    (logprob * g_lp + entropy * g_ent).sum().backward()
    return logprob.detach(), entropy.detach(), hidden.grad, weight.grad


@pytest.mark.parametrize("scale", [1.0, 30.0])  # 30: peaked softmax, logits far from 0
def test_logprob_entropy_kernels(scale):
    torch.manual_seed(0)
    n, v, h = 37, 100, 40  # 3 row blocks, a ragged last vocab tile, 4 vocab slices in the forward
    hidden = torch.randn(n, h) * scale / h**0.5
    weight = torch.randn(v, h)
    targets = torch.randint(0, v, (n,))
    targets[:3] = torch.tensor([0, v - 1, v - 2])  # first and last vocabulary entries
    args = (hidden, weight, targets, torch.randn(n), torch.randn(n), 0.7, 32)  # backward chunks 32+32+32+4
    got = _run_logprob("triton", *args)
    want = _run_logprob("reference", *args)
    assert got[0].dtype == got[1].dtype == torch.float32
    # Measured worst relative errors (both scales): logprob 1.5e-7, entropy 1.6e-5 (at scale 30 the
    # entropy is small), grad hidden 3.1e-6, grad weight 5.4e-6. Tolerance 1e-4: 6x margin or more.
    for a, b, what in zip(got, want, ("logprob", "entropy", "grad hidden", "grad weight")):
        _assert_close(a, b, 1e-4, what)


def test_logprob_entropy_single_split_and_tiny_vocab():
    torch.manual_seed(1)
    hidden, weight = torch.randn(5, 16), torch.randn(3, 16)  # V smaller than one tile
    targets = torch.tensor([0, 1, 2, 2, 0])
    args = (hidden, weight, targets, torch.ones(5), torch.zeros(5), 1.0, 4096)
    for a, b, what in zip(
        _run_logprob("triton", *args),
        _run_logprob("reference", *args),
        ("logprob", "entropy", "grad hidden", "grad weight"),
    ):
        # Measured worst relative error 2.3e-7; same 1e-4 bound.
        _assert_close(a, b, 1e-4, what)


def _route(tokens: int, top_k: int, experts: int, empty: list[int], seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    allowed = torch.tensor([e for e in range(experts) if e not in empty])
    # Distinct experts per token, as top-k gives, from a skewed distribution: ragged segment sizes.
    weights = torch.linspace(1.0, 4.0, allowed.numel())
    picks = torch.stack([torch.multinomial(weights, top_k, generator=gen) for _ in range(tokens)])
    return allowed[picks]


ROUTES = [  # (T, K, E, empty experts)
    (29, 3, 6, [0, 5]),  # first and last expert empty
    (13, 2, 5, [2]),  # a middle expert empty
    (7, 1, 3, []),  # K = 1
    (40, 2, 4, [0, 1]),  # two experts share everything: segments longer than two tiles
]


@pytest.mark.parametrize(("tokens", "top_k", "experts", "empty"), ROUTES)
def test_permute_and_unpermute_kernels(tokens, top_k, experts, empty):
    torch.manual_seed(2)
    idx = _route(tokens, top_k, experts, empty, seed=tokens)
    x = torch.randn(tokens, 20)  # H = 20: a full and a ragged 16-wide column block
    gate = torch.rand(tokens, top_k)
    y = torch.randn(tokens * top_k, 20)
    grad_out = torch.randn(tokens, 20)
    results = {}
    for backend in ("triton", "reference"):
        xb, yb, gb = (t.clone().requires_grad_() for t in (x, y, gate))
        permuted, row_map, counts = moe_permute(xb, idx, experts, backend=backend)
        permuted.backward(torch.arange(permuted.numel(), dtype=torch.float32).view_as(permuted))
        out = moe_unpermute(yb, row_map, gb, tokens, backend=backend)
        out.backward(grad_out)
        results[backend] = (permuted.detach(), row_map, counts, out.detach(), xb.grad, yb.grad, gb.grad)
    got, want = results["triton"], results["reference"]
    # Layout: the permuted rows, the index map, the counts and grad y (gate * grad_out, one product) are exact.
    for i in (0, 1, 2, 5):
        assert torch.equal(got[i], want[i])
    assert all(got[2][e] == 0 for e in empty)
    # Sums over K (unpermute, grad x) and grad gate (a dot over H): fp32, possibly in another order.
    # Measured worst relative error: 0 for the sums, 2.3e-7 for grad gate; tolerance 1e-5 (40x).
    for i, what in ((3, "unpermute"), (4, "grad x"), (6, "grad gate")):
        _assert_close(got[i], want[i], 1e-5, what)


@pytest.mark.parametrize(("tokens", "top_k", "experts", "empty"), ROUTES[:2] + ROUTES[3:])
def test_grouped_swiglu_kernels(tokens, top_k, experts, empty):
    torch.manual_seed(3)
    h, f = 24, 40  # neither a multiple of 16
    idx = _route(tokens, top_k, experts, empty, seed=tokens + 1)
    _, _, counts = moe_permute(torch.zeros(tokens, 1), idx, experts, backend="reference")
    x = torch.randn(tokens * top_k, h)
    w_gate, w_up = torch.randn(experts, f, h) / h**0.5, torch.randn(experts, f, h) / h**0.5
    w_down = torch.randn(experts, h, f) / f**0.5
    grad_out = torch.randn(tokens * top_k, h)
    results = {}
    for backend in ("triton", "reference"):
        leaves = [t.clone().requires_grad_() for t in (x, w_gate, w_up, w_down)]
        out = grouped_swiglu(leaves[0], counts, *leaves[1:], backend=backend)
        out.backward(grad_out)
        results[backend] = [out.detach()] + [t.grad for t in leaves]
    # Measured worst relative errors: output 3.2e-7, grads 3.1e-7; tolerance 1e-5 (30x margin).
    for a, b, what in zip(results["triton"], results["reference"], ("out", "dx", "dw_gate", "dw_up", "dw_down")):
        _assert_close(a, b, 1e-5, what)
    for e in empty:  # an empty expert's weights get exactly zero gradient
        for grad in results["triton"][2:]:
            assert torch.count_nonzero(grad[e]) == 0


def test_grouped_swiglu_kernel_is_not_the_reference_by_accident():
    """The comparison above can fail: a wrong segment split changes the Triton output."""
    torch.manual_seed(4)
    x = torch.randn(10, 16)
    weights = (torch.randn(2, 16, 16), torch.randn(2, 16, 16), torch.randn(2, 16, 16))
    right = grouped_swiglu(x, torch.tensor([4, 6]), *weights, backend="triton")
    wrong = grouped_swiglu(x, torch.tensor([5, 5]), *weights, backend="triton")
    assert not torch.allclose(right, wrong)
    _assert_close(right, grouped_swiglu(x, torch.tensor([4, 6]), *weights, backend="reference"), 1e-5, "out")
