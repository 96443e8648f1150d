"""ignis.nn.attention / attention_backward / decode_attention against an independent NumPy
float64 reference and PyTorch, on every device (the CUDA kernels where a GPU exists)."""

from __future__ import annotations

import math

import ignis.nn
import ml_dtypes
import numpy as np
import pytest
import tc_emulator
from ignis._array._cuda_backend import attention as cuda_attention

import ignis
from ignis import DeviceMismatchError, DTypeError, ShapeError, _sources

TOL = {"float64": 1e-10, "float32": 3e-5, "float16": 4e-3, "bfloat16": 2.5e-2}
NP_DTYPE = {
    "float64": np.float64,
    "float32": np.float32,
    "float16": np.float16,
    "bfloat16": ml_dtypes.bfloat16,
}


# --- reference -----------------------------------------------------------------------------------


def ref_attention(q, k, v, causal, scale, grad=None):
    """float64 attention written out row by row (independent of the library's CPU code):
    (out, lse) and, with ``grad``, (dq, dk, dv) by the textbook softmax Jacobian."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    *lead, n_q, e = q.shape
    n_k = k.shape[-2]
    out = np.zeros(q.shape)
    lse = np.full(q.shape[:-1], -np.inf)
    dq, dk, dv = np.zeros(q.shape), np.zeros(k.shape), np.zeros(v.shape)
    for idx in np.ndindex(*lead):
        for i in range(n_q):
            last = i + n_k - n_q if causal else n_k - 1
            if last < 0:
                continue  # no visible key
            keys = slice(0, last + 1)
            s = k[idx][keys] @ q[idx][i] * scale
            m = s.max()
            w = np.exp(s - m)
            p = w / w.sum()
            out[idx][i] = p @ v[idx][keys]
            lse[idx][i] = m + math.log(w.sum())
            if grad is not None:
                g = np.asarray(grad, np.float64)[idx][i]
                dp = v[idx][keys] @ g
                ds = p * (dp - p @ dp) * scale
                dv[idx][keys] += np.outer(p, g)
                dq[idx][i] += ds @ k[idx][keys]
                dk[idx][keys] += np.outer(ds, q[idx][i])
    return out, lse, (dq, dk, dv)


def rounded(x, dtype):
    """x rounded to ``dtype`` and back to float64: what the device sees."""
    return np.asarray(x).astype(NP_DTYPE[dtype]).astype(np.float64)


def make(rng, shape, dtype, device):
    host = rounded(rng.standard_normal(shape), dtype)
    return host, ignis.asarray(host.astype(NP_DTYPE[dtype]), device=device)


def host(a):
    return np.asarray(a.to_host()).astype(np.float64)


def assert_close(got, want, dtype, what):
    tol = TOL[dtype] * max(1.0, float(np.max(np.abs(want), initial=0.0)))
    finite = np.isfinite(want)
    assert np.array_equal(np.isfinite(got), finite), f"{what}: Inf/NaN pattern differs"
    err = float(np.max(np.abs(got[finite] - want[finite]), initial=0.0))
    assert err <= tol, f"{what}: max error {err:.3g} > {tol:.3g}"


# --- forward and backward ------------------------------------------------------------------------

SHAPES = [  # (B, H, L, S, E)
    (1, 1, 1, 1, 32),
    (2, 3, 17, 17, 64),
    (1, 2, 129, 129, 32),
    (1, 1, 1, 33, 64),
    (1, 2, 31, 100, 80),
    (2, 1, 100, 31, 128),
    (1, 1, 65, 130, 33),
]


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16", "float16"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_attention_matches_reference(device, dtype, causal, shape):
    b, h, n_q, n_k, e = shape
    rng = np.random.default_rng(hash((shape, causal)) % 2**32)
    qh, q = make(rng, (b, h, n_q, e), dtype, device)
    kh, k = make(rng, (b, h, n_k, e), dtype, device)
    vh, v = make(rng, (b, h, n_k, e), dtype, device)
    gh, g = make(rng, (b, h, n_q, e), dtype, device)
    scale = 1.0 / math.sqrt(e)
    want_out, want_lse, grads = ref_attention(qh, kh, vh, causal, scale, grad=gh)

    out, lse = ignis.nn.attention(q, k, v, causal=causal)
    assert out.shape == q.shape and out.dtype == q.dtype and out.device == q.device
    assert lse.shape == (b, h, n_q)
    assert lse.dtype.name == ("float64" if dtype == "float64" else "float32")
    assert_close(host(out), want_out, dtype, "out")
    assert_close(host(lse), want_lse, "float32" if dtype == "float64" else dtype, "lse")

    dq, dk, dv = ignis.nn.attention_backward(g, q, k, v, out, lse, causal=causal)
    for name, got, want in zip(("dq", "dk", "dv"), (dq, dk, dv), grads, strict=True):
        assert got.dtype == q.dtype
        assert_close(host(got), want, dtype, name)


@pytest.mark.parametrize("causal", [False, True])
def test_attention_agrees_with_torch(device, causal):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(7)
    shape_q, shape_k = (2, 2, 23, 64), (2, 2, 41, 64)
    qh, kh, vh = (
        rng.standard_normal(shape_q),
        rng.standard_normal(shape_k),
        rng.standard_normal(shape_k),
    )
    gh = rng.standard_normal(shape_q)
    tq, tk, tv = (torch.tensor(x, requires_grad=True) for x in (qh, kh, vh))
    mask = torch.ones(23, 41, dtype=torch.bool).tril(41 - 23) if causal else None
    tout = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, attn_mask=mask, scale=0.3)
    tout.backward(torch.tensor(gh))
    q, k, v, g = (ignis.asarray(x, dtype="float32", device=device) for x in (qh, kh, vh, gh))
    out, lse = ignis.nn.attention(q, k, v, causal=causal, scale=0.3)
    dq, dk, dv = ignis.nn.attention_backward(g, q, k, v, out, lse, causal=causal, scale=0.3)
    np.testing.assert_allclose(host(out), tout.detach().numpy(), atol=2e-5, rtol=1e-4)
    for got, want in ((dq, tq.grad), (dk, tk.grad), (dv, tv.grad)):
        np.testing.assert_allclose(host(got), want.numpy(), atol=5e-5, rtol=1e-4)


def test_causal_rows_without_keys_are_zero(device):
    # L > S: queries i < L - S see no key (mask aligned to the end).
    rng = np.random.default_rng(3)
    qh, q = make(rng, (1, 2, 9, 32), "float32", device)
    kh, k = make(rng, (1, 2, 4, 32), "float32", device)
    vh, v = make(rng, (1, 2, 4, 32), "float32", device)
    out, lse = ignis.nn.attention(q, k, v, causal=True)
    o, l_ = host(out), host(lse)
    assert np.all(o[:, :, :5] == 0) and np.all(np.isneginf(l_[:, :, :5]))
    assert np.all(np.isfinite(l_[:, :, 5:])) and np.abs(o[:, :, 5:]).max() > 0
    g = ignis.asarray(rng.standard_normal((1, 2, 9, 32)), dtype="float32", device=device)
    dq, dk, dv = ignis.nn.attention_backward(g, q, k, v, out, lse, causal=True)
    assert np.all(np.isfinite(host(dq))) and np.all(host(dq)[:, :, :5] == 0)
    want = ref_attention(qh, kh, vh, True, 1 / math.sqrt(32), grad=host(g))[2]
    for got, w in zip((dq, dk, dv), want, strict=True):
        assert_close(host(got), w, "float32", "grad")


def test_non_contiguous_and_unaligned_inputs(device):
    rng = np.random.default_rng(5)
    # (B, L, H, E) storage viewed as (B, H, L, E): strided inputs are made contiguous.
    base = ignis.asarray(rng.standard_normal((2, 19, 3, 64)), dtype="bfloat16", device=device)
    q = base.transpose(0, 2, 1, 3)
    assert not q.is_contiguous
    # A contiguous view one element into its buffer: not 16-byte aligned.
    flat = ignis.asarray(rng.standard_normal(1 + 2 * 3 * 19 * 64), dtype="bfloat16", device=device)
    k = flat[1:].reshape(2, 3, 19, 64)
    v = ignis.asarray(rng.standard_normal((2, 3, 19, 64)), dtype="bfloat16", device=device)
    out, lse = ignis.nn.attention(q, k, v, causal=True)
    want, want_lse, _ = ref_attention(host(q), host(k), host(v), True, 1 / 8)
    assert_close(host(out), want, "bfloat16", "out")
    g = ignis.asarray(rng.standard_normal((2, 3, 19, 64)), dtype="bfloat16", device=device)
    dq, dk, dv = ignis.nn.attention_backward(g, q, k, v, out, lse, causal=True)
    grads = ref_attention(host(q), host(k), host(v), True, 1 / 8, grad=host(g))[2]
    for got, w in zip((dq, dk, dv), grads, strict=True):
        assert_close(host(got), w, "bfloat16", "grad")


def test_empty_inputs(device):
    z = ignis.zeros((2, 3, 0, 32), device=device)
    k = ignis.ones((2, 3, 5, 32), device=device)
    out, lse = ignis.nn.attention(z, k, k)
    assert out.shape == (2, 3, 0, 32) and lse.shape == (2, 3, 0)
    q = ignis.ones((2, 3, 4, 32), device=device)
    none = ignis.zeros((2, 3, 0, 32), device=device)
    out, lse = ignis.nn.attention(q, none, none)
    assert np.all(host(out) == 0) and np.all(np.isneginf(host(lse)))
    dq, dk, dv = ignis.nn.attention_backward(q, q, none, none, out, lse)
    assert np.all(host(dq) == 0) and dk.shape == (2, 3, 0, 32)
    out, lse = ignis.nn.attention(
        ignis.zeros((0, 3, 4, 32), device=device),
        ignis.zeros((0, 3, 5, 32), device=device),
        ignis.zeros((0, 3, 5, 32), device=device),
    )
    assert out.shape == (0, 3, 4, 32)


def test_extreme_scores_stay_finite(device):
    # Large logits: the online softmax must not overflow; -inf-free output for finite input.
    rng = np.random.default_rng(11)
    qh = rng.standard_normal((1, 1, 70, 32)) * 30
    kh = rng.standard_normal((1, 1, 70, 32)) * 30
    vh = rng.standard_normal((1, 1, 70, 32))
    q, k, v = (ignis.asarray(x, dtype="float32", device=device) for x in (qh, kh, vh))
    out, lse = ignis.nn.attention(q, k, v, causal=True)
    want, want_lse, _ = ref_attention(
        qh.astype(np.float32), kh.astype(np.float32), vh.astype(np.float32), True, 1 / math.sqrt(32)
    )
    # Logits near 1000: float32 rounding of the scores alone moves p by ~1e-3 relative.
    np.testing.assert_allclose(host(out), want, atol=5e-3)
    np.testing.assert_allclose(host(lse), want_lse, rtol=1e-5)
    assert np.all(np.isfinite(host(out)))


def test_nan_input_propagates(device):
    q = ignis.asarray(np.full((1, 1, 3, 32), np.nan), dtype="float32", device=device)
    k = ignis.ones((1, 1, 3, 32), device=device)
    out, _ = ignis.nn.attention(q, k, k)
    assert np.all(np.isnan(host(out)))


# --- strided views in and out -------------------------------------------------------------------
# The kernels read q, k, v, out, grad_out and write out, dq, dk, dv through their strides: heads
# sliced out of a packed (B, T, 3, H, E) projection, results into caller's views.


def _packed(rng, b, n, h, e, dtype, device):
    """(host float64 (B, T, 3, H, E), device array of it)."""
    x = rounded(rng.standard_normal((b, n, 3, h, e)), dtype)
    return x, ignis.asarray(x.astype(NP_DTYPE[dtype]), device=device)


def _heads(a):
    """q, k, v: (B, H, T, E) views of a packed (B, T, 3, H, E) array (host or device)."""
    if isinstance(a, np.ndarray):
        return [a[:, :, i].transpose(0, 2, 1, 3) for i in range(3)]
    return [a[:, :, i].permute(0, 2, 1, 3) for i in range(3)]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n", [1, 31, 33, 100])
@pytest.mark.parametrize("e", [32, 64, 96, 128])
def test_packed_heads_in_and_out_in_place(device, dtype, causal, n, e):
    # packed_attention's layouts: q, k, v are slots of one (B, T, 3, H, E) array, out goes into
    # a (B, T, H, E) buffer, grad_out comes as one, and dq, dk, dv go into the three slots of
    # one (B, T, 3, H, E) gradient. Spare slots next to the views must keep their values.
    b, h = 2, 3
    rng = np.random.default_rng(n * 1000 + e + causal)
    packed, qkv = _packed(rng, b, n, h, e, dtype, device)
    q, k, v = _heads(qkv)
    assert not q.is_contiguous and q.shape == (b, h, n, e)
    merged = ignis.full((b, n, h + 1, e), 7.0, dtype=dtype, device=device)  # one spare head
    out_view = merged[:, :, 1:].permute(0, 2, 1, 3)
    out, lse = ignis.nn.attention(q, k, v, causal=causal, out=out_view)
    assert out is out_view and lse.shape == (b, h, n)
    qh, kh, vh = _heads(packed)
    g_merged = rounded(rng.standard_normal((b, n, h, e)), dtype)
    gh = g_merged.transpose(0, 2, 1, 3)
    want_out, want_lse, grads = ref_attention(qh, kh, vh, causal, 1 / math.sqrt(e), grad=gh)
    m = host(merged)
    assert np.all(m[:, :, 0] == 7), "out: the spare head was written"
    assert_close(m[:, :, 1:].transpose(0, 2, 1, 3), want_out, dtype, "out")
    assert_close(host(lse), want_lse, "float32", "lse")

    g = ignis.asarray(g_merged.astype(NP_DTYPE[dtype]), device=device).permute(0, 2, 1, 3)
    grad = ignis.full((b, n, 4, h, e), 7.0, dtype=dtype, device=device)  # slot 3 is spare
    slots = list(grad.permute(2, 0, 3, 1, 4)[:3])
    dq, dk, dv = ignis.nn.attention_backward(
        g, q, k, v, out, lse, causal=causal, dq=slots[0], dk=slots[1], dv=slots[2]
    )
    assert all(a is b for a, b in zip((dq, dk, dv), slots, strict=True))
    got = host(grad)
    assert np.all(got[:, :, 3] == 7), "a gradient was written into the spare slot"
    for i, (name, want) in enumerate(zip(("dq", "dk", "dv"), grads, strict=True)):
        assert_close(got[:, :, i].transpose(0, 2, 1, 3), want, dtype, name)


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16", "float16"])
@pytest.mark.parametrize("causal", [False, True])
def test_reversed_padded_and_broadcast_views(device, dtype, causal):
    # q with heads and rows reversed (negative strides), k with padded rows one element into its
    # buffer (no 16-byte alignment), v shared by all heads (head stride 0), grad_out a (B, T,
    # H, E) view; out and dq into reversed views, dk into padded rows, dv into (B, T, H, E).
    b, h, n_q, n_k, e = 2, 3, 37, 45, 64
    rng = np.random.default_rng(17 + causal)
    t = NP_DTYPE[dtype]

    def dev(x):
        return ignis.asarray(np.ascontiguousarray(x).astype(t), device=device)

    qh = rounded(rng.standard_normal((b, h, n_q, e)), dtype)
    q = dev(qh[:, ::-1, ::-1])[:, ::-1, ::-1]
    kh = rounded(rng.standard_normal((b, h, n_k, e)), dtype)
    k_pad = np.full((1 + b * h * n_k * (e + 3),), np.nan)
    k_pad[1:] = np.pad(kh, ((0, 0), (0, 0), (0, 0), (0, 3))).ravel()
    k = dev(k_pad)[1:].reshape(b, h, n_k, e + 3)[..., :e]
    v1 = rounded(rng.standard_normal((b, 1, n_k, e)), dtype)
    v = dev(v1).broadcast_to((b, h, n_k, e))
    vh = np.broadcast_to(v1, (b, h, n_k, e))
    gh = rounded(rng.standard_normal((b, h, n_q, e)), dtype)
    g = dev(gh.transpose(0, 2, 1, 3)).permute(0, 2, 1, 3)
    assert q.strides[1] < 0 and v.strides[1] == 0 and k.strides[2] == (e + 3) * q.itemsize

    def zeros(shape):
        return ignis.zeros(shape, dtype=dtype, device=device)

    out_buf = zeros((b, h, n_q, e))
    out, lse = ignis.nn.attention(q, k, v, causal=causal, out=out_buf[:, ::-1, ::-1])
    dq_buf, dk_buf, dv_buf = zeros((b, h, n_q, e)), zeros((b, h, n_k, e + 3)), zeros((b, n_k, h, e))
    dq, dk, dv = ignis.nn.attention_backward(
        g, q, k, v, out, lse, causal=causal, dq=dq_buf[:, ::-1, ::-1], dk=dk_buf[..., :e],
        dv=dv_buf.permute(0, 2, 1, 3),
    )
    want_out, want_lse, (wdq, wdk, wdv) = ref_attention(qh, kh, vh, causal, 1 / 8, grad=gh)
    stat = "float64" if dtype == "float64" else "float32"
    assert_close(host(out_buf)[:, ::-1, ::-1], want_out, dtype, "out")
    assert_close(host(lse), want_lse, stat, "lse")
    assert_close(host(dq_buf)[:, ::-1, ::-1], wdq, dtype, "dq")
    assert np.all(host(dk_buf)[..., e:] == 0), "dk: written into the row padding"
    assert_close(host(dk_buf)[..., :e], wdk, dtype, "dk")
    assert_close(host(dv_buf).transpose(0, 2, 1, 3), wdv, dtype, "dv (per head)")


def test_a_strided_last_dim_is_copied_first(device):
    rng = np.random.default_rng(23)
    wide = rounded(rng.standard_normal((1, 2, 20, 64)), "bfloat16")
    q = ignis.asarray(wide.astype(ml_dtypes.bfloat16), device=device)[..., ::2]  # stride 2
    kh = rounded(rng.standard_normal((1, 2, 20, 32)), "bfloat16")
    k = ignis.asarray(kh.astype(ml_dtypes.bfloat16), device=device)
    out, lse = ignis.nn.attention(q, k, k, causal=True)
    want, _, _ = ref_attention(wide[..., ::2], kh, kh, True, 1 / math.sqrt(32))
    assert_close(host(out), want, "bfloat16", "out")
    assert out.is_contiguous


def test_destination_views_are_checked():
    q = ignis.ones((1, 2, 4, 32))
    k = ignis.ones((1, 2, 6, 32))
    out, lse = ignis.nn.attention(q, k, k)
    with pytest.raises(ShapeError, match=r"attention: out has shape \(1, 2, 6, 32\); "
                                         r"expected \(1, 2, 4, 32\)"):
        ignis.nn.attention(q, k, k, out=ignis.empty((1, 2, 6, 32)))
    with pytest.raises(DTypeError, match="attention: out is float64; expected float32"):
        ignis.nn.attention(q, k, k, out=ignis.empty((1, 2, 4, 32), dtype="float64"))
    with pytest.raises(TypeError, match="attention: out must be an NvArray or None, got ndarray"):
        ignis.nn.attention(q, k, k, out=np.empty((1, 2, 4, 32), np.float32))
    with pytest.raises(ValueError, match=r"attention: out must have a contiguous last dim "
                       r"\(element stride 1\); got strides \(2048, 1024, 256, 8\)"):
        ignis.nn.attention(q, k, k, out=ignis.empty((1, 2, 4, 64))[..., ::2])
    with pytest.raises(ValueError, match="attention: out has strides .* reach some elements twice"):
        ignis.nn.attention(q, k, k, out=ignis.empty((1, 1, 4, 32)).broadcast_to((1, 2, 4, 32)))
    with pytest.raises(ValueError, match="attention: out shares memory with q"):
        ignis.nn.attention(q, k, k, out=q)
    g = ignis.ones((1, 2, 4, 32))
    op = "attention_backward"
    with pytest.raises(ShapeError, match=rf"{op}: dk has shape \(1, 2, 4, 32\); expected"):
        ignis.nn.attention_backward(g, q, k, k, out, lse, dk=ignis.empty((1, 2, 4, 32)))
    with pytest.raises(ValueError, match=f"{op}: dq shares memory with grad_out"):
        ignis.nn.attention_backward(g, q, k, k, out, lse, dq=g)
    with pytest.raises(ValueError, match=f"{op}: dv shares memory with k"):
        ignis.nn.attention_backward(g, q, k, k, out, lse, dq=ignis.empty(q.shape), dv=k)
    grad = ignis.empty((1, 6, 3, 2, 32))  # (B, T, 3, H, E): interleaved slots are fine
    _, dk_slot, dv_slot = grad.permute(2, 0, 3, 1, 4)
    dq, dk, dv = ignis.nn.attention_backward(g, q, k, k, out, lse, dk=dk_slot, dv=dv_slot)
    assert dk is dk_slot and dv is dv_slot and dq.shape == q.shape and dq.is_contiguous


@pytest.mark.gpu
def test_destination_on_another_device_is_named():
    q = ignis.ones((1, 1, 4, 32), device="cuda:0")
    with pytest.raises(DeviceMismatchError, match="attention: out is on cpu; expected cuda:0"):
        ignis.nn.attention(q, q, q, out=ignis.empty((1, 1, 4, 32), device="cpu"))


# --- decode --------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16", "float16"])
@pytest.mark.parametrize(
    "cache_len,s_max,e", [(1, 8, 64), (33, 40, 128), (1000, 1200, 80), (5000, 5000, 64)]
)
def test_decode_attention_matches_reference(device, dtype, cache_len, s_max, e):
    rng = np.random.default_rng(cache_len)
    qh, q = make(rng, (2, 3, 1, e), dtype, device)
    kh, k = make(rng, (2, 3, s_max, e), dtype, device)
    vh, v = make(rng, (2, 3, s_max, e), dtype, device)
    out = ignis.nn.decode_attention(q, k, v, cache_len)
    assert out.shape == (2, 3, 1, e) and out.dtype == q.dtype
    want = ref_attention(qh, kh[:, :, :cache_len], vh[:, :, :cache_len], False, 1 / math.sqrt(e))[0]
    assert_close(host(out), want, dtype, "decode")


def test_decode_equals_attention_on_the_prefix(device):
    rng = np.random.default_rng(2)
    q = ignis.asarray(rng.standard_normal((1, 4, 1, 64)), dtype="float32", device=device)
    k = ignis.asarray(rng.standard_normal((1, 4, 300, 64)), dtype="float32", device=device)
    v = ignis.asarray(rng.standard_normal((1, 4, 300, 64)), dtype="float32", device=device)
    got = ignis.nn.decode_attention(q, k, v, 257, scale=0.2)
    want, _ = ignis.nn.attention(q, k[:, :, :257], v[:, :, :257], scale=0.2)
    np.testing.assert_allclose(host(got), host(want), atol=2e-6)
    zero = ignis.nn.decode_attention(q, k, v, 0)
    assert np.all(host(zero) == 0)


def test_decode_splits_cover_the_cache():
    for bh, n, sms in [(1, 1, 132), (1, 5000, 132), (64, 100_000, 132), (4096, 70, 132)]:
        splits, chunk = cuda_attention.decode_splits(bh, n, sms)
        assert splits >= 1 and (splits - 1) * chunk < n <= splits * chunk
    assert cuda_attention.decode_splits(1, 8192, 132)[0] > 64  # one head still fills the GPU


# --- argument checks -----------------------------------------------------------------------------


def test_bad_arguments_are_named():
    q = ignis.ones((1, 2, 4, 32))
    k = ignis.ones((1, 2, 6, 32))
    with pytest.raises(ShapeError, match=r"attention: q must be 4-D .*got shape \(4, 32\)"):
        ignis.nn.attention(ignis.ones((4, 32)), k, k)
    with pytest.raises(
        ShapeError, match=r"attention: expected q \(B, H, L, E\).*k \(1, 2, 6, 16\)"
    ):
        ignis.nn.attention(q, ignis.ones((1, 2, 6, 16)), k)
    with pytest.raises(ShapeError, match="attention: batch and head dims differ"):
        ignis.nn.attention(q, ignis.ones((1, 3, 6, 32)), ignis.ones((1, 3, 6, 32)))
    with pytest.raises(ShapeError, match="head dim 160 is larger than the supported 128"):
        big = ignis.ones((1, 1, 2, 160))
        ignis.nn.attention(big, big, big)
    with pytest.raises(ShapeError, match="attention: head dim is 0; expected 1 to 128"):
        nothing = ignis.ones((1, 1, 2, 0))
        ignis.nn.attention(nothing, nothing, nothing)
    with pytest.raises(DTypeError, match="attention: k is float64 but q is float32"):
        ignis.nn.attention(q, k.astype("float64"), k)
    with pytest.raises(DTypeError, match="attention: q has dtype int32; expected float16"):
        i = ignis.ones((1, 2, 4, 32), dtype="int32")
        ignis.nn.attention(i, i, i)
    with pytest.raises(TypeError, match="attention: v must be an NvArray, got list"):
        ignis.nn.attention(q, k, [1.0])
    with pytest.raises(ValueError, match="attention: scale must be finite, got nan"):
        ignis.nn.attention(q, k, k, scale=float("nan"))
    out, lse = ignis.nn.attention(q, k, k)
    with pytest.raises(DTypeError, match="attention_backward: lse is float64; expected float32"):
        ignis.nn.attention_backward(q, q, k, k, out, lse.astype("float64"))
    with pytest.raises(ShapeError, match=r"attention_backward: lse has shape \(1, 2\)"):
        ignis.nn.attention_backward(q, q, k, k, out, lse[:, :, 0])
    with pytest.raises(ShapeError, match="attention_backward: grad_out"):
        ignis.nn.attention_backward(k, q, k, k, out, lse)
    with pytest.raises(ShapeError, match=r"decode_attention: q must be \(B, H, 1, E\)"):
        ignis.nn.decode_attention(q, k, k, 3)
    q1 = ignis.ones((1, 2, 1, 32))
    with pytest.raises(ValueError, match=r"decode_attention: cache_len 7 is outside \[0, 6\]"):
        ignis.nn.decode_attention(q1, k, k, 7)
    with pytest.raises(TypeError, match="decode_attention: cache_len must be an int, got float"):
        ignis.nn.decode_attention(q1, k, k, 2.0)


@pytest.mark.gpu
def test_device_mismatch_is_named():
    q = ignis.ones((1, 1, 4, 32), device="cuda:0")
    k = ignis.ones((1, 1, 4, 32), device="cpu")
    with pytest.raises(DeviceMismatchError, match="attention: k is on cpu but q is on cuda:0"):
        ignis.nn.attention(q, k, q)


# --- the kernels compile (no GPU needed) ---------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
@pytest.mark.exhaustive
def test_every_kernel_instantiation_compiles(dtype):
    # Two head dims (the smallest and the odd one) keep this quick; the templates do not
    # depend on D beyond loop bounds.
    names = set()
    for d in (32, 96):
        for causal in (False, True):
            names.update(cuda_attention.kernel_names(dtype, d, causal).values())
    obj = ignis.compile(
        _sources.read_source("attention.cu"),
        ignis.CompileOptions(arch="sm_90"),
        name_expressions=sorted(names),
    )
    assert set(obj.lowered_names) == names and obj.log == ""


@pytest.mark.parametrize("variant", list(cuda_attention.BWD_TILE_VARIANTS))
@pytest.mark.exhaustive
def test_every_backward_tile_variant_compiles(variant):
    # The dK/dV and fused kernels of each variant at every padded head dim (the fused dQ
    # product's column split, the K/V fragments in registers and the launch bounds' minimum
    # depend on it); every dtype and causal flag: test_backward_tile_variants_fit_their_registers.
    names = set()
    for d in cuda_attention.HEAD_DIMS:
        kernels = cuda_attention.kernel_names("bfloat16", d, True, variant)
        names.update((kernels["dkdv"], kernels["bwd_fused"]))
    obj = ignis.compile(
        _sources.read_source("attention.cu"),
        ignis.CompileOptions(arch="sm_90"),
        name_expressions=sorted(names),
    )
    assert set(obj.lowered_names) == names and obj.log == ""
    assert_known_param_types(names)


def ptxas_report(names):
    """{name expression: (registers, spill store bytes)} of an sm_90 build of ``names``."""
    import re

    obj = ignis.compile(
        _sources.read_source("attention.cu"),
        ignis.CompileOptions(arch="sm_90", extra=("--ptxas-options=-v",)),
        name_expressions=sorted(names),
        name="attention.cu",
    )
    by_symbol = {m: n for n, m in obj.lowered_names.items()}
    found = re.findall(
        r"Function properties for (\S+)\s*\n.*?(\d+) bytes spill stores.*?\n"
        r"ptxas info\s*: Used (\d+) registers",
        obj.log,
    )
    return {by_symbol[sym]: (int(regs), int(spills)) for sym, spills, regs in found}


@pytest.mark.exhaustive  # about 100 s of NVRTC
def test_backward_tile_variants_fit_their_registers(tmp_path, monkeypatch):
    # Every variant, float16 and bfloat16, every padded head dim, causal or not: registers within
    # the launch bounds (2 blocks of 8 warps: 128), and at most a few spilled words (ptxas
    # spills 0 to 32 bytes at 255 registers; a variant that no longer fits spills hundreds).
    monkeypatch.setenv("IGNIS_CACHE_DIR", str(tmp_path / "cache"))
    ignis.jit.clear_cache(memory=True)
    bounds = {}
    for variant, tiles in cuda_attention.BWD_TILE_VARIANTS.items():
        for dtype in ("float16", "bfloat16"):
            for d in cuda_attention.HEAD_DIMS:
                for causal in (False, True):
                    kernels = cuda_attention.kernel_names(dtype, d, causal, variant)
                    minb = tiles.min_blocks if d <= 64 else 0
                    cap = min(255, 65536 // (tiles.threads * minb)) if minb else 255
                    bounds.update({kernels[k]: cap for k in ("dkdv", "bwd_fused")})
    report = ptxas_report(bounds)
    assert set(report) == set(bounds)
    for name, (regs, spills) in report.items():
        assert regs <= bounds[name] and spills <= 64, (name, regs, spills)


def assert_known_param_types(names):
    """Launch arguments are packed from the parameter types read in the source: every one must
    be understood (a dependent type such as acc_type<T>::type would not be); the attention
    kernels end with the by-value Layout, the decode kernels take none."""
    from ignis._signature import parse_kernel_params

    src = _sources.read_source("attention.cu")
    for name in names:
        params = parse_kernel_params(src, name)
        *plain, last = params
        assert all(p.kind in ("pointer", "int", "float") for p in plain), (name, params)
        if "decode" in name:
            assert last.kind in ("pointer", "int", "float"), (name, params)
        else:
            # (Layout is declared in attention.cuh, which the signature reader does not follow:
            # "unknown", packed like a struct: its bytes, at the driver's parameter size)
            assert last.kind in ("struct", "unknown"), (name, last)
            assert (last.ctype, last.name) == ("Layout", "lay"), (name, last)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_kernel_parameters_have_known_types(dtype):
    # (the Hopper kernels live in attention_sm90.cu: test_nn_attention_sm90.py)
    names = cuda_attention.kernel_names(dtype, 64, True)
    assert_known_param_types(v for key, v in names.items() if not key.endswith("_wgmma"))


def test_layout_packing_matches_the_kernels_struct():
    # ignis::attn::Layout: int64 heads, then (batch, head, row) element strides of q, k, v, out,
    # grad_out, dq, dk, dv; the kernel source asserts the same 200 bytes.
    assert cuda_attention.LAYOUT.size == 25 * 8
    assert "static_assert(sizeof(Layout) == 25 * 8" in _sources.read_source("attention.cuh")
    qkv = ignis.empty((2, 7, 3, 4, 16), dtype="float32")  # (B, T, 3, H, E) on the CPU
    q, k = qkv[:, :, 0].permute(0, 2, 1, 3), qkv[:, :, 1].permute(0, 2, 1, 3)
    one_batch = ignis.empty((1, 4, 7, 16), dtype="float32")
    values = cuda_attention.LAYOUT.unpack(cuda_attention.layout(4, q, k, dk=one_batch))
    assert values[0] == 4
    assert values[1:7] == (7 * 3 * 4 * 16, 16, 3 * 4 * 16) * 2  # q, k: (B, H, T) strides
    assert values[7:19] == (0,) * 12  # v, out, grad_out, dq: not given
    assert values[19:22] == (0, 7 * 16, 16)  # dk: a batch of one is never stepped
    assert values[22:] == (0, 0, 0)


def test_padded_head_dims():
    assert [cuda_attention.padded_head_dim(e) for e in (1, 32, 33, 64, 80, 96, 100, 128)] == [
        32,
        32,
        64,
        64,
        96,
        96,
        128,
        128,
    ]
    with pytest.raises(ValueError, match="head dim 129"):
        cuda_attention.padded_head_dim(129)


# --- large cases on the GPU ----------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("e", [64, 128])
@pytest.mark.parametrize("path", ["default", "fallback"])
def test_long_sequences_on_gpu_match_torch(dtype, causal, e, path, tune):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs torch with CUDA")
    if path == "fallback":  # the 16-rows-per-warp forward and the two-pass backward
        tune(attention=dict(fwd_rows_per_warp=16, bwd_fused_dq=False))
    rng = np.random.default_rng(e)
    shape = (2, 4, 1031, e)
    tdt = getattr(torch, dtype)
    qh, kh, vh, gh = (rng.standard_normal(shape) for _ in range(4))
    q, k, v, g = (ignis.asarray(x, dtype=dtype, device="cuda:0") for x in (qh, kh, vh, gh))
    tq, tk, tv, tg = (
        torch.tensor(x, dtype=torch.float64, device="cuda").to(tdt).double().requires_grad_()
        for x in (qh, kh, vh, gh)
    )
    tout = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)
    tout.backward(tg.detach())
    out, lse = ignis.nn.attention(q, k, v, causal=causal)
    dq, dk, dv = ignis.nn.attention_backward(g, q, k, v, out, lse, causal=causal)
    assert_close(host(out), tout.detach().cpu().numpy(), dtype, "out")
    for name, got, want in (("dq", dq, tq.grad), ("dk", dk, tk.grad), ("dv", dv, tv.grad)):
        assert_close(host(got), want.cpu().numpy(), dtype, name)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32", "float64"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("e", [64, 80, 128])
@pytest.mark.parametrize("path", ["default", "fallback"])
def test_every_kernel_family_on_packed_views_on_gpu(dtype, causal, e, path, tune):
    # "fallback": the 16-rows-per-warp forward and the two-pass backward (16-bit), the first
    # scalar kernels (32-bit, 64-bit). Several tiles per block, partial last tiles.
    if path == "fallback":
        tune(attention=dict(fwd_rows_per_warp=16, bwd_fused_dq=False, simt_tiled=False))
    b, h, n = 2, 3, 257
    rng = np.random.default_rng(e + 7 * causal)
    packed, qkv = _packed(rng, b, n, h, e, dtype, "cuda:0")
    q, k, v = _heads(qkv)
    merged = ignis.empty((b, n, h, e), dtype=dtype, device="cuda:0")
    out, lse = ignis.nn.attention(q, k, v, causal=causal, out=merged.permute(0, 2, 1, 3))
    g_merged = rounded(rng.standard_normal((b, n, h, e)), dtype)
    g = ignis.asarray(g_merged.astype(NP_DTYPE[dtype]), device="cuda:0").permute(0, 2, 1, 3)
    grad = ignis.empty((b, n, 3, h, e), dtype=dtype, device="cuda:0")
    dq, dk, dv = _heads(grad)
    ignis.nn.attention_backward(g, q, k, v, out, lse, causal=causal, dq=dq, dk=dk, dv=dv)
    qh, kh, vh = _heads(packed)
    want_out, want_lse, grads = ref_attention(
        qh, kh, vh, causal, 1 / math.sqrt(e), grad=g_merged.transpose(0, 2, 1, 3)
    )
    assert_close(host(merged).transpose(0, 2, 1, 3), want_out, dtype, "out")
    assert_close(host(lse), want_lse, "float64" if dtype == "float64" else "float32", "lse")
    got = host(grad)
    for i, (name, want) in enumerate(zip(("dq", "dk", "dv"), grads, strict=True)):
        assert_close(got[:, :, i].transpose(0, 2, 1, 3), want, dtype, name)


# --- the CUDA backend's host side over a fake driver (no GPU needed) ------------------------------


@pytest.fixture
def fake(monkeypatch):
    import sys
    from pathlib import Path

    if ignis.is_available():
        pytest.skip("fake driver tests: the GPU tests cover the real driver")
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "runtime"))
    fake_gpu = __import__("fake_gpu")
    g = fake_gpu.install(monkeypatch)
    monkeypatch.setattr(cuda_attention, "library_kernel", fake_gpu._library_kernel)
    fake_gpu.record_optin(monkeypatch, g)
    yield g
    fake_gpu.uninstall()
    sys.modules.pop("fake_gpu", None)


def _u64(b):
    return int.from_bytes(b, "little", signed=False)


def _i32(b):
    return int.from_bytes(b, "little", signed=True)


@pytest.mark.parametrize(
    "dtype,kind,rows_per_warp",
    [
        ("bfloat16", "tc_m32", 32),
        ("bfloat16", "tc", 16),
        ("float32", "simt", 32),
        ("float64", "simt", 32),
    ],
)
def test_launches_over_a_fake_driver(fake, dtype, kind, rows_per_warp, tune):
    import struct

    # The earlier scalar float32/float64 kernels; the tiled ones have test_nn_attention_simt.py.
    # The 16-bit backward on the k64q32w4 tiles (the other tiles: below).
    tune(attention=dict(simt_tiled=False, fwd_rows_per_warp=rows_per_warp, bwd_tiles="k64q32w4"))
    q = ignis.empty((2, 3, 100, 80), dtype=dtype, device="cuda:0")
    k = ignis.empty((2, 3, 70, 80), dtype=dtype, device="cuda:0")
    fake.launches.clear()
    out, lse = ignis.nn.attention(q, k, k, causal=True, scale=0.5)
    ((name, grid, block, _, args),) = fake.launches
    t = {"bfloat16": "ignis::bfloat16", "float32": "float", "float64": "double"}[dtype]
    assert name == f"ignis::attn::flash_fwd_{kind}<{t}, 96, true>"
    assert [_u64(a) for a in args[:5]] == [
        q.data_ptr,
        k.data_ptr,
        k.data_ptr,
        out.data_ptr,
        lse.data_ptr,
    ]
    assert [_i32(a) for a in args[5:8]] == [100, 70, 80]
    if kind.startswith("tc"):
        # 100 queries: one block of 128 (32 per warp) or two of 64 (16 per warp); shared
        # memory: K and V double-buffered (64 x 104 each), plus the Q tile for the wide kernel.
        tiles = 4 * 64 + (128 if kind == "tc_m32" else 0)
        assert grid == ((1 if kind == "tc_m32" else 2), 6, 1) and block == (128, 1, 1)
        assert (name, tiles * (96 + 8) * 2) in fake.optin  # over 48 KiB: opted in exactly
        assert struct.unpack("<f", args[8])[0] == pytest.approx(0.5 * 1.4426950408889634)
    else:
        assert grid == (4, 6, 1) and block == (256, 1, 1)
        fmt = "<d" if dtype == "float64" else "<f"
        assert struct.unpack(fmt, args[8])[0] == 0.5
    fake.launches.clear()
    dq, dk, dv = ignis.nn.attention_backward(out, q, k, k, out, lse, causal=True, scale=0.5)
    names = [n.split("<")[0] for n, *_ in fake.launches]
    # Scalar dK/dV tiles at head dim 96: more than 48 KiB of shared memory, under 227 KiB.
    assert kind.startswith("tc") or any(
        "dkdv" in n and 48 * 1024 < v <= 227 * 1024 for n, v in fake.optin
    )
    if kind.startswith("tc"):  # fused: dQ summed in float32 (zero-filled), then rounded
        assert names[0] == "ignis::attn::attn_row_dot" and names[-2:] == [
            "ignis::attn::flash_bwd_fused_tc",
            "ignis::attn::attn_dq_finish",
        ]
        fused = [a for n, _, _, _, a in fake.launches if "bwd_fused" in n][0]
        assert _u64(fused[8]) not in (q.data_ptr, k.data_ptr, out.data_ptr)  # the float32 sums
        assert (
            "ignis::attn::flash_bwd_fused_tc<ignis::bfloat16, 96, true, 64, 32, 0, false, false>",
            (2 * 64 + 4 * 32) * (96 + 8) * 2 + 32 * 72 * 2 + 4 * 32 * 4,
        ) in fake.optin
        fake.launches.clear()
        tune(attention=dict(bwd_fused_dq=False))
        dq, dk, dv = ignis.nn.attention_backward(out, q, k, k, out, lse, causal=True, scale=0.5)
        names = [n.split("<")[0] for n, *_ in fake.launches]
    bwd = kind[:2] if kind.startswith("tc") else kind
    assert names == [
        "ignis::attn::attn_row_dot",
        f"ignis::attn::flash_bwd_dkdv_{bwd}",
        f"ignis::attn::flash_bwd_dq_{bwd}",
    ]
    # the two passes: q, k, v, dO, lse and D first, then their outputs and the sizes
    rowdot, dkdv, dq_pass = (a for _, _, _, _, a in fake.launches)
    inputs = [q.data_ptr, k.data_ptr, k.data_ptr, out.data_ptr, lse.data_ptr, _u64(rowdot[2])]
    assert [_u64(a) for a in dkdv[:8]] == [*inputs, dk.data_ptr, dv.data_ptr]
    assert [_u64(a) for a in dq_pass[:7]] == [*inputs, dq.data_ptr]
    assert [_i32(a) for a in dkdv[8:11]] == [_i32(a) for a in dq_pass[7:10]] == [100, 70, 80]
    fake.launches.clear()
    q1 = ignis.empty((2, 3, 1, 80), dtype=dtype, device="cuda:0")
    ignis.nn.decode_attention(q1, k, k, 65)
    (n1, g1, *_), (n2, g2, *_) = fake.launches
    assert n1.startswith("ignis::attn::decode_partial<") and n2.startswith(
        "ignis::attn::decode_combine<"
    )
    assert g1 == (2, 6, 1) and g2 == (6, 1, 1)  # 65 rows: two splits of at least 64 rows


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "two-pass"])
@pytest.mark.parametrize(
    "variant,e,d,tiles",
    [
        ("k128q32w8", 80, 96, "128, 32, 0, false, false"),
        ("k128q64w8-kv-red2", 50, 64, "128, 64, 0, true, true"),
        ("k128q32w8-b2-red2", 64, 64, "128, 32, 2, false, true"),  # (2 at head dims <= 64)
        # the default, "auto": the bwd_tiles_auto setting by padded head dim
        ("auto", 64, 64, "128, 32, 2, false, true"),
        ("auto", 80, 96, "128, 64, 0, true, true"),
        ("auto", 128, 128, "128, 64, 0, true, true"),
    ],
)
def test_backward_tile_variants_launch_over_a_fake_driver(
    fake, fused, variant, e, d, tiles, tune
):
    # 8 warps (256 threads) per block of 128 keys; shared memory, written out: K and V tiles
    # (128 x (D + 8)); Q and dO tiles (32 or 64 x (D + 8)) and the float32 lse and D rows, two
    # buffers each; the fused pass's dS tile (32 or 64 x 136).
    # (bwd_wgmma off: the stand-in is an H200)
    tune(attention=dict(bwd_tiles=variant, bwd_fused_dq=fused, bwd_wgmma=False))
    b, h, n_q, n_k = 2, 3, 100, 300
    q = ignis.empty((b, h, n_q, e), dtype="bfloat16", device="cuda:0")
    k = ignis.empty((b, h, n_k, e), dtype="bfloat16", device="cuda:0")
    lse = ignis.empty((b, h, n_q), dtype="float32", device="cuda:0")
    fake.launches.clear()
    ignis.nn.attention_backward(q, q, k, k, q, lse, causal=True, scale=0.5)
    kind = "fused" if fused else "dkdv"
    name = f"ignis::attn::flash_bwd_{kind}_tc<ignis::bfloat16, {d}, true, {tiles}>"
    ((grid, block),) = [(g, blk) for n, g, blk, *_ in fake.launches if n == name]
    assert grid == (3, b * h, 1) and block == (256, 1, 1)  # 300 keys: 3 blocks of 128
    m = int(tiles.split(", ")[1])
    smem = (2 * 128 + 4 * m) * (d + 8) * 2 + 4 * m * 4 + (m * 136 * 2 if fused else 0)
    assert (name, smem) in fake.optin
    if fused:
        assert fake.launches[-1][0].startswith("ignis::attn::attn_dq_finish<")
    else:  # the dQ pass keeps its own tiles: 64 queries per block of 4 warps
        ((grid, block),) = [(g, blk) for n, g, blk, *_ in fake.launches if "bwd_dq_tc" in n]
        assert grid == (2, b * h, 1) and block == (128, 1, 1)


def test_an_unknown_tile_variant_is_named(fake, tune):
    # Refused when it is set, naming the setting and the variants ...
    with pytest.raises(
        ValueError,
        match="attention.bwd_tiles is 'k256q32w16'; expected 'auto' or one of "
        "k64q32w4, k128q32w8, k128q64w8",
    ):
        tune(attention=dict(bwd_tiles="k256q32w16"))
    # ... and when it is asked for by name
    with pytest.raises(ValueError, match="attention: bwd_tiles is 'k256q32w16'"):
        cuda_attention.kernel_names("bfloat16", 64, False, "k256q32w16")
    with pytest.raises(ValueError, match="attention: bwd_tiles is 'k256q32w16'"):
        cuda_attention.bwd_tiles("k256q32w16", 64)
    # float32 / float64 have no tile variants: the setting is not read
    tune(attention=dict(bwd_tiles="k64q32w4"))
    x = ignis.empty((1, 1, 10, 64), dtype="float32", device="cuda:0")
    lse = ignis.empty((1, 1, 10), dtype="float32", device="cuda:0")
    ignis.nn.attention_backward(x, x, x, x, x, lse)


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("fused", [True, False])
def test_strided_views_reach_the_kernels_in_place(fake, dtype, fused, tune):
    tune(attention=dict(bwd_fused_dq=fused))
    # The forward kernels that take pointers (the stand-in H200's own forward takes tensor maps
    # of the same views: test_nn_attention_sm90.py)
    tune(attention=dict(fwd_wgmma=False))
    b, n, h, e = 2, 100, 3, 64
    item = 2 if dtype == "bfloat16" else 4
    qkv = ignis.empty((b, n, 3, h, e), dtype=dtype, device="cuda:0")
    q, k, v = (qkv[:, :, i].permute(0, 2, 1, 3) for i in range(3))
    merged = ignis.empty((b, n, h, e), dtype=dtype, device="cuda:0")
    packed = (n * 3 * h * e, e, 3 * h * e)  # element strides of a slot of qkv (B, H, T)
    rows = (n * h * e, e, h * e)  # of a (B, T, H, E) buffer viewed as (B, H, T, E)
    fake.launches.clear()
    out, lse = ignis.nn.attention(q, k, v, causal=True, out=merged.permute(0, 2, 1, 3))
    ((name, _, _, _, args),) = fake.launches  # one launch: no gather, no scatter
    assert [_u64(a) for a in args[:4]] == [q.data_ptr, k.data_ptr, v.data_ptr, merged.data_ptr]
    assert _i32(args[9]) == 1  # 16-byte copies: every base and stride is 16-byte aligned
    lay = cuda_attention.LAYOUT.unpack(args[-1])
    assert lay == (h, *packed * 3, *rows, *(0,) * 12)

    grad = ignis.empty((b, n, 3, h, e), dtype=dtype, device="cuda:0")
    dq, dk, dv = (grad[:, :, i].permute(0, 2, 1, 3) for i in range(3))
    g = ignis.empty((b, n, h, e), dtype=dtype, device="cuda:0").permute(0, 2, 1, 3)
    fake.launches.clear()
    ignis.nn.attention_backward(g, q, k, v, out, lse, causal=True, dq=dq, dk=dk, dv=dv)
    launched = {n_.split("<")[0].split("::")[-1]: a for n_, _, _, _, a in fake.launches}
    assert not any("copy" in name for name in launched), sorted(launched)
    lay = cuda_attention.LAYOUT.unpack(launched["attn_row_dot"][-1])
    assert lay == (h, *packed * 3, *rows, *rows, *packed * 3)
    kv = [a for name, a in launched.items() if "dkdv" in name or "fused" in name][0]
    assert [_u64(a) for a in kv[6:8]] == [dk.data_ptr, dv.data_ptr]
    if "attn_dq_finish" in launched:  # the fused backward rounds dQ into place at the end
        assert _u64(launched["attn_dq_finish"][1]) == dq.data_ptr
    else:
        dq_kernel = [a for name, a in launched.items() if "bwd_dq" in name][0]
        assert _u64(dq_kernel[6]) == dq.data_ptr

    # Rows (e + 1) elements apart: read in place with element copies.
    padded = ignis.empty((b, h, n, e + 1), dtype=dtype, device="cuda:0")[..., :e]
    assert padded.strides[2] == (e + 1) * item
    fake.launches.clear()
    ignis.nn.attention(q, padded, v)
    ((_, _, _, _, args),) = fake.launches
    assert _u64(args[1]) == padded.data_ptr and _i32(args[9]) == 0
    assert cuda_attention.LAYOUT.unpack(args[-1])[4:7] == (h * n * (e + 1), n * (e + 1), e + 1)
    # A strided last dim: one copy first, then the kernel on the copy.
    wide = ignis.empty((b, h, n, 2 * e), dtype=dtype, device="cuda:0")[..., ::2]
    fake.launches.clear()
    ignis.nn.attention(q, wide, v)
    assert ["copy" in n_ for n_, *_ in fake.launches] == [True, False]


# --- the kernels on a host emulator (no GPU needed) ---------------------------------------------
# The CUDA kernels of attention.cu compiled as host C++ against an emulation of the CUDA features
# they use (threads as coroutines, barriers, warp shuffles, ldmatrix, mma, cp.async): their index
# math, masking of partial tiles and pipelining run here exactly as written. Every operand is a
# (B, H, rows, E) view into a buffer of its own, dense or strided (see LAYOUTS); the rest of each
# buffer is NaN, so a kernel that reads or writes outside its view is caught.

# The harnesses' operand handling (after #include "attention.cu"): each of q, k, v, dout, out,
# dq, dk, dv is described on the command line by five numbers (buffer size, offset of the first
# element, batch / head / row strides, all in elements).
OPERANDS_CPP = r"""
template <class P> P* aligned(size_t n) {
  void* p = std::aligned_alloc(256, ((n * sizeof(P) + 255) / 256) * 256 + 256);
  return (P*)p;
}

