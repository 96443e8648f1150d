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


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_kernel_parameters_have_known_types(dtype):
    # Launch arguments are packed from the parameter types read in the source: every one must
    # be understood (a dependent type such as acc_type<T>::type would not be).
    from ignis._signature import parse_kernel_params

    src = _sources.read_source("attention.cu")
    for name in cuda_attention.kernel_names(dtype, 64, True).values():
        params = parse_kernel_params(src, name)
        assert params and all(p.kind in ("pointer", "int", "float") for p in params), (name, params)


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
def test_long_sequences_on_gpu_match_torch(dtype, causal, e, path, monkeypatch):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs torch with CUDA")
    if path == "fallback":  # the 16-rows-per-warp forward and the two-pass backward
        monkeypatch.setattr(cuda_attention, "FWD_ROWS_PER_WARP", 16)
        monkeypatch.setattr(cuda_attention, "BWD_FUSED_DQ", False)
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
    # Kernels above 48 KiB of shared memory opt in per function: record the request.
    g.optin = []
    monkeypatch.setattr(
        fake_gpu.cu,
        "cuFuncSetAttribute",
        lambda fn, attr, value: g.optin.append((fn.name, value)),
        raising=False,
    )
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
def test_launches_over_a_fake_driver(fake, dtype, kind, rows_per_warp, monkeypatch):
    import struct

    # The earlier scalar float32/float64 kernels; the tiled ones have test_nn_attention_simt.py.
    monkeypatch.setattr(cuda_attention, "SIMT_TILED", False)
    monkeypatch.setattr(cuda_attention, "FWD_ROWS_PER_WARP", rows_per_warp)
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
    ignis.nn.attention_backward(out, q, k, k, out, lse, causal=True, scale=0.5)
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
            "ignis::attn::flash_bwd_fused_tc<ignis::bfloat16, 96, true>",
            (2 * 64 + 4 * 32) * (96 + 8) * 2 + 32 * 72 * 2 + 4 * 32 * 4,
        ) in fake.optin
        fake.launches.clear()
        monkeypatch.setattr(cuda_attention, "BWD_FUSED_DQ", False)
        ignis.nn.attention_backward(out, q, k, k, out, lse, causal=True, scale=0.5)
        names = [n.split("<")[0] for n, *_ in fake.launches]
    bwd = kind[:2] if kind.startswith("tc") else kind
    assert names == [
        "ignis::attn::attn_row_dot",
        f"ignis::attn::flash_bwd_dkdv_{bwd}",
        f"ignis::attn::flash_bwd_dq_{bwd}",
    ]
    fake.launches.clear()
    q1 = ignis.empty((2, 3, 1, 80), dtype=dtype, device="cuda:0")
    ignis.nn.decode_attention(q1, k, k, 65)
    (n1, g1, *_), (n2, g2, *_) = fake.launches
    assert n1.startswith("ignis::attn::decode_partial<") and n2.startswith(
        "ignis::attn::decode_combine<"
    )
    assert g1 == (2, 6, 1) and g2 == (6, 1, 1)  # 65 rows: two splits of at least 64 rows


# --- the kernels on a host emulator (no GPU needed) ---------------------------------------------
# The CUDA kernels of attention.cu compiled as host C++ against an emulation of the CUDA features
# they use (threads as coroutines, barriers, warp shuffles, ldmatrix, mma, cp.async): their index
# math, masking of partial tiles and pipelining run here exactly as written.

