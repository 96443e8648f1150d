"""sort / argsort / searchsorted / nonzero / count_nonzero / unique_* / cumulative_sum / _prod
against NumPy on random data with ties, NaNs, infinities and signed zeros, every dtype.

Three ways the CUDA path is checked: on a GPU through the shared ``device`` fixture; without
one, the host planning of ``_cuda_backend/sorting.py`` on the stand-in GPU of
tests/ignis/runtime (launch names and arguments, and no host synchronization: the stand-in has
no driver to wait on); and in the exhaustive tier the kernels of sort.cu themselves, compiled
for the host (``sort_emulator.py``), under the whole front end.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest
import sort_emulator
from array_helpers import ALL, FLOATS, np_dtype, stand_in_gpu, to64
from ignis._array import _sorting
from ignis._array._cuda_backend import sorting as cuda_sorting

import ignis
from ignis import CompileOptions, _sources
from ignis import _dtypes as dt

# --- data and references -----------------------------------------------------------------------

# Every real dtype: those of array_helpers and the integers the CUDA type table added since.
DTYPES = ALL + [d for d in ("int16", "uint16", "uint32", "uint64") if d not in ALL]
INTS = [d for d in DTYPES if d != "bool" and d not in FLOATS]
CDTYPES = ["complex64", "complex128"]
EVERY = DTYPES + CDTYPES  # (the functions here take complex numbers too)
# cumulative_sum's default result dtype (the standard's rule with int64 the default integer)
SCAN_RESULT = {
    "int8": "int64",
    "int16": "int64",
    "int32": "int64",
    "uint8": "uint64",
    "uint16": "uint64",
    "uint32": "uint64",
}


def special_array(rng: np.random.Generator, shape: tuple, dtype: str) -> np.ndarray:
    """Random data of ``dtype`` with many ties; floats also get NaN, +-inf and +-0.0 (complex
    numbers in either part, independently: every NaN class of NumPy's complex order)."""
    if dtype in CDTYPES:
        part = "float32" if dtype == "complex64" else "float64"
        out = np.empty(shape, dtype)
        out.real = special_array(rng, shape, part)
        out.imag = special_array(rng, shape, part)
        return out
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype in INTS:
        info = np.iinfo(dtype)
        out = rng.integers(-6 if info.min < 0 else 0, 7, size=shape).astype(dtype)
        flat = out.reshape(-1)
        if flat.size > 4:  # the extremes order correctly too
            flat[1], flat[-2] = info.min, info.max
        return out
    x = rng.integers(-5, 6, size=shape).astype(np.float64) * 0.5
    pick = rng.random(shape)
    x[pick < 0.06] = np.nan
    x[(pick >= 0.06) & (pick < 0.09)] = np.inf
    x[(pick >= 0.09) & (pick < 0.12)] = -np.inf
    x[(pick >= 0.12) & (pick < 0.2)] = -0.0
    return x.astype(np_dtype(dtype))


def np_order(a: np.ndarray) -> np.ndarray:
    """``a`` as NumPy orders it natively (bfloat16 as float32, exactly)."""
    return a.astype(np.float32) if a.dtype == np_dtype("bfloat16") else a


def np_argsort(a: np.ndarray, axis: int, descending: bool) -> np.ndarray:
    """Stable argsort; descending keeps equal elements in index order (the standard's rule)."""
    a = np_order(a)
    if not descending:
        return np.argsort(a, axis=axis, kind="stable")
    n = a.shape[axis]
    flipped = np.argsort(np.flip(a, axis=axis), axis=axis, kind="stable")
    return (n - 1) - np.flip(flipped, axis=axis)


def nv(a: np.ndarray, device: str, dtype: str | None = None) -> ignis.NvArray:
    return ignis.NvArray.from_host(a, dtype=dtype, device=device)


def same(got: np.ndarray, want: np.ndarray) -> bool:
    """Equal element for element, NaN matching NaN (complex: part by part)."""
    if np.iscomplexobj(want):
        got, want = np.asarray(got), np.asarray(want)
        return bool(
            np.array_equal(got.real, want.real, equal_nan=True)
            and np.array_equal(got.imag, want.imag, equal_nan=True)
        )
    return bool(np.array_equal(to64(got), to64(want), equal_nan=True))


# --- checks (shared by the device tests and the emulator tests) --------------------------------

SORT_CASES = [((7,), -1), ((3, 40), 1), ((4, 33, 5), 1), ((600,), 0), ((2, 2500), -1)]


def check_sort(device: str, rng: np.random.Generator, dtype: str, shape: tuple, axis: int) -> None:
    check_sort_of(device, special_array(rng, shape, dtype), axis)


def check_sort_of(device: str, a: np.ndarray, axis: int) -> None:
    dtype = "bfloat16" if a.dtype == np_dtype("bfloat16") else a.dtype.name
    x = nv(a, device)
    for desc in (False, True):
        idx = ignis.argsort(x, axis=axis, descending=desc)
        assert idx.dtype == ignis.int64 and idx.shape == a.shape
        want = np_argsort(a, axis, desc)
        np.testing.assert_array_equal(idx.to_host(), want, err_msg=f"{dtype} desc={desc}")
        got = ignis.sort(x, axis=axis, descending=desc, stable=False)
        assert got.dtype == x.dtype and got.shape == a.shape
        expected = np.take_along_axis(a, want, axis=axis)
        assert same(got.to_host(), expected), (dtype, desc)


def check_cumulative(
    device: str, rng: np.random.Generator, dtype: str, shape: tuple, axis: int, init: bool
) -> None:
    a = special_array(rng, shape, dtype) if dtype in INTS else None
    if a is None:  # floats: finite and moderate, so that tolerances are meaningful
        a = rng.uniform(-2, 2, size=shape).astype(np_dtype(dtype))
        if dtype in CDTYPES:
            a = a + 1j * rng.uniform(-2, 2, size=shape).astype(a.real.dtype)
    x = nv(a, device)
    inexact = FLOATS + CDTYPES
    for fn, np_fn in ((ignis.cumulative_sum, np.cumsum), (ignis.cumulative_prod, np.cumprod)):
        if fn is ignis.cumulative_prod and dtype in inexact:
            a2 = (1 + rng.uniform(-0.01, 0.01, size=shape)).astype(np_dtype(dtype))
            if dtype in CDTYPES:  # near the unit circle: the products stay moderate
                a2 = a2 * np.exp(1j * rng.uniform(-0.1, 0.1, size=shape)).astype(dtype)
            x2, src = nv(a2, device), a2
        else:
            x2, src = x, a
        got = fn(x2, axis=axis, include_initial=init)
        out_dtype = SCAN_RESULT.get(dtype, dtype)
        assert got.dtype == ignis.asarray(np.zeros(1, np_dtype(out_dtype))).dtype
        with np.errstate(all="ignore"):
            if dtype in CDTYPES:
                ref = np_fn(src.astype(np.complex128), axis=axis)
            elif dtype in FLOATS:
                ref = np_fn(src.astype(np.float64), axis=axis)
            else:
                ref = np_fn(src.astype(np_dtype(out_dtype)), axis=axis, dtype=np_dtype(out_dtype))
        if init:
            first = np.ones_like if fn is ignis.cumulative_prod else np.zeros_like
            ref = np.concatenate([first(np.take(ref, [0], axis=axis)), ref], axis=axis)
        h = got.to_host()
        assert h.shape == ref.shape
        if dtype in inexact:
            n = shape[axis]
            tol = {"float16": 2e-3, "bfloat16": 1.6e-2, "float32": 1e-6, "float64": 1e-13}
            tol.update(complex64=1e-6, complex128=1e-13)
            got64 = h.astype(np.complex128) if dtype in CDTYPES else to64(h)
            np.testing.assert_allclose(got64, ref, rtol=tol[dtype] * 4, atol=tol[dtype] * n * 4)
        else:
            np.testing.assert_array_equal(h, ref)


def check_unique(device: str, rng: np.random.Generator, dtype: str, n: int) -> None:
    a = special_array(rng, (n,), dtype).reshape(-1)
    shape = (n // 4, 4) if n % 4 == 0 else (n,)
    a = a.reshape(shape)
    x = nv(a, device)
    values, indices, inverse, counts = ignis.unique_all(x)
    wv, wi, winv, wc = np.unique(
        np_order(a), return_index=True, return_inverse=True, return_counts=True, equal_nan=False
    )
    assert values.dtype == x.dtype and inverse.shape == a.shape
    assert same(values.to_host(), wv)
    np.testing.assert_array_equal(indices.to_host(), wi)
    np.testing.assert_array_equal(inverse.to_host().reshape(-1), winv.reshape(-1))
    np.testing.assert_array_equal(counts.to_host(), wc)
    v2, c2 = ignis.unique_counts(x)
    np.testing.assert_array_equal(c2.to_host(), wc)
    v3, i3 = ignis.unique_inverse(x)
    np.testing.assert_array_equal(i3.to_host().reshape(-1), winv.reshape(-1))
    v4 = ignis.unique_values(x)
    for v in (v2, v3, v4):
        assert same(v.to_host(), wv)


def check_nonzero(device: str, rng: np.random.Generator, dtype: str, shape: tuple) -> None:
    a = special_array(rng, shape, dtype)
    got = ignis.nonzero(nv(a, device))
    want = np.nonzero(np_order(a))
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == ignis.int64
        np.testing.assert_array_equal(g.to_host(), w)


def check_searchsorted(device: str, rng: np.random.Generator, dtype: str, m: int) -> None:
    s = np.sort(np_order(special_array(rng, (m,), dtype))).astype(np_dtype(dtype))
    v = special_array(rng, (3, 50), dtype)
    for side in ("left", "right"):
        got = ignis.searchsorted(nv(s, device), nv(v, device), side=side)
        assert got.dtype == ignis.int64 and got.shape == v.shape
        np.testing.assert_array_equal(
            got.to_host(), np.searchsorted(np_order(s), np_order(v), side=side)
        )


# --- every backend -----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", EVERY)
@pytest.mark.parametrize("shape,axis", SORT_CASES)
def test_sort_and_argsort_match_numpy(device, rng, dtype, shape, axis):
    check_sort(device, rng, dtype, shape, axis)


@pytest.mark.parametrize("dtype", ["float32", "int64", "float16", "uint8", "bool", *CDTYPES])
def test_long_rows_take_the_radix_path(device, rng, dtype):
    check_sort(device, rng, dtype, (70001,), 0)
    check_sort(device, rng, dtype, (3, 9000), 1)


# Row lengths around the CUDA paths' boundaries: shared-memory bitonic (<= 2048), one block a
# row (2049..4096), Onesweep passes over tiles of 4096 (4097 on), and columns (axis 0) sorted
# as rows of a transposed copy.
TILE_ROWS = [((3, 2049), 1), ((2, 3000), 1), ((2, 4096), 1), ((2, 4097), 1), ((8192, 2), 0)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,axis", TILE_ROWS)
@pytest.mark.parametrize("path", cuda_sorting._RADIX_PATHS)
def test_rows_across_the_tile_boundaries(device, rng, monkeypatch, dtype, shape, axis, path):
    monkeypatch.setattr(cuda_sorting, "RADIX_PATH", path)  # (the CPU backend ignores it)
    check_sort(device, rng, dtype, shape, axis)


def _gpu_only(device: str) -> None:
    if device == "cpu":
        pytest.skip("2**24-element CUDA paths (many tiles, every look-back length)")


@pytest.mark.parametrize("dtype", ["float32", "int32", "int64", "float64", "uint16"])
def test_sort_of_about_2_24_elements(device, rng, dtype):
    _gpu_only(device)
    n = (1 << 24) - 3
    if dtype in FLOATS:  # every bit pattern of the keys matters: random values, few ties
        a = rng.standard_normal(n).astype(dtype)
        a[rng.integers(0, n, 1000)] = np.nan
        a[rng.integers(0, n, 1000)] = -0.0
    else:
        a = rng.integers(np.iinfo(dtype).min, np.iinfo(dtype).max, size=n, dtype=dtype)
    x = nv(a, device)
    for desc in (False, True):
        idx = ignis.argsort(x, descending=desc).to_host()
        np.testing.assert_array_equal(idx, np_argsort(a, 0, desc), err_msg=f"{dtype} {desc}")
        got = ignis.sort(x, descending=desc).to_host()
        assert np.array_equal(got, np.take(a, idx), equal_nan=True)
    rows = a[: 4095 * 4096].reshape(4095, 4096)  # the benchmark's rows of one tile
    check = ignis.argsort(nv(rows, device), axis=1).to_host()
    np.testing.assert_array_equal(check, np_argsort(rows, 1, False))


@pytest.mark.parametrize(
    "items,blocks,rank",
    [
        (8, None, "ballots"),
        (20, None, "ballots"),
        (16, 2, "ballots"),
        (24, 3, "ballots"),
        (16, None, "atomic_or"),
        (20, 3, "atomic_or"),
    ],
)
def test_onesweep_tunings_sort_alike(device, rng, monkeypatch, items, blocks, rank):
    # the tunings of radix_onesweep one may sweep (ONESWEEP_ITEMS / ONESWEEP_BLOCKS /
    # ONESWEEP_RANK) all sort the same: many tiles a row, partial last tiles, several rows
    _gpu_only(device)
    monkeypatch.setattr(cuda_sorting, "ONESWEEP_ITEMS", {4: items, 8: min(items, 16)})
    monkeypatch.setattr(cuda_sorting, "ONESWEEP_BLOCKS", {4: blocks, 8: blocks})
    monkeypatch.setattr(cuda_sorting, "ONESWEEP_RANK", rank)
    info = np.iinfo(np.int32)
    check_sort_of(device, rng.integers(info.min, info.max, size=(1 << 20) + 7, dtype=np.int32), 0)
    check_sort_of(device, rng.standard_normal((3, 70001)).astype(np.float32), 1)
    check_sort_of(device, rng.integers(0, 1000, size=300001).astype(np.int64), 0)


def test_scans_and_unique_of_about_2_24_elements(device, rng):
    _gpu_only(device)
    n = (1 << 24) + 5
    f = rng.uniform(-1, 1, size=n).astype(np.float32)
    got = ignis.cumulative_sum(nv(f, device)).to_host()
    np.testing.assert_allclose(got, np.cumsum(f.astype(np.float64)), rtol=1e-4, atol=2e-2)
    again = ignis.cumulative_sum(nv(f, device)).to_host()
    assert got.tobytes() == again.tobytes()  # the same bits whatever the look-backs found
    i = rng.integers(-(1 << 40), 1 << 40, size=n)
    np.testing.assert_array_equal(ignis.cumulative_sum(nv(i, device)).to_host(), np.cumsum(i))
    few = rng.integers(0, 1000, size=n).astype(np.int32)
    v, c = ignis.unique_counts(nv(few, device))
    wv, wc = np.unique(few, return_counts=True)
    np.testing.assert_array_equal(v.to_host(), wv)
    np.testing.assert_array_equal(c.to_host(), wc)
    many = rng.integers(0, 1 << 20, size=n).astype(np.float32)
    np.testing.assert_array_equal(ignis.unique_values(nv(many, device)).to_host(), np.unique(many))


def test_argsort_is_stable_for_equal_floats_of_different_bits(device):
    a = np.array([0.0, -0.0, np.nan, -np.nan, 1.0, -0.0, np.nan, 0.0], np.float32)
    for desc in (False, True):
        got = ignis.argsort(nv(a, device), descending=desc).to_host()
        np.testing.assert_array_equal(got, np_argsort(a, 0, desc))
    s = ignis.sort(nv(a, device)).to_host()
    assert np.array_equal(s, np.sort(a), equal_nan=True) and (s[:4] == 0).all()


def test_sort_keeps_the_elements(device):
    # sort's values are the input's elements: zeros keep their signs, NaNs stay NaN
    a = np.array([3.0, -0.0, 2.0, -0.0, np.nan, -1.0], np.float64)
    got = ignis.sort(nv(a, device)).to_host()
    assert np.signbit(got[1]) and np.signbit(got[2]) and np.isnan(got[-1])
    d = ignis.sort(nv(a, device), descending=True).to_host()
    assert np.isnan(d[0]) and list(d[1:3]) == [3.0, 2.0] and np.signbit(d[3:5]).all()


def test_sort_empty_and_errors(device):
    e = nv(np.zeros((3, 0), np.float32), device)
    assert ignis.sort(e).shape == (3, 0) and ignis.argsort(e, axis=0).dtype == ignis.int64
    x = nv(np.arange(6.0).reshape(2, 3), device)
    with pytest.raises(ValueError, match="sort: expected an array of at least 1 dimension"):
        ignis.sort(nv(np.array(1.0), device))
    with pytest.raises(ValueError, match="argsort: axis 2 is out of range"):
        ignis.argsort(x, axis=2)
    with pytest.raises(TypeError, match="sort: descending must be True or False, got 1"):
        ignis.sort(x, descending=1)
    with pytest.raises(TypeError, match="argsort: stable must be True or False"):
        ignis.argsort(x, stable=None)
    with pytest.raises(TypeError, match="sort: expected x to be an NvArray, got list"):
        ignis.sort([3, 1])
    with pytest.raises(TypeError):
        ignis.sort(x, -1)  # axis is keyword-only


@pytest.mark.parametrize("dtype", EVERY)
def test_searchsorted_matches_numpy(device, rng, dtype):
    check_searchsorted(device, rng, dtype, 37)


def test_searchsorted_sorter_promotion_and_edges(device, rng):
    base = rng.integers(0, 20, size=30).astype(np.int32)
    order = np.argsort(base, kind="stable")
    v = np.array([-1.5, 0.0, 3.0, 7.5, 19.0, 40.0])
    for side in ("left", "right"):
        got = ignis.searchsorted(
            nv(base, device), nv(v, device), side=side, sorter=nv(order.astype(np.int64), device)
        )
        np.testing.assert_array_equal(got.to_host(), np.searchsorted(base, v, side, order))
    empty = ignis.searchsorted(nv(np.zeros(0, np.float32), device), nv(v, device))
    np.testing.assert_array_equal(empty.to_host(), np.zeros(6, np.int64))
    scalar = ignis.searchsorted(nv(np.array([1.0, 2.0]), device), nv(np.array(1.5), device))
    assert scalar.shape == () and int(scalar.item()) == 1
    x1 = nv(np.array([1.0, 2.0]), device)
    with pytest.raises(ValueError, match="searchsorted: x1 must be 1-D, got shape"):
        ignis.searchsorted(nv(np.eye(2), device), x1)
    with pytest.raises(ValueError, match="searchsorted: side must be 'left' or 'right'"):
        ignis.searchsorted(x1, x1, side="middle")
    with pytest.raises(TypeError, match="searchsorted: sorter must have an integer dtype"):
        ignis.searchsorted(x1, x1, sorter=x1)
    with pytest.raises(ValueError, match=r"searchsorted: sorter has shape \(1,\)"):
        ignis.searchsorted(x1, x1, sorter=nv(np.array([0]), device))


@pytest.mark.parametrize("dtype", EVERY)
@pytest.mark.parametrize("shape", [(1,), (50,), (6, 7), (3, 4, 5), (5000,)])
def test_nonzero_matches_numpy(device, rng, dtype, shape):
    check_nonzero(device, rng, dtype, shape)


def test_nonzero_edges_and_count_nonzero(device):
    a = np.array([[0.0, -0.0, np.nan], [1.0, 0.0, -2.0]], np.float32)
    rows, cols = ignis.nonzero(nv(a, device))
    assert rows.tolist() == [0, 1, 1] and cols.tolist() == [2, 0, 2]
    zeros = ignis.nonzero(nv(np.zeros((2, 3)), device))
    assert [z.shape for z in zeros] == [(0,), (0,)]
    assert [z.shape for z in ignis.nonzero(nv(np.zeros((0, 3)), device))] == [(0,), (0,)]
    with pytest.raises(ValueError, match="nonzero: expected an array of at least 1 dimension"):
        ignis.nonzero(nv(np.array(1), device))
    x = nv(a, device)
    assert int(ignis.count_nonzero(x).item()) == 3
    c = ignis.count_nonzero(x, axis=1, keepdims=True)
    assert c.dtype == ignis.int64 and c.to_host().tolist() == [[1], [2]]
    b = nv(np.array([[True, False], [True, True]]), device)
    assert ignis.count_nonzero(b, axis=(0, 1)).tolist() == 3
    assert ignis.count_nonzero(nv(np.array(0.5), device)).tolist() == 1


@pytest.mark.parametrize("dtype", EVERY)
@pytest.mark.parametrize("n", [1, 13, 400, 5000])
def test_unique_matches_numpy(device, rng, dtype, n):
    check_unique(device, rng, dtype, n)


def test_unique_nans_are_distinct_and_zeros_are_one(device):
    a = np.array([np.nan, 0.0, -0.0, np.nan, 2.0, 0.0], np.float64)
    r = ignis.unique_all(nv(a, device))
    v = r.values.to_host()
    assert v.shape == (4,) and v[0] == 0 and v[1] == 2 and np.isnan(v[2:]).all()
    assert r.counts.tolist() == [3, 1, 1, 1] and r.indices.tolist() == [1, 4, 0, 3]
    assert r.inverse_indices.tolist() == [2, 0, 0, 3, 1, 0]
    assert r._fields == ("values", "indices", "inverse_indices", "counts")
    assert ignis.unique_counts(nv(a, device))._fields == ("values", "counts")
    assert ignis.unique_inverse(nv(a, device))._fields == ("values", "inverse_indices")
    empty = ignis.unique_all(nv(np.zeros((2, 0), np.int32), device))
    assert empty.values.shape == (0,) and empty.inverse_indices.shape == (2, 0)
    assert ignis.unique_values(nv(np.array(7), device)).tolist() == [7]
    with pytest.raises(TypeError, match="unique_values: expected x to be an NvArray"):
        ignis.unique_values(np.array([1]))


@pytest.mark.parametrize("dtype", [d for d in EVERY if d != "bool"])
@pytest.mark.parametrize("shape,axis", [((9,), 0), ((5, 7), 1), ((6, 4, 3), 1), ((4, 5000), 1)])
@pytest.mark.parametrize("init", [False, True])
def test_cumulative_match_numpy(device, rng, dtype, shape, axis, init):
    check_cumulative(device, rng, dtype, shape, axis, init)


@pytest.mark.parametrize("shape,axis", [((20000,), 0), ((3000, 5), 0), ((9, 3000), 0)])
def test_cumulative_long_axes(device, rng, shape, axis):
    check_cumulative(device, rng, "float32", shape, axis, False)
    check_cumulative(device, rng, "int32", shape, axis, True)


def _scan_tile(dtype: str) -> int:
    return 2048 if np.dtype(np_dtype(dtype)).itemsize >= 8 else 4096


@pytest.mark.parametrize("dtype", [d for d in EVERY if d != "bool"])
@pytest.mark.parametrize("path", cuda_sorting._SCAN_PATHS)
def test_cumulative_across_the_tile_boundaries(device, rng, monkeypatch, dtype, path):
    monkeypatch.setattr(cuda_sorting, "SCAN_PATH", path)  # (the CPU backend ignores it)
    tile = _scan_tile(dtype)
    for n in (tile - 1, tile, tile + 1, 3 * tile + 7):
        check_cumulative(device, rng, dtype, (n,), 0, False)
    check_cumulative(device, rng, dtype, (2, 2 * tile + 3), 1, True)  # unaligned rows


@pytest.mark.parametrize(
    "dtype", ["float32", "float64", "int32", "int64", "uint8", "int16", "float16", "bfloat16"]
)
@pytest.mark.parametrize("path", cuda_sorting._SCAN_PATHS)
def test_cumulative_of_about_2_24_elements_every_dtype(device, rng, monkeypatch, dtype, path):
    _gpu_only(device)
    monkeypatch.setattr(cuda_sorting, "SCAN_PATH", path)
    n = (1 << 24) + 5
    if dtype in FLOATS:  # small values: the 16-bit sums stay finite and meaningful
        scale = {"float16": 1e-4, "bfloat16": 1e-4}.get(dtype, 1.0)
        a = (rng.uniform(-1, 1, size=n) * scale).astype(np_dtype(dtype))
    else:
        info = np.iinfo(dtype)
        a = rng.integers(max(info.min, -1000), min(info.max, 1000), size=n).astype(dtype)
    x = nv(a, device)
    got = ignis.cumulative_sum(x)
    if dtype in FLOATS:
        ref = np.cumsum(a.astype(np.float64))
        tol = {"float16": 1e-1, "bfloat16": 1.0, "float32": 2e-2, "float64": 1e-9}[dtype]
        np.testing.assert_allclose(to64(got.to_host()), ref, rtol=1e-2, atol=tol)
    else:
        out = np_dtype(SCAN_RESULT.get(dtype, dtype))
        np.testing.assert_array_equal(got.to_host(), np.cumsum(a, dtype=out))
    for _ in range(2):  # the same bits every run
        assert ignis.cumulative_sum(x).to_host().tobytes() == got.to_host().tobytes()
    shifted = ignis.cumulative_sum(x[1:], include_initial=True).to_host()  # unaligned both ends
    if dtype not in FLOATS:
        out = np_dtype(SCAN_RESULT.get(dtype, dtype))
        np.testing.assert_array_equal(shifted[1:], np.cumsum(a[1:], dtype=out))


def test_cumulative_dtypes_and_errors(device):
    b = nv(np.array([True, True, False, True]), device)
    s = ignis.cumulative_sum(b)
    assert s.dtype == ignis.int64 and s.tolist() == [1, 2, 2, 3]
    i8 = nv(np.array([100, 100, 100], np.int8), device)
    assert ignis.cumulative_sum(i8).tolist() == [100, 200, 300]  # int64: no wrap
    assert ignis.cumulative_sum(i8, dtype="int8").tolist() == [100, -56, 44]  # wraps
    assert ignis.cumulative_sum(i8, dtype="float32").dtype == ignis.float32
    assert ignis.cumulative_prod(nv(np.array([2.0, -0.0, 3.0]), device)).tolist() == [2, -0, -0]
    first = ignis.cumulative_sum(nv(np.array([-0.0, 1.0]), device)).to_host()
    assert np.signbit(first[0])  # successive additions: -0.0 stays -0.0
    e = ignis.cumulative_sum(nv(np.zeros((2, 0)), device), axis=1, include_initial=True)
    assert e.shape == (2, 1) and e.tolist() == [[0.0], [0.0]]
    p = ignis.cumulative_prod(nv(np.zeros((0,)), device), include_initial=True)
    assert p.tolist() == [1.0]
    x = nv(np.ones((2, 3)), device)
    with pytest.raises(ValueError, match="cumulative_sum: axis is required for an array of 2"):
        ignis.cumulative_sum(x)
    with pytest.raises(ValueError, match="cumulative_prod: expected an array of at least 1"):
        ignis.cumulative_prod(nv(np.array(2.0), device))
    with pytest.raises(TypeError, match="cumulative_sum: dtype must be numeric, got bool"):
        ignis.cumulative_sum(x, axis=0, dtype="bool")
    with pytest.raises(TypeError, match="cumulative_sum: include_initial must be True or False"):
        ignis.cumulative_sum(x, axis=0, include_initial=0)


def test_the_functions_are_in_the_namespace():
    # (each one is called as ignis.<name> by the tests above)
    for name in _sorting.__all__:
        assert name in ignis._array.__all__ and getattr(ignis, name) is getattr(_sorting, name)


# --- every kernel instance compiles ------------------------------------------------------------


@pytest.mark.exhaustive
@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "sm_90a"])
def test_every_kernel_instance_compiles(arch):
    names = cuda_sorting.kernel_names()
    obj = ignis.compile(
        _sources.read_source("sort.cu"), CompileOptions(arch=arch), name_expressions=names
    )
    assert obj.log == ""
    assert sorted(obj.lowered_names) == sorted(set(names))


# Tunings of radix_onesweep the host can ask for (ONESWEEP_ITEMS / ONESWEEP_BLOCKS) beside the
# defaults: the widest tile of each key width, a narrow one, an explicit register cap.
ONESWEEP_TUNINGS = [
    "ignis::sort::radix_onesweep<float, 8>",
    "ignis::sort::radix_onesweep<float, 24>",
    "ignis::sort::radix_onesweep<ignis::uint8, 36>",
    "ignis::sort::radix_onesweep<float, 16, 2>",
    "ignis::sort::radix_onesweep<ignis::int64, 8>",
    "ignis::sort::radix_onesweep<double, 16, 4>",
    "ignis::sort::radix_onesweep<float, 16, 0, 1>",  # (ranked by atomicOr)
    "ignis::sort::radix_onesweep<ignis::uint8, 24, 3, 1>",
    "ignis::sort::radix_onesweep<ignis::int64, 16, 0, 1>",
]


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_onesweep_tunings_compile(arch):
    names = [n for n in cuda_sorting.kernel_names() if "radix_onesweep<" in n]
    names += ONESWEEP_TUNINGS
    obj = ignis.compile(
        _sources.read_source("sort.cu"), CompileOptions(arch=arch), name_expressions=names
    )
    assert obj.log == ""
    assert sorted(obj.lowered_names) == sorted(set(names))


def test_kernel_names_follow_the_c_type_table():
    names = cuda_sorting.kernel_names()
    assert "ignis::sort::radix_downsweep<ignis::bfloat16>" in names
    assert "ignis::sort::scan_rows<float, ignis::sort::SumOp, true>" in names
    assert not any("scan_rows<bool" in n for n in names)  # bool is summed as int64
    assert "ignis::sort::complex_keys<ignis::complex128>" in names
    assert "ignis::sort::searchsorted<ignis::complex64>" in names
    assert not any("scan_rows<ignis::complex" in n for n in names)  # (three-pass scans only)
    with pytest.raises(TypeError, match="sort: float8 arrays have no CUDA kernels"):
        cuda_sorting._ctype(type("D", (), {"name": "float8"})(), "sort")


# --- the CUDA host path on the stand-in GPU ----------------------------------------------------


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch):
    yield from stand_in_gpu(monkeypatch, cuda_sorting)


