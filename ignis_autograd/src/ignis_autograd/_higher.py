"""The general backward walk: ``grad()`` and recorded backward passes (``create_graph=True``).

``Tensor.backward()`` without ``create_graph`` takes the lean walk of :mod:`._graph`. This one
adds what it leaves out:

* **Targets** (:func:`grad`): the gradients of chosen inputs are returned instead of added to
  ``.grad``; only the nodes on a path from the outputs to an input run.
* **Recording** (``create_graph=True``): gradients are Tensors and every node's rule runs on
  them with recording on (:func:`._graph_rules.graph_vjp`), so the gradients carry a graph of
  their own and can be differentiated again, to any order. The walked graph is kept
  (``retain_graph`` defaults to ``create_graph``): the new graph refers to its nodes, and dies
  with the gradients that hold it.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import Any

import ignis
from ignis import NvArray, ShapeError

from ._errors import AutogradError
from ._graph import HALF, Node, _check_custom, _freed_error, _Run, grad_dtype, release, state
from ._graph_rules import graph_vjp
from .tensor import Tensor, _plain, start_gradient

__all__ = ["grad", "grad_impl", "backward_graph"]

_F32 = ignis.float32


class _GeneralRun(_Run):
    """A backward walk with targets and/or recording (module notes)."""

    __slots__ = ("create_graph", "targets", "captured", "needed")

    def __init__(self, retain: bool, create_graph: bool, targets: dict[int, Any] | None):
        super().__init__(retain)
        self.pending = None
        self.create_graph = create_graph
        # id(node) of a non-leaf input, id(tensor) of a leaf input -> captured gradient
        self.targets = targets
        self.captured: dict[int, Any] = {}
        # ids of the nodes on a path to a target (None: every node runs)
        self.needed: set[int] | None = None

    def prepare(self, roots: list[Node]) -> None:
        """Check the graph below ``roots`` is alive; with targets, find the nodes that lead to
        one (every such node is older than what it feeds: one pass in creation order)."""
        seen: set[int] = set()
        stack = list(roots)
        order = self.visited
        while stack:
            node = stack.pop()
            if id(node) in seen:
                continue
            seen.add(id(node))
            if node.released:
                raise _freed_error(node)
            order.append(node)
            stack.extend(e for e in node.edges if e.__class__ is Node and id(e) not in seen)
        targets = self.targets
        if targets is None:
            return
        needed: set[int] = set()
        for node in sorted(order, key=lambda n: n.seq):
            if id(node) in targets or any(
                e is not None and id(e) in (needed if e.__class__ is Node else targets)
                for e in node.edges
            ):
                needed.add(id(node))
        self.needed = needed

    def seed(self, tensor: Tensor, g: Any) -> None:
        node = tensor.grad_fn
        if node is not None:
            self._to_node(node, g, False)
        else:
            self._to_leaf(tensor, g, False)

    def inject(self, target: Tensor, grad: Any, fresh: bool = False) -> None:
        # A checkpoint's recomputed subgraph joins the walk: its nodes were not scanned.
        self.needed = None
        self.seed(
            target, grad if not self.create_graph or isinstance(grad, Tensor) else _plain(grad)
        )

    def _to_node(self, node: Node, g: Any, fresh: bool) -> None:
        needed = self.needed
        if needed is not None and id(node) not in needed:
            return
        if node.released:
            raise _freed_error(node)
        grads = self.grads
        prev = grads.get(node)
        if prev is None:
            grads[node] = g
            heapq.heappush(self.heap, (-node.seq, node))
        else:  # out of place: either may be shared, and a recorded sum is differentiable
            grads[node] = (prev.astype(_F32) if prev.dtype in HALF else prev) + g

    def _to_leaf(self, leaf: Tensor, g: Any, fresh: bool) -> None:
        targets = self.targets
        if targets is not None:
            key = id(leaf)
            if key in targets:
                prev = self.captured.get(key)
                self.captured[key] = g if prev is None else prev + g
            return
        # backward(create_graph=True): the leaf's grad becomes a Tensor carrying its graph
        want = grad_dtype(leaf.data.dtype)
        if g.dtype is not want:
            g = g.astype(want)
        current = leaf.grad
        leaf.grad = g if current is None else g + current

    def run(self) -> None:
        heap, grads = self.heap, self.grads
        targets, captured = self.targets, self.captured
        graph = self.create_graph
        while heap:
            node = heapq.heappop(heap)[1]
            g = grads.pop(node)
            if node.released:
                raise _freed_error(node)
            if g.dtype is not node.out_dtype:
                g = g.astype(node.out_dtype)
            if targets is not None and id(node) in targets:
                captured[id(node)] = g  # complete: every contribution is newer than the node
            edges = node.edges
            needed = self.needed
            if needed is None:
                need = tuple([e is not None for e in edges])
            else:
                need = tuple(
                    [
                        e is not None and id(e) in (needed if e.__class__ is Node else targets)
                        for e in edges
                    ]
                )
            if any(need):
                if graph:
                    results = graph_vjp(node, g, need)
                else:
                    results = node.vjp(g, need, *node.ctx)
                    if node.custom or not isinstance(results, tuple) or len(results) != len(edges):
                        results = _check_custom(node, results)
                if len(results) != len(edges):
                    raise AutogradError(
                        f"backward of '{node.name}': the rule returned {len(results)} "
                        f"gradients for {len(edges)} inputs"
                    )
                self._distribute(node, edges, need, results)
            if not self.retain:
                release(node)

    def _distribute(self, node: Node, edges: tuple, need: tuple, results: tuple) -> None:
        graph = self.create_graph
        for i, e in enumerate(edges):
            if not need[i]:
                continue
            gi = results[i]
            if gi is None:
                continue
            if graph and gi.__class__ is NvArray:
                gi = _plain(gi)
            elif not graph and isinstance(gi, Tensor):
                gi = gi.data
            is_node = e.__class__ is Node
            shape, dtype = (e.out_shape, e.out_dtype) if is_node else (e.data.shape, e.data.dtype)
            if gi.shape != shape:
                raise ShapeError(
                    f"backward of '{node.name}': the gradient for input {i} has shape "
                    f"{gi.shape}, expected {shape} (the shape of that input)"
                )
            gd = gi.dtype
            if gd is not dtype and not (gd is _F32 and dtype in HALF):
                gi = gi.astype(dtype)
            if is_node:
                self._to_node(e, gi, False)
            else:
                self._to_leaf(e, gi, False)


def _walk(run: _GeneralRun, outputs: list[Tensor], grads: list[Any]) -> None:
    run.prepare([o.grad_fn for o in outputs if o.grad_fn is not None])
    for o, g in zip(outputs, grads, strict=True):
        run.seed(o, g)
    runs = state.runs
    runs.append(run)
    previous = state.grad_enabled
    state.grad_enabled = run.create_graph
    try:
        run.run()
    finally:
        state.grad_enabled = previous
        runs.pop()


def backward_graph(tensor: Tensor, grad: Any, retain_graph: bool) -> None:
    """``tensor.backward(grad, create_graph=True)``: the leaves' ``grad`` become Tensors."""
    run = _GeneralRun(retain_graph, True, None)
    _walk(run, [tensor], [grad if isinstance(grad, Tensor) else _plain(grad)])
    if not retain_graph:
        for n in run.visited:
            release(n)


