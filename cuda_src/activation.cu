// activation.cu - fused backward passes of the pointwise activations: grad_in = grad * f'(.)
// in one kernel (one read of grad and of the saved array, one write), instead of the chain of
// elementwise ops the derivative formulas would take.
//
// Kinds (the KIND template argument; ignis/_array/_cuda_backend/activation.py keeps the same
// numbering) and the saved array s each one reads:
//   0 gelu (exact)   s = x:  Phi(x) + x phi(x)
//   1 gelu (tanh)    s = x:  0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 c x^2),
//                            t = tanh(k (x + c x^3)), k = sqrt(2 / pi), c = 0.044715
//   2 silu           s = x:  sig(x) (1 + x (1 - sig(x)))
//   3 sigmoid        s = y:  y (1 - y)
//   4 tanh           s = y:  1 - y^2
//   5 relu           s = y:  y > 0 ? 1 : 0 (a select: grad passes or is 0, NaN y gives 0)
// The formulas are the plain ones, so +-Inf inputs of gelu and silu give NaN (inf * 0) as
// PyTorch's kernels do.
//
// Types: T is the saved array's element type, G the gradient's (and the output's): G == T, or
// G = float with a 16-bit T (gradients of 16-bit tensors accumulate in float32). Math runs in W =
// double for float64, float otherwise, and the result is rounded once into G.
//
// Work split: with VEC every thread takes steps of V = 16 / max(sizeof(T), sizeof(G)) elements,
// loading grad and s and storing the result as one naturally aligned vector each (16 bytes for
// the wider type); the n % V tail, and every element without VEC (an operand not aligned to its
// vector), take the scalar loop. Both paths compute the same values, bit for bit.
#include "ignis_types.cuh"

namespace ignis {
namespace act {

constexpr int threads = 256;  // the block size the host launches

IGNIS_DEV float a_exp(float v) { return expf(v); }
IGNIS_DEV double a_exp(double v) { return exp(v); }
IGNIS_DEV float a_tanh(float v) { return tanhf(v); }
IGNIS_DEV double a_tanh(double v) { return tanh(v); }
IGNIS_DEV float a_erfc(float v) { return erfcf(v); }
IGNIS_DEV double a_erfc(double v) { return erfc(v); }
IGNIS_DEV float a_abs(float v) { return fabsf(v); }
IGNIS_DEV double a_abs(double v) { return fabs(v); }

// sigmoid with exp of a non-positive argument only (no overflow for large |x|)
template <class W> IGNIS_DEV W sigmoid(W x) {
  const W e = a_exp(-a_abs(x));
  return x >= W(0) ? W(1) / (W(1) + e) : e / (W(1) + e);
}

// grad * f'(s) in W
template <int KIND, class W> IGNIS_DEV W backward(W g, W s) {
  if constexpr (KIND == 0) {
    // Phi through erfc keeps its relative accuracy for x << 0 (as the forward kernel does)
    const W cdf = W(0.5) * a_erfc(-s * W(0.7071067811865476));
    const W pdf = a_exp(W(-0.5) * s * s) * W(0.3989422804014327);  // 1 / sqrt(2 pi)
    return g * (cdf + s * pdf);
  } else if constexpr (KIND == 1) {
    const W k = W(0.7978845608028654);  // sqrt(2 / pi)
    const W c = W(0.044715);
    const W s2 = s * s;
    const W t = a_tanh(k * (s + c * s2 * s));
    const W d = W(0.5) * (W(1) + t) + W(0.5) * s * (W(1) - t * t) * (k * (W(1) + W(3) * c * s2));
    return g * d;
  } else if constexpr (KIND == 2) {
    const W sig = sigmoid(s);
    return g * (sig * (W(1) + s * (W(1) - sig)));
  } else if constexpr (KIND == 3) {
    return g * (s * (W(1) - s));
  } else if constexpr (KIND == 4) {
    return g * (W(1) - s * s);
  } else {
    return s > W(0) ? g : W(0);
  }
}

template <class T> struct work { typedef float type; };
template <> struct work<double> { typedef double type; };

template <class A, class B> struct wider { static constexpr int size = sizeof(A) > sizeof(B) ? sizeof(A) : sizeof(B); };

// V elements moved as one aligned access
template <class T, int V> struct alignas(sizeof(T) * V) Vec {
  T v[V];
};

template <class T, class G, int KIND>
IGNIS_DEV G element(G g, T s) {
  typedef typename work<G>::type W;
  return from_acc<G>((W)backward<KIND, W>((W)to_acc(g), (W)to_acc(s)));
}

// out[i] = grad[i] * f'(s[i]) for i < n; out may be grad itself (the identical array).
template <class T, class G, int KIND, bool VEC>
__global__ void __launch_bounds__(threads)
    activation_backward(const G* grad, const T* __restrict__ s, G* out, int64 n) {
  int64 first = 0;  // the first element left to the scalar loop
  if constexpr (VEC) {
    constexpr int V = 16 / wider<T, G>::size;
    const int64 steps = n / V;
    const Vec<G, V>* gv = reinterpret_cast<const Vec<G, V>*>(grad);
    const Vec<T, V>* sv = reinterpret_cast<const Vec<T, V>*>(s);
    Vec<G, V>* ov = reinterpret_cast<Vec<G, V>*>(out);
    IGNIS_GRID_STRIDE_LOOP(i, steps) {
      const Vec<G, V> a = gv[i];
      const Vec<T, V> b = sv[i];
      Vec<G, V> r;
#pragma unroll
      for (int e = 0; e < V; ++e) r.v[e] = element<T, G, KIND>(a.v[e], b.v[e]);
      ov[i] = r;
    }
    first = steps * V;
  }
  for (int64 i = first + global_index(); i < n; i += grid_stride()) out[i] = element<T, G, KIND>(grad[i], s[i]);
}

}  // namespace act
}  // namespace ignis
