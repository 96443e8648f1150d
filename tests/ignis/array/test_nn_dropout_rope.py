"""ignis.nn.dropout / rope and their backward functions and autograd rules: dropout masks
against the ignis.random stream, RoPE against a NumPy float64 (complex rotation) reference and a
PyTorch formulation, gradcheck of every rule."""

from __future__ import annotations

import math
import struct
import sys
from pathlib import Path

import numpy as np
import pytest
from array_helpers import FLOATS, TOL, np_dtype, random_array
from ignis_autograd.functional import rope as ag_rope

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime"))
import fake_gpu  # noqa: E402  (the stand-in GPU of tests/ignis/runtime)
from ignis._array._cuda_backend import indexing as cuda_indexing

import ignis
import ignis_autograd as ag
from ignis_autograd import Tensor


def nv(values: np.ndarray, device: str, dtype: str | None = None) -> ignis.NvArray:
    return ignis.NvArray.from_host(values, dtype=dtype, device=device)


def stream_uniform(shape: tuple, seed: int, offset: int) -> np.ndarray:
    """float32 uniforms of the Philox stream (seed, offset) through ignis.random.rand."""
    g = ignis.random.Generator(seed)
    g.set_state((seed, offset))
    return g.rand(shape, dtype="float32", device="cpu").to_host()


# --- dropout -----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("n", [1, 31, 33, 1001])
def test_dropout_mask_is_the_random_stream(
    device: str, rng: np.random.Generator, dtype: str, n: int
) -> None:
    x = random_array(rng, (n,), dtype)
    p, seed, offset = 0.3, 2**40 + 17, 5
    y, mask = ignis.nn.dropout(nv(x, device), p, seed, offset)
    assert mask.dtype is ignis.bool_ and y.dtype.name == dtype
    keep = stream_uniform((n,), seed, offset) >= np.float32(p)
    np.testing.assert_array_equal(mask.to_host(), keep)
    work = np.float64 if dtype == "float64" else np.float32
    expected = np.where(keep, x.astype(work) * work(1.0 / (1.0 - p)), 0).astype(np_dtype(dtype))
    np.testing.assert_array_equal(y.to_host(), expected)  # one rounding, same on every backend


def test_dropout_keeps_about_1_minus_p(device: str) -> None:
    n, p = 200_000, 0.25
    y, mask = ignis.nn.dropout(ignis.ones((400, 500), device=device), p, seed=3, offset=0)
    kept = int(mask.to_host().sum())
    sigma = math.sqrt(n * p * (1 - p))
    assert abs(kept - n * (1 - p)) < 5 * sigma
    assert abs(float(y.to_host().astype(np.float64).mean()) - 1.0) < 0.01


def test_dropout_non_contiguous_and_shapes(device: str, rng: np.random.Generator) -> None:
    a = random_array(rng, (6, 10), "float32")
    view = nv(a, device).T[:, 1::2]  # (10, 3), strided
    y, mask = ignis.nn.dropout(view, 0.5, seed=1, offset=2)
    keep = stream_uniform((10, 3), 1, 2) >= 0.5  # row-major order of the view
    assert y.shape == (10, 3)
    np.testing.assert_array_equal(mask.to_host(), keep)
    np.testing.assert_array_equal(y.to_host(), np.where(keep, a.T[:, 1::2] * np.float32(2.0), 0))
    y0, m0 = ignis.nn.dropout(ignis.zeros((0, 4), device=device), 0.5, seed=1, offset=0)
    assert y0.shape == (0, 4) and m0.shape == (0, 4)


def test_dropout_p_zero_and_one(device: str, rng: np.random.Generator) -> None:
    x = random_array(rng, (5, 7), "float32")
    y, mask = ignis.nn.dropout(nv(x, device), 0.0, seed=0, offset=0)
    np.testing.assert_array_equal(y.to_host(), x)
    assert mask.to_host().all()
    y, mask = ignis.nn.dropout(nv(x, device), 1.0, seed=0, offset=0)
    assert not mask.to_host().any() and not y.to_host().any()


