// softmax.cu - softmax and log-softmax along one axis, numerically stable (the row maximum is
// subtracted before exp).
//
// In type T, out type O, math in W = acc_type<O> (float for float16/bfloat16/float32, double for
// float64). Like the reference: m = max(row) (NaN propagates), z = x - m, e = exp(z),
// s = sum(e); softmax = e / s, log-softmax = z - log(s). A row whose maximum is not finite
// (a NaN, +inf, or only -inf) comes out all NaN, as it does there.
//
// Kernels, picked by the host from the row length n:
//   softmax_warp   n <= 32 * ITEMS: one warp per row, the row held in registers (read once);
//   softmax_block  n <= blockDim.x * VEC * ITEMS: one block per row, the row in registers,
//                  16-byte loads and stores when VEC > 1 (read once);
//   softmax_packed n <= blockDim.x * 8 * ITEMS, float16/bfloat16: like softmax_block but the
//                  row stays in registers as loaded (two elements a register), so two blocks
//                  share an SM; maximum on 16-bit pairs, exp on the special function unit;
//   softmax_online longer rows: one block per row; one pass for the running maximum and sum,
//                  one pass to write;
//   softmax_cols   the axis lies outside a contiguous inner axis: threads own columns.
// Rows start at offset_of(outer, row) in x and at row * n in out (out is contiguous).
#include "reduce.cuh"

namespace ignis {

IGNIS_DEV float wexp(float v) { return expf(v); }
IGNIS_DEV double wexp(double v) { return exp(v); }
IGNIS_DEV float wlog(float v) { return logf(v); }
IGNIS_DEV double wlog(double v) { return log(v); }

template <class W> IGNIS_DEV bool is_finite(W v) { return v - v == (W)0; }

// Running (maximum, sum of exp(x - maximum)) over a stream of values. -inf values add nothing;
// a NaN makes the maximum NaN. Only rows with a finite maximum keep a meaningful sum.
template <class W> IGNIS_DEV void online_add(W& m, W& s, W v) {
  if (v > m) {
    s = s * wexp(m - v) + (W)1;
    m = v;
  } else if (v != v) {
    m = v;
  } else if (v > Limits<W>::lowest()) {
    s += wexp(v - m);
  }
}

template <class W> IGNIS_DEV void online_merge(W& m, W& s, W m2, W s2) {
  const W top = nan_max(m, m2);
  const W a = m == Limits<W>::lowest() ? (W)0 : s * wexp(m - top);
  const W b = m2 == Limits<W>::lowest() ? (W)0 : s2 * wexp(m2 - top);
  m = top;
  s = a + b;
}

template <class W> IGNIS_DEV W finish_value(W v, W m, W s, W log_s, bool log_out) {
  const W z = v - m;
  return log_out ? z - log_s : wexp(z) / s;
}

// One warp per row; lane l holds elements l, l + 32, ... (ITEMS of them).
template <class T, class O, int ITEMS>
__global__ void __launch_bounds__(128)
    softmax_warp(const T* __restrict__ x, O* __restrict__ out, OuterLayout outer, int64 rows, int64 n, bool log_out) {
  typedef typename acc_type<O>::type W;
  const int lane = threadIdx.x & (warp_size - 1);
  const int64 warps = grid_stride() / warp_size;
  for (int64 row = global_index() / warp_size; row < rows; row += warps) {
    const T* p = x + offset_of(outer, row);
    O* q = out + row * n;
    W v[ITEMS];
    W m = Limits<W>::lowest();
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
      const int64 idx = (int64)k * warp_size + lane;
      v[k] = idx < n ? cvt_in<W>(p[idx]) : Limits<W>::lowest();
      m = nan_max(m, v[k]);
    }
    m = group_reduce<MaxOp<W>>(m, warp_size);
    W s = (W)0;
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
      const int64 idx = (int64)k * warp_size + lane;
      if (idx < n) {
        const W z = v[k] - m;
        const W e = wexp(z);
        s += e;
        v[k] = log_out ? z : e;
      }
    }
    s = group_reduce<SumOp<W>>(s, warp_size);
    const W log_s = wlog(s);
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
      const int64 idx = (int64)k * warp_size + lane;
      if (idx < n) q[idx] = cvt_out<O>(log_out ? v[k] - log_s : v[k] / s);
    }
  }
}

