"""Fused attention on the CUDA backend (kernels in ``cuda_src/attention.cu``).

The kernels read ``q``, ``k``, ``v``, ``out`` and ``grad_out`` and write ``out``, ``dq``, ``dk``
and ``dv`` in place through their strides: every one is a (B, H, rows, E) view whose last dim is
contiguous, the batch, head and row strides are passed in one ``Layout`` struct per launch (see
:func:`layout`), so heads sliced out of a packed projection need no gather or scatter copies.
``lse`` and the float32 scratch rows are contiguous. Rows are copied in 16-byte pieces only
where the bases and every stride are 16-byte aligned (:func:`_vec`). float16 and
bfloat16 run the tensor-core kernels, float32 and float64 the scalar ones; each is instantiated
for the smallest padded head dim in :data:`HEAD_DIMS` that holds ``E``. The tensor-core forward
gives each warp :data:`FWD_ROWS_PER_WARP` queries: 32 (two m16 tiles sharing every K and V
fragment, 128 queries per block) by default, 16 (64 per block) for the simpler kernel. On a
Hopper GPU (compute capability 9.0) at padded head dims 64 and 128 the forward and the fused
backward are instead ``flash_fwd_wgmma`` and ``flash_bwd_fused_wgmma`` (``attention_sm90.cu``,
warpgroup MMA, :data:`FWD_WGMMA`, :data:`BWD_WGMMA`), whose q, k, v and grad_out tiles the TMA
unit copies through tensor maps (:func:`_tma_map`; where TMA cannot read an operand, see
:func:`_tma_ready`, the ``mma.sync`` kernels run instead). The backward pass starts with
``D = rowsum(dO * O)``. With :data:`BWD_FUSED_DQ` (the default) the tensor-core backward is
then one pass over key blocks that writes dK and dV and adds dQ into a zero-filled float32
buffer with atomics (five matrix products per tile pair instead of seven),
and a last launch scales and rounds dQ; the float32 sums of dQ then depend on the order of the
atomics. Without it, dK/dV per key block and dQ per query block are two passes
(deterministic). Both take the dK/dV tiles (keys per block, queries per tile, warps) of the
:data:`BWD_TILE_VARIANTS` entry that :data:`BWD_TILES` names. float32 / float64 run the
register-tiled scalar kernels (``flash_*_simt_tiled``: tiles per (dtype, head dim) in
:data:`SIMT_TILES`) unless :data:`SIMT_TILED` is False, which selects the first scalar kernels
(``flash_*_simt``). Their backward is the same two passes, or with :data:`SIMT_FUSED_DQ` one
pass over key blocks that adds dQ into a zero-filled buffer of the input's dtype with atomics,
then the same last launch. The tensor-core kernels copy the next tiles with ``cp.async`` into a
second shared-memory buffer while they compute on the first. Decode attention splits the cache
over enough blocks to fill the GPU and merges the partial softmax states in a second launch.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any, NamedTuple

from ... import _dtypes as dt
from ... import _tensor_map as tensor_map
from ._kernels import CTYPE, library_kernel
from .reduction import _temp

if TYPE_CHECKING:
    from ..array import NvArray

__all__ = [
    "forward",
    "backward",
    "decode",
    "kernel_names",
    "layout",
    "LAYOUT",
    "HEAD_DIMS",
    "FWD_ROWS_PER_WARP",
    "FWD_WGMMA",
    "BWD_FUSED_DQ",
    "BWD_TILES",
    "BWD_TILES_AUTO",
    "BWD_TILE_VARIANTS",
    "BwdTiles",
    "SIMT_TILED",
    "SIMT_FUSED_DQ",
    "SIMT_TILES",
]

SOURCE = "attention.cu"
HEAD_DIMS = (32, 64, 96, 128)
LOG2E = 1.4426950408889634
MAX_GRID_Y = 65535

_TC = ("float16", "bfloat16")

# Tile shapes of the kernels (must match attention.cu).
_TC_THREADS, _SIMT_THREADS, _SIMT_B = 128, 256, 32
_FWD_BN = 64
#: Queries per warp of the tensor-core forward: 32 runs ``flash_fwd_tc_m32`` (128 per block),
#: 16 the fallback ``flash_fwd_tc`` (64 per block). Either gives the same results up to rounding.
FWD_ROWS_PER_WARP = 32
#: float16 / bfloat16 forward on a GPU of compute capability 9.0 (Hopper) at padded head dims 64
#: and 128: True runs ``flash_fwd_wgmma`` (``attention_sm90.cu``, warpgroup MMA, built for
#: sm_90a; tiles in :data:`WGMMA_TILES`), False the ``mma.sync`` kernels as on other GPUs. Both
#: give the same results up to float32 summation order.
FWD_WGMMA = True
SOURCE_SM90 = "attention_sm90.cu"
#: Tiles of ``flash_fwd_wgmma`` by padded head dim: (warpgroups per block, 64 queries each;
#: keys per tile). The fastest on an H200: three warpgroups at head dim 64 (up to 1.16x two),
#: two at 128 (three would spill).
WGMMA_TILES = {64: (3, 128), 128: (2, 128)}
#: Causal forwards of few queries: padded head dim -> (most queries, tiles) replacing
#: :data:`WGMMA_TILES`. Smaller query tiles put less of each block's work on the masked
#: diagonal: on an H200 two warpgroups at head dim 64 gave 182 TFLOP/s at 16x32x1024x64 causal
#: against 160 with three, while at 4096 queries three stayed faster (283 against 269).
WGMMA_SHORT_CAUSAL_TILES = {64: (2048, (2, 128))}
#: float16 / bfloat16 fused backward (:data:`BWD_FUSED_DQ`) on a GPU of compute capability 9.0 at
#: padded head dims 64 and 128: True runs ``flash_bwd_fused_wgmma`` (``attention_sm90.cu``,
#: warpgroup MMA; 128 keys per block of two warpgroups, 64-query tiles), False the
#: ``mma.sync`` kernel of :data:`BWD_TILES`. They differ in speed and in the order of dQ's
#: float32 atomics only.
BWD_WGMMA = True
_WG_BWD_KEYS, _WG_BWD_QUERIES = 128, 64
# flash_fwd_wgmma's K and V tile buffers (FWD_KBUF, FWD_VBUF in attention_sm90.cu) and the bytes
# of its 11 mbarriers, rounded up
_WG_FWD_KBUF, _WG_FWD_VBUF, _WG_FWD_BARRIERS = 2, 3, 128
#: float16 / bfloat16 backward: True runs the fused pass (dQ by float32 atomics), False the
#: deterministic dK/dV + dQ passes.
BWD_FUSED_DQ = True


class BwdTiles(NamedTuple):
    """A tile variant of the float16 / bfloat16 dK/dV and fused backward kernels
    (``flash_bwd_dkdv_tc`` / ``flash_bwd_fused_tc``; its template arguments after T, D, CAUSAL).

    Attributes:
        keys: keys per block, 16 per warp (so ``keys // 16`` warps).
        queries: queries per streamed tile (a multiple of 16; its 16-row tiles divide the warps).
        min_blocks: the launch bounds' minimum blocks per SM at head dims <= 64, which caps
            ptxas's registers (0: none asked; always none above 64, where the dK and dV
            accumulators alone take 128 registers).
        kv_regs: at head dims <= 64 each warp keeps its K and V A fragments in registers.
        red_pairs: dQ added in column pairs by one vector reduction each (sm_90).
    """

    keys: int
    queries: int
    min_blocks: int = 0
    kv_regs: bool = False
    red_pairs: bool = False

    @property
    def threads(self) -> int:
        return self.keys // 16 * 32

    def template_args(self, d: int) -> str:
        """The kernels' tile arguments at padded head dim ``d``."""
        minb = self.min_blocks if d <= 64 else 0
        flags = ", ".join("true" if f else "false" for f in (self.kv_regs, self.red_pairs))
        return f"{self.keys}, {self.queries}, {minb}, {flags}"


