"""Front end of the fused normalizations over the last dimension: ``ignis.nn.layer_norm``,
``rms_norm`` and their backward functions.

Argument checks, dtype rules and output allocation live here; the backend hook then runs one
fused pass (see ``layer_norm``/``rms_norm`` in ``_backend.py``).

Dtypes: ``x`` is any floating dtype; statistics (``mean``, ``rstd``) and weight/bias gradients are
float32, or float64 for float64 ``x``. ``weight``/``bias`` have ``x``'s dtype, or float32 for
float16/bfloat16 ``x`` (a float32 master copy). ``grad_y`` has ``x``'s dtype, or float32 for
16-bit ``x``; ``grad_x`` comes back in ``grad_y``'s dtype.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

from .. import _dtypes as dt
from .._errors import DeviceMismatchError, DTypeError, ShapeError
from . import _creation
from .array import NvArray

__all__ = [
    "layer_norm",
    "layer_norm_backward",
    "rms_norm",
    "rms_norm_backward",
    "stats_dtype",
]

_HALF = (dt.float16, dt.bfloat16)


def stats_dtype(dtype: dt.DType) -> dt.DType:
    """The dtype statistics and sums of ``dtype`` data are kept in: float64 for float64, else
    float32."""
    return dt.float64 if dtype == dt.float64 else dt.float32


def _companions(dtype: dt.DType) -> tuple[dt.DType, ...]:
    """Dtypes allowed next to ``dtype`` data (weights, incoming gradients)."""
    return (dtype, dt.float32) if dtype in _HALF else (dtype,)


def _names(dtypes: tuple[dt.DType, ...]) -> str:
    return " or ".join(d.name for d in dtypes)


def check_input(x: Any, op: str, what: str = "x") -> NvArray:
    """``x`` as a floating NvArray of at least one dimension with a non-empty last one."""
    if not isinstance(x, NvArray):
        raise TypeError(f"{op}: {what} must be an NvArray, got {type(x).__name__}")
    if x.dtype.kind != "f":
        raise DTypeError(
            f"{op}: {what} must be floating (float16, bfloat16, float32, float64), "
            f"got {x.dtype.name}"
        )
    if x.ndim < 1 or x.shape[-1] == 0:
        raise ShapeError(
            f"{op}: {what} of shape {x.shape} has no last dimension to normalize over "
            "(expected at least 1 dimension, the last one non-empty)"
        )
    return x


def check_like(
    a: Any, x: NvArray, op: str, what: str, shape: tuple[int, ...], dtypes: tuple[dt.DType, ...]
) -> NvArray:
    """``a`` as an NvArray on ``x``'s device with ``shape`` and one of ``dtypes``, contiguous."""
    # Identity first (devices and dtypes are shared objects): these checks run for every
    # argument of every normalization, forward and backward.
    if a.__class__ is not NvArray and not isinstance(a, NvArray):
        raise TypeError(f"{op}: {what} must be an NvArray, got {type(a).__name__}")
    if a._device is not x._device and a._device != x._device:
        raise DeviceMismatchError(
            f"{op}: {what} is on {a.device} but x is on {x.device}; move it with .to(device)"
        )
    if a._shape != shape:
        raise ShapeError(f"{op}: {what} has shape {a.shape}, expected {shape}")
    if a._dtype is not dtypes[0] and a._dtype not in dtypes:
        raise DTypeError(
            f"{op}: {what} has dtype {a.dtype.name}, expected {_names(dtypes)} "
            f"(with {x.dtype.name} data)"
        )
    return a if a.is_contiguous else a.clone()


def _param(p: Any, x: NvArray, op: str, what: str) -> NvArray | None:
    if p is None:
        return None
    return check_like(p, x, op, what, (x.shape[-1],), _companions(x.dtype))


def _eps(eps: Any, op: str) -> float:
    if (
        isinstance(eps, bool)
        or not isinstance(eps, numbers.Real)
        or not math.isfinite(eps)
        or eps < 0
    ):
        raise ValueError(f"{op}: eps must be a finite number >= 0, got {eps!r}")
    return float(eps)