def _names(gpu) -> list[str]:
    return [launch[0].split("<")[0].rsplit("::", 1)[-1] for launch in gpu.launches]


def test_fake_gpu_short_rows_sort_in_one_launch(fake):
    x = ignis.empty((10, 100), dtype="float16", device="cuda:0")
    out = ignis.argsort(x, descending=True)
    ((name, grid, block, _, args),) = fake.launches
    assert name == "ignis::sort::sort_rows_small<ignis::float16, 128, 4>"
    assert grid == (3, 1, 1) and block == (64, 4, 1)
    assert struct.unpack("<QQQ", b"".join(args[:3])) == (x.data_ptr, 0, out.data_ptr)
    assert struct.unpack("<qq??", b"".join(args[3:])) == (10, 100, True, False)


def test_fake_gpu_onesweep_sort_launches_a_histogram_and_a_kernel_a_byte(fake):
    x = ignis.empty((2, 5000), dtype="float32", device="cuda:0")
    out = ignis.sort(x)
    assert _names(fake) == ["radix_histogram", "radix_plan"] + ["radix_onesweep"] * 4
    (hist, plan, *passes) = fake.launches
    assert hist[1] == (2, 1, 1) and hist[2] == (256, 1, 1)  # 2 rows x 1 chunk
    assert struct.unpack("<Q", hist[4][0])[0] == x.data_ptr
    assert plan[1] == (2, 1, 1)  # one block a row
    hp, pp = (struct.unpack("<Q", a)[0] for a in plan[4][:2])
    assert hp == struct.unpack("<Q", hist[4][1])[0] and struct.unpack("<q", plan[4][2])[0] == 5000
    assert all(p[1] == (4, 1, 1) for p in passes)  # 2 rows x 2 tiles
    assert [struct.unpack("<i", p[4][13])[0] for p in passes] == [0, 1, 2, 3]
    counters = [struct.unpack("<Q", p[4][10])[0] for p in passes]
    assert [c - counters[0] for c in counters] == [0, 4, 8, 12]  # a tile counter a pass
    for p in passes:  # every pass gets every buffer: the plan picks the roles on the device
        ptrs = [struct.unpack("<Q", a)[0] for a in p[4][:9]]
        assert ptrs[0] == x.data_ptr and ptrs[5] == out.data_ptr and ptrs[6] == 0
        assert ptrs[1] and ptrs[2] and ptrs[3] == ptrs[4] == 0  # two key buffers, no positions
        assert ptrs[7] == hp and ptrs[8] == pp
        assert p[4][14:] == [b"\x00", b"\x00", b"\x01"]  # no carry, ascending, exact
    fake.launches.clear()
    ignis.argsort(ignis.empty((5000,), dtype="int64", device="cuda:0"))
    assert _names(fake).count("radix_onesweep") == 8
    fake.launches.clear()
    out = ignis.argsort(ignis.empty((5, 4096), dtype="int32", device="cuda:0"))
    ((name, grid, block, _, args),) = fake.launches  # rows of one tile: one block a row
    assert name == "ignis::sort::sort_rows_tile<ignis::int32>" and grid == (5, 1, 1)
    assert block == (256, 1, 1) and struct.unpack("<Q", args[2])[0] == out.data_ptr
    with pytest.MonkeyPatch.context() as m:
        m.setattr(cuda_sorting, "RADIX_PATH", "fast")
        with pytest.raises(ValueError, match="sort: RADIX_PATH must be one of"):
            ignis.sort(x)