#: The tile variants of the float16 / bfloat16 dK/dV and fused backward, by name: k<keys per
#: block>q<queries per tile>w<warps>, then -b2 (two blocks per SM asked at head dims <= 64),
#: -kv (K and V fragments in registers at head dims <= 64), -red2 (dQ by paired reductions).
#: All give the same results up to the order of dQ's float32 atomics; see attention.cu's
#: tensor-core backward section for their registers and occupancy.
BWD_TILE_VARIANTS: dict[str, BwdTiles] = {
    "k64q32w4": BwdTiles(64, 32),
    "k128q32w8": BwdTiles(128, 32),
    "k128q64w8": BwdTiles(128, 64),
    "k128q32w8-b2-red2": BwdTiles(128, 32, min_blocks=2, red_pairs=True),
    "k128q64w8-kv-red2": BwdTiles(128, 64, kv_regs=True, red_pairs=True),
}
#: What :data:`BWD_TILES` = "auto" runs at each padded head dim: the fastest fused backward on
#: an H200 (``benchmarks/attention.py``; 1.3-1.6x the k64q32w4 tiles at head dims 64 and 128).
BWD_TILES_AUTO = {
    32: "k128q32w8-b2-red2",
    64: "k128q32w8-b2-red2",
    96: "k128q64w8-kv-red2",
    128: "k128q64w8-kv-red2",
}
#: The :data:`BWD_TILE_VARIANTS` entry both float16 / bfloat16 backward paths use, or "auto"
#: (:data:`BWD_TILES_AUTO` by head dim).
BWD_TILES = "auto"
_DQ_BM, _DQ_BN = 64, 32
_DECODE_THREADS, _DECODE_MIN_CHUNK = 128, 64

