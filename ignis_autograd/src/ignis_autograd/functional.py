"""The differentiable functions of the ``ignis_autograd`` namespace.

Elementwise math, reductions and shape functions mirror the Tensor methods; the neural-network
functions (``cross_entropy``, ``layer_norm``, ``rms_norm``, ``embedding``, ``dropout``) are
single primitives with their own derivative rule. float16/bfloat16 inputs are normalized and
reduced in float32 and the results rounded back to the input dtype.

Example::

    >>> import ignis_autograd as ag
    >>> logits = ag.Tensor.randn((4, 10), requires_grad=True)
    >>> targets = ignis.asarray([1, 0, 9, 3])
    >>> ag.cross_entropy(logits, targets).backward()
"""

from __future__ import annotations

import builtins
import math
import operator
from collections.abc import Sequence
from typing import Any

from ignis._exports import defined_here

import ignis
from ignis import DTypeError, NvArray, ShapeError

from ._graph import HALF
from ._rules import shape_of
from .tensor import (
    OP_FUNCTIONS,
    REDUCTION_FUNCTIONS,
    Tensor,
    _tensor,
    _wants_grad,
    apply,
    as_data,
    matmul,
    needs_grad,
)

# The exports: the op tables' functions (add, exp, ...; sum, var, softmax, ...), matmul (a
# Tensor function), then the functions this module defines (added at its end).
# Among them are abs, all, any, max, min, pow, round and sum: code here calls the builtins of
# those names as builtins.<name> (tests/test_builtin_shadowing.py checks).
__all__ = [*OP_FUNCTIONS, *REDUCTION_FUNCTIONS, "matmul"]
globals().update(OP_FUNCTIONS)
globals().update(REDUCTION_FUNCTIONS)

_F32 = ignis.float32


# --- elementwise -------------------------------------------------------------------------------


def where(cond: Any, a: Any, b: Any) -> Tensor:
    """``a`` where ``cond`` is true, else ``b`` (broadcasting; a and b may be scalars)."""
    dc, da, db = as_data(cond), as_data(a), as_data(b)
    out = ignis.where(dc, da, db)
    return apply("where", out, (cond, a, b), (dc, shape_of(da), shape_of(db)))


def clip(x: Any, min: Any = None, max: Any = None) -> Tensor:  # noqa: A002
    """``x`` limited to ``[min, max]``; the gradient passes inside, bounds included."""
    return _tensor(x, "clip").clip(min, max)


# --- shape -------------------------------------------------------------------------------------


def reshape(x: Any, *shape: Any) -> Tensor:
    return _tensor(x, "reshape").reshape(*shape)


def transpose(x: Any, *axes: Any) -> Tensor:
    return _tensor(x, "transpose").transpose(*axes)


def permute(x: Any, *dims: Any) -> Tensor:
    return _tensor(x, "permute").permute(*dims)


def concatenate(tensors: Sequence[Any], axis: int = 0) -> Tensor:
    """Join along an existing axis; each input gets its slice of the gradient."""
    tensors = tuple(tensors)
    datas = [as_data(t) for t in tensors]
    out = ignis.concatenate(datas, axis=axis)
    ax = operator.index(axis) % out.ndim
    return apply("concatenate", out, tensors, (ax, tuple(d.shape[ax] for d in datas)))


def stack(tensors: Sequence[Any], axis: int = 0) -> Tensor:
    """Join equal-shaped tensors along a new axis."""
    tensors = tuple(tensors)
    out = ignis.stack([as_data(t) for t in tensors], axis=axis)
    return apply("stack", out, tensors, (operator.index(axis) % out.ndim,))


def add_bias(x: Any, bias: Any) -> Tensor:
    """``x + bias`` for a 1-D bias matching the last dimension of ``x``."""
    return _tensor(x, "add_bias").add_bias(bias)


