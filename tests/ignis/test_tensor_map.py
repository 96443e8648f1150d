"""TMA tensor maps (ignis._tensor_map.tiled) and the copies of cuda_src/tma.cuh: what the driver is
asked for, the errors for what TMA cannot describe, and on a Hopper GPU that a box lands in
shared memory 128-byte swizzled with zeros outside the tensor."""

from __future__ import annotations

import numpy as np
import pytest
from ignis._bindings import driver

import ignis
from ignis import _tensor_map


class Recorder:
    """Stands in for the checked driver: records cuTensorMapEncodeTiled's arguments."""

    def __init__(self):
        self.calls = []

    def cuTensorMapEncodeTiled(self, *args):
        self.calls.append(args)
        m = driver.CUtensorMap()
        m.opaque = list(range(16))
        return m


@pytest.fixture(autouse=True)
def empty_cache(monkeypatch):
    """Each test starts without kept maps (and leaves none)."""
    monkeypatch.setattr(_tensor_map, "_cache", {})


def test_tiled_asks_the_driver_for_the_map_and_returns_its_128_bytes(monkeypatch):
    rec = Recorder()
    monkeypatch.setattr(_tensor_map, "cu", rec)
    got = _tensor_map.tiled(
        0x7000, "bfloat16", (40, 300, 3, 2), (80, 24000, 72000), (64, 128, 1, 1)
    )
    assert got == np.arange(16, dtype="<u8").tobytes()
    ((dtype, rank, address, dims, strides, box, elem, inter, swz, l2, oob),) = rec.calls
    assert dtype == driver.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
    assert (rank, address) == (4, 0x7000)
    assert [int(x) for x in dims] == [40, 300, 3, 2]
    assert [int(x) for x in strides] == [80, 24000, 72000]
    assert [int(x) for x in box] == [64, 128, 1, 1] and [int(x) for x in elem] == [1] * 4
    assert inter == driver.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE
    assert swz == driver.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B
    assert oob == driver.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE  # zeros
    _tensor_map.tiled(0x7000, "float32", (8,), (), (8,), swizzle=0)
    assert rec.calls[-1][8] == driver.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_NONE


def test_the_same_arguments_reuse_the_kept_map(monkeypatch):
    rec = Recorder()
    monkeypatch.setattr(_tensor_map, "cu", rec)
    monkeypatch.setattr(_tensor_map, "CACHE_ENTRIES", 3)
    args = ("bfloat16", (64, 300, 3, 2), [128, 38400, 115200], (64, 128, 1, 1))
    first = _tensor_map.tiled(0x7000, *args)
    assert _tensor_map.tiled(0x7000, *args) == first and len(rec.calls) == 1  # lists or tuples
    _tensor_map.tiled(0x8000, *args)  # another address: another map
    _tensor_map.tiled(0x7000, "bfloat16", (64, 300, 3, 2), (128, 38400, 115200), (64, 64, 1, 1))
    assert len(rec.calls) == 3
    _tensor_map.tiled(0x9000, *args)  # a fourth map: the oldest (0x7000, box 128) goes
    assert len(_tensor_map._cache) == 3
    _tensor_map.tiled(0x8000, *args)
    assert len(rec.calls) == 4
    _tensor_map.tiled(0x7000, *args)
    assert len(rec.calls) == 5


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"dtype": "bool"}, "dtype 'bool' is not one of"),
        ({"address": 0x7008}, "0x7008 is not 16-byte aligned"),
        ({"strides": (80, 24000)}, "expected 1 to 5 dims with one stride fewer"),
        ({"dims": (1, 2, 3, 4, 5, 6), "strides": (16,) * 5, "box": (8,) * 6}, "expected 1 to 5"),
        ({"strides": (200, 24000, 72000)}, "must be positive multiples of 16"),
        ({"strides": (0, 24000, 72000)}, "must be positive multiples of 16"),
        ({"strides": (80, -16, 72000)}, "must be positive multiples of 16"),
        ({"dims": (40, 0, 3, 2)}, "must lie in 1..2**32"),
        ({"box": (64, 512, 1, 1)}, "must lie in 1..256"),
        ({"box": (4, 128, 1, 1)}, "a multiple of 16 bytes innermost"),
        ({"box": (128, 128, 1, 1)}, "256 bytes, wider than the 128-byte swizzle"),
        ({"swizzle": 16}, "swizzle must be one of 0, 32, 64, 128"),
    ],
)
def test_tiled_refuses_what_tma_cannot_copy(monkeypatch, kwargs, message):
    rec = Recorder()
    monkeypatch.setattr(_tensor_map, "cu", rec)
    args = {
        "address": 0x7000,
        "dtype": "bfloat16",
        "dims": (40, 300, 3, 2),
        "strides": (80, 24000, 72000),
        "box": (64, 128, 1, 1),
    }
    args.update(kwargs)
    with pytest.raises(ValueError, match="tensor map: ") as info:
        _tensor_map.tiled(**args)
    assert message in str(info.value)
    assert rec.calls == []  # refused before the driver is asked


