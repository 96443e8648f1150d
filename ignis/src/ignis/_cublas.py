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
import importlib
import logging
import threading
import weakref
from typing import Any

from ._errors import CudaError

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
    "CUBLAS_OP_N",
    "CUBLAS_OP_T",
    "CUBLAS_COMPUTE_32F",
    "CUBLAS_COMPUTE_32F_FAST_TF32",
    "CUBLAS_COMPUTE_64F",
]

logger = logging.getLogger("ignis")

# cudaDataType_t
CUDA_R_32F = 0
CUDA_R_64F = 1
CUDA_R_16F = 2
CUDA_R_16BF = 14
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
# libraryPropertyType
_MAJOR_VERSION, _MINOR_VERSION, _PATCH_LEVEL = 0, 1, 2

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


class CublasLibrary:
    """The loaded cuBLAS shared library with the functions ignis calls.

    Attributes:
        path: where the library was loaded from (None when the loader could not tell).
        version: ``(major, minor, patch)`` of cuBLAS, read without a GPU.
    """

    def __init__(self, cdll: Any, path: str | None):
        self.path = path
        self._fns: dict[str, Any] = {}
        for name, (argtypes, required) in _PROTOTYPES.items():
            try:
                fn = getattr(cdll, name)
            except AttributeError:
                if required:
                    raise OSError(f"{path or 'libcublas'} has no function {name}") from None
                continue
            fn.argtypes = argtypes
            fn.restype = ctypes.c_char_p if name == "cublasGetStatusString" else _c_int
            self._fns[name] = fn
        self.version = tuple(
            self._property(p) for p in (_MAJOR_VERSION, _MINOR_VERSION, _PATCH_LEVEL)
        )
        self._local = threading.local()
        self._gemm = self._fns["cublasGemmStridedBatchedEx"]
        # handle -> the stream it was last bound to (each handle belongs to one thread)
        self._bound_stream: dict[int, int] = {}

    def __repr__(self) -> str:
        return f"<CublasLibrary {'.'.join(map(str, self.version))} at {self.path}>"

    def _call(self, name: str, *args: Any) -> None:
        check(self._fns[name](*args), name, self)

    def _property(self, which: int) -> int:
        value = _c_int(0)
        self._call("cublasGetProperty", which, ctypes.byref(value))
        return int(value.value)

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

    # --- handles -------------------------------------------------------------------------------

    def handle(self, device: Any) -> int:
        """The calling thread's handle for ``device`` (an ignis Device), created on first use.

        The device's context must be current on this thread (the backend activates it).
        """
        handles = getattr(self._local, "handles", None)
        if handles is None:
            handles = self._local.handles = _ThreadHandles(self)
        h = handles.by_device.get(device.ordinal)
        if h is None:
            h = handles.create(device)
        return h

    # --- GEMM ----------------------------------------------------------------------------------

    def gemm_strided_batched(
        self, handle: int, stream: int, transa: int, transb: int, m: int, n: int, k: int,
        alpha: Any, a: int, atype: int, lda: int, stride_a: int,
        b: int, btype: int, ldb: int, stride_b: int, beta: Any,
        c: int, ctype: int, ldc: int, stride_c: int, batch: int, compute: int,
    ) -> None:
        """``cublasGemmStridedBatchedEx`` on ``stream`` (column-major, as cuBLAS sees it).

        ``alpha``/``beta`` are ``ctypes.byref`` of scalars of the compute type's scale type
        (c_float for the 32F compute types, c_double for 64F); pointers and the stream are ints.
        The handle is bound to ``stream`` only when it was last bound to another one.
        """
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


class _ThreadHandles:
    """One thread's cuBLAS handles, one per device; destroyed when the thread's state goes."""

    def __init__(self, lib: CublasLibrary):
        self.lib = lib
        self.by_device: dict[int, int] = {}
        self._devices: dict[int, Any] = {}
        finalizer = weakref.finalize(self, _destroy_handles, lib, self.by_device, self._devices)
        # At interpreter exit the driver may already be torn down: let the process clean up.
        finalizer.atexit = False

    def create(self, device: Any) -> int:
        raw = _vp()
        self.lib._call("cublasCreate_v2", ctypes.byref(raw))
        h = int(raw.value or 0)
        self.lib._bound_stream.pop(h, None)  # a new handle at a freed one's address
        try:
            self.lib._call(
                "cublasSetMathMode", h,
                CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION,
            )
        except CublasError:
            self.lib._fns["cublasDestroy_v2"](h)
            raise
        self.by_device[device.ordinal] = h
        self._devices[device.ordinal] = device
        logger.debug("cuBLAS handle created for cuda:%d on thread %s", device.ordinal,
                     threading.current_thread().name)
        return h


def _destroy_handles(lib: CublasLibrary, handles: dict[int, int], devices: dict[int, Any]) -> None:
    from ._device import activate

    for ordinal, h in handles.items():
        try:
            activate(devices[ordinal])
            lib._fns["cublasSetStream_v2"](h, None)  # the last stream may be gone already
            lib._bound_stream.pop(h, None)
            lib._fns["cublasDestroy_v2"](h)
        except Exception:  # pragma: no cover - best effort while a thread winds down
            pass
    handles.clear()


# --- loading -----------------------------------------------------------------------------------

class LazyLibrary:
    """An optional library opened on first use, once for the process.

    :meth:`get` returns it, or None when it cannot be opened (:attr:`reason` then says why, and
    the failure is logged at debug level); it never raises. ``opener()`` builds the library
    object and raises where it cannot.
    """

    def __init__(self, opener: Any, what: str, without: str):
        self._opener, self._what, self._without = opener, what, without
        self._lock = threading.Lock()
        self._loaded: list[Any] = []  # empty: not tried yet
        self.reason = ""

    def get(self) -> Any:
        """The library, opened on the first call; None when it is not installed or unusable."""
        loaded = self._loaded
        if loaded:
            return loaded[0]
        with self._lock:
            if not loaded:
                loaded.append(self._open())
        return loaded[0]

    def _open(self) -> Any:
        try:
            lib = self._opener()
        except Exception as exc:  # ImportError, pathfinder's not-found errors, OSError, ...
            self.reason = f"{type(exc).__name__}: {exc}"
            logger.debug("%s is not available (%s); %s", self._what, self.reason, self._without)
            return None
        self.reason = ""
        logger.debug("loaded %r", lib)
        return lib

    def reset(self) -> None:
        """Forget the library so the next :meth:`get` searches again (tests only)."""
        with self._lock:
            self._loaded.clear()
            self.reason = ""


def open_nvidia_library(name: str) -> tuple[Any, str | None]:
    """``(ctypes.CDLL, path)`` of NVIDIA's library ``name`` ("cublas", "cublasLt"), found by
    ``cuda.pathfinder`` (wheels, conda, the CUDA toolkit).

    Raises:
        ImportError, OSError or pathfinder's not-found error where it cannot be opened.
    """
    pathfinder = importlib.import_module("cuda.pathfinder")
    found = pathfinder.load_nvidia_dynamic_lib(name)
    path = getattr(found, "abs_path", None)
    raw_handle = getattr(found, "_handle_uint", None)
    # The loader has the library open already: reuse its handle instead of opening again.
    if raw_handle:
        return ctypes.CDLL(path or f"lib{name}", handle=int(raw_handle)), path
    if path:
        return ctypes.CDLL(path), path
    raise OSError(f"cuda.pathfinder found {name} but reported neither a path nor a handle")


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
