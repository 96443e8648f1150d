"""Bandwidth of the fused normalization and loss kernels, forward and backward, beside PyTorch.

Cases (float32 and bfloat16): softmax forward and backward, layer norm (with weight and bias)
and RMS norm (with weight) forward and backward on 8192 x 4096, and softmax cross-entropy
(mean over the rows) forward and backward on 4096 x 50257 logits. Both libraries read the same
device memory (shared through DLPack). PyTorch runs its own fused CUDA kernels where it has them
(``native_layer_norm`` and its backward, ``_softmax_backward_data``) and autograd elsewhere
(RMS norm and cross-entropy backward: ``torch.autograd.grad`` on a kept graph).

Bandwidth counts the bytes the op must move once: its inputs read and outputs written
(per-row statistics and parameters included). ``vs torch`` is ignis's bandwidth over PyTorch's
(above 1: ignis is faster). The last column is the largest relative difference between the
two results. Times: medians of CUDA-event-timed rounds after warm-up (helpers of
``benchmarks/reduction.py``).

Run on a GPU machine: ``python benchmarks/nn_norm_loss.py``. Prints a Markdown table.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import ignis.nn as nn
from reduction import max_rel_diff, time_ignis, time_torch

import ignis

ROWS, COLS = 8192, 4096
CE_ROWS, CE_CLASSES = 4096, 50257


def _first(r: Any) -> Any:
    return r[0] if isinstance(r, (tuple, list)) else r


def row(
    name: str,
    dtype: str,
    shape: tuple[int, ...],
    nbytes: int,
    f_ignis: Callable[[], Any],
    f_torch: Callable[[], Any],
) -> str:
    ms_i = time_ignis(f_ignis)
    ms_t = time_torch(f_torch)
    gi, gt = nbytes / ms_i / 1e6, nbytes / ms_t / 1e6
    diff = max_rel_diff(_first(f_ignis()), _first(f_torch()))
    dims = "x".join(map(str, shape))
    return (
        f"| {name} | {dtype} | {dims} | {ms_i * 1e3:.0f} | {gi:.0f} | {gt:.0f} | "
        f"{gi / gt:.2f}x | {diff:.1e} |"
    )


def bench_rows(dtype: str) -> list[str]:
    import torch

    tdt = getattr(torch, dtype)
    gen = torch.Generator(device="cuda").manual_seed(0)
    out = []

    def randn(*shape: int, dt: Any = tdt) -> Any:
        return torch.randn(shape, device="cuda", dtype=dt, generator=gen)

    size = torch.empty((), dtype=tdt).element_size()
    numel = ROWS * COLS
    stats = ROWS * 4 * 2  # float32 mean and rstd
    x_t, g_t = randn(ROWS, COLS), randn(ROWS, COLS)
    w_t, b_t = randn(COLS), randn(COLS)
    x, g, w, b = (ignis.from_dlpack(a) for a in (x_t, g_t, w_t, b_t))
    torch.cuda.synchronize()

    # softmax
    y_t = torch.softmax(x_t, dim=-1)
    y = ignis.softmax(x, axis=-1)
    out.append(
        row(
            "softmax fwd",
            dtype,
            (ROWS, COLS),
            2 * numel * size,
            lambda: ignis.softmax(x, axis=-1),
            lambda: torch.softmax(x_t, dim=-1),
        )
    )
    out.append(
        row(
            "softmax bwd",
            dtype,
            (ROWS, COLS),
            3 * numel * size,
            lambda: nn.softmax_backward(g, y),
            lambda: torch._softmax_backward_data(g_t, y_t, -1, tdt),
        )
    )

    # layer norm
    eps = 1e-5
    _, mean_t, rstd_t = torch.native_layer_norm(x_t, (COLS,), w_t, b_t, eps)
    _, mean, rstd = nn.layer_norm(x, w, b, eps)
    out.append(
        row(
            "layer_norm fwd",
            dtype,
            (ROWS, COLS),
            2 * numel * size + stats,
            lambda: nn.layer_norm(x, w, b, eps),
            lambda: torch.native_layer_norm(x_t, (COLS,), w_t, b_t, eps),
        )
    )
    out.append(
        row(
            "layer_norm bwd",
            dtype,
            (ROWS, COLS),
            3 * numel * size + stats,
            lambda: nn.layer_norm_backward(g, x, mean, rstd, w),
            lambda: torch.ops.aten.native_layer_norm_backward(
                g_t, x_t, (COLS,), mean_t, rstd_t, w_t, b_t, [True, True, True]
            ),
        )
    )

    # RMS norm
    xr_t = x_t.detach().requires_grad_(True)
    wr_t = w_t.detach().requires_grad_(True)
    yr_t = torch.nn.functional.rms_norm(xr_t, (COLS,), wr_t, eps=1e-6)
    _, rrstd = nn.rms_norm(x, w, 1e-6)
    out.append(
        row(
            "rms_norm fwd",
            dtype,
            (ROWS, COLS),
            2 * numel * size + ROWS * 4,
            lambda: nn.rms_norm(x, w, 1e-6),
            lambda: torch.nn.functional.rms_norm(x_t, (COLS,), w_t, eps=1e-6),
        )
    )
    out.append(
        row(
            "rms_norm bwd",
            dtype,
            (ROWS, COLS),
            3 * numel * size + ROWS * 4,
            lambda: nn.rms_norm_backward(g, x, rrstd, w),
            lambda: torch.autograd.grad(yr_t, (xr_t, wr_t), g_t, retain_graph=True),
        )
    )
    return out


def bench_ce(dtype: str) -> list[str]:
    import torch

    tdt = getattr(torch, dtype)
    gen = torch.Generator(device="cuda").manual_seed(1)
    size = torch.empty((), dtype=tdt).element_size()
    out = []
    ce = CE_ROWS * CE_CLASSES
    z_t = torch.randn((CE_ROWS, CE_CLASSES), device="cuda", dtype=tdt, generator=gen)
    t_t = torch.randint(0, CE_CLASSES, (CE_ROWS,), device="cuda", generator=gen)
    z, t = ignis.from_dlpack(z_t), ignis.from_dlpack(t_t)
    torch.cuda.synchronize()
    zr_t = z_t.detach().requires_grad_(True)
    loss_t = torch.nn.functional.cross_entropy(zr_t, t_t)
    _, lse = nn.cross_entropy(z, t)
    one = ignis.ones((), device="cuda:0")
    out.append(
        row(
            "cross_entropy fwd",
            dtype,
            (CE_ROWS, CE_CLASSES),
            ce * size + CE_ROWS * 8,
            lambda: nn.cross_entropy(z, t),
            lambda: torch.nn.functional.cross_entropy(z_t, t_t),
        )
    )
    out.append(
        row(
            "cross_entropy bwd",
            dtype,
            (CE_ROWS, CE_CLASSES),
            2 * ce * size + CE_ROWS * 12,
            lambda: nn.cross_entropy_backward(one, z, t, lse),
            lambda: torch.autograd.grad(loss_t, zr_t, retain_graph=True),
        )
    )
    return out


def main() -> int:
    if not ignis.is_available():
        print("benchmarks/nn_norm_loss.py needs a CUDA GPU", file=sys.stderr)
        return 1
    import torch

    print(f"# Fused normalization and loss kernels on {ignis.Device(0).name}\n")
    print("| op | dtype | shape | ignis us | ignis GB/s | torch GB/s | vs torch | max rel diff |")
    print("|---|---|---|---|---|---|---|---|")
    for dtype in ("float32", "bfloat16"):
        for bench in (bench_rows, bench_ce):
            for line in bench(dtype):
                print(line, flush=True)
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
