// gemm_sm90.cu - float16 / bfloat16 / TF32 matrix products on Hopper's warpgroup MMA (wgmma,
// sm_90a) fed by the tensor memory accelerator (TMA). Same results (up to float32 summation order)
// as gemm_tc in matmul.cu for the operands TMA can read; built on its own because wgmma needs the
// architecture-specific target sm_90a, which runs on compute capability 9.0 only.
//
//   gemm_wgmma<T, BN, STAGES, A_KMAJOR, B_KMAJOR>
//       C[z] = alpha * A[z] @ B[z] + beta * C[z] (C not read when beta == 0), float32
//       accumulation, C in T. Output tiles of 128 x BN (BN = 128 or 256), K in steps of
//       128 bytes of elements (BK = 64 16-bit ones, or 32 float32 ones multiplied as TF32),
//       a STAGES-deep ring of shared-memory buffers. T = float takes K-major operands only.
//       Persistent: block b computes the tiles b, b + gridDim.x, ... of all matrices (the host
//       launches at most one block an SM), so the producer copies the next tile's first steps
//       while the consumers store this one.
//
// Threads: three warpgroups (384 threads). Warpgroup 0 is the producer: one of its threads
// issues the TMA copies of the A and B tiles of each K step into the ring (tma.cuh), the rest
// leave at once. Warpgroups 1 and 2 are the consumers: each multiplies its 64 rows of the A
// tile by the whole B tile (BN / 128 wgmma.m64n128k16 per 16-column step of K, both operands
// read from shared memory, wgmma.cuh) and keeps one step's group of wgmmas in flight: the
// group of step kt is waited for during step kt + 1, which then frees step kt's buffer.
// Barriers per buffer s: full[s] (one arrival with the expected bytes; the copies complete it)
// and empty[s] (one arrival per consumer warp once its wgmmas have read the buffer).
// With BN = 256 the producer hands registers to the consumers (setmaxnreg: 40 / 232), whose
// 128 float32 accumulators per thread would not fit the 168 registers 384 threads get evenly.
//
// Operand layouts (the host picks the instance and builds the maps, matmul.py):
//   A_KMAJOR: A's rows are contiguous (K innermost): map dims (K, M, batch_in, batch_out), one
//             copy = 64 x 128 (K x M), a 128 x 64 swizzled tile read K-major.
//   else      A's columns are contiguous (a transposed view): dims (M, K, ...), two copies of
//             64 x 64 (M x K) per step, 64-row panels of M read MN-major (imm-trans-a).
//   B_KMAJOR: B's columns are contiguous (B = W^T of a row-major W): dims (K, N, ...), one
//             copy = 64 x BN (K x N) read K-major.
//   else      B's rows are contiguous: dims (N, K, ...), BN / 64 copies of 64 x 64 (N x K),
//             64-column panels of N read MN-major (imm-trans-b).
// Batch: work item w (tiles_m * tiles_n of them a matrix) is tile w % (tiles_m * tiles_n) of
// matrix z = w / (tiles_m * tiles_n); z splits into (z % batch_inner, z / batch_inner), the
// coordinates of the maps' two batch dims (0 for a dim the operand broadcasts: bits of
// a_batched / b_batched).
// Edge tiles: the TMA unit fills rows and columns past M, N or K with zeros (and counts their
// bytes), so partial tiles multiply zeros; the epilogue skips stores past M or N. K == 0 is the
// host's (matmul.cu's kernels take it).
#include "ignis_types.cuh"
#include "tensor_core.cuh"
#include "tile_order.cuh"
#include "tma.cuh"
#include "wgmma.cuh"

