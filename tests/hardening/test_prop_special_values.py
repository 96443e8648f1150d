"""Property-based tests with NaN, +inf and -inf planted at random places: elementwise functions,
comparisons, maximum/minimum/clip, reductions, arg-reductions and softmax follow NumPy (NaN
propagates; argmax/argmin take the first NaN; a softmax row whose maximum is not finite is NaN,
a row with some -inf entries is an ordinary masked row)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hardening_strategies import FLOATS, check_close, make, np_dtype, tol
from hypothesis import given
from hypothesis import strategies as st

import ignis

SPECIALS = (np.nan, np.inf, -np.inf)


@st.composite
def with_specials(draw, min_dims: int = 1):
    """(host float64 values, dtype): random finite values with NaN/inf planted in some places."""
    shape = tuple(draw(st.lists(st.integers(1, 6), min_size=min_dims, max_size=3)))
    dtype = draw(st.sampled_from(FLOATS))
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    h = rng.uniform(-3, 3, size=shape)
    flat = h.reshape(-1)
    for _ in range(draw(st.integers(0, 3))):
        flat[draw(st.integers(0, flat.size - 1))] = draw(st.sampled_from(SPECIALS))
    return h.astype(np_dtype(dtype)), dtype


def quiet(fn, *args, **kwargs):
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


@given(
    case=with_specials(),
    op=st.sampled_from(
        ["exp", "log", "sqrt", "tanh", "sigmoid", "abs", "negative", "relu", "sin", "cos"]
    ),
)
def test_unary_functions_with_nan_and_inf(device, case, op):
    h, dtype = case
    x = make(h, dtype, device)
    h64 = h.astype(np.float64)
    refs = {
        "sigmoid": lambda v: 1 / (1 + np.exp(-v)),
        "relu": lambda v: np.where(np.isnan(v), np.nan, np.maximum(v, 0)),
    }
    ref = quiet(refs[op] if op in refs else getattr(np, op), h64)
    out = getattr(ignis, op)(x)
    got = out.to_host().astype(np.float64)
    # the special values land exactly where NumPy puts them, with the same sign
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(ref))
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(ref))
    finite = np.isfinite(ref)
    rtol, atol = tol(dtype)
    np.testing.assert_allclose(got[finite], ref[finite], rtol=rtol, atol=atol)


@given(
    a=with_specials(),
    seed=st.integers(0, 100),
    op=st.sampled_from(
        ["maximum", "minimum", "add", "multiply", "equal", "not_equal", "less", "greater_equal"]
    ),
)
def test_binary_ops_with_nan_and_inf(device, a, seed, op):
    h, dtype = a
    other = np.random.default_rng(seed).permutation(h.reshape(-1)).reshape(h.shape)
    x, y = make(h, dtype, device), make(other, dtype, device)
    out = getattr(ignis, op)(x, y)
    ref = quiet(getattr(np, op), h.astype(np.float64), other.astype(np.float64))
    if out.dtype is ignis.bool_:
        np.testing.assert_array_equal(out.to_host(), ref)
    else:
        check_close(out, ref.astype(np_dtype(dtype)).astype(np.float64), *tol(dtype))


@given(case=with_specials(), lo=st.floats(-2, 0), hi=st.floats(0, 2))
def test_clip_keeps_nan(device, case, lo, hi):
    h, dtype = case
    out = ignis.clip(make(h, dtype, device), lo, hi)
    ref = np.clip(h.astype(np.float64), lo, hi)
    check_close(out, ref.astype(np_dtype(dtype)).astype(np.float64), *tol(dtype))


@given(case=with_specials(), op=st.sampled_from(["sum", "mean", "max", "min"]), data=st.data())
def test_reductions_propagate_nan_and_inf(device, case, op, data):
    h, dtype = case
    axis = data.draw(st.none() | st.integers(-h.ndim, h.ndim - 1))
    out = getattr(ignis, op)(make(h, dtype, device), axis=axis)
    ref = quiet(getattr(np, op), h.astype(np.float64), axis=axis)
    got = np.asarray(out.to_host(), dtype=np.float64)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    np.testing.assert_array_equal(np.isinf(got) & (got > 0), np.isposinf(ref))
    finite = np.isfinite(ref)
    rtol = {"float16": 8e-3, "bfloat16": 4e-2, "float32": 2e-5, "float64": 1e-10}[dtype]
    np.testing.assert_allclose(got[finite], ref[finite], rtol=rtol, atol=rtol * 10)


@given(case=with_specials(), op=st.sampled_from(["argmax", "argmin"]), data=st.data())
def test_arg_reductions_take_the_first_nan(device, case, op, data):
    h, dtype = case
    axis = data.draw(st.none() | st.integers(-h.ndim, h.ndim - 1))
    out = getattr(ignis, op)(make(h, dtype, device), axis=axis)
    np.testing.assert_array_equal(out.to_host(), getattr(np, op)(h, axis=axis))


@given(case=with_specials(), log=st.booleans(), masked_row=st.booleans())
def test_softmax_with_masked_and_non_finite_rows(device, case, log, masked_row):
    h, dtype = case
    h = h.copy()
    if masked_row:  # a row of -inf only: its maximum is not finite, the row is NaN
        h[..., :] = np.where(np.arange(h.shape[-1]) % 2 == 0, -np.inf, h[..., :])
        h.reshape(-1, h.shape[-1])[0] = -np.inf
    x = make(h, dtype, device)
    out = (ignis.log_softmax if log else ignis.softmax)(x, axis=-1)
    h64 = h.astype(np.float64)
    m = h64.max(axis=-1, keepdims=True)
    shifted = quiet(np.subtract, h64, m)
    lse = quiet(lambda s: np.log(np.exp(s).sum(axis=-1, keepdims=True)), shifted)
    ref = quiet(np.subtract, shifted, lse) if log else quiet(lambda: np.exp(shifted - lse))
    got = out.to_host().astype(np.float64)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(ref))
    finite = np.isfinite(ref)
    rtol = {"float16": 8e-3, "bfloat16": 4e-2, "float32": 2e-5, "float64": 1e-10}[dtype]
    np.testing.assert_allclose(got[finite], ref[finite], rtol=rtol, atol=2 * rtol)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_casts_overflow_to_inf_and_keep_nan(device, dtype):
    big = np.array([1e6, -1e6, np.nan, np.inf, 65504.0, 3.0e38], dtype=np.float64)
    got = make(big, "float64", device).astype(dtype).to_host().astype(np.float64)
    ref = quiet(big.astype, np_dtype(dtype)).astype(np.float64)
    np.testing.assert_array_equal(got, ref)  # NaN == NaN here (assert_array_equal)
