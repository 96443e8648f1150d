"""The backend interface of NvArray and the registry that maps devices to backends.

An :class:`~ignis.NvArray` is ``(storage, byte offset, shape, byte strides, dtype, device)``.
The front end (``array.py``, ``_ops.py``) applies the op's rules from ``_semantics.py``,
allocates outputs and then calls one hook of the array's backend. A backend only executes.

Contract of every hook:

* Array arguments are NvArrays of the backend's device. They may be non-contiguous, have
  negative strides, and have zero strides (broadcast dimensions). Hooks read them through
  ``arr._storage``, ``arr._offset``, ``arr.shape``, ``arr.strides`` and ``arr.dtype``.
* Elementwise hooks get operands already broadcast to ``out.shape`` (zero strides), in their
  own dtypes: the hook converts each operand to ``compute`` on the fly. Scalar operands arrive
  as Python ``bool``/``int``/``float`` values, already checked to fit ``compute``.
* ``out`` never partially overlaps an input: the front end passes a temporary instead. It may
  be the *identical* view of an elementwise input (in-place ops).
* Outputs are written with one rounding into ``out.dtype`` (float16/bfloat16 results are
  computed in float32 and rounded once).
* No hook raises for data values (NaN, Inf, overflow, integer division by zero): they follow
  IEEE and wrap-around integer arithmetic.

A CUDA backend implements the same hooks with kernels; its storage is an ignis device buffer
(an object with an int ``ptr``, ``nbytes`` and ``device``). To plug one in, provide the module
``ignis._array._cuda_backend`` with a ``create_backend(device) -> Backend`` function (it is found
lazily, after the driver check), or call :func:`register_backend`.
"""

from __future__ import annotations

import abc
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from .._errors import IgnisError, NoDeviceError
from . import _semantics
from ._device import ArrayDevice, as_device

if TYPE_CHECKING:
    from .._dtypes import DType
    from ._semantics import Reduction
    from .array import NvArray

__all__ = ["Backend", "get_backend", "register_backend"]

Scalar = Any  # a Python bool, int or float
Operand = Any  # an NvArray or a Scalar


