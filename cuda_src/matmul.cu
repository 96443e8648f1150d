// matmul.cu - the library's own matrix-product kernels (GEMM).
//
// Every kernel computes, for each batch index z and every (i, j) of an m x n result,
//
//     C[z](i, j) = alpha * sum_l A[z](i, l) * B[z](l, j)  +  beta * C[z](i, j)
//
// with the old C ignored (never read) when beta == 0, so NaN there does not leak through.
// Matrices are addressed through element strides, (row stride, column stride), so transposed
// views need no copy; batch dimensions have their own strides per operand (0 broadcasts).
//
// Two kernel families, both with 256 threads per block and one output tile per block:
//
//   gemm_tc<T, LA, LB>     tensor cores through warp-level mma.sync (sm_80 and newer).
//                          T = float16 / bfloat16: mma.m16n8k16 with float32 accumulation,
//                          fragments from shared memory with ldmatrix.
//                          T = float: TF32 mma.m16n8k8 (inputs rounded to TF32, float32
//                          accumulation); used only where TF32 has been allowed.
//                          128 x 128 output tile, 8 warps of 64 x 32, a 4-stage cp.async pipeline.
//   gemm_complex<T>        complex64 / complex128: a plain 16 x 16 shared-memory tiling (the
//                          fallback where cuBLAS's cgemm / zgemm is absent).
//   gemm_simt<T, LA, LB>   FMA kernel for every architecture: float (float32 math), double
//                          (float64 math) and the 16-bit types (float32 math). Register
//                          blocking of 8 x 8 (4 x 4 for double) results per thread, a
//                          double-buffered shared-memory tile fed through registers.
//
// LA / LB describe how an operand is laid out in global memory, so that each layout gets loads
// that suit it (and the host picks the layout per call):
//   0: consecutive elements of a row are adjacent (column stride 1), 16-byte aligned rows;
//   1: consecutive elements of a column are adjacent (row stride 1), 16-byte aligned columns;
//   2: anything else (any strides, any alignment): element-wise loads.
// "Aligned" means the base address, the leading stride and every batch stride are multiples of
// 16 bytes; the host checks that before it picks 0 or 1.
//
// Edge tiles: loads past m, n or k read zeros (both operands, so 0 * garbage never happens),
// stores past m or n are skipped. k == 0 gives C = beta * C.
//
// The tensor-core primitives (ldmatrix, mma, cp.async) come from tensor_core.cuh; the few
// device features only this file needs (dynamic shared memory, trap) are gathered in one section
// below. The tests replace both with a host emulator of the same functions
// (IGNIS_TC_HOST_EMULATION, IGNIS_GEMM_HOST_EMULATION) and run these kernels on the CPU, thread
// by thread, to check the data movement.
#include "ignis_types.cuh"
#include "complex.cuh"
#include "tensor_core.cuh"
#include "tile_order.cuh"

namespace ignis {
namespace gemm {

// --- arguments -----------------------------------------------------------------------------------

constexpr int kMaxBatchDims = 6;

// One launch's problem description (passed by value; the host packs exactly this layout).
struct GemmArgs {
  int64 m, n, k;
  int64 a_rs, a_cs, b_rs, b_cs, c_rs, c_cs;  // element strides of the matrix dimensions
  int64 batch;                               // number of matrices: product of batch_shape
  int64 batch_shape[kMaxBatchDims];          // outermost first; unused trailing entries are 1
  int64 a_bs[kMaxBatchDims];                 // element strides of the batch dimensions
  int64 b_bs[kMaxBatchDims];
  int64 c_bs[kMaxBatchDims];
  double alpha, beta;
  int32 batch_dims;                          // used entries of batch_shape (0..kMaxBatchDims)
  int32 tiles_m, tiles_n;                    // output tiles along m and n
  int32 reserved;
};
static_assert(sizeof(GemmArgs) == 304, "GemmArgs must match the host's packing (matmul.py)");

// The arithmetic type of element type T.
template <class T> struct Acc { typedef T type; };
template <> struct Acc<float16> { typedef float type; };
template <> struct Acc<bfloat16> { typedef float type; };

// 16 bytes, the unit of vector loads and of cp.async.
struct alignas(16) Vec16 {
  uint32 w[4];
};

}  // namespace gemm
}  // namespace ignis

// --- device features of this file (a test emulator provides its own) --------------------------