#: float32 / float64: True runs the register-tiled scalar kernels, False the first ones
#: (32 x 32 tiles, a row per warp); both are exact in the dtype and deterministic (the tiled
#: backward unless :data:`SIMT_FUSED_DQ`).
SIMT_TILED = True
#: float32 / float64 backward with the register-tiled kernels: True runs the fused pass
#: (``flash_bwd_fused_simt_tiled``: dK and dV per key block, and dQ = dS K added with atomics
#: into a zero-filled float32 / float64 buffer, then scaled into dq by ``attn_dq_finish``),
#: which recomputes the scores and probabilities once instead of twice. Its dQ sums then depend
#: on the order of the atomics, so dq is not bit-for-bit reproducible from run to run
#: (deterministic=False semantics; the rounding error is of the two passes' size; dk and dv
#: are unaffected). False (the default): the deterministic dK/dV + dQ passes.
SIMT_FUSED_DQ = False
_TILED_THREADS = 256
#: Tiles of the register-tiled scalar kernels per (dtype, padded head dim 64 or 128):
#: kernel -> (rows per block, rows per streamed tile, stages, launch-bounds minimum blocks).
#: Rows per block are queries for "fwd" and "dq", keys for "dkdv" and "fused" (the fused
#: backward, :data:`SIMT_FUSED_DQ`). Chosen so that the double-buffered float32 tiles leave room
#: for two blocks per SM (227 KiB of shared memory, 128 registers per thread), except the
#: float32 dK/dV and fused passes at head dim 128 (64 accumulators).
SIMT_TILES: dict[tuple[str, int], dict[str, tuple[int, int, int, int]]] = {
    ("float32", 64): {
        "fwd": (64, 64, 2, 2),
        "dq": (64, 32, 2, 2),
        "dkdv": (64, 32, 2, 2),
        "fused": (64, 32, 2, 2),
    },
    ("float32", 128): {
        "fwd": (64, 32, 2, 2),
        "dq": (64, 32, 1, 2),
        "dkdv": (64, 32, 1, 1),
        "fused": (64, 32, 1, 1),
    },
    ("float64", 64): {
        "fwd": (64, 32, 1, 1),
        "dq": (64, 32, 1, 1),
        "dkdv": (64, 32, 1, 1),
        "fused": (64, 32, 1, 1),
    },
    ("float64", 128): {
        "fwd": (32, 32, 1, 1),
        "dq": (32, 32, 1, 1),
        "dkdv": (32, 32, 1, 1),
        "fused": (32, 32, 1, 1),
    },
}


def padded_head_dim(e: int) -> int:
    """The kernel head dim for ``e``: the smallest of :data:`HEAD_DIMS` that holds it."""
    for d in HEAD_DIMS:
        if e <= d:
            return d
    raise ValueError(f"attention: head dim {e} is larger than {HEAD_DIMS[-1]}")


def tiled_head_dim(e: int) -> int:
    """The head dim of the register-tiled scalar kernels for ``e``: 64 or 128."""
    if e > 128:
        raise ValueError(f"attention: head dim {e} is larger than 128")
    return 64 if e <= 64 else 128


def tiled_kernel_names(dtype: str, e: int, causal: bool) -> dict[str, str]:
    """Name expressions of the register-tiled scalar kernels (float32 / float64): "fwd",
    "dkdv", "dq", and "fused" and "dq_finish" of the fused backward (:data:`SIMT_FUSED_DQ`)."""
    t, d, c = CTYPE[dtype], tiled_head_dim(e), "true" if causal else "false"
    tiles = SIMT_TILES[(dtype, d)]
    kinds = (("fwd", "fwd"), ("dkdv", "bwd_dkdv"), ("dq", "bwd_dq"), ("fused", "bwd_fused"))
    names = {
        kind: f"ignis::attn::flash_{what}_simt_tiled<{t}, {d}, {c}, {a}, {b}, {st}, {minb}>"
        for kind, what in kinds
        for a, b, st, minb in [tiles[kind]]
    }
    names["dq_finish"] = f"ignis::attn::attn_dq_finish<{t}, {t}>"
    return names


def bwd_tiles(name: str | None, d: int) -> BwdTiles:
    """The tile variant ``name`` (None: :data:`BWD_TILES`) of :data:`BWD_TILE_VARIANTS` at
    padded head dim ``d``: "auto" picks :data:`BWD_TILES_AUTO`'s."""
    name = BWD_TILES if name is None else name
    tiles = BWD_TILE_VARIANTS.get(BWD_TILES_AUTO[d] if name == "auto" else name)
    if tiles is None:
        raise ValueError(
            f"attention: BWD_TILES is {name!r}; expected 'auto' or one of "
            f"{', '.join(BWD_TILE_VARIANTS)}"
        )
    return tiles


def dkdv_smem(tiles: BwdTiles, d: int, fused: bool) -> int:
    """Dynamic shared memory (bytes) of the tensor-core dK/dV kernel, or the fused one, at
    padded head dim ``d`` (``dkdv_smem_bytes`` in attention.cu; the kernels trap when given
    less): K and V tiles; Q and dO tiles and the float32 lse and D rows, two buffers each; the
    fused one's dS tile."""
    n, m, ld = tiles.keys, tiles.queries, d + 8
    elems = (2 * n + 4 * m) * ld + (m * (n + 8) if fused else 0)
    return elems * 2 + 4 * m * 4


