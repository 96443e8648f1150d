"""NumPy reference of the graph-safe random families (``random_from_state``,
``random_store_state``; see :mod:`ignis.random`'s notes on ``GraphDraws``).

``state`` is a uint64 array ``(2,)`` holding ``(seed, base block)``; a call draws the stream
``(seed, base + offset)`` exactly as the eager ``random`` family (``generate_host``) does.
Example: ``store_state(state, 7, 100)`` then ``random_from_state("uniform", out, state, 2, {})``
fills ``out`` as ``random("uniform", out, 7, 102, {})`` would.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from . import random as _random
from ._cpu_backend import host_view

if TYPE_CHECKING:
    from .array import NvArray

__all__ = ["random_from_state", "store_state"]

_MASK64 = 0xFFFFFFFFFFFFFFFF


def random_from_state(
    kind: str, out: NvArray, state: NvArray, offset: int, params: dict[str, Any]
) -> None:
    """Fill C-contiguous ``out`` from the stream ``(state[0], state[1] + offset)``."""
    seed, base = (int(v) for v in host_view(state))
    host = _random.generate_host(
        kind, out.shape, out.dtype, seed, (base + offset) & _MASK64, params
    )
    host_view(out)[...] = host


def store_state(state: NvArray, seed: int, offset: int) -> None:
    """``state[:] = (seed, offset)`` (each taken modulo 2**64)."""
    host_view(state)[...] = np.array([seed & _MASK64, offset & _MASK64], dtype=np.uint64)
