"""Elementwise hooks of the CUDA backend: unary, binary, where, copy (cast), fill, arange, random.

Every hook launches one kernel of ``cuda_src/elementwise.cu`` (``random.cu`` for random) on the
backend's current stream (or calls the driver's memcpy/memset), choosing between two layouts:

* **contiguous** — every array operand is dense with the output's shape; scalars are passed by
  value. ``*_contig<..., V>`` moves ``V`` elements per access: ``V = 16 //`` the widest element
  size when every pointer is aligned to its ``V * itemsize`` bytes (one 16-byte load or store
  for the widest operand), else 1.
* **broadcast** (binary only) — the output and one operand are dense and the other operand is
  a row repeated over the leading dims (``b`` of shape ``(N,)`` against ``(M, N)``) or a column
  held along the inner run (``(M, 1)`` against ``(M, N)``, or a single value):
  ``binary_bcast<..., SIDE, KIND, V>`` reads it with the contiguous kernels' vectors
  (:func:`broadcast_kind`), where the strided kernel would read element by element.
* **strided** — anything else (views, broadcasting, negative strides). Dimensions are put in the
  output's memory order and merged where every operand allows (:mod:`._strided`);
  ``*_strided<..., WIDE>`` gets shape and byte strides by value and divides 32-bit indices by
  magic numbers (``WIDE``: 64-bit division, for 2**31 elements or more). Layouts of more than 8
  dims after merging are split over several launches.

Instantiation scheme: one template instance per (op, work type ``W``, output type, operand types,
scalar form or broadcast side and kind, ``V`` or ``WIDE``), compiled lazily on first use (NVRTC,
then the disk cache) and kept in a dict keyed by plain Python objects (op and dtype names, ints),
so a repeated call costs one dict lookup before the launch. ``W`` is ``float`` for
float16/bfloat16 compute and the compute dtype's type otherwise; operands of another dtype are
converted to ``W`` while loading, and results are rounded once into the output dtype, exactly as
the CPU backend computes.

Same-dtype contiguous copies and contiguous fills (of 1-, 2- and 4-byte patterns) are driver
memcpy/memset calls and need no kernel. A copy that transposes (the destination dense along one
dimension, the source along another, as in ``x.T.contiguous()``) goes through 32 x 32 tiles in
shared memory (``copy_transpose``) so that reads and writes are both coalesced.

Example (what ``x + y`` does for two float32 arrays of 1000 elements)::

    binary(backend, "add", out, x, y, ignis.float32)
    # -> ignis::ew::binary_contig<ignis::ew::op_add, float, float, float, float, 0, 4>
    #    launched with grid 1, block 256, args [out, x, y, 0.0, 0.0, 1000]
"""

from __future__ import annotations

import math
import sys
from typing import TYPE_CHECKING, Any

import numpy as np

from ... import _caches, _tuning
from ... import _dtypes as dt
from ..._arg_packing import _F32_OVERFLOW
from ..._bindings import cu
from ..._device import activate
from ..._errors import DTypeError, ShapeError
from .._op_table import ELEMENTWISE
from .._semantics import BINARY_OPS, UNARY_OPS
from . import _strided
from ._kernels import CTYPE, library_kernel

if TYPE_CHECKING:
    from ..._kernel import Kernel
    from ..array import NvArray

__all__ = [
    "unary",
    "binary",
    "where",
    "copy",
    "fill",
    "arange",
    "random",
    "kernel_name",
    "broadcast_kind",
    "SOURCE",
    "RANDOM_SOURCE",
]

SOURCE = "elementwise.cu"
RANDOM_SOURCE = "random.cu"

BLOCK = 256  # threads per block
CONTIG_UNROLL = 2  # ignis::ew::contig_unroll: vectors in flight per thread
STRIDED_UNROLL = 4  # ignis::ew::strided_unroll: elements in flight per thread
BCAST_UNROLL = 4  # ignis::ew::bcast_unroll: vectors in flight per thread (binary_bcast)
ROW, COLUMN = 0, 1  # binary_bcast KIND: the broadcast operand is a repeated row / a held column
TRANSPOSE_BLOCK = (32, 8)  # copy_transpose: one 32 x 32 tile per block, 4 rows per thread
# The grid cap per multiprocessor and the shortest transposed dims of copy_transpose are the
# ``elementwise`` settings of ignis.tuning (blocks_per_sm, transpose_min). The paths of every
# op read no settings: what the settings chose (grid caps, prepared launches, transpose plans,
# the front end's direct functions) is remembered, and forgotten when they change.

# The C++ type an op computes in for each compute dtype, the conversion of a Python scalar
# operand to the value its scalar parameter gets, and the value passed for an unused one.
_WORK = dict(CTYPE)
_WORK[dt.float16] = _WORK[dt.bfloat16] = "float"


def _float32_scalar(value: Any) -> float:
    """A Python scalar for a ``float`` parameter, as NumPy's ``float32()`` casts it (and the
    CPU backend computes): beyond float32's range it becomes infinity, which the argument
    packer (rounding the rest to nearest-even) would refuse as a finite value that overflows.

    Example: ``_float32_scalar(1e39)`` -> ``inf``; ``_float32_scalar(0.1)`` -> ``0.1``.
    """
    x = float(value)
    if -_F32_OVERFLOW < x < _F32_OVERFLOW or x != x:  # (NaN compares false: passed as is)
        return x
    return math.copysign(math.inf, x)


def _scalar_conversion(d: dt.DType) -> Any:
    if d.kind == "b":
        return bool
    if d.kind == "c":
        # A complex W parameter is a struct: the packer takes the NumPy scalar's 8 or 16 bytes
        # (re, im), the layout of ignis::complex64 / complex128.
        return d.numpy.type
    if d.kind != "f":
        return int  # (the front end has checked that a Python int fits the dtype)
    return _float32_scalar if _WORK[d] == "float" else float