class Backend(abc.ABC):
    """Executes array ops on one device. Subclasses implement the abstract hooks."""

    #: "cpu" or "cuda"
    kind: str = ""

    def __init__(self, device: ArrayDevice):
        self.device = device

    # --- memory --------------------------------------------------------------------------------

    @abc.abstractmethod
    def alloc(self, nbytes: int) -> Any:
        """New uninitialized storage of ``nbytes`` bytes (``nbytes`` may be 0)."""

    @abc.abstractmethod
    def storage_nbytes(self, storage: Any) -> int:
        """Size in bytes of a storage object."""

    @abc.abstractmethod
    def copyin(self, dst: NvArray, host: np.ndarray) -> None:
        """Write host data into ``dst``; ``host`` is C-contiguous with ``dst``'s shape and dtype."""

    @abc.abstractmethod
    def copyout(self, src: NvArray) -> np.ndarray:
        """A new C-contiguous host array (numpy dtype of ``src``) holding ``src``'s elements."""

    @abc.abstractmethod
    def copy(self, dst: NvArray, src: NvArray) -> None:
        """``dst[...] = src`` for equal shapes (``src`` may be broadcast), converting the dtype."""

    @abc.abstractmethod
    def fill(self, dst: NvArray, value: Scalar) -> None:
        """Set every element of ``dst`` to ``value`` (already checked to fit ``dst.dtype``)."""

    # --- elementwise ---------------------------------------------------------------------------

    @abc.abstractmethod
    def unary(
        self, op: str, out: NvArray, x: NvArray, compute: DType, params: dict[str, Any]
    ) -> None:
        """``out = op(x)`` for an op in ``_semantics.UNARY_OPS``.

        ``params`` carries op options, e.g. ``{"approximate": "tanh"}`` for gelu.
        """

    @abc.abstractmethod
    def binary(self, op: str, out: NvArray, a: Operand, b: Operand, compute: DType) -> None:
        """``out = op(a, b)`` for an op in ``_semantics.BINARY_OPS`` (at least one array)."""

    # Optional one-call paths for the front end's remembered element-wise and reduction plans:
    # a backend may return a function that allocates the result and computes it with nothing in
    # between, for the operands it takes (it returns None for others, and the front end then
    # allocates and calls unary / binary / reduce). The front end asks once per plan and
    # backend, and calls it with operands of this backend only. The defaults offer none.

    def unary_direct(
        self, op: str, compute: DType, dtype: DType, x_dtype: DType, shape: tuple[int, ...],
        strides: tuple[int, ...], nbytes: int,
    ) -> Callable[[NvArray], NvArray | None] | None:
        """``direct(x)``: ``op(x)`` for ``x`` of ``x_dtype`` and ``shape`` into a new array of
        ``dtype`` with the contiguous ``strides`` / ``nbytes``, or None for an ``x`` it does not
        take; None: no such function for this plan."""
        return None

    def binary_direct(
        self, op: str, compute: DType, dtype: DType, form: int, shape: tuple[int, ...],
        strides: tuple[int, ...], nbytes: int,
    ) -> Callable[[Operand, Operand], NvArray | None] | None:
        """``direct(a, b)``: ``op(a, b)`` into a new array of ``dtype`` with the contiguous
        ``strides`` / ``nbytes``, for array operands of ``dtype`` and ``shape`` and (``form``
        1: ``a``, 2: ``b``; 0: none) a Python scalar of the plan's type; None for operands it
        does not take. None: no such function for this plan."""
        return None

    def reduce_direct(
        self, op: str, spec: Reduction, x_dtype: DType, x_shape: tuple[int, ...],
        keep_strides: tuple[int, ...], strides: tuple[int, ...], nbytes: int,
    ) -> Callable[[NvArray], NvArray | None] | None:
        """``direct(x)``: reduction ``op`` (a plan of the front end's ``_reduce``, whose rule
        gave ``spec``) of ``x`` of ``x_dtype`` and ``x_shape`` into a new array of
        ``spec.dtype`` and ``spec.shape`` (contiguous ``strides``; ``keep_strides`` of the
        keepdims shape; ``nbytes``), or None for an ``x`` it does not take; None: no such
        function for this plan."""
        return None

    @abc.abstractmethod
    def where(self, out: NvArray, cond: Operand, a: Operand, b: Operand, compute: DType) -> None:
        """``out = cond ? a : b`` where ``cond`` is any dtype (nonzero is true)."""

    # --- reductions ----------------------------------------------------------------------------

    @abc.abstractmethod
    def reduce(
        self,
        op: str,
        out: NvArray,
        x: NvArray,
        axes: tuple[int, ...],
        accumulate: DType,
        params: dict[str, Any],
    ) -> None:
        """Reduce ``x`` over ``axes`` (sorted, may be empty) into ``out``.

        ``op`` is one of sum, mean, max, min, var; ``out`` has ``x``'s ndim with the reduced
        axes of size 1. ``accumulate`` is the dtype sums run in; ``params`` has ``ddof`` for var.
        max/min propagate NaN. Results must not depend on anything but the shape (deterministic).
        """

    @abc.abstractmethod
    def arg_reduce(self, op: str, out: NvArray, x: NvArray, axis: int | None) -> None:
        """argmax/argmin of ``x`` along ``axis`` into int64 ``out`` (keepdims shape; for
        ``axis=None`` the index into the row-major flattening, ``out`` of shape ``(1,)*ndim``).
        Ties and NaN: the first occurrence wins; a NaN counts as the extreme."""

    @abc.abstractmethod
    def softmax(self, out: NvArray, x: NvArray, axis: int, log: bool) -> None:
        """Softmax (or log-softmax) of ``x`` along ``axis`` into ``out`` of the same shape."""

    @abc.abstractmethod
    def matmul(self, out: NvArray, a: NvArray, b: NvArray, alpha: float, beta: float) -> None:
        """``out = alpha * a @ b + beta * out`` over stacks of matrices.

        ``a`` is ``(*batch, m, k)``, ``b`` is ``(*batch, k, n)``, ``out`` is ``(*batch, m, n)``,
        all with the same batch shape (broadcast batch dims have stride 0) and the same floating
        dtype. Transposes arrive as strides (a transposed matrix is column-major). When beta is
        0, ``out``'s old contents are ignored (even NaN).
        """

    # --- with portable defaults ----------------------------------------------------------------

    def matmul_bias(self, out: NvArray, a: NvArray, b: NvArray, bias: NvArray) -> None:
        """``out = a @ b + bias`` for matrices: ``a`` ``(m, k)``, ``b`` ``(k, n)``, ``out``
        ``(m, n)`` and ``bias`` ``(n,)`` (added to every row), all of one floating dtype.

        The default runs :meth:`matmul` and an elementwise add; a backend may fuse them (the
        sum is then rounded once, after the bias is added).
        """
        self.matmul(out, a, b, 1.0, 0.0)
        row = bias._view(bias._offset, out._shape, (0, bias._strides[0]))
        self.binary("add", out, out, row, _semantics.binary("add", out, row).compute)

    def matmul_row_sums(self, out: NvArray, sums: NvArray, a: NvArray, b: NvArray) -> None:
        """``out = a @ b`` and ``sums[i] = sum(a[i, :])`` for matrices ``a`` ``(m, k)``, ``b``
        ``(k, n)``, ``out`` ``(m, n)``, ``sums`` ``(m,)``: a linear layer's weight and bias
        gradients in one call (``a`` is the transposed output gradient). Half types sum in
        float32.

        The default runs :meth:`matmul` and :meth:`reduce`; a backend may fuse them.
        """
        self.matmul(out, a, b, 1.0, 0.0)
        spec = _semantics.reduction("sum", a._shape, a._dtype, 1, True, 0)
        column = sums._view(sums._offset, (sums._shape[0], 1), (sums._strides[0], 0))
        self.reduce("sum", column, a, (1,), spec.accumulate, {"ddof": 0})

    def arange(self, out: NvArray, start: float, step: float) -> None:
        """``out[i] = start + i * step`` computed in float64 (int64 for integer dtypes)."""
        n = out.shape[0]
        if out.dtype.kind == "f":
            host = start + np.arange(n, dtype=np.float64) * step
        else:
            host = int(start) + np.arange(n, dtype=np.int64) * int(step)
        self.copyin(out, host.astype(out.dtype.numpy))

    def random(
        self, kind: str, out: NvArray, seed: int, offset: int, params: dict[str, Any]
    ) -> None:
        """Fill ``out`` (C-contiguous) from the Philox stream ``(seed, offset)``.

        ``kind`` is "uniform", "normal" or "integers" (see :mod:`ignis.random` for the exact
        stream layout, which a kernel implementation must reproduce bit for bit). The default
        generates on the host with NumPy and copies in.
        """
        from . import random as _random

        host = _random.generate_host(kind, out.shape, out.dtype, seed, offset, params)
        self.copyin(out, host)

    def synchronize(self) -> None:
        """Wait for all work queued on this backend (nothing to wait for on the CPU)."""
        return None

    def data_ptr(self, arr: NvArray) -> int:
        """The address of ``arr``'s first element (host address on the CPU)."""
        raise NotImplementedError

    def default_stream(self) -> Any:
        """The stream new arrays are ordered on (None: the device's default)."""
        return None

    def dlpack_device(self) -> tuple[int, int]:
        """``(DLDeviceType, device id)`` for DLPack: ``(1, 0)`` CPU, ``(2, N)`` CUDA."""
        raise NotImplementedError

    def wrap_external(self, ptr: int, nbytes: int, owner: Any) -> Any:
        """Storage over foreign memory ``[ptr, ptr + nbytes)`` kept alive by ``owner``."""
        raise NotImplementedError

    # --- neural-network families (ignis.nn). Hooks raise NotImplementedError until a backend ----
    # --- implements them. One section per family; each family's semantics live in its own
    # --- front-end module (see ignis/nn.py).

    # --- [indexing] take / index_add / dropout / rope (front end: _indexing.py, _nn_dropout_rope.py)

    def take(self, out: NvArray, a: NvArray, indices: NvArray) -> None:
        """Gather rows: ``out[o, j, :] = a[o, k, :]`` with ``k = indices[j]`` wrapped like NumPy.

        ``a`` is contiguous ``(outer, n, inner)``, ``indices`` contiguous int32/int64 ``(m,)``,
        ``out`` contiguous ``(outer, m, inner)`` of ``a``'s dtype, ``m * outer * inner > 0``.
        ``k < 0`` means ``k + n``; an index outside ``[-n, n)`` fills its row with NaN
        (floating dtypes) or 0 (integers, bool). Never synchronizes the host.
        """
        raise NotImplementedError(f"take is not implemented by the {self.kind} backend")

    def index_add(
        self, dst: NvArray, indices: NvArray, src: NvArray, alpha: Any, deterministic: bool
    ) -> None:
        """Scatter-add in place: ``dst[o, k, :] += alpha * src[o, j, :]``, ``k = indices[j]``.

        ``dst`` is contiguous ``(outer, n, inner)`` of float32, float64, int32 or int64,
        ``src`` contiguous ``(outer, m, inner)`` of the same dtype (not overlapping ``dst``),
        ``indices`` contiguous int32/int64 ``(m,)``, all non-empty. Indices wrap like NumPy;
        repeated ones accumulate; indices outside ``[-n, n)`` add nothing. ``alpha * src`` is
        computed in the dtype (integers wrap). With ``deterministic`` the additions into each
        element happen in ``j`` order (bit-reproducible); otherwise the order may vary.
        """
        raise NotImplementedError(f"index_add is not implemented by the {self.kind} backend")

    def dropout(
        self,
        y: NvArray,
        mask: NvArray,
        x: NvArray,
        threshold: int,
        scale: float,
        seed: int,
        offset: int,
    ) -> None:
        """Dropout of contiguous floating ``x`` into ``y`` (same dtype) and bool ``mask``.

        Element ``i`` uses word ``i`` of the Philox stream ``(seed, offset)`` of
        :mod:`ignis.random` (lane ``i % 4`` of block ``offset + i // 4``) and is kept when
        ``(word >> 8) >= threshold``; ``y = x * scale`` (in float32 for the 16-bit types,
        rounded once) where kept, else 0; ``mask`` is True where kept. Bit-exact across
        backends. ``x`` is non-empty.
        """
        raise NotImplementedError(f"dropout is not implemented by the {self.kind} backend")

    def dropout_backward(self, out: NvArray, grad: NvArray, mask: NvArray, scale: float) -> None:
        """``out = grad * scale`` where ``mask`` else 0; contiguous, same shape, ``out`` and
        ``grad`` of one floating dtype, ``mask`` bool; non-empty."""
        raise NotImplementedError(f"dropout_backward is not implemented by the {self.kind} backend")

    def rope(
        self,
        out: NvArray,
        x: NvArray,
        positions: NvArray | None,
        offset: int,
        base: float,
        interleaved: bool,
        inverse: bool,
    ) -> None:
        """Rotary position embedding of contiguous floating ``x`` ``(batch, seq, d)`` into
        ``out`` (same shape and dtype), ``d`` even, non-empty.

        Row ``(b, s)`` has position ``p = positions[b', s] + offset`` (``positions``
        contiguous int32/int64 ``(1 or batch, seq)``, ``b' = 0`` or ``b``) or ``s + offset``
        when ``positions`` is None. Pair ``i < d/2`` — ``(i, i + d/2)``, or ``(2i, 2i + 1)``
        when ``interleaved`` — rotates by ``p * f_i``, ``f_i = base ** (-2i/d)`` (computed in
        float64, rounded to the compute type): ``y0 = x0 cos - x1 sin``,
        ``y1 = x1 cos + x0 sin``; ``inverse`` negates sin. The angle, cos and sin are computed
        in float32 (float64 for float64 ``x``) and each output is rounded once.
        """
        raise NotImplementedError(f"rope is not implemented by the {self.kind} backend")

    # --- [end indexing]

    # --- [norm-loss] layer_norm / rms_norm / cross_entropy (front end: _nn_norm.py, _nn_loss.py)
    # Every array these hooks get is C-contiguous and 2-D ``(rows, n)`` (1-D for per-row
    # statistics, targets and losses), rows >= 1 and n >= 1; the front end checked shapes,
    # dtypes and devices. W below is the statistics dtype: float64 for float64 data, else
    # float32. 16-bit data is computed in float32 and each output rounded once.

    def layer_norm(
        self,
        y: NvArray,
        mean: NvArray,
        rstd: NvArray,
        x: NvArray,
        weight: NvArray | None,
        bias: NvArray | None,
        eps: float,
    ) -> None:
        """``y = (x - mean) * rstd * weight + bias`` over each row of ``x`` (rows, n).

        ``mean = sum(x) / n``, ``rstd = 1 / sqrt(sum((x - mean)^2) / n + eps)`` (the biased
        variance), both W of shape (rows,). ``weight``/``bias`` are (n,) in x's dtype or float32,
        or None (1 and 0). ``y`` has x's dtype.
        """
        raise NotImplementedError(f"layer_norm is not implemented by {type(self).__name__}")

    def layer_norm_backward(
        self,
        grad_x: NvArray | None,
        grad_weight: NvArray | None,
        grad_bias: NvArray | None,
        grad_y: NvArray,
        x: NvArray,
        mean: NvArray,
        rstd: NvArray,
        weight: NvArray | None,
    ) -> None:
        """Gradients of :meth:`layer_norm` from the saved ``mean``/``rstd``; each output may be
        None (not wanted).

        ``grad_x = rstd * (gh - mean(gh) - xhat * mean(gh * xhat))`` per row, with
        ``gh = grad_y * weight`` and ``xhat = (x - mean) * rstd``, in grad_y's dtype (x's dtype,
        or float32 for 16-bit x). ``grad_weight = sum_rows(grad_y * xhat)`` and
        ``grad_bias = sum_rows(grad_y)``, (n,) in W, summed in an order that depends only on the
        shape (deterministic; no atomics).
        """
        raise NotImplementedError(
            f"layer_norm_backward is not implemented by {type(self).__name__}"
        )

    def rms_norm(
        self, y: NvArray, rstd: NvArray, x: NvArray, weight: NvArray | None, eps: float
    ) -> None:
        """``y = x * rstd * weight`` with ``rstd = 1 / sqrt(sum(x^2) / n + eps)`` per row (W)."""
        raise NotImplementedError(f"rms_norm is not implemented by {type(self).__name__}")

    def rms_norm_backward(
        self,
        grad_x: NvArray | None,
        grad_weight: NvArray | None,
        grad_y: NvArray,
        x: NvArray,
        rstd: NvArray,
        weight: NvArray | None,
    ) -> None:
        """Gradients of :meth:`rms_norm`: ``grad_x = rstd * (gh - xhat * mean(gh * xhat))``,
        ``xhat = x * rstd``; ``grad_weight = sum_rows(grad_y * xhat)`` (W, deterministic)."""
        raise NotImplementedError(f"rms_norm_backward is not implemented by {type(self).__name__}")

    def cross_entropy(
        self,
        loss: NvArray,
        lse: NvArray,
        logits: NvArray,
        targets: NvArray,
        ignore_index: int | None,
        label_smoothing: float,
        reduction: str,
    ) -> None:
        """Softmax cross-entropy of ``logits`` (rows, C) against int32/int64 ``targets`` (rows,).

        ``lse`` (rows,) W gets ``log(sum(exp(logits)))`` per row. The loss of a row is
        ``(1 - ls) * (lse - logits[t]) + ls * (lse - mean(logits))`` (``ls`` =
        ``label_smoothing``), 0 for a target equal to ``ignore_index`` (None: none is ignored)
        and NaN for any other target outside ``[0, C)`` (never an error: no host round trip).
        ``loss`` has logits' dtype: (rows,) for reduction "none", else shape () holding the sum
        or the mean over the targets that are not ignored (computed on the device; NaN when
        there are none).
        """
        raise NotImplementedError(f"cross_entropy is not implemented by {type(self).__name__}")

    def cross_entropy_backward(
        self,
        grad_logits: NvArray,
        grad_loss: NvArray,
        logits: NvArray,
        targets: NvArray,
        lse: NvArray,
        ignore_index: int | None,
        label_smoothing: float,
        reduction: str,
    ) -> None:
        """``grad_logits = s * (softmax(logits) - (1 - ls) * onehot(t) - ls / C)`` per row, in
        logits' dtype; ``s`` is ``grad_loss[row]`` ("none", W of shape (rows,)) or
        ``grad_loss`` (W of shape ()), divided for "mean" by the number of targets that are not
        ignored (counted on the device). Ignored rows are 0, rows with a target outside
        ``[0, C)`` NaN.
        """
        raise NotImplementedError(
            f"cross_entropy_backward is not implemented by {type(self).__name__}"
        )

    def softmax_backward(self, grad_x: NvArray, grad_y: NvArray, y: NvArray, log: bool) -> None:
        """Backward of softmax along the rows of ``y`` (rows, n), the forward output:
        ``grad_x = y * (grad_y - sum(grad_y * y))``, or for log-softmax (``log``)
        ``grad_x = grad_y - exp(y) * sum(grad_y)``. ``grad_x`` has grad_y's dtype (y's dtype, or
        float32 for 16-bit y)."""
        raise NotImplementedError(f"softmax_backward is not implemented by {type(self).__name__}")

    # --- [end norm-loss]

    # --- [attention] flash attention / decode attention (front end: _nn_attention.py)

    def attention_forward(
        self, out: NvArray, lse: NvArray, q: NvArray, k: NvArray, v: NvArray, causal: bool,
        scale: float,
    ) -> None:
        """Fused attention: ``out`` (B, H, L, E) and ``lse`` (B, H, L) from ``q`` (B, H, L, E),
        ``k`` and ``v`` (B, H, S, E) with S >= 1 and E <= 128.

        ``out = softmax(q k^T * scale) v`` over the keys each query sees (with ``causal``,
        query i sees keys j <= i + S - L); ``lse`` is the natural log-sum-exp of those scaled
        scores. A query that sees no key: zero output row, ``lse = -inf``. ``lse`` is float32
        for 16-bit inputs, else the input dtype. No L x S matrix may be kept in memory.

        Layouts: ``q``, ``k``, ``v`` and ``out`` have a contiguous last dim (element stride 1)
        and any batch, head and row strides (whole elements; negative or zero for the inputs);
        they are read and written in place, without copies. ``out`` overlaps no input and no
        element of it twice. ``lse`` is contiguous.
        """
        raise NotImplementedError(f"attention is not implemented on the {self.kind} backend")

    def attention_backward(
        self, dq: NvArray, dk: NvArray, dv: NvArray, grad_out: NvArray, q: NvArray, k: NvArray,
        v: NvArray, out: NvArray, lse: NvArray, causal: bool, scale: float,
    ) -> None:
        """Gradients of :meth:`attention_forward` into ``dq``, ``dk``, ``dv`` (inputs' shapes
        and dtype) from its saved ``out`` and ``lse``; no size is 0.

        Layouts as for :meth:`attention_forward`: ``grad_out``, ``q``, ``k``, ``v``, ``out``,
        ``dq``, ``dk``, ``dv`` have a contiguous last dim and any other strides (for example
        the three slots of one packed ``(B, T, 3, H, E)`` gradient viewed as ``(B, H, T, E)``);
        every element of ``dq``, ``dk``, ``dv`` is written. The destinations overlap neither
        the inputs nor each other. ``lse`` is contiguous.
        """
        raise NotImplementedError(f"attention_backward is not implemented on the {self.kind} backend")

    def decode_attention(
        self, out: NvArray, q: NvArray, k_cache: NvArray, v_cache: NvArray, cache_len: int,
        scale: float,
    ) -> None:
        """``out`` (B, H, 1, E) = attention of ``q`` (B, H, 1, E) over rows ``[0, cache_len)``
        (1 <= cache_len <= S_max) of the caches (B, H, S_max, E), all visible; every array
        is contiguous.
        """
        raise NotImplementedError(f"decode_attention is not implemented on the {self.kind} backend")

    # --- [end attention]

    # --- [optim] multi-tensor optimizer kernels (front end: _nn_optim.py)

    def optim_sgd(self, params: list[NvArray], grads: list[NvArray],
                  momentum_buffers: list[NvArray] | None, masters: list[NvArray] | None,
                  steps: list[NvArray], lr: NvArray, found_inf: NvArray | None,
                  hyper: dict[str, Any]) -> Callable[[], None]:
        """Prepare an SGD step of every parameter in place (see ``ignis.nn.multi_tensor_sgd_``)
        and return a function that queues it.

        Everything that can fail (allocations, argument checks) happens here; the returned
        function only queues the work (on the CPU: does it) and allocates nothing, so a caller
        can prepare several updates and apply all or none of them.

        All ``params`` share one dtype, all ``grads`` one dtype (float32 or the params'), all
        contiguous and of their parameter's shape; ``momentum_buffers`` (None without momentum)
        and ``masters`` (None, or float32 masters of 16-bit params) likewise. ``steps`` are
        float32 one-element counters, one per parameter: the hook adds one to each, then
        updates (a tensor's first step is the one where its counter reaches 1). ``lr`` (float32
        or float64) and ``found_inf`` (float32) are one-element arrays read on the device; when
        ``found_inf`` is nonzero nothing changes. ``hyper`` has momentum, dampening,
        weight_decay (floats) and nesterov (bool). Never synchronizes the host.
        """
        raise NotImplementedError(f"{type(self).__name__} has no multi-tensor SGD")

    def optim_adam(self, params: list[NvArray], grads: list[NvArray], exp_avgs: list[NvArray],
                   exp_avg_sqs: list[NvArray], max_exp_avg_sqs: list[NvArray] | None,
                   masters: list[NvArray] | None, steps: list[NvArray], lr: NvArray,
                   found_inf: NvArray | None, hyper: dict[str, Any]) -> Callable[[], None]:
        """Prepare an Adam/AdamW step of every parameter in place (see
        ``ignis.nn.multi_tensor_adam_``) and return a function that queues it, as :meth:`optim_sgd`.

        Arrays as for :meth:`optim_sgd`; ``max_exp_avg_sqs`` is given for AMSGrad. ``hyper``
        has beta1, beta2, eps, weight_decay (floats) and decoupled (bool: AdamW).
        """
        raise NotImplementedError(f"{type(self).__name__} has no multi-tensor Adam")

    def optim_l2_norm(self, out: NvArray, tensors: list[NvArray]) -> None:
        """``out`` (float32, one element) = L2 norm of all elements of ``tensors`` (one dtype,
        contiguous, at least one tensor), float32 accumulation (float64 for float64), in an
        order that depends only on the sizes (deterministic)."""
        raise NotImplementedError(f"{type(self).__name__} has no multi-tensor norm")

    def optim_scale(self, tensors: list[NvArray], factor: NvArray, mode: int, max_norm: float,
                    found_inf: NvArray | None) -> None:
        """``x *= f`` for every array of ``tensors`` (one dtype, contiguous), ``f`` from the
        float32 device scalar ``factor``: mode 0 ``f = factor``, 1 ``f = 1 / factor``, 2
        ``f = min(1, max_norm / (factor + 1e-6))`` (float32). With ``found_inf``, a non-finite
        input element sets it to 1 (it is never cleared)."""
        raise NotImplementedError(f"{type(self).__name__} has no multi-tensor scale")

    def optim_zero(self, tensors: list[NvArray]) -> None:
        """Set every element of every array of ``tensors`` (one float dtype, contiguous) to +0.
        Portable default: one ``fill`` per array; a backend with a multi-tensor kernel does it
        in one launch."""
        for x in tensors:
            self.fill(x, 0)

    def optim_update_scale(self, scale: NvArray, growth_tracker: NvArray, found_inf: NvArray,
                           growth_factor: float, backoff_factor: float,
                           growth_interval: int) -> None:
        """Dynamic loss-scale update on the device (see ``ignis.nn.amp_update_scale_``);
        ``scale`` and ``found_inf`` float32, ``growth_tracker`` int32, one element each."""
        raise NotImplementedError(f"{type(self).__name__} has no loss-scale update")

    # --- [end optim]

    # --- [activation] fused activation backward passes (front end: _nn_activation.py)

    def activation_backward(self, out: NvArray, grad: NvArray, saved: NvArray, kind: str) -> None:
        """``out = grad * f'(saved)`` elementwise (see ``ignis.nn.gelu_backward`` and friends).

        ``kind`` is "gelu", "gelu_tanh" or "silu" (``saved`` is the forward input x) or
        "sigmoid", "tanh" or "relu" (``saved`` is the forward output y; relu passes ``grad``
        where ``y > 0``, else 0). All three arrays are contiguous, of one shape, not empty;
        ``grad``/``out`` share a dtype that is ``saved``'s or float32 for a 16-bit ``saved``.
        Computed in float32 (float64 for float64) and rounded once.
        """
        raise NotImplementedError(f"{type(self).__name__} has no fused activation backward")

    # --- [end activation]

    # --- interop stream hand-off (no-ops where there are no streams) ----------------------------

    def cai_stream(self, arr: NvArray) -> int | None:
        """The ``stream`` entry of ``__cuda_array_interface__`` (None: no synchronization)."""
        return None

    def dlpack_export_sync(self, arr: NvArray, consumer_stream: Any) -> None:
        """Make ``consumer_stream`` (the ``stream`` a DLPack consumer passed) wait for ``arr``."""
        return None

    def dlpack_import_stream(self) -> Any:
        """The ``stream`` argument to pass to a foreign ``__dlpack__`` (None on the CPU)."""
        return None

    def cai_import_sync(self, stream: Any) -> None:
        """Wait for a foreign ``__cuda_array_interface__`` producer's ``stream`` before use."""
        return None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.device}>"


