// norm.cu - fused row kernels: layer norm and RMS norm (forward and backward) and the backward
// of softmax / log-softmax.
//
// Every kernel works on `rows` contiguous rows of `n` elements (row r starts at element r * n of
// every row array). Statistics and sums run in W = acc_type<T> (float for float16, bfloat16 and
// float; double for double); outputs are rounded once.
//
// Row kernels (template <..., VEC, ITEMS, WARP, ...>): a row is handled by a warp (WARP; blocks
// of 128 threads hold four rows) or by a whole block. Thread t owns the packs of VEC elements
// starting at (k * threads + t) * VEC. With ITEMS > 0 the row is read once and kept in registers
// (ITEMS packs per thread cover the row); with ITEMS == 0 (rows too long for registers) it is
// re-read for each pass. VEC > 1 needs every row array and the weight and bias 16-byte aligned
// (min(16, VEC * size) for each element size) and n a multiple of VEC.
//
//   norm_fwd        y = (x - mean) * rstd * w + b (layer norm) or y = x * rstd * w (RMS norm);
//                   mean = sum(x) / n, var = sum((x - mean)^2) / n from registers (with
//                   ITEMS == 0 the shifted sums around the row's first element, one pass),
//                   rstd = 1 / sqrt(var + eps) (RMS: var = sum(x^2) / n). Writes mean, rstd.
//   norm_bwd        gx = rstd * (gh - mean(gh) - xhat * mean(gh * xhat)), gh = g * w,
//                   xhat = (x - mean) * rstd (RMS: without the mean(gh) term, mean = 0).
//   norm_param_partials / norm_param_finish
//                   dw = sum over rows of g * xhat, db = sum over rows of g: blocks of 32
//                   lanes of VEC columns (16-byte loads) x a split of the rows write one partial
//                   per (split, column); the finish kernel adds the splits in order. No
//                   atomics: results depend only on the shape.
//   softmax_bwd     softmax: gx = y * (g - sum(g * y)); log-softmax: gx = g - exp(y) * sum(g).
#include "norm_loss.cuh"

namespace ignis {

template <class T, class P, int VEC, int ITEMS, bool WARP, bool RMS>
__global__ void __launch_bounds__(WARP ? 128 : 1024)
    norm_fwd(const T* __restrict__ x, const P* __restrict__ w, const P* __restrict__ b, T* __restrict__ y,
             typename acc_type<T>::type* __restrict__ mean_out, typename acc_type<T>::type* __restrict__ rstd_out,
             int64 rows, int64 n, double eps) {
  typedef typename acc_type<T>::type W;
  constexpr int CACHE = ITEMS > 0 ? ITEMS : 1;
  IGNIS_SHARED_ARRAY(W, scratch, warp_size);
  IGNIS_SHARED_ARRAY(Two<W>, scratch2, warp_size);
  const int tid = Rows<WARP>::tid();
  const int64 step = (int64)Rows<WARP>::threads() * VEC;
  const W inv_n = (W)1 / (W)n;
  for (int64 row = Rows<WARP>::first(); row < rows; row += Rows<WARP>::step()) {
    const T* p = x + row * n;
    T* q = y + row * n;
    Packed<T, VEC> v[CACHE];  // the row, in the data type
    W mean = (W)0, var;
    W shift = (W)0, centre = (W)0;  // y = ((x - shift) - centre) * rstd
    if constexpr (ITEMS > 0) {
      W s = (W)0;
#pragma unroll
      for (int k = 0; k < ITEMS; ++k) {
        const int64 idx = k * step + (int64)tid * VEC;
        if (idx < n) {
          load_packed<T, VEC>(p + idx, v[k]);
          W u[VEC];
          unpack<W>(v[k], u);
#pragma unroll
          for (int e = 0; e < VEC; ++e) s += RMS ? u[e] * u[e] : u[e];
        }
      }
      s = row_reduce<WARP, SumOp<W>>(s, scratch);
      if constexpr (RMS) {
        var = s * inv_n;
      } else {
        mean = s * inv_n;
        centre = mean;
        W d2 = (W)0;
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
          const int64 idx = k * step + (int64)tid * VEC;
          if (idx < n) {
            W u[VEC];
            unpack<W>(v[k], u);
#pragma unroll
            for (int e = 0; e < VEC; ++e) {
              const W d = u[e] - mean;
              d2 += d * d;
            }
          }
        }
        var = row_reduce<WARP, SumOp<W>>(d2, scratch) * inv_n;
      }
    } else {
      // Shifted sums: centred on a sample of the row, sum and sum of squares lose no precision
      // to a large common offset (var = E[(x-K)^2] - E[x-K]^2).
      shift = RMS ? (W)0 : cvt_in<W>(p[0]);
      Two<W> t = two((W)0, (W)0);
      for (int64 idx = (int64)tid * VEC; idx < n; idx += step) {
        W u[VEC];
        load_vec<W, T, VEC>(p + idx, u);
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          const W d = u[e] - shift;
          t.a += d;
          t.b += d * d;
        }
      }
      t = row_reduce<WARP, Sum2Op<W>>(t, scratch2);
      if constexpr (RMS) {
        var = t.b * inv_n;
      } else {
        const W m1 = t.a * inv_n;
        mean = shift + m1;
        centre = m1;  // y uses (x - shift) - m1: rounding mean to W would cost up to an ulp of x
        var = t.b * inv_n - m1 * m1;
        if (var < (W)0) var = (W)0;
      }
    }
    const W rstd = w_rsqrt(var + (W)eps);
    if (tid == 0) {
      if constexpr (!RMS) mean_out[row] = mean;
      rstd_out[row] = rstd;
    }
    auto write = [&](int64 idx, const W(&u)[VEC]) {
      W o[VEC], wv[VEC], bv[VEC];
      param_vec<W, P, VEC>(w, idx, (W)1, wv);
      if constexpr (!RMS) param_vec<W, P, VEC>(b, idx, (W)0, bv);
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        const W h = ((u[e] - shift) - centre) * rstd;
        o[e] = h * wv[e] + (RMS ? (W)0 : bv[e]);
      }
      store_vec<T, W, VEC>(q + idx, o);
    };
    if constexpr (ITEMS > 0) {
#pragma unroll
      for (int k = 0; k < ITEMS; ++k) {
        const int64 idx = k * step + (int64)tid * VEC;
        if (idx < n) {
          W u[VEC];
          unpack<W>(v[k], u);
          write(idx, u);
        }
      }
    } else {
      for (int64 idx = (int64)tid * VEC; idx < n; idx += step) {
        W u[VEC];
        load_vec<W, T, VEC>(p + idx, u);
        write(idx, u);
      }
    }
  }
}

