// sort.cu - sorting, searching, set and cumulative kernels (the "sorting" families).
//
// Order. Every comparison goes through an order-preserving key: the element's bits mapped to an
// unsigned integer of the same width whose unsigned order is the value order (Key<T> below).
// Unsigned integers are their own keys, signed ones flip the sign bit, IEEE floats flip the sign
// bit of positives and every bit of negatives. NaNs map above +inf (NumPy's order: NaN last),
// and descending order is the bitwise complement of the ascending key. Two flavours:
//   canonical  every NaN has one key (all ones) and -0.0 the key of +0.0: equal values get
//              equal keys, so a stable sort keeps equal values in index order (argsort, unique,
//              searchsorted);
//   exact      one-to-one but for the sign of NaNs: -0.0 sorts just before +0.0 and NaNs by
//              payload, so the sorted values can be rebuilt from their keys (sort's values).
//
// Kernels (all 64-bit indexed; tiles of TILE = 256 threads x 16 items):
//   radix_histogram / radix_onesweep  the stable LSD radix sort on 8-bit digits (Onesweep):
//       one launch reads the keys once and counts the digits of every pass per row; then one
//       launch a pass ranks each tile (warp-private digit counters, match_digit8 among 32
//       keys), publishes its per-digit counts at once and finds where its keys go by a
//       decoupled look-back over the counts of the row's earlier tiles (tile ids from a
//       counter, in start order; a window of predecessors a step), then scatters through
//       shared memory, coalesced. Registers capped so that 4 blocks fit an SM (3 for 8-byte
//       keys). The first pass reads the input and makes its keys; the last writes the outputs
//       (values rebuilt from keys, int64 indices; positions travel as uint32 until then).
//       radix_onesweep_v1, its first form, stays to compare with.
//   radix_plan        between the two: which passes have work in each row. A pass whose digit
//       is the same in every key of a row (one bin of the row's histogram holds all n) would
//       keep the order; its launch returns at once for the row, and the passes with work take
//       the first / last roles among themselves (small integers: the high bytes, skipped).
//   sort_rows_tile    rows of at most TILE elements: one block a row runs every radix pass in
//       shared memory (read once, written once), but the passes whose digit no key varies.
//   radix_upsweep / radix_downsweep   the earlier form of the radix sort, three launches a
//       pass (kept to compare with): one pass of a stable LSD radix sort on 8-bit digits of
//       the keys of rows of n elements (tiles never cross a row, so per-(row, digit, tile)
//       counts scanned in row-major order give each tile its scatter offsets directly). The
//       downsweep ranks a tile stably (warp-local digit counters through match_digit),
//       exchanges it through shared memory into digit order and writes it out coalesced. The
//       first pass reads the input and makes its keys; the last writes the outputs (values
//       rebuilt from keys, int64 indices).
//   sort_rows_small   rows of at most P <= 2048 elements sorted in shared memory by a bitonic
//       network on (key, index): the index breaks ties, so the result is stable.
//   scan_rows         inclusive scan (sum, product) of rows in one pass: tiles publish their
//       aggregate, then look back for the nearest predecessor that published its inclusive
//       prefix (decoupled look-back; tile ids come from a counter, in launch order, so the
//       tiles waited for are running), 32 predecessors a step, each status a value and its
//       flag in one word (one load, no fence). The prefix is folded forward from that
//       predecessor in tile order, so float results do not depend on timing: each tile's
//       prefix is the left-to-right sum of the tile totals before it.
//   scan_tile_totals / scan_tile_prefixes / scan_tile_apply   the default scan of rows longer
//       than one tile, reduce-then-scan: the tile totals (one read), their exclusive scan in a
//       fixed order (one block a row), the tiles' scans from those prefixes (a second read, one
//       write). No block waits for another and nothing is zeroed first; 16-byte accesses,
//       32 registers a thread (full occupancy; scan_rows takes 64). A row of one tile is
//       scan_tile_apply alone. (scan_rows stays, behind sorting.SCAN_PATH, to compare with.)
//   scan_cols         one thread per column of (outer, n, inner): sequential scans along n.
//   count_flags / compact_flags   stream compaction in two passes around a scan of the tile
//       counts by scan_tile_prefixes (nonzero elements, or the first element of each run of
//       equal sorted values).
//   complex_keys / gather_rows   complex numbers sort by uint64 keys in NumPy's order
//       (ComplexKey below; complex128 by two, least significant first), their values gathered
//       by the resulting order.
//   searchsorted      binary search of canonical keys (complex: key pairs).
//   unravel           flat index -> coordinate along one dimension.
#include "complex.cuh"
#include "ignis_types.cuh"

#if defined(__CUDACC__)
#define SORT_DEV __device__ __forceinline__
#else
#define SORT_DEV inline
#endif

namespace ignis {
namespace sort {

// (enumerators rather than constexpr variables: a source compiled without the kernels that use
// one would warn about it)
enum : int {
  THREADS = 256,
  WARPS = THREADS / 32,
  ITEMS = 16,
  TILE = THREADS * ITEMS,
  RADIX = 256,  // 8-bit digits; RADIX == THREADS: thread d owns digit d
};
enum : unsigned { FULL = 0xffffffffu };

static_assert(RADIX == THREADS, "one thread per digit");

// --- order-preserving keys ---------------------------------------------------------------------

template <int BYTES> struct uint_of;
template <> struct uint_of<1> { typedef uint8 type; };
template <> struct uint_of<2> { typedef uint16 type; };
template <> struct uint_of<4> { typedef uint32 type; };
template <> struct uint_of<8> { typedef uint64 type; };

// How the bits of T order: 0 unsigned integer, 1 two's complement, 2 IEEE sign-magnitude, 3 bool.
template <class T> struct order_kind { static constexpr int value = 0; };
template <> struct order_kind<bool> { static constexpr int value = 3; };
template <> struct order_kind<int8> { static constexpr int value = 1; };
template <> struct order_kind<int16> { static constexpr int value = 1; };
template <> struct order_kind<int32> { static constexpr int value = 1; };
template <> struct order_kind<int64> { static constexpr int value = 1; };
template <> struct order_kind<float16> { static constexpr int value = 2; };
template <> struct order_kind<bfloat16> { static constexpr int value = 2; };
template <> struct order_kind<float> { static constexpr int value = 2; };
template <> struct order_kind<double> { static constexpr int value = 2; };

// The bits of +inf (floats only): magnitudes above it are NaNs.
template <class T> struct inf_bits { static constexpr uint64 value = 0; };
template <> struct inf_bits<float16> { static constexpr uint64 value = 0x7c00ull; };
template <> struct inf_bits<bfloat16> { static constexpr uint64 value = 0x7f80ull; };
template <> struct inf_bits<float> { static constexpr uint64 value = 0x7f800000ull; };
template <> struct inf_bits<double> { static constexpr uint64 value = 0x7ff0000000000000ull; };

template <class T> struct Key {
  typedef typename uint_of<sizeof(T)>::type K;
  static constexpr int kind = order_kind<T>::value;
  static constexpr K SIGN = (K)((K)1 << (sizeof(T) * 8 - 1));
  static constexpr K MAG = (K)~SIGN;
  static constexpr K INF = (K)inf_bits<T>::value;
  static constexpr K ONES = (K)~(K)0;

  // The ascending key of the element with bits u.
  static SORT_DEV K up(K u, bool exact) {
    if constexpr (kind == 0) {
      return u;
    } else if constexpr (kind == 3) {
      return u ? (K)1 : (K)0;
    } else if constexpr (kind == 1) {
      return (K)(u ^ SIGN);
    } else {
      const K mag = (K)(u & MAG);
      if (mag > INF) return exact ? (K)(mag | SIGN) : ONES;  // NaN: above +inf
      if (mag == 0 && !exact) return SIGN;                   // -0.0 as +0.0
      return (u & SIGN) ? (K)~u : (K)(u | SIGN);
    }
  }
  // The key in the requested direction.
  static SORT_DEV K of(K u, bool desc, bool exact) {
    const K k = up(u, exact);
    return desc ? (K)~k : k;
  }
  // The element bits of a key (exact keys: the element itself, but a NaN's sign; canonical
  // ones: +0.0 for both zeros and a quiet NaN for every NaN).
  static SORT_DEV K bits(K k, bool desc) {
    if (desc) k = (K)~k;
    if constexpr (kind == 0 || kind == 3) {
      return k;
    } else if constexpr (kind == 1) {
      return (K)(k ^ SIGN);
    } else {
      return (k & SIGN) ? (K)(k & MAG) : (K)~k;
    }
  }
  // Whether the element with bits u is nonzero (-0.0 is zero, NaN is not).
  static SORT_DEV bool nonzero(K u) {
    if constexpr (kind == 2) {
      return (u & MAG) != 0;
    } else {
      return u != 0;
    }
  }
};

template <class T> SORT_DEV uint32 digit(T key, int shift) {
  return (uint32)(key >> shift) & (RADIX - 1);
}

SORT_DEV uint32 lanemask_lt(int lane) { return (1u << lane) - 1u; }

// The lanes of the (converged, full) warp whose d (a digit, or RADIX for "no key": 9 bits)
// equals this lane's: one ballot a bit. match.any.sync is much slower than these 9 ballots when
// the labels are this short (CUB ranks the same way).
SORT_DEV unsigned match_digit(uint32 d) {
  static_assert(RADIX == 256, "9-bit labels: the digits and RADIX");
  unsigned peers = FULL;
#pragma unroll
  for (int b = 0; b < 9; ++b) {
    const bool set = ((d >> b) & 1u) != 0;
    const unsigned m = __ballot_sync(FULL, set);
    peers &= set ? m : ~m;
  }
  return peers;
}

// Block-wide exclusive sum of one uint32 per thread (all THREADS threads call it); `sums` is
// WARPS words of shared memory. Ends with a barrier: `sums` may be reused after it.
SORT_DEV uint32 block_exclusive_sum(uint32 v, uint32* sums, uint32* total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  uint32 incl = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const uint32 y = __shfl_up_sync(FULL, incl, o);
    if (lane >= o) incl += y;
  }
  if (lane == 31) sums[warp] = incl;
  __syncthreads();
  uint32 before = 0, all = 0;
#pragma unroll
  for (int w = 0; w < WARPS; ++w) {
    const uint32 s = sums[w];
    if (w < warp) before += s;
    all += s;
  }
  if (total) *total = all;
  __syncthreads();
  return before + incl - v;
}

// --- radix sort passes -------------------------------------------------------------------------
// A row ("segment") of n elements has tiles_per_seg tiles; block b sorts tile b % tiles_per_seg
// of row b / tiles_per_seg. counts[(row * RADIX + d) * tiles_per_seg + t] is the number of keys of
// tile t with digit d; its exclusive scan (in that order) is where each tile's keys of digit d
// go in the flattened rows: every row's offsets start at row * n.

template <class T>
__global__ void __launch_bounds__(THREADS)
    radix_upsweep(const void* keys, int32* counts, int64 n, int64 tiles_per_seg, int shift,
                  bool first, bool desc, bool exact) {
  typedef Key<T> KT;
  typedef typename KT::K K;
  __shared__ uint32 hist[RADIX];
  const int tid = threadIdx.x, lane = tid & 31;
  const int64 seg = (int64)blockIdx.x / tiles_per_seg;
  const int64 t = (int64)blockIdx.x - seg * tiles_per_seg;
  const int64 start = t * TILE;
  const int len = (int)(n - start < TILE ? n - start : TILE);
  const K* src = (const K*)keys + seg * n + start;
  hist[tid] = 0;
  __syncthreads();
#pragma unroll 4
  for (int r = 0; r < ITEMS; ++r) {
    const int j = r * THREADS + tid;
    uint32 d = RADIX;  // no key: a group of its own, not counted
    if (j < len) {
      K k = src[j];
      if (first) k = KT::of(k, desc, exact);
      d = digit(k, shift);
    }
    // One shared atomic per distinct digit of the warp: keys of few distinct digits (the high
    // bytes of small integers) do not serialize on one counter.
    const unsigned peers = match_digit(d);
    if (d < RADIX && lane == __ffs(peers) - 1) atomicAdd(&hist[d], (uint32)__popc(peers));
  }
  __syncthreads();
  counts[(seg * RADIX + tid) * tiles_per_seg + t] = (int32)hist[tid];
}

// keys_in: T elements (first pass) or keys; idx_in: uint32 positions in the row (not read in
// the first pass, which makes them). keys_out/idx_out: keys and uint32 positions, or in the last
// pass the outputs: T values rebuilt from the keys and int64 indices (either may be null).
// carry: positions travel with the keys (the indices are wanted).
template <class T>
__global__ void __launch_bounds__(THREADS)
    radix_downsweep(const void* keys_in, const uint32* idx_in, void* keys_out, void* idx_out,
                    const int32* offsets, int64 n, int64 tiles_per_seg, int shift, bool first,
                    bool last, bool carry, bool desc, bool exact) {
  typedef Key<T> KT;
  typedef typename KT::K K;
  __shared__ uint32 warp_count[WARPS][RADIX];  // per warp and digit: keys so far, then offsets
  __shared__ uint32 local_base[RADIX];         // first slot of each digit in the tile
  __shared__ int32 global_base[RADIX];         // destination of slot j: global_base[d] + j
  __shared__ uint32 sums[WARPS];
  __shared__ uint64 exchange[TILE];            // the tile in digit order: keys, then positions
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64 seg = (int64)blockIdx.x / tiles_per_seg;
  const int64 t = (int64)blockIdx.x - seg * tiles_per_seg;
  const int64 start = t * TILE;
  const int len = (int)(n - start < TILE ? n - start : TILE);
  const int64 base = seg * n + start;

  for (int i = tid; i < WARPS * RADIX; i += THREADS) (&warp_count[0][0])[i] = 0;
  __syncthreads();

  // Warp w ranks elements [w * 32 * ITEMS, (w + 1) * 32 * ITEMS) of the tile, 32 at a time in
  // lane order: the rank of a key among the warp's keys of its digit follows element order.
  K key[ITEMS];
  uint32 pos[ITEMS];
  uint32 idx[ITEMS];
  const K* ksrc = (const K*)keys_in + base;
  const int wbase = warp * 32 * ITEMS;
#pragma unroll
  for (int r = 0; r < ITEMS; ++r) {
    const int j = wbase + r * 32 + lane;
    const bool valid = j < len;
    K k = valid ? ksrc[j] : (K)0;
    if (first) k = KT::of(k, desc, exact);
    key[r] = k;
    idx[r] = 0;
    if (carry && valid) idx[r] = first ? (uint32)(start + j) : idx_in[base + j];
    const uint32 d = valid ? digit(k, shift) : (uint32)RADIX;
    const unsigned peers = match_digit(d);
    const uint32 before = valid ? warp_count[warp][d] : 0u;
    pos[r] = before + (uint32)__popc(peers & lanemask_lt(lane));
    __syncwarp();
    if (valid && lane == __ffs(peers) - 1) warp_count[warp][d] = before + (uint32)__popc(peers);
    __syncwarp();
  }
  __syncthreads();

  {  // thread d: the offsets of digit d per warp, the tile's total of d and its first slot
    const int d = tid;
    uint32 run = 0;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) {
      const uint32 c = warp_count[w][d];
      warp_count[w][d] = run;
      run += c;
    }
    const uint32 first_slot = block_exclusive_sum(run, sums, nullptr);
    local_base[d] = first_slot;
    global_base[d] = offsets[(seg * RADIX + d) * tiles_per_seg + t] - (int32)first_slot;
  }
  __syncthreads();

