"""NumPy reference of the fused activation backward passes (the CPU backend's ``activation``
family; the formulas of ``cuda_src/activation.cu``).

The derivative is computed in float64 from the saved array and multiplied by the gradient, then
rounded once into the output's dtype.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from . import _cpu_math
from ._cpu_backend import host_view

if TYPE_CHECKING:
    from .array import NvArray

__all__ = ["activation_backward", "derivative"]

_K = math.sqrt(2.0 / math.pi)
_C = 0.044715
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def derivative(kind: str, s: np.ndarray) -> np.ndarray:
    """``f'`` in float64 from the saved array ``s`` (the input x for gelu/gelu_tanh/silu, the
    output y for sigmoid/tanh/relu). relu's derivative is 1 where ``y > 0``, else 0."""
    s = np.asarray(s, dtype=np.float64)
    with np.errstate(all="ignore"):
        if kind == "gelu":
            cdf = 0.5 * (1.0 + _cpu_math.erf(s / math.sqrt(2.0)))
            return cdf + s * np.exp(-0.5 * s * s) * _INV_SQRT_2PI
        if kind == "gelu_tanh":
            t = np.tanh(_K * (s + _C * s * s * s))
            return 0.5 * (1.0 + t) + 0.5 * s * (1.0 - t * t) * (_K * (1.0 + 3.0 * _C * s * s))
        if kind == "silu":
            sig = _cpu_math.sigmoid(s)
            return sig * (1.0 + s * (1.0 - sig))
        if kind == "sigmoid":
            return s * (1.0 - s)
        if kind == "tanh":
            return 1.0 - s * s
    raise ValueError(f"activation backward: unknown kind {kind!r}")


def activation_backward(out: NvArray, grad: NvArray, saved: NvArray, kind: str) -> None:
    g = host_view(grad).astype(np.float64)
    s = host_view(saved)
    with np.errstate(all="ignore"):
        if kind == "relu":
            res = np.where(s.astype(np.float64) > 0, g, 0.0)
        else:
            res = g * derivative(kind, s)
    host_view(out)[...] = res.astype(out._dtype.numpy)
