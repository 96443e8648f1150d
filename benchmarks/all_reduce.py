"""All-reduce bus bandwidth of ignis.distributed beside torch.distributed (both NCCL), 1 MiB
to 1 GiB of float32, at every available GPU count >= 2.

Bus bandwidth is NCCL-tests' measure: ``bytes / time * 2 (n - 1) / n`` (GB/s), the time the
median of CUDA-event-timed all-reduces after warm-up. ``vs torch`` is ignis's bandwidth over
PyTorch's (1 means equal: both call the same NCCL).

Run on a machine with >= 2 GPUs: ``python benchmarks/all_reduce.py``. It starts itself once
per GPU count through ``python -m ignis.distributed.run`` and prints a Markdown table.
"""

from __future__ import annotations

import os
import subprocess
import sys

from reduction import median_ms, torch_event  # shared timing

SIZES = [1 << s for s in range(20, 31, 2)]  # 1 MiB .. 1 GiB
ITERS, WARMUP = 20, 5


def _median_ms(run, record, elapsed, sync, iters: int) -> float:
    return median_ms(run, record, elapsed, sync, warmup=WARMUP, rounds=3, reps=iters)


def run_per_gpu_count(script: str, counts: list[int]) -> None:
    """Run ``script --rank`` on each number of GPUs in ``counts`` through the launcher."""
    for n in counts:
        subprocess.run(
            [sys.executable, "-m", "ignis.distributed.run", "--nproc-per-node", str(n), script,
             "--rank"],
            check=True,
        )  # fmt: skip


def rank_main() -> None:
    import ignis.distributed as dist

    import ignis

    dist.init_process_group()
    rank, world = dist.get_rank(), dist.get_world_size()
    s = ignis.current_stream()
    ours = {}
    for size in SIZES:
        x = ignis.ones((size // 4,), dtype="float32")
        iters = ITERS if size <= 1 << 26 else 5
        ours[size] = _median_ms(
            lambda x=x: dist.all_reduce(x),
            s.record,
            lambda a, b: a.elapsed_time(b),
            s.synchronize,
            iters,
        )
    dist.destroy_process_group()
    theirs = {}
    try:
        import torch
        import torch.distributed as tdist

        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        tdist.init_process_group("nccl")
        for size in SIZES:
            t = torch.ones(size // 4, device="cuda")
            iters = ITERS if size <= 1 << 26 else 5

            theirs[size] = _median_ms(
                lambda t=t: tdist.all_reduce(t),
                torch_event,
                lambda a, b: a.elapsed_time(b),
                torch.cuda.synchronize,
                iters,
            )
        tdist.destroy_process_group()
    except ImportError:
        pass
    if rank == 0:
        factor = 2 * (world - 1) / world
        for size in SIZES:
            bw = size / (ours[size] * 1e-3) * factor / 1e9
            tb = size / (theirs[size] * 1e-3) * factor / 1e9 if size in theirs else None
            ratio = f"{bw / tb:.2f}" if tb else "-"
            tshow = f"{tb:.1f}" if tb else "-"
            print(
                f"| {world} | {size >> 20} MiB | {ours[size]:.3f} | {bw:.1f} | {tshow} | {ratio} |",
                flush=True,
            )


def main() -> int:
    import ignis

    n_gpus = ignis.device_count() if ignis.is_available() else 0
    if n_gpus < 2:
        print("all_reduce benchmark: needs at least 2 GPUs; skipped")
        return 0
    print("All-reduce of float32, bus bandwidth in GB/s (NCCL_NVLS_ENABLE=0)\n")
    print("| GPUs | size | ignis ms | ignis GB/s | torch GB/s | vs torch |")
    print("|---|---|---|---|---|---|", flush=True)
    run_per_gpu_count(__file__, sorted({2, 4, 8, n_gpus} & set(range(2, n_gpus + 1))))
    return 0


if __name__ == "__main__":
    if "--rank" in sys.argv:
        rank_main()
    else:
        sys.exit(main())
