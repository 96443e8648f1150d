"""TransformerBlock (pre-norm) and GPT, a decoder-only language model.

Example::

    >>> import ignis
    >>> from ignis_autograd import nn
    >>> model = nn.GPT(vocab_size=256, context=128, dim=64, n_layers=2, n_heads=4)
    >>> ids = ignis.random.randint(0, 256, shape=(2, 16))
    >>> logits = model(ids)                                   # (2, 16, 256)
    >>> out = model.generate(ids, max_new_tokens=20, top_k=40)  # (2, 36)
"""

from __future__ import annotations

import math
from typing import Any

import ignis
from ignis import DTypeError, NvArray, ShapeError

from ..tape import no_grad
from ..tensor import Tensor, as_data
from . import init
from ._sampling import sample
from ._util import positive_int
from .attention import CausalSelfAttention
from .containers import ModuleList
from .kv_cache import KVCache
from .layers import MLP, Dropout, Embedding, LayerNorm, Linear, RMSNorm
from .module import Module

__all__ = ["TransformerBlock", "GPT"]


def _norm(kind: str, dim: int, device: Any, dtype: Any, bias: bool = True) -> Module:
    if kind == "layernorm":
        return LayerNorm(dim, bias=bias, device=device, dtype=dtype)
    if kind == "rmsnorm":
        return RMSNorm(dim, device=device, dtype=dtype)
    raise ValueError(f"norm must be 'layernorm' or 'rmsnorm', got {kind!r}")


class TransformerBlock(Module):
    """``x + attn(norm1(x))`` then ``x + mlp(norm2(x))`` (pre-norm, residuals).

    Args:
        dim, n_heads: width and heads of the attention.
        mlp_ratio: the MLP's hidden width is ``mlp_ratio * dim``.
        activation: the MLP's activation (see :class:`MLP`): ``"gelu"`` (exact) or
            ``"gelu_tanh"`` (GPT-2's approximation), ``"relu"``, ``"silu"``.
        dropout: attention-weight, attention-output and MLP-output dropout.
        norm: ``"layernorm"`` or ``"rmsnorm"``.
        rope: rotary position embeddings in the attention.
        bias: biases in the attention's and the MLP's linear layers.
        norm_bias: a bias in each LayerNorm (RMSNorm has none).
    """

    def __init__(
        self,
        dim: int,
        n_heads: int,
        mlp_ratio: int = 4,
        dropout: float = 0.0,
        norm: str = "layernorm",
        rope: bool = False,
        bias: bool = True,
        activation: str = "gelu",
        device: Any = None,
        dtype: Any = "float32",
        norm_bias: bool = True,
    ):
        super().__init__()
        self.norm1 = _norm(norm, dim, device, dtype, norm_bias)
        self.attn = CausalSelfAttention(
            dim, n_heads, dropout=dropout, bias=bias, rope=rope, device=device, dtype=dtype
        )
        self.norm2 = _norm(norm, dim, device, dtype, norm_bias)
        hidden = positive_int(int(mlp_ratio * dim), "TransformerBlock", "mlp_ratio * dim")
        self.mlp = MLP(
            dim, hidden, activation=activation, dropout=dropout, bias=bias, device=device,
            dtype=dtype,
        )

    def forward(self, x: Any, kv_cache: KVCache | None = None) -> Tensor:
        x = x + self.attn(self.norm1(x), kv_cache=kv_cache)
        return x + self.mlp(self.norm2(x))


