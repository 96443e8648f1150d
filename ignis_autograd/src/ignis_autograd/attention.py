"""Scaled dot-product attention, differentiable, and decode attention for generation.

Shapes follow PyTorch: ``q`` is ``(..., L, E)``, ``k`` is ``(..., S, E)``, ``v`` is
``(..., S, Ev)``; the output is ``(..., L, Ev)``. The leading dimensions (batch, heads) must
match.

When ``q``, ``k`` and ``v`` share a floating dtype and ``E == Ev <= 128``, attention is one fused
primitive (:func:`ignis.nn.attention`, FlashAttention-style kernels on CUDA) whose derivative
rule recomputes the probabilities from the saved log-sum-exp, so no ``(L, S)`` matrix is kept
for the backward pass. Other inputs (``E > 128``, ``Ev != E``, mixed dtypes) take a composite
of matmuls and a softmax.

``dropout_p > 0`` drops the attention probabilities (PyTorch's convention: before ``@ v``, kept
ones scaled by ``1 / (1 - p)``). On the fused path the mask is drawn inside the kernels from the
``ignis.random`` Philox stream (:func:`ignis.nn.attention_dropout`): the recorded op keeps only
the stream position, and the backward pass regenerates the same mask. A fixed ``seed`` and
``offset`` give the same mask at every call (what gradcheck needs). The composite path builds
the same mask explicitly.

Example::

    >>> import ignis_autograd as ag
    >>> q = k = v = ag.Tensor.randn((2, 4, 16, 32), requires_grad=True)
    >>> ag.scaled_dot_product_attention(q, k, v, causal=True).sum().backward()
"""

from __future__ import annotations

import math
from typing import Any

import ignis.nn
from ignis._array._attention_dropout import check_p, keep_mask

import ignis
from ignis import NvArray, ShapeError

from ._rules import _packed_attention, _scaled_dot_product_attention, rule
from .functional import where
from .tensor import Tensor, apply, as_data

__all__ = ["scaled_dot_product_attention", "packed_attention", "decode_attention"]

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
    """``(..., N, E)`` as a 4-D ``(B, H, N, E)`` view for the fused kernels, which read any
    batch, head and row strides: a 4-D array as it is, fewer dims with leading 1s, more with
    the outer leading dims merged (a view where their strides allow, else reshape's copy)."""
    if x.ndim == 4:
        return x
    if x.ndim < 4:
        return x.reshape((1,) * (4 - x.ndim) + x.shape)
    outer = 1
    for d in x.shape[:-3]:
        outer *= d
    return x.reshape(outer, *x.shape[-3:])


def _tensor(x: Any, data: NvArray) -> Tensor:
    return x if isinstance(x, Tensor) else Tensor(data)


def _composite(
    q: Any,
    k: Any,
    v: Any,
    qd: NvArray,
    kd: NvArray,
    vd: NvArray,
    causal: bool,
    s: float,
    drop: Any = None,
) -> Tensor:
    """Attention from differentiable matmuls and a softmax (keeps the (L, S) matrix); ``drop``
    (an AttentionDropout): the fused kernels' mask, built explicitly."""
    scores = (_tensor(q, qd) @ _tensor(k, kd).mT) * s
    if causal:
        n_q, n_k = qd.shape[-2], kd.shape[-2]
        rows = ignis.arange(n_q, device=qd.device).reshape(n_q, 1)
        cols = ignis.arange(n_k, device=qd.device).reshape(1, n_k)
        scores = where(cols <= rows + (n_k - n_q), scores, float("-inf"))
    weights = scores.softmax(axis=-1)
    if drop is not None:
        shape = (*_as_4d(qd).shape[:3], kd.shape[-2])
        factors = keep_mask(drop, shape).astype(weights.data.dtype.numpy) * drop.scale
        z = ignis.asarray(factors.reshape(*qd.shape[:-1], kd.shape[-2]), device=qd.device)
        weights = weights * Tensor(z.astype(weights.data.dtype))
    return weights @ _tensor(v, vd)


def _draw(p: float, qd: NvArray, kd: NvArray, seed: Any, offset: Any, generator: Any) -> Any:
    """The AttentionDropout of a call (None: no dropout)."""
    op = "scaled_dot_product_attention"
    check_p(op, p)
    q4, k4 = _as_4d(qd), _as_4d(kd)
    shape = (*q4.shape[:3], k4.shape[2])
    from ignis._array._attention_dropout import draw

    return draw(op, p, shape, qd.device, seed=seed, offset=offset, generator=generator)


