"""Front end of the fused softmax cross-entropy and of the softmax / log-softmax backward:
``ignis.nn.cross_entropy``, ``cross_entropy_backward`` and ``softmax_backward``.

Argument checks, dtype rules and output allocation live here; each function then calls one
backend hook (see ``_backend.py``). Nothing here reads data back to the host: a target that is
neither a class index in ``[0, C)`` nor ``ignore_index`` makes its row's loss (and gradient)
NaN instead of raising.
"""

from __future__ import annotations

import math
import numbers
import operator
from typing import Any

from .. import _dtypes as dt
from .._errors import DeviceMismatchError, DTypeError, ShapeError
from . import _creation
from ._nn_norm import check_like, stats_dtype
from ._semantics import normalize_axis
from .array import NvArray

__all__ = ["cross_entropy", "cross_entropy_backward", "softmax_backward"]

_HALF = (dt.float16, dt.bfloat16)
_REDUCTIONS = ("mean", "sum", "none")
_INT64 = (-(2**63), 2**63 - 1)


def _logits(logits: Any, op: str) -> NvArray:
    if not isinstance(logits, NvArray):
        raise TypeError(f"{op}: logits must be an NvArray, got {type(logits).__name__}")
    if logits.dtype.kind != "f":
        raise DTypeError(
            f"{op}: logits must be floating (float16, bfloat16, float32, float64), "
            f"got {logits.dtype.name}"
        )
    if logits.ndim < 1 or logits.shape[-1] == 0:
        raise ShapeError(
            f"{op}: logits of shape {logits.shape} have no classes (expected (..., C) with C >= 1)"
        )
    return logits


def _targets(targets: Any, logits: NvArray, op: str) -> NvArray:
    if not isinstance(targets, NvArray):
        raise TypeError(f"{op}: targets must be an NvArray, got {type(targets).__name__}")
    if targets.dtype not in (dt.int32, dt.int64):
        raise DTypeError(
            f"{op}: targets must be integer class indices (int32/int64), got {targets.dtype.name}"
        )
    if targets.device != logits.device:
        raise DeviceMismatchError(
            f"{op}: targets are on {targets.device} but logits are on {logits.device}"
        )
    if targets.shape != logits.shape[:-1]:
        raise ShapeError(
            f"{op}: targets of shape {targets.shape} do not match logits of shape {logits.shape} "
            f"(expected targets of shape {logits.shape[:-1]})"
        )
    return targets.contiguous()


def _options(
    ignore_index: Any, label_smoothing: Any, reduction: Any, op: str
) -> tuple[int | None, float]:
    if ignore_index is not None:
        try:
            ignore_index = operator.index(ignore_index)
        except TypeError:
            raise TypeError(
                f"{op}: ignore_index must be an int or None, got {type(ignore_index).__name__}"
            ) from None
        if not _INT64[0] <= ignore_index <= _INT64[1]:
            raise ValueError(f"{op}: ignore_index {ignore_index} does not fit in int64")
    if (
        isinstance(label_smoothing, bool)
        or not isinstance(label_smoothing, numbers.Real)
        or not 0.0 <= label_smoothing <= 1.0
    ):
        raise ValueError(
            f"{op}: label_smoothing must be a number in [0, 1], got {label_smoothing!r}"
        )
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{op}: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    return ignore_index, float(label_smoothing)


def cross_entropy(
    logits: NvArray,
    targets: NvArray,
    ignore_index: int | None = -100,
    label_smoothing: float = 0.0,
    reduction: str = "mean",
) -> tuple[NvArray, NvArray]:
    """Softmax cross-entropy over the last axis, fused with the log-softmax: ``(loss, lse)``.

    ``logits`` (..., C) of any floating dtype; ``targets`` int32/int64 class indices of shape
    ``logits.shape[:-1]``. Semantics of ``torch.nn.functional.cross_entropy``: targets equal to
    ``ignore_index`` (None: none) contribute 0 and are left out of the mean; with
    ``label_smoothing`` ``ls`` a row's loss is ``(1 - ls) * nll + ls * mean_c(-log_softmax)``.
    ``reduction`` "mean" (over the counted targets; NaN when there are none), "sum" or "none"
    (shape ``logits.shape[:-1]``). The loss has ``logits``' dtype (sums run in float32, float64
    for float64). ``lse`` (float32; float64 for float64 logits) is each row's log-sum-exp, what
    :func:`cross_entropy_backward` needs.

    A target outside ``[0, C)`` that is not ``ignore_index`` gives a NaN loss for its row (and
    so a NaN mean or sum): checking would stop the host to read the targets back.

    Example::

        >>> loss, lse = ignis.nn.cross_entropy(logits, targets, label_smoothing=0.1)
    """
    op = "cross_entropy"
    z = _logits(logits, op)
    t = _targets(targets, z, op)
    ignore, ls = _options(ignore_index, label_smoothing, reduction, op)
    lead, n_classes = z.shape[:-1], z.shape[-1]
    rows = math.prod(lead)
    lse = _creation._new(lead, stats_dtype(z.dtype), z._device)
    loss = _creation._new(lead if reduction == "none" else (), z.dtype, z._device)
    if rows == 0:
        if reduction != "none":
            z._backend.fill(loss, math.nan if reduction == "mean" else 0.0)
        return loss, lse
    target = loss.reshape(-1) if reduction == "none" else loss
    z._backend.kernels.cross_entropy(
        target,
        lse.reshape(-1),
        z.contiguous().reshape(rows, n_classes),
        t.reshape(-1),
        ignore,
        ls,
        reduction,
    )
    return loss, lse


