"""ignis.RawModule: CuPy's constructor and errors, templates through name_expressions (NVRTC
lowered names) compiled for sm_80 and sm_90a, .cu/.ptx/.cubin files; on the stand-in GPU the
functions and globals of one module come from ONE loaded module (loaded once, unloaded once
with the last user) and the launches carry the packed arguments; on a GPU a ``__constant__``
written through get_global is what the module's kernels read, and CuPy's documentation
examples match CuPy."""

from __future__ import annotations

import gc
import struct
import sys
import types
from pathlib import Path

import ignis._kernel as kernel_module
import numpy as np
import pytest
from ignis._bindings import cu
from ignis._errors import CudaError
from ignis._raw_module import _untyped_arg

import ignis
from ignis import CompileOptions, LaunchError, NoDeviceError, RawModule

sys.path.insert(0, str(Path(__file__).resolve().parent / "array"))
from array_helpers import arg_ptr, stand_in_gpu  # noqa: E402

GPU = pytest.mark.gpu
_REAL_LOAD = kernel_module._Loaded.__dict__["load"]

TEMPLATES = r"""
template <typename T>
__global__ void fx3(T* arr, int N) {
    unsigned int tid = blockIdx.x * blockDim.x + threadIdx.x;
    if (tid < N) { arr[tid] = arr[tid] * 3; }
}
"""
CONSTANT = r"""
__constant__ float scale[4];
template <typename T> __device__ T table[2] = {T(1), T(2)};
extern "C" __global__ void scaled(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * scale[i % 4];
}
template <typename T> __global__ void add_table(T* y) {
    y[threadIdx.x] += table<T>[threadIdx.x % 2];
}
"""


def _needs_gpu():
    if not ignis.is_available():
        pytest.skip("needs a CUDA GPU")


# --- construction (no GPU needed) --------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({}, TypeError, r"give exactly one of code= \(source\) and path="),
        ({"code": "x", "path": "a.cu"}, TypeError, r"give exactly one of code="),
        ({"code": "x", "backend": "nvcc"}, ValueError, r"backend 'nvcc' is not supported"),
        ({"code": "x", "jitify": True}, ValueError, r"jitify=True is not supported"),
        (
            {"code": "x", "name_expressions": "k<float>"},
            TypeError,
            r"name_expressions must be a list of names, got the string",
        ),
        ({"code": "x", "options": 3}, TypeError, r"options must be a CompileOptions or a tuple"),
        ({"path": "kernel.so"}, ValueError, r"cannot load 'kernel.so': expected a \.cu, \.cubin"),
    ],
)
def test_bad_construction_says_what_was_expected(kwargs, error, message) -> None:
    with pytest.raises(error, match=r"RawModule: " + message):
        RawModule(**kwargs)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_templates_compile_to_lowered_names(arch) -> None:
    mod = RawModule(
        code=TEMPLATES, options=("-std=c++17",), name_expressions=["fx3<float>", "fx3<double>"]
    )
    code = mod.compile(arch=arch)
    assert code.kind == "cubin" and code.arch == arch
    assert code.lowered_names == {"fx3<float>": "_Z3fx3IfEvPT_i", "fx3<double>": "_Z3fx3IdEvPT_i"}
    with pytest.raises(
        ValueError,
        match=r"get_function\('fx3<int>'\): a template instance must "
        r"be listed in name_expressions",
    ):
        mod.get_function("fx3<int>")
    const = RawModule(code=CONSTANT, name_expressions=["add_table<int>", "table<int>"])
    assert set(const.compile(arch=arch).lowered_names) == {"add_table<int>", "table<int>"}


def test_a_cu_file_compiles_with_its_folder_on_the_include_path(tmp_path) -> None:
    (tmp_path / "helper.cuh").write_text(
        "__device__ inline float twice(float v) { return 2 * v; }\n"
    )
    (tmp_path / "k.cu").write_text(
        '#include "helper.cuh"\nextern "C" __global__ void k(float* x) { x[0] = twice(x[0]); }\n'
    )
    mod = RawModule(path=tmp_path / "k.cu")
    assert mod.compile(arch="sm_80").kind == "cubin"
    assert str(tmp_path) in mod.options.include_paths


