"""The CUDA backend of NvArray: storage is an ignis device :class:`~ignis.Buffer`, ops are kernels
from ``cuda_src/`` (matrix products through cuBLAS where it is installed).

Work is queued on the calling thread's current stream of the array's device
(:func:`ignis.current_stream`), so ``with ignis.Stream():`` and graph capture apply to array ops
too. Host copies (``to_host``) synchronize that stream.

The hooks are grouped by family, one module each: :mod:`.elementwise` (unary, binary, where,
copy/cast, fill, arange), :mod:`.reduction` (reductions, arg-reductions, softmax) and
:mod:`.matmul`. The kernel families (``ignis._array._families``) name their CUDA
implementations by path (:mod:`.attention`, :mod:`.norm_loss`, :mod:`.indexing`, :mod:`.optim`,
:mod:`.activation`, :mod:`.linear`, ``elementwise.random``); each module is imported when its
first family runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..._device import Device
from ..._memory import Buffer, _result_block, memcpy
from ..._stream import Event, Stream, current_stream
from .._backend import Backend
from .._device import ArrayDevice
from . import direct, elementwise, matmul, reduction  # bound once: the hooks run on every op

if TYPE_CHECKING:
    from ..._dtypes import DType
    from ..array import NvArray

__all__ = ["CudaBackend", "create_backend"]


def create_backend(device: ArrayDevice) -> CudaBackend:
    """The backend of ``device`` (``"cuda:N"``)."""
    return CudaBackend(device)


class CudaBackend(Backend):
    """Executes NvArray ops with CUDA kernels on one device."""

    kind = "cuda"

    def __init__(self, device: ArrayDevice):
        super().__init__(device)
        self.gpu = Device(device.index or 0)

    # --- streams -------------------------------------------------------------------------------

    @property
    def stream(self) -> Stream:
        """The stream ops are queued on now: the thread's current stream of this device."""
        return current_stream(self.gpu)

    def default_stream(self) -> Stream:
        return current_stream(self.gpu)

    def synchronize(self) -> None:
        current_stream(self.gpu).synchronize()

    # --- memory --------------------------------------------------------------------------------

    def alloc(self, nbytes: int) -> Buffer:
        # Every op result is allocated here: ignis._memory._result_block is that path in one
        # call (the block cache of the device's resource, on the current stream).
        return _result_block(nbytes, self.gpu)

    def storage_nbytes(self, storage: Any) -> int:
        return int(storage.nbytes)

    def data_ptr(self, arr: NvArray) -> int:
        return int(arr._storage.ptr) + arr._offset

    def dlpack_device(self) -> tuple[int, int]:
        return (2, self.gpu.ordinal)  # kDLCUDA

    def wrap_external(self, ptr: int, nbytes: int, owner: Any) -> _ForeignStorage:
        return _ForeignStorage(ptr, nbytes, self.gpu, owner)

    # --- interop stream hand-off ---------------------------------------------------------------
    # Producers and consumers name streams by int: 1 is the legacy default stream, 2 the
    # per-thread default stream, anything else a CUstream handle (CUDA array interface v3 and
    # DLPack conventions). Ordering is handed over with an event, never a host synchronization.

    def cai_stream(self, arr: NvArray) -> int:
        return current_stream(self.gpu).ptr or 1

    def dlpack_import_stream(self) -> int:
        return current_stream(self.gpu).ptr or 1

    def dlpack_export_sync(self, arr: NvArray, consumer_stream: Any) -> None:
        if consumer_stream == -1:  # the consumer asked for no synchronization
            return
        ours = current_stream(self.gpu)
        theirs = _foreign_stream(consumer_stream, self.gpu)
        if theirs.ptr != ours.ptr:
            theirs.wait(ours.record(Event(self.gpu, timing=False)))

    def cai_import_sync(self, stream: Any) -> None:
        if stream is None:  # the producer needs no synchronization
            return
        ours = current_stream(self.gpu)
        theirs = _foreign_stream(stream, self.gpu)
        if theirs.ptr != ours.ptr:
            ours.wait(theirs.record(Event(self.gpu, timing=False)))

    def copyin(self, dst: NvArray, host: np.ndarray) -> None:
        if dst.numel == 0:
            return
        if dst.is_contiguous:
            memcpy(_Region(self, dst), host, host.nbytes)
            return
        staging = _contiguous_like(self, dst)
        memcpy(_Region(self, staging), host, host.nbytes)
        self.copy(dst, staging)

    def copyout(self, src: NvArray) -> np.ndarray:
        out = np.empty(src.shape, src.dtype.numpy)
        if src.numel == 0:
            return out
        if not src.is_contiguous:
            src = _contiguous_copy(self, src)
        memcpy(out, _Region(self, src), out.nbytes)  # synchronous on the current stream
        return out

    # --- elementwise ---------------------------------------------------------------------------

    def copy(self, dst: NvArray, src: NvArray) -> None:
        elementwise.copy(self, dst, src)

    def fill(self, dst: NvArray, value: Any) -> None:
        elementwise.fill(self, dst, value)

    # The hooks of every small op are the family functions themselves (their first parameter is
    # the backend), not methods that call them: one Python call less per op.
    unary = elementwise.unary
    binary = elementwise.binary
    unary_direct = direct.unary_direct
    binary_direct = direct.binary_direct

    def where(self, out: NvArray, cond: Any, a: Any, b: Any, compute: DType) -> None:
        elementwise.where(self, out, cond, a, b, compute)

    def arange(self, out: NvArray, start: float, step: float) -> None:
        elementwise.arange(self, out, start, step)

    # --- reductions ----------------------------------------------------------------------------

    def reduce(self, op: str, out: NvArray, x: NvArray, axes: tuple[int, ...], accumulate: DType,
               params: dict[str, Any]) -> None:
        reduction.reduce(self, op, out, x, axes, accumulate, params)

    reduce_direct = direct.reduce_direct

    def arg_reduce(self, op: str, out: NvArray, x: NvArray, axis: int | None) -> None:
        reduction.arg_reduce(self, op, out, x, axis)

    def softmax(self, out: NvArray, x: NvArray, axis: int, log: bool) -> None:
        reduction.softmax(self, out, x, axis, log)

    # --- matmul --------------------------------------------------------------------------------

    def matmul(self, out: NvArray, a: NvArray, b: NvArray, alpha: float, beta: float) -> None:
        matmul.matmul(self, out, a, b, alpha, beta)

    # --- kernel families: the ``cuda`` paths of _families, imported on first use -------------

    builtin_families = "cuda"


