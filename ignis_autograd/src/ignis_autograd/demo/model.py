"""The demo's seam to the model, optimizer and weight-file APIs of ignis_autograd.

Everything the trainer needs from :mod:`ignis_autograd.nn` and :mod:`ignis_autograd.optim`
goes through these few functions, so the training loop, data and checkpoint code do not depend
on their details.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import ignis

from .. import cross_entropy
from .config import DemoConfig

__all__ = [
    "build_model",
    "build_optimizer",
    "loss_of",
    "current_lr",
    "save_tensors",
    "load_tensors",
    "generate",
]


def build_model(cfg: DemoConfig, vocab_size: int, device: str) -> Any:
    """A fresh GPT on ``device``, initialized from the default ``ignis.random`` stream.

    The caller seeds ``ignis.random`` first; the stream is the same on every device, so the
    initial weights do not depend on where the model lives.
    """
    from .. import nn

    # GPT-2's tanh-approximated GELU: as good for training and much cheaper than the exact one
    # on the CPU backend.
    return nn.GPT(
        vocab_size, cfg.context, cfg.dim, cfg.n_layers, cfg.n_heads, cfg.dropout,
        activation="gelu_tanh", device=device, dtype=cfg.dtype,
    )


def build_optimizer(model: Any, cfg: DemoConfig) -> tuple[Any, Any]:
    """``(AdamW, WarmupCosine)`` over the model's parameters.

    With bfloat16 parameters the optimizer keeps float32 master weights (AdamW's default).
    """
    from .. import optim

    params = list(model.parameters())
    opt = optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, master_weights=True)
    sched = optim.WarmupCosine(opt, cfg.warmup_steps, cfg.steps, cfg.min_lr)
    return opt, sched


def clip_gradients(model: Any, max_norm: float) -> None:
    """Scale the gradients so their global L2 norm is at most ``max_norm`` (0: leave them)."""
    if max_norm > 0:
        from .. import optim

        optim.clip_grad_norm_(list(model.parameters()), max_norm)


def loss_of(model: Any, inputs: np.ndarray, targets: np.ndarray, device: str) -> Any:
    """Mean next-token cross-entropy (a scalar Tensor) of a host batch of ids."""
    x = ignis.from_host(inputs, dtype="int64", device=device)
    y = ignis.from_host(targets, dtype="int64", device=device)
    logits = model(x)
    vocab = logits.shape[-1]
    return cross_entropy(logits.reshape(-1, vocab), y.reshape(-1))


def current_lr(opt: Any) -> float:
    """The learning rate of the optimizer's first parameter group."""
    groups = getattr(opt, "param_groups", None)
    if groups:
        return float(groups[0]["lr"])
    return float(opt.lr)


def save_tensors(arrays: dict[str, Any], path: str) -> None:
    """Write a name -> array dict as a safetensors file."""
    from .. import nn

    nn.save(arrays, path)


def load_tensors(path: str, device: str) -> dict[str, Any]:
    """Read a safetensors file into a name -> array dict on ``device``."""
    from .. import nn

    return dict(nn.load(path, device=device))


def generate(
    model: Any,
    prompt_ids: np.ndarray,
    max_new_tokens: int,
    device: str,
    temperature: float,
    top_k: int | None,
    generator: Any,
) -> np.ndarray:
    """``prompt_ids`` followed by ``max_new_tokens`` sampled ids (host int64, 1-D).

    Decoding is incremental through the model's KV cache (``GPT.generate``). Positions are
    learned only up to the model's context, so a longer sample is made in pieces: each piece
    starts from the last half-context of text so far and fills the cache up to the context.
    """
    context = int(model.context)
    keep = max(1, context // 2)
    ids = np.asarray(prompt_ids, dtype=np.int64).reshape(-1)
    ids = ids[-keep:] if len(ids) > keep else ids
    out = [ids]
    window = ids
    left = int(max_new_tokens)
    while left > 0:
        n = min(left, context - len(window))
        x = ignis.from_host(window[None, :], dtype="int64", device=device)
        y = model.generate(x, n, temperature=temperature, top_k=top_k, generator=generator)
        new = np.asarray(y.to_host()).reshape(-1)[len(window) :].astype(np.int64)
        out.append(new)
        left -= n
        window = np.concatenate([window, new])[-keep:]
    return np.concatenate(out)
