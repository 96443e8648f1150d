// reduce.cuh - device helpers shared by the reduction and softmax kernels.
//
//   * cvt_in<A>(T) / cvt_out<O>(A): element conversions into and out of the compute type
//     (16-bit floats go through float, bool reads as 0/1);
//   * OuterLayout: up to 8 collapsed outer dimensions (element strides, innermost first) that map
//     a row number to the element offset where the row starts;
//   * reduction ops (SumOp, SqDevOp, MaxOp, MinOp, ArgMaxOp, ArgMinOp and PartialOp for the second
//     pass of a split reduction): identity, load, combine, finish;
//   * warp and block reductions over any op in a fixed order (deterministic results);
//   * for_span: visits a contiguous span of a row with 16-byte vector loads where the address
//     allows it, several loads in flight per thread.
// Complex sums, products and means (complex.cuh) run through the same ops: acc_t is the complex
// type, the warp shuffles move its two parts, and a mean divides both parts.
#pragma once

#include "ignis_types.cuh"
#include "complex.cuh"

#if defined(__CUDACC__)

namespace ignis {

// --- conversions -------------------------------------------------------------------------------

template <class A, class T> struct ConvertIn {
  static IGNIS_DEV A apply(T v) { return (A)v; }
};
template <class A> struct ConvertIn<A, float16> {
  static IGNIS_DEV A apply(float16 v) { return (A)to_float(v); }
};
template <class A> struct ConvertIn<A, bfloat16> {
  static IGNIS_DEV A apply(bfloat16 v) { return (A)to_float(v); }
};
template <class A> struct ConvertIn<A, bool> {
  static IGNIS_DEV A apply(bool v) { return v ? (A)1 : (A)0; }
};
template <class A, class T> IGNIS_DEV A cvt_in(T v) { return ConvertIn<A, T>::apply(v); }

template <class O, class A> struct ConvertOut {
  static IGNIS_DEV O apply(A v) { return (O)v; }
};
template <class A> struct ConvertOut<float16, A> {
  static IGNIS_DEV float16 apply(A v) { return float_to_half((float)v); }
};
template <class A> struct ConvertOut<bfloat16, A> {
  static IGNIS_DEV bfloat16 apply(A v) { return float_to_bf16((float)v); }
};
template <class A> struct ConvertOut<bool, A> {
  static IGNIS_DEV bool apply(A v) { return v != (A)0; }
};
// complex64 <-> complex128 (sum(x, dtype=complex128) of complex64 x): part by part
template <> struct ConvertIn<complex128, complex64> {
  static IGNIS_DEV complex128 apply(complex64 v) { return complex128(v.re, v.im); }
};
template <> struct ConvertIn<complex64, complex128> {
  static IGNIS_DEV complex64 apply(complex128 v) { return complex64((float)v.re, (float)v.im); }
};
template <> struct ConvertOut<complex128, complex64> {
  static IGNIS_DEV complex128 apply(complex64 v) { return complex128(v.re, v.im); }
};
template <> struct ConvertOut<complex64, complex128> {
  static IGNIS_DEV complex64 apply(complex128 v) { return complex64((float)v.re, (float)v.im); }
};
template <class O, class A> IGNIS_DEV O cvt_out(A v) { return ConvertOut<O, A>::apply(v); }

// --- limits --------------------------------------------------------------------------------------

template <class T> struct IsFloat { static constexpr bool value = false; };
template <> struct IsFloat<float> { static constexpr bool value = true; };
template <> struct IsFloat<double> { static constexpr bool value = true; };

template <class W> struct Limits;
template <> struct Limits<float> {
  static IGNIS_DEV float lowest() { return __int_as_float(0xff800000); }  // -inf
  static IGNIS_DEV float highest() { return __int_as_float(0x7f800000); }  // +inf
};
template <> struct Limits<double> {
  static IGNIS_DEV double lowest() { return __longlong_as_double(0xfff0000000000000ll); }
  static IGNIS_DEV double highest() { return __longlong_as_double(0x7ff0000000000000ll); }
};
template <> struct Limits<int> {
  static IGNIS_DEV int lowest() { return -2147483647 - 1; }
  static IGNIS_DEV int highest() { return 2147483647; }
};
template <> struct Limits<long long> {
  static IGNIS_DEV long long lowest() { return -9223372036854775807ll - 1; }
  static IGNIS_DEV long long highest() { return 9223372036854775807ll; }
};
template <> struct Limits<unsigned long long> {
  static IGNIS_DEV unsigned long long lowest() { return 0ull; }
  static IGNIS_DEV unsigned long long highest() { return 18446744073709551615ull; }
};

// --- layout --------------------------------------------------------------------------------------

// Outer (kept) dimensions of a reduction or softmax, innermost first, strides in elements.
// Row r of the problem starts at element offset offset_of(r) of the input.
struct OuterLayout {
  int64 shape[8];
  int64 stride[8];
  int32 ndim;
  int32 unused;
};

IGNIS_DEV int64 offset_of(const OuterLayout& L, int64 row) {
  if (L.ndim == 1) return row * L.stride[0];
  int64 off = 0;
#pragma unroll
  for (int d = 0; d < 8; ++d) {
    if (d < L.ndim) {
      int64 q = row / L.shape[d];
      off += (row - q * L.shape[d]) * L.stride[d];
      row = q;
    }
  }
  return off;
}

// --- warp shuffles of any accumulator --------------------------------------------------------------

template <class W> struct ArgPair {
  W v;
  int64 i;
};

template <class A> IGNIS_DEV A shfl_xor(A v, int lane_mask) {
  return __shfl_xor_sync(full_warp_mask, v, lane_mask);
}
template <class R> IGNIS_DEV complex<R> shfl_xor(complex<R> v, int lane_mask) {
  return complex<R>(__shfl_xor_sync(full_warp_mask, v.re, lane_mask),
                    __shfl_xor_sync(full_warp_mask, v.im, lane_mask));
}
template <class W> IGNIS_DEV ArgPair<W> shfl_xor(ArgPair<W> p, int lane_mask) {
  ArgPair<W> q;
  q.v = __shfl_xor_sync(full_warp_mask, p.v, lane_mask);
  q.i = __shfl_xor_sync(full_warp_mask, p.i, lane_mask);
  return q;
}

// --- reduction ops -----------------------------------------------------------------------------------
// acc_t: what partial results are; load(x, center, index) turns one element into an acc_t;
// combine is associative and commutative up to rounding; finish(acc, div) gives the output.

// Integer sums wrap around: they run in unsigned arithmetic, where overflow is defined.
template <class A> struct SumAcc { typedef A type; };
template <> struct SumAcc<long long> { typedef unsigned long long type; };

template <class A> struct SumOp {
  typedef typename SumAcc<A>::type acc_t;
  // +0.0, not -0.0: NumPy's sums (the reference) start from +0.0 too, so a sum of -0.0s or of
  // nothing is +0.0 on both backends.
  static IGNIS_DEV acc_t identity() { return (acc_t)0; }
  template <class T> static IGNIS_DEV acc_t load(T x, acc_t, int64) { return cvt_in<acc_t>(cvt_in<A>(x)); }
  static IGNIS_DEV acc_t combine(acc_t a, acc_t b) { return a + b; }
  // mean and var divide by a count (div); a plain sum passes div = 1, which is exact.
  template <class O> static IGNIS_DEV O finish(acc_t a, double div) {
    if constexpr (IsFloat<acc_t>::value) return cvt_out<O>(a / (acc_t)div);
    else if constexpr (is_complex<acc_t>::value) {
      typedef typename acc_t::value_type R;
      return cvt_out<O>(acc_t(a.re / (R)div, a.im / (R)div));
    } else return cvt_out<O>((A)a);
  }
};

// Sum of squared deviations from a per-output center (the mean): the second pass of var.
template <class A> struct SqDevOp {
  typedef A acc_t;
  static IGNIS_DEV acc_t identity() { return (acc_t)0; }
  template <class T> static IGNIS_DEV acc_t load(T x, acc_t center, int64) {
    acc_t d = cvt_in<A>(x) - center;
    return d * d;
  }
  static IGNIS_DEV acc_t combine(acc_t a, acc_t b) { return a + b; }
  template <class O> static IGNIS_DEV O finish(acc_t a, double div) { return cvt_out<O>(a / (acc_t)div); }
};

// Standard deviation: SqDevOp's mean squared deviation, then its square root.
template <class A> struct StdDevOp : SqDevOp<A> {
  typedef A acc_t;
  template <class O> static IGNIS_DEV O finish(acc_t a, double div) {
    return cvt_out<O>(sqrt(a / (acc_t)div));
  }
};

// Products wrap around for integers (unsigned arithmetic, as the sums).
template <class A> struct ProdOp {
  typedef typename SumAcc<A>::type acc_t;
  static IGNIS_DEV acc_t identity() { return (acc_t)1; }
  template <class T> static IGNIS_DEV acc_t load(T x, acc_t, int64) { return cvt_in<acc_t>(cvt_in<A>(x)); }
  static IGNIS_DEV acc_t combine(acc_t a, acc_t b) { return a * b; }
  template <class O> static IGNIS_DEV O finish(acc_t a, double) { return cvt_out<O>((A)a); }
};

// all / any: whether the elements (of work type W) are nonzero, combined as an int (NaN is
// nonzero, so true).
template <class W, bool ALL> struct TruthOp {
  typedef int acc_t;
  static IGNIS_DEV acc_t identity() { return ALL ? 1 : 0; }
  template <class T> static IGNIS_DEV acc_t load(T x, acc_t, int64) { return cvt_in<W>(x) != W(0); }
  static IGNIS_DEV acc_t combine(acc_t a, acc_t b) { return ALL ? (a & b) : (a | b); }
  template <class O> static IGNIS_DEV O finish(acc_t a, double) { return (O)(a != 0); }
};
template <class W> struct AllOp : TruthOp<W, true> {};
template <class W> struct AnyOp : TruthOp<W, false> {};

template <class W> struct MaxOp {
  typedef W acc_t;
  static IGNIS_DEV acc_t identity() { return Limits<W>::lowest(); }
  template <class T> static IGNIS_DEV acc_t load(T x, acc_t, int64) { return cvt_in<W>(x); }
  static IGNIS_DEV acc_t combine(acc_t a, acc_t b) { return nan_max(a, b); }
  template <class O> static IGNIS_DEV O finish(acc_t a, double) { return cvt_out<O>(a); }
};

template <class W> struct MinOp {
  typedef W acc_t;
  static IGNIS_DEV acc_t identity() { return Limits<W>::highest(); }
  template <class T> static IGNIS_DEV acc_t load(T x, acc_t, int64) { return cvt_in<W>(x); }
  static IGNIS_DEV acc_t combine(acc_t a, acc_t b) { return nan_min(a, b); }
  template <class O> static IGNIS_DEV O finish(acc_t a, double) { return cvt_out<O>(a); }
};

// argmax/argmin: a NaN is the extreme; between equal values (or two NaNs) the lower index wins.
// That is a total order, so the result is the first occurrence whatever the combining order.
template <class W, bool IsMax> struct ArgOp {
  typedef ArgPair<W> acc_t;
  static IGNIS_DEV acc_t identity() {
    acc_t p;
    p.v = IsMax ? Limits<W>::lowest() : Limits<W>::highest();
    p.i = Limits<long long>::highest();
    return p;
  }
  template <class T> static IGNIS_DEV acc_t load(T x, acc_t, int64 index) {
    acc_t p;
    p.v = cvt_in<W>(x);
    p.i = index;
    return p;
  }
  static IGNIS_DEV acc_t combine(acc_t a, acc_t b) {
    bool a_nan = a.v != a.v, b_nan = b.v != b.v;
    if (a_nan != b_nan) return a_nan ? a : b;
    if (!a_nan && a.v != b.v) {
      bool b_better = IsMax ? (b.v > a.v) : (b.v < a.v);
      return b_better ? b : a;
    }
    return b.i < a.i ? b : a;
  }
  template <class O> static IGNIS_DEV O finish(acc_t a, double) { return (O)a.i; }
};
template <class W> struct ArgMaxOp : ArgOp<W, true> {};
template <class W> struct ArgMinOp : ArgOp<W, false> {};

// Second pass of a split reduction: the elements are partial results of Op.
template <class Op> struct PartialOp {
  typedef typename Op::acc_t acc_t;
  static IGNIS_DEV acc_t identity() { return Op::identity(); }
  static IGNIS_DEV acc_t load(acc_t x, acc_t, int64) { return x; }
  static IGNIS_DEV acc_t combine(acc_t a, acc_t b) { return Op::combine(a, b); }
  template <class O> static IGNIS_DEV O finish(acc_t a, double div) { return Op::template finish<O>(a, div); }
};

// --- warp and block reductions (fixed order: the same inputs give the same bits) ------------------

// Reduce within aligned groups of `width` lanes (a power of two <= 32); every lane of a group
// gets the group's result. All 32 lanes must call it.
template <class Op> IGNIS_DEV typename Op::acc_t group_reduce(typename Op::acc_t v, int width) {
  for (int offset = width >> 1; offset > 0; offset >>= 1) v = Op::combine(v, shfl_xor(v, offset));
  return v;
}

// Reduce over the whole (1-D) block; every thread gets the result. `scratch` holds 32 acc_t.
// blockDim.x must be a multiple of 32; all threads must call it.
template <class Op>
IGNIS_DEV typename Op::acc_t block_reduce(typename Op::acc_t v, typename Op::acc_t* scratch) {
  const int lane = threadIdx.x & (warp_size - 1);
  const int warp = threadIdx.x / warp_size;
  const int warps = blockDim.x / warp_size;
  v = group_reduce<Op>(v, warp_size);
  __syncthreads();  // scratch may still be read from a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < warps ? scratch[lane] : Op::identity();
    v = group_reduce<Op>(v, warp_size);
    if (lane == 0) scratch[0] = v;
  }
  __syncthreads();
  return scratch[0];
}

