// elementwise.cu - the elementwise kernels of NvArray: unary and binary ops, where, copy/cast
// (with a tiled transposing copy), fill and arange.
//
// Two layouts per family (three for binary):
//   *_contig:  every array operand is dense with the output's shape (scalars come as values).
//              V elements per access (one 16-byte load/store for the widest element type when
//              the caller found every pointer aligned, V = 1 otherwise), U accesses in flight
//              per thread, grid-stride loop with 64-bit indices.
//   *_strided: any shape of up to 8 dims (after the caller merged contiguous dims), byte
//              strides per operand (zero for broadcast dims), WIDE = 64-bit index division for
//              2**31 elements or more; U elements per thread in flight.
//   binary_bcast: one operand dense over the output, the other a row repeated over the leading
//              dims or a column held along the inner run (see there): vector accesses like
//              *_contig, the broadcast position kept without per-element division.
// Template arguments: Op (a functor of elementwise.cuh), W the work type the op computes in,
// TO the output element type, TA/TB/TC/TX/TS operand element types. An operand given as a
// scalar value (FORM/FORMS bits) is passed as a W parameter and its pointer is unused.
#include "elementwise.cuh"

namespace ignis {
namespace ew {

// Accesses in flight per thread (enumerators: an unused constexpr variable would warn).
enum : int { contig_unroll = 2, strided_unroll = 4, bcast_unroll = 4 };

// Loads operand elements as W: from an array (Pack of V) or from a scalar value.
template <class T, class W, int V, bool IS_VALUE> struct Operand {
  const T* p;
  W value;
  IGNIS_DEV void load(int64 vec_index, W (&out)[V]) const {
    if constexpr (IS_VALUE) {
#pragma unroll
      for (int k = 0; k < V; ++k) out[k] = value;
    } else if constexpr (V == 1) {
      out[0] = cast<W>(p[vec_index]);
    } else {
      Pack<T, V> pk = load_pack<T, V>(p, vec_index);
#pragma unroll
      for (int k = 0; k < V; ++k) out[k] = cast<W>(pk.v[k]);
    }
  }
  IGNIS_DEV W one(int64 i) const {
    if constexpr (IS_VALUE) return value;
    else return cast<W>(p[i]);
  }
  IGNIS_DEV W at_offset(int64 offset) const {
    if constexpr (IS_VALUE) return value;
    else return cast<W>(at<T>(reinterpret_cast<const char*>(p), offset));
  }
};

template <class T, int V> IGNIS_DEV void store_vec(T* out, int64 vec_index, const T (&v)[V]) {
  if constexpr (V == 1) {
    out[vec_index] = v[0];
  } else {
    Pack<T, V> pk;
#pragma unroll
    for (int k = 0; k < V; ++k) pk.v[k] = v[k];
    store_pack<T, V>(out, vec_index, pk);
  }
}

// Runs f(vec_index) for every full vector of V elements (U of them in flight per thread: f is
// split into load(u, index) and finish(u, index) so that all loads are issued first), then
// tail(i) for the last n % V elements.
template <int V, int U, class Load, class Finish, class Tail>
IGNIS_DEV void contig_loop(int64 n, Load load, Finish finish, Tail tail) {
  const int64 nvec = n / V;
  const int64 threads = grid_stride();
  for (int64 i = global_index(); i < nvec; i += U * threads) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (i + u * threads < nvec) load(u, i + u * threads);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (i + u * threads < nvec) finish(u, i + u * threads);
    }
  }
  if constexpr (V > 1) {
    for (int64 j = nvec * V + global_index(); j < n; j += threads) tail(j);
  }
}

// Runs body(linear index, byte offsets) for every element, U per thread in flight: offsets and
// loads of U elements first (load), then the stores (finish).
template <int NARG, bool WIDE, int U, class Load, class Finish>
IGNIS_DEV void strided_loop(int64 n, const StridedArgs<NARG>& s, Load load, Finish finish) {
  const int64 threads = grid_stride();
  for (int64 base = global_index(); base < n; base += U * threads) {
    int64 off[U][NARG];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      int64 i = base + u * threads;
      if (i < n) {
        offsets<NARG, WIDE>(s, i, off[u]);
        load(u, off[u]);
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (base + u * threads < n) finish(u, off[u]);
    }
  }
}

// --- unary ---------------------------------------------------------------------------------------

