"""Array functions: elementwise math, comparisons, reductions, softmax, matmul, joining.

Each function checks its operands (devices, types), applies the rule from ``_semantics`` and
runs the op on the operands' backend. Operands are NvArrays or scalars: Python scalars are weak
in promotion, NumPy scalars carry their dtype. NumPy arrays are not converted implicitly (that
would hide a host-to-device copy): wrap them with :func:`ignis.asarray` first.
"""

from __future__ import annotations

import builtins
import sys
from typing import Any, NamedTuple

import numpy as np

from .. import _dtypes as dt
from .._caches import PlanCache
from .._codegen import Source, build_api
from .._errors import DeviceMismatchError, DTypeError, ShapeError
from .._exports import defined_here
from . import _creation, _layout, _op_table, _reduction_table
from . import _semantics as sem
from ._op_table import ELEMENTWISE, ElementwiseOp
from ._reduction_table import REDUCTIONS, ReductionOp
from .array import NvArray

# The exports: the op tables' functions (added by _make_op_functions and
# _make_reduction_functions below), then the functions this module defines (added at its end).
__all__: list[str] = []


class _Scalar:
    """A NumPy scalar operand: strong in promotion (it has a dtype), passed as a Python value."""

    __slots__ = ("value", "dtype", "shape")

    def __init__(self, value: Any, dtype: dt.DType):
        self.value = value
        self.dtype = dtype
        self.shape = ()


def _is_operand(x: Any) -> bool:
    return isinstance(x, (NvArray, bool, int, float, complex, np.generic)) or (
        isinstance(x, np.ndarray) and x.ndim == 0
    )


# What NvArray's operators handle themselves: values, and the types whose error message they
# explain (complex, NumPy arrays, sequences). Anything else is foreign: the operator returns
# NotImplemented so that the other operand's reflected method runs (``nvarray * tensor`` becomes
# ``Tensor.__rmul__``), and Python raises its own TypeError when neither side knows the pair.
_OWN_OPERANDS = (NvArray, bool, int, float, complex, np.generic, np.ndarray, list, tuple)


def _foreign(x: Any) -> bool:
    """True for an operand type NvArray's operators leave to the other operand (a value
    ignis.fuse traces is not foreign: the op is recorded)."""
    return not isinstance(x, _OWN_OPERANDS) and not hasattr(x, "__ignis_fuse__")


def _operand(x: Any, op: str) -> Any:
    """NvArray, Python bool/int/float (weak) or _Scalar (NumPy scalar, strong)."""
    if isinstance(x, NvArray):
        return x
    t = type(x)
    if t is bool or t is int or t is float or t is complex:
        return x
    if isinstance(x, (np.generic, np.ndarray)) and np.ndim(x) == 0:
        d = dt.as_dtype(x.dtype, op)
        value = np.asarray(x).item()
        if d.kind == "f":
            value = float(value)
        elif d.kind == "c":
            value = complex(value)
        return _Scalar(value, d)
    if isinstance(x, bool):
        return bool(x)
    if isinstance(x, int):
        return int(x)
    if isinstance(x, float):
        return float(x)
    if isinstance(x, complex):
        return complex(x)
    if isinstance(x, np.ndarray):
        raise TypeError(
            f"{op}: NumPy arrays are not converted implicitly; wrap with "
            "ignis.asarray(x, device=...)"
            f" (got an array of shape {x.shape})"
        )
    raise TypeError(
        f"{op}: expected an NvArray or a Python/NumPy scalar, got {type(x).__name__}; "
        "convert sequences with ignis.asarray"
    )


def _value(x: Any) -> Any:
    """What a backend receives for an operand: the NvArray or a Python scalar."""
    return x.value if isinstance(x, _Scalar) else x


def _require_array(x: Any, op: str) -> NvArray:
    if not isinstance(x, NvArray):
        if hasattr(x, "__ignis_fuse__"):  # a value ignis.fuse traces: it names the function
            x.__ignis_fuse__(op, None, None)
        raise TypeError(
            f"{op}: expected an NvArray, got {type(x).__name__}; convert with ignis.asarray"
        )
    return x


def _common_device(op: str, arrays: list[NvArray]) -> NvArray:
    first = arrays[0]
    for other in arrays[1:]:
        if other._device != first._device:
            raise DeviceMismatchError(
                f"{op}: operands are on different devices ({first._device} and {other._device}); "
                "move them with .to(device) first"
            )
    return first


def _broadcast(x: Any, shape: tuple[int, ...], op: str) -> Any:
    if isinstance(x, NvArray) and x._shape != shape:
        strides = _layout.broadcast_strides(x._shape, x._strides, shape, op)
        return x._view(x._offset, shape, strides)
    return x


def _overlaps(a: NvArray, b: NvArray) -> bool:
    if a._storage is not b._storage:
        return False
    ra = _layout.byte_extent(a._offset, a._shape, a._strides, a.itemsize)
    rb = _layout.byte_extent(b._offset, b._shape, b._strides, b.itemsize)
    return _layout.ranges_overlap(ra, rb)


