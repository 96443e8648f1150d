"""``ignis.fuse`` on Tensors: one graph node, whose backward is one fused kernel.

A fused function called with Tensors runs its forward kernel on the Tensors' data and records
one :class:`~ignis_autograd.Function` node. Its backward hands the result's gradient to
:meth:`ignis.Fused.backward`, which differentiates the traced ops with the op table's
derivative rules and computes every input's gradient in one kernel (on the CPU backend: the
same backward ops one by one, which is what ``gradcheck`` checks); the node sums each gradient
back over the dimensions its input was broadcast along.

Two cases are differentiated op by op instead (the function simply runs on the Tensors, each
op recording its own node): several results, and a trailing ``max``/``min`` (whose gradient
needs the count of ties, another reduction).

Example::

    >>> import ignis, ignis_autograd as ag
    >>> @ignis.fuse
    ... def f(x, y):
    ...     return ignis.tanh(x) * y + 1.0
    >>> x = ag.Tensor.randn((4,), dtype="float64", requires_grad=True)
    >>> f(x, 2.0).sum().backward()        # f recorded one node; x.grad: 2 (1 - tanh(x)**2)
"""

from __future__ import annotations

from typing import Any

from ignis._fuse import Fused, register_handler

from ignis import NvArray

from .function import Function, once_differentiable
from .tensor import Tensor, _plain, as_data, needs_grad

__all__ = ["install"]


def _wrap(out: Any) -> Any:
    if isinstance(out, tuple):
        return tuple(Tensor(o) for o in out)
    return Tensor(out)


# A Tensor around a traced value, in no graph: the fused function is traced with these, so
# that the ``ignis_autograd`` functions and Tensor methods it calls work as they would unfused.
_traced_tensor = _plain


def _function(fused: Fused) -> type[Function]:
    """The Function class of ``fused`` (one per fused function: its node's name)."""
    fn = fused._autograd
    if fn is not None:
        return fn

    def forward(ctx: Any, *args: Any) -> Any:
        data = tuple(as_data(a) for a in args)
        ctx.scalars = [None if isinstance(a, NvArray) else a for a in data]
        ctx.save_for_backward(*[a if isinstance(a, NvArray) else None for a in data])
        if fused._check(data).type == "cpu":
            return as_data(fused.func(*args))  # the CPU backend: op by op (recording is off)
        return fused.program(data, _traced_tensor).run(data)

    @once_differentiable
    def backward(ctx: Any, grad: Any) -> Any:
        saved = ctx.saved_tensors
        data = tuple(as_data(s) if s is not None else v for s, v in zip(saved, ctx.scalars,
                                                                        strict=True))  # fmt: skip
        wants = tuple(i for i, w in enumerate(ctx.needs_input_grad) if w)
        grads = fused.backward(data, as_data(grad), wants, _traced_tensor)
        out: list[Any] = [None] * len(data)
        for i, g in zip(wants, grads, strict=True):
            out[i] = g
        return tuple(out)

    name = "Fused" + "".join(p.capitalize() for p in fused.func.__name__.split("_"))
    fn = type(name, (Function,), {"forward": staticmethod(forward),
                                  "backward": staticmethod(backward)})  # fmt: skip
    fused._autograd = fn
    return fn


def _call(fused: Fused, args: tuple[Any, ...]) -> Any:
    """A call of ``fused`` with a Tensor among ``args``."""
    data = tuple(as_data(a) for a in args)
    device = fused._check(data)
    prog = fused.program(data, _traced_tensor)  # (on the CPU too: the same checks and errors)
    recording = needs_grad(*args)
    if recording and fused.differentiable(data, _traced_tensor):
        return _function(fused).apply(*args)
    if recording or device.type == "cpu":
        return fused.func(*args)  # op by op: several results, a trailing max/min, the CPU
    return _wrap(prog.run(data))


def install() -> None:
    """Let fused functions take Tensors (called once at import)."""
    register_handler(Tensor, _call, _traced_tensor)
