"""Fused normalization, softmax-backward and cross-entropy hooks of the CUDA backend (kernels in
``cuda_src/norm.cu`` and ``cuda_src/cross_entropy.cu``).

Every hook gets C-contiguous ``(rows, n)`` arrays (see the contract in ``_backend.py``).

Row kernels (norm_fwd, norm_bwd, softmax_bwd) give a row to a warp when it is short (up to
``warp_max_n`` elements and it fits the lanes' registers) and to a block otherwise; the
row is read from memory once and kept in registers while it fits (``items`` packs of ``vec``
elements per thread), else it is re-read for each pass. ``vec`` is 16 bytes of the data type
when every row array is 16-byte aligned and ``n`` is a multiple of it. Block rows give each
thread as many packs as ``block_bytes`` of data allow while the row still spans
``block_min_threads`` threads: a thread's loads are all issued before the row's first
reduction, so bytes in flight per thread, not threads, keep the memory busy (16-bit rows of
4096 get 128 threads x 4 packs, like float32 rows get 256 x 4). Weight and bias gradients are
column sums over the rows: blocks of 32 lanes of ``vec`` columns (16-byte loads) x a split of
the rows write partial sums and a second kernel adds the splits in order (deterministic, no
atomics).

Cross-entropy runs a block per row: one pass for the row's log-sum-exp (online maximum and
sum), the row losses reduced by one single-block kernel in a fixed order (the mean's count of
targets is computed there too, on the device), and one pass for the gradient.

The thresholds and sizes above are the ``norm_loss`` settings of ``ignis.tuning``
(:class:`ignis._tuning.NormLossSettings`; tests shrink them to reach every path on small
inputs), read once per call; the norms' plans are keyed on them.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, NamedTuple

from ... import _dtypes as dt
from ... import _tuning
from ..._caches import PlanCache
from ..._tuning import NormLossSettings
from ._kernels import library_kernel
from .reduction import CTYPE, MAX_GRID, _temp

if TYPE_CHECKING:
    from ..array import NvArray

__all__ = [
    "layer_norm",
    "layer_norm_backward",
    "rms_norm",
    "rms_norm_backward",
    "cross_entropy",
    "cross_entropy_backward",
    "softmax_backward",
    "row_config",
]

CE_MAX_THREADS = 1024  # cross-entropy: the largest block
REDUCE_THREADS = 1024  # the single block of ce_reduce

_BOOL = {False: "false", True: "true"}


class RowLaunch(NamedTuple):
    """One planned launch: kernel name, grid and block."""

    name: str
    grid: Any
    block: Any


class ParamPlan(NamedTuple):
    """The weight/bias gradients of a norm backward: ``splits`` slabs of ``per_split`` rows
    each give partial sums (in ``w_dtype``) by ``partials``; ``finish`` adds them in order."""

    splits: int
    per_split: int
    w_dtype: dt.DType
    partials: RowLaunch
    finish: RowLaunch


class BackwardPlan(NamedTuple):
    """A norm backward: the input-gradient launch (None without ``grad_x``) and the
    weight/bias gradients' plan (None without them)."""

    row: RowLaunch | None
    params: ParamPlan | None


# Plans of the norm kernels: kernel names, grids, blocks and split sizes per (problem, dtypes,
# alignment of every pointer, norm_loss settings); a repeated call (every layer of every step)
# skips the configuration arithmetic and builds only its arguments.
_PLAN_LIMIT = 1024
_plans = PlanCache(
    "cuda.norm_loss.plans",
    _PLAN_LIMIT,
    "norm/loss problem, dtypes, alignments and settings -> kernels, grids and splits",
)
_plans_get = _plans.get  # (a bound method: a C call, no attribute lookup on every norm)


def _launch(backend: Any, source: str, name: str, grid: Any, block: Any, args: list[Any]) -> None:
    """Queue ``name`` of ``cuda_src/<source>`` on the backend's current stream."""
    library_kernel(source, name, backend.gpu).launch(grid, block, args, stream=backend.stream)