namespace ignis {
namespace gemm90 {

// One launch's problem description (passed by value; the host packs exactly this layout).
struct WgmmaArgs {
  int64 m, n, k;
  int64 c_rs, c_cs;        // element strides of C's rows and columns
  int64 c_bs_in, c_bs_out;  // element strides of C's two batch dims
  int64 batch_inner;       // size of the inner batch dim (1 without one)
  int64 batch;             // matrices: the product of both batch dims
  float alpha, beta;
  int32 tiles_m, tiles_n;  // output tiles along M and N
  int32 a_batched, b_batched;  // bit 0: the inner batch dim is stepped, bit 1: the outer
};
static_assert(sizeof(WgmmaArgs) == 96, "WgmmaArgs must match the host's packing (matmul.py)");

// (enumerators: a build without the kernel templates would warn about unused variables)
enum : int { BM = 128, BK = 64, THREADS = 384 };  // BK: 16-bit elements of a K step

// Bytes of one ring buffer: the A tile (BM rows of K) and the B tile (BN columns of K), each
// row 128 bytes of K (BK 16-bit elements, or BK / 2 float32 ones).
template <int BN> struct Ring {
  static constexpr unsigned A_BYTES = BM * 128, B_BYTES = BN * 128;
  static constexpr unsigned STAGE = A_BYTES + B_BYTES;
};

// Two adjacent outputs as one store of 2 * sizeof(T) bytes.
template <class T> IGNIS_DEV void store_pair(T* dst, float r0, float r1) {
  *reinterpret_cast<uint32*>(dst) = tc::pack_pair<T>(r0, r1);
}
template <> IGNIS_DEV void store_pair<float>(float* dst, float r0, float r1) {
  *reinterpret_cast<float2*>(dst) = make_float2(r0, r1);
}

}  // namespace gemm90
}  // namespace ignis

#if defined(__CUDACC__)

namespace ignis {
namespace gemm90 {

IGNIS_DEV unsigned char* dynamic_smem() {
  extern __shared__ __align__(16) unsigned char ignis_gemm90_smem[];
  return ignis_gemm90_smem;
}

// A launch with less dynamic shared memory than the kernel's ring is a host bug: stop loudly.
IGNIS_DEV void require_smem(unsigned bytes) {
  unsigned n;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(n));
  if (n < bytes) asm volatile("trap;");
}

// Registers per thread of this warpgroup from here on (all of its threads execute it).
template <int N> IGNIS_DEV void regs_down() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N> IGNIS_DEV void regs_up() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}

// Work item w: the first row and column of its output tile (tile_order.cuh) and its matrix's
// batch coordinates.
struct Work {
  int m0, n0, z_in, z_out;
};
IGNIS_DEV Work work_item(const WgmmaArgs& p, int64 w, int bn) {
  const int64 per_matrix = (int64)p.tiles_m * p.tiles_n;
  const int64 z = w / per_matrix;
  int tile_m, tile_n;
  grouped_tile((int)(w - z * per_matrix), p.tiles_m, p.tiles_n, tile_m, tile_n);
  return Work{tile_m * BM, tile_n * bn, (int)(z % p.batch_inner), (int)(z / p.batch_inner)};
}

// C(i, j) = alpha * v + beta * C(i, j) for one element (C not read when beta == 0).
template <class T>
IGNIS_DEV void store_one(T* dst, float v, float alpha, float beta) {
  float r = alpha * v;
  if (beta != 0.f) r += beta * to_acc(*dst);
  *dst = from_acc<T>(r);
}

