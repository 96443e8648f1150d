// attention.cu - fused scaled dot-product attention (FlashAttention-2 style) and decode attention.
//
// Layout: q (B, H, L, E), k and v (B, H, S, E), out, dout and dq like q, dk and dv like k: views
// whose last dim is contiguous and whose batch, head and row strides are arbitrary (a Layout
// argument carries them, in elements), so heads sliced out of a packed (B, T, 3, H, E) projection
// are read in place and results land in place. lse (BH, L) is contiguous and holds the
// natural-log sum of exp of each query's scaled scores (-inf for a query that sees no key); so
// are the scratch rows (D, the fused backwards' dQ sums: float32, or T for float / double).
// The decode kernels take contiguous (BH, rows, E) arrays.
// Causal masking is aligned to the end: query i sees key j when j <= i + S - L; a query that
// sees no key gets a zero output row. Head dims up to 128: kernels are templated on a padded
// head dim D (32, 64, 96, 128); columns E..D-1 are zero-filled in shared memory and registers.
// Grids: x walks the query (or key) blocks, y the (batch, head) pairs from bh0 on.
//
//   flash_fwd_tc<T, D, CAUSAL>       float16 / bfloat16, mma.m16n8k16 with float32 accumulation:
//                                    64 queries per block (16 per warp), 64-key tiles, online
//                                    softmax in registers; P goes from the accumulator straight
//                                    into A fragments.
//   flash_bwd_dkdv_tc<T, D, CAUSAL, tiles...>
//                                    dK, dV of 64 or 128 keys per block (16 per warp), walking
//                                    the 32- or 64-query tiles that see them; P and dS
//                                    recomputed from lse; flash_bwd_fused_tc also adds dQ by
//                                    atomics (tile variants: see the section's comment).
//   flash_bwd_dq_tc<T, D, CAUSAL>    dQ of 64 queries per block, walking 32-key tiles (a second
//                                    pass instead of atomics: deterministic).
//   flash_*_simt<T, D, CAUSAL>       the same three for float / double in exact scalar math
//                                    (32 x 32 tiles, a row per warp).
//   flash_*_simt_tiled<T, D, CAUSAL, tiles...>
//                                    the same three for float / double with register
//                                    micro-tiles (4 x 4 scores per thread), double-buffered
//                                    cp.async tiles, exp2 with log2(e) folded into the scale;
//                                    D is 64 or 128 (see the section's comment); the
//                                    backward also fused into one pass with dQ by atomics
//                                    (flash_bwd_fused_simt_tiled).
//   attn_dq_finish<T, A>             dQ of the fused backwards: the sums in A scaled into dq.
//   attn_row_dot<T, A>               D[r] = sum_e dO[r, e] * O[r, e] (backward preprocessing).
//   decode_partial<T, A, D>, decode_combine<T, A>
//                                    one query per (batch, head) against cache rows [0, n):
//                                    split over the keys (flash-decoding), then merged.
#include "attention.cuh"

namespace ignis {
namespace attn {

// Pipelining of the tensor-core kernels: the tiles of step i + 1 are copied into the second
// buffer while step i computes on the first; each step starts by waiting for its own copies
// (cp.async.wait_group 1 leaves only the next step's group in flight) and a barrier, and ends
// with a barrier so that no warp still reads a buffer when the next copy into it starts.

// ---------------------------------------------------------------------------------------------
// Tensor-core forward.

enum : int { kTcThreads = 128 };  // 4 warps
enum : int { kFwdBM = 64, kFwdBN = 64 };

template <class T, int D, bool CAUSAL, bool DROP>
IGNIS_DEV void flash_fwd_tc_body(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, T* __restrict__ out, float* __restrict__ lse, int L, int S, int E, float scale_log2, int vec, int64 bh0, const Layout& lay, const Dropout& drop) {
  constexpr int BM = kFwdBM, BN = kFwdBN, LD = D + 8, NT = BN / 8, TILE = BN * LD;
  unsigned char* attn_smem = dynamic_smem();
  require_smem(4 * TILE * sizeof(T));
  T* kv = reinterpret_cast<T*>(attn_smem);  // buffer b: K at kv + 2b TILE, V at kv + (2b+1) TILE
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, t = lane & 3;
  const int64 bh = bh0 + blockIdx.y;
  // Causal: the last query blocks see the most keys; start them first for a shorter tail.
  const int m0 = (CAUSAL ? gridDim.x - 1 - blockIdx.x : blockIdx.x) * BM;
  const T* qb = q + head_offset(lay.q, bh, lay.heads);
  const T* kb = k + head_offset(lay.k, bh, lay.heads);
  const T* vb = v + head_offset(lay.v, bh, lay.heads);
  const int64 ldk = lay.k.st, ldv = lay.v.st;
  const int w0 = m0 + warp * 16;  // this warp's first query
  const int row[2] = {w0 + (lane >> 2), w0 + (lane >> 2) + 8};
  const bool vec16 = vec != 0;
  const DropRng drng = drop_rng_if<DROP>(drop, bh, L, S);

  // Keys past the last one the block's last query sees are never loaded.
  const int n_end = CAUSAL ? min(S, max(0, m0 + BM + S - L)) : S;
  if (n_end > 0) {
    load_tile16<T, BN, D, LD, kTcThreads>(kv, kb, 0, S, E, ldk, vec16);
    load_tile16<T, BN, D, LD, kTcThreads>(kv + TILE, vb, 0, S, E, ldv, vec16);
    tc::cp_async_commit();
  }
  uint32 qf[D / 16][4];
  load_a_frags<T, D>(qf, qb, w0, L, E, lay.q.st);
  float o[D / 8][4];
  zero(o);
  float mrow[2] = {neg_inf(), neg_inf()}, lrow[2] = {0.f, 0.f};

  int buf = 0;
  for (int n0 = 0; n0 < n_end; n0 += BN, buf ^= 1) {
    if (n0 + BN < n_end) {
      T* next = kv + 2 * (buf ^ 1) * TILE;
      load_tile16<T, BN, D, LD, kTcThreads>(next, kb, n0 + BN, S, E, ldk, vec16);
      load_tile16<T, BN, D, LD, kTcThreads>(next + TILE, vb, n0 + BN, S, E, ldv, vec16);
      tc::cp_async_commit();
      tc::cp_async_wait<1>();
    } else {
      tc::cp_async_wait<0>();
    }
    __syncthreads();
    const T* ks = kv + 2 * buf * TILE;
    const T* vs = ks + TILE;

    float s[NT][4];
    zero(s);
    mma_a_xt<T, D, NT, LD>(s, qf, ks);

#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = neg_inf();
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int j = n0 + nt * 8 + 2 * t + c;
          float x = s[nt][2 * h + c] * scale_log2;
          if (!visible<CAUSAL>(row[h], j, L, S)) x = neg_inf();
          s[nt][2 * h + c] = x;
          mx = fmaxf(mx, x);
        }
      mx = quad_max(mx);
      const float m_new = fmaxf(mrow[h], mx);
      // A row that has seen no visible key yet keeps -inf: subtract 0 so no -inf - -inf = NaN.
      const float m_use = m_new == neg_inf() ? 0.f : m_new;
      const float alpha = exp2f(mrow[h] - m_use);
      mrow[h] = m_new;
      float sum = 0.f;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const float p = exp2f(s[nt][2 * h + c] - m_use);
          s[nt][2 * h + c] = p;
          sum += p;
        }
      lrow[h] = lrow[h] * alpha + sum;  // a per-thread partial sum: alpha is the quad's
#pragma unroll
      for (int nt = 0; nt < D / 8; ++nt) {
        o[nt][2 * h] *= alpha;
        o[nt][2 * h + 1] *= alpha;
      }
    }
    if constexpr (DROP) drop_rows<NT>(s, drng, row, n0);  // (after the undropped row sums)
    mma_p_y<T, D, BN / 16, LD>(o, s, vs);
    __syncthreads();
  }

  float inv[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float l = quad_sum(lrow[h]);
    inv[h] = l > 0.f ? 1.f / l : 0.f;
    if constexpr (DROP) inv[h] *= (float)drop.scale;
    if (t == 0 && row[h] < L)
      lse[bh * L + row[h]] = l > 0.f ? (mrow[h] + log2f(l)) * ln2() : neg_inf();
  }
  store_acc<T, D>(out + head_offset(lay.o, bh, lay.heads), o, w0, L, E, lay.o.st, inv[0],
                  inv[1]);
}

template <class T, int D, bool CAUSAL>
__global__ void __launch_bounds__(kTcThreads)
    flash_fwd_tc(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                 T* __restrict__ out, float* __restrict__ lse, int L, int S, int E,
                 float scale_log2, int vec, int64 bh0, Layout lay) {
  flash_fwd_tc_body<T, D, CAUSAL, false>(q, k, v, out, lse, L, S, E, scale_log2, vec, bh0, lay, Dropout{});
}

// flash_fwd_tc with the probabilities dropped out (see the header).
template <class T, int D, bool CAUSAL>
__global__ void __launch_bounds__(kTcThreads)
    flash_fwd_tc_dropout(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                 T* __restrict__ out, float* __restrict__ lse, int L, int S, int E,
                 float scale_log2, int vec, int64 bh0, Layout lay, Dropout drop) {
  flash_fwd_tc_body<T, D, CAUSAL, true>(q, k, v, out, lse, L, S, E, scale_log2, vec, bh0, lay, drop);
}

// ---------------------------------------------------------------------------------------------
// Tensor-core forward, 32 queries per warp (the default path; flash_fwd_tc above is the
// 16-row fallback). Each warp owns two m16 tiles, so every K fragment (ldmatrix) and V fragment
// (ldmatrix.trans) read from shared memory feeds two MMAs instead of one, and each K/V tile
// copied into shared memory serves 128 queries instead of 64. The Q tile is staged in shared
// memory; for D <= 64 its fragments then live in registers, for larger D they are re-read per
// k-step (registers: O is D/2 floats per thread per m-tile, 2 x 64 = 128 at D = 128, plus the
// 2 x 32 score floats). Tiles that need no mask (all keys in range and, causal, at or below every
// query's diagonal) skip the per-element visibility test.

enum : int { kFwd2MT = 2, kFwd2BM = 128, kFwd2BN = 64 };

// Two blocks per SM (8 warps) at up to 255 registers and 104 KiB of shared memory (D = 128).
// Three at D = 64 would need <= 168 registers, which makes ptxas spill: not asked for.
template <class T, int D, bool CAUSAL, bool DROP>
IGNIS_DEV void flash_fwd_tc_m32_body(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, T* __restrict__ out, float* __restrict__ lse, int L, int S, int E, float scale_log2, int vec, int64 bh0, const Layout& lay, const Dropout& drop) {
  constexpr int MT = kFwd2MT, BM = kFwd2BM, BN = kFwd2BN, LD = D + 8, NT = BN / 8;
  constexpr int TILE = BN * LD, QTILE = BM * LD;
  constexpr bool QREG = D <= 64;  // Q fragments in registers: 2 x D/16 x 4 = 32 at D = 64
  unsigned char* attn_smem = dynamic_smem();
  require_smem((QTILE + 4 * TILE) * sizeof(T));
  T* qs = reinterpret_cast<T*>(attn_smem);
  T* kv = qs + QTILE;  // buffer b: K at kv + 2b TILE, V at kv + (2b+1) TILE
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, t = lane & 3;
  const int64 bh = bh0 + blockIdx.y;
  const int m0 = (CAUSAL ? gridDim.x - 1 - blockIdx.x : blockIdx.x) * BM;  // long rows first
  const T* kb = k + head_offset(lay.k, bh, lay.heads);
  const T* vb = v + head_offset(lay.v, bh, lay.heads);
  const int64 ldk = lay.k.st, ldv = lay.v.st;
  const int wr = warp * 16 * MT;  // this warp's first query, relative to m0
  int row[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    row[mt][0] = m0 + wr + 16 * mt + (lane >> 2);
    row[mt][1] = row[mt][0] + 8;
  }
  const bool vec16 = vec != 0;
  const DropRng drng = drop_rng_if<DROP>(drop, bh, L, S);

  const int n_end = CAUSAL ? min(S, max(0, m0 + BM + S - L)) : S;
  load_tile16<T, BM, D, LD, kTcThreads>(qs, q + head_offset(lay.q, bh, lay.heads), m0, L, E,
                                        lay.q.st, vec16);
  if (n_end > 0) {
    load_tile16<T, BN, D, LD, kTcThreads>(kv, kb, 0, S, E, ldk, vec16);
    load_tile16<T, BN, D, LD, kTcThreads>(kv + TILE, vb, 0, S, E, ldv, vec16);
  }
  tc::cp_async_commit();  // Q and the first K/V tiles: one group

  uint32 qreg[QREG ? MT : 1][QREG ? D / 16 : 1][4];
  float o[MT][D / 8][4];
  zero(o);
  float mrow[MT][2], lrow[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) mrow[mt][h] = neg_inf(), lrow[mt][h] = 0.f;

  int buf = 0;
  for (int n0 = 0; n0 < n_end; n0 += BN, buf ^= 1) {
    if (n0 + BN < n_end) {
      T* next = kv + 2 * (buf ^ 1) * TILE;
      load_tile16<T, BN, D, LD, kTcThreads>(next, kb, n0 + BN, S, E, ldk, vec16);
      load_tile16<T, BN, D, LD, kTcThreads>(next + TILE, vb, n0 + BN, S, E, ldv, vec16);
      tc::cp_async_commit();
      tc::cp_async_wait<1>();
    } else {
      tc::cp_async_wait<0>();
    }
    __syncthreads();
    if constexpr (QREG) {
      if (n0 == 0) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int kk = 0; kk < D / 16; ++kk)
            load_a_frag_smem<LD>(qreg[mt][kk], qs + (wr + 16 * mt) * LD + kk * 16);
      }
    }
    const T* ks = kv + 2 * buf * TILE;
    const T* vs = ks + TILE;

    // S = Q K^T: one ldmatrix of K (two n-tiles) feeds both m-tiles.
    float s[MT][NT][4];
    zero(s);
    const T* kbase = ks + ((lane & 7) + ((lane >> 4) << 3)) * LD + ((lane >> 3) & 1) * 8;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32 qa[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        if constexpr (QREG) {
#pragma unroll
          for (int i = 0; i < 4; ++i) qa[mt][i] = qreg[mt][kk][i];
        } else {
          load_a_frag_smem<LD>(qa[mt], qs + (wr + 16 * mt) * LD + kk * 16);
        }
      }
