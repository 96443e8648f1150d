"""Weight initialization: fill a Parameter's values in place from ``ignis.random``.

Values are drawn in float32 on the parameter's device and rounded once to its dtype, so a
bfloat16 model starts from the same weights (rounded) as a float32 one with the same seed.
Seed the stream with ``ignis.random.seed(n)`` or pass a ``generator``
(an ``ignis.random.Generator``).

Example::

    >>> from ignis_autograd import nn
    >>> lin = nn.Linear(16, 4)
    >>> nn.init.normal_(lin.weight, std=0.02)
"""

from __future__ import annotations

from typing import Any

import ignis

from ..tensor import Tensor

__all__ = ["uniform_", "normal_", "zeros_", "ones_"]


def _source(generator: Any) -> Any:
    return generator if generator is not None else ignis.random


def uniform_(t: Tensor, low: float = 0.0, high: float = 1.0, generator: Any = None) -> Tensor:
    """Fill ``t`` with values uniform in ``[low, high)``; returns ``t``."""
    d = t.data
    u = _source(generator).rand(d.shape, dtype="float32", device=d.device)
    d.copy_(u * (high - low) + low)
    return t


def normal_(t: Tensor, mean: float = 0.0, std: float = 1.0, generator: Any = None) -> Tensor:
    """Fill ``t`` with normal values of mean ``mean`` and standard deviation ``std``."""
    d = t.data
    z = _source(generator).randn(d.shape, dtype="float32", device=d.device)
    d.copy_(z * std + mean)
    return t


def zeros_(t: Tensor) -> Tensor:
    """Fill ``t`` with zeros."""
    t.data.fill_(0)
    return t


def ones_(t: Tensor) -> Tensor:
    """Fill ``t`` with ones."""
    t.data.fill_(1)
    return t
