// optim.cu - multi-tensor optimizer kernels: SGD, Adam/AdamW, global L2 norm, scale with a
// non-finite check, zeroing (zero_grad), per-tensor step counters and the dynamic loss-scale
// update.
//
// One launch covers every tensor of a list. The host packs a table (int64, in device memory):
//   ptr[k * T + t]   address of slot k (param, grad, state, ...) of tensor t; 0 = absent
//   numel[t]         element count of tensor t                   (at K * T)
//   block_tensor[b]  the tensor block b works on                 (at K * T + T)
//   block_chunk[b]   which chunk of that tensor                  (at K * T + T + B)
// Block b handles elements [chunk * C, min(numel, (chunk + 1) * C)) of its tensor, C a multiple
// of 4. The table depends only on the addresses and sizes, so it is built once and reused, and a
// launch's arguments never change from step to step (CUDA-graph friendly): everything that does
// change (learning rate, step count, loss scale, clip coefficient, the found-inf flag) is read
// from small device arrays.
//
// Arithmetic: float for float32/16-bit tensors (state always float32), double for float64.
#include "ignis_types.cuh"

namespace ignis {
namespace optim {

struct Table {
  const int64* t;
  int T;
  int K;
  int B;
  IGNIS_DEV int64 ptr(int k, int tensor) const { return t[(int64)k * T + tensor]; }
  IGNIS_DEV int64 numel(int tensor) const { return t[(int64)K * T + tensor]; }
  IGNIS_DEV int tensor_of(int b) const { return (int)t[(int64)K * T + T + b]; }
  IGNIS_DEV int64 chunk_of(int b) const { return t[(int64)K * T + T + B + b]; }
};

template <class T> struct math_type { typedef float type; };
template <> struct math_type<double> { typedef double type; };

// --- loads and stores of 1 or 4 consecutive elements, converted to/from the math type M -------

template <class M, class T> IGNIS_DEV M ld(const T* p) { return (M)to_acc(*p); }
template <class M, class T> IGNIS_DEV void st(T* p, M v) { *p = from_acc<T>((typename acc_type<T>::type)v); }

template <class M> IGNIS_DEV void ld4(const float* p, M* v) {
  float4 q = *reinterpret_cast<const float4*>(p);
  v[0] = (M)q.x; v[1] = (M)q.y; v[2] = (M)q.z; v[3] = (M)q.w;
}
template <class M> IGNIS_DEV void ld4(const double* p, M* v) {
  double2 a = *reinterpret_cast<const double2*>(p);
  double2 b = *reinterpret_cast<const double2*>(p + 2);
  v[0] = (M)a.x; v[1] = (M)a.y; v[2] = (M)b.x; v[3] = (M)b.y;
}
template <class M, class H> IGNIS_DEV void ld4_half(const H* p, M* v) {
  uint2 q = *reinterpret_cast<const uint2*>(p);
  H h[4];
  h[0].bits = (uint16)(q.x & 0xffffu); h[1].bits = (uint16)(q.x >> 16);
  h[2].bits = (uint16)(q.y & 0xffffu); h[3].bits = (uint16)(q.y >> 16);
  for (int k = 0; k < 4; ++k) v[k] = (M)to_float(h[k]);
}
template <class M> IGNIS_DEV void ld4(const float16* p, M* v) { ld4_half(p, v); }
template <class M> IGNIS_DEV void ld4(const bfloat16* p, M* v) { ld4_half(p, v); }

template <class M> IGNIS_DEV void st4(float* p, const M* v) {
  *reinterpret_cast<float4*>(p) = make_float4((float)v[0], (float)v[1], (float)v[2], (float)v[3]);
}
template <class M> IGNIS_DEV void st4(double* p, const M* v) {
  *reinterpret_cast<double2*>(p) = make_double2((double)v[0], (double)v[1]);
  *reinterpret_cast<double2*>(p + 2) = make_double2((double)v[2], (double)v[3]);
}
template <class M, class H> IGNIS_DEV void st4_half(H* p, const M* v) {
  uint32 b[4];
  for (int k = 0; k < 4; ++k) b[k] = from_acc<H>((float)v[k]).bits;
  *reinterpret_cast<uint2*>(p) = make_uint2(b[0] | (b[1] << 16), b[2] | (b[3] << 16));
}
template <class M> IGNIS_DEV void st4(float16* p, const M* v) { st4_half(p, v); }
template <class M> IGNIS_DEV void st4(bfloat16* p, const M* v) { st4_half(p, v); }

// Loads/stores W (1 or 4) elements at index i of the array at address a (a may be 0: absent).
template <int W, class M, class T> IGNIS_DEV void load(int64 a, int64 i, M* v) {
  const T* p = reinterpret_cast<const T*>(a) + i;
  if (W == 4) ld4<M>(p, v); else v[0] = ld<M>(p);
}
template <int W, class M, class T> IGNIS_DEV void store(int64 a, int64 i, const M* v) {
  T* p = reinterpret_cast<T*>(a) + i;
  if (W == 4) st4<M>(p, v); else st<M>(p, v[0]);
}

// The element range of block b, and whether its slots allow 4-wide accesses (16-byte aligned
// addresses for 4-byte and wider types; the 16-bit types need 8).
struct Range {
  int tensor;
  int64 begin, end;
};
IGNIS_DEV Range block_range(const Table& tb, int64 chunk) {
  Range r;
  r.tensor = tb.tensor_of(blockIdx.x);
  r.begin = tb.chunk_of(blockIdx.x) * chunk;
  int64 n = tb.numel(r.tensor);
  r.end = r.begin + chunk < n ? r.begin + chunk : n;
  return r;
}

// Runs f.template operator()<W>(i) over the block's range: 4-wide where every slot is aligned,
// then one element at a time for the rest.
template <class F> IGNIS_DEV void for_range(const Range& r, bool vec, F& f) {
  int64 i = r.begin;
  if (vec) {
    int64 vec_end = r.begin + ((r.end - r.begin) & ~(int64)3);
    for (int64 j = r.begin + 4 * (int64)threadIdx.x; j < vec_end; j += 4 * (int64)blockDim.x)
      f.template apply<4>(j);
    i = vec_end;
  }
  for (int64 j = i + threadIdx.x; j < r.end; j += blockDim.x) f.template apply<1>(j);
}

IGNIS_DEV bool aligned(int64 a, int bytes) { return (a & (int64)(bytes - 1)) == 0; }

IGNIS_DEV bool skip(const float* found_inf) { return found_inf != 0 && *found_inf != 0.0f; }

// The learning rate: a float32 or float64 device scalar (float64 keeps float64 updates exact).
IGNIS_DEV double read_lr(const void* lr, int is_double) {
  return is_double ? *reinterpret_cast<const double*>(lr) : (double)*reinterpret_cast<const float*>(lr);
}

}  // namespace optim

// --- step counters -------------------------------------------------------------------------------

// One thread per tensor: the float32 step counter at slot `slot` goes up by one, unless the
// found-inf flag is set (the whole step is skipped then).
extern "C" __global__ void ignis_optim_step_count(const int64* table, int T, int K, int B, int slot,
                                                  const float* found_inf) {
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= T || optim::skip(found_inf)) return;
  float* step = reinterpret_cast<float*>(table[(int64)slot * T + t]);
  *step = *step + 1.0f;
}

