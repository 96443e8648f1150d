"""Sorting, searching, set and cumulative functions of the Array API standard.

:func:`sort`, :func:`argsort`, :func:`searchsorted`, :func:`nonzero`, :func:`count_nonzero`,
:func:`unique_all`, :func:`unique_counts`, :func:`unique_inverse`, :func:`unique_values`,
:func:`cumulative_sum` and :func:`cumulative_prod`, with the standard's signatures.

Semantics (written once here; the backends execute the families ``sort``, ``cumulative``,
``searchsorted``, ``nonzero`` and ``unique``):

* order is NumPy's: ascending puts NaN last, descending first; -0.0 equals +0.0. Sorts are
  always stable (``stable=False`` is accepted and gives the stable order), and a descending
  sort keeps equal elements in index order, as a stable ascending sort does;
* :func:`sort`'s values are the input's elements; where -0.0 and +0.0 are both present the
  CUDA backend puts every -0.0 first (they compare equal, so the order is still sorted);
* the unique functions flatten the input, return the unique values in ascending order (NaNs
  last, each one distinct: NaN != NaN), and count -0.0 and +0.0 as one value;
* :func:`nonzero` and the unique functions have data-dependent result sizes: on the GPU they
  wait once for the device to learn them. Everything else is queued without waiting;
* the index results are int64 (the default index dtype);
* complex numbers (complex64, complex128) are taken by every function here. They order as
  NumPy orders them: by real part, then imaginary part, NaN-containing values last: first
  those with a NaN imaginary part only (by real part), then those with a NaN real part only
  (by imaginary part), then those with both parts NaN (the standard leaves sorting complex
  numbers unspecified; it requires the unique functions, which need equality only, and the
  cumulative ones). A complex number with a NaN part is a NaN: the unique functions keep each
  one distinct;
* :func:`cumulative_sum` / :func:`cumulative_prod` return the input's dtype, except that bool
  and signed integers narrower than int64 give int64 and unsigned ones narrower than 64 bits
  uint64 (the standard's rule; ``dtype=`` overrides it, and the input is converted to it
  first). float16/bfloat16 accumulate in float32 and each output is rounded once; integers
  wrap around on overflow.

NvArray has no methods for these: the standard's array object has none, and NumPy's and
PyTorch's ``x.sort()`` disagree (in place versus a (values, indices) pair).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from .. import _dtypes as dt
from .._errors import DeviceMismatchError, DTypeError, ShapeError
from . import _creation, _layout
from . import _semantics as sem
from .array import NvArray

__all__ = [
    "argsort",
    "sort",
    "searchsorted",
    "nonzero",
    "count_nonzero",
    "unique_all",
    "unique_counts",
    "unique_inverse",
    "unique_values",
    "cumulative_sum",
    "cumulative_prod",
]


class UniqueAllResult(NamedTuple):
    """:func:`unique_all`'s result."""

    values: NvArray
    indices: NvArray
    inverse_indices: NvArray
    counts: NvArray


class UniqueCountsResult(NamedTuple):
    """:func:`unique_counts`'s result."""

    values: NvArray
    counts: NvArray


class UniqueInverseResult(NamedTuple):
    """:func:`unique_inverse`'s result."""

    values: NvArray
    inverse_indices: NvArray


# --- argument checks ---------------------------------------------------------------------------


def _array(x: Any, op: str, what: str = "x") -> NvArray:
    """``x`` if it is an NvArray (of any dtype: real or complex)."""
    if not isinstance(x, NvArray):
        raise TypeError(
            f"{op}: expected {what} to be an NvArray, got {type(x).__name__}; "
            "convert with ignis.asarray"
        )
    return x


def _flag(value: Any, op: str, name: str) -> bool:
    if value is not True and value is not False:
        raise TypeError(f"{op}: {name} must be True or False, got {value!r}")
    return value


def _sort_axis(x: NvArray, axis: Any, op: str) -> int:
    if x.ndim == 0:
        raise ShapeError(f"{op}: expected an array of at least 1 dimension, got a 0-d array")
    return sem.normalize_axis(axis, x.ndim, op)


def _rows(x: NvArray, ax: int) -> tuple[NvArray, int, int]:
    """``x`` with axis ``ax`` moved last, contiguous, as (rows, n); and (rows, n)."""
    moved = x if ax == x.ndim - 1 else x.swapaxes(ax, -1)
    n = x._shape[ax]
    rows = x.numel // n
    return moved.contiguous().reshape(rows, n), rows, n


