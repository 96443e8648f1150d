"""Host cost of one eager GPT training step (the model of ``gpt_step.py``) on the fake driver:
the Python side of forward, backward, gradient clipping and AdamW, no GPU needed.

Every driver entry point returns success at once (``host_overhead.FakeDriver``) and device 0 is a
stand-in H200; the rest is the real code: modules, autograd graph and rules, the array front end,
kernel choice, argument packing, memory. Kernels are compiled with NVRTC for sm_90 but never
loaded or run. A bfloat16 eager step on the GPU is host-bound, so this is its floor.

Prints host ms per step (the calling thread's CPU time, best of rounds), kernel launches per
step (by kernel family), driver calls per step, and the top functions of a cProfile of a few
steps (``--profile N`` rows; 0 to skip).

Run: ``PYTHONPATH=ignis/src:ignis_autograd/src python benchmarks/gpt_step_host.py
[--dtype bfloat16|float32] [--steps N] [--profile 25]``. On a GPU machine, run it in a process of
its own (it replaces the driver's entry points for the rest of the process).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import pstats
import re
import sys
import time
import types
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpt_step  # noqa: E402
import host_overhead  # noqa: E402
import ignis._kernel as _kernel  # noqa: E402
from host_overhead import FakeDriver  # noqa: E402
from ignis._bindings import cu, driver  # noqa: E402
from ignis._cublas import CublasError  # noqa: E402

import ignis  # noqa: E402
import ignis_autograd as ag  # noqa: E402
from ignis_autograd import nn, optim  # noqa: E402

ROUNDS = 7

# By-value argument structs of library kernels (the sizes the driver would report).
host_overhead._STRUCT_SIZES.setdefault(r"GemmArgs", lambda m: 304)

_names: Counter[str] = Counter()


def _install_named_launches(fake: FakeDriver) -> None:
    """Launches also counted by kernel name (the fake load keeps the name in the handle)."""
    plain_load = _kernel._Loaded.__dict__["load"].__func__

    def load(cls: type, kernel: Any, device: Any) -> Any:
        loaded = plain_load(cls, kernel, device)
        loaded.function = types.SimpleNamespace(name=kernel.name)
        return loaded

    counted = _kernel._launch_kernel

    def launch(function: Any, *args: Any) -> Any:
        _names[function.name] += 1
        return counted(function, *args)

    _kernel._Loaded.load = classmethod(load)  # type: ignore[method-assign]
    _kernel._launch_kernel = launch
    # Kernels above 48 KiB of shared memory opt in once (attention, GEMM tiles); some grids
    # are sized from the occupancy (taken as 8 blocks per multiprocessor here).
    results = {
        "cuFuncSetAttribute": fake.SUCCESS,
        "cuOccupancyMaxActiveBlocksPerMultiprocessor": (*fake.SUCCESS, 8),
    }
    for name, result in results.items():
        setattr(driver, name, fake._counted(name, result))
        cu.__dict__.pop(name, None)


def _family(name: str) -> str:
    """A kernel name without its template arguments (``ignis::binary_contig``)."""
    return re.sub(r"<.*", "", name)


def build_step(dtype: str) -> Any:
    ignis.random.seed(0)
    model = nn.GPT(gpt_step.VOCAB, gpt_step.CONTEXT, gpt_step.DIM, gpt_step.LAYERS,
                   gpt_step.HEADS, activation="gelu_tanh", device="cuda", dtype=dtype)
    opt = optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1,
                      master_weights=dtype != "float32")
    x_host, y_host = gpt_step.batch_ids(1)
    x = ignis.asarray(x_host, device="cuda")
    y = ignis.asarray(y_host, device="cuda")
    vocab = gpt_step.VOCAB

    def step() -> None:
        opt.zero_grad()
        logits = model(x)
        loss = ag.cross_entropy(logits.reshape(-1, vocab), y.reshape(-1))
        loss.backward()
        optim.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    return step


def best_ms(step: Any, steps: int) -> float:
    best = float("inf")
    gc_was = gc.isenabled()
    gc.disable()
    try:
        for _ in range(ROUNDS):
            t0 = time.thread_time()
            for _ in range(steps):
                step()
            best = min(best, (time.thread_time() - t0) / steps * 1e3)
            gc.collect()
    finally:
        if gc_was:
            gc.enable()
    return best


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    parser.add_argument("--steps", type=int, default=5, help="steps per timed round")
    parser.add_argument("--profile", type=int, default=25, help="cProfile rows (0: none)")
    args = parser.parse_args(argv)
    fake = FakeDriver()
    fake.install()
    _install_named_launches(fake)
    step = build_step(args.dtype)
    gemm = "cuBLAS"
    try:
        step()
    except CublasError:
        # cuBLAS creates its handle on a real driver: on a machine with the cuBLAS wheel but no
        # driver, the step is measured on the own GEMM kernels' host path instead
        ignis.set_cublas_enabled(False)
        gemm = "own GEMM kernels (cuBLAS needs a driver)"
        step = build_step(args.dtype)
    for _ in range(3):  # compiles the kernels (NVRTC, then the disk cache), fills the caches
        step()
    gc.collect()
    fake.reset()
    _names.clear()
    step()
    gc.collect()
    calls = fake.snapshot()
    names = Counter(_names)
    ms = best_ms(step, args.steps)
    launches = sum(names.values())
    print(f"GPT step host cost on the fake driver ({args.dtype}, {gpt_step.LAYERS} layers, "
          f"width {gpt_step.DIM}, batch {gpt_step.BATCH}, products on {gemm}): CPU time, best "
          f"of {ROUNDS} rounds")
    print("| host ms / step | launches / step | us / launch | driver calls / step |")
    print("|---:|---:|---:|---|")
    shown = ", ".join(f"{k} {v}" for k, v in calls.items() if k != "cuLaunchKernel")
    print(f"| {ms:.2f} | {launches} | {ms * 1e3 / max(1, launches):.1f} | {shown} |")
    print()
    print("| kernel family | launches / step |")
    print("|---|---:|")
    families = Counter()
    for name, n in names.items():
        families[_family(name)] += n
    for fam, n in families.most_common():
        print(f"| {fam} | {n} |")
    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(args.steps):
            step()
        prof.disable()
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(args.profile)
        print()
        print(f"cProfile of {args.steps} steps, by own time:")
        print(out.getvalue())


if __name__ == "__main__":
    main(sys.argv[1:])
