"""Property-based tests of NvArray elementwise ops: random shapes (0 and 1 sized dims, 0-d),
dtypes, broadcasting (valid and not), basic slicing with steps, against NumPy in float64."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hardening_strategies import (
    ALL,
    FLOATS,
    INTS,
    basic_index,
    broadcastable_pair,
    check_close,
    host_values,
    incompatible_pair,
    make,
    np_dtype,
    shapes,
    still_works,
    tol,
)
from hypothesis import given
from hypothesis import strategies as st

import ignis

ARITH = ("add", "subtract", "multiply", "maximum", "minimum")
COMPARE = ("equal", "not_equal", "less", "less_equal", "greater", "greater_equal")
NUMPY_NAME = {"neg": "negative"}


@given(
    pair=broadcastable_pair(),
    op=st.sampled_from(ARITH + COMPARE + ("divide",)),
    da=st.sampled_from(ALL),
    db=st.sampled_from(ALL),
    seed=st.integers(0, 2**16),
)
def test_binary_broadcasting_matches_numpy(device, pair, op, da, db, seed):
    sa, sb = pair
    ha, hb = host_values(sa, da, seed), host_values(sb, db, seed + 1, positive=True)
    a, b = make(ha, da, device), make(hb, db, device)
    if op == "subtract" and da == db == "bool":
        with pytest.raises(ignis.DTypeError, match="subtract"):
            ignis.subtract(a, b)
        return
    out = getattr(ignis, op)(a, b)
    assert out.shape == np.broadcast_shapes(sa, sb)
    expected_dtype = ignis.result_type(a, b)
    if op in COMPARE:
        assert out.dtype is ignis.bool_
    elif op == "divide":
        assert out.dtype is (expected_dtype if expected_dtype.kind == "f" else ignis.float64)
    else:
        assert out.dtype is expected_dtype
    # NumPy 2 promotion, where NumPy has the dtypes (and int8 with uint8 gives int32: no int16)
    if "bfloat16" not in (da, db) and op not in COMPARE and {da, db} != {"int8", "uint8"}:
        with np.errstate(all="ignore"):
            assert out.dtype.name == getattr(np, op)(ha, hb).dtype.name
    # NumPy on the operands converted to the promoted dtype is the reference (bool add is a
    # logical or, integers wrap), checked in float64 with the result dtype's tolerance.
    p = np_dtype(expected_dtype.name)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        ref = getattr(np, op)(ha.astype(p), hb.astype(p))
    rtol, atol = tol(out.dtype.name) if op not in COMPARE else (0, 0)
    check_close(out, ref, rtol, atol)


@given(pair=incompatible_pair(), op=st.sampled_from(ARITH + COMPARE + ("divide", "power")))
def test_binary_incompatible_shapes_raise(device, pair, op):
    sa, sb = pair
    a = make(host_values(sa, "float32", 1), "float32", device)
    b = make(host_values(sb, "float32", 2), "float32", device)
    with pytest.raises(ignis.ShapeError, match=op):
        getattr(ignis, op)(a, b)
    with pytest.raises(ValueError):  # ShapeError is a ValueError, as NumPy users expect
        ignis.where(a > 0, a, b)
    still_works(device)


@given(
    shape=shapes,
    op=st.sampled_from(
        ["exp", "log", "sqrt", "sin", "cos", "tanh", "sigmoid", "abs", "neg", "relu"]
    ),
    dtype=st.sampled_from(FLOATS + INTS),
    seed=st.integers(0, 2**16),
)
def test_unary_matches_numpy(device, shape, op, dtype, seed):
    positive = op in ("log", "sqrt")
    h = host_values(shape, dtype, seed, positive=positive)
    x = make(h, dtype, device)
    out = getattr(ignis, NUMPY_NAME.get(op, "negative" if op == "neg" else op))(x)
    if dtype == "uint8" and op == "neg":
        ref = (-(h.astype(np.int64))) % 256
    else:
        x64 = h.astype(np.float64)
        refs = {
            "sigmoid": lambda v: 1 / (1 + np.exp(-v)),
            "relu": lambda v: np.maximum(v, 0),
            "neg": np.negative,
        }
        ref = refs.get(op, getattr(np, op, None))(x64)
    assert out.shape == shape
    if op in ("abs", "neg", "relu"):
        assert out.dtype.name == dtype
    else:
        assert out.dtype.kind == "f"
    rtol, atol = tol(out.dtype.name)
    check_close(out, ref, rtol, atol)


@given(
    data=st.data(),
    shape=st.lists(st.integers(0, 6), min_size=1, max_size=3).map(tuple),
    dtype=st.sampled_from(ALL),
    seed=st.integers(0, 2**16),
)
def test_basic_slicing_matches_numpy(device, data, shape, dtype, seed):
    h = host_values(shape, dtype, seed)
    x = make(h, dtype, device)
    key = data.draw(basic_index(shape))
    view = x[key]
    expected = h[key]
    assert view.shape == expected.shape
    np.testing.assert_array_equal(view.to_host(), expected)
    # an op on the strided view reads the right elements
    if dtype in FLOATS or dtype in INTS:
        check_close(view * 2, expected.astype(np.float64) * 2, *tol(dtype))
    # writing through the view touches exactly the viewed elements
    if view.numel:
        y = make(h, dtype, device)
        fill = host_values(view.shape, dtype, seed + 7)
        y[key] = make(fill, dtype, device)
        ref = h.copy()
        ref[key] = fill
        np.testing.assert_array_equal(y.to_host(), ref)


@given(
    shape=st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple),
    key=st.sampled_from(
        [
            "too_many",
            "out_of_range",
            "zero_step",
            "float",
            "two_ellipsis",
            "float_slice",
        ]
    ),
)
def test_bad_indices_raise(device, shape, key):
    x = make(host_values(shape, "float32", 0), "float32", device)
    bad = {
        "too_many": (0,) * (len(shape) + 1),
        "out_of_range": (shape[0],),
        "zero_step": (slice(None, None, 0),),
        "float": (1.5,),
        "list": ([0, 1],),
        "bool": (True,),
        "two_ellipsis": (Ellipsis, Ellipsis),
        "float_slice": (slice(0.5, None),),
    }[key]
    with pytest.raises((IndexError, ValueError)):
        x[bad]
    still_works(device)


@given(
    shape=shapes,
    src=st.sampled_from(ALL),
    dst=st.sampled_from(ALL),
    step=st.sampled_from([1, -1, 2]),
    seed=st.integers(0, 2**16),
)
def test_cast_matches_numpy(device, shape, src, dst, step, seed):
    h = host_values(shape, src, seed)
    x = make(h, src, device)
    if shape:
        x, h = x[::step], h[::step]
    out = x.astype(dst)
    assert out.dtype.name == dst and out.shape == h.shape
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = h.astype(np_dtype(dst))
    if src in FLOATS and dst in INTS + ("uint8",):
        # float -> int conversions of in-range values truncate toward zero
        ref = np.trunc(h.astype(np.float64))
        if dst == "uint8":
            keep = ref >= 0
            np.testing.assert_array_equal(out.to_host()[keep], ref[keep])
            return
    check_close(out, ref.astype(np.float64), *tol(dst))


@given(
    shape=shapes,
    dtype=st.sampled_from(FLOATS),
    lo=st.floats(-2, 0),
    hi=st.floats(0, 2),
    seed=st.integers(0, 2**16),
)
def test_where_and_clip(device, shape, dtype, lo, hi, seed):
    h = host_values(shape, dtype, seed)
    x = make(h, dtype, device)
    h64 = h.astype(np.float64)
    check_close(ignis.where(x > 0, x, -1.0), np.where(h64 > 0, h64, -1.0), *tol(dtype))
    check_close(ignis.clip(x, lo, hi), np.clip(h64, lo, hi), *tol(dtype))


NUMPY_DTYPES = ("bool", "int8", "uint8", "int32", "int64", "float16", "float32", "float64")


@given(
    shape=shapes,
    dtype=st.sampled_from(NUMPY_DTYPES),
    scalar=st.one_of(st.booleans(), st.integers(-300, 300), st.floats(-4, 4, width=32)),
    op=st.sampled_from(("add", "multiply", "maximum", "subtract", "less")),
    reflected=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_python_scalars_promote_weakly_like_numpy(
    device, shape, dtype, scalar, op, reflected, seed
):
    h = host_values(shape, dtype, seed)
    x = make(h, dtype, device)
    args = (scalar, x) if reflected else (x, scalar)
    np_args = (scalar, h) if reflected else (h, scalar)
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            ref = getattr(np, op)(*np_args)
    except (OverflowError, TypeError) as exc:  # NumPy refuses: so must ignis, as clearly
        with pytest.raises(type(exc)):
            getattr(ignis, op)(*args)
        still_works(device)
        return
    # (a comparison with an out-of-range Python int is exact, as NumPy 2's: no special case)
    out = getattr(ignis, op)(*args)
    assert out.dtype.name == np.asarray(ref).dtype.name, (out.dtype, np.asarray(ref).dtype)
    check_close(out, np.asarray(ref, dtype=np.float64), *tol(out.dtype.name))


@given(
    pair=broadcastable_pair(),
    dst=st.sampled_from(NUMPY_DTYPES),
    src=st.sampled_from(NUMPY_DTYPES),
    op=st.sampled_from(("__iadd__", "__imul__", "__isub__")),
    seed=st.integers(0, 2**16),
)
def test_inplace_ops_follow_numpy_casting_and_shapes(device, pair, dst, src, op, seed):
    sa, sb = pair
    ha, hb = host_values(sa, dst, seed), host_values(sb, src, seed + 1)
    ref = np.array(ha)  # a copy, and an ndarray even for shape ()
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            ref = getattr(ref, op)(hb)
        numpy_error = None
    except (TypeError, ValueError) as exc:
        numpy_error = exc
    x, y = make(ha, dst, device), make(hb, src, device)
    if numpy_error is not None:
        with pytest.raises((TypeError, ValueError)):
            getattr(x, op)(y)
        np.testing.assert_array_equal(x.to_host(), ha)  # a refused op leaves dst untouched
        still_works(device)
        return
    result = getattr(x, op)(y)
    assert result is x  # in place: the same array, its dtype and shape unchanged
    assert x.dtype.name == dst and x.shape == sa
    check_close(x, ref.astype(np.float64), *tol(dst))
