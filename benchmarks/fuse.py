"""ignis.fuse on a six-op GELU-like chain: fused beside the unfused ops, a hand-written kernel,
PyTorch eager and ``torch.compile``; and forward + backward through ignis_autograd beside
PyTorch's autograd (eager and compiled).

The chain is ``0.5 * x * (1 + tanh(0.79788456 * (x + 0.044715 * x * x * x)))`` over 2**26
float32 elements (the same device memory for every library, shared through DLPack). Each time is
the median of several rounds timed with CUDA events on the library's own stream, each round
running the call a few times back to back after a warm-up (compilation happens in the warm-up).
Bandwidth counts one read of ``x`` and one write of the result (forward), and for forward +
backward the reads of ``x`` (twice) and of the gradient and the writes of the result and of
``x``'s gradient: what a fused pair moves. ``vs fused`` is the fused time over the other's
(above 1: the fused kernel is faster). Goals: the unfused ops >= 3x slower, the hand-written
kernel within 0.95x. The last column is the largest difference from PyTorch eager's result,
relative to the result's scale.

Run on a GPU machine: ``python benchmarks/fuse.py``. Prints Markdown tables.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from reduction import max_rel_diff, time_ignis, time_torch  # shared timing

import ignis

N = 1 << 26
C0, C1 = 0.79788456, 0.044715


def chain(x: Any, tanh: Callable[[Any], Any]) -> Any:
    """The six-op chain, for any library (its ``tanh`` given)."""
    return 0.5 * x * (1.0 + tanh(C0 * (x + C1 * x * x * x)))


@ignis.fuse(kernel_name="gelu_chain")
def fused(x):
    return chain(x, ignis.tanh)


def _autograd_chain(x):
    import ignis_autograd as ag

    return chain(x, ag.tanh)


fused_ag = ignis.fuse(_autograd_chain, kernel_name="gelu_chain_ag")

HAND = ignis.ElementwiseKernel(
    "float32 x",
    "float32 y",
    "y = 0.5f * x * (1.0f + tanhf(0.79788456f * (x + 0.044715f * x * x * x)))",
    "gelu_chain_hand",
)


def row(name: str, ms: float, fused_ms: float, nbytes: int, diff: float | None) -> None:
    gbs = nbytes / ms / 1e6
    d = "" if diff is None else f"{diff:.1e}"
    print(f"| {name} | {ms:.3f} | {gbs:.0f} | {ms / fused_ms:.2f}x | {d} |")


def forward_table(torch: Any) -> None:
    gen = torch.Generator(device="cuda").manual_seed(0)
    t = torch.randn((N,), device="cuda", dtype=torch.float32, generator=gen)
    x = ignis.from_dlpack(t)
    ref = chain(t, torch.tanh)
    compiled = torch.compile(lambda u: chain(u, torch.tanh))
    nbytes = N * 4 * 2
    fused_ms = time_ignis(lambda: fused(x))
    rows = [
        ("ignis.fuse", fused_ms, max_rel_diff(fused(x), ref)),
        ("ignis unfused ops", time_ignis(lambda: chain(x, ignis.tanh)),
         max_rel_diff(chain(x, ignis.tanh), ref)),
        ("ignis hand-written ElementwiseKernel", time_ignis(lambda: HAND(x)),
         max_rel_diff(HAND(x), ref)),
        ("torch eager", time_torch(lambda: chain(t, torch.tanh)), None),
        ("torch.compile", time_torch(lambda: compiled(t)), None),
    ]  # fmt: skip
    print(f"# ignis.fuse: six-op GELU chain, {N} float32, {ignis.Device(0).name}\n")
    print("| forward | ms | GB/s | vs fused | max rel diff |")
    print("|---|---|---|---|---|")
    for name, ms, diff in rows:
        row(name, ms, fused_ms, nbytes, diff)


def backward_table(torch: Any) -> None:
    import ignis_autograd as ag

    gen = torch.Generator(device="cuda").manual_seed(1)
    t = torch.randn((N,), device="cuda", dtype=torch.float32, generator=gen)
    tg = torch.randn((N,), device="cuda", dtype=torch.float32, generator=gen)
    xt = ag.Tensor(ignis.from_dlpack(t.detach().clone()), requires_grad=True)
    g = ag.Tensor(ignis.from_dlpack(tg))
    tt = t.detach().clone().requires_grad_(True)
    compiled = torch.compile(lambda u: chain(u, torch.tanh))

    def ours(fn: Callable[[Any], Any]) -> Callable[[], Any]:
        def step() -> Any:
            xt.grad = None
            fn(xt).backward(g)
            return xt.grad

        return step

    def theirs(fn: Callable[[Any], Any]) -> Callable[[], Any]:
        def step() -> Any:
            tt.grad = None
            fn(tt).backward(tg)
            return tt.grad

        return step

    ref = theirs(lambda u: chain(u, torch.tanh))()
    nbytes = N * 4 * 5
    fused_ms = time_ignis(ours(fused_ag))
    rows = [
        ("ignis.fuse (one node, fused backward)", fused_ms, max_rel_diff(ours(fused_ag)(), ref)),
        ("ignis_autograd unfused", time_ignis(ours(_autograd_chain)),
         max_rel_diff(ours(_autograd_chain)(), ref)),
        ("torch eager", time_torch(theirs(lambda u: chain(u, torch.tanh))), None),
        ("torch.compile", time_torch(theirs(compiled)), None),
    ]  # fmt: skip
    print("\n| forward + backward | ms | GB/s | vs fused | max rel diff (grad) |")
    print("|---|---|---|---|---|")
    for name, ms, diff in rows:
        row(name, ms, fused_ms, nbytes, diff)


def main() -> int:
    if not ignis.is_available():
        print("benchmarks/fuse.py needs a CUDA GPU", file=sys.stderr)
        return 1
    import torch

    forward_table(torch)
    torch.cuda.empty_cache()
    backward_table(torch)
    return 0


if __name__ == "__main__":
    sys.exit(main())
