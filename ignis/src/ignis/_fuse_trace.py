"""The tracing half of :func:`ignis.fuse`: a function run on stand-in values records its ops.

A :class:`Traced` value stands for one array (or scalar argument) of a fused function. The
function's ops reach the trace two ways: the Traced operators and methods call the ``ignis``
functions, and those functions hand any operand that has ``__ignis_fuse__`` to it (one hook in
``_array/_ops.py`` per kind of op: unary, binary, ``where``, reductions, and the check of
functions that take arrays only, which refuses). Each recorded op gets its shape and dtypes from
the same rules the real op applies (``_semantics``), so a trace knows every intermediate's dtype
and the dtype each op computes in, exactly as the unfused ops would.

Values of a trace (:class:`Node`):

* ``input``: an array argument (its dtype and shape);
* ``scalar``: a Python number argument: a kernel parameter, *weak* in promotion as Python
  scalars are for the ops (``weak`` is its Python type; ``value`` the one traced with);
* ``const``: a number written in the function (weak if a Python number, strong if NumPy's);
* ``op``: an element-wise op of the op table; ``where``; ``astype``; ``reduce`` (sum, mean,
  max, min: only the last op).

Two weak values combined stay weak and follow Python's arithmetic (``2 * s`` is computed in
double or 64-bit integers), as they would unfused, where it is Python that computes them.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import _dtypes as dt
from ._array import _semantics as sem
from ._array._op_table import ELEMENTWISE
from ._errors import DTypeError, ShapeError

__all__ = ["Node", "Trace", "Traced", "REDUCTIONS", "FUSABLE"]

#: The reductions a fused function may end with.
REDUCTIONS = ("sum", "mean", "max", "min")
FUSABLE = (
    "the element-wise ops of ignis.elementwise_ops, where, astype and one trailing reduction "
    "(sum, mean, max, min)"
)
_WEAK_ORDER = (bool, int, float)
# Python's operators of the ops a weak pair may meet (two Python numbers combine in Python
# unfused); comparison results are bool, true division float.
_PY = {
    "add": operator.add,
    "subtract": operator.sub,
    "multiply": operator.mul,
    "divide": operator.truediv,
    "floor_divide": operator.floordiv,
    "remainder": operator.mod,
    "power": operator.pow,
    "equal": operator.eq,
    "not_equal": operator.ne,
    "less": operator.lt,
    "less_equal": operator.le,
    "greater": operator.gt,
    "greater_equal": operator.ge,
    "bitwise_and": operator.and_,
    "bitwise_or": operator.or_,
    "bitwise_xor": operator.xor,
    "maximum": max,
    "minimum": min,
}


@dataclass
class Node:
    """One value of a trace (module notes)."""

    kind: str
    op: str = ""
    args: tuple[int, ...] = ()
    params: dict[str, Any] = field(default_factory=dict)
    dtype: dt.DType | None = None  # None for weak values
    shape: tuple[int, ...] = ()
    compute: dt.DType | None = None  # the dtype an op computes in (a reduction: accumulates in)
    weak: type | None = None  # bool/int/float for weak values
    value: Any = None  # consts: the value; weak values: the one traced with
    position: int = -1  # inputs and scalars: the argument's position


class _Strong:
    """What the rules see of a strong operand: a dtype and a shape (NumPy scalars: shape ())."""

    __slots__ = ("dtype", "shape")

    def __init__(self, dtype: dt.DType, shape: tuple[int, ...]):
        self.dtype = dtype
        self.shape = shape


class Trace:
    """The ops one call of a fused function recorded; ``label`` names it in errors."""

    def __init__(self, label: str):
        self.label = label
        self.nodes: list[Node] = []
        self._consts: dict[Any, int] = {}

    # --- building -----------------------------------------------------------------------------

    def add(self, node: Node) -> Traced:
        self.nodes.append(node)
        return Traced(self, len(self.nodes) - 1)

    def input(self, position: int, dtype: dt.DType, shape: tuple[int, ...]) -> Traced:
        if dtype.kind == "c":
            raise DTypeError(f"{self.label}: argument {position} is {dtype.name}; complex "
                             "arrays are not fused")  # fmt: skip
        return self.add(Node("input", dtype=dtype, shape=tuple(shape), position=position))

    def scalar(self, position: int, value: Any) -> Traced:
        """A Python number argument (weak), or a NumPy scalar one (strong, shape ())."""
        if isinstance(value, np.generic):
            d = dt.as_dtype(value.dtype, self.label)
            if d.kind == "c":
                raise DTypeError(f"{self.label}: argument {position} is {d.name}; complex "
                                 "values are not fused")  # fmt: skip
            return self.add(Node("scalar", dtype=d, value=value.item(), position=position))
        return self.add(Node("scalar", weak=type(value), value=value, position=position))

    def _const(self, value: Any, op: str) -> int:
        if isinstance(value, np.ndarray) and value.ndim == 0:
            value = value[()]
        if isinstance(value, np.generic):
            d = dt.as_dtype(value.dtype, op)
            key: Any = (d.name, value.item())
            node = Node("const", dtype=d, value=value.item())
        elif type(value) in _WEAK_ORDER:
            key = (type(value), value)
            node = Node("const", weak=type(value), value=value)
        else:
            what = type(value).__name__
            hint = (
                "pass it as an argument of the fused function"
                if hasattr(value, "shape")
                else "fused functions take NvArrays and Python/NumPy real numbers"
            )
            raise TypeError(f"{self.label}: {op} got a {what} the trace does not know; {hint}")
        if (node.dtype is not None and node.dtype.kind == "c") or node.weak is complex:
            raise DTypeError(f"{self.label}: {op}: complex values are not fused")
        # (NaN keys: a NaN constant is never found again, and is simply added once more)
        index = self._consts.get(key)
        if index is None:
            self.nodes.append(node)
            index = self._consts[key] = len(self.nodes) - 1
        return index

    def _index(self, x: Any, op: str) -> int:
        if isinstance(x, Traced):
            if x._trace is not self:
                raise ValueError(f"{self.label}: {op} got a value of another fused trace")
            return x._index
        if hasattr(x, "__ignis_fuse__"):
            raise TypeError(f"{self.label}: {op} got a value this trace does not know")
        from ._array.array import NvArray

        if isinstance(x, NvArray):
            raise TypeError(
                f"{self.label}: {op} got an NvArray the function did not receive as an argument "
                f"(shape {x.shape}, a global or a closure variable); pass it as an argument of "
                "the fused function"
            )
        return self._const(x, op)

    # --- recording --------------------------------------------------------------------------

    def _rule_operand(self, index: int) -> Any:
        """What ``_semantics`` sees of a node: a Python value (weak) or dtype and shape."""
        n = self.nodes[index]
        if n.weak is not None:
            return n.value
        return _Strong(n.dtype, n.shape)

    def _refuse(self, op: str) -> TypeError:
        return TypeError(f"{self.label}: {op} cannot be fused; a fused function takes {FUSABLE}")

    def record(self, op: str, args: Any, params: Any) -> Traced:
        """The value of ``op`` on ``args`` (the hook of ``_ops``; args None: a function that
        takes arrays only, refused)."""
        if args is None:
            raise self._refuse(op)
        try:
            return self._record(op, args, params)
        except (TypeError, ValueError, OverflowError, ArithmeticError) as exc:
            if str(exc).startswith(self.label):
                raise
            try:
                new = type(exc)(f"{self.label}: {exc}")
            except Exception:  # an exception type of another constructor: as it is
                raise exc from None
            raise new from None

    def _record(self, op: str, args: tuple[Any, ...], params: dict[str, Any]) -> Traced:
        index = tuple(self._index(a, op) for a in args)
        for i in index:
            if self.nodes[i].kind == "reduce":
                raise ValueError(
                    f"{self.label}: {op} is applied to the result of {self.nodes[i].op}; a "
                    "reduction must be the fused function's last op"
                )
        weak = all(self.nodes[i].weak is not None for i in index)
        if op in REDUCTIONS:
            return self._reduce(op, index[0], params)
        if op == "where":
            if weak:
                raise TypeError(f"{self.label}: where needs an array operand, got three scalars")
            spec = sem.where(*(self._rule_operand(i) for i in index))
            return self.add(Node("where", "where", index, {}, spec.dtype, spec.shape, spec.compute))
        if op == "astype":
            target = params["dtype"]
            if target.kind == "c":
                raise DTypeError(f"{self.label}: astype to {target.name}: complex is not fused")
            n = self.nodes[index[0]]
            return self.add(Node("astype", "astype", index, {}, target, n.shape, target))
        entry = ELEMENTWISE.get(op)
        if entry is None:
            raise self._refuse(op)
        if weak:
            return self._weak(op, index, params)
        if entry.arity == 1:
            n = self.nodes[index[0]]
            spec = sem.unary(op, n.shape, n.dtype)
        else:
            spec = sem.binary(op, *(self._rule_operand(i) for i in index))
        if spec.dtype.kind == "c" or spec.compute.kind == "c":
            raise DTypeError(f"{self.label}: {op}: complex values are not fused")
        return self.add(Node("op", op, index, dict(params), spec.dtype, spec.shape, spec.compute))

    def _weak(self, op: str, index: tuple[int, ...], params: dict[str, Any]) -> Traced:
        """Two Python numbers (or one, for a function): Python's arithmetic, in 64 bits."""
        values = [self.nodes[i].value for i in index]
        entry = ELEMENTWISE[op]
        if entry.arity == 1:
            kind = float if entry.dtypes == "float" else self.nodes[index[0]].weak
            if entry.dtypes == "predicate":
                kind = bool
            with np.errstate(all="ignore"):
                v = entry.numpy(np.float64(values[0]) if kind is float else values[0], **params)
            value = kind(v)
        else:
            fn = _PY.get(op)
            if fn is None:
                raise TypeError(f"{self.label}: {op} needs an array operand, got two scalars")
            try:
                value = fn(*values)
            except (ZeroDivisionError, OverflowError, ValueError):
                value = math.nan  # (only a representative value for the rules: never emitted)
            kind = type(value) if type(value) in _WEAK_ORDER else float
            if op == "divide":
                kind = float
            value = kind(value) if not (kind is not float and value != value) else 0
        return self.add(Node("op", op, index, dict(params), weak=kind, value=value))

    def _reduce(self, op: str, i: int, params: dict[str, Any]) -> Traced:
        n = self.nodes[i]
        if n.weak is not None:
            raise TypeError(f"{self.label}: {op} of a Python number")
        if params.get("ddof", 0) not in (0, None):
            raise self._refuse(f"{op} with ddof")
        spec = sem.reduction(op, n.shape, n.dtype, params.get("axis"), params.get("keepdims"))
        if op in ("max", "min") and any(n.shape[a] == 0 for a in spec.axes):
            raise ShapeError(f"{self.label}: {op} of an empty selection (shape {n.shape})")
        node = Node("reduce", op, (i,), {"axes": spec.axes, "keepdims": bool(params.get(
            "keepdims"))}, spec.dtype, spec.shape, spec.accumulate)  # fmt: skip
        return self.add(node)


