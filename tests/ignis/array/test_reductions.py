"""Reductions, arg-reductions and softmax against NumPy in float64 for every dtype."""

from __future__ import annotations

import numpy as np
import pytest
from array_helpers import ALL, FLOATS, INTS, TOL, np_dtype, random_array, to64
from ignis._array import _semantics as sem

import ignis
from ignis import NvArray
from ignis import _dtypes as dt

AXES = [None, 0, -1, 1, (0, 2), (-1, 0), (0, 1, 2), ()]
# error per unit of sum(|x|) of one accumulated result
ACC_EPS = {"float16": 1e-3, "bfloat16": 8e-3, "float32": 1e-6, "float64": 1e-13}


def check_reduction(
    out: NvArray, op: str, x: np.ndarray, axis, keepdims: bool, ddof: int = 0
) -> None:
    spec = sem.reduction(op, x.shape, dt.as_dtype(x.dtype), axis, keepdims, ddof)
    assert out.dtype is spec.dtype and out.shape == spec.shape
    ax = spec.axes
    x64 = to64(x)
    with np.errstate(all="ignore"):
        ref = {
            "sum": lambda: np.sum(x64, axis=ax, keepdims=keepdims),
            "mean": lambda: np.mean(x64, axis=ax, keepdims=keepdims),
            "max": lambda: np.max(x64, axis=ax, keepdims=keepdims),
            "min": lambda: np.min(x64, axis=ax, keepdims=keepdims),
            "var": lambda: np.var(x64, axis=ax, ddof=ddof, keepdims=keepdims),
        }[op]()
    got = out.to_host()
    assert got.shape == np.shape(ref)
    name = spec.dtype.name
    if name not in FLOATS:
        np.testing.assert_array_equal(got, ref.astype(got.dtype))
        return
    scale = np.sum(np.abs(x64), axis=ax, keepdims=keepdims) if x.size else 0.0
    if op == "mean":
        scale = np.mean(np.abs(x64), axis=ax, keepdims=keepdims) if x.size else 0.0
    if op == "var":
        scale = (
            np.mean(
                np.abs(x64 - np.mean(x64, axis=ax, keepdims=True)) ** 2, axis=ax, keepdims=keepdims
            )
            * 4
            if x.size
            else 0.0
        )
    acc = ACC_EPS[name if name in ACC_EPS else "float64"]
    rtol, atol = TOL[name]
    if op in ("max", "min"):
        scale = 0.0
    np.testing.assert_allclose(
        got.astype(np.float64),
        ref,
        rtol=rtol,
        atol=atol + acc * np.max(scale, initial=0.0),
        equal_nan=True,
    )


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("axis", AXES, ids=[repr(a) for a in AXES])
@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("op", ["sum", "mean", "max", "min", "var"])
def test_reductions_every_dtype_axis_keepdims(
    device: str, op: str, dtype: str, axis, keepdims, rng
) -> None:
    base = random_array(rng, (6, 5, 4), dtype)
    a = NvArray.from_host(base, device=device).permute(1, 0, 2)[::-1]  # non-contiguous, reversed
    x = base.transpose(1, 0, 2)[::-1]
    out = getattr(ignis, op)(a, axis=axis, keepdims=keepdims)
    check_reduction(out, op, x, axis, keepdims)
    method = getattr(a, op)(axis=axis, keepdims=keepdims)
    np.testing.assert_array_equal(method.to_host(), out.to_host())


def test_reduction_dtypes_match_numpy(device: str) -> None:
    for name in ALL + ["int16", "uint16", "uint32", "uint64"]:
        x = np.ones((2, 3), np_dtype(name))
        a = NvArray.from_host(x, device=device)
        for op in ("sum", "prod", "mean", "max", "min", "var", "std", "all", "any"):
            ours = getattr(ignis, op)(a).dtype
            theirs = getattr(np, op)(x).dtype
            assert ours.numpy == theirs, (name, op)


@pytest.mark.parametrize("ddof", [0, 1, 2])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64", "int32"])
def test_var_ddof(device: str, dtype: str, ddof: int, rng) -> None:
    x = random_array(rng, (7, 9), dtype)
    a = NvArray.from_host(x, device=device)
    for axis in (None, 0, (1,)):
        check_reduction(ignis.var(a, axis=axis, ddof=ddof), "var", x, axis, False, ddof)
        check_reduction(a.var(axis=axis, ddof=ddof, keepdims=True), "var", x, axis, True, ddof)


