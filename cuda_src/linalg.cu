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
//                                 double, rounded once into T.
#include "ignis_types.cuh"

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

template <class T>
__global__ void lu_slogdet(const T* __restrict__ lu, const int32* __restrict__ ipiv,
                           T* __restrict__ sign, T* __restrict__ logabs, T* __restrict__ det,
                           int64 n, int64 batch) {
  IGNIS_GRID_STRIDE_LOOP(b, batch) {
    const T* m = lu + b * n * n;
    const int32* p = ipiv + b * n;
    double s = 1.0, l = 0.0;
    bool zero = false;
    for (int64 i = 0; i < n; ++i) {
      const double d = (double)m[i * (n + 1)];
      if ((int64)p[i] != i + 1) s = -s;  // row i was swapped with a later row
      if (d == 0.0) {
        zero = true;
      } else {
        const double a = fabs(d);
        s *= d / a;  // -1, 1, or NaN for a NaN pivot
        l += log(a);
      }
    }
    if (zero) {
      s = 0.0;
      l = __longlong_as_double(0xfff0000000000000ll);  // -inf
    }
    if (sign) sign[b] = (T)s;
    if (logabs) logabs[b] = (T)l;
    if (det) det[b] = (T)(s * exp(l));
  }
}

}  // namespace linalg
}  // namespace ignis
