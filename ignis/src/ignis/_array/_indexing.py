"""Gather and scatter-add along one axis: :func:`take`, :func:`index_add`, integer-array
indexing (``a[idx]``) and the embedding lookup of :mod:`ignis.nn` built on them.

Semantics (written once here; the backends execute the hooks ``take`` / ``index_add``):

* indices are int32 or int64 NvArrays of any shape (a Python list of ints is accepted too and
  copied to the array's device); negative indices count from the end, as in NumPy;
* an index outside ``[-n, n)`` is not an error by default, because finding one needs the host
  to wait for the device: :func:`take` fills that output row with NaN (floating dtypes) or 0
  (integers, bool), :func:`index_add` skips it. ``check=True`` counts them first (a host
  synchronization) and raises IndexError naming the count and the bound;
* :func:`index_add` accumulates repeated indices; float16/bfloat16 destinations accumulate in a
  float32 copy that is rounded once into the destination. ``deterministic=True`` adds in index
  order (bit-reproducible; slower when few columns share the work).
"""

from __future__ import annotations

import operator
from typing import Any

from .. import _dtypes as dt
from .._errors import DeviceMismatchError, DTypeError, ShapeError
from . import _creation, _layout
from . import _semantics as sem
from .array import NvArray

__all__ = ["take", "index_add", "embedding", "embedding_backward", "is_index_key", "getitem"]

_INDEX_DTYPES = (dt.int32, dt.int64)
_ADD_NATIVE = (dt.float32, dt.float64, dt.int32, dt.int64)


def _as_indices(indices: Any, device: Any, op: str) -> NvArray:
    """An int32/int64 NvArray of ``device`` from an NvArray or a (nested) list of ints."""
    if isinstance(indices, (list, tuple)):
        import numpy as np

        host = np.asarray(indices)
        if host.size == 0:
            host = host.astype(np.int64)
        if host.dtype.kind not in "iu":
            raise DTypeError(f"{op}: indices must be integers, got a list of {host.dtype} values")
        return _creation.from_host(host.astype(np.int64), device=device)
    if not isinstance(indices, NvArray):
        raise TypeError(
            f"{op}: indices must be an int32/int64 NvArray or a list of ints, "
            f"got {type(indices).__name__}"
        )
    if indices._dtype not in _INDEX_DTYPES:
        raise DTypeError(f"{op}: indices must be int32 or int64, got {indices._dtype.name}")
    if indices._device != device:
        raise DeviceMismatchError(
            f"{op}: indices are on {indices._device} but the array is on {device}; "
            "move them with .to(device) first"
        )
    return indices


def _split(shape: tuple[int, ...], axis: int) -> tuple[int, int, int]:
    return _layout.numel(shape[:axis]), shape[axis], _layout.numel(shape[axis + 1 :])


def _check_range(op: str, indices: NvArray, n: int, what: str) -> None:
    """Raise IndexError when some index is outside ``[-n, n)`` (synchronizes the host)."""
    if indices.numel == 0:
        return
    limit = 2**31 - 1 if indices._dtype is dt.int32 else 2**63 - 1
    counts = []
    if n <= limit:
        counts.append((indices >= n).sum())
    if -n >= -limit - 1:
        counts.append((indices < -n).sum())
    if not counts:
        return
    bad = sum(int(c.item()) for c in counts)
    if bad:
        raise IndexError(f"{op}: {bad} index(es) outside [-{n}, {n}) ({what} of size {n})")


def take(a: NvArray, indices: Any, axis: int = 0, *, check: bool = False) -> NvArray:
    """Elements of ``a`` picked along ``axis`` by integer ``indices`` (NumPy's ``take``).

    The result has shape ``a.shape[:axis] + indices.shape + a.shape[axis+1:]`` and ``a``'s
    dtype. Negative indices count from the end; an index outside ``[-n, n)`` gives a row of NaN
    (0 for integer and bool arrays) unless ``check=True``, which raises IndexError instead
    (and waits for the device to count them).

    Example::

        >>> w = ignis.arange(12, dtype="float32").reshape(4, 3)
        >>> ignis.take(w, ignis.asarray([3, 0, -1]), axis=0).to_host()[:, 0]
        array([9., 0., 9.], dtype=float32)
    """
    if not isinstance(a, NvArray):
        raise TypeError(f"take: expected an NvArray, got {type(a).__name__}")
    if a.ndim == 0:
        raise ShapeError("take: the array must have at least 1 dimension, got a 0-d array")
    ax = sem.normalize_axis(axis, a.ndim, "take")
    idx = _as_indices(indices, a._device, "take")
    outer, n, inner = _split(a._shape, ax)
    if check:
        _check_range("take", idx, n, f"axis {ax}")
    shape = a._shape[:ax] + idx._shape + a._shape[ax + 1 :]
    out = _creation._new(shape, a._dtype, a._device)
    m = idx.numel
    if out.numel == 0:
        return out
    src = a.contiguous()
    a._backend.kernels.take(
        out.reshape(outer, m, inner), src.reshape(outer, n, inner), idx.contiguous().reshape(m)
    )
    return out


