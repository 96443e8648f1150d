"""Matrix products: ignis through cuBLAS, ignis's own GEMM kernels, and torch.matmul.

Square products of 4096 and 8192 in three modes: float32 (true FP32), float32 with TF32
tensor cores allowed (``ignis.set_allow_tf32`` / ``torch.backends.cuda.matmul.allow_tf32``) and
bfloat16 (float32 accumulation). Each engine multiplies the same data; every timing is the median
of CUDA-event-timed repeats after a warm-up (which also compiles the own kernels). Reports
TFLOP/s (2 n^3 flops per product), the ratio to torch, the own kernels' fraction of ignis with
cuBLAS, and the largest difference from torch's result relative to the result's largest element.
On a GPU of compute capability 9.0 the bfloat16 and TF32 modes also time the own Hopper kernel
(``gemm_wgmma``, the ``matmul.wgmma`` setting) with both of its tiles, persistent (one block a
multiprocessor, the default) and with one block a tile, beside the mma.sync one.

``--gpt`` times instead the products of one training step of ``gpt_step.py``'s model (16384
tokens, width 384, MLP 1536, 3 x 384 for q, k, v): each linear layer's forward ``x @ w.T``, its
input gradient ``dy @ w`` and its weight gradient ``dy.T @ x``, in bfloat16 and in float32 with
TF32, through cuBLAS and on the own kernels (gemm_wgmma's defaults on Hopper).

Run on a GPU machine: ``python benchmarks/matmul.py [--sizes 4096,8192] [--seconds 0.6]
[--gpt]``. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np
from ignis._array._cuda_backend import matmul as mm

import ignis

MODES = [  # (label, dtype, TF32 allowed)
    ("float32", "float32", False),
    ("tf32", "float32", True),
    ("bfloat16", "bfloat16", False),
]


def time_ms(run: Callable[[], Any], record: Callable[[], Any], elapsed: Callable[[Any, Any], float],
            sync: Callable[[], None], budget_s: float) -> float:
    """Median milliseconds of one call: warm-up, then repeats timed with events on the stream."""
    for _ in range(2):
        run()
    sync()
    t0 = time.perf_counter()
    run()
    sync()
    estimate = max(time.perf_counter() - t0, 1e-5)
    reps = int(min(50, max(5, budget_s / estimate)))
    samples = []
    for _ in range(reps):
        start = record()
        run()
        end = record()
        samples.append((start, end))
    sync()
    return statistics.median(elapsed(s, e) for s, e in samples)


def bench_ignis(a: ignis.NvArray, b: ignis.NvArray, out: ignis.NvArray, cublas: bool, tf32: bool,
                budget_s: float, wgmma_tile_n: int | None = None,
                persistent: bool = True) -> tuple[float, np.ndarray]:
    """``wgmma_tile_n``: run the own kernels on gemm_wgmma with that tile width, ``persistent``
    or one block a tile."""
    mm.set_cublas_enabled(cublas)
    mm.set_allow_tf32(tf32)
    stream = ignis.current_stream()

    def record() -> ignis.Event:
        return ignis.Event().record(stream)

    wgmma = dict(wgmma=wgmma_tile_n is not None, wgmma_tile_n=wgmma_tile_n or 128,
                 wgmma_persistent=persistent)
    with ignis.tuning(matmul=wgmma):
        ms = time_ms(lambda: ignis.matmul(a, b, out=out), record, lambda s, e: s.elapsed_time(e),
                     stream.synchronize, budget_s)
    return ms, out.to_host().astype(np.float32)


def bench_torch(x: np.ndarray, y: np.ndarray, dtype: str, tf32: bool,
                budget_s: float) -> tuple[float, np.ndarray] | str:
    try:
        import torch
    except ImportError as exc:
        return f"n/a ({exc})"
    if not torch.cuda.is_available():
        return "n/a (no CUDA in torch)"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    tdt = torch.float32 if dtype == "float32" else torch.bfloat16
    ta = torch.from_numpy(x).to("cuda").to(tdt)
    tb = torch.from_numpy(y).to("cuda").to(tdt)
    tc = torch.empty((x.shape[0], y.shape[1]), dtype=tdt, device="cuda")

    def record() -> Any:
        ev = torch.cuda.Event(enable_timing=True)
        ev.record()
        return ev

    ms = time_ms(lambda: torch.matmul(ta, tb, out=tc), record, lambda s, e: s.elapsed_time(e),
                 torch.cuda.synchronize, budget_s)
    result = tc.float().cpu().numpy()
    torch.backends.cuda.matmul.allow_tf32 = False
    return ms, result


GPT_TOKENS, GPT_DIM = 16384, 384  # gpt_step.py: batch 64 x context 256, width 384
GPT_LAYERS = [("qkv", 3 * GPT_DIM, GPT_DIM), ("attention out", GPT_DIM, GPT_DIM),
              ("mlp up", 4 * GPT_DIM, GPT_DIM), ("mlp down", GPT_DIM, 4 * GPT_DIM)]


def gpt_products(seconds: float) -> None:
    """The table of ``--gpt``: each layer's three products, cuBLAS beside the own kernels."""
    rng = np.random.default_rng(0)
    have_cublas = mm.cublas_available()
    print(f"GPT step products on {ignis.Device(0).name}: {GPT_TOKENS} tokens, median of "
          "CUDA-event-timed repeats")
    print("| layer | product | m x k x n | mode | cuBLAS ms | own ms | own / cuBLAS |")
    print("|---|---|---|---|---:|---:|---:|")
    saved = (mm.get_cublas_enabled(), mm.get_allow_tf32())
    try:
        for layer, out_f, in_f in GPT_LAYERS:
            host = {name: rng.standard_normal(shape, dtype=np.float32) for name, shape in (
                ("x", (GPT_TOKENS, in_f)), ("w", (out_f, in_f)), ("dy", (GPT_TOKENS, out_f)))}
            for label, dtype, tf32 in (("bfloat16", "bfloat16", False), ("tf32", "float32", True)):
                x, w, dy = (ignis.NvArray.from_host(host[k], dtype=dtype, device="cuda:0")
                            for k in ("x", "w", "dy"))
                cases = [("forward x @ w.T", x, w.T), ("input grad dy @ w", dy, w),
                         ("weight grad dy.T @ x", dy.T, x)]
                for name, a, b in cases:
                    m, k, n = a.shape[0], a.shape[1], b.shape[1]
                    out = ignis.empty((m, n), dtype=dtype, device="cuda:0")
                    own_ms, _ = bench_ignis(a, b, out, False, tf32, seconds, 256)
                    if have_cublas:
                        blas_ms, _ = bench_ignis(a, b, out, True, tf32, seconds)
                        cells = f"{blas_ms:.3f} | {own_ms:.3f} | {blas_ms / own_ms:.2f}"
                    else:
                        cells = f"n/a | {own_ms:.3f} | "
                    print(f"| {layer} | {name} | {m} x {k} x {n} | {label} | {cells} |")
    finally:
        mm.set_cublas_enabled(saved[0])
        mm.set_allow_tf32(saved[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="4096,8192", help="comma-separated n of n x n x n")
    parser.add_argument("--seconds", type=float, default=0.6, help="time budget per measurement")
    parser.add_argument("--gpt", action="store_true", help="the GPT step's products instead")
    args = parser.parse_args()
    if args.gpt:
        gpt_products(args.seconds)
        return
    sizes = [int(s) for s in args.sizes.split(",") if s]

    dev = ignis.Device(0)
    have_cublas = mm.cublas_available()
    saved = (mm.get_cublas_enabled(), mm.get_allow_tf32())
    rng = np.random.default_rng(0)
    rows = []
    try:
        for n in sizes:
            x = rng.standard_normal((n, n), dtype=np.float32)
            y = rng.standard_normal((n, n), dtype=np.float32)
            for label, dtype, tf32 in MODES:
                hx, hy = (x, y) if dtype == "float32" else (
                    x.astype(ml_dtypes.bfloat16).astype(np.float32),
                    y.astype(ml_dtypes.bfloat16).astype(np.float32))
                a = ignis.NvArray.from_host(hx, dtype=dtype, device="cuda:0")
                b = ignis.NvArray.from_host(hy, dtype=dtype, device="cuda:0")
                out = ignis.empty((n, n), dtype=dtype, device="cuda:0")
                flops = 2.0 * n ** 3
                results: dict[str, tuple[float, np.ndarray] | str] = {}
                if have_cublas:
                    results["ignis + cuBLAS"] = bench_ignis(a, b, out, True, tf32, args.seconds)
                else:
                    results["ignis + cuBLAS"] = "n/a (cuBLAS not installed)"
                results["ignis own kernels"] = bench_ignis(a, b, out, False, tf32, args.seconds)
                if (dtype == "bfloat16" or tf32) and dev.compute_capability == (9, 0):
                    for tile_n in (128, 256):
                        for persistent in (True, False):
                            kind = "persistent" if persistent else "a block a tile"
                            results[f"ignis own wgmma 128x{tile_n}, {kind}"] = bench_ignis(
                                a, b, out, False, tf32, args.seconds, tile_n, persistent)
                results["torch.matmul"] = bench_torch(hx, hy, dtype, tf32, args.seconds)
                del a, b, out
                rows.append((n, label, flops, results))
    finally:
        mm.set_cublas_enabled(saved[0])
        mm.set_allow_tf32(saved[1])

    print(f"matmul on {dev.name}: n x n x n, median of CUDA-event-timed repeats")
    print("| n | mode | engine | ms | TFLOP/s | vs torch | own / cuBLAS | max diff vs torch |")
    print("|---:|---|---|---:|---:|---:|---:|---:|")
    for n, label, flops, results in rows:
        torch_res = results["torch.matmul"]
        blas_res = results["ignis + cuBLAS"]
        for engine, res in results.items():
            if isinstance(res, str):
                print(f"| {n} | {label} | {engine} | {res} | | | | |")
                continue
            ms, value = res
            tflops = flops / (ms * 1e-3) / 1e12
            vs_torch = own = diff = ""
            if not isinstance(torch_res, str):
                vs_torch = f"{torch_res[0] / ms:.2f}x"
                scale = float(np.abs(torch_res[1]).max()) or 1.0
                diff = f"{float(np.abs(value - torch_res[1]).max()) / scale:.1e}"
            if engine.startswith("ignis own") and not isinstance(blas_res, str):
                own = f"{blas_res[0] / ms:.2f}"
            print(f"| {n} | {label} | {engine} | {ms:.3f} | {tflops:.1f} | {vs_torch} | {own} "
                  f"| {diff} |")


if __name__ == "__main__":
    main()
