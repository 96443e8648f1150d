"""A linear layer's product with its bias fused in, and its gradients (front end of
:func:`ignis.nn.linear` and :func:`ignis.nn.linear_backward`).

``linear(x, weight, bias)`` is ``x @ weight.T + bias`` over the last dimension of ``x``: the
leading dimensions fold into the rows of one product. Where ``x``, ``weight`` and ``bias`` share
one floating dtype, the backend adds the bias inside the product (cuBLASLt's bias epilogue on
the GPU: one kernel, the sum rounded once); other dtypes follow :func:`ignis.matmul` and ``+``
(NumPy promotion). ``linear_backward`` gives ``(grad_x, grad_weight, grad_bias)``; the weight's
and the bias's gradients come from one call where the backend can fuse them (cuBLASLt's
bias-gradient epilogue).
"""

from __future__ import annotations

from typing import Any

from .. import _dtypes as dt
from .._errors import DeviceMismatchError, ShapeError
from . import _creation, _ops
from .array import NvArray

__all__ = ["linear", "linear_backward"]

_FUSED = (dt.float16, dt.bfloat16, dt.float32, dt.float64)


def _array(op: str, name: str, v: Any) -> NvArray:
    if v.__class__ is not NvArray and not isinstance(v, NvArray):
        raise TypeError(f"{op}: {name} must be an NvArray, got {type(v).__name__}")
    return v


def _check_weight(op: str, weight: NvArray) -> tuple[int, int]:
    if weight.ndim != 2:
        raise ShapeError(f"{op}: weight must be 2-D (out, in), got shape {weight.shape}")
    return weight._shape


def _rows(x: NvArray, k: int) -> NvArray:
    """``x`` folded to ``(rows, k)``."""
    return x if x.ndim == 2 else x.reshape(-1, k)


def linear(x: NvArray, weight: NvArray, bias: NvArray | None = None) -> NvArray:
    """``x @ weight.T + bias``: ``x`` ``(..., in)``, ``weight`` ``(out, in)``, ``bias``
    ``(out,)`` or None; the result is ``(..., out)``.

    Example: ``y = ignis.nn.linear(x, w, b)`` for ``x (8, 10, 64)``, ``w (256, 64)``,
    ``b (256,)`` gives ``y (8, 10, 256)``.
    """
    op = "linear"
    x, weight = _array(op, "x", x), _array(op, "weight", weight)
    n, k = _check_weight(op, weight)
    if x.ndim < 1 or x._shape[-1] != k:
        raise ShapeError(
            f"{op}: x of shape {x.shape} does not end in weight's in-dimension {k} "
            f"(expected (..., {k}))"
        )
    if bias is not None:
        bias = _array(op, "bias", bias)
        if bias._shape != (n,):
            raise ShapeError(f"{op}: bias has shape {bias.shape}, expected ({n},)")
        if bias._device != x._device:
            raise DeviceMismatchError(f"{op}: bias is on {bias.device} but x is on {x.device}")
    x2 = _rows(x, k)
    dtype = x._dtype
    if bias is None or not (dtype in _FUSED and weight._dtype is dtype and bias._dtype is dtype):
        y = _ops.matmul(x2, weight, transpose_b=True)  # checks devices and dtypes
        if bias is not None:
            y = y + bias
    else:
        if weight._device != x._device:
            raise DeviceMismatchError(f"{op}: weight is on {weight.device} but x is on {x.device}")
        y = _creation._new((x2._shape[0], n), dtype, x._device)
        if y.numel:
            x._backend.kernels.matmul_bias(y, x2, weight.T, bias)
    return y if x.ndim == 2 else y.reshape(*x._shape[:-1], n)


def linear_backward(
    grad: NvArray,
    x: NvArray | None,
    weight: NvArray | None,
    *,
    need_x: bool = True,
    need_weight: bool = True,
    need_bias: bool = True,
) -> tuple[NvArray | None, NvArray | None, NvArray | None]:
    """Gradients ``(grad_x, grad_weight, grad_bias)`` of :func:`linear` for the output gradient
    ``grad`` ``(..., out)``; each is None unless its ``need_*`` flag is set. ``x`` is needed
    only for the weight's gradient, ``weight`` only for ``x``'s.

    ``grad_x = grad @ weight``, ``grad_weight = grad.T @ x`` (in the weight's ``(out, in)``
    layout), ``grad_bias = grad.sum(axis=rows)``.

    Example: ``gx, gw, gb = ignis.nn.linear_backward(g, x, w)``.
    """
    op = "linear_backward"
    grad = _array(op, "grad", grad)
    if grad.ndim < 1:
        raise ShapeError(f"{op}: grad must have at least 1 dimension, got shape {grad.shape}")
    n = grad._shape[-1]
    g2 = grad if grad.ndim == 2 else grad.reshape(-1, n)
    gx = gw = gb = None
    if need_x:
        weight = _array(op, "weight", weight)
        wn, k = _check_weight(op, weight)
        if wn != n:
            raise ShapeError(
                f"{op}: grad of last dimension {n} does not match weight {weight.shape}"
            )
        gx = _ops.matmul(g2, weight)
        if grad.ndim != 2:
            gx = gx.reshape(*grad._shape[:-1], k)
    x2 = None
    if need_weight:
        x = _array(op, "x", x)
        if x._shape[:-1] != grad._shape[:-1]:
            raise ShapeError(
                f"{op}: x {x.shape} and grad {grad.shape} must have the same leading dimensions"
            )
        x2 = _rows(x, x._shape[-1])
    dtype = g2._dtype
    if (need_weight and need_bias and dtype in _FUSED and x2._dtype is dtype
            and x2._device == g2._device):
        gw = _creation._new((n, x2._shape[1]), dtype, g2._device)
        gb = _creation._new((n,), dtype, g2._device)
        if gw.numel:
            g2._backend.kernels.matmul_row_sums(gw, gb, g2.T, x2)
        elif gb.numel:
            gb = g2.sum(axis=0)
        return gx, gw, gb
    if need_weight:
        gw = _ops.matmul(g2, x2, transpose_a=True)
    if need_bias:
        gb = g2.sum(axis=0)
    return gx, gw, gb
