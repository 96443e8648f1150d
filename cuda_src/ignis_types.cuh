// ignis_types.cuh - common definitions of the ignis kernel library.
//
// Self-contained on purpose: NVRTC as shipped in the Python wheels has no CUDA toolkit headers
// (no <cstdint>, no cuda_fp16.h), so this file includes nothing. It provides
//   * fixed-width integers: ignis::int8 ... ignis::uint64;
//   * 16-bit float storage: ignis::float16 and ignis::bfloat16 (arithmetic is done in float),
//     constructible from float, double and integers like CUDA's __half / __nv_bfloat16
//     (ignis::bfloat16 y(x), ignis::float16(0.5f)), rounding to nearest even, and converting
//     back to float implicitly (float f = y); from raw bits with float16::from_bits(b);
//   * acc_type<T> / to_acc / from_acc<T>: the type a kernel computes in for element type T;
//   * 64-bit grid-stride indexing macros and warp-level sum/max/min.
// Kernels typically start with:
//   #include "ignis_types.cuh"
//   using namespace ignis;
// The integer-only parts, the 16-bit types and their constructors also compile as plain host C++
// (without __CUDACC__), which is how their rounding is checked on machines without a GPU.
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

IGNIS_HD constexpr int64 ceil_div(int64 a, int64 b) { return (a + b - 1) / b; }

