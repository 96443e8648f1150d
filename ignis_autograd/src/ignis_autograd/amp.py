"""Mixed precision: dynamic loss scaling for float16, and the bfloat16 recipe.

**float16** has a narrow exponent range: small gradients underflow to zero. :class:`GradScaler`
multiplies the loss by a large scale before ``backward()``, divides the gradients by it again
before the update, and skips the update (on the device) when a gradient overflowed to Inf or
NaN, lowering the scale; after ``growth_interval`` clean steps it raises the scale again. The
scale, the growth tracker and the found-inf flag are device scalars: nothing synchronizes the
host and a whole step can be captured into a CUDA graph::

    scaler = GradScaler()
    opt = Adam(params, lr=1e-3)                 # float16 params: float32 master weights
    for batch in data:
        loss = loss_of(batch)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)                    # optional: only needed to clip first
        clip_grad_norm_(params, 1.0)
        scaler.step(opt)                        # skipped on the device after an overflow
        scaler.update()
        opt.zero_grad()

**bfloat16** has float32's exponent range, so no loss scaling is needed. Keep the parameters in
bfloat16 (half the memory and bandwidth of the forward and backward passes) and let the
optimizer keep float32 master weights: ``AdamW(params, master_weights=True)`` (the default).
Gradients of bfloat16 tensors accumulate in float32; each step updates the float32 master copy
and writes its rounded value into the bfloat16 parameter in the same kernel, so small updates
are never lost to bfloat16 rounding.
"""

from __future__ import annotations

from typing import Any

import ignis.nn

import ignis
from ignis import NvArray

from .optim.optimizer import Optimizer
from .tensor import Tensor

__all__ = ["GradScaler"]


