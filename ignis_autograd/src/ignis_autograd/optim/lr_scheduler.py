"""Learning-rate schedules: each ``step()`` sets every group's ``lr`` from a closed form.

The learning rate is computed on the host from the scheduler's own step count and written to
the optimizer's device scalars (an asynchronous fill on the stream: no synchronization). With a
training step captured in a CUDA graph, call ``scheduler.step()`` between replays, outside the
capture: the graph's kernels read the scalar.

Like PyTorch, a scheduler applies the learning rate of step 0 when it is built, and ``step()``
is called after ``optimizer.step()``.

Example::

    >>> opt = AdamW(params, lr=3e-4)
    >>> sched = WarmupCosine(opt, warmup_steps=100, total_steps=1000, min_lr=3e-5)
    >>> for batch in data:
    ...     loss_of(batch).backward(); opt.step(); opt.zero_grad(); sched.step()
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from .optimizer import Optimizer

__all__ = ["LRScheduler", "LambdaLR", "StepLR", "WarmupCosine"]


class LRScheduler:
    """Base class: subclasses define :meth:`lr_at` (the closed form)."""

    def __init__(self, optimizer: Optimizer, last_epoch: int = -1):
        name = type(self).__name__
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{name}: expected an ignis_autograd optimizer, got "
                            f"{type(optimizer).__name__}")
        self.optimizer = optimizer
        if last_epoch == -1:
            for g in optimizer.param_groups:
                g.setdefault("initial_lr", g["lr"])
        else:
            for i, g in enumerate(optimizer.param_groups):
                if "initial_lr" not in g:
                    raise KeyError(f"{name}: param group {i} has no 'initial_lr' to resume from")
        self.base_lrs = [float(g["initial_lr"]) for g in optimizer.param_groups]
        self.last_epoch = last_epoch
        self._last_lr: list[float] = []
        self.step()

    def lr_at(self, step: int, base_lr: float) -> float:
        """The learning rate after ``step`` calls of :meth:`step` for a group starting at
        ``base_lr``."""
        raise NotImplementedError

    def step(self) -> None:
        """Advance one step and set every group's learning rate."""
        self.last_epoch += 1
        lrs = [self.lr_at(self.last_epoch, base) for base in self.base_lrs]
        for g, lr in zip(self.optimizer.param_groups, lrs, strict=True):
            g["lr"] = lr
        self._last_lr = lrs

    def get_last_lr(self) -> list[float]:
        """The learning rates the last :meth:`step` set, one per group."""
        return list(self._last_lr)

    def state_dict(self) -> dict[str, Any]:
        """Plain Python values (JSON-friendly): step count, base and last learning rates and
        the schedule's settings (not callables)."""
        return {k: v for k, v in self.__dict__.items()
                if k != "optimizer" and not callable(v) and k != "lr_lambdas"}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`; the optimizer's learning rates are left alone (they come
        with the optimizer's own state dict)."""
        self.__dict__.update({k: v for k, v in state_dict.items() if k != "optimizer"})


class LambdaLR(LRScheduler):
    """``lr = base_lr * lr_lambda(step)``; ``lr_lambda`` is one callable or one per group.

    Example: ``LambdaLR(opt, lambda s: 0.95 ** s)``.
    """

    def __init__(self, optimizer: Optimizer, lr_lambda: Callable[[int], float] | list,
                 last_epoch: int = -1):
        n = len(optimizer.param_groups)
        if isinstance(lr_lambda, (list, tuple)):
            if len(lr_lambda) != n:
                raise ValueError(f"LambdaLR: expected {n} lr_lambdas (one per group), got "
                                 f"{len(lr_lambda)}")
            self.lr_lambdas = list(lr_lambda)
        else:
            self.lr_lambdas = [lr_lambda] * n
        for f in self.lr_lambdas:
            if not callable(f):
                raise TypeError(f"LambdaLR: lr_lambda must be callable, got {type(f).__name__}")
        super().__init__(optimizer, last_epoch)

    def step(self) -> None:
        self.last_epoch += 1
        pairs = zip(self.lr_lambdas, self.base_lrs, strict=True)
        lrs = [base * float(f(self.last_epoch)) for f, base in pairs]
        for g, lr in zip(self.optimizer.param_groups, lrs, strict=True):
            g["lr"] = lr
        self._last_lr = lrs

    def lr_at(self, step: int, base_lr: float) -> float:
        return base_lr * float(self.lr_lambdas[0](step))


class StepLR(LRScheduler):
    """``lr = base_lr * gamma ** (step // step_size)``.

    Example: ``StepLR(opt, step_size=30, gamma=0.1)``.
    """

    def __init__(self, optimizer: Optimizer, step_size: int, gamma: float = 0.1,
                 last_epoch: int = -1):
        if isinstance(step_size, bool) or not isinstance(step_size, int) or step_size < 1:
            raise ValueError(f"StepLR: step_size must be a positive int, got {step_size!r}")
        if not float(gamma) > 0:
            raise ValueError(f"StepLR: gamma must be > 0, got {gamma!r}")
        self.step_size = step_size
        self.gamma = float(gamma)
        super().__init__(optimizer, last_epoch)

    def lr_at(self, step: int, base_lr: float) -> float:
        return base_lr * self.gamma ** (step // self.step_size)


class WarmupCosine(LRScheduler):
    """Linear warm-up, then cosine decay to ``min_lr``.

    At step ``s``: ``base * (s + 1) / warmup_steps`` for ``s < warmup_steps``; then
    ``min_lr + (base - min_lr) * (1 + cos(pi * (s - warmup_steps) / (total_steps -
    warmup_steps))) / 2`` until ``total_steps``; ``min_lr`` from there on.

    Example: ``WarmupCosine(opt, warmup_steps=100, total_steps=10_000, min_lr=1e-5)``.
    """

    def __init__(self, optimizer: Optimizer, warmup_steps: int, total_steps: int,
                 min_lr: float = 0.0, last_epoch: int = -1):
        for name, v in (("warmup_steps", warmup_steps), ("total_steps", total_steps)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"WarmupCosine: {name} must be an int >= 0, got {v!r}")
        if total_steps <= warmup_steps:
            raise ValueError(f"WarmupCosine: total_steps ({total_steps}) must exceed "
                             f"warmup_steps ({warmup_steps})")
        if not float(min_lr) >= 0:
            raise ValueError(f"WarmupCosine: min_lr must be >= 0, got {min_lr!r}")
        self.warmup_steps = warmup_steps
        self.total_steps = total_steps
        self.min_lr = float(min_lr)
        super().__init__(optimizer, last_epoch)

    def lr_at(self, step: int, base_lr: float) -> float:
        if step < self.warmup_steps:
            return base_lr * (step + 1) / self.warmup_steps
        if step >= self.total_steps:
            return self.min_lr
        progress = (step - self.warmup_steps) / (self.total_steps - self.warmup_steps)
        return self.min_lr + (base_lr - self.min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))
