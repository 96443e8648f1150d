"""Functional derivatives: ``vjp``, ``jvp``, ``jacobian``, ``hessian``, ``hvp``, ``vhp``.

The meanings, arguments and result structures of ``torch.autograd.functional``: ``func`` takes
the inputs (a Tensor or a tuple of Tensors) and returns a Tensor or a tuple of Tensors; results
mirror those structures. The inputs are differentiated as fresh leaves (their values, not their
history), except with ``create_graph=True``, where inputs that require grad are used as they are
so that the results can be differentiated with respect to them. Everything is built on
:func:`ignis_autograd.grad`; forward-mode products use the double-vjp identity
(``J v = d/du <J^T u, v>``), so every op with a differentiable backward takes them.

Example::

    >>> from ignis_autograd import Tensor
    >>> from ignis_autograd.functional import hessian, hvp
    >>> x = Tensor.from_host([1.0, 2.0], dtype="float64")
    >>> hessian(lambda t: (t ** 3).sum(), x).to_host()      # diag(6 x)
    array([[ 6.,  0.],
           [ 0., 12.]])
    >>> hvp(lambda t: (t ** 3).sum(), x, Tensor.from_host([1.0, 1.0], dtype="float64"))[1].to_host()
    array([ 6., 12.])
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ignis
from ignis import NvArray

from ._errors import AutogradError
from ._higher import grad
from .tape import enable_grad
from .tensor import Tensor, _plain

__all__ = ["vjp", "jvp", "jacobian", "hessian", "hvp", "vhp"]


# --- structures -----------------------------------------------------------------------------


def _as_tuple(x: Any, what: str, fn: str) -> tuple[tuple[Tensor, ...], bool]:
    """``x`` as a tuple of Tensors (NvArrays become Tensors) and whether it was a tuple."""
    is_tuple = isinstance(x, (tuple, list))
    items = tuple(x) if is_tuple else (x,)
    out = []
    for k, t in enumerate(items):
        if isinstance(t, NvArray):
            t = Tensor(t)
        if not isinstance(t, Tensor):
            where = f"{what}[{k}]" if is_tuple else what
            raise TypeError(f"{fn}: {where} must be a Tensor, got {type(t).__name__}")
        out.append(t)
    return tuple(out), is_tuple


def _shape_back(items: tuple[Any, ...], is_tuple: bool) -> Any:
    return items if is_tuple else items[0]


def _prepare(inputs: tuple[Tensor, ...], create_graph: bool, fn: str) -> tuple[Tensor, ...]:
    out = []
    for k, x in enumerate(inputs):
        if x.dtype.kind != "f":
            raise ignis.DTypeError(
                f"{fn}: inputs[{k}] has dtype {x.dtype.name}; it must be floating"
            )
        if create_graph and x.requires_grad:
            out.append(x)  # its history stays, so the results differentiate back through it
        else:
            out.append(Tensor(x.data, requires_grad=True))
    return tuple(out)


def _outputs(func: Callable[..., Any], inputs: tuple[Tensor, ...], fn: str) -> tuple[Any, bool]:
    with enable_grad():
        raw = func(*inputs)
    return _as_tuple(raw, "the output of func", fn)


def _fill(
    grads: tuple[Any, ...], like: tuple[Tensor, ...], strict: bool, fn: str, what: str
) -> tuple:
    out = []
    for k, (g, x) in enumerate(zip(grads, like, strict=True)):
        if g is None:
            if strict:
                raise AutogradError(
                    f"{fn}: the output is independent of {what} {k} (strict=True asks for an "
                    "error; strict=False gives zeros)"
                )
            g = _plain(ignis.zeros(x.shape, dtype=x.dtype, device=x.device))
        out.append(g)
    return tuple(out)


def _grad(outputs, inputs, grad_outputs, create_graph: bool) -> tuple[Any, ...]:
    """grad() where outputs that are None or do not require grad contribute nothing."""
    pairs = [
        (o, g)
        for o, g in zip(outputs, grad_outputs, strict=True)
        if o is not None and o.requires_grad
    ]
    if not pairs:
        return (None,) * len(inputs)
    return grad(
        [o for o, _ in pairs],
        list(inputs),
        [g for _, g in pairs],
        retain_graph=True,
        create_graph=create_graph,
        allow_unused=True,
    )


def _vectors(v: Any, like: tuple[Tensor, ...], fn: str, what: str) -> tuple[Any, ...]:
    if v is None:
        if len(like) != 1 or like[0].numel() != 1:
            raise ValueError(
                f"{fn}: v may be omitted only when {what} is a single Tensor with one element"
            )
        x = like[0]
        return (ignis.ones(x.shape, dtype=x.dtype, device=x.device),)
    vs, _ = _as_tuple(v, "v", fn)
    if len(vs) != len(like):
        raise ValueError(f"{fn}: v has {len(vs)} Tensors, {what} has {len(like)}")
    for k, (a, b) in enumerate(zip(vs, like, strict=True)):
        if a.shape != b.shape:
            raise ignis.ShapeError(
                f"{fn}: v[{k}] has shape {a.shape}, expected {b.shape} (that of {what}[{k}])"
            )
    return vs


def _detached(items: tuple[Any, ...], create_graph: bool) -> tuple[Any, ...]:
    return items if create_graph else tuple(_plain(t.data) for t in items)


# --- the transforms -------------------------------------------------------------------------


def vjp(
    func: Callable[..., Any],
    inputs: Any,
    v: Any = None,
    create_graph: bool = False,
    strict: bool = False,
) -> tuple[Any, Any]:
    """``(func(inputs), v^T J)``: the vector-Jacobian product at ``inputs``.

    ``v`` has the outputs' structure (may be omitted for one single-element output).
    Example: ``out, (gx,) = vjp(lambda x: x.exp(), (x,), v)`` gives ``v * exp(x)``.
    """
    xs, in_tuple = _as_tuple(inputs, "inputs", "vjp")
    xs = _prepare(xs, create_graph, "vjp")
    outs, out_tuple = _outputs(func, xs, "vjp")
    vs = _vectors(v, outs, "vjp", "the output")
    grads = _fill(_grad(outs, xs, vs, create_graph), xs, strict, "vjp", "input")
    return _shape_back(_detached(outs, create_graph), out_tuple), _shape_back(grads, in_tuple)


def jvp(
    func: Callable[..., Any],
    inputs: Any,
    v: Any = None,
    create_graph: bool = False,
    strict: bool = False,
) -> tuple[Any, Any]:
    """``(func(inputs), J v)``: the Jacobian-vector product at ``inputs``.

    ``v`` has the inputs' structure (may be omitted for one single-element input). Computed by
    the double-vjp identity: ``J^T u`` is recorded for a dummy ``u`` and differentiated in ``u``.
    """
    xs, in_tuple = _as_tuple(inputs, "inputs", "jvp")
    xs = _prepare(xs, create_graph, "jvp")
    outs, out_tuple = _outputs(func, xs, "jvp")
    vs = _vectors(v, xs, "jvp", "the input")
    dummies = tuple(
        Tensor(ignis.zeros(o.shape, dtype=o.dtype, device=o.device), requires_grad=True)
        for o in outs
    )
    back = _grad(outs, xs, dummies, True)  # J^T u, linear in u
    fwd = _grad(back, dummies, vs, create_graph)
    out = _fill(fwd, outs, strict, "jvp", "output")
    return _shape_back(_detached(outs, create_graph), out_tuple), _shape_back(out, out_tuple)


def _unit(shape: tuple[int, ...], k: int, like: Tensor) -> NvArray:
    e = ignis.zeros((like.numel(),), dtype=like.dtype, device=like.device)
    e[k] = 1.0
    return e.reshape(shape)


def jacobian(
    func: Callable[..., Any],
    inputs: Any,
    create_graph: bool = False,
    strict: bool = False,
    vectorize: bool = False,
    strategy: str = "reverse-mode",
) -> Any:
    """The Jacobian of ``func`` at ``inputs``: for output ``i`` and input ``j`` a Tensor of
    shape ``out_i.shape + in_j.shape``; a tuple of tuples (outputs, then inputs) where ``func``
    returns a tuple and ``inputs`` is one, a tuple over the one that is, a Tensor otherwise.

    ``strategy="reverse-mode"`` takes one vjp per output element, ``"forward-mode"`` one jvp per
    input element. ``vectorize`` is accepted for PyTorch compatibility; the rows are computed one
    after another either way.
    """
    from .functional import stack

    if strategy not in ("reverse-mode", "forward-mode"):
        raise ValueError(
            f"jacobian: strategy must be 'reverse-mode' or 'forward-mode', got {strategy!r}"
        )
    _ = vectorize
    xs, in_tuple = _as_tuple(inputs, "inputs", "jacobian")
    xs = _prepare(xs, create_graph, "jacobian")
    outs, out_tuple = _outputs(func, xs, "jacobian")
    blocks: list[list[Any]] = [[None] * len(xs) for _ in outs]
    if strategy == "reverse-mode":
        for i, o in enumerate(outs):
            rows: list[list[Any]] = [[] for _ in xs]
            for k in range(o.numel()):
                seed = [
                    _unit(o.shape, k, o)
                    if j == i
                    else ignis.zeros(p.shape, dtype=p.dtype, device=p.device)
                    for j, p in enumerate(outs)
                ]
                gs = _fill(_grad(outs, xs, seed, create_graph), xs, strict, "jacobian", "input")
                for j, g in enumerate(gs):
                    rows[j].append(g)
            for j, x in enumerate(xs):
                block = (
                    stack(rows[j])
                    if rows[j]
                    else _plain(ignis.zeros((0,) + x.shape, dtype=x.dtype, device=x.device))
                )
                blocks[i][j] = block.reshape(o.shape + x.shape)
    else:
        for j, x in enumerate(xs):
            cols: list[list[Any]] = [[] for _ in outs]
            for k in range(x.numel()):
                direction = tuple(
                    _plain(_unit(x.shape, k, x))
                    if m == j
                    else _plain(ignis.zeros(p.shape, dtype=p.dtype, device=p.device))
                    for m, p in enumerate(xs)
                )
                _, col = jvp(func, xs, direction, create_graph=create_graph, strict=strict)
                col = col if isinstance(col, tuple) else (col,)
                for i, c in enumerate(col):
                    cols[i].append(c)
            for i, o in enumerate(outs):
                # (input elements along the first axis: moved behind the output's axes)
                block = stack(cols[i]).reshape((x.numel(), o.numel()))
                blocks[i][j] = block.mT.reshape(o.shape + x.shape)
    per_out = [_shape_back(tuple(row), in_tuple) for row in blocks]
    if not create_graph:
        per_out = [
            _shape_back(tuple(_plain(b.data) for b in row), True) if in_tuple else _plain(row.data)
            for row in per_out
        ]
    return _shape_back(tuple(per_out), out_tuple)


def _scalar_output(func: Callable[..., Any], fn: str) -> Callable[..., Tensor]:
    def scalar(*xs: Tensor) -> Tensor:
        out = func(*xs)
        if not isinstance(out, Tensor) or out.numel() != 1:
            got = out.shape if isinstance(out, Tensor) else type(out).__name__
            raise ValueError(f"{fn}: func must return a single-element Tensor, got {got}")
        return out

    return scalar


def hessian(
    func: Callable[..., Any],
    inputs: Any,
    create_graph: bool = False,
    strict: bool = False,
    vectorize: bool = False,
    outer_jacobian_strategy: str = "reverse-mode",
) -> Any:
    """The Hessian of a single-element ``func`` at ``inputs``: shape ``in.shape + in.shape`` for
    one input, a tuple of tuples over input pairs for a tuple of inputs."""
    scalar = _scalar_output(func, "hessian")
    _, in_tuple = _as_tuple(inputs, "inputs", "hessian")

    def gradient(*xs: Tensor) -> Any:
        out = scalar(*xs)
        gs = _fill(_first(out, xs), xs, strict, "hessian", "input")
        return gs if in_tuple else gs[0]

    return jacobian(gradient, inputs, create_graph, strict, vectorize, outer_jacobian_strategy)


def _first(out: Tensor, xs: tuple[Tensor, ...]) -> tuple[Any, ...]:
    """The recorded gradient of the single-element ``out`` with respect to ``xs``."""
    if not out.requires_grad:
        return (None,) * len(xs)
    return grad(out, list(xs), retain_graph=True, create_graph=True, allow_unused=True)


def _scalar_at(
    func: Callable[..., Any], inputs: Any, v: Any, create_graph: bool, fn: str
) -> tuple[tuple[Tensor, ...], bool, Tensor, tuple[Any, ...], tuple[Any, ...]]:
    """(inputs, whether a tuple, func's single-element output, v, the recorded gradient)."""
    xs, in_tuple = _as_tuple(inputs, "inputs", fn)
    xs = _prepare(xs, create_graph, fn)
    with enable_grad():
        out = _scalar_output(func, fn)(*xs)
    vs = _vectors(v, xs, fn, "the input")
    return xs, in_tuple, out, vs, _first(out, xs)


def vhp(
    func: Callable[..., Any],
    inputs: Any,
    v: Any = None,
    create_graph: bool = False,
    strict: bool = False,
) -> tuple[Any, Any]:
    """``(func(inputs), v^T H)`` for a single-element ``func``: one double backward."""
    xs, in_tuple, out, vs, first = _scalar_at(func, inputs, v, create_graph, "vhp")
    res = _fill(_grad(first, xs, vs, create_graph), xs, strict, "vhp", "input")
    return _detached((out,), create_graph)[0], _shape_back(res, in_tuple)


def hvp(
    func: Callable[..., Any],
    inputs: Any,
    v: Any = None,
    create_graph: bool = False,
    strict: bool = False,
) -> tuple[Any, Any]:
    """``(func(inputs), H v)`` for a single-element ``func``, by PyTorch's double-backward
    trick: ``H^T w`` is recorded for a dummy ``w`` and differentiated in ``w`` (a third-order
    pass; :func:`vhp` is cheaper and equal where the Hessian is symmetric)."""
    xs, in_tuple, out, vs, first = _scalar_at(func, inputs, v, create_graph, "hvp")
    dummies = tuple(
        Tensor(ignis.zeros(x.shape, dtype=x.dtype, device=x.device), requires_grad=True) for x in xs
    )
    back = _grad(first, xs, dummies, True)
    res = _fill(_grad(back, dummies, vs, create_graph), xs, strict, "hvp", "input")
    return _detached((out,), create_graph)[0], _shape_back(res, in_tuple)
