"""The derivative half of :func:`ignis.fuse`: a backward trace from the forward one.

The derivative rules are the op table's own (``ElementwiseOp.grad``: one place says how every
op differentiates). They are written with NvArray ops, so run on :class:`Traced` values they
*record* the backward computation instead of computing it: symbolic differentiation for free.
The backward trace replays the forward ops from the inputs (recomputing intermediates is cheaper
than storing them), then walks the ops in reverse, accumulating each value's gradient.

Every value of the backward trace has the kernel's full (broadcast) shape: a kernel computes
one element at a time, so the rules' ``unbroadcast`` is the identity there; the sums over
broadcast dimensions happen after the kernel, where an input was broadcast.
"""

from __future__ import annotations

from typing import Any

from . import _dtypes as dt
from ._array._op_table import ELEMENTWISE
from ._fuse_codegen import Spec
from ._fuse_trace import Node, Trace, Traced

__all__ = ["backward_trace", "grad_dtype", "live_nodes"]

_HALF = (dt.float16, dt.bfloat16)


def grad_dtype(d: dt.DType) -> dt.DType:
    """The dtype of an input's gradient: its own, float32 for 16-bit floats (as the graph
    accumulates them)."""
    return dt.float32 if d in _HALF else d


def live_nodes(trace: Trace, roots: list[int]) -> list[int]:
    """The nodes ``roots`` depend on, in recording order."""
    live: set[int] = set()
    stack = list(roots)
    while stack:
        i = stack.pop()
        if i not in live:
            live.add(i)
            stack.extend(trace.nodes[i].args)
    return sorted(live)


def _ops() -> Any:
    from ._array import _ops

    return _ops


def _replay(n: Node, args: list[Any]) -> Any:
    ops = _ops()
    if n.kind == "op":
        return getattr(ops, n.op)(*args, **n.params)
    if n.kind == "where":
        return ops.where(*args)
    if n.kind == "astype":
        return args[0].astype(n.dtype)
    raise AssertionError(f"fuse: cannot replay a {n.kind} node")


def _const(n: Node) -> Any:
    return n.value if n.weak is not None else n.dtype.numpy.type(n.value)


def _differentiable(n: Node, args_dep: bool) -> bool:
    if not args_dep or n.dtype is None or n.dtype.kind != "f":
        return False
    if n.kind == "op":
        return ELEMENTWISE[n.op].grad is not None
    return n.kind in ("where", "astype")


def _saved(entry: Any, n: Node, args: list[Any], out: Any, need: tuple[bool, ...], shape: Any):
    """What ``entry.grad`` receives after ``g, need`` (the op table's ``saves``, then params)."""
    table = {
        "x": lambda: args[0],
        "a": lambda: args[0],
        "b": lambda: args[1],
        "out": lambda: out,
        "sa": lambda: shape,
        "sb": lambda: shape,
        "a_if_b": lambda: args[0] if need[1] else None,
        "b_if_a": lambda: args[1] if need[0] else None,
        "out_if_b": lambda: out if need[1] else None,
    }
    values = [table[s]() for s in entry.saves]
    values += [n.params.get(p, v[0]) for p, v in entry.params.items()]
    return values


def backward_trace(
    fwd: Trace, spec: Spec, g_dtype: dt.DType, wants: tuple[int, ...]
) -> tuple[Trace, Spec, list[int | None]]:
    """The backward trace of ``spec`` (one output, optionally reduced) for the arguments at
    positions ``wants``: its spec (inputs: the forward's, then the gradient; outputs: one per
    wanted argument that gets a gradient) and, per wanted position, the index of its output in
    the spec's outputs (None: no gradient reaches it)."""
    (root,) = spec.outputs
    scale = None
    if spec.reduce is not None:
        r = spec.reduce
        root = r.args[0]
        if r.op not in ("sum", "mean"):
            raise TypeError(f"{fwd.label}: the gradient of a trailing {r.op} is not fused")
        if r.op == "mean":
            h = fwd.nodes[root]
            scale = 1
            for a in r.params["axes"]:
                scale *= h.shape[a]
    shape = fwd.nodes[root].shape
    bwd = Trace(f"{fwd.label} (backward)")
    mapping: dict[int, Any] = {}
    for i in spec.inputs:
        n = fwd.nodes[i]
        if n.kind == "input":
            mapping[i] = bwd.input(n.position, n.dtype, shape)
        else:
            mapping[i] = bwd.scalar(n.position, _const(n))
    g = bwd.input(-1, g_dtype, shape)
    wanted = {i for i in spec.inputs if fwd.nodes[i].kind == "input" and
              fwd.nodes[i].position in wants}  # fmt: skip
    live = live_nodes(fwd, [root])
    dep: set[int] = set()
    for i in live:
        n = fwd.nodes[i]
        if i in wanted:
            dep.add(i)
        elif n.kind == "const":
            mapping[i] = _const(n)
        elif i not in mapping:
            mapping[i] = _replay(n, [mapping[j] for j in n.args])
            if _differentiable(n, any(j in dep for j in n.args)):
                dep.add(i)
    adj: dict[int, Any] = {}
    if root in dep:
        adj[root] = g if scale is None else g / scale
    ops = _ops()
    for i in reversed(live):
        if i not in adj or i in wanted:
            continue
        n = fwd.nodes[i]
        gi = adj[i]
        args = [mapping[j] for j in n.args]
        need = tuple(j in dep for j in n.args)
        if n.kind == "op":
            entry = ELEMENTWISE[n.op]
            grads = entry.grad(gi, need, *_saved(entry, n, args, mapping[i], need, shape))
        elif n.kind == "where":
            grads = (
                None,
                ops.where(args[0], gi, 0.0) if need[1] else None,
                ops.where(args[0], 0.0, gi) if need[2] else None,
            )
        else:  # astype
            grads = (gi.astype(fwd.nodes[n.args[0]].dtype),)
        for j, gj in zip(n.args, grads, strict=False):
            if gj is None or j not in dep:
                continue
            adj[j] = gj if j not in adj else adj[j] + gj
    outputs: list[int] = []
    out_dtypes: list[dt.DType] = []
    where_out: list[int | None] = []
    by_position = {fwd.nodes[i].position: i for i in wanted}
    for p in wants:
        i = by_position.get(p)
        gv = adj.get(i) if i is not None else None
        if not isinstance(gv, Traced):
            where_out.append(None)
            continue
        where_out.append(len(outputs))
        outputs.append(gv._index)
        out_dtypes.append(grad_dtype(fwd.nodes[i].dtype))
    inputs = [mapping[i]._index for i in spec.inputs] + [g._index]
    return bwd, Spec(inputs, outputs, out_dtypes), where_out
