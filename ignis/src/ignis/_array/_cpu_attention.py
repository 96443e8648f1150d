"""Attention on the CPU backend: the NumPy reference of the fused kernels.

The whole ``(L, S)`` score matrix is formed here (memory is not the point on the host). Math
runs in float64 for float64 inputs and float32 otherwise; 16-bit outputs are rounded once.
Operands are read and results written through NumPy views of their memory, so strided
operands and destinations (heads of a packed projection, ``out=`` views) need no copies here
either.

Dropout (``dropout_forward``, ``dropout_backward``) builds the keep mask of the kernels'
counter mapping with NumPy's Philox (:func:`ignis._array._attention_dropout.keep_mask`), so the
CPU and CUDA backends drop the same elements, bit for bit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .. import _dtypes as dt

if TYPE_CHECKING:
    from .array import NvArray

__all__ = ["forward", "backward", "decode", "dropout_forward", "dropout_backward"]


def _work(a: NvArray) -> np.dtype:
    return np.dtype(np.float64) if a.dtype == dt.float64 else np.dtype(np.float32)


def _host(a: NvArray, work: np.dtype) -> np.ndarray:
    from ._cpu_backend import host_view

    return host_view(a).astype(work)


def _visible(n_q: int, n_k: int, causal: bool) -> np.ndarray | None:
    """(L, S) bool: query i sees key j <= i + S - L (None: every key)."""
    if not causal:
        return None
    return np.arange(n_k)[None, :] <= np.arange(n_q)[:, None] + (n_k - n_q)


def _probabilities(
    q: np.ndarray, k: np.ndarray, causal: bool, scale: float
) -> tuple[np.ndarray, np.ndarray]:
    """(p, lse): softmax of the scaled, masked scores and its log-sum-exp (-inf: no key)."""
    s = np.matmul(q, np.swapaxes(k, -1, -2)) * q.dtype.type(scale)
    mask = _visible(q.shape[-2], k.shape[-2], causal)
    if mask is not None:
        s = np.where(mask, s, -np.inf)
    m = np.max(s, axis=-1, keepdims=True)
    m_use = np.where(np.isfinite(m), m, 0)  # a row without keys: exp(-inf) = 0 everywhere
    e = np.exp(s - m_use)
    total = np.sum(e, axis=-1, keepdims=True)
    empty = total == 0  # no visible key (NaN scores are not empty: NaN propagates)
    safe = np.where(empty, 1, total)
    p = np.where(empty, 0, e / safe)
    lse = np.where(empty[..., 0], -np.inf, (m_use + np.log(safe))[..., 0])
    return p.astype(q.dtype, copy=False), lse.astype(q.dtype, copy=False)


def _factors(dropout: Any, shape: tuple[int, ...], work: np.dtype) -> np.ndarray | None:
    """(B, H, L, S): 1 / (1 - p) where kept, 0 where dropped (None: no dropout)."""
    if dropout is None:
        return None
    from ._attention_dropout import keep_mask

    keep = keep_mask(dropout, shape)  # type: ignore[arg-type]
    return np.where(keep, work.type(dropout.scale), work.type(0))


def _forward(
    out: NvArray,
    lse: NvArray,
    q: NvArray,
    k: NvArray,
    v: NvArray,
    causal: bool,
    scale: float,
    dropout: Any = None,
) -> None:
    from ._cpu_backend import host_view

    work = _work(q)
    with np.errstate(all="ignore"):
        p, lse_rows = _probabilities(_host(q, work), _host(k, work), causal, scale)
        z = _factors(dropout, (*q.shape[:3], k.shape[2]), work)
        if z is not None:  # after the row sums: lse is of the undropped P
            p = p * z
        host_view(out)[...] = np.matmul(p, _host(v, work))
        host_view(lse)[...] = lse_rows


def _backward(
    dq: NvArray,
    dk: NvArray,
    dv: NvArray,
    grad_out: NvArray,
    q: NvArray,
    k: NvArray,
    v: NvArray,
    out: NvArray,
    lse: NvArray,
    causal: bool,
    scale: float,
    dropout: Any = None,
) -> None:
    """The kernels' arithmetic: P from the saved lse, D = rowsum(dO * O), dS = P (dP - D);
    with dropout factors Z, dV = (P Z)^T dO and dS = P (dP Z - D) (D is unchanged:
    rowsum(dO * O) = rowsum(P Z dP))."""
    from ._cpu_backend import host_view

    work = _work(q)
    with np.errstate(all="ignore"):
        qh, kh, vh = _host(q, work), _host(k, work), _host(v, work)
        g, o = _host(grad_out, work), _host(out, work)
        lh = _host(lse, work)[..., None]
        s = np.matmul(qh, np.swapaxes(kh, -1, -2)) * work.type(scale)
        visible = np.isfinite(lh) & np.ones(s.shape, bool)
        mask = _visible(qh.shape[-2], kh.shape[-2], causal)
        if mask is not None:
            visible &= mask
        p = np.where(visible, np.exp(s - np.where(np.isfinite(lh), lh, 0)), 0).astype(work)
        d = np.sum(g * o, axis=-1, keepdims=True)
        dp = np.matmul(g, np.swapaxes(vh, -1, -2))
        z = _factors(dropout, s.shape, work)
        pd = p if z is None else p * z
        if z is not None:
            dp = dp * z
        ds = p * (dp - d) * work.type(scale)
        host_view(dv)[...] = np.matmul(np.swapaxes(pd, -1, -2), g)
        host_view(dq)[...] = np.matmul(ds, kh)
        host_view(dk)[...] = np.matmul(np.swapaxes(ds, -1, -2), qh)


def decode(
    out: NvArray, q: NvArray, k_cache: NvArray, v_cache: NvArray, cache_len: int, scale: float
) -> None:
    from ._cpu_backend import host_view

    work = _work(q)
    with np.errstate(all="ignore"):
        k = _host(k_cache[:, :, :cache_len], work)
        v = _host(v_cache[:, :, :cache_len], work)
        p, _ = _probabilities(_host(q, work), k, False, scale)
        host_view(out)[...] = np.matmul(p, v)


def dropout_forward(
    out: NvArray,
    lse: NvArray,
    q: NvArray,
    k: NvArray,
    v: NvArray,
    causal: bool,
    scale: float,
    dropout: Any,
) -> None:
    """``forward`` with the probabilities dropped out (``dropout``: an AttentionDropout)."""
    _forward(out, lse, q, k, v, causal, scale, dropout)


def dropout_backward(
    dq: NvArray,
    dk: NvArray,
    dv: NvArray,
    grad_out: NvArray,
    q: NvArray,
    k: NvArray,
    v: NvArray,
    out: NvArray,
    lse: NvArray,
    causal: bool,
    scale: float,
    dropout: Any,
) -> None:
    """``backward`` of ``dropout_forward`` with the same ``dropout`` (the same mask)."""
    _backward(dq, dk, dv, grad_out, q, k, v, out, lse, causal, scale, dropout)


def forward(
    out: NvArray, lse: NvArray, q: NvArray, k: NvArray, v: NvArray, causal: bool, scale: float
) -> None:
    """The ``attention_forward`` family."""
    _forward(out, lse, q, k, v, causal, scale)


def backward(
    dq: NvArray,
    dk: NvArray,
    dv: NvArray,
    grad_out: NvArray,
    q: NvArray,
    k: NvArray,
    v: NvArray,
    out: NvArray,
    lse: NvArray,
    causal: bool,
    scale: float,
) -> None:
    """The ``attention_backward`` family."""
    _backward(dq, dk, dv, grad_out, q, k, v, out, lse, causal, scale)