def scaled_dot_product_attention(
    q: Any,
    k: Any,
    v: Any,
    causal: bool = False,
    scale: float | None = None,
    dropout_p: float = 0.0,
    *,
    seed: int | None = None,
    offset: int | None = None,
    generator: Any = None,
) -> Tensor:
    """``softmax(q @ k^T * scale [+ causal mask]) @ v``; ``scale`` defaults to ``1/sqrt(E)``.

    With ``causal=True`` query ``i`` attends to keys ``j <= i + (S - L)`` (the mask is aligned
    to the end, as for a query block that continues a KV cache; equal to PyTorch's
    ``is_causal`` when ``L == S``). A query that sees no key gets a zero output row.

    ``dropout_p`` (in ``[0, 1]``, PyTorch's argument): the probabilities are dropped with that
    probability and the kept ones scaled by ``1 / (1 - dropout_p)`` (always, as in
    ``torch.nn.functional.scaled_dot_product_attention``: pass 0 outside training). The mask
    comes from the Philox stream ``(seed, offset)`` when given (the same mask every call), else
    from ``generator`` (default: ``ignis.random``'s), which advances.

    Example: ``y = scaled_dot_product_attention(q, k, v, causal=True, dropout_p=0.1)``.
    """
    qd, kd, vd = as_data(q), as_data(k), as_data(v)
    _check(qd, kd, vd)
    s = 1.0 / math.sqrt(qd.shape[-1]) if scale is None else float(scale)
    causal = bool(causal)
    drop = _draw(dropout_p, qd, kd, seed, offset, generator)
    if not _fusable(qd, kd, vd):
        return _composite(q, k, v, qd, kd, vd, causal, s, drop)
    q4, k4, v4 = _as_4d(qd), _as_4d(kd), _as_4d(vd)
    out4, lse = ignis.nn.attention(q4, k4, v4, causal=causal, scale=s, dropout=drop)
    out = out4.reshape(qd.shape)
    ctx = (q4, k4, v4, out4, lse, causal, s, qd.shape, kd.shape, vd.shape)
    if drop is not None:
        return apply("scaled_dot_product_attention_dropout", out, (q, k, v), (*ctx, drop))
    return apply("scaled_dot_product_attention", out, (q, k, v), ctx)


def _no_higher_order(g: Any, op: str) -> None:
    if not isinstance(g, NvArray):
        raise NotImplementedError(
            f"{op}: gradients of gradients (create_graph=True) are not supported with "
            "dropout_p > 0; use dropout_p=0 for higher-order derivatives"
        )


@rule("scaled_dot_product_attention_dropout")
def _sdpa_dropout_vjp(g, need, *ctx):
    # scaled_dot_product_attention's rule; ctx ends with the forward's dropout (the same mask)
    _no_higher_order(g, "scaled_dot_product_attention")
    return _scaled_dot_product_attention(g, need, *ctx)


@rule("packed_attention_dropout")
def _packed_dropout_vjp(g, need, *ctx):
    # packed_attention's rule; ctx ends with the forward's dropout (the same mask)
    _no_higher_order(g, "packed_attention")
    return _packed_attention(g, need, *ctx)


def packed_attention(
    qkv: Any,
    n_heads: int,
    causal: bool = False,
    scale: float | None = None,
    dropout_p: float = 0.0,
    *,
    seed: int | None = None,
    offset: int | None = None,
    generator: Any = None,
) -> Tensor:
    """Multi-head attention of a packed projection: ``qkv`` ``(B, T, 3 * dim)`` holds the q, k
    and v blocks along its last axis, ``n_heads`` heads of ``dim / n_heads`` inside each; the
    result ``(B, T, dim)`` has the heads merged back. The same values as splitting the heads
    out, :func:`scaled_dot_product_attention` and merging them, recorded as one op: the
    backward pass writes dq, dk and dv straight into one ``qkv`` gradient.

    ``dropout_p``, ``seed``, ``offset``, ``generator``: as for
    :func:`scaled_dot_product_attention` (the same mask for the same stream).

    Example: ``y = packed_attention(x @ w_qkv, n_heads=6, causal=True)`` for x ``(B, T, 384)``.
    """
    data = as_data(qkv)
    if not isinstance(data, NvArray) or data.ndim != 3 or data.shape[-1] % 3:
        got = data.shape if isinstance(data, NvArray) else type(data).__name__
        raise ShapeError(f"packed_attention: qkv must be (batch, T, 3 * dim), got {got}")
    b, n, three_dim = data.shape
    dim = three_dim // 3
    if not isinstance(n_heads, int) or n_heads <= 0 or dim % n_heads:
        raise ValueError(
            f"packed_attention: n_heads must be a positive divisor of dim={dim}, got {n_heads!r}"
        )
    h, hd = n_heads, dim // n_heads
    heads = data.reshape(b, n, 3, h, hd).permute(2, 0, 3, 1, 4)  # (3, B, H, T, hd), a view
    if not _fusable(heads[0], heads[1], heads[2]):
        qkv_t = _tensor(qkv, data).reshape(b, n, 3, h, hd).permute(2, 0, 3, 1, 4)
        out = scaled_dot_product_attention(
            qkv_t[0],
            qkv_t[1],
            qkv_t[2],
            causal,
            scale,
            dropout_p,
            seed=seed,
            offset=offset,
            generator=generator,
        )
        return out.permute(0, 2, 1, 3).reshape(b, n, dim)
    s = 1.0 / math.sqrt(hd) if scale is None else float(scale)
    causal = bool(causal)
    # q, k and v are (B, H, T, hd) views of qkv read in place; the result is written into a
    # (B, T, H, hd) buffer through its (B, H, T, hd) view, so merging the heads is a reshape.
    q4, k4, v4 = heads[0], heads[1], heads[2]
    drop = _draw(dropout_p, q4, k4, seed, offset, generator)
    merged = ignis.empty((b, n, h, hd), dtype=data.dtype, device=data.device)
    out4, lse = ignis.nn.attention(
        q4, k4, v4, causal=causal, scale=s, out=merged.permute(0, 2, 1, 3), dropout=drop
    )
    out = merged.reshape(b, n, dim)
    # (qkv itself last, which q4/k4/v4 view anyway: a recorded backward pass recomputes from it)
    ctx = (q4, k4, v4, out4, lse, causal, s, h, data)
    if drop is not None:
        return apply("packed_attention_dropout", out, (qkv,), (*ctx, drop))
    return apply("packed_attention", out, (qkv,), ctx)


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
