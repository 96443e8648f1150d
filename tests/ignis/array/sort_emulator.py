"""The kernels of ``cuda_src/sort.cu`` run on the host, for tests without a GPU.

sort.cu is compiled as plain C++ (with the host C++ compiler) together with a small CUDA shim:
every thread of a block is a fiber (``ucontext``) on one OS thread, switched at barriers, so
``__syncthreads``, ``__syncwarp``, the warp shuffles, votes and ``__match_any_sync`` behave as on
the device for code whose warps run converged at those calls (as sort.cu's do). Blocks run one
after another in index order: the decoupled look-back of a scan finds its predecessors done.
What this checks is the kernels' logic (indexing, ranking, scans, look-back); not timing, the
memory model or speed.

:func:`emulated_backend` makes ``"cpu"`` arrays run the CUDA implementations of the sorting
families (``ignis._array._cuda_backend.sorting``) with their kernels launched here, on host
memory: the whole CUDA path of ``ignis.sort`` and friends, host planning included.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
import types
from collections.abc import Iterator
from pathlib import Path

from ignis._array import _backend
from ignis._array._cpu_backend import CpuBackend
from ignis._array._cuda_backend import sorting as cuda_sorting
from ignis._signature import parse_kernel_params
from ignis._sources import cuda_src_dir, read_source

SHIM = r"""
#include <ucontext.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

struct dim3 { unsigned x, y, z; };
static dim3 threadIdx, blockIdx, blockDim, gridDim;

namespace emu {
enum { RUNNABLE, AT_BLOCK_BARRIER, AT_WARP_BARRIER, DONE };
struct Fiber { ucontext_t ctx; std::vector<char> stack; int state; dim3 tid; };
static std::vector<Fiber> fibers;
static ucontext_t scheduler;
static int current;
static const std::function<void()>* body;
static unsigned long long slots[1024];

static void wait(int state) {
  fibers[current].state = state;
  swapcontext(&fibers[current].ctx, &scheduler);
}
static int linear() {
  return (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z));
}
static void trampoline() {
  (*body)();
  fibers[current].state = DONE;
  swapcontext(&fibers[current].ctx, &scheduler);
}

static void run_block(int threads) {
  fibers.resize(threads);
  for (int i = 0; i < threads; ++i) {
    Fiber& f = fibers[i];
    f.stack.resize(64 * 1024);
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = f.stack.data();
    f.ctx.uc_stack.ss_size = f.stack.size();
    f.ctx.uc_link = nullptr;
    makecontext(&f.ctx, trampoline, 0);
    f.state = RUNNABLE;
    f.tid = dim3{(unsigned)i % blockDim.x, ((unsigned)i / blockDim.x) % blockDim.y,
                 (unsigned)i / (blockDim.x * blockDim.y)};
  }
  for (;;) {
    bool ran = false;
    for (int i = 0; i < threads; ++i) {
      if (fibers[i].state != RUNNABLE) continue;
      current = i;
      threadIdx = fibers[i].tid;
      swapcontext(&scheduler, &fibers[i].ctx);
      ran = true;
    }
    bool released = false, all_done = true, block_ready = true, any_block = false;
    for (int w = 0; w < threads; w += 32) {
      const int end = w + 32 < threads ? w + 32 : threads;
      bool ready = true, any = false;
      for (int i = w; i < end; ++i) {
        ready &= fibers[i].state == AT_WARP_BARRIER || fibers[i].state == DONE;
        any |= fibers[i].state == AT_WARP_BARRIER;
      }
      if (ready && any) {
        for (int i = w; i < end; ++i)
          if (fibers[i].state == AT_WARP_BARRIER) fibers[i].state = RUNNABLE;
        released = true;
      }
    }
    for (int i = 0; i < threads; ++i) {
      all_done &= fibers[i].state == DONE;
      block_ready &= fibers[i].state == AT_BLOCK_BARRIER || fibers[i].state == DONE;
      any_block |= fibers[i].state == AT_BLOCK_BARRIER;
    }
    if (all_done) return;
    if (block_ready && any_block) {
      for (int i = 0; i < threads; ++i)
        if (fibers[i].state == AT_BLOCK_BARRIER) fibers[i].state = RUNNABLE;
      released = true;
    }
    if (!ran && !released) {
      std::fprintf(stderr, "emulator: deadlock in block (%u, %u, %u)\n", blockIdx.x, blockIdx.y,
                   blockIdx.z);
      std::abort();
    }
  }
}

