"""What a training run is: the model shape and the optimization settings, with per-device defaults.

Example::

    >>> cfg = default_config("cpu")
    >>> cfg.dim, cfg.n_layers, cfg.steps
    (64, 2, 200)
    >>> cfg = dataclasses.replace(cfg, steps=50)

A config is stored in every checkpoint (``to_dict``/``from_dict``) so ``--resume`` rebuilds the
same model and schedule. A field added after a checkpoint was written loads with the value that
reproduces how that checkpoint was trained (``_LEGACY``), or else with its default.

Presets name a whole configuration in one word (``--preset shakespeare_char``)::

    >>> cfg = preset_config("shakespeare_char", "cuda")
    >>> cfg.n_layers, cfg.dim, cfg.context, cfg.dropout, cfg.bias, cfg.beta2
    (6, 384, 256, 0.2, False, 0.99)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields
from typing import Any

__all__ = ["DemoConfig", "default_config", "preset_config", "PRESETS", "MODEL_FIELDS"]


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
    fresh random batches of each split (drawn anew at every evaluation, as nanoGPT's
    ``estimate_loss``). ``log_interval``: steps between printed loss lines.

    ``beta2``: AdamW's second-moment decay (``beta1`` is 0.9). ``weight_decay`` applies to the
    parameters of two or more dimensions (embeddings, linear weights) and not to biases or norm
    weights (GPT-2's and nanoGPT's practice), unless ``decay_1d`` is set (every parameter, as
    checkpoints written before the split were trained). ``bias``: biases in the linear layers
    and LayerNorms. ``activation``: the MLP's ``"gelu_tanh"`` (GPT-2's tanh approximation) or
    ``"gelu"`` (exact, erf; nanoGPT's).
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
    beta2: float = 0.999
    bias: bool = True
    activation: str = "gelu_tanh"
    decay_1d: bool = False

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> DemoConfig:
        known = {f.name for f in fields(cls)}
        given = {k: v for k, v in values.items() if k in known}
        # A field that an older checkpoint lacks takes the value it was trained with.
        return cls(**{**_LEGACY, **given})

    @property
    def tokens_per_step(self) -> int:
        return self.batch_size * self.context


# Fields that fix what a checkpoint's weights and optimizer state mean: a resumed run must keep
# them (changing one is a new run, not a continuation).
MODEL_FIELDS = ("context", "dim", "n_layers", "n_heads", "dtype", "bias", "activation")

# Fields whose default differs from how checkpoints written before the field existed were
# trained: those decayed every parameter.
_LEGACY: dict[str, Any] = {"decay_1d": True}

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


# nanoGPT's config/train_shakespeare_char.py: 10.7M parameters, 16,384 tokens a step; its
# README reports a best held-out loss of 1.4697 on tiny Shakespeare (about 3 minutes on an
# A100). bfloat16 on a GPU stands for its bfloat16 autocast; float32 on the CPU backend.
_SHAKESPEARE_CHAR = DemoConfig(
    context=256,
    dim=384,
    n_layers=6,
    n_heads=6,
    dropout=0.2,
    batch_size=64,
    steps=5000,
    lr=1e-3,
    min_lr=1e-4,
    warmup_steps=100,
    weight_decay=0.1,
    grad_clip=1.0,
    dtype="bfloat16",
    eval_interval=250,
    eval_batches=200,
    log_interval=10,
    beta2=0.99,
    bias=False,
    activation="gelu",
)

#: name -> the config on a GPU (on the CPU the same with ``dtype="float32"``).
PRESETS: dict[str, DemoConfig] = {"shakespeare_char": _SHAKESPEARE_CHAR}


def preset_config(name: str, device_type: str) -> DemoConfig:
    """The preset ``name`` (a key of :data:`PRESETS`) for ``"cuda"`` or ``"cpu"``.

    Raises ``ValueError`` naming the presets for an unknown name.
    """
    if name not in PRESETS:
        raise ValueError(
            f"preset_config: unknown preset {name!r}; expected one of {sorted(PRESETS)}"
        )
    cfg = PRESETS[name]
    return cfg if device_type == "cuda" else dataclasses.replace(cfg, dtype="float32")