#pragma unroll
      for (int np = 0; np < NT / 2; ++np) {
        uint32 r[4];
        tc::ldmatrix_x4(r, kbase + np * 16 * LD + kk * 16);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          tc::mma_m16n8k16(s[mt][2 * np], qa[mt], r[0], r[1], T{});
          tc::mma_m16n8k16(s[mt][2 * np + 1], qa[mt], r[2], r[3], T{});
        }
      }
    }

    // Block-uniform: does any (query, key) pair of this tile need the visibility test?
    const bool masked = n0 + BN > S || (CAUSAL && n0 + BN - 1 > m0 + S - L);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      float alpha[2];
      online_softmax<CAUSAL, NT>(s[mt], mrow[mt], lrow[mt], alpha, row[mt], n0, L, S, scale_log2,
                                 masked);
      if constexpr (DROP) drop_rows<NT>(s[mt], drng, row[mt], n0);  // (after the row sums)
#pragma unroll
      for (int nt = 0; nt < D / 8; ++nt) {
        o[mt][nt][0] *= alpha[0];
        o[mt][nt][1] *= alpha[0];
        o[mt][nt][2] *= alpha[1];
        o[mt][nt][3] *= alpha[1];
      }
    }

    // O += P V: P straight from the score registers; one ldmatrix.trans of V feeds both m-tiles.
    const T* vbase = vs + ((lane & 7) + ((lane >> 3) & 1) * 8) * LD + (lane >> 4) * 8;
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      uint32 pa[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        pa[mt][0] = tc::pack_pair<T>(s[mt][2 * kk][0], s[mt][2 * kk][1]);
        pa[mt][1] = tc::pack_pair<T>(s[mt][2 * kk][2], s[mt][2 * kk][3]);
        pa[mt][2] = tc::pack_pair<T>(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
        pa[mt][3] = tc::pack_pair<T>(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
      }
#pragma unroll
      for (int np = 0; np < D / 16; ++np) {
        uint32 r[4];
        tc::ldmatrix_x4_trans(r, vbase + kk * 16 * LD + np * 16);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          tc::mma_m16n8k16(o[mt][2 * np], pa[mt], r[0], r[1], T{});
          tc::mma_m16n8k16(o[mt][2 * np + 1], pa[mt], r[2], r[3], T{});
        }
      }
    }
    __syncthreads();
  }
  tc::cp_async_wait<0>();  // the Q copy when no key is visible to the block

  T* ob = out + head_offset(lay.o, bh, lay.heads);
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    float inv[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float l = quad_sum(lrow[mt][h]);
      inv[h] = l > 0.f ? 1.f / l : 0.f;
      if constexpr (DROP) inv[h] *= (float)drop.scale;
      if (t == 0 && row[mt][h] < L)
        lse[bh * L + row[mt][h]] = l > 0.f ? (mrow[mt][h] + log2f(l)) * ln2() : neg_inf();
    }
    store_acc<T, D>(ob, o[mt], m0 + wr + 16 * mt, L, E, lay.o.st, inv[0], inv[1]);
  }
}

template <class T, int D, bool CAUSAL>
__global__ void __launch_bounds__(kTcThreads)
    flash_fwd_tc_m32(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                     T* __restrict__ out, float* __restrict__ lse, int L, int S, int E,
                     float scale_log2, int vec, int64 bh0, Layout lay) {
  flash_fwd_tc_m32_body<T, D, CAUSAL, false>(q, k, v, out, lse, L, S, E, scale_log2, vec, bh0, lay, Dropout{});
}

// flash_fwd_tc_m32 with the probabilities dropped out (see the header).
template <class T, int D, bool CAUSAL>
__global__ void __launch_bounds__(kTcThreads)
    flash_fwd_tc_m32_dropout(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                     T* __restrict__ out, float* __restrict__ lse, int L, int S, int E,
                     float scale_log2, int vec, int64 bh0, Layout lay, Dropout drop) {
  flash_fwd_tc_m32_body<T, D, CAUSAL, true>(q, k, v, out, lse, L, S, E, scale_log2, vec, bh0, lay, drop);
}

// ---------------------------------------------------------------------------------------------
// Backward preprocessing: D[r] = sum_e dO[r, e] * O[r, e] for the rows r = bh * L + i (D is
// contiguous), one warp per row.

template <class T, class A>
__global__ void attn_row_dot(const T* __restrict__ dout, const T* __restrict__ out,
                             A* __restrict__ dvec, int64 rows, int L, int E, Layout lay) {
  const int lane = threadIdx.x & 31;
  const int64 warps = (int64)gridDim.x * (blockDim.x >> 5);
  for (int64 r = global_index() >> 5; r < rows; r += warps) {
    const int64 bh = r / L, i = r - bh * L;
    const T* g = dout + head_offset(lay.dout, bh, lay.heads) + i * lay.dout.st;
    const T* o = out + head_offset(lay.o, bh, lay.heads) + i * lay.o.st;
    A acc = 0;
    for (int e = lane; e < E; e += 32) acc += (A)to_acc(g[e]) * (A)to_acc(o[e]);
    acc = warp_sum(acc);
    if (lane == 0) dvec[r] = acc;
  }
}

// ---------------------------------------------------------------------------------------------
// Tensor-core backward: dK and dV. Block: KN keys (16 per warp, so KN / 16 warps); query tiles
// of KM. DQ = true also accumulates dQ (the fused backward, one pass instead of two): each query
// tile's dS (KM x KN, rounded to T) goes through shared memory, the warps multiply it by the K
// tile (see dq_col_groups) and add the products to a float32 dQ accumulator (rows x E,
// zero-filled, unscaled) with atomics; attn_dq_finish scales and rounds it. The atomics make
// dQ's float32 sums order-dependent (not bit-for-bit deterministic); DQ = false with
// flash_bwd_dq_tc is the deterministic two-pass path.
//
// The tile variants (the host's BWD_TILE_VARIANTS names them; all round the same way, they
// differ in speed). Registers as ptxas (CUDA 13, sm_90) gives them; an SM has 64 K registers,
// 228 KiB of shared memory and at most 64 warps.
//   KN = 64, KM = 32, 4 warps    the first kernel: 120-161 registers at D <= 64 (3 or 4 blocks,
//                                12-16 warps per SM), 232-255 at D = 96, 128 (2 blocks, 8 warps;
//                                the fused kernel at D = 128 spills a few words).
//   KN = 128, 8 warps            each Q / dO tile copied into shared memory serves twice the
//                                keys, and each dQ element takes one atomic per 128 keys
//                                instead of per 64. The same per-thread work, so about the same
//                                registers: 128-174 at D <= 64, 232-255 at D = 96, 128 (up to 32
//                                bytes spilled): one block (8 warps) per SM, two at D = 32.
//   KM = 64                      half the barriers, lse / D loads and dS round trips per key;
//                                S and dP grow to 8 x 4 floats each per thread: 173-179
//                                registers at D = 32, 238-255 at D >= 64; one block per SM.
//   MINB                         the launch bounds' minimum blocks per SM (0: none asked). The
//                                host asks 2 of the 8-warp blocks only at D <= 64, where ptxas
//                                then fits 128 registers with at most 32 bytes spilled: 16 warps
//                                per SM instead of 8. (At D > 64, dK and dV alone take 128.)
//   KVREG                        at D <= 64 each warp keeps its K and V A fragments (D / 2
//                                registers) for the whole pass: the S / dP products read only Q
//                                and dO from shared memory, 4 ldmatrix per 8 mma per k-step
//                                instead of 6. With KM = 64 ptxas fits them in what it uses
//                                anyway (235-246 at D = 64); with KM = 32 they spill. Ignored at
//                                D > 64, where they would push dK and dV into local memory.
//   RED2                         dQ added in (even, odd) column pairs by one sm_90 vector
//                                reduction (red.v2.f32) where E is even: half the atomic
//                                instructions and L2 operations.
// Shared memory (dkdv_smem_bytes; the host's dkdv_smem must pass exactly that): at most 154 KiB
// (KN = 128, KM = 64, D = 128), under the 227 KiB a block may opt in to; with KM = 32 two
// blocks fit up to D = 128 (111 KiB each), so the registers decide the blocks per SM.

// Threads of a block of KN keys: 32 per warp, a warp per 16 keys.
template <int KN> constexpr int bwd_threads() { return KN / 16 * 32; }

// Dynamic shared memory of the dK/dV kernels (bytes): K and V tiles; Q and dO tiles and the lse
// and D rows, two buffers each; DQ: the dS tile.
template <class T, int D, bool DQ, int KN, int KM> IGNIS_DEV unsigned dkdv_smem_bytes() {
  return (2 * KN * (D + 8) + 4 * KM * (D + 8) + (DQ ? KM * (KN + 8) : 0)) * sizeof(T) +
         4 * KM * sizeof(float);
}

// The fused dQ product (KM x D) = dS (KM x KN) K (KN x D) over the block's warps: warp w takes
// the query rows 16 (w % R) .. + 16 (R = KM / 16 row tiles) and the columns of group w / R, the
// groups splitting D into whole 16-column ldmatrix pairs: as many groups as the warps allow
// that divide D / 16 evenly. Warps past R x groups sit the product out (8 warps on 32-query
// tiles at D = 32: 2 groups of 16 columns; at D = 96: 3 groups of 32).
constexpr int dq_col_groups(int d, int most) {
  int g = most;
  while ((d / 16) % g) --g;
  return g;
}

template <class T, int D, bool CAUSAL, bool DQ, int KN, int KM, bool KVREG, bool RED2,
          bool DROP = false>
