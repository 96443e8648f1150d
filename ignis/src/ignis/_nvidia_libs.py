"""NVIDIA's optional libraries through ``ctypes``: what the loaders of cuBLAS, cuBLASLt and
cuSOLVER share.

Each library module (:mod:`ignis._cublas`, :mod:`ignis._cublaslt`, :mod:`ignis._cusolver`)
declares its C functions as a table ``name -> (argtypes, required)`` and its status codes; this
module does the rest the same way for all of them:

* :func:`open_nvidia_library` finds the shared library with ``cuda.pathfinder`` (NVIDIA's
  wheels, conda, the CUDA toolkit) and :class:`LazyLibrary` opens it once per process, on first
  use, returning None (never raising) where it is missing;
* :func:`bind_functions` sets the prototypes on the ``ctypes.CDLL`` and :func:`read_version`
  reads ``(major, minor, patch)`` without a GPU;
* :class:`HandleLibrary` keeps one handle per (thread, device), created on first use and
  destroyed when the thread's state goes, and binds a handle to a stream only when it changes;
* :func:`install_hint` / :func:`not_found_message` word the error of a GPU call that needs a
  library that is not installed.

Example::

    >>> cdll, path = open_nvidia_library("cusolver")
    >>> fns = bind_functions(cdll, {"cusolverGetProperty": ([c_int, POINTER(c_int)], True)},
    ...                      path or "libcusolver")
"""

from __future__ import annotations

import ctypes
import importlib
import logging
import threading
import weakref
from collections.abc import Callable
from typing import Any, ClassVar

__all__ = [
    "HandleLibrary",
    "LazyLibrary",
    "bind_functions",
    "install_hint",
    "not_found_message",
    "open_nvidia_library",
    "read_version",
]

logger = logging.getLogger("ignis")

# libraryPropertyType
MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL = 0, 1, 2

#: The CUDA majors with an extra of their own per library (``cusolver-cu12``, ``cusolver-cu13``).
_CUDA_MAJORS = (12, 13)


# --- binding -----------------------------------------------------------------------------------