def _identical(a: NvArray, b: NvArray) -> bool:
    return (
        a._storage is b._storage
        and a._offset == b._offset
        and a._shape == b._shape
        and a._strides == b._strides
        and a._dtype is b._dtype
    )


def _unalias(x: Any, out: NvArray, allow_identical: bool) -> Any:
    """``x``, or a copy of it when it shares memory with ``out`` in a way the op cannot handle."""
    if (
        isinstance(x, NvArray)
        and _overlaps(x, out)
        and not (allow_identical and _identical(x, out))
    ):
        return x.clone()
    return x


def _check_out(op: str, out: Any, shape: tuple[int, ...], dtype: dt.DType, device: Any) -> NvArray:
    if not isinstance(out, NvArray):
        raise TypeError(f"{op}: out must be an NvArray, got {type(out).__name__}")
    if out._device != device:
        raise DeviceMismatchError(f"{op}: out is on {out._device} but the operands are on {device}")
    if out._shape != shape:
        raise ShapeError(f"{op}: out has shape {out._shape}, expected {shape}")
    if out._dtype is not dtype:
        raise DTypeError(f"{op}: out has dtype {out._dtype.name}, expected {dtype.name}")
    return out


# --- elementwise -------------------------------------------------------------------------------


# Plans: what an op's rule decided for one (op, dtypes, shapes) combination, so that a repeated
# call skips the rule, the dtype promotion and the layout arithmetic and goes straight to
# allocating the output and calling the backend (or to the backend's direct function, which
# does both). Keys hold dtype *names*: DType.__hash__ is a
# Python method, a str hashes from its cache. A plan is made only after the rule accepted its
# operands, so every error still comes from the rule, with its message.
_PLAN_LIMIT = 4096
_WEAK = frozenset((bool, int, float))  # Python scalars, as the fast paths see them (exact types)


class UnaryPlan(NamedTuple):
    """What the rule of a unary op decided for one (op, dtype, shape)."""

    compute: dt.DType
    dtype: dt.DType
    strides: tuple[int, ...]  # of the contiguous result
    nbytes: int
    directs: dict[Any, Any]  # backend -> its direct function or None (see _keep_direct)


class BinaryPlan(NamedTuple):
    """What the rule of a binary op decided for one (op, operand dtypes or scalar types,
    shapes)."""

    compute: dt.DType
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    nbytes: int
    dtype: dt.DType
    a_view: bool  # a is broadcast to the result's shape
    b_view: bool
    check_int: bool  # a Python int operand must be checked against the compute dtype
    form: int  # 1: a is a Python scalar, 2: b is; 0: two arrays
    directs: dict[Any, Any] | None  # None: no direct function takes these operands


class ReducePlan(NamedTuple):
    """What the rule of a reduction decided for one (op, dtype, shape, axis, keepdims, ddof)."""

    spec: sem.Reduction
    keep_strides: tuple[int, ...]
    nbytes: int
    strides: tuple[int, ...]
    directs: dict[Any, Any]


class MatmulPlan(NamedTuple):
    """The views a product of one (dtypes, shapes, strides, transposes) runs on."""

    shape: tuple[int, ...]
    strides: tuple[int, ...]
    nbytes: int
    dtype: dt.DType
    a_layout: tuple[Any, ...]  # (shape, strides) of a's view
    b_layout: tuple[Any, ...]
    full_layout: tuple[Any, ...] | None  # the result's full-rank view (None: the result)


class InplacePlan(NamedTuple):
    """What the rules of ``dst op= other`` decided for one (op, dtypes, shapes)."""

    compute: dt.DType
    view: bool  # other is broadcast to dst's shape


_unary_plans = PlanCache(
    "ops.unary_plans", _PLAN_LIMIT, "unary op, dtype and shape -> UnaryPlan"
)
_binary_plans = PlanCache(
    "ops.binary_plans", _PLAN_LIMIT, "binary op, operand dtypes and shapes -> BinaryPlan"
)
_reduce_plans = PlanCache(
    "ops.reduce_plans", _PLAN_LIMIT, "reduction, dtype, shape and axes -> ReducePlan"
)
_matmul_plans = PlanCache(
    "ops.matmul_plans", _PLAN_LIMIT, "matmul operand dtypes and layouts -> MatmulPlan"
)
_inplace_plans = PlanCache(
    "ops.inplace_plans", _PLAN_LIMIT, "in-place op, dtypes and shapes -> InplacePlan"
)
# Their lookups, bound once: a method of a dict subclass is found through its type on each call.
_unary_plan = _unary_plans.get
_binary_plan = _binary_plans.get
_inplace_plan = _inplace_plans.get
_reduce_plan = _reduce_plans.get
_matmul_plan = _matmul_plans.get