def test_dropout_advances_the_generator_like_rand(device: str) -> None:
    x = ignis.ones((10,), device=device)
    ignis.random.seed(5)
    _, mask = ignis.nn.dropout(x, 0.5)
    assert ignis.random.get_state() == (5, 3)  # ceil(10 / 4) Philox blocks
    after = ignis.random.rand(4, device=device).to_host()
    ignis.random.seed(5)
    u = ignis.random.rand(10, device=device).to_host()
    np.testing.assert_array_equal(mask.to_host(), u >= 0.5)
    np.testing.assert_array_equal(ignis.random.rand(4, device=device).to_host(), after)
    g = ignis.random.Generator(9)
    _, m1 = ignis.nn.dropout(x, 0.5, generator=g)
    _, m2 = ignis.nn.dropout(x, 0.5, generator=g)
    assert g.get_state() == (9, 6)
    np.testing.assert_array_equal(m1.to_host(), stream_uniform((10,), 9, 0) >= 0.5)
    np.testing.assert_array_equal(m2.to_host(), stream_uniform((10,), 9, 3) >= 0.5)


@pytest.mark.parametrize("dtype", FLOATS)
def test_dropout_backward(device: str, rng: np.random.Generator, dtype: str) -> None:
    g = random_array(rng, (7, 9), dtype)
    mask = rng.random((7, 9)) < 0.6
    out = ignis.nn.dropout_backward(nv(g, device), nv(mask, device), 0.4)
    rtol, atol = TOL[dtype]
    np.testing.assert_allclose(
        out.to_host().astype(np.float64),
        np.where(mask, g.astype(np.float64) / 0.6, 0),
        rtol=rtol,
        atol=atol,
    )


def test_dropout_bad_input(device: str) -> None:
    x = ignis.zeros((3,), device=device)
    with pytest.raises(ValueError, match=r"dropout: p must be in \[0, 1\], got 1.5"):
        ignis.nn.dropout(x, 1.5)
    with pytest.raises(ignis.DTypeError, match="dropout: x must be a floating array, got int32"):
        ignis.nn.dropout(ignis.zeros((3,), dtype="int32", device=device), 0.5)
    with pytest.raises(ValueError, match="dropout: give both seed and offset"):
        ignis.nn.dropout(x, 0.5, seed=1)
    with pytest.raises(ValueError, match="dropout: offset must be >= 0"):
        ignis.nn.dropout(x, 0.5, seed=1, offset=-1)
    with pytest.raises(
        ignis.DTypeError, match="dropout_backward: mask must be a bool NvArray, got float32"
    ):
        ignis.nn.dropout_backward(x, x, 0.5)
    with pytest.raises(ignis.ShapeError, match=r"dropout_backward: mask has shape \(2,\)"):
        ignis.nn.dropout_backward(x, ignis.zeros((2,), dtype="bool", device=device), 0.5)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", FLOATS)
def test_gpu_dropout_equals_cpu_bit_for_bit(rng: np.random.Generator, dtype: str) -> None:
    x = random_array(rng, (3, 1000, 7), dtype)
    outs = [
        ignis.nn.dropout(nv(x, dev), 0.1, seed=2**63 + 5, offset=2**33 + 1)
        for dev in ("cuda:0", "cpu")
    ]
    np.testing.assert_array_equal(outs[0][1].to_host(), outs[1][1].to_host())
    np.testing.assert_array_equal(
        outs[0][0].to_host().view(np.uint8), outs[1][0].to_host().view(np.uint8)
    )
    g = random_array(rng, (3, 1000, 7), dtype)
    back = [
        ignis.nn.dropout_backward(nv(g, dev), o[1], 0.1)
        for dev, o in zip(("cuda:0", "cpu"), outs, strict=True)
    ]
    np.testing.assert_array_equal(
        back[0].to_host().view(np.uint8), back[1].to_host().view(np.uint8)
    )


def bits(a: ignis.NvArray) -> np.ndarray:
    return a.to_host().view(np.uint8)


def misaligned(values: np.ndarray, device: str) -> ignis.NvArray:
    """``values`` on the device one element past a 16-byte boundary (contiguous, offset view)."""
    padded = np.concatenate([values.reshape(-1)[:1], values.reshape(-1)])
    return nv(padded, device)[1:].reshape(values.shape)


