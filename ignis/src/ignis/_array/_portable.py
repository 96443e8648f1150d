"""The portable implementations of kernel families (``_families``): made of the Backend
primitives only, so every backend runs them when it has no implementation of its own (the CPU
backend runs these four; the CUDA backend runs its fused kernels and falls back on the first
two where none fits).

Each takes the backend first, then the family's parameters, e.g.
``matmul_bias(backend, out, a, b, bias)``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import _semantics

if TYPE_CHECKING:
    from ._backend import Backend
    from .array import NvArray

__all__ = ["matmul_bias", "matmul_row_sums", "optim_zero", "random"]


def matmul_bias(backend: Backend, out: NvArray, a: NvArray, b: NvArray, bias: NvArray) -> None:
    """``out = a @ b`` then ``out += bias`` row by row (two roundings)."""
    backend.matmul(out, a, b, 1.0, 0.0)
    row = bias._view(bias._offset, out._shape, (0, bias._strides[0]))
    backend.binary("add", out, out, row, _semantics.binary("add", out, row).compute)


def matmul_row_sums(backend: Backend, out: NvArray, sums: NvArray, a: NvArray,
                    b: NvArray) -> None:
    """``out = a @ b`` and the row sums of ``a`` by a reduction into a column view of ``sums``."""
    backend.matmul(out, a, b, 1.0, 0.0)
    spec = _semantics.reduction("sum", a._shape, a._dtype, 1, True, 0)
    column = sums._view(sums._offset, (sums._shape[0], 1), (sums._strides[0], 0))
    backend.reduce("sum", column, a, (1,), spec.accumulate, {"ddof": 0})


def optim_zero(backend: Backend, tensors: list[NvArray]) -> None:
    """One ``fill`` with 0 per array."""
    for x in tensors:
        backend.fill(x, 0)


def random(backend: Backend, kind: str, out: NvArray, seed: int, offset: int,
           params: dict[str, Any]) -> None:
    """The stream generated on the host by :func:`ignis.random.generate_host`, copied in."""
    from . import random as _random  # the front end, imported by then: no cycle at import

    host = _random.generate_host(kind, out.shape, out.dtype, seed, offset, params)
    backend.copyin(out, host)
