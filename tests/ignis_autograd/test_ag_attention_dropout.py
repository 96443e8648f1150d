"""scaled_dot_product_attention / packed_attention / CausalSelfAttention with dropout inside the
fused kernels: gradcheck with a fixed stream, the reference mask, the training switch."""

from __future__ import annotations

import numpy as np
import pytest
from ignis._array._attention_dropout import AttentionDropout, keep_mask
from ignis_autograd.attention import packed_attention, scaled_dot_product_attention
from ignis_autograd.gradcheck import gradcheck

import ignis
import ignis_autograd as ag


def _tensor(rng, shape, device, dtype="float64", grad=True):
    return ag.Tensor(
        ignis.asarray(rng.standard_normal(shape), dtype=dtype, device=device), requires_grad=grad
    )


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("lq,lk", [(5, 7), (6, 6), (7, 3)])
def test_gradcheck_with_a_fixed_stream(device, causal, lq, lk):
    rng = np.random.default_rng(lq * 10 + lk)
    q, k, v = (_tensor(rng, (2, 2, n, 8), device) for n in (lq, lk, lk))

    def fn(a, b, c):  # every evaluation draws the same mask: the stream is explicit
        return scaled_dot_product_attention(
            a, b, c, causal=causal, scale=0.6, dropout_p=0.3, seed=17, offset=40
        )

    out = fn(q, k, v)
    assert out.grad_fn is not None
    assert out.grad_fn.name == "scaled_dot_product_attention_dropout"
    assert gradcheck(fn, (q, k, v))


def test_output_equals_the_explicit_mask(device):
    rng = np.random.default_rng(4)
    q, k, v = (_tensor(rng, (1, 3, n, 8), device) for n in (9, 11, 11))
    out = scaled_dot_product_attention(q, k, v, dropout_p=0.5, seed=2, offset=0)
    keep = keep_mask(AttentionDropout(0.5, 2, 0), (1, 3, 9, 11))
    qh, kh, vh = (np.asarray(t.data) for t in (q, k, v))
    s = qh @ kh.swapaxes(-1, -2) / np.sqrt(8)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    np.testing.assert_allclose(np.asarray(out.data), (p * keep * 2.0) @ vh, rtol=1e-10)


def test_composite_path_uses_the_same_mask(device):
    # Ev != E takes the composite; its explicit mask is the kernels' mask
    rng = np.random.default_rng(6)
    q, k = (_tensor(rng, (1, 2, n, 8), device) for n in (5, 6))
    v = _tensor(rng, (1, 2, 6, 8), device)
    v_wide = _tensor(rng, (1, 2, 6, 4), device)
    fused = scaled_dot_product_attention(q, k, v, dropout_p=0.4, seed=3, offset=8)
    comp = scaled_dot_product_attention(q, k, v_wide, dropout_p=0.4, seed=3, offset=8)
    keep = keep_mask(AttentionDropout(0.4, 3, 8), (1, 2, 5, 6))
    qh, kh = np.asarray(q.data), np.asarray(k.data)
    s = qh @ kh.swapaxes(-1, -2) / np.sqrt(8)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    z = p * keep / 0.6
    np.testing.assert_allclose(np.asarray(fused.data), z @ np.asarray(v.data), rtol=1e-10)
    np.testing.assert_allclose(np.asarray(comp.data), z @ np.asarray(v_wide.data), rtol=1e-10)
    assert gradcheck(
        lambda a, b, c: scaled_dot_product_attention(a, b, c, dropout_p=0.4, seed=3, offset=8),
        (q, k, v_wide),
    )


def test_packed_attention_gradcheck(device):
    rng = np.random.default_rng(9)
    qkv = _tensor(rng, (2, 5, 3 * 8), device)

    def fn(x):
        return packed_attention(x, 2, causal=True, dropout_p=0.25, seed=1, offset=3)

    assert fn(qkv).grad_fn.name == "packed_attention_dropout"
    assert gradcheck(fn, (qkv,))


def test_p_zero_is_the_plain_op_and_bad_p_is_named(device):
    rng = np.random.default_rng(1)
    q, k, v = (_tensor(rng, (1, 1, 4, 8), device) for _ in range(3))
    out = scaled_dot_product_attention(q, k, v, dropout_p=0.0)
    assert out.grad_fn.name == "scaled_dot_product_attention"
    with pytest.raises(ValueError, match=r"scaled_dot_product_attention: dropout_p must be in"):
        scaled_dot_product_attention(q, k, v, dropout_p=1.5)
    with pytest.raises(TypeError, match="scaled_dot_product_attention: dropout_p must be a float"):
        scaled_dot_product_attention(q, k, v, dropout_p=None)


