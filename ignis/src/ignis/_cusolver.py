"""cuSOLVER's dense API (cusolverDn) through ``ctypes``: the factorizations of ``ignis.linalg`` on
the GPU.

cuSOLVER is optional (the ``cusolver-cu12`` / ``cusolver-cu13`` extras install NVIDIA's wheel,
which brings the cuBLAS, cuSPARSE and nvJitLink wheels it links against). It is found with
``cuda.pathfinder`` like cuBLAS (:func:`ignis._nvidia_libs.open_nvidia_library`), which loads those
dependencies first; ``libcusolver.so.11`` (CUDA 12) and ``.12`` (CUDA 13) expose the same C
functions used here. Without it, :func:`load` returns None and :func:`require` raises
:class:`CusolverNotFoundError` naming the extra to install.

Every ``cusolverStatus_t`` goes through :func:`check`, which raises :class:`CusolverError`
(a :class:`~ignis.CudaError`) as ``"CUSOLVER_STATUS_X: explanation (in cusolverDnFunction)"``.
A status only reports bad arguments or a failed launch; the numerical outcome of a
factorization (a singular matrix, no convergence) is the ``devInfo`` each function writes on
the device, which the caller reads back once, after all the work is queued.

Handles belong to one (device, thread) pair and are created on first use; :meth:`bind` sets the
handle's stream (``cusolverDnSetStream``, skipped when it is bound to that stream already), so
the work is ordered like every other op on that stream. Workspaces are ignis device memory
allocated by the caller on that stream.

Functions are called by their real-case C name with the precision letter filled in (one
table, :data:`PRECISION`: ``"S"`` float32, ``"D"`` float64, ``"C"`` complex64, ``"Z"``
complex128): ``lib.call("potrf", "D", handle, uplo, n, a, lda, work, lwork, info)`` runs
``cusolverDnDpotrf``; ``lib.buffer_size("potrf", "D", handle, uplo, n, a, lda)`` returns the
``Lwork`` of ``cusolverDnDpotrf_bufferSize`` (in elements of the matrix's dtype, as the legacy
API counts it). For ``"C"`` / ``"Z"`` the symmetric and orthogonal routines are their Hermitian
and unitary counterparts (:func:`c_name`): ``call("syevd", "Z", ...)`` runs
``cusolverDnZheevd``, ``orgqr`` is ``ungqr`` and ``syevjBatched`` is ``heevjBatched``. Their C
signatures are those of the real routines with ``cuComplex`` / ``cuDoubleComplex`` matrices;
eigenvalues, singular values and ``gesvd``'s ``rwork`` stay real (float / double).

Example::

    >>> lib = load()            # None where cuSOLVER is not installed
    >>> lib.version if lib else None
    (12, 0, 4)
"""

from __future__ import annotations

import ctypes
from typing import Any

from . import _dtypes as dt
from . import _nvidia_libs
from ._errors import CudaError, IgnisError
from ._nvidia_libs import HandleLibrary, LazyLibrary, open_nvidia_library, read_version

__all__ = [
    "CusolverError",
    "CusolverLibrary",
    "CusolverNotFoundError",
    "PRECISION",
    "c_name",
    "check",
    "load",
    "require",
    "unavailable_reason",
    "install_hint",
    "FILL_LOWER",
    "FILL_UPPER",
    "OP_N",
    "OP_T",
    "EIG_NOVECTOR",
    "EIG_VECTOR",
]

# cublasFillMode_t, cublasOperation_t, cusolverEigMode_t
FILL_LOWER, FILL_UPPER = 0, 1
OP_N, OP_T = 0, 1
EIG_NOVECTOR, EIG_VECTOR = 0, 1

