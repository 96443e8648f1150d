"""Shape and stride arithmetic shared by every backend (strides are in bytes, as in NumPy).

Pure functions on tuples: contiguity, broadcasting, reshape without a copy, basic indexing and
memory overlap. Nothing here touches memory.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

from .._errors import ShapeError

__all__ = [
    "normalize_shape",
    "numel",
    "contiguous_strides",
    "is_c_contiguous",
    "broadcast_shapes",
    "broadcast_strides",
    "reshape_strides",
    "byte_extent",
    "index_view",
]

Shape = tuple[int, ...]


def normalize_shape(shape: Any, op: str) -> Shape:
    """A tuple of non-negative ints from an int or a sequence of ints.

    Example: ``normalize_shape(3, "zeros") == (3,)``; ``normalize_shape([2, 0], "x") == (2, 0)``.
    """
    if isinstance(shape, (list, tuple)):
        dims = shape
    else:
        try:
            return _check_dims((operator.index(shape),), shape, op)
        except TypeError:
            raise ShapeError(
                f"{op}: shape must be an int or a sequence of ints, got {shape!r}"
            ) from None
    try:
        out = tuple(operator.index(d) for d in dims)
    except TypeError:
        raise ShapeError(
            f"{op}: shape must be an int or a sequence of ints, got {shape!r}"
        ) from None
    return _check_dims(out, shape, op)


def normalize_shape_allow_unknown(shape: Any, op: str) -> Shape:
    """Like :func:`normalize_shape` but keeps ``-1`` entries (for reshape)."""
    dims = shape if isinstance(shape, (list, tuple)) else (shape,)
    try:
        return tuple(operator.index(d) for d in dims)
    except TypeError:
        raise ShapeError(
            f"{op}: shape must be an int or a sequence of ints, got {shape!r}"
        ) from None


def _check_dims(out: Shape, given: Any, op: str) -> Shape:
    for d in out:
        if d < 0:
            raise ShapeError(f"{op}: negative dimension in shape {given!r}")
    return out


def numel(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def contiguous_strides(shape: Sequence[int], itemsize: int) -> Shape:
    """Row-major (C) strides in bytes. Example: ``contiguous_strides((2, 3), 4) == (12, 4)``."""
    strides = [0] * len(shape)
    step = itemsize
    for i in range(len(shape) - 1, -1, -1):
        strides[i] = step
        step *= max(shape[i], 1)
    return tuple(strides)


def is_c_contiguous(shape: Sequence[int], strides: Sequence[int], itemsize: int) -> bool:
    """True when the elements are dense in row-major order (size-1 dims may have any stride)."""
    # Every op asks this of its operands: one to three dimensions go without the loop.
    n = len(shape)
    if n == 1:
        return strides[0] == itemsize or shape[0] <= 1
    if n == 2:
        d0, d1 = shape
        if (d1 == 1 or strides[1] == itemsize) and (d0 == 1 or strides[0] == itemsize * d1):
            return True
        return d0 == 0 or d1 == 0
    if n == 3:
        d0, d1, d2 = shape
        s0, s1, s2 = strides
        if (
            (d2 == 1 or s2 == itemsize)
            and (d1 == 1 or s1 == itemsize * d2)
            and (d0 == 1 or s0 == itemsize * d2 * d1)
        ):
            return True
        return d0 == 0 or d1 == 0 or d2 == 0
    if 0 in shape:
        return True
    step = itemsize
    for d, s in zip(reversed(shape), reversed(strides), strict=False):
        if d != 1:
            if s != step:
                return False
            step *= d
    return True


def broadcast_shapes(*shapes: Sequence[int], op: str = "broadcast") -> Shape:
    """NumPy broadcasting of several shapes; ShapeError naming ``op`` when they do not fit.

    Example: ``broadcast_shapes((3, 1), (4,)) == (3, 4)``.
    """
    if len(shapes) == 2 and shapes[0] == shapes[1]:
        return tuple(shapes[0])
    ndim = max((len(s) for s in shapes), default=0)
    out = [1] * ndim
    for s in shapes:
        for i, d in enumerate(s, ndim - len(s)):
            cur = out[i]
            if d == cur or d == 1:
                continue
            if cur == 1:
                out[i] = d
            else:
                shown = " and ".join(str(tuple(x)) for x in shapes)
                raise ShapeError(f"{op}: shapes {shown} cannot be broadcast together")
    return tuple(out)


def broadcast_strides(
    shape: Sequence[int], strides: Sequence[int], target: Sequence[int], op: str = "broadcast_to"
) -> Shape:
    """Strides that view an array of ``shape`` as ``target`` (0 along broadcast dims)."""
    lead = len(target) - len(shape)
    if lead < 0:
        raise ShapeError(f"{op}: cannot broadcast shape {tuple(shape)} to {tuple(target)}")
    out = [0] * len(target)
    for i, (d, s) in enumerate(zip(shape, strides, strict=False)):
        t = target[lead + i]
        if d == t:
            out[lead + i] = s if t != 1 else 0
        elif d == 1:
            out[lead + i] = 0
        else:
            raise ShapeError(f"{op}: cannot broadcast shape {tuple(shape)} to {tuple(target)}")
    return tuple(out)


def infer_reshape(
    old_numel: int, new_shape: Sequence[int], old_shape: Sequence[int], op: str
) -> Shape:
    """Resolve one ``-1`` in ``new_shape`` and check the element count matches."""
    dims = list(new_shape)
    unknown = [i for i, d in enumerate(dims) if d == -1]
    if len(unknown) > 1:
        raise ShapeError(f"{op}: only one dimension can be -1, got {tuple(new_shape)}")
    if any(d < -1 for d in dims):
        raise ShapeError(f"{op}: invalid dimension in {tuple(new_shape)}")
    if unknown:
        known = numel(d for d in dims if d != -1)
        if known == 0 or old_numel % known:
            raise ShapeError(
                f"{op}: cannot reshape array of shape {tuple(old_shape)} ({old_numel} elements) "
                f"into {tuple(new_shape)}"
            )
        dims[unknown[0]] = old_numel // known
    if numel(dims) != old_numel:
        raise ShapeError(
            f"{op}: cannot reshape array of shape {tuple(old_shape)} ({old_numel} elements) "
            f"into {tuple(new_shape)} ({numel(dims)} elements)"
        )
    return tuple(dims)


def reshape_strides(
    old_shape: Sequence[int], old_strides: Sequence[int], new_shape: Sequence[int], itemsize: int
) -> Shape | None:
    """Strides viewing the same elements with ``new_shape``, or None when a copy is needed.

    Groups of old dimensions that are contiguous among themselves can be split and merged
    freely; a group that is not (e.g. after a transpose) cannot be merged.
    """
    if numel(old_shape) == 0:
        return contiguous_strides(new_shape, itemsize)
    old = [(d, s) for d, s in zip(old_shape, old_strides, strict=False) if d != 1]
    new = list(new_shape)
    new_strides = [0] * len(new)
    oi, ni = 0, 0
    while oi < len(old) and ni < len(new):
        oj, nj = oi + 1, ni + 1
        op_, np_ = old[oi][0], new[ni]
        while op_ != np_:
            if np_ < op_:
                np_ *= new[nj]
                nj += 1
            else:
                op_ *= old[oj][0]
                oj += 1
        for k in range(oi, oj - 1):
            if old[k][1] != old[k + 1][0] * old[k + 1][1]:
                return None
        new_strides[nj - 1] = old[oj - 1][1]
        for k in range(nj - 1, ni, -1):
            new_strides[k - 1] = new_strides[k] * new[k]
        oi, ni = oj, nj
    last = new_strides[ni - 1] if ni > 0 else itemsize
    for k in range(ni, len(new)):
        new_strides[k] = last
    return tuple(new_strides)


def byte_extent(
    offset: int, shape: Sequence[int], strides: Sequence[int], itemsize: int
) -> tuple[int, int]:
    """``[lo, hi)`` byte range touched by the view (``(offset, offset)`` when empty)."""
    if numel(shape) == 0:
        return offset, offset
    lo = hi = offset
    for d, s in zip(shape, strides, strict=False):
        if s > 0:
            hi += (d - 1) * s
        else:
            lo += (d - 1) * s
    return lo, hi + itemsize


def ranges_overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[1] and b[0] < a[1] and a[0] != a[1] and b[0] != b[1]


# --- basic indexing ----------------------------------------------------------------------------


def index_view(shape: Shape, strides: Shape, key: Any) -> tuple[int, Shape, Shape]:
    """Apply a basic index (ints, slices, None, Ellipsis) to a view.

    Returns ``(byte offset delta, new shape, new strides)``. Anything else (lists, arrays,
    booleans) raises IndexError: ignis arrays support basic indexing only.
    """
    items = key if isinstance(key, tuple) else (key,)
    n_ellipsis = sum(1 for k in items if k is Ellipsis)
    if n_ellipsis > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    consumed = 0
    for k in items:
        if k is None or k is Ellipsis:
            continue
        _check_index_item(k)
        consumed += 1
    if consumed > len(shape):
        raise IndexError(
            f"too many indices for array: array is {len(shape)}-dimensional, "
            f"but {consumed} were indexed"
        )
    if n_ellipsis == 0:
        items = items + (Ellipsis,)
    offset = 0
    out_shape: list[int] = []
    out_strides: list[int] = []
    dim = 0
    for k in items:
        if k is Ellipsis:
            for _ in range(len(shape) - consumed):
                out_shape.append(shape[dim])
                out_strides.append(strides[dim])
                dim += 1
        elif k is None:
            out_shape.append(1)
            out_strides.append(0)
        elif isinstance(k, slice):
            start, stop, step = k.indices(shape[dim])
            length = len(range(start, stop, step))
            if length > 0:
                offset += start * strides[dim]
            out_shape.append(length)
            out_strides.append(strides[dim] * step)
            dim += 1
        else:
            i = operator.index(k)
            n = shape[dim]
            if not -n <= i < n:
                raise IndexError(f"index {i} is out of bounds for axis {dim} with size {n}")
            offset += (i % n) * strides[dim]
            dim += 1
    return offset, tuple(out_shape), tuple(out_strides)


def _check_index_item(k: Any) -> None:
    if isinstance(k, slice):
        for part in (k.start, k.stop, k.step):
            if part is not None:
                try:
                    operator.index(part)
                except TypeError:
                    raise IndexError(f"slice indices must be integers or None, got {k!r}") from None
        if k.step is not None and operator.index(k.step) == 0:
            raise ValueError("slice step cannot be zero")
        return
    if isinstance(k, bool) or not hasattr(type(k), "__index__"):
        raise IndexError(
            f"only integers, slices (':'), ellipsis ('...') and None are valid basic indices, "
            f"got {type(k).__name__}; the advanced ones are integer or boolean arrays"
        )
