"""indexing.cu's gather kernel (take_rows) built as host C++ on the emulator of tc_emulator.py and
run on the CPU: every element size and vector width, 1 to 8 rows per thread, tiles the rows do
not fill, rows longer than a block (the column loop), several outer blocks (the division path),
grids of one or two blocks (blocks loop over tiles), tables off a 16-byte boundary (narrower
moves), out-of-range and negative indices of both index dtypes. The rows must equal NumPy's
gather bit for bit (the documented fill: a quiet NaN for floating types, 0 otherwise), and no
byte outside the output may be written. No GPU."""

from __future__ import annotations

import struct

import numpy as np
import pytest
import tc_emulator
from array_helpers import np_dtype, random_array
from ignis._array._cuda_backend import indexing as cuda_indexing

# The harness: take_rows<EMU_T, EMU_I, vec, u> with vec and u read from the input. Input:
# int64 outer, n, inner, m, vec, u, grid, bx, by, shift; then the table (outer x n x inner
# elements), then the m indices. The table sits `shift` elements past a 16-byte boundary, the
# output on one, with guard bytes on both sides. Blocks and the threads of a block run in
# shuffled orders (the kernel has no barriers or warp operations, so each thread runs to its
# end in one go).
PART = r"""
#ifndef __CUDACC__
struct uint2 { ignis::uint32 x, y; };
struct uint4 { ignis::uint32 x, y, z, w; };
template <class V> V __ldg(const V* p) { return *p; }
inline double atomicAdd(double* p, double v) { double o = *p; *p = o + v; return o; }
inline int atomicAdd(int* p, int v) { int o = *p; *p = o + v; return o; }
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
  unsigned long long o = *p;
  *p = o + v;
  return o;
}
template <class V> V __shfl_up_sync(unsigned, V, int) { emu::die("__shfl_up_sync: not emulated"); }
// What indexing.cu takes from elementwise.cuh (device-only there).
namespace ignis {
namespace ew {
template <class A, class B> struct same_type { static constexpr bool value = false; };
template <class A> struct same_type<A, A> { static constexpr bool value = true; };
template <class T>
constexpr bool is_integer_v = std::is_integral<T>::value && !std::is_same<T, bool>::value;
template <class T, bool = std::is_integral<T>::value> struct info { typedef T utype; };
template <class T> struct info<T, true> { typedef typename std::make_unsigned<T>::type utype; };
template <int BYTES> struct raw_bits;
template <> struct raw_bits<1> { typedef uint8 type; };
template <> struct raw_bits<2> { typedef uint16 type; };
template <> struct raw_bits<4> { typedef uint32 type; };
template <> struct raw_bits<8> { typedef uint2 type; };
template <> struct raw_bits<16> { typedef uint4 type; };
template <class T, int V> union Pack {
  typename raw_bits<sizeof(T) * V>::type raw;
  T v[V];
};
}  // namespace ew
}  // namespace ignis
#endif
#include "indexing.cu"

using ignis::int64;
constexpr int kGuard = 64;  // guard bytes around the output
constexpr unsigned char kFill = 0xA5;

template <int VEC, int U>
void run(const EMU_T* a, const EMU_I* idx, EMU_T* out, int64 rows, int64 m, int64 n,
         int64 inner, unsigned grid, unsigned bx, unsigned by, std::mt19937& rng) {
  emu::grid_dim = Dim3{grid, 1, 1};
  emu::block_dim = Dim3{bx, by, 1};
  emu::Thread t;
  emu::current = &t;
  std::vector<unsigned> blocks(grid);
  for (unsigned b = 0; b < grid; ++b) blocks[b] = b;
  std::shuffle(blocks.begin(), blocks.end(), rng);
  std::vector<Dim3> tids;
  for (unsigned y = 0; y < by; ++y)
    for (unsigned x = 0; x < bx; ++x) tids.push_back(Dim3{x, y, 0});
  for (unsigned b : blocks) {
    emu::block_idx = Dim3{b, 0, 0};
    std::shuffle(tids.begin(), tids.end(), rng);
    for (const Dim3& tid : tids) {
      t.tid = tid;
      ignis::idx::take_rows<EMU_T, EMU_I, VEC, U>(a, idx, out, rows, m, n, inner / VEC);
    }
  }
  emu::current = nullptr;
}

template <int VEC> void by_rows(int u, const EMU_T* a, const EMU_I* idx, EMU_T* out, int64 rows,
                                int64 m, int64 n, int64 inner, unsigned grid, unsigned bx,
                                unsigned by, std::mt19937& rng) {
  switch (u) {
    case 1: return run<VEC, 1>(a, idx, out, rows, m, n, inner, grid, bx, by, rng);
    case 2: return run<VEC, 2>(a, idx, out, rows, m, n, inner, grid, bx, by, rng);
    case 3: return run<VEC, 3>(a, idx, out, rows, m, n, inner, grid, bx, by, rng);
    case 4: return run<VEC, 4>(a, idx, out, rows, m, n, inner, grid, bx, by, rng);
    case 8: return run<VEC, 8>(a, idx, out, rows, m, n, inner, grid, bx, by, rng);
  }
  emu::die("rows per thread not instantiated");
}

template <int VEC> constexpr bool movable() {
  constexpr int bytes = (int)sizeof(EMU_T) * VEC;
  return bytes == 1 || bytes == 2 || bytes == 4 || bytes == 8 || bytes == 16;
}

int main(int argc, char** argv) {
  if (argc != 3) emu::die("usage: emu IN OUT");
  FILE* in = std::fopen(argv[1], "rb");
  int64 h[10];
  if (!in || std::fread(h, 8, 10, in) != 10) emu::die("bad input header");
  const int64 outer = h[0], n = h[1], inner = h[2], m = h[3], vec = h[4], u = h[5];
  const unsigned grid = (unsigned)h[6], bx = (unsigned)h[7], by = (unsigned)h[8];
  const int64 shift = h[9];
  const int64 rows = outer * m;
  if (bx * by > (unsigned)ignis::idx::take_threads) emu::die("block larger than take_threads");
  std::vector<unsigned char> ta((size_t)(outer * n * inner + shift + 1) * sizeof(EMU_T) + 32);
  unsigned char* pa = ta.data();
  while ((uintptr_t)pa % 16) ++pa;
  EMU_T* a = reinterpret_cast<EMU_T*>(pa) + shift;
  std::vector<EMU_I> idx((size_t)std::max<int64>(m, 1));
  const size_t elems = (size_t)(outer * n * inner);
  if (std::fread(a, sizeof(EMU_T), elems, in) != elems ||
      std::fread(idx.data(), sizeof(EMU_I), (size_t)m, in) != (size_t)m)
    emu::die("bad input data");
  std::fclose(in);
  const size_t out_bytes = (size_t)(rows * inner) * sizeof(EMU_T);
  std::vector<unsigned char> tout(out_bytes + 2 * kGuard + 32, kFill);
  unsigned char* po = tout.data() + kGuard;
  while ((uintptr_t)po % 16) ++po;
  EMU_T* out = reinterpret_cast<EMU_T*>(po);
  std::mt19937 rng(5);
  switch (vec) {
#define EMU_VEC_CASE(V)                                                                   \
  case V:                                                                                 \
    if constexpr (movable<V>()) {                                                         \
      by_rows<V>((int)u, a, idx.data(), out, rows, m, n, inner, grid, bx, by, rng);       \
      break;                                                                              \
    }                                                                                     \
    emu::die("vector width not movable for this element size");
    EMU_VEC_CASE(1)
    EMU_VEC_CASE(2)
    EMU_VEC_CASE(4)
    EMU_VEC_CASE(8)
    EMU_VEC_CASE(16)
    default: emu::die("bad vector width");
  }
  for (unsigned char* c = tout.data(); c < po; ++c)
    if (*c != kFill) emu::die("a byte before the output was written");
  for (unsigned char* c = po + out_bytes; c < tout.data() + tout.size(); ++c)
    if (*c != kFill) emu::die("a byte after the output was written");
  FILE* o = std::fopen(argv[2], "wb");
  std::fwrite(po, 1, out_bytes, o);
  std::fclose(o);
  return 0;
}
"""