_STATUS_NAMES = {
    0: "CUSOLVER_STATUS_SUCCESS",
    1: "CUSOLVER_STATUS_NOT_INITIALIZED",
    2: "CUSOLVER_STATUS_ALLOC_FAILED",
    3: "CUSOLVER_STATUS_INVALID_VALUE",
    4: "CUSOLVER_STATUS_ARCH_MISMATCH",
    5: "CUSOLVER_STATUS_MAPPING_ERROR",
    6: "CUSOLVER_STATUS_EXECUTION_FAILED",
    7: "CUSOLVER_STATUS_INTERNAL_ERROR",
    8: "CUSOLVER_STATUS_MATRIX_TYPE_NOT_SUPPORTED",
    9: "CUSOLVER_STATUS_NOT_SUPPORTED",
    10: "CUSOLVER_STATUS_ZERO_PIVOT",
    11: "CUSOLVER_STATUS_INVALID_LICENSE",
    31: "CUSOLVER_STATUS_INVALID_WORKSPACE",
}
_STATUS_TEXT = {
    1: "the cuSOLVER library was not initialized (no usable CUDA driver or context)",
    2: "resource allocation failed inside cuSOLVER (device memory is probably exhausted)",
    3: "an unsupported value or parameter was passed to the function",
    4: "the function requires a feature absent from the device architecture",
    5: "access to GPU memory space failed",
    6: "the GPU program failed to execute",
    7: "an internal cuSOLVER operation failed",
    8: "the matrix type is not supported by this function",
    9: "the functionality requested is not supported",
    10: "a zero pivot was met",
    11: "the functionality requested requires a license",
    31: "the workspace is too small",
}

class CusolverError(CudaError):
    """A cuSOLVER function returned a failure status.

    Attributes (as for :class:`~ignis.CudaError`): ``code`` (``"CUSOLVER_STATUS_X"``),
    ``description``, ``call`` (the cuSOLVER function) and ``value`` (the numeric status).
    """


class CusolverNotFoundError(IgnisError, RuntimeError):
    """cuSOLVER is needed (a factorization of ``ignis.linalg`` on a GPU array) but cannot be
    loaded. The message names the extra that installs it and why loading failed."""


def check(status: int, call: str) -> None:
    """Raise :class:`CusolverError` unless ``status`` is ``CUSOLVER_STATUS_SUCCESS``.

    The one place that compares cuSOLVER status codes. Example: ``check(3, "cusolverDnDpotrf")``
    raises ``CusolverError("CUSOLVER_STATUS_INVALID_VALUE: an unsupported value ... (in
    cusolverDnDpotrf)")``.
    """
    status = int(status)
    if status == 0:
        return
    name = _STATUS_NAMES.get(status, f"CUSOLVER_STATUS_UNKNOWN_{status}")
    description = _STATUS_TEXT.get(status, "unknown cuSOLVER status")
    raise CusolverError(name, description, call, status)


# --- the library -------------------------------------------------------------------------------

_i, _vp, _d, _b = ctypes.c_int, ctypes.c_void_p, ctypes.c_double, ctypes.c_byte
_pi = ctypes.POINTER(ctypes.c_int)


#: The precision letter of cuSOLVER's legacy names for each dtype it factors: the one place
#: that says which dtypes the GPU factorizations take.
PRECISION: dict[dt.DType, str] = {
    dt.float32: "S",
    dt.float64: "D",
    dt.complex64: "C",
    dt.complex128: "Z",
}
_COMPLEX_PRECISIONS = "CZ"
# The real routines whose complex counterparts have another name (symmetric -> Hermitian,
# orthogonal -> unitary); every other routine keeps its name.
_COMPLEX_NAMES = {"syevd": "heevd", "syevjBatched": "heevjBatched", "orgqr": "ungqr"}


def c_name(name: str, prec: str) -> str:
    """The C function of routine ``name`` (its real-case name, ``_bufferSize`` suffix allowed)
    in precision ``prec``.

    Example: ``c_name("syevd_bufferSize", "C") == "cusolverDnCheevd_bufferSize"`` and
    ``c_name("syevd", "D") == "cusolverDnDsyevd"``.
    """
    base, sep, suffix = name.partition("_")
    if prec in _COMPLEX_PRECISIONS:
        base = _COMPLEX_NAMES.get(base, base)
    return f"cusolverDn{prec}{base}{sep}{suffix}"


