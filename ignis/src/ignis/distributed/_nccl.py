"""NCCL through ``ctypes``: the loader, the C prototypes and the one status check.

NCCL is optional (the ``nccl-cu12`` / ``nccl-cu13`` extras install NVIDIA's ``nvidia-nccl-cu12``
/ ``nvidia-nccl-cu13`` wheels). :func:`load` looks for ``libnccl.so.2``, in order: with
``cuda.pathfinder`` (NVIDIA's wheels, conda, the CUDA toolkit), in the ``nvidia.nccl`` package
of this Python (where PyTorch's CUDA wheels put it: ``nvidia/nccl/lib/libnccl.so.2``), then
the system's loader path. Without it :func:`require` raises :class:`NcclNotFoundError` naming
the extra.

Before the library is opened, :func:`~ignis.distributed._env.force_nccl_settings` sets
``NCCL_NVLS_ENABLE=0`` (NVLink multicast off), so no communicator of this process uses it.

Every ``ncclResult_t`` goes through :func:`check`, which raises :class:`NcclError` as
``"ncclInvalidArgument: explanation (in ncclAllReduce)"``.

Example::

    >>> lib = load()            # None where NCCL is not installed
    >>> lib.version if lib else None
    (2, 27, 3)
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
from typing import Any

from .._nvidia_libs import LazyLibrary, bind_functions, install_hint, open_nvidia_library
from ._env import force_nccl_settings
from ._errors import NcclError, NcclNotFoundError

__all__ = [
    "NCCL_UNIQUE_ID_BYTES",
    "NcclLibrary",
    "UniqueId",
    "check",
    "load",
    "require",
    "unavailable_reason",
]

NCCL_UNIQUE_ID_BYTES = 128
# ncclResult_t
NCCL_SUCCESS = 0
NCCL_IN_PROGRESS = 7

_STATUS_NAMES = {
    0: "ncclSuccess",
    1: "ncclUnhandledCudaError",
    2: "ncclSystemError",
    3: "ncclInternalError",
    4: "ncclInvalidArgument",
    5: "ncclInvalidUsage",
    6: "ncclRemoteError",
    7: "ncclInProgress",
}
_STATUS_TEXT = {
    1: "a call to a CUDA function failed",
    2: "a call to the system failed (a peer may have gone away)",
    3: "an internal check failed inside NCCL",
    4: "an invalid value was passed to the function",
    5: "the call is invalid in this state (e.g. mismatched collectives across ranks)",
    6: "a remote process reported an error or went away",
    7: "the operation is still in progress",
}


class UniqueId(ctypes.Structure):
    """``ncclUniqueId``: 128 opaque bytes made by rank 0 and handed to every rank."""

    _fields_ = [("internal", ctypes.c_char * NCCL_UNIQUE_ID_BYTES)]


def check(status: int, call: str, library: NcclLibrary | None = None) -> None:
    """Raise :class:`NcclError` unless ``status`` is ``ncclSuccess``: the one place that
    compares NCCL status codes.

    Example: ``check(4, "ncclAllReduce")`` raises
    ``NcclError("ncclInvalidArgument: an invalid value ... (in ncclAllReduce)")``.
    """
    status = int(status)
    if status == NCCL_SUCCESS:
        return
    name = _STATUS_NAMES.get(status, f"ncclUnknownResult{status}")
    description = _STATUS_TEXT.get(status, "unknown NCCL result")
    if library is not None:
        text = library.error_string(status)
        if text:
            description = text
    raise NcclError(name, description, call, status)


_vp, _int, _sz = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
_P = ctypes.POINTER

# name -> (argtypes, required)
_PROTOTYPES: dict[str, tuple[list[Any], bool]] = {
    "ncclGetVersion": ([_P(_int)], True),
    "ncclGetUniqueId": ([_P(UniqueId)], True),
    "ncclCommInitRank": ([_P(_vp), _int, UniqueId, _int], True),
    "ncclCommDestroy": ([_vp], True),
    "ncclCommAbort": ([_vp], True),
    "ncclCommGetAsyncError": ([_vp, _P(_int)], True),
    "ncclCommCount": ([_vp, _P(_int)], True),
    "ncclCommUserRank": ([_vp, _P(_int)], True),
    "ncclGetErrorString": ([_int], True),
    "ncclGetLastError": ([_vp], False),
    "ncclAllReduce": ([_vp, _vp, _sz, _int, _int, _vp, _vp], True),
    "ncclBroadcast": ([_vp, _vp, _sz, _int, _int, _vp, _vp], True),
    "ncclReduceScatter": ([_vp, _vp, _sz, _int, _int, _vp, _vp], True),
    "ncclAllGather": ([_vp, _vp, _sz, _int, _vp, _vp], True),
    "ncclSend": ([_vp, _sz, _int, _int, _vp, _vp], True),
    "ncclRecv": ([_vp, _sz, _int, _int, _vp, _vp], True),
    "ncclGroupStart": ([], True),
    "ncclGroupEnd": ([], True),
}
_RESTYPES = {"ncclGetErrorString": ctypes.c_char_p, "ncclGetLastError": ctypes.c_char_p}


class NcclLibrary:
    """The loaded NCCL: its bound functions, version and path.

    Attributes: ``path`` (where it was loaded from), ``version`` (``(major, minor, patch)``),
    ``has_avg`` (``ncclAvg`` exists: NCCL >= 2.10).
    """

    def __init__(self, cdll: Any, path: str | None):
        self.path = path
        self._fns = bind_functions(cdll, _PROTOTYPES, path or "libnccl", _RESTYPES)
        code = ctypes.c_int(0)
        self.call("ncclGetVersion", ctypes.byref(code))
        self.version = _decode_version(int(code.value))
        self.has_avg = self.version >= (2, 10, 0)

    def __repr__(self) -> str:
        return f"<NcclLibrary {'.'.join(map(str, self.version))} at {self.path}>"

    def call(self, name: str, *args: Any) -> None:
        """Call NCCL's ``name`` and check its status."""
        check(self._fns[name](*args), name, self)

    def raw(self, name: str, *args: Any) -> int:
        """Call ``name`` and return its status unchecked (the watchdog's abort path)."""
        return int(self._fns[name](*args))

    def error_string(self, status: int) -> str:
        try:
            text = self._fns["ncclGetErrorString"](int(status))
        except Exception:  # pragma: no cover - defensive: the message matters more
            return ""
        return text.decode(errors="replace") if text else ""

    def last_error(self, comm: int) -> str:
        """NCCL's description of the last error on ``comm`` ("" where NCCL < 2.13)."""
        fn = self._fns.get("ncclGetLastError")
        if fn is None:
            return ""
        text = fn(comm)
        return text.decode(errors="replace") if text else ""

    def unique_id(self) -> bytes:
        """A new ``ncclUniqueId`` (128 bytes); rank 0 makes it, the store hands it round."""
        uid = UniqueId()
        self.call("ncclGetUniqueId", ctypes.byref(uid))
        return bytes(ctypes.string_at(ctypes.addressof(uid), NCCL_UNIQUE_ID_BYTES))


