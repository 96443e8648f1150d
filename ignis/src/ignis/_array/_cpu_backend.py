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
from . import _cpu_math
from ._backend import Backend

if TYPE_CHECKING:
    from .array import NvArray

__all__ = ["CpuBackend", "host_view"]

_HALF = (dt.float16, dt.bfloat16)


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
    return np.dtype(np.float32) if dtype in _HALF else dtype.numpy


def _operand(x: Any, work: np.dtype) -> Any:
    if isinstance(x, (bool, int, float)):
        return work.type(x)
    v = host_view(x)
    return v if v.dtype == work else v.astype(work)


def _int_power(a: Any, b: Any) -> np.ndarray:
    """Integer power where a negative exponent gives the truncated ``1 // a**|b|``."""
    a, b = np.broadcast_arrays(np.asarray(a), np.asarray(b))
    neg = b < 0
    if not neg.any():
        return np.power(a, b)
    res = np.power(a, np.where(neg, 0, b))
    # 1 // a**|b| truncates to 1 for a == 1, to +-1 for a == -1 and to 0 for every other base.
    frac = np.where(a == 1, 1, 0)
    frac = np.where(a == -1, np.where(b % 2 == 0, 1, -1), frac)
    return np.where(neg, frac, res).astype(a.dtype, copy=False)


_BINARY = {
    "add": np.add,
    "subtract": np.subtract,
    "multiply": np.multiply,
    "divide": np.true_divide,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "equal": np.equal,
    "not_equal": np.not_equal,
    "less": np.less,
    "less_equal": np.less_equal,
    "greater": np.greater,
    "greater_equal": np.greater_equal,
}


