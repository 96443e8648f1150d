"""Array manipulation and creation functions of the Array API standard (2024.12).

Views wherever the layout allows, with no device work: ``broadcast_to``, ``broadcast_arrays``,
``expand_dims``, ``squeeze``, ``permute_dims``, ``moveaxis``, ``matrix_transpose``, ``flip``
(negative strides), ``unstack`` and ``reshape`` (unless a copy is needed or asked for). The
others run on the arrays' device through the existing primitives: strided copies (``concat``,
``roll``, ``tile``, ``repeat`` with an int, ``meshgrid``), fills (``eye``), ``arange``
(``linspace``), element-wise ops (``tril``, ``triu``, ``diff``), ``matmul`` (``tensordot``,
``vecdot``) and the gathers of :mod:`ignis._array._indexing` (``repeat`` with an array of
counts, ``take_along_axis``). ``repeat`` with an array waits for the device once, to learn the
result's length; nothing else here does.

Example::

    >>> x = ignis.reshape(ignis.arange(6), (2, 3))
    >>> ignis.flip(x, axis=1).to_host()
    array([[2, 1, 0],
           [5, 4, 3]])
    >>> ignis.tile(ignis.asarray([1, 2]), (2, 2)).to_host()
    array([[1, 2, 1, 2],
           [1, 2, 1, 2]])
"""

from __future__ import annotations

import itertools
import operator
from typing import Any

from .. import _dtypes as dt
from .._errors import DTypeError, ShapeError
from . import _creation, _layout, _ops
from . import _semantics as sem
from ._indexing import take, take_along_axis
from .array import NvArray

__all__ = [
    "broadcast_arrays",
    "broadcast_to",
    "concat",
    "expand_dims",
    "flip",
    "moveaxis",
    "permute_dims",
    "repeat",
    "reshape",
    "roll",
    "squeeze",
    "tile",
    "unstack",
    "eye",
    "linspace",
    "meshgrid",
    "tril",
    "triu",
    "take_along_axis",
    "diff",
    "matrix_transpose",
    "tensordot",
    "vecdot",
]


def _array(x: Any, op: str) -> NvArray:
    if not isinstance(x, NvArray):
        raise TypeError(f"{op}: expected an NvArray, got {type(x).__name__}")
    return x


def _int(v: Any, name: str, op: str) -> int:
    if isinstance(v, bool):
        raise TypeError(f"{op}: {name} must be an int, got {v!r}")
    try:
        return operator.index(v)
    except TypeError:
        raise TypeError(f"{op}: {name} must be an int, got {v!r}") from None


def _ints(v: Any, name: str, op: str) -> tuple[int, ...]:
    """An int or a sequence of ints as a tuple."""
    if isinstance(v, (tuple, list)):
        return tuple(_int(a, name, op) for a in v)
    return (_int(v, name, op),)


# --- views ---------------------------------------------------------------------------------------


def broadcast_to(x: NvArray, /, shape: Any) -> NvArray:
    """A view of ``x`` with ``shape`` (NumPy broadcasting; broadcast axes have stride 0, so do
    not write through it). Example: ``broadcast_to(ignis.ones(3), (2, 3)).shape == (2, 3)``."""
    return _array(x, "broadcast_to").broadcast_to(shape)


def broadcast_arrays(*arrays: NvArray) -> list[NvArray]:
    """Views of ``arrays`` broadcast against one another (stride 0 along broadcast axes).

    Example: ``[a.shape for a in broadcast_arrays(ones((3, 1)), ones(4))] == [(3, 4), (3, 4)]``.
    """
    xs = [_array(x, "broadcast_arrays") for x in arrays]
    shape = _layout.broadcast_shapes(*(x._shape for x in xs), op="broadcast_arrays")
    return [x.broadcast_to(shape) for x in xs]


