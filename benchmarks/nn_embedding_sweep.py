"""The embedding lookup (ignis.nn.embedding: the gather kernel take_rows) under a sweep of the
``indexing`` tuning settings that choose its launch, beside PyTorch's ``F.embedding``.

Cases: the GPT-2-sized table of ``benchmarks/nn_indexing.py`` (50304 x 768) looked up by 8192
and by 65536 token ids, float32 and bfloat16. For each setting, ``(take_rows_in_flight,
take_min_blocks_per_sm, blocks_per_sm)``, the table gives the kernel instance and grid the
launch picked, its registers per thread, its mean and minimum device time per call (the
profiler's CUDA events around each launch) and the bandwidth that mean gives (the picked rows
read once and written once, plus the ids), then the wall time per call of back-to-back calls
(host time included, as in ``nn_indexing.py``). PyTorch's rows give the device time of its
gather kernel (torch.profiler) and its wall time per call; ``vs torch`` compares device times.

Run on a GPU machine: ``python benchmarks/nn_embedding_sweep.py``. Prints a Markdown table.
"""

from __future__ import annotations

import statistics
import sys
from typing import Any

from reduction import time_ignis, time_torch

import ignis

VOCAB, DIM = 50304, 768
TOKENS = (8192, 65536)
CALLS = 50
# (take_rows_in_flight, take_min_blocks_per_sm, blocks_per_sm); the first row is the default
SETTINGS = [
    (4, 24, 32),  # the default: 2 rows a thread for the 8192 float32 ids, 1 for bfloat16
    (4, 4, 32),  # the previous default: 4 rows a thread whenever 4 blocks per SM remain
    (4, 0, 32),  # always 4 rows a thread
    (2, 0, 32),  # always 2 (bfloat16: 2048 blocks)
    (1, 0, 32),  # always 1, grid capped at 32 blocks per SM (blocks loop)
    (1, 0, 64),  # PyTorch's shape for 8192 float32 ids: one row a thread, a block per row
    (8, 0, 32),  # 8 rows a thread
    (4, 24, 128),  # the default with a larger grid cap (65536 ids: fewer tiles per block)
]


def ignis_device_us(fn: Any) -> tuple[str, Any, Any, float, float]:
    """(kernel, grid, registers, mean us, min us) of ``CALLS`` calls of ``fn``."""
    fn()
    ignis.synchronize()
    with ignis.profile() as prof:
        for _ in range(CALLS):
            fn()
        ignis.synchronize()
    (row,) = [s for s in prof.summary() if s.name.startswith("ignis::idx::take_rows")]
    return row.name, row.grid, row.registers, row.mean_us, row.min_us


def torch_device_us(fn: Any) -> float:
    """Mean device time per call of the CUDA kernels ``fn`` launches (torch.profiler)."""
    import torch

    fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(CALLS):
            fn()
        torch.cuda.synchronize()
    total = 0.0
    for e in prof.key_averages():
        t = getattr(e, "self_device_time_total", None)
        if t is None:
            t = getattr(e, "self_cuda_time_total", 0.0)
        total += t
    return total / CALLS


def main() -> int:
    if not ignis.is_available():
        print("benchmarks/nn_embedding_sweep.py needs a CUDA GPU", file=sys.stderr)
        return 1
    import torch

    print(f"# Embedding lookup: take settings on {ignis.Device(0).name}\n")
    print(
        "| dtype | ids | setting (rows, min blocks/SM, cap/SM) | kernel | grid | regs "
        "| device us mean / min | GB/s | wall us/call | vs torch (device) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    gen = torch.Generator(device="cuda").manual_seed(0)
    saved = ignis.tuning()
    try:
        for dtype in ("float32", "bfloat16"):
            tdt = getattr(torch, dtype)
            w = torch.randn(VOCAB, DIM, device="cuda", dtype=tdt, generator=gen)
            wi = ignis.from_dlpack(w)
            for tokens in TOKENS:
                ids = torch.randint(0, VOCAB, (tokens,), device="cuda", generator=gen)
                idsi = ignis.from_dlpack(ids)
                nbytes = 2 * tokens * DIM * w.element_size() + tokens * 8

                def t(ids: Any = ids, w: Any = w) -> Any:
                    return torch.nn.functional.embedding(ids, w)

                t_dev = torch_device_us(t)
                t_wall = time_torch(t) * 1e3
                print(
                    f"| {dtype} | {tokens} | torch | vectorized_gather_kernel | - | - "
                    f"| {t_dev:.1f} | {nbytes / t_dev / 1e3:.0f} | {t_wall:.1f} | 1.00x |"
                )
                for rows, min_blocks, cap in SETTINGS:
                    ignis.tuning.set(
                        indexing=dict(
                            take_rows_in_flight=rows,
                            take_min_blocks_per_sm=min_blocks,
                            blocks_per_sm=cap,
                        )
                    )

                    def f(idsi: Any = idsi, wi: Any = wi) -> Any:
                        return ignis.nn.embedding(idsi, wi)

                    name, grid, regs, mean_us, min_us = ignis_device_us(f)
                    wall = statistics.median(time_ignis(f) for _ in range(3)) * 1e3
                    short = name.replace("ignis::idx::take_rows", "").replace("ignis::", "")
                    print(
                        f"| {dtype} | {tokens} | {rows}, {min_blocks}, {cap} | {short} "
                        f"| {grid[0] if grid else '-'} | {regs} | {mean_us:.1f} / {min_us:.1f} "
                        f"| {nbytes / mean_us / 1e3:.0f} | {wall:.1f} | {t_dev / mean_us:.2f}x |",
                        flush=True,
                    )
                    ignis.tuning.set(saved)
            torch.cuda.empty_cache()
    finally:
        ignis.tuning.set(saved)
    return 0


if __name__ == "__main__":
    sys.exit(main())
