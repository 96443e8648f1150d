"""SGD, Adam and AdamW over Tensors, each step one multi-tensor kernel launch per group.

The arithmetic is PyTorch's (``torch.optim.SGD``, ``Adam``, ``AdamW``); see
:func:`ignis.nn.multi_tensor_sgd_` and :func:`ignis.nn.multi_tensor_adam_` for the formulas.

Example::

    >>> from ignis_autograd import Tensor
    >>> from ignis_autograd.optim import AdamW
    >>> w = Tensor.randn((4, 3), requires_grad=True)
    >>> opt = AdamW([w], lr=1e-3, weight_decay=0.01)
    >>> (w * w).sum().backward()
    >>> opt.step()
    >>> opt.zero_grad()
"""

from __future__ import annotations

from typing import Any

import ignis.nn

from ignis import NvArray

from ..tensor import Tensor
from .optimizer import Optimizer, ParamGroup, _check_nonneg

__all__ = ["SGD", "Adam", "AdamW"]


def _grads(params: list[Tensor]) -> list[NvArray]:
    # (a Tensor after backward(create_graph=True): its values are the gradient)
    return [p.grad if p.grad.__class__ is not Tensor else p.grad.data for p in params]


class SGD(Optimizer):
    """Stochastic gradient descent with optional momentum, dampening, Nesterov momentum and
    (L2) weight decay.

    Args:
        params: Tensors or parameter groups (dicts with their own hyperparameters).
        lr: learning rate (>= 0). momentum: >= 0. dampening: in [0, 1]. weight_decay: >= 0.
        nesterov: Nesterov momentum (needs momentum > 0 and dampening 0).
        master_weights: for float16/bfloat16 parameters keep a float32 master copy in the
            state, update it and round it into the parameter (default True).

    State per parameter: ``step`` and, with momentum, ``momentum_buffer`` (initialized to the
    first step's gradient, like PyTorch).
    """

    def __init__(self, params: Any, lr: float = 1e-3, momentum: float = 0.0,
                 dampening: float = 0.0, weight_decay: float = 0.0, nesterov: bool = False,
                 master_weights: bool = True):
        super().__init__(params, {
            "lr": lr, "momentum": momentum, "dampening": dampening,
            "weight_decay": weight_decay, "nesterov": nesterov,
            "master_weights": master_weights,
        })

    def _check_group(self, group: ParamGroup) -> None:
        name = type(self).__name__
        _check_nonneg(group, "weight_decay", name)
        _check_nonneg(group, "momentum", name)
        _check_nonneg(group, "dampening", name)
        if group["dampening"] > 1:
            raise ValueError(f"{name}: dampening must be in [0, 1], got {group['dampening']!r}")
        if group["nesterov"] and (group["momentum"] <= 0 or group["dampening"] != 0):
            raise ValueError(
                f"{name}: nesterov needs momentum > 0 and dampening 0, got momentum="
                f"{group['momentum']!r}, dampening={group['dampening']!r}"
            )

    def _state_keys(self, group: ParamGroup) -> tuple[str, ...]:
        return ("momentum_buffer",) if group["momentum"] > 0 else ()

    def _update(self, group: ParamGroup, params: list[Tensor], states: list[dict[str, NvArray]],
                masters: list[NvArray | None] | None, found_inf: NvArray | None) -> None:
        use_buf = group["momentum"] > 0
        ignis.nn.multi_tensor_sgd_(
            [p.data for p in params],
            _grads(params),
            [st["momentum_buffer"] for st in states] if use_buf else None,
            [st["step"] for st in states],
            group.lr_array,
            momentum=group["momentum"],
            dampening=group["dampening"],
            nesterov=group["nesterov"],
            weight_decay=group["weight_decay"],
            masters=masters,
            found_inf=found_inf,
        )


class Adam(Optimizer):
    """Adam (Kingma & Ba) with optional L2 weight decay and AMSGrad.

    Args:
        params: Tensors or parameter groups. lr: >= 0. betas: ``(beta1, beta2)``, each in
            [0, 1). eps: >= 0. weight_decay: >= 0 (added to the gradient; see :class:`AdamW`
            for decoupled decay). amsgrad: keep the running maximum of the second moment.
        master_weights: float32 master copies for float16/bfloat16 parameters (default True).

    State per parameter: ``step``, ``exp_avg``, ``exp_avg_sq`` (and ``max_exp_avg_sq``).
    """

    _decoupled = False
    _default_wd = 0.0

    def __init__(self, params: Any, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float | None = None, amsgrad: bool = False,
                 master_weights: bool = True):
        super().__init__(params, {
            "lr": lr, "betas": tuple(betas), "eps": eps,
            "weight_decay": self._default_wd if weight_decay is None else weight_decay,
            "amsgrad": amsgrad, "master_weights": master_weights,
        })

    def _check_group(self, group: ParamGroup) -> None:
        name = type(self).__name__
        _check_nonneg(group, "weight_decay", name)
        _check_nonneg(group, "eps", name)
        betas = group["betas"]
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise ValueError(f"{name}: betas must be a pair (beta1, beta2), got {betas!r}")
        for i, b in enumerate(betas):
            if isinstance(b, bool) or not isinstance(b, (int, float)) or not 0.0 <= b < 1.0:
                raise ValueError(f"{name}: betas[{i}] must be in [0, 1), got {b!r}")
        group["betas"] = (float(betas[0]), float(betas[1]))

    def _state_keys(self, group: ParamGroup) -> tuple[str, ...]:
        if group["amsgrad"]:
            return ("exp_avg", "exp_avg_sq", "max_exp_avg_sq")
        return ("exp_avg", "exp_avg_sq")

    def _update(self, group: ParamGroup, params: list[Tensor], states: list[dict[str, NvArray]],
                masters: list[NvArray | None] | None, found_inf: NvArray | None) -> None:
        beta1, beta2 = group["betas"]
        ignis.nn.multi_tensor_adam_(
            [p.data for p in params],
            _grads(params),
            [st["exp_avg"] for st in states],
            [st["exp_avg_sq"] for st in states],
            [st["step"] for st in states],
            group.lr_array,
            beta1=beta1,
            beta2=beta2,
            eps=group["eps"],
            weight_decay=group["weight_decay"],
            decoupled_weight_decay=self._decoupled,
            max_exp_avg_sqs=[st["max_exp_avg_sq"] for st in states] if group["amsgrad"] else None,
            masters=masters,
            found_inf=found_inf,
        )


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter): ``p *= 1 - lr * weight_decay``
    before the Adam step. Same arguments as :class:`Adam`; ``weight_decay`` defaults to 0.01."""

    _decoupled = True
    _default_wd = 0.01