IGNIS_DEV void bwd_dkdv_tc(const T* __restrict__ q, const T* __restrict__ k,
                           const T* __restrict__ v, const T* __restrict__ dout,
                           const float* __restrict__ lse, const float* __restrict__ dvec,
                           T* __restrict__ dk, T* __restrict__ dv, float* __restrict__ dq_acc,
                           int L, int S, int E, float scale, float scale_log2, int vec,
                           int64 bh0, const Layout& lay, const Dropout& drop = Dropout{}) {
  constexpr int BN = KN, BM = KM, THREADS = bwd_threads<KN>(), WARPS = THREADS / 32;
  constexpr int LD = D + 8, NT = BM / 8, QTILE = BM * LD;
  constexpr int LDS = BN + 8;  // row stride of the dS tile: ldmatrix rows 4 banks apart
  constexpr bool KREG = KVREG && D <= 64;
  static_assert(KN % 16 == 0 && KM % 16 == 0 && WARPS % (KM / 16) == 0, "bwd tiles");
  unsigned char* attn_smem = dynamic_smem();
  require_smem(dkdv_smem_bytes<T, D, DQ, KN, KM>());
  T* ks = reinterpret_cast<T*>(attn_smem);
  T* vs = ks + BN * LD;
  T* qd = vs + BN * LD;  // buffer b: Q at qd + 2b QTILE, dO at qd + (2b+1) QTILE
  float* stats = reinterpret_cast<float*>(qd + 4 * QTILE);  // buffer b: lse, D at stats + 2b BM
  T* dss = reinterpret_cast<T*>(stats + 4 * BM);  // dS (BM x LDS), DQ only
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, t = lane & 3;
  const int64 bh = bh0 + blockIdx.y;
  const int n0 = blockIdx.x * BN;
  const T* qb = q + head_offset(lay.q, bh, lay.heads);
  const T* dob = dout + head_offset(lay.dout, bh, lay.heads);
  const int wk = warp * 16;  // this warp's first key, relative to n0
  const int key[2] = {n0 + wk + (lane >> 2), n0 + wk + (lane >> 2) + 8};
  const bool vec16 = vec != 0;
  const DropRng drng = drop_rng_if<DROP>(drop, bh, L, S);

  // Copies the query-side tiles of [m, m + BM) into buffer b (stats synchronously).
  auto load_queries = [&](int m, int b) {
    load_tile16<T, BM, D, LD, THREADS>(qd + 2 * b * QTILE, qb, m, L, E, lay.q.st, vec16);
    load_tile16<T, BM, D, LD, THREADS>(qd + (2 * b + 1) * QTILE, dob, m, L, E, lay.dout.st,
                                       vec16);
    for (int i = threadIdx.x; i < BM; i += THREADS) {
      const bool in = m + i < L;
      stats[2 * b * BM + i] = in ? lse[bh * L + m + i] : 0.f;
      stats[(2 * b + 1) * BM + i] = in ? dvec[bh * L + m + i] : 0.f;
    }
  };

  // The first query that sees key n0 is n0 - (S - L).
  const int m_begin = CAUSAL ? max(0, n0 - (S - L)) / BM * BM : 0;
  load_tile16<T, BN, D, LD, THREADS>(ks, k + head_offset(lay.k, bh, lay.heads), n0, S, E,
                                     lay.k.st, vec16);
  load_tile16<T, BN, D, LD, THREADS>(vs, v + head_offset(lay.v, bh, lay.heads), n0, S, E,
                                     lay.v.st, vec16);
  if (m_begin < L) load_queries(m_begin, 0);
  tc::cp_async_commit();

  float dka[D / 8][4], dva[D / 8][4];
  zero(dka);
  zero(dva);
  uint32 kf[KREG ? D / 16 : 1][4], vf[KREG ? D / 16 : 1][4];  // KREG: this warp's K, V rows
  // dQ pairs by vector reductions: every row offset (bh L + i) E even, the base 8-byte aligned.
  const bool pairs = RED2 && E % 2 == 0 && (unsigned long long)dq_acc % 8 == 0;

  int buf = 0;
  for (int m0 = m_begin; m0 < L; m0 += BM, buf ^= 1) {
    if (m0 + BM < L) {
      load_queries(m0 + BM, buf ^ 1);
      tc::cp_async_commit();
      tc::cp_async_wait<1>();
    } else {
      tc::cp_async_wait<0>();
    }
    __syncthreads();
    if constexpr (KREG) {
      if (m0 == m_begin) {  // the K and V tiles came with the first query tile
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
          load_a_frag_smem<LD>(kf[kk], ks + wk * LD + kk * 16);
          load_a_frag_smem<LD>(vf[kk], vs + wk * LD + kk * 16);
        }
      }
    }
    const T* qs = qd + 2 * buf * QTILE;
    const T* dos = qs + QTILE;
    const float* lse_s = stats + 2 * buf * BM;
    const float* d_s = lse_s + BM;

    // S^T (keys x queries) = K Q^T and dP^T = V dO^T.
    float s[NT][4], dp[NT][4];
    zero(s);
    zero(dp);
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      if constexpr (KREG) {
        mma_a_xt_step<T, NT, LD>(s, kf[kk], qs, kk);
        mma_a_xt_step<T, NT, LD>(dp, vf[kk], dos, kk);
      } else {
        uint32 ka[4], va[4];
        load_a_frag_smem<LD>(ka, ks + wk * LD + kk * 16);
        load_a_frag_smem<LD>(va, vs + wk * LD + kk * 16);
        mma_a_xt_step<T, NT, LD>(s, ka, qs, kk);
        mma_a_xt_step<T, NT, LD>(dp, va, dos, kk);
      }
    }
    // Block-uniform: does any (query, key) pair of this tile need the visibility test? (In a
    // tile that does not, every query sees a key, so its lse is finite.)
    const bool masked = m0 + BM > L || n0 + BN > S || (CAUSAL && n0 + BN - 1 > m0 + S - L);
    float z[DROP ? NT : 1][4];  // DROP: the dropout factors (1 / (1 - p) kept, 0 dropped)
    if constexpr (DROP) drop_cols<NT>(z, drng, key, m0, (float)drop.scale);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int il = nt * 8 + 2 * t + (c & 1);  // query, relative to m0
        const int j = key[c >> 1];
        // The select keeps exp2 of a masked -inf lse (a query with no key) out of the result.
        const float p = (!masked || visible<CAUSAL>(m0 + il, j, L, S))
                            ? exp2_fast(s[nt][c] * scale_log2 - lse_s[il] * log2e())
                            : 0.f;
        if constexpr (DROP) {  // dV takes the dropped P; dS = P (dP_dropped z - D)
          s[nt][c] = p * z[nt][c];
          dp[nt][c] = p * (dp[nt][c] * z[nt][c] - d_s[il]);
        } else {
          s[nt][c] = p;
          dp[nt][c] = p * (dp[nt][c] - d_s[il]);
        }
        if constexpr (DQ) dss[il * LDS + wk + (lane >> 2) + 8 * (c >> 1)] = from_acc<T>(dp[nt][c]);
      }
    mma_p_y<T, D, BM / 16, LD>(dva, s, dos);
    mma_p_y<T, D, BM / 16, LD>(dka, dp, qs);
    if constexpr (DQ) {
      __syncthreads();  // the whole dS tile is written
      constexpr int ROWS = BM / 16, GROUPS = dq_col_groups(D, WARPS / ROWS), CW = D / GROUPS;
      const int qr = (warp % ROWS) * 16, c0 = (warp / ROWS) * CW;
      if (ROWS * GROUPS == WARPS || warp < ROWS * GROUPS) {
        float dqa[CW / 8][4];
        zero(dqa);
        // dQ(16 x CW) = dS(16 x BN) K(BN x CW): A from the dS rows, B = K rows (transposed load).
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk) {
          uint32 a[4];
          load_a_frag_smem<LDS>(a, dss + qr * LDS + kk * 16);
          const T* base =
              ks + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + (lane >> 4) * 8 + c0;
#pragma unroll
          for (int np = 0; np < CW / 16; ++np) {
            uint32 r[4];
            tc::ldmatrix_x4_trans(r, base + np * 16);
            tc::mma_m16n8k16(dqa[2 * np], a, r[0], r[1], T{});
            tc::mma_m16n8k16(dqa[2 * np + 1], a, r[2], r[3], T{});
          }
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int i = m0 + qr + (lane >> 2) + 8 * h;
          if (i >= L) continue;
          float* dst = dq_acc + (bh * L + i) * E;
#pragma unroll
          for (int nt = 0; nt < CW / 8; ++nt) {
            const int col = c0 + nt * 8 + 2 * t;
            if (pairs) {  // (E even: col < E implies col + 1 < E)
              if (col < E) atomic_add2(dst + col, dqa[nt][2 * h], dqa[nt][2 * h + 1]);
            } else {
              if (col < E) atomicAdd(dst + col, dqa[nt][2 * h]);
              if (col + 1 < E) atomicAdd(dst + col + 1, dqa[nt][2 * h + 1]);
            }
          }
        }
      }
    }
    __syncthreads();
  }
  tc::cp_async_wait<0>();  // the K and V copies when no query sees these keys
  store_acc<T, D>(dk + head_offset(lay.dk, bh, lay.heads), dka, n0 + wk, S, E, lay.dk.st, scale,
                  scale);
  store_acc<T, D>(dv + head_offset(lay.dv, bh, lay.heads), dva, n0 + wk, S, E, lay.dv.st, 1.f,
                  1.f);
}

// (MINB = 0 asks no minimum: ptxas builds the same code as without one.)
template <class T, int D, bool CAUSAL, int KN, int KM, int MINB, bool KVREG, bool RED2>
__global__ void __launch_bounds__(bwd_threads<KN>(), MINB)
    flash_bwd_dkdv_tc(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                      const T* __restrict__ dout, const float* __restrict__ lse,
                      const float* __restrict__ dvec, T* __restrict__ dk, T* __restrict__ dv,
                      int L, int S, int E, float scale, float scale_log2, int vec, int64 bh0,
                      Layout lay) {
  bwd_dkdv_tc<T, D, CAUSAL, false, KN, KM, KVREG, RED2>(q, k, v, dout, lse, dvec, dk, dv, nullptr,
                                                        L, S, E, scale, scale_log2, vec, bh0, lay);
}

// flash_bwd_dkdv_tc with the probabilities dropped out (see the header).
template <class T, int D, bool CAUSAL, int KN, int KM, int MINB, bool KVREG, bool RED2>
__global__ void __launch_bounds__(bwd_threads<KN>(), MINB)
    flash_bwd_dkdv_tc_dropout(const T* __restrict__ q, const T* __restrict__ k,
                              const T* __restrict__ v, const T* __restrict__ dout,
                              const float* __restrict__ lse, const float* __restrict__ dvec,
                              T* __restrict__ dk, T* __restrict__ dv, int L, int S, int E,
                              float scale, float scale_log2, int vec, int64 bh0, Layout lay,
                              Dropout drop) {
  bwd_dkdv_tc<T, D, CAUSAL, false, KN, KM, KVREG, RED2, true>(
      q, k, v, dout, lse, dvec, dk, dv, nullptr, L, S, E, scale, scale_log2, vec, bh0, lay, drop);
}

// flash_bwd_fused_tc with the probabilities dropped out (see the header).
template <class T, int D, bool CAUSAL, int KN, int KM, int MINB, bool KVREG, bool RED2>
__global__ void __launch_bounds__(bwd_threads<KN>(), MINB)
    flash_bwd_fused_tc_dropout(const T* __restrict__ q, const T* __restrict__ k,
                               const T* __restrict__ v, const T* __restrict__ dout,
                               const float* __restrict__ lse, const float* __restrict__ dvec,
                               T* __restrict__ dk, T* __restrict__ dv, float* __restrict__ dq_acc,
                               int L, int S, int E, float scale, float scale_log2, int vec,
                               int64 bh0, Layout lay, Dropout drop) {
  bwd_dkdv_tc<T, D, CAUSAL, true, KN, KM, KVREG, RED2, true>(
      q, k, v, dout, lse, dvec, dk, dv, dq_acc, L, S, E, scale, scale_log2, vec, bh0, lay, drop);
}

// The fused backward: dK, dV and the unscaled float32 dQ sums in dq_acc (zero-filled first).
template <class T, int D, bool CAUSAL, int KN, int KM, int MINB, bool KVREG, bool RED2>
__global__ void __launch_bounds__(bwd_threads<KN>(), MINB)
    flash_bwd_fused_tc(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                       const T* __restrict__ dout, const float* __restrict__ lse,
                       const float* __restrict__ dvec, T* __restrict__ dk, T* __restrict__ dv,
                       float* __restrict__ dq_acc, int L, int S, int E, float scale,
                       float scale_log2, int vec, int64 bh0, Layout lay) {
  bwd_dkdv_tc<T, D, CAUSAL, true, KN, KM, KVREG, RED2>(q, k, v, dout, lse, dvec, dk, dv, dq_acc,
                                                       L, S, E, scale, scale_log2, vec, bh0, lay);
}

// dQ row r = bh * L + i = a fused backward's sums (contiguous rows of E, in A: float for the
// tensor-core backward, T itself for the scalar one) times scale, rounded to T, into the strided
// dq; one warp per row.
template <class T, class A = float>
__global__ void attn_dq_finish(const A* __restrict__ dq_acc, T* __restrict__ dq, int64 rows,
                               int L, int E, A scale, Layout lay) {
  const int lane = threadIdx.x & 31;
  const int64 warps = (int64)gridDim.x * (blockDim.x >> 5);
  for (int64 r = global_index() >> 5; r < rows; r += warps) {
    const int64 bh = r / L;
    T* d = dq + head_offset(lay.dq, bh, lay.heads) + (r - bh * L) * lay.dq.st;
    const A* a = dq_acc + r * E;
    for (int e = lane; e < E; e += 32) d[e] = from_acc<T>(a[e] * scale);
  }
}

