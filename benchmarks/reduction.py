"""Bandwidth of sum and softmax on large inputs: ignis beside PyTorch and CuPy, in one process.

Cases: a full sum of 2**28 elements, a sum over the last axis and over the first axis of a
16384 x 16384 matrix, softmax along the last axis of 32768 x 4096 and 4096 x 32768 matrices,
each in float32 and bfloat16 (CuPy has no bfloat16). All libraries read the same device memory
(shared through DLPack). Each time is the median of several rounds timed with CUDA events on the
library's own stream, each round running the op a few times back to back after a warm-up.
Bandwidth counts bytes read plus bytes written once (the floor for the op); ``vs torch`` is
ignis's bandwidth over PyTorch's. The last column is the largest relative difference between
ignis's and PyTorch's results.

A second table times the kernel variants of the cases the column-reduction and softmax
kernels were tuned for (sum over axis 0 of 16384 x 16384, softmax of bfloat16 4096 x 32768):
the current choice, the previous kernel (still selectable through the module switches of
``ignis._array._cuda_backend.reduction``) and a few fixed split counts, each beside PyTorch.

Run on a GPU machine: ``python benchmarks/reduction.py``. Prints Markdown tables.
"""

from __future__ import annotations

import contextlib
import statistics
import sys
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

import ignis

ROUNDS = 7
REPS = 5
WARMUP = 2


def median_ms(
    run: Callable[[], Any],
    record: Callable[[], Any],
    elapsed: Callable[[Any, Any], float],
    sync: Callable[[], None],
    *,
    warmup: int = WARMUP,
    rounds: int = ROUNDS,
    reps: int = REPS,
) -> float:
    """Median over ``rounds`` of milliseconds per call of ``run`` (device time between events
    around ``reps`` calls), after ``warmup`` calls."""
    for _ in range(warmup):
        run()
    sync()
    samples = []
    for _ in range(rounds):
        start = record()
        for _ in range(reps):
            run()
        end = record()
        sync()
        samples.append(elapsed(start, end) / reps)
    return statistics.median(samples)


def time_ignis(fn: Callable[[], Any]) -> float:
    stream = ignis.current_stream()
    return median_ms(
        fn, lambda: stream.record(), lambda a, b: a.elapsed_time(b), stream.synchronize
    )


def torch_event() -> Any:
    """A timing CUDA event recorded now on PyTorch's current stream."""
    import torch

    e = torch.cuda.Event(enable_timing=True)
    e.record()
    return e


def time_torch(fn: Callable[[], Any]) -> float:
    import torch

    return median_ms(fn, torch_event, lambda a, b: a.elapsed_time(b), torch.cuda.synchronize)


def time_cupy(fn: Callable[[], Any]) -> float:
    import cupy

    def record() -> Any:
        e = cupy.cuda.Event()
        e.record()
        return e

    return median_ms(
        fn,
        record,
        lambda a, b: cupy.cuda.get_elapsed_time(a, b),
        cupy.cuda.get_current_stream().synchronize,
    )


def max_rel_diff(ours: Any, theirs: Any) -> float:
    a = np.asarray(ours.to_host(), dtype=np.float64)
    b = theirs.double().cpu().numpy()  # exact for every input dtype (int32 too)
    scale = np.maximum(np.abs(b), np.max(np.abs(b)) * 1e-3 + 1e-30)
    return float(np.max(np.abs(a - b) / scale))


