"""Multi-tensor optimizer hooks of the CUDA backend (kernels in ``cuda_src/optim.cu``).

A call packs the addresses and sizes of all its tensors into a table of int64 (see the notes at
the top of ``optim.cu``): ``K`` address slots per tensor, the element counts, then one (tensor,
chunk) entry per block, chunks of the ``optim`` settings' ``chunk`` elements (``ignis.tuning``,
read once per call). The table depends only on the addresses, the sizes and the chunk, so it is
cached (keyed by them) and uploaded once, asynchronously on the stream; later steps with the
same arrays launch with identical arguments, which is what a captured CUDA graph needs. (So the
tables are the backend's own, kept most recently used first, and not among the caches
``ignis.clear_caches()`` empties: a captured graph reads them by address.) Optimizer updates are
two launches (the step counters, then the update); the norm is two (per-chunk partial sums, then
one block combining them in order).

``sgd`` and ``adam`` prepare (build or find the table: the only allocation) and return the
launches as a function, so that the front end can prepare several updates before launching any
(see ``ignis.nn.multi_tensor_batch``).
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ... import _dtypes as dt
from ... import _tuning
from ..._memory import memcpy
from ._kernels import library_kernel
from .reduction import CTYPE, _temp

if TYPE_CHECKING:
    from ..array import NvArray

__all__ = ["sgd", "adam", "l2_norm", "scale", "update_scale", "name_expressions", "pack_table"]

SOURCE = "optim.cu"
THREADS = 512
COUNT_THREADS = 128
NORM_THREADS = 1024
CACHE_SIZE = 256  # tables kept per backend


def name_expressions() -> list[str]:
    """Every template instantiation the hooks can launch (compiled by the tests)."""
    combos = _combos()
    names = [f"ignis::optim_sgd<{p}, {g}, {s}>" for p, g, s in combos]
    names += [f"ignis::optim_adam<{p}, {g}, {s}>" for p, g, s in combos]
    for t in ("float", "double", "ignis::float16", "ignis::bfloat16"):
        names += [f"ignis::optim_sumsq_partial<{t}>", f"ignis::optim_zero<{t}>"]
        names += [f"ignis::optim_scale<{t}, {f}>" for f in ("float", "double")]
    names += [f"ignis::optim_norm_final<{o}>" for o in ("float", "double")]
    # extern "C" kernels still live in namespace ignis: their name expressions are qualified.
    names += [f"ignis::ignis_optim_{k}" for k in ("step_count", "update_scale")]
    return names


def _combos() -> list[tuple[str, str, str]]:
    out = [("float", "float", "float"), ("double", "double", "double")]
    for h in ("ignis::float16", "ignis::bfloat16"):
        out += [(h, "float", "float"), (h, h, "float")]
    return out


class _Tables:
    """Device tables keyed by the addresses and sizes they describe (most recent kept)."""

    def __init__(self) -> None:
        self.entries: OrderedDict[tuple, tuple[NvArray, np.ndarray, int, int]] = OrderedDict()

    def get(
        self, backend: Any, slots: list[list[int]], numels: list[int], chunk: int
    ) -> tuple[NvArray, int, int]:
        key = (tuple(tuple(s) for s in slots), tuple(numels), chunk)
        hit = self.entries.get(key)
        if hit is not None:
            self.entries.move_to_end(key)
            return hit[0], hit[2], hit[3]
        host = pack_table(slots, numels, chunk)
        T, B = len(numels), (len(host) - (len(slots) + 1) * len(numels)) // 2
        table = _temp(backend, host.shape, dt.int64)
        # Asynchronous on the stream: no host synchronization; the host copy stays referenced.
        memcpy(_Region(backend, table), host, host.nbytes, stream=backend.stream)
        self.entries[key] = (table, host, T, B)
        if len(self.entries) > CACHE_SIZE:
            self.entries.popitem(last=False)
        return table, T, B


def pack_table(slots: list[list[int]], numels: list[int], chunk: int) -> np.ndarray:
    """The int64 launch table of ``cuda_src/optim.cu`` (host side).

    ``slots[k][t]`` is the address of slot ``k`` of tensor ``t`` (0: absent); the table holds
    the slots (slot-major), the element counts, then for each block its tensor and its chunk
    index. Tensors of 0 elements get no block.

    Example: ``pack_table([[100, 200]], [5, 0], 4)`` is ``[100, 200, 5, 0, 0, 0, 0, 1]``
    (two blocks, both of tensor 0, chunks 0 and 1).
    """
    T = len(numels)
    chunks = [(n + chunk - 1) // chunk for n in numels]
    parts = [np.asarray(s, dtype=np.int64).reshape(T) for s in slots]
    parts.append(np.asarray(numels, dtype=np.int64).reshape(T))
    parts.append(np.repeat(np.arange(T, dtype=np.int64), chunks))
    per_tensor = [np.arange(c, dtype=np.int64) for c in chunks]
    parts.append(np.concatenate(per_tensor) if per_tensor else np.empty(0, np.int64))
    return np.concatenate(parts)


class _Region:
    __slots__ = ("ptr", "nbytes", "device")

    def __init__(self, backend: Any, arr: NvArray):
        self.ptr = backend.data_ptr(arr)
        self.nbytes = arr.nbytes
        self.device = backend.gpu


def _tables(backend: Any) -> _Tables:
    tables = getattr(backend, "_optim_tables", None)
    if tables is None:
        tables = _Tables()
        backend._optim_tables = tables
    return tables


def _ptrs(backend: Any, arrays: list[NvArray | None] | None, n: int) -> list[int]:
    if arrays is None:
        return [0] * n
    return [0 if a is None else backend.data_ptr(a) for a in arrays]


def _launch(backend: Any, name: str, grid: int, block: int, args: list[Any]) -> None:
    library_kernel(SOURCE, name, backend.gpu).launch(grid, block, args, stream=backend.stream)


def _ptr(backend: Any, a: NvArray | None) -> int:
    return 0 if a is None else backend.data_ptr(a)


def _update(backend: Any, kernel: str, slots: list[list[int]], params: list[NvArray],
            lr: NvArray, found_inf: NvArray | None, extra: list[Any],
            keep: tuple[Any, ...]) -> Callable[[], None]:
    numels = [p.numel for p in params]
    chunk = _tuning.current.optim.chunk  # read once: the table and the launch must agree
    table, T, B = _tables(backend).get(backend, slots, numels, chunk)
    K = len(slots)
    tp, fi = backend.data_ptr(table), _ptr(backend, found_inf)

    def launch(_keep: tuple[Any, ...] = (table, lr, found_inf, keep)) -> None:
        # _keep holds every array whose address is in the table or the arguments until the
        # launches are queued (the table cache may drop the table meanwhile).
        _launch(backend, "ignis::ignis_optim_step_count", -(-T // COUNT_THREADS), COUNT_THREADS,
                [tp, T, K, B, K - 1, fi])
        if B:
            _launch(backend, kernel, B, THREADS,
                    [tp, T, K, B, chunk, backend.data_ptr(lr), int(lr.dtype is dt.float64), fi]
                    + extra)

    return launch


def _types(params: list[NvArray], grads: list[NvArray]) -> str:
    p, g = params[0].dtype, grads[0].dtype
    s = "double" if p is dt.float64 else "float"
    return f"{CTYPE[p.name]}, {CTYPE[g.name]}, {s}"


def sgd(backend: Any, params: list[NvArray], grads: list[NvArray], bufs: list[NvArray] | None,
        masters: list[NvArray | None] | None, steps: list[NvArray], lr: NvArray,
        found_inf: NvArray | None, hyper: dict[str, Any]) -> Callable[[], None]:
    n = len(params)
    slots = [_ptrs(backend, params, n), _ptrs(backend, grads, n), _ptrs(backend, bufs, n),
             _ptrs(backend, masters, n), _ptrs(backend, steps, n)]
    extra = [hyper["momentum"], hyper["dampening"], hyper["weight_decay"], int(hyper["nesterov"])]
    return _update(backend, f"ignis::optim_sgd<{_types(params, grads)}>", slots, params, lr,
                   found_inf, extra, (params, grads, bufs, masters, steps))


def adam(backend: Any, params: list[NvArray], grads: list[NvArray], exp_avgs: list[NvArray],
         exp_avg_sqs: list[NvArray], vmaxes: list[NvArray] | None,
         masters: list[NvArray | None] | None, steps: list[NvArray], lr: NvArray,
         found_inf: NvArray | None, hyper: dict[str, Any]) -> Callable[[], None]:
    n = len(params)
    slots = [_ptrs(backend, params, n), _ptrs(backend, grads, n), _ptrs(backend, exp_avgs, n),
             _ptrs(backend, exp_avg_sqs, n), _ptrs(backend, vmaxes, n),
             _ptrs(backend, masters, n), _ptrs(backend, steps, n)]
    extra = [hyper["beta1"], hyper["beta2"], hyper["eps"], hyper["weight_decay"],
             int(hyper["decoupled"])]
    return _update(backend, f"ignis::optim_adam<{_types(params, grads)}>", slots, params, lr,
                   found_inf, extra, (params, grads, exp_avgs, exp_avg_sqs, vmaxes, masters, steps))


def _single_table(backend: Any, tensors: list[NvArray]) -> tuple[NvArray, int, int, int]:
    """``(table, T, B, chunk)`` of a one-slot launch over ``tensors``."""
    chunk = _tuning.current.optim.chunk
    slots = [_ptrs(backend, tensors, len(tensors))]
    return (*_tables(backend).get(backend, slots, [x.numel for x in tensors], chunk), chunk)


def l2_norm(backend: Any, out: NvArray, tensors: list[NvArray]) -> None:
    table, T, B, chunk = _single_table(backend, tensors)
    partial = _temp(backend, (max(B, 1),), dt.float64)
    if B:
        _launch(backend, f"ignis::optim_sumsq_partial<{CTYPE[tensors[0].dtype.name]}>", B,
                THREADS, [backend.data_ptr(table), T, 1, B, chunk, backend.data_ptr(partial)])
    _launch(backend, f"ignis::optim_norm_final<{CTYPE[out.dtype.name]}>", 1, NORM_THREADS,
            [backend.data_ptr(partial), B, backend.data_ptr(out)])


def scale(backend: Any, tensors: list[NvArray], factor: NvArray, mode: int, max_norm: float,
          found_inf: NvArray | None) -> None:
    table, T, B, chunk = _single_table(backend, tensors)
    if B:
        name = f"ignis::optim_scale<{CTYPE[tensors[0].dtype.name]}, {CTYPE[factor.dtype.name]}>"
        _launch(backend, name, B, THREADS,
                [backend.data_ptr(table), T, 1, B, chunk, backend.data_ptr(factor), mode,
                 max_norm, _ptr(backend, found_inf)])


def zero(backend: Any, tensors: list[NvArray]) -> None:
    table, T, B, chunk = _single_table(backend, tensors)
    if B:
        _launch(backend, f"ignis::optim_zero<{CTYPE[tensors[0].dtype.name]}>", B, THREADS,
                [backend.data_ptr(table), T, 1, B, chunk])


def update_scale(backend: Any, scale_: NvArray, tracker: NvArray, found_inf: NvArray,
                 growth_factor: float, backoff_factor: float, growth_interval: int) -> None:
    _launch(backend, "ignis::ignis_optim_update_scale", 1, 1,
            [backend.data_ptr(scale_), backend.data_ptr(tracker), backend.data_ptr(found_inf),
             growth_factor, backoff_factor, growth_interval])


# The module global this setting replaced keeps reading and setting it (deprecated).
_tuning.keep_module_names(sys.modules[__name__], "optim")
