"""Reductions, arg-reductions and softmax of the CUDA backend (kernels in ``cuda_src/reduction.cu``
and ``cuda_src/softmax.cu``).

Every reduction is first reduced to one of two problem shapes by dropping size-1 dimensions and
merging dimensions that are contiguous in memory:

* **rows**: ``out[row] = reduce(x[start(row) + r * rs] for r < n)``: the reduced elements of
  one output are ``n`` evenly spaced elements (usually contiguous, ``rs == 1``); ``start``
  walks the kept dimensions with their own strides. Short rows (and many medium ones) get a
  group of 1..32 lanes each (``reduce_group``), long rows a block each (``reduce_block``),
  split over several blocks when there are too few rows to fill the GPU (a full reduction is
  one row). Contiguous rows are read in 16-byte packs.
* **cols**: the reduced axis lies outside a contiguous kept axis of ``inner`` elements; the
  loads of a warp are contiguous. Narrow inner axes: each thread owns one column (or one
  16-byte pack of columns) (``reduce_cols``). Wide ones (sum, mean, max, min, var): each
  thread owns several packs, a block a strip of columns and a slab of rows, with 4 rows of
  packs in flight per thread (``reduce_cols_wide``); the slabs (splits) are chosen from a
  model of waves of resident blocks, and their partial results are combined by a second
  launch, one thread per column, in split order.

Anything else (several reduced axes that do not merge, interleaved with kept ones, or a layout
with no contiguous axis) is first copied into a contiguous temporary with the kept axes in front
(one extra pass over the input); small strided inputs are read in place instead. Split
reductions write one partial result per (output, split) and a second launch combines them.
Launch configurations depend only on the shape, the strides and the alignment of the data, and
no atomics are used: the same call on the same device gives the same bits.

``var`` is two passes (the mean, then the mean squared deviation from it), the arithmetic of the
CPU backend. Softmax reads rows in place when the axis is contiguous (rows) or lies outside a
contiguous axis (cols); other layouts are copied to a contiguous temporary first. Long
float16/bfloat16 rows (up to 32768 elements) keep the row in registers in its 16-bit form
(``softmax_packed``), so that two rows share an SM.

The thresholds between these layouts are the ``reduction`` and ``softmax`` settings of
``ignis.tuning`` (:class:`ignis._tuning.ReductionSettings`, :class:`~ignis._tuning.SoftmaxSettings`;
tests shrink them to reach every path on small inputs), read once per call and passed down as
``tune``; remembered recipes are keyed on them.
"""

from __future__ import annotations

import functools
import math
import operator
import struct
import sys
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from ... import _caches, _tuning
from ... import _dtypes as dt
from ..._caches import PlanCache
from ..._tuning import ReductionSettings, SoftmaxSettings
from .. import _layout
from .._reduction_table import REDUCTIONS
from ._kernels import CTYPE, library_kernel

if TYPE_CHECKING:
    from ..array import NvArray

__all__ = ["reduce", "replay", "arg_reduce", "softmax"]


# The type max/min/argmax/argmin compare in (the 16-bit floats as float; small integers as int).
_WORK = {
    "bool": "int",
    "int8": "int",
    "int16": "int",
    "int32": "int",
    "int64": "long long",
    "uint8": "int",
    "uint16": "int",
    "uint32": "long long",
    "uint64": "unsigned long long",
    "float16": "float",
    "bfloat16": "float",
    "float32": "float",
    "float64": "double",
    "complex64": "ignis::complex64",  # (all/any test complex values against zero as they are)
    "complex128": "ignis::complex128",
}

# Accumulator types of sums: C++ name of the type (SumOp's template argument), the partial
# result's C++ type and its size in bytes.
_SUM_ACC = {
    "float32": ("float", "float", 4),
    "float64": ("double", "double", 8),
    "int64": ("long long", "unsigned long long", 8),
    "uint64": ("unsigned long long", "unsigned long long", 8),
    "complex64": ("ignis::complex64", "ignis::complex64", 8),
    "complex128": ("ignis::complex128", "ignis::complex128", 16),
}
# The reduce ops of the table this module computes, and the combining ops whose partial result
# is an int whatever the input (all, any).
_REDUCE_NAMES = tuple(n for n, op in REDUCTIONS.items() if op.cuda is not None)
_TRUTH_OPS = ("AllOp", "AnyOp")
_DDOF_OPS = frozenset(n for n, op in REDUCTIONS.items() if op.ddof)  # var, std
_WORK_SIZE = {"int": 4, "long long": 8, "unsigned long long": 8, "float": 4, "double": 8}

# Launch limits, not choices (the ``reduction`` and ``softmax`` settings of ignis.tuning are).
MAX_GRID = 1 << 20  # blocks per launch; kernels loop over further work
SOFTMAX_PACKED_MAX_THREADS = 512  # softmax_packed's launch bounds: two such blocks per SM
# reduce_cols_wide's split model: resident blocks assumed where there is no device to ask
# (and the cols_wide_resident setting is None)
COLS_WIDE_RESIDENT = 396

_OUTER_LAYOUT = struct.Struct("<8q8qii")  # ignis::OuterLayout
MAX_OUTER_DIMS = 8

Dims = list[tuple[int, int]]  # (size, element stride), outermost first

