// ignis_types.cuh - common definitions of the ignis kernel library.
//
// Self-contained on purpose: NVRTC as shipped in the Python wheels has no CUDA toolkit headers
// (no <cstdint>, no cuda_fp16.h), so this file includes nothing. It provides
//   * fixed-width integers: ignis::int8 ... ignis::uint64;
//   * 16-bit float storage: ignis::float16 and ignis::bfloat16 (bit containers; arithmetic is done
//     in float), with conversions to and from float, rounding to nearest even;
//   * acc_type<T> / to_acc / from_acc<T>: the type a kernel computes in for element type T;
//   * 64-bit grid-stride indexing macros and warp-level sum/max/min.
// Kernels typically start with:
//   #include "ignis_types.cuh"
//   using namespace ignis;
// The integer-only parts also compile as plain host C++ (without __CUDACC__), which is how the
// bfloat16 rounding is checked on machines without a GPU.
#pragma once

#if defined(__CUDACC__)
#define IGNIS_HD __host__ __device__ __forceinline__
#define IGNIS_DEV __device__ __forceinline__
#else
#define IGNIS_HD inline
#endif

namespace ignis {

typedef signed char int8;
typedef unsigned char uint8;
typedef short int16;
typedef unsigned short uint16;
typedef int int32;
typedef unsigned int uint32;
typedef long long int64;
typedef unsigned long long uint64;

static_assert(sizeof(int8) == 1 && sizeof(int16) == 2, "ignis: unexpected integer sizes");
static_assert(sizeof(int32) == 4 && sizeof(int64) == 8, "ignis: unexpected integer sizes");

// IEEE binary16 and bfloat16 as raw bits. Distinct types, so templates and overloads can tell
// them apart; same size and alignment as the NumPy / ml_dtypes element.
struct alignas(2) float16 {
  uint16 bits;
};
struct alignas(2) bfloat16 {
  uint16 bits;
};
static_assert(sizeof(float16) == 2 && sizeof(bfloat16) == 2, "ignis: 16-bit floats must be 2 bytes");

IGNIS_HD constexpr int64 ceil_div(int64 a, int64 b) { return (a + b - 1) / b; }

namespace detail {
// float bits -> bfloat16 bits, round to nearest, ties to even. A NaN stays a NaN (made quiet,
// sign kept); overflow rounds to infinity as IEEE requires.
IGNIS_HD uint16 f32_bits_to_bf16_bits(uint32 u) {
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16)((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16)(u >> 16);
}
}  // namespace detail

#if defined(__CUDACC__)

// --- 16-bit float conversions --------------------------------------------------------------

IGNIS_DEV float to_float(float16 h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h.bits));
  return f;
}

IGNIS_DEV float16 float_to_half(float f) {
  float16 h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(f));
  return h;
}

// bfloat16 is the top half of a float: widening is exact.
IGNIS_DEV float to_float(bfloat16 b) { return __uint_as_float((uint32)b.bits << 16); }

IGNIS_DEV bfloat16 float_to_bf16(float f) {
  bfloat16 b;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(b.bits) : "f"(f));
#else
  b.bits = detail::f32_bits_to_bf16_bits(__float_as_uint(f));
#endif
  return b;
}

// --- compute type ------------------------------------------------------------------------------

// The type arithmetic on T happens in: T itself, except float for the 16-bit floats.
template <class T> struct acc_type { typedef T type; };
template <> struct acc_type<float16> { typedef float type; };
template <> struct acc_type<bfloat16> { typedef float type; };

template <class T> IGNIS_DEV T to_acc(T v) { return v; }
IGNIS_DEV float to_acc(float16 v) { return to_float(v); }
IGNIS_DEV float to_acc(bfloat16 v) { return to_float(v); }

template <class T> IGNIS_DEV T from_acc(typename acc_type<T>::type v) { return v; }
template <> IGNIS_DEV float16 from_acc<float16>(float v) { return float_to_half(v); }
template <> IGNIS_DEV bfloat16 from_acc<bfloat16>(float v) { return float_to_bf16(v); }

// --- indexing ----------------------------------------------------------------------------------

// 64-bit so that arrays beyond 2**31 elements index correctly.
IGNIS_DEV int64 global_index() { return (int64)blockIdx.x * blockDim.x + threadIdx.x; }
IGNIS_DEV int64 grid_stride() { return (int64)gridDim.x * blockDim.x; }

// --- warp reductions (all 32 lanes must take part; every lane gets the result) -----------------

constexpr int warp_size = 32;
constexpr unsigned full_warp_mask = 0xffffffffu;

// Maximum that propagates NaN (like NumPy's maximum); for integers a plain maximum.
template <class T> IGNIS_DEV T nan_max(T a, T b) { return (b > a || b != b) ? b : a; }
template <class T> IGNIS_DEV T nan_min(T a, T b) { return (b < a || b != b) ? b : a; }

// T: int, unsigned, long long, unsigned long long, float or double.
template <class T> IGNIS_DEV T warp_sum(T v) {
  for (int offset = warp_size / 2; offset > 0; offset >>= 1)
    v += __shfl_xor_sync(full_warp_mask, v, offset);
  return v;
}
template <class T> IGNIS_DEV T warp_max(T v) {
  for (int offset = warp_size / 2; offset > 0; offset >>= 1)
    v = nan_max(v, __shfl_xor_sync(full_warp_mask, v, offset));
  return v;
}
template <class T> IGNIS_DEV T warp_min(T v) {
  for (int offset = warp_size / 2; offset > 0; offset >>= 1)
    v = nan_min(v, __shfl_xor_sync(full_warp_mask, v, offset));
  return v;
}

#endif  // __CUDACC__

}  // namespace ignis

#if defined(__CUDACC__)
// for (int64 i = first index of this thread; i < n; i += all threads of the grid)
#define IGNIS_GRID_STRIDE_LOOP(i, n) \
  for (::ignis::int64 i = ::ignis::global_index(); i < (::ignis::int64)(n); i += ::ignis::grid_stride())
#endif
