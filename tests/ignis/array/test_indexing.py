"""take / index_add / integer-array indexing / embedding (the "indexing" family), against NumPy
float64 references and, where it has the op, PyTorch; every kernel instance compiles for sm_90."""

from __future__ import annotations

import struct
import sys
from pathlib import Path

import numpy as np
import pytest
from array_helpers import (
    ALL,
    FLOATS,
    TOL,
    arg_i64,
    arg_ptr,
    np_dtype,
    random_array,
    stand_in_gpu,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime"))
import fake_gpu  # noqa: E402  (the stand-in GPU of tests/ignis/runtime)
from ignis._array._cuda_backend import indexing as cuda_indexing

import ignis
import ignis_autograd as ag
from ignis import CompileOptions, _sources
from ignis_autograd import Tensor


def nv(values: np.ndarray, device: str, dtype: str | None = None) -> ignis.NvArray:
    return ignis.NvArray.from_host(values, dtype=dtype, device=device)


def np_take(a: np.ndarray, idx: np.ndarray, axis: int) -> np.ndarray:
    """Reference gather with the documented out-of-range fill (NaN, or 0 for non-floats)."""
    n = a.shape[axis]
    k = np.where(idx < 0, idx + n, idx)
    valid = (k >= 0) & (k < n)
    out = np.take(a, np.where(valid, k, 0), axis=axis) if n else None
    if out is None:
        shape = a.shape[:axis] + idx.shape + a.shape[axis + 1 :]
        out = np.zeros(shape, a.dtype)
    fill = np.nan if a.dtype.kind == "f" or a.dtype == np_dtype("bfloat16") else 0
    sel = (slice(None),) * axis + (~valid,)
    out[sel] = fill
    return out


# --- every kernel instance compiles ------------------------------------------------------------


@pytest.mark.parametrize("source", ["indexing.cu", "dropout.cu", "rope.cu"])
@pytest.mark.exhaustive
def test_every_kernel_instance_compiles_for_sm90(source: str) -> None:
    names = cuda_indexing.kernel_names()[source]
    assert names
    obj = ignis.compile(
        _sources.read_source(source), CompileOptions(arch="sm_90"), name_expressions=names
    )
    assert obj.log == ""
    assert sorted(obj.lowered_names) == sorted(set(names))


# --- take --------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_take_matches_numpy(device: str, rng: np.random.Generator, dtype: str, axis: int) -> None:
    a = random_array(rng, (5, 7, 3), dtype)
    n = a.shape[axis]
    idx = rng.integers(-n, n, size=(4, 2))
    idx[0, 0], idx[-1, -1] = n - 1, -n
    got = ignis.take(nv(a, device), nv(idx, device), axis=axis)
    np.testing.assert_array_equal(got.to_host(), np.take(a, idx, axis=axis))


@pytest.mark.parametrize("inner", [1, 2, 31, 33, 1000, 1031])
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int8", "bool"])
def test_take_row_lengths(device: str, rng: np.random.Generator, inner: int, dtype: str) -> None:
    # Row lengths that allow 16-byte moves and that do not; many rows and index dtypes.
    a = random_array(rng, (37, inner), dtype)
    idx = rng.integers(-37, 37, size=1001).astype(np.int32)
    got = nv(a, device).take(nv(idx, device))
    np.testing.assert_array_equal(got.to_host(), a[idx])


def test_take_misaligned_and_non_contiguous(device: str, rng: np.random.Generator) -> None:
    flat = random_array(rng, (1 + 6 * 8,), "float32")
    base = nv(flat, device)[1:].reshape(6, 8)  # contiguous, but 4 bytes past an alignment
    idx = np.array([5, 0, 5, 2])
    np.testing.assert_array_equal(
        ignis.take(base, nv(idx, device)).to_host(), flat[1:].reshape(6, 8)[idx]
    )
    a = random_array(rng, (6, 9), "float64")
    view = nv(a, device).T[::2]  # (5, 6), strided
    sidx = nv(np.arange(12) % 6, device)[::3]  # a strided index array: [0, 3, 0, 3]
    np.testing.assert_array_equal(
        ignis.take(view, sidx, axis=1).to_host(), a.T[::2][:, [0, 3, 0, 3]]
    )


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int64", "bool"])
def test_take_out_of_range_fills_and_check_raises(
    device: str, rng: np.random.Generator, dtype: str
) -> None:
    a = random_array(rng, (5, 3), dtype)
    idx = np.array([0, 5, -6, 4, -5])
    got = ignis.take(nv(a, device), nv(idx, device)).to_host()
    expected = np_take(a, idx, 0)
    np.testing.assert_array_equal(got.astype(np.float64), expected.astype(np.float64))
    if dtype in FLOATS:
        assert (
            np.isnan(got[1].astype(np.float64)).all() and np.isnan(got[2].astype(np.float64)).all()
        )
    with pytest.raises(
        IndexError, match=r"take: 2 index\(es\) outside \[-5, 5\) \(axis 0 of size 5\)"
    ):
        ignis.take(nv(a, device), nv(idx, device), check=True)
    ok = ignis.take(nv(a, device), nv(np.array([4, -5]), device), check=True)
    np.testing.assert_array_equal(ok.to_host(), a[[4, -5]])


def test_take_empty_cases(device: str, rng: np.random.Generator) -> None:
    a = nv(random_array(rng, (4, 3), "float32"), device)
    empty_idx = nv(np.zeros((0,), np.int64), device)
    assert ignis.take(a, empty_idx).shape == (0, 3)
    assert ignis.take(a, empty_idx, axis=1).shape == (4, 0)
    assert ignis.take(nv(np.zeros((0, 3), np.float32), device), empty_idx).shape == (0, 3)
    nothing = nv(np.zeros((0, 3), np.float32), device)
    row = ignis.take(nothing, nv(np.array([0]), device)).to_host()  # every index out of range
    assert row.shape == (1, 3) and np.isnan(row).all()
    scalar_idx = ignis.take(a, nv(np.array(2), device))  # a 0-d index drops the axis
    np.testing.assert_array_equal(scalar_idx.to_host(), a.to_host()[2])


def test_take_bad_input(device: str) -> None:
    a = ignis.zeros((4, 3), device=device)
    with pytest.raises(ignis.DTypeError, match="take: indices must be int32 or int64, got float32"):
        ignis.take(a, ignis.zeros((2,), device=device))
    with pytest.raises(ignis.DTypeError, match="take: indices must be integers"):
        ignis.take(a, [0.5, 1.0])
    with pytest.raises(TypeError, match="take: indices must be an int32/int64 NvArray or a list"):
        ignis.take(a, np.array([0, 1]))
    with pytest.raises(ignis.ShapeError, match="take: the array must have at least 1 dimension"):
        ignis.take(ignis.zeros((), device=device), [0])
    with pytest.raises(ignis.ShapeError, match="take"):
        ignis.take(a, [0], axis=2)


def test_take_agrees_with_torch(device: str, rng: np.random.Generator) -> None:
    torch = pytest.importorskip("torch")
    a = random_array(rng, (6, 5, 4), "float32")
    idx = rng.integers(0, 5, size=9)
    expected = torch.index_select(torch.from_numpy(a), 1, torch.from_numpy(idx)).numpy()
    np.testing.assert_array_equal(
        ignis.take(nv(a, device), nv(idx, device), axis=1).to_host(), expected
    )


# --- integer-array indexing --------------------------------------------------------------------


def test_getitem_with_integer_arrays(device: str, rng: np.random.Generator) -> None:
    a = random_array(rng, (6, 4, 5), "float32")
    x = nv(a, device)
    idx = np.array([[5, 0], [-1, 2]])
    np.testing.assert_array_equal(x[nv(idx, device)].to_host(), a[idx])
    np.testing.assert_array_equal(x[[3, 3, 1]].to_host(), a[[3, 3, 1]])
    np.testing.assert_array_equal(x[nv(idx, device), 1:3].to_host(), a[idx, 1:3])
    np.testing.assert_array_equal(x[nv(idx, device), ..., ::2].to_host(), a[idx, ..., ::2])
    np.testing.assert_array_equal(x[nv(idx, device), None, 0].to_host(), a[idx][:, :, None, 0])
    np.testing.assert_array_equal(x[nv(np.array(2), device)].to_host(), a[2])  # 0-d: basic


def test_getitem_bad_advanced_indexing(device: str) -> None:
    # (the standard's indexing itself is tested in test_indexing_standard.py)
    x = ignis.zeros((4, 3), device=device)
    with pytest.raises(IndexError, match="does not match"):
        x[ignis.zeros((3,), dtype="bool", device=device)]
    with pytest.raises(IndexError, match="cannot be broadcast together"):
        x[[0, 1], [1, 2, 0]]


# --- index_add ---------------------------------------------------------------------------------

ADD_TYPES = ["float16", "bfloat16", "float32", "float64", "int32", "int64"]


def np_index_add(dst: np.ndarray, axis: int, idx: np.ndarray, src: np.ndarray, alpha) -> np.ndarray:
    """Float64 (exact integer) reference: loop over the index positions in order."""
    work = np.float64 if dst.dtype.kind == "f" or dst.dtype == np_dtype("bfloat16") else np.int64
    out = dst.astype(work)
    d = np.moveaxis(out, axis, 0)
    s = np.moveaxis(src.astype(work), list(range(axis, axis + idx.ndim)), list(range(idx.ndim)))
    s = s.reshape((idx.size,) + s.shape[idx.ndim :])
    n = d.shape[0]
    for j, k in enumerate(idx.reshape(-1)):
        k = k + n if k < 0 else k
        if 0 <= k < n:
            d[k] += alpha * s[j]
    return out


@pytest.mark.parametrize("dtype", ADD_TYPES)
@pytest.mark.parametrize("axis", [0, 1, 2])
def test_index_add_matches_numpy(
    device: str, rng: np.random.Generator, dtype: str, axis: int
) -> None:
    dst = random_array(rng, (4, 5, 6), dtype)
    n = dst.shape[axis]
    idx = rng.integers(-n, n, size=(3, 4))
    idx[0, :3] = 1  # repeated indices accumulate
    shape = dst.shape[:axis] + idx.shape + dst.shape[axis + 1 :]
    src = random_array(rng, shape, dtype)
    alpha = 3 if dtype.startswith("int") else 0.5
    x = nv(dst, device)
    result = ignis.index_add(x, axis, nv(idx, device), nv(src, device), alpha)
    assert result is x
    expected = np_index_add(dst, axis, idx, src, alpha)
    if dtype in FLOATS:
        rtol, atol = TOL[dtype]
        scale = 1.0 if dtype in ("float16", "bfloat16") else 10.0  # several rounded additions
        np.testing.assert_allclose(
            x.to_host().astype(np.float64), expected, rtol=rtol * scale, atol=atol * scale * 8
        )
    else:
        np.testing.assert_array_equal(x.to_host(), expected.astype(dtype))


def test_index_add_half_accumulates_in_float32(device: str) -> None:
    # 1000 ones into one bfloat16 element: summed in bfloat16 it would stop at 256.
    dst = ignis.zeros((3, 2), dtype="bfloat16", device=device)
    ignis.index_add(
        dst,
        0,
        ignis.zeros((1000,), dtype="int64", device=device),
        ignis.ones((1000, 2), dtype="bfloat16", device=device),
    )
    np.testing.assert_array_equal(dst.to_host().astype(np.float64), [[1000, 1000], [0, 0], [0, 0]])


def test_index_add_deterministic_adds_in_index_order(device: str, rng: np.random.Generator) -> None:
    n, m, inner = 7, 3000, 33
    dst = random_array(rng, (n, inner), "float32")
    src = (rng.standard_normal((m, inner)) * 10.0 ** rng.integers(-3, 4, size=(m, 1))).astype(
        np.float32
    )
    idx = rng.integers(0, n, size=m)
    x = nv(dst, device)
    x.index_add_(0, nv(idx, device), nv(src, device), 0.25, deterministic=True)
    expected = dst.copy()  # float32 additions one index after another
    alpha = np.float32(0.25)
    for j, k in enumerate(idx):
        expected[k] += alpha * src[j]
    np.testing.assert_array_equal(x.to_host(), expected)


def test_index_add_out_of_range_skips_and_check_raises(device: str) -> None:
    dst = ignis.zeros((4, 2), device=device)
    idx = nv(np.array([1, 4, -5, -1]), device)
    ignis.index_add(dst, 0, idx, ignis.ones((4, 2), device=device))
    np.testing.assert_array_equal(dst.to_host()[:, 0], [0, 1, 0, 1])
    with pytest.raises(IndexError, match=r"index_add: 2 index\(es\) outside \[-4, 4\)"):
        ignis.index_add(dst, 0, idx, ignis.ones((4, 2), device=device), check=True)
    np.testing.assert_array_equal(dst.to_host()[:, 0], [0, 1, 0, 1])  # nothing was added


def test_index_add_views_and_aliasing(device: str, rng: np.random.Generator) -> None:
    base = random_array(rng, (5, 4), "float64")
    x = nv(base, device)
    view = x.T  # non-contiguous destination: written back through the view
    src = random_array(rng, (4, 3), "float64")
    ignis.index_add(view, 1, nv(np.array([0, 4, 0]), device), nv(src, device))
    expected = base.copy()
    expected[0] += src[:, 0] + src[:, 2]
    expected[4] += src[:, 1]
    np.testing.assert_allclose(x.to_host(), expected, rtol=1e-12)
    y = nv(base, device)
    ignis.index_add(y, 0, nv(np.array([1, 2]), device), y[0:2])  # src overlaps dst
    expected = base.copy()
    expected[1] += base[0]
    expected[2] += base[1]
    np.testing.assert_allclose(y.to_host(), expected, rtol=1e-12)


def test_index_add_empty(device: str) -> None:
    dst = ignis.ones((3, 2), device=device)
    ignis.index_add(
        dst, 0, nv(np.zeros((0,), np.int64), device), ignis.zeros((0, 2), device=device)
    )
    np.testing.assert_array_equal(dst.to_host(), np.ones((3, 2)))


def test_index_add_bad_input(device: str) -> None:
    dst = ignis.zeros((4, 3), device=device)
    idx = nv(np.array([0, 1]), device)
    with pytest.raises(
        ignis.ShapeError, match=r"index_add: src has shape \(3, 3\), expected \(2, 3\)"
    ):
        ignis.index_add(dst, 0, idx, ignis.zeros((3, 3), device=device))
    with pytest.raises(ignis.DTypeError, match="index_add: dst must be float16, .* got int8"):
        ignis.index_add(
            ignis.zeros((4,), dtype="int8", device=device),
            0,
            idx,
            ignis.zeros((2,), dtype="int8", device=device),
        )
    with pytest.raises(ignis.DTypeError, match="index_add: src of dtype float32 cannot be added"):
        ignis.index_add(
            ignis.zeros((4,), dtype="int64", device=device),
            0,
            idx,
            ignis.zeros((2,), device=device),
        )
    with pytest.raises(ignis.DTypeError, match="alpha must be an int"):
        ignis.index_add(
            ignis.zeros((4,), dtype="int64", device=device),
            0,
            idx,
            ignis.zeros((2,), dtype="int64", device=device),
            alpha=0.5,
        )
    with pytest.raises(ignis.DTypeError, match="index_add: indices must be int32 or int64"):
        ignis.index_add(
            dst, 0, ignis.zeros((2,), device=device), ignis.zeros((2, 3), device=device)
        )


def test_index_add_agrees_with_torch(device: str, rng: np.random.Generator) -> None:
    torch = pytest.importorskip("torch")
    dst = random_array(rng, (5, 6), "float64")
    src = random_array(rng, (5, 9), "float64")
    idx = rng.integers(0, 6, size=9)
    expected = torch.from_numpy(dst.copy()).index_add_(
        1, torch.from_numpy(idx), torch.from_numpy(src), alpha=2.0
    )
    x = nv(dst, device)
    x.index_add_(1, nv(idx, device), nv(src, device), alpha=2.0)
    np.testing.assert_allclose(x.to_host(), expected.numpy(), rtol=1e-12, atol=1e-12)


# --- embedding ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS)
def test_embedding_forward_and_backward(device: str, rng: np.random.Generator, dtype: str) -> None:
    vocab, dim = 50, 33
    w = random_array(rng, (vocab, dim), dtype)
    ids = rng.integers(0, vocab, size=(3, 17))
    ids[0, :5] = 7  # repeats
    y = ignis.nn.embedding(nv(ids, device, "int32"), nv(w, device))
    np.testing.assert_array_equal(y.to_host(), w[ids])
    g = random_array(rng, (3, 17, dim), dtype)
    gw = ignis.nn.embedding_backward(nv(g, device), nv(ids, device), vocab)
    assert gw.dtype.name == dtype and gw.shape == (vocab, dim)
    expected = np.zeros((vocab, dim))
    np.add.at(expected, ids.reshape(-1), g.reshape(-1, dim).astype(np.float64))
    rtol, atol = TOL[dtype]
    np.testing.assert_allclose(
        gw.to_host().astype(np.float64), expected, rtol=rtol * 4, atol=atol * 8
    )
    f32 = ignis.nn.embedding_backward(
        nv(g, device), nv(ids, device), vocab, dtype="float32", deterministic=True
    )
    assert f32.dtype is ignis.float32


def test_embedding_agrees_with_torch(device: str, rng: np.random.Generator) -> None:
    torch = pytest.importorskip("torch")
    w = random_array(rng, (40, 8), "float64")
    ids = rng.integers(0, 40, size=(5, 6))
    tw = torch.from_numpy(w.copy()).requires_grad_(True)
    ty = torch.nn.functional.embedding(torch.from_numpy(ids), tw)
    tg = torch.from_numpy(random_array(rng, (5, 6, 8), "float64"))
    ty.backward(tg)
    y = ignis.nn.embedding(nv(ids, device), nv(w, device))
    np.testing.assert_array_equal(y.to_host(), ty.detach().numpy())
    gw = ignis.nn.embedding_backward(nv(tg.numpy(), device), nv(ids, device), 40)
    np.testing.assert_allclose(gw.to_host(), tw.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_embedding_bad_input(device: str) -> None:
    w = ignis.zeros((4, 2), device=device)
    with pytest.raises(ignis.ShapeError, match=r"embedding: weight must be a 2-D \(rows, dim\)"):
        ignis.nn.embedding(nv(np.array([0]), device), ignis.zeros((4,), device=device))
    with pytest.raises(IndexError, match=r"embedding: 1 index\(es\) outside \[-4, 4\)"):
        ignis.nn.embedding(nv(np.array([0, 7]), device), w, check=True)
    with pytest.raises(ignis.ShapeError, match="embedding_backward: grad has shape"):
        ignis.nn.embedding_backward(
            ignis.zeros((3, 2), device=device), nv(np.array([0, 1]), device), 4
        )
    with pytest.raises(ignis.DTypeError, match="embedding_backward: grad must be a floating"):
        ignis.nn.embedding_backward(
            ignis.zeros((2, 2), dtype="int32", device=device), nv(np.array([0, 1]), device), 4
        )


# --- autograd ----------------------------------------------------------------------------------


def test_autograd_embedding_and_index_gradients(device: str, rng: np.random.Generator) -> None:
    w = Tensor(nv(rng.standard_normal((6, 4)), device), requires_grad=True)
    ids = nv(np.array([[0, 5, 5], [2, 0, -1]]), device)
    assert ag.gradcheck(lambda w: ag.embedding(ids, w) * 1.5, [w])
    assert ag.gradcheck(lambda w: w[ids, 1:].tanh(), [w])
    assert ag.gradcheck(lambda w: w.transpose()[[3, 1, 3]], [w])
    # The gradient of repeated rows adds up.
    w.grad = None
    ag.embedding(ids, w).sum().backward()
    counts = np.bincount(np.array([0, 5, 5, 2, 0, 5]), minlength=6)
    np.testing.assert_allclose(
        w.grad.to_host(), np.repeat(counts[:, None], 4, axis=1).astype(np.float64)
    )


def test_autograd_embedding_half_weight_gets_float32_sums(device: str) -> None:
    w = Tensor(ignis.ones((3, 2), dtype="bfloat16", device=device), requires_grad=True)
    ids = ignis.zeros((600,), dtype="int64", device=device)
    ag.embedding(ids, w).sum().backward()
    assert w.grad.to_host().astype(np.float64)[0, 0] == 600.0  # bfloat16 steps sum would stall


# --- GPU-only: the CUDA backend against the CPU backend ----------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_gpu_large_embedding_matches_cpu(rng: np.random.Generator, dtype: str) -> None:
    vocab, dim, tokens = 5003, 768, 8195  # enough rows for 4 rows per thread, and a part tile
    w = random_array(rng, (vocab, dim), dtype)
    ids = rng.integers(0, vocab, size=tokens)
    ids[:100] = 3  # a hot row
    g = random_array(rng, (tokens, dim), dtype)
    y = ignis.nn.embedding(nv(ids, "cuda:0"), nv(w, "cuda:0"))
    np.testing.assert_array_equal(y.to_host(), w[ids])
    got = ignis.nn.embedding_backward(nv(g, "cuda:0"), nv(ids, "cuda:0"), vocab, dtype="float32")
    ref = ignis.nn.embedding_backward(nv(g, "cpu"), nv(ids, "cpu"), vocab, dtype="float32")
    np.testing.assert_allclose(got.to_host(), ref.to_host(), rtol=1e-5, atol=1e-4)
    det1 = ignis.nn.embedding_backward(
        nv(g, "cuda:0"), nv(ids, "cuda:0"), vocab, dtype="float32", deterministic=True
    )
    np.testing.assert_array_equal(det1.to_host(), ref.to_host())  # same order, same bits


@pytest.mark.gpu
def test_gpu_take_and_index_add_match_cpu_for_every_dtype(rng: np.random.Generator) -> None:
    for dtype in ALL:
        a = random_array(rng, (9, 13, 5), dtype)
        idx = rng.integers(-13, 15, size=(6, 7))  # some out of range
        got = ignis.take(nv(a, "cuda:0"), nv(idx, "cuda:0"), axis=1).to_host()
        ref = ignis.take(nv(a, "cpu"), nv(idx, "cpu"), axis=1).to_host()
        np.testing.assert_array_equal(got.astype(np.float64), ref.astype(np.float64), err_msg=dtype)
    for dtype in ["int32", "int64"]:
        dst = random_array(rng, (9, 13, 5), dtype)
        src = random_array(rng, (9, 6, 7, 5), dtype)
        outs = []
        for dev in ("cuda:0", "cpu"):
            x = nv(dst, dev)
            ignis.index_add(x, 1, nv(idx, dev), nv(src, dev), alpha=-2)
            outs.append(x.to_host())
        np.testing.assert_array_equal(outs[0], outs[1], err_msg=dtype)


@pytest.mark.gpu
@pytest.mark.parametrize(
    "rows_in_flight, min_blocks",
    [(4, 0), (2, 0), (3, 0), (8, 0), (4, 10**9)],  # always 4, 2, 3, 8 rows per thread / 1
)
def test_gpu_take_row_tiles_match_numpy(
    tune, rng: np.random.Generator, rows_in_flight: int, min_blocks: int
) -> None:
    # Every dtype and vector width through the take kernels: one outer block and several
    # (the division path), tiles that the rows do not fill, rows longer than a block (the
    # column loop), out-of-range and negative indices of both index dtypes.
    tune(indexing=dict(take_rows_in_flight=rows_in_flight, take_min_blocks_per_sm=min_blocks))
    cases = [((50, 8), 0, 37), ((3, 50, 8), 1, 29), ((7, 40, 1), 1, 13), ((40, 1100), 0, 9)]
    for dtype in ALL:
        for shape, axis, m in cases:
            a = random_array(rng, shape, dtype)
            n = shape[axis]
            for index_dtype in (np.int32, np.int64):
                idx = rng.integers(-n - 2, n + 2, size=m).astype(index_dtype)
                idx[:2] = [n - 1, -n]
                got = ignis.take(nv(a, "cuda:0"), nv(idx, "cuda:0"), axis=axis).to_host()
                np.testing.assert_array_equal(
                    got.astype(np.float64),
                    np_take(a, idx, axis).astype(np.float64),
                    err_msg=f"{dtype} {shape} axis={axis} {index_dtype.__name__}",
                )


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [*ALL, "int16", "complex64", "complex128"])
def test_gpu_take_odd_shapes_and_misaligned_tables_match_numpy(
    rng: np.random.Generator, dtype: str
) -> None:
    # Odd row counts, widths that are no multiple of a 16-byte move, tables one element past a
    # 16-byte boundary (narrower moves) and strided ones (copied by the front end), under the
    # default settings and under small grids (blocks loop over tiles).
    def table(shape: tuple) -> np.ndarray:
        if dtype.startswith("complex"):
            return (rng.uniform(-4, 4, shape) + 1j * rng.uniform(-4, 4, shape)).astype(dtype)
        return random_array(rng, shape, dtype)

    for n, width, m in [(37, 768, 8191), (50, 7, 333), (9, 1, 1001), (13, 2050, 65)]:
        a = table((n, width))
        idx = rng.integers(-n - 2, n + 2, size=m)
        idx[:2] = [n - 1, -n]
        want = np_take(a, idx, 0).astype(np.complex128 if "complex" in dtype else np.float64)
        flat = nv(np.concatenate([table((1,)), a.ravel()]), "cuda:0")
        views = {
            "aligned": nv(a, "cuda:0"),
            "one element off": flat[1:].reshape(n, width),
            "strided": nv(np.repeat(a, 2, axis=1), "cuda:0")[:, ::2],
        }
        for what, table_view in views.items():
            got = ignis.take(table_view, nv(idx, "cuda:0"), axis=0).to_host()
            np.testing.assert_array_equal(
                got.astype(want.dtype), want, err_msg=f"{dtype} {(n, width)} m={m} {what}"
            )


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", FLOATS + ["int64", "bool"])
def test_gpu_embedding_of_the_benchmark_shape_matches_numpy(
    rng: np.random.Generator, dtype: str
) -> None:
    # The table of the benchmark (50304 x 768) looked up by 8192 ids (2 rows a thread for the
    # 4-byte types, 1 for the 2-byte ones), and by 8195 (a part-full last tile), of both index
    # dtypes, with a hot row and every index in range.
    vocab, dim = 50304, 768
    w = random_array(rng, (vocab, dim), dtype)
    w_gpu = nv(w, "cuda:0")
    for tokens, index_dtype in [(8192, np.int64), (8195, np.int32)]:
        ids = rng.integers(0, vocab, size=tokens).astype(index_dtype)
        ids[:64] = vocab - 1
        y = ignis.nn.embedding(nv(ids, "cuda:0"), w_gpu).to_host()
        np.testing.assert_array_equal(y, w[ids], err_msg=f"{dtype} {tokens}")


# --- the CUDA backend's launches, on the stand-in GPU of tests/ignis/runtime/fake_gpu.py ---------
# Runs everywhere: the kernels are parsed from cuda_src/ and launched into a recorder, so these
# check names, configurations and the packing of every argument, not results.


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch):
    yield from stand_in_gpu(monkeypatch, cuda_indexing)