def _decode_version(code: int) -> tuple[int, int, int]:
    # NCCL_VERSION_CODE: major*10000 + minor*100 + patch since 2.9; major*1000 + ... before.
    if code >= 10000:
        return code // 10000, (code % 10000) // 100, code % 100
    return code // 1000, (code % 1000) // 100, code % 100


def _package_library() -> str | None:
    """``nvidia/nccl/lib/libnccl.so.2`` of the ``nvidia.nccl`` package, if installed."""
    try:
        spec = importlib.util.find_spec("nvidia.nccl")
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    for folder in spec.submodule_search_locations or ():
        path = os.path.join(folder, "lib", "libnccl.so.2")
        if os.path.exists(path):
            return path
    return None


def _open() -> NcclLibrary:
    force_nccl_settings()  # before NCCL can read its environment
    return _find()


def _find() -> NcclLibrary:
    reasons = []
    try:
        cdll, path = open_nvidia_library("nccl")
        return NcclLibrary(cdll, path)
    except Exception as exc:  # pathfinder's not-found error, ImportError, OSError
        reasons.append(f"cuda.pathfinder: {type(exc).__name__}: {exc}")
    path = _package_library()
    if path is not None:
        return NcclLibrary(ctypes.CDLL(path), path)
    reasons.append("no nvidia.nccl package")
    try:
        return NcclLibrary(ctypes.CDLL("libnccl.so.2"), "libnccl.so.2")
    except OSError as exc:
        reasons.append(f"system loader: {exc}")
    raise OSError("; ".join(reasons))


_lazy = LazyLibrary(_open, "NCCL", "ignis.distributed collectives are unavailable")


def load() -> NcclLibrary | None:
    """The NCCL library, opened on first use; None when it is not installed."""
    return _lazy.get()


def unavailable_reason() -> str:
    """Why :func:`load` returned None ("" when it has not failed)."""
    return _lazy.reason


def require(op: str) -> NcclLibrary:
    """The NCCL library, or :class:`NcclNotFoundError` naming ``op`` and the extra."""
    lib = load()
    if lib is None:
        raise NcclNotFoundError(
            f"{op}: the NCCL backend needs NCCL (libnccl.so.2), which could not be loaded "
            f"({unavailable_reason()}); install it with {install_hint('nccl')}"
        )
    return lib
