"""Matrix products on the GPU: cuBLAS through FFI and the library's own GEMM kernels.

Runs anywhere (no GPU):
  * the cuBLAS FFI module loads lazily, degrades to None without the library, and turns every
    failure status into one ``CublasError``;
  * the planning helpers (BLAS layouts, batch collapsing, kernel layouts, launches);
  * every own-kernel template instance compiles with NVRTC for sm_80 and sm_90, without warnings,
    with the instructions it is written for (ldmatrix, mma.sync, cp.async, 16-byte loads);
  * the kernels themselves run on a host emulator of the CUDA features they use (tc_emulator.py,
    shared with the attention tests): each thread is a coroutine, ``__syncthreads`` and the
    warp-wide ldmatrix/mma are barriers met in a shuffled order, ``ldmatrix``/``mma`` follow the
    PTX ISA fragment layouts, and cp.async poisons its destination until it is waited for.
    Results are compared with NumPy in float64; faulty primitives and broken kernels are caught.

On a GPU (``gpu`` marker): every dtype through cuBLAS, the own kernels and the own FMA kernels,
against NumPy float64 (and torch where installed): odd shapes, k = 0, batches with broadcast
dims, transposed and strided views, alpha/beta, ``out=`` views and aliasing, TF32 on and off.

Accuracy is judged per element against ``S = |alpha| |A| @ |B| + |beta| |C0|`` (the bound of
every rounding error in a dot product), so the tolerances hold for any data.
"""

from __future__ import annotations

import ctypes.util
import os
import re
import shutil
import struct
import subprocess
import sys
import threading
import types

import ml_dtypes
import numpy as np
import pytest
import tc_emulator
from array_helpers import PRODUCT_TOL as TOL
from array_helpers import bound_check
from ignis._array._cuda_backend import matmul as mm

import ignis
from ignis import CompileOptions, _cublas, _sources
from ignis import _dtypes as dt

HAS_GPU = ignis.is_available()
CUDA = "cuda:0"
FLOATS = ["float16", "bfloat16", "float32", "float64"]
NP = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "float32": np.float32,
      "float64": np.float64}
CXX = {"float16": "ignis::float16", "bfloat16": "ignis::bfloat16", "float32": "float",
       "float64": "double"}
TF32_TOL = 4e-3  # inputs rounded to 10 mantissa bits: each product within ~2^-10 relative
TF32_RMS = 1e-3

requires_gpu = pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA GPU")




