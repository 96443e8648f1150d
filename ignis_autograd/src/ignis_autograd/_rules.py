"""The derivative rules: one vector-Jacobian product per differentiable primitive, in one table.

Every entry is ``vjp(g, need, *ctx) -> tuple``: ``g`` is the gradient of the op's output (an
NvArray of the output's shape and dtype), ``need[i]`` says whether input ``i`` wants a gradient
(rules skip the work otherwise) and ``ctx`` is what the forward function saved, in the order the
parameter names give. It returns one NvArray (the input's shape) or None per input. Rules with
``fresh=True`` always return new buffers that nothing else references (the backward walk may then
keep them without a copy); the others may return views of ``g``.

Conventions: ``a``/``b``/``x`` are saved inputs (NvArrays, or Python scalars for constants),
``out`` the saved output, ``sa``/``sb`` input shapes, ``keep`` the reduced shape with the reduced
axes kept as 1.

Higher-order gradients: when a backward pass is recorded (``create_graph=True``) the rules run
again with Tensors in place of NvArrays (see :mod:`._graph_rules`), so they are written to take
either: operators, Tensor-style methods, and functions through :data:`._dispatch.ops` or
:func:`_mm`. A rule whose NvArray form calls a fused kernel that is linear in ``g`` (a scatter,
dropout's mask, a rotation) records that kernel as an op of its own (:func:`_linear_map`) whose
rule is the kernel's transpose, so it too can be differentiated to any order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from ignis._array import _indexing
from ignis._array._op_table import ELEMENTWISE, unbroadcast
from ignis._array._reduction_table import REDUCTIONS, grad_like

import ignis
from ignis import NvArray

from ._dispatch import ops as _xp
from ._graph import grad_dtype

__all__ = ["Rule", "RULES", "unbroadcast"]


class Rule(NamedTuple):
    vjp: Callable[..., tuple[Any, ...]]
    fresh: bool


RULES: dict[str, Rule] = {}


def rule(name: str, fresh: bool = True) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        RULES[name] = Rule(fn, fresh)
        return fn

    return register


def shape_of(x: Any) -> tuple[int, ...]:
    return x.shape if isinstance(x, NvArray) else ()


_unb = unbroadcast

# Bound by .tensor once it defines them (it imports this module first).
_apply: Any = None
_matmul: Any = None


def _mm(x: Any, y: Any, ta: bool = False, tb: bool = False) -> Any:
    """``x @ y`` with either operand transposed (its last two axes), on NvArrays or Tensors."""
    if x.__class__ is NvArray and y.__class__ is NvArray:
        return ignis.matmul(x, y, transpose_a=ta, transpose_b=tb)
    return _matmul(x.mT if ta else x, y.mT if tb else y)


def _linear_map(g: Any, name: str, fn: Callable[[NvArray], NvArray], ctx: tuple[Any, ...]) -> Any:
    """``fn(g)`` for an NvArray ``g``; for a Tensor (a backward pass being recorded) the same
    value, recorded as the op ``name``, whose rule is ``fn``'s transpose."""
    if g.__class__ is NvArray:
        return fn(g)
    return _apply(name, fn(g.data), (g,), ctx)


# --- arithmetic -------------------------------------------------------------------------------


@rule("where")
def _where(g, need, cond, sa, sb):
    return (
        None,
        _unb(_xp.where(cond, g, 0.0), sa) if need[1] else None,
        _unb(_xp.where(cond, 0.0, g), sb) if need[2] else None,
    )


@rule("clip")
def _clip(g, need, x, lo, hi):
    # Inside [lo, hi], bounds included, the gradient passes (as PyTorch's clamp).
    if lo is not None:
        g = _xp.where(x < lo, 0.0, g)
    if hi is not None:
        g = _xp.where(x > hi, 0.0, g)
    return (g,)


# --- linear algebra ---------------------------------------------------------------------------


