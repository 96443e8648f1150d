"""Dropout and rotary position embeddings on NvArrays (front end of the :mod:`ignis.nn`
functions ``dropout``, ``dropout_backward``, ``rope`` and ``rope_backward``).

Dropout draws its keep mask inside the kernel from the Philox stream of :mod:`ignis.random`:
element ``i`` is kept when the float32 uniform value that ``ignis.random`` would give for word
``i`` of the stream ``(seed, offset)`` is ``>= p``, so ``mask == (Generator(seed) positioned at
offset).rand(x.shape) >= p`` exactly, on every device. A call uses ``ceil(numel / 4)`` Philox
blocks; without an explicit ``(seed, offset)`` it takes them from a generator (the default one
unless given), advancing it as ``rand`` would. Inside a CUDA graph capture that records its
draws (:class:`ignis.random.GraphDraws`, used by ``ignis_autograd.capture_step``) the kernel
reads the seed and offset from device memory instead, so that each replay draws a new mask.
The mask is returned (one bool per element), so the backward pass is one multiply.

RoPE rotates pairs of the last axis of ``x (..., seq, head_dim)`` by ``position * base **
(-2i / head_dim)``; cos/sin are computed in the kernel (float32; float64 for float64 input), no
tables. The backward pass is the inverse rotation.
"""

from __future__ import annotations

import math
import operator
from typing import Any

import numpy as np

from .. import _dtypes as dt
from .._errors import DeviceMismatchError, DTypeError, ShapeError
from . import _creation
from . import random as _random
from .array import NvArray

__all__ = ["dropout", "dropout_backward", "rope", "rope_backward", "keep_threshold"]

_FLOATS = (dt.float16, dt.bfloat16, dt.float32, dt.float64)


def _floating(x: Any, op: str, name: str = "x") -> NvArray:
    if not isinstance(x, NvArray):
        raise TypeError(f"{op}: {name} must be an NvArray, got {type(x).__name__}")
    if x._dtype not in _FLOATS:
        raise DTypeError(f"{op}: {name} must be a floating array, got {x._dtype.name}")
    return x


def _probability(p: Any, op: str) -> float:
    try:
        value = float(p)
    except (TypeError, ValueError):
        raise TypeError(f"{op}: p must be a number in [0, 1], got {p!r}") from None
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{op}: p must be in [0, 1], got {p}")
    return value


def keep_threshold(p: float) -> int:
    """``ceil(float32(p) * 2**24)``: an element is kept when ``(word >> 8) >= threshold``
    (exactly ``u >= p`` for the float32 uniform ``u = (word >> 8) * 2**-24``, p as float32)."""
    return math.ceil(float(np.float32(p)) * 2**24)  # exact: a float32 times a power of two


def _scale(p: float) -> float:
    return 1.0 / (1.0 - p) if p < 1.0 else 0.0


def dropout(
    x: NvArray,
    p: float = 0.5,
    seed: int | None = None,
    offset: int | None = None,
    *,
    generator: Any = None,
) -> tuple[NvArray, NvArray]:
    """``(y, mask)``: each element of ``x`` zeroed with probability ``p``, the others scaled by
    ``1 / (1 - p)``; ``mask`` (bool, ``x``'s shape) is True where kept.

    The mask comes from the Philox stream ``(seed, offset)`` (``offset`` counts 128-bit
    blocks, as in :mod:`ignis.random`), or, when both are None, from ``generator`` (default:
    the global ``ignis.random`` stream), which advances by ``ceil(x.numel / 4)`` blocks.
    ``y`` has ``x``'s dtype (float16/bfloat16 scaled in float32 and rounded once).

    Example::

        >>> y, mask = ignis.nn.dropout(h, 0.1)                 # from ignis.random
        >>> y, mask = ignis.nn.dropout(h, 0.1, seed=7, offset=0)
    """
    x = _floating(x, "dropout")
    prob = _probability(p, "dropout")
    if (seed is None) != (offset is None):
        raise ValueError("dropout: give both seed and offset, or neither (use a generator)")
    n = x.numel
    if seed is None:
        gen = generator if generator is not None else _random._default
        cap = _random._capturing
        if cap is not None and cap._covers(x._device):
            # Inside a graph capture: the kernel reads (seed, offset) from device memory.
            state, rel = cap._take(gen, n)
            y = _creation._new(x._shape, x._dtype, x._device)
            mask = _creation._new(x._shape, dt.bool_, x._device)
            if n:
                x._backend.kernels.dropout_from_state(
                    y, mask, x.contiguous(), keep_threshold(prob), _scale(prob), state, rel
                )
            return y, mask
        s, start = gen.seed, gen._take(n)
    else:
        if generator is not None:
            raise ValueError("dropout: give either (seed, offset) or generator, not both")
        s, start = _random._check_seed(seed), operator.index(offset)
        if start < 0:
            raise ValueError(f"dropout: offset must be >= 0, got {offset}")
    y = _creation._new(x._shape, x._dtype, x._device)
    mask = _creation._new(x._shape, dt.bool_, x._device)
    if n:
        x._backend.kernels.dropout(
            y, mask, x.contiguous(), keep_threshold(prob), _scale(prob), s, start
        )
    return y, mask