def reference(a: np.ndarray, b: np.ndarray, alpha: float = 1.0, beta: float = 0.0,
              c0: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(alpha a @ b + beta c0, S) in float64."""
    a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
    ref = alpha * np.matmul(a64, b64)
    scale = abs(alpha) * np.matmul(np.abs(a64), np.abs(b64))
    if beta != 0:
        c64 = np.asarray(c0, np.float64)
        ref = ref + beta * c64
        scale = scale + abs(beta) * np.abs(c64)
    return ref, scale


# --- the cuBLAS FFI module (no GPU needed) -----------------------------------------------------


@pytest.fixture
def fresh_cublas():
    """Forget the loaded cuBLAS before and after a test that fakes the loader."""
    _cublas._reset_for_tests()
    yield
    _cublas._reset_for_tests()


def test_cublas_degrades_to_none_when_the_library_is_missing(monkeypatch, fresh_cublas):
    from cuda import pathfinder

    def missing(name):
        raise pathfinder.DynamicLibNotFoundError(f"Failure finding {name!r}: no such file")

    monkeypatch.setattr(pathfinder, "load_nvidia_dynamic_lib", missing)
    assert _cublas.load() is None
    assert _cublas.load() is None  # cached, no second search
    assert "DynamicLibNotFoundError" in _cublas.unavailable_reason()
    assert "cublas" in _cublas.unavailable_reason()
    assert mm.cublas_available() is False


def test_cublas_degrades_to_none_without_pathfinder(monkeypatch, fresh_cublas):
    monkeypatch.setitem(sys.modules, "cuda.pathfinder", None)  # import fails
    assert _cublas.load() is None
    assert re.match(r"(ModuleNotFound|Import)Error", _cublas.unavailable_reason())


def test_cublas_rejects_a_library_without_the_functions(monkeypatch, fresh_cublas):
    libc = ctypes.util.find_library("c")
    if libc is None:
        pytest.skip("no C library to stand in for a wrong library")
    from cuda import pathfinder

    monkeypatch.setattr(pathfinder, "load_nvidia_dynamic_lib",
                        lambda name: types.SimpleNamespace(abs_path=libc, _handle_uint=None))
    assert _cublas.load() is None
    assert "has no function cublasCreate_v2" in _cublas.unavailable_reason()


@pytest.fixture
def fresh_cublaslt():
    from ignis import _cublaslt

    _cublaslt._reset_for_tests()
    yield _cublaslt
    _cublaslt._reset_for_tests()


def test_cublaslt_degrades_to_none_when_missing_or_wrong(monkeypatch, fresh_cublaslt):
    from cuda import pathfinder

    def missing(name):
        raise pathfinder.DynamicLibNotFoundError(f"Failure finding {name!r}: no such file")

    monkeypatch.setattr(pathfinder, "load_nvidia_dynamic_lib", missing)
    assert fresh_cublaslt.load() is None
    assert "DynamicLibNotFoundError" in fresh_cublaslt.unavailable_reason()
    assert "cublasLt" in fresh_cublaslt.unavailable_reason()
    libc = ctypes.util.find_library("c")
    if libc is None:
        return
    fresh_cublaslt._reset_for_tests()
    monkeypatch.setattr(pathfinder, "load_nvidia_dynamic_lib",
                        lambda name: types.SimpleNamespace(abs_path=libc, _handle_uint=None))
    assert fresh_cublaslt.load() is None
    assert "has no function cublasLtCreate" in fresh_cublaslt.unavailable_reason()


def test_cublas_loads_where_installed(fresh_cublas):
    lib = _cublas.load()
    if lib is None:
        pytest.skip(f"cuBLAS is not installed here ({_cublas.unavailable_reason()})")
    assert lib.version[0] in (12, 13) and len(lib.version) == 3
    assert "libcublas" in repr(lib) or lib.path is None
    assert lib.status_string(7)  # the library's own text for CUBLAS_STATUS_INVALID_VALUE
    assert mm.cublas_available()


@pytest.mark.parametrize("status, name", [
    (1, "CUBLAS_STATUS_NOT_INITIALIZED"), (3, "CUBLAS_STATUS_ALLOC_FAILED"),
    (7, "CUBLAS_STATUS_INVALID_VALUE"), (8, "CUBLAS_STATUS_ARCH_MISMATCH"),
    (11, "CUBLAS_STATUS_MAPPING_ERROR"), (13, "CUBLAS_STATUS_EXECUTION_FAILED"),
    (14, "CUBLAS_STATUS_INTERNAL_ERROR"), (15, "CUBLAS_STATUS_NOT_SUPPORTED"),
    (16, "CUBLAS_STATUS_LICENSE_ERROR"), (99, "CUBLAS_STATUS_UNKNOWN_99"),
])
def test_every_cublas_failure_is_one_error_type(status, name):
    with pytest.raises(_cublas.CublasError) as info:
        _cublas.check(status, "cublasGemmEx")
    err = info.value
    assert isinstance(err, ignis.CudaError) and isinstance(err, ignis.IgnisError)
    assert err.code == name and err.call == "cublasGemmEx" and err.value == status
    assert re.fullmatch(rf"{name}: .+ \(in cublasGemmEx\)", str(err)), str(err)


def test_cublas_success_passes():
    assert _cublas.check(0, "cublasCreate_v2") is None


# --- switches ------------------------------------------------------------------------------------


def test_switches_default_and_validate():
    assert mm.get_allow_tf32() is False  # off unless asked for
    before = mm.get_allow_tf32(), mm.get_cublas_enabled()
    try:
        mm.set_allow_tf32(True)
        assert mm.get_allow_tf32() is True
        mm.set_cublas_enabled(False)
        assert mm.get_cublas_enabled() is False
        with pytest.raises(TypeError, match=r"set_allow_tf32: expected True or False, got 1"):
            mm.set_allow_tf32(1)
        with pytest.raises(TypeError, match=r"set_cublas_enabled: expected True or False, got 'n"):
            mm.set_cublas_enabled("no")
    finally:
        mm.set_allow_tf32(before[0])
        mm.set_cublas_enabled(before[1])


@pytest.mark.parametrize("value, enabled", [("1", False), ("true", False), ("0", True), ("", True)])
def test_environment_disables_cublas(value, enabled):
    code = ("from ignis._array._cuda_backend import matmul as m; "
            "print(m.get_cublas_enabled())")
    env = dict(os.environ, IGNIS_DISABLE_CUBLAS=value)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True, timeout=120)
    assert out.stdout.strip() == str(enabled)


# --- planning helpers ----------------------------------------------------------------------------


@pytest.mark.parametrize("rows, cols, rs, cs, want", [
    (3, 4, 4, 1, ("row", 4)),       # C-contiguous
    (3, 4, 10, 1, ("row", 10)),     # a row-major slice of a wider matrix
    (4, 3, 1, 4, ("col", 4)),       # the transpose of the first
    (3, 4, 1, 3, ("col", 3)),
    (1, 5, 99, 1, ("row", 5)),      # one row: its stride does not matter
    (5, 1, 1, 77, ("row", 1)),      # one column, elements adjacent
    (5, 1, 3, 42, ("row", 3)),      # one column, every third element
    (1, 1, 0, 0, ("row", 1)),
    (3, 4, 8, 2, None),             # strided in both dims
    (3, 4, 2, 1, None),             # rows overlap
    (3, 4, -4, 1, None),            # rows reversed
    (3, 4, 0, 1, None),             # broadcast rows
])
def test_blas_layout(rows, cols, rs, cs, want):
    assert mm.blas_layout(rows, cols, rs, cs) == want


def test_collapse_batch_merges_and_drops():
    # a contiguous (2, 3) batch of 4x5 matrices, a broadcast operand, and one with a size-1 dim
    shape, (sa, sb, sc) = mm.collapse_batch((2, 1, 3), [(60, 0, 20), (0, 0, 0), (60, 99, 20)])
    assert shape == (6,) and sa == (20,) and sb == (0,) and sc == (20,)
    shape, (sa, sb) = mm.collapse_batch((2, 3), [(3, 1), (0, 1)])  # b broadcasts dim 0 only
    assert shape == (2, 3) and sa == (3, 1) and sb == (0, 1)
    shape, strides = mm.collapse_batch((), [(), ()])
    assert shape == () and strides == [(), ()]


def _mat(ptr=1 << 20, rs=64, cs=1, bs=()):
    return mm.Mat(ptr, rs, cs, bs)


def test_kernel_layout_codes():
    item = 2
    assert mm.kernel_layout(4, 64, _mat(), (), item) == (0, 64, 1)
    assert mm.kernel_layout(64, 4, _mat(rs=1, cs=64), (), item) == (1, 1, 64)
    assert mm.kernel_layout(4, 64, _mat(ptr=(1 << 20) + 2), (), item)[0] == 2   # misaligned base
    assert mm.kernel_layout(4, 64, _mat(rs=65), (), item) == (2, 65, 1)          # odd row stride
    assert mm.kernel_layout(4, 64, _mat(), (256 + 1,), item)[0] == 2             # odd batch stride
    assert mm.kernel_layout(4, 64, _mat(rs=128, cs=2), (), item) == (2, 128, 2)  # strided both
    assert mm.kernel_layout(1, 64, _mat(rs=3), (), item) == (0, 0, 1)            # one row
    assert mm.kernel_layout(4, 64, _mat(rs=-64), (), item) == (0, -64, 1)        # reversed rows
    # strides multiple of 16 bytes for float64: 2 elements
    assert mm.kernel_layout(4, 6, _mat(rs=6), (), 8) == (0, 6, 1)


def test_plan_picks_the_kernel_family():
    a, b, c = _mat(), _mat(), _mat()
    name = lambda *args, **kw: mm.plan_own_gemm(*args, **kw)[0].kernel  # noqa: E731
    common = ((), 4, 64, 64, a, b, c, 1.0, 0.0)
    g = "ignis::gemm::gemm_"
    assert name(dt.bfloat16, (9, 0), False, *common) == g + "tc<ignis::bfloat16, 0, 0>"
    assert name(dt.float16, (8, 0), False, *common).startswith(g + "tc<ignis::float16")
    assert name(dt.float16, (7, 5), False, *common).startswith(g + "simt<ignis::float16")
    assert name(dt.float32, (9, 0), False, *common).startswith(g + "simt<float")
    assert name(dt.float32, (9, 0), True, *common).startswith(g + "tc<float")
    assert name(dt.float32, (7, 5), True, *common).startswith(g + "simt<float")
    assert name(dt.float64, (9, 0), True, *common).startswith(g + "simt<double")
    assert name(dt.bfloat16, (9, 0), False, *common, family="simt").startswith(g + "simt")
    assert name(dt.float64, (9, 0), False, *common, family="tc").startswith(g + "simt")


def test_plan_grid_arguments_and_outer_batch_loop():
    item = 4
    # 7 batch dims that cannot merge (alternating broadcast): one launch per outer index
    batch = (2,) * 7
    sa = tuple(0 if i % 2 else 2 ** (7 - i) * 1000 for i in range(7))
    sc = tuple(2 ** (6 - i) * 300 for i in range(7))
    a = mm.Mat(1 << 20, 20, 1, sa)
    b = mm.Mat(1 << 21, 30, 1, (0,) * 7)
    c = mm.Mat(1 << 22, 30, 1, sc)
    launches = mm.plan_own_gemm(dt.float32, (9, 0), False, batch, 10, 30, 20, a, b, c, 2.0, 0.5)
    assert len(launches) == 2
    assert launches[1].a == a.ptr + sa[0] * item and launches[1].c == c.ptr + sc[0] * item
    assert launches[1].b == b.ptr
    L = launches[0]
    assert L.grid == (1, 64, 1) and L.shared_mem == 0
    fields = mm._ARGS.unpack(L.args)
    assert fields[:10] == (10, 30, 20, 20, 1, 30, 1, 30, 1, 64)
    assert fields[10:16] == (2,) * 6
    assert fields[16:22] == sa[1:]
    assert fields[-6:] == (2.0, 0.5, 6, 1, 1, 0)
    # a huge batch spills into grid z; the tile count goes to grid x
    big = mm.plan_own_gemm(dt.bfloat16, (9, 0), False, (200_000,), 300, 260, 8,
                           mm.Mat(1 << 20, 8, 1, (2400,)), mm.Mat(1 << 21, 264, 1, (0,)),
                           mm.Mat(1 << 22, 260, 1, (78000,)), 1.0, 0.0)
    assert len(big) == 1 and big[0].grid == (3 * 3, 65535, 4)
    assert big[0].shared_mem == mm._tc_smem_bytes(dt.bfloat16, 0, 0) > 48 * 1024


# --- the cuBLAS call plan, checked against a host model of cuBLAS ------------------------------


class HostBlas:
    """Stands in for :class:`ignis._cublas.CublasLibrary` on host memory (the CPU backend's
    arrays): ``gemm_strided_batched`` does what cuBLAS documents, column-major, and enforces its
    argument rules, so the row-major to column-major mapping is checked without a GPU."""

    TYPES = {_cublas.CUDA_R_16F: np.float16, _cublas.CUDA_R_16BF: ml_dtypes.bfloat16,
             _cublas.CUDA_R_32F: np.float32, _cublas.CUDA_R_64F: np.float64}

    def __init__(self, storages):
        self.calls = []
        self.storages = storages  # () -> the host arrays an address may point into

    def handle(self, device):
        return 1234

    def _matrix(self, ptr, dtype, rows, cols, ld, op):
        """op(M) for a column-major rows x cols (after op) operand at ``ptr``."""
        stored_rows, stored_cols = (rows, cols) if op == _cublas.CUBLAS_OP_N else (cols, rows)
        assert ld >= max(1, stored_rows), f"ld {ld} < {stored_rows} rows: invalid for cuBLAS"
        item = np.dtype(dtype).itemsize
        r, c = np.meshgrid(np.arange(stored_rows), np.arange(stored_cols), indexing="ij")
        offsets = r + c * ld
        span = int(offsets.max()) + 1 if offsets.size else 0
        inside = any(
            st.ctypes.data <= ptr and ptr + span * item <= st.ctypes.data + st.nbytes
            for st in self.storages()
        )
        assert inside, "cuBLAS would access memory outside the operands"
        mem = np.frombuffer((ctypes.c_char * (span * item)).from_address(ptr), dtype=dtype)
        stored = mem[offsets] if offsets.size else np.zeros((stored_rows, stored_cols), dtype)
        return (stored if op == _cublas.CUBLAS_OP_N else stored.T), offsets, mem

    def gemm_strided_batched(self, handle, stream, transa, transb, m, n, k, alpha, a, atype,
                             lda, stride_a, b, btype, ldb, stride_b, beta, c, ctype, ldc,
                             stride_c, batch, compute):
        assert handle == 1234 and stream == 0
        assert atype == btype == ctype and min(m, n, k, batch) >= 1
        dtype = self.TYPES[atype]
        item = np.dtype(dtype).itemsize
        self.calls.append((transa, transb, m, n, k, lda, ldb, ldc, batch, compute))
        for i in range(batch):
            A = self._matrix(a + i * stride_a * item, dtype, m, k, lda, transa)[0]
            B = self._matrix(b + i * stride_b * item, dtype, k, n, ldb, transb)[0]
            C, offsets, mem = self._matrix(c + i * stride_c * item, dtype, m, n, ldc,
                                           _cublas.CUBLAS_OP_N)
            al, be = alpha._obj.value, beta._obj.value  # ctypes.byref of the scalars
            res = al * (A.astype(np.float64) @ B.astype(np.float64))
            if be != 0:
                res = res + be * C.astype(np.float64)
            mem[offsets] = res.astype(dtype)  # ctypes memory: writable


def _blas_case(dtype, a_host, b_host, a_view, b_view, out, alpha=1.0, beta=0.0):
    """Run the cuBLAS plan on CPU arrays through HostBlas; return (result, calls)."""
    from ignis._array._backend import get_backend

    cpu = get_backend("cpu")  # host addresses stand in for device addresses
    backend = types.SimpleNamespace(data_ptr=cpu.data_ptr, copy=cpu.copy, gpu=None)
    a, b = a_view(a_host), b_view(b_host)
    keep = []
    lib = HostBlas(lambda: [x._storage for x in [a, b, out, *keep]])
    am, bm, cm = mm._as_mat(backend, a), mm._as_mat(backend, b), mm._as_mat(backend, out)
    batch = tuple(out.shape[:-2])
    m, n, k = out.shape[-2], out.shape[-1], a.shape[-1]
    done = mm._cublas_matmul(lib, backend, types.SimpleNamespace(ptr=0), getattr(dt, dtype),
                             batch, m, n, k, a, b, am, bm, cm, out, alpha, beta, keep)
    assert done
    return lib.calls


BLAS_VIEWS = {
    "row": lambda x: x,
    "col": lambda x: x.swapaxes(-1, -2).contiguous().swapaxes(-1, -2),
    "step": lambda x: ignis.NvArray.from_host(
        np.repeat(x.to_host(), 2, axis=-1), device="cpu")[..., ::2],
}


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("ka", list(BLAS_VIEWS))
@pytest.mark.parametrize("kb", list(BLAS_VIEWS))
@pytest.mark.parametrize("out_kind", ["row", "col", "step"])
def test_cublas_plan_on_a_host_model(dtype, ka, kb, out_kind):
    rng = np.random.default_rng(len(ka) * 7 + len(kb) * 3 + len(out_kind))
    batch_a, batch_b = (2, 1, 3), (1, 4, 1)  # broadcast batch dims in both operands
    m, k, n = 5, 7, 6
    x = rng.uniform(-1, 1, batch_a + (m, k)).astype(NP[dtype])
    y = rng.uniform(-1, 1, batch_b + (k, n)).astype(NP[dtype])
    c0 = rng.uniform(-1, 1, (2, 4, 3, m, n)).astype(NP[dtype])
    xa = ignis.NvArray.from_host(x, device="cpu")
    yb = ignis.NvArray.from_host(y, device="cpu")
    out = BLAS_VIEWS[out_kind](ignis.NvArray.from_host(c0, device="cpu"))
    full = (2, 4, 3)
    a_view = lambda t: BLAS_VIEWS[ka](t).broadcast_to(full + (m, k))  # noqa: E731
    b_view = lambda t: BLAS_VIEWS[kb](t).broadcast_to(full + (k, n))  # noqa: E731
    calls = _blas_case(dtype, xa, yb, a_view, b_view, out, alpha=0.5, beta=-2.0)
    ref, scale = reference(x, y, 0.5, -2.0, c0)
    bound_check(out.to_host(), ref, scale, TOL[dtype], f"{ka} @ {kb} -> {out_kind}")
    assert calls and all(call[9] == (_cublas.CUBLAS_COMPUTE_64F if dtype == "float64"
                                     else _cublas.CUBLAS_COMPUTE_32F) for call in calls)


def test_cublas_plan_tf32_and_loops(monkeypatch):
    rng = np.random.default_rng(1)
    x = rng.uniform(-1, 1, (2,) * 7 + (3, 4)).astype(np.float32)
    y = rng.uniform(-1, 1, (1, 2) * 3 + (1, 4, 5)).astype(np.float32)
    xa, yb = (ignis.NvArray.from_host(v, device="cpu") for v in (x, y))
    out = ignis.NvArray.from_host(np.full((2,) * 7 + (3, 5), np.nan, np.float32), device="cpu")
    monkeypatch.setattr(mm, "_allow_tf32", True)
    full = (2,) * 7
    calls = _blas_case("float32", xa, yb, lambda t: t, lambda t: t.broadcast_to(full + (4, 5)), out)
    ref, scale = reference(x, y)
    bound_check(out.to_host(), ref, scale, TOL["float32"], "7 batch dims")
    assert all(call[9] == _cublas.CUBLAS_COMPUTE_32F_FAST_TF32 for call in calls)
    assert len(calls) > 1  # the batch dims do not merge: the outer ones are looped over
    # negative batch strides are looped over one matrix at a time
    out2 = ignis.NvArray.from_host(np.zeros((4, 3, 5), np.float32), device="cpu")
    z = rng.uniform(-1, 1, (4, 3, 4)).astype(np.float32)
    calls = _blas_case("float32", ignis.NvArray.from_host(z, device="cpu"), yb,
                       lambda t: t[::-1],
                       lambda t: t[0, 0, 0, 0, 0, 0].broadcast_to((4, 4, 5)), out2)
    ref, scale = reference(z[::-1], y[0, 0, 0, 0, 0, 0])
    bound_check(out2.to_host(), ref, scale, TOL["float32"], "negative batch stride")
    assert len(calls) == 4 and all(call[8] == 1 for call in calls)


def test_launch_arguments_pack_for_the_kernel_signature():
    from ignis._arg_packing import ArgPacker
    from ignis._signature import parse_kernel_params

    src = _sources.read_source("matmul.cu")
    a, b, c = mm.Mat(1 << 20, 16, 1, ()), mm.Mat(1 << 21, 1, 16, ()), mm.Mat(1 << 22, 10, 1, ())
    for dtype in (dt.bfloat16, dt.float32, dt.float64):
        launch = mm.plan_own_gemm(dtype, (9, 0), True, (), 10, 10, 16, a, b, c, 1.0, 0.0)[0]
        params = parse_kernel_params(src, launch.kernel)
        assert [p.kind for p in params] == ["pointer"] * 3 + ["struct"]
        # the kernel's GemmArgs is 304 bytes (a static_assert in matmul.cu keeps it so)
        packer = ArgPacker(params, launch.kernel, param_sizes=[8, 8, 8, mm._ARGS.size])
        packed = packer.pack([launch.a, launch.b, launch.c, launch.args])
        assert packed.param_bytes(3) == launch.args and mm._ARGS.size == 304
        assert packed.param_bytes(1) == (1 << 21).to_bytes(8, "little")


# --- NVRTC: every instance compiles, with the intended instructions ------------------------------

GROUPS = [("tc", "float16"), ("tc", "bfloat16"), ("tc", "float32"), ("simt", "float16"),
          ("simt", "bfloat16"), ("simt", "float32"), ("simt", "float64")]


def _names(family: str, dtype: str, layouts=range(3)) -> list[str]:
    return [f"ignis::gemm::gemm_{family}<{CXX[dtype]}, {la}, {lb}>"
            for la in layouts for lb in layouts]


@pytest.fixture
def isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("IGNIS_CACHE_DIR", str(tmp_path / "cache"))
    ignis.jit.clear_cache(memory=True)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("family, dtype", GROUPS, ids=[f"{f}-{d}" for f, d in GROUPS])
@pytest.mark.exhaustive
def test_every_instance_compiles(family, dtype, arch, isolated_cache):
    names = _names(family, dtype)
    obj = ignis.compile(_sources.read_source("matmul.cu"), CompileOptions(arch=arch),
                        name_expressions=names, name="matmul.cu")
    assert obj.kind == "cubin" and obj.log == "", obj.log
    assert set(obj.lowered_names) == set(names)
    for mangled in obj.lowered_names.values():
        assert mangled.encode() in obj.code


FAST = [("tc", "float16"), ("tc", "bfloat16"), ("tc", "float32"), ("simt", "float32"),
        ("simt", "float64")]


@pytest.mark.parametrize("family, dtype", FAST, ids=[f"{f}-{d}" for f, d in FAST])
@pytest.mark.exhaustive
def test_fast_layouts_do_not_spill(family, dtype, isolated_cache):
    names = _names(family, dtype, layouts=(0, 1))
    obj = ignis.compile(_sources.read_source("matmul.cu"),
                        CompileOptions(arch="sm_90", extra=("--ptxas-options=-v",)),
                        name_expressions=names, name="matmul.cu")
    spills = re.findall(r"(\d+) bytes spill stores", obj.log)
    assert len(spills) == len(names) and set(spills) == {"0"}, obj.log


def _ptx(name: str) -> str:
    obj = ignis.compile(_sources.read_source("matmul.cu"), CompileOptions(arch="compute_90"),
                        name_expressions=[name], name="matmul.cu")
    assert obj.kind == "ptx"
    return obj.code.decode()


def test_tensor_core_kernels_use_ldmatrix_mma_and_cp_async(isolated_cache):
    ptx = _ptx("ignis::gemm::gemm_tc<ignis::bfloat16, 0, 0>")
    assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in ptx
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in ptx
    assert "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in ptx  # B [k][n]
    assert "cp.async.cg.shared.global" in ptx and "cp.async.wait_group" in ptx
    ptx = _ptx("ignis::gemm::gemm_tc<ignis::float16, 1, 1>")
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in ptx
    ptx = _ptx("ignis::gemm::gemm_tc<float, 0, 1>")
    assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in ptx
    assert "cvt.rna.tf32.f32" in ptx


def test_fma_kernels_use_16_byte_accesses(isolated_cache):
    ptx = _ptx("ignis::gemm::gemm_simt<float, 0, 0>")
    assert re.search(r"ld\.global(\.nc)?\.v4\.(u32|f32|b32)", ptx)
    assert "ld.shared.v4.f32" in ptx
    assert "fma.rn.f32" in ptx
    ptx = _ptx("ignis::gemm::gemm_simt<double, 1, 0>")
    assert "ld.shared.v2.f64" in ptx and "fma.rn.f64" in ptx


# --- the kernels on a host emulator -------------------------------------------------------------

GEMM_PART = r"""
// The GEMM kernels of matmul.cu on the emulator of tc_emulator.py.
//
// Build: c++ -std=c++17 -O1 -I<cuda_src> -DEMU_FAMILY=<0 tc|1 simt> -DEMU_T=<type>
// Run:   emulator <input file> <output file>     (emulator --smem: the tc kernels' needs)
#define IGNIS_GEMM_HOST_EMULATION 1

namespace ignis {
namespace gemm {
struct Vec16;

inline Vec16* dynamic_smem() { return reinterpret_cast<Vec16*>(::emu::dyn_smem); }
inline uint32 dynamic_smem_bytes() { return (uint32)::emu::dyn_smem_size; }
[[noreturn]] inline void fail() { ::emu::die("kernel trapped: not enough dynamic shared memory"); }

}  // namespace gemm
}  // namespace ignis

#include "matmul.cu"

struct Header {
  char magic[8];           // "IGNEMU1\0"
  int32_t la, lb;          // layouts
  uint32_t grid[3];
  uint32_t threads;
  uint64_t smem;           // dynamic shared memory bytes
  uint64_t seed;
  uint64_t a_bytes, b_bytes, c_bytes;  // buffer sizes
  uint64_t base;           // fake device address of each buffer's first byte
  uint64_t a_ptr, b_ptr, c_ptr;  // fake addresses passed to the kernel
};

template <int LA, int LB>
void launch_one(const EMU_T* a, const EMU_T* b, EMU_T* c, ignis::gemm::GemmArgs p) {
#if EMU_FAMILY == 0
  ignis::gemm::gemm_tc<EMU_T, LA, LB>(a, b, c, p);
#else
  ignis::gemm::gemm_simt<EMU_T, LA, LB>(a, b, c, p);
#endif
}

typedef void (*LaunchFn)(const EMU_T*, const EMU_T*, EMU_T*, ignis::gemm::GemmArgs);

LaunchFn pick(int la, int lb) {
  static const LaunchFn table[3][3] = {
      {launch_one<0, 0>, launch_one<0, 1>, launch_one<0, 2>},
      {launch_one<1, 0>, launch_one<1, 1>, launch_one<1, 2>},
      {launch_one<2, 0>, launch_one<2, 1>, launch_one<2, 2>},
  };
  if (la < 0 || la > 2 || lb < 0 || lb > 2) emu::die("bad layout codes");
  return table[la][lb];
}

int main(int argc, char** argv) {
#if EMU_FAMILY == 0
  if (argc == 2 && std::strcmp(argv[1], "--smem") == 0) {  // the tensor-core kernels' needs
    for (int la = 0; la < 3; ++la)
      for (int lb = 0; lb < 3; ++lb) {
        int bytes = 0;
        switch (la * 3 + lb) {
#define EMU_SMEM(A, B) \
  case A * 3 + B:      \
    bytes = ignis::gemm::TcLayout<EMU_T, A, B>::SMEM_BYTES; \
    break;
          EMU_SMEM(0, 0) EMU_SMEM(0, 1) EMU_SMEM(0, 2) EMU_SMEM(1, 0) EMU_SMEM(1, 1)
          EMU_SMEM(1, 2) EMU_SMEM(2, 0) EMU_SMEM(2, 1) EMU_SMEM(2, 2)
        }
        std::printf("%d %d %d\n", la, lb, bytes);
      }
    return 0;
  }
#endif
  if (argc != 3) emu::die("usage: emulator <input> <output>");
  FILE* f = std::fopen(argv[1], "rb");
  if (!f) emu::die("cannot open the input");
  Header h;
  ignis::gemm::GemmArgs p;
  if (std::fread(&h, sizeof h, 1, f) != 1 || std::fread(&p, sizeof p, 1, f) != 1)
    emu::die("short input");
  if (std::memcmp(h.magic, "IGNEMU1", 8) != 0) emu::die("bad magic");
  const size_t guard = 4096;  // NaN-filled margins: out-of-bounds reads poison the result
  auto buffer = [&](uint64_t bytes) {
    const size_t total = (bytes + 2 * guard + 511) / 256 * 256;  // a multiple of the alignment
    unsigned char* mem = (unsigned char*)std::aligned_alloc(256, total);
    if (!mem) emu::die("out of memory");
    std::memset(mem, 0xff, total);
    if (bytes && std::fread(mem + guard, bytes, 1, f) != 1) emu::die("short input data");
    return mem;
  };
  unsigned char* A = buffer(h.a_bytes);
  unsigned char* B = buffer(h.b_bytes);
  unsigned char* C = buffer(h.c_bytes);
  std::fclose(f);
  emu::readable = {{A + guard, A + guard + h.a_bytes}, {B + guard, B + guard + h.b_bytes}};
  auto real = [&](unsigned char* buf, uint64_t fake) { return buf + guard + (fake - h.base); };
  const EMU_T* a = (const EMU_T*)real(A, h.a_ptr);
  const EMU_T* b = (const EMU_T*)real(B, h.b_ptr);
  EMU_T* c = (EMU_T*)real(C, h.c_ptr);

  std::mt19937 rng((unsigned)h.seed);
  LaunchFn fn = pick(h.la, h.lb);
  emu::launch(Dim3{h.grid[0], h.grid[1], h.grid[2]}, (int)h.threads, h.smem,
              [&] { fn(a, b, c, p); }, rng);
  for (size_t i = 0; i < guard; ++i)
    if (C[i] != 0xff || C[guard + h.c_bytes + i] != 0xff)
      emu::die("the kernel wrote outside the output");
  FILE* o = std::fopen(argv[2], "wb");
  if (!o || (h.c_bytes && std::fwrite(C + guard, h.c_bytes, 1, o) != 1))
    emu::die("cannot write the output");
  std::fclose(o);
  return 0;
}
"""

EMU_BASE = 1 << 32  # fake device address of every emulated buffer's first byte
EMU_HEADER = struct.Struct("<8s2i4I9Q")


@pytest.fixture(scope="module")
def emulator(tmp_path_factory):
    """``build(family, dtype)`` -> path of the emulator executable (compiled once per module)."""
    builder = tc_emulator.Builder(tmp_path_factory.mktemp("gemm-emulator"), "gemm", GEMM_PART)

    def build(family: str, dtype: str, fault: int = 0) -> str:
        return str(builder.build(f"{family}_{dtype}_{fault}", EMU_FAMILY=0 if family == "tc" else 1,
                                 EMU_T=CXX[dtype], EMU_FAULT=fault))

    return build


class HostOperand:
    """A strided stack of matrices inside a host buffer, as the emulated kernel sees it."""

    def __init__(self, storage: np.ndarray, offset: int, shape: tuple, strides: tuple):
        self.storage, self.offset, self.shape, self.strides = storage, offset, shape, strides

    def view(self) -> np.ndarray:
        item = self.storage.itemsize
        return np.lib.stride_tricks.as_strided(
            self.storage[self.offset:], self.shape, [s * item for s in self.strides],
            writeable=False)

    def mat(self) -> mm.Mat:
        return mm.Mat(EMU_BASE + self.offset * self.storage.itemsize, self.strides[-2],
                      self.strides[-1], tuple(self.strides[:-2]))

    def footprint(self) -> np.ndarray:
        """Mask of the storage elements the view covers."""
        idx = np.lib.stride_tricks.as_strided(
            np.arange(self.storage.size - self.offset), self.shape,
            [s * 8 for s in self.strides])
        mask = np.zeros(self.storage.size, bool)
        mask[self.offset + idx.ravel()] = True
        return mask


def make_operand(rng: np.random.Generator, dtype: str, batch: tuple, rows: int, cols: int,
                 kind: str, broadcast: tuple = ()) -> HostOperand:
    """``kind``: "row" / "col" (16-byte aligned leading dim), "rowu" / "colu" (unaligned),
    "gen" (strided in both dims); ``broadcast``: batch dims given stride 0."""
    vec = 16 // np.dtype(NP[dtype]).itemsize
    if kind == "row":
        rs, cs = -(-cols // vec) * vec + vec, 1
    elif kind == "rowu":
        rs, cs = cols + 1, 1
    elif kind == "col":
        rs, cs = 1, -(-rows // vec) * vec + vec
    elif kind == "colu":
        rs, cs = 1, rows + 3
    else:
        rs, cs = 2 * cols + 3, 2
    span = max((rows - 1) * rs + (cols - 1) * cs + 1, 1)
    step = -(-span // vec) * vec
    bs: list[int] = []
    for i in reversed(range(len(batch))):
        bs.insert(0, 0 if i in broadcast else step)
        if i not in broadcast:
            step *= batch[i]
    offset = vec if kind in ("row", "col") else 3
    storage = rng.uniform(-1, 1, size=step + offset + vec).astype(NP[dtype])
    return HostOperand(storage, offset, tuple(batch) + (rows, cols), tuple(bs) + (rs, cs))


def emulate(exe: str, launch: mm.GemmLaunch, a: HostOperand, b: HostOperand, c: HostOperand,
            tmp_path, seed: int) -> None:
    """Run one planned launch on the emulator; c.storage receives the result."""
    m = re.fullmatch(r"ignis::gemm::gemm_(tc|simt)<[^,]+, (\d), (\d)>", launch.kernel)
    assert m, launch.kernel
    inp, out = tmp_path / "emu.in", tmp_path / "emu.out"
    with open(inp, "wb") as f:
        f.write(EMU_HEADER.pack(b"IGNEMU1\0", int(m.group(2)), int(m.group(3)), *launch.grid,
                                mm.THREADS, launch.shared_mem, seed, a.storage.nbytes,
                                b.storage.nbytes, c.storage.nbytes, EMU_BASE, launch.a, launch.b,
                                launch.c))
        f.write(launch.args)
        for op in (a, b, c):
            f.write(op.storage.tobytes())
    tc_emulator.run(exe, [inp, out], launch.kernel)
    c.storage[...] = np.frombuffer(out.read_bytes(), dtype=c.storage.dtype)


def run_emulated(emulator, tmp_path, family: str, dtype: str, batch: tuple, m: int, n: int,
                 k: int, kinds: tuple[str, str], alpha: float = 1.0, beta: float = 0.0,
                 seed: int = 0, a_bcast: tuple = (), b_bcast: tuple = ()) -> float:
    rng = np.random.default_rng(seed)
    a = make_operand(rng, dtype, batch, m, k, kinds[0], a_bcast)
    b = make_operand(rng, dtype, batch, k, n, kinds[1], b_bcast)
    c = make_operand(rng, dtype, batch, m, n, "row")
    if beta == 0:
        c.storage[...] = np.nan  # must not leak into the result
    before = c.storage.copy()
    c0 = c.view().astype(np.float64)
    ref, scale = reference(a.view(), b.view(), alpha, beta, c0)
    tf32 = family == "tc" and dtype == "float32"
    launches = mm.plan_own_gemm(getattr(dt, dtype), (9, 0), tf32, batch, m, n, k, a.mat(),
                                b.mat(), c.mat(), alpha, beta, family=family)
    for launch in launches:
        assert launch.kernel.startswith(f"ignis::gemm::gemm_{family}<")
        emulate(emulator(family, dtype), launch, a, b, c, tmp_path, seed)
    outside = ~c.footprint()
    assert np.array_equal(c.storage[outside].view(np.uint8), before[outside].view(np.uint8)), \
        "the kernel wrote outside the output view"
    return bound_check(c.view(), ref, scale, TF32_TOL if tf32 else TOL[dtype],
                       f"{launches[0].kernel} {batch} {m}x{n}x{k} {kinds}")


# Layout codes each kind leads to: row 0, col 1, rowu/gen 2 (checked in the planning tests).
EMU_SHAPES = [
    ((), 130, 67, 200, ("row", "row"), 1.0, 0.0),    # two tiles along m, k loop wraps the pipeline
    ((), 130, 67, 200, ("col", "col"), 1.5, 0.5),
    ((), 37, 150, 70, ("row", "col"), -1.0, 2.0),
    ((), 37, 150, 70, ("col", "row"), 1.0, 0.0),
    ((), 20, 30, 40, ("gen", "rowu"), 0.5, -1.0),
    ((2, 3), 17, 9, 33, ("row", "colu"), 1.0, 0.5),  # batch with broadcast dims
    ((), 5, 7, 0, ("row", "row"), 1.0, 0.5),         # k = 0: C = beta C
    ((), 1, 1, 1, ("row", "row"), 1.0, 0.0),
]
EMU_GROUPS = GROUPS


@pytest.mark.parametrize("family, dtype", EMU_GROUPS, ids=[f"{f}-{d}" for f, d in EMU_GROUPS])
@pytest.mark.exhaustive
def test_kernels_on_the_host_emulator(emulator, tmp_path, family, dtype):
    for i, (batch, m, n, k, kinds, alpha, beta) in enumerate(EMU_SHAPES):
        a_b, b_b = ((1,), (0,)) if batch else ((), ())
        run_emulated(emulator, tmp_path, family, dtype, batch, m, n, k, kinds, alpha, beta,
                     seed=i, a_bcast=a_b, b_bcast=b_b)


@pytest.mark.exhaustive
@pytest.mark.parametrize("family, dtype", EMU_GROUPS, ids=[f"{f}-{d}" for f, d in EMU_GROUPS])
def test_every_layout_pair_on_the_host_emulator(emulator, tmp_path, family, dtype):
    kinds = ["row", "col", "rowu", "gen"]
    for i, (ka, kb) in enumerate((x, y) for x in kinds for y in kinds):
        run_emulated(emulator, tmp_path, family, dtype, (), 131, 129, 150, (ka, kb), 1.0, 0.25,
                     seed=i)
    # more batch dims than one launch carries: the host loops over the outer ones
    run_emulated(emulator, tmp_path, family, dtype, (2,) * 7, 3, 4, 5, ("row", "row"), 1.0, 0.5,
                 seed=99, a_bcast=(1, 3, 5), b_bcast=(0, 2, 4, 6))


def test_tf32_emulation_differs_from_float32(emulator, tmp_path):
    # The emulator's TF32 really rounds: the tensor-core float32 kernel is measurably less exact
    # than the FMA kernel on the same data (and still within the TF32 bound).
    shape = ((), 64, 64, 256, ("row", "row"))
    tc = run_emulated(emulator, tmp_path, "tc", "float32", *shape, seed=5)
    fma = run_emulated(emulator, tmp_path, "simt", "float32", *shape, seed=5)
    assert fma < 1e-6 < tc < TF32_TOL


# The comparisons can fail: a wrong tensor-core primitive (a fault built into the emulator) or a
# kernel without one of its waits or barriers gives results that are caught.
# What a caught error says: results off, NaN where none belongs, or the emulator stopped the kernel.
CAUGHT = r"elements off|NaN pattern differs|emulator: "
FAULTS = {"mma-drops-a-k-term": 1, "ldmatrix-trans-does-not-transpose": 2,
          "cp-async-wait-leaves-a-group": 3}


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("fault", list(FAULTS))
@pytest.mark.exhaustive
def test_a_faulty_emulated_primitive_is_caught(emulator, tmp_path, fault, dtype):
    if dtype == "float32" and fault.startswith("ldmatrix"):
        pytest.skip("the TF32 kernel loads its fragments without ldmatrix")

    def faulty(family: str, dt_name: str) -> str:
        return emulator(family, dt_name, FAULTS[fault])

    with pytest.raises(AssertionError, match=CAUGHT):
        run_emulated(faulty, tmp_path, "tc", dtype, (), 130, 67, 200, ("row", "row"))


MUTATIONS = {  # name: (family, text of matmul.cu, replacement)
    "tc-without-cp-async-wait": ("tc", "tc::cp_async_wait<STAGES - 2>();", ""),
    "tc-without-barrier": ("tc", "__syncthreads();              // ...and everyone's", "//"),
    "tc-b-fragments-not-transposed": ("tc", "tc::ldmatrix_x4_trans(r, bs", "tc::ldmatrix_x4(r, bs"),
    "simt-without-barrier": ("simt", "    }\n    __syncthreads();\n  }\n\n  T* C = c + oc;",
                             "    }\n  }\n\n  T* C = c + oc;"),
}


@pytest.mark.parametrize("mutation", list(MUTATIONS))
@pytest.mark.exhaustive
def test_a_broken_kernel_is_caught(tmp_path, mutation):
    family, text, replacement = MUTATIONS[mutation]
    src = tmp_path / "cuda_src"
    shutil.copytree(_sources.cuda_src_dir(), src)
    kernel = (src / "matmul.cu").read_text()
    assert kernel.count(text) == 1, f"{mutation}: the text to change is not in matmul.cu once"
    (src / "matmul.cu").write_text(kernel.replace(text, replacement))
    builder = tc_emulator.Builder(tmp_path, "gemm", GEMM_PART, cuda_src=src)
    dtype = "bfloat16" if family == "tc" else "float32"

    def broken(fam: str, dt_name: str) -> str:
        return str(builder.build(f"{fam}_{dt_name}", EMU_FAMILY=0 if fam == "tc" else 1,
                                 EMU_T=CXX[dt_name]))

    with pytest.raises(AssertionError, match=CAUGHT):
        run_emulated(broken, tmp_path, family, dtype, (), 130, 67, 200, ("row", "row"))


def test_shared_memory_plan_matches_the_kernel(emulator):
    for dtype in ("float16", "bfloat16", "float32"):
        out = tc_emulator.run(emulator("tc", dtype), ["--smem"], timeout=60)
        for line in out.stdout.split("\n"):
            if line.strip():
                la, lb, nbytes = map(int, line.split())
                assert mm._tc_smem_bytes(getattr(dt, dtype), la, lb) == nbytes, (dtype, la, lb)


# --- on the GPU ----------------------------------------------------------------------------------

ENGINES = ["cublas", "own", "own-simt"]


@pytest.fixture(params=ENGINES)
def engine(request):
    """Which engine runs the products: cuBLAS, the own kernels (tensor cores where the dtype
    allows) or the own FMA kernels for every dtype. TF32 is off."""
    if not HAS_GPU:
        pytest.skip("needs a CUDA GPU")
    saved = (mm.get_cublas_enabled(), mm.get_allow_tf32(), mm._force_family)
    if request.param == "cublas":
        if not mm.cublas_available():
            pytest.skip(f"cuBLAS is not installed ({_cublas.unavailable_reason()})")
        mm.set_cublas_enabled(True)
    else:
        mm.set_cublas_enabled(False)
        mm._force_family = "simt" if request.param == "own-simt" else None
    mm.set_allow_tf32(False)
    yield request.param
    mm.set_cublas_enabled(saved[0])
    mm.set_allow_tf32(saved[1])
    mm._force_family = saved[2]


def rand(rng: np.random.Generator, shape: tuple, dtype: str) -> np.ndarray:
    """Random data exactly representable in ``dtype`` (magnitudes <= 1, never all zero)."""
    return rng.uniform(-1, 1, size=shape).astype(NP[dtype])


def dev(x: np.ndarray, dtype: str) -> ignis.NvArray:
    return ignis.NvArray.from_host(np.ascontiguousarray(x), dtype=dtype, device=CUDA)


def check_out_views(a, b, x, y, dtype: str, picks: dict, what: str, rng) -> None:
    """``matmul(a, b, alpha=1, beta=0.5, out=view)`` for each ``picks`` entry ``name: (storage
    shape, view of it)``: the view against NumPy, and nothing outside it changed."""
    for name, (shape, pick) in picks.items():
        big0 = rand(rng, shape, dtype)
        big = dev(big0, dtype)
        view = pick(big)
        ignis.matmul(a, b, alpha=1.0, beta=0.5, out=view)
        ref, scale = reference(x, y, 1.0, 0.5, pick(big0))
        bound_check(view.to_host(), ref, scale, TOL[dtype], f"{what} out view {name}")
        outside = np.ones(shape, bool)
        pick(outside)[...] = False
        assert big.to_host()[outside].tobytes() == big0[outside].tobytes(), \
            f"{what}: matmul wrote outside the out view {name}"


def torch_matmul(x: np.ndarray, y: np.ndarray, dtype: str, tf32: bool = False) -> np.ndarray | None:
    """torch's product of the same data on the GPU (None without torch)."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    tdt = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
           "float64": torch.float64}[dtype]
    flags = torch.backends.cuda.matmul
    names = ("allow_tf32", "allow_fp16_reduced_precision_reduction",
             "allow_bf16_reduced_precision_reduction")
    old = {name: getattr(flags, name) for name in names if hasattr(flags, name)}
    for name in old:  # float32 accumulation throughout, TF32 only when asked for
        setattr(flags, name, tf32 if name == "allow_tf32" else False)
    try:
        tx = torch.from_numpy(np.asarray(x, np.float64)).to("cuda").to(tdt)
        ty = torch.from_numpy(np.asarray(y, np.float64)).to("cuda").to(tdt)
        return torch.matmul(tx, ty).to(torch.float64).cpu().numpy()
    finally:
        for name, value in old.items():
            setattr(flags, name, value)