// --- SGD -----------------------------------------------------------------------------------------
// Slots: 0 param P, 1 grad G, 2 momentum buffer S (0 without momentum), 3 float32 master
// (0: update P itself), 4 step counter (already incremented for this step).
namespace optim {

template <class P, class G, class S> struct SgdElem {
  typedef typename math_type<S>::type M;
  int64 p, g, buf, master;
  M lr, momentum, dampening, wd;
  bool nesterov, first;

  template <int W> IGNIS_DEV void apply(int64 i) {
    M x[W], d[W], b[W];
    if (master) load<W, M, float>(master, i, x); else load<W, M, P>(p, i, x);
    load<W, M, G>(g, i, d);
    if (buf && !first) load<W, M, S>(buf, i, b);
    for (int k = 0; k < W; ++k) {
      if (wd != (M)0) d[k] = d[k] + wd * x[k];
      if (buf) {
        b[k] = first ? d[k] : momentum * b[k] + ((M)1 - dampening) * d[k];
        d[k] = nesterov ? d[k] + momentum * b[k] : b[k];
      }
      x[k] = x[k] - lr * d[k];
    }
    if (buf) store<W, M, S>(buf, i, b);
    if (master) store<W, M, float>(master, i, x);
    store<W, M, P>(p, i, x);
  }
};

}  // namespace optim

