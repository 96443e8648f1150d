"""Fused backward passes of the pointwise activations (front end of the :mod:`ignis.nn`
functions ``gelu_backward``, ``silu_backward``, ``sigmoid_backward``, ``tanh_backward`` and
``relu_backward``).

Each one computes ``grad * f'(.)`` in one pass: one read of the gradient and of the saved array,
one write. Like PyTorch's ``*_backward`` ops, gelu and silu take the forward *input* ``x``;
sigmoid, tanh and relu take the forward *output* ``y`` (their derivatives are cheapest from it:
``y (1 - y)``, ``1 - y**2``, ``y > 0``).

Dtypes: ``grad`` has the saved array's dtype, or float32 for a float16/bfloat16 saved array
(gradients of 16-bit tensors accumulate in float32). The result has ``grad``'s dtype; it is
computed in float32 (float64 for float64) and rounded once. The formulas are the plain ones, so
gelu/silu give NaN at ``x = +-Inf`` (``inf * 0``), as PyTorch does; relu gives 0 where ``y`` is
NaN.
"""

from __future__ import annotations

from typing import Any

from .. import _dtypes as dt
from .._errors import DeviceMismatchError, DTypeError, ShapeError
from . import _creation
from .array import NvArray

__all__ = ["gelu_backward", "silu_backward", "sigmoid_backward", "tanh_backward", "relu_backward"]

_FLOATS = (dt.float16, dt.bfloat16, dt.float32, dt.float64)
_HALF = (dt.float16, dt.bfloat16)


def _backward(op: str, kind: str, grad: Any, saved: Any, name: str) -> NvArray:
    if not isinstance(grad, NvArray):
        raise TypeError(f"{op}: grad must be an NvArray, got {type(grad).__name__}")
    if not isinstance(saved, NvArray):
        raise TypeError(f"{op}: {name} must be an NvArray, got {type(saved).__name__}")
    sd, gd = saved._dtype, grad._dtype
    if sd not in _FLOATS:
        raise DTypeError(f"{op}: {name} must be a floating array, got {sd.name}")
    if not (gd is sd or (gd is dt.float32 and sd in _HALF)):
        expected = f"{sd.name} or float32" if sd in _HALF else sd.name
        raise DTypeError(
            f"{op}: grad has dtype {gd.name}, expected {expected} (for {name} {sd.name})"
        )
    if grad._shape != saved._shape:
        raise ShapeError(
            f"{op}: grad has shape {grad._shape}, expected {name}'s shape {saved._shape}"
        )
    if grad._device != saved._device:
        raise DeviceMismatchError(
            f"{op}: grad is on {grad._device} but {name} is on {saved._device}"
        )
    out = _creation._new(grad._shape, gd, grad._device)
    if out.numel:
        grad._backend.kernels.activation_backward(out, grad.contiguous(), saved.contiguous(), kind)
    return out


def gelu_backward(grad: NvArray, x: NvArray, approximate: str = "none") -> NvArray:
    """``grad * gelu'(x)``: the input gradient of ``gelu(x, approximate)``.

    ``approximate`` is ``"none"`` (``gelu(x) = x Phi(x)``, derivative ``Phi(x) + x phi(x)``) or
    ``"tanh"`` (the tanh formula's own derivative).

    Example: ``gx = ignis.nn.gelu_backward(gy, x)``.
    """
    if approximate not in ("none", "tanh"):
        raise ValueError(
            f"gelu_backward: approximate must be 'none' or 'tanh', got {approximate!r}"
        )
    kind = "gelu" if approximate == "none" else "gelu_tanh"
    return _backward("gelu_backward", kind, grad, x, "x")


def silu_backward(grad: NvArray, x: NvArray) -> NvArray:
    """``grad * silu'(x)`` with ``silu'(x) = s (1 + x (1 - s))``, ``s = sigmoid(x)``.

    Example: ``gx = ignis.nn.silu_backward(gy, x)``.
    """
    return _backward("silu_backward", "silu", grad, x, "x")


def sigmoid_backward(grad: NvArray, y: NvArray) -> NvArray:
    """``grad * y * (1 - y)`` from the forward output ``y = sigmoid(x)``.

    Example: ``gx = ignis.nn.sigmoid_backward(gy, y)``.
    """
    return _backward("sigmoid_backward", "sigmoid", grad, y, "y")


def tanh_backward(grad: NvArray, y: NvArray) -> NvArray:
    """``grad * (1 - y**2)`` from the forward output ``y = tanh(x)``.

    Example: ``gx = ignis.nn.tanh_backward(gy, y)``.
    """
    return _backward("tanh_backward", "tanh", grad, y, "y")


def relu_backward(grad: NvArray, y: NvArray) -> NvArray:
    """``grad`` where ``y > 0``, else 0, from the forward output ``y = relu(x)`` (a NaN ``y``
    gives 0).

    Example: ``gx = ignis.nn.relu_backward(gy, y)``.
    """
    return _backward("relu_backward", "relu", grad, y, "y")
