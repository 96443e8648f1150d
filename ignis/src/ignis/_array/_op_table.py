"""The op table: every element-wise op of ignis, declared once.

An entry (:class:`ElementwiseOp`) says all there is to know about one op: its name and arity, its
dtype rule, its NumPy reference (which is the CPU implementation), its CUDA functor, its
derivative and its documentation. Everything else is derived from the table:

* the function ``ignis.<name>`` and its place in ``ignis.__all__`` (``_ops``);
* the :class:`~ignis.NvArray` methods and operators (``_ops``);
* the dtype rule the front end applies (``_semantics.unary`` / ``binary``);
* the CPU backend's computation: ``numpy`` runs on operands already converted to the compute
  dtype (float32 for float16/bfloat16), and its result is rounded once into the output;
* the CUDA backend's kernels: ``ignis::ew::<functor>`` of ``cuda_src/elementwise.cuh``, whose
  ``apply`` runs in the compute dtype;
* the derivative ``ignis_autograd`` records, the ``Tensor`` method and the ``ignis_autograd``
  function;
* the parametrization of the op tests (every op x float dtype x layout x device against NumPy
  in float64, gradcheck, agreement with PyTorch).

Adding an element-wise op is one entry below, plus a functor in ``elementwise.cuh`` when no
existing one computes it.

Dtype rules (NumPy 2's; :mod:`ignis._dtypes` promotes, Python scalars are weak):

* ``float``: floating inputs keep their dtype; bool/int8/uint8 give float16, int16/uint16
  float32 and wider integers float64 (the loop NumPy picks for its ufuncs). For two operands,
  of the promoted dtype.
* ``numeric``: the dtype is kept; bool is refused.
* ``any``: the dtype is kept.
* ``integer``: integers and bool only, the (promoted) dtype kept (the bitwise ops).
* ``predicate``: bool out, computed in the input's dtype (``isnan``, ``logical_not``).
* ``shift``: integers only (no bool), the promoted dtype.
* ``arithmetic``: the promoted dtype.
* ``arithmetic_no_bool``: the promoted dtype; two bool operands are refused (as NumPy does).
* ``true_divide``: the promoted dtype if floating, else float64 (``int / int -> float64``).
* ``comparison``: bool out, computed in the promoted dtype.

Complex operands (``complex`` field): ``""`` (the default) refuses complex64/complex128 with a
DTypeError naming the op (the ops the Array API defines for real dtypes only: ordering
comparisons, rounding to integers, ``maximum``, ``atan2``, ...); ``"complex"``: complex operands
give a complex result (or bool for comparisons and predicates), computed as NumPy computes it on
the CPU and with the C99 Annex G special cases on CUDA; ``"real"``: a complex operand gives the
real dtype of its parts (``abs``, ``real``, ``imag``).

Derivatives: ``grad(g, need, *saved)`` returns one gradient (an NvArray of the input's shape, or
None) per input; ``g`` is the output's gradient and ``need[i]`` says whether input ``i`` wants
one. ``saved`` holds what ``saves`` names, in that order, then the values of ``params``:

* ``x`` (unary) / ``a``, ``b`` (binary): the operands (NvArrays, or Python scalars);
* ``out``: the result; ``sa``, ``sb``: the operands' shapes (binary rules unbroadcast to them);
* ``a_if_b``, ``b_if_a``, ``out_if_b``: kept only when the other operand wants a gradient (None
  otherwise): ``x * 0.5`` keeps nothing of ``x``.

``fresh=True`` promises new buffers that nothing else references (the backward walk may keep
them without a copy).

Example: what ``ignis.exp`` is made of::

    >>> from ignis._array._op_table import ELEMENTWISE
    >>> op = ELEMENTWISE["exp"]
    >>> op.arity, op.dtypes, op.functor
    (1, 'float', 'op_exp')
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

import numpy as np

from . import _cpu_math

__all__ = [
    "ElementwiseOp",
    "ELEMENTWISE",
    "elementwise_ops",
    "unbroadcast",
    "UNARY_RULES",
    "BINARY_RULES",
    "COMPLEX_RULES",
]

UNARY_RULES = ("float", "numeric", "any", "integer", "predicate")
BINARY_RULES = (
    "float", "arithmetic", "arithmetic_no_bool", "true_divide", "comparison", "integer", "shift"
)
COMPLEX_RULES = ("", "complex", "real")
_SAVES = {
    1: ("x", "out"),
    2: ("a", "b", "out", "sa", "sb", "a_if_b", "b_if_a", "out_if_b"),
}


@dataclass(frozen=True, eq=False)
class ElementwiseOp:
    """One element-wise op (see the module notes for what each field drives).

    Attributes:
        name: the public name: ``ignis.<name>``, ``ignis_autograd.<name>``, and the op string
            the backends receive.
        arity: 1 or 2.
        dtypes: the dtype rule (module notes).
        numpy: the reference: a NumPy function of operands in the compute dtype (and the
            ``params``, as keywords); the CPU backend runs it.
        functor: ``ignis::ew::<functor>`` in ``cuda_src/elementwise.cuh``; a mapping from a
            parameter's value to a functor where ``params`` chooses one (gelu).
        doc: the docstring of the function and the methods.
        grad: the derivative (module notes); None: not differentiable (comparisons).
        saves: what ``grad`` receives, in order (module notes).
        fresh: ``grad`` returns new buffers only.
        methods: the NvArray and Tensor methods that are this op (default: ``(name,)`` for
            ops without operators, none for those with one).
        operators: the dunder methods that are this op (``__add__``, ``__radd__``,
            ``__iadd__``, ...: reflected and in-place forms are told by their prefix).
        params: keyword options of the op: name -> the accepted values, default first.
        sample: a range of inputs on which the op is smooth and finite (for tests).
        torch: the PyTorch function for the agreement tests (default ``torch.<name>``; ``""``:
            none for real tensors).
        aliases: further names of the function (NumPy's: ``arccos`` for ``acos``).
        half: float16/bfloat16 are computed in float32 and rounded (False: refused, where
            that would give a wrong answer, as for ``nextafter``).
        complex: what a complex operand gives (module notes): ``""`` refused, ``"complex"``,
            ``"real"``.
        numpy_complex: the CPU reference for complex operands where ``numpy``'s special
            cases differ from the standard's (None: ``numpy`` serves complex operands too).
    """

    name: str
    arity: int
    dtypes: str
    numpy: Callable[..., Any]
    functor: str | Mapping[str, str]
    doc: str
    grad: Callable[..., tuple[Any, ...]] | None = None
    saves: tuple[str, ...] = ()
    fresh: bool = True
    methods: tuple[str, ...] | None = None
    operators: tuple[str, ...] = ()
    params: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    sample: tuple[float, float] = (-3.0, 3.0)
    torch: str | None = None
    aliases: tuple[str, ...] = ()
    half: bool = True
    complex: str = ""
    numpy_complex: Callable[..., Any] | None = None

    def __post_init__(self) -> None:
        rules = UNARY_RULES if self.arity == 1 else BINARY_RULES
        if self.dtypes not in rules:
            raise ValueError(f"op {self.name}: dtype rule {self.dtypes!r} is not one of {rules}")
        if self.complex not in COMPLEX_RULES:
            raise ValueError(
                f"op {self.name}: complex rule {self.complex!r} is not one of {COMPLEX_RULES}"
            )
        unknown = set(self.saves) - set(_SAVES[self.arity])
        if unknown:
            raise ValueError(
                f"op {self.name}: saves {sorted(unknown)} are not among {_SAVES[self.arity]}"
            )
        if self.methods is None:
            object.__setattr__(self, "methods", () if self.operators else (self.name,))

    def check_param(self, key: str, value: Any) -> Any:
        """``value`` if the option ``key`` accepts it; else a ValueError naming the op."""
        allowed = self.params[key]
        if value not in allowed:
            names = [repr(v) for v in allowed]
            listed = ", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else names[0]
            raise ValueError(f"{self.name}: {key} must be {listed}, got {value!r}")
        return value

    def operator_form(self, dunder: str) -> str:
        """``forward``, ``reflected`` or ``inplace``: what the operator ``dunder`` of this op
        is (``__rshift__`` is a forward operator, ``__rrshift__`` its reflected form)."""
        base = "__" + dunder[3:]
        if base in self.operators and dunder[2] in "ri":
            return "reflected" if dunder[2] == "r" else "inplace"
        return "forward"

    @property
    def defaults(self) -> dict[str, str]:
        """Each option's default value."""
        return {k: v[0] for k, v in self.params.items()}

    def __repr__(self) -> str:
        return f"<ElementwiseOp {self.name} ({self.arity}-ary, {self.dtypes})>"


def unbroadcast(grad: Any, shape: tuple[int, ...]) -> Any:
    """Sum ``grad`` over the axes broadcasting added or stretched, back to ``shape``."""
    if grad.shape == shape:
        return grad
    lead = grad.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(
        lead + i for i, d in enumerate(shape) if d == 1 and grad.shape[lead + i] != 1
    )
    return grad.sum(axis=axes, keepdims=True).reshape(shape) if axes else grad.reshape(shape)


def _shape(x: Any) -> tuple[int, ...]:
    return getattr(x, "shape", ())


def _pair(need: Any, ga: Any, gb: Any, sa: tuple[int, ...], sb: tuple[int, ...]) -> tuple[Any, Any]:
    """The two gradients of a binary op, each summed back to its operand's shape if wanted."""
    return (
        unbroadcast(ga(), sa) if need[0] else None,
        unbroadcast(gb(), sb) if need[1] else None,
    )


# --- NumPy references that are more than one NumPy function -----------------------------------


def _int_power(a: Any, b: Any) -> np.ndarray:
    """Integer power where a negative exponent gives the truncated ``1 // a**|b|``."""
    a, b = np.broadcast_arrays(np.asarray(a), np.asarray(b))
    neg = b < 0
    if not neg.any():
        return np.power(a, b)
    res = np.power(a, np.where(neg, 0, b))
    # 1 // a**|b| truncates to 1 for a == 1, to +-1 for a == -1 and to 0 for every other base.
    frac = np.where(a == 1, 1, 0)
    frac = np.where(a == -1, np.where(b % 2 == 0, 1, -1), frac)
    return np.where(neg, frac, res).astype(a.dtype, copy=False)


def _power(a: Any, b: Any) -> np.ndarray:
    return _int_power(a, b) if np.result_type(a, b).kind in "iu" else np.power(a, b)


def _relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, x.dtype.type(0))