// One block per row; thread t holds packs t, t + B, ... (ITEMS packs of VEC elements).
// With VEC > 1, rows start 16-byte aligned in x and VEC * sizeof(O)-aligned in out, and n is a
// multiple of VEC.
template <class T, class O, int VEC, int ITEMS>
__global__ void __launch_bounds__(1024, 1)
    softmax_block(const T* __restrict__ x, O* __restrict__ out, OuterLayout outer, int64 rows, int64 n, bool log_out) {
  typedef typename acc_type<O>::type W;
  IGNIS_SHARED_ARRAY(W, scratch, warp_size);
  const int64 nthreads = blockDim.x;
  for (int64 row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* p = x + offset_of(outer, row);
    O* q = out + row * n;
    W v[ITEMS][VEC];
    W m = Limits<W>::lowest();
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
      const int64 idx = ((int64)k * nthreads + threadIdx.x) * VEC;
      if (idx < n) {
        const Pack<T, VEC> pk = load_pack<T, VEC>(p + idx);
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          v[k][e] = cvt_in<W>(pk.e[e]);
          m = nan_max(m, v[k][e]);
        }
      }
    }
    m = block_reduce<MaxOp<W>>(m, scratch);
    W s = (W)0;
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
      const int64 idx = ((int64)k * nthreads + threadIdx.x) * VEC;
      if (idx < n) {
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          const W z = v[k][e] - m;
          const W ez = wexp(z);
          s += ez;
          v[k][e] = log_out ? z : ez;
        }
      }
    }
    s = block_reduce<SumOp<W>>(s, scratch);
    const W log_s = wlog(s);
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
      const int64 idx = ((int64)k * nthreads + threadIdx.x) * VEC;
      if (idx < n) {
        O o[VEC];
#pragma unroll
        for (int e = 0; e < VEC; ++e) o[e] = cvt_out<O>(log_out ? v[k][e] - log_s : v[k][e] / s);
        store_values<O, VEC>(q + idx, o);
      }
    }
  }
}

// --- 16-bit rows kept as loaded -----------------------------------------------------------------

// Two 16-bit floats in a 32-bit word (element 0 in the low half): maximum of two pairs, the
// pair (-inf, -inf), each half as float, and two floats rounded (to nearest even) into a pair.
// The maximum returns the other operand where one is NaN; softmax_packed relies on that being
// harmless (see there). sm_80 and later.
template <class T> struct Pair;
template <> struct Pair<bfloat16> {
  static IGNIS_DEV uint32 max(uint32 a, uint32 b) {
    uint32 d;
    asm("max.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
  }
  static IGNIS_DEV uint32 lowest() { return 0xff80ff80u; }
  static IGNIS_DEV float lo(uint32 w) { return __uint_as_float(w << 16); }
  static IGNIS_DEV float hi(uint32 w) { return __uint_as_float(w & 0xffff0000u); }
  static IGNIS_DEV uint32 pack(float lo_value, float hi_value) {
    uint32 d;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi_value), "f"(lo_value));
    return d;
  }
};
template <> struct Pair<float16> {
  static IGNIS_DEV uint32 max(uint32 a, uint32 b) {
    uint32 d;
    asm("max.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
  }
  static IGNIS_DEV uint32 lowest() { return 0xfc00fc00u; }
  static IGNIS_DEV float lo(uint32 w) {
    return to_float(float16::from_bits((uint16)(w & 0xffffu)));
  }
  static IGNIS_DEV float hi(uint32 w) { return to_float(float16::from_bits((uint16)(w >> 16))); }
  static IGNIS_DEV uint32 pack(float lo_value, float hi_value) {
    uint32 d;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi_value), "f"(lo_value));
    return d;
  }
};

