"""The kernel families: every multi-argument op a backend executes beyond the primitives of
:class:`~ignis._array._backend.Backend`, each declared once, here, with its parameters in call
order, its contract, and where its implementations live.

A family's front end (``_nn_*.py``, ``_indexing.py``, ``random.py``) checks the arguments,
allocates the outputs and calls the implementation of the array's backend through that
backend's table: ``x._backend.kernels.layer_norm(y, mean, rstd, x2, weight, bias, eps)``.
The table resolves a name on first use and keeps the bound function as an attribute, so a call
costs one attribute lookup more than a plain function call and nothing is imported before a
family runs.

Implementations, in the order a backend's table looks for them:

1. one registered for the backend's class or its nearest base (along the MRO) with
   ``Backend.implement(name, fn)``: called as ``fn(backend, *params)``;
2. the built-in one of the class's ``builtin_families`` ("cpu" or "cuda"): ``cpu`` names a
   NumPy function of ``ignis._array`` called with the parameters alone (the reference the GPU
   results are tested against), ``cuda`` a function of ``ignis._array._cuda_backend`` called
   with the backend first (it queues on the backend's stream);
3. ``portable``: a function of ``ignis._array._portable`` made of the Backend primitives,
   called with the backend first, which serves every backend without its own;

and a family with none of these raises ``NotImplementedError`` naming the family and the
backend. Paths are ``"module.function"`` (a bare function name for ``portable``), imported
when the family first runs.

Common contract: arrays are NvArrays of the backend's device, in the shapes and layouts each
family's contract states (the front end checked shapes, dtypes and devices and made copies
where a family needs contiguity); outputs come first. 16-bit data is computed in float32 and
each output rounded once. No implementation synchronizes the host or raises for data values.

Example (a third-party backend supplying one family)::

    def my_rope(backend, out, x, positions, offset, base, interleaved, inverse): ...
    MyBackend.implement("rope", my_rope)
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._backend import Backend

__all__ = ["FAMILIES", "KernelFamily", "Kernels", "check_arity", "family", "register", "resolve"]

# Where the paths of the built-in implementations point, by ``Backend.builtin_families``.
_PACKAGES = {"cpu": "ignis._array", "cuda": "ignis._array._cuda_backend"}
_PORTABLE = "ignis._array._portable"


class KernelFamily:
    """One family's declaration: ``name``, ``params`` (the names, in call order, after the
    backend), ``doc`` (the contract) and the paths of its ``cpu``, ``cuda`` and ``portable``
    implementations (None: none of that kind)."""

    __slots__ = ("name", "params", "doc", "cpu", "cuda", "portable")

    def __init__(self, name: str, params: tuple[str, ...], doc: str, cpu: str | None,
                 cuda: str | None, portable: str | None):
        self.name, self.params, self.doc = name, params, doc
        self.cpu, self.cuda, self.portable = cpu, cuda, portable

    def __repr__(self) -> str:
        return f"<kernel family {self.name}({', '.join(self.params)})>"


#: Every family by name.
FAMILIES: dict[str, KernelFamily] = {}


def family(name: str, params: str, doc: str, *, cpu: str | None = None,
           cuda: str | None = None, portable: str | None = None) -> KernelFamily:
    """Declare the family ``name`` with the space-separated parameter names ``params``.

    Example: ``family("rms_norm", "y rstd x weight eps", "...", cpu="_cpu_nn_norm_loss.rms_norm")``.
    """
    if name in FAMILIES:
        raise ValueError(f"family: {name!r} is declared twice")
    fam = KernelFamily(name, tuple(params.split()), doc, cpu, cuda, portable)
    FAMILIES[name] = fam
    return fam


def _declared(name: str, what: str) -> KernelFamily:
    fam = FAMILIES.get(name)
    if fam is None:
        raise AttributeError(
            f"{what}: no kernel family {name!r}; the families are {', '.join(FAMILIES)}"
        )
    return fam


def _load(package: str, path: str) -> Callable[..., Any]:
    module, _, function = path.rpartition(".")
    return getattr(importlib.import_module(f"{package}.{module}" if module else package),
                   function)


def check_arity(fam: KernelFamily, fn: Callable[..., Any], bound: bool, what: str) -> None:
    """TypeError unless ``fn`` takes the family's parameters positionally (after the backend
    when ``bound``)."""
    import inspect

    try:
        inspect.signature(fn).bind(*([None] * (len(fam.params) + bound)))
    except TypeError:
        first = "backend, " if bound else ""
        raise TypeError(
            f"{what}: {fam.name} is called as ({first}{', '.join(fam.params)}); "
            f"{getattr(fn, '__qualname__', fn)}{inspect.signature(fn)} does not take that"
        ) from None
    except ValueError:  # no signature to inspect (a builtin): taken on trust
        pass


def register(cls: type, name: str, fn: Callable[..., Any]) -> None:
    """Make ``fn(backend, *params)`` the implementation of family ``name`` for backends of
    ``cls`` and its subclasses (see ``Backend.implement``)."""
    what = f"{cls.__name__}.implement"
    fam = _declared(name, what)
    if not callable(fn):
        raise TypeError(f"{what}: {name} needs a callable, got {type(fn).__name__}")
    check_arity(fam, fn, True, what)
    table = cls.__dict__.get("_family_impls")
    if table is None:
        table = {}
        cls._family_impls = table  # type: ignore[attr-defined]
    table[name] = fn


def resolve(backend: Backend, name: str) -> Callable[..., Any]:
    """The function that runs family ``name`` on ``backend``, the backend bound in where the
    implementation takes it."""
    fam = _declared(name, "kernels")
    cls = type(backend)
    for klass in cls.__mro__:
        fn = klass.__dict__.get("_family_impls", {}).get(name)
        if fn is not None:
            return functools.partial(fn, backend)
    builtin = cls.builtin_families
    path = getattr(fam, builtin) if builtin else None
    if path is not None:
        fn = _load(_PACKAGES[builtin], path)
        return fn if builtin == "cpu" else functools.partial(fn, backend)
    if fam.portable is not None:
        return functools.partial(_load(_PORTABLE, fam.portable), backend)
    raise NotImplementedError(
        f"kernel family {name!r} is not implemented by the {backend.kind or '?'} backend "
        f"{cls.__name__}; register one with {cls.__name__}.implement({name!r}, fn)"
    )


class Kernels:
    """One backend's family implementations by name, ``backend.kernels.<family>(*params)``.

    Each is resolved on first use and then kept as an attribute of this table: replacing one
    for a test means setting the attribute here (``monkeypatch.setattr(backend.kernels,
    "rope", spy)``), not patching the implementing module after the first call.
    """

    def __init__(self, backend: Backend):
        self._backend = backend

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith("__"):  # copy, pickle and friends probe for these
            raise AttributeError(name)
        fn = resolve(self._backend, name)
        self.__dict__[name] = fn
        return fn

    def __dir__(self) -> list[str]:
        return list(FAMILIES)

    def __repr__(self) -> str:
        return f"<kernels of {self._backend!r}>"


# --- the families --------------------------------------------------------------------------------
# One block per front-end module; the contract of each is what every implementation must do.

# --- indexing (front end: _indexing.py) -------------------------------------------------------

family(
    "take", "out a indices",
    """Gather rows: ``out[o, j, :] = a[o, k, :]`` with ``k = indices[j]`` wrapped like NumPy.

    ``a`` is contiguous ``(outer, n, inner)``, ``indices`` contiguous int32/int64 ``(m,)``,
    ``out`` contiguous ``(outer, m, inner)`` of ``a``'s dtype, ``m * outer * inner > 0``.
    ``k < 0`` means ``k + n``; an index outside ``[-n, n)`` fills its row with NaN (floating
    dtypes) or 0 (integers, bool). Never synchronizes the host.""",
    cpu="_cpu_indexing.take", cuda="indexing.take",
)

family(
    "index_add", "dst indices src alpha deterministic",
    """Scatter-add in place: ``dst[o, k, :] += alpha * src[o, j, :]``, ``k = indices[j]``.

    ``dst`` is contiguous ``(outer, n, inner)`` of float32, float64, int32 or int64, ``src``
    contiguous ``(outer, m, inner)`` of the same dtype (not overlapping ``dst``), ``indices``
    contiguous int32/int64 ``(m,)``, all non-empty. Indices wrap like NumPy; repeated ones
    accumulate; indices outside ``[-n, n)`` add nothing. ``alpha * src`` is computed in the
    dtype (integers wrap). With ``deterministic`` the additions into each element happen in
    ``j`` order (bit-reproducible); otherwise the order may vary.""",
    cpu="_cpu_indexing.index_add", cuda="indexing.index_add",
)

# --- dropout and rope (front end: _nn_dropout_rope.py) ----------------------------------------

family(
    "dropout", "y mask x threshold scale seed offset",
    """Dropout of contiguous floating ``x`` into ``y`` (same dtype) and bool ``mask``.

    Element ``i`` uses word ``i`` of the Philox stream ``(seed, offset)`` of
    :mod:`ignis.random` (lane ``i % 4`` of block ``offset + i // 4``) and is kept when
    ``(word >> 8) >= threshold``; ``y = x * scale`` (in float32 for the 16-bit types, rounded
    once) where kept, else 0; ``mask`` is True where kept. Bit-exact across backends. ``x`` is
    non-empty.""",
    cpu="_cpu_indexing.dropout", cuda="indexing.dropout",
)

family(
    "dropout_backward", "out grad mask scale",
    """``out = grad * scale`` where ``mask`` else 0; contiguous, same shape, ``out`` and
    ``grad`` of one floating dtype, ``mask`` bool; non-empty.""",
    cpu="_cpu_indexing.dropout_backward", cuda="indexing.dropout_backward",
)

family(
    "rope", "out x positions offset base interleaved inverse",
    """Rotary position embedding of contiguous floating ``x`` ``(batch, seq, d)`` into ``out``
    (same shape and dtype), ``d`` even, non-empty.

    Row ``(b, s)`` has position ``p = positions[b', s] + offset`` (``positions`` contiguous
    int32/int64 ``(1 or batch, seq)``, ``b' = 0`` or ``b``) or ``s + offset`` when
    ``positions`` is None. Pair ``i < d/2`` — ``(i, i + d/2)``, or ``(2i, 2i + 1)`` when
    ``interleaved`` — rotates by ``p * f_i``, ``f_i = base ** (-2i/d)`` (computed in float64,
    rounded to the compute type): ``y0 = x0 cos - x1 sin``, ``y1 = x1 cos + x0 sin``;
    ``inverse`` negates sin. The angle, cos and sin are computed in float32 (float64 for
    float64 ``x``) and each output is rounded once.""",
    cpu="_cpu_indexing.rope", cuda="indexing.rope",
)

# --- norms and losses (front end: _nn_norm.py, _nn_loss.py) -----------------------------------
# Every array these get is C-contiguous and 2-D ``(rows, n)`` (1-D for per-row statistics,
# targets and losses), rows >= 1 and n >= 1. W below is the statistics dtype: float64 for
# float64 data, else float32.

family(
    "layer_norm", "y mean rstd x weight bias eps",
    """``y = (x - mean) * rstd * weight + bias`` over each row of ``x`` (rows, n).

    ``mean = sum(x) / n``, ``rstd = 1 / sqrt(sum((x - mean)^2) / n + eps)`` (the biased
    variance), both W of shape (rows,). ``weight``/``bias`` are (n,) in x's dtype or float32,
    or None (1 and 0). ``y`` has x's dtype.""",
    cpu="_cpu_nn_norm_loss.layer_norm", cuda="norm_loss.layer_norm",
)

family(
    "layer_norm_backward", "grad_x grad_weight grad_bias grad_y x mean rstd weight",
    """Gradients of ``layer_norm`` from the saved ``mean``/``rstd``; each output may be None
    (not wanted).

    ``grad_x = rstd * (gh - mean(gh) - xhat * mean(gh * xhat))`` per row, with
    ``gh = grad_y * weight`` and ``xhat = (x - mean) * rstd``, in grad_y's dtype (x's dtype, or
    float32 for 16-bit x). ``grad_weight = sum_rows(grad_y * xhat)`` and
    ``grad_bias = sum_rows(grad_y)``, (n,) in W, summed in an order that depends only on the
    shape (deterministic; no atomics).""",
    cpu="_cpu_nn_norm_loss.layer_norm_backward", cuda="norm_loss.layer_norm_backward",
)

family(
    "rms_norm", "y rstd x weight eps",
    """``y = x * rstd * weight`` with ``rstd = 1 / sqrt(sum(x^2) / n + eps)`` per row (W).""",
    cpu="_cpu_nn_norm_loss.rms_norm", cuda="norm_loss.rms_norm",
)

family(
    "rms_norm_backward", "grad_x grad_weight grad_y x rstd weight",
    """Gradients of ``rms_norm``: ``grad_x = rstd * (gh - xhat * mean(gh * xhat))``,
    ``xhat = x * rstd``; ``grad_weight = sum_rows(grad_y * xhat)`` (W, deterministic); each
    output may be None.""",
    cpu="_cpu_nn_norm_loss.rms_norm_backward", cuda="norm_loss.rms_norm_backward",
)

family(
    "cross_entropy", "loss lse logits targets ignore_index label_smoothing reduction",
    """Softmax cross-entropy of ``logits`` (rows, C) against int32/int64 ``targets`` (rows,).

    ``lse`` (rows,) W gets ``log(sum(exp(logits)))`` per row. The loss of a row is
    ``(1 - ls) * (lse - logits[t]) + ls * (lse - mean(logits))`` (``ls`` =
    ``label_smoothing``), 0 for a target equal to ``ignore_index`` (None: none is ignored) and
    NaN for any other target outside ``[0, C)`` (never an error: no host round trip). ``loss``
    has logits' dtype: (rows,) for reduction "none", else shape () holding the sum or the mean
    over the targets that are not ignored (computed on the device; NaN when there are none).""",
    cpu="_cpu_nn_norm_loss.cross_entropy", cuda="norm_loss.cross_entropy",
)

family(
    "cross_entropy_backward",
    "grad_logits grad_loss logits targets lse ignore_index label_smoothing reduction",
    """``grad_logits = s * (softmax(logits) - (1 - ls) * onehot(t) - ls / C)`` per row, in
    logits' dtype; ``s`` is ``grad_loss[row]`` ("none", W of shape (rows,)) or ``grad_loss``
    (W of shape ()), divided for "mean" by the number of targets that are not ignored (counted
    on the device). Ignored rows are 0, rows with a target outside ``[0, C)`` NaN.""",
    cpu="_cpu_nn_norm_loss.cross_entropy_backward", cuda="norm_loss.cross_entropy_backward",
)

family(
    "softmax_backward", "grad_x grad_y y log",
    """Backward of softmax along the rows of ``y`` (rows, n), the forward output:
    ``grad_x = y * (grad_y - sum(grad_y * y))``, or for log-softmax (``log``)
    ``grad_x = grad_y - exp(y) * sum(grad_y)``. ``grad_x`` has grad_y's dtype (y's dtype, or
    float32 for 16-bit y).""",
    cpu="_cpu_nn_norm_loss.softmax_backward", cuda="norm_loss.softmax_backward",
)

# --- attention (front end: _nn_attention.py) --------------------------------------------------

family(
    "attention_forward", "out lse q k v causal scale",
    """Fused attention: ``out`` (B, H, L, E) and ``lse`` (B, H, L) from ``q`` (B, H, L, E),
    ``k`` and ``v`` (B, H, S, E) with S >= 1 and E <= 128.

    ``out = softmax(q k^T * scale) v`` over the keys each query sees (with ``causal``, query i
    sees keys j <= i + S - L); ``lse`` is the natural log-sum-exp of those scaled scores. A
    query that sees no key: zero output row, ``lse = -inf``. ``lse`` is float32 for 16-bit
    inputs, else the input dtype. No L x S matrix may be kept in memory.

    Layouts: ``q``, ``k``, ``v`` and ``out`` have a contiguous last dim (element stride 1) and
    any batch, head and row strides (whole elements; negative or zero for the inputs); they are
    read and written in place, without copies. ``out`` overlaps no input and no element of it
    twice. ``lse`` is contiguous.""",
    cpu="_cpu_attention.forward", cuda="attention.forward",
)

family(
    "attention_backward", "dq dk dv grad_out q k v out lse causal scale",
    """Gradients of ``attention_forward`` into ``dq``, ``dk``, ``dv`` (inputs' shapes and
    dtype) from its saved ``out`` and ``lse``; no size is 0.

    Layouts as for ``attention_forward``: ``grad_out``, ``q``, ``k``, ``v``, ``out``, ``dq``,
    ``dk``, ``dv`` have a contiguous last dim and any other strides (for example the three slots
    of one packed ``(B, T, 3, H, E)`` gradient viewed as ``(B, H, T, E)``); every element of
    ``dq``, ``dk``, ``dv`` is written. The destinations overlap neither the inputs nor each
    other. ``lse`` is contiguous.""",
    cpu="_cpu_attention.backward", cuda="attention.backward",
)

family(
    "decode_attention", "out q k_cache v_cache cache_len scale",
    """``out`` (B, H, 1, E) = attention of ``q`` (B, H, 1, E) over rows ``[0, cache_len)``
    (1 <= cache_len <= S_max) of the caches (B, H, S_max, E), all visible; every array is
    contiguous.""",
    cpu="_cpu_attention.decode", cuda="attention.decode",
)

family(
    "attention_dropout_forward", "out lse q k v causal scale dropout",
    """``attention_forward`` with the probabilities dropped out before ``P @ V``: ``dropout``
    (an ``AttentionDropout``, ``_attention_dropout.py``) gives ``p`` and the Philox stream; element
    ``(bh, i, j)`` is kept by the counter mapping of ``_attention_dropout.keep_mask`` (the same
    bits on every backend) and scaled by ``1 / (1 - p)``. ``lse`` is that of the undropped
    probabilities. No mask and no L x S matrix may be kept in memory.""",
    cpu="_cpu_attention.dropout_forward", cuda="attention.dropout_forward",
)

family(
    "attention_dropout_backward", "dq dk dv grad_out q k v out lse causal scale dropout",
    """Gradients of ``attention_dropout_forward`` with the same ``dropout`` (the mask is drawn
    again from the same stream, never stored); otherwise as ``attention_backward``.""",
    cpu="_cpu_attention.dropout_backward", cuda="attention.dropout_backward",
)

# --- multi-tensor optimizers (front end: _nn_optim.py) ----------------------------------------

family(
    "optim_sgd", "params grads momentum_buffers masters steps lr found_inf hyper",
    """Prepare an SGD step of every parameter in place (see ``ignis.nn.multi_tensor_sgd_``)
    and return a function that queues it.

    Everything that can fail (allocations, argument checks) happens here; the returned function
    only queues the work (on the CPU: does it) and allocates nothing, so a caller can prepare
    several updates and apply all or none of them.

    All ``params`` share one dtype, all ``grads`` one dtype (float32 or the params'), all
    contiguous and of their parameter's shape; ``momentum_buffers`` (None without momentum) and
    ``masters`` (None, or float32 masters of 16-bit params) likewise. ``steps`` are float32
    one-element counters, one per parameter: the update adds one to each, then updates (a
    tensor's first step is the one where its counter reaches 1). ``lr`` (float32 or float64)
    and ``found_inf`` (float32) are one-element arrays read on the device; when ``found_inf``
    is nonzero nothing changes. ``hyper`` has momentum, dampening, weight_decay (floats) and
    nesterov (bool). Never synchronizes the host.""",
    cpu="_cpu_optim.prepare_sgd", cuda="optim.sgd",
)

family(
    "optim_adam",
    "params grads exp_avgs exp_avg_sqs max_exp_avg_sqs masters steps lr found_inf hyper",
    """Prepare an Adam/AdamW step of every parameter in place (see
    ``ignis.nn.multi_tensor_adam_``) and return a function that queues it, as ``optim_sgd``.

    Arrays as for ``optim_sgd``; ``max_exp_avg_sqs`` is given for AMSGrad. ``hyper`` has beta1,
    beta2, eps, weight_decay (floats) and decoupled (bool: AdamW).""",
    cpu="_cpu_optim.prepare_adam", cuda="optim.adam",
)

family(
    "optim_l2_norm", "out tensors",
    """``out`` (one element, float32, or float64 for float64 tensors) = L2 norm of all elements
    of ``tensors`` (one dtype, contiguous, at least one tensor), float32 accumulation (float64
    for float64), in an order that depends only on the sizes (deterministic).""",
    cpu="_cpu_optim.l2_norm", cuda="optim.l2_norm",
)

family(
    "optim_scale", "tensors factor mode max_norm found_inf",
    """``x *= f`` for every array of ``tensors`` (one dtype, contiguous), ``f`` from the float32
    or float64 device scalar ``factor``, computed in its precision: mode 0 ``f = factor``, 1
    ``f = 1 / factor``, 2 ``f = min(1, max_norm / (factor + 1e-6))``. With ``found_inf``, a
    non-finite input element sets it to 1 (it is never cleared).""",
    cpu="_cpu_optim.scale", cuda="optim.scale",
)

family(
    "optim_zero", "tensors",
    """Set every element of every array of ``tensors`` (one float dtype, contiguous) to +0. The
    portable form fills each array; a backend with a multi-tensor kernel does it in one
    launch.""",
    cuda="optim.zero", portable="optim_zero",
)

family(
    "optim_update_scale",
    "scale growth_tracker found_inf growth_factor backoff_factor growth_interval",
    """Dynamic loss-scale update on the device (see ``ignis.nn.amp_update_scale_``); ``scale``
    and ``found_inf`` float32, ``growth_tracker`` int32, one element each.""",
    cpu="_cpu_optim.update_scale", cuda="optim.update_scale",
)

# --- activations' backward (front end: _nn_activation.py) -------------------------------------

family(
    "activation_backward", "out grad saved kind",
    """``out = grad * f'(saved)`` elementwise (see ``ignis.nn.gelu_backward`` and friends).

    ``kind`` is "gelu", "gelu_tanh" or "silu" (``saved`` is the forward input x) or "sigmoid",
    "tanh" or "relu" (``saved`` is the forward output y; relu passes ``grad`` where ``y > 0``,
    else 0). All three arrays are contiguous, of one shape, not empty; ``grad``/``out`` share
    a dtype that is ``saved``'s or float32 for a 16-bit ``saved``. Computed in float32 (float64
    for float64) and rounded once.""",
    cpu="_cpu_activation.activation_backward", cuda="activation.activation_backward",
)

# --- the linear layer's fused epilogues (front end: _nn_linear.py) ----------------------------

family(
    "matmul_bias", "out a b bias",
    """``out = a @ b + bias`` for matrices: ``a`` ``(m, k)``, ``b`` ``(k, n)``, ``out``
    ``(m, n)`` and ``bias`` ``(n,)`` (added to every row), all of one floating dtype. The
    portable form runs ``matmul`` and an element-wise add; a fused one rounds the sum once,
    after the bias is added.""",
    cuda="linear.matmul_bias", portable="matmul_bias",
)

family(
    "matmul_row_sums", "out sums a b",
    """``out = a @ b`` and ``sums[i] = sum(a[i, :])`` for matrices ``a`` ``(m, k)``, ``b``
    ``(k, n)``, ``out`` ``(m, n)``, ``sums`` ``(m,)``: a linear layer's weight and bias
    gradients in one call (``a`` is the transposed output gradient). Half types sum in float32.
    The portable form runs ``matmul`` and ``reduce``.""",
    cuda="linear.matmul_row_sums", portable="matmul_row_sums",
)

# --- random numbers (front end: random.py) ----------------------------------------------------

family(
    "random", "kind out seed offset params",
    """Fill ``out`` (C-contiguous) from the Philox stream ``(seed, offset)``.

    ``kind`` is "uniform", "normal" or "integers" (see :mod:`ignis.random` for the exact stream
    layout, which a kernel implementation must reproduce bit for bit). The portable form
    generates on the host with NumPy and copies in.""",
    cuda="elementwise.random", portable="random",
)

# --- standard indexing and manipulation (front end: _indexing.py, _manipulation.py) -----------

family(
    "put", "dst indices src",
    """Scatter rows in place: ``dst[o, k, :] = src[o, j, :]`` with ``k = indices[j]``.

    ``dst`` is contiguous ``(outer, n, inner)`` of any dtype, ``src`` contiguous
    ``(outer, m, inner)`` of the same dtype (not overlapping ``dst``), ``indices`` contiguous
    int32/int64 ``(m,)``, all non-empty. Indices wrap like NumPy; an index outside ``[-n, n)``
    writes nothing; of repeated indices one row lands (which one is unspecified, and may mix
    rows element by element on a parallel backend).""",
    cpu="_cpu_indexing.put", cuda="indexing.put",
)

family(
    "nonzero_flat", "out mask",
    """The row-major flat positions of the True elements of contiguous bool ``mask`` ``(n,)``,
    in increasing order, into contiguous int64 ``out`` ``(count,)``; ``count`` is exactly the
    number of True elements (the front end counted them). Either may be empty.""",
    cpu="_cpu_indexing.nonzero_flat", cuda="indexing.nonzero_flat",
)

family(
    "repeat_index", "out repeats",
    """``out`` (int64, contiguous, ``(sum(repeats),)``) holds each ``i`` ``repeats[i]`` times, in
    order: ``numpy.repeat(arange(n), repeats)``. ``repeats`` is contiguous int64 ``(n,)``, every
    value ``>= 0`` (the front end checked them and summed them). Either may be empty.""",
    cpu="_cpu_indexing.repeat_index", cuda="indexing.repeat_index",
)

# --- linear algebra (front end: linalg.py) ------------------------------------------------------
# Every array is C-contiguous; matrices come as 3-D stacks ``(batch, m, n)`` with batch >= 1 and
# m, n >= 1 (the front end handles empty stacks itself), of one dtype, float32, float64,
# complex64 or complex128 (complex: Hermitian for symmetric, ^H for ^T; eigenvalues, singular
# values and logabsdet are of the real dtype of matching precision, sign and det of x's);
# ``info`` is int32 ``(batch,)``. CPU: numpy.linalg; CUDA: cuSOLVER (raising
# ``CusolverNotFoundError`` naming the extra to install where it is missing). A matrix that
# cannot be factored never raises here: its ``info`` entry is set nonzero and the front end
# reads ``info`` once (one synchronization) and raises ``ignis.linalg.LinAlgError``.

family(
    "linalg_cholesky", "out info x upper",
    """Cholesky factors of the symmetric positive-definite matrices ``x`` ``(batch, n, n)``:
    lower ``L`` (``x = L L^T``, read from x's lower triangle) or, with ``upper``, upper ``U``
    (``x = U^T U``, read from the upper triangle) into ``out`` (same shape), the other triangle
    zero. ``info[b]`` is 0, or the order k of the first leading minor of matrix b that is not
    positive-definite (``out[b]`` is then undefined).""",
    cpu="_cpu_linalg.cholesky", cuda="linalg.cholesky",
)

family(
    "linalg_solve", "out info a b",
    """``out[i] = a[i]^-1 b[i]`` for ``a`` ``(batch, n, n)``, ``b`` and ``out``
    ``(batch, n, k)`` (LU with partial pivoting). ``info[i]`` is 0, or positive where
    ``a[i]`` is exactly singular (``out[i]`` is then undefined).""",
    cpu="_cpu_linalg.solve", cuda="linalg.solve",
)

family(
    "linalg_slogdet", "sign logabsdet det x",
    """Sign, natural log of the absolute value and value of the determinant of each matrix of
    ``x`` ``(batch, n, n)`` into ``(batch,)`` arrays of x's dtype, each None when not wanted.
    A singular matrix gives sign 0, logabsdet -inf, det 0 (never an error); ``det`` equals
    ``sign * exp(logabsdet)`` as NumPy computes it.""",
    cpu="_cpu_linalg.slogdet", cuda="linalg.slogdet",
)

family(
    "linalg_qr", "q r x complete",
    """QR factorization (Householder) of ``x`` ``(batch, m, n)``, ``k = min(m, n)``:
    ``q`` ``(batch, m, mq)`` with orthonormal columns and upper-triangular ``r``
    ``(batch, mq, n)`` with ``x = q r``; ``mq = m`` when ``complete``, else ``k``. The signs
    of r's diagonal are the algorithm's (LAPACK's convention, not made positive).""",
    cpu="_cpu_linalg.qr", cuda="linalg.qr",
)

family(
    "linalg_eigh", "w v info x",
    """Eigenvalues ``w`` ``(batch, n)``, ascending, and (unless ``v`` is None) orthonormal
    eigenvectors as the columns of ``v`` ``(batch, n, n)`` of the symmetric matrices ``x``
    ``(batch, n, n)``, read from their lower triangle (NumPy's ``UPLO='L'``). ``info[b]`` is 0,
    or positive where the algorithm did not converge.""",
    cpu="_cpu_linalg.eigh", cuda="linalg.eigh",
)

family(
    "linalg_svd", "u s vh info x full_matrices",
    """Singular values ``s`` ``(batch, k)``, descending, of ``x`` ``(batch, m, n)``,
    ``k = min(m, n)``, and unless ``u`` and ``vh`` are None the singular vectors with
    ``x = u diag(s) vh``: ``u`` ``(batch, m, m)`` and ``vh`` ``(batch, n, n)`` with
    ``full_matrices``, else ``(batch, m, k)`` and ``(batch, k, n)``. ``info[b]`` is 0, or
    positive where the algorithm did not converge.""",
    cpu="_cpu_linalg.svd", cuda="linalg.svd",
)

# --- sorting, searching, sets and cumulative ops (front end: _sorting.py) ----------------------
# Order everywhere is NumPy's: ascending puts NaN last (descending first), -0.0 equals +0.0.
# ``nonzero`` and ``unique`` return results whose size depends on the data: they, and only they,
# may synchronize the host, once, to learn it.

family(
    "sort", "values indices x descending",
    """Stable sort of each row of contiguous ``x`` ``(rows, n)``, ``rows, n >= 1``.

    ``indices`` (int64) gets the positions in the row in sorted order and ``values`` (x's
    dtype) the elements; either may be None (not both). Ascending, or descending with equal
    elements still in index order (all NaNs compare equal here). With ``indices`` None,
    ``values`` are the input's elements except that a NaN may lose its sign, and -0.0 and
    +0.0 may come in either order; with both given, ``values`` may hold +0.0 for -0.0 and any
    NaN for a NaN. Never synchronizes the host.""",
    cpu="_cpu_sorting.sort", cuda="sorting.sort",
)

family(
    "cumulative", "out x op include_initial",
    """Inclusive scan along axis 1 of contiguous ``x`` ``(outer, n, inner)``, ``n >= 1``,
    into contiguous ``out`` ``(outer, n + include_initial, inner)`` of x's dtype (not bool).

    ``op`` is "sum" or "prod"; ``include_initial`` puts 0 (1) first. float16/bfloat16 run in
    float32 and round each output once; integers wrap around. Float sums may group the terms
    differently from a sequential sum, but the same way on every run. Never synchronizes the
    host.""",
    cpu="_cpu_sorting.cumulative", cuda="sorting.cumulative",
)

family(
    "searchsorted", "out sorted values right",
    """``out[i]`` (int64, contiguous, ``values``' shape) = the first index ``j`` of the
    contiguous ascending 1-D ``sorted`` (m >= 1) with ``values[i] <= sorted[j]``
    (``values[i] < sorted[j]`` when ``right``), or m; ``values`` contiguous, non-empty, of
    sorted's dtype. Never synchronizes the host.""",
    cpu="_cpu_sorting.searchsorted", cuda="sorting.searchsorted",
)

family(
    "nonzero", "x",
    """The coordinates of the nonzero elements (NaN is nonzero, -0.0 zero) of contiguous,
    non-empty ``x`` of at least 1 dimension, in row-major order: returns a new int64 array
    ``(x.ndim, count)`` on x's device. Synchronizes the host once (the count).""",
    cpu="_cpu_sorting.nonzero", cuda="sorting.nonzero",
)

family(
    "unique", "x want_indices want_inverse want_counts",
    """The unique elements of contiguous 1-D non-empty ``x``: returns ``(values, indices,
    inverse, counts)``, new arrays on x's device, each but ``values`` None unless wanted.

    ``values`` (x's dtype) ascending, NaNs last and each NaN its own value, -0.0 and +0.0 one
    value (either may be returned); ``indices`` (int64) the first occurrence of each,
    ``inverse`` (int64, x's shape) the value index of each element, ``counts`` (int64) the
    occurrences of each. Synchronizes the host once (the number of values).""",
    cpu="_cpu_sorting.unique", cuda="sorting.unique",
)

# --- discrete Fourier transforms (front end: fft.py) --------------------------------------------
# Batched 1-D transforms of the rows of C-contiguous 2-D arrays ``(batch, n)``, batch, n >= 1,
# unnormalized (the front end scales). Complex arrays are complex64 or complex128, real ones
# float32 or float64 of the same precision. CPU: numpy.fft; CUDA: cuFFT (raising
# ``CufftNotFoundError`` naming the extra to install where it is missing).

family(
    "fft_c2c", "out x forward",
    """The DFT of each row of complex ``x`` into ``out`` (same shape and dtype): ``out[b, k] =
    sum_j x[b, j] exp(-2 pi i j k / n)`` when ``forward``, with ``+`` (and no ``1/n``)
    otherwise. ``x`` is not modified.""",
    cpu="_cpu_fft.c2c", cuda="fft.c2c",
)

family(
    "fft_r2c", "out x",
    """The first ``n // 2 + 1`` coefficients of the forward DFT of each row of real ``x``
    ``(batch, n)`` into complex ``out`` ``(batch, n // 2 + 1)``. ``x`` is not modified.""",
    cpu="_cpu_fft.r2c", cuda="fft.r2c",
)

family(
    "fft_c2r", "out x",
    """The inverse DFT (no ``1/n``) of the Hermitian sequences whose first halves are the rows
    of complex ``x`` ``(batch, n // 2 + 1)``, into real ``out`` ``(batch, n)`` (the imaginary
    parts of ``x[:, 0]`` and, for even ``n``, ``x[:, n // 2]`` are ignored). ``x`` may be
    overwritten (cuFFT's complex-to-real transform does).""",
    cpu="_cpu_fft.c2r", cuda="fft.c2r",
)

# --- graph-safe random numbers (front ends: random.py, _nn_dropout_rope.py) -------------------
# The forms of "dropout" and "random" that a CUDA graph captures (see ignis.random's notes on
# GraphDraws): the stream's seed and base block come from ``state``, a contiguous uint64 array
# ``(2,)`` on the backend's device holding ``(seed, base)``, read when the work runs (at each
# replay), and ``offset`` is the call's first block counted from ``base``. The values equal
# those of the eager family with ``(seed, base + offset)``, bit for bit.

family(
    "dropout_from_state", "y mask x threshold scale state offset",
    """``dropout`` with the stream ``(state[0], state[1] + offset)`` read from ``state``.""",
    cpu="_cpu_indexing.dropout_from_state", cuda="indexing.dropout_from_state",
)

family(
    "random_from_state", "kind out state offset params",
    """``random`` with the stream ``(state[0], state[1] + offset)`` read from ``state``.""",
    cpu="_cpu_random.random_from_state", cuda="random_state.random_from_state",
)

family(
    "random_store_state", "state seed offset",
    """Write ``(seed, offset)`` (each in ``[0, 2**64)``) into ``state``, queued like any op (on
    the CUDA backend: on the current stream, so the work queued after it reads it).""",
    cpu="_cpu_random.store_state", cuda="random_state.store_state",
)