# The unary, binary and reduction plans end with the direct functions their backends offered
# (see Backend.unary_direct): a dict backend -> function or None, filled at a backend's first
# use of the plan (None for a binary plan whose operands no direct function takes). Few
# backends ever meet one plan; past _DIRECT_LIMIT (backends rebuilt again and again) the dict
# starts over.
_UNSEEN: Any = object()
_DIRECT_LIMIT = 8


def _keep_direct(directs: dict[Any, Any], backend: Any, direct: Any) -> None:
    if len(directs) >= _DIRECT_LIMIT:
        directs.clear()
    directs[backend] = direct


def _unary_direct(op: str, plan: UnaryPlan, x: NvArray) -> Any:
    """The direct function of ``plan`` on x's backend, asked for (at a backend's first use of
    the plan) and kept; None where there is none. (Found in the plan by :func:`_unary`.)"""
    backend, directs = x._backend, plan.directs
    compute, dtype, strides, nbytes, _ = plan
    direct = backend.unary_direct(op, compute, dtype, x._dtype, x._shape, strides, nbytes)
    _keep_direct(directs, backend, direct)
    return direct


def _binary_direct(op: str, plan: BinaryPlan, backend: Any) -> Any:
    """The direct function of ``plan`` on ``backend``, asked for (at its first use of the plan)
    and kept; None where there is none. (Found in the plan by :func:`_binary`.)"""
    compute, shape, strides, nbytes, dtype, _, _, _, form, directs = plan
    direct = backend.binary_direct(op, compute, dtype, form, shape, strides, nbytes)
    _keep_direct(directs, backend, direct)
    return direct


def _reduce_direct(op: str, plan: ReducePlan, x: NvArray) -> Any:
    """The direct function of the reduction ``plan`` on x's backend, asked for (at a backend's
    first use of the plan) and kept; None where there is none. (Found in the plan by
    :func:`_reduce`.)"""
    backend = x._backend
    spec, keep_strides, nbytes, strides, directs = plan
    direct = backend.reduce_direct(op, spec, x._dtype, x._shape, keep_strides, strides, nbytes)
    _keep_direct(directs, backend, direct)
    return direct


def _unary(op: str, x: Any, params: dict[str, Any] | None = None) -> NvArray:
    if x.__class__ is NvArray:
        key = (op, x._dtype.name, x._shape)
        plan = _unary_plan(key)
        if plan is None:
            spec = sem.unary(op, x._shape, x._dtype)
            layout = _creation.contiguous_layout(spec.shape, spec.dtype.itemsize)
            plan = _unary_plans.remember(key, UnaryPlan(spec.compute, spec.dtype, *layout, {}))
        else:
            _unary_plans.hits += 1
        if not params:  # the backend may compute it in one call
            direct = plan.directs.get(x._backend, _UNSEEN)
            if direct is _UNSEEN:
                direct = _unary_direct(op, plan, x)
            if direct is not None:
                out = direct(x)
                if out is not None:
                    return out
        compute, dtype, strides, nbytes, _ = plan
        out = _creation._allocate(x._shape, strides, nbytes, dtype, x._device)
        x._backend.unary(op, out, x, compute, params or {})
        return out
    if hasattr(x, "__ignis_fuse__"):  # a value ignis.fuse traces: the op is recorded
        return x.__ignis_fuse__(op, (x,), params or {})
    x = _require_array(x, op)
    spec = sem.unary(op, x._shape, x._dtype)
    out = _creation._new(spec.shape, spec.dtype, x._device)
    x._backend.unary(op, out, x, spec.compute, params or {})
    return out


def _binary(op: str, a: Any, b: Any, operator: bool = False) -> Any:
    # Fast path: two arrays on the same device object, or an array and a Python scalar, whose
    # (op, dtypes, shapes) has been seen before. ``operator``: called by an NvArray operator
    # method, which returns NotImplemented for a foreign operand (see _foreign).
    ca, cb = a.__class__, b.__class__
    if ca is NvArray:
        x = a  # the array whose backend runs the op
        if cb is NvArray:
            key = (
                (op, a._dtype.name, b._dtype.name, a._shape, b._shape)
                if a._device is b._device
                else None
            )
        elif cb in _WEAK:
            key = (op, a._dtype.name, cb, a._shape, None)
        else:
            key = None
    elif cb is NvArray and ca in _WEAK:
        x = b
        key = (op, ca, b._dtype.name, None, b._shape)
    else:
        key = None
    if key is None:  # no plan is kept for these operands: NumPy scalars, two devices, ...
        if operator and (_foreign(a) or _foreign(b)):
            return NotImplemented
        return _binary_slow(op, a, b, None)
    plan = _binary_plan(key)
    if plan is None:
        return _binary_slow(op, a, b, key)
    _binary_plans.hits += 1
    backend, directs = x._backend, plan.directs
    if directs is not None:  # the backend may compute it in one call
        direct = directs.get(backend, _UNSEEN)
        if direct is _UNSEEN:
            direct = _binary_direct(op, plan, backend)
        if direct is not None:
            out = direct(a, b)
            if out is not None:
                return out
    compute, shape, strides, nbytes, dtype, a_view, b_view, check_int, _, _ = plan
    if check_int:  # (only plans of an array and a Python int)
        dt.check_scalar_fits(b if x is a else a, compute, op)
    out = _creation._allocate(shape, strides, nbytes, dtype, x._device)
    if a_view:
        a = _broadcast(a, shape, op)
    if b_view:
        b = _broadcast(b, shape, op)
    backend.binary(op, out, a, b, compute)
    return out


