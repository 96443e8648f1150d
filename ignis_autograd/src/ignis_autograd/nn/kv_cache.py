"""KVCache: preallocated keys and values of one attention layer, for incremental decoding.

Generation feeds one new token at a time; each layer appends its new key/value rows here and
attends over the first :attr:`length` positions instead of recomputing the whole prefix.

Example::

    >>> import ignis_autograd as ag
    >>> from ignis_autograd import nn
    >>> attn = nn.CausalSelfAttention(64, n_heads=4).eval()
    >>> cache = attn.new_cache(batch=2, max_len=128)
    >>> with ag.no_grad():
    ...     y = attn(ag.Tensor.randn((2, 10, 64)), kv_cache=cache)  # positions 0..9
    ...     y = attn(ag.Tensor.randn((2, 1, 64)), kv_cache=cache)   # position 10
    >>> cache.length
    11
"""

from __future__ import annotations

from typing import Any

import ignis
from ignis import NvArray, ShapeError

from ._util import positive_int

__all__ = ["KVCache"]


class KVCache:
    """Keys and values ``(batch, n_heads, max_len, head_dim)`` and the filled ``length``.

    Attributes:
        k, v: the full preallocated NvArrays (positions ``>= length`` hold stale data).
        length: how many positions are filled.
    """

    def __init__(
        self,
        batch: int,
        n_heads: int,
        max_len: int,
        head_dim: int,
        dtype: Any = "float32",
        device: Any = None,
    ):
        shape = tuple(
            positive_int(v, "KVCache", n)
            for v, n in (
                (batch, "batch"),
                (n_heads, "n_heads"),
                (max_len, "max_len"),
                (head_dim, "head_dim"),
            )
        )
        self.k = ignis.zeros(shape, dtype=dtype, device=device)
        self.v = ignis.zeros(shape, dtype=dtype, device=device)
        self.length = 0

    @property
    def max_len(self) -> int:
        return self.k.shape[2]

    @property
    def shape(self) -> tuple[int, ...]:
        """``(batch, n_heads, max_len, head_dim)``."""
        return self.k.shape

    def reset(self) -> None:
        """Forget the cached positions (the memory is kept)."""
        self.length = 0

    def append(self, k: NvArray, v: NvArray) -> int:
        """Write ``k``/``v`` of shape ``(batch, n_heads, T, head_dim)`` at positions
        ``length..length+T-1``; returns the new length."""
        b, h, _, d = self.k.shape
        for name, x in (("k", k), ("v", v)):
            if x.ndim != 4 or (x.shape[0], x.shape[1], x.shape[3]) != (b, h, d):
                raise ShapeError(
                    f"KVCache.append: {name} has shape {x.shape}, expected ({b}, {h}, T, {d})"
                )
        if k.shape != v.shape:
            raise ShapeError(f"KVCache.append: k {k.shape} and v {v.shape} differ")
        n = k.shape[2]
        end = self.length + n
        if end > self.max_len:
            raise ValueError(
                f"KVCache.append: {n} new position(s) after {self.length} exceed max_len "
                f"{self.max_len}"
            )
        self.k[:, :, self.length : end] = k
        self.v[:, :, self.length : end] = v
        self.length = end
        return end

    def keys(self) -> NvArray:
        """The filled keys, ``(batch, n_heads, length, head_dim)`` (a view)."""
        return self.k[:, :, : self.length]

    def values(self) -> NvArray:
        """The filled values, ``(batch, n_heads, length, head_dim)`` (a view)."""
        return self.v[:, :, : self.length]

    def __repr__(self) -> str:
        return f"KVCache(shape={self.shape}, length={self.length}, dtype={self.k.dtype.name})"