// ---------------------------------------------------------------------------------------------
// Tensor-core backward: dQ. Block: 64 queries (16 per warp); key tiles of 32.

enum : int { kBwdQM = 64, kBwdQN = 32 };

template <class T, int D, bool CAUSAL, bool DROP>
IGNIS_DEV void flash_bwd_dq_tc_body(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, const T* __restrict__ dout, const float* __restrict__ lse, const float* __restrict__ dvec, T* __restrict__ dq, int L, int S, int E, float scale, float scale_log2, int vec, int64 bh0, const Layout& lay, const Dropout& drop) {
  constexpr int BM = kBwdQM, BN = kBwdQN, LD = D + 8, NT = BN / 8, TILE = BN * LD;
  unsigned char* attn_smem = dynamic_smem();
  require_smem(4 * TILE * sizeof(T));
  T* kv = reinterpret_cast<T*>(attn_smem);  // buffer b: K at kv + 2b TILE, V at kv + (2b+1) TILE
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, t = lane & 3;
  const int64 bh = bh0 + blockIdx.y;
  const int m0 = (CAUSAL ? gridDim.x - 1 - blockIdx.x : blockIdx.x) * BM;  // long rows first
  const int w0 = m0 + warp * 16;
  const int row[2] = {w0 + (lane >> 2), w0 + (lane >> 2) + 8};
  const T* kb = k + head_offset(lay.k, bh, lay.heads);
  const T* vb = v + head_offset(lay.v, bh, lay.heads);
  const int64 ldk = lay.k.st, ldv = lay.v.st;
  const bool vec16 = vec != 0;
  const DropRng drng = drop_rng_if<DROP>(drop, bh, L, S);

  const int n_end = CAUSAL ? min(S, max(0, m0 + BM + S - L)) : S;
  if (n_end > 0) {
    load_tile16<T, BN, D, LD, kTcThreads>(kv, kb, 0, S, E, ldk, vec16);
    load_tile16<T, BN, D, LD, kTcThreads>(kv + TILE, vb, 0, S, E, ldv, vec16);
    tc::cp_async_commit();
  }
  uint32 qf[D / 16][4], df[D / 16][4];
  load_a_frags<T, D>(qf, q + head_offset(lay.q, bh, lay.heads), w0, L, E, lay.q.st);
  load_a_frags<T, D>(df, dout + head_offset(lay.dout, bh, lay.heads), w0, L, E, lay.dout.st);
  float lse_l2[2], dr[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    lse_l2[h] = row[h] < L ? lse[bh * L + row[h]] * log2e() : 0.f;
    dr[h] = row[h] < L ? dvec[bh * L + row[h]] : 0.f;
  }
  float acc[D / 8][4];
  zero(acc);

  int buf = 0;
  for (int n0 = 0; n0 < n_end; n0 += BN, buf ^= 1) {
    if (n0 + BN < n_end) {
      T* next = kv + 2 * (buf ^ 1) * TILE;
      load_tile16<T, BN, D, LD, kTcThreads>(next, kb, n0 + BN, S, E, ldk, vec16);
      load_tile16<T, BN, D, LD, kTcThreads>(next + TILE, vb, n0 + BN, S, E, ldv, vec16);
      tc::cp_async_commit();
      tc::cp_async_wait<1>();
    } else {
      tc::cp_async_wait<0>();
    }
    __syncthreads();
    const T* ks = kv + 2 * buf * TILE;
    const T* vs = ks + TILE;
    float s[NT][4], dp[NT][4];
    zero(s);
    zero(dp);
    mma_a_xt<T, D, NT, LD>(s, qf, ks);
    mma_a_xt<T, D, NT, LD>(dp, df, vs);
    if constexpr (DROP) {  // dP = dP_dropped * (keep ? 1 / (1 - p) : 0)
      float z[NT][4];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int c = 0; c < 4; ++c) z[nt][c] = (float)drop.scale;
      drop_rows<NT>(z, drng, row, n0);
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int c = 0; c < 4; ++c) dp[nt][c] *= z[nt][c];
    }
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int h = c >> 1;
        const int j = n0 + nt * 8 + 2 * t + (c & 1);
        const float p =
            visible<CAUSAL>(row[h], j, L, S) ? exp2f(s[nt][c] * scale_log2 - lse_l2[h]) : 0.f;
        dp[nt][c] = p * (dp[nt][c] - dr[h]);
      }
    mma_p_y<T, D, BN / 16, LD>(acc, dp, ks);
    __syncthreads();
  }
  store_acc<T, D>(dq + head_offset(lay.dq, bh, lay.heads), acc, w0, L, E, lay.dq.st, scale,
                  scale);
}

template <class T, int D, bool CAUSAL>
__global__ void __launch_bounds__(kTcThreads)
    flash_bwd_dq_tc(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                    const T* __restrict__ dout, const float* __restrict__ lse,
                    const float* __restrict__ dvec, T* __restrict__ dq, int L, int S, int E,
                    float scale, float scale_log2, int vec, int64 bh0, Layout lay) {
  flash_bwd_dq_tc_body<T, D, CAUSAL, false>(q, k, v, dout, lse, dvec, dq, L, S, E, scale, scale_log2, vec, bh0, lay, Dropout{});
}

// flash_bwd_dq_tc with the probabilities dropped out (see the header).
template <class T, int D, bool CAUSAL>
__global__ void __launch_bounds__(kTcThreads)
    flash_bwd_dq_tc_dropout(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                    const T* __restrict__ dout, const float* __restrict__ lse,
                    const float* __restrict__ dvec, T* __restrict__ dq, int L, int S, int E,
                    float scale, float scale_log2, int vec, int64 bh0, Layout lay, Dropout drop) {
  flash_bwd_dq_tc_body<T, D, CAUSAL, true>(q, k, v, dout, lse, dvec, dq, L, S, E, scale, scale_log2, vec, bh0, lay, drop);
}

// ---------------------------------------------------------------------------------------------
// Scalar kernels (float, double): exact arithmetic in T. 8 warps; a warp owns 4 rows of the
// block's 32 and a lane owns one row of the other operand's 32-row tile, or columns
// lane + 32 c of an output row.

enum : int { kSimtThreads = 256, kSimtB = 32, kSimtRPW = 4 };

// Rows [r0, r0 + 32) of a (rows x E) matrix with row stride ldg into shared memory (row
// stride LD), zero outside.
template <class T, int D, int LD>
IGNIS_DEV void load_tile_simt(T* s, const T* g, int r0, int rows, int E, int64 ldg) {
  for (int c = threadIdx.x; c < kSimtB * D; c += kSimtThreads) {
    const int r = c / D, col = c % D;
    s[r * LD + col] = (r0 + r < rows && col < E) ? g[(int64)(r0 + r) * ldg + col] : T(0);
  }
}

template <class T, int D, int LDA, int LDB>
IGNIS_DEV T dot_rows(const T* a, const T* b) {
  T acc = 0;
#pragma unroll 8
  for (int e = 0; e < D; ++e) acc += a[e] * b[e];
  return acc;
}

template <class T, int D, bool CAUSAL, bool DROP>
IGNIS_DEV void flash_fwd_simt_body(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, T* __restrict__ out, T* __restrict__ lse, int L, int S, int E, T scale, int64 bh0, const Layout& lay, const Dropout& drop) {
  constexpr int B = kSimtB, LDQ = D, LDK = D + 1, C = D / 32;
  unsigned char* attn_smem = dynamic_smem();
  require_smem(B * (LDQ + LDK + D) * sizeof(T));
  T* qs = reinterpret_cast<T*>(attn_smem);
  T* ks = qs + B * LDQ;
  T* vs = ks + B * LDK;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64 bh = bh0 + blockIdx.y;
  const int m0 = blockIdx.x * B;
  const DropRng drng = drop_rng_if<DROP>(drop, bh, L, S);
  const T* kb = k + head_offset(lay.k, bh, lay.heads);
  const T* vb = v + head_offset(lay.v, bh, lay.heads);
  load_tile_simt<T, D, LDQ>(qs, q + head_offset(lay.q, bh, lay.heads), m0, L, E, lay.q.st);
  T m[kSimtRPW], l[kSimtRPW], o[kSimtRPW][C];
#pragma unroll
  for (int r = 0; r < kSimtRPW; ++r) {
    m[r] = minus_inf<T>();
    l[r] = 0;
#pragma unroll
    for (int c = 0; c < C; ++c) o[r][c] = 0;
  }
  const int n_end = CAUSAL ? min(S, max(0, m0 + B + S - L)) : S;
  for (int n0 = 0; n0 < n_end; n0 += B) {
    __syncthreads();
    load_tile_simt<T, D, LDK>(ks, kb, n0, S, E, lay.k.st);
    load_tile_simt<T, D, D>(vs, vb, n0, S, E, lay.v.st);
    __syncthreads();
    const int j = n0 + lane;
#pragma unroll
    for (int r = 0; r < kSimtRPW; ++r) {
      const int il = warp * kSimtRPW + r;
      T x = dot_rows<T, D, LDQ, LDK>(qs + il * LDQ, ks + lane * LDK) * scale;
      if (!visible<CAUSAL>(m0 + il, j, L, S)) x = minus_inf<T>();
      const T m_new = max_(m[r], warp_max(x));
      const T m_use = m_new == minus_inf<T>() ? T(0) : m_new;
      const T alpha = exp_(m[r] - m_use);
      const T p = exp_(x - m_use);
      m[r] = m_new;
      l[r] = l[r] * alpha + warp_sum(p);
#pragma unroll
      for (int c = 0; c < C; ++c) o[r][c] *= alpha;
      T pk = p;  // (the row sum above is of the undropped p)
      if constexpr (DROP) pk = drop_keep(drng, m0 + il, j) ? p : T(0);
      for (int jj = 0; jj < 32; ++jj) {
        const T pj = __shfl_sync(full_warp_mask, pk, jj);
#pragma unroll
        for (int c = 0; c < C; ++c) o[r][c] += pj * vs[jj * D + lane + 32 * c];
      }
    }
  }
  T* ob = out + head_offset(lay.o, bh, lay.heads);
#pragma unroll
  for (int r = 0; r < kSimtRPW; ++r) {
    const int i = m0 + warp * kSimtRPW + r;
    if (i >= L) continue;
    T inv = l[r] > 0 ? T(1) / l[r] : T(0);
    if constexpr (DROP) inv *= (T)drop.scale;
#pragma unroll
    for (int c = 0; c < C; ++c)
      if (lane + 32 * c < E) ob[i * lay.o.st + lane + 32 * c] = o[r][c] * inv;
    if (lane == 0) lse[bh * L + i] = l[r] > 0 ? m[r] + log_(l[r]) : minus_inf<T>();
  }
}

template <class T, int D, bool CAUSAL>
__global__ void __launch_bounds__(kSimtThreads)
    flash_fwd_simt(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                   T* __restrict__ out, T* __restrict__ lse, int L, int S, int E, T scale,
                   int64 bh0, Layout lay) {
  flash_fwd_simt_body<T, D, CAUSAL, false>(q, k, v, out, lse, L, S, E, scale, bh0, lay, Dropout{});
}

// flash_fwd_simt with the probabilities dropped out (see the header).
template <class T, int D, bool CAUSAL>
__global__ void __launch_bounds__(kSimtThreads)
    flash_fwd_simt_dropout(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                   T* __restrict__ out, T* __restrict__ lse, int L, int S, int E, T scale,
                   int64 bh0, Layout lay, Dropout drop) {
  flash_fwd_simt_body<T, D, CAUSAL, true>(q, k, v, out, lse, L, S, E, scale, bh0, lay, drop);
}

