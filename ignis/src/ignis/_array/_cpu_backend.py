"""The CPU backend: every hook of :class:`~ignis._array._backend.Backend` through NumPy.

Storage is a 1-D ``numpy.uint8`` array; an NvArray is viewed as a strided NumPy array over it
(``numpy.ndarray(shape, dtype, buffer=storage, offset=..., strides=...)``), so views share
memory exactly as they will on the GPU. float16/bfloat16 work runs in float32 and is rounded
once into the output, the same arithmetic the CUDA kernels use, which makes this backend the
reference GPU results are tested against.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .. import _dtypes as dt
from ._backend import Backend
from ._op_table import ELEMENTWISE
from ._reduction_table import REDUCTIONS

if TYPE_CHECKING:
    from .array import NvArray

__all__ = ["CpuBackend", "host_view"]

_HALF = (dt.float16, dt.bfloat16)
# compute dtype name -> the NumPy dtype it runs in (float32 for the half types): a dict lookup
# on every op (a test against _HALF would call DType.__eq__). bfloat16's own NumPy dtype is not
# read here (it would import ml_dtypes).
_WORK = {
    d.name: np.dtype(np.float32) if d.name in ("float16", "bfloat16") else d.numpy
    for d in dt.every_dtype
}


def host_view(arr: NvArray) -> np.ndarray:
    """A NumPy array sharing ``arr``'s memory (CPU arrays only)."""
    shape = arr._shape
    if 0 in shape:
        return np.empty(shape, arr._dtype.numpy)
    return np.ndarray(
        shape, arr._dtype.numpy, buffer=arr._storage, offset=arr._offset, strides=arr._strides
    )


def _work(dtype: dt.DType) -> np.dtype:
    """The NumPy dtype a computation in ``dtype`` runs in (float32 for the half types)."""
    return _WORK[dtype.name]


def _operand(x: Any, work: np.dtype) -> Any:
    if isinstance(x, (bool, int, float, complex)):
        return work.type(x)
    v = host_view(x)
    return v if v.dtype == work else v.astype(work)


class CpuBackend(Backend):
    """Executes NvArray ops on the host with NumPy."""

    kind = "cpu"

    # --- memory --------------------------------------------------------------------------------

    def alloc(self, nbytes: int) -> np.ndarray:
        return np.empty(nbytes, dtype=np.uint8)

    def storage_nbytes(self, storage: np.ndarray) -> int:
        return int(storage.nbytes)

    def copyin(self, dst: NvArray, host: np.ndarray) -> None:
        host_view(dst)[...] = host

    def copyout(self, src: NvArray) -> np.ndarray:
        return np.array(host_view(src), copy=True, order="C")

    def copy(self, dst: NvArray, src: NvArray) -> None:
        d, s = host_view(dst), host_view(src)
        if d.dtype != s.dtype and {d.dtype, s.dtype} == {dt.float16.numpy, dt.bfloat16.numpy}:
            s = s.astype(np.float32)  # no direct NumPy cast between the two half types
        with np.errstate(all="ignore"):
            d[...] = s

    def fill(self, dst: NvArray, value: Any) -> None:
        with np.errstate(all="ignore"):
            host_view(dst)[...] = value

    def data_ptr(self, arr: NvArray) -> int:
        return int(arr._storage.__array_interface__["data"][0]) + arr._offset

    def dlpack_device(self) -> tuple[int, int]:
        return (1, 0)

    def wrap_external(self, ptr: int, nbytes: int, owner: Any) -> np.ndarray:
        return np.asarray(_HostMemory(ptr, nbytes, owner))

    # --- elementwise ---------------------------------------------------------------------------

    def unary(
        self, op: str, out: NvArray, x: NvArray, compute: dt.DType, params: dict[str, Any]
    ) -> None:
        work = _WORK[compute.name]
        entry = ELEMENTWISE[op]
        # (complex operands: the table's complex reference where it has one)
        fn = entry.numpy_complex or entry.numpy if work.kind == "c" else entry.numpy
        with np.errstate(all="ignore"):
            res = fn(_operand(x, work), **params)
            host_view(out)[...] = res

    def binary(self, op: str, out: NvArray, a: Any, b: Any, compute: dt.DType) -> None:
        work = _WORK[compute.name]
        with np.errstate(all="ignore"):
            res = ELEMENTWISE[op].numpy(_operand(a, work), _operand(b, work))
            host_view(out)[...] = res

    def where(self, out: NvArray, cond: Any, a: Any, b: Any, compute: dt.DType) -> None:
        work = _work(compute)
        c = (
            bool(cond)
            if isinstance(cond, (bool, int, float, complex))
            else host_view(cond).astype(bool)
        )
        with np.errstate(all="ignore"):
            host_view(out)[...] = np.where(c, _operand(a, work), _operand(b, work))

    # --- reductions ----------------------------------------------------------------------------

    def reduce(
        self,
        op: str,
        out: NvArray,
        x: NvArray,
        axes: tuple[int, ...],
        accumulate: dt.DType,
        params: dict[str, Any],
    ) -> None:
        # The table's NumPy reference on the input in the accumulation dtype (float32 for
        # 16-bit floats; int64/uint64 for integer sums; bool for all/any).
        v = host_view(x)
        acc = accumulate.numpy
        if v.dtype != acc:
            v = v.astype(acc)
        with np.errstate(all="ignore"):
            res = REDUCTIONS[op].numpy(v, axes, True, params.get("ddof", 0))
            host_view(out)[...] = res

    def arg_reduce(self, op: str, out: NvArray, x: NvArray, axis: int | None) -> None:
        v = host_view(x)
        if x.dtype in _HALF:
            v = v.astype(np.float32)  # exact, same order
        fn = np.argmax if op == "argmax" else np.argmin
        host_view(out)[...] = fn(v, axis=axis, keepdims=True)

    def softmax(self, out: NvArray, x: NvArray, axis: int, log: bool) -> None:
        if out.numel == 0:
            return
        work = _work(out.dtype)
        v = _operand(x, work)
        with np.errstate(all="ignore"):
            z = v - np.max(v, axis=axis, keepdims=True)
            e = np.exp(z)
            s = np.sum(e, axis=axis, keepdims=True)
            host_view(out)[...] = z - np.log(s) if log else e / s

    def matmul(self, out: NvArray, a: NvArray, b: NvArray, alpha: float, beta: float) -> None:
        work = _work(out.dtype)
        with np.errstate(all="ignore"):
            res = np.matmul(_operand(a, work), _operand(b, work))
            if alpha != 1:
                res *= work.type(alpha)
            if beta != 0:
                res += work.type(beta) * _operand(out, work)
            host_view(out)[...] = res

    # --- kernel families ----------------------------------------------------------------------
    # Their NumPy references are the ``cpu`` paths of _families (the _cpu_* modules), found
    # when a family first runs; the families without one run their portable form.

    builtin_families = "cpu"


class _HostMemory:
    """Exposes foreign host memory as a NumPy buffer and keeps its owner alive."""

    def __init__(self, ptr: int, nbytes: int, owner: Any):
        self._owner = owner
        self.__array_interface__ = {
            "data": (ptr, False),
            "shape": (nbytes,),
            "typestr": "|u1",
            "version": 3,
        }
