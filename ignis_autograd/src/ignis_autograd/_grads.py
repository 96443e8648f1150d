"""Clearing gradients: what ``Module.zero_grad`` and ``Optimizer.zero_grad`` both do; moving
gradients into views of one flat buffer: what DDP buckets and ZeRO-1 shards both do."""

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


def gather_grads_into(params: Iterable[Tensor], views: Iterable[NvArray]) -> None:
    """Make each parameter's ``grad`` its view in ``views`` (same order): a gradient that lives
    elsewhere is copied in, a parameter that got none gets zeros (so that every rank reduces
    the same buffer), and from then on ``grad`` is the view (``zero_grad()`` keeps it there)."""
    for p, view in zip(params, views, strict=True):
        g = p.grad
        if g is view:
            continue
        if g is None:
            view.fill_(0)
        else:
            view.copy_(g if isinstance(g, NvArray) else g.data)  # (a Tensor: create_graph=True)
        p.grad = view
