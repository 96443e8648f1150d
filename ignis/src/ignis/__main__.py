"""``python -m ignis`` (also the ``ignis`` command): print an environment report.

It lists the versions of ignis, cuda-bindings, NVRTC and the driver, each device with its key
properties and the compile-cache directory, and where a GPU exists it compiles, launches and
verifies a kernel. It exits 0 without a GPU, saying so, and 1 if the self-check fails. A part
of the installation that is missing (cuda-bindings, the NVRTC library) is reported on its line,
with the pip extra that installs it, instead of a traceback; without a GPU that still exits 0.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from . import __version__
from ._bindings import (
    bindings_major,
    bindings_unavailable_reason,
    bindings_version,
    driver_available,
    driver_unavailable_reason,
    driver_version,
    nvrtc_unavailable_reason,
    nvrtc_version,
)


def _fmt_gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


def _device_lines() -> list[str]:
    from ._device import Device, device_count

    lines = []
    for i in range(device_count()):
        d = Device(i)
        p = d.properties
        free, total = d.mem_info()
        major, minor = p["compute_capability"]
        smem, optin = p["max_shared_memory_per_block"], p["max_shared_memory_per_block_optin"]
        lines += [
            f"  cuda:{i}  {d.name}  ({d.arch}, compute capability {major}.{minor})",
            f"      memory           {_fmt_gib(free)} free of {_fmt_gib(total)}",
            f"      multiprocessors  {p['multiprocessor_count']} x "
            f"{p['max_threads_per_multiprocessor']} threads, {p['clock_rate_khz'] / 1e6:.2f} GHz",
            f"      shared memory    {smem // 1024} KiB per block ({optin // 1024} KiB opt-in), "
            f"L2 {p['l2_cache_size'] // 2**20} MiB",
            f"      memory bus       {p['memory_bus_width_bits']} bit at "
            f"{p['memory_clock_rate_khz'] / 1e6:.2f} GHz;"
            f" cooperative launch {'yes' if p['cooperative_launch'] else 'no'};"
            f" memory pools {'yes' if p['memory_pools_supported'] else 'no'}",
        ]
    return lines


def _library_lines() -> list[str]:
    """One line per optional NVIDIA library: its version and what uses it, or what runs without
    it and the extra that installs it (loading needs no GPU)."""
    from . import _cublas, _cufft, _cusolver, _nvidia_libs

    try:
        major = bindings_major() if not bindings_unavailable_reason() else None
    except Exception:  # pragma: no cover - the bindings line already says what is wrong
        major = None
    rows = (
        ("cuBLAS", _cublas.load, "cublas", "matrix products on cuBLAS",
         "matrix products on ignis' own GEMM kernels"),
        ("cuSOLVER", _cusolver.load, "cusolver", "ignis.linalg's GPU factorizations",
         "ignis.linalg's factorizations need it on a GPU"),
        ("cuFFT", _cufft.load, "cufft", "ignis.fft on the GPU", "ignis.fft needs it on a GPU"),
    )
    lines = []
    for name, load, family, used, without in rows:
        lib = load()
        if lib is not None:
            version = ".".join(str(v) for v in lib.version)
            lines.append(f"  {name:<15} {version} ({used})")
        else:
            hint = _nvidia_libs.install_hint(family, major)
            lines.append(f"  {name:<15} not installed: {without} ({hint})")
    return lines


def self_check() -> tuple[bool, str]:
    """Compile, launch and verify a kernel on every device. Returns (ok, one-line summary)."""
    from . import jit
    from ._device import Device, device_count
    from ._kernel import Kernel
    from ._memory import alloc
    from ._sources import read_source

    source = read_source("selfcheck.cu")
    n = 1 << 20
    rng = np.random.default_rng(0)
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    expected = 2.5 * x.astype(np.float64) + y
    reports = []
    for i in range(device_count()):
        with Device(i) as dev:
            t0 = time.perf_counter()
            code = jit.compile(
                source,
                options=jit.CompileOptions(arch=dev.arch),
                name_expressions=("ignis_selfcheck_axpy",),
            )
            kernel = Kernel.from_object_code(code, "ignis_selfcheck_axpy", source)
            bx, by = alloc(x.nbytes), alloc(y.nbytes)
            bx.copy_from_host(x)
            by.copy_from_host(y)
            kernel.launch(grid=Kernel.calc_grid_size(n), block=256, args=[2.5, bx, by, n])
            out = np.empty_like(y)
            by.copy_to_host(out)
            ms = (time.perf_counter() - t0) * 1e3
            err = float(np.max(np.abs(out - expected)))
            if not err < 1e-5:
                return False, f"cuda:{i}: self-check FAILED: max error {err:g} (expected < 1e-5)"
            reports.append(f"cuda:{i} ok ({ms:.0f} ms, max error {err:.1e})")
    return True, "self-check passed: " + "; ".join(reports)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="ignis", description="Print the ignis environment report."
    )
    parser.add_argument(
        "--no-self-check", action="store_true", help="skip compiling and launching a test kernel"
    )
    args = parser.parse_args(argv)

    from .jit import cache_dir

    # A missing part of the installation is a line of the report, never a traceback: the
    # report is what a user runs to find out what is missing.
    bindings_problem = bindings_unavailable_reason()
    nvrtc_problem = nvrtc_unavailable_reason()
    drv = driver_version()
    print(f"ignis {__version__}")
    print(f"  python          {sys.version.split()[0]}")
    print(f"  numpy           {np.__version__}")
    if bindings_problem:
        print(f"  cuda-bindings   {bindings_problem}")
        print("  NVRTC           not usable without cuda-bindings (see above)")
    else:
        print(f"  cuda-bindings   {bindings_version()}")
        if nvrtc_problem:
            print(f"  NVRTC           {nvrtc_problem}")
        else:
            major, minor = nvrtc_version()
            print(f"  NVRTC           {major}.{minor}")
    print(f"  CUDA driver     {'{}.{}'.format(*drv) if drv else 'not available'}")
    print(f"  compile cache   {cache_dir() or 'disabled'}")
    for line in _library_lines():
        print(line)
    if not driver_available():
        why = "cuda-bindings is not installed (see above)" if bindings_problem else None
        print(f"no GPU: {why or driver_unavailable_reason()}")
        compiles = (
            "kernels still compile with NVRTC"
            if not nvrtc_problem
            else "kernels compile once NVRTC is installed (see above)"
        )
        print(f"ignis works without a GPU: arrays run on the CPU backend; {compiles}.")
        return 0
    print("devices:")
    for line in _device_lines():
        print(line)
    if args.no_self_check:
        return 0
    if nvrtc_problem:
        # A GPU that ignis cannot compile kernels for is not usable: that is a failure.
        print("self-check FAILED: NVRTC was not found, so no kernel can be compiled (see above)")
        return 1
    ok, summary = self_check()
    print(summary)
    return 0 if ok else 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