// dK, dV of 32 keys per block; a warp owns 4 keys, a lane one query of each 32-query tile.
template <class T, int D, bool CAUSAL, bool DROP>
IGNIS_DEV void flash_bwd_dkdv_simt_body(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, const T* __restrict__ dout, const T* __restrict__ lse, const T* __restrict__ dvec, T* __restrict__ dk, T* __restrict__ dv, int L, int S, int E, T scale, int64 bh0, const Layout& lay, const Dropout& drop) {
  constexpr int B = kSimtB, LDR = D + 1, C = D / 32;
  unsigned char* attn_smem = dynamic_smem();
  require_smem(B * (2 * D + 2 * LDR) * sizeof(T));
  T* ks = reinterpret_cast<T*>(attn_smem);
  T* vs = ks + B * D;
  T* qs = vs + B * D;
  T* dos = qs + B * LDR;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64 bh = bh0 + blockIdx.y;
  const int n0 = blockIdx.x * B;
  const DropRng drng = drop_rng_if<DROP>(drop, bh, L, S);
  const T* qb = q + head_offset(lay.q, bh, lay.heads);
  const T* db = dout + head_offset(lay.dout, bh, lay.heads);
  load_tile_simt<T, D, D>(ks, k + head_offset(lay.k, bh, lay.heads), n0, S, E, lay.k.st);
  load_tile_simt<T, D, D>(vs, v + head_offset(lay.v, bh, lay.heads), n0, S, E, lay.v.st);
  T dka[kSimtRPW][C], dva[kSimtRPW][C];
#pragma unroll
  for (int r = 0; r < kSimtRPW; ++r)
#pragma unroll
    for (int c = 0; c < C; ++c) dka[r][c] = dva[r][c] = 0;
  int m_begin = 0;
  if (CAUSAL) m_begin = max(0, n0 - (S - L)) / B * B;
  for (int m0 = m_begin; m0 < L; m0 += B) {
    __syncthreads();
    load_tile_simt<T, D, LDR>(qs, qb, m0, L, E, lay.q.st);
    load_tile_simt<T, D, LDR>(dos, db, m0, L, E, lay.dout.st);
    __syncthreads();
    const int i = m0 + lane;
    const T lse_i = i < L ? lse[bh * L + i] : T(0);
    const T d_i = i < L ? dvec[bh * L + i] : T(0);
#pragma unroll
    for (int r = 0; r < kSimtRPW; ++r) {
      const int jl = warp * kSimtRPW + r;
      const T sv = dot_rows<T, D, D, LDR>(ks + jl * D, qs + lane * LDR) * scale;
      const T dpv = dot_rows<T, D, D, LDR>(vs + jl * D, dos + lane * LDR);
      const T p = visible<CAUSAL>(i, n0 + jl, L, S) ? exp_(sv - lse_i) : T(0);
      T z = T(1);  // the dropout factor: 1 / (1 - p) kept, 0 dropped
      if constexpr (DROP) z = drop_keep(drng, i, n0 + jl) ? (T)drop.scale : T(0);
      const T ds = p * (dpv * z - d_i);
      const T pz = p * z;
      for (int ii = 0; ii < 32; ++ii) {
        const T pi = __shfl_sync(full_warp_mask, pz, ii);
        const T dsi = __shfl_sync(full_warp_mask, ds, ii);
#pragma unroll
        for (int c = 0; c < C; ++c) {
          dva[r][c] += pi * dos[ii * LDR + lane + 32 * c];
          dka[r][c] += dsi * qs[ii * LDR + lane + 32 * c];
        }
      }
    }
  }
  T* dkb = dk + head_offset(lay.dk, bh, lay.heads);
  T* dvb = dv + head_offset(lay.dv, bh, lay.heads);
#pragma unroll
  for (int r = 0; r < kSimtRPW; ++r) {
    const int j = n0 + warp * kSimtRPW + r;
    if (j >= S) continue;
#pragma unroll
    for (int c = 0; c < C; ++c)
      if (lane + 32 * c < E) {
        dkb[j * lay.dk.st + lane + 32 * c] = dka[r][c] * scale;
        dvb[j * lay.dv.st + lane + 32 * c] = dva[r][c];
      }
  }
}

template <class T, int D, bool CAUSAL>
__global__ void __launch_bounds__(kSimtThreads)
    flash_bwd_dkdv_simt(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                        const T* __restrict__ dout, const T* __restrict__ lse,
                        const T* __restrict__ dvec, T* __restrict__ dk, T* __restrict__ dv,
                        int L, int S, int E, T scale, int64 bh0, Layout lay) {
  flash_bwd_dkdv_simt_body<T, D, CAUSAL, false>(q, k, v, dout, lse, dvec, dk, dv, L, S, E, scale, bh0, lay, Dropout{});
}

// flash_bwd_dkdv_simt with the probabilities dropped out (see the header).
template <class T, int D, bool CAUSAL>
__global__ void __launch_bounds__(kSimtThreads)
    flash_bwd_dkdv_simt_dropout(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                        const T* __restrict__ dout, const T* __restrict__ lse,
                        const T* __restrict__ dvec, T* __restrict__ dk, T* __restrict__ dv,
                        int L, int S, int E, T scale, int64 bh0, Layout lay, Dropout drop) {
  flash_bwd_dkdv_simt_body<T, D, CAUSAL, true>(q, k, v, dout, lse, dvec, dk, dv, L, S, E, scale, bh0, lay, drop);
}

// dQ of 32 queries per block; a warp owns 4 queries, a lane one key of each 32-key tile.
template <class T, int D, bool CAUSAL, bool DROP>
IGNIS_DEV void flash_bwd_dq_simt_body(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, const T* __restrict__ dout, const T* __restrict__ lse, const T* __restrict__ dvec, T* __restrict__ dq, int L, int S, int E, T scale, int64 bh0, const Layout& lay, const Dropout& drop) {
  constexpr int B = kSimtB, LDR = D + 1, C = D / 32;
  unsigned char* attn_smem = dynamic_smem();
  require_smem(B * (2 * D + 2 * LDR) * sizeof(T));
  T* qs = reinterpret_cast<T*>(attn_smem);
  T* dos = qs + B * D;
  T* ks = dos + B * D;
  T* vs = ks + B * LDR;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64 bh = bh0 + blockIdx.y;
  const int m0 = blockIdx.x * B;
  const DropRng drng = drop_rng_if<DROP>(drop, bh, L, S);
  const T* kb = k + head_offset(lay.k, bh, lay.heads);
  const T* vb = v + head_offset(lay.v, bh, lay.heads);
  load_tile_simt<T, D, D>(qs, q + head_offset(lay.q, bh, lay.heads), m0, L, E, lay.q.st);
  load_tile_simt<T, D, D>(dos, dout + head_offset(lay.dout, bh, lay.heads), m0, L, E,
                          lay.dout.st);
  T acc[kSimtRPW][C], lse_r[kSimtRPW], d_r[kSimtRPW];
#pragma unroll
  for (int r = 0; r < kSimtRPW; ++r) {
    const int i = m0 + warp * kSimtRPW + r;
    lse_r[r] = i < L ? lse[bh * L + i] : T(0);
    d_r[r] = i < L ? dvec[bh * L + i] : T(0);
#pragma unroll
    for (int c = 0; c < C; ++c) acc[r][c] = 0;
  }
  const int n_end = CAUSAL ? min(S, max(0, m0 + B + S - L)) : S;
  for (int n0 = 0; n0 < n_end; n0 += B) {
    __syncthreads();
    load_tile_simt<T, D, LDR>(ks, kb, n0, S, E, lay.k.st);
    load_tile_simt<T, D, LDR>(vs, vb, n0, S, E, lay.v.st);
    __syncthreads();
    const int j = n0 + lane;
#pragma unroll
    for (int r = 0; r < kSimtRPW; ++r) {
      const int il = warp * kSimtRPW + r;
      const T sv = dot_rows<T, D, D, LDR>(qs + il * D, ks + lane * LDR) * scale;
      const T dpv = dot_rows<T, D, D, LDR>(dos + il * D, vs + lane * LDR);
      const T p = visible<CAUSAL>(m0 + il, j, L, S) ? exp_(sv - lse_r[r]) : T(0);
      T z = T(1);  // the dropout factor: 1 / (1 - p) kept, 0 dropped
      if constexpr (DROP) z = drop_keep(drng, m0 + il, j) ? (T)drop.scale : T(0);
      const T ds = p * (dpv * z - d_r[r]);
      for (int jj = 0; jj < 32; ++jj) {
        const T dsj = __shfl_sync(full_warp_mask, ds, jj);
#pragma unroll
        for (int c = 0; c < C; ++c) acc[r][c] += dsj * ks[jj * LDR + lane + 32 * c];
      }
    }
  }
  T* dqb = dq + head_offset(lay.dq, bh, lay.heads);
#pragma unroll
  for (int r = 0; r < kSimtRPW; ++r) {
    const int i = m0 + warp * kSimtRPW + r;
    if (i >= L) continue;
#pragma unroll
    for (int c = 0; c < C; ++c)
      if (lane + 32 * c < E) dqb[i * lay.dq.st + lane + 32 * c] = acc[r][c] * scale;
  }
}

template <class T, int D, bool CAUSAL>
__global__ void __launch_bounds__(kSimtThreads)
    flash_bwd_dq_simt(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                      const T* __restrict__ dout, const T* __restrict__ lse,
                      const T* __restrict__ dvec, T* __restrict__ dq, int L, int S, int E,
                      T scale, int64 bh0, Layout lay) {
  flash_bwd_dq_simt_body<T, D, CAUSAL, false>(q, k, v, dout, lse, dvec, dq, L, S, E, scale, bh0, lay, Dropout{});
}

// flash_bwd_dq_simt with the probabilities dropped out (see the header).
template <class T, int D, bool CAUSAL>
__global__ void __launch_bounds__(kSimtThreads)
    flash_bwd_dq_simt_dropout(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                      const T* __restrict__ dout, const T* __restrict__ lse,
                      const T* __restrict__ dvec, T* __restrict__ dq, int L, int S, int E,
                      T scale, int64 bh0, Layout lay, Dropout drop) {
  flash_bwd_dq_simt_body<T, D, CAUSAL, true>(q, k, v, dout, lse, dvec, dq, L, S, E, scale, bh0, lay, drop);
}

// ---------------------------------------------------------------------------------------------
// Tiled scalar kernels (float, double): exact arithmetic in T (no TF32), register micro-tiles.
// 256 threads as a 16 x 16 grid: thread (ty, tx) = (tid / 16, tid % 16) owns rows ty + 16 i of
// the block's tile and columns tx + 16 j of the other operand's tile in every score tile, and
// rows ty + 16 i, columns 64 g + 4 tx + [0, 4) of the output accumulator, so each 16-byte
// shared-memory load feeds 4 to 8 FMAs. The 16 threads of a row are one half-warp: row maxima
// and sums reduce with 4 shuffles. Scores are kept in the log2 domain (log2(e) folded into the
// scale, exp2); lse is converted back to natural log. Tile sizes (BM, BN), stages ST (2: the
// next K/V or Q/dO tile is copied while the current one is used) and the launch-bounds minimum
// MINB are template parameters chosen per (dtype, head dim) by the host (attention.py); D is
// 64 or 128. Shared-memory rows are padded to D + 4 elements: 16-byte aligned, and the 8
// threads of a 16-byte load phase hit distinct banks.
//
//   flash_fwd_simt_tiled   BM queries per block, BN-key tiles (fully masked causal tiles are
//                          never loaded); the probability tile goes through shared memory.
//   flash_bwd_dq_simt_tiled    dQ of BM queries, walking BN-key tiles.
//   flash_bwd_dkdv_simt_tiled  dK, dV of BN keys, walking BM-query tiles that see them.
//   flash_bwd_fused_simt_tiled dK, dV as flash_bwd_dkdv_simt_tiled and, in the same pass, each
//                              query tile's dS K added into a zero-filled dQ accumulator in T
//                              with atomics (attn_dq_finish<T, T> scales it into dq).
// dK/dV + dQ is the deterministic two-pass backward; the fused one recomputes the scores and
// probabilities once instead of twice, but the order of its atomic sums varies from run to run.

enum : int { kTiledThreads = 256 };

IGNIS_DEV float exp2_(float x) { return exp2f(x); }
IGNIS_DEV double exp2_(double x) { return exp2(x); }
IGNIS_DEV float log2_(float x) { return log2f(x); }
IGNIS_DEV double log2_(double x) { return log2(x); }
template <class T> IGNIS_DEV T ln2_() { return T(0.6931471805599453094); }
template <class T> IGNIS_DEV T log2e_() { return T(1.4426950408889634074); }