def test_fake_gpu_onesweep_tuning_and_first_kernel(fake, monkeypatch):
    x = ignis.empty((2, 5000), dtype="float32", device="cuda:0")
    monkeypatch.setattr(cuda_sorting, "ONESWEEP_ITEMS", {4: 24, 8: 16})
    ignis.sort(x)
    passes = [launch for launch in fake.launches if "onesweep" in launch[0]]
    assert [p[0] for p in passes] == ["ignis::sort::radix_onesweep<float, 24>"] * 4
    assert all(p[1] == (2, 1, 1) for p in passes)  # tiles of 6144: one a row
    assert [struct.unpack("<q", p[4][12])[0] for p in passes] == [1] * 4  # tiles_per_seg
    fake.launches.clear()
    ignis.sort(ignis.empty((5000,), dtype="int64", device="cuda:0"))  # (8-byte keys: 16)
    assert {launch[0] for launch in fake.launches if "onesweep" in launch[0]} == {
        "ignis::sort::radix_onesweep<ignis::int64>"
    }
    monkeypatch.setattr(cuda_sorting, "ONESWEEP_BLOCKS", {4: 2, 8: None})
    fake.launches.clear()
    ignis.sort(x)
    assert fake.launches[-1][0] == "ignis::sort::radix_onesweep<float, 24, 2>"
    monkeypatch.setattr(cuda_sorting, "ONESWEEP_ITEMS", {4: 10, 8: 16})
    with pytest.raises(ValueError, match=r"sort: ONESWEEP_ITEMS\[4\] must be a multiple of 4"):
        ignis.sort(x)
    monkeypatch.setattr(cuda_sorting, "ONESWEEP_ITEMS", {4: 16, 8: 16})
    monkeypatch.setattr(cuda_sorting, "ONESWEEP_BLOCKS", {4: None, 8: None})
    monkeypatch.setattr(cuda_sorting, "RADIX_PATH", "onesweep_v1")
    fake.launches.clear()
    ignis.argsort(x)
    assert _names(fake) == ["radix_histogram", "radix_plan"] + ["radix_onesweep_v1"] * 4
    assert all(launch[1] == (4, 1, 1) for launch in fake.launches[2:])  # tiles of 4096
    fake.launches.clear()
    ignis.sort(ignis.empty((3, 4096), dtype="float32", device="cuda:0"))
    assert _names(fake) == ["sort_rows_tile"]  # (rows of one tile: as the default path)


