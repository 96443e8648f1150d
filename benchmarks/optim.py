"""Multi-tensor optimizer steps: ignis beside PyTorch's fused and foreach AdamW, in one process.

Case: 100 parameter tensors of mixed sizes (a few large matrices, many small vectors), about 50M
parameters in all, float32 parameters with float32 gradients and state. Rows:

* ``AdamW step``: ignis ``AdamW.step()`` called from Python (host overhead included), the same
  step captured once into a CUDA graph and replayed, and torch's ``AdamW(fused=True)`` and
  ``AdamW(foreach=True)``;
* ``AdamW step, bf16 params + fp32 master``: ignis with bfloat16 parameters and float32 master
  weights (graph replay) beside torch's fused float32 step (the same arithmetic, slightly less
  traffic);
* ``clip_grad_norm_``: ignis (norm + scale, no host synchronization) beside torch's
  ``clip_grad_norm_(foreach=True)``.

Bandwidth counts each byte the step must read and write once (float32 AdamW: read p, g, m, v
and write p, m, v = 28 bytes per parameter; with a bfloat16 parameter and float32 master: 30;
clipping: read for the norm, read and write for the scaling = 12). Times are medians of rounds
timed with CUDA events after a warm-up (the helpers of ``benchmarks/reduction.py``); ``vs
torch`` is ignis's bandwidth over fused torch's (foreach for clipping). The last column is the
largest relative difference of the parameters after the timed steps' first step.

Run on a GPU machine: ``python benchmarks/optim.py``. Prints a Markdown table.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
from reduction import time_ignis, time_torch  # shared timing helpers

import ignis

N_TENSORS = 100
TOTAL = 50_000_000


def sizes() -> list[int]:
    """100 sizes summing to about 50M: 20 big matrices and 80 small vectors."""
    rng = np.random.default_rng(0)
    big = rng.uniform(0.5, 1.5, 20)
    big = (big / big.sum() * (TOTAL - 80 * 4096)).astype(np.int64)
    small = rng.integers(64, 8192, 80)
    return [int(s) for s in np.concatenate([big, small])]


def make(dtype_ignis: str) -> tuple[list[Any], list[Any], list[Any], list[Any]]:
    """(ignis Tensors, torch fused params, torch foreach params, host grads as torch)."""
    import torch

    from ignis_autograd import Tensor

    gen = torch.Generator(device="cuda").manual_seed(0)
    ours, fused, foreach, grads = [], [], [], []
    for n in sizes():
        t = torch.randn(n, device="cuda", generator=gen)
        g = torch.randn(n, device="cuda", generator=gen) * 1e-2
        p = Tensor(ignis.from_dlpack(t.clone()).astype(dtype_ignis), requires_grad=True)
        p.grad = ignis.from_dlpack(g.clone())
        ours.append(p)
        for lst in (fused, foreach):
            q = t.clone().requires_grad_(True)
            q.grad = g.clone()
            lst.append(q)
        grads.append(g)
    torch.cuda.synchronize()
    return ours, fused, foreach, grads


def graph_of(step: Any) -> tuple[Any, Any]:
    """``step`` captured into a CUDA graph (after one eager warm-up step) and its stream."""
    s = ignis.Stream()
    ignis.current_stream().synchronize()
    with s:
        step()
        with ignis.Graph.capture(s) as g:
            step()
        s.synchronize()
    return g, s


def time_graph(g: Any, s: Any) -> float:
    with s:
        return time_ignis(lambda: g.launch(s))


def max_rel_diff(ours: list[Any], theirs: list[Any]) -> float:
    worst = 0.0
    for o, t in zip(ours, theirs, strict=True):
        a = np.asarray(o.data.astype("float32").to_host(), dtype=np.float64)
        b = t.detach().float().cpu().numpy().astype(np.float64)
        worst = max(worst, float(np.max(np.abs(a - b) / (np.abs(b) + 1e-6))))
    return worst


def row(name: str, nbytes: float, ms: float, torch_ms: float, diff: str) -> str:
    gbs, tgbs = nbytes / ms / 1e6, nbytes / torch_ms / 1e6
    return f"| {name} | {ms * 1e3:.0f} | {gbs:.0f} | {torch_ms * 1e3:.0f} | {tgbs:.0f} | " \
           f"{gbs / tgbs:.2f}x | {diff} |"


def main() -> int:
    if not ignis.is_available():
        print("benchmarks/optim.py needs a CUDA GPU", file=sys.stderr)
        return 1
    import torch
    from ignis_autograd.optim import AdamW, clip_grad_norm_

    n = sum(sizes())
    print(f"# Multi-tensor optimizers on {ignis.Device(0).name}: {N_TENSORS} tensors, "
          f"{n / 1e6:.1f}M parameters\n")
    print("| op | ignis us | ignis GB/s | torch us | torch GB/s | vs torch | max rel diff |")
    print("|---|---|---|---|---|---|---|")

    kw = dict(lr=1e-3, weight_decay=0.1)
    ours, fused, foreach, _ = make("float32")
    opt = AdamW(ours, **kw)
    tf = torch.optim.AdamW(fused, fused=True, **kw)
    tfe = torch.optim.AdamW(foreach, foreach=True, **kw)
    opt.step()
    tf.step()
    diff = f"{max_rel_diff(ours, fused):.1e}"
    ms_eager = time_ignis(opt.step)
    ms_fused = time_torch(tf.step)
    ms_foreach = time_torch(tfe.step)
    g, s = graph_of(opt.step)
    ms_graph = time_graph(g, s)
    nbytes = 28.0 * n
    print(row("AdamW step (eager) vs fused", nbytes, ms_eager, ms_fused, diff))
    print(row("AdamW step (graph) vs fused", nbytes, ms_graph, ms_fused, diff))
    print(row("AdamW step (graph) vs foreach", nbytes, ms_graph, ms_foreach, diff), flush=True)
    del opt, tf, tfe, ours, foreach, g
    torch.cuda.empty_cache()

    ours, fused, _, _ = make("bfloat16")
    opt = AdamW(ours, master_weights=True, **kw)
    tf = torch.optim.AdamW(fused, fused=True, **kw)
    opt.step()
    tf.step()
    diff = f"{max_rel_diff(ours, fused):.1e}"
    g, s = graph_of(opt.step)
    print(row("AdamW step, bf16 params + fp32 master (graph) vs fused fp32", 30.0 * n,
              time_graph(g, s), time_torch(tf.step), diff), flush=True)
    del opt, tf, g

    ours, fused, foreach, _ = make("float32")
    total = float(clip_grad_norm_(ours, 1e9).item())
    ttotal = float(torch.nn.utils.clip_grad_norm_(foreach, 1e9, foreach=True))
    diff = f"{abs(total - ttotal) / ttotal:.1e}"
    # a max_norm above the norm: the gradients keep their values from round to round
    ms = time_ignis(lambda: clip_grad_norm_(ours, 1e9))
    tms = time_torch(lambda: torch.nn.utils.clip_grad_norm_(foreach, 1e9, foreach=True))
    print(row("clip_grad_norm_ vs foreach", 12.0 * n, ms, tms, diff), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
