"""Every op of the op table, from its declaration: each float dtype x layout x device against
NumPy in float64, the result dtype against NumPy's own choice, and the function, method and
operator forms against each other. A new entry of the table is tested here without a line
written for it."""

from __future__ import annotations

import numpy as np
import pytest
from array_helpers import ALL, FLOATS, INTS, TOL, np_dtype
from ignis._array import _ops
from ignis._array import _semantics as sem
from ignis._array._op_table import ELEMENTWISE

import ignis
from ignis import NvArray
from ignis import _dtypes as dt

OPS = list(ELEMENTWISE.values())
UNARY = [op for op in OPS if op.arity == 1]
BINARY = [op for op in OPS if op.arity == 2]
LAYOUTS = ["contiguous", "transposed", "offset", "reversed"]
SHAPE = (6, 5)


def _ids(op):
    return op.name


def _takes(op, dtype: str) -> bool:
    """Whether the op's dtype rule accepts ``dtype`` (the semantics, not a list kept here)."""
    d = dt.as_dtype(dtype)
    try:
        if op.arity == 1:
            sem.unary(op.name, (), d)
        else:
            x = NvArray.empty((1,), d, device="cpu")
            sem.binary(op.name, x, x)
    except ignis.DTypeError:
        return False
    return True


def _cases(ops):
    """(op, dtype) pairs: every float dtype the op takes, or, for integer-only ops, the
    integer dtypes."""
    cases = []
    for op in ops:
        dtypes = [d for d in FLOATS if _takes(op, d)] or [d for d in INTS if _takes(op, d)]
        cases += [pytest.param(op, d, id=f"{op.name}-{d}") for d in dtypes]
    return cases


def _sample(rng, op, shape, dtype):
    """Inputs in the op's smooth range, exactly representable in ``dtype``; for integers,
    small values (shift counts within the width)."""
    if dtype in INTS:
        info = np.iinfo(dtype)
        hi = min(info.max, info.bits - 1 if op.dtypes == "shift" else 40)
        lo = 0 if op.dtypes == "shift" else max(info.min, -40)
        return rng.integers(lo, hi, size=shape, endpoint=True).astype(dtype)
    lo, hi = op.sample
    return rng.uniform(lo, hi, size=shape).astype(np_dtype(dtype))


def _laid_out(host: np.ndarray, layout: str, device: str) -> NvArray:
    """``host``'s values as an NvArray of the given memory layout."""
    if layout == "contiguous":
        return NvArray.from_host(host, device=device)
    if layout == "transposed":
        return NvArray.from_host(np.ascontiguousarray(host.T), device=device).T
    if layout == "offset":  # starts one element into its storage: off every vector boundary
        flat = np.concatenate([host.reshape(-1)[:1], host.reshape(-1)])
        return NvArray.from_host(flat, device=device)[1:].reshape(host.shape)
    if layout == "reversed":  # negative strides
        return NvArray.from_host(np.ascontiguousarray(host[::-1, ::-1]), device=device)[::-1, ::-1]
    raise ValueError(layout)


