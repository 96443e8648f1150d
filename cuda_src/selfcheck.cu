// selfcheck.cu - small kernels that check an installation end to end (python -m ignis).
#include "ignis_types.cuh"

using namespace ignis;

// y[i] = a * x[i] + y[i] for i < n.
extern "C" __global__ void ignis_selfcheck_axpy(float a, const float* x, float* y, int64 n) {
  IGNIS_GRID_STRIDE_LOOP(i, n) { y[i] = a * x[i] + y[i]; }
}

// Round-trips x through both 16-bit formats: half[i], bf16[i] hold the rounded values and
// back_half[i], back_bf16[i] the floats they stand for.
extern "C" __global__ void ignis_selfcheck_convert(const float* x, float16* half, bfloat16* bf16,
                                                   float* back_half, float* back_bf16, int64 n) {
  IGNIS_GRID_STRIDE_LOOP(i, n) {
    float16 h = float_to_half(x[i]);
    bfloat16 b = float_to_bf16(x[i]);
    half[i] = h;
    bf16[i] = b;
    back_half[i] = to_float(h);
    back_bf16[i] = to_float(b);
  }
}

// out[w] = sum and max of x[32 w : 32 w + 32] for each full warp w; n must be a multiple of 32
// and the launch must cover n threads with blockDim.x a multiple of 32 (one element per thread).
extern "C" __global__ void ignis_selfcheck_warp_reduce(const float* x, float* sums, float* maxes,
                                                       int64 n) {
  int64 i = global_index();
  if (i >= n) return;
  float s = warp_sum(x[i]);
  float m = warp_max(x[i]);
  if ((threadIdx.x & (warp_size - 1)) == 0) {
    sums[i / warp_size] = s;
    maxes[i / warp_size] = m;
  }
}
