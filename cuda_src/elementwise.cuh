// elementwise.cuh - building blocks of the elementwise kernels (namespace ignis::ew):
//   * element traits and cast<To>(from): conversions between every pair of element types that
//     round like NumPy / ml_dtypes (one rounding, float -> integer through int64 so that
//     out-of-range values wrap as NumPy's casts do on x86);
//   * the op functors of the unary and binary ops, computing in the "work" type W (float for the
//     16-bit floats, the element type otherwise) with wrap-around integer arithmetic;
//   * Pack<T, V>: V elements moved with one 1..16-byte load or store;
//   * StridedArgs<NARG>: shape and byte strides of up to 8 dims of NARG operands, passed to a
//     kernel by value, and offsets<>() turning a linear index into per-operand byte offsets
//     (32-bit magic-number division below 2**31 elements, 64-bit division above);
//   * DivWalk: quotient and remainder of a grid-stride index by a run length, kept up to date
//     without dividing (the broadcast kernels' row and column positions).
//   * complex64/complex128 (complex.cuh): casts to and from the real types (NumPy's: a real
//     value gets a zero imaginary part, a complex one going real keeps its real part) and the
//     complex branches of the functors the op table marks as taking complex operands.
// Self-contained apart from ignis_types.cuh and complex.cuh: NVRTC here has no CUDA or C++
// standard headers.
#pragma once

#include "ignis_types.cuh"
#include "complex.cuh"

#if defined(__CUDACC__)

