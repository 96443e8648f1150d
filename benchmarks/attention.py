"""Fused attention throughput: ignis.nn.attention (+ attention_backward) beside PyTorch's
scaled_dot_product_attention, bfloat16, in one process on the same device memory.

Cases: sequence length 1024 / 4096 / 8192 (L == S), head dim 64 / 128, causal and not, with
batch * seq = 16384 tokens and 2048 / head_dim heads. FLOPs follow PyTorch's convention:
4 * B * H * L * S * E for the forward pass, 2.5x that for the backward pass, halved when causal.
Times are medians of CUDA-event-timed rounds after a warm-up (helpers of reduction.py);
``vs torch`` is ignis's TFLOP/s over PyTorch's; "ignis bwd" is ``attention_backward`` alone;
"mma.sync fwd" / "mma.sync bwd" are the same with
``ignis.tuning(attention=dict(fwd_wgmma=False, bwd_wgmma=False))`` where the Hopper kernels are
the default (compute capability 9.0, head dims 64 and 128). The last column
is the largest absolute difference between the two forward outputs.

A second table runs float32 (the scalar kernels, exact float32 arithmetic, no TF32) beside
PyTorch's float32 SDPA (memory-efficient attention) for a GPT step (64x6x256x64 causal) and two
longer cases: the register-tiled kernels with the two-pass backward, the same with the one-pass
backward (``simt_fused_dq``), and the first kernels (``simt_tiled=False``). Backward times
are ``attention_backward`` alone for ignis and fwd+bwd minus fwd for PyTorch.

Run on a GPU machine: ``python benchmarks/attention.py``. Prints Markdown tables.
``python benchmarks/attention.py --sweep`` instead times the float32 tiled kernels with other
tile shapes (the ``simt_tiles`` setting) on two cases, to pick the table's entries.
"""

from __future__ import annotations

import sys

import ignis.nn
import numpy as np
from ignis._array._cuda_backend import attention as cuda_attention
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
    out, lse = ours_fwd()

    def ours_bwd():
        return ignis.nn.attention_backward(g, q, k, v, out, lse, causal=causal)

    bwd = f"{tflops(2.5 * flops, time_ignis(ours_bwd)):.1f}"
    mma_sync = mma_sync_bwd = "-"  # the mma.sync kernels, where the Hopper ones replace them
    if cuda_attention.uses_wgmma_forward("bfloat16", e, ignis.Device(0)):
        with ignis.tuning(attention=dict(fwd_wgmma=False, bwd_wgmma=False)):
            mma_sync = f"{tflops(flops, time_ignis(ours_fwd)):.1f}"
            mma_sync_bwd = f"{tflops(2.5 * flops, time_ignis(ours_bwd)):.1f}"
    ob, tb = tflops(3.5 * flops, t_ob), tflops(3.5 * flops, t_tb)
    ours = np.asarray(ours_fwd()[0].to_host(), np.float32)
    theirs = torch_fwd().float().cpu().numpy()
    diff = float(np.max(np.abs(ours - theirs)))
    return (
        f"| {b}x{h}x{seq}x{e} | {'yes' if causal else 'no'} | {of:.1f} | {mma_sync} | {tf:.1f} | "
        f"{of / tf:.2f} | {bwd} | {mma_sync_bwd} | {ob:.1f} | {tb:.1f} | {ob / tb:.2f} | "
        f"{diff:.2e} |"
    )


#: dropout cases (bfloat16, causal): (B, H, L, E)
DROPOUT_CASES = [(64, 6, 256, 64), (16, 16, 1024, 64), (4, 16, 4096, 128)]
DROPOUT_P = 0.1


