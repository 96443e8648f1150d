"""Host cost of packing kernel arguments (no GPU needed).

Times :meth:`ignis._arg_packing.ArgPacker.pack` for a six-parameter kernel with the argument
types a launch usually sees, and the one-off costs (parsing the source, building the packer).

Run: ``PYTHONPATH=ignis/src python benchmarks/pack_overhead.py``. Prints a Markdown table.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import numpy as np
from ignis._arg_packing import ArgPacker
from ignis._signature import parse_kernel_params

SOURCE = r"""
extern "C" __global__ void axpby(float a, const float* __restrict__ x, float b,
                                 float* __restrict__ y, long long n, int flags) {}
"""
SIZES = [4, 8, 4, 8, 8, 4]
ROUNDS = 7


class DeviceBuffer:
    """Stands in for an ignis buffer: what the packer reads is its int ``.ptr``."""

    __slots__ = ("ptr",)

    def __init__(self, ptr: int):
        self.ptr = ptr


def per_call_us(fn: Callable[[], object], calls: int) -> float:
    for _ in range(min(calls, 1000)):
        fn()
    samples = []
    for _ in range(ROUNDS):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(samples)


def main() -> None:
    params = parse_kernel_params(SOURCE, "axpby")
    packer = ArgPacker(params, "axpby", SIZES)
    x, y = DeviceBuffer(0x7F00_0000_0000), DeviceBuffer(0x7F00_0010_0000)
    cases = {
        "pack: Python scalars + buffers": [2.0, x, 0.5, y, 1 << 20, 0],
        "pack: NumPy scalars + raw ints": [
            np.float32(2),
            0x7F00_0000_0000,
            np.float64(0.5),
            0x7F00_0010_0000,
            np.int64(1 << 20),
            np.int32(0),
        ],
    }
    rows = [
        (
            "parse_kernel_params (once per kernel)",
            per_call_us(lambda: parse_kernel_params(SOURCE, "axpby"), 2_000),
        ),
        (
            "ArgPacker(...) (once per kernel and device)",
            per_call_us(lambda: ArgPacker(params, "axpby", SIZES), 2_000),
        ),
    ]
    for label, args in cases.items():
        rows.append((label, per_call_us(lambda args=args: packer.pack(args), 100_000)))
    print("| operation | us per call |")
    print("|---|---:|")
    for label, us in rows:
        print(f"| {label} | {us:.2f} |")


if __name__ == "__main__":
    main()