  K* xk = reinterpret_cast<K*>(exchange);
#pragma unroll
  for (int r = 0; r < ITEMS; ++r) {
    const int j = wbase + r * 32 + lane;
    if (j < len) {
      const uint32 d = digit(key[r], shift);
      pos[r] += local_base[d] + warp_count[warp][d];
      xk[pos[r]] = key[r];
    }
  }
  __syncthreads();

  int32 dest[ITEMS];  // (the host keeps radix sorts below 2**31 elements)
#pragma unroll
  for (int s = 0; s < ITEMS; ++s) {
    const int j = s * THREADS + tid;
    dest[s] = -1;
    if (j < len) {
      const K k = xk[j];
      dest[s] = global_base[digit(k, shift)] + j;
      if (!last) {
        reinterpret_cast<K*>(keys_out)[dest[s]] = k;
      } else if (keys_out) {
        reinterpret_cast<K*>(keys_out)[dest[s]] = KT::bits(k, desc);
      }
    }
  }
  if (!carry) return;
  __syncthreads();  // every key is read from the exchange: it takes the positions now
  uint32* xi = reinterpret_cast<uint32*>(exchange);
#pragma unroll
  for (int r = 0; r < ITEMS; ++r) {
    const int j = wbase + r * 32 + lane;
    if (j < len) xi[pos[r]] = idx[r];
  }
  __syncthreads();
#pragma unroll
  for (int s = 0; s < ITEMS; ++s) {
    if (dest[s] < 0) continue;
    const uint32 v = xi[s * THREADS + tid];
    if (!last) {
      reinterpret_cast<uint32*>(idx_out)[dest[s]] = v;
    } else if (idx_out) {
      reinterpret_cast<int64*>(idx_out)[dest[s]] = (int64)v;
    }
  }
}

// --- Onesweep radix sort -----------------------------------------------------------------------
// The same stable LSD sort on 8-bit digits in 1 + (key bytes) launches: radix_histogram reads
// the keys once and counts the digits of every pass per row; then one radix_onesweep launch a
// pass ranks and scatters each tile, finding where its keys of digit d go by a decoupled
// look-back over the per-digit counts of the row's earlier tiles. No per-tile counts are
// scanned in between, and the keys are read once a pass instead of twice.
//
// Look-back words (status, one per (tile, digit), zeroed before the first pass and reused by
// the later ones): flag << 62 | pass << 48 | count. A word of an earlier pass reads as "nothing
// yet". Each word carries its count, so no fence orders it with other data.

enum : int {
  HIST_WORDS = 32,  // counters of each digit in radix_histogram, over all passes (32 KiB a block)
  HIST_TILES = 8,   // tiles of a row one radix_histogram block counts
  HIST_CHUNK = HIST_TILES * TILE,
};
enum : uint64 {
  DIGIT_AGGREGATE = 1ull << 62,  // the count of the tile's own keys of the digit
  DIGIT_PREFIX = 2ull << 62,     // the count of the digit's keys in this tile and all before it
  DIGIT_COUNT_MASK = (1ull << 48) - 1,
};

SORT_DEV uint64 digit_word(uint64 flag, int pass, uint32 count) {
  return flag | ((uint64)pass << 48) | (uint64)count;
}
SORT_DEV uint64 load_word(const uint64* p) { return *(const volatile uint64*)p; }
SORT_DEV void store_word(uint64* p, uint64 w) { *(volatile uint64*)p = w; }

// The exchange slot of a key or a uint32 position: 4 bytes, 8 for 8-byte keys.
template <class K> struct slot_of { typedef uint32 type; };
template <> struct slot_of<uint64> { typedef uint64 type; };

// hist[(seg * PASSES + p) * RADIX + d]: keys of row seg whose digit of pass p is d (PASSES = key
// bytes; hist zeroed before). Block b counts chunk b % chunks_per_seg (HIST_CHUNK keys) of row
// b / chunks_per_seg. Each digit has PARTS counters side by side (bins[p][d][part]) and lane l
// counts into part l % PARTS: lanes of one digit then add into different banks, and lanes that
// collide on one counter are at most 32 / PARTS. (The top byte of float keys takes few values:
// with the copies a digit's counters RADIX words apart, every lane of a digit hit one bank.)
template <class T, int PARTS = HIST_WORDS / (int)sizeof(typename Key<T>::K)>
__global__ void __launch_bounds__(THREADS)
    radix_histogram(const T* x, uint32* hist, int64 n, int64 chunks_per_seg, bool desc,
                    bool exact) {
  typedef Key<T> KT;
  typedef typename KT::K K;
  constexpr int PASSES = (int)sizeof(K);
  static_assert(PARTS >= 1 && PASSES * PARTS <= HIST_WORDS, "radix_histogram: 32 KiB of bins");
  __shared__ uint32 bins[PASSES][RADIX][PARTS];
  const int tid = threadIdx.x;
  for (int i = tid; i < PASSES * PARTS * RADIX; i += THREADS) (&bins[0][0][0])[i] = 0;
  __syncthreads();
  const int64 seg = (int64)blockIdx.x / chunks_per_seg;
  const int64 c = (int64)blockIdx.x - seg * chunks_per_seg;
  const int64 start = c * HIST_CHUNK;
  const int64 end = n - start < HIST_CHUNK ? n : start + HIST_CHUNK;
  const K* src = reinterpret_cast<const K*>(x) + seg * n;
  const int part = tid % PARTS;
#pragma unroll 4
  for (int64 i = start + tid; i < end; i += THREADS) {
    const K k = KT::of(src[i], desc, exact);
#pragma unroll
    for (int p = 0; p < PASSES; ++p) atomicAdd(&bins[p][digit(k, 8 * p)][part], 1u);
  }
  __syncthreads();
#pragma unroll
  for (int p = 0; p < PASSES; ++p) {
    uint32 s = 0;
#pragma unroll
    // (each thread starts at another part: no bank conflicts)
    for (int q = 0; q < PARTS; ++q) s += bins[p][tid][(q + tid) % PARTS];
    if (s) atomicAdd(&hist[(seg * PASSES + p) * RADIX + tid], s);
  }
}

// plan[seg]: bit p set when pass p has work in row seg, i.e. the row's keys do not all share
// their digit of pass p (no bin of the row's histogram of the pass holds all n keys). A pass
// without work would leave the order as it is: its launch returns at once for that row, and the
// passes with work take the first/last roles and alternate the buffers among themselves. A row
// of keys all alike keeps its last pass (it writes the outputs). One block a row.
template <class T>
__global__ void __launch_bounds__(THREADS) radix_plan(const uint32* hist, uint32* plan, int64 n) {
  constexpr int PASSES = (int)sizeof(typename Key<T>::K);
  __shared__ uint32 constant[PASSES];
  const int tid = threadIdx.x;
  const int64 seg = (int64)blockIdx.x;
  if (tid < PASSES) constant[tid] = 0;
  __syncthreads();
#pragma unroll
  for (int p = 0; p < PASSES; ++p)
    if (hist[(seg * PASSES + p) * RADIX + tid] == (uint32)n) constant[p] = 1;  // one bin at most
  __syncthreads();
  if (tid == 0) {
    uint32 mask = 0;
    for (int p = 0; p < PASSES; ++p)
      if (!constant[p]) mask |= 1u << p;
    plan[seg] = mask ? mask : 1u << (PASSES - 1);
  }
}

