"""Reduction operators and the ignis dtype -> ``ncclDataType_t`` table.

Example::

    >>> nccl_dtype(ignis.bfloat16, "all_reduce")
    9
    >>> ReduceOp.AVG.value
    4
"""

from __future__ import annotations

import enum
from typing import Any

from .. import _dtypes as dt
from .._errors import DTypeError

__all__ = ["ReduceOp", "NCCL_DTYPES", "nccl_dtype", "reduce_op"]


class ReduceOp(enum.Enum):
    """How a reduction combines the ranks' values; the value is NCCL's ``ncclRedOp_t``.

    ``AVG`` is the sum divided by the world size (``ncclAvg``, NCCL >= 2.10; on an older NCCL
    the process group sums and then divides).
    """

    SUM = 0
    PRODUCT = 1
    MAX = 2
    MIN = 3
    AVG = 4


#: ignis dtype name -> ncclDataType_t (nccl.h). Other dtypes (bool, complex, float8) are refused.
NCCL_DTYPES: dict[str, int] = {
    "int8": 0,
    "uint8": 1,
    "int32": 2,
    "uint32": 3,
    "int64": 4,
    "uint64": 5,
    "float16": 6,
    "float32": 7,
    "float64": 8,
    "bfloat16": 9,
}


def nccl_dtype(dtype: Any, op: str) -> int:
    """The ``ncclDataType_t`` of an ignis dtype.

    Raises:
        DTypeError: for a dtype NCCL has no type for, naming ``op`` and the supported ones.
    """
    name = dt.as_dtype(dtype).name
    try:
        return NCCL_DTYPES[name]
    except KeyError:
        raise DTypeError(
            f"{op}: NCCL has no data type for {name}; expected one of {', '.join(NCCL_DTYPES)}"
        ) from None


def reduce_op(op: Any, where: str) -> ReduceOp:
    """``op`` as a :class:`ReduceOp` (a ReduceOp, or its name: ``"sum"``, ``"avg"``, ...)."""
    if isinstance(op, ReduceOp):
        return op
    if isinstance(op, str) and op.upper() in ReduceOp.__members__:
        return ReduceOp[op.upper()]
    raise ValueError(
        f"{where}: op must be a ReduceOp ({', '.join(ReduceOp.__members__)}), got {op!r}"
    )
