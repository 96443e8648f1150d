"""ignis.ElementwiseKernel: CuPy's parameter grammar, type placeholders, broadcasting, strided
and foreign arrays, outputs allocated or given, raw parameters, errors naming the kernel and
the parameter; every generated specialization compiles with NVRTC (no GPU needed); on a GPU the
values match NumPy and CuPy's own documentation examples match CuPy."""

from __future__ import annotations

import numpy as np
import pytest

import ignis
from ignis import CompileOptions, DTypeError, ElementwiseKernel, IgnisError, ShapeError

GPU = pytest.mark.gpu


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)


def _needs_gpu():
    if not ignis.is_available():
        pytest.skip("needs a CUDA GPU")


# --- declaration -------------------------------------------------------------------------------


def test_parameters_parse_with_cupys_grammar() -> None:
    k = ElementwiseKernel("float32 x, T y, raw T t, double d", "T z, int32 n", "z = x", "k")
    assert [(p.name, p.dtype, p.placeholder, p.raw) for p in k.in_params] == [
        ("x", ignis.float32, None, False),
        ("y", None, "T", False),
        ("t", None, "T", True),
        ("d", ignis.float64, None, False),
    ]
    assert [(p.name, p.dtype, p.is_output) for p in k.out_params] == [
        ("z", None, True),
        ("n", ignis.int32, True),
    ]


@pytest.mark.parametrize(
    ("ins", "outs", "message"),
    [
        ("float32", "float32 z", r"cannot parse the parameter 'float32' of in_params"),
        ("float32 x y", "float32 z", r"cannot parse the parameter 'float32 x y'"),
        ("float32 x", "", r"out_params declares no output"),
        ("float32 x, float32 x", "float32 z", r"parameter 'x' is declared twice"),
        ("float32 i", "float32 z", r"the parameter name 'i' of in_params is reserved"),
    ],
)
def test_bad_declarations_name_the_kernel_and_the_parameter(ins, outs, message) -> None:
    with pytest.raises(ValueError, match=r"ElementwiseKernel 'bad': " + message):
        ElementwiseKernel(ins, outs, "z = x", "bad")


def test_a_cpu_call_says_a_cuda_device_is_needed() -> None:
    k = ElementwiseKernel("T x", "T z", "z = x * 2", "twice")
    with pytest.raises(
        IgnisError, match=r"ElementwiseKernel 'twice': argument 'x' is on cpu; .*CUDA device"
    ):
        k(ignis.ones(3, device="cpu"))


def test_wrong_argument_counts_and_kinds() -> None:
    k = ElementwiseKernel("T x, T y", "T z", "z = x + y", "add2")
    with pytest.raises(
        TypeError, match=r"'add2': takes 2 inputs \(and optionally its 1 outputs\), got 1"
    ):
        k(ignis.ones(2, device="cpu"))
    with pytest.raises(
        TypeError, match=r"'add2': argument 'y' must be an array or a scalar, got list"
    ):
        k(ignis.ones(2, device="cpu"), [1, 2])


# --- generated code compiles (no GPU needed) ---------------------------------------------------

SPECS = [
    (
        "float32 x, float32 y",
        "float32 z",
        "z = (x - y) * (x - y)",
        {"x": "float32", "y": "float32", "z": "float32"},
    ),
    ("T x, T y", "T z", "z = x * y + (T)i", {"x": "float64", "y": "float64", "z": "float64"}),
    (
        "T x, raw T t",
        "T z",
        "z = x + t[(i + 1) % t.size()] + _ind.size()",
        {"x": "float16", "t": "float16", "z": "float16"},
    ),
    ("T x", "T z", "z = x * x", {"x": "bfloat16", "z": "bfloat16"}),
    ("T x, T s", "T z", "z = x * s", {"x": "complex64", "s": "complex64", "z": "complex64"}),
    (
        "int64 x, bool m",
        "int64 z, bool any",
        "z = m ? x : -x; any = m",
        {"x": "int64", "m": "bool", "z": "int64", "any": "bool"},
    ),
]


@pytest.mark.parametrize("nd", [0, 1, 3])
@pytest.mark.parametrize(("ins", "outs", "op", "types"), SPECS, ids=[s[2] for s in SPECS])
def test_every_specialization_compiles(ins, outs, op, types, nd) -> None:
    k = ElementwiseKernel(ins, outs, op, "spec", preamble="// user preamble")
    typed = {name: ignis._dtypes.as_dtype(d) for name, d in types.items()}
    params = k.in_params + k.out_params
    arrays = [not (p.name == "s") for p in params]  # 's' passed as a scalar
    src = k.source(typed, arrays, nd)
    assert "// user preamble" in src and op in src
    code = ignis.compile(src, CompileOptions(arch="sm_90"))
    assert code.kind == "cubin"