// The role of pass `pass` in a row with plan `mask` (radix_plan's): whether it runs, whether it
// is the first or the last that runs, and which ping-pong buffer it reads (0/1; the first reads
// the input) and writes (the last writes the outputs). Pure: the host tests mirror it.
struct PassRole {
  bool runs, first, last;
  int read, write;
};
SORT_DEV PassRole pass_role(uint32 mask, int pass) {
  PassRole r;
  const int k = __popc(mask & ((1u << pass) - 1u));  // passes with work before this one
  const int active = __popc(mask);
  r.runs = ((mask >> pass) & 1u) != 0;
  r.first = k == 0;
  r.last = k == active - 1;
  r.read = (k + 1) & 1;  // pass k reads what pass k - 1 wrote
  r.write = k & 1;
  return r;
}

// Ranks the ITEMS keys of each thread of a tile (warp w holds elements [w * 32 * ITEMS, ...),
// element r * 32 + lane of it in key[r]) stably by their digit at `shift`: on return slot[r] is
// the element's place in the tile in digit order (keys of equal digit in element order), and
// for thread d, *count the tile's keys of digit d. valid: elements that exist (the others get
// no slot). warp_count is zero on entry; local_base and sums are scratch.
//   1. each warp walks its keys in element order: the keys of one digit among 32 are found by
//      match_digit (9 ballots), and their leader takes as many places from the warp's counter
//      of the digit with one shared atomic (no counter is hit by more than one lane at a time);
//   2. per digit, the warps' counts scanned in warp order, the digits' totals across digits;
//   3. each place moved by its warp's and its digit's offsets.
// Between 2 and 3 `between()` runs (every thread calls it): the Onesweep pass publishes its
// counts there, as early as they are known.
template <class K, class Between>
SORT_DEV void rank_tile(const K* key, const bool* valid, int shift, uint32* slot,
                        uint32 (*warp_count)[RADIX], uint32* local_base, uint32* sums,
                        uint32* count, Between between) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  uint32 d[ITEMS];
#pragma unroll
  for (int r = 0; r < ITEMS; ++r) {
    d[r] = valid[r] ? digit(key[r], shift) : (uint32)RADIX;
    const unsigned peers = match_digit(d[r]);
    const int leader = __ffs(peers) - 1;
    uint32 before = 0;
    if (d[r] < RADIX && lane == leader)
      before = atomicAdd(&warp_count[warp][d[r]], (uint32)__popc(peers));
    slot[r] = __shfl_sync(FULL, before, leader) + (uint32)__popc(peers & lanemask_lt(lane));
  }
  __syncthreads();
  {
    const int dt = tid;
    uint32 run = 0;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) {
      const uint32 c = warp_count[w][dt];
      warp_count[w][dt] = run;
      run += c;
    }
    *count = run;
    local_base[dt] = block_exclusive_sum(run, sums, nullptr);  // (ends with a barrier)
  }
  between();
  __syncthreads();
#pragma unroll
  for (int r = 0; r < ITEMS; ++r)
    if (d[r] < RADIX) slot[r] += warp_count[warp][d[r]] + local_base[d[r]];
}

struct NoStep {
  SORT_DEV void operator()() const {}
};

// radix_onesweep_v1: the first form of the Onesweep pass (kept to compare with, behind the
// host's RADIX_PATH "onesweep_v1"): positions held in registers from the start, no register
// cap (128-143 registers: one or two blocks an SM), a look-back one predecessor a step.
// One pass of the Onesweep sort. x: the T elements; keys0/keys1 and idx0/idx1: the ping-pong
// buffers of keys and uint32 positions (the passes with work alternate them: see pass_role);
// values / indices: the outputs, T values rebuilt from the keys and int64 indices (either may
// be null); carry / desc / exact as radix_downsweep's; hist from radix_histogram, plan from
// radix_plan; status the look-back words (tiles x RADIX, see above); counter: this pass's tile
// counter (zeroed). One block a tile, in the order of the tile ids the counter hands out
// (row-major), so the tiles a block waits for have all started and publish their counts before
// they wait for anything (a row whose pass has no work returns before: none waits for it).
template <class T>
__global__ void __launch_bounds__(THREADS)
    radix_onesweep_v1(const T* x, void* keys0, void* keys1, uint32* idx0, uint32* idx1, T* values,
                   int64* indices, const uint32* hist, const uint32* plan, uint64* status,
                   uint32* counter, int64 n, int64 tiles_per_seg, int pass, bool carry, bool desc,
                   bool exact) {
  typedef Key<T> KT;
  typedef typename KT::K K;
  typedef typename slot_of<K>::type S;
  constexpr int PASSES = (int)sizeof(K);
  __shared__ uint32 warp_count[WARPS][RADIX];
  __shared__ uint32 local_base[RADIX];
  __shared__ int32 global_base[RADIX];  // destination of slot j: global_base[d] + j
  __shared__ uint32 sums[WARPS];
  __shared__ S exchange[TILE];
  __shared__ uint32 tile_id;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  if (tid == 0) tile_id = atomicAdd(counter, 1u);
  for (int i = tid; i < WARPS * RADIX; i += THREADS) (&warp_count[0][0])[i] = 0;
  __syncthreads();
  const int64 tile = (int64)tile_id;
  const int64 seg = tile / tiles_per_seg;
  const PassRole role = pass_role(plan[seg], pass);
  if (!role.runs) return;  // (the whole block: the row's digit of this pass is constant)
  const bool first = role.first, last = role.last;
  const void* keys_in = first ? (const void*)x : role.read ? keys1 : keys0;
  const uint32* idx_in = role.read ? idx1 : idx0;
  void* keys_out = last ? (void*)values : role.write ? keys1 : keys0;
  void* idx_out = last ? (void*)indices : role.write ? (void*)idx1 : (void*)idx0;
  const int64 t = tile - seg * tiles_per_seg;
  const int64 start = t * TILE;
  const int len = (int)(n - start < TILE ? n - start : TILE);
  const int64 base = seg * n + start;
  const int shift = 8 * pass;

  // Every load first (they overlap), then the work on them.
  K key[ITEMS];
  bool valid[ITEMS];
  uint32 idx[ITEMS];
  const K* ksrc = reinterpret_cast<const K*>(keys_in) + base;
  const int wbase = warp * 32 * ITEMS;
#pragma unroll
  for (int r = 0; r < ITEMS; ++r) {
    const int j = wbase + r * 32 + lane;
    valid[r] = j < len;
    key[r] = valid[r] ? ksrc[j] : (K)0;
    idx[r] = 0;
    if (carry && valid[r]) idx[r] = first ? (uint32)(start + j) : idx_in[base + j];
  }
  if (first) {
#pragma unroll
    for (int r = 0; r < ITEMS; ++r) key[r] = KT::of(key[r], desc, exact);
  }
  // Thread d: where the row's keys of digit d start (the histogram scanned across digits).
  const uint32 row_digit_base =
      block_exclusive_sum(hist[(seg * PASSES + pass) * RADIX + tid], sums, nullptr);

  uint32 slot[ITEMS];
  uint32 count;
  // The counts are published as soon as they are known, the look-back for the tiles before
  // runs after them.
  rank_tile<K>(key, valid, shift, slot, warp_count, local_base, sums, &count, [&]() {
    store_word(&status[tile * RADIX + tid],
               digit_word(t == 0 ? DIGIT_PREFIX : DIGIT_AGGREGATE, pass, count));
  });
  {  // thread d: the keys of digit d in the row's tiles before this one
    const int d = tid;
    uint32 before = 0;
    if (t > 0) {
      const uint64* row_words = status + (tile - t) * RADIX + d;
      for (int64 j = t - 1;; --j) {  // tile 0 always has a prefix: the walk stops there
        uint64 w = load_word(row_words + j * RADIX);
        while ((w >> 62) == 0 || (int)((w >> 48) & 0x3fff) != pass) {
          __nanosleep(64);  // the tile started before this one: its counts come shortly
          w = load_word(row_words + j * RADIX);
        }
        before += (uint32)(w & DIGIT_COUNT_MASK);
        if ((w & DIGIT_PREFIX) != 0) break;
      }
      store_word(&status[tile * RADIX + d], digit_word(DIGIT_PREFIX, pass, before + count));
    }
    global_base[d] = (int32)(seg * n) + (int32)(row_digit_base + before) - (int32)local_base[d];
  }
  __syncthreads();

  S* xs = exchange;
#pragma unroll
  for (int r = 0; r < ITEMS; ++r)
    if (valid[r]) xs[slot[r]] = (S)key[r];
  __syncthreads();
  int32 dest[ITEMS];  // (the host keeps radix sorts below 2**31 elements)
#pragma unroll
  for (int s = 0; s < ITEMS; ++s) {
    const int j = s * THREADS + tid;
    dest[s] = -1;
    if (j < len) {
      const K k = (K)xs[j];
      dest[s] = global_base[digit(k, shift)] + j;
      if (!last) {
        reinterpret_cast<K*>(keys_out)[dest[s]] = k;
      } else if (keys_out) {
        reinterpret_cast<K*>(keys_out)[dest[s]] = KT::bits(k, desc);
      }
    }
  }
  if (!carry) return;
  __syncthreads();  // every key is read from the exchange: it takes the positions now
#pragma unroll
  for (int r = 0; r < ITEMS; ++r)
    if (valid[r]) xs[slot[r]] = (S)idx[r];
  __syncthreads();
#pragma unroll
  for (int s = 0; s < ITEMS; ++s) {
    if (dest[s] < 0) continue;
    const uint32 v = (uint32)xs[s * THREADS + tid];
    if (!last) {
      reinterpret_cast<uint32*>(idx_out)[dest[s]] = v;
    } else if (idx_out) {
      reinterpret_cast<int64*>(idx_out)[dest[s]] = (int64)v;
    }
  }
}

// --- Onesweep pass -----------------------------------------------------------------------------
// radix_onesweep<T, IT, BLOCKS>: tiles of THREADS x IT keys (IT = ONESWEEP_ITEMS unless the host
// asks for another), compiled to fit BLOCKS blocks an SM. What keeps it fast:
//   * registers: only the keys and their slots live across the ranking (positions are loaded
//     after it, the digits are recomputed from the keys, a partial tile's missing keys are
//     padding instead of flags), and __launch_bounds__ caps them so that BLOCKS blocks fit
//     (64 registers for 4 blocks): enough warps an SM to hide the latency of the loads, of the
//     serial ranking and of the look-back;
//   * ranking: 8 ballots a key (match_digit8: the padding keys take digit 255, so no ninth bit
//     for "no key"), one shared atomic per distinct digit of 32 keys;
//   * one block scan across digits for both the row's digit bases (from the histogram) and the
//     tile's first slots (two counts in one 64-bit word);
//   * look-back: each step loads LOOKBACK_WINDOW predecessors' words at once (independent loads
//     in flight) instead of one;
//   * scatter through shared memory in digit order, as before: each warp store covers 32
//     consecutive slots, runs of one digit, so the global writes are coalesced by digit.