def _launched(gpu: fake_gpu.FakeGpu, prefix: str) -> list:
    return [launch for launch in gpu.launches if launch[0].startswith(prefix)]


def test_fake_gpu_take_launch(fake) -> None:
    a = ignis.empty((3, 10, 8), dtype="float32", device="cuda:0")
    idx = ignis.empty((5,), dtype="int32", device="cuda:0")
    out = ignis.take(a, idx, axis=1)
    ((name, grid, block, _, args),) = _launched(fake, "ignis::idx::take_rows")
    # 16-byte moves, one row per thread (15 rows cannot fill 132 multiprocessors anyway)
    assert name == "ignis::idx::take_rows<float, ignis::int32, 4, 1>"
    assert block == (2, 128, 1) and grid == (1, 1, 1)  # 8 floats = 2 packs per row
    assert [struct.unpack("<Q", v)[0] for v in args[:3]] == [a.data_ptr, idx.data_ptr, out.data_ptr]
    assert [arg_i64(v) for v in args[3:]] == [15, 5, 10, 2]
    fake.launches.clear()
    ignis.take(ignis.empty((4, 1000), dtype="bfloat16", device="cuda:0"), idx)
    ((name, _, block, _, args),) = _launched(fake, "ignis::idx::take_rows")
    assert name == "ignis::idx::take_rows<ignis::bfloat16, ignis::int32, 8, 1>" and block == (
        128,
        2,
        1,
    )
    assert arg_i64(args[-1]) == 125