class GPT(Module):
    """A decoder-only transformer language model (GPT-2 layout, pre-norm).

    ``tok_emb`` (token embeddings) + ``pos_emb`` (learned positions, up to ``context``) ->
    dropout -> ``blocks`` -> ``norm`` -> ``lm_head``. With ``tie_weights=True`` (the default,
    as GPT-2) ``lm_head.weight`` *is* ``tok_emb.weight``: one parameter, listed once by
    :meth:`named_parameters` and :meth:`state_dict` (as ``tok_emb.weight``);
    ``load_state_dict`` also accepts a dict that lists it under ``lm_head.weight`` as well.

    Weights start as GPT-2's: N(0, 0.02) for linear and embedding weights, zero biases, and
    N(0, 0.02 / sqrt(2 * n_layers)) for the projections that feed the residual stream.

    Args:
        vocab_size, context: number of token ids; longest sequence (positions).
        dim, n_layers, n_heads: width, depth, attention heads.
        dropout: dropout probability throughout (training only).
        mlp_ratio, norm, rope, activation: passed to every :class:`TransformerBlock`.
        bias: biases in every linear layer and LayerNorm (``False``: none, as nanoGPT's
            ``bias=False``; ``lm_head`` never has one).
        device, dtype: of the parameters.
    """

    def __init__(
        self,
        vocab_size: int,
        context: int,
        dim: int,
        n_layers: int,
        n_heads: int,
        dropout: float = 0.0,
        tie_weights: bool = True,
        mlp_ratio: int = 4,
        norm: str = "layernorm",
        rope: bool = False,
        activation: str = "gelu",
        device: Any = None,
        dtype: Any = "float32",
        bias: bool = True,
    ):
        super().__init__()
        self.vocab_size = positive_int(vocab_size, "GPT", "vocab_size")
        self.context = positive_int(context, "GPT", "context")
        positive_int(n_layers, "GPT", "n_layers")
        self.tok_emb = Embedding(vocab_size, dim, device=device, dtype=dtype)
        self.pos_emb = Embedding(context, dim, device=device, dtype=dtype)
        self.drop = Dropout(dropout)
        self.blocks = ModuleList(
            TransformerBlock(
                dim, n_heads, mlp_ratio, dropout, norm, rope, bias=bias, activation=activation,
                device=device, dtype=dtype, norm_bias=bias,
            )
            for _ in range(n_layers)
        )
        self.norm = _norm(norm, dim, device, dtype, bias)
        self.lm_head = Linear(dim, vocab_size, bias=False, device=device, dtype=dtype)
        self.tie_weights = tie_weights
        if tie_weights:
            self.lm_head.weight = self.tok_emb.weight
        self._init_weights(n_layers)

    def _init_weights(self, n_layers: int) -> None:
        for name, p in self.named_parameters():
            if name.endswith(".bias"):
                init.zeros_(p)
            elif name.endswith(("attn.proj.weight", "mlp.fc2.weight")):
                init.normal_(p, std=0.02 / math.sqrt(2 * n_layers))
            elif "norm" not in name:
                init.normal_(p, std=0.02)

    def new_caches(self, batch: int, max_len: int | None = None) -> list[KVCache]:
        """One empty :class:`KVCache` per block (``max_len`` defaults to ``context``)."""
        n = self.context if max_len is None else min(max_len, self.context)
        return [blk.attn.new_cache(batch, n) for blk in self.blocks]

    def forward(self, ids: Any, kv_caches: list[KVCache] | None = None) -> Tensor:
        """Logits ``(batch, T, vocab_size)`` for integer token ids ``(batch, T)``.

        With ``kv_caches`` (from :meth:`new_caches`) ``ids`` continue the cached positions.
        """
        d = as_data(ids)
        if not isinstance(d, NvArray):
            raise TypeError(f"GPT: ids must be an NvArray or Tensor, got {type(d).__name__}")
        if d.dtype.kind not in "iu":
            raise DTypeError(f"GPT: ids must be integer token ids, got {d.dtype.name}")
        if d.ndim != 2:
            raise ShapeError(f"GPT: ids must be (batch, T), got shape {d.shape}")
        if kv_caches is not None and len(kv_caches) != len(self.blocks):
            raise ValueError(f"GPT: got {len(kv_caches)} KV caches for {len(self.blocks)} blocks")
        n = d.shape[1]
        start = kv_caches[0].length if kv_caches else 0
        if start + n > self.context:
            raise ShapeError(
                f"GPT: positions {start}..{start + n - 1} exceed the context of {self.context}"
            )
        pos = ignis.arange(start, start + n, dtype="int64", device=d.device)
        x = self.drop(self.tok_emb(d) + self.pos_emb(pos))
        for i, blk in enumerate(self.blocks):
            x = blk(x, kv_cache=kv_caches[i] if kv_caches is not None else None)
        return self.lm_head(self.norm(x))

    def generate(
        self,
        ids: Any,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_k: int | None = None,
        generator: Any = None,
    ) -> NvArray:
        """Continue ``ids`` ``(batch, T)`` by ``max_new_tokens`` sampled tokens; returns
        ``(batch, T + max_new_tokens)`` int64 ids.

        The prompt runs once through the model, filling a KV cache per block; each new token
        then costs one single-position step. ``temperature == 0`` is greedy; ``top_k`` samples
        among the k most likely tokens; ``generator`` (an ``ignis.random.Generator``) makes the
        draw reproducible. Runs without recording gradients and in eval mode (restored after).
        """
        d = as_data(ids)
        if not isinstance(d, NvArray) or d.ndim != 2:
            got = d.shape if isinstance(d, NvArray) else type(d).__name__
            raise ShapeError(f"generate: ids must be a (batch, T) NvArray or Tensor, got {got}")
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int):
            raise TypeError(f"generate: max_new_tokens must be an int, got {max_new_tokens!r}")
        if max_new_tokens < 0:
            raise ValueError(f"generate: max_new_tokens must be >= 0, got {max_new_tokens}")
        total = d.shape[1] + max_new_tokens
        if total > self.context:
            raise ValueError(
                f"generate: prompt of {d.shape[1]} + {max_new_tokens} new tokens exceeds the "
                f"context of {self.context} (positions are learned up to it)"
            )
        if max_new_tokens == 0:
            return d
        was_training = self.training
        self.eval()
        try:
            with no_grad():
                caches = self.new_caches(d.shape[0], total)
                logits = self.forward(d, caches)
                pieces = [d.astype("int64")]
                for step in range(max_new_tokens):
                    nxt = sample(logits.data[:, -1], temperature, top_k, generator)
                    nxt = nxt.reshape(-1, 1)
                    pieces.append(nxt)
                    if step + 1 < max_new_tokens:
                        logits = self.forward(nxt, caches)
        finally:
            self.train(was_training)
        return ignis.concatenate(pieces, axis=1)

    def extra_repr(self) -> str:
        return (
            f"vocab_size={self.vocab_size}, context={self.context}, tie_weights={self.tie_weights}"
        )
