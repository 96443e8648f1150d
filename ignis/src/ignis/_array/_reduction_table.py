"""The reduction table: every reduction of ignis (and the row-wise softmaxes), declared once.

An entry (:class:`ReductionOp`) holds one op's name, kind, NumPy reference, docstring and
derivative. Everything else is derived from the table:

* the function ``ignis.<name>``, its place in ``ignis.__all__`` and the :class:`~ignis.NvArray`
  method (``_ops``; the method calls the front end's common body directly, no call between);
* the names the front end's rules accept (``_semantics.REDUCE_OPS`` and ``ARG_REDUCE_OPS``);
* the ``Tensor`` method, the ``ignis_autograd`` function and its export, and the derivative
  rule the backward walk runs (``ignis_autograd``);
* the parametrization of the reduction tests (every op x float dtype x axes x device against
  NumPy in float64, gradcheck).

Kinds and their signatures (the same for the function, the NvArray method and the Tensor
method, whose first parameter is the array):

* ``reduce``: ``(x, axis=None, keepdims=False)``, or ``(x, axis=None, ddof=0, keepdims=False)``
  for an op with ``ddof``; ``axis`` None (all), an int or a tuple, negative allowed.
* ``arg``: ``(x, axis=None, keepdims=False)``; ``axis`` None (an index into the flattened
  array) or one int; int64 indices, outside any graph.
* ``softmax``: ``(x, axis=-1)``; one axis; the result has the input's shape.

Derivatives: ``grad(g, need, *ctx)`` returns the input's gradient as a 1-tuple (an NvArray of
the input's shape); ``g`` is the output's gradient. ``ctx`` is what ``saves(x, out, axes, keep,
ddof)`` built in the forward pass from the input ``x`` (an NvArray), the result ``out``, the
reduced ``axes`` (sorted, non-negative; the one axis of a softmax), ``keep`` (x's shape with
those axes as 1) and ``ddof`` (0 for ops without one). ``fresh=True`` promises new buffers.

Example: what ``ignis.sum`` is made of::

    >>> from ignis._array._reduction_table import REDUCTIONS
    >>> op = REDUCTIONS["sum"]
    >>> op.kind, op.signature
    ('reduce', 'x, axis=None, keepdims=False')
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np

from .. import _dtypes as dt

__all__ = ["ReductionOp", "REDUCTIONS", "reduction_ops", "KINDS", "grad_like"]

#: kind -> the parameters after the array (see the module notes).
KINDS: dict[str, str] = {
    "reduce": "axis=None, keepdims=False",
    "arg": "axis=None, keepdims=False",
    "softmax": "axis=-1",
}


@dataclass(frozen=True, eq=False)
class ReductionOp:
    """One reduction (see the module notes for what each field drives).

    Attributes:
        name: the public name: ``ignis.<name>``, ``ignis_autograd.<name>``, the NvArray and
            Tensor method, and the op string the backends receive.
        kind: ``reduce``, ``arg`` or ``softmax`` (module notes).
        numpy: the reference: ``numpy(x, axis, keepdims, ddof)`` of a float64 array, for tests
            (``axis`` and ``keepdims`` as the op takes them; ``ddof`` 0 for ops without one).
        doc: the docstring of the function and the methods.
        grad: the derivative (module notes); None: not differentiable (argmax, argmin).
        saves: builds ``grad``'s context (module notes).
        fresh: ``grad`` returns new buffers only.
        ddof: the op takes ``ddof`` (var).
        log: a ``softmax`` kind's log form.
    """

    name: str
    kind: str
    numpy: Callable[..., Any]
    doc: str
    grad: Callable[..., tuple[Any, ...]] | None = None
    saves: Callable[..., tuple[Any, ...]] | None = None
    fresh: bool = True
    ddof: bool = False
    log: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(
                f"reduction {self.name}: kind {self.kind!r} is not one of {tuple(KINDS)}"
            )
        if (self.grad is None) != (self.saves is None):
            raise ValueError(f"reduction {self.name}: grad and saves come together")
        if self.ddof and self.kind != "reduce":
            raise ValueError(f"reduction {self.name}: only a 'reduce' op takes ddof")

    @property
    def signature(self) -> str:
        """The parameters of the function (the methods' too, the array first)."""
        if self.ddof:
            return "x, axis=None, ddof=0, keepdims=False"
        return "x, " + KINDS[self.kind]

    def __repr__(self) -> str:
        return f"<ReductionOp {self.name} ({self.kind})>"


# --- NumPy references -------------------------------------------------------------------------


def _np_reduce(fn: Callable[..., Any]) -> Callable[..., Any]:
    return lambda x, axis, keepdims, ddof: fn(x, axis=axis, keepdims=keepdims)


def _np_var(x, axis, keepdims, ddof):
    return np.var(x, axis=axis, ddof=ddof, keepdims=keepdims)


def _np_softmax(x, axis, keepdims, ddof, log=False):
    z = x - np.max(x, axis=axis, keepdims=True)
    lse = np.log(np.sum(np.exp(z), axis=axis, keepdims=True))
    return z - lse if log else np.exp(z - lse)


# --- saved contexts and derivatives -----------------------------------------------------------
# Rules compute with NvArray ops only: ``_ops``'s functions and the fused softmax backward pass
# (``_loss``), bound when ``_ops`` is loaded.


def _count(x, out):
    """The number of elements that went into each result (0 for an empty result)."""
    n = out.numel
    return x.numel // n if n else 0


def _sum(g, need, sx, keep):
    return (g.reshape(keep).broadcast_to(sx),)


def _mean(g, need, sx, keep, n):
    return ((g / n).reshape(keep).broadcast_to(sx),)


def _extreme(g, need, x, out_keep, axes):
    # The gradient is shared equally by all elements equal to the extreme (as torch.amax);
    # x == min plays the part x == max plays for max.
    hit = x == out_keep
    count = hit.sum(axis=axes, keepdims=True).astype(g.dtype)
    return (_ops.where(hit, g.reshape(out_keep.shape) / count, 0.0),)


def _var(g, need, x, mean_keep, denom):
    scale = 2.0 / denom if denom > 0 else math.inf  # N - ddof <= 0: the variance is inf/nan too
    return ((x - mean_keep) * (g.reshape(mean_keep.shape) * scale),)


_HALF_TYPES = (dt.float16, dt.bfloat16)


def grad_like(g, x):
    """``g`` in a dtype the fused backward kernels take next to ``x``: x's own, or float32 for
    16-bit x."""
    gd, xd = g.dtype, x.dtype
    if gd is xd or gd == xd or (xd in _HALF_TYPES and gd == dt.float32):
        return g
    return g.astype(x.dtype)


def _softmax(g, need, out, axis):
    # One fused row kernel (ignis.nn.softmax_backward): out * (g - sum(g * out)).
    return (_loss.softmax_backward(grad_like(g, out), out, axis=axis),)


def _log_softmax(g, need, out, axis):
    # One fused row kernel: g - exp(out) * sum(g).
    return (_loss.softmax_backward(grad_like(g, out), out, axis=axis, log=True),)


# --- the table --------------------------------------------------------------------------------

_OPS = (
    ReductionOp(
        "sum", "reduce", _np_reduce(np.sum),
        "Sum over ``axis`` (None: all; int or tuple, negative allowed).\n\n"
        "bool/integers sum to int64; float16/bfloat16 accumulate in float32.\n"
        "Example: ``ignis.sum(x, axis=(0, -1), keepdims=True)``.",
        _sum, lambda x, out, axes, keep, ddof: (x.shape, keep), fresh=False,
    ),
    ReductionOp(
        "mean", "reduce", _np_reduce(np.mean),
        "Arithmetic mean over ``axis`` (integers give float64; an empty selection gives NaN).",
        _mean, lambda x, out, axes, keep, ddof: (x.shape, keep, _count(x, out)), fresh=False,
    ),
    ReductionOp(
        "max", "reduce", _np_reduce(np.max),
        "Maximum over ``axis``; NaN propagates; an empty selection is a ShapeError; ties share "
        "the gradient equally.",
        _extreme, lambda x, out, axes, keep, ddof: (x, out.reshape(keep), axes),
    ),
    ReductionOp(
        "min", "reduce", _np_reduce(np.min),
        "Minimum over ``axis``; NaN propagates; an empty selection is a ShapeError; ties share "
        "the gradient equally.",
        _extreme, lambda x, out, axes, keep, ddof: (x, out.reshape(keep), axes),
    ),
    ReductionOp(
        "var", "reduce", _np_var,
        "Variance ``sum((x - mean)^2) / (N - ddof)`` over ``axis`` (N - ddof <= 0 gives "
        "Inf/NaN).",
        _var,
        lambda x, out, axes, keep, ddof: (
            x, x.mean(axis=axes, keepdims=True), _count(x, out) - ddof
        ),
        ddof=True,
    ),
    ReductionOp(
        "argmax", "arg", lambda x, axis, keepdims, ddof: np.argmax(x, axis=axis, keepdims=keepdims),
        "Index of the maximum along ``axis`` (None: into the flattened array); int64; first wins.",
    ),
    ReductionOp(
        "argmin", "arg", lambda x, axis, keepdims, ddof: np.argmin(x, axis=axis, keepdims=keepdims),
        "Index of the minimum along ``axis`` (None: into the flattened array); int64; first wins.",
    ),
    ReductionOp(
        "softmax", "softmax", _np_softmax,
        "``exp(x - max) / sum(exp(x - max))`` along ``axis`` (half types computed in float32).",
        _softmax, lambda x, out, axes, keep, ddof: (out, axes[0]),
    ),
    ReductionOp(
        "log_softmax", "softmax",
        lambda x, axis, keepdims, ddof: _np_softmax(x, axis, keepdims, ddof, log=True),
        "``x - max - log(sum(exp(x - max)))`` along ``axis``.",
        _log_softmax, lambda x, out, axes, keep, ddof: (out, axes[0]), log=True,
    ),
)

#: name -> op, in declaration order.
REDUCTIONS: dict[str, ReductionOp] = {op.name: op for op in _OPS}

#: The public, read-only view of the table: ``ignis.reduction_ops["var"].ddof is True``.
reduction_ops: Mapping[str, ReductionOp] = MappingProxyType(REDUCTIONS)

# The modules the rules compute with; they import this table (through _semantics), so _ops
# binds them once it is loaded.
_ops: Any = None
_loss: Any = None
