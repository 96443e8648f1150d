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


# --- packed_attention over the stand-in driver (no GPU needed) -----------------------------------


@pytest.fixture
def fake_driver(monkeypatch):
    """The CUDA backend over the stand-in driver of tests/ignis/runtime/fake_gpu.py: kernels
    are parsed, not compiled, and every launch is recorded by name."""
    import sys
    from pathlib import Path

    from ignis._array._cuda_backend import attention as cuda_attention

    if ignis.is_available():
        pytest.skip("fake driver tests: the GPU tests cover the real driver")
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "ignis" / "runtime"))
    fake_gpu = __import__("fake_gpu")
    gpu = fake_gpu.install(monkeypatch)
    monkeypatch.setattr(cuda_attention, "library_kernel", fake_gpu._library_kernel)
    # kernels above 48 KiB of shared memory opt in per function
    monkeypatch.setattr(fake_gpu.cu, "cuFuncSetAttribute", lambda *a: None, raising=False)
    yield gpu
    fake_gpu.uninstall()
    sys.modules.pop("fake_gpu", None)


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_packed_attention_launches_no_copy_kernels(fake_driver, dtype):
    # The heads of qkv are read in place, the output is written merged, and dq, dk, dv land in
    # the three slots of one qkv gradient: only attention kernels run (the 16-bit leaf's
    # float32 gradient accumulation, the engine's own cast, aside).
    b, n, h, hd = 2, 40, 3, 32
    qkv = ag.Tensor(ignis.empty((b, n, 3 * h * hd), dtype=dtype, device="cuda:0"), True)
    fake_driver.launches.clear()
    out = ag.packed_attention(qkv, h, causal=True)
    fwd = [name.split("<")[0] for name, *_ in fake_driver.launches]
    assert out.shape == (b, n, h * hd) and out.grad_fn.name == "packed_attention"
    seed = ag.Tensor(ignis.empty((b, n, h * hd), dtype=dtype, device="cuda:0"))
    fake_driver.launches.clear()
    out.backward(seed)
    bwd = [(name.split("<")[0], args) for name, _, _, _, args in fake_driver.launches]
    names = [name for name, _ in bwd]
    assert not any("copy_strided" in name for name in fwd + names), fwd + names
    if dtype == "bfloat16":
        assert fwd == ["ignis::attn::flash_fwd_tc_m32"]
        assert names == [
            "ignis::attn::attn_row_dot",
            "ignis::attn::flash_bwd_fused_tc",
            "ignis::attn::attn_dq_finish",
            "ignis::ew::copy_contig",  # the leaf's bfloat16 gradient into its float32 sum
        ]
    else:
        assert fwd == ["ignis::attn::flash_fwd_simt_tiled"]
        assert names == [
            "ignis::attn::attn_row_dot",
            "ignis::attn::flash_bwd_dkdv_simt_tiled",
            "ignis::attn::flash_bwd_dq_simt_tiled",
        ]
    # dk and dv were written straight into the k and v slots of one (B, T, 3, H, hd) gradient
    item = 2 if dtype == "bfloat16" else 4
    dkdv = [args for name, args in bwd if "dkdv" in name or "bwd_fused" in name][0]
    dk_ptr, dv_ptr = (int.from_bytes(a, "little") for a in dkdv[6:8])
    assert dv_ptr - dk_ptr == h * hd * item
    if dtype == "float32":  # (the float32 gradient is the leaf's own buffer)
        assert dk_ptr == qkv.grad.data_ptr + h * hd * item


def test_sdpa_reads_head_views_in_place(fake_driver):
    # (B, T, H, E) arrays viewed as (B, H, T, E), and 3-D views: straight to the kernel.
    b, n, h, e = 2, 40, 3, 32
    q, k, v = (
        ignis.empty((b, n, h, e), dtype="bfloat16", device="cuda:0").permute(0, 2, 1, 3)
        for _ in range(3)
    )
    fake_driver.launches.clear()
    out = scaled_dot_product_attention(q, k, v, causal=True)
    ((name, _, _, _, args),) = fake_driver.launches
    assert name.startswith("ignis::attn::flash_fwd_tc_m32<")
    assert [int.from_bytes(a, "little") for a in args[:3]] == [q.data_ptr, k.data_ptr, v.data_ptr]
    assert out.shape == (b, h, n, e)
    x = ignis.empty((n, 3 * h, e), dtype="bfloat16", device="cuda:0")[:, ::3].permute(1, 0, 2)
    fake_driver.launches.clear()
    scaled_dot_product_attention(x, x, x)  # (H, T, E) with a head stride of 3 E
    assert [n_.split("<")[0] for n_, *_ in fake_driver.launches] == [
        "ignis::attn::flash_fwd_tc_m32"
    ]


@pytest.mark.parametrize("causal", [False, True])
def test_fused_attention_on_strided_views(device, causal):
    # q, k, v as (B, H, T, E) views of (B, T, H, E) arrays, one of them with reversed heads:
    # the values and gradients of the contiguous case (gradcheck in float64, and against the
    # composite of matmuls and softmax).
    rng = np.random.default_rng(31 + causal)

    def view(n):
        x = ag.Tensor(ignis.asarray(rng.standard_normal((2, n, 3, 8)), device=device), True)
        return x.permute(0, 2, 1, 3)

    q, k, v = view(5), view(7), view(7)
    k = k[:, ::-1]
    out = scaled_dot_product_attention(q, k, v, causal=causal, scale=0.6)
    assert out.grad_fn.name == "scaled_dot_product_attention"
    dense = [ag.Tensor(ignis.asarray(t.data.to_host(), device=device)) for t in (q, k, v)]
    s = (dense[0] @ dense[1].mT) * 0.6
    if causal:
        mask = np.arange(7)[None, :] <= np.arange(5)[:, None] + 2
        s = ag.where(ag.Tensor(ignis.asarray(mask, device=device)), s, float("-inf"))
    want = s.softmax(axis=-1) @ dense[2]
    np.testing.assert_allclose(out.data.to_host(), want.data.to_host(), atol=1e-12)
    assert gradcheck(
        lambda a, b, c: scaled_dot_product_attention(a, b, c, causal=causal, scale=0.6), (q, k, v)
    )