// Input gradient of layer norm / RMS norm. g and gx have type G (T, or float for 16-bit T).
template <class T, class G, class P, int VEC, int ITEMS, bool WARP, bool RMS>
__global__ void __launch_bounds__(WARP ? 128 : 1024)
    norm_bwd(const G* __restrict__ g, const T* __restrict__ x, const P* __restrict__ w,
             const typename acc_type<T>::type* __restrict__ mean, const typename acc_type<T>::type* __restrict__ rstd,
             G* __restrict__ gx, int64 rows, int64 n) {
  typedef typename acc_type<T>::type W;
  constexpr int CACHE = ITEMS > 0 ? ITEMS : 1;
  IGNIS_SHARED_ARRAY(Two<W>, scratch2, warp_size);
  const int tid = Rows<WARP>::tid();
  const int64 step = (int64)Rows<WARP>::threads() * VEC;
  const W inv_n = (W)1 / (W)n;
  for (int64 row = Rows<WARP>::first(); row < rows; row += Rows<WARP>::step()) {
    const T* px = x + row * n;
    const G* pg = g + row * n;
    G* q = gx + row * n;
    const W m = RMS ? (W)0 : mean[row];
    const W r = rstd[row];
    Packed<T, VEC> xs[CACHE];  // the row of x and of g, in their data types
    Packed<G, VEC> gs[CACHE];
    // xhat and g * w of the pack at idx from x and g as W.
    auto prepare = [&](int64 idx, W(&h)[VEC], W(&gh)[VEC]) {
      W wv[VEC];
      param_vec<W, P, VEC>(w, idx, (W)1, wv);
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        h[e] = (h[e] - m) * r;
        gh[e] *= wv[e];
      }
    };
    auto load = [&](int64 idx, W(&h)[VEC], W(&gh)[VEC]) {
      load_vec<W, T, VEC>(px + idx, h);
      load_vec<W, G, VEC>(pg + idx, gh);
      prepare(idx, h, gh);
    };
    auto cached = [&](int k, int64 idx, W(&h)[VEC], W(&gh)[VEC]) {
      unpack<W>(xs[k], h);
      unpack<W>(gs[k], gh);
      prepare(idx, h, gh);
    };
    Two<W> t = two((W)0, (W)0);
    auto add = [&](const W(&h)[VEC], const W(&gh)[VEC]) {
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        t.a += gh[e];
        t.b += gh[e] * h[e];
      }
    };
    if constexpr (ITEMS > 0) {
#pragma unroll
      for (int k = 0; k < ITEMS; ++k) {
        const int64 idx = k * step + (int64)tid * VEC;
        if (idx < n) {
          load_packed<T, VEC>(px + idx, xs[k]);
          load_packed<G, VEC>(pg + idx, gs[k]);
          W h[VEC], gh[VEC];
          cached(k, idx, h, gh);
          add(h, gh);
        }
      }
    } else {
      for (int64 idx = (int64)tid * VEC; idx < n; idx += step) {
        W h[VEC], gh[VEC];
        load(idx, h, gh);
        add(h, gh);
      }
    }
    t = row_reduce<WARP, Sum2Op<W>>(t, scratch2);
    const W mean_g = RMS ? (W)0 : t.a * inv_n;
    const W mean_gh = t.b * inv_n;
    auto write = [&](int64 idx, const W(&h)[VEC], const W(&gh)[VEC]) {
      W o[VEC];
#pragma unroll
      for (int e = 0; e < VEC; ++e) o[e] = r * (gh[e] - mean_g - h[e] * mean_gh);
      store_vec<G, W, VEC>(q + idx, o);
    };
    if constexpr (ITEMS > 0) {
#pragma unroll
      for (int k = 0; k < ITEMS; ++k) {
        const int64 idx = k * step + (int64)tid * VEC;
        if (idx < n) {
          W h[VEC], gh[VEC];
          cached(k, idx, h, gh);
          write(idx, h, gh);
        }
      }
    } else {
      for (int64 idx = (int64)tid * VEC; idx < n; idx += step) {
        W h[VEC], gh[VEC];
        load(idx, h, gh);
        write(idx, h, gh);
      }
    }
  }
}

