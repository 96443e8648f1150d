"""Host emulator of the CUDA features the tensor-core kernels use, for tests without a GPU.

A test compiles a kernel file of ``cuda_src/`` (matmul.cu, attention.cu) as plain host C++ on top
of ``PRELUDE``, an emulation of what the kernels take from the device: threads, blocks, shared
memory, ``__syncthreads``, warp shuffles, float atomics, the device part of ``ignis_types.cuh``
and the tensor-core primitives of ``tensor_core.cuh`` (ldmatrix, mma for float16 / bfloat16 /
TF32, cp.async). Each CUDA thread is a coroutine; barriers and warp-collective operations are
met in a shuffled order, blocks run in a shuffled order, and cp.async poisons its destination
(all bits set: NaN) until it is waited for, so missing waits and barriers show up in the results.
The mma and ldmatrix emulations follow the fragment layouts of the PTX ISA.

A harness is ``PRELUDE`` followed by the kernel file's own part: the device features of that file
that the prelude does not know (its ``IGNIS_*_HOST_EMULATION`` section), ``#include`` of the
kernel file, and a ``main`` that starts kernels with
``emu::launch(Dim3{gx, gy, gz}, threads, dynamic_smem_bytes, [&] { kernel(args); }, rng)``.

Example::

    builder = tc_emulator.Builder(tmp_dir, "gemm", GEMM_PART)   # GEMM_PART: C++ text
    exe = builder.build("tc_bf16", EMU_T="ignis::bfloat16")      # -> Path of the executable
    tc_emulator.run(exe, [input_path, output_path])
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ignis import _sources

PRELUDE = r"""
// ===== host emulator of the CUDA device features (tests/ignis/array/tc_emulator.py) =====
#include <ucontext.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <type_traits>
#include <vector>

#define IGNIS_TC_HOST_EMULATION 1
#include "ignis_types.cuh"

// Deliberate faults, for the tests that show a harness catches wrong tensor-core results:
// 1: mma leaves out the last k term; 2: ldmatrix .trans loads without transposing;
// 3: cp.async.wait_group leaves one more group in flight than asked for.
#ifndef EMU_FAULT
#define EMU_FAULT 0
#endif

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define __restrict__ __restrict
#define __align__(n) alignas(n)
#define IGNIS_DEV inline

using std::max;
using std::min;

struct Dim3 {
  unsigned x, y, z;
};

namespace emu {

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "emulator: %s\n", what);
  std::exit(3);
}

struct Copy {
  void* dst;
  const void* src;
  int bytes;
};

struct Thread {
  ucontext_t ctx;
  Dim3 tid;
  bool done = false;
  std::vector<Copy> open;                 // cp.async issued, not committed
  std::vector<std::vector<Copy>> groups;  // committed, not waited for
};

struct Barrier {
  int expected = 0, count = 0;
  long gen = 0;
};

Thread* current = nullptr;
ucontext_t scheduler;
std::vector<Thread> threads;
Dim3 block_idx, block_dim, grid_dim;
long events = 0;  // barrier arrivals and thread exits: no progress in a round is a deadlock
Barrier block_barrier;

// What the lanes of a warp hand each other at a warp-collective operation.
struct WarpSlots {
  Barrier bar;
  int op[32];
  const unsigned char* addr[32];
  ignis::uint32 a[32][4];
  ignis::uint32 b[32][2];
  float c[32][4];
  ignis::uint64 v[32];
};
std::vector<WarpSlots> warps;

// Operation codes of the warp-collective operations: every lane must reach the same one.
enum Op { kLdmatrix = 1, kLdmatrixTrans, kMmaBf16, kMmaF16, kMmaTf32, kShuffle };

unsigned char* dyn_smem = nullptr;
size_t dyn_smem_size = 0;

struct Range {
  const unsigned char* lo;
  const unsigned char* hi;
};
std::vector<Range> readable;  // global memory cp.async may read

void yield() { swapcontext(&current->ctx, &scheduler); }

void arrive_and_wait(Barrier& b) {
  const long gen = b.gen;
  ++events;
  if (++b.count == b.expected) {
    b.count = 0;
    ++b.gen;
    return;
  }
  while (b.gen == gen) yield();
}

