"""Strided operands for kernels: merging dimensions, and packing shapes and strides by value.

Elementwise-style kernels walk the elements of an output in row-major order and find each
operand's element through its byte strides. Fewer dimensions mean less index arithmetic, so
before launching, dimensions that every operand walks contiguously are merged::

    >>> collapse((4, 5, 6), [(120, 24, 4), (0, 0, 4)])   # out contiguous, b broadcast on (4, 5)
    ((20, 6), [(24, 4), (0, 4)])

The result is passed to the kernel as the C++ struct ``ignis::ew::StridedArgs<NARG>`` of
``cuda_src/elementwise.cuh`` (up to :data:`MAX_DIMS` dimensions, innermost first, byte strides
per operand, and the magic numbers of a 32-bit division by each size), packed by
:class:`StridedPacker` into ``bytes`` of exactly the struct's size::

    >>> packer = StridedPacker(2)
    >>> len(packer.pack((20, 6), [(24, 4), (0, 4)])) == packer.size == 264
    True

All strides are in bytes (as NumPy's); shapes never contain 0 here (empty arrays launch nothing).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence

from ... import _caches

__all__ = [
    "MAX_DIMS",
    "WIDE_INDEX",
    "collapse",
    "sort_by_first",
    "split_outer",
    "fast_divider",
    "is_contiguous",
    "contiguous_strides",
    "StridedPacker",
]

#: The most dimensions one kernel launch handles (``ignis::ew::max_dims``).
MAX_DIMS = 8

#: Element counts from here on need 64-bit index division in the kernels (``WIDE``).
WIDE_INDEX = 2**31

Shape = tuple[int, ...]
Strides = tuple[int, ...]


def collapse(
    shape: Sequence[int], strides_list: Sequence[Sequence[int]]
) -> tuple[Shape, list[Strides]]:
    """Drop size-1 dimensions and merge neighbours that every operand steps through evenly.

    Dimension ``i`` merges into ``i + 1`` when, for every operand, ``stride[i] == stride[i+1] *
    shape[i+1]`` (zero strides merge with zero strides). The element order in row-major
    traversal is unchanged. A shape with no dimension left becomes ``(1,)``.

    Example: ``collapse((2, 3), [(12, 4), (12, 4)]) == ((6,), [(4,), (4,)])``.
    """
    nops = len(strides_list)
    dims: list[int] = []
    strides: list[list[int]] = [[] for _ in range(nops)]
    for d, size in enumerate(shape):
        if size == 1:
            continue
        if dims:
            # Try to merge the previous (outer) dimension with this (inner) one.
            inner = size
            if all(strides[k][-1] == strides_list[k][d] * inner for k in range(nops)):
                dims[-1] *= inner
                for k in range(nops):
                    strides[k][-1] = strides_list[k][d]
                continue
        dims.append(size)
        for k in range(nops):
            strides[k].append(strides_list[k][d])
    if not dims:
        return (1,), [(0,) for _ in range(nops)]
    return tuple(dims), [tuple(s) for s in strides]


def sort_by_first(
    shape: Sequence[int], strides_list: Sequence[Sequence[int]]
) -> tuple[Shape, list[Strides]]:
    """Reorder dimensions so that the first operand's ``|stride|`` decreases (stable).

    For elementwise work any consistent permutation of the dimensions gives the same result;
    following the output's memory order keeps its writes contiguous (e.g. writing into a
    transposed view) and lets :func:`collapse` merge more.
    """
    first = strides_list[0]
    order = sorted(range(len(shape)), key=lambda d: -abs(first[d]))
    if order == list(range(len(shape))):
        return tuple(shape), [tuple(s) for s in strides_list]
    return tuple(shape[d] for d in order), [tuple(s[d] for d in order) for s in strides_list]


def split_outer(
    shape: Sequence[int], strides_list: Sequence[Sequence[int]], max_dims: int = MAX_DIMS
) -> Iterator[tuple[list[int], Shape, list[Strides]]]:
    """Cut a layout of more than ``max_dims`` dimensions into launches of ``max_dims``.

    Yields ``(byte offsets per operand, inner shape, inner strides)`` for every index of the
    leading ``ndim - max_dims`` dimensions (a single item with zero offsets when it fits).
    """
    nops = len(strides_list)
    lead = len(shape) - max_dims
    if lead <= 0:
        yield [0] * nops, tuple(shape), [tuple(s) for s in strides_list]
        return
    inner_shape = tuple(shape[lead:])
    inner = [tuple(s[lead:]) for s in strides_list]
    index = [0] * lead
    while True:
        yield [sum(i * s[d] for d, i in enumerate(index)) for s in strides_list], inner_shape, inner
        d = lead - 1
        while d >= 0:
            index[d] += 1
            if index[d] < shape[d]:
                break
            index[d] = 0
            d -= 1
        if d < 0:
            return


_dividers = _caches.PlanCache(
    "cuda.strided.dividers", 4096, "divisor -> its multiply-shift constants"
)


def fast_divider(d: int) -> tuple[int, int]:
    """``(magic, shift)`` with ``q = (umulhi(n, magic) + n) >> shift == n // d`` for ``n < 2**31``.

    ``d`` is in ``[1, 2**31]``. Example: ``fast_divider(1) == (1, 0)``.
    """
    cached = _dividers.get(d)
    if cached is not None:
        _dividers.hits += 1
    else:
        if not 1 <= d <= 2**31:
            raise ValueError(f"fast_divider: divisor must be in [1, 2**31], got {d}")
        shift = (d - 1).bit_length()  # smallest s with 2**s >= d
        magic = ((2**32 * (2**shift - d)) // d) + 1
        cached = _dividers.remember(d, (magic & 0xFFFFFFFF, shift))
    return cached  # type: ignore[no-any-return]


def is_contiguous(shape: Sequence[int], strides: Sequence[int], itemsize: int) -> bool:
    """Dense row-major layout (size-1 dimensions may have any stride)."""
    step = itemsize
    for d in range(len(shape) - 1, -1, -1):
        size = shape[d]
        if size != 1:
            if strides[d] != step:
                return False
            step *= size
    return True


def contiguous_strides(shape: Sequence[int], itemsize: int) -> Strides:
    """Row-major byte strides. Example: ``contiguous_strides((2, 3), 4) == (12, 4)``."""
    strides = [0] * len(shape)
    step = itemsize
    for d in range(len(shape) - 1, -1, -1):
        strides[d] = step
        step *= max(shape[d], 1)
    return tuple(strides)


class StridedPacker:
    """Packs a collapsed layout into ``ignis::ew::StridedArgs<narg>`` (``bytes``).

    Layout (little-endian, no padding): ``int64 sizes[8]; int64 strides[narg][8];
    uint32 magic[8]; uint32 shift[8]; int32 ndim; int32 reserved;`` with dimension 0 the
    innermost. Unused dimensions have size 1 and stride 0.
    """

    def __init__(self, narg: int):
        if not 1 <= narg <= 8:
            raise ValueError(f"StridedPacker: narg must be in [1, 8], got {narg}")
        self.narg = narg
        self._struct = struct.Struct(f"<{MAX_DIMS}q{MAX_DIMS * narg}q{MAX_DIMS}I{MAX_DIMS}Iii")
        self.size = self._struct.size

    def pack(self, shape: Sequence[int], strides_list: Sequence[Sequence[int]]) -> bytes:
        """The struct for ``shape`` (outermost first, at most 8 dims) and ``narg`` stride tuples."""
        ndim = len(shape)
        if ndim > MAX_DIMS:
            raise ValueError(
                f"StridedPacker: {ndim} dimensions, at most {MAX_DIMS} (use split_outer)"
            )
        if len(strides_list) != self.narg:
            raise ValueError(
                f"StridedPacker: expected {self.narg} stride tuples, got {len(strides_list)}"
            )
        pad = MAX_DIMS - ndim
        sizes = list(reversed(shape)) + [1] * pad
        values: list[int] = sizes[:]
        for s in strides_list:
            values.extend(reversed(s))
            values.extend([0] * pad)
        magics = []
        shifts = []
        for size in sizes:
            m, sh = fast_divider(size) if size <= 2**31 else (0, 0)
            magics.append(m)
            shifts.append(sh)
        values.extend(magics)
        values.extend(shifts)
        values.append(ndim)
        values.append(0)
        return self._struct.pack(*values)