#if !defined(IGNIS_GEMM_HOST_EMULATION)

namespace ignis {
namespace gemm {

IGNIS_DEV Vec16* dynamic_smem() {
  extern __shared__ Vec16 ignis_gemm_dynamic_smem[];
  return ignis_gemm_dynamic_smem;
}

IGNIS_DEV uint32 dynamic_smem_bytes() {
  uint32 n;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(n));
  return n;
}

// A launch with less dynamic shared memory than the kernel needs is a host bug: stop loudly.
IGNIS_DEV void fail() { asm volatile("trap;"); }

}  // namespace gemm
}  // namespace ignis
#endif  // !IGNIS_GEMM_HOST_EMULATION

namespace ignis {
namespace gemm {

// --- small helpers -------------------------------------------------------------------------------

// T -> S: the arithmetic type (float for the 16-bit types), or T itself.
template <class S, class T> struct Widen {
  static IGNIS_DEV S run(T v) { return static_cast<S>(to_acc(v)); }
};
template <class T> struct Widen<T, T> {
  static IGNIS_DEV T run(T v) { return v; }
};
template <class S, class T> IGNIS_DEV S widen(T v) { return Widen<S, T>::run(v); }

// Offsets of batch z's matrices. Unrolled over the fixed maximum so the argument arrays are
// read with constant indices (no local-memory copy of the parameters).
IGNIS_DEV void batch_offsets(const GemmArgs& p, int64 z, int64& oa, int64& ob, int64& oc) {
  oa = ob = oc = 0;
#pragma unroll
  for (int d = kMaxBatchDims - 1; d >= 0; --d) {
    if (d < p.batch_dims) {
      const int64 size = p.batch_shape[d];
      const int64 i = z % size;
      z /= size;
      oa += i * p.a_bs[d];
      ob += i * p.b_bs[d];
      oc += i * p.c_bs[d];
    }
  }
}

// The batch index of this block: blockIdx.y + gridDim.y * blockIdx.z (grid y is limited to
// 65535). False for the few blocks past the end when the batch does not fill the grid.
IGNIS_DEV bool batch_of_block(const GemmArgs& p, int64& z) {
  z = (int64)blockIdx.y + (int64)gridDim.y * (int64)blockIdx.z;
  return z < p.batch;
}

// The output tile (tile_m, tile_n) of this block (tile_order.cuh: groups of 8 tile rows).
IGNIS_DEV void tile_of_block(const GemmArgs& p, int& tile_m, int& tile_n) {
  grouped_tile((int)blockIdx.x, p.tiles_m, p.tiles_n, tile_m, tile_n);
}

// C(i, j) = alpha * acc + beta * C(i, j), or alpha * acc when beta == 0 (C not read).
template <class T, class S>
IGNIS_DEV void store_result(T* c, const GemmArgs& p, int64 i, int64 j, S acc, S alpha, S beta) {
  if (i < p.m && j < p.n) {
    T* dst = c + i * p.c_rs + j * p.c_cs;
    S v = alpha * acc;
    if (beta != S(0)) v += beta * widen<S>(*dst);
    *dst = from_acc<T>(v);
  }
}

// --- register-staged tile loads ------------------------------------------------------------------

// Loads an R x CC tile (rows r0.., columns c0.. of a matrix with rn x cn elements) into
// registers, then stores it into shared memory. Layout L as described at the top: for L 0 a
// thread loads 16 bytes along a row, for L 1 along a column, for L 2 one element.
template <class T, int R, int CC, int L, int THREADS>
struct TileLoader {
  static constexpr int VEC = (L == 2) ? 1 : int(16 / sizeof(T));
  static constexpr int ALONG = (L == 1) ? R : CC;  // extent of the contiguous direction
  static constexpr int PER_LINE = ALONG / VEC;     // chunks per line
  static constexpr int CHUNKS = R * CC / VEC;
  static constexpr int ITERS = (CHUNKS + THREADS - 1) / THREADS;
  static_assert(ALONG % VEC == 0, "tile extent must be a multiple of the vector width");

  T v[ITERS][VEC];