def _rows(a: NvArray, n: int) -> NvArray:
    """A contiguous array as ``(rows, n)`` (``n`` > 0 divides its size)."""
    if not a.is_contiguous:
        a = a.clone()
    shape = a._shape
    if len(shape) == 2 and shape[1] == n:
        return a
    # Any shape of a contiguous array is a view with contiguous strides: no reshape planning.
    size = a._dtype.itemsize
    return a._view(a._offset, (math.prod(shape) // n, n), (n * size, size))


def _flat(a: NvArray) -> NvArray:
    """``a`` as one dimension (a view when contiguous)."""
    shape = a._shape
    if len(shape) == 1:
        return a
    if a.is_contiguous:
        return a._view(a._offset, (math.prod(shape),), (a._dtype.itemsize,))
    return a.reshape(-1)


def _zeros(shape: tuple[int, ...], dtype: dt.DType, like: NvArray) -> NvArray:
    out = _creation._new(shape, dtype, like._device)
    like._backend.fill(out, 0.0)
    return out


def layer_norm(
    x: NvArray, weight: NvArray | None = None, bias: NvArray | None = None, eps: float = 1e-5
) -> tuple[NvArray, NvArray, NvArray]:
    """Layer normalization over the last dimension, fused: ``(y, mean, rstd)``.

    ``y = (x - mean) * rstd * weight + bias`` with ``mean`` the row mean and
    ``rstd = 1 / sqrt(var + eps)`` (``var`` the biased variance, as PyTorch); ``y`` has ``x``'s
    dtype and shape, ``mean``/``rstd`` have shape ``x.shape[:-1]`` (float32; float64 for
    float64 ``x``). ``weight``/``bias`` (optional) have shape ``(x.shape[-1],)``.

    Example::

        >>> y, mean, rstd = ignis.nn.layer_norm(x, weight, bias, eps=1e-5)
    """
    op = "layer_norm"
    x = check_input(x, op)
    w = _param(weight, x, op, "weight")
    b = _param(bias, x, op, "bias")
    if w is not None and b is not None and w.dtype != b.dtype:
        raise DTypeError(
            f"{op}: weight ({w.dtype.name}) and bias ({b.dtype.name}) must have the same dtype"
        )
    e = _eps(eps, op)
    n, lead, sd = x.shape[-1], x.shape[:-1], stats_dtype(x.dtype)
    y = _creation._new(x.shape, x.dtype, x._device)
    mean = _creation._new(lead, sd, x._device)
    rstd = _creation._new(lead, sd, x._device)
    if x.numel:
        x._backend.kernels.layer_norm(_rows(y, n), _flat(mean), _flat(rstd), _rows(x, n), w, b, e)
    return y, mean, rstd


def rms_norm(
    x: NvArray, weight: NvArray | None = None, eps: float = 1e-6
) -> tuple[NvArray, NvArray]:
    """RMS normalization over the last dimension, fused: ``(y, rstd)``.

    ``y = x * rstd * weight`` with ``rstd = 1 / sqrt(mean(x^2) + eps)`` per row (shape
    ``x.shape[:-1]``, float32; float64 for float64 ``x``).

    Example::

        >>> y, rstd = ignis.nn.rms_norm(x, weight, eps=1e-6)
    """
    op = "rms_norm"
    x = check_input(x, op)
    w = _param(weight, x, op, "weight")
    e = _eps(eps, op)
    n, lead = x.shape[-1], x.shape[:-1]
    y = _creation._new(x.shape, x.dtype, x._device)
    rstd = _creation._new(lead, stats_dtype(x.dtype), x._device)
    if x.numel:
        x._backend.kernels.rms_norm(_rows(y, n), _flat(rstd), _rows(x, n), w, e)
    return y, rstd


def _backward_args(
    op: str, grad_y: Any, x: Any, stats: list[tuple[str, Any]], weight: Any
) -> tuple[NvArray, NvArray, list[NvArray], NvArray | None]:
    x = check_input(x, op)
    g = check_like(grad_y, x, op, "grad_y", x.shape, _companions(x.dtype))
    sd = stats_dtype(x.dtype)
    checked = [check_like(s, x, op, name, x.shape[:-1], (sd,)) for name, s in stats]
    return x, g, checked, _param(weight, x, op, "weight")


def layer_norm_backward(
    grad_y: NvArray,
    x: NvArray,
    mean: NvArray,
    rstd: NvArray,
    weight: NvArray | None = None,
    *,
    grad_input: bool = True,
    grad_weight: bool | None = None,
    grad_bias: bool | None = None,
) -> tuple[NvArray | None, NvArray | None, NvArray | None]:
    """Gradients of :func:`layer_norm` from its saved ``mean`` and ``rstd``:
    ``(grad_x, grad_weight, grad_bias)``.

    ``grad_x`` (in ``grad_y``'s dtype) is computed when ``grad_input``; ``grad_weight`` when
    ``grad_weight`` is true (default: when ``weight`` is given) and ``grad_bias`` when
    ``grad_bias`` is true (default: as ``grad_weight``); each is None otherwise. The parameter
    gradients have shape ``(x.shape[-1],)`` in float32 (float64 for float64 ``x``) and are summed
    over the rows in a fixed order (the same bits on every run).

    Example::

        >>> gx, gw, gb = ignis.nn.layer_norm_backward(gy, x, mean, rstd, weight)
    """
    op = "layer_norm_backward"
    x, g, (m, r), w = _backward_args(op, grad_y, x, [("mean", mean), ("rstd", rstd)], weight)
    want_w = (weight is not None) if grad_weight is None else bool(grad_weight)
    want_b = want_w if grad_bias is None else bool(grad_bias)
    n, sd = x.shape[-1], stats_dtype(x.dtype)
    gx = _creation._new(x.shape, g.dtype, x._device) if grad_input else None
    if not x.numel:
        gw = _zeros((n,), sd, x) if want_w else None
        gb = _zeros((n,), sd, x) if want_b else None
        return gx, gw, gb
    gw = _creation._new((n,), sd, x._device) if want_w else None
    gb = _creation._new((n,), sd, x._device) if want_b else None
    if gx is not None or gw is not None or gb is not None:
        x._backend.kernels.layer_norm_backward(
            None if gx is None else _rows(gx, n),
            gw,
            gb,
            _rows(g, n),
            _rows(x, n),
            _flat(m),
            _flat(r),
            w,
        )
    return gx, gw, gb


def rms_norm_backward(
    grad_y: NvArray,
    x: NvArray,
    rstd: NvArray,
    weight: NvArray | None = None,
    *,
    grad_input: bool = True,
    grad_weight: bool | None = None,
) -> tuple[NvArray | None, NvArray | None]:
    """Gradients of :func:`rms_norm` from its saved ``rstd``: ``(grad_x, grad_weight)``.

    As :func:`layer_norm_backward`: ``grad_x`` when ``grad_input``, ``grad_weight`` (float32, or
    float64 for float64 ``x``; deterministic) when ``grad_weight`` (default: when ``weight`` is
    given), None otherwise.

    Example::

        >>> gx, gw = ignis.nn.rms_norm_backward(gy, x, rstd, weight)
    """
    op = "rms_norm_backward"
    x, g, (r,), w = _backward_args(op, grad_y, x, [("rstd", rstd)], weight)
    want_w = (weight is not None) if grad_weight is None else bool(grad_weight)
    n, sd = x.shape[-1], stats_dtype(x.dtype)
    gx = _creation._new(x.shape, g.dtype, x._device) if grad_input else None
    if not x.numel:
        return gx, (_zeros((n,), sd, x) if want_w else None)
    gw = _creation._new((n,), sd, x._device) if want_w else None
    if gx is not None or gw is not None:
        x._backend.kernels.rms_norm_backward(
            None if gx is None else _rows(gx, n), gw, _rows(g, n), _rows(x, n), _flat(r), w
        )
    return gx, gw