int lane() { return (int)(current->tid.x & 31); }
WarpSlots& warp() { return warps[current->tid.x / 32]; }

// All 32 lanes deposit, meet, compute, meet again (so that no lane overwrites the slots
// before every lane has read them).
template <class Deposit, class Compute>
void collective(int op, Deposit deposit, Compute compute) {
  WarpSlots& w = warp();
  const int l = lane();
  deposit(w, l);
  w.op[l] = op;
  arrive_and_wait(w.bar);
  for (int i = 0; i < 32; ++i)
    if (w.op[i] != op) die("lanes of a warp reached different warp-collective operations");
  compute(w, l);
  arrive_and_wait(w.bar);
}

void check_smem(const void* p, size_t bytes, size_t align, const char* what) {
  const unsigned char* c = (const unsigned char*)p;
  if (c < dyn_smem || c + bytes > dyn_smem + dyn_smem_size) {
    std::fprintf(stderr, "emulator: %s outside the dynamic shared memory\n", what);
    std::exit(3);
  }
  if (((size_t)(c - dyn_smem)) % align != 0) die("misaligned shared-memory access");
}

void check_global(const void* p, int bytes) {
  const unsigned char* c = (const unsigned char*)p;
  for (const Range& r : readable)
    if (c >= r.lo && c + bytes <= r.hi) return;
  die("cp.async reads outside the inputs");
}

}  // namespace emu

#define threadIdx (::emu::current->tid)
#define blockIdx (::emu::block_idx)
#define blockDim (::emu::block_dim)
#define gridDim (::emu::grid_dim)
inline void __syncthreads() { ::emu::arrive_and_wait(::emu::block_barrier); }

template <class V> V shfl_impl(V v, int src_of_lane(int, int), int arg) {
  static_assert(sizeof(V) <= 8, "shuffles move at most 8 bytes");
  V r;
  ::emu::collective(
      ::emu::kShuffle,
      [&](::emu::WarpSlots& w, int l) {
        w.v[l] = 0;
        std::memcpy(&w.v[l], &v, sizeof(V));
      },
      [&](::emu::WarpSlots& w, int l) { std::memcpy(&r, &w.v[src_of_lane(l, arg)], sizeof(V)); });
  return r;
}
inline int xor_lane(int l, int m) { return (l ^ m) & 31; }
inline int idx_lane(int, int s) { return s & 31; }
template <class V> V __shfl_xor_sync(unsigned, V v, int m) { return shfl_impl(v, xor_lane, m); }
template <class V> V __shfl_sync(unsigned, V v, int s) { return shfl_impl(v, idx_lane, s); }

inline float __int_as_float(int i) {
  float f;
  std::memcpy(&f, &i, 4);
  return f;
}
inline double __longlong_as_double(long long i) {
  double d;
  std::memcpy(&d, &i, 8);
  return d;
}

// Threads run one at a time: an atomic add is a plain add.
inline float atomicAdd(float* p, float v) {
  const float old = *p;
  *p = old + v;
  return old;
}

// --- host versions of what ignis_types.cuh provides on the device ----------------------------