MKN = [(1, 1, 1), (1, 33, 7), (7, 33, 1), (33, 7, 127), (127, 1000, 33), (1000, 127, 1000),
       (130, 200, 67), (257, 64, 129)]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("mkn", MKN, ids=[f"{m}x{k}x{n}" for m, k, n in MKN])
def test_products_match_float64_and_torch(engine, dtype, mkn):
    m, k, n = mkn
    rng = np.random.default_rng(m * 7919 + k * 31 + n)
    x, y = rand(rng, (m, k), dtype), rand(rng, (k, n), dtype)
    got = (dev(x, dtype) @ dev(y, dtype)).to_host()
    assert got.dtype == NP[dtype] and got.shape == (m, n)
    ref, scale = reference(x, y)
    bound_check(got, ref, scale, TOL[dtype], f"{engine} {dtype} {mkn}")
    theirs = torch_matmul(x, y, dtype)
    if theirs is not None:  # torch meets the same bound, and the two agree within twice it
        bound_check(theirs, ref, scale, TOL[dtype], f"torch {dtype} {mkn}")
        bound_check(got, theirs, scale, 2 * TOL[dtype], f"{engine} vs torch {dtype} {mkn}")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", FLOATS)
def test_transposed_and_strided_views(engine, dtype):
    rng = np.random.default_rng(11)
    m, k, n = 75, 136, 61
    xa = rand(rng, (k + 3, m + 5), dtype)  # A^T storage; leading dim 80 is 16-byte aligned
    za = rand(rng, (m + 1, k + 3), dtype)  # A storage with rows of k + 3
    wa = rand(rng, (2 * m, 2 * k), dtype)
    xb = rand(rng, (n + 2, k + 8), dtype)  # B^T storage
    zb = rand(rng, (k, n + 3), dtype)
    wb = rand(rng, (n, 2 * k), dtype)
    XA, ZA, WA, XB, ZB, WB = (dev(v, dtype) for v in (xa, za, wa, xb, zb, wb))
    a_views = {
        "col": (XA.T[:m, :k], xa.T[:m, :k]),  # column-major, aligned
        "col+odd": (XA.T[1:m + 1, 2:k + 2], xa.T[1:m + 1, 2:k + 2]),  # column-major, odd offset
        "row+odd": (ZA[1:, 3:], za[1:, 3:]),  # row-major, odd offset and leading dim
        "step": (WA[::2, ::2], wa[::2, ::2]),  # strided in both dims
    }
    b_views = {
        "col": (XB.T[:k, :n], xb.T[:k, :n]),
        "row+odd": (ZB[:, 1:n + 1], zb[:, 1:n + 1]),
        "step": (WB[:, ::2].T, wb[:, ::2].T),
    }
    for an, (av, ah) in a_views.items():
        for bn, (bv, bh) in b_views.items():
            assert av.shape == (m, k) and bv.shape == (k, n)
            got = (av @ bv).to_host()
            ref, scale = reference(ah, bh)
            bound_check(got, ref, scale, TOL[dtype], f"{engine} {dtype} a={an} b={bn}")
    # the transpose flags give the same products as the views
    got = ignis.matmul(XA[:k, :m], XB[:n, :k], transpose_a=True, transpose_b=True).to_host()
    ref, scale = reference(xa[:k, :m].T, xb[:n, :k].T)
    bound_check(got, ref, scale, TOL[dtype], f"{engine} {dtype} transpose flags")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", FLOATS)