def expand_dims(x: NvArray, /, axis: int | tuple[int, ...] = 0) -> NvArray:
    """A view of ``x`` with a size-1 axis inserted at ``axis`` (``-1`` appends), or at each of
    the positions ``axis`` (a tuple) names in the result. IndexError for a position outside
    ``[-ndim - 1, ndim]`` (the result's ``[-ndim, ndim)`` for a tuple).

    Example: ``expand_dims(x, axis=(0, -1))`` of a (3,) array has shape (1, 3, 1).
    """
    x = _array(x, "expand_dims")
    axes = _ints(axis, "axis", "expand_dims")
    ndim = x.ndim + len(axes)
    norm = []
    for a in axes:
        if not -ndim <= a < ndim:
            raise IndexError(
                f"expand_dims: axis {a} is out of range for a result of {ndim} dimensions "
                f"(expected {-ndim} <= axis <= {ndim - 1})"
            )
        norm.append(a % ndim)
    if len(set(norm)) != len(norm):
        raise ShapeError(f"expand_dims: repeated axis in {axis!r}")
    shape, strides = list(x._shape), list(x._strides)
    for a in sorted(norm):
        shape.insert(a, 1)
        strides.insert(a, 0)
    return x._view(x._offset, tuple(shape), tuple(strides))


def squeeze(x: NvArray, /, axis: int | tuple[int, ...]) -> NvArray:
    """A view of ``x`` without the size-1 ``axis`` (an int or a tuple); ValueError when one of
    them is not of size 1. Example: ``squeeze(ones((1, 3, 1)), axis=(0, 2)).shape == (3,)``."""
    return _array(x, "squeeze").squeeze(axis)


def permute_dims(x: NvArray, /, axes: tuple[int, ...]) -> NvArray:
    """A view of ``x`` with its axes in the order ``axes`` (a permutation of all of them).

    Example: ``permute_dims(ones((2, 3, 4)), (2, 0, 1)).shape == (4, 2, 3)``.
    """
    return _array(x, "permute_dims").permute(tuple(axes))


def moveaxis(
    x: NvArray, source: int | tuple[int, ...], destination: int | tuple[int, ...], /
) -> NvArray:
    """A view of ``x`` with the axes ``source`` moved to the positions ``destination`` (the
    others keep their order). Example: ``moveaxis(ones((2, 3, 4)), 0, -1).shape == (3, 4, 2)``.
    """
    x = _array(x, "moveaxis")
    src = [sem.normalize_axis(a, x.ndim, "moveaxis") for a in _ints(source, "source", "moveaxis")]
    dst = [
        sem.normalize_axis(a, x.ndim, "moveaxis")
        for a in _ints(destination, "destination", "moveaxis")
    ]
    if len(src) != len(dst):
        raise ShapeError(
            f"moveaxis: source {source!r} and destination {destination!r} must have the same "
            "number of axes"
        )
    if len(set(src)) != len(src) or len(set(dst)) != len(dst):
        raise ShapeError(
            f"moveaxis: repeated axis in source {source!r} or destination {destination!r}"
        )
    order = [d for d in range(x.ndim) if d not in src]
    for d, s in sorted(zip(dst, src, strict=True)):
        order.insert(d, s)
    return x.permute(tuple(order))


def matrix_transpose(x: NvArray, /) -> NvArray:
    """A view of ``x`` (..., M, N) with the last two axes swapped: (..., N, M) (``x.mT``)."""
    x = _array(x, "matrix_transpose")
    if x.ndim < 2:
        raise ShapeError(
            f"matrix_transpose: needs at least 2 dimensions (..., M, N), got shape {x._shape}"
        )
    return x.mT


def flip(x: NvArray, /, *, axis: int | tuple[int, ...] | None = None) -> NvArray:
    """A view of ``x`` with the order of the elements reversed along ``axis`` (all axes when
    None), through negative strides. Example: ``flip(arange(3)).to_host()`` is ``[2, 1, 0]``.
    """
    x = _array(x, "flip")
    axes = sem.normalize_axes(axis, x.ndim, "flip")
    key = tuple(slice(None, None, -1) if d in axes else slice(None) for d in range(x.ndim))
    delta, shape, strides = _layout.index_view(x._shape, x._strides, key)
    return x._view(x._offset + delta, shape, strides)


