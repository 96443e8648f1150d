"""Elementwise ops against NumPy in float64: every dtype, broadcasting, scalars, views, NaN/Inf."""

from __future__ import annotations

import math

import numpy as np
import pytest
from array_helpers import ALL, FLOATS, INTS, TOL, assert_close, np_dtype, random_array, to64
from ignis._array import _semantics as sem

import ignis
from ignis import NvArray
from ignis import _dtypes as dt

_erf = np.vectorize(math.erf, otypes=[np.float64])


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


UNARY_REF = {
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "sin": np.sin,
    "cos": np.cos,
    "tanh": np.tanh,
    "sigmoid": _sigmoid,
    "relu": lambda x: np.maximum(x, 0),
    "silu": lambda x: x * _sigmoid(x),
    "erf": _erf,
    "gelu": lambda x: 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0))),
    "gelu_tanh": lambda x: (
        0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
    ),
    "negative": np.negative,
    "abs": np.abs,
}
UNARY_FN = {
    "exp": ignis.exp,
    "log": ignis.log,
    "sqrt": ignis.sqrt,
    "rsqrt": ignis.rsqrt,
    "sin": ignis.sin,
    "cos": ignis.cos,
    "tanh": ignis.tanh,
    "sigmoid": ignis.sigmoid,
    "relu": ignis.relu,
    "silu": ignis.silu,
    "erf": ignis.erf,
    "gelu": ignis.gelu,
    "gelu_tanh": lambda x: ignis.gelu(x, approximate="tanh"),
    "negative": ignis.negative,
    "abs": ignis.abs,
}
POSITIVE = {"log", "sqrt", "rsqrt"}


def unary_input(rng, op: str, dtype: str, shape=(5, 7)) -> np.ndarray:
    if dtype in INTS:
        lo = 1 if op in POSITIVE or dtype == "uint8" else -3
        return rng.integers(lo, 4, size=shape).astype(dtype)
    return random_array(rng, shape, dtype, positive=op in POSITIVE)


@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("op", sorted(UNARY_FN))
def test_unary_every_dtype_on_a_transposed_view(device: str, op: str, dtype: str, rng) -> None:
    sem_op = "gelu" if op == "gelu_tanh" else op
    base = unary_input(rng, op, dtype, (7, 5))
    a = NvArray.from_host(base, device=device).T  # non-contiguous operand
    x = base.T
    rule = sem.UNARY_OPS[sem_op]
    if rule == "numeric" and dtype == "bool":
        with pytest.raises(ignis.DTypeError, match=f"{sem_op}: not supported for bool arrays"):
            UNARY_FN[op](a)
        return
    out = UNARY_FN[op](a)
    expected_dtype = sem.unary(sem_op, (), dt.as_dtype(dtype)).dtype
    assert out.dtype is expected_dtype and out.shape == x.shape
    with np.errstate(all="ignore"):
        if op in ("exp", "log", "sqrt", "sin", "cos", "tanh", "negative", "abs") and dtype != "bfloat16":
            assert out.dtype.numpy == UNARY_REF[op](x).dtype  # NumPy's own dtype choice
        ref = UNARY_REF[op](to64(x))
    if expected_dtype.kind == "f":
        assert_close(out, ref, expected_dtype.name)
    else:
        assert_close(out, UNARY_REF[op](x), dtype)


def test_unary_special_values(device: str) -> None:
    x = NvArray.from_host(
        [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e30], dtype="float32", device=device
    )
    with np.errstate(all="ignore"):
        h = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e30], np.float32)
        np.testing.assert_array_equal(ignis.exp(x).to_host(), np.exp(h))
        np.testing.assert_array_equal(ignis.log(x).to_host(), np.log(h))
        np.testing.assert_array_equal(ignis.sqrt(x).to_host(), np.sqrt(h))
        np.testing.assert_array_equal(ignis.tanh(x).to_host(), np.tanh(h))
    np.testing.assert_array_equal(ignis.sigmoid(x).to_host(), [np.nan, 1.0, 0.0, 0.5, 0.5, 1.0])
    np.testing.assert_array_equal(
        ignis.relu(x).to_host()[1:], np.float32([np.inf, 0.0, 0.0, 0.0, 1e30])
    )
    assert np.isnan(ignis.relu(x).to_host()[0])
    np.testing.assert_array_equal(ignis.erf(x).to_host(), [np.nan, 1.0, -1.0, 0.0, -0.0, 1.0])
    assert np.isnan(ignis.gelu(x).to_host()[0]) and ignis.gelu(x).to_host()[1] == np.inf
    assert ignis.rsqrt(x).to_host()[3] == np.inf