_SCALAR = {d: _scalar_conversion(d) for d in dt.every_dtype}
_ZERO = {
    d: {"b": False, "f": 0.0}.get(d.kind, 0) if d.kind != "c" else d.numpy.type(0)
    for d in dt.every_dtype
}
# The same tables keyed by dtype name: DType.__hash__ is a Python method, a str hashes for free.
# Kernel cache keys hold names for the same reason.
_SCALAR_N = {d.name: t for d, t in _SCALAR.items()}
_ZERO_N = {d.name: z for d, z in _ZERO.items()}
_UINT = {1: "ignis::uint8", 2: "ignis::uint16", 4: "ignis::uint32", 8: "ignis::uint64"}
_UINT_NP = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}

# The functors of the op table's ops (cuda_src/elementwise.cuh): one per op, or, where an
# option chooses it (gelu's approximate), one per value of that option.
_UNARY_FUNCTOR = {
    n: f"ignis::ew::{op.functor}"
    for n, op in ELEMENTWISE.items()
    if op.arity == 1 and isinstance(op.functor, str)
}
_CHOSEN_FUNCTOR = {
    n: (next(iter(op.params)), {v: f"ignis::ew::{f}" for v, f in op.functor.items()})
    for n, op in ELEMENTWISE.items()
    if op.arity == 1 and not isinstance(op.functor, str)
}
_BINARY_FUNCTOR = {
    n: f"ignis::ew::{op.functor}" for n, op in ELEMENTWISE.items() if op.arity == 2
}

_SCALARS = frozenset((bool, int, float, complex))
_PACKERS = {n: _strided.StridedPacker(n) for n in (1, 2, 3, 4)}
_CACHE_LIMIT = 1024  # entries of each layout cache before it starts over

# Compiled kernels by (family, template arguments as names and ints, device ordinal). The fast
# paths of dense element-wise ops also find here, under keys that end in the element count, the
# prepared launch (Kernel._prepared) of a kernel and its grid: for binary_contig with array
# operands of the output's dtype, (op, compute name, dtype name, form, V, ordinal, n); for
# unary_contig, (functor, compute name, dtype name, operand dtype name, V, ordinal, n).
# (Lookups are uncounted: they are the path of every op.)
_FAST_LIMIT = 1024
_kernels = _caches.PlanCache(
    "cuda.elementwise.kernels",
    _FAST_LIMIT,
    "element-wise op, dtypes and vector width -> kernel; and its prepared launches",
)
_fast_keys: list[tuple[Any, ...]] = []  # the keys of the prepared launches, oldest first
_grid_caps = _caches.PlanCache(
    "cuda.elementwise.grid_caps", 64, "device -> the most blocks of an element-wise grid"
)
_layouts = _caches.PlanCache(
    "cuda.elementwise.layouts", _CACHE_LIMIT, "operand layouts -> merged dims and strides"
)
_contiguous_strides = _caches.PlanCache(
    "cuda.elementwise.contiguous_strides", _CACHE_LIMIT, "(shape, itemsize) -> strides"
)
_fill_bits = _caches.PlanCache(
    "cuda.elementwise.fill_bits", _CACHE_LIMIT, "fill value and dtype -> its bit pattern"
)
_bcast_plans = _caches.PlanCache(
    "cuda.elementwise.broadcast_plans", _CACHE_LIMIT, "broadcast layouts -> row/column plan"
)
# The lookups of the paths of every op, as bound methods: a module global and a C call, no
# attribute lookup on the cache (it is a dict subclass). The caches are emptied in place, never
# replaced, so these stay bound to them.
_kernels_get = _kernels.get
_grid_caps_get = _grid_caps.get
_contiguous_strides_get = _contiguous_strides.get
_layouts_get = _layouts.get
_bcast_plans_get = _bcast_plans.get
_UNSEEN: Any = object()


def _clear_kernels() -> None:
    _kernels.reset()
    _fast_keys.clear()


# Kernels are bounded by the program, prepared launches by _FAST_LIMIT (see _remember_fast):
# emptying the cache also forgets the keys of the prepared launches. The lookups of these
# caches are the path of every op: uncounted (registered without hit and miss counts).
for _cache, _clear in (
    (_kernels, _clear_kernels),
    (_grid_caps, _grid_caps.reset),
    (_layouts, _layouts.reset),
    (_contiguous_strides, _contiguous_strides.reset),
    (_bcast_plans, _bcast_plans.reset),
):
    _caches.register(
        _cache.name,
        _cache,
        clear=_clear,
        max_entries=_cache.max_entries,
        description=_cache.description,
    )


def _forget_settings() -> None:
    """The elementwise settings changed: forget what they chose. Grid caps, the prepared
    launches (their grids) and transpose plans are made again on next use; so are the front
    end's direct functions of element-wise ops, which hold their grids."""
    _grid_caps.reset()
    _layouts.reset()
    for key in _fast_keys:
        _kernels.pop(key, None)
    _fast_keys.clear()
    # (by their registered names: the front end's plan caches are its own)
    _caches.clear_caches("ops.unary_plans", "ops.binary_plans")


_tuning.on_change("elementwise", _forget_settings)


# --- names ---------------------------------------------------------------------------------------


def kernel_name(family: str, *args: Any) -> str:
    """The C++ name expression of one kernel instance (pure: usable without a GPU).

    ``family`` is ``unary_contig``, ``binary_strided``, ``copy_contig``, ``uniform``, ... and
    ``args`` its template arguments (strings, ints, bools), e.g.
    ``kernel_name("binary_contig", "ignis::ew::op_add", "float", "float", "float", "float", 0, 4)``.
    """
    ns = "ignis::rng::" if family in ("uniform", "normal", "integers") else "ignis::ew::"
    parts = [("true" if a else "false") if isinstance(a, bool) else str(a) for a in args]
    return f"{ns}{family}<{', '.join(parts)}>"


# --- helpers -------------------------------------------------------------------------------------


