"""Host cost of one kernel launch with ``ignis.profile()`` off, on, and without its hook at all.

The profiler's hook on the launch path is one test of a module attribute while it is off. This
measures what that test costs next to the launch it sits in, in one process, the rows taking
turns within each round:

* raw ``cuda.bindings`` ``cuLaunchKernel`` (arguments packed once, outside the loop);
* ``Kernel.launch`` through a launcher generated *without* the hook (the launch lines as they
  were before the profiler existed): the baseline;
* ``Kernel.launch``, profiler off (the shipped launcher);
* ``Kernel.launch`` inside ``with ignis.profile()`` (two events per launch, a capture check);
* the prepared launch (the kernel library's path), without the hook and with it, off.

Each launches the same trivial kernel with two arguments on a non-blocking stream, as in
``launch_overhead.py``. Host microseconds per launch, median over rounds.

Run on a GPU machine: ``python benchmarks/profiler_overhead.py``. Without a GPU,
``python benchmarks/profiler_overhead.py --fake`` runs the same rows on the stand-in driver of
``host_overhead.py`` (every driver call returns success at once: the Python side alone, the
number to watch when changing the hook). Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ignis._kernel as _kernel

import ignis
from ignis import jit

SOURCE = r"""
extern "C" __global__ void noop(float* x, int n) {
    if (n < 0) x[0] = 0.0f;
}
"""
LAUNCHES = 20_000
ROUNDS = 9

# The launch lines of ignis._kernel as they were before the profiler's hook: the baseline.
_PLAIN_BEFORE = (
    "result = launch_kernel(function, gx, gy, gz, bx, by, bz, smem, stream.handle, packed[1], 0)",
    "release_block(packed)  # the driver has copied the values: the block is free again",
    "if result[0]:  # a status other than success (0): check() raises its CudaError",
    "    check(result, 'cuLaunchKernel')",
)
_TAIL_BEFORE = (
    *_kernel._ACTIVATE,
    "if cooperative:",
    "    result = launch_cooperative_kernel(",
    "        function, gx, gy, gz, bx, by, bz, smem, stream.handle, packed[1])",
    "    release_block(packed)",
    "    check(result, 'cuLaunchCooperativeKernel')",
    "else:",
    *(f"    {line}" for line in _PLAIN_BEFORE),
    "state.launches += 1",
)


def unhooked(kernel: ignis.Kernel, device: ignis.Device) -> tuple[Callable[..., None], Any]:
    """``(launch, prepared)`` of ``kernel`` on ``device`` generated from the lines above."""
    state = kernel._state(device)
    saved = _kernel._LAUNCH_PLAIN, _kernel._LAUNCH_TAIL
    _kernel._LAUNCH_PLAIN, _kernel._LAUNCH_TAIL = _PLAIN_BEFORE, _TAIL_BEFORE
    try:
        launch = _kernel._build_launcher(state, lambda *args: None)
        prepared = _kernel._build_prepared(state, state.dims(1, 32, 0, False))
    finally:
        _kernel._LAUNCH_PLAIN, _kernel._LAUNCH_TAIL = saved
    assert "profiling" not in launch.source
    return launch, prepared


def per_launch_us(
    rows: dict[str, Callable[[], None]], sync: Callable[[], None]
) -> dict[str, float]:
    """Median over rounds of host microseconds per launch; the rows take turns in each round."""
    for fn in rows.values():
        for _ in range(2000):
            fn()
    sync()
    samples: dict[str, list[float]] = {label: [] for label in rows}
    gc_was = gc.isenabled()
    gc.disable()
    try:
        for _ in range(ROUNDS):
            for label, fn in rows.items():
                t0 = time.perf_counter()
                for _ in range(LAUNCHES):
                    fn()
                samples[label].append((time.perf_counter() - t0) / LAUNCHES * 1e6)
                sync()
    finally:
        if gc_was:
            gc.enable()
    return {label: statistics.median(values) for label, values in samples.items()}


def rows_for(kernel: ignis.Kernel, stream: ignis.Stream, ptr: int) -> dict[str, Callable[[], None]]:
    device = stream.device
    args = [ptr, 1]
    kernel.launch(grid=1, block=32, args=args, stream=stream)  # loads it, installs the launcher
    shipped = kernel.launch
    before, prepared_before = unhooked(kernel, device)
    prepared = kernel._prepared(device, 1, 32)
    return {
        "Kernel.launch, no hook (baseline)": lambda: before(1, 32, args, stream=stream),
        "Kernel.launch, profiler off": lambda: shipped(1, 32, args, stream=stream),
        "prepared launch, no hook (baseline)": lambda: prepared_before(stream, ptr, 1),
        "prepared launch, profiler off": lambda: prepared(stream, ptr, 1),
    }


def run(rows: dict[str, Callable[[], None]], on: Callable[[], None], sync: Any, title: str) -> None:
    """Time ``rows``, then ``on`` inside a profile (whose events are read every round)."""
    times = per_launch_us(rows, sync)
    with ignis.profile() as prof:
        on_time = per_launch_us({"on": on}, lambda: (sync(), prof.summary()))["on"]
    times["Kernel.launch, profiler on"] = on_time
    base = times["Kernel.launch, no hook (baseline)"]
    prepared_base = times["prepared launch, no hook (baseline)"]
    print(title)
    print("| launch | host us / launch | vs its baseline |")
    print("|---|---:|---:|")
    for label, value in times.items():
        ref = prepared_base if label.startswith("prepared") else base
        ratio = "" if label.startswith("raw") else f"{value / ref:.3f}x"
        print(f"| {label} | {value:.3f} | {ratio} |")


def main_gpu() -> None:
    from cuda.bindings import driver

    dev = ignis.Device(0)
    stream = ignis.Stream()
    buf = ignis.alloc(128, stream=stream)
    kernel = ignis.compile_kernel(SOURCE, "noop")
    code = jit.compile(
        SOURCE, options=jit.CompileOptions(arch=dev.arch), name_expressions=("noop",)
    )
    err, module = driver.cuModuleLoadData(code.code)
    assert not err, err
    err, func = driver.cuModuleGetFunction(module, b"noop")
    assert not err, err
    ptr, n = ctypes.c_void_p(buf.ptr), ctypes.c_int(1)
    params = (ctypes.c_void_p * 2)(ctypes.addressof(ptr), ctypes.addressof(n))
    address, handle = ctypes.addressof(params), stream.handle

    def raw() -> None:
        (err,) = driver.cuLaunchKernel(func, 1, 1, 1, 32, 1, 1, 0, handle, address, 0)
        if err:
            raise RuntimeError(err)

    rows = {
        "raw cuda.bindings cuLaunchKernel (prepacked)": raw,
        **rows_for(kernel, stream, buf.ptr),
    }
    args = [buf.ptr, 1]
    run(
        rows,
        lambda: kernel.launch(1, 32, args, stream=stream),
        stream.synchronize,
        f"profiler overhead on {dev.name}, {LAUNCHES} launches x {ROUNDS} rounds, median",
    )


def main_fake() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import host_overhead
    from ignis._bindings import cu, driver

    fake = host_overhead.FakeDriver()
    fake.install()
    success = driver.CUresult.CUDA_SUCCESS
    none = driver.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE
    # Events for the "on" row: success at once, a clock for the times.
    clock = iter(range(1 << 62))
    for name, fn in {
        "cuEventCreate": lambda flags: next(clock),
        "cuEventRecord": lambda event, stream: None,
        "cuEventSynchronize": lambda event: None,
        "cuEventElapsedTime": lambda a, b: 0.001,
        "cuEventDestroy": lambda event: None,
        "cuFuncGetAttribute": lambda attribute, function: 16,
    }.items():
        setattr(cu, name, fn)
    driver.cuStreamIsCapturing = lambda stream: (success, none)
    dev = ignis.Device(0)
    stream = ignis.Stream.from_handle(0x6400, dev)
    kernel = ignis.compile_kernel(SOURCE, "noop")
    ptr = 0x7F00_0000_0000
    args = [ptr, 1]
    run(
        rows_for(kernel, stream, ptr),
        lambda: kernel.launch(1, 32, args, stream=stream),
        lambda: None,
        f"profiler overhead on the stand-in driver, {LAUNCHES} launches x {ROUNDS} rounds, median",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fake", action="store_true", help="the stand-in driver (no GPU)")
    if parser.parse_args().fake:
        main_fake()
    else:
        main_gpu()


if __name__ == "__main__":
    main()
