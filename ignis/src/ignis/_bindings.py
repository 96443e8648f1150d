"""The bindings seam: the only module that imports ``cuda.bindings``.

It hides the differences between cuda-bindings 12.x and 13.x and is the single error choke point:
every driver and NVRTC status goes through :func:`check` (or :func:`check_nvrtc`), which turns a
failure into :class:`~ignis.CudaError`. Nothing else in ignis compares status codes.

Usage inside ignis::

    from ._bindings import cu
    ptr = cu.cuMemAlloc(nbytes)          # checked; returns the values after the status
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

from ._errors import CudaError, NoDeviceError, NvrtcNotFoundError

try:  # cuda-bindings >= 12.6 lays the modules out under cuda.bindings
    from cuda.bindings import driver, nvrtc

    _IMPORT_ERROR: BaseException | None = None
except ImportError as exc:  # a base install without the cu12/cu13 extra: CPU arrays still work
    driver = None  # type: ignore[assignment]
    nvrtc = None  # type: ignore[assignment]
    _IMPORT_ERROR = exc

# What installs the CUDA parts (cuda-bindings and the NVRTC wheel): the one place that says it,
# for every message about a missing part and for the environment report.
INSTALL_HINT = (
    'pip install "ignis-cuda[cu12]" (CUDA 12 drivers) or "ignis-cuda[cu13]" (CUDA 13 drivers) '
    'installs it; from a source checkout: pip install "./ignis[cu12]"'
)

__all__ = [
    "driver",
    "nvrtc",
    "cu",
    "nv",
    "check",
    "check_nvrtc",
    "check_ready",
    "is_out_of_memory",
    "ensure_driver",
    "ensure_nvrtc",
    "driver_available",
    "driver_unavailable_reason",
    "nvrtc_available",
    "nvrtc_unavailable_reason",
    "bindings_unavailable_reason",
    "INSTALL_HINT",
    "bindings_version",
    "nvrtc_version",
    "driver_version",
    "forked_child",
    "FORK_MESSAGE",
]

_CU_SUCCESS = 0  # driver and NVRTC success statuses are both int enums equal to 0


def error_from_status(status: Any, call: str) -> CudaError:
    """Build the :class:`CudaError` for a failed driver status (no raise)."""
    if isinstance(status, nvrtc.nvrtcResult):
        _, text = nvrtc.nvrtcGetErrorString(status)
        return CudaError(status.name, _to_str(text), call, int(status))
    name = getattr(status, "name", str(status))
    try:
        err, text = driver.cuGetErrorString(status)
        description = _to_str(text) if err == _CU_SUCCESS else "unknown error"
    except Exception:  # the driver may be the thing that is broken
        description = "unknown error"
    return CudaError(name, description, call, int(status))


def check(result: tuple, call: str) -> Any:
    """Raise :class:`CudaError` unless ``result[0]`` is success; return the remaining values.

    ``result`` is the tuple every ``cuda.bindings`` function returns: ``(status, *values)``.
    One value comes back bare, several as a tuple, none as ``None``. Driver and NVRTC statuses
    are int enums in both 12.x and 13.x, with success equal to 0.
    """
    if result[0]:
        raise error_from_status(result[0], call)
    n = len(result)
    if n == 2:
        return result[1]
    return None if n == 1 else result[1:]


check_nvrtc = check


def check_ready(result: tuple, call: str) -> bool:
    """Check a ``cuStreamQuery``/``cuEventQuery`` result: True when the work is done, False while it
    is still running (``CUDA_ERROR_NOT_READY``), :class:`CudaError` for anything else."""
    status = result[0]
    if not status:
        return True
    if status == driver.CUresult.CUDA_ERROR_NOT_READY:
        return False
    raise error_from_status(status, call)


def is_out_of_memory(error: CudaError) -> bool:
    """True when ``error`` is the driver's out-of-memory status."""
    return error.code == "CUDA_ERROR_OUT_OF_MEMORY"