def kernel_names(
    dtype: str, e: int, causal: bool, bwd_tile_variant: str | None = None
) -> dict[str, str]:
    """Name expressions of the kernels one (dtype, head dim, causal) case uses; the 16-bit
    backward's with the tiles of ``bwd_tile_variant`` (default: :data:`BWD_TILES`).

    float16 / bfloat16 also get ``"fwd_alt"``: the tensor-core forward that
    :data:`FWD_ROWS_PER_WARP` does not select, ``"bwd_fused"`` and ``"dq_finish"``: the fused
    backward (see :data:`BWD_FUSED_DQ`). float32 / float64 also get ``"fwd_alt"``,
    ``"dkdv_alt"`` and ``"dq_alt"``: the scalar kernels :data:`SIMT_TILED` does not select, and
    ``"bwd_fused"`` and ``"dq_finish"``: the fused tiled backward (:data:`SIMT_FUSED_DQ`).
    """
    t, d, c = CTYPE[dtype], padded_head_dim(e), "true" if causal else "false"
    kind = "tc" if dtype in _TC else "simt"
    acc = "double" if dtype == "float64" else "float"
    fwd = f"ignis::attn::flash_fwd_{kind}<{t}, {d}, {c}>"
    dkdv = f"ignis::attn::flash_bwd_dkdv_{kind}<{t}, {d}, {c}>"
    dq = f"ignis::attn::flash_bwd_dq_{kind}<{t}, {d}, {c}>"
    extra = {}
    if kind == "tc":
        wide = f"ignis::attn::flash_fwd_tc_m32<{t}, {d}, {c}>"
        fwd, extra["fwd_alt"] = (wide, fwd) if FWD_ROWS_PER_WARP == 32 else (fwd, wide)
        tiles = bwd_tiles(bwd_tile_variant, d).template_args(d)
        dkdv = f"ignis::attn::flash_bwd_dkdv_tc<{t}, {d}, {c}, {tiles}>"
        extra["bwd_fused"] = f"ignis::attn::flash_bwd_fused_tc<{t}, {d}, {c}, {tiles}>"
        extra["dq_finish"] = f"ignis::attn::attn_dq_finish<{t}>"
        if d in WGMMA_TILES:  # (the Hopper forward's tiles depend on the call: wgmma_fwd_name)
            extra["bwd_fused_wgmma"] = (
                f"ignis::attn::flash_bwd_fused_wgmma<{t}, {d}, {c}, {_WG_BWD_QUERIES}>"
            )
    else:
        tiled = tiled_kernel_names(dtype, e, causal)
        old = {"fwd": fwd, "dkdv": dkdv, "dq": dq}
        new, alt = (tiled, old) if SIMT_TILED else (old, tiled)
        fwd, dkdv, dq = new["fwd"], new["dkdv"], new["dq"]
        extra = {f"{key}_alt": alt[key] for key in ("fwd", "dkdv", "dq")}
        extra["bwd_fused"], extra["dq_finish"] = tiled["fused"], tiled["dq_finish"]
    return {
        "fwd": fwd,
        **extra,
        "dkdv": dkdv,
        "dq": dq,
        "rowdot": f"ignis::attn::attn_row_dot<{t}, {acc}>",
        "decode": f"ignis::attn::decode_partial<{t}, {acc}, {d}>",
        "combine": f"ignis::attn::decode_combine<{t}, {acc}>",
    }


#: ``ignis::attn::Layout``: the head count, then (batch, head, row) element strides of q, k, v,
#: out, grad_out, dq, dk and dv.
LAYOUT = struct.Struct("<25q")
_UNUSED = (0, 0, 0)


def _strides(a: NvArray) -> tuple[int, int, int]:
    """Element strides of the batch, head and row dims of a 4-D view (0 for a dim of size 1:
    never stepped, so it cannot spoil the alignment)."""
    shape, st, item = a.shape, a.strides, a.itemsize
    return (
        st[0] // item if shape[0] != 1 else 0,
        st[1] // item if shape[1] != 1 else 0,
        st[2] // item if shape[2] != 1 else 0,
    )


def layout(
    heads: int,
    q: NvArray | None = None,
    k: NvArray | None = None,
    v: NvArray | None = None,
    out: NvArray | None = None,
    grad_out: NvArray | None = None,
    dq: NvArray | None = None,
    dk: NvArray | None = None,
    dv: NvArray | None = None,
) -> bytes:
    """The packed ``Layout`` argument of the attention kernels (operands left out: zeros).

    Example: ``layout(4, q, k, v, out)`` for a forward over 4 heads.
    """
    values = [heads]
    for a in (q, k, v, out, grad_out, dq, dk, dv):
        values.extend(_UNUSED if a is None else _strides(a))
    return LAYOUT.pack(*values)


def _check_heads(bh: int) -> None:
    """The kernels split the flat head index with 32-bit arithmetic."""
    if bh >= 2**31:
        raise ValueError(f"attention: {bh} (batch, head) pairs; the kernels take fewer than 2**31")


def _launch(backend: Any, name: str, grid: Any, block: int, args: list[Any], smem: int = 0) -> None:
    if "_wgmma<" in name:  # wgmma needs the architecture-specific build
        kernel = library_kernel(SOURCE_SM90, name, backend.gpu, arch="sm_90a")
    else:
        kernel = library_kernel(SOURCE, name, backend.gpu)
    kernel.launch(grid, block, args, shared_mem=smem, stream=backend.stream)


def uses_wgmma_forward(dtype: str, e: int, device: Any) -> bool:
    """Whether the forward of (dtype, head dim ``e``) on ``device`` runs ``flash_fwd_wgmma``:
    float16 / bfloat16, padded head dim 64 or 128, compute capability 9.0 and
    :data:`FWD_WGMMA` (for operands TMA can read: :func:`_tma_ready`)."""
    return FWD_WGMMA and _hopper_case(dtype, e, device)


