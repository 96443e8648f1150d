// attention_sm90.cu - float16 / bfloat16 attention forward and fused backward on Hopper's
// warpgroup MMA (wgmma, sm_90a) and tensor memory accelerator (TMA). Same layout, masking and
// results (up to float32 summation order) as flash_fwd_tc_m32 and flash_bwd_fused_tc in
// attention.cu, with the same building blocks (attention.cuh), and the same arguments except
// that q, k, v (and dout) come as TMA tensor maps (tma.cuh; the host builds them with the
// tiles' box sizes) and there is no 16-byte copy flag: operands TMA cannot read take the
// mma.sync kernels. Built on its own because wgmma needs the architecture-specific target
// sm_90a, which runs on compute capability 9.0 only.
//
//   flash_fwd_wgmma<T, D, CAUSAL, GROUPS, BN>
//                                    D = 64 or 128; 64 queries per warpgroup, GROUPS
//                                    warpgroups per block, BN-key tiles. Q and the K / V
//                                    tiles lie in shared memory with the 128-byte swizzle
//                                    (wgmma.cuh), copied by the TMA unit (tma.cuh; one thread
//                                    issues the copies, mbarriers say when a tile has landed
//                                    and when every warp is done with a buffer). S = Q K^T
//                                    reads both operands from shared memory; O += P V takes P
//                                    from registers (the score accumulator turned into A
//                                    fragments) and V transposed (MN-major). Online softmax in
//                                    registers, overlapping the previous tile's P V.
//   flash_bwd_fused_wgmma<T, D, CAUSAL, BM>
//                                    D = 64 or 128; 128 keys per block of two warpgroups,
//                                    BM-query tiles; dK, dV and dQ by atomics (see the
//                                    kernel's comment).
#include "attention.cuh"
#include "tma.cuh"
#include "wgmma.cuh"

