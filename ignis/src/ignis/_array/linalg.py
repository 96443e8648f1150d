"""``ignis.linalg``: the Array API standard's linear-algebra extension (2024.12).

Functions, with the standard's signatures, on arrays of one device (the result stays there),
batched over every leading dimension (``(..., M, N)`` is a stack of matrices):

* factorizations and what is built on them, on the CPU through ``numpy.linalg`` and on the GPU
  through cuSOLVER (the ``cusolver-cu12`` / ``cusolver-cu13`` extras; without it a GPU call
  raises :class:`~ignis._cusolver.CusolverNotFoundError` naming the extra): :func:`cholesky`,
  :func:`det`, :func:`eigh`, :func:`eigvalsh`, :func:`inv`, :func:`qr`, :func:`slogdet`,
  :func:`solve`, :func:`svd`, :func:`svdvals`, and :func:`matrix_rank`, :func:`pinv`,
  :func:`matrix_power` (negative powers), :func:`matrix_norm` (``2``, ``-2``, ``"nuc"``);
* compositions of the array ops, on every backend: :func:`cross`, :func:`diagonal` (a view),
  :func:`outer`, :func:`trace`, :func:`vector_norm`, :func:`matrix_norm` (``"fro"``, ``1``,
  ``-1``, ``inf``, ``-inf``), :func:`matrix_power`;
* the main namespace's :func:`matmul`, :func:`tensordot`, :func:`vecdot` and
  :func:`matrix_transpose`, looked up there when first used.

Dtypes: factorizations take float32, float64, complex64 and complex128 on every backend (the
result has the input's dtype; mixed operands of :func:`solve` promote). float16 and bfloat16
are refused with a :class:`~ignis.DTypeError`, as PyTorch refuses low-precision dtypes for
factorizations; the compositions take them and compute in float32, rounding each result once
(norms) or as the element-wise ops do (cross, outer, trace). Integer and bool inputs are
refused where the standard asks for floating point.

Complex matrices (complex64, complex128) work on every backend (the CPU through
``numpy.linalg``, the GPU through cuSOLVER's C / Z routines: ``heevd`` for eigh, ``ungqr`` for
qr's Q), with the standard's real results where it has them, of the real dtype of matching
precision (``eigh``'s eigenvalues, singular values, ``slogdet``'s ``logabsdet``, every norm),
and conjugate transposes where the real case has transposes (``cholesky`` gives ``x = L L^H``
or, with ``upper=True``, ``x = U^H U``; ``eigh`` of Hermitian matrices; ``pinv``); ``slogdet``'s
``sign`` is a complex number of modulus 1 (0 for a singular matrix).

Errors: a matrix that cannot be factored (singular in :func:`inv` / :func:`solve`, not
positive-definite in :func:`cholesky`, no convergence in :func:`eigh` / :func:`svd`) raises
:class:`LinAlgError`, a subclass of ``numpy.linalg.LinAlgError`` (so of ``ValueError``), after
one synchronization, naming the function and the batch element; bad shapes raise
:class:`~ignis.ShapeError`, bad dtypes :class:`~ignis.DTypeError`.

Example::

    >>> a = ignis.asarray([[4.0, 1.0], [1.0, 3.0]])
    >>> ignis.linalg.cholesky(a).tolist()
    [[2.0, 0.0], [0.5, 1.6583123951777]]
    >>> w, v = ignis.linalg.eigh(a)
"""

from __future__ import annotations

import math
import operator
import sys
from typing import Any, NamedTuple

import numpy as np

from .. import _dtypes as dt
from .._errors import DeviceMismatchError, DTypeError, IgnisError, ShapeError
from . import _creation, _layout, _ops
from .array import NvArray

__all__ = [
    "cholesky",
    "cross",
    "det",
    "diagonal",
    "eigh",
    "eigvalsh",
    "inv",
    "matmul",  # noqa: F822 (looked up by __getattr__)
    "matrix_norm",
    "matrix_power",
    "matrix_rank",
    "matrix_transpose",  # noqa: F822 (looked up by __getattr__)
    "outer",
    "pinv",
    "qr",
    "slogdet",
    "solve",
    "svd",
    "svdvals",
    "tensordot",  # noqa: F822 (looked up by __getattr__)
    "trace",
    "vecdot",  # noqa: F822 (looked up by __getattr__)
    "vector_norm",
    "EighResult",
    "QRResult",
    "SlogdetResult",
    "SVDResult",
    "LinAlgError",
    "CusolverNotFoundError",  # noqa: F822 (looked up by __getattr__)
]

_HALF = (dt.float16, dt.bfloat16)
_FACTOR_DTYPES = (dt.float32, dt.float64, dt.complex64, dt.complex128)


