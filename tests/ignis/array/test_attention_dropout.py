"""Dropout inside the fused attention kernels (ignis.nn.attention(..., dropout=...)).

The reference is written here from the documented counter mapping (NumPy Philox of
ignis.random.philox4x32, not the code under test): element (bh, i, j) is lane 2 (i % 2) + j % 2
of block offset + (bh ceil(L/2) + i // 2) ceil(S/2) + j // 2, kept when (word >> 8) >=
ceil(float32(p) 2**24); P is dropped before P @ V and kept ones scaled by 1 / (1 - p).
"""

from __future__ import annotations

import math

import ignis.nn
import numpy as np
import pytest
from ignis._array._cuda_backend import attention as cuda_attention

import ignis
from ignis import _sources

# --- the reference ------------------------------------------------------------------------------


def ref_mask(seed, offset, p, b, h, n_q, n_k):
    """(B, H, L, S) keep mask, element by element from the mapping (slow, small shapes)."""
    l2, s2 = -(-n_q // 2), -(-n_k // 2)
    threshold = math.ceil(float(np.float32(p)) * 2**24)
    bh, i, j = np.meshgrid(np.arange(b * h), np.arange(n_q), np.arange(n_k), indexing="ij")
    block = offset + (bh * l2 + i // 2) * s2 + j // 2
    lane = 2 * (i % 2) + j % 2
    counter = np.zeros(block.shape + (4,), dtype=np.uint64)
    counter[..., 0] = block & 0xFFFFFFFF
    counter[..., 1] = block >> 32
    words = ignis.random.philox4x32(counter, (seed & 0xFFFFFFFF, seed >> 32))
    word = np.take_along_axis(words, lane[..., None], axis=-1)[..., 0]
    return ((word >> 8) >= threshold).reshape(b, h, n_q, n_k)


def ref_attention(q, k, v, g, keep, p, causal, scale):
    """out, lse, dq, dk, dv in float64 with the dropout factors Z = keep / (1 - p)."""
    q, k, v, g = (np.asarray(x, dtype=np.float64) for x in (q, k, v, g))
    n_q, n_k = q.shape[2], k.shape[2]
    s = q @ np.swapaxes(k, -1, -2) * scale
    if causal:
        vis = np.arange(n_k)[None, :] <= np.arange(n_q)[:, None] + (n_k - n_q)
        s = np.where(vis, s, -np.inf)
    m = s.max(-1, keepdims=True)
    e = np.exp(s - m)
    lse = (m + np.log(e.sum(-1, keepdims=True)))[..., 0]
    pr = e / e.sum(-1, keepdims=True)
    z = keep / (1.0 - p) if p < 1 else np.zeros(keep.shape)
    out = (pr * z) @ v
    dpd = g @ np.swapaxes(v, -1, -2)
    d = (g * out).sum(-1, keepdims=True)
    ds = pr * (dpd * z - d) * scale
    return out, lse, ds @ k, np.swapaxes(ds, -1, -2) @ q, np.swapaxes(pr * z, -1, -2) @ g


def _relative_error(got, ref) -> float:
    """max |got - ref| over max(1, max |ref|), in float64."""
    got = np.asarray(got).astype(np.float64)
    return float(np.abs(got - ref).max() / max(1.0, np.abs(ref).max()))


def _arrays(rng, shapes, dtype, device="cpu"):
    return [ignis.asarray(rng.standard_normal(s), dtype=dtype, device=device) for s in shapes]


# --- CPU ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("n_q,n_k", [(7, 9), (8, 8), (1, 5), (6, 1)])
def test_mask_is_the_documented_counter_mapping(n_q, n_k):
    from ignis._array._attention_dropout import AttentionDropout, keep_mask

    for seed, offset in ((0, 0), (7, 123), (2**40 + 3, 2**33 - 1)):
        got = keep_mask(AttentionDropout(0.3, seed, offset), (2, 3, n_q, n_k))
        assert got.shape == (2, 3, n_q, n_k)
        np.testing.assert_array_equal(got, ref_mask(seed, offset, 0.3, 2, 3, n_q, n_k))


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_keep_fraction_is_one_minus_p(p):
    q, k = ignis.empty((4, 4, 64, 8)), ignis.empty((4, 4, 63, 8))
    drop = ignis.nn.attention_dropout(p, q, k, seed=11, offset=5)
    from ignis._array._attention_dropout import keep_mask

    keep = keep_mask(drop, (4, 4, 64, 63))
    n = keep.size
    # a binomial's mean within 5 standard deviations
    assert abs(keep.mean() - (1 - p)) < 5 * math.sqrt(p * (1 - p) / n)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_cpu_output_and_grads_equal_the_reference(causal, dtype):
    rng = np.random.default_rng(3)
    b, h, n_q, n_k, e = 2, 3, 7, 9, 16
    q, k, v, g = _arrays(
        rng, [(b, h, n_q, e), (b, h, n_k, e), (b, h, n_k, e), (b, h, n_q, e)], dtype
    )
    p, scale = 0.25, 0.3
    drop = ignis.nn.attention_dropout(p, q, k, seed=99, offset=1000)
    out, lse = ignis.nn.attention(q, k, v, causal=causal, scale=scale, dropout=drop)
    dq, dk, dv = ignis.nn.attention_backward(
        g, q, k, v, out, lse, causal=causal, scale=scale, dropout=drop
    )
    keep = ref_mask(99, 1000, p, b, h, n_q, n_k)
    want = ref_attention(q, k, v, g, keep, p, causal, scale)
    tol = 1e-12 if dtype == "float64" else 2e-5
    for got, ref in zip((out, lse, dq, dk, dv), want, strict=True):
        np.testing.assert_allclose(np.asarray(got), ref, rtol=tol, atol=tol)
    assert 0 < keep.mean() < 1


def test_p_zero_is_no_dropout():
    rng = np.random.default_rng(0)
    q, k, v = _arrays(rng, [(1, 2, 5, 8)] * 3, "float64")
    assert ignis.nn.attention_dropout(0.0, q, k) is None
    assert ignis.nn.attention_dropout(0.0, q, k, seed=1, offset=0) is None
    state = ignis.random.get_state()
    ignis.nn.attention_dropout(0.0, q, k)
    assert ignis.random.get_state() == state  # nothing drawn
    plain, lse0 = ignis.nn.attention(q, k, v, causal=True)
    zero = ignis.nn.AttentionDropout(0.0, 1, 0)
    out, lse = ignis.nn.attention(q, k, v, causal=True, dropout=zero)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(plain))
    np.testing.assert_array_equal(np.asarray(lse), np.asarray(lse0))


def test_p_one_drops_everything():
    rng = np.random.default_rng(1)
    q, k, v, g = _arrays(rng, [(1, 2, 5, 8)] * 4, "float64")
    drop = ignis.nn.attention_dropout(1.0, q, k, seed=3, offset=0)
    out, lse = ignis.nn.attention(q, k, v, dropout=drop)
    assert not np.asarray(out).any()
    _, lse0 = ignis.nn.attention(q, k, v)
    np.testing.assert_array_equal(np.asarray(lse), np.asarray(lse0))  # undropped lse
    dq, dk, dv = ignis.nn.attention_backward(g, q, k, v, out, lse, dropout=drop)
    for a in (dq, dk, dv):
        assert not np.asarray(a).any()


def test_generator_draws_advance_and_fixed_streams_repeat():
    rng = np.random.default_rng(2)
    q, k, v = _arrays(rng, [(2, 2, 5, 8), (2, 2, 7, 8), (2, 2, 7, 8)], "float64")
    gen = ignis.random.Generator(42)
    a = ignis.nn.attention_dropout(0.2, q, k, generator=gen)
    assert (a.seed, a.offset) == (42, 0)
    assert gen.offset == 2 * 2 * 3 * 4  # B H ceil(L/2) ceil(S/2) blocks
    b = ignis.nn.attention_dropout(0.2, q, k, generator=gen)
    assert b.offset == 48
    out_a, _ = ignis.nn.attention(q, k, v, dropout=a)
    out_b, _ = ignis.nn.attention(q, k, v, dropout=b)
    again, _ = ignis.nn.attention(q, k, v, dropout=ignis.nn.AttentionDropout(0.2, 42, 0))
    np.testing.assert_array_equal(np.asarray(out_a), np.asarray(again))
    assert not np.array_equal(np.asarray(out_a), np.asarray(out_b))


def test_graph_state_stream_equals_the_eager_stream():
    # the capture form: (seed, base) in a device array, offset counted from the base
    rng = np.random.default_rng(5)
    q, k, v = _arrays(rng, [(1, 2, 6, 8), (1, 2, 5, 8), (1, 2, 5, 8)], "float64")
    state = ignis.asarray(np.array([9, 100], dtype=np.uint64), device="cpu")
    via_state = ignis.nn.AttentionDropout(0.4, 0, 7, state)
    eager = ignis.nn.AttentionDropout(0.4, 9, 107)
    a, _ = ignis.nn.attention(q, k, v, dropout=via_state)
    b, _ = ignis.nn.attention(q, k, v, dropout=eager)
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("p", [-0.1, 1.5, float("nan")])
def test_invalid_p_is_named(p):
    q = ignis.empty((1, 1, 4, 8))
    with pytest.raises(ValueError, match=r"attention_dropout: dropout_p must be in \[0, 1\], got"):
        ignis.nn.attention_dropout(p, q, q)


def test_bad_dropout_arguments_are_named():
    q = ignis.empty((1, 1, 4, 8))
    with pytest.raises(TypeError, match="attention_dropout: dropout_p must be a float"):
        ignis.nn.attention_dropout("0.1", q, q)
    with pytest.raises(ValueError, match="attention_dropout: give both seed and offset"):
        ignis.nn.attention_dropout(0.1, q, q, seed=1)
    with pytest.raises(ValueError, match="attention_dropout: offset must be >= 0, got -1"):
        ignis.nn.attention_dropout(0.1, q, q, seed=1, offset=-1)
    with pytest.raises(TypeError, match="attention: dropout must be an AttentionDropout"):
        ignis.nn.attention(q, q, q, dropout=0.1)
    with pytest.raises(ValueError, match=r"attention_backward: dropout.p must be in \[0, 1\]"):
        out, lse = ignis.nn.attention(q, q, q)
        ignis.nn.attention_backward(
            out, q, q, q, out, lse, dropout=ignis.nn.AttentionDropout(2.0, 0, 0)
        )


# --- the dropout twins compile (NVRTC, no GPU needed) -------------------------------------------


def _dropout_names(dtypes, dims):
    names = set()
    for dtype in dtypes:
        for e in dims:
            for causal in (False, True):
                for key, n in cuda_attention.dropout_kernel_names(dtype, e, causal).items():
                    if not key.endswith("_wgmma"):
                        names.add(n)
    return names


def test_dropout_names_are_the_twins():
    names = cuda_attention.kernel_names("bfloat16", 64, True)
    twins = cuda_attention.dropout_kernel_names("bfloat16", 64, True)
    assert twins["fwd"] == names["fwd"].replace("flash_fwd_tc_m32<", "flash_fwd_tc_m32_dropout<")
    assert twins["bwd_fused_wgmma"].startswith("ignis::attn::flash_bwd_fused_wgmma_dropout<")
    assert "rowdot" not in twins and "dq_finish" not in twins
    assert cuda_attention.DROPOUT.size == 40
    assert "static_assert(sizeof(Dropout) == 40" in _sources.read_source("attention.cuh")


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_dropout_kernels_compile_quick(arch):
    # one head dim, the 16-bit and float32 kernels of every kind
    names = _dropout_names(("bfloat16", "float32"), (64,))
    obj = ignis.compile(
        _sources.read_source("attention.cu"),
        ignis.CompileOptions(arch=arch),
        name_expressions=sorted(names),
    )
    assert set(obj.lowered_names) == names and obj.log == ""


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.exhaustive
def test_every_dropout_kernel_compiles(arch):
    names = _dropout_names(("float16", "bfloat16", "float32", "float64"), (32, 96, 128))
    for variant in cuda_attention.BWD_TILE_VARIANTS:
        for d in (64, 128):
            k = cuda_attention.kernel_names("float16", d, True, variant)
            names.update(cuda_attention.dropout_name(k[key]) for key in ("dkdv", "bwd_fused"))
    obj = ignis.compile(
        _sources.read_source("attention.cu"),
        ignis.CompileOptions(arch=arch),
        name_expressions=sorted(names),
    )
    assert set(obj.lowered_names) == names and obj.log == ""


def test_hopper_dropout_kernels_compile_for_sm90a():
    names = set()
    for dtype in ("float16", "bfloat16"):
        for d in (64, 128):
            for causal in (False, True):
                kn = cuda_attention.kernel_names(dtype, d, causal)
                names.add(cuda_attention.dropout_name(kn["bwd_fused_wgmma"]))
                for n_q in (100, 4096):
                    tiles = cuda_attention.wgmma_fwd_tiles(d, causal, n_q)
                    name = cuda_attention.wgmma_fwd_name(dtype, d, causal, tiles)
                    names.add(cuda_attention.dropout_name(name))
    obj = ignis.compile(
        _sources.read_source("attention_sm90.cu"),
        ignis.CompileOptions(arch="sm_90a"),
        name_expressions=sorted(names),
    )
    assert set(obj.lowered_names) == names and obj.log == ""


# --- GPU ----------------------------------------------------------------------------------------

# (paths: the attention settings that pick each kernel family)
GPU_PATHS = {
    "float16": [
        {},
        {"fwd_rows_per_warp": 16, "bwd_fused_dq": False},
        {"fwd_wgmma": False, "bwd_wgmma": False},
    ],
    "bfloat16": [
        {},
        {"fwd_rows_per_warp": 16, "bwd_fused_dq": False},
        {"fwd_wgmma": False, "bwd_wgmma": False},
    ],
    "float32": [{}, {"simt_tiled": False}, {"simt_fused_dq": True}],
}
GPU_CASES = [(dtype, i) for dtype, paths in GPU_PATHS.items() for i in range(len(paths))]
TOL = {"float16": 2e-2, "bfloat16": 6e-2, "float32": 2e-4}


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,path", GPU_CASES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("e", [64, 128])
@pytest.mark.parametrize("n_q,n_k", [(131, 131), (77, 203)])
def test_gpu_matches_the_reference_mask(dtype, path, causal, e, n_q, n_k, tune):
    tune(attention=GPU_PATHS[dtype][path])
    rng = np.random.default_rng(n_q + e)
    b, h, p, scale = 2, 3, 0.2, 1 / math.sqrt(e)
    shapes = [(b, h, n_q, e), (b, h, n_k, e), (b, h, n_k, e), (b, h, n_q, e)]
    host = [rng.standard_normal(s) for s in shapes]
    q, k, v, g = (ignis.asarray(x, dtype=dtype, device="cuda:0") for x in host)
    drop = ignis.nn.attention_dropout(p, q, k, seed=1234, offset=77)
    out, lse = ignis.nn.attention(q, k, v, causal=causal, scale=scale, dropout=drop)
    dq, dk, dv = ignis.nn.attention_backward(
        g, q, k, v, out, lse, causal=causal, scale=scale, dropout=drop
    )
    # the reference from the inputs as rounded to the dtype
    rounded = [np.asarray(x).astype(np.float64) for x in (q, k, v, g)]
    keep = ref_mask(1234, 77, p, b, h, n_q, n_k)
    want = ref_attention(*rounded, keep, p, causal, scale)
    tol = TOL[dtype]
    errors = {}
    for name, got, ref in zip(
        ("out", "lse", "dq", "dk", "dv"), (out, lse, dq, dk, dv), want, strict=True
    ):
        errors[name] = _relative_error(got, ref)
        assert errors[name] < tol, (name, errors[name])
    # a wrong mask is caught: another stream's output is far further off than this one's (with
    # 203 keys a row averages many values, so the gap is a few times bfloat16's tolerance only)
    other = ignis.nn.AttentionDropout(p, 1234, 78)
    out2, _ = ignis.nn.attention(q, k, v, causal=causal, scale=scale, dropout=other)
    assert _relative_error(out2, want[0]) > max(3 * tol, 5 * errors["out"])


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_gpu_equals_cpu_backend(dtype):
    rng = np.random.default_rng(8)
    shapes = [(1, 2, 65, 64), (1, 2, 33, 64), (1, 2, 33, 64), (1, 2, 65, 64)]
    host = [rng.standard_normal(s) for s in shapes]
    res = {}
    for device in ("cpu", "cuda:0"):
        q, k, v, g = (ignis.asarray(x, dtype=dtype, device=device) for x in host)
        drop = ignis.nn.AttentionDropout(0.3, 5, 9)
        out, lse = ignis.nn.attention(q, k, v, causal=True, dropout=drop)
        grads = ignis.nn.attention_backward(g, q, k, v, out, lse, causal=True, dropout=drop)
        res[device] = [np.asarray(x).astype(np.float64) for x in (out, lse, *grads)]
    tol = {"float64": 1e-10, "float32": 1e-4}.get(dtype, 5e-2)
    for a, b in zip(res["cpu"], res["cuda:0"], strict=True):
        np.testing.assert_allclose(b, a, rtol=tol, atol=tol)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("e", [64, 128])
def test_gpu_sm90_kernels_run_with_dropout(dtype, e, monkeypatch):
    dev = ignis.Device(0)
    if dev.compute_capability != (9, 0):
        pytest.skip("the wgmma kernels run on compute capability 9.0 only")
    assert cuda_attention.uses_wgmma_forward(dtype, e, dev)
    assert cuda_attention.uses_wgmma_backward(dtype, e, dev)
    seen = []
    real = cuda_attention.library_kernel

    def spy(src, name, *a, **kw):
        seen.append(name)
        return real(src, name, *a, **kw)

    monkeypatch.setattr(cuda_attention, "library_kernel", spy)
    rng = np.random.default_rng(2)
    host = [rng.standard_normal((2, 2, 200, e)) for _ in range(4)]
    q, k, v, g = (ignis.asarray(x, dtype=dtype, device="cuda:0") for x in host)
    drop = ignis.nn.AttentionDropout(0.1, 3, 0)
    out, lse = ignis.nn.attention(q, k, v, causal=True, dropout=drop)
    grads = ignis.nn.attention_backward(g, q, k, v, out, lse, causal=True, dropout=drop)
    assert any("flash_fwd_wgmma_dropout<" in n for n in seen)
    assert any("flash_bwd_fused_wgmma_dropout<" in n for n in seen)
    rounded = [np.asarray(x).astype(np.float64) for x in (q, k, v, g)]
    keep = ref_mask(3, 0, 0.1, 2, 2, 200, 200)
    want = ref_attention(*rounded, keep, 0.1, True, 1 / math.sqrt(e))
    for got, ref in zip((out, lse, *grads), want, strict=True):
        assert _relative_error(got, ref) < 6e-2


@pytest.mark.gpu
def test_gpu_no_l_by_l_allocation():
    # L = 8192: an L x L float16 matrix per head would be 128 MiB; the whole call with its
    # backward must peak far below one such matrix beyond the operands.
    b, h, n, e = 1, 2, 8192, 64
    q, k, v, g = (
        ignis.random.randn((b, h, n, e), dtype="float16", device="cuda:0") for _ in range(4)
    )
    ignis.synchronize()
    ignis.reset_peak_memory_stats()
    base = ignis.memory_stats()["current_bytes"]
    drop = ignis.nn.attention_dropout(0.1, q, k)
    out, lse = ignis.nn.attention(q, k, v, causal=True, dropout=drop)
    ignis.nn.attention_backward(g, q, k, v, out, lse, causal=True, dropout=drop)
    ignis.synchronize()
    extra = ignis.memory_stats()["peak_bytes"] - base
    assert extra < n * n * 2 // 4, extra  # a quarter of one head's L x L float16 matrix