def test_batches_with_broadcast_dims(engine, dtype):
    rng = np.random.default_rng(5)
    cases = [((2, 1, 3, 17, 9), (4, 1, 9, 33)), ((3, 40, 50), (50, 20)), ((60, 70), (5, 70, 30)),
             ((2,) * 7 + (5, 6), (1, 2) * 3 + (1, 6, 7)), ((1, 1, 8, 8), (1, 8, 8))]
    for sa, sb in cases:
        x, y = rand(rng, sa, dtype), rand(rng, sb, dtype)
        got = (dev(x, dtype) @ dev(y, dtype)).to_host()
        ref, scale = reference(x, y)
        bound_check(got, ref, scale, TOL[dtype], f"{engine} {dtype} {sa} @ {sb}")
    # one column-major B shared by every matrix of the batch
    x, y = rand(rng, (3, 2, 33, 40), dtype), rand(rng, (21, 40), dtype)
    got = (dev(x, dtype) @ dev(y, dtype).T).to_host()
    ref, scale = reference(x, y.T)
    bound_check(got, ref, scale, TOL[dtype], f"{engine} {dtype} broadcast column-major B")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", FLOATS)
def test_alpha_beta_and_out(engine, dtype):
    rng = np.random.default_rng(3)
    m, k, n = 70, 90, 50
    x, y, c0 = rand(rng, (m, k), dtype), rand(rng, (k, n), dtype), rand(rng, (m, n), dtype)
    a, b = dev(x, dtype), dev(y, dtype)
    c = dev(c0, dtype)
    r = ignis.matmul(a, b, alpha=-0.75, beta=1.5, out=c)
    assert r is c
    ref, scale = reference(x, y, -0.75, 1.5, c0)
    bound_check(c.to_host(), ref, scale, TOL[dtype], f"{engine} {dtype} alpha/beta")
    # beta = 0 ignores the old contents, NaN included
    d = dev(np.full((m, n), np.nan), dtype)
    ignis.matmul(a, b, alpha=2.0, out=d)
    ref, scale = reference(x, y, 2.0)
    bound_check(d.to_host(), ref, scale, TOL[dtype], f"{engine} {dtype} beta=0 over NaN")
    # out as a column-major view with an offset, and as a view strided in both dims
    picks = {
        "T": ((n + 3, m + 2), lambda arr: arr.T[1:m + 1, 2:n + 2]),
        "step": ((2 * m + 2, 2 * n + 3), lambda arr: arr[: 2 * m : 2, 1 : 2 * n + 1 : 2]),
    }
    check_out_views(a, b, x, y, dtype, picks, f"{engine} {dtype}", rng)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", FLOATS)
