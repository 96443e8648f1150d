"""Array device names ("cpu", "cuda:N") and the process-wide default device.

An :class:`ArrayDevice` is a ``str`` subclass, so ``a.device == "cuda:0"`` and printing work as
with a plain string, while ``.type`` and ``.index`` give the parts.

The default device is, in order: what :func:`set_default_device` set; the ``IGNIS_DEVICE``
environment variable; ``"cuda:0"`` when a CUDA driver with a device is present and the cuda
array backend is part of this installation; otherwise ``"cpu"``.
"""

from __future__ import annotations

import importlib.util
import os
import threading
from typing import Any

__all__ = ["ArrayDevice", "DeviceLike", "as_device", "get_default_device", "set_default_device"]


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
        kind, index = _parse(spec)
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


def _parse(spec: str) -> tuple[str, int | None]:
    text = spec.strip().lower()
    if text == "cpu":
        return "cpu", None
    if text == "cuda" or text == "gpu":
        return "cuda", 0
    for prefix in ("cuda:", "gpu:"):
        if text.startswith(prefix):
            rest = text[len(prefix) :]
            if rest.isdigit():
                return "cuda", int(rest)
    raise ValueError(f"invalid device {spec!r}; expected 'cpu', 'cuda' or 'cuda:N'")


_CACHE: dict[Any, ArrayDevice] = {}


def as_device(device: Any) -> ArrayDevice:
    """The :class:`ArrayDevice` for ``"cpu"``, ``"cuda"``, ``"cuda:N"``, an int N (``cuda:N``)
    or any object whose ``str()`` is one of those.

    Raises ValueError for anything else. None is not accepted here; callers substitute
    :func:`get_default_device` first.
    """
    if type(device) is ArrayDevice:
        return device
    if isinstance(device, bool):
        raise ValueError(f"invalid device {device!r}; expected 'cpu', 'cuda' or 'cuda:N'")
    cached = _CACHE.get(device) if isinstance(device, (str, int)) else None
    if cached is not None:
        return cached
    if isinstance(device, int):
        if device < 0:
            raise ValueError(f"invalid device {device!r}; a CUDA ordinal is >= 0")
        result = ArrayDevice(f"cuda:{device}")
    elif isinstance(device, str):
        result = ArrayDevice(device)
    else:
        result = ArrayDevice(str(device))
    if isinstance(device, (str, int)):
        _CACHE[device] = result
    return result


# --- the default device ----------------------------------------------------------------------

_lock = threading.Lock()
_explicit: ArrayDevice | None = None
_auto: ArrayDevice | None = None


def set_default_device(device: DeviceLike | None) -> None:
    """Make ``device`` the default for new arrays (None returns to the automatic choice).

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