def test_var_with_too_large_ddof_gives_inf_or_nan(device: str) -> None:
    a = NvArray.from_host([1.0, 2.0], device=device)
    assert ignis.var(a, ddof=2).item() == np.inf
    assert np.isnan(ignis.var(NvArray.from_host([1.0, 1.0], device=device), ddof=3).item())


@pytest.mark.parametrize("dtype", FLOATS)
def test_large_half_sums_accumulate_in_float32(device: str, dtype: str) -> None:
    # 4096 ones: a float16 accumulator would stop at 2048, a bfloat16 one at 256
    a = ignis.ones(4096, dtype=dtype, device=device)
    assert a.sum().item() == 4096.0
    assert a.mean().item() == 1.0
    b = NvArray.from_host(np.full(3000, 0.1), dtype=dtype, device=device)
    expected = 3000 * float(np.asarray(0.1, np_dtype(dtype)))
    assert abs(b.sum().item() - expected) <= expected * TOL[dtype][0]


def test_nan_propagates_in_reductions(device: str) -> None:
    for dtype in FLOATS:
        a = NvArray.from_host([[1.0, np.nan, 3.0], [4.0, 5.0, -np.inf]], dtype=dtype, device=device)
        assert np.isnan(a.max().item()) and np.isnan(a.min().item()) and np.isnan(a.sum().item())
        np.testing.assert_array_equal(
            np.isnan(a.max(axis=1).to_host().astype(np.float64)), [True, False]
        )
        assert a.min(axis=1).to_host().astype(np.float64)[1] == -np.inf
        assert np.isnan(a.mean(axis=1).to_host().astype(np.float64)[0])
        assert a.argmax().item() == 1 and a.argmin(axis=1).to_host().tolist() == [1, 2]


def test_empty_reductions(device: str) -> None:
    e = ignis.zeros((0, 3), device=device)
    assert e.sum().item() == 0.0
    assert e.sum(axis=0).to_host().tolist() == [0.0, 0.0, 0.0]
    assert e.sum(axis=1).shape == (0,)
    assert np.isnan(e.mean().item())
    assert e.max(axis=1).shape == (0,)
    with pytest.raises(
        ignis.ShapeError, match=r"max: zero-size axis 0 of shape \(0, 3\) has no identity"
    ):
        e.max()
    with pytest.raises(ignis.ShapeError, match="min: zero-size axis 0"):
        e.min(axis=0)
    with pytest.raises(
        ignis.ShapeError, match="argmax: attempt to get argmax of an empty sequence"
    ):
        e.argmax()
    s = NvArray.from_host(5.0, device=device)
    assert s.sum().item() == 5.0 and s.max().item() == 5.0 and s.argmax().item() == 0


def test_reduction_axis_errors(device: str) -> None:
    a = ignis.zeros((2, 3), device=device)
    with pytest.raises(
        ignis.ShapeError, match="sum: axis 2 is out of range for an array of 2 dimensions"
    ):
        a.sum(axis=2)
    with pytest.raises(ignis.ShapeError, match=r"mean: duplicate value in axis \(0, -2\)"):
        a.mean(axis=(0, -2))
    with pytest.raises(ignis.ShapeError, match="axis must be an int"):
        a.max(axis="0")
    with pytest.raises(
        ignis.ShapeError, match=r"argmax: axis must be None or an int, got \(0, 1\)"
    ):
        a.argmax(axis=(0, 1))
    with pytest.raises(TypeError, match="sum: expected an NvArray"):
        ignis.sum([1, 2])


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("axis", [None, 0, 1, -1])
@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("op", ["argmax", "argmin"])
def test_arg_reductions(device: str, op: str, dtype: str, axis, keepdims, rng) -> None:
    base = random_array(rng, (5, 7), dtype)
    x = base.T
    a = NvArray.from_host(base, device=device).T
    out = getattr(ignis, op)(a, axis=axis, keepdims=keepdims)
    ref = getattr(np, op)(to64(x), axis=axis, keepdims=keepdims)
    assert out.dtype == "int64" and out.shape == ref.shape
    np.testing.assert_array_equal(out.to_host(), ref)
    np.testing.assert_array_equal(getattr(a, op)(axis=axis, keepdims=keepdims).to_host(), ref)


def test_arg_reduction_ties_pick_the_first(device: str) -> None:
    a = NvArray.from_host([[3, 1, 3], [0, 0, -1]], dtype="int8", device=device)
    assert a.argmax(axis=1).to_host().tolist() == [0, 0]
    assert a.argmin(axis=1).to_host().tolist() == [1, 2]
    assert a.argmax().item() == 0


