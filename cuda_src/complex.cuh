// complex.cuh - complex numbers of the kernel library: ignis::complex64 and ignis::complex128.
//
// NVRTC has no <complex> and no toolkit headers, so this file brings its own: a struct of two
// parts laid out as float2 / double2 (re, im; aligned to its size, so that one 8- or 16-byte
// load moves an element), the arithmetic operators, and the elementary functions the Array API
// standard defines for complex operands, with the special cases of C99 Annex G (the standard's
// own list follows it): signed zeros, infinities and NaNs give what csqrt, cexp, clog, ... give.
//
//   complex<R>           two R (float or double); trivially copyable, so Pack<> unions take it
//   + - * /              C99's / is done with Smith's scaling (no overflow for large parts) and
//                        Annex G's recovery of infinities from NaN results
//   c_abs c_exp c_expm1 c_log c_log1p c_log2 c_log10 c_sqrt c_pow c_sin c_cos c_tan c_sinh
//   c_cosh c_tanh c_asin c_acos c_atan c_asinh c_acosh c_atanh c_sign c_round
//   c_isnan c_isinf c_isfinite
//
// The inverse functions use Kahan's formulas ("Branch Cuts for Complex Elementary Functions",
// 1987) through csqrt, accurate away from the branch points and infinite inputs handled first.
// Like ignis_types.cuh, everything here also compiles as host C++ (without __CUDACC__): the
// special cases are checked against NumPy on machines without a GPU.
#pragma once

#include "ignis_types.cuh"

#if !defined(IGNIS_CX)
#if defined(__CUDACC__)
#define IGNIS_CX __host__ __device__ __forceinline__
#else
#define IGNIS_CX inline
#endif
#endif