def _hopper_case(dtype: str, e: int, device: Any) -> bool:
    """float16 / bfloat16 at padded head dim 64 or 128 on compute capability 9.0."""
    return (
        dtype in _TC and padded_head_dim(e) in WGMMA_TILES and device.compute_capability == (9, 0)
    )


def uses_wgmma_backward(dtype: str, e: int, device: Any) -> bool:
    """Whether the fused backward of (dtype, head dim ``e``) on ``device`` runs
    ``flash_bwd_fused_wgmma`` (:data:`BWD_WGMMA`; the cases of :func:`uses_wgmma_forward`)."""
    return BWD_WGMMA and _hopper_case(dtype, e, device)


def wgmma_bwd_smem(d: int) -> int:
    """Dynamic shared memory (bytes) of ``flash_bwd_fused_wgmma`` at padded head dim ``d``: the
    K and V tiles, Q and dO tiles and the float32 lse and D rows two buffers each, the dS^T tile,
    three mbarriers (64 bytes), plus 1024 bytes to align the swizzled tiles."""
    n, m = _WG_BWD_KEYS, _WG_BWD_QUERIES
    return 1024 + (2 * n * d + 4 * m * d + n * m) * 2 + 4 * m * 4 + 64


def wgmma_fwd_tiles(d: int, causal: bool, n_q: int) -> tuple[int, int]:
    """(warpgroups per block, keys per tile) of ``flash_fwd_wgmma`` at padded head dim ``d`` for
    ``n_q`` queries: :data:`WGMMA_TILES`, or :data:`WGMMA_SHORT_CAUSAL_TILES` where they apply."""
    short = WGMMA_SHORT_CAUSAL_TILES.get(d)
    if causal and short is not None and n_q <= short[0]:
        return short[1]
    return WGMMA_TILES[d]


def wgmma_fwd_name(dtype: str, d: int, causal: bool, tiles: tuple[int, int]) -> str:
    """Name expression of ``flash_fwd_wgmma`` with ``tiles`` = (warpgroups, keys per tile)."""
    c = "true" if causal else "false"
    return f"ignis::attn::flash_fwd_wgmma<{CTYPE[dtype]}, {d}, {c}, {tiles[0]}, {tiles[1]}>"


def wgmma_fwd_smem(d: int, tiles: tuple[int, int]) -> int:
    """Dynamic shared memory (bytes) of ``flash_fwd_wgmma`` at padded head dim ``d`` with
    ``tiles`` (:func:`wgmma_fwd_tiles`): the Q tile, two K and three V tile buffers, 16-bit,
    their mbarriers, plus 1024 bytes to align the swizzled tiles."""
    groups, keys = tiles
    return 1024 + (64 * groups + (_WG_FWD_KBUF + _WG_FWD_VBUF) * keys) * d * 2 + _WG_FWD_BARRIERS


def _tma_ready(e: int, *arrays: NvArray) -> bool:
    """Whether TMA copies can read the operands: what 16-byte row copies need (:func:`_vec`),
    and no dim of more than one element stepped by a stride of 0 or less (broadcast)."""
    return bool(_vec(e, *arrays)) and all(
        s > 0 or n == 1 for a in arrays for n, s in zip(a.shape[:3], a.strides[:3], strict=True)
    )


def _tma_map(backend: Any, a: NvArray, rows: int) -> bytes:
    """Tensor map of a (B, H, rows, E) operand of ``flash_fwd_wgmma``: dims (E, rows, H, B), one
    copy = 64 columns x ``rows`` rows of one head, 128-byte swizzle. A dim of one element is
    never stepped: its stride is any valid one."""
    b, h, n, e = a.shape
    strides = [s if size > 1 else 16 for size, s in zip((n, h, b), a.strides[2::-1], strict=True)]
    return tensor_map.tiled(
        backend.data_ptr(a), a.dtype.name, (e, n, h, b), strides, (64, rows, 1, 1)
    )


def _bh_chunks(bh: int):
    """(first bh, count) chunks that fit grid.y."""
    for start in range(0, bh, MAX_GRID_Y):
        yield start, min(MAX_GRID_Y, bh - start)


def _aligned16(a: NvArray) -> bool:
    """The first element and every stepped batch, head and row stride 16-byte aligned."""
    if a._backend.data_ptr(a) % 16:
        return False
    return all(s % 16 == 0 or n == 1 for n, s in zip(a.shape[:3], a.strides[:3], strict=True))


def _vec(e: int, *arrays: NvArray) -> int:
    """1 when rows can be copied in 16-byte pieces (E % 8 == 0 for the 16-bit types, 16-byte
    aligned bases and strides)."""
    if e % 8:
        return 0
    return int(all(_aligned16(a) for a in arrays))


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _vec_simt(e: int, itemsize: int, *arrays: NvArray) -> int:
    """1 when rows can be copied in 16-byte pieces (E elements a multiple of 16 bytes, 16-byte
    aligned bases and strides)."""
    if (e * itemsize) % 16:
        return 0
    return int(all(_aligned16(a) for a in arrays))