# --- on a GPU ----------------------------------------------------------------------------------


@GPU
def test_values_match_numpy_for_every_dtype(rng) -> None:
    _needs_gpu()
    k = ElementwiseKernel("T x, T y", "T z", "z = x * y + x", "mul_add")
    for d in (
        "int8",
        "int32",
        "int64",
        "uint16",
        "float16",
        "bfloat16",
        "float32",
        "float64",
        "complex64",
        "complex128",
    ):
        dtype = ignis._dtypes.as_dtype(d)
        if dtype.kind == "c":
            a = rng.standard_normal((5, 7)) + 1j * rng.standard_normal((5, 7))
            b = rng.standard_normal((5, 7)) + 1j * rng.standard_normal((5, 7))
        elif dtype.kind == "f":
            a, b = rng.standard_normal((5, 7)), rng.standard_normal((5, 7))
        else:
            a, b = rng.integers(0, 9, (5, 7)), rng.integers(0, 9, (5, 7))
        x = ignis.asarray(a, dtype=d, device="cuda:0")
        y = ignis.asarray(b, dtype=d, device="cuda:0")
        z = k(x, y)
        assert z.dtype == dtype and z.shape == (5, 7)
        xh, yh = (
            x.to_host().astype(np.complex128 if dtype.kind == "c" else np.float64),
            y.to_host().astype(np.complex128 if dtype.kind == "c" else np.float64),
        )
        want = xh * yh + xh
        tol = {"float16": 5e-3, "bfloat16": 3e-2}.get(d, 1e-6)
        np.testing.assert_allclose(
            z.to_host().astype(want.dtype),
            want.astype(z.to_host().dtype).astype(want.dtype),
            rtol=tol,
            atol=tol,
        )


@GPU
@pytest.mark.parametrize("n", [1, 255, 256, 1023, 1024, 1025, 4097, 1_000_003])
def test_contiguous_kernels_cover_every_element_of_the_unrolled_tiles(rng, n) -> None:
    # contiguous operands run 4 elements a thread: every tile edge, the index i, a complex
    # scalar, and an output that is also the input (k(x, x) in place)
    _needs_gpu()
    k = ElementwiseKernel("T x, float64 s", "T y", "y = x * (T)s + (T)i", "scaled_plus_index")
    a = rng.standard_normal(n)
    x = ignis.asarray(a, dtype="float64", device="cuda:0")
    np.testing.assert_allclose(k(x, 1.5).to_host(), a * 1.5 + np.arange(n), rtol=1e-12)
    k(x, -2.0, x)
    np.testing.assert_allclose(x.to_host(), a * -2.0 + np.arange(n), rtol=1e-12)
    kc = ElementwiseKernel("T z, T w", "T y", "y = z * w", "complex_scale")
    zc = rng.standard_normal(n) + 1j * rng.standard_normal(n)
    z = ignis.asarray(zc, dtype="complex64", device="cuda:0")
    np.testing.assert_allclose(
        kc(z, 1 - 2j).to_host(), (zc.astype(np.complex64) * (1 - 2j)), rtol=1e-5, atol=1e-6
    )


@GPU
def test_broadcasting_strides_scalars_and_given_outputs(rng) -> None:
    _needs_gpu()
    k = ElementwiseKernel("T x, T y, float64 s", "T z", "z = x * s - y", "axpy_like")
    a = rng.standard_normal((4, 1, 6))
    b = rng.standard_normal((3, 1))
    x = ignis.asarray(a, device="cuda:0")
    y = ignis.asarray(b, device="cuda:0")
    z = k(x, y, 2.5)
    # (rtol: the kernel may fuse the multiply-add, which NumPy rounds twice)
    np.testing.assert_allclose(z.to_host(), a * 2.5 - b, rtol=1e-12, atol=1e-15)
    # strided views and a given (strided) output
    big = ignis.asarray(rng.standard_normal((8, 12)), device="cuda:0")
    v = big[::2, 1::3]
    out = ignis.zeros((8, 12), dtype="float64", device="cuda:0")[1::2, ::3]
    r = k(v, v.T.T, -1.0, out)
    assert r is out
    np.testing.assert_allclose(out.to_host(), big.to_host()[::2, 1::3] * -2.0, rtol=1e-12)
    # a mismatched output shape is an error naming the output
    with pytest.raises(
        ShapeError, match=r"'axpy_like': output 'z' has shape \(2,\), expected \(4, 3, 6\)"
    ):
        k(x, y, 1.0, ignis.zeros(2, dtype="float64", device="cuda:0"))
    with pytest.raises(ShapeError, match=r"'axpy_like': the input shapes .* do not broadcast"):
        k(x, ignis.ones((5,), dtype="float64", device="cuda:0"), 1.0)


