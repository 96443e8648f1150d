"""Fused scaled dot-product attention and decode attention (front end).

``attention(q, k, v)`` computes ``softmax(q @ k^T * scale [+ causal mask]) @ v`` in one pass
per query block without materializing the ``(L, S)`` score matrix, and returns the per-query
log-sum-exp of the scaled scores that :func:`attention_backward` uses to recompute the
probabilities. Shapes: ``q`` is ``(B, H, L, E)``, ``k`` and ``v`` are ``(B, H, S, E)``, head dim
``E <= 128``.

Layouts: the arrays are read where they lie, through their strides, as long as the last dim is
contiguous (element stride 1): heads sliced out of a packed ``(B, T, 3, H, E)`` projection and
viewed as ``(B, H, T, E)`` cost no copy. Only an array whose last dim is strided is copied first.
Results can be written in place into views of the caller's buffers the same way: ``out=`` for
:func:`attention`, ``dq=``, ``dk=``, ``dv=`` for :func:`attention_backward` (for example the three
slots of one ``(B, T, 3, H, E)`` gradient, or an ``(B, T, H, E)`` buffer viewed as ``(B, H, T, E)``
so that the output reshapes to ``(B, T, H * E)`` for free).

Causal masking is aligned to the end: query ``i`` sees key ``j`` when ``j <= i + S - L`` (equal
to PyTorch's ``is_causal`` when ``L == S``; for ``L < S`` the queries continue a cached
prefix). A query that sees no key gets a zero output row and a log-sum-exp of ``-inf``.

dtypes: float16 and bfloat16 (tensor cores on CUDA, float32 accumulation, ``lse`` in float32),
float32 and float64 (exact arithmetic in the dtype, ``lse`` in the same dtype).

Dropout: ``dropout=`` (an :class:`AttentionDropout` from :func:`attention_dropout`) drops the
probabilities inside the fused kernels, PyTorch's way (before ``P @ V``, kept ones scaled by
``1 / (1 - p)``, ``lse`` of the undropped ones); each element's keep bit is drawn from the
``ignis.random`` Philox stream by its (batch * head, query, key) position, so the backward pass
given the same value regenerates the same mask and nothing of size L x S is ever stored (see
:mod:`ignis._array._attention_dropout` for the mapping, which the CPU backend reproduces bit for
bit).

Example::

    >>> import ignis, ignis.nn
    >>> q, k, v = (ignis.random.randn((2, 4, 128, 64)) for _ in range(3))
    >>> out, lse = ignis.nn.attention(q, k, v, causal=True)
    >>> dq, dk, dv = ignis.nn.attention_backward(out, q, k, v, out, lse, causal=True)
    >>> qkv = ignis.random.randn((2, 128, 3, 4, 64))          # (B, T, 3, H, E), packed
    >>> q, k, v = (qkv[:, :, i].permute(0, 2, 1, 3) for i in range(3))  # views, no copies
    >>> buf = ignis.empty((2, 128, 4, 64))                     # (B, T, H, E)
    >>> out, lse = ignis.nn.attention(q, k, v, out=buf.permute(0, 2, 1, 3))
    >>> y = buf.reshape(2, 128, 256)                            # heads merged, no copy
    >>> drop = ignis.nn.attention_dropout(0.1, q, k)           # from ignis.random
    >>> out, lse = ignis.nn.attention(q, k, v, dropout=drop)
    >>> dq, dk, dv = ignis.nn.attention_backward(out, q, k, v, out, lse, dropout=drop)
"""

from __future__ import annotations

import math
import operator
from typing import Any

from .. import _dtypes as dt
from .._errors import DeviceMismatchError, DTypeError, ShapeError
from . import _creation
from ._attention_dropout import AttentionDropout, draw
from ._ops import _overlaps
from .array import NvArray

__all__ = [
    "attention",
    "attention_backward",
    "attention_dropout",
    "AttentionDropout",
    "decode_attention",
    "MAX_HEAD_DIM",
]

#: The largest head dim the fused kernels take.
MAX_HEAD_DIM = 128

_FLOATS = (dt.float16, dt.bfloat16, dt.float32, dt.float64)


def _lse_dtype(dtype: dt.DType) -> dt.DType:
    """float32 for the 16-bit floats, else the input dtype."""
    return dt.float32 if dtype in (dt.float16, dt.bfloat16) else dtype


