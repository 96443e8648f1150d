// cross_entropy.cu - softmax cross-entropy fused with log-softmax, forward and backward.
//
// logits: `rows` contiguous rows of C elements of T; targets: one class index (I = int32 or
// int64) per row. Math in W = acc_type<T>. With label smoothing eps (torch's definition):
//   lse_r  = log(sum_c exp(x_rc))                      (max-shifted, one pass: online update)
//   loss_r = (1 - eps) * (lse_r - x_r,t) + eps * (lse_r - sum_c x_rc / C)
// A row whose target equals ignore_index (when has_ignore) has loss 0 and gradient 0 and does not
// count towards the mean. A target outside [0, C) that is not ignored gives a NaN loss and a NaN
// gradient row: the kernels never stop to report it.
//
//   ce_fwd     one block per row: loss_r and lse_r (W);
//   ce_reduce  one block: sum of the row losses (or none) and the number of counted targets,
//              in a fixed order; writes the sum, the mean (sum / count), and/or the count;
//   ce_bwd     one block per row: grad_rc = s_r * (softmax_rc - eps / C - (1 - eps) [c == t]),
//              s_r = grad_loss[r] (per_row) or grad_loss[0] (/ *count for a mean; count may be
//              null).
#include "norm_loss.cuh"

namespace ignis {

// Running (maximum m, sum of exp(x - m)) over a stream of values; a NaN makes m NaN.
template <class W> IGNIS_DEV void lse_add(W& m, W& s, W v) {
  if (v > m) {
    s = s * w_exp(m - v) + (W)1;
    m = v;
  } else if (v != v) {
    m = v;
  } else if (v > Limits<W>::lowest()) {
    s += w_exp(v - m);
  }
}

IGNIS_DEV bool counted(int64 t, int64 ignore_index, bool has_ignore) {
  return !(has_ignore && t == ignore_index);
}

template <class T, class I, int VEC>
__global__ void __launch_bounds__(1024)
    ce_fwd(const T* __restrict__ logits, const I* __restrict__ targets, typename acc_type<T>::type* __restrict__ loss_rows,
           typename acc_type<T>::type* __restrict__ lse_out, int64 rows, int64 C, int64 ignore_index, bool has_ignore,
           double smoothing) {
  typedef typename acc_type<T>::type W;
  constexpr int unroll = VEC >= 8 ? 2 : 4;
  IGNIS_SHARED_ARRAY(W, scratch, warp_size);
  IGNIS_SHARED_ARRAY(Two<W>, scratch2, warp_size);
  for (int64 row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* p = logits + row * C;
    W m = Limits<W>::lowest(), s = (W)0, sx = (W)0;
    for_span<T, VEC, unroll>(p, 0, C, threadIdx.x, blockDim.x, [&](int64, T xv) {
      const W v = cvt_in<W>(xv);
      lse_add(m, s, v);
      sx += v;
    });
    const W top = block_reduce<MaxOp<W>>(m, scratch);
    const W scaled = m == Limits<W>::lowest() ? (W)0 : s * w_exp(m - top);
    const Two<W> t = block_reduce<Sum2Op<W>>(two(scaled, sx), scratch2);
    if (threadIdx.x == 0) {
      const W lse = w_is_finite(top) ? top + w_log(t.a) : w_nan<W>();
      const int64 target = (int64)targets[row];
      W loss;
      if (!counted(target, ignore_index, has_ignore)) {
        loss = (W)0;
      } else if (target < 0 || target >= C) {
        loss = w_nan<W>();
      } else {
        loss = lse - cvt_in<W>(p[target]);
        if (smoothing > 0.0) loss = (W)(1.0 - smoothing) * loss + (W)smoothing * (lse - t.b / (W)C);
      }
      loss_rows[row] = loss;
      lse_out[row] = lse;
    }
  }
}

// One block. out (when not null): the sum of loss_rows (mean: divided by the count); count_out
// (when not null): the number of targets that are not ignore_index. loss_rows may be null when
// only the count is wanted.
template <class W, class O, class I>
__global__ void __launch_bounds__(1024)
    ce_reduce(const W* __restrict__ loss_rows, const I* __restrict__ targets, O* __restrict__ out,
              int64* __restrict__ count_out, int64 rows, int64 ignore_index, bool has_ignore, bool mean) {
  IGNIS_SHARED_ARRAY(W, scratch, warp_size);
  IGNIS_SHARED_ARRAY(unsigned long long, scratch_n, warp_size);
  W s = (W)0;
  unsigned long long count = 0;
  for (int64 i = threadIdx.x; i < rows; i += blockDim.x) {
    if (loss_rows != nullptr) s += loss_rows[i];
    count += counted((int64)targets[i], ignore_index, has_ignore) ? 1ull : 0ull;
  }
  s = block_reduce<SumOp<W>>(s, scratch);
  count = block_reduce<SumOp<long long>>(count, scratch_n);
  if (threadIdx.x == 0) {
    if (count_out != nullptr) *count_out = (int64)count;
    if (out != nullptr) *out = cvt_out<O>(mean ? s / (W)count : s);
  }
}

// Visits the C elements of a row: the elements before the first 16-byte boundary and after the
// last one singly (one(index, value)), the rest as packs of VEC (pack(index, Pack)), two packs
// in flight per thread.
template <class T, int VEC, class One, class Many>
IGNIS_DEV void visit_row(const T* row, int64 n, int tid, int nthreads, One&& one, Many&& pack) {
  int64 start = 0;
  if constexpr (VEC > 1) {
    const uint64 addr = (uint64)row;
    int64 head = (int64)(((16u - (unsigned)(addr & 15u)) & 15u) / sizeof(T));
    if (head > n) head = n;
    if (tid < head) one(tid, row[tid]);
    start = head;
  }
  const int64 packs = (n - start) / VEC;
  const T* base = row + start;
  int64 j = tid;
  for (; j + nthreads < packs; j += 2 * (int64)nthreads) {
    const Pack<T, VEC> a = load_pack<T, VEC>(base + j * VEC);
    const Pack<T, VEC> b = load_pack<T, VEC>(base + (j + nthreads) * VEC);
    pack(start + j * VEC, a);
    pack(start + (j + nthreads) * VEC, b);
  }
  for (; j < packs; j += nthreads) pack(start + j * VEC, load_pack<T, VEC>(base + j * VEC));
  if constexpr (VEC > 1) {
    const int64 t = start + packs * VEC + tid;
    if (t < n) one(t, row[t]);
  }
}

// grad rows have the same alignment as logits rows (modulo 16 bytes) when VEC > 1.
template <class T, class I, int VEC>
__global__ void __launch_bounds__(1024)
    ce_bwd(const typename acc_type<T>::type* __restrict__ grad_loss, const int64* __restrict__ count,
           const T* __restrict__ logits, const I* __restrict__ targets, const typename acc_type<T>::type* __restrict__ lse,
           T* __restrict__ grad, int64 rows, int64 C, int64 ignore_index, bool has_ignore, double smoothing,
           bool per_row) {
  typedef typename acc_type<T>::type W;
  const W on = (W)(1.0 - smoothing);
  const W off = (W)(smoothing / (double)C);
  for (int64 row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* p = logits + row * C;
    T* q = grad + row * C;
    const int64 target = (int64)targets[row];
    W scale = per_row ? grad_loss[row] : grad_loss[0];
    if (count != nullptr) scale /= (W)*count;
    const bool skip = !counted(target, ignore_index, has_ignore);
    const bool bad = !skip && (target < 0 || target >= C);
    const W l = lse[row];
    auto value = [&](int64 c, T xv) -> W {
      if (skip) return (W)0;
      if (bad) return w_nan<W>();
      const W d = w_exp(cvt_in<W>(xv) - l) - off - (c == target ? on : (W)0);
      return scale * d;
    };
    visit_row<T, VEC>(
        p, C, threadIdx.x, blockDim.x, [&](int64 c, T xv) { q[c] = cvt_out<T>(value(c, xv)); },
        [&](int64 c, const Pack<T, VEC>& pk) {
          T o[VEC];
#pragma unroll
          for (int e = 0; e < VEC; ++e) o[e] = cvt_out<T>(value(c + e, pk.e[e]));
          store_values<T, VEC>(q + c, o);
        });
  }
}

}  // namespace ignis
