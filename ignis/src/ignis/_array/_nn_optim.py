"""Multi-tensor optimizer steps, global norms, scaling and loss-scale updates (front end).

Every function takes *lists* of arrays and updates all of them with a few kernel launches (on
the CUDA backend one launch covers every tensor of a dtype combination; see
``cuda_src/optim.cu``). Nothing here synchronizes with the host, and every value that changes
between steps is read on the device, so a training step built on these functions can be
captured into a CUDA graph and replayed:

* ``lr``: a float32 or float64 device scalar (shape ``()`` or ``(1,)``; float64 keeps float64
  updates exact); write it with ``lr.fill_(value)`` (an asynchronous kernel, ordered on the
  stream) between replays.
* ``steps``: one float32 device scalar per tensor, the number of updates it has had; each
  optimizer call adds one to the counters of the tensors it updates *before* using them (so
  Adam's bias corrections see 1 on the first step), and not when ``found_inf`` is set.
* ``found_inf``: an optional float32 device scalar; nonzero skips the whole update on the device
  (dynamic loss scaling); :func:`multi_tensor_scale_` sets it when it sees Inf or NaN.

Parameters are float32, float64, float16 or bfloat16 (contiguous, updated in place). Gradients
are float32 or the parameter's dtype. Optimizer state is float32 (float64 for float64
parameters). A 16-bit parameter with a float32 ``master`` copy is updated in float32 on the
master and the rounded value is written to the parameter in the same pass.

The addresses of the arrays are baked into a per-list table that the CUDA backend builds on
first use and caches; run one step eagerly before capturing a graph so that the table exists.

All or nothing: inside ``with multi_tensor_batch():`` the SGD/Adam updates are prepared (every
allocation and check) when called and launched together when the block ends without an
exception; if anything inside raises (out of memory, say), no update is applied.

Example::

    >>> import ignis, ignis.nn
    >>> p = [ignis.random.randn((1000,)), ignis.random.randn((31, 7))]
    >>> g = [ignis.random.randn(x.shape) for x in p]
    >>> m = [ignis.zeros(x.shape) for x in p]
    >>> v = [ignis.zeros(x.shape) for x in p]
    >>> steps = [ignis.zeros(()) for _ in p]
    >>> lr = ignis.full((), 1e-3)
    >>> ignis.nn.multi_tensor_adam_(p, g, m, v, steps, lr, weight_decay=0.01,
    ...                             decoupled_weight_decay=True)      # AdamW
    >>> norm = ignis.nn.multi_tensor_l2_norm(g)                       # device scalar
    >>> ignis.nn.multi_tensor_clip_(g, norm, max_norm=1.0)
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from .. import _dtypes as dt
from .._errors import DeviceMismatchError, DTypeError, ShapeError
from . import _layout
from ._backend import get_backend
from .array import NvArray

__all__ = [
    "multi_tensor_batch",
    "multi_tensor_sgd_",
    "multi_tensor_adam_",
    "multi_tensor_l2_norm",
    "multi_tensor_scale_",
    "multi_tensor_clip_",
    "amp_update_scale_",
]

_FLOATS = (dt.float16, dt.bfloat16, dt.float32, dt.float64)
_HALF = (dt.float16, dt.bfloat16)
_F16, _BF16, _F32, _F64 = _FLOATS


def _is_float(d: dt.DType) -> bool:
    # By identity (DType objects are unique): ``in _FLOATS`` would call DType.__eq__, in
    # Python, for every element before the match, and these checks run per tensor per step.
    return d is _F32 or d is _BF16 or d is _F16 or d is _F64


# --- all-or-nothing batches ---------------------------------------------------------------------

_batch = threading.local()  # .queue: the launches of the open batch on this thread, or None


@contextlib.contextmanager
def multi_tensor_batch() -> Iterator[None]:
    """Apply the multi-tensor SGD/Adam updates made inside all together, or none of them.

    Each call inside prepares its update at once (its checks and its only allocation, the
    launch table) and defers the launch; when the block ends without an exception the updates
    are queued in call order, and when it raises (an out-of-memory error while preparing the
    third parameter group, say) none is, so parameters, moments and step counters stay as they
    were. Nested batches join the outermost one. Other functions of this module are not deferred.

    Example::

        with ignis.nn.multi_tensor_batch():
            ignis.nn.multi_tensor_adam_(decayed, g1, m1, v1, s1, lr, weight_decay=0.1)
            ignis.nn.multi_tensor_adam_(no_decay, g2, m2, v2, s2, lr)
    """
    if getattr(_batch, "queue", None) is not None:
        yield
        return
    queue: list[Callable[[], None]] = []
    _batch.queue = queue
    try:
        yield
    finally:
        _batch.queue = None
    for launch in queue:
        launch()


def _submit(launch: Callable[[], None]) -> None:
    queue = getattr(_batch, "queue", None)
    if queue is None:
        launch()
    else:
        queue.append(launch)


# --- argument checks -------------------------------------------------------------------------


def _array_list(xs: Any, op: str, what: str, n: int | None = None) -> list[NvArray]:
    if isinstance(xs, NvArray) or not isinstance(xs, Sequence):
        raise TypeError(f"{op}: {what} must be a list of NvArrays, got {type(xs).__name__}")
    xs = list(xs)
    for i, x in enumerate(xs):
        if x.__class__ is not NvArray and not isinstance(x, NvArray):
            raise TypeError(f"{op}: {what}[{i}] must be an NvArray, got {type(x).__name__}")
    if n is not None and len(xs) != n:
        raise ShapeError(f"{op}: {what} has {len(xs)} arrays, expected {n} (one per parameter)")
    return xs


def _optional_list(xs: Any, op: str, what: str, n: int) -> list[NvArray | None]:
    if xs is None:
        return [None] * n
    if isinstance(xs, NvArray) or not isinstance(xs, Sequence):
        raise TypeError(f"{op}: {what} must be a list of NvArrays or None, got {type(xs).__name__}")
    xs = list(xs)
    if len(xs) != n:
        raise ShapeError(f"{op}: {what} has {len(xs)} entries, expected {n} (one per parameter)")
    for i, x in enumerate(xs):
        if x is not None and not isinstance(x, NvArray):
            raise TypeError(f"{op}: {what}[{i}] must be an NvArray or None, got {type(x).__name__}")
    return xs


def _scalar(x: Any, op: str, what: str, dtype: Any = dt.float32) -> NvArray:
    dtypes = dtype if isinstance(dtype, tuple) else (dtype,)
    names = " or ".join(d.name for d in dtypes)
    if not isinstance(x, NvArray):
        raise TypeError(
            f"{op}: {what} must be a {names} device scalar (NvArray of one element), "
            f"got {type(x).__name__}"
        )
    if x.numel != 1 or x.dtype not in dtypes:
        raise ShapeError(
            f"{op}: {what} must hold one {names} element, got shape {x.shape} {x.dtype.name}"
        )
    return x


def _same_device(arrays: list[Any], device: Any, op: str) -> None:
    for x in arrays:
        if x is not None and x._device is not device and x._device != device:
            raise DeviceMismatchError(
                f"{op}: all arrays must be on one device; got {x.device} and {device}"
            )


def _check_param(p: NvArray, i: int, op: str) -> None:
    if not _is_float(p._dtype):
        raise DTypeError(
            f"{op}: params[{i}] has dtype {p.dtype.name}; expected float16, bfloat16, float32 "
            "or float64"
        )
    if not p.is_contiguous:
        raise ShapeError(
            f"{op}: params[{i}] (shape {p.shape}) must be contiguous (updated in place)"
        )


def _check_like(
    x: NvArray | None, p: NvArray, i: int, op: str, what: str, dtypes: tuple[dt.DType, ...]
) -> None:
    if x is None:
        return
    if x._shape is not p._shape and x._shape != p._shape:
        raise ShapeError(
            f"{op}: {what}[{i}] has shape {x.shape}, expected {p.shape} (its parameter's)"
        )
    if x._dtype is not dtypes[0] and x._dtype not in dtypes:
        want = " or ".join(d.name for d in dtypes)
        raise DTypeError(f"{op}: {what}[{i}] has dtype {x.dtype.name}, expected {want}")
    if not x.is_contiguous:
        raise ShapeError(f"{op}: {what}[{i}] (shape {x.shape}) must be contiguous")


def _state_dtype(p: NvArray) -> dt.DType:
    return dt.float64 if p.dtype is dt.float64 else dt.float32


_STATE32, _STATE64 = (dt.float32,), (dt.float64,)  # _state_dtype as the dtypes _check_like takes


def _check_range(
    value: float, lo: float, hi: float | None, op: str, name: str, hi_open: bool = True
) -> float:
    v = float(value)
    ok = v >= lo and (hi is None or (v < hi if hi_open else v <= hi))
    if not ok:
        if hi is None:
            raise ValueError(f"{op}: {name} must be >= {lo}, got {value!r}")
        rng = f"[{lo}, {hi})" if hi_open else f"[{lo}, {hi}]"
        raise ValueError(f"{op}: {name} must be in {rng}, got {value!r}")
    return v


def _groups(n: int, key: Any) -> dict[Any, list[int]]:
    """Indices 0..n-1 grouped by ``key(i)`` (one launch per group), in first-seen order."""
    keys = [key(i) for i in range(n)]
    if keys and keys.count(keys[0]) == n:  # the usual case: one group
        return {keys[0]: list(range(n))}
    out: dict[Any, list[int]] = {}
    for i, k in enumerate(keys):
        out.setdefault(k, []).append(i)
    return out


def _readable(g: NvArray) -> NvArray:
    """Gradients are only read: a non-contiguous one is copied (queued on the stream)."""
    return g if g.is_contiguous else g.contiguous()


def _common(op: str, params: Any, grads: Any, steps: Any, lr: Any, found_inf: Any):
    params = _array_list(params, op, "params")
    n = len(params)
    grads = _array_list(grads, op, "grads", n)
    steps = _array_list(steps, op, "steps", n)
    lr = _scalar(lr, op, "lr", (dt.float32, dt.float64))
    if found_inf is not None:
        found_inf = _scalar(found_inf, op, "found_inf")
    is_contiguous = _layout.is_c_contiguous
    for i, p in enumerate(params):
        # The checks of _check_param, on the slots (this loop runs for every tensor of every
        # step); _check_param itself raises, with its message, when one fails.
        pd, ps = p._dtype, p._shape
        if not _is_float(pd) or not is_contiguous(ps, p._strides, pd.itemsize):
            _check_param(p, i, op)
        g = grads[i]
        if g._shape != ps:
            raise ShapeError(f"{op}: grads[{i}] has shape {g.shape}, expected {p.shape}")
        if g._dtype is not pd and g._dtype is not _F32:
            raise DTypeError(
                f"{op}: grads[{i}] has dtype {g.dtype.name}; expected {p.dtype.name} or float32"
            )
        s = steps[i]
        if s._dtype is not _F32 or _layout.numel(s._shape) != 1:
            raise ShapeError(
                f"{op}: steps[{i}] must hold one float32 element, got shape {s.shape} "
                f"{s.dtype.name}"
            )
    return params, grads, steps, lr, found_inf


# --- optimizers ------------------------------------------------------------------------------


def multi_tensor_sgd_(
    params: Sequence[NvArray],
    grads: Sequence[NvArray],
    momentum_buffers: Sequence[NvArray | None] | None,
    steps: Sequence[NvArray],
    lr: NvArray,
    *,
    momentum: float = 0.0,
    dampening: float = 0.0,
    nesterov: bool = False,
    weight_decay: float = 0.0,
    masters: Sequence[NvArray | None] | None = None,
    found_inf: NvArray | None = None,
) -> None:
    """SGD update of every parameter in place (PyTorch's ``torch.optim.SGD`` arithmetic).

    Per element: ``d = g + weight_decay * p``; with momentum ``b = d`` on a tensor's first step
    (its step counter reaches 1), else ``b = momentum * b + (1 - dampening) * d``, and
    ``d = d + momentum * b`` (Nesterov) or ``d = b``; then ``p -= lr * d``.
    ``momentum_buffers`` (float32 state, float64 for float64 params) is needed when
    ``momentum > 0``. ``steps`` are incremented first (see the module notes).

    Example: ``multi_tensor_sgd_(ps, gs, bufs, steps, lr, momentum=0.9, nesterov=True)``.
    """
    op = "multi_tensor_sgd_"
    params, grads, steps, lr, found_inf = _common(op, params, grads, steps, lr, found_inf)
    n = len(params)
    _check_range(momentum, 0.0, None, op, "momentum")
    _check_range(dampening, 0.0, 1.0, op, "dampening", hi_open=False)
    _check_range(weight_decay, 0.0, None, op, "weight_decay")
    if nesterov and (momentum <= 0 or dampening != 0):
        raise ValueError(f"{op}: nesterov needs momentum > 0 and dampening 0, got momentum="
                         f"{momentum!r}, dampening={dampening!r}")
    bufs = _optional_list(momentum_buffers, op, "momentum_buffers", n)
    masters = _optional_list(masters, op, "masters", n)
    for i, p in enumerate(params):
        if momentum > 0 and bufs[i] is None:
            raise ValueError(f"{op}: momentum={momentum} needs momentum_buffers[{i}], got None")
        sd = _STATE64 if p._dtype is _F64 else _STATE32
        _check_like(bufs[i], p, i, op, "momentum_buffers", sd)
        if masters[i] is not None:
            _check_master(masters[i], p, i, op)
    if n == 0:
        return
    device = params[0].device
    _same_device(params + grads + steps + [b for b in bufs] + masters + [lr, found_inf], device, op)
    hyper = {
        "momentum": float(momentum),
        "dampening": float(dampening),
        "nesterov": bool(nesterov),
        "weight_decay": float(weight_decay),
    }
    use_buf = momentum > 0
    backend = get_backend(device)
    key = lambda i: (params[i].dtype, grads[i].dtype, masters[i] is not None)  # noqa: E731
    # Every dtype combination is prepared before any is launched: all or nothing.
    launches = [
        backend.kernels.optim_sgd(
            [params[i] for i in idx],
            [_readable(grads[i]) for i in idx],
            [bufs[i] for i in idx] if use_buf else None,
            [masters[i] for i in idx] if masters[idx[0]] is not None else None,
            [steps[i] for i in idx],
            lr,
            found_inf,
            hyper,
        )
        for idx in _groups(n, key).values()
    ]
    for launch in launches:
        _submit(launch)


def _check_master(m: NvArray | None, p: NvArray, i: int, op: str) -> None:
    if m is None:
        return
    if p.dtype not in _HALF:
        raise DTypeError(
            f"{op}: masters[{i}] is given for a {p.dtype.name} parameter; master weights are for "
            "float16/bfloat16 parameters (use None)"
        )
    _check_like(m, p, i, op, "masters", (dt.float32,))


def multi_tensor_adam_(
    params: Sequence[NvArray],
    grads: Sequence[NvArray],
    exp_avgs: Sequence[NvArray],
    exp_avg_sqs: Sequence[NvArray],
    steps: Sequence[NvArray],
    lr: NvArray,
    *,
    beta1: float = 0.9,
    beta2: float = 0.999,
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    decoupled_weight_decay: bool = False,
    max_exp_avg_sqs: Sequence[NvArray] | None = None,
    masters: Sequence[NvArray | None] | None = None,
    found_inf: NvArray | None = None,
) -> None:
    """Adam (or AdamW with ``decoupled_weight_decay=True``) update of every parameter in place.

    PyTorch's ``torch.optim.Adam``/``AdamW`` arithmetic, with ``t`` the tensor's step counter
    after its increment: ``p *= 1 - lr * wd`` (AdamW) or ``g += wd * p`` (Adam);
    ``m = b1 m + (1 - b1) g``; ``v = b2 v + (1 - b2) g^2``; with ``max_exp_avg_sqs`` (AMSGrad)
    ``v' = max(v', v)`` is used for ``v``; ``p -= lr / (1 - b1^t) * m / (sqrt(v) /
    sqrt(1 - b2^t) + eps)``. The bias corrections are formed in float64 on the device.

    Example: ``multi_tensor_adam_(ps, gs, ms, vs, steps, lr, weight_decay=0.1,
    decoupled_weight_decay=True)``.
    """
    op = "multi_tensor_adam_"
    params, grads, steps, lr, found_inf = _common(op, params, grads, steps, lr, found_inf)
    n = len(params)
    exp_avgs = _array_list(exp_avgs, op, "exp_avgs", n)
    exp_avg_sqs = _array_list(exp_avg_sqs, op, "exp_avg_sqs", n)
    amsgrad = max_exp_avg_sqs is not None
    vmax = _optional_list(max_exp_avg_sqs, op, "max_exp_avg_sqs", n)
    masters = _optional_list(masters, op, "masters", n)
    _check_range(beta1, 0.0, 1.0, op, "beta1")
    _check_range(beta2, 0.0, 1.0, op, "beta2")
    _check_range(eps, 0.0, None, op, "eps")
    _check_range(weight_decay, 0.0, None, op, "weight_decay")
    for i, p in enumerate(params):
        sd = _STATE64 if p._dtype is _F64 else _STATE32
        _check_like(exp_avgs[i], p, i, op, "exp_avgs", sd)
        _check_like(exp_avg_sqs[i], p, i, op, "exp_avg_sqs", sd)
        if amsgrad and vmax[i] is None:
            raise ValueError(f"{op}: max_exp_avg_sqs[{i}] is None; AMSGrad needs one per parameter")
        _check_like(vmax[i], p, i, op, "max_exp_avg_sqs", sd)
        if masters[i] is not None:
            _check_master(masters[i], p, i, op)
    if n == 0:
        return
    device = params[0].device
    _same_device(
        params + grads + steps + exp_avgs + exp_avg_sqs + vmax + masters + [lr, found_inf],
        device,
        op,
    )
    hyper = {
        "beta1": float(beta1),
        "beta2": float(beta2),
        "eps": float(eps),
        "weight_decay": float(weight_decay),
        "decoupled": bool(decoupled_weight_decay),
    }
    backend = get_backend(device)
    key = lambda i: (params[i].dtype, grads[i].dtype, masters[i] is not None)  # noqa: E731
    launches = [  # all prepared before any is launched, as in multi_tensor_sgd_
        backend.kernels.optim_adam(
            [params[i] for i in idx],
            [_readable(grads[i]) for i in idx],
            [exp_avgs[i] for i in idx],
            [exp_avg_sqs[i] for i in idx],
            [vmax[i] for i in idx] if amsgrad else None,
            [masters[i] for i in idx] if masters[idx[0]] is not None else None,
            [steps[i] for i in idx],
            lr,
            found_inf,
            hyper,
        )
        for idx in _groups(n, key).values()
    ]
    for launch in launches:
        _submit(launch)


# --- norms and scaling -----------------------------------------------------------------------


def _float_list(tensors: Any, op: str, contiguous: bool) -> list[NvArray]:
    xs = _array_list(tensors, op, "tensors")
    for i, x in enumerate(xs):
        if not _is_float(x._dtype):
            raise DTypeError(
                f"{op}: tensors[{i}] has dtype {x.dtype.name}; expected float16, bfloat16, "
                "float32 or float64"
            )
        if contiguous and not x.is_contiguous:
            raise ShapeError(
                f"{op}: tensors[{i}] (shape {x.shape}) must be contiguous (updated in place)"
            )
    if xs:
        _same_device(xs, xs[0].device, op)
    return xs


def multi_tensor_l2_norm(tensors: Sequence[NvArray], device: Any = None) -> NvArray:
    """The L2 norm of all elements of all ``tensors`` together, as a device scalar: float64
    when any of them is float64 (the gradients' precision, as PyTorch), else float32.

    ``sqrt(sum over tensors of sum(x**2))``, accumulated in float32 (float64 for float64 data)
    in a fixed order: the same inputs give the same bits. An empty list gives 0 (float32, on
    ``device``, default the default device). Nothing is synchronized.

    Example: ``total = multi_tensor_l2_norm([p.grad for p in params])``.
    """
    op = "multi_tensor_l2_norm"
    xs = _float_list(tensors, op, contiguous=False)
    dev = xs[0].device if xs else device
    if not xs:
        return NvArray.zeros((), dtype=dt.float32, device=dev)
    backend = get_backend(dev)
    parts = []
    wide = any(x.dtype is dt.float64 for x in xs)
    for idx in _groups(len(xs), lambda i: xs[i].dtype).values():
        out = NvArray.empty((), dtype=dt.float64 if wide else dt.float32, device=dev)
        backend.kernels.optim_l2_norm(out, [_readable(xs[i]) for i in idx])
        parts.append(out)
    if len(parts) == 1:
        return parts[0]
    total = parts[0] * parts[0]
    for part in parts[1:]:
        total = total + part * part
    return total.sqrt()


def multi_tensor_scale_(
    tensors: Sequence[NvArray],
    factor: NvArray,
    *,
    inverse: bool = False,
    found_inf: NvArray | None = None,
) -> None:
    """``x *= factor[0]`` (or ``x /= factor[0]`` with ``inverse=True``: the multiply is by the
    float32 reciprocal) for every array of ``tensors``, in place.

    ``factor`` is a float32 device scalar (a loss scale, say). With ``found_inf`` (a float32
    device scalar) any Inf or NaN among the *input* values sets ``found_inf`` to 1; it is never
    reset here (fill it with 0 first). This is the unscale-and-check of dynamic loss scaling.

    Example: ``found.fill_(0); multi_tensor_scale_(grads, scale, inverse=True, found_inf=found)``.
    """
    op = "multi_tensor_scale_"
    xs = _float_list(tensors, op, contiguous=True)
    factor = _scalar(factor, op, "factor")
    if found_inf is not None:
        found_inf = _scalar(found_inf, op, "found_inf")
    _scale(op, xs, factor, 1 if inverse else 0, 0.0, found_inf)


def multi_tensor_zero_(tensors: Sequence[NvArray]) -> None:
    """``x[...] = 0`` for every array of ``tensors`` (floating point, contiguous, one device),
    in one launch per dtype on a GPU instead of one fill per array: ``zero_grad``'s work.
    NaN and Inf are overwritten too (it stores zeros; it does not multiply by 0).

    Example: ``multi_tensor_zero_([p.grad for p in params])``.
    """
    op = "multi_tensor_zero_"
    xs = _float_list(tensors, op, contiguous=True)
    if not xs:
        return
    backend = get_backend(xs[0].device)
    for idx in _groups(len(xs), lambda i: xs[i].dtype).values():
        backend.kernels.optim_zero([xs[i] for i in idx])


def multi_tensor_clip_(tensors: Sequence[NvArray], total_norm: NvArray, max_norm: float) -> None:
    """Gradient clipping given the norm: ``x *= min(1, max_norm / (total_norm + 1e-6))``.

    The coefficient is computed on the device from the float32 or float64 device scalar
    ``total_norm`` (from :func:`multi_tensor_l2_norm`), in its precision, like
    ``torch.nn.utils.clip_grad_norm_``.

    Example: ``multi_tensor_clip_(grads, multi_tensor_l2_norm(grads), max_norm=1.0)``.
    """
    op = "multi_tensor_clip_"
    xs = _float_list(tensors, op, contiguous=True)
    total_norm = _scalar(total_norm, op, "total_norm", (dt.float32, dt.float64))
    max_norm = float(max_norm)
    if not max_norm >= 0:
        raise ValueError(f"{op}: max_norm must be >= 0, got {max_norm!r}")
    _scale(op, xs, total_norm, 2, max_norm, None)


def _scale(op: str, xs: list[NvArray], factor: NvArray, mode: int, max_norm: float,
           found_inf: NvArray | None) -> None:
    if not xs:
        return
    device = xs[0].device
    _same_device(xs + [factor, found_inf], device, op)
    backend = get_backend(device)
    for idx in _groups(len(xs), lambda i: xs[i].dtype).values():
        backend.kernels.optim_scale([xs[i] for i in idx], factor, mode, max_norm, found_inf)


def amp_update_scale_(
    scale: NvArray,
    growth_tracker: NvArray,
    found_inf: NvArray,
    *,
    growth_factor: float = 2.0,
    backoff_factor: float = 0.5,
    growth_interval: int = 2000,
) -> None:
    """Dynamic loss-scale update on the device (the rule of PyTorch's ``GradScaler.update``).

    If ``found_inf`` is nonzero: ``scale *= backoff_factor`` and the int32 ``growth_tracker``
    restarts at 0. Otherwise the tracker counts the clean step; when it reaches
    ``growth_interval`` the scale is multiplied by ``growth_factor`` (kept if finite) and the
    tracker restarts.

    Example: ``amp_update_scale_(scale, tracker, found_inf, growth_interval=2000)``.
    """
    op = "amp_update_scale_"
    scale = _scalar(scale, op, "scale")
    growth_tracker = _scalar(growth_tracker, op, "growth_tracker", dt.int32)
    found_inf = _scalar(found_inf, op, "found_inf")
    if not float(growth_factor) > 1.0:
        raise ValueError(f"{op}: growth_factor must be > 1, got {growth_factor!r}")
    if not 0.0 < float(backoff_factor) < 1.0:
        raise ValueError(f"{op}: backoff_factor must be in (0, 1), got {backoff_factor!r}")
    if int(growth_interval) != growth_interval or growth_interval < 1:
        raise ValueError(f"{op}: growth_interval must be a positive int, got {growth_interval!r}")
    _same_device([growth_tracker, found_inf], scale.device, op)
    get_backend(scale.device).kernels.optim_update_scale(
        scale, growth_tracker, found_inf, float(growth_factor), float(backoff_factor),
        int(growth_interval)
    )
