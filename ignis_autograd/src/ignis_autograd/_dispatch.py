"""Namespaces through which derivative rules compute, on NvArrays or on Tensors alike.

ignis' op tables write their derivative rules with operators and with functions reached
through a module attribute (``_op_table._ops.where(...)``, ``_reduction_table._loss.
softmax_backward(...)``). On NvArrays a rule computes a gradient; handed Tensors (a backward
pass recorded with ``create_graph=True``) the same rule must record differentiable operations.
The operators dispatch by themselves (Tensor's reflected operators); the functions dispatch
here: each name of the original module becomes a function that calls the ``ignis_autograd``
function of that name when an argument is a Tensor, and the original one otherwise (one
class check per argument: the NvArray path stays as it was).

Names are resolved on first use and cached, so a rule added to a table later finds its
functions too. :func:`install` binds the namespaces into ignis' tables; ignis_autograd calls it
once at import.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

__all__ = ["Namespace", "install", "ops"]


def _dispatching(array_fn: Callable[..., Any], tensor_fn: Callable[..., Any]) -> Callable[..., Any]:
    from .tensor import Tensor

    def dispatch(*args: Any, **kwargs: Any) -> Any:
        for a in args:
            if a.__class__ is Tensor:
                return tensor_fn(*args, **kwargs)
        return array_fn(*args, **kwargs)

    dispatch.__name__ = getattr(array_fn, "__name__", "dispatch")
    dispatch.__doc__ = f"{dispatch.__name__} on NvArrays, or on Tensors (recorded)."
    return dispatch


class Namespace(types.ModuleType):
    """A module-like view of ``base`` whose functions also take Tensors.

    ``tensor_functions(name)`` gives the Tensor version of ``base.<name>`` or None (then the
    attribute is ``base``'s own, e.g. a class or a function rules only call on arrays).
    """

    def __init__(self, name: str, base: Any, tensor_functions: Callable[[str], Any]):
        super().__init__(name)
        self._base = base
        self._tensor_functions = tensor_functions

    def __getattr__(self, name: str) -> Any:  # only for names not cached yet
        if name.startswith("__"):
            raise AttributeError(name)
        value = getattr(self._base, name)
        if isinstance(value, (types.FunctionType, types.BuiltinFunctionType)):
            tensor_fn = self._tensor_functions(name)
            if tensor_fn is not None:
                value = _dispatching(value, tensor_fn)
        setattr(self, name, value)
        return value


def _functional(name: str) -> Any:
    from . import functional

    return getattr(functional, name, None)


def _loss_functions(name: str) -> Any:
    from . import _graph_rules

    return getattr(_graph_rules, "tensor_" + name, None)


def _make_ops() -> Namespace:
    from ignis._array import _ops

    return Namespace("ignis_autograd._dispatch.ops", _ops, _functional)


#: ignis' array functions, taking Tensors too (the rules of ``_rules`` compute through it).
ops = _make_ops()


def install() -> None:
    """Make ignis' op tables' derivative rules compute through these namespaces."""
    from ignis._array import _nn_loss, _op_table, _reduction_table

    _op_table._ops = ops
    _reduction_table._ops = ops
    _reduction_table._loss = Namespace("ignis_autograd._dispatch.loss", _nn_loss, _loss_functions)
