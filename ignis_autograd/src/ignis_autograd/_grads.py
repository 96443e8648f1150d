"""Clearing gradients: what ``Module.zero_grad`` and ``Optimizer.zero_grad`` both do."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import ignis
from ignis import NvArray

from .tensor import Tensor


def zero_grads(params: Iterable[Tensor], set_to_none: bool = False) -> None:
    """Drop (``set_to_none=True``) or zero in place every ``p.grad`` that is not None.

    In place, the contiguous floating-point gradients of each device are zeroed together by
    :func:`ignis.nn.multi_tensor_zero_` (one launch per dtype on a GPU, not one per gradient);
    any other gradient is filled with 0. The buffers stay where they are, which a captured
    CUDA graph needs.
    """
    together: dict[Any, list[NvArray]] = {}
    for p in params:
        g = p.grad
        if g is None:
            continue
        if isinstance(g, Tensor):  # left by backward(create_graph=True): detached, as PyTorch
            g = p.grad = g.data
        if set_to_none:
            p.grad = None
        elif g.dtype.kind == "f" and g.is_contiguous:
            together.setdefault(g.device, []).append(g)
        else:
            g.fill_(0)
    for grads in together.values():
        ignis.nn.multi_tensor_zero_(grads)