def test_compiled_files_take_no_name_expressions_and_cannot_compile(tmp_path) -> None:
    ptx = tmp_path / "k.ptx"
    ptx.write_bytes(
        ignis.compile('extern "C" __global__ void k() {}', CompileOptions(arch="compute_80")).code
    )
    with pytest.raises(ValueError, match=r"name_expressions need source code"):
        RawModule(path=ptx, name_expressions=["k"])
    with pytest.raises(TypeError, match=r"RawModule.compile: .* is compiled already"):
        RawModule(path=ptx).compile()


def test_without_a_gpu_get_function_compiles_then_says_so() -> None:
    if ignis.is_available():
        pytest.skip("a GPU is present")
    mod = RawModule(code=TEMPLATES, name_expressions=["fx3<float>"])
    with pytest.raises(NoDeviceError, match=r"get_function\('fx3<float>'\): .*needs a GPU"):
        mod.get_function("fx3<float>")
    broken = RawModule(code="__global__ void k( {")
    with pytest.raises(ignis.CompileError):
        broken.get_function("k")


def test_untyped_arguments_pass_arrays_as_addresses() -> None:
    buf = types.SimpleNamespace(ptr=0x7F00_0000_1000)
    assert _untyped_arg(buf) == np.uint64(0x7F00_0000_1000)
    assert isinstance(_untyped_arg(buf), np.uint64)
    cai = types.SimpleNamespace(__cuda_array_interface__={"data": (0x1234, False)})
    assert _untyped_arg(cai) == np.uint64(0x1234)
    n = np.int32(5)
    assert _untyped_arg(n) is n and _untyped_arg(3) == 3  # (a Python int: refused when packed)


# --- one module on the stand-in GPU ------------------------------------------------------------


class _Driver:
    """The module calls of the driver, recorded: load, function and global lookups, unload."""

    def __init__(self, sizes: dict[str, list[int]]):
        self.sizes = sizes
        self.loads: list[bytes] = []
        self.functions: list[tuple[object, str]] = []
        self.globals: list[tuple[object, str]] = []
        self.unloads: list[object] = []

    def install(self, monkeypatch) -> None:
        monkeypatch.setattr(kernel_module._Loaded, "load", _REAL_LOAD)
        for name in (
            "cuModuleLoadData",
            "cuModuleGetFunction",
            "cuModuleGetGlobal",
            "cuModuleUnload",
            "cuFuncGetParamInfo",
            "cuFuncGetAttribute",
        ):
            monkeypatch.setattr(cu, name, getattr(self, name), raising=False)

    def cuModuleLoadData(self, data):
        self.loads.append(bytes(data))
        return f"module-{len(self.loads)}"

    def cuModuleGetFunction(self, module, symbol):
        self.functions.append((module, symbol.decode()))
        return types.SimpleNamespace(name=symbol.decode(), sizes=self.sizes[symbol.decode()])

    def cuModuleGetGlobal(self, module, symbol):
        self.globals.append((module, symbol.decode()))
        return 0x7E00_0000_0000, 16

    def cuModuleUnload(self, module):
        self.unloads.append(module)

    def cuFuncGetParamInfo(self, function, index):
        if index >= len(function.sizes):
            raise CudaError(
                "CUDA_ERROR_INVALID_VALUE", "past the last parameter", "cuFuncGetParamInfo"
            )
        return 8 * index, function.sizes[index]

    def cuFuncGetAttribute(self, attribute, function):
        return 1024 if "MAX_THREADS" in str(attribute) else 0


@pytest.fixture
def fake(monkeypatch):
    yield from stand_in_gpu(monkeypatch)