def test_gelu_rejects_unknown_approximation(device: str) -> None:
    with pytest.raises(ValueError, match="gelu: approximate must be 'none' or 'tanh', got 'fast'"):
        ignis.gelu(ignis.zeros(2, device=device), approximate="fast")


def test_unary_functions_need_arrays() -> None:
    with pytest.raises(TypeError, match="exp: expected an NvArray, got list"):
        ignis.exp([1.0])


BINARY_FN = {
    "add": lambda a, b: a + b,
    "subtract": lambda a, b: a - b,
    "multiply": lambda a, b: a * b,
    "divide": lambda a, b: a / b,
    "power": lambda a, b: a**b,
    "maximum": ignis.maximum,
    "minimum": ignis.minimum,
    "equal": lambda a, b: a == b,
    "not_equal": lambda a, b: a != b,
    "less": lambda a, b: a < b,
    "less_equal": lambda a, b: a <= b,
    "greater": lambda a, b: a > b,
    "greater_equal": lambda a, b: a >= b,
}
NUMPY_BINARY = {
    "add": np.add,
    "subtract": np.subtract,
    "multiply": np.multiply,
    "divide": np.true_divide,
    "power": np.power,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "equal": np.equal,
    "not_equal": np.not_equal,
    "less": np.less,
    "less_equal": np.less_equal,
    "greater": np.greater,
    "greater_equal": np.greater_equal,
}


def binary_inputs(rng, op: str, da: str, db: str, shape_a, shape_b):
    a = random_array(rng, shape_a, da, positive=op == "power" and da != "bool")
    if op == "power":
        if db in INTS:
            b = rng.integers(0, 4, size=shape_b).astype(db)
        else:
            b = random_array(rng, shape_b, db, low=0.0, high=3.0)
    elif op == "divide" and db not in ("bool",) + tuple(INTS):
        mag = rng.uniform(0.5, 4.0, size=shape_b) * rng.choice([-1.0, 1.0], size=shape_b)
        b = mag.astype(np_dtype(db))
    else:
        b = random_array(rng, shape_b, db)
        if op == "divide" and db in INTS:
            b = np.where(b == 0, 1, b).astype(db)
    return a, b


def reference(op: str, a: np.ndarray, b: np.ndarray, out_dtype: dt.DType, compute: dt.DType):
    if out_dtype.kind == "f" or (op in sem.COMPARISON_OPS and compute.kind == "f"):
        with np.errstate(all="ignore"):
            return NUMPY_BINARY[op](to64(a), to64(b))
    ct = compute.numpy
    with np.errstate(all="ignore"):
        return NUMPY_BINARY[op](a.astype(ct), b.astype(ct))


def check_binary(device, op, da, db, rng, shape_a=(4, 5), shape_b=(4, 5), tol_scale=1.0):
    a, b = binary_inputs(rng, op, da, db, shape_a, shape_b)
    A, B = NvArray.from_host(a, device=device), NvArray.from_host(b, device=device)
    try:
        spec = sem.binary(op, dt.as_dtype(da), dt.as_dtype(db))
    except ignis.DTypeError:
        with pytest.raises(ignis.DTypeError, match=op):
            BINARY_FN[op](A, B)
        return
    out = BINARY_FN[op](A, B)
    assert out.dtype is spec.dtype and out.shape == np.broadcast_shapes(shape_a, shape_b)
    ref = reference(op, a, b, spec.dtype, spec.compute)
    # the rounding of both operands to a common half type doubles the error budget
    assert_close(
        out, ref, spec.dtype.name, scale=tol_scale * (4 if op in ("power", "divide") else 2)
    )