// Partial weight/bias gradients. Block (32, BY): lane tx owns the VEC columns starting at
// (blockIdx.x * 32 + tx) * VEC (16-byte loads of a row for every lane when VEC > 1), rows
// [blockIdx.y * rows_per_split, ...) of which thread row ty takes every BY-th. Writes
// pw[split * n + c] (and pb, when not null) in W. VEC > 1 needs g and x 16-byte aligned and n a
// multiple of VEC.
template <class T, class G, int VEC, bool RMS>
__global__ void __launch_bounds__(256)
    norm_param_partials(const G* __restrict__ g, const T* __restrict__ x,
                        const typename acc_type<T>::type* __restrict__ mean,
                        const typename acc_type<T>::type* __restrict__ rstd, typename acc_type<T>::type* __restrict__ pw,
                        typename acc_type<T>::type* __restrict__ pb, int64 rows, int64 n, int64 rows_per_split) {
  typedef typename acc_type<T>::type W;
  constexpr int MAX_BY = 8;  // the block has at most 256 threads
  IGNIS_SHARED_ARRAY(W, tile_w, MAX_BY * warp_size * VEC);
  IGNIS_SHARED_ARRAY(W, tile_b, MAX_BY * warp_size * VEC);
  const int tx = threadIdx.x, ty = threadIdx.y, by = blockDim.y;
  const int64 c = ((int64)blockIdx.x * warp_size + tx) * VEC;
  const int64 r0 = (int64)blockIdx.y * rows_per_split;
  const int64 r1 = r0 + rows_per_split < rows ? r0 + rows_per_split : rows;
  W aw[VEC], ab[VEC];
#pragma unroll
  for (int e = 0; e < VEC; ++e) aw[e] = ab[e] = (W)0;
  if (c < n) {
#pragma unroll 4
    for (int64 r = r0 + ty; r < r1; r += by) {
      W gv[VEC], xv[VEC];
      load_vec<W, G, VEC>(g + r * n + c, gv);
      load_vec<W, T, VEC>(x + r * n + c, xv);
      const W m = RMS ? (W)0 : mean[r];
      const W s = rstd[r];
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        const W h = RMS ? xv[e] * s : (xv[e] - m) * s;
        aw[e] += gv[e] * h;
        ab[e] += gv[e];
      }
    }
  }
  // Tile layout [ty][e][tx]: consecutive lanes hit consecutive words (no bank conflicts).