namespace ignis {
namespace attn {

// acc(64 x N) = A * B^T over K = D: A (this group's 64 rows) and B (N rows) K-major swizzled
// tiles whose panels hold RA and RB rows.
template <class T, int N, int D, int RA, int RB>
IGNIS_DEV void wgmma_abt(float* acc, unsigned a_addr, unsigned b_addr) {
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    const uint64 da = wg::desc_kmajor(a_addr + (kk >> 2) * (RA * 128) + (kk & 3) * 32);
    const uint64 db = wg::desc_kmajor(b_addr + (kk >> 2) * (RB * 128) + (kk & 3) * 32);
    if constexpr (N == 128) {
      if (kk == 0) {
        wg::wgmma_ss_n128_zero<0, 0>(acc, da, db, T{});
      } else {
        wg::wgmma_ss_n128<0, 0>(acc, da, db, 1, T{});
      }
    } else {
      if (kk == 0) {
        wg::wgmma_ss_n64_zero<0, 0>(acc, da, db, T{});
      } else {
        wg::wgmma_ss_n64<0, 0>(acc, da, db, 1, T{});
      }
    }
  }
}

// acc(64 x D) += P(64 x KN, A fragments) * Y, Y a (KN x D) swizzled tile read MN-major.
template <class T, int D, int KN>
IGNIS_DEV void wgmma_py(float* acc, const uint32 (&p)[KN / 16][4], unsigned y_addr) {
#pragma unroll
  for (int kk = 0; kk < KN / 16; ++kk) {
    const uint64 db = wg::desc_mnmajor(y_addr + kk * 16 * 128, KN * 128);
    if constexpr (D == 128) {
      wg::wgmma_rs_n128<1>(acc, p[kk], db, 1, T{});
    } else {
      wg::wgmma_rs_n64<1>(acc, p[kk], db, 1, T{});
    }
  }
}

// The score accumulator of 16 keys is the A fragment of those keys: P rounded to T.
template <class T, int NT>
IGNIS_DEV void pack_p(uint32 (&pa)[NT / 2][4], const float (&s)[NT][4]) {
#pragma unroll
  for (int kk = 0; kk < NT / 2; ++kk) {
    pa[kk][0] = tc::pack_pair<T>(s[2 * kk][0], s[2 * kk][1]);
    pa[kk][1] = tc::pack_pair<T>(s[2 * kk][2], s[2 * kk][3]);
    pa[kk][2] = tc::pack_pair<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    pa[kk][3] = tc::pack_pair<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
  }
}

// This warp's 16 output rows from r0 on (O / l * mul, rounded) and their lse (natural log; -inf for
// a row that saw no key).
template <class T, int D>
IGNIS_DEV void finish_rows(T* ob, float* lse_rows, const float (&o)[D / 8][4],
                           const float (&mrow)[2], const float (&lrow)[2], const int (&row)[2],
                           int r0, int L, int E, int64 ldo, float mul = 1.f) {
  float inv[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float l = quad_sum(lrow[h]);
    inv[h] = (l > 0.f ? 1.f / l : 0.f) * mul;  // mul: the dropout scale (exactly 1 without)
    if ((threadIdx.x & 3) == 0 && row[h] < L)
      lse_rows[row[h]] = l > 0.f ? (mrow[h] + log2f(l)) * ln2() : neg_inf();
  }
  store_acc<T, D>(ob, o, r0, L, E, ldo, inv[0], inv[1]);
}

// Buffers of flash_fwd_wgmma's K and V tiles (attention.py's wgmma_fwd_smem counts them).
constexpr int FWD_KBUF = 2, FWD_VBUF = 3;

// The barriers of flash_fwd_wgmma, in order after its tiles: Q loaded; K / V buffer b loaded
// (full) and read by every warp (free).
enum FwdBarrier { Q_FULL = 0, K_FULL = 1, V_FULL = K_FULL + FWD_KBUF, K_FREE = V_FULL + FWD_VBUF,
                  V_FREE = K_FREE + FWD_KBUF, FWD_BARRIERS = V_FREE + FWD_VBUF };

// Copies of a tile of R rows x D columns from row `row` of head (h, b) of map into the swizzled
// tile at dst (64-column panels), completing R * D * 2 bytes on bar.
template <int R, int D>
IGNIS_DEV void tma_copies(unsigned dst, const tma::TensorMap& map, int row, int h, int b,
                          unsigned bar) {
#pragma unroll
  for (int p = 0; p < D / 64; ++p) tma::load_4d(dst + p * R * 128, map, p * 64, row, h, b, bar);
}

// The same, announced to bar (one arrival) first.
template <int R, int D>
IGNIS_DEV void tma_tile(unsigned dst, const tma::TensorMap& map, int row, int h, int b,
                        unsigned bar) {
  tma::arrive_expect_tx(bar, R * D * 2);
  tma_copies<R, D>(dst, map, row, h, b, bar);
}

// A warp is done with a buffer: one arrival per warp (the wgmma wait before it is warp-wide).
IGNIS_DEV void release(unsigned bar) {
  if ((threadIdx.x & 31) == 0) tma::arrive(bar);
}

// Software pipeline over key tiles j (each group on its own 64 rows; thread 0 also issues the
// TMA copies):
//   step j: [thread 0: copy K_{j+1} into K_{j-1}'s buffer once every warp has read K_{j-1}]
//           wait for K_j and V_{j-1}; issue S_j = Q K_j^T, then O += P_{j-1} V_{j-1}; wait for
//           S_j only (K_j's buffer is free); softmax of S_j (the exponentials overlap the tensor
//           cores' P V); wait for P V (V_{j-1}'s buffer is free); scale O by alpha_j; P_j into
//           A fragments; [thread 0: copy V_{j+1} into V_{j-2}'s buffer once every warp is done
//           with it].
// so K has FWD_KBUF = 2 buffers and V FWD_VBUF = 3: a copy never waits for the step the other
// groups are in, only for the one before, and the groups run without a block-wide barrier.
// Step 0 (no P V yet) and the last tile's P V are peeled off the loop.
template <class T, int D, bool CAUSAL, int GROUPS, int BN, bool DROP>
IGNIS_DEV void flash_fwd_wgmma_body(const tma::TensorMap& qmap, const tma::TensorMap& kmap, const tma::TensorMap& vmap, T* __restrict__ out, float* __restrict__ lse, int L, int S, int E, float scale_log2, int64 bh0, const Layout& lay, const Dropout& drop) {
  static_assert(D == 64 || D == 128, "flash_fwd_wgmma: D is 64 or 128");
  constexpr int BM = 64 * GROUPS, NT = BN / 8;
  constexpr unsigned QTILE = BM * D * 2, KTILE = BN * D * 2;  // bytes
  unsigned char* raw = dynamic_smem();
  // Swizzled tiles start 1024-byte aligned; the host asks for 1024 bytes of slack.
  const unsigned raw_addr = tc::smem_u32addr(raw);
  const unsigned pad = (1024u - (raw_addr & 1023u)) & 1023u;
  require_smem(pad + QTILE + (FWD_KBUF + FWD_VBUF) * KTILE + FWD_BARRIERS * 8);
  const unsigned q_addr = raw_addr + pad, k_addr = q_addr + QTILE;
  const unsigned v_addr = k_addr + FWD_KBUF * KTILE, bars = v_addr + FWD_VBUF * KTILE;
  auto bar = [bars](int i) { return bars + 8u * i; };

  const int group = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
  const bool producer = threadIdx.x == 0;
  const int64 bh = bh0 + blockIdx.y;
  const int hb = (int)((unsigned)bh / (unsigned)lay.heads), hh = (int)(bh - (int64)hb * lay.heads);
  const int m0 = (CAUSAL ? gridDim.x - 1 - blockIdx.x : blockIdx.x) * BM;  // long rows first
  const int wr = 64 * group + 16 * warp;  // this warp's first query, relative to m0
  const int row[2] = {m0 + wr + (lane >> 2), m0 + wr + (lane >> 2) + 8};
  const unsigned qg_addr = q_addr + 64 * group * 128;  // this group's rows of every Q panel

  const int n_end = CAUSAL ? min(S, max(0, m0 + BM + S - L)) : S;
  const DropRng drng = drop_rng_if<DROP>(drop, bh, L, S);
  const float oscale = DROP ? (float)drop.scale : 1.f;
  const int tiles = (n_end + BN - 1) / BN;
  float o[D / 8][4], s[NT][4];
  uint32 pa[BN / 16][4];
  zero(o);
  float mrow[2] = {neg_inf(), neg_inf()}, lrow[2] = {0.f, 0.f}, alpha[2];
  T* ob = out + head_offset(lay.o, bh, lay.heads);
  if (tiles == 0) {  // no visible key: zero rows, lse -inf
    finish_rows<T, D>(ob, lse + bh * L, o, mrow, lrow, row, m0 + wr, L, E, lay.o.st, oscale);
    return;
  }

  if (producer) {
    tma::prefetch(qmap);
    tma::prefetch(kmap);
    tma::prefetch(vmap);
    tma::barrier_init(bar(Q_FULL), 1);
    for (int b = 0; b < FWD_KBUF; ++b) {
      tma::barrier_init(bar(K_FULL + b), 1);
      tma::barrier_init(bar(K_FREE + b), 4 * GROUPS);
    }
    for (int b = 0; b < FWD_VBUF; ++b) {
      tma::barrier_init(bar(V_FULL + b), 1);
      tma::barrier_init(bar(V_FREE + b), 4 * GROUPS);
    }
    tma::barrier_init_fence();
  }
  __syncthreads();
  if (producer) {
    tma_tile<BM, D>(q_addr, qmap, m0, hh, hb, bar(Q_FULL));
    tma_tile<BN, D>(k_addr, kmap, 0, hh, hb, bar(K_FULL));
    if (1 < tiles) tma_tile<BN, D>(k_addr + KTILE, kmap, BN, hh, hb, bar(K_FULL + 1));
    tma_tile<BN, D>(v_addr, vmap, 0, hh, hb, bar(V_FULL));
  }

  // Every wgmma below is issued unconditionally (a branch around one makes ptxas serialise
  // them all): step 0's S and the last tile's P V are peeled off the loop.
  tma::wait(bar(Q_FULL), 0);
  tma::wait(bar(K_FULL), 0);
  wg::wgmma_fence();
  wgmma_abt<T, BN, D, BM, BN>(&s[0][0], qg_addr, k_addr);
  wg::wgmma_commit();
  wg::wgmma_wait<0>();
  wg::fence_operands<BN / 2>(&s[0][0]);
  release(bar(K_FREE));
  online_softmax<CAUSAL, NT>(s, mrow, lrow, alpha, row, 0, L, S, scale_log2,
                             BN > S || (CAUSAL && BN - 1 > m0 + S - L));
  if constexpr (DROP) drop_rows<NT>(s, drng, row, 0);  // (after the undropped row sums)
  pack_p<T, NT>(pa, s);  // (O is still zero: no rescaling)
  if (producer && 1 < tiles) tma_tile<BN, D>(v_addr + KTILE, vmap, BN, hh, hb, bar(V_FULL + 1));

  for (int j = 1; j < tiles; ++j) {
    const int kb = j & 1, vb = (j - 1) % FWD_VBUF;  // K_j's and V_{j-1}'s buffers
    if (producer && j + 1 < tiles) {
      tma::wait(bar(K_FREE + (kb ^ 1)), ((j - 1) >> 1) & 1);  // S_{j-1} read it
      tma_tile<BN, D>(k_addr + (kb ^ 1) * KTILE, kmap, (j + 1) * BN, hh, hb,
                      bar(K_FULL + (kb ^ 1)));
    }
    tma::wait(bar(K_FULL + kb), (j >> 1) & 1);
    tma::wait(bar(V_FULL + vb), ((j - 1) / FWD_VBUF) & 1);
    wg::fence_operands<D / 2>(&o[0][0]);
    wg::fence_operands<BN / 4>(&pa[0][0]);
    wg::wgmma_fence();
    wgmma_abt<T, BN, D, BM, BN>(&s[0][0], qg_addr, k_addr + kb * KTILE);
    wg::wgmma_commit();
    wgmma_py<T, D, BN>(&o[0][0], pa, v_addr + vb * KTILE);
    wg::wgmma_commit();
    wg::wgmma_wait<1>();  // S_j (P V of step j - 1 may still run)
    wg::fence_operands<BN / 2>(&s[0][0]);
    release(bar(K_FREE + kb));

    const int n0 = j * BN;
    const bool masked = n0 + BN > S || (CAUSAL && n0 + BN - 1 > m0 + S - L);
    online_softmax<CAUSAL, NT>(s, mrow, lrow, alpha, row, n0, L, S, scale_log2, masked);
    if constexpr (DROP) drop_rows<NT>(s, drng, row, n0);

    wg::wgmma_wait<0>();
    wg::fence_operands<D / 2>(&o[0][0]);
    wg::fence_operands<BN / 4>(&pa[0][0]);
    release(bar(V_FREE + vb));
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt) {
      o[nt][0] *= alpha[0];
      o[nt][1] *= alpha[0];
      o[nt][2] *= alpha[1];
      o[nt][3] *= alpha[1];
    }
    pack_p<T, NT>(pa, s);
    if (producer && j + 1 < tiles) {  // V_{j+1} into V_{j-2}'s buffer
      const int nb = (j + 1) % FWD_VBUF;
      if (j >= 2) tma::wait(bar(V_FREE + nb), ((j - 2) / FWD_VBUF) & 1);
      tma_tile<BN, D>(v_addr + nb * KTILE, vmap, (j + 1) * BN, hh, hb, bar(V_FULL + nb));
    }
  }

