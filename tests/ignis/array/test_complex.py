"""complex64 and complex128: dtypes and promotion, creation and host exchange, the element-wise
ops the Array API standard defines for complex operands, the refusals of the real-only ones,
reductions, matmul / vecdot, linalg, indexing and DLPack.

Every computing test runs on each device of the shared ``device`` fixture (the CPU always,
``cuda:0`` where a GPU exists) against NumPy in complex128 on random data with both parts
nonzero.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from ignis._array._op_table import ELEMENTWISE

import ignis
from ignis import _dtypes as dt

CDTYPES = ["complex64", "complex128"]
TOL = {"complex64": 2e-5, "complex128": 1e-12}


def _rand(rng: np.random.Generator, shape: tuple, dtype: str, scale: float = 2.0) -> np.ndarray:
    z = rng.uniform(-scale, scale, shape) + 1j * rng.uniform(-scale, scale, shape)
    return z.astype(dtype)


def _nv(values: np.ndarray, device: str) -> ignis.NvArray:
    return ignis.asarray(np.asarray(values), device=device, copy=True)


def _close(got: ignis.NvArray, want: np.ndarray, dtype: str, tol: float | None = None) -> None:
    host = got.to_host()
    assert host.dtype == np.asarray(want).dtype, (host.dtype, np.asarray(want).dtype)
    np.testing.assert_allclose(
        host.astype(np.complex128) if host.dtype.kind == "c" else host,
        np.asarray(want),
        rtol=tol or TOL[dtype],
        atol=(tol or TOL[dtype]),
        equal_nan=True,
    )


# --- dtypes ---------------------------------------------------------------------------------------


def test_complex_dtypes_exist() -> None:
    assert ignis.complex64.kind == "c" and ignis.complex64.itemsize == 8
    assert ignis.complex128.numpy == np.complex128 and ignis.complex128.is_complex
    assert dt.as_dtype("complex64") is ignis.complex64
    assert (
        dt.as_dtype(np.complex128) is ignis.complex128 and dt.as_dtype(complex) is ignis.complex128
    )
    assert ignis.complex64 == "complex64" and ignis.complex64 != ignis.float32
    assert dt.real_of(ignis.complex64) is ignis.float32
    assert dt.complex_of(ignis.float64) is ignis.complex128
    assert ignis.complex64 not in dt.all_dtypes and ignis.complex64 in dt.every_dtype


@pytest.mark.parametrize(
    "a, b, want",
    [
        ("float32", "complex64", "complex64"),
        ("float64", "complex64", "complex128"),
        ("float16", "complex64", "complex64"),
        ("bfloat16", "complex64", "complex64"),
        ("int32", "complex64", "complex128"),
        ("int8", "complex64", "complex64"),
        ("bool", "complex128", "complex128"),
        ("complex64", "complex128", "complex128"),
    ],
)
def test_complex_promotion_follows_numpy(a: str, b: str, want: str) -> None:
    assert ignis.promote_types(a, b).name == want
    assert ignis.result_type(a, b).name == want
    if "bfloat16" not in (a, b):
        assert np.promote_types(a, b) == np.dtype(want)


def test_python_complex_scalars_are_weak() -> None:
    assert ignis.result_type(ignis.float32, 1j) is ignis.complex64  # NEP 50, the standard
    assert ignis.result_type(ignis.float16, 1j) is ignis.complex64
    assert ignis.result_type(ignis.float64, 1j) is ignis.complex128
    assert ignis.result_type(ignis.complex64, 1j) is ignis.complex64
    assert ignis.result_type(ignis.complex64, 2.0) is ignis.complex64
    assert ignis.result_type(ignis.int8, 1j) is ignis.complex128
    assert ignis.result_type(1j) is ignis.complex128


def test_can_cast_and_isdtype() -> None:
    assert ignis.can_cast(ignis.float32, ignis.complex64)
    assert ignis.can_cast(ignis.float64, ignis.complex128)
    assert not ignis.can_cast(ignis.float64, ignis.complex64)
    assert not ignis.can_cast(ignis.complex64, ignis.float64)
    assert not dt.can_cast(ignis.complex64, ignis.float32, "same_kind")
    assert ignis.isdtype(ignis.complex64, "complex floating")
    assert ignis.isdtype(ignis.complex128, "numeric")
    assert not ignis.isdtype(ignis.complex64, "real floating")
    assert not ignis.isdtype(ignis.float32, "complex floating")


def test_namespace_info_and_finfo() -> None:
    info = ignis.__array_namespace_info__()
    assert info.dtypes(kind="complex floating") == {
        "complex64": ignis.complex64,
        "complex128": ignis.complex128,
    }
    assert "complex128" in info.dtypes()
    assert info.default_dtypes()["complex floating"] is ignis.complex64
    f = ignis.finfo(ignis.complex64)
    assert f.dtype is ignis.float32 and f.bits == 32
    assert f.eps == float(np.finfo(np.float32).eps)
    assert ignis.finfo(ignis.complex128).max == float(np.finfo(np.float64).max)


# --- creation and host exchange -------------------------------------------------------------------


def test_creation_with_complex_dtypes(device: str) -> None:
    for d in CDTYPES:
        assert ignis.zeros((2, 3), dtype=d, device=device).to_host().tolist() == [[0j] * 3] * 2
        assert ignis.ones(2, dtype=d, device=device).to_host().dtype == np.dtype(d)
        assert ignis.empty(4, dtype=d, device=device).dtype.name == d
        full = ignis.full((2, 2), 1.5 - 2j, dtype=d, device=device)
        assert (full.to_host() == np.complex128(1.5 - 2j)).all() and full.dtype.name == d
        eye = ignis.eye(3, dtype=d, device=device).to_host()
        np.testing.assert_array_equal(eye, np.eye(3, dtype=d))
        ar = ignis.arange(4, dtype=d, device=device).to_host()
        np.testing.assert_array_equal(ar, np.arange(4).astype(d))
    assert ignis.full(3, 2j, device=device).dtype is ignis.complex64  # the default complex
    assert ignis.full(3, np.complex128(2j), device=device).dtype is ignis.complex128


def test_linspace_complex(device: str) -> None:
    got = ignis.linspace(0, 1 + 2j, 5, device=device)
    assert got.dtype is ignis.complex64
    np.testing.assert_allclose(got.to_host(), np.linspace(0, 1 + 2j, 5), rtol=1e-6)
    got = ignis.linspace(1j, -3 + 1j, 4, dtype="complex128", endpoint=False, device=device)
    np.testing.assert_allclose(got.to_host(), np.linspace(1j, -3 + 1j, 4, endpoint=False))
    got = ignis.linspace(0, 2, 3, dtype="complex64", device=device)
    np.testing.assert_allclose(got.to_host(), [0, 1, 2])


def test_asarray_and_host_exchange(device: str, rng) -> None:
    assert ignis.asarray([1 + 2j, 3], device=device).dtype is ignis.complex64  # Python complex
    assert ignis.asarray(1j, device=device).dtype is ignis.complex64
    for d in CDTYPES:
        host = _rand(rng, (3, 4), d)
        x = ignis.asarray(host, device=device)
        assert x.dtype.name == d
        np.testing.assert_array_equal(x.to_host(), host)
        np.testing.assert_array_equal(np.asarray(x.to(ignis.asarray(0).device)), host)
        np.testing.assert_array_equal(np.asarray(x.T.to_host()), host.T)  # strided copy out
    z = ignis.asarray(np.complex64(1 - 2j), device=device)
    assert complex(z) == 1 - 2j and z.item() == 1 - 2j and isinstance(z.item(), complex)
    assert "1.-2.j" in repr(z) and "complex64" in repr(z)
    with pytest.raises(TypeError):
        float(z)


def test_astype_to_and_from_complex(device: str, rng) -> None:
    host = _rand(rng, (5,), "complex128")
    x = _nv(host, device)
    np.testing.assert_array_equal(x.astype("complex64").to_host(), host.astype(np.complex64))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        np.testing.assert_array_equal(x.astype("float64").to_host(), host.real)  # NumPy's rule
    np.testing.assert_array_equal(x.astype("bool").to_host(), host != 0)
    r = rng.uniform(-3, 3, 6).astype(np.float32)
    for d in CDTYPES:
        np.testing.assert_array_equal(
            ignis.astype(_nv(r, device), getattr(ignis, d)).to_host(), r.astype(d)
        )
    i = np.arange(-3, 3, dtype=np.int32)
    np.testing.assert_array_equal(_nv(i, device).astype("complex64").to_host(), i.astype("c8"))


def test_indexing_and_setitem(device: str, rng) -> None:
    for d in CDTYPES:
        host = _rand(rng, (6, 5), d)
        x = _nv(host, device)
        np.testing.assert_array_equal(x[1:4, ::2].to_host(), host[1:4, ::2])
        idx = np.array([4, 0, 2])
        np.testing.assert_array_equal(x[ignis.asarray(idx, device=device)].to_host(), host[idx])
        mask = host.real > 0
        np.testing.assert_array_equal(x[ignis.asarray(mask, device=device)].to_host(), host[mask])
        x[0] = 7 - 1j
        x[2, 1:3] = np.array([1j, 2j])
        host[0] = 7 - 1j
        host[2, 1:3] = [1j, 2j]
        np.testing.assert_array_equal(x.to_host(), host)
        y = ignis.zeros((3, 5), dtype=d, device=device)
        y[ignis.asarray([2, 0], device=device)] = x[:2]
        want = np.zeros((3, 5), d)
        want[[2, 0]] = host[:2]
        np.testing.assert_array_equal(y.to_host(), want)
        np.testing.assert_array_equal(ignis.concat([x, x]).to_host(), np.concatenate([host, host]))


# --- element-wise ops -----------------------------------------------------------------------------

_UNARY = sorted(n for n, op in ELEMENTWISE.items() if op.arity == 1 and op.complex)
_BINARY = sorted(n for n, op in ELEMENTWISE.items() if op.arity == 2 and op.complex)
_NP = {
    "asin": np.arcsin,
    "acos": np.arccos,
    "atan": np.arctan,
    "asinh": np.arcsinh,
    "acosh": np.arccosh,
    "atanh": np.arctanh,
    "power": np.power,
    "conj": np.conj,
}


def _np_ref(name: str):
    return _NP.get(name) or getattr(np, name)


def test_the_complex_ops_are_the_standards() -> None:
    assert set(_UNARY) == {
        "abs",
        "acos",
        "acosh",
        "asin",
        "asinh",
        "atan",
        "atanh",
        "conj",
        "cos",
        "cosh",
        "exp",
        "expm1",
        "imag",
        "isfinite",
        "isinf",
        "isnan",
        "log",
        "log10",
        "log1p",
        "log2",
        "negative",
        "positive",
        "real",
        "reciprocal",
        "round",
        "sign",
        "sin",
        "sinh",
        "sqrt",
        "square",
        "tan",
        "tanh",
    }
    assert set(_BINARY) == {"add", "subtract", "multiply", "divide", "power", "equal", "not_equal"}


@pytest.mark.parametrize("dtype", CDTYPES)
@pytest.mark.parametrize("op", _UNARY)
def test_unary_complex_matches_numpy(device: str, op: str, dtype: str, rng) -> None:
    host = _rand(rng, (7, 9), dtype)
    want = _np_ref(op)(host.astype(np.complex128))
    if op == "reciprocal":
        want = 1 / host.astype(np.complex128)
    for layout in ("dense", "strided"):
        x = _nv(host, device)
        h = host
        if layout == "strided":
            x, h = x[::2, ::-3], host[::2, ::-3]
            want_l = _np_ref(op)(h.astype(np.complex128)) if op != "reciprocal" else 1 / h
        else:
            want_l = want
        got = getattr(ignis, op)(x)
        w = np.asarray(want_l)
        if w.dtype.kind == "c":
            assert got.dtype.name == dtype
        elif w.dtype.kind == "f":  # abs, real, imag: the parts' dtype
            assert got.dtype is dt.real_of(dt.as_dtype(dtype))
            w = w.astype(got.dtype.numpy).astype(np.float64)
        else:
            assert got.dtype is ignis.bool_
        host_got = got.to_host()
        if w.dtype == np.bool_:
            np.testing.assert_array_equal(host_got, w)
        else:
            np.testing.assert_allclose(host_got, w, rtol=TOL[dtype] * 5, atol=TOL[dtype])


@pytest.mark.parametrize("dtype", CDTYPES)
def test_unary_special_values(device: str, dtype: str) -> None:
    z = np.array(
        [complex(np.inf, 0), complex(0, np.nan), complex(-0.0, 0.0), complex(np.nan, 1)], dtype
    )
    x = _nv(z, device)
    np.testing.assert_array_equal(ignis.isnan(x).to_host(), np.isnan(z))
    np.testing.assert_array_equal(ignis.isinf(x).to_host(), np.isinf(z))
    np.testing.assert_array_equal(ignis.isfinite(x).to_host(), np.isfinite(z))
    s = ignis.sqrt(_nv(np.array([complex(-0.0, 0.0), complex(-np.inf, 1.0)], dtype), device))
    np.testing.assert_array_equal(s.to_host(), np.array([0j, complex(0, np.inf)], dtype))


@pytest.mark.parametrize("dtype", CDTYPES)
@pytest.mark.parametrize("op", _BINARY)
def test_binary_complex_matches_numpy(device: str, op: str, dtype: str, rng) -> None:
    a, b = _rand(rng, (6, 5), dtype), _rand(rng, (6, 5), dtype)
    if op == "power":
        a = _rand(rng, (6, 5), dtype, 1.0)
        b = _rand(rng, (6, 5), dtype, 1.0)
    fn = getattr(ignis, op)
    ref = _np_ref(op)
    cases = [
        (_nv(a, device), _nv(b, device), a, b),  # two arrays
        (_nv(a, device), _nv(b[0], device), a, b[0]),  # a broadcast row
        (_nv(a, device)[:, ::2][:, :2], _nv(b, device)[:, 1::2], a[:, ::2][:, :2], b[:, 1::2]),
        (_nv(a, device), 0.5 - 1.5j, a, np.complex128(0.5 - 1.5j)),  # a weak complex scalar
        (2.0, _nv(b, device), 2.0, b),  # a weak real scalar
    ]
    for x, y, hx, hy in cases:
        got = fn(x, y)
        want = ref(np.asarray(hx, np.complex128), np.asarray(hy, np.complex128))
        if want.dtype == np.bool_:
            np.testing.assert_array_equal(got.to_host(), want)
        else:
            assert got.dtype.name == dtype
            np.testing.assert_allclose(got.to_host(), want, rtol=TOL[dtype] * 10, atol=TOL[dtype])


def test_mixed_real_and_complex_operands(device: str, rng) -> None:
    z = _rand(rng, (4, 3), "complex64")
    r32 = rng.uniform(-2, 2, (4, 3)).astype(np.float32)
    r64 = rng.uniform(-2, 2, (3,))
    got = _nv(z, device) + _nv(r32, device)
    assert got.dtype is ignis.complex64
    np.testing.assert_allclose(got.to_host(), z + r32, rtol=1e-6)
    got = _nv(z, device) * _nv(r64, device)
    assert got.dtype is ignis.complex128
    np.testing.assert_allclose(got.to_host(), z.astype(np.complex128) * r64, rtol=1e-6)
    got = _nv(r32, device) * 1j
    assert got.dtype is ignis.complex64
    np.testing.assert_allclose(got.to_host(), r32 * 1j)
    i = np.arange(12, dtype=np.int32).reshape(4, 3)
    got = _nv(i, device) - _nv(z, device)
    assert got.dtype is ignis.complex128
    np.testing.assert_allclose(got.to_host(), i - z.astype(np.complex128), rtol=1e-6)


@pytest.mark.parametrize("dtype", CDTYPES)
def test_comparison_with_a_python_complex_is_elementwise(device: str, dtype: str, rng) -> None:
    # == and != with a Python complex compare values, as with a Python float (not identity)
    z = _rand(rng, (5,), dtype)
    s = complex(z[2])
    a = _nv(z, device)
    np.testing.assert_array_equal((a == s).to_host(), z == s)
    np.testing.assert_array_equal((a != s).to_host(), z != s)
    np.testing.assert_array_equal((s == a).to_host(), z == s)
    assert bool((a == s)[2]) and int(ignis.sum(a == s)) == int(np.sum(z == s))


def test_inplace_ops_and_where(device: str, rng) -> None:
    z = _rand(rng, (5,), "complex128")
    x = _nv(z, device)
    x += 1j
    x *= 2.0
    np.testing.assert_allclose(x.to_host(), (z + 1j) * 2)
    r = _nv(rng.uniform(size=5), device)
    with pytest.raises(ignis.DTypeError, match="same_kind"):
        r += x  # a complex result does not fit a real array
    cond = _nv(z.real > 0, device)
    got = ignis.where(cond, x, 0.5j)
    np.testing.assert_allclose(got.to_host(), np.where(z.real > 0, (z + 1j) * 2, 0.5j))


_REAL_ONLY_UNARY = [
    "floor",
    "ceil",
    "trunc",
    "signbit",
    "exp2",
    "rsqrt",
    "sigmoid",
    "relu",
    "erf",
    "logical_not",
    "bitwise_invert",
]
_REAL_ONLY_BINARY = [
    "less",
    "less_equal",
    "greater",
    "greater_equal",
    "maximum",
    "minimum",
    "atan2",
    "remainder",
    "floor_divide",
    "logaddexp",
    "hypot",
    "copysign",
    "nextafter",
    "logical_and",
    "bitwise_and",
]


@pytest.mark.parametrize("op", _REAL_ONLY_UNARY)
def test_real_only_unary_ops_refuse_complex(device: str, op: str) -> None:
    x = ignis.ones(3, dtype="complex64", device=device)
    with pytest.raises(ignis.DTypeError, match=rf"^{op}: .*complex64"):
        getattr(ignis, op)(x)


@pytest.mark.parametrize("op", _REAL_ONLY_BINARY)
def test_real_only_binary_ops_refuse_complex(device: str, op: str) -> None:
    x = ignis.ones(3, dtype="complex64", device=device)
    r = ignis.ones(3, dtype="float32", device=device)
    with pytest.raises(ignis.DTypeError, match=rf"^{op}: .*complex"):
        getattr(ignis, op)(x, r)
    with pytest.raises(ignis.DTypeError, match=rf"^{op}: .*complex"):
        getattr(ignis, op)(r, 1j)


def test_other_real_only_functions_refuse_complex(device: str) -> None:
    x = ignis.ones(4, dtype="complex128", device=device)
    for call, name in [
        (lambda: ignis.clip(x, 0, 1), "clip"),
        (lambda: ignis.max(x), "max"),
        (lambda: ignis.min(x), "min"),
        (lambda: ignis.argmax(x), "argmax"),
        (lambda: ignis.var(x), "var"),
        (lambda: ignis.std(x), "std"),
        (lambda: x < x, "less"),
        (lambda: ignis.sum(x, dtype="float64"), "sum"),
    ]:
        with pytest.raises(ignis.DTypeError, match=rf"^{name}: .*complex"):
            call()
    with pytest.raises(ignis.DTypeError, match="full: cannot store the complex value"):
        ignis.full(2, 1j, dtype="float32", device=device)
    with pytest.raises(
        ignis.DTypeError, match="from_host: cannot store complex values in a float32"
    ):
        ignis.asarray([1 + 2j], dtype="float32", device=device)


# --- reductions -----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", CDTYPES)
@pytest.mark.parametrize("op", ["sum", "prod", "mean"])
def test_complex_reductions(device: str, op: str, dtype: str, rng) -> None:
    host = _rand(rng, (6, 7, 5), dtype, 1.0 if op == "prod" else 2.0)
    x = _nv(host, device)
    for axis in (None, 0, (0, 2), -1):
        got = getattr(ignis, op)(x, axis=axis)
        want = getattr(np, op)(host.astype(np.complex128), axis=axis)
        assert got.dtype.name == dtype
        np.testing.assert_allclose(got.to_host(), want, rtol=TOL[dtype] * 20, atol=TOL[dtype] * 20)
    got = ignis.sum(_nv(host.real.astype(np.float32), device), dtype="complex128")
    assert got.dtype is ignis.complex128
    np.testing.assert_allclose(got.to_host(), host.real.astype(np.float32).sum(), rtol=1e-5)


@pytest.mark.parametrize("dtype", CDTYPES)
def test_complex_all_any(device: str, dtype: str) -> None:
    host = np.array([[1j, 0], [2, 3 + 0j]], dtype)
    x = _nv(host, device)
    np.testing.assert_array_equal(ignis.all(x, axis=1).to_host(), np.all(host, axis=1))
    np.testing.assert_array_equal(ignis.any(x, axis=0).to_host(), np.any(host, axis=0))
    assert not bool(ignis.all(x)) and bool(ignis.any(x))


# --- products -------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", CDTYPES)
def test_complex_matmul(device: str, dtype: str, rng) -> None:
    for sa, sb in [((5, 7), (7, 3)), ((2, 33, 17), (17, 20)), ((4,), (4, 6)), ((3, 4), (4,))]:
        a, b = _rand(rng, sa, dtype), _rand(rng, sb, dtype)
        got = _nv(a, device) @ _nv(b, device)
        want = a.astype(np.complex128) @ b.astype(np.complex128)
        assert got.dtype.name == dtype
        np.testing.assert_allclose(got.to_host(), want, rtol=TOL[dtype] * 50, atol=TOL[dtype] * 50)
    a, b = _rand(rng, (6, 4), dtype), _rand(rng, (6, 5), dtype)
    got = ignis.matmul(_nv(a, device).T, _nv(b, device))  # a transposed view
    np.testing.assert_allclose(got.to_host(), a.T @ b, rtol=TOL[dtype] * 50, atol=TOL[dtype] * 50)
    r = rng.uniform(-1, 1, (4, 3)).astype(np.float32)
    got = _nv(a[:, :4].copy() if a.shape[1] >= 4 else a, device) @ _nv(r, device)
    assert got.dtype.name == dtype


@pytest.mark.parametrize("dtype", CDTYPES)
def test_vecdot_conjugates_the_first_argument(device: str, dtype: str, rng) -> None:
    a, b = _rand(rng, (3, 8), dtype), _rand(rng, (8,), dtype)
    got = ignis.vecdot(_nv(a, device), _nv(b, device))
    want = np.sum(np.conj(a.astype(np.complex128)) * b, axis=-1)
    np.testing.assert_allclose(got.to_host(), want, rtol=TOL[dtype] * 20, atol=TOL[dtype] * 20)
    got = ignis.linalg.vecdot(_nv(a, device), _nv(b, device))
    np.testing.assert_allclose(got.to_host(), want, rtol=TOL[dtype] * 20, atol=TOL[dtype] * 20)


# --- DLPack ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", CDTYPES)
def test_dlpack_with_numpy(dtype: str, rng) -> None:
    host = _rand(rng, (3, 4), dtype)
    x = ignis.asarray(host, device="cpu", copy=True)
    back = np.from_dlpack(x)
    assert back.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(back, host)
    y = ignis.from_dlpack(host)
    assert y.dtype.name == dtype
    np.testing.assert_array_equal(y.to_host(), host)
    np.testing.assert_array_equal(np.from_dlpack(x.T), host.T)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", CDTYPES)
def test_dlpack_with_torch_and_cupy_on_cuda(dtype: str, rng) -> None:
    if not ignis.is_available():
        pytest.skip("needs a CUDA GPU")
    host = _rand(rng, (3, 4), dtype)
    x = ignis.asarray(host, device="cuda:0")
    tried = False
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        tried = True
        t = torch.from_dlpack(x)
        assert t.dtype == {"complex64": torch.complex64, "complex128": torch.complex128}[dtype]
        np.testing.assert_array_equal(t.cpu().numpy(), host)
        back = ignis.from_dlpack(t * 2)
        assert back.dtype.name == dtype
        np.testing.assert_allclose(back.to_host(), host * 2)
    try:
        import cupy
    except ImportError:
        cupy = None
    if cupy is not None:
        tried = True
        c = cupy.from_dlpack(x)
        assert c.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(cupy.asnumpy(c), host)
        back = ignis.asarray(c * 2)  # through __cuda_array_interface__ or DLPack
        assert back.dtype.name == dtype
        np.testing.assert_allclose(back.to_host(), host * 2)
    if not tried:
        pytest.skip("neither torch nor cupy is installed")


# --- linalg (CPU: numpy.linalg) -------------------------------------------------------------------


@pytest.mark.parametrize("dtype", CDTYPES)
def test_complex_linalg_on_the_cpu(dtype: str, rng) -> None:
    a = _rand(rng, (2, 4, 4), dtype, 1.0)
    h = (a @ np.conj(np.swapaxes(a, -1, -2)) + 4 * np.eye(4)).astype(dtype)  # Hermitian PD
    x, hx = ignis.asarray(a, device="cpu"), ignis.asarray(h, device="cpu")
    L = ignis.linalg
    tol = 1e-4 if dtype == "complex64" else 1e-10
    real = "float32" if dtype == "complex64" else "float64"

    def check(got, want, kind=dtype):
        assert got.dtype.name == kind
        np.testing.assert_allclose(got.to_host(), want, rtol=tol, atol=tol)

    check(L.inv(x), np.linalg.inv(a))
    check(L.det(x), np.linalg.det(a))
    sign, logabs = L.slogdet(x)
    ws, wl = np.linalg.slogdet(a)
    check(sign, ws)
    check(logabs, wl, real)
    check(L.solve(x, ignis.asarray(a[0, :, 0], device="cpu")), np.linalg.solve(a, a[0, :, 0]))
    low = np.linalg.cholesky(h)
    check(L.cholesky(hx), low)
    check(L.cholesky(hx, upper=True), np.conj(np.swapaxes(low, -1, -2)))
    w, v = L.eigh(hx)
    check(w, np.linalg.eigvalsh(h), real)
    # the eigenvectors rebuild h: v diag(w) v^H
    check((v * w.astype(dtype).unsqueeze(-2)) @ ignis.conj(v.swapaxes(-1, -2)), h)
    check(L.eigvalsh(hx), np.linalg.eigvalsh(h), real)
    check(L.svdvals(x), np.linalg.svd(a, compute_uv=False), real)
    u, s, vh = L.svd(x, full_matrices=False)
    check((u * s.astype(dtype).unsqueeze(-2)) @ vh, a)
    q, r = L.qr(x)
    check(q @ r, a)
    check(L.pinv(x), np.linalg.pinv(a))
    assert L.matrix_rank(x).to_host().tolist() == [4, 4]
    check(L.matrix_power(x, -2), np.linalg.matrix_power(a, -2))
    check(L.vector_norm(x, axis=(-2, -1)), np.linalg.norm(a.reshape(2, -1), axis=-1), real)
    for ord_ in ("fro", "nuc", 1, -1, 2, np.inf):
        check(L.matrix_norm(x, ord=ord_), np.linalg.norm(a, ord=ord_, axis=(-2, -1)), real)
    check(L.trace(x), np.trace(a, axis1=-2, axis2=-1))
    check(L.outer(x[0, 0], x[0, 1]), np.outer(a[0, 0], a[0, 1]))
    check(L.cross(x[0, 0, :3], x[0, 1, :3]), np.cross(a[0, 0, :3], a[0, 1, :3]))


@pytest.mark.gpu
def test_complex_factorizations_on_the_gpu(device: str, rng) -> None:
    # (every function on every device: tests/ignis/array/test_linalg_complex.py)
    if device == "cpu":
        pytest.skip("the GPU path")
    from ignis import _cusolver

    if _cusolver.load() is None:
        pytest.skip(f"cuSOLVER is not installed ({_cusolver.unavailable_reason()})")
    a = _rand(rng, (3, 3), "complex64", 1.0) + 3 * np.eye(3, dtype="complex64")
    x = ignis.asarray(a, device=device)
    want = np.linalg.inv(a.astype(np.complex128)).astype("complex64")
    _close(ignis.linalg.inv(x), want, "complex64", 1e-4)
    np.testing.assert_allclose(ignis.linalg.vector_norm(x).to_host(), np.linalg.norm(a), rtol=1e-5)