// Shared memory for `count` values of a type that may have no trivial constructor.
#define IGNIS_SHARED_ARRAY(type, name, count)                            \
  __shared__ __align__(16) unsigned char name##_raw[sizeof(type) * (count)]; \
  type* name = reinterpret_cast<type*>(name##_raw)

// --- vector loads and stores -----------------------------------------------------------------------

// VEC consecutive elements of T making up 16 bytes (or one element when VEC == 1).
template <class T, int VEC> struct Pack {
  union {
    uint4 words;
    T e[VEC];
  };
};
template <class T> struct Pack<T, 1> {
  T e[1];
};

template <class T, int VEC> IGNIS_DEV Pack<T, VEC> load_pack(const T* p) {
  static_assert(VEC == 1 || sizeof(T) * VEC == 16, "a pack is one element or 16 bytes");
  Pack<T, VEC> r;
  if constexpr (VEC == 1) {
    r.e[0] = *p;
  } else {
    r.words = __ldg(reinterpret_cast<const uint4*>(p));
  }
  return r;
}

IGNIS_DEV void store16(void* p, uint4 w) {
  // Inline PTX: the compiler sees through a union and may otherwise split the store.
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(w.x), "r"(w.y), "r"(w.z), "r"(w.w)
               : "memory");
}
IGNIS_DEV void store8(void* p, uint2 w) {
  asm volatile("st.global.v2.b32 [%0], {%1, %2};" ::"l"(p), "r"(w.x), "r"(w.y) : "memory");
}

