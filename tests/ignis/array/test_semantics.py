"""The op rules of _semantics, independent of any backend."""

from __future__ import annotations

import pytest
from ignis._array import _semantics as sem

import ignis
from ignis import _dtypes as dt


def test_float_result_follows_numpy_loops() -> None:
    expected = {
        "bool": "float16",
        "int8": "float16",
        "uint8": "float16",
        "int32": "float64",
        "int64": "float64",
        "float16": "float16",
        "bfloat16": "bfloat16",
        "float32": "float32",
        "float64": "float64",
    }
    for name, out in expected.items():
        assert sem.float_result(dt.as_dtype(name)).name == out


def test_accumulate_dtype() -> None:
    assert sem.accumulate_dtype(dt.float16) is dt.float32
    assert sem.accumulate_dtype(dt.bfloat16) is dt.float32
    assert sem.accumulate_dtype(dt.float64) is dt.float64


def test_normalize_axes() -> None:
    assert sem.normalize_axes(None, 3, "sum") == (0, 1, 2)
    assert sem.normalize_axes(-1, 3, "sum") == (2,)
    assert sem.normalize_axes((2, -3), 3, "sum") == (0, 2)
    assert sem.normalize_axes((), 3, "sum") == ()
    with pytest.raises(
        ignis.ShapeError, match="sum: axis -4 is out of range for an array of 3 dimensions"
    ):
        sem.normalize_axes(-4, 3, "sum")
    with pytest.raises(ignis.ShapeError, match="duplicate"):
        sem.normalize_axes([1, 1], 3, "sum")


def test_reduction_rule() -> None:
    r = sem.reduction("sum", (2, 3, 4), dt.float16, axis=(0, -1), keepdims=False)
    assert r.axes == (0, 2) and r.shape == (3,) and r.keep_shape == (1, 3, 1)
    assert r.dtype is dt.float16 and r.accumulate is dt.float32
    assert sem.reduction("mean", (2,), dt.int8).dtype is dt.float64
    assert sem.reduction("sum", (2,), dt.bool_).dtype is dt.int64
    assert sem.reduction("max", (2,), dt.uint8).dtype is dt.uint8
    assert sem.reduction("var", (2, 2), dt.float32, keepdims=True).shape == (1, 1)
    with pytest.raises(ignis.DTypeError, match="var: ddof must be a number"):
        sem.reduction("var", (2,), dt.float32, ddof="1")
    with pytest.raises(ValueError, match="unknown reduction"):
        sem.reduction("median", (2,), dt.float32)


def test_arg_reduction_rule() -> None:
    r = sem.arg_reduction("argmax", (2, 3), dt.float32, axis=-1, keepdims=True)
    assert r.axes == (1,) and r.keep_shape == (2, 1) and r.shape == (2, 1) and r.dtype is dt.int64
    assert sem.arg_reduction("argmin", (2, 3), dt.float32).shape == ()


def test_matmul_rule() -> None:
    m = sem.matmul((5, 1, 3, 4), dt.float16, (2, 4, 6), dt.float32)
    assert (m.batch, m.m, m.k, m.n, m.shape, m.dtype) == ((5, 2), 3, 4, 6, (5, 2, 3, 6), dt.float32)
    v = sem.matmul((4,), dt.float32, (4,), dt.float32)
    assert v.shape == () and v.a_vector and v.b_vector
    t = sem.matmul((4, 3), dt.float64, (5, 4), dt.float64, transpose_a=True, transpose_b=True)
    assert (t.m, t.k, t.n) == (3, 4, 5)
    with pytest.raises(
        ignis.ShapeError,
        match=r"matmul: shapes \(4, 3\) and \(5, 4\) \(transposed\) do not align \(3 != 4\)",
    ):
        sem.matmul((4, 3), dt.float64, (5, 4), dt.float64, transpose_b=True)


def test_binary_and_where_rules() -> None:
    b = sem.binary("less", dt.int8, 2.5)
    assert b.dtype is dt.bool_ and b.compute is dt.float64
    assert sem.binary("divide", dt.int32, dt.int32).dtype is dt.float64
    assert sem.binary("divide", dt.float16, 2).dtype is dt.float16
    w = sem.where(dt.bool_, dt.int8, 1.5)
    assert w.dtype is dt.float64 and w.shape == ()
    with pytest.raises(ValueError, match="unknown binary op"):
        sem.binary("frobnicate", dt.float32, dt.float32)
    with pytest.raises(ValueError, match="unknown unary op"):
        sem.unary("cbrt", (), dt.float32)


def test_inplace_rule() -> None:
    spec = sem.binary("add", dt.float16, dt.float32)
    sem.inplace("__iadd__", (), dt.float16, spec)  # float32 result into float16: same kind
    with pytest.raises(
        ignis.DTypeError, match="cannot store a float64 result in place into a int32 array"
    ):
        sem.inplace("__iadd__", (), dt.int32, sem.binary("add", dt.int32, 1.5))
