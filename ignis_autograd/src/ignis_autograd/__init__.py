"""ignis_autograd: reverse-mode automatic differentiation on the ignis GPU foundation.

Example::

    >>> from ignis_autograd import Tensor
    >>> x = Tensor.from_host([1.0, 2.0, 3.0], shape=[3], requires_grad=True)
    >>> (x * x).sum().backward()
    >>> x.grad.to_host()
    array([2., 4., 6.], dtype=float32)

Public names: :class:`Tensor`, :class:`Tape`, :class:`Device`, :class:`no_grad`,
:class:`enable_grad`, :func:`gradcheck`, :func:`checkpoint`, and the differentiable functions
(``cross_entropy``, ``layer_norm``, ``softmax``, ``where``, ``concatenate``, ...).
"""

from __future__ import annotations

from ._errors import AutogradError, GradcheckError, GraphFreedError
from . import amp, nn, optim
from .attention import decode_attention, packed_attention, scaled_dot_product_attention
from .checkpoint import checkpoint
from .device import Device, DeviceProperties
from .functional import (
    abs,
    add,
    add_bias,
    clip,
    concatenate,
    cross_entropy,
    divide,
    dropout,
    embedding,
    exp,
    gelu,
    layer_norm,
    linear,
    log,
    log_softmax,
    matmul,
    max,
    maximum,
    mean,
    min,
    minimum,
    multiply,
    negative,
    permute,
    power,
    relu,
    reshape,
    rms_norm,
    rope,
    sigmoid,
    silu,
    softmax,
    sqrt,
    stack,
    subtract,
    sum,
    tanh,
    transpose,
    var,
    where,
)
from .gradcheck import gradcheck
from .graphs import CapturedStep, capture_step
from .tape import Tape, enable_grad, no_grad
from .tensor import Tensor

__version__ = "0.1.0"

__all__ = [
    "Tensor",
    "Tape",
    "Device",
    "DeviceProperties",
    "no_grad",
    "enable_grad",
    "gradcheck",
    "checkpoint",
    "capture_step",
    "CapturedStep",
    "AutogradError",
    "GraphFreedError",
    "GradcheckError",
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
    "linear",
    "softmax",
    "log_softmax",
    "cross_entropy",
    "layer_norm",
    "rms_norm",
    "embedding",
    "dropout",
    "rope",
    "scaled_dot_product_attention",
    "packed_attention",
    "decode_attention",
    "nn",
    "optim",
    "amp",
]
