"""Fused attention throughput: ignis.nn.attention (+ attention_backward) beside PyTorch's
scaled_dot_product_attention, bfloat16, in one process on the same device memory.

Cases: sequence length 1024 / 4096 / 8192 (L == S), head dim 64 / 128, causal and not, with
batch * seq = 16384 tokens and 2048 / head_dim heads. FLOPs follow PyTorch's convention:
4 * B * H * L * S * E for the forward pass, 2.5x that for the backward pass, halved when causal.
Times are medians of CUDA-event-timed rounds after a warm-up (helpers of reduction.py);
``vs torch`` is ignis's TFLOP/s over PyTorch's. The last column is the largest absolute
difference between the two forward outputs.

Run on a GPU machine: ``python benchmarks/attention.py``. Prints a Markdown table.
"""

from __future__ import annotations

import sys

import ignis.nn
import numpy as np
from reduction import time_ignis, time_torch

import ignis

TOKENS = 16384
HIDDEN = 2048


def cases() -> list[tuple[int, int, bool]]:
    return [
        (seq, e, causal)
        for seq in (1024, 4096, 8192)
        for e in (64, 128)
        for causal in (False, True)
    ]


def bench_row(torch, seq: int, e: int, causal: bool) -> str:
    b, h = max(1, TOKENS // seq), HIDDEN // e
    shape = (b, h, seq, e)
    gen = torch.Generator(device="cuda").manual_seed(seq + e)
    tq, tk, tv, tg = (
        torch.randn(shape, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(4)
    )
    q, k, v, g = (ignis.from_dlpack(t) for t in (tq, tk, tv, tg))
    torch.cuda.synchronize()

    def ours_fwd():
        return ignis.nn.attention(q, k, v, causal=causal)

    def ours_fwd_bwd():
        out, lse = ignis.nn.attention(q, k, v, causal=causal)
        return ignis.nn.attention_backward(g, q, k, v, out, lse, causal=causal)

    sdpa = torch.nn.functional.scaled_dot_product_attention
    xq, xk, xv = (t.detach().clone().requires_grad_() for t in (tq, tk, tv))

    def torch_fwd():
        with torch.no_grad():
            return sdpa(tq, tk, tv, is_causal=causal)

    def torch_fwd_bwd():
        out = sdpa(xq, xk, xv, is_causal=causal)
        out.backward(tg)

    flops = 4.0 * b * h * seq * seq * e * (0.5 if causal else 1.0)
    t_of, t_tf = time_ignis(ours_fwd), time_torch(torch_fwd)
    t_ob, t_tb = time_ignis(ours_fwd_bwd), time_torch(torch_fwd_bwd)
    tflops = lambda f, ms: f / (ms * 1e-3) / 1e12  # noqa: E731
    of, tf = tflops(flops, t_of), tflops(flops, t_tf)
    ob, tb = tflops(3.5 * flops, t_ob), tflops(3.5 * flops, t_tb)
    ours = np.asarray(ours_fwd()[0].to_host(), np.float32)
    theirs = torch_fwd().float().cpu().numpy()
    diff = float(np.max(np.abs(ours - theirs)))
    return (
        f"| {b}x{h}x{seq}x{e} | {'yes' if causal else 'no'} | {of:.1f} | {tf:.1f} | "
        f"{of / tf:.2f} | {ob:.1f} | {tb:.1f} | {ob / tb:.2f} | {diff:.2e} |"
    )


def main() -> int:
    if not ignis.is_available():
        print("benchmarks/attention.py needs a CUDA GPU", file=sys.stderr)
        return 1
    import torch

    print(f"# Fused attention (bfloat16) on {ignis.Device(0).name}\n")
    print(
        "| B x H x L x E | causal | ignis fwd TFLOP/s | torch fwd | vs torch | "
        "ignis fwd+bwd TFLOP/s | torch fwd+bwd | vs torch | max abs diff |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for seq, e, causal in cases():
        print(bench_row(torch, seq, e, causal), flush=True)
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