def test_k_zero_gives_beta_times_out(engine, dtype):
    rng = np.random.default_rng(8)
    c0 = rand(rng, (2, 5, 6), dtype)
    a = ignis.zeros((2, 5, 0), dtype=dtype, device=CUDA)
    b = ignis.zeros((0, 6), dtype=dtype, device=CUDA)
    c = dev(c0, dtype)
    ignis.matmul(a, b, beta=0.5, out=c)
    np.testing.assert_array_equal(c.to_host().astype(np.float64), 0.5 * c0.astype(np.float64))
    d = dev(np.full((2, 5, 6), np.nan), dtype)
    ignis.matmul(a, b, out=d)
    np.testing.assert_array_equal(d.to_host().astype(np.float64), np.zeros((2, 5, 6)))
    assert (a @ b).to_host().astype(np.float64).tolist() == np.zeros((2, 5, 6)).tolist()
    empty = ignis.zeros((0, 3), dtype=dtype, device=CUDA)
    assert (empty @ ignis.zeros((3, 4), dtype=dtype, device=CUDA)).shape == (0, 4)


@pytest.mark.gpu
def test_out_aliasing_follows_the_front_end(engine):
    rng = np.random.default_rng(4)
    x = rand(rng, (6, 6), "float32")
    a = dev(x, "float32")
    ignis.matmul(a, a, out=a, beta=1.0)  # the front end copies the operands first
    ref, scale = reference(x, x, 1.0, 1.0, x)
    bound_check(a.to_host(), ref, scale, TOL["float32"], f"{engine} out is an operand")
    big0 = rand(rng, (8, 6), "float32")
    big = dev(big0, "float32")
    ignis.matmul(big[0:6], big[2:8], out=big[1:7])  # overlapping rows
    ref, scale = reference(big0[0:6], big0[2:8])
    got = big.to_host()
    bound_check(got[1:7], ref, scale, TOL["float32"], f"{engine} overlapping out")
    assert np.array_equal(got[0], big0[0]) and np.array_equal(got[7], big0[7])


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", FLOATS)
def test_nan_and_inf_propagate(engine, dtype):
    rng = np.random.default_rng(6)
    x = (np.abs(rand(rng, (40, 30), "float64")) + 0.25).astype(NP[dtype])
    y = (np.abs(rand(rng, (30, 20), "float64")) + 0.25).astype(NP[dtype])
    x[3, 7] = np.nan
    y[:, 5] = np.inf
    got = (dev(x, dtype) @ dev(y, dtype)).to_host().astype(np.float64)
    assert np.isnan(got[3]).all()
    others = np.delete(np.arange(40), 3)
    assert np.isposinf(got[others, 5]).all()
    ref, scale = reference(np.delete(x, 3, axis=0), np.delete(y, 5, axis=1))
    rest = np.delete(np.delete(got, 3, axis=0), 5, axis=1)
    bound_check(rest, ref, scale, TOL[dtype], f"{engine} {dtype}")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_products_accumulate_in_float32(engine, dtype):
    k = 8192
    a = ignis.ones((3, k), dtype=dtype, device=CUDA)
    b = ignis.ones((k, 2), dtype=dtype, device=CUDA)
    # a 16-bit running sum would stall at 2048 (float16) or 256 (bfloat16)
    assert (a @ b).to_host().astype(np.float64).tolist() == [[k, k]] * 3


