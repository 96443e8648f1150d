"""Neural-network kernels on NvArrays, without autograd: fused normalization, losses,
gathers and scatters, dropout, rotary embeddings, attention, linear layers with the bias fused
into the product, and multi-tensor optimizer steps.

Each function runs on the array's device (CUDA kernels from ``cuda_src/``, NumPy on the CPU) and
checks its arguments once, in its family's front-end module under ``ignis._array``. The
``*_backward`` functions give the input gradients from the saved forward statistics;
``ignis_autograd`` builds its derivative rules on them.

Example::

    >>> import ignis, ignis.nn
    >>> x = ignis.random.randn((8, 768))
    >>> y, mean, rstd = ignis.nn.layer_norm(x, weight=None, bias=None, eps=1e-5)
"""

from __future__ import annotations

# ruff: noqa: I001  (imports stay grouped by family, between the section markers)

# --- [indexing]
from ._array._indexing import embedding, embedding_backward
from ._array._nn_dropout_rope import dropout, dropout_backward, rope, rope_backward

# --- [end indexing]

# --- [norm-loss]
from ._array._nn_loss import cross_entropy, cross_entropy_backward, softmax_backward
from ._array._nn_norm import layer_norm, layer_norm_backward, rms_norm, rms_norm_backward

# --- [end norm-loss]

# --- [attention]
from ._array._nn_attention import (
    AttentionDropout,
    attention,
    attention_backward,
    attention_dropout,
    decode_attention,
)

# --- [end attention]

# --- [optim]
from ._array._nn_optim import (
    amp_update_scale_,
    multi_tensor_adam_,
    multi_tensor_batch,
    multi_tensor_clip_,
    multi_tensor_l2_norm,
    multi_tensor_scale_,
    multi_tensor_sgd_,
    multi_tensor_zero_,
)

# --- [end optim]

# --- [activation]
from ._array._nn_activation import (
    gelu_backward,
    relu_backward,
    sigmoid_backward,
    silu_backward,
    tanh_backward,
)

# --- [end activation]

# --- [linear]
from ._array._nn_linear import linear, linear_backward

# --- [end linear]

__all__: list[str] = [
    # --- [indexing]
    "embedding",
    "embedding_backward",
    "dropout",
    "dropout_backward",
    "rope",
    "rope_backward",
    # --- [end indexing]
    # --- [norm-loss]
    "layer_norm",
    "layer_norm_backward",
    "rms_norm",
    "rms_norm_backward",
    "cross_entropy",
    "cross_entropy_backward",
    "softmax_backward",
    # --- [end norm-loss]
    # --- [attention]
    "attention",
    "attention_backward",
    "attention_dropout",
    "AttentionDropout",
    "decode_attention",
    # --- [end attention]
    # --- [optim]
    "multi_tensor_batch",
    "multi_tensor_sgd_",
    "multi_tensor_adam_",
    "multi_tensor_l2_norm",
    "multi_tensor_scale_",
    "multi_tensor_clip_",
    "multi_tensor_zero_",
    "amp_update_scale_",
    # --- [end optim]
    # --- [activation]
    "gelu_backward",
    "silu_backward",
    "sigmoid_backward",
    "tanh_backward",
    "relu_backward",
    # --- [end activation]
    # --- [linear]
    "linear",
    "linear_backward",
    # --- [end linear]
]