ATTN_PART = r"""
// The attention kernels of attention.cu on the emulator of tc_emulator.py.
//
// Build: c++ -std=c++17 -O1 -I<cuda_src> -DEMU_T=<type> -DEMU_D=<head dim> -DEMU_CAUSAL=<0|1>
//        -DEMU_TC=<0|1>
// Run:   emulator <input> <output> bh L S E scale       (input: q, k, v, dout; output: out,
//        lse, dq, dk, dv of attention and the decode attention of each head's first query over
//        all S keys, all raw little-endian)
#define IGNIS_ATTN_HOST_EMULATION 1

namespace ignis {
namespace attn {
inline unsigned char* dynamic_smem() { return ::emu::dyn_smem; }
inline void require_smem(unsigned bytes) {
  if (bytes > ::emu::dyn_smem_size) ::emu::die("kernel trapped: not enough dynamic shared memory");
}
}  // namespace attn
}  // namespace ignis

#include "attention.cu"

template <class P> P* aligned(size_t n) {
  void* p = std::aligned_alloc(256, ((n * sizeof(P) + 255) / 256) * 256 + 256);
  return (P*)p;
}

int main(int argc, char** argv) {
  using namespace ignis;
  using namespace ignis::attn;
  typedef EMU_T T;
  typedef std::conditional<std::is_same<T, double>::value, double, float>::type LT;
  if (argc != 8) emu::die("usage: emulator <input> <output> bh L S E scale");
  const int bh = std::atoi(argv[3]), L = std::atoi(argv[4]), S = std::atoi(argv[5]);
  const int E = std::atoi(argv[6]);
  const double scale = std::atof(argv[7]);
  const size_t nq = (size_t)bh * L * E, nk = (size_t)bh * S * E;
  T *q = aligned<T>(nq), *k = aligned<T>(nk), *v = aligned<T>(nk), *dout = aligned<T>(nq);
  FILE* in = std::fopen(argv[1], "rb");
  if (!in || std::fread(q, sizeof(T), nq, in) != nq || std::fread(k, sizeof(T), nk, in) != nk ||
      std::fread(v, sizeof(T), nk, in) != nk || std::fread(dout, sizeof(T), nq, in) != nq)
    emu::die("short input");
  std::fclose(in);
  for (auto* p : {(const void*)q, (const void*)dout})
    emu::readable.push_back({(const unsigned char*)p, (const unsigned char*)p + nq * sizeof(T)});
  for (auto* p : {(const void*)k, (const void*)v})
    emu::readable.push_back({(const unsigned char*)p, (const unsigned char*)p + nk * sizeof(T)});
  T *out = aligned<T>(nq), *dq = aligned<T>(nq), *dk = aligned<T>(nk), *dv = aligned<T>(nk);
  LT *lse = aligned<LT>((size_t)bh * L), *dvec = aligned<LT>((size_t)bh * L);
  std::mt19937 rng(1234);
  [[maybe_unused]] const int vec = (E % 8 == 0) ? 1 : 0;  // the buffers are 256-byte aligned
  constexpr int D = EMU_D;
  constexpr bool C = EMU_CAUSAL != 0;
  auto cdiv = [](int a, int b) { return (unsigned)((a + b - 1) / b); };
#if EMU_TC
  const float sl2 = (float)(scale * 1.4426950408889634);
  // The 16-rows-per-warp fallback first (its results are written last), then the default
  // 32-rows-per-warp forward whose out and lse feed the backward.
  T* out16 = aligned<T>(nq);
  LT* lse16 = aligned<LT>((size_t)bh * L);
  emu::launch(cdiv(L, kFwdBM), bh, kTcThreads, 4 * kFwdBN * (D + 8) * 2, [&] {
    flash_fwd_tc<T, D, C>(q, k, v, out16, lse16, L, S, E, sl2, vec, 0);
  }, rng);
  emu::launch(cdiv(L, kFwd2BM), bh, kTcThreads, (kFwd2BM + 4 * kFwd2BN) * (D + 8) * 2, [&] {
    flash_fwd_tc_m32<T, D, C>(q, k, v, out, lse, L, S, E, sl2, vec, 0);
  }, rng);
  emu::launch(cdiv(bh * L, 8), 1, 256, 0,
              [&] { attn_row_dot<T, float>(dout, out, dvec, (int64)bh * L, E); }, rng);
  const size_t dkdv_smem = (2 * kBwdKN + 4 * kBwdKM) * (D + 8) * 2 + 4 * kBwdKM * 4;
  emu::launch(cdiv(S, kBwdKN), bh, kTcThreads, dkdv_smem, [&] {
    flash_bwd_dkdv_tc<T, D, C>(q, k, v, dout, lse, dvec, dk, dv, L, S, E, (float)scale, sl2, vec,
                               0);
  }, rng);
  emu::launch(cdiv(L, kBwdQM), bh, kTcThreads, 4 * kBwdQN * (D + 8) * 2, [&] {
    flash_bwd_dq_tc<T, D, C>(q, k, v, dout, lse, dvec, dq, L, S, E, (float)scale, sl2, vec, 0);
  }, rng);
  // The fused backward (dQ through float32 atomics), its results written last.
  T *dq_f = aligned<T>(nq), *dk_f = aligned<T>(nk), *dv_f = aligned<T>(nk);
  float* dq_acc = aligned<float>(nq);
  for (size_t i = 0; i < nq; ++i) dq_acc[i] = 0.f;
  const size_t fused_smem = dkdv_smem + kBwdKM * (kBwdKN + 8) * 2;
  emu::launch(cdiv(S, kBwdKN), bh, kTcThreads, fused_smem, [&] {
    flash_bwd_fused_tc<T, D, C>(q, k, v, dout, lse, dvec, dk_f, dv_f, dq_acc, L, S, E,
                                (float)scale, sl2, vec, 0);
  }, rng);
  emu::launch(3, 1, 64, 0, [&] { attn_dq_finish<T>(dq_acc, dq_f, (int64)nq, (float)scale); }, rng);
#else
  emu::launch(cdiv(L, kSimtB), bh, kSimtThreads, kSimtB * (3 * D + 1) * sizeof(T), [&] {
    flash_fwd_simt<T, D, C>(q, k, v, out, lse, L, S, E, (T)scale, 0);
  }, rng);
  emu::launch(cdiv(bh * L, 8), 1, 256, 0,
              [&] { attn_row_dot<T, LT>(dout, out, dvec, (int64)bh * L, E); }, rng);
  emu::launch(cdiv(S, kSimtB), bh, kSimtThreads, kSimtB * (4 * D + 2) * sizeof(T), [&] {
    flash_bwd_dkdv_simt<T, D, C>(q, k, v, dout, lse, dvec, dk, dv, L, S, E, (T)scale, 0);
  }, rng);
  emu::launch(cdiv(L, kSimtB), bh, kSimtThreads, kSimtB * (4 * D + 2) * sizeof(T), [&] {
    flash_bwd_dq_simt<T, D, C>(q, k, v, dout, lse, dvec, dq, L, S, E, (T)scale, 0);
  }, rng);
#endif
  // Decode: query row 0 of each (batch, head) over all S cache rows, in splits of 16 rows.
  typedef typename acc_type<T>::type A;
  T* q0 = aligned<T>((size_t)bh * E);
  for (int b = 0; b < bh; ++b)
    for (int e = 0; e < E; ++e) q0[(size_t)b * E + e] = q[(size_t)b * L * E + e];
  const int chunk = 16, splits = (int)cdiv(S, chunk);
  A *pm = aligned<A>((size_t)bh * splits), *pl = aligned<A>((size_t)bh * splits);
  A* po = aligned<A>((size_t)bh * splits * D);
  T* dec = aligned<T>((size_t)bh * E);
  emu::launch(splits, bh, kDecodeThreads, 0, [&] {
    decode_partial<T, A, D>(q0, k, v, pm, pl, po, S, S, chunk, E, (A)scale);
  }, rng);
  emu::launch(bh, 1, kDecodeThreads, 0,
              [&] { decode_combine<T, A>(pm, pl, po, dec, splits, D, E); }, rng);
  FILE* o = std::fopen(argv[2], "wb");
  std::fwrite(out, sizeof(T), nq, o);
  std::fwrite(lse, sizeof(LT), (size_t)bh * L, o);
  std::fwrite(dq, sizeof(T), nq, o);
  std::fwrite(dk, sizeof(T), nk, o);
  std::fwrite(dv, sizeof(T), nk, o);
  std::fwrite(dec, sizeof(T), (size_t)bh * E, o);
#if EMU_TC
  std::fwrite(out16, sizeof(T), nq, o);
  std::fwrite(lse16, sizeof(LT), (size_t)bh * L, o);
  std::fwrite(dq_f, sizeof(T), nq, o);
  std::fwrite(dk_f, sizeof(T), nk, o);
  std::fwrite(dv_f, sizeof(T), nk, o);
#endif
  std::fclose(o);
  return 0;
}
"""

