// attention.cuh - building blocks of the fused attention kernels (attention.cu, and the Hopper
// kernels of attention_sm90.cu): constants, the strides of the (B, H, rows, E) operands
// (Strides, Layout, head_offset), the causal mask, tile copies into shared memory, the
// mma.sync fragment products, the online softmax of a score accumulator, accumulator stores and
// the float32 reductions of dQ. See attention.cu for the layout conventions.
#pragma once

#include "ignis_types.cuh"
#include "philox.cuh"
#include "tensor_core.cuh"

namespace ignis {
namespace attn {

// Constants as functions and enumerators: a program that instantiates only some kernels must
// not warn about unused variables.
IGNIS_DEV float log2e() { return 1.4426950408889634f; }
IGNIS_DEV float ln2() { return 0.6931471805599453f; }

IGNIS_DEV float neg_inf() { return __int_as_float(0xff800000); }
IGNIS_DEV float pos_inf() { return __int_as_float(0x7f800000); }
template <class A> IGNIS_DEV A minus_inf();
template <> IGNIS_DEV float minus_inf<float>() { return neg_inf(); }
template <> IGNIS_DEV double minus_inf<double>() { return __longlong_as_double(0xfff0000000000000ll); }

IGNIS_DEV float exp_(float x) { return expf(x); }
IGNIS_DEV double exp_(double x) { return exp(x); }
IGNIS_DEV float log_(float x) { return logf(x); }
IGNIS_DEV double log_(double x) { return log(x); }
IGNIS_DEV float max_(float a, float b) { return fmaxf(a, b); }

// 2^x in one instruction (ex2.approx.ftz: about 2 ulp; -inf gives +0, NaN stays NaN); the
// float16 / bfloat16 kernels round the results to 8 or 11 bits anyway.
IGNIS_DEV float exp2_fast(float x) {
#if defined(IGNIS_ATTN_HOST_EMULATION)
  return exp2f(x);
#else
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#endif
}
IGNIS_DEV double max_(double a, double b) { return fmax(a, b); }

// Element strides of one (B, H, rows, E) operand: row r of head (b, h) starts at element
// b * sb + h * sh + r * st of its base (any sign; the last dim has stride 1).
struct Strides {
  int64 sb, sh, st;
};

// Passed by value to every attention kernel: the head count H (the flat head index
// bh = bh0 + blockIdx.y is b * H + h) and the strides of each operand a kernel reads or writes
// (a kernel ignores the ones it does not use).
struct Layout {
  int64 heads;
  Strides q, k, v, o, dout, dq, dk, dv;
};
static_assert(sizeof(Layout) == 25 * 8, "Layout must match the host's packing (attention.py)");

// Element offset of head bh's first row in an operand with strides s. The division is 32-bit
// (the host keeps B * H below 2^31): a 64-bit one is a called routine.
IGNIS_DEV int64 head_offset(const Strides& s, int64 bh, int64 heads) {
  const unsigned b = (unsigned)bh / (unsigned)heads, h = (unsigned)bh - b * (unsigned)heads;
  return (int64)b * s.sb + (int64)h * s.sh;
}

#if !defined(IGNIS_ATTN_HOST_EMULATION)  // a test builds these kernels on a host emulator
IGNIS_DEV unsigned char* dynamic_smem() {
  extern __shared__ __align__(16) unsigned char ignis_attn_smem[];
  return ignis_attn_smem;
}

// A launch with less dynamic shared memory than the kernel's tiles is a host bug: stop loudly.
IGNIS_DEV void require_smem(unsigned bytes) {
  unsigned n;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(n));
  if (n < bytes) asm volatile("trap;");
}
#endif

// Dropout of the probabilities (the *_dropout kernels; attention.cu's header gives the mapping).
// Passed by value: the Philox stream as values (state == nullptr: key (k0, k1), first block
// offset) or, inside a captured CUDA graph, as device memory {seed, base block} plus offset from
// that base (philox.cuh: stream_from_state); an element is kept when (word >> 8) >= threshold;
// kept probabilities are multiplied by scale = 1 / (1 - p).
struct Dropout {
  const uint64* state;
  uint64 offset;
  uint32 k0, k1;
  uint32 threshold, unused;
  double scale;
};
static_assert(sizeof(Dropout) == 40, "Dropout must match the host's packing (attention.py)");

// One head's dropout stream: the key, the block of its element (0, 0) and the blocks per row
// pair. Element (i, j) of head bh is lane 2 (i & 1) + (j & 1) of block
// offset + (bh * ceil(L / 2) + i / 2) * ceil(S / 2) + j / 2: each block covers a 2 x 2 square,
// which holds two elements of a thread in both accumulator layouts (a query row pair of the
// forward's two columns, a key column pair of the backward's two queries).
struct DropRng {
  uint32 k0, k1, threshold;
  uint64 base, cols2;
};

IGNIS_DEV DropRng drop_rng(const Dropout& d, int64 bh, int L, int S) {
  DropRng r;
  uint64 offset = d.offset;
  r.k0 = d.k0;
  r.k1 = d.k1;
  if (d.state != nullptr) {
    const rng::StreamPos at = rng::stream_from_state(d.state, d.offset);
    r.k0 = at.k0;
    r.k1 = at.k1;
    offset = at.offset;
  }
  r.threshold = d.threshold;
  r.cols2 = (uint64)((S + 1) >> 1);
  r.base = offset + (uint64)bh * (uint64)((L + 1) >> 1) * r.cols2;
  return r;
}

// The keep bits of the 2 x 2 square holding (i, j) (i, j >= 0): bit 2 (i & 1) + (j & 1).
IGNIS_DEV uint32 drop_bits(const DropRng& r, int i, int j) {
  const rng::Words w =
      rng::stream_block(r.base + (uint64)(i >> 1) * r.cols2 + (uint64)(j >> 1), r.k0, r.k1);
  uint32 bits = 0;
#pragma unroll
  for (int e = 0; e < 4; ++e) bits |= (uint32)((w.w[e] >> 8) >= r.threshold) << e;
  return bits;
}

IGNIS_DEV bool drop_keep(const DropRng& r, int i, int j) {
  return ((drop_bits(r, i, j) >> (2 * (i & 1) + (j & 1))) & 1u) != 0u;
}

// drop_rng where the kernel drops out (DROP), else nothing to read.
template <bool DROP> IGNIS_DEV DropRng drop_rng_if(const Dropout& d, int64 bh, int L, int S) {
  if constexpr (DROP) {
    return drop_rng(d, bh, L, S);
  } else {
    return DropRng{};
  }
}

// The two squares a lane needs for one column pair: rows (or keys) a[0] and a[1] = a[0] + 8 of
// the mma accumulator layout (a[0] = an even base + lane / 4) lie in two 2 x 2 squares, and the
// lane's partner (lane ^ 4) holds the other row of both. So each lane draws one of the two
// squares, the one of a[a[0] & 1], and takes the other's keep bits from its partner: one Philox
// block per lane and column pair instead of two. Every lane of the warp must call this.
IGNIS_DEV void drop_pair_bits(uint32 (&sq)[2], const DropRng& r, const int (&a)[2], int i_of,
                              int j_of, bool rows) {
  const int odd = a[0] & 1;
  const int mine_i = rows ? a[odd] : i_of, mine_j = rows ? j_of : a[odd];
  const uint32 mine = drop_bits(r, mine_i, mine_j);
  const uint32 theirs = __shfl_xor_sync(0xffffffffu, mine, 4);
  sq[odd] = mine;
  sq[odd ^ 1] = theirs;
}

// Zero the dropped probabilities of a 16-row score accumulator in the forward layout: rows
// row[0], row[1] (= row[0] + 8), columns n0 + 8 nt + 2 t + c (n0 even). One Philox block per
// n-tile and lane. (The kept ones are scaled once, at the end, with the output.)
template <int NT>
IGNIS_DEV void drop_rows(float (&s)[NT][4], const DropRng& r, const int (&row)[2], int n0) {
  const int t = threadIdx.x & 3;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const int j = n0 + nt * 8 + 2 * t;
    uint32 sq[2];
    drop_pair_bits(sq, r, row, 0, j, true);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint32 bits = sq[h] >> (2 * (row[h] & 1));
      if (!(bits & 1u)) s[nt][2 * h] = 0.f;
      if (!(bits & 2u)) s[nt][2 * h + 1] = 0.f;
    }
  }
}

