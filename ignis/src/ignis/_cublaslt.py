"""cuBLASLt through ``ctypes``: matrix products from cached plans, with bias epilogues.

cuBLASLt is the library under cuBLAS's GEMMs (it ships in the same wheel). Where cuBLAS chooses
an algorithm on every call, cuBLASLt lets a :class:`LtPlan` keep the descriptors and the chosen
algorithm of one product shape, so a repeated product is one ``cublasLtMatmul`` call. Its
epilogues fuse a bias into a product (``D = A @ B + bias``) or compute a bias gradient
alongside one (the sums of one operand over ``k``).

Plans describe column-major operands, as cuBLAS does; :mod:`ignis._array._cuda_backend.matmul`
maps row-major arrays onto them. Every status goes through :func:`ignis._cublas.check`.
cuBLASLt is optional: :func:`load` returns None where it cannot be loaded, and the products
then go through cuBLAS's ``cublasGemmStridedBatchedEx``.

Example::

    >>> lt = load()                         # None without the cuBLAS wheel
    >>> plan = lt.plan(CUDA_R_32F, CUBLAS_COMPUTE_32F, 0, 0, 64, 64, 64, 64, 64, 64)
    >>> lt.matmul(lt.handle(device), plan, alpha_ref, a, b, beta_ref, c, 0, 0, stream)
"""

from __future__ import annotations

import ctypes
import logging
import threading
import weakref
from typing import Any

from ._cublas import CUBLAS_COMPUTE_64F, CUDA_R_32F, CUDA_R_64F, check
from ._nvidia_libs import HandleLibrary, LazyLibrary, open_nvidia_library

__all__ = [
    "CublasLtLibrary",
    "LtPlan",
    "load",
    "unavailable_reason",
    "EPILOGUE_DEFAULT",
    "EPILOGUE_BIAS",
    "EPILOGUE_BGRADA",
    "EPILOGUE_BGRADB",
    "WORKSPACE_LIMIT",
]

logger = logging.getLogger("ignis")

# cublasLtEpilogue_t
EPILOGUE_DEFAULT = 1
EPILOGUE_BIAS = 4  # D = A @ B + bias, bias indexed by D's row
EPILOGUE_BGRADA = 256  # bias <- sums of A over k (one per row of D)
EPILOGUE_BGRADB = 512  # bias <- sums of B over k (one per column of D)

# cublasLtMatmulDescAttributes_t
_DESC_TRANSA, _DESC_TRANSB, _DESC_EPILOGUE, _DESC_BIAS_POINTER = 3, 4, 7, 8
_DESC_BIAS_DATA_TYPE = 26
# cublasLtMatrixLayoutAttribute_t
_LAYOUT_BATCH_COUNT, _LAYOUT_BATCH_OFFSET = 5, 6
# cublasLtMatmulPreferenceAttributes_t
_PREF_MAX_WORKSPACE = 1
# cublasLtMatmulHeuristicResult_t: algo (64 bytes), size_t workspace, int, float, int[4]
_HEURISTIC_RESULT_BYTES = 96

#: Most workspace (bytes) an algorithm may ask for; each product allocates what its algorithm
#: needs, stream-ordered, for the duration of the call.
WORKSPACE_LIMIT = 32 << 20

_vp, _c_int, _size_t = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
_PVP = ctypes.POINTER(_vp)
# name -> argtypes; all are required (see _PROTOTYPES)
_ARGTYPES: dict[str, list[Any]] = {
    "cublasLtCreate": [_PVP],
    "cublasLtDestroy": [_vp],
    "cublasLtMatmulDescCreate": [_PVP, _c_int, _c_int],
    "cublasLtMatmulDescDestroy": [_vp],
    "cublasLtMatmulDescSetAttribute": [_vp, _c_int, _vp, _size_t],
    "cublasLtMatrixLayoutCreate": [_PVP, _c_int, ctypes.c_uint64, ctypes.c_uint64,
                                   ctypes.c_int64],
    "cublasLtMatrixLayoutDestroy": [_vp],
    "cublasLtMatrixLayoutSetAttribute": [_vp, _c_int, _vp, _size_t],
    "cublasLtMatmulPreferenceCreate": [_PVP],
    "cublasLtMatmulPreferenceDestroy": [_vp],
    "cublasLtMatmulPreferenceSetAttribute": [_vp, _c_int, _vp, _size_t],
    "cublasLtMatmulAlgoGetHeuristic": [_vp, _vp, _vp, _vp, _vp, _vp, _vp, _c_int, _vp,
                                       ctypes.POINTER(_c_int)],
    # handle, desc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc, algo, workspace,
    # workspace bytes, stream
    "cublasLtMatmul": [_vp] * 14 + [_size_t, _vp],
}
# name -> (argtypes, required), as ignis._nvidia_libs.bind_functions takes it
_PROTOTYPES: dict[str, tuple[list[Any], bool]] = {
    name: (argtypes, True) for name, argtypes in _ARGTYPES.items()
}