enum : int {
  ONESWEEP_ITEMS = 16,  // keys a thread (the default tile: THREADS * 16 = 4096, the host's TILE)
  LOOKBACK_WINDOW = 4,  // predecessor words a look-back step loads together
  SM_REGISTERS = 65536,
  MAX_ONESWEEP_BLOCKS = 4,
};

// The blocks an SM is to hold by default: as many as the registers the pass needs allow
// (about three 32-bit registers a key, four for 8-byte keys, and 16 more), at most
// MAX_ONESWEEP_BLOCKS (4 x 256 threads: 64 registers; 3: 80).
template <int KEY_BYTES, int IT> struct OnesweepBlocks {
  static constexpr int regs = IT * (KEY_BYTES > 4 ? 4 : 3) + 16;
  static constexpr int fit = SM_REGISTERS / (THREADS * ((regs + 7) / 8 * 8));
  static constexpr int value =
      fit > (int)MAX_ONESWEEP_BLOCKS ? (int)MAX_ONESWEEP_BLOCKS : fit < 1 ? 1 : fit;
};

// The lanes of the (converged, full) warp whose 8-bit digit equals this lane's: 8 ballots.
SORT_DEV unsigned match_digit8(uint32 d) {
  unsigned peers = FULL;
#pragma unroll
  for (int b = 0; b < 8; ++b) {
    const bool set = ((d >> b) & 1u) != 0;
    const unsigned m = __ballot_sync(FULL, set);
    peers &= set ? m : ~m;
  }
  return peers;
}

// Block-wide exclusive sum of one uint64 per thread (all THREADS threads call it; sums: WARPS
// words of shared memory). Ends with a barrier.
SORT_DEV uint64 block_exclusive_sum64(uint64 v, uint64* sums) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  uint64 incl = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const uint64 y = __shfl_up_sync(FULL, incl, o);
    if (lane >= o) incl += y;
  }
  if (lane == 31) sums[warp] = incl;
  __syncthreads();
  uint64 before = 0;
#pragma unroll
  for (int w = 0; w < WARPS; ++w)
    if (w < warp) before += sums[w];
  __syncthreads();
  return before + incl - v;
}

// Whether tile t (t > 0) of a row publishes its inclusive prefix after its look-back. Always on
// the device; a host build of this file for tests may withhold most of them, so that look-backs
// walk over several windows of aggregates.
#ifndef IGNIS_SORT_PUBLISH_PREFIX
#define IGNIS_SORT_PUBLISH_PREFIX(t) true
#endif

// Thread d's look-back: the keys of digit d in the tiles of the row before tile t (t > 0), from
// the look-back words of the row's tiles (`words` points at tile 0's word of digit d; a tile's
// words are RADIX apart). Each step loads LOOKBACK_WINDOW words (the nearest first) and folds
// them in order up to the first inclusive prefix; a word not yet published is waited for (its
// tile started before this one: it publishes before it waits for anything). Tile 0 always holds
// a prefix, so the walk ends there at the latest.
SORT_DEV uint32 look_back_digit(const uint64* words, int64 t, int pass) {
  uint32 before = 0;
  for (int64 j = t - 1;; j -= LOOKBACK_WINDOW) {
    uint64 w[LOOKBACK_WINDOW];
#pragma unroll
    for (int k = 0; k < LOOKBACK_WINDOW; ++k)
      w[k] = j - k >= 0 ? load_word(words + (j - k) * RADIX) : 0ull;
#pragma unroll
    for (int k = 0; k < LOOKBACK_WINDOW; ++k) {
      uint64 x = w[k];
      while ((x >> 62) == 0 || (int)((x >> 48) & 0x3fff) != pass) {
        __nanosleep(64);
        x = load_word(words + (j - k) * RADIX);
      }
      before += (uint32)(x & DIGIT_COUNT_MASK);
      if ((x & DIGIT_PREFIX) != 0) return before;
    }
  }
}

// How radix_onesweep finds the lanes of a warp whose key has this lane's digit: RANK_BALLOTS,
// eight ballots a key (match_digit8); RANK_ATOMIC_OR, each lane sets its bit in a shared word of
// its digit (atomicOr) and reads the word back: two shared accesses and two warp barriers a key
// instead of about 32 integer instructions. Two sets of words alternate from key to key, so that
// the leader's clearing of one set and the next key's bits never meet.
enum : int { RANK_BALLOTS = 0, RANK_ATOMIC_OR = 1 };

// One pass of the Onesweep sort; the parameters and the roles as radix_onesweep_v1's (same
// launch). The tile's keys are warp-striped: warp w holds elements [w * 32 * IT, ...), element
// r * 32 + lane of it in key[r]; elements past the row's end are padding with key ONES (digit
// 255 in every pass), ranked after every element of the tile (they come last in element order),
// so they take its last slots and the scatter leaves them there.
template <class T, int IT = ONESWEEP_ITEMS, int BLOCKS = 0,  // (BLOCKS 0: OnesweepBlocks's)
          int RANK = RANK_BALLOTS>
__global__ void __launch_bounds__(THREADS, (BLOCKS ? BLOCKS : OnesweepBlocks<sizeof(T), IT>::value))
    radix_onesweep(const T* x, void* keys0, void* keys1, uint32* idx0, uint32* idx1, T* values,
                   int64* indices, const uint32* hist, const uint32* plan, uint64* status,
                   uint32* counter, int64 n, int64 tiles_per_seg, int pass, bool carry, bool desc,
                   bool exact) {
  typedef Key<T> KT;
  typedef typename KT::K K;
  typedef typename slot_of<K>::type S;
  constexpr int PASSES = (int)sizeof(K);
  constexpr int OS_TILE = THREADS * IT;
  static_assert(IT % 4 == 0, "digits packed four to a register");
  __shared__ uint32 warp_count[WARPS][RADIX];  // keys of (warp, digit), then their first slots
  __shared__ int32 global_base[RADIX];         // destination of slot j: global_base[d] + j
  __shared__ uint64 sums[WARPS];
  __shared__ S exchange[OS_TILE];
  __shared__ uint32 tile_id;
  static_assert(RANK == RANK_BALLOTS || RANK == RANK_ATOMIC_OR, "radix_onesweep: RANK");
  // The atomicOr words live in the exchange, which is not used before the ranking ends.
  constexpr int MATCH_SETS = 2;
  static_assert(RANK != RANK_ATOMIC_OR || sizeof(exchange) >= MATCH_SETS * WARPS * RADIX * 4,
                "radix_onesweep: RANK_ATOMIC_OR needs a tile of at least 16 KiB");
  typedef uint32 MatchWords[WARPS][RADIX];
  MatchWords* match = reinterpret_cast<MatchWords*>(exchange);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  if (tid == 0) tile_id = atomicAdd(counter, 1u);
#pragma unroll
  for (int w = 0; w < WARPS; ++w) warp_count[w][tid] = 0;
  if constexpr (RANK == RANK_ATOMIC_OR) {
#pragma unroll
    for (int q = 0; q < MATCH_SETS; ++q)
#pragma unroll
      for (int w = 0; w < WARPS; ++w) match[q][w][tid] = 0;
  }
  __syncthreads();
  const int64 tile = (int64)tile_id;
  const int64 seg = tile / tiles_per_seg;
  const uint32 row_count = hist[(seg * PASSES + pass) * RADIX + tid];  // (loads together)
  const PassRole role = pass_role(plan[seg], pass);
  if (!role.runs) return;  // (the whole block: the row's digit of this pass is constant)
  const bool first = role.first, last = role.last;
  const void* keys_in = first ? (const void*)x : role.read ? keys1 : keys0;
  const uint32* idx_in = role.read ? idx1 : idx0;
  void* keys_out = last ? (void*)values : role.write ? keys1 : keys0;
  void* idx_out = last ? (void*)indices : role.write ? (void*)idx1 : (void*)idx0;
  const int64 t = tile - seg * tiles_per_seg;
  const int64 start = t * OS_TILE;
  const int len = (int)(n - start < OS_TILE ? n - start : OS_TILE);
  const int64 base = seg * n + start;
  const int shift = 8 * pass;
  const int wbase = warp * 32 * IT;

  K key[IT];
  {
    const K* ksrc = reinterpret_cast<const K*>(keys_in) + base + wbase + lane;
    if (len == OS_TILE) {
#pragma unroll
      for (int r = 0; r < IT; ++r) key[r] = ksrc[r * 32];
    } else {
#pragma unroll
      for (int r = 0; r < IT; ++r) key[r] = wbase + r * 32 + lane < len ? ksrc[r * 32] : (K)0;
    }
    if (first) {
#pragma unroll
      for (int r = 0; r < IT; ++r) key[r] = KT::of(key[r], desc, exact);
    }
    if (len < OS_TILE) {
#pragma unroll
      for (int r = 0; r < IT; ++r)
        if (wbase + r * 32 + lane >= len) key[r] = KT::ONES;
    }
  }

  // Rank: the place of each key among the warp's keys of its digit, in element order, and the
  // digit above it (d << 16 | place: one register a key; places are below OS_TILE <= 2**16).
  static_assert(OS_TILE <= 65536, "places fit 16 bits");
  uint32 slot[IT];
#pragma unroll
  for (int r = 0; r < IT; ++r) {
    const uint32 d = digit(key[r], shift);
    unsigned peers;
    if constexpr (RANK == RANK_ATOMIC_OR) {
      uint32* word = &match[r % MATCH_SETS][warp][d];
      atomicOr(word, 1u << lane);
      __syncwarp();
      peers = *word;
      __syncwarp();  // every lane has read its word before the leader clears it
    } else {
      peers = match_digit8(d);
    }
    const int leader = __ffs(peers) - 1;
    uint32 before = 0;
    if (lane == leader) {
      before = atomicAdd(&warp_count[warp][d], (uint32)__popc(peers));
      if constexpr (RANK == RANK_ATOMIC_OR) match[r % MATCH_SETS][warp][d] = 0;
    }
    slot[r] = (d << 16) |
              (__shfl_sync(FULL, before, leader) + (uint32)__popc(peers & lanemask_lt(lane)));
  }
  __syncthreads();
  uint32 first_slot;  // thread d: the tile's first slot of digit d
  {
    const int d = tid;
    uint32 run = 0;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) {
      const uint32 c = warp_count[w][d];
      warp_count[w][d] = run;
      run += c;
    }
    // the tile's keys of digit d (less the padding, all of digit 255)
    const uint32 count = d == RADIX - 1 ? run - (uint32)(OS_TILE - len) : run;
    store_word(&status[tile * RADIX + d],
               digit_word(t == 0 ? DIGIT_PREFIX : DIGIT_AGGREGATE, pass, count));
    // one scan for both: the row's digit bases (high word) and the tile's first slots (low)
    const uint64 both = block_exclusive_sum64(((uint64)row_count << 32) | run, sums);
    first_slot = (uint32)both;
    const uint32 row_digit_base = (uint32)(both >> 32);
#pragma unroll
    for (int w = 0; w < WARPS; ++w) warp_count[w][d] += first_slot;
    __syncthreads();
    // the keys into the exchange in digit order first: their registers are free for the rest
#pragma unroll
    for (int r = 0; r < IT; ++r) {
      slot[r] = (slot[r] & 0xffffu) + warp_count[warp][slot[r] >> 16];
      exchange[slot[r]] = (S)key[r];
    }
    uint32 before = 0;
    if (t > 0) {
      before = look_back_digit(status + (tile - t) * RADIX + d, t, pass);
      if (IGNIS_SORT_PUBLISH_PREFIX(t))
        store_word(&status[tile * RADIX + d], digit_word(DIGIT_PREFIX, pass, before + count));
    }
    global_base[d] = (int32)(seg * n) + (int32)(row_digit_base + before) - (int32)first_slot;
  }
  __syncthreads();
  S* xs = exchange;
  uint32 digits[IT / 4];  // the digit of each scattered slot, four a register
