"""dropout.cu's kernels built as host C++ on the emulator of tc_emulator.py and run on the CPU:
the vector path (warp tiles of 16-byte units, each lane's units 32 apart), the scalar path and
the tail after the last whole tile give the CPU backend's mask and values bit for bit, for every
dtype, sizes around the tile and Philox block boundaries, small grids (so that warps loop over
several tiles) and operands one element past a 16-byte boundary (the scalar path). No GPU."""

from __future__ import annotations

import struct

import numpy as np
import pytest
import tc_emulator
from array_helpers import np_dtype, nv
from ignis._array import _nn_dropout_rope as dropout_ops
from ignis._array._cuda_backend import indexing as cuda_indexing

import ignis

# The harness: dropout_forward and dropout_backward of EMU_T (work type EMU_W, vector path EMU_VEC)
# on the inputs of argv[1], outputs to argv[2]. Input: int64 n, grid; uint32 k0, k1; uint64
# offset; uint32 threshold; float64 scale; then n elements of x and n of grad. Output: y, the
# mask bytes, grad_x. Operands sit at offset EMU_SHIFT elements of 16-byte aligned buffers.
PART = r"""
#ifndef __CUDACC__
struct uint2 { ignis::uint32 x, y; };
struct uint4 { ignis::uint32 x, y, z, w; };
inline uint2 make_uint2(ignis::uint32 x, ignis::uint32 y) { return uint2{x, y}; }
inline uint4 make_uint4(ignis::uint32 x, ignis::uint32 y, ignis::uint32 z, ignis::uint32 w) {
  return uint4{x, y, z, w};
}
#endif
#include "dropout.cu"

template <class V> V* aligned(std::vector<unsigned char>& buf, size_t n) {
  buf.assign((n + EMU_SHIFT + 16) * sizeof(V) + 32, 0xAB);  // filler, not 0 or 1
  unsigned char* p = buf.data();
  while ((uintptr_t)p % 16) ++p;
  return reinterpret_cast<V*>(p) + EMU_SHIFT;
}

int main(int argc, char** argv) {
  if (argc != 3) emu::die("usage: emu IN OUT");
  FILE* in = std::fopen(argv[1], "rb");
  ignis::int64 n, grid;
  ignis::uint32 k0, k1, threshold;
  ignis::uint64 offset;
  double scale;
  if (!in || std::fread(&n, 8, 1, in) != 1 || std::fread(&grid, 8, 1, in) != 1 ||
      std::fread(&k0, 4, 1, in) != 1 || std::fread(&k1, 4, 1, in) != 1 ||
      std::fread(&offset, 8, 1, in) != 1 || std::fread(&threshold, 4, 1, in) != 1 ||
      std::fread(&scale, 8, 1, in) != 1)
    emu::die("bad input header");
  std::vector<unsigned char> bx, by, bm, bg, bo;
  EMU_T* x = aligned<EMU_T>(bx, n);
  EMU_T* y = aligned<EMU_T>(by, n);
  bool* m = aligned<bool>(bm, n);
  EMU_T* g = aligned<EMU_T>(bg, n);
  EMU_T* o = aligned<EMU_T>(bo, n);
  if (std::fread(x, sizeof(EMU_T), n, in) != (size_t)n ||
      std::fread(g, sizeof(EMU_T), n, in) != (size_t)n)
    emu::die("bad input data");
  std::fclose(in);
  std::mt19937 rng(7);
  const EMU_W s = (EMU_W)scale;
  emu::launch((unsigned)grid, 1, ignis::nn::dropout_threads, 0, [&] {
    ignis::nn::dropout_forward<EMU_T, EMU_W, EMU_VEC>(x, y, m, n, k0, k1, offset, threshold, s);
  }, rng);
  emu::launch((unsigned)grid, 1, ignis::nn::dropout_threads, 0, [&] {
    ignis::nn::dropout_backward<EMU_T, EMU_W, EMU_VEC>(g, m, o, n, s);
  }, rng);
  FILE* out = std::fopen(argv[2], "wb");
  std::fwrite(y, sizeof(EMU_T), n, out);
  std::fwrite(m, 1, n, out);
  std::fwrite(o, sizeof(EMU_T), n, out);
  std::fclose(out);
  return 0;
}
"""