def _binary_slow(op: str, a: Any, b: Any, key: Any) -> NvArray:
    """:func:`_binary` in full; remembers the plan under ``key`` (unless None)."""
    for t in (a, b):
        if hasattr(t, "__ignis_fuse__"):  # a value ignis.fuse traces: the op is recorded
            return t.__ignis_fuse__(op, (a, b), {})
    a, b = _operand(a, op), _operand(b, op)
    arrays = [x for x in (a, b) if isinstance(x, NvArray)]
    if not arrays:
        raise TypeError(f"{op}: at least one operand must be an NvArray, got two scalars")
    first = _common_device(op, arrays)
    spec = sem.binary(op, a, b)
    if key is not None:
        # A Python int operand must be checked against an integer compute dtype on every call:
        # whether it fits depends on its value, which the plan does not hold.
        check_int = (a.__class__ is int or b.__class__ is int) and spec.compute.kind in "iu"
        strides, nbytes = _creation.contiguous_layout(spec.shape, spec.dtype.itemsize)
        a_view = isinstance(a, NvArray) and a._shape != spec.shape
        b_view = isinstance(b, NvArray) and b._shape != spec.shape
        form = 1 if a.__class__ in _WEAK else 2 if b.__class__ in _WEAK else 0
        # What a direct function takes: operands of the result's dtype and shape, no int check.
        # (builtins.all: this module's own all is the reduction)
        takes = not (a_view or b_view or check_int) and builtins.all(
            x._dtype is spec.dtype for x in (a, b) if x.__class__ is NvArray
        )
        plan = BinaryPlan(
            spec.compute,
            spec.shape,
            strides,
            nbytes,
            spec.dtype,
            a_view,
            b_view,
            check_int,
            form,
            {} if takes else None,
        )
        _binary_plans.remember(key, plan)
    out = _creation._new(spec.shape, spec.dtype, first._device)
    first._backend.binary(
        op,
        out,
        _value(_broadcast(a, spec.shape, op)),
        _value(_broadcast(b, spec.shape, op)),
        spec.compute,
    )
    return out


def _inplace(op: str, dst: NvArray, other: Any, name: str) -> NvArray:
    """``dst op= other`` in place (NumPy's same_kind casting); returns ``dst``."""
    # Fast path: two arrays on one device whose (op, dtypes, shapes) passed the rules before
    # (gradient accumulation runs here on every backward pass).
    key = None
    if other.__class__ is NvArray and dst.__class__ is NvArray and other._device is dst._device:
        key = (op, name, dst._dtype.name, other._dtype.name, dst._shape, other._shape)
        plan = _inplace_plan(key)
        if plan is not None:
            _inplace_plans.hits += 1
            compute, view = plan
            if view:
                other = _broadcast(other, dst._shape, name)
            if other._storage is dst._storage:  # overlap is a property of the memory: every call
                other = _unalias(other, dst, allow_identical=True)
            dst._backend.binary(op, dst, dst, other, compute)
            return dst
    other = _operand(other, name)
    if isinstance(other, NvArray):
        _common_device(name, [dst, other])
    spec = sem.binary(op, dst, other, name)
    sem.inplace(name, dst._shape, dst._dtype, spec)
    if key is not None:
        _inplace_plans.remember(key, InplacePlan(spec.compute, other._shape != spec.shape))
    other = _unalias(_broadcast(other, spec.shape, name), dst, allow_identical=True)
    dst._backend.binary(op, dst, dst, _value(other), spec.compute)
    return dst


# --- the op table's functions and NvArray methods ---------------------------------------------