def test_generator_stream_advances_between_calls(device):
    rng = np.random.default_rng(2)
    q, k, v = (_tensor(rng, (1, 2, 6, 8), device) for _ in range(3))
    gen = ignis.random.Generator(5)
    a = scaled_dot_product_attention(q, k, v, dropout_p=0.5, generator=gen)
    b = scaled_dot_product_attention(q, k, v, dropout_p=0.5, generator=gen)
    assert gen.offset == 2 * (1 * 2 * 3 * 3)  # two calls of B H ceil(L/2) ceil(S/2) blocks
    assert not np.array_equal(np.asarray(a.data), np.asarray(b.data))
    again = scaled_dot_product_attention(q, k, v, dropout_p=0.5, seed=5, offset=0)
    np.testing.assert_array_equal(np.asarray(a.data), np.asarray(again.data))


def test_causal_self_attention_drops_inside_the_fused_op(device):
    from ignis_autograd import nn

    ignis.random.seed(0)
    layer = nn.CausalSelfAttention(16, n_heads=2, dropout=0.5, device=device, dtype="float64")
    x = _tensor(np.random.default_rng(0), (2, 6, 16), device)
    layer.train()
    y1, y2 = layer(x), layer(x)
    assert not np.allclose(np.asarray(y1.data), np.asarray(y2.data))  # new masks each call
    y1.sum().backward()
    assert x.grad is not None and np.isfinite(np.asarray(x.grad)).all()
    layer.eval()
    e1, e2 = layer(x), layer(x)
    np.testing.assert_array_equal(np.asarray(e1.data), np.asarray(e2.data))


def test_causal_self_attention_training_gradient_is_the_masked_one(device):
    # one layer's attention with the fused dropout against the same mask built explicitly
    from ignis_autograd import nn

    layer = nn.CausalSelfAttention(
        8, n_heads=2, dropout=0.3, bias=False, device=device, dtype="float64"
    )
    layer.train()
    x = _tensor(np.random.default_rng(3), (1, 5, 8), device)
    state = ignis.random.get_state()
    y = layer(x)
    ignis.random.set_state(state)
    drop = AttentionDropout(0.3, state[0], state[1])
    keep = keep_mask(drop, (1, 2, 5, 5))
    w_qkv, w_p = np.asarray(layer.qkv.weight.data), np.asarray(layer.proj.weight.data)
    xh = np.asarray(x.data)
    qkv = (xh @ w_qkv.T).reshape(1, 5, 3, 2, 4).transpose(2, 0, 3, 1, 4)
    s = qkv[0] @ qkv[1].swapaxes(-1, -2) / 2.0
    s = np.where(np.tril(np.ones((5, 5), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    att = ((p * keep / 0.7) @ qkv[2]).transpose(0, 2, 1, 3).reshape(1, 5, 8)
    # (the residual dropout after proj drew later from the same generator: compare before it)
    pre = att @ w_p.T
    got = np.asarray(y.data)
    kept = got != 0
    np.testing.assert_allclose(got[kept], (pre / 0.7)[kept], rtol=1e-10)


def _bits(a) -> np.ndarray:
    return np.ascontiguousarray(a.to_host()).view(np.uint32)


@pytest.mark.gpu
def test_captured_steps_with_attention_dropout_equal_eager_steps_bit_for_bit():
    # A CausalSelfAttention layer with dropout (inside the fused kernels, and on its output):
    # one eager warm-up step and 8 captured steps against the same 9 steps run eagerly from the
    # same generator state. float32: its two-pass backward is deterministic, so losses and
    # weights agree bit for bit; the generator ends where the eager steps left it, so each
    # replay drew new masks.
    from ignis_autograd.nn import CausalSelfAttention
    from ignis_autograd.optim import AdamW

    from ignis_autograd import capture_step

    device = "cuda:0"
    rng = np.random.default_rng(2)
    batches = [
        ignis.asarray(rng.standard_normal((2, 40, 32)).astype(np.float32), device=device)
        for _ in range(9)
    ]

    def make():
        ignis.random.set_state((7, 0))  # the same initial weights
        model = CausalSelfAttention(32, 4, dropout=0.3, device=device)
        opt = AdamW(list(model.parameters()), lr=1e-2)

        def step(x):
            opt.zero_grad()
            loss = (model(ag.Tensor(x)) ** 2).mean()
            loss.backward()
            opt.step()
            return loss.detach()

        return model, step

    eager_model, eager = make()
    ignis.random.set_state((99, 3))
    eager_losses = [_bits(eager(x)).copy() for x in batches]
    eager_state = ignis.random.get_state()

    graph_model, train_step = make()
    ignis.random.set_state((99, 3))
    step = capture_step(train_step, batches[0], warmup=1)
    np.testing.assert_array_equal(_bits(step.warmup_outputs[0]), eager_losses[0])
    graph_losses = [_bits(step(x)).copy() for x in batches[1:]]
    assert ignis.random.get_state() == eager_state
    np.testing.assert_array_equal(np.stack(graph_losses), np.stack(eager_losses[1:]))
    for pe, pg in zip(eager_model.parameters(), graph_model.parameters(), strict=True):
        np.testing.assert_array_equal(_bits(pg.data), _bits(pe.data))
