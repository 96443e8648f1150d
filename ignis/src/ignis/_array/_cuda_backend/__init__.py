"""The CUDA backend of NvArray: storage is an ignis device :class:`~ignis.Buffer`, ops are kernels
from ``cuda_src/`` (matrix products through cuBLAS where it is installed).

Work is queued on the calling thread's current stream of the array's device
(:func:`ignis.current_stream`), so ``with ignis.Stream():`` and graph capture apply to array ops
too. Host copies (``to_host``) synchronize that stream.

The hooks are grouped by family, one module each: :mod:`.elementwise` (unary, binary, where,
copy/cast, fill, arange, random), :mod:`.reduction` (reductions, arg-reductions, softmax) and
:mod:`.matmul`.
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

    def random(self, kind: str, out: NvArray, seed: int, offset: int, params: dict[str, Any]) -> None:
        elementwise.random(self, kind, out, seed, offset, params)

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

    def matmul_bias(self, out: NvArray, a: NvArray, b: NvArray, bias: NvArray) -> None:
        if not matmul.matmul_bias(self, out, a, b, bias):
            Backend.matmul_bias(self, out, a, b, bias)

    def matmul_row_sums(self, out: NvArray, sums: NvArray, a: NvArray, b: NvArray) -> None:
        if not matmul.matmul_row_sums(self, out, sums, a, b):
            Backend.matmul_row_sums(self, out, sums, a, b)


    # --- neural-network families: each section delegates to its family module ------------------

    # --- [indexing]

    from . import indexing as _indexing  # the family module, bound once

    def take(self, out: NvArray, a: NvArray, indices: NvArray) -> None:
        self._indexing.take(self, out, a, indices)

    def index_add(self, dst: NvArray, indices: NvArray, src: NvArray, alpha: Any,
                  deterministic: bool) -> None:
        self._indexing.index_add(self, dst, indices, src, alpha, deterministic)

    def dropout(self, y: NvArray, mask: NvArray, x: NvArray, threshold: int, scale: float,
                seed: int, offset: int) -> None:
        self._indexing.dropout(self, y, mask, x, threshold, scale, seed, offset)

    def dropout_backward(self, out: NvArray, grad: NvArray, mask: NvArray, scale: float) -> None:
        self._indexing.dropout_backward(self, out, grad, mask, scale)

    def rope(self, out: NvArray, x: NvArray, positions: Any, offset: int, base: float,
             interleaved: bool, inverse: bool) -> None:
        self._indexing.rope(self, out, x, positions, offset, base, interleaved, inverse)

    # --- [end indexing]

    # --- [norm-loss]

    # Kernels of cuda_src/norm.cu and cuda_src/cross_entropy.cu, planned in .norm_loss
    # (imported on first use, so a backend that never runs them never loads the module).

    def layer_norm(self, y, mean, rstd, x, weight, bias, eps):
        from . import norm_loss

        norm_loss.layer_norm(self, y, mean, rstd, x, weight, bias, eps)

    def layer_norm_backward(self, grad_x, grad_weight, grad_bias, grad_y, x, mean, rstd, weight):
        from . import norm_loss

        norm_loss.layer_norm_backward(
            self, grad_x, grad_weight, grad_bias, grad_y, x, mean, rstd, weight
        )

    def rms_norm(self, y, rstd, x, weight, eps):
        from . import norm_loss

        norm_loss.rms_norm(self, y, rstd, x, weight, eps)

    def rms_norm_backward(self, grad_x, grad_weight, grad_y, x, rstd, weight):
        from . import norm_loss

        norm_loss.rms_norm_backward(self, grad_x, grad_weight, grad_y, x, rstd, weight)

    def cross_entropy(self, loss, lse, logits, targets, ignore_index, label_smoothing, reduction):
        from . import norm_loss

        norm_loss.cross_entropy(
            self, loss, lse, logits, targets, ignore_index, label_smoothing, reduction
        )

    def cross_entropy_backward(
        self, grad_logits, grad_loss, logits, targets, lse, ignore_index, label_smoothing, reduction
    ):
        from . import norm_loss

        norm_loss.cross_entropy_backward(
            self, grad_logits, grad_loss, logits, targets, lse, ignore_index, label_smoothing,
            reduction
        )

    def softmax_backward(self, grad_x, grad_y, y, log):
        from . import norm_loss

        norm_loss.softmax_backward(self, grad_x, grad_y, y, log)

    # --- [end norm-loss]

    # --- [attention]

    from . import attention as _attention  # the family module, bound once

    def attention_forward(self, out: NvArray, lse: NvArray, q: NvArray, k: NvArray, v: NvArray,
                          causal: bool, scale: float) -> None:
        self._attention.forward(self, out, lse, q, k, v, causal, scale)

    def attention_backward(self, dq: NvArray, dk: NvArray, dv: NvArray, grad_out: NvArray,
                           q: NvArray, k: NvArray, v: NvArray, out: NvArray, lse: NvArray,
                           causal: bool, scale: float) -> None:
        self._attention.backward(self, dq, dk, dv, grad_out, q, k, v, out, lse, causal, scale)

    def decode_attention(self, out: NvArray, q: NvArray, k_cache: NvArray, v_cache: NvArray,
                         cache_len: int, scale: float) -> None:
        self._attention.decode(self, out, q, k_cache, v_cache, cache_len, scale)

    # --- [end attention]

    # --- [optim]

    from . import optim as _optim  # the family module, bound once

    def optim_sgd(self, params: Any, grads: Any, momentum_buffers: Any, masters: Any, steps: Any,
                  lr: Any, found_inf: Any, hyper: dict[str, Any]) -> Any:
        return self._optim.sgd(self, params, grads, momentum_buffers, masters, steps, lr,
                               found_inf, hyper)

    def optim_adam(self, params: Any, grads: Any, exp_avgs: Any, exp_avg_sqs: Any,
                   max_exp_avg_sqs: Any, masters: Any, steps: Any, lr: Any, found_inf: Any,
                   hyper: dict[str, Any]) -> Any:
        return self._optim.adam(self, params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs,
                                masters, steps, lr, found_inf, hyper)

    def optim_l2_norm(self, out: Any, tensors: Any) -> None:
        self._optim.l2_norm(self, out, tensors)

    def optim_scale(self, tensors: Any, factor: Any, mode: int, max_norm: float,
                    found_inf: Any) -> None:
        self._optim.scale(self, tensors, factor, mode, max_norm, found_inf)

    def optim_zero(self, tensors: Any) -> None:
        self._optim.zero(self, tensors)

    def optim_update_scale(self, scale: Any, growth_tracker: Any, found_inf: Any,
                           growth_factor: float, backoff_factor: float,
                           growth_interval: int) -> None:
        self._optim.update_scale(self, scale, growth_tracker, found_inf, growth_factor,
                                 backoff_factor, growth_interval)

    # --- [end optim]

    # --- [activation]

    from . import activation as _activation  # the family module, bound once

    def activation_backward(self, out: Any, grad: Any, saved: Any, kind: str) -> None:
        self._activation.activation_backward(self, out, grad, saved, kind)

    # --- [end activation]


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
