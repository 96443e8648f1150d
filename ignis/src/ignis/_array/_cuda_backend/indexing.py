"""The indexing family of the CUDA backend: take, index_add, put, nonzero_flat, repeat_index,
dropout and rope (kernels in ``cuda_src/indexing.cu``, ``cuda_src/dropout.cu`` and
``cuda_src/rope.cu``).

The front end hands over contiguous arrays in the shapes of the hook contract (``_backend.py``),
so every kernel works on rows: ``take`` and ``index_add`` on rows of ``inner`` elements, ``rope``
on rows of ``d`` elements. Row kernels run blocks of ``(bx, by)`` threads: ``by`` rows at a time,
``bx`` threads along a row (a power of two covering the row, so short rows do not leave most of
a warp idle). ``take`` moves up to 16 bytes per access when the row length and the addresses
allow, and a thread keeps up to ``take_rows_in_flight`` rows' loads in flight, fewer (halved:
4, 2, 1) where the grid would otherwise give a multiprocessor fewer than
``take_min_blocks_per_sm`` blocks (the ``indexing`` settings of ``ignis.tuning``,
:class:`ignis._tuning.IndexingSettings`, read once per call): several waves of short blocks keep
every multiprocessor's loads in flight to the end, where one or two waves of long ones leave the
GPU part idle in the last. Dropout moves 16-byte vectors of data (and 2 to 8 mask bytes with
each) when every operand is 16-byte aligned, a warp at a time over tiles of 32 x 4 vectors so
that each instruction of a warp covers one contiguous span (see ``cuda_src/dropout.cu``);
otherwise, and for the elements after the last whole tile, it takes the kernels' scalar path.
``put`` moves rows as raw bytes, so one kernel instance serves every dtype of an item size.
``nonzero_flat`` and ``repeat_index`` are scans in three launches: per-block totals, one block
turning them into offsets, then each block writing its chunk (``repeat_index`` then finds each
output's source by binary search). Nothing here synchronizes the host: the front end learns the
sizes of these results first.
"""

from __future__ import annotations

import math
import sys
from typing import TYPE_CHECKING, Any

from ... import _dtypes as dt
from ... import _tuning
from ..._caches import PlanCache
from ..._exports import defined_here
from ..._tuning import IndexingSettings
from ._kernels import CTYPE, library_kernel

if TYPE_CHECKING:
    from ..array import NvArray

THREADS = 256  # threads per block (dropout.cu's dropout_threads: its launch bound)

INDEX_TYPES = (dt.int32, dt.int64)
ADD_TYPES = (dt.int32, dt.int64, dt.float32, dt.float64)  # types with native atomics
FLOAT_TYPES = (dt.float16, dt.bfloat16, dt.float32, dt.float64)
ITEM_SIZES = (1, 2, 4, 8, 16)  # the element sizes put_rows moves (16: complex128)
SCAN_THREADS = 256  # indexing.cu's scan_threads: the block size of every scan kernel
SCAN_CHUNK = 4096  # elements a scan block walks at least (more when the grid cap is reached)

_grid_caps = PlanCache(
    "cuda.indexing.grid_caps", 64, "(device, indexing settings) -> grid cap and multiprocessors"
)
# A repeated take (an embedding lookup each step) goes from its plan straight to the kernel's
# prepared launch (Kernel._prepared): the choice of vector width, block and grid is made once.
_take_plans = PlanCache(
    "cuda.indexing.take_plans",
    256,
    "(shapes, dtypes, operand alignment, device) -> (indexing settings, take's prepared launch)",
)


# --- kernel names (pure: the CPU tests compile every one of them) -------------------------------


def _work(dtype: dt.DType) -> str:
    return "double" if dtype is dt.float64 else "float"


def take_name(dtype: dt.DType, index: dt.DType, vec: int, rows_in_flight: int = 1) -> str:
    return f"ignis::idx::take_rows<{CTYPE[dtype]}, {CTYPE[index]}, {vec}, {rows_in_flight}>"


