"""Host cost of a kernel launch on the Python side (no GPU needed).

The driver's ``cuLaunchKernel`` is replaced by a Python function that returns ``(0,)`` at once;
everything else is the real launch path: the stream's device, the configuration check (cached),
argument conversion and packing into reused ``kernelParams`` storage, device activation, the
status check. The overhead of ``Kernel.launch`` is its time per launch minus the time of calling
that fake directly with the same arguments, i.e. what ignis adds to a raw ``cuLaunchKernel``.

Kernels: ``noop(float* x, int n)`` (2 parameters) and
``axpby(float a, const float* x, float b, float* y, long long n, int flags)`` (6 parameters).
Also timed: :class:`ArgPacker` on its own (``pack`` with fresh storage, ``acquire``/``release``
with reused storage) and the one-off costs (parsing the source, building the packer).

Run: ``PYTHONPATH=ignis/src python benchmarks/pack_overhead.py``. Prints Markdown tables. Times
are the calling thread's CPU time (the loops never wait), the best of several rounds, so that
other work on the machine disturbs them as little as possible.
"""

from __future__ import annotations

import threading
import time
import types
from collections.abc import Callable

import ignis._device as _device
import ignis._kernel as _kernel
import numpy as np
from ignis._arg_packing import ArgPacker
from ignis._bindings import driver
from ignis._device import Device
from ignis._kernel import Kernel, _Loaded
from ignis._signature import parse_kernel_params
from ignis._stream import Stream

NOOP = 'extern "C" __global__ void noop(float* x, int n) {}'
AXPBY = r"""
extern "C" __global__ void axpby(float a, const float* __restrict__ x, float b,
                                 float* __restrict__ y, long long n, int flags) {}
"""
AXPBY_SIZES = [4, 8, 4, 8, 8, 4]
LIMITS = {
    "max_threads_per_block": 1024,
    "max_block_dim": (1024, 1024, 64),
    "max_grid_dim": (2**31 - 1, 65535, 65535),
    "max_shared_memory_per_block": 48 * 1024,
    "max_shared_memory_per_block_optin": 227 * 1024,
    "cooperative_launch": True,
    "multiprocessor_count": 132,
    "kernel_max_threads_per_block": 1024,
    "kernel_static_shared_bytes": 0,
}


class DeviceBuffer:
    """Stands in for an ignis buffer: what the packer reads is its int ``.ptr``."""

    __slots__ = ("ptr",)

    def __init__(self, ptr: int):
        self.ptr = ptr


def fake_launch(*args: object) -> tuple[int]:
    return (0,)


Case = tuple[str, Callable[[], object], int]  # (label, one call, calls per round)


def best_us(cases: list[Case], passes: int = 3, rounds: int = 8) -> list[float]:
    """Microseconds per call of each case: the best round, cases interleaved over passes."""
    best = [float("inf")] * len(cases)
    for _ in range(passes):
        for i, (_, fn, calls) in enumerate(cases):
            for _ in range(min(calls, 2000)):
                fn()
            for _ in range(rounds):
                t0 = time.thread_time()
                for _ in range(calls):
                    fn()
                best[i] = min(best[i], (time.thread_time() - t0) / calls * 1e6)
    return best


def fake_device() -> tuple[Device, Stream]:
    """Device 0 and a stream on it, without a driver; the device counts as active."""
    dev = object.__new__(Device)
    dev.ordinal = 0
    dev._handle = None
    dev._context = object()
    dev._context_lock = threading.Lock()
    dev._properties = dict(LIMITS)
    _device._tls.active = dev
    _device._tls.device = dev  # the current device, for stream=None
    stream = object.__new__(Stream)
    stream.device = dev
    stream.handle = driver.CUstream(0x5000)
    stream._owned = False
    stream._finalizer = None
    return dev, stream


def loaded_kernel(dev: Device, source: str, name: str, sizes: list[int]) -> Kernel:
    """A kernel as if loaded on ``dev``, launching through ``fake_launch``."""
    _kernel._launch_kernel = fake_launch
    code = types.SimpleNamespace(lowered_names={}, kind="cubin", arch="sm_90")
    kernel = Kernel.from_object_code(code, name, source)
    packer = ArgPacker(kernel.params, name, param_sizes=sizes)
    kernel._install(_Loaded(dev, object(), packer, dict(LIMITS), name=name))
    return kernel


