"""Every reduction of the reduction table, from its declaration: each float dtype x axes x
layout x device against NumPy in float64, the function and the method against each other, and
the exports. A new entry of the table is tested here without a line written for it."""

from __future__ import annotations

import inspect
import warnings

import numpy as np
import pytest
from array_helpers import FLOATS, TOL, np_dtype
from ignis._array import _ops
from ignis._array import _semantics as sem
from ignis._array._reduction_table import REDUCTIONS, ReductionOp

import ignis
from ignis import NvArray
from ignis import _dtypes as dt

OPS = list(REDUCTIONS.values())
SHAPE = (4, 3, 5)
# The axes each kind takes (the kinds' rules test the refused ones, test_reductions).
AXES = {
    "reduce": [None, 0, -1, (0, 2), ()],
    "arg": [None, 0, -1],
    "softmax": [0, 1, -1],
}
# error per unit of sum(|x|) of one accumulated result
ACC_EPS = {"float16": 1e-3, "bfloat16": 8e-3, "float32": 1e-6, "float64": 1e-13}


def _ids(op):
    return op.name


def _cases(keepdims=(False,)):
    return [
        pytest.param(op, axis, keep, id=f"{op.name}-axis={axis}" + ("-keepdims" if keep else ""))
        for op in OPS
        for axis in AXES[op.kind]
        for keep in (keepdims if op.kind != "softmax" else (False,))  # softmax keeps the shape
    ]


def _call(op, fn, x, axis, keepdims=False, ddof=0):
    if op.kind == "softmax":
        return fn(x, axis=axis)
    if op.ddof:
        return fn(x, axis=axis, ddof=ddof, keepdims=keepdims)
    return fn(x, axis=axis, keepdims=keepdims)


def _laid_out(host: np.ndarray, layout: str, device: str) -> NvArray:
    if layout == "contiguous":
        return NvArray.from_host(host, device=device)
    # permuted: the same values over memory in another order
    return NvArray.from_host(np.ascontiguousarray(host.transpose(2, 0, 1)), device=device).permute(
        1, 2, 0
    )


def _want_dtype(op, dtype: dt.DType, axis, keepdims) -> dt.DType:
    if op.kind == "reduce":
        return sem.reduction(op.name, SHAPE, dtype, axis, keepdims).dtype
    if op.kind == "arg":
        return dt.int64
    return sem.softmax(op.name, SHAPE, dtype, axis)[1]


@pytest.mark.parametrize("layout", ["contiguous", "permuted"])
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(("op", "axis", "keepdims"), _cases((False, True)))
def test_reduction_agrees_with_numpy_in_float64(
    device, op, axis, keepdims, dtype, layout, rng
) -> None:
    host = rng.uniform(-3.0, 3.0, size=SHAPE).astype(np_dtype(dtype))
    x = _laid_out(host, layout, device)
    ddof = 1 if op.ddof else 0
    got = _call(op, getattr(ignis, op.name), x, axis, keepdims, ddof)
    assert got.dtype is _want_dtype(op, dt.as_dtype(dtype), axis, keepdims)
    x64 = host.astype(np.float64)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # var over axis=(): N - ddof = 0
        want = np.asarray(op.numpy(x64, axis, keepdims, ddof))
    assert got.shape == want.shape
    if op.kind == "arg":  # the values are exact in float64: the same element wins
        np.testing.assert_array_equal(got.to_host(), want)
        return
    rtol, atol = TOL[dtype]
    ax = tuple(range(len(SHAPE))) if axis is None else axis
    # accumulated results: the dtype's rounding plus the accumulation's, per unit of sum(|x|)
    scale = np.sum(np.abs(x64), axis=ax) if op.kind == "reduce" else 1.0
    if op.name in ("max", "min"):
        scale = 0.0
    np.testing.assert_allclose(
        got.to_host().astype(np.float64),
        want,
        rtol=rtol,
        atol=atol * 4 + ACC_EPS[dtype] * np.max(scale, initial=0.0),
    )


