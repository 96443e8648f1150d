"""The reduction table: every reduction of ignis (and the row-wise softmaxes), declared once.

An entry (:class:`ReductionOp`) holds one op's name, kind, result dtype rule, NumPy reference
(which is the CPU implementation), CUDA combining op, docstring and derivative. Everything else
is derived from the table:

* the function ``ignis.<name>``, its place in ``ignis.__all__`` and the :class:`~ignis.NvArray`
  method (``_ops``; the method calls the front end's common body directly, no call between);
* the names the front end's rules accept (``_semantics.REDUCE_OPS`` and ``ARG_REDUCE_OPS``)
  and the result dtype and accumulation dtype of each (``result``: see below);
* the CPU backend's computation: ``numpy`` of the input converted to the accumulation dtype;
* the CUDA backend's kernels: ``cuda`` names the combining op of ``cuda_src/reduce.cuh`` and
  how its result is finished (:class:`CudaReduce`);
* the ``Tensor`` method, the ``ignis_autograd`` function and its export, and the derivative
  rule the backward walk runs (``ignis_autograd``);
* the parametrization of the reduction tests (every op x float dtype x axes x device against
  NumPy in float64, gradcheck).

Kinds and their signatures (the same for the function, the NvArray method and the Tensor
method, whose first parameter is the array):

* ``reduce``: ``(x, axis=None, keepdims=False)``; an op with ``ddof`` takes
  ``(x, axis=None, ddof=0, keepdims=False, correction=None)`` (``correction`` is the Array API's
  name of ``ddof``) and one with ``dtype`` ``(x, axis=None, keepdims=False, dtype=None)``;
  ``axis`` None (all), an int or a tuple, negative allowed.
* ``arg``: ``(x, axis=None, keepdims=False)``; ``axis`` None (an index into the flattened
  array) or one int; int64 indices, outside any graph.
* ``softmax``: ``(x, axis=-1)``; one axis; the result has the input's shape.

Result rules (``result``): ``sum``: bool and signed integers give int64, unsigned integers
uint64, floats keep their dtype (``dtype=`` chooses); ``float``: integers give float64, floats
keep theirs; ``same``: the input's dtype; ``bool``: bool. float16/bfloat16 accumulate in float32.

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
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, NamedTuple

import numpy as np

from .. import _dtypes as dt

__all__ = [
    "ReductionOp", "CudaReduce", "REDUCTIONS", "reduction_ops", "KINDS", "RESULTS", "grad_like"
]

#: kind -> the parameters after the array (see the module notes).
KINDS: dict[str, str] = {
    "reduce": "axis=None, keepdims=False",
    "arg": "axis=None, keepdims=False",
    "softmax": "axis=-1",
}
#: The result dtype rules (module notes).
RESULTS = ("sum", "float", "same", "bool")


class CudaReduce(NamedTuple):
    """How the CUDA backend computes a ``reduce`` op with the ops of ``cuda_src/reduce.cuh``.

    Attributes:
        functor: the combining op (``SumOp``, ``ProdOp``, ``MaxOp``, ...).
        on: ``accumulate``: the op runs in the accumulation dtype (sums, products); ``work``:
            in the input's work type (extremes and truth tests compare values as they are).
        finish: ``one``: the combined value as it is; ``count``: divided by the number of
            elements (mean); ``deviations``: a second pass, of ``functor``, over the squared
            deviations from the mean, divided by ``N - ddof`` (var, std).
    """

    functor: str
    on: str = "accumulate"
    finish: str = "one"


@dataclass(frozen=True, eq=False)
class ReductionOp:
    """One reduction (see the module notes for what each field drives).

    Attributes:
        name: the public name: ``ignis.<name>``, ``ignis_autograd.<name>``, the NvArray and
            Tensor method, and the op string the backends receive.
        kind: ``reduce``, ``arg`` or ``softmax`` (module notes).
        numpy: the reference: ``numpy(x, axis, keepdims, ddof)``, for tests of a float64 array
            (``axis`` and ``keepdims`` as the op takes them; ``ddof`` 0 for ops without one);
            the CPU backend runs it on the input in the accumulation dtype.
        result: the result dtype rule of a ``reduce`` op (module notes).
        cuda: how the CUDA backend computes a ``reduce`` op.
        empty: an empty selection is allowed (False: there is no identity, as for max).
        doc: the docstring of the function and the methods.
        grad: the derivative (module notes); None: not differentiable (argmax, argmin).
        saves: builds ``grad``'s context (module notes).
        fresh: ``grad`` returns new buffers only.
        ddof: the op takes ``ddof`` and ``correction`` (var, std).
        dtype: the op takes ``dtype`` (sum, prod).
        log: a ``softmax`` kind's log form.
        complex: the op takes complex64/complex128 input (the Array API's sum, prod, mean,
            all, any); the others refuse it with a DTypeError naming the op.
    """

    name: str
    kind: str
    numpy: Callable[..., Any]
    doc: str
    grad: Callable[..., tuple[Any, ...]] | None = None
    saves: Callable[..., tuple[Any, ...]] | None = None
    fresh: bool = True
    result: str = "same"
    cuda: CudaReduce | None = None
    empty: bool = True
    ddof: bool = False
    dtype: bool = False
    log: bool = False
    complex: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(
                f"reduction {self.name}: kind {self.kind!r} is not one of {tuple(KINDS)}"
            )
        if (self.grad is None) != (self.saves is None):
            raise ValueError(f"reduction {self.name}: grad and saves come together")
        if (self.ddof or self.dtype) and self.kind != "reduce":
            raise ValueError(f"reduction {self.name}: only a 'reduce' op takes ddof or dtype")
        if self.kind == "reduce" and (self.result not in RESULTS or self.cuda is None):
            raise ValueError(
                f"reduction {self.name}: a 'reduce' op needs a result rule in {RESULTS} and cuda"
            )

    @property
    def signature(self) -> str:
        """The parameters of the function (the methods' too, the array first)."""
        if self.ddof:
            return "x, axis=None, ddof=0, keepdims=False, correction=None"
        if self.dtype:
            return "x, axis=None, keepdims=False, dtype=None"
        return "x, " + KINDS[self.kind]

    def __repr__(self) -> str:
        return f"<ReductionOp {self.name} ({self.kind})>"


# --- NumPy references -------------------------------------------------------------------------


def _np_reduce(fn: Callable[..., Any]) -> Callable[..., Any]:
    return lambda x, axis, keepdims, ddof: fn(x, axis=axis, keepdims=keepdims)


def _quiet(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` without NumPy's warnings for an empty selection or N - ddof <= 0 (the results,
    NaN and Inf, say it; a kernel cannot warn either)."""

    def reference(x, axis, keepdims, ddof):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return fn(x, axis=axis, ddof=ddof, keepdims=keepdims)

    return reference


_np_var = _quiet(np.var)
_np_std = _quiet(np.std)
_np_mean = _quiet(lambda x, axis, ddof, keepdims: np.mean(x, axis=axis, keepdims=keepdims))


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


def _std(g, need, x, mean_keep, denom, out_keep):
    # d std = d var / (2 std)
    scale = 1.0 / denom if denom > 0 else math.inf
    return ((x - mean_keep) * (g.reshape(out_keep.shape) / out_keep * scale),)


def _prod(g, need, x, out_keep):
    # d prod / dx_i = prod / x_i (inputs with zeros: the product of the others is not formed;
    # the gradient there is NaN/inf as 0 / 0, a documented limit)
    return (g.reshape(out_keep.shape) * out_keep / x,)


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
        "bool/signed integers sum to int64, unsigned ones to uint64 (``dtype=`` chooses); "
        "float16/bfloat16 accumulate in float32.\n"
        "Example: ``ignis.sum(x, axis=(0, -1), keepdims=True)``.",
        _sum, lambda x, out, axes, keep, ddof: (x.shape, keep), fresh=False,
        result="sum", cuda=CudaReduce("SumOp"), dtype=True, complex=True,
    ),
    ReductionOp(
        "prod", "reduce", _np_reduce(np.prod),
        "Product over ``axis`` (None: all; int or tuple, negative allowed); of nothing, 1.\n\n"
        "bool/integers multiply in int64 (uint64 for unsigned, wrapping around); ``dtype=`` "
        "chooses. The gradient divides the product by each element (not defined at zeros).",
        _prod, lambda x, out, axes, keep, ddof: (x, out.reshape(keep)),
        result="sum", cuda=CudaReduce("ProdOp"), dtype=True, complex=True,
    ),
    ReductionOp(
        "mean", "reduce", _np_mean,
        "Arithmetic mean over ``axis`` (integers give float64; an empty selection gives NaN).",
        _mean, lambda x, out, axes, keep, ddof: (x.shape, keep, _count(x, out)), fresh=False,
        result="float", cuda=CudaReduce("SumOp", finish="count"), complex=True,
    ),
    ReductionOp(
        "max", "reduce", _np_reduce(np.max),
        "Maximum over ``axis``; NaN propagates; an empty selection is a ShapeError; ties share "
        "the gradient equally.",
        _extreme, lambda x, out, axes, keep, ddof: (x, out.reshape(keep), axes),
        cuda=CudaReduce("MaxOp", on="work"), empty=False,
    ),
    ReductionOp(
        "min", "reduce", _np_reduce(np.min),
        "Minimum over ``axis``; NaN propagates; an empty selection is a ShapeError; ties share "
        "the gradient equally.",
        _extreme, lambda x, out, axes, keep, ddof: (x, out.reshape(keep), axes),
        cuda=CudaReduce("MinOp", on="work"), empty=False,
    ),
    ReductionOp(
        "var", "reduce", _np_var,
        "Variance ``sum((x - mean)^2) / (N - ddof)`` over ``axis`` (N - ddof <= 0 gives "
        "Inf/NaN); ``correction`` is the Array API's name of ``ddof``.",
        _var,
        lambda x, out, axes, keep, ddof: (
            x, x.mean(axis=axes, keepdims=True), _count(x, out) - ddof
        ),
        result="float", cuda=CudaReduce("SqDevOp", finish="deviations"), ddof=True,
    ),
    ReductionOp(
        "std", "reduce", _np_std,
        "Standard deviation ``sqrt(var(x, axis, ddof))`` over ``axis``; ``correction`` is the "
        "Array API's name of ``ddof``.",
        _std,
        lambda x, out, axes, keep, ddof: (
            x, x.mean(axis=axes, keepdims=True), _count(x, out) - ddof, out.reshape(keep)
        ),
        result="float", cuda=CudaReduce("StdDevOp", finish="deviations"), ddof=True,
    ),
    ReductionOp(
        "all", "reduce", _np_reduce(np.all),
        "Whether every element over ``axis`` is nonzero (NaN counts as true); of nothing, True.",
        result="bool", cuda=CudaReduce("AllOp", on="work"), complex=True,
    ),
    ReductionOp(
        "any", "reduce", _np_reduce(np.any),
        "Whether some element over ``axis`` is nonzero (NaN counts as true); of nothing, False.",
        result="bool", cuda=CudaReduce("AnyOp", on="work"), complex=True,
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
