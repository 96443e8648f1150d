"""The own float16 / bfloat16 / TF32 GEMM of Hopper GPUs: ``gemm_wgmma``
(``cuda_src/gemm_sm90.cu``).

Warpgroup MMA (wgmma) fed by TMA copies, built for ``sm_90a`` (compute capability 9.0 only).
:mod:`.matmul` runs it in place of the mma.sync kernel ``gemm_tc`` when the ``matmul.wgmma``
setting is on (``ignis.tuning(matmul=dict(wgmma=True))`` or ``IGNIS_TUNE_MATMUL_WGMMA=1``; off
by default) and :func:`plan_wgmma_gemm` finds the product's operands readable by TMA:

* float16 / bfloat16, or float32 with TF32 allowed (``tf32=True``; both operands must then be
  K-major: A's rows and B's columns contiguous, see :func:`k_major`), compute capability 9.0,
  ``0 < k`` and m, n, k below 2**31;
* A and B each have a contiguous dim (element stride 1) among their last two, and their base
  address, other matrix stride and batch strides are multiples of 16 bytes (0 for a broadcast
  batch dim; negative strides are not), with at most two batch dims once merged
  (:func:`~.matmul.collapse_batch`).

Anything else returns None and the existing kernels run. C is written through its strides.
A tensor map per operand (:func:`ignis._tensor_map.tiled`) describes it as a 4-dim tensor:
(contiguous dim, the other matrix dim, inner batch dim, outer batch dim), a broadcast or missing
batch dim being one element long.

Example (pure planning, no GPU)::

    >>> a = Mat(1 << 20, 64, 1, ())         # 128 x 64 row-major, 16-byte aligned
    >>> b = Mat(1 << 21, 256, 1, ())        # 64 x 256 row-major
    >>> c = Mat(1 << 22, 256, 1, ())
    >>> plan = plan_wgmma_gemm(dt.bfloat16, (9, 0), (), 128, 256, 64, a, b, c, 1.0, 0.0)
    >>> plan.kernel
    'ignis::gemm90::gemm_wgmma<ignis::bfloat16, 128, 6, true, false>'
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import Any

from ... import _dtypes as dt
from ... import _tensor_map as tensor_map
from ._kernels import CTYPE, library_kernel
from .matmul import Mat, collapse_batch

__all__ = [
    "SOURCE",
    "THREADS",
    "WgmmaLaunch",
    "MapSpec",
    "plan_wgmma_gemm",
    "wgmma_smem",
    "wgmma_name",
    "launch_wgmma",
    "STAGES",
    "TILE_N",
    "k_major",
]

SOURCE = "gemm_sm90.cu"
THREADS = 384  # a producer warpgroup and two consumer warpgroups
BM, BK = 128, 64  # gemm_sm90.cu's BM, BK
#: Ring buffers of each tile width (shared memory: 1 KiB of alignment, the buffers, mbarriers).
STAGES = {128: 6, 256: 4}
TILE_N = tuple(STAGES)
_ARGS = struct.Struct("<9q2f4i")  # ignis::gemm90::WgmmaArgs (96 bytes)
_INT_MAX = 2**31 - 1
_STRIDE_LIMIT = 2**40  # TMA: byte strides below 2**40
_DTYPES = (dt.float16, dt.bfloat16)  # (float32 too, as TF32, when the caller allows it)


@dataclass(frozen=True)
class MapSpec:
    """The arguments of :func:`ignis._tensor_map.tiled` for one operand (swizzle 128)."""

    address: int
    dtype: str
    dims: tuple[int, int, int, int]  # elements, contiguous dim first
    strides: tuple[int, int, int]  # bytes, of dims[1:]
    box: tuple[int, int, int, int]


@dataclass(frozen=True)
class WgmmaLaunch:
    """One launch of ``gemm_wgmma(amap, bmap, c, args)`` on ``grid`` x :data:`THREADS`."""

    kernel: str  # C++ name expression in gemm_sm90.cu
    grid: tuple[int, int, int]
    shared_mem: int  # dynamic shared memory, bytes
    a_map: MapSpec
    b_map: MapSpec
    c: int
    args: bytes  # the packed WgmmaArgs


def wgmma_smem(tile_n: int) -> int:
    """Dynamic shared memory (bytes) of ``gemm_wgmma`` with ``tile_n`` columns per tile: its
    ring of A (128 rows) and B (``tile_n`` columns) tiles of 128 bytes of K each (64 16-bit or
    32 float32 elements), two mbarriers per buffer, and 1024 bytes to align the swizzled tiles.
    Example: ``wgmma_smem(128) == 197728``."""
    stages = STAGES[tile_n]
    return 1024 + stages * (BM * BK + BK * tile_n) * 2 + 2 * stages * 8


def wgmma_name(dtype: dt.DType, tile_n: int, a_kmajor: bool, b_kmajor: bool) -> str:
    """Name expression of ``gemm_wgmma`` for ``dtype``, the tile width and operand layouts."""
    flag = {True: "true", False: "false"}
    return (
        f"ignis::gemm90::gemm_wgmma<{CTYPE[dtype]}, {tile_n}, {STAGES[tile_n]}, "
        f"{flag[a_kmajor]}, {flag[b_kmajor]}>"
    )


def k_major(rows: int, cols: int, mat: Mat, is_a: bool, itemsize: int) -> bool:
    """Whether operand ``mat`` (``rows`` x ``cols`` elements of ``itemsize`` bytes) is K-major
    where TMA reads it: A (m x k) with its rows contiguous, B (k x n) with its columns
    contiguous (a transposed view of a row-major matrix), or the other dim of one element; the
    base and the other matrix stride multiples of 16 bytes. TF32 products need both operands
    so (the caller copies one that is not)."""
    if mat.ptr % 16:
        return False
    inner_ok, outer, step = (mat.cs == 1, rows, mat.rs) if is_a else (mat.rs == 1, cols, mat.cs)
    if not inner_ok and (cols if is_a else rows) != 1:
        return False
    return outer == 1 or _valid_stride(step * itemsize)


def _valid_stride(nbytes: int) -> bool:
    return nbytes % 16 == 0 and 0 < nbytes < _STRIDE_LIMIT


def _filler(extent_bytes: int) -> int:
    """A valid byte stride for a dim of one element (never stepped): the span below it,
    rounded up to 16 bytes."""
    return max(16, -(-extent_bytes // 16) * 16)


def _matrix_dims(
    rows: int, cols: int, mat: Mat, item: int, prefer_cols: bool
) -> tuple[bool, tuple[int, int], int] | None:
    """(cols innermost?, (inner, outer) elements, outer byte stride) of one operand's matrix
    dims for TMA, trying the contiguous dim ``prefer_cols`` names first; None where neither
    dim is contiguous with a valid stride for the other. Dims of one element take any stride."""
    for cols_inner in (prefer_cols, not prefer_cols):
        inner, outer = (cols, rows) if cols_inner else (rows, cols)
        step_inner, step_outer = (mat.cs, mat.rs) if cols_inner else (mat.rs, mat.cs)
        if step_inner != 1 and inner != 1:
            continue
        stride = step_outer * item if outer > 1 else _filler(inner * item)
        if _valid_stride(stride):
            return cols_inner, (inner, outer), stride
    return None


def _operand_map(
    dtype: dt.DType,
    rows: int,
    cols: int,
    mat: Mat,
    batch_strides: tuple[int, ...],
    shape: tuple[int, ...],
    prefer_cols: bool,
) -> tuple[bool, tuple[int, ...], tuple[int, ...], int] | None:
    """(cols innermost?, the tensor map's dims, its byte strides, batch bits) of one operand,
    or None where TMA cannot read it. Bit 1 of the batch bits: the inner batch dim (the last of
    ``shape``) is stepped; bit 2: the outer one. A broadcast or missing batch dim is one
    element long (the kernel reads it at coordinate 0)."""
    item = dtype.itemsize
    if mat.ptr % 16:
        return None
    found = _matrix_dims(rows, cols, mat, item, prefer_cols)
    if found is None:
        return None
    cols_inner, (inner, outer), outer_stride = found
    dims, strides, bits = [inner, outer], [outer_stride], 0
    padded_shape = (1,) * (2 - len(shape)) + tuple(shape)
    padded_strides = (0,) * (2 - len(shape)) + tuple(batch_strides)
    for bit, size, step in (
        (1, padded_shape[1], padded_strides[1]),
        (2, padded_shape[0], padded_strides[0]),
    ):
        if step < 0:
            return None
        if step == 0 or size == 1:
            strides.append(_filler(dims[-1] * strides[-1]))
            dims.append(1)
        elif _valid_stride(step * item):
            strides.append(step * item)
            dims.append(size)
            bits |= bit
        else:
            return None
    if any(not 0 < d <= 2**32 for d in dims):
        return None
    return cols_inner, tuple(dims), tuple(strides), bits


def plan_wgmma_gemm(
    dtype: dt.DType,
    compute_capability: tuple[int, int],
    batch: tuple[int, ...],
    m: int,
    n: int,
    k: int,
    a: Mat,
    b: Mat,
    c: Mat,
    alpha: float,
    beta: float,
    tile_n: int = 128,
    sm_count: int | None = None,
    tf32: bool = False,
) -> WgmmaLaunch | None:
    """The ``gemm_wgmma`` launch of ``c = alpha * a @ b + beta * c`` (m x k times k x n over
    ``batch``), or None where it does not apply (see the module's conditions; the caller then
    runs the existing kernels). ``sm_count``: launch at most that many blocks, each looping
    over output tiles (persistent; give the GPU's multiprocessor count); None: one block a
    tile. ``tf32``: float32 products may run on TF32 (K-major operands only). Pure: no GPU, no
    tensor map built yet."""
    as_tf32 = tf32 and dtype is dt.float32
    if (
        (dtype not in _DTYPES and not as_tf32)
        or compute_capability != (9, 0)
        or k <= 0
        or m <= 0
        or n <= 0
        or max(m, n, k) > _INT_MAX
        or tile_n not in STAGES
    ):
        return None
    shape, (sa, sb, sc) = collapse_batch(batch, [a.bs, b.bs, c.bs])
    if len(shape) > 2 or any(s > _INT_MAX for s in shape):
        return None
    # A: K innermost (row-major: read K-major) first; B: N innermost (row-major: MN-major).
    # A copy moves 64 elements of the contiguous dim (128 bytes, the swizzle's width) times
    # the tile's extent along the other dim.
    # (TF32: B with K innermost, the only layout its wgmma reads)
    am = _operand_map(dtype, m, k, a, sa, shape, True)
    bm = _operand_map(dtype, k, n, b, sb, shape, not as_tf32)
    if am is None or bm is None:
        return None
    a_kmajor, a_dims, a_strides, a_bits = am
    b_cols_inner, b_dims, b_strides, b_bits = bm
    b_kmajor = not b_cols_inner
    if as_tf32 and not (a_kmajor and b_kmajor):
        return None
    row = 128 // dtype.itemsize  # elements of a 128-byte row: one copy's inner extent
    a_spec = MapSpec(a.ptr, dtype.name, a_dims, a_strides, (row, BM if a_kmajor else BK, 1, 1))
    b_spec = MapSpec(b.ptr, dtype.name, b_dims, b_strides, (row, tile_n if b_kmajor else BK, 1, 1))
    tiles_m, tiles_n = -(-m // BM), -(-n // tile_n)
    if tiles_m * tiles_n > _INT_MAX:
        return None
    count = math.prod(shape)
    items = tiles_m * tiles_n * count
    blocks = items if sm_count is None else min(items, max(1, sm_count))
    if blocks > _INT_MAX:
        return None
    padded_c = (0,) * (2 - len(shape)) + tuple(sc)
    batch_inner = shape[-1] if shape else 1
    args = _ARGS.pack(
        m,
        n,
        k,
        c.rs,
        c.cs,
        padded_c[1],
        padded_c[0],
        batch_inner,
        count,
        float(alpha),
        float(beta),
        tiles_m,
        tiles_n,
        a_bits,
        b_bits,
    )
    return WgmmaLaunch(
        wgmma_name(dtype, tile_n, a_kmajor, b_kmajor),
        (blocks, 1, 1),
        wgmma_smem(tile_n),
        a_spec,
        b_spec,
        c.ptr,
        args,
    )


def _map(spec: MapSpec) -> bytes:
    return tensor_map.tiled(spec.address, spec.dtype, spec.dims, spec.strides, spec.box)


def launch_wgmma(backend: Any, stream: Any, launch: WgmmaLaunch) -> None:
    """Build the two tensor maps of ``launch`` and queue it on ``stream``."""
    kernel = library_kernel(SOURCE, launch.kernel, backend.gpu, arch="sm_90a")
    kernel.launch(
        launch.grid,
        THREADS,
        [_map(launch.a_map), _map(launch.b_map), launch.c, launch.args],
        shared_mem=launch.shared_mem,
        stream=stream,
    )
