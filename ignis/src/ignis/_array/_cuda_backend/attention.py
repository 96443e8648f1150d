"""Fused attention on the CUDA backend (kernels in ``cuda_src/attention.cu``).

The kernels read ``q``, ``k``, ``v``, ``out`` and ``grad_out`` and write ``out``, ``dq``, ``dk``
and ``dv`` in place through their strides: every one is a (B, H, rows, E) view whose last dim is
contiguous, the batch, head and row strides are passed in one ``Layout`` struct per launch (see
:func:`layout`), so heads sliced out of a packed projection need no gather or scatter copies.
``lse`` and the float32 scratch rows are contiguous. Rows are copied in 16-byte pieces only
where the bases and every stride are 16-byte aligned (:func:`_vec`). float16 and
bfloat16 run the tensor-core kernels, float32 and float64 the scalar ones; each is instantiated
for the smallest padded head dim in :data:`HEAD_DIMS` that holds ``E``.

Which kernels and tiles run is chosen by the ``attention`` settings of ``ignis.tuning``
(:class:`ignis._tuning.AttentionSettings`), read once per call; the kernel names of a case are
remembered per (dtype, head dim, causal, settings) in :data:`_plans`. The tensor-core forward
gives each warp ``fwd_rows_per_warp`` queries: 32 (two m16 tiles sharing every K and V
fragment, 128 queries per block) by default, 16 (64 per block) for the simpler kernel. On a
Hopper GPU (compute capability 9.0) at padded head dims 64 and 128 the forward and the fused
backward are instead ``flash_fwd_wgmma`` and ``flash_bwd_fused_wgmma`` (``attention_sm90.cu``,
warpgroup MMA, settings ``fwd_wgmma``, ``bwd_wgmma``, tiles ``wgmma_tiles``), whose q, k, v and
grad_out tiles the TMA unit copies through tensor maps (:func:`_tma_map`; where TMA cannot read
an operand, see :func:`_tma_ready`, the ``mma.sync`` kernels run instead). The backward pass
starts with ``D = rowsum(dO * O)``. With ``bwd_fused_dq`` (the default) the tensor-core
backward is then one pass over key blocks that writes dK and dV and adds dQ into a zero-filled
float32 buffer with atomics (five matrix products per tile pair instead of seven), and a last
launch scales and rounds dQ; the float32 sums of dQ then depend on the order of the atomics.
Without it, dK/dV per key block and dQ per query block are two passes (deterministic). Both take
the dK/dV tiles (keys per block, queries per tile, warps) of the :data:`BWD_TILE_VARIANTS` entry
that ``bwd_tiles`` names. float32 / float64 run the register-tiled scalar kernels
(``flash_*_simt_tiled``: tiles per (dtype, head dim) in ``simt_tiles``) unless ``simt_tiled``
is False, which selects the first scalar kernels (``flash_*_simt``). Their backward is the same
two passes, or with ``simt_fused_dq`` one pass over key blocks that adds dQ into a zero-filled
buffer of the input's dtype with atomics, then the same last launch. The tensor-core kernels
copy the next tiles with ``cp.async`` into a second shared-memory buffer while they compute on
the first. Decode attention splits the cache over enough blocks to fill the GPU and merges the
partial softmax states in a second launch.

Dropout (``dropout=`` of :func:`forward` and :func:`backward`, an
:class:`ignis._array._attention_dropout.AttentionDropout`) runs the ``*_dropout`` twin of each
attention kernel (:func:`dropout_name`; the same body with the dropout compiled in), which takes
one more argument after ``Layout``: the packed ``Dropout`` struct (:func:`pack_dropout`). The
kernels draw each element's keep bit from the Philox stream in registers, forward and backward,
so no mask is stored; inside a captured graph the struct points at the draw's device state.
"""

from __future__ import annotations

import struct
import sys
from typing import TYPE_CHECKING, Any

