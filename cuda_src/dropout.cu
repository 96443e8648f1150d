// dropout.cu - dropout with its keep mask drawn in the kernel from the Philox stream of
// ignis.random (see philox.cuh and ignis/_array/random.py).
//
// Element i uses word i of the stream (seed, offset): lane i % 4 of block offset + i / 4, the
// word ignis.random.rand would turn into its float32 value u = (w >> 8) * 2**-24. The element is
// kept when u >= p, i.e. when (w >> 8) >= threshold = ceil(p * 2**24) (p as float32), so a mask
// equals rand(shape, dtype=float32) >= p drawn from the same stream. A call uses ceil(n / 4)
// blocks. Kept elements become x * scale computed in W (float for float16/bfloat16/float32,
// double for float64) and rounded once; dropped ones become 0. The mask is one byte (bool) each.
//
// How the work is split (both kernels): with VEC, a thread takes steps of E consecutive
// elements (E = Step<T>::elems: 32 for the 16-bit types, 16 otherwise), moving x, y and the
// gradient as 16-byte vectors and the mask as 16-byte groups of 16 bools. A forward step issues
// its loads first, then runs its E / 4 Philox blocks (one per 4 elements) in a loop the
// compiler keeps rolled, so the loads stay in flight while the generator runs (unrolled, the
// scheduler sinks each load next to its first use and a warp waits for memory several times a
// step). The n % E elements after the last whole step, and every element without VEC (an
// operand not 16-byte aligned), take the scalar path: one Philox block (4 elements) per thread.
// Both paths compute the same values, bit for bit.
//
// dropout_forward_state is the forward kernel for captured CUDA graphs: it reads the stream's
// seed and base block from a device buffer (ignis.random's graph-safe draws) instead of taking
// them as launch values, so that each replay draws a new mask.
#include "philox.cuh"