namespace ignis {

inline float to_float(float16 h) {
  const uint32 sign = (uint32)(h.bits & 0x8000u) << 16;
  const int exp = (h.bits >> 10) & 0x1f;
  const uint32 man = h.bits & 0x3ffu;
  float f;
  if (exp == 0) {
    f = std::ldexp((float)man, -24);
  } else if (exp == 31) {
    f = man ? NAN : INFINITY;
  } else {
    f = std::ldexp((float)(man | 0x400u), exp - 25);
  }
  uint32 u;
  std::memcpy(&u, &f, 4);
  u |= sign;
  std::memcpy(&f, &u, 4);
  return f;
}

// float -> binary16, round to nearest even (through double: exact for the rounding decision).
inline float16 float_to_half(float f) {
  uint32 u;
  std::memcpy(&u, &f, 4);
  const uint16 sign = (uint16)((u >> 16) & 0x8000u);
  if (std::isnan(f)) return float16::from_bits((uint16)(sign | 0x7e00u));
  double a = std::fabs((double)f);
  if (a >= 65520.0) return float16::from_bits((uint16)(sign | 0x7c00u));
  if (a < std::ldexp(1.0, -14)) {  // subnormal: units of 2^-24
    double q = std::nearbyint(a * std::ldexp(1.0, 24));  // default rounding: nearest even
    return float16::from_bits((uint16)(sign | (uint16)q));
  }
  int e;
  double m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  double q = std::nearbyint(m * 2048.0);  // 11 significant bits
  if (q == 2048.0) {
    q = 1024.0;
    ++e;
  }
  const int biased = e - 1 + 15;
  if (biased >= 31) return float16::from_bits((uint16)(sign | 0x7c00u));
  return float16::from_bits((uint16)(sign | (uint16)(biased << 10) | (uint16)((uint32)q - 1024u)));
}

inline float to_float(bfloat16 b) {
  uint32 u = (uint32)b.bits << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline bfloat16 float_to_bf16(float f) {
  uint32 u;
  std::memcpy(&u, &f, 4);
  return bfloat16::from_bits(detail::f32_bits_to_bf16_bits(u));
}

template <class T> struct acc_type { typedef T type; };
template <> struct acc_type<float16> { typedef float type; };
template <> struct acc_type<bfloat16> { typedef float type; };

template <class T> inline T to_acc(T v) { return v; }
inline float to_acc(float16 v) { return to_float(v); }
inline float to_acc(bfloat16 v) { return to_float(v); }
template <class T> inline T from_acc(typename acc_type<T>::type v) { return v; }
template <> inline float16 from_acc<float16>(float v) { return float_to_half(v); }
template <> inline bfloat16 from_acc<bfloat16>(float v) { return float_to_bf16(v); }

inline int64 global_index() { return (int64)blockIdx.x * blockDim.x + threadIdx.x; }
inline int64 grid_stride() { return (int64)gridDim.x * blockDim.x; }

constexpr int warp_size = 32;
constexpr unsigned full_warp_mask = 0xffffffffu;

template <class T> inline T nan_max(T a, T b) { return (b > a || b != b) ? b : a; }
template <class T> inline T nan_min(T a, T b) { return (b < a || b != b) ? b : a; }
template <class T> T warp_sum(T v) {
  for (int o = warp_size / 2; o > 0; o >>= 1) v += __shfl_xor_sync(full_warp_mask, v, o);
  return v;
}
template <class T> T warp_max(T v) {
  for (int o = warp_size / 2; o > 0; o >>= 1)
    v = nan_max(v, __shfl_xor_sync(full_warp_mask, v, o));
  return v;
}
template <class T> T warp_min(T v) {
  for (int o = warp_size / 2; o > 0; o >>= 1)
    v = nan_min(v, __shfl_xor_sync(full_warp_mask, v, o));
  return v;
}

}  // namespace ignis

#define IGNIS_GRID_STRIDE_LOOP(i, n)                                                 \
  for (::ignis::int64 i = ::ignis::global_index(); i < (::ignis::int64)(n); \
       i += ::ignis::grid_stride())

// --- host versions of tensor_core.cuh ----------------------------------------------------------

namespace ignis {
namespace tc {

// The tensor-core primitives take shared memory through addresses only; there is no 32-bit
// shared window on the host.

inline void cp_async_16(void* smem, const void* gmem, int src_bytes) {
  ::emu::check_smem(smem, 16, 16, "cp.async destination");
  if (src_bytes < 0 || src_bytes > 16) ::emu::die("cp.async source size out of range");
  if (src_bytes > 0) {
    if (((uintptr_t)gmem) % 16 != 0) ::emu::die("cp.async global source is not 16-byte aligned");
    ::emu::check_global(gmem, src_bytes);
  }
  std::memset(smem, 0xff, 16);  // poison: visible as NaN until the copy is waited for
  ::emu::current->open.push_back({smem, gmem, src_bytes});
}
inline void cp_async_commit() {
  ::emu::current->groups.push_back(std::move(::emu::current->open));
  ::emu::current->open.clear();
}
template <int N> inline void cp_async_wait() {
  auto& g = ::emu::current->groups;
  while ((int)g.size() > N + (EMU_FAULT == 3)) {
    for (::emu::Copy& c : g.front()) {
      std::memset(c.dst, 0, 16);
      if (c.bytes > 0) std::memcpy(c.dst, c.src, (size_t)c.bytes);
    }
    g.erase(g.begin());
  }
}

inline uint32 load_u32(const void* p) {  // two 16-bit elements, the first in the low half
  uint32 r;
  std::memcpy(&r, p, 4);
  return r;
}

inline void ldmatrix_impl(uint32 (&r)[4], const void* row, bool trans) {
  ::emu::check_smem(row, 16, 16, "ldmatrix row");
  ::emu::collective(
      trans ? ::emu::kLdmatrixTrans : ::emu::kLdmatrix,
      [&](::emu::WarpSlots& w, int l) { w.addr[l] = (const unsigned char*)row; },
      [&](::emu::WarpSlots& w, int l) {
        const int g = l >> 2, t = l & 3;
        for (int j = 0; j < 4; ++j) {
          const unsigned char* const* rows = &w.addr[8 * j];
          if (!trans || EMU_FAULT == 2) {
            r[j] = load_u32(rows[g] + 4 * t);
          } else {
            uint16 lo, hi;
            std::memcpy(&lo, rows[2 * t] + 2 * g, 2);
            std::memcpy(&hi, rows[2 * t + 1] + 2 * g, 2);
            r[j] = (uint32)lo | ((uint32)hi << 16);
          }
        }
      });
}
inline void ldmatrix_x4(uint32 (&r)[4], const void* row) { ldmatrix_impl(r, row, false); }
inline void ldmatrix_x4_trans(uint32 (&r)[4], const void* row) { ldmatrix_impl(r, row, true); }

template <class T> inline float elem(uint32 reg, int half) {
  T v;
  v.bits = (uint16)(half ? reg >> 16 : reg & 0xffffu);
  return to_acc(v);
}

// D = A(16x16) B(16x8) + C with the fragment layouts of the PTX ISA (mma.m16n8k16).
template <class T>
inline void mma_m16n8k16_impl(float (&d)[4], const uint32 (&a)[4], uint32 b0, uint32 b1) {
  ::emu::collective(
      std::is_same<T, bfloat16>::value ? ::emu::kMmaBf16 : ::emu::kMmaF16,
      [&](::emu::WarpSlots& w, int l) {
        for (int i = 0; i < 4; ++i) w.a[l][i] = a[i], w.c[l][i] = d[i];
        w.b[l][0] = b0;
        w.b[l][1] = b1;
      },
      [&](::emu::WarpSlots& w, int l) {
        float A[16][16], B[16][8], C[16][8];
        for (int ln = 0; ln < 32; ++ln) {
          const int g = ln >> 2, t = ln & 3;
          // element i of the A fragment sits in register i/2: row g (+8 in registers 1, 3),
          // column 2t + i%2 (+8 in registers 2, 3)
          for (int i = 0; i < 8; ++i) {
            const int reg = i >> 1;
            const int row = g + ((reg & 1) ? 8 : 0);
            const int col = 2 * t + (i & 1) + (reg >= 2 ? 8 : 0);
            A[row][col] = elem<T>(w.a[ln][reg], i & 1);
          }
          for (int i = 0; i < 4; ++i) {  // B: row 2t + i%2 (+8 in b1), column g
            const int row = 2 * t + (i & 1) + (i >= 2 ? 8 : 0);
            B[row][g] = elem<T>(w.b[ln][i >> 1], i & 1);
          }
          for (int i = 0; i < 4; ++i) C[g + (i >= 2 ? 8 : 0)][2 * t + (i & 1)] = w.c[ln][i];
        }
        const int g = l >> 2, t = l & 3;
        for (int i = 0; i < 4; ++i) {
          const int row = g + (i >= 2 ? 8 : 0), col = 2 * t + (i & 1);
          float s = C[row][col];
          for (int kk = 0; kk < 16 - (EMU_FAULT == 1); ++kk)
            s = std::fma(A[row][kk], B[kk][col], s);
          d[i] = s;
        }
      });
}
inline void mma_m16n8k16(float (&d)[4], const uint32 (&a)[4], uint32 b0, uint32 b1, bfloat16) {
  mma_m16n8k16_impl<bfloat16>(d, a, b0, b1);
}
inline void mma_m16n8k16(float (&d)[4], const uint32 (&a)[4], uint32 b0, uint32 b1, float16) {
  mma_m16n8k16_impl<float16>(d, a, b0, b1);
}

inline float tf32_value(uint32 bits) {  // the tensor core reads 19 bits
  bits &= 0xffffe000u;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// D = A(16x8) B(8x8) + C, TF32 layouts of mma.m16n8k8.
inline void mma_m16n8k8_tf32(float (&d)[4], const uint32 (&a)[4], uint32 b0, uint32 b1) {
  ::emu::collective(
      ::emu::kMmaTf32,
      [&](::emu::WarpSlots& w, int l) {
        for (int i = 0; i < 4; ++i) w.a[l][i] = a[i], w.c[l][i] = d[i];
        w.b[l][0] = b0;
        w.b[l][1] = b1;
      },
      [&](::emu::WarpSlots& w, int l) {
        float A[16][8], B[8][8], C[16][8];
        for (int ln = 0; ln < 32; ++ln) {
          const int g = ln >> 2, t = ln & 3;
          A[g][t] = tf32_value(w.a[ln][0]);
          A[g + 8][t] = tf32_value(w.a[ln][1]);
          A[g][t + 4] = tf32_value(w.a[ln][2]);
          A[g + 8][t + 4] = tf32_value(w.a[ln][3]);
          B[t][g] = tf32_value(w.b[ln][0]);
          B[t + 4][g] = tf32_value(w.b[ln][1]);
          for (int i = 0; i < 4; ++i) C[g + (i >= 2 ? 8 : 0)][2 * t + (i & 1)] = w.c[ln][i];
        }
        const int g = l >> 2, t = l & 3;
        for (int i = 0; i < 4; ++i) {
          const int row = g + (i >= 2 ? 8 : 0), col = 2 * t + (i & 1);
          float s = C[row][col];
          for (int kk = 0; kk < 8 - (EMU_FAULT == 1); ++kk)
            s = std::fma(A[row][kk], B[kk][col], s);
          d[i] = s;
        }
      });
}

// cvt.rna.tf32.f32: keep 10 mantissa bits, round to nearest, ties away from zero.
inline uint32 to_tf32(float x) {
  uint32 u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7f800000u) == 0x7f800000u) return u;  // Inf, NaN
  return (u + 0x1000u) & 0xffffe000u;
}

template <class T> inline uint32 pack_pair(float lo, float hi) {
  return (uint32)from_acc<T>(lo).bits | ((uint32)from_acc<T>(hi).bits << 16);
}

}  // namespace tc
}  // namespace ignis