@rule("matmul")
def _matmul(g, need, a, b, sa, sb):
    # a is saved only when b needs a gradient and vice versa; 1-D operands are promoted to
    # matrices (a row, b a column) as the forward did, and the added axis dropped again.
    a_vec, b_vec = len(sa) == 1, len(sb) == 1
    if a_vec and b_vec:
        g2 = g.reshape(1, 1)
    elif a_vec:
        g2 = g.unsqueeze(-2)
    elif b_vec:
        g2 = g.unsqueeze(-1)
    else:
        g2 = g
    ga = gb = None
    if need[0]:
        b2 = b.unsqueeze(-1) if b_vec else b
        sa2 = (1,) + sa if a_vec else sa
        ga = _unb(_mm(g2, b2, tb=True), sa2).reshape(sa)
    if need[1]:
        a2 = a.unsqueeze(0) if a_vec else a
        sb2 = sb + (1,) if b_vec else sb
        if a2.ndim > 2 and len(sb2) == 2:
            # One weight shared by a batch (a linear layer): a single flat GEMM sums the batch.
            k = a2.shape[-1]
            gb = _mm(a2.reshape(-1, k), g2.reshape(-1, g2.shape[-1]), ta=True)
        else:
            gb = _unb(_mm(a2, g2, ta=True), sb2)
        gb = gb.reshape(sb)
    return ga, gb


@rule("linear")
def _linear(g, need, x, w):
    # inputs (x, weight[, bias]); x is saved only for the weight's gradient, w only for x's.
    has_bias = len(need) == 3
    gx, gw, gb = ignis.nn.linear_backward(
        g, x, w, need_x=need[0], need_weight=need[1], need_bias=has_bias and need[2]
    )
    return (gx, gw, gb) if has_bias else (gx, gw)


@rule("add_bias", fresh=False)
def _add_bias(g, need, batch_axes):
    return (g if need[0] else None, g.sum(axis=batch_axes) if need[1] else None)


# --- shape and data movement ------------------------------------------------------------------


@rule("reshape", fresh=False)
def _reshape(g, need, sx):
    return (g.reshape(sx),)


@rule("broadcast_to", fresh=False)
def _broadcast_to(g, need, sx):
    return (_unb(g, sx),)


@rule("permute", fresh=False)
def _permute(g, need, inverse):
    return (g.permute(inverse),)


def _scatter(g: NvArray, sx: tuple[int, ...], key: Any) -> NvArray:
    """Zeros of shape ``sx`` with ``g`` added at ``x[key]``: the transpose of ``x[key]``."""
    full = ignis.zeros(sx, dtype=g.dtype, device=g.device)
    if _indexing.is_index_key(key):  # integer arrays may repeat an element: the gradients add
        return _indexing.add_at(full, key, g)
    full[key] = g  # basic indexing selects each element at most once
    return full


@rule("getitem")
def _getitem(g, need, sx, key):
    return (_linear_map(g, "getitem_transpose", lambda h: _scatter(h, sx, key), (key,)),)


@rule("getitem_transpose")
def _getitem_transpose(g, need, key):
    return (_linear_map(g, "getitem", lambda h: h[key], (g.shape, key)),)


@rule("concatenate", fresh=False)
def _concatenate(g, need, axis, sizes):
    out, start = [], 0
    lead = (slice(None),) * axis
    for n, want in zip(sizes, need, strict=True):
        out.append(g[lead + (slice(start, start + n),)] if want else None)
        start += n
    return tuple(out)


@rule("stack", fresh=False)
def _stack(g, need, axis):
    lead = (slice(None),) * axis
    return tuple(g[lead + (i,)] if want else None for i, want in enumerate(need))


@rule("clone", fresh=False)
def _clone(g, need):
    return (g,)


@rule("astype", fresh=False)
def _astype(g, need):
    return (g,)  # the walk converts a gradient to its input's dtype


@rule("to")
def _to(g, need, device):
    return (g.to(device),)