  const int vb = (tiles - 1) % FWD_VBUF;
  tma::wait(bar(V_FULL + vb), ((tiles - 1) / FWD_VBUF) & 1);
  wg::fence_operands<D / 2>(&o[0][0]);
  wg::fence_operands<BN / 4>(&pa[0][0]);
  wg::wgmma_fence();
  wgmma_py<T, D, BN>(&o[0][0], pa, v_addr + vb * KTILE);
  wg::wgmma_commit();
  wg::wgmma_wait<0>();
  wg::fence_operands<D / 2>(&o[0][0]);
  finish_rows<T, D>(ob, lse + bh * L, o, mrow, lrow, row, m0 + wr, L, E, lay.o.st, oscale);
}

template <class T, int D, bool CAUSAL, int GROUPS, int BN>
__global__ void __launch_bounds__(GROUPS * 128, 1)
    flash_fwd_wgmma(const __grid_constant__ tma::TensorMap qmap,
                    const __grid_constant__ tma::TensorMap kmap,
                    const __grid_constant__ tma::TensorMap vmap, T* __restrict__ out,
                    float* __restrict__ lse, int L, int S, int E, float scale_log2, int64 bh0,
                    Layout lay) {
  flash_fwd_wgmma_body<T, D, CAUSAL, GROUPS, BN, false>(qmap, kmap, vmap, out, lse, L, S, E, scale_log2, bh0, lay, Dropout{});
}

