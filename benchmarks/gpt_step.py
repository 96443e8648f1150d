"""A GPT training step (forward, backward, AdamW) in ignis_autograd beside the same model in
eager PyTorch, in one process.

Model: 6 layers, width 384, 6 heads, context 256, batch 64, a 65-symbol vocabulary (a
character model), GELU MLPs of 4x width, pre-norm LayerNorm, tied embeddings, no dropout.
Modes: float32, and bfloat16 compute (ignis: bfloat16 parameters with float32 master weights in
the optimizer; PyTorch: float32 parameters under ``torch.autocast(bfloat16)``). ignis runs both
eagerly and as one captured CUDA graph per step (:func:`ignis_autograd.capture_step`).
Each time is the median over rounds of CUDA-event-timed steps after warm-up. ``vs torch`` is
PyTorch's time over ignis's (above 1 means ignis is faster).

Run on a GPU machine: ``python benchmarks/gpt_step.py``. Prints a Markdown table.
"""

from __future__ import annotations

import math
import statistics
import sys

import numpy as np

import ignis
import ignis_autograd as ag
from ignis_autograd import nn, optim

VOCAB, CONTEXT, DIM, LAYERS, HEADS, BATCH = 65, 256, 384, 6, 6, 64
ROUNDS, STEPS, WARMUP = 5, 5, 3


def _batch(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, VOCAB, size=(BATCH, CONTEXT + 1))
    return ids[:, :-1].astype(np.int64), ids[:, 1:].astype(np.int64)


def _median_ms(step, record, elapsed, sync) -> float:
    for _ in range(WARMUP):
        step()
    sync()
    samples = []
    for _ in range(ROUNDS):
        a = record()
        for _ in range(STEPS):
            step()
        b = record()
        sync()
        samples.append(elapsed(a, b) / STEPS)
    return statistics.median(samples)


def time_ignis(dtype: str, graph: bool) -> tuple[float, float]:
    ignis.random.seed(0)
    model = nn.GPT(VOCAB, CONTEXT, DIM, LAYERS, HEADS, activation="gelu_tanh", device="cuda",
                   dtype=dtype)
    half = dtype != "float32"
    opt = optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, master_weights=half)
    x_host, y_host = _batch(1)
    x = ignis.asarray(x_host, device="cuda")
    y = ignis.asarray(y_host, device="cuda")

    def train_step(xb, yb):
        opt.zero_grad()
        logits = model(xb)
        loss = ag.cross_entropy(logits.reshape(-1, VOCAB), yb.reshape(-1))
        loss.backward()
        optim.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss.detach()

    if graph:
        captured = ag.capture_step(train_step, x, y)

        def step():
            return captured(x, y)
    else:

        def step():
            return train_step(x, y)

    s = ignis.current_stream()
    ms = _median_ms(step, s.record, lambda a, b: a.elapsed_time(b), s.synchronize)
    loss = float(step().item())
    return ms, loss


def time_torch(dtype: str) -> tuple[float, float]:
    import torch
    import torch.nn as tnn
    import torch.nn.functional as F

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
    model = GPT().cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    x_host, y_host = _batch(1)
    x, y = torch.from_numpy(x_host).cuda(), torch.from_numpy(y_host).cuda()
    autocast = dtype != "float32"

    def step():
        opt.zero_grad(set_to_none=False)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            logits = model(x)
            loss = F.cross_entropy(logits.float().reshape(-1, VOCAB), y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss

    def record():
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        return e

    ms = _median_ms(step, record, lambda a, b: a.elapsed_time(b), torch.cuda.synchronize)
    return ms, float(step().item())


def main() -> int:
    if not ignis.is_available():
        print("gpt_step: needs a CUDA GPU")
        return 0
    tokens = BATCH * CONTEXT
    print(f"GPT step: {LAYERS} layers, width {DIM}, {HEADS} heads, context {CONTEXT}, "
          f"batch {BATCH}")
    print("| mode | ignis eager ms | ignis graph ms | torch eager ms | eager vs torch "
          "| graph vs torch | ignis tokens/s (graph) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for dtype in ("float32", "bfloat16"):
        eager, loss_e = time_ignis(dtype, graph=False)
        graph, loss_g = time_ignis(dtype, graph=True)
        torch_ms, loss_t = time_torch(dtype)
        ok = all(math.isfinite(v) for v in (loss_e, loss_g, loss_t))
        print(f"| {dtype} | {eager:.2f} | {graph:.2f} | {torch_ms:.2f} | {torch_ms / eager:.2f}x "
              f"| {torch_ms / graph:.2f}x | {tokens / graph * 1e3:,.0f} |"
              + ("" if ok else " (non-finite loss!)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
