"""CausalSelfAttention: multi-head causal self-attention with an optional KV cache and RoPE.

One ``qkv`` Linear makes queries, keys and values (``dim -> 3 * dim``, in that order, heads
contiguous inside each: the layout of GPT-2/nanoGPT's ``c_attn``); heads are split by reshape and
transpose, attended with :func:`ignis_autograd.scaled_dot_product_attention` (causal), merged and
projected by ``proj``.

Example::

    >>> import ignis_autograd as ag
    >>> from ignis_autograd import nn
    >>> attn = nn.CausalSelfAttention(64, n_heads=4)
    >>> y = attn(ag.Tensor.randn((2, 10, 64)))          # (2, 10, 64)
"""

from __future__ import annotations

from typing import Any

import ignis.nn

import ignis
from ignis import ShapeError

from ..attention import packed_attention, scaled_dot_product_attention
from ..tensor import Tensor, needs_grad
from ._util import as_tensor, check_probability, positive_int
from .kv_cache import KVCache
from .layers import Dropout, Linear
from .module import Module
from .rope import RotaryEmbedding

__all__ = ["CausalSelfAttention"]


class CausalSelfAttention(Module):
    """Causal multi-head self-attention over ``(batch, T, dim)`` inputs.

    Args:
        dim: model width; must be divisible by ``n_heads``.
        n_heads: number of heads (``head_dim = dim // n_heads``).
        dropout: probability for the attention weights and the output (training only). The
            attention weights are dropped inside the fused kernels (no L x L matrix; see
            :func:`ignis_autograd.scaled_dot_product_attention`).
        bias: biases in ``qkv`` and ``proj``.
        rope: rotate queries and keys by position (:class:`RotaryEmbedding`).

    ``forward(x, kv_cache=None)``: with a :class:`KVCache` the new keys/values are appended to
    it and ``x`` (its ``T`` new positions, continuing the cached ones) attends over all cached
    positions. Gradients do not flow into cached keys/values: the cache is for inference.
    """

    def __init__(
        self,
        dim: int,
        n_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        rope: bool = False,
        device: Any = None,
        dtype: Any = "float32",
    ):
        super().__init__()
        positive_int(dim, "CausalSelfAttention", "dim")
        positive_int(n_heads, "CausalSelfAttention", "n_heads")
        if dim % n_heads:
            raise ValueError(
                f"CausalSelfAttention: dim {dim} is not divisible by n_heads {n_heads}"
            )
        self.dim = dim
        self.n_heads = n_heads
        self.head_dim = dim // n_heads
        self.dropout = check_probability(dropout, "CausalSelfAttention")
        self.qkv = Linear(dim, 3 * dim, bias=bias, device=device, dtype=dtype)
        self.proj = Linear(dim, dim, bias=bias, device=device, dtype=dtype)
        self.resid_drop = Dropout(dropout)
        self.rope = RotaryEmbedding(self.head_dim) if rope else None

    def new_cache(self, batch: int, max_len: int) -> KVCache:
        """An empty :class:`KVCache` for this layer, on its weights' device and dtype."""
        w = self.qkv.weight.data
        return KVCache(batch, self.n_heads, max_len, self.head_dim, w.dtype, w.device)

    def forward(self, x: Any, kv_cache: KVCache | None = None) -> Tensor:
        xt = as_tensor(x, "CausalSelfAttention")
        if xt.ndim != 3 or xt.shape[-1] != self.dim:
            raise ShapeError(
                f"CausalSelfAttention: input of shape {xt.shape} is not (batch, T, dim={self.dim})"
            )
        b, n, _ = xt.shape
        h, hd = self.n_heads, self.head_dim
        if kv_cache is None and self.rope is None:
            # One recorded op from the packed projection to the merged heads (no split copies
            # of the gradient to sum in the backward pass).
            out = packed_attention(self.qkv(xt), h, causal=True, dropout_p=self._attn_p())
            return self.resid_drop(self.proj(out))
        # (B, T, 3*dim) -> (3, B, H, T, hd): q/k/v blocks of the output, heads inside each.
        qkv = self.qkv(xt).reshape(b, n, 3, h, hd).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        start = kv_cache.length if kv_cache is not None else 0
        if self.rope is not None:
            q, k = self.rope(q, start), self.rope(k, start)
        if kv_cache is None:
            out = self._attend(q, k, v)
        else:
            out = self._attend_cached(q, k, v, kv_cache)
        out = out.permute(0, 2, 1, 3).reshape(b, n, self.dim)
        return self.resid_drop(self.proj(out))

    def _attn_p(self) -> float:
        """The attention weights' dropout probability now: ``dropout`` in training, else 0."""
        return self.dropout if self.training else 0.0

    def _attend(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        # Dropout of the attention weights happens inside the fused kernels.
        return scaled_dot_product_attention(q, k, v, causal=True, dropout_p=self._attn_p())

    def _attend_cached(self, q: Tensor, k: Tensor, v: Tensor, cache: KVCache) -> Tensor:
        if cache.shape[0] != q.shape[0] or cache.shape[1] != self.n_heads:
            raise ShapeError(
                f"CausalSelfAttention: KV cache of shape {cache.shape} does not fit batch "
                f"{q.shape[0]}, n_heads {self.n_heads}, head_dim {self.head_dim}"
            )
        length = cache.append(k.data, v.data)
        fused = getattr(ignis.nn, "decode_attention", None)
        if fused is not None and q.shape[-2] == 1 and not needs_grad(q):
            out = fused(q.data, cache.k, cache.v, length)
            return Tensor(out.reshape(q.shape))
        keys, values = Tensor(cache.keys()), Tensor(cache.values())
        return self._attend(q, keys, values)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, n_heads={self.n_heads}, dropout={self.dropout}"