def grad_impl(
    outputs: list[Tensor],
    inputs: list[Tensor],
    grad_outputs: list[Any],
    retain_graph: bool,
    create_graph: bool,
    allow_unused: bool,
) -> tuple[Any, ...]:
    """:func:`grad` on checked arguments (grad_outputs: NvArrays, or Tensors to record)."""
    targets: dict[int, Any] = {}
    for x in inputs:
        targets[id(x.grad_fn) if x.grad_fn is not None else id(x)] = True
    run = _GeneralRun(retain_graph, create_graph, targets)
    if create_graph:
        grad_outputs = [g if isinstance(g, Tensor) else _plain(g) for g in grad_outputs]
    else:
        grad_outputs = [g.data if isinstance(g, Tensor) else g for g in grad_outputs]
    _walk(run, outputs, grad_outputs)
    results: list[Any] = []
    for k, x in enumerate(inputs):
        g = run.captured.get(id(x.grad_fn) if x.grad_fn is not None else id(x))
        if g is None:
            if not allow_unused:
                raise AutogradError(
                    f"grad: input {k} (shape {x.shape}) was not used to compute the outputs; "
                    "pass allow_unused=True to get None for it"
                )
            results.append(None)
        else:
            results.append(g if isinstance(g, Tensor) else _plain(g))
    return tuple(results)


