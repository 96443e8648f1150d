"""ignis_autograd.scaled_dot_product_attention as one fused primitive: gradcheck in float64,
agreement with PyTorch, the composite fallback, and decode_attention."""

from __future__ import annotations

import math

import numpy as np
import pytest
from ignis_autograd.attention import decode_attention, scaled_dot_product_attention
from ignis_autograd.gradcheck import gradcheck

import ignis
import ignis_autograd as ag


def _tensor(rng, shape, device, dtype="float64", grad=True):
    return ag.Tensor(
        ignis.asarray(rng.standard_normal(shape), dtype=dtype, device=device), requires_grad=grad
    )


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("lq,lk,e", [(1, 1, 4), (5, 7, 8), (7, 5, 6), (6, 6, 16)])
def test_gradcheck_fused_attention(device, causal, lq, lk, e):
    rng = np.random.default_rng(lq * 100 + lk)
    q, k, v = (_tensor(rng, (2, n, e), device) for n in (lq, lk, lk))
    out = scaled_dot_product_attention(q, k, v, causal=causal)
    assert out.grad_fn is not None and out.grad_fn.name == "scaled_dot_product_attention"
    assert gradcheck(
        lambda a, b, c: scaled_dot_product_attention(a, b, c, causal=causal, scale=0.7), (q, k, v)
    )


def test_gradcheck_only_some_inputs(device):
    rng = np.random.default_rng(4)
    q = _tensor(rng, (1, 2, 5, 8), device)
    k = _tensor(rng, (1, 2, 6, 8), device, grad=False)
    v = _tensor(rng, (1, 2, 6, 8), device)
    assert gradcheck(lambda a, c: scaled_dot_product_attention(a, k, c, causal=True), (q, v))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("causal", [False, True])
def test_matches_torch(device, dtype, causal):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(9)
    shapes = [(2, 3, 13, 32), (2, 3, 21, 32), (2, 3, 21, 32)]
    hosts = [rng.standard_normal(s) for s in shapes]
    ts = [torch.tensor(h, requires_grad=True) for h in hosts]
    mask = torch.ones(13, 21, dtype=torch.bool).tril(21 - 13) if causal else None
    want = torch.nn.functional.scaled_dot_product_attention(*ts, attn_mask=mask)
    gh = rng.standard_normal(want.shape)
    want.backward(torch.tensor(gh))
    xs = [
        ag.Tensor(ignis.asarray(h, dtype=dtype, device=device), requires_grad=True) for h in hosts
    ]
    out = scaled_dot_product_attention(*xs, causal=causal)
    out.backward(ag.Tensor(ignis.asarray(gh, dtype=dtype, device=device)))
    tol = 3e-5 if dtype == "float32" else 3e-2
    np.testing.assert_allclose(
        np.asarray(out.data.to_host(), np.float64), want.detach().numpy(), atol=tol, rtol=tol
    )
    for x, t in zip(xs, ts, strict=True):
        np.testing.assert_allclose(
            np.asarray(x.grad.to_host(), np.float64), t.grad.numpy(), atol=tol * 4, rtol=tol * 4
        )


def test_composite_fallback_for_large_or_mixed_head_dims(device):
    rng = np.random.default_rng(6)
    # Ev != E and E > 128 are not fused: the composite still gives the right values.
    q, k = _tensor(rng, (1, 3, 4), device), _tensor(rng, (1, 5, 4), device)
    v = _tensor(rng, (1, 5, 6), device)
    out = scaled_dot_product_attention(q, k, v, causal=True)
    assert out.shape == (1, 3, 6) and out.grad_fn.name != "scaled_dot_product_attention"
    assert gradcheck(lambda a, b, c: scaled_dot_product_attention(a, b, c, causal=True), (q, k, v))
    big = [_tensor(rng, (1, 3, 130), device, grad=False) for _ in range(3)]
    got = scaled_dot_product_attention(*big).data.to_host()
    qh, kh, vh = (b.data.to_host() for b in big)
    s = qh @ kh.transpose(0, 2, 1) / math.sqrt(130)
    p = np.exp(s - s.max(-1, keepdims=True))
    np.testing.assert_allclose(got, (p / p.sum(-1, keepdims=True)) @ vh, atol=1e-12)


def test_plain_arrays_and_no_grad(device):
    rng = np.random.default_rng(8)
    arrays = [ignis.asarray(rng.standard_normal((2, 4, 8)), device=device) for _ in range(3)]
    out = scaled_dot_product_attention(*arrays)
    assert out.grad_fn is None and out.shape == (2, 4, 8)
    q = ag.Tensor(arrays[0], requires_grad=True)
    scaled_dot_product_attention(q, arrays[1], arrays[2], causal=True).sum().backward()
    assert q.grad is not None and np.abs(q.grad.to_host()).max() > 0


def test_decode_attention_has_no_graph(device):
    rng = np.random.default_rng(10)
    q = _tensor(rng, (1, 2, 1, 16), device)
    kc = _tensor(rng, (1, 2, 9, 16), device)
    vc = _tensor(rng, (1, 2, 9, 16), device)
    got = decode_attention(q, kc, vc, cache_len=6)
    assert got.grad_fn is None and got.shape == (1, 2, 1, 16)
    want = scaled_dot_product_attention(q.data, kc.data[:, :, :6], vc.data[:, :, :6])
    np.testing.assert_allclose(got.data.to_host(), want.data.to_host(), atol=1e-12)
