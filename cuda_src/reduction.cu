// reduction.cu - sum, mean, max, min, var and argmax/argmin over any set of axes.
//
// The host side (the cuda backend's reduction module) reduces every problem to one of two shapes
// by collapsing dimensions:
//   rows: out[row] = reduce(x[start(row) + r * rs] for r < n), start(row) from an OuterLayout;
//         reduce_group (a group of 1..32 lanes per row, for short rows and for many medium
//         rows) or reduce_block (a block per row, optionally split over `splits` blocks per
//         row); both read contiguous rows in 16-byte packs;
//   cols: out[o * inner + i] = reduce(x[start(o) + r * rs + i] for r < n), the reduced axis outside
//         a contiguous inner axis; reduce_cols (each thread column i, or one 16-byte pack of
//         columns, coalesced over i; for narrow inner axes) or reduce_cols_wide (each thread
//         several packs of columns, a block a strip of columns and a slab of rows, many row
//         loads in flight; for wide inner axes).
// Split reductions write one partial result per (output, split) and a second reduce_group launch
// over those partials (PartialOp) finishes them. Every order of combination is fixed by the
// shape and the launch configuration, which depend only on the shape: results are bitwise
// reproducible and no atomics are used.
#include "reduce.cuh"

namespace ignis {

IGNIS_DEV int64 min64(int64 a, int64 b) { return a < b ? a : b; }

// Rows of n elements at element stride rs; `group` lanes (a power of two <= 32) per row.
// blockDim.x is a multiple of 32. With VEC > 1 the rows are contiguous (rs == 1) and read in
// 16-byte packs (group >= VEC).
template <class T, class O, class Op, int VEC>
__global__ void __launch_bounds__(256)
    reduce_group(const T* __restrict__ x, O* __restrict__ out, const typename Op::acc_t* __restrict__ center,
                 OuterLayout outer, int64 rows, int64 n, int64 rs, int group, double div) {
  typedef typename Op::acc_t A;
  const int lane = threadIdx.x & (group - 1);
  const int rows_per_warp = warp_size / group;
  const int64 warp = global_index() / warp_size;
  const int64 warps = grid_stride() / warp_size;
  const int64 sub = (threadIdx.x & (warp_size - 1)) / group;
  // The loop bound is uniform over a warp: every lane reaches the shuffles in group_reduce.
  for (int64 first = warp * rows_per_warp; first < rows; first += warps * rows_per_warp) {
    const int64 row = first + sub;
    A acc = Op::identity();
    if (row < rows) {
      const T* p = x + offset_of(outer, row);
      const A c = center ? center[row] : Op::identity();
      if constexpr (VEC > 1) {
        for_span<T, VEC, 2>(p, 0, n, lane, group, [&](int64 r, T v) { acc = Op::combine(acc, Op::load(v, c, r)); });
      } else {
#pragma unroll 4
        for (int64 r = lane; r < n; r += group) acc = Op::combine(acc, Op::load(p[r * rs], c, r));
      }
    }
    acc = group_reduce<Op>(acc, group);
    if (row < rows && lane == 0) out[row] = Op::template finish<O>(acc, div);
  }
}

// Contiguous rows of n elements; each (row, split) is one block's work: elements
// [split * chunk, min(n, (split + 1) * chunk)). With splits == 1 the block writes the finished
// result, otherwise the partial result partials[row * splits + split].
template <class T, class O, class Op, int VEC>
__global__ void __launch_bounds__(512)
    reduce_block(const T* __restrict__ x, O* __restrict__ out, typename Op::acc_t* __restrict__ partials,
                 const typename Op::acc_t* __restrict__ center, OuterLayout outer, int64 rows, int64 n,
                 int64 splits, int64 chunk, double div) {
  typedef typename Op::acc_t A;
  // 16-byte packs in flight per thread: 4 packs of 2 or 4 elements, fewer of more (the unrolled
  // body stays small; 8 or 16 elements per pack already give the loads plenty of work).
  constexpr int unroll = VEC >= 16 ? 1 : (VEC >= 8 ? 2 : 4);
  IGNIS_SHARED_ARRAY(A, scratch, warp_size);
  const int64 units = rows * splits;
  for (int64 unit = blockIdx.x; unit < units; unit += gridDim.x) {
    const int64 row = unit / splits;
    const int64 split = unit - row * splits;
    const int64 begin = split * chunk;
    const int64 end = min64(n, begin + chunk);
    const T* p = x + offset_of(outer, row);
    const A c = center ? center[row] : Op::identity();
    A acc = Op::identity();
    for_span<T, VEC, unroll>(p, begin, end, threadIdx.x, blockDim.x,
                             [&](int64 r, T v) { acc = Op::combine(acc, Op::load(v, c, r)); });
    acc = block_reduce<Op>(acc, scratch);
    if (threadIdx.x == 0) {
      if (splits == 1) {
        out[row] = Op::template finish<O>(acc, div);
      } else {
        partials[unit] = acc;
      }
    }
  }
}

// The reduced axis (n elements, element stride rs) lies outside a contiguous inner axis of
// `inner` elements. A block of (bx, by) threads (bx * by <= 256, by a power of two) owns
// bx * VEC consecutive columns of one outer row and one split of the reduced axis: thread
// (tx, ty) reads rows ty, ty + by, ... of columns tx * VEC .. tx * VEC + VEC - 1 (one 16-byte
// pack per row when VEC > 1), so each warp's loads are contiguous. The by partial results of
// a column are combined in shared memory in a fixed tree. With VEC > 1: inner, rs and every
// row start are multiples of VEC and x is 16-byte aligned.
template <class T, class O, class Op, int VEC>
__global__ void __launch_bounds__(256)
    reduce_cols(const T* __restrict__ x, O* __restrict__ out, typename Op::acc_t* __restrict__ partials,
                const typename Op::acc_t* __restrict__ center, OuterLayout outer, int64 outer_rows,
                int64 inner, int64 n, int64 rs, int64 splits, int64 chunk, double div) {
  typedef typename Op::acc_t A;
  IGNIS_SHARED_ARRAY(A, tile, 256);
  const int bx = blockDim.x, by = blockDim.y;
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64 tiles = ceil_div(inner, (int64)bx * VEC);
  const int64 units = outer_rows * tiles * splits;
  for (int64 unit = blockIdx.x; unit < units; unit += gridDim.x) {
    const int64 split = unit % splits;
    const int64 rest = unit / splits;
    const int64 o = rest / tiles;
    const int64 i = ((rest - o * tiles) * bx + tx) * VEC;  // first column of this thread
    const int64 begin = split * chunk;
    const int64 end = min64(n, begin + chunk);
    const int64 out_index = o * inner + i;
    A acc[VEC];
    A c[VEC];
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      acc[e] = Op::identity();
      c[e] = Op::identity();
    }
    if (i < inner) {
      const T* p = x + offset_of(outer, o) + i;
      if (center) {
#pragma unroll
        for (int e = 0; e < VEC; ++e) c[e] = center[out_index + e];
      }
      // Four independent row loads in flight before any is combined (the combination order
      // is still r = ty, ty + by, ...: the same result as a plain loop).
      constexpr int U = 4;
      int64 r = begin + ty;
      for (; r + (U - 1) * by < end; r += U * by) {
        Pack<T, VEC> pk[U];
#pragma unroll
        for (int u = 0; u < U; ++u) pk[u] = load_pack<T, VEC>(p + (r + u * by) * rs);
#pragma unroll
        for (int u = 0; u < U; ++u) {
#pragma unroll
          for (int e = 0; e < VEC; ++e) acc[e] = Op::combine(acc[e], Op::load(pk[u].e[e], c[e], r + u * by));
        }
      }
      for (; r < end; r += by) {
        const Pack<T, VEC> pk = load_pack<T, VEC>(p + r * rs);
#pragma unroll
        for (int e = 0; e < VEC; ++e) acc[e] = Op::combine(acc[e], Op::load(pk.e[e], c[e], r));
      }
    }
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      tile[ty * bx + tx] = acc[e];
      __syncthreads();
      for (int half = by >> 1; half > 0; half >>= 1) {
        if (ty < half) tile[ty * bx + tx] = Op::combine(tile[ty * bx + tx], tile[(ty + half) * bx + tx]);
        __syncthreads();
      }
      if (ty == 0 && i < inner) {
        if (splits == 1) {
          out[out_index + e] = Op::template finish<O>(tile[tx], div);
        } else {
          partials[(out_index + e) * splits + split] = tile[tx];
        }
      }
      __syncthreads();  // the tile is rewritten next
    }
  }
}