template <class P, class G, class S>
__global__ void optim_sgd(const int64* table, int T, int K, int B, int64 chunk, const void* lr,
                          int lr_double, const float* found_inf, double momentum, double dampening,
                          double weight_decay, int nesterov) {
  using namespace optim;
  if (skip(found_inf)) return;
  Table tb = {table, T, K, B};
  Range r = block_range(tb, chunk);
  SgdElem<P, G, S> f;
  typedef typename SgdElem<P, G, S>::M M;
  f.p = tb.ptr(0, r.tensor);
  f.g = tb.ptr(1, r.tensor);
  f.buf = tb.ptr(2, r.tensor);
  f.master = tb.ptr(3, r.tensor);
  f.first = *reinterpret_cast<const float*>(tb.ptr(4, r.tensor)) <= 1.0f;
  f.lr = (M)read_lr(lr, lr_double);
  f.momentum = (M)momentum;
  f.dampening = (M)dampening;
  f.wd = (M)weight_decay;
  f.nesterov = nesterov != 0;
  int ap = sizeof(P) == 2 ? 8 : 16, ag = sizeof(G) == 2 ? 8 : 16;
  bool vec = aligned(f.p, ap) && aligned(f.g, ag) && aligned(f.buf, 16) && aligned(f.master, 16);
  for_range(r, vec, f);
}

// --- Adam / AdamW --------------------------------------------------------------------------------
// Slots: 0 param P, 1 grad G, 2 exp_avg S, 3 exp_avg_sq S, 4 max_exp_avg_sq S (0 without
// amsgrad), 5 float32 master (0: update P itself), 6 step counter (already incremented).
namespace optim {

template <class P, class G, class S> struct AdamElem {
  typedef typename math_type<S>::type M;
  int64 p, g, m, v, vmax, master;
  M beta1, beta2, eps, wd, decay, step_size, bc2_sqrt;
  bool decoupled;

  template <int W> IGNIS_DEV void apply(int64 i) {
    M x[W], d[W], a[W], s[W], mx[W];
    if (master) load<W, M, float>(master, i, x); else load<W, M, P>(p, i, x);
    load<W, M, G>(g, i, d);
    load<W, M, S>(m, i, a);
    load<W, M, S>(v, i, s);
    if (vmax) load<W, M, S>(vmax, i, mx);
    for (int k = 0; k < W; ++k) {
      if (decoupled) x[k] = x[k] * decay;
      else if (wd != (M)0) d[k] = d[k] + wd * x[k];
      a[k] = beta1 * a[k] + ((M)1 - beta1) * d[k];
      s[k] = beta2 * s[k] + ((M)1 - beta2) * d[k] * d[k];
      M second = s[k];
      if (vmax) {
        mx[k] = mx[k] > s[k] ? mx[k] : s[k];
        second = mx[k];
      }
      M denom = sqrt(second) / bc2_sqrt + eps;
      x[k] = x[k] - step_size * (a[k] / denom);
    }
    store<W, M, S>(m, i, a);
    store<W, M, S>(v, i, s);
    if (vmax) store<W, M, S>(vmax, i, mx);
    if (master) store<W, M, float>(master, i, x);
    store<W, M, P>(p, i, x);
  }
};

}  // namespace optim

