// norm_loss.cuh - helpers shared by the fused normalization, softmax-backward and loss kernels
// (norm.cu, cross_entropy.cu).
//
//   * Two<W> / Sum2Op<W>: two sums reduced together, so a row needs one synchronization for
//     both (e.g. sum(g) and sum(g * xhat) of a layer-norm backward);
//   * Rows<WARP>: how a row maps onto threads: a warp per row (blocks hold several warps) or a
//     block per row; row_reduce over that group in a fixed order (deterministic);
//   * load_vec / store_vec: VEC consecutive elements to and from the compute type with 16-byte
//     (or 8-byte) accesses when VEC > 1; param_vec: the same for an optional weight or bias;
//   * Packed / load_packed / unpack: a row's register cache in the data type;
//   * w_rsqrt, w_exp, w_log, w_is_finite: float/double overloads.
#pragma once

#include "reduce.cuh"

#if defined(__CUDACC__)

namespace ignis {

IGNIS_DEV float w_rsqrt(float v) { return rsqrtf(v); }
IGNIS_DEV double w_rsqrt(double v) { return 1.0 / sqrt(v); }
IGNIS_DEV float w_exp(float v) { return expf(v); }
IGNIS_DEV double w_exp(double v) { return exp(v); }
IGNIS_DEV float w_log(float v) { return logf(v); }
IGNIS_DEV double w_log(double v) { return log(v); }
template <class W> IGNIS_DEV bool w_is_finite(W v) { return v - v == (W)0; }
template <class W> IGNIS_DEV W w_nan() { return Limits<W>::highest() - Limits<W>::highest(); }

// --- two sums at once ----------------------------------------------------------------------------

template <class W> struct Two {
  W a;
  W b;
};

template <class W> IGNIS_DEV Two<W> two(W a, W b) {
  Two<W> t;
  t.a = a;
  t.b = b;
  return t;
}

// Found by argument-dependent lookup from group_reduce (reduce.cuh).
template <class W> IGNIS_DEV Two<W> shfl_xor(Two<W> p, int lane_mask) {
  return two(__shfl_xor_sync(full_warp_mask, p.a, lane_mask), __shfl_xor_sync(full_warp_mask, p.b, lane_mask));
}

template <class W> struct Sum2Op {
  typedef Two<W> acc_t;
  static IGNIS_DEV acc_t identity() { return two((W)0, (W)0); }
  static IGNIS_DEV acc_t combine(acc_t x, acc_t y) { return two(x.a + y.a, x.b + y.b); }
};

// --- rows onto threads ---------------------------------------------------------------------------

// WARP: lane l of warp k of block b works on row b * warps_per_block + k (blocks of several
// warps); otherwise thread t of block b works on row b. Rows beyond the grid are visited in a
// grid-stride loop.
template <bool WARP> struct Rows {
  static IGNIS_DEV int tid() { return WARP ? (int)(threadIdx.x & (warp_size - 1)) : (int)threadIdx.x; }
  static IGNIS_DEV int threads() { return WARP ? warp_size : (int)blockDim.x; }
  static IGNIS_DEV int64 first() {
    return WARP ? (int64)blockIdx.x * (blockDim.x / warp_size) + threadIdx.x / warp_size : (int64)blockIdx.x;
  }
  static IGNIS_DEV int64 step() { return WARP ? (int64)gridDim.x * (blockDim.x / warp_size) : (int64)gridDim.x; }
};

// Reduce over the threads of one row; every one of them gets the result. `scratch` holds 32
// acc_t (block rows only).
template <bool WARP, class Op>
IGNIS_DEV typename Op::acc_t row_reduce(typename Op::acc_t v, typename Op::acc_t* scratch) {
  if constexpr (WARP) {
    return group_reduce<Op>(v, warp_size);
  } else {
    return block_reduce<Op>(v, scratch);
  }
}

// --- vector loads and stores ----------------------------------------------------------------------

// v[e] = p[e] for e < VEC, converted to W. p is aligned to min(16, VEC * sizeof(T)) bytes.
template <class W, class T, int VEC> IGNIS_DEV void load_vec(const T* p, W (&v)[VEC]) {
  constexpr int bytes = (int)sizeof(T) * VEC;
  if constexpr (VEC > 1 && bytes % 16 == 0) {
    union {
      uint4 w[bytes / 16];
      T e[VEC];
    } u;
#pragma unroll
    for (int k = 0; k < bytes / 16; ++k) u.w[k] = __ldg(reinterpret_cast<const uint4*>(p) + k);
#pragma unroll
    for (int e = 0; e < VEC; ++e) v[e] = cvt_in<W>(u.e[e]);
  } else if constexpr (VEC > 1 && bytes % 8 == 0) {
    union {
      uint2 w[bytes / 8];
      T e[VEC];
    } u;
#pragma unroll
    for (int k = 0; k < bytes / 8; ++k) u.w[k] = __ldg(reinterpret_cast<const uint2*>(p) + k);
#pragma unroll
    for (int e = 0; e < VEC; ++e) v[e] = cvt_in<W>(u.e[e]);
  } else {
#pragma unroll
    for (int e = 0; e < VEC; ++e) v[e] = cvt_in<W>(p[e]);
  }
}

// VEC elements of T as raw 32-bit words: a row's register cache kept in the data type (16-bit
// rows take half the registers of the compute type, so more rows stay resident per SM), turned
// into W on each use by unpack.
template <class T, int VEC> struct Packed {
  static constexpr int words = ((int)sizeof(T) * VEC + 3) / 4;
  unsigned int w[words];
};

// out = p[0 .. VEC) with the accesses of load_vec; p aligned like load_vec's.
template <class T, int VEC> IGNIS_DEV void load_packed(const T* p, Packed<T, VEC>& out) {
  constexpr int bytes = (int)sizeof(T) * VEC;
  if constexpr (VEC > 1 && bytes % 16 == 0) {
#pragma unroll
    for (int k = 0; k < bytes / 16; ++k) {
      const uint4 q = __ldg(reinterpret_cast<const uint4*>(p) + k);
      out.w[4 * k] = q.x;
      out.w[4 * k + 1] = q.y;
      out.w[4 * k + 2] = q.z;
      out.w[4 * k + 3] = q.w;
    }
  } else if constexpr (VEC > 1 && bytes % 8 == 0) {
#pragma unroll
    for (int k = 0; k < bytes / 8; ++k) {
      const uint2 d = __ldg(reinterpret_cast<const uint2*>(p) + k);
      out.w[2 * k] = d.x;
      out.w[2 * k + 1] = d.y;
    }
  } else {
    union {
      unsigned int w[Packed<T, VEC>::words];
      T e[VEC];
    } u;
#pragma unroll
    for (int k = 0; k < Packed<T, VEC>::words; ++k) u.w[k] = 0u;
#pragma unroll
    for (int e = 0; e < VEC; ++e) u.e[e] = p[e];
#pragma unroll
    for (int k = 0; k < Packed<T, VEC>::words; ++k) out.w[k] = u.w[k];
  }
}

// v[e] = element e of `in` converted to W.
template <class W, class T, int VEC> IGNIS_DEV void unpack(const Packed<T, VEC>& in, W (&v)[VEC]) {
  union {
    unsigned int w[Packed<T, VEC>::words];
    T e[VEC];
  } u;
#pragma unroll
  for (int k = 0; k < Packed<T, VEC>::words; ++k) u.w[k] = in.w[k];
#pragma unroll
  for (int e = 0; e < VEC; ++e) v[e] = cvt_in<W>(u.e[e]);
}

// p[e] = v[e] rounded once into O; p aligned like load_vec's.
template <class O, class W, int VEC> IGNIS_DEV void store_vec(O* p, const W (&v)[VEC]) {
  O o[VEC];
#pragma unroll
  for (int e = 0; e < VEC; ++e) o[e] = cvt_out<O>(v[e]);
  store_values<O, VEC>(p, o);
}

// Parameter elements c .. c + VEC - 1 as W (`fallback` when there is no parameter), with the
// vector loads of load_vec: one 16-byte load where VEC scalar loads would each touch the whole
// span of the warp's packs. p + c aligned like load_vec's.
template <class W, class P, int VEC> IGNIS_DEV void param_vec(const P* p, int64 c, W fallback, W (&v)[VEC]) {
  if (p == nullptr) {
#pragma unroll
    for (int e = 0; e < VEC; ++e) v[e] = fallback;
  } else {
    load_vec<W, P, VEC>(p + c, v);
  }
}

}  // namespace ignis

#endif  // __CUDACC__
