"""ignis_autograd: reverse-mode automatic differentiation on the ignis GPU foundation.

Example::

    >>> from ignis_autograd import Tensor
    >>> x = Tensor.from_host([1.0, 2.0, 3.0], shape=[3], requires_grad=True)
    >>> (x * x).sum().backward()
    >>> x.grad.to_host()
    array([2., 4., 6.], dtype=float32)

Public names: :class:`Tensor`, :class:`Tape`, :class:`Device`, :class:`no_grad`,
:class:`enable_grad`, :func:`gradcheck`, :func:`checkpoint`, :class:`Function` (custom ops), and
the differentiable functions (``cross_entropy``, ``layer_norm``, ``softmax``, ``where``,
``concatenate``, ...).
"""

from __future__ import annotations

from . import _dispatch, _fuse, amp, functional, nn, optim, parallel
from ._errors import AutogradError, GradcheckError, GraphFreedError
from ._higher import grad
from .attention import decode_attention, packed_attention, scaled_dot_product_attention
from .checkpoint import checkpoint
from .device import Device, DeviceProperties
from .function import Function, once_differentiable
from .functional import *  # noqa: F403  (the differentiable functions)
from .gradcheck import gradcheck, gradgradcheck
from .graphs import CapturedStep, capture_step
from .tape import Tape, enable_grad, no_grad
from .tensor import Tensor

_dispatch.install()  # ignis' derivative rules compute on Tensors too (higher-order gradients)
_fuse.install()  # ignis.fuse functions take Tensors: one node, one fused backward kernel

from ignis import fuse  # noqa: E402  (the same decorator; its functions take Tensors)

__version__ = "0.1.0"

__all__ = [
    "Tensor",
    "Tape",
    "Device",
    "DeviceProperties",
    "no_grad",
    "enable_grad",
    "gradcheck",
    "gradgradcheck",
    "grad",
    "checkpoint",
    "Function",
    "once_differentiable",
    "fuse",
    "capture_step",
    "CapturedStep",
    "AutogradError",
    "GraphFreedError",
    "GradcheckError",
    *functional.__all__,
    "scaled_dot_product_attention",
    "packed_attention",
    "decode_attention",
    "nn",
    "optim",
    "parallel",
    "amp",
]