# Recipes: a reduction planned without copying its input is remembered as its temporaries' sizes
# and its launches (:class:`Recipe`, or :class:`OneLaunch` for the usual one launch), keyed by
# everything the planning read: op, dtypes, shapes, strides, axes, the input and output
# addresses modulo 16 (alignment picks 16-byte packs), the backend and the reduction settings.
# A repeated call skips planning: it allocates the temporaries (split partials, var's means) and
# queues the same launches with its own pointers. Calls that copy (a layout the kernels cannot
# read in place, an output they cannot write) are planned every time; their copies dominate.
_RECIPE_LIMIT = 1024
_recipes = PlanCache(
    "cuda.reduction.recipes",
    _RECIPE_LIMIT,
    "reduction, dtypes, layout, axes and settings -> its kernels, grids and temporaries",
)
# The lookup of every reduction: a bound method (no attribute lookup), hits uncounted (the
# cache is registered without counts).
_recipes_get = _recipes.get
_caches.register(
    _recipes.name,
    _recipes,
    clear=_recipes.reset,
    max_entries=_recipes.max_entries,
    description=_recipes.description,
)
_tls = threading.local()  # .record: the launches and temporaries of the call being planned, or None
# Every reduction kernel takes its pointers first (input, output, partials, centre: at most
# four), then its layout and sizes; a recipe resolves ints in these slots as pointers.
_POINTER_SLOTS = 4
_resident = PlanCache(
    "cuda.reduction.resident_blocks",
    _RECIPE_LIMIT,
    "(device, kernel, block) -> blocks resident at once on the device",
)
_wide_splits = PlanCache(
    "cuda.reduction.wide_splits",
    _RECIPE_LIMIT,
    "wide column sums (strips, rows, resident blocks, sizes, settings) -> row splits",
)


class Launch(NamedTuple):
    """One launch of a :class:`Recipe`: ``slots`` lists ``(position, source, delta)``: the
    pointer argument at ``position`` is ``delta`` bytes after the input's first element
    (source -1), the output's first element (-2) or temporary ``source`` (0, 1, ...)."""

    kernel: Any
    grid: Any
    block: Any
    args: list[Any]
    slots: tuple[tuple[int, int, int], ...]


class Recipe(NamedTuple):
    """A remembered reduction: the sizes (bytes) of its temporaries, then its launches."""

    sizes: tuple[int, ...]
    launches: tuple[Launch, ...]


class OneLaunch(NamedTuple):
    """A remembered reduction of one launch that reads only x and writes only out, no
    temporaries (what :func:`reduce` replays without a loop): argument ``x_pos`` holds the
    input's distance (bytes) from x's first element, ``out_pos`` is the output."""

    kernel: Any
    grid: Any
    block: Any
    args: list[Any]
    x_pos: int
    out_pos: int


# --- launching -----------------------------------------------------------------------------------


def _launch(backend: Any, source: str, name: str, grid: int, block: Any, args: list[Any]) -> None:
    """Queue ``name`` of ``cuda_src/<source>`` on the backend's current stream."""
    kernel = library_kernel(source, name, backend.gpu)
    record = getattr(_tls, "record", None)
    if record is not None:
        record.append((kernel, grid, block, args))
    kernel.launch(grid, block, args, stream=backend.stream)


def _temp(backend: Any, shape: tuple[int, ...], dtype: dt.DType) -> NvArray:
    """A new contiguous array of the backend's device (lives as long as the Python object)."""
    from ..array import NvArray

    nbytes = _layout.numel(shape) * dtype.itemsize
    tmp = NvArray._make(
        backend.alloc(nbytes),
        0,
        shape,
        _layout.contiguous_strides(shape, dtype.itemsize),
        dtype,
        backend.device,
        backend,
        backend.default_stream(),
    )
    record = getattr(_tls, "record", None)
    if record is not None:
        # A recipe allocates it again. The record keeps it alive until planning ends: a later
        # temporary of the same call then has an address of its own (a freed block would be
        # handed out again), so recorded addresses tell the temporaries apart.
        record.append((nbytes, backend.data_ptr(tmp), tmp))
    return tmp


def _no_recipe() -> None:
    """The call being planned copies data (not recorded): it must not be remembered."""
    record = getattr(_tls, "record", None)
    if record is not None:
        record.append(None)


def _scratch(backend: Any, nbytes: int) -> NvArray:
    return _temp(backend, (max(nbytes, 1),), dt.uint8)


def pack_outer(dims: Dims) -> bytes:
    """``ignis::OuterLayout`` for outer dimensions ``[(size, element stride), ...]`` (outermost
    first, at most 8): sizes and strides innermost first, unused entries 1 and 0."""
    if len(dims) > MAX_OUTER_DIMS:
        raise ValueError(f"pack_outer: {len(dims)} dimensions, at most {MAX_OUTER_DIMS}")
    pad = MAX_OUTER_DIMS - len(dims)
    shape = [d[0] for d in reversed(dims)] + [1] * pad
    strides = [d[1] for d in reversed(dims)] + [0] * pad
    return _OUTER_LAYOUT.pack(*shape, *strides, len(dims), 0)