@pytest.mark.gpu
@pytest.mark.parametrize("eng", ["cublas", "own"])
def test_tf32_off_is_float32_and_on_is_within_1e_3(eng):
    if not HAS_GPU:
        pytest.skip("needs a CUDA GPU")
    if eng == "cublas" and not mm.cublas_available():
        pytest.skip("cuBLAS is not installed")
    saved = (mm.get_cublas_enabled(), mm.get_allow_tf32())
    rng = np.random.default_rng(12)
    x, y = rand(rng, (512, 768), "float32"), rand(rng, (768, 384), "float32")
    ref, scale = reference(x, y)
    a, b = dev(x, "float32"), dev(y, "float32")
    try:
        mm.set_cublas_enabled(eng == "cublas")
        assert mm.get_allow_tf32() is False
        off = bound_check((a @ b).to_host(), ref, scale, TOL["float32"], f"{eng} TF32 off")
        mm.set_allow_tf32(True)
        got = (a @ b).to_host().astype(np.float64)
        on = bound_check(got, ref, scale, TF32_TOL, f"{eng} TF32 on")
        rms = float(np.sqrt(np.mean(((got - ref) / scale) ** 2)))
        assert rms <= TF32_RMS, rms
        if eng == "own":  # the own kernels switch to TF32 tensor cores, measurably
            assert on > 10 * max(off, 1e-7), (on, off)
        theirs = torch_matmul(x, y, "float32", tf32=True)
        if theirs is not None:
            bound_check(theirs, ref, scale, TF32_TOL, "torch TF32")
    finally:
        mm.set_cublas_enabled(saved[0])
        mm.set_allow_tf32(saved[1])