def test_onesweep_tuning_from_the_environment(fake, monkeypatch):
    pair = cuda_sorting._env_pair
    monkeypatch.setenv("IGNIS_SORT_ITEMS", "24, 8")
    assert pair("IGNIS_SORT_ITEMS", 16) == {4: 24, 8: 8}
    monkeypatch.setenv("IGNIS_SORT_ITEMS", ",12")
    assert pair("IGNIS_SORT_ITEMS", 16) == {4: 16, 8: 12}
    monkeypatch.delenv("IGNIS_SORT_ITEMS")
    assert pair("IGNIS_SORT_ITEMS", 16) == {4: 16, 8: 16}
    monkeypatch.setenv("IGNIS_SORT_BLOCKS", "three")
    blocks = pair("IGNIS_SORT_BLOCKS", None)
    assert blocks == {4: "three", 8: None}
    monkeypatch.setattr(cuda_sorting, "ONESWEEP_BLOCKS", blocks)
    x = ignis.empty((5000,), dtype="int32", device="cuda:0")
    with pytest.raises(ValueError, match=r"sort: ONESWEEP_BLOCKS\[4\] must be None or from 1"):
        ignis.sort(x)
    monkeypatch.setattr(cuda_sorting, "ONESWEEP_ITEMS", {4: "24", 8: 16})
    with pytest.raises(ValueError, match=r"got '24'"):
        ignis.sort(x)