def _pow2_at_least(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def _elem_strides(x: NvArray) -> tuple[int, ...] | None:
    """Strides in elements, or None when a byte stride or the address is not a whole element."""
    size = x.dtype.itemsize
    if any(s % size for s in x.strides) or x._offset % size:
        return None
    return tuple(s // size for s in x.strides)


def merge_dims(dims: Dims) -> Dims:
    """Drop size-1 dimensions and merge neighbours where the outer one steps exactly over the
    inner one (``stride_outer == stride_inner * size_inner``); element order is kept.

    Example: ``merge_dims([(2, 20), (1, 5), (3, 4)]) == [(2, 20), (3, 4)]``;
    ``merge_dims([(2, 3), (3, 1)]) == [(6, 1)]``.
    """
    out: Dims = []
    for size, stride in dims:
        if size == 1:
            continue
        if out and out[-1][1] == stride * size:
            out[-1] = (out[-1][0] * size, stride)
        else:
            out.append((size, stride))
    return out


# --- planning ------------------------------------------------------------------------------------


@dataclass
class Plan:
    """One reduction problem in kernel terms (see the module notes).

    ``src`` is the array the kernels read (``x`` or a temporary copy, kept alive here); ``ptr``
    the address of element 0 of row 0; ``outer`` the kept dimensions that give each row's start
    (outermost first; for cols without the inner axis); ``rows`` their element count; ``n``
    and ``rs`` the reduced length and element stride; ``inner`` the contiguous kept axis of a
    cols problem (0 for rows).
    """

    kind: str
    src: Any
    ptr: int
    itemsize: int
    outer: Dims
    rows: int
    n: int
    rs: int
    inner: int = 0

    @property
    def outputs(self) -> int:
        return self.rows * (self.inner if self.kind == "cols" else 1)


def plan_reduction(
    backend: Any,
    x: NvArray,
    axes: tuple[int, ...],
    order_free: bool,
    tune: ReductionSettings | None = None,
) -> Plan:
    """The :class:`Plan` reducing ``x`` over ``axes``; outputs in row-major order of the kept axes.

    ``order_free``: the reduced elements may be visited in any order (sum, max, ...), so reduced
    axes may be reversed and reordered to merge; not for argmax/argmin, whose result is the
    position in the row-major order of the reduced axes. ``tune``: the reduction settings
    (default: those in force).
    """
    tune = _tuning.current.reduction if tune is None else tune
    ndim = x.ndim
    axes = tuple(sorted(axes))
    kept_axes = [d for d in range(ndim) if d not in axes]
    count = math.prod(x.shape[d] for d in axes)
    size = x.dtype.itemsize
    if count == 0:  # nothing is read: every output is the op's empty result
        outputs = math.prod(x.shape[d] for d in kept_axes)
        return Plan("rows", x, backend.data_ptr(x), size, [(outputs, 0)], outputs, 0, 1)
    es = _elem_strides(x)
    if es is None:
        return _plan_copy(backend, x, kept_axes, list(axes), order_free, tune)
    ptr = backend.data_ptr(x)
    kept = merge_dims([(x.shape[d], es[d]) for d in kept_axes])
    red = [(x.shape[d], es[d]) for d in axes]
    if order_free:
        # Walk reversed axes forwards from their last element and put the largest stride
        # first: transposed or flipped views then merge like contiguous ones.
        flipped = []
        for n, s in red:
            if s < 0 and n > 1:
                ptr += (n - 1) * s * size
                s = -s
            flipped.append((n, s))
        red = sorted(flipped, key=lambda d: -d[1])
    red = merge_dims(red)
    if not red:
        red = [(1, 1)]
    rows = math.prod(d[0] for d in kept)
    if len(red) == 1 and len(kept) <= MAX_OUTER_DIMS:
        n, rs = red[0]
        if rs == 1 or n == 1:
            return Plan("rows", x, ptr, size, kept, rows, n, 1)
        if kept and kept[-1][1] == 1 and len(kept) - 1 <= MAX_OUTER_DIMS:
            inner = kept[-1][0]
            return Plan("cols", x, ptr, size, kept[:-1], rows // inner, n, rs, inner)
        if x.numel <= tune.strided_max:
            return Plan("rows", x, ptr, size, kept, rows, n, rs)
    return _plan_copy(backend, x, kept_axes, list(axes), order_free, tune)


def _plan_copy(
    backend: Any,
    x: NvArray,
    kept_axes: list[int],
    axes: list[int],
    order_free: bool,
    tune: ReductionSettings,
) -> Plan:
    """Copy ``x`` into a contiguous temporary with the kept axes first, then plan that."""
    perm = kept_axes + axes
    shape = tuple(x.shape[d] for d in perm)
    view = x._view(x._offset, shape, tuple(x.strides[d] for d in perm))
    tmp = _temp(backend, shape, x.dtype)
    _no_recipe()
    backend.copy(tmp, view)
    plan = plan_reduction(backend, tmp, tuple(range(len(kept_axes), len(perm))), order_free, tune)
    assert plan.kind == "rows" and plan.rs == 1, plan
    return plan


# --- running a plan -------------------------------------------------------------------------------


@dataclass(frozen=True)
class OpTypes:
    """The C++ side of one reduction: element type, output type, op and its partial result."""

    t: str  # element type
    o: str  # output type
    op: str  # e.g. "ignis::SumOp<float>"
    acc: str  # the op's acc_t
    acc_size: int  # sizeof(acc_t)


def _splits(units: int, n: int, min_chunk: int, tune: ReductionSettings) -> int:
    """How many blocks to split each of ``units`` reductions of ``n`` elements over."""
    target = tune.target_blocks
    if units >= target or n < 2 * min_chunk:
        return 1
    return max(1, min(tune.max_splits, -(-target // units), n // min_chunk))


def _group_size(n: int) -> int:
    """Lanes per row of reduce_group: about four elements per lane, at most a warp."""
    return min(32, _pow2_at_least(-(-n // 4)))


def run_plan(
    backend: Any,
    plan: Plan,
    types: OpTypes,
    out_ptr: int,
    center: int | None,
    div: float,
    tune: ReductionSettings | None = None,
) -> None:
    """Launch the kernels of ``plan``: ``out[k] = finish(reduce(...))`` for every output ``k``
    (``tune``: the reduction settings, default those in force)."""
    tune = _tuning.current.reduction if tune is None else tune
    n, rows = plan.n, plan.rows
    if plan.kind == "cols":
        if not _run_cols_wide(backend, plan, types, out_ptr, center, div, tune):
            _run_cols(backend, plan, types, out_ptr, center, div, tune)
    elif (
        plan.rs != 1
        or n <= tune.group_max_n
        or (n <= tune.group_wide_max_n and rows >= tune.group_wide_min_rows)
    ):
        vec = 16 // plan.itemsize
        min_n = tune.group_pack_min * 32 * vec
        packed = plan.rs == 1 and plan.ptr % plan.itemsize == 0 and n >= min_n
        _run_group(
            backend,
            plan.ptr,
            plan.outer,
            rows,
            n,
            plan.rs,
            types,
            out_ptr,
            center,
            div,
            vec=vec if packed else 1,
        )
    else:
        _run_block(backend, plan, types, out_ptr, center, div, tune)


def _run_group(
    backend: Any,
    ptr: int,
    outer: Dims,
    rows: int,
    n: int,
    rs: int,
    types: OpTypes,
    out_ptr: int,
    center: int | None,
    div: float,
    partial: bool = False,
    vec: int = 1,
    group: int = 0,
) -> None:
    group = group or (32 if vec > 1 else _group_size(n))
    threads = 256
    grid = min(MAX_GRID, -(-rows * group // threads))
    op = f"ignis::PartialOp<{types.op}>" if partial else types.op
    t = types.acc if partial else types.t
    name = f"ignis::reduce_group<{t}, {types.o}, {op}, {vec}>"
    args = [ptr, out_ptr, center, pack_outer(outer), rows, n, rs, group, float(div)]
    _launch(backend, "reduction.cu", name, grid, threads, args)


def _finish_partials(
    backend: Any,
    partials: NvArray,
    outputs: int,
    splits: int,
    types: OpTypes,
    out_ptr: int,
    div: float,
) -> None:
    _run_group(
        backend,
        backend.data_ptr(partials),
        [(outputs, splits)],
        outputs,
        splits,
        1,
        types,
        out_ptr,
        None,
        div,
        partial=True,
    )


def _run_block(
    backend: Any,
    plan: Plan,
    types: OpTypes,
    out_ptr: int,
    center: int | None,
    div: float,
    tune: ReductionSettings,
) -> None:
    n, rows = plan.n, plan.rows
    vec = 16 // plan.itemsize if plan.ptr % plan.itemsize == 0 else 1
    min_chunk = tune.min_chunk
    splits = _splits(rows, n, min_chunk, tune)
    chunk = n
    if splits > 1:
        per_split = -(-n // splits)
        chunk = -(-per_split // 16) * 16  # a multiple of 16 elements keeps packs aligned
        splits = -(-n // chunk)
    threads = 512 if chunk >= 2 * min_chunk else 256
    partials = _scratch(backend, rows * splits * types.acc_size) if splits > 1 else None
    name = f"ignis::reduce_block<{types.t}, {types.o}, {types.op}, {vec}>"
    _launch(
        backend,
        "reduction.cu",
        name,
        min(MAX_GRID, rows * splits),
        threads,
        [
            plan.ptr,
            out_ptr,
            None if partials is None else backend.data_ptr(partials),
            center,
            pack_outer(plan.outer),
            rows,
            n,
            splits,
            chunk,
            float(div),
        ],
    )
    if partials is not None:
        _finish_partials(backend, partials, rows, splits, types, out_ptr, div)


def _run_cols(
    backend: Any,
    plan: Plan,
    types: OpTypes,
    out_ptr: int,
    center: int | None,
    div: float,
    tune: ReductionSettings,
) -> None:
    inner, n = plan.inner, plan.n
    vec = 16 // plan.itemsize
    aligned = plan.ptr % 16 == 0 and plan.rs % vec == 0 and inner % vec == 0
    if not (aligned and all(s % vec == 0 for _, s in plan.outer)):
        vec = 1
    bx = min(32, _pow2_at_least(-(-inner // vec)))
    by = 256 // bx
    units = plan.rows * -(-inner // (bx * vec))
    splits = _splits(units, n, 16 * by, tune)
    chunk = n
    if splits > 1:
        chunk = -(-n // splits)
        splits = -(-n // chunk)
    outputs = plan.rows * inner
    name = f"ignis::reduce_cols<{types.t}, {types.o}, {types.op}, {vec}>"
    partials = _launch_cols(backend, name, units * splits, (bx, by), plan, types, out_ptr,
                            center, div, splits, chunk)
    if partials is not None:
        _finish_partials(backend, partials, outputs, splits, types, out_ptr, div)


def _launch_cols(backend: Any, name: str, blocks: int, block: tuple[int, int], plan: Plan,
                 types: OpTypes, out_ptr: int, center: int | None, div: float, splits: int,
                 chunk: int) -> NvArray | None:
    """Launch ``name``, reduce_cols or reduce_cols_wide (they take the same arguments), on
    ``blocks`` blocks (at most MAX_GRID); returns its scratch of per-split partial sums, None
    when ``splits`` is 1 (the kernel then writes the results)."""
    outputs = plan.rows * plan.inner
    partials = _scratch(backend, outputs * splits * types.acc_size) if splits > 1 else None
    args = [
        plan.ptr,
        out_ptr,
        None if partials is None else backend.data_ptr(partials),
        center,
        pack_outer(plan.outer),
        plan.rows,
        plan.inner,
        plan.n,
        plan.rs,
        splits,
        chunk,
        float(div),
    ]
    _launch(backend, "reduction.cu", name, min(MAX_GRID, blocks), block, args)
    return partials


# --- wide column strips --------------------------------------------------------------------------


def wide_packs(vec: int) -> int:
    """Packs of ``vec`` columns per thread of reduce_cols_wide: 2 of 16 bytes (4 rows of them
    in flight: 128 bytes a thread), 1 for 1-byte elements (16 accumulators already), 4 single
    columns when the data allows no 16-byte loads."""
    return 4 if vec == 1 else (1 if vec >= 16 else 2)


def wide_splits(
    units: int,
    n: int,
    resident: int,
    row_bytes: int,
    partial_bytes: int,
    tune: ReductionSettings | None = None,
) -> int:
    """How many slabs (splits) of the ``n`` reduced rows reduce_cols_wide cuts each of its
    ``units`` strips into, at most one per ``cols_wide_min_rows`` rows (settings ``tune``,
    default those in force).

    Model: ``resident`` blocks run at once, each streaming at the same rate, so the time is the
    number of waves times one unit's cost (its rows times ``row_bytes`` plus
    ``cols_wide_unit_cost``), plus writing and reading back ``partial_bytes`` per split. The
    cheapest count wins, the smallest on ties. Example: 64 strips of 1 KiB rows, 16384 rows,
    396 resident blocks: 6 splits (384 blocks, one wave).
    """
    tune = _tuning.current.reduction if tune is None else tune
    key = (units, n, resident, row_bytes, partial_bytes, tune)
    found = _wide_splits.get(key)
    if found is not None:
        _wide_splits.hits += 1
        return found  # type: ignore[no-any-return]
    unit_cost = tune.cols_wide_unit_cost
    most = max(1, min(tune.max_splits, n // tune.cols_wide_min_rows, -(-4 * resident // units)))
    best, best_cost = 1, 0.0
    for s in range(1, most + 1):
        waves = -(-units * s // resident)
        cost = waves * (-(-n // s) * row_bytes + unit_cost)
        if s > 1:
            cost += 2 * s * partial_bytes / resident
        if s == 1 or cost < best_cost:
            best, best_cost = s, cost
    _wide_splits.remember(key, best)
    return best


def _resident_blocks(
    backend: Any, name: str, block: tuple[int, int], tune: ReductionSettings | None = None
) -> int:
    """Blocks of ``name`` (reduction.cu) that run at once on the backend's device (its SMs
    times the blocks one SM holds): the ``cols_wide_resident`` setting where it is set, else
    asked of the device; COLS_WIDE_RESIDENT where there is no device to ask."""
    tune = _tuning.current.reduction if tune is None else tune
    if tune.cols_wide_resident is not None:
        return tune.cols_wide_resident
    gpu = getattr(backend, "gpu", None)
    if gpu is None:
        return COLS_WIDE_RESIDENT
    key = (gpu.ordinal, name, block)
    count = _resident.get(key)
    if count is not None:
        _resident.hits += 1
    else:
        kernel = library_kernel("reduction.cu", name, gpu)
        per_sm = kernel.max_active_blocks_per_multiprocessor(block, 0, gpu)
        count = _resident.remember(key, max(1, per_sm) * max(1, int(gpu.multiprocessor_count)))
    return count  # type: ignore[no-any-return]


def _run_cols_wide(
    backend: Any,
    plan: Plan,
    types: OpTypes,
    out_ptr: int,
    center: int | None,
    div: float,
    tune: ReductionSettings,
) -> bool:
    """Run a cols plan with reduce_cols_wide; False (nothing launched) where it does not apply:
    ``cols_wide`` off, an arg-reduction, or an inner axis narrower than
    ``cols_wide_min_bytes``."""
    inner, n, size = plan.inner, plan.n, plan.itemsize
    if not tune.cols_wide or "Arg" in types.op or inner * size < tune.cols_wide_min_bytes:
        return False
    vec = 16 // size
    # 16-byte packs need every row start on a 16-byte boundary; inner may leave a tail.
    if not (plan.ptr % 16 == 0 and plan.rs % vec == 0 and all(s % vec == 0 for _, s in plan.outer)):
        vec = 1
    packs = wide_packs(vec)
    strip = 32 * packs * vec
    by = min(8, _pow2_at_least(n))
    name = f"ignis::reduce_cols_wide<{types.t}, {types.o}, {types.op}, {vec}, {packs}>"
    units = plan.rows * -(-inner // strip)
    outputs = plan.rows * inner
    resident = _resident_blocks(backend, name, (32, by), tune)
    splits = wide_splits(units, n, resident, strip * size, outputs * types.acc_size, tune)
    chunk = -(-n // splits)
    splits = -(-n // chunk)
    partials = _launch_cols(backend, name, units * splits, (32, by), plan, types, out_ptr,
                            center, div, splits, chunk)
    if partials is not None:
        # partials[split * outputs + k]: output k's splits are `outputs` apart; one lane each
        # reads them in split order (coalesced over k).
        _run_group(
            backend,
            backend.data_ptr(partials),
            [(outputs, 1)],
            outputs,
            splits,
            outputs,
            types,
            out_ptr,
            None,
            div,
            partial=True,
            group=1,
        )
    return True


# --- the hooks ------------------------------------------------------------------------------------


def _output(backend: Any, out: NvArray) -> NvArray:
    """``out`` if the kernels can write it directly (contiguous), else a contiguous temporary."""
    return out if out.is_contiguous else _temp(backend, out.shape, out.dtype)


def _sum_types(t: str, o: str, accumulate: dt.DType, op: str = "SumOp") -> OpTypes:
    name, acc, size = _SUM_ACC[accumulate.name]
    return OpTypes(t, o, f"ignis::{op}<{name}>", acc, size)


#: ``_knobs()``: the reduction settings in force, which recipes are keyed on (the direct
#: functions of full reductions compare them to drop a replay planned under others). A C-level
#: call: the direct functions' replays make it once per call.
_knobs = functools.partial(operator.attrgetter("current.reduction"), _tuning)


def reduce(
    backend: Any,
    op: str,
    out: NvArray,
    x: NvArray,
    axes: tuple[int, ...],
    accumulate: dt.DType,
    params: dict[str, Any],
) -> tuple[Any, ...] | None:
    """The ``reduce`` hook: sum, mean, max, min or var of ``x`` over ``axes`` into ``out``
    (keepdims shape). See :meth:`ignis._array._backend.Backend.reduce`.

    Returns the recipe the call replayed or made (see :func:`_recipe`), None where it was
    not remembered: the direct function of a full reduction learns its launch from it
    (:func:`replay`)."""
    data_ptr = backend.data_ptr
    x_ptr = data_ptr(x)
    out_ptr = data_ptr(out)
    tune = _tuning.current.reduction
    key = (
        op,
        x._dtype.name,
        out._dtype.name,
        accumulate.name,
        x._shape,
        x._strides,
        out._shape,
        out._strides,
        axes,
        x_ptr % 16,
        out_ptr % 16,
        params.get("ddof", 0) if op in _DDOF_OPS else 0,
        backend,  # (by identity) the device, and a stand-in backend never meets a real one's
        tune,
    )
    recipe = _recipes_get(key)
    if recipe is not None:
        # Inlined (this is every repeated reduction): new temporaries, then the launches.
        if recipe.__class__ is OneLaunch:  # the usual small case: one launch, x to out
            kernel, grid, block, args, x_pos, out_pos = recipe
            args = args.copy()
            args[x_pos] += x_ptr
            args[out_pos] = out_ptr
            kernel.launch(grid, block, args, stream=backend.stream)
            return recipe
        sizes, launches = recipe
        # The temporaries live until the launches are queued (their memory is stream-ordered);
        # each is a new allocation, so two of them never share an address.
        if sizes:
            keep = [_scratch(backend, n) for n in sizes]
            temps = [data_ptr(t) for t in keep]
        stream = backend.stream
        for kernel, grid, block, template, slots in launches:
            args = template.copy()
            for pos, source, delta in slots:
                args[pos] = (
                    x_ptr + delta if source == -1 else out_ptr if source == -2 else temps[source]
                )
            kernel.launch(grid, block, args, stream=stream)
        return recipe
    entry = REDUCTIONS.get(op)
    if entry is None or entry.cuda is None:
        raise ValueError(
            f"reduce: unknown reduction {op!r}; expected one of {', '.join(_REDUCE_NAMES)}"
        )
    if out.numel == 0:
        return None
    _tls.record = record = []
    try:
        _reduce_planned(backend, op, out, x, axes, accumulate, params, tune)
    finally:
        _tls.record = None
    recipe = _recipe(record, x, x_ptr, out, out_ptr)
    if recipe is not None:
        _recipes.remember(key, recipe)
    return recipe


def replay(recipe: tuple[Any, ...] | None, device: Any) -> tuple[Any, tuple[Any, ...]] | None:
    """``(launch, arguments)`` for a recipe of one launch that reads ``x`` from its first element
    (argument 0) and writes ``out`` (argument 1): ``launch(stream, x_ptr, out_ptr, *arguments)``
    queues what :func:`reduce` would replay, through the kernel's prepared launch
    (``Kernel._prepared``) on ``device``. None for any other recipe."""
    if recipe is None or recipe.__class__ is not OneLaunch:
        return None
    kernel, grid, block, args, x_pos, out_pos = recipe
    if x_pos != 0 or out_pos != 1 or args[0] != 0:
        return None
    # What the launcher would convert (a prepared launch takes converted values): a null
    # pointer is 0; the rest are already ints, floats and packed layouts (bytes).
    arguments = tuple(0 if a is None else a for a in args[2:])
    if not all(a.__class__ in (int, float, bytes) for a in arguments):
        return None
    launch = kernel._prepared(device, grid, block)
    return None if launch is None else (launch, arguments)


def _recipe(
    record: list[Any], x: NvArray, x_ptr: int, out: NvArray, out_ptr: int
) -> Recipe | OneLaunch | None:
    """What :func:`reduce` remembers of one planned call (None: not to be remembered): a
    :class:`Recipe`, or a :class:`OneLaunch` for one launch that reads only x and writes only
    out. A pointer argument that is neither x's data, out's nor a temporary's (it lies in data
    another call would not have at the same place), or that could be more than one (addresses
    that coincide tell nothing apart), makes the call unrememberable.
    """
    if not record or not out.is_contiguous:
        return None
    lo, hi = _layout.byte_extent(x_ptr, x._shape, x._strides, x._dtype.itemsize)
    hi = max(lo, hi - 1)
    if lo <= out_ptr <= hi:
        return None  # the output lies inside the input: their distance is not a layout's
    temps: dict[int, int] = {}
    sizes = []
    launches = []
    for event in record:
        if event is None:
            return None
        if len(event) == 3:  # a temporary: (bytes, address, the array)
            nbytes, ptr, _ = event
            if ptr in temps or ptr == out_ptr or lo <= ptr <= hi:
                return None
            temps[ptr] = len(sizes)
            sizes.append(nbytes)
            continue
        kernel, grid, block, args = event
        slots = []
        for pos, a in enumerate(args):
            if a is None or a.__class__ is not int:
                continue  # no pointer: a constant (None, a packed layout, a divisor)
            known = a == out_ptr or a in temps or lo <= a <= hi
            if pos >= _POINTER_SLOTS:
                if known:  # a size that reads like an address: nothing can be told apart
                    return None
                continue
            if a == out_ptr:
                slots.append((pos, -2, 0))
            elif a in temps:
                slots.append((pos, temps[a], 0))
            elif known:
                slots.append((pos, -1, a - x_ptr))
            else:
                return None
        launches.append(Launch(kernel, grid, block, list(args), tuple(slots)))
    if not launches:  # (launches that did not go through _launch were not recorded)
        return None
    if not sizes and len(launches) == 1:
        kernel, grid, block, args, slots = launches[0]
        if len(slots) == 2 and slots[0][1] == -1 and slots[1][1] == -2:
            # One launch, no temporaries: the form reduce() replays without a loop, the input
            # slot holding its distance from x's first element.
            (x_pos, _, delta), (out_pos, _, _) = slots
            args[x_pos] = delta
            return OneLaunch(kernel, grid, block, args, x_pos, out_pos)
    return Recipe(tuple(sizes), tuple(launches))


def _reduce_planned(
    backend: Any,
    op: str,
    out: NvArray,
    x: NvArray,
    axes: tuple[int, ...],
    accumulate: dt.DType,
    params: dict[str, Any],
    tune: ReductionSettings,
) -> None:
    """:func:`reduce` planned in full under the reduction settings ``tune``, as the reduction
    table's ``cuda`` entry of ``op`` says (:class:`~ignis._array._reduction_table.CudaReduce`)."""
    functor, on, finish = REDUCTIONS[op].cuda
    # means and deviations divide: they accumulate in a float type
    allowed = (
        _SUM_ACC
        if finish == "one"
        else ("float32", "float64", "complex64", "complex128")
        if finish == "count"
        else ("float32", "float64")
    )
    if on == "accumulate" and accumulate.name not in allowed:
        raise ValueError(
            f"{op}: cannot accumulate in {accumulate.name}; expected {' or '.join(allowed)}"
        )
    target = _output(backend, out)
    count = math.prod(x.shape[a] for a in axes)
    t, o = CTYPE[x.dtype.name], CTYPE[out.dtype.name]
    plan = plan_reduction(backend, x, axes, order_free=True, tune=tune)
    out_ptr = backend.data_ptr(target)
    if on == "work":  # extremes, truth tests: the values as they are
        w = _WORK[x.dtype.name]
        acc = "int" if functor in _TRUTH_OPS else w
        types = OpTypes(t, o, f"ignis::{functor}<{w}>", acc, _WORK_SIZE[acc])
        run_plan(backend, plan, types, out_ptr, None, 0.0, tune)
    elif finish != "deviations":  # sums, products, means
        div = float(count) if finish == "count" else 1.0
        run_plan(backend, plan, _sum_types(t, o, accumulate, functor), out_ptr, None, div, tune)
    else:
        # var, std: the mean (in the accumulate type), then the op over the squared deviations
        # from it, divided by N - ddof.
        acc_t = _SUM_ACC[accumulate.name][0]
        means = _temp(backend, (plan.outputs,), accumulate)
        means_ptr = backend.data_ptr(means)
        run_plan(
            backend, plan, _sum_types(t, acc_t, accumulate), means_ptr, None, float(count), tune
        )
        denom = max(count - params.get("ddof", 0), 0)
        types = _sum_types(t, o, accumulate, functor)
        run_plan(backend, plan, types, out_ptr, means_ptr, float(denom), tune)
    if target is not out:
        _no_recipe()
        backend.copy(out, target)


def arg_reduce(backend: Any, op: str, out: NvArray, x: NvArray, axis: int | None) -> None:
    """The ``arg_reduce`` hook: argmax/argmin along ``axis`` (None: of the row-major
    flattening) into int64 ``out``; the first occurrence wins and NaN is the extreme."""
    if op not in ("argmax", "argmin"):
        raise ValueError(f"arg_reduce: unknown op {op!r}; expected argmax or argmin")
    if out.numel == 0:
        return
    if x.numel == 0:
        raise ValueError(f"{op}: attempt to get {op} of an empty sequence (shape {x.shape})")
    target = _output(backend, out)
    axes = tuple(range(x.ndim)) if axis is None else (axis,)
    tune = _tuning.current.reduction
    plan = plan_reduction(backend, x, axes, order_free=False, tune=tune)
    w = _WORK[x.dtype.name]
    kind = "ArgMaxOp" if op == "argmax" else "ArgMinOp"
    types = OpTypes(
        CTYPE[x.dtype.name], CTYPE["int64"], f"ignis::{kind}<{w}>", f"ignis::ArgPair<{w}>", 16
    )
    run_plan(backend, plan, types, backend.data_ptr(target), None, 0.0, tune)
    if target is not out:
        backend.copy(out, target)


# --- softmax --------------------------------------------------------------------------------------


def softmax(backend: Any, out: NvArray, x: NvArray, axis: int, log: bool) -> None:
    """The ``softmax`` hook: softmax (``log``: log-softmax) of ``x`` along ``axis`` into ``out``
    (same shape; floating). Rows whose maximum is not finite come out NaN, as on the CPU."""
    if out.numel == 0:
        return
    target = _output(backend, out)
    shape = x.shape
    es = _elem_strides(x)
    if es is None:
        x = _contiguous(backend, x)
        es = _elem_strides(x)
        assert es is not None
    n, rs = shape[axis], es[axis]
    outer = merge_dims([(shape[d], es[d]) for d in range(axis)])
    inner = merge_dims([(shape[d], es[d]) for d in range(axis + 1, len(shape))])
    layout_ok = len(outer) <= MAX_OUTER_DIMS
    if layout_ok and not inner and (rs == 1 or n == 1):
        _softmax_rows(backend, target, x, outer, n, log, _tuning.current.softmax)
    elif layout_ok and len(inner) == 1 and inner[0][1] == 1:
        _softmax_cols(backend, target, x, outer, n, rs, inner[0][0], log)
    else:
        c = _contiguous(backend, x)
        softmax(backend, target, c, axis, log)
    if target is not out:
        backend.copy(out, target)


def _contiguous(backend: Any, x: NvArray) -> NvArray:
    tmp = _temp(backend, x.shape, x.dtype)
    backend.copy(tmp, x)
    return tmp


def softmax_rows_config(
    n: int,
    itemsize: int,
    vec_ok: bool,
    wide: bool = False,
    half: bool = False,
    tune: SoftmaxSettings | None = None,
) -> tuple[str, int, int, int]:
    """``(kernel, vec, items, threads)`` for softmax rows of ``n`` elements of ``itemsize``
    bytes (``wide``: the math is in double; ``half``: float16/bfloat16 in and out) under the
    softmax settings ``tune`` (default: those in force).

    kernel is "warp" (``items`` per lane), "block" (``threads`` per row holding ``items``
    packs of ``vec`` values each), "packed" (the same, 16-bit values kept as loaded) or
    "online" (rows too long for registers).

    Example: ``softmax_rows_config(32768, 2, True, half=True) == ("packed", 8, 8, 512)``.
    """
    tune = _tuning.current.softmax if tune is None else tune
    if n <= tune.warp_max_n:
        return "warp", 1, _pow2_at_least(-(-n // 32)), 128
    if half and vec_ok and tune.packed and n > tune.packed_min_n:
        items = tune.packed_items
        threads = max(64, _pow2_at_least(-(-n // (8 * items))))
        if threads <= SOFTMAX_PACKED_MAX_THREADS:
            return "packed", 8, items, threads
    vec = 16 // itemsize if vec_ok else 1
    values = tune.max_values if vec >= 4 and not wide else tune.max_values_narrow
    max_items = max(1, values // vec)
    items = 1
    while items <= max_items:
        threads = max(64, _pow2_at_least(-(-n // (vec * items))))
        if threads <= 256 or (items == max_items and threads <= 1024):
            return "block", vec, items, threads
        items *= 2
    return "online", vec, 1, 1024


def _softmax_rows(
    backend: Any, out: NvArray, x: NvArray, outer: Dims, n: int, log: bool, tune: SoftmaxSettings
) -> None:
    size = x.dtype.itemsize
    vec = 16 // size
    x_ptr, out_ptr = backend.data_ptr(x), backend.data_ptr(out)
    vec_ok = (
        x_ptr % 16 == 0
        and all(s % vec == 0 for _, s in outer)
        and n % vec == 0
        and out_ptr % 16 == 0
    )
    half = x.dtype == out.dtype and x.dtype in (dt.float16, dt.bfloat16)
    kernel, vec, items, threads = softmax_rows_config(
        n, size, vec_ok, out.dtype == dt.float64, half, tune
    )
    rows = math.prod(d[0] for d in outer)
    t, o = CTYPE[x.dtype.name], CTYPE[out.dtype.name]
    args = [x_ptr, out_ptr, pack_outer(outer), rows, n, bool(log)]
    if kernel == "warp":
        grid = min(MAX_GRID, -(-rows // (threads // 32)))
        _launch(
            backend, "softmax.cu", f"ignis::softmax_warp<{t}, {o}, {items}>", grid, threads, args
        )
    elif kernel == "block":
        _launch(
            backend,
            "softmax.cu",
            f"ignis::softmax_block<{t}, {o}, {vec}, {items}>",
            min(MAX_GRID, rows),
            threads,
            args,
        )
    elif kernel == "packed":
        _launch(
            backend,
            "softmax.cu",
            f"ignis::softmax_packed<{t}, {items}>",
            min(MAX_GRID, rows),
            threads,
            args,
        )
    else:
        vec = 16 // size if x_ptr % size == 0 else 1  # each row finds its own 16-byte boundary
        _launch(
            backend,
            "softmax.cu",
            f"ignis::softmax_online<{t}, {o}, {vec}>",
            min(MAX_GRID, rows),
            threads,
            args,
        )


def _softmax_cols(
    backend: Any, out: NvArray, x: NvArray, outer: Dims, n: int, rs: int, inner: int, log: bool
) -> None:
    bx = min(32, _pow2_at_least(inner))
    by = 256 // bx
    rows = math.prod(d[0] for d in outer)
    units = rows * -(-inner // bx)
    t, o = CTYPE[x.dtype.name], CTYPE[out.dtype.name]
    _launch(
        backend,
        "softmax.cu",
        f"ignis::softmax_cols<{t}, {o}>",
        min(MAX_GRID, units),
        (bx, by),
        [
            backend.data_ptr(x),
            backend.data_ptr(out),
            pack_outer(outer),
            rows,
            n,
            rs,
            inner,
            bool(log),
        ],
    )


# The module globals these settings replaced keep reading and setting them (deprecated).
_tuning.keep_module_names(
    sys.modules[__name__],
    "reduction",
    "softmax",
    prefixes={"softmax": "SOFTMAX_"},
    skip=("cols_wide_resident",),  # new: COLS_WIDE_RESIDENT stays the no-device fallback
)