// --- blocks and threads --------------------------------------------------------------------------

namespace emu {

constexpr size_t kStackBytes = 512 * 1024;
std::vector<std::unique_ptr<char[]>> stacks;  // one per thread, kept from block to block
std::function<void()> body;

void trampoline() {
  body();
  if (!current->open.empty() || !current->groups.empty())
    die("a thread exited with cp.async copies in flight");
  current->done = true;
  ++events;
  swapcontext(&current->ctx, &scheduler);
}

// Runs body() on nthreads coroutines until all have returned, in a shuffled order each round.
void run_block(int nthreads, std::mt19937& rng) {
  threads.clear();
  threads.resize((size_t)nthreads);
  warps.assign((size_t)(nthreads + 31) / 32, WarpSlots{});
  for (auto& w : warps) w.bar.expected = 32;
  block_barrier = Barrier{};
  block_barrier.expected = nthreads;
  if (dyn_smem_size) std::memset(dyn_smem, 0xff, dyn_smem_size);  // stale data reads as NaN
  while (stacks.size() < (size_t)nthreads) stacks.emplace_back(new char[kStackBytes]);
  for (int i = 0; i < nthreads; ++i) {
    Thread& t = threads[(size_t)i];
    t.tid = Dim3{(unsigned)i, 0, 0};
    getcontext(&t.ctx);
    t.ctx.uc_stack.ss_sp = stacks[(size_t)i].get();
    t.ctx.uc_stack.ss_size = kStackBytes;
    t.ctx.uc_link = nullptr;
    makecontext(&t.ctx, trampoline, 0);
  }
  std::vector<int> order((size_t)nthreads);
  for (int i = 0; i < nthreads; ++i) order[(size_t)i] = i;
  for (;;) {
    const long before = events;
    bool all_done = true;
    std::shuffle(order.begin(), order.end(), rng);
    for (int i : order) {
      Thread& t = threads[(size_t)i];
      if (t.done) continue;
      all_done = false;
      current = &t;
      swapcontext(&scheduler, &t.ctx);
      current = nullptr;
    }
    if (all_done) break;
    if (events == before) die("deadlock: the live threads wait at barriers the others never reach");
  }
}

// A kernel launch: fn() for every block of grid (in a shuffled order), nthreads threads per
// block, smem bytes of dynamic shared memory (16-byte aligned, fresh for the launch).
void launch(Dim3 grid, int nthreads, size_t smem, std::function<void()> fn, std::mt19937& rng) {
  std::vector<unsigned char> storage(smem + 16);  // (vector storage is 16-byte aligned)
  dyn_smem = storage.data();
  dyn_smem_size = smem;
  grid_dim = grid;
  block_dim = Dim3{(unsigned)nthreads, 1, 1};
  body = fn;
  std::vector<Dim3> blocks;
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) blocks.push_back(Dim3{x, y, z});
  std::shuffle(blocks.begin(), blocks.end(), rng);
  for (const Dim3& b : blocks) {
    block_idx = b;
    run_block(nthreads, rng);
  }
  dyn_smem = nullptr;
  dyn_smem_size = 0;
}

