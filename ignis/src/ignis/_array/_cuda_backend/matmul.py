"""Matrix products of the CUDA backend: ``out = alpha * a @ b + beta * out`` over stacks.

Two engines give the same results (within each dtype's rounding):

* **cuBLAS** (``cublasGemmStridedBatchedEx`` through :mod:`ignis._cublas`) where the library is
  installed and enabled. NvArrays are row-major and cuBLAS is column-major, so a row-major
  ``C = A @ B`` is computed as the column-major ``C^T = B^T @ A^T``; transposed views become
  transpose flags, never copies. Operands whose last two dimensions are neither row- nor
  column-major (one stride 1, the other a valid leading dimension) are copied first.
  A product that repeats (same dtypes, shapes, strides, alpha, beta, device and switches) is
  remembered (:data:`_blas_plans`) and replayed with the new addresses; where cuBLASLt loads
  (:mod:`ignis._cublaslt`) it then runs as one ``cublasLtMatmul`` with the algorithm chosen the
  first time, for 256-byte aligned operands. cuBLASLt's epilogues also fuse a bias into a
  product and a bias gradient alongside one (:func:`matmul_bias`, :func:`matmul_row_sums`).
* **the library's own kernels** (``cuda_src/matmul.cu``): tensor cores (mma.sync) for float16 and
  bfloat16 on sm_80 and newer, and for float32 when TF32 is allowed; FMA kernels otherwise. They
  take any strides, so nothing is copied. On compute capability 9.0 the ``matmul.wgmma``
  setting (off by default) runs float16/bfloat16 on ``gemm_wgmma`` instead (warpgroup MMA fed
  by TMA, ``cuda_src/gemm_sm90.cu``, :mod:`.matmul_sm90`) where TMA can read both operands.

Accumulation: float32 for float16/bfloat16, float64 for float64; float32 uses true FP32 unless
:func:`set_allow_tf32` allows TF32 tensor cores (10-bit mantissa inputs, ~1e-3 relative error).

Switches (module-level, shared by all threads): :func:`set_allow_tf32` / :func:`get_allow_tf32`,
:func:`set_cublas_enabled` / :func:`get_cublas_enabled` / :func:`cublas_available`; the
environment variable ``IGNIS_DISABLE_CUBLAS=1`` starts with cuBLAS disabled, and
``IGNIS_DISABLE_CUBLASLT=1`` keeps every cuBLAS product on ``cublasGemmStridedBatchedEx``.

Example::

    >>> ignis.set_allow_tf32(True)          # faster float32 products, ~1e-3 relative error
    >>> c = a @ b
"""

from __future__ import annotations

import ctypes
import itertools
import logging
import math
import os
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from ... import _cublas, _cublaslt, _tuning
from ... import _dtypes as dt
from ..._caches import PlanCache
from ..._device import activate
from ..._errors import IgnisError
from ._kernels import CTYPE, library_kernel

if TYPE_CHECKING:
    from ..array import NvArray

__all__ = [
    "matmul",
    "matmul_bias",
    "matmul_row_sums",
    "set_allow_tf32",
    "get_allow_tf32",
    "set_cublas_enabled",
    "get_cublas_enabled",
    "cublas_available",
    "plan_own_gemm",
    "GemmLaunch",
    "Mat",
]

logger = logging.getLogger("ignis")

SOURCE = "matmul.cu"
THREADS = 256
MAX_BATCH_DIMS = 6  # ignis::gemm::kMaxBatchDims
_GRID_YZ_MAX = 65535

# --- switches ----------------------------------------------------------------------------------

_allow_tf32 = False
_cublas_enabled = os.environ.get("IGNIS_DISABLE_CUBLAS", "").strip().lower() not in (
    "1", "true", "yes", "on",
)
# Tests only: force the own kernels of one family ("simt" or "tc") regardless of the dtype.
_force_family: str | None = None
# cuBLASLt serves repeated products (cached plans) and the fused bias epilogues where it loads;
# IGNIS_DISABLE_CUBLASLT=1 keeps every product on cublasGemmStridedBatchedEx.
_lt_enabled = os.environ.get("IGNIS_DISABLE_CUBLASLT", "").strip().lower() not in (
    "1", "true", "yes", "on",
)


def set_allow_tf32(flag: bool) -> None:
    """Allow (True) or forbid (False, the default) TF32 tensor cores for float32 matmul.

    TF32 rounds the inputs to a 10-bit mantissa (results within about 1e-3 relative of the
    float32 product) and runs several times faster on sm_80 and newer GPUs. Applies to cuBLAS
    and to the own kernels, in every thread.

    Example: ``ignis.set_allow_tf32(True)``.
    """
    global _allow_tf32
    if not isinstance(flag, bool):
        raise TypeError(f"set_allow_tf32: expected True or False, got {flag!r}")
    _allow_tf32 = flag