template <class Op, class W, class TO, class TX, int V>
__global__ void unary_contig(TO* out, const TX* x, int64 n) {
  Operand<TX, W, V, false> ix{x, W()};
  W vx[contig_unroll][V];
  contig_loop<V, contig_unroll>(
      n, [&](int u, int64 i) { ix.load(i, vx[u]); },
      [&](int u, int64 i) {
        TO r[V];
#pragma unroll
        for (int k = 0; k < V; ++k) r[k] = cast<TO>(Op::apply(vx[u][k]));
        store_vec<TO, V>(out, i, r);
      },
      [&](int64 j) { out[j] = cast<TO>(Op::apply(ix.one(j))); });
}

template <class Op, class W, class TO, class TX, bool WIDE>
__global__ void unary_strided(char* out, const char* x, int64 n, StridedArgs<2> s) {
  Operand<TX, W, 1, false> ix{reinterpret_cast<const TX*>(x), W()};
  W vx[strided_unroll];
  strided_loop<2, WIDE, strided_unroll>(
      n, s, [&](int u, const int64(&off)[2]) { vx[u] = ix.at_offset(off[1]); },
      [&](int u, const int64(&off)[2]) { at<TO>(out, off[0]) = cast<TO>(Op::apply(vx[u])); });
}

// --- binary --------------------------------------------------------------------------------------
// FORM: 0 both operands are arrays, 1 a is the scalar sa, 2 b is the scalar sb.

template <class Op, class W, class TO, class TA, class TB, int FORM, int V>
__global__ void binary_contig(TO* out, const TA* a, const TB* b, W sa, W sb, int64 n) {
  Operand<TA, W, V, FORM == 1> ia{a, sa};
  Operand<TB, W, V, FORM == 2> ib{b, sb};
  W va[contig_unroll][V], vb[contig_unroll][V];
  contig_loop<V, contig_unroll>(
      n,
      [&](int u, int64 i) {
        ia.load(i, va[u]);
        ib.load(i, vb[u]);
      },
      [&](int u, int64 i) {
        TO r[V];
#pragma unroll
        for (int k = 0; k < V; ++k) r[k] = cast<TO>(Op::apply(va[u][k], vb[u][k]));
        store_vec<TO, V>(out, i, r);
      },
      [&](int64 j) { out[j] = cast<TO>(Op::apply(ia.one(j), ib.one(j))); });
}

template <class Op, class W, class TO, class TA, class TB, int FORM, bool WIDE>
__global__ void binary_strided(char* out, const char* a, const char* b, W sa, W sb, int64 n,
                               StridedArgs<3> s) {
  Operand<TA, W, 1, FORM == 1> ia{reinterpret_cast<const TA*>(a), sa};
  Operand<TB, W, 1, FORM == 2> ib{reinterpret_cast<const TB*>(b), sb};
  W va[strided_unroll], vb[strided_unroll];
  strided_loop<3, WIDE, strided_unroll>(
      n, s,
      [&](int u, const int64(&off)[3]) {
        va[u] = ia.at_offset(off[1]);
        vb[u] = ib.at_offset(off[2]);
      },
      [&](int u, const int64(&off)[3]) { at<TO>(out, off[0]) = cast<TO>(Op::apply(va[u], vb[u])); });
}

// --- binary with one broadcast operand ------------------------------------------------------------
// ``out`` and the dense operand hold n elements in row-major order; the broadcast operand is
//   KIND 0 (row):    `inner` elements repeated n / inner times, element i reading bcast[i % inner]
//                    (b of shape [..., N] against [M, ..., N]: inner = N);
//   KIND 1 (column): n / inner elements, each held for a run of `inner`: bcast[i / inner]
//                    (b of shape [M, 1] against [M, N]: inner = N; one value: inner = n).
// SIDE 1: a is the broadcast operand, 2: b is (the numbering of FORM). V elements per access
// when the caller found inner % V == 0 and the pointers aligned: a row operand's V elements are
// then one vector, a column operand's V elements one value. bcast_unroll vectors in flight per
// thread, grid-stride loop; positions in the row or column come from a DivWalk, not a division.

// The elements an access holds, kept raw until used (16- and 8-bit types need half or a quarter
// of the registers that converted values would): a dense operand's V elements at vector j, a
// row operand's V elements at vector w.r, a column operand's one element w.q.
template <class T, int V, int KIND> struct Held {
  static constexpr int count = KIND == 0 ? V : 1;
  Pack<T, count> pk;
  IGNIS_DEV void load_dense(const T* p, int64 j) { pk = load_pack<T, V>(p, j); }
  IGNIS_DEV void load_bcast(const T* p, const DivWalk& w) {
    if constexpr (KIND == 0) pk = load_pack<T, V>(p, w.r);
    else pk = load_pack<T, 1>(p, w.q);
  }
  template <class W> IGNIS_DEV W get(int k) const { return cast<W>(pk.v[KIND == 0 ? k : 0]); }
};