INDEX_CTYPES = {"int32": "ignis::int32", "int64": "ignis::int64"}
# every element size, the fill kinds (NaN: floats; 0: integers, bool, complex)
DTYPES = [
    "bool",
    "int16",
    "int32",
    "int64",
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "complex128",
]


@pytest.fixture(scope="module")
def builder(tmp_path_factory):
    return tc_emulator.Builder(tmp_path_factory.mktemp("take_emu"), "take", PART)


def host_data(rng: np.random.Generator, shape: tuple, dtype: str) -> np.ndarray:
    if dtype == "complex128":
        re, im = rng.uniform(-4, 4, shape), rng.uniform(-4, 4, shape)
        return (re + 1j * im).astype(np.complex128)
    return random_array(rng, shape, dtype)


def reference(a: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """np.take along axis 1 of (outer, n, inner) with the documented out-of-range fill."""
    n = a.shape[1]
    k = np.where(idx < 0, idx + n, idx)
    valid = (k >= 0) & (k < n)
    out = np.take(a, np.where(valid, k, 0), axis=1)
    is_float = a.dtype.kind == "f" or a.dtype == np_dtype("bfloat16")
    out[:, ~valid] = np.nan if is_float else 0
    return out


def run_take(builder, tmp_path, dtype, index, a, idx, vec, u, grid, shift) -> np.ndarray:
    """take_rows<dtype, index, vec, u> on a grid of ``grid`` blocks of the host's block shape
    for rows of ``inner // vec`` moves; the table ``shift`` elements off a 16-byte boundary."""
    exe = builder.build(
        f"{dtype}_{index}", EMU_T=cuda_indexing.CTYPE[dtype], EMU_I=INDEX_CTYPES[index]
    )
    outer, n, inner = a.shape
    m = idx.size
    src, dst = tmp_path / "in.bin", tmp_path / "out.bin"
    bx, by = cuda_indexing._row_block(inner // vec)
    header = struct.pack("<10q", outer, n, inner, m, vec, u, grid, bx, by, shift)
    src.write_bytes(header + a.tobytes() + idx.astype(index).tobytes())
    tc_emulator.run(exe, [src, dst], what=f"take {dtype} {a.shape} m={m} vec={vec} u={u}")
    return np.frombuffer(dst.read_bytes(), a.dtype).reshape(outer, m, inner)


def cases(itemsize: int) -> list[tuple[tuple[int, int, int], int]]:
    """((outer, n, inner), m): one outer block (an embedding) and several, widths a multiple of
    the widest vector and odd ones, a row longer than a block of 256 threads of 16-byte moves,
    row counts that leave the last tile part full."""
    wide = 16 // itemsize
    return [
        ((1, 37, 3 * wide), 29),
        ((1, 50, 7), 13),
        ((3, 11, 2 * wide), 5),
        ((2, 9, 1), 31),
        ((1, 6, 260 * wide), 3),
    ]


def launches(rows: int, by: int) -> list[tuple[int, int]]:
    """(rows per thread, grid): each width of tile with the host's grid for it and grids of one
    and two blocks (the blocks loop over the tiles)."""
    out = []
    for u in (1, 2, 3, 4, 8):
        out += [(u, -(-rows // (by * u))), (u, 1), (u, 2)]
    return out


@pytest.mark.exhaustive
@pytest.mark.parametrize("dtype", DTYPES)
def test_emulated_take_rows_equal_numpy(builder, tmp_path, dtype: str) -> None:
    rng = np.random.default_rng(21)
    itemsize = np_dtype(dtype).itemsize
    for index in ("int64", "int32") if dtype in ("float32", "bool") else ("int64",):
        for shape, m in cases(itemsize):
            outer, n, inner = shape
            a = host_data(rng, shape, dtype)
            idx = rng.integers(-n - 3, n + 3, size=m)
            idx[:2] = [n - 1, -n]
            want = reference(a, idx)
            for shift in (0, 1):  # on a 16-byte boundary, and one element past it
                vec = cuda_indexing._widest_vector(itemsize, inner, (shift * itemsize, 0))
                bx, by = cuda_indexing._row_block(inner // vec)
                for u, grid in launches(outer * m, by):
                    got = run_take(builder, tmp_path, dtype, index, a, idx, vec, u, grid, shift)
                    assert got.tobytes() == want.tobytes(), (
                        f"{dtype} {shape} m={m} {index} shift={shift} vec={vec} u={u} grid={grid}"
                    )


@pytest.mark.exhaustive
def test_emulated_take_rows_catch_a_wrong_row(builder, tmp_path) -> None:
    # The harness's comparison can fail: an index shifted by one gathers other rows.
    rng = np.random.default_rng(22)
    a = host_data(rng, (1, 20, 8), "float32")
    idx = rng.integers(0, 19, size=9)
    got = run_take(builder, tmp_path, "float32", "int64", a, idx + 1, 4, 2, 1, 0)
    assert got.tobytes() == reference(a, idx + 1).tobytes()
    assert got.tobytes() != reference(a, idx).tobytes()