def _pow2_at_least(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def _ptr(backend: Any, arr: NvArray | None) -> int | None:
    return None if arr is None else backend.data_ptr(arr)


def _w_size(dtype: dt.DType) -> int:
    """Bytes of the compute type of ``dtype`` (double for float64, else float)."""
    return 8 if dtype == dt.float64 else 4


def _data_size(dtype: dt.DType, tune: NormLossSettings) -> int | None:
    """What sizes the block-row cache of the norms: the data type's bytes (None: the compute
    type's; the ``block_bytes_of_data`` setting)."""
    return dtype.itemsize if tune.block_bytes_of_data else None


def _w_ctype(dtype: dt.DType) -> str:
    return "double" if dtype == dt.float64 else "float"


def vector_width(itemsize: int, n: int, ptrs: list[int | None]) -> int:
    """Elements per pack: 16 bytes of the data when every array (row arrays, and the weight and
    bias where present; None is skipped) is 16-byte aligned and rows of ``n`` elements keep that
    alignment, else 1."""
    vec = 16 // itemsize
    if n % vec or any(p % 16 for p in ptrs if p is not None):
        return 1
    return vec


def row_config(
    n: int,
    vec: int,
    w_size: int,
    arrays: int,
    itemsize: int | None = None,
    tune: NormLossSettings | None = None,
) -> tuple[bool, int, int]:
    """``(warp, items, threads)`` of a row kernel for rows of ``n`` elements of ``itemsize``
    bytes (default ``w_size``) read in packs of ``vec``, caching ``arrays`` row arrays in a
    compute type of ``w_size`` bytes, under the norm_loss settings ``tune`` (default: those in
    force; pure, no GPU needed).

    ``warp``: a warp per row (``threads`` is the block: 32 x ``warp_rows_per_block``); else a
    block of ``threads`` per row. ``items``: packs per thread kept in registers (0: rows too
    long, re-read per pass). Block rows: the most packs per thread (up to ``block_bytes`` of
    data over the arrays; of the compute type when ``vec`` is 1) that leave at least
    ``block_min_threads`` threads.

    Example: ``row_config(4096, 4, 4, 1) == (False, 4, 256)`` (float32);
    ``row_config(4096, 8, 4, 1, itemsize=2) == (False, 4, 128)`` (bfloat16).
    """
    # Single-element loads (vec 1) size the cache in the compute type: many separate values
    # per thread would leave the registers for local memory.
    tune = _tuning.current.norm_loss if tune is None else tune
    size = itemsize if itemsize is not None and vec > 1 else w_size
    if n <= tune.warp_max_n:
        items = _pow2_at_least(-(-n // (32 * vec)))
        if items * vec * w_size * arrays <= tune.warp_bytes:
            return True, items, 32 * tune.warp_rows_per_block
    items = _pow2_floor(max(1, tune.block_bytes // (vec * size * arrays)))
    while items > 1 and _pow2_at_least(-(-n // (vec * items))) < tune.block_min_threads:
        items //= 2
    threads = max(64, _pow2_at_least(-(-n // (vec * items))))
    if threads > 1024:
        return False, 0, 1024
    return False, items, threads


def _pow2_floor(n: int) -> int:
    return 1 << (n.bit_length() - 1)


# --- layer norm / RMS norm ------------------------------------------------------------------------


def _norm_forward(
    backend: Any,
    y: NvArray,
    mean: NvArray | None,
    rstd: NvArray,
    x: NvArray,
    weight: NvArray | None,
    bias: NvArray | None,
    eps: float,
    rms: bool,
) -> None:
    rows, n = x._shape
    data_ptr = backend.data_ptr
    x_ptr, y_ptr = data_ptr(x), data_ptr(y)
    w_ptr, b_ptr = _ptr(backend, weight), _ptr(backend, bias)
    param = weight if weight is not None else bias
    tune = _tuning.current.norm_loss
    key = (
        "fwd",
        rows,
        n,
        x._dtype.name,
        None if param is None else param._dtype.name,
        rms,
        x_ptr % 16,
        y_ptr % 16,
        None if w_ptr is None else w_ptr % 16,
        None if b_ptr is None else b_ptr % 16,
        tune,
    )
    plan = _plans_get(key)
    if plan is None:
        t = CTYPE[x.dtype.name]
        p = CTYPE[param.dtype.name] if param is not None else t
        vec = vector_width(x.dtype.itemsize, n, [x_ptr, y_ptr, w_ptr, b_ptr])
        cfg = row_config(n, vec, _w_size(x.dtype), 1, _data_size(x.dtype, tune), tune)
        name = f"ignis::norm_fwd<{t}, {p}, {vec}, {cfg[1]}, {_BOOL[cfg[0]]}, {_BOOL[rms]}>"
        plan = _plans.remember(key, RowLaunch(name, _grid(rows, cfg), cfg[2]))
    else:
        _plans.hits += 1
    name, grid, block = plan
    args = [
        x_ptr,
        w_ptr,
        b_ptr,
        y_ptr,
        _ptr(backend, mean),
        data_ptr(rstd),
        rows,
        n,
        float(eps),
    ]
    _launch(backend, "norm.cu", name, grid, block, args)


def _grid(rows: int, cfg: tuple[bool, int, int]) -> int:
    warp, _, threads = cfg
    return min(MAX_GRID, -(-rows // (threads // 32)) if warp else rows)


def _norm_backward(
    backend: Any,
    grad_x: NvArray | None,
    grad_weight: NvArray | None,
    grad_bias: NvArray | None,
    grad_y: NvArray,
    x: NvArray,
    mean: NvArray | None,
    rstd: NvArray,
    weight: NvArray | None,
    rms: bool,
) -> None:
    rows, n = x._shape
    data_ptr = backend.data_ptr
    g_ptr, x_ptr = data_ptr(grad_y), data_ptr(x)
    mean_ptr, rstd_ptr = _ptr(backend, mean), data_ptr(rstd)
    gx_ptr = _ptr(backend, grad_x)
    w_ptr = _ptr(backend, weight) if grad_x is not None else None
    tune = _tuning.current.norm_loss
    key = (
        "bwd",
        rows,
        n,
        x._dtype.name,
        grad_y._dtype.name,
        None if weight is None else weight._dtype.name,
        grad_x is not None,
        grad_weight is None,
        grad_bias is None,
        None if grad_weight is None else grad_weight._dtype.name,
        rms,
        g_ptr % 16,
        x_ptr % 16,
        None if gx_ptr is None else gx_ptr % 16,
        None if w_ptr is None else w_ptr % 16,
        tune,
    )
    plan = _plans_get(key)
    if plan is None:
        plan = _plans.remember(
            key,
            _plan_backward(
                grad_x,
                grad_weight,
                grad_bias,
                grad_y,
                x,
                weight,
                rms,
                g_ptr,
                x_ptr,
                gx_ptr,
                w_ptr,
                tune,
            ),
        )
    else:
        _plans.hits += 1
    row_launch, param_plan = plan
    if row_launch is not None:
        name, grid, block = row_launch
        _launch(
            backend,
            "norm.cu",
            name,
            grid,
            block,
            [g_ptr, x_ptr, w_ptr, mean_ptr, rstd_ptr, gx_ptr, rows, n],
        )
    if param_plan is None:
        return
    splits, per_split, w_dtype, partials, finish = param_plan
    pw = _temp(backend, (splits, n), w_dtype)
    pb = _temp(backend, (splits, n), w_dtype) if grad_bias is not None else None
    pw_ptr = data_ptr(pw)
    _launch(
        backend,
        "norm.cu",
        partials.name,
        partials.grid,
        partials.block,
        [g_ptr, x_ptr, mean_ptr, rstd_ptr, pw_ptr, _ptr(backend, pb), rows, n, per_split],
    )
    gw = grad_weight if grad_weight is not None else _temp(backend, (n,), w_dtype)
    _launch(
        backend,
        "norm.cu",
        finish.name,
        finish.grid,
        finish.block,
        [pw_ptr, _ptr(backend, pb), data_ptr(gw), _ptr(backend, grad_bias), splits, n],
    )


def _plan_backward(
    grad_x: NvArray | None,
    grad_weight: NvArray | None,
    grad_bias: NvArray | None,
    grad_y: NvArray,
    x: NvArray,
    weight: NvArray | None,
    rms: bool,
    g_ptr: int,
    x_ptr: int,
    gx_ptr: int | None,
    w_ptr: int | None,
    tune: NormLossSettings,
) -> BackwardPlan:
    """The :class:`BackwardPlan` of :func:`_norm_backward` under the norm_loss settings
    ``tune``."""
    rows, n = x.shape
    t, g = CTYPE[x.dtype.name], CTYPE[grad_y.dtype.name]
    row_launch = None
    if grad_x is not None:
        p = CTYPE[weight.dtype.name] if weight is not None else t
        vec = vector_width(x.dtype.itemsize, n, [g_ptr, x_ptr, gx_ptr, w_ptr])
        cfg = row_config(n, vec, _w_size(x.dtype), 2, _data_size(x.dtype, tune), tune)
        row_launch = RowLaunch(
            f"ignis::norm_bwd<{t}, {g}, {p}, {vec}, {cfg[1]}, {_BOOL[cfg[0]]}, {_BOOL[rms]}>",
            _grid(rows, cfg),
            cfg[2],
        )
    if grad_weight is None and grad_bias is None:
        return BackwardPlan(row_launch, None)
    w_dtype = dt.float64 if x.dtype == dt.float64 else dt.float32
    pvec = vector_width(x.dtype.itemsize, n, [g_ptr, x_ptr]) if tune.param_vector_loads else 1
    col_tiles = -(-n // (32 * pvec))
    splits = 1
    target = tune.param_target_blocks
    if col_tiles < target:
        splits = max(1, min(-(-target // col_tiles), rows // tune.param_min_rows))
    per_split = -(-rows // splits)
    splits = -(-rows // per_split)
    out = CTYPE[grad_weight.dtype.name] if grad_weight is not None else CTYPE[w_dtype.name]
    partials = RowLaunch(
        f"ignis::norm_param_partials<{t}, {g}, {pvec}, {_BOOL[rms]}>",
        (col_tiles, splits),
        (32, tune.param_block_y),
    )
    finish = RowLaunch(
        f"ignis::norm_param_finish<{_w_ctype(x.dtype)}, {out}>",
        min(MAX_GRID, -(-n // 256)),
        256,
    )
    return BackwardPlan(row_launch, ParamPlan(splits, per_split, w_dtype, partials, finish))


def layer_norm(
    backend: Any,
    y: NvArray,
    mean: NvArray,
    rstd: NvArray,
    x: NvArray,
    weight: NvArray | None,
    bias: NvArray | None,
    eps: float,
) -> None:
    """The ``layer_norm`` hook."""
    _norm_forward(backend, y, mean, rstd, x, weight, bias, eps, rms=False)


def rms_norm(
    backend: Any, y: NvArray, rstd: NvArray, x: NvArray, weight: NvArray | None, eps: float
) -> None:
    """The ``rms_norm`` hook."""
    _norm_forward(backend, y, None, rstd, x, weight, None, eps, rms=True)


def layer_norm_backward(
    backend: Any,
    grad_x: NvArray | None,
    grad_weight: NvArray | None,
    grad_bias: NvArray | None,
    grad_y: NvArray,
    x: NvArray,
    mean: NvArray,
    rstd: NvArray,
    weight: NvArray | None,
) -> None:
    """The ``layer_norm_backward`` hook."""
    _norm_backward(backend, grad_x, grad_weight, grad_bias, grad_y, x, mean, rstd, weight, False)


def rms_norm_backward(
    backend: Any,
    grad_x: NvArray | None,
    grad_weight: NvArray | None,
    grad_y: NvArray,
    x: NvArray,
    rstd: NvArray,
    weight: NvArray | None,
) -> None:
    """The ``rms_norm_backward`` hook."""
    _norm_backward(backend, grad_x, grad_weight, None, grad_y, x, None, rstd, weight, True)


# --- softmax backward -----------------------------------------------------------------------------


def softmax_backward(backend: Any, grad_x: NvArray, grad_y: NvArray, y: NvArray, log: bool) -> None:
    """The ``softmax_backward`` hook."""
    rows, n = y.shape
    t, g = CTYPE[y.dtype.name], CTYPE[grad_y.dtype.name]
    ptrs = [backend.data_ptr(grad_y), backend.data_ptr(y), backend.data_ptr(grad_x)]
    vec = vector_width(y.dtype.itemsize, n, ptrs)
    # Softmax backward keeps sizing the cache in the compute type (fewer packs per thread for
    # 16-bit rows than the norms): it already runs ahead of PyTorch.
    cfg = row_config(n, vec, _w_size(y.dtype), 2, None, _tuning.current.norm_loss)
    _launch(
        backend,
        "norm.cu",
        f"ignis::softmax_bwd<{t}, {g}, {vec}, {cfg[1]}, {_BOOL[cfg[0]]}>",
        _grid(rows, cfg),
        cfg[2],
        ptrs + [rows, n, bool(log)],
    )


# --- cross-entropy --------------------------------------------------------------------------------


def _ce_threads(n_classes: int) -> int:
    values = _tuning.current.norm_loss.ce_values
    return min(CE_MAX_THREADS, max(32, _pow2_at_least(-(-n_classes // values))))


def _ignore(ignore_index: int | None) -> tuple[int, bool]:
    return (0, False) if ignore_index is None else (int(ignore_index), True)


def cross_entropy(
    backend: Any,
    loss: NvArray,
    lse: NvArray,
    logits: NvArray,
    targets: NvArray,
    ignore_index: int | None,
    label_smoothing: float,
    reduction: str,
) -> None:
    """The ``cross_entropy`` hook."""
    rows, n_classes = logits.shape
    t, i = CTYPE[logits.dtype.name], CTYPE[targets.dtype.name]
    w_dtype = lse.dtype
    ig, has_ignore = _ignore(ignore_index)
    direct = reduction == "none" and loss.dtype == w_dtype
    rows_loss = loss if direct else _temp(backend, (rows,), w_dtype)
    _launch(
        backend,
        "cross_entropy.cu",
        f"ignis::ce_fwd<{t}, {i}, {16 // logits.dtype.itemsize}>",
        min(MAX_GRID, rows),
        _ce_threads(n_classes),
        [
            backend.data_ptr(logits),
            backend.data_ptr(targets),
            backend.data_ptr(rows_loss),
            backend.data_ptr(lse),
            rows,
            n_classes,
            ig,
            has_ignore,
            float(label_smoothing),
        ],
    )
    if reduction == "none":
        if not direct:
            backend.copy(loss, rows_loss)
        return
    _launch(
        backend,
        "cross_entropy.cu",
        f"ignis::ce_reduce<{_w_ctype(logits.dtype)}, {CTYPE[loss.dtype.name]}, {i}>",
        1,
        REDUCE_THREADS,
        [
            backend.data_ptr(rows_loss),
            backend.data_ptr(targets),
            backend.data_ptr(loss),
            None,
            rows,
            ig,
            has_ignore,
            reduction == "mean",
        ],
    )


def cross_entropy_backward(
    backend: Any,
    grad_logits: NvArray,
    grad_loss: NvArray,
    logits: NvArray,
    targets: NvArray,
    lse: NvArray,
    ignore_index: int | None,
    label_smoothing: float,
    reduction: str,
) -> None:
    """The ``cross_entropy_backward`` hook."""
    rows, n_classes = logits.shape
    t, i, w = CTYPE[logits.dtype.name], CTYPE[targets.dtype.name], _w_ctype(logits.dtype)
    ig, has_ignore = _ignore(ignore_index)
    count = None
    if reduction == "mean":
        count = _temp(backend, (1,), dt.int64)
        _launch(
            backend,
            "cross_entropy.cu",
            f"ignis::ce_reduce<{w}, {w}, {i}>",
            1,
            REDUCE_THREADS,
            [
                None,
                backend.data_ptr(targets),
                None,
                backend.data_ptr(count),
                rows,
                ig,
                has_ignore,
                True,
            ],
        )
    z_ptr, g_ptr = backend.data_ptr(logits), backend.data_ptr(grad_logits)
    vec = 16 // logits.dtype.itemsize if (g_ptr - z_ptr) % 16 == 0 else 1
    _launch(
        backend,
        "cross_entropy.cu",
        f"ignis::ce_bwd<{t}, {i}, {vec}>",
        min(MAX_GRID, rows),
        _ce_threads(n_classes),
        [
            backend.data_ptr(grad_loss),
            _ptr(backend, count),
            z_ptr,
            backend.data_ptr(targets),
            backend.data_ptr(lse),
            g_ptr,
            rows,
            n_classes,
            ig,
            has_ignore,
            float(label_smoothing),
            reduction == "none",
        ],
    )


# The module globals these settings replaced keep reading and setting them (deprecated).
_tuning.keep_module_names(sys.modules[__name__], "norm_loss")