def take_rows_choices(rows_in_flight: int) -> list[int]:
    """The rows per take thread the launch may pick under ``take_rows_in_flight``, most first:
    the setting, halved down to 1 (4 -> [4, 2, 1], 6 -> [6, 3, 1])."""
    out = [rows_in_flight]
    while out[-1] > 1:
        out.append(out[-1] // 2)
    return out


def index_add_name(dtype: dt.DType, index: dt.DType, deterministic: bool) -> str:
    kind = "index_add_ordered" if deterministic else "index_add_atomic"
    return f"ignis::idx::{kind}<{CTYPE[dtype]}, {CTYPE[index]}>"


def put_name(itemsize: int, index: dt.DType, vec: int) -> str:
    return f"ignis::idx::put_rows<{itemsize}, {CTYPE[index]}, {vec}>"


# (scan_block_totals, scan_write) of the two scans: flat positions of a bool mask, and the
# exclusive prefix sums of int64 repeat counts.
SCAN_NAMES = {
    "nonzero": (
        "ignis::idx::scan_block_totals<bool, true>",
        "ignis::idx::scan_write<bool, true>",
    ),
    "repeat": (
        "ignis::idx::scan_block_totals<ignis::int64, false>",
        "ignis::idx::scan_write<ignis::int64, false>",
    ),
}


def dropout_name(
    dtype: dt.DType, backward: bool, vec: bool = True, from_state: bool = False
) -> str:
    """``from_state``: the forward kernel reading its stream from device state (graphs)."""
    kind = "dropout_backward" if backward else "dropout_forward"
    if from_state and not backward:
        kind = "dropout_forward_state"
    return f"ignis::nn::{kind}<{CTYPE[dtype]}, {_work(dtype)}, {'true' if vec else 'false'}>"


DROPOUT_UNITS_PER_LANE = 4  # dropout.cu's units_per_lane


def dropout_tile(dtype: dt.DType) -> int:
    """Elements of one warp's tile of the dropout kernels' vector path (dropout.cu's
    ``Tile<T>::elems``): 32 lanes x ``DROPOUT_UNITS_PER_LANE`` 16-byte vectors (512 float32,
    1024 bfloat16)."""
    return 32 * DROPOUT_UNITS_PER_LANE * (16 // dtype.itemsize)


def _dropout_threads(n: int, dtype: dt.DType, vec: bool, tail_items: int) -> int:
    """Threads of a dropout launch: one warp per whole tile with ``vec``, and at least one per
    work item of the scalar path (``tail_items(elements)``: Philox blocks forward, elements
    backward), which takes the elements after the last whole tile (all of them without vec)."""
    if not vec:
        return tail_items(n)
    tile = dropout_tile(dtype)
    return max(n // tile * 32, tail_items(n % tile))


def rope_name(dtype: dt.DType, pos: dt.DType | None, interleaved: bool) -> str:
    p = CTYPE[pos if pos is not None else dt.int64]
    flags = f"{'true' if interleaved else 'false'}, {'false' if pos is None else 'true'}"
    return f"ignis::nn::rope<{CTYPE[dtype]}, {_work(dtype)}, {p}, {flags}>"


def _vectors(itemsize: int) -> list[int]:
    return [v for v in (16, 8, 4, 2, 1) if v * itemsize <= 16]


def kernel_names(tune: IndexingSettings | None = None) -> dict[str, list[str]]:
    """Every name expression this module can launch under the indexing settings ``tune``
    (default: those in force), by source file."""
    rows_in_flight = (_tuning.current.indexing if tune is None else tune).take_rows_in_flight
    return {
        "indexing.cu": [
            take_name(d, i, v, u)
            for d in CTYPE
            for i in INDEX_TYPES
            for v in _vectors(d.itemsize)
            for u in take_rows_choices(rows_in_flight)
        ]
        + [
            index_add_name(d, i, det)
            for d in ADD_TYPES
            for i in INDEX_TYPES
            for det in (False, True)
        ]
        + [put_name(b, i, v) for b in ITEM_SIZES for i in INDEX_TYPES for v in _vectors(b)]
        + [name for pair in SCAN_NAMES.values() for name in pair]
        + ["ignis::idx::scan_totals", "ignis::idx::repeat_search"],
        "dropout.cu": [
            dropout_name(d, b, v) for d in FLOAT_TYPES for b in (False, True) for v in (False, True)
        ]
        + [dropout_name(d, False, v, True) for d in FLOAT_TYPES for v in (False, True)],
        "rope.cu": [
            rope_name(d, p, il)
            for d in FLOAT_TYPES
            for p in (None, *INDEX_TYPES)
            for il in (False, True)
        ],
    }


# --- launching ---------------------------------------------------------------------------------


def _ptr(arr: NvArray) -> int:
    return arr._storage.ptr + arr._offset


def _caps(backend: Any, tune: IndexingSettings) -> tuple[int, int]:
    """(grid cap, multiprocessors) of the backend's device under ``tune``."""
    key = (backend.gpu.ordinal, tune)
    caps = _grid_caps.get(key)
    if caps is not None:
        _grid_caps.hits += 1
    else:
        sms = max(1, int(backend.gpu.multiprocessor_count))
        caps = _grid_caps.remember(key, (sms * tune.blocks_per_sm, sms))
    return caps  # type: ignore[no-any-return]


def _launch(
    backend: Any,
    source: str,
    name: str,
    grid: int,
    block: Any,
    args: list[Any],
    tune: IndexingSettings | None = None,
) -> None:
    tune = _tuning.current.indexing if tune is None else tune
    grid = max(1, min(grid, _caps(backend, tune)[0]))
    library_kernel(source, name, backend.gpu).launch(grid, block, args, stream=backend.stream)


def _row_block(row_items: int) -> tuple[int, int]:
    """``(bx, by)``: bx threads along a row, by rows per block.

    Short rows get a power of two (several rows share a warp); longer ones whole warps, up to
    THREADS, so a row of 192 items runs 192 threads rather than 256 with 64 idle.
    """
    if row_items <= 32:
        bx = 1 << max(0, (row_items - 1).bit_length())
    else:
        bx = min(THREADS, -(-row_items // 32) * 32)
    return bx, max(1, THREADS // bx)


def _rows_in_flight(backend: Any, rows: int, by: int, tune: IndexingSettings) -> int:
    """Rows per take thread: the most of :func:`take_rows_choices` whose grid (tiles of
    ``by * u`` rows) gives every multiprocessor ``take_min_blocks_per_sm`` blocks, but no fewer
    than would keep the grid within its cap (below that, blocks would loop over tiles one
    after another: fewer loads in flight, not more blocks).

    A block's U loads per thread are in flight together, but a grid of one or two waves of
    such blocks ends with a part-filled wave and multiprocessors whose blocks have all issued
    their loads at once; more waves of shorter blocks keep the loads in flight evenly spread
    to the end (the embedding lookup of 8192 float32 rows of 768: 2 rows a thread, 4096 blocks
    of 192 threads, about 3 waves of 10 blocks per multiprocessor).
    """
    cap, sms = _caps(backend, tune)
    want = tune.take_min_blocks_per_sm * sms
    choices = take_rows_choices(tune.take_rows_in_flight)
    for u, fewer in zip(choices, choices[1:], strict=False):
        if -(-rows // (by * u)) >= want or -(-rows // (by * fewer)) > cap:
            return u
    return choices[-1]


def _aligned16(*ptrs: int) -> bool:
    return all(p % 16 == 0 for p in ptrs)


def _widest_vector(itemsize: int, inner: int, ptrs: tuple[int, ...]) -> int:
    for v in _vectors(itemsize):
        nbytes = v * itemsize
        if inner % v == 0 and all(p % nbytes == 0 for p in ptrs):
            return v
    return 1


# --- hooks -------------------------------------------------------------------------------------


def take(backend: Any, out: NvArray, a: NvArray, indices: NvArray) -> None:
    pa = a._storage.ptr + a._offset
    pi = indices._storage.ptr + indices._offset
    po = out._storage.ptr + out._offset
    tune = _tuning.current.indexing
    gpu = backend.gpu
    # (the vector width depends on the addresses only through their 16-byte alignment). The
    # dtypes go in by name and the plan keeps the settings it was made under, compared by
    # identity first: hashing either costs a Python call, a good part of a repeated lookup's
    # host time.
    key = (
        a._shape,
        indices._shape[0],
        a._dtype.name,
        indices._dtype.name,
        pa & 15,
        po & 15,
        gpu.ordinal,
    )
    plan = _take_plans.get(key)
    if plan is not None and (plan[0] is tune or plan[0] == tune):
        _take_plans.hits += 1
        _, launch, rows, m, n, inner_vecs = plan
        launch(backend.stream, pa, pi, po, rows, m, n, inner_vecs)
        return
    outer, n, inner = a.shape
    m = indices.shape[0]
    vec = _widest_vector(a.dtype.itemsize, inner, (pa, po))
    bx, by = _row_block(inner // vec)
    rows = outer * m
    u = _rows_in_flight(backend, rows, by, tune)
    name = take_name(a.dtype, indices.dtype, vec, u)
    grid = max(1, min(-(-rows // (by * u)), _caps(backend, tune)[0]))
    kernel = library_kernel("indexing.cu", name, gpu)
    kernel.launch(grid, (bx, by), [pa, pi, po, rows, m, n, inner // vec], stream=backend.stream)
    launch = kernel._prepared(gpu, grid, (bx, by))
    if launch is not None:  # (the launch above validated the configuration and the arguments)
        _take_plans.remember(key, (tune, launch, rows, m, n, inner // vec))


def index_add(
    backend: Any, dst: NvArray, indices: NvArray, src: NvArray, alpha: Any, deterministic: bool
) -> None:
    outer, n, inner = dst.shape
    m = indices.shape[0]
    name = index_add_name(dst.dtype, indices.dtype, deterministic)
    alpha = float(alpha) if dst.dtype.kind == "f" else int(alpha)
    if deterministic:
        cols = outer * inner
        _launch(
            backend,
            "indexing.cu",
            name,
            -(-cols // THREADS),
            THREADS,
            [_ptr(dst), _ptr(indices), _ptr(src), outer, m, n, inner, alpha],
        )
        return
    bx, by = _row_block(inner)
    rows = outer * m
    _launch(
        backend,
        "indexing.cu",
        name,
        -(-rows // by),
        (bx, by),
        [_ptr(dst), _ptr(indices), _ptr(src), rows, m, n, inner, alpha],
    )


def put(backend: Any, dst: NvArray, indices: NvArray, src: NvArray) -> None:
    outer, n, inner = dst.shape
    m = indices.shape[0]
    pd, pi, ps = _ptr(dst), _ptr(indices), _ptr(src)
    itemsize = dst.dtype.itemsize
    vec = _widest_vector(itemsize, inner, (pd, ps))
    bx, by = _row_block(inner // vec)
    rows = outer * m
    _launch(
        backend,
        "indexing.cu",
        put_name(itemsize, indices.dtype, vec),
        -(-rows // by),
        (bx, by),
        [pd, pi, ps, rows, m, n, inner // vec],
    )


def _scan_layout(backend: Any, n: int) -> tuple[int, int]:
    """``(blocks, chunk)``: chunks of at least SCAN_CHUNK elements, a multiple of the block
    size, and no more blocks than the grid cap (each block walks its chunk in order)."""
    cap = _caps(backend, _tuning.current.indexing)[0]
    blocks = max(1, min(-(-n // SCAN_CHUNK), cap))
    per_block = -(-n // blocks)
    chunk = -(-per_block // SCAN_THREADS) * SCAN_THREADS
    return -(-n // chunk), chunk


def _scan(backend: Any, kind: str, x: NvArray, out: NvArray) -> None:
    """The three launches of a scan of ``x`` (n,) into ``out`` (see SCAN_NAMES)."""
    from .. import _creation

    n = x.numel
    blocks, chunk = _scan_layout(backend, n)
    # per-block totals, then (in place) their exclusive prefix sums and the grand total
    totals = _creation._new((blocks + 1,), dt.int64, backend.device)
    first, write = SCAN_NAMES[kind]
    px, pt = _ptr(x), _ptr(totals)
    _launch(backend, "indexing.cu", first, blocks, SCAN_THREADS, [px, n, chunk, pt])
    _launch(backend, "indexing.cu", "ignis::idx::scan_totals", 1, SCAN_THREADS, [pt, blocks])
    _launch(backend, "indexing.cu", write, blocks, SCAN_THREADS, [px, n, chunk, pt, _ptr(out)])


def nonzero_flat(backend: Any, out: NvArray, mask: NvArray) -> None:
    if out.numel and mask.numel:
        _scan(backend, "nonzero", mask, out)


def repeat_index(backend: Any, out: NvArray, repeats: NvArray) -> None:
    from .. import _creation

    n, total = repeats.numel, out.numel
    if not (n and total):
        return
    starts = _creation._new((n,), dt.int64, backend.device)
    _scan(backend, "repeat", repeats, starts)
    _launch(
        backend,
        "indexing.cu",
        "ignis::idx::repeat_search",
        -(-total // THREADS),
        THREADS,
        [_ptr(starts), n, total, _ptr(out)],
    )


def _dropout_launch(
    backend: Any,
    y: NvArray,
    mask: NvArray,
    x: NvArray,
    stream_args: list[Any],
    threshold: int,
    scale: float,
    from_state: bool,
) -> None:
    n = x.numel
    px, py, pm = _ptr(x), _ptr(y), _ptr(mask)
    vec = _aligned16(px, py, pm)
    threads = _dropout_threads(n, x.dtype, vec, lambda items: -(-items // 4))
    _launch(
        backend,
        "dropout.cu",
        dropout_name(x.dtype, False, vec, from_state),
        -(-threads // THREADS),
        THREADS,
        [px, py, pm, n, *stream_args, threshold, scale],
    )


def dropout(
    backend: Any,
    y: NvArray,
    mask: NvArray,
    x: NvArray,
    threshold: int,
    scale: float,
    seed: int,
    offset: int,
) -> None:
    k0, k1 = seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF
    stream_args = [k0, k1, offset & 0xFFFFFFFFFFFFFFFF]
    _dropout_launch(backend, y, mask, x, stream_args, threshold, scale, False)


def dropout_from_state(
    backend: Any,
    y: NvArray,
    mask: NvArray,
    x: NvArray,
    threshold: int,
    scale: float,
    state: NvArray,
    offset: int,
) -> None:
    # dropout's launch, with the stream read from ``state`` (seed, base) by the kernel
    stream_args = [_ptr(state), offset & 0xFFFFFFFFFFFFFFFF]
    _dropout_launch(backend, y, mask, x, stream_args, threshold, scale, True)


def dropout_backward(
    backend: Any, out: NvArray, grad: NvArray, mask: NvArray, scale: float
) -> None:
    n = grad.numel
    pg, pm, po = _ptr(grad), _ptr(mask), _ptr(out)
    vec = _aligned16(pg, pm, po)
    threads = _dropout_threads(n, grad.dtype, vec, lambda items: items)
    _launch(
        backend,
        "dropout.cu",
        dropout_name(grad.dtype, True, vec),
        -(-threads // THREADS),
        THREADS,
        [pg, pm, po, n, scale],
    )


def rope(
    backend: Any,
    out: NvArray,
    x: NvArray,
    positions: NvArray | None,
    offset: int,
    base: float,
    interleaved: bool,
    inverse: bool,
) -> None:
    batch, seq, d = x.shape
    half = d // 2
    rows = batch * seq
    bx, by = _row_block(half)
    if positions is None:
        pos_ptr, pos_stride, pos_dtype = 0, 0, None
    else:
        pos_ptr, pos_dtype = _ptr(positions), positions.dtype
        pos_stride = 0 if positions.shape[0] == 1 else seq
    name = rope_name(x.dtype, pos_dtype, interleaved)
    _launch(
        backend,
        "rope.cu",
        name,
        -(-rows // by),
        (bx, by),
        [
            _ptr(x),
            _ptr(out),
            pos_ptr,
            rows,
            seq,
            pos_stride,
            half,
            offset,
            math.log2(base),
            inverse,
        ],
    )


# The module globals these settings replaced keep reading and setting them (deprecated).
_tuning.keep_module_names(sys.modules[__name__], "indexing")


# Exports: the public functions above (the family hooks _families.py points at among them),
# read from the module so that no second list of them is kept here.
__all__ = defined_here(globals())