IGNIS_DEV uint32 word_of(const uint4& v, int j) { return j == 0 ? v.x : j == 1 ? v.y : j == 2 ? v.z : v.w; }

// exp(z) for z <= 0 (or NaN) as 2^(z * log2(e)) on the special function unit: relative error
// at most about 5e-6 (rounding z * log2(e) for z near -87; 3e-7 near z = 0), far below a
// 16-bit float's rounding (2e-3 for float16's last place); results below 2^-126 flush to zero.
IGNIS_DEV float exp_fast(float z) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(z * 1.4426950408889634f));
  return r;
}

// Softmax rows of 16-bit floats (T = float16 or bfloat16, out the same type). One block per
// row; thread t holds 16-byte packs t, t + B, ... (ITEMS of them, 8 elements each) as loaded,
// a register per two elements: half of what softmax_block needs, so two blocks of up to 512
// threads share an SM and one block's loads overlap the other's arithmetic and stores.
// exp(x - max) is evaluated in the sum pass and again in the write pass rather than kept.
// Rows start 16-byte aligned in x and out; n is a multiple of 8.
//
// Arithmetic: the maximum is taken on the 16-bit pairs (exact; a NaN is skipped there, but a
// NaN anywhere still makes the sum, and so the whole row, NaN, as in softmax_block; +inf or
// only -inf make x - max NaN for some element, and so the row NaN too); z = x - max and the
// sum of exp(z) in float; softmax = exp(z) * (1 / sum), log-softmax = z - log(sum), rounded
// once to T.
template <class T, int ITEMS>
__global__ void __launch_bounds__(512, 2)
    softmax_packed(const T* __restrict__ x, T* __restrict__ out, OuterLayout outer, int64 rows, int64 n, bool log_out) {
  static_assert(sizeof(T) == 2, "softmax_packed: 16-bit elements");
  constexpr int VEC = 8;
  typedef Pair<T> P;
  IGNIS_SHARED_ARRAY(float, scratch, warp_size);
  const int64 nthreads = blockDim.x;
  for (int64 row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* p = x + offset_of(outer, row);
    T* q = out + row * n;
    uint4 v[ITEMS];
    // Every load of the row is issued before any value is used.
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
      const int64 idx = ((int64)k * nthreads + threadIdx.x) * VEC;
      if (idx < n) v[k] = __ldg(reinterpret_cast<const uint4*>(p + idx));
    }
    uint32 m2 = P::lowest();
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
      const int64 idx = ((int64)k * nthreads + threadIdx.x) * VEC;
      if (idx < n) {
        m2 = P::max(m2, P::max(P::max(v[k].x, v[k].y), P::max(v[k].z, v[k].w)));
      }
    }
    float m = fmaxf(P::lo(m2), P::hi(m2));
    m = block_reduce<MaxOp<float>>(m, scratch);
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
      const int64 idx = ((int64)k * nthreads + threadIdx.x) * VEC;
      if (idx < n) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const uint32 w = word_of(v[k], j);
          s += exp_fast(P::lo(w) - m) + exp_fast(P::hi(w) - m);
        }
      }
    }
    s = block_reduce<SumOp<float>>(s, scratch);
    const float log_s = logf(s);
    const float inv_s = 1.0f / s;
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
      const int64 idx = ((int64)k * nthreads + threadIdx.x) * VEC;
      if (idx < n) {
        uint32 o[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const uint32 w = word_of(v[k], j);
          const float z0 = P::lo(w) - m, z1 = P::hi(w) - m;
          o[j] = log_out ? P::pack(z0 - log_s, z1 - log_s) : P::pack(exp_fast(z0) * inv_s, exp_fast(z1) * inv_s);
        }
        uint4 r;
        r.x = o[0];
        r.y = o[1];
        r.z = o[2];
        r.w = o[3];
        store16(q + idx, r);
      }
    }
  }
}