def _rsqrt(x: np.ndarray) -> np.ndarray:
    return x.dtype.type(1) / np.sqrt(x)


def _reciprocal(x: np.ndarray) -> np.ndarray:
    return x.dtype.type(1) / x


def _imag(x: np.ndarray) -> np.ndarray:
    """The imaginary part; zeros for real dtypes (a new array: NumPy's is a read-only 0)."""
    return np.imag(x) if x.dtype.kind == "c" else np.zeros_like(x)


def _erf(x: np.ndarray) -> np.ndarray:
    return _cpu_math.erf(x).astype(x.dtype)


def _shift_count(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The operands broadcast, a count clipped into ``[0, bits)`` and where it was outside."""
    a, b = np.broadcast_arrays(np.asarray(a), np.asarray(b))
    bits = a.dtype.itemsize * 8
    wide = (b < 0) | (b >= bits)
    return a, np.where(wide, 0, b).astype(a.dtype), wide


def _left_shift(a: Any, b: Any) -> np.ndarray:
    """``a << b``; a count outside ``[0, bits)`` gives 0 (the same on every backend)."""
    a, b, wide = _shift_count(a, b)
    return np.where(wide, a.dtype.type(0), np.left_shift(a, b))


def _right_shift(a: Any, b: Any) -> np.ndarray:
    """``a >> b`` (arithmetic for signed types); a count outside ``[0, bits)`` gives 0, or -1
    for a negative ``a``."""
    a, b, wide = _shift_count(a, b)
    fill = np.where(a < 0, a.dtype.type(-1) if a.dtype.kind == "i" else 0, 0).astype(a.dtype)
    return np.where(wide, fill, np.right_shift(a, b))


# --- derivatives ------------------------------------------------------------------------------
# Rules compute with NvArray ops only: ``_ops``'s functions and the fused activation backward
# passes (``_act``), bound at the end of this module.


def _add(g, need, sa, sb):
    return (unbroadcast(g, sa) if need[0] else None, unbroadcast(g, sb) if need[1] else None)


def _subtract(g, need, sa, sb):
    return (unbroadcast(g, sa) if need[0] else None, unbroadcast(-g, sb) if need[1] else None)


def _multiply(g, need, a, b, sa, sb):
    return (
        unbroadcast(g * b, sa) if need[0] else None,
        unbroadcast(g * a, sb) if need[1] else None,
    )


def _divide(g, need, sa, b, out):
    g_b = g / b  # d(a/b)/da = 1/b, d(a/b)/db = -(a/b)/b
    return (
        unbroadcast(g_b, sa) if need[0] else None,
        unbroadcast(-(g_b * out), _shape(b)) if need[1] else None,
    )


def _power_grad(g, need, a, b, out):
    ga = gb = None
    if need[0]:
        if isinstance(b, (int, float)) and not isinstance(b, bool):
            # Scalar exponents (the common case): fewer kernels, and no 0 * inf at b == 0.
            if b == 0:
                ga = g * 0.0
            elif b == 1:
                ga = g.clone()
            elif b == 2:
                ga = g * (a * 2.0)
            else:
                ga = g * (a ** (b - 1) * b)
        else:
            # b * a**(b-1) is 0 * inf at a == b == 0: the limit 0 there (as PyTorch)
            ga = unbroadcast(_ops.where(b == 0, 0.0, g * (a ** (b - 1)) * b), _shape(a))
    if need[1]:
        if hasattr(a, "shape"):
            # d/db a**b = a**b log a; at a == 0 the limit is 0 (as PyTorch), not nan.
            gb = _ops.where(a == 0, 0.0, g * out * _ops.log(a))
        else:
            gb = g * out * (math.log(a) if a > 0 else math.nan)
        gb = unbroadcast(gb, _shape(b))
    return ga, gb


def _maximum(g, need, a, b):
    # Ties share the gradient equally (as PyTorch).
    ga = _ops.where(a > b, g, _ops.where(a == b, g * 0.5, 0.0))
    return _pair(need, lambda: ga, lambda: g - ga, _shape(a), _shape(b))


def _minimum(g, need, a, b):
    ga = _ops.where(a < b, g, _ops.where(a == b, g * 0.5, 0.0))
    return _pair(need, lambda: ga, lambda: g - ga, _shape(a), _shape(b))


def _atan2(g, need, a, b, sa, sb):
    # d atan2(a, b) = (b da - a db) / (a^2 + b^2)
    scale = g / (a * a + b * b)
    return _pair(need, lambda: scale * b, lambda: -(scale * a), sa, sb)


def _hypot(g, need, a, b, out, sa, sb):
    g_out = g / out  # d hypot = (a da + b db) / hypot
    return _pair(need, lambda: g_out * a, lambda: g_out * b, sa, sb)


def _copysign(g, need, a, out, sa, sb):
    # d copysign(a, b) / da = copysign(1, a) * copysign(1, b) = out / a; 0 at a == 0 and for b
    # (as PyTorch)
    return _pair(need, lambda: _ops.where(a == 0, 0.0, g * (out / a)), lambda: g * 0.0, sa, sb)


def _zero(g, need):
    # Piecewise constant (floor, sign, ...): zero almost everywhere (as PyTorch).
    return (g * 0.0,)


def _logaddexp_grad(g, need, a, b, out, sa, sb):
    return _pair(need, lambda: g * _ops.exp(a - out), lambda: g * _ops.exp(b - out), sa, sb)


def _remainder_grad(g, need, a, b, sa, sb):
    # a - b * floor(a / b): 1 for a, -floor(a / b) for b (as PyTorch)
    return _pair(need, lambda: g, lambda: -(g * _ops.floor_divide(a, b)), sa, sb)


def _neg(g, need):
    return (-g,)


def _abs(g, need, x):
    return (_ops.where(x > 0, g, _ops.where(x < 0, -g, 0.0)),)


_LN2 = math.log(2.0)
_LN10 = math.log(10.0)
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
_SQRT_2_PI = math.sqrt(2.0 / math.pi)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)

# The activations' rules are one fused kernel each (ignis.nn.*_backward) when the gradient's
# dtype is the saved array's, or float32 for a 16-bit one (the dtypes the backward walk hands
# over); any other pair keeps the composite formula, whose dtype promotion it then follows.
_FUSED_GRAD = {
    "float16": ("float16", "float32"),
    "bfloat16": ("bfloat16", "float32"),
    "float32": ("float32",),
    "float64": ("float64",),
}


def _fused(g, s):
    # (NvArrays only: on Tensors, a backward pass being recorded, the composite formula runs)
    return (
        g.__class__ is _ops.NvArray
        and g.dtype.name in _FUSED_GRAD.get(s.dtype.name, ())
        and g.shape == s.shape
    )


def _tanh(g, need, out):
    if _fused(g, out):
        return (_act.tanh_backward(g, out),)
    return (g * (1.0 - out * out),)


def _sigmoid(g, need, out):
    if _fused(g, out):
        return (_act.sigmoid_backward(g, out),)
    return (g * out * (1.0 - out),)


def _relu_grad(g, need, out):
    if _fused(g, out):
        return (_act.relu_backward(g, out),)
    return (_ops.where(out > 0, g, 0.0),)


def _gelu(g, need, x, approximate):
    if _fused(g, x):
        return (_act.gelu_backward(g, x, approximate=approximate),)
    if approximate == "tanh":
        x2 = x * x
        t = _ops.tanh((x + x2 * x * 0.044715) * _SQRT_2_PI)
        d = (t + 1.0) * 0.5 + x * (1.0 - t * t) * ((x2 * (3 * 0.044715) + 1.0) * (0.5 * _SQRT_2_PI))
    else:  # x * Phi(x): Phi(x) + x * phi(x)
        cdf = (_ops.erf(x * (1.0 / math.sqrt(2.0))) + 1.0) * 0.5
        d = cdf + x * _ops.exp(x * x * -0.5) * _INV_SQRT_2PI
    return (g * d,)


def _silu(g, need, x):
    if _fused(g, x):
        return (_act.silu_backward(g, x),)
    s = _ops.sigmoid(x)
    return (g * s * (x * (1.0 - s) + 1.0),)


# --- the table --------------------------------------------------------------------------------

_OPS = (
    # arithmetic (operators)
    ElementwiseOp(
        "add", 2, "arithmetic", np.add, "op_add",
        "``a + b`` with broadcasting. Example: ``ignis.add(x, 1.0)``.",
        _add, ("sa", "sb"), fresh=False, operators=("__add__", "__radd__", "__iadd__"),
    ),
    ElementwiseOp(
        "subtract", 2, "arithmetic_no_bool", np.subtract, "op_subtract",
        "``a - b`` with broadcasting.",
        _subtract, ("sa", "sb"), fresh=False, operators=("__sub__", "__rsub__", "__isub__"),
    ),
    ElementwiseOp(
        "multiply", 2, "arithmetic", np.multiply, "op_multiply",
        "``a * b`` with broadcasting.",
        _multiply, ("a_if_b", "b_if_a", "sa", "sb"),
        operators=("__mul__", "__rmul__", "__imul__"),
    ),
    ElementwiseOp(
        "divide", 2, "true_divide", np.true_divide, "op_divide",
        "``a / b`` (true division: integers give float64).",
        _divide, ("sa", "b", "out_if_b"), operators=("__truediv__", "__rtruediv__", "__itruediv__"),
        sample=(0.5, 3.0), torch="div",
    ),
    ElementwiseOp(
        "power", 2, "arithmetic_no_bool", _power, "op_power",
        "``a ** b`` (an integer base with a negative integer exponent gives the truncated "
        "``1 // a**|b|``: 1 for a == 1, +-1 for a == -1, else 0, because a kernel cannot raise "
        "per element).",
        _power_grad, ("a", "b", "out"), methods=("pow",),
        operators=("__pow__", "__rpow__", "__ipow__"), sample=(0.5, 2.0), torch="pow",
        aliases=("pow",),
    ),
    ElementwiseOp(
        "maximum", 2, "arithmetic", np.maximum, "op_maximum",
        "Elementwise maximum; NaN wins; at ties each side gets half the gradient.",
        _maximum, ("a", "b"),
    ),
    ElementwiseOp(
        "minimum", 2, "arithmetic", np.minimum, "op_minimum",
        "Elementwise minimum; NaN wins; at ties each side gets half the gradient.",
        _minimum, ("a", "b"),
    ),
    # comparisons
    ElementwiseOp("equal", 2, "comparison", np.equal, "op_equal",
                  "``a == b`` as a bool array.", operators=("__eq__",), torch="eq"),
    ElementwiseOp("not_equal", 2, "comparison", np.not_equal, "op_not_equal",
                  "``a != b`` as a bool array.", operators=("__ne__",), torch="ne"),
    ElementwiseOp("less", 2, "comparison", np.less, "op_less",
                  "``a < b`` as a bool array.", operators=("__lt__",), torch="lt"),
    ElementwiseOp("less_equal", 2, "comparison", np.less_equal, "op_less_equal",
                  "``a <= b`` as a bool array.", operators=("__le__",), torch="le"),
    ElementwiseOp("greater", 2, "comparison", np.greater, "op_greater",
                  "``a > b`` as a bool array.", operators=("__gt__",), torch="gt"),
    ElementwiseOp("greater_equal", 2, "comparison", np.greater_equal, "op_greater_equal",
                  "``a >= b`` as a bool array.", operators=("__ge__",), torch="ge"),
    # floor division and remainder (Python's signs: the remainder takes the divisor's)
    ElementwiseOp(
        "floor_divide", 2, "arithmetic_no_bool", np.floor_divide, "op_floor_divide",
        "``a // b``: the quotient rounded toward -inf (integers: ``n // 0 == 0``, as NumPy).",
        operators=("__floordiv__", "__rfloordiv__", "__ifloordiv__"), sample=(0.5, 3.0),
    ),
    ElementwiseOp(
        "remainder", 2, "arithmetic_no_bool", np.remainder, "op_remainder",
        "``a % b`` with the sign of ``b`` (integers: ``n % 0 == 0``, as NumPy).",
        _remainder_grad, ("a", "b", "sa", "sb"),
        operators=("__mod__", "__rmod__", "__imod__"), sample=(0.5, 3.0), aliases=("mod",),
    ),
    # bitwise (integers and bool)
    ElementwiseOp("bitwise_and", 2, "integer", np.bitwise_and, "op_bitwise_and",
                  "``a & b`` bit by bit (integers and bool).",
                  operators=("__and__", "__rand__", "__iand__")),
    ElementwiseOp("bitwise_or", 2, "integer", np.bitwise_or, "op_bitwise_or",
                  "``a | b`` bit by bit (integers and bool).",
                  operators=("__or__", "__ror__", "__ior__")),
    ElementwiseOp("bitwise_xor", 2, "integer", np.bitwise_xor, "op_bitwise_xor",
                  "``a ^ b`` bit by bit (integers and bool).",
                  operators=("__xor__", "__rxor__", "__ixor__")),
    ElementwiseOp(
        "bitwise_left_shift", 2, "shift", _left_shift, "op_left_shift",
        "``a << b`` (integers; a count outside ``[0, bits)`` gives 0).",
        operators=("__lshift__", "__rlshift__", "__ilshift__"), aliases=("left_shift",),
    ),
    ElementwiseOp(
        "bitwise_right_shift", 2, "shift", _right_shift, "op_right_shift",
        "``a >> b`` (integers; arithmetic for signed types; a count outside ``[0, bits)`` "
        "gives 0, or -1 for negative ``a``).",
        operators=("__rshift__", "__rrshift__", "__irshift__"), aliases=("right_shift",),
    ),
    # logical (any dtype: nonzero is true; bool out)
    ElementwiseOp("logical_and", 2, "comparison", np.logical_and, "op_logical_and",
                  "``a and b`` element by element, as a bool array (nonzero is true)."),
    ElementwiseOp("logical_or", 2, "comparison", np.logical_or, "op_logical_or",
                  "``a or b`` element by element, as a bool array (nonzero is true)."),
    ElementwiseOp("logical_xor", 2, "comparison", np.logical_xor, "op_logical_xor",
                  "``a != b`` of the truth values, as a bool array (nonzero is true)."),
    # floating functions of two operands
    ElementwiseOp(
        "atan2", 2, "float", np.arctan2, "op_atan2",
        "The angle of the point ``(b, a)``: ``arctan(a / b)`` in the quadrant of the signs, in "
        "radians in ``[-pi, pi]``. Example: ``ignis.atan2(y, x)``.",
        _atan2, ("a", "b", "sa", "sb"), sample=(0.5, 3.0), aliases=("arctan2",),
    ),
    ElementwiseOp(
        "hypot", 2, "float", np.hypot, "op_hypot",
        "``sqrt(a**2 + b**2)`` without overflow or underflow in between.",
        _hypot, ("a", "b", "out", "sa", "sb"), sample=(0.5, 3.0),
    ),
    ElementwiseOp(
        "copysign", 2, "float", np.copysign, "op_copysign",
        "``|a|`` with the sign of ``b`` (the sign bit: ``-0.0`` counts as negative).",
        _copysign, ("a", "out", "sa", "sb"),
    ),
    ElementwiseOp(
        "logaddexp", 2, "float", np.logaddexp, "op_logaddexp",
        "``log(exp(a) + exp(b))`` without overflow.",
        _logaddexp_grad, ("a", "b", "out", "sa", "sb"),
    ),
    ElementwiseOp(
        "nextafter", 2, "float", np.nextafter, "op_nextafter",
        "The next value after ``a`` toward ``b`` in the dtype (float32 and float64).",
        half=False,
    ),
    # unary
    ElementwiseOp(
        "negative", 1, "numeric", np.negative, "op_neg",
        "``-x`` (same dtype; unsigned integers wrap around).",
        _neg, (), methods=("neg", "negative"), operators=("__neg__",), torch="neg",
    ),
    ElementwiseOp(
        "abs", 1, "any", np.abs, "op_abs", "``|x|`` (same dtype; gradient 0 at 0).",
        _abs, ("x",), methods=("abs",), operators=("__abs__",),
    ),
    ElementwiseOp("exp", 1, "float", np.exp, "op_exp", "``e ** x``.",
                  lambda g, need, out: (g * out,), ("out",)),
    ElementwiseOp("log", 1, "float", np.log, "op_log",
                  "Natural logarithm (``-inf`` at 0, NaN below).",
                  lambda g, need, x: (g / x,), ("x",), sample=(0.5, 3.0)),
    ElementwiseOp("log1p", 1, "float", np.log1p, "op_log1p",
                  "``log(1 + x)``, accurate for small ``|x|`` (``-inf`` at -1, NaN below).",
                  lambda g, need, x: (g / (x + 1.0),), ("x",), sample=(-0.5, 3.0)),
    ElementwiseOp("log2", 1, "float", np.log2, "op_log2",
                  "Base-2 logarithm (``-inf`` at 0, NaN below).",
                  lambda g, need, x: (g / (x * _LN2),), ("x",), sample=(0.5, 3.0)),
    ElementwiseOp("log10", 1, "float", np.log10, "op_log10",
                  "Base-10 logarithm (``-inf`` at 0, NaN below).",
                  lambda g, need, x: (g / (x * _LN10),), ("x",), sample=(0.5, 3.0)),
    ElementwiseOp("expm1", 1, "float", np.expm1, "op_expm1",
                  "``e ** x - 1``, accurate for small ``|x|``.",
                  lambda g, need, out: (g * (out + 1.0),), ("out",)),
    ElementwiseOp("exp2", 1, "float", np.exp2, "op_exp2", "``2 ** x``.",
                  lambda g, need, out: (g * out * _LN2,), ("out",)),
    ElementwiseOp("sqrt", 1, "float", np.sqrt, "op_sqrt", "Square root (NaN below 0).",
                  lambda g, need, out: (g / (out * 2.0),), ("out",), sample=(0.5, 3.0)),
    ElementwiseOp("rsqrt", 1, "float", _rsqrt, "op_rsqrt", "``1 / sqrt(x)``.",
                  lambda g, need, out: (g * (out * out * out) * -0.5,), ("out",),
                  sample=(0.5, 3.0)),
    ElementwiseOp("sin", 1, "float", np.sin, "op_sin", "Sine (radians).",
                  lambda g, need, x: (g * _ops.cos(x),), ("x",)),
    ElementwiseOp("cos", 1, "float", np.cos, "op_cos", "Cosine (radians).",
                  lambda g, need, x: (-(g * _ops.sin(x)),), ("x",)),
    ElementwiseOp("tan", 1, "float", np.tan, "op_tan", "Tangent (radians).",
                  lambda g, need, out: (g * (out * out + 1.0),), ("out",), sample=(-1.0, 1.0)),
    ElementwiseOp("asin", 1, "float", np.arcsin, "op_asin",
                  "Inverse sine, in radians in ``[-pi/2, pi/2]`` (NaN outside ``[-1, 1]``).",
                  lambda g, need, x: (g * _ops.rsqrt(1.0 - x * x),), ("x",),
                  sample=(-0.9, 0.9), aliases=("arcsin",)),
    ElementwiseOp("acos", 1, "float", np.arccos, "op_acos",
                  "Inverse cosine, in radians in ``[0, pi]`` (NaN outside ``[-1, 1]``).",
                  lambda g, need, x: (-(g * _ops.rsqrt(1.0 - x * x)),), ("x",),
                  sample=(-0.9, 0.9), aliases=("arccos",)),
    ElementwiseOp("atan", 1, "float", np.arctan, "op_atan",
                  "Inverse tangent, in radians in ``[-pi/2, pi/2]``.",
                  lambda g, need, x: (g / (x * x + 1.0),), ("x",), aliases=("arctan",)),
    ElementwiseOp("sinh", 1, "float", np.sinh, "op_sinh", "Hyperbolic sine.",
                  lambda g, need, x: (g * _ops.cosh(x),), ("x",)),
    ElementwiseOp("cosh", 1, "float", np.cosh, "op_cosh", "Hyperbolic cosine.",
                  lambda g, need, x: (g * _ops.sinh(x),), ("x",)),
    ElementwiseOp("asinh", 1, "float", np.arcsinh, "op_asinh", "Inverse hyperbolic sine.",
                  lambda g, need, x: (g * _ops.rsqrt(x * x + 1.0),), ("x",),
                  aliases=("arcsinh",)),
    ElementwiseOp("acosh", 1, "float", np.arccosh, "op_acosh",
                  "Inverse hyperbolic cosine (NaN below 1).",
                  lambda g, need, x: (g * _ops.rsqrt(x * x - 1.0),), ("x",),
                  sample=(1.5, 3.0), aliases=("arccosh",)),
    ElementwiseOp("atanh", 1, "float", np.arctanh, "op_atanh",
                  "Inverse hyperbolic tangent (+-inf at +-1, NaN outside).",
                  lambda g, need, x: (g / (1.0 - x * x),), ("x",),
                  sample=(-0.9, 0.9), aliases=("arctanh",)),
    ElementwiseOp("square", 1, "numeric", np.square, "op_square",
                  "``x * x`` (same dtype; integers wrap around).",
                  lambda g, need, x: (g * (x * 2.0),), ("x",)),
    ElementwiseOp("reciprocal", 1, "float", _reciprocal, "op_reciprocal",
                  "``1 / x`` (integers give floats, as PyTorch; NumPy's would truncate).",
                  lambda g, need, out: (-(g * (out * out)),), ("out",), sample=(0.5, 3.0)),
    ElementwiseOp("positive", 1, "numeric", np.positive, "op_positive", "``+x`` (a copy).",
                  lambda g, need: (g,), (), fresh=False, operators=("__pos__",)),
    ElementwiseOp("conj", 1, "numeric", np.conj, "op_conj",
                  "The complex conjugate; a copy for real dtypes.",
                  lambda g, need: (g,), (), fresh=False, aliases=("conjugate",)),
    ElementwiseOp("real", 1, "numeric", np.real, "op_real",
                  "The real part; a copy for real dtypes.",
                  lambda g, need: (g,), (), fresh=False),
    ElementwiseOp("imag", 1, "numeric", _imag, "op_imag",
                  "The imaginary part; zeros for real dtypes.", _zero, (),
                  torch=""),  # torch.imag refuses real tensors
    # rounding and sign (integers come back as they are)
    ElementwiseOp("floor", 1, "numeric", np.floor, "op_floor",
                  "The largest integer ``<= x`` (same dtype).", _zero, (), sample=(0.1, 0.9)),
    ElementwiseOp("ceil", 1, "numeric", np.ceil, "op_ceil",
                  "The smallest integer ``>= x`` (same dtype).", _zero, (), sample=(0.1, 0.9)),
    ElementwiseOp("trunc", 1, "numeric", np.trunc, "op_trunc",
                  "``x`` rounded toward zero (same dtype).", _zero, (), sample=(0.1, 0.9)),
    ElementwiseOp("round", 1, "numeric", np.round, "op_round",
                  "``x`` rounded to the nearest integer, halves to even (same dtype).",
                  _zero, (), sample=(0.1, 0.4)),
    ElementwiseOp("sign", 1, "numeric", np.sign, "op_sign",
                  "-1, 0 or 1 by the sign of ``x`` (NaN stays NaN; same dtype); ``x / |x|`` "
                  "for complex ``x`` (0 at 0).",
                  _zero, (), sample=(0.5, 3.0)),
    # predicates (bool out)
    ElementwiseOp("isnan", 1, "predicate", np.isnan, "op_isnan", "Where ``x`` is NaN."),
    ElementwiseOp("isinf", 1, "predicate", np.isinf, "op_isinf", "Where ``x`` is +-inf."),
    ElementwiseOp("isfinite", 1, "predicate", np.isfinite, "op_isfinite",
                  "Where ``x`` is neither NaN nor +-inf."),
    ElementwiseOp("signbit", 1, "predicate", np.signbit, "op_signbit",
                  "Where the sign bit of ``x`` is set (``-0.0`` and negative NaNs too)."),
    ElementwiseOp("logical_not", 1, "predicate", np.logical_not, "op_logical_not",
                  "``not x`` element by element, as a bool array (nonzero is true)."),
    ElementwiseOp("bitwise_invert", 1, "integer", np.invert, "op_bitwise_invert",
                  "``~x`` bit by bit (integers; ``not`` for bool).",
                  operators=("__invert__",), aliases=("invert", "bitwise_not")),
    ElementwiseOp("tanh", 1, "float", np.tanh, "op_tanh", "Hyperbolic tangent.",
                  _tanh, ("out",)),
    ElementwiseOp("sigmoid", 1, "float", _cpu_math.sigmoid, "op_sigmoid",
                  "``1 / (1 + exp(-x))``, computed without overflow.", _sigmoid, ("out",)),
    ElementwiseOp("relu", 1, "numeric", _relu, "op_relu",
                  "``max(x, 0)`` (same dtype; NaN stays NaN; gradient 0 at 0).",
                  _relu_grad, ("out",)),
    ElementwiseOp(
        "gelu", 1, "float", _cpu_math.gelu, {"none": "op_gelu_erf", "tanh": "op_gelu_tanh"},
        "GELU ``x * Phi(x)`` (Phi: the normal CDF). ``approximate=\"tanh\"`` uses "
        "``0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3)))``.",
        _gelu, ("x",), params={"approximate": ("none", "tanh")},
        torch="nn.functional.gelu",
    ),
    ElementwiseOp("silu", 1, "float", _cpu_math.silu, "op_silu", "``x * sigmoid(x)``.",
                  _silu, ("x",), torch="nn.functional.silu"),
    ElementwiseOp("erf", 1, "float", _erf, "op_erf", "The error function.",
                  lambda g, need, x: (g * _ops.exp(x * x * -1.0) * _TWO_OVER_SQRT_PI,), ("x",)),
)

# The ops the Array API defines for complex operands, and what they give (the ``complex``
# field; module notes). Listed here rather than in each entry: one place says which part of
# the table takes complex numbers.
_COMPLEX = {
    **dict.fromkeys(
        (
            "add", "subtract", "multiply", "divide", "power", "equal", "not_equal",
            "negative", "positive", "square", "reciprocal", "conj", "sign", "round",
            "exp", "expm1", "log", "log1p", "log2", "log10", "sqrt",
            "sin", "cos", "tan", "asin", "acos", "atan",
            "sinh", "cosh", "tanh", "asinh", "acosh", "atanh",
            "isnan", "isinf", "isfinite",
        ),
        "complex",
    ),
    "abs": "real",
    "real": "real",
    "imag": "real",
}
# NumPy's complex expm1 and tanh miss some of the standard's special cases (_cpu_math fixes
# them; real operands keep NumPy's function, with no call in between).
_NUMPY_COMPLEX = {"expm1": _cpu_math.complex_expm1, "tanh": _cpu_math.complex_tanh}
_OPS = tuple(
    replace(op, complex=_COMPLEX.get(op.name, ""), numpy_complex=_NUMPY_COMPLEX.get(op.name))
    for op in _OPS
)

#: name -> op, in declaration order.
ELEMENTWISE: dict[str, ElementwiseOp] = {op.name: op for op in _OPS}

#: The public, read-only view of the table: ``ignis.elementwise_ops["exp"].dtypes == "float"``.
elementwise_ops: Mapping[str, ElementwiseOp] = MappingProxyType(ELEMENTWISE)

# The modules the rules compute with; they import the table (through _semantics), so _ops binds
# them once it is loaded.
_ops: Any = None
_act: Any = None