namespace detail {
// float bits -> bfloat16 bits, round to nearest, ties to even. A NaN stays a NaN (made quiet,
// sign kept); overflow rounds to infinity as IEEE requires.
IGNIS_HD uint16 f32_bits_to_bf16_bits(uint32 u) {
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16)((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16)(u >> 16);
}

// Bit casts; the host side (tests, emulators) has no CUDA intrinsics and no <cstring>.
IGNIS_HD uint32 bits_of(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32 u;
  __builtin_memcpy(&u, &f, sizeof u);
  return u;
#endif
}
IGNIS_HD uint64 bits_of(double d) {
#if defined(__CUDA_ARCH__)
  return (uint64)__double_as_longlong(d);
#else
  uint64 u;
  __builtin_memcpy(&u, &d, sizeof u);
  return u;
#endif
}
IGNIS_HD float float_of(uint32 u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  __builtin_memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// Bits needed for m > 0 (1 + the index of its highest set bit).
IGNIS_HD int bit_length(uint64 m) {
#if defined(__CUDA_ARCH__)
  return 64 - __clzll((long long)m);
#else
  return 64 - __builtin_clzll(m);
#endif
}

// m * 2^e (m > 0) rounded to nearest, ties to even, in the binary format with MANT stored
// significand bits and EXP exponent bits: the format's bits without the sign. Subnormal results
// and overflow to infinity as IEEE 754 defines them. Exact integer arithmetic: one rounding,
// whatever the source (float, double, 64-bit integers), so no double rounding anywhere.
template <int MANT, int EXP>
IGNIS_HD uint16 round_to_format(uint64 m, int e) {
  const int bias = (1 << (EXP - 1)) - 1;
  const int emin = 1 - bias;                    // exponent of the smallest normal number
  const int top = bit_length(m) - 1 + e;        // m * 2^e lies in [2^top, 2^(top + 1))
  const int expo = top < emin ? emin : top;     // the result's exponent (emin: subnormal)
  const int shift = expo - MANT - e;            // bits of m below the result's last bit
  uint64 s;                                     // the significand, hidden bit included
  if (shift <= 0) {
    s = m << -shift;  // exact: fewer than MANT + 1 bits
  } else if (shift >= 64) {
    s = (shift == 64 && m > (1ull << 63)) ? 1 : 0;  // below half the last bit, or just above
  } else {
    s = m >> shift;
    const uint64 rest = m & ((1ull << shift) - 1), half = 1ull << (shift - 1);
    if (rest > half || (rest == half && (s & 1))) ++s;
  }
  // A significand rounded up to 2^(MANT + 1) carries into the exponent field by this sum, and a
  // subnormal one rounded up to 2^MANT becomes the smallest normal number.
  const uint32 out = ((uint32)(expo + bias - 1) << MANT) + (uint32)s;
  const uint32 inf = ((1u << EXP) - 1) << MANT;
  return (uint16)(out >= inf ? inf : out);
}

// Sources for round_to_format: an IEEE float/double or an integer, with its sign (0 or 0x8000).
// NaN becomes the quiet NaN of the format, sign kept.
template <int MANT, int EXP>
IGNIS_HD uint16 from_f32_bits(uint32 u) {
  const uint16 sign = (uint16)((u >> 16) & 0x8000u);
  const uint32 a = u & 0x7fffffffu, exponent = a >> 23, man = a & 0x7fffffu;
  const uint32 inf = ((1u << EXP) - 1) << MANT;
  if (exponent == 0xffu) return (uint16)(sign | inf | (man ? 1u << (MANT - 1) : 0u));
  if (a == 0) return sign;
  const uint64 m = exponent ? (man | 0x800000u) : man;
  return (uint16)(sign | round_to_format<MANT, EXP>(m, (exponent ? (int)exponent : 1) - 150));
}
template <int MANT, int EXP>
IGNIS_HD uint16 from_f64(double d) {
  const uint64 u = bits_of(d);
  const uint16 sign = (uint16)((u >> 48) & 0x8000u);
  const uint64 a = u & 0x7fffffffffffffffull, man = a & 0xfffffffffffffull;
  const int exponent = (int)(a >> 52);
  const uint32 inf = ((1u << EXP) - 1) << MANT;
  if (exponent == 0x7ff) return (uint16)(sign | inf | (man ? 1u << (MANT - 1) : 0u));
  if (a == 0) return sign;
  const uint64 m = exponent ? (man | (1ull << 52)) : man;
  return (uint16)(sign | round_to_format<MANT, EXP>(m, (exponent ? exponent : 1) - 1075));
}
template <int MANT, int EXP>
IGNIS_HD uint16 from_uint64(uint64 v) {
  return v ? round_to_format<MANT, EXP>(v, 0) : (uint16)0;
}
template <int MANT, int EXP>
IGNIS_HD uint16 from_int64(int64 v) {
  // The magnitude in unsigned arithmetic: -(-2^63) does not exist as an int64.
  const uint64 magnitude = v < 0 ? 0ull - (uint64)v : (uint64)v;
  return (uint16)((v < 0 ? 0x8000u : 0u) | from_uint64<MANT, EXP>(magnitude));
}

// binary16 bits -> float (exact: every binary16 value is a float).
IGNIS_HD float f16_bits_to_float(uint16 h) {
  const uint32 sign = (uint32)(h & 0x8000u) << 16;
  const uint32 exponent = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exponent == 0x1fu) return float_of(sign | 0x7f800000u | (man << 13));  // inf, NaN
  if (exponent != 0) return float_of(sign | ((exponent + 112u) << 23) | (man << 13));
  if (man == 0) return float_of(sign);
  // Subnormal: man * 2^-24, normal as a float; shift the leading bit up to the hidden bit.
  const int n = bit_length(man);  // 1..10
  return float_of(sign | ((uint32)(n + 102) << 23) | ((man << (24 - n)) & 0x7fffffu));
}
}  // namespace detail