from ... import _dtypes as dt
from ... import _tensor_map as tensor_map
from ... import _tuning
from ..._caches import PlanCache
from ..._tuning import BWD_TILE_VARIANTS, AttentionSettings, BwdTiles
from ._kernels import CTYPE, library_kernel
from .reduction import _temp

if TYPE_CHECKING:
    from ..array import NvArray

__all__ = [
    "forward",
    "backward",
    "dropout_name",
    "dropout_kernel_names",
    "pack_dropout",
    "DROPOUT",
    "decode",
    "kernel_names",
    "layout",
    "LAYOUT",
    "HEAD_DIMS",
    "BWD_TILE_VARIANTS",
    "BwdTiles",
]

SOURCE = "attention.cu"
SOURCE_SM90 = "attention_sm90.cu"
HEAD_DIMS = (32, 64, 96, 128)
LOG2E = 1.4426950408889634
MAX_GRID_Y = 65535

_TC = ("float16", "bfloat16")

# Tile shapes of the kernels (must match attention.cu).
_TC_THREADS, _SIMT_THREADS, _SIMT_B = 128, 256, 32
_FWD_BN = 64
# Padded head dims of the Hopper kernels (attention_sm90.cu's static_asserts on D).
_WGMMA_HEAD_DIMS = (64, 128)
_WG_BWD_KEYS, _WG_BWD_QUERIES = 128, 64
# flash_fwd_wgmma's K and V tile buffers (FWD_KBUF, FWD_VBUF in attention_sm90.cu) and the bytes
# of its 11 mbarriers, rounded up
_WG_FWD_KBUF, _WG_FWD_VBUF, _WG_FWD_BARRIERS = 2, 3, 128
_DQ_BM, _DQ_BN = 64, 32
_DECODE_THREADS, _DECODE_MIN_CHUNK = 128, 64
_TILED_THREADS = 256

# Kernel names of a case, by (dtype, head dim, causal, the attention settings).
_plans = PlanCache(
    "cuda.attention.plans",
    1024,
    "dtype, head dim, causal and the attention settings -> the case's kernel names",
)


def _settings(tune: AttentionSettings | None) -> AttentionSettings:
    return _tuning.current.attention if tune is None else tune


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


def tiled_kernel_names(
    dtype: str, e: int, causal: bool, tune: AttentionSettings | None = None
) -> dict[str, str]:
    """Name expressions of the register-tiled scalar kernels (float32 / float64): "fwd",
    "dkdv", "dq", and "fused" and "dq_finish" of the fused backward (``simt_fused_dq``), with
    the ``simt_tiles`` of ``tune`` (default: the attention settings in force)."""
    t, d, c = CTYPE[dtype], tiled_head_dim(e), "true" if causal else "false"
    tiles = _settings(tune).simt_tiles[(dtype, d)]
    kinds = (("fwd", "fwd"), ("dkdv", "bwd_dkdv"), ("dq", "bwd_dq"), ("fused", "bwd_fused"))
    names = {
        kind: f"ignis::attn::flash_{what}_simt_tiled<{t}, {d}, {c}, {a}, {b}, {st}, {minb}>"
        for kind, what in kinds
        for a, b, st, minb in [tiles[kind]]
    }
    names["dq_finish"] = f"ignis::attn::attn_dq_finish<{t}, {t}>"
    return names