#pragma unroll
  for (int s = 0; s < IT; ++s) {
    const int j = s * THREADS + tid;
    const K k = (K)xs[j];
    const uint32 d = digit(k, shift);
    if (s % 4 == 0) digits[s / 4] = 0;
    digits[s / 4] |= d << (8 * (s % 4));
    if (j < len) {
      const int32 dest = global_base[d] + j;  // (the host keeps radix sorts below 2**31)
      if (!last) {
        reinterpret_cast<K*>(keys_out)[dest] = k;
      } else if (keys_out) {
        reinterpret_cast<K*>(keys_out)[dest] = KT::bits(k, desc);
      }
    }
  }
  if (!carry) return;
  // The positions: loaded only now, so that they take no registers before.
  uint32 idx[IT];
#pragma unroll
  for (int r = 0; r < IT; ++r) {
    const int j = wbase + r * 32 + lane;
    idx[r] = first ? (uint32)(start + j) : j < len ? idx_in[base + j] : 0u;
  }
  __syncthreads();  // every key is read from the exchange: it takes the positions now
#pragma unroll
  for (int r = 0; r < IT; ++r) xs[slot[r]] = (S)idx[r];
  __syncthreads();
#pragma unroll
  for (int s = 0; s < IT; ++s) {
    const int j = s * THREADS + tid;
    if (j >= len) break;  // (slots past len are padding)
    const uint32 d = (digits[s / 4] >> (8 * (s % 4))) & 0xffu;
    const int32 dest = global_base[d] + j;
    const uint32 v = (uint32)xs[j];
    if (!last) {
      reinterpret_cast<uint32*>(idx_out)[dest] = v;
    } else if (idx_out) {
      reinterpret_cast<int64*>(idx_out)[dest] = (int64)v;
    }
  }
}

// --- rows of one tile: every pass in shared memory ---------------------------------------------
// One block per row of n <= TILE elements: the keys are read once, sorted by all their digits
// with rank_tile (keys and positions exchanged through shared memory between passes) and
// written once. Padding (elements n..TILE-1) takes the largest key; being after every element,
// a stable sort keeps it after them. A pass whose digit is the same in every key of the row is
// skipped (it would keep the order: padding, all ones, stays after the elements either way).

template <class T>
__global__ void __launch_bounds__(THREADS)
    sort_rows_tile(const T* x, T* values, int64* indices, int64 n, bool desc, bool exact) {
  typedef Key<T> KT;
  typedef typename KT::K K;
  typedef typename slot_of<K>::type S;
  constexpr int PASSES = (int)sizeof(K);
  __shared__ uint32 warp_count[WARPS][RADIX];
  __shared__ uint32 local_base[RADIX];
  __shared__ uint32 sums[WARPS];
  __shared__ S exchange[TILE];
  __shared__ uint64 warp_or[WARPS], warp_and[WARPS];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64 row = blockIdx.x;
  const K* src = reinterpret_cast<const K*>(x) + row * n;
  const int wbase = warp * 32 * ITEMS;
  const bool carry = indices != nullptr;
  K key[ITEMS];
  bool valid[ITEMS];
  uint32 idx[ITEMS];
  uint64 any_set = 0, all_set = ~0ull;  // over the row's keys: the bits set in some / in all
#pragma unroll
  for (int r = 0; r < ITEMS; ++r) {
    const int j = wbase + r * 32 + lane;
    key[r] = j < n ? KT::of(src[j], desc, exact) : KT::ONES;
    valid[r] = true;
    idx[r] = (uint32)j;
    if (j < n) {
      any_set |= (uint64)key[r];
      all_set &= (uint64)key[r];
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    any_set |= __shfl_xor_sync(FULL, any_set, o);
    all_set &= __shfl_xor_sync(FULL, all_set, o);
  }
  if (lane == 0) {
    warp_or[warp] = any_set;
    warp_and[warp] = all_set;
  }
  __syncthreads();
  any_set = 0;
  all_set = ~0ull;
#pragma unroll
  for (int w = 0; w < WARPS; ++w) {
    any_set |= warp_or[w];
    all_set &= warp_and[w];
  }
  const uint64 varying = any_set & ~all_set;  // the bits that differ between two keys of the row
  for (int p = 0; p < PASSES; ++p) {
    if (((varying >> (8 * p)) & 0xffu) == 0) continue;  // (the same in every thread)
    for (int i = tid; i < WARPS * RADIX; i += THREADS) (&warp_count[0][0])[i] = 0;
    __syncthreads();
    uint32 slot[ITEMS];
    uint32 count;
    rank_tile<K>(key, valid, 8 * p, slot, warp_count, local_base, sums, &count, NoStep());
#pragma unroll
    for (int r = 0; r < ITEMS; ++r) exchange[slot[r]] = (S)key[r];
    __syncthreads();
#pragma unroll
    for (int r = 0; r < ITEMS; ++r) key[r] = (K)exchange[wbase + r * 32 + lane];
    if (carry) {
      __syncthreads();
#pragma unroll
      for (int r = 0; r < ITEMS; ++r) exchange[slot[r]] = (S)idx[r];
      __syncthreads();
#pragma unroll
      for (int r = 0; r < ITEMS; ++r) idx[r] = (uint32)exchange[wbase + r * 32 + lane];
    }
    __syncthreads();  // the exchange and the counters are free for the next pass
  }
#pragma unroll
  for (int r = 0; r < ITEMS; ++r) {
    const int j = wbase + r * 32 + lane;
    if (j < n) {
      if (values) reinterpret_cast<K*>(values)[row * n + j] = KT::bits(key[r], desc);
      if (indices) indices[row * n + j] = (int64)idx[r];
    }
  }
}

// --- short rows: bitonic network in shared memory ----------------------------------------------
// Block (P / 2, R): R rows of at most P elements, P / 2 threads each. Padding sorts last (the
// largest key and an index no element has).

template <class T, int P, int R>
__global__ void __launch_bounds__(P / 2 * R)
    sort_rows_small(const T* x, T* values, int64* indices, int64 rows, int64 n, bool desc,
                    bool exact) {
  typedef Key<T> KT;
  typedef typename KT::K K;
  __shared__ K sk[R * P];
  __shared__ uint32 si[R * P];
  const int tx = threadIdx.x;
  const int64 row = (int64)blockIdx.x * R + threadIdx.y;
  K* k = sk + threadIdx.y * P;
  uint32* ix = si + threadIdx.y * P;
  const K* src = reinterpret_cast<const K*>(x) + row * n;
  for (int j = tx; j < P; j += P / 2) {
    if (row < rows && j < n) {
      k[j] = KT::of(src[j], desc, exact);
      ix[j] = (uint32)j;
    } else {
      k[j] = KT::ONES;
      ix[j] = 0xffffffffu;
    }
  }
  __syncthreads();
  for (int size = 2; size <= P; size <<= 1) {
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      const int a = ((tx & ~(stride - 1)) << 1) | (tx & (stride - 1));
      const int b = a + stride;
      const K ka = k[a], kb = k[b];
      const uint32 ia = ix[a], ib = ix[b];
      const bool greater = ka > kb || (ka == kb && ia > ib);
      if (greater == ((a & size) == 0)) {
        k[a] = kb;
        k[b] = ka;
        ix[a] = ib;
        ix[b] = ia;
      }
      __syncthreads();
    }
  }
  if (row >= rows) return;
  for (int j = tx; j < n; j += P / 2) {
    if (values) reinterpret_cast<K*>(values)[row * n + j] = KT::bits(k[j], desc);
    if (indices) indices[row * n + j] = (int64)ix[j];
  }
}

// --- scans -------------------------------------------------------------------------------------

// The type a scan of T runs in: float for the 16-bit floats, unsigned integers for the integers
// (wrap-around arithmetic, no signed overflow), 32 bits at least.
template <class T> struct scan_acc { typedef T type; };
template <> struct scan_acc<float16> { typedef float type; };
template <> struct scan_acc<bfloat16> { typedef float type; };
template <> struct scan_acc<int8> { typedef uint32 type; };
template <> struct scan_acc<uint8> { typedef uint32 type; };
template <> struct scan_acc<int16> { typedef uint32 type; };
template <> struct scan_acc<uint16> { typedef uint32 type; };
template <> struct scan_acc<int32> { typedef uint32 type; };
template <> struct scan_acc<uint32> { typedef uint32 type; };
template <> struct scan_acc<int64> { typedef uint64 type; };
template <> struct scan_acc<uint64> { typedef uint64 type; };

template <class A, class T> SORT_DEV A load_acc(T v) { return (A)v; }
template <> SORT_DEV float load_acc<float, float16>(float16 v) { return (float)v; }
template <> SORT_DEV float load_acc<float, bfloat16>(bfloat16 v) { return (float)v; }
template <class T, class A> SORT_DEV T store_acc(A v) { return (T)v; }
template <> SORT_DEV float16 store_acc<float16, float>(float v) { return float16(v); }
template <> SORT_DEV bfloat16 store_acc<bfloat16, float>(float v) { return bfloat16(v); }

template <class A> SORT_DEV A neg_zero() { return (A)0; }
template <> SORT_DEV float neg_zero<float>() { return -0.0f; }
template <> SORT_DEV double neg_zero<double>() { return -0.0; }
template <> SORT_DEV complex64 neg_zero<complex64>() { return complex64(-0.0f, -0.0f); }
template <> SORT_DEV complex128 neg_zero<complex128>() { return complex128(-0.0, -0.0); }

// Warp shuffles of scan values: complex numbers move part by part (the intrinsics take
// numbers only).
template <class A> SORT_DEV A shfl_up(A v, int o) { return __shfl_up_sync(FULL, v, o); }
template <class A> SORT_DEV A shfl_idx(A v, int src) { return __shfl_sync(FULL, v, src); }
template <class R> SORT_DEV complex<R> shfl_up(complex<R> v, int o) {
  return complex<R>(__shfl_up_sync(FULL, v.re, o), __shfl_up_sync(FULL, v.im, o));
}
template <class R> SORT_DEV complex<R> shfl_idx(complex<R> v, int src) {
  return complex<R>(__shfl_sync(FULL, v.re, src), __shfl_sync(FULL, v.im, src));
}

// identity: x op identity == x bit for bit (-0.0 for float sums, so that a leading -0.0 stays);
// initial: the value include_initial puts first (+0, 1).
struct SumOp {
  template <class A> static SORT_DEV A apply(A a, A b) { return (A)(a + b); }
  template <class A> static SORT_DEV A identity() { return neg_zero<A>(); }
  template <class A> static SORT_DEV A initial() { return (A)0; }
};
struct ProdOp {
  template <class A> static SORT_DEV A apply(A a, A b) { return (A)(a * b); }
  template <class A> static SORT_DEV A identity() { return (A)1; }
  template <class A> static SORT_DEV A initial() { return (A)1; }
};

