"""ignis.fuse: traced element-wise chains (and a trailing reduction) as one kernel.

CPU: the fused function gives the unfused ops' values (checked against NumPy in float64), the
generated CUDA source of each specialization compiles with NVRTC for sm_80 and sm_90a (forward
and backward), the stand-in driver sees one launch with the expected arguments, and bad input
is refused with errors that name the fused function. GPU: values against NumPy for every
dtype, broadcasting and non-contiguous inputs, one launch for a six-op chain, reductions.
"""

from __future__ import annotations

import math
import os
import struct
import sys

import numpy as np
import pytest

import ignis
from ignis import CompileOptions, DTypeError, ShapeError

GPU = pytest.mark.gpu
_RUNTIME_TESTS = os.path.join(os.path.dirname(__file__), "runtime")


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)


def gelu_chain(x):
    return 0.5 * x * (1.0 + ignis.tanh(0.79788456 * (x + 0.044715 * x * x * x)))


def gelu_ref(x):
    return 0.5 * x * (1.0 + np.tanh(0.79788456 * (x + 0.044715 * x * x * x)))


gelu = ignis.fuse(gelu_chain)


@ignis.fuse
def axpy(a, x, y):
    return a * x + y


@ignis.fuse(kernel_name="clipped_exp")
def clipped_exp(x, lo):
    return ignis.where(x > lo, ignis.exp(x - lo), 0.0).astype("float32")


@ignis.fuse
def sq_dist(x, y):
    d = x - y
    return ignis.sum(d * d, axis=1)


@ignis.fuse
def two_out(x, y):
    return x * y, ignis.maximum(x, y) + 1


@ignis.fuse
def int_chain(x, y):
    return (x * 3 + y) // 2 - (x & 5)


# --- CPU: values --------------------------------------------------------------------------------


def test_cpu_gelu_matches_numpy_and_the_unfused_ops(rng) -> None:
    h = rng.standard_normal((5, 7))
    x = ignis.asarray(h)
    out = gelu(x)
    np.testing.assert_allclose(out.to_host(), gelu_ref(h), rtol=1e-12)
    np.testing.assert_array_equal(out.to_host(), gelu_chain(x).to_host())


def test_cpu_scalars_broadcasting_where_astype_and_several_results(rng) -> None:
    ha, hb = rng.standard_normal((4, 1)), rng.standard_normal((1, 6))
    a, b = ignis.asarray(ha), ignis.asarray(hb)
    np.testing.assert_allclose(axpy(2.5, a, b).to_host(), 2.5 * ha + hb, rtol=1e-12)
    got = clipped_exp(a, -0.25)
    assert got.dtype == ignis.float32
    want = np.where(ha > -0.25, np.exp(ha + 0.25), 0.0)
    np.testing.assert_allclose(got.to_host(), want, rtol=1e-6)
    p, q = two_out(a, b)
    np.testing.assert_allclose(p.to_host(), ha * hb, rtol=1e-12)
    np.testing.assert_allclose(q.to_host(), np.maximum(ha, hb) + 1, rtol=1e-12)


