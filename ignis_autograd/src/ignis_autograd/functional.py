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

import operator
from collections.abc import Sequence
from typing import Any

import ignis
from ignis import DTypeError, NvArray, ShapeError

from ._graph import HALF
from ._rules import one_hot_block, shape_of
from .tensor import (
    Tensor,
    add,
    apply,
    as_data,
    divide,
    matmul,
    maximum,
    minimum,
    multiply,
    needs_grad,
    power,
    subtract,
)

__all__ = [
    "add",
    "subtract",
    "multiply",
    "divide",
    "power",
    "maximum",
    "minimum",
    "matmul",
    "negative",
    "abs",
    "exp",
    "log",
    "sqrt",
    "tanh",
    "sigmoid",
    "relu",
    "gelu",
    "silu",
    "where",
    "clip",
    "sum",
    "mean",
    "max",
    "min",
    "var",
    "reshape",
    "transpose",
    "permute",
    "concatenate",
    "stack",
    "add_bias",
    "softmax",
    "log_softmax",
    "cross_entropy",
    "layer_norm",
    "rms_norm",
    "embedding",
    "dropout",
]

_F32 = ignis.float32


def _tensor(x: Any, op: str) -> Tensor:
    if isinstance(x, Tensor):
        return x
    if isinstance(x, NvArray):
        return Tensor(x)
    raise TypeError(f"{op}: expected a Tensor or an NvArray, got {type(x).__name__}")


# --- elementwise -------------------------------------------------------------------------------


def negative(x: Any) -> Tensor:
    """``-x``."""
    return -_tensor(x, "negative")


def abs(x: Any) -> Tensor:  # noqa: A001
    """``|x|`` (gradient 0 at 0)."""
    return _tensor(x, "abs").abs()


def exp(x: Any) -> Tensor:
    """``e ** x``."""
    return _tensor(x, "exp").exp()


def log(x: Any) -> Tensor:
    """Natural logarithm."""
    return _tensor(x, "log").log()


def sqrt(x: Any) -> Tensor:
    """Square root."""
    return _tensor(x, "sqrt").sqrt()


def tanh(x: Any) -> Tensor:
    return _tensor(x, "tanh").tanh()


def sigmoid(x: Any) -> Tensor:
    return _tensor(x, "sigmoid").sigmoid()


def relu(x: Any) -> Tensor:
    """``max(x, 0)`` (gradient 0 at 0)."""
    return _tensor(x, "relu").relu()


def gelu(x: Any, approximate: str = "none") -> Tensor:
    """GELU, exact (``"none"``) or the tanh approximation (``"tanh"``)."""
    return _tensor(x, "gelu").gelu(approximate)


def silu(x: Any) -> Tensor:
    """``x * sigmoid(x)``."""
    return _tensor(x, "silu").silu()


def where(cond: Any, a: Any, b: Any) -> Tensor:
    """``a`` where ``cond`` is true, else ``b`` (broadcasting; a and b may be scalars)."""
    dc, da, db = as_data(cond), as_data(a), as_data(b)
    out = ignis.where(dc, da, db)
    return apply("where", out, (cond, a, b), (dc, shape_of(da), shape_of(db)))


def clip(x: Any, min: Any = None, max: Any = None) -> Tensor:  # noqa: A002
    """``x`` limited to ``[min, max]``; the gradient passes inside, bounds included."""
    return _tensor(x, "clip").clip(min, max)


# --- reductions --------------------------------------------------------------------------------


