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
import statistics
import subprocess
import sys

import numpy as np

VOCAB, CONTEXT, DIM, LAYERS, HEADS, BATCH = 50304, 1024, 768, 12, 12, 8
STEPS, WARMUP = 5, 3


def _median_ms(step, record, elapsed, sync) -> float:
    for _ in range(WARMUP):
        step()
    sync()
    times = []
    for _ in range(3):
        a = record()
        for _ in range(STEPS):
            step()
        b = record()
        sync()
        times.append(elapsed(a, b) / STEPS)
    return statistics.median(times)


def _batch(rank: int):
    rng = np.random.default_rng(rank)
    ids = rng.integers(0, VOCAB, size=(BATCH, CONTEXT + 1))
    return ids[:, :-1].astype(np.int64), ids[:, 1:].astype(np.int64)


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
    xh, yh = _batch(rank)
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
    import torch.nn as tnn
    import torch.nn.functional as F

    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    tdist.init_process_group("nccl")

    class Block(tnn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = tnn.LayerNorm(DIM), tnn.LayerNorm(DIM)
            self.qkv, self.proj = tnn.Linear(DIM, 3 * DIM), tnn.Linear(DIM, DIM)
            self.fc, self.out = tnn.Linear(DIM, 4 * DIM), tnn.Linear(4 * DIM, DIM)

        def forward(self, h):
            b, t, _ = h.shape
            q, k, v = self.qkv(self.ln1(h)).split(DIM, dim=-1)
            q, k, v = (z.view(b, t, HEADS, DIM // HEADS).transpose(1, 2) for z in (q, k, v))
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            h = h + self.proj(a.transpose(1, 2).reshape(b, t, DIM))
            return h + self.out(F.gelu(self.fc(self.ln2(h)), approximate="tanh"))

    class GPT(tnn.Module):
        def __init__(self):
            super().__init__()
            self.tok, self.pos = tnn.Embedding(VOCAB, DIM), tnn.Embedding(CONTEXT, DIM)
            self.blocks = tnn.ModuleList(Block() for _ in range(LAYERS))
            self.ln = tnn.LayerNorm(DIM)

        def forward(self, ids):
            h = self.tok(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device))
            for blk in self.blocks:
                h = blk(h)
            return self.ln(h) @ self.tok.weight.T

    torch.manual_seed(0)
    model = tnn.parallel.DistributedDataParallel(GPT().cuda())
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=True)
    xh, yh = _batch(rank)
    x, y = torch.from_numpy(xh).cuda(), torch.from_numpy(yh).cuda()

    def step():
        opt.zero_grad(set_to_none=False)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x).float().reshape(-1, VOCAB), y.reshape(-1))
        loss.backward()
        opt.step()

    def record():
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        return e

    ms = _median_ms(step, record, lambda a, b: a.elapsed_time(b), torch.cuda.synchronize)
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
    for n in sorted({1, 2, 4, 8, n_gpus} & set(range(1, n_gpus + 1))):
        subprocess.run(
            [
                sys.executable,
                "-m",
                "ignis.distributed.run",
                "--nproc-per-node",
                str(n),
                __file__,
                "--rank",
            ],
            check=True,
        )
    return 0


if __name__ == "__main__":
    if "--rank" in sys.argv:
        rank_main()
    else:
        sys.exit(main())