def _kernel(
    backend: Any, key: tuple[Any, ...], source: str, family: str, args: tuple[Any, ...]
) -> Kernel:
    """The kernel for ``key`` (which includes the device ordinal), compiled on first use."""
    kernel = _kernels_get(key)
    if kernel is None:
        kernel = library_kernel(source, kernel_name(family, *args), backend.gpu)
        _kernels[key] = kernel  # (not remember(): kernels are bounded by the program)
    return kernel


def _remember_fast(key: tuple[Any, ...], backend: Any, kernel: Kernel, grid: int) -> None:
    """Keep ``kernel``'s prepared launch of ``grid`` blocks under ``key`` in ``_kernels`` for a
    fast path (the first launch went through ``kernel.launch``, which validated everything).
    At most ``_FAST_LIMIT`` of them: sizes that keep changing start the set over."""
    if any(isinstance(k, str) and k.startswith("complex") for k in key):
        return  # (its scalars are complex structs, raw bytes the prepared launch does not convert)
    launch = kernel._prepared(backend.gpu, grid, BLOCK)
    if launch is None:
        return
    if len(_fast_keys) >= _FAST_LIMIT:
        for old in _fast_keys:
            _kernels.pop(old, None)
        _fast_keys.clear()
    _kernels[key] = launch
    _fast_keys.append(key)


def _grid_cap(backend: Any) -> int:
    """The most blocks a grid gets on the backend's device: its multiprocessors times the
    ``blocks_per_sm`` setting (a few waves; remembered until the settings change)."""
    ordinal = backend.gpu.ordinal
    cap = _grid_caps_get(ordinal)
    if cap is None:
        per_sm = _tuning.current.elementwise.blocks_per_sm
        cap = _grid_caps.remember(ordinal, max(1, int(backend.gpu.multiprocessor_count)) * per_sm)
    return cap  # type: ignore[no-any-return]


def _grid(backend: Any, items: int, per_block: int) -> int:
    """Blocks for ``items`` work items, ``per_block`` per block: at least 1, at most a few waves."""
    cap = _grid_caps_get(backend.gpu.ordinal) or _grid_cap(backend)
    blocks = (items + per_block - 1) // per_block
    return 1 if blocks < 1 else (blocks if blocks < cap else cap)


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _ptr(arr: NvArray) -> int:
    return arr._storage.ptr + arr._offset


def _dense(arr: NvArray) -> bool:
    """Dense row-major layout (the common cases in one comparison)."""
    shape, strides, size = arr._shape, arr._strides, arr._dtype.itemsize
    if len(shape) == 1:
        return strides[0] == size or shape[0] == 1
    key = (shape, size)
    expected = _contiguous_strides_get(key)
    if expected is None:
        expected = _contiguous_strides.remember(key, _strided.contiguous_strides(shape, size))
    return strides == expected or _strided.is_contiguous(shape, strides, size)


def _plan(arrays: list[NvArray]) -> int:
    """0 when some array is not dense (strided path); else the contiguous kernels' elements per
    access: 16 bytes of the widest element type when every pointer is aligned to its share of
    that, else 1."""
    widest = 1
    for x in arrays:
        shape = x._shape
        size = x._dtype.itemsize
        if len(shape) == 1:  # the common case, inline
            if x._strides[0] != size and shape[0] != 1:
                return 0
        elif not _dense(x):
            return 0
        if size > widest:
            widest = size
    v = 16 // widest
    for x in arrays:
        if (x._storage.ptr + x._offset) % (v * x._dtype.itemsize):
            return 1
    return v


def _width(out: NvArray, po: int, x: NvArray, px: int, y: NvArray | None, py: int) -> int:
    """:func:`_plan` for ``out`` and one or two operands (``y`` None: one), without building a
    list: the path of every unary and binary op. ``po``, ``px``, ``py`` are the first-element
    addresses. An operand with ``out``'s strides and element size is dense exactly when ``out``
    is (operands have ``out``'s shape), which spares the layout check in the common case."""
    shape = out._shape
    strides = out._strides
    size = out._dtype.itemsize
    if len(shape) == 1:
        if strides[0] != size and shape[0] != 1:
            return 0
    elif not _dense(out):
        return 0
    widest = size
    xs = x._dtype.itemsize
    if xs != size or x._strides != strides:
        if not _dense(x):
            return 0
        if xs > widest:
            widest = xs
    ys = 0
    if y is not None:
        ys = y._dtype.itemsize
        if ys != size or y._strides != strides:
            if not _dense(y):
                return 0
            if ys > widest:
                widest = ys
    v = 16 // widest
    if po % (v * size) or px % (v * xs) or (ys and py % (v * ys)):
        return 1
    return v


