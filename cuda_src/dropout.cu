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
// How the work is split (both kernels): with VEC, the elements are cut into units of one
// 16-byte vector of x, y and the gradient (Unit<T>: 8 elements of the 16-bit types, two Philox
// blocks; 4 of float32, one block; 2 of float64, half a block) and the mask bytes of a unit move
// as one 8-, 4- or 2-byte access. A warp takes tiles of 32 x units_per_lane units, lane l unit
// l, l + 32, ...: each load and store instruction of the warp covers one contiguous span (512
// bytes of data, 128 of mask for float32), so every 32-byte sector is used whole by one
// instruction. A forward tile issues its loads first, then runs its Philox blocks in a loop the
// compiler keeps rolled, so the loads stay in flight while the generator runs (unrolled, the
// scheduler sinks each load next to its first use and a warp waits for memory several times a
// tile). The elements after the last whole tile (a tile: 256 float64, 512 float32 or 1024
// 16-bit elements), and every element without VEC (an operand not 16-byte aligned), take the scalar path: one
// Philox block (4 elements) per thread forward, one element backward. Both paths compute the
// same values, bit for bit.
//
// dropout_forward_state is the forward kernel for captured CUDA graphs: it reads the stream's
// seed and base block from a device buffer (ignis.random's graph-safe draws) instead of taking
// them as launch values, so that each replay draws a new mask.
#include "philox.cuh"

