"""Array constructors: empty, zeros, ones, full, arange, from_host, asarray and ``*_like``.

Dtypes, unless ``dtype`` is given: ``empty/zeros/ones`` give the default floating dtype
(float32, ``ignis._dtypes.default_float``); ``full`` and ``arange`` infer it from their values
and ``from_host``/``asarray`` from the data: bool -> bool, Python ints -> int64, Python floats
-> float32 (the Array API's rule with ignis' default float; PyTorch's too), Python complex
numbers -> complex64 (the default complex, ``ignis._dtypes.default_complex``), while NumPy arrays
and scalars and arrays of other libraries keep their own dtype. ``device=None`` means
:func:`ignis.get_default_device`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import _caches
from .. import _dtypes as dt
from .._errors import DTypeError, ShapeError
from .._memory import Buffer
from . import _backend, _layout
from ._backend import get_backend
from ._device import ArrayDevice, as_device, get_default_device
from .array import NvArray

__all__ = [
    "empty",
    "zeros",
    "ones",
    "full",
    "arange",
    "from_host",
    "asarray",
    "empty_like",
    "zeros_like",
    "ones_like",
    "full_like",
]


def resolve_device(device: Any) -> ArrayDevice:
    return get_default_device() if device is None else as_device(device)


def _dtype_or_default(dtype: Any, op: str) -> dt.DType:
    return dt.default_float if dtype is None else dt.as_dtype(dtype, op)


def _scalar_dtype(value: Any, op: str) -> dt.DType:
    """The dtype a value without one gets: bool, int64, the default float; a NumPy scalar or
    a 0-d array its own."""
    if type(value) is float:  # (not numpy.float64, a float subclass that keeps its dtype)
        return dt.default_float
    if type(value) is complex:  # (likewise not numpy.complex128)
        return dt.default_complex
    return dt.result_type(value, op=op)


# (shape, itemsize) -> (row-major strides, nbytes): every op result needs them.
_CONTIGUOUS: dict[tuple[tuple[int, ...], int], tuple[tuple[int, ...], int]] = {}
_CACHE_LIMIT = 4096
_caches.register(
    "creation.contiguous_layouts",
    _CONTIGUOUS,
    max_entries=_CACHE_LIMIT,
    description="(shape, itemsize) -> row-major strides and bytes of a new array",
)
_new_object = object.__new__


def contiguous_layout(shape: tuple[int, ...], itemsize: int) -> tuple[tuple[int, ...], int]:
    """``(row-major byte strides, nbytes)`` of a new array of ``shape`` (remembered)."""
    key = (shape, itemsize)
    try:
        hit = _CONTIGUOUS.get(key)
    except TypeError:  # not a tuple of ints: computed, not remembered
        return _layout.contiguous_strides(shape, itemsize), _layout.numel(shape) * itemsize
    if hit is None:
        if len(_CONTIGUOUS) >= _CACHE_LIMIT:
            _CONTIGUOUS.clear()
        hit = _CONTIGUOUS[key] = (
            _layout.contiguous_strides(shape, itemsize),
            _layout.numel(shape) * itemsize,
        )
    return hit


def _new(shape: tuple[int, ...], dtype: dt.DType, device: ArrayDevice) -> NvArray:
    """A new contiguous, uninitialized array (internal: arguments already normalized)."""
    strides, nbytes = contiguous_layout(shape, dtype.itemsize)
    return _allocate(shape, strides, nbytes, dtype, device)


def _allocate(
    shape: tuple[int, ...],
    strides: tuple[int, ...],
    nbytes: int,
    dtype: dt.DType,
    device: ArrayDevice,
) -> NvArray:
    """:func:`_new` with the layout already known (``strides``, ``nbytes`` from
    :func:`contiguous_layout`): the allocation step of every op."""
    backend = _backend._instances.get(device)  # get_backend(device), once it has been built
    if backend is None:
        backend = get_backend(device)
    storage = backend.alloc(nbytes)
    # A device buffer was allocated on the stream the backend orders new arrays on (its current
    # stream); reading it back saves asking the backend a second time.
    stream = storage.stream if storage.__class__ is Buffer else backend.default_stream()
    return adopt(storage, shape, strides, dtype, device, backend, stream)


def adopt(
    storage: Any,
    shape: tuple[int, ...],
    strides: tuple[int, ...],
    dtype: dt.DType,
    device: ArrayDevice,
    backend: Any,
    stream: Any,
) -> NvArray:
    """A new array over all of ``storage`` (fresh, from ``backend.alloc`` or a backend's own
    allocation on ``stream``) with the layout from :func:`contiguous_layout`.

    Every field of an NvArray is set here, ``_offset`` to 0. Every op's result is made here;
    the CUDA backend's direct functions run this function inline (see ignis._codegen).

    Example: ``adopt(backend.alloc(24), (2, 3), (12, 4), dt.float32, device, backend, stream)``.
    """
    arr = _new_object(NvArray)
    arr._storage = storage
    arr._offset = 0
    arr._shape = shape
    arr._strides = strides
    arr._dtype = dtype
    arr._device = device
    arr._backend = backend
    arr._stream = stream
    return arr


def empty(shape: Any, dtype: dt.DTypeLike | None = None, device: Any = None) -> NvArray:
    """An uninitialized array of ``shape``. Example: ``ignis.empty((2, 3), dtype="int32")``."""
    return _new(
        _layout.normalize_shape(shape, "empty"),
        _dtype_or_default(dtype, "empty"),
        resolve_device(device),
    )


def zeros(shape: Any, dtype: dt.DTypeLike | None = None, device: Any = None) -> NvArray:
    """An array of zeros. Example: ``ignis.zeros(4)``."""
    out = _new(
        _layout.normalize_shape(shape, "zeros"),
        _dtype_or_default(dtype, "zeros"),
        resolve_device(device),
    )
    out._backend.fill(out, False if out.dtype is dt.bool_ else 0)
    return out


def ones(shape: Any, dtype: dt.DTypeLike | None = None, device: Any = None) -> NvArray:
    """An array of ones. Example: ``ignis.ones((2, 2), dtype="bfloat16")``."""
    out = _new(
        _layout.normalize_shape(shape, "ones"),
        _dtype_or_default(dtype, "ones"),
        resolve_device(device),
    )
    out._backend.fill(out, True if out.dtype is dt.bool_ else 1)
    return out


def full(
    shape: Any, fill_value: Any, dtype: dt.DTypeLike | None = None, device: Any = None
) -> NvArray:
    """An array whose elements are all ``fill_value``; the dtype, unless given, is the value's
    (bool, int64, float32). Example: ``ignis.full(3, 2.5)``."""
    from ._ops import _fill_value

    shape = _layout.normalize_shape(shape, "full")
    d = dt.as_dtype(dtype, "full") if dtype is not None else _scalar_dtype(fill_value, "full")
    value = _fill_value(fill_value, d, "full")  # a bad value is an error before any device work
    out = _new(shape, d, resolve_device(device))
    out._backend.fill(out, value)
    return out


def arange(
    start: Any,
    stop: Any = None,
    step: Any = 1,
    dtype: dt.DTypeLike | None = None,
    device: Any = None,
) -> NvArray:
    """Values ``start + i * step`` for ``i`` in ``0..ceil((stop - start) / step) - 1``.

    With one argument it is ``stop`` (``arange(5)`` is 0..4). The dtype is inferred like
    values (all ints -> int64, any float -> float32, the default float) unless given. Element
    values are computed in float64 (int64 for integer dtypes) and rounded once.
    """
    if stop is None:
        start, stop = 0, start
    bounds = []
    for name, v in (("start", start), ("stop", stop), ("step", step)):
        if isinstance(v, np.generic):
            v = v.item()
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise DTypeError(f"arange: {name} must be an int or a float, got {v!r}")
        bounds.append(v)
    start, stop, step = bounds
    if step == 0:
        raise ValueError("arange: step must not be zero")
    if dtype is not None:
        target = dt.as_dtype(dtype, "arange")
    else:
        target = dt.result_type(start, stop, step)
        if target.kind == "f":
            target = dt.default_float
    if all(isinstance(v, int) for v in bounds):
        n = max(0, -(-(stop - start) // step))
    else:
        span = (stop - start) / step
        if math.isnan(span) or math.isinf(span):
            raise ValueError(
                f"arange: cannot compute the length of [{start}, {stop}) with step {step}"
            )
        n = max(0, math.ceil(span))
    out = _new((n,), target, resolve_device(device))
    if n:
        out._backend.arange(out, start, step)
    return out


# Values that carry a dtype of their own (kept); anything else is Python data.
_TYPED = (np.ndarray, np.generic)


def _host_array(values: Any, dtype: dt.DType | None, op: str) -> np.ndarray:
    if isinstance(values, NvArray):
        host = values.to_host()
        return host if dtype is None else host.astype(dtype.numpy)
    try:
        host = np.asarray(values) if dtype is None else np.asarray(values, dtype=dtype.numpy)
    except (ValueError, TypeError) as exc:
        if dtype is not None and dtype.kind != "c" and "complex" in str(exc):
            raise DTypeError(
                f"{op}: cannot store complex values in a {dtype.name} array; expected a "
                "complex dtype (complex64 or complex128)"
            ) from None
        raise ShapeError(
            f"{op}: cannot convert {type(values).__name__} to an array ({exc})"
        ) from None
    if host.dtype.kind in "OUSV" and host.dtype != dt.bfloat16.numpy:
        raise DTypeError(f"{op}: cannot convert values of NumPy dtype {host.dtype} to an array")
    if dtype is None and not isinstance(values, _TYPED):
        if host.dtype == np.float64:
            host = host.astype(dt.default_float.numpy)  # Python floats: the default float
        elif host.dtype == np.complex128:
            host = host.astype(dt.default_complex.numpy)  # Python complex: the default complex
    return host


def from_host(
    values: Any, shape: Any = None, dtype: dt.DTypeLike | None = None, device: Any = None
) -> NvArray:
    """A copy of ``values`` (nested lists, NumPy array, scalar, NvArray) on ``device``.

    ``shape`` reshapes the values (the element count must match); ``dtype`` converts them.
    Example: ``NvArray.from_host([1, 2, 3, 4], shape=(2, 2), dtype="float16")``.
    """
    target = dt.as_dtype(dtype, "from_host") if dtype is not None else None
    host = _host_array(values, target, "from_host")
    d = target if target is not None else dt.as_dtype(host.dtype, "from_host")
    if shape is not None:
        new_shape = _layout.normalize_shape(shape, "from_host")
        if _layout.numel(new_shape) != host.size:
            raise ShapeError(
                f"from_host: {host.size} values cannot take shape {new_shape} "
                f"({_layout.numel(new_shape)} elements)"
            )
        host = host.reshape(new_shape)
    host = np.asarray(host, order="C")
    out = _new(tuple(host.shape), d, resolve_device(device))
    out._backend.copyin(out, host)
    return out


def _wrap_host(host: np.ndarray, device: ArrayDevice) -> NvArray | None:
    """A zero-copy CPU NvArray over ``host``'s memory, or None when that is not possible."""
    try:
        d = dt.as_dtype(host.dtype, "asarray")
    except DTypeError:
        return None
    if not host.flags.writeable or host.dtype.byteorder == ">" or host.size == 0:
        return None
    backend = get_backend(device)
    ptr = int(host.__array_interface__["data"][0])
    lo, hi = _layout.byte_extent(ptr, host.shape, host.strides, host.itemsize)
    storage = backend.wrap_external(lo, hi - lo, host)
    return NvArray._make(
        storage, ptr - lo, tuple(host.shape), tuple(host.strides), d, device, backend, None
    )