def _check_arrays(op: str, named: list[tuple[str, Any]]) -> None:
    """All NvArrays, 4-D, one floating dtype, one device."""
    first_name, first = named[0]
    for name, a in named:
        if not isinstance(a, NvArray):
            raise TypeError(f"{op}: {name} must be an NvArray, got {type(a).__name__}")
        if a.ndim != 4:
            raise ShapeError(
                f"{op}: {name} must be 4-D (batch, heads, seq, head_dim), got shape {a.shape}"
            )
        if a.dtype not in _FLOATS:
            raise DTypeError(
                f"{op}: {name} has dtype {a.dtype.name}; "
                "expected float16, bfloat16, float32 or float64"
            )
        if a.dtype != first.dtype:
            raise DTypeError(
                f"{op}: {name} is {a.dtype.name} but {first_name} is {first.dtype.name}"
            )
        if a.device != first.device:
            raise DeviceMismatchError(
                f"{op}: {name} is on {a.device} but {first_name} is on {first.device}"
            )


def _check_qkv(op: str, q: NvArray, k: NvArray, v: NvArray) -> None:
    b, h, _, e = q.shape
    if k.shape[:2] != (b, h) or v.shape[:2] != (b, h):
        raise ShapeError(f"{op}: batch and head dims differ: q {q.shape}, k {k.shape}, v {v.shape}")
    if k.shape[3] != e or v.shape[3] != e or k.shape[2] != v.shape[2]:
        raise ShapeError(
            f"{op}: expected q (B, H, L, E), k (B, H, S, E), v (B, H, S, E); got q {q.shape}, "
            f"k {k.shape}, v {v.shape}"
        )
    if e == 0:
        raise ShapeError(f"{op}: head dim is 0; expected 1 to {MAX_HEAD_DIM}")
    if e > MAX_HEAD_DIM:
        raise ShapeError(f"{op}: head dim {e} is larger than the supported {MAX_HEAD_DIM}")


def _scale(op: str, scale: Any, e: int) -> float:
    if scale is None:
        return 1.0 / math.sqrt(e) if e > 0 else 1.0
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise TypeError(f"{op}: scale must be a float or None, got {type(scale).__name__}")
    value = float(scale)
    if not math.isfinite(value):
        raise ValueError(f"{op}: scale must be finite, got {value}")
    return value


def _dense(a: NvArray) -> NvArray:
    return a if a.is_contiguous else a.contiguous()


def _rows_contiguous(a: NvArray) -> bool:
    """The last dim has element stride 1 (or one element) and every stride is whole elements:
    what the kernels index through."""
    st, item = a._strides, a._dtype.itemsize
    if a._shape[-1] != 1 and st[-1] != item:
        return False
    return all(s % item == 0 for s in st)


def _rows(a: NvArray) -> NvArray:
    """``a`` itself when the kernels can read it in place, else a dense copy."""
    return a if _rows_contiguous(a) else a.contiguous()


def _self_overlapping(a: NvArray) -> bool:
    """Whether two elements of ``a`` share memory (broadcast or interleaved strides): such a
    view cannot take results. Checked by ordering the dims by stride: each must step past all
    the dims inside it."""
    dims = sorted((abs(s), n) for n, s in zip(a._shape, a._strides, strict=True) if n > 1)
    reach = a._dtype.itemsize  # bytes spanned by the dims handled so far
    for stride, n in dims:
        if stride < reach:
            return True
        reach = stride * (n - 1) + reach
    return False


def _destination(
    op: str, name: str, a: Any, shape: tuple[int, ...], like: NvArray, reads: list[tuple[str, Any]]
) -> NvArray:
    """A caller's ``out=``/``dq=``/... view, checked: an NvArray of ``shape``, ``like``'s dtype
    and device, a contiguous last dim, no element twice, no memory shared with an input."""
    if not isinstance(a, NvArray):
        raise TypeError(f"{op}: {name} must be an NvArray or None, got {type(a).__name__}")
    if a.shape != shape:
        raise ShapeError(f"{op}: {name} has shape {a.shape}; expected {shape}")
    if a.dtype != like.dtype:
        raise DTypeError(f"{op}: {name} is {a.dtype.name}; expected {like.dtype.name}")
    if a.device != like.device:
        raise DeviceMismatchError(f"{op}: {name} is on {a.device}; expected {like.device}")
    if not _rows_contiguous(a):
        raise ValueError(
            f"{op}: {name} must have a contiguous last dim (element stride 1); got strides "
            f"{a.strides} (bytes) for shape {a.shape}"
        )
    if _self_overlapping(a):
        raise ValueError(
            f"{op}: {name} has strides {a.strides} (bytes) that reach some elements twice; "
            "results need a view of distinct elements"
        )
    for other, x in reads:
        if _overlaps(a, x):
            raise ValueError(
                f"{op}: {name} shares memory with {other}, which the op reads (their byte "
                "ranges overlap)"
            )
    return a


