"""The autograd graph: nodes that hang off the tensors that own them, and the backward walk.

A :class:`Node` is one recorded operation. It holds the derivative rule (``vjp``), what the rule
needs from the forward pass (``ctx``) and one *edge* per input: the input's own node, the input
tensor itself when it is a leaf that requires a gradient, or None. A tensor references its node
(``grad_fn``); a node never references its output. So a graph is a tree of plain references
rooted at the outputs: when the last output dies, reference counting frees the whole graph and
everything it saved, without a tape, a cycle or the garbage collector.

The walk (:func:`run_backward`) processes nodes in decreasing creation order (a global sequence
number): every node that can contribute to a node was created after it, so by the time a node is
popped every contribution has arrived. This also lets gradient checkpointing inject a recomputed
subgraph into a walk that is already running (:meth:`_Run.inject`).

Gradient buffers: a buffer the walk stores must be exclusively owned before it is modified in
place. Rules marked ``fresh`` return new buffers; others may return views of their incoming
gradient, which are copied before a leaf keeps them and summed out of place when a second
contribution arrives.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import ignis
from ignis import DTypeError, NvArray, ShapeError

from . import _hooks
from ._errors import GraphFreedError

if TYPE_CHECKING:
    from .tensor import Tensor

__all__ = [
    "Node",
    "state",
    "release",
    "live_nodes",
    "run_backward",
    "current_run",
    "HALF",
    "grad_dtype",
]

HALF = (ignis.float16, ignis.bfloat16)
_F16, _BF16, _F32 = ignis.float16, ignis.bfloat16, ignis.float32
_seq = itertools.count()  # next() is atomic in CPython: one global creation order


def grad_dtype(dtype: Any) -> Any:
    """The dtype gradients of a ``dtype`` tensor accumulate in: float32 for float16/bfloat16."""
    return _F32 if dtype is _F16 or dtype is _BF16 else dtype


class _State(threading.local):
    """Per-thread recording state (``threading.local`` runs ``__init__`` once per thread)."""

    def __init__(self) -> None:
        self.grad_enabled = True
        # Weak references to the nodes this thread recorded that are alive and not released
        # (Tape.size/clear). A dead node's reference removes itself: the callback is the set's
        # own C-level discard, so registering costs no Python call.
        self.live: set[weakref.ref[Node]] = set()
        # Checkpoint forwards running under no_grad watch for inputs that require grad.
        self.observers: list[Any] = []
        # Backward walks in progress on this thread (innermost last).
        self.runs: list[_Run] = []


state = _State()


class Node:
    """One recorded operation of a graph.

    Attributes:
        name: the op, e.g. ``"mul"`` (named in error messages and ``repr(tensor.grad_fn)``).
        vjp: ``vjp(grad, need, *ctx) -> tuple`` with one gradient (or None) per input, where
            ``need[i]`` says whether input ``i`` wants one.
        ctx: what ``vjp`` needs from the forward pass (arrays, shapes, parameters).
        edges: per input, its Node, the leaf Tensor itself, or None (no gradient wanted).
        out_shape, out_dtype: the output's shape and dtype (what the gradient ``vjp``
            receives looks like).
        fresh: the rule returns new, unshared buffers (the walk may keep them as they are).
        custom: recorded through :meth:`Tape.record` (a user's backward function).
        seq: creation order; the backward walk runs in decreasing ``seq``.
        released: freed by a backward or ``Tape.clear``; using it again is an error.
    """

    __slots__ = (
        "name",
        "vjp",
        "ctx",
        "edges",
        "out_shape",
        "out_dtype",
        "fresh",
        "custom",
        "seq",
        "released",
        "__weakref__",
    )

    def __init__(
        self,
        name: str,
        vjp: Callable[..., Any],
        ctx: tuple[Any, ...],
        edges: tuple[Any, ...],
        out: NvArray,
        fresh: bool,
        custom: bool = False,
    ):
        self.name = name
        self.vjp = vjp
        self.ctx = ctx
        self.edges = edges
        self.out_shape = out.shape
        self.out_dtype = out.dtype
        self.fresh = fresh
        self.custom = custom
        self.seq = next(_seq)
        self.released = False
        live = state.live
        live.add(weakref.ref(self, live.discard))

    def __repr__(self) -> str:
        state_ = ", released" if self.released else ""
        return f"<backward of {self.name}{state_}>"

    def next_functions(self) -> tuple[Any, ...]:
        """The input edges (Node, leaf Tensor or None), for inspecting a graph."""
        return self.edges


def release(node: Node) -> None:
    """Drop what a node saved and its edges; a later backward through it raises GraphFreedError."""
    if node.released:
        return
    node.released = True
    node.vjp = None
    node.ctx = ()
    node.edges = ()
    # The callback-free reference compares equal to the registered one (same live referent).
    state.live.discard(weakref.ref(node))


def live_nodes() -> list[Node]:
    """The calling thread's recorded nodes that are alive and not released."""
    nodes = (r() for r in list(state.live))
    return [n for n in nodes if n is not None and not n.released]


def current_run() -> _Run | None:
    """The innermost backward walk running on this thread, or None."""
    runs = state.runs
    return runs[-1] if runs else None


def _freed_error(node: Node) -> GraphFreedError:
    return GraphFreedError(
        f"backward: the graph through '{node.name}' was already freed by an earlier backward "
        "(or Tape.clear); pass retain_graph=True to the first backward to differentiate a graph "
        "more than once"
    )


class _Run:
    """State of one backward walk: pending gradients per node and the buffers it owns."""

    __slots__ = (
        "heap",
        "grads",
        "owned",
        "retain",
        "visited",
        "pending",
        "leaf_pending",
        "leaf_late",
    )

    create_graph = False  # (a recorded walk, ._higher's, says True)

    def __init__(self, retain: bool):
        self.heap: list[tuple[int, Node]] = []
        self.grads: dict[Node, NvArray] = {}
        # id -> buffer for gradient buffers this walk created and nobody else references; the
        # value keeps the object alive so its id cannot be reused while it is listed.
        self.owned: dict[int, NvArray] = {}
        self.retain = retain
        self.visited: list[Node] = []
        # Contributions still to come per scanned node (its incoming edges), so the last one can
        # be told apart; None once checkpointing injects nodes the scan did not count.
        self.pending: dict[Node, int] | None = {}
        # Per leaf with post-accumulate hooks (see ._hooks): id -> contributions still to come;
        # None where they cannot be counted before the walk (checkpoint nodes). Leaves whose
        # hooks wait for the end of the walk: id -> leaf.
        self.leaf_pending: dict[int, int] | None = {}
        self.leaf_late: dict[int, Tensor] = {}

    # -- graph checks ----------------------------------------------------------------------
    def scan(self, root: Node) -> None:
        """Check that every node reachable from ``root`` is alive, before writing any gradient."""
        seen = {id(root)}
        stack = [root]
        visited = self.visited
        pending = self.pending
        pending[root] = 1  # the gradient run_backward injects
        hooked = _hooks.registry
        leaves = self.leaf_pending
        while stack:
            node = stack.pop()
            if node.released:
                raise _freed_error(node)
            visited.append(node)
            if hooked and node.name == "checkpoint":
                leaves = self.leaf_pending = None  # its recomputed edges are not known yet
            for e in node.edges:
                if type(e) is Node:
                    pending[e] = pending.get(e, 0) + 1
                    if id(e) not in seen:
                        seen.add(id(e))
                        stack.append(e)
                elif hooked and leaves is not None and e is not None and id(e) in hooked:
                    leaves[id(e)] = leaves.get(id(e), 0) + 1

    def leaf_done(self, leaf: Tensor) -> None:
        """A contribution reached ``leaf``, which has post-accumulate hooks: run them when it
        was the last one counted, else (uncountable) leave them for the end of the walk."""
        key = id(leaf)
        counts = self.leaf_pending
        left = counts.get(key) if counts is not None else None
        if left is None:
            self.leaf_late[key] = leaf
            return
        left -= 1
        counts[key] = left
        if left == 0:
            del counts[key]
            self.leaf_late.pop(key, None)
            _hooks.run_hooks(leaf)
        else:
            self.leaf_late[key] = leaf  # in case a later contribution is never made (None)

    def finish_leaves(self) -> None:
        """Run the hooks of the leaves that got gradients but were not yet reported."""
        late, self.leaf_late = self.leaf_late, {}
        for leaf in late.values():
            _hooks.run_hooks(leaf)

    # -- contributions ---------------------------------------------------------------------
    def inject(self, target: Tensor, grad: NvArray, fresh: bool = False) -> None:
        """Add ``grad`` to what flows into ``target`` (a tensor of this or a newer graph).

        Used by checkpointing: the recomputed output is injected with the checkpoint's gradient
        and the walk carries on through the recomputed nodes, which are the newest.
        """
        node = target.grad_fn
        if self.heap or self.grads or (self.visited and self.visited[0] is not node):
            self.pending = None  # a recomputed subgraph joins the walk: counts no longer hold
        if node is not None:
            self._to_node(node, grad, fresh)
        elif target.requires_grad:
            self._to_leaf(target, grad, fresh)
            if _hooks.registry and id(target) in _hooks.registry:
                self.leaf_done(target)

    def _to_node(self, node: Node, g: NvArray, fresh: bool) -> None:
        if node.released:
            raise _freed_error(node)
        grads = self.grads
        prev = grads.get(node)
        pending = self.pending
        last = False
        if pending is not None:
            left = pending.get(node, 0) - 1
            pending[node] = left
            last = left == 0
        if prev is None:
            grads[node] = g
            if fresh:
                self.owned[id(g)] = g
            heapq.heappush(self.heap, (-node.seq, node))
            return
        owned = self.owned
        pd = prev.dtype
        half = pd is _F16 or pd is _BF16
        if not half and id(prev) in owned:
            ignis.accumulate(prev, g)
            return
        # Out of place: prev may be shared (a view of another gradient, the user's grad_output);
        # half-precision sums are formed in float32 and rounded once, when the node runs.
        owned.pop(id(prev), None)
        if not half:
            new = prev + g
        elif g.dtype is _F32 or (last and g.dtype is pd):
            # One kernel, the same bits: a 16-bit operand widens exactly inside the add, and a
            # 16-bit add is the float32 sum rounded once, which is what the node would have
            # received from the float32 sum of its last two contributions.
            new = prev + g
        else:
            new = prev.astype(_F32) + g
        owned[id(new)] = new
        grads[node] = new

    @staticmethod
    def _to_leaf(leaf: Tensor, g: NvArray, fresh: bool) -> None:
        current = leaf.grad
        if current is None:
            target = grad_dtype(leaf.data.dtype)
            if g.dtype is not target:
                leaf.grad = g.astype(target)
            elif fresh and g.is_contiguous:
                leaf.grad = g
            else:
                leaf.grad = g.clone()
        elif current.__class__ is NvArray:
            # In place on the stream: no synchronization of the device.
            ignis.accumulate(current, g)
        else:  # a Tensor that backward(create_graph=True) left: the sum keeps its graph
            leaf.grad = current + g

    # -- the walk --------------------------------------------------------------------------
    def run(self) -> None:
        heap, grads, owned = self.heap, self.grads, self.owned
        heappop, to_node, to_leaf = heapq.heappop, self._to_node, self._to_leaf
        retain = self.retain
        live_discard = state.live.discard
        hooked = _hooks.registry
        while heap:
            node = heappop(heap)[1]
            g = grads.pop(node)
            owned.pop(id(g), None)
            if node.released:
                raise _freed_error(node)
            if g._dtype is not node.out_dtype:
                g = g.astype(node.out_dtype)
            edges = node.edges
            results = node.vjp(g, tuple([e is not None for e in edges]), *node.ctx)
            if node.custom or len(results) != len(edges):
                results = _check_custom(node, results)
            fresh = node.fresh
            i = -1
            for e in edges:
                i += 1
                if e is None:
                    continue
                gi = results[i]
                if gi is None:
                    continue
                is_node = e.__class__ is Node
                if is_node:
                    shape, dtype = e.out_shape, e.out_dtype
                else:
                    data = e.data
                    shape, dtype = data._shape, data._dtype
                gs = gi._shape
                if gs is not shape and gs != shape:
                    raise ShapeError(
                        f"backward of '{node.name}': the gradient for input {i} has shape "
                        f"{gi.shape}, expected {shape} (the shape of that input)"
                    )
                fresh_i = fresh
                gd = gi._dtype
                if gd is not dtype and not (gd is _F32 and (dtype is _F16 or dtype is _BF16)):
                    gi = gi.astype(dtype)
                    fresh_i = True
                if is_node:
                    to_node(e, gi, fresh_i)
                else:
                    to_leaf(e, gi, fresh_i)
                    if hooked and id(e) in hooked:
                        self.leaf_done(e)
            if not retain:
                # release(node), inlined: this runs once per node of every backward.
                node.released = True
                node.vjp = None
                node.ctx = ()
                node.edges = ()
                live_discard(weakref.ref(node))


def _check_custom(node: Node, results: Any) -> tuple[Any, ...]:
    """Normalize and check what a backward function returned: one NvArray or None per input."""
    n = len(node.edges)
    where = (
        f"backward_fn of '{node.name}' (Tape.record)"
        if node.custom
        else f"the derivative rule of '{node.name}'"
    )
    if isinstance(results, NvArray) or results is None or _is_tensor(results):
        results = (results,)
    try:
        results = tuple(results)
    except TypeError:
        raise TypeError(
            f"{where} must return one NvArray or None per input, got {type(results).__name__}"
        ) from None
    if len(results) != n:
        raise ValueError(f"{where} returned {len(results)} gradients for {n} inputs")
    out = []
    for i, r in enumerate(results):
        if _is_tensor(r):
            r = r.data
        if r is not None and not isinstance(r, NvArray):
            raise TypeError(
                f"{where}: gradient {i} must be an NvArray or None, got {type(r).__name__}"
            )
        e = node.edges[i]
        if r is not None and e is not None:
            shape = e.out_shape if type(e) is Node else e.data.shape
            if r.shape != shape:
                raise ShapeError(
                    f"{where} returned a gradient of shape {r.shape} for input {i}, whose shape "
                    f"is {shape}"
                )
            if r.dtype.kind != "f":
                raise DTypeError(
                    f"{where}: gradient {i} has dtype {r.dtype.name}; gradients must be floating"
                )
        out.append(r)
    return tuple(out)


def _is_tensor(x: Any) -> bool:
    from .tensor import Tensor

    return isinstance(x, Tensor)


def run_backward(tensor: Tensor, grad: NvArray, grad_owned: bool, retain_graph: bool) -> None:
    """Differentiate ``tensor`` with incoming gradient ``grad`` (its shape, checked by the caller).

    Accumulates into the ``grad`` of every leaf that requires it; frees the walked graph unless
    ``retain_graph``.
    """
    node = tensor.grad_fn
    if node is None:
        _Run._to_leaf(tensor, grad, grad_owned)
        if _hooks.registry:
            _hooks.run_hooks(tensor)
            if not state.runs:
                for fn in _hooks.take_callbacks():
                    fn()
        return
    run = _Run(retain_graph)
    run.scan(node)
    run.inject(tensor, grad, grad_owned)
    runs = state.runs
    runs.append(run)
    # Rules work on NvArrays; disable recording anyway so a rule that builds Tensors (or a
    # user's backward_fn) cannot grow the graph it is differentiating.
    previous = state.grad_enabled
    state.grad_enabled = False
    try:
        run.run()
        if run.leaf_late:
            run.finish_leaves()
    finally:
        state.grad_enabled = previous
        runs.pop()
        if not runs:
            # Also after a failed walk: a callback may keep other processes in step.
            for fn in _hooks.take_callbacks():
                fn()
    if not retain_graph:
        for n in run.visited:
            if not n.released:  # (the walk released the nodes it reached)
                release(n)
