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
//                      VEC-element-aligned rows for VEC > 1). The host picks U (rows_in_flight,
//                      halved) so that the grid still runs several waves of blocks: the loads
//                      in flight per multiprocessor, not the rows per block, set the bandwidth.
//   index_add_atomic   dst row (o, k) += alpha * src row r, with atomics (repeated indices add up;
//                      the order of the additions, and so float rounding, varies run to run).
//   index_add_ordered  the same sum, deterministic: one thread per (o, column) walks j = 0 .. m-1
//                      in order, so a column is updated by one thread only (no atomics, no sort).
// Indices outside [-n, n) add nothing.
//   put_rows           dst row (o, k) = src row r (assignment through integer arrays and masks);
//                      rows move as raw bytes (BYTES per element, VEC elements per access), so one
//                      instance serves every dtype of that size. Indices outside [-n, n) write
//                      nothing; of repeated indices one row lands, which one is unspecified.
//
// Scans (data-dependent shapes; the host learns the result's size from a reduction first):
//   scan_block_totals  block b sums f(x[i]) over its chunk [b * chunk, (b + 1) * chunk), where f
//                      is (x != 0) (COUNT) or x itself.
//   scan_totals        one block: the chunk totals become their exclusive prefix sums, in place;
//                      totals[nblocks] gets the grand total.
//   scan_write         block b walks its chunk in order, a tile of blockDim.x elements at a time,
//                      with its chunk's offset: POSITIONS writes the index i of every nonzero x[i]
//                      at out[prefix] (flatnonzero), otherwise out[i] = the exclusive prefix sum.
//   repeat_search      out[j] = the i with starts[i] <= j < starts[i] + repeats[i] (the last i with
//                      starts[i] <= j, a binary search), for j < total.
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

// Blocks of take_rows have at most this many threads (the host's THREADS).
constexpr int take_threads = 256;

template <class T, class I, int VEC, int U>
__global__ void __launch_bounds__(take_threads)
take_rows(const T* __restrict__ a, const I* __restrict__ idx, T* __restrict__ out, int64 rows,
          int64 m, int64 n, int64 inner_vecs) {
  typedef typename ew::raw_bits<sizeof(T) * VEC>::type R;
  const R* __restrict__ src = reinterpret_cast<const R*>(a);
  R* __restrict__ dst = reinterpret_cast<R*>(out);
  ew::Pack<T, VEC> bad;
#pragma unroll
  for (int e = 0; e < VEC; ++e) bad.v[e] = bad_value<T>();
  // A block covers a tile of by * U rows; thread (x, y) moves columns x, x + bx, ... of rows
  // y, y + by, ..., y + (U-1) by of the tile. Its U index loads, then the U row loads of each
  // column, are issued back to back before any store: U independent 16-byte loads in flight per
  // thread rather than a chain per row. The index is read once per row and tile (the bx threads
  // of a row read the same address: one broadcast), the table through the read-only path.
  const int64 by = blockDim.y;
  const int64 tile = by * U;
  const int64 step = by * inner_vecs;  // out, in vectors: from row r to row r + by
  for (int64 r0 = (int64)blockIdx.x * tile + threadIdx.y; r0 < rows; r0 += (int64)gridDim.x * tile) {
    const int64 left = rows - r0;  // row r0 + u * by exists when u * by < left
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
    for (int u = 0; u < U; ++u) raw[u] = u * by < left ? __ldg(idx + (r0 + u * by - o[u] * m)) : (I)0;
    const R* p[U];  // the source row, or null: filled (out of range) or past the last row
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64 w = wrap_index(raw[u], n);
      p[u] = (u * by < left && w >= 0) ? src + (o[u] * n + w) * inner_vecs : nullptr;
    }
    R* q = dst + r0 * inner_vecs;
    for (int64 c = threadIdx.x; c < inner_vecs; c += blockDim.x) {
      R v[U];
#pragma unroll
      for (int u = 0; u < U; ++u) v[u] = p[u] != nullptr ? __ldg(p[u] + c) : bad.raw;
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (u * by < left) q[u * step + c] = v[u];
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


template <int BYTES, class I, int VEC>
__global__ void put_rows(uint8* __restrict__ dst, const I* __restrict__ idx, const uint8* __restrict__ src,
                         int64 rows, int64 m, int64 n, int64 inner_vecs) {
  typedef typename ew::raw_bits<BYTES * VEC>::type R;
  const R* s = reinterpret_cast<const R*>(src);
  R* d = reinterpret_cast<R*>(dst);
  const int64 row_step = (int64)gridDim.x * blockDim.y;
  for (int64 r = (int64)blockIdx.x * blockDim.y + threadIdx.y; r < rows; r += row_step) {
    const int64 o = rows == m ? 0 : r / m;
    const int64 k = wrap_index(idx[r - o * m], n);
    if (k < 0) continue;
    const R* p = s + r * inner_vecs;
    R* q = d + (o * n + k) * inner_vecs;
    for (int64 c = threadIdx.x; c < inner_vecs; c += blockDim.x) q[c] = p[c];
  }
}

// --- scans ---------------------------------------------------------------------------------------

constexpr int scan_threads = 256;  // every scan kernel runs blocks of this many threads (1-D)

template <class T, bool COUNT> IGNIS_DEV int64 scan_value(const T* x, int64 i) {
  if constexpr (COUNT) {
    return x[i] ? 1 : 0;
  } else {
    return (int64)x[i];
  }
}

IGNIS_DEV int64 warp_inclusive_scan(int64 v) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const int64 t = __shfl_up_sync(full_warp_mask, v, d);
    if (lane >= d) v += t;
  }
  return v;
}

