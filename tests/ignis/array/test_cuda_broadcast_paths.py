"""Binary ops with one broadcast operand: a row repeated over the leading dims (``b`` of shape
``(N,)`` against ``(M, N)``) or a column held along the last dims (``(M, 1)`` against ``(M, N)``).

On a GPU these take the ``binary_bcast`` kernels (16-byte vectors where the run length and the
pointers allow, one element per access otherwise), and everything else the strided kernel. The
tests run on every available device (``device`` fixture: the CPU backend everywhere, the CUDA
backend where a GPU exists) against NumPy in float64 with per-dtype tolerances: every dtype,
rows and columns on either side, run lengths 1, 7, 8, 31, 33 and 4097, one and several leading
dims, misaligned and non-contiguous views (which must fall back), in-place ops into
non-contiguous outputs, empty arrays, NaN and Inf. The ``gpu`` tests also check which kernel
ran and cover sizes past one pass of the grid.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from ignis._array._cuda_backend import elementwise as ew

import ignis
from ignis import NvArray
from ignis import _dtypes as dt

BF16 = np.dtype(ml_dtypes.bfloat16)
ALL_DTYPES = list(dt.all_dtypes)
RUNS = (1, 7, 8, 31, 33, 4097)
LEADS = ((1,), (3,), (2, 3))

# One rounding of the exact float64 result into the output dtype: half an ulp, relative.
RTOL = {"float16": 2**-10, "bfloat16": 2**-7, "float32": 2**-23, "float64": 2**-51}

OPS = {
    "add": (ignis.add, np.add),
    "subtract": (ignis.subtract, np.subtract),
    "multiply": (ignis.multiply, np.multiply),
    "divide": (ignis.divide, np.divide),
    "maximum": (ignis.maximum, np.maximum),
    "less": (ignis.less, np.less),
}


def _ops_for(d: dt.DType) -> list[str]:
    if d is dt.bool_:
        return ["add", "multiply", "maximum", "less"]
    if d.kind in "iu":
        return ["add", "subtract", "multiply", "maximum", "less"]
    return list(OPS)


def _data(rng: np.random.Generator, shape: tuple[int, ...], d: dt.DType) -> np.ndarray:
    if d is dt.bool_:
        return rng.random(shape) < 0.5
    if d.kind in "iu":
        info = np.iinfo(d.numpy)
        return rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=d.numpy)
    x = rng.uniform(-4, 4, size=shape)
    x[np.abs(x) < 0.05] = 0.5  # keep divisors away from zero
    return x.astype(d.numpy)


def _reference(op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """NumPy's result: float64 arithmetic for floating inputs (the tolerance covers the one
    rounding into the output dtype), the dtype's own wrap-around arithmetic for integers."""
    fn = OPS[op][1]
    if op == "add" and a.dtype == bool and b.dtype == bool:
        return np.logical_or(a, b)
    if op == "multiply" and a.dtype == bool and b.dtype == bool:
        return np.logical_and(a, b)
    floating = a.dtype.kind == "f" or a.dtype == BF16 or b.dtype.kind == "f" or b.dtype == BF16
    with np.errstate(all="ignore"):
        if floating or op == "divide":
            return fn(a.astype(np.float64), b.astype(np.float64))
        return fn(a, b)


def _check(got: NvArray, expected: np.ndarray, what: str) -> None:
    host = got.to_host()
    assert host.shape == expected.shape, what
    name = got.dtype.name
    if name in RTOL:
        np.testing.assert_allclose(
            host.astype(np.float64),
            expected.astype(np.float64),
            rtol=RTOL[name],
            atol=0,
            equal_nan=True,
            err_msg=what,
        )
    else:
        np.testing.assert_array_equal(host, expected.astype(host.dtype), err_msg=what)


def _on(device: str, host: np.ndarray) -> NvArray:
    return NvArray.from_host(host, device=device)


def _offset_view(device: str, host: np.ndarray) -> NvArray:
    """A dense view of ``host``'s values that starts one element into its buffer (so off a
    16-byte boundary for every dtype)."""
    flat = np.concatenate([np.zeros(1, host.dtype), host.reshape(-1)])
    return _on(device, flat)[1:].reshape(host.shape)


@pytest.mark.parametrize("d", ALL_DTYPES, ids=str)
def test_row_and_column_broadcast_every_dtype_either_side(device, d, rng) -> None:
    for lead in LEADS:
        for n in RUNS:
            full = _data(rng, (*lead, n), d)
            row = _data(rng, (n,), d)
            col = _data(rng, (*lead, 1), d)
            for small in (row, col):
                kind = "row" if small is row else "column"
                fg, sg = _on(device, full), _on(device, small)
                for op in _ops_for(d):
                    fn = OPS[op][0]
                    what = f"{op} {d} {kind} lead={lead} n={n}"
                    _check(fn(fg, sg), _reference(op, full, small), what + " (b broadcast)")
                    _check(fn(sg, fg), _reference(op, small, full), what + " (a broadcast)")