  // The matrix is g(row, col) = g[row * rs + col * cs]; for L 0 cs is 1, for L 1 rs is 1.
  IGNIS_DEV void load(const T* g, int64 rs, int64 cs, int64 r0, int64 c0, int64 rn, int64 cn) {
#pragma unroll
    for (int it = 0; it < ITERS; ++it) {
      const int chunk = (int)threadIdx.x + it * THREADS;
      if (CHUNKS % THREADS != 0 && chunk >= CHUNKS) break;
      const int along = (chunk % PER_LINE) * VEC;
      const int across = chunk / PER_LINE;
      const int64 row = r0 + (L == 1 ? along : across);
      const int64 col = c0 + (L == 1 ? across : along);
      if constexpr (L == 2) {
        v[it][0] = (row < rn && col < cn) ? g[row * rs + col * cs] : T{};
      } else {
        const bool line_ok = (L == 1) ? (col < cn) : (row < rn);
        const int64 left = (L == 1) ? (rn - row) : (cn - col);  // valid elements from here on
        const T* src = g + (L == 1 ? row + col * cs : row * rs + col);
        if (line_ok && left >= VEC) {
          union {
            Vec16 raw;
            T e[VEC];
          } u;
          u.raw = *reinterpret_cast<const Vec16*>(src);
#pragma unroll
          for (int j = 0; j < VEC; ++j) v[it][j] = u.e[j];
        } else {
#pragma unroll
          for (int j = 0; j < VEC; ++j) v[it][j] = (line_ok && j < left) ? src[j] : T{};
        }
      }
    }
  }

  // Element (r, c) of the tile goes to s[r * ld + c], or to s[c * ld + r] when TRANS.
  template <bool TRANS, class S> IGNIS_DEV void store(S* s, int ld) const {
#pragma unroll
    for (int it = 0; it < ITERS; ++it) {
      const int chunk = (int)threadIdx.x + it * THREADS;
      if (CHUNKS % THREADS != 0 && chunk >= CHUNKS) break;
      const int along = (chunk % PER_LINE) * VEC;
      const int across = chunk / PER_LINE;
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const int r = (L == 1) ? along + j : across;
        const int c = (L == 1) ? across : along + j;
        s[TRANS ? c * ld + r : r * ld + c] = widen<S>(v[it][j]);
      }
    }
  }
};

// --- FMA kernel ----------------------------------------------------------------------------------

template <class T> struct SimtShape {  // float and the 16-bit types (float math)
  static constexpr int BM = 128, BN = 128, BK = 8;
};
template <> struct SimtShape<double> {
  static constexpr int BM = 64, BN = 64, BK = 8;
};

// 16 x 16 threads; thread (tx, ty) owns rows {ty*TM/2 + i, BM/2 + ty*TM/2 + i} and the
// same pattern of columns, so each k step reads two 16-byte vectors of A and of B from shared
// memory, and the reads of a warp hit distinct banks or broadcast.
template <class T, int LA, int LB>
__global__ void __launch_bounds__(256, 2)
    gemm_simt(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ c, GemmArgs p) {
  typedef typename Acc<T>::type S;
  constexpr int THREADS = 256;
  constexpr int BM = SimtShape<T>::BM, BN = SimtShape<T>::BN, BK = SimtShape<T>::BK;
  constexpr int TM = BM / 16, TN = BN / 16, HM = TM / 2, HN = TN / 2;
  constexpr int VS = int(16 / sizeof(S));  // S values per 16 bytes
  constexpr int PAD = VS;                  // keeps rows 16-byte aligned, spreads banks
  constexpr int LDA = BM + PAD, LDB = BN + PAD;
  static_assert(HM == VS && HN == VS, "a thread reads one 16-byte vector per half tile");

  __shared__ Vec16 smem_a[2 * BK * LDA / VS];  // As[stage][k][m]
  __shared__ Vec16 smem_b[2 * BK * LDB / VS];  // Bs[stage][k][n]
  S* As = reinterpret_cast<S*>(smem_a);
  S* Bs = reinterpret_cast<S*>(smem_b);

  int tile_m, tile_n;
  tile_of_block(p, tile_m, tile_n);
  const int64 m0 = (int64)tile_m * BM, n0 = (int64)tile_n * BN;
  const int tx = (int)threadIdx.x % 16, ty = (int)threadIdx.x / 16;
  const S alpha = (S)p.alpha, beta = (S)p.beta;
  const int ktiles = (int)((p.k + BK - 1) / BK);

  int64 z;
  if (!batch_of_block(p, z)) return;
  int64 oa, ob, oc;
  batch_offsets(p, z, oa, ob, oc);
  const T* A = a + oa;
  const T* B = b + ob;

  S acc[TM][TN];
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j) acc[i][j] = S(0);