@GPU
def test_placeholders_bind_and_conflict() -> None:
    _needs_gpu()
    k = ElementwiseKernel("T x, T y", "U z", "z = x + y", "pair")
    with pytest.raises(DTypeError, match=r"'pair': cannot resolve the type placeholder U of 'z'"):
        k(ignis.ones(2, device="cuda:0"), 1.0)
    out = ignis.zeros(2, dtype="float64", device="cuda:0")
    np.testing.assert_array_equal(k(ignis.ones(2, device="cuda:0"), 2.0, out).to_host(), [3.0, 3.0])
    with pytest.raises(
        DTypeError, match=r"'pair': type placeholder T is float32 .* but float64 for 'y'"
    ):
        k(ignis.ones(2, device="cuda:0"), ignis.ones(2, dtype="float64", device="cuda:0"))


@GPU
def test_raw_parameters_index_and_size(rng) -> None:
    _needs_gpu()
    k = ElementwiseKernel("raw T x", "T y", "y = x[_ind.size() - 1 - i] + (T)x.size()", "reverse")
    a = rng.standard_normal(10)
    y = ignis.zeros(10, dtype="float64", device="cuda:0")
    k(ignis.asarray(a, device="cuda:0"), y)
    np.testing.assert_allclose(y.to_host(), a[::-1] + 10.0)
    n = ElementwiseKernel("", "int64 y", "y = i * i", "squares")
    np.testing.assert_array_equal(n(size=6).to_host(), np.arange(6) ** 2)


@GPU
def test_foreign_arrays_and_streams(rng) -> None:
    _needs_gpu()
    torch = pytest.importorskip("torch")
    k = ElementwiseKernel("float32 x", "float32 y", "y = x * 3.0f", "triple")
    t = torch.arange(8, dtype=torch.float32, device="cuda")
    out = torch.zeros(8, dtype=torch.float32, device="cuda")
    s = ignis.Stream()
    k(t, out, stream=s)
    s.synchronize()
    np.testing.assert_array_equal(out.cpu().numpy(), np.arange(8) * 3.0)


@GPU
def test_cupys_documentation_examples_match_cupy(rng) -> None:
    _needs_gpu()
    cp = pytest.importorskip("cupy")
    # https://docs.cupy.dev/en/stable/user_guide/kernel.html (the examples, reproduced)
    src = ("float32 x, float32 y", "float32 z", "z = (x - y) * (x - y)", "squared_diff")
    ours, theirs = ElementwiseKernel(*src), cp.ElementwiseKernel(*src)
    a = rng.standard_normal((2, 5)).astype(np.float32)
    b = rng.standard_normal(5).astype(np.float32)
    got = ours(ignis.asarray(a, device="cuda:0"), ignis.asarray(b, device="cuda:0"))
    np.testing.assert_allclose(
        got.to_host(), cp.asnumpy(theirs(cp.asarray(a), cp.asarray(b))), rtol=1e-6
    )
    generic = ("T x, T y", "T z", "z = (x - y) * (x - y)", "squared_diff_generic")
    g_ours, g_theirs = ElementwiseKernel(*generic), cp.ElementwiseKernel(*generic)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    np.testing.assert_allclose(
        g_ours(ignis.asarray(a64, device="cuda:0"), ignis.asarray(b64, device="cuda:0")).to_host(),
        cp.asnumpy(g_theirs(cp.asarray(a64), cp.asarray(b64))),
        rtol=1e-15,
    )
    raw = ("T x, raw T y", "T z", "z = x + y[_ind.size() - i - 1]", "add_reverse")
    r_ours, r_theirs = ElementwiseKernel(*raw), cp.ElementwiseKernel(*raw)
    v, w = rng.standard_normal(9), rng.standard_normal(9)
    np.testing.assert_allclose(
        r_ours(ignis.asarray(v, device="cuda:0"), ignis.asarray(w, device="cuda:0")).to_host(),
        cp.asnumpy(r_theirs(cp.asarray(v), cp.asarray(w))),
        rtol=1e-15,
    )
