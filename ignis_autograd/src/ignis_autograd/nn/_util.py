"""Small helpers shared by the layers (argument checks, parameter creation)."""

from __future__ import annotations

import math
from typing import Any

from ignis._dtypes import as_dtype

import ignis
from ignis import DTypeError, ShapeError

from ..tensor import Tensor
from ..tensor import _tensor as as_tensor  # noqa: F401  (re-exported to the layers)
from .parameter import Parameter


def check_last_dim(x: Tensor, size: int, op: str, what: str) -> None:
    if x.ndim < 1 or x.shape[-1] != size:
        raise ShapeError(
            f"{op}: input of shape {x.shape} does not end in {what}={size} (expected (..., {size}))"
        )


def positive_int(value: Any, op: str, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{op}: {name} must be a positive int, got {value!r}")
    return value


def float_dtype(dtype: Any, op: str) -> Any:
    d = as_dtype(dtype, op)
    if d.kind != "f":
        raise DTypeError(f"{op}: parameters must have a floating dtype, got {d.name}")
    return d


def new_parameter(shape: tuple[int, ...], dtype: Any, device: Any, op: str) -> Parameter:
    """An uninitialized (the caller fills it) floating Parameter."""
    return Parameter(ignis.empty(shape, dtype=float_dtype(dtype, op), device=device))


def check_probability(p: Any, op: str) -> float:
    p = float(p)
    if not 0.0 <= p <= 1.0 or math.isnan(p):
        raise ValueError(f"{op}: dropout probability must be in [0, 1], got {p}")
    return p