// Tile of a row scan: 8-byte accumulators take half the items (the exchange fits shared memory).
template <class A> struct ScanTile {
  static constexpr int items = sizeof(A) > 4 ? ITEMS / 2 : ITEMS;
  static constexpr int size = THREADS * items;
};

// Shared-memory slot of tile element j: one pad word per 32 keeps the blocked reads (thread i,
// items i * IT .. i * IT + IT - 1) free of bank conflicts.
SORT_DEV int padded(int j) { return j + (j >> 5); }

// Tile status of the look-back: 0 nothing yet, 1 aggregate published, 2 inclusive prefix.
enum : int32 { STATUS_AGGREGATE = 1, STATUS_PREFIX = 2 };

// A look-back word: a tile's value and its flag together, so one load reads both and no fence
// orders them (8 bytes for 4-byte accumulators, 16 for 8-byte ones: one vector access).
template <class A, int BYTES = (int)sizeof(A)> struct ScanWord;
SORT_DEV uint32 acc_bits(uint32 v) { return v; }
SORT_DEV uint32 acc_bits(float v) { return detail::bits_of(v); }
SORT_DEV uint64 acc_bits(uint64 v) { return v; }
SORT_DEV uint64 acc_bits(double v) { return detail::bits_of(v); }
template <class A> SORT_DEV A acc_of(uint64 b) { return (A)b; }
template <> SORT_DEV float acc_of<float>(uint64 b) { return detail::float_of((uint32)b); }
template <> SORT_DEV double acc_of<double>(uint64 b) {
  const uint64 u = b;
  double d;
#if defined(__CUDA_ARCH__)
  d = __longlong_as_double((long long)u);
#else
  __builtin_memcpy(&d, &u, sizeof d);
#endif
  return d;
}
template <class A> struct ScanWord<A, 4> {
  typedef uint64 W;
  static SORT_DEV void put(W* p, int32 flag, A v) {
    *(volatile W*)p = ((uint64)(uint32)flag << 32) | (uint64)acc_bits(v);
  }
  static SORT_DEV int32 get(const W* p, A* v) {
    const W w = *(const volatile W*)p;
    *v = acc_of<A>((uint32)w);
    return (int32)(w >> 32);
  }
};
template <class A> struct ScanWord<A, 8> {
  struct alignas(16) W {
    uint64 value, flag;
  };
  static SORT_DEV void put(W* p, int32 flag, A v) {
    const uint64 b = acc_bits(v), f = (uint64)(uint32)flag;
#if defined(__CUDA_ARCH__)
    asm volatile("st.volatile.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(b), "l"(f) : "memory");
#else
    volatile W* q = p;
    q->value = b;
    q->flag = f;
#endif
  }
  static SORT_DEV int32 get(const W* p, A* v) {
    uint64 b, f;
#if defined(__CUDA_ARCH__)
    asm volatile("ld.volatile.v2.u64 {%0, %1}, [%2];"
                 : "=l"(b), "=l"(f)
                 : "l"(p)
                 : "memory");
#else
    const volatile W* q = p;
    b = q->value;
    f = q->flag;
#endif
    *v = acc_of<A>(b);
    return (int32)f;
  }
};

// The look-back words of a row's tiles: aggregates and inclusive prefixes in two arrays (a
// tile's aggregate stays readable after its prefix is published).
template <class A> struct ScanStatus {
  typedef ScanWord<A> Word;
  typedef typename Word::W W;
  W* aggs;
  W* incls;
  // Tile j's status and the value it announces (both words are loaded together).
  SORT_DEV int32 read(int64 j, A* v) const {
    A vi, va;
    const int32 fi = Word::get(incls + j, &vi);
    const int32 fa = Word::get(aggs + j, &va);
    *v = fi ? vi : va;
    return fi ? STATUS_PREFIX : fa ? STATUS_AGGREGATE : 0;
  }
  // Tile j's aggregate, once visible (a tile seen with its prefix published its aggregate
  // before, but that store may become visible after the prefix's).
  SORT_DEV A aggregate(int64 j) const {
    A v;
    while (!Word::get(aggs + j, &v)) __nanosleep(32);
    return v;
  }
};

// How the look-back sees a prefix of tile j of the row starting at tile row0: a host build of
// this file for tests may define IGNIS_SORT_STATUS to hide some prefixes (they then read as
// aggregates), so that look-backs walk further.
#ifndef IGNIS_SORT_STATUS
#define IGNIS_SORT_STATUS(status, row0, j) ((status)[(row0) + (j)])
#endif
struct PrefixSeen {
  SORT_DEV int32 operator[](int64) const { return STATUS_PREFIX; }
};

// Warp 0 of the block of tile `tile` (tile t of its row, t > 0 looks back): publishes the tile's
// aggregate, finds the nearest predecessor with its inclusive prefix, 32 tiles a step, and folds
// the aggregates after it in tile order; publishes the tile's own inclusive prefix and returns
// its exclusive prefix (identity for t == 0). Every lane returns the same value. Each tile's
// prefix is thus the left-to-right fold of the tile totals before it, whichever predecessor
// was found: float results do not depend on timing. fold: 32 A of shared memory.
template <class A, class Op>
SORT_DEV A look_back(int64 tile, int64 t, A aggregate, ScanStatus<A> st, volatile A* fold) {
  typedef ScanWord<A> Word;
  const int lane = threadIdx.x & 31;
  if (lane == 0) {
    if (t == 0) {
      Word::put(st.incls + tile, STATUS_PREFIX, aggregate);
    } else {
      Word::put(st.aggs + tile, STATUS_AGGREGATE, aggregate);
    }
  }
  if (t == 0) return Op::template identity<A>();
  const int64 row0 = tile - t;  // the row's tile 0
  const ScanStatus<A> row = {st.aggs + row0, st.incls + row0};
  int64 nearest = t - 1;  // the window: tiles nearest - 31 .. nearest of the row
  unsigned prefixes;
  A v;
  for (;;) {
    const int64 j = nearest - lane;
    int32 s = 0;
    v = Op::template identity<A>();
    if (j >= 0) {
      s = row.read(j, &v);
      while (s == 0) {  // the tile has just started: its aggregate comes within a tile's load
        __nanosleep(32);
        s = row.read(j, &v);
      }
      const PrefixSeen seen;
      if (s == STATUS_PREFIX && IGNIS_SORT_STATUS(seen, 0, j) != STATUS_PREFIX) {
        s = STATUS_AGGREGATE;
        v = row.aggregate(j);
      }
    }
    prefixes = __ballot_sync(FULL, j >= 0 && s == STATUS_PREFIX);
    if (prefixes) break;
    nearest -= 32;  // tile 0 always has its prefix: the row's window never passes it
  }
  const int f = __ffs(prefixes) - 1;  // the lane of the nearest prefix
  A excl = Op::template identity<A>();
  if (nearest == t - 1) {  // the usual case: fold lanes f, f - 1, .., 0 (tiles in order)
    fold[lane] = v;
    __syncwarp();
    if (lane == 0) {
      excl = fold[f];
      for (int i = f - 1; i >= 0; --i) excl = Op::apply(excl, (A)fold[i]);
    }
  } else {  // a longer walk: from the prefix found, forward over the aggregates after it
    const int64 found = nearest - f;
    excl = __shfl_sync(FULL, v, f);
    for (int64 j0 = found + 1; j0 < t; j0 += 32) {
      const int64 j = j0 + lane;
      fold[lane] = j < t ? row.aggregate(j) : Op::template identity<A>();
      __syncwarp();
      if (lane == 0) {
        const int count = (int)(t - j0 < 32 ? t - j0 : 32);
        for (int i = 0; i < count; ++i) excl = Op::apply(excl, (A)fold[i]);
      }
      __syncwarp();
    }
  }
  excl = __shfl_sync(FULL, excl, 0);
  if (lane == 0) Word::put(st.incls + tile, STATUS_PREFIX, Op::apply(excl, aggregate));
  return excl;
}

// Inclusive scan of each row of in (rows, n) into out (rows, n + INIT), INIT: out[row, 0] is the
// op's initial value and the scan follows it. counter: zeroed before the launch; aggs, incls:
// one ScanWord<A>::W per tile each, zeroed too. One block per tile.
template <class T, class Op, bool INIT>
__global__ void __launch_bounds__(THREADS)
    scan_rows(const T* in, T* out, int64 n, int64 tiles_per_row, unsigned long long* counter,
              void* aggs, void* incls) {
  typedef typename scan_acc<T>::type A;
  constexpr int IT = ScanTile<A>::items;
  constexpr int SIZE = ScanTile<A>::size;
  __shared__ A items[SIZE + SIZE / 32];
  __shared__ A warp_totals[WARPS];
  __shared__ A prefix;
  __shared__ A fold[32];
  __shared__ int64 tile_id;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  if (tid == 0) tile_id = (int64)atomicAdd(counter, 1ull);
  __syncthreads();
  const int64 tile = tile_id;
  const int64 row = tile / tiles_per_row;
  const int64 t = tile - row * tiles_per_row;
  const int64 start = t * SIZE;
  const int len = (int)(n - start < SIZE ? n - start : SIZE);
  const T* src = in + row * n + start;

#pragma unroll
  for (int k = 0; k < IT; ++k) {
    const int j = k * THREADS + tid;
    items[padded(j)] = j < len ? load_acc<A>(src[j]) : Op::template identity<A>();
  }
  __syncthreads();
  A v[IT];
#pragma unroll
  for (int k = 0; k < IT; ++k) v[k] = items[padded(tid * IT + k)];
#pragma unroll
  for (int k = 1; k < IT; ++k) v[k] = Op::apply(v[k - 1], v[k]);
  A incl = v[IT - 1];
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const A y = __shfl_up_sync(FULL, incl, o);
    if (lane >= o) incl = Op::apply(y, incl);
  }
  const A lane_before = __shfl_up_sync(FULL, incl, 1);
  if (lane == 31) warp_totals[warp] = incl;
  __syncthreads();
  A before = Op::template identity<A>();
  for (int w = 0; w < warp; ++w) before = Op::apply(before, warp_totals[w]);
  if (lane > 0) before = Op::apply(before, lane_before);
  if (warp == 0) {
    A aggregate = warp_totals[0];
    for (int w = 1; w < WARPS; ++w) aggregate = Op::apply(aggregate, warp_totals[w]);
    typedef typename ScanWord<A>::W W;
    const ScanStatus<A> st = {reinterpret_cast<W*>(aggs), reinterpret_cast<W*>(incls)};
    const A excl = look_back<A, Op>(tile, t, aggregate, st, fold);
    if (lane == 0) prefix = excl;
  }
  __syncthreads();
  const A excl = prefix;
#pragma unroll
  for (int k = 0; k < IT; ++k) items[padded(tid * IT + k)] = Op::apply(excl, Op::apply(before, v[k]));
  __syncthreads();
  T* dst = out + row * (n + INIT) + start + INIT;
#pragma unroll
  for (int k = 0; k < IT; ++k) {
    const int j = k * THREADS + tid;
    if (j < len) dst[j] = store_acc<T>(items[padded(j)]);
  }
  if (INIT && t == 0 && tid == 0) out[row * (n + INIT)] = store_acc<T>(Op::template initial<A>());
}

