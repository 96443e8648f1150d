"""Optimizers, gradient clipping and learning-rate schedules on the device.

Every update is a multi-tensor kernel launch (one per parameter group and dtype combination)
that reads its learning rate, step counters and skip flag from device memory: a training step
never synchronizes with the host and can be captured into a CUDA graph (run one step eagerly
first; zero gradients in place with ``zero_grad()`` so their buffers stay put; call the
scheduler outside the captured region).

Example::

    >>> from ignis_autograd.optim import AdamW, WarmupCosine, clip_grad_norm_
    >>> opt = AdamW(model_params, lr=3e-4, weight_decay=0.1)
    >>> sched = WarmupCosine(opt, warmup_steps=100, total_steps=5000)
    >>> loss.backward()
    >>> clip_grad_norm_(model_params, 1.0)
    >>> opt.step(); opt.zero_grad(); sched.step()
"""

from __future__ import annotations

from . import lr_scheduler
from .clip import clip_grad_norm_
from .lr_scheduler import LambdaLR, LRScheduler, StepLR, WarmupCosine
from .optimizer import Optimizer, ParamGroup
from .optimizers import SGD, Adam, AdamW
from .zero import ZeroRedundancyOptimizer

__all__ = [
    "Optimizer",
    "ParamGroup",
    "SGD",
    "Adam",
    "AdamW",
    "ZeroRedundancyOptimizer",
    "clip_grad_norm_",
    "lr_scheduler",
    "LRScheduler",
    "LambdaLR",
    "StepLR",
    "WarmupCosine",
]
