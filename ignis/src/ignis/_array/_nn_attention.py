"""Fused scaled dot-product attention and decode attention (front end).

``attention(q, k, v)`` computes ``softmax(q @ k^T * scale [+ causal mask]) @ v`` in one pass
per query block without materializing the ``(L, S)`` score matrix, and returns the per-query
log-sum-exp of the scaled scores that :func:`attention_backward` uses to recompute the
probabilities. Shapes: ``q`` is ``(B, H, L, E)``, ``k`` and ``v`` are ``(B, H, S, E)``, head dim
``E <= 128``; non-contiguous inputs are copied to contiguous ones first.

Causal masking is aligned to the end: query ``i`` sees key ``j`` when ``j <= i + S - L`` (equal
to PyTorch's ``is_causal`` when ``L == S``; for ``L < S`` the queries continue a cached
prefix). A query that sees no key gets a zero output row and a log-sum-exp of ``-inf``.

dtypes: float16 and bfloat16 (tensor cores on CUDA, float32 accumulation, ``lse`` in float32),
float32 and float64 (exact arithmetic in the dtype, ``lse`` in the same dtype).

Example::

    >>> import ignis, ignis.nn
    >>> q, k, v = (ignis.random.randn((2, 4, 128, 64)) for _ in range(3))
    >>> out, lse = ignis.nn.attention(q, k, v, causal=True)
    >>> dq, dk, dv = ignis.nn.attention_backward(out, q, k, v, out, lse, causal=True)
"""

from __future__ import annotations

import math
import operator
from typing import Any

from .. import _dtypes as dt
from .._errors import DeviceMismatchError, DTypeError, ShapeError
from . import _creation
from .array import NvArray

__all__ = ["attention", "attention_backward", "decode_attention", "MAX_HEAD_DIM"]

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


def attention(
    q: NvArray, k: NvArray, v: NvArray, causal: bool = False, scale: float | None = None
) -> tuple[NvArray, NvArray]:
    """Fused attention: ``(out, lse)`` with ``out = softmax(q k^T * scale) v`` of shape
    ``(B, H, L, E)`` and ``lse`` (``(B, H, L)``) the natural-log sum of exp of the scaled scores
    of each query (over the keys it sees). ``scale`` defaults to ``1/sqrt(E)``.

    Example: ``out, lse = ignis.nn.attention(q, k, v, causal=True)``.
    """
    op = "attention"
    _check_arrays(op, [("q", q), ("k", k), ("v", v)])
    _check_qkv(op, q, k, v)
    s = _scale(op, scale, q.shape[3])
    causal = bool(causal)
    b, h, n_q, e = q.shape
    out = _creation.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = _creation.empty((b, h, n_q), dtype=_lse_dtype(q.dtype), device=q.device)
    if out.numel == 0:
        return out, lse
    if k.shape[2] == 0:  # no keys at all: every query sees nothing
        out.fill_(0.0)
        lse.fill_(float("-inf"))
        return out, lse
    q._backend.attention_forward(out, lse, _dense(q), _dense(k), _dense(v), causal, s)
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
) -> tuple[NvArray, NvArray, NvArray]:
    """Gradients ``(dq, dk, dv)`` of :func:`attention` for the output gradient ``grad_out``,
    from the forward's ``out`` and ``lse`` (the probabilities are recomputed, never stored).

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
    dq = _creation.empty(q.shape, dtype=q.dtype, device=q.device)
    dk = _creation.empty(k.shape, dtype=k.dtype, device=q.device)
    dv = _creation.empty(v.shape, dtype=v.dtype, device=q.device)
    if q.numel == 0 or k.numel == 0:  # no query-key pair: nothing flows anywhere
        for g in (dq, dk, dv):
            if g.numel:
                g.fill_(0.0)
        return dq, dk, dv
    q._backend.attention_backward(
        dq,
        dk,
        dv,
        _dense(grad_out),
        _dense(q),
        _dense(k),
        _dense(v),
        _dense(out),
        _dense(lse),
        bool(causal),
        s,
    )
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
    q._backend.decode_attention(out, _dense(q), _dense(k_cache), _dense(v_cache), n, s)
    return out
