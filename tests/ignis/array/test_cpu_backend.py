"""The CPU backend's own pieces: its math helpers and the hook contract on odd layouts."""

from __future__ import annotations

import math

import numpy as np
import pytest
from ignis._array import _backend, _cpu_math
from ignis._array._cpu_backend import CpuBackend, host_view

import ignis
from ignis import _dtypes as dt


def test_erf_is_accurate_in_float64() -> None:
    x = np.concatenate(
        [np.linspace(-7, 7, 20001), np.logspace(-300, 0.8, 500), -np.logspace(-10, 0.8, 50)]
    )
    ref = np.array([math.erf(v) for v in x])
    got = _cpu_math.erf(x)
    np.testing.assert_allclose(got, ref, rtol=4e-15, atol=1e-300)
    assert np.isnan(_cpu_math.erf(np.array([np.nan])))[0]
    np.testing.assert_array_equal(
        _cpu_math.erf(np.array([np.inf, -np.inf, -0.0])), [1.0, -1.0, -0.0]
    )
    assert np.signbit(_cpu_math.erf(np.array([-0.0]))[0])


def test_sigmoid_does_not_overflow() -> None:
    x = np.array([-1000.0, -50.0, 0.0, 50.0, 1000.0], np.float32)
    with np.errstate(over="raise"):
        s = _cpu_math.sigmoid(x)
    assert s.dtype == np.float32
    np.testing.assert_allclose(s, [0.0, 1.9287499e-22, 0.5, 1.0, 1.0], rtol=1e-6)


def test_backend_is_abstract() -> None:
    with pytest.raises(TypeError):
        _backend.Backend("cpu")  # type: ignore[abstract]
    assert isinstance(_backend.get_backend("cpu"), CpuBackend)
    assert repr(_backend.get_backend("cpu")) == "<CpuBackend cpu>"


def test_hooks_handle_zero_and_negative_strides() -> None:
    be = _backend.get_backend("cpu")
    src = ignis.arange(12.0, dtype="float64", device="cpu").reshape(3, 4)
    row = src[1]._view(src[1]._offset, (3, 4), (0, 8))  # a row broadcast over 3 rows
    rev = src[::-1, ::-1]
    out = ignis.empty((3, 4), dtype="float64", device="cpu")
    be.binary("add", out, row, rev, dt.float64)
    ref = np.arange(12.0).reshape(3, 4)
    np.testing.assert_array_equal(out.to_host(), ref[1] + ref[::-1, ::-1])
    be.unary("gelu", out, rev, dt.float64, {"approximate": "tanh"})
    assert out.to_host()[0, 0] == pytest.approx(11.0)
    col = ignis.empty((1, 4), dtype="float64", device="cpu")
    be.reduce("sum", col, rev, (0,), dt.float64, {})
    np.testing.assert_array_equal(col.to_host(), ref[::-1, ::-1].sum(axis=0, keepdims=True))
    np.testing.assert_array_equal(host_view(rev), ref[::-1, ::-1])


def test_storage_and_pointers() -> None:
    a = ignis.zeros((2, 3), dtype="int32", device="cpu")
    be = a._backend
    assert be.storage_nbytes(a._storage) == 24
    assert a[1].data_ptr - a.data_ptr == 12
    assert be.dlpack_device() == (1, 0)
    be.synchronize()
