// attention_sm90.cu - the float16 / bfloat16 attention forward on Hopper's warpgroup MMA
// (wgmma, sm_90a). Same arguments, layout, masking and results (up to float32 summation order)
// as flash_fwd_tc_m32 in attention.cu, whose helpers it includes; built on its own because
// wgmma needs the architecture-specific target sm_90a, which runs on compute capability 9.0
// only.
//
//   flash_fwd_wgmma<T, D, CAUSAL, GROUPS, BN>
//                                    D = 64 or 128; 64 queries per warpgroup, GROUPS
//                                    warpgroups per block, BN-key tiles. Q and the K / V
//                                    tiles lie in shared memory with the 128-byte swizzle
//                                    (wgmma.cuh), copied by cp.async (the next tiles into a
//                                    second buffer while the current ones are used). S = Q K^T
//                                    reads both operands from shared memory; O += P V takes P
//                                    from registers (the score accumulator turned into A
//                                    fragments) and V transposed (MN-major). Online softmax in
//                                    registers, overlapping the previous tile's P V.
#include "attention.cu"
#include "wgmma.cuh"

namespace ignis {
namespace attn {


// Rows [r0, r0 + R) x cols [0, D) of a (rows x E) matrix with row stride ldg into a swizzled
// tile of R rows at s; zeros outside. vec: 16-byte cp.async copies (the caller commits and
// waits), else element copies.
template <class T, int R, int D, int THREADS>
IGNIS_DEV void load_tile_swizzled(unsigned char* s, const T* g, int r0, int rows, int E,
                                  int64 ldg, bool vec) {
  if (vec) {
    constexpr int CH = D / 8;
    for (int c = threadIdx.x; c < R * CH; c += THREADS) {
      const int r = c / CH, col = (c % CH) * 8;
      unsigned char* dst = s + wg::swizzle_offset<R>(r, col);
      if (r0 + r < rows && col < E) {
        tc::cp_async_16(dst, g + (int64)(r0 + r) * ldg + col, 16);
      } else {
        *reinterpret_cast<uint4*>(dst) = make_uint4(0u, 0u, 0u, 0u);
      }
    }
  } else {
    for (int c = threadIdx.x; c < R * D; c += THREADS) {
      const int r = c / D, col = c % D;
      T val = T{};
      if (r0 + r < rows && col < E) val = g[(int64)(r0 + r) * ldg + col];
      *reinterpret_cast<T*>(s + wg::swizzle_offset<R>(r, col)) = val;
    }
  }
}

// acc(64 x N) = A * B^T over K = D: A (this group's 64 rows) and B (N rows) K-major swizzled
// tiles whose panels hold RA and RB rows.
template <class T, int N, int D, int RA, int RB>
IGNIS_DEV void wgmma_abt(float* acc, unsigned a_addr, unsigned b_addr) {
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    const uint64 da = wg::desc_kmajor(a_addr + (kk >> 2) * (RA * 128) + (kk & 3) * 32);
    const uint64 db = wg::desc_kmajor(b_addr + (kk >> 2) * (RB * 128) + (kk & 3) * 32);
    if constexpr (N == 128) {
      wg::wgmma_ss_n128<0, 0>(acc, da, db, kk > 0, T{});
    } else {
      wg::wgmma_ss_n64<0, 0>(acc, da, db, kk > 0, T{});
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

// This warp's 16 output rows from r0 on (O / l, rounded) and their lse (natural log; -inf for
// a row that saw no key).
template <class T, int D>
IGNIS_DEV void finish_rows(T* ob, float* lse_rows, const float (&o)[D / 8][4],
                           const float (&mrow)[2], const float (&lrow)[2], const int (&row)[2],
                           int r0, int L, int E, int64 ldo) {
  float inv[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float l = quad_sum(lrow[h]);
    inv[h] = l > 0.f ? 1.f / l : 0.f;
    if ((threadIdx.x & 3) == 0 && row[h] < L)
      lse_rows[row[h]] = l > 0.f ? (mrow[h] + log2f(l)) * ln2() : neg_inf();
  }
  store_acc<T, D>(ob, o, r0, L, E, ldo, inv[0], inv[1]);
}

// Software pipeline over key tiles j (each group on its own 64 rows):
//   step j: wait for the copies of K_j and V_{j-1}; barrier; start copying K_{j+1} and V_j;
//           issue S_j = Q K_j^T, then O += P_{j-1} V_{j-1}; wait for S_j only; softmax of
//           S_j (the exponentials overlap the tensor cores' P V); wait for P V; scale O by
//           alpha_j; P_j into A fragments.
// so K and V have two buffers each: K_{j+1} goes where K_{j-1} was (read by S_{j-1}, finished
// in step j-1), V_j where V_{j-2} was (read by step j-1's P V, waited for before its end); the
// barrier of step j orders both for every group. After the last tile: O += P V once more.
template <class T, int D, bool CAUSAL, int GROUPS, int BN>
__global__ void __launch_bounds__(GROUPS * 128, 1)
    flash_fwd_wgmma(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                    T* __restrict__ out, float* __restrict__ lse, int L, int S, int E,
                    float scale_log2, int vec, int64 bh0, Layout lay) {
  static_assert(D == 64 || D == 128, "flash_fwd_wgmma: D is 64 or 128");
  constexpr int BM = 64 * GROUPS, NT = BN / 8, THREADS = GROUPS * 128;
  constexpr unsigned QTILE = BM * D * 2, KTILE = BN * D * 2;  // bytes
  unsigned char* raw = dynamic_smem();
  // Swizzled tiles start 1024-byte aligned; the host asks for 1024 bytes of slack.
  const unsigned raw_addr = tc::smem_u32addr(raw);
  const unsigned pad = (1024u - (raw_addr & 1023u)) & 1023u;
  require_smem(pad + QTILE + 4 * KTILE);
  unsigned char* qs = raw + pad;
  unsigned char* ks = qs + QTILE;  // K_j at ks + (j & 1) KTILE
  unsigned char* vs = ks + 2 * KTILE;  // V_j at vs + (j & 1) KTILE
  const unsigned q_addr = raw_addr + pad, k_addr = q_addr + QTILE, v_addr = k_addr + 2 * KTILE;

  const int group = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
  const int64 bh = bh0 + blockIdx.y;
  const int m0 = (CAUSAL ? gridDim.x - 1 - blockIdx.x : blockIdx.x) * BM;  // long rows first
  const T* kb = k + head_offset(lay.k, bh, lay.heads);
  const T* vb = v + head_offset(lay.v, bh, lay.heads);
  const int64 ldk = lay.k.st, ldv = lay.v.st;
  const int wr = 64 * group + 16 * warp;  // this warp's first query, relative to m0
  const int row[2] = {m0 + wr + (lane >> 2), m0 + wr + (lane >> 2) + 8};
  const bool vec16 = vec != 0;
  const unsigned qg_addr = q_addr + 64 * group * 128;  // this group's rows of every Q panel

  const int n_end = CAUSAL ? min(S, max(0, m0 + BM + S - L)) : S;
  const int tiles = (n_end + BN - 1) / BN;
  load_tile_swizzled<T, BM, D, THREADS>(qs, q + head_offset(lay.q, bh, lay.heads), m0, L, E,
                                           lay.q.st, vec16);
  if (tiles > 0) load_tile_swizzled<T, BN, D, THREADS>(ks, kb, 0, S, E, ldk, vec16);
  tc::cp_async_commit();

  float o[D / 8][4], s[NT][4];
  uint32 pa[BN / 16][4];
  zero(o);
  zero(s);
  float mrow[2] = {neg_inf(), neg_inf()}, lrow[2] = {0.f, 0.f}, alpha[2];

  T* ob = out + head_offset(lay.o, bh, lay.heads);
  if (tiles == 0) {  // no visible key: zero rows, lse -inf
    tc::cp_async_wait<0>();
    finish_rows<T, D>(ob, lse + bh * L, o, mrow, lrow, row, m0 + wr, L, E, lay.o.st);
    return;
  }
  // Every wgmma below is issued unconditionally (a branch around one makes ptxas serialise
  // them all): the first tile's S and the last tile's P V are peeled off the loop.
  tc::cp_async_wait<0>();
  wg::fence_proxy_async();  // this thread's copies and zero stores, visible to wgmma
  __syncthreads();
  wg::fence_operands<BN / 2>(&s[0][0]);
  wg::wgmma_fence();
  wgmma_abt<T, BN, D, BM, BN>(&s[0][0], qg_addr, k_addr);
  wg::wgmma_commit();
  if (1 < tiles) load_tile_swizzled<T, BN, D, THREADS>(ks + KTILE, kb, BN, S, E, ldk, vec16);
  load_tile_swizzled<T, BN, D, THREADS>(vs, vb, 0, S, E, ldv, vec16);
  tc::cp_async_commit();
  wg::wgmma_wait<0>();
  wg::fence_operands<BN / 2>(&s[0][0]);
  online_softmax<CAUSAL, NT>(s, mrow, lrow, alpha, row, 0, L, S, scale_log2,
                             BN > S || (CAUSAL && BN - 1 > m0 + S - L));
  pack_p<T, NT>(pa, s);  // (O is still zero: no rescaling)

  for (int j = 1; j < tiles; ++j) {
    tc::cp_async_wait<0>();
    wg::fence_proxy_async();
    __syncthreads();
    wg::fence_operands<BN / 2>(&s[0][0]);
    wg::fence_operands<D / 2>(&o[0][0]);
    wg::fence_operands<BN / 4>(&pa[0][0]);
    wg::wgmma_fence();
    wgmma_abt<T, BN, D, BM, BN>(&s[0][0], qg_addr, k_addr + (j & 1) * KTILE);
    wg::wgmma_commit();
    wgmma_py<T, D, BN>(&o[0][0], pa, v_addr + ((j - 1) & 1) * KTILE);
    wg::wgmma_commit();
    // The copies are issued after the matrix products, which then start without waiting.
    if (j + 1 < tiles) {
      const int n1 = (j + 1) * BN;
      load_tile_swizzled<T, BN, D, THREADS>(ks + ((j + 1) & 1) * KTILE, kb, n1, S, E, ldk, vec16);
    }
    load_tile_swizzled<T, BN, D, THREADS>(vs + (j & 1) * KTILE, vb, j * BN, S, E, ldv, vec16);
    tc::cp_async_commit();
    wg::wgmma_wait<1>();  // S_j (P V of step j - 1 may still run)
    wg::fence_operands<BN / 2>(&s[0][0]);

    const int n0 = j * BN;
    const bool masked = n0 + BN > S || (CAUSAL && n0 + BN - 1 > m0 + S - L);
    online_softmax<CAUSAL, NT>(s, mrow, lrow, alpha, row, n0, L, S, scale_log2, masked);

    wg::wgmma_wait<0>();
    wg::fence_operands<D / 2>(&o[0][0]);
    wg::fence_operands<BN / 4>(&pa[0][0]);
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt) {
      o[nt][0] *= alpha[0];
      o[nt][1] *= alpha[0];
      o[nt][2] *= alpha[1];
      o[nt][3] *= alpha[1];
    }
    pack_p<T, NT>(pa, s);
  }

  tc::cp_async_wait<0>();  // the last V tile
  wg::fence_proxy_async();
  __syncthreads();
  wg::fence_operands<D / 2>(&o[0][0]);
  wg::fence_operands<BN / 4>(&pa[0][0]);
  wg::wgmma_fence();
  wgmma_py<T, D, BN>(&o[0][0], pa, v_addr + ((tiles - 1) & 1) * KTILE);
  wg::wgmma_commit();
  wg::wgmma_wait<0>();
  wg::fence_operands<D / 2>(&o[0][0]);
  finish_rows<T, D>(ob, lse + bh * L, o, mrow, lrow, row, m0 + wr, L, E, lay.o.st);
}

}  // namespace attn
}  // namespace ignis