def index_add(
    dst: NvArray,
    axis: int,
    indices: Any,
    src: NvArray,
    alpha: Any = 1,
    *,
    deterministic: bool = False,
    check: bool = False,
) -> NvArray:
    """``dst[..., indices[j], ...] += alpha * src[..., j, ...]`` along ``axis``, in place.

    ``src`` has shape ``dst.shape[:axis] + indices.shape + dst.shape[axis+1:]`` (the shape
    ``take(dst, indices, axis)`` would have; for 1-D indices this is PyTorch's ``index_add_``).
    Repeated indices accumulate; indices outside ``[-n, n)`` add nothing (``check=True``
    raises IndexError instead, after a host synchronization). ``dst`` is float16, bfloat16,
    float32, float64, int32 or int64; ``src`` is of the same kind (floating or integer) and is
    converted first. The 16-bit types accumulate in float32 and are rounded once. Float sums
    of repeated indices may round differently from run to run unless ``deterministic=True``.
    Returns ``dst``.

    Example::

        >>> g = ignis.zeros((4, 2))
        >>> ignis.index_add(g, 0, ignis.asarray([1, 1, 3]), ignis.ones((3, 2))).to_host()[:, 0]
        array([0., 2., 0., 1.], dtype=float32)
    """
    if not isinstance(dst, NvArray) or not isinstance(src, NvArray):
        bad = dst if not isinstance(dst, NvArray) else src
        raise TypeError(f"index_add: dst and src must be NvArrays, got {type(bad).__name__}")
    if dst.ndim == 0:
        raise ShapeError("index_add: dst must have at least 1 dimension, got a 0-d array")
    if src._device != dst._device:
        raise DeviceMismatchError(f"index_add: src is on {src._device} but dst is on {dst._device}")
    if dst._dtype not in _ADD_NATIVE and dst._dtype not in (dt.float16, dt.bfloat16):
        raise DTypeError(
            "index_add: dst must be float16, bfloat16, float32, float64, int32 or int64, "
            f"got {dst._dtype.name}"
        )
    if (src._dtype.kind == "f") != (dst._dtype.kind == "f") or src._dtype is dt.bool_:
        raise DTypeError(
            f"index_add: src of dtype {src._dtype.name} cannot be added into dst of dtype "
            f"{dst._dtype.name} (expected the same kind: both floating or both integer)"
        )
    if dst._dtype.kind != "f" and not isinstance(alpha, int):
        raise DTypeError(
            f"index_add: alpha must be an int for {dst._dtype.name} dst, got {alpha!r}"
        )
    ax = sem.normalize_axis(axis, dst.ndim, "index_add")
    idx = _as_indices(indices, dst._device, "index_add")
    expected = dst._shape[:ax] + idx._shape + dst._shape[ax + 1 :]
    if src._shape != expected:
        raise ShapeError(
            f"index_add: src has shape {src._shape}, expected {expected} (dst.shape[:axis] + "
            f"indices.shape + dst.shape[axis+1:] for dst {dst._shape}, axis {ax})"
        )
    outer, n, inner = _split(dst._shape, ax)
    if check:
        _check_range("index_add", idx, n, f"axis {ax}")
    m = idx.numel
    if src.numel == 0 or dst.numel == 0:
        return dst
    acc = dt.float32 if dst._dtype in (dt.float16, dt.bfloat16) else dst._dtype
    work = dst if dst._dtype is acc and dst.is_contiguous else dst.astype(acc)
    from ._ops import _overlaps

    if src._dtype is not acc or not src.is_contiguous or _overlaps(src, work):
        src = src.astype(acc)
    dst._backend.kernels.index_add(
        work.reshape(outer, n, inner),
        idx.contiguous().reshape(m),
        src.reshape(outer, m, inner),
        alpha,
        bool(deterministic),
    )
    if work is not dst:
        dst._backend.copy(dst, work)  # the one rounding into a 16-bit dst
    return dst