@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("op", sorted(BINARY_FN))
def test_binary_same_dtype(device: str, op: str, dtype: str, rng) -> None:
    check_binary(device, op, dtype, dtype, rng)


@pytest.mark.parametrize("db", ALL)
@pytest.mark.parametrize("da", ALL)
@pytest.mark.parametrize("op", ["add", "multiply", "maximum", "less", "divide"])
def test_binary_mixed_dtypes(device: str, op: str, da: str, db: str, rng) -> None:
    check_binary(device, op, da, db, rng)


@pytest.mark.parametrize(
    "shapes",
    [
        ((3, 1), (1, 4)),
        ((2, 3, 4), (4,)),
        ((1,), (5, 1, 2)),
        ((), (3,)),
        ((0, 3), (1, 3)),
        ((1, 1), (1, 1)),
        ((6, 0), (1,)),
    ],
)
@pytest.mark.parametrize("op", ["add", "subtract", "divide", "maximum", "greater"])
def test_binary_broadcasting(device: str, op: str, shapes, rng) -> None:
    check_binary(device, op, "float32", "float32", rng, *shapes)


def test_broadcast_shape_error(device: str) -> None:
    a, b = ignis.zeros((2, 3), device=device), ignis.zeros((4,), device=device)
    with pytest.raises(
        ignis.ShapeError, match=r"add: shapes \(2, 3\) and \(4,\) cannot be broadcast together"
    ):
        a + b
    with pytest.raises(ignis.ShapeError, match="multiply"):
        a * b


@pytest.mark.parametrize("dtype", ALL)
def test_python_scalars_are_weak(device: str, dtype: str, rng) -> None:
    x = random_array(rng, (3, 4), dtype, positive=True)
    a = NvArray.from_host(x, device=device)
    for scalar in (2, 2.5, True):
        for fn, npfn in (
            (lambda p, q: p + q, np.add),
            (lambda p, q: p * q, np.multiply),
            (lambda p, q: q - p, None),
            (lambda p, q: q / p, None),
            (lambda p, q: p < q, np.less),
        ):
            try:
                out = fn(a, scalar)
            except ignis.DTypeError:
                assert dtype == "bool" and scalar is True  # bool - bool
                continue
            if npfn is not None and not (dtype == "bfloat16" and isinstance(scalar, float)):
                with np.errstate(all="ignore"):
                    assert out.dtype.numpy == npfn(x, scalar).dtype, (dtype, scalar)
            with np.errstate(all="ignore"):
                ref = fn(to64(x), scalar)
            kind = out.dtype.name
            if out.dtype.kind != "f":
                with np.errstate(all="ignore"):
                    ref = fn(x, scalar)
            assert_close(out, ref, kind, scale=2)


def test_scalar_rules_examples(device: str) -> None:
    f16 = ignis.ones(3, dtype="float16", device=device)
    i32 = ignis.ones(3, dtype="int32", device=device)
    u8 = ignis.ones(3, dtype="uint8", device=device)
    assert (f16 + 2.0).dtype == "float16" and (f16 * 1e10).to_host()[0] == np.inf
    assert (i32 + 2.0).dtype == "float64" and (i32 + 2).dtype == "int32"
    assert (u8 + 255).dtype == "uint8" and (u8 + 255).to_host().tolist() == [0, 0, 0]  # wraps
    assert (f16 + np.float32(1)).dtype == "float32"  # NumPy scalars are strong
    assert (i32 + np.int64(1)).dtype == "int64"
    assert (ignis.ones(2, dtype="bool", device=device) + 1).dtype == "int64"
    with pytest.raises(OverflowError, match="add: Python integer 256 is out of bounds for uint8"):
        u8 + 256
    assert (f16 + 1j).dtype == "complex64"  # a weak complex takes the float's precision
    with pytest.raises(TypeError, match="NumPy arrays are not converted implicitly"):
        ignis.add(f16, np.ones(3))
    with pytest.raises(TypeError, match="NumPy arrays are not converted implicitly"):
        np.ones(3) + f16
    with pytest.raises(
        TypeError, match=r"add: expected an NvArray or a Python/NumPy scalar, got list"
    ):
        f16 + [1, 2, 3]
    with pytest.raises(TypeError, match="at least one operand must be an NvArray"):
        ignis.add(1, 2)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
