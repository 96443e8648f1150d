"""Attention on heads of a packed projection: read and written in place versus copied.

A GPT layer's attention takes the heads of one packed ``(B, T, 3, H, hd)`` projection and
returns ``(B, T, H * hd)``. ``in place`` passes ``(B, H, T, hd)`` views of the projection
straight to ``ignis.nn.attention``, writes the output into a ``(B, T, H, hd)`` buffer through a
view, and has ``attention_backward`` read the output gradient through a view and write dq, dk,
dv into the three slots of one ``(B, T, 3, H, hd)`` gradient: no copies. ``dense`` is the same
work with contiguous operands: one copy gathers the heads of q, k, v, one merges the output
heads, and the backward copies the gradient into head-major order and scatters dq, dk, dv
(six strided copies per layer). ``torch`` is PyTorch's scaled_dot_product_attention on views of
a packed tensor, with its own autograd. Forward+backward times are one forward and one
backward. Times are medians of CUDA-event-timed rounds after a warm-up (helpers of
reduction.py); ``dense / in place`` above 1 is the saving, ``torch / in place`` above 1 means
ignis is faster. The last column is the largest absolute difference between the two ignis
outputs (the same kernels on different layouts: 0 unless the strided path is wrong).

Run on a GPU machine: ``python benchmarks/attention_layouts.py``. Prints a Markdown table.
"""

from __future__ import annotations

import sys

import ignis.nn
import numpy as np
from reduction import time_ignis, time_torch

import ignis

#: (B, T, H, head dim, dtype); causal throughout. The first two are the GPT step's layers.
CASES = [
    (64, 256, 6, 64, "bfloat16"),
    (64, 256, 6, 64, "float32"),
    (8, 2048, 16, 64, "bfloat16"),
    (8, 2048, 16, 128, "bfloat16"),
]


def _in_place(qkv, g, b, n, h, hd):
    """(forward, forward + backward) callables on views, and the forward's (B, T, dim) output."""
    q, k, v = (qkv[:, :, i].permute(0, 2, 1, 3) for i in range(3))
    g4 = g.reshape(b, n, h, hd).permute(0, 2, 1, 3)

    def fwd():
        merged = ignis.empty((b, n, h, hd), dtype=qkv.dtype, device=qkv.device)
        out, lse = ignis.nn.attention(q, k, v, causal=True, out=merged.permute(0, 2, 1, 3))
        return merged.reshape(b, n, h * hd), out, lse

    def fwd_bwd():
        _, out, lse = fwd()
        grad = ignis.empty((b, n, 3, h, hd), dtype=qkv.dtype, device=qkv.device)
        dq, dk, dv = (grad[:, :, i].permute(0, 2, 1, 3) for i in range(3))
        ignis.nn.attention_backward(g4, q, k, v, out, lse, causal=True, dq=dq, dk=dk, dv=dv)
        return grad

    return (lambda: fwd()[0]), fwd_bwd


def _dense(qkv, g, b, n, h, hd):
    """The same with contiguous operands: gather copies in, scatter copies out."""
    heads = qkv.permute(2, 0, 3, 1, 4)  # (3, B, H, T, hd)

    def fwd():
        q, k, v = heads.reshape(3, 1, b * h, n, hd)  # one gathering copy
        out, lse = ignis.nn.attention(q, k, v, causal=True)
        merged = out.reshape(b, h, n, hd).permute(0, 2, 1, 3).reshape(b, n, h * hd)  # a copy
        return merged, (q, k, v, out, lse)

    def fwd_bwd():
        _, (q, k, v, out, lse) = fwd()
        g4 = g.reshape(b, n, h, hd).permute(0, 2, 1, 3).reshape(1, b * h, n, hd)  # a copy
        dq, dk, dv = ignis.nn.attention_backward(g4, q, k, v, out, lse, causal=True)
        grad = ignis.empty((b, n, 3, h, hd), dtype=qkv.dtype, device=qkv.device)
        for i, d in enumerate((dq, dk, dv)):  # three scattering copies
            grad[:, :, i] = d.reshape(b, h, n, hd).permute(0, 2, 1, 3)
        return grad

    return (lambda: fwd()[0]), fwd_bwd


def bench_row(torch, b: int, n: int, h: int, hd: int, dtype: str) -> str:
    tdt = getattr(torch, dtype)
    gen = torch.Generator(device="cuda").manual_seed(b * n + hd)
    tqkv = torch.randn((b, n, 3, h, hd), device="cuda", dtype=tdt, generator=gen)
    tg = torch.randn((b, n, h * hd), device="cuda", dtype=tdt, generator=gen)
    qkv, g = ignis.from_dlpack(tqkv), ignis.from_dlpack(tg)
    torch.cuda.synchronize()
    sdpa = torch.nn.functional.scaled_dot_product_attention
    xqkv = tqkv.detach().clone().requires_grad_()

    def torch_fwd():
        with torch.no_grad():
            q, k, v = (tqkv[:, :, i].transpose(1, 2) for i in range(3))
            return sdpa(q, k, v, is_causal=True).transpose(1, 2).reshape(b, n, h * hd)

    def torch_fwd_bwd():
        q, k, v = (xqkv[:, :, i].transpose(1, 2) for i in range(3))
        y = sdpa(q, k, v, is_causal=True).transpose(1, 2).reshape(b, n, h * hd)
        y.backward(tg)

    in_fwd, in_all = _in_place(qkv, g, b, n, h, hd)
    de_fwd, de_all = _dense(qkv, g, b, n, h, hd)
    t = {
        "in_fwd": time_ignis(in_fwd),
        "in_all": time_ignis(in_all),
        "de_fwd": time_ignis(de_fwd),
        "de_all": time_ignis(de_all),
        "t_fwd": time_torch(torch_fwd),
        "t_all": time_torch(torch_fwd_bwd),
    }
    ours, dense = (np.asarray(f().to_host(), np.float32) for f in (in_fwd, de_fwd))
    diff = float(np.max(np.abs(ours - dense)))
    us = {key: ms * 1e3 for key, ms in t.items()}
    return (
        f"| {b}x{n}x{h}x{hd} | {dtype} | {us['in_fwd']:.0f} | {us['de_fwd']:.0f} | "
        f"{t['de_fwd'] / t['in_fwd']:.2f} | {us['t_fwd']:.0f} | {t['t_fwd'] / t['in_fwd']:.2f} | "
        f"{us['in_all']:.0f} | {us['de_all']:.0f} | {t['de_all'] / t['in_all']:.2f} | "
        f"{us['t_all']:.0f} | {t['t_all'] / t['in_all']:.2f} | {diff:.1e} |"
    )


def main() -> int:
    if not ignis.is_available():
        print("benchmarks/attention_layouts.py needs a CUDA GPU", file=sys.stderr)
        return 1
    import torch

    print(f"# Attention on packed heads, causal, on {ignis.Device(0).name}\n")
    print(
        "| B x T x H x hd | dtype | fwd in place µs | fwd dense µs | dense / in place | "
        "fwd torch µs | torch / in place | fwd+bwd in place µs | fwd+bwd dense µs | "
        "dense / in place | fwd+bwd torch µs | torch / in place | max abs diff |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for case in CASES:
        print(bench_row(torch, *case), flush=True)
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
