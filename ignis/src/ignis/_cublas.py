"""cuBLAS through ``ctypes``: the matrix-product entry point of the CUDA array backend.

cuBLAS is optional (the ``cublas-cu12`` / ``cublas-cu13`` extras install its wheel). It is found
with ``cuda.pathfinder``, which knows where NVIDIA's wheels, conda and the CUDA toolkit put
``libcublas.so.12`` / ``.13``; both majors expose the same C functions used here. Without it,
:func:`load` returns None and the library's own GEMM kernels do the work.

Every ``cublasStatus_t`` goes through :func:`check`, which raises :class:`CublasError`
(a :class:`~ignis.CudaError`) as ``"CUBLAS_STATUS_X: explanation (in cublasFunction)"``.

Handles belong to one (device, thread) pair and are created on first use; each call binds the
handle to the caller's stream (``cublasSetStream_v2``, skipped when the handle is bound to that
stream already), so work is ordered like every other op on that stream.

Example::

    >>> lib = load()            # None where cuBLAS is not installed
    >>> lib.version if lib else None
    (13, 1, 0)
"""

from __future__ import annotations

import ctypes
from typing import Any

from ._errors import CudaError
from ._nvidia_libs import HandleLibrary, LazyLibrary, open_nvidia_library, read_version

__all__ = [
    "CublasError",
    "CublasLibrary",
    "LazyLibrary",
    "check",
    "load",
    "open_nvidia_library",
    "unavailable_reason",
    "CUDA_R_16F",
    "CUDA_R_16BF",
    "CUDA_R_32F",
    "CUDA_R_64F",
    "CUDA_C_32F",
    "CUDA_C_64F",
    "ComplexFloat",
    "ComplexDouble",
    "CUBLAS_OP_N",
    "CUBLAS_OP_T",
    "CUBLAS_COMPUTE_32F",
    "CUBLAS_COMPUTE_32F_FAST_TF32",
    "CUBLAS_COMPUTE_64F",
]

# cudaDataType_t
CUDA_R_32F = 0
CUDA_R_64F = 1
CUDA_R_16F = 2
CUDA_R_16BF = 14
CUDA_C_32F = 4  # complex64 (cuComplex)
CUDA_C_64F = 5  # complex128 (cuDoubleComplex)


class ComplexFloat(ctypes.Structure):
    """cuComplex, the scale type of a complex64 product (``ComplexFloat(2.0)`` is 2 + 0j).

    Example: ``ctypes.byref(ComplexFloat(1.0, 0.5))`` as ``alpha`` of a CUDA_C_32F GEMM.
    """

    _fields_ = [("re", ctypes.c_float), ("im", ctypes.c_float)]


class ComplexDouble(ctypes.Structure):
    """cuDoubleComplex, the scale type of a complex128 product."""

    _fields_ = [("re", ctypes.c_double), ("im", ctypes.c_double)]

# cublasOperation_t
CUBLAS_OP_N = 0
CUBLAS_OP_T = 1
# cublasComputeType_t
CUBLAS_COMPUTE_32F = 68
CUBLAS_COMPUTE_32F_FAST_TF32 = 77
CUBLAS_COMPUTE_64F = 70
# cublasMath_t: no TF32 or emulation unless the compute type asks for it, and float32
# accumulation for the 16-bit types even in split-k reductions.
CUBLAS_DEFAULT_MATH = 0
CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION = 16
# cublasGemmAlgo_t
CUBLAS_GEMM_DEFAULT = -1

_STATUS_NAMES = {
    0: "CUBLAS_STATUS_SUCCESS",
    1: "CUBLAS_STATUS_NOT_INITIALIZED",
    3: "CUBLAS_STATUS_ALLOC_FAILED",
    7: "CUBLAS_STATUS_INVALID_VALUE",
    8: "CUBLAS_STATUS_ARCH_MISMATCH",
    11: "CUBLAS_STATUS_MAPPING_ERROR",
    13: "CUBLAS_STATUS_EXECUTION_FAILED",
    14: "CUBLAS_STATUS_INTERNAL_ERROR",
    15: "CUBLAS_STATUS_NOT_SUPPORTED",
    16: "CUBLAS_STATUS_LICENSE_ERROR",
}
_STATUS_TEXT = {
    1: "the cuBLAS library was not initialized (no usable CUDA driver or context)",
    3: "resource allocation failed inside cuBLAS (device memory is probably exhausted)",
    7: "an unsupported value or parameter was passed to the function",
    8: "the function requires a feature absent from the device architecture",
    11: "access to GPU memory space failed",
    13: "the GPU program failed to execute",
    14: "an internal cuBLAS operation failed",
    15: "the functionality requested is not supported",
    16: "the functionality requested requires a license",
}


class CublasError(CudaError):
    """A cuBLAS function returned a failure status.

    Attributes (as for :class:`~ignis.CudaError`): ``code`` (``"CUBLAS_STATUS_X"``),
    ``description``, ``call`` (the cuBLAS function) and ``value`` (the numeric status).
    """


def check(status: int, call: str, library: CublasLibrary | None = None) -> None:
    """Raise :class:`CublasError` unless ``status`` is ``CUBLAS_STATUS_SUCCESS``.

    The one place that compares cuBLAS status codes. ``library`` (optional) supplies the
    library's own description of the status.

    Example: ``check(7, "cublasGemmEx")`` raises
    ``CublasError("CUBLAS_STATUS_INVALID_VALUE: an unsupported value ... (in cublasGemmEx)")``.
    """
    status = int(status)
    if status == 0:
        return
    name = _STATUS_NAMES.get(status, f"CUBLAS_STATUS_UNKNOWN_{status}")
    description = _STATUS_TEXT.get(status, "unknown cuBLAS status")
    if library is not None:
        text = library.status_string(status)
        if text:
            description = text
    raise CublasError(name, description, call, status)


