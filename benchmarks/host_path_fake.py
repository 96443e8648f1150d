"""Host cost of small ops and autograd steps on the fake driver: the Python side, no GPU needed.

Every driver entry point the ops reach returns success at once (``host_overhead.FakeDriver``),
and device 0 is a stand-in H200; everything else is the real code of the CUDA backend: the front
end, the op rules and plans, kernel choice, argument packing, the memory resource and its block
cache, the autograd graph. Kernels are compiled with NVRTC for sm_90 (no GPU needed) but never
loaded. This is the number to watch when changing a hot path on a machine without a GPU.

Rows:

* NvArray ops on 1,000 float32 elements (``x`` is 20 x 50), as in ``host_overhead.py``;
* ``(x*x).sum().backward()`` on 1,000 float32 elements (3 ops forward, their rules backward);
* one MLP step as in ``autograd_overhead.py`` (batch 512, 1024 -> 4096 -> 1024, float32):
  forward, ``mean((y - T)**2)``, backward, gradients reset. The shapes only change the grids.

Times are the calling thread's CPU time, best of several rounds (the rows take turns within each
round), in microseconds per call; "driver calls" counts the fake entry points one call reaches.

Run: ``PYTHONPATH=ignis/src:ignis_autograd/src python benchmarks/host_path_fake.py [--calls N]``.
Prints a Markdown table. On a GPU machine, run it in a process of its own (it replaces the
driver's entry points for the rest of the process).
"""

from __future__ import annotations

import argparse
import gc
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import autograd_overhead  # noqa: E402
import host_overhead  # noqa: E402
from host_overhead import FakeDriver, ignis_ops, interleaved_best_us  # noqa: E402

CALLS = 5_000  # per round, for the NvArray ops; the autograd rows scale this down
MLP_SHAPE = (512, 1024, 4096, 1024)

# The GEMM kernels' by-value argument struct (cuda_src/matmul.cu: static_assert 304 bytes).
host_overhead._STRUCT_SIZES[r"GemmArgs"] = lambda m: 304


def _fake_occupancy(self: object, block: object, shared_mem: int) -> int:
    """Blocks of ``block`` threads resident per SM on the stand-in H200 (2048 threads, at most
    32 blocks): what ``_Loaded.occupancy`` would ask the driver, which the fake cannot answer."""
    threads = block if isinstance(block, int) else int(np.prod(block))
    return max(1, min(32, 2048 // max(1, threads)))


def autograd_ops() -> dict[str, Callable[[], object]]:
    from ignis_autograd import Tensor

    x = Tensor.from_host(
        np.random.default_rng(0).random(1000), dtype="float32", device="cuda:0", requires_grad=True
    )

    def small() -> None:
        (x * x).sum().backward()

    step, _ = autograd_overhead.mlp_ours(autograd_overhead.mlp_data(*MLP_SHAPE), "cuda:0")
    return {"(x*x).sum().backward()": small, "MLP step, fwd+bwd": step}


def measure(fns: dict[str, Callable[[], object]], calls: int, fake: FakeDriver) -> list[tuple]:
    counts = {}
    for label, fn in fns.items():  # compiles the kernels (NVRTC, then the disk cache) first
        fn()
        fn()
        gc.collect()
        fake.reset()
        fn()
        gc.collect()
        counts[label] = fake.snapshot()
    times = interleaved_best_us(fns, calls)
    return [(label, times[label], counts[label]) for label in fns]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--calls", type=int, default=CALLS, help="calls per round (NvArray ops)")
    args = parser.parse_args(argv)
    fake = FakeDriver()
    fake.install()
    # Kernel plans that size their grids by occupancy (the reductions) ask the loaded kernel.
    host_overhead._kernel._Loaded.occupancy = _fake_occupancy  # type: ignore[method-assign]
    rows = measure(ignis_ops(), args.calls, fake)
    rows += measure(autograd_ops(), max(20, args.calls // 100), fake)
    print(
        f"Host cost on the fake driver (no GPU; stand-in H200), CPU time, best of "
        f"{host_overhead.ROUNDS} rounds"
    )
    print("| op | us per call | driver calls per call |")
    print("|---|---:|---|")
    for label, us, per_call in rows:
        shown = ", ".join(f"{k} {v}" for k, v in per_call.items()) or "none"
        print(f"| {label} | {us:.2f} | {shown} |")


if __name__ == "__main__":
    main(sys.argv[1:])