// Sequential scans along n of x (outer, n, inner), one thread per (o, c); out (outer, n + INIT,
// inner) as scan_rows.
template <class T, class Op, bool INIT>
__global__ void __launch_bounds__(THREADS)
    scan_cols(const T* in, T* out, int64 outer, int64 n, int64 inner) {
  typedef typename scan_acc<T>::type A;
  const int64 cols = outer * inner;
  for (int64 col = (int64)blockIdx.x * blockDim.x + threadIdx.x; col < cols;
       col += (int64)gridDim.x * blockDim.x) {
    const int64 o = col / inner, c = col - o * inner;
    const T* p = in + o * n * inner + c;
    T* q = out + o * (n + INIT) * inner + c;
    if (INIT) {
      q[0] = store_acc<T>(Op::template initial<A>());
      q += inner;
    }
    A acc = Op::template identity<A>();
    for (int64 j = 0; j < n; ++j) {
      acc = Op::apply(acc, load_acc<A>(p[j * inner]));
      q[j * inner] = store_acc<T>(acc);
    }
  }
}

// --- three-pass scan of long rows -------------------------------------------------------------
// Reduce, then scan: scan_tile_totals reads every tile once and writes its total,
// scan_tile_prefixes turns each row's totals into exclusive tile prefixes (one block a row),
// scan_tile_apply reads every tile again and writes its scan from its prefix. Three bytes moved
// per element byte instead of two, but no tile waits for another: every block streams at once,
// each thread with 16-byte accesses, and nothing is zeroed first. A row of one tile takes
// scan_tile_apply alone. The prefixes are a fixed function of the tile totals (a fixed fold
// order), so float results are the same bits run after run.

// 16 bytes as one access (ld.global.v4 / st.global.v4).
struct alignas(16) Vec16 {
  uint32 w[4];
};

// Tile layout of the three-pass scan of T: IT elements a thread (ScanTile's), VEC of them a
// 16-byte access, R accesses a thread. Thread (warp w, lane l) holds in access r the VEC
// elements w * 32 * IT + (r * 32 + l) * VEC + e: each access is one coalesced 512-byte warp
// transaction.
template <class T> struct ScanLayout {
  typedef typename scan_acc<T>::type A;
  static constexpr int IT = ScanTile<A>::items;
  static constexpr int VEC = 16 / (int)sizeof(T) < IT ? 16 / (int)sizeof(T) : IT;
  static constexpr int R = IT / VEC;
  static constexpr int SIZE = THREADS * IT;
  static_assert(VEC * (int)sizeof(T) == 16 && R * VEC == IT, "16-byte accesses");
};

SORT_DEV bool aligned16(const void* p) {
  return (reinterpret_cast<unsigned long long>(p) & 15) == 0;
}

// Loads this thread's elements of the tile at src (len elements; missing ones read as the
// op's identity): 16-byte loads for a whole, aligned tile, element loads otherwise (same
// layout, so the result does not depend on which).
template <class T, class Op>
SORT_DEV void scan_load(const T* src, int len,
                        typename ScanLayout<T>::A (&v)[ScanLayout<T>::IT]) {
  typedef ScanLayout<T> L;
  typedef typename L::A A;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int base = warp * 32 * L::IT + lane * L::VEC;
  if (len == L::SIZE && aligned16(src)) {
#pragma unroll
    for (int r = 0; r < L::R; ++r) {
      alignas(16) T t[L::VEC];
#if defined(__CUDA_ARCH__)
      *reinterpret_cast<Vec16*>(t) = *reinterpret_cast<const Vec16*>(src + base + r * 32 * L::VEC);
#else
      __builtin_memcpy(t, src + base + r * 32 * L::VEC, 16);
#endif
#pragma unroll
      for (int e = 0; e < L::VEC; ++e) v[r * L::VEC + e] = load_acc<A>(t[e]);
    }
  } else {
#pragma unroll
    for (int r = 0; r < L::R; ++r)
#pragma unroll
      for (int e = 0; e < L::VEC; ++e) {
        const int j = base + r * 32 * L::VEC + e;
        v[r * L::VEC + e] = j < len ? load_acc<A>(src[j]) : Op::template identity<A>();
      }
  }
}

// Stores this thread's elements (as scan_load reads them) to the tile at dst.
template <class T>
SORT_DEV void scan_store(T* dst, int len,
                         const typename ScanLayout<T>::A (&v)[ScanLayout<T>::IT]) {
  typedef ScanLayout<T> L;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int base = warp * 32 * L::IT + lane * L::VEC;
  if (len == L::SIZE && aligned16(dst)) {
#pragma unroll
    for (int r = 0; r < L::R; ++r) {
      alignas(16) T t[L::VEC];
#pragma unroll
      for (int e = 0; e < L::VEC; ++e) t[e] = store_acc<T>(v[r * L::VEC + e]);
#if defined(__CUDA_ARCH__)
      *reinterpret_cast<Vec16*>(dst + base + r * 32 * L::VEC) = *reinterpret_cast<const Vec16*>(t);
#else
      __builtin_memcpy(dst + base + r * 32 * L::VEC, t, 16);
#endif
    }
  } else {
#pragma unroll
    for (int r = 0; r < L::R; ++r)
#pragma unroll
      for (int e = 0; e < L::VEC; ++e) {
        const int j = base + r * 32 * L::VEC + e;
        if (j < len) dst[j] = store_acc<T>(v[r * L::VEC + e]);
      }
  }
}

// The inclusive scan of a tile held as scan_load leaves it (every thread calls it): on return
// v holds it (without any prefix) and every thread gets the tile's total. Fixed fold order:
// each 16-byte group left to right, the groups of one access across the warp (shuffles), the
// accesses in order, the warps in order. warp_totals: WARPS A of shared memory.
template <class T, class Op>
SORT_DEV typename ScanLayout<T>::A scan_tile_local(
    typename ScanLayout<T>::A (&v)[ScanLayout<T>::IT], typename ScanLayout<T>::A* warp_totals) {
  typedef ScanLayout<T> L;
  typedef typename L::A A;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  A carry = Op::template identity<A>();  // the warp's elements of the accesses before
#pragma unroll
  for (int r = 0; r < L::R; ++r) {
    A* g = v + r * L::VEC;
#pragma unroll
    for (int e = 1; e < L::VEC; ++e) g[e] = Op::apply(g[e - 1], g[e]);
    A incl = g[L::VEC - 1];
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const A y = shfl_up(incl, o);
      if (lane >= o) incl = Op::apply(y, incl);
    }
    A before = shfl_up(incl, 1);
    before = lane == 0 ? carry : Op::apply(carry, before);
#pragma unroll
    for (int e = 0; e < L::VEC; ++e) g[e] = Op::apply(before, g[e]);
    carry = Op::apply(carry, shfl_idx(incl, 31));
  }
  if (lane == 0) warp_totals[warp] = carry;
  __syncthreads();
  A before = Op::template identity<A>(), total = Op::template identity<A>();
#pragma unroll
  for (int w = 0; w < WARPS; ++w) {
    const A s = warp_totals[w];
    if (w < warp) before = Op::apply(before, s);
    total = Op::apply(total, s);
  }
  if (warp > 0) {
#pragma unroll
    for (int k = 0; k < L::IT; ++k) v[k] = Op::apply(before, v[k]);
  }
  return total;
}

// totals[row * tiles_per_row + t] = the total of tile t of row `row` of in (rows, n): one block
// a tile.
template <class T, class Op>
__global__ void __launch_bounds__(THREADS)
    scan_tile_totals(const T* in, int64 n, int64 tiles_per_row,
                     typename scan_acc<T>::type* totals) {
  typedef ScanLayout<T> L;
  typedef typename L::A A;
  __shared__ A warp_totals[WARPS];
  const int64 tile = (int64)blockIdx.x;
  const int64 row = tile / tiles_per_row;
  const int64 start = (tile - row * tiles_per_row) * L::SIZE;
  const int len = (int)(n - start < L::SIZE ? n - start : L::SIZE);
  A v[L::IT];
  scan_load<T, Op>(in + row * n + start, len, v);
  const A total = scan_tile_local<T, Op>(v, warp_totals);
  if (threadIdx.x == 0) totals[tile] = total;
}

// Each row of totals (per_row values a row, one block a row) replaced by its exclusive scan,
// in a fixed fold order (runs of PER values a thread, then threads, then chunks in order);
// grand[row] = the row's total when grand is given.
template <class T, class Op>
__global__ void __launch_bounds__(THREADS)
    scan_tile_prefixes(typename scan_acc<T>::type* totals, int64 per_row,
                       typename scan_acc<T>::type* grand) {
  typedef typename scan_acc<T>::type A;
  enum : int { PER = 8, CHUNK = THREADS * PER };
  __shared__ A warp_totals[WARPS];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  A* p = totals + (int64)blockIdx.x * per_row;
  A carry = Op::template identity<A>();
  for (int64 c0 = 0; c0 < per_row; c0 += CHUNK) {
    const int64 first = c0 + (int64)tid * PER;
    A v[PER];
#pragma unroll
    for (int k = 0; k < PER; ++k)
      v[k] = first + k < per_row ? p[first + k] : Op::template identity<A>();
#pragma unroll
    for (int k = 1; k < PER; ++k) v[k] = Op::apply(v[k - 1], v[k]);
    A incl = v[PER - 1];
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const A y = shfl_up(incl, o);
      if (lane >= o) incl = Op::apply(y, incl);
    }
    A lane_before = shfl_up(incl, 1);
    if (lane == 31) warp_totals[warp] = incl;
    __syncthreads();
    A before = carry, chunk = Op::template identity<A>();
#pragma unroll
    for (int w = 0; w < WARPS; ++w) {
      const A s = warp_totals[w];
      if (w < warp) before = Op::apply(before, s);
      chunk = Op::apply(chunk, s);
    }
    __syncthreads();  // warp_totals is rewritten by the next chunk
    if (lane > 0) before = Op::apply(before, lane_before);
#pragma unroll
    for (int k = 0; k < PER; ++k)
      if (first + k < per_row) p[first + k] = k == 0 ? before : Op::apply(before, v[k - 1]);
    carry = Op::apply(carry, chunk);
  }
  if (grand && tid == 0) grand[blockIdx.x] = carry;
}

// out (rows, n + INIT) = the inclusive scan of each row of in (rows, n), INIT as scan_rows's;
// prefixes: the exclusive tile prefixes from scan_tile_prefixes (null: rows of one tile). One
// block a tile, the last tiles first (their input is what the totals pass read last: still in
// L2).
template <class T, class Op, bool INIT>
__global__ void __launch_bounds__(THREADS)
    scan_tile_apply(const T* in, T* out, int64 n, int64 tiles_per_row, int64 tiles,
                    const typename scan_acc<T>::type* prefixes) {
  typedef ScanLayout<T> L;
  typedef typename L::A A;
  __shared__ A warp_totals[WARPS];
  const int64 tile = tiles - 1 - (int64)blockIdx.x;
  const int64 row = tile / tiles_per_row;
  const int64 t = tile - row * tiles_per_row;
  const int64 start = t * L::SIZE;
  const int len = (int)(n - start < L::SIZE ? n - start : L::SIZE);
  const A pre = prefixes ? prefixes[tile] : Op::template identity<A>();
  A v[L::IT];
  scan_load<T, Op>(in + row * n + start, len, v);
  scan_tile_local<T, Op>(v, warp_totals);
  if (prefixes) {
#pragma unroll
    for (int k = 0; k < L::IT; ++k) v[k] = Op::apply(pre, v[k]);
  }
  scan_store<T>(out + row * (n + INIT) + start + INIT, len, v);
  if (INIT && t == 0 && threadIdx.x == 0)
    out[row * (n + INIT)] = store_acc<T>(Op::template initial<A>());
}