@pytest.mark.gpu
def test_products_follow_the_current_stream_and_threads(engine):
    rng = np.random.default_rng(9)
    xs = [rand(rng, (300, 200), "float32") for _ in range(4)]
    ys = [rand(rng, (200, 100), "float32") for _ in range(4)]
    s = ignis.Stream()
    with s:
        a, b = dev(xs[0], "float32"), dev(ys[0], "float32")
        c = a @ b
        for _ in range(3):
            c = ignis.matmul(a, b, beta=1.0, out=c)  # ordered on s: 4 a@b in the end
    s.synchronize()
    ref, scale = reference(xs[0], ys[0], 4.0)
    bound_check(c.to_host(), ref, 4 * scale, TOL["float32"], f"{engine} on a side stream")

    results: dict[int, np.ndarray] = {}
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            ignis.Device(0).set_current()
            with ignis.Stream():
                a, b = dev(xs[i], "float32"), dev(ys[i], "float32")
                out = a @ b
                for _ in range(5):
                    out = a @ b
                results[i] = out.to_host()
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for i in range(4):
        ref, scale = reference(xs[i], ys[i])
        bound_check(results[i], ref, scale, TOL["float32"], f"{engine} thread {i}")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", FLOATS)
def test_own_kernels_match_cublas(dtype):
    """Both engines agree within their bounds on a product large enough to use many tiles."""
    if not HAS_GPU:
        pytest.skip("needs a CUDA GPU")
    if not mm.cublas_available():
        pytest.skip("cuBLAS is not installed")
    rng = np.random.default_rng(13)
    x, y = rand(rng, (2, 513, 700), dtype), rand(rng, (700, 389), dtype)
    a, b = dev(x, dtype), dev(y, dtype)
    saved = mm.get_cublas_enabled()
    try:
        mm.set_cublas_enabled(True)
        blas = (a @ b).to_host()
        mm.set_cublas_enabled(False)
        own = (a @ b).to_host()
    finally:
        mm.set_cublas_enabled(saved)
    ref, scale = reference(x, y)
    bound_check(blas, ref, scale, TOL[dtype], f"cuBLAS {dtype}")
    bound_check(own, ref, scale, TOL[dtype], f"own {dtype}")
    bound_check(own, blas.astype(np.float64), scale, 2 * TOL[dtype], f"own vs cuBLAS {dtype}")


def test_cublas_plans_are_reused_only_for_the_same_layout(monkeypatch):
    """A repeated product reuses its remembered cuBLAS calls with the new operands' addresses;
    another layout, a switch or an operand that needs a copy gets a plan of its own (or none)."""
    from ignis._array._backend import get_backend

    cpu = get_backend("cpu")
    arrays = []
    lib = HostBlas(lambda: [x._storage for x in arrays])
    monkeypatch.setattr(_cublas, "load", lambda: lib)
    monkeypatch.setattr(mm, "_cublas_enabled", True)
    monkeypatch.setattr(mm, "_force_family", None)
    monkeypatch.setattr(mm, "_allow_tf32", False)
    ignis.clear_caches()  # (the plans counted below start from none)
    monkeypatch.setattr(mm, "_lt_enabled", False)  # the host model stands in for cuBLAS only
    monkeypatch.setattr(mm, "activate", lambda device: None)  # no device behind the model
    backend = types.SimpleNamespace(data_ptr=cpu.data_ptr, copy=cpu.copy, gpu=None,
                                    stream=types.SimpleNamespace(ptr=0))
    rng = np.random.default_rng(7)

    def product(x, y, b_view=lambda t: t, alpha=1.0):
        xa = ignis.NvArray.from_host(x, device="cpu")
        yb = b_view(ignis.NvArray.from_host(y, device="cpu"))
        out = ignis.empty((x.shape[0], yb.shape[1]), dtype="float32", device="cpu")
        arrays[:] = [xa, yb, out]
        mm.matmul(backend, out, xa, yb, alpha, 0.0)
        ref, scale = reference(x, yb.to_host(), alpha)
        bound_check(out.to_host(), ref, scale, TOL["float32"], "planned product")

    for _ in range(3):  # first call plans, the next two replay with new data and addresses
        product(rng.uniform(-1, 1, (5, 7)).astype(np.float32),
                rng.uniform(-1, 1, (7, 6)).astype(np.float32))
    assert len(mm._blas_plans) == 1 and len(lib.calls) == 3
    product(rng.uniform(-1, 1, (5, 7)).astype(np.float32),
            rng.uniform(-1, 1, (6, 7)).astype(np.float32), b_view=lambda t: t.T)
    assert len(mm._blas_plans) == 2 and lib.calls[-1][0] == _cublas.CUBLAS_OP_T  # B^T first
    product(rng.uniform(-1, 1, (5, 7)).astype(np.float32),
            rng.uniform(-1, 1, (7, 6)).astype(np.float32), alpha=-0.5)
    assert len(mm._blas_plans) == 3  # alpha is part of the plan
    monkeypatch.setattr(mm, "_allow_tf32", True)
    product(rng.uniform(-1, 1, (5, 7)).astype(np.float32),
            rng.uniform(-1, 1, (7, 6)).astype(np.float32))
    assert len(mm._blas_plans) == 4
    assert lib.calls[-1][9] == _cublas.CUBLAS_COMPUTE_32F_FAST_TF32
    # an operand with a stride in both dims is copied first: never remembered
    compact = mm._compact_copy

    def seen_copy(backend, arr, keep):  # the host model may read the copy too
        mat = compact(backend, arr, keep)
        arrays.append(keep[-1])
        return mat

    monkeypatch.setattr(mm, "_compact_copy", seen_copy)
    product(rng.uniform(-1, 1, (5, 7)).astype(np.float32),
            rng.uniform(-1, 1, (7, 12)).astype(np.float32), b_view=lambda t: t[:, ::2])
    assert len(mm._blas_plans) == 4


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", FLOATS)
def test_cublaslt_plans_match_the_cublas_calls(dtype, monkeypatch):
    """A remembered product runs through cuBLASLt from its first call on (2-D and batched,
    transposed operands); an operand that is not 256-byte aligned takes the cuBLAS call of the
    same plan; with cuBLASLt off every call is cuBLAS's. All within the product bounds."""
    if not HAS_GPU:
        pytest.skip("needs a CUDA GPU")
    from ignis import _cublaslt

    if not mm.cublas_available() or _cublaslt.load() is None:
        pytest.skip("cuBLASLt is not installed")
    ignis.clear_caches()  # (the plans looked at below are this test's)
    rng = np.random.default_rng(17)
    x, y = rand(rng, (3, 65, 33), dtype), rand(rng, (47, 33), dtype)
    a, b = dev(x, dtype), dev(y, dtype)
    for lt in (True, False):
        monkeypatch.setattr(mm, "_lt_enabled", lt)
        for _ in range(2):  # planned, then replayed
            for got, xs, what in ((a[0] @ b.T, x[0], "2-D"), (a @ b.T, x, "batched"),
                                  (a[1, 1:] @ b.T, x[1, 1:], "unaligned")):
                ref, scale = reference(xs, y.T)
                bound_check(got.to_host(), ref, scale, TOL[dtype], f"{what} lt={lt} {dtype}")
    planned = [p for k, p in mm._blas_plans.items() if k[-1]]  # keys end with _lt_enabled
    assert planned and any(p.lt_plan is not None for p in planned), "no product ran on cuBLASLt"
    assert all(p.lt_plan is None for k, p in mm._blas_plans.items() if not k[-1])