class LinAlgError(IgnisError, np.linalg.LinAlgError):
    """A matrix could not be factored: singular (``inv``, ``solve``), not positive-definite
    (``cholesky``), or the algorithm did not converge (``eigh``, ``svd``). A
    ``numpy.linalg.LinAlgError`` (so a ``ValueError``) too, as NumPy raises."""


class EighResult(NamedTuple):
    """:func:`eigh`'s result: ``eigenvalues`` ``(..., M)``, ascending, and ``eigenvectors``
    ``(..., M, M)`` (the columns)."""

    eigenvalues: NvArray
    eigenvectors: NvArray


class QRResult(NamedTuple):
    """:func:`qr`'s result: ``Q`` with orthonormal columns and upper-triangular ``R``."""

    Q: NvArray
    R: NvArray


class SlogdetResult(NamedTuple):
    """:func:`slogdet`'s result: ``sign`` and ``logabsdet`` of the determinants."""

    sign: NvArray
    logabsdet: NvArray


class SVDResult(NamedTuple):
    """:func:`svd`'s result: ``U``, ``S`` (descending) and ``Vh`` with ``x = U diag(S) Vh``."""

    U: NvArray
    S: NvArray
    Vh: NvArray


# --- the main namespace's functions ------------------------------------------------------------

_ALIASES = ("matmul", "tensordot", "vecdot", "matrix_transpose")