// Store VEC consecutive values; p is aligned to VEC * sizeof(O) (up to 16 bytes).
template <class O, int VEC> IGNIS_DEV void store_values(O* p, const O (&v)[VEC]) {
  constexpr int bytes = (int)sizeof(O) * VEC;
  if constexpr (bytes % 16 == 0) {
    union {
      uint4 w[bytes / 16];
      O e[VEC];
    } u;
#pragma unroll
    for (int k = 0; k < VEC; ++k) u.e[k] = v[k];
#pragma unroll
    for (int k = 0; k < bytes / 16; ++k) store16(reinterpret_cast<uint4*>(p) + k, u.w[k]);
  } else if constexpr (bytes % 8 == 0) {
    union {
      uint2 w[bytes / 8];
      O e[VEC];
    } u;
#pragma unroll
    for (int k = 0; k < VEC; ++k) u.e[k] = v[k];
#pragma unroll
    for (int k = 0; k < bytes / 8; ++k) store8(reinterpret_cast<uint2*>(p) + k, u.w[k]);
  } else {
#pragma unroll
    for (int k = 0; k < VEC; ++k) p[k] = v[k];
  }
}

// --- spans -------------------------------------------------------------------------------------------

// Calls f(index, value) for every element row[index], begin <= index < end, spread over the
// threads tid = 0..nthreads-1 (nthreads >= VEC). With VEC > 1 the elements before the first
// 16-byte boundary and after the last one are read singly and the rest as 16-byte packs,
// UNROLL packs in flight per thread. Which thread sees which element depends only on the
// span and the row's address, so results are reproducible.
template <class T, int VEC, int UNROLL, class F>
IGNIS_DEV void for_span(const T* row, int64 begin, int64 end, int tid, int nthreads, F&& f) {
  int64 start = begin;
  if constexpr (VEC > 1) {
    const uint64 addr = (uint64)(row + begin);
    int64 head = (int64)(((16u - (unsigned)(addr & 15u)) & 15u) / sizeof(T));
    if (head > end - begin) head = end - begin;
    if (tid < head) f(begin + tid, row[begin + tid]);
    start = begin + head;
  }
  const int64 packs = (end - start) / VEC;
  const T* base = row + start;
  int64 j = tid;
  for (; j + (int64)(UNROLL - 1) * nthreads < packs; j += (int64)UNROLL * nthreads) {
    Pack<T, VEC> p[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) p[u] = load_pack<T, VEC>(base + (j + (int64)u * nthreads) * VEC);
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
#pragma unroll
      for (int e = 0; e < VEC; ++e) f(start + (j + (int64)u * nthreads) * VEC + e, p[u].e[e]);
    }
  }
  for (; j < packs; j += nthreads) {
    Pack<T, VEC> p = load_pack<T, VEC>(base + j * VEC);
#pragma unroll
    for (int e = 0; e < VEC; ++e) f(start + j * VEC + e, p.e[e]);
  }
  if constexpr (VEC > 1) {
    const int64 t = start + packs * VEC + tid;
    if (t < end) f(t, row[t]);
  }
}

}  // namespace ignis

#endif  // __CUDACC__