class _Checked:
    """Attribute access to a bindings module where every function's status is checked.

    ``cu.cuMemAlloc(n)`` calls ``driver.cuMemAlloc(n)`` and passes the result through
    :func:`check`. Wrappers are built on first use and cached.
    """

    def __init__(self, module_getter: Callable[[], Any], requires_driver: bool):
        self._module_getter = module_getter
        self._requires_driver = requires_driver

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith("_"):
            raise AttributeError(name)
        module = self._module_getter()
        fn = getattr(module, name)
        if self._requires_driver:

            def wrapper(*args: Any, _fn: Any = fn, _name: str = name) -> Any:
                ensure_driver()
                return check(_fn(*args), _name)

        else:
            # Checked at every call, not only when the wrapper is built: the library may be
            # found missing (or installed) after the first call (one dict lookup when loaded).

            def wrapper(*args: Any, _fn: Any = fn, _name: str = name) -> Any:
                if not _nvrtc_state["ok"]:
                    ensure_nvrtc()
                return check(_fn(*args), _name)

        wrapper.__name__ = name
        object.__setattr__(self, name, wrapper)
        return wrapper


def bindings_unavailable_reason() -> str:
    """Why ``cuda.bindings`` cannot be imported, with what installs it ("" when it can)."""
    if _IMPORT_ERROR is None:
        return ""
    return f"cuda-bindings is not importable ({_IMPORT_ERROR}); {INSTALL_HINT}"


def _driver_module() -> Any:
    if driver is None:
        raise NoDeviceError(bindings_unavailable_reason())
    return driver


def _nvrtc_module() -> Any:
    ensure_nvrtc()
    return nvrtc


cu = _Checked(_driver_module, requires_driver=True)
"""Checked access to ``cuda.bindings.driver`` (initializes the driver on first use)."""

nv = _Checked(_nvrtc_module, requires_driver=False)
"""Checked access to ``cuda.bindings.nvrtc`` (needs no GPU; raises NvrtcNotFoundError where
the NVRTC library or cuda-bindings is missing)."""


# --- NVRTC loading ---------------------------------------------------------------------------
# cuda-bindings imports its nvrtc module without the library and loads libnvrtc (through
# cuda.pathfinder) at the first call; where it is missing, every call raises pathfinder's
# DynamicLibNotFoundError. ensure_nvrtc turns that into one clear NvrtcNotFoundError. Only
# success is remembered: a failed load is tried again at the next call, so installing the
# wheel into a running process (or a test that restores the library) takes effect.

_nvrtc_lock = threading.Lock()
_nvrtc_state: dict[str, Any] = {"ok": False}


def _load_nvrtc() -> Any:
    """Load the NVRTC library and return the ``cuda.bindings.nvrtc`` module.

    The one place ignis loads NVRTC (tests replace it to simulate a missing library). Raises
    whatever cuda-bindings raises when the library cannot be found or loaded.
    """
    if nvrtc is None:
        raise ImportError(str(_IMPORT_ERROR))
    status, _major, _minor = nvrtc.nvrtcVersion()  # the first call loads the library
    if status:
        raise RuntimeError(f"nvrtcVersion failed with {status.name}")
    return nvrtc


def ensure_nvrtc() -> None:
    """Raise :class:`NvrtcNotFoundError` unless NVRTC can be used (cuda-bindings importable and
    the NVRTC library loadable); the message says what installs it. Needs no GPU."""
    if _nvrtc_state["ok"]:
        return
    with _nvrtc_lock:
        if _nvrtc_state["ok"]:
            return
        if nvrtc is None:
            raise NvrtcNotFoundError(
                "NVRTC (the CUDA run-time compiler) cannot be used: "
                + bindings_unavailable_reason()
            )
        try:
            _load_nvrtc()
        except Exception as exc:  # pathfinder's DynamicLibNotFoundError, OSError, ...
            raise NvrtcNotFoundError(
                f"NVRTC (the CUDA run-time compiler, libnvrtc) was not found "
                f"({type(exc).__name__}: {exc}); {INSTALL_HINT}"
            ) from exc
        _nvrtc_state["ok"] = True


def nvrtc_available() -> bool:
    """True when NVRTC can compile here (it needs no GPU). Never raises."""
    return not nvrtc_unavailable_reason()


def nvrtc_unavailable_reason() -> str:
    """Why NVRTC cannot be used, with what installs it ("" when it can). Never raises."""
    try:
        ensure_nvrtc()
    except NvrtcNotFoundError as exc:
        return str(exc)
    return ""


# --- driver initialization -------------------------------------------------------------------

_init_lock = threading.Lock()
_init_state: dict[str, Any] = {"done": False, "ok": False, "reason": ""}


