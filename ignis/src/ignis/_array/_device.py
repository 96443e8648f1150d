"""Array device names ("cpu", "cuda:N") and the process-wide default device.

An :class:`ArrayDevice` is a ``str`` subclass, so ``a.device == "cuda:0"`` and printing work as
with a plain string, while ``.type`` and ``.index`` give the parts.

:data:`DEVICE_SPELLINGS` is the one list of what a device argument may be; every parser of one
(``device=`` arguments, ``NvArray.to``, :func:`set_default_device`, ``IGNIS_DEVICE``,
``ignis.Device("cuda:1")``) goes through :func:`parse_device_spec`, which reads that list, and
every error message quotes it (:func:`expected_devices`), so the two cannot disagree.

The default device is, in order: what :func:`set_default_device` set; the ``IGNIS_DEVICE``
environment variable; ``"cuda:0"`` when a CUDA driver with a device is present and the cuda
array backend is part of this installation; otherwise ``"cpu"``.
"""

from __future__ import annotations

import importlib.util
import operator
import os
import threading
from typing import Any

__all__ = [
    "ArrayDevice",
    "DeviceLike",
    "DEVICE_SPELLINGS",
    "as_device",
    "expected_devices",
    "parse_device_spec",
    "get_default_device",
    "set_default_device",
]

# Every accepted spelling of a device argument: (spelling, device type, meaning). ``N`` stands
# for a CUDA ordinal, 0, 1, ... in ASCII digits. Strings are read case-insensitively, ignoring
# surrounding blanks. "gpu" stays, as an alias of "cuda", because ignis has accepted it from the
# start (PyTorch refuses it; refusing it now would break callers for no gain).
DEVICE_SPELLINGS: tuple[tuple[str, str, str], ...] = (
    ("cpu", "cpu", "host memory, the NumPy backend"),
    ("cuda", "cuda", "CUDA device 0"),
    ("cuda:N", "cuda", "CUDA device N"),
    ("gpu", "cuda", "the same as 'cuda'"),
    ("gpu:N", "cuda", "the same as 'cuda:N'"),
    ("N", "cuda", "an int N >= 0: CUDA device N"),
    ("ignis.Device", "cuda", "that CUDA device"),
)


class ArrayDevice(str):
    """Where an array's memory lives: ``"cpu"`` or ``"cuda:N"``.

    Attributes:
        type: ``"cpu"`` or ``"cuda"``.
        index: the CUDA ordinal, or None for the CPU.

    Example: ``as_device("cuda")`` is ``"cuda:0"`` with ``.type == "cuda"`` and ``.index == 0``.
    """

    __slots__ = ("type", "index")
    type: str
    index: int | None

    def __new__(cls, spec: str) -> ArrayDevice:
        kind, index = parse_device_spec(spec)
        self = super().__new__(cls, kind if index is None else f"{kind}:{index}")
        self.type = kind
        self.index = index
        return self

    def __repr__(self) -> str:
        return f"device({str.__repr__(self)})"

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (ArrayDevice, (str(self),))

    @property
    def is_cuda(self) -> bool:
        return self.type == "cuda"


DeviceLike = ArrayDevice | str | int


def expected_devices(kind: str | None = None) -> str:
    """The accepted device spellings, as error messages quote them (from DEVICE_SPELLINGS);
    ``kind="cuda"`` gives only the CUDA ones (for ``ignis.Device``)."""
    items = [
        f"{spelling if spelling in _NON_STRINGS else repr(spelling)} ({meaning})"
        for spelling, k, meaning in DEVICE_SPELLINGS
        if kind is None or k == kind
    ]
    return "one of " + ", ".join(items)


_NON_STRINGS = ("N", "ignis.Device")  # spellings that are not strings (an int, a Device)