def __getattr__(name: str) -> Any:
    # matmul, tensordot, vecdot and matrix_transpose are the main namespace's functions; they
    # are looked up there on first use (and kept), so this module does not depend on the order
    # in which the namespace's modules are imported.
    if name in _ALIASES:
        package = sys.modules[__name__.rpartition(".")[0]]
        fn = getattr(package, name, None)
        if fn is None:
            raise AttributeError(
                f"module 'ignis.linalg' has no attribute {name!r}: ignis.{name} is not "
                "available in this installation"
            )
        globals()[name] = fn
        return fn
    if name == "CusolverNotFoundError":  # raised by GPU factorizations without cuSOLVER
        from .._cusolver import CusolverNotFoundError

        return CusolverNotFoundError
    raise AttributeError(f"module 'ignis.linalg' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


# --- argument checks ---------------------------------------------------------------------------


def _array(x: Any, op: str) -> NvArray:
    if not isinstance(x, NvArray):
        raise TypeError(
            f"linalg.{op}: expected an NvArray, got {type(x).__name__}; convert with "
            "ignis.asarray"
        )
    return x


def _not_floating(x: NvArray, op: str, wanted: str) -> DTypeError:
    return DTypeError(f"linalg.{op}: expected {wanted}, got {x.dtype.name}")


def _factor_dtype(x: NvArray, op: str) -> NvArray:
    """``x`` when float32/float64/complex64/complex128 (:data:`_FACTOR_DTYPES`, every backend);
    a DTypeError naming ``op`` otherwise."""
    d = x._dtype
    if d in _FACTOR_DTYPES:
        return x
    if d in _HALF:
        raise DTypeError(
            f"linalg.{op}: {d.name} is not supported (factorizations run in float32 or "
            f"float64, as in PyTorch); convert first with x.astype('float32')"
        )
    raise _not_floating(
        x, op, "a floating-point array (float32, float64, complex64 or complex128)"
    )


def _floating(x: NvArray, op: str) -> NvArray:
    """``x`` when floating (16-bit and complex types included); a DTypeError naming ``op``
    otherwise."""
    if x._dtype.kind not in "fc":
        raise _not_floating(x, op, "a floating-point array")
    return x


def _real(d: dt.DType) -> dt.DType:
    """The dtype of a real result (eigenvalues, singular values, norms) of ``d`` matrices."""
    return dt.real_of(d)


def _conj_mT(x: NvArray) -> NvArray:
    """The conjugate transpose of each matrix (the transpose for real dtypes)."""
    t = x.swapaxes(-1, -2)
    return _ops.conj(t) if x._dtype.kind == "c" else t


def _numeric(x: NvArray, op: str) -> NvArray:
    if x._dtype.kind not in "iufc":
        raise DTypeError(f"linalg.{op}: expected a numeric array, got {x.dtype.name}")
    return x


def _matrices(x: Any, op: str, square: bool = False) -> NvArray:
    """``x`` as a stack of (square) matrices: an NvArray of at least 2 dimensions."""
    x = _array(x, op)
    if x.ndim < 2:
        raise ShapeError(
            f"linalg.{op}: expected a matrix or a stack of matrices (at least 2 dimensions), "
            f"got shape {x.shape}"
        )
    if square and x._shape[-1] != x._shape[-2]:
        raise ShapeError(
            f"linalg.{op}: expected square matrices (..., M, M), got shape {x.shape}"
        )
    return x


def _int(value: Any, op: str, name: str) -> int:
    if isinstance(value, bool):
        raise TypeError(f"linalg.{op}: {name} must be an integer, got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(
            f"linalg.{op}: {name} must be an integer, got {type(value).__name__}"
        ) from None


def _bool(value: Any, op: str, name: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"linalg.{op}: {name} must be True or False, got {value!r}")
    return bool(value)


# --- stacks and results ------------------------------------------------------------------------


def _stack(x: NvArray, batch: tuple[int, ...] | None = None) -> NvArray:
    """``x`` (..., M, N) as one contiguous 3-D stack (B, M, N), broadcast to ``batch`` first
    when given."""
    m, n = x._shape[-2:]
    if batch is not None and x._shape[:-2] != batch:
        x = x.broadcast_to(batch + (m, n))
    b = _layout.numel(x._shape[:-2])
    return x.contiguous().reshape(b, m, n)


def _new(shape: tuple[int, ...], dtype: dt.DType, like: NvArray) -> NvArray:
    return _creation._new(shape, dtype, like._device)


def _zeros(shape: tuple[int, ...], dtype: dt.DType, like: NvArray) -> NvArray:
    out = _new(shape, dtype, like)
    if out.numel:
        out._backend.fill(out, 0)
    return out


def _identity(batch: tuple[int, ...], n: int, dtype: dt.DType, like: NvArray) -> NvArray:
    """A contiguous stack of identity matrices ``batch + (n, n)``."""
    out = _zeros(batch + (n, n), dtype, like)
    if out.numel:
        out._backend.fill(diagonal(out), 1)
    return out


def _check_info(info: NvArray, op: str, what: Any, batch: tuple[int, ...]) -> None:
    """Raise LinAlgError when any entry of ``info`` is nonzero (reads it: one synchronization).

    ``what(code)`` is the message for the first failing matrix; a batched call names it.
    """
    codes = info.to_host()
    bad = np.flatnonzero(codes)
    if bad.size == 0:
        return
    first = int(bad[0])
    code = int(codes[first])
    if code < 0:  # pragma: no cover - an argument the front end should have caught
        raise IgnisError(f"linalg.{op}: argument {-code} was rejected by the solver")
    where = ""
    if batch:
        where = f" (batch element {tuple(int(i) for i in np.unravel_index(first, batch))}"
        where += f"; {bad.size} of {codes.size} matrices failed)" if bad.size > 1 else ")"
    raise LinAlgError(f"linalg.{op}{where}: {what(code)}")


def _mT(x: NvArray) -> NvArray:
    return x.swapaxes(-1, -2)


# --- composite functions -----------------------------------------------------------------------


def diagonal(x: NvArray, /, *, offset: int = 0) -> NvArray:
    """The ``offset`` diagonal of each matrix of ``x`` ``(..., M, N)``: a view of shape
    ``(..., K)``; ``offset > 0`` is above the main diagonal, ``< 0`` below. Any dtype.

    Example: ``ignis.linalg.diagonal(ignis.eye(3), offset=1).shape == (2,)``.
    """
    x = _matrices(x, "diagonal")
    offset = _int(offset, "diagonal", "offset")
    m, n = x._shape[-2:]
    rs, cs = x._strides[-2:]
    if offset >= 0:
        size, start = max(0, min(m, n - offset)), offset * cs
    else:
        size, start = max(0, min(m + offset, n)), -offset * rs
    if size == 0:
        start = 0
    return x._view(x._offset + start, x._shape[:-2] + (size,), x._strides[:-2] + (rs + cs,))


def trace(x: NvArray, /, *, offset: int = 0, dtype: Any = None) -> NvArray:
    """Sum of the ``offset`` diagonal of each matrix of ``x`` ``(..., M, N)``, shape ``(...)``.

    ``dtype`` (optional) is what the diagonal is cast to before the sum and the result's dtype;
    by default it is that of ``ignis.sum`` of the diagonal (x's dtype, or int64 for smaller
    integers). Example: ``ignis.linalg.trace(a)``.
    """
    x = _numeric(_matrices(x, "trace"), "trace")
    d = diagonal(x, offset=offset)
    if dtype is not None:
        dtype = dt.as_dtype(dtype, "linalg.trace")
        d = d.astype(dtype)
    out = _ops.sum(d, axis=-1)
    if dtype is not None and out._dtype is not dtype:
        out = out.astype(dtype)
    return out


def outer(x1: NvArray, x2: NvArray, /) -> NvArray:
    """Outer product ``(N, M)`` of the vectors ``x1`` ``(N,)`` and ``x2`` ``(M,)`` (dtypes
    promote). Example: ``ignis.linalg.outer(a, b)[i, j] == a[i] * b[j]``."""
    x1, x2 = _numeric(_array(x1, "outer"), "outer"), _numeric(_array(x2, "outer"), "outer")
    if x1.ndim != 1 or x2.ndim != 1:
        raise ShapeError(
            f"linalg.outer: expected two 1-D arrays, got shapes {x1.shape} and {x2.shape}"
        )
    return _ops.multiply(x1.unsqueeze(1), x2.unsqueeze(0))


def cross(x1: NvArray, x2: NvArray, /, *, axis: int = -1) -> NvArray:
    """Cross products of the 3-element vectors along ``axis`` (negative, counted from the last
    dimension) of ``x1`` and ``x2``, which broadcast along every other axis.

    Example: ``ignis.linalg.cross(a, b)`` for ``a``, ``b`` of shape ``(..., 3)``.
    """
    x1, x2 = _numeric(_array(x1, "cross"), "cross"), _numeric(_array(x2, "cross"), "cross")
    axis = _int(axis, "cross", "axis")
    nd = min(x1.ndim, x2.ndim)
    if not -nd <= axis <= -1:
        raise IndexError(
            f"linalg.cross: axis must be in [-{nd}, -1] for shapes {x1.shape} and {x2.shape}, "
            f"got {axis}"
        )
    if x1._shape[axis] != 3 or x2._shape[axis] != 3:
        raise ShapeError(
            f"linalg.cross: both arrays need size 3 along axis {axis}, got shapes {x1.shape} "
            f"and {x2.shape}"
        )

    def part(x: NvArray, i: int) -> NvArray:
        return x[(slice(None),) * (x.ndim + axis) + (i,)]

    a0, a1, a2 = (part(x1, i) for i in range(3))
    b0, b1, b2 = (part(x2, i) for i in range(3))
    mul, sub = _ops.multiply, _ops.subtract
    return _ops.stack([
        sub(mul(a1, b2), mul(a2, b1)),
        sub(mul(a2, b0), mul(a0, b2)),
        sub(mul(a0, b1), mul(a1, b0)),
    ], axis=axis)


def _norm_ord(ord: Any, op: str) -> float:  # noqa: A002
    if isinstance(ord, bool) or not isinstance(ord, (int, float, np.integer, np.floating)):
        raise TypeError(f"linalg.{op}: ord must be a number, got {ord!r}")
    value = float(ord)
    if math.isnan(value):
        raise ValueError(f"linalg.{op}: ord must not be NaN")
    return value


def _work_dtype(x: NvArray) -> NvArray:
    """``x`` in the dtype a norm computes in: float32 for the 16-bit types."""
    return x.astype(dt.float32) if x._dtype in _HALF else x


def vector_norm(x: NvArray, /, *, axis: Any = None, keepdims: bool = False,
                ord: Any = 2) -> NvArray:  # noqa: A002
    """Vector norm of ``x`` over ``axis`` (None: all elements; an int or a tuple of ints).

    ``ord``: 2 (default), 1, ``inf`` (max ``|x|``), ``-inf`` (min), 0 (count of nonzeros), or
    any p: ``sum(|x|**p) ** (1/p)``. The result has x's floating dtype (16-bit input is
    computed in float32 and rounded once). Example: ``ignis.linalg.vector_norm(x, axis=-1)``.
    """
    x = _floating(_array(x, "vector_norm"), "vector_norm")
    if x._dtype.kind == "c":  # every norm of complex x is that norm of |x| (real)
        x = _ops.abs(x)
    p = _norm_ord(ord, "vector_norm")
    keepdims = _bool(keepdims, "vector_norm", "keepdims")
    w = _work_dtype(x)
    kw = {"axis": axis, "keepdims": keepdims}
    try:
        if p == 0:
            out = _ops.sum(_ops.not_equal(w, 0).astype(w._dtype), **kw)
        elif p == math.inf:
            out = _ops.max(_ops.abs(w), **kw)
        elif p == -math.inf:
            out = _ops.min(_ops.abs(w), **kw)
        elif p == 1:
            out = _ops.sum(_ops.abs(w), **kw)
        elif p == 2:
            out = _ops.sqrt(_ops.sum(_ops.multiply(w, w), **kw))
        else:
            out = _ops.power(_ops.sum(_ops.power(_ops.abs(w), p), **kw), 1.0 / p)
    except ShapeError as exc:
        raise ShapeError(f"linalg.vector_norm (ord={ord!r}): {exc}") from None
    if out._dtype is not x._dtype:
        out = out.astype(x._dtype)
    return out


def matrix_norm(x: NvArray, /, *, keepdims: bool = False, ord: Any = "fro") -> NvArray:  # noqa: A002
    """Matrix norm of each matrix of ``x`` ``(..., M, N)``.

    ``ord``: ``"fro"`` (default), ``"nuc"`` (sum of singular values), 1 / -1 (max / min column
    sum of ``|x|``), ``inf`` / ``-inf`` (max / min row sum), 2 / -2 (largest / smallest
    singular value). ``keepdims`` keeps the two matrix axes as size 1; the result is real (of
    the real dtype of matching precision for complex ``x``). The singular-value norms need
    float32/float64/complex64/complex128; the others take 16-bit input too (computed in float32,
    rounded once). Example: ``ignis.linalg.matrix_norm(a, ord=1)``.
    """
    x = _floating(_matrices(x, "matrix_norm"), "matrix_norm")
    keepdims = _bool(keepdims, "matrix_norm", "keepdims")
    shape = x._shape[:-2] + ((1, 1) if keepdims else ())
    if isinstance(ord, str):
        if ord not in ("fro", "nuc"):
            raise ValueError(
                f"linalg.matrix_norm: ord must be 'fro', 'nuc', 1, -1, 2, -2, inf or -inf, "
                f"got {ord!r}"
            )
        p: Any = ord
    else:
        p = _norm_ord(ord, "matrix_norm")
    if p in ("nuc", 2.0, -2.0):
        s = svdvals(x)
        if p == "nuc":
            out = _ops.sum(s, axis=-1)
        else:
            if s._shape[-1] == 0:
                raise ShapeError(
                    f"linalg.matrix_norm: ord={ord!r} of empty matrices (shape {x.shape}) is "
                    "undefined"
                )
            out = _ops.max(s, axis=-1) if p == 2 else _ops.min(s, axis=-1)
        return out.reshape(shape)
    if x._dtype.kind == "c":  # the element-wise norms of complex x are those of |x| (real)
        x = _ops.abs(x)
    w = _work_dtype(x)
    try:
        if p == "fro":
            out = _ops.sqrt(_ops.sum(_ops.multiply(w, w), axis=(-2, -1)))
        elif p in (1.0, -1.0, math.inf, -math.inf):
            sums = _ops.sum(_ops.abs(w), axis=-2 if abs(p) == 1 else -1)
            out = _ops.max(sums, axis=-1) if p > 0 else _ops.min(sums, axis=-1)
        else:
            raise ValueError(
                f"linalg.matrix_norm: ord must be 'fro', 'nuc', 1, -1, 2, -2, inf or -inf, "
                f"got {ord!r}"
            )
    except ShapeError as exc:
        raise ShapeError(f"linalg.matrix_norm (ord={ord!r}): {exc}") from None
    if out._dtype is not x._dtype:
        out = out.astype(x._dtype)
    return out.reshape(shape)


def matrix_power(x: NvArray, n: int, /) -> NvArray:
    """``x`` ``(..., M, M)`` raised to the integer power ``n`` by repeated squaring; ``n == 0``
    gives identity matrices, ``n < 0`` powers of :func:`inv` (float32/float64 only).

    Example: ``ignis.linalg.matrix_power(a, 3)`` is ``a @ a @ a``.
    """
    x = _matrices(x, "matrix_power", square=True)
    n = _int(n, "matrix_power", "n")
    if n == 0:
        eye = _identity((), x._shape[-1], x._dtype, x)
        return eye.broadcast_to(x._shape).contiguous()
    base = inv(_factor_dtype(x, "matrix_power")) if n < 0 else x
    n = abs(n)
    if n == 1:
        return base if base is not x else x.clone()
    result = None
    while True:
        if n & 1:
            result = base if result is None else _ops.matmul(result, base)
        n >>= 1
        if not n:
            return result  # type: ignore[return-value]
        base = _ops.matmul(base, base)


# --- factorizations ----------------------------------------------------------------------------


def cholesky(x: NvArray, /, *, upper: bool = False) -> NvArray:
    """Cholesky factor of each symmetric (complex: Hermitian) positive-definite matrix of ``x``
    ``(..., M, M)``: lower ``L`` with ``x = L @ L.mT`` (complex: ``L @ conj(L).mT``; read from
    x's lower triangle), or with ``upper=True`` upper ``U`` with ``x = U.mT @ U`` (complex:
    ``conj(U).mT @ U``; read from the upper triangle).

    Raises :class:`LinAlgError` when a matrix is not positive-definite.
    Example: ``L = ignis.linalg.cholesky(a)``.
    """
    x = _factor_dtype(_matrices(x, "cholesky", square=True), "cholesky")
    upper = _bool(upper, "cholesky", "upper")
    if x.numel == 0:
        return _new(x._shape, x._dtype, x)
    x3 = _stack(x)
    out = _new(x3._shape, x._dtype, x)
    info = _new(x3._shape[:1], dt.int32, x)
    x._backend.kernels.linalg_cholesky(out, info, x3, upper)
    _check_info(info, "cholesky", lambda k: (
        "the factorization could not be completed because the input is not positive-definite "
        f"(the leading minor of order {k} is not positive-definite)"), x._shape[:-2])
    return out.reshape(x._shape)


def _solve3(a: NvArray, b: NvArray, op: str, batch: tuple[int, ...]) -> NvArray:
    """``a^-1 b`` for contiguous stacks (B, n, n) and (B, n, k) with B, n, k >= 1."""
    out = _new(b._shape, b._dtype, b)
    info = _new(b._shape[:1], dt.int32, b)
    a._backend.kernels.linalg_solve(out, info, a, b)
    what = ("the input matrix is singular, it has no inverse" if op == "inv" else
            "the coefficient matrix is singular, the system has no unique solution")
    _check_info(info, op, lambda k: what, batch)
    return out


def inv(x: NvArray, /) -> NvArray:
    """Inverse of each square matrix of ``x`` ``(..., M, M)`` (LU with partial pivoting).

    Raises :class:`LinAlgError` when a matrix is singular. Example: ``ignis.linalg.inv(a)``.
    """
    x = _factor_dtype(_matrices(x, "inv", square=True), "inv")
    if x.numel == 0:
        return _new(x._shape, x._dtype, x)
    x3 = _stack(x)
    eye = _identity(x3._shape[:1], x3._shape[-1], x._dtype, x)
    return _solve3(x3, eye, "inv", x._shape[:-2]).reshape(x._shape)


def solve(x1: NvArray, x2: NvArray, /) -> NvArray:
    """Solution ``X`` of ``x1 @ X = x2`` for square ``x1`` ``(..., M, M)`` and ``x2`` of shape
    ``(M,)`` (one right-hand side for every matrix: the result is ``(..., M)``) or
    ``(..., M, K)`` (batch dimensions broadcast). Dtypes promote.

    Raises :class:`LinAlgError` when a matrix is singular. Example: ``ignis.linalg.solve(a, b)``.
    """
    x1 = _factor_dtype(_matrices(x1, "solve", square=True), "solve")
    x2 = _factor_dtype(_array(x2, "solve"), "solve")
    if x1._device != x2._device:
        raise DeviceMismatchError(
            f"linalg.solve: operands are on different devices ({x1.device} and {x2.device}); "
            "move them with .to(device) first"
        )
    m = x1._shape[-1]
    vector = x2.ndim == 1
    if vector:
        x2 = x2.unsqueeze(-1)
    if x2.ndim < 2 or x2._shape[-2] != m:
        raise ShapeError(
            f"linalg.solve: x2 must have shape ({m},) or (..., {m}, K) for x1 of shape "
            f"{x1.shape}, got {x2.shape if not vector else x2.shape[:1]}"
        )
    dtype = dt.promote_types(x1._dtype, x2._dtype)
    batch = x1._shape[:-2] if vector else _layout.broadcast_shapes(
        x1._shape[:-2], x2._shape[:-2], op="linalg.solve")
    k = x2._shape[-1]
    shape = batch + (m, k)
    if _layout.numel(shape) == 0:
        out = _zeros(shape, dtype, x1)
    else:
        a = _stack(x1.astype(dtype, copy=False), batch)
        b = _stack(x2.astype(dtype, copy=False), batch)
        out = _solve3(a, b, "solve", batch).reshape(shape)
    return out[..., 0] if vector else out


def _determinants(x: Any, op: str, det: bool) -> tuple[NvArray, ...]:
    """The ``linalg_slogdet`` family on the square matrices ``x`` for ``op``: ``(det,)`` when
    ``det``, else ``(sign, logabsdet)``, each of ``x``'s batch shape. A 0 x 0 matrix has
    determinant 1 (sign 1, log 0), as NumPy's."""
    x = _factor_dtype(_matrices(x, op, square=True), op)
    batch = x._shape[:-2]
    if x._shape[-1] == 0 or _layout.numel(batch) == 0:
        one = _new(batch, x._dtype, x)
        if one.numel:
            one._backend.fill(one, 1)
        return (one,) if det else (one, _zeros(batch, _real(x._dtype), x))
    x3 = _stack(x)
    first = _new(x3._shape[:1], x._dtype, x)
    if det:
        x._backend.kernels.linalg_slogdet(None, None, first, x3)
        return (first.reshape(batch),)
    logabs = _new(x3._shape[:1], _real(x._dtype), x)
    x._backend.kernels.linalg_slogdet(first, logabs, None, x3)
    return first.reshape(batch), logabs.reshape(batch)


def slogdet(x: NvArray, /) -> SlogdetResult:
    """Sign and natural log of the absolute determinant of each matrix of ``x``
    ``(..., M, M)``: a singular matrix gives ``(0, -inf)``. For complex ``x`` the sign is
    complex (``det / |det|``) and ``logabsdet`` real (float32 / float64). Example:
    ``sign, logabsdet = ignis.linalg.slogdet(a)``."""
    return SlogdetResult(*_determinants(x, "slogdet", det=False))


def det(x: NvArray, /) -> NvArray:
    """Determinant of each matrix of ``x`` ``(..., M, M)`` (0 for a singular one).
    Example: ``ignis.linalg.det(a)``."""
    return _determinants(x, "det", det=True)[0]


def qr(x: NvArray, /, *, mode: str = "reduced") -> QRResult:
    """QR factorization of each matrix of ``x`` ``(..., M, N)``, ``K = min(M, N)``: ``Q``
    ``(..., M, K)`` with orthonormal columns and upper-triangular ``R`` ``(..., K, N)``, or with
    ``mode="complete"`` ``Q`` ``(..., M, M)`` and ``R`` ``(..., M, N)``. R's diagonal may be
    negative (LAPACK's signs). Example: ``q, r = ignis.linalg.qr(a)``.
    """
    x = _factor_dtype(_matrices(x, "qr"), "qr")
    if mode not in ("reduced", "complete"):
        raise ValueError(f"linalg.qr: mode must be 'reduced' or 'complete', got {mode!r}")
    batch, (m, n) = x._shape[:-2], x._shape[-2:]
    mq = m if mode == "complete" else min(m, n)
    if min(m, n) == 0 or _layout.numel(batch) == 0:
        q = (_identity(batch, m, x._dtype, x) if mq == m and mq else
             _zeros(batch + (m, mq), x._dtype, x))
        return QRResult(q, _zeros(batch + (mq, n), x._dtype, x))
    x3 = _stack(x)
    b = x3._shape[0]
    q, r = _new((b, m, mq), x._dtype, x), _new((b, mq, n), x._dtype, x)
    x._backend.kernels.linalg_qr(q, r, x3, mode == "complete")
    return QRResult(q.reshape(batch + (m, mq)), r.reshape(batch + (mq, n)))


def _eigh(x: NvArray, op: str, vectors: bool) -> tuple[NvArray, NvArray | None]:
    x = _factor_dtype(_matrices(x, op, square=True), op)
    batch, n = x._shape[:-2], x._shape[-1]
    if x.numel == 0:
        return (_new(batch + (n,), _real(x._dtype), x),
                _new(x._shape, x._dtype, x) if vectors else None)
    x3 = _stack(x)
    b = x3._shape[0]
    w = _new((b, n), _real(x._dtype), x)
    v = _new((b, n, n), x._dtype, x) if vectors else None
    info = _new((b,), dt.int32, x)
    x._backend.kernels.linalg_eigh(w, v, info, x3)
    _check_info(info, op, lambda k: (
        "the algorithm failed to converge because the input matrix is ill-conditioned or has "
        "too many repeated eigenvalues"), batch)
    return w.reshape(batch + (n,)), (None if v is None else v.reshape(x._shape))


def eigh(x: NvArray, /) -> EighResult:
    """Eigenvalues (ascending; real, of the real dtype of matching precision) and eigenvectors
    (columns) of each symmetric (complex: Hermitian) matrix of ``x`` ``(..., M, M)``, read from
    its lower triangle. Example: ``w, v = ignis.linalg.eigh(a)``."""
    w, v = _eigh(x, "eigh", True)
    return EighResult(w, v)  # type: ignore[arg-type]


def eigvalsh(x: NvArray, /) -> NvArray:
    """Eigenvalues (ascending; real) of each symmetric (complex: Hermitian) matrix of ``x``
    ``(..., M, M)``, read from its lower triangle. Example: ``ignis.linalg.eigvalsh(a)``."""
    return _eigh(x, "eigvalsh", False)[0]


def _svd(x: NvArray, op: str, vectors: bool, full: bool) -> tuple[Any, NvArray, Any]:
    x = _factor_dtype(_matrices(x, op), op)
    batch, (m, n) = x._shape[:-2], x._shape[-2:]
    k = min(m, n)
    mu, nv = (m, n) if full else (k, k)
    if k == 0 or _layout.numel(batch) == 0:
        s = _new(batch + (k,), _real(x._dtype), x)
        if not vectors:
            return None, s, None
        u = _identity(batch, m, x._dtype, x) if mu == m and m else _zeros(
            batch + (m, mu), x._dtype, x)
        vh = _identity(batch, n, x._dtype, x) if nv == n and n else _zeros(
            batch + (nv, n), x._dtype, x)
        return u, s, vh
    x3 = _stack(x)
    b = x3._shape[0]
    s = _new((b, k), _real(x._dtype), x)
    u = _new((b, m, mu), x._dtype, x) if vectors else None
    vh = _new((b, nv, n), x._dtype, x) if vectors else None
    info = _new((b,), dt.int32, x)
    x._backend.kernels.linalg_svd(u, s, vh, info, x3, full)
    _check_info(info, op, lambda k: (
        "the algorithm failed to converge because the input matrix is ill-conditioned or "
        "contains non-finite values"), batch)
    s = s.reshape(batch + (k,))
    if not vectors:
        return None, s, None
    return u.reshape(batch + (m, mu)), s, vh.reshape(batch + (nv, n))  # type: ignore[union-attr]


def svd(x: NvArray, /, *, full_matrices: bool = True) -> SVDResult:
    """Singular value decomposition ``x = U @ diag(S) @ Vh`` of each matrix of ``x``
    ``(..., M, N)``, ``K = min(M, N)``: ``S`` ``(..., K)`` descending; ``U`` ``(..., M, M)``
    and ``Vh`` ``(..., N, N)``, or with ``full_matrices=False`` ``(..., M, K)`` and
    ``(..., K, N)``. Example: ``u, s, vh = ignis.linalg.svd(a, full_matrices=False)``."""
    full = _bool(full_matrices, "svd", "full_matrices")
    u, s, vh = _svd(x, "svd", True, full)
    return SVDResult(u, s, vh)


def svdvals(x: NvArray, /) -> NvArray:
    """Singular values ``(..., K)``, descending, of each matrix of ``x`` ``(..., M, N)``.
    Example: ``ignis.linalg.svdvals(a)``."""
    return _svd(x, "svdvals", False, False)[1]


def _tolerance(x: NvArray, s: NvArray, rtol: Any, op: str) -> Any:
    """``rtol * max(s)`` per matrix, shaped ``(..., 1)`` to compare with ``s``; ``rtol``
    defaults to ``max(M, N) * eps``."""
    if rtol is None:
        rtol = max(x._shape[-2:]) * float(np.finfo(_real(x._dtype).numpy).eps)
    if isinstance(rtol, NvArray):
        if rtol._dtype.kind != "f":
            raise DTypeError(f"linalg.{op}: rtol must be floating, got {rtol.dtype.name}")
        rtol = rtol.unsqueeze(-1)
    elif isinstance(rtol, bool) or not isinstance(rtol, (int, float, np.integer, np.floating)):
        raise TypeError(f"linalg.{op}: rtol must be a number or an array, got {rtol!r}")
    else:
        rtol = float(rtol)
    return _ops.multiply(_ops.max(s, axis=-1, keepdims=True), rtol)


def matrix_rank(x: NvArray, /, *, rtol: Any = None) -> NvArray:
    """Rank (count of singular values above ``rtol * largest``; ``rtol`` defaults to
    ``max(M, N) * eps``, and may be an array broadcasting against ``x.shape[:-2]``) of each
    matrix of ``x`` ``(..., M, N)``, as int64. Example: ``ignis.linalg.matrix_rank(a)``."""
    x = _factor_dtype(_matrices(x, "matrix_rank"), "matrix_rank")
    if min(x._shape[-2:]) == 0:
        return _zeros(x._shape[:-2], dt.int64, x)
    s = svdvals(x)
    big = _ops.greater(s, _tolerance(x, s, rtol, "matrix_rank"))
    return _ops.sum(big.astype(dt.int64), axis=-1)


def pinv(x: NvArray, /, *, rtol: Any = None) -> NvArray:
    """Moore-Penrose pseudo-inverse ``(..., N, M)`` of each matrix of ``x`` ``(..., M, N)``
    through the SVD; singular values up to ``rtol * largest`` (``rtol`` as in
    :func:`matrix_rank`) count as zero. Example: ``ignis.linalg.pinv(a)``."""
    x = _factor_dtype(_matrices(x, "pinv"), "pinv")
    batch, (m, n) = x._shape[:-2], x._shape[-2:]
    if min(m, n) == 0 or _layout.numel(batch) == 0:
        return _zeros(batch + (n, m), x._dtype, x)
    u, s, vh = _svd(x, "pinv", True, False)
    keep = _ops.greater(s, _tolerance(x, s, rtol, "pinv"))
    s_inv = _ops.where(keep, _ops.divide(1.0, s), 0.0)
    return _ops.matmul(_ops.multiply(_conj_mT(vh), s_inv.unsqueeze(-2)), _conj_mT(u))
