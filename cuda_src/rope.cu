// rope.cu - rotary position embedding (RoPE) of x (rows, d) with rows = batch * seq.
//
// Row r = b * seq + s has position p = (positions ? positions[b * pos_batch_stride + s] : s)
// + offset. Pair i (0 <= i < d/2) rotates by the angle p * f_i with f_i = base**(-2i/d):
//   half-rotation layout (GPT-NeoX, Llama): the pair is (i, i + d/2);
//   interleaved layout (GPT-J):              the pair is (2i, 2i + 1);
//   y0 = x0 cos - x1 sin,  y1 = x1 cos + x0 sin   (inverse: sin negated, the transpose).
// f_i is computed in double and rounded to W; the angle, cos and sin are computed in W (float
// for float16/bfloat16/float32, double for float64) and every output is rounded once. A block
// is (bx, by) threads: by rows at a time, bx threads along the d/2 pairs of a row.
#include "ignis_types.cuh"

namespace ignis {
namespace nn {

IGNIS_DEV void sin_cos(float a, float* s, float* c) { sincosf(a, s, c); }
IGNIS_DEV void sin_cos(double a, double* s, double* c) { sincos(a, s, c); }

template <class T, class W, class P, bool INTERLEAVED, bool HAS_POS>
__global__ void rope(const T* __restrict__ x, T* __restrict__ y, const P* __restrict__ positions, int64 rows,
                     int64 seq, int64 pos_batch_stride, int64 half, int64 offset, double log2_base, bool inverse) {
  const int64 row_step = (int64)gridDim.x * blockDim.y;
  const double step = -log2_base / (double)half;  // log2(f_i) = i * step
  for (int64 r = (int64)blockIdx.x * blockDim.y + threadIdx.y; r < rows; r += row_step) {
    const int64 b = r / seq;
    const int64 s = r - b * seq;
    int64 p = offset + s;
    if constexpr (HAS_POS) p = offset + (int64)positions[b * pos_batch_stride + s];
    const W wp = (W)p;
    const T* xr = x + r * 2 * half;
    T* yr = y + r * 2 * half;
    for (int64 i = threadIdx.x; i < half; i += blockDim.x) {
      const W f = (W)exp2((double)i * step);
      W sn, cs;
      sin_cos(wp * f, &sn, &cs);
      if (inverse) sn = -sn;
      const int64 i0 = INTERLEAVED ? 2 * i : i;
      const int64 i1 = INTERLEAVED ? 2 * i + 1 : i + half;
      const W a = (W)to_acc(xr[i0]);
      const W c = (W)to_acc(xr[i1]);
      yr[i0] = from_acc<T>(a * cs - c * sn);
      yr[i1] = from_acc<T>(c * cs + a * sn);
    }
  }
}

}  // namespace nn
}  // namespace ignis