// --- stream compaction -------------------------------------------------------------------------
// MODE 0: element i of the sorted x starts a run of equal values (i == 0 or x[i] != x[i-1];
// NaN != NaN, -0.0 == +0.0); MODE 1: x[i] is nonzero.

template <class T> SORT_DEV float as_compared(T v) { return (float)v; }  // 16-bit floats
SORT_DEV float as_compared(float v) { return v; }
SORT_DEV double as_compared(double v) { return v; }
SORT_DEV bool as_compared(bool v) { return v; }
SORT_DEV int8 as_compared(int8 v) { return v; }
SORT_DEV uint8 as_compared(uint8 v) { return v; }
SORT_DEV int16 as_compared(int16 v) { return v; }
SORT_DEV uint16 as_compared(uint16 v) { return v; }
SORT_DEV int32 as_compared(int32 v) { return v; }
SORT_DEV uint32 as_compared(uint32 v) { return v; }
SORT_DEV int64 as_compared(int64 v) { return v; }
SORT_DEV uint64 as_compared(uint64 v) { return v; }
template <class R> SORT_DEV complex<R> as_compared(complex<R> v) { return v; }  // part by part

template <class T, int MODE> SORT_DEV int flag_at(const T* x, int64 i) {
  if constexpr (MODE == 0) {
    return (i == 0 || !(as_compared(x[i]) == as_compared(x[i - 1]))) ? 1 : 0;
  } else if constexpr (is_complex<T>::value) {
    return (x[i].re != 0 || x[i].im != 0) ? 1 : 0;  // (a NaN part is nonzero)
  } else {
    typedef typename Key<T>::K K;
    return Key<T>::nonzero(reinterpret_cast<const K*>(x)[i]) ? 1 : 0;
  }
}

// counts[tile] = flagged elements of the tile (one block per tile).
template <class T, int MODE>
__global__ void __launch_bounds__(THREADS) count_flags(const T* x, int64 n, int64* counts) {
  __shared__ uint32 sums[WARPS];
  const int64 start = (int64)blockIdx.x * TILE;
  uint32 c = 0;
#pragma unroll 4
  for (int k = 0; k < ITEMS; ++k) {
    const int64 i = start + k * THREADS + threadIdx.x;
    if (i < n) c += (uint32)flag_at<T, MODE>(x, i);
  }
  uint32 total;
  block_exclusive_sum(c, sums, &total);
  if (threadIdx.x == 0) counts[blockIdx.x] = (int64)total;
}

// Flagged element i goes to slot p (offsets[tile] + flagged elements before it in the tile):
// values[p] = x[i] and positions[p] = i (each may be null). MODE 0 also writes, when positions
// is given, positions[k] = n after the last run (k runs), and, when inverse is given, the run
// of every element: inverse[perm[i]] = (its run). One block a tile; warp w takes the tile's
// elements [32 ITEMS w, 32 ITEMS (w + 1)), 32 consecutive ones a step (every load and store of
// a step covers one stretch of memory), and places them by ballots: the flagged lanes before
// this one in the step, the steps before in the warp, the warps before in the tile. (A one-pass
// form, each tile finding its offset by a decoupled look-back, took longer on an H200 than this
// kernel and count_flags together: 4096 tiles wait on each other's prefixes.)
template <class T, int MODE>
__global__ void __launch_bounds__(THREADS)
    compact_flags(const T* x, const int64* perm, int64 n, const int64* offsets, T* values,
                  int64* positions, int64* inverse) {
  __shared__ uint32 sums[WARPS];
  const int lane = (int)threadIdx.x & 31, warp = (int)threadIdx.x >> 5;
  const int64 tile = (int64)blockIdx.x;
  const int64 first = tile * TILE + (int64)warp * (32 * ITEMS) + lane;
  // The flags first, then their ballots: the loads of all steps are in flight together (a
  // ballot between them would wait for each step's loads in turn). A whole tile needs no
  // bounds checks.
  int f[ITEMS];
  if ((tile + 1) * TILE <= n) {
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) f[k] = flag_at<T, MODE>(x, first + 32 * k);
  } else {
#pragma unroll
    for (int k = 0; k < ITEMS; ++k)
      f[k] = first + 32 * k < n ? flag_at<T, MODE>(x, first + 32 * k) : 0;
  }
  unsigned flags[ITEMS];
  uint32 warp_total = 0;
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) {
    flags[k] = __ballot_sync(FULL, f[k] != 0);
    warp_total += (uint32)__popc(flags[k]);
  }
  if (lane == 0) sums[warp] = warp_total;
  __syncthreads();
  int64 before = offsets[tile];  // flagged elements before this warp's step
#pragma unroll
  for (int w = 0; w < WARPS; ++w)
    if (w < warp) before += sums[w];
  const unsigned lower = lanemask_lt(lane);
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) {
    const int64 i = first + 32 * k;
    if (i >= n) break;
    const int64 slot = before + __popc(flags[k] & lower);  // this element's, when flagged
    if ((flags[k] >> lane) & 1u) {
      if (values) values[slot] = x[i];
      if (positions) positions[slot] = i;
    }
    if constexpr (MODE == 0) {
      const int64 run = slot + (int64)((flags[k] >> lane) & 1u) - 1;  // (i's run)
      if (inverse) inverse[perm[i]] = run;
      if (positions && i == n - 1) positions[run + 1] = n;
    }
    before += __popc(flags[k]);
  }
}

// --- complex order -----------------------------------------------------------------------------
// NumPy orders complex numbers (npysort's CFLOAT_LT) in four classes: neither part NaN, by
// (re, im) lexicographically; then a NaN imaginary part only, by re; then a NaN real part only,
// by im; then both NaN, all equal. ComplexKey<R> maps a complex number to a pair (hi, lo) of
// unsigned keys of R's width whose lexicographic order is that order, equal pairs for equal
// numbers (-0.0 as +0.0): the parts' canonical keys (Key<R>, NaN all ones). Keys of non-NaN
// floats are at most key(+inf), so the range above it (2^23 keys for float, 2^52 for double) is
// free: a class-1 or class-2 number puts its part's key there split in halves, the upper half
// in hi above key(+inf) + 1 (class 2 a further 2^(width/2) above) and the lower half at the top
// of lo; class 3 is all ones.

template <class R> struct ComplexKey {
  typedef Key<R> KR;
  typedef typename KR::K K;
  static constexpr int HALF = (int)sizeof(K) * 4;
  static constexpr K TOP = (K)((K)(KR::INF | KR::SIGN) + 1);  // the first key above +inf's
  static SORT_DEV K part_bits(R v) { return (K)detail::bits_of(v); }
  static SORT_DEV void of(complex<R> z, K* hi, K* lo) {
    const K re = part_bits(z.re), im = part_bits(z.im);
    const bool nan_re = (K)(re & KR::MAG) > KR::INF, nan_im = (K)(im & KR::MAG) > KR::INF;
    const K kr = KR::up(re, false), ki = KR::up(im, false);
    if (!nan_re && !nan_im) {
      *hi = kr;
      *lo = ki;
    } else if (!nan_re) {
      *hi = (K)(TOP + (kr >> HALF));
      *lo = (K)(kr << HALF);
    } else if (!nan_im) {
      *hi = (K)(TOP + ((K)1 << HALF) + (ki >> HALF));
      *lo = (K)(ki << HALF);
    } else {
      *hi = KR::ONES;
      *lo = KR::ONES;
    }
  }
};

// The keys radix sorts of complex numbers sort by: complex64, one uint64 (hi << 32 | lo) in hi;
// complex128, the uint64 halves in hi and lo (sorted by lo first, then stably by hi).
template <class C>
__global__ void __launch_bounds__(THREADS)
    complex_keys(const C* x, uint64* hi, uint64* lo, int64 total) {
  typedef ComplexKey<typename C::value_type> CK;
  for (int64 i = (int64)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (int64)gridDim.x * blockDim.x) {
    typename CK::K h, l;
    CK::of(x[i], &h, &l);
    if constexpr (sizeof(C) == 8) {
      hi[i] = ((uint64)h << 32) | (uint64)l;
    } else {
      hi[i] = (uint64)h;
      lo[i] = (uint64)l;
    }
  }
}

// out[i] = x[row * n + idx[i]] for the row of i = row * n + j: a gather along rows of n.
template <class T>
__global__ void __launch_bounds__(THREADS)
    gather_rows(const T* x, const int64* idx, T* out, int64 total, int64 n) {
  for (int64 i = (int64)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (int64)gridDim.x * blockDim.x)
    out[i] = x[(i / n) * n + idx[i]];
}

// --- searching ---------------------------------------------------------------------------------

// The comparable key of a search operand: the canonical key, or a complex number's key pair.
template <class T, bool C = is_complex<T>::value> struct SearchKey {
  typedef typename Key<T>::K K;
  K k;
  static SORT_DEV SearchKey of(T v) {
    SearchKey s;
    s.k = Key<T>::up(*reinterpret_cast<const K*>(&v), false);
    return s;
  }
  SORT_DEV bool less(const SearchKey& o) const { return k < o.k; }
};
template <class T> struct SearchKey<T, true> {
  typedef ComplexKey<typename T::value_type> CK;
  typename CK::K hi, lo;
  static SORT_DEV SearchKey of(T v) {
    SearchKey s;
    CK::of(v, &s.hi, &s.lo);
    return s;
  }
  SORT_DEV bool less(const SearchKey& o) const { return hi < o.hi || (hi == o.hi && lo < o.lo); }
};

// out[i] = the first index of sorted (m elements, ascending in canonical key order; complex:
// NumPy's order) whose key is >= (right: >) the key of values[i].
template <class T>
__global__ void __launch_bounds__(THREADS)
    searchsorted(const T* sorted, int64 m, const T* values, int64 n, int64* out, bool right) {
  typedef SearchKey<T> SK;
  for (int64 i = (int64)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64)gridDim.x * blockDim.x) {
    const SK key = SK::of(values[i]);
    int64 lo = 0, hi = m;
    while (lo < hi) {
      const int64 mid = (lo + hi) >> 1;
      const SK k = SK::of(sorted[mid]);
      if (right ? !key.less(k) : k.less(key)) {  // k <= key : k < key
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    out[i] = lo;
  }
}

// out[i] = (flat[i] / stride) % size: the coordinate along one dimension of size `size` whose
// elements are `stride` elements apart.
template <class I>
__global__ void __launch_bounds__(THREADS)
    unravel(const I* flat, I* out, int64 k, int64 stride, int64 size) {
  for (int64 i = (int64)blockIdx.x * blockDim.x + threadIdx.x; i < k;
       i += (int64)gridDim.x * blockDim.x)
    out[i] = (I)(((int64)flat[i] / stride) % size);
}

}  // namespace sort
}  // namespace ignis
