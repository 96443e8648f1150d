"""NumPy reference of the fused normalization and loss hooks (the CPU backend delegates here).

Same arithmetic as the CUDA kernels: statistics and sums in W (float64 for float64 data, else
float32), each output rounded once into its dtype. Arrays arrive as the hooks' contract says
(C-contiguous, 2-D ``(rows, n)``; see :class:`~ignis._array._backend.Backend`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ._cpu_backend import host_view

if TYPE_CHECKING:
    from .array import NvArray

__all__ = [
    "layer_norm",
    "layer_norm_backward",
    "rms_norm",
    "rms_norm_backward",
    "cross_entropy",
    "cross_entropy_backward",
    "softmax_backward",
]


def _w(arr: NvArray) -> np.dtype:
    """The statistics dtype of data ``arr``: float64 for float64, else float32."""
    return np.dtype(np.float64) if arr.dtype.itemsize == 8 else np.dtype(np.float32)


def _val(arr: NvArray | None, w: np.dtype) -> np.ndarray | None:
    return None if arr is None else host_view(arr).astype(w)


def layer_norm(
    y: NvArray,
    mean: NvArray,
    rstd: NvArray,
    x: NvArray,
    weight: NvArray | None,
    bias: NvArray | None,
    eps: float,
) -> None:
    w = _w(x)
    v = host_view(x).astype(w)
    with np.errstate(all="ignore"):
        mu = v.mean(axis=1, dtype=w)
        d = v - mu[:, None]
        var = (d * d).mean(axis=1, dtype=w)
        r = w.type(1) / np.sqrt(var + w.type(eps))
        out = d * r[:, None]
        if weight is not None:
            out = out * _val(weight, w)
        if bias is not None:
            out = out + _val(bias, w)
        host_view(y)[...] = out
    host_view(mean)[...] = mu
    host_view(rstd)[...] = r


def rms_norm(y: NvArray, rstd: NvArray, x: NvArray, weight: NvArray | None, eps: float) -> None:
    w = _w(x)
    v = host_view(x).astype(w)
    with np.errstate(all="ignore"):
        r = w.type(1) / np.sqrt((v * v).mean(axis=1, dtype=w) + w.type(eps))
        out = v * r[:, None]
        if weight is not None:
            out = out * _val(weight, w)
        host_view(y)[...] = out
    host_view(rstd)[...] = r


def _norm_backward(
    grad_x: NvArray | None,
    grad_weight: NvArray | None,
    grad_bias: NvArray | None,
    grad_y: NvArray,
    x: NvArray,
    mean: NvArray | None,
    rstd: NvArray,
    weight: NvArray | None,
) -> None:
    w = _w(x)
    g = host_view(grad_y).astype(w)
    r = host_view(rstd).astype(w)[:, None]
    with np.errstate(all="ignore"):
        v = host_view(x).astype(w)
        xhat = (v - host_view(mean).astype(w)[:, None]) * r if mean is not None else v * r
        if grad_x is not None:
            gh = g * _val(weight, w) if weight is not None else g
            dot = (gh * xhat).mean(axis=1, keepdims=True, dtype=w)
            inner = gh - xhat * dot
            if mean is not None:
                inner = inner - gh.mean(axis=1, keepdims=True, dtype=w)
            host_view(grad_x)[...] = r * inner
        if grad_weight is not None:
            host_view(grad_weight)[...] = (g * xhat).sum(axis=0, dtype=w)
        if grad_bias is not None:
            host_view(grad_bias)[...] = g.sum(axis=0, dtype=w)


def layer_norm_backward(
    grad_x: NvArray | None,
    grad_weight: NvArray | None,
    grad_bias: NvArray | None,
    grad_y: NvArray,
    x: NvArray,
    mean: NvArray,
    rstd: NvArray,
    weight: NvArray | None,
) -> None:
    _norm_backward(grad_x, grad_weight, grad_bias, grad_y, x, mean, rstd, weight)


def rms_norm_backward(
    grad_x: NvArray | None,
    grad_weight: NvArray | None,
    grad_y: NvArray,
    x: NvArray,
    rstd: NvArray,
    weight: NvArray | None,
) -> None:
    _norm_backward(grad_x, grad_weight, None, grad_y, x, None, rstd, weight)


def _targets(targets: NvArray, n_classes: int, ignore_index: int | None):
    """(targets as int64, counted rows, rows with a target outside [0, C))."""
    t = host_view(targets).astype(np.int64)
    counted = np.ones(t.shape, bool) if ignore_index is None else t != ignore_index
    bad = counted & ((t < 0) | (t >= n_classes))
    return t, counted, bad


def _lse(z: np.ndarray) -> np.ndarray:
    """Row log-sum-exp; NaN where the row maximum is not finite (as the kernels)."""
    m = z.max(axis=1)
    finite = np.isfinite(m)
    shift = np.where(finite, m, 0).astype(z.dtype)
    s = np.exp(z - shift[:, None]).sum(axis=1)
    return np.where(finite, shift + np.log(s), np.nan).astype(z.dtype)


def cross_entropy(
    loss: NvArray,
    lse: NvArray,
    logits: NvArray,
    targets: NvArray,
    ignore_index: int | None,
    label_smoothing: float,
    reduction: str,
) -> None:
    w = _w(logits)
    z = host_view(logits).astype(w)
    n_classes = z.shape[1]
    t, counted, bad = _targets(targets, n_classes, ignore_index)
    with np.errstate(all="ignore"):
        lse_rows = _lse(z)
        picked = z[np.arange(z.shape[0]), np.clip(t, 0, n_classes - 1)]
        rows = lse_rows - picked
        if label_smoothing > 0:
            smooth = lse_rows - z.sum(axis=1) / w.type(n_classes)
            rows = w.type(1 - label_smoothing) * rows + w.type(label_smoothing) * smooth
        rows = np.where(counted, rows, w.type(0))
        rows = np.where(bad, w.type(np.nan), rows).astype(w)
        if reduction == "none":
            host_view(loss)[...] = rows
        else:
            total = rows.sum(dtype=w)
            if reduction == "mean":
                total = total / w.type(np.count_nonzero(counted))
            host_view(loss)[...] = total
    host_view(lse)[...] = lse_rows


def cross_entropy_backward(
    grad_logits: NvArray,
    grad_loss: NvArray,
    logits: NvArray,
    targets: NvArray,
    lse: NvArray,
    ignore_index: int | None,
    label_smoothing: float,
    reduction: str,
) -> None:
    w = _w(logits)
    z = host_view(logits).astype(w)
    n_rows, n_classes = z.shape
    t, counted, bad = _targets(targets, n_classes, ignore_index)
    g = host_view(grad_loss).astype(w)
    with np.errstate(all="ignore"):
        scale = g.reshape(-1, 1) if reduction == "none" else np.full((n_rows, 1), g.reshape(()))
        if reduction == "mean":
            scale = scale / w.type(np.count_nonzero(counted))
        d = np.exp(z - host_view(lse).astype(w)[:, None]) - w.type(label_smoothing / n_classes)
        ok = counted & ~bad
        d[np.nonzero(ok)[0], t[ok]] -= w.type(1 - label_smoothing)
        d = d * scale
        d[~counted] = 0
        d[bad] = np.nan
        host_view(grad_logits)[...] = d


def softmax_backward(grad_x: NvArray, grad_y: NvArray, y: NvArray, log: bool) -> None:
    w = _w(y)
    g = host_view(grad_y).astype(w)
    v = host_view(y).astype(w)
    with np.errstate(all="ignore"):
        if log:
            out = g - np.exp(v) * g.sum(axis=1, keepdims=True, dtype=w)
        else:
            out = v * (g - (g * v).sum(axis=1, keepdims=True, dtype=w))
        host_view(grad_x)[...] = out