class LtPlan:
    """The descriptors and chosen algorithm of one product shape (column-major operands).

    Attributes:
        workspace: bytes of workspace the algorithm needs (0 for most).
        epilogue: the cublasLtEpilogue_t it was planned with.
    """

    __slots__ = ("workspace", "epilogue", "_desc", "_layouts", "_algo", "_lock", "_bias_ptr",
                 "_finalizer", "__weakref__")

    def __init__(self, desc: Any, layouts: tuple[Any, Any, Any], algo: Any, workspace: int,
                 epilogue: int, destroy: Any):
        self._desc, self._layouts, self._algo = desc, layouts, algo
        self.workspace, self.epilogue = workspace, epilogue
        # The bias address is an attribute of the descriptor: a plan with an epilogue sets it
        # and runs under this lock, so that threads sharing the plan do not race on it.
        self._lock = threading.Lock()
        self._bias_ptr = _vp(0)
        self._finalizer = weakref.finalize(self, destroy, desc, layouts)
        self._finalizer.atexit = False  # at exit the library may be gone: let the OS clean up


class CublasLtLibrary(HandleLibrary):
    """The loaded cuBLASLt shared library with the functions ignis calls.

    :meth:`handle` gives the calling thread's cuBLASLt handle for a device, created on first
    use (the device's context must be current); the stream is an argument of each product.

    Attributes:
        path: where the library was loaded from (None when the loader could not tell).
    """

    _WHAT = "cuBLASLt"
    _CREATE, _DESTROY = "cublasLtCreate", "cublasLtDestroy"

    def __init__(self, cdll: Any, path: str | None):
        super().__init__(cdll, path, _PROTOTYPES, "libcublasLt")
        self._matmul = self._fns["cublasLtMatmul"]

    def _call(self, name: str, *args: Any) -> None:
        status = self._fns[name](*args)
        if status:
            check(status, name)

    def plan(
        self, dtype: int, compute: int, transa: int, transb: int, m: int, n: int, k: int,
        lda: int, ldb: int, ldc: int, batch: int = 1, stride_a: int = 0, stride_b: int = 0,
        stride_c: int = 0, epilogue: int = EPILOGUE_DEFAULT, *, handle: int,
    ) -> LtPlan | None:
        """Describe ``D (m x n) = op(A) @ op(B)`` (+ epilogue), all of cudaDataType ``dtype``
        and column-major with leading dimensions ``lda``/``ldb``/``ldc`` (elements), ``batch``
        matrices ``stride_*`` elements apart, and choose its algorithm (operands 256-byte
        aligned). None when cuBLASLt has no algorithm for it."""
        scale = CUDA_R_64F if compute == CUBLAS_COMPUTE_64F else CUDA_R_32F
        desc = _vp()
        self._call("cublasLtMatmulDescCreate", ctypes.byref(desc), compute, scale)
        layouts: list[Any] = []
        try:
            for attr, value in ((_DESC_TRANSA, transa), (_DESC_TRANSB, transb)):
                v = ctypes.c_int32(value)
                self._call("cublasLtMatmulDescSetAttribute", desc, attr, ctypes.byref(v), 4)
            if epilogue != EPILOGUE_DEFAULT:
                v = ctypes.c_uint32(epilogue)
                self._call("cublasLtMatmulDescSetAttribute", desc, _DESC_EPILOGUE,
                           ctypes.byref(v), 4)
                t = ctypes.c_int32(dtype)
                self._call("cublasLtMatmulDescSetAttribute", desc, _DESC_BIAS_DATA_TYPE,
                           ctypes.byref(t), 4)
            a_rows, a_cols = (m, k) if transa == 0 else (k, m)
            b_rows, b_cols = (k, n) if transb == 0 else (n, k)
            for rows, cols, ld, stride in ((a_rows, a_cols, lda, stride_a),
                                           (b_rows, b_cols, ldb, stride_b), (m, n, ldc, stride_c)):
                lay = _vp()
                self._call("cublasLtMatrixLayoutCreate", ctypes.byref(lay), dtype, rows, cols, ld)
                layouts.append(lay)
                if batch > 1:
                    count, offset = ctypes.c_int32(batch), ctypes.c_int64(stride)
                    self._call("cublasLtMatrixLayoutSetAttribute", lay, _LAYOUT_BATCH_COUNT,
                               ctypes.byref(count), 4)
                    self._call("cublasLtMatrixLayoutSetAttribute", lay, _LAYOUT_BATCH_OFFSET,
                               ctypes.byref(offset), 8)
            result = (ctypes.c_char * _HEURISTIC_RESULT_BYTES)()
            found = _c_int(0)
            pref = _vp()
            self._call("cublasLtMatmulPreferenceCreate", ctypes.byref(pref))
            try:
                limit = ctypes.c_uint64(WORKSPACE_LIMIT)
                self._call("cublasLtMatmulPreferenceSetAttribute", pref, _PREF_MAX_WORKSPACE,
                           ctypes.byref(limit), 8)
                a_l, b_l, c_l = layouts
                status = self._fns["cublasLtMatmulAlgoGetHeuristic"](
                    handle, desc, a_l, b_l, c_l, c_l, pref, 1, result, ctypes.byref(found))
            finally:
                self._fns["cublasLtMatmulPreferenceDestroy"](pref)
        except BaseException:
            _destroy(self, desc, tuple(layouts))
            raise
        if status or found.value < 1:  # e.g. NOT_SUPPORTED: no algorithm for this product
            logger.debug("cuBLASLt has no algorithm (status %d) for a %dx%dx%d product",
                         status, m, n, k)
            _destroy(self, desc, tuple(layouts))
            return None
        workspace = ctypes.c_size_t.from_buffer(result, 64).value
        return LtPlan(desc, (layouts[0], layouts[1], layouts[2]), result, workspace, epilogue,
                      lambda d, ls: _destroy(self, d, ls))

    def matmul(self, handle: int, plan: LtPlan, alpha: Any, a: int, b: int, beta: Any, c: int,
               bias: int, workspace: int, stream: int) -> None:
        """Queue ``C = alpha * op(A) @ op(B) + beta * C`` (+ the plan's epilogue, whose vector
        is at ``bias``) on ``stream``. ``alpha``/``beta`` are ``ctypes.byref`` of scale-type
        scalars; ``workspace`` is the address of ``plan.workspace`` bytes (0 when none)."""
        a_l, b_l, c_l = plan._layouts
        if plan.epilogue == EPILOGUE_DEFAULT:
            status = self._matmul(handle, plan._desc, alpha, a, a_l, b, b_l, beta, c, c_l, c,
                                  c_l, plan._algo, workspace, plan.workspace, stream)
        else:
            with plan._lock:
                plan._bias_ptr.value = bias
                self._call("cublasLtMatmulDescSetAttribute", plan._desc, _DESC_BIAS_POINTER,
                           ctypes.byref(plan._bias_ptr), ctypes.sizeof(_vp))
                status = self._matmul(handle, plan._desc, alpha, a, a_l, b, b_l, beta, c, c_l,
                                      c, c_l, plan._algo, workspace, plan.workspace, stream)
        if status:
            check(status, "cublasLtMatmul")


def _destroy(lib: CublasLtLibrary, desc: Any, layouts: tuple[Any, ...]) -> None:
    try:
        for lay in layouts:
            lib._fns["cublasLtMatrixLayoutDestroy"](lay)
        lib._fns["cublasLtMatmulDescDestroy"](desc)
    except Exception:  # pragma: no cover - best effort while the process winds down
        pass


# --- loading -----------------------------------------------------------------------------------

_library = LazyLibrary(
    lambda: CublasLtLibrary(*open_nvidia_library("cublasLt")),
    "cuBLASLt",
    "products use cublasGemmStridedBatchedEx",
)

#: The cuBLASLt library, loaded on first call; None when it is not installed or unusable (the
#: reason is kept in :func:`unavailable_reason`). Never raises.
load = _library.get


def unavailable_reason() -> str:
    """Why :func:`load` returned None ('' when it did not, or has not been called)."""
    return _library.reason


def _reset_for_tests() -> None:
    """Forget the loaded library so the next :func:`load` searches again (tests only)."""
    _library.reset()