template <class T> struct Operand {
  size_t size = 0;
  ignis::int64 offset = 0;
  ignis::attn::Strides st{};
  T* buf = nullptr;
  T* ptr() const { return buf + offset; }
  T& at(ignis::int64 b, ignis::int64 h, ignis::int64 r, int e) const {
    return buf[offset + b * st.sb + h * st.sh + r * st.st + e];
  }
};

// Operand from argv[at .. at + 5); its buffer starts as all-ones bits (NaN in every float type).
template <class T> Operand<T> operand(char** argv, int at) {
  Operand<T> o;
  o.size = (size_t)std::atoll(argv[at]);
  o.offset = std::atoll(argv[at + 1]);
  o.st = ignis::attn::Strides{std::atoll(argv[at + 2]), std::atoll(argv[at + 3]),
                              std::atoll(argv[at + 4])};
  o.buf = aligned<T>(o.size);
  std::memset((void*)o.buf, 0xff, o.size * sizeof(T));
  return o;
}

// The operands in command-line order: q, k, v, dout, out, dq, dk, dv.
template <class T> struct Operands {
  Operand<T> q, k, v, dout, out, dq, dk, dv;
  Operands(char** argv, int at)
      : q(operand<T>(argv, at)), k(operand<T>(argv, at + 5)), v(operand<T>(argv, at + 10)),
        dout(operand<T>(argv, at + 15)), out(operand<T>(argv, at + 20)),
        dq(operand<T>(argv, at + 25)), dk(operand<T>(argv, at + 30)),
        dv(operand<T>(argv, at + 35)) {}
  // The inputs' buffers, in this order, from the input file; cp.async may read them.
  void read(const char* path) {
    FILE* in = std::fopen(path, "rb");
    for (Operand<T>* o : {&q, &k, &v, &dout}) {
      if (!in || std::fread(o->buf, sizeof(T), o->size, in) != o->size) emu::die("short input");
      emu::readable.push_back(
          {(const unsigned char*)o->buf, (const unsigned char*)(o->buf + o->size)});
    }
    std::fclose(in);
  }
  ignis::attn::Layout layout(ignis::int64 heads) const {
    return ignis::attn::Layout{heads, q.st, k.st, v.st, out.st, dout.st, dq.st, dk.st, dv.st};
  }
};
static const int kOperandArgs = 40;
"""

ATTN_PART = r"""
// The attention kernels of attention.cu on the emulator of tc_emulator.py.
//
// Build: c++ -std=c++17 -O1 -I<cuda_src> -DEMU_T=<type> -DEMU_D=<head dim> -DEMU_CAUSAL=<0|1>
//        -DEMU_TC=<0|1>, and for the tensor-core backward's tiles (attention.BwdTiles; default
//        k64q32w4) -DEMU_KN=<keys per block> -DEMU_KM=<queries per tile> -DEMU_KVREG=<0|1>
//        -DEMU_RED2=<0|1> (the launch bounds' minimum blocks do nothing here)
// Run:   emulator <input> <output> B H L S E scale vec smem_kv smem_fused <operands: 8 x 5>
//        (smem_kv, smem_fused: the host's dynamic shared memory of the tensor-core dK/dV and fused
//        kernels, which must be the kernels' own; input: the buffers of q, k, v, dout; output:
//        the buffer of out, lse, the buffers of dq, dk, dv and the decode attention of each
//        head's first query over all S keys; the tensor-core builds then write the
//        16-rows-per-warp forward's out buffer and lse and the fused backward's dq, dk, dv
//        buffers; all raw little-endian)
#define IGNIS_ATTN_HOST_EMULATION 1
#ifndef EMU_KN
#define EMU_KN 64
#define EMU_KM 32
#define EMU_KVREG 0
#define EMU_RED2 0
#endif