namespace ignis {
namespace ew {

// --- traits ------------------------------------------------------------------------------------

template <class A, class B> struct same_type { static constexpr bool value = false; };
template <class A> struct same_type<A, A> { static constexpr bool value = true; };

enum Kind { kBool = 0, kSigned = 1, kUnsigned = 2, kFloat = 3, kHalf = 4, kComplex = 5 };

// kind, and for integers the unsigned type of the same width (wrap-around arithmetic).
template <class T> struct info;
template <> struct info<bool> { static constexpr int kind = kBool; typedef uint8 utype; };
template <> struct info<int8> { static constexpr int kind = kSigned; typedef uint8 utype; };
template <> struct info<int16> { static constexpr int kind = kSigned; typedef uint16 utype; };
template <> struct info<int32> { static constexpr int kind = kSigned; typedef uint32 utype; };
template <> struct info<int64> { static constexpr int kind = kSigned; typedef uint64 utype; };
template <> struct info<uint8> { static constexpr int kind = kUnsigned; typedef uint8 utype; };
template <> struct info<uint16> { static constexpr int kind = kUnsigned; typedef uint16 utype; };
template <> struct info<uint32> { static constexpr int kind = kUnsigned; typedef uint32 utype; };
template <> struct info<uint64> { static constexpr int kind = kUnsigned; typedef uint64 utype; };
template <> struct info<float> { static constexpr int kind = kFloat; typedef uint32 utype; };
template <> struct info<double> { static constexpr int kind = kFloat; typedef uint64 utype; };
template <> struct info<float16> { static constexpr int kind = kHalf; typedef uint16 utype; };
template <> struct info<bfloat16> { static constexpr int kind = kHalf; typedef uint16 utype; };
template <> struct info<complex64> { static constexpr int kind = kComplex; typedef uint64 utype; };
template <> struct info<complex128> { static constexpr int kind = kComplex; typedef uint64 utype; };

template <class T> constexpr bool is_float_v = info<T>::kind == kFloat;
template <class T> constexpr bool is_signed_v = info<T>::kind == kSigned;
template <class T> constexpr bool is_integer_v = info<T>::kind == kSigned || info<T>::kind == kUnsigned;
template <class T> constexpr bool is_complex_v = info<T>::kind == kComplex;

// --- conversions -------------------------------------------------------------------------------

// double -> float rounded to odd: exact when representable, else the truncated value with its
// last bit set. Rounding that float to a type of at most 22 significant bits gives the same
// result as rounding the double directly (the odd bit keeps "above halfway" visible).
IGNIS_DEV float f64_to_f32_round_odd(double d) {
  float f;
  asm("cvt.rz.f32.f64 %0, %1;" : "=f"(f) : "d"(d));
  if ((double)f != d) f = __uint_as_float(__float_as_uint(f) | 1u);  // NaN stays NaN
  return f;
}

template <class To, class From> struct Cast {
  static IGNIS_DEV To apply(From v) {
    constexpr int tk = info<To>::kind;
    constexpr int fk = info<From>::kind;
    if constexpr (same_type<To, From>::value) {
      return v;
    } else if constexpr (tk == kComplex && fk == kComplex) {  // complex64 <-> complex128
      typedef typename To::value_type R;
      return To(R(v.re), R(v.im));
    } else if constexpr (fk == kComplex) {  // to a real type: the real part; to bool: nonzero
      if constexpr (tk == kBool) return v.re != 0 || v.im != 0;
      else return Cast<To, typename From::value_type>::apply(v.re);
    } else if constexpr (tk == kComplex) {  // a real value: a zero imaginary part
      typedef typename To::value_type R;
      return To(Cast<R, From>::apply(v), R(0));
    } else if constexpr (fk == kHalf) {
      return Cast<To, float>::apply(to_float(v));  // exact widening first
    } else if constexpr (tk == kBool) {
      return v != From(0);  // NaN is true, as in NumPy
    } else if constexpr (fk == kBool) {
      return Cast<To, int32>::apply(v ? 1 : 0);
    } else if constexpr (same_type<To, float16>::value) {
      // NumPy rounds double -> half once; integers reach half exactly through float (an int
      // above 2**24 overflows half anyway).
      if constexpr (same_type<From, double>::value) return float_to_half(f64_to_f32_round_odd(v));
      else return float_to_half((float)v);
    } else if constexpr (same_type<To, bfloat16>::value) {
      return float_to_bf16((float)v);  // ml_dtypes converts double and integers through float
    } else if constexpr (tk != kFloat && fk == kFloat) {
      return (To)(int64)v;  // truncate, then wrap into narrow types like NumPy on x86
    } else {
      return (To)v;
    }
  }
};

template <class To, class From> IGNIS_DEV To cast(From v) { return Cast<To, From>::apply(v); }

// --- math on the work types (float or double) ----------------------------------------------------

IGNIS_DEV float m_exp(float x) { return expf(x); }
IGNIS_DEV double m_exp(double x) { return exp(x); }
IGNIS_DEV float m_log(float x) { return logf(x); }
IGNIS_DEV double m_log(double x) { return log(x); }
IGNIS_DEV float m_log1p(float x) { return log1pf(x); }
IGNIS_DEV double m_log1p(double x) { return log1p(x); }
IGNIS_DEV float m_expm1(float x) { return expm1f(x); }
IGNIS_DEV double m_expm1(double x) { return expm1(x); }
IGNIS_DEV float m_log2(float x) { return log2f(x); }
IGNIS_DEV double m_log2(double x) { return log2(x); }
IGNIS_DEV float m_log10(float x) { return log10f(x); }
IGNIS_DEV double m_log10(double x) { return log10(x); }
IGNIS_DEV float m_exp2(float x) { return exp2f(x); }
IGNIS_DEV double m_exp2(double x) { return exp2(x); }
IGNIS_DEV float m_atan2(float y, float x) { return atan2f(y, x); }
IGNIS_DEV double m_atan2(double y, double x) { return atan2(y, x); }
IGNIS_DEV float m_hypot(float x, float y) { return hypotf(x, y); }
IGNIS_DEV double m_hypot(double x, double y) { return hypot(x, y); }
IGNIS_DEV float m_copysign(float x, float y) { return copysignf(x, y); }
IGNIS_DEV double m_copysign(double x, double y) { return copysign(x, y); }
IGNIS_DEV float m_sqrt(float x) { return sqrtf(x); }
IGNIS_DEV double m_sqrt(double x) { return sqrt(x); }
IGNIS_DEV float m_sin(float x) { return sinf(x); }
IGNIS_DEV double m_sin(double x) { return sin(x); }
IGNIS_DEV float m_cos(float x) { return cosf(x); }
IGNIS_DEV double m_cos(double x) { return cos(x); }
IGNIS_DEV float m_tanh(float x) { return tanhf(x); }
IGNIS_DEV double m_tanh(double x) { return tanh(x); }
IGNIS_DEV float m_erf(float x) { return erff(x); }
IGNIS_DEV double m_erf(double x) { return erf(x); }
IGNIS_DEV float m_erfc(float x) { return erfcf(x); }
IGNIS_DEV double m_erfc(double x) { return erfc(x); }
IGNIS_DEV float m_abs(float x) { return fabsf(x); }
IGNIS_DEV double m_abs(double x) { return fabs(x); }
IGNIS_DEV float m_pow(float x, float y) { return powf(x, y); }
IGNIS_DEV double m_pow(double x, double y) { return pow(x, y); }

IGNIS_DEV float m_tan(float x) { return tanf(x); }
IGNIS_DEV double m_tan(double x) { return tan(x); }
IGNIS_DEV float m_asin(float x) { return asinf(x); }
IGNIS_DEV double m_asin(double x) { return asin(x); }
IGNIS_DEV float m_acos(float x) { return acosf(x); }
IGNIS_DEV double m_acos(double x) { return acos(x); }
IGNIS_DEV float m_atan(float x) { return atanf(x); }
IGNIS_DEV double m_atan(double x) { return atan(x); }
IGNIS_DEV float m_sinh(float x) { return sinhf(x); }
IGNIS_DEV double m_sinh(double x) { return sinh(x); }
IGNIS_DEV float m_cosh(float x) { return coshf(x); }
IGNIS_DEV double m_cosh(double x) { return cosh(x); }
IGNIS_DEV float m_asinh(float x) { return asinhf(x); }
IGNIS_DEV double m_asinh(double x) { return asinh(x); }
IGNIS_DEV float m_acosh(float x) { return acoshf(x); }
IGNIS_DEV double m_acosh(double x) { return acosh(x); }
IGNIS_DEV float m_atanh(float x) { return atanhf(x); }
IGNIS_DEV double m_atanh(double x) { return atanh(x); }
IGNIS_DEV float m_floor(float x) { return floorf(x); }
IGNIS_DEV double m_floor(double x) { return floor(x); }
IGNIS_DEV float m_ceil(float x) { return ceilf(x); }
IGNIS_DEV double m_ceil(double x) { return ceil(x); }
IGNIS_DEV float m_trunc(float x) { return truncf(x); }
IGNIS_DEV double m_trunc(double x) { return trunc(x); }
IGNIS_DEV float m_rint(float x) { return rintf(x); }
IGNIS_DEV double m_rint(double x) { return rint(x); }
IGNIS_DEV float m_fmod(float x, float y) { return fmodf(x, y); }
IGNIS_DEV double m_fmod(double x, double y) { return fmod(x, y); }
IGNIS_DEV float m_nextafter(float x, float y) { return nextafterf(x, y); }
IGNIS_DEV double m_nextafter(double x, double y) { return nextafter(x, y); }
IGNIS_DEV float m_log1p_exp_neg(float d) { return log1pf(expf(-d)); }
IGNIS_DEV double m_log1p_exp_neg(double d) { return log1p(exp(-d)); }
IGNIS_DEV bool m_signbit(float x) { return signbit(x); }
IGNIS_DEV bool m_signbit(double x) { return signbit(x); }
// The complex overloads of the functions the standard defines for complex operands (the
// functors that call m_<f> take complex work types through these).
#define IGNIS_EW_COMPLEX_MATH(F)                                            \
  IGNIS_DEV complex64 m_##F(complex64 x) { return c_##F(x); }               \
  IGNIS_DEV complex128 m_##F(complex128 x) { return c_##F(x); }
IGNIS_EW_COMPLEX_MATH(exp)
IGNIS_EW_COMPLEX_MATH(expm1)
IGNIS_EW_COMPLEX_MATH(log)
IGNIS_EW_COMPLEX_MATH(log1p)
IGNIS_EW_COMPLEX_MATH(log2)
IGNIS_EW_COMPLEX_MATH(log10)
IGNIS_EW_COMPLEX_MATH(sqrt)
IGNIS_EW_COMPLEX_MATH(sin)
IGNIS_EW_COMPLEX_MATH(cos)
IGNIS_EW_COMPLEX_MATH(tan)
IGNIS_EW_COMPLEX_MATH(sinh)
IGNIS_EW_COMPLEX_MATH(cosh)
IGNIS_EW_COMPLEX_MATH(tanh)
IGNIS_EW_COMPLEX_MATH(asin)
IGNIS_EW_COMPLEX_MATH(acos)
IGNIS_EW_COMPLEX_MATH(atan)
IGNIS_EW_COMPLEX_MATH(asinh)
IGNIS_EW_COMPLEX_MATH(acosh)
IGNIS_EW_COMPLEX_MATH(atanh)
#undef IGNIS_EW_COMPLEX_MATH

// Integer results wrap around: compute in the unsigned type of the same width.
template <class W> IGNIS_DEV W wrap(typename info<W>::utype v) { return (W)v; }
template <class W> IGNIS_DEV typename info<W>::utype uns(W v) { return (typename info<W>::utype)v; }

// a ** b for integers; a negative exponent gives the truncated 1 / a**|b| (see _semantics).
template <class W> IGNIS_DEV W int_pow(W a, W b) {
  typedef typename info<W>::utype U;
  if constexpr (is_signed_v<W>) {
    if (b < 0) return a == W(1) ? W(1) : (a == W(-1) ? ((b & 1) ? W(-1) : W(1)) : W(0));
  }
  U base = (U)a;
  U result = 1;
  uint64 e = (uint64)b;
  while (e) {
    if (e & 1u) result = (U)(result * base);
    base = (U)(base * base);
    e >>= 1;
  }
  return (W)result;
}

// --- binary op functors: static apply(W, W) -> W (bool for comparisons) -------------------------

struct op_add {
  template <class W> static IGNIS_DEV W apply(W a, W b) {
    if constexpr (info<W>::kind == kBool) return a || b;
    else if constexpr (is_integer_v<W>) return wrap<W>(uns(a) + uns(b));
    else return a + b;
  }
};
struct op_subtract {
  template <class W> static IGNIS_DEV W apply(W a, W b) {
    if constexpr (is_integer_v<W>) return wrap<W>(uns(a) - uns(b));
    else return a - b;
  }
};
struct op_multiply {
  template <class W> static IGNIS_DEV W apply(W a, W b) {
    if constexpr (info<W>::kind == kBool) return a && b;
    else if constexpr (is_integer_v<W>) return wrap<W>(uns(a) * uns(b));
    else return a * b;
  }
};
struct op_divide {  // floating work types only (integer division gives float64 in _semantics)
  template <class W> static IGNIS_DEV W apply(W a, W b) { return a / b; }
};
struct op_power {
  template <class W> static IGNIS_DEV W apply(W a, W b) {
    if constexpr (is_complex_v<W>) return c_pow(a, b);
    else if constexpr (is_float_v<W>) return m_pow(a, b);
    else return int_pow<W>(a, b);
  }
};
// NumPy's maximum/minimum: a NaN in either operand is the result.
struct op_maximum {
  template <class W> static IGNIS_DEV W apply(W a, W b) {
    if constexpr (is_float_v<W>) return (a >= b || a != a) ? a : b;
    else return a >= b ? a : b;
  }
};
struct op_minimum {
  template <class W> static IGNIS_DEV W apply(W a, W b) {
    if constexpr (is_float_v<W>) return (a <= b || a != a) ? a : b;
    else return a <= b ? a : b;
  }
};
// Floating functions of two operands (floating work types only: _semantics' "float" rule).
struct op_atan2 {
  template <class W> static IGNIS_DEV W apply(W a, W b) { return m_atan2(a, b); }
};
struct op_hypot {
  template <class W> static IGNIS_DEV W apply(W a, W b) { return m_hypot(a, b); }
};
struct op_copysign {
  template <class W> static IGNIS_DEV W apply(W a, W b) { return m_copysign(a, b); }
};
struct op_logaddexp {  // max + log1p(exp(-|a - b|)); equal infinities give themselves
  template <class W> static IGNIS_DEV W apply(W a, W b) {
    if (a != a || b != b) return a + b;
    W m = a > b ? a : b;
    if (a == b) return a + m_log1p_exp_neg(W(0));  // also +-inf == +-inf: no inf - inf
    W d = a > b ? a - b : b - a;
    return m + m_log1p_exp_neg(d);
  }
};
struct op_nextafter {
  template <class W> static IGNIS_DEV W apply(W a, W b) { return m_nextafter(a, b); }
};
// a // b and a % b with Python's signs (the remainder takes the divisor's), as NumPy's
// npy_divmod computes them for floats; integers give 0 for a zero divisor and wrap MIN // -1.
struct op_floor_divide {
  template <class W> static IGNIS_DEV W apply(W a, W b) {
    if constexpr (is_integer_v<W>) {
      if (b == W(0)) return W(0);
      if constexpr (is_signed_v<W>) {
        if (b == W(-1)) return wrap<W>((typename info<W>::utype)0 - uns(a));
        W q = a / b;
        return (a % b != W(0) && ((a < W(0)) != (b < W(0)))) ? W(q - W(1)) : q;
      } else {
        return a / b;
      }
    } else {
      if (b == W(0)) return a / b;
      W mod = m_fmod(a, b);
      W div = (a - mod) / b;
      if (mod != W(0) && ((b < W(0)) != (mod < W(0)))) div -= W(1);
      if (div == W(0)) return m_copysign(W(0), a / b);
      W fl = m_floor(div);
      return (div - fl > W(0.5)) ? fl + W(1) : fl;
    }
  }
};
struct op_remainder {
  template <class W> static IGNIS_DEV W apply(W a, W b) {
    if constexpr (is_integer_v<W>) {
      if (b == W(0)) return W(0);
      if constexpr (is_signed_v<W>) {
        if (b == W(-1)) return W(0);
        W r = a % b;
        return (r != W(0) && ((r < W(0)) != (b < W(0)))) ? W(r + b) : r;
      } else {
        return a % b;
      }
    } else {
      W mod = m_fmod(a, b);
      if (b == W(0)) return mod;  // NaN
      if (mod != W(0)) return ((b < W(0)) != (mod < W(0))) ? mod + b : mod;
      return m_copysign(W(0), b);
    }
  }
};
struct op_bitwise_and {
  template <class W> static IGNIS_DEV W apply(W a, W b) {
    if constexpr (same_type<W, bool>::value) return a && b;
    else return W(a & b);
  }
};
struct op_bitwise_or {
  template <class W> static IGNIS_DEV W apply(W a, W b) {
    if constexpr (same_type<W, bool>::value) return a || b;
    else return W(a | b);
  }
};
struct op_bitwise_xor {
  template <class W> static IGNIS_DEV W apply(W a, W b) {
    if constexpr (same_type<W, bool>::value) return a != b;
    else return W(a ^ b);
  }
};
// A shift count outside [0, bits) gives 0 (or -1 for a negative a shifted right): the same on
// every backend, where C++ leaves it undefined.
struct op_left_shift {
  template <class W> static IGNIS_DEV W apply(W a, W b) {
    constexpr int bits = int(sizeof(W) * 8);
    if constexpr (is_signed_v<W>) {
      if (b < W(0)) return W(0);
    }
    if (b >= W(bits)) return W(0);
    return wrap<W>((typename info<W>::utype)(uns(a) << (int)b));
  }
};
struct op_right_shift {
  template <class W> static IGNIS_DEV W apply(W a, W b) {
    constexpr int bits = int(sizeof(W) * 8);
    if constexpr (is_signed_v<W>) {
      if (b < W(0) || b >= W(bits)) return a < W(0) ? W(-1) : W(0);
    } else {
      if (b >= W(bits)) return W(0);
    }
    return W(a >> (int)b);
  }
};
struct op_logical_and {
  template <class W> static IGNIS_DEV bool apply(W a, W b) { return (a != W(0)) && (b != W(0)); }
};
struct op_logical_or {
  template <class W> static IGNIS_DEV bool apply(W a, W b) { return (a != W(0)) || (b != W(0)); }
};
struct op_logical_xor {
  template <class W> static IGNIS_DEV bool apply(W a, W b) { return (a != W(0)) != (b != W(0)); }
};
struct op_equal {
  template <class W> static IGNIS_DEV bool apply(W a, W b) { return a == b; }
};
struct op_not_equal {
  template <class W> static IGNIS_DEV bool apply(W a, W b) { return a != b; }
};
struct op_less {
  template <class W> static IGNIS_DEV bool apply(W a, W b) { return a < b; }
};
struct op_less_equal {
  template <class W> static IGNIS_DEV bool apply(W a, W b) { return a <= b; }
};
struct op_greater {
  template <class W> static IGNIS_DEV bool apply(W a, W b) { return a > b; }
};
struct op_greater_equal {
  template <class W> static IGNIS_DEV bool apply(W a, W b) { return a >= b; }
};

// --- unary op functors: static apply(W) -> W ---------------------------------------------------

struct op_neg {
  template <class W> static IGNIS_DEV W apply(W x) {
    if constexpr (is_integer_v<W>) return wrap<W>((typename info<W>::utype)0 - uns(x));
    else return -x;
  }
};
struct op_abs {  // complex: the real modulus (auto: the result type follows W)
  template <class W> static IGNIS_DEV auto apply(W x) {
    if constexpr (is_complex_v<W>) return c_abs(x);
    else if constexpr (is_float_v<W>) return m_abs(x);
    else if constexpr (is_signed_v<W>) return x < W(0) ? op_neg::apply(x) : x;
    else return x;  // bool, unsigned
  }
};
struct op_relu {  // NumPy's maximum(x, 0): NaN stays NaN
  template <class W> static IGNIS_DEV W apply(W x) {
    if constexpr (is_float_v<W>) return (x >= W(0) || x != x) ? x : W(0);
    else if constexpr (is_signed_v<W>) return x > W(0) ? x : W(0);
    else return x;
  }
};
struct op_tan {
  template <class W> static IGNIS_DEV W apply(W x) { return m_tan(x); }
};
struct op_asin {
  template <class W> static IGNIS_DEV W apply(W x) { return m_asin(x); }
};
struct op_acos {
  template <class W> static IGNIS_DEV W apply(W x) { return m_acos(x); }
};
struct op_atan {
  template <class W> static IGNIS_DEV W apply(W x) { return m_atan(x); }
};
struct op_sinh {
  template <class W> static IGNIS_DEV W apply(W x) { return m_sinh(x); }
};
struct op_cosh {
  template <class W> static IGNIS_DEV W apply(W x) { return m_cosh(x); }
};
struct op_asinh {
  template <class W> static IGNIS_DEV W apply(W x) { return m_asinh(x); }
};
struct op_acosh {
  template <class W> static IGNIS_DEV W apply(W x) { return m_acosh(x); }
};
struct op_atanh {
  template <class W> static IGNIS_DEV W apply(W x) { return m_atanh(x); }
};
// Rounding: integers (and bool) come back as they are.
#define IGNIS_EW_ROUNDING(NAME, FN)                                      \
  struct NAME {                                                          \
    template <class W> static IGNIS_DEV W apply(W x) {                   \
      if constexpr (is_float_v<W>) return FN(x);                         \
      else if constexpr (is_complex_v<W>) return W(FN(x.re), FN(x.im));  \
      else return x;                                                     \
    }                                                                    \
  };
IGNIS_EW_ROUNDING(op_floor, m_floor)
IGNIS_EW_ROUNDING(op_ceil, m_ceil)
IGNIS_EW_ROUNDING(op_trunc, m_trunc)
IGNIS_EW_ROUNDING(op_round, m_rint)
#undef IGNIS_EW_ROUNDING
struct op_sign {  // NaN stays NaN; -0 gives 0; complex: x / |x|
  template <class W> static IGNIS_DEV W apply(W x) {
    if constexpr (is_complex_v<W>) return c_sign(x);
    else if constexpr (is_float_v<W>) return x > W(0) ? W(1) : (x < W(0) ? W(-1) : 
                                                                   (x == W(0) ? W(0) : x));
    else if constexpr (is_signed_v<W>) return x > W(0) ? W(1) : (x < W(0) ? W(-1) : W(0));
    else return x > W(0) ? W(1) : W(0);
  }
};
struct op_square {
  template <class W> static IGNIS_DEV W apply(W x) { return op_multiply::apply(x, x); }
};
struct op_positive {
  template <class W> static IGNIS_DEV W apply(W x) { return x; }
};
struct op_zero {
  template <class W> static IGNIS_DEV W apply(W) { return W(0); }
};
// real, imag, conj: complex parts (real results for real/imag); real types as positive / zero.
struct op_real {
  template <class W> static IGNIS_DEV auto apply(W x) {
    if constexpr (is_complex_v<W>) return x.re;
    else return x;
  }
};
struct op_imag {
  template <class W> static IGNIS_DEV auto apply(W x) {
    if constexpr (is_complex_v<W>) return x.im;
    else return W(0);
  }
};
struct op_conj {
  template <class W> static IGNIS_DEV W apply(W x) {
    if constexpr (is_complex_v<W>) return c_conj(x);
    else return x;
  }
};
struct op_reciprocal {
  template <class W> static IGNIS_DEV W apply(W x) { return W(1) / x; }
};
struct op_bitwise_invert {
  template <class W> static IGNIS_DEV W apply(W x) {
    if constexpr (same_type<W, bool>::value) return !x;
    else return W(~x);
  }
};
// Predicates: bool out.
struct op_isnan {
  template <class W> static IGNIS_DEV bool apply(W x) {
    if constexpr (is_complex_v<W>) return c_isnan(x);
    else if constexpr (is_float_v<W>) return x != x;
    else return false;
  }
};
struct op_isinf {
  template <class W> static IGNIS_DEV bool apply(W x) {
    if constexpr (is_complex_v<W>) return c_isinf(x);
    else if constexpr (is_float_v<W>) return isinf(x);
    else return false;
  }
};
struct op_isfinite {
  template <class W> static IGNIS_DEV bool apply(W x) {
    if constexpr (is_complex_v<W>) return c_isfinite(x);
    else if constexpr (is_float_v<W>) return isfinite(x);
    else return true;
  }
};
struct op_signbit {
  template <class W> static IGNIS_DEV bool apply(W x) {
    if constexpr (is_float_v<W>) return m_signbit(x);
    else if constexpr (is_signed_v<W>) return x < W(0);
    else return false;
  }
};
struct op_logical_not {
  template <class W> static IGNIS_DEV bool apply(W x) { return x == W(0); }
};
struct op_exp {
  template <class W> static IGNIS_DEV W apply(W x) { return m_exp(x); }
};
struct op_log {
  template <class W> static IGNIS_DEV W apply(W x) { return m_log(x); }
};
struct op_log1p {
  template <class W> static IGNIS_DEV W apply(W x) { return m_log1p(x); }
};
struct op_expm1 {
  template <class W> static IGNIS_DEV W apply(W x) { return m_expm1(x); }
};
struct op_log2 {
  template <class W> static IGNIS_DEV W apply(W x) { return m_log2(x); }
};
struct op_log10 {
  template <class W> static IGNIS_DEV W apply(W x) { return m_log10(x); }
};
struct op_exp2 {
  template <class W> static IGNIS_DEV W apply(W x) { return m_exp2(x); }
};
struct op_sqrt {
  template <class W> static IGNIS_DEV W apply(W x) { return m_sqrt(x); }
};
struct op_rsqrt {  // correctly rounded sqrt, then a division: what 1 / sqrt(x) gives on the host
  template <class W> static IGNIS_DEV W apply(W x) { return W(1) / m_sqrt(x); }
};
struct op_sin {
  template <class W> static IGNIS_DEV W apply(W x) { return m_sin(x); }
};
struct op_cos {
  template <class W> static IGNIS_DEV W apply(W x) { return m_cos(x); }
};
struct op_tanh {
  template <class W> static IGNIS_DEV W apply(W x) { return m_tanh(x); }
};
struct op_erf {
  template <class W> static IGNIS_DEV W apply(W x) { return m_erf(x); }
};
struct op_sigmoid {  // exp of a non-positive argument only: no overflow for large |x|
  template <class W> static IGNIS_DEV W apply(W x) {
    W e = m_exp(-m_abs(x));
    return x >= W(0) ? W(1) / (W(1) + e) : e / (W(1) + e);
  }
};
struct op_silu {
  template <class W> static IGNIS_DEV W apply(W x) { return x * op_sigmoid::apply(x); }
};
struct op_gelu_tanh {  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
  template <class W> static IGNIS_DEV W apply(W x) {
    const W c = W(0.7978845608028654);
    W inner = c * (x + W(0.044715) * x * x * x);
    return W(0.5) * x * (W(1) + m_tanh(inner));
  }
};
struct op_gelu_erf {  // x Phi(x); Phi through erfc keeps its relative accuracy for x << 0
  template <class W> static IGNIS_DEV W apply(W x) {
    return x * (W(0.5) * m_erfc(-x * W(0.7071067811865476)));
  }
};

// --- vector access -------------------------------------------------------------------------------

template <int BYTES> struct raw_bits;
template <> struct raw_bits<1> { typedef uint8 type; };
template <> struct raw_bits<2> { typedef uint16 type; };
template <> struct raw_bits<4> { typedef uint32 type; };
template <> struct raw_bits<8> { typedef uint2 type; };
template <> struct raw_bits<16> { typedef uint4 type; };

// V elements of T as one naturally aligned load/store (ld.global.v4.u32 for 16 bytes).
template <class T, int V> union Pack {
  typename raw_bits<sizeof(T) * V>::type raw;
  T v[V];
};

template <class T, int V> IGNIS_DEV Pack<T, V> load_pack(const T* p, int64 vec_index) {
  Pack<T, V> pk;
  pk.raw = reinterpret_cast<const typename raw_bits<sizeof(T) * V>::type*>(p)[vec_index];
  return pk;
}

template <class T, int V> IGNIS_DEV void store_pack(T* p, int64 vec_index, const Pack<T, V>& pk) {
  reinterpret_cast<typename raw_bits<sizeof(T) * V>::type*>(p)[vec_index] = pk.raw;
}

// --- strided operands ------------------------------------------------------------------------------

constexpr int max_dims = 8;

// Passed by value. Dimension 0 is the innermost (fastest varying); strides are in bytes and may
// be zero (broadcast) or negative. magic/shift divide by sizes[d] for linear indices < 2**31.
template <int NARG> struct StridedArgs {
  int64 sizes[max_dims];
  int64 strides[NARG][max_dims];
  uint32 magic[max_dims];
  uint32 shift[max_dims];
  int32 ndim;
  int32 reserved;
};
static_assert(sizeof(StridedArgs<1>) == 200, "StridedArgs layout must match _strided.py");
static_assert(sizeof(StridedArgs<4>) == 392, "StridedArgs layout must match _strided.py");

// Byte offsets of the element with row-major linear index `linear` in each operand.
template <int NARG, bool WIDE>
IGNIS_DEV void offsets(const StridedArgs<NARG>& s, int64 linear, int64 (&off)[NARG]) {
#pragma unroll
  for (int a = 0; a < NARG; ++a) off[a] = 0;
  if constexpr (WIDE) {
    int64 rest = linear;
#pragma unroll
    for (int d = 0; d < max_dims; ++d) {
      if (d == s.ndim) break;
      int64 q = rest / s.sizes[d];
      int64 r = rest - q * s.sizes[d];
#pragma unroll
      for (int a = 0; a < NARG; ++a) off[a] += r * s.strides[a][d];
      rest = q;
    }
  } else {
    uint32 rest = (uint32)linear;
#pragma unroll
    for (int d = 0; d < max_dims; ++d) {
      if (d == s.ndim) break;
      uint32 q = (__umulhi(rest, s.magic[d]) + rest) >> s.shift[d];
      int64 r = (int64)(rest - q * (uint32)s.sizes[d]);
#pragma unroll
      for (int a = 0; a < NARG; ++a) off[a] += r * s.strides[a][d];
      rest = q;
    }
  }
}

// --- broadcast runs ---------------------------------------------------------------------------------

// Quotient and remainder of an index by a fixed divisor d while the index advances by a fixed
// step: two divisions when made, then only adds and a compare per step (a 64-bit division per
// element would cost more than the memory access it serves). Needs 0 <= index, 0 <= step, d >= 1.
struct DivWalk {
  int64 q, r;    // index == q * d + r, 0 <= r < d
  int64 sq, sr;  // step == sq * d + sr
  int64 d;
  IGNIS_DEV DivWalk(int64 index, int64 step, int64 divisor) : d(divisor) {
    q = index / divisor;
    r = index - q * divisor;
    sq = step / divisor;
    sr = step - sq * divisor;
  }
  IGNIS_DEV void advance() {
    q += sq;
    r += sr;
    if (r >= d) {
      r -= d;
      ++q;
    }
  }
};

template <class T> IGNIS_DEV const T& at(const char* base, int64 offset) {
  return *reinterpret_cast<const T*>(base + offset);
}
template <class T> IGNIS_DEV T& at(char* base, int64 offset) {
  return *reinterpret_cast<T*>(base + offset);
}

}  // namespace ew
}  // namespace ignis

#endif  // __CUDACC__