  TileLoader<T, BM, BK, LA, THREADS> la;  // A tile: rows m, columns k
  TileLoader<T, BK, BN, LB, THREADS> lb;  // B tile: rows k, columns n
  if (ktiles > 0) {
    la.load(A, p.a_rs, p.a_cs, m0, 0, p.m, p.k);
    lb.load(B, p.b_rs, p.b_cs, 0, n0, p.k, p.n);
    la.template store<true>(As, LDA);
    lb.template store<false>(Bs, LDB);
  }
  __syncthreads();

  for (int kt = 0; kt < ktiles; ++kt) {
    const int cur = kt & 1;
    const bool more = kt + 1 < ktiles;
    if (more) {  // the next tile travels in registers while this one is multiplied
      const int64 k0 = (int64)(kt + 1) * BK;
      la.load(A, p.a_rs, p.a_cs, m0, k0, p.m, p.k);
      lb.load(B, p.b_rs, p.b_cs, k0, n0, p.k, p.n);
    }
    const S* as = As + cur * BK * LDA;
    const S* bs = Bs + cur * BK * LDB;
#pragma unroll
    for (int kk = 0; kk < BK; ++kk) {
      union {
        Vec16 raw[2];
        S e[TM];
      } ua, ub;
      ua.raw[0] = *reinterpret_cast<const Vec16*>(as + kk * LDA + ty * HM);
      ua.raw[1] = *reinterpret_cast<const Vec16*>(as + kk * LDA + BM / 2 + ty * HM);
      ub.raw[0] = *reinterpret_cast<const Vec16*>(bs + kk * LDB + tx * HN);
      ub.raw[1] = *reinterpret_cast<const Vec16*>(bs + kk * LDB + BN / 2 + tx * HN);
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] += ua.e[i] * ub.e[j];
    }
    if (more) {
      la.template store<true>(As + (cur ^ 1) * BK * LDA, LDA);
      lb.template store<false>(Bs + (cur ^ 1) * BK * LDB, LDB);
    }
    __syncthreads();
  }

  T* C = c + oc;
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const int64 row = m0 + (i < HM ? ty * HM + i : BM / 2 + ty * HM + (i - HM));
#pragma unroll
    for (int j = 0; j < TN; ++j) {
      const int64 col = n0 + (j < HN ? tx * HN + j : BN / 2 + tx * HN + (j - HN));
      store_result(C, p, row, col, acc[i][j], alpha, beta);
    }
  }
}

// --- tensor-core kernel ----------------------------------------------------------------------

// Per element type: the k extent of one mma and of one pipeline stage (64 bytes of k).
template <class T> struct TcShape {  // float16, bfloat16
  static constexpr int KSTEP = 16, BK = 32;
};
template <> struct TcShape<float> {  // TF32
  static constexpr int KSTEP = 8, BK = 16;
};

template <class T, int LA, int LB> struct TcLayout {
  static constexpr int BM = 128, BN = 128, BK = TcShape<T>::BK, STAGES = 4;
  // Shared-memory rows are padded so that the 8 rows an ldmatrix phase (or a fragment load)
  // reads fall in distinct banks; rows stay 16-byte aligned for cp.async.
  static constexpr int PAD_K = int(16 / sizeof(T));  // rows that run along k (64 bytes + 16)
  static constexpr int PAD_MN = 8;                   // rows that run along m or n
  // Operand A is kept as [m][k] except for layout 1 ([k][m]); B as [k][n] except for
  // layout 1 ([n][k]): the copy from global memory is then a straight 16-byte copy.
  static constexpr bool A_KM = (LA == 1), B_NK = (LB == 1);
  static constexpr int LDA = A_KM ? BM + PAD_MN : BK + PAD_K;
  static constexpr int LDB = B_NK ? BK + PAD_K : BN + PAD_MN;
  static constexpr int A_STAGE = A_KM ? BK * LDA : BM * LDA;  // elements
  static constexpr int B_STAGE = B_NK ? BN * LDB : BK * LDB;
  static constexpr int SMEM_BYTES = STAGES * (A_STAGE + B_STAGE) * int(sizeof(T));
};