def _typed(proto: dict[str, list[Any]], required: bool) -> dict[str, tuple[list[Any], bool]]:
    """``{"potrf": [...]}`` as the C names of every precision, ``cusolverDnSpotrf`` ...
    ``cusolverDnZpotrf`` (``{"syevd": ...}`` gives ``cusolverDnCheevd`` for complex64). The
    argument lists are the same: every matrix, vector and workspace is a device address."""
    return {
        c_name(name, p): (args, required)
        for name, args in proto.items()
        for p in PRECISION.values()
    }


# name -> (argtypes, required). Pointers are passed as ints (device addresses); the handle,
# syevjInfo_t and streams are opaque pointers.
_PROTOTYPES: dict[str, tuple[list[Any], bool]] = {
    "cusolverDnCreate": ([ctypes.POINTER(_vp)], True),
    "cusolverDnDestroy": ([_vp], True),
    "cusolverDnSetStream": ([_vp, _vp], True),
    "cusolverGetProperty": ([_i, _pi], True),
    **_typed({
        # handle, uplo, n, A, lda, *Lwork
        "potrf_bufferSize": [_vp, _i, _i, _vp, _i, _pi],
        # handle, uplo, n, A, lda, work, Lwork, devInfo
        "potrf": [_vp, _i, _i, _vp, _i, _vp, _i, _vp],
        # handle, m, n, A, lda, *Lwork
        "getrf_bufferSize": [_vp, _i, _i, _vp, _i, _pi],
        # handle, m, n, A, lda, work, devIpiv, devInfo
        "getrf": [_vp, _i, _i, _vp, _i, _vp, _vp, _vp],
        # handle, trans, n, nrhs, A, lda, devIpiv, B, ldb, devInfo
        "getrs": [_vp, _i, _i, _i, _vp, _i, _vp, _vp, _i, _vp],
        # handle, m, n, A, lda, *Lwork
        "geqrf_bufferSize": [_vp, _i, _i, _vp, _i, _pi],
        # handle, m, n, A, lda, tau, work, Lwork, devInfo
        "geqrf": [_vp, _i, _i, _vp, _i, _vp, _vp, _i, _vp],
        # handle, m, n, k, A, lda, tau, *Lwork; C/Z: ungqr
        "orgqr_bufferSize": [_vp, _i, _i, _i, _vp, _i, _vp, _pi],
        # handle, m, n, k, A, lda, tau, work, Lwork, devInfo
        "orgqr": [_vp, _i, _i, _i, _vp, _i, _vp, _vp, _i, _vp],
        # handle, jobz, uplo, n, A, lda, W (real), *Lwork; C/Z: heevd
        "syevd_bufferSize": [_vp, _i, _i, _i, _vp, _i, _vp, _pi],
        # handle, jobz, uplo, n, A, lda, W, work, Lwork, devInfo
        "syevd": [_vp, _i, _i, _i, _vp, _i, _vp, _vp, _i, _vp],
        # handle, m, n, *Lwork
        "gesvd_bufferSize": [_vp, _i, _i, _pi],
        # handle, jobu, jobvt, m, n, A, lda, S (real), U, ldu, VT (V^H for C/Z), ldvt, work,
        # Lwork, rwork (real, may be null), devInfo
        "gesvd": [_vp, _b, _b, _i, _i, _vp, _i, _vp, _vp, _i, _vp, _i, _vp, _i, _vp, _vp],
    }, True),
    # Batched variants: used where present, else the caller loops over the stack.
    **_typed({
        # handle, uplo, n, Aarray (device array of pointers), lda, infoArray, batchSize
        "potrfBatched": [_vp, _i, _i, _vp, _i, _vp, _i],
        # handle, jobz, uplo, n, A, lda, W, *Lwork, params, batchSize
        "syevjBatched_bufferSize": [_vp, _i, _i, _i, _vp, _i, _vp, _pi, _vp, _i],
        # handle, jobz, uplo, n, A, lda, W, work, Lwork, info, params, batchSize
        "syevjBatched": [_vp, _i, _i, _i, _vp, _i, _vp, _vp, _i, _vp, _vp, _i],
    }, False),
    "cusolverDnCreateSyevjInfo": ([ctypes.POINTER(_vp)], False),
    "cusolverDnDestroySyevjInfo": ([_vp], False),
}