# --- on a Hopper GPU: a box copy through tma.cuh --------------------------------------------------

BOX_KERNEL = r"""
#include "tma.cuh"
using namespace ignis;

// The box of map at (c0, c1, c2, c3) into a 1024-byte aligned shared tile, whose raw bytes are
// then written to out.
extern "C" __global__ void tma_box(const __grid_constant__ tma::TensorMap map, float16* out,
                                   int c0, int c1, int c2, int c3, int bytes) {
  __shared__ alignas(1024) unsigned char tile[64 * 2 * 64];
  __shared__ alignas(8) uint64 bar;
  const unsigned t = (unsigned)__cvta_generic_to_shared(tile);
  const unsigned b = (unsigned)__cvta_generic_to_shared(&bar);
  if (threadIdx.x == 0) {
    tma::barrier_init(b, 1);
    tma::barrier_init_fence();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    tma::prefetch(map);
    tma::arrive_expect_tx(b, bytes);
    tma::load_4d(t, map, c0, c1, c2, c3, b);
  }
  tma::wait(b, 0);
  for (int i = threadIdx.x; i < bytes / 2; i += blockDim.x)
    out[i] = reinterpret_cast<const float16*>(tile)[i];
}
"""


def unswizzle_128(raw: np.ndarray, rows: int) -> np.ndarray:
    """(rows, 64) 16-bit elements of a 128-byte-swizzled tile: chunk c of row r at c ^ (r % 8)."""
    chunks = raw.reshape(rows, 8, 8)
    out = np.empty_like(chunks)
    for r in range(rows):
        out[r] = chunks[r, np.arange(8) ^ (r % 8)]
    return out.reshape(rows, 64)


@pytest.mark.gpu
@pytest.mark.parametrize(
    "row0,head,batch",
    [(0, 0, 0), (48, 2, 1), (90, 1, 0)],  # the last box reaches past the 100 rows
)
def test_a_box_lands_swizzled_with_zeros_outside_the_tensor(row0, head, batch):
    if ignis.Device(0).compute_capability < (9, 0):
        pytest.skip("TMA needs compute capability 9.0 or later")
    # (B, H, rows, E) = (2, 3, 100, 40) float16, laid out as (B, rows, H, E): a row steps over
    # H E elements. A box is 64 columns x 64 rows: columns 40..63 lie outside.
    rng = np.random.default_rng(row0)
    values = rng.standard_normal((2, 100, 3, 40)).astype(np.float16)
    src = ignis.asarray(values)
    kernel = ignis.compile_kernel(BOX_KERNEL, "tma_box")
    tmap = _tensor_map.tiled(
        src.data_ptr, "float16", (40, 100, 3, 2), (3 * 80, 80, 100 * 3 * 80), (64, 64, 1, 1)
    )
    out = ignis.zeros((64 * 64,), dtype="float16")
    kernel.launch(grid=1, block=128, args=[tmap, out, 0, row0, head, batch, 64 * 64 * 2])
    got = unswizzle_128(out.to_host(), 64)
    want = np.zeros((64, 64), np.float16)
    rows = values[batch, row0 : row0 + 64, head, :]
    want[: len(rows), :40] = rows
    np.testing.assert_array_equal(got, want)