// Four consecutive elements at a 16-byte aligned shared-memory address (one or two 16-byte loads).
IGNIS_DEV void ld4(const float* p, float (&x)[4]) {
#if defined(IGNIS_ATTN_HOST_EMULATION)
  if ((unsigned long long)p % 16) __builtin_trap();  // the device's 16-byte load would fault
  for (int u = 0; u < 4; ++u) x[u] = p[u];
#else
  const float4 a = *reinterpret_cast<const float4*>(p);
  x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w;
#endif
}
IGNIS_DEV void ld4(const double* p, double (&x)[4]) {
#if defined(IGNIS_ATTN_HOST_EMULATION)
  if ((unsigned long long)p % 16) __builtin_trap();
  for (int u = 0; u < 4; ++u) x[u] = p[u];
#else
  const double2 a = reinterpret_cast<const double2*>(p)[0];
  const double2 b = reinterpret_cast<const double2*>(p)[1];
  x[0] = a.x, x[1] = a.y, x[2] = b.x, x[3] = b.y;
#endif
}

// Rows [r0, r0 + R) x cols [0, D) of a (rows x E) matrix with row stride ldg into shared
// memory (row stride LD), zeros outside. vec (E * sizeof(T) % 16 == 0, 16-byte aligned bases and
// strides): cp.async 16-byte copies that the caller commits and waits for; otherwise plain
// element copies.
template <class T, int R, int D, int LD>
IGNIS_DEV void tiled_load(T* s, const T* g, int r0, int rows, int E, int64 ldg, bool vec) {
  if (vec) {
    constexpr int V = 16 / sizeof(T), CH = D / V;
    for (int c = threadIdx.x; c < R * CH; c += kTiledThreads) {
      const int r = c / CH, col = (c % CH) * V;
      T* dst = s + r * LD + col;
      if (r0 + r < rows && col < E) {  // col < E implies col + V <= E here
        tc::cp_async_16(dst, g + (int64)(r0 + r) * ldg + col, 16);
      } else {
#pragma unroll
        for (int u = 0; u < V; ++u) dst[u] = T(0);
      }
    }
  } else {
    for (int c = threadIdx.x; c < R * D; c += kTiledThreads) {
      const int r = c / D, col = c % D;
      s[r * LD + col] = (r0 + r < rows && col < E) ? g[(int64)(r0 + r) * ldg + col] : T(0);
    }
  }
}

// acc[i][j] += sum_{e < D} a[(ty + 16 i) * LD + e] * b[(tx + 16 j) * LD + e]
template <class T, int RM, int CN, int D, int LD>
IGNIS_DEV void tile_abt(T (&acc)[RM][CN], const T* a, const T* b, int ty, int tx) {
#pragma unroll 2
  for (int e = 0; e < D; e += 4) {
    T x[RM][4], y[CN][4];
#pragma unroll
    for (int i = 0; i < RM; ++i) ld4(a + (ty + 16 * i) * LD + e, x[i]);
#pragma unroll
    for (int j = 0; j < CN; ++j) ld4(b + (tx + 16 * j) * LD + e, y[j]);
#pragma unroll
    for (int u = 0; u < 4; ++u)
#pragma unroll
      for (int i = 0; i < RM; ++i)
#pragma unroll
        for (int j = 0; j < CN; ++j) acc[i][j] += x[i][u] * y[j][u];
  }
}

// o[i][4 g + w] += sum_{c < KC} p[(ty + 16 i) * LDP + c] * v[c * LDV + 64 g + 4 tx + w]
template <class T, int RM, int G, int KC, int LDP, int LDV>
IGNIS_DEV void tile_pv(T (&o)[RM][4 * G], const T* p, const T* v, int ty, int tx) {
#pragma unroll 2
  for (int c = 0; c < KC; c += 4) {
    T x[RM][4];
#pragma unroll
    for (int i = 0; i < RM; ++i) ld4(p + (ty + 16 * i) * LDP + c, x[i]);
#pragma unroll
    for (int u = 0; u < 4; ++u)
#pragma unroll
      for (int g = 0; g < G; ++g) {
        T y[4];
        ld4(v + (c + u) * LDV + 64 * g + 4 * tx, y);
#pragma unroll
        for (int i = 0; i < RM; ++i)
#pragma unroll
          for (int w = 0; w < 4; ++w) o[i][4 * g + w] += x[i][u] * y[w];
      }
  }
}

// Reduction over the 16 threads (one half-warp) that share a row.
template <class T> IGNIS_DEV T row16_max(T x) {
#pragma unroll
  for (int off = 8; off > 0; off >>= 1) x = max_(x, __shfl_xor_sync(full_warp_mask, x, off));
  return x;
}
template <class T> IGNIS_DEV T row16_sum(T x) {
#pragma unroll
  for (int off = 8; off > 0; off >>= 1) x += __shfl_xor_sync(full_warp_mask, x, off);
  return x;
}

// Rows ty + 16 i, columns 64 g + 4 tx + w (< E) of acc * mul into rows [r0, r0 + 16 RM) of g
// (row stride ldg).
template <class T, int RM, int G>
IGNIS_DEV void tile_store(T* g, const T (&acc)[RM][4 * G], int r0, int rows, int E, int64 ldg,
                          T mul, int ty, int tx) {
#pragma unroll
  for (int i = 0; i < RM; ++i) {
    const int r = r0 + ty + 16 * i;
    if (r >= rows) continue;
#pragma unroll
    for (int gg = 0; gg < G; ++gg)
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        const int col = 64 * gg + 4 * tx + w;
        if (col < E) g[(int64)r * ldg + col] = acc[i][4 * gg + w] * mul;
      }
  }
}

template <class T, int D, bool CAUSAL, int BM, int BN, int ST, int MINB, bool DROP>
IGNIS_DEV void flash_fwd_simt_tiled_body(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, T* __restrict__ out, T* __restrict__ lse, int L, int S, int E, T scale_log2, int vec, int64 bh0, const Layout& lay, const Dropout& drop) {
  constexpr int LD = D + 4, LDP = BN + 4, RM = BM / 16, CN = BN / 16, G = D / 64;
  static_assert(D % 64 == 0 && BM % 16 == 0 && BN % 16 == 0 && (ST == 1 || ST == 2), "tiles");
  unsigned char* attn_smem = dynamic_smem();
  require_smem((BM * LD + 2 * ST * BN * LD + BM * LDP) * sizeof(T));
  T* qs = reinterpret_cast<T*>(attn_smem);
  T* kvs = qs + BM * LD;  // stage s: K tile at kvs + 2 s BN LD, V tile after it
  T* ps = kvs + 2 * ST * BN * LD;
  const int ty = threadIdx.x >> 4, tx = threadIdx.x & 15;
  const int64 bh = bh0 + blockIdx.y;
  const int m0 = blockIdx.x * BM;
  const DropRng drng = drop_rng_if<DROP>(drop, bh, L, S);
  const T* kb = k + head_offset(lay.k, bh, lay.heads);
  const T* vb = v + head_offset(lay.v, bh, lay.heads);
  const int64 ldk = lay.k.st, ldv = lay.v.st;
  tiled_load<T, BM, D, LD>(qs, q + head_offset(lay.q, bh, lay.heads), m0, L, E, lay.q.st, vec);
  // Keys past the block's last query's horizon are masked for every row: never loaded.
  const int n_end = CAUSAL ? min(S, max(0, m0 + BM + S - L)) : S;
  const int tiles = (n_end + BN - 1) / BN;
  if (tiles > 0) {
    tiled_load<T, BN, D, LD>(kvs, kb, 0, S, E, ldk, vec);
    tiled_load<T, BN, D, LD>(kvs + BN * LD, vb, 0, S, E, ldv, vec);
  }
  tc::cp_async_commit();
  T m[RM], l[RM], o[RM][4 * G];
#pragma unroll
  for (int i = 0; i < RM; ++i) {
    m[i] = minus_inf<T>();
    l[i] = 0;
#pragma unroll
    for (int w = 0; w < 4 * G; ++w) o[i][w] = 0;
  }
  for (int t = 0; t < tiles; ++t) {
    const T* ks = kvs + (t % ST) * 2 * BN * LD;
    const T* vs = ks + BN * LD;
    if (ST == 2 && t + 1 < tiles) {
      T* nk = kvs + ((t + 1) % ST) * 2 * BN * LD;
      tiled_load<T, BN, D, LD>(nk, kb, (t + 1) * BN, S, E, ldk, vec);
      tiled_load<T, BN, D, LD>(nk + BN * LD, vb, (t + 1) * BN, S, E, ldv, vec);
      tc::cp_async_commit();
      tc::cp_async_wait<1>();
    } else {
      tc::cp_async_wait<0>();
    }
    __syncthreads();
    T s[RM][CN];
#pragma unroll
    for (int i = 0; i < RM; ++i)
#pragma unroll
      for (int j = 0; j < CN; ++j) s[i][j] = 0;
    tile_abt<T, RM, CN, D, LD>(s, qs, ks, ty, tx);
    const int n0 = t * BN;
#pragma unroll
    for (int i = 0; i < RM; ++i) {
      const int row = m0 + ty + 16 * i;
      T mx = minus_inf<T>();
#pragma unroll
      for (int j = 0; j < CN; ++j) {
        const T x = visible<CAUSAL>(row, n0 + tx + 16 * j, L, S) ? s[i][j] * scale_log2
                                                                 : minus_inf<T>();
        s[i][j] = x;
        mx = max_(mx, x);
      }
      const T m_new = max_(m[i], row16_max(mx));
      const T m_use = m_new == minus_inf<T>() ? T(0) : m_new;  // a row with nothing visible yet
      const T alpha = exp2_(m[i] - m_use);
      m[i] = m_new;
      T sum = 0;
#pragma unroll
      for (int j = 0; j < CN; ++j) {
        const T p = exp2_(s[i][j] - m_use);
        T pk = p;  // (the row sum is of the undropped p)
        if constexpr (DROP) pk = drop_keep(drng, row, n0 + tx + 16 * j) ? p : T(0);
        ps[(ty + 16 * i) * LDP + tx + 16 * j] = pk;
        sum += p;
      }
      l[i] = l[i] * alpha + sum;  // this thread's share; the row's 16 shares add up at the end
#pragma unroll
      for (int w = 0; w < 4 * G; ++w) o[i][w] *= alpha;
    }
    __syncthreads();
    tile_pv<T, RM, G, BN, LDP, LD>(o, ps, vs, ty, tx);
    __syncthreads();  // the P tile and this stage are overwritten next
    if (ST == 1 && t + 1 < tiles) {
      tiled_load<T, BN, D, LD>(kvs, kb, (t + 1) * BN, S, E, ldk, vec);
      tiled_load<T, BN, D, LD>(kvs + BN * LD, vb, (t + 1) * BN, S, E, ldv, vec);
      tc::cp_async_commit();
    }
  }
  tc::cp_async_wait<0>();  // with no key tile the Q copies are still open
  T inv[RM];
#pragma unroll
  for (int i = 0; i < RM; ++i) {
    const T sum = row16_sum(l[i]);
    inv[i] = sum > 0 ? T(1) / sum : T(0);
    if constexpr (DROP) inv[i] *= (T)drop.scale;
    const int row = m0 + ty + 16 * i;
    if (tx == 0 && row < L)
      lse[bh * L + row] = sum > 0 ? (m[i] + log2_(sum)) * ln2_<T>() : minus_inf<T>();
#pragma unroll
    for (int w = 0; w < 4 * G; ++w) o[i][w] *= inv[i];
  }
  tile_store<T, RM, G>(out + head_offset(lay.o, bh, lay.heads), o, m0, L, E, lay.o.st, T(1), ty,
                       tx);
}

template <class T, int D, bool CAUSAL, int BM, int BN, int ST, int MINB>
__global__ void __launch_bounds__(kTiledThreads, MINB)
    flash_fwd_simt_tiled(const T* __restrict__ q, const T* __restrict__ k,
                         const T* __restrict__ v, T* __restrict__ out, T* __restrict__ lse, int L,
                         int S, int E, T scale_log2, int vec, int64 bh0, Layout lay) {
  flash_fwd_simt_tiled_body<T, D, CAUSAL, BM, BN, ST, MINB, false>(q, k, v, out, lse, L, S, E, scale_log2, vec, bh0, lay, Dropout{});
}

// flash_fwd_simt_tiled with the probabilities dropped out (see the header).
template <class T, int D, bool CAUSAL, int BM, int BN, int ST, int MINB>
__global__ void __launch_bounds__(kTiledThreads, MINB)
    flash_fwd_simt_tiled_dropout(const T* __restrict__ q, const T* __restrict__ k,
                         const T* __restrict__ v, T* __restrict__ out, T* __restrict__ lse, int L,
                         int S, int E, T scale_log2, int vec, int64 bh0, Layout lay, Dropout drop) {
  flash_fwd_simt_tiled_body<T, D, CAUSAL, BM, BN, ST, MINB, true>(q, k, v, out, lse, L, S, E, scale_log2, vec, bh0, lay, drop);
}