// The dropout factors (scale where kept, 0 where dropped) of a score accumulator in the
// backward's transposed layout: keys key[0], key[1] (= key[0] + 8, rows), queries
// m0 + 8 nt + 2 t + (c & 1) (m0 even). One Philox block per n-tile and lane.
template <int NT>
IGNIS_DEV void drop_cols(float (&z)[NT][4], const DropRng& r, const int (&key)[2], int m0,
                         float scale) {
  const int t = threadIdx.x & 3;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const int i = m0 + nt * 8 + 2 * t;
    uint32 sq[2];
    drop_pair_bits(sq, r, key, i, 0, false);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint32 bits = sq[h] >> (key[h] & 1);
      z[nt][2 * h] = (bits & 1u) ? scale : 0.f;
      z[nt][2 * h + 1] = (bits & 4u) ? scale : 0.f;
    }
  }
}

// Query i sees key j (both in range of their sequences).
template <bool CAUSAL> IGNIS_DEV bool visible(int i, int j, int L, int S) {
  return i < L && j < S && (!CAUSAL || j <= i + S - L);
}

// Rows [r0, r0 + R) x cols [0, D) of a (rows x E) matrix with row stride ldg (elements) into
// shared memory with row stride LD; zeros outside. vec (E % 8 == 0, 16-byte aligned bases and
// strides): asynchronous 16-byte copies (the caller commits and waits); otherwise plain element
// copies, complete on return.
template <class T, int R, int D, int LD, int THREADS>
IGNIS_DEV void load_tile16(T* s, const T* g, int r0, int rows, int E, int64 ldg, bool vec) {
  if (vec) {
    constexpr int CH = D / 8;
    for (int c = threadIdx.x; c < R * CH; c += THREADS) {
      const int r = c / CH, col = (c % CH) * 8;
      const bool in = r0 + r < rows && col < E;  // col < E implies col + 8 <= E here
      if (in) {
        tc::cp_async_16(s + r * LD + col, g + (int64)(r0 + r) * ldg + col, 16);
      } else {  // zeros with a plain store: a cp.async of nothing still names 16 bytes at g
#pragma unroll
        for (int e = 0; e < 8; ++e) s[r * LD + col + e] = T{};
      }
    }
  } else {
    for (int c = threadIdx.x; c < R * D; c += THREADS) {
      const int r = c / D, col = c % D;
      T val = T{};
      if (r0 + r < rows && col < E) val = g[(int64)(r0 + r) * ldg + col];
      s[r * LD + col] = val;
    }
  }
}

