"""The graph-safe random families of the CUDA backend: ``random_from_state`` and
``random_store_state`` (kernels in ``cuda_src/random.cu``; see :mod:`ignis.random`'s notes on
``GraphDraws``).

``random_from_state`` launches the ``*_from_state`` twin of the kernel the eager ``random``
family launches (same grid, same values): it takes a pointer to the device state ``(seed,
base block)`` and the call's offset from that base instead of the key and offset as values, so
the graph that captures it reads the state each replay wrote. ``store_state`` queues the
one-thread kernel that writes that state, on the current stream, before a replay.

Example: ``kernel_names()`` lists every name expression, for the compile checks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ... import _dtypes as dt
from ..._errors import DTypeError, ShapeError
from ._kernels import CTYPE, library_kernel
from .indexing import _launch, _ptr

if TYPE_CHECKING:
    from ..array import NvArray

__all__ = ["random_from_state", "store_state", "kernel_name", "kernel_names", "SOURCE"]

SOURCE = "random.cu"
THREADS = 256  # threads per block (as the eager random kernels)
STORE_STATE = "ignis::rng::store_state"


def kernel_name(kind: str, dtype: dt.DType, wide: bool = False) -> str:
    """The name expression of the ``kind`` ("uniform", "normal", "integers") kernel reading its
    stream from device state, e.g. ``ignis::rng::uniform_from_state<float>``."""
    if kind == "integers":
        return f"ignis::rng::integers_from_state<{CTYPE[dtype]}, {'true' if wide else 'false'}>"
    return f"ignis::rng::{kind}_from_state<{CTYPE[dtype]}>"


def kernel_names() -> list[str]:
    """Every name expression this module can launch (pure: the CPU tests compile them)."""
    names = [STORE_STATE]
    for d in dt.floating_dtypes:
        names += [kernel_name("uniform", d), kernel_name("normal", d)]
    for d in dt.integer_dtypes:
        names += [kernel_name("integers", d, False), kernel_name("integers", d, True)]
    return names


def _wrap64(v: int) -> int:
    """``v`` modulo 2**64 as a signed int64 (the host reference wraps the same way)."""
    v &= 0xFFFFFFFFFFFFFFFF
    return v - 2**64 if v >= 2**63 else v


def random_from_state(
    backend: Any, kind: str, out: NvArray, state: NvArray, offset: int, params: dict[str, Any]
) -> None:
    """Fill C-contiguous ``out`` from the stream ``(state[0], state[1] + offset)``."""
    if kind not in ("uniform", "normal", "integers"):
        raise ValueError(
            f"random: unknown kind {kind!r}; expected 'uniform', 'normal' or 'integers'"
        )
    dtype = out._dtype
    if (kind == "integers") != (dtype.kind in "iu") or dtype.kind not in "iuf":
        raise DTypeError(f"random: {kind} values cannot be drawn into {dtype.name}")
    n = out.numel
    if n == 0:
        return
    if not out.is_contiguous:
        raise ShapeError(f"random: the output must be C-contiguous, got strides {out._strides}")
    offset &= 0xFFFFFFFFFFFFFFFF
    if kind == "integers":
        low, high = int(params["low"]), int(params["high"])
        span = high - low
        if not 1 <= span <= 2**64:
            raise ValueError(f"random: integers need 1 <= high - low <= 2**64, got [{low}, {high})")
        wide = span > 2**32  # two words per element
        per_block = 2 if wide else 4
        name = kernel_name(kind, dtype, wide)
        args = [_ptr(out), n, _ptr(state), offset, _wrap64(low), span - 1]
    else:
        per_block = 2 if dtype is dt.float64 else 4  # elements one Philox block gives
        name = kernel_name(kind, dtype)
        args = [_ptr(out), n, _ptr(state), offset]
    blocks = -(-n // per_block)
    _launch(backend, SOURCE, name, -(-blocks // THREADS), THREADS, args)


def store_state(backend: Any, state: NvArray, seed: int, offset: int) -> None:
    """Queue ``state[:] = (seed, offset)`` on the current stream (one thread)."""
    library_kernel(SOURCE, STORE_STATE, backend.gpu).launch(
        1,
        1,
        [_ptr(state), seed & 0xFFFFFFFFFFFFFFFF, offset & 0xFFFFFFFFFFFFFFFF],
        stream=backend.stream,
    )