# (name, C++ type, padded head dim, causal, tensor cores) and the runs of each build:
# (dtype, batch*heads, L, S, E)
EMULATED = [
    (
        ("bf16_64_causal", "ignis::bfloat16", 64, 1, 1),
        # (200, 200): causal tiles wholly below the diagonal skip the mask
        [("bfloat16", 2, 130, 70, 64), ("bfloat16", 1, 17, 40, 17), ("bfloat16", 1, 200, 200, 64)],
    ),
    (("f16_96", "ignis::float16", 96, 0, 1), [("float16", 2, 33, 100, 80)]),
    (("bf16_128_causal", "ignis::bfloat16", 128, 1, 1), [("bfloat16", 1, 70, 100, 128)]),
    (
        ("f32_64_causal", "float", 64, 1, 0),
        [("float32", 2, 45, 100, 50), ("float32", 1, 40, 9, 64)],
    ),
    (("f64_32", "double", 32, 0, 0), [("float64", 1, 33, 31, 32)]),
]


@pytest.fixture(scope="module")
def emulator(tmp_path_factory):
    """A builder of the attention harness (each configuration compiled once per module)."""
    return tc_emulator.Builder(tmp_path_factory.mktemp("attention-emulator"), "attn", ATTN_PART)


@pytest.mark.parametrize("build,runs", EMULATED, ids=[b[0] for b, _ in EMULATED])
def test_kernels_on_the_host_emulator(emulator, tmp_path, build, runs):
    name, ctype, dim, causal, tc = build
    exe = emulator.build(name, EMU_T=ctype, EMU_D=dim, EMU_CAUSAL=causal, EMU_TC=tc)
    for dtype, bh, n_q, n_k, e in runs:
        assert e <= dim
        run_emulated(exe, tmp_path, name, causal, tc, dtype, bh, n_q, n_k, e)