def unstack(x: NvArray, /, *, axis: int = 0) -> tuple[NvArray, ...]:
    """The views ``x[..., i, ...]`` along ``axis``, as a tuple.

    Example: ``[u.shape for u in unstack(ones((2, 3)), axis=1)] == [(2,), (2,), (2,)]``.
    """
    x = _array(x, "unstack")
    ax = sem.normalize_axis(axis, x.ndim, "unstack")
    lead = (slice(None),) * ax
    return tuple(x[lead + (i,)] for i in range(x._shape[ax]))


def reshape(x: NvArray, /, shape: Any, *, copy: bool | None = None) -> NvArray:
    """``x`` with a new ``shape`` (one entry may be -1): a view when the layout allows.

    ``copy=True`` always copies; ``copy=False`` never does (ValueError when a view cannot have
    the new shape, e.g. of a transposed array). Example: ``reshape(arange(6), (2, -1))``.
    """
    x = _array(x, "reshape")
    dims = _layout.normalize_shape_allow_unknown(shape, "reshape")
    if copy is True:
        out = _creation._new(x._shape, x._dtype, x._device)
        x._backend.copy(out, x)
        return out.reshape(dims)
    if copy is False:
        new_shape = _layout.infer_reshape(x.numel, dims, x._shape, "reshape")
        if new_shape != x._shape and (
            _layout.reshape_strides(x._shape, x._strides, new_shape, x.itemsize) is None
        ):
            raise ValueError(
                f"reshape: an array of shape {x._shape} and strides {x._strides} cannot be "
                f"viewed with shape {new_shape}; a copy is needed (copy=False was given)"
            )
    elif copy is not None:
        raise TypeError(f"reshape: copy must be True, False or None, got {copy!r}")
    return x.reshape(dims)


# --- copies --------------------------------------------------------------------------------------


def concat(arrays: tuple[NvArray, ...] | list[NvArray], /, *, axis: int | None = 0) -> NvArray:
    """Join ``arrays`` along an existing ``axis`` (:func:`ignis.concatenate`); ``axis=None``
    joins them flattened. Dtypes promote. Example: ``concat([a, b], axis=None)``."""
    if not isinstance(arrays, (tuple, list)):
        raise TypeError(f"concat: expected a tuple or list of arrays, got {type(arrays).__name__}")
    if axis is None:
        arrays = [_array(x, "concat").reshape(x.numel) for x in arrays]
        axis = 0
    return _ops.concatenate(arrays, axis=axis)


def roll(
    x: NvArray,
    /,
    shift: int | tuple[int, ...],
    *,
    axis: int | tuple[int, ...] | None = None,
) -> NvArray:
    """``x`` with its elements shifted by ``shift`` places along ``axis`` (flattened when None),
    those pushed past the end coming back at the start. A new array, made in one pass.

    ``shift`` is an int (the same for every axis) or a tuple matching ``axis``; shifts of a
    repeated axis add up. Example: ``roll(arange(5), 2).to_host()`` is ``[3, 4, 0, 1, 2]``.
    """
    x = _array(x, "roll")
    shifts = _ints(shift, "shift", "roll")
    if axis is None:
        if len(shifts) != 1:
            raise ShapeError(f"roll: a tuple shift {shift!r} needs a tuple axis of its length")
        return roll(x.reshape(x.numel), shifts[0], axis=0).reshape(x._shape)
    axes = [sem.normalize_axis(a, x.ndim, "roll") for a in _ints(axis, "axis", "roll")]
    if len(shifts) == 1:
        shifts = shifts * len(axes)
    if len(shifts) != len(axes):
        raise ShapeError(
            f"roll: shift {shift!r} and axis {axis!r} must have the same number of entries"
        )
    total = [0] * x.ndim
    for a, s in zip(axes, shifts, strict=True):
        total[a] += s
    out = _creation._new(x._shape, x._dtype, x._device)
    if out.numel == 0:
        return out
    # every axis splits in two pieces (moved by its shift); one copy per combination of pieces
    pieces = []
    for n, s in zip(x._shape, total, strict=True):
        s %= n
        pieces.append([(slice(0, n - s), slice(s, n)), (slice(n - s, n), slice(0, s))] if s else
                      [(slice(None), slice(None))])
    for combo in itertools.product(*pieces):
        src = tuple(p[0] for p in combo)
        dst = tuple(p[1] for p in combo)
        view = out[dst]
        if view.numel:
            x._backend.copy(view, x[src])
    return out