def tiled_smem(dtype: str, e: int, kind: str) -> int:
    """Dynamic shared memory (bytes) of a register-tiled scalar kernel ("fwd", "dq", "dkdv",
    "fused"); the kernels trap when given less."""
    d = tiled_head_dim(e)
    a, b, st, _ = SIMT_TILES[(dtype, d)][kind]
    ld, size = d + 4, 8 if dtype == "float64" else 4
    if kind == "fwd":  # Q tile, K and V tiles per stage, the probability tile
        n = a * ld + 2 * st * b * ld + a * (b + 4)
    elif kind == "dq":  # Q and dO tiles, K and V tiles per stage, the dS tile
        n = 2 * a * ld + 2 * st * b * ld + a * (b + 4)
    else:  # K and V tiles, Q and dO tiles per stage, P^T and dS^T tiles, lse and D per stage
        n = 2 * a * ld + 2 * st * b * ld + 2 * a * (b + 4) + 2 * st * b
        if kind == "fused":  # and the dS tile (queries x keys)
            n += b * (a + 4)
    return n * size


def forward(
    backend: Any,
    out: NvArray,
    lse: NvArray,
    q: NvArray,
    k: NvArray,
    v: NvArray,
    causal: bool,
    scale: float,
) -> None:
    b, h, n_q, e = q.shape
    n_k = k.shape[2]
    bh, d = b * h, padded_head_dim(e)
    _check_heads(bh)
    names = kernel_names(q.dtype.name, e, causal)
    ptr = backend.data_ptr
    lay = layout(h, q, k, v, out)
    wgmma = uses_wgmma_forward(q.dtype.name, e, backend.gpu) and _tma_ready(e, q, k, v)
    if wgmma:
        tiles = wgmma_fwd_tiles(d, causal, n_q)
        groups, keys = tiles
        maps = [_tma_map(backend, a, rows) for a, rows in ((q, 64 * groups), (k, keys), (v, keys))]
    for bh0, count in _bh_chunks(bh):
        if wgmma:  # tensor maps in place of q, k, v; no vec flag
            args = [*maps, ptr(out), ptr(lse), n_q, n_k, e, scale * LOG2E, bh0, lay]
            grid = (_ceil(n_q, 64 * groups), count)
            name = wgmma_fwd_name(q.dtype.name, d, causal, tiles)
            _launch(backend, name, grid, 128 * groups, args, wgmma_fwd_smem(d, tiles))
        elif q.dtype.name in _TC:
            bm = 4 * FWD_ROWS_PER_WARP  # 4 warps
            # K and V tiles, two buffers each; the 32-row kernel also stages the Q tile
            smem = (4 * _FWD_BN + (bm if bm == 128 else 0)) * (d + 8) * 2
            args = [
                ptr(q),
                ptr(k),
                ptr(v),
                ptr(out),
                ptr(lse),
                n_q,
                n_k,
                e,
                scale * LOG2E,
                _vec(e, q, k, v),
                bh0,
                lay,
            ]
            _launch(backend, names["fwd"], (_ceil(n_q, bm), count), _TC_THREADS, args, smem)
        elif SIMT_TILED:
            bm = SIMT_TILES[(q.dtype.name, tiled_head_dim(e))]["fwd"][0]
            smem = tiled_smem(q.dtype.name, e, "fwd")
            vec = _vec_simt(e, q.dtype.itemsize, q, k, v)
            args = [ptr(q), ptr(k), ptr(v), ptr(out), ptr(lse), n_q, n_k, e, scale * LOG2E, vec]
            args += [bh0, lay]
            _launch(backend, names["fwd"], (_ceil(n_q, bm), count), _TILED_THREADS, args, smem)
        else:
            smem = _SIMT_B * (3 * d + 1) * q.dtype.itemsize
            args = [ptr(q), ptr(k), ptr(v), ptr(out), ptr(lse), n_q, n_k, e, scale, bh0, lay]
            _launch(backend, names["fwd"], (_ceil(n_q, _SIMT_B), count), _SIMT_THREADS, args, smem)