template <class Op, class W, class TO, class TA, class TB, int SIDE, int KIND, int V>
__global__ void binary_bcast(TO* out, const TA* a, const TB* b, int64 n, int64 inner) {
  constexpr int U = bcast_unroll;
  const int64 nvec = n / V;  // V divides inner, which divides n
  const int64 threads = grid_stride();
  int64 i = global_index();
  DivWalk w(i, threads, inner / V);  // vector index i == w.q * (inner / V) + w.r
  // The dense operand is held as KIND 0 (all V elements), the broadcast one as KIND.
  Held<TA, V, SIDE == 1 ? KIND : 0> ha[U];
  Held<TB, V, SIDE == 2 ? KIND : 0> hb[U];
  for (; i < nvec; i += U * threads) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64 j = i + u * threads;
      if (j < nvec) {
        if constexpr (SIDE == 1) {
          ha[u].load_bcast(a, w);
          hb[u].load_dense(b, j);
        } else {
          ha[u].load_dense(a, j);
          hb[u].load_bcast(b, w);
        }
      }
      w.advance();  // to vector j + threads: the next u's (after the last u, the next i's)
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64 j = i + u * threads;
      if (j < nvec) {
        TO r[V];
#pragma unroll
        for (int k = 0; k < V; ++k) {
          r[k] = cast<TO>(Op::apply(ha[u].template get<W>(k), hb[u].template get<W>(k)));
        }
        store_vec<TO, V>(out, j, r);
      }
    }
  }
}

// --- where ---------------------------------------------------------------------------------------
// FORMS bit 0: cond is the scalar sc; bit 1: a is sa; bit 2: b is sb.

template <class W, class TO, class TC, class TA, class TB, int FORMS, int V>
__global__ void where_contig(TO* out, const TC* c, const TA* a, const TB* b, bool sc, W sa, W sb,
                             int64 n) {
  Operand<TC, bool, V, (FORMS & 1) != 0> ic{c, sc};
  Operand<TA, W, V, (FORMS & 2) != 0> ia{a, sa};
  Operand<TB, W, V, (FORMS & 4) != 0> ib{b, sb};
  bool vc[contig_unroll][V];
  W va[contig_unroll][V], vb[contig_unroll][V];
  contig_loop<V, contig_unroll>(
      n,
      [&](int u, int64 i) {
        ic.load(i, vc[u]);
        ia.load(i, va[u]);
        ib.load(i, vb[u]);
      },
      [&](int u, int64 i) {
        TO r[V];
#pragma unroll
        for (int k = 0; k < V; ++k) r[k] = cast<TO>(vc[u][k] ? va[u][k] : vb[u][k]);
        store_vec<TO, V>(out, i, r);
      },
      [&](int64 j) { out[j] = cast<TO>(ic.one(j) ? ia.one(j) : ib.one(j)); });
}

template <class W, class TO, class TC, class TA, class TB, int FORMS, bool WIDE>
__global__ void where_strided(char* out, const char* c, const char* a, const char* b, bool sc,
                              W sa, W sb, int64 n, StridedArgs<4> s) {
  Operand<TC, bool, 1, (FORMS & 1) != 0> ic{reinterpret_cast<const TC*>(c), sc};
  Operand<TA, W, 1, (FORMS & 2) != 0> ia{reinterpret_cast<const TA*>(a), sa};
  Operand<TB, W, 1, (FORMS & 4) != 0> ib{reinterpret_cast<const TB*>(b), sb};
  W v[strided_unroll];
  strided_loop<4, WIDE, strided_unroll>(
      n, s,
      [&](int u, const int64(&off)[4]) {
        // Only the selected operand is read.
        v[u] = ic.at_offset(off[1]) ? ia.at_offset(off[2]) : ib.at_offset(off[3]);
      },
      [&](int u, const int64(&off)[4]) { at<TO>(out, off[0]) = cast<TO>(v[u]); });
}

// --- copy / cast ---------------------------------------------------------------------------------