def softmax_ref(x: np.ndarray, axis: int, log: bool) -> np.ndarray:
    x = to64(x)
    z = x - np.max(x, axis=axis, keepdims=True)
    lse = np.log(np.sum(np.exp(z), axis=axis, keepdims=True))
    return z - lse if log else np.exp(z - lse)


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("log", [False, True])
def test_softmax_and_log_softmax(device: str, dtype: str, axis: int, log: bool, rng) -> None:
    base = random_array(rng, (6, 4, 5), dtype)
    x = base.transpose(2, 0, 1)
    a = NvArray.from_host(base, device=device).permute(2, 0, 1)
    out = (ignis.log_softmax if log else ignis.softmax)(a, axis=axis)
    expected = sem.float_result(dt.as_dtype(dtype))
    assert out.dtype is expected and out.shape == x.shape
    rtol, atol = TOL[expected.name]
    np.testing.assert_allclose(
        out.to_host().astype(np.float64), softmax_ref(x, axis, log), rtol=rtol * 4, atol=atol * 4
    )
    method = (a.log_softmax if log else a.softmax)(axis=axis)
    np.testing.assert_array_equal(method.to_host(), out.to_host())
    if not log:
        np.testing.assert_allclose(
            out.to_host().astype(np.float64).sum(axis=axis), 1.0, rtol=rtol * 8, atol=atol * 8
        )


def test_softmax_is_stable_and_handles_inf(device: str) -> None:
    a = NvArray.from_host(
        [[1000.0, 1001.0, 1002.0], [-np.inf, 0.0, 0.0]], dtype="float32", device=device
    )
    s = ignis.softmax(a, axis=1).to_host()
    np.testing.assert_allclose(s[0], softmax_ref(np.array([0.0, 1.0, 2.0]), 0, False), rtol=1e-6)
    np.testing.assert_allclose(s[1], [0.0, 0.5, 0.5])
    ls = ignis.log_softmax(a, axis=1).to_host()
    assert ls[1, 0] == -np.inf and np.isfinite(ls[0]).all()
    n = NvArray.from_host([[np.nan, 1.0]], device=device)
    assert np.isnan(ignis.softmax(n).to_host()).all()
    e = ignis.zeros((0, 3), device=device)
    assert ignis.softmax(e, axis=0).shape == (0, 3)


def test_softmax_errors(device: str) -> None:
    with pytest.raises(ignis.ShapeError, match="softmax: axis 2 is out of range"):
        ignis.softmax(ignis.zeros((2, 2), device=device), axis=2)
    with pytest.raises(
        ignis.ShapeError,
        match=r"log_softmax: needs an array of at least 1 dimension, got shape \(\)",
    ):
        ignis.log_softmax(ignis.zeros((), device=device))


@pytest.mark.parametrize("dtype", INTS + ["bool"])
def test_integer_sums_do_not_overflow_small_types(device: str, dtype: str) -> None:
    x = np.full(1000, 100 if dtype != "bool" else 1, np_dtype(dtype))
    assert ignis.sum(NvArray.from_host(x, device=device)).item() == int(x.astype(np.int64).sum())


COLUMN_CASES = [
    ((2, 4100), 0),
    ((31, 16385), 0),
    ((33, 3), 0),
    ((4099, 8), 0),
    ((5, 7, 300), (0, 1)),  # leading axes
    ((3, 9, 520), 1),  # a middle axis: several outer rows
]


@pytest.mark.parametrize(
    "case", COLUMN_CASES, ids=[f"{'x'.join(map(str, c[0]))}-axis{c[1]}" for c in COLUMN_CASES]
)
@pytest.mark.parametrize("dtype", ALL)
def test_column_reductions_wide_and_odd(device: str, dtype: str, case, rng) -> None:
    shape, axis = case
    x = random_array(rng, shape, dtype)
    a = NvArray.from_host(x, device=device)
    for op in ("sum", "mean", "max", "min", "var"):
        check_reduction(getattr(ignis, op)(a, axis=axis), op, x, axis, False)
    # a column tail that is not a whole 16-byte pack, in a view of 16-byte aligned rows
    v = NvArray.from_host(random_array(rng, (9, 304), dtype), device=device)[:, :301]
    check_reduction(ignis.sum(v, axis=0), "sum", v.to_host(), 0, False)