def _op_sources(op: ElementwiseOp) -> tuple[Source, dict[str, Source]]:
    """Signature and body of the function ``ignis.<name>`` the table entry ``op`` makes, and of
    its NvArray methods and operators, by name."""
    name = op.name
    if op.arity == 1:
        args = "".join(f", {p}={v!r}" for p, v in op.defaults.items())
        params = "{" + ", ".join(f"{p!r}: {p}" for p in op.params) + "}"
        call = (
            f"_unary({name!r}, x)"
            if not op.params
            else f"_unary({name!r}, x, _check_params(OPS[{name!r}], {params}))"
        )
        methods = {m: (f"x{args}", [f"return {call}"]) for m in op.methods}
        methods.update({d: ("x", [f"return {call}"]) for d in op.operators})
        return (f"x{args}", [f"return {call}"]), methods
    function = ("a, b", [f"return _binary({name!r}, a, b)"])
    methods = {m: function for m in op.methods}
    for d in op.operators:
        if d in ("__eq__", "__ne__"):  # a foreign operand: Python's identity comparison
            body = ["if not _is_operand(b):", "    return NotImplemented"]
            methods[d] = ("a, b", [*body, f"return _binary({name!r}, a, b)"])
        elif op.operator_form(d) == "inplace":  # dst op= other
            body = ["if _foreign(b):", "    return NotImplemented"]
            methods[d] = ("a, b", [*body, f"return _inplace({name!r}, a, b, {d!r})"])
        elif op.operator_form(d) == "reflected":  # the array is the right operand
            methods[d] = ("b, a", [f"return _binary({name!r}, a, b, True)"])
        else:
            methods[d] = ("a, b", [f"return _binary({name!r}, a, b, True)"])
    return function, methods


def _check_params(op: ElementwiseOp, params: dict[str, Any]) -> dict[str, Any]:
    """``params`` after checking each against the values ``op`` accepts."""
    for key, value in params.items():
        op.check_param(key, value)
    return params


def _make_op_functions() -> None:
    """Define ``ignis.<name>`` here and the NvArray methods and operators of every table op."""
    names = {
        "_unary": _unary,
        "_binary": _binary,
        "_inplace": _inplace,
        "_is_operand": _is_operand,
        "_foreign": _foreign,
        "_check_params": _check_params,
        "OPS": ELEMENTWISE,
    }
    for op in ELEMENTWISE.values():
        function, methods = _op_sources(op)
        _publish(op.name, op.doc, function, methods, names, f"<ignis op {op.name}>")
        for alias in op.aliases:  # the same function under another name (NumPy's)
            globals()[alias] = globals()[op.name]
            __all__.append(alias)


def _publish(
    name: str, doc: str, function: Source, methods: dict[str, Source], names: Any, filename: str
) -> None:
    """``ignis.<name>`` here (and in ``__all__``) and its NvArray methods, from their sources."""
    globals()[name] = build_api(name, doc, function, methods, names, filename, "ignis", NvArray)
    __all__.append(name)


_make_op_functions()
# What the table's derivative rules compute with.
from . import _nn_activation  # noqa: E402

_op_table._ops = sys.modules[__name__]
_op_table._act = _nn_activation


def where(cond: Any, a: Any, b: Any) -> NvArray:
    """``a`` where ``cond`` is nonzero, else ``b``, with broadcasting of all three.

    Example: ``ignis.where(x > 0, x, 0.0)``.
    """
    for t in (cond, a, b):
        if hasattr(t, "__ignis_fuse__"):  # a value ignis.fuse traces: the op is recorded
            return t.__ignis_fuse__("where", (cond, a, b), {})
    cond, a, b = _operand(cond, "where"), _operand(a, "where"), _operand(b, "where")
    arrays = [x for x in (cond, a, b) if isinstance(x, NvArray)]
    if not arrays:
        raise TypeError("where: at least one operand must be an NvArray")
    first = _common_device("where", arrays)
    spec = sem.where(cond, a, b)
    out = _creation._new(spec.shape, spec.dtype, first._device)
    first._backend.where(
        out, *(_value(_broadcast(x, spec.shape, "where")) for x in (cond, a, b)), spec.compute
    )
    return out


def clip(x: NvArray, min: Any = None, max: Any = None) -> NvArray:  # noqa: A002
    """``minimum(maximum(x, min), max)``; either bound may be None (both: a copy of ``x``).
    NaN stays NaN. The result has ``x``'s dtype (the Array API's rule)."""
    x = _require_array(x, "clip")
    out = x
    try:
        if min is not None:
            out = _binary("maximum", out, min)
        if max is not None:
            out = _binary("minimum", out, max)
    except DTypeError as exc:
        # (the rule of maximum/minimum refused the operands; the error names clip)
        raise DTypeError(f"clip: {str(exc).partition(': ')[2]}") from None
    return out if out is not x else x.clone()


# --- reductions --------------------------------------------------------------------------------


def _plain_axes(axis: Any) -> bool:
    """``axis`` is None, an int or a tuple of ints (a request a remembered plan can key on)."""
    if axis is None or axis.__class__ is int:
        return True
    if axis.__class__ is not tuple:
        return False
    for a in axis:
        if a.__class__ is not int:
            return False
    return True


