"""Gradient buckets: which parameters are reduced together, and their flat buffers.

Parameters are taken in reverse registration order (PyTorch's: backward produces the last
layers' gradients first) and grouped, per (device, gradient dtype), into buckets of at most
``cap_bytes`` of gradient (a parameter larger than the cap gets a bucket of its own). Each
bucket owns one flat, contiguous gradient buffer; every parameter's ``grad`` becomes a view of
it, so the all-reduce needs no copies once the views are in place.

Example::

    >>> assign_buckets([(4, 4, "float32", "cpu")] * 3, cap_bytes=32)
    [[2, 1], [0]]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import ignis
from ignis import NvArray

from .._grads import gather_grads_into
from .._graph import grad_dtype

__all__ = ["Bucket", "assign_buckets", "make_buckets"]


def assign_buckets(specs: Sequence[tuple[int, int, Any, Any]], cap_bytes: int) -> list[list[int]]:
    """Group parameter indices into buckets.

    Args:
        specs: per parameter ``(numel, itemsize of its gradient, gradient dtype, device)``.
        cap_bytes: the most gradient bytes in one bucket (> 0).

    Returns the buckets in launch order, each a list of indices in reverse parameter order.
    """
    if cap_bytes <= 0:
        raise ValueError(f"assign_buckets: cap_bytes must be > 0, got {cap_bytes}")
    open_: dict[tuple[str, str], tuple[list[int], int]] = {}
    done: list[list[int]] = []
    for i in reversed(range(len(specs))):
        numel, itemsize, dtype, device = specs[i]
        key = (str(dtype), str(device))
        members, size = open_.get(key, ([], 0))
        nbytes = numel * itemsize
        if members and size + nbytes > cap_bytes:
            done.append(members)
            members, size = [], 0
        members.append(i)
        open_[key] = (members, size + nbytes)
    done.extend(members for members, _ in open_.values() if members)
    # Launch order: by the first (latest-registered) parameter of each bucket.
    done.sort(key=lambda m: -m[0])
    return done


class Bucket:
    """Parameters reduced together: their flat gradient buffer and each one's view of it.

    Attributes: ``index`` (launch order), ``params``, ``flat`` (1-D NvArray), ``views`` (one per
    parameter, of its shape), ``ready`` (ids of the parameters whose gradient is complete in
    the current backward), ``launched``.
    """

    def __init__(self, index: int, params: list[Any]):
        self.index = index
        self.params = params
        first = params[0].data
        dtype = grad_dtype(first.dtype)
        total = sum(p.data.numel for p in params)
        self.flat: NvArray = ignis.zeros((total,), dtype=dtype, device=first.device)
        self.views: list[NvArray] = []
        offset = 0
        for p in params:
            n = p.data.numel
            self.views.append(self.flat[offset : offset + n].reshape(p.data.shape))
            offset += n
        self.ready: set[int] = set()
        self.launched = False

    @property
    def nbytes(self) -> int:
        return self.flat.nbytes

    def gather_grads(self) -> None:
        """Make each parameter's ``grad`` its view of :attr:`flat` (copying a gradient that
        lives elsewhere; zeros for a parameter that got none, so every rank reduces the same
        buffer)."""
        gather_grads_into(self.params, self.views)

    def __repr__(self) -> str:
        return f"<Bucket {self.index}: {len(self.params)} parameters, {self.nbytes} bytes>"


def make_buckets(params: list[Any], cap_bytes: int) -> list[Bucket]:
    """The :class:`Bucket` objects of ``params`` (see :func:`assign_buckets`)."""
    specs = []
    for p in params:
        gd = grad_dtype(p.data.dtype)
        specs.append((p.data.numel, gd.itemsize, gd, p.data.device))
    return [
        Bucket(i, [params[j] for j in members])
        for i, members in enumerate(assign_buckets(specs, cap_bytes))
    ]
