"""TMA tensor maps: what a Hopper kernel's tensor copies (``cuda_src/tma.cuh``) read.

A tensor map describes a strided tensor in global memory and the box one copy moves into
shared memory. The driver builds it (``cuTensorMapEncodeTiled``); a kernel takes its 128 bytes
by value as a ``const __grid_constant__ ignis::tma::TensorMap`` parameter, so the result of
:func:`tiled` goes straight into a launch's argument list.

Example (rows of a ``(rows, 64)`` bfloat16 matrix ``a``, 128 rows per copy, 128-byte swizzle)::

    >>> tmap = tiled(ptr, "bfloat16", dims=(64, rows), strides=(128,), box=(64, 128))
    >>> kernel.launch(grid, block, [tmap, n])
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Sequence
from typing import Any

from . import _caches
from ._bindings import cu, driver
from ._dtypes import as_dtype

__all__ = ["tiled"]

_DATA_TYPES = {
    "float16": "CU_TENSOR_MAP_DATA_TYPE_FLOAT16",
    "bfloat16": "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16",
    "float32": "CU_TENSOR_MAP_DATA_TYPE_FLOAT32",
    "float64": "CU_TENSOR_MAP_DATA_TYPE_FLOAT64",
    "int32": "CU_TENSOR_MAP_DATA_TYPE_INT32",
    "int64": "CU_TENSOR_MAP_DATA_TYPE_INT64",
    "uint8": "CU_TENSOR_MAP_DATA_TYPE_UINT8",
}
_SWIZZLES = {
    0: "CU_TENSOR_MAP_SWIZZLE_NONE",
    32: "CU_TENSOR_MAP_SWIZZLE_32B",
    64: "CU_TENSOR_MAP_SWIZZLE_64B",
    128: "CU_TENSOR_MAP_SWIZZLE_128B",
}
MAP_BYTES = 128
#: Maps kept by their arguments (a map is a pure function of them): an op that runs again on the
#: same buffers, as a training step's attention does on the cached allocator's blocks, reuses
#: its maps instead of encoding them anew (about 5 µs each). The oldest go first.
CACHE_ENTRIES = 256
_cache: dict[tuple[Any, ...], bytes] = {}
_cache_lock = threading.Lock()


def _clear_maps() -> None:
    with _cache_lock:
        _cache.clear()


_caches.register(
    "tensor_maps",
    _cache,
    clear=_clear_maps,
    max_entries=CACHE_ENTRIES,
    description="TMA tensor-map arguments -> the encoded 128-byte map",
)


def tiled(
    address: int,
    dtype: str,
    dims: Sequence[int],
    strides: Sequence[int],
    box: Sequence[int],
    swizzle: int = 128,
) -> bytes:
    """The 128-byte tensor map of a tensor at device ``address`` for box copies.

    ``dims``: elements per dimension, innermost (contiguous) first, 1 to 5 of them;
    ``strides``: byte strides of ``dims[1:]`` (multiples of 16); ``box``: elements per copy
    along each dim (1 to 256; the innermost box at most ``swizzle`` bytes wide when swizzled);
    ``swizzle``: 0, 32, 64 or 128 (bytes). Elements of a box outside the tensor arrive as zeros.
    Raises ValueError naming what is out of range. Repeated arguments return the kept map
    (:data:`CACHE_ENTRIES`).
    """
    key = (address, dtype, tuple(dims), tuple(strides), tuple(box), swizzle)
    cached = _cache.get(key)
    if cached is not None:
        return cached
    op = "tensor map"
    if dtype not in _DATA_TYPES:
        raise ValueError(f"{op}: dtype {dtype!r} is not one of {', '.join(_DATA_TYPES)}")
    rank = len(dims)
    if not 1 <= rank <= 5 or len(strides) != rank - 1 or len(box) != rank:
        raise ValueError(
            f"{op}: expected 1 to 5 dims with one stride fewer and a box dim each; got dims "
            f"{tuple(dims)}, strides {tuple(strides)}, box {tuple(box)}"
        )
    item = as_dtype(dtype, op).itemsize
    if address % 16:
        raise ValueError(f"{op}: the address {address:#x} is not 16-byte aligned")
    if any(s % 16 or not 0 < s < 2**40 for s in strides):
        raise ValueError(
            f"{op}: strides {tuple(strides)} (bytes) must be positive multiples of 16 below 2**40"
        )
    if any(not 0 < n <= 2**32 for n in dims):
        raise ValueError(f"{op}: dims {tuple(dims)} must lie in 1..2**32")
    if any(not 0 < b <= 256 for b in box) or (box[0] * item) % 16:
        raise ValueError(
            f"{op}: box {tuple(box)} must lie in 1..256 with a multiple of 16 bytes innermost"
        )
    if swizzle not in _SWIZZLES:
        raise ValueError(f"{op}: swizzle must be one of 0, 32, 64, 128 (bytes), got {swizzle!r}")
    if swizzle and box[0] * item > swizzle:
        raise ValueError(
            f"{op}: the innermost box is {box[0] * item} bytes, wider than the "
            f"{swizzle}-byte swizzle"
        )
    tmap = cu.cuTensorMapEncodeTiled(
        getattr(driver.CUtensorMapDataType, _DATA_TYPES[dtype]),
        rank,
        address,
        [driver.cuuint64_t(int(n)) for n in dims],
        [driver.cuuint64_t(int(s)) for s in strides],
        [driver.cuuint32_t(int(b)) for b in box],
        [driver.cuuint32_t(1)] * rank,
        driver.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        getattr(driver.CUtensorMapSwizzle, _SWIZZLES[swizzle]),
        driver.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        driver.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
    )
    encoded = ctypes.string_at(tmap.getPtr(), MAP_BYTES)
    with _cache_lock:
        while len(_cache) >= CACHE_ENTRIES:
            del _cache[next(iter(_cache))]
        _cache[key] = encoded
    return encoded
