"""Rotary position embeddings (RoPE), the "rotate half" form of GPT-NeoX and Llama.

For a head vector split into halves ``x1 = x[..., :d/2]`` and ``x2 = x[..., d/2:]`` at
position ``p``, with angles ``theta_i = p * base ** (-2i / d)``::

    rope(x) = concat(x1 * cos(theta) - x2 * sin(theta), x2 * cos(theta) + x1 * sin(theta))

so the dot product of a rotated query and key depends only on their distance.

Example::

    >>> import ignis_autograd as ag
    >>> from ignis_autograd.nn import RotaryEmbedding
    >>> rope = RotaryEmbedding(head_dim=64)
    >>> q = ag.Tensor.randn((2, 8, 16, 64))
    >>> q_rot = rope(q, start=0)       # positions 0..15
"""

from __future__ import annotations

from typing import Any

import ignis
from ignis import NvArray, ShapeError

from .. import functional
from ..functional import concatenate
from ..tensor import Tensor
from ._util import as_tensor, positive_int
from .module import Module

__all__ = ["RotaryEmbedding"]


class RotaryEmbedding(Module):
    """Rotates ``(..., T, head_dim)`` query/key tensors by their positions ``start..start+T-1``.

    No parameters. Uses the fused :func:`ignis_autograd.rope` where it exists; otherwise a
    composite whose cos/sin tables are computed in float64, rounded to the input dtype, and
    kept per (device, dtype), grown as longer positions are asked for.
    """

    def __init__(self, head_dim: int, base: float = 10000.0):
        super().__init__()
        positive_int(head_dim, "RotaryEmbedding", "head_dim")
        if head_dim % 2:
            raise ValueError(f"RotaryEmbedding: head_dim must be even, got {head_dim}")
        self.head_dim = head_dim
        self.base = float(base)
        self._tables: dict[tuple[str, str], tuple[NvArray, NvArray]] = {}

    def _table(self, length: int, device: Any, dtype: Any) -> tuple[NvArray, NvArray]:
        key = (str(device), dtype.name)
        hit = self._tables.get(key)
        if hit is not None and hit[0].shape[0] >= length:
            return hit
        size = max(length, 2 * hit[0].shape[0] if hit is not None else 0, 64)
        half = self.head_dim // 2
        inv_freq = ignis.arange(half, dtype="float64", device=device) * (-2.0 / self.head_dim)
        inv_freq = ignis.power(self.base, inv_freq)
        pos = ignis.arange(size, dtype="float64", device=device).reshape(size, 1)
        angles = pos * inv_freq.reshape(1, half)
        table = (ignis.cos(angles).astype(dtype), ignis.sin(angles).astype(dtype))
        self._tables[key] = table
        return table

    def forward(self, x: Any, start: int = 0) -> Tensor:
        xt = as_tensor(x, "RotaryEmbedding")
        if xt.ndim < 2 or xt.shape[-1] != self.head_dim:
            raise ShapeError(
                f"RotaryEmbedding: input of shape {xt.shape} is not (..., T, head_dim="
                f"{self.head_dim})"
            )
        if start < 0:
            raise ValueError(f"RotaryEmbedding: start must be >= 0, got {start}")
        fused = getattr(functional, "rope", None)
        if fused is not None:
            return fused(xt, offset=start, base=self.base)
        n = xt.shape[-2]
        cos, sin = self._table(start + n, xt.data.device, xt.dtype)
        cos, sin = cos[start : start + n], sin[start : start + n]
        half = self.head_dim // 2
        x1, x2 = xt[..., :half], xt[..., half:]
        return concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, base={self.base}"
