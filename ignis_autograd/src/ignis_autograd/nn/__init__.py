"""ignis_autograd.nn: modules, layers, a GPT model and weight files.

Build models from :class:`Module` subclasses whose :class:`Parameter` attributes are found by
:meth:`Module.parameters`; layers compute with ``ignis_autograd``'s differentiable functions
(``matmul``, ``layer_norm``, ``scaled_dot_product_attention``, ...). Parameter names and shapes
match PyTorch's for Linear, Embedding and LayerNorm, so state dicts map 1:1.

Example::

    >>> import ignis, ignis_autograd as ag
    >>> from ignis_autograd import nn
    >>> model = nn.GPT(vocab_size=64, context=32, dim=32, n_layers=2, n_heads=4)
    >>> ids = ignis.random.randint(0, 64, shape=(4, 16))
    >>> loss = ag.cross_entropy(model(ids[:, :-1]), ids[:, 1:])
    >>> loss.backward()
    >>> nn.save(model, "model.safetensors")
"""

from __future__ import annotations

from . import init
from .attention import CausalSelfAttention
from .containers import ModuleList, Sequential
from .kv_cache import KVCache
from .layers import GELU, MLP, Dropout, Embedding, LayerNorm, Linear, ReLU, RMSNorm, SiLU
from .module import Module
from .parameter import Parameter
from .rope import RotaryEmbedding
from .serialization import load, load_metadata, save
from .transformer import GPT, TransformerBlock

__all__ = [
    "Parameter",
    "Module",
    "Sequential",
    "ModuleList",
    "Linear",
    "Embedding",
    "LayerNorm",
    "RMSNorm",
    "Dropout",
    "GELU",
    "ReLU",
    "SiLU",
    "MLP",
    "RotaryEmbedding",
    "KVCache",
    "CausalSelfAttention",
    "TransformerBlock",
    "GPT",
    "init",
    "save",
    "load",
    "load_metadata",
]