# Sizes around the vector path's warp tiles (256 float64, 512 float32, 1024 16-bit elements)
# and Philox blocks (4 elements): tail only, whole tiles, whole tiles plus every kind of tail.
STEP_SIZES = [1, 3, 4, 15, 17, 33, 255, 256, 257, 511, 512, 513, 1023, 1024, 1025]
STEP_SIZES += [4099, 8197, 65543]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", FLOATS)
def test_gpu_dropout_vector_and_scalar_paths_equal_cpu(
    rng: np.random.Generator, dtype: str
) -> None:
    # offset 2**32 - 3: the low counter word wraps inside a vector step (carry into word 1)
    seed, offset, p = 2**63 + 12345, 2**32 - 3, 0.3
    for n in STEP_SIZES:
        x = random_array(rng, (n,), dtype)
        g = random_array(rng, (n,), dtype)
        y_ref, m_ref = ignis.nn.dropout(nv(x, "cpu"), p, seed, offset)
        back_ref = ignis.nn.dropout_backward(nv(g, "cpu"), m_ref, p)
        assert 0 < int(m_ref.to_host().sum()) < n or n < 16  # both outcomes occur
        for label, xg in [("aligned", nv(x, "cuda:0")), ("misaligned", misaligned(x, "cuda:0"))]:
            y, m = ignis.nn.dropout(xg, p, seed, offset)
            msg = f"{dtype} n={n} {label}"
            np.testing.assert_array_equal(m.to_host(), m_ref.to_host(), err_msg=msg)
            np.testing.assert_array_equal(bits(y), bits(y_ref), err_msg=msg)
        for label, gg, mm in [
            ("aligned", nv(g, "cuda:0"), nv(m_ref.to_host(), "cuda:0")),
            ("misaligned grad", misaligned(g, "cuda:0"), nv(m_ref.to_host(), "cuda:0")),
            ("misaligned mask", nv(g, "cuda:0"), misaligned(m_ref.to_host(), "cuda:0")),
        ]:
            back = ignis.nn.dropout_backward(gg, mm, p)
            np.testing.assert_array_equal(
                bits(back), bits(back_ref), err_msg=f"{dtype} {n} {label}"
            )


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", FLOATS)
def test_gpu_dropout_strided_operands_equal_cpu(rng: np.random.Generator, dtype: str) -> None:
    # Strided views (copied to contiguous rows before the kernels) of sizes with whole tiles and
    # a tail: 1031 x 3 = 3093 elements; the mask of the backward pass is a strided view too.
    seed, offset, p = 5, 2**32 - 1, 0.2
    a = random_array(rng, (6, 1031), dtype)
    b = random_array(rng, (1031, 6), dtype)
    ref_x, ref_g = a.T[:, 1::2], b[:, ::2]  # (1031, 3) each
    y, m = ignis.nn.dropout(nv(a, "cuda:0").T[:, 1::2], p, seed, offset)
    y_ref, m_ref = ignis.nn.dropout(nv(np.ascontiguousarray(ref_x), "cpu"), p, seed, offset)
    np.testing.assert_array_equal(m.to_host(), m_ref.to_host())
    np.testing.assert_array_equal(bits(y), bits(y_ref))
    wide = np.repeat(m_ref.to_host(), 2, axis=1)  # (1031, 6): columns 0, 2, 4 are the mask
    mask_view = nv(wide, "cuda:0")[:, ::2]
    back = ignis.nn.dropout_backward(nv(b, "cuda:0")[:, ::2], mask_view, p)
    back_ref = ignis.nn.dropout_backward(nv(np.ascontiguousarray(ref_g), "cpu"), m_ref, p)
    np.testing.assert_array_equal(bits(back), bits(back_ref))
    expect = np.where(m_ref.to_host(), ref_g.astype(np.float64) / (1 - p), 0.0)
    rtol, atol = TOL[dtype]
    np.testing.assert_allclose(back.to_host().astype(np.float64), expect, rtol=rtol, atol=atol)


