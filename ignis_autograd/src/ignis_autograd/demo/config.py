"""What a training run is: the model shape and the optimization settings, with per-device defaults.

Example::

    >>> cfg = default_config("cpu")
    >>> cfg.dim, cfg.n_layers, cfg.steps
    (64, 2, 200)
    >>> cfg = dataclasses.replace(cfg, steps=50)

A config is stored in every checkpoint (``to_dict``/``from_dict``) so ``--resume`` rebuilds the
same model and schedule.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields
from typing import Any

__all__ = ["DemoConfig", "default_config", "MODEL_FIELDS"]


@dataclass(frozen=True)
class DemoConfig:
    """Settings of one training run.

    Model: ``context`` (tokens per sequence), ``dim`` (embedding width), ``n_layers``,
    ``n_heads``, ``dropout`` (probability). Optimization (AdamW with linear warm-up then cosine
    decay to ``min_lr``): ``batch_size`` (sequences per step), ``steps`` (total optimizer
    steps), ``lr``, ``min_lr``, ``warmup_steps``, ``weight_decay``, ``grad_clip`` (max global
    L2 norm; 0 disables). ``dtype``: parameter/compute dtype, ``"float32"`` or ``"bfloat16"``
    (bfloat16 keeps float32 master weights in the optimizer). ``seed``: model init, batches and
    dropout all derive from it. Evaluation: every ``eval_interval`` steps on ``eval_batches``
    held-out batches. ``log_interval``: steps between printed loss lines.
    """

    context: int = 64
    dim: int = 64
    n_layers: int = 2
    n_heads: int = 4
    dropout: float = 0.0
    batch_size: int = 16
    steps: int = 200
    lr: float = 3e-3
    min_lr: float = 3e-4
    warmup_steps: int = 20
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    dtype: str = "float32"
    seed: int = 1337
    eval_interval: int = 50
    eval_batches: int = 4
    log_interval: int = 25

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> DemoConfig:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in known})

    @property
    def tokens_per_step(self) -> int:
        return self.batch_size * self.context


# Fields that fix what a checkpoint's weights and optimizer state mean: a resumed run must keep
# them (changing one is a new run, not a continuation).
MODEL_FIELDS = ("context", "dim", "n_layers", "n_heads", "dtype")

# On an H200: about 3.2M parameters, 8192 tokens a step, 800 steps (about 15 passes over the
# half-megabyte default text, hence the dropout).
_GPU = DemoConfig(
    context=128,
    dim=256,
    n_layers=4,
    n_heads=4,
    dropout=0.1,
    batch_size=64,
    steps=800,
    lr=2e-3,
    min_lr=2e-4,
    warmup_steps=50,
    eval_interval=200,
    eval_batches=16,
    log_interval=50,
)
# On the CPU backend (NumPy): about 0.1M parameters, 200 steps; about 10 s of training on
# a two-core machine, with NumPy's BLAS on one thread (see blas.py).
_CPU = DemoConfig()


def default_config(device_type: str) -> DemoConfig:
    """The defaults for ``"cuda"`` or ``"cpu"``."""
    return _GPU if device_type == "cuda" else _CPU