# --- the cuBLASLt plans and epilogues, checked against a host model of cuBLASLt -----------------


class HostLt:
    """Stands in for :class:`ignis._cublaslt.CublasLtLibrary` on host memory: a plan records its
    column-major description, ``matmul`` computes what cuBLASLt documents for it (epilogues
    included) through :class:`HostBlas`'s operand reader, so the row-major to column-major
    mapping of products, bias epilogues and bias-gradient epilogues is checked without a GPU."""

    def __init__(self, blas):
        self.blas = blas
        self.plans, self.calls = [], []

    def handle(self, device):
        return 99

    def plan(self, dtype, compute, transa, transb, m, n, k, lda, ldb, ldc, batch=1,
             stride_a=0, stride_b=0, stride_c=0, epilogue=1, *, handle):
        assert handle == 99
        desc = types.SimpleNamespace(args=(dtype, transa, transb, m, n, k, lda, ldb, ldc, batch,
                                           stride_a, stride_b, stride_c),
                                     epilogue=epilogue, workspace=0)
        self.plans.append(desc)
        return desc

    def matmul(self, handle, plan, alpha, a, b, beta, c, bias, workspace, stream):
        from ignis import _cublaslt

        dtype, ta, tb, m, n, k, lda, ldb, ldc, batch, sa, sb, sc = plan.args
        np_t = HostBlas.TYPES[dtype]
        item = np.dtype(np_t).itemsize
        self.calls.append((plan.epilogue, ta, tb, m, n, k, batch))
        for i in range(batch):
            A = self.blas._matrix(a + i * sa * item, np_t, m, k, lda, ta)[0].astype(np.float64)
            B = self.blas._matrix(b + i * sb * item, np_t, k, n, ldb, tb)[0].astype(np.float64)
            C, offsets, mem = self.blas._matrix(c + i * sc * item, np_t, m, n, ldc,
                                                _cublas.CUBLAS_OP_N)
            res = alpha._obj.value * (A @ B)
            if beta._obj.value != 0:
                res = res + beta._obj.value * C.astype(np.float64)
            if plan.epilogue == _cublaslt.EPILOGUE_BIAS:  # one value per row of D
                vec = np.frombuffer((ctypes.c_char * (m * item)).from_address(bias), np_t)
                res = res + vec.astype(np.float64)[:, None]
            elif plan.epilogue in (_cublaslt.EPILOGUE_BGRADA, _cublaslt.EPILOGUE_BGRADB):
                sums = A.sum(axis=1) if plan.epilogue == _cublaslt.EPILOGUE_BGRADA else B.sum(0)
                vec = np.frombuffer((ctypes.c_char * (len(sums) * item)).from_address(bias), np_t)
                vec[...] = sums.astype(np_t)
            mem[offsets] = res.astype(np_t)


def _aligned(values: np.ndarray, dtype: str) -> ignis.NvArray:
    """A CPU NvArray holding ``values`` at a 256-byte aligned address (what cuBLASLt's plans
    assume), as a view into a larger buffer."""
    item = np.dtype(NP[dtype]).itemsize
    base = ignis.zeros(values.size + 256 // item, dtype=dtype, device="cpu")
    skip = (-ignis._array._backend.get_backend("cpu").data_ptr(base) % 256) // item
    view = base[skip : skip + values.size].reshape(values.shape)
    view[...] = ignis.NvArray.from_host(values, dtype=dtype, device="cpu")
    return view


@pytest.fixture
def host_lt(monkeypatch):
    """cuBLAS and cuBLASLt replaced by the host models, on CPU arrays; yields (lt, backend,
    arrays), where ``arrays`` lists what the models may read and write."""
    from ignis._array._backend import get_backend

    from ignis import _cublaslt

    cpu = get_backend("cpu")
    arrays = []
    blas = HostBlas(lambda: [x._storage for x in arrays])
    lt = HostLt(blas)
    monkeypatch.setattr(_cublas, "load", lambda: blas)
    monkeypatch.setattr(_cublaslt, "load", lambda: lt)
    for name, value in (("_cublas_enabled", True), ("_lt_enabled", True), ("_allow_tf32", False),
                        ("_force_family", None)):
        monkeypatch.setattr(mm, name, value)
    ignis.clear_caches()  # (the plans below are the host model's)
    monkeypatch.setattr(mm, "activate", lambda device: None)
    backend = types.SimpleNamespace(data_ptr=cpu.data_ptr, copy=cpu.copy, gpu=None,
                                    stream=types.SimpleNamespace(ptr=0), alloc=None)
    yield lt, backend, arrays


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_cublaslt_bias_and_bias_gradient_epilogues_on_a_host_model(host_lt, dtype):
    lt, backend, arrays = host_lt
    from ignis import _cublaslt

    rng = np.random.default_rng(21)
    rows, k, n = 9, 7, 5
    x, w, b = rand(rng, (rows, k), dtype), rand(rng, (n, k), dtype), rand(rng, (n,), dtype)
    xa, wa, ba = _aligned(x, dtype), _aligned(w, dtype), _aligned(b, dtype)
    out = _aligned(np.zeros((rows, n), NP[dtype]), dtype)
    arrays[:] = [xa, wa, ba, out]
    assert mm.matmul_bias(backend, out, xa, wa.T, ba)  # fused: x @ w.T + b in one call
    x64, w64, b64 = (v.astype(np.float64) for v in (x, w, b))
    bound_check(out.to_host(), x64 @ w64.T + b64, np.abs(x64) @ np.abs(w64).T + np.abs(b64),
                TOL[dtype], "bias epilogue")
    assert lt.calls[-1][0] == _cublaslt.EPILOGUE_BIAS

    g = rand(rng, (rows, n), dtype)
    ga = _aligned(g, dtype)
    gw, gb = _aligned(np.zeros((n, k), NP[dtype]), dtype), _aligned(np.zeros(n, NP[dtype]), dtype)
    arrays[:] = [xa, ga, gw, gb]
    assert mm.matmul_row_sums(backend, gw, gb, ga.T, xa)  # grad_weight and grad_bias
    g64 = g.astype(np.float64)
    bound_check(gw.to_host(), g64.T @ x64, np.abs(g64).T @ np.abs(x64), TOL[dtype], "weight grad")
    bound_check(gb.to_host(), g64.sum(0), np.abs(g64).sum(0), TOL[dtype], "bias grad")
    assert lt.calls[-1][0] == _cublaslt.EPILOGUE_BGRADB  # g is cuBLAS's second operand
    # a column-major result: the bias would run along the wrong axis, so no fused plan
    col = _aligned(np.zeros((n, rows), NP[dtype]), dtype).T
    arrays[:] = [xa, wa, ba, col]
    assert not mm.matmul_bias(backend, col, xa, wa.T, ba)
    # the row sums of a column-major result's first operand: BGRADA
    gw_col = _aligned(np.zeros((k, n), NP[dtype]), dtype).T
    arrays[:] = [xa, ga, gw_col, gb]
    assert mm.matmul_row_sums(backend, gw_col, gb, ga.T, xa)
    assert lt.calls[-1][0] == _cublaslt.EPILOGUE_BGRADA
    bound_check(gw_col.to_host(), g64.T @ x64, np.abs(g64).T @ np.abs(x64), TOL[dtype], "col")
    bound_check(gb.to_host(), g64.sum(0), np.abs(g64).sum(0), TOL[dtype], "bias grad (col)")
    # a bias off the 256-byte grid: no fused call (the backend then runs the unfused default)
    shifted = _aligned(np.concatenate([np.zeros(1, NP[dtype]), b]), dtype)[1:]
    arrays[:] = [xa, wa, shifted, out]
    made = len(lt.calls)
    assert not mm.matmul_bias(backend, out, xa, wa.T, shifted)
    assert len(lt.calls) == made


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_remembered_products_run_on_cublaslt_plans_on_a_host_model(host_lt, dtype):
    lt, backend, arrays = host_lt
    rng = np.random.default_rng(23)
    x, y = rand(rng, (3, 6, 5), dtype), rand(rng, (4, 5), dtype)
    xa, ya = _aligned(x, dtype), _aligned(y, dtype)
    for _ in range(2):  # the first call plans (and already runs on cuBLASLt), the second replays
        out = _aligned(np.zeros((3, 6, 4), NP[dtype]), dtype)
        arrays[:] = [xa, ya, out]
        mm.matmul(backend, out, xa, ya.T.broadcast_to((3, 5, 4)), 1.0, 0.0)  # hook: one batch
        x64, y64 = x.astype(np.float64), y.astype(np.float64)
        bound_check(out.to_host(), x64 @ y64.T, np.abs(x64) @ np.abs(y64).T, TOL[dtype], "lt")
    assert len(lt.plans) == 1 and len(lt.calls) == 2 and lt.calls[-1][-1] == 3  # one batched call
    assert not lt.blas.calls  # cublasGemmStridedBatchedEx was not needed
    # an operand off the 256-byte grid takes the cuBLAS call of the same plan
    out = _aligned(np.zeros((2, 6, 4), NP[dtype]), dtype)
    arrays[:] = [xa, ya, out]
    mm.matmul(backend, out, xa[1:], ya.T.broadcast_to((2, 5, 4)), 1.0, 0.0)
    bound_check(out.to_host(), x64[1:] @ y64.T, np.abs(x64[1:]) @ np.abs(y64).T, TOL[dtype],
                "unaligned")
    assert lt.blas.calls and len(lt.calls) == 2