# --- the library -------------------------------------------------------------------------------

_c_int, _c_ll, _vp = ctypes.c_int, ctypes.c_longlong, ctypes.c_void_p

# name -> (argtypes, required)
_PROTOTYPES: dict[str, tuple[list[Any], bool]] = {
    "cublasCreate_v2": ([ctypes.POINTER(_vp)], True),
    "cublasDestroy_v2": ([_vp], True),
    "cublasSetStream_v2": ([_vp, _vp], True),
    "cublasSetMathMode": ([_vp, _c_int], True),
    "cublasGetProperty": ([_c_int, ctypes.POINTER(_c_int)], True),
    "cublasGemmStridedBatchedEx": (
        [_vp, _c_int, _c_int, _c_int, _c_int, _c_int,  # handle, transa, transb, m, n, k
         _vp,  # alpha (host pointer)
         _vp, _c_int, _c_int, _c_ll,  # A, Atype, lda, strideA
         _vp, _c_int, _c_int, _c_ll,  # B, Btype, ldb, strideB
         _vp,  # beta (host pointer)
         _vp, _c_int, _c_int, _c_ll,  # C, Ctype, ldc, strideC
         _c_int, _c_int, _c_int],  # batchCount, computeType, algo
        True,
    ),
    "cublasGetStatusString": ([_c_int], False),
}


class CublasLibrary(HandleLibrary):
    """The loaded cuBLAS shared library with the functions ignis calls.

    Attributes:
        path: where the library was loaded from (None when the loader could not tell).
        version: ``(major, minor, patch)`` of cuBLAS, read without a GPU.
    """

    _WHAT = "cuBLAS"
    _CREATE, _DESTROY, _SET_STREAM = "cublasCreate_v2", "cublasDestroy_v2", "cublasSetStream_v2"

    def __init__(self, cdll: Any, path: str | None):
        super().__init__(cdll, path, _PROTOTYPES, "libcublas",
                         {"cublasGetStatusString": ctypes.c_char_p})
        self.version = read_version(self._call, "cublasGetProperty")
        self._gemm = self._fns["cublasGemmStridedBatchedEx"]

    def _call(self, name: str, *args: Any) -> None:
        check(self._fns[name](*args), name, self)

    def _setup_handle(self, handle: int) -> None:
        try:
            self._call(
                "cublasSetMathMode", handle,
                CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION,
            )
        except CublasError:
            self._fns["cublasDestroy_v2"](handle)
            raise

    def status_string(self, status: int) -> str:
        """cuBLAS's own description of ``status`` ('' where the library has none)."""
        fn = self._fns.get("cublasGetStatusString")
        if fn is None:
            return ""
        try:
            text = fn(int(status))
        except Exception:  # pragma: no cover - a broken library: keep the built-in text
            return ""
        return text.decode("utf-8", errors="replace") if text else ""

    # --- GEMM ----------------------------------------------------------------------------------

    def gemm_strided_batched(
        self, handle: int, stream: int, transa: int, transb: int, m: int, n: int, k: int,
        alpha: Any, a: int, atype: int, lda: int, stride_a: int,
        b: int, btype: int, ldb: int, stride_b: int, beta: Any,
        c: int, ctype: int, ldc: int, stride_c: int, batch: int, compute: int,
    ) -> None:
        """``cublasGemmStridedBatchedEx`` on ``stream`` (column-major, as cuBLAS sees it).

        ``alpha``/``beta`` are ``ctypes.byref`` of scalars of the compute type's scale type
        (c_float for the 32F compute types, c_double for 64F; :class:`ComplexFloat` /
        :class:`ComplexDouble` for complex data, CUDA_C_32F / CUDA_C_64F, which makes this
        cgemm / zgemm); pointers and the stream are ints.
        The handle is bound to ``stream`` only when it was last bound to another one.
        """
        # HandleLibrary.bind, inline: one Python call less on every product.
        bound = self._bound_stream
        if bound.get(handle) != stream:
            self._call("cublasSetStream_v2", handle, stream)
            bound[handle] = stream
        status = self._gemm(
            handle, transa, transb, m, n, k, alpha, a, atype, lda, stride_a, b, btype, ldb,
            stride_b, beta, c, ctype, ldc, stride_c, batch, compute, CUBLAS_GEMM_DEFAULT,
        )
        if status:
            check(status, "cublasGemmStridedBatchedEx", self)


# --- loading -----------------------------------------------------------------------------------

_library = LazyLibrary(
    lambda: CublasLibrary(*open_nvidia_library("cublas")),
    "cuBLAS",
    "matrix products use ignis's own kernels",
)

#: The cuBLAS library, loaded on first call; None when it is not installed or unusable (the
#: reason is kept in :func:`unavailable_reason`). Never raises: a missing cuBLAS only means the
#: own kernels are used.
load = _library.get


def unavailable_reason() -> str:
    """Why :func:`load` returned None ('' when cuBLAS loaded or was not tried yet)."""
    return _library.reason


def _reset_for_tests() -> None:
    """Forget the loaded library so the next :func:`load` searches again (tests only)."""
    _library.reset()
