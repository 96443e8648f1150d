"""The rules of every array op, written once for all backends.

Each function here takes shapes, dtypes and arguments (never memory) and returns what the op
produces: the output shape and dtype, the dtype the computation runs in, and normalized
arguments. It raises the user-facing errors (ShapeError, DTypeError, ...) naming the op, what
was given and what was expected. Backends only execute.

Dtype rules (NumPy 2's, see :mod:`ignis._dtypes` for promotion). The element-wise ops' rules
are named in the op table (:mod:`ignis._array._op_table`, which lists them) and applied here:

* reductions: the reduction table's result rules (``_reduction_table``: ``sum`` of
  bool/signed integers gives int64, of unsigned ones uint64, of floats keeps the dtype; ``mean``
  and ``var`` of bool/integers give float64; ``max``/``min`` keep the dtype; ``all``/``any``
  give bool; ``argmax``/``argmin`` give int64). float16/bfloat16 reductions accumulate in
  float32 and round once.
* ``matmul``: numeric operands; the promoted dtype; float16/bfloat16 accumulate in float32;
  integers are exact (wrapping around as NumPy's).
* complex operands: the op table's ``complex`` field says which element-wise ops take them
  (the others raise a DTypeError naming the op); floating rules keep a complex dtype;
  ``abs``/``real``/``imag`` give the parts' real dtype. Of the reductions, those whose table
  entry has ``complex=True`` take them (``sum``, ``prod``, ``mean``, ``all``, ``any``).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .. import _dtypes as dt
from .._caches import PlanCache
from .._errors import DTypeError, ShapeError
from . import _layout
from ._op_table import ELEMENTWISE
from ._reduction_table import REDUCTIONS

__all__ = [
    "UNARY_OPS",
    "BINARY_OPS",
    "COMPARISON_OPS",
    "REDUCE_OPS",
    "ARG_REDUCE_OPS",
    "normalize_axis",
    "normalize_axes",
    "unary",
    "binary",
    "where",
    "reduction",
    "arg_reduction",
    "softmax",
    "matmul",
    "concatenate",
    "stack",
    "inplace",
]

Shape = tuple[int, ...]

# The element-wise ops and their dtype rules come from the op table.
UNARY_OPS: dict[str, str] = {n: op.dtypes for n, op in ELEMENTWISE.items() if op.arity == 1}
BINARY_OPS: dict[str, str] = {n: op.dtypes for n, op in ELEMENTWISE.items() if op.arity == 2}
COMPARISON_OPS = tuple(n for n, rule in BINARY_OPS.items() if rule == "comparison")
# Ops that refuse float16/bfloat16 (computing them in float32 would give a wrong answer).
_NO_HALF = frozenset(n for n, op in ELEMENTWISE.items() if not op.half)
_HALF_TYPES = (dt.float16, dt.bfloat16)
# What each op gives for complex operands ("" refuses them; see the op table).
_COMPLEX_RULE: dict[str, str] = {n: op.complex for n, op in ELEMENTWISE.items()}

# The reductions come from the reduction table.
REDUCE_OPS = tuple(n for n, op in REDUCTIONS.items() if op.kind == "reduce")
ARG_REDUCE_OPS = tuple(n for n, op in REDUCTIONS.items() if op.kind == "arg")



def float_result(dtype: dt.DType) -> dt.DType:
    """The dtype a floating function of ``dtype`` returns (NumPy's ufunc loop choice);
    complex dtypes are kept."""
    if dtype.kind in "fc":
        return dtype
    if dtype.itemsize == 1:  # bool, int8, uint8 fit float16 exactly
        return dt.float16
    if dtype.itemsize == 2:  # int16, uint16 fit float32
        return dt.float32
    return dt.float64


def accumulate_dtype(dtype: dt.DType) -> dt.DType:
    """The dtype reductions and matmul accumulate in: float32 for float16/bfloat16."""
    return dt.float32 if dtype in (dt.float16, dt.bfloat16) else dtype


# --- axes --------------------------------------------------------------------------------------


def normalize_axis(axis: Any, ndim: int, op: str) -> int:
    """One axis in ``[-ndim, ndim)`` as a non-negative int."""
    try:
        # bool is an int to operator.index, but axis=True is a mistake, not axis 1 (NumPy
        # refuses it too)
        if isinstance(axis, bool):
            raise TypeError
        a = operator.index(axis)
    except TypeError:
        raise ShapeError(f"{op}: axis must be an int, got {axis!r}") from None
    if not -ndim <= a < ndim:
        raise ShapeError(f"{op}: axis {a} is out of range for an array of {ndim} dimensions")
    return a % ndim


def normalize_axes(axis: Any, ndim: int, op: str) -> tuple[int, ...]:
    """None (all axes), an int or a tuple of ints -> sorted unique non-negative axes."""
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, (tuple, list)):
        axes = tuple(normalize_axis(a, ndim, op) for a in axis)
        if len(set(axes)) != len(axes):
            raise ShapeError(f"{op}: duplicate value in axis {tuple(axis)!r}")
        return tuple(sorted(axes))
    return (normalize_axis(axis, ndim, op),)


# --- elementwise -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Elementwise:
    """Result of an elementwise rule: output shape and dtype, and the dtype it computes in."""

    shape: Shape
    dtype: dt.DType
    compute: dt.DType


def _shape_of(x: Any) -> Shape:
    return getattr(x, "shape", ())


def unary(op: str, shape: Shape, dtype: dt.DType) -> Elementwise:
    """Rule of a unary elementwise op (its dtype rule is named in the op table)."""
    rule = UNARY_OPS.get(op)
    if rule is None:
        raise ValueError(f"unknown unary op {op!r}")
    if dtype.kind == "c":
        return _complex_unary(op, rule, shape, dtype)
    if rule == "float":
        out = float_result(dtype)
        if op in _NO_HALF and out in _HALF_TYPES:
            raise DTypeError(f"{op}: not supported for {out.name}; cast to float32 first")
        return Elementwise(shape, out, out)
    if rule == "predicate":
        return Elementwise(shape, dt.bool_, dtype)
    if rule == "numeric" and dtype is dt.bool_:
        raise DTypeError(f"{op}: not supported for bool arrays; cast with astype() first")
    if rule == "integer" and dtype.kind not in "biu":
        raise DTypeError(f"{op}: needs an integer or bool array, got {dtype.name}")
    return Elementwise(shape, dtype, dtype)


def _refuse_complex(op: str, given: str) -> DTypeError:
    return DTypeError(
        f"{op}: not defined for complex dtypes (got {given}); expected real operands "
        "(take real(), imag() or abs() first)"
    )


def _complex_unary(op: str, rule: str, shape: Shape, dtype: dt.DType) -> Elementwise:
    """The rule of a unary op on a complex operand (its ``complex`` entry in the op table)."""
    mode = _COMPLEX_RULE[op]
    if not mode:
        raise _refuse_complex(op, dtype.name)
    if rule == "predicate":
        return Elementwise(shape, dt.bool_, dtype)
    if mode == "real":
        return Elementwise(shape, dt.real_of(dtype), dtype)
    return Elementwise(shape, dtype, dtype)


_BINARY_CACHE = PlanCache(
    "semantics.binary_rules",
    4096,
    "binary op, operand dtypes and shapes -> result shape and dtypes (Elementwise)",
)
_binary_rule_of = _BINARY_CACHE.get  # bound once (a dict subclass's method)


def binary(op: str, a: Any, b: Any, name: str | None = None) -> Elementwise:
    """Rule of a binary elementwise op; ``a``/``b`` are arrays (``shape``, ``dtype``), NumPy
    scalars (strong) or Python scalars (weak). ``name`` is the op errors name (default ``op``)."""
    # The rule is a pure function of the op, dtypes and shapes: two-array calls are memoized
    # because they are the hot path of every operator.
    key = None
    if type(getattr(a, "dtype", None)) is dt.DType and type(getattr(b, "dtype", None)) is dt.DType:
        # dtype names, not DTypes: DType.__hash__ is a Python method, a str hash is cached
        key = (op, a.dtype.name, b.dtype.name, a.shape, b.shape)
        cached = _binary_rule_of(key)
        if cached is not None:
            _BINARY_CACHE.hits += 1
            return cached
    spec = _binary_rule(op, a, b, name or op)
    if key is not None:
        _BINARY_CACHE.remember(key, spec)
    return spec


def _binary_rule(op: str, a: Any, b: Any, label: str) -> Elementwise:
    rule = BINARY_OPS.get(op)
    if rule is None:
        raise ValueError(f"unknown binary op {op!r}")
    compute = dt.result_type(a, b, op=label)
    if compute.kind == "c":
        if not _COMPLEX_RULE[op]:
            raise _refuse_complex(label, compute.name)
        shape = _layout.broadcast_shapes(_shape_of(a), _shape_of(b), op=label)
        return Elementwise(shape, dt.bool_ if rule == "comparison" else compute, compute)
    if rule == "comparison" and compute.kind in "iu":
        # A Python int outside the array's range still compares exactly (as NumPy 2): in a
        # dtype that holds both.
        compute = _comparison_dtype(compute, a, b)
    for x in (a, b):
        dt.check_scalar_fits(x, compute, label)
    shape = _layout.broadcast_shapes(_shape_of(a), _shape_of(b), op=label)
    if rule == "comparison":
        return Elementwise(shape, dt.bool_, compute)
    if rule == "integer" and compute.kind not in "biu":
        raise DTypeError(f"{label}: needs integer or bool operands, got {compute.name}")
    if rule == "shift" and compute.kind not in "iu":
        raise DTypeError(f"{label}: needs integer operands, got {compute.name}")
    if label in _NO_HALF and compute in _HALF_TYPES:
        raise DTypeError(f"{label}: not supported for {compute.name}; cast to float32 first")
    if compute is dt.bool_ and rule == "arithmetic_no_bool":
        raise DTypeError(
            f"{label}: not supported for two bool operands; use logical operations or cast first"
        )
    if rule == "float" or (rule == "true_divide" and compute.kind != "f"):
        compute = float_result(compute) if rule == "float" else dt.float64
    return Elementwise(shape, compute, compute)


def _comparison_dtype(compute: dt.DType, a: Any, b: Any) -> dt.DType:
    """``compute``, or int64 / float64 where a weak Python int operand lies outside it."""
    for x in (a, b):
        if not dt.scalar_fits(x, compute):
            fits64 = dt.scalar_fits(x, dt.int64) and compute is not dt.uint64
            return dt.int64 if fits64 else dt.float64
    return compute


def where(cond: Any, a: Any, b: Any) -> Elementwise:
    """``where(cond, a, b)``: cond is any dtype (nonzero is true); a, b promote as in add."""
    compute = dt.result_type(a, b, op="where")
    for x in (a, b):
        dt.check_scalar_fits(x, compute, "where")
    if dt.is_weak_scalar(cond):
        cond_shape: Shape = ()
    else:
        dt.result_type(cond, op="where")  # validates the dtype
        cond_shape = _shape_of(cond)
    shape = _layout.broadcast_shapes(cond_shape, _shape_of(a), _shape_of(b), op="where")
    return Elementwise(shape, compute, compute)


def inplace(op: str, dst_shape: Shape, dst_dtype: dt.DType, spec: Elementwise) -> None:
    """Check an in-place op ``dst op= other``: the result must broadcast to ``dst`` and cast
    to its dtype under NumPy's ``same_kind`` rule."""
    if spec.shape != dst_shape:
        raise ShapeError(
            f"{op}: the result of shape {spec.shape} cannot be stored in place into an array of "
            f"shape {dst_shape}"
        )
    if not dt.can_cast(spec.dtype, dst_dtype, "same_kind"):
        raise DTypeError(
            f"{op}: cannot store a {spec.dtype.name} result in place into a {dst_dtype.name} array "
            "(same_kind casting); use an out-of-place operation or astype()"
        )


# --- reductions --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reduction:
    """Result of a reduction rule.

    Attributes:
        axes: the reduced axes, sorted, non-negative.
        shape: the output shape the user sees.
        keep_shape: the output shape with reduced axes kept as 1 (what backends write).
        dtype: the output dtype; accumulate: the dtype the sums run in.
    """

    axes: tuple[int, ...]
    shape: Shape
    keep_shape: Shape
    dtype: dt.DType
    accumulate: dt.DType


def _reduced_shapes(shape: Shape, axes: tuple[int, ...], keepdims: bool) -> tuple[Shape, Shape]:
    keep = tuple(1 if i in axes else d for i, d in enumerate(shape))
    out = keep if keepdims else tuple(d for i, d in enumerate(shape) if i not in axes)
    return out, keep


def reduction(
    op: str,
    shape: Shape,
    dtype: dt.DType,
    axis: Any = None,
    keepdims: bool = False,
    ddof: Any = 0,
    out_dtype: Any = None,
) -> Reduction:
    """Rule of a ``reduce`` op of the reduction table over ``axis`` (None, int, tuple, negative
    allowed): its result rule (the table's ``result``) or ``out_dtype`` where the op takes
    ``dtype=``."""
    entry = REDUCTIONS.get(op)
    if entry is None or entry.kind != "reduce":
        raise ValueError(f"unknown reduction {op!r}")
    if dtype.kind == "c" and not entry.complex:
        raise _refuse_complex(op, dtype.name)
    axes = normalize_axes(axis, len(shape), op)
    if not entry.empty:
        for a in axes:
            if shape[a] == 0:
                raise ShapeError(
                    f"{op}: zero-size axis {a} of shape {shape} has no identity; "
                    f"{op} of an empty selection is undefined"
                )
    rule = entry.result
    if out_dtype is not None:
        if not entry.dtype:
            raise TypeError(f"{op}: takes no dtype argument")
        out = dt.as_dtype(out_dtype, op)
        if dtype.kind == "c" and out.kind != "c":
            raise DTypeError(
                f"{op}: cannot accumulate a {dtype.name} array in {out.name}; expected a "
                "complex dtype"
            )
    elif rule == "sum":
        out = (dt.uint64 if dtype.kind == "u" else dt.int64) if dtype.kind in "biu" else dtype
    elif rule == "float":
        out = dt.float64 if dtype.kind in "biu" else dtype
    elif rule == "bool":
        out = dt.bool_
    else:
        out = dtype
    if entry.ddof:
        try:
            operator.index(ddof)
        except TypeError:
            if not isinstance(ddof, float):
                raise DTypeError(f"{op}: ddof must be a number, got {ddof!r}") from None
    out_shape, keep = _reduced_shapes(shape, axes, keepdims)
    if rule == "bool":
        acc = dt.bool_
    elif out.kind in "biu" and rule == "sum":  # integer sums and products wrap in 64 bits
        acc = dt.uint64 if out.kind == "u" else dt.int64
    else:
        acc = accumulate_dtype(out)
    return Reduction(axes, out_shape, keep, out, acc)


def arg_reduction(
    op: str, shape: Shape, dtype: dt.DType, axis: Any = None, keepdims: bool = False
) -> Reduction:
    """Rule of ``argmax``/``argmin``: ``axis`` None (flat index) or one int; int64 result."""
    if op not in ARG_REDUCE_OPS:
        raise ValueError(f"unknown arg reduction {op!r}")
    if dtype.kind == "c":
        raise _refuse_complex(op, dtype.name)
    if isinstance(axis, (tuple, list)):
        raise ShapeError(f"{op}: axis must be None or an int, got {axis!r}")
    axes = normalize_axes(axis, len(shape), op)
    if any(shape[a] == 0 for a in axes) or (axis is None and _layout.numel(shape) == 0):
        raise ShapeError(f"{op}: attempt to get {op} of an empty sequence (shape {shape})")
    out_shape, keep = _reduced_shapes(shape, axes, keepdims)
    return Reduction(axes, out_shape, keep, dt.int64, dtype)


def softmax(op: str, shape: Shape, dtype: dt.DType, axis: Any) -> tuple[int, dt.DType]:
    """Rule of ``softmax``/``log_softmax``: one axis; floating output (see module notes)."""
    if len(shape) == 0:
        raise ShapeError(f"{op}: needs an array of at least 1 dimension, got shape ()")
    if dtype.kind == "c":
        raise _refuse_complex(op, dtype.name)
    return normalize_axis(axis, len(shape), op), float_result(dtype)


# --- matmul ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Matmul:
    """Result of the matmul rule.

    Operands are seen as stacks of matrices ``(*batch, m, k) @ (*batch, k, n)`` after the
    transpose flags and NumPy's 1-D promotion; ``shape`` is what the user gets back (1-D
    operands drop their added dimension again).
    """

    batch: Shape
    m: int
    n: int
    k: int
    shape: Shape
    dtype: dt.DType
    a_vector: bool
    b_vector: bool


def matmul(
    a_shape: Shape,
    a_dtype: dt.DType,
    b_shape: Shape,
    b_dtype: dt.DType,
    transpose_a: bool = False,
    transpose_b: bool = False,
) -> Matmul:
    """Rule of ``matmul``: NumPy's matmul with transpose flags on the last two axes."""
    for s, name in ((a_shape, "first"), (b_shape, "second")):
        if len(s) == 0:
            raise ShapeError(
                f"matmul: the {name} operand is 0-dimensional (shape ()); matmul needs "
                "at least 1 dimension"
            )
    for d in (a_dtype, b_dtype):
        if d.kind == "b":
            raise DTypeError(
                f"matmul: operands must be numeric (integers or floats), got "
                f"{a_dtype.name} and {b_dtype.name}; cast with astype()"
            )
    dtype = dt.promote_types(a_dtype, b_dtype)
    a_vec, b_vec = len(a_shape) == 1, len(b_shape) == 1
    a2 = (1,) + a_shape if a_vec else a_shape
    b2 = b_shape + (1,) if b_vec else b_shape
    if transpose_a and not a_vec:
        a2 = a2[:-2] + (a2[-1], a2[-2])
    if transpose_b and not b_vec:
        b2 = b2[:-2] + (b2[-1], b2[-2])
    m, k = a2[-2], a2[-1]
    k2, n = b2[-2], b2[-1]
    if k != k2:
        ta = " (transposed)" if transpose_a else ""
        tb = " (transposed)" if transpose_b else ""
        raise ShapeError(
            f"matmul: shapes {a_shape}{ta} and {b_shape}{tb} do not align ({k} != {k2})"
        )
    try:
        batch = _layout.broadcast_shapes(a2[:-2], b2[:-2], op="matmul")
    except ShapeError:
        raise ShapeError(
            f"matmul: batch dimensions {a2[:-2]} and {b2[:-2]} of shapes {a_shape} and {b_shape} "
            "cannot be broadcast together"
        ) from None
    shape = batch + ((m,) if not a_vec else ()) + ((n,) if not b_vec else ())
    return Matmul(batch, m, n, k, shape, dtype, a_vec, b_vec)


# --- joining -----------------------------------------------------------------------------------


def concatenate(
    shapes: Sequence[Shape], dtypes: Sequence[dt.DType], axis: Any, op: str = "concatenate"
) -> tuple[Shape, int, dt.DType]:
    """Rule of ``concatenate``: same ndim, equal sizes off ``axis``; promoted dtype."""
    if not shapes:
        raise ShapeError(f"{op}: needs at least one array")
    first = shapes[0]
    if len(first) == 0:
        raise ShapeError(f"{op}: zero-dimensional arrays cannot be concatenated")
    ax = normalize_axis(axis, len(first), op)
    total = 0
    for i, s in enumerate(shapes):
        if len(s) != len(first):
            raise ShapeError(
                f"{op}: all arrays must have the same number of dimensions; array 0 has shape "
                f"{first} and array {i} has shape {s}"
            )
        for d in range(len(s)):
            if d != ax and s[d] != first[d]:
                raise ShapeError(
                    f"{op}: sizes must match except along axis {ax}; array 0 has shape {first} "
                    f"and array {i} has shape {s}"
                )
        total += s[ax]
    out = first[:ax] + (total,) + first[ax + 1 :]
    return out, ax, dt.result_type(*dtypes, op=op)


def stack(
    shapes: Sequence[Shape], dtypes: Sequence[dt.DType], axis: Any
) -> tuple[Shape, int, dt.DType]:
    """Rule of ``stack``: equal shapes; a new axis at ``axis`` (may be ``ndim``)."""
    if not shapes:
        raise ShapeError("stack: needs at least one array")
    first = shapes[0]
    for i, s in enumerate(shapes):
        if s != first:
            raise ShapeError(
                f"stack: all arrays must have the same shape; array 0 has shape {first} and "
                f"array {i} has shape {s}"
            )
    ax = normalize_axis(axis, len(first) + 1, "stack")
    out = first[:ax] + (len(shapes),) + first[ax:]
    return out, ax, dt.result_type(*dtypes, op="stack")