def _unary_fn(op: str, v: np.ndarray, params: dict[str, Any]) -> np.ndarray:
    if op == "neg":
        return np.negative(v)
    if op == "abs":
        return np.abs(v)
    if op == "relu":
        return np.maximum(v, v.dtype.type(0))
    if op == "rsqrt":
        return v.dtype.type(1) / np.sqrt(v)
    if op == "sigmoid":
        return _cpu_math.sigmoid(v)
    if op == "silu":
        return _cpu_math.silu(v)
    if op == "gelu":
        return _cpu_math.gelu(v, params.get("approximate", "none"))
    if op == "erf":
        return _cpu_math.erf(v).astype(v.dtype)
    return getattr(np, op)(v)  # exp log sqrt sin cos tanh


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
        work = _work(compute)
        with np.errstate(all="ignore"):
            res = _unary_fn(op, _operand(x, work), params)
            host_view(out)[...] = res

    def binary(self, op: str, out: NvArray, a: Any, b: Any, compute: dt.DType) -> None:
        work = _work(compute)
        with np.errstate(all="ignore"):
            av, bv = _operand(a, work), _operand(b, work)
            if op == "power":
                res = _int_power(av, bv) if work.kind in "iu" else np.power(av, bv)
            else:
                res = _BINARY[op](av, bv)
            host_view(out)[...] = res

    def where(self, out: NvArray, cond: Any, a: Any, b: Any, compute: dt.DType) -> None:
        work = _work(compute)
        c = bool(cond) if isinstance(cond, (bool, int, float)) else host_view(cond).astype(bool)
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
        acc = accumulate.numpy
        v = host_view(x)
        count = 1
        for a in axes:
            count *= x.shape[a]
        with np.errstate(all="ignore"):
            if op == "sum":
                res = np.sum(v, axis=axes, dtype=acc, keepdims=True)
            elif op in ("max", "min"):
                w = v.astype(_work(x.dtype)) if x.dtype in _HALF else v
                fn = np.max if op == "max" else np.min
                res = fn(w, axis=axes, keepdims=True)
            elif op == "mean":
                res = np.sum(v, axis=axes, dtype=acc, keepdims=True) / acc.type(count)
            elif op == "var":
                w = v.astype(acc)
                mean = np.sum(w, axis=axes, keepdims=True) / acc.type(count)
                dev = w - mean
                denom = max(count - params.get("ddof", 0), 0)
                res = np.sum(dev * dev, axis=axes, keepdims=True) / acc.type(denom)
            else:
                raise ValueError(f"unknown reduction {op!r}")
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


    # --- neural-network families: each section delegates to its family module ------------------

    # --- [indexing]

    def take(self, out: NvArray, a: NvArray, indices: NvArray) -> None:
        from . import _cpu_indexing as ref  # imported on first use: it needs this module

        ref.take(out, a, indices)

    def index_add(
        self, dst: NvArray, indices: NvArray, src: NvArray, alpha: Any, deterministic: bool
    ) -> None:
        from . import _cpu_indexing as ref

        ref.index_add(dst, indices, src, alpha, deterministic)

    def dropout(self, y: NvArray, mask: NvArray, x: NvArray, threshold: int, scale: float,
                seed: int, offset: int) -> None:
        from . import _cpu_indexing as ref

        ref.dropout(y, mask, x, threshold, scale, seed, offset)

    def dropout_backward(self, out: NvArray, grad: NvArray, mask: NvArray, scale: float) -> None:
        from . import _cpu_indexing as ref

        ref.dropout_backward(out, grad, mask, scale)

    def rope(self, out: NvArray, x: NvArray, positions: Any, offset: int, base: float,
             interleaved: bool, inverse: bool) -> None:
        from . import _cpu_indexing as ref

        ref.rope(out, x, positions, offset, base, interleaved, inverse)

    # --- [end indexing]

    # --- [norm-loss]

    # The NumPy reference of the fused kernels lives in _cpu_nn_norm_loss (imported on first
    # use: it imports this module).

    def layer_norm(self, y, mean, rstd, x, weight, bias, eps):
        from . import _cpu_nn_norm_loss

        _cpu_nn_norm_loss.layer_norm(y, mean, rstd, x, weight, bias, eps)

    def layer_norm_backward(self, grad_x, grad_weight, grad_bias, grad_y, x, mean, rstd, weight):
        from . import _cpu_nn_norm_loss

        _cpu_nn_norm_loss.layer_norm_backward(
            grad_x, grad_weight, grad_bias, grad_y, x, mean, rstd, weight
        )

    def rms_norm(self, y, rstd, x, weight, eps):
        from . import _cpu_nn_norm_loss

        _cpu_nn_norm_loss.rms_norm(y, rstd, x, weight, eps)

    def rms_norm_backward(self, grad_x, grad_weight, grad_y, x, rstd, weight):
        from . import _cpu_nn_norm_loss

        _cpu_nn_norm_loss.rms_norm_backward(grad_x, grad_weight, grad_y, x, rstd, weight)

    def cross_entropy(self, loss, lse, logits, targets, ignore_index, label_smoothing, reduction):
        from . import _cpu_nn_norm_loss

        _cpu_nn_norm_loss.cross_entropy(
            loss, lse, logits, targets, ignore_index, label_smoothing, reduction
        )

    def cross_entropy_backward(
        self, grad_logits, grad_loss, logits, targets, lse, ignore_index, label_smoothing, reduction
    ):
        from . import _cpu_nn_norm_loss

        _cpu_nn_norm_loss.cross_entropy_backward(
            grad_logits, grad_loss, logits, targets, lse, ignore_index, label_smoothing, reduction
        )

    def softmax_backward(self, grad_x, grad_y, y, log):
        from . import _cpu_nn_norm_loss

        _cpu_nn_norm_loss.softmax_backward(grad_x, grad_y, y, log)

    # --- [end norm-loss]

    # --- [attention]

    from . import _cpu_attention as _attention  # the family module, bound once

    def attention_forward(self, out: NvArray, lse: NvArray, q: NvArray, k: NvArray, v: NvArray,
                          causal: bool, scale: float) -> None:
        self._attention.forward(out, lse, q, k, v, causal, scale)

    def attention_backward(self, dq: NvArray, dk: NvArray, dv: NvArray, grad_out: NvArray,
                           q: NvArray, k: NvArray, v: NvArray, out: NvArray, lse: NvArray,
                           causal: bool, scale: float) -> None:
        self._attention.backward(dq, dk, dv, grad_out, q, k, v, out, lse, causal, scale)

    def decode_attention(self, out: NvArray, q: NvArray, k_cache: NvArray, v_cache: NvArray,
                         cache_len: int, scale: float) -> None:
        self._attention.decode(out, q, k_cache, v_cache, cache_len, scale)

    # --- [end attention]

    # --- [optim]

    from . import _cpu_optim as _optim  # the family module, bound once

    # The update itself is the returned function (NumPy has nothing to prepare).
    def optim_sgd(self, params: Any, grads: Any, momentum_buffers: Any, masters: Any, steps: Any,
                  lr: Any, found_inf: Any, hyper: dict[str, Any]) -> Any:
        return lambda: self._optim.sgd(params, grads, momentum_buffers, masters, steps, lr,
                                       found_inf, hyper)

    def optim_adam(self, params: Any, grads: Any, exp_avgs: Any, exp_avg_sqs: Any,
                   max_exp_avg_sqs: Any, masters: Any, steps: Any, lr: Any, found_inf: Any,
                   hyper: dict[str, Any]) -> Any:
        return lambda: self._optim.adam(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs,
                                        masters, steps, lr, found_inf, hyper)

    def optim_l2_norm(self, out: Any, tensors: Any) -> None:
        self._optim.l2_norm(out, tensors)

    def optim_scale(self, tensors: Any, factor: Any, mode: int, max_norm: float,
                    found_inf: Any) -> None:
        self._optim.scale(tensors, factor, mode, max_norm, found_inf)

    def optim_update_scale(self, scale: Any, growth_tracker: Any, found_inf: Any,
                           growth_factor: float, backoff_factor: float,
                           growth_interval: int) -> None:
        self._optim.update_scale(scale, growth_tracker, found_inf, growth_factor,
                                 backoff_factor, growth_interval)

    # --- [end optim]

    # --- [activation]

    def activation_backward(self, out: NvArray, grad: NvArray, saved: NvArray, kind: str) -> None:
        from . import _cpu_activation  # imported on first use: it imports this module

        _cpu_activation.activation_backward(out, grad, saved, kind)

    # --- [end activation]


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
