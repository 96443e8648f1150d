// tma.cuh - Hopper's (sm_90) tensor memory accelerator and shared-memory mbarriers, through
// inline PTX.
//
// A TMA copy moves a box of a tensor (described by a CUtensorMap the host built with
// cuTensorMapEncodeTiled, passed as a __grid_constant__ TensorMap parameter) from global into
// shared memory without the threads' help: one thread issues it, and the copy reports its bytes
// to an mbarrier, whose phase completes once the expected bytes (arrive_expect_tx) have landed.
// Rows or columns outside the tensor arrive as zeros and still count as bytes. With the
// 128-byte swizzle the box lands in wgmma.cuh's swizzled layout (16-byte chunk c of row r at
// c ^ (r % 8)), for a destination 1024-byte aligned and a box 64 16-bit elements wide.
//
// Barrier phases alternate; wait(bar, parity) returns once the phase of that parity has
// completed (the first phase has parity 0). A barrier guarding a buffer that is refilled every
// n-th tile is waited for with parity (tile / n) & 1.
#pragma once

#include "ignis_types.cuh"

namespace ignis {
namespace tma {

// The host's CUtensorMap: 128 opaque bytes, 64-byte aligned.
struct alignas(64) TensorMap {
  uint64 opaque[16];
};

// Barrier at shared address bar (8-byte aligned) expecting count arrivals per phase.
IGNIS_DEV void barrier_init(unsigned bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

// After the initialising thread's barrier_init calls: makes them visible to the TMA unit (the
// threads also need a __syncthreads before using the barriers).
IGNIS_DEV void barrier_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

IGNIS_DEV void arrive(unsigned bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// One arrival that also expects `bytes` more of copies this phase.
IGNIS_DEV void arrive_expect_tx(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}

IGNIS_DEV void wait(unsigned bar, unsigned parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

IGNIS_DEV void prefetch(const TensorMap& map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64>(&map)) : "memory");
}

// The box of map whose first element has coordinates (c0 innermost, c1, c2, c3), into shared
// memory at dst; its bytes complete on bar.
IGNIS_DEV void load_4d(unsigned dst, const TensorMap& map, int c0, int c1, int c2, int c3,
                       unsigned bar) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64>(&map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
      : "memory");
}

}  // namespace tma
}  // namespace ignis