def bench_dropout_row(torch, b: int, h: int, seq: int, e: int) -> str:
    """fwd+bwd with dropout inside the kernels beside the same without, and PyTorch's SDPA with
    ``dropout_p``; the peak column is the device memory a dropout fwd+bwd takes above its inputs."""
    shape = (b, h, seq, e)
    gen = torch.Generator(device="cuda").manual_seed(seq + 7)
    tq, tk, tv, tg = (
        torch.randn(shape, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(4)
    )
    q, k, v, g = (ignis.from_dlpack(t) for t in (tq, tk, tv, tg))
    torch.cuda.synchronize()
    sdpa = torch.nn.functional.scaled_dot_product_attention
    xq, xk, xv = (t.detach().clone().requires_grad_() for t in (tq, tk, tv))

    def ours(p):
        drop = ignis.nn.attention_dropout(p, q, k, seed=5, offset=0)
        out, lse = ignis.nn.attention(q, k, v, causal=True, dropout=drop)
        return ignis.nn.attention_backward(g, q, k, v, out, lse, causal=True, dropout=drop)

    def theirs(p):
        sdpa(xq, xk, xv, is_causal=True, dropout_p=p).backward(tg)

    t_plain, t_drop = time_ignis(lambda: ours(0.0)), time_ignis(lambda: ours(DROPOUT_P))
    t_torch_plain = time_torch(lambda: theirs(0.0))
    t_torch_drop = time_torch(lambda: theirs(DROPOUT_P))
    ignis.reset_peak_memory_stats()
    base = ignis.memory_stats()["current_bytes"]
    ours(DROPOUT_P)
    peak = (ignis.memory_stats()["peak_bytes"] - base) / 2**20
    return (
        f"| {b}x{h}x{seq}x{e} | {t_plain * 1e3:.0f} | {t_drop * 1e3:.0f} | "
        f"{t_drop / t_plain:.2f} | {t_torch_plain * 1e3:.0f} | {t_torch_drop * 1e3:.0f} | "
        f"{t_torch_drop / t_drop:.2f} | {peak:.0f} |"
    )


def print_dropout_table(torch) -> None:
    name = ignis.Device(0).name
    print(f"\n# Attention with dropout p={DROPOUT_P} (bfloat16, causal) on {name}\n")
    print(
        "| B x H x L x E | ignis fwd+bwd µs, p=0 | ignis p=0.1 | dropout cost | "
        "torch fwd+bwd µs, p=0 | torch p=0.1 | vs torch (p=0.1) | peak MiB |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for case in DROPOUT_CASES:
        print(bench_dropout_row(torch, *case), flush=True)
        torch.cuda.empty_cache()


#: float32 cases: (B, H, L, E, causal)
F32_CASES = [
    (64, 6, 256, 64, True),
    (16, 32, 1024, 64, True),
    (16, 32, 1024, 64, False),
    (4, 16, 2048, 128, True),
    (4, 16, 2048, 128, False),
]


def bench_f32_rows(torch, b: int, h: int, seq: int, e: int, causal: bool) -> list[str]:
    shape = (b, h, seq, e)
    gen = torch.Generator(device="cuda").manual_seed(seq + e + 1)
    tq, tk, tv, tg = (
        torch.randn(shape, device="cuda", dtype=torch.float32, generator=gen) for _ in range(4)
    )
    q, k, v, g = (ignis.from_dlpack(t) for t in (tq, tk, tv, tg))
    torch.cuda.synchronize()
    sdpa = torch.nn.functional.scaled_dot_product_attention
    xq, xk, xv = (t.detach().clone().requires_grad_() for t in (tq, tk, tv))

    def torch_fwd():
        with torch.no_grad():
            return sdpa(tq, tk, tv, is_causal=causal)

    def torch_fwd_bwd():
        out = sdpa(xq, xk, xv, is_causal=causal)
        out.backward(tg)

    t_tf, t_tfb = time_torch(torch_fwd), time_torch(torch_fwd_bwd)
    t_tb = max(t_tfb - t_tf, 1e-9)
    theirs = torch_fwd().cpu().numpy()
    flops = 4.0 * b * h * seq * seq * e * (0.5 if causal else 1.0)
    tflops = lambda f, ms: f / (ms * 1e-3) / 1e12  # noqa: E731
    rows = []
    for tiled, fused, kernels in (
        (True, False, "tiled"),
        (True, True, "tiled, one pass"),
        (False, False, "first"),
    ):
        with ignis.tuning(attention=dict(simt_tiled=tiled, simt_fused_dq=fused)):
            out, lse = ignis.nn.attention(q, k, v, causal=causal)

            def ours_fwd():
                return ignis.nn.attention(q, k, v, causal=causal)

            def ours_bwd(out=out, lse=lse):
                return ignis.nn.attention_backward(g, q, k, v, out, lse, causal=causal)

            t_of, t_ob = time_ignis(ours_fwd), time_ignis(ours_bwd)
            ours = np.asarray(ours_fwd()[0].to_host(), np.float32)
            diff = float(np.max(np.abs(ours - theirs)))
            rows.append(
                f"| {b}x{h}x{seq}x{e} | {'yes' if causal else 'no'} | "
                f"{kernels} | {t_of * 1e3:.0f} | {t_tf * 1e3:.0f} | "
                f"{t_tf / t_of:.2f} | {t_ob * 1e3:.0f} | {t_tb * 1e3:.0f} | {t_tb / t_ob:.2f} | "
                f"{tflops(flops, t_of):.1f} | {tflops(2.5 * flops, t_ob):.1f} | {diff:.2e} |"
            )
    return rows


#: Candidate float32 tiles per head dim and kernel: (rows per block, rows per streamed tile,
#: stages, launch-bounds minimum blocks); the first of each list is the default.
SWEEP = {
    64: {
        "fwd": [(64, 64, 2, 2), (64, 64, 1, 2), (64, 32, 2, 2), (32, 64, 2, 2), (128, 32, 1, 2)],
        "dkdv": [(64, 32, 2, 2), (64, 64, 1, 2), (32, 64, 2, 2), (64, 16, 2, 2), (64, 64, 2, 1)],
        "dq": [(64, 32, 2, 2), (64, 64, 1, 2), (32, 64, 2, 2), (64, 64, 2, 1)],
    },
    128: {
        "fwd": [(64, 32, 2, 2), (64, 32, 1, 2), (32, 32, 2, 2), (64, 64, 1, 1)],
        "dkdv": [(64, 32, 1, 1), (32, 32, 2, 2), (64, 16, 2, 1), (32, 64, 1, 2)],
        "dq": [(64, 32, 1, 2), (32, 32, 2, 2), (64, 16, 2, 2), (32, 64, 1, 2)],
    },
}


def _sweep_case(torch, b: int, h: int, seq: int, e: int, causal: bool) -> None:
    d = cuda_attention.tiled_head_dim(e)
    gen = torch.Generator(device="cuda").manual_seed(seq)
    tq, tk, tv, tg = (torch.randn((b, h, seq, e), device="cuda", generator=gen) for _ in range(4))
    q, k, v, g = (ignis.from_dlpack(t) for t in (tq, tk, tv, tg))
    torch.cuda.synchronize()
    out, lse = ignis.nn.attention(q, k, v, causal=causal)

    def fwd():
        return ignis.nn.attention(q, k, v, causal=causal)

    def bwd():
        return ignis.nn.attention_backward(g, q, k, v, out, lse, causal=causal)

    table = ignis.tuning().attention.simt_tiles
    for kind, candidates in SWEEP[d].items():
        run, first = (fwd if kind == "fwd" else bwd), None
        for tiles in candidates:
            # the default tiles with this kernel's replaced
            changed = {**table, ("float32", d): {**table[("float32", d)], kind: tiles}}
            head = f"| {b}x{h}x{seq}x{e} | {'yes' if causal else 'no'} | {kind} | {tiles} |"
            try:
                with ignis.tuning(attention=dict(simt_tiles=changed)):
                    ms = time_ignis(run)
                    got = [np.asarray(x.to_host(), np.float32).ravel() for x in run()]
            except Exception as exc:  # a shape that does not fit this GPU
                print(f"{head} failed: {type(exc).__name__}: {exc} | |", flush=True)
                continue
            got = np.concatenate(got)
            first = got if first is None else first
            print(f"{head} {ms * 1e3:.0f} | {float(np.max(np.abs(got - first))):.2e} |", flush=True)


def sweep(torch) -> None:
    print(f"# float32 attention tile sweep on {ignis.Device(0).name}\n")
    print("| B x H x L x E | causal | kernel | tiles | µs | max abs diff vs first |")
    print("|---|---|---|---|---|---|")
    with ignis.tuning(attention=dict(simt_tiled=True)):
        for case in ((64, 6, 256, 64, True), (4, 16, 2048, 128, True)):
            _sweep_case(torch, *case)
            torch.cuda.empty_cache()


def main() -> int:
    if not ignis.is_available():
        print("benchmarks/attention.py needs a CUDA GPU", file=sys.stderr)
        return 1
    import torch

    if "--sweep" in sys.argv[1:]:
        sweep(torch)
        return 0
    if "--dropout" in sys.argv[1:]:
        print_dropout_table(torch)
        return 0
    print(f"# Fused attention (bfloat16) on {ignis.Device(0).name}\n")
    print(
        "| B x H x L x E | causal | ignis fwd TFLOP/s | mma.sync fwd | torch fwd | vs torch | "
        "ignis bwd | mma.sync bwd | ignis fwd+bwd TFLOP/s | torch fwd+bwd | vs torch | "
        "max abs diff |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for seq, e, causal in cases():
        print(bench_row(torch, seq, e, causal), flush=True)
        torch.cuda.empty_cache()
    print(f"\n# Fused attention (float32, scalar kernels) on {ignis.Device(0).name}\n")
    print(
        "| B x H x L x E | causal | kernels | ignis fwd µs | torch fwd µs | vs torch | "
        "ignis bwd µs | torch bwd µs | vs torch | ignis fwd TFLOP/s | ignis bwd TFLOP/s | "
        "max abs diff |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for case in F32_CASES:
        for row in bench_f32_rows(torch, *case):
            print(row, flush=True)
        torch.cuda.empty_cache()
    print_dropout_table(torch)
    return 0


if __name__ == "__main__":
    sys.exit(main())