def test_fake_gpu_take_keeps_rows_in_flight_while_the_grid_runs_several_waves(fake) -> None:
    # The embedding lookup of the benchmark: 8192 rows of 768 floats = 192 packs of 16 bytes.
    # 4 rows a thread would give 2048 blocks, 15.5 per multiprocessor (132 here): fewer than the
    # 24 of take_min_blocks_per_sm, so 2 rows a thread (4096 blocks of 192 threads, 31 each).
    w = ignis.empty((50304, 768), dtype="float32", device="cuda:0")
    ids = ignis.empty((8192,), dtype="int64", device="cuda:0")
    ignis.nn.embedding(ids, w)
    ((name, grid, block, _, args),) = _launched(fake, "ignis::idx::take_rows")
    assert name == "ignis::idx::take_rows<float, ignis::int64, 4, 2>"
    assert block == (192, 1, 1) and grid == (8192 // 2, 1, 1)
    assert [arg_i64(v) for v in args[3:]] == [8192, 8192, 50304, 192]
    fake.launches.clear()
    # bfloat16: 96 packs per row, two rows per block; 2 rows a thread would give 2049 blocks,
    # so 1 (4098 blocks: 8195 rows leave the last one half full)
    ignis.nn.embedding(
        ignis.empty((8195,), dtype="int32", device="cuda:0"),
        ignis.empty((50304, 768), dtype="bfloat16", device="cuda:0"),
    )
    ((name, grid, block, _, _),) = _launched(fake, "ignis::idx::take_rows")
    assert name == "ignis::idx::take_rows<ignis::bfloat16, ignis::int32, 8, 1>"
    assert block == (96, 2, 1) and grid == (-(-8195 // 2), 1, 1)
    # the thresholds: 24 blocks per multiprocessor of 4-row tiles, else of 2-row tiles, else
    # 1 row a thread, but never so few rows a thread that the grid would pass its cap of 32
    # blocks per multiprocessor (the blocks would then loop over tiles)
    w = ignis.empty((10, 768), device="cuda:0")
    want, cap = 24 * 132, 32 * 132
    for rows, per_thread, blocks in [
        (64, 1, 64),
        (cap, 1, cap),  # 1 row a thread: exactly the cap
        (cap + 1, 2, -(-(cap + 1) // 2)),  # 1 would pass the cap
        (2 * want - 2, 2, want - 1),  # short of 24 per multiprocessor, but 1 would pass the cap
        (2 * want, 2, want),
        (2 * cap, 2, cap),
        (2 * cap + 1, 4, -(-(2 * cap + 1) // 4)),
        (4 * want, 4, want),
        (100 * cap, 4, cap),  # 4 rows a thread at most: the blocks loop over tiles
    ]:
        fake.launches.clear()
        ignis.take(w, ignis.empty((rows,), dtype="int32", device="cuda:0"))
        ((name, grid, _, _, _),) = _launched(fake, "ignis::idx::take_rows")
        assert name.endswith(f", 4, {per_thread}>") and grid == (blocks, 1, 1), rows


def test_take_rows_choices_halve_the_setting() -> None:
    assert cuda_indexing.take_rows_choices(4) == [4, 2, 1]
    assert cuda_indexing.take_rows_choices(6) == [6, 3, 1]
    assert cuda_indexing.take_rows_choices(1) == [1]


def test_fake_gpu_take_follows_the_indexing_settings(fake, tune) -> None:
    # take_rows_in_flight=6: 6, 3 or 1 rows a thread, each in the list of kernels to compile
    tune(indexing=dict(take_rows_in_flight=6, take_min_blocks_per_sm=2))
    names = cuda_indexing.kernel_names(ignis.tuning().indexing)["indexing.cu"]
    for u in (6, 3, 1):
        assert f"ignis::idx::take_rows<float, ignis::int64, 4, {u}>" in names
    w = ignis.empty((10, 768), device="cuda:0")
    for rows, per_thread in [(6 * 264, 6), (6 * 263, 3), (3 * 263, 1)]:
        fake.launches.clear()
        ignis.take(w, ignis.empty((rows,), dtype="int64", device="cuda:0"))
        ((name, grid, _, _, _),) = _launched(fake, "ignis::idx::take_rows")
        assert name == f"ignis::idx::take_rows<float, ignis::int64, 4, {per_thread}>", rows
        assert grid == (-(-rows // per_thread), 1, 1)
        assert name in names


def test_fake_gpu_repeated_take_launches_from_its_plan(fake) -> None:
    # The second lookup of a shape goes through the remembered prepared launch: the same
    # kernel, grid, block and scalar arguments, with the pointers of the new operands.
    w = ignis.empty((50304, 768), dtype="bfloat16", device="cuda:0")
    runs = []
    for _ in range(3):
        ids = ignis.empty((8192,), dtype="int64", device="cuda:0")
        out = ignis.nn.embedding(ids, w)
        ((name, grid, block, _, args),) = _launched(fake, "ignis::idx::take_rows")
        fake.launches.clear()
        assert [arg_ptr(v) for v in args[:3]] == [w.data_ptr, ids.data_ptr, out.data_ptr]
        runs.append((name, grid, block, [arg_i64(v) for v in args[3:]]))
    assert runs[0] == runs[1] == runs[2]
    assert runs[0][0] == "ignis::idx::take_rows<ignis::bfloat16, ignis::int64, 8, 1>"
    assert runs[0][3] == [8192, 8192, 50304, 96]
    assert cuda_indexing._take_plans.hits >= 2
    # a table 4 bytes past a 16-byte boundary: another plan (4-byte moves, 384 per row: blocks
    # of 256 x 1, 2 rows a thread), not the 16-byte one
    base = ignis.empty((10 * 768 + 2,), dtype="bfloat16", device="cuda:0")
    shifted = base[2:].reshape(10, 768)
    ignis.nn.embedding(ignis.empty((8192,), dtype="int64", device="cuda:0"), shifted)
    ((name, grid, block, _, args),) = _launched(fake, "ignis::idx::take_rows")
    assert name == "ignis::idx::take_rows<ignis::bfloat16, ignis::int64, 2, 2>"
    assert block == (256, 1, 1) and grid == (4096, 1, 1)
    assert arg_ptr(args[0]) == shifted.data_ptr and arg_i64(args[-1]) == 384


def test_fake_gpu_take_plan_follows_a_change_of_settings(fake, tune) -> None:
    # A remembered plan keeps the settings it was made under: new settings make a new one.
    w = ignis.empty((50304, 768), dtype="float32", device="cuda:0")
    ids = ignis.empty((8192,), dtype="int64", device="cuda:0")
    for rows_in_flight, per_thread, grid in [(4, 2, 4096), (1, 1, 32 * 132), (4, 2, 4096)]:
        tune(indexing=dict(take_rows_in_flight=rows_in_flight))
        for _ in range(2):
            fake.launches.clear()
            ignis.nn.embedding(ids, w)
            ((name, launched_grid, _, _, _),) = _launched(fake, "ignis::idx::take_rows")
            assert name == f"ignis::idx::take_rows<float, ignis::int64, 4, {per_thread}>"
            assert launched_grid == (grid, 1, 1)


def test_fake_gpu_index_add_launches(fake) -> None:
    dst = ignis.empty((6, 33), dtype="bfloat16", device="cuda:0")
    idx = ignis.empty((2, 4), dtype="int64", device="cuda:0")
    src = ignis.empty((2, 4, 33), dtype="bfloat16", device="cuda:0")
    ignis.index_add(dst, 0, idx, src, alpha=0.5)
    ((name, _, block, _, args),) = _launched(fake, "ignis::idx::index_add")
    assert name == "ignis::idx::index_add_atomic<float, ignis::int64>"  # in a float32 copy
    assert block == (64, 4, 1)
    assert [arg_i64(v) for v in args[3:7]] == [8, 8, 6, 33]
    assert struct.unpack("<f", args[7])[0] == 0.5
    fake.launches.clear()
    ignis.index_add(
        ignis.empty((6, 33), dtype="int32", device="cuda:0"),
        0,
        idx,
        ignis.empty((2, 4, 33), dtype="int32", device="cuda:0"),
        alpha=-3,
        deterministic=True,
    )
    ((name, grid, block, _, args),) = _launched(fake, "ignis::idx::index_add")
    assert name == "ignis::idx::index_add_ordered<ignis::int32, ignis::int64>"
    assert block == (256, 1, 1) and struct.unpack("<i", args[7])[0] == -3


def test_fake_gpu_dropout_and_rope_launches(fake) -> None:
    x = ignis.empty((5, 7), dtype="float16", device="cuda:0")
    y, mask = ignis.nn.dropout(x, 0.25, seed=2**32 + 3, offset=9)
    ((name, grid, block, _, args),) = _launched(fake, "ignis::nn::dropout_forward")
    assert name == "ignis::nn::dropout_forward<ignis::float16, float, true>"  # 16-byte vectors
    assert grid == (1, 1, 1) and block == (256, 1, 1)
    assert [struct.unpack("<Q", v)[0] for v in args[:3]] == [x.data_ptr, y.data_ptr, mask.data_ptr]
    assert arg_i64(args[3]) == 35
    assert struct.unpack("<IIQI", b"".join(args[4:8])) == (3, 1, 9, 1 << 22)
    assert struct.unpack("<f", args[8])[0] == pytest.approx(4 / 3)
    ignis.nn.dropout_backward(ignis.empty((5, 7), dtype="float64", device="cuda:0"), mask, 0.25)
    ((name, _, _, _, args),) = _launched(fake, "ignis::nn::dropout_backward")
    assert name == "ignis::nn::dropout_backward<double, double, true>"
    q = ignis.empty((2, 3, 4, 128), dtype="bfloat16", device="cuda:0")
    ignis.nn.rope(q, offset=5)
    pos = ignis.empty((2, 3, 4), dtype="int32", device="cuda:0")
    ignis.nn.rope_backward(q, pos, base=500000.0, interleaved=True)
    (first, second) = _launched(fake, "ignis::nn::rope")
    assert first[0] == "ignis::nn::rope<ignis::bfloat16, float, ignis::int64, false, false>"
    assert first[2] == (64, 4, 1)
    assert [arg_i64(v) for v in first[4][3:8]] == [24, 4, 0, 64, 5] and first[4][9] == b"\x00"
    assert second[0] == "ignis::nn::rope<ignis::bfloat16, float, ignis::int32, true, true>"
    assert [arg_i64(v) for v in second[4][3:8]] == [24, 4, 4, 64, 0] and second[4][9] == b"\x01"
    assert struct.unpack("<d", second[4][8])[0] == pytest.approx(np.log2(500000.0))