def linear(x: Any, weight: Any, bias: Any = None) -> Tensor:
    """``x @ weight.T + bias`` over the last dimension of ``x`` (any leading dimensions), as
    one recorded op: ``weight`` is ``(out, in)``, ``bias`` None or ``(out,)``.

    The leading dimensions fold into the rows of one GEMM, with the bias added inside it
    (:func:`ignis.nn.linear`); the backward pass is two GEMMs (``g @ weight`` and ``g.T @ x``,
    the weight's gradient in the weight's own layout), the bias's gradient fused into the
    second where the backend can (:func:`ignis.nn.linear_backward`).

    Example: ``y = ag.linear(x, w, b)`` for ``x (8, 10, 64)``, ``w (256, 64)``, ``b (256,)``.
    """
    dx, dw = as_data(x), as_data(weight)
    db = None if bias is None else as_data(bias)
    for name, v in (("x", dx), ("weight", dw), ("bias", db)):
        if v is not None and not isinstance(v, NvArray):
            raise TypeError(f"linear: {name} must be a Tensor or NvArray, got {type(v).__name__}")
    y = ignis.nn.linear(dx, dw, db)  # checks the shapes; fuses the bias where dtypes allow
    inputs = (x, weight) if bias is None else (x, weight, bias)
    # keep an operand only for the other one's gradient (as matmul does)
    ctx = (dx if _wants_grad(weight) else None, dw if _wants_grad(x) else None)
    return apply("linear", y, inputs, ctx)


# --- neural-network functions -------------------------------------------------------------------


def _int_indices(x: Any, op: str, what: str) -> NvArray:
    d = as_data(x)
    if not isinstance(d, NvArray):
        raise TypeError(
            f"{op}: {what} must be an NvArray or Tensor of integers, got {type(d).__name__}"
        )
    if d.dtype.kind not in "iu":
        raise DTypeError(
            f"{op}: {what} must be integer class indices (int32/int64), got {d.dtype.name}"
        )
    return d


def cross_entropy(
    logits: Any,
    targets: Any,
    reduction: str = "mean",
    ignore_index: int | None = None,
    label_smoothing: float = 0.0,
) -> Tensor:
    """Softmax cross-entropy of ``logits`` (..., C) against integer class indices ``targets`` (...).

    One fused kernel each way (:func:`ignis.nn.cross_entropy`), with the semantics of
    ``torch.nn.functional.cross_entropy``: ``reduction`` ``"mean"`` (over the targets that are not
    ``ignore_index``), ``"sum"`` or ``"none"`` (one loss per target); ``label_smoothing`` in
    [0, 1] mixes the uniform distribution into the target (as PyTorch). The loss has the logits'
    dtype; float16/bfloat16 logits are reduced in float32.

    Nothing is read back from the device: a target outside ``[0, C)`` that is not
    ``ignore_index`` gives a NaN loss for its row (and a NaN mean or sum).

    Example: ``cross_entropy(logits, ignis.asarray([2, 0, 1]), label_smoothing=0.1)`` for logits
    of shape (3, C).
    """
    z = as_data(logits)
    t = _int_indices(targets, "cross_entropy", "targets")
    if not isinstance(z, NvArray) or z.dtype.kind != "f":
        raise DTypeError("cross_entropy: logits must be a floating Tensor or NvArray")
    if z.ndim < 1 or t.shape != z.shape[:-1]:
        raise ShapeError(
            f"cross_entropy: targets of shape {t.shape} do not match logits of shape {z.shape} "
            f"(expected targets of shape {z.shape[:-1]})"
        )
    if t.dtype not in (ignis.int32, ignis.int64):
        t = t.astype(ignis.int64)  # the kernels read int32 or int64 indices
    loss, lse = ignis.nn.cross_entropy(z, t, ignore_index, label_smoothing, reduction)
    return apply(
        "cross_entropy",
        loss,
        (logits, targets),
        (z, t, lse, ignore_index, label_smoothing, reduction),
    )