def _as_list(x: Any, what: str) -> list[Any]:
    if isinstance(x, Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return list(x)
    raise TypeError(
        f"grad: {what} must be a Tensor or a sequence of Tensors, got {type(x).__name__}"
    )


def grad(
    outputs: Tensor | Sequence[Tensor],
    inputs: Tensor | Sequence[Tensor],
    grad_outputs: Any = None,
    retain_graph: bool | None = None,
    create_graph: bool = False,
    allow_unused: bool = False,
) -> tuple[Tensor | None, ...]:
    """The gradients of ``outputs`` with respect to ``inputs`` (``torch.autograd.grad``).

    Returns one Tensor per input (in ``inputs``' order; float32 for a float16/bfloat16 input,
    as ``.grad``); nothing is added to any ``.grad``.

    Args:
        outputs: the Tensors to differentiate (one or a sequence).
        inputs: leaves or intermediate Tensors of their computation (one or a sequence).
        grad_outputs: per output, the gradient to start from (its shape; NvArray, Tensor or
            host data), or None for a single-element output (then 1). A Tensor that requires
            grad is recorded with ``create_graph`` (a Jacobian-vector product's trick).
        retain_graph: keep the graph for another backward (default: ``create_graph``).
        create_graph: record the computation, so the results can be differentiated again.
        allow_unused: give None for an input the outputs do not depend on (else an error).

    Example::

        >>> x = Tensor.from_host([0.5, 2.0], dtype="float64", requires_grad=True)
        >>> (g,) = grad((x ** 3).sum(), x, create_graph=True)      # 3 x^2
        >>> (h,) = grad(g.sum(), x)                                 # 6 x
        >>> h.to_host()
        array([ 3., 12.])
    """
    outs = _as_list(outputs, "outputs")
    ins = _as_list(inputs, "inputs")
    for what, seq in (("outputs", outs), ("inputs", ins)):
        for k, t in enumerate(seq):
            if not isinstance(t, Tensor):
                raise TypeError(f"grad: {what}[{k}] must be a Tensor, got {type(t).__name__}")
            if not t.requires_grad:
                raise AutogradError(
                    f"grad: {what}[{k}] does not require grad (no input of its computation "
                    "requires grad, or it was computed under no_grad)"
                    if what == "outputs"
                    else f"grad: inputs[{k}] does not require grad; mark it requires_grad=True"
                )
    if grad_outputs is None or isinstance(grad_outputs, (Tensor, NvArray)):
        gos = [grad_outputs] * len(outs) if grad_outputs is None else [grad_outputs]
    else:
        gos = list(grad_outputs)
    if len(gos) != len(outs):
        raise ValueError(
            f"grad: {len(gos)} grad_outputs for {len(outs)} outputs (give one per output)"
        )
    starts: list[Any] = []
    for k, (o, g) in enumerate(zip(outs, gos, strict=True)):
        start, _ = start_gradient(o.data, g, "grad", f"grad_outputs[{k}]", f"outputs[{k}]")
        # a Tensor given as it is stays one: a recorded pass differentiates through it too
        starts.append(g if isinstance(g, Tensor) and start is g.data else start)
    retain = create_graph if retain_graph is None else bool(retain_graph)
    return grad_impl(outs, ins, starts, retain, create_graph, allow_unused)