template <class P, class G, class S>
__global__ void optim_adam(const int64* table, int T, int K, int B, int64 chunk, const void* lr,
                           int lr_double, const float* found_inf, double beta1, double beta2, double eps,
                           double weight_decay, int decoupled) {
  using namespace optim;
  if (skip(found_inf)) return;
  Table tb = {table, T, K, B};
  Range r = block_range(tb, chunk);
  AdamElem<P, G, S> f;
  typedef typename AdamElem<P, G, S>::M M;
  f.p = tb.ptr(0, r.tensor);
  f.g = tb.ptr(1, r.tensor);
  f.m = tb.ptr(2, r.tensor);
  f.v = tb.ptr(3, r.tensor);
  f.vmax = tb.ptr(4, r.tensor);
  f.master = tb.ptr(5, r.tensor);
  double step = (double)*reinterpret_cast<const float*>(tb.ptr(6, r.tensor));
  // Bias corrections in double, once per block: exact enough for any step count.
  double bc1 = 1.0 - pow(beta1, step);
  double bc2 = 1.0 - pow(beta2, step);
  M lr_m = (M)read_lr(lr, lr_double);
  f.beta1 = (M)beta1;
  f.beta2 = (M)beta2;
  f.eps = (M)eps;
  f.wd = (M)weight_decay;
  f.decoupled = decoupled != 0;
  f.decay = (M)1 - lr_m * (M)weight_decay;
  f.step_size = lr_m / (M)bc1;
  f.bc2_sqrt = (M)sqrt(bc2);
  int ap = sizeof(P) == 2 ? 8 : 16, ag = sizeof(G) == 2 ? 8 : 16;
  bool vec = aligned(f.p, ap) && aligned(f.g, ag) && aligned(f.m, 16) && aligned(f.v, 16) &&
             aligned(f.vmax, 16) && aligned(f.master, 16);
  for_range(r, vec, f);
}

// --- global L2 norm: two deterministic stages ----------------------------------------------------
// Stage 1: block b writes the sum of squares of its chunk (slot 0) to partial[b] (float32
// accumulation for float32/16-bit data, float64 for float64). Stage 2: one block adds the B
// partials in a fixed order and writes sqrt(total) as float32.
namespace optim {

template <class A> IGNIS_DEV A block_sum(A v, A* shared) {
  v = warp_sum(v);
  int lane = threadIdx.x & (warp_size - 1), warp = threadIdx.x / warp_size;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  int warps = (blockDim.x + warp_size - 1) / warp_size;
  v = threadIdx.x < warps ? shared[threadIdx.x] : (A)0;
  if (warp == 0) v = warp_sum(v);
  return v;  // valid in thread 0
}

template <class T> struct SumSq {
  typedef typename math_type<T>::type M;
  int64 x;
  M acc;
  template <int W> IGNIS_DEV void apply(int64 i) {
    M v[W];
    load<W, M, T>(x, i, v);
    for (int k = 0; k < W; ++k) acc += v[k] * v[k];
  }
};

}  // namespace optim

template <class T>
__global__ void optim_sumsq_partial(const int64* table, int T_, int K, int B, int64 chunk,
                                    double* partial) {
  using namespace optim;
  typedef typename SumSq<T>::M M;
  __shared__ M shared[32];
  Table tb = {table, T_, K, B};
  Range r = block_range(tb, chunk);
  SumSq<T> f;
  f.x = tb.ptr(0, r.tensor);
  f.acc = (M)0;
  for_range(r, aligned(f.x, sizeof(T) == 2 ? 8 : 16), f);
  M total = block_sum(f.acc, shared);
  if (threadIdx.x == 0) partial[blockIdx.x] = (double)total;
}