def bwd_tiles(name: str | None, d: int, tune: AttentionSettings | None = None) -> BwdTiles:
    """The tile variant ``name`` (None: the ``bwd_tiles`` setting of ``tune``, default the
    attention settings in force) of :data:`BWD_TILE_VARIANTS` at padded head dim ``d``:
    "auto" picks ``bwd_tiles_auto``'s."""
    tune = _settings(tune)
    name = tune.bwd_tiles if name is None else name
    tiles = BWD_TILE_VARIANTS.get(tune.bwd_tiles_auto[d] if name == "auto" else name)
    if tiles is None:
        raise ValueError(
            f"attention: bwd_tiles is {name!r}; expected 'auto' or one of "
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


def _names(dtype: str, e: int, causal: bool, tune: AttentionSettings) -> dict[str, str]:
    """:func:`kernel_names` of a case under ``tune``, remembered (a plan of :data:`_plans`)."""
    key = (dtype, e, causal, tune)
    names = _plans.get(key)
    if names is None:
        return _plans.remember(key, kernel_names(dtype, e, causal, None, tune))  # type: ignore[return-value]
    _plans.hits += 1
    return names


def kernel_names(
    dtype: str,
    e: int,
    causal: bool,
    bwd_tile_variant: str | None = None,
    tune: AttentionSettings | None = None,
) -> dict[str, str]:
    """Name expressions of the kernels one (dtype, head dim, causal) case uses under the
    attention settings ``tune`` (default: those in force; pure, no GPU needed); the 16-bit
    backward's with the tiles of ``bwd_tile_variant`` (default: the ``bwd_tiles`` setting).

    float16 / bfloat16 also get ``"fwd_alt"``: the tensor-core forward that
    ``fwd_rows_per_warp`` does not select, ``"bwd_fused"`` and ``"dq_finish"``: the fused
    backward (see ``bwd_fused_dq``). float32 / float64 also get ``"fwd_alt"``,
    ``"dkdv_alt"`` and ``"dq_alt"``: the scalar kernels ``simt_tiled`` does not select, and
    ``"bwd_fused"`` and ``"dq_finish"``: the fused tiled backward (``simt_fused_dq``).

    Example: ``kernel_names("float32", 64, False)["fwd"]`` names ``flash_fwd_simt_tiled``.
    """
    tune = _settings(tune)
    t, d, c = CTYPE[dtype], padded_head_dim(e), "true" if causal else "false"
    kind = "tc" if dtype in _TC else "simt"
    acc = "double" if dtype == "float64" else "float"
    fwd = f"ignis::attn::flash_fwd_{kind}<{t}, {d}, {c}>"
    dkdv = f"ignis::attn::flash_bwd_dkdv_{kind}<{t}, {d}, {c}>"
    dq = f"ignis::attn::flash_bwd_dq_{kind}<{t}, {d}, {c}>"
    extra = {}
    if kind == "tc":
        wide = f"ignis::attn::flash_fwd_tc_m32<{t}, {d}, {c}>"
        fwd, extra["fwd_alt"] = (wide, fwd) if tune.fwd_rows_per_warp == 32 else (fwd, wide)
        tiles = bwd_tiles(bwd_tile_variant, d, tune).template_args(d)
        dkdv = f"ignis::attn::flash_bwd_dkdv_tc<{t}, {d}, {c}, {tiles}>"
        extra["bwd_fused"] = f"ignis::attn::flash_bwd_fused_tc<{t}, {d}, {c}, {tiles}>"
        extra["dq_finish"] = f"ignis::attn::attn_dq_finish<{t}>"
        if d in _WGMMA_HEAD_DIMS:  # (the Hopper forward's tiles depend on the call)
            extra["bwd_fused_wgmma"] = (
                f"ignis::attn::flash_bwd_fused_wgmma<{t}, {d}, {c}, {_WG_BWD_QUERIES}>"
            )
    else:
        tiled = tiled_kernel_names(dtype, e, causal, tune)
        old = {"fwd": fwd, "dkdv": dkdv, "dq": dq}
        new, alt = (tiled, old) if tune.simt_tiled else (old, tiled)
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


#: The kernels of :func:`kernel_names` without a dropout twin (no probabilities in them).
_NO_DROPOUT = ("rowdot", "decode", "combine", "dq_finish")


def dropout_kernel_names(
    dtype: str, e: int, causal: bool, tune: AttentionSettings | None = None
) -> dict[str, str]:
    """The dropout twins (:func:`dropout_name`) of the attention kernels of
    :func:`kernel_names` for one case, keyed alike (the ``*_wgmma`` ones build from
    ``attention_sm90.cu``); pure, no GPU needed.

    Example: ``dropout_kernel_names("float32", 64, False)["fwd"]`` names
    ``flash_fwd_simt_tiled_dropout``.
    """
    names = kernel_names(dtype, e, causal, None, tune)
    return {key: dropout_name(n) for key, n in names.items() if key not in _NO_DROPOUT}


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


#: ``ignis::attn::Dropout``: the state pointer (0: none), the offset, the key words k0, k1, the
#: keep threshold, a pad word, the scale 1 / (1 - p) as a double (40 bytes).
DROPOUT = struct.Struct("<QQIIIId")


def dropout_name(name: str) -> str:
    """The name expression of ``name``'s dropout twin: ``flash_fwd_tc<...>`` ->
    ``flash_fwd_tc_dropout<...>``."""
    head, sep, args = name.partition("<")
    return f"{head}_dropout{sep}{args}"


def pack_dropout(backend: Any, drop: Any) -> bytes:
    """The packed ``Dropout`` argument of an :class:`AttentionDropout` ``drop``: its stream as
    values, or (graph capture) the address of its device state and its offset from the base."""
    if drop.state is not None:
        state, seed, offset = backend.data_ptr(drop.state), 0, drop.offset
    else:
        state, seed, offset = 0, drop.seed, drop.offset
    k0, k1 = seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF
    mask = 0xFFFFFFFFFFFFFFFF
    return DROPOUT.pack(state, offset & mask, k0, k1, drop.threshold, 0, drop.scale)


def _check_heads(bh: int) -> None:
    """The kernels split the flat head index with 32-bit arithmetic."""
    if bh >= 2**31:
        raise ValueError(f"attention: {bh} (batch, head) pairs; the kernels take fewer than 2**31")


def _launch(
    backend: Any,
    name: str,
    grid: Any,
    block: int,
    args: list[Any],
    smem: int = 0,
    drop: bytes | None = None,
) -> None:
    """Launch ``name``; with ``drop`` (a packed ``Dropout``) its dropout twin, ``drop`` last."""
    if drop is not None:
        name, args = dropout_name(name), [*args, drop]
    if "_wgmma" in name.partition("<")[0]:  # wgmma needs the architecture-specific build
        kernel = library_kernel(SOURCE_SM90, name, backend.gpu, arch="sm_90a")
    else:
        kernel = library_kernel(SOURCE, name, backend.gpu)
    kernel.launch(grid, block, args, shared_mem=smem, stream=backend.stream)


def uses_wgmma_forward(
    dtype: str, e: int, device: Any, tune: AttentionSettings | None = None
) -> bool:
    """Whether the forward of (dtype, head dim ``e``) on ``device`` runs ``flash_fwd_wgmma``:
    float16 / bfloat16, padded head dim 64 or 128, compute capability 9.0 and the
    ``fwd_wgmma`` setting (for operands TMA can read: :func:`_tma_ready`)."""
    return _settings(tune).fwd_wgmma and _hopper_case(dtype, e, device)


def _hopper_case(dtype: str, e: int, device: Any) -> bool:
    """float16 / bfloat16 at padded head dim 64 or 128 on compute capability 9.0."""
    return (
        dtype in _TC
        and padded_head_dim(e) in _WGMMA_HEAD_DIMS
        and device.compute_capability == (9, 0)
    )


def uses_wgmma_backward(
    dtype: str, e: int, device: Any, tune: AttentionSettings | None = None
) -> bool:
    """Whether the fused backward of (dtype, head dim ``e``) on ``device`` runs
    ``flash_bwd_fused_wgmma`` (the ``bwd_wgmma`` setting; the cases of
    :func:`uses_wgmma_forward`)."""
    return _settings(tune).bwd_wgmma and _hopper_case(dtype, e, device)


def wgmma_bwd_smem(d: int) -> int:
    """Dynamic shared memory (bytes) of ``flash_bwd_fused_wgmma`` at padded head dim ``d``: the
    K and V tiles, Q and dO tiles and the float32 lse and D rows two buffers each, the dS^T tile,
    three mbarriers (64 bytes), plus 1024 bytes to align the swizzled tiles."""
    n, m = _WG_BWD_KEYS, _WG_BWD_QUERIES
    return 1024 + (2 * n * d + 4 * m * d + n * m) * 2 + 4 * m * 4 + 64


def wgmma_fwd_tiles(
    d: int, causal: bool, n_q: int, tune: AttentionSettings | None = None
) -> tuple[int, int]:
    """(warpgroups per block, keys per tile) of ``flash_fwd_wgmma`` at padded head dim ``d`` for
    ``n_q`` queries under ``tune`` (default: the attention settings in force): its
    ``wgmma_tiles``, or ``wgmma_short_causal_tiles`` where they apply (pure, no GPU needed).

    Example: ``wgmma_fwd_tiles(64, True, 1024) == (2, 128)`` with the defaults."""
    tune = _settings(tune)
    short = tune.wgmma_short_causal_tiles.get(d)
    if causal and short is not None and n_q <= short[0]:
        return short[1]
    return tune.wgmma_tiles[d]


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


def tiled_smem(dtype: str, e: int, kind: str, tune: AttentionSettings | None = None) -> int:
    """Dynamic shared memory (bytes) of a register-tiled scalar kernel ("fwd", "dq", "dkdv",
    "fused") with the ``simt_tiles`` of ``tune`` (default: the attention settings in force);
    the kernels trap when given less."""
    d = tiled_head_dim(e)
    a, b, st, _ = _settings(tune).simt_tiles[(dtype, d)][kind]
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


def _forward(
    backend: Any,
    out: NvArray,
    lse: NvArray,
    q: NvArray,
    k: NvArray,
    v: NvArray,
    causal: bool,
    scale: float,
    dropout: Any = None,
) -> None:
    """Both forward families (``dropout``: None for ``attention_forward``)."""
    b, h, n_q, e = q.shape
    n_k = k.shape[2]
    bh, d = b * h, padded_head_dim(e)
    _check_heads(bh)
    tune = _tuning.current.attention  # read once: the names and the launch shapes must agree
    names = _names(q.dtype.name, e, causal, tune)
    ptr = backend.data_ptr
    lay = layout(h, q, k, v, out)
    drop = None if dropout is None else pack_dropout(backend, dropout)
    wgmma = uses_wgmma_forward(q.dtype.name, e, backend.gpu, tune) and _tma_ready(e, q, k, v)
    if wgmma:
        tiles = wgmma_fwd_tiles(d, causal, n_q, tune)
        groups, keys = tiles
        maps = [_tma_map(backend, a, rows) for a, rows in ((q, 64 * groups), (k, keys), (v, keys))]
    for bh0, count in _bh_chunks(bh):
        if wgmma:  # tensor maps in place of q, k, v; no vec flag
            args = [*maps, ptr(out), ptr(lse), n_q, n_k, e, scale * LOG2E, bh0, lay]
            grid = (_ceil(n_q, 64 * groups), count)
            name = wgmma_fwd_name(q.dtype.name, d, causal, tiles)
            _launch(backend, name, grid, 128 * groups, args, wgmma_fwd_smem(d, tiles), drop)
        elif q.dtype.name in _TC:
            bm = 4 * tune.fwd_rows_per_warp  # 4 warps
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
            grid = (_ceil(n_q, bm), count)
            _launch(backend, names["fwd"], grid, _TC_THREADS, args, smem, drop)
        elif tune.simt_tiled:
            bm = tune.simt_tiles[(q.dtype.name, tiled_head_dim(e))]["fwd"][0]
            smem = tiled_smem(q.dtype.name, e, "fwd", tune)
            vec = _vec_simt(e, q.dtype.itemsize, q, k, v)
            args = [ptr(q), ptr(k), ptr(v), ptr(out), ptr(lse), n_q, n_k, e, scale * LOG2E, vec]
            args += [bh0, lay]
            grid = (_ceil(n_q, bm), count)
            _launch(backend, names["fwd"], grid, _TILED_THREADS, args, smem, drop)
        else:
            smem = _SIMT_B * (3 * d + 1) * q.dtype.itemsize
            args = [ptr(q), ptr(k), ptr(v), ptr(out), ptr(lse), n_q, n_k, e, scale, bh0, lay]
            grid = (_ceil(n_q, _SIMT_B), count)
            _launch(backend, names["fwd"], grid, _SIMT_THREADS, args, smem, drop)


def _backward(
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
    dropout: Any = None,
) -> None:
    """Both backward families (``dropout``: None for ``attention_backward``; else the same
    mask regenerated from the same stream)."""
    b, h, n_q, e = q.shape
    n_k = k.shape[2]
    bh, d = b * h, padded_head_dim(e)
    _check_heads(bh)
    tc = q.dtype.name in _TC
    tune = _tuning.current.attention  # read once: the names and the launch shapes must agree
    tiles = bwd_tiles(None, d, tune) if tc else None
    names = _names(q.dtype.name, e, causal, tune)
    ptr = backend.data_ptr
    lay = layout(h, q, k, v, out, grad_out, dq, dk, dv)
    drop = None if dropout is None else pack_dropout(backend, dropout)
    rows = bh * n_q
    dvec = _temp(backend, (rows,), lse.dtype)
    _launch(
        backend,
        names["rowdot"],
        _warp_rows_grid(rows),
        256,
        [ptr(grad_out), ptr(out), ptr(dvec), rows, n_q, e, lay],
    )
    if tc and tune.bwd_fused_dq:
        _backward_fused(
            backend, dq, dk, dv, grad_out, q, k, v, dvec, lse, names, tiles, scale, lay, tune, drop
        )
        return
    if not tc and tune.simt_tiled:
        run = _backward_tiled_fused if tune.simt_fused_dq else _backward_tiled
        run(backend, dq, dk, dv, grad_out, q, k, v, dvec, lse, names, scale, lay, tune, drop)
        return
    inputs = _input_ptrs(backend, q, k, v, grad_out, lse, dvec)
    for bh0, count in _bh_chunks(bh):
        if tc:
            vec = _vec(e, q, k, v, grad_out)
            sizes = [n_q, n_k, e, scale, scale * LOG2E, vec, bh0, lay]
            smem = dkdv_smem(tiles, d, fused=False)
            args = [*inputs, ptr(dk), ptr(dv), *sizes]
            grid = (_ceil(n_k, tiles.keys), count)
            _launch(backend, names["dkdv"], grid, tiles.threads, args, smem, drop)
            smem = 4 * _DQ_BN * (d + 8) * 2  # K and V tiles, two buffers each
            args = [*inputs, ptr(dq), *sizes]
            grid = (_ceil(n_q, _DQ_BM), count)
            _launch(backend, names["dq"], grid, _TC_THREADS, args, smem, drop)
        else:
            sizes = [n_q, n_k, e, scale, bh0, lay]
            smem = _SIMT_B * (4 * d + 2) * q.dtype.itemsize
            args = [*inputs, ptr(dk), ptr(dv), *sizes]
            grid = (_ceil(n_k, _SIMT_B), count)
            _launch(backend, names["dkdv"], grid, _SIMT_THREADS, args, smem, drop)
            args = [*inputs, ptr(dq), *sizes]
            grid = (_ceil(n_q, _SIMT_B), count)
            _launch(backend, names["dq"], grid, _SIMT_THREADS, args, smem, drop)


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
    tune: AttentionSettings,
    drop: bytes | None = None,
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
    wgmma = uses_wgmma_backward(q.dtype.name, e, backend.gpu, tune)
    if wgmma and _tma_ready(e, q, k, v, grad_out):
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
        _launch(backend, name, (_ceil(n_k, keys), count), threads, args, smem, drop)
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
    tune: AttentionSettings,
    drop: bytes | None = None,
) -> None:
    """float32 / float64: dK and dV per key block, then dQ per query block (register-tiled)."""
    b, h, n_q, e = q.shape
    n_k = k.shape[2]
    dtype = q.dtype.name
    tiles = tune.simt_tiles[(dtype, tiled_head_dim(e))]
    ptr = backend.data_ptr
    vec = _vec_simt(e, q.dtype.itemsize, q, k, v, grad_out)
    common = _input_ptrs(backend, q, k, v, grad_out, lse, dvec)
    sizes = [n_q, n_k, e, scale, scale * LOG2E, vec]
    smem_kv, smem_q = tiled_smem(dtype, e, "dkdv", tune), tiled_smem(dtype, e, "dq", tune)
    for bh0, count in _bh_chunks(b * h):
        grid = (_ceil(n_k, tiles["dkdv"][0]), count)
        args = [*common, ptr(dk), ptr(dv), *sizes, bh0, lay]
        _launch(backend, names["dkdv"], grid, _TILED_THREADS, args, smem_kv, drop)
        grid = (_ceil(n_q, tiles["dq"][0]), count)
        args = [*common, ptr(dq), *sizes, bh0, lay]
        _launch(backend, names["dq"], grid, _TILED_THREADS, args, smem_q, drop)


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
    tune: AttentionSettings,
    drop: bytes | None = None,
) -> None:
    """float32 / float64: dK, dV and dQ sums (in the dtype, by atomics) in one pass over key
    blocks (register-tiled), then dQ scaled into place."""
    b, h, n_q, e = q.shape
    n_k = k.shape[2]
    dtype = q.dtype.name
    bm = tune.simt_tiles[(dtype, tiled_head_dim(e))]["fused"][0]
    ptr = backend.data_ptr
    rows = b * h * n_q
    dq_acc = _temp(backend, (rows * e,), q.dtype)
    backend.fill(dq_acc, 0.0)
    vec = _vec_simt(e, q.dtype.itemsize, q, k, v, grad_out)
    smem = tiled_smem(dtype, e, "fused", tune)
    inputs = _input_ptrs(backend, q, k, v, grad_out, lse, dvec)
    sizes = [n_q, n_k, e, scale, scale * LOG2E, vec]
    for bh0, count in _bh_chunks(b * h):
        args = [*inputs, ptr(dk), ptr(dv), ptr(dq_acc), *sizes, bh0, lay]
        grid = (_ceil(n_k, bm), count)
        _launch(backend, names["bwd_fused"], grid, _TILED_THREADS, args, smem, drop)
    _finish_dq(backend, names, dq_acc, dq, rows, n_q, e, scale, lay)


def dropout_forward(
    backend: Any,
    out: NvArray,
    lse: NvArray,
    q: NvArray,
    k: NvArray,
    v: NvArray,
    causal: bool,
    scale: float,
    dropout: Any,
) -> None:
    """The ``attention_dropout_forward`` family: :func:`forward` with the dropout kernels."""
    _forward(backend, out, lse, q, k, v, causal, scale, dropout)


def dropout_backward(
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
    dropout: Any,
) -> None:
    """The ``attention_dropout_backward`` family: :func:`backward` with the dropout kernels."""
    _backward(backend, dq, dk, dv, grad_out, q, k, v, out, lse, causal, scale, dropout)


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
    names = _names(q.dtype.name, e, False, _tuning.current.attention)
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


# The module globals these settings replaced keep reading and setting them (deprecated).
_tuning.keep_module_names(sys.modules[__name__], "attention")


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
    """The ``attention_forward`` family."""
    _forward(backend, out, lse, q, k, v, causal, scale)


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
    """The ``attention_backward`` family."""
    _backward(backend, dq, dk, dv, grad_out, q, k, v, out, lse, causal, scale)
