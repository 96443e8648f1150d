"""NumPy reference of the indexing family's backend hooks (take, index_add, put, nonzero_flat,
repeat_index, dropout, rope).

Each function gets the arguments the hook contract in ``_backend.py`` describes and computes in
the arithmetic the CUDA kernels use (float32 for the 16-bit types, one rounding into the output),
so the CUDA results can be tested against these.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import _dtypes as dt
from .._exports import defined_here
from . import random as _random
from ._cpu_backend import host_view

if TYPE_CHECKING:
    from .array import NvArray

_HALF = (dt.float16, dt.bfloat16)


def _work(dtype: dt.DType) -> np.dtype:
    return np.dtype(np.float64) if dtype is dt.float64 else np.dtype(np.float32)


def _wrapped(indices: NvArray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(indices wrapped into [0, n) as int64, mask of the valid ones)."""
    k = host_view(indices).astype(np.int64)
    k = np.where(k < 0, k + n, k)
    valid = (k >= 0) & (k < n)
    return np.where(valid, k, 0), valid


def _bad_value(dtype: dt.DType) -> Any:
    return np.nan if dtype.kind == "f" else 0


def take(out: NvArray, a: NvArray, indices: NvArray) -> None:
    n = a.shape[1]
    k, valid = _wrapped(indices, n)
    src = host_view(a)
    res = src[:, k, :] if n else np.zeros(out.shape, a.dtype.numpy)
    res[:, ~valid, :] = _bad_value(a.dtype)
    host_view(out)[...] = res


def index_add(
    dst: NvArray, indices: NvArray, src: NvArray, alpha: Any, deterministic: bool
) -> None:
    k, valid = _wrapped(indices, dst.shape[1])
    d, s = host_view(dst), host_view(src)
    if alpha != 1:
        with np.errstate(all="ignore"):
            s = s * d.dtype.type(alpha)  # in the dtype; integers wrap
    # np.add.at adds repeated indices one after another, in index order.
    np.add.at(d, (slice(None), k[valid], slice(None)), s[:, valid, :])


def dropout(
    y: NvArray, mask: NvArray, x: NvArray, threshold: int, scale: float, seed: int, offset: int
) -> None:
    n = x.numel
    words = _random._words(seed, offset, n)
    keep = (words >> np.uint64(8)) >= np.uint64(threshold)
    work = _work(x.dtype)
    xv = host_view(x).reshape(-1).astype(work)
    with np.errstate(all="ignore"):
        res = np.where(keep, xv * work.type(scale), work.type(0))
    host_view(y)[...] = res.reshape(y.shape)
    host_view(mask)[...] = keep.reshape(mask.shape)


def dropout_from_state(
    y: NvArray,
    mask: NvArray,
    x: NvArray,
    threshold: int,
    scale: float,
    state: NvArray,
    offset: int,
) -> None:
    """``dropout`` from the stream ``(state[0], state[1] + offset)`` (graph-safe draws)."""
    seed, base = (int(v) for v in host_view(state))
    dropout(y, mask, x, threshold, scale, seed, (base + offset) & 0xFFFFFFFFFFFFFFFF)


def dropout_backward(out: NvArray, grad: NvArray, mask: NvArray, scale: float) -> None:
    work = _work(grad.dtype)
    g = host_view(grad).astype(work)
    with np.errstate(all="ignore"):
        host_view(out)[...] = np.where(host_view(mask), g * work.type(scale), work.type(0))


def inverse_frequencies(half: int, base: float, work: np.dtype) -> np.ndarray:
    """``base ** (-i / half)`` for ``i < half`` computed in float64, rounded to ``work``."""
    step = -math.log2(base) / half
    return np.exp2(np.arange(half, dtype=np.float64) * step).astype(work)


def rope(
    out: NvArray,
    x: NvArray,
    positions: NvArray | None,
    offset: int,
    base: float,
    interleaved: bool,
    inverse: bool,
) -> None:
    batch, seq, d = x.shape
    half = d // 2
    work = _work(x.dtype)
    if positions is None:
        pos = (np.arange(seq, dtype=np.int64) + offset)[None, :]
    else:
        pos = host_view(positions).astype(np.int64) + offset  # (1 or batch, seq)
    angle = pos.astype(work)[:, :, None] * inverse_frequencies(half, base, work)  # one rounding
    sin, cos = np.sin(angle), np.cos(angle)
    if inverse:
        sin = -sin
    xv = host_view(x).astype(work)
    if interleaved:
        x0, x1 = xv[..., 0::2], xv[..., 1::2]
    else:
        x0, x1 = xv[..., :half], xv[..., half:]
    y0 = x0 * cos - x1 * sin
    y1 = x1 * cos + x0 * sin
    res = np.empty(x.shape, work)
    if interleaved:
        res[..., 0::2], res[..., 1::2] = y0, y1
    else:
        res[..., :half], res[..., half:] = y0, y1
    host_view(out)[...] = res


def put(dst: NvArray, indices: NvArray, src: NvArray) -> None:
    k, valid = _wrapped(indices, dst.shape[1])
    # NumPy's assignment with repeated indices: the last one lands
    host_view(dst)[:, k[valid], :] = host_view(src)[:, valid, :]


def nonzero_flat(out: NvArray, mask: NvArray) -> None:
    host_view(out)[...] = np.flatnonzero(host_view(mask))


def repeat_index(out: NvArray, repeats: NvArray) -> None:
    r = host_view(repeats)
    host_view(out)[...] = np.repeat(np.arange(r.shape[0], dtype=np.int64), r)


# Exports: the public functions above (the family hooks _families.py points at among them),
# read from the module so that no second list of them is kept here.
__all__ = defined_here(globals())