// flash_fwd_wgmma with the probabilities dropped out (see the header).
template <class T, int D, bool CAUSAL, int GROUPS, int BN>
__global__ void __launch_bounds__(GROUPS * 128, 1)
    flash_fwd_wgmma_dropout(const __grid_constant__ tma::TensorMap qmap,
                    const __grid_constant__ tma::TensorMap kmap,
                    const __grid_constant__ tma::TensorMap vmap, T* __restrict__ out,
                    float* __restrict__ lse, int L, int S, int E, float scale_log2, int64 bh0,
                    Layout lay, Dropout drop) {
  flash_fwd_wgmma_body<T, D, CAUSAL, GROUPS, BN, true>(qmap, kmap, vmap, out, lse, L, S, E, scale_log2, bh0, lay, drop);
}

// ---------------------------------------------------------------------------------------------
// The fused backward (as flash_bwd_fused_tc: dK, dV and the unscaled float32 dQ sums in dq_acc,
// zero-filled first). 128 keys per block of two warpgroups (64 each), walking the BM-query tiles
// that see them (Q, dO, lse and D double-buffered, the next tile's copied while one is used: Q
// and dO by TMA, the rows by cp.async). Per tile, each group:
//   S^T = K Q^T and dP^T = V dO^T (both operands in shared memory, K-major);
//   P^T = 2^(S^T scale log2(e) - lse log2(e)), dS^T = P^T (dP^T - D), in registers;
//   dV += P^T dO and dK += dS^T Q (P^T, dS^T as A fragments; dO, Q read MN-major);
//   dS^T also into shared memory, and after a barrier dQ(BM x D/2, the group's half of the
//   columns) = dS K (dS read MN-major from the dS^T tile, K MN-major), added to dq_acc by
//   paired float32 reductions.
template <class T, int D, bool CAUSAL, int BM, bool DROP>
IGNIS_DEV void flash_bwd_fused_wgmma_body(const tma::TensorMap& qmap, const tma::TensorMap& kmap, const tma::TensorMap& vmap, const tma::TensorMap& domap, const float* __restrict__ lse, const float* __restrict__ dvec, T* __restrict__ dk, T* __restrict__ dv, float* __restrict__ dq_acc, int L, int S, int E, float scale, float scale_log2, int64 bh0, const Layout& lay, const Dropout& drop) {
  static_assert(D == 64 || D == 128, "flash_bwd_fused_wgmma: D is 64 or 128");
  static_assert(BM == 64, "flash_bwd_fused_wgmma: the dS^T tile rows are 64 queries (128 bytes)");
  constexpr int BN = 128, THREADS = 256, NT = BM / 8, DH = D / 2;
  constexpr unsigned KTILE = BN * D * 2, QTILE = BM * D * 2, DSTILE = BN * BM * 2;  // bytes
  constexpr unsigned KPANEL = BN * 128;  // one 64-column panel of the K tile
  unsigned char* raw = dynamic_smem();
  const unsigned raw_addr = tc::smem_u32addr(raw);
  const unsigned pad = (1024u - (raw_addr & 1023u)) & 1023u;
  require_smem(pad + 2 * KTILE + 4 * QTILE + DSTILE + 4 * BM * 4 + 3 * 8);
  unsigned char* qd = raw + pad + 2 * KTILE;  // buffer b: Q at qd + 2b QTILE, dO next to it
  unsigned char* dss = qd + 4 * QTILE;  // dS^T (BN keys x BM queries)
  float* stats = reinterpret_cast<float*>(dss + DSTILE);  // buffer b: lse, D at stats + 2b BM
  const unsigned k_addr = raw_addr + pad, v_addr = k_addr + KTILE, qd_addr = v_addr + KTILE;
  const unsigned ds_addr = qd_addr + 4 * QTILE;
  // mbarriers: the K and V tiles loaded; the query-side tiles of buffer b loaded (q_full + 8b)
  const unsigned kv_full = ds_addr + DSTILE + 4 * BM * 4, q_full = kv_full + 8;

  const int group = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
  const int t = lane & 3;
  const bool producer = threadIdx.x == 0;
  const int64 bh = bh0 + blockIdx.y;
  const int hb = (int)((unsigned)bh / (unsigned)lay.heads), hh = (int)(bh - (int64)hb * lay.heads);
  const int n0 = blockIdx.x * BN;
  const int wk = 64 * group + 16 * warp;  // this warp's first key, relative to n0
  const int key[2] = {n0 + wk + (lane >> 2), n0 + wk + (lane >> 2) + 8};
  const DropRng drng = drop_rng_if<DROP>(drop, bh, L, S);

  // The query-side tiles of [m, m + BM) into buffer b: Q and dO by TMA (thread 0), the lse and
  // D rows by 4-byte cp.async (zeros past L).
  auto load_queries = [&](int m, int b) {
    if (producer) {
      const unsigned bar = q_full + 8 * b;
      tma::arrive_expect_tx(bar, 2 * QTILE);
      tma_copies<BM, D>(qd_addr + 2 * b * QTILE, qmap, m, hh, hb, bar);
      tma_copies<BM, D>(qd_addr + (2 * b + 1) * QTILE, domap, m, hh, hb, bar);
    }
    for (int i = threadIdx.x; i < 2 * BM; i += THREADS) {  // lse rows, then D rows
      const int r = i % BM;
      float* dst = stats + 2 * b * BM + i;
      if (m + r < L) {
        tc::cp_async_4(dst, (i < BM ? lse : dvec) + bh * L + m + r);
      } else {
        *dst = 0.f;
      }
    }
  };

  const int m_begin = CAUSAL ? max(0, n0 - (S - L)) / BM * BM : 0;  // first query seeing n0
  if (producer) {
    tma::prefetch(qmap);
    tma::prefetch(domap);
    tma::barrier_init(kv_full, 1);
    tma::barrier_init(q_full, 1);
    tma::barrier_init(q_full + 8, 1);
    tma::barrier_init_fence();
  }
  __syncthreads();
  if (m_begin < L) {
    if (producer) {
      tma::arrive_expect_tx(kv_full, 2 * KTILE);
      tma_copies<BN, D>(k_addr, kmap, n0, hh, hb, kv_full);
      tma_copies<BN, D>(v_addr, vmap, n0, hh, hb, kv_full);
    }
    load_queries(m_begin, 0);
    tma::wait(kv_full, 0);
  }
  tc::cp_async_commit();

  float dka[D / 8][4], dva[D / 8][4], s[NT][4], dp[NT][4], dqa[DH / 8][4];
  zero(dka);
  zero(dva);
  uint32 pa[BM / 16][4], dsa[BM / 16][4];
  const bool pairs = E % 2 == 0 && (unsigned long long)dq_acc % 8 == 0;
  const unsigned kg_addr = k_addr + 64 * group * 128, vg_addr = v_addr + 64 * group * 128;
  // B of this group's dQ columns: panel (group * DH) / 64, then (group * DH) % 64 columns in.
  const unsigned kcol_addr = k_addr + (group * DH / 64) * KPANEL + (group * DH % 64) * 2;

  int buf = 0;
  for (int m0 = m_begin, u = 0; m0 < L; m0 += BM, buf ^= 1, ++u) {
    // This tile's copies have landed; and every warp is done with the previous tile, whose
    // buffers the next copies refill.
    tma::wait(q_full + 8 * buf, (u >> 1) & 1);
    tc::cp_async_wait<0>();
    __syncthreads();
    const unsigned q_addr = qd_addr + 2 * buf * QTILE, do_addr = q_addr + QTILE;
    const float* lse_s = stats + 2 * buf * BM;
    const float* d_s = lse_s + BM;

    wg::wgmma_fence();
    wgmma_abt<T, BM, D, BN, BM>(&s[0][0], kg_addr, q_addr);
    wgmma_abt<T, BM, D, BN, BM>(&dp[0][0], vg_addr, do_addr);
    wg::wgmma_commit();
    if (m0 + BM < L) load_queries(m0 + BM, buf ^ 1);  // issued after the products start
    tc::cp_async_commit();
    wg::wgmma_wait<0>();
    wg::fence_operands<BM / 2>(&s[0][0]);
    wg::fence_operands<BM / 2>(&dp[0][0]);

    // Block-uniform: does any (query, key) pair of this tile need the visibility test?
    const bool masked = m0 + BM > L || n0 + BN > S || (CAUSAL && n0 + BN - 1 > m0 + S - L);
    float z[DROP ? NT : 1][4];  // DROP: the dropout factors (1 / (1 - p) kept, 0 dropped)
    if constexpr (DROP) drop_cols<NT>(z, drng, key, m0, (float)drop.scale);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int il = nt * 8 + 2 * t + (c & 1);  // query, relative to m0
        const float p = (!masked || visible<CAUSAL>(m0 + il, key[c >> 1], L, S))
                            ? exp2_fast(s[nt][c] * scale_log2 - lse_s[il] * log2e())
                            : 0.f;
        if constexpr (DROP) {  // dV takes the dropped P; dS = P (dP_dropped z - D)
          s[nt][c] = p * z[nt][c];
          dp[nt][c] = p * (dp[nt][c] * z[nt][c] - d_s[il]);
        } else {
          s[nt][c] = p;
          dp[nt][c] = p * (dp[nt][c] - d_s[il]);
        }
      }
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const unsigned off = wg::swizzle_offset<BN>(wk + (lane >> 2) + 8 * h, nt * 8 + 2 * t);
        *reinterpret_cast<uint32*>(dss + off) = tc::pack_pair<T>(dp[nt][2 * h], dp[nt][2 * h + 1]);
      }
    pack_p<T, NT>(pa, s);
    pack_p<T, NT>(dsa, dp);

    wg::fence_operands<D / 2>(&dva[0][0]);
    wg::fence_operands<D / 2>(&dka[0][0]);
    wg::fence_operands<BM / 4>(&pa[0][0]);
    wg::fence_operands<BM / 4>(&dsa[0][0]);
    wg::wgmma_fence();
    wgmma_py<T, D, BM>(&dva[0][0], pa, do_addr);
    wgmma_py<T, D, BM>(&dka[0][0], dsa, q_addr);
    wg::wgmma_commit();

    wg::fence_proxy_async();  // this thread's dS^T stores, visible to wgmma
    __syncthreads();  // the whole dS^T tile is written
    wg::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      const uint64 da = wg::desc_mnmajor(ds_addr + kk * 16 * 128, DSTILE);
      const uint64 db = wg::desc_mnmajor(kcol_addr + kk * 16 * 128, KPANEL);
      if constexpr (DH == 64) {
        if (kk == 0) {
          wg::wgmma_ss_n64_zero<1, 1>(&dqa[0][0], da, db, T{});
        } else {
          wg::wgmma_ss_n64<1, 1>(&dqa[0][0], da, db, 1, T{});
        }
      } else {
        if (kk == 0) {
          wg::wgmma_ss_n32_zero<1, 1>(&dqa[0][0], da, db, T{});
        } else {
          wg::wgmma_ss_n32<1, 1>(&dqa[0][0], da, db, 1, T{});
        }
      }
    }
    wg::wgmma_commit();
    wg::wgmma_wait<0>();
    wg::fence_operands<D / 2>(&dva[0][0]);
    wg::fence_operands<D / 2>(&dka[0][0]);
    wg::fence_operands<BM / 4>(&pa[0][0]);
    wg::fence_operands<BM / 4>(&dsa[0][0]);
    wg::fence_operands<DH / 2>(&dqa[0][0]);

    // dQ rows of this warp: queries m0 + 16 warp + g (+ 8), columns group * DH + 8 nt + 2t.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int i = m0 + 16 * warp + (lane >> 2) + 8 * h;
      if (i >= L) continue;
      float* dst = dq_acc + (bh * L + i) * E;