def test_cpu_integers_and_a_trailing_reduction(rng) -> None:
    hx = rng.integers(-50, 50, (3, 8)).astype(np.int32)
    hy = rng.integers(-50, 50, (3, 8)).astype(np.int32)
    got = int_chain(ignis.asarray(hx), ignis.asarray(hy))
    assert got.dtype == ignis.int32
    np.testing.assert_array_equal(got.to_host(), (hx * 3 + hy) // 2 - (hx & 5))
    fx, fy = rng.standard_normal((3, 8)), rng.standard_normal((3, 8))
    np.testing.assert_allclose(
        sq_dist(ignis.asarray(fx), ignis.asarray(fy)).to_host(), ((fx - fy) ** 2).sum(1)
    )


def test_traced_dtypes_follow_the_ops_rules() -> None:
    # float16 with a Python float stays float16; int8 / int8 is float64 (true division)
    half = ignis.fuse(lambda x: x * 0.5 + 1)
    assert half.program((ignis.zeros((3,), dtype="float16"),)).spec.out_dtypes == [ignis.float16]
    div = ignis.fuse(lambda x, y: x / y)
    i8 = ignis.zeros((3,), dtype="int8")
    assert div.program((i8, i8)).spec.out_dtypes == [ignis.float64]
    mixed = ignis.fuse(lambda x, y: x + y)
    f32 = ignis.zeros((3,), dtype="float32")
    assert mixed.program((f32, np.float64(2.0))).spec.out_dtypes == [ignis.float64]
    assert mixed.program((f32, 2.0)).spec.out_dtypes == [ignis.float32]


def test_a_specialization_is_traced_once() -> None:
    calls = []

    @ignis.fuse
    def f(x, s):
        calls.append(1)
        return x * s

    x = ignis.zeros((4,))
    f.program((x, 1.0))
    f.program((x, 2.0))  # another value: the same kernel (a parameter)
    assert len(calls) == 1
    f.program((ignis.zeros((5,)), 1.0))  # another shape
    f.program((x, 1))  # another Python type
    assert len(calls) == 3


# --- CPU: generated source compiles ----------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("nd", [0, 2])
def test_the_chain_source_compiles(dtype, arch, nd) -> None:
    spec = ((64, 32), dtype)
    src = gelu.source(spec, nd=nd)
    assert "ignis::ew::op_tanh" in src and "fused_gelu_chain" in src
    assert ignis.compile(src, CompileOptions(arch=arch)).kind == "cubin"
    back = gelu.source(spec, grad=True, nd=nd)
    assert "fused_gelu_chain_backward" in back
    assert ignis.compile(back, CompileOptions(arch=arch)).kind == "cubin"


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_every_kind_of_specialization_compiles(arch) -> None:
    opts = CompileOptions(arch=arch)
    f32, i32 = ((8, 16), "float32"), ((8, 16), "int32")
    sources = [
        axpy.source(2.0, f32, ((1, 16), "float32"), nd=2),
        axpy.source(np.float16(2.0), ((8, 16), "float16"), ((8, 16), "float16")),
        clipped_exp.source(((8, 16), "bfloat16"), -1.0),
        two_out.source(f32, f32),
        int_chain.source(i32, i32),
        sq_dist.source(f32, f32),
        sq_dist.source(((8, 16), "float16"), ((8, 16), "float16"), grad=True),
        ignis.fuse(lambda x: ignis.max(ignis.abs(x), axis=0)).source(((8, 16), "bfloat16")),
        ignis.fuse(lambda x, s: (x * s).mean(axis=-1)).source(f32, 3.0),
        ignis.fuse(lambda x: ignis.gelu(x, approximate="tanh") + x.isnan()).source(f32),
        ignis.fuse(lambda x: x * math.inf + float("nan")).source(f32),
    ]
    for src in sources:
        assert ignis.compile(src, opts).kind == "cubin"


def test_constants_are_exact_in_the_source() -> None:
    src = ignis.fuse(lambda x: x * 0.1 + math.inf).source(((4,), "float64"))
    assert "((double)0.1)" in src
    bits = struct.unpack("<q", struct.pack("<d", math.inf))[0]
    assert f"__longlong_as_double({bits}LL)" in src


# --- stand-in driver -----------------------------------------------------------------------------


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch):
    if _RUNTIME_TESTS not in sys.path:
        sys.path.insert(0, _RUNTIME_TESTS)
    import fake_gpu

    gpu = fake_gpu.install(monkeypatch)
    yield gpu
    fake_gpu.uninstall()


def _i64(b: bytes) -> int:
    return struct.unpack("<q", b)[0]


def test_one_launch_with_the_pointers_the_scalar_and_the_count(fake) -> None:
    n = 3000
    x = ignis.empty((n,), dtype="float32", device="cuda:0")
    y = ignis.empty((n,), dtype="float32", device="cuda:0")
    before = len(fake.launches)
    out = axpy(2.5, x, y)
    launches = fake.launches[before:]
    assert len(launches) == 1
    name, grid, block, _, args = launches[0]
    # (contiguous operands: 256 threads a block, 4 elements a thread)
    assert name == "fused_axpy" and block == (256, 1, 1) and grid == (math.ceil(n / 1024), 1, 1)
    # (a, x, y, out, n): the scalar as a double, the pointers, the element count
    assert struct.unpack("<d", args[0])[0] == 2.5
    assert [_i64(a) for a in args[1:4]] == [
        x._storage.ptr + x._offset,
        y._storage.ptr + y._offset,
        out._storage.ptr + out._offset,
    ]
    assert _i64(args[4]) == n and out.shape == (n,) and out.dtype == ignis.float32


