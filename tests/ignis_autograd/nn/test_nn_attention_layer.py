"""CausalSelfAttention (against PyTorch), RotaryEmbedding, and the KV-cache path."""

from __future__ import annotations

import ignis.nn
import numpy as np
import pytest
from nn_torch_helpers import (
    TorchAttention,
    assert_close,
    load_torch,
    needs_torch,
    randn,
    rope_ref,
    torch,
    tt,
)

import ignis
import ignis_autograd as ag
from ignis import ShapeError
from ignis_autograd import nn


@needs_torch
@pytest.mark.parametrize("rope", [False, True])
@pytest.mark.parametrize("shape,heads", [((2, 5, 16), 4), ((1, 33, 8), 1), ((3, 1, 12), 3)])
def test_attention_matches_torch(device, rope, shape, heads):
    dim = shape[-1]
    attn = nn.CausalSelfAttention(dim, heads, rope=rope, device=device, dtype="float64")
    tattn = TorchAttention(dim, heads, rope=rope)
    load_torch(tattn, attn)
    x = randn(shape, device=device, requires_grad=True)
    tx = tt(x).requires_grad_(True)
    y, ty = attn(x), tattn(tx)
    assert_close(y, ty, 1e-9)
    g = np.random.default_rng(3).standard_normal(shape)
    y.backward(ag.Tensor.from_host(g, dtype="float64", device=device))
    ty.backward(torch.from_numpy(g))
    assert_close(x.grad, tx.grad, 1e-9)
    tparams = dict(tattn.named_parameters())
    for name, p in attn.named_parameters():
        assert_close(p.grad, tparams[name].grad, 1e-9)


@needs_torch
def test_attention_float32(device):
    attn = nn.CausalSelfAttention(64, 4, device=device)
    tattn = TorchAttention(64, 4)
    load_torch(tattn, attn)
    x = randn((2, 40, 64), dtype="float32", device=device)
    assert_close(attn(x), tattn(tt(x)), 1e-4)


def test_attention_without_bias():
    attn = nn.CausalSelfAttention(8, 2, bias=False)
    assert [n for n, _ in attn.named_parameters()] == ["qkv.weight", "proj.weight"]


def test_attention_bad_input():
    attn = nn.CausalSelfAttention(8, 2)
    with pytest.raises(ShapeError, match=r"CausalSelfAttention: input of shape \(4, 8\)"):
        attn(randn((4, 8), dtype="float32"))
    with pytest.raises(ShapeError, match=r"not \(batch, T, dim=8\)"):
        attn(randn((1, 4, 6), dtype="float32"))
    with pytest.raises(ValueError, match="dim 10 is not divisible by n_heads 4"):
        nn.CausalSelfAttention(10, 4)
    with pytest.raises(ValueError, match="dropout probability"):
        nn.CausalSelfAttention(8, 2, dropout=-0.1)


def test_attention_dropout_only_in_training(device):
    ignis.random.seed(0)
    attn = nn.CausalSelfAttention(16, 2, dropout=0.5, device=device, dtype="float64")
    clean = nn.CausalSelfAttention(16, 2, device=device, dtype="float64")
    clean.load_state_dict(attn.state_dict())
    x = randn((2, 9, 16), device=device, requires_grad=True)
    attn.eval()
    np.testing.assert_allclose(attn(x).to_host(), clean(x).to_host(), rtol=1e-12, atol=1e-14)
    attn.train()
    y = attn(x)
    assert not np.allclose(y.to_host(), clean(x).to_host())
    y.sum().backward()
    assert np.abs(x.grad.to_host()).sum() > 0 and attn.qkv.weight.grad is not None


@needs_torch
def test_rotary_matches_formula(device):
    rope = nn.RotaryEmbedding(6)
    x = randn((2, 3, 7, 6), device=device, requires_grad=True)
    tx = tt(x).requires_grad_(True)
    y, ty = rope(x, start=5), rope_ref(tx, 5)
    assert_close(y, ty, 1e-6)
    g = np.random.default_rng(1).standard_normal(y.shape)
    y.backward(ag.Tensor.from_host(g, dtype="float64", device=device))
    ty.backward(torch.from_numpy(g))
    assert_close(x.grad, tx.grad, 1e-6)


def test_rotary_errors():
    with pytest.raises(ValueError, match="head_dim must be even, got 5"):
        nn.RotaryEmbedding(5)
    with pytest.raises(ShapeError, match="RotaryEmbedding: input of shape"):
        nn.RotaryEmbedding(4)(randn((2, 3, 6)))