// One block. out[0] = sqrt(sum of partial[0..n)) as O (float32, or float64 for float64 data).
template <class O> __global__ void optim_norm_final(const double* partial, int n, O* out) {
  __shared__ double shared[32];
  double acc = 0.0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) acc += partial[i];
  acc = optim::block_sum(acc, shared);
  if (threadIdx.x == 0) out[0] = (O)sqrt(acc);
}

// --- scale with a non-finite check ---------------------------------------------------------------
// x *= f for slot 0 of every tensor, where f comes from the device scalar `factor` (of type F,
// in whose precision f is computed: float32, or float64 for a float64 norm):
//   mode 0: f = factor[0];  mode 1: f = 1 / factor[0] (loss-scale unscaling);
//   mode 2: f = min(1, max_norm / (factor[0] + 1e-6)) (gradient clipping; factor is the norm).
// With found_inf, any non-finite input element sets found_inf[0] = 1.
namespace optim {

template <class T> struct Scale {
  typedef typename math_type<T>::type M;
  int64 x;
  M f;
  bool check, bad;
  template <int W> IGNIS_DEV void apply(int64 i) {
    M v[W];
    load<W, M, T>(x, i, v);
    for (int k = 0; k < W; ++k) {
      if (check && !isfinite(v[k])) bad = true;
      v[k] = v[k] * f;
    }
    store<W, M, T>(x, i, v);
  }
};

}  // namespace optim

template <class T, class F>
__global__ void optim_scale(const int64* table, int T_, int K, int B, int64 chunk,
                            const F* factor, int mode, double max_norm, float* found_inf) {
  using namespace optim;
  Table tb = {table, T_, K, B};
  Range r = block_range(tb, chunk);
  Scale<T> f;
  typedef typename Scale<T>::M M;
  f.x = tb.ptr(0, r.tensor);
  F s = factor[0];
  if (mode == 1) {
    s = F(1) / s;
  } else if (mode == 2) {
    F c = F(max_norm) / (s + F(1e-6));
    s = c < F(1) ? c : F(1);  // min(1, c); a NaN c gives 1, as fminf(1, NaN) does
  }
  f.f = (M)s;
  f.check = found_inf != 0;
  f.bad = false;
  for_range(r, aligned(f.x, sizeof(T) == 2 ? 8 : 16), f);
  if (f.bad) *found_inf = 1.0f;  // every writer writes the same value
}

// --- zero: x = +0 for every element (a NaN or Inf in x is overwritten, unlike x * 0) ----------

namespace optim {

template <class T> struct Zero {
  typedef typename math_type<T>::type M;
  int64 x;
  template <int W> IGNIS_DEV void apply(int64 i) {
    M v[W];
    for (int k = 0; k < W; ++k) v[k] = M(0);
    store<W, M, T>(x, i, v);
  }
};

}  // namespace optim

template <class T>
__global__ void optim_zero(const int64* table, int T_, int K, int B, int64 chunk) {
  using namespace optim;
  Table tb = {table, T_, K, B};
  Range r = block_range(tb, chunk);
  Zero<T> f;
  f.x = tb.ptr(0, r.tensor);
  for_range(r, aligned(f.x, sizeof(T) == 2 ? 8 : 16), f);
}

// --- dynamic loss scale update (one thread) ------------------------------------------------------
// After a step: on overflow the scale backs off and the growth tracker restarts; after
// growth_interval clean steps in a row the scale grows (if the result stays finite).
extern "C" __global__ void ignis_optim_update_scale(float* scale, int* growth_tracker,
                                                    const float* found_inf, float growth_factor,
                                                    float backoff_factor, int growth_interval) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  if (*found_inf != 0.0f) {
    *scale = *scale * backoff_factor;
    *growth_tracker = 0;
    return;
  }
  int clean = *growth_tracker + 1;
  if (clean >= growth_interval) {
    float grown = *scale * growth_factor;
    if (isfinite(grown)) *scale = grown;
    clean = 0;
  }
  *growth_tracker = clean;
}

}  // namespace ignis