def asarray(
    obj: Any, dtype: dt.DTypeLike | None = None, device: Any = None, copy: bool | None = None
) -> NvArray:
    """``obj`` as an NvArray, sharing memory where possible.

    * an NvArray is returned as is (moved or converted when ``device``/``dtype`` differ);
    * a NumPy array becomes a CPU array *sharing its memory* when the device is ``"cpu"``
      (read-only or unsupported layouts are copied);
    * objects with ``__cuda_array_interface__`` or ``__dlpack__`` (CuPy, PyTorch, JAX) are
      imported zero-copy;
    * anything else (lists, scalars) is copied like :meth:`NvArray.from_host`.

    ``copy=True`` always copies; ``copy=False`` raises ValueError where a copy is needed.
    Example: ``ignis.asarray(numpy.arange(6.0).reshape(2, 3), device="cpu")``.
    """
    target_dtype = dt.as_dtype(dtype, "asarray") if dtype is not None else None
    if isinstance(obj, NvArray):
        out = obj if device is None else obj.to(device)
        if copy is False and out is not obj:
            raise ValueError(
                f"asarray: moving from {obj.device} to {device} needs a copy (copy=False)"
            )
        if target_dtype is not None and target_dtype is not out.dtype:
            if copy is False:
                raise ValueError("asarray: converting the dtype needs a copy (copy=False)")
            return out.astype(target_dtype)
        return out.clone() if copy and out is obj else out
    dev = resolve_device(device)
    if isinstance(obj, np.ndarray) and dev.type == "cpu" and copy is not True:
        if target_dtype is None or target_dtype.numpy == obj.dtype:
            wrapped = _wrap_host(obj, dev)
            if wrapped is not None:
                return wrapped
    elif not isinstance(obj, (np.ndarray, np.generic)):
        from . import _interop

        imported = _interop.import_foreign(obj, dev if device is not None else None)
        if imported is not None:
            return asarray(imported, dtype=dtype, device=device, copy=copy)
    if copy is False:
        raise ValueError(
            f"asarray: {type(obj).__name__} cannot be used without a copy (copy=False)"
        )
    return from_host(obj, dtype=target_dtype, device=dev)