# --- neural-network functions -----------------------------------------------------------------


@rule("cross_entropy")
def _cross_entropy(g, need, logits, targets, lse, ignore_index, label_smoothing, reduction):
    # inputs (logits, targets): one fused kernel, softmax - onehot(smoothed) scaled by g (divided
    # by the device-side count of targets for a mean); ignored rows 0.
    grad = ignis.nn.cross_entropy_backward(
        g, logits, targets, lse, ignore_index, label_smoothing, reduction
    )
    return (grad, None)


@rule("layer_norm")
def _layer_norm(g, need, kind, *ctx):
    # inputs (x, weight, bias)
    if kind == "fused":  # rows (..., n) of x, saved mean/rstd; parameters flattened to (n,)
        rows, mean, rstd, w, sx, ns = ctx[:6]
        gx, gw, gb = ignis.nn.layer_norm_backward(
            _grad_like(_shaped(g, rows.shape), rows), rows, mean, rstd, w,
            grad_input=need[0], grad_weight=need[1], grad_bias=need[2],
        )
        return (
            None if gx is None else _shaped(gx, sx),
            None if gw is None else _shaped(gw, ns),
            None if gb is None else _shaped(gb, ns),
        )
    # composite: xhat = (x - mean) * rstd over ``axes``
    xhat, rstd, w, axes, batch_axes = ctx[:5]
    gx = gw = gb = None
    if need[0]:
        gh = g * w if w is not None else g
        gh = gh if gh.dtype == xhat.dtype else gh.astype(xhat.dtype)
        gx = rstd * (
            gh
            - gh.mean(axis=axes, keepdims=True)
            - xhat * (gh * xhat).mean(axis=axes, keepdims=True)
        )
    if need[1]:
        gw = _sum_batch(g * xhat, batch_axes)
    if need[2]:
        gb = _sum_batch(g, batch_axes) if batch_axes else g.clone()
    return gx, gw, gb


@rule("rms_norm")
def _rms_norm(g, need, kind, *ctx):
    # inputs (x, weight)
    if kind == "fused":
        rows, rstd, w, sx, ns = ctx[:5]
        gx, gw = ignis.nn.rms_norm_backward(
            _grad_like(_shaped(g, rows.shape), rows), rows, rstd, w,
            grad_input=need[0], grad_weight=need[1],
        )
        return (None if gx is None else _shaped(gx, sx), None if gw is None else _shaped(gw, ns))
    # composite: xhat = x * rstd, rstd = 1 / sqrt(mean(x^2) + eps) over ``axes``
    xhat, rstd, w, axes, batch_axes = ctx[:5]
    gx = gw = None
    if need[0]:
        gh = g * w if w is not None else g
        gh = gh if gh.dtype == xhat.dtype else gh.astype(xhat.dtype)
        gx = rstd * (gh - xhat * (gh * xhat).mean(axis=axes, keepdims=True))
    if need[1]:
        gw = _sum_batch(g * xhat, batch_axes)
    return gx, gw


def _shaped(a, shape):
    """``a`` reshaped to ``shape``; ``a`` itself when it has that shape already (the usual case
    of the fused rules, whose saved rows are often the input itself)."""
    return a if a.shape == shape else a.reshape(shape)


_grad_like = grad_like  # (of the reduction table, whose softmax rules use it too)


def _sum_batch(v, batch_axes):
    return v.sum(axis=batch_axes) if batch_axes else v


@rule("embedding")
def _embedding(g, need, ids, n_rows):
    # inputs (ids, weight): the rows' gradients scatter-added into the table, summed in
    # float32 for 16-bit gradients and rounded once; its transpose gathers the rows again
    if not need[1]:
        return None, None

    def scatter(h):
        return ignis.nn.embedding_backward(h, ids, n_rows, dtype=grad_dtype(h.dtype))

    return None, _linear_map(g, "take_transpose", scatter, (ids, 0))