def _contig_grid(backend: Any, ordinal: int, n: int, v: int) -> int:
    """``_grid(backend, n // v, BLOCK * CONTIG_UNROLL)`` with the cap looked up inline."""
    cap = _grid_caps_get(ordinal) or _grid_cap(backend)
    blocks = (n // v + (BLOCK * CONTIG_UNROLL - 1)) // (BLOCK * CONTIG_UNROLL)
    return 1 if blocks < 1 else (blocks if blocks < cap else cap)


def broadcast_kind(
    shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int
) -> tuple[int, int] | None:
    """``(kind, inner)`` when an operand of ``shape`` (the output's, C-contiguous) with byte
    ``strides`` is one that ``binary_bcast`` reads directly, else None (pure: no GPU needed):

    * ``(ROW, inner)``: zero strides on some leading dims and dense over the rest, e.g. ``b`` of
      shape ``(N,)`` broadcast to ``(M, N)``: element ``i`` of the output reads ``b[i % inner]``;
    * ``(COLUMN, inner)``: dense over some leading dims and zero strides on the rest, e.g. ``b``
      of shape ``(M, 1)`` broadcast to ``(M, N)``, or a single value (``inner`` is then the whole
      size): element ``i`` reads ``b[i // inner]``.

    Dims of size 1 are ignored (any stride). A dense operand or any other layout gives None.

    >>> broadcast_kind((4, 3), (0, 4), 4), broadcast_kind((4, 3), (4, 0), 4)
    ((0, 3), (1, 3))
    """
    dims = [(n, st) for n, st in zip(shape, strides, strict=True) if n != 1]
    if not dims:
        return None  # one element: the contiguous kernels take it
    zero = [st == 0 for _, st in dims]
    lead = 0
    while lead < len(dims) and zero[lead]:
        lead += 1
    if lead == len(dims):
        return (COLUMN, _numel(shape))
    if lead and not any(zero[lead:]) and _packed(dims[lead:], itemsize):
        return (ROW, _numel(tuple(n for n, _ in dims[lead:])))
    dense = len(dims)
    while zero[dense - 1]:
        dense -= 1
    if dense < len(dims) and not any(zero[:dense]) and _packed(dims[:dense], itemsize):
        return (COLUMN, _numel(tuple(n for n, _ in dims[dense:])))
    return None


def _packed(dims: list[tuple[int, int]], itemsize: int) -> bool:
    """True when ``(size, byte stride)`` dims are row-major dense with no gaps."""
    expected = itemsize
    for n, st in reversed(dims):
        if st != expected:
            return False
        expected *= n
    return True


def _bcast_plan(out: NvArray, a: NvArray, b: NvArray) -> tuple[int, int, int] | None:
    """``(side, kind, inner)`` for ``binary_bcast`` when ``out`` and one operand are dense and the
    other is a row or column broadcast (:func:`broadcast_kind`); side 1: ``a`` is the broadcast
    one, 2: ``b`` is. None: the strided kernel. Remembered per layout."""
    key = (
        out._shape,
        out._strides,
        a._strides,
        b._strides,
        out._dtype.itemsize,
        a._dtype.itemsize,
        b._dtype.itemsize,
    )
    plan = _bcast_plans_get(key, _UNSEEN)
    if plan is not _UNSEEN:
        return plan  # type: ignore[no-any-return]
    plan = None
    if _dense(out):
        for side, dense, other in ((2, a, b), (1, b, a)):
            if _dense(dense):
                found = broadcast_kind(out._shape, other._strides, other._dtype.itemsize)
                if found is not None:
                    plan = (side, *found)
                break
    _bcast_plans.remember(key, plan)
    return plan


def _layout(shape: tuple[int, ...], strides_list: list[tuple[int, ...]]) -> tuple[Any, ...]:
    """``(pieces, n, wide)`` for a strided launch: ``pieces`` lists ``(byte offsets per operand,
    packed StridedArgs)``, one launch each (one piece unless more than 8 dims remain after
    merging); ``n`` is the element count of each piece."""
    key = (shape, *strides_list)
    hit = _layouts_get(key)
    if hit is not None:
        return hit
    s_shape, s_strides = _strided.sort_by_first(shape, strides_list)
    c_shape, c_strides = _strided.collapse(s_shape, s_strides)
    packer = _PACKERS[len(strides_list)]
    pieces = []
    inner_n = 1
    for offsets, sub_shape, sub_strides in _strided.split_outer(c_shape, c_strides):
        pieces.append((offsets, packer.pack(sub_shape, sub_strides)))
        inner_n = _numel(sub_shape)
    result = (tuple(pieces), inner_n, inner_n >= _strided.WIDE_INDEX)
    _layouts.remember(key, result)
    return result


def _launch_strided(
    backend: Any, kernel: Kernel, ptrs: list[int], values: list[Any], layout: tuple[Any, ...]
) -> None:
    """Launch ``kernel(ptrs..., values..., n, StridedArgs)`` once per piece of ``layout``.

    ``ptrs`` are the operands' first-element addresses (0 for scalar operands, whose strides are
    zero here so their offsets stay 0)."""
    pieces, n, _wide = layout
    grid = _grid(backend, n, BLOCK * STRIDED_UNROLL)
    stream = backend.stream
    for offsets, packed in pieces:
        args: list[Any] = [p + o if p else 0 for p, o in zip(ptrs, offsets, strict=True)]
        args.extend(values)
        args.append(n)
        args.append(packed)
        kernel.launch(grid, BLOCK, args, stream=stream)


# --- the dense kernels (also prepared by the direct functions, see direct.py) -------------------


def unary_contig_kernel(
    backend: Any, functor: str, compute: dt.DType, od: dt.DType, xd: dt.DType, v: int
) -> Kernel:
    """The ``unary_contig`` kernel of ``functor`` computing in ``compute``, writing ``od`` from
    ``xd``, ``v`` elements a vector, on the backend's device (compiled on first use)."""
    key = ("unary", functor, compute.name, od.name, xd.name, v, backend.gpu.ordinal)
    kernel = _kernels_get(key)
    if kernel is None:
        args = (functor, _WORK[compute], CTYPE[od], CTYPE[xd], v)
        kernel = _kernel(backend, key, SOURCE, "unary_contig", args)
    return kernel


def binary_contig_kernel(
    backend: Any,
    op: str,
    compute: dt.DType,
    od: dt.DType,
    ta: dt.DType | None,
    tb: dt.DType | None,
    form: int,
    v: int,
) -> Kernel:
    """The ``binary_contig`` kernel of ``op`` computing in ``compute``, writing ``od`` from
    operands of dtypes ``ta`` and ``tb`` (None: the scalar of ``form`` 1 or 2), ``v`` elements
    a vector, on the backend's device (compiled on first use)."""
    ka, kb = (None if ta is None else ta.name), (None if tb is None else tb.name)
    key = ("binary", op, compute.name, od.name, ka, kb, form, v, backend.gpu.ordinal)
    kernel = _kernels_get(key)
    if kernel is None:
        w = _WORK[compute]
        ca, cb = (CTYPE[ta] if ta else w), (CTYPE[tb] if tb else w)
        args = (_BINARY_FUNCTOR[op], w, CTYPE[od], ca, cb, form, v)
        kernel = _kernel(backend, key, SOURCE, "binary_contig", args)
    return kernel


# --- unary ---------------------------------------------------------------------------------------


def unary(
    backend: Any, op: str, out: NvArray, x: NvArray, compute: dt.DType, params: dict[str, Any]
) -> None:
    """``out = op(x)`` for an op of ``_semantics.UNARY_OPS`` (see :meth:`Backend.unary`)."""
    functor = _UNARY_FUNCTOR.get(op)
    if functor is None:
        if op not in _CHOSEN_FUNCTOR:
            raise ValueError(f"unary: unknown op {op!r}; expected one of {sorted(UNARY_OPS)}")
        option, functors = _CHOSEN_FUNCTOR[op]
        value = params.get(option, ELEMENTWISE[op].params[option][0])
        functor = functors[ELEMENTWISE[op].check_param(option, value)]
    shape = out._shape
    n = shape[0] if len(shape) == 1 else _numel(shape)
    if n == 0:
        return
    od, xd = out._dtype, x._dtype
    ordinal = backend.gpu.ordinal
    po = out._storage.ptr + out._offset
    px = x._storage.ptr + x._offset
    v = _width(out, po, x, px, None, 0)
    if v:
        launch = _kernels_get((functor, compute.name, od.name, xd.name, v, ordinal, n))
        if launch is not None:
            launch(backend.stream, po, px, n)
            return
        kernel = unary_contig_kernel(backend, functor, compute, od, xd, v)
        grid = _contig_grid(backend, ordinal, n, v)
        kernel.launch(grid, BLOCK, [po, px, n], stream=backend.stream)
        key = (functor, compute.name, od.name, xd.name, v, ordinal, n)
        _remember_fast(key, backend, kernel, grid)
        return
    layout = _layout(shape, [out._strides, x._strides])
    wide = layout[2]
    key = ("unary_s", functor, compute.name, od.name, xd.name, wide, ordinal)
    kernel = _kernels_get(key) or _kernel(
        backend,
        key,
        SOURCE,
        "unary_strided",
        (functor, _WORK[compute], CTYPE[od], CTYPE[xd], wide),
    )
    _launch_strided(backend, kernel, [_ptr(out), _ptr(x)], [], layout)


# --- binary --------------------------------------------------------------------------------------


def binary(backend: Any, op: str, out: NvArray, a: Any, b: Any, compute: dt.DType) -> None:
    """``out = op(a, b)`` for an op of ``_semantics.BINARY_OPS``; ``a`` or ``b`` may be a Python
    scalar (see :meth:`Backend.binary`)."""
    shape = out._shape
    # The path of ``x + y`` and ``x * 2.0``: array operands of out's dtype and strides, dense,
    # whose kernel exists. _width's answer is one test (every address on a 16-byte boundary:
    # vectors), the key short. Anything else, and the first call, takes the general path.
    if a.__class__ in _SCALARS:
        form, x, y = 1, (None if b.__class__ in _SCALARS else b), None
    elif b.__class__ in _SCALARS:
        form, x, y = 2, a, None
    else:
        form, x, y = 0, a, b
    od = out._dtype
    strides = out._strides
    if (
        x is not None
        and x._dtype is od
        and x._strides == strides
        and (y is None or (y._dtype is od and y._strides == strides))
        and ((strides[0] == od.itemsize) if len(shape) == 1 else _dense(out))
    ):
        n = shape[0] if len(shape) == 1 else _numel(shape)
        po = out._storage.ptr + out._offset
        px = x._storage.ptr + x._offset
        py = 0 if y is None else y._storage.ptr + y._offset
        v = 1 if (po | px | py) & 15 else 16 // od.itemsize
        cname = compute.name
        launch = _kernels_get((op, cname, od.name, form, v, backend.gpu.ordinal, n))
        if launch is not None:
            zero = _ZERO_N[cname]
            if form == 0:
                launch(backend.stream, po, px, py, zero, zero, n)
            elif form == 1:
                launch(backend.stream, po, 0, px, _SCALAR_N[cname](a), zero, n)
            else:
                launch(backend.stream, po, px, 0, zero, _SCALAR_N[cname](b), n)
            return
    functor = _BINARY_FUNCTOR.get(op)
    if functor is None:
        raise ValueError(f"binary: unknown op {op!r}; expected one of {list(BINARY_OPS)}")
    n = shape[0] if len(shape) == 1 else _numel(shape)
    if n == 0:
        return
    a_value = a.__class__ in _SCALARS
    b_value = b.__class__ in _SCALARS
    cname = compute.name
    zero = _ZERO_N[cname]
    po = out._storage.ptr + out._offset
    if not (a_value or b_value):  # two arrays, the path of ``x + y``
        form, ta, tb = 0, a._dtype, b._dtype
        sa, sb, pa, pb = zero, zero, a._storage.ptr + a._offset, b._storage.ptr + b._offset
        v = _width(out, po, a, pa, b, pb)
    elif a_value:
        if b_value:
            raise TypeError(f"{op}: at least one operand must be an array, got two scalars")
        form, ta, tb = 1, None, b._dtype
        sa, sb, pa, pb = _SCALAR_N[cname](a), zero, 0, b._storage.ptr + b._offset
        v = _width(out, po, b, pb, None, 0)
    else:
        form, ta, tb = 2, a._dtype, None
        sa, sb, pa, pb = zero, _SCALAR_N[cname](b), a._storage.ptr + a._offset, 0
        v = _width(out, po, a, pa, None, 0)
    od = out._dtype
    ordinal = backend.gpu.ordinal
    if v:
        kernel = binary_contig_kernel(backend, op, compute, od, ta, tb, form, v)
        grid = _contig_grid(backend, ordinal, n, v)
        kernel.launch(grid, BLOCK, [po, pa, pb, sa, sb, n], stream=backend.stream)
        if (ta is od or ta is None) and (tb is od or tb is None):
            _remember_fast((op, cname, od.name, form, v, ordinal, n), backend, kernel, grid)
        return
    if not form:
        plan = _bcast_plan(out, a, b)
        if plan is not None:
            _binary_bcast(backend, op, functor, out, po, a, pa, b, pb, compute, plan)
            return
    zeros = (0,) * len(shape)
    layout = _layout(
        shape, [out._strides, zeros if a_value else a._strides, zeros if b_value else b._strides]
    )
    wide = layout[2]
    key = ("binary_s", op, cname, od.name, ta and ta.name, tb and tb.name, form, wide, ordinal)
    kernel = _kernels_get(key)
    if kernel is None:
        w = _WORK[compute]
        kernel = _kernel(
            backend,
            key,
            SOURCE,
            "binary_strided",
            (functor, w, CTYPE[od], CTYPE[ta] if ta else w, CTYPE[tb] if tb else w, form, wide),
        )
    _launch_strided(backend, kernel, [_ptr(out), pa, pb], [sa, sb], layout)


def _binary_bcast(
    backend: Any,
    op: str,
    functor: str,
    out: NvArray,
    po: int,
    a: NvArray,
    pa: int,
    b: NvArray,
    pb: int,
    compute: dt.DType,
    plan: tuple[int, int, int],
) -> None:
    """Launch ``binary_bcast`` for ``out = op(a, b)`` laid out as ``plan`` (:func:`_bcast_plan`).

    16-byte vectors (``V`` elements of the widest type) when the run length is a multiple of
    ``V`` and the output, the dense operand and a row operand are aligned to their share of a
    vector (a column operand is read one value at a time); else the same kernel with ``V = 1``.
    """
    side, kind, inner = plan
    od, ad, bd = out._dtype, a._dtype, b._dtype
    so, sa, sb = od.itemsize, ad.itemsize, bd.itemsize
    v = 16 // max(so, sa, sb)
    if (
        inner % v
        or po % (v * so)
        or ((side == 2 or kind == ROW) and pa % (v * sa))
        or ((side == 1 or kind == ROW) and pb % (v * sb))
    ):
        v = 1
    shape = out._shape
    n = shape[0] if len(shape) == 1 else _numel(shape)
    ordinal = backend.gpu.ordinal
    key = ("binary_b", op, compute.name, od.name, ad.name, bd.name, side, kind, v, ordinal)
    kernel = _kernels_get(key)
    if kernel is None:
        targs = (functor, _WORK[compute], CTYPE[od], CTYPE[ad], CTYPE[bd], side, kind, v)
        kernel = _kernel(backend, key, SOURCE, "binary_bcast", targs)
    grid = _grid(backend, n // v, BLOCK * BCAST_UNROLL)
    kernel.launch(grid, BLOCK, [po, pa, pb, n, inner], stream=backend.stream)


# --- where ---------------------------------------------------------------------------------------


def where(backend: Any, out: NvArray, cond: Any, a: Any, b: Any, compute: dt.DType) -> None:
    """``out = cond ? a : b`` where ``cond`` is any dtype, nonzero (or NaN) meaning true; any of
    the three may be a Python scalar (see :meth:`Backend.where`)."""
    shape = out._shape
    n = _numel(shape)
    if n == 0:
        return
    cname = compute.name
    work = _WORK[compute]
    pytype = _SCALAR_N[cname]
    zero = _ZERO_N[cname]
    operands = ((cond, bool, False), (a, pytype, zero), (b, pytype, zero))
    forms = 0
    arrays = [out]
    ptrs = [_ptr(out)]
    values: list[Any] = []
    types: list[str] = []
    key_types: list[Any] = []
    for bit, (x, convert, unused) in enumerate(operands):
        if x.__class__ in _SCALARS:
            forms |= 1 << bit
            ptrs.append(0)
            values.append(convert(x))
            types.append("bool" if bit == 0 else work)
            key_types.append(None)
        else:
            arrays.append(x)
            ptrs.append(_ptr(x))
            values.append(unused)
            types.append(CTYPE[x._dtype])
            key_types.append(x._dtype.name)
    od = out._dtype
    ordinal = backend.gpu.ordinal
    v = _plan(arrays)
    if v:
        key = ("where", cname, od.name, *key_types, forms, v, ordinal)
        kernel = _kernels_get(key) or _kernel(
            backend, key, SOURCE, "where_contig", (work, CTYPE[od], *types, forms, v)
        )
        kernel.launch(
            _grid(backend, n // v, BLOCK * CONTIG_UNROLL),
            BLOCK,
            ptrs + values + [n],
            stream=backend.stream,
        )
        return
    zeros = (0,) * len(shape)
    strides = [out._strides] + [
        zeros if t is None else x._strides for t, (x, _, _) in zip(key_types, operands, strict=True)
    ]
    layout = _layout(shape, strides)
    wide = layout[2]
    key = ("where_s", cname, od.name, *key_types, forms, wide, ordinal)
    kernel = _kernels_get(key) or _kernel(
        backend, key, SOURCE, "where_strided", (work, CTYPE[od], *types, forms, wide)
    )
    _launch_strided(backend, kernel, ptrs, values, layout)


# --- copy / cast ---------------------------------------------------------------------------------


def copy(backend: Any, dst: NvArray, src: NvArray) -> None:
    """``dst[...] = src`` converting the dtype as NumPy's ``astype`` does; ``src`` has ``dst``'s
    shape, possibly through zero (broadcast) strides. Used for ``contiguous``, ``astype``,
    ``copy_`` and device-to-device ``to``."""
    shape = dst._shape
    if src._shape != shape:
        raise ShapeError(f"copy: source shape {src._shape} differs from destination shape {shape}")
    n = shape[0] if len(shape) == 1 else _numel(shape)
    if n == 0:
        return
    od, sd = dst._dtype, src._dtype
    ordinal = backend.gpu.ordinal
    pd = dst._storage.ptr + dst._offset
    ps = src._storage.ptr + src._offset
    v = _width(dst, pd, src, ps, None, 0)
    if v:
        if od is sd:
            if pd != ps:  # else: the identical view, nothing to do
                stream = backend.stream
                activate(backend.gpu)
                cu.cuMemcpyDtoDAsync(pd, ps, n * od.itemsize, stream.handle)
            return
        key = ("copy", od.name, sd.name, v, ordinal)
        kernel = _kernels_get(key) or _kernel(
            backend, key, SOURCE, "copy_contig", (CTYPE[od], CTYPE[sd], v)
        )
        kernel.launch(
            _contig_grid(backend, ordinal, n, v), BLOCK, [pd, ps, n], stream=backend.stream
        )
        return
    plan = _transpose_plan(shape, dst._strides, src._strides, od.itemsize, sd.itemsize)
    if plan is not None:
        key = ("copy_t", od.name, sd.name, ordinal)
        kernel = _kernels_get(key) or _kernel(
            backend, key, SOURCE, "copy_transpose", (CTYPE[od], CTYPE[sd])
        )
        rows, cols, batches = plan[:3]
        grid = (
            min((rows + 31) // 32, 2**31 - 1),
            min((cols + 31) // 32, 65535),
            min(batches, 65535),
        )
        kernel.launch(grid, TRANSPOSE_BLOCK, [_ptr(dst), _ptr(src), *plan], stream=backend.stream)
        return
    layout = _layout(shape, [dst._strides, src._strides])
    wide = layout[2]
    key = ("copy_s", od.name, sd.name, wide, ordinal)
    kernel = _kernels_get(key) or _kernel(
        backend, key, SOURCE, "copy_strided", (CTYPE[od], CTYPE[sd], wide)
    )
    _launch_strided(backend, kernel, [_ptr(dst), _ptr(src)], [], layout)


def _transpose_plan(
    shape: tuple[int, ...], dst: tuple[int, ...], src: tuple[int, ...], so: int, ss: int
) -> tuple[int, ...] | None:
    """``(rows, cols, batches, dst row stride, src column stride, dst batch stride, src batch
    stride)`` for ``copy_transpose`` when, after merging, the copy is a (batched) transpose worth
    tiles: ``dst`` dense along its innermost dim ("cols"), ``src`` dense along another ("rows"),
    at most one more dim ("batches"); else None."""
    key = ("transpose", shape, dst, src, so, ss)
    if key in _layouts:
        return _layouts[key]  # type: ignore[no-any-return]
    s_shape, s_strides = _strided.sort_by_first(shape, [dst, src])
    c_shape, (cd, cs) = _strided.collapse(s_shape, s_strides)
    plan = None
    ndim = len(c_shape)
    least = _tuning.current.elementwise.transpose_min
    rows = [k for k in range(ndim - 1) if cs[k] == ss and c_shape[k] >= least]
    if ndim in (2, 3) and rows and cd[-1] == so and c_shape[-1] >= least:
        k = rows[-1]
        b = 1 - k if ndim == 3 else None  # the remaining dim, if any
        plan = (
            c_shape[k],
            c_shape[-1],
            1 if b is None else c_shape[b],
            cd[k],
            cs[-1],
            0 if b is None else cd[b],
            0 if b is None else cs[b],
        )
    _layouts.remember(key, plan)
    return plan


# --- fill ----------------------------------------------------------------------------------------


def _bits_of(value: Any, dtype: dt.DType) -> int:
    """The element bits of ``value`` stored into ``dtype``, exactly as the CPU backend stores it."""
    key = (dtype.name, value.hex() if isinstance(value, float) else (type(value), value))
    bits = _fill_bits.get(key)
    if bits is not None:
        _fill_bits.hits += 1
    else:
        cell = np.empty((), dtype.numpy)
        with np.errstate(all="ignore"):
            cell[...] = value
        bits = _fill_bits.remember(key, int(cell.view(_UINT_NP[dtype.itemsize])))
    return bits  # type: ignore[no-any-return]


def fill(backend: Any, dst: NvArray, value: Any) -> None:
    """Set every element of ``dst`` to ``value`` (a Python scalar that fits ``dst.dtype``)."""
    if value.__class__ not in _SCALARS:
        if isinstance(value, (np.generic, np.ndarray)) and np.ndim(value) == 0:
            value = value.item()
        else:
            raise DTypeError(
                f"fill: expected a Python bool, int or float, got {type(value).__name__}"
            )
    shape = dst._shape
    n = _numel(shape)
    if n == 0:
        return
    dtype = dst._dtype
    size = dtype.itemsize
    if size == 16:  # complex128: the element itself is the pattern (no 16-byte integer)
        _fill_complex128(backend, dst, complex(value))
        return
    bits = _bits_of(value, dtype)
    ordinal = backend.gpu.ordinal
    if _dense(dst):
        stream = backend.stream
        ptr = _ptr(dst)
        if size == 8 and (bits >> 32) == (bits & 0xFFFFFFFF):  # e.g. 0: a 4-byte pattern
            size, n, bits = 4, 2 * n, bits & 0xFFFFFFFF
        if size == 8:
            key = ("fill", size, ordinal)
            kernel = _kernels_get(key) or _kernel(
                backend, key, SOURCE, "fill_contig", (_UINT[size],)
            )
            kernel.launch(_grid(backend, n, BLOCK), BLOCK, [ptr, bits, n], stream=stream)
            return
        activate(backend.gpu)
        if size == 1:
            cu.cuMemsetD8Async(ptr, bits, n, stream.handle)
        elif size == 2:
            cu.cuMemsetD16Async(ptr, bits, n, stream.handle)
        else:
            cu.cuMemsetD32Async(ptr, bits, n, stream.handle)
        return
    layout = _layout(shape, [dst._strides])
    wide = layout[2]
    key = ("fill_s", size, wide, ordinal)
    kernel = _kernels_get(key) or _kernel(backend, key, SOURCE, "fill_strided", (_UINT[size], wide))
    _launch_strided(backend, kernel, [_ptr(dst)], [bits], layout)


def _fill_complex128(backend: Any, dst: NvArray, value: complex) -> None:
    """:func:`fill` of a complex128 array: ``fill_*<ignis::complex128>`` with the value's 16
    bytes (zero, the common case, is a 4-byte memset)."""
    n = _numel(dst._shape)
    ordinal = backend.gpu.ordinal
    pattern = np.complex128(value)
    if _dense(dst):
        if value == 0 and not np.signbit(pattern.real) and not np.signbit(pattern.imag):
            activate(backend.gpu)
            cu.cuMemsetD32Async(_ptr(dst), 0, 4 * n, backend.stream.handle)
            return
        key = ("fill", 16, ordinal)
        kernel = _kernels_get(key) or _kernel(
            backend, key, SOURCE, "fill_contig", ("ignis::complex128",)
        )
        grid = _grid(backend, n, BLOCK)
        kernel.launch(grid, BLOCK, [_ptr(dst), pattern, n], stream=backend.stream)
        return
    layout = _layout(dst._shape, [dst._strides])
    wide = layout[2]
    key = ("fill_s", 16, wide, ordinal)
    kernel = _kernels_get(key) or _kernel(
        backend, key, SOURCE, "fill_strided", ("ignis::complex128", wide)
    )
    _launch_strided(backend, kernel, [_ptr(dst)], [pattern], layout)


# --- arange --------------------------------------------------------------------------------------


def arange(backend: Any, out: NvArray, start: float, step: float) -> None:
    """``out[i] = start + i * step`` for 1-D ``out``: in float64 with two roundings (no FMA) for
    floating dtypes, in int64 with wrap-around for the others, then converted like ``astype``
    (the host reference of :meth:`Backend.arange`, bit for bit)."""
    if len(out._shape) != 1:
        raise ShapeError(f"arange: the output must be 1-D, got shape {out._shape}")
    n = out._shape[0]
    if n == 0:
        return
    if not _dense(out):
        from ..array import NvArray

        tmp = NvArray.empty(out._shape, dtype=out._dtype, device=out._device)
        arange(backend, tmp, start, step)
        copy(backend, out, tmp)
        return
    dtype = out._dtype
    ordinal = backend.gpu.ordinal
    if dtype.kind == "c":  # the real values, in the parts' dtype, then a zero imaginary part
        from ..array import NvArray

        tmp = NvArray.empty(out._shape, dtype=dt.real_of(dtype), device=out._device)
        arange(backend, tmp, start, step)
        copy(backend, out, tmp)
        return
    if dtype.kind == "f":
        key = ("arange_f", dtype.name, ordinal)
        kernel = _kernels_get(key) or _kernel(backend, key, SOURCE, "arange_float", (CTYPE[dtype],))
        args = [_ptr(out), float(start), float(step), n]
    else:
        key = ("arange_i", dtype.name, ordinal)
        kernel = _kernels_get(key) or _kernel(backend, key, SOURCE, "arange_int", (CTYPE[dtype],))
        args = [_ptr(out), _wrap64(int(start)), _wrap64(int(step)), n]
    kernel.launch(_grid(backend, n, BLOCK), BLOCK, args, stream=backend.stream)


def _wrap64(v: int) -> int:
    """``v`` modulo 2**64 as a signed int64 (the host reference wraps the same way)."""
    v &= 0xFFFFFFFFFFFFFFFF
    return v - 2**64 if v >= 2**63 else v


# --- random --------------------------------------------------------------------------------------


def random(
    backend: Any, kind: str, out: NvArray, seed: int, offset: int, params: dict[str, Any]
) -> None:
    """Fill C-contiguous ``out`` from the Philox stream ``(seed, offset)`` of :mod:`ignis.random`
    (``kind`` "uniform", "normal" or "integers" with ``params`` ``low``/``high``)."""
    if kind not in ("uniform", "normal", "integers"):
        raise ValueError(
            f"random: unknown kind {kind!r}; expected 'uniform', 'normal' or 'integers'"
        )
    dtype = out._dtype
    if kind == "integers" and dtype.kind not in "iu":
        raise DTypeError(f"random: integers need an integer dtype, got {dtype.name}")
    if kind != "integers" and dtype.kind != "f":
        raise DTypeError(f"random: {kind} values need a floating dtype, got {dtype.name}")
    n = _numel(out._shape)
    if n == 0:
        return
    if not _dense(out):
        raise ShapeError(f"random: the output must be C-contiguous, got strides {out._strides}")
    k0, k1 = seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF
    offset &= 0xFFFFFFFFFFFFFFFF
    ordinal = backend.gpu.ordinal
    if kind == "integers":
        low, high = int(params["low"]), int(params["high"])
        span = high - low
        if not 1 <= span <= 2**64:
            raise ValueError(f"random: integers need 1 <= high - low <= 2**64, got [{low}, {high})")
        wide = span > 2**32  # two words per element
        key = (kind, dtype.name, wide, ordinal)
        kernel = _kernels_get(key) or _kernel(
            backend, key, RANDOM_SOURCE, kind, (CTYPE[dtype], wide)
        )
        per_block = 2 if wide else 4
        args = [_ptr(out), n, k0, k1, offset, _wrap64(low), span - 1]
    else:
        key = (kind, dtype.name, ordinal)
        kernel = _kernels_get(key) or _kernel(backend, key, RANDOM_SOURCE, kind, (CTYPE[dtype],))
        per_block = 2 if dtype is dt.float64 else 4  # elements one Philox block gives
        args = [_ptr(out), n, k0, k1, offset]
    blocks = (n + per_block - 1) // per_block
    kernel.launch(_grid(backend, blocks, BLOCK), BLOCK, args, stream=backend.stream)


# The module globals these settings replaced keep reading and setting them (deprecated).
_tuning.keep_module_names(sys.modules[__name__], "elementwise")