def _like(x: Any, dtype: Any, device: Any) -> tuple[tuple[int, ...], dt.DType, ArrayDevice]:
    if not isinstance(x, NvArray):
        raise TypeError(f"expected an NvArray, got {type(x).__name__}")
    d = x.dtype if dtype is None else dt.as_dtype(dtype)
    return x.shape, d, x.device if device is None else as_device(device)


def empty_like(x: NvArray, dtype: dt.DTypeLike | None = None, device: Any = None) -> NvArray:
    """An uninitialized array with ``x``'s shape (and dtype and device unless given)."""
    return _new(*_like(x, dtype, device))


def zeros_like(x: NvArray, dtype: dt.DTypeLike | None = None, device: Any = None) -> NvArray:
    """Zeros with ``x``'s shape (and dtype and device unless given)."""
    shape, d, dev = _like(x, dtype, device)
    return zeros(shape, d, dev)


def ones_like(x: NvArray, dtype: dt.DTypeLike | None = None, device: Any = None) -> NvArray:
    """Ones with ``x``'s shape (and dtype and device unless given)."""
    shape, d, dev = _like(x, dtype, device)
    return ones(shape, d, dev)


def full_like(
    x: NvArray, fill_value: Any, dtype: dt.DTypeLike | None = None, device: Any = None
) -> NvArray:
    """``fill_value`` everywhere, with ``x``'s shape (and dtype and device unless given)."""
    shape, d, dev = _like(x, dtype, device)
    return full(shape, fill_value, d, dev)