// --- wide column strips ---------------------------------------------------------------------------

// PACKS packs of VEC columns per thread (VEC > 1: 16-byte packs); pack p of lane tx starts at
// column (p * warp_size + tx) * VEC of the strip, so every load instruction of a warp reads
// warp_size * VEC consecutive columns of one row.
template <class T, int VEC> IGNIS_DEV Pack<T, VEC> load_pack_upto(const T* p, int valid) {
  if (valid >= VEC) return load_pack<T, VEC>(p);
  Pack<T, VEC> r;
#pragma unroll
  for (int e = 0; e < VEC; ++e) {
    if (e < valid) r.e[e] = p[e];
  }
  return r;
}

// Rows begin + ty, begin + ty + by, ... (< end) of the thread's packs into acc, in that order.
// FULL: every pack of the thread lies inside the inner axis; otherwise valid[p] (0..VEC) of
// pack p's columns do (the scalar tail of a strip at the end of the axis).
template <class T, class Op, int VEC, int PACKS, bool FULL>
IGNIS_DEV void cols_wide_rows(typename Op::acc_t (&acc)[PACKS][VEC], const typename Op::acc_t (&c)[PACKS][VEC],
                              const T* first, const int (&valid)[PACKS], int64 begin, int64 end, int ty, int by,
                              int64 rs) {
  // Full strips: four rows of PACKS packs in flight before any is combined (4 * PACKS * 16
  // bytes per thread). The tail strip loads its columns one by one (a register each), one row
  // at a time, so that it needs no more registers than a full one.
  constexpr int U = FULL ? 4 : 1;
  const int64 step = (int64)by * rs;
  int64 r = begin + ty;
  const T* row = first + r * rs;
  for (; r + (U - 1) * by < end; r += U * by, row += U * step) {
    Pack<T, VEC> v[U][PACKS];
#pragma unroll
    for (int u = 0; u < U; ++u) {
#pragma unroll
      for (int p = 0; p < PACKS; ++p) {
        const T* q = row + u * step + p * warp_size * VEC;
        v[u][p] = FULL ? load_pack<T, VEC>(q) : load_pack_upto<T, VEC>(q, valid[p]);
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
#pragma unroll
      for (int p = 0; p < PACKS; ++p) {
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          if (FULL || e < valid[p]) acc[p][e] = Op::combine(acc[p][e], Op::load(v[u][p].e[e], c[p][e], r + u * by));
        }
      }
    }
  }
  for (; r < end; r += by, row += step) {
#pragma unroll
    for (int p = 0; p < PACKS; ++p) {
      const T* q = row + p * warp_size * VEC;
      const Pack<T, VEC> v = FULL ? load_pack<T, VEC>(q) : load_pack_upto<T, VEC>(q, valid[p]);
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        if (FULL || e < valid[p]) acc[p][e] = Op::combine(acc[p][e], Op::load(v.e[e], c[p][e], r));
      }
    }
  }
}