def sum(x: Any, axis: Any = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    return _tensor(x, "sum").sum(axis, keepdims)


def mean(x: Any, axis: Any = None, keepdims: bool = False) -> Tensor:
    return _tensor(x, "mean").mean(axis, keepdims)


def max(x: Any, axis: Any = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    return _tensor(x, "max").max(axis, keepdims)


def min(x: Any, axis: Any = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    return _tensor(x, "min").min(axis, keepdims)


def var(x: Any, axis: Any = None, ddof: int = 0, keepdims: bool = False) -> Tensor:
    return _tensor(x, "var").var(axis, ddof, keepdims)


def softmax(x: Any, axis: int = -1) -> Tensor:
    return _tensor(x, "softmax").softmax(axis)


def log_softmax(x: Any, axis: int = -1) -> Tensor:
    return _tensor(x, "log_softmax").log_softmax(axis)


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
    logits: Any, targets: Any, reduction: str = "mean", ignore_index: int | None = None
) -> Tensor:
    """Softmax cross-entropy of ``logits`` (..., C) against integer class indices ``targets`` (...).

    ``reduction``: ``"mean"`` (over the targets that are not ``ignore_index``), ``"sum"`` or
    ``"none"`` (one loss per target). Targets outside ``[0, C)`` (other than ``ignore_index``)
    raise ValueError; checking this reads two counts back from the device.

    Example: ``cross_entropy(logits, ignis.asarray([2, 0, 1]))`` for logits of shape (3, C).
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
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(
            f"cross_entropy: reduction must be 'mean', 'sum' or 'none', got {reduction!r}"
        )
    n_classes = z.shape[-1]
    zc = z.astype(_F32) if z.dtype in HALF else z
    log_probs = ignis.log_softmax(zc, axis=-1)
    hot = t.unsqueeze(-1) == ignis.arange(n_classes, device=z.device)
    valid = None
    if ignore_index is not None:
        valid = t != ignore_index
        hot = ignis.where(valid.unsqueeze(-1), hot, False)
        counts = ignis.stack([hot.sum(), valid.sum()]).to_host()
        n_hit, n_valid = int(counts[0]), int(counts[1])
    else:
        n_hit, n_valid = int(hot.sum().item()), t.numel
    if n_hit != n_valid:
        raise ValueError(
            f"cross_entropy: {n_valid - n_hit} target(s) are not class indices in [0, {n_classes})"
            + (f" nor ignore_index ({ignore_index})" if ignore_index is not None else "")
        )
    nll = -(ignis.where(hot, log_probs, 0.0).sum(axis=-1))
    if reduction == "none":
        out, scale = nll, 1.0
    elif reduction == "sum":
        out, scale = nll.sum(), 1.0
    else:
        scale = 1.0 / n_valid if n_valid else float("nan")
        out = nll.sum() * scale
    if out.dtype != z.dtype:
        out = out.astype(z.dtype)
    return apply("cross_entropy", out, (logits, targets), (log_probs, t, valid, scale, reduction))


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


def layer_norm(
    x: Any, normalized_shape: Any = None, weight: Any = None, bias: Any = None, eps: float = 1e-5
) -> Tensor:
    """``(x - mean) / sqrt(var + eps) * weight + bias`` over the trailing ``normalized_shape``.

    ``normalized_shape`` defaults to the last dimension; ``weight``/``bias`` (optional) have
    that shape. The variance is the biased one (as PyTorch). Example: ``layer_norm(h, 768, g, b)``.
    """
    xd = as_data(x)
    axes, ns = _norm_axes(xd, normalized_shape, "layer_norm")
    wd = _check_param(weight, ns, "layer_norm", "weight")
    bd = _check_param(bias, ns, "layer_norm", "bias")
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
    return apply("layer_norm", y, (x, weight, bias), (xhat, rstd, wd, axes, batch_axes))


def rms_norm(x: Any, normalized_shape: Any = None, weight: Any = None, eps: float = 1e-6) -> Tensor:
    """``x / sqrt(mean(x^2) + eps) * weight`` over the trailing ``normalized_shape``."""
    xd = as_data(x)
    axes, ns = _norm_axes(xd, normalized_shape, "rms_norm")
    wd = _check_param(weight, ns, "rms_norm", "weight")
    xc = xd.astype(_F32) if xd.dtype in HALF else xd
    rstd = ignis.rsqrt((xc * xc).mean(axis=axes, keepdims=True) + eps)
    xhat = xc * rstd
    y = xhat * wd if wd is not None else xhat
    if y.dtype != xd.dtype:
        y = y.astype(xd.dtype)
    batch_axes = tuple(range(xd.ndim - len(ns)))
    return apply("rms_norm", y, (x, weight), (xhat, rstd, wd, axes, batch_axes))


def embedding(ids: Any, weight: Any) -> Tensor:
    """Rows of ``weight`` (V, D) picked by integer ``ids`` (any shape): shape ``ids.shape + (D,)``.

    The gradient of ``weight`` sums the rows' gradients (repeated ids add up); ids are not
    differentiable. Ids outside ``[0, V)`` raise ValueError (a count is read back from the device).
    """
    idd = _int_indices(ids, "embedding", "ids")
    w = as_data(weight)
    if not isinstance(w, NvArray) or w.ndim != 2:
        got = w.shape if isinstance(w, NvArray) else type(w).__name__
        raise ShapeError(f"embedding: weight must be a 2-D (rows, dim) array, got {got}")
    n_rows, dim = w.shape
    # NvArray has no gather yet: each block of rows is one_hot(ids) @ weight, in blocks so the
    # one-hot matrix stays small. Exact: every output is 1 * w[id] plus zeros.
    flat = idd.reshape(-1)
    classes = ignis.arange(n_rows, device=w.device)
    step = one_hot_block(n_rows)
    parts, hits = [], []
    for start in range(0, flat.shape[0], step):
        hot = flat[start : start + step].unsqueeze(-1) == classes
        hits.append(hot.sum())
        parts.append(ignis.matmul(hot.astype(w.dtype), w))
    if parts:
        n_hit = int((hits[0] if len(hits) == 1 else ignis.stack(hits).sum()).item())
        if n_hit != flat.shape[0]:
            raise ValueError(
                f"embedding: {flat.shape[0] - n_hit} id(s) are outside [0, {n_rows}) (the rows "
                "of weight)"
            )
        out = parts[0] if len(parts) == 1 else ignis.concatenate(parts, axis=0)
    else:
        out = ignis.zeros((0, dim), dtype=w.dtype, device=w.device)
    out = out.reshape(idd.shape + (dim,))
    return apply("embedding", out, (ids, weight), (idd, n_rows))


def dropout(x: Any, p: float = 0.5, training: bool = True, generator: Any = None) -> Tensor:
    """Zero each element with probability ``p`` and scale the rest by ``1 / (1 - p)``.

    The mask comes from ``generator`` (an ``ignis.random.Generator``) or the default stream
    ``ignis.random`` (seed it with ``ignis.random.seed``). Identity when ``training`` is False.
    """
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout: p must be in [0, 1], got {p}")
    xt = _tensor(x, "dropout")
    if not training or p == 0.0:
        return xt
    xd = xt.data
    src = generator if generator is not None else ignis.random
    keep = src.rand(xd.shape, dtype="float32", device=xd.device) >= p
    scale = 1.0 / (1.0 - p) if p < 1.0 else 0.0
    out = ignis.where(keep, xd * scale, 0.0)
    if not needs_grad(xt):
        return apply("dropout", out, (xt,), ())
    return apply("dropout", out, (xt,), (keep, scale))