def tile(x: NvArray, repetitions: tuple[int, ...], /) -> NvArray:
    """``x`` repeated ``repetitions[i]`` times along each axis ``i`` (NumPy's ``tile``: missing
    leading repetitions are 1, missing leading axes of ``x`` have size 1). A new array, one copy
    of a broadcast view. Example: ``tile(x, (2, 1))`` stacks two copies of a 2-D ``x``."""
    x = _array(x, "tile")
    reps = _ints(repetitions, "repetitions", "tile")
    if any(r < 0 for r in reps):
        raise ValueError(f"tile: repetitions must be >= 0, got {tuple(reps)}")
    d = max(x.ndim, len(reps))
    shape = (1,) * (d - x.ndim) + x._shape
    strides = (0,) * (d - x.ndim) + x._strides
    reps = (1,) * (d - len(reps)) + reps
    # (r0, s0, r1, s1, ...) with stride 0 along each r: copied, it is the tiled array
    view = x._view(
        x._offset,
        tuple(v for pair in zip(reps, shape, strict=True) for v in pair),
        tuple(v for s in strides for v in (0, s)),
    )
    out = _creation._new(view._shape, x._dtype, x._device)
    if out.numel:
        x._backend.copy(out, view)
    return out.reshape(tuple(r * s for r, s in zip(reps, shape, strict=True)))


def repeat(
    x: NvArray, repeats: int | NvArray | Any, /, *, axis: int | None = None
) -> NvArray:
    """Each element of ``x`` repeated ``repeats`` times along ``axis`` (of the flattened array
    when None): ``repeats`` is an int or a 1-D integer array of one count or one per element.

    With an array of counts the result's length depends on them: the host waits for the device
    once to learn it (and to check that no count is negative). Example:
    ``repeat(asarray([1, 2]), asarray([2, 3])).to_host()`` is ``[1, 1, 2, 2, 2]``.
    """
    import numpy as np

    op = "repeat"
    x = _array(x, op)
    if axis is None:
        x, ax = x.reshape(x.numel), 0
    else:
        ax = sem.normalize_axis(axis, x.ndim, op)
    n = x._shape[ax]
    counts = None  # a device array of one count per element, or None: one count for all
    if isinstance(repeats, NvArray):
        if repeats._dtype.kind not in "iu":
            raise DTypeError(f"{op}: repeats must have an integer dtype, got {repeats._dtype.name}")
        if repeats._device != x._device:
            raise ShapeError(f"{op}: repeats is on {repeats._device} but x is on {x._device}")
        if repeats.ndim > 1 or (repeats.ndim == 1 and repeats._shape[0] not in (1, n)):
            raise ShapeError(
                f"{op}: repeats of shape {repeats._shape} does not broadcast to ({n},) (one "
                "count, or one per element along the axis)"
            )
        if repeats.numel == 1 and n != 1:
            r = int(repeats.reshape(()).item())
        else:
            counts = repeats.reshape(repeats.numel).astype(dt.int64)
    elif isinstance(repeats, (list, tuple, np.ndarray)):
        host = np.asarray(repeats)
        if host.dtype.kind not in "iu" or host.ndim > 1 or host.size not in (1, n):
            raise ShapeError(
                f"{op}: repeats must be an int or a 1-D sequence of 1 or {n} ints, got "
                f"{repeats!r}"
            )
        if host.size == 1 and n != 1:
            r = int(host.reshape(()))
        else:
            counts = _creation.from_host(host.astype(np.int64).reshape(-1), device=x._device)
    else:
        r = _int(repeats, "repeats", op)
    if counts is None:
        if r < 0:
            raise ValueError(f"{op}: repeats must be >= 0, got {r}")
        # a new axis after ax, broadcast r times: copied, it is the repeated array
        shape = x._shape[: ax + 1] + (r,) + x._shape[ax + 1 :]
        strides = x._strides[: ax + 1] + (0,) + x._strides[ax + 1 :]
        out = _creation._new(shape, x._dtype, x._device)
        if out.numel:
            x._backend.copy(out, x._view(x._offset, shape, strides))
        return out.reshape(x._shape[:ax] + (n * r,) + x._shape[ax + 1 :])
    if counts.numel == 0:
        total, low = 0, 0
    else:  # one transfer for both numbers: the one wait for the device
        total, low = (int(v) for v in _ops.stack([counts.sum(), counts.min()]).to_host())
    if low < 0:
        raise ValueError(f"{op}: repeats must be >= 0, got a count of {low}")
    index = _creation._new((total,), dt.int64, x._device)
    if total:
        x._backend.kernels.repeat_index(index, counts.contiguous())
    return take(x, index, ax)