// Copies an OUTER x INNER tile, inner elements adjacent in global memory, with cp.async:
// tile element (o, i) is g[(o0 + o) * ld + i0 + i] and goes to s[o * lds + i]. Elements past
// (on, in) are zero-filled; only whole in-bounds vectors travel by cp.async.
template <class T, int OUTER, int INNER, int THREADS>
IGNIS_DEV void copy_tile_async(T* s, int lds, const T* g, int64 ld, int64 o0, int64 i0,
                                    int64 on, int64 in) {
  constexpr int VEC = int(16 / sizeof(T));
  constexpr int PER_LINE = INNER / VEC;
  constexpr int CHUNKS = OUTER * PER_LINE;
  static_assert(CHUNKS % THREADS == 0, "tile must split evenly over the threads");
#pragma unroll
  for (int it = 0; it < CHUNKS / THREADS; ++it) {
    const int chunk = (int)threadIdx.x + it * THREADS;
    const int o = chunk / PER_LINE;
    const int i = (chunk % PER_LINE) * VEC;
    const int64 go = o0 + o, gi = i0 + i;
    T* dst = s + o * lds + i;
    if (go < on && gi + VEC <= in) {
      tc::cp_async_16(dst, g + go * ld + gi, 16);
    } else if (go < on && gi < in) {
      // A partial vector at the operand's edge: element copies, so that no access reaches past
      // the operand (a 16-byte cp.async with a smaller source size still names 16 bytes).
      const int left = (int)(in - gi);
#pragma unroll
      for (int e = 0; e < VEC; ++e) dst[e] = e < left ? g[go * ld + gi + e] : T{};
    } else {
      *reinterpret_cast<Vec16*>(dst) = Vec16{};  // outside the operand: zeros, nothing read
    }
  }
}

// Copies an R x CC tile element by element (any strides): tile element (r, c) is
// g[(r0 + r) * rs + (c0 + c) * cs] and goes to s[r * lds + c]; zeros past (rn, cn).
template <class T, int R, int CC, int THREADS>
IGNIS_DEV void copy_tile_elementwise(T* s, int lds, const T* g, int64 rs, int64 cs, int64 r0,
                                          int64 c0, int64 rn, int64 cn) {
  static_assert(R * CC % THREADS == 0, "tile must split evenly over the threads");
#pragma unroll 4
  for (int it = 0; it < R * CC / THREADS; ++it) {
    const int e = (int)threadIdx.x + it * THREADS;
    const int r = e / CC, c = e % CC;
    const int64 row = r0 + r, col = c0 + c;
    s[r * lds + c] = (row < rn && col < cn) ? g[row * rs + col * cs] : T{};
  }
}

template <class T, int LA, int LB>
__global__ void __launch_bounds__(256, 1)
    gemm_tc(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ c, GemmArgs p) {
  typedef TcLayout<T, LA, LB> Lay;
  constexpr int THREADS = 256;
  constexpr int BM = Lay::BM, BN = Lay::BN, BK = Lay::BK, STAGES = Lay::STAGES;
  constexpr int KSTEP = TcShape<T>::KSTEP;
  constexpr int LDA = Lay::LDA, LDB = Lay::LDB;
  constexpr int WN_COUNT = 4;     // warps along n (2 along m)
  constexpr int WM = 64, WN = 32;  // warp tile
  constexpr int MI = WM / 16, NI = WN / 8;
  constexpr bool TF32 = sizeof(T) == 4;

  if (dynamic_smem_bytes() < (uint32)Lay::SMEM_BYTES) fail();
  T* smem_a = reinterpret_cast<T*>(dynamic_smem());
  T* smem_b = smem_a + STAGES * Lay::A_STAGE;

  int tile_m, tile_n;
  tile_of_block(p, tile_m, tile_n);
  const int64 m0 = (int64)tile_m * BM, n0 = (int64)tile_n * BN;
  const int lane = (int)threadIdx.x & 31, warp = (int)threadIdx.x >> 5;
  const int wm0 = (warp / WN_COUNT) * WM, wn0 = (warp % WN_COUNT) * WN;
  const int g = lane >> 2, t = lane & 3;  // mma fragment coordinates
  const float alpha = (float)p.alpha, beta = (float)p.beta;
  const int ktiles = (int)((p.k + BK - 1) / BK);

  int64 z;
  if (!batch_of_block(p, z)) return;
  int64 oa, ob, oc;
  batch_offsets(p, z, oa, ob, oc);
  const T* A = a + oa;
  const T* B = b + ob;

  // Queue the copy of k tile kt into pipeline stage st (synchronous for layout 2).
  auto load_stage = [&](int st, int kt) {
    T* as = smem_a + st * Lay::A_STAGE;
    T* bs = smem_b + st * Lay::B_STAGE;
    const int64 k0 = (int64)kt * BK;
    if constexpr (LA == 0) {
      copy_tile_async<T, BM, BK, THREADS>(as, LDA, A, p.a_rs, m0, k0, p.m, p.k);
    } else if constexpr (LA == 1) {
      copy_tile_async<T, BK, BM, THREADS>(as, LDA, A, p.a_cs, k0, m0, p.k, p.m);
    } else {
      copy_tile_elementwise<T, BM, BK, THREADS>(as, LDA, A, p.a_rs, p.a_cs, m0, k0, p.m, p.k);
    }
    if constexpr (LB == 0) {
      copy_tile_async<T, BK, BN, THREADS>(bs, LDB, B, p.b_rs, k0, n0, p.k, p.n);
    } else if constexpr (LB == 1) {
      copy_tile_async<T, BN, BK, THREADS>(bs, LDB, B, p.b_cs, n0, k0, p.n, p.k);
    } else {
      copy_tile_elementwise<T, BK, BN, THREADS>(bs, LDB, B, p.b_rs, p.b_cs, k0, n0, p.k, p.n);
    }
  };

  float acc[MI][NI][4];
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < NI; ++j)
#pragma unroll
      for (int q = 0; q < 4; ++q) acc[i][j][q] = 0.0f;