def cross_entropy_backward(
    grad_loss: NvArray,
    logits: NvArray,
    targets: NvArray,
    lse: NvArray,
    ignore_index: int | None = -100,
    label_smoothing: float = 0.0,
    reduction: str = "mean",
) -> NvArray:
    """Gradient of :func:`cross_entropy` with respect to ``logits``, one fused pass.

    ``grad_loss`` is the gradient of the loss (shape () for "mean"/"sum", ``logits.shape[:-1]``
    for "none"; any floating dtype); ``lse`` is what the forward returned; the other arguments
    are the forward's. Per row: ``grad_loss * (softmax(logits) - (1 - ls) * onehot(target) -
    ls / C)``, divided by the number of counted targets for "mean" (counted on the device); rows
    whose target is ``ignore_index`` are 0, rows with a target outside ``[0, C)`` NaN. The result
    has ``logits``' dtype and shape.

    Example::

        >>> grad = ignis.nn.cross_entropy_backward(ignis.ones(()), logits, targets, lse)
    """
    op = "cross_entropy_backward"
    z = _logits(logits, op)
    t = _targets(targets, z, op)
    ignore, ls = _options(ignore_index, label_smoothing, reduction, op)
    lead, n_classes = z.shape[:-1], z.shape[-1]
    sd = stats_dtype(z.dtype)
    lse_c = check_like(lse, z, op, "lse", lead, (sd,))
    g_shape = lead if reduction == "none" else ()
    if not isinstance(grad_loss, NvArray) or grad_loss.dtype.kind != "f":
        got = grad_loss.dtype.name if isinstance(grad_loss, NvArray) else type(grad_loss).__name__
        raise DTypeError(f"{op}: grad_loss must be a floating NvArray, got {got}")
    g = check_like(grad_loss, z, op, "grad_loss", g_shape, (grad_loss.dtype,))
    if g.dtype != sd:
        g = g.astype(sd)
    out = _creation._new(z.shape, z.dtype, z._device)
    rows = math.prod(lead)
    if rows == 0:
        return out
    z._backend.kernels.cross_entropy_backward(
        out.reshape(rows, n_classes),
        g.reshape(-1) if reduction == "none" else g,
        z.contiguous().reshape(rows, n_classes),
        t.reshape(-1),
        lse_c.reshape(-1),
        ignore,
        ls,
        reduction,
    )
    return out


def softmax_backward(grad_y: NvArray, y: NvArray, axis: int = -1, log: bool = False) -> NvArray:
    """Gradient of ``softmax`` (or, with ``log``, ``log_softmax``) from its output ``y``.

    ``grad_x = y * (grad_y - sum(grad_y * y))`` along ``axis``, or for log-softmax
    ``grad_x = grad_y - exp(y) * sum(grad_y)``, in one fused pass per row. ``grad_y`` has
    ``y``'s shape and dtype (or float32 for float16/bfloat16 ``y``); the result has
    ``grad_y``'s dtype. Sums run in float32 (float64 for float64).

    Example::

        >>> y = ignis.softmax(x, axis=-1)
        >>> gx = ignis.nn.softmax_backward(gy, y, axis=-1)
    """
    op = "softmax_backward"
    if not isinstance(y, NvArray):
        raise TypeError(f"{op}: y must be an NvArray, got {type(y).__name__}")
    if y.dtype.kind != "f":
        raise DTypeError(f"{op}: y must be floating (a softmax output), got {y.dtype.name}")
    if y.ndim < 1:
        raise ShapeError(f"{op}: needs an array of at least 1 dimension, got shape ()")
    allowed = (y.dtype, dt.float32) if y.dtype in _HALF else (y.dtype,)
    g = check_like(grad_y, y, op, "grad_y", y.shape, allowed)
    ax = normalize_axis(axis, y.ndim, op)
    last = y.ndim - 1
    if ax != last:
        # Bring the axis last (a copy), run on rows, and put it back.
        perm = [d for d in range(y.ndim) if d != ax] + [ax]
        inverse = [perm.index(d) for d in range(y.ndim)]
        res = softmax_backward(g.permute(perm), y.permute(perm), -1, log)
        return res.permute(inverse).contiguous()
    out = _creation._new(y.shape, g.dtype, y._device)
    if y.numel == 0:
        return out
    n = y.shape[-1]
    y._backend.kernels.softmax_backward(
        out.reshape(-1, n), g.reshape(-1, n), y.contiguous().reshape(-1, n), bool(log)
    )
    return out
