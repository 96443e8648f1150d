"""Property-based tests of reductions and softmax: random shapes (empty and size-1 axes, 0-d),
dtypes, axes (None, negative, tuples; duplicates and out-of-range ones are errors), keepdims,
strided views, against NumPy in float64."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hardening_strategies import (
    ALL,
    FLOATS,
    check_close,
    host_values,
    make,
    shapes,
    still_works,
)
from hypothesis import given
from hypothesis import strategies as st

import ignis

# Reductions accumulate in float32 for half types, so allow for the length of the sum.
RTOL = {"float16": 8e-3, "bfloat16": 4e-2, "float32": 2e-5, "float64": 1e-10}


@st.composite
def axis_for(draw, ndim: int):
    """None, one axis (maybe negative) or a tuple of distinct axes (maybe negative)."""
    if ndim == 0:
        return draw(st.sampled_from([None, (), 0, -1]))
    kind = draw(st.sampled_from(["none", "int", "tuple"]))
    if kind == "none":
        return None
    if kind == "int":
        return draw(st.integers(-ndim, ndim - 1))
    axes = draw(st.lists(st.integers(0, ndim - 1), unique=True, max_size=ndim))
    return tuple(a - ndim if draw(st.booleans()) else a for a in axes)


def _np_reduce(op: str, h: np.ndarray, axis, keepdims: bool, ddof: int = 0):
    x = h.astype(np.float64)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        if op == "var":  # ddof >= the count gives inf (or nan for 0/0), as in NumPy
            return np.var(x, axis=axis, keepdims=keepdims, ddof=ddof)
        fn = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min}[op]
        return fn(x, axis=axis, keepdims=keepdims)


@given(
    data=st.data(),
    shape=shapes,
    dtype=st.sampled_from(ALL),
    op=st.sampled_from(["sum", "mean", "max", "min", "var"]),
    keepdims=st.booleans(),
    view=st.sampled_from(["plain", "reversed", "transposed"]),
    ddof=st.sampled_from([0, 0, 1, 2]),
    seed=st.integers(0, 2**16),
)
def test_reductions_match_numpy(device, data, shape, dtype, op, keepdims, view, ddof, seed):
    h = host_values(shape, dtype, seed)
    x = make(h, dtype, device)
    if view == "reversed" and shape:
        x, h = x[::-1], h[::-1]
    elif view == "transposed":
        x, h = x.T, h.T
    axis = data.draw(axis_for(len(shape)))
    if not shape and isinstance(axis, int):  # NumPy: AxisError for a 0-d array
        with pytest.raises(ValueError, match="out of range"):
            getattr(ignis, op)(x, axis=axis, keepdims=keepdims)
        return
    axes = range(h.ndim) if axis is None else np.atleast_1d(axis) % max(h.ndim, 1)
    empty_axis = any(h.shape[a] == 0 for a in axes) if h.ndim else False
    if op in ("max", "min") and (empty_axis or (axis is None and h.size == 0)):
        with pytest.raises(ValueError, match=op):  # no identity: an error, like NumPy
            getattr(ignis, op)(x, axis=axis, keepdims=keepdims)
        still_works(device)
        return
    kw = {"ddof": ddof} if op == "var" else {}
    out = getattr(ignis, op)(x, axis=axis, keepdims=keepdims, **kw)
    ref = _np_reduce(op, h, axis, keepdims, ddof)
    assert out.shape == np.shape(ref)
    if op == "sum":
        unsigned = dtype.startswith("uint")
        assert out.dtype.name == (dtype if dtype in FLOATS else "uint64" if unsigned else "int64")
    elif op in ("mean", "var"):
        assert out.dtype.name == ("float64" if dtype not in FLOATS else dtype)
    else:
        assert out.dtype.name == dtype
    rtol = RTOL.get(out.dtype.name, 0.0)
    if op == "var" and dtype in ("float16", "bfloat16"):
        finite = np.abs(np.asarray(ref))[np.isfinite(ref)]
        atol = 4 * rtol * max(1.0, float(finite.max(initial=0)))
    else:
        atol = rtol * max(1.0, float(np.abs(h.astype(np.float64)).sum(initial=0)) / max(h.size, 1))
    check_close(out, ref, rtol, atol)


@given(
    shape=st.lists(st.integers(1, 4), min_size=1, max_size=4).map(tuple),
    op=st.sampled_from(["sum", "mean", "max", "min", "var", "argmax", "argmin"]),
    bad=st.sampled_from(
        ["duplicate", "duplicate_negative", "too_big", "too_small", "float", "str", "bool"]
    ),
)
def test_bad_axes_raise(device, shape, op, bad):
    x = make(host_values(shape, "float32", 3), "float32", device)
    n = len(shape)
    axis = {
        "duplicate": (0, 0),
        "duplicate_negative": (0, -n),
        "too_big": n,
        "too_small": -n - 1,
        "float": 0.5,
        "str": "0",
        "bool": True,  # not axis 1: NumPy refuses it too
    }[bad]
    if op.startswith("arg") and bad.startswith("duplicate"):
        axis = (0, 1)  # arg reductions take one axis only: any tuple is an error
    with pytest.raises((ValueError, TypeError)) as info:
        getattr(ignis, op)(x, axis=axis)
    assert op in str(info.value)
    still_works(device)


@given(
    data=st.data(),
    shape=st.lists(st.integers(0, 5), min_size=0, max_size=4).map(tuple),
    dtype=st.sampled_from(("float32", "bfloat16", "float64", "int32", "uint8", "bool")),
    op=st.sampled_from(["argmax", "argmin"]),
    keepdims=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_arg_reductions_match_numpy(device, data, shape, dtype, op, keepdims, seed):
    h = host_values(shape, dtype, seed)
    x = make(h, dtype, device)
    axis = data.draw(st.none() | st.integers(-len(shape), len(shape) - 1)) if shape else None
    size = h.size if axis is None else h.shape[axis]
    if size == 0:
        with pytest.raises(ValueError, match=op):
            getattr(ignis, op)(x, axis=axis, keepdims=keepdims)
        return
    out = getattr(ignis, op)(x, axis=axis, keepdims=keepdims)
    ref = getattr(np, op)(h, axis=axis, keepdims=keepdims)
    assert out.dtype.name == "int64"
    np.testing.assert_array_equal(out.to_host(), ref)  # ties: the first index, as NumPy


@given(
    shape=st.lists(st.integers(1, 6), min_size=1, max_size=3).map(tuple),
    dtype=st.sampled_from(FLOATS),
    log=st.booleans(),
    seed=st.integers(0, 2**16),
    data=st.data(),
)
def test_softmax_matches_numpy(device, shape, dtype, log, seed, data):
    h = host_values(shape, dtype, seed)
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    x = make(h, dtype, device)
    out = (ignis.log_softmax if log else ignis.softmax)(x, axis=axis)
    h64 = h.astype(np.float64)
    shifted = h64 - h64.max(axis=axis, keepdims=True)
    lse = np.log(np.exp(shifted).sum(axis=axis, keepdims=True))
    ref = shifted - lse if log else np.exp(shifted - lse)
    rtol = RTOL[dtype]
    check_close(out, ref, rtol, 2 * rtol)
    if not log:
        check_close(
            ignis.sum(out.astype("float64"), axis=axis),
            np.ones(np.sum(ref, axis=axis).shape),
            4 * rtol,
            4 * rtol,
        )


def test_softmax_of_a_0d_array_is_an_error(device):
    x = make(np.array(1.5), "float32", device)
    with pytest.raises(ValueError, match="softmax"):
        ignis.softmax(x)