# --- creation ------------------------------------------------------------------------------------


def eye(
    n_rows: int,
    n_cols: int | None = None,
    /,
    *,
    k: int = 0,
    dtype: dt.DTypeLike | None = None,
    device: Any = None,
) -> NvArray:
    """A (n_rows, n_cols) array of zeros with ones on diagonal ``k`` (above the main one for
    ``k > 0``, below for ``k < 0``); ``n_cols`` defaults to ``n_rows``, ``dtype`` to the default
    floating dtype. Example: ``eye(2, 3, k=1).to_host()`` is ``[[0, 1, 0], [0, 0, 1]]``."""
    rows = _int(n_rows, "n_rows", "eye")
    cols = rows if n_cols is None else _int(n_cols, "n_cols", "eye")
    k = _int(k, "k", "eye")
    if rows < 0 or cols < 0:
        raise ValueError(f"eye: n_rows and n_cols must be >= 0, got {rows} and {cols}")
    d = dt.default_float if dtype is None else dt.as_dtype(dtype, "eye")
    out = _creation.zeros((rows, cols), dtype=d, device=device)
    r0, c0 = (0, k) if k >= 0 else (-k, 0)
    length = max(0, min(rows - r0, cols - c0))
    if length:
        item = d.itemsize
        diagonal = out._view((r0 * cols + c0) * item, (length,), ((cols + 1) * item,))
        out._backend.fill(diagonal, True if d is dt.bool_ else 1)
    return out


