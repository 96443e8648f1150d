"""``ignis.fft``: the Array API standard's Fourier-transform extension (2024.12).

Functions, with the standard's signatures (NumPy's meanings), on arrays of one device: on the
CPU through ``numpy.fft``, on the GPU through cuFFT (the ``cufft-cu12`` / ``cufft-cu13``
extras; without it a GPU call raises :class:`~ignis._cufft.CufftNotFoundError` naming the
extra):

* complex transforms :func:`fft`, :func:`ifft`, :func:`fftn`, :func:`ifftn`;
* real input :func:`rfft`, :func:`rfftn` and their inverses :func:`irfft`, :func:`irfftn`;
* Hermitian input :func:`hfft`, :func:`ihfft`;
* :func:`fftfreq`, :func:`rfftfreq`, :func:`fftshift`, :func:`ifftshift`.

Dtypes: complex64 and complex128 in, the same out (a real floating input of the complex
transforms is taken as complex of its precision, as NumPy does); the real transforms take
float32/float64 and give the complex dtype of that precision, their inverses the real one.
float16, bfloat16, integers and bool are refused with a :class:`~ignis.DTypeError` (convert
first: cuFFT's half-precision transforms take only powers of two).

``n`` (``s``) crops or zero-pads the input along the transformed axes; ``norm`` is
``"backward"`` (the inverse scaled by ``1/n``, the default), ``"ortho"`` (both by
``1/sqrt(n)``) or ``"forward"`` (the forward by ``1/n``). The n-dimensional transforms run one
batched 1-D transform per axis. Results are new arrays (a transposed view where the axis was
not the last); the GPU versions queue on the current stream and never wait for it.

Example::

    >>> x = ignis.asarray([1.0, 2.0, 0.0, -1.0])
    >>> ignis.fft.rfft(x).tolist()
    [(2+0j), (1-3j), 0j]
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any

from .. import _dtypes as dt
from .._errors import DTypeError, ShapeError
from . import _creation, _manipulation
from .array import NvArray

__all__ = [
    "fft",
    "ifft",
    "fftn",
    "ifftn",
    "rfft",
    "irfft",
    "rfftn",
    "irfftn",
    "hfft",
    "ihfft",
    "fftfreq",
    "rfftfreq",
    "fftshift",
    "ifftshift",
]

_NORMS = ("backward", "ortho", "forward")
_TO_COMPLEX = {dt.float32: dt.complex64, dt.float64: dt.complex128}
_TO_REAL = {dt.complex64: dt.float32, dt.complex128: dt.float64}
_SWAP = {"backward": "forward", "ortho": "ortho", "forward": "backward"}


# --- arguments ---------------------------------------------------------------------------------


def _array(x: Any, op: str) -> NvArray:
    if not isinstance(x, NvArray):
        raise TypeError(f"{op}: x must be an NvArray, got {type(x).__name__}")
    if x.ndim == 0:
        raise ShapeError(f"{op}: x must have at least one dimension, got a 0-d array")
    return x


def _complex(x: NvArray, op: str) -> NvArray:
    """``x`` as complex64/complex128 (a float32/float64 input converted)."""
    d = x.dtype
    if d in _TO_REAL:
        return x
    if d in _TO_COMPLEX:
        return x.astype(_TO_COMPLEX[d])
    raise DTypeError(
        f"{op}: x has dtype {d.name}; expected a complex (complex64, complex128) or real "
        "floating (float32, float64) array"
    )


def _real(x: NvArray, op: str) -> NvArray:
    if x.dtype in _TO_COMPLEX:
        return x
    raise DTypeError(
        f"{op}: x has dtype {x.dtype.name}; expected a real floating array (float32, float64)"
    )


def _norm(norm: Any, op: str) -> str:
    if norm not in _NORMS:
        raise ValueError(f"{op}: norm must be one of {_NORMS}, got {norm!r}")
    return norm


def _axis(x: NvArray, axis: Any, op: str) -> int:
    try:
        a = operator.index(axis)
    except TypeError:
        raise TypeError(f"{op}: axis must be an int, got {type(axis).__name__}") from None
    if not -x.ndim <= a < x.ndim:
        raise ValueError(f"{op}: axis {a} is out of range for an array of {x.ndim} dimensions")
    return a % x.ndim


def _points(n: Any, op: str, what: str = "n") -> int:
    try:
        v = operator.index(n)
    except TypeError:
        raise TypeError(f"{op}: {what} must be an int, got {type(n).__name__}") from None
    if v < 1:
        raise ValueError(f"{op}: {what} must be at least 1, got {v}")
    return v


def _axes_sizes(x: NvArray, s: Any, axes: Any, op: str) -> tuple[list[int], list[int | None]]:
    """The transformed axes (normalized) and their sizes (None: the input's) of an n-D call."""
    if axes is None:
        axes_l = list(range(x.ndim)) if s is None else list(range(x.ndim - len(s), x.ndim))
    else:
        axes_l = [_axis(x, a, op) for a in axes]
    if len(set(axes_l)) != len(axes_l):
        raise ValueError(f"{op}: axes must be distinct, got {tuple(axes)}")
    if s is None:
        return axes_l, [None] * len(axes_l)
    s = list(s)
    if len(s) != len(axes_l):
        raise ValueError(f"{op}: s has {len(s)} sizes for {len(axes_l)} axes")
    # (-1: the whole input along that axis, as the standard allows)
    sizes = [None if operator.index(v) == -1 else _points(v, op, "s[i]") for v in s]
    return axes_l, sizes


def _scale(n: int, norm: str, forward: bool) -> float | None:
    """The factor a transform of ``n`` points gets for ``norm`` (None: 1)."""
    if norm == "ortho":
        return 1.0 / math.sqrt(n)
    if (norm == "backward") != forward:
        return 1.0 / n
    return None


# --- the pieces --------------------------------------------------------------------------------


def _resized(x: NvArray, axis: int, n: int) -> NvArray:
    """``x`` cropped or zero-padded to ``n`` points along ``axis``."""
    size = x.shape[axis]
    if size == n:
        return x
    if size > n:
        return x[(slice(None),) * axis + (slice(0, n),)]
    shape = x.shape[:axis] + (n,) + x.shape[axis + 1 :]
    out = _creation.zeros(shape, dtype=x.dtype, device=x.device)
    out[(slice(None),) * axis + (slice(0, size),)] = x
    return out


def _rows(x: NvArray, axis: int, private: bool = False) -> tuple[NvArray, tuple[int, ...]]:
    """``x`` with ``axis`` moved last, as a contiguous ``(batch, n)`` array, and that moved
    shape; ``private``: a copy even where ``x`` is already laid out so."""
    moved = _manipulation.moveaxis(x, axis, -1)
    if private or not moved.is_contiguous:
        moved = moved.clone()
    n = moved.shape[-1]
    return moved.reshape(-1, n), moved.shape


def _restored(out: NvArray, moved: tuple[int, ...], axis: int) -> NvArray:
    return _manipulation.moveaxis(out.reshape(moved), -1, axis)


def _scaled(x: NvArray, factor: float | None) -> NvArray:
    return x if factor is None else x * factor


def _empty_result(x: NvArray, axis: int, n: int, dtype: dt.DType) -> NvArray:
    shape = x.shape[:axis] + (n,) + x.shape[axis + 1 :]
    return _creation.zeros(shape, dtype=dtype, device=x.device)


def _c2c(x: NvArray, axis: int, n: int, forward: bool) -> NvArray:
    """The unnormalized transform of complex ``x`` along ``axis`` at ``n`` points."""
    x = _resized(x, axis, n)
    if x.numel == 0:
        return _empty_result(x, axis, n, x.dtype)
    rows, moved = _rows(x, axis)
    out = _creation.empty(rows.shape, dtype=x.dtype, device=x.device)
    x._backend.kernels.fft_c2c(out, rows, forward)
    return _restored(out, moved, axis)


def _r2c(x: NvArray, axis: int, n: int) -> NvArray:
    x = _resized(x, axis, n)
    half = n // 2 + 1
    cdt = _TO_COMPLEX[x.dtype]
    if x.numel == 0:
        return _empty_result(x, axis, half, cdt)
    rows, moved = _rows(x, axis)
    out = _creation.empty((rows.shape[0], half), dtype=cdt, device=x.device)
    x._backend.kernels.fft_r2c(out, rows)
    return _restored(out, moved[:-1] + (half,), axis)


def _c2r(x: NvArray, axis: int, n: int) -> NvArray:
    x = _resized(x, axis, n // 2 + 1)
    rdt = _TO_REAL[x.dtype]
    if x.numel == 0:
        return _empty_result(x, axis, n, rdt)
    rows, moved = _rows(x, axis, private=True)  # (the transform may overwrite its input)
    out = _creation.empty((rows.shape[0], n), dtype=rdt, device=x.device)
    x._backend.kernels.fft_c2r(out, rows)
    return _restored(out, moved[:-1] + (n,), axis)


# --- one axis ----------------------------------------------------------------------------------


def fft(x: NvArray, /, *, n: int | None = None, axis: int = -1, norm: str = "backward") -> NvArray:
    """The 1-D discrete Fourier transform along ``axis``. Example: ``ignis.fft.fft(x)``."""
    op = "fft.fft"
    x = _complex(_array(x, op), op)
    a = _axis(x, axis, op)
    m = x.shape[a] if n is None else _points(n, op)
    return _scaled(_c2c(x, a, m, True), _scale(m, _norm(norm, op), True))


def ifft(x: NvArray, /, *, n: int | None = None, axis: int = -1, norm: str = "backward") -> NvArray:
    """The 1-D inverse discrete Fourier transform along ``axis``."""
    op = "fft.ifft"
    x = _complex(_array(x, op), op)
    a = _axis(x, axis, op)
    m = x.shape[a] if n is None else _points(n, op)
    return _scaled(_c2c(x, a, m, False), _scale(m, _norm(norm, op), False))


def rfft(x: NvArray, /, *, n: int | None = None, axis: int = -1, norm: str = "backward") -> NvArray:
    """The 1-D transform of real ``x``: the ``n // 2 + 1`` non-negative frequencies."""
    op = "fft.rfft"
    x = _real(_array(x, op), op)
    a = _axis(x, axis, op)
    m = x.shape[a] if n is None else _points(n, op)
    return _scaled(_r2c(x, a, m), _scale(m, _norm(norm, op), True))


def irfft(
    x: NvArray, /, *, n: int | None = None, axis: int = -1, norm: str = "backward"
) -> NvArray:
    """The inverse of :func:`rfft`: ``n`` real points (default ``2 * (m - 1)`` for ``m`` input
    points) from the non-negative frequencies."""
    op = "fft.irfft"
    x = _complex(_array(x, op), op)
    a = _axis(x, axis, op)
    m = (
        _points(2 * (x.shape[a] - 1), op, "the output length 2 * (m - 1)")
        if n is None
        else (_points(n, op))
    )
    return _scaled(_c2r(x, a, m), _scale(m, _norm(norm, op), False))


def hfft(x: NvArray, /, *, n: int | None = None, axis: int = -1, norm: str = "backward") -> NvArray:
    """The transform of a Hermitian-symmetric signal given by its first half: real output of
    ``n`` points (default ``2 * (m - 1)``)."""
    op = "fft.hfft"
    x = _complex(_array(x, op), op)
    return irfft(x.conj(), n=n, axis=axis, norm=_SWAP[_norm(norm, op)])


def ihfft(
    x: NvArray, /, *, n: int | None = None, axis: int = -1, norm: str = "backward"
) -> NvArray:
    """The inverse of :func:`hfft`: the first half of the spectrum of real ``x``."""
    op = "fft.ihfft"
    x = _real(_array(x, op), op)
    return rfft(x, n=n, axis=axis, norm=_SWAP[_norm(norm, op)]).conj()


# --- several axes ------------------------------------------------------------------------------


def _cnd(x: NvArray, s: Any, axes: Any, norm: str, forward: bool, op: str) -> NvArray:
    x = _complex(_array(x, op), op)
    norm = _norm(norm, op)
    ax, sizes = _axes_sizes(x, s, axes, op)
    for a, size in zip(ax, sizes, strict=True):
        m = x.shape[a] if size is None else size
        x = _scaled(_c2c(x, a, m, forward), _scale(m, norm, forward))
    return x


def fftn(
    x: NvArray,
    /,
    *,
    s: Sequence[int] | None = None,
    axes: Sequence[int] | None = None,
    norm: str = "backward",
) -> NvArray:
    """The n-dimensional transform over ``axes`` (default: all, or the last ``len(s)``)."""
    return _cnd(x, s, axes, norm, True, "fft.fftn")


def ifftn(
    x: NvArray,
    /,
    *,
    s: Sequence[int] | None = None,
    axes: Sequence[int] | None = None,
    norm: str = "backward",
) -> NvArray:
    """The n-dimensional inverse transform over ``axes``."""
    return _cnd(x, s, axes, norm, False, "fft.ifftn")


def rfftn(
    x: NvArray,
    /,
    *,
    s: Sequence[int] | None = None,
    axes: Sequence[int] | None = None,
    norm: str = "backward",
) -> NvArray:
    """The n-dimensional transform of real ``x``: the last axis halved as :func:`rfft` does."""
    op = "fft.rfftn"
    x = _real(_array(x, op), op)
    norm = _norm(norm, op)
    ax, sizes = _axes_sizes(x, s, axes, op)
    if not ax:
        raise ValueError(f"{op}: at least one axis must be transformed, got axes={axes!r}")
    last = x.shape[ax[-1]] if sizes[-1] is None else sizes[-1]
    out = _scaled(_r2c(x, ax[-1], last), _scale(last, norm, True))
    for a, size in zip(ax[:-1], sizes[:-1], strict=True):
        m = out.shape[a] if size is None else size
        out = _scaled(_c2c(out, a, m, True), _scale(m, norm, True))
    return out


def irfftn(
    x: NvArray,
    /,
    *,
    s: Sequence[int] | None = None,
    axes: Sequence[int] | None = None,
    norm: str = "backward",
) -> NvArray:
    """The inverse of :func:`rfftn`; the last axis gives ``s[-1]`` real points (default
    ``2 * (m - 1)``)."""
    op = "fft.irfftn"
    x = _complex(_array(x, op), op)
    norm = _norm(norm, op)
    ax, sizes = _axes_sizes(x, s, axes, op)
    if not ax:
        raise ValueError(f"{op}: at least one axis must be transformed, got axes={axes!r}")
    for a, size in zip(ax[:-1], sizes[:-1], strict=True):
        m = x.shape[a] if size is None else size
        x = _scaled(_c2c(x, a, m, False), _scale(m, norm, False))
    a = ax[-1]
    if sizes[-1] is None:
        last = _points(2 * (x.shape[a] - 1), op, "the output length 2 * (m - 1)")
    else:
        last = sizes[-1]
    return _scaled(_c2r(x, a, last), _scale(last, norm, False))


# --- frequencies and shifts ----------------------------------------------------------------


def _freq_dtype(dtype: Any, op: str) -> dt.DType:
    d = dt.default_float if dtype is None else dt.as_dtype(dtype, op)
    if d not in _TO_COMPLEX:
        raise DTypeError(f"{op}: dtype must be float32 or float64, got {d.name}")
    return d


def fftfreq(n: int, /, *, d: float = 1.0, dtype: Any = None, device: Any = None) -> NvArray:
    """The sample frequencies of :func:`fft` at ``n`` points spaced ``d``: ``[0, 1, ...,
    -2, -1] / (d * n)`` (default float dtype). Example: ``ignis.fft.fftfreq(8, d=0.1)``."""
    op = "fft.fftfreq"
    n = _points(n, op)
    f = _freq_dtype(dtype, op)
    k = _creation.arange(n, dtype=dt.int64, device=device)
    k = k - (k >= (n + 1) // 2).astype(dt.int64) * n
    return (k.astype(dt.float64) * (1.0 / (d * n))).astype(f)


def rfftfreq(n: int, /, *, d: float = 1.0, dtype: Any = None, device: Any = None) -> NvArray:
    """The sample frequencies of :func:`rfft` at ``n`` points: ``[0, 1, ..., n // 2] / (d * n)``."""
    op = "fft.rfftfreq"
    n = _points(n, op)
    f = _freq_dtype(dtype, op)
    k = _creation.arange(n // 2 + 1, dtype=dt.float64, device=device)
    return (k * (1.0 / (d * n))).astype(f)


def _shifted(x: NvArray, axes: Any, sign: int, op: str) -> NvArray:
    if not isinstance(x, NvArray):
        raise TypeError(f"{op}: x must be an NvArray, got {type(x).__name__}")
    if axes is None:
        ax = list(range(x.ndim))
    elif isinstance(axes, int):
        ax = [_axis(x, axes, op)]
    else:
        ax = [_axis(x, a, op) for a in axes]
    if not ax:
        return x
    shifts = tuple(sign * (x.shape[a] // 2) for a in ax)
    return _manipulation.roll(x, shifts, axis=tuple(ax))


def fftshift(x: NvArray, /, *, axes: int | Sequence[int] | None = None) -> NvArray:
    """``x`` with the zero frequency moved to the middle of each of ``axes`` (default all)."""
    return _shifted(x, axes, 1, "fft.fftshift")


def ifftshift(x: NvArray, /, *, axes: int | Sequence[int] | None = None) -> NvArray:
    """The inverse of :func:`fftshift`."""
    return _shifted(x, axes, -1, "fft.ifftshift")
