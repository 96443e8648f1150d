"""Tensor: an NvArray that remembers how it was computed, for reverse-mode differentiation.

Example::

    >>> from ignis_autograd import Tensor
    >>> x = Tensor.from_host([1.0, 2.0, 3.0], shape=[3], requires_grad=True)
    >>> (x * x).sum().backward()
    >>> x.grad.to_host()
    array([2., 4., 6.], dtype=float32)

Operators broadcast like NumPy and accept Python scalars and NvArrays (constants) on either side.
Each differentiable op computes its value with NvArray operations and, when recording is on and
an input requires a gradient, hangs a graph node off the result (see :mod:`._graph`); its
derivative is the op's entry in the rules table (:mod:`._rules`).
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np
from ignis._array import _indexing, _ops
from ignis._codegen import Source

import ignis
from ignis import DeviceMismatchError, DTypeError, NvArray, ShapeError

from . import _graph, _rules
from ._errors import AutogradError
from ._graph import Node, run_backward, state
from ._rules import RULES, shape_of

__all__ = ["Tensor", "apply", "connect", "needs_grad", "as_data"]


def as_data(x: Any) -> Any:
    """The NvArray (or scalar) behind an operand: a Tensor's ``data``, anything else as is."""
    return x.data if isinstance(x, Tensor) else x


def needs_grad(*inputs: Any) -> bool:
    """True when recording is on and some input is a Tensor that requires a gradient."""
    if not state.grad_enabled:
        return False
    for x in inputs:
        if isinstance(x, Tensor) and x._requires_grad:
            return True
    return False


def _observe(inputs: tuple[Any, ...]) -> None:
    # A checkpoint's forward runs under no_grad; it still has to learn whether its output will
    # need a gradient, including through tensors the function captured.
    for x in inputs:
        if isinstance(x, Tensor) and x._requires_grad:
            for obs in state.observers:
                obs.saw_grad = True
            return