def test_fake_gpu_lsd_radix_sort_launches_three_kernels_a_byte(fake, monkeypatch):
    monkeypatch.setattr(cuda_sorting, "RADIX_PATH", "lsd")
    x = ignis.empty((2, 5000), dtype="float32", device="cuda:0")
    ignis.sort(x)
    assert _names(fake) == ["radix_upsweep", "scan_tile_apply", "radix_downsweep"] * 4
    ups = [launch for launch in fake.launches if "upsweep" in launch[0]]
    assert all(u[1] == (4, 1, 1) and u[2] == (256, 1, 1) for u in ups)  # 2 rows x 2 tiles
    assert [struct.unpack("<i", u[4][4])[0] for u in ups] == [0, 8, 16, 24]
    down = [launch[4] for launch in fake.launches if "downsweep" in launch[0]]
    assert [d[8:] for d in down][0] == [b"\x01", b"\x00", b"\x00", b"\x00", b"\x01"]  # exact
    assert struct.unpack("<Q", down[0][0])[0] == x.data_ptr  # the first pass reads x itself
    scans = [launch for launch in fake.launches if "scan_tile_apply" in launch[0]]
    assert scans[0][0] == "ignis::sort::scan_tile_apply<ignis::int32, ignis::sort::SumOp, true>"
    assert struct.unpack("<q", scans[0][4][2])[0] == 2 * 256 * 2  # counts of (row, digit, tile)
    fake.launches.clear()
    ignis.argsort(ignis.empty((3000,), dtype="int64", device="cuda:0"))
    assert _names(fake).count("radix_downsweep") == 8