def parse_device_spec(spec: Any) -> tuple[str, int | None]:
    """``(type, index)`` of a device argument in any spelling of :data:`DEVICE_SPELLINGS`:
    ``("cpu", None)`` or ``("cuda", N)``. An int-like object (an ``ignis.Device``, a NumPy
    integer) is its ordinal; another object that is not a str (a ``torch.device``) is read
    through its ``str()``.

    Raises ValueError naming what was given and the accepted spellings.

    Example: ``parse_device_spec("GPU:1") == ("cuda", 1)``.
    """
    given = spec
    if isinstance(spec, bool):  # an int subclass, but True is not a device
        raise ValueError(f"invalid device {spec!r}; expected {expected_devices()}")
    if not isinstance(spec, str):
        try:
            index = operator.index(spec)
        except TypeError:
            spec = str(spec)
        else:
            if index < 0:
                raise ValueError(
                    f"invalid device {spec!r} (a CUDA ordinal is >= 0); "
                    f"expected {expected_devices()}"
                )
            return "cuda", index
    text = spec.strip().lower()
    for spelling, kind, _ in DEVICE_SPELLINGS:
        if spelling in _NON_STRINGS:
            continue
        if spelling.endswith(":N"):
            prefix = spelling[:-1]
            rest = text[len(prefix) :]
            if text.startswith(prefix) and rest.isascii() and rest.isdigit():
                return kind, int(rest)
        elif text == spelling:
            return kind, (0 if kind == "cuda" else None)
    raise ValueError(f"invalid device {given!r}; expected {expected_devices()}")


_CACHE: dict[Any, ArrayDevice] = {}


def as_device(device: Any) -> ArrayDevice:
    """The :class:`ArrayDevice` of a device argument in any spelling of
    :data:`DEVICE_SPELLINGS`: ``"cpu"``, ``"cuda"``, ``"cuda:N"``, ``"gpu"``, ``"gpu:N"``, an
    int N (``cuda:N``), an ``ignis.Device``, or any object whose ``str()`` is one of those.

    Raises ValueError for anything else, listing the accepted spellings. None is not accepted
    here; callers substitute :func:`get_default_device` first.
    """
    if type(device) is ArrayDevice:
        return device
    key = device if isinstance(device, (str, int)) and not isinstance(device, bool) else None
    cached = _CACHE.get(key) if key is not None else None
    if cached is not None:
        return cached
    kind, index = parse_device_spec(device)
    result = ArrayDevice(kind if index is None else f"{kind}:{index}")
    if key is not None:
        _CACHE[key] = result
    return result


# --- the default device ----------------------------------------------------------------------

_lock = threading.Lock()
_explicit: ArrayDevice | None = None
_auto: ArrayDevice | None = None


def set_default_device(device: DeviceLike | None) -> None:
    """Make ``device`` the default for new arrays (None returns to the automatic choice).

    ``device`` is any spelling of :data:`DEVICE_SPELLINGS` (``"cpu"``, ``"cuda"``,
    ``"cuda:N"``, ``"gpu"``, ``"gpu:N"``, an int N, an ``ignis.Device``); ValueError otherwise.

    Example: ``ignis.set_default_device("cpu")``.
    """
    global _explicit
    _explicit = None if device is None else as_device(device)


def get_default_device() -> ArrayDevice:
    """The device new arrays go to when none is given (see the module notes for the order)."""
    if _explicit is not None:
        return _explicit
    env = os.environ.get("IGNIS_DEVICE")
    if env:
        try:
            return as_device(env)
        except ValueError as exc:
            raise ValueError(f"IGNIS_DEVICE: {exc}") from None
    return _automatic_device()


def _automatic_device() -> ArrayDevice:
    global _auto
    if _auto is None:
        with _lock:
            if _auto is None:
                _auto = as_device("cuda:0" if _cuda_usable() else "cpu")
    return _auto


def _cuda_usable() -> bool:
    from .. import _bindings

    if not _bindings.driver_available():
        return False
    # A driver alone is not enough: the arrays also need the cuda backend module.
    return importlib.util.find_spec(f"{__package__}._cuda_backend") is not None