// Elements (row, col) and (row, col + 1) of a (rows x E) matrix with row stride ldg as one
// A-fragment register, zero outside.
template <class T>
IGNIS_DEV uint32 load_pair(const T* g, int row, int col, int rows, int E, int64 ldg) {
  uint32 lo = 0, hi = 0;
  if (row < rows) {
    if (col < E) lo = g[(int64)row * ldg + col].bits;
    if (col + 1 < E) hi = g[(int64)row * ldg + col + 1].bits;
  }
  return lo | (hi << 16);
}

// A fragments (16 rows x D) of rows [r0, r0 + 16) straight from global memory.
template <class T, int D>
IGNIS_DEV void load_a_frags(uint32 (&f)[D / 16][4], const T* g, int r0, int rows, int E,
                            int64 ldg) {
  const int lane = threadIdx.x & 31, gr = lane >> 2, t = lane & 3;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    f[kk][0] = load_pair(g, r0 + gr, kk * 16 + 2 * t, rows, E, ldg);
    f[kk][1] = load_pair(g, r0 + gr + 8, kk * 16 + 2 * t, rows, E, ldg);
    f[kk][2] = load_pair(g, r0 + gr, kk * 16 + 2 * t + 8, rows, E, ldg);
    f[kk][3] = load_pair(g, r0 + gr + 8, kk * 16 + 2 * t + 8, rows, E, ldg);
  }
}