class GradScaler:
    """Dynamic loss scaling (the behavior of PyTorch's ``torch.amp.GradScaler``).

    Args:
        init_scale: the first scale. growth_factor (> 1) / backoff_factor (in (0, 1)): how the
            scale changes after ``growth_interval`` clean steps / after an overflow.
        enabled: False makes every method a pass-through (``scale`` returns the loss).

    Example: see the module notes. ``get_scale()`` reads the scale back (a synchronization).
    """

    def __init__(self, init_scale: float = 2.0**16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000, enabled: bool = True):
        if not float(init_scale) > 0:
            raise ValueError(f"GradScaler: init_scale must be > 0, got {init_scale!r}")
        if not float(growth_factor) > 1:
            raise ValueError(f"GradScaler: growth_factor must be > 1, got {growth_factor!r}")
        if not 0 < float(backoff_factor) < 1:
            raise ValueError(
                f"GradScaler: backoff_factor must be in (0, 1), got {backoff_factor!r}"
            )
        if isinstance(growth_interval, bool) or not isinstance(growth_interval, int) \
                or growth_interval < 1:
            raise ValueError(f"GradScaler: growth_interval must be a positive int, got "
                             f"{growth_interval!r}")
        self._init_scale = float(init_scale)
        self._growth_factor = float(growth_factor)
        self._backoff_factor = float(backoff_factor)
        self._growth_interval = growth_interval
        self._enabled = bool(enabled)
        self._scale: NvArray | None = None
        self._tracker: NvArray | None = None
        self._found_inf: NvArray | None = None
        self._init_tracker = 0
        self._unscaled: set[int] = set()  # optimizers unscaled since the last update()
        self._stepped: set[int] = set()

    def is_enabled(self) -> bool:
        return self._enabled

    def _lazy_init(self, device: Any) -> None:
        if self._scale is None:
            self._scale = ignis.full((), self._init_scale, dtype="float32", device=device)
            self._tracker = ignis.full((), self._init_tracker, dtype="int32", device=device)
            self._found_inf = ignis.zeros((), dtype="float32", device=device)

    def scale(self, loss: Tensor) -> Tensor:
        """``loss * scale`` (a Tensor in the graph; call ``backward()`` on it)."""
        if not self._enabled:
            return loss
        if not isinstance(loss, Tensor):
            raise TypeError(f"GradScaler.scale: expected a Tensor, got {type(loss).__name__}")
        self._lazy_init(loss.device)
        return loss * self._scale

    def unscale_(self, optimizer: Optimizer) -> None:
        """Divide the optimizer's gradients by the scale in place and record on the device
        whether any was Inf or NaN. At most once per optimizer between :meth:`update` calls."""
        if not self._enabled:
            return
        if self._scale is None:
            raise RuntimeError("GradScaler.unscale_: scale() has not been called yet")
        if id(optimizer) in self._unscaled:
            raise RuntimeError("GradScaler.unscale_: already called for this optimizer since the "
                               "last update()")
        if not self._unscaled:
            self._found_inf.fill_(0)  # the first unscale of this step starts a fresh flag
        self._unscaled.add(id(optimizer))
        grads = [p.grad for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
        if grads:
            ignis.nn.multi_tensor_scale_(grads, self._scale, inverse=True,
                                         found_inf=self._found_inf)

    def step(self, optimizer: Optimizer) -> None:
        """``optimizer.step()`` unless a gradient overflowed (decided on the device); unscales
        first if :meth:`unscale_` was not called."""
        if not self._enabled:
            optimizer.step()
            return
        if id(optimizer) not in self._unscaled:
            self.unscale_(optimizer)
        self._stepped.add(id(optimizer))
        optimizer.step(found_inf=self._found_inf)

    def update(self, new_scale: float | None = None) -> None:
        """Adjust the scale for the next step (on the device): back off after an overflow,
        grow after ``growth_interval`` clean steps. ``new_scale`` sets it instead."""
        if not self._enabled or self._scale is None:
            return
        if new_scale is not None:
            if not float(new_scale) > 0:
                raise ValueError(f"GradScaler.update: new_scale must be > 0, got {new_scale!r}")
            self._scale.fill_(float(new_scale))
        elif self._unscaled:
            ignis.nn.amp_update_scale_(
                self._scale, self._tracker, self._found_inf,
                growth_factor=self._growth_factor, backoff_factor=self._backoff_factor,
                growth_interval=self._growth_interval,
            )
        self._unscaled.clear()
        self._stepped.clear()

    # --- inspection and checkpoints ------------------------------------------------------------

    @property
    def scale_array(self) -> NvArray | None:
        """The device scalar holding the scale (None before the first :meth:`scale`)."""
        return self._scale

    @property
    def found_inf(self) -> NvArray | None:
        """The device flag of the last unscale (nonzero: Inf/NaN seen, the step is skipped)."""
        return self._found_inf

    def get_scale(self) -> float:
        """The current scale (reads the device: a synchronization)."""
        if not self._enabled:
            return 1.0
        return self._init_scale if self._scale is None else float(self._scale.item())

    def state_dict(self) -> dict[str, Any]:
        """Plain Python values: scale, growth/backoff factors, interval and tracker."""
        if not self._enabled:
            return {}
        tracker = self._init_tracker if self._tracker is None else int(self._tracker.item())
        return {
            "scale": self.get_scale(),
            "growth_factor": self._growth_factor,
            "backoff_factor": self._backoff_factor,
            "growth_interval": self._growth_interval,
            "_growth_tracker": tracker,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if not self._enabled:
            return
        if "scale" not in state:
            raise ValueError("GradScaler.load_state_dict: the state has no 'scale' entry")
        self._init_scale = float(state["scale"])
        self._growth_factor = float(state.get("growth_factor", self._growth_factor))
        self._backoff_factor = float(state.get("backoff_factor", self._backoff_factor))
        self._growth_interval = int(state.get("growth_interval", self._growth_interval))
        self._init_tracker = int(state.get("_growth_tracker", 0))
        if self._scale is not None:
            self._scale.fill_(self._init_scale)
            self._tracker.fill_(self._init_tracker)
