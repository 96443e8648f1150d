// random.cu - ignis.random's streams on the GPU, equal to the host reference of
// ignis/_array/random.py (uniform and integer values bit for bit; normal values up to the last-ulp
// differences of the device's double log/cos/sin before the rounding to float32).
//
// Every kernel gets the stream's key (k0, k1), the call's first block `offset` and the element
// count n, and runs one thread per Philox block in a grid-stride loop: block j of the call
// gives the elements whose words it holds (4 / words-per-element of them, or two Box-Muller
// pairs for normal values).
//
// Each kind also has a `_from_state` kernel for captured CUDA graphs: it reads the key and the
// base block from a device buffer {seed, base block} (philox.cuh: stream_from_state), which the
// host rewrites with store_state before each replay, so a replayed graph draws new numbers.
#include "elementwise.cuh"
#include "philox.cuh"

namespace ignis {
namespace rng {

// Uniform [0, 1): float32 (w >> 8) 2**-24, float16 (w >> 21) 2**-11, bfloat16 (w >> 24) 2**-8,
// one word each (exact in the type); float64 from 53 bits of two words.
template <class T> IGNIS_DEV T uniform_one(uint32 w) {
  if constexpr (ew::same_type<T, float16>::value) return float_to_half((float)(w >> 21) * 0x1p-11f);
  else if constexpr (ew::same_type<T, bfloat16>::value) return float_to_bf16((float)(w >> 24) * 0x1p-8f);
  else return (float)(w >> 8) * 0x1p-24f;
}

template <class T> IGNIS_DEV void uniform_all(T* out, int64 n, uint32 k0, uint32 k1, uint64 offset) {
  if constexpr (ew::same_type<T, double>::value) {
    const int64 blocks = (n + 1) / 2;
    IGNIS_GRID_STRIDE_LOOP(j, blocks) {
      Words r = stream_block(offset + (uint64)j, k0, k1);
      int64 i = 2 * j;
      out[i] = (double)bits53(r.w[0], r.w[1]) * 0x1p-53;
      if (i + 1 < n) out[i + 1] = (double)bits53(r.w[2], r.w[3]) * 0x1p-53;
    }
  } else {
    const int64 blocks = (n + 3) / 4;
    IGNIS_GRID_STRIDE_LOOP(j, blocks) {
      Words r = stream_block(offset + (uint64)j, k0, k1);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        int64 i = 4 * j + e;
        if (i < n) out[i] = uniform_one<T>(r.w[e]);
      }
    }
  }
}

template <class T> __global__ void uniform(T* out, int64 n, uint32 k0, uint32 k1, uint64 offset) {
  uniform_all<T>(out, n, k0, k1, offset);
}

template <class T> __global__ void uniform_from_state(T* out, int64 n, const uint64* __restrict__ state, uint64 offset) {
  const StreamPos at = stream_from_state(state, offset);
  uniform_all<T>(out, n, at.k0, at.k1, at.offset);
}

// Box-Muller in float64: u1 in (0, 1], u2 in [0, 1); returns (r cos t, r sin t).
IGNIS_DEV void box_muller(double u1, double u2, double& z0, double& z1) {
  double r = sqrt(-2.0 * log(u1));
  double t = 6.283185307179586 * u2;  // 2 pi, rounded once as in the reference
  z0 = r * cos(t);
  z1 = r * sin(t);
}

// float64 values as is; the others rounded to float32 first, then to the 16-bit type.
template <class T> IGNIS_DEV T normal_value(double z) {
  if constexpr (ew::same_type<T, double>::value) return z;
  else return ew::cast<T>((float)z);
}

template <class T> IGNIS_DEV void normal_all(T* out, int64 n, uint32 k0, uint32 k1, uint64 offset) {
  if constexpr (ew::same_type<T, double>::value) {
    // pair p (elements 2p, 2p+1) takes the four words of block p
    const int64 pairs = (n + 1) / 2;
    IGNIS_GRID_STRIDE_LOOP(p, pairs) {
      Words r = stream_block(offset + (uint64)p, k0, k1);
      double u1 = ((double)bits53(r.w[0], r.w[1]) + 1.0) * 0x1p-53;
      double u2 = (double)bits53(r.w[2], r.w[3]) * 0x1p-53;
      double z0, z1;
      box_muller(u1, u2, z0, z1);
      out[2 * p] = z0;
      if (2 * p + 1 < n) out[2 * p + 1] = z1;
    }
  } else {
    // block j holds the words of elements 4j .. 4j+3: pairs (4j, 4j+1) and (4j+2, 4j+3)
    const int64 blocks = (n + 3) / 4;
    IGNIS_GRID_STRIDE_LOOP(j, blocks) {
      Words r = stream_block(offset + (uint64)j, k0, k1);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        int64 i = 4 * j + 2 * h;
        if (i < n) {
          double u1 = ((double)(r.w[2 * h] >> 8) + 1.0) * 0x1p-24;
          double u2 = (double)(r.w[2 * h + 1] >> 8) * 0x1p-24;
          double z0, z1;
          box_muller(u1, u2, z0, z1);
          out[i] = normal_value<T>(z0);
          if (i + 1 < n) out[i + 1] = normal_value<T>(z1);
        }
      }
    }
  }
}