CTYPES = {
    "float16": ("ignis::float16", "float"),
    "bfloat16": ("ignis::bfloat16", "float"),
    "float32": ("float", "float"),
    "float64": ("double", "double"),
}


@pytest.fixture(scope="module")
def builder(tmp_path_factory):
    return tc_emulator.Builder(tmp_path_factory.mktemp("dropout_emu"), "dropout", PART)


def run_kernels(builder, tmp_path, dtype, vec, shift, x, g, grid, seed, offset, p):
    t, w = CTYPES[dtype]
    exe = builder.build(
        f"{dtype}_{int(vec)}_{shift}",
        EMU_T=t,
        EMU_W=w,
        EMU_VEC="true" if vec else "false",
        EMU_SHIFT=shift,
    )
    n = x.size
    header = struct.pack(
        "<qqIIQId",
        n,
        grid,
        seed & 0xFFFFFFFF,
        seed >> 32,
        offset,
        dropout_ops.keep_threshold(p),
        dropout_ops._scale(p),
    )
    src, dst = tmp_path / "in.bin", tmp_path / "out.bin"
    src.write_bytes(header + x.tobytes() + g.tobytes())
    tc_emulator.run(exe, [src, dst], what=f"dropout {dtype} n={n}")
    raw = dst.read_bytes()
    size = x.itemsize * n
    return raw[:size], np.frombuffer(raw[size : size + n], np.uint8), raw[size + n :]


def cases(dtype: str) -> list[tuple[int, int]]:
    """(n, grid): sizes around a warp tile (and a block's 8 tiles) with a tail of every kind, in
    grids of one block (warps loop over several tiles) and of as many blocks as the host picks."""
    tile = cuda_indexing.dropout_tile(getattr(ignis, dtype))
    sizes = [1, 5, tile - 1, tile, tile + 3, 3 * tile + 7, 8 * tile, 9 * tile + 17]
    out = []
    for n in sizes:
        threads = cuda_indexing._dropout_threads(n, getattr(ignis, dtype), True, lambda k: k)
        out += [(n, 1), (n, max(1, -(-threads // 256)))]
    return out


@pytest.mark.exhaustive
@pytest.mark.parametrize("dtype", list(CTYPES))
def test_emulated_vector_path_equals_the_cpu_backend(builder, tmp_path, dtype) -> None:
    rng = np.random.default_rng(11)
    seed, offset, p = 2**63 + 12345, 2**32 - 5, 0.3  # the counter's low word wraps in the call
    for n, grid in cases(dtype):
        x = rng.standard_normal(n).astype(np_dtype(dtype))
        g = rng.standard_normal(n).astype(np_dtype(dtype))
        y, mask, back = run_kernels(builder, tmp_path, dtype, True, 0, x, g, grid, seed, offset, p)
        y_ref, m_ref = ignis.nn.dropout(nv(x, "cpu"), p, seed, offset)
        back_ref = ignis.nn.dropout_backward(nv(g, "cpu"), m_ref, p)
        msg = f"{dtype} n={n} grid={grid}"
        np.testing.assert_array_equal(mask, m_ref.to_host().astype(np.uint8), err_msg=msg)
        assert y == y_ref.to_host().tobytes(), msg
        assert back == back_ref.to_host().tobytes(), msg


@pytest.mark.exhaustive
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_emulated_scalar_path_of_misaligned_operands(builder, tmp_path, dtype) -> None:
    rng = np.random.default_rng(12)
    seed, offset, p = 99, 3, 0.5
    tile = cuda_indexing.dropout_tile(getattr(ignis, dtype))
    for n in (7, 2 * tile + 5):
        x = rng.standard_normal(n).astype(np_dtype(dtype))
        g = rng.standard_normal(n).astype(np_dtype(dtype))
        grid = max(1, -(-n // 4 // 256))
        y, mask, back = run_kernels(builder, tmp_path, dtype, False, 1, x, g, grid, seed, offset, p)
        y_ref, m_ref = ignis.nn.dropout(nv(x, "cpu"), p, seed, offset)
        back_ref = ignis.nn.dropout_backward(nv(g, "cpu"), m_ref, p)
        np.testing.assert_array_equal(mask, m_ref.to_host().astype(np.uint8))
        assert y == y_ref.to_host().tobytes() and back == back_ref.to_host().tobytes()
