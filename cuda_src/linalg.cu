// linalg.cu - the small kernels around the cuSOLVER factorizations of ignis.linalg
// (ignis/_array/_cuda_backend/linalg.py).
//
//   zero_triangle<T, KEEP_LOWER>  in place on a contiguous stack of row-major rows x cols
//                                 matrices: zero every element above the diagonal (KEEP_LOWER,
//                                 j > i) or below it (j < i). Cholesky factors and QR's R come
//                                 out of cuSOLVER with the other triangle holding the input or
//                                 the Householder vectors.
//   lu_slogdet<T>                 one thread per matrix of a stack of n x n LU factorizations
//                                 (getrf: U's diagonal at element stride n + 1, whichever the
//                                 storage order; 1-based pivots ipiv): sign, log|det| and
//                                 det = sign * exp(log|det|), like NumPy's det. An exactly zero
//                                 pivot gives (0, -inf, 0); a NaN on the diagonal makes sign
//                                 and log|det| NaN. Outputs may be null (not wanted). Computed in
//                                 double, rounded once into T. T is float, double, complex64 or
//                                 complex128: for complex T, sign (a unit complex number: the
//                                 product of the pivots' phases) and det are T and log|det| is
//                                 real_of<T> (float / double), as in NumPy.
#include "complex.cuh"

namespace ignis {
namespace linalg {

template <class T, bool KEEP_LOWER>
__global__ void zero_triangle(T* __restrict__ a, int64 rows, int64 cols, int64 total) {
  IGNIS_GRID_STRIDE_LOOP(idx, total) {
    const int64 j = idx % cols;
    const int64 i = (idx / cols) % rows;
    if (KEEP_LOWER ? (j > i) : (j < i)) a[idx] = (T)0;
  }
}

// The real type of a matrix element (float for complex64, double for complex128).
template <class T> struct real_of { typedef T type; };
template <class R> struct real_of<complex<R>> { typedef R type; };

// A pivot's parts in double, and a (re, im) pair rounded once into T (the imaginary part is
// dropped for real T, where it is always zero).
__device__ __forceinline__ void parts(float x, double& re, double& im) { re = x; im = 0.0; }
__device__ __forceinline__ void parts(double x, double& re, double& im) { re = x; im = 0.0; }
template <class R>
__device__ __forceinline__ void parts(complex<R> x, double& re, double& im) {
  re = (double)x.re;
  im = (double)x.im;
}
template <class T> struct from_parts {
  static __device__ __forceinline__ T make(double re, double) { return (T)re; }
};
template <class R> struct from_parts<complex<R>> {
  static __device__ __forceinline__ complex<R> make(double re, double im) {
    return complex<R>((R)re, (R)im);
  }
};

template <class T>
__global__ void lu_slogdet(const T* __restrict__ lu, const int32* __restrict__ ipiv,
                           T* __restrict__ sign, typename real_of<T>::type* __restrict__ logabs,
                           T* __restrict__ det, int64 n, int64 batch) {
  typedef typename real_of<T>::type R;
  IGNIS_GRID_STRIDE_LOOP(b, batch) {
    const T* m = lu + b * n * n;
    const int32* p = ipiv + b * n;
    double sr = 1.0, si = 0.0, l = 0.0;  // sign = sr + i si
    bool zero = false;
    for (int64 i = 0; i < n; ++i) {
      double dr, di;
      parts(m[i * (n + 1)], dr, di);
      if ((int64)p[i] != i + 1) {  // row i was swapped with a later row
        sr = -sr;
        si = -si;
      }
      if (dr == 0.0 && di == 0.0) {
        zero = true;
      } else {
        const double a = hypot(dr, di);  // |d| (exactly fabs(d) for a real pivot)
        const double ur = dr / a, ui = di / a;  // d's phase: +-1 for real d; NaN for NaN
        const double tr = sr * ur - si * ui;
        si = sr * ui + si * ur;
        sr = tr;
        l += log(a);
      }
    }
    if (zero) {
      sr = 0.0;
      si = 0.0;
      l = __longlong_as_double(0xfff0000000000000ll);  // -inf
    }
    if (sign) sign[b] = from_parts<T>::make(sr, si);
    if (logabs) logabs[b] = (R)l;
    if (det) {
      const double e = exp(l);
      det[b] = from_parts<T>::make(sr * e, si * e);
    }
  }
}

}  // namespace linalg
}  // namespace ignis