// IEEE binary16 and bfloat16: 2 bytes, same size and alignment as the NumPy / ml_dtypes element,
// distinct types so that templates and overloads can tell them apart. Like CUDA's __half and
// __nv_bfloat16 they are constructible from float, double and integers (implicitly: T x = 1.5f;
// T(x); T y(x)), rounding to nearest even exactly once, and convert back to float implicitly,
// exactly. Arithmetic happens in float: float16 c = float(a) * float(b). The default constructor
// leaves the bits uninitialized (trivial: usable in __shared__ arrays and unions); T{} is +0.
//
// A float16 from raw bits is float16::from_bits(b). The constructor from unsigned short
// (= ignis::uint16) is deleted on purpose: float16{bits} used to mean "these bits" when the
// types were plain structs, and a value conversion would now silently change what such code does.
struct alignas(2) float16 {
  uint16 bits;
  float16() = default;
  IGNIS_HD float16(float f);  // same bits as float_to_half(f)
  IGNIS_HD float16(double d) : bits(detail::from_f64<10, 5>(d)) {}
  IGNIS_HD float16(int v) : bits(detail::from_int64<10, 5>(v)) {}
  IGNIS_HD float16(long v) : bits(detail::from_int64<10, 5>(v)) {}
  IGNIS_HD float16(long long v) : bits(detail::from_int64<10, 5>(v)) {}
  IGNIS_HD float16(short v) : bits(detail::from_int64<10, 5>(v)) {}
  IGNIS_HD float16(unsigned v) : bits(detail::from_uint64<10, 5>(v)) {}
  IGNIS_HD float16(unsigned long v) : bits(detail::from_uint64<10, 5>(v)) {}
  IGNIS_HD float16(unsigned long long v) : bits(detail::from_uint64<10, 5>(v)) {}
  float16(unsigned short bits_or_value) = delete;  // ambiguous: use from_bits(b) or float(v)
  IGNIS_HD operator float() const;                 // same value as to_float(h)
  static IGNIS_HD float16 from_bits(uint16 b) {
    float16 h;
    h.bits = b;
    return h;
  }
};
struct alignas(2) bfloat16 {
  uint16 bits;
  bfloat16() = default;
  IGNIS_HD bfloat16(float f);  // same bits as float_to_bf16(f)
  IGNIS_HD bfloat16(double d) : bits(detail::from_f64<7, 8>(d)) {}
  IGNIS_HD bfloat16(int v) : bits(detail::from_int64<7, 8>(v)) {}
  IGNIS_HD bfloat16(long v) : bits(detail::from_int64<7, 8>(v)) {}
  IGNIS_HD bfloat16(long long v) : bits(detail::from_int64<7, 8>(v)) {}
  IGNIS_HD bfloat16(short v) : bits(detail::from_int64<7, 8>(v)) {}
  IGNIS_HD bfloat16(unsigned v) : bits(detail::from_uint64<7, 8>(v)) {}
  IGNIS_HD bfloat16(unsigned long v) : bits(detail::from_uint64<7, 8>(v)) {}
  IGNIS_HD bfloat16(unsigned long long v) : bits(detail::from_uint64<7, 8>(v)) {}
  bfloat16(unsigned short bits_or_value) = delete;  // ambiguous: use from_bits(b) or float(v)
  // bfloat16 is the top half of a float: widening is exact.
  IGNIS_HD operator float() const { return detail::float_of((uint32)bits << 16); }
  static IGNIS_HD bfloat16 from_bits(uint16 b) {
    bfloat16 h;
    h.bits = b;
    return h;
  }
};
static_assert(sizeof(float16) == 2 && sizeof(bfloat16) == 2, "ignis: 16-bit floats must be 2 bytes");

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

// The constructors from float and the conversion back to float: on the device the conversion
// functions above (the hardware instructions), in host code the same rounding in integer
// arithmetic (tests compare the two bit for bit).
IGNIS_HD float16::float16(float f)
#if defined(__CUDA_ARCH__)
    : bits(float_to_half(f).bits) {}
#else
    : bits(detail::from_f32_bits<10, 5>(detail::bits_of(f))) {}
#endif
IGNIS_HD float16::operator float() const {
#if defined(__CUDA_ARCH__)
  return to_float(*this);
#else
  return detail::f16_bits_to_float(bits);
#endif
}
IGNIS_HD bfloat16::bfloat16(float f)
#if defined(__CUDA_ARCH__)
    : bits(float_to_bf16(f).bits) {}
#else
    : bits(detail::f32_bits_to_bf16_bits(detail::bits_of(f))) {}
#endif

}  // namespace ignis

#if defined(__CUDACC__)
// for (int64 i = first index of this thread; i < n; i += all threads of the grid)
#define IGNIS_GRID_STRIDE_LOOP(i, n) \
  for (::ignis::int64 i = ::ignis::global_index(); i < (::ignis::int64)(n); i += ::ignis::grid_stride())
#endif
