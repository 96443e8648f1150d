"""Data-parallel GPT training throughput per GPU: ignis DistributedDataParallel beside
PyTorch DistributedDataParallel, at each available GPU count.

Model: GPT-2 small's shape (12 layers, width 768, 12 heads, context 1024, vocabulary 50304,
GELU MLPs, tied embeddings), batch 8 sequences per GPU, bfloat16 compute (ignis: bfloat16
parameters with float32 master weights; PyTorch: float32 parameters under autocast), AdamW.
The figure is tokens per second per GPU over the median of CUDA-event-timed steps;
``vs torch`` is ignis's over PyTorch's (above 1: ignis is faster).

Run on a GPU machine: ``python benchmarks/ddp_gpt.py``; each GPU count runs through
``python -m ignis.distributed.run``. Prints a Markdown table.
"""

from __future__ import annotations

import os
import sys

from all_reduce import run_per_gpu_count
from gpt_step import batch_ids, torch_gpt
from reduction import median_ms, torch_event  # shared timing

VOCAB, CONTEXT, DIM, LAYERS, HEADS, BATCH = 50304, 1024, 768, 12, 12, 8
STEPS, WARMUP = 5, 3


def _median_ms(step, record, elapsed, sync) -> float:
    return median_ms(step, record, elapsed, sync, warmup=WARMUP, rounds=3, reps=STEPS)


def ignis_ms(rank: int) -> float:
    import ignis.distributed as dist
    from ignis_autograd.parallel import DistributedDataParallel

    import ignis
    import ignis_autograd as ag
    from ignis_autograd import nn, optim

    dist.init_process_group()
    ignis.random.seed(0)
    model = nn.GPT(
        VOCAB, CONTEXT, DIM, LAYERS, HEADS, activation="gelu_tanh", device="cuda", dtype="bfloat16"
    )
    ddp = DistributedDataParallel(model)
    opt = optim.AdamW(ddp.parameters(), lr=3e-4, weight_decay=0.1, master_weights=True)
    xh, yh = batch_ids(rank, VOCAB, CONTEXT, BATCH)
    x, y = ignis.asarray(xh), ignis.asarray(yh)

    def step():
        opt.zero_grad()
        loss = ag.cross_entropy(ddp(x).reshape(-1, VOCAB), y.reshape(-1))
        loss.backward()
        opt.step()

    s = ignis.current_stream()
    ms = _median_ms(step, s.record, lambda a, b: a.elapsed_time(b), s.synchronize)
    dist.destroy_process_group()
    return ms


def torch_ms(rank: int) -> float | None:
    try:
        import torch
    except ImportError:
        return None
    import torch.distributed as tdist
    import torch.nn.functional as F

    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    tdist.init_process_group("nccl")
    model = torch.nn.parallel.DistributedDataParallel(
        torch_gpt(VOCAB, CONTEXT, DIM, LAYERS, HEADS)
    )
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=True)
    xh, yh = batch_ids(rank, VOCAB, CONTEXT, BATCH)
    x, y = torch.from_numpy(xh).cuda(), torch.from_numpy(yh).cuda()

    def step():
        opt.zero_grad(set_to_none=False)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x).float().reshape(-1, VOCAB), y.reshape(-1))
        loss.backward()
        opt.step()

    ms = _median_ms(step, torch_event, lambda a, b: a.elapsed_time(b), torch.cuda.synchronize)
    tdist.destroy_process_group()
    return ms


def rank_main() -> None:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    ours = ignis_ms(rank)
    theirs = torch_ms(rank)
    if rank == 0:
        tokens = BATCH * CONTEXT
        tps = tokens / (ours * 1e-3)
        ttps = tokens / (theirs * 1e-3) if theirs else None
        show = f"{ttps:,.0f}" if ttps else "-"
        ratio = f"{tps / ttps:.2f}" if ttps else "-"
        print(f"| {world} | {ours:.1f} | {tps:,.0f} | {show} | {ratio} |", flush=True)


def main() -> int:
    import ignis

    n_gpus = ignis.device_count() if ignis.is_available() else 0
    if n_gpus < 1:
        print("ddp_gpt benchmark: needs a GPU; skipped")
        return 0
    print(
        f"GPT DDP step: {LAYERS} layers, width {DIM}, context {CONTEXT}, batch {BATCH} per "
        "GPU, bfloat16\n"
    )
    print("| GPUs | ignis ms/step | ignis tok/s/GPU | torch tok/s/GPU | vs torch |")
    print("|---|---|---|---|---|", flush=True)
    run_per_gpu_count(__file__, sorted({1, 2, 4, 8, n_gpus} & set(range(1, n_gpus + 1))))
    return 0


if __name__ == "__main__":
    if "--rank" in sys.argv:
        rank_main()
    else:
        sys.exit(main())