#pragma unroll
  for (int st = 0; st < STAGES - 1; ++st) {
    if (st < ktiles) load_stage(st, st);
    tc::cp_async_commit();
  }

  for (int kt = 0; kt < ktiles; ++kt) {
    tc::cp_async_wait<STAGES - 2>();  // this thread's copies of tile kt have landed...
    __syncthreads();              // ...and everyone's; stage (kt - 1) % STAGES is free again
    const int next = kt + STAGES - 1;
    if (next < ktiles) load_stage(next % STAGES, next);
    tc::cp_async_commit();

    const T* as = smem_a + (kt % STAGES) * Lay::A_STAGE;
    const T* bs = smem_b + (kt % STAGES) * Lay::B_STAGE;
#pragma unroll
    for (int kk = 0; kk < BK; kk += KSTEP) {
      uint32 af[MI][4], bf[NI][2];
      if constexpr (!TF32) {
#pragma unroll
        for (int mi = 0; mi < MI; ++mi) {
          const int mrow = wm0 + mi * 16;
          if constexpr (Lay::A_KM) {  // [k][m]: matrix j holds k rows 8*(j/2).., m columns 8*(j%2)..
            tc::ldmatrix_x4_trans(af[mi], as + (kk + (lane & 7) + ((lane >> 4) << 3)) * LDA +
                                              mrow + (((lane >> 3) & 1) << 3));
          } else {  // [m][k]: matrix j holds m rows 8*(j%2).., k columns 8*(j/2)..
            tc::ldmatrix_x4(af[mi], as + (mrow + (lane & 15)) * LDA + kk + ((lane >> 4) << 3));
          }
        }
#pragma unroll
        for (int np = 0; np < NI / 2; ++np) {  // two n8 fragments per ldmatrix
          const int ncol = wn0 + np * 16;
          uint32 r[4];
          if constexpr (Lay::B_NK) {  // [n][k]: matrix j holds n rows 8*(j/2).., k columns 8*(j%2)..
            tc::ldmatrix_x4(r, bs + (ncol + (lane & 7) + ((lane >> 4) << 3)) * LDB + kk +
                                   (((lane >> 3) & 1) << 3));
          } else {  // [k][n]: matrix j holds k rows 8*(j%2).., n columns 8*(j/2)..
            tc::ldmatrix_x4_trans(r, bs + (kk + (lane & 7) + (((lane >> 3) & 1) << 3)) * LDB +
                                         ncol + ((lane >> 4) << 3));
          }
          bf[2 * np][0] = r[0];
          bf[2 * np][1] = r[1];
          bf[2 * np + 1][0] = r[2];
          bf[2 * np + 1][1] = r[3];
        }
      } else {
        // TF32: a0 (g, t), a1 (g+8, t), a2 (g, t+4), a3 (g+8, t+4); b0 (k t, n g), b1 (t+4, g).
        // The padded row strides put the 32 lanes of each load in distinct banks.
        const float* fa = reinterpret_cast<const float*>(as);
        const float* fb = reinterpret_cast<const float*>(bs);
#pragma unroll
        for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            const int mm = wm0 + mi * 16 + g + ((q & 1) << 3);
            const int k = kk + t + ((q >> 1) << 2);
            af[mi][q] = tc::to_tf32(Lay::A_KM ? fa[k * LDA + mm] : fa[mm * LDA + k]);
          }
        }
#pragma unroll
        for (int ni = 0; ni < NI; ++ni) {
#pragma unroll
          for (int q = 0; q < 2; ++q) {
            const int nn = wn0 + ni * 8 + g;
            const int k = kk + t + (q << 2);
            bf[ni][q] = tc::to_tf32(Lay::B_NK ? fb[nn * LDB + k] : fb[k * LDB + nn]);
          }
        }
      }
