"""Gradient clipping by the global L2 norm, on the device.

Example::

    >>> total = clip_grad_norm_(model_params, max_norm=1.0)   # a device scalar
    >>> float(total)                                          # only this synchronizes
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import ignis.nn

import ignis
from ignis import NvArray

from ..tensor import Tensor

__all__ = ["clip_grad_norm_"]


def clip_grad_norm_(params: Tensor | Iterable[Tensor], max_norm: float,
                    norm_type: float = 2.0) -> NvArray:
    """Scale the gradients of ``params`` in place so that their global L2 norm is at most
    ``max_norm``; returns the norm before clipping as a device scalar, computed and returned at
    the gradients' precision (float64 when any gradient is float64, else float32).

    Like ``torch.nn.utils.clip_grad_norm_``: ``coef = min(1, max_norm / (norm + 1e-6))`` and
    every gradient is multiplied by it, all on the device (two launches for the norm, one for
    the scaling per gradient dtype; no host synchronization). Parameters without a gradient
    are skipped. Only ``norm_type=2`` is supported.
    """
    op = "clip_grad_norm_"
    if norm_type != 2 and norm_type != 2.0:
        raise ValueError(f"{op}: only norm_type=2 (the L2 norm) is supported, got {norm_type!r}")
    max_norm = float(max_norm)
    if not max_norm >= 0:
        raise ValueError(f"{op}: max_norm must be >= 0, got {max_norm!r}")
    plist = [params] if isinstance(params, Tensor) else list(params)
    device: Any = None
    grads = []
    for i, p in enumerate(plist):
        if not isinstance(p, Tensor):
            raise TypeError(f"{op}: params[{i}] must be a Tensor, got {type(p).__name__}")
        device = p.device if device is None else device
        g = p.grad
        if g is not None:
            grads.append(g.data if isinstance(g, Tensor) else g)  # (Tensor: create_graph's)
    total = ignis.nn.multi_tensor_l2_norm(grads, device=device)
    if grads:
        ignis.nn.multi_tensor_clip_(grads, total, max_norm)
    return total