def _call(name: str) -> Any:
    from ._array import _ops

    return getattr(_ops, name)


class Traced:
    """A value of a fused function while it is traced: an array of known dtype and shape (or a
    Python number argument). Operators, the op table's methods, ``where``, ``astype`` and the
    reductions sum/mean/max/min record ops; anything that would need the data (``bool()``,
    ``item()``, indexing) is refused with an error naming the fused function."""

    __slots__ = ("_trace", "_index")
    __array_priority__ = 1000  # NumPy scalars on the left defer to the reflected operators

    def __init__(self, trace: Trace, index: int):
        self._trace = trace
        self._index = index

    def __ignis_fuse__(self, op: str, args: Any, params: Any) -> Traced:
        return self._trace.record(op, args, params)

    @property
    def _node(self) -> Node:
        return self._trace.nodes[self._index]

    @property
    def dtype(self) -> dt.DType | None:
        """The dtype (None for a Python number argument)."""
        return self._node.dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return self._node.shape

    @property
    def ndim(self) -> int:
        return len(self._node.shape)

    @property
    def size(self) -> int:
        return math.prod(self._node.shape)

    def __repr__(self) -> str:
        n = self._node
        what = n.dtype.name if n.dtype is not None else f"Python {n.weak.__name__}"
        return f"<traced {what} {n.shape} in {self._trace.label}>"

    def astype(self, dtype: Any, copy: bool = True) -> Traced:
        return self._trace.record("astype", (self,), {"dtype": dt.as_dtype(dtype, "astype")})

    def clone(self) -> Traced:
        return self  # values of a trace are never written in place

    def clip(self, min: Any = None, max: Any = None) -> Traced:  # noqa: A002
        out = self
        if min is not None:
            out = _call("maximum")(out, min)
        if max is not None:
            out = _call("minimum")(out, max)
        return out

    def sum(self, axis: Any = None, keepdims: bool = False) -> Traced:
        return self._trace.record("sum", (self,), {"axis": axis, "keepdims": keepdims})

    def mean(self, axis: Any = None, keepdims: bool = False) -> Traced:
        return self._trace.record("mean", (self,), {"axis": axis, "keepdims": keepdims})

    def max(self, axis: Any = None, keepdims: bool = False) -> Traced:
        return self._trace.record("max", (self,), {"axis": axis, "keepdims": keepdims})

    def min(self, axis: Any = None, keepdims: bool = False) -> Traced:
        return self._trace.record("min", (self,), {"axis": axis, "keepdims": keepdims})

    def _needs_data(self, what: str) -> TypeError:
        return TypeError(
            f"{self._trace.label}: {what} needs the values of a traced array; a fused function "
            "cannot branch on data (use ignis.where)"
        )

    def __bool__(self) -> bool:
        raise self._needs_data("bool()")

    def __float__(self) -> float:
        raise self._needs_data("float()")

    def __int__(self) -> int:
        raise self._needs_data("int()")

    def __index__(self) -> int:
        raise self._needs_data("an index")

    def __len__(self) -> int:
        raise self._needs_data("len()")

    def __iter__(self) -> Any:
        raise self._needs_data("iteration")

    def __array__(self, *args: Any, **kwargs: Any) -> Any:
        raise self._needs_data("conversion to a NumPy array")

    def __getitem__(self, key: Any) -> Any:
        raise self._trace._refuse("indexing")

    def __setitem__(self, key: Any, value: Any) -> None:
        raise self._trace._refuse("assignment into an array")

    def __matmul__(self, other: Any) -> Any:
        raise self._trace._refuse("matmul")

    __rmatmul__ = __matmul__

    def __getattr__(self, name: str) -> Any:
        from ._array.array import NvArray

        if not name.startswith("__") and hasattr(NvArray, name):
            raise self._trace._refuse(name)
        raise AttributeError(f"a traced value of {self._trace.label} has no attribute {name!r}")


def _operator(name: str, form: str) -> Any:
    if form == "reflected":
        return lambda self, other: _call(name)(other, self)
    return lambda self, other: _call(name)(self, other)


def _method(name: str, unary: bool) -> Any:
    if unary:
        return lambda self, **params: _call(name)(self, **params)
    return lambda self, other: _call(name)(self, other)


def _install_ops() -> None:
    """Traced's operators and methods: those NvArray has for the op table's entries."""
    for entry in ELEMENTWISE.values():
        for m in entry.methods:
            if m not in Traced.__dict__:
                setattr(Traced, m, _method(entry.name, entry.arity == 1))
        for d in entry.operators:
            form = entry.operator_form(d)
            if form == "inplace":
                continue  # ``x += 1`` rebinds x to ``x + 1``
            if entry.arity == 1:
                setattr(Traced, d, _method(entry.name, True))
            else:
                setattr(Traced, d, _operator(entry.name, form))
    Traced.__hash__ = object.__hash__  # (== records an op; identity still hashes)


_install_ops()