#pragma unroll
      for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int ni = 0; ni < NI; ++ni) {
          if constexpr (TF32) {
            tc::mma_m16n8k8_tf32(acc[mi][ni], af[mi], bf[ni][0], bf[ni][1]);
          } else {
            tc::mma_m16n8k16(acc[mi][ni], af[mi], bf[ni][0], bf[ni][1], T{});
          }
        }
    }
  }
  tc::cp_async_wait<0>();  // only empty groups are left; leave nothing in flight at exit

  // Accumulator q of fragment (mi, ni): row g + 8*(q/2), column 2t + q%2.
  T* C = c + oc;
#pragma unroll
  for (int mi = 0; mi < MI; ++mi)
#pragma unroll
    for (int ni = 0; ni < NI; ++ni)
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int64 row = m0 + wm0 + mi * 16 + g + ((q >> 1) << 3);
        const int64 col = n0 + wn0 + ni * 8 + 2 * t + (q & 1);
        store_result(C, p, row, col, acc[mi][ni][q], alpha, beta);
      }
}

// --- complex ----------------------------------------------------------------------------------------
// gemm_complex<T>: complex64 / complex128 (complex.cuh), the own-kernel fallback where cuBLAS's
// cgemm/zgemm is not there. A plain shared-memory tiling: 16 x 16 results per block, one per
// thread, k in steps of 16; any strides (element-wise loads), edge tiles read zeros. alpha and
// beta are real (the front end passes 1 and 0, or real scalars).
template <class T>
__global__ void __launch_bounds__(256)
    gemm_complex(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ c, GemmArgs p) {
  typedef typename T::value_type R;
  constexpr int TILE = 16;
  __shared__ T As[TILE][TILE + 1];
  __shared__ T Bs[TILE][TILE + 1];
  int tile_m, tile_n;
  tile_of_block(p, tile_m, tile_n);
  int64 z;
  if (!batch_of_block(p, z)) return;
  int64 oa, ob, oc;
  batch_offsets(p, z, oa, ob, oc);
  const int tx = (int)threadIdx.x % TILE, ty = (int)threadIdx.x / TILE;
  const int64 row = (int64)tile_m * TILE + ty, col = (int64)tile_n * TILE + tx;
  T acc(R(0), R(0));
  for (int64 k0 = 0; k0 < p.k; k0 += TILE) {
    const int64 ka = k0 + tx, kb = k0 + ty;
    As[ty][tx] = (row < p.m && ka < p.k) ? a[oa + row * p.a_rs + ka * p.a_cs] : T(R(0), R(0));
    Bs[ty][tx] = (kb < p.k && col < p.n) ? b[ob + kb * p.b_rs + col * p.b_cs] : T(R(0), R(0));
    __syncthreads();
#pragma unroll
    for (int l = 0; l < TILE; ++l) {
      // the plain complex product (no Annex G recovery): as BLAS computes it
      const T x = As[ty][l], y = Bs[l][tx];
      acc.re += x.re * y.re - x.im * y.im;
      acc.im += x.re * y.im + x.im * y.re;
    }
    __syncthreads();
  }
  if (row < p.m && col < p.n) {
    T* out = c + oc + row * p.c_rs + col * p.c_cs;
    const R alpha = (R)p.alpha, beta = (R)p.beta;
    T r(alpha * acc.re, alpha * acc.im);
    if (beta != R(0)) r = T(r.re + beta * out->re, r.im + beta * out->im);
    *out = r;
  }
}

}  // namespace gemm
}  // namespace ignis