def packer_cases() -> list[Case]:
    params = parse_kernel_params(AXPBY, "axpby")
    packer = ArgPacker(params, "axpby", AXPBY_SIZES)
    x, y = DeviceBuffer(0x7F00_0000_0000), DeviceBuffer(0x7F00_0010_0000)
    python_args = [2.0, x, 0.5, y, 1 << 20, 0]
    numpy_args = [
        np.float32(2),
        0x7F00_0000_0000,
        np.float64(0.5),
        0x7F00_0010_0000,
        np.int64(1 << 20),
        np.int32(0),
    ]
    acquire, release = packer.acquire, packer.release
    return [
        (
            "parse_kernel_params (once per kernel)",
            lambda: parse_kernel_params(AXPBY, "axpby"),
            500,
        ),
        (
            "ArgPacker(...) (once per kernel and device)",
            lambda: ArgPacker(params, "axpby", AXPBY_SIZES),
            500,
        ),
        (
            "pack, 6 args: Python scalars + buffers (new storage)",
            lambda: packer.pack(python_args),
            20_000,
        ),
        (
            "acquire + release, 6 args: Python scalars + buffers",
            lambda: release(acquire(python_args)),
            20_000,
        ),
        (
            "acquire + release, 6 args: NumPy scalars + raw ints",
            lambda: release(acquire(numpy_args)),
            20_000,
        ),
    ]


def launch_cases() -> list[Case]:
    """The raw fake call first, then launches through Kernel.launch."""
    dev, stream = fake_device()

    def noop_kernel(name: str) -> Kernel:
        # One kernel per case, with its own generated code: cases with different argument
        # types would otherwise share (and disturb) the interpreter's specialisations.
        return loaded_kernel(dev, NOOP.replace("noop", name), name, [8, 4])

    axpby = loaded_kernel(dev, AXPBY, "axpby", AXPBY_SIZES)
    noop, fresh, tupled, raw_ptr, numpy_k, default = (noop_kernel(f"noop{i}") for i in range(6))
    handle = stream.handle
    x, y = DeviceBuffer(0x7F00_0000_0000), DeviceBuffer(0x7F00_0010_0000)
    args2 = [x, 1]
    args6 = [2.0, x, 0.5, y, 1 << 20, 0]
    raw_pointer = [0x7F00_0000_0000, 1]
    numpy_n = [x, np.int32(1)]
    many = 10_000
    calls = 20_000
    return [
        (
            "fake cuLaunchKernel called directly",
            lambda: fake_launch(None, 1, 1, 1, 32, 1, 1, 0, handle, 0, 0),
            calls,
        ),
        (
            "noop, 2 args",
            lambda: noop.launch(grid=1, block=32, args=args2, stream=stream),
            calls,
        ),
        (
            "axpby, 6 args",
            lambda: axpby.launch(grid=1, block=32, args=args6, stream=stream),
            calls,
        ),
        (
            "noop, 2 args, grid a new int object each launch",
            lambda: fresh.launch(grid=many + 0, block=256, args=args2, stream=stream),
            calls,
        ),
        (
            "noop, 2 args, tuple grid and block",
            lambda: tupled.launch(grid=(1, 1), block=(32, 1), args=args2, stream=stream),
            calls,
        ),
        (
            "noop, 2 args, raw int pointer",
            lambda: raw_ptr.launch(grid=1, block=32, args=raw_pointer, stream=stream),
            calls,
        ),
        (
            "noop, 2 args, NumPy scalar n",
            lambda: numpy_k.launch(grid=1, block=32, args=numpy_n, stream=stream),
            calls,
        ),
        (
            "noop, 2 args, stream=None (the current stream)",
            lambda: default.launch(grid=1, block=32, args=args2),
            calls,
        ),
    ]


def main() -> None:
    cases = launch_cases()
    raw, *times = best_us(cases)
    print("Kernel.launch with a fake cuLaunchKernel (no GPU); overhead = launch - raw call")
    print("| launch | us per launch | Python-side overhead, us |")
    print("|---|---:|---:|")
    print(f"| {cases[0][0]} | {raw:.3f} | |")
    for (label, _, _), us in zip(cases[1:], times, strict=True):
        print(f"| {label} | {us:.3f} | {us - raw:.3f} |")
    print()
    print("| argument packing | us per call |")
    print("|---|---:|")
    cases = packer_cases()
    for (label, _, _), us in zip(cases, best_us(cases), strict=True):
        print(f"| {label} | {us:.3f} |")


if __name__ == "__main__":
    main()