template <class T> __global__ void normal(T* out, int64 n, uint32 k0, uint32 k1, uint64 offset) {
  normal_all<T>(out, n, k0, k1, offset);
}

template <class T> __global__ void normal_from_state(T* out, int64 n, const uint64* __restrict__ state, uint64 offset) {
  const StreamPos at = stream_from_state(state, offset);
  normal_all<T>(out, n, at.k0, at.k1, at.offset);
}

// Integers in [low, low + span), span = span_m1 + 1 (span_m1 = 2**64 - 1 stands for 2**64).
// WIDE false: span <= 2**32, low + ((w * span) >> 32), one word per element.
// WIDE true: low + (((w0 << 32) | w1) mod span), two words per element.
template <class T, bool WIDE>
IGNIS_DEV void integers_all(T* out, int64 n, uint32 k0, uint32 k1, uint64 offset, int64 low, uint64 span_m1) {
  if constexpr (WIDE) {
    const int64 blocks = (n + 1) / 2;
    IGNIS_GRID_STRIDE_LOOP(j, blocks) {
      Words r = stream_block(offset + (uint64)j, k0, k1);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        int64 i = 2 * j + h;
        if (i < n) {
          uint64 x = ((uint64)r.w[2 * h] << 32) | (uint64)r.w[2 * h + 1];
          uint64 v = span_m1 == ~0ull ? x : x % (span_m1 + 1);
          out[i] = ew::cast<T>((int64)((uint64)low + v));
        }
      }
    }
  } else {
    const uint64 span = span_m1 + 1;
    const int64 blocks = (n + 3) / 4;
    IGNIS_GRID_STRIDE_LOOP(j, blocks) {
      Words r = stream_block(offset + (uint64)j, k0, k1);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        int64 i = 4 * j + e;
        if (i < n) {
          uint64 v = ((uint64)r.w[e] * span) >> 32;
          out[i] = ew::cast<T>((int64)((uint64)low + v));
        }
      }
    }
  }
}

template <class T, bool WIDE>
__global__ void integers(T* out, int64 n, uint32 k0, uint32 k1, uint64 offset, int64 low, uint64 span_m1) {
  integers_all<T, WIDE>(out, n, k0, k1, offset, low, span_m1);
}

template <class T, bool WIDE>
__global__ void integers_from_state(T* out, int64 n, const uint64* __restrict__ state, uint64 offset, int64 low,
                                    uint64 span_m1) {
  const StreamPos at = stream_from_state(state, offset);
  integers_all<T, WIDE>(out, n, at.k0, at.k1, at.offset, low, span_m1);
}

// Write a stream's (seed, base block) into the device state a captured graph reads: queued on
// the replay's stream just before the graph, so the graph's kernels see it and no earlier
// replay (ordered before it on that stream) does. One thread.
__global__ void store_state(uint64* state, uint64 seed, uint64 offset) {
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    state[0] = seed;
    state[1] = offset;
  }
}

}  // namespace rng
}  // namespace ignis