def test_functions_and_globals_share_one_loaded_module(fake, monkeypatch) -> None:
    lowered = RawModule(code=CONSTANT, name_expressions=["add_table<int>"]).compile(arch="sm_90")
    drv = _Driver({"scaled": [8, 8, 4], lowered.lowered_names["add_table<int>"]: [8]})
    drv.install(monkeypatch)
    mod = RawModule(code=CONSTANT, name_expressions=["add_table<int>"])
    scaled = mod.get_function("scaled")
    add = mod.get_function("add_table<int>")
    assert mod.get_function("scaled") is scaled
    scale = mod.get_global("scale")
    assert scale.shape == (16,) and scale.dtype == ignis.uint8
    assert scale._backend.data_ptr(scale) == 0x7E00_0000_0000
    assert len(drv.loads) == 1  # ONE module for both functions and the global
    assert {m for m, _ in drv.functions + drv.globals} == {"module-1"}
    assert [s for _, s in drv.functions] == ["scaled", lowered.lowered_names["add_table<int>"]]
    x = ignis.empty(8, dtype="float32", device="cuda:0")
    y = ignis.empty(8, dtype="float32", device="cuda:0")
    scaled((1,), (8,), (x, y, 8))  # CuPy's call
    add.launch(1, 2, [y])
    (n1, g1, b1, _, a1), (n2, _, b2, _, a2) = fake.launches
    assert (n1, g1, b1) == ("scaled", (1, 1, 1), (8, 1, 1))
    assert n2 == lowered.lowered_names["add_table<int>"]  # (the symbol the driver was asked for)
    assert [arg_ptr(a1[0]), arg_ptr(a1[1]), struct.unpack("<i", a1[2])[0]] == [
        x._backend.data_ptr(x),
        y._backend.data_ptr(y),
        8,
    ]
    assert arg_ptr(a2[0]) == y._backend.data_ptr(y) and b2 == (2, 1, 1)
    with pytest.raises(LaunchError, match=r"launch of 'scaled'"):
        scaled((1,), (8,), (x, y, 2.5))  # a float for the int: refused, not reinterpreted
    del mod, scaled, add
    gc.collect()
    assert drv.unloads == []  # the global's view still holds the module
    del scale
    gc.collect()
    assert drv.unloads == ["module-1"]


def test_a_compiled_file_passes_arrays_as_pointers_and_numpy_scalars_as_bytes(
    fake, monkeypatch, tmp_path
) -> None:
    src = (
        'extern "C" __global__ void k(float* x, int n) { if (threadIdx.x < n) x[threadIdx.x] = 1; }'
    )
    ptx = tmp_path / "k.ptx"
    ptx.write_bytes(ignis.compile(src, CompileOptions(arch="compute_80")).code)
    drv = _Driver({"k": [8, 4]})
    drv.install(monkeypatch)
    mod = RawModule(path=ptx)
    k = mod.get_function("k")
    assert k.params is None and repr(k) == "<ignis.Kernel 'k' (ptx for sm_80)>"
    x = ignis.empty(4, dtype="float32", device="cuda:0")
    k((1,), (4,), (x, np.int32(3)))
    ((_, _, _, _, args),) = fake.launches
    assert arg_ptr(args[0]) == x._backend.data_ptr(x) and args[1] == struct.pack("<i", 3)
    with pytest.raises(LaunchError, match=r"wrap the value in the matching NumPy scalar"):
        k((1,), (4,), (x, 3))
    with pytest.raises(LaunchError, match=r"expects 4 bytes"):
        k((1,), (4,), (x, np.int64(3)))
    assert drv.loads == [ptx.read_bytes()]


# --- on a GPU ----------------------------------------------------------------------------------


@GPU
def test_a_constant_written_through_get_global_is_read_by_the_modules_kernel() -> None:
    _needs_gpu()
    mod = RawModule(code=CONSTANT, name_expressions=["add_table<int>", "table<int>"])
    scale = mod.get_global("scale")
    assert scale.shape == (16,) and scale.dtype == ignis.uint8
    values = np.array([1.5, -2.0, 3.0, 0.25], dtype=np.float32)
    scale.copy_(values.view(np.uint8))
    x_h = np.arange(10, dtype=np.float32)
    x = ignis.asarray(x_h, device="cuda:0")
    y = ignis.zeros(10, dtype="float32", device="cuda:0")
    mod.get_function("scaled")((1,), (32,), (x, y, np.int32(10)))
    np.testing.assert_array_equal(y.to_host(), x_h * values[np.arange(10) % 4])
    np.testing.assert_array_equal(scale.to_host().view(np.float32), values)
    # a template variable by its name expression
    table = mod.get_global("table<int>")
    np.testing.assert_array_equal(table.to_host().view(np.int32), [1, 2])
    table.copy_(np.array([10, 20], dtype=np.int32).view(np.uint8))
    z = ignis.zeros(4, dtype="int32", device="cuda:0")
    mod.get_function("add_table<int>").launch(1, 4, [z])
    np.testing.assert_array_equal(z.to_host(), [10, 20, 10, 20])
    with pytest.raises(CudaError, match=r"CUDA_ERROR_NOT_FOUND"):
        mod.get_global("no_such_symbol")
    with pytest.raises(LaunchError, match=r"get_function\('missing'\)"):
        mod.get_function("missing")