@pytest.mark.parametrize("d", [dt.float32, dt.bfloat16, dt.float16, dt.int8, dt.float64], ids=str)
def test_single_values_and_size_one_dims(device, d, rng) -> None:
    for shape, small_shape in (
        ((5, 8), (1, 1)),
        ((5, 7), (1,)),
        ((4, 1, 9), (1, 9)),  # a size-1 dim inside the output
        ((4, 1, 9), (4, 1, 1)),
        ((1, 33), (1, 1)),
    ):
        full, small = _data(rng, shape, d), _data(rng, small_shape, d)
        fg, sg = _on(device, full), _on(device, small)
        for op in ("add", "multiply", "less"):
            fn = OPS[op][0]
            _check(fn(fg, sg), _reference(op, full, small), f"{op} {shape} {small_shape}")
            _check(fn(sg, fg), _reference(op, small, full), f"{op} {small_shape} {shape}")


@pytest.mark.parametrize("d", [dt.float32, dt.bfloat16, dt.float16, dt.float64], ids=str)
def test_misaligned_and_non_contiguous_views_fall_back(device, d, rng) -> None:
    full = _data(rng, (6, 40), d)
    row = _data(rng, (40,), d)
    col = _data(rng, (6, 1), d)
    fg, rg, cg = _on(device, full), _on(device, row), _on(device, col)
    cases = [
        # a[:, 1:]: rows with gaps (the strided kernel)
        ("a[:, 1:] + row[1:]", fg[:, 1:] + rg[1:], full[:, 1:].astype(np.float64) + row[1:]),
        # dense views one element in: the broadcast kernel, one element per access
        ("offset + row", _offset_view(device, full) + rg, full.astype(np.float64) + row),
        ("a + offset row", fg + _offset_view(device, row), full.astype(np.float64) + row),
        ("offset * column", _offset_view(device, full) * cg, full.astype(np.float64) * col),
        ("column - offset", _offset_view(device, col) - fg, col.astype(np.float64) - full),
        # a transposed or stepped dense side, a stepped row
        ("a.T * column", fg.T * rg.reshape(40, 1), full.T.astype(np.float64) * row[:, None]),
        ("a[:, ::2] + row[::2]", fg[:, ::2] + rg[::2], full[:, ::2].astype(np.float64) + row[::2]),
        ("a[::2] - column[::2]", fg[::2] - cg[::2], full[::2].astype(np.float64) - col[::2]),
    ]
    for what, got, expected in cases:
        _check(got, expected, f"{what} {d}")


@pytest.mark.parametrize("d", [dt.float32, dt.bfloat16, dt.int32], ids=str)
def test_in_place_into_dense_and_non_contiguous_outputs(device, d, rng) -> None:
    full = _data(rng, (5, 24), d)
    row = _data(rng, (24,), d)
    col = _data(rng, (5, 1), d)
    exact = d.kind != "f"
    with np.errstate(all="ignore"):
        # dense output: out is also the dense operand
        x = _on(device, full)
        x += _on(device, row)
        ref = (full + row) if exact else (full.astype(np.float64) + row.astype(np.float64))
        _check(x, ref, f"dense += row {d}")
        x = _on(device, full)
        x *= _on(device, col)
        ref = (full * col) if exact else (full.astype(np.float64) * col.astype(np.float64))
        _check(x, ref, f"dense *= column {d}")
        # non-contiguous outputs (every other column; the transposed matrix)
        x = _on(device, full)
        view = x[:, ::2]
        view += _on(device, row[::2].copy())
        ref = full.copy()
        ref[:, ::2] = full[:, ::2] + row[::2]
        _check(x, ref if exact else ref.astype(np.float64), f"x[:, ::2] += row {d}")
        x = _on(device, np.ascontiguousarray(full.T))
        view = x.T
        view -= _on(device, col)
        ref = (full - col).T
        _check(x, ref if exact else ref.astype(np.float64), f"x.T -= column {d}")


def test_mixed_dtypes(device, rng) -> None:
    for da, db in (("bfloat16", "float32"), ("float16", "float32"), ("int8", "float64")):
        a = _data(rng, (4, 33), dt.as_dtype(da))
        b = _data(rng, (33,), dt.as_dtype(db))
        c = _data(rng, (4, 1), dt.as_dtype(db))
        ag, bg, cg = _on(device, a), _on(device, b), _on(device, c)
        for op in ("add", "multiply", "less"):
            fn = OPS[op][0]
            _check(fn(ag, bg), _reference(op, a, b), f"{op} {da} {db} row")
            _check(fn(cg, ag), _reference(op, c, a), f"{op} {db} {da} column")
    # bfloat16 accumulating a float32 row (a bias gradient): one rounding into bfloat16
    acc = _data(rng, (8, 64), dt.bfloat16)
    row = _data(rng, (64,), dt.float32)
    g = _on(device, acc)
    ignis.accumulate(g, _on(device, row))
    _check(g, acc.astype(np.float64) + row, "accumulate bf16 += f32 row")