static void launch(dim3 grid, dim3 block, const std::function<void()>& kernel) {
  gridDim = grid;
  blockDim = block;
  body = &kernel;
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        blockIdx = dim3{x, y, z};
        run_block((int)(block.x * block.y * block.z));
      }
}

template <class T> unsigned long long bits(T v) {
  unsigned long long s = 0;
  std::memcpy(&s, &v, sizeof v);
  return s;
}
template <class T> T unbits(unsigned long long s) { T v; std::memcpy(&v, &s, sizeof v); return v; }
static int lane() { return linear() & 31; }
static int warp_base() { return linear() & ~31; }
template <class T> T exchange(T v, int src) {
  slots[linear()] = bits(v);
  wait(AT_WARP_BARRIER);
  const unsigned long long r = slots[warp_base() + (src & 31)];
  wait(AT_WARP_BARRIER);
  return unbits<T>(r);
}
}  // namespace emu

#define __global__
#define __device__
#define __host__
#define __forceinline__
#define __shared__ static
#define __launch_bounds__(...)
#define __restrict__ __restrict

static inline void __syncthreads() { emu::wait(emu::AT_BLOCK_BARRIER); }
static inline void __syncwarp(unsigned = 0xffffffffu) { emu::wait(emu::AT_WARP_BARRIER); }
static inline void __threadfence() {}
static inline int __popc(unsigned v) { return __builtin_popcount(v); }
static inline int __ffs(unsigned v) { return __builtin_ffs((int)v); }
template <class T> T __shfl_sync(unsigned, T v, int src) { return emu::exchange(v, src); }
template <class T> T __shfl_up_sync(unsigned, T v, unsigned d) {
  const int l = emu::lane();
  return emu::exchange(v, l >= (int)d ? l - (int)d : l);
}
template <class T> T __shfl_xor_sync(unsigned, T v, int m) {
  return emu::exchange(v, emu::lane() ^ m);
}
static inline unsigned __ballot_sync(unsigned, int pred) {
  emu::slots[emu::linear()] = pred ? 1 : 0;
  emu::wait(emu::AT_WARP_BARRIER);
  unsigned out = 0;
  for (int i = 0; i < 32; ++i) if (emu::slots[emu::warp_base() + i]) out |= 1u << i;
  emu::wait(emu::AT_WARP_BARRIER);
  return out;
}
static inline int __any_sync(unsigned m, int pred) { return __ballot_sync(m, pred) != 0; }
template <class T> unsigned __match_any_sync(unsigned, T v) {
  emu::slots[emu::linear()] = emu::bits(v);
  emu::wait(emu::AT_WARP_BARRIER);
  unsigned out = 0;
  for (int i = 0; i < 32; ++i) if (emu::slots[emu::warp_base() + i] == emu::bits(v)) out |= 1u << i;
  emu::wait(emu::AT_WARP_BARRIER);
  return out;
}
template <class T> T atomicAdd(T* p, T v) { const T old = *p; *p = old + v; return old; }
template <class T> T atomicOr(T* p, T v) { const T old = *p; *p = old | v; return old; }
static inline void __nanosleep(unsigned) {}

// Look-backs see the inclusive prefix of only every 64th tile of a row when this is set: they
// walk back over several windows of aggregates and fold them forward.
namespace emu { static int hide_prefixes = 0; }
#define IGNIS_SORT_STATUS(status, row0, j) \
  ((emu::hide_prefixes && (status)[(row0) + (j)] == 2 && (j) % 64 != 0) ? 1 \
                                                                      : (status)[(row0) + (j)])