def linspace(
    start: int | float,
    stop: int | float,
    /,
    num: int,
    *,
    dtype: dt.DTypeLike | None = None,
    device: Any = None,
    endpoint: bool = True,
) -> NvArray:
    """``num`` evenly spaced values from ``start`` to ``stop`` (included unless
    ``endpoint=False``): ``start + i * step`` computed in float64 and rounded once, the last
    one exactly ``stop``. ``dtype`` defaults to the default floating dtype; an integer dtype
    truncates. Example: ``linspace(0, 1, 5).to_host()`` is ``[0, 0.25, 0.5, 0.75, 1]``."""
    op = "linspace"
    bounds = []
    for name, v in (("start", start), ("stop", stop)):
        if hasattr(v, "item") and not isinstance(v, NvArray):
            v = v.item()
        if isinstance(v, complex):
            return _complex_linspace(start, stop, num, dtype, device, endpoint)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise TypeError(f"{op}: {name} must be an int or a float, got {v!r}")
        bounds.append(float(v))
    num = _int(num, "num", op)
    if num < 0:
        raise ValueError(f"{op}: num must be >= 0, got {num}")
    d = dt.default_float if dtype is None else dt.as_dtype(dtype, op)
    if d is dt.bool_:
        raise DTypeError(f"{op}: dtype must be numeric, got bool")
    if d.kind == "c":
        return _complex_linspace(start, stop, num, d, device, endpoint)
    lo, hi = bounds
    div = num - 1 if endpoint else num
    step = (hi - lo) / div if div > 0 else 0.0
    work = d if d.kind == "f" else dt.float64  # integers: NumPy's float values, truncated
    out = _creation._new((num,), work, _creation.resolve_device(device))
    if num:
        out._backend.arange(out, lo, step)
        if endpoint and num > 1:
            out._backend.fill(out[num - 1 :], hi)
    return out if work is d else out.astype(d)


def _complex_linspace(
    start: Any, stop: Any, num: int, dtype: Any, device: Any, endpoint: bool
) -> NvArray:
    """:func:`linspace` of complex bounds or dtype: the real and the imaginary parts are each
    spaced as real values (the standard's rule), in the parts' dtype, then joined."""
    d = dt.default_complex if dtype is None else dt.as_dtype(dtype, "linspace")
    if d.kind != "c":
        raise DTypeError(
            f"linspace: complex start or stop needs a complex dtype, got dtype {d.name}"
        )
    parts = []
    for name, v in (("start", start), ("stop", stop)):
        if hasattr(v, "item") and not isinstance(v, NvArray):
            v = v.item()
        if isinstance(v, bool) or not isinstance(v, (int, float, complex)):
            raise TypeError(f"linspace: {name} must be an int, a float or a complex, got {v!r}")
        parts.append(complex(v))
    real = dt.real_of(d)
    kw = {"dtype": real, "device": device, "endpoint": endpoint}
    re = linspace(parts[0].real, parts[1].real, num, **kw)
    im = linspace(parts[0].imag, parts[1].imag, num, **kw)
    return _ops.add(re.astype(d), _ops.multiply(im.astype(d), 1j))


def meshgrid(*arrays: NvArray, indexing: str = "xy") -> list[NvArray]:
    """Coordinate arrays from 1-D coordinate vectors: with ``indexing="ij"`` each has shape
    ``(len(a0), len(a1), ...)``, with ``"xy"`` (the default) the first two lengths swap. New
    arrays (copies), each of its input's dtype. Example: ``xs, ys = meshgrid(x, y)``."""
    if indexing not in ("xy", "ij"):
        raise ValueError(f"meshgrid: indexing must be 'xy' or 'ij', got {indexing!r}")
    xs = [_array(a, "meshgrid") for a in arrays]
    for i, a in enumerate(xs):
        if a.ndim != 1:
            raise ShapeError(f"meshgrid: array {i} must be 1-D, got shape {a._shape}")
    if xs:
        _ops._common_device("meshgrid", xs)
    shape = [a._shape[0] for a in xs]
    axes = list(range(len(xs)))
    if indexing == "xy" and len(xs) >= 2:
        shape[0], shape[1] = shape[1], shape[0]
        axes[0], axes[1] = 1, 0
    out = []
    for a, ax in zip(xs, axes, strict=True):
        strides = tuple(a._strides[0] if d == ax else 0 for d in range(len(xs)))
        grid = _creation._new(tuple(shape), a._dtype, a._device)
        if grid.numel:
            a._backend.copy(grid, a._view(a._offset, tuple(shape), strides))
        out.append(grid)
    return out