def test_empty_arrays(device) -> None:
    for full_shape, small_shape in (((0, 8), (8,)), ((4, 0), (4, 1)), ((0, 3), (0, 1))):
        f = NvArray.zeros(full_shape, dtype="float32", device=device)
        s = NvArray.zeros(small_shape, dtype="float32", device=device)
        for got in (f + s, s * f):
            assert got.shape == full_shape and got.to_host().size == 0


def test_nan_and_inf(device) -> None:
    nan, inf = np.nan, np.inf
    full = np.array([[1.0, nan, inf, -inf, 0.0, 2.0, -3.0, 5.0]] * 3, np.float32)
    full[1] = [nan, 1.0, -inf, inf, -0.0, 7.0, 8.0, -1.0]
    row = np.array([inf, 1.0, -inf, nan, 0.0, -inf, 2.0, nan], np.float32)
    col = np.array([[nan], [inf], [-2.0]], np.float32)
    for dtype in ("float32", "bfloat16", "float16"):
        f = _on(device, full.astype(dt.as_dtype(dtype).numpy))
        r = _on(device, row.astype(dt.as_dtype(dtype).numpy))
        c = _on(device, col.astype(dt.as_dtype(dtype).numpy))
        for op in ("add", "multiply", "maximum", "subtract"):
            fn = OPS[op][0]
            with np.errstate(all="ignore"):
                _check(fn(f, r), OPS[op][1](full.astype(np.float64), row), f"{op} row {dtype}")
                _check(fn(c, f), OPS[op][1](col.astype(np.float64), full), f"{op} col {dtype}")
        np.testing.assert_array_equal(
            (f < r).to_host(), full < row, err_msg=f"less with NaN, {dtype}"
        )


# --- GPU only: which kernel ran, and sizes past one pass of the grid ------------------------------

CUDA = "cuda:0"


def _bcast_launches(op: str, side: int, kind: int, v: int, dtype: str = "float32") -> int:
    """Launches so far of the binary_bcast instance for ``op`` on same-dtype operands."""
    key = ("binary_b", op, dtype, dtype, dtype, dtype, side, kind, v, 0)
    kernel = ew._kernels.get(key)
    return 0 if kernel is None else kernel.launch_count


@pytest.mark.gpu
def test_gpu_broadcast_paths_take_the_broadcast_kernel(rng) -> None:
    full = rng.standard_normal((6, 64)).astype(np.float32)
    row = rng.standard_normal(64).astype(np.float32)
    col = rng.standard_normal((6, 1)).astype(np.float32)
    fg, rg, cg = _on(CUDA, full), _on(CUDA, row), _on(CUDA, col)
    cases = [
        (lambda: fg + rg, ("add", 2, ew.ROW, 4)),
        (lambda: rg + fg, ("add", 1, ew.ROW, 4)),
        (lambda: fg * cg, ("multiply", 2, ew.COLUMN, 4)),
        (lambda: cg * fg, ("multiply", 1, ew.COLUMN, 4)),
        (lambda: _offset_view(CUDA, full) + rg, ("add", 2, ew.ROW, 1)),
        (lambda: fg - _offset_view(CUDA, row), ("subtract", 2, ew.ROW, 1)),
    ]
    for run, key in cases:
        before = _bcast_launches(*key)
        run()
        assert _bcast_launches(*key) == before + 1, key
    # a[:, 1:] is not dense: no broadcast kernel runs
    total = sum(k.launch_count for key, k in ew._kernels.items() if key[0] == "binary_b")
    _check(fg[:, 1:] + rg[1:], full[:, 1:].astype(np.float64) + row[1:], "a[:, 1:] + row[1:]")
    assert sum(k.launch_count for key, k in ew._kernels.items() if key[0] == "binary_b") == total


@pytest.mark.gpu
@pytest.mark.parametrize(
    "shape,small_shape,dtype",
    [
        ((4099, 8192), (8192,), "float32"),  # 33.6M elements: two passes of the grid
        ((8192, 4099), (8192, 1), "float32"),
        ((4099, 8200), (8200,), "bfloat16"),
        ((3, 5, 1_000_003), (5, 1_000_003), "float32"),  # an odd row of 5M elements
        ((2_000_003, 9), (2_000_003, 1), "bfloat16"),  # many short columns, scalar width
    ],
)
def test_gpu_large_broadcasts(shape, small_shape, dtype, rng) -> None:
    d = dt.as_dtype(dtype)
    full = rng.standard_normal(shape, dtype=np.float32).astype(d.numpy)
    small = rng.standard_normal(small_shape, dtype=np.float32).astype(d.numpy)
    fg, sg = _on(CUDA, full), _on(CUDA, small)
    expected = full.astype(np.float32) + small.astype(np.float32)  # exact in float32 for bf16
    for got in (fg + sg, sg + fg):
        host = got.to_host().astype(np.float32)
        if dtype == "float32":
            np.testing.assert_array_equal(host, expected)  # one IEEE add, as NumPy's
        else:
            np.testing.assert_array_equal(host, expected.astype(d.numpy).astype(np.float32))
