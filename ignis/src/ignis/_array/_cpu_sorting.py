"""NumPy reference of the sorting families (sort, cumulative, searchsorted, nonzero, unique).

Each function gets the arguments its family contract in ``_families.py`` describes. Orders are
NumPy's: NaN sorts last ascending (first descending), -0.0 equals +0.0, sorts are stable.
bfloat16 data is ordered as float32 (exactly); float16/bfloat16 scans run in float32 and round
each output once, as the CUDA kernels do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .. import _dtypes as dt
from . import _creation
from ._cpu_backend import host_view

if TYPE_CHECKING:
    from .array import NvArray

__all__ = ["sort", "cumulative", "searchsorted", "nonzero", "unique"]

_HALF = (dt.float16, dt.bfloat16)


def _ordered(a: np.ndarray, dtype: dt.DType) -> np.ndarray:
    """``a`` in a dtype NumPy orders natively (bfloat16 as float32: exact)."""
    return a.astype(np.float32) if dtype is dt.bfloat16 else a


def _argsort_rows(a: np.ndarray, descending: bool) -> np.ndarray:
    """Stable argsort of each row; descending keeps equal elements in index order too."""
    if not descending:
        return np.argsort(a, axis=1, kind="stable")
    # Sorting the reversed rows ascending and reversing the result is descending and stable
    # once the positions are mirrored back (NaNs, last ascending, come first).
    n = a.shape[1]
    return (n - 1) - np.flip(np.argsort(np.flip(a, axis=1), axis=1, kind="stable"), axis=1)


def sort(values: NvArray | None, indices: NvArray | None, x: NvArray, descending: bool) -> None:
    a = host_view(x)
    order = _argsort_rows(_ordered(a, x.dtype), bool(descending))
    if indices is not None:
        host_view(indices)[...] = order
    if values is not None:
        host_view(values)[...] = np.take_along_axis(a, order, axis=1)


def cumulative(out: NvArray, x: NvArray, op: str, include_initial: bool) -> None:
    a = host_view(x)
    work = np.dtype(np.float32) if x.dtype in _HALF else x.dtype.numpy
    fn = np.cumsum if op == "sum" else np.cumprod
    with np.errstate(all="ignore"):  # integers wrap, floats overflow to inf
        res = fn(a.astype(work, copy=False), axis=1, dtype=work)
        o = host_view(out)
        if include_initial:
            o[:, 0, :] = 0 if op == "sum" else 1
            o[:, 1:, :] = res
        else:
            o[...] = res


def searchsorted(out: NvArray, sorted_: NvArray, values: NvArray, right: bool) -> None:
    s = _ordered(host_view(sorted_), sorted_.dtype)
    v = _ordered(host_view(values), values.dtype)
    host_view(out)[...] = np.searchsorted(s, v, side="right" if right else "left")


def nonzero(x: NvArray) -> NvArray:
    coords = np.nonzero(host_view(x))
    out = _creation._new((x.ndim, coords[0].size), dt.int64, x.device)
    if coords[0].size:
        host_view(out)[...] = np.stack(coords)
    return out


def _to_array(host: np.ndarray, dtype: dt.DType, device: Any) -> NvArray:
    out = _creation._new(host.shape, dtype, device)
    if host.size:
        host_view(out)[...] = host
    return out


def unique(
    x: NvArray, want_indices: bool, want_inverse: bool, want_counts: bool
) -> tuple[Any, Any, Any, Any]:
    a = host_view(x)
    values, indices, inverse, counts = np.unique(
        _ordered(a, x.dtype),
        return_index=True,
        return_inverse=True,
        return_counts=True,
        equal_nan=False,
    )
    device = x.device
    return (
        _to_array(values.astype(a.dtype, copy=False), x.dtype, device),
        _to_array(indices, dt.int64, device) if want_indices else None,
        _to_array(inverse.reshape(-1), dt.int64, device) if want_inverse else None,
        _to_array(counts, dt.int64, device) if want_counts else None,
    )