def get_allow_tf32() -> bool:
    """Whether float32 matmul may use TF32 tensor cores (see :func:`set_allow_tf32`)."""
    return _allow_tf32


def set_cublas_enabled(flag: bool) -> None:
    """Use cuBLAS for matmul where it is installed (True, the default unless the environment
    sets ``IGNIS_DISABLE_CUBLAS=1``) or always use ignis's own GEMM kernels (False).

    Example: ``ignis.set_cublas_enabled(False)`` to measure or test the own kernels.
    """
    global _cublas_enabled
    if not isinstance(flag, bool):
        raise TypeError(f"set_cublas_enabled: expected True or False, got {flag!r}")
    _cublas_enabled = flag


def get_cublas_enabled() -> bool:
    """Whether matmul may use cuBLAS (it still needs :func:`cublas_available`)."""
    return _cublas_enabled


def cublas_available() -> bool:
    """True when the cuBLAS library is installed and loads (whether or not it is enabled).

    Loading needs no GPU. Without it, every matmul runs on ignis's own kernels.
    """
    return _cublas.load() is not None


# --- operands ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Mat:
    """A stack of matrices as the engines see it.

    Attributes:
        ptr: device address of element (0, 0) of the first matrix.
        rs, cs: element strides of the two matrix dimensions (row, column).
        bs: element strides of the batch dimensions (0 where broadcast), one per batch dim.
    """

    ptr: int
    rs: int
    cs: int
    bs: tuple[int, ...]