// dQ of BM queries per block, walking the BN-key tiles they see.
template <class T, int D, bool CAUSAL, int BM, int BN, int ST, int MINB, bool DROP>
IGNIS_DEV void flash_bwd_dq_simt_tiled_body(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, const T* __restrict__ dout, const T* __restrict__ lse, const T* __restrict__ dvec, T* __restrict__ dq, int L, int S, int E, T scale, T scale_log2, int vec, int64 bh0, const Layout& lay, const Dropout& drop) {
  constexpr int LD = D + 4, LDP = BN + 4, RM = BM / 16, CN = BN / 16, G = D / 64;
  static_assert(D % 64 == 0 && BM % 16 == 0 && BN % 16 == 0 && (ST == 1 || ST == 2), "tiles");
  unsigned char* attn_smem = dynamic_smem();
  require_smem((2 * BM * LD + 2 * ST * BN * LD + BM * LDP) * sizeof(T));
  T* qs = reinterpret_cast<T*>(attn_smem);
  T* dos = qs + BM * LD;
  T* kvs = dos + BM * LD;
  T* dss = kvs + 2 * ST * BN * LD;
  const int ty = threadIdx.x >> 4, tx = threadIdx.x & 15;
  const int64 bh = bh0 + blockIdx.y;
  const int m0 = blockIdx.x * BM;
  const DropRng drng = drop_rng_if<DROP>(drop, bh, L, S);
  const T* kb = k + head_offset(lay.k, bh, lay.heads);
  const T* vb = v + head_offset(lay.v, bh, lay.heads);
  const int64 ldk = lay.k.st, ldv = lay.v.st;
  tiled_load<T, BM, D, LD>(qs, q + head_offset(lay.q, bh, lay.heads), m0, L, E, lay.q.st, vec);
  tiled_load<T, BM, D, LD>(dos, dout + head_offset(lay.dout, bh, lay.heads), m0, L, E,
                           lay.dout.st, vec);
  const int n_end = CAUSAL ? min(S, max(0, m0 + BM + S - L)) : S;
  const int tiles = (n_end + BN - 1) / BN;
  if (tiles > 0) {
    tiled_load<T, BN, D, LD>(kvs, kb, 0, S, E, ldk, vec);
    tiled_load<T, BN, D, LD>(kvs + BN * LD, vb, 0, S, E, ldv, vec);
  }
  tc::cp_async_commit();
  T lse2[RM], dr[RM], acc[RM][4 * G];
#pragma unroll
  for (int i = 0; i < RM; ++i) {
    const int row = m0 + ty + 16 * i;
    lse2[i] = row < L ? lse[bh * L + row] * log2e_<T>() : T(0);
    dr[i] = row < L ? dvec[bh * L + row] : T(0);
#pragma unroll
    for (int w = 0; w < 4 * G; ++w) acc[i][w] = 0;
  }
  for (int t = 0; t < tiles; ++t) {
    const T* ks = kvs + (t % ST) * 2 * BN * LD;
    const T* vs = ks + BN * LD;
    if (ST == 2 && t + 1 < tiles) {
      T* nk = kvs + ((t + 1) % ST) * 2 * BN * LD;
      tiled_load<T, BN, D, LD>(nk, kb, (t + 1) * BN, S, E, ldk, vec);
      tiled_load<T, BN, D, LD>(nk + BN * LD, vb, (t + 1) * BN, S, E, ldv, vec);
      tc::cp_async_commit();
      tc::cp_async_wait<1>();
    } else {
      tc::cp_async_wait<0>();
    }
    __syncthreads();
    T s[RM][CN], dp[RM][CN];
#pragma unroll
    for (int i = 0; i < RM; ++i)
#pragma unroll
      for (int j = 0; j < CN; ++j) s[i][j] = dp[i][j] = 0;
    tile_abt<T, RM, CN, D, LD>(s, qs, ks, ty, tx);
    tile_abt<T, RM, CN, D, LD>(dp, dos, vs, ty, tx);
    const int n0 = t * BN;
#pragma unroll
    for (int i = 0; i < RM; ++i)
#pragma unroll
      for (int j = 0; j < CN; ++j) {
        const int row = m0 + ty + 16 * i, col = n0 + tx + 16 * j;
        const T p = visible<CAUSAL>(row, col, L, S) ? exp2_(s[i][j] * scale_log2 - lse2[i]) : T(0);
        T z = T(1);  // the dropout factor: 1 / (1 - p) kept, 0 dropped
        if constexpr (DROP) z = drop_keep(drng, row, col) ? (T)drop.scale : T(0);
        dss[(ty + 16 * i) * LDP + tx + 16 * j] = p * (dp[i][j] * z - dr[i]);
      }
    __syncthreads();
    tile_pv<T, RM, G, BN, LDP, LD>(acc, dss, ks, ty, tx);
    __syncthreads();
    if (ST == 1 && t + 1 < tiles) {
      tiled_load<T, BN, D, LD>(kvs, kb, (t + 1) * BN, S, E, ldk, vec);
      tiled_load<T, BN, D, LD>(kvs + BN * LD, vb, (t + 1) * BN, S, E, ldv, vec);
      tc::cp_async_commit();
    }
  }
  tc::cp_async_wait<0>();
  tile_store<T, RM, G>(dq + head_offset(lay.dq, bh, lay.heads), acc, m0, L, E, lay.dq.st, scale,
                       ty, tx);
}

template <class T, int D, bool CAUSAL, int BM, int BN, int ST, int MINB>
__global__ void __launch_bounds__(kTiledThreads, MINB)
    flash_bwd_dq_simt_tiled(const T* __restrict__ q, const T* __restrict__ k,
                            const T* __restrict__ v, const T* __restrict__ dout,
                            const T* __restrict__ lse, const T* __restrict__ dvec,
                            T* __restrict__ dq, int L, int S, int E, T scale, T scale_log2,
                            int vec, int64 bh0, Layout lay) {
  flash_bwd_dq_simt_tiled_body<T, D, CAUSAL, BM, BN, ST, MINB, false>(q, k, v, dout, lse, dvec, dq, L, S, E, scale, scale_log2, vec, bh0, lay, Dropout{});
}

// flash_bwd_dq_simt_tiled with the probabilities dropped out (see the header).
template <class T, int D, bool CAUSAL, int BM, int BN, int ST, int MINB>
__global__ void __launch_bounds__(kTiledThreads, MINB)
    flash_bwd_dq_simt_tiled_dropout(const T* __restrict__ q, const T* __restrict__ k,
                            const T* __restrict__ v, const T* __restrict__ dout,
                            const T* __restrict__ lse, const T* __restrict__ dvec,
                            T* __restrict__ dq, int L, int S, int E, T scale, T scale_log2,
                            int vec, int64 bh0, Layout lay, Dropout drop) {
  flash_bwd_dq_simt_tiled_body<T, D, CAUSAL, BM, BN, ST, MINB, true>(q, k, v, dout, lse, dvec, dq, L, S, E, scale, scale_log2, vec, bh0, lay, drop);
}

// dst[0, 4) += (a, b, c, d) with atomics (a template: instantiated only where used, so that
// files without a float64 atomicAdd still compile).
template <class T> IGNIS_DEV void atomic_add4(T* dst, T a, T b, T c, T d) {
  atomicAdd(dst, a);
  atomicAdd(dst + 1, b);
  atomicAdd(dst + 2, c);
  atomicAdd(dst + 3, d);
}
#if !defined(IGNIS_ATTN_HOST_EMULATION) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// float on sm_90: one vector reduction (dst 16-byte aligned), a quarter of the atomic
// instructions. (PTX has no float64 vector reduction.)
IGNIS_DEV void atomic_add4(float* dst, float a, float b, float c, float d) {
  asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(dst), "f"(a), "f"(b), "f"(c),
               "f"(d)
               : "memory");
}
#endif

// Rows ty + 16 i, columns 64 g + 4 tx + w (< E) of acc added with atomics into rows
// [r0, r0 + 16 RM) of g (contiguous rows of E), those < rows and >= first (the rows before
// first gave nothing). vec4 (E % 4 == 0, g 16-byte aligned): four columns per atomic_add4.
template <class T, int RM, int G>
IGNIS_DEV void tile_atomic_add(T* g, const T (&acc)[RM][4 * G], int r0, int first, int rows,
                               int E, bool vec4, int ty, int tx) {
#pragma unroll
  for (int i = 0; i < RM; ++i) {
    const int r = r0 + ty + 16 * i;
    if (r < first || r >= rows) continue;
    T* dst = g + (int64)r * E;
#pragma unroll
    for (int gg = 0; gg < G; ++gg) {
      const int col = 64 * gg + 4 * tx;
      if (col >= E) continue;
      const T* a = acc[i] + 4 * gg;
      if (vec4) {
        atomic_add4(dst + col, a[0], a[1], a[2], a[3]);
      } else {
#pragma unroll
        for (int w = 0; w < 4; ++w)
          if (col + w < E) atomicAdd(dst + col + w, a[w]);
      }
    }
  }
}

// Dynamic shared memory (elements of T) of the dK/dV kernels: K and V tiles, ST stages of Q
// and dO tiles, the P^T and dS^T tiles, lse and D per stage; DQ adds the dS tile.
template <int D, int BN, int BM, int ST, bool DQ> constexpr int dkdv_tiled_smem() {
  return 2 * BN * (D + 4) + 2 * ST * BM * (D + 4) + 2 * BN * (BM + 4) + 2 * ST * BM +
         (DQ ? BM * (BN + 4) : 0);
}