// The same for a grid of gx x gy blocks.
void launch(unsigned gx, unsigned gy, int nthreads, size_t smem, std::function<void()> fn,
            std::mt19937& rng) {
  launch(Dim3{gx, gy, 1}, nthreads, smem, std::move(fn), rng);
}

}  // namespace emu
// ===== end of the emulator prelude =====
"""


def compiler() -> str:
    """The host C++ compiler, or skip the calling test where there is none (or no ucontext)."""
    found = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if found is None:
        pytest.skip("needs a host C++ compiler")
    if sys.platform != "linux":
        pytest.skip("the emulator's coroutines use Linux ucontext")
    return found


class Builder:
    """Compiles ``PRELUDE + part`` into executables under ``directory``, one per set of macro
    definitions, each at most once per builder. The kernel files come from ``cuda_src`` (default:
    the library's own; a test may point it at a modified copy).

    Example: ``Builder(tmp, "attn", PART).build("bf16_64", EMU_T="ignis::bfloat16", EMU_D=64)``.
    """

    def __init__(self, directory: Path, name: str, part: str,
                 cuda_src: Path | None = None) -> None:
        self.compiler = compiler()
        self.directory = Path(directory)
        self.cuda_src = Path(cuda_src) if cuda_src is not None else _sources.cuda_src_dir()
        self.source = self.directory / f"{name}_emulator.cpp"
        self.source.write_text(PRELUDE + part)
        self._built: dict[str, Path] = {}

    def build(self, tag: str, **defines: object) -> Path:
        """The executable for ``-D<key>=<value>`` of each of ``defines`` (named by ``tag``)."""
        exe = self._built.get(tag)
        if exe is not None and exe.exists():
            return exe
        exe = self.directory / f"emu_{tag}"
        cmd = [self.compiler, "-std=c++17", "-O1", "-Wall", "-Wno-unknown-pragmas",
               f"-I{self.cuda_src}", *(f"-D{k}={v}" for k, v in defines.items()),
               str(self.source), "-o", str(exe)]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, f"emulator build {tag} failed:\n{out.stderr[-4000:]}"
        self._built[tag] = exe
        return exe


def run(exe: Path | str, args: list, what: str = "", timeout: float = 900,
        expect_failure: bool = False) -> subprocess.CompletedProcess:
    """Run an emulator executable; a non-zero exit fails the test with the emulator's message
    (or, with ``expect_failure``, a zero exit does)."""
    r = subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True,
                       timeout=timeout)
    if expect_failure:
        assert r.returncode != 0, f"{what or exe}: the emulator did not fail"
    else:
        assert r.returncode == 0, f"{what or exe}: {r.stderr.strip()}"
    return r