class CusolverLibrary(HandleLibrary):
    """The loaded cuSOLVER shared library with the functions ignis calls.

    Attributes:
        path: where the library was loaded from (None when the loader could not tell).
        version: ``(major, minor, patch)`` of cuSOLVER, read without a GPU.
    """

    _WHAT = "cuSOLVER"
    _CREATE, _DESTROY, _SET_STREAM = "cusolverDnCreate", "cusolverDnDestroy", "cusolverDnSetStream"
    _OBJECT_DESTROYERS = {"syevj": "cusolverDnDestroySyevjInfo"}

    def __init__(self, cdll: Any, path: str | None):
        super().__init__(cdll, path, _PROTOTYPES, "libcusolver")
        self.version = read_version(self._call, "cusolverGetProperty")

    def _call(self, name: str, *args: Any) -> None:
        check(self._fns[name](*args), name)

    def has(self, name: str, prec: str = "D") -> bool:
        """Whether the library has routine ``name`` in precision ``prec`` (:func:`c_name`; the
        optional batched ones)."""
        return c_name(name, prec) in self._fns

    def call(self, name: str, prec: str, *args: Any) -> None:
        """Run routine ``name`` in precision ``prec`` (:func:`c_name`) on ``args`` and check
        its status."""
        full = c_name(name, prec)
        status = self._fns[full](*args)
        if status:
            check(status, full)

    def buffer_size(self, name: str, prec: str, *args: Any, after: tuple[Any, ...] = ()) -> int:
        """``Lwork`` (elements) from ``<name>_bufferSize(*args, &Lwork, *after)`` in precision
        ``prec`` (``after``: the arguments some queries take behind ``Lwork``)."""
        lwork = _i(0)
        self.call(f"{name}_bufferSize", prec, *args, ctypes.byref(lwork), *after)
        return max(1, int(lwork.value))

    # handle(device) and bind(handle, stream) come from HandleLibrary.

    def syevj_params(self) -> int:
        """The calling thread's ``syevjInfo_t`` with cuSOLVER's defaults (tolerance: machine
        precision, 100 sweeps, eigenvalues sorted ascending); 0 where the library lacks it."""
        params = self._thread_handles().objects
        h = params.get("syevj")
        if h is None:
            if "cusolverDnCreateSyevjInfo" not in self._fns:
                return 0
            raw = _vp()
            self._call("cusolverDnCreateSyevjInfo", ctypes.byref(raw))
            h = params["syevj"] = int(raw.value or 0)
        return h


# --- loading -----------------------------------------------------------------------------------

_library = LazyLibrary(
    lambda: CusolverLibrary(*open_nvidia_library("cusolver")),
    "cuSOLVER",
    "ignis.linalg's factorizations of GPU arrays need it",
)

#: The cuSOLVER library, loaded on first call; None when it is not installed or unusable (the
#: reason is kept in :func:`unavailable_reason`). Never raises.
load = _library.get


def unavailable_reason() -> str:
    """Why :func:`load` returned None ('' when cuSOLVER loaded or was not tried yet)."""
    return _library.reason


def install_hint(cuda_major: int | None = None) -> str:
    """The pip command that installs cuSOLVER for ignis: the extra of the CUDA major in use
    (``cuda_major``; both extras when it is not known)."""
    return _nvidia_libs.install_hint("cusolver", cuda_major)


def require(op: str, cuda_major: int | None = None) -> CusolverLibrary:
    """The library, or :class:`CusolverNotFoundError` naming ``op``, the extra to install and
    why loading failed.

    Example: ``require("linalg.inv")`` raises ``CusolverNotFoundError("linalg.inv on a GPU
    array needs cuSOLVER, which is not installed: pip install "ignis-cuda[cusolver-cu12]" ...")``
    where the library is missing.
    """
    lib = load()
    if lib is None:
        reason = unavailable_reason() or "not found"
        raise CusolverNotFoundError(
            _nvidia_libs.not_found_message(op, "cuSOLVER", reason, "cusolver", cuda_major)
        )
    return lib


def _reset_for_tests() -> None:
    """Forget the loaded library so the next :func:`load` searches again (tests only)."""
    _library.reset()