def backward(
    backend: Any,
    dq: NvArray,
    dk: NvArray,
    dv: NvArray,
    grad_out: NvArray,
    q: NvArray,
    k: NvArray,
    v: NvArray,
    out: NvArray,
    lse: NvArray,
    causal: bool,
    scale: float,
) -> None:
    b, h, n_q, e = q.shape
    n_k = k.shape[2]
    bh, d = b * h, padded_head_dim(e)
    _check_heads(bh)
    tc = q.dtype.name in _TC
    variant = BWD_TILES  # read once: the names and the launch shapes must agree
    tiles = bwd_tiles(variant, d) if tc else None
    names = kernel_names(q.dtype.name, e, causal, variant)
    ptr = backend.data_ptr
    lay = layout(h, q, k, v, out, grad_out, dq, dk, dv)
    rows = bh * n_q
    dvec = _temp(backend, (rows,), lse.dtype)
    _launch(
        backend,
        names["rowdot"],
        _warp_rows_grid(rows),
        256,
        [ptr(grad_out), ptr(out), ptr(dvec), rows, n_q, e, lay],
    )
    if tc and BWD_FUSED_DQ:
        _backward_fused(backend, dq, dk, dv, grad_out, q, k, v, dvec, lse, names, tiles, scale, lay)
        return
    if not tc and SIMT_TILED:
        run = _backward_tiled_fused if SIMT_FUSED_DQ else _backward_tiled
        run(backend, dq, dk, dv, grad_out, q, k, v, dvec, lse, names, scale, lay)
        return
    inputs = _input_ptrs(backend, q, k, v, grad_out, lse, dvec)
    for bh0, count in _bh_chunks(bh):
        if tc:
            vec = _vec(e, q, k, v, grad_out)
            sizes = [n_q, n_k, e, scale, scale * LOG2E, vec, bh0, lay]
            smem = dkdv_smem(tiles, d, fused=False)
            args = [*inputs, ptr(dk), ptr(dv), *sizes]
            grid = (_ceil(n_k, tiles.keys), count)
            _launch(backend, names["dkdv"], grid, tiles.threads, args, smem)
            smem = 4 * _DQ_BN * (d + 8) * 2  # K and V tiles, two buffers each
            args = [*inputs, ptr(dq), *sizes]
            _launch(backend, names["dq"], (_ceil(n_q, _DQ_BM), count), _TC_THREADS, args, smem)
        else:
            sizes = [n_q, n_k, e, scale, bh0, lay]
            smem = _SIMT_B * (4 * d + 2) * q.dtype.itemsize
            args = [*inputs, ptr(dk), ptr(dv), *sizes]
            _launch(backend, names["dkdv"], (_ceil(n_k, _SIMT_B), count), _SIMT_THREADS, args, smem)
            args = [*inputs, ptr(dq), *sizes]
            _launch(backend, names["dq"], (_ceil(n_q, _SIMT_B), count), _SIMT_THREADS, args, smem)


def _input_ptrs(
    backend: Any, q: NvArray, k: NvArray, v: NvArray, grad_out: NvArray, lse: NvArray, dvec: NvArray
) -> list[int]:
    """The addresses every backward kernel takes first: q, k, v, dO, lse and D."""
    ptr = backend.data_ptr
    return [ptr(q), ptr(k), ptr(v), ptr(grad_out), ptr(lse), ptr(dvec)]


def _warp_rows_grid(rows: int) -> int:
    """Blocks of the one-warp-per-row kernels (attn_row_dot, attn_dq_finish): 8 rows a block."""
    return min(_ceil(rows, 8), 1 << 20)


def _finish_dq(
    backend: Any,
    names: dict[str, str],
    dq_acc: NvArray,
    dq: NvArray,
    rows: int,
    n_q: int,
    e: int,
    scale: float,
    lay: bytes,
) -> None:
    """Scale the summed dQ of a one-pass backward and round it into ``dq`` (in its layout)."""
    ptr = backend.data_ptr
    _launch(
        backend,
        names["dq_finish"],
        _warp_rows_grid(rows),
        256,
        [ptr(dq_acc), ptr(dq), rows, n_q, e, scale, lay],
    )


def _backward_fused(
    backend: Any,
    dq: NvArray,
    dk: NvArray,
    dv: NvArray,
    grad_out: NvArray,
    q: NvArray,
    k: NvArray,
    v: NvArray,
    dvec: NvArray,
    lse: NvArray,
    names: dict[str, str],
    tiles: BwdTiles,
    scale: float,
    lay: bytes,
) -> None:
    """dK, dV and float32 dQ sums in one pass over key blocks of ``tiles``, then dQ scaled and
    rounded."""
    b, h, n_q, e = q.shape
    n_k = k.shape[2]
    bh, d = b * h, padded_head_dim(e)
    ptr = backend.data_ptr
    n = bh * n_q * e
    dq_acc = _temp(backend, (n,), dt.float32)
    backend.fill(dq_acc, 0.0)
    sizes = [n_q, n_k, e, scale, scale * LOG2E]
    if uses_wgmma_backward(q.dtype.name, e, backend.gpu) and _tma_ready(e, q, k, v, grad_out):
        # q, k, v, grad_out as tensor maps (boxes of one query / key tile); no vec flag
        n, m = _WG_BWD_KEYS, _WG_BWD_QUERIES
        inputs = [_tma_map(backend, q, m), _tma_map(backend, k, n), _tma_map(backend, v, n)]
        inputs += [_tma_map(backend, grad_out, m), ptr(lse), ptr(dvec)]
        name, keys, threads = names["bwd_fused_wgmma"], n, 256
        smem = wgmma_bwd_smem(d)
    else:
        inputs = _input_ptrs(backend, q, k, v, grad_out, lse, dvec)
        sizes.append(_vec(e, q, k, v, grad_out))
        name, keys, threads = names["bwd_fused"], tiles.keys, tiles.threads
        smem = dkdv_smem(tiles, d, fused=True)
    for bh0, count in _bh_chunks(bh):
        args = [*inputs, ptr(dk), ptr(dv), ptr(dq_acc), *sizes, bh0, lay]
        _launch(backend, name, (_ceil(n_k, keys), count), threads, args, smem)
    _finish_dq(backend, names, dq_acc, dq, bh * n_q, n_q, e, scale, lay)