// The exclusive prefix of v over the threads of the block (scan_threads of them, all calling);
// total gets the block's sum. Ends with a barrier, so it may be called again at once.
IGNIS_DEV int64 block_exclusive_scan(int64 v, int64& total) {
  constexpr int warps = scan_threads / 32;
  __shared__ int64 warp_sums[warps];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64 inclusive = warp_inclusive_scan(v);
  if (lane == 31) warp_sums[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    const int64 w = warp_inclusive_scan(lane < warps ? warp_sums[lane] : 0);
    if (lane < warps) warp_sums[lane] = w;
  }
  __syncthreads();
  const int64 before = warp ? warp_sums[warp - 1] : 0;
  total = warp_sums[warps - 1];
  __syncthreads();
  return before + inclusive - v;
}

template <class T, bool COUNT>
__global__ void __launch_bounds__(scan_threads)
scan_block_totals(const T* __restrict__ x, int64 n, int64 chunk, int64* __restrict__ totals) {
  const int64 begin = (int64)blockIdx.x * chunk;
  const int64 end = begin + chunk < n ? begin + chunk : n;
  int64 v = 0;
  for (int64 i = begin + threadIdx.x; i < end; i += scan_threads) v += scan_value<T, COUNT>(x, i);
  int64 total;
  block_exclusive_scan(v, total);
  if (threadIdx.x == 0) totals[blockIdx.x] = total;
}

__global__ void __launch_bounds__(scan_threads) scan_totals(int64* __restrict__ totals, int64 nblocks) {
  int64 carry = 0;
  for (int64 t = 0; t < nblocks; t += scan_threads) {
    const int64 i = t + threadIdx.x;
    const int64 v = i < nblocks ? totals[i] : 0;
    int64 tile;
    const int64 before = block_exclusive_scan(v, tile);
    if (i < nblocks) totals[i] = carry + before;
    carry += tile;
  }
  if (threadIdx.x == 0) totals[nblocks] = carry;
}

template <class T, bool POSITIONS>
__global__ void __launch_bounds__(scan_threads)
scan_write(const T* __restrict__ x, int64 n, int64 chunk, const int64* __restrict__ offsets,
           int64* __restrict__ out) {
  const int64 begin = (int64)blockIdx.x * chunk;
  const int64 end = begin + chunk < n ? begin + chunk : n;
  int64 carry = offsets[blockIdx.x];
  for (int64 t = begin; t < end; t += scan_threads) {
    const int64 i = t + threadIdx.x;
    const int64 v = i < end ? scan_value<T, POSITIONS>(x, i) : 0;
    int64 tile;
    const int64 before = block_exclusive_scan(v, tile);
    if (POSITIONS) {
      if (v) out[carry + before] = i;
    } else if (i < end) {
      out[i] = carry + before;
    }
    carry += tile;
  }
}

__global__ void repeat_search(const int64* __restrict__ starts, int64 n, int64 total, int64* __restrict__ out) {
  IGNIS_GRID_STRIDE_LOOP(j, total) {
    int64 lo = 0, hi = n;  // the answer is in [lo, hi): starts[lo] <= j, and starts[hi] > j or hi = n
    while (hi - lo > 1) {
      const int64 mid = lo + (hi - lo) / 2;
      if (starts[mid] <= j) lo = mid; else hi = mid;
    }
    out[j] = lo;
  }
}

}  // namespace idx
}  // namespace ignis
