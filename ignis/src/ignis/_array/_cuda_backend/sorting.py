"""The sorting families of the CUDA backend: sort, cumulative, searchsorted, nonzero and unique
(kernels in ``cuda_src/sort.cu``).

* ``sort``: rows of at most :data:`SMALL_MAX` elements are sorted in shared memory, one block
  per row (several per block for short rows), by a bitonic network on (key, index); rows of at
  most :data:`TILE` by one block each that runs every radix pass in shared memory (read once,
  written once); longer rows by a stable LSD radix sort on 8-bit digits of order-preserving
  keys, Onesweep style: one launch counts the digits of every pass, one launch marks the
  passes whose digit is the same in every key of a row (they have no work: they return at once
  there, and the others alternate the buffers among themselves; no host wait), then one launch
  a digit ranks and scatters each tile, finding its offsets by a decoupled look-back over the
  digit counts of the tiles before it. Complex rows sort by uint64 keys in NumPy's order
  (complex128: two, the low one first) and gather their values. Tiles never cross a row, so
  many rows sort together in the same passes. The first pass reads the input itself and the
  last writes the outputs: no conversion passes. Positions travel as uint32 and are widened to
  int64 once, by the last pass. The pass kernel's tile (:data:`ONESWEEP_ITEMS` keys a thread)
  and the blocks an SM it is compiled for (:data:`ONESWEEP_BLOCKS`) are its tuning constants.
  :data:`RADIX_PATH` ``"lsd"`` (environment ``IGNIS_SORT_RADIX=lsd``) takes the earlier radix
  sort instead, three launches a digit (tile histograms, their scan, a stable scatter), and
  ``"onesweep_v1"`` the first Onesweep pass kernel (no register cap), for comparison.
* ``cumulative``: long rows by a three-pass scan (:data:`SCAN_PATH` ``"three_pass"``): the
  tile totals, their exclusive scan in a fixed order, each tile's scan from its prefix; every
  block streams with 16-byte accesses and none waits for another, and float results are the
  same bits run after run. Rows of one tile take the last launch alone. ``"look_back"``
  (environment ``IGNIS_SCAN=look_back``) takes the one-pass scan with decoupled look-back
  instead, for comparison (each look-back step reads 32 predecessors' status words; tile
  prefixes are folded in tile order, so its float results do not depend on timing either);
  many short rows, and
  columns of a non-last axis when there are enough of them, one thread per row or column;
  otherwise the axis is made last by a copy first.
* ``nonzero`` and ``unique`` compact in two passes around a scan of tile counts and read the
  count once (the one host synchronization of an op whose result size depends on the data).
  ``unique`` compacts into room for every element first and reads the count after its last
  launch, so the device never idles waiting for the host in between.
* ``searchsorted``: one binary search per value.

Nothing else here waits for the device.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from ... import _dtypes as dt
from ..._errors import DTypeError
from .. import _creation
from ._kernels import CTYPE, library_kernel

if TYPE_CHECKING:
    from ..array import NvArray

__all__ = ["sort", "cumulative", "searchsorted", "nonzero", "unique", "kernel_names"]

SOURCE = "sort.cu"
THREADS = 256  # sort.cu's THREADS
TILE = 4096  # sort.cu's TILE: elements of a radix or compaction tile
RADIX = 256  # 8-bit digits
SMALL_MAX = 2048  # longest row sorted in shared memory
# Padded row length of the shared-memory sort -> rows per block (a block of >= 256 threads).
SMALL_ROWS = {32: 16, 128: 4, 512: 1, 2048: 1}
MAX_RADIX_ELEMENTS = 2**31 - 1  # the radix passes count in int32
HIST_CHUNK = 8 * TILE  # sort.cu's HIST_CHUNK: keys one radix_histogram block counts
# Which sort takes rows longer than SMALL_MAX: "onesweep" (rows of one tile in shared memory,
# longer ones by Onesweep passes), "onesweep_v1" (the same with the first Onesweep pass kernel,
# radix_onesweep_v1) or "lsd" (the three-launch passes of radix_upsweep / radix_downsweep for
# every row). Read once per sort; set it to compare them.
RADIX_PATH = os.environ.get("IGNIS_SORT_RADIX", "onesweep")
_RADIX_PATHS = ("onesweep", "onesweep_v1", "lsd")
# radix_onesweep's tuning, by the width of the keys (4: keys of up to 4 bytes, 8: 8-byte keys):
# keys a thread (a tile of THREADS * items keys; a multiple of 4; the tile's exchange is static
# shared memory, so at most 36 for 4 and 16 for 8) and the blocks an SM its registers are capped
# for (None: sort.cu's OnesweepBlocks, 4 at 16 items of 4 bytes, 3 at 16 of 8). Read once per
# sort; sort.cu's defaults are 16 items. The environment may set them for a run:
# IGNIS_SORT_ITEMS="24,16" and IGNIS_SORT_BLOCKS="3,3" (the values for 4, then for 8).
_ONESWEEP_DEFAULT_ITEMS = 16  # sort.cu's ONESWEEP_ITEMS


def _env_pair(name: str, default: int | None) -> dict[int, Any]:
    """``{4: a, 8: b}`` from the environment variable ``name`` ("a,b"; empty: ``default``);
    the values are checked where they are used."""
    parts = [p.strip() for p in os.environ.get(name, "").split(",")]
    values: list[Any] = [default, default]
    for k, p in enumerate(parts[:2]):
        if p:
            values[k] = int(p) if p.isdigit() else p
    return {4: values[0], 8: values[1]}


ONESWEEP_ITEMS: dict[int, Any] = _env_pair("IGNIS_SORT_ITEMS", _ONESWEEP_DEFAULT_ITEMS)
ONESWEEP_BLOCKS: dict[int, Any] = _env_pair("IGNIS_SORT_BLOCKS", None)
# How radix_onesweep matches the lanes of a warp that share a digit: "ballots" (eight ballots a
# key, the default) or "atomic_or" (a shared word per digit that each lane sets its bit in; fewer
# instructions a key). Read once per sort; IGNIS_SORT_RANK=atomic_or sets it for a run.
ONESWEEP_RANK = os.environ.get("IGNIS_SORT_RANK", "ballots")
_RANKS = {"ballots": 0, "atomic_or": 1}  # sort.cu's RANK_BALLOTS, RANK_ATOMIC_OR
# How rows longer than one scan tile are scanned: "three_pass" (tile totals, their prefixes,
# the scan from them: every block streams, nothing waits) or "look_back" (scan_rows: one pass
# with decoupled look-back). Read once per scan; set it to compare the two.
SCAN_PATH = os.environ.get("IGNIS_SCAN", "three_pass")
_SCAN_PATHS = ("three_pass", "look_back")
_OPS = {"sum": "SumOp", "prod": "ProdOp"}
_MODE_UNIQUE, _MODE_NONZERO = 0, 1

# The dtypes with radix-sort kernels: the real ones of the library's C type table (a real dtype
# added there comes here). Complex numbers (COMPLEX_DTYPES) are sorted through uint64 keys in
# NumPy's order (complex_keys in sort.cu) and have their own instances of the scans, searches
# and compactions.
DTYPES: tuple[dt.DType, ...] = tuple(
    d for d in CTYPE if isinstance(d, dt.DType) and d.kind in "biuf"
)
COMPLEX_DTYPES: tuple[dt.DType, ...] = tuple(
    d for d in CTYPE if isinstance(d, dt.DType) and d.kind == "c"
)
_CTYPES = {d: CTYPE[d] for d in DTYPES + COMPLEX_DTYPES}
SCAN_DTYPES = tuple(d for d in DTYPES + COMPLEX_DTYPES if d is not dt.bool_)


def _ctype(dtype: dt.DType, op: str) -> str:
    c = _CTYPES.get(dtype)
    if c is None:
        names = ", ".join(d.name for d in DTYPES + COMPLEX_DTYPES)
        raise DTypeError(
            f"{op}: {dtype.name} arrays have no CUDA kernels; the CUDA backend sorts {names}"
        )
    return c  # type: ignore[no-any-return]


def _flag(v: bool) -> str:
    return "true" if v else "false"


# --- kernel names (pure: the CPU tests compile every one of them) -------------------------------


def upsweep_name(dtype: dt.DType) -> str:
    return f"ignis::sort::radix_upsweep<{_ctype(dtype, 'sort')}>"


def downsweep_name(dtype: dt.DType) -> str:
    return f"ignis::sort::radix_downsweep<{_ctype(dtype, 'sort')}>"


def histogram_name(dtype: dt.DType) -> str:
    return f"ignis::sort::radix_histogram<{_ctype(dtype, 'sort')}>"


def plan_name(dtype: dt.DType) -> str:
    return f"ignis::sort::radix_plan<{_ctype(dtype, 'sort')}>"


def complex_keys_name(dtype: dt.DType) -> str:
    return f"ignis::sort::complex_keys<{_ctype(dtype, 'sort')}>"


def gather_name(dtype: dt.DType) -> str:
    return f"ignis::sort::gather_rows<{_ctype(dtype, 'sort')}>"


def onesweep_name(dtype: dt.DType) -> str:
    """The Onesweep pass kernel of ``dtype`` at the :data:`ONESWEEP_ITEMS` /
    :data:`ONESWEEP_BLOCKS` / :data:`ONESWEEP_RANK` tuning (sort.cu's defaults: no template
    arguments but the type)."""
    c = _ctype(dtype, "sort")
    width = _key_width(dtype)
    items, blocks = _onesweep_items(dtype), ONESWEEP_BLOCKS[width]
    if blocks is not None and (not isinstance(blocks, int) or not 1 <= blocks <= 8):
        raise ValueError(
            f"sort: ONESWEEP_BLOCKS[{width}] must be None or from 1 to 8, got {blocks!r}"
        )
    rank = _RANKS.get(ONESWEEP_RANK)
    if rank is None:
        raise ValueError(
            f"sort: ONESWEEP_RANK must be one of {', '.join(map(repr, _RANKS))}, "
            f"got {ONESWEEP_RANK!r}"
        )
    if rank:
        if items * (8 if width == 8 else 4) < 64:  # sort.cu: the words live in the exchange
            raise ValueError(
                f"sort: ONESWEEP_RANK 'atomic_or' needs tiles of at least 16 KiB: "
                f"ONESWEEP_ITEMS[{width}] of at least {64 // (8 if width == 8 else 4)}, "
                f"got {items}"
            )
        return f"ignis::sort::radix_onesweep<{c}, {items}, {blocks or 0}, {rank}>"
    if blocks is not None:
        return f"ignis::sort::radix_onesweep<{c}, {items}, {blocks}>"
    if items != _ONESWEEP_DEFAULT_ITEMS:
        return f"ignis::sort::radix_onesweep<{c}, {items}>"
    return f"ignis::sort::radix_onesweep<{c}>"


def onesweep_v1_name(dtype: dt.DType) -> str:
    return f"ignis::sort::radix_onesweep_v1<{_ctype(dtype, 'sort')}>"


def _key_width(dtype: dt.DType) -> int:
    return 8 if dtype.itemsize == 8 else 4


def _onesweep_items(dtype: dt.DType) -> int:
    width = _key_width(dtype)
    items = ONESWEEP_ITEMS[width]
    if not isinstance(items, int) or items < 4 or items > 256 or items % 4:
        raise ValueError(
            f"sort: ONESWEEP_ITEMS[{width}] must be a multiple of 4 from 4 to 256, got {items!r}"
        )
    return items


def onesweep_tile(dtype: dt.DType, path: str = "onesweep") -> int:
    """Keys of a tile of the Onesweep pass kernel of ``path`` for ``dtype`` (``"onesweep"``:
    THREADS * :data:`ONESWEEP_ITEMS` of the key width; ``"onesweep_v1"``: :data:`TILE`).

    Example: ``onesweep_tile(ignis.float32)`` is ``4096`` at the default 16 items.
    """
    return TILE if path == "onesweep_v1" else THREADS * _onesweep_items(dtype)


def tile_sort_name(dtype: dt.DType) -> str:
    return f"ignis::sort::sort_rows_tile<{_ctype(dtype, 'sort')}>"


def small_sort_name(dtype: dt.DType, padded: int) -> str:
    return f"ignis::sort::sort_rows_small<{_ctype(dtype, 'sort')}, {padded}, {SMALL_ROWS[padded]}>"


def scan_rows_name(dtype: dt.DType, op: str, include_initial: bool) -> str:
    c = _ctype(dtype, f"cumulative_{op}")
    return f"ignis::sort::scan_rows<{c}, ignis::sort::{_OPS[op]}, {_flag(include_initial)}>"


def scan_totals_name(dtype: dt.DType, op: str) -> str:
    c = _ctype(dtype, f"cumulative_{op}")
    return f"ignis::sort::scan_tile_totals<{c}, ignis::sort::{_OPS[op]}>"


def scan_prefixes_name(dtype: dt.DType, op: str) -> str:
    c = _ctype(dtype, f"cumulative_{op}")
    return f"ignis::sort::scan_tile_prefixes<{c}, ignis::sort::{_OPS[op]}>"


def scan_apply_name(dtype: dt.DType, op: str, include_initial: bool) -> str:
    c = _ctype(dtype, f"cumulative_{op}")
    return f"ignis::sort::scan_tile_apply<{c}, ignis::sort::{_OPS[op]}, {_flag(include_initial)}>"


def scan_cols_name(dtype: dt.DType, op: str, include_initial: bool) -> str:
    c = _ctype(dtype, f"cumulative_{op}")
    return f"ignis::sort::scan_cols<{c}, ignis::sort::{_OPS[op]}, {_flag(include_initial)}>"


def count_name(dtype: dt.DType, mode: int) -> str:
    return f"ignis::sort::count_flags<{_ctype(dtype, 'unique')}, {mode}>"


def compact_name(dtype: dt.DType, mode: int) -> str:
    return f"ignis::sort::compact_flags<{_ctype(dtype, 'unique')}, {mode}>"


def searchsorted_name(dtype: dt.DType) -> str:
    return f"ignis::sort::searchsorted<{_ctype(dtype, 'searchsorted')}>"


UNRAVEL_NAME = "ignis::sort::unravel<ignis::int64>"


def kernel_names() -> list[str]:
    """Every name expression this module can launch."""
    names = []
    for d in DTYPES:
        names += [upsweep_name(d), downsweep_name(d)]
        names += [histogram_name(d), plan_name(d), onesweep_name(d), onesweep_v1_name(d)]
        names.append(tile_sort_name(d))
        names += [small_sort_name(d, p) for p in SMALL_ROWS]
    for d in DTYPES + COMPLEX_DTYPES:
        names.append(searchsorted_name(d))
        names += [count_name(d, m) for m in (_MODE_UNIQUE, _MODE_NONZERO)]
        names += [compact_name(d, m) for m in (_MODE_UNIQUE, _MODE_NONZERO)]
    for d in COMPLEX_DTYPES:
        names += [complex_keys_name(d), gather_name(d)]
    names += [gather_name(dt.int64), gather_name(dt.uint64)]
    for d in SCAN_DTYPES:
        for op in _OPS:
            for init in (False, True):
                if d.kind != "c":  # (complex scans take the three-pass path only)
                    names.append(scan_rows_name(d, op, init))
                names += [scan_cols_name(d, op, init), scan_apply_name(d, op, init)]
            names += [scan_totals_name(d, op), scan_prefixes_name(d, op)]
    return names + [UNRAVEL_NAME]


# --- launching ---------------------------------------------------------------------------------


def _launch(backend: Any, name: str, grid: Any, block: Any, args: list[Any]) -> None:
    library_kernel(SOURCE, name, backend.gpu).launch(grid, block, args, stream=backend.stream)


def _grid_stride(backend: Any, items: int) -> int:
    """Blocks of a grid-stride kernel over ``items``: enough to fill the device, no more."""
    cap = 8 * max(1, int(backend.gpu.multiprocessor_count))
    return max(1, min(-(-items // THREADS), cap))


def _scratch(backend: Any, shape: tuple[int, ...], dtype: dt.DType) -> NvArray:
    return _creation._new(shape, dtype, backend.device)


def _scan_tile(dtype: dt.DType) -> int:
    """Elements of a scan tile (ScanTile in sort.cu: half for accumulators over 4 bytes)."""
    return TILE // 2 if dtype.itemsize >= 8 else TILE


def _scan_rows(
    backend: Any, dtype: dt.DType, op: str, init: bool, src: int, dst: int, rows: int, n: int
) -> list[NvArray]:
    """Queue the scan of ``rows`` rows of ``n`` (the arrays at device addresses ``src`` and
    ``dst``) by the :data:`SCAN_PATH` kernels; returns its workspaces (alive until the caller
    is done queueing)."""
    per_row = -(-n // _scan_tile(dtype))
    tiles = rows * per_row
    path = SCAN_PATH
    if dtype.kind == "c" and path in _SCAN_PATHS:  # the look-back words hold numbers only
        path = "three_pass"
    if path == "three_pass":
        if per_row == 1:  # rows of one tile: no prefixes
            _launch(
                backend,
                scan_apply_name(dtype, op, init),
                tiles,
                THREADS,
                [src, dst, n, 1, tiles, 0],
            )
            return []
        # the tile totals in the scan's accumulator type (4 bytes; 8 or 16 for wider elements)
        totals = _scratch(backend, (tiles * max(4, dtype.itemsize),), dt.uint8)
        tp = backend.data_ptr(totals)
        _launch(backend, scan_totals_name(dtype, op), tiles, THREADS, [src, n, per_row, tp])
        _launch(backend, scan_prefixes_name(dtype, op), rows, THREADS, [tp, per_row, 0])
        _launch(
            backend,
            scan_apply_name(dtype, op, init),
            tiles,
            THREADS,
            [src, dst, n, per_row, tiles, tp],
        )
        return [totals]
    if path != "look_back":
        raise ValueError(f"cumulative: SCAN_PATH must be one of {_SCAN_PATHS}, got {path!r}")
    # one zeroed workspace: [tile counter (16 bytes), aggregate words, prefix words], a word
    # being the value and its flag (ScanWord in sort.cu: 16 bytes for 8-byte accumulators)
    word = 16 if dtype.itemsize == 8 else 8
    status = _scratch(backend, (16 + 2 * tiles * word,), dt.uint8)
    backend.fill(status, 0)
    sp = backend.data_ptr(status)
    _launch(
        backend,
        scan_rows_name(dtype, op, init),
        tiles,
        THREADS,
        [src, dst, n, per_row, sp, sp + 16, sp + 16 + tiles * word],
    )
    return [status]


_OFFSETS_NAME = "ignis::sort::scan_tile_prefixes<ignis::int64, ignis::sort::SumOp>"


def _tile_offsets(backend: Any, x: NvArray, mode: int) -> NvArray:
    """The exclusive offsets of the flagged elements of each tile of flat contiguous ``x``,
    their total last (``tiles + 1`` int64): two launches, no wait."""
    n = x.numel
    tiles = -(-n // TILE)
    offsets = _scratch(backend, (tiles + 1,), dt.int64)
    op = backend.data_ptr(offsets)
    _launch(backend, count_name(x.dtype, mode), tiles, THREADS, [backend.data_ptr(x), n, op])
    _launch(backend, _OFFSETS_NAME, 1, THREADS, [op, tiles, op + 8 * tiles])
    return offsets


def _count(backend: Any, x: NvArray, mode: int) -> tuple[int, NvArray]:
    """(flagged elements of flat contiguous ``x``, the exclusive tile offsets): reads the count
    back, the one synchronization of nonzero."""
    offsets = _tile_offsets(backend, x, mode)
    return int(offsets[offsets.shape[0] - 1 :].item()), offsets


def _copy(backend: Any, a: NvArray) -> NvArray:
    out = _scratch(backend, a.shape, a.dtype)
    backend.copy(out, a)
    return out


# --- hooks -------------------------------------------------------------------------------------


def sort(
    backend: Any, values: NvArray | None, indices: NvArray | None, x: NvArray, descending: bool
) -> None:
    rows, n = x.shape
    dtype = x.dtype
    if dtype.kind == "c":
        _sort_complex(backend, values, indices, x, descending)
        return
    exact = indices is None  # values alone: rebuilt bit for bit from exact keys
    xp = backend.data_ptr(x)
    vp = 0 if values is None else backend.data_ptr(values)
    ip = 0 if indices is None else backend.data_ptr(indices)
    desc = bool(descending)
    if n <= SMALL_MAX:
        padded = next(p for p in SMALL_ROWS if p >= n)
        per_block = SMALL_ROWS[padded]
        _launch(
            backend,
            small_sort_name(dtype, padded),
            -(-rows // per_block),
            (padded // 2, per_block),
            [xp, vp, ip, rows, n, desc, exact],
        )
        return
    path = RADIX_PATH
    if path not in _RADIX_PATHS:
        raise ValueError(f"sort: RADIX_PATH must be one of {_RADIX_PATHS}, got {path!r}")
    if n <= TILE and path != "lsd":
        _launch(backend, tile_sort_name(dtype), rows, THREADS, [xp, vp, ip, n, desc, exact])
        return
    total = rows * n
    if total > MAX_RADIX_ELEMENTS:
        raise ValueError(
            f"sort: the CUDA radix sort takes at most {MAX_RADIX_ELEMENTS} elements, got {total}"
        )
    if path == "lsd":
        _sort_lsd(backend, xp, vp, ip, rows, n, dtype, desc, exact)
    else:
        _sort_onesweep(backend, xp, vp, ip, rows, n, dtype, desc, exact, path)


def _sort_complex(
    backend: Any, values: NvArray | None, indices: NvArray | None, x: NvArray, descending: bool
) -> None:
    """Sort rows of complex ``x`` in NumPy's order: uint64 keys (complex_keys in sort.cu), their
    stable argsort (complex128: by the low key, then stably by the high one), the values
    gathered by it."""
    rows, n = x.shape
    total = rows * n
    wide = x.dtype.itemsize == 16
    hi = _scratch(backend, (rows, n), dt.uint64)
    lo = _scratch(backend, (rows, n), dt.uint64) if wide else None
    grid = _grid_stride(backend, total)
    _launch(
        backend,
        complex_keys_name(x.dtype),
        grid,
        THREADS,
        [
            backend.data_ptr(x),
            backend.data_ptr(hi),
            0 if lo is None else backend.data_ptr(lo),
            total,
        ],
    )
    order = indices if indices is not None else _scratch(backend, (rows, n), dt.int64)
    if lo is None:
        sort(backend, None, order, hi, descending)
    else:  # LSD over the two halves: stable by lo, then stable by hi in that order
        by_lo = _scratch(backend, (rows, n), dt.int64)
        sort(backend, None, by_lo, lo, descending)
        hi_by_lo = _gather(backend, hi, by_lo)
        by_hi = _scratch(backend, (rows, n), dt.int64)
        sort(backend, None, by_hi, hi_by_lo, descending)
        _gather(backend, by_lo, by_hi, order)
    if values is not None:
        _gather(backend, x, order, values)


def _gather(backend: Any, x: NvArray, idx: NvArray, out: NvArray | None = None) -> NvArray:
    """``out[r, j] = x[r, idx[r, j]]`` for (rows, n) arrays (gather_rows in sort.cu)."""
    rows, n = x.shape
    if out is None:
        out = _scratch(backend, (rows, n), x.dtype)
    total = rows * n
    _launch(
        backend,
        gather_name(x.dtype),
        _grid_stride(backend, total),
        THREADS,
        [backend.data_ptr(x), backend.data_ptr(idx), backend.data_ptr(out), total, n],
    )
    return out


def _ping_pong(
    backend: Any, total: int, dtype: dt.DType, passes: int, carry: bool
) -> tuple[list[NvArray], list[NvArray]]:
    """The key (and position) buffers the passes between the first and the last alternate on."""
    keys = [
        _scratch(backend, (total * dtype.itemsize,), dt.uint8) for _ in range(min(2, passes - 1))
    ]
    positions = [_scratch(backend, (total,), dt.int32) for _ in keys] if carry else []
    return keys, positions


def _sort_onesweep(
    backend: Any,
    xp: int,
    vp: int,
    ip: int,
    rows: int,
    n: int,
    dtype: dt.DType,
    desc: bool,
    exact: bool,
    path: str = "onesweep",
) -> None:
    """Queue the Onesweep sort of ``rows`` rows of ``n`` at ``xp``: one histogram launch, one
    launch of the pass plan (which passes have work: see :func:`pass_roles`), one launch a key
    byte (a pass without work in a row returns at once there) of the pass kernel of ``path``."""
    passes = dtype.itemsize  # one per 8-bit digit of the key
    per_seg = -(-n // onesweep_tile(dtype, path))
    tiles = rows * per_seg
    chunks = -(-n // HIST_CHUNK)
    # one zeroed workspace: [a tile counter a pass (8 words), the digit counts of every (row,
    # pass), the pass plan of every row, the look-back words of every (tile, digit), shared by
    # the passes]
    hist_off = 32
    plan_off = hist_off + 4 * rows * passes * RADIX
    status_off = plan_off + 4 * rows
    status_off += -status_off % 8
    ws = _scratch(backend, (status_off + 8 * tiles * RADIX,), dt.uint8)
    backend.fill(ws, 0)
    wp = backend.data_ptr(ws)
    hp, pp, sp = wp + hist_off, wp + plan_off, wp + status_off
    _launch(
        backend, histogram_name(dtype), rows * chunks, THREADS, [xp, hp, n, chunks, desc, exact]
    )
    _launch(backend, plan_name(dtype), rows, THREADS, [hp, pp, n])
    carry = ip != 0
    keys, positions = _ping_pong(backend, rows * n, dtype, passes, carry)
    kp = [backend.data_ptr(k) for k in keys] + [0] * (2 - len(keys))
    ipp = [backend.data_ptr(q) for q in positions] + [0] * (2 - len(positions))
    name = onesweep_v1_name(dtype) if path == "onesweep_v1" else onesweep_name(dtype)
    for p in range(passes):
        args = [xp, kp[0], kp[1], ipp[0], ipp[1], vp, ip, hp, pp, sp, wp + 4 * p, n, per_seg, p]
        _launch(backend, name, tiles, THREADS, args + [carry, desc, exact])


def pass_roles(mask: int, passes: int) -> list[tuple[bool, bool, bool, int, int]]:
    """The host mirror of ``pass_role`` in sort.cu: for each pass of a row whose plan is
    ``mask`` (bit p: pass p has work), ``(runs, first, last, read, write)``: whether it runs,
    whether it is the first / last that runs, and which ping-pong buffer it reads (the first
    reads the input) and writes (the last writes the outputs).

    Example: ``pass_roles(0b0101, 4)[2]`` is ``(True, False, True, 0, 1)``.
    """
    active = bin(mask).count("1")
    roles = []
    for p in range(passes):
        k = bin(mask & ((1 << p) - 1)).count("1")
        roles.append((bool(mask >> p & 1), k == 0, k == active - 1, (k + 1) & 1, k & 1))
    return roles


def plan_mask(hist: Any, n: int) -> int:
    """The host mirror of ``radix_plan`` in sort.cu for one row: ``hist`` (passes x 256 digit
    counts of the row's keys) -> the bit mask of the passes with work (a pass whose digit is
    the same in all ``n`` keys has none; a row of keys all alike keeps its last pass).

    Example: ``plan_mask([[3] + [0] * 255, [1, 2] + [0] * 254], 3)`` is ``0b10``.
    """
    passes = len(hist)
    mask = 0
    for p in range(passes):
        if not any(int(c) == n for c in hist[p]):
            mask |= 1 << p
    return mask or 1 << (passes - 1)


def _sort_lsd(
    backend: Any,
    xp: int,
    vp: int,
    ip: int,
    rows: int,
    n: int,
    dtype: dt.DType,
    desc: bool,
    exact: bool,
) -> None:
    """Queue the three-launch-a-byte radix sort (upsweep, scan of the counts, downsweep)."""
    total = rows * n
    passes = dtype.itemsize  # one per 8-bit digit of the key
    per_seg = -(-n // TILE)
    tiles = rows * per_seg
    length = rows * RADIX * per_seg
    counts = _scratch(backend, (length,), dt.int32)
    offsets = _scratch(backend, (length + 1,), dt.int32)
    cp, op = backend.data_ptr(counts), backend.data_ptr(offsets)
    carry = ip != 0
    keys, positions = _ping_pong(backend, total, dtype, passes, carry)
    keys_in, idx_in = xp, 0
    up, down = upsweep_name(dtype), downsweep_name(dtype)
    for p in range(passes):
        first, last = p == 0, p == passes - 1
        shift = 8 * p
        _launch(backend, up, tiles, THREADS, [keys_in, cp, n, per_seg, shift, first, desc, exact])
        _scan_rows(backend, dt.int32, "sum", True, cp, op, 1, length)
        if last:
            keys_out, idx_out = vp, ip
        else:
            keys_out = backend.data_ptr(keys[p % 2])
            idx_out = backend.data_ptr(positions[p % 2]) if carry else 0
        _launch(
            backend,
            down,
            tiles,
            THREADS,
            [
                keys_in,
                idx_in,
                keys_out,
                idx_out,
                op,
                n,
                per_seg,
                shift,
                first,
                last,
                carry,
                desc,
                exact,
            ],
        )
        keys_in, idx_in = keys_out, idx_out


def cumulative(backend: Any, out: NvArray, x: NvArray, op: str, include_initial: bool) -> None:
    outer, n, inner = x.shape
    dtype = x.dtype
    init = bool(include_initial)
    xp, outp = backend.data_ptr(x), backend.data_ptr(out)
    columns = outer * inner
    if inner == 1 and not (n <= 512 and outer >= 2048):
        _scan_rows(backend, dtype, op, init, xp, outp, outer, n)
    elif inner == 1 or columns >= 8192:
        _launch(
            backend,
            scan_cols_name(dtype, op, init),
            _grid_stride(backend, columns),
            THREADS,
            [xp, outp, outer, n, inner],
        )
    else:  # few long columns: scan them as rows of a transposed copy
        rows_x = x.permute(0, 2, 1).contiguous()
        rows_out = _scratch(backend, (outer, inner, n + init), dtype)
        _scan_rows(
            backend,
            dtype,
            op,
            init,
            backend.data_ptr(rows_x),
            backend.data_ptr(rows_out),
            columns,
            n,
        )
        backend.copy(out, rows_out.permute(0, 2, 1))


def searchsorted(
    backend: Any, out: NvArray, sorted_: NvArray, values: NvArray, right: bool
) -> None:
    n = values.numel
    _launch(
        backend,
        searchsorted_name(values.dtype),
        _grid_stride(backend, n),
        THREADS,
        [
            backend.data_ptr(sorted_),
            sorted_.shape[0],
            backend.data_ptr(values),
            n,
            backend.data_ptr(out),
            bool(right),
        ],
    )


def nonzero(backend: Any, x: NvArray) -> NvArray:
    shape = x.shape
    ndim, n = len(shape), x.numel
    k, offsets = _count(backend, x, _MODE_NONZERO)
    out = _scratch(backend, (ndim, k), dt.int64)
    if k == 0:
        return out
    flat = out if ndim == 1 else _scratch(backend, (k,), dt.int64)
    fp = backend.data_ptr(flat)
    _launch(
        backend,
        compact_name(x.dtype, _MODE_NONZERO),
        -(-n // TILE),
        THREADS,
        [backend.data_ptr(x), 0, n, backend.data_ptr(offsets), 0, fp, 0],
    )
    if ndim > 1:
        base, stride = backend.data_ptr(out), n
        for d, size in enumerate(shape):
            stride //= size
            _launch(
                backend,
                UNRAVEL_NAME,
                _grid_stride(backend, k),
                THREADS,
                [fp, base + 8 * d * k, k, stride, size],
            )
    return out


def unique(
    backend: Any, x: NvArray, want_indices: bool, want_inverse: bool, want_counts: bool
) -> tuple[Any, Any, Any, Any]:
    n = x.numel
    dtype = x.dtype
    need_perm = want_indices or want_inverse
    ordered = _scratch(backend, (1, n), dtype)
    perm = _scratch(backend, (1, n), dt.int64) if need_perm else None
    sort(backend, ordered, perm, x.reshape(1, n), False)
    offsets = _tile_offsets(backend, ordered, _MODE_UNIQUE)
    # compacted into room for n runs before the run count is read: the one wait comes after
    # every launch, not between them
    values = _scratch(backend, (n,), dtype)
    starts = _scratch(backend, (n + 1,), dt.int64) if want_counts or want_indices else None
    inverse = _scratch(backend, (n,), dt.int64) if want_inverse else None
    _launch(
        backend,
        compact_name(dtype, _MODE_UNIQUE),
        -(-n // TILE),
        THREADS,
        [
            backend.data_ptr(ordered),
            0 if perm is None else backend.data_ptr(perm),
            n,
            backend.data_ptr(offsets),
            backend.data_ptr(values),
            0 if starts is None else backend.data_ptr(starts),
            0 if inverse is None else backend.data_ptr(inverse),
        ],
    )
    tiles = offsets.shape[0] - 1
    k = int(offsets[tiles:].item())
    values = values[:k]
    if 2 * k <= n:  # far fewer runs than elements: keep only their room
        values = values.contiguous() if k == 0 else _copy(backend, values)
    counts = indices = None
    if starts is not None:
        if want_counts:
            counts = starts[1 : k + 1] - starts[:k]
        if want_indices:
            from .._indexing import take

            indices = take(perm.reshape(n), starts[:k])  # type: ignore[union-attr]
    return values, indices, inverse, counts
