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
ROUNDS = 25
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


def per_call_us(fn: Callable[[], object], calls: int) -> float:
    for _ in range(min(calls, 2000)):
        fn()
    best = float("inf")
    for _ in range(ROUNDS):
        t0 = time.thread_time()
        for _ in range(calls):
            fn()
        best = min(best, (time.thread_time() - t0) / calls * 1e6)
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


def packer_rows() -> list[tuple[str, float]]:
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
            per_call_us(lambda: parse_kernel_params(AXPBY, "axpby"), 1_000),
        ),
        (
            "ArgPacker(...) (once per kernel and device)",
            per_call_us(lambda: ArgPacker(params, "axpby", AXPBY_SIZES), 1_000),
        ),
        (
            "pack, 6 args: Python scalars + buffers (new storage)",
            per_call_us(lambda: packer.pack(python_args), 20_000),
        ),
        (
            "acquire + release, 6 args: Python scalars + buffers",
            per_call_us(lambda: release(acquire(python_args)), 20_000),
        ),
        (
            "acquire + release, 6 args: NumPy scalars + raw ints",
            per_call_us(lambda: release(acquire(numpy_args)), 20_000),
        ),
    ]


def launch_rows() -> tuple[float, list[tuple[str, float]]]:
    dev, stream = fake_device()
    noop = loaded_kernel(dev, NOOP, "noop", [8, 4])
    axpby = loaded_kernel(dev, AXPBY, "axpby", AXPBY_SIZES)
    handle = stream.handle
    x, y = DeviceBuffer(0x7F00_0000_0000), DeviceBuffer(0x7F00_0010_0000)
    args2 = [x, 1]
    args6 = [2.0, x, 0.5, y, 1 << 20, 0]
    many = 10_000
    calls = 20_000
    raw = per_call_us(lambda: fake_launch(None, 1, 1, 1, 32, 1, 1, 0, handle, 0, 0), calls)
    rows = [
        (
            "noop, 2 args",
            per_call_us(lambda: noop.launch(grid=1, block=32, args=args2, stream=stream), calls),
        ),
        (
            "axpby, 6 args",
            per_call_us(lambda: axpby.launch(grid=1, block=32, args=args6, stream=stream), calls),
        ),
        (
            "noop, 2 args, grid a new int object each launch",
            per_call_us(
                lambda: noop.launch(grid=many + 0, block=256, args=args2, stream=stream), calls
            ),
        ),
        (
            "noop, 2 args, tuple grid and block",
            per_call_us(
                lambda: noop.launch(grid=(1, 1), block=(32, 1), args=args2, stream=stream), calls
            ),
        ),
        (
            "noop, 2 args, stream=None (the current stream)",
            per_call_us(lambda: noop.launch(grid=1, block=32, args=args2), calls),
        ),
        (
            "noop, 2 args, NumPy scalar n",
            per_call_us(
                lambda: noop.launch(grid=1, block=32, args=[x, np.int32(1)], stream=stream), calls
            ),
        ),
    ]
    return raw, rows


def main() -> None:
    raw, rows = launch_rows()
    print("Kernel.launch with a fake cuLaunchKernel (no GPU); overhead = launch - raw call")
    print("| launch | us per launch | Python-side overhead, us |")
    print("|---|---:|---:|")
    print(f"| fake cuLaunchKernel called directly | {raw:.3f} | |")
    for label, us in rows:
        print(f"| {label} | {us:.3f} | {us - raw:.3f} |")
    print()
    print("| argument packing | us per call |")
    print("|---|---:|")
    for label, us in packer_rows():
        print(f"| {label} | {us:.3f} |")


if __name__ == "__main__":
    main()