def _reference(op, *operands: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        if np.asarray(operands[0]).dtype.kind in "iu":  # integers: exact in their own dtype
            return op.numpy(*operands, **op.defaults)
        return op.numpy(*(np.asarray(x, np.float64) for x in operands), **op.defaults)


def _check(op, got: NvArray, want: np.ndarray, dtype: str) -> None:
    out_dtype = got.dtype.name
    if out_dtype == "bool" or got.dtype.kind in "iu":
        np.testing.assert_array_equal(got.to_host(), want.astype(got.dtype.numpy))
        return
    rtol, atol = TOL[dtype]
    # The result is rounded once from a value computed in (at least) float32 from inputs exact
    # in ``dtype``: the dtype's own rounding, scaled by the size of the result.
    np.testing.assert_allclose(
        got.to_host().astype(np.float64), want, rtol=rtol, atol=atol * max(1.0, np.abs(want).max())
    )


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize(("op", "dtype"), _cases(UNARY))
def test_unary_op_agrees_with_numpy_in_float64(device, op, dtype, layout, rng) -> None:
    host = _sample(rng, op, SHAPE, dtype)
    x = _laid_out(host, layout, device)
    got = getattr(ignis, op.name)(x)
    assert got.dtype is sem.unary(op.name, (), dt.as_dtype(dtype)).dtype
    assert got.shape == SHAPE
    _check(op, got, _reference(op, host), dtype)


@pytest.mark.parametrize("layout", LAYOUTS + ["broadcast row", "scalar"])
@pytest.mark.parametrize(("op", "dtype"), _cases(BINARY))
def test_binary_op_agrees_with_numpy_in_float64(device, op, dtype, layout, rng) -> None:
    ha = _sample(rng, op, SHAPE, dtype)
    hb = _sample(rng, op, SHAPE, dtype)
    if layout in LAYOUTS:
        a, b = _laid_out(ha, layout, device), _laid_out(hb, layout, device)
    elif layout == "broadcast row":
        hb = hb[0]
        a, b = _laid_out(ha, "transposed", device), NvArray.from_host(hb, device=device)
    else:  # a Python scalar: weak, the array's dtype wins
        weak = int if dtype in INTS else float
        hb = np.asarray(weak(hb.flat[0]), np_dtype(dtype))
        a, b = _laid_out(ha, "contiguous", device), weak(hb)
    got = getattr(ignis, op.name)(a, b)
    assert got.dtype is sem.binary(op.name, a, b).dtype
    _check(op, got, _reference(op, ha, hb), dtype)


NUMPY_DTYPES = [d for d in ALL if d != "bfloat16"]


@pytest.mark.parametrize("dtype", NUMPY_DTYPES)
@pytest.mark.parametrize("op", [op for op in OPS if isinstance(op.numpy, np.ufunc)], ids=_ids)
def test_result_dtype_is_numpys(op, dtype, rng) -> None:
    """Where the reference is a NumPy ufunc, ignis picks the result dtype NumPy picks."""
    host = (rng.uniform(1, 3, size=(4,)) + 0).astype(dtype)
    operands = [host] * op.arity
    try:
        spec = (
            sem.unary(op.name, (4,), dt.as_dtype(dtype))
            if op.arity == 1
            else sem.binary(op.name, *[NvArray.from_host(h, device="cpu") for h in operands])
        )
    except ignis.DTypeError:
        return  # refused (bool arithmetic); test_elementwise checks the message
    with np.errstate(all="ignore"):
        want = op.numpy(*operands).dtype
    assert spec.dtype.numpy == want


@pytest.mark.parametrize("op", OPS, ids=_ids)
def test_function_methods_and_operators_are_one_op(device, op, rng) -> None:
    dtype = "float32" if _takes(op, "float32") else "int32"
    host = [_sample(rng, op, SHAPE, dtype) for _ in range(op.arity)]
    arrays = [NvArray.from_host(h, device=device) for h in host]
    want = getattr(ignis, op.name)(*arrays).to_host()
    for name in op.methods:
        np.testing.assert_array_equal(getattr(arrays[0], name)(*arrays[1:]).to_host(), want)
    for dunder in op.operators:
        if op.arity == 1:  # (__invert__ is not in place)
            got = getattr(arrays[0], dunder)()
        elif op.operator_form(dunder) == "reflected":
            got = getattr(arrays[1], dunder)(arrays[0])
        elif op.operator_form(dunder) == "inplace":
            got = arrays[0].clone()
            got = getattr(got, dunder)(arrays[1])
        else:
            got = getattr(arrays[0], dunder)(arrays[1])
        np.testing.assert_array_equal(got.to_host(), want, err_msg=dunder)


@pytest.mark.parametrize("op", OPS, ids=_ids)
def test_every_op_is_exported_once(op) -> None:
    assert getattr(ignis, op.name) is getattr(_ops, op.name)
    assert _ops.__all__.count(op.name) == 1
    assert getattr(ignis, op.name).__doc__ == op.doc
    for alias in op.aliases:
        assert getattr(ignis, alias) is getattr(ignis, op.name)
        assert _ops.__all__.count(alias) == 1


def test_an_unknown_option_value_names_the_op_and_the_choices() -> None:
    x = NvArray.from_host([1.0, 2.0], device="cpu")
    for op in (op for op in OPS if op.params):
        key = next(iter(op.params))
        with pytest.raises(ValueError, match=rf"{op.name}: {key} must be .*got 'nope'"):
            getattr(ignis, op.name)(x, **{key: "nope"})


def test_a_malformed_entry_is_refused() -> None:
    from ignis._array._op_table import ElementwiseOp

    with pytest.raises(ValueError, match="dtype rule 'floaty'"):
        ElementwiseOp("f", 1, "floaty", np.exp, "op_exp", "doc")
    with pytest.raises(ValueError, match="saves"):
        ElementwiseOp("f", 1, "float", np.exp, "op_exp", "doc", saves=("y",))


@pytest.mark.parametrize("op", [op for op in BINARY if op.operators], ids=_ids)
def test_python_operators_are_the_op(device, op, rng) -> None:
    # Through Python's own operator dispatch (the operator module), not the dunder names: x >> y
    # must be bitwise_right_shift(x, y), 3 >> y its reflected form, x >>= y in place.
    import operator

    dtype = "float32" if _takes(op, "float32") else "int32"
    a, b = (NvArray.from_host(_sample(rng, op, SHAPE, dtype), device=device) for _ in range(2))
    fn = getattr(ignis, op.name)
    scalar = 2 if dtype == "int32" else 2.0
    for dunder in op.operators:
        form = op.operator_form(dunder)
        name = dunder.strip("_")[1:] if form == "reflected" else dunder.strip("_")
        py = getattr(operator, name, None) or getattr(operator, name + "_")
        if form == "reflected":
            got, want = py(scalar, b), fn(scalar, b)
        elif form == "inplace":
            got, want = py(a.clone(), b), fn(a, b)
        else:
            got, want = py(a, b), fn(a, b)
        np.testing.assert_array_equal(got.to_host(), want.to_host(), err_msg=dunder)