// dK, dV of BN keys per block, walking the BM-query tiles that see them. Here the thread grid's
// rows are keys and its columns queries. DQ (the fused backward) also writes each query tile's
// dS (queries x keys) to shared memory and adds dS K (unscaled) to dq_acc, contiguous (BH, L, E)
// rows of T, with atomics; in that product the thread grid's rows are queries.
template <class T, int D, bool CAUSAL, int BN, int BM, int ST, bool DQ, bool DROP = false>
IGNIS_DEV void bwd_dkdv_simt_tiled(const T* __restrict__ q, const T* __restrict__ k,
                                   const T* __restrict__ v, const T* __restrict__ dout,
                                   const T* __restrict__ lse, const T* __restrict__ dvec,
                                   T* __restrict__ dk, T* __restrict__ dv, T* __restrict__ dq_acc,
                                   int L, int S, int E, T scale, T scale_log2, int vec, int64 bh0,
                                   const Layout& lay, const Dropout& drop = Dropout{}) {
  constexpr int LD = D + 4, LDP = BM + 4, RN = BN / 16, CM = BM / 16, G = D / 64;
  constexpr int LDQ = BN + 4;  // row stride of the dS tile (DQ)
  static_assert(D % 64 == 0 && BM % 16 == 0 && BN % 16 == 0 && (ST == 1 || ST == 2), "tiles");
  constexpr int STAGE = 2 * BM * LD;  // Q tile, then dO tile
  unsigned char* attn_smem = dynamic_smem();
  require_smem(dkdv_tiled_smem<D, BN, BM, ST, DQ>() * sizeof(T));
  T* ks = reinterpret_cast<T*>(attn_smem);
  T* vs = ks + BN * LD;
  T* qdo = vs + BN * LD;
  T* pts = qdo + ST * STAGE;  // P^T (keys x queries)
  T* dsts = pts + BN * LDP;   // dS^T
  T* dss = dsts + BN * LDP;   // dS (queries x keys), DQ only
  T* stats = dss + (DQ ? BM * LDQ : 0);  // stage s: lse * log2(e) at stats + 2 s BM, D after it
  const int ty = threadIdx.x >> 4, tx = threadIdx.x & 15;
  const int64 bh = bh0 + blockIdx.y;
  const int n0 = blockIdx.x * BN;
  const DropRng drng = drop_rng_if<DROP>(drop, bh, L, S);
  const T* qb = q + head_offset(lay.q, bh, lay.heads);
  const T* db = dout + head_offset(lay.dout, bh, lay.heads);
  tiled_load<T, BN, D, LD>(ks, k + head_offset(lay.k, bh, lay.heads), n0, S, E, lay.k.st, vec);
  tiled_load<T, BN, D, LD>(vs, v + head_offset(lay.v, bh, lay.heads), n0, S, E, lay.v.st, vec);
  // Queries before m_begin see none of these keys (nor, in its tile, before q_first).
  const int q_first = CAUSAL ? max(0, n0 - (S - L)) : 0;
  const int m_begin = q_first / BM * BM;
  const int tiles = m_begin < L ? (L - m_begin + BM - 1) / BM : 0;
  T* dqb = DQ ? dq_acc + bh * L * E : nullptr;
  const bool vec4 = DQ && E % 4 == 0 && (unsigned long long)dq_acc % 16 == 0;
  auto load_stage = [&](int t, int st) {
    const int m0 = m_begin + t * BM;
    tiled_load<T, BM, D, LD>(qdo + st * STAGE, qb, m0, L, E, lay.q.st, vec);
    tiled_load<T, BM, D, LD>(qdo + st * STAGE + BM * LD, db, m0, L, E, lay.dout.st, vec);
    T* sx = stats + 2 * st * BM;
    for (int r = threadIdx.x; r < BM; r += kTiledThreads) {
      const int i = m0 + r;
      sx[r] = i < L ? lse[bh * L + i] * log2e_<T>() : T(0);
      sx[BM + r] = i < L ? dvec[bh * L + i] : T(0);
    }
  };
  if (tiles > 0) load_stage(0, 0);
  tc::cp_async_commit();
  T dka[RN][4 * G], dva[RN][4 * G];
#pragma unroll
  for (int i = 0; i < RN; ++i)
#pragma unroll
    for (int w = 0; w < 4 * G; ++w) dka[i][w] = dva[i][w] = 0;
  for (int t = 0; t < tiles; ++t) {
    const int st = t % ST;
    const T* qs = qdo + st * STAGE;
    const T* dos = qs + BM * LD;
    const T* lse2 = stats + 2 * st * BM;
    const T* dr = lse2 + BM;
    if (ST == 2 && t + 1 < tiles) {
      load_stage(t + 1, (t + 1) % ST);
      tc::cp_async_commit();
      tc::cp_async_wait<1>();
    } else {
      tc::cp_async_wait<0>();
    }
    __syncthreads();
    T s[RN][CM], dp[RN][CM];
#pragma unroll
    for (int i = 0; i < RN; ++i)
#pragma unroll
      for (int j = 0; j < CM; ++j) s[i][j] = dp[i][j] = 0;
    tile_abt<T, RN, CM, D, LD>(s, ks, qs, ty, tx);
    tile_abt<T, RN, CM, D, LD>(dp, vs, dos, ty, tx);
    const int m0 = m_begin + t * BM;
#pragma unroll
    for (int i = 0; i < RN; ++i)
#pragma unroll
      for (int j = 0; j < CM; ++j) {
        const int key = ty + 16 * i, qry = tx + 16 * j;
        const T p = visible<CAUSAL>(m0 + qry, n0 + key, L, S)
                        ? exp2_(s[i][j] * scale_log2 - lse2[qry])
                        : T(0);
        T z = T(1);  // the dropout factor: 1 / (1 - p) kept, 0 dropped
        if constexpr (DROP) z = drop_keep(drng, m0 + qry, n0 + key) ? (T)drop.scale : T(0);
        const T ds = p * (dp[i][j] * z - dr[qry]);
        pts[key * LDP + qry] = p * z;
        dsts[key * LDP + qry] = ds;
        if constexpr (DQ) dss[qry * LDQ + key] = ds;
      }
    __syncthreads();
    tile_pv<T, RN, G, BM, LDP, LD>(dva, pts, dos, ty, tx);
    tile_pv<T, RN, G, BM, LDP, LD>(dka, dsts, qs, ty, tx);
    if constexpr (DQ) {
      // dQ (BM x D) += dS (BM x BN) K (BN x D): rows ty + 16 i are queries here.
      T dqa[CM][4 * G];
#pragma unroll
      for (int i = 0; i < CM; ++i)
#pragma unroll
        for (int w = 0; w < 4 * G; ++w) dqa[i][w] = 0;
      tile_pv<T, CM, G, BN, LDQ, LD>(dqa, dss, ks, ty, tx);
      tile_atomic_add<T, CM, G>(dqb, dqa, m0, q_first, L, E, vec4, ty, tx);
    }
    __syncthreads();
    if (ST == 1 && t + 1 < tiles) {
      load_stage(t + 1, 0);
      tc::cp_async_commit();
    }
  }
  tc::cp_async_wait<0>();
  tile_store<T, RN, G>(dk + head_offset(lay.dk, bh, lay.heads), dka, n0, S, E, lay.dk.st, scale,
                       ty, tx);
  tile_store<T, RN, G>(dv + head_offset(lay.dv, bh, lay.heads), dva, n0, S, E, lay.dv.st, T(1),
                       ty, tx);
}

template <class T, int D, bool CAUSAL, int BN, int BM, int ST, int MINB>
__global__ void __launch_bounds__(kTiledThreads, MINB)
    flash_bwd_dkdv_simt_tiled(const T* __restrict__ q, const T* __restrict__ k,
                              const T* __restrict__ v, const T* __restrict__ dout,
                              const T* __restrict__ lse, const T* __restrict__ dvec,
                              T* __restrict__ dk, T* __restrict__ dv, int L, int S, int E,
                              T scale, T scale_log2, int vec, int64 bh0, Layout lay) {
  bwd_dkdv_simt_tiled<T, D, CAUSAL, BN, BM, ST, false>(q, k, v, dout, lse, dvec, dk, dv, nullptr,
                                                       L, S, E, scale, scale_log2, vec, bh0, lay);
}

// The fused backward: dK, dV and the unscaled dQ sums in dq_acc (zero-filled first).
template <class T, int D, bool CAUSAL, int BN, int BM, int ST, int MINB>
__global__ void __launch_bounds__(kTiledThreads, MINB)
    flash_bwd_fused_simt_tiled(const T* __restrict__ q, const T* __restrict__ k,
                               const T* __restrict__ v, const T* __restrict__ dout,
                               const T* __restrict__ lse, const T* __restrict__ dvec,
                               T* __restrict__ dk, T* __restrict__ dv, T* __restrict__ dq_acc,
                               int L, int S, int E, T scale, T scale_log2, int vec, int64 bh0,
                               Layout lay) {
  bwd_dkdv_simt_tiled<T, D, CAUSAL, BN, BM, ST, true>(q, k, v, dout, lse, dvec, dk, dv, dq_acc, L,
                                                      S, E, scale, scale_log2, vec, bh0, lay);
}

// flash_bwd_dkdv_simt_tiled with the probabilities dropped out (see the header).
template <class T, int D, bool CAUSAL, int BN, int BM, int ST, int MINB>
__global__ void __launch_bounds__(kTiledThreads, MINB)
    flash_bwd_dkdv_simt_tiled_dropout(const T* __restrict__ q, const T* __restrict__ k,
                                      const T* __restrict__ v, const T* __restrict__ dout,
                                      const T* __restrict__ lse, const T* __restrict__ dvec,
                                      T* __restrict__ dk, T* __restrict__ dv, int L, int S, int E,
                                      T scale, T scale_log2, int vec, int64 bh0, Layout lay,
                                      Dropout drop) {
  bwd_dkdv_simt_tiled<T, D, CAUSAL, BN, BM, ST, false, true>(
      q, k, v, dout, lse, dvec, dk, dv, nullptr, L, S, E, scale, scale_log2, vec, bh0, lay, drop);
}

// flash_bwd_fused_simt_tiled with the probabilities dropped out (see the header).
template <class T, int D, bool CAUSAL, int BN, int BM, int ST, int MINB>
__global__ void __launch_bounds__(kTiledThreads, MINB)
    flash_bwd_fused_simt_tiled_dropout(const T* __restrict__ q, const T* __restrict__ k,
                                       const T* __restrict__ v, const T* __restrict__ dout,
                                       const T* __restrict__ lse, const T* __restrict__ dvec,
                                       T* __restrict__ dk, T* __restrict__ dv,
                                       T* __restrict__ dq_acc, int L, int S, int E, T scale,
                                       T scale_log2, int vec, int64 bh0, Layout lay,
                                       Dropout drop) {
  bwd_dkdv_simt_tiled<T, D, CAUSAL, BN, BM, ST, true, true>(
      q, k, v, dout, lse, dvec, dk, dv, dq_acc, L, S, E, scale, scale_log2, vec, bh0, lay, drop);
}

// ---------------------------------------------------------------------------------------------
// Decode: one query per (batch, head) against cache rows [0, n). Block (split, bh) takes rows
// [split * chunk, min(n, (split + 1) * chunk)); its 4 warps take every 4th row, a lane columns
// lane + 32 c. Partial results (max, sum, unnormalized output) in A: float, double for double
// (A is a template parameter, not acc_type<T>::type, so launch arguments can be typed exactly).

enum : int { kDecodeThreads = 128, kDecodeWarps = 4 };

template <class T, class A, int D>
__global__ void __launch_bounds__(kDecodeThreads)
    decode_partial(const T* __restrict__ q, const T* __restrict__ kc, const T* __restrict__ vc,
                   A* __restrict__ part_m, A* __restrict__ part_l, A* __restrict__ part_o,
                   int s_max, int n, int chunk, int E, A scale) {
  constexpr int C = D / 32;
  __shared__ A sm[kDecodeWarps], sl[kDecodeWarps], so[kDecodeWarps][D];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64 bh = blockIdx.y;
  const int split = blockIdx.x, splits = gridDim.x;
  const int begin = split * chunk, end = min(n, begin + chunk);
  A qv[C], o[C];
#pragma unroll
  for (int c = 0; c < C; ++c) {
    const int e = lane + 32 * c;
    qv[c] = e < E ? (A)to_acc(q[bh * E + e]) * scale : A(0);
    o[c] = 0;
  }
  A m = minus_inf<A>(), l = 0;
  const T* kb = kc + bh * s_max * E;
  const T* vb = vc + bh * s_max * E;
  for (int j = begin + warp; j < end; j += kDecodeWarps) {
    A x = 0;
#pragma unroll
    for (int c = 0; c < C; ++c) {
      const int e = lane + 32 * c;
      if (e < E) x += qv[c] * (A)to_acc(kb[(int64)j * E + e]);
    }
    x = warp_sum(x);
    const A m_new = max_(m, x);
    const A alpha = exp_(m - m_new);
    const A p = exp_(x - m_new);
    m = m_new;
    l = l * alpha + p;
#pragma unroll
    for (int c = 0; c < C; ++c) {
      const int e = lane + 32 * c;
      o[c] = o[c] * alpha + (e < E ? p * (A)to_acc(vb[(int64)j * E + e]) : A(0));
    }
  }
  if (lane == 0) {
    sm[warp] = m;
    sl[warp] = l;
  }
#pragma unroll
  for (int c = 0; c < C; ++c) so[warp][lane + 32 * c] = o[c];
  __syncthreads();
  A mx = minus_inf<A>();
#pragma unroll
  for (int w = 0; w < kDecodeWarps; ++w) mx = max_(mx, sm[w]);
  const A m_use = mx == minus_inf<A>() ? A(0) : mx;
  const int64 slot = bh * splits + split;
  for (int e = threadIdx.x; e < D; e += kDecodeThreads) {
    A acc = 0;
#pragma unroll
    for (int w = 0; w < kDecodeWarps; ++w) acc += exp_(sm[w] - m_use) * so[w][e];
    part_o[slot * D + e] = acc;
  }
  if (threadIdx.x == 0) {
    A acc = 0;
#pragma unroll
    for (int w = 0; w < kDecodeWarps; ++w) acc += exp_(sm[w] - m_use) * sl[w];
    part_m[slot] = mx;
    part_l[slot] = acc;
  }
}

template <class T, class A>
__global__ void decode_combine(const A* __restrict__ part_m, const A* __restrict__ part_l,
                               const A* __restrict__ part_o, T* __restrict__ out, int splits,
                               int D, int E) {
  const int64 bh = blockIdx.x;
  A mx = minus_inf<A>();
  for (int s = 0; s < splits; ++s) mx = max_(mx, part_m[bh * splits + s]);
  const A m_use = mx == minus_inf<A>() ? A(0) : mx;
  A den = 0;
  for (int s = 0; s < splits; ++s) den += exp_(part_m[bh * splits + s] - m_use) * part_l[bh * splits + s];
  const A inv = den > 0 ? A(1) / den : A(0);
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    A num = 0;
    for (int s = 0; s < splits; ++s)
      num += exp_(part_m[bh * splits + s] - m_use) * part_o[(bh * splits + s) * D + e];
    out[bh * E + e] = from_acc<T>(num * inv);
  }
}

}  // namespace attn
}  // namespace ignis