@GPU
def test_cubin_and_ptx_files_load_and_launch(tmp_path) -> None:
    _needs_gpu()
    src = (
        'extern "C" __global__ void fill(float* x, float v, int n) {'
        " if (threadIdx.x < n) x[threadIdx.x] = v; }"
    )
    arch = ignis.current_device().arch
    major = arch[3:].rstrip("a")
    files = {
        "f.cubin": ignis.compile(src, CompileOptions(arch=arch)).code,
        "f.ptx": ignis.compile(src, CompileOptions(arch=f"compute_{major}")).code,
    }
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
        x = ignis.zeros(8, dtype="float32", device="cuda:0")
        RawModule(path=tmp_path / name).get_function("fill")(
            (1,), (8,), (x, np.float32(2.5), np.int32(6))
        )
        np.testing.assert_array_equal(x.to_host(), [2.5] * 6 + [0, 0])


@GPU
def test_cupys_documentation_examples_match_cupy() -> None:
    _needs_gpu()
    # https://docs.cupy.dev/en/stable/user_guide/kernel.html#raw-modules (reproduced)
    loaded_from_source = r"""
    extern "C"{
    __global__ void test_sum(const float* x1, const float* x2, float* y, unsigned int N) {
        unsigned int tid = blockDim.x * blockIdx.x + threadIdx.x;
        if (tid < N) y[tid] = x1[tid] + x2[tid];
    }
    __global__ void test_multiply(const float* x1, const float* x2, float* y, unsigned int N) {
        unsigned int tid = blockDim.x * blockIdx.x + threadIdx.x;
        if (tid < N) y[tid] = x1[tid] * x2[tid];
    }
    }"""
    n = 10
    x1_h = np.arange(n * n, dtype=np.float32).reshape(n, n)
    x2_h = np.ones((n, n), dtype=np.float32)
    module = RawModule(code=loaded_from_source)
    ker_sum, ker_times = module.get_function("test_sum"), module.get_function("test_multiply")
    assert ker_sum._image is ker_times._image
    x1, x2 = ignis.asarray(x1_h, device="cuda:0"), ignis.asarray(x2_h, device="cuda:0")
    y = ignis.zeros((n, n), dtype="float32", device="cuda:0")
    ker_sum((n,), (n,), (x1, x2, y, n**2))
    np.testing.assert_array_equal(y.to_host(), x1_h + x2_h)
    ker_times((n,), (n,), (x1, x2, y, n**2))
    np.testing.assert_array_equal(y.to_host(), x1_h * x2_h)
    mod = RawModule(
        code=TEMPLATES, options=("-std=c++11",), name_expressions=["fx3<float>", "fx3<double>"]
    )
    arrays = {}
    for t, dtype in (("float", "float32"), ("double", "float64")):
        a = ignis.asarray(np.arange(10, dtype=dtype), device="cuda:0")
        mod.get_function(f"fx3<{t}>")((1,), (10,), (a, 10))
        arrays[dtype] = a.to_host()
        np.testing.assert_array_equal(arrays[dtype], np.arange(10, dtype=dtype) * 3)
    cp = pytest.importorskip("cupy")
    theirs = cp.RawModule(
        code=TEMPLATES, options=("-std=c++11",), name_expressions=["fx3<float>", "fx3<double>"]
    )
    for t, dtype in (("float", "float32"), ("double", "float64")):
        a = cp.arange(10, dtype=dtype)
        theirs.get_function(f"fx3<{t}>")((1,), (10,), (a, 10))
        np.testing.assert_array_equal(cp.asnumpy(a), arrays[dtype])
    c_mod = cp.RawModule(code=CONSTANT, name_expressions=["add_table<int>"])
    memptr = c_mod.get_global("scale")
    cp.ndarray((4,), cp.float32, memptr)[...] = cp.asarray([1.5, -2.0, 3.0, 0.25], cp.float32)
    x_h = np.arange(10, dtype=np.float32)
    y_c = cp.zeros(10, dtype=cp.float32)
    c_mod.get_function("scaled")((1,), (32,), (cp.asarray(x_h), y_c, np.int32(10)))
    ours = RawModule(code=CONSTANT, name_expressions=["add_table<int>"])
    ours.get_global("scale").copy_(np.array([1.5, -2.0, 3.0, 0.25], np.float32).view(np.uint8))
    y_i = ignis.zeros(10, dtype="float32", device="cuda:0")
    ours.get_function("scaled")((1,), (32,), (ignis.asarray(x_h, device="cuda:0"), y_i, 10))
    np.testing.assert_array_equal(y_i.to_host(), cp.asnumpy(y_c))