def _restore(out: NvArray, x: NvArray, ax: int) -> NvArray:
    """The (rows, n) result ``out`` in ``x``'s shape (axis ``ax`` back in place), contiguous."""
    moved = x._shape if ax == x.ndim - 1 else _swapped(x._shape, ax)
    res = out.reshape(moved)
    return res if ax == x.ndim - 1 else res.swapaxes(ax, -1).contiguous()


def _swapped(shape: tuple[int, ...], ax: int) -> tuple[int, ...]:
    s = list(shape)
    s[ax], s[-1] = s[-1], s[ax]
    return tuple(s)


def _sorted(x: Any, axis: Any, descending: Any, stable: Any, op: str, want_values: bool) -> NvArray:
    x = _array(x, op)
    ax = _sort_axis(x, axis, op)
    desc = _flag(descending, op, "descending")
    _flag(stable, op, "stable")
    out_dtype = x._dtype if want_values else dt.int64
    if x.numel == 0:
        return _creation._new(x._shape, out_dtype, x._device)
    src, rows, n = _rows(x, ax)
    out = _creation._new((rows, n), out_dtype, x._device)
    if want_values:
        x._backend.kernels.sort(out, None, src, desc)
    else:
        x._backend.kernels.sort(None, out, src, desc)
    return _restore(out, x, ax)


# --- sorting -----------------------------------------------------------------------------------


def sort(
    x: NvArray, /, *, axis: int = -1, descending: bool = False, stable: bool = True
) -> NvArray:
    """A sorted copy of ``x`` along ``axis`` (ascending unless ``descending``), same dtype.

    The sort is stable; NaNs go last (first when descending). Complex numbers order by real
    part, then imaginary part, as NumPy orders them (see the module notes for NaNs).

    Example::

        >>> ignis.sort(ignis.asarray([3.0, float("nan"), -1.0, 2.0], dtype="float64")).to_host()
        array([-1.,  2.,  3., nan])
    """
    return _sorted(x, axis, descending, stable, "sort", True)


def argsort(
    x: NvArray, /, *, axis: int = -1, descending: bool = False, stable: bool = True
) -> NvArray:
    """The int64 indices that sort ``x`` along ``axis`` (stable: equal elements keep their
    order, also when ``descending``).

    Example::

        >>> ignis.argsort(ignis.asarray([2, 1, 2, 0]), descending=True).to_host()
        array([0, 2, 1, 3])
    """
    return _sorted(x, axis, descending, stable, "argsort", False)


# --- searching ---------------------------------------------------------------------------------


def searchsorted(
    x1: NvArray, x2: NvArray, /, *, side: str = "left", sorter: NvArray | None = None
) -> NvArray:
    """Where the elements of ``x2`` would go in the ascending 1-D ``x1`` to keep it sorted.

    ``side="left"`` gives for each ``v`` the first ``i`` with ``v <= x1[i]``, ``"right"`` the
    first with ``v < x1[i]`` (``len(x1)`` when there is none), in NaN-last order like
    :func:`sort`. ``sorter``: integer indices that sort ``x1``. Operands are compared in their
    promoted dtype. The result is int64 of ``x2``'s shape.

    Example::

        >>> a, v = ignis.asarray([1, 2, 2, 5]), ignis.asarray([2, 6])
        >>> ignis.searchsorted(a, v, side="right").to_host()
        array([3, 4])
    """
    op = "searchsorted"
    x1 = _array(x1, op, "x1")
    x2 = _array(x2, op, "x2")
    if x1.ndim != 1:
        raise ShapeError(f"{op}: x1 must be 1-D, got shape {x1._shape}")
    if side not in ("left", "right"):
        raise ValueError(f"{op}: side must be 'left' or 'right', got {side!r}")
    if x2._device != x1._device:
        raise DeviceMismatchError(
            f"{op}: x2 is on {x2._device} but x1 is on {x1._device}; move it with .to(device)"
        )
    if sorter is not None:
        x1 = _apply_sorter(x1, sorter, op)
    dtype = dt.result_type(x1._dtype, x2._dtype, op=op)
    out = _creation._new(x2._shape, dt.int64, x2._device)
    if out.numel == 0:
        return out
    if x1._shape[0] == 0:
        out._backend.fill(out, 0)
        return out
    a = x1.astype(dtype, copy=False).contiguous()
    v = x2.astype(dtype, copy=False).contiguous().reshape(x2.numel)
    x1._backend.kernels.searchsorted(out.reshape(x2.numel), a, v, side == "right")
    return out