def test_python_floats_beyond_float32_range(device: str, dtype: str, rng) -> None:
    # A Python float operand is cast to the op's dtype as NumPy's float32() / float64() cast
    # it (the half types compute in float32): beyond float32's range it is infinity, never an
    # error. Each op runs three times: the GPU's first call and its one-call path after it.
    x = random_array(rng, (1000,), dtype)
    a = NvArray.from_host(x, device=device)
    cast = float(np.float64(1e39) if dtype == "float64" else np.float32(np.inf))
    cases = {
        "a * 1e39": (lambda: a * 1e39, lambda h: h * cast),
        "-1e39 - a": (lambda: -1e39 - a, lambda h: -cast - h),
        "where(a > 0, a, 1e39)": (
            lambda: ignis.where(a > 0, a, 1e39),
            lambda h: np.where(h > 0, h, cast),
        ),
        "maximum(a, -1e39)": (lambda: ignis.maximum(a, -1e39), lambda h: np.maximum(h, -cast)),
        "a < 1e39": (lambda: a < 1e39, lambda h: h < cast),
    }
    for label, (op, ref_op) in cases.items():
        with np.errstate(all="ignore"):
            ref = ref_op(to64(x))
        for _ in range(3):
            got = op().to_host()
            np.testing.assert_array_equal(
                got.astype(np.float64), ref.astype(got.dtype).astype(np.float64), err_msg=label
            )


def test_reflected_operators(device: str, rng) -> None:
    x = random_array(rng, (3,), "float64", positive=True)
    a = NvArray.from_host(x, device=device)
    np.testing.assert_allclose((2 - a).to_host(), 2 - x)
    np.testing.assert_allclose((2 / a).to_host(), 2 / x)
    np.testing.assert_allclose((2**a).to_host(), 2**x)
    np.testing.assert_allclose((3 * a).to_host(), 3 * x)
    np.testing.assert_allclose((1 + a).to_host(), 1 + x)
    np.testing.assert_allclose((np.float64(2) + a).to_host(), 2 + x)
    np.testing.assert_allclose((-a).to_host(), -x)
    np.testing.assert_allclose(abs(-a).to_host(), x)
    np.testing.assert_allclose((+a).to_host(), x)
    assert ((1 < a).to_host() == (1 < x)).all()
    assert ((a == a).to_host()).all() and not (a != a).to_host().any()
    assert (a == "text") is False and (a != None) is True  # noqa: E711 - unsupported types compare by identity


def test_integer_power_negative_exponent_truncates(device: str) -> None:
    base = NvArray.from_host([2, 1, -1, -1, 0, 3, -2], dtype="int32", device=device)
    exp = NvArray.from_host([-1, -3, -2, -3, -1, 2, 3], dtype="int32", device=device)
    assert (base**exp).to_host().tolist() == [0, 1, 1, -1, 0, 9, -8]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "int32", "int8", "uint8"])