def _reduce(op: str, x: Any, axis: Any, keepdims: bool, ddof: Any = 0) -> NvArray:
    if (
        x.__class__ is NvArray
        and (axis is None or axis.__class__ is int or _plain_axes(axis))
        and ddof.__class__ is int
        and (keepdims is False or keepdims is True)
    ):
        key = (op, x._dtype.name, x._shape, axis, keepdims, ddof)
        plan = _reduce_plan(key)
        if plan is None:
            spec = sem.reduction(op, x._shape, x._dtype, axis, keepdims, ddof)
            itemsize = spec.dtype.itemsize
            keep_strides, nbytes = _creation.contiguous_layout(spec.keep_shape, itemsize)
            strides = _creation.contiguous_layout(spec.shape, itemsize)[0]
            plan = _reduce_plans.remember(key, ReducePlan(spec, keep_strides, nbytes, strides, {}))
        else:
            _reduce_plans.hits += 1
        direct = plan.directs.get(x._backend, _UNSEEN)
        if direct is _UNSEEN:
            direct = _reduce_direct(op, plan, x)
        if direct is not None:  # the backend may compute it in one call
            out = direct(x)
            if out is not None:
                return out
        spec, keep_strides, nbytes, strides, _ = plan
        out = _creation._allocate(spec.keep_shape, keep_strides, nbytes, spec.dtype, x._device)
        x._backend.reduce(op, out, x, spec.axes, spec.accumulate, {"ddof": ddof})
        return out if keepdims else out._view(0, spec.shape, strides)
    return _reduce_general(op, x, axis, keepdims, ddof)


def _reduce_general(
    op: str, x: Any, axis: Any, keepdims: bool, ddof: Any = 0, dtype: Any = None
) -> NvArray:
    """:func:`_reduce` for any arguments (``dtype``: the result dtype, where the op takes one),
    without remembered plans."""
    if hasattr(x, "__ignis_fuse__"):  # a value ignis.fuse traces: the reduction is recorded
        return x.__ignis_fuse__(op, (x,), {"axis": axis, "keepdims": keepdims, "ddof": ddof})
    x = _require_array(x, op)
    spec = sem.reduction(op, x._shape, x._dtype, axis, keepdims, ddof, dtype)
    out = _creation._new(spec.keep_shape, spec.dtype, x._device)
    x._backend.reduce(op, out, x, spec.axes, spec.accumulate, {"ddof": ddof})
    return (
        out
        if keepdims
        else out._view(
            out._offset, spec.shape, _layout.contiguous_strides(spec.shape, out.itemsize)
        )
    )


def _correction(op: str, ddof: Any, correction: Any) -> Any:
    """``correction`` in place of ``ddof`` (the two name one argument)."""
    if ddof != 0:
        raise TypeError(
            f"{op}: give ddof or correction, not both (got {ddof!r} and {correction!r})"
        )
    return correction


def _arg_reduce(op: str, x: Any, axis: Any, keepdims: bool) -> NvArray:
    x = _require_array(x, op)
    spec = sem.arg_reduction(op, x._shape, x._dtype, axis, keepdims)
    out = _creation._new(spec.keep_shape, dt.int64, x._device)
    x._backend.arg_reduce(op, out, x, None if axis is None else spec.axes[0])
    return (
        out
        if keepdims
        else out._view(out._offset, spec.shape, _layout.contiguous_strides(spec.shape, 8))
    )


def _softmax(op: str, x: Any, axis: Any, log: bool) -> NvArray:
    x = _require_array(x, op)
    ax, dtype = sem.softmax(op, x._shape, x._dtype, axis)
    out = _creation._new(x._shape, dtype, x._device)
    x._backend.softmax(out, x, ax, log)
    return out


# --- the reduction table's functions and NvArray methods --------------------------------------


def _reduction_body(op: ReductionOp) -> list[str]:
    """The body of ``ignis.<name>`` and of the NvArray method for the reduction ``op`` (the
    parameters are :attr:`ReductionOp.signature`'s): a call of the kind's common body above."""
    name = op.name
    if op.kind == "reduce" and op.ddof:
        return [
            "if correction is not None:",  # the Array API's name of ddof
            f"    ddof = _correction({name!r}, ddof, correction)",
            f"return _reduce({name!r}, x, axis, keepdims, ddof)",
        ]
    if op.kind == "reduce" and op.dtype:
        return [
            "if dtype is not None:",
            f"    return _reduce_general({name!r}, x, axis, keepdims, 0, dtype)",
            f"return _reduce({name!r}, x, axis, keepdims)",
        ]
    if op.kind == "reduce":
        return [f"return _reduce({name!r}, x, axis, keepdims)"]
    if op.kind == "arg":
        return [f"return _arg_reduce({name!r}, x, axis, keepdims)"]
    return [f"return _softmax({name!r}, x, axis, {op.log!r})"]


def _make_reduction_functions() -> None:
    """Define ``ignis.<name>`` here and the NvArray method of every reduction of the table."""
    names = {
        "_reduce": _reduce,
        "_reduce_general": _reduce_general,
        "_correction": _correction,
        "_arg_reduce": _arg_reduce,
        "_softmax": _softmax,
    }
    for op in REDUCTIONS.values():
        # The method is a function of its own (its qualified name is the method's) that calls
        # the common body directly, as the function does: ``x.sum()`` is one call from _reduce.
        source = (op.signature, _reduction_body(op))
        _publish(op.name, op.doc, source, {op.name: source}, names, f"<ignis reduction {op.name}>")