def test_fake_gpu_cumulative_and_searchsorted_paths(fake):
    x = ignis.empty((100000,), dtype="float32", device="cuda:0")
    out = ignis.cumulative_sum(x)
    # 25 tiles: their totals, the totals' prefixes (one block), the scan from them
    (totals, prefixes, apply) = fake.launches
    assert totals[0] == "ignis::sort::scan_tile_totals<float, ignis::sort::SumOp>"
    assert totals[1] == (25, 1, 1) and struct.unpack("<qq", b"".join(totals[4][1:3])) == (
        100000,
        25,
    )
    tp = struct.unpack("<Q", totals[4][3])[0]
    assert prefixes[0] == "ignis::sort::scan_tile_prefixes<float, ignis::sort::SumOp>"
    assert prefixes[1] == (1, 1, 1) and struct.unpack("<QqQ", b"".join(prefixes[4])) == (tp, 25, 0)
    assert apply[0] == "ignis::sort::scan_tile_apply<float, ignis::sort::SumOp, false>"
    assert struct.unpack("<QQqqqQ", b"".join(apply[4])) == (
        x.data_ptr,
        out.data_ptr,
        100000,
        25,
        25,
        tp,
    )
    fake.launches.clear()
    ignis.cumulative_sum(ignis.empty((4096, 4096), dtype="float32", device="cuda:0"), axis=1)
    ((name, grid, _, _, args),) = fake.launches  # rows of one tile: the scan alone
    assert name == "ignis::sort::scan_tile_apply<float, ignis::sort::SumOp, false>"
    assert grid == (4096, 1, 1) and struct.unpack("<Q", args[5])[0] == 0
    fake.launches.clear()
    ignis.cumulative_prod(ignis.empty((64, 300), dtype="bfloat16", device="cuda:0"), axis=0)
    names = _names(fake)  # 300 columns: too few for a thread each; scanned as rows of a copy
    assert "scan_tile_apply" in names and "scan_cols" not in names and len(names) == 3
    fake.launches.clear()
    ignis.cumulative_sum(ignis.empty((4096, 10), dtype="int64", device="cuda:0"), axis=1)
    ((name, _, _, _, _),) = fake.launches
    assert name == "ignis::sort::scan_cols<ignis::int64, ignis::sort::SumOp, false>"
    fake.launches.clear()
    ignis.cumulative_sum(ignis.empty((20000, 3), dtype="float64", device="cuda:0"), axis=0)
    assert _names(fake)[1:4] == ["scan_tile_totals", "scan_tile_prefixes", "scan_tile_apply"]
    assert len(_names(fake)) == 5  # between the copies there and back
    fake.launches.clear()
    ignis.searchsorted(
        ignis.empty((50,), dtype="int32", device="cuda:0"),
        ignis.empty((7, 3), dtype="int32", device="cuda:0"),
        side="right",
    )
    ((name, _, _, _, args),) = fake.launches
    assert name == "ignis::sort::searchsorted<ignis::int32>" and args[-1] == b"\x01"


def test_fake_gpu_look_back_scan_path(fake, monkeypatch):
    monkeypatch.setattr(cuda_sorting, "SCAN_PATH", "look_back")
    ignis.cumulative_sum(ignis.empty((100000,), dtype="float32", device="cuda:0"))
    ((name, grid, _, _, args),) = [launch for launch in fake.launches if "scan" in launch[0]]
    assert name == "ignis::sort::scan_rows<float, ignis::sort::SumOp, false>"
    assert grid == (25, 1, 1) and struct.unpack("<qq", b"".join(args[2:4])) == (100000, 25)
    monkeypatch.setattr(cuda_sorting, "SCAN_PATH", "fast")
    with pytest.raises(ValueError, match="cumulative: SCAN_PATH must be one of"):
        ignis.cumulative_sum(ignis.empty((100000,), dtype="float32", device="cuda:0"))


# --- the kernels themselves, emulated on the host ----------------------------------------------

emulator = pytest.mark.skipif(not sort_emulator.available(), reason="needs a host C++ compiler")


@pytest.fixture(scope="module")
def emulated_kernels() -> list[str]:
    names = cuda_sorting.kernel_names()
    sort_emulator.build(names)  # once per module (and cached on disk by content)
    return names


@pytest.fixture
def emulated(monkeypatch, emulated_kernels):
    with sort_emulator.emulated_backend(monkeypatch, emulated_kernels) as session:
        yield session


@emulator
@pytest.mark.exhaustive
@pytest.mark.parametrize("dtype", EVERY)
def test_emulated_sort(emulated, rng, dtype):
    check_sort("cpu", rng, dtype, (3, 40), 1)
    check_sort("cpu", rng, dtype, (5, 7, 3), 0)
    check_sort("cpu", rng, dtype, (9000,), 0)  # radix: three tiles, a pass per byte
    check_sort("cpu", rng, dtype, (2, 4500), 1)  # rows of two tiles
    check_sort("cpu", rng, dtype, (3, 4096), 1)  # rows of one tile, in shared memory
    check_sort("cpu", rng, dtype, (2, 2049), 1)
    check_sort("cpu", rng, dtype, (2, 8193), 1)  # rows of three tiles, the last of one key
    kernels = ["radix_onesweep", "radix_histogram", "radix_plan", "sort_rows_tile"]
    kernels += ["sort_rows_small"] + (["complex_keys", "gather_rows"] if dtype in CDTYPES else [])
    for kernel in kernels:
        assert any(kernel in n for n in emulated.launched), kernel


@emulator
@pytest.mark.exhaustive
@pytest.mark.parametrize("dtype", ["float32", "int64", "uint8", "bfloat16", "bool"])
def test_emulated_lsd_sort(emulated, rng, monkeypatch, dtype):
    monkeypatch.setattr(cuda_sorting, "RADIX_PATH", "lsd")
    check_sort("cpu", rng, dtype, (9000,), 0)
    check_sort("cpu", rng, dtype, (2, 4096), 1)
    assert any("radix_downsweep" in n for n in emulated.launched)
    assert not any("onesweep" in n or "rows_tile" in n for n in emulated.launched)