# --- registry ----------------------------------------------------------------------------------

_factories: dict[str, Callable[[ArrayDevice], Backend]] = {}
_instances: dict[ArrayDevice, Backend] = {}
_lock = threading.Lock()


def register_backend(kind: str, factory: Callable[[ArrayDevice], Backend] | None) -> None:
    """Make ``factory(device)`` build the backend of every device of ``kind`` ("cpu", "cuda").

    Backends already built for that kind are dropped. ``None`` restores the built-in factory.
    """
    with _lock:
        if factory is None:
            _factories.pop(kind, None)
        else:
            _factories[kind] = factory
        for dev in [d for d in _instances if d.type == kind]:
            del _instances[dev]


def get_backend(device: Any) -> Backend:
    """The backend of ``device`` (built on first use).

    For ``"cuda:N"`` without a usable GPU this raises :class:`~ignis.NoDeviceError` with the
    driver's reason.
    """
    dev = as_device(device)
    backend = _instances.get(dev)
    if backend is not None:
        return backend
    with _lock:
        backend = _instances.get(dev)
        if backend is None:
            factory = _factories.get(dev.type) or _BUILTIN[dev.type]
            backend = factory(dev)
            _instances[dev] = backend
    return backend


def _cpu_factory(device: ArrayDevice) -> Backend:
    from ._cpu_backend import CpuBackend

    return CpuBackend(device)


def _cuda_factory(device: ArrayDevice) -> Backend:
    from .. import _bindings

    _bindings.ensure_driver()  # NoDeviceError with the driver's reason
    try:
        from . import _cuda_backend  # type: ignore[attr-defined]
    except ImportError as exc:
        raise NoDeviceError(
            f"device {device!r}: this installation of ignis has no cuda array backend ({exc}); "
            "use device='cpu'"
        ) from None
    backend = _cuda_backend.create_backend(device)
    if not isinstance(backend, Backend):
        raise IgnisError(f"cuda backend factory returned {type(backend).__name__}, not a Backend")
    return backend


_BUILTIN: dict[str, Callable[[ArrayDevice], Backend]] = {"cpu": _cpu_factory, "cuda": _cuda_factory}
