"""Dropout inside the fused attention kernels: the stream of one call and its keep mask.

PyTorch's convention: the softmax probabilities ``P`` are dropped before ``P @ V``, kept ones
scaled by ``1 / (1 - p)``; the log-sum-exp (and each row's normalisation) is that of the
undropped ``P``. The mask is never stored: the kernels draw each element's keep bit from the
Philox stream of :mod:`ignis.random` in registers, forward and backward alike, as a pure function
of ``(seed, offset, bh, i, j)`` (``bh = b * H + h``, query ``i``, key ``j``):

* The call's stream ``(seed, offset)`` covers ``B * H * ceil(L / 2) * ceil(S / 2)`` Philox
  blocks (:func:`blocks`); each block is a 2 x 2 square of one head's ``(L, S)`` matrix.
* Element ``(bh, i, j)`` is lane ``2 * (i % 2) + j % 2`` of block
  ``offset + (bh * ceil(L / 2) + i // 2) * ceil(S / 2) + j // 2``.
* It is kept when ``(word >> 8) >= ceil(float32(p) * 2**24)``: when the float32 uniform value
  ``ignis.random`` gives for that word is ``>= p``, as for :func:`ignis.nn.dropout`.

:func:`keep_mask` is that mapping in NumPy (the CPU backend uses it; the CUDA kernels compute
the same bits). Inside a CUDA graph capture that records its draws
(:class:`ignis.random.GraphDraws`) the stream is a device ``state`` (seed, base block) and
``offset`` counts from the base, so that each replay draws a new mask.

Example::

    >>> d = AttentionDropout(0.1, seed=7, offset=0)
    >>> keep = keep_mask(d, (2, 4, 128, 128))     # (B, H, L, S) bool, about 90% True
"""

from __future__ import annotations

import operator
from typing import Any, NamedTuple

import numpy as np

from . import random as _random
from ._nn_dropout_rope import keep_threshold

__all__ = ["AttentionDropout", "blocks", "draw", "keep_mask", "check_p"]


class AttentionDropout(NamedTuple):
    """The dropout of one attention call: probability ``p`` (``0 < p <= 1``) and the Philox
    stream ``(seed, offset)`` its mask comes from (``offset`` in 128-bit blocks, as in
    :mod:`ignis.random`). ``state``: inside a graph capture, the device array ``(seed, base)``
    the kernels read at each replay (``offset`` then counts from ``base``; ``seed`` unused).
    The forward and backward pass of one call take the same value, so both see one mask.

    Example: ``AttentionDropout(0.1, seed=7, offset=0)``.
    """

    p: float
    seed: int
    offset: int
    state: Any = None

    @property
    def threshold(self) -> int:
        """Kept when ``(word >> 8) >= threshold`` (see :func:`keep_threshold`)."""
        return keep_threshold(self.p)

    @property
    def scale(self) -> float:
        """``1 / (1 - p)``, the factor of the kept probabilities (0 for ``p == 1``)."""
        return 1.0 / (1.0 - self.p) if self.p < 1.0 else 0.0


def check_p(op: str, p: Any) -> float:
    """``p`` as a float in ``[0, 1]``; TypeError / ValueError naming ``op`` otherwise."""
    if isinstance(p, bool) or not isinstance(p, (int, float, np.floating, np.integer)):
        raise TypeError(f"{op}: dropout_p must be a float in [0, 1], got {type(p).__name__}")
    value = float(p)
    if not 0.0 <= value <= 1.0:  # (NaN fails too)
        raise ValueError(f"{op}: dropout_p must be in [0, 1], got {value}")
    return value


def blocks(b: int, h: int, n_q: int, n_k: int) -> int:
    """Philox blocks one call over ``(B, H, L, S)`` takes: ``B H ceil(L/2) ceil(S/2)``."""
    return b * h * (-(-n_q // 2)) * (-(-n_k // 2))


def draw(
    op: str,
    p: float,
    shape: tuple[int, int, int, int],
    device: Any,
    *,
    seed: int | None = None,
    offset: int | None = None,
    generator: Any = None,
) -> AttentionDropout | None:
    """The dropout of one call over ``shape`` = ``(B, H, L, S)`` on ``device`` (None for
    ``p == 0``): the stream ``(seed, offset)`` if given, else the next :func:`blocks` blocks of
    ``generator`` (default: the global ``ignis.random`` one), which advances; inside a graph
    capture that records draws on ``device``, the capture's device state."""
    prob = check_p(op, p)
    if (seed is None) != (offset is None):
        raise ValueError(f"{op}: give both seed and offset, or neither (use a generator)")
    if seed is not None:
        if generator is not None:
            raise ValueError(f"{op}: give either (seed, offset) or generator, not both")
        s, start = _random._check_seed(seed), operator.index(offset)
        if start < 0:
            raise ValueError(f"{op}: offset must be >= 0, got {offset}")
        return AttentionDropout(prob, s, start) if prob > 0.0 else None
    if prob == 0.0:
        return None
    gen = generator if generator is not None else _random._default
    words = 4 * blocks(*shape)
    cap = _random._capturing
    if cap is not None and cap._covers(device):
        state, rel = cap._take(gen, words)
        return AttentionDropout(prob, 0, rel, state)
    return AttentionDropout(prob, gen.seed, gen._take(words))


def _stream(drop: AttentionDropout) -> tuple[int, int]:
    """``(seed, first block)`` of ``drop``, reading a graph capture's state from the host."""
    if drop.state is None:
        return drop.seed, drop.offset
    from ._cpu_backend import host_view

    seed, base = (int(x) for x in host_view(drop.state))
    return seed, (base + drop.offset) & 0xFFFFFFFFFFFFFFFF


def keep_mask(drop: AttentionDropout, shape: tuple[int, int, int, int]) -> np.ndarray:
    """The ``(B, H, L, S)`` bool keep mask of ``drop`` (see the module notes for the mapping)."""
    b, h, n_q, n_k = shape
    l2, s2 = -(-n_q // 2), -(-n_k // 2)
    seed, first = _stream(drop)
    words = _random._words(seed, first, 4 * blocks(b, h, n_q, n_k))
    keep = (words >> np.uint64(8)) >= np.uint64(drop.threshold)
    # word (bh, i // 2, j // 2, i % 2, j % 2) -> element (bh, i, j)
    square = keep.reshape(b * h, l2, s2, 2, 2).transpose(0, 1, 3, 2, 4)
    return square.reshape(b, h, 2 * l2, 2 * s2)[:, :, :n_q, :n_k]