@pytest.mark.parametrize(("op", "axis", "keepdims"), _cases())
def test_function_and_method_are_one_op(device, op, axis, keepdims, rng) -> None:
    x = NvArray.from_host(rng.uniform(-3.0, 3.0, size=SHAPE), device=device)
    want = _call(op, getattr(ignis, op.name), x, axis).to_host()
    np.testing.assert_array_equal(_call(op, getattr(NvArray, op.name), x, axis).to_host(), want)
    # positional arguments in the signature's order
    args = {"reduce": (axis, 1, True) if op.ddof else (axis, True), "arg": (axis, True)}
    if op.kind in args:
        np.testing.assert_array_equal(
            getattr(x, op.name)(*args[op.kind]).to_host(),
            getattr(ignis, op.name)(x, *args[op.kind]).to_host(),
        )


@pytest.mark.parametrize("op", OPS, ids=_ids)
def test_every_reduction_is_exported_once_with_its_signature(op) -> None:
    fn = getattr(ignis, op.name)
    assert fn is getattr(_ops, op.name)
    assert _ops.__all__.count(op.name) == 1 and ignis._array.__all__.count(op.name) == 1
    assert fn.__doc__ == op.doc and getattr(NvArray, op.name).__doc__ == op.doc
    params = list(inspect.signature(fn).parameters.values())
    method = list(inspect.signature(getattr(NvArray, op.name)).parameters.values())[1:]
    assert [(p.name, p.default) for p in params[1:]] == [(p.name, p.default) for p in method]
    assert str(inspect.signature(fn)) == f"({op.signature})"


def test_the_signatures_are_todays() -> None:
    assert str(inspect.signature(ignis.sum)) == "(x, axis=None, keepdims=False, dtype=None)"
    assert str(inspect.signature(ignis.mean)) == "(x, axis=None, keepdims=False)"
    assert (
        str(inspect.signature(ignis.var))
        == "(x, axis=None, ddof=0, keepdims=False, correction=None)"
    )
    assert str(inspect.signature(ignis.argmax)) == "(x, axis=None, keepdims=False)"
    assert str(inspect.signature(ignis.softmax)) == "(x, axis=-1)"


def test_the_methods_go_straight_to_the_common_body() -> None:
    # x.sum() is one call away from _reduce (the host-path benchmarks measure it): a dtype
    # given takes the general body
    lines = [line.strip() for line in NvArray.sum.source.splitlines()[1:]]
    assert lines == [
        "if dtype is not None:",
        "return _reduce_general('sum', x, axis, keepdims, 0, dtype)",
        "return _reduce('sum', x, axis, keepdims)",
    ]
    mean = NvArray.mean.source.splitlines()[1].strip()
    assert mean == "return _reduce('mean', x, axis, keepdims)"
    assert "_reduce('var', x, axis, keepdims, ddof)" in NvArray.var.source


def test_the_rules_accept_the_table() -> None:
    assert sem.REDUCE_OPS == tuple(n for n, op in REDUCTIONS.items() if op.kind == "reduce")
    assert sem.ARG_REDUCE_OPS == tuple(n for n, op in REDUCTIONS.items() if op.kind == "arg")
    assert set(sem.REDUCE_OPS) == {"sum", "prod", "mean", "max", "min", "var", "std", "all", "any"}


def test_error_messages_name_the_op() -> None:
    x = NvArray.from_host(np.ones((2, 3)), device="cpu")
    with pytest.raises(TypeError, match="var: expected an NvArray"):
        ignis.var([1.0, 2.0])
    with pytest.raises(ignis.ShapeError, match="argmax: axis must be None or an int"):
        x.argmax(axis=(0, 1))
    with pytest.raises(ignis.ShapeError, match="log_softmax: axis 2 is out of range"):
        x.log_softmax(axis=2)


def test_a_malformed_entry_is_refused() -> None:
    ref = REDUCTIONS["sum"].numpy
    with pytest.raises(ValueError, match="kind 'scan'"):
        ReductionOp("f", "scan", ref, "doc")
    with pytest.raises(ValueError, match="grad and saves"):
        ReductionOp("f", "reduce", ref, "doc", grad=lambda g, need: (g,))
    with pytest.raises(ValueError, match="ddof"):
        ReductionOp("f", "arg", ref, "doc", ddof=True)