// The A fragment of the 16 x 16 block at xs (row-major, row stride LD) in shared memory:
// lanes 0-15 address rows 0-15 at column 0, lanes 16-31 rows 0-15 at column 8, so the four
// matrices are (rows 0-7, cols 0-7) = a0, (8-15, 0-7) = a1, (0-7, 8-15) = a2, (8-15, 8-15) = a3.
template <int LD, class T>
IGNIS_DEV void load_a_frag_smem(uint32 (&a)[4], const T* xs) {
  const int lane = threadIdx.x & 31;
  tc::ldmatrix_x4(a, xs + (lane & 15) * LD + (lane >> 4) * 8);
}

// acc(16 x 8*NT) += A(16 x D, fragments) * X^T, X an (8*NT x D) tile in shared memory (row stride
// LD): B[k = e][n = x] = X[x][e]. One ldmatrix gives two n-tiles: lanes 0-7 address rows 0-7
// (b0 of tile 2np), 8-15 rows 0-7 at column +8 (b1), 16-23 rows 8-15 (b0 of tile 2np+1),
// 24-31 rows 8-15 at column +8 (b1).
template <class T, int NT, int LD>
IGNIS_DEV void mma_a_xt_step(float (&acc)[NT][4], const uint32 (&a)[4], const T* xs, int kk) {
  static_assert(NT % 2 == 0, "n-tiles come in pairs");
  const int lane = threadIdx.x & 31;
  const T* base = xs + ((lane & 7) + ((lane >> 4) << 3)) * LD + ((lane >> 3) & 1) * 8 + kk * 16;
#pragma unroll
  for (int np = 0; np < NT / 2; ++np) {
    uint32 r[4];
    tc::ldmatrix_x4(r, base + np * 16 * LD);
    tc::mma_m16n8k16(acc[2 * np], a, r[0], r[1], T{});
    tc::mma_m16n8k16(acc[2 * np + 1], a, r[2], r[3], T{});
  }
}

template <class T, int D, int NT, int LD>
IGNIS_DEV void mma_a_xt(float (&acc)[NT][4], const uint32 (&a)[D / 16][4], const T* xs) {
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) mma_a_xt_step<T, NT, LD>(acc, a[kk], xs, kk);
}

// acc(16 x D) += P(16 x 16*KT, accumulator layout, rounded to T) * Y, Y a (16*KT x D) tile in
// shared memory (row stride LD): B[k = y][n = e] = Y[y][e], loaded transposed with ldmatrix
// (lanes 0-7 rows 0-7 = b0 of tile 2np, 8-15 rows 8-15 = b1, 16-23 and 24-31 the same rows at
// column +8 = tile 2np+1).
template <class T, int D, int KT, int LD>
IGNIS_DEV void mma_p_y(float (&acc)[D / 8][4], const float (&p)[2 * KT][4], const T* ys) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int kk = 0; kk < KT; ++kk) {
    uint32 a[4];
    a[0] = tc::pack_pair<T>(p[2 * kk][0], p[2 * kk][1]);
    a[1] = tc::pack_pair<T>(p[2 * kk][2], p[2 * kk][3]);
    a[2] = tc::pack_pair<T>(p[2 * kk + 1][0], p[2 * kk + 1][1]);
    a[3] = tc::pack_pair<T>(p[2 * kk + 1][2], p[2 * kk + 1][3]);
    const T* base = ys + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + (lane >> 4) * 8;
#pragma unroll
    for (int np = 0; np < D / 16; ++np) {
      uint32 r[4];
      tc::ldmatrix_x4_trans(r, base + np * 16);
      tc::mma_m16n8k16(acc[2 * np], a, r[0], r[1], T{});
      tc::mma_m16n8k16(acc[2 * np + 1], a, r[2], r[3], T{});
    }
  }
}