def test_inplace_operators(device: str, dtype: str, rng) -> None:
    x = random_array(rng, (3, 4), dtype, positive=True)
    a = NvArray.from_host(x, device=device)
    ref = x.copy()
    a_id = id(a)
    a += NvArray.from_host(x[0], device=device)  # broadcast
    ref += x[0]
    a *= 2
    ref *= np.asarray(2, ref.dtype)
    a -= 1
    ref -= np.asarray(1, ref.dtype)
    assert id(a) == a_id and a.dtype == dtype
    np.testing.assert_allclose(a.to_host().astype(np.float64), ref.astype(np.float64), rtol=2e-2)
    if dtype in FLOATS:
        a /= 2.0
        ref = ref.astype(np.float64) / 2.0
        np.testing.assert_allclose(
            a.to_host().astype(np.float64), ref, rtol=TOL[dtype][0] * 4 + 2e-2
        )
        a **= 2
    else:
        with pytest.raises(
            ignis.DTypeError,
            match=f"__itruediv__: cannot store a float64 result in place into a {dtype} array",
        ):
            a /= 2
        with pytest.raises(ignis.DTypeError, match="same_kind"):
            a += 1.5
    with pytest.raises(
        ignis.ShapeError,
        match=r"__iadd__: the result of shape \(2, 3, 4\) cannot be stored in place",
    ):
        a += ignis.zeros((2, 3, 4), dtype=dtype, device=device)


def test_inplace_with_overlapping_operand(device: str) -> None:
    x = np.arange(8.0)
    a = NvArray.from_host(x, device=device)
    a[1:] += a[:-1]
    x[1:] += x[:-1].copy()
    np.testing.assert_array_equal(a.to_host(), x)
    b = NvArray.from_host(np.arange(6.0).reshape(2, 3), device=device)
    b += b  # identical operand
    np.testing.assert_array_equal(b.to_host(), 2 * np.arange(6.0).reshape(2, 3))
    c = NvArray.from_host(np.arange(9.0).reshape(3, 3), device=device)
    c += c.T  # overlapping, not identical
    np.testing.assert_array_equal(
        c.to_host(), np.arange(9.0).reshape(3, 3) + np.arange(9.0).reshape(3, 3).T
    )


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64", "int32", "uint8"])
def test_accumulate(device: str, dtype: str, rng) -> None:
    x = random_array(rng, (4, 3), dtype)
    y = random_array(rng, (4, 3), dtype)
    dst = NvArray.from_host(x, device=device)
    out = ignis.accumulate(dst, NvArray.from_host(y, device=device))
    assert out is dst
    with np.errstate(all="ignore"):
        ref = (x.astype(np.float64) + y.astype(np.float64)) if dtype in FLOATS else x + y
    assert_close(dst, ref, dtype, scale=2)
    ignis.accumulate(dst, NvArray.from_host(y[0], device=device))  # broadcast row
    g = ignis.zeros((4, 3), dtype="float16", device=device)
    ignis.accumulate(g, ignis.ones((4, 3), dtype="float32", device=device))  # float32 into float16
    assert (g.to_host() == 1).all()
    with pytest.raises(ignis.ShapeError, match="accumulate"):
        ignis.accumulate(dst, ignis.zeros((5, 3), dtype=dtype, device=device))
    with pytest.raises(TypeError, match="accumulate: expected an NvArray"):
        ignis.accumulate(np.zeros(3), dst)


@pytest.mark.parametrize("dtype", ALL)
def test_where_every_dtype(device: str, dtype: str, rng) -> None:
    c = rng.random((3, 1)) < 0.5
    c[0, 0], c[1, 0] = True, False
    a = random_array(rng, (3, 4), dtype)
    b = random_array(rng, (4,), dtype)
    out = ignis.where(
        NvArray.from_host(c, device=device),
        NvArray.from_host(a, device=device),
        NvArray.from_host(b, device=device),
    )
    assert out.dtype == dtype and out.shape == (3, 4)
    np.testing.assert_array_equal(out.to_host(), np.where(c, a, b))


def test_where_scalars_and_nonbool_condition(device: str, rng) -> None:
    x = random_array(rng, (5,), "float32")
    a = NvArray.from_host(x, device=device)
    r = ignis.where(a > 0, a, 0.0)
    assert r.dtype == "float32"
    np.testing.assert_array_equal(r.to_host(), np.where(x > 0, x, 0.0).astype(np.float32))
    i = NvArray.from_host([0, 2, -1, 0, 5], dtype="int32", device=device)
    r2 = ignis.where(i, 1, 2)  # nonzero counts as true
    assert r2.dtype == "int64" and r2.to_host().tolist() == [2, 1, 1, 2, 1]
    assert ignis.where(True, a, 1.0).to_host().tolist() == a.to_host().tolist()
    with pytest.raises(ignis.ShapeError, match="where"):
        ignis.where(ignis.zeros(3, dtype="bool", device=device), a, 0.0)
    with pytest.raises(TypeError, match="where: at least one operand must be an NvArray"):
        ignis.where(True, 1, 2)