def _incremental(attn, x, chunks):
    """Outputs of ``attn`` fed ``x`` in consecutive chunks of the given lengths via a cache."""
    cache = attn.new_cache(x.shape[0], sum(chunks) + 3)
    outs, start = [], 0
    for n in chunks:
        outs.append(attn(x[:, start : start + n], kv_cache=cache).to_host())
        start += n
    assert cache.length == start
    return np.concatenate(outs, axis=1)


@pytest.mark.parametrize("rope", [False, True])
def test_kv_cache_equals_full_forward(device, rope):
    attn = nn.CausalSelfAttention(16, 4, rope=rope, device=device, dtype="float64")
    attn.eval()
    x = randn((2, 9, 16), device=device)
    full = attn(x).to_host()
    for chunks in ([9], [4, 1, 1, 3], [1] * 9):
        np.testing.assert_allclose(_incremental(attn, x, chunks), full, rtol=1e-9, atol=1e-11)
        with ag.no_grad():
            got = _incremental(attn, x, chunks)
        np.testing.assert_allclose(got, full, rtol=1e-9, atol=1e-11)


def test_kv_cache_float32_decode_steps(device):
    attn = nn.CausalSelfAttention(64, 4, device=device)
    attn.eval()
    x = randn((3, 33, 64), dtype="float32", device=device)
    full = attn(x).to_host()
    with ag.no_grad():  # the single-position steps take ignis.nn.decode_attention
        got = _incremental(attn, x, [30, 1, 1, 1])
    np.testing.assert_allclose(got, full, rtol=1e-4, atol=1e-5)


def test_decode_uses_fused_kernel_when_present(monkeypatch):
    calls = []

    def fake(q, k_cache, v_cache, cache_len):
        calls.append((q.shape, k_cache.shape, cache_len))
        # reference: softmax(q k^T / sqrt(E)) v over the first cache_len positions, in NumPy
        qh, kh, vh = (
            q.to_host(),
            k_cache.to_host()[:, :, :cache_len],
            v_cache.to_host()[:, :, :cache_len],
        )
        s = qh @ np.swapaxes(kh, -1, -2) / np.sqrt(qh.shape[-1])
        p = np.exp(s - s.max(-1, keepdims=True))
        out = (p / p.sum(-1, keepdims=True)) @ vh
        return ignis.asarray(out)

    monkeypatch.setattr(ignis.nn, "decode_attention", fake, raising=False)
    attn = nn.CausalSelfAttention(8, 2, dtype="float64")
    attn.eval()
    x = randn((2, 5, 8))
    full = attn(x).to_host()
    # while gradients are recorded the differentiable composite runs
    np.testing.assert_allclose(_incremental(attn, x, [3, 1, 1]), full, rtol=1e-10, atol=1e-12)
    assert calls == []
    with ag.no_grad():
        got = _incremental(attn, x, [3, 1, 1])
    np.testing.assert_allclose(got, full, rtol=1e-10, atol=1e-12)
    assert calls == [((2, 2, 1, 4), (2, 2, 8, 4), 4), ((2, 2, 1, 4), (2, 2, 8, 4), 5)]


def test_kv_cache_object_and_errors():
    attn = nn.CausalSelfAttention(8, 2)
    cache = attn.new_cache(batch=2, max_len=4)
    assert cache.shape == (2, 2, 4, 4) and cache.length == 0 and cache.max_len == 4
    assert "length=0" in repr(cache)
    attn(randn((2, 3, 8), dtype="float32"), kv_cache=cache)
    assert cache.keys().shape == (2, 2, 3, 4) and cache.values().shape == (2, 2, 3, 4)
    with pytest.raises(ValueError, match=r"KVCache.append: 2 new position\(s\) after 3 exceed"):
        attn(randn((2, 2, 8), dtype="float32"), kv_cache=cache)
    cache.reset()
    assert cache.length == 0
    with pytest.raises(ShapeError, match="does not fit batch 1"):
        attn(randn((1, 2, 8), dtype="float32"), kv_cache=cache)
    with pytest.raises(ShapeError, match=r"KVCache.append: k has shape \(2, 2, 1, 3\)"):
        cache.append(ignis.zeros((2, 2, 1, 3)), ignis.zeros((2, 2, 1, 3)))
    with pytest.raises(ValueError, match="KVCache: max_len must be a positive int"):
        nn.KVCache(1, 1, 0, 4)