namespace ignis {
namespace nn {

constexpr int dropout_threads = 256;  // the block size the host launches

// One unit of the vector path: a 16-byte vector of elements and their mask bytes.
template <class T> struct Unit {
  static constexpr int elems = 16 / (int)sizeof(T);      // 8, 4 or 2
  static constexpr int blocks = elems >= 4 ? elems / 4 : 1;  // Philox blocks it draws
};

constexpr int units_per_lane = 4;  // units a lane moves per tile (loads in flight per thread)

// Elements of a warp's tile: the host's dropout_tile.
template <class T> struct Tile {
  static constexpr int64 elems = 32 * units_per_lane * Unit<T>::elems;
};

// The mask bytes of one unit, moved as one access of that size.
template <int N> struct MaskWord;
template <> struct MaskWord<2> { typedef unsigned short type; };
template <> struct MaskWord<4> { typedef uint32 type; };
template <> struct MaskWord<8> { typedef uint2 type; };

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

// The low N bits of `bits` as the N mask bytes of a unit (bit e -> byte e).
IGNIS_DEV unsigned short mask_word(uint32 bits, MaskWord<2>*) {
  return (unsigned short)nibble_bytes(bits & 0x3u);
}
IGNIS_DEV uint32 mask_word(uint32 bits, MaskWord<4>*) { return nibble_bytes(bits); }
IGNIS_DEV uint2 mask_word(uint32 bits, MaskWord<8>*) {
  return make_uint2(nibble_bytes(bits), nibble_bytes(bits >> 4));
}

// Byte e of a unit's mask is nonzero (e a compile-time constant after unrolling).
IGNIS_DEV bool mask_byte_set(unsigned short w, int e) { return byte_set((uint32)w, e); }
IGNIS_DEV bool mask_byte_set(uint32 w, int e) { return byte_set(w, e); }
IGNIS_DEV bool mask_byte_set(uint2 w, int e) { return byte_set(e < 4 ? w.x : w.y, e % 4); }

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

// The keep bits of unit q (elements q * E ..): E bits, element 0 lowest. Block j < Unit::blocks
// of the unit's draw; float64's unit is half of block q / 2 (lane parity picks the half).
template <class T>
IGNIS_DEV uint32 unit_keep_bits(int64 q, int j, uint32 k0, uint32 k1, uint64 offset, uint32 threshold) {
  typedef Unit<T> U;
  if constexpr (U::elems >= 4) {
    return keep_nibble(rng::stream_block(offset + (uint64)q * U::blocks + (uint64)j, k0, k1), threshold);
  } else {
    const uint32 nib = keep_nibble(rng::stream_block(offset + (uint64)(q >> 1), k0, k1), threshold);
    return (nib >> (2 * (int)(q & 1))) & 0x3u;
  }
}

template <class T, class W, bool VEC>
IGNIS_DEV void dropout_forward_all(const T* __restrict__ x, T* __restrict__ y, bool* __restrict__ mask, int64 n,
                                   uint32 k0, uint32 k1, uint64 offset, uint32 threshold, W scale) {
  typedef Unit<T> U;
  typedef typename MaskWord<U::elems>::type M;
  constexpr int L = units_per_lane;
  constexpr int bits_per_draw = U::elems >= 4 ? 4 : U::elems;  // keep bits one Philox draw gives
  static_assert(L * U::elems <= 32, "a lane's keep bits fit one 32-bit word");
  int64 first = 0;  // the first Philox block left to the scalar path
  if constexpr (VEC) {
    const int64 tiles = n / Tile<T>::elems;
    const uint4* xv = reinterpret_cast<const uint4*>(x);
    uint4* yv = reinterpret_cast<uint4*>(y);
    M* mv = reinterpret_cast<M*>(mask);
    const int lane = (int)(threadIdx.x & 31);
    const int64 warps = grid_stride() >> 5;
    for (int64 t = global_index() >> 5; t < tiles; t += warps) {
      const int64 q0 = t * (32 * L) + lane;  // this lane's first unit; unit k is q0 + 32 k
      Vec16<T> d[L];
#pragma unroll
      for (int k = 0; k < L; ++k) d[k].raw = xv[q0 + 32 * k];
      uint32 bits = 0;  // bit k * E + e: keep element e of unit k
#pragma unroll 1
      for (int j = 0; j < L * U::blocks; ++j) {
        const int k = j / U::blocks;
        bits |= unit_keep_bits<T>(q0 + 32 * k, j - k * U::blocks, k0, k1, offset, threshold)
                << (bits_per_draw * j);
      }
#pragma unroll
      for (int k = 0; k < L; ++k) {
#pragma unroll
        for (int e = 0; e < U::elems; ++e)
          d[k].v[e] = dropped(d[k].v[e], ((bits >> (k * U::elems + e)) & 1u) != 0u, scale);
        yv[q0 + 32 * k] = d[k].raw;
      }
#pragma unroll
      for (int k = 0; k < L; ++k) mv[q0 + 32 * k] = mask_word(bits >> (k * U::elems), (MaskWord<U::elems>*)0);
    }
    first = tiles * (Tile<T>::elems / 4);
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
// Blocks of 256 threads per multiprocessor the backward kernel is built for: 8 for the 4- and
// 8-byte types (a full multiprocessor: at most 32 registers, which they fit without spilling; 80
// bytes of loads in flight per float32 thread; a grid capped at 32 blocks per multiprocessor runs
// in 4 even waves). The 16-bit types need a few more registers: 0, no hint (34-38 registers, 6
// blocks, 96 bytes in flight per thread); any hint >= 1 lets the compiler grow them to 48-60.
template <class T> struct BackwardOccupancy {
  static constexpr int blocks = sizeof(T) == 2 ? 0 : 8;
};

template <class T, class W, bool VEC>
__global__ void __launch_bounds__(dropout_threads, BackwardOccupancy<T>::blocks)
    dropout_backward(const T* __restrict__ g, const bool* __restrict__ mask, T* __restrict__ out, int64 n,
                     W scale) {
  typedef Unit<T> U;
  typedef typename MaskWord<U::elems>::type M;
  constexpr int L = units_per_lane;
  int64 first = 0;  // the first element left to the scalar path
  if constexpr (VEC) {
    const int64 tiles = n / Tile<T>::elems;
    const uint4* gv = reinterpret_cast<const uint4*>(g);
    const M* mv = reinterpret_cast<const M*>(mask);
    uint4* ov = reinterpret_cast<uint4*>(out);
    const int lane = (int)(threadIdx.x & 31);
    const int64 warps = grid_stride() >> 5;
    for (int64 t = global_index() >> 5; t < tiles; t += warps) {
      const int64 q0 = t * (32 * L) + lane;  // this lane's first unit; unit k is q0 + 32 k
      M m[L];
      Vec16<T> d[L];
#pragma unroll
      for (int k = 0; k < L; ++k) m[k] = mv[q0 + 32 * k];
#pragma unroll
      for (int k = 0; k < L; ++k) d[k].raw = gv[q0 + 32 * k];
#pragma unroll
      for (int k = 0; k < L; ++k) {
#pragma unroll
        for (int e = 0; e < U::elems; ++e) d[k].v[e] = dropped(d[k].v[e], mask_byte_set(m[k], e), scale);
        ov[q0 + 32 * k] = d[k].raw;
      }
    }
    first = tiles * Tile<T>::elems;
  }
  const uint8* mb = reinterpret_cast<const uint8*>(mask);
  for (int64 i = first + global_index(); i < n; i += grid_stride()) out[i] = dropped(g[i], mb[i] != 0, scale);
}

}  // namespace nn
}  // namespace ignis