def run_emulated(exe, tmp_path, name, causal, tc, dtype, bh, n_q, n_k, e):
    """Run one harness build on random inputs and compare every output with the reference."""
    rng = np.random.default_rng(n_q * 1000 + n_k)
    shapes = [(bh, n_q, e), (bh, n_k, e), (bh, n_k, e), (bh, n_q, e)]
    q, k, v, g = (rounded(rng.standard_normal(s), dtype) for s in shapes)
    inp, outp = tmp_path / "in.bin", tmp_path / "out.bin"
    inp.write_bytes(b"".join(a.astype(NP_DTYPE[dtype]).tobytes() for a in (q, k, v, g)))
    scale = 1 / math.sqrt(e)
    tc_emulator.run(exe, [inp, outp, bh, n_q, n_k, e, repr(scale)], f"{name} {dtype}")
    raw = outp.read_bytes()
    stat = np.float64 if dtype == "float64" else np.float32
    parts, offset = [], 0
    for t, shape in (
        (NP_DTYPE[dtype], shapes[0]),
        (stat, shapes[0][:2]),
        (NP_DTYPE[dtype], shapes[0]),
        (NP_DTYPE[dtype], shapes[1]),
        (NP_DTYPE[dtype], shapes[1]),
        (NP_DTYPE[dtype], (bh, 1, e)),
        # the tensor-core builds also write the 16-rows-per-warp forward's out and lse and
        # the fused backward's dq, dk, dv
        *(
            (
                (NP_DTYPE[dtype], shapes[0]),
                (stat, shapes[0][:2]),
                (NP_DTYPE[dtype], shapes[0]),
                (NP_DTYPE[dtype], shapes[1]),
                (NP_DTYPE[dtype], shapes[1]),
            )
            if tc
            else ()
        ),
    ):
        n = int(np.prod(shape))
        parts.append(np.frombuffer(raw, t, n, offset).astype(np.float64).reshape(shape))
        offset += n * np.dtype(t).itemsize
    assert offset == len(raw)
    out, lse, dq, dk, dv, dec = parts[:6]
    want_out, want_lse, grads = ref_attention(q, k, v, bool(causal), scale, grad=g)
    stat_dtype = "float64" if dtype == "float64" else "float32"
    assert_close(out, want_out, dtype, f"{name} out")
    assert_close(lse, want_lse, stat_dtype, f"{name} lse")
    if tc:
        out16, lse16, *fused = parts[6:]
        assert_close(out16, want_out, dtype, f"{name} out (16 rows per warp)")
        assert_close(lse16, want_lse, stat_dtype, f"{name} lse (16 rows per warp)")
        for what, got, want in zip(("dq", "dk", "dv"), fused, grads, strict=True):
            assert_close(got, want, dtype, f"{name} {what} (fused backward)")
    for what, got, want in zip(("dq", "dk", "dv"), (dq, dk, dv), grads, strict=True):
        assert_close(got, want, dtype, f"{name} {what}")
    want_dec = ref_attention(q[:, :1], k, v, False, scale)[0]
    assert_close(dec, want_dec, dtype, f"{name} decode")


# The comparisons can fail: a wrong tensor-core primitive (a fault built into the emulator, see
# tc_emulator.PRELUDE) is caught.
@pytest.mark.parametrize("fault", [1, 2, 3], ids=["mma-drops-a-k-term",
                                                  "ldmatrix-trans-does-not-transpose",
                                                  "cp-async-wait-leaves-a-group"])
def test_a_faulty_emulated_primitive_is_caught(emulator, tmp_path, fault):
    exe = emulator.build(f"bf16_64_causal_fault{fault}", EMU_T="ignis::bfloat16", EMU_D=64,
                         EMU_CAUSAL=1, EMU_TC=1, EMU_FAULT=fault)
    with pytest.raises(AssertionError, match=r"max error|pattern differs|emulator: "):
        run_emulated(exe, tmp_path, "bf16_64_causal", 1, 1, "bfloat16", 1, 17, 40, 17)