def attention_dropout(
    p: float,
    q: NvArray,
    k: NvArray,
    *,
    seed: int | None = None,
    offset: int | None = None,
    generator: Any = None,
) -> AttentionDropout | None:
    """The dropout of one :func:`attention` call of ``q`` (B, H, L, E) and ``k`` (B, H, S, E)
    with probability ``p`` in ``[0, 1]``, to pass as ``dropout=`` to the forward and the
    backward pass alike; None when ``p == 0`` (no dropout).

    Its mask comes from the Philox stream ``(seed, offset)`` (``offset`` in 128-bit blocks, as
    in :mod:`ignis.random`), or, when both are None, from ``generator`` (default: the global
    ``ignis.random`` stream), which advances by ``B * H * ceil(L / 2) * ceil(S / 2)`` blocks.
    Inside ``ignis.random.GraphDraws.capturing()`` the stream is the capture's device state, so
    that each replay of the graph draws a new mask.

    Example: ``drop = ignis.nn.attention_dropout(0.1, q, k, seed=7, offset=0)``.
    """
    op = "attention_dropout"
    for name, a in (("q", q), ("k", k)):
        if not isinstance(a, NvArray) or a.ndim != 4:
            got = a.shape if isinstance(a, NvArray) else type(a).__name__
            raise TypeError(f"{op}: {name} must be a 4-D NvArray (B, H, seq, E), got {got}")
    shape = (*q.shape[:3], k.shape[2])
    return draw(op, p, shape, q.device, seed=seed, offset=offset, generator=generator)


def _check_dropout(op: str, dropout: Any, q: NvArray) -> AttentionDropout | None:
    """``dropout`` is None or an AttentionDropout (p == 0 counts as None)."""
    if dropout is None:
        return None
    if not isinstance(dropout, AttentionDropout):
        raise TypeError(
            f"{op}: dropout must be an AttentionDropout (ignis.nn.attention_dropout) or None, "
            f"got {type(dropout).__name__}"
        )
    if not 0.0 <= dropout.p <= 1.0:
        raise ValueError(f"{op}: dropout.p must be in [0, 1], got {dropout.p}")
    if dropout.state is not None and dropout.state.device != q.device:
        raise DeviceMismatchError(
            f"{op}: dropout's state is on {dropout.state.device} but q is on {q.device}"
        )
    return dropout if dropout.p > 0.0 else None


def attention(
    q: NvArray,
    k: NvArray,
    v: NvArray,
    causal: bool = False,
    scale: float | None = None,
    *,
    out: NvArray | None = None,
    dropout: AttentionDropout | None = None,
) -> tuple[NvArray, NvArray]:
    """Fused attention: ``(out, lse)`` with ``out = softmax(q k^T * scale) v`` of shape
    ``(B, H, L, E)`` and ``lse`` (``(B, H, L)``) the natural-log sum of exp of the scaled scores
    of each query (over the keys it sees). ``scale`` defaults to ``1/sqrt(E)``.

    ``q``, ``k``, ``v`` may be strided views (a contiguous last dim is read in place). ``out``:
    a caller's ``(B, H, L, E)`` view of q's dtype and device with a contiguous last dim (any
    other strides) to write the result into; it is returned. ``dropout``: an
    :class:`AttentionDropout` (:func:`attention_dropout`) to drop the probabilities with, drawn
    inside the kernels; pass the same one to :func:`attention_backward`.

    Example: ``out, lse = ignis.nn.attention(q, k, v, causal=True)``.
    """
    op = "attention"
    _check_arrays(op, [("q", q), ("k", k), ("v", v)])
    _check_qkv(op, q, k, v)
    drop = _check_dropout(op, dropout, q)
    s = _scale(op, scale, q.shape[3])
    causal = bool(causal)
    b, h, n_q, e = q.shape
    if out is None:
        out = _creation.empty(q.shape, dtype=q.dtype, device=q.device)
    else:
        _destination(op, "out", out, q.shape, q, [("q", q), ("k", k), ("v", v)])
    lse = _creation.empty((b, h, n_q), dtype=_lse_dtype(q.dtype), device=q.device)
    if out.numel == 0:
        return out, lse
    if k.shape[2] == 0:  # no keys at all: every query sees nothing
        out.fill_(0.0)
        lse.fill_(float("-inf"))
        return out, lse
    if drop is not None:
        q._backend.kernels.attention_dropout_forward(
            out, lse, _rows(q), _rows(k), _rows(v), causal, s, drop
        )
        return out, lse
    q._backend.kernels.attention_forward(out, lse, _rows(q), _rows(k), _rows(v), causal, s)
    return out, lse


