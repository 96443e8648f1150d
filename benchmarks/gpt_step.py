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
import sys

import numpy as np
from reduction import median_ms, torch_event  # shared timing

import ignis
import ignis_autograd as ag
from ignis_autograd import nn, optim

VOCAB, CONTEXT, DIM, LAYERS, HEADS, BATCH = 65, 256, 384, 6, 6, 64
ROUNDS, STEPS, WARMUP = 5, 5, 3


def batch_ids(
    seed: int, vocab: int = VOCAB, context: int = CONTEXT, batch: int = BATCH
) -> tuple[np.ndarray, np.ndarray]:
    """Random token ids (batch, context) and their next tokens, int64."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, vocab, size=(batch, context + 1))
    return ids[:, :-1].astype(np.int64), ids[:, 1:].astype(np.int64)


def _median_ms(step, record, elapsed, sync) -> float:
    return median_ms(step, record, elapsed, sync, warmup=WARMUP, rounds=ROUNDS, reps=STEPS)


def torch_gpt(
    vocab: int = VOCAB,
    context: int = CONTEXT,
    dim: int = DIM,
    layers: int = LAYERS,
    heads: int = HEADS,
):
    """The benchmark's model in plain PyTorch (float32, on the current CUDA device): pre-norm
    blocks of causal SDPA attention and a tanh-GELU MLP of 4x width, tied embeddings."""
    import torch
    import torch.nn as tnn
    import torch.nn.functional as F

    class Block(tnn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = tnn.LayerNorm(dim), tnn.LayerNorm(dim)
            self.qkv, self.proj = tnn.Linear(dim, 3 * dim), tnn.Linear(dim, dim)
            self.fc, self.out = tnn.Linear(dim, 4 * dim), tnn.Linear(4 * dim, dim)

        def forward(self, h):
            b, t, _ = h.shape
            q, k, v = self.qkv(self.ln1(h)).split(dim, dim=-1)
            q, k, v = (z.view(b, t, heads, dim // heads).transpose(1, 2) for z in (q, k, v))
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            h = h + self.proj(a.transpose(1, 2).reshape(b, t, dim))
            return h + self.out(F.gelu(self.fc(self.ln2(h)), approximate="tanh"))

    class GPT(tnn.Module):
        def __init__(self):
            super().__init__()
            self.tok, self.pos = tnn.Embedding(vocab, dim), tnn.Embedding(context, dim)
            self.blocks = tnn.ModuleList(Block() for _ in range(layers))
            self.ln = tnn.LayerNorm(dim)

        def forward(self, ids):
            h = self.tok(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device))
            for blk in self.blocks:
                h = blk(h)
            return self.ln(h) @ self.tok.weight.T

    torch.manual_seed(0)
    return GPT().cuda()


def time_ignis(dtype: str, graph: bool) -> tuple[float, float]:
    ignis.random.seed(0)
    model = nn.GPT(VOCAB, CONTEXT, DIM, LAYERS, HEADS, activation="gelu_tanh", device="cuda",
                   dtype=dtype)
    half = dtype != "float32"
    opt = optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, master_weights=half)
    x_host, y_host = batch_ids(1)
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
    import torch.nn.functional as F

    model = torch_gpt()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    x_host, y_host = batch_ids(1)
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

    ms = _median_ms(step, torch_event, lambda a, b: a.elapsed_time(b), torch.cuda.synchronize)
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