def _digit_pattern_rows(rng: np.random.Generator, dtype: str, n: int) -> np.ndarray:
    """Rows of ``n`` integers whose low byte (the first pass's digit) is, along the row: 32
    distinct digits in every 32 neighbours rising (j % 256), falling, one digit for a whole
    tile of 4096 (a different one each tile), or random; the bytes above random."""
    info = np.iinfo(dtype)
    j = np.arange(n)
    lows = [j % 256, 255 - j % 256, (j // 4096) * 37 % 256, rng.integers(0, 256, size=n)]
    high = rng.integers(info.min // 256, info.max // 256 + 1, size=(len(lows), n))
    return (high * 256 + np.stack(lows)).astype(dtype)


@emulator
@pytest.mark.exhaustive
@pytest.mark.parametrize("dtype", ["uint16", "int32"])
def test_emulated_onesweep_digit_patterns(emulated, rng, dtype):
    # tiles of all-distinct and all-equal digits; the last tile of a row partial (one key, or
    # one short of full: padding in the last warp only)
    for n in (3 * 4096 + 1, 2 * 4096 + 4095):
        check_sort_of("cpu", _digit_pattern_rows(rng, dtype, n), 1)
    assert any("radix_onesweep<" in n for n in emulated.launched)


@emulator
@pytest.mark.exhaustive
@pytest.mark.parametrize("hidden", [False, True])
def test_emulated_unique_over_many_tiles(emulated, rng, hidden):
    # 70 tiles of sorted values compacted: runs of every length, some crossing tile edges, and
    # tiles without a run head; with prefixes hidden the sort's look-backs walk further.
    a = rng.integers(0, 9000, size=70 * 4096 - 5).astype(np.float32)
    a[10 * 4096 : 13 * 4096 + 7] = 1.5  # a run over three whole tiles
    emulated.hide_prefixes(hidden)
    try:
        values, indices, inverse, counts = ignis.unique_all(ignis.asarray(a))
        v4 = ignis.unique_values(ignis.asarray(a))
    finally:
        emulated.hide_prefixes(False)
    wv, wi, winv, wc = np.unique(a, return_index=True, return_inverse=True, return_counts=True)
    np.testing.assert_array_equal(values.to_host(), wv)
    np.testing.assert_array_equal(v4.to_host(), wv)
    np.testing.assert_array_equal(indices.to_host(), wi)
    np.testing.assert_array_equal(inverse.to_host(), winv)
    np.testing.assert_array_equal(counts.to_host(), wc)
    assert any("compact_flags" in n for n in emulated.launched)


def test_the_rank_switch_names_its_kernels_and_is_checked(monkeypatch):
    assert cuda_sorting.ONESWEEP_RANK == "ballots"  # the default
    assert cuda_sorting.onesweep_name(dt.float32) == "ignis::sort::radix_onesweep<float>"
    monkeypatch.setattr(cuda_sorting, "ONESWEEP_RANK", "atomic_or")
    assert cuda_sorting.onesweep_name(dt.float32) == "ignis::sort::radix_onesweep<float, 16, 0, 1>"
    monkeypatch.setattr(cuda_sorting, "ONESWEEP_BLOCKS", {4: 3, 8: None})
    assert cuda_sorting.onesweep_name(dt.int32) == (
        "ignis::sort::radix_onesweep<ignis::int32, 16, 3, 1>"
    )
    monkeypatch.setattr(cuda_sorting, "ONESWEEP_ITEMS", {4: 12, 8: 16})  # a 12 KiB tile
    with pytest.raises(ValueError, match=r"needs tiles of at least 16 KiB: ONESWEEP_ITEMS\[4\]"):
        cuda_sorting.onesweep_name(dt.float32)
    monkeypatch.setattr(cuda_sorting, "ONESWEEP_RANK", "match")
    with pytest.raises(ValueError, match="sort: ONESWEEP_RANK must be one of 'ballots', "):
        cuda_sorting.onesweep_name(dt.float32)


@emulator
@pytest.mark.exhaustive
def test_emulated_onesweep_ranked_by_atomic_or(monkeypatch, rng):
    # the atomicOr ranking gives the ballots' order: keys of few and of many digits, partial
    # tiles, several rows, 8-byte keys, and look-backs over several windows
    monkeypatch.setattr(cuda_sorting, "ONESWEEP_RANK", "atomic_or")
    names = cuda_sorting.kernel_names()
    assert "ignis::sort::radix_onesweep<float, 16, 0, 1>" in names
    with sort_emulator.emulated_backend(monkeypatch, names) as session:
        check_sort_of("cpu", rng.integers(0, 256, size=5 * 4096 + 3).astype(np.uint8), 0)
        check_sort_of("cpu", rng.standard_normal((3, 3 * 4096 + 11)).astype(np.float32), 1)
        check_sort_of("cpu", rng.integers(-5, 5, size=2 * 4096 + 1).astype(np.int64), 0)
        session.hide_prefixes(True)
        check_sort_of("cpu", rng.integers(0, 1 << 30, size=26 * 4096 + 3).astype(np.int32), 0)
        session.hide_prefixes(False)
        assert any(n.endswith(", 0, 1>") for n in session.launched)


@emulator
@pytest.mark.exhaustive
def test_emulated_onesweep_look_back_over_many_windows(emulated, rng):
    # 27 tiles; with most prefixes withheld each look-back folds up to 10 aggregates, over three
    # windows of predecessors
    a = rng.integers(0, 256, size=26 * 4096 + 3).astype(np.uint8)
    a[: 4096 * 2] = 7  # (tiles whose every key has one digit, among the rest)
    emulated.hide_prefixes(True)
    check_sort_of("cpu", a, 0)
    check_sort_of("cpu", rng.integers(-3, 3, size=(2, 12 * 4096 + 100)).astype(np.int8), 1)
    assert any("radix_onesweep<" in n for n in emulated.launched)


@emulator
@pytest.mark.exhaustive
@pytest.mark.parametrize("dtype", ["float32", "int64", "uint8"])
def test_emulated_onesweep_v1_path(emulated, rng, monkeypatch, dtype):
    monkeypatch.setattr(cuda_sorting, "RADIX_PATH", "onesweep_v1")
    check_sort("cpu", rng, dtype, (9000,), 0)
    check_sort("cpu", rng, dtype, (2, 4500), 1)
    assert any("radix_onesweep_v1" in n for n in emulated.launched)
    assert not any("radix_onesweep<" in n for n in emulated.launched)


@emulator
@pytest.mark.exhaustive
@pytest.mark.parametrize("dtype", [d for d in EVERY if d != "bool"])
def test_emulated_cumulative(emulated, rng, dtype):
    check_cumulative("cpu", rng, dtype, (9000,), 0, False)  # look-back over 3 tiles
    check_cumulative("cpu", rng, dtype, (3, 5000), 1, True)
    check_cumulative("cpu", rng, dtype, (2400, 3), 1, False)  # short rows: a thread per row
    check_cumulative("cpu", rng, dtype, (40, 3, 2), 0, True)  # columns, via a transposed copy


@emulator
@pytest.mark.exhaustive
@pytest.mark.parametrize("dtype", ["float32", "int64", "float16", "uint8"])
def test_emulated_cumulative_look_back_path(emulated, rng, monkeypatch, dtype):
    monkeypatch.setattr(cuda_sorting, "SCAN_PATH", "look_back")
    check_cumulative("cpu", rng, dtype, (9000,), 0, False)
    check_cumulative("cpu", rng, dtype, (3, 5000), 1, True)
    assert any("scan_rows" in n for n in emulated.launched)
    assert not any("scan_tile" in n for n in emulated.launched)


@emulator
@pytest.mark.exhaustive
def test_emulated_three_pass_scan_launches(emulated, rng):
    check_cumulative("cpu", rng, "float32", (9000,), 0, False)
    for kernel in ("scan_tile_totals", "scan_tile_prefixes", "scan_tile_apply"):
        assert any(kernel in n for n in emulated.launched), kernel
    assert not any("scan_rows" in n for n in emulated.launched)


@emulator
@pytest.mark.exhaustive
@pytest.mark.parametrize("path", ["look_back", "three_pass"])
def test_emulated_look_back_over_many_windows(emulated, rng, monkeypatch, path):
    monkeypatch.setattr(cuda_sorting, "SCAN_PATH", path)
    # 150 tiles; with most prefixes hidden the look-backs fold up to 63 aggregates over three
    # windows. Integers stay exact, and floats come out bit for bit the same: the prefix of a
    # tile does not depend on which predecessor's prefix the look-back found.
    a = rng.integers(-3, 4, size=150 * 4096 + 17).astype(np.int32)
    f = rng.uniform(-1, 1, size=(2, 70 * 4096 + 5)).astype(np.float32)
    results = []
    for hide in (False, True):
        emulated.hide_prefixes(hide)
        got = ignis.cumulative_sum(ignis.asarray(a), dtype="int32", include_initial=True)
        np.testing.assert_array_equal(got.to_host()[1:], np.cumsum(a, dtype=np.int32))
        results.append(ignis.cumulative_sum(ignis.asarray(f), axis=1).to_host())
    assert results[0].tobytes() == results[1].tobytes()
    np.testing.assert_allclose(results[0], np.cumsum(f.astype(np.float64), axis=1), atol=2e-3)


@emulator
@pytest.mark.exhaustive
@pytest.mark.parametrize("dtype", EVERY)
def test_emulated_sets_and_searches(emulated, rng, dtype):
    check_unique("cpu", rng, dtype, 13)
    check_unique("cpu", rng, dtype, 6000)
    check_nonzero("cpu", rng, dtype, (3, 4, 5))
    check_nonzero("cpu", rng, dtype, (5000,))
    check_searchsorted("cpu", rng, dtype, 37)
    assert any("compact_flags" in n for n in emulated.launched)


# --- passes without work (radix_plan / pass_role, and their host mirrors) ------------------------


def test_pass_plan_keeps_the_passes_whose_digit_varies():
    n = 10
    hist = [[0] * 256 for _ in range(4)]
    hist[0][3], hist[0][7] = 4, 6  # pass 0: two digits
    hist[1][0] = n  # pass 1: every key's digit is 0
    hist[2][1], hist[2][2] = 5, 5
    hist[3][128] = n
    assert cuda_sorting.plan_mask(hist, n) == 0b0101
    alike = [[n if d == 9 else 0 for d in range(256)] for _ in range(8)]
    assert cuda_sorting.plan_mask(alike, n) == 0b1000_0000  # keys all alike: the last pass
    roles = cuda_sorting.pass_roles(0b0101, 4)
    assert roles[0][:3] == (True, True, False) and roles[0][4] == 0  # reads x, writes buffer 0
    assert roles[2][:4] == (True, False, True, 0)  # reads buffer 0, writes the outputs
    assert not roles[1][0] and not roles[3][0]


@pytest.mark.parametrize("passes", [1, 2, 4, 8])
def test_pass_roles_chain_the_buffers_for_every_plan(passes):
    buffers = min(2, passes - 1)  # what the host allocates
    for mask in range(1, 1 << passes):
        where = "x"  # where the row's data is before each pass
        running = [r for r in cuda_sorting.pass_roles(mask, passes) if r[0]]
        assert len(running) == bin(mask).count("1")
        for i, (_, first, last, read, write) in enumerate(running):
            assert first == (i == 0) and last == (i == len(running) - 1)
            assert where == ("x" if first else read), (mask, i)
            if last:
                where = "out"
            else:
                assert write < buffers, (mask, i)
                where = write
        assert where == "out"


def _shared_digit_rows(rng: np.random.Generator, dtype: str, n: int) -> np.ndarray:
    """Three rows of ``n``: small values (their high key bytes alike), one value repeated (every
    byte alike), values over the whole range (no byte alike): a pass plan each."""
    if dtype in FLOATS:
        full = rng.standard_normal(n)
    else:
        info = np.iinfo(dtype)
        full = rng.integers(info.min, info.max, size=n, dtype=dtype)
    small = rng.integers(0, 1000, size=n)
    return np.stack([small, np.full(n, 37), full]).astype(np_dtype(dtype))


@emulator
@pytest.mark.exhaustive
@pytest.mark.parametrize("dtype", ["int32", "int64", "uint16", "float32", "float64"])
def test_emulated_sort_skips_the_passes_without_work(emulated, rng, dtype):
    a = _shared_digit_rows(rng, dtype, 9000)  # Onesweep: rows of three tiles, one plan a row
    check_sort_of("cpu", a, 1)
    check_sort_of("cpu", a[0], 0)
    check_sort_of("cpu", a[1], 0)
    check_sort_of("cpu", _shared_digit_rows(rng, dtype, 3000), 1)  # rows of one tile
    assert any("radix_plan" in n for n in emulated.launched)
    check_unique("cpu", rng, dtype, 9000)
    v, c = ignis.unique_counts(ignis.asarray(a[0]))
    wv, wc = np.unique(a[0], return_counts=True)
    np.testing.assert_array_equal(v.to_host(), wv)
    np.testing.assert_array_equal(c.to_host(), wc)


# --- complex numbers ---------------------------------------------------------------------------


def _complex(parts: list[tuple[float, float]], dtype: str) -> np.ndarray:
    out = np.empty(len(parts), dtype)
    out.real = [p[0] for p in parts]
    out.imag = [p[1] for p in parts]
    return out


NAN = float("nan")
# Shuffled, with NumPy's order spelled out (CFLOAT_LT): by (re, im); then NaN imaginary parts
# by re; then NaN real parts by im; then both NaN.
ORDERED = [
    (-np.inf, 5.0),
    (-1.0, -np.inf),
    (-1.0, 2.0),
    (0.0, -1.0),
    (-0.0, 0.0),
    (0.0, -0.0),
    (0.0, 3.0),
    (2.0, np.inf),
    (np.inf, -2.0),
    (-3.0, NAN),
    (1.0, NAN),
    (NAN, -7.0),
    (NAN, 4.0),
    (NAN, NAN),
]


@pytest.mark.parametrize("dtype", CDTYPES)
def test_complex_order_is_numpys(device, rng, dtype):
    perm = rng.permutation(len(ORDERED))
    a = _complex([ORDERED[i] for i in perm], dtype)
    want = np.argsort(a, kind="stable")
    got = ignis.argsort(nv(a, device)).to_host()
    np.testing.assert_array_equal(got, want)
    assert same(np.sort(a), _complex(ORDERED, dtype))  # (the table is NumPy's order)
    assert same(ignis.sort(nv(a, device)).to_host(), _complex(ORDERED, dtype))
    d = ignis.argsort(nv(a, device), descending=True).to_host()
    np.testing.assert_array_equal(d, np_argsort(a, 0, True))
    pos = ignis.searchsorted(nv(np.sort(a), device), nv(a, device), side="right").to_host()
    np.testing.assert_array_equal(pos, np.searchsorted(np.sort(a), a, side="right"))


@pytest.mark.parametrize("dtype", CDTYPES)
def test_complex_unique_keeps_nans_distinct_and_zeros_one(device, dtype):
    a = _complex([(1, NAN), (0, -0.0), (-0.0, 0), (1, NAN), (2, 1), (NAN, NAN), (2, 1)], dtype)
    r = ignis.unique_all(nv(a, device))
    v = r.values.to_host()
    assert v.shape == (5,) and v[0] == 0 and v[1] == 2 + 1j
    assert r.counts.tolist() == [2, 2, 1, 1, 1] and r.indices.tolist() == [1, 4, 0, 3, 5]
    assert r.inverse_indices.tolist() == [2, 0, 0, 3, 1, 4, 1]
    nz = ignis.nonzero(nv(_complex([(0, 0), (0, 1), (-0.0, 0), (NAN, 0)], dtype), device))
    assert nz[0].tolist() == [1, 3]
    assert int(ignis.count_nonzero(nv(a, device)).item()) == 5


def test_complex_cumulative_dtypes_and_errors(device):
    z = nv(np.array([1 + 2j, 3 - 1j, -1j], np.complex64), device)
    s = ignis.cumulative_sum(z, include_initial=True)
    assert s.dtype == ignis.complex64 and s.tolist() == [0, 1 + 2j, 4 + 1j, 4]
    p = ignis.cumulative_prod(z, dtype="complex128")
    assert p.dtype == ignis.complex128 and p.tolist() == [1 + 2j, 5 + 5j, 5 - 5j]
    assert ignis.cumulative_sum(nv(np.array([1.5, 2.0]), device), dtype="complex64").tolist() == [
        1.5,
        3.5,
    ]
    with pytest.raises(TypeError, match="cumulative_sum: cannot accumulate complex complex64"):
        ignis.cumulative_sum(z, dtype="float32")