def attention_backward(
    grad_out: NvArray,
    q: NvArray,
    k: NvArray,
    v: NvArray,
    out: NvArray,
    lse: NvArray,
    causal: bool = False,
    scale: float | None = None,
    *,
    dq: NvArray | None = None,
    dk: NvArray | None = None,
    dv: NvArray | None = None,
    dropout: AttentionDropout | None = None,
) -> tuple[NvArray, NvArray, NvArray]:
    """Gradients ``(dq, dk, dv)`` of :func:`attention` for the output gradient ``grad_out``,
    from the forward's ``out`` and ``lse`` (the probabilities are recomputed, never stored).

    ``grad_out``, ``q``, ``k``, ``v`` and ``out`` may be strided views (a contiguous last dim is
    read in place). ``dq``, ``dk``, ``dv``: caller's views (shapes of q, k, v; q's dtype and
    device; contiguous last dim, any other strides) to write the gradients into, e.g. the three
    slots of one packed ``(B, T, 3, H, E)`` gradient; the ones not given are allocated. All
    three are returned. Overlap with an input is refused; the three must not overlap each other
    either (interleaved views of one buffer, as in that example, are fine). ``dropout``: the
    forward's :class:`AttentionDropout` (the same mask is drawn again).

    Example: ``dq, dk, dv = ignis.nn.attention_backward(g, q, k, v, out, lse, causal=True)``.
    """
    op = "attention_backward"
    _check_arrays(op, [("q", q), ("k", k), ("v", v), ("grad_out", grad_out), ("out", out)])
    _check_qkv(op, q, k, v)
    if grad_out.shape != q.shape or out.shape != q.shape:
        raise ShapeError(
            f"{op}: grad_out {grad_out.shape} and out {out.shape} must have q's shape {q.shape}"
        )
    want = _lse_dtype(q.dtype)
    if not isinstance(lse, NvArray):
        raise TypeError(f"{op}: lse must be an NvArray, got {type(lse).__name__}")
    if lse.shape != q.shape[:3]:
        raise ShapeError(f"{op}: lse has shape {lse.shape}; expected {q.shape[:3]}")
    if lse.dtype != want:
        raise DTypeError(
            f"{op}: lse is {lse.dtype.name}; expected {want.name} for {q.dtype.name} inputs"
        )
    if lse.device != q.device:
        raise DeviceMismatchError(f"{op}: lse is on {lse.device} but q is on {q.device}")
    s = _scale(op, scale, q.shape[3])
    drop = _check_dropout(op, dropout, q)
    reads = [("grad_out", grad_out), ("q", q), ("k", k), ("v", v), ("out", out), ("lse", lse)]
    grads = []
    for name, given, like in (("dq", dq, q), ("dk", dk, k), ("dv", dv, v)):
        if given is None:
            grads.append(_creation.empty(like.shape, dtype=q.dtype, device=q.device))
        else:
            grads.append(_destination(op, name, given, like.shape, q, reads))
    dq, dk, dv = grads
    if q.numel == 0 or k.numel == 0:  # no query-key pair: nothing flows anywhere
        for g in (dq, dk, dv):
            if g.numel:
                g.fill_(0.0)
        return dq, dk, dv
    args = (
        dq,
        dk,
        dv,
        _rows(grad_out),
        _rows(q),
        _rows(k),
        _rows(v),
        _rows(out),
        _dense(lse),  # lse is indexed as contiguous rows
        bool(causal),
        s,
    )
    if drop is not None:
        q._backend.kernels.attention_dropout_backward(*args, drop)
    else:
        q._backend.kernels.attention_backward(*args)
    return dq, dk, dv


def decode_attention(
    q: NvArray,
    k_cache: NvArray,
    v_cache: NvArray,
    cache_len: int,
    scale: float | None = None,
) -> NvArray:
    """Attention of one new query per (batch, head) over the first ``cache_len`` positions of a
    KV cache: ``q`` ``(B, H, 1, E)``, caches ``(B, H, S_max, E)``; returns ``(B, H, 1, E)``.
    Every cached position is visible (the new token's own key is expected in the cache). On
    CUDA the cache is split over many blocks whose partial results are merged (flash-decoding),
    so a single query per head still fills the GPU.

    Example: ``y = ignis.nn.decode_attention(q, k_cache, v_cache, cache_len=pos + 1)``.
    """
    op = "decode_attention"
    _check_arrays(op, [("q", q), ("k_cache", k_cache), ("v_cache", v_cache)])
    if q.shape[2] != 1:
        raise ShapeError(f"{op}: q must be (B, H, 1, E) (one query per head), got {q.shape}")
    _check_qkv(op, q, k_cache, v_cache)
    try:
        n = operator.index(cache_len)
    except TypeError:
        raise TypeError(f"{op}: cache_len must be an int, got {type(cache_len).__name__}") from None
    s_max = k_cache.shape[2]
    if not 0 <= n <= s_max:
        raise ValueError(f"{op}: cache_len {n} is outside [0, {s_max}] (the caches' length)")
    s = _scale(op, scale, q.shape[3])
    out = _creation.empty(q.shape, dtype=q.dtype, device=q.device)
    if out.numel == 0:
        return out
    if n == 0:
        out.fill_(0.0)
        return out
    q._backend.kernels.decode_attention(out, _dense(q), _dense(k_cache), _dense(v_cache), n, s)
    return out