def test_a_broadcast_call_passes_the_merged_shape_and_strides(fake) -> None:
    x = ignis.empty((4, 6), dtype="float32", device="cuda:0")
    row = ignis.empty((6,), dtype="float32", device="cuda:0")
    before = len(fake.launches)
    out = axpy(1.0, x, row)
    ((name, _, _, _, args),) = fake.launches[before:]
    assert name == "fused_axpy" and out.shape == (4, 6)
    # n, the shape (4, 6), then element strides of x, row and out per dimension
    assert [_i64(a) for a in args[4:]] == [24, 4, 6, 6, 1, 0, 1, 6, 1]


def test_a_trailing_reduction_is_one_reduction_kernel(fake) -> None:
    x = ignis.empty((16, 300), dtype="float32", device="cuda:0")
    before = len(fake.launches)
    out = sq_dist(x, x)
    names = [launch[0] for launch in fake.launches[before:]]
    assert names == ["fused_sq_dist"] and out.shape == (16,)


# --- errors --------------------------------------------------------------------------------------


def test_an_op_that_is_not_element_wise_is_refused_naming_the_function() -> None:
    x = ignis.zeros((3, 3))
    for body, what in [
        (lambda a: ignis.matmul(a, a), "matmul"),
        (lambda a: a @ a, "matmul"),
        (lambda a: a.reshape(9), "reshape"),
        (lambda a: a[0], "indexing"),
        (lambda a: ignis.softmax(a, axis=0), "softmax"),
        (lambda a: ignis.prod(a, axis=0), "prod"),
    ]:
        f = ignis.fuse(body)
        with pytest.raises(TypeError, match=rf"fuse\(.*<lambda>\): {what} cannot be fused"):
            f(x)
    with pytest.raises(TypeError, match=r"fuse\(.*\): bool\(\) needs the values"):
        ignis.fuse(lambda a: a if a > 0 else -a)(x)
    with pytest.raises(ValueError, match=r"fuse\(.*\): add is applied to the result of sum"):
        ignis.fuse(lambda a: a.sum(axis=0) + 1)(x)


def test_mismatched_shapes_name_the_function() -> None:
    with pytest.raises(ShapeError, match=r"fuse\(axpy\): multiply: shapes \(3,\) and \(4,\)"):
        axpy(ignis.zeros((3,)), ignis.zeros((4,)), 1.0)
    with pytest.raises(ShapeError, match=r"fuse\(two_out\)|cannot be broadcast"):
        two_out(ignis.zeros((2, 3)), ignis.zeros((4, 1)))


def test_unsupported_arguments_name_the_function() -> None:
    x = ignis.zeros((3,))
    with pytest.raises(TypeError, match=r"fuse\(axpy\): argument 0 is a list"):
        axpy([1.0], x, x)
    with pytest.raises(TypeError, match=r"argument 1 is a ndarray.*ignis.asarray"):
        axpy(1.0, np.zeros(3), x)
    with pytest.raises(TypeError, match=r"fuse\(axpy\): argument 2 is a str"):
        axpy(1.0, x, "y")
    with pytest.raises(DTypeError, match=r"fuse\(axpy\): argument 0 is complex"):
        axpy(1j, x, x)
    with pytest.raises(DTypeError, match=r"fuse\(gelu_chain\): argument 0 is complex64"):
        gelu(ignis.zeros((3,), dtype="complex64"))
    with pytest.raises(TypeError, match=r"fuse\(axpy\): keyword arguments are not fused"):
        axpy(1.0, x, y=x)
    with pytest.raises(TypeError, match=r"fuse\(axpy\): needs at least one NvArray"):
        axpy(1.0, 2.0, 3.0)
    captured = ignis.zeros((3,))
    with pytest.raises(TypeError, match=r"fuse\(.*\): add got an NvArray the function did not"):
        ignis.fuse(lambda a: a + captured)(x)
    with pytest.raises(TypeError, match=r"fuse\(.*\): result 0 is a float"):
        ignis.fuse(lambda a: 1.0)(x)
    with pytest.raises(ValueError, match=r"kernel_name must be a C identifier"):
        ignis.fuse(kernel_name="not a name")(gelu_chain)
    with pytest.raises(ShapeError, match=r"fuse\(.*\): results of shapes"):
        ignis.fuse(lambda a, b: (a + 1, a + b))(ignis.zeros((3, 1)), ignis.zeros((3, 4)))