#pragma unroll
  for (int e = 0; e < VEC; ++e) {
    tile_w[(ty * VEC + e) * warp_size + tx] = aw[e];
    tile_b[(ty * VEC + e) * warp_size + tx] = ab[e];
  }
  __syncthreads();
  for (int half = by >> 1; half > 0; half >>= 1) {
    if (ty < half) {
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        tile_w[(ty * VEC + e) * warp_size + tx] += tile_w[((ty + half) * VEC + e) * warp_size + tx];
        tile_b[(ty * VEC + e) * warp_size + tx] += tile_b[((ty + half) * VEC + e) * warp_size + tx];
      }
    }
    __syncthreads();
  }
  if (ty == 0 && c < n) {
    W* qw = pw + (int64)blockIdx.y * n + c;
    W* qb = pb == nullptr ? nullptr : pb + (int64)blockIdx.y * n + c;
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      qw[e] = tile_w[e * warp_size + tx];
      if (qb != nullptr) qb[e] = tile_b[e * warp_size + tx];
    }
  }
}

// out[c] = sum over splits of partials[split * n + c], in split order, for the weight and (when
// not null) the bias. The loads of several splits are issued before they are added (unrolled),
// so many splits cost few memory latencies.
template <class W, class O>
__global__ void __launch_bounds__(256)
    norm_param_finish(const W* __restrict__ pw, const W* __restrict__ pb, O* __restrict__ gw, O* __restrict__ gb,
                      int64 splits, int64 n) {
  IGNIS_GRID_STRIDE_LOOP(c, n) {
    W sw = (W)0, sb = (W)0;
#pragma unroll 8
    for (int64 k = 0; k < splits; ++k) sw += pw[k * n + c];
    if (pb != nullptr) {
#pragma unroll 8
      for (int64 k = 0; k < splits; ++k) sb += pb[k * n + c];
    }
    gw[c] = cvt_out<O>(sw);
    if (pb != nullptr) gb[c] = cvt_out<O>(sb);
  }
}

// Backward of softmax (log_out false) or log-softmax (true) from the forward output y. g and
// gx have type G (T, or float for 16-bit T).
template <class T, class G, int VEC, int ITEMS, bool WARP>
__global__ void __launch_bounds__(WARP ? 128 : 1024)
    softmax_bwd(const G* __restrict__ g, const T* __restrict__ y, G* __restrict__ gx, int64 rows, int64 n,
                bool log_out) {
  typedef typename acc_type<T>::type W;
  constexpr int CACHE = ITEMS > 0 ? ITEMS : 1;
  IGNIS_SHARED_ARRAY(W, scratch, warp_size);
  const int tid = Rows<WARP>::tid();
  const int64 step = (int64)Rows<WARP>::threads() * VEC;
  for (int64 row = Rows<WARP>::first(); row < rows; row += Rows<WARP>::step()) {
    const T* py = y + row * n;
    const G* pg = g + row * n;
    G* q = gx + row * n;
    W ys[CACHE][VEC];
    W gs[CACHE][VEC];
    W s = (W)0;
    auto add = [&](const W(&yv)[VEC], const W(&gv)[VEC]) {
#pragma unroll
      for (int e = 0; e < VEC; ++e) s += log_out ? gv[e] : gv[e] * yv[e];
    };
    if constexpr (ITEMS > 0) {
#pragma unroll
      for (int k = 0; k < ITEMS; ++k) {
        const int64 idx = k * step + (int64)tid * VEC;
        if (idx < n) {
          load_vec<W, T, VEC>(py + idx, ys[k]);
          load_vec<W, G, VEC>(pg + idx, gs[k]);
          add(ys[k], gs[k]);
        }
      }
    } else {
      for (int64 idx = (int64)tid * VEC; idx < n; idx += step) {
        load_vec<W, T, VEC>(py + idx, ys[0]);
        load_vec<W, G, VEC>(pg + idx, gs[0]);
        add(ys[0], gs[0]);
      }
    }
    s = row_reduce<WARP, SumOp<W>>(s, scratch);
    auto write = [&](int64 idx, const W(&yv)[VEC], const W(&gv)[VEC]) {
      W o[VEC];
#pragma unroll
      for (int e = 0; e < VEC; ++e) o[e] = log_out ? gv[e] - w_exp(yv[e]) * s : yv[e] * (gv[e] - s);
      store_vec<G, W, VEC>(q + idx, o);
    };
    if constexpr (ITEMS > 0) {
#pragma unroll
      for (int k = 0; k < ITEMS; ++k) {
        const int64 idx = k * step + (int64)tid * VEC;
        if (idx < n) write(idx, ys[k], gs[k]);
      }
    } else {
      for (int64 idx = (int64)tid * VEC; idx < n; idx += step) {
        load_vec<W, T, VEC>(py + idx, ys[0]);
        load_vec<W, G, VEC>(pg + idx, gs[0]);
        write(idx, ys[0], gs[0]);
      }
    }
  }
}

}  // namespace ignis