def _backward_tiled(
    backend: Any,
    dq: NvArray,
    dk: NvArray,
    dv: NvArray,
    grad_out: NvArray,
    q: NvArray,
    k: NvArray,
    v: NvArray,
    dvec: NvArray,
    lse: NvArray,
    names: dict[str, str],
    scale: float,
    lay: bytes,
) -> None:
    """float32 / float64: dK and dV per key block, then dQ per query block (register-tiled)."""
    b, h, n_q, e = q.shape
    n_k = k.shape[2]
    dtype = q.dtype.name
    tiles = SIMT_TILES[(dtype, tiled_head_dim(e))]
    ptr = backend.data_ptr
    vec = _vec_simt(e, q.dtype.itemsize, q, k, v, grad_out)
    common = _input_ptrs(backend, q, k, v, grad_out, lse, dvec)
    sizes = [n_q, n_k, e, scale, scale * LOG2E, vec]
    smem_kv, smem_q = tiled_smem(dtype, e, "dkdv"), tiled_smem(dtype, e, "dq")
    for bh0, count in _bh_chunks(b * h):
        grid = (_ceil(n_k, tiles["dkdv"][0]), count)
        args = [*common, ptr(dk), ptr(dv), *sizes, bh0, lay]
        _launch(backend, names["dkdv"], grid, _TILED_THREADS, args, smem_kv)
        grid = (_ceil(n_q, tiles["dq"][0]), count)
        args = [*common, ptr(dq), *sizes, bh0, lay]
        _launch(backend, names["dq"], grid, _TILED_THREADS, args, smem_q)


def _backward_tiled_fused(
    backend: Any,
    dq: NvArray,
    dk: NvArray,
    dv: NvArray,
    grad_out: NvArray,
    q: NvArray,
    k: NvArray,
    v: NvArray,
    dvec: NvArray,
    lse: NvArray,
    names: dict[str, str],
    scale: float,
    lay: bytes,
) -> None:
    """float32 / float64: dK, dV and dQ sums (in the dtype, by atomics) in one pass over key
    blocks (register-tiled), then dQ scaled into place."""
    b, h, n_q, e = q.shape
    n_k = k.shape[2]
    dtype = q.dtype.name
    bm = SIMT_TILES[(dtype, tiled_head_dim(e))]["fused"][0]
    ptr = backend.data_ptr
    rows = b * h * n_q
    dq_acc = _temp(backend, (rows * e,), q.dtype)
    backend.fill(dq_acc, 0.0)
    vec = _vec_simt(e, q.dtype.itemsize, q, k, v, grad_out)
    smem = tiled_smem(dtype, e, "fused")
    inputs = _input_ptrs(backend, q, k, v, grad_out, lse, dvec)
    sizes = [n_q, n_k, e, scale, scale * LOG2E, vec]
    for bh0, count in _bh_chunks(b * h):
        args = [*inputs, ptr(dk), ptr(dv), ptr(dq_acc), *sizes, bh0, lay]
        _launch(backend, names["bwd_fused"], (_ceil(n_k, bm), count), _TILED_THREADS, args, smem)
    _finish_dq(backend, names, dq_acc, dq, rows, n_q, e, scale, lay)


def decode_splits(bh: int, cache_len: int, sm_count: int) -> tuple[int, int]:
    """(splits, chunk): about two blocks per SM in all, at least 64 cache rows per block."""
    want = max(1, _ceil(2 * sm_count, bh))
    splits = max(1, min(want, _ceil(cache_len, _DECODE_MIN_CHUNK)))
    chunk = _ceil(cache_len, splits)
    return _ceil(cache_len, chunk), chunk


def decode(
    backend: Any,
    out: NvArray,
    q: NvArray,
    k_cache: NvArray,
    v_cache: NvArray,
    cache_len: int,
    scale: float,
) -> None:
    b, h, _, e = q.shape
    s_max = k_cache.shape[2]
    bh, d = b * h, padded_head_dim(e)
    names = kernel_names(q.dtype.name, e, False)
    acc = dt.float64 if q.dtype == dt.float64 else dt.float32
    splits, chunk = decode_splits(bh, cache_len, backend.gpu.multiprocessor_count)
    ptr = backend.data_ptr
    part_m = _temp(backend, (bh * splits,), acc)
    part_l = _temp(backend, (bh * splits,), acc)
    part_o = _temp(backend, (bh * splits * d,), acc)
    for bh0, count in _bh_chunks(bh):
        # The decode kernels index from bh = blockIdx.y: offset the pointers per chunk.
        qo, co = bh0 * e * q.dtype.itemsize, bh0 * s_max * e * q.dtype.itemsize
        po = bh0 * splits * acc.itemsize
        _launch(
            backend,
            names["decode"],
            (splits, count),
            _DECODE_THREADS,
            [
                ptr(q) + qo,
                ptr(k_cache) + co,
                ptr(v_cache) + co,
                ptr(part_m) + po,
                ptr(part_l) + po,
                ptr(part_o) + po * d,
                s_max,
                cache_len,
                chunk,
                e,
                scale,
            ],
        )
        _launch(
            backend,
            names["combine"],
            count,
            _DECODE_THREADS,
            [ptr(part_m) + po, ptr(part_l) + po, ptr(part_o) + po * d, ptr(out) + qo, splits, d, e],
        )