def cases() -> list[tuple[str, tuple[int, ...], Callable, Callable, Callable | None, int]]:
    """(name, shape, ignis fn, torch fn, cupy fn or None, output elements)."""
    import torch

    n_full = 1 << 28
    return [
        ("sum (all)", (n_full,), lambda x: ignis.sum(x), lambda t: t.sum(), lambda c: c.sum(), 1),
        (
            "sum axis=-1",
            (16384, 16384),
            lambda x: ignis.sum(x, axis=-1),
            lambda t: t.sum(dim=-1),
            lambda c: c.sum(axis=-1),
            16384,
        ),
        (
            "sum axis=0",
            (16384, 16384),
            lambda x: ignis.sum(x, axis=0),
            lambda t: t.sum(dim=0),
            lambda c: c.sum(axis=0),
            16384,
        ),
        (
            "softmax axis=-1",
            (32768, 4096),
            lambda x: ignis.softmax(x, axis=-1),
            lambda t: torch.softmax(t, dim=-1),
            _cupy_softmax,
            32768 * 4096,
        ),
        (
            "softmax axis=-1",
            (4096, 32768),
            lambda x: ignis.softmax(x, axis=-1),
            lambda t: torch.softmax(t, dim=-1),
            _cupy_softmax,
            4096 * 32768,
        ),
    ]


def _cupy_softmax(c: Any) -> Any:
    from cupyx.scipy.special import softmax

    return softmax(c, axis=-1)


def bench_row(case: tuple, dtype: str, gen: Any, cupy: Any) -> str:
    """One table row: the case in ``dtype`` timed on every library."""
    import torch

    name, shape, f_ignis, f_torch, f_cupy, n_out = case
    t = torch.randn(shape, device="cuda", dtype=getattr(torch, dtype), generator=gen)
    x = ignis.from_dlpack(t)
    torch.cuda.synchronize()
    size = t.element_size()
    nbytes = t.numel() * size + n_out * size
    gbs_ignis = nbytes / time_ignis(lambda: f_ignis(x)) / 1e6
    gbs_torch = nbytes / time_torch(lambda: f_torch(t)) / 1e6
    cupy_cell = "n/a"
    if cupy is not None and f_cupy is not None and dtype == "float32":
        c = cupy.from_dlpack(t)
        try:
            cupy_cell = f"{nbytes / time_cupy(lambda: f_cupy(c)) / 1e6:.0f}"
        except Exception as exc:  # noqa: BLE001 - a missing CuPy feature is a table cell
            cupy_cell = f"n/a ({type(exc).__name__})"
    diff = max_rel_diff(f_ignis(x), f_torch(t))
    dims = "x".join(map(str, shape))
    return (
        f"| {name} | {dtype} | {dims} | {gbs_ignis:.0f} | {gbs_torch:.0f} | {cupy_cell} | "
        f"{gbs_ignis / gbs_torch:.2f}x | {diff:.1e} |"
    )


@contextlib.contextmanager
def knobs(tuning: dict[str, dict[str, Any]] | None = None, **patches: Any) -> Iterator[None]:
    """``ignis.tuning(**tuning)`` for the duration of a block, and functions of the cuda
    backend's reduction module replaced by ``patches`` (a fixed split count) for it."""
    from ignis._array._cuda_backend import reduction

    old = {name: getattr(reduction, name) for name in patches}
    if patches:  # remembered launches were planned without the patches (and then with them)
        ignis.clear_caches()
    for name, value in patches.items():
        setattr(reduction, name, value)
    try:
        with ignis.tuning(**(tuning or {})):  # (recipes are keyed on the settings)
            yield
    finally:
        for name, value in old.items():
            setattr(reduction, name, value)
        if patches:
            ignis.clear_caches()


def _fixed_splits(count: int) -> Callable[..., int]:
    return lambda units, n, *rest: max(1, min(count, n))


def variants() -> list[tuple[str, str, tuple[int, ...], str, dict[str, Any]]]:
    """(case, variant, shape, dtype, :func:`knobs` arguments) for the tuned cases."""
    rows: list[tuple[str, str, tuple[int, ...], str, dict[str, Any]]] = []
    for dtype in ("float32", "bfloat16"):
        case = "sum axis=0"
        shape = (16384, 16384)
        rows.append((case, "reduce_cols_wide (default)", shape, dtype, {}))
        off = {"tuning": {"reduction": {"cols_wide": False}}}
        rows.append((case, "reduce_cols (cols_wide=False)", shape, dtype, off))
        for count in (4, 8, 16, 32):
            rows.append(
                (
                    case,
                    f"reduce_cols_wide, {count} splits",
                    shape,
                    dtype,
                    {"wide_splits": _fixed_splits(count)},
                )
            )
    for dtype in ("bfloat16", "float16"):
        case = "softmax axis=-1"
        shape = (4096, 32768)
        rows.append((case, "softmax_packed (default)", shape, dtype, {}))
        off = {"tuning": {"softmax": {"packed": False}}}
        rows.append((case, "softmax_block (packed=False)", shape, dtype, off))
    return rows


