"""The linear layer's fused epilogues on the CUDA backend (families ``matmul_bias`` and
``matmul_row_sums``): one cuBLASLt call with the epilogue where :mod:`.matmul` plans one for
the operands, else the portable pair of calls (``_portable``: the GEMM, then the add or the
row-sum reduction).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import _portable
from . import matmul

if TYPE_CHECKING:
    from ..array import NvArray

__all__ = ["matmul_bias", "matmul_row_sums"]


def matmul_bias(backend: Any, out: NvArray, a: NvArray, b: NvArray, bias: NvArray) -> None:
    """``out = a @ b + bias``, fused where cuBLASLt can."""
    if not matmul.matmul_bias(backend, out, a, b, bias):
        _portable.matmul_bias(backend, out, a, b, bias)


def matmul_row_sums(backend: Any, out: NvArray, sums: NvArray, a: NvArray, b: NvArray) -> None:
    """``out = a @ b`` and ``sums = a.sum(axis=1)``, fused where cuBLASLt can."""
    if not matmul.matmul_row_sums(backend, out, sums, a, b):
        _portable.matmul_row_sums(backend, out, sums, a, b)
