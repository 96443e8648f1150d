"""Custom differentiable operations: subclass :class:`Function` (``torch.autograd.Function``).

Write the forward computation and its vector-Jacobian product as two static methods; call the
operation with :meth:`Function.apply`. The call records one node of the ordinary graph (the same
:class:`~ignis_autograd._graph.Node` every built-in op records), so a custom Function mixes with
every other op, with :func:`checkpoint`, :func:`capture_step`, ``retain_graph`` and
:func:`gradcheck`.

Example::

    >>> import ignis_autograd as ag
    >>> class Exp(ag.Function):
    ...     @staticmethod
    ...     def forward(ctx, x):
    ...         y = x.exp()                 # runs under no_grad: nothing is recorded here
    ...         ctx.save_for_backward(y)
    ...         return y
    ...     @staticmethod
    ...     def backward(ctx, grad):        # grad: a Tensor of the output's shape
    ...         (y,) = ctx.saved_tensors
    ...         return grad * y             # one gradient (or None) per positional input
    >>> x = ag.Tensor.from_host([0.0, 1.0], dtype="float64", requires_grad=True)
    >>> Exp.apply(x).sum().backward()
    >>> x.grad.to_host()
    array([1.        , 2.71828183])

What each side receives:

* ``forward(ctx, *args, **kwargs)`` gets the arguments exactly as given to ``apply``: Tensors
  stay Tensors (Tensor and NvArray operations both work on them; ``t.data`` is the NvArray),
  NvArrays and other values pass through. It runs with recording off. It returns one Tensor or
  NvArray, or a tuple of them (other values in the tuple pass through); ``apply`` returns new
  Tensors over the same data, recorded when recording is on and a positional input requires grad.
* ``backward(ctx, *grads)`` gets one gradient per output of forward: a Tensor of that output's
  shape and dtype (zeros for an output that received none, or None after
  ``ctx.set_materialize_grads(False)``; always None for a non-tensor output). Gradients are
  Tensors, like forward's inputs and ``ctx.saved_tensors``, so a backward ported from PyTorch
  works unchanged; it runs with recording off. It returns one gradient per *positional* input
  of ``apply``: a Tensor, an NvArray or None (trailing Nones beyond that are ignored).

Checks on what backward returns, as PyTorch makes them (errors name the Function and the index
of the input): the number of gradients; None for an input that is not a Tensor or an NvArray; a
gradient whose shape the input's shape broadcasts to is summed back to the input's shape (any
other shape is an error); the input's device; and the input's dtype (float32 is also accepted
for a float16 or bfloat16 input, as the graph accumulates those in float32; PyTorch would cast
a float64 gradient for a float32 input silently, here it is an error: it is a mistake that
costs a conversion). The gradient for a Tensor input that does not require grad, or for an
NvArray input, is not checked and is dropped. Tensors passed as keyword arguments reach
forward but get no gradient slot (pass differentiable inputs positionally), as in PyTorch.

Several outputs: each differentiable output has a small node of its own that hands its gradient
to the Function's node; that node runs after all of them (the walk's creation order guarantees
it) and calls backward once with every output's gradient.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import Any

from ignis._array._op_table import unbroadcast

import ignis
from ignis import DeviceMismatchError, DTypeError, NvArray, ShapeError

from ._errors import AutogradError
from ._graph import HALF, Node, current_run, state
from .tensor import Tensor, _observe, _plain, connect

__all__ = ["Function", "FunctionCtx", "once_differentiable"]

_F32 = ignis.float32

# What the nodes of a multi-output Function's outputs hand to its main node: the walk needs a
# gradient-shaped object to schedule that node; the main node ignores it and reads the real
# gradients from its shared state. Never read or written by a kernel (so it is CPU-side and
# harmless inside a CUDA graph capture).
_TOKEN = ignis.zeros((), dtype=_F32, device="cpu")


class FunctionCtx:
    """What ``forward`` hands to ``backward``: saved tensors, flags and any attributes you set.

    Attributes:
        needs_input_grad: one bool per positional input of ``apply``: True for a Tensor that
            requires grad (a backward may skip the gradients that are not needed).
        saved_tensors: what :meth:`save_for_backward` saved, as given (Tensors, NvArrays, None).

    Any other attribute may be set in forward and read in backward (``ctx.scale = 2``).
    """

    def __init__(self, fn: type[Function], needs_input_grad: tuple[bool, ...]):
        self.needs_input_grad = needs_input_grad
        self._fn = fn
        self._saved: tuple[Any, ...] = ()
        self._non_differentiable: list[Any] = []
        self._materialize = True

    def save_for_backward(self, *tensors: Any) -> None:
        """Keep ``tensors`` (Tensors, NvArrays or None) for backward, as ``saved_tensors``.

        A second call replaces what the first saved. Saving costs no copy: the arrays are kept
        alive as long as the graph is (freed by a backward without ``retain_graph``).
        """
        for i, t in enumerate(tensors):
            if t is not None and not isinstance(t, (Tensor, NvArray)):
                raise TypeError(
                    f"{self._fn.__name__}: save_for_backward takes Tensors, NvArrays or None; "
                    f"argument {i} is a {type(t).__name__} (set it as an attribute of ctx "
                    "instead)"
                )
        self._saved = tensors

    @property
    def saved_tensors(self) -> tuple[Any, ...]:
        """The values given to :meth:`save_for_backward`, in order (``()`` when none were)."""
        return self._saved

    def mark_non_differentiable(self, *outputs: Any) -> None:
        """Declare outputs of forward (the objects it returns) that get no gradient.

        Those outputs do not require grad; backward still receives a gradient slot for each
        (zeros, or None without materialization). Integer and bool outputs are never
        differentiable and need no marking.
        """
        for i, t in enumerate(outputs):
            if not isinstance(t, (Tensor, NvArray)):
                raise TypeError(
                    f"{self._fn.__name__}: mark_non_differentiable takes outputs of forward "
                    f"(Tensors or NvArrays); argument {i} is a {type(t).__name__}"
                )
        self._non_differentiable.extend(outputs)

    def set_materialize_grads(self, value: bool) -> None:
        """Whether backward gets zeros (True, the default) or None for an output that received
        no gradient (an unused output, or one marked non-differentiable)."""
        self._materialize = bool(value)


class Function:
    """Base class of custom differentiable operations (``torch.autograd.Function``'s meaning).

    Subclass it with two static methods and call ``MyFunction.apply(*args, **kwargs)``:

    * ``forward(ctx, *args, **kwargs)``: compute the outputs (one Tensor or NvArray, or a tuple)
      from the arguments as given; recording is off. Use ``ctx.save_for_backward``,
      ``ctx.needs_input_grad``, ``ctx.mark_non_differentiable``, ``ctx.set_materialize_grads``
      and plain attributes of ``ctx``.
    * ``backward(ctx, *grads)``: one gradient Tensor per output in, one gradient (Tensor,
      NvArray or None) per positional input of ``apply`` out.

    See the module documentation for what each side receives and the checks made on backward's
    results. Decorate backward with :func:`once_differentiable` when it is not itself written
    with differentiable operations.

    Example::

        >>> class Scale(Function):
        ...     @staticmethod
        ...     def forward(ctx, x, k):        # k: a Python number, no gradient slot of its own
        ...         ctx.k = k
        ...         return x * k
        ...     @staticmethod
        ...     def backward(ctx, grad):
        ...         return grad * ctx.k, None
        >>> y = Scale.apply(x, 3.0)
    """

    _backward_name = "FunctionBackward"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # The node's name, as PyTorch names it: errors and repr(tensor.grad_fn) show it.
        cls._backward_name = f"{cls.__name__}Backward"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError(
            f"{type(self).__name__} is not instantiated: call {type(self).__name__}.apply(...) "
            "(forward and backward are static methods)"
        )

    @staticmethod
    def forward(ctx: FunctionCtx, *args: Any, **kwargs: Any) -> Any:
        """Compute the outputs; see the class documentation."""
        raise NotImplementedError(
            f"{ctx._fn.__name__} must define forward(ctx, *args) as a static method"
        )

    @staticmethod
    def backward(ctx: FunctionCtx, *grads: Any) -> Any:
        """Compute the inputs' gradients from the outputs'; see the class documentation."""
        raise NotImplementedError(
            f"{ctx._fn.__name__} must define backward(ctx, *grads) as a static method to be "
            "differentiated"
        )

    @classmethod
    def apply(cls, *args: Any, **kwargs: Any) -> Any:
        """Run ``forward`` on the arguments and record the operation when a gradient is needed.

        Returns what forward returned, with each Tensor or NvArray output as a new Tensor over
        the same data (requiring grad when recorded and differentiable).
        """
        needs = tuple([isinstance(a, Tensor) and a._requires_grad for a in args])
        ctx = FunctionCtx(cls, needs)
        recording = state.grad_enabled
        state.grad_enabled = False
        try:
            raw = cls.forward(ctx, *args, **kwargs)
        finally:
            state.grad_enabled = recording
        if not (recording and True in needs):
            if not recording and state.observers:
                _observe(args)  # a checkpoint's forward learns that its output needs a gradient
            return _unrecorded(raw)
        return _record(cls, ctx, args, raw)


def _unrecorded(raw: Any) -> Any:
    """forward's outputs when nothing is recorded: each Tensor or NvArray as a new Tensor
    outside any graph (as PyTorch, a new object even for a returned input), the rest as is."""
    if isinstance(raw, tuple):
        return tuple([_outside(o) for o in raw])
    return _outside(raw)


def _outside(o: Any) -> Any:
    if isinstance(o, Tensor):
        return _plain(o.data)
    return _plain(o) if isinstance(o, NvArray) else o


class _State:
    """What a recorded Function's nodes share: the ctx and what the checks and zeros need."""

    __slots__ = ("fn", "ctx", "outputs", "inputs", "run", "pending", "saved_outputs")

    def __init__(self, fn: type[Function], ctx: FunctionCtx, outputs: list[Any], inputs: list):
        self.fn = fn
        self.ctx = ctx
        # per output of forward: (shape, dtype, device) of a tensor output, None for another value
        self.outputs = outputs
        # per positional input: (shape, dtype, device) when it wants a gradient, True for
        # another Tensor or NvArray (a gradient is dropped), False for a non-tensor value
        self.inputs = inputs
        # multi-output Functions: the walk the gradients below belong to, and those gradients
        self.run: Any = None
        self.pending: list[Any] | None = None
        # (position in saved_tensors, weak reference to the node of the output saved there):
        # a recorded backward pass sees those outputs on the graph (weak: no reference cycle)
        self.saved_outputs: list[tuple[int, Any]] = []


def _meta(x: NvArray) -> tuple[Any, Any, Any]:
    return (x.shape, x.dtype, x.device)


def _record(cls: type[Function], ctx: FunctionCtx, args: tuple[Any, ...], raw: Any) -> Any:
    name = cls._backward_name
    edges = connect(args)
    inputs: list[Any] = []
    for a, e in zip(args, edges, strict=True):
        if e is not None:
            inputs.append(_meta(a.data))
        else:
            inputs.append(isinstance(a, (Tensor, NvArray)))
    single = not isinstance(raw, tuple)
    outs = (raw,) if single else raw
    marked = {id(t) for t in ctx._non_differentiable}
    found: set[int] = set()
    wrapped: list[Any] = []
    metas: list[Any] = []
    diff: list[int] = []
    for k, o in enumerate(outs):
        if isinstance(o, Tensor):
            data = o.data
        elif isinstance(o, NvArray):
            data = o
        else:
            wrapped.append(o)
            metas.append(None)
            continue
        # A new Tensor even when forward returns one of its inputs: the graph hangs off it.
        wrapped.append(_plain(data))
        metas.append(_meta(data))
        if id(o) in marked:
            found.add(id(o))
        elif data.dtype.kind == "f":
            diff.append(k)
    if len(found) != len(marked):
        raise ValueError(
            f"{cls.__name__}: mark_non_differentiable was given a value that forward did not "
            "return; mark the output objects themselves"
        )
    shared = _State(cls, ctx, metas, inputs)
    if len(diff) == 1:
        k = diff[0]
        t = wrapped[k]
        t.grad_fn = Node(name, _single_vjp, (shared, k), edges, t.data, fresh=False)
        t._requires_grad = True
    elif diff:
        # Created first, so every output node is newer and reaches the walk before it.
        main = Node(name, _main_vjp, (shared,), edges, _TOKEN, fresh=False)
        to_main = (main,)
        for k in diff:
            t = wrapped[k]
            t.grad_fn = Node(name, _output_vjp, (shared, k), to_main, t.data, fresh=False)
            t._requires_grad = True
    position = {id(o): k for k, o in enumerate(outs) if k in diff}
    for i, saved in enumerate(ctx._saved):
        k = position.get(id(saved))
        if k is not None:
            shared.saved_outputs.append((i, weakref.ref(wrapped[k].grad_fn)))
    return wrapped[0] if single else tuple(wrapped)


# --- backward ------------------------------------------------------------------------------


def _single_vjp(g: NvArray, need: tuple[bool, ...], shared: _State, k: int) -> tuple[Any, ...]:
    grads: list[Any] = [None] * len(shared.outputs)
    grads[k] = g
    return _call_backward(shared, grads)


def _output_vjp(g: NvArray, need: tuple[bool, ...], shared: _State, k: int) -> tuple[Any, ...]:
    # One output's gradient, kept for the main node; the first output of this walk schedules it.
    run = current_run()
    first = shared.run is not run
    if first:  # (also drops what a walk that failed half-way left)
        shared.run = run
        shared.pending = [None] * len(shared.outputs)
    shared.pending[k] = g
    return (_TOKEN,) if first else (None,)


def _main_vjp(g: Any, need: tuple[bool, ...], shared: _State) -> tuple[Any, ...]:
    grads = shared.pending if shared.run is current_run() else None
    shared.run = shared.pending = None
    return _call_backward(shared, grads or [None] * len(shared.outputs))


def _call_backward(shared: _State, grads: list[Any]) -> tuple[Any, ...]:
    """Run the user's backward on the outputs' gradients; its results, checked, per input."""
    ctx = shared.ctx
    materialize = ctx._materialize
    for k, meta in enumerate(shared.outputs):
        g = grads[k]
        if g is not None:
            # (a Tensor already when the backward pass is recorded: it carries its graph)
            grads[k] = g if isinstance(g, Tensor) else _plain(g)
        elif materialize and meta is not None:
            shape, dtype, device = meta
            grads[k] = _plain(ignis.zeros(shape, dtype=dtype, device=device))
    run = current_run()
    keep = run is not None and run.create_graph
    if not (keep and shared.saved_outputs):
        return _check(shared.fn, shared.inputs, shared.fn.backward(ctx, *grads), keep)
    # A recorded pass: the outputs forward saved are seen as the outputs themselves, so that
    # the backward's dependence on them is recorded too.
    saved = ctx._saved
    linked = list(saved)
    for i, ref in shared.saved_outputs:
        node = ref()
        if node is not None:
            data = saved[i].data if isinstance(saved[i], Tensor) else saved[i]
            linked[i] = _on_node(data, node)
    ctx._saved = tuple(linked)
    try:
        return _check(shared.fn, shared.inputs, shared.fn.backward(ctx, *grads), keep)
    finally:
        ctx._saved = saved


def _on_node(data: NvArray, node: Node) -> Tensor:
    """A Tensor over ``data`` whose gradient flows into ``node``."""
    t = _plain(data)
    t.grad_fn = node
    t._requires_grad = True
    return t


def _is_expandable(shape: tuple[int, ...], to: tuple[int, ...]) -> bool:
    """True when ``shape`` broadcasts to ``to`` (so a gradient of shape ``to`` sums back)."""
    if len(shape) > len(to):
        return False
    return all(s == t or s == 1 for s, t in zip(reversed(shape), reversed(to), strict=False))


def _check(
    fn: type[Function], inputs: list[Any], results: Any, keep_tensors: bool = False
) -> tuple[Any, ...]:
    """backward's results as the walk takes them: one NvArray or None per input, checked
    (Tensors kept as they are when the backward pass is recorded, ``keep_tensors``)."""
    name = fn._backward_name
    if not isinstance(results, tuple):
        results = (results,)
    n = len(inputs)
    if len(results) > n and all(r is None for r in results[n:]):
        results = results[:n]
    if len(results) != n:
        raise AutogradError(
            f"function {name} returned an incorrect number of gradients (expected {n}, got "
            f"{len(results)}): {fn.__name__}.backward returns one gradient or None per "
            f"positional input of {fn.__name__}.apply"
        )
    out: list[Any] = []
    for i, (r, meta) in enumerate(zip(results, inputs, strict=True)):
        if meta is False:
            if r is not None:
                raise AutogradError(
                    f"function {name} returned a gradient different than None at index {i}, "
                    f"but input {i} of {fn.__name__}.apply is not a Tensor or an NvArray"
                )
            out.append(None)
            continue
        if meta is True or r is None:  # no gradient wanted for that input, or none given
            out.append(None)
            continue
        if isinstance(r, Tensor):
            if not keep_tensors:
                r = r.data
        elif not isinstance(r, NvArray):
            raise TypeError(
                f"function {name} returned an invalid gradient at index {i} - expected a "
                f"Tensor, an NvArray or None, got {type(r).__name__}"
            )
        shape, dtype, device = meta
        if r.device != device:
            raise DeviceMismatchError(
                f"function {name} returned an invalid gradient at index {i} - expected device "
                f"{device} (that of input {i}) but got {r.device}"
            )
        rd = r.dtype
        if rd is not dtype and not (rd is _F32 and dtype in HALF):
            also = " or float32" if dtype in HALF else ""
            raise DTypeError(
                f"function {name} returned an invalid gradient at index {i} - expected dtype "
                f"{dtype.name}{also} (that of input {i}) but got {rd.name}"
            )
        if r.shape != shape:
            if not _is_expandable(shape, r.shape):
                raise ShapeError(
                    f"function {name} returned an invalid gradient at index {i} - got shape "
                    f"{r.shape} but expected shape compatible with {shape} (the shape of input "
                    f"{i}, or a shape it broadcasts to)"
                )
            r = unbroadcast(r, shape)
        out.append(r)
    return tuple(out)


# --- once_differentiable -------------------------------------------------------------------


def once_differentiable(backward: Callable[..., Any]) -> Callable[..., Any]:
    """Mark a Function's backward as not differentiable itself (decorate the static method).

    The backward runs with recording off. When a backward pass is itself recorded
    (``create_graph=True``) and the incoming gradients or the saved tensors require grad, its
    results are recorded as an operation whose own backward raises :class:`AutogradError`
    naming the Function: differentiating them a second time fails loudly instead of giving a
    silently wrong (missing) contribution. An ordinary backward pass is not affected.

    Example::

        >>> class Clamp(Function):
        ...     @staticmethod
        ...     def forward(ctx, x):
        ...         ctx.save_for_backward(x)
        ...         return x.clip(0.0, 1.0)
        ...     @staticmethod
        ...     @once_differentiable
        ...     def backward(ctx, grad):
        ...         (x,) = ctx.saved_tensors
        ...         return ignis.where((x.data >= 0) & (x.data <= 1), grad.data, 0.0)
    """

    @functools.wraps(backward)
    def wrapper(ctx: FunctionCtx, *grads: Any) -> Any:
        recording = state.grad_enabled
        state.grad_enabled = False
        try:
            results = backward(ctx, *grads)
        finally:
            state.grad_enabled = recording
        if not recording:
            return results  # the backward pass is not being recorded: nothing to guard
        # The results depend on the incoming gradients and on what forward saved (unlike
        # PyTorch, which looks at the gradients only and so lets a dependence on the saved
        # inputs drop silently).
        edges = connect(grads + tuple(getattr(ctx, "_saved", ())))
        if edges is None:
            return results
        fn = getattr(ctx, "_fn", None)
        label = fn.__name__ if fn is not None else getattr(backward, "__qualname__", "backward")
        if not isinstance(results, tuple):
            return _refusing(results, label, edges)
        return tuple([_refusing(r, label, edges) for r in results])

    wrapper.once_differentiable = True  # type: ignore[attr-defined]
    return wrapper


def _refusing(r: Any, label: str, edges: tuple[Any, ...]) -> Any:
    """``r`` as a Tensor whose differentiation raises (None and non-arrays as they are)."""
    if isinstance(r, Tensor):
        data = r.data
    elif isinstance(r, NvArray):
        data = r
    else:
        return r
    if data.dtype.kind != "f":
        return r
    t = _plain(data)
    t.grad_fn = Node(
        f"{label}Backward (once_differentiable)", _refuse_vjp, (label,), edges, data, fresh=False
    )
    t._requires_grad = True
    return t


def _refuse_vjp(g: Any, need: tuple[bool, ...], label: str) -> tuple[Any, ...]:
    raise AutogradError(
        f"{label}: trying to differentiate twice an op whose backward is once differentiable "
        "(a Function's backward marked @once_differentiable, or a Tape.record backward_fn); "
        "write its backward with differentiable Tensor operations (a Function without the "
        "decorator) to take higher-order gradients through it"
    )
