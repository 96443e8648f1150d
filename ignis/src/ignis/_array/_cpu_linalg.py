"""The CPU implementations of the ``linalg_*`` kernel families: ``numpy.linalg`` on host views.

NumPy computes float32 input in float32 (LAPACK's s-routines) and float64 in float64, as
cuSOLVER does on the GPU. Where ``numpy.linalg`` raises ``LinAlgError`` for a whole stack
(a singular matrix, no convergence), the stack is redone matrix by matrix to learn which ones
fail, and their ``info`` entries are set; the front end turns those into the error, so these
functions never raise for data values (the families' contract).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ._cpu_backend import host_view

if TYPE_CHECKING:
    from .array import NvArray

__all__ = ["cholesky", "solve", "slogdet", "qr", "eigh", "svd"]

_LinAlgError = np.linalg.LinAlgError


def _stack_then_each(run: Callable[[Any], None], batch: int, info: np.ndarray,
                     code: Callable[[int], int] | None = None,
                     failed: np.ndarray | None = None) -> None:
    """``run(...)`` on the whole stack and ``info`` zeroed; where that raises LinAlgError,
    ``run(b)`` for each matrix ``b`` in turn: ``info[b] = 0`` where it succeeds, else
    ``info[b] = code(b)`` (default 1) and, where ``failed`` (an output) is given,
    ``failed[b] = NaN`` rather than whatever was there.

    Example: ``_stack_then_each(lambda i: o.__setitem__(i, np.linalg.inv(a[i])), n, info)``."""
    try:
        run(Ellipsis)
        info[...] = 0
        return
    except _LinAlgError:
        pass
    for b in range(batch):
        try:
            run(b)
            info[b] = 0
        except _LinAlgError:
            info[b] = 1 if code is None else code(b)
            if failed is not None:
                failed[b] = np.nan


def _failing_minor(a: np.ndarray) -> int:
    """The order k of the first leading minor of ``a`` that is not positive-definite (LAPACK's
    potrf info), found by bisection: minors below k factor, minors from k on do not."""
    lo, hi = 1, a.shape[-1]  # minor hi fails; find the smallest failing one
    while lo < hi:
        mid = (lo + hi) // 2
        try:
            np.linalg.cholesky(a[:mid, :mid])
            lo = mid + 1
        except _LinAlgError:
            hi = mid
    return lo


def cholesky(out: NvArray, info: NvArray, x: NvArray, upper: bool) -> None:
    a, o, inf = host_view(x), host_view(out), host_view(info)
    # The upper factor of x's upper triangle is the (conjugate) transpose of the lower factor of
    # x^T (x^H for complex x) (NumPy 1.x has no upper=).
    herm = a.dtype.kind == "c"
    src = (a.swapaxes(-1, -2).conj() if herm else a.swapaxes(-1, -2)) if upper else a

    def run(i: Any) -> None:
        f = np.linalg.cholesky(src[i])
        if upper:
            f = f.swapaxes(-1, -2).conj() if herm else f.swapaxes(-1, -2)
        o[i] = f

    _stack_then_each(run, a.shape[0], inf, lambda b: _failing_minor(src[b]), o)


def solve(out: NvArray, info: NvArray, a: NvArray, b: NvArray) -> None:
    av, bv, o, inf = host_view(a), host_view(b), host_view(out), host_view(info)

    def run(i: Any) -> None:
        o[i] = np.linalg.solve(av[i], bv[i])

    with np.errstate(all="ignore"):
        _stack_then_each(run, av.shape[0], inf, failed=o)


def slogdet(sign: NvArray | None, logabsdet: NvArray | None, det: NvArray | None,
            x: NvArray) -> None:
    a = host_view(x)
    with np.errstate(all="ignore"):
        if det is not None:
            host_view(det)[...] = np.linalg.det(a)
        if sign is not None or logabsdet is not None:
            s, logabs = np.linalg.slogdet(a)
            if sign is not None:
                host_view(sign)[...] = s
            if logabsdet is not None:
                host_view(logabsdet)[...] = logabs


def qr(q: NvArray, r: NvArray, x: NvArray, complete: bool) -> None:
    qq, rr = np.linalg.qr(host_view(x), mode="complete" if complete else "reduced")
    host_view(q)[...] = qq
    host_view(r)[...] = rr


def eigh(w: NvArray, v: NvArray | None, info: NvArray, x: NvArray) -> None:
    a, wv, inf = host_view(x), host_view(w), host_view(info)
    vv = None if v is None else host_view(v)

    def run(i: Any) -> None:
        if vv is None:
            wv[i] = np.linalg.eigvalsh(a[i])
        else:
            wv[i], vv[i] = np.linalg.eigh(a[i])

    with np.errstate(all="ignore"):
        _stack_then_each(run, a.shape[0], inf)


def svd(u: NvArray | None, s: NvArray, vh: NvArray | None, info: NvArray, x: NvArray,
        full_matrices: bool) -> None:
    a, sv, inf = host_view(x), host_view(s), host_view(info)
    uv = None if u is None else host_view(u)
    vhv = None if vh is None else host_view(vh)

    def run(i: Any) -> None:
        if uv is None:
            sv[i] = np.linalg.svd(a[i], compute_uv=False)
        else:
            uv[i], sv[i], vhv[i] = np.linalg.svd(a[i], full_matrices=full_matrices)

    with np.errstate(all="ignore"):
        _stack_then_each(run, a.shape[0], inf)