namespace ignis {

// --- real math on the parts (float and double overloads; host builtins off the device) --------
namespace cm {
#if defined(__CUDA_ARCH__)
// (::FN: the global math function; a plain FN(x) would be this overload calling itself)
#define IGNIS_CM_F(NAME, FN)                            \
  IGNIS_CX float NAME(float x) { return ::FN##f(x); }   \
  IGNIS_CX double NAME(double x) { return ::FN(x); }
#define IGNIS_CM_F2(NAME, FN)                                       \
  IGNIS_CX float NAME(float x, float y) { return ::FN##f(x, y); }   \
  IGNIS_CX double NAME(double x, double y) { return ::FN(x, y); }
#else
#define IGNIS_CM_F(NAME, FN)                                    \
  IGNIS_CX float NAME(float x) { return __builtin_##FN##f(x); } \
  IGNIS_CX double NAME(double x) { return __builtin_##FN(x); }
#define IGNIS_CM_F2(NAME, FN)                                                 \
  IGNIS_CX float NAME(float x, float y) { return __builtin_##FN##f(x, y); }   \
  IGNIS_CX double NAME(double x, double y) { return __builtin_##FN(x, y); }
#endif
IGNIS_CM_F(exp, exp)
IGNIS_CM_F(expm1, expm1)
IGNIS_CM_F(log, log)
IGNIS_CM_F(log1p, log1p)
IGNIS_CM_F(sqrt, sqrt)
IGNIS_CM_F(sin, sin)
IGNIS_CM_F(cos, cos)
IGNIS_CM_F(tan, tan)
IGNIS_CM_F(sinh, sinh)
IGNIS_CM_F(cosh, cosh)
IGNIS_CM_F(asinh, asinh)
IGNIS_CM_F(tanh, tanh)
IGNIS_CM_F(atan, atan)
IGNIS_CM_F(fabs, fabs)
IGNIS_CM_F(rint, rint)
IGNIS_CM_F2(atan2, atan2)
IGNIS_CM_F2(hypot, hypot)
IGNIS_CM_F2(copysign, copysign)
IGNIS_CM_F2(pow, pow)
#undef IGNIS_CM_F
#undef IGNIS_CM_F2
template <class R> IGNIS_CX bool isnan(R x) { return x != x; }
template <class R> IGNIS_CX bool isinf(R x) { return fabs(x) == R(1.0 / 0.0); }
template <class R> IGNIS_CX bool isfinite(R x) { return fabs(x) < R(1.0 / 0.0); }
template <class R> IGNIS_CX bool signbit(R x) { return copysign(R(1), x) < R(0); }
template <class R> IGNIS_CX R inf() { return R(1.0 / 0.0); }
template <class R> IGNIS_CX R nan() { return R(0.0 / 0.0); }
template <class R> IGNIS_CX R pi() { return R(3.14159265358979323846); }
template <class R> IGNIS_CX R ln2() { return R(0.69314718055994530942); }
template <class R> IGNIS_CX R ln10() { return R(2.30258509299404568402); }
// |z| above which 1 is negligible next to z*z (asinh, acos: log(2z) is exact to rounding), and
// the largest finite value over 4 (csqrt's scaling).
template <class R> struct limits;
template <> struct limits<float> {
  static IGNIS_CX float big() { return 4.0e3f; }
  static IGNIS_CX float quarter_max() { return 8.5e37f; }
};
template <> struct limits<double> {
  static IGNIS_CX double big() { return 1.0e8; }
  static IGNIS_CX double quarter_max() { return 4.49e307; }
};
}  // namespace cm

template <class R> struct alignas(2 * sizeof(R)) complex {
  typedef R value_type;
  R re, im;
  complex() = default;  // trivial: complex<R> may live in the unions of vector loads
  IGNIS_CX constexpr complex(R r, R i = R(0)) : re(r), im(i) {}
};
typedef complex<float> complex64;
typedef complex<double> complex128;
static_assert(sizeof(complex64) == 8 && alignof(complex64) == 8, "complex64 is a float2");
static_assert(sizeof(complex128) == 16 && alignof(complex128) == 16, "complex128 is a double2");

template <class T> struct is_complex { static constexpr bool value = false; };
template <class R> struct is_complex<complex<R>> { static constexpr bool value = true; };

template <class R> IGNIS_CX complex<R> operator+(complex<R> a, complex<R> b) {
  return complex<R>(a.re + b.re, a.im + b.im);
}
template <class R> IGNIS_CX complex<R> operator-(complex<R> a, complex<R> b) {
  return complex<R>(a.re - b.re, a.im - b.im);
}
template <class R> IGNIS_CX complex<R> operator-(complex<R> a) { return complex<R>(-a.re, -a.im); }
template <class R> IGNIS_CX bool operator==(complex<R> a, complex<R> b) {
  return a.re == b.re && a.im == b.im;
}
template <class R> IGNIS_CX bool operator!=(complex<R> a, complex<R> b) { return !(a == b); }

template <class R> IGNIS_CX bool c_isnan(complex<R> z) { return cm::isnan(z.re) || cm::isnan(z.im); }
template <class R> IGNIS_CX bool c_isinf(complex<R> z) { return cm::isinf(z.re) || cm::isinf(z.im); }
template <class R> IGNIS_CX bool c_isfinite(complex<R> z) {
  return cm::isfinite(z.re) && cm::isfinite(z.im);
}

// C99 Annex G's multiplication: the plain formula, and where it gives NaN + iNaN, infinities
// recovered from infinite operands (an infinite operand times a nonzero one is infinite).
template <class R> IGNIS_CX complex<R> operator*(complex<R> a, complex<R> b) {
  R ac = a.re * b.re, bd = a.im * b.im, ad = a.re * b.im, bc = a.im * b.re;
  R x = ac - bd, y = ad + bc;
  if (cm::isnan(x) && cm::isnan(y)) {
    bool recalc = false;
    R p = a.re, q = a.im, r = b.re, s = b.im;
    if (cm::isinf(p) || cm::isinf(q)) {  // a is infinite: "box" it
      p = cm::copysign(cm::isinf(p) ? R(1) : R(0), p);
      q = cm::copysign(cm::isinf(q) ? R(1) : R(0), q);
      if (cm::isnan(r)) r = cm::copysign(R(0), r);
      if (cm::isnan(s)) s = cm::copysign(R(0), s);
      recalc = true;
    }
    if (cm::isinf(r) || cm::isinf(s)) {  // b is infinite
      r = cm::copysign(cm::isinf(r) ? R(1) : R(0), r);
      s = cm::copysign(cm::isinf(s) ? R(1) : R(0), s);
      if (cm::isnan(p)) p = cm::copysign(R(0), p);
      if (cm::isnan(q)) q = cm::copysign(R(0), q);
      recalc = true;
    }
    if (!recalc && (cm::isinf(ac) || cm::isinf(bd) || cm::isinf(ad) || cm::isinf(bc))) {
      // overflow in a partial product: recover infinities
      if (cm::isnan(p)) p = cm::copysign(R(0), p);
      if (cm::isnan(q)) q = cm::copysign(R(0), q);
      if (cm::isnan(r)) r = cm::copysign(R(0), r);
      if (cm::isnan(s)) s = cm::copysign(R(0), s);
      recalc = true;
    }
    if (recalc) {
      x = cm::inf<R>() * (p * r - q * s);
      y = cm::inf<R>() * (p * s + q * r);
    }
  }
  return complex<R>(x, y);
}

// Smith's division (no overflow in |b|^2), with Annex G's infinite and zero cases.
template <class R> IGNIS_CX complex<R> operator/(complex<R> a, complex<R> b) {
  R c = b.re, d = b.im, x, y;
  if (cm::fabs(c) >= cm::fabs(d)) {
    if (c == R(0) && d == R(0)) {
      x = a.re / cm::fabs(c);  // (NumPy: a / 0 part by part, inf or nan)
      y = a.im / cm::fabs(c);
      return complex<R>(x, y);
    }
    R r = d / c, den = c + d * r;
    x = (a.re + a.im * r) / den;
    y = (a.im - a.re * r) / den;
  } else {
    R r = c / d, den = c * r + d;
    x = (a.re * r + a.im) / den;
    y = (a.im * r - a.re) / den;
  }
  if (cm::isnan(x) && cm::isnan(y)) {
    if ((cm::isinf(a.re) || cm::isinf(a.im)) && cm::isfinite(c) && cm::isfinite(d)) {
      R p = cm::copysign(cm::isinf(a.re) ? R(1) : R(0), a.re);
      R q = cm::copysign(cm::isinf(a.im) ? R(1) : R(0), a.im);
      x = cm::inf<R>() * (p * c + q * d);
      y = cm::inf<R>() * (q * c - p * d);
    } else if ((cm::isinf(c) || cm::isinf(d)) && cm::isfinite(a.re) && cm::isfinite(a.im)) {
      R r = cm::copysign(cm::isinf(c) ? R(1) : R(0), c);
      R s = cm::copysign(cm::isinf(d) ? R(1) : R(0), d);
      x = R(0) * (a.re * r + a.im * s);
      y = R(0) * (a.im * r - a.re * s);
    }
  }
  return complex<R>(x, y);
}

template <class R> IGNIS_CX complex<R> c_conj(complex<R> z) { return complex<R>(z.re, -z.im); }
template <class R> IGNIS_CX R c_abs(complex<R> z) { return cm::hypot(z.re, z.im); }
template <class R> IGNIS_CX complex<R> c_round(complex<R> z) {
  return complex<R>(cm::rint(z.re), cm::rint(z.im));
}
// z / |z| (0 at 0; NaN parts give NaN + iNaN), the standard's sign.
template <class R> IGNIS_CX complex<R> c_sign(complex<R> z) {
  if (c_isnan(z)) return complex<R>(cm::nan<R>(), cm::nan<R>());
  if (z.re == R(0) && z.im == R(0)) return complex<R>(R(0), R(0));
  if (c_isinf(z)) {  // the direction of one infinite part; two give inf / inf, NaN (NumPy's)
    if (cm::isinf(z.re) && cm::isinf(z.im)) return complex<R>(cm::nan<R>(), cm::nan<R>());
    R x = cm::isinf(z.re) ? cm::copysign(R(1), z.re) : R(0);
    R y = cm::isinf(z.im) ? cm::copysign(R(1), z.im) : R(0);
    R m = cm::hypot(x, y);
    return complex<R>(x / m, y / m);
  }
  R m = c_abs(z);
  return complex<R>(z.re / m, z.im / m);
}

// --- exponentials and logarithms -----------------------------------------------------------------

template <class R> IGNIS_CX complex<R> c_exp(complex<R> z) {
  R x = z.re, y = z.im;
  if (y == R(0)) return complex<R>(cm::exp(x), y);  // exact real axis, signed zero kept
  if (!cm::isfinite(y)) {
    if (x == cm::inf<R>()) return complex<R>(x, y - y);          // +inf + i(inf|nan)
    if (x == -cm::inf<R>()) return complex<R>(R(0), R(0));       // -inf + i(inf|nan)
    return complex<R>(y - y, y - y);                             // NaN + iNaN
  }
  if (x > R(0) && cm::isinf(cm::exp(x)) && cm::isfinite(x)) {
    // exp(x) overflows while exp(x) * cos(y) may not: halve the exponent
    R h = cm::exp(x * R(0.5));
    return complex<R>(h * cm::cos(y) * h, h * cm::sin(y) * h);
  }
  R e = cm::exp(x);
  return complex<R>(e * cm::cos(y), e * cm::sin(y));
}

template <class R> IGNIS_CX complex<R> c_expm1(complex<R> z) {
  R x = z.re, y = z.im;
  if (y == R(0)) return complex<R>(x == R(0) ? R(0) : cm::expm1(x), y);  // (+-0: +0, the standard's)
  if (!cm::isfinite(y)) {
    if (x == cm::inf<R>()) return complex<R>(x, y - y);
    if (x == -cm::inf<R>()) return complex<R>(R(-1), R(0));
    return complex<R>(y - y, y - y);
  }
  if (cm::fabs(x) < R(1) && cm::fabs(y) < R(1)) {
    // expm1(x) cos(y) - 2 sin^2(y / 2): no cancellation near 0
    R s = cm::sin(y * R(0.5));
    return complex<R>(cm::expm1(x) * cm::cos(y) - R(2) * s * s, cm::exp(x) * cm::sin(y));
  }
  complex<R> e = c_exp(z);
  return complex<R>(e.re - R(1), e.im);
}

template <class R> IGNIS_CX complex<R> c_log(complex<R> z) {
  R x = z.re, y = z.im;
  R ax = cm::fabs(x), ay = cm::fabs(y);
  R re;
  if (ax < ay) { R t = ax; ax = ay; ay = t; }  // ax >= ay
  if (ax > R(0.5) && ax < R(2) && cm::isfinite(ay)) {
    // |z| near 1: log|z| = log1p((ax - 1)(ax + 1) + ay^2) / 2 keeps its digits
    re = R(0.5) * cm::log1p((ax - R(1)) * (ax + R(1)) + ay * ay);
  } else {
    re = cm::log(cm::hypot(x, y));
  }
  return complex<R>(re, cm::atan2(y, x));
}

template <class R> IGNIS_CX complex<R> c_log1p(complex<R> z) {
  R x = z.re, y = z.im;
  if (cm::fabs(x) < R(0.5) && cm::fabs(y) < R(0.5)) {
    // log|1 + z| = log1p(2x + x^2 + y^2) / 2, accurate for small z
    return complex<R>(R(0.5) * cm::log1p(x * (R(2) + x) + y * y), cm::atan2(y, R(1) + x));
  }
  return c_log(complex<R>(R(1) + x, y));
}

template <class R> IGNIS_CX complex<R> c_log2(complex<R> z) {
  complex<R> l = c_log(z);
  return complex<R>(l.re / cm::ln2<R>(), l.im / cm::ln2<R>());
}
template <class R> IGNIS_CX complex<R> c_log10(complex<R> z) {
  complex<R> l = c_log(z);
  return complex<R>(l.re / cm::ln10<R>(), l.im / cm::ln10<R>());
}

// Annex G's csqrt: the principal root, with a nonnegative real part and the sign of z.im.
template <class R> IGNIS_CX complex<R> c_sqrt(complex<R> z) {
  R x = z.re, y = z.im;
  if (x == R(0) && y == R(0)) return complex<R>(R(0), y);
  if (cm::isinf(y)) return complex<R>(cm::inf<R>(), y);
  if (cm::isnan(x)) return complex<R>(x, x);  // NaN + iNaN
  if (cm::isinf(x)) {
    if (cm::isnan(y)) return x > R(0) ? complex<R>(x, y) : complex<R>(y, cm::inf<R>());
    return x > R(0) ? complex<R>(x, cm::copysign(R(0), y))
                    : complex<R>(R(0), cm::copysign(cm::inf<R>(), y));
  }
  if (cm::isnan(y)) return complex<R>(y, y);
  R scale = R(1);
  if (cm::fabs(x) > cm::limits<R>::quarter_max() || cm::fabs(y) > cm::limits<R>::quarter_max()) {
    x *= R(0.25);  // |x| + hypot(x, y) would overflow: sqrt(z / 4) * 2
    y *= R(0.25);
    scale = R(2);
  }
  R t = cm::sqrt((cm::fabs(x) + cm::hypot(x, y)) * R(0.5));
  if (x >= R(0)) return complex<R>(t * scale, y / (R(2) * t) * scale);
  return complex<R>(cm::fabs(y) / (R(2) * t) * scale, cm::copysign(t, y) * scale);
}

// a ** b = exp(b log a); an exact 0 base gives 0 for a positive real exponent, 1 for 0.
template <class R> IGNIS_CX complex<R> c_pow(complex<R> a, complex<R> b) {
  if (b.re == R(0) && b.im == R(0)) return complex<R>(R(1), R(0));
  if (a.re == R(0) && a.im == R(0) && b.im == R(0) && b.re > R(0)) return complex<R>(R(0), R(0));
  if (b.im == R(0) && b.re == R(1)) return a;
  if (b.im == R(0) && b.re == R(2)) return a * a;
  return c_exp(b * c_log(a));
}

// --- hyperbolic functions (Annex G's csinh, ccosh, ctanh) ----------------------------------------

template <class R> IGNIS_CX complex<R> c_sinh(complex<R> z) {
  R x = z.re, y = z.im;
  if (y == R(0)) return complex<R>(cm::sinh(x), y);
  if (!cm::isfinite(y)) {
    if (x == R(0)) return complex<R>(x, y - y);          // +-0 + iNaN
    if (cm::isinf(x)) return complex<R>(x, y - y);       // +-inf + iNaN
    return complex<R>(y - y, y - y);
  }
  return complex<R>(cm::sinh(x) * cm::cos(y), cm::cosh(x) * cm::sin(y));
}

template <class R> IGNIS_CX complex<R> c_cosh(complex<R> z) {
  R x = z.re, y = z.im;
  if (y == R(0)) return complex<R>(cm::cosh(x), cm::isnan(x) ? y : y * cm::copysign(R(1), x));
  if (!cm::isfinite(y)) {
    if (x == R(0)) return complex<R>(y - y, R(0));       // NaN + i0
    if (cm::isinf(x)) return complex<R>(x * x, y - y);   // +inf + iNaN
    return complex<R>(y - y, y - y);
  }
  return complex<R>(cm::cosh(x) * cm::cos(y), cm::sinh(x) * cm::sin(y));
}

// Kahan's tanh: tan(y) = t, beta = 1 + t^2, s = sinh(x), rho = sqrt(1 + s^2):
// tanh z = (beta rho s + i t) / (1 + beta s^2); for large |x| the real part is +-1.
template <class R> IGNIS_CX complex<R> c_tanh(complex<R> z) {
  R x = z.re, y = z.im;
  if (cm::isnan(x)) return complex<R>(x, y == R(0) ? y : x);
  if (cm::isinf(x)) {  // +-1 + i0 with the sign of y (the standard's; Annex G's sin(2y) sign)
    return complex<R>(cm::copysign(R(1), x), cm::copysign(R(0), y));
  }
  if (!cm::isfinite(y)) {
    if (x == R(0)) return complex<R>(x, y - y);
    return complex<R>(y - y, y - y);
  }
  if (y == R(0)) return complex<R>(cm::tanh(x), y);
  if (cm::fabs(x) > R(sizeof(R) == 4 ? 9 : 22)) {
    R e = cm::exp(R(-2) * cm::fabs(x));
    return complex<R>(cm::copysign(R(1), x), R(4) * cm::sin(y) * cm::cos(y) * e);
  }
  R t = cm::tan(y), beta = R(1) + t * t, s = cm::sinh(x), rho = cm::sqrt(R(1) + s * s);
  R den = R(1) + beta * s * s;
  return complex<R>(beta * rho * s / den, t / den);
}

// --- inverse functions ------------------------------------------------------------------------------

// asinh z = log(z + sqrt(z^2 + 1)), computed as Kahan's asin of i z; large and infinite |z|
// take log(2 |z|) + i arg(z) on the half plane x >= 0 and the odd symmetry.
template <class R> IGNIS_CX complex<R> c_asinh(complex<R> z) {
  R x = z.re, y = z.im;
  if (cm::isnan(x)) {
    if (y == R(0)) return complex<R>(x, y);
    if (cm::isinf(y)) return complex<R>(cm::inf<R>(), x);
    return complex<R>(x, x);
  }
  if (cm::isnan(y)) {
    if (cm::isinf(x)) return complex<R>(x, y);
    return complex<R>(y, y);
  }
  R ax = cm::fabs(x);
  if (ax > cm::limits<R>::big() || cm::fabs(y) > cm::limits<R>::big()) {
    // (asinh(-z) = -asinh(z): the real part takes x's sign, arg(|x| + iy) is already right)
    complex<R> l = c_log(complex<R>(ax, y));
    return complex<R>(cm::copysign(l.re + cm::ln2<R>(), x), l.im);
  }
  // asinh z = -i asin(i z); Kahan: asin(w) = atan(w.re / Re(A B)) + i asinh(Im(conj(A) B)),
  // A = sqrt(1 - w), B = sqrt(1 + w), here with w = i z = (-y, x).
  complex<R> w(-y, x);
  complex<R> a = c_sqrt(complex<R>(R(1) - w.re, -w.im));
  complex<R> b = c_sqrt(complex<R>(R(1) + w.re, w.im));
  R asin_re = cm::atan2(w.re, a.re * b.re - a.im * b.im);
  R asin_im = cm::asinh(a.re * b.im - a.im * b.re);
  return complex<R>(asin_im, -asin_re);
}

template <class R> IGNIS_CX complex<R> c_asin(complex<R> z) {  // asin z = -i asinh(i z)
  complex<R> s = c_asinh(complex<R>(-z.im, z.re));
  return complex<R>(s.im, -s.re);
}

// Kahan: acos z = 2 atan(Re(A) / Re(B)) + i asinh(Im(conj(B) A)), A = sqrt(1 - z),
// B = sqrt(1 + z); large and infinite |z|: arg(z) - i (log(2 |z|)) on the upper half plane.
template <class R> IGNIS_CX complex<R> c_acos(complex<R> z) {
  R x = z.re, y = z.im;
  if (cm::isnan(x) || cm::isnan(y)) {
    if (cm::isinf(y)) return complex<R>(cm::nan<R>(), -y);        // NaN -+ i inf
    if (cm::isinf(x)) return complex<R>(y, cm::inf<R>());        // NaN + i inf (sign open)
    if (x == R(0)) return complex<R>(cm::pi<R>() * R(0.5), y);
    return complex<R>(cm::nan<R>(), cm::nan<R>());
  }
  if (cm::fabs(x) > cm::limits<R>::big() || cm::fabs(y) > cm::limits<R>::big()) {
    complex<R> l = c_log(complex<R>(x, cm::fabs(y)));
    return complex<R>(l.im, -cm::copysign(l.re + cm::ln2<R>(), y));
  }
  complex<R> a = c_sqrt(complex<R>(R(1) - x, -y));
  complex<R> b = c_sqrt(complex<R>(R(1) + x, y));
  return complex<R>(R(2) * cm::atan2(a.re, b.re), cm::asinh(b.re * a.im - b.im * a.re));
}

// acosh z = +-i acos z, the sign that makes the real part nonnegative (Annex G's choice).
template <class R> IGNIS_CX complex<R> c_acosh(complex<R> z) {
  if (cm::isnan(z.re) && cm::isinf(z.im)) return complex<R>(cm::inf<R>(), z.re);
  if (cm::isinf(z.re) && cm::isnan(z.im)) return complex<R>(cm::inf<R>(), z.im);
  complex<R> w = c_acos(z);
  return complex<R>(cm::fabs(w.im), cm::copysign(w.re, z.im));
}

// atanh z = (log1p(z) - log1p(-z)) / 2: real part log1p(4x / ((1 - x)^2 + y^2)) / 4, imaginary
// part atan2(2y, (1 - x)(1 + x) - y^2) / 2; infinite parts give +-0 + i pi/2 (Annex G).
template <class R> IGNIS_CX complex<R> c_atanh(complex<R> z) {
  R x = z.re, y = z.im;
  if (cm::isinf(y)) return complex<R>(cm::copysign(R(0), x), cm::copysign(cm::pi<R>() * R(0.5), y));
  if (cm::isnan(x) || cm::isnan(y)) {
    if (cm::isinf(x)) return complex<R>(cm::copysign(R(0), x), y);
    if (x == R(0) && cm::isnan(y)) return complex<R>(x, y);
    return complex<R>(cm::nan<R>(), cm::nan<R>());
  }
  if (cm::isinf(x)) return complex<R>(cm::copysign(R(0), x), cm::copysign(cm::pi<R>() * R(0.5), y));
  R ax = cm::fabs(x), ay = cm::fabs(y);
  if (ax > cm::limits<R>::big() || ay > cm::limits<R>::big()) {
    // 1 is negligible: atanh z ~ 1 / z + i pi/2 sign(y)
    complex<R> r = complex<R>(R(1), R(0)) / z;
    R half_pi = cm::pi<R>() * R(0.5);
    return complex<R>(r.re, cm::copysign(half_pi, y));
  }
  R one_minus = R(1) - ax;
  R ratio = R(4) * ax / (one_minus * one_minus + ay * ay);
  // near +-1 the denominator may underflow: log(4|x| / |1 - x + iy|^2) / 4 through hypot
  R re = cm::isfinite(ratio) ? R(0.25) * cm::log1p(ratio)
                             : R(0.5) * (R(0.5) * cm::log(R(4) * ax) - cm::log(cm::hypot(one_minus, ay)));
  R im = R(0.5) * cm::atan2(R(2) * y, one_minus * (R(1) + ax) - ay * ay);
  return complex<R>(cm::copysign(re, x), im);
}

template <class R> IGNIS_CX complex<R> c_atan(complex<R> z) {  // atan z = -i atanh(i z)
  complex<R> t = c_atanh(complex<R>(-z.im, z.re));
  return complex<R>(t.im, -t.re);
}

// --- trigonometric functions through the hyperbolic ones (the standard defines them so) ---------

template <class R> IGNIS_CX complex<R> c_sin(complex<R> z) {  // sin z = -i sinh(i z)
  complex<R> s = c_sinh(complex<R>(-z.im, z.re));
  return complex<R>(s.im, -s.re);
}
template <class R> IGNIS_CX complex<R> c_cos(complex<R> z) {  // cos z = cosh(i z)
  return c_cosh(complex<R>(-z.im, z.re));
}
template <class R> IGNIS_CX complex<R> c_tan(complex<R> z) {  // tan z = -i tanh(i z)
  complex<R> t = c_tanh(complex<R>(-z.im, z.re));
  return complex<R>(t.im, -t.re);
}

}  // namespace ignis