// The cols problem of reduce_cols for wide inner axes. A block of (warp_size, by) threads
// (by <= 8) owns a strip of S = warp_size * PACKS * VEC consecutive columns of outer row o and
// rows [split * chunk, min(n, (split + 1) * chunk)) of the reduced axis; thread (tx, ty) reads
// rows ty, ty + by, ... of its PACKS packs. Units (o, split, strip) run strip-fastest, so blocks
// running side by side read neighbouring strips of the same rows. The by partial results of a
// column are combined in shared memory in the order ty = 0, 1, ..., by - 1. With splits == 1
// the block writes out[o * inner + i], otherwise partials[split * outer_rows * inner + o * inner + i]
// (a second launch combines the splits of each column in order 0, 1, ...). With VEC > 1: x is
// 16-byte aligned and rs and every row start are multiples of VEC (inner need not be: the
// last strip reads its tail column by column).
template <class T, class O, class Op, int VEC, int PACKS>
__global__ void __launch_bounds__(256, 3)
    reduce_cols_wide(const T* __restrict__ x, O* __restrict__ out, typename Op::acc_t* __restrict__ partials,
                     const typename Op::acc_t* __restrict__ center, OuterLayout outer, int64 outer_rows,
                     int64 inner, int64 n, int64 rs, int64 splits, int64 chunk, double div) {
  typedef typename Op::acc_t A;
  constexpr int S = warp_size * PACKS * VEC;
  IGNIS_SHARED_ARRAY(A, tile, S * 8);
  const int tx = threadIdx.x, ty = threadIdx.y, by = blockDim.y;
  const int tid = ty * warp_size + tx;
  const int nthreads = warp_size * by;
  const int64 strips = ceil_div(inner, (int64)S);
  const int64 units = outer_rows * splits * strips;
  for (int64 unit = blockIdx.x; unit < units; unit += gridDim.x) {
    const int64 strip = unit % strips;
    const int64 rest = unit / strips;
    const int64 split = rest % splits;
    const int64 o = rest / splits;
    const int64 col0 = strip * S;
    const int64 begin = split * chunk;
    const int64 end = min64(n, begin + chunk);
    A acc[PACKS][VEC];
    A c[PACKS][VEC];
    int valid[PACKS];
#pragma unroll
    for (int p = 0; p < PACKS; ++p) {
      const int64 left = inner - (col0 + (int64)(p * warp_size + tx) * VEC);
      valid[p] = left <= 0 ? 0 : (left >= VEC ? VEC : (int)left);
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        acc[p][e] = Op::identity();
        c[p][e] = Op::identity();
        if (center && e < valid[p]) c[p][e] = center[o * inner + col0 + (p * warp_size + tx) * VEC + e];
      }
    }
    const T* first = x + offset_of(outer, o) + col0 + tx * VEC;
    if (col0 + S <= inner) {
      cols_wide_rows<T, Op, VEC, PACKS, true>(acc, c, first, valid, begin, end, ty, by, rs);
    } else {
      cols_wide_rows<T, Op, VEC, PACKS, false>(acc, c, first, valid, begin, end, ty, by, rs);
    }
    __syncthreads();  // the previous unit's tile has been read
#pragma unroll
    for (int p = 0; p < PACKS; ++p) {
#pragma unroll
      for (int e = 0; e < VEC; ++e) tile[ty * S + (p * warp_size + tx) * VEC + e] = acc[p][e];
    }
    __syncthreads();
    for (int k = tid; k < S; k += nthreads) {
      const int64 col = col0 + k;
      if (col < inner) {
        A v = tile[k];
        for (int j = 1; j < by; ++j) v = Op::combine(v, tile[j * S + k]);
        const int64 out_index = o * inner + col;
        if (splits == 1) {
          out[out_index] = Op::template finish<O>(v, div);
        } else {
          partials[split * outer_rows * inner + out_index] = v;
        }
      }
    }
  }
}

}  // namespace ignis
