"""Host cost of one kernel launch, and of compiling, side by side in one process.

Compares ``ignis.Kernel.launch`` with raw ``cuda.bindings`` ``cuLaunchKernel`` (arguments packed
once, outside the loop), ``cuda.core``'s ``launch`` and CuPy's ``RawKernel``, each launching the
same trivial kernel with two arguments on a non-blocking stream. Also times an NVRTC compile, an
in-memory cache hit and a disk cache hit (from a fresh process).

Run on a GPU machine: ``python benchmarks/launch_overhead.py``. Prints a Markdown table.
"""

from __future__ import annotations

import ctypes
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

import numpy as np

import ignis
from ignis import jit

SOURCE = r"""
extern "C" __global__ void noop(float* x, int n) {
    if (n < 0) x[0] = 0.0f;
}
"""
LAUNCHES = 20_000
ROUNDS = 7


def per_launch_us(launch: Callable[[], None], sync: Callable[[], None]) -> float:
    """Median over rounds of host microseconds per launch (queueing only, then drain)."""
    for _ in range(2000):
        launch()
    sync()
    samples = []
    for _ in range(ROUNDS):
        t0 = time.perf_counter()
        for _ in range(LAUNCHES):
            launch()
        t1 = time.perf_counter()
        sync()
        samples.append((t1 - t0) / LAUNCHES * 1e6)
    return statistics.median(samples)


def bench_ignis(stream: ignis.Stream, buf: ignis.Buffer) -> float:
    k = ignis.compile_kernel(SOURCE, "noop")
    args = [buf, 1]
    return per_launch_us(lambda: k.launch(grid=1, block=32, args=args, stream=stream), stream.synchronize)


def bench_raw(stream: ignis.Stream, buf: ignis.Buffer) -> float:
    from cuda.bindings import driver

    code = jit.compile(SOURCE, options=jit.CompileOptions(arch=ignis.Device(0).arch), name_expressions=("noop",))
    err, module = driver.cuModuleLoadData(code.code)
    assert not err, err
    err, func = driver.cuModuleGetFunction(module, b"noop")
    assert not err, err
    ptr = ctypes.c_void_p(buf.ptr)
    n = ctypes.c_int(1)
    params = (ctypes.c_void_p * 2)(ctypes.addressof(ptr), ctypes.addressof(n))
    address = ctypes.addressof(params)
    handle = stream.handle

    def launch() -> None:
        (err,) = driver.cuLaunchKernel(func, 1, 1, 1, 32, 1, 1, 0, handle, address, 0)
        if err:
            raise RuntimeError(err)

    return per_launch_us(launch, stream.synchronize)


def bench_cuda_core(buf: ignis.Buffer) -> float | str:
    try:
        try:
            from cuda.core import Device, LaunchConfig, Program, ProgramOptions, launch
        except ImportError:
            from cuda.core.experimental import Device, LaunchConfig, Program, ProgramOptions, launch
    except ImportError as exc:
        return f"n/a ({exc})"
    dev = Device(0)
    dev.set_current()
    arch = "".join(str(v) for v in dev.compute_capability)
    prog = Program(SOURCE, code_type="c++", options=ProgramOptions(arch=f"sm_{arch}"))
    kernel = prog.compile("cubin").get_kernel("noop")
    stream = dev.create_stream()
    config = LaunchConfig(grid=1, block=32)
    ptr, n = np.uint64(buf.ptr), np.int32(1)
    result = per_launch_us(lambda: launch(stream, config, kernel, ptr, n), stream.sync)
    ignis.Device(0).set_current()  # cuda.core changed the current context binding; restore ours
    return result


def bench_cupy() -> float | str:
    try:
        import cupy
    except ImportError as exc:
        return f"n/a ({exc})"
    k = cupy.RawKernel(SOURCE, "noop")
    x = cupy.zeros(32, dtype=cupy.float32)
    n = np.int32(1)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        return per_launch_us(lambda: k((1,), (32,), (x, n)), stream.synchronize)


def compile_times() -> dict[str, float]:
    """Milliseconds: a cold NVRTC compile, an in-memory hit, and a disk hit in a fresh process."""
    arch = ignis.Device(0).arch
    tmp = tempfile.mkdtemp(prefix="ignis-bench-cache-")
    source = SOURCE + f"\n// {time.time_ns()}\n"  # unique: never in any cache
    old = os.environ.get("IGNIS_CACHE_DIR")
    os.environ["IGNIS_CACHE_DIR"] = tmp
    try:
        opts = jit.CompileOptions(arch=arch)
        t0 = time.perf_counter()
        jit.compile(source, options=opts, name_expressions=("noop",))
        cold = (time.perf_counter() - t0) * 1e3
        hits = []
        for _ in range(200):
            t0 = time.perf_counter()
            jit.compile(source, options=opts, name_expressions=("noop",))
            hits.append((time.perf_counter() - t0) * 1e3)
        script = (
            "import sys, time\nfrom ignis import jit\nsrc = sys.stdin.read()\n"
            f"o = jit.CompileOptions(arch={arch!r})\n"
            "t0 = time.perf_counter(); jit.compile(src, options=o, name_expressions=('noop',))\n"
            "t = (time.perf_counter() - t0) * 1e3\nassert jit.cache_stats().disk_hits == 1\nprint(t)\n"
        )
        disk = []
        for _ in range(5):
            out = subprocess.run([sys.executable, "-c", script], input=source, capture_output=True,
                                 text=True, check=True, env=dict(os.environ))
            disk.append(float(out.stdout.strip().splitlines()[-1]))
    finally:
        if old is None:
            os.environ.pop("IGNIS_CACHE_DIR", None)
        else:
            os.environ["IGNIS_CACHE_DIR"] = old
    return {"cold": cold, "memory": statistics.median(hits), "disk": statistics.median(disk)}


def main() -> None:
    dev = ignis.Device(0)
    stream = ignis.Stream()
    buf = ignis.alloc(128, stream=stream)
    rows: list[tuple[str, float | str]] = [
        ("raw cuda.bindings cuLaunchKernel (prepacked)", bench_raw(stream, buf)),
        ("ignis Kernel.launch", bench_ignis(stream, buf)),
        ("cuda.core launch", bench_cuda_core(buf)),
        ("CuPy RawKernel", bench_cupy()),
    ]
    raw = rows[0][1]
    print(f"launch overhead on {dev.name}, {LAUNCHES} launches x {ROUNDS} rounds, median")
    print("| launcher | host us / launch | vs raw cuda.bindings |")
    print("|---|---:|---:|")
    for name, value in rows:
        if isinstance(value, float):
            print(f"| {name} | {value:.2f} | {value / raw:.2f}x |")
        else:
            print(f"| {name} | {value} | |")
    times = compile_times()
    print("| compile step | ms | |")
    print("|---|---:|---:|")
    print(f"| NVRTC compile (cold) | {times['cold']:.1f} | |")
    print(f"| in-memory cache hit | {times['memory']:.4f} | |")
    print(f"| disk cache hit (fresh process) | {times['disk']:.2f} | |")


if __name__ == "__main__":
    main()