# --- integer-array indexing (NvArray.__getitem__) ----------------------------------------------


def _is_index_array(k: Any) -> bool:
    if isinstance(k, NvArray):
        return k.ndim > 0 or k._dtype.kind not in "iu"
    return isinstance(k, list)


def is_index_key(key: Any) -> bool:
    """True for keys NvArray.__getitem__ sends here: an array or list as the first index."""
    if isinstance(key, tuple):
        return bool(key) and _is_index_array(key[0])
    return _is_index_array(key)


def getitem(a: NvArray, key: Any) -> NvArray:
    """``a[idx]`` / ``a[idx, rest...]``: :func:`take` along axis 0, then basic indexing."""
    first, rest = (key[0], key[1:]) if isinstance(key, tuple) else (key, ())
    if isinstance(first, NvArray) and first._dtype.kind not in "iu":
        raise IndexError(
            f"__getitem__: index arrays must be int32/int64, got {first._dtype.name}; other "
            "advanced indexing (boolean masks) is not supported (use where())"
        )
    if any(isinstance(k, (NvArray, list)) and not _scalar_index(k) for k in rest):
        raise IndexError(
            "__getitem__: only the first index may be an integer array; the others must be "
            "basic indices (ints, slices, None, ...)"
        )
    out = take(a, first, 0)
    return out[(slice(None),) * (out.ndim - a.ndim + 1) + rest] if rest else out


def _scalar_index(k: Any) -> bool:
    return isinstance(k, NvArray) and k.ndim == 0 and k._dtype.kind in "iu"


# --- embedding ---------------------------------------------------------------------------------


def embedding(ids: Any, weight: NvArray, *, check: bool = False) -> NvArray:
    """Rows of ``weight`` (V, D) picked by integer ``ids`` (any shape): ``ids.shape + (D,)``.

    ``take(weight, ids, axis=0)``: ids wrap like NumPy's; an id outside ``[-V, V)`` gives a row
    of NaN unless ``check=True`` (IndexError; synchronizes the host).

    Example: ``ignis.nn.embedding(ignis.asarray([[1, 2], [0, 1]]), w)`` has shape (2, 2, D).
    """
    if not isinstance(weight, NvArray) or weight.ndim != 2:
        got = weight.shape if isinstance(weight, NvArray) else type(weight).__name__
        raise ShapeError(f"embedding: weight must be a 2-D (rows, dim) NvArray, got {got}")
    idx = _as_indices(ids, weight._device, "embedding")
    if check:
        _check_range("embedding", idx, weight.shape[0], "the rows of weight")
    return take(weight, idx, 0)


def embedding_backward(
    grad: NvArray,
    ids: Any,
    num_rows: int,
    *,
    dtype: Any = None,
    deterministic: bool = False,
) -> NvArray:
    """The gradient of ``weight`` (num_rows, D) from ``grad`` (``ids.shape + (D,)``).

    Rows of repeated ids add up (ids outside the table add nothing). Sums run in float32
    (float64 for float64 ``grad``) and are converted once to ``dtype`` (default: ``grad``'s).
    No host synchronization.

    Example: ``gw = ignis.nn.embedding_backward(gy, ids, num_rows=50257)``.
    """
    if not isinstance(grad, NvArray) or grad.dtype.kind != "f":
        got = grad.dtype.name if isinstance(grad, NvArray) else type(grad).__name__
        raise DTypeError(f"embedding_backward: grad must be a floating NvArray, got {got}")
    idx = _as_indices(ids, grad._device, "embedding_backward")
    n = operator.index(num_rows)
    if n < 0:
        raise ValueError(f"embedding_backward: num_rows must be >= 0, got {n}")
    if grad.ndim != idx.ndim + 1 or grad._shape[:-1] != idx._shape:
        raise ShapeError(
            f"embedding_backward: grad has shape {grad._shape}, expected ids.shape + (dim,) = "
            f"{idx._shape} + (dim,)"
        )
    out_dtype = grad._dtype if dtype is None else dt.as_dtype(dtype, "embedding_backward")
    acc = dt.float64 if grad._dtype is dt.float64 else dt.float32
    total = _creation.zeros((n, grad._shape[-1]), dtype=acc, device=grad._device)
    index_add(total, 0, idx, grad, deterministic=deterministic)
    return total if out_dtype is acc else total.astype(out_dtype)
