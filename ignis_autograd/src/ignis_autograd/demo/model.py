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
    "param_groups",
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

    # The default is GPT-2's tanh-approximated GELU: as good for training and much cheaper than
    # the exact one on the CPU backend.
    return nn.GPT(
        vocab_size, cfg.context, cfg.dim, cfg.n_layers, cfg.n_heads, cfg.dropout,
        activation=cfg.activation, device=device, dtype=cfg.dtype, bias=cfg.bias,
    )


def param_groups(model: Any, cfg: DemoConfig) -> list[dict[str, Any]]:
    """AdamW's parameter groups: ``cfg.weight_decay`` on the parameters of two or more
    dimensions (embeddings, linear weights), none on the others (biases, norm weights), as
    GPT-2 and nanoGPT do; one group decaying everything when ``cfg.decay_1d``.

    Example: ``[{"params": [tok_emb.weight, ...], "weight_decay": 0.1}, {"params": [norm
    weights, biases], "weight_decay": 0.0}]`` (an empty group is left out).
    """
    params = list(model.parameters())
    if cfg.decay_1d:
        return [{"params": params, "weight_decay": cfg.weight_decay}]
    decay = [p for p in params if p.ndim >= 2]
    rest = [p for p in params if p.ndim < 2]
    groups = [
        {"params": decay, "weight_decay": cfg.weight_decay},
        {"params": rest, "weight_decay": 0.0},
    ]
    return [g for g in groups if g["params"]]


def build_optimizer(model: Any, cfg: DemoConfig) -> tuple[Any, Any]:
    """``(AdamW, WarmupCosine)`` over the model's parameters, in the groups of
    :func:`param_groups`, with betas ``(0.9, cfg.beta2)``.

    With bfloat16 parameters the optimizer keeps float32 master weights (AdamW's default).
    """
    from .. import optim

    opt = optim.AdamW(
        param_groups(model, cfg), lr=cfg.lr, betas=(0.9, cfg.beta2),
        weight_decay=cfg.weight_decay, master_weights=True,
    )
    sched = optim.WarmupCosine(opt, cfg.warmup_steps, cfg.steps, cfg.min_lr)
    return opt, sched


def clip_gradients(model: Any, max_norm: float) -> None:
    """Scale the gradients so their global L2 norm is at most ``max_norm`` (0: leave them)."""
    if max_norm > 0:
        from .. import optim

        optim.clip_grad_norm_(list(model.parameters()), max_norm)


def loss_of(model: Any, inputs: np.ndarray, targets: np.ndarray, device: str) -> Any:
    """Mean next-token cross-entropy (a float32 scalar Tensor, nats per token) of a host batch
    of ids.

    Logits of another dtype (bfloat16) are widened to float32 first, as PyTorch's autocast
    does for the loss: the loss and its gradient into the logits are then float32, not
    rounded to 8 mantissa bits.
    """
    x = ignis.from_host(inputs, dtype="int64", device=device)
    y = ignis.from_host(targets, dtype="int64", device=device)
    logits = model(x)
    vocab = logits.shape[-1]
    if logits.dtype != ignis.float32:
        logits = logits.astype("float32")
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