namespace ignis {
namespace nn {

constexpr int dropout_threads = 256;  // the block size the host launches

// Elements per vector step: 16 bools fill one 16-byte mask store; the 16-bit types take 32 so
// that a step still reads 64 bytes of data (several loads in flight per thread).
template <class T> struct Step {
  static constexpr int elems = sizeof(T) == 2 ? 32 : 16;
  static constexpr int data_vecs = elems * (int)sizeof(T) / 16;  // 16-byte vectors of x/y/grad
  static constexpr int mask_vecs = elems / 16;                   // 16-byte vectors of the mask
  static constexpr int per_vec = 16 / (int)sizeof(T);            // elements in one data vector
  static_assert(elems % 16 == 0 && elems <= 32, "a step's keep bits fit one 32-bit word");
};

// 16 bytes seen as raw words (to load and store) or as elements (to compute).
template <class T> union Vec16 {
  uint4 raw;
  T v[16 / sizeof(T)];
};

template <class T, class W> IGNIS_DEV T dropped(T x, bool keep, W scale) {
  return from_acc<T>(keep ? (W)to_acc(x) * scale : (W)0);
}

// The keep flags of the 4 elements of one Philox block as 4 bits, element 0 lowest.
IGNIS_DEV uint32 keep_nibble(const rng::Words& r, uint32 threshold) {
  uint32 bits = 0;
#pragma unroll
  for (int e = 0; e < 4; ++e) bits |= (uint32)((r.w[e] >> 8) >= threshold) << e;
  return bits;
}

// The low 4 bits of `bits` as 4 bytes of 0 or 1 (bit e -> byte e): the multiply adds copies of
// the nibble shifted by 0, 7, 14 and 21, which puts bit e at bit 8e; the copies do not overlap,
// so nothing carries.
IGNIS_DEV uint32 nibble_bytes(uint32 bits) { return ((bits & 0xfu) * 0x00204081u) & 0x01010101u; }

IGNIS_DEV bool byte_set(uint32 word, int e) { return ((word >> (8 * e)) & 0xffu) != 0u; }

// Scalar path: Philox blocks j >= first, one per thread (grid-stride), elements 4j .. 4j+3 < n.
template <class T, class W>
IGNIS_DEV void dropout_forward_blocks(const T* __restrict__ x, T* __restrict__ y, bool* __restrict__ mask,
                                      int64 n, int64 first, uint32 k0, uint32 k1, uint64 offset,
                                      uint32 threshold, W scale) {
  const int64 blocks = (n + 3) / 4;
  for (int64 j = first + global_index(); j < blocks; j += grid_stride()) {
    rng::Words r = rng::stream_block(offset + (uint64)j, k0, k1);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int64 i = 4 * j + e;
      if (i < n) {
        const bool keep = (r.w[e] >> 8) >= threshold;
        y[i] = dropped(x[i], keep, scale);
        mask[i] = keep;
      }
    }
  }
}

template <class T, class W, bool VEC>
IGNIS_DEV void dropout_forward_all(const T* __restrict__ x, T* __restrict__ y, bool* __restrict__ mask, int64 n,
                                   uint32 k0, uint32 k1, uint64 offset, uint32 threshold, W scale) {
  typedef Step<T> S;
  int64 first = 0;  // the first Philox block left to the scalar path
  if constexpr (VEC) {
    const int64 steps = n / S::elems;
    const uint4* xv = reinterpret_cast<const uint4*>(x);
    uint4* yv = reinterpret_cast<uint4*>(y);
    uint4* mv = reinterpret_cast<uint4*>(mask);
    IGNIS_GRID_STRIDE_LOOP(s, steps) {
      Vec16<T> d[S::data_vecs];
#pragma unroll
      for (int v = 0; v < S::data_vecs; ++v) d[v].raw = xv[s * S::data_vecs + v];
      uint32 bits = 0;  // bit i: keep element i of the step
      const uint64 b0 = offset + (uint64)s * (S::elems / 4);
#pragma unroll 1
      for (int b = 0; b < S::elems / 4; ++b)
        bits |= keep_nibble(rng::stream_block(b0 + b, k0, k1), threshold) << (4 * b);
#pragma unroll
      for (int v = 0; v < S::data_vecs; ++v) {
#pragma unroll
        for (int e = 0; e < S::per_vec; ++e) {
          const int i = v * S::per_vec + e;  // element of the step, a compile-time constant
          d[v].v[e] = dropped(d[v].v[e], ((bits >> i) & 1u) != 0u, scale);
        }
        yv[s * S::data_vecs + v] = d[v].raw;
      }
#pragma unroll
      for (int v = 0; v < S::mask_vecs; ++v)
        mv[s * S::mask_vecs + v] = make_uint4(nibble_bytes(bits >> (16 * v)), nibble_bytes(bits >> (16 * v + 4)),
                                              nibble_bytes(bits >> (16 * v + 8)), nibble_bytes(bits >> (16 * v + 12)));
    }
    first = steps * (S::elems / 4);
  }
  dropout_forward_blocks<T, W>(x, y, mask, n, first, k0, k1, offset, threshold, scale);
}

template <class T, class W, bool VEC>
__global__ void __launch_bounds__(dropout_threads)
    dropout_forward(const T* __restrict__ x, T* __restrict__ y, bool* __restrict__ mask, int64 n, uint32 k0,
                    uint32 k1, uint64 offset, uint32 threshold, W scale) {
  dropout_forward_all<T, W, VEC>(x, y, mask, n, k0, k1, offset, threshold, scale);
}

// The same with the stream read from device memory (see philox.cuh: stream_from_state): inside a
// captured graph, each replay draws from the (seed, offset) the host wrote before launching it.
template <class T, class W, bool VEC>
__global__ void __launch_bounds__(dropout_threads)
    dropout_forward_state(const T* __restrict__ x, T* __restrict__ y, bool* __restrict__ mask, int64 n,
                          const uint64* __restrict__ state, uint64 offset, uint32 threshold, W scale) {
  const rng::StreamPos at = rng::stream_from_state(state, offset);
  dropout_forward_all<T, W, VEC>(x, y, mask, n, at.k0, at.k1, at.offset, threshold, scale);
}

// grad_x = mask ? grad * scale : 0, in W, rounded once. A mask byte counts as kept when nonzero.
template <class T, class W, bool VEC>
__global__ void __launch_bounds__(dropout_threads)
    dropout_backward(const T* __restrict__ g, const bool* __restrict__ mask, T* __restrict__ out, int64 n,
                     W scale) {
  typedef Step<T> S;
  int64 first = 0;  // the first element left to the scalar path
  if constexpr (VEC) {
    const int64 steps = n / S::elems;
    const uint4* gv = reinterpret_cast<const uint4*>(g);
    const uint4* mv = reinterpret_cast<const uint4*>(mask);
    uint4* ov = reinterpret_cast<uint4*>(out);
    IGNIS_GRID_STRIDE_LOOP(s, steps) {
      uint4 m[S::mask_vecs];
      Vec16<T> d[S::data_vecs];
#pragma unroll
      for (int v = 0; v < S::mask_vecs; ++v) m[v] = mv[s * S::mask_vecs + v];
#pragma unroll
      for (int v = 0; v < S::data_vecs; ++v) d[v].raw = gv[s * S::data_vecs + v];
#pragma unroll
      for (int v = 0; v < S::data_vecs; ++v) {
#pragma unroll
        for (int e = 0; e < S::per_vec; ++e) {
          const int i = v * S::per_vec + e;  // element of the step, a compile-time constant
          const uint4& mw = m[i / 16];
          const int w = (i % 16) / 4;
          const uint32 word = w == 0 ? mw.x : w == 1 ? mw.y : w == 2 ? mw.z : mw.w;
          d[v].v[e] = dropped(d[v].v[e], byte_set(word, i % 4), scale);
        }
        ov[s * S::data_vecs + v] = d[v].raw;
      }
    }
    first = steps * S::elems;
  }
  const uint8* mb = reinterpret_cast<const uint8*>(mask);
  for (int64 i = first + global_index(); i < n; i += grid_stride()) out[i] = dropped(g[i], mb[i] != 0, scale);
}

}  // namespace nn
}  // namespace ignis
