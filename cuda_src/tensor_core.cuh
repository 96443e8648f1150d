// tensor_core.cuh - warp-level tensor-core building blocks (sm_80 and newer) through inline PTX.
//
// NVRTC as shipped in the wheels has no mma.h, so the instructions are written out here:
//   * smem_u32addr: the 32-bit shared-window address PTX memory instructions take;
//   * ldmatrix_x4 / ldmatrix_x4_trans: four 8x8 16-bit matrices from shared memory;
//   * mma_m16n8k16: d += A(16x16, row) * B(16x8, col) for float16 / bfloat16 with float32
//     accumulation;
//   * mma_m16n8k8_tf32 / to_tf32: d += A(16x8, row) * B(8x8, col) with TF32 inputs (float32
//     rounded to 10 mantissa bits) and float32 accumulation;
//   * pack_pair<T>: two floats rounded to T and packed into one 32-bit fragment register;
//   * cp_async_16 / cp_async_commit / cp_async_wait<N>: global -> shared copies that do not
//     stall the issuing thread.
//
// Fragment layout of mma.m16n8k16 (g = lane / 4, t = lane % 4):
//   A: a0 = (row g, cols 2t, 2t+1), a1 = (row g+8, same cols), a2 = (row g, cols 2t+8, 2t+9),
//      a3 = (row g+8, cols 2t+8, 2t+9);
//   B: b0 = (rows k = 2t, 2t+1, col g), b1 = (rows k = 2t+8, 2t+9, col g);
//   C/D: c0, c1 = (row g, cols 2t, 2t+1); c2, c3 = (row g+8, cols 2t, 2t+1).
// In every register the element with the lower index sits in the low 16 bits.
// Fragment layout of mma.m16n8k8 with TF32 (one 32-bit element per register):
//   A: a0 = (row g, col t), a1 = (row g+8, col t), a2 = (row g, col t+4), a3 = (row g+8, col t+4);
//   B: b0 = (row k = t, col g), b1 = (row k = t+4, col g); C/D as for m16n8k16.
// A host emulator (tests) defines IGNIS_TC_HOST_EMULATION and provides these functions itself.
#pragma once

#include "ignis_types.cuh"

#if defined(__CUDACC__) && !defined(IGNIS_TC_HOST_EMULATION)

namespace ignis {
namespace tc {

IGNIS_DEV uint32 smem_u32addr(const void* p) {
  uint32 a;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
  return a;
}

// Lane l gives the address of row (l % 8) of matrix (l / 8) (16-byte aligned). Register j
// receives matrix j's (row l/4, cols 2(l%4), 2(l%4)+1), with .trans its (rows 2(l%4), 2(l%4)+1,
// col l/4).
IGNIS_DEV void ldmatrix_x4(uint32 (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32addr(row))
               : "memory");
}
IGNIS_DEV void ldmatrix_x4_trans(uint32 (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32addr(row))
               : "memory");
}

IGNIS_DEV void mma_m16n8k16(float (&d)[4], const uint32 (&a)[4], uint32 b0, uint32 b1, bfloat16) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
IGNIS_DEV void mma_m16n8k16(float (&d)[4], const uint32 (&a)[4], uint32 b0, uint32 b1, float16) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// d += A(16x8) * B(8x8), TF32 inputs (the registers hold to_tf32 values), float32 accumulation.
IGNIS_DEV void mma_m16n8k8_tf32(float (&d)[4], const uint32 (&a)[4], uint32 b0, uint32 b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// float -> TF32 (10 mantissa bits, as a 32-bit pattern), rounding to nearest with ties away
// from zero.
IGNIS_DEV uint32 to_tf32(float x) {
  uint32 r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
}

template <class T> IGNIS_DEV uint32 pack_pair(float lo, float hi) {
  return (uint32)from_acc<T>(lo).bits | ((uint32)from_acc<T>(hi).bits << 16);
}

// Two consecutive 16-bit elements as one register (p must be 4-byte aligned).
IGNIS_DEV uint32 load_u32(const void* p) { return *reinterpret_cast<const uint32*>(p); }

// Copy 16 bytes global -> shared; only the first src_bytes are read, the rest is zero-filled
// (src_bytes == 0: zeros, nothing read). Both addresses 16-byte aligned.
IGNIS_DEV void cp_async_16(void* smem, const void* gmem, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32addr(smem)),
               "l"(gmem), "r"(src_bytes)
               : "memory");
}
// 4 bytes (a float), 4-byte aligned at both ends.
IGNIS_DEV void cp_async_4(void* smem, const void* gmem) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem_u32addr(smem)), "l"(gmem)
               : "memory");
}
IGNIS_DEV void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Wait until at most N of this thread's committed groups are still in flight.
template <int N> IGNIS_DEV void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

}  // namespace tc
}  // namespace ignis

#endif  // __CUDACC__ && !IGNIS_TC_HOST_EMULATION
