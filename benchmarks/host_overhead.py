"""Host cost of small NvArray ops on a CUDA device: what Python adds around the driver calls.

Times ``a + b``, ``a * 2.0``, ``a.sum()``, ``x.reshape``, ``x.T`` and ``ignis.exp(a)`` on small
float32 arrays of ``cuda:0`` (1000 elements; ``x`` is 20 x 50), in microseconds per call, with
the result dropped at once so its memory is freed inside the loop (allocation and free are part
of the cost, as in real code).

Two modes:

* **real** (a GPU is present): the real driver. The loops only queue work, so the time is host
  time; the device drains after each round. With PyTorch installed, the same ops on torch tensors
  are timed alongside.
* **fake driver** (no GPU, or ``--fake-driver``): every driver entry point the ops reach
  (``cuLaunchKernel``, ``cuMemAllocAsync``, ``cuMemFreeAsync`` and the few set-up calls) is
  replaced by a Python function that returns success at once, and device 0 is a stand-in H200
  (sm_90, 132 SMs). Everything else is the real code: the front end, the op rules, the CUDA
  backend's kernel choice and argument packing, allocation statistics and buffer lifetimes.
  Kernels are compiled with NVRTC for sm_90 (no GPU needed), but never loaded. The table then
  shows the time per call, the driver calls per op, and the Python-side cost: the time minus
  what the fake driver calls themselves took.

Run: ``PYTHONPATH=ignis/src python benchmarks/host_overhead.py [--fake-driver]``. Prints
Markdown tables. Fake-driver times are the calling thread's CPU time, best of several rounds
(the functions take turns within each round); real-driver times are wall time, median of rounds.
On a GPU machine, ``--fake-driver`` (in its own process) gives that host's Python side alone.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import re
import statistics
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import ignis._bindings as _bindings
import ignis._device as _device
import ignis._kernel as _kernel
import ignis._tensor_map as tensor_map
import numpy as np
from ignis._arg_packing import ArgPacker
from ignis._array._cuda_backend import attention as cuda_attention
from ignis._array._cuda_backend import elementwise as cuda_ew
from ignis._array._cuda_backend import matmul_sm90 as cuda_matmul_sm90
from ignis._array._cuda_backend._strided import StridedPacker
from ignis._bindings import cu, driver

import ignis

N = 1000
SHAPE2 = (20, 50)
CALLS = 20_000  # per round, fake driver (about 6 us per call)
ROUNDS = 15
REAL_CALLS = 5_000  # per round, real driver (tens of us per call: the run stays under a minute)
REAL_ROUNDS = 7

# A stand-in H200: what the CUDA backend and the launch path read from the device.
H200 = {
    "max_threads_per_block": 1024,
    "max_block_dim": (1024, 1024, 64),
    "max_grid_dim": (2**31 - 1, 65535, 65535),
    "max_shared_memory_per_block": 48 * 1024,
    "max_shared_memory_per_block_optin": 227 * 1024,
    "max_shared_memory_per_multiprocessor": 228 * 1024,
    "cooperative_launch": True,
    "multiprocessor_count": 132,
    "max_threads_per_multiprocessor": 2048,
    "warp_size": 32,
    "memory_pools_supported": True,
    "compute_capability_major": 9,
    "compute_capability_minor": 0,
    "compute_capability": (9, 0),
    "arch": "sm_90",
    "name": "fake H200",
    "total_memory": 141 * 2**30,
    "ordinal": 0,
}

# Sizes of the by-value structs of the kernel library (what cuFuncGetParamInfo reports).
_STRUCT_SIZES: dict[str, Callable[[re.Match[str]], int]] = {
    r"StridedArgs<(\d+)>": lambda m: StridedPacker(int(m.group(1))).size,
    r"OuterLayout": lambda m: 8 * 8 + 8 * 8 + 4 + 4,
    r"^Layout$": lambda m: cuda_attention.LAYOUT.size,  # ignis::attn::Layout
    r"tma::TensorMap$": lambda m: tensor_map.MAP_BYTES,  # a CUtensorMap (the Hopper kernels)
    r"^WgmmaArgs$": lambda m: cuda_matmul_sm90._ARGS.size,  # gemm_wgmma's problem
}


# Driver entry points the timed ops (and their set-up) reach, besides cuLaunchKernel.
_FAKED = (
    "cuMemAllocAsync",
    "cuMemFreeAsync",
    "cuMemAlloc",
    "cuMemFree",
    "cuDeviceGetDefaultMemPool",
    "cuMemPoolSetAttribute",
    "cuCtxSetCurrent",
    "cuMemcpyAsync",
    "cuMemcpyDtoDAsync",
    "cuMemsetD8Async",
    "cuMemsetD16Async",
    "cuMemsetD32Async",
    "cuStreamSynchronize",
    "cuCtxSynchronize",
    "cuTensorMapEncodeTiled",  # (the Hopper kernels' TMA descriptors: opaque bytes)
)


class FakeDriver:
    """Replaces driver entry points with functions that return success, and counts the calls."""

    SUCCESS = (driver.CUresult.CUDA_SUCCESS,)

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self._saved: dict[str, Any] = {}
        success = driver.CUresult.CUDA_SUCCESS
        # The result of every allocation call: the address of the first (see _counted).
        self._alloc_result = (success, driver.CUdeviceptr(0x7F00_0000_0000))
        self._pool_result = (success, driver.CUmemoryPool(0x1000))

    def _counted(self, name: str, result: tuple[Any, ...]) -> Callable[..., tuple[Any, ...]]:
        counts = self.counts
        counts[name] = 0
        if result is self._alloc_result:
            # Distinct live allocations have distinct addresses (4 GiB apart, 256-byte aligned),
            # as on a device: the backend's plan caches tell buffers apart by address.
            success = driver.CUresult.CUDA_SUCCESS
            serial = itertools.count()

            def allocate(*args: Any) -> tuple[Any, ...]:
                counts[name] += 1
                return (success, driver.CUdeviceptr(0x7F00_0000_0000 + (next(serial) % 4096 << 32)))

            allocate.__name__ = name
            return allocate

        def call(*args: Any) -> tuple[Any, ...]:
            counts[name] += 1
            return result

        call.__name__ = name
        return call

    def install(self) -> None:
        results = {
            "cuMemAllocAsync": self._alloc_result,
            "cuMemAlloc": self._alloc_result,
            "cuDeviceGetDefaultMemPool": self._pool_result,
            "cuTensorMapEncodeTiled": (driver.CUresult.CUDA_SUCCESS, driver.CUtensorMap()),
        }
        fakes = {name: self._counted(name, results.get(name, self.SUCCESS)) for name in _FAKED}
        for name, fake in fakes.items():
            self._saved[name] = getattr(driver, name)
            setattr(driver, name, fake)
            cu.__dict__.pop(name, None)  # the checked wrapper is rebuilt around the fake
        self._saved["_launch_kernel"] = _kernel._launch_kernel
        _kernel._launch_kernel = self._counted("cuLaunchKernel", self.SUCCESS)
        self._saved["_Loaded.load"] = _kernel._Loaded.__dict__["load"]
        _kernel._Loaded.load = classmethod(_fake_load)  # type: ignore[method-assign]
        _bindings._init_state.update(done=True, ok=True, reason="")
        dev = object.__new__(_device.Device)
        dev.ordinal = 0
        dev._handle = None
        dev._context = object()
        dev._context_lock = threading.Lock()
        dev._properties = dict(H200)
        _device._devices[0] = dev
        _device._tls.device = dev
        _device._tls.active = dev

    def reset(self) -> None:
        for name in self.counts:
            self.counts[name] = 0

    def snapshot(self) -> dict[str, int]:
        return {k: v for k, v in self.counts.items() if v}


def _fake_load(cls: type, kernel: Any, device: Any) -> Any:
    """``_Loaded.load`` without a driver: parameter sizes from the source, no module."""
    sizes = []
    for p in kernel.params:
        size = p.size
        if size is None:
            for pattern, size_of in _STRUCT_SIZES.items():
                m = re.search(pattern, p.ctype)
                if m:
                    size = size_of(m)
                    break
            else:
                raise RuntimeError(f"host_overhead: unknown struct parameter {p.ctype!r}")
        sizes.append(size)
    packer = ArgPacker(kernel.params, kernel.name, param_sizes=sizes)
    limits = dict(device.properties)
    limits["kernel_max_threads_per_block"] = 1024
    limits["kernel_static_shared_bytes"] = 0
    return cls(device, object(), packer, limits, name=kernel.name)


def median_wall_us(fn: Callable[[], object], calls: int, sync: Callable[[], None]) -> float:
    """Median over rounds of wall-clock microseconds per call; the device drains between
    rounds, outside the timed part."""
    return paired_median_us([fn], [sync], calls)[0]


def ignis_ops() -> dict[str, Callable[[], object]]:
    rng = np.random.default_rng(0)
    a = ignis.asarray(rng.standard_normal(N).astype(np.float32), device="cuda:0")
    b = ignis.asarray(rng.standard_normal(N).astype(np.float32), device="cuda:0")
    x = ignis.asarray(rng.standard_normal(SHAPE2).astype(np.float32), device="cuda:0")
    return {
        "a + b": lambda: a + b,
        "a * 2.0": lambda: a * 2.0,
        "a.sum()": lambda: a.sum(),
        "x.reshape(50, 20)": lambda: x.reshape(50, 20),
        "x.T": lambda: x.T,
        "ignis.exp(a)": lambda: ignis.exp(a),
    }


def torch_ops() -> dict[str, Callable[[], object]] | None:
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    a = torch.randn(N, device="cuda")
    b = torch.randn(N, device="cuda")
    x = torch.randn(SHAPE2, device="cuda")
    return {
        "a + b": lambda: a + b,
        "a * 2.0": lambda: a * 2.0,
        "a.sum()": lambda: a.sum(),
        "x.reshape(50, 20)": lambda: x.reshape(50, 20),
        "x.T": lambda: x.T,
        "ignis.exp(a)": lambda: torch.exp(a),
    }


def interleaved_best_us(fns: dict[str, Callable[[], object]], calls: int) -> dict[str, float]:
    """Best over rounds of CPU microseconds per call, the functions taking turns in each round
    so that a slow stretch of the machine touches all of them alike."""
    for fn in fns.values():
        for _ in range(min(calls, 2000)):
            fn()
    best = dict.fromkeys(fns, float("inf"))
    gc_was = gc.isenabled()
    gc.disable()  # collections would land in random rounds
    try:
        for _ in range(ROUNDS):
            for label, fn in fns.items():
                t0 = time.thread_time()
                for _ in range(calls):
                    fn()
                best[label] = min(best[label], (time.thread_time() - t0) / calls * 1e6)
    finally:
        if gc_was:
            gc.enable()
    return best


def run_fake(calls: int) -> None:
    fake = FakeDriver()
    fake.install()
    ops = ignis_ops()
    counts = {}
    for label, fn in ops.items():  # compiles the kernels (NVRTC, then the disk cache) first
        fn()
        gc.collect()
        fake.reset()
        fn()
        gc.collect()
        counts[label] = fake.snapshot()
    free = driver.cuMemFreeAsync
    handle = driver.CUstream(0)
    times = interleaved_best_us({**ops, "fake driver call": lambda: free(0, handle)}, calls)
    per_fake = times.pop("fake driver call")
    print(f"Host cost per op, fake driver (no GPU), {N} float32 elements; CPU time, best of "
          f"{ROUNDS} rounds of {calls} calls")
    print("| op | us per call | driver calls per op | Python side, us |")
    print("|---|---:|---|---:|")
    for label, us in times.items():
        per_op = counts[label]
        n_calls = sum(per_op.values())
        shown = ", ".join(f"{k} {v}" for k, v in per_op.items()) or "none"
        print(f"| {label} | {us:.2f} | {shown} | {us - n_calls * per_fake:.2f} |")
    print(f"\nOne fake driver call costs {per_fake:.3f} us (subtracted per driver call).")


def paired_median_us(
    fns: list[Callable[[], object]], syncs: list[Callable[[], None]], calls: int
) -> list[float]:
    """Median over rounds of wall-clock microseconds per call of each function, the device
    drained between rounds outside the timed part. The functions' rounds take turns (round 1
    of each, then round 2 of each, ...), so that a slow stretch of a shared host touches all
    alike."""
    for fn, sync in zip(fns, syncs, strict=True):
        for _ in range(min(calls, 2000)):
            fn()
        sync()
    samples: list[list[float]] = [[] for _ in fns]
    gc_was = gc.isenabled()
    gc.disable()
    try:
        for _ in range(REAL_ROUNDS):
            for fn, sync, out in zip(fns, syncs, samples, strict=True):
                t0 = time.perf_counter()
                for _ in range(calls):
                    fn()
                out.append((time.perf_counter() - t0) / calls * 1e6)
                sync()
    finally:
        if gc_was:
            gc.enable()
    return [statistics.median(x) for x in samples]


def launch_floor() -> tuple[Callable[[], object], Callable[[], object] | None]:
    """One bare launch each way: ``cuLaunchKernel`` of the add kernel through ``cuda.bindings``
    with its arguments packed once (what every ignis op pays at least), and PyTorch's cheapest
    launch from Python, ``torch.cuda._sleep(0)`` (one kernel of one thread; None without it)."""
    a = ignis.zeros(N, device="cuda:0")
    a + a  # compiles and loads the kernel
    key = next(k for k in cuda_ew._kernels if k[0] == "add" and len(k) == 7)
    kernel = cuda_ew._kernels[("binary", *key[:2], "float32", "float32", "float32", *key[3:6])]
    state = kernel._loaded[0]
    ptr = a._storage.ptr
    block, address = state.packer.acquire([ptr, ptr, ptr, 0.0, 0.0, N])
    function, handle, launch = state.function, ignis.current_stream().handle, driver.cuLaunchKernel

    def bindings() -> object:
        return launch(function, 1, 1, 1, 256, 1, 1, 0, handle, address, 0), block, a

    try:
        import torch

        sleep = torch.cuda._sleep if torch.cuda.is_available() else None
    except (ImportError, AttributeError):
        sleep = None
    return bindings, (None if sleep is None else lambda: sleep(0))


def run_real(calls: int) -> None:
    def sync() -> None:
        ignis.synchronize()

    ops = ignis_ops()
    torch = torch_ops()
    print(f"Host cost per op on {ignis.Device(0).name}, {N} float32 elements; wall time, "
          f"median of {REAL_ROUNDS} rounds of {calls} calls (ignis and torch rounds alternate)")
    if torch:
        import torch as _torch

        def tsync() -> None:
            _torch.cuda.synchronize()

        print("| op | ignis us per call | torch us per call | ignis / torch |")
        print("|---|---:|---:|---:|")
        for label, fn in ops.items():
            us, tus = paired_median_us([fn, torch[label]], [sync, tsync], calls)
            print(f"| {label} | {us:.2f} | {tus:.2f} | {us / tus:.2f} |")
        bindings, sleep = launch_floor()
        if sleep is not None:
            us, tus = paired_median_us([bindings, sleep], [sync, tsync], calls)
            print(f"| one bare launch (cuda.bindings cuLaunchKernel / torch.cuda._sleep(0)) "
                  f"| {us:.2f} | {tus:.2f} | {us / tus:.2f} |")
    else:
        print("| op | ignis us per call |")
        print("|---|---:|")
        for label, fn in ops.items():
            print(f"| {label} | {median_wall_us(fn, calls, sync):.2f} |")
    print("\nThe Python side alone on this host: run again with --fake-driver.")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--fake-driver", action="store_true",
                        help="replace the driver's entry points (default when no GPU is present)")
    parser.add_argument("--calls", type=int, default=None, help="calls per timed round")
    args = parser.parse_args(argv)
    if args.fake_driver or not ignis.is_available():
        run_fake(args.calls or CALLS)
    else:
        run_real(args.calls or REAL_CALLS)


if __name__ == "__main__":
    main(sys.argv[1:])