#pragma unroll
      for (int nt = 0; nt < DH / 8; ++nt) {
        const int col = group * DH + nt * 8 + 2 * t;
        if (pairs) {  // (E even: col < E implies col + 1 < E)
          if (col < E) atomic_add2(dst + col, dqa[nt][2 * h], dqa[nt][2 * h + 1]);
        } else {
          if (col < E) atomicAdd(dst + col, dqa[nt][2 * h]);
          if (col + 1 < E) atomicAdd(dst + col + 1, dqa[nt][2 * h + 1]);
        }
      }
    }
  }
  store_acc<T, D>(dk + head_offset(lay.dk, bh, lay.heads), dka, n0 + wk, S, E, lay.dk.st, scale,
                  scale);
  store_acc<T, D>(dv + head_offset(lay.dv, bh, lay.heads), dva, n0 + wk, S, E, lay.dv.st, 1.f,
                  1.f);
}

template <class T, int D, bool CAUSAL, int BM>
__global__ void __launch_bounds__(256, 1)
    flash_bwd_fused_wgmma(const __grid_constant__ tma::TensorMap qmap,
                          const __grid_constant__ tma::TensorMap kmap,
                          const __grid_constant__ tma::TensorMap vmap,
                          const __grid_constant__ tma::TensorMap domap,
                          const float* __restrict__ lse, const float* __restrict__ dvec,
                          T* __restrict__ dk, T* __restrict__ dv, float* __restrict__ dq_acc,
                          int L, int S, int E, float scale, float scale_log2, int64 bh0,
                          Layout lay) {
  flash_bwd_fused_wgmma_body<T, D, CAUSAL, BM, false>(qmap, kmap, vmap, domap, lse, dvec, dk, dv, dq_acc, L, S, E, scale, scale_log2, bh0, lay, Dropout{});
}

// flash_bwd_fused_wgmma with the probabilities dropped out (see the header).
template <class T, int D, bool CAUSAL, int BM>
__global__ void __launch_bounds__(256, 1)
    flash_bwd_fused_wgmma_dropout(const __grid_constant__ tma::TensorMap qmap,
                          const __grid_constant__ tma::TensorMap kmap,
                          const __grid_constant__ tma::TensorMap vmap,
                          const __grid_constant__ tma::TensorMap domap,
                          const float* __restrict__ lse, const float* __restrict__ dvec,
                          T* __restrict__ dk, T* __restrict__ dv, float* __restrict__ dq_acc,
                          int L, int S, int E, float scale, float scale_log2, int64 bh0,
                          Layout lay, Dropout drop) {
  flash_bwd_fused_wgmma_body<T, D, CAUSAL, BM, true>(qmap, kmap, vmap, domap, lse, dvec, dk, dv, dq_acc, L, S, E, scale, scale_log2, bh0, lay, drop);
}

}  // namespace attn
}  // namespace ignis