def bind_functions(
    cdll: Any, prototypes: dict[str, tuple[list[Any], bool]], where: str,
    restypes: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The functions of ``prototypes`` (``name -> (argtypes, required)``) found in ``cdll``,
    with their ``argtypes`` set and ``restype`` ``c_int`` (a status) unless ``restypes`` names
    another.

    An optional function the library lacks is left out of the result.

    Raises:
        OSError: ``"<where> has no function <name>"`` for the first required one missing
        (``where``: the library's path, or its name where the path is not known).

    Example: ``bind_functions(cdll, {"cublasDestroy_v2": ([c_void_p], True)}, "libcublas")``.
    """
    restypes = restypes or {}
    fns: dict[str, Any] = {}
    for name, (argtypes, required) in prototypes.items():
        try:
            fn = getattr(cdll, name)
        except AttributeError:
            if required:
                raise OSError(f"{where} has no function {name}") from None
            continue
        fn.argtypes = argtypes
        fn.restype = restypes.get(name, ctypes.c_int)
        fns[name] = fn
    return fns


def read_version(call: Callable[..., None], getter: str) -> tuple[int, int, int]:
    """``(major, minor, patch)`` from the library's ``<getter>(libraryPropertyType, int*)``
    (``cublasGetProperty``, ``cusolverGetProperty``), run through ``call(name, *args)``, the
    library's status-checking call. Needs no GPU."""
    parts = []
    for which in (MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL):
        value = ctypes.c_int(0)
        call(getter, which, ctypes.byref(value))
        parts.append(int(value.value))
    return parts[0], parts[1], parts[2]


# --- handles -----------------------------------------------------------------------------------

class HandleLibrary:
    """Base of a loaded library whose functions take a handle of one (device, thread) pair.

    A subclass names its handle functions in the class attributes below and defines
    ``_call(name, *args)`` (call and check the status); :meth:`_setup_handle` configures a new
    handle (cuBLAS's math mode). Attributes: ``path`` (where the library was loaded from, None
    when the loader could not tell) and ``_fns`` (the bound functions by name).
    """

    #: The library's name in log lines ("cuBLAS").
    _WHAT: ClassVar[str] = ""
    #: ``Create(handle*)`` and ``Destroy(handle)``.
    _CREATE: ClassVar[str] = ""
    _DESTROY: ClassVar[str] = ""
    #: ``SetStream(handle, stream)``; None where the library takes the stream on each call
    #: (cuBLASLt), so a handle is destroyed without unbinding it first.
    _SET_STREAM: ClassVar[str | None] = None
    #: Destroy functions of the other per-thread objects :meth:`_thread_handles` keeps in
    #: ``objects`` ("syevj" -> ``cusolverDnDestroySyevjInfo``).
    _OBJECT_DESTROYERS: ClassVar[dict[str, str]] = {}

    def __init__(self, cdll: Any, path: str | None,
                 prototypes: dict[str, tuple[list[Any], bool]], name: str,
                 restypes: dict[str, Any] | None = None):
        self.path = path
        self._fns: dict[str, Any] = bind_functions(cdll, prototypes, path or name, restypes)
        self._local = threading.local()
        # handle -> the stream it was last bound to (each handle belongs to one thread)
        self._bound_stream: dict[int, int] = {}

    def __repr__(self) -> str:
        version = getattr(self, "version", None)
        shown = f" {'.'.join(map(str, version))}" if version else ""
        return f"<{type(self).__name__}{shown} at {self.path}>"

    def _call(self, name: str, *args: Any) -> None:  # pragma: no cover - each library has one
        raise NotImplementedError

    def _setup_handle(self, handle: int) -> None:
        """Configure a handle just created (nothing by default); destroy it if this fails."""

    def handle(self, device: Any) -> int:
        """The calling thread's handle for ``device`` (an ignis Device), created on first use.

        The device's context must be current on this thread (the backend activates it).
        """
        # Inline rather than through _thread_handles(): this runs on every product.
        handles = getattr(self._local, "handles", None)
        if handles is None:
            handles = self._local.handles = ThreadHandles(self)
        h = handles.by_device.get(device.ordinal)
        if h is None:
            h = handles.create(device)
        return h

    def bind(self, handle: int, stream: int) -> None:
        """Order the handle's work on ``stream`` (skipped when it is bound there already)."""
        bound = self._bound_stream
        if bound.get(handle) != stream:
            self._call(self._SET_STREAM, handle, stream)
            bound[handle] = stream

    def _thread_handles(self) -> ThreadHandles:
        handles = getattr(self._local, "handles", None)
        if handles is None:
            handles = self._local.handles = ThreadHandles(self)
        return handles


class ThreadHandles:
    """One thread's handles of one library (one per device) and its other per-thread objects;
    destroyed when the thread's state goes."""

    def __init__(self, lib: HandleLibrary):
        self.lib = lib
        self.by_device: dict[int, int] = {}
        self.objects: dict[str, int] = {}  # e.g. "syevj" -> syevjInfo_t
        self._devices: dict[int, Any] = {}
        finalizer = weakref.finalize(self, _destroy_handles, lib, self.by_device, self._devices,
                                     self.objects)
        # At interpreter exit the driver may already be torn down: let the process clean up.
        finalizer.atexit = False

    def create(self, device: Any) -> int:
        lib = self.lib
        raw = ctypes.c_void_p()
        lib._call(lib._CREATE, ctypes.byref(raw))
        h = int(raw.value or 0)
        lib._bound_stream.pop(h, None)  # a new handle at a freed one's address
        lib._setup_handle(h)
        self.by_device[device.ordinal] = h
        self._devices[device.ordinal] = device
        logger.debug("%s handle created for cuda:%d on thread %s", lib._WHAT, device.ordinal,
                     threading.current_thread().name)
        return h


def _destroy_handles(lib: HandleLibrary, handles: dict[int, int], devices: dict[int, Any],
                     objects: dict[str, int]) -> None:
    for key, obj in objects.items():
        if obj:
            try:
                lib._fns[lib._OBJECT_DESTROYERS[key]](obj)
            except Exception:  # pragma: no cover - best effort while a thread winds down
                pass
    objects.clear()
    set_stream = lib._SET_STREAM
    if set_stream is not None:
        from ._device import activate
    for ordinal, h in handles.items():
        try:
            if set_stream is not None:
                activate(devices[ordinal])
                lib._fns[set_stream](h, None)  # the last stream may be gone already
                lib._bound_stream.pop(h, None)
            lib._fns[lib._DESTROY](h)
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
    """``(ctypes.CDLL, path)`` of NVIDIA's library ``name`` ("cublas", "cublasLt", "cusolver"),
    found by ``cuda.pathfinder`` (wheels, conda, the CUDA toolkit).

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


# --- the error of a missing library ------------------------------------------------------------

def install_hint(family: str, cuda_major: int | None = None) -> str:
    """The pip command that installs the extra ``<family>-cu<major>`` of ignis for the CUDA
    major in use (``cuda_major``; both extras when it is not known).

    Example: ``install_hint("cusolver", 12)`` is ``'pip install "ignis-cuda[cusolver-cu12]"'``.
    """
    if cuda_major in _CUDA_MAJORS:
        return f'pip install "ignis-cuda[{family}-cu{int(cuda_major)}]"'
    return (f'pip install "ignis-cuda[{family}-cu12]" (CUDA 12) or '
            f'"ignis-cuda[{family}-cu13]" (CUDA 13)')


def not_found_message(op: str, what: str, reason: str, family: str,
                      cuda_major: int | None = None) -> str:
    """The message of a GPU call ``op`` that needs the library ``what`` (which could not be
    loaded, for ``reason``): the extra that installs it, or moving the array to the CPU.

    Example: ``not_found_message("linalg.inv", "cuSOLVER", "not found", "cusolver", 12)``.
    """
    return (f"{op} on a GPU array needs {what}, which could not be loaded ({reason}); "
            f"install it with {install_hint(family, cuda_major)}, or move the array to the CPU "
            "with .to('cpu')")
