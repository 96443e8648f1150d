"""Scaled dot-product attention and rotary position embeddings, differentiable.

Shapes follow PyTorch: ``q`` is ``(..., L, E)``, ``k`` is ``(..., S, E)``, ``v`` is
``(..., S, Ev)``; the output is ``(..., L, Ev)``. The leading dimensions (batch, heads) must
match.

Example::

    >>> import ignis_autograd as ag
    >>> q = k = v = ag.Tensor.randn((2, 4, 16, 32), requires_grad=True)
    >>> ag.scaled_dot_product_attention(q, k, v, causal=True).sum().backward()
"""

from __future__ import annotations

import math
from typing import Any

import ignis
from ignis import NvArray, ShapeError

from .functional import where
from .tensor import Tensor, as_data

__all__ = ["scaled_dot_product_attention"]


def _check(q: NvArray, k: NvArray, v: NvArray) -> None:
    op = "scaled_dot_product_attention"
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, NvArray) or t.ndim < 2:
            got = t.shape if isinstance(t, NvArray) else type(t).__name__
            raise ShapeError(f"{op}: {name} must have at least 2 dimensions (..., seq, dim), got {got}")
    if q.shape[:-2] != k.shape[:-2] or k.shape[:-2] != v.shape[:-2]:
        raise ShapeError(
            f"{op}: leading dimensions differ: q {q.shape}, k {k.shape}, v {v.shape}"
        )
    if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise ShapeError(
            f"{op}: expected q (..., L, E), k (..., S, E), v (..., S, Ev); got q {q.shape}, "
            f"k {k.shape}, v {v.shape}"
        )


def scaled_dot_product_attention(
    q: Any, k: Any, v: Any, causal: bool = False, scale: float | None = None
) -> Tensor:
    """``softmax(q @ k^T * scale [+ causal mask]) @ v``; ``scale`` defaults to ``1/sqrt(E)``.

    With ``causal=True`` query ``i`` attends to keys ``j <= i + (S - L)`` (the mask is aligned
    to the end, as for a query block that continues a KV cache; equal to PyTorch's
    ``is_causal`` when ``L == S``).
    """
    qd, kd, vd = as_data(q), as_data(k), as_data(v)
    _check(qd, kd, vd)
    s = 1.0 / math.sqrt(qd.shape[-1]) if scale is None else float(scale)
    qt = q if isinstance(q, Tensor) else Tensor(qd)
    kt = k if isinstance(k, Tensor) else Tensor(kd)
    vt = v if isinstance(v, Tensor) else Tensor(vd)
    scores = (qt @ kt.mT) * s
    if causal:
        n_q, n_k = qd.shape[-2], kd.shape[-2]
        rows = ignis.arange(n_q, device=qd.device).reshape(n_q, 1)
        cols = ignis.arange(n_k, device=qd.device).reshape(1, n_k)
        scores = where(cols <= rows + (n_k - n_q), scores, float("-inf"))
    return scores.softmax(axis=-1) @ vt