def connect(inputs: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """The graph edges of an op's inputs (see :class:`Node`), or None when no input requires
    a gradient."""
    edges = None
    for i, x in enumerate(inputs):
        if isinstance(x, Tensor) and x._requires_grad:
            if edges is None:
                edges = [None] * len(inputs)
            edges[i] = x.grad_fn or x
    return None if edges is None else tuple(edges)


def apply(name: str, out: NvArray, inputs: tuple[Any, ...], ctx: tuple[Any, ...]) -> Tensor:
    """Wrap ``out`` (the op's value) as a Tensor and record the op ``name`` when needed.

    ``inputs`` are the op's operands (Tensors or constants), ``ctx`` what its rule needs.
    """
    t = Tensor.__new__(Tensor)
    t.data = out
    t.grad = None
    t.grad_fn = None
    t._requires_grad = False
    if state.grad_enabled:
        edges = connect(inputs)
        if edges is not None:
            if out._dtype.kind == "c":
                _refuse_complex(name, out)
            r = RULES[name]
            t.grad_fn = Node(name, r.vjp, ctx, edges, out, r.fresh)
            t._requires_grad = True
    elif state.observers:
        _observe(inputs)
    return t


def start_gradient(
    data: NvArray, grad_output: Any, op: str, what: str, of: str
) -> tuple[NvArray, bool]:
    """The gradient a backward pass of the output ``data`` starts from, and whether it is a new
    buffer: ``grad_output`` (NvArray, Tensor or host data; named ``what`` in errors, the output
    ``of``) checked and in ``data``'s dtype, or ones for a single-element output."""
    if grad_output is None:
        if data.numel != 1:
            raise ShapeError(
                f"{op}: {what} is required for an output of shape {data.shape}; only a tensor "
                "with a single element gets the implicit gradient 1"
            )
        return ignis.ones(data.shape, dtype=data.dtype, device=data.device), True
    g = as_data(grad_output)
    if not isinstance(g, NvArray):
        g = NvArray.from_host(g, dtype=data.dtype, device=data.device)
    if g.shape != data.shape:
        raise ShapeError(
            f"{op}: {what} has shape {g.shape}, expected {data.shape} (the shape of {of})"
        )
    if g.device != data.device:
        raise DeviceMismatchError(f"{op}: {what} is on {g.device} but {of} is on {data.device}")
    if g.dtype != data.dtype:
        return g.astype(data.dtype), True
    return g, False


def _refuse_complex(name: str, out: NvArray) -> None:
    raise DTypeError(
        f"{name}: the result is {out.dtype.name}, and autograd does not differentiate complex "
        "values; compute on the real and imaginary parts (ignis.real, ignis.imag) as real "
        "tensors, or detach() first"
    )


def _plain(data: NvArray) -> Tensor:
    """A Tensor that is not part of any graph (comparisons, integer results)."""
    t = Tensor.__new__(Tensor)
    t.data = data
    t.grad = None
    t.grad_fn = None
    t._requires_grad = False
    return t


def _keep_shape(shape: tuple[int, ...], axis: Any) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(reduced axes, shape with those axes kept as 1), for an axis the reduction accepted."""
    nd = len(shape)
    if axis is None:
        axes = tuple(range(nd))
    elif isinstance(axis, (tuple, list)):
        axes = tuple(sorted(operator.index(a) % nd for a in axis))
    else:
        axes = (operator.index(axis) % nd,)
    # A list, not a generator: this keeps CPython's tuple free lists out of the memory-growth tests.
    return axes, tuple([1 if i in axes else d for i, d in enumerate(shape)])


def _check_float(dtype: Any, op: str) -> None:
    if dtype.kind != "f":
        raise DTypeError(
            f"{op}: only floating tensors (float16, bfloat16, float32, float64) can require "
            f"gradients, got {dtype.name}"
        )


class Tensor:
    """A differentiable tensor over an :class:`ignis.NvArray`.

    Args:
        data: the values (an NvArray; use :meth:`from_host` for host data).
        requires_grad: accumulate gradients into :attr:`grad` (floating dtypes only).

    Attributes:
        data: the NvArray. grad: the accumulated gradient (an NvArray, float32 for float16 and
        bfloat16 tensors) or None. grad_fn: the graph node that produced this tensor (None for
        a leaf). requires_grad, is_leaf, shape, dtype, device, device_id, ndim.
    """

    __slots__ = ("data", "grad", "grad_fn", "_requires_grad", "__weakref__")

    __array_ufunc__ = None  # NumPy scalars on the left defer to our reflected operators
    __array_priority__ = 1000

    def __init__(self, data: NvArray, requires_grad: bool = False):
        if isinstance(data, Tensor):
            data = data.data
        if not isinstance(data, NvArray):
            raise TypeError(
                f"Tensor: data must be an NvArray, got {type(data).__name__}; use "
                "Tensor.from_host(values) for host data"
            )
        self.data = data
        self.grad: NvArray | None = None
        self.grad_fn: _graph.Node | None = None
        self._requires_grad = False
        if requires_grad:
            _check_float(data.dtype, "Tensor")
            self._requires_grad = True

    # --- constructors --------------------------------------------------------------------------

    @classmethod
    def from_host(
        cls,
        values: Any,
        shape: Any = None,
        dtype: Any = "float32",
        device: Any = None,
        requires_grad: bool = False,
    ) -> Tensor:
        """A tensor holding a copy of host data (lists, NumPy arrays, scalars).

        Example: ``Tensor.from_host([[1, 2], [3, 4]], dtype="float64", requires_grad=True)``.
        """
        return cls(
            NvArray.from_host(values, shape=shape, dtype=dtype, device=device), requires_grad
        )

    @classmethod
    def from_nv_array(cls, nv: NvArray, requires_grad: bool = False) -> Tensor:
        """A tensor over ``nv`` (no copy)."""
        return cls(nv, requires_grad)

    @classmethod
    def zeros(
        cls, shape: Any, dtype: Any = "float32", device: Any = None, requires_grad: bool = False
    ) -> Tensor:
        """A tensor of zeros."""
        return cls(ignis.zeros(shape, dtype=dtype, device=device), requires_grad)

    @classmethod
    def ones(
        cls, shape: Any, dtype: Any = "float32", device: Any = None, requires_grad: bool = False
    ) -> Tensor:
        """A tensor of ones."""
        return cls(ignis.ones(shape, dtype=dtype, device=device), requires_grad)

    @classmethod
    def full(
        cls,
        shape: Any,
        fill_value: Any,
        dtype: Any = "float32",
        device: Any = None,
        requires_grad: bool = False,
    ) -> Tensor:
        """A tensor with every element ``fill_value``."""
        return cls(ignis.full(shape, fill_value, dtype=dtype, device=device), requires_grad)

    @classmethod
    def rand(
        cls,
        shape: Any,
        dtype: Any = "float32",
        device: Any = None,
        requires_grad: bool = False,
        generator: Any = None,
    ) -> Tensor:
        """Uniform values in [0, 1) from ``generator`` (default: ``ignis.random``'s stream)."""
        src = generator if generator is not None else ignis.random
        return cls(src.rand(_shape_arg(shape), dtype=dtype, device=device), requires_grad)

    @classmethod
    def randn(
        cls,
        shape: Any,
        dtype: Any = "float32",
        device: Any = None,
        requires_grad: bool = False,
        generator: Any = None,
    ) -> Tensor:
        """Standard normal values from ``generator`` (default: ``ignis.random``'s stream)."""
        src = generator if generator is not None else ignis.random
        return cls(src.randn(_shape_arg(shape), dtype=dtype, device=device), requires_grad)

    # --- attributes ----------------------------------------------------------------------------

    @property
    def requires_grad(self) -> bool:
        """Whether gradients flow to (leaf) or through (non-leaf) this tensor."""
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        if self.grad_fn is not None:
            raise AutogradError(
                f"requires_grad can only be changed on a leaf tensor; this one was computed by "
                f"'{self.grad_fn.name}' (use detach() for a leaf copy)"
            )
        if value:
            _check_float(self.data.dtype, "requires_grad")
        self._requires_grad = bool(value)

    def requires_grad_(self, value: bool = True) -> Tensor:
        """Set :attr:`requires_grad` in place; returns self."""
        self.requires_grad = value
        return self

    @property
    def is_leaf(self) -> bool:
        """True when no recorded op produced this tensor (``grad_fn is None``)."""
        return self.grad_fn is None

    @property
    def shape(self) -> tuple[int, ...]:
        return self.data.shape

    @property
    def dtype(self) -> Any:
        return self.data.dtype

    @property
    def device(self) -> Any:
        """``"cpu"`` or ``"cuda:N"``."""
        return self.data.device

    @property
    def device_id(self) -> int | None:
        """The CUDA ordinal, or None on the CPU."""
        return self.data.device.index

    @property
    def ndim(self) -> int:
        return self.data.ndim

    def numel(self) -> int:
        """Number of elements."""
        return self.data.numel

    def item(self) -> Any:
        """The single element as a Python scalar."""
        return self.data.item()

    def to_host(self) -> np.ndarray:
        """A NumPy copy of the values."""
        return self.data.to_host()

    def numpy(self) -> np.ndarray:
        """A NumPy copy of the values (same as :meth:`to_host`)."""
        return self.data.to_host()

    def tolist(self) -> Any:
        return self.data.tolist()

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        host = self.data.to_host()
        return host if dtype is None else host.astype(dtype)

    def clone(self) -> Tensor:
        """A copy of the values in a new buffer (differentiable: the gradient passes through)."""
        return apply("clone", self.data.clone(), (self,), ())

    def detach(self) -> Tensor:
        """A tensor sharing this one's data, outside any graph (requires_grad False)."""
        return _plain(self.data)

    def zero_grad(self) -> None:
        """Forget the accumulated gradient (``grad`` becomes None)."""
        self.grad = None

    def register_post_accumulate_grad_hook(self, hook: Any) -> Any:
        """Call ``hook(self)`` each ``backward()``, once this leaf's gradient has received its
        last contribution (PyTorch's method); returns a handle whose ``remove()`` unregisters
        it. See :mod:`ignis_autograd._hooks`."""
        from . import _hooks

        return _hooks.register(self, hook)

    def backward(
        self,
        grad_output: Any = None,
        retain_graph: bool | None = None,
        create_graph: bool = False,
    ) -> None:
        """Accumulate d(self)/d(leaf) into the ``grad`` of every leaf that requires it.

        Args:
            grad_output: the gradient of some scalar with respect to this tensor (NvArray,
                Tensor or host data, of this tensor's shape); may be omitted for one element.
            retain_graph: keep the graph, to call backward through it again (default:
                ``create_graph``).
            create_graph: record the backward pass itself, so that the gradients can be
                differentiated again (higher-order gradients): each leaf's ``grad`` is then a
                Tensor with its own graph, as in PyTorch. See :func:`ignis_autograd.grad`.

        Example::

            >>> x = Tensor.from_host([1.0, 2.0], dtype="float64", requires_grad=True)
            >>> (x ** 3).sum().backward(create_graph=True)   # x.grad = 3 x^2, a Tensor
            >>> g = x.grad
            >>> x.grad = None
            >>> g.sum().backward()                            # x.grad = 6 x
            >>> x.grad.to_host()
            array([ 6., 12.])

        Raises:
            ShapeError: for a non-scalar without ``grad_output`` or a mis-shaped one.
            GraphFreedError: when an earlier backward freed part of the graph.
        """
        if not self._requires_grad:
            raise AutogradError(
                "backward: this tensor does not require grad (no input of its computation "
                "requires grad, or it was computed under no_grad)"
            )
        g, owned = start_gradient(self.data, grad_output, "backward", "grad_output", "the tensor")
        if create_graph:
            from ._higher import backward_graph

            given = grad_output if isinstance(grad_output, Tensor) and g is grad_output.data else g
            backward_graph(self, given, True if retain_graph is None else retain_graph)
            return
        run_backward(self, g, owned, bool(retain_graph))

    def __repr__(self) -> str:
        body = repr(self.data)
        body = body[len("NvArray(") : -1] if body.startswith("NvArray(") else body
        extra = ""
        if self.grad_fn is not None:
            extra = f", grad_fn={self.grad_fn!r}"
        elif self._requires_grad:
            extra = ", requires_grad=True"
        return f"Tensor({body}{extra})"

    def __len__(self) -> int:
        return len(self.data)

    def __float__(self) -> float:
        return float(self.data)

    def __bool__(self) -> bool:
        return bool(self.data)

    __hash__ = object.__hash__  # identity, so tensors can key dicts (== is elementwise)

    # --- operators ---------------------------------------------------------------------------
    # The element-wise operators and methods (``+``, ``x.exp()``, ``x.maximum(y)``, ...) come
    # from ignis' op table (see _make_op_functions at the end of this module).

    def __matmul__(self, other: Any) -> Tensor:
        return matmul(self, other)

    def __rmatmul__(self, other: Any) -> Tensor:
        return matmul(other, self)

    # --- elementwise functions -----------------------------------------------------------------

    def clip(self, min: Any = None, max: Any = None) -> Tensor:  # noqa: A002
        """Values limited to ``[min, max]`` (either may be None; Tensor bounds get gradients)."""
        if isinstance(min, Tensor) or isinstance(max, Tensor):
            out = self
            if min is not None:
                out = OP_FUNCTIONS["maximum"](out, min)
            if max is not None:
                out = OP_FUNCTIONS["minimum"](out, max)
            return out
        lo, hi = as_data(min), as_data(max)
        return apply("clip", ignis.clip(self.data, lo, hi), (self,), (self.data, lo, hi))

    # --- reductions ----------------------------------------------------------------------------
    # The reductions and softmaxes (``t.sum()``, ``t.var(ddof=1)``, ``t.softmax()``, ...) come
    # from ignis' reduction table (see _make_reduction_functions at the end of this module).

    # --- linear algebra ------------------------------------------------------------------------

    def matmul(self, other: Any) -> Tensor:
        return matmul(self, other)

    def add_bias(self, bias: Any) -> Tensor:
        """``self + bias`` for a 1-D ``bias`` matching the last dimension (a row bias)."""
        b = as_data(bias)
        x = self.data
        if not isinstance(b, NvArray) or b.ndim != 1 or x.ndim < 1 or b.shape[0] != x.shape[-1]:
            got = b.shape if isinstance(b, NvArray) else type(b).__name__
            want = (
                f"({x.shape[-1]},)" if x.ndim else "a 1-D bias on an array of at least 1 dimension"
            )
            raise ShapeError(
                f"add_bias: bias of shape {got} does not fit x of shape {x.shape} (expected {want})"
            )
        return apply("add_bias", x + b, (self, bias), (tuple(range(x.ndim - 1)),))

    # --- shape ---------------------------------------------------------------------------------

    def reshape(self, *shape: Any) -> Tensor:
        """The same elements with a new shape (one dimension may be -1)."""
        x = self.data
        return apply("reshape", x.reshape(*shape), (self,), (x.shape,))

    def flatten(self) -> Tensor:
        return self.reshape(-1)

    def squeeze(self, axis: Any = None) -> Tensor:
        x = self.data
        return apply("reshape", x.squeeze(axis), (self,), (x.shape,))

    def unsqueeze(self, axis: int) -> Tensor:
        x = self.data
        return apply("reshape", x.unsqueeze(axis), (self,), (x.shape,))

    def transpose(self, *axes: Any) -> Tensor:
        """Permute the axes (reverse them when none are given)."""
        if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
            axes = tuple(axes[0])
        perm = tuple(axes) if axes else tuple(range(self.ndim - 1, -1, -1))
        return self.permute(*perm)

    def permute(self, *dims: Any) -> Tensor:
        """Reorder the axes to ``dims`` (all of them)."""
        if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
            dims = tuple(dims[0])
        out = self.data.permute(*dims)
        nd = self.ndim
        perm = [operator.index(d) % nd for d in dims]
        inverse = [0] * nd
        for i, p in enumerate(perm):
            inverse[p] = i
        return apply("permute", out, (self,), (tuple(inverse),))

    @property
    def T(self) -> Tensor:
        """All axes reversed."""
        return self.transpose()

    @property
    def mT(self) -> Tensor:
        """The last two axes swapped."""
        if self.ndim < 2:
            raise ShapeError(f"mT: needs at least 2 dimensions, got shape {self.shape}")
        perm = list(range(self.ndim))
        perm[-1], perm[-2] = perm[-2], perm[-1]
        return self.permute(*perm)

    def broadcast_to(self, shape: Any) -> Tensor:
        x = self.data
        return apply("broadcast_to", x.broadcast_to(shape), (self,), (x.shape,))

    def __getitem__(self, key: Any) -> Tensor:
        if isinstance(key, tuple):
            key = tuple(as_data(k) for k in key)
        else:
            key = as_data(key)
        x = self.data
        first = key[0] if isinstance(key, tuple) and key else key
        rest = key[1:] if isinstance(key, tuple) else ()
        if isinstance(first, (list, NvArray)) and not _indexing.is_index_key(rest):
            indices = first if isinstance(first, NvArray) else ignis.asarray(first, device=x.device)
            if indices.ndim and indices.dtype.kind in "iu":
                # an integer index array first, basic indices after it: a gather along axis 0
                # (its rule scatter-adds), then the remaining basic indices as a getitem
                rows = apply("take", ignis.take(x, indices, 0), (self,), (indices, x.shape, 0))
                return rows[(slice(None),) * indices.ndim + rest] if rest else rows
        # (other advanced keys, masks among them, gather here; the rule adds their gradients)
        return apply("getitem", x[key], (self,), (x.shape, key))

    def astype(self, dtype: Any) -> Tensor:
        """A converted copy; the gradient is converted back."""
        out = self.data.astype(dtype)
        if out.dtype.kind != "f":
            return _plain(out)
        return apply("astype", out, (self,), ())

    def to(self, device: Any) -> Tensor:
        """This tensor on ``device`` (differentiable; itself when already there)."""
        x = self.data
        out = x.to(device)
        if out is x:
            return self
        return apply("to", out, (self,), (x.device,))

    def cpu(self) -> Tensor:
        return self.to("cpu")

    # --- neural-network functions (see functional) ---------------------------------------------

    def layer_norm(
        self, normalized_shape: Any = None, weight: Any = None, bias: Any = None, eps: float = 1e-5
    ) -> Tensor:
        from .functional import layer_norm

        return layer_norm(self, normalized_shape, weight, bias, eps)

    def rms_norm(
        self, normalized_shape: Any = None, weight: Any = None, eps: float = 1e-6
    ) -> Tensor:
        from .functional import rms_norm

        return rms_norm(self, normalized_shape, weight, eps)

    def dropout(self, p: float = 0.5, training: bool = True, generator: Any = None) -> Tensor:
        from .functional import dropout

        return dropout(self, p, training, generator)


def _shape_arg(shape: Any) -> tuple[int, ...]:
    if isinstance(shape, (int, np.integer)):
        return (int(shape),)
    return tuple(shape)


# --- binary functions (also the operators) -------------------------------------------------------


def _wants_grad(x: Any) -> bool:
    return isinstance(x, Tensor) and x._requires_grad


def matmul(a: Any, b: Any) -> Tensor:
    """Matrix product with NumPy's rules (batched, broadcast batch dimensions, 1-D operands)."""
    da, db = as_data(a), as_data(b)
    out = ignis.matmul(da, db)
    ctx = (da if _wants_grad(b) else None, db if _wants_grad(a) else None, da.shape, db.shape)
    return apply("matmul", out, (a, b), ctx)


# --- the op table's differentiable functions, Tensor methods and operators -----------------------

# How each name of an op's ``saves`` is computed from the operands ``da``/``db`` (``dx``), the
# result ``out`` and the Tensors ``a``/``b`` (see ignis' op table).
_SAVED_EXPR = {
    "x": "dx",
    "a": "da",
    "b": "db",
    "out": "out",
    "sa": "shape_of(da)",
    "sb": "shape_of(db)",
    "a_if_b": "(da if isinstance(b, Tensor) and b._requires_grad else None)",
    "b_if_a": "(db if isinstance(a, Tensor) and a._requires_grad else None)",
    "out_if_b": "(out if isinstance(b, Tensor) and b._requires_grad else None)",
}


def _tensor(x: Any, op: str) -> Tensor:
    """``x`` as a Tensor (an NvArray becomes a constant one); errors name ``op``."""
    if isinstance(x, Tensor):
        return x
    if isinstance(x, NvArray):
        return Tensor(x)
    raise TypeError(f"{op}: expected a Tensor or an NvArray, got {type(x).__name__}")


def _ctx(op: Any) -> str:
    """The tuple expression of what ``op``'s rule receives."""
    parts = [_SAVED_EXPR[s] for s in op.saves] + list(op.params)
    return "(" + "".join(p + ", " for p in parts) + ")"


def _op_sources(op: Any) -> tuple[Source, dict[str, Source]]:
    """Signature and body of ``ignis_autograd.<name>`` for the table entry ``op``, and of its
    Tensor methods and operators, by name."""
    name = op.name
    if op.arity == 1:
        args = "".join(f", {p}={v!r}" for p, v in op.defaults.items())
        call = "F(dx" + "".join(f", {p}" for p in op.params) + ")"
        if op.grad is None:  # predicates, bitwise ops: results outside any graph
            tail = [f"return _plain({call})"]
        else:
            tail = [f"out = {call}", f"return apply({name!r}, out, (x,), {_ctx(op)})"]
        function = (f"x{args}", [f"x = _tensor(x, {name!r})", "dx = x.data", *tail])
        method = (f"x{args}", ["dx = x.data", *tail])
        methods = {m: method for m in op.methods}
        methods.update({d: ("x", ["dx = x.data", *tail]) for d in op.operators})
        return function, methods
    operands = [
        "da = a.data if isinstance(a, Tensor) else a",
        "db = b.data if isinstance(b, Tensor) else b",
    ]
    if op.grad is None:  # comparisons: bool results outside any graph
        body = [*operands, "return _plain(F(da, db))"]
    else:
        body = [*operands, "out = F(da, db)", f"return apply({name!r}, out, (a, b), {_ctx(op)})"]
    function = ("a, b", body)
    methods = {m: function for m in op.methods}
    for d in op.operators:
        if op.operator_form(d) == "inplace":
            continue  # no in-place Tensor ops: ``t += 1`` rebinds t to ``t + 1``
        if op.grad is None:  # the array's own operator: foreign operands give NotImplemented
            methods[d] = ("a, b", [*operands, f"return _plain(NvArray.{d}(da, db))"])
        else:
            methods[d] = ("b, a" if op.operator_form(d) == "reflected" else "a, b", body)
    return function, methods


def _make_op_functions() -> dict[str, Any]:
    """Add the Tensor methods and operators of every op of ignis' op table; returns the
    functions ``ignis_autograd.<name>`` by name."""
    from ignis._array._op_table import ELEMENTWISE

    functions = {}
    for op in ELEMENTWISE.values():
        (signature, body), methods = _op_sources(op)
        names = {
            "F": getattr(ignis, op.name),
            "Tensor": Tensor,
            "NvArray": NvArray,
            "apply": apply,
            "_plain": _plain,
            "_tensor": _tensor,
            "shape_of": shape_of,
        }
        functions[op.name] = _publish(
            op.name, op.doc, (signature, body), methods, names, f"<ignis_autograd op {op.name}>"
        )
        functions.update(dict.fromkeys(op.aliases, functions[op.name]))
    return functions


def _publish(
    name: str, doc: str, function: Source, methods: dict[str, Source], names: Any, filename: str
) -> Any:
    """``ignis_autograd.<name>`` (returned) and its Tensor methods, from their sources."""
    from ignis._codegen import build_api

    return build_api(name, doc, function, methods, names, filename, "ignis_autograd", Tensor)


# Not among this module's globals (functional exports them): abs would hide the builtin here.
OP_FUNCTIONS = _make_op_functions()


# --- the reduction table's functions and Tensor methods ------------------------------------------


def _reduction_body(op: Any) -> list[str]:
    """The body of the Tensor method for the reduction ``op`` (of ignis' reduction table), whose
    parameters are ``op.signature``'s, ``x`` the Tensor."""
    # the parameters after the array, passed on in their order
    args = "".join(", " + p.split("=")[0].strip() for p in op.signature.split(",")[1:])
    if op.grad is None:  # argmax, argmin: indices outside any graph
        return [f"return _plain(F(x.data{args}))"]
    name = op.name
    ddof = "ddof" if op.ddof else "0"
    # correction is the Array API's name of ddof: one value for the forward and the context
    prefix = [
        "if correction is not None:",
        f"    ddof, correction = _correction({name!r}, ddof, correction), None",
    ] if op.ddof else []
    return [
        *prefix,
        "dx = x.data",
        f"out = F(dx{args})",
        "if not needs_grad(x):",
        f"    return apply({name!r}, out, (x,), ())",
        # The context only when a gradient is wanted: what the rule needs, from the op's table
        # entry, on the reduced axes as the reduction normalized them.
        "axes, keep = _keep_shape(dx._shape, axis)",
        f"return apply({name!r}, out, (x,), SAVES(dx, out, axes, keep, {ddof}))",
    ]


def _make_reduction_functions() -> dict[str, Any]:
    """Add the Tensor method of every reduction of ignis' reduction table; returns the
    functions ``ignis_autograd.<name>`` by name (``ignis_autograd.sum(x)`` is ``x.sum()`` for a
    Tensor or an NvArray ``x``)."""
    from ignis._array._reduction_table import REDUCTIONS

    functions = {}
    for op in REDUCTIONS.values():
        names = {
            "F": getattr(ignis, op.name),
            "SAVES": op.saves,
            "apply": apply,
            "needs_grad": needs_grad,
            "_keep_shape": _keep_shape,
            "_plain": _plain,
            "_tensor": _tensor,
            "_correction": _ops._correction,
        }
        body = _reduction_body(op)
        function = (op.signature, [f"x = _tensor(x, {op.name!r})", *body])
        functions[op.name] = _publish(
            op.name, op.doc, function, {op.name: (op.signature, body)}, names,
            f"<ignis_autograd reduction {op.name}>",
        )
    return functions


# Not among this module's globals: sum, max and min would hide the builtins here.
REDUCTION_FUNCTIONS = _make_reduction_functions()


# What the derivative rules record with when a backward pass is itself recorded.
_rules._apply = apply
_rules._matmul = matmul