// ... and radix_onesweep's tiles publish their inclusive prefixes only every 11th tile of a row:
// its look-backs fold aggregates over several windows of predecessors.
#define IGNIS_SORT_PUBLISH_PREFIX(t) (!emu::hide_prefixes || (t) % 11 == 0)
extern "C" void emu_hide_prefixes(int on) { emu::hide_prefixes = on; }
"""

_built: dict[str, ctypes.CDLL] = {}


def _wrapper(index: int, name: str, source: str) -> str:
    args = []
    for i, p in enumerate(parse_kernel_params(source, name)):
        args.append(f"P{{a[{i}]}}" if p.kind == "pointer" else f"I{{a[{i}]}}")
    call = f"{name}({', '.join(args)})"
    return (
        f'extern "C" void run_{index}(unsigned gx, unsigned gy, unsigned gz, unsigned bx, '
        f"unsigned by, unsigned bz, const long long* a) {{\n"
        f"  const std::function<void()> k = [&]() {{ {call}; }};\n"
        f"  emu::launch(dim3{{gx, gy, gz}}, dim3{{bx, by, bz}}, k);\n}}\n"
    )


def build(names: list[str]) -> dict[str, ctypes._CFuncPtr]:
    """Compile sort.cu with the shim for the kernel instances ``names``; name -> entry point."""
    source = read_source("sort.cu")
    names = sorted(set(names))
    program = "\n".join(
        [
            SHIM,
            '#include "sort.cu"',
            # launch arguments (int64 values) as the parameter types they are passed to
            "struct P { long long v;",
            "  template <class T> operator T*() const { return (T*)(intptr_t)v; } };",
            "struct I { long long v; template <class T> operator T() const { return (T)v; } };",
            *(_wrapper(i, n, source) for i, n in enumerate(names)),
        ]
    )
    digest = hashlib.sha256((program + source).encode()).hexdigest()[:16]
    lib = _built.get(digest)
    if lib is None:
        root = Path(os.environ.get("IGNIS_SORT_EMULATOR_DIR", tempfile.gettempdir()))
        out = root / f"ignis-sort-emulator-{digest}.so"
        if not out.exists():
            work = Path(tempfile.mkdtemp())
            (work / "emu.cpp").write_text(program)
            tmp = work / "emu.so"
            subprocess.run(
                [
                    "c++",
                    "-std=c++17",
                    "-O1",
                    "-shared",
                    "-fPIC",
                    "-w",
                    f"-I{cuda_src_dir()}",
                    str(work / "emu.cpp"),
                    "-o",
                    str(tmp),
                ],
                check=True,
                capture_output=True,
                timeout=900,
            )
            shutil.move(str(tmp), str(out))
        lib = _built[digest] = ctypes.CDLL(str(out))
    entries = {n: getattr(lib, f"run_{i}") for i, n in enumerate(names)}
    entries["emu_hide_prefixes"] = lib.emu_hide_prefixes
    return entries


def available() -> bool:
    return shutil.which("c++") is not None and os.name == "posix"


def _dims(v: object) -> tuple[int, int, int]:
    t = (v,) if isinstance(v, int) else tuple(v)  # type: ignore[arg-type]
    return (*t, 1, 1, 1)[:3]  # type: ignore[return-value]


class EmulatedKernel:
    def __init__(self, name: str, entry: ctypes._CFuncPtr, log: list[str]):
        self.name, self._entry, self._log = name, entry, log

    def launch(self, grid, block, args, *, shared_mem=0, stream=None, cooperative=False):
        self._log.append(self.name)
        values = (ctypes.c_longlong * max(1, len(args)))(*[int(a) for a in args])
        self._entry(*_dims(grid), *_dims(block), values)


class EmulatedBackend(CpuBackend):
    """A CPU backend whose sorting families are the CUDA ones, their kernels emulated."""

    launched: list[str]
    gpu = types.SimpleNamespace(multiprocessor_count=4, ordinal=0)
    stream = None


for _family in ("sort", "cumulative", "searchsorted", "nonzero", "unique"):
    EmulatedBackend.implement(_family, getattr(cuda_sorting, _family))


class Session:
    """What :func:`emulated_backend` yields: ``launched``, the kernels launched so far, and
    ``hide_prefixes(True)``, which makes look-backs see the inclusive prefix of only every
    64th tile of a row (they then fold aggregates over several windows of 32 tiles), and
    radix_onesweep's tiles publish theirs only every 11th tile of a row (its look-backs then
    fold up to 10 aggregates, over several windows)."""

    def __init__(self, switch: ctypes._CFuncPtr):
        self.launched: list[str] = []
        self._switch = switch

    def hide_prefixes(self, on: bool) -> None:
        self._switch(1 if on else 0)


@contextlib.contextmanager
def emulated_backend(monkeypatch, names: list[str]) -> Iterator[Session]:
    """Within: new ``"cpu"`` arrays run the sorting families through the CUDA module and the
    emulated kernels ``names``."""
    entries = build(names)
    session = Session(entries["emu_hide_prefixes"])
    launched = session.launched

    def library_kernel(source_file, name, device, arch=None):
        assert source_file == "sort.cu", source_file
        if name not in entries:
            raise AssertionError(f"emulator: kernel {name} was not built")
        return EmulatedKernel(name, entries[name], launched)

    monkeypatch.setattr(cuda_sorting, "library_kernel", library_kernel)
    _backend.register_backend("cpu", EmulatedBackend)
    try:
        yield session
    finally:
        session.hide_prefixes(False)
        _backend.register_backend("cpu", None)