def _apply_sorter(x1: NvArray, sorter: Any, op: str) -> NvArray:
    """``x1[sorter]``: ``x1`` in the order ``sorter`` gives."""
    from ._indexing import take

    if not isinstance(sorter, NvArray):
        raise TypeError(f"{op}: sorter must be an NvArray of indices, got {type(sorter).__name__}")
    if sorter._dtype.kind not in "iu":
        raise DTypeError(f"{op}: sorter must have an integer dtype, got {sorter._dtype.name}")
    if sorter._shape != x1._shape:
        raise ShapeError(f"{op}: sorter has shape {sorter._shape}, expected x1's {x1._shape}")
    if sorter._device != x1._device:
        raise DeviceMismatchError(f"{op}: sorter is on {sorter._device} but x1 on {x1._device}")
    if sorter._dtype not in (dt.int32, dt.int64):
        sorter = sorter.astype(dt.int64)
    return take(x1, sorter) if x1._shape[0] else x1


def nonzero(x: NvArray, /) -> tuple[NvArray, ...]:
    """The indices of the nonzero elements of ``x`` (at least 1-D): one int64 array per
    dimension, in row-major order. NaN is nonzero, -0.0 is zero. On the GPU this waits once for
    the device (the count decides the result's size).

    Example::

        >>> [i.to_host() for i in ignis.nonzero(ignis.asarray([[0, 3], [4, 0]]))]
        [array([0, 1]), array([1, 0])]
    """
    x = _array(x, "nonzero")
    if x.ndim == 0:
        raise ShapeError("nonzero: expected an array of at least 1 dimension, got a 0-d array")
    if x.numel == 0:
        return tuple(_creation._new((0,), dt.int64, x._device) for _ in range(x.ndim))
    coords = x._backend.kernels.nonzero(x.contiguous())
    return tuple(coords[d] for d in range(x.ndim))


def count_nonzero(
    x: NvArray, /, *, axis: int | tuple[int, ...] | None = None, keepdims: bool = False
) -> NvArray:
    """The number of nonzero elements of ``x`` over ``axis`` (all axes by default), int64.

    Example: ``ignis.count_nonzero(ignis.asarray([[0, 1], [2, 3]]), axis=1)`` is ``[1, 2]``.
    """
    from . import _ops

    x = _array(x, "count_nonzero")
    _flag(keepdims, "count_nonzero", "keepdims")
    mask = x if x._dtype is dt.bool_ else _ops.not_equal(x, 0)
    return _ops.sum(mask, axis=axis, keepdims=keepdims)


# --- sets --------------------------------------------------------------------------------------


def _unique(x: Any, op: str, indices: bool, inverse: bool, counts: bool) -> tuple[Any, ...]:
    x = _array(x, op)
    n = x.numel
    if n == 0:
        empty = _creation._new((0,), dt.int64, x._device)
        return (
            _creation._new((0,), x._dtype, x._device),
            empty if indices else None,
            _creation._new(x._shape, dt.int64, x._device) if inverse else None,
            empty if counts else None,
        )
    flat = x.contiguous().reshape(n)
    values, first, inv, cnt = x._backend.kernels.unique(flat, indices, inverse, counts)
    return values, first, inv.reshape(x._shape) if inverse else None, cnt


def unique_all(x: NvArray, /) -> UniqueAllResult:
    """The unique elements of flattened ``x`` (ascending, NaNs last and distinct), the index of
    the first occurrence of each, the indices into them that rebuild ``x`` (``x``'s shape), and
    the count of each: ``(values, indices, inverse_indices, counts)``. Waits once for the GPU.

    Example::

        >>> r = ignis.unique_all(ignis.asarray([3, 1, 3, 2]))
        >>> r.values.to_host(), r.indices.to_host(), r.inverse_indices.to_host()
        (array([1, 2, 3]), array([1, 3, 0]), array([2, 0, 2, 1]))
    """
    values, first, inv, cnt = _unique(x, "unique_all", True, True, True)
    return UniqueAllResult(values, first, inv, cnt)


def unique_counts(x: NvArray, /) -> UniqueCountsResult:
    """``(values, counts)`` of :func:`unique_all`.

    Example: ``ignis.unique_counts(ignis.asarray([2, 2, 5])).counts`` is ``[2, 1]``.
    """
    values, _, _, cnt = _unique(x, "unique_counts", False, False, True)
    return UniqueCountsResult(values, cnt)


