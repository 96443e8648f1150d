"""Neural-network kernels on NvArrays, without autograd: fused normalization, losses,
gathers and scatters, dropout, rotary embeddings, attention and multi-tensor optimizer steps.

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

# --- [indexing]
# --- [end indexing]

# --- [norm-loss]
# --- [end norm-loss]

# --- [attention]
# --- [end attention]

# --- [optim]
# --- [end optim]

__all__: list[str] = [
    # --- [indexing]
    # --- [end indexing]
    # --- [norm-loss]
    # --- [end norm-loss]
    # --- [attention]
    # --- [end attention]
    # --- [optim]
    # --- [end optim]
]