def _triangle(x: NvArray, k: int, lower: bool, op: str) -> NvArray:
    x = _array(x, op)
    k = _int(k, "k", op)
    if x.ndim < 2:
        raise ShapeError(f"{op}: needs at least 2 dimensions (..., M, N), got shape {x._shape}")
    m, n = x._shape[-2:]
    rows = _creation.arange(m, dtype=dt.int64, device=x._device).reshape(m, 1)
    cols = _creation.arange(n, dtype=dt.int64, device=x._device)
    offset = cols - rows  # (m, n): the diagonal each element is on
    keep = offset <= k if lower else offset >= k
    return _ops.where(keep, x, False if x._dtype is dt.bool_ else 0)


def tril(x: NvArray, /, *, k: int = 0) -> NvArray:
    """``x`` (..., M, N) with the elements above diagonal ``k`` set to zero (a new array).

    Example: ``tril(ones((3, 3)), k=-1)`` keeps the part strictly below the main diagonal.
    """
    return _triangle(x, k, True, "tril")


def triu(x: NvArray, /, *, k: int = 0) -> NvArray:
    """``x`` (..., M, N) with the elements below diagonal ``k`` set to zero (a new array)."""
    return _triangle(x, k, False, "triu")


# --- differences ---------------------------------------------------------------------------------


def diff(
    x: NvArray,
    /,
    *,
    axis: int = -1,
    n: int = 1,
    prepend: NvArray | None = None,
    append: NvArray | None = None,
) -> NvArray:
    """The ``n``-th forward difference ``out[i] = x[i + 1] - x[i]`` along ``axis``, applied
    ``n`` times, after joining ``prepend`` and ``append`` to ``x`` along that axis (their other
    axes must match x's; dtypes promote as in :func:`concat`). Booleans give ``x[i+1] != x[i]``.

    Example: ``diff(asarray([1, 4, 9, 16])).to_host()`` is ``[3, 5, 7]``.
    """
    op = "diff"
    x = _array(x, op)
    if x.ndim == 0:
        raise ShapeError(f"{op}: needs at least 1 dimension, got a 0-d array")
    ax = sem.normalize_axis(axis, x.ndim, op)
    n = _int(n, "n", op)
    if n < 0:
        raise ValueError(f"{op}: n must be >= 0, got {n}")
    parts = [_array(p, op) for p in (prepend, x, append) if p is not None]
    a = x if len(parts) == 1 else _ops.concatenate(parts, axis=ax)
    lead = (slice(None),) * ax
    for _ in range(n):
        hi, lo = a[lead + (slice(1, None),)], a[lead + (slice(None, -1),)]
        a = hi != lo if a._dtype is dt.bool_ else hi - lo
    return a if a is not x else x.clone()


# --- products (on top of matmul) -----------------------------------------------------------------


def _product(a: NvArray, b: NvArray, dtype: dt.DType) -> NvArray:
    """``a @ b`` for stacks of matrices (batch axes broadcast) in ``dtype``, through matmul;
    for bool, whose products matmul does not take, the or of ands (a count that is not 0)."""
    if dtype is dt.bool_:
        return _ops.matmul(a.astype(dt.int64), b.astype(dt.int64)) != 0
    return _ops.matmul(a.astype(dtype, copy=False), b.astype(dtype, copy=False))


