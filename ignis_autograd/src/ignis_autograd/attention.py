"""Scaled dot-product attention, differentiable, and decode attention for generation.

Shapes follow PyTorch: ``q`` is ``(..., L, E)``, ``k`` is ``(..., S, E)``, ``v`` is
``(..., S, Ev)``; the output is ``(..., L, Ev)``. The leading dimensions (batch, heads) must
match.

When ``q``, ``k`` and ``v`` share a floating dtype and ``E == Ev <= 128``, attention is one fused
primitive (:func:`ignis.nn.attention`, FlashAttention-style kernels on CUDA) whose derivative
rule recomputes the probabilities from the saved log-sum-exp, so no ``(L, S)`` matrix is kept
for the backward pass. Other inputs (``E > 128``, ``Ev != E``, mixed dtypes) take a composite
of matmuls and a softmax.

Example::

    >>> import ignis_autograd as ag
    >>> q = k = v = ag.Tensor.randn((2, 4, 16, 32), requires_grad=True)
    >>> ag.scaled_dot_product_attention(q, k, v, causal=True).sum().backward()
"""

from __future__ import annotations

import math
from typing import Any

import ignis.nn

import ignis
from ignis import NvArray, ShapeError

from .functional import where
from .tensor import Tensor, apply, as_data

__all__ = ["scaled_dot_product_attention", "decode_attention"]

_FUSED_DTYPES = ("float16", "bfloat16", "float32", "float64")
_MAX_FUSED_HEAD_DIM = 128


def _check(q: NvArray, k: NvArray, v: NvArray) -> None:
    op = "scaled_dot_product_attention"
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, NvArray) or t.ndim < 2:
            got = t.shape if isinstance(t, NvArray) else type(t).__name__
            raise ShapeError(
                f"{op}: {name} must have at least 2 dimensions (..., seq, dim), got {got}"
            )
    if q.shape[:-2] != k.shape[:-2] or k.shape[:-2] != v.shape[:-2]:
        raise ShapeError(f"{op}: leading dimensions differ: q {q.shape}, k {k.shape}, v {v.shape}")
    if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise ShapeError(
            f"{op}: expected q (..., L, E), k (..., S, E), v (..., S, Ev); got q {q.shape}, "
            f"k {k.shape}, v {v.shape}"
        )


def _fusable(q: NvArray, k: NvArray, v: NvArray) -> bool:
    """Whether the fused kernels take these inputs (else the composite runs)."""
    return (
        q.dtype == k.dtype == v.dtype
        and q.dtype.name in _FUSED_DTYPES
        and q.device == k.device == v.device
        and q.shape[-1] == v.shape[-1] <= _MAX_FUSED_HEAD_DIM
    )


def _as_4d(x: NvArray) -> NvArray:
    """``(..., N, E)`` as ``(1, prod(...), N, E)``."""
    lead = 1
    for d in x.shape[:-2]:
        lead *= d
    return x.reshape(1, lead, x.shape[-2], x.shape[-1])


def _tensor(x: Any, data: NvArray) -> Tensor:
    return x if isinstance(x, Tensor) else Tensor(data)


def _composite(
    q: Any, k: Any, v: Any, qd: NvArray, kd: NvArray, vd: NvArray, causal: bool, s: float
) -> Tensor:
    """Attention from differentiable matmuls and a softmax (keeps the (L, S) matrix)."""
    scores = (_tensor(q, qd) @ _tensor(k, kd).mT) * s
    if causal:
        n_q, n_k = qd.shape[-2], kd.shape[-2]
        rows = ignis.arange(n_q, device=qd.device).reshape(n_q, 1)
        cols = ignis.arange(n_k, device=qd.device).reshape(1, n_k)
        scores = where(cols <= rows + (n_k - n_q), scores, float("-inf"))
    return scores.softmax(axis=-1) @ _tensor(v, vd)


def scaled_dot_product_attention(
    q: Any, k: Any, v: Any, causal: bool = False, scale: float | None = None
) -> Tensor:
    """``softmax(q @ k^T * scale [+ causal mask]) @ v``; ``scale`` defaults to ``1/sqrt(E)``.

    With ``causal=True`` query ``i`` attends to keys ``j <= i + (S - L)`` (the mask is aligned
    to the end, as for a query block that continues a KV cache; equal to PyTorch's
    ``is_causal`` when ``L == S``). A query that sees no key gets a zero output row.
    """
    qd, kd, vd = as_data(q), as_data(k), as_data(v)
    _check(qd, kd, vd)
    s = 1.0 / math.sqrt(qd.shape[-1]) if scale is None else float(scale)
    causal = bool(causal)
    if not _fusable(qd, kd, vd):
        return _composite(q, k, v, qd, kd, vd, causal, s)
    q4, k4, v4 = _as_4d(qd), _as_4d(kd), _as_4d(vd)
    out4, lse = ignis.nn.attention(q4, k4, v4, causal=causal, scale=s)
    out = out4.reshape(qd.shape)
    ctx = (q4, k4, v4, out4, lse, causal, s, qd.shape, kd.shape, vd.shape)
    return apply("scaled_dot_product_attention", out, (q, k, v), ctx)


def decode_attention(
    q: Any, k_cache: Any, v_cache: Any, cache_len: int, scale: float | None = None
) -> Tensor:
    """One generation step: ``q`` ``(B, H, 1, E)`` attends to the first ``cache_len`` rows of
    the caches ``(B, H, S_max, E)`` (see :func:`ignis.nn.decode_attention`). Not recorded for
    gradients.

    Example: ``y = decode_attention(q, k_cache, v_cache, cache_len=pos + 1)``.
    """
    out = ignis.nn.decode_attention(
        as_data(q), as_data(k_cache), as_data(v_cache), cache_len, scale=scale
    )
    return Tensor(out)