@pytest.mark.parametrize("n", [8200, 32768, 40000])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("log", [False, True])
def test_softmax_long_rows(device: str, dtype: str, n: int, log: bool, rng) -> None:
    x = random_array(rng, (3, n), dtype)
    out = (ignis.log_softmax if log else ignis.softmax)(NvArray.from_host(x, device=device))
    assert out.dtype == dtype and out.shape == (3, n)
    got = out.to_host().astype(np.float64)
    ref = softmax_ref(x, 1, log)
    # relative to each value: long rows have probabilities far below the absolute tolerance
    rtol = TOL[dtype][0] * 4
    atol = rtol * 4 if log else {"float16": 6e-8}.get(dtype, 1e-38)
    np.testing.assert_allclose(got, ref, rtol=rtol, atol=atol)
    assert got.min() > (-np.inf if log else 0.0)


# --- the Array API's arguments and the reductions it adds -------------------------------------


@pytest.mark.parametrize("dtype", ["bool", "int8", "int16", "uint8", "uint32", "int64", "uint64"])
def test_integer_sums_and_products_take_the_default_integer_dtypes(device, dtype, rng) -> None:
    host = rng.integers(0, 2 if dtype == "bool" else 7, size=(5, 6)).astype(dtype)
    x = NvArray.from_host(host, device=device)
    want_dtype = "uint64" if dtype.startswith("uint") else "int64"
    for name in ("sum", "prod"):
        got = getattr(ignis, name)(x, axis=1)
        assert got.dtype.name == want_dtype
        np.testing.assert_array_equal(got.to_host(), getattr(np, name)(host, axis=1))


def test_sum_and_prod_take_a_result_dtype(device, rng) -> None:
    host = rng.uniform(0.5, 1.5, size=(4, 7))
    x = NvArray.from_host(host.astype(np.float32), device=device)
    got = ignis.sum(x, axis=0, dtype="float64")
    assert got.dtype is ignis.float64
    np.testing.assert_allclose(got.to_host(), host.astype(np.float32).sum(0), rtol=1e-6)
    got = ignis.prod(x, dtype=ignis.float64)
    np.testing.assert_allclose(got.to_host(), np.prod(host.astype(np.float32)), rtol=1e-5)
    ints = NvArray.from_host(np.arange(10, dtype=np.int8), device=device)
    small = ignis.sum(ints, dtype="int8")
    assert small.to_host() == 45 and small.dtype is ignis.int8
    with pytest.raises(ignis.DTypeError, match="sum: unsupported dtype 'complex32'"):
        ignis.sum(x, dtype="complex32")
    with pytest.raises(TypeError, match="mean"):
        ignis.mean(x, dtype="float64")  # mean takes no dtype


@pytest.mark.parametrize("name", ["var", "std"])
def test_correction_is_ddof(device, name, rng) -> None:
    host = rng.normal(size=(6, 5))
    x = NvArray.from_host(host, device=device)
    fn = getattr(ignis, name)
    for c in (0, 1, 1.5):
        want = getattr(np, name)(host, axis=0, ddof=c)
        np.testing.assert_allclose(fn(x, axis=0, correction=c).to_host(), want, rtol=1e-12)
        np.testing.assert_allclose(getattr(x, name)(axis=0, ddof=c).to_host(), want, rtol=1e-12)
    with pytest.raises(TypeError, match=f"{name}: give ddof or correction, not both"):
        fn(x, ddof=1, correction=1)


@pytest.mark.parametrize("dtype", ["bool", "int8", "uint16", "float16", "float32", "float64"])
def test_all_and_any_agree_with_numpy(device, dtype, rng) -> None:
    host = (rng.random((4, 5, 3)) < 0.8).astype(dtype)
    if dtype.startswith("float"):
        host[0, 0, 0] = np.nan  # NaN is true
    x = NvArray.from_host(host, device=device)
    for name in ("all", "any"):
        for axis in (None, 0, (1, 2), -1, ()):
            got = getattr(ignis, name)(x, axis=axis)
            assert got.dtype is ignis.bool_
            np.testing.assert_array_equal(got.to_host(), getattr(np, name)(host, axis=axis))
    empty = NvArray.from_host(np.zeros((0, 3), dtype), device=device)
    assert ignis.all(empty).to_host() and not ignis.any(empty).to_host()
    np.testing.assert_array_equal(ignis.all(empty, axis=0).to_host(), [True] * 3)