def test_op_errors_inside_name_the_function() -> None:
    with pytest.raises(DTypeError, match=r"fuse\(.*\): sqrt|fuse\(.*\).*bool"):
        ignis.fuse(lambda a: ignis.negative(a))(ignis.zeros((3,), dtype="bool"))
    with pytest.raises(OverflowError, match=r"fuse\(.*\): .*300 is out of bounds for uint8"):
        ignis.fuse(lambda a: a + 300)(ignis.zeros((3,), dtype="uint8"))


# --- GPU -----------------------------------------------------------------------------------------

TOL = {"float64": 1e-12, "float32": 2e-6, "float16": 2e-3, "bfloat16": 1.6e-2}


def _needs_gpu() -> None:
    if not ignis.is_available():
        pytest.skip("needs a CUDA GPU")


@GPU
@pytest.mark.parametrize("dtype", ["float64", "float32", "float16", "bfloat16"])
def test_gpu_gelu_chain_matches_numpy(rng, dtype) -> None:
    _needs_gpu()
    h = rng.standard_normal((1000, 37))
    x = ignis.asarray(h, device="cuda:0").astype(dtype)
    ref = gelu_ref(x.astype("float64").to_host())
    got = gelu(x)
    assert got.dtype == x.dtype
    np.testing.assert_allclose(got.astype("float64").to_host(), ref, rtol=TOL[dtype],
                               atol=TOL[dtype])  # fmt: skip
    # the unfused chain on the GPU rounds the same way
    np.testing.assert_allclose(got.astype("float64").to_host(),
                               gelu_chain(x).astype("float64").to_host(),
                               rtol=TOL[dtype], atol=TOL[dtype])  # fmt: skip


@GPU
def test_gpu_integers_broadcasting_and_non_contiguous_inputs(rng) -> None:
    _needs_gpu()
    hx = rng.integers(-99, 99, (30, 40)).astype(np.int64)
    hy = rng.integers(-99, 99, (40,)).astype(np.int64)
    got = int_chain(ignis.asarray(hx, device="cuda:0"), ignis.asarray(hy, device="cuda:0"))
    np.testing.assert_array_equal(got.to_host(), (hx * 3 + hy) // 2 - (hx & 5))
    ha = rng.standard_normal((40, 30)).astype(np.float32)
    hb = rng.standard_normal((30, 1)).astype(np.float32)
    a = ignis.asarray(ha, device="cuda:0").T  # non-contiguous (30, 40)
    b = ignis.asarray(hb, device="cuda:0")
    np.testing.assert_allclose(axpy(1.5, a, b).to_host(), 1.5 * ha.T.astype(np.float64) + hb,
                               rtol=2e-6, atol=2e-6)  # fmt: skip
    w = clipped_exp(a, 0.25)
    want = np.where(ha.T > 0.25, np.exp(ha.T.astype(np.float64) - 0.25), 0.0)
    np.testing.assert_allclose(w.to_host(), want, rtol=2e-6, atol=1e-7)


@GPU
def test_gpu_six_op_chain_is_one_launch(rng) -> None:
    _needs_gpu()
    x = ignis.asarray(rng.standard_normal(1 << 16).astype(np.float32), device="cuda:0")
    gelu(x)  # traced and compiled outside the profile
    with ignis.profile() as prof:
        gelu(x)
    ignis.synchronize()
    assert [e.name for e in prof.events] == ["fused_gelu_chain"]


@GPU
@pytest.mark.parametrize("op", ["sum", "mean", "max", "min"])
def test_gpu_trailing_reductions_match_numpy(rng, op) -> None:
    _needs_gpu()
    hx = rng.standard_normal((33, 500)).astype(np.float32)
    f = ignis.fuse(lambda x, s: getattr(ignis, op)(ignis.exp(x * s), axis=1))
    got = f(ignis.asarray(hx, device="cuda:0"), 0.5)
    want = getattr(np, op)(np.exp(hx.astype(np.float64) * 0.5), axis=1)
    np.testing.assert_allclose(got.to_host(), want, rtol=1e-5)
    two = ignis.fuse(lambda x: ignis.sum(x * x, axis=(0, 2), keepdims=True))
    h3 = rng.standard_normal((4, 5, 6)).astype(np.float16)
    got3 = two(ignis.asarray(h3, device="cuda:0"))
    want3 = (h3.astype(np.float64) ** 2).sum(axis=(0, 2), keepdims=True)
    np.testing.assert_allclose(got3.astype("float64").to_host(), want3, rtol=2e-3)