@pytest.mark.parametrize(
    "dtype", ["float16", "bfloat16", "float32", "float64", "int8", "uint8", "int64"]
)
def test_clip(device: str, dtype: str, rng) -> None:
    x = random_array(rng, (4, 5), dtype)
    a = NvArray.from_host(x, device=device)
    lo, hi = (1, 3) if dtype in INTS else (-1.5, 2.0)
    out = ignis.clip(a, lo, hi)
    assert out.dtype == dtype
    np.testing.assert_array_equal(out.to_host(), np.clip(x, lo, hi).astype(x.dtype))
    np.testing.assert_array_equal(a.clip(min=lo).to_host(), np.maximum(x, np.asarray(lo, x.dtype)))
    np.testing.assert_array_equal(a.clip(max=hi).to_host(), np.minimum(x, np.asarray(hi, x.dtype)))
    bounds = NvArray.from_host(np.sort(random_array(rng, (2, 5), dtype), axis=0), device=device)
    np.testing.assert_array_equal(
        ignis.clip(a, bounds[0], bounds[1]).to_host(),
        np.minimum(np.maximum(x, bounds.to_host()[0]), bounds.to_host()[1]),
    )
    unclipped = ignis.clip(a)  # no bounds: a copy (the Array API's clip(x, None, None))
    assert unclipped.data_ptr != a.data_ptr
    np.testing.assert_array_equal(unclipped.to_host(), a.to_host())


def test_nan_and_inf_propagate(device: str) -> None:
    vals = [np.nan, np.inf, -np.inf, 1.0, -2.0]
    for dtype in FLOATS:
        a = NvArray.from_host(vals, dtype=dtype, device=device)
        b = NvArray.from_host([1.0, 1.0, 1.0, np.nan, np.inf], dtype=dtype, device=device)
        h, g = np.array(vals), np.array([1.0, 1.0, 1.0, np.nan, np.inf])
        with np.errstate(all="ignore"):
            for fn, ref in (
                (ignis.add, h + g),
                (ignis.multiply, h * g),
                (ignis.maximum, np.maximum(h, g)),
                (ignis.minimum, np.minimum(h, g)),
                (ignis.divide, h / g),
            ):
                np.testing.assert_array_equal(fn(a, b).to_host().astype(np.float64), ref)
            np.testing.assert_array_equal((a == a).to_host(), h == h)
            np.testing.assert_array_equal((a != b).to_host(), h != g)
            np.testing.assert_array_equal((a * 0).to_host().astype(np.float64), h * 0)


@pytest.mark.parametrize("dtype", ALL)
def test_empty_and_size_one(device: str, dtype: str) -> None:
    e = ignis.zeros((0, 3), dtype=dtype, device=device)
    one = ignis.ones((1,), dtype=dtype, device=device)
    s = (e + one) if dtype != "bool" else (e * one)
    assert s.shape == (0, 3)
    assert ignis.exp(e).shape == (0, 3) and ignis.abs(e).shape == (0, 3)
    assert (one + one).shape == (1,)
    assert ignis.where(e, e, one).shape == (0, 3)


def test_binary_rule_errors() -> None:
    with pytest.raises(ignis.DTypeError, match="subtract: not supported for two bool operands"):
        sem.binary("subtract", dt.bool_, dt.bool_)
    with pytest.raises(ignis.DTypeError, match="power"):
        sem.binary("power", dt.bool_, True)
    with pytest.raises(ignis.DTypeError, match="negative: not supported for bool arrays"):
        sem.unary("negative", (), dt.bool_)
