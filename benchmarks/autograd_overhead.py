"""Autograd cost side by side with PyTorch, in one process.

1. Host overhead of a tiny graph: ``(x * x).sum().backward()`` on 1,000 float32 elements, the
   gradient accumulating into ``x.grad`` every iteration. The GPU work is negligible, so the
   wall time per iteration (queueing only, one synchronize per round) is the host cost of the
   three forward/backward ops and the graph bookkeeping.
2. An MLP step: ``mean((relu(X @ W1 + b1) @ W2 + b2 - T) ** 2)`` forward and backward, batch 512,
   1024 -> 4096 -> 1024, float32, gradients set to None every step (X and T need no gradient).
   Before timing, loss and gradients are compared with PyTorch's.

Run on a GPU machine: ``python benchmarks/autograd_overhead.py [--device cuda:0]``. Without a GPU it
runs on the CPU backend (and PyTorch on the CPU), which says little about the GPU numbers.
Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np

import ignis
from ignis_autograd import Tensor

ROUNDS = 7


def per_iter(step: Callable[[], None], sync: Callable[[], None], iters: int, warmup: int) -> float:
    """Median over rounds of wall seconds per ``step`` (steps queued back to back, then synced)."""
    for _ in range(warmup):
        step()
    sync()
    samples = []
    for _ in range(ROUNDS):
        t0 = time.perf_counter()
        for _ in range(iters):
            step()
        sync()
        samples.append((time.perf_counter() - t0) / iters)
    return statistics.median(samples)


def small_graph_ours(device: str, iters: int) -> float:
    x = Tensor.from_host(
        np.random.default_rng(0).random(1000), dtype="float32", device=device, requires_grad=True
    )

    def step() -> None:
        (x * x).sum().backward()

    return per_iter(step, lambda: ignis.synchronize() if device != "cpu" else None, iters, 200)


def small_graph_torch(torch: object, device: str, iters: int) -> float:
    x = torch.tensor(
        np.random.default_rng(0).random(1000),
        dtype=torch.float32,
        device=device,
        requires_grad=True,
    )

    def step() -> None:
        (x * x).sum().backward()

    def sync() -> None:
        if device != "cpu":
            torch.cuda.synchronize()

    return per_iter(step, sync, iters, 200)


def mlp_data(batch: int, d_in: int, d_hidden: int, d_out: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    return {
        "X": rng.standard_normal((batch, d_in)).astype(np.float32),
        "T": rng.standard_normal((batch, d_out)).astype(np.float32),
        "W1": (rng.standard_normal((d_in, d_hidden)) / np.sqrt(d_in)).astype(np.float32),
        "b1": (rng.standard_normal(d_hidden) * 0.01).astype(np.float32),
        "W2": (rng.standard_normal((d_hidden, d_out)) / np.sqrt(d_hidden)).astype(np.float32),
        "b2": (rng.standard_normal(d_out) * 0.01).astype(np.float32),
    }


def mlp_ours(
    data: dict[str, np.ndarray], device: str
) -> tuple[Callable[[], None], Callable[[], dict]]:
    t = {
        k: Tensor.from_host(v, dtype="float32", device=device, requires_grad=k not in ("X", "T"))
        for k, v in data.items()
    }
    params = [t["W1"], t["b1"], t["W2"], t["b2"]]

    def step() -> float:
        for p in params:
            p.zero_grad()
        h = (t["X"] @ t["W1"]).add_bias(t["b1"]).relu()
        y = (h @ t["W2"]).add_bias(t["b2"])
        loss = ((y - t["T"]) ** 2).mean()
        loss.backward()
        return loss

    def result() -> dict:
        loss = step()
        out = {"loss": np.float64(loss.item())}
        out.update({k: t[k].grad.to_host() for k in ("W1", "b1", "W2", "b2")})
        return out

    return step, result


def mlp_torch(
    torch: object, data: dict[str, np.ndarray], device: str
) -> tuple[Callable[[], None], Callable[[], dict]]:
    t = {
        k: torch.tensor(v, device=device, requires_grad=k not in ("X", "T"))
        for k, v in data.items()
    }
    params = [t["W1"], t["b1"], t["W2"], t["b2"]]

    def step() -> object:
        for p in params:
            p.grad = None
        h = torch.relu(t["X"] @ t["W1"] + t["b1"])
        y = h @ t["W2"] + t["b2"]
        loss = ((y - t["T"]) ** 2).mean()
        loss.backward()
        return loss

    def result() -> dict:
        loss = step()
        out = {"loss": np.float64(loss.item())}
        out.update({k: t[k].grad.cpu().numpy() for k in ("W1", "b1", "W2", "b2")})
        return out

    return step, result


def max_rel_diff(a: dict, b: dict) -> float:
    worst = 0.0
    for k in a:
        x, y = np.asarray(a[k], np.float64), np.asarray(b[k], np.float64)
        worst = max(worst, float(np.abs(x - y).max() / max(np.abs(y).max(), 1e-30)))
    return worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--device", default=None, help="ignis device (default: cuda:0 when available)"
    )
    parser.add_argument("--small-iters", type=int, default=2000)
    parser.add_argument("--mlp-iters", type=int, default=30)
    args = parser.parse_args()
    device = args.device or ("cuda:0" if ignis.is_available() else "cpu")
    try:
        import torch
    except ImportError:
        torch = None
    torch_device = "cuda" if device.startswith("cuda") else "cpu"
    if torch is not None and torch_device == "cuda" and not torch.cuda.is_available():
        torch = None

    rows: list[tuple[str, float, float | None, str]] = []
    ours = small_graph_ours(device, args.small_iters) * 1e6
    theirs = small_graph_torch(torch, torch_device, args.small_iters) * 1e6 if torch else None
    rows.append(("(x*x).sum().backward(), 1,000 float32, host us/iter", ours, theirs, "no worse"))

    data = mlp_data(512, 1024, 4096, 1024)
    step, result = mlp_ours(data, device)
    sync = (lambda: ignis.synchronize()) if device != "cpu" else (lambda: None)
    check = ""
    if torch:
        t_step, t_result = mlp_torch(torch, data, torch_device)
        check = (
            f"max rel. diff of loss and grads vs PyTorch: {max_rel_diff(result(), t_result()):.2e}"
        )
        t_sync = torch.cuda.synchronize if torch_device == "cuda" else (lambda: None)
        theirs = per_iter(t_step, t_sync, args.mlp_iters, 5) * 1e3
    else:
        theirs = None
    ours = per_iter(step, sync, args.mlp_iters, 5) * 1e3
    rows.append(
        ("MLP fwd+bwd, batch 512, 1024-4096-1024 float32, ms/iter", ours, theirs, "<= 1.1x")
    )

    where = (
        ignis.Device(int(device.split(":")[1])).name if device.startswith("cuda") else "cpu backend"
    )
    print(
        f"autograd overhead on {where}, median of {ROUNDS} rounds"
        + ("" if torch else " (PyTorch not available)")
    )
    if check:
        print(check)
    print("| benchmark | ignis_autograd | PyTorch | ratio | goal |")
    print("|---|---:|---:|---:|---|")
    for name, a, b, goal in rows:
        if b is None:
            print(f"| {name} | {a:.2f} | n/a | | {goal} |")
        else:
            print(f"| {name} | {a:.2f} | {b:.2f} | {a / b:.2f}x | {goal} |")


if __name__ == "__main__":
    main()
