"""What makes ``ignis`` a Python Array API namespace (2024.12) beyond its functions: the
version, the inspection object, the data-type functions and the constants.

The choices the standard leaves open, made once here (and read by the creation functions and
the reductions, so that they agree everywhere):

* the default floating dtype is **float32** (as PyTorch; the GPU's native width): Python
  floats, ``zeros``, ``arange(0.5, 2)``, ``linspace`` and ``mean`` of nothing else give it;
  NumPy arrays and scalars keep their own dtype;
* the default complex floating dtype is **complex64**, the complex dtype of the default float
  (``asarray(1j)`` gives it, as ``asarray(1.0)`` gives float32);
* the default integer and index dtypes are int64 (as NumPy and PyTorch);
* devices are ``"cpu"`` and ``"cuda:N"``; the default is :func:`ignis.get_default_device`.

Example::

    >>> info = ignis.__array_namespace_info__()
    >>> info.default_dtypes(device="cpu")["real floating"]
    ignis.float32
    >>> ignis.finfo(ignis.float16).eps
    0.0009765625
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from .. import _dtypes as dt
from .._errors import DTypeError
from ._device import as_device, get_default_device

__all__ = [
    "__array_api_version__",
    "__array_namespace_info__",
    "ArrayNamespaceInfo",
    "astype",
    "finfo",
    "iinfo",
    "isdtype",
    "e",
    "inf",
    "nan",
    "pi",
    "newaxis",
]

__array_api_version__ = "2024.12"

e = math.e
inf = math.inf
nan = math.nan
pi = math.pi
newaxis = None

_OUTSIDE_STANDARD = (dt.float16, dt.bfloat16)

#: The dtype kinds of :func:`isdtype` and ``ArrayNamespaceInfo.dtypes(kind=...)``.
_KINDS = {
    "bool": ("b",),
    "signed integer": ("i",),
    "unsigned integer": ("u",),
    "integral": ("i", "u"),
    "real floating": ("f",),
    "complex floating": ("c",),
    "numeric": ("i", "u", "f", "c"),
}


def isdtype(dtype: Any, kind: Any) -> bool:
    """Whether ``dtype`` is of ``kind``: a dtype, a kind name (``"bool"``, ``"signed integer"``,
    ``"unsigned integer"``, ``"integral"``, ``"real floating"``, ``"complex floating"``,
    ``"numeric"``) or a tuple of them.

    Example: ``ignis.isdtype(ignis.int8, ("integral", "bool"))`` is True.
    """
    d = dt.as_dtype(dtype, "isdtype")
    if isinstance(kind, tuple):
        return any(isdtype(d, k) for k in kind)
    if isinstance(kind, str):
        kinds = _KINDS.get(kind)
        if kinds is None:
            raise ValueError(f"isdtype: unknown kind {kind!r}; expected one of {tuple(_KINDS)}")
        return d.kind in kinds
    return d is dt.as_dtype(kind, "isdtype")


class finfo_object(NamedTuple):  # noqa: N801 (the standard's type names it so)
    """Machine limits of a floating dtype (the standard's ``finfo_object``)."""

    bits: int
    eps: float
    max: float
    min: float
    smallest_normal: float
    dtype: dt.DType


class iinfo_object(NamedTuple):  # noqa: N801
    """Limits of an integer dtype (the standard's ``iinfo_object``)."""

    bits: int
    max: int
    min: int
    dtype: dt.DType


def _dtype_of(type: Any, op: str) -> dt.DType:  # noqa: A002 (the standard's parameter name)
    d = getattr(type, "dtype", type)
    return dt.as_dtype(d, op) if not isinstance(d, dt.DType) else d


def finfo(type: Any, /) -> finfo_object:  # noqa: A002
    """Limits of a floating dtype (or of an array's): ``bits``, ``eps``, ``max``, ``min``,
    ``smallest_normal``, ``dtype``. A complex dtype gives its parts' limits, with ``dtype`` the
    real dtype of the parts (the standard's rule): ``finfo(complex64)`` is float32's values
    with ``bits == 32`` and ``dtype == float32``.

    Example: ``ignis.finfo("bfloat16").bits == 16``.
    """
    d = _dtype_of(type, "finfo")
    if d.kind == "c":
        d = dt.real_of(d)
    if d.kind != "f":
        raise DTypeError(f"finfo: needs a floating dtype, got {d.name}; use iinfo for integers")
    import ml_dtypes

    info = ml_dtypes.finfo(d.numpy) if d is dt.bfloat16 else np.finfo(d.numpy)
    return finfo_object(
        d.bits, float(info.eps), float(info.max), float(info.min), float(info.smallest_normal), d
    )


def iinfo(type: Any, /) -> iinfo_object:  # noqa: A002
    """Limits of an integer dtype (or of an array's): ``bits``, ``max``, ``min``, ``dtype``.
    Example: ``ignis.iinfo(ignis.uint8).max == 255``."""
    d = _dtype_of(type, "iinfo")
    if d.kind not in "iu":
        raise DTypeError(f"iinfo: needs an integer dtype, got {d.name}; use finfo for floats")
    info = np.iinfo(d.numpy)
    return iinfo_object(d.bits, int(info.max), int(info.min), d)


def astype(x: Any, dtype: Any, /, *, copy: bool = True, device: Any = None) -> Any:
    """``x`` converted to ``dtype`` (and moved to ``device``); ``copy=False`` returns ``x``
    itself where nothing changes. Example: ``ignis.astype(x, ignis.int32)``."""
    from .array import NvArray

    if not isinstance(x, NvArray):
        raise TypeError(f"astype: expected an NvArray, got {type(x).__name__}")
    out = x.astype(dt.as_dtype(dtype, "astype"), copy=copy)
    return out if device is None else out.to(device)


class ArrayNamespaceInfo:
    """What ``ignis.__array_namespace_info__()`` returns: the namespace's capabilities,
    devices and dtypes (the standard's inspection API)."""

    __module__ = "ignis"

    def capabilities(self) -> dict[str, Any]:
        """``{"boolean indexing": True, "data-dependent shapes": True, "max dimensions": 64}``
        (data-dependent shapes synchronize with the device once to learn the size)."""
        return {"boolean indexing": True, "data-dependent shapes": True, "max dimensions": 64}

    def default_device(self) -> Any:
        """The device arrays are made on when none is given."""
        return get_default_device()

    def devices(self) -> list[Any]:
        """Every device arrays can live on: ``"cpu"`` and each CUDA device present."""
        from .. import _device

        found = [as_device("cpu")]
        try:
            count = _device.device_count()
        except Exception:  # no driver: the CPU only
            count = 0
        return found + [as_device(f"cuda:{i}") for i in range(count)]

    def default_dtypes(self, *, device: Any = None) -> dict[str, Any]:
        """The default dtypes (the same on every device)."""
        if device is not None:
            as_device(device)
        return {
            "real floating": dt.default_float,
            "complex floating": dt.default_complex,
            "integral": dt.default_int,
            "indexing": dt.default_int,
        }

    def dtypes(self, *, device: Any = None, kind: Any = None) -> dict[str, dt.DType]:
        """The standard's dtypes (of ``kind``, as :func:`isdtype` names kinds) by name;
        float16 and bfloat16, which the standard does not name, are left out."""
        if device is not None:
            as_device(device)
        return {
            d.name: d
            for d in dt.every_dtype
            if d not in _OUTSIDE_STANDARD and (kind is None or isdtype(d, kind))
        }

    def __repr__(self) -> str:
        return "<ignis array namespace info>"


def __array_namespace_info__() -> ArrayNamespaceInfo:  # noqa: N807 (the standard's name)
    """The namespace's inspection object (see :class:`ArrayNamespaceInfo`)."""
    return ArrayNamespaceInfo()