template <class T, int BN, int STAGES, bool A_KMAJOR, bool B_KMAJOR>
__global__ void __launch_bounds__(THREADS, 1)
    gemm_wgmma(const __grid_constant__ tma::TensorMap amap,
               const __grid_constant__ tma::TensorMap bmap, T* __restrict__ c, WgmmaArgs p) {
  static_assert(BN == 128 || BN == 256, "gemm_wgmma: BN is 128 or 256");
  static_assert(STAGES >= 2, "gemm_wgmma: at least two ring buffers");
  static_assert(sizeof(T) == 2 || (sizeof(T) == 4 && A_KMAJOR && B_KMAJOR),
                "gemm_wgmma: TF32 takes K-major operands only");
  constexpr int KE = 128 / (int)sizeof(T);  // K elements of a step (one 128-byte row)
  typedef Ring<BN> R;
  constexpr int NH = BN / 128;  // m64n128 products per consumer and 16-column step of K
  constexpr bool MOVE_REGS = BN == 256;
  unsigned char* raw = dynamic_smem();
  // Swizzled tiles start 1024-byte aligned; the host asks for 1024 bytes of slack.
  const unsigned raw_addr = tc::smem_u32addr(raw);
  const unsigned pad = (1024u - (raw_addr & 1023u)) & 1023u;
  require_smem(pad + STAGES * R::STAGE + 2 * STAGES * 8);
  const unsigned ring = raw_addr + pad;  // buffer s: A at ring + s STAGE, B after it
  const unsigned bars = ring + STAGES * R::STAGE;
  auto full = [bars](int s) { return bars + 8u * s; };
  auto empty = [bars](int s) { return bars + 8u * (STAGES + s); };

  const int64 items = (int64)p.tiles_m * p.tiles_n * p.batch;
  const int ktiles = (int)((p.k + KE - 1) / KE);
  const int group = (int)threadIdx.x >> 7;

  if (threadIdx.x == 0) {
    tma::prefetch(amap);
    tma::prefetch(bmap);
    for (int s = 0; s < STAGES; ++s) {
      tma::barrier_init(full(s), 1);
      tma::barrier_init(empty(s), 8);  // the 8 consumer warps
    }
    tma::barrier_init_fence();
  }
  __syncthreads();

  // Both roles count the K steps of all of the block's items in `step`: step u uses buffer
  // u % STAGES for the (u / STAGES)-th time, the phase whose parity the barriers are waited on.
  if (group == 0) {  // the producer warpgroup
    if constexpr (MOVE_REGS) regs_down<40>();
    if (threadIdx.x != 0) return;
    int64 step = 0;
    for (int64 w = blockIdx.x; w < items; w += gridDim.x) {
      const Work at = work_item(p, w, BN);
      const int ai = (p.a_batched & 1) ? at.z_in : 0, ao = (p.a_batched & 2) ? at.z_out : 0;
      const int bi = (p.b_batched & 1) ? at.z_in : 0, bo = (p.b_batched & 2) ? at.z_out : 0;
      for (int kt = 0; kt < ktiles; ++kt, ++step) {
        const int s = (int)(step % STAGES);
        const int64 use = step / STAGES;
        if (use > 0) tma::wait(empty(s), (int)((use - 1) & 1));  // its last use is read
        const unsigned a_dst = ring + s * R::STAGE, b_dst = a_dst + R::A_BYTES;
        const int k0 = kt * KE;
        tma::arrive_expect_tx(full(s), R::STAGE);
        if constexpr (A_KMAJOR) {
          tma::load_4d(a_dst, amap, k0, at.m0, ai, ao, full(s));
        } else {
#pragma unroll
          for (int q = 0; q < BM / 64; ++q)
            tma::load_4d(a_dst + q * 64 * BK * 2, amap, at.m0 + 64 * q, k0, ai, ao, full(s));
        }
        if constexpr (B_KMAJOR) {
          tma::load_4d(b_dst, bmap, k0, at.n0, bi, bo, full(s));
        } else {
#pragma unroll
          for (int q = 0; q < BN / 64; ++q)
            tma::load_4d(b_dst + q * 64 * BK * 2, bmap, at.n0 + 64 * q, k0, bi, bo, full(s));
        }
      }
    }
    return;
  }

  // A consumer warpgroup: rows 64 cg .. 64 cg + 63 of each tile.
  if constexpr (MOVE_REGS) regs_up<232>();
  const int cg = group - 1;
  const int warp = ((int)threadIdx.x >> 5) & 3, lane = (int)threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const float alpha = p.alpha, beta = p.beta;
  // Two adjacent columns as one store where C's rows are contiguous and pairs aligned.
  const bool pairs = p.c_cs == 1 && p.c_rs % 2 == 0 && p.c_bs_in % 2 == 0 &&
                     p.c_bs_out % 2 == 0 &&
                     (reinterpret_cast<uint64>(c) & (2 * sizeof(T) - 1)) == 0;
  float acc[NH][64];
  int64 step = 0;
  for (int64 w = blockIdx.x; w < items; w += gridDim.x) {
    const Work at = work_item(p, w, BN);
#pragma unroll
    for (int h = 0; h < NH; ++h)
#pragma unroll
      for (int i = 0; i < 64; ++i) acc[h][i] = 0.f;

    for (int kt = 0; kt < ktiles; ++kt, ++step) {
      const int s = (int)(step % STAGES);
      tma::wait(full(s), (int)((step / STAGES) & 1));
      const unsigned a_tile = ring + s * R::STAGE, b_tile = a_tile + R::A_BYTES;
#pragma unroll
      for (int h = 0; h < NH; ++h) wg::fence_operands<64>(acc[h]);
      wg::wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        // Four wgmmas a step (k16 of 16-bit elements, k8 of TF32: 32 bytes of K each).
        // K-major: this group's 64 rows start 64 * 128 bytes in, the step kk * 32 bytes into
        // each 128-byte row. MN-major: this group's 64-row panel of M (8 KiB), the step 16
        // rows of K (16 * 128 bytes) down.
        const uint64 da = A_KMAJOR ? wg::desc_kmajor(a_tile + cg * 64 * 128 + kk * 32)
                                   : wg::desc_mnmajor(a_tile + cg * 64 * BK * 2 + kk * 16 * 128,
                                                      64 * BK * 2);
#pragma unroll
        for (int h = 0; h < NH; ++h) {
          // B's columns 128 h ..: K-major 128 rows of 128 bytes in; MN-major two 8 KiB panels.
          const uint64 db = B_KMAJOR ? wg::desc_kmajor(b_tile + h * 128 * 128 + kk * 32)
                                     : wg::desc_mnmajor(b_tile + h * 2 * 64 * BK * 2 +
                                                            kk * 16 * 128,
                                                        64 * BK * 2);
          wg::wgmma_ss_n128<A_KMAJOR ? 0 : 1, B_KMAJOR ? 0 : 1>(acc[h], da, db, 1, T{});
        }
      }
      wg::wgmma_commit();
      wg::wgmma_wait<1>();  // step - 1's products are done: its buffer is free
#pragma unroll
      for (int h = 0; h < NH; ++h) wg::fence_operands<64>(acc[h]);
      if (kt > 0 && lane == 0) tma::arrive(empty((int)((step - 1) % STAGES)));
    }
    wg::wgmma_wait<0>();
#pragma unroll
    for (int h = 0; h < NH; ++h) wg::fence_operands<64>(acc[h]);
    if (lane == 0) tma::arrive(empty((int)((step - 1) % STAGES)));  // the item's last step

    // Epilogue: acc[h][4j + q] is row g (+ 8 for q >= 2), column 128 h + 8 j + 2 t (+ 1 for
    // odd q) of this warp's 16 rows (wgmma.cuh's accumulator layout).
    T* C = c + at.z_in * p.c_bs_in + at.z_out * p.c_bs_out;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int64 row = at.m0 + 64 * cg + 16 * warp + g + 8 * half;
      if (row >= p.m) continue;
      T* crow = C + row * p.c_rs;
#pragma unroll
      for (int h = 0; h < NH; ++h)
#pragma unroll
        for (int j = 0; j < 16; ++j) {
          const int64 col = at.n0 + 128 * h + 8 * j + 2 * t;
          const float v0 = acc[h][4 * j + 2 * half], v1 = acc[h][4 * j + 2 * half + 1];
          if (pairs && col + 1 < p.n) {
            float r0 = alpha * v0, r1 = alpha * v1;
            if (beta != 0.f) {
              const T* old = crow + col;
              r0 += beta * to_acc(old[0]);
              r1 += beta * to_acc(old[1]);
            }
            store_pair<T>(crow + col, r0, r1);
          } else {
            if (col < p.n) store_one(crow + col * p.c_cs, v0, alpha, beta);
            if (col + 1 < p.n) store_one(crow + (col + 1) * p.c_cs, v1, alpha, beta);
          }
        }
    }
  }
}

}  // namespace gemm90
}  // namespace ignis

#endif  // __CUDACC__