namespace ignis {
namespace attn {
inline unsigned char* dynamic_smem() { return ::emu::dyn_smem; }
inline void require_smem(unsigned bytes) {
  if (bytes > ::emu::dyn_smem_size) ::emu::die("kernel trapped: not enough dynamic shared memory");
}
}  // namespace attn
}  // namespace ignis

#include "attention.cu"
""" + OPERANDS_CPP + r"""
int main(int argc, char** argv) {
  using namespace ignis;
  using namespace ignis::attn;
  typedef EMU_T T;
  typedef std::conditional<std::is_same<T, double>::value, double, float>::type LT;
  if (argc != 12 + kOperandArgs) emu::die("usage: emulator <in> <out> B H L S E scale vec ...");
  const int B = std::atoi(argv[3]), H = std::atoi(argv[4]), L = std::atoi(argv[5]);
  const int S = std::atoi(argv[6]), E = std::atoi(argv[7]), vec = std::atoi(argv[9]);
  const double scale = std::atof(argv[8]);
  const size_t smem_kv = std::atol(argv[10]), smem_fused = std::atol(argv[11]);
  const int bh = B * H;
  Operands<T> x(argv, 12);
  x.read(argv[1]);
  const Layout lay = x.layout(H);
  T *q = x.q.ptr(), *k = x.k.ptr(), *v = x.v.ptr(), *dout = x.dout.ptr();
  T *out = x.out.ptr(), *dq = x.dq.ptr(), *dk = x.dk.ptr(), *dv = x.dv.ptr();
  LT *lse = aligned<LT>((size_t)bh * L), *dvec = aligned<LT>((size_t)bh * L);
  std::mt19937 rng(1234);
  constexpr int D = EMU_D;
  constexpr bool C = EMU_CAUSAL != 0;
  auto cdiv = [](int a, int b) { return (unsigned)((a + b - 1) / b); };
#if EMU_TC
  const float sl2 = (float)(scale * 1.4426950408889634);
  // The 16-rows-per-warp fallback first (into copies of the out buffer, its results written
  // last), then the default 32-rows-per-warp forward whose out and lse feed the backward.
  Operand<T> out16 = x.out, dq_f = x.dq, dk_f = x.dk, dv_f = x.dv;
  for (Operand<T>* o : {&out16, &dq_f, &dk_f, &dv_f}) {
    o->buf = aligned<T>(o->size);
    std::memset((void*)o->buf, 0xff, o->size * sizeof(T));
  }
  LT* lse16 = aligned<LT>((size_t)bh * L);
  emu::launch(cdiv(L, kFwdBM), bh, kTcThreads, 4 * kFwdBN * (D + 8) * 2, [&] {
    flash_fwd_tc<T, D, C>(q, k, v, out16.ptr(), lse16, L, S, E, sl2, vec, 0, lay);
  }, rng);
  emu::launch(cdiv(L, kFwd2BM), bh, kTcThreads, (kFwd2BM + 4 * kFwd2BN) * (D + 8) * 2, [&] {
    flash_fwd_tc_m32<T, D, C>(q, k, v, out, lse, L, S, E, sl2, vec, 0, lay);
  }, rng);
  emu::launch(cdiv(bh * L, 8), 1, 256, 0,
              [&] { attn_row_dot<T, float>(dout, out, dvec, (int64)bh * L, L, E, lay); }, rng);
  constexpr int KN = EMU_KN, KM = EMU_KM;
  constexpr bool KV = EMU_KVREG != 0, R2 = EMU_RED2 != 0;
  if (smem_kv != dkdv_smem_bytes<T, D, false, KN, KM>() ||
      smem_fused != dkdv_smem_bytes<T, D, true, KN, KM>())
    emu::die("the host's dK/dV shared memory is not the kernels' dkdv_smem_bytes");
  emu::launch(cdiv(S, KN), bh, bwd_threads<KN>(), smem_kv, [&] {
    flash_bwd_dkdv_tc<T, D, C, KN, KM, 0, KV, R2>(q, k, v, dout, lse, dvec, dk, dv, L, S, E,
                                                  (float)scale, sl2, vec, 0, lay);
  }, rng);
  emu::launch(cdiv(L, kBwdQM), bh, kTcThreads, 4 * kBwdQN * (D + 8) * 2, [&] {
    flash_bwd_dq_tc<T, D, C>(q, k, v, dout, lse, dvec, dq, L, S, E, (float)scale, sl2, vec, 0,
                             lay);
  }, rng);
  // The fused backward (dQ through float32 atomics), its results written last.
  const size_t nq = (size_t)bh * L * E;
  float* dq_acc = aligned<float>(nq);
  for (size_t i = 0; i < nq; ++i) dq_acc[i] = 0.f;
  emu::launch(cdiv(S, KN), bh, bwd_threads<KN>(), smem_fused, [&] {
    flash_bwd_fused_tc<T, D, C, KN, KM, 0, KV, R2>(q, k, v, dout, lse, dvec, dk_f.ptr(),
                                                   dv_f.ptr(), dq_acc, L, S, E, (float)scale, sl2,
                                                   vec, 0, lay);
  }, rng);
  emu::launch(3, 1, 64, 0, [&] {
    attn_dq_finish<T>(dq_acc, dq_f.ptr(), (int64)bh * L, L, E, (float)scale, lay);
  }, rng);
#else
  (void)smem_kv, (void)smem_fused;  // (the scalar kernels' tiles are fixed)
  emu::launch(cdiv(L, kSimtB), bh, kSimtThreads, kSimtB * (3 * D + 1) * sizeof(T), [&] {
    flash_fwd_simt<T, D, C>(q, k, v, out, lse, L, S, E, (T)scale, 0, lay);
  }, rng);
  emu::launch(cdiv(bh * L, 8), 1, 256, 0,
              [&] { attn_row_dot<T, LT>(dout, out, dvec, (int64)bh * L, L, E, lay); }, rng);
  emu::launch(cdiv(S, kSimtB), bh, kSimtThreads, kSimtB * (4 * D + 2) * sizeof(T), [&] {
    flash_bwd_dkdv_simt<T, D, C>(q, k, v, dout, lse, dvec, dk, dv, L, S, E, (T)scale, 0, lay);
  }, rng);
  emu::launch(cdiv(L, kSimtB), bh, kSimtThreads, kSimtB * (4 * D + 2) * sizeof(T), [&] {
    flash_bwd_dq_simt<T, D, C>(q, k, v, dout, lse, dvec, dq, L, S, E, (T)scale, 0, lay);
  }, rng);
#endif
  // Decode (contiguous operands): query row 0 of each (batch, head) over all S rows of dense
  // copies of k and v, in splits of 16 rows.
  typedef typename acc_type<T>::type A;
  T* q0 = aligned<T>((size_t)bh * E);
  T *kc = aligned<T>((size_t)bh * S * E), *vc = aligned<T>((size_t)bh * S * E);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int e = 0; e < E; ++e) {
        q0[(size_t)(b * H + h) * E + e] = x.q.at(b, h, 0, e);
        for (int j = 0; j < S; ++j) {
          kc[((size_t)(b * H + h) * S + j) * E + e] = x.k.at(b, h, j, e);
          vc[((size_t)(b * H + h) * S + j) * E + e] = x.v.at(b, h, j, e);
        }
      }
  const int chunk = 16, splits = (int)cdiv(S, chunk);
  A *pm = aligned<A>((size_t)bh * splits), *pl = aligned<A>((size_t)bh * splits);
  A* po = aligned<A>((size_t)bh * splits * D);
  T* dec = aligned<T>((size_t)bh * E);
  emu::launch(splits, bh, kDecodeThreads, 0, [&] {
    decode_partial<T, A, D>(q0, kc, vc, pm, pl, po, S, S, chunk, E, (A)scale);
  }, rng);
  emu::launch(bh, 1, kDecodeThreads, 0,
              [&] { decode_combine<T, A>(pm, pl, po, dec, splits, D, E); }, rng);
  FILE* o = std::fopen(argv[2], "wb");
  std::fwrite(x.out.buf, sizeof(T), x.out.size, o);
  std::fwrite(lse, sizeof(LT), (size_t)bh * L, o);
  std::fwrite(x.dq.buf, sizeof(T), x.dq.size, o);
  std::fwrite(x.dk.buf, sizeof(T), x.dk.size, o);
  std::fwrite(x.dv.buf, sizeof(T), x.dv.size, o);
  std::fwrite(dec, sizeof(T), (size_t)bh * E, o);