def _add_rows(g: NvArray, indices: NvArray, sx: tuple[int, ...], axis: int) -> NvArray:
    """Zeros of shape ``sx`` with the slices of ``g`` added at ``indices`` along ``axis``."""
    full = ignis.zeros(sx, dtype=grad_dtype(g.dtype), device=g.device)
    return ignis.index_add(full, axis, indices, g)


@rule("take")
def _take(g, need, indices, sx, axis):
    # integer-array indexing gathers along ``axis``; its adjoint adds each gradient row back
    ctx = (indices, axis)
    return (_linear_map(g, "take_transpose", lambda h: _add_rows(h, indices, sx, axis), ctx),)


@rule("take_transpose")
def _take_transpose(g, need, indices, axis):
    ctx = (indices, g.shape, axis)
    return (_linear_map(g, "take", lambda h: ignis.take(h, indices, axis), ctx),)


@rule("dropout")
def _dropout(g, need, mask, p):
    # the same mask and scale each way: dropout's backward is its own transpose
    return (_linear_map(g, "dropout", lambda h: ignis.nn.dropout_backward(h, mask, p), (mask, p)),)


@rule("rope")
def _rope(g, need, positions, offset, base, interleaved):
    # a rotation per pair: the backward rotates back, and its transpose forward again
    ctx = (positions, offset, base, interleaved)
    return (_linear_map(g, "rope_transpose", lambda h: ignis.nn.rope_backward(h, *ctx), ctx),)


@rule("rope_transpose")
def _rope_transpose(g, need, positions, offset, base, interleaved):
    ctx = (positions, offset, base, interleaved)
    return (_linear_map(g, "rope", lambda h: ignis.nn.rope(h, *ctx), ctx),)


@rule("scaled_dot_product_attention")
def _scaled_dot_product_attention(g, need, q, k, v, out, lse, causal, scale, sq, sk, sv,
                                  drop=None):  # fmt: skip
    # inputs (q, k, v), saved as the 4-D (possibly strided) views the kernels read; the fused
    # backward recomputes the probabilities from lse. drop: the forward's AttentionDropout (the
    # dropout op's rule in attention.py passes it, so that the backward draws the same mask).
    if not any(need):
        return None, None, None
    dq, dk, dv = ignis.nn.attention_backward(
        g.reshape(out.shape), q, k, v, out, lse, causal=causal, scale=scale, dropout=drop
    )
    return (
        dq.reshape(sq) if need[0] else None,
        dk.reshape(sk) if need[1] else None,
        dv.reshape(sv) if need[2] else None,
    )


@rule("packed_attention")
def _packed_attention(g, need, q, k, v, out, lse, causal, scale, h, qkv, drop=None):
    # input qkv (B, T, 3 * dim); q/k/v/out saved as (B, H, T, hd) views of qkv and of the
    # (B, T, H, hd) output. The kernels read g through a (B, H, T, hd) view and write dq, dk, dv
    # straight into the three slots of one (B, T, 3, H, hd) gradient: no copies. drop: as for
    # _scaled_dot_product_attention.
    b, n, dim = g.shape
    hd = dim // h
    g4 = g.reshape(b, n, h, hd).permute(0, 2, 1, 3)
    grad = ignis.empty((b, n, 3, h, hd), dtype=q.dtype, device=q.device)
    slots = grad.permute(2, 0, 3, 1, 4)  # (3, B, H, T, hd)
    ignis.nn.attention_backward(
        g4, q, k, v, out, lse, causal=causal, scale=scale, dq=slots[0], dk=slots[1], dv=slots[2],
        dropout=drop,
    )  # fmt: skip
    return (grad.reshape(b, n, 3 * dim),)


# The element-wise ops' and the reductions' rules are declared with the ops, in ignis' op table
# and reduction table.
for _op in (*ELEMENTWISE.values(), *REDUCTIONS.values()):
    if _op.grad is not None:
        RULES[_op.name] = Rule(_op.grad, _op.fresh)