@pytest.mark.gpu
def test_gpu_dropout_backward_counts_any_nonzero_mask_byte_as_kept(
    rng: np.random.Generator,
) -> None:
    g = random_array(rng, (1000,), "float32")
    raw = rng.integers(0, 256, size=1000).astype(np.uint8)
    raw[:3] = [0, 1, 255]
    u8 = nv(raw, "cuda:0")  # the same bytes seen as bool (NvArray has no public bit view)
    mask = ignis.NvArray._make(
        u8._storage, u8._offset, u8._shape, u8._strides, ignis.bool_, u8._device, u8._backend
    )
    back = ignis.nn.dropout_backward(nv(g, "cuda:0"), mask, 0.5).to_host()
    np.testing.assert_array_equal(back, np.where(raw != 0, g * np.float32(2.0), 0))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_gpu_dropout_large_matches_the_stream_in_windows(dtype: str) -> None:
    # Large enough that warps of the capped grid take a second tile (grid-stride loop), plus
    # a tail: windows at the start, around the end of the first pass, and at the end are
    # compared with the CPU backend, which draws the same words from offset + start / 4.
    tile = cuda_indexing.dropout_tile(getattr(ignis, dtype))
    per_sm = ignis.tuning().indexing.blocks_per_sm
    first_pass = ignis.Device(0).multiprocessor_count * per_sm * (256 // 32) * tile
    n = first_pass + first_pass // 8 + 7  # about 19M float32 / 39M bfloat16 on an H200
    seed, offset, p = 77, 5, 0.1
    host_rng = np.random.default_rng(3)
    x = host_rng.standard_normal(n, dtype=np.float32).astype(np_dtype(dtype))
    g = host_rng.standard_normal(n, dtype=np.float32).astype(np_dtype(dtype))
    y, m = ignis.nn.dropout(nv(x, "cuda:0"), p, seed, offset)
    back = ignis.nn.dropout_backward(nv(g, "cuda:0"), m, p)
    y_h, m_h, back_h = bits(y), m.to_host(), bits(back)
    width = 4096
    size = np.dtype(np_dtype(dtype)).itemsize
    for start in (0, first_pass - width // 2, (n - width) // 4 * 4):
        stop = n if start + width + 4 >= n else start + width  # the last window runs to n
        window = slice(start, stop)
        y_ref, m_ref = ignis.nn.dropout(nv(x[window], "cpu"), p, seed, offset + start // 4)
        np.testing.assert_array_equal(m_h[window], m_ref.to_host(), err_msg=f"start {start}")
        np.testing.assert_array_equal(
            y_h[start * size : stop * size], bits(y_ref), err_msg=f"start {start}"
        )
        b_ref = ignis.nn.dropout_backward(nv(g[window], "cpu"), m_ref, p)
        np.testing.assert_array_equal(back_h[start * size : stop * size], bits(b_ref))
    kept = int(m_h.sum())
    assert abs(kept - n * (1 - p)) < 5 * math.sqrt(n * p * (1 - p))


# --- dropout launches, on the stand-in GPU of tests/ignis/runtime/fake_gpu.py -------------------


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch):
    g = fake_gpu.install(monkeypatch)
    monkeypatch.setattr(cuda_indexing, "library_kernel", fake_gpu._library_kernel)
    yield g
    fake_gpu.uninstall()


def _i64(v: bytes) -> int:
    return struct.unpack("<q", v)[0]


def _dropout_launches(gpu: fake_gpu.FakeGpu) -> list:
    return [launch for launch in gpu.launches if launch[0].startswith("ignis::nn::dropout")]


@pytest.mark.parametrize(
    ("dtype", "shape", "name", "grid"),
    [
        # 2**26 elements, one warp per tile of 512 (float32) or 1024 (bfloat16): grids capped
        # at 132 multiprocessors x 32 blocks, the warps then loop
        ("float32", (16384, 4096), "float, float, true", 132 * 32),
        ("bfloat16", (16384, 4096), "ignis::bfloat16, float, true", 132 * 32),
        # 128 whole tiles of 256 float64 (one warp each, 8 per block) and a tail of 232
        ("float64", (1000, 33), "double, double, true", 33000 // 256 * 32 // 256),
        ("float16", (2, 40), "ignis::float16, float, true", 1),  # no whole tile: the tail only
        ("float32", (3,), "float, float, true", 1),  # no whole step: the tail only
    ],
)
def test_fake_gpu_dropout_vector_launches(
    fake, dtype: str, shape: tuple, name: str, grid: int
) -> None:
    x = ignis.empty(shape, dtype=dtype, device="cuda:0")
    y, mask = ignis.nn.dropout(x, 0.1, seed=1, offset=0)
    ignis.nn.dropout_backward(x, mask, 0.1)
    (fwd, bwd) = _dropout_launches(fake)
    assert fwd[0] == f"ignis::nn::dropout_forward<{name}>"
    assert bwd[0] == f"ignis::nn::dropout_backward<{name}>"
    assert fwd[1] == bwd[1] == (grid, 1, 1) and fwd[2] == bwd[2] == (256, 1, 1)
    ptrs = [struct.unpack("<Q", v)[0] for v in fwd[4][:3]]
    assert ptrs == [x.data_ptr, y.data_ptr, mask.data_ptr]
    assert [struct.unpack("<Q", v)[0] for v in bwd[4][:2]] == [x.data_ptr, mask.data_ptr]
    assert _i64(fwd[4][3]) == _i64(bwd[4][3]) == x.numel


def test_fake_gpu_dropout_scalar_path_when_misaligned(fake) -> None:
    base = ignis.empty((100_001,), dtype="float32", device="cuda:0")
    x = base[1:]  # contiguous, 4 bytes past a 16-byte boundary
    y, mask = ignis.nn.dropout(x, 0.5, seed=3, offset=0)
    ((name, grid, _, _, args),) = _dropout_launches(fake)
    assert name == "ignis::nn::dropout_forward<float, float, false>"
    assert grid == (-(-25_000 // 256), 1, 1)  # one Philox block (4 elements) per thread
    assert struct.unpack("<Q", args[0])[0] == x.data_ptr
    fake.launches.clear()
    g = ignis.empty((100_000,), dtype="bfloat16", device="cuda:0")
    ignis.nn.dropout_backward(g, ignis.empty((100_001,), dtype="bool", device="cuda:0")[1:], 0.5)
    ((name, grid, _, _, _),) = _dropout_launches(fake)
    assert name == "ignis::nn::dropout_backward<ignis::bfloat16, float, false>"
    assert grid == (-(-100_000 // 256), 1, 1)  # one element per thread
    fake.launches.clear()
    ignis.nn.dropout_backward(g, ignis.empty((100_000,), dtype="bool", device="cuda:0"), 0.5)
    ((name, grid, _, _, _),) = _dropout_launches(fake)
    # 97 whole tiles of 1024 (a warp each) and a tail of 672 elements, one thread each
    assert name.endswith("float, true>") and grid == (-(-97 * 32 // 256), 1, 1)


# --- rope --------------------------------------------------------------------------------------


def rope_reference(
    x: np.ndarray, pos: np.ndarray, base: float, interleaved: bool, inverse: bool = False
) -> np.ndarray:
    """float64: each pair as a complex number times exp(i * angle)."""
    x = x.astype(np.float64)
    d = x.shape[-1]
    freq = base ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    angle = pos.astype(np.float64)[..., None] * freq
    rot = np.exp(-1j * angle if inverse else 1j * angle)
    if interleaved:
        z = (x[..., 0::2] + 1j * x[..., 1::2]) * rot
        out = np.empty_like(x)
        out[..., 0::2], out[..., 1::2] = z.real, z.imag
        return out
    z = (x[..., : d // 2] + 1j * x[..., d // 2 :]) * rot
    return np.concatenate([z.real, z.imag], axis=-1)


def rope_tol(dtype: str, max_pos: float) -> tuple[float, float]:
    # float32 angles are off by up to about an ulp of the largest angle (|x| < 4 here).
    rtol, atol = TOL[dtype]
    if dtype != "float64":
        atol += 8 * 4 * max(max_pos, 1.0) * 2.0**-24 * 4
    return rtol * 2, atol * 2


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("shape", [(1, 2), (31, 6), (2, 3, 33, 64), (2, 5, 1000)])
def test_rope_matches_float64_reference(
    device: str, rng: np.random.Generator, dtype: str, interleaved: bool, shape: tuple
) -> None:
    x = random_array(rng, shape, dtype)
    seq = shape[-2]
    offset = 7
    got = ignis.nn.rope(nv(x, device), offset=offset, interleaved=interleaved)
    pos = np.broadcast_to(np.arange(seq) + offset, shape[:-1])
    expected = rope_reference(x, pos, 10000.0, interleaved)
    rtol, atol = rope_tol(dtype, seq + offset)
    np.testing.assert_allclose(got.to_host().astype(np.float64), expected, rtol=rtol, atol=atol)


@pytest.mark.parametrize("pos_dtype", ["int32", "int64"])
def test_rope_with_positions(device: str, rng: np.random.Generator, pos_dtype: str) -> None:
    x = random_array(rng, (3, 4, 9, 16), "float32")
    shared = rng.integers(0, 4096, size=9)
    got = ignis.nn.rope(nv(x, device), nv(shared, device, pos_dtype), offset=-3, base=500000.0)
    expected = rope_reference(x, np.broadcast_to(shared - 3, (3, 4, 9)), 500000.0, False)
    rtol, atol = rope_tol("float32", 4096)
    np.testing.assert_allclose(got.to_host(), expected, rtol=rtol, atol=atol)
    per_row = rng.integers(0, 100, size=(3, 4, 9))
    got = ignis.nn.rope(nv(x, device), nv(per_row, device, pos_dtype), interleaved=True)
    expected = rope_reference(x, per_row, 10000.0, True)
    np.testing.assert_allclose(got.to_host(), expected, rtol=rtol, atol=rope_tol("float32", 100)[1])


def test_rope_non_contiguous_and_empty(device: str, rng: np.random.Generator) -> None:
    x = random_array(rng, (5, 2, 8), "float64")
    view = nv(x, device).transpose(1, 0, 2)  # (2, 5, 8): seq axis strided
    got = ignis.nn.rope(view)
    xt = x.transpose(1, 0, 2)
    expected = rope_reference(xt, np.broadcast_to(np.arange(5), (2, 5)), 10000.0, False)
    np.testing.assert_allclose(got.to_host(), expected, rtol=1e-12, atol=1e-12)
    assert ignis.nn.rope(ignis.zeros((2, 0, 8), device=device)).shape == (2, 0, 8)


def test_rope_backward_is_the_adjoint(device: str, rng: np.random.Generator) -> None:
    x = random_array(rng, (2, 7, 12), "float64")
    g = random_array(rng, (2, 7, 12), "float64")
    for interleaved in (False, True):
        y = ignis.nn.rope(nv(x, device), offset=3, interleaved=interleaved).to_host()
        gx = ignis.nn.rope_backward(nv(g, device), offset=3, interleaved=interleaved).to_host()
        assert abs(np.sum(y * g) - np.sum(x * gx)) < 1e-10 * np.abs(y * g).sum()
        back = ignis.nn.rope_backward(nv(y, device), offset=3, interleaved=interleaved).to_host()
        np.testing.assert_allclose(back, x, rtol=1e-12, atol=1e-12)


def test_rope_agrees_with_torch_llama_formulation(device: str, rng: np.random.Generator) -> None:
    torch = pytest.importorskip("torch")
    b, h, s, d = 2, 3, 17, 32
    x = random_array(rng, (b, h, s, d), "float32")
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    freqs = torch.outer(torch.arange(s, dtype=torch.float32), inv_freq)
    emb = torch.cat([freqs, freqs], dim=-1)
    tx = torch.from_numpy(x)
    rotated = torch.cat([-tx[..., d // 2 :], tx[..., : d // 2]], dim=-1)
    expected = tx * emb.cos() + rotated * emb.sin()
    got = ignis.nn.rope(nv(x, device))
    np.testing.assert_allclose(got.to_host(), expected.numpy(), rtol=1e-5, atol=2e-5)


def test_rope_bad_input(device: str) -> None:
    x = ignis.zeros((4, 6), device=device)
    with pytest.raises(ignis.ShapeError, match="rope: head_dim .* must be even, got 5"):
        ignis.nn.rope(ignis.zeros((4, 5), device=device))
    with pytest.raises(ignis.ShapeError, match=r"rope: x must be \(..., seq, head_dim\)"):
        ignis.nn.rope(ignis.zeros((6,), device=device))
    with pytest.raises(ignis.DTypeError, match="rope: x must be a floating array, got int64"):
        ignis.nn.rope(ignis.zeros((4, 6), dtype="int64", device=device))
    with pytest.raises(ignis.ShapeError, match=r"rope: positions have shape \(3,\), expected"):
        ignis.nn.rope(x, ignis.zeros((3,), dtype="int64", device=device))
    with pytest.raises(ignis.DTypeError, match="rope: positions must be an int32/int64 NvArray"):
        ignis.nn.rope(x, ignis.zeros((4,), device=device))
    with pytest.raises(ValueError, match="rope_backward: base must be"):
        ignis.nn.rope_backward(x, base=-1.0)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", FLOATS)
def test_gpu_rope_matches_cpu(rng: np.random.Generator, dtype: str) -> None:
    x = random_array(rng, (2, 4, 129, 128), dtype)
    pos = rng.integers(0, 2048, size=(2, 4, 129))
    outs = [
        ignis.nn.rope(nv(x, dev), nv(pos, dev), interleaved=True).to_host()
        for dev in ("cuda:0", "cpu")
    ]
    rtol, atol = rope_tol(dtype, 2048)
    np.testing.assert_allclose(
        outs[0].astype(np.float64), outs[1].astype(np.float64), rtol=rtol, atol=atol
    )


# --- autograd ----------------------------------------------------------------------------------


def test_autograd_rope_gradcheck(device: str, rng: np.random.Generator) -> None:
    x = Tensor(nv(rng.standard_normal((2, 5, 6)), device), requires_grad=True)
    pos = nv(np.array([4, 0, 9, 9, 1]), device)
    assert ag.gradcheck(lambda x: ag_rope(x, offset=2), [x])
    assert ag.gradcheck(lambda x: ag_rope(x, pos, base=100.0, interleaved=True) * x, [x])


def test_autograd_dropout_gradcheck_and_mask(device: str, rng: np.random.Generator) -> None:
    x = Tensor(nv(rng.standard_normal((6, 7)), device), requires_grad=True)
    assert ag.gradcheck(lambda x: ag.dropout(x, 0.4, generator=ignis.random.Generator(7)), [x])
    y = ag.dropout(x, 0.4, generator=ignis.random.Generator(7))
    y.sum().backward()
    keep = stream_uniform((6, 7), 7, 0) >= np.float32(0.4)
    np.testing.assert_allclose(x.grad.to_host(), np.where(keep, 1 / 0.6, 0.0), rtol=1e-12)
    assert ag.dropout(x, 0.4, training=False) is x


def test_autograd_rope_half_gradient(device: str, rng: np.random.Generator) -> None:
    x = Tensor(nv(rng.standard_normal((3, 8)), device, "bfloat16"), requires_grad=True)
    ag_rope(x).sum().backward()
    ones = np.ones((3, 8))
    expected = rope_reference(ones, np.arange(3), 10000.0, False, inverse=True)
    assert x.grad.dtype is ignis.float32
    # the output's gradient is bfloat16, so is the rotated one before the float32 leaf keeps it
    rtol, atol = TOL["bfloat16"]
    np.testing.assert_allclose(x.grad.to_host().astype(np.float64), expected, rtol=rtol, atol=atol)


def test_dropout_threshold_boundary(device: str) -> None:
    # p equal to an element's uniform value keeps it (u >= p); the next float32 above drops it.
    u = stream_uniform((3,), 11, 4)
    x = ignis.ones((3,), device=device)
    for i in range(3):
        p = float(u[i])
        _, mask = ignis.nn.dropout(x, p, seed=11, offset=4)
        assert mask.to_host()[i]
        _, mask = ignis.nn.dropout(
            x, float(np.nextafter(np.float32(p), np.float32(1))), seed=11, offset=4
        )
        assert not mask.to_host()[i]
