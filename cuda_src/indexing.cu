// indexing.cu - gather (take) and scatter-add (index_add) along one axis.
//
// The host views every problem as contiguous 3-D arrays: the source a (outer, n, inner), the
// indices idx (m,) and the gathered rows out (outer, m, inner). Row r = o * m + j of out is row
// o * n + k of a with k = idx[j], wrapped like NumPy (k < 0: k + n).
//
//   take_rows          out row r = a row (o, k); an index outside [-n, n) fills the row with NaN
//                      (floating types) or 0 (integers, bool). A block is (bx, by) threads: by
//                      rows at a time, U times over (U rows per thread in flight), bx threads
//                      along a row moving VEC elements per access (inner % VEC == 0 and
//                      VEC-element-aligned rows for VEC > 1).
//   index_add_atomic   dst row (o, k) += alpha * src row r, with atomics (repeated indices add up;
//                      the order of the additions, and so float rounding, varies run to run).
//   index_add_ordered  the same sum, deterministic: one thread per (o, column) walks j = 0 .. m-1
//                      in order, so a column is updated by one thread only (no atomics, no sort).
// Indices outside [-n, n) add nothing.
#include "elementwise.cuh"

namespace ignis {
namespace idx {

// The value a row gathered through an out-of-range index gets: a quiet NaN, or zero.
template <class T> IGNIS_DEV T bad_value() { return (T)0; }
template <> IGNIS_DEV float bad_value<float>() { return __int_as_float(0x7fc00000); }
template <> IGNIS_DEV double bad_value<double>() { return __longlong_as_double(0x7ff8000000000000ll); }
template <> IGNIS_DEV float16 bad_value<float16>() { float16 h; h.bits = 0x7e00; return h; }
template <> IGNIS_DEV bfloat16 bad_value<bfloat16>() { bfloat16 b; b.bits = 0x7fc0; return b; }

// k wrapped into [0, n), or -1 when outside [-n, n).
template <class I> IGNIS_DEV int64 wrap_index(I raw, int64 n) {
  int64 k = (int64)raw;
  if (k < 0) k += n;
  return (k >= 0 && k < n) ? k : -1;
}

template <class T, class I, int VEC, int U>
__global__ void take_rows(const T* __restrict__ a, const I* __restrict__ idx, T* __restrict__ out,
                          int64 rows, int64 m, int64 n, int64 inner_vecs) {
  typedef typename ew::raw_bits<sizeof(T) * VEC>::type R;
  const R* src = reinterpret_cast<const R*>(a);
  R* dst = reinterpret_cast<R*>(out);
  ew::Pack<T, VEC> bad;
#pragma unroll
  for (int e = 0; e < VEC; ++e) bad.v[e] = bad_value<T>();
  // A block covers a tile of by * U rows; thread (x, y) moves columns x, x + bx, ... of rows
  // y, y + by, ..., y + (U-1) by of the tile. Its U index loads, then the U row loads of each
  // column, are issued back to back (independent loads in flight rather than a chain per row).
  const int64 by = blockDim.y;
  const int64 tile = by * U;
  for (int64 r0 = (int64)blockIdx.x * tile + threadIdx.y; r0 < rows; r0 += (int64)gridDim.x * tile) {
    // o = r / m, the outer block of row r: none to find when there is one outer block
    // (embedding, axis 0), a 32-bit division below 2**31 rows; the test is the same for the
    // whole grid, so it branches once around all U rows.
    int64 o[U];
    if (rows == m) {
#pragma unroll
      for (int u = 0; u < U; ++u) o[u] = 0;
    } else if (rows <= 0x7fffffffll) {
#pragma unroll
      for (int u = 0; u < U; ++u) o[u] = (int64)((uint32)(r0 + u * by) / (uint32)m);
    } else {
#pragma unroll
      for (int u = 0; u < U; ++u) o[u] = (r0 + u * by) / m;
    }
    I raw[U];
#pragma unroll
    for (int u = 0; u < U; ++u) raw[u] = r0 + u * by < rows ? idx[r0 + u * by - o[u] * m] : (I)0;
    int64 k[U];  // the source row's first vector; -1: out of range (fill), -2: past the last row
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64 w = wrap_index(raw[u], n);
      k[u] = r0 + u * by >= rows ? -2 : (w < 0 ? -1 : (o[u] * n + w) * inner_vecs);
    }
    for (int64 c = threadIdx.x; c < inner_vecs; c += blockDim.x) {
      R v[U];
#pragma unroll
      for (int u = 0; u < U; ++u) v[u] = k[u] >= 0 ? src[k[u] + c] : bad.raw;
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (k[u] != -2) dst[(r0 + u * by) * inner_vecs + c] = v[u];
    }
  }
}

// alpha * v with wrap-around integer arithmetic. Floats round the product on its own (no fused
// multiply-add with the following sum), as the reference computes it.
template <class T> IGNIS_DEV T scaled(T v, T alpha) {
  if constexpr (ew::is_integer_v<T>) {
    typedef typename ew::info<T>::utype U;
    return (T)((U)v * (U)alpha);
  } else if constexpr (ew::same_type<T, float>::value) {
    return __fmul_rn(v, alpha);
  } else {
    return __dmul_rn(v, alpha);
  }
}

IGNIS_DEV void atomic_add(float* p, float v) { atomicAdd(p, v); }
IGNIS_DEV void atomic_add(double* p, double v) { atomicAdd(p, v); }
IGNIS_DEV void atomic_add(int32* p, int32 v) { atomicAdd(p, v); }
// two's complement: an unsigned 64-bit add gives the wrapped signed sum
IGNIS_DEV void atomic_add(int64* p, int64 v) {
  atomicAdd(reinterpret_cast<unsigned long long*>(p), (unsigned long long)v);
}

template <class T, class I>
__global__ void index_add_atomic(T* __restrict__ dst, const I* __restrict__ idx, const T* __restrict__ src,
                                 int64 rows, int64 m, int64 n, int64 inner, T alpha) {
  const int64 row_step = (int64)gridDim.x * blockDim.y;
  for (int64 r = (int64)blockIdx.x * blockDim.y + threadIdx.y; r < rows; r += row_step) {
    const int64 o = r / m;
    const int64 k = wrap_index(idx[r - o * m], n);
    if (k < 0) continue;
    const T* p = src + r * inner;
    T* q = dst + (o * n + k) * inner;
    for (int64 c = threadIdx.x; c < inner; c += blockDim.x) atomic_add(q + c, scaled(p[c], alpha));
  }
}

template <class T, class I>
__global__ void index_add_ordered(T* __restrict__ dst, const I* __restrict__ idx, const T* __restrict__ src,
                                  int64 outer, int64 m, int64 n, int64 inner, T alpha) {
  IGNIS_GRID_STRIDE_LOOP(col, outer * inner) {
    const int64 o = col / inner;
    const int64 c = col - o * inner;
    const T* p = src + o * m * inner + c;
    T* q = dst + o * n * inner + c;
    for (int64 j = 0; j < m; ++j) {
      const int64 k = wrap_index(idx[j], n);  // the same j across a warp: one broadcast load
      if (k >= 0) q[k * inner] += scaled(p[j * inner], alpha);
    }
  }
}

}  // namespace idx
}  // namespace ignis