def dropout_backward(grad: NvArray, mask: NvArray, p: float) -> NvArray:
    """``grad * mask / (1 - p)`` (0 where dropped), in ``grad``'s dtype: the gradient of
    :func:`dropout` with the ``mask`` it returned.

    Example: ``gx = ignis.nn.dropout_backward(gy, mask, 0.1)``.
    """
    grad = _floating(grad, "dropout_backward", "grad")
    if not isinstance(mask, NvArray) or mask._dtype is not dt.bool_:
        got = mask._dtype.name if isinstance(mask, NvArray) else type(mask).__name__
        raise DTypeError(f"dropout_backward: mask must be a bool NvArray, got {got}")
    if mask._shape != grad._shape:
        raise ShapeError(
            f"dropout_backward: mask has shape {mask._shape}, expected grad's shape {grad._shape}"
        )
    if mask._device != grad._device:
        raise DeviceMismatchError(
            f"dropout_backward: mask is on {mask._device} but grad is on {grad._device}"
        )
    prob = _probability(p, "dropout_backward")
    out = _creation._new(grad._shape, grad._dtype, grad._device)
    if out.numel:
        grad._backend.kernels.dropout_backward(
            out, grad.contiguous(), mask.contiguous(), _scale(prob)
        )
    return out


def _rope(
    op: str,
    x: NvArray,
    positions: Any,
    offset: int,
    base: float,
    interleaved: bool,
    inverse: bool,
) -> NvArray:
    x = _floating(x, op)
    if x.ndim < 2:
        raise ShapeError(f"{op}: x must be (..., seq, head_dim), got shape {x._shape}")
    seq, d = x._shape[-2], x._shape[-1]
    if d % 2:
        raise ShapeError(f"{op}: head_dim (the last axis) must be even, got {d}")
    off = operator.index(offset)
    base = float(base)
    if not (base > 0.0 and math.isfinite(base)) or base == 1.0:
        raise ValueError(f"{op}: base must be a finite number > 0 and != 1, got {base}")
    batch = x.numel // (seq * d) if seq * d else 0
    pos = None
    if positions is not None:
        if not isinstance(positions, NvArray) or positions._dtype not in (dt.int32, dt.int64):
            got = (
                positions._dtype.name
                if isinstance(positions, NvArray)
                else type(positions).__name__
            )
            raise DTypeError(f"{op}: positions must be an int32/int64 NvArray, got {got}")
        if positions._device != x._device:
            raise DeviceMismatchError(
                f"{op}: positions are on {positions._device} but x is on {x._device}"
            )
        if positions._shape == (seq,):
            pos = positions.contiguous().reshape(1, seq)
        elif positions._shape == x._shape[:-1]:
            pos = positions.contiguous().reshape(batch, seq)
        else:
            raise ShapeError(
                f"{op}: positions have shape {positions._shape}, expected (seq,) = ({seq},) or "
                f"x.shape[:-1] = {x._shape[:-1]}"
            )
    out = _creation._new(x._shape, x._dtype, x._device)
    if out.numel:
        x._backend.kernels.rope(
            out.reshape(batch, seq, d),
            x.contiguous().reshape(batch, seq, d),
            pos,
            off,
            base,
            bool(interleaved),
            inverse,
        )
    return out


def rope(
    x: NvArray,
    positions: NvArray | None = None,
    offset: int = 0,
    base: float = 10000.0,
    interleaved: bool = False,
) -> NvArray:
    """Rotary position embedding of ``x`` ``(..., seq, head_dim)`` (head_dim even).

    Position of row ``s``: ``positions[..., s] + offset`` when ``positions`` (int32/int64,
    shape ``(seq,)`` or ``x.shape[:-1]``) is given, else ``s + offset``. Pair ``i`` of a row —
    ``(i, i + head_dim/2)`` (GPT-NeoX/Llama "half rotation", the default) or ``(2i, 2i+1)``
    (``interleaved=True``, GPT-J) — is rotated by the angle ``position * base ** (-2i /
    head_dim)``: ``y0 = x0 cos - x1 sin``, ``y1 = x1 cos + x0 sin``. cos/sin are computed in
    float32 (float64 for float64 ``x``); outputs are rounded once into ``x``'s dtype.

    Example: ``q = ignis.nn.rope(q, offset=past_len)`` for q of shape (batch, heads, seq, 64).
    """
    return _rope("rope", x, positions, offset, base, interleaved, False)


def rope_backward(
    grad: NvArray,
    positions: NvArray | None = None,
    offset: int = 0,
    base: float = 10000.0,
    interleaved: bool = False,
) -> NvArray:
    """The gradient of :func:`rope`: the inverse rotation of ``grad`` (same arguments)."""
    return _rope("rope_backward", grad, positions, offset, base, interleaved, True)