_make_reduction_functions()
# What the reduction table's derivative rules compute with.
from . import _nn_loss  # noqa: E402

_reduction_table._ops = sys.modules[__name__]
_reduction_table._loss = _nn_loss


# --- matmul ------------------------------------------------------------------------------------


def matmul(
    a: NvArray,
    b: NvArray,
    *,
    transpose_a: bool = False,
    transpose_b: bool = False,
    alpha: float = 1.0,
    beta: float = 0.0,
    out: NvArray | None = None,
) -> NvArray:
    """``alpha * op(a) @ op(b) + beta * out`` with NumPy's matmul rules.

    ``op`` transposes the last two axes when the flag is set. Batch dimensions broadcast;
    1-D operands are treated as a row (``a``) or a column (``b``) vector and that dimension
    is dropped from the result. ``beta != 0`` needs ``out``, whose contents are accumulated.
    Operands must be floating; float16/bfloat16 accumulate in float32.

    Example: ``ignis.matmul(x, w, transpose_b=True)`` is ``x @ w.mT``.
    """
    if (
        out is None
        and a.__class__ is NvArray
        and b.__class__ is NvArray
        and a._device is b._device
        and not beta
    ):
        key = (
            a._dtype.name,
            b._dtype.name,
            a._shape,
            a._strides,
            b._shape,
            b._strides,
            transpose_a,
            transpose_b,
        )
        plan = _matmul_plan(key)
        if plan is not None:
            _matmul_plans.hits += 1
            shape, strides, nbytes, dtype, a_layout, b_layout, full_layout = plan
            out = _creation._allocate(shape, strides, nbytes, dtype, a._device)
            full = out if full_layout is None else out._view(0, *full_layout)
            out._backend.matmul(
                full,
                a._view(a._offset, *a_layout),
                b._view(b._offset, *b_layout),
                float(alpha),
                float(beta),
            )
            return out
        return _matmul_full(a, b, transpose_a, transpose_b, alpha, beta, out, key)
    return _matmul_full(a, b, transpose_a, transpose_b, alpha, beta, out, None)


def _matmul_full(
    a: Any,
    b: Any,
    transpose_a: bool,
    transpose_b: bool,
    alpha: Any,
    beta: Any,
    out: Any,
    key: Any,
) -> NvArray:
    """:func:`matmul` in full; remembers the views it made under ``key`` (unless None) when the
    operands needed no conversion, so that a repeated call only allocates and runs."""
    a, b = _require_array(a, "matmul"), _require_array(b, "matmul")
    arrays = [a, b] + ([out] if isinstance(out, NvArray) else [])
    _common_device("matmul", arrays)
    spec = sem.matmul(a._shape, a._dtype, b._shape, b._dtype, transpose_a, transpose_b)
    if beta != 0 and out is None:
        raise ValueError("matmul: beta != 0 needs out= (the array to accumulate into)")
    if spec.dtype.kind != "f":
        key = None  # integers: no remembered plan (the matrix kernels are floating)
    if out is None:
        out = _creation._new(spec.shape, spec.dtype, a._device)
    else:
        _check_out("matmul", out, spec.shape, spec.dtype, a._device)
    if a._dtype is not spec.dtype:
        a = a.astype(spec.dtype)
        key = None  # a converted copy: nothing of it can be reused
    if b._dtype is not spec.dtype:
        b = b.astype(spec.dtype)
        key = None
    if spec.a_vector:
        a = a.unsqueeze(0)
    elif transpose_a:
        a = a.swapaxes(-1, -2)
    if spec.b_vector:
        b = b.unsqueeze(-1)
    elif transpose_b:
        b = b.swapaxes(-1, -2)
    a = _broadcast(a, spec.batch + (spec.m, spec.k), "matmul")
    b = _broadcast(b, spec.batch + (spec.k, spec.n), "matmul")
    full = out
    if spec.a_vector:
        full = full.unsqueeze(-1 if spec.b_vector else -2)
    if spec.b_vector:
        full = full.unsqueeze(-1)
    if spec.dtype.kind != "f":
        # Integers, exact and wrapping around as NumPy's: the products broadcast over
        # (..., m, k, n) and summed over k, which takes m * k * n elements of memory (cast to
        # a float dtype for the matrix kernels' speed).
        res = (a.unsqueeze(-1) * b.unsqueeze(-3)).sum(axis=-2, dtype=spec.dtype)
        if alpha != 1:
            res = res * alpha
        if beta != 0:
            res = res + full * beta
        full.copy_(res)
        return out
    if key is not None:  # out is new here: it overlaps nothing
        _matmul_plans.remember(
            key,
            MatmulPlan(
                out._shape,
                out._strides,
                _creation.contiguous_layout(out._shape, out.itemsize)[1],
                out._dtype,
                (a._shape, a._strides),
                (b._shape, b._strides),
                None if full is out else (full._shape, full._strides),
            ),
        )
    a = _unalias(a, out, allow_identical=False)
    b = _unalias(b, out, allow_identical=False)
    out._backend.matmul(full, a, b, float(alpha), float(beta))
    return out


