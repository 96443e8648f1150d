"""Gradient checkpointing: trade compute for memory by recomputing a function during backward.

``checkpoint(fn, *inputs)`` runs ``fn(*inputs)`` without recording, so none of its intermediate
values are kept; it records one node that holds only ``fn`` and the inputs. When backward reaches
that node it runs ``fn`` again with recording on, and hands the new subgraph to the backward walk
that is already running (not to a second, nested walk): gradients reach the explicit inputs, the
tensors ``fn`` captures (parameters, or values computed earlier in the same graph) and nested
checkpoints exactly as without checkpointing, each contribution once.

The default random stream (``ignis.random``) is rewound for the recomputation, so ``dropout``
inside ``fn`` draws the same mask twice. A ``generator=`` passed explicitly inside ``fn`` is the
caller's to rewind.

Example::

    >>> def block(h):
    ...     return (h @ w1).relu() @ w2      # w1, w2 captured parameters
    >>> y = checkpoint(block, x)             # keeps x, not the (B, 4096) activation
    >>> y.sum().backward()                   # w1.grad, w2.grad, x.grad as without checkpoint
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ignis
from ignis import ShapeError

from ._graph import Node, current_run, state
from .tensor import Tensor, connect

__all__ = ["checkpoint"]


class _Observer:
    __slots__ = ("saw_grad",)

    def __init__(self) -> None:
        self.saw_grad = False


def _checkpoint_vjp(
    grad: Any,
    need: tuple[bool, ...],
    fn: Callable[..., Any],
    inputs: tuple[Any, ...],
    rng_state: Any,
    shape: tuple[int, ...],
) -> tuple[None, ...]:
    run = current_run()
    saved_rng = ignis.random.get_state()
    ignis.random.set_state(rng_state)
    previous = state.grad_enabled
    state.grad_enabled = True
    try:
        out = fn(*inputs)
    finally:
        state.grad_enabled = previous
        ignis.random.set_state(saved_rng)
    if not isinstance(out, Tensor) or out.shape != shape:
        got = out.shape if isinstance(out, Tensor) else type(out).__name__
        raise ShapeError(
            f"checkpoint: recomputing the function gave {got}, but the forward pass gave shape "
            f"{shape}; the function must be deterministic"
        )
    # The recomputed nodes are the newest in the process, so the running walk processes them
    # next; their contributions reach the inputs' nodes and leaves like any other.
    run.inject(out, grad)
    return (None,) * len(need)


def checkpoint(fn: Callable[..., Tensor], *inputs: Any) -> Tensor:
    """``fn(*inputs)``, recomputed during backward instead of keeping its intermediate values.

    ``fn`` must return one Tensor and compute the same values when called again (the default
    random stream is rewound for it). Returns a tensor that requires grad when an input or a
    tensor ``fn`` uses requires grad. Under ``no_grad`` it is simply ``fn(*inputs)``.
    """
    if not state.grad_enabled:
        return fn(*inputs)
    rng_state = ignis.random.get_state()
    observer = _Observer()
    state.observers.append(observer)
    state.grad_enabled = False
    try:
        out = fn(*inputs)
    finally:
        state.grad_enabled = True
        state.observers.remove(observer)
    if not isinstance(out, Tensor):
        raise TypeError(
            f"checkpoint: fn must return one Tensor, got {type(out).__name__}; checkpoint each "
            "output separately or join them with concatenate/stack"
        )
    result = Tensor(out.data)  # a new object even when fn returns one of its inputs
    # Ops inside fn report inputs that require grad; fn may also do no op at all on them.
    if not (
        observer.saw_grad
        or out.requires_grad
        or any(isinstance(x, Tensor) and x.requires_grad for x in inputs)
    ):
        return result
    edges = connect(inputs) or (None,) * len(inputs)
    # The edges keep the inputs' graphs alive and let backward check them before it starts; the
    # gradients themselves flow through the recomputed subgraph.
    result.grad_fn = Node(
        "checkpoint",
        _checkpoint_vjp,
        (fn, inputs, rng_state, out.shape),
        edges,
        out.data,
        fresh=False,
    )
    result._requires_grad = True
    return result