template <class TO, class TS, int V>
__global__ void copy_contig(TO* out, const TS* src, int64 n) {
  Operand<TS, TS, V, false> is{src, TS()};
  TS vs[contig_unroll][V];
  contig_loop<V, contig_unroll>(
      n, [&](int u, int64 i) { is.load(i, vs[u]); },
      [&](int u, int64 i) {
        TO r[V];
#pragma unroll
        for (int k = 0; k < V; ++k) r[k] = cast<TO>(vs[u][k]);
        store_vec<TO, V>(out, i, r);
      },
      [&](int64 j) { out[j] = cast<TO>(src[j]); });
}

template <class TO, class TS, bool WIDE>
__global__ void copy_strided(char* out, const char* src, int64 n, StridedArgs<2> s) {
  TS v[strided_unroll];
  strided_loop<2, WIDE, strided_unroll>(
      n, s, [&](int u, const int64(&off)[2]) { v[u] = at<TS>(src, off[1]); },
      [&](int u, const int64(&off)[2]) { at<TO>(out, off[0]) = cast<TO>(v[u]); });
}

// Transposing copy through shared memory: out[b][r][c] = src[b][r][c] where out is dense along
// c and src along r (byte strides: out rows `out_row`, src columns `src_col`, batches `out_batch`
// and `src_batch`). A 32 x 32 tile is read with consecutive threads on consecutive r and written
// with consecutive threads on consecutive c, so both sides are coalesced. Block (32, 8); grid
// (row tiles, column tiles, batches), each loop striding by the grid for sizes past its limits.
template <class TO, class TS>
__global__ void copy_transpose(char* out, const char* src, int64 rows, int64 cols, int64 batches,
                               int64 out_row, int64 src_col, int64 out_batch, int64 src_batch) {
  constexpr int tile = 32;
  __shared__ TS buf[tile][tile + 1];  // +1: a column of the tile spans all banks
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64 row_tiles = (rows + tile - 1) / tile, col_tiles = (cols + tile - 1) / tile;
  for (int64 b = blockIdx.z; b < batches; b += gridDim.z) {
    for (int64 ct = blockIdx.y; ct < col_tiles; ct += gridDim.y) {
      for (int64 rt = blockIdx.x; rt < row_tiles; rt += gridDim.x) {
        const int64 r0 = rt * tile, c0 = ct * tile;
        const char* s = src + b * src_batch;
#pragma unroll
        for (int k = 0; k < tile; k += 8) {
          int64 r = r0 + tx, c = c0 + ty + k;
          if (r < rows && c < cols) buf[ty + k][tx] = at<TS>(s, r * (int64)sizeof(TS) + c * src_col);
        }
        __syncthreads();
        char* o = out + b * out_batch;
#pragma unroll
        for (int k = 0; k < tile; k += 8) {
          int64 r = r0 + ty + k, c = c0 + tx;
          if (r < rows && c < cols) at<TO>(o, r * out_row + c * (int64)sizeof(TO)) = cast<TO>(buf[tx][ty + k]);
        }
        __syncthreads();  // the tile is read before the next iteration overwrites it
      }
    }
  }
}

// --- fill (the contiguous case is a driver memset) -----------------------------------------------

// U: an unsigned integer of the element's size holding the value's bits.
template <class U, bool WIDE>
__global__ void fill_strided(char* out, U bits, int64 n, StridedArgs<1> s) {
  strided_loop<1, WIDE, 1>(
      n, s, [&](int, const int64(&)[1]) {}, [&](int, const int64(&off)[1]) { at<U>(out, off[0]) = bits; });
}

template <class U> __global__ void fill_contig(U* out, U bits, int64 n) {
  IGNIS_GRID_STRIDE_LOOP(i, n) { out[i] = bits; }
}

// --- arange --------------------------------------------------------------------------------------

// out[i] = start + i * step in float64 with two roundings (no FMA), as NumPy computes it.
template <class T> __global__ void arange_float(T* out, double start, double step, int64 n) {
  IGNIS_GRID_STRIDE_LOOP(i, n) { out[i] = cast<T>(__dadd_rn(start, __dmul_rn((double)i, step))); }
}

// out[i] = start + i * step in int64 with wrap-around, converted to T.
template <class T> __global__ void arange_int(T* out, int64 start, int64 step, int64 n) {
  IGNIS_GRID_STRIDE_LOOP(i, n) {
    out[i] = cast<T>((int64)((uint64)start + (uint64)i * (uint64)step));
  }
}

}  // namespace ew
}  // namespace ignis