def accumulate(dst: NvArray, src: Any) -> NvArray:
    """``dst += src`` in place (``src`` broadcasts to ``dst`` and is converted to its dtype).

    The workhorse of gradient accumulation. Returns ``dst``.
    """
    dst = _require_array(dst, "accumulate")
    return _inplace("add", dst, src, "accumulate")


# --- copies ------------------------------------------------------------------------------------


def _fill(dst: NvArray, value: Any, op: str = "fill_") -> NvArray:
    if value.__class__ is int and value == 0:
        # Zero fits every dtype (the scalar checks below pass it unchanged): resetting
        # gradients and accumulators, once per tensor per step, goes straight to the backend.
        dst._backend.fill(dst, 0)
        return dst
    dst._backend.fill(dst, _fill_value(value, dst._dtype, op))
    return dst


def _fill_value(value: Any, dtype: dt.DType, op: str) -> Any:
    """``value`` as the scalar that fills an array of ``dtype``; errors name ``op``."""
    if isinstance(value, NvArray):
        if value.numel != 1:
            raise ShapeError(
                f"{op}: the fill value must be a scalar, got an array of shape {value.shape}"
            )
        value = value.item()
    v = _operand(value, op)
    if isinstance(v, NvArray):  # pragma: no cover - handled above
        raise TypeError(f"{op}: expected a scalar")
    v = _value(v)
    if v.__class__ is complex and dtype.kind != "c":
        raise DTypeError(
            f"{op}: cannot store the complex value {v!r} in a {dtype.name} array; "
            "expected a real value or a complex dtype"
        )
    dt.check_scalar_fits(v, dtype, op)
    return v


def _copy_into(dst: NvArray, src: Any, op: str) -> NvArray:
    """``dst[...] = src`` for an NvArray (any device), host data or a scalar."""
    if isinstance(src, NvArray):
        try:
            src_b = _broadcast(src, dst._shape, op)
        except ShapeError:
            raise ShapeError(
                f"{op}: cannot copy an array of shape {src._shape} into shape {dst._shape}"
            ) from None
        if src._device != dst._device:
            host = np.ascontiguousarray(np.broadcast_to(src.to_host(), dst._shape))
            dst._backend.copyin(dst, host.astype(dst._dtype.numpy, copy=False))
            return dst
        dst._backend.copy(dst, _unalias(src_b, dst, allow_identical=True))
        return dst
    if isinstance(src, (bool, int, float, complex, np.generic)) or (
        isinstance(src, np.ndarray) and src.ndim == 0
    ):
        return _fill(dst, src, op)
    try:
        host = np.asarray(src)
    except (ValueError, TypeError) as exc:
        raise ShapeError(f"{op}: cannot convert {type(src).__name__} to an array ({exc})") from None
    if host.dtype.kind not in "biufc" and host.dtype != dt.bfloat16.numpy:
        raise DTypeError(f"{op}: cannot copy values of NumPy dtype {host.dtype}")
    try:
        host = np.broadcast_to(host, dst._shape)
    except ValueError:
        raise ShapeError(
            f"{op}: cannot copy values of shape {host.shape} into shape {dst._shape}"
        ) from None
    with np.errstate(all="ignore"):
        host = np.ascontiguousarray(host.astype(dst._dtype.numpy, copy=False))
    dst._backend.copyin(dst, host.reshape(dst._shape))
    return dst


# --- joining -----------------------------------------------------------------------------------


def concatenate(arrays: Any, axis: int = 0) -> NvArray:
    """Join arrays along an existing ``axis`` (dtypes promote). Example: ``concatenate([a, b])``."""
    arrays = [_require_array(x, "concatenate") for x in arrays]
    if not arrays:
        raise ShapeError("concatenate: needs at least one array")
    first = _common_device("concatenate", arrays)
    shape, ax, dtype = sem.concatenate([x._shape for x in arrays], [x._dtype for x in arrays], axis)
    out = _creation._new(shape, dtype, first._device)
    start = 0
    for x in arrays:
        n = x._shape[ax]
        if n:
            key = (slice(None),) * ax + (slice(start, start + n),)
            first._backend.copy(out[key], x)
        start += n
    return out


def stack(arrays: Any, axis: int = 0) -> NvArray:
    """Join equal-shaped arrays along a new ``axis``: ``stack([a, b]).shape == (2, *a.shape)``."""
    arrays = [_require_array(x, "stack") for x in arrays]
    shape, ax, _ = sem.stack([x._shape for x in arrays], [x._dtype for x in arrays], axis)
    return concatenate([x.unsqueeze(ax) for x in arrays], axis=ax)


__all__ += defined_here(globals())