class _ForeignStorage:
    """Device memory owned by another library (DLPack / CUDA array interface import).

    ignis never frees it; ``owner`` (the producer's object) keeps it alive as long as any
    array viewing it.
    """

    __slots__ = ("ptr", "nbytes", "device", "owner")

    def __init__(self, ptr: int, nbytes: int, device: Device, owner: Any):
        self.ptr = ptr
        self.nbytes = nbytes
        self.device = device
        self.owner = owner


def _foreign_stream(value: Any, device: Device) -> Stream:
    """A borrowed :class:`Stream` for an interop stream number (None or 1: legacy default)."""
    handle = 0 if value is None or value == 1 else int(value)
    return Stream.from_handle(handle, device)


class _Region:
    """The bytes of a contiguous array, as a copy operand for :func:`ignis.memcpy`."""

    __slots__ = ("ptr", "nbytes", "device")

    def __init__(self, backend: CudaBackend, arr: NvArray):
        self.ptr = backend.data_ptr(arr)
        self.nbytes = arr.nbytes
        self.device = backend.gpu


def _contiguous_like(backend: CudaBackend, arr: NvArray) -> NvArray:
    from ..array import NvArray

    return NvArray.empty(arr.shape, dtype=arr.dtype, device=backend.device)


def _contiguous_copy(backend: CudaBackend, arr: NvArray) -> NvArray:
    out = _contiguous_like(backend, arr)
    backend.copy(out, arr)
    return out
