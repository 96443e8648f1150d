// philox.cuh - the Philox-4x32-10 counter-based generator (Salmon et al., SC 2011) and the
// stream layout of ignis.random: block b of a stream (seed, offset) is
// philox(counter = (b mod 2**32, b >> 32, 0, 0), key = (seed mod 2**32, seed >> 32)), and a call
// starting at `offset` uses blocks offset, offset + 1, ... (see ignis/_array/random.py). A kernel
// gets the stream either as values (k0, k1, offset) or, inside a captured CUDA graph, as a
// pointer to the device state {seed, base block} plus its offset from that base.
#pragma once

#include "ignis_types.cuh"

#if defined(__CUDACC__) || defined(IGNIS_TC_HOST_EMULATION)

namespace ignis {
namespace rng {

#if !defined(__CUDACC__)
// The kernels built as host C++ on the emulator of tests/ignis/array/tc_emulator.py: the one
// device intrinsic used here.
inline uint32 __umulhi(uint32 a, uint32 b) { return (uint32)(((uint64)a * b) >> 32); }
#endif

struct Words {
  uint32 w[4];
};

// The 4 output words of counter (c0, c1, c2, c3) under key (k0, k1), 10 rounds.
IGNIS_DEV Words philox4x32_10(uint32 c0, uint32 c1, uint32 c2, uint32 c3, uint32 k0, uint32 k1) {
  const uint32 m0 = 0xD2511F53u, m1 = 0xCD9E8D57u;
  const uint32 w0 = 0x9E3779B9u, w1 = 0xBB67AE85u;
#pragma unroll
  for (int r = 0; r < 10; ++r) {
    if (r) {
      k0 += w0;
      k1 += w1;
    }
    uint32 hi0 = __umulhi(m0, c0), lo0 = m0 * c0;
    uint32 hi1 = __umulhi(m1, c2), lo1 = m1 * c2;
    uint32 n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
  }
  Words out;
  out.w[0] = c0;
  out.w[1] = c1;
  out.w[2] = c2;
  out.w[3] = c3;
  return out;
}

// Block `b` (absolute, offset already added) of the stream with key (k0, k1).
IGNIS_DEV Words stream_block(uint64 b, uint32 k0, uint32 k1) {
  return philox4x32_10((uint32)b, (uint32)(b >> 32), 0u, 0u, k0, k1);
}

// The key and first block of a call whose stream lives in device memory (ignis.random's
// graph-safe draws): state = {seed, base block}, written before each replay of a captured graph;
// `offset` is the call's first block counted from that base. Read once per thread: two loads of
// one cached address, so a graph's kernels see the state its replay wrote, not the capture's.
struct StreamPos {
  uint32 k0, k1;
  uint64 offset;
};

IGNIS_DEV StreamPos stream_from_state(const uint64* __restrict__ state, uint64 offset) {
  const uint64 seed = state[0];
  StreamPos s;
  s.k0 = (uint32)seed;
  s.k1 = (uint32)(seed >> 32);
  s.offset = state[1] + offset;
  return s;
}

// 53 random bits from two words: (hi >> 5) * 2**26 + (lo >> 6).
IGNIS_DEV uint64 bits53(uint32 hi, uint32 lo) { return ((uint64)(hi >> 5) << 26) + (uint64)(lo >> 6); }

}  // namespace rng
}  // namespace ignis

#endif  // __CUDACC__ || IGNIS_TC_HOST_EMULATION
