// dropout.cu - dropout with its keep mask drawn in the kernel from the Philox stream of
// ignis.random (see philox.cuh and ignis/_array/random.py).
//
// Element i uses word i of the stream (seed, offset): lane i % 4 of block offset + i / 4, the
// word ignis.random.rand would turn into its float32 value u = (w >> 8) * 2**-24. The element is
// kept when u >= p, i.e. when (w >> 8) >= threshold = ceil(p * 2**24) (p as float32), so a mask
// equals rand(shape, dtype=float32) >= p drawn from the same stream. A call uses ceil(n / 4)
// blocks. Kept elements become x * scale computed in W (float for float16/bfloat16/float32,
// double for float64) and rounded once; dropped ones become 0. The mask is one byte (bool) each.
#include "philox.cuh"

namespace ignis {
namespace nn {

template <class T, class W>
__global__ void dropout_forward(const T* __restrict__ x, T* __restrict__ y, bool* __restrict__ mask, int64 n,
                                uint32 k0, uint32 k1, uint64 offset, uint32 threshold, W scale) {
  const int64 blocks = (n + 3) / 4;
  IGNIS_GRID_STRIDE_LOOP(j, blocks) {
    rng::Words r = rng::stream_block(offset + (uint64)j, k0, k1);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int64 i = 4 * j + e;
      if (i < n) {
        const bool keep = (r.w[e] >> 8) >= threshold;
        y[i] = from_acc<T>(keep ? (W)to_acc(x[i]) * scale : (W)0);
        mask[i] = keep;
      }
    }
  }
}

// grad_x = mask ? grad * scale : 0, in W, rounded once.
template <class T, class W>
__global__ void dropout_backward(const T* __restrict__ g, const bool* __restrict__ mask, T* __restrict__ out,
                                 int64 n, W scale) {
  IGNIS_GRID_STRIDE_LOOP(i, n) { out[i] = from_acc<T>(mask[i] ? (W)to_acc(g[i]) * scale : (W)0); }
}

}  // namespace nn
}  // namespace ignis