// Write a (16 x D) accumulator times mul (mul0 for rows g, mul1 for rows g + 8), rows
// [r0, r0 + 16) of a (rows x E) matrix with row stride ldg.
template <class T, int D>
IGNIS_DEV void store_acc(T* g, const float (&acc)[D / 8][4], int r0, int rows, int E, int64 ldg,
                         float mul0, float mul1) {
  const int lane = threadIdx.x & 31, gr = lane >> 2, t = lane & 3;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = r0 + gr + 8 * h;
    if (row >= rows) continue;
    const float mul = h ? mul1 : mul0;
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt) {
      const int col = nt * 8 + 2 * t;
      if (col < E) g[(int64)row * ldg + col] = from_acc<T>(acc[nt][2 * h] * mul);
      if (col + 1 < E) g[(int64)row * ldg + col + 1] = from_acc<T>(acc[nt][2 * h + 1] * mul);
    }
  }
}

IGNIS_DEV float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(full_warp_mask, v, 1));
  return fmaxf(v, __shfl_xor_sync(full_warp_mask, v, 2));
}
IGNIS_DEV float quad_sum(float v) {
  v += __shfl_xor_sync(full_warp_mask, v, 1);
  return v + __shfl_xor_sync(full_warp_mask, v, 2);
}

template <class A> IGNIS_DEV void zero(A& acc) {
  constexpr int N = sizeof(A) / sizeof(float);
  float* f = reinterpret_cast<float*>(&acc);  // any nesting of float arrays
#pragma unroll
  for (int i = 0; i < N; ++i) f[i] = 0.f;
}

// Online softmax of this thread's two rows (g and g + 8) of a 16-row score accumulator of
// 8 * NT keys from n0 on (log2 units): s becomes P = 2^(s * scale_log2 - m) with the rows'
// running max m, l the running sums (per-thread partial sums: alpha is the quad's) and alpha
// the factor for the rows' earlier O.
template <bool CAUSAL, int NT>
IGNIS_DEV void online_softmax(float (&s)[NT][4], float (&mrow)[2], float (&lrow)[2],
                              float (&alpha)[2], const int (&row)[2], int n0, int L, int S,
                              float scale_log2, bool masked) {
  const int t = threadIdx.x & 3;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float mx = neg_inf();
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        float x = s[nt][2 * h + c] * scale_log2;
        if (masked && !visible<CAUSAL>(row[h], n0 + nt * 8 + 2 * t + c, L, S)) x = neg_inf();
        s[nt][2 * h + c] = x;
        mx = fmaxf(mx, x);
      }
    mx = quad_max(mx);
    const float m_new = fmaxf(mrow[h], mx);
    const float m_use = m_new == neg_inf() ? 0.f : m_new;  // no -inf - -inf = NaN
    alpha[h] = exp2_fast(mrow[h] - m_use);
    mrow[h] = m_new;
    float sum = 0.f;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const float p = exp2_fast(s[nt][2 * h + c] - m_use);
        s[nt][2 * h + c] = p;
        sum += p;
      }
    lrow[h] = lrow[h] * alpha[h] + sum;
  }
}

// dst[0] += a, dst[1] += b (dst 8-byte aligned): one vector reduction on sm_90 (PTX's float
// vector reductions start there), two atomics elsewhere.
IGNIS_DEV void atomic_add2(float* dst, float a, float b) {
#if !defined(IGNIS_ATTN_HOST_EMULATION) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};" ::"l"(dst), "f"(a), "f"(b) : "memory");
#else
  atomicAdd(dst, a);
  atomicAdd(dst + 1, b);
#endif
}

}  // namespace attn
}  // namespace ignis
