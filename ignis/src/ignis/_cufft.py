"""cuFFT through ``ctypes``: the transforms of ``ignis.fft`` on the GPU.

cuFFT is optional (the ``cufft-cu12`` / ``cufft-cu13`` extras install NVIDIA's wheel). It is
found with ``cuda.pathfinder`` like cuBLAS and cuSOLVER
(:func:`ignis._nvidia_libs.open_nvidia_library`); without it :func:`load` returns None and
:func:`require` raises :class:`CufftNotFoundError` naming the extra to install.

Every ``cufftResult`` goes through :func:`check`, which raises :class:`CufftError` (a
:class:`~ignis.CudaError`) as ``"CUFFT_X: explanation (in cufftFunction)"``.

Plans: :meth:`CufftLibrary.plan` gives a batched 1-D plan of ``(device, type, n, batch)``,
made once per thread and kept (a plan holds its work area, and binding it to a stream is per
call, so plans are not shared between threads). A thread keeps at most :data:`MAX_PLANS`;
beyond that, a plan serves one call and is destroyed after the stream has finished with it.

Example::

    >>> lib = load()            # None where cuFFT is not installed
    >>> lib.version if lib else None
    (12, 0, 0)
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

from . import _nvidia_libs
from ._errors import CudaError, IgnisError
from ._nvidia_libs import LazyLibrary, bind_functions, open_nvidia_library, read_version

__all__ = [
    "CufftError",
    "CufftLibrary",
    "CufftNotFoundError",
    "check",
    "load",
    "require",
    "unavailable_reason",
    "C2C",
    "Z2Z",
    "R2C",
    "D2Z",
    "C2R",
    "Z2D",
    "FORWARD",
    "INVERSE",
    "MAX_PLANS",
]

# cufftType
R2C, C2R, C2C, D2Z, Z2D, Z2Z = 0x2A, 0x2C, 0x29, 0x6A, 0x6C, 0x69
# transform direction
FORWARD, INVERSE = -1, 1

#: Plans one thread keeps (each holds a work area on its device).
MAX_PLANS = 64

_STATUS = {
    1: ("CUFFT_INVALID_PLAN", "the plan handle is not valid"),
    2: ("CUFFT_ALLOC_FAILED", "cuFFT failed to allocate GPU memory (it is probably exhausted)"),
    3: ("CUFFT_INVALID_TYPE", "the transform type is not supported"),
    4: ("CUFFT_INVALID_VALUE", "an invalid pointer or parameter was passed"),
    5: ("CUFFT_INTERNAL_ERROR", "an internal cuFFT error (driver or library)"),
    6: ("CUFFT_EXEC_FAILED", "the transform failed to execute on the GPU"),
    7: ("CUFFT_SETUP_FAILED", "the cuFFT library failed to initialize"),
    8: ("CUFFT_INVALID_SIZE", "the transform size is not supported"),
    9: ("CUFFT_UNALIGNED_DATA", "the data is not aligned as cuFFT needs"),
    11: ("CUFFT_INVALID_DEVICE", "the plan was made on another device"),
    13: ("CUFFT_NO_WORKSPACE", "no work area was provided"),
    14: ("CUFFT_NOT_IMPLEMENTED", "the functionality is not implemented"),
    16: ("CUFFT_NOT_SUPPORTED", "the operation is not supported for these parameters"),
}


class CufftError(CudaError):
    """A cuFFT function returned a failure status (attributes as :class:`~ignis.CudaError`)."""


class CufftNotFoundError(IgnisError, RuntimeError):
    """cuFFT is needed (``ignis.fft`` on a GPU array) but cannot be loaded. The message names
    the extra that installs it and why loading failed."""


def check(status: int, call: str) -> None:
    """Raise :class:`CufftError` unless ``status`` is ``CUFFT_SUCCESS`` (the one place that
    reads cuFFT status codes). Example: ``check(8, "cufftPlanMany")`` raises
    ``CufftError("CUFFT_INVALID_SIZE: the transform size is not supported (in cufftPlanMany)")``."""
    status = int(status)
    if status == 0:
        return
    name, text = _STATUS.get(status, (f"CUFFT_UNKNOWN_{status}", "unknown cuFFT status"))
    raise CufftError(name, text, call, status)


_i, _vp = ctypes.c_int, ctypes.c_void_p
_pi = ctypes.POINTER(ctypes.c_int)

# name -> (argtypes, required); device pointers and streams are passed as ints
_PROTOTYPES: dict[str, tuple[list[Any], bool]] = {
    # plan*, rank, n*, inembed*, istride, idist, onembed*, ostride, odist, type, batch
    "cufftPlanMany": ([_pi, _i, _pi, _pi, _i, _i, _pi, _i, _i, _i, _i], True),
    "cufftDestroy": ([_i], True),
    "cufftSetStream": ([_i, _vp], True),
    "cufftGetProperty": ([_i, _pi], True),
    "cufftExecC2C": ([_i, _vp, _vp, _i], True),
    "cufftExecZ2Z": ([_i, _vp, _vp, _i], True),
    "cufftExecR2C": ([_i, _vp, _vp], True),
    "cufftExecD2Z": ([_i, _vp, _vp], True),
    "cufftExecC2R": ([_i, _vp, _vp], True),
    "cufftExecZ2D": ([_i, _vp, _vp], True),
}

#: the exec function of each transform type
EXEC = {
    C2C: "cufftExecC2C",
    Z2Z: "cufftExecZ2Z",
    R2C: "cufftExecR2C",
    D2Z: "cufftExecD2Z",
    C2R: "cufftExecC2R",
    Z2D: "cufftExecZ2D",
}


class CufftLibrary:
    """The loaded cuFFT shared library with the functions ignis calls.

    Attributes:
        path: where the library was loaded from (None when the loader could not tell).
        version: ``(major, minor, patch)`` of cuFFT, read without a GPU.
    """

    def __init__(self, cdll: Any, path: str | None):
        self.path = path
        self._fns = bind_functions(cdll, _PROTOTYPES, path or "libcufft")
        self._local = threading.local()
        self.version = read_version(self.call, "cufftGetProperty")

    def __repr__(self) -> str:
        return f"<cuFFT {'.'.join(map(str, self.version))} from {self.path or 'libcufft'}>"

    def call(self, name: str, *args: Any) -> None:
        """Run the cuFFT function ``name`` and check its status."""
        status = self._fns[name](*args)
        if status:
            check(status, name)

    def plan(self, ordinal: int, kind: int, n: int, batch: int) -> tuple[int, bool]:
        """``(plan, kept)``: the calling thread's batched 1-D plan of ``kind`` over ``batch``
        contiguous rows of ``n`` points on the device ``ordinal`` (its context current), and
        whether it is kept (else the caller destroys it with :meth:`release` after use)."""
        plans = getattr(self._local, "plans", None)
        if plans is None:
            plans = self._local.plans = {}
        key = (ordinal, kind, n, batch)
        handle = plans.get(key)
        if handle is not None:
            return handle, True
        raw = _i(0)
        size = _i(n)
        # C2R rows are read as n // 2 + 1 points and R2C rows written so: the default layout
        # (null embeds) of cuFFT's batched real transforms
        self.call(
            "cufftPlanMany",
            ctypes.byref(raw),
            1,
            ctypes.byref(size),
            None,
            1,
            0,
            None,
            1,
            0,
            kind,
            batch,
        )
        handle = int(raw.value)
        if len(plans) < MAX_PLANS:
            plans[key] = handle
            return handle, True
        return handle, False

    def release(self, handle: int) -> None:
        """Destroy a plan :meth:`plan` did not keep (its stream must have finished with it)."""
        self.call("cufftDestroy", handle)


# --- loading -----------------------------------------------------------------------------------

_library = LazyLibrary(
    lambda: CufftLibrary(*open_nvidia_library("cufft")),
    "cuFFT",
    "ignis.fft on GPU arrays needs it",
)

#: The cuFFT library, loaded on first call; None when it is not installed or unusable (the
#: reason is kept in :func:`unavailable_reason`). Never raises.
load = _library.get


def unavailable_reason() -> str:
    """Why :func:`load` returned None ('' when cuFFT loaded or was not tried yet)."""
    return _library.reason


def require(op: str, cuda_major: int | None = None) -> CufftLibrary:
    """The library, or :class:`CufftNotFoundError` naming ``op``, the extra to install and why
    loading failed. Example: ``require("fft.fft")``."""
    lib = load()
    if lib is None:
        reason = unavailable_reason() or "not found"
        raise CufftNotFoundError(
            _nvidia_libs.not_found_message(op, "cuFFT", reason, "cufft", cuda_major)
        )
    return lib


def _reset_for_tests() -> None:
    """Forget the loaded library so the next :func:`load` searches again (tests only)."""
    _library.reset()
