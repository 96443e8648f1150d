"""Derivative rules on Tensors: how a recorded backward pass differentiates each node.

With ``create_graph=True`` the backward walk hands each node a Tensor gradient and records what
the node's rule computes, so the result can be differentiated again, to any order.
:func:`graph_vjp` runs one node that way:

1. A ``Tape.record`` node (a user's backward function on NvArrays) runs on the arrays; its
   results are *once differentiable*: differentiating them again raises an error naming it.
2. An entry of :data:`GRAPH_RULES` (below) computes the node's gradients from Tensor operations.
   That is how the fused kernels' rules are differentiated: ``linear`` by its matrix-product
   formulas, ``layer_norm``, ``rms_norm``, ``cross_entropy`` and both attentions by a
   *composite*: the forward recomputed from basic differentiable ops on the saved inputs and
   differentiated with ``create_graph`` (:func:`composite_vjp`), which keeps their L x L or
   per-row intermediates for as long as the recorded graph lives. ``var`` and ``std`` recompute
   their mean so that its dependence on the input is recorded.
3. Any other node runs its own rule, with the gradient a Tensor and each saved array that is
   an input or the output *linked*: a Tensor over the same data whose ``grad_fn`` is that input's
   node (or the leaf itself), or this node for the output. The rules then record their
   arithmetic (their functions dispatch through :mod:`._dispatch`), including its dependence on
   the saved values. :data:`LINKS` says, per rule, which saved value is which.

Rules that are linear maps of the gradient through a kernel (scatters, dropout, rotary
embeddings) record themselves (``_rules._linear_map``) and need nothing here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ignis._array._op_table import ELEMENTWISE

import ignis
from ignis import NvArray

from . import _graph
from ._graph import Node, _check_custom
from .attention import _composite as _attention_composite
from .function import _on_node, _refusing
from .tensor import Tensor, _plain

__all__ = ["graph_vjp", "GRAPH_RULES", "LINKS", "composite_vjp", "tensor_softmax_backward"]

_F32 = ignis.float32


# --- linking saved arrays to the graph ------------------------------------------------------


def link(node: Node, spec: Any, data: Any) -> Any:
    """``data`` (a value ``node`` saved) as a Tensor on the graph: ``spec`` is the index of the
    input it holds the values of, ``"out"`` for the node's output, None for neither. A saved
    array of another shape than its input (a reshaped view) is linked through a reshape."""
    if spec is None or data.__class__ is not NvArray:
        return data
    edge = node if spec == "out" else node.edges[spec]
    if edge is None:
        return data  # an input that requires no gradient: a constant
    if edge.__class__ is not Node:  # a leaf Tensor
        if edge.data is data or edge.data.shape == data.shape:
            return edge
        return edge.reshape(data.shape)
    shape = edge.out_shape
    if data.shape == shape:
        return _on_node(data, edge)
    return _on_node(data.reshape(shape), edge).reshape(data.shape)


#: rule name -> what each saved value of its context is (input index, "out" or None)
LINKS: dict[str, tuple[Any, ...]] = {}

_SAVED_AS = {"x": 0, "a": 0, "a_if_b": 0, "b": 1, "b_if_a": 1, "out": "out", "out_if_b": "out"}
for _op in ELEMENTWISE.values():
    if _op.grad is not None:
        LINKS[_op.name] = tuple(_SAVED_AS.get(s) for s in _op.saves)
LINKS.update(
    {
        "prod": (0, "out"),  # (x, the product with the reduced axes kept)
        "softmax": ("out", None),
        "log_softmax": ("out", None),
        "matmul": (0, 1, None, None),
    }
)


def tensor_softmax_backward(g: Any, out: Any, axis: int = -1, log: bool = False) -> Any:
    """The softmax backward formulas on Tensors (the fused kernel's, recorded)."""
    if log:
        return g - out.exp() * g.sum(axis=axis, keepdims=True)
    return out * (g - (g * out).sum(axis=axis, keepdims=True))


# --- composites: a fused op recomputed from basic ops and differentiated --------------------


def _rewire(results: list[Any], mapping: dict[int, Any], marker: int) -> None:
    """Point the edges of the nodes recorded since ``marker`` that reach a stand-in leaf
    (``mapping``'s keys, by id) at what that leaf stands for."""
    stack = [r.grad_fn for r in results if r is not None and r.grad_fn is not None]
    seen: set[int] = set()
    while stack:
        node = stack.pop()
        if node.seq <= marker or id(node) in seen:
            continue
        seen.add(id(node))
        edges = node.edges
        if any(e is not None and e.__class__ is not Node and id(e) in mapping for e in edges):
            node.edges = tuple(
                mapping.get(id(e), e) if e is not None and e.__class__ is not Node else e
                for e in edges
            )
        stack.extend(e for e in edges if e.__class__ is Node)


def composite_vjp(
    node: Node, g: Tensor, need: tuple[bool, ...], forward: Callable[..., Tensor], values: list
) -> tuple[Any, ...]:
    """The gradients of ``node`` from ``forward``, a composite of its op on Tensors.

    ``values[i]`` holds input ``i``'s values (NvArray of its shape, or None for an input that is
    not an array). ``forward`` runs on stand-in leaves over them and is differentiated with
    ``create_graph``; the recorded result is then attached to the node's real inputs. Every
    input with an edge gets a stand-in, wanted or not, so the result's dependence on all of
    them is recorded.
    """
    from ._higher import grad_impl

    leaves: list[Any] = []
    mapping: dict[int, Any] = {}
    for e, v in zip(node.edges, values, strict=True):
        if v is None:
            leaves.append(None)
        elif e is None:
            leaves.append(_plain(v))
        else:
            leaf = Tensor(v, requires_grad=True)
            mapping[id(leaf)] = e
            leaves.append(leaf)
    marker = next(_graph._seq)
    y = forward(*leaves)
    wanted = [i for i, want in enumerate(need) if want and id(leaves[i]) in mapping]
    grads = grad_impl([y], [leaves[i] for i in wanted], [g], True, True, True)
    out: list[Any] = [None] * len(need)
    for i, gi in zip(wanted, grads, strict=True):
        out[i] = gi
    _rewire(list(grads), mapping, marker)
    return tuple(out)


def _zeros_for(edge: Any) -> NvArray | None:
    """Zeros shaped like the input of ``edge`` (for an input whose value no gradient reads)."""
    if edge is None:
        return None
    if edge.__class__ is Node:
        return ignis.zeros(edge.out_shape, dtype=edge.out_dtype, device=_device_of(edge))
    return ignis.zeros_like(edge.data)


def _device_of(node: Node) -> Any:
    for v in node.ctx:
        if isinstance(v, NvArray):
            return v.device
    return None


# --- the overrides --------------------------------------------------------------------------

GRAPH_RULES: dict[str, Callable[[Node, Tensor, tuple[bool, ...]], tuple[Any, ...]]] = {}


def graph_rule(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        GRAPH_RULES[name] = fn
        return fn

    return register


def _reduced_axes(keep: tuple[int, ...]) -> tuple[int, ...]:
    # (an unreduced axis of size 1 may be counted in: a mean over it changes nothing)
    return tuple(i for i, d in enumerate(keep) if d == 1)


def _mean_of(x: Any, keep_shape: tuple[int, ...]) -> Any:
    axes = _reduced_axes(keep_shape)
    return x.mean(axis=axes, keepdims=True) if axes else x


@graph_rule("var")
def _var(node, g, need):
    x, mean_keep, denom = node.ctx
    xt = link(node, 0, x)
    return node.vjp(g, need, xt, _mean_of(xt, mean_keep.shape), denom)


@graph_rule("std")
def _std(node, g, need):
    x, mean_keep, denom, out_keep = node.ctx
    xt = link(node, 0, x)
    return node.vjp(g, need, xt, _mean_of(xt, mean_keep.shape), denom, link(node, "out", out_keep))


@graph_rule("linear")
def _linear(node, g, need):
    # y = x @ w.T (+ b): gx = g @ w, gw = g^T x over the flattened batch, gb = sum of g
    x, w = node.ctx
    gx = gw = gb = None
    if need[0]:
        gx = g @ link(node, 1, w)
    if need[1]:
        xt = link(node, 0, x)
        gw = g.reshape(-1, g.shape[-1]).mT @ xt.reshape(-1, xt.shape[-1])
    if len(need) == 3 and need[2]:
        gb = g.sum(axis=tuple(range(g.ndim - 1))) if g.ndim > 1 else g
    return (gx, gw, gb) if len(need) == 3 else (gx, gw)


def _norm_inputs(node: Node) -> tuple[NvArray, Any, tuple[int, ...], float]:
    """(x, weight, normalized axes, eps) of a layer_norm/rms_norm node, from its context."""
    ctx = node.ctx
    if ctx[0] == "fused":
        rows, w2, sx, ns, eps = ctx[1], ctx[-4], ctx[-3], ctx[-2], ctx[-1]
        x = rows if rows.shape == sx else rows.reshape(sx)
        w = None if w2 is None else (w2 if w2.shape == ns else w2.reshape(ns))
        return x, w, tuple(range(len(sx) - len(ns), len(sx))), eps
    _, _, _, w, axes, _, x, eps = ctx
    return x, w, axes, eps


def _normalized(x: Tensor, axes: tuple[int, ...], eps: float, center: bool) -> Tensor:
    xc = x.astype(_F32) if x.dtype in _graph.HALF else x
    if center:
        xc = xc - xc.mean(axis=axes, keepdims=True)
    return xc * ((xc * xc).mean(axis=axes, keepdims=True) + eps).rsqrt()


@graph_rule("layer_norm")
def _layer_norm(node, g, need):
    x, w, axes, eps = _norm_inputs(node)

    def forward(xt, wt, bt):
        y = _normalized(xt, axes, eps, True)
        y = y * wt if wt is not None else y
        return y + bt if bt is not None else y

    bias = _zeros_for(node.edges[2])  # (its value enters no gradient)
    return composite_vjp(node, g, need, forward, [x, w, bias])


@graph_rule("rms_norm")
def _rms_norm(node, g, need):
    x, w, axes, eps = _norm_inputs(node)

    def forward(xt, wt):
        y = _normalized(xt, axes, eps, False)
        return y * wt if wt is not None else y

    return composite_vjp(node, g, need, forward, [x, w])


@graph_rule("cross_entropy")
def _cross_entropy(node, g, need):
    z, t, _lse, ignore_index, smoothing, reduction = node.ctx
    n_classes = z.shape[-1]
    classes = ignis.arange(n_classes, device=z.device).reshape((1,) * t.ndim + (n_classes,))
    onehot = (t.reshape(t.shape + (1,)) == classes).astype(z.dtype)
    valid = None if ignore_index is None else (t != ignore_index).astype(z.dtype)

    def forward(zt, _targets):
        logp = zt.log_softmax(axis=-1)
        loss = -(logp * onehot).sum(axis=-1)
        if smoothing:
            loss = loss * (1.0 - smoothing) - logp.sum(axis=-1) * (smoothing / n_classes)
        if valid is not None:
            loss = loss * valid
        if reduction == "none":
            return loss
        total = loss.sum()
        if reduction == "sum":
            return total
        return total / (valid.sum() if valid is not None else float(max(t.numel, 1)))

    return composite_vjp(node, g, need, forward, [z, None])


@graph_rule("scaled_dot_product_attention")
def _attention(node, g, need):
    q4, k4, v4, _out, _lse, causal, scale, sq, sk, sv = node.ctx

    def forward(q, k, v):
        return _attention_composite(q, k, v, q.data, k.data, v.data, causal, scale)

    return composite_vjp(node, g, need, forward, [q4.reshape(sq), k4.reshape(sk), v4.reshape(sv)])


@graph_rule("packed_attention")
def _packed_attention(node, g, need):
    *_, causal, scale, h, qkv = node.ctx
    b, n, three_dim = qkv.shape
    dim = three_dim // 3

    def forward(t):
        heads = t.reshape(b, n, 3, h, dim // h).permute(2, 0, 3, 1, 4)
        out = _attention_composite(
            heads[0],
            heads[1],
            heads[2],
            heads[0].data,
            heads[1].data,
            heads[2].data,
            causal,
            scale,
        )
        return out.permute(0, 2, 1, 3).reshape(b, n, dim)

    return composite_vjp(node, g, need, forward, [qkv])


# --- one node -------------------------------------------------------------------------------


def graph_vjp(node: Node, g: Tensor, need: tuple[bool, ...]) -> tuple[Any, ...]:
    """``node``'s input gradients as Tensors recorded on the graph (module notes)."""
    if node.custom:  # Tape.record: a backward function on NvArrays
        results = _check_custom(node, node.vjp(g.data, need, *node.ctx))
        # Its results may depend on the gradient and on anything the function closed over:
        # differentiating them again, towards either, is refused.
        edges = ((g.grad_fn or g) if g._requires_grad else None, *node.edges)
        label = f"{node.name} (Tape.record)"
        return tuple(_refusing(r, label, edges) for r in results)
    override = GRAPH_RULES.get(node.name)
    if override is not None:
        results = override(node, g, need)
    else:
        links = LINKS.get(node.name)
        ctx = node.ctx
        if links is not None:
            ctx = tuple(link(node, links[i], c) if i < len(links) else c for i, c in enumerate(ctx))
        results = node.vjp(g, need, *ctx)
    if not isinstance(results, tuple):
        results = tuple(results) if isinstance(results, list) else (results,)
    return tuple(_plain(r) if r.__class__ is NvArray else r for r in results)