def _element_strides(arr: NvArray) -> tuple[int, ...] | None:
    item = arr.dtype.itemsize
    if any(s % item for s in arr.strides):
        return None
    return tuple(s // item for s in arr.strides)


def _as_mat(backend: Any, arr: NvArray) -> Mat | None:
    """``arr`` as a :class:`Mat`, or None when its byte strides are not whole elements."""
    strides = _element_strides(arr)
    if strides is None:
        return None
    return Mat(backend.data_ptr(arr), strides[-2], strides[-1], strides[:-2])


def _compact_copy(backend: Any, arr: NvArray, keep: list[Any], pad_rows: bool = False) -> Mat:
    """A contiguous copy of ``arr``'s distinct matrices (broadcast batch dims stay broadcast).
    ``pad_rows``: each row starts a multiple of 16 bytes after the last (storage rows padded),
    as TMA copies need."""
    from .. import _creation

    shape = list(arr.shape)
    for i in range(arr.ndim - 2):
        if arr.strides[i] == 0:
            shape[i] = 1  # copy one matrix, broadcast it again below
    src = arr._view(arr._offset, tuple(shape), arr.strides)
    cols = shape[-1]
    per_16 = max(1, 16 // arr.dtype.itemsize)
    padded = -(-cols // per_16) * per_16 if pad_rows else cols
    storage = _creation._new((*shape[:-1], padded), arr.dtype, arr._device)
    tmp = storage if padded == cols else storage[..., :cols]
    backend.copy(tmp, src)
    keep.append(storage)
    m = _as_mat(backend, tmp)
    assert m is not None
    bs = tuple(0 if arr.strides[i] == 0 else m.bs[i] for i in range(arr.ndim - 2))
    return Mat(m.ptr, m.rs, m.cs, bs)


def collapse_batch(shape: tuple[int, ...], strides: list[tuple[int, ...]]) -> tuple[
        tuple[int, ...], list[tuple[int, ...]]]:
    """Drop size-1 batch dims and merge neighbours that every operand steps through evenly.

    ``strides`` holds one tuple of element strides per operand. Example: shape (2, 3) with
    strides (3, 1) for every operand becomes shape (6,) with stride (1,).
    """
    dims: list[tuple[int, list[int]]] = []
    for i, size in enumerate(shape):
        if size == 1:
            continue
        st = [s[i] for s in strides]
        prev = dims[-1][1] if dims else None
        if prev is not None and all(o == i * size for o, i in zip(prev, st, strict=True)):
            dims[-1] = (dims[-1][0] * size, st)
        else:
            dims.append((size, st))
    new_shape = tuple(d[0] for d in dims)
    new_strides = [tuple(d[1][j] for d in dims) for j in range(len(strides))]
    return new_shape, new_strides


# --- the hook ----------------------------------------------------------------------------------


class BlasCall(NamedTuple):
    """One ``cublasGemmStridedBatchedEx`` call of a product: the arguments of
    :meth:`CublasLibrary.gemm_strided_batched` after the handle and stream, the three matrix
    addresses given as byte offsets from the operands' bases (``first`` and ``second``:
    cuBLAS's operands, ``c`` the result; see :func:`_run_blas`)."""

    op_first: int
    op_second: int
    m: int
    n: int
    k: int
    alpha: Any  # a ctypes reference to the scale-type value
    offset_first: int
    type_first: int
    ld_first: int
    stride_first: int
    offset_second: int
    type_second: int
    ld_second: int
    stride_second: int
    beta: Any
    offset_c: int
    type_c: int
    ld_c: int
    stride_c: int
    count: int
    compute: int


class BlasPlan(NamedTuple):
    """A product cuBLAS runs: the library, whether its first operand is ``b`` (``swap``), the
    calls, and the cuBLASLt plan that replaces them where it has one (else None)."""

    library: Any
    swap: bool
    calls: tuple[BlasCall, ...]
    lt_plan: Any


class EpiloguePlan(NamedTuple):
    """A fused product of cuBLASLt: its plan, ``swap`` as in :class:`BlasPlan`, the scalars."""

    lt_plan: Any
    swap: bool
    alpha: Any
    beta: Any


# Plans of products cuBLAS ran without a temporary: (dtypes, shapes, strides, alpha, beta,
# device, switches) -> BlasPlan. A repeated product then only binds the three base addresses
# and calls cuBLAS (every training step repeats the same products).
_PLAN_LIMIT = 1024
_blas_plans = PlanCache(
    "cuda.matmul.blas_plans",
    _PLAN_LIMIT,
    "product's dtypes, shapes, strides, scalars and switches -> its cuBLAS calls",
)
_blas_plans_get = _blas_plans.get  # (a bound method: a C call, no attribute lookup per product)


def matmul(backend: Any, out: NvArray, a: NvArray, b: NvArray, alpha: float, beta: float) -> None:
    """The CUDA backend's matmul hook (contract: :meth:`ignis._array._backend.Backend.matmul`)."""
    gpu = backend.gpu
    key = (out._dtype, out._shape, out._strides, a._dtype, a._shape, a._strides, b._dtype,
           b._shape, b._strides, alpha, beta, gpu, _allow_tf32, _cublas_enabled, _force_family,
           _lt_enabled)
    plan = _blas_plans_get(key)
    if plan is not None and plan.library is _cublas.load():  # the library tests may reset
        _blas_plans.hits += 1
        activate(gpu)
        ptr = backend.data_ptr
        _run_plan(backend, backend.stream.ptr, plan, ptr(a), ptr(b), ptr(out))
        return
    _matmul_planned(backend, out, a, b, alpha, beta, key)


def _matmul_planned(backend: Any, out: NvArray, a: NvArray, b: NvArray, alpha: float,
                    beta: float, key: tuple[Any, ...]) -> None:
    """:func:`matmul` in full; remembers a cuBLAS plan under ``key`` when it needed no copy."""
    if out.numel == 0:
        return
    dtype = out.dtype
    if dtype not in CTYPE or a.dtype is not dtype or b.dtype is not dtype:
        raise IgnisError(  # the front end promotes first: reaching this is a bug
            f"matmul: the cuda backend expects operands of out's dtype {dtype.name}, got "
            f"{a.dtype.name} and {b.dtype.name}"
        )
    m, n = out.shape[-2], out.shape[-1]
    k = a.shape[-1]
    batch = tuple(out.shape[:-2])
    keep: list[Any] = []  # temporaries: alive until every launch is queued
    am = _as_mat(backend, a) or _compact_copy(backend, a, keep)
    bm = _as_mat(backend, b) or _compact_copy(backend, b, keep)
    target = out
    cm = _as_mat(backend, out)
    if cm is None:
        target = _scratch_like(backend, out, beta, keep)
        cm = _as_mat(backend, target)
    activate(backend.gpu)
    stream = backend.stream
    lib = _cublas.load() if (_cublas_enabled and _force_family is None and k > 0) else None
    done = False
    if lib is not None:
        done = _cublas_matmul(lib, backend, stream, dtype, batch, m, n, k, a, b, am, bm, cm,
                              target, alpha, beta, keep, key if target is out else None)
    if not done and _force_family is None and _tuning.current.matmul.wgmma:
        done = _wgmma_matmul(backend, stream, dtype, batch, m, n, k, a, b, am, bm, cm, alpha,
                             beta, keep)
    if not done:
        cc = backend.gpu.compute_capability
        for launch in plan_own_gemm(dtype, cc, _allow_tf32, batch, m, n, k, am, bm, cm,
                                    alpha, beta, family=_force_family):
            kernel = library_kernel(SOURCE, launch.kernel, backend.gpu)
            kernel.launch(launch.grid, THREADS, [launch.a, launch.b, launch.c, launch.args],
                          shared_mem=launch.shared_mem, stream=stream)
    if target is not out:
        backend.copy(out, target)


def _wgmma_matmul(backend: Any, stream: Any, dtype: dt.DType, batch: tuple[int, ...], m: int,
                  n: int, k: int, a: NvArray, b: NvArray, am: Mat, bm: Mat, cm: Mat,
                  alpha: float, beta: float, keep: list[Any]) -> bool:
    """Queue the product on the Hopper kernel ``gemm_wgmma`` (:mod:`.matmul_sm90`); False
    where it does not apply (the caller then runs the other own kernels). TF32 products take
    K-major operands only: an operand in the other layout is copied into it first (into
    ``keep``), a pass over it that costs far less than the product it lets run on wgmma."""
    from . import matmul_sm90  # (imported on first use: it imports this module)

    settings = _tuning.current.matmul
    sms = int(backend.gpu.multiprocessor_count) if settings.wgmma_persistent else None
    tf32 = _allow_tf32 and settings.wgmma_tf32 and dtype is dt.float32
    cc = backend.gpu.compute_capability
    if tf32 and cc == (9, 0):
        if not matmul_sm90.k_major(m, k, am, True, dtype.itemsize):
            am = _compact_copy(backend, a, keep, pad_rows=True)  # row-major: K innermost
        if not matmul_sm90.k_major(k, n, bm, False, dtype.itemsize):
            t = _compact_copy(backend, b.mT, keep, pad_rows=True)  # B^T row-major
            bm = Mat(t.ptr, t.cs, t.rs, t.bs)
    launch = matmul_sm90.plan_wgmma_gemm(dtype, cc, batch, m, n, k, am, bm, cm, alpha, beta,
                                         settings.wgmma_tile_n, sms, tf32)
    if launch is None:
        return False
    matmul_sm90.launch_wgmma(backend, stream, launch)
    return True


# --- fused epilogues (cuBLASLt) ----------------------------------------------------------------

# (kind, dtype, shapes, strides, device, switches) -> EpiloguePlan, or None where the product
# cannot take the epilogue (the caller then runs the unfused default).
_epilogue_plans = PlanCache(
    "cuda.matmul.epilogue_plans",
    _PLAN_LIMIT,
    "fused-bias product's layout -> its cuBLASLt plan (None: unfused)",
)
_EPILOGUE_DTYPES = (dt.float16, dt.bfloat16, dt.float32)


def matmul_bias(backend: Any, out: NvArray, a: NvArray, b: NvArray, bias: NvArray) -> bool:
    """``out = a @ b + bias`` (bias along rows) as one cuBLASLt call with the bias epilogue;
    False where that is not possible (the backend then runs the unfused default)."""
    return _epilogue(backend, "bias", out, a, b, bias)


def matmul_row_sums(backend: Any, out: NvArray, sums: NvArray, a: NvArray, b: NvArray) -> bool:
    """``out = a @ b`` and ``sums = a.sum(axis=1)`` as one cuBLASLt call with a bias-gradient
    epilogue; False where that is not possible (the backend then runs the unfused default)."""
    return _epilogue(backend, "row_sums", out, a, b, sums)


def _epilogue(backend: Any, kind: str, out: NvArray, a: NvArray, b: NvArray,
              vector: NvArray) -> bool:
    gpu = backend.gpu
    key = (kind, out._dtype, out._shape, out._strides, a._dtype, a._shape, a._strides,
           b._dtype, b._shape, b._strides, vector._dtype, vector._strides, gpu, _allow_tf32,
           _cublas_enabled, _force_family, _lt_enabled)
    entry = _epilogue_plans.get(key, _NOT_PLANNED)
    if entry is _NOT_PLANNED:
        activate(gpu)
        entry = _epilogue_plans.remember(key, _plan_epilogue(backend, kind, out, a, b, vector))
    else:
        _epilogue_plans.hits += 1
    if entry is None:
        return False
    ptr = backend.data_ptr
    pa, pb, pc, pv = ptr(a), ptr(b), ptr(out), ptr(vector)
    if (pa | pb | pc | pv) & 255:  # the plan's algorithm assumes 256-byte aligned operands
        return False
    lt_plan, swap, alpha, beta = entry
    activate(gpu)
    first, second = (pb, pa) if swap else (pa, pb)
    _lt_run(backend, lt_plan, alpha, first, second, beta, pc, pv, backend.stream.ptr)
    return True


_NOT_PLANNED: Any = object()


def _plan_epilogue(backend: Any, kind: str, out: NvArray, a: NvArray, b: NvArray,
                   vector: NvArray) -> Any:
    """The cuBLASLt plan of a fused product, or None where it cannot be fused."""
    dtype = out.dtype
    if (not (_cublas_enabled and _lt_enabled) or _force_family is not None
            or dtype not in _EPILOGUE_DTYPES or a.dtype is not dtype or b.dtype is not dtype
            or vector.dtype is not dtype or out.ndim != 2 or a.ndim != 2 or b.ndim != 2
            or vector.ndim != 1 or out.numel == 0 or a.shape[1] == 0
            or _cublas.load() is None or _cublaslt.load() is None):
        return None
    if vector.shape[0] > 1 and vector.strides[0] != dtype.itemsize:
        return None
    m, n = out.shape
    k = a.shape[1]
    am, bm, cm = _as_mat(backend, a), _as_mat(backend, b), _as_mat(backend, out)
    if am is None or bm is None or cm is None or max(m, n, k) > _INT_MAX:
        return None
    lays = (blas_layout(m, k, am.rs, am.cs), blas_layout(k, n, bm.rs, bm.cs),
            blas_layout(m, n, cm.rs, cm.cs))
    if None in lays or max(lay[1] for lay in lays) > _INT_MAX:
        return None
    swap, calls = _blas_calls(dtype, (), m, n, k, am, lays[0], bm, lays[1], cm, lays[2],
                              1.0, 0.0)
    if kind == "bias":
        # The epilogue adds one value per row of cuBLAS's column-major result: per column of
        # ``out`` exactly when ``out`` is row-major (computed as its transpose).
        if not swap:
            return None
        epilogue = _cublaslt.EPILOGUE_BIAS
    else:  # sums of ``a`` over k: cuBLAS's second operand when swapped, else its first
        epilogue = _cublaslt.EPILOGUE_BGRADB if swap else _cublaslt.EPILOGUE_BGRADA
    lt_plan = _lt_plain_plan(backend.gpu, calls, epilogue)
    if lt_plan is None:
        return None
    return EpiloguePlan(lt_plan, swap, calls[0].alpha, calls[0].beta)


def _scratch_like(backend: Any, out: NvArray, beta: float, keep: list[Any]) -> NvArray:
    from .. import _creation

    tmp = _creation._new(out.shape, out.dtype, out._device)
    if beta != 0:
        backend.copy(tmp, out)
    keep.append(tmp)
    return tmp


# --- cuBLAS ------------------------------------------------------------------------------------

# dtype -> (cudaDataType, compute type, scale type)
_BLAS_TYPES = {
    dt.float16: (_cublas.CUDA_R_16F, _cublas.CUBLAS_COMPUTE_32F, ctypes.c_float),
    dt.bfloat16: (_cublas.CUDA_R_16BF, _cublas.CUBLAS_COMPUTE_32F, ctypes.c_float),
    dt.float32: (_cublas.CUDA_R_32F, _cublas.CUBLAS_COMPUTE_32F, ctypes.c_float),
    dt.float64: (_cublas.CUDA_R_64F, _cublas.CUBLAS_COMPUTE_64F, ctypes.c_double),
    # complex: cgemm / zgemm through the same entry point (complex scale types)
    dt.complex64: (_cublas.CUDA_C_32F, _cublas.CUBLAS_COMPUTE_32F, _cublas.ComplexFloat),
    dt.complex128: (_cublas.CUDA_C_64F, _cublas.CUBLAS_COMPUTE_64F, _cublas.ComplexDouble),
}
_INT_MAX = 2**31 - 1
# Statuses after which the own kernels take over instead of failing the op.
_BLAS_FALLBACK = ("CUBLAS_STATUS_NOT_SUPPORTED", "CUBLAS_STATUS_ARCH_MISMATCH")


def blas_layout(rows: int, cols: int, rs: int, cs: int) -> tuple[str, int] | None:
    """``("row", ld)`` or ``("col", ld)`` when a rows x cols matrix with element strides
    (rs, cs) is a BLAS matrix (one stride 1, the other a leading dimension >= the extent it
    spans), else None. Strides of size-1 dimensions do not matter.

    Example: ``blas_layout(3, 4, 4, 1)`` is ``("row", 4)``; its transpose view
    ``blas_layout(4, 3, 1, 4)`` is ``("col", 4)``.
    """
    if (cs == 1 or cols == 1) and (rows == 1 or rs >= max(cols, 1)):
        return "row", (rs if rows > 1 else max(cols, 1))
    if (rs == 1 or rows == 1) and (cols == 1 or cs >= max(rows, 1)):
        return "col", (cs if cols > 1 else max(rows, 1))
    return None


def _cublas_matmul(lib: Any, backend: Any, stream: Any, dtype: dt.DType, batch: tuple[int, ...],
                   m: int, n: int, k: int, a: NvArray, b: NvArray, am: Mat, bm: Mat, cm: Mat,
                   target: NvArray, alpha: float, beta: float, keep: list[Any],
                   key: tuple[Any, ...] | None = None) -> bool:
    """Queue the product through cuBLAS; False when cuBLAS cannot take it (the caller then
    uses the own kernels). With ``key``, a product that needed no copy is remembered in
    :data:`_blas_plans`."""
    if max(m, n, k) > _INT_MAX:
        return False
    c_lay = blas_layout(m, n, cm.rs, cm.cs)
    if c_lay is None:  # e.g. an output view with a stride in both dims: compute, then copy
        scratch = _scratch_like(backend, target, beta, keep)
        if not _cublas_matmul(lib, backend, stream, dtype, batch, m, n, k, a, b, am, bm,
                              _as_mat(backend, scratch), scratch, alpha, beta, keep):
            return False
        backend.copy(target, scratch)
        return True
    copied = False
    a_lay = blas_layout(m, k, am.rs, am.cs)
    if a_lay is None:
        am, copied = _compact_copy(backend, a, keep), True
        a_lay = blas_layout(m, k, am.rs, am.cs)
    b_lay = blas_layout(k, n, bm.rs, bm.cs)
    if b_lay is None:
        bm, copied = _compact_copy(backend, b, keep), True
        b_lay = blas_layout(k, n, bm.rs, bm.cs)
    assert a_lay is not None and b_lay is not None
    if max(a_lay[1], b_lay[1], c_lay[1]) > _INT_MAX:
        return False
    swap, calls = _blas_calls(dtype, batch, m, n, k, am, a_lay, bm, b_lay, cm, c_lay,
                              alpha, beta)
    # (complex products stay on cublasGemmStridedBatchedEx: the cuBLASLt plans are real-only)
    remember = key is not None and not copied and dtype.kind != "c"
    # A remembered product runs through cuBLASLt from its first call on, so that every call
    # of it gives the same bits.
    lt_plan = _lt_plain_plan(backend.gpu, calls) if remember else None
    plan = BlasPlan(lib, swap, calls, lt_plan)
    try:
        _run_plan(backend, stream.ptr, plan, am.ptr, bm.ptr, cm.ptr)
    except _cublas.CublasError as exc:
        if exc.code in _BLAS_FALLBACK and len(calls) == 1:
            logger.debug("cuBLAS refused a %s matmul (%s); using ignis's own kernels",
                         dtype.name, exc)
            return False
        raise
    if remember:
        _blas_plans.remember(key, plan)
    return True


def _blas_calls(dtype: dt.DType, batch: tuple[int, ...], m: int, n: int, k: int,
                am: Mat, a_lay: tuple[str, int], bm: Mat, b_lay: tuple[str, int],
                cm: Mat, c_lay: tuple[str, int], alpha: float, beta: float
                ) -> tuple[bool, tuple[BlasCall, ...]]:
    """The ``cublasGemmStridedBatchedEx`` calls of one product, base addresses left out.

    Returns ``(swap, calls)``: ``swap`` says that cuBLAS's first operand is ``b`` (a row-major
    result is computed as ``C^T = B^T @ A^T``); each call is a :class:`BlasCall`.
    """
    if c_lay[0] == "row":
        # C^T (n x m, column-major) = B^T @ A^T: B's storage read column-major is B^T when B is
        # row-major (no transpose) and B when it is column-major (transpose); same for A.
        swap, first, second = True, (bm, b_lay), (am, a_lay)
        mm, nn = n, m
        op_first = _cublas.CUBLAS_OP_N if b_lay[0] == "row" else _cublas.CUBLAS_OP_T
        op_second = _cublas.CUBLAS_OP_N if a_lay[0] == "row" else _cublas.CUBLAS_OP_T
    else:
        # C (m x n, column-major) = A @ B directly.
        swap, first, second = False, (am, a_lay), (bm, b_lay)
        mm, nn = m, n
        op_first = _cublas.CUBLAS_OP_N if a_lay[0] == "col" else _cublas.CUBLAS_OP_T
        op_second = _cublas.CUBLAS_OP_N if b_lay[0] == "col" else _cublas.CUBLAS_OP_T

    dtype_code, compute, scale = _BLAS_TYPES[dtype]
    if dtype is dt.float32 and _allow_tf32:
        compute = _cublas.CUBLAS_COMPUTE_32F_FAST_TF32
    item = dtype.itemsize
    shape, (s1, s2, sc) = collapse_batch(batch, [first[0].bs, second[0].bs, cm.bs])
    # cuBLAS takes one batch stride per operand: the innermost batch dim goes to it, the
    # outer ones are looped over here. Negative strides are looped over too.
    if shape and min(s1[-1], s2[-1], sc[-1]) >= 0:
        inner, inner_strides = shape[-1], (s1[-1], s2[-1], sc[-1])
        outer = shape[:-1]
    else:
        inner, inner_strides = 1, (0, 0, 0)
        outer = shape
    # The scalars are read by cuBLAS on the host during the call; one pair serves every call.
    alpha_ref, beta_ref = ctypes.byref(scale(alpha)), ctypes.byref(scale(beta))
    calls = []
    for idx in itertools.product(*(range(s) for s in outer)):
        o1 = sum(i * s for i, s in zip(idx, s1, strict=False))
        o2 = sum(i * s for i, s in zip(idx, s2, strict=False))
        o3 = sum(i * s for i, s in zip(idx, sc, strict=False))
        for start in range(0, inner, _INT_MAX):
            count = min(inner - start, _INT_MAX)
            calls.append(BlasCall(
                op_first, op_second, mm, nn, k, alpha_ref,
                (o1 + start * inner_strides[0]) * item, dtype_code, first[1][1],
                inner_strides[0],
                (o2 + start * inner_strides[1]) * item, dtype_code, second[1][1],
                inner_strides[1],
                beta_ref, (o3 + start * inner_strides[2]) * item, dtype_code, c_lay[1],
                inner_strides[2], count, compute,
            ))
    return swap, tuple(calls)


def _run_plan(backend: Any, stream: int, plan: BlasPlan, pa: int, pb: int, pc: int) -> None:
    """Run a product planned by :func:`_cublas_matmul` on operands at ``pa``, ``pb`` and result
    at ``pc``: one cuBLASLt call where it has a plan and every address is 256-byte aligned (what
    its algorithms assume), else the cuBLAS calls."""
    lib, swap, calls, lt_plan = plan
    first, second = (pb, pa) if swap else (pa, pb)
    if lt_plan is not None and not (pa | pb | pc) & 255:
        call = calls[0]
        _lt_run(backend, lt_plan, call.alpha, first, second, call.beta, pc, 0, stream)
        return
    _run_blas(lib, lib.handle(backend.gpu), stream, calls, first, second, pc)


def _lt_run(backend: Any, lt_plan: Any, alpha: Any, first: int, second: int, beta: Any, c: int,
            vector: int, stream: int) -> None:
    """One cuBLASLt product with its workspace (allocated stream-ordered for the call)."""
    lt = _cublaslt.load()
    gpu = backend.gpu
    if lt_plan.workspace:
        scratch = backend.alloc(lt_plan.workspace)  # freed after the call, in stream order
        lt.matmul(lt.handle(gpu), lt_plan, alpha, first, second, beta, c, vector, scratch.ptr,
                  stream)
        del scratch
    else:
        lt.matmul(lt.handle(gpu), lt_plan, alpha, first, second, beta, c, vector, 0, stream)


def _lt_plain_plan(gpu: Any, calls: tuple[BlasCall, ...],
                   epilogue: int = _cublaslt.EPILOGUE_DEFAULT) -> Any:
    """The cuBLASLt plan of a product that is one cuBLAS call at offset 0 (None where cuBLASLt
    is off, missing or has no algorithm for it)."""
    lt = _cublaslt.load() if _lt_enabled else None
    if lt is None or len(calls) != 1:
        return None
    (op1, op2, mm, nn, k, _alpha, o1, t1, ld1, s1, o2, _t2, ld2, s2, _beta, oc, _tc, ldc, sc,
     count, compute) = calls[0]
    if o1 or o2 or oc:
        return None
    return lt.plan(t1, compute, op1, op2, mm, nn, k, ld1, ld2, ldc, count, s1, s2, sc,
                   epilogue, handle=lt.handle(gpu))


def _run_blas(lib: Any, handle: int, stream: int, calls: tuple[BlasCall, ...],
              first: int, second: int, c: int) -> None:
    """Issue the calls of :func:`_blas_calls` with cuBLAS's first and second operand and the
    result at base addresses ``first``, ``second`` and ``c``."""
    gemm = lib.gemm_strided_batched
    for (op1, op2, mm, nn, k, alpha, o1, t1, ld1, s1, o2, t2, ld2, s2, beta, oc, tc, ldc, sc,
         count, compute) in calls:
        gemm(handle, stream, op1, op2, mm, nn, k, alpha, first + o1, t1, ld1, s1,
             second + o2, t2, ld2, s2, beta, c + oc, tc, ldc, sc, count, compute)


# --- the own kernels ---------------------------------------------------------------------------

_ARGS = struct.Struct("<3q6qq" + f"{MAX_BATCH_DIMS}q" * 4 + "2d4i")  # ignis::gemm::GemmArgs


@dataclass(frozen=True)
class GemmLaunch:
    """One launch of an own GEMM kernel: ``kernel(a, b, c, args)`` on ``grid`` x 256 threads."""

    kernel: str  # C++ name expression in matmul.cu
    grid: tuple[int, int, int]
    shared_mem: int  # dynamic shared memory, bytes
    a: int
    b: int
    c: int
    args: bytes  # the packed GemmArgs


def _tile_shape(family: str, dtype: dt.DType) -> tuple[int, int]:
    if family == "complex":
        return 16, 16  # gemm_complex's TILE
    if family == "simt" and dtype is dt.float64:
        return 64, 64  # SimtShape<double>
    return 128, 128


def _tc_smem_bytes(dtype: dt.DType, la: int, lb: int) -> int:
    """Dynamic shared memory of gemm_tc (TcLayout<T, LA, LB>::SMEM_BYTES)."""
    bm = bn = 128
    item = dtype.itemsize
    bk = 64 // item  # 64 bytes of k per stage: 32 halves or 16 floats
    pad_k, pad_mn, stages = 16 // item, 8, 4
    a_stage = bk * (bm + pad_mn) if la == 1 else bm * (bk + pad_k)
    b_stage = bn * (bk + pad_k) if lb == 1 else bk * (bn + pad_mn)
    return stages * (a_stage + b_stage) * item


def kernel_layout(rows: int, cols: int, mat: Mat, extra_strides: tuple[int, ...],
                  itemsize: int) -> tuple[int, int, int]:
    """The own kernels' layout code of one operand and the (rs, cs) to pass for it.

    0: rows are contiguous (cs 1) and 16-byte aligned (base, row stride, batch strides);
    1: the same for columns; 2: anything else. See the top of ``cuda_src/matmul.cu``.
    """
    def aligned(x: int) -> bool:
        return (x * itemsize) % 16 == 0

    if mat.ptr % 16 == 0 and all(aligned(s) for s in extra_strides):
        if mat.cs == 1 or cols <= 1:
            ld = mat.rs if rows > 1 else 0
            if aligned(ld):
                return 0, ld, 1
        if mat.rs == 1 or rows <= 1:
            ld = mat.cs if cols > 1 else 0
            if aligned(ld):
                return 1, 1, ld
    return 2, mat.rs, mat.cs


def plan_own_gemm(dtype: dt.DType, compute_capability: tuple[int, int], allow_tf32: bool,
                  batch: tuple[int, ...], m: int, n: int, k: int, a: Mat, b: Mat, c: Mat,
                  alpha: float, beta: float, family: str | None = None) -> list[GemmLaunch]:
    """The launches of the own kernels for one product (pure: no GPU needed).

    ``family`` forces "tc" (tensor cores) or "simt" (FMA); by default tensor cores serve
    float16/bfloat16 on sm_80+ and float32 when ``allow_tf32``; everything else uses FMA.
    """
    if dtype.kind == "c":
        family = "complex"  # gemm_complex: the one kernel for complex64 / complex128
    if family is None:
        tc_ok = compute_capability >= (8, 0)
        if dtype in (dt.float16, dt.bfloat16):
            family = "tc" if tc_ok else "simt"
        elif dtype is dt.float32:
            family = "tc" if (tc_ok and allow_tf32) else "simt"
        else:
            family = "simt"
    if family == "tc" and dtype is dt.float64:
        family = "simt"  # no float64 tensor-core kernel
    item = dtype.itemsize
    shape, (sa, sb, sc) = collapse_batch(batch, [a.bs, b.bs, c.bs])
    la, a_rs, a_cs = kernel_layout(m, k, a, sa, item)
    lb, b_rs, b_cs = kernel_layout(k, n, b, sb, item)
    name = (
        f"ignis::gemm::gemm_complex<{CTYPE[dtype]}>"
        if family == "complex"
        else f"ignis::gemm::gemm_{family}<{CTYPE[dtype]}, {la}, {lb}>"
    )
    smem = _tc_smem_bytes(dtype, la, lb) if family == "tc" else 0
    bm, bn = _tile_shape(family, dtype)
    tiles_m, tiles_n = -(-m // bm), -(-n // bn)
    if tiles_m * tiles_n > _INT_MAX:
        raise IgnisError(
            f"matmul: a result of {m} x {n} elements has more tiles than one launch can cover"
        )
    # More batch dims than the kernel's argument holds: loop over the outer ones here.
    outer, inner = shape[:-MAX_BATCH_DIMS], shape[-MAX_BATCH_DIMS:]
    n_outer = len(outer)
    count = math.prod(inner)
    grid_y = min(count, _GRID_YZ_MAX)
    grid_z = -(-count // grid_y)
    if grid_z > _GRID_YZ_MAX:
        raise IgnisError(f"matmul: a batch of {count} matrices is more than one launch can cover")
    pad = MAX_BATCH_DIMS - len(inner)
    fixed = (
        [m, n, k, a_rs, a_cs, b_rs, b_cs, c.rs, c.cs, count]
        + list(inner) + [1] * pad
        + list(sa[n_outer:]) + [0] * pad
        + list(sb[n_outer:]) + [0] * pad
        + list(sc[n_outer:]) + [0] * pad
        + [float(alpha), float(beta), len(inner), tiles_m, tiles_n, 0]
    )
    args = _ARGS.pack(*fixed)
    launches = []
    for idx in itertools.product(*(range(s) for s in outer)):
        oa = sum(i * s for i, s in zip(idx, sa, strict=False))
        ob = sum(i * s for i, s in zip(idx, sb, strict=False))
        oc = sum(i * s for i, s in zip(idx, sc, strict=False))
        launches.append(GemmLaunch(
            name, (tiles_m * tiles_n, grid_y, grid_z), smem,
            a.ptr + oa * item, b.ptr + ob * item, c.ptr + oc * item, args,
        ))
    return launches