def tensordot(
    x1: NvArray, x2: NvArray, /, *, axes: int | tuple[Any, Any] = 2
) -> NvArray:
    """The contraction of ``x1`` and ``x2`` over ``axes``: an int N pairs the last N axes of
    ``x1`` with the first N of ``x2``; a pair of sequences names them. The result has the
    other axes of ``x1``, then those of ``x2``; dtypes promote. One ``matmul`` of the two
    reshaped to matrices (copies only where the moved axes need them).

    Example: ``tensordot(a, b, axes=([1, 0], [0, 1]))`` of (3, 4, 5) and (4, 3, 2): (5, 2).
    """
    op = "tensordot"
    x1, x2 = _array(x1, op), _array(x2, op)
    _ops._common_device(op, [x1, x2])
    if isinstance(axes, (tuple, list)):
        if len(axes) != 2:
            raise ShapeError(f"{op}: axes must be an int or a pair of sequences, got {axes!r}")
        a1 = [sem.normalize_axis(a, x1.ndim, op) for a in _ints(axes[0], "axes", op)]
        a2 = [sem.normalize_axis(a, x2.ndim, op) for a in _ints(axes[1], "axes", op)]
        if len(a1) != len(a2):
            raise ShapeError(f"{op}: the two sequences of axes {axes!r} differ in length")
        if len(set(a1)) != len(a1) or len(set(a2)) != len(a2):
            raise ShapeError(f"{op}: repeated axis in {axes!r}")
    else:
        count = _int(axes, "axes", op)
        if count < 0 or count > min(x1.ndim, x2.ndim):
            raise ShapeError(
                f"{op}: axes={count} must be in [0, {min(x1.ndim, x2.ndim)}] for shapes "
                f"{x1._shape} and {x2._shape}"
            )
        a1, a2 = list(range(x1.ndim - count, x1.ndim)), list(range(count))
    for i, j in zip(a1, a2, strict=True):
        if x1._shape[i] != x2._shape[j]:
            raise ShapeError(
                f"{op}: axis {i} of x1 (size {x1._shape[i]}) and axis {j} of x2 (size "
                f"{x2._shape[j]}) are contracted but differ; shapes {x1._shape} and {x2._shape}"
            )
    free1 = [d for d in range(x1.ndim) if d not in a1]
    free2 = [d for d in range(x2.ndim) if d not in a2]
    shape1 = tuple(x1._shape[d] for d in free1)
    shape2 = tuple(x2._shape[d] for d in free2)
    k = _layout.numel(x1._shape[d] for d in a1)
    a = x1.permute(tuple(free1 + a1)).reshape(_layout.numel(shape1), k)
    b = x2.permute(tuple(a2 + free2)).reshape(k, _layout.numel(shape2))
    dtype = dt.result_type(x1._dtype, x2._dtype, op=op)
    return _product(a, b, dtype).reshape(shape1 + shape2)


def vecdot(x1: NvArray, x2: NvArray, /, *, axis: int = -1) -> NvArray:
    """Dot products of the vectors along ``axis`` of ``x1`` and ``x2`` (the other axes
    broadcast; the contracted ones must have one size). ``axis`` counts from the end of each
    array (``-1``: the last); dtypes promote. Example: ``vecdot(a, b)`` of (3, 4) and (4,): (3,).
    """
    op = "vecdot"
    x1, x2 = _array(x1, op), _array(x2, op)
    _ops._common_device(op, [x1, x2])
    a = _int(axis, "axis", op)
    low = min(x1.ndim, x2.ndim)
    if a >= 0:  # counted against the broadcast shape, as NumPy does
        a -= max(x1.ndim, x2.ndim)
    if not -low <= a <= -1:
        raise ShapeError(
            f"{op}: axis {axis} is out of range for shapes {x1._shape} and {x2._shape} (expected "
            f"{-low} <= axis <= -1)"
        )
    if x1._shape[a] != x2._shape[a]:
        raise ShapeError(
            f"{op}: the vectors differ in length: axis {axis} of shapes {x1._shape} and "
            f"{x2._shape} ({x1._shape[a]} != {x2._shape[a]})"
        )
    v1, v2 = moveaxis(x1, a, -1), moveaxis(x2, a, -1)
    if v1._dtype.kind == "c":  # the standard's dot product conjugates the first vector
        v1 = _ops.conj(v1)
    dtype = dt.result_type(x1._dtype, x2._dtype, op=op)
    batch = _layout.broadcast_shapes(v1._shape[:-1], v2._shape[:-1], op=op)
    return _product(v1.unsqueeze(-2), v2.unsqueeze(-1), dtype).reshape(batch)