def _initialize() -> None:
    with _init_lock:
        if _init_state["done"]:
            return
        ok, reason = False, ""
        if driver is None:
            reason = bindings_unavailable_reason()
        else:
            try:
                (status,) = driver.cuInit(0)
                if status == _CU_SUCCESS:
                    status, count = driver.cuDeviceGetCount()
                    if status == _CU_SUCCESS and count > 0:
                        ok = True
                    elif status == _CU_SUCCESS:
                        reason = "the CUDA driver reports no devices"
                    else:
                        reason = f"cuDeviceGetCount failed with {status.name}"
                else:
                    reason = f"cuInit failed with {status.name}"
            except Exception as exc:  # libcuda.so missing: the bindings raise while loading it
                reason = (
                    f"the NVIDIA driver library could not be loaded ({type(exc).__name__}: {exc})"
                )
        _init_state.update(done=True, ok=ok, reason=reason)


def driver_available() -> bool:
    """True when the CUDA driver loaded, initialized and reports at least one device."""
    if not _init_state["done"]:
        _initialize()
    return _init_state["ok"]


def driver_unavailable_reason() -> str:
    """Why :func:`driver_available` is false ("" when it is true)."""
    driver_available()
    return _init_state["reason"]


def ensure_driver() -> None:
    """Raise :class:`NoDeviceError` unless a usable CUDA driver and device exist."""
    if _init_state["ok"]:
        return
    if _init_state.get("forked"):
        raise NoDeviceError(FORK_MESSAGE)
    if not driver_available():
        raise NoDeviceError(
            "no CUDA device is available: "
            + _init_state["reason"]
            + ". GPU operations need an NVIDIA GPU and driver; array operations can run on "
            "device='cpu' (ignis.set_default_device('cpu'))."
        )


# --- fork safety -----------------------------------------------------------------------------
# A CUDA context does not survive fork(): the child inherits the parent's handles and pointers,
# but the driver state behind them belongs to the parent, and any driver call in the child hangs
# or fails with an unrelated status. So a child forked after the parent initialized the driver
# marks the driver unusable here, once, at fork time: the launch and allocation hot paths keep
# their single dict lookup (``_init_state["ok"]``) and pay nothing for this check.

FORK_MESSAGE = (
    "CUDA cannot be used in a forked child process: the parent process had initialized CUDA "
    "before fork(), and a CUDA context does not survive fork. Start worker processes with the "
    "'spawn' start method instead (multiprocessing.get_context('spawn'), or "
    "multiprocessing.set_start_method('spawn') before creating workers; for "
    "concurrent.futures.ProcessPoolExecutor pass mp_context=multiprocessing.get_context('spawn')), "
    "or use only device='cpu' arrays in the child"
)


def forked_child() -> bool:
    """True in a process forked from a parent that had initialized the CUDA driver."""
    return bool(_init_state.get("forked"))


def _after_fork_in_child() -> None:
    global _init_lock
    # The lock may have been held by another thread of the parent at fork time; that thread
    # does not exist here, so the lock would stay held forever.
    _init_lock = threading.Lock()
    if _init_state["ok"] or _init_state.get("forked"):
        _init_state.update(done=True, ok=False, forked=True, reason=FORK_MESSAGE)


if hasattr(os, "register_at_fork"):  # POSIX only; Windows has no fork
    os.register_at_fork(after_in_child=_after_fork_in_child)


# --- versions --------------------------------------------------------------------------------


def bindings_version() -> str:
    """The installed cuda-bindings version, e.g. ``"12.9.0"``."""
    try:
        from cuda.bindings import __version__

        return str(__version__)
    except ImportError:  # pragma: no cover
        return "not installed"


def bindings_major() -> int:
    """The major version of cuda-bindings (12 or 13)."""
    try:
        return int(bindings_version().split(".")[0])
    except ValueError:  # pragma: no cover
        return 0


def nvrtc_version() -> tuple[int, int]:
    """The NVRTC version as ``(major, minor)``; needs no GPU.

    Raises:
        NvrtcNotFoundError: NVRTC or cuda-bindings is not installed.
    """
    major, minor = nv.nvrtcVersion()
    return int(major), int(minor)


def driver_version() -> tuple[int, int] | None:
    """The CUDA version the driver supports as ``(major, minor)``, or None without a driver."""
    if not driver_available():
        return None
    v = int(cu.cuDriverGetVersion())
    return v // 1000, (v % 1000) // 10


def _to_str(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return str(value)
