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
from . import _creation, _layout, _ops
from . import _semantics as sem
from .array import NvArray

__all__ = [
    "take",
    "take_along_axis",
    "index_add",
    "embedding",
    "embedding_backward",
    "flat_nonzero",
    "is_index_key",
    "getitem",
    "setitem",
    "add_at",
]

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
        if indices._dtype.kind not in "iu":
            raise DTypeError(f"{op}: indices must be int32 or int64, got {indices._dtype.name}")
        indices = indices.astype(dt.int64)  # the kernels index with int32 or int64
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


def take(a: NvArray, indices: Any, axis: int | None = 0, *, check: bool = False) -> NvArray:
    """Elements of ``a`` picked along ``axis`` by integer ``indices`` (NumPy's ``take``;
    ``axis=None`` picks from the flattened array).

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
    if axis is None:  # NumPy's meaning: along the flattened array
        a, axis = a.reshape(a.numel), 0
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


def take_along_axis(x: NvArray, indices: NvArray, /, *, axis: int = -1) -> NvArray:
    """Elements of ``x`` picked along ``axis`` by ``indices`` of the same rank, one index list
    per position of the other axes (NumPy's ``take_along_axis``).

    The other axes of ``x`` and ``indices`` broadcast; the result has the broadcast shape with
    ``indices.shape[axis]`` along ``axis``. Negative indices count from the end; an index outside
    ``[-n, n)`` gives NaN (0 for integer and bool arrays), as :func:`take`.

    Example::

        >>> x = ignis.asarray([[10.0, 30.0, 20.0], [60.0, 40.0, 50.0]])
        >>> ignis.take_along_axis(x, ignis.argsort(x, axis=1), axis=1).to_host()
        array([[10., 20., 30.],
               [40., 50., 60.]])
    """
    op = "take_along_axis"
    if not isinstance(x, NvArray) or not isinstance(indices, NvArray):
        bad = x if not isinstance(x, NvArray) else indices
        raise TypeError(f"{op}: x and indices must be NvArrays, got {type(bad).__name__}")
    if indices._dtype.kind not in "iu":
        raise DTypeError(f"{op}: indices must have an integer dtype, got {indices._dtype.name}")
    if indices._device != x._device:
        raise DeviceMismatchError(
            f"{op}: indices are on {indices._device} but x is on {x._device}"
        )
    if x.ndim == 0 or indices.ndim != x.ndim:
        raise ShapeError(
            f"{op}: x and indices must have the same number of dimensions (at least 1), got "
            f"shapes {x._shape} and {indices._shape}"
        )
    ax = sem.normalize_axis(axis, x.ndim, op)
    # the other axes broadcast: shapes with axis of size 1 in both
    other = _layout.broadcast_shapes(
        x._shape[:ax] + (1,) + x._shape[ax + 1 :],
        indices._shape[:ax] + (1,) + indices._shape[ax + 1 :],
        op=op,
    )
    n, k = x._shape[ax], indices._shape[ax]
    out_shape = other[:ax] + (k,) + other[ax + 1 :]
    # axis last; rows = positions of the other axes: a flat gather from the (rows, n) matrix
    xs = _ops._broadcast(x, other[:ax] + (n,) + other[ax + 1 :], op).swapaxes(ax, -1)
    ix = _ops._broadcast(indices, out_shape, op).swapaxes(ax, -1)
    rows = _layout.numel(ix._shape[:-1])
    if rows * k == 0:
        return _creation._new(out_shape, x._dtype, x._device)
    idx = ix.astype(dt.int64).reshape(rows, k)
    idx = _ops.where(idx < 0, idx + n, idx)
    step = n or 1  # (n == 0: every index is out of range; the row starts do not matter)
    base = _creation.arange(0, rows * step, step, dtype=dt.int64, device=x._device)
    base = base.reshape(rows, 1)
    flat = _ops.where(_ops.where(idx >= 0, idx < n, False), idx + base, rows * n)
    out = take(xs.reshape(rows * n), flat.reshape(rows * k), 0)
    return out.reshape(ix._shape).swapaxes(ax, -1)


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


# --- the standard's indexing: integer arrays and boolean masks (NvArray.__getitem__/__setitem__)
#
# A key with an index array, a boolean mask (n-d or 0-d, Python bools too) or a list is split in
# two. Its basic items (ints, slices, None, Ellipsis) become a view ``y`` of the array, with a
# slice kept over every axis an array indexes and a new axis for each 0-d boolean. The advanced
# items then select along the axes of ``y`` they cover: integer arrays one axis each, a mask its
# ``m`` axes (through the flat positions of its True elements: the one host synchronization of
# a mask, to learn their count), a 0-d boolean its new axis (index ``[0]`` for True, ``[]`` for
# False). Those axes are brought together (moved to the front unless the advanced items are
# next to each other in the key, NumPy's placement rule, where ints count as advanced items)
# and flattened into one, so that the selection becomes one gather (``take``) or one scatter
# (``put``) along it, with the flat index computed on the device from the broadcast index
# arrays. An index outside its axis selects NaN/0 (gather) or nothing (scatter), as ``take``.


class _BoolScalar:
    """A 0-d boolean key item (True, False, or a 0-d bool array already read)."""

    __slots__ = ("value",)

    def __init__(self, value: bool):
        self.value = value


class _Selection:
    """What an advanced key selects: ``view`` (the basic part applied, the advanced axes
    moved together to start at ``axis``; ``sizes`` are theirs, which :meth:`flat_shape`
    flattens into one), the flat ``index`` along that one axis (int32/int64, of the broadcast
    shape of the index arrays) and ``shape``, the shape of the selection ``a[key]``."""

    __slots__ = ("view", "axis", "sizes", "index", "shape")

    def __init__(self, view: NvArray, axis: int, sizes: tuple[int, ...], index: NvArray):
        self.view = view  # advanced axes at axis .. axis + len(sizes) - 1, in key order
        self.axis = axis
        self.sizes = sizes
        self.index = index
        k = len(sizes)
        self.shape = view._shape[:axis] + index._shape + view._shape[axis + k :]

    def flat_shape(self) -> tuple[int, ...]:
        a, k = self.axis, len(self.sizes)
        return self.view._shape[:a] + (_layout.numel(self.sizes),) + self.view._shape[a + k :]


def _key_items(a: NvArray, key: Any, op: str) -> list[Any]:
    """The key as a list of items: basic ones as given, index arrays as int NvArrays, masks as
    bool NvArrays, 0-d booleans as _BoolScalar."""
    import numpy as np

    out = []
    for k in key if isinstance(key, tuple) else (key,):
        if isinstance(k, NvArray):
            if k._device != a._device:
                raise DeviceMismatchError(
                    f"{op}: an index array is on {k._device} but the array is on {a._device}; "
                    "move it with .to(device) first"
                )
            if k._dtype is dt.bool_:
                out.append(_BoolScalar(bool(k.item())) if k.ndim == 0 else k)
            elif k._dtype.kind in "iu":
                out.append(k)
            else:
                raise IndexError(
                    f"{op}: index arrays must have an integer or bool dtype, got {k._dtype.name}"
                )
        elif isinstance(k, (bool, np.bool_)):
            out.append(_BoolScalar(bool(k)))
        elif isinstance(k, list):
            out.append(_list_index(k, a._device, op))
        else:
            out.append(k)
    return out


def _list_index(k: list[Any], device: Any, op: str) -> NvArray:
    """A list key item on ``device``: an int64 index array, or a bool mask."""
    import numpy as np

    host = np.asarray(k)
    if host.size == 0:
        host = host.astype(np.int64)
    if host.dtype.kind not in "biu":
        raise IndexError(f"{op}: a list index must hold ints or bools, got {host.dtype} values")
    return _creation.from_host(host if host.dtype.kind == "b" else host.astype(np.int64),
                               device=device)


def _select(a: NvArray, key: Any, op: str) -> _Selection:
    """Parse an advanced ``key`` of ``a`` (see the section comment)."""
    items = _key_items(a, key, op)
    n_ellipsis = sum(1 for k in items if k is Ellipsis)
    if n_ellipsis > 1:
        raise IndexError(f"{op}: an index can only have a single ellipsis ('...')")
    consumed = 0
    for k in items:
        if isinstance(k, NvArray):
            consumed += k.ndim if k._dtype is dt.bool_ else 1
        elif k is not None and k is not Ellipsis and not isinstance(k, _BoolScalar):
            consumed += 1
    if consumed > a.ndim:
        raise IndexError(
            f"{op}: too many indices for array: array is {a.ndim}-dimensional, but {consumed} "
            "were indexed"
        )
    basic: list[Any] = []
    advanced: list[tuple[tuple[int, ...], Any]] = []  # (axes of y, index array / mask / bool)
    positions = []  # where the advanced items (ints among them) sit in the key
    ydim = xdim = 0
    for pos, k in enumerate(items):
        if k is Ellipsis:
            fill = a.ndim - consumed
            basic.extend([slice(None)] * fill)
            ydim += fill
            xdim += fill
        elif k is None:
            basic.append(None)
            ydim += 1
        elif isinstance(k, _BoolScalar):
            basic.append(None)
            advanced.append(((ydim,), k))
            positions.append(pos)
            ydim += 1
        elif isinstance(k, NvArray):
            m = k.ndim if k._dtype is dt.bool_ else 1
            # (the standard lets a mask axis of size 0 stand for any axis: it selects nothing)
            if k._dtype is dt.bool_ and any(
                s != d and s != 0 for s, d in zip(k._shape, a._shape[xdim : xdim + m], strict=True)
            ):
                raise IndexError(
                    f"{op}: a boolean index of shape {k._shape} does not match the indexed "
                    f"axes {xdim}..{xdim + m - 1} of an array of shape {a._shape}"
                )
            basic.extend([slice(None)] * m)
            advanced.append((tuple(range(ydim, ydim + m)), k))
            positions.append(pos)
            ydim += m
            xdim += m
        elif isinstance(k, slice):
            basic.append(k)
            ydim += 1
            xdim += 1
        else:  # an int (checked by index_view)
            basic.append(k)
            positions.append(pos)
            xdim += 1
    delta, shape, strides = _layout.index_view(a._shape, a._strides, tuple(basic))
    y = a._view(a._offset + delta, shape, strides)
    if not advanced:  # nothing but basic items after all (an empty key list, say)
        return _Selection(y, 0, (), _creation.zeros((), dtype=dt.int64, device=a._device))
    # the size each advanced item covers, and the advanced axes in key order
    groups = [_layout.numel(y._shape[d] for d in dims) for dims, _ in advanced]
    axes = [d for dims, _ in advanced for d in dims]
    sizes = tuple(y._shape[d] for d in axes)
    if positions == list(range(positions[0], positions[0] + len(positions))):
        axis = axes[0]  # next to each other in the key: the index axes replace them in place
    else:  # apart: the index axes come first
        axis = 0
        y = y.permute(axes + [d for d in range(y.ndim) if d not in axes])
    return _Selection(y, axis, sizes, _flat_index(advanced, groups, a._device, op))


def _flat_index(advanced: list[Any], groups: list[int], device: Any, op: str) -> NvArray:
    """The flat index over the advanced axes (row-major over ``groups``, the size each item
    covers), broadcast over the items; an index outside its axis gives the total size (out of
    range for take and put)."""
    arrays = []
    for _, k in advanced:
        if isinstance(k, _BoolScalar):
            arrays.append(_creation.zeros((1 if k.value else 0,), dtype=dt.int64, device=device))
        elif k._dtype is dt.bool_:
            arrays.append(flat_nonzero(k))
        else:
            arrays.append(k)
    try:
        _layout.broadcast_shapes(*(x._shape for x in arrays), op=op)
    except ShapeError:
        shown = ", ".join(str(x._shape) for x in arrays)
        raise IndexError(
            f"{op}: the index arrays' shapes {shown} cannot be broadcast together"
        ) from None
    if len(arrays) == 1:
        idx = arrays[0]
        return idx if idx._dtype in _INDEX_DTYPES else idx.astype(dt.int64)
    flat = valid = None
    for (_, k), idx, n in zip(advanced, arrays, groups, strict=True):
        if idx._dtype is not dt.int64:
            idx = idx.astype(dt.int64)
        if isinstance(k, NvArray) and k._dtype is not dt.bool_:  # positions are in range
            idx = _ops.where(idx < 0, idx + n, idx)
            ok = _ops.where(idx >= 0, idx < n, False)
            valid = ok if valid is None else _ops.where(valid, ok, False)
        flat = idx if flat is None else flat * n + idx
    if valid is not None:
        flat = _ops.where(valid, flat, _layout.numel(groups))
    return flat


def flat_nonzero(mask: NvArray) -> NvArray:
    """The row-major flat positions (int64, 1-D) of the True elements of the bool ``mask``.

    Waits for the device once, to learn how many there are. Example:
    ``flat_nonzero(ignis.asarray([[True, False], [False, True]]))`` holds ``[0, 3]``.
    """
    count = int(mask.sum().item()) if mask.numel else 0
    out = _creation._new((count,), dt.int64, mask._device)
    if count:
        mask._backend.kernels.nonzero_flat(out, mask.contiguous().reshape(mask.numel))
    return out


def getitem(a: NvArray, key: Any) -> NvArray:
    """``a[key]`` for keys with integer arrays, boolean masks or lists (NumPy's rules, which
    the standard's are a subset of); a copy. A mask waits for the device once."""
    items = isinstance(key, tuple) and bool(key)
    first, rest = (key[0], key[1:]) if items else (key, ())
    if first.__class__ is list:
        first = _list_index(first, a._device, "__getitem__")
    if (
        isinstance(first, NvArray)
        and first.ndim
        and first._dtype.kind in "iu"
        and not any(_is_advanced_item(k) for k in rest)
    ):  # an integer array first, basic items after it: one gather along axis 0, then a view
        out = take(a, first, 0)
        return out[(slice(None),) * (out.ndim - a.ndim + 1) + rest] if rest else out
    sel = _select(a, (first, *rest) if items else first, "__getitem__")
    return take(sel.view.reshape(sel.flat_shape()), sel.index, sel.axis)


def _is_advanced_item(k: Any) -> bool:
    import numpy as np

    return isinstance(k, (NvArray, list, bool, np.bool_))


def is_index_key(key: Any) -> bool:
    """True for the keys NvArray.__getitem__ gathers through (a copy, not a view): those with
    an integer array (not 0-d), a boolean array or scalar, or a list."""
    for k in key if isinstance(key, tuple) else (key,):
        if isinstance(k, NvArray):
            if k.ndim or k._dtype.kind not in "iu":
                return True
        elif _is_advanced_item(k):
            return True
    return False


def _flat_target(sel: _Selection) -> tuple[NvArray, NvArray | None]:
    """``(target, work)``: a contiguous flattened view of the selection's view to write into,
    or (when the layout allows none) a contiguous copy ``work`` of it, to copy back after."""
    y, flat = sel.view, sel.flat_shape()
    if y.is_contiguous:
        return y.reshape(flat), None
    work = y.clone()
    return work.reshape(flat), work


def _value_array(a: NvArray, value: Any, shape: tuple[int, ...], op: str) -> NvArray:
    """``value`` as a contiguous array of a's dtype and device and of ``shape``."""
    if not isinstance(value, NvArray):
        src = _creation._new(shape, a._dtype, a._device)
        _ops._copy_into(src, value, op)
        return src
    if value._device != a._device:
        value = value.to(a._device)
    try:
        b = _ops._broadcast(value, shape, op)
    except ShapeError:
        raise ShapeError(
            f"{op}: cannot assign an array of shape {value._shape} to a selection of shape "
            f"{shape}"
        ) from None
    src = _creation._new(shape, a._dtype, a._device)
    a._backend.copy(src, b)
    return src


def _mask_where(a: NvArray, key: Any, value: Any, op: str) -> bool:
    """``a[mask] = value`` as one in-place ``where`` when the key is a lone n-d boolean array
    (slices and an Ellipsis around it allowed) and ``value`` (a scalar or an NvArray) is the same
    for every selected element: no host synchronization. False when the general path is needed."""
    items = key if isinstance(key, tuple) else (key,)
    masks = [k for k in items if isinstance(k, NvArray)]
    if len(masks) != 1 or not all(
        k is masks[0] or isinstance(k, slice) or k is Ellipsis for k in items
    ):
        return False
    mask = masks[0]
    if mask._dtype is not dt.bool_ or mask.ndim == 0 or mask._device != a._device:
        return False
    if not isinstance(value, (NvArray, bool, int, float)) and not _is_host_scalar(value):
        return False
    m = mask.ndim
    consumed = len(items) - 1 + m - (Ellipsis in items)
    if consumed > a.ndim or sum(1 for k in items if k is Ellipsis) > 1:
        return False  # the general path raises the error
    basic: list[Any] = []
    before = 0  # the axis of a (and of y: slices keep every axis) where the mask's axes start
    for k in items:
        if k is mask:
            before = len(basic)
            basic.extend([slice(None)] * m)
        elif k is Ellipsis:
            basic.extend([slice(None)] * (a.ndim - consumed))
        else:
            basic.append(k)
    if mask._shape != a._shape[before : before + m]:
        return False  # the general path raises the error
    y = a[tuple(basic)]
    post = y._shape[before + m :]
    if isinstance(value, NvArray):
        vshape = value._shape
        c = len(vshape) - len(post) - 1  # the selection's count axis, in value's shape
        if c >= 0 and vshape[c] != 1:
            return False  # one value per selected element: the general path
        v = value if value._device == a._device else value.to(a._device)
        if c >= 0:
            v = v.reshape(vshape[:c] + (1,) * m + vshape[c + 1 :])
        try:
            v = _ops._broadcast(v, y._shape, op)
        except ShapeError:
            raise ShapeError(
                f"{op}: cannot assign an array of shape {vshape} to the elements that a boolean "
                f"index of shape {mask._shape} selects from an array of shape {a._shape}"
            ) from None
        v = _ops._unalias(v, y, allow_identical=False)
    else:
        v = _ops._fill_value(value, a._dtype, op)
    # the condition covers the mask's axes of y, broadcast over the others
    cond = mask._view(
        mask._offset, y._shape, (0,) * before + mask._strides + (0,) * len(post)
    )
    cond = _ops._unalias(cond, y, allow_identical=True)
    a._backend.where(y, cond, v, y, a._dtype)
    return True


def _is_host_scalar(value: Any) -> bool:
    import numpy as np

    return isinstance(value, np.generic) or (isinstance(value, np.ndarray) and value.ndim == 0)


def setitem(a: NvArray, key: Any, value: Any) -> None:
    """``a[key] = value`` for keys with integer arrays, boolean masks or lists. ``value`` (a
    scalar, host data or an NvArray) broadcasts to the shape ``a[key]`` has and is converted to
    a's dtype. Of repeated indices one assignment lands, which one is unspecified. A boolean
    mask waits for the device once, unless ``value`` is the same for every selected element."""
    op = "__setitem__"
    if _mask_where(a, key, value, op):
        return
    sel = _select(a, key, op)
    src = _value_array(a, value, sel.shape, op)
    if src.numel == 0:
        return
    target, work = _flat_target(sel)
    outer, n, inner = _split(target._shape, sel.axis)
    m = sel.index.numel
    index = sel.index.contiguous()
    if _ops._overlaps(index, target):  # an index array viewing the array written
        index = index.clone()
    a._backend.kernels.put(
        target.reshape(outer, n, inner), index.reshape(m), src.reshape(outer, m, inner)
    )
    if work is not None:
        a._backend.copy(sel.view, work)


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
    if (
        not check
        and type(ids) is NvArray
        and ids._dtype in _INDEX_DTYPES
        and ids._device == weight._device
        and ids.is_contiguous
        and weight.is_contiguous
    ):
        # The lookup of every training step: take's checks, axis handling and copies have
        # nothing to do here, and cost about as much host time as the kernel takes.
        v, d = weight._shape
        out = _creation._new(ids._shape + (d,), weight._dtype, weight._device)
        m = ids.numel
        if m and d:
            weight._backend.kernels.take(
                out.reshape(1, m, d), weight.reshape(1, v, d), ids.reshape(m)
            )
        return out
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


def add_at(dst: NvArray, key: Any, src: Any) -> NvArray:
    """``dst[key] += src`` where repeated indices accumulate (NumPy's ``add.at``), for the keys
    of :func:`getitem`: the gradient of a gather through an advanced key. ``src`` broadcasts to
    the shape ``dst[key]`` has; dtypes as :func:`index_add`. Returns ``dst``.

    Example: ``add_at(ignis.zeros(3), [0, 0, 2], 1.0)`` holds ``[2, 0, 1]``.
    """
    op = "add_at"
    sel = _select(dst, key, op)
    values = _value_array(dst, src, sel.shape, op)
    if values.numel == 0:
        return dst
    target, work = _flat_target(sel)
    index_add(target, sel.axis, sel.index, values)
    if work is not None:
        dst._backend.copy(sel.view, work)
    return dst