def unique_inverse(x: NvArray, /) -> UniqueInverseResult:
    """``(values, inverse_indices)`` of :func:`unique_all`.

    Example: ``ignis.unique_inverse(ignis.asarray([5, 2, 5])).inverse_indices`` is ``[1, 0, 1]``.
    """
    values, _, inv, _ = _unique(x, "unique_inverse", False, True, False)
    return UniqueInverseResult(values, inv)


def unique_values(x: NvArray, /) -> NvArray:
    """The unique elements of flattened ``x``, ascending (NaNs last, each one distinct).

    Example: ``ignis.unique_values(ignis.asarray([2.0, -1.0, 2.0]))`` is ``[-1.0, 2.0]``.
    """
    return _unique(x, "unique_values", False, False, False)[0]  # type: ignore[no-any-return]


# --- cumulative sums and products --------------------------------------------------------------


def _cumulative_dtype(x: NvArray, dtype: Any, op: str) -> dt.DType:
    if dtype is None:
        d = x._dtype
        if d.kind == "b" or (d.kind == "i" and d.itemsize < 8):
            return dt.int64
        if d.kind == "u" and d.itemsize < 8:
            return dt.uint64
        return d
    out = dt.as_dtype(dtype, op)
    if out.kind not in "iufc":
        raise DTypeError(f"{op}: dtype must be numeric, got {out.name}")
    if x._dtype.kind == "c" and out.kind != "c":
        raise DTypeError(
            f"{op}: cannot accumulate complex {x._dtype.name} values in {out.name}; "
            "pass a complex dtype or take the real part first"
        )
    return out


def _cumulative(x: Any, axis: Any, dtype: Any, include_initial: Any, op: str, kind: str) -> NvArray:
    x = _array(x, op)
    init = _flag(include_initial, op, "include_initial")
    if x.ndim == 0:
        raise ShapeError(f"{op}: expected an array of at least 1 dimension, got a 0-d array")
    if axis is None:
        if x.ndim > 1:
            raise ShapeError(
                f"{op}: axis is required for an array of {x.ndim} dimensions (shape {x._shape})"
            )
        axis = 0
    ax = sem.normalize_axis(axis, x.ndim, op)
    out_dtype = _cumulative_dtype(x, dtype, op)
    shape = x._shape
    n = shape[ax]
    outer, inner = _layout.numel(shape[:ax]), _layout.numel(shape[ax + 1 :])
    out_shape = shape[:ax] + (n + init,) + shape[ax + 1 :]
    out = _creation._new(out_shape, out_dtype, x._device)
    if out.numel == 0:
        return out
    if n == 0:  # include_initial of an empty axis: the initial values alone
        out._backend.fill(out, 0 if kind == "sum" else 1)
        return out
    src = x.astype(out_dtype, copy=False).contiguous().reshape(outer, n, inner)
    x._backend.kernels.cumulative(out.reshape(outer, n + init, inner), src, kind, init)
    return out


def cumulative_sum(
    x: NvArray,
    /,
    *,
    axis: int | None = None,
    dtype: Any = None,
    include_initial: bool = False,
) -> NvArray:
    """Cumulative sums of ``x`` along ``axis`` (optional for 1-D ``x``).

    ``include_initial`` puts a 0 first (the axis grows by one). Result dtype: ``dtype``, or
    ``x``'s except bool and narrower integers, which sum in int64 (signed, bool) or uint64.

    Example::

        >>> ignis.cumulative_sum(ignis.asarray([1, 2, 3]), include_initial=True).to_host()
        array([0, 1, 3, 6])
    """
    return _cumulative(x, axis, dtype, include_initial, "cumulative_sum", "sum")


def cumulative_prod(
    x: NvArray,
    /,
    *,
    axis: int | None = None,
    dtype: Any = None,
    include_initial: bool = False,
) -> NvArray:
    """Cumulative products of ``x`` along ``axis``, as :func:`cumulative_sum` (the initial
    value is 1).

    Example::

        >>> ignis.cumulative_prod(ignis.asarray([1.0, 2.0, 3.0], dtype="float64")).to_host()
        array([1., 2., 6.])
    """
    return _cumulative(x, axis, dtype, include_initial, "cumulative_prod", "prod")