def _norm_axes(
    x: NvArray, normalized_shape: Any, op: str
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    if normalized_shape is None:
        if x.ndim < 1:
            raise ShapeError(f"{op}: needs at least 1 dimension, got shape {x.shape}")
        ns: tuple[int, ...] = (x.shape[-1],)
    elif isinstance(normalized_shape, int):
        ns = (normalized_shape,)
    else:
        ns = tuple(int(d) for d in normalized_shape)
    k = len(ns)
    if k == 0 or k > x.ndim or x.shape[x.ndim - k :] != ns:
        raise ShapeError(
            f"{op}: normalized_shape {ns} does not match the trailing dimensions of input shape "
            f"{x.shape}"
        )
    return tuple(range(x.ndim - k, x.ndim)), ns


def _check_param(p: Any, ns: tuple[int, ...], op: str, name: str) -> Any:
    d = as_data(p)
    if d is not None and (not isinstance(d, NvArray) or d.shape != ns):
        got = d.shape if isinstance(d, NvArray) else type(d).__name__
        raise ShapeError(f"{op}: {name} has shape {got}, expected {ns} (normalized_shape)")
    return d


def _fused_rows(x: NvArray, ns: tuple[int, ...], params: tuple[Any, ...]) -> NvArray | None:
    """``x`` as ``(..., prod(ns))`` for the fused kernels, or None where they do not apply: the
    trailing dimensions do not merge into one without a copy, the normalized size is 0, or a
    parameter's dtype is neither ``x``'s nor (for 16-bit ``x``) float32."""
    n = math.prod(ns)
    if n == 0 or x.dtype.kind != "f":
        return None
    ok = (x.dtype, _F32) if x.dtype in HALF else (x.dtype,)
    if builtins.any(p is not None and p.dtype not in ok for p in params):
        return None
    if len(ns) == 1:
        return x
    k = len(ns)
    dims = [(d, st) for d, st in zip(x.shape[-k:], x.strides[-k:], strict=True) if d != 1]
    for (_, outer), (size, stride) in zip(dims, dims[1:], strict=False):
        if outer != stride * size:  # these dimensions are not one evenly strided run
            return None
    return x.reshape(x.shape[: x.ndim - k] + (n,))


def _flat_param(p: NvArray | None, n: int) -> NvArray | None:
    if p is None or p.shape == (n,):  # (1-D parameters, the usual case, are kept as they are)
        return p
    return p.reshape(n)


def layer_norm(
    x: Any, normalized_shape: Any = None, weight: Any = None, bias: Any = None, eps: float = 1e-5
) -> Tensor:
    """``(x - mean) / sqrt(var + eps) * weight + bias`` over the trailing ``normalized_shape``.

    ``normalized_shape`` defaults to the last dimension; ``weight``/``bias`` (optional) have
    that shape. The variance is the biased one (as PyTorch). One fused kernel each way
    (:func:`ignis.nn.layer_norm`); several trailing dimensions are normalized as one when they
    are contiguous. Example: ``layer_norm(h, 768, g, b)``.
    """
    xd = as_data(x)
    axes, ns = _norm_axes(xd, normalized_shape, "layer_norm")
    wd = _check_param(weight, ns, "layer_norm", "weight")
    bd = _check_param(bias, ns, "layer_norm", "bias")
    rows = _fused_rows(xd, ns, (wd, bd))
    if rows is not None and not (wd is not None and bd is not None and wd.dtype != bd.dtype):
        n = rows.shape[-1]
        w2, b2 = _flat_param(wd, n), _flat_param(bd, n)
        y, mean, rstd = ignis.nn.layer_norm(rows, w2, b2, eps)
        # (eps last: only a recorded backward pass, which recomputes the norm, reads it)
        ctx = ("fused", rows, mean, rstd, w2, xd.shape, ns, eps)
        y = y if rows is xd else y.reshape(xd.shape)  # (rows is x itself for one axis)
        return apply("layer_norm", y, (x, weight, bias), ctx)
    # Composite: trailing dimensions that are not contiguous, or mixed parameter dtypes.
    xc = xd.astype(_F32) if xd.dtype in HALF else xd
    mu = xc.mean(axis=axes, keepdims=True)
    rstd = ignis.rsqrt(xc.var(axis=axes, keepdims=True) + eps)
    xhat = (xc - mu) * rstd
    y = xhat
    if wd is not None:
        y = y * wd
    if bd is not None:
        y = y + bd
    if y.dtype != xd.dtype:
        y = y.astype(xd.dtype)
    batch_axes = tuple(range(xd.ndim - len(ns)))
    ctx = ("composite", xhat, rstd, wd, axes, batch_axes, xd, eps)
    return apply("layer_norm", y, (x, weight, bias), ctx)


def rms_norm(x: Any, normalized_shape: Any = None, weight: Any = None, eps: float = 1e-6) -> Tensor:
    """``x / sqrt(mean(x^2) + eps) * weight`` over the trailing ``normalized_shape``.

    One fused kernel each way (:func:`ignis.nn.rms_norm`) when the trailing dimensions are
    contiguous. Example: ``rms_norm(h, weight=g)``.
    """
    xd = as_data(x)
    axes, ns = _norm_axes(xd, normalized_shape, "rms_norm")
    wd = _check_param(weight, ns, "rms_norm", "weight")
    rows = _fused_rows(xd, ns, (wd,))
    if rows is not None:
        n = rows.shape[-1]
        w2 = _flat_param(wd, n)
        y, rstd = ignis.nn.rms_norm(rows, w2, eps)
        ctx = ("fused", rows, rstd, w2, xd.shape, ns, eps)
        y = y if rows is xd else y.reshape(xd.shape)
        return apply("rms_norm", y, (x, weight), ctx)
    xc = xd.astype(_F32) if xd.dtype in HALF else xd
    rstd = ignis.rsqrt((xc * xc).mean(axis=axes, keepdims=True) + eps)
    xhat = xc * rstd
    y = xhat * wd if wd is not None else xhat
    if y.dtype != xd.dtype:
        y = y.astype(xd.dtype)
    batch_axes = tuple(range(xd.ndim - len(ns)))
    ctx = ("composite", xhat, rstd, wd, axes, batch_axes, xd, eps)
    return apply("rms_norm", y, (x, weight), ctx)


def embedding(ids: Any, weight: Any, check: bool = False) -> Tensor:
    """Rows of ``weight`` (V, D) picked by integer ``ids`` (any shape): shape ``ids.shape + (D,)``.

    One gather kernel (:func:`ignis.nn.embedding`); the gradient of ``weight`` is a scatter-add
    of the rows' gradients (repeated ids add up, summed in float32 for 16-bit weights); ids are
    not differentiable. Ids wrap like NumPy's ``take``; an id outside ``[-V, V)`` gives a NaN
    row and adds no gradient, unless ``check=True``, which raises IndexError (and waits for the
    device to count them).

    Example: ``h = embedding(token_ids, wte)`` for ``wte`` of shape (vocab, dim).
    """
    idd = _int_indices(ids, "embedding", "ids")
    w = as_data(weight)
    if not isinstance(w, NvArray) or w.ndim != 2:
        got = w.shape if isinstance(w, NvArray) else type(w).__name__
        raise ShapeError(f"embedding: weight must be a 2-D (rows, dim) array, got {got}")
    out = ignis.nn.embedding(idd, w, check=check)
    return apply("embedding", out, (ids, weight), (idd, w.shape[0]))


def dropout(x: Any, p: float = 0.5, training: bool = True, generator: Any = None) -> Tensor:
    """Zero each element with probability ``p`` and scale the rest by ``1 / (1 - p)``.

    The mask is drawn in the kernel (:func:`ignis.nn.dropout`) from ``generator`` (an
    ``ignis.random.Generator``) or the default stream ``ignis.random`` (seed it with
    ``ignis.random.seed``): it equals ``rand(x.shape) >= p`` from that stream, which advances
    as that ``rand`` call would. The backward pass multiplies by the saved bool mask. Identity
    when ``training`` is False or ``p`` is 0.
    """
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout: p must be in [0, 1], got {p}")
    xt = _tensor(x, "dropout")
    if not training or p == 0.0:
        return xt
    out, mask = ignis.nn.dropout(xt.data, p, generator=generator)
    if not needs_grad(xt):
        return apply("dropout", out, (xt,), ())
    return apply("dropout", out, (xt,), (mask, p))


# --- rotary position embedding ---------------------------------------------------------------


def rope(
    x: Any,
    positions: Any = None,
    offset: int = 0,
    base: float = 10000.0,
    interleaved: bool = False,
) -> Tensor:
    """Rotary position embedding of ``x`` (..., seq, head_dim), differentiable in ``x``.

    See :func:`ignis.nn.rope`: pairs ``(i, i + head_dim/2)`` (or ``(2i, 2i+1)`` when
    ``interleaved``) of the row at position ``positions[..., s] + offset`` (default ``s +
    offset``) rotate by ``position * base ** (-2i / head_dim)``. The gradient is the inverse
    rotation of the output's gradient; ``positions`` are not differentiable.

    Example: ``q = rope(q, offset=cache_len)`` for q of shape (batch, heads, seq, 64).
    """
    xt = _tensor(x, "rope")
    pos = as_data(positions)
    out = ignis.nn.rope(xt.data, pos, offset, base, interleaved)
    return apply("rope", out, (xt,), (pos, offset, base, interleaved))


__all__ += defined_here(globals())

# The functional derivatives (torch.autograd.functional's), reached as
# ``ignis_autograd.functional.hessian`` etc.; not among the differentiable functions above, so
# not in ``__all__`` (nor at the package's top level).
from ._transforms import hessian, hvp, jacobian, jvp, vhp, vjp  # noqa: E402, F401