def _variant_fns(softmax: bool, x: Any, t: Any) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """(ignis call, torch call) of a tuned case on the same data."""
    import torch

    if softmax:
        return lambda: ignis.softmax(x, axis=-1), lambda: torch.softmax(t, dim=-1)
    return lambda: ignis.sum(x, axis=0), lambda: t.sum(dim=0)


def bench_variants(gen: Any) -> None:
    """The second table: kernel variants of the tuned cases beside PyTorch."""
    import torch

    print("\n| op | variant | dtype | shape | ignis GB/s | torch GB/s | vs torch | max rel diff |")
    print("|---|---|---|---|---|---|---|---|")
    data: dict[tuple[Any, ...], Any] = {}
    torch_gbs: dict[tuple[Any, ...], float] = {}
    for case, variant, shape, dtype, settings in variants():
        key = (case, shape, dtype)
        if key not in data:
            data.clear()
            torch.cuda.empty_cache()
            data[key] = torch.randn(
                shape, device="cuda", dtype=getattr(torch, dtype), generator=gen
            )
        t = data[key]
        x = ignis.from_dlpack(t)
        softmax = case.startswith("softmax")
        n_out = t.numel() if softmax else shape[1]
        nbytes = (t.numel() + n_out) * t.element_size()
        f_ignis, f_torch = _variant_fns(softmax, x, t)
        if key not in torch_gbs:
            torch_gbs[key] = nbytes / time_torch(f_torch) / 1e6
        with knobs(**settings):
            gbs = nbytes / time_ignis(f_ignis) / 1e6
            diff = max_rel_diff(f_ignis(), f_torch())
        dims = "x".join(map(str, shape))
        print(
            f"| {case} | {variant} | {dtype} | {dims} | {gbs:.0f} | {torch_gbs[key]:.0f} | "
            f"{gbs / torch_gbs[key]:.2f}x | {diff:.1e} |",
            flush=True,
        )
    data.clear()
    torch.cuda.empty_cache()
    _print_wide_plan()


def _print_wide_plan() -> None:
    """The split the planner picks for the float32 16384 x 16384 axis-0 sum (a note for tuning)."""
    from ignis._array._backend import get_backend
    from ignis._array._cuda_backend import reduction

    backend = get_backend("cuda:0")
    name = "ignis::reduce_cols_wide<float, float, ignis::SumOp<float>, 4, 2>"
    resident = reduction._resident_blocks(backend, name, (32, 8))
    splits = reduction.wide_splits(64, 16384, resident, 1024, 16384 * 4)
    print(
        f"\nreduce_cols_wide on this device: {resident} resident blocks of 256 threads; "
        f"float32 16384 x 16384 axis 0 runs 64 strips x {splits} splits"
    )


def main() -> int:
    if not ignis.is_available():
        print("benchmarks/reduction.py needs a CUDA GPU", file=sys.stderr)
        return 1
    import torch

    try:
        import cupy
    except ImportError:
        cupy = None
    print(f"# Reductions on {ignis.Device(0).name}\n")
    print("| op | dtype | shape | ignis GB/s | torch GB/s | cupy GB/s | vs torch | max rel diff |")
    print("|---|---|---|---|---|---|---|---|")
    gen = torch.Generator(device="cuda").manual_seed(0)
    for case in cases():
        for dtype in ("float32", "bfloat16"):
            print(bench_row(case, dtype, gen, cupy), flush=True)
            torch.cuda.empty_cache()
    bench_variants(gen)
    return 0


if __name__ == "__main__":
    sys.exit(main())