#if EMU_TC
  std::fwrite(out16.buf, sizeof(T), out16.size, o);
  std::fwrite(lse16, sizeof(LT), (size_t)bh * L, o);
  std::fwrite(dq_f.buf, sizeof(T), dq_f.size, o);
  std::fwrite(dk_f.buf, sizeof(T), dk_f.size, o);
  std::fwrite(dv_f.buf, sizeof(T), dv_f.size, o);
#endif
  std::fclose(o);
  return 0;
}
"""


# --- operands placed in strided buffers, for the emulator harnesses -----------------------------


class Placed:
    """A (B, H, rows, E) view into a flat buffer of ``size`` elements: the first element at
    ``offset``, batch / head / row strides ``strides`` (elements, any sign); the other elements
    of the buffer are NaN."""

    def __init__(self, shape, size, offset, strides):
        self.shape, self.size, self.offset, self.strides = shape, size, offset, strides

    def args(self):
        return [self.size, self.offset, *self.strides]

    def index(self):
        """Flat buffer index of every element of the view, shape (B, H, rows, E)."""
        b, h, r, e = (np.arange(n) for n in self.shape)
        sb, sh, st = self.strides
        return (self.offset + b[:, None, None, None] * sb + h[None, :, None, None] * sh
                + r[None, None, :, None] * st + e[None, None, None, :])

    def buffer(self, values, np_dtype):
        """The buffer holding ``values`` in the view and NaN elsewhere."""
        buf = np.full(self.size, np.nan).astype(np_dtype)
        buf[self.index()] = np.asarray(values).astype(np_dtype)
        return buf

    def view(self, buf):
        """(values of the view, values of the rest of the buffer)."""
        idx = self.index()
        rest = np.ones(self.size, bool)
        rest[idx.ravel()] = False
        return buf[idx], buf[rest]


def place(kind, shape, slot=0):
    """A placement of a (B, H, rows, E) operand:

    ``dense``    contiguous (B, H, rows, E);
    ``packed``   slot ``slot`` of a packed (B, rows, 3, H, E) projection (packed_attention's q,
                 k, v and gradients);
    ``merged``   a (B, rows, H, E) buffer viewed as (B, H, rows, E) (packed_attention's out);
    ``padded``   rows E + 3 apart, heads and batches with an element of slack between them, the
                 view one element into its buffer (nothing 16-byte aligned: element copies);
    ``reversed`` a dense buffer read with the heads and rows in reverse (negative strides).
    """
    b, h, r, e = shape
    if kind == "dense":
        return Placed(shape, b * h * r * e, 0, (h * r * e, r * e, e))
    if kind == "packed":
        return Placed(shape, b * r * 3 * h * e, slot * h * e, (r * 3 * h * e, e, 3 * h * e))
    if kind == "merged":
        return Placed(shape, b * r * h * e, 0, (r * h * e, e, h * e))
    if kind == "padded":
        sh = r * (e + 3) + 1
        sb = h * sh + 2
        return Placed(shape, 1 + b * sb, 1, (sb, sh, e + 3))
    if kind == "reversed":
        return Placed(shape, b * h * r * e, (h - 1) * r * e + (r - 1) * e, (h * r * e, -r * e, -e))
    raise ValueError(kind)


#: Placements of (q, k, v, dout, out, dq, dk, dv) per scheme.
LAYOUTS = {
    "dense": [("dense", 0)] * 8,
    # packed_attention: q, k, v and the gradients in the slots of (B, T, 3, H, E) buffers, out
    # and its gradient (B, T, H, E)
    "packed": [("packed", 0), ("packed", 1), ("packed", 2), ("merged", 0), ("merged", 0),
               ("packed", 0), ("packed", 1), ("packed", 2)],
    "mixed": [("reversed", 0), ("padded", 0), ("packed", 2), ("padded", 0), ("padded", 0),
              ("reversed", 0), ("merged", 0), ("packed", 1)],
    "reversed": [("reversed", 0)] * 8,
}


def placements(scheme, b, h, n_q, n_k, e):
    rows = [n_q, n_k, n_k, n_q, n_q, n_q, n_k, n_k]
    return [place(kind, (b, h, r, e), slot)
            for (kind, slot), r in zip(LAYOUTS[scheme], rows, strict=True)]


def vec_flag(placed, e, itemsize):
    """1 when the kernels may copy rows in 16-byte pieces (the host's rule): whole 16-byte rows
    and 16-byte aligned first elements and strides of q, k, v and dout (buffers 256-aligned)."""
    if e * itemsize % 16:
        return 0
    for p in placed[:4]:
        stepped = [s for s, n in zip(p.strides, p.shape[:3], strict=True) if n > 1]
        if any(x * itemsize % 16 for x in (p.offset, *stepped)):
            return 0
    return 1


def emulator_io(placed, inputs, dtype):
    """The input file's bytes (q, k, v, dout buffers) for logical ``inputs``."""
    return b"".join(p.buffer(a, NP_DTYPE[dtype]).tobytes()
                    for p, a in zip(placed[:4], inputs, strict=True))


def read_results(raw, offset, placed, np_dtype, what):
    """The view of each placed operand from consecutive buffers in ``raw`` (float64), after
    checking that nothing outside the views was written (still NaN)."""
    got = []
    for p, name in zip(placed, what, strict=True):
        buf = np.frombuffer(raw, np_dtype, p.size, offset).astype(np.float64)
        offset += p.size * np.dtype(np_dtype).itemsize
        inside, rest = p.view(buf)
        assert np.all(np.isnan(rest)), f"{name}: written outside its view"
        got.append(inside)
    return got, offset


# (name, C++ type, padded head dim, causal, tensor cores) and the runs of each build:
# (dtype, B, H, L, S, E, layout scheme)
EMULATED = [
    (
        ("bf16_64_causal", "ignis::bfloat16", 64, 1, 1),
        # (200, 200): causal tiles wholly below the diagonal skip the mask
        [("bfloat16", 1, 2, 130, 70, 64, "dense"), ("bfloat16", 1, 1, 17, 40, 17, "dense"),
         ("bfloat16", 1, 1, 200, 200, 64, "dense"),
         # strided views: 16-byte copies through the strides, then element copies
         ("bfloat16", 2, 3, 33, 33, 64, "packed"), ("bfloat16", 2, 2, 31, 40, 40, "mixed")],
    ),
    (("f16_96", "ignis::float16", 96, 0, 1),
     [("float16", 1, 2, 33, 100, 80, "dense"), ("float16", 2, 2, 33, 33, 96, "packed")]),
    (("bf16_128_causal", "ignis::bfloat16", 128, 1, 1),
     [("bfloat16", 1, 1, 70, 100, 128, "dense"), ("bfloat16", 2, 2, 1, 1, 128, "reversed")]),
    (
        ("f32_64_causal", "float", 64, 1, 0),
        [("float32", 1, 2, 45, 100, 50, "dense"), ("float32", 1, 1, 40, 9, 64, "dense"),
         ("float32", 2, 3, 33, 33, 64, "packed"), ("float32", 2, 2, 31, 20, 33, "mixed")],
    ),
    (("f64_32", "double", 32, 0, 0),
     [("float64", 1, 1, 33, 31, 32, "dense"), ("float64", 3, 2, 31, 31, 32, "reversed")]),
]


@pytest.fixture(scope="module")
def emulator(tmp_path_factory):
    """A builder of the attention harness (each configuration compiled once per module)."""
    return tc_emulator.Builder(tmp_path_factory.mktemp("attention-emulator"), "attn", ATTN_PART)


@pytest.mark.parametrize("build,runs", EMULATED, ids=[b[0] for b, _ in EMULATED])
@pytest.mark.exhaustive
def test_kernels_on_the_host_emulator(emulator, tmp_path, build, runs):
    name, ctype, dim, causal, tc = build
    exe = emulator.build(name, EMU_T=ctype, EMU_D=dim, EMU_CAUSAL=causal, EMU_TC=tc)
    for dtype, b, h, n_q, n_k, e, scheme in runs:
        assert e <= dim
        run_emulated(exe, tmp_path, name, causal, tc, dtype, b, h, n_q, n_k, e, scheme, dim)


# The tensor-core backward's tile variants (attention.BWD_TILE_VARIANTS), each through the same
# harness (forwards, two-pass and fused backward). Per build, (dtype, B, H, L, S, E, scheme) runs
# that cover for 64- and 128-key blocks: several key blocks with a partial last one, partial
# 32- and 64-query tiles, causal with L < S and L > S (queries that see no key), E below the
# padded head dim, E odd (dQ by single atomics) and not a multiple of 8 (element copies), strided
# views, and every head dim (the fused dQ product splits 32 and 96 columns unevenly over 8 warps).
TILE_BUILDS = [
    (
        ("bf16_64_causal", "ignis::bfloat16", 64, 1),
        [("bfloat16", 1, 2, 100, 300, 64, "dense"), ("bfloat16", 1, 1, 150, 70, 33, "dense")],
    ),
    (("f16_32", "ignis::float16", 32, 0), [("float16", 2, 1, 45, 140, 20, "mixed")]),
    (("f16_96_causal", "ignis::float16", 96, 1), [("float16", 1, 1, 70, 200, 80, "dense")]),
    (("bf16_128", "ignis::bfloat16", 128, 0), [("bfloat16", 1, 2, 65, 130, 128, "packed")]),
]


def _emulated_variants():
    """One name per variant the emulator tells apart (it ignores the launch bounds)."""
    seen = {}
    for name, tiles in cuda_attention.BWD_TILE_VARIANTS.items():
        seen.setdefault(tiles._replace(min_blocks=0), name)
    return list(seen.values())


def build_with_tiles(emulator, build, variant):
    """The harness build ``build`` (of TILE_BUILDS) with the backward tiles of ``variant``."""
    name, ctype, dim, causal = build
    tiles = cuda_attention.bwd_tiles(variant, dim)
    return emulator.build(
        f"{name}_{variant}",
        EMU_T=ctype,
        EMU_D=dim,
        EMU_CAUSAL=causal,
        EMU_TC=1,
        EMU_KN=tiles.keys,
        EMU_KM=tiles.queries,
        EMU_KVREG=int(tiles.kv_regs),
        EMU_RED2=int(tiles.red_pairs),
    )


@pytest.mark.parametrize("variant", _emulated_variants())
@pytest.mark.parametrize("build,runs", TILE_BUILDS, ids=[b[0] for b, _ in TILE_BUILDS])
@pytest.mark.exhaustive
def test_backward_tile_variants_on_the_host_emulator(emulator, tmp_path, build, runs, variant):
    exe = build_with_tiles(emulator, build, variant)
    name, _, dim, causal = build
    for dtype, b, h, n_q, n_k, e, scheme in runs:
        what = f"{name} {variant}"
        run_emulated(exe, tmp_path, what, causal, 1, dtype, b, h, n_q, n_k, e, scheme, dim, variant)


# A variant that is wrong is caught: faults built into a copy of attention.cu.
# fault -> (text, replacement, variant, build of TILE_BUILDS, run)
TILE_FAULTS = {
    # the first warp takes the last warp's dQ columns: the first rows' first columns are never
    # added, their last ones twice
    "dq_columns": (
        "c0 = (warp / ROWS) * CW;",
        "c0 = ((warp == 0 ? WARPS - 1 : warp) / ROWS) * CW;",
        "k128q64w8",
        0,
        ("bfloat16", 1, 2, 100, 300, 64, "dense"),
    ),
    # every warp keeps the first warp's K fragments in registers
    "k_registers": (
        "load_a_frag_smem<LD>(kf[kk], ks + wk * LD + kk * 16);",
        "load_a_frag_smem<LD>(kf[kk], ks + kk * 16);",
        "k128q64w8-kv-red2",
        0,
        ("bfloat16", 1, 2, 100, 300, 64, "dense"),
    ),
    # the even column's value added to both columns of a pair
    "dq_pairs": (
        "atomic_add2(dst + col, dqa[nt][2 * h], dqa[nt][2 * h + 1]);",
        "atomic_add2(dst + col, dqa[nt][2 * h], dqa[nt][2 * h]);",
        "k128q32w8-b2-red2",
        0,
        ("bfloat16", 1, 2, 100, 300, 64, "dense"),
    ),
}


def _inject(src, old, new, fault, once=True):
    """Replace ``old`` (one occurrence, or with ``once=False`` every one of at least one) in the
    copied attention.cu / attention.cuh."""
    texts = {f: (src / f).read_text() for f in ("attention.cu", "attention.cuh")}
    found = sum(t.count(old) for t in texts.values())
    assert found == 1 if once else found >= 1, fault
    for f, text in texts.items():
        (src / f).write_text(text.replace(old, new))


@pytest.mark.parametrize("fault", sorted(TILE_FAULTS))
@pytest.mark.exhaustive
def test_a_faulty_tile_variant_is_caught(tmp_path, fault):
    import shutil

    src = tmp_path / "cuda_src"
    shutil.copytree(_sources.cuda_src_dir(), src)
    old, new, variant, which, run = TILE_FAULTS[fault]
    _inject(src, old, new, fault)
    build = TILE_BUILDS[which][0]
    exe = build_with_tiles(
        tc_emulator.Builder(tmp_path, "attn", ATTN_PART, cuda_src=src), build, variant
    )
    name, _, dim, causal = build
    with pytest.raises(AssertionError, match=r"max error|pattern differs"):
        run_emulated(exe, tmp_path, name, causal, 1, *run, dim, variant)


def test_layout_schemes_exercise_both_copy_paths():
    # The strided runs above cover 16-byte copies through strides and element copies.
    assert vec_flag(placements("packed", 2, 3, 33, 33, 64), 64, 2) == 1
    assert vec_flag(placements("reversed", 2, 2, 1, 1, 128), 128, 2) == 1
    assert vec_flag(placements("mixed", 2, 2, 31, 40, 40), 40, 2) == 0
    # placement arithmetic: the views of a packed buffer are disjoint and cover it
    slots = [place("packed", (2, 3, 5, 8), s).index().ravel() for s in range(3)]
    assert sorted(np.concatenate(slots)) == list(range(2 * 5 * 3 * 3 * 8))


def run_emulated(
    exe,
    tmp_path,
    name,
    causal,
    tc,
    dtype,
    b,
    h,
    n_q,
    n_k,
    e,
    scheme="dense",
    dim=None,
    tiles="k64q32w4",
):
    """Run one harness build on random inputs in the placements of ``scheme`` and compare every
    output with the reference (``dim``: the build's head dim, default the padded ``e``;
    ``tiles``: its BWD_TILE_VARIANTS entry)."""
    rng = np.random.default_rng(n_q * 1000 + n_k)
    shapes = [(b, h, n_q, e), (b, h, n_k, e), (b, h, n_k, e), (b, h, n_q, e)]
    q, k, v, g = (rounded(rng.standard_normal(s), dtype) for s in shapes)
    placed = placements(scheme, b, h, n_q, n_k, e)
    inp, outp = tmp_path / "in.bin", tmp_path / "out.bin"
    inp.write_bytes(emulator_io(placed, (q, k, v, g), dtype))
    scale = 1 / math.sqrt(e)
    vec = vec_flag(placed, e, np.dtype(NP_DTYPE[dtype]).itemsize)
    ops = [x for p in placed for x in p.args()]
    what = f"{name} {dtype} {scheme} {(b, h, n_q, n_k, e)}"
    smem = [0, 0]
    if tc:  # the host's sizes: the harness checks them against the kernels'
        d = dim or cuda_attention.padded_head_dim(e)
        variant = cuda_attention.bwd_tiles(tiles, d)
        smem = [cuda_attention.dkdv_smem(variant, d, fused) for fused in (False, True)]
    tc_emulator.run(exe, [inp, outp, b, h, n_q, n_k, e, repr(scale), vec, *smem, *ops], what)
    raw = outp.read_bytes()
    t = NP_DTYPE[dtype]
    stat = np.float64 if dtype == "float64" else np.float32

    def stats(offset):  # lse or its 16-rows-per-warp twin, and the offset after it
        n = b * h * n_q
        got = np.frombuffer(raw, stat, n, offset).astype(np.float64).reshape(b, h, n_q)
        return got, offset + n * np.dtype(stat).itemsize

    (out,), offset = read_results(raw, 0, placed[4:5], t, ["out"])
    lse, offset = stats(offset)
    (dq, dk, dv), offset = read_results(raw, offset, placed[5:], t, ["dq", "dk", "dv"])
    n = b * h * e
    dec = np.frombuffer(raw, t, n, offset).astype(np.float64).reshape(b, h, 1, e)
    offset += n * np.dtype(t).itemsize
    want_out, want_lse, grads = ref_attention(q, k, v, bool(causal), scale, grad=g)
    stat_dtype = "float64" if dtype == "float64" else "float32"
    assert_close(out, want_out, dtype, f"{what} out")
    assert_close(lse, want_lse, stat_dtype, f"{what} lse")
    if tc:
        # the 16-rows-per-warp forward's out and lse and the fused backward's dq, dk, dv
        (out16,), offset = read_results(raw, offset, placed[4:5], t, ["out (16 rows per warp)"])
        lse16, offset = stats(offset)
        fused, offset = read_results(raw, offset, placed[5:], t, ["fused dq", "dk", "dv"])
        assert_close(out16, want_out, dtype, f"{what} out (16 rows per warp)")
        assert_close(lse16, want_lse, stat_dtype, f"{what} lse (16 rows per warp)")
        for name_, got, want in zip(("dq", "dk", "dv"), fused, grads, strict=True):
            assert_close(got, want, dtype, f"{what} {name_} (fused backward)")
    assert offset == len(raw)
    for name_, got, want in zip(("dq", "dk", "dv"), (dq, dk, dv), grads, strict=True):
        assert_close(got, want, dtype, f"{what} {name_}")
    want_dec = ref_attention(q[:, :, :1], k, v, False, scale)[0]
    assert_close(dec, want_dec, dtype, f"{what} decode")


# The comparisons can fail: a wrong tensor-core primitive (a fault built into the emulator, see
# tc_emulator.PRELUDE) is caught.
@pytest.mark.parametrize("fault", [1, 2, 3], ids=["mma-drops-a-k-term",
                                                  "ldmatrix-trans-does-not-transpose",
                                                  "cp-async-wait-leaves-a-group"])
@pytest.mark.exhaustive
def test_a_faulty_emulated_primitive_is_caught(emulator, tmp_path, fault):
    exe = emulator.build(f"bf16_64_causal_fault{fault}", EMU_T="ignis::bfloat16", EMU_D=64,
                         EMU_CAUSAL=1, EMU_TC=1, EMU_FAULT=fault)
    with pytest.raises(AssertionError, match=r"max error|pattern differs|emulator: "):
        run_emulated(exe, tmp_path, "bf16_64_causal", 1, 1, "bfloat16", 1, 1, 17, 40, 17, dim=64)


# A kernel that gets the strides wrong is caught: faults in the index arithmetic of the strided
# operands, built into a copy of attention.cu.
# fault -> (text, replacement, layout scheme that tells them apart)
STRIDE_FAULTS = {
    # every head of a batch taken as the batch's first
    "head_offset": ("return (int64)b * s.sb + (int64)h * s.sh;", "return (int64)b * s.sb;",
                    "packed"),
    # the rows of q read as if dense (row stride E)
    "q_rows": ("load_tile16<T, BM, D, LD, kTcThreads>(qs, q + head_offset(lay.q, bh, lay.heads), "
               "m0, L, E,\n                                        lay.q.st, vec16);",
               "load_tile16<T, BM, D, LD, kTcThreads>(qs, q + head_offset(lay.q, bh, lay.heads), "
               "m0, L, E,\n                                        E, vec16);", "packed"),
    # dK written with dV's row stride (equal in the packed layout, not in the mixed one)
    "dk_rows": ("dka, n0 + wk, S, E, lay.dk.st, scale,", "dka, n0 + wk, S, E, lay.dv.st, scale,",
                "mixed"),
}


@pytest.mark.parametrize("fault", sorted(STRIDE_FAULTS))
@pytest.mark.exhaustive
def test_a_stride_fault_is_caught(tmp_path, fault):
    import shutil

    src = tmp_path / "cuda_src"
    shutil.copytree(_sources.cuda_src_dir(), src)
    old, new, scheme = STRIDE_FAULTS[fault]
    _inject(src, old, new, fault)
    builder = tc_emulator.Builder(tmp_path, "attn", ATTN_PART, cuda_src=src)
    exe = builder.build("bf16_64_causal", EMU_T="ignis::bfloat16", EMU_D=64, EMU_CAUSAL=1, EMU_TC=1)
    # (a wrong result, a write outside the view, or a write outside the buffer that kills the
    # emulator: every failure message of the run names it)
    with pytest.raises(AssertionError, match=f"bf16_64_causal bfloat16 {scheme}"):
        run_emulated(exe, tmp_path, "bf16_64_causal", 1, 1, "bfloat16", 2, 3, 33, 33, 64, scheme)