// One block per row of any length: a pass for (maximum, sum) with the online update, a pass
// that writes.
template <class T, class O, int VEC>
__global__ void __launch_bounds__(1024)
    softmax_online(const T* __restrict__ x, O* __restrict__ out, OuterLayout outer, int64 rows, int64 n, bool log_out) {
  typedef typename acc_type<O>::type W;
  constexpr int unroll = VEC >= 8 ? 1 : 2;
  IGNIS_SHARED_ARRAY(W, scratch, warp_size);
  for (int64 row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* p = x + offset_of(outer, row);
    O* q = out + row * n;
    W m = Limits<W>::lowest();
    W s = (W)0;
    for_span<T, VEC, unroll>(p, 0, n, threadIdx.x, blockDim.x, [&](int64, T xv) { online_add(m, s, cvt_in<W>(xv)); });
    const W top = block_reduce<MaxOp<W>>(m, scratch);
    s = m == Limits<W>::lowest() ? (W)0 : s * wexp(m - top);
    s = block_reduce<SumOp<W>>(s, scratch);
    if (!is_finite(top)) s = top - top;  // NaN: such rows are all NaN
    const W log_s = wlog(s);
    for_span<T, VEC, unroll>(p, 0, n, threadIdx.x, blockDim.x,
                             [&](int64 r, T xv) { q[r] = cvt_out<O>(finish_value(cvt_in<W>(xv), top, s, log_s, log_out)); });
  }
}

// The softmax axis (n elements, element stride rs) lies outside a contiguous inner axis of
// `inner` elements; out is contiguous (outer_rows, n, inner). A block of (bx, by) threads
// (bx * by <= 256, by a power of two) owns bx consecutive columns of one outer row.
template <class T, class O>
__global__ void __launch_bounds__(256)
    softmax_cols(const T* __restrict__ x, O* __restrict__ out, OuterLayout outer, int64 outer_rows, int64 n,
                 int64 rs, int64 inner, bool log_out) {
  typedef typename acc_type<O>::type W;
  IGNIS_SHARED_ARRAY(W, tile_m, 256);
  IGNIS_SHARED_ARRAY(W, tile_s, 256);
  const int bx = blockDim.x, by = blockDim.y;
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64 tiles = ceil_div(inner, bx);
  const int64 units = outer_rows * tiles;
  for (int64 unit = blockIdx.x; unit < units; unit += gridDim.x) {
    const int64 o = unit / tiles;
    const int64 i = (unit - o * tiles) * bx + tx;
    const T* p = x + offset_of(outer, o) + i;
    O* q = out + o * n * inner + i;
    W m = Limits<W>::lowest();
    W s = (W)0;
    if (i < inner) {
#pragma unroll 4
      for (int64 r = ty; r < n; r += by) online_add(m, s, cvt_in<W>(p[r * rs]));
    }
    tile_m[ty * bx + tx] = m;
    tile_s[ty * bx + tx] = s;
    __syncthreads();
    for (int half = by >> 1; half > 0; half >>= 1) {
      if (ty < half) {
        W m1 = tile_m[ty * bx + tx], s1 = tile_s[ty * bx + tx];
        online_merge(m1, s1, tile_m[(ty + half) * bx + tx], tile_s[(ty + half) * bx + tx]);
        tile_m[ty * bx + tx] = m1;
        tile_s[ty * bx + tx] = s1;
      }
      __syncthreads();
    }
    const W top = tile_m[tx];
    W total = tile_s[tx];
    if (!is_finite(top)) total = top - top;
    const W log_s = wlog(total);
    if (i < inner) {
      for (int64 r = ty; r < n; r += by)
        q[r * inner] = cvt_out<O>(finish_value(cvt_in<W>(p[r * rs]), top, total, log_s, log_out));
    }
    __syncthreads();  // the tiles are rewritten by the next unit
  }
}

}  // namespace ignis
