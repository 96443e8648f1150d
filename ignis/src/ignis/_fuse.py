"""``ignis.fuse``: a function of element-wise ops compiled into one kernel (CuPy's ``cupy.fuse``).

    >>> @ignis.fuse
    ... def gelu(x):
    ...     return 0.5 * x * (1.0 + ignis.tanh(0.79788456 * (x + 0.044715 * x * x * x)))
    >>> y = gelu(x)                      # one kernel launch on a CUDA array

The function is traced once per combination of argument dtypes and shapes (and Python number
types): its ops are recorded on stand-in values (``_fuse_trace``), checked by the rules the
unfused ops apply, and emitted as one :class:`~ignis.ElementwiseKernel` (or, when the function
ends with a ``sum``/``mean``/``max``/``min``, one :class:`~ignis.ReductionKernel` whose map is
the element-wise part). Broadcasting, strides and the compile caches are those kernels'.

* Arguments: NvArrays (one device), Python numbers (kernel parameters, weak in promotion as for
  the ops) and NumPy scalars (strong). Numbers written in the function are constants.
* Results: one array or a tuple of arrays of one shape (a trailing reduction: one array).
* On the CPU backend the function simply runs (unfused), with the same results.
* ``ignis_autograd`` Tensors: the call records one graph node whose backward is one fused
  kernel too, derived from the op table's derivative rules (``_fuse_grad``).

Errors name the fused function: an op that is not element-wise, shapes that do not broadcast,
arguments of other types.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Callable
from typing import Any

import numpy as np

from . import _dtypes as dt
from ._caches import PlanCache
from ._errors import DeviceMismatchError, DTypeError, ShapeError
from ._fuse_codegen import Spec, build
from ._fuse_grad import backward_trace, live_nodes
from ._fuse_trace import Trace, Traced

__all__ = ["fuse", "Fused", "register_handler"]

_programs = PlanCache(
    "fuse.programs", 1024, "fused function, argument dtypes and shapes -> traced kernel"
)
_ids = itertools.count()
# Argument types another package handles (ignis_autograd's Tensor): type -> handler(fused, args)
_handlers: dict[type, Callable[..., Any]] = {}
_tensor_wrap: list[Any] = [None]  # the handler's wrap of traced values (see Fused.program)
_INT_CLASSES = (dt.int8, dt.uint8, dt.int16, dt.uint16, dt.int32, dt.uint32, dt.int64, dt.uint64)


def register_handler(cls: type, handler: Callable[..., Any], wrap: Any = None) -> None:
    """Let ``handler(fused, args)`` run calls of fused functions with an argument of type
    ``cls`` (``ignis_autograd`` registers its Tensor); ``wrap``: how it traces (see
    :meth:`Fused.program`), for ``Fused.source(..., tensors=True)``."""
    _handlers[cls] = handler
    _tensor_wrap[0] = wrap


class ArgSpec:
    """A stand-in argument for :meth:`Fused.source`: an array of ``shape`` and ``dtype``."""

    __slots__ = ("shape", "dtype")

    def __init__(self, shape: tuple[int, ...], dtype: Any):
        self.shape = tuple(int(n) for n in shape)
        self.dtype = dt.as_dtype(dtype, "fuse")


def _int_class(v: int) -> int:
    """The narrowest integer dtype holding ``v`` (its promotion with arrays depends on it)."""
    for k, d in enumerate(_INT_CLASSES):
        if dt.scalar_fits(v, d):
            return k
    return len(_INT_CLASSES)


class Program:
    """One specialization of a fused function: its trace, kernel and how to call it."""

    def __init__(self, fused: Fused, trace: Trace, spec: Spec):
        self.fused = fused
        self.trace = trace
        self.spec = spec
        self._kernel: Any = None
        self._backward: dict[Any, Any] = {}
        self.n_outputs = len(spec.out_dtypes)
        nodes = trace.nodes
        self.positions = [nodes[i].position for i in spec.inputs]
        # Python ints meeting an integer compute dtype: checked on each call (value-dependent)
        self.int_checks = []
        scalars = {i for i in spec.inputs if nodes[i].weak is int}
        for i in live_nodes(trace, spec.outputs):
            n = nodes[i]
            if n.compute is not None and n.compute.kind in "iu" and n.weak is None:
                for j in n.args:
                    if j in scalars:
                        self.int_checks.append((nodes[j].position, n.compute, n.op))
        r = spec.reduce
        self.count = None
        if r is not None and r.op == "mean":
            h = nodes[r.args[0]]
            self.count = float(np.prod([h.shape[a] for a in r.params["axes"]]))

    @property
    def kernel(self) -> Any:
        if self._kernel is None:
            self._kernel = build(self.trace, self.spec, self.fused.kernel_name)
        return self._kernel

    def arguments(self, args: tuple[Any, ...]) -> list[Any]:
        for pos, compute, op in self.int_checks:
            dt.check_scalar_fits(args[pos], compute, f"{self.fused.label}: {op}")
        values = [args[p] for p in self.positions]
        if self.count is not None:
            values.append(self.count)
        return values

    def run(self, args: tuple[Any, ...]) -> Any:
        values = self.arguments(args)
        r = self.spec.reduce
        if r is None:
            return self.kernel(*values)
        return self.kernel(*values, axis=r.params["axes"], keepdims=r.params["keepdims"])

    def backward(self, g_dtype: dt.DType, wants: tuple[int, ...]) -> tuple[Any, Any]:
        """The backward trace, spec and output map for a gradient of ``g_dtype`` and the
        arguments at ``wants`` (made once per pair)."""
        key = (g_dtype.name, wants)
        found = self._backward.get(key)
        if found is None:
            found = self._backward[key] = list(backward_trace(self.trace, self.spec, g_dtype,
                                                              wants)) + [None]  # fmt: skip
        return found


class Fused:
    """A function of element-wise ops compiled into one kernel per argument signature (see
    :func:`fuse`). Calling it runs the kernel; :meth:`source` shows the kernel's CUDA C++."""

    def __init__(self, func: Callable[..., Any], kernel_name: str | None = None):
        if not callable(func):
            raise TypeError(f"fuse: expected a function, got {type(func).__name__}")
        functools.update_wrapper(self, func)
        self.func = func
        name = getattr(func, "__name__", "fn")
        self.label = f"fuse({getattr(func, '__qualname__', name)})"
        if kernel_name is None:
            kernel_name = "fused_" + re.sub(r"\W", "_", name)
        elif not isinstance(kernel_name, str) or not re.fullmatch(r"[A-Za-z_]\w*", kernel_name):
            raise ValueError(
                f"{self.label}: kernel_name must be a C identifier, got {kernel_name!r}"
            )
        self.kernel_name = kernel_name
        self._token = next(_ids)
        self._autograd: Any = None  # ignis_autograd's Function for this fused function

    def __repr__(self) -> str:
        return f"<ignis.fuse of {self.func.__qualname__} (kernel {self.kernel_name!r})>"

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        return self if obj is None else functools.partial(self, obj)

    # --- a call -------------------------------------------------------------------------------

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs:
            raise TypeError(
                f"{self.label}: keyword arguments are not fused (got {sorted(kwargs)}); pass "
                "the arguments positionally"
            )
        if _handlers:
            for a in args:
                handler = _handlers.get(type(a))
                if handler is not None:
                    return handler(self, args)
        device = self._check(args)
        prog = self.program(args)  # (on the CPU too: the same checks and errors)
        if device.type == "cpu":
            return self.func(*args)  # the CPU backend: the ops one by one
        return prog.run(args)

    def _check(self, args: tuple[Any, ...]) -> Any:
        """The one device of the array arguments; a TypeError for anything else."""
        from ._array.array import NvArray

        device = None
        for i, a in enumerate(args):
            if isinstance(a, NvArray):
                if device is None:
                    device = a.device
                elif a.device != device:
                    raise DeviceMismatchError(
                        f"{self.label}: arguments are on different devices ({device} and "
                        f"{a.device}, argument {i})"
                    )
            else:
                self._check_scalar(i, a)
        if device is None:
            raise TypeError(f"{self.label}: needs at least one NvArray argument")
        return device

    def _check_scalar(self, i: int, a: Any) -> None:
        if type(a) in (bool, int, float):
            return
        if isinstance(a, np.generic) and a.dtype.kind in "biuf":
            return
        if isinstance(a, (complex, np.complexfloating)):
            raise DTypeError(f"{self.label}: argument {i} is complex; complex values are not fused")
        raise TypeError(
            f"{self.label}: argument {i} is a {type(a).__name__}; expected an NvArray or a "
            "Python/NumPy real number"
            + (" (wrap NumPy arrays with ignis.asarray)" if isinstance(a, np.ndarray) else "")
        )

    # --- tracing ------------------------------------------------------------------------------

    def _signature(self, args: tuple[Any, ...]) -> tuple[Any, ...]:
        sig = []
        for a in args:
            if hasattr(a, "shape") and hasattr(a, "dtype") and not isinstance(a, np.generic):
                sig.append((a.dtype.name, tuple(a.shape)))
            elif isinstance(a, np.generic):
                sig.append(("numpy", a.dtype.name))
            elif type(a) is int:
                sig.append((int, _int_class(a)))
            else:
                sig.append(type(a))
        return tuple(sig)

    def program(self, args: tuple[Any, ...], wrap: Callable[[Any], Any] | None = None) -> Program:
        """The specialization for ``args`` (arrays, :class:`ArgSpec` or numbers), traced on
        first use. ``wrap``: what the function receives for each array argument (ignis_autograd
        traces with Tensors around the traced values, so that its functions work inside); its
        results are unwrapped through ``.data``."""
        key = (self._token, self._signature(args), wrap)
        prog = _programs.get(key)
        if prog is None:
            prog = _programs.remember(key, self._trace(args, wrap))
        else:
            _programs.hits += 1
        return prog

    def _trace(self, args: tuple[Any, ...], wrap: Callable[[Any], Any] | None) -> Program:
        trace = Trace(self.label)
        values = []
        for i, a in enumerate(args):
            if hasattr(a, "shape") and hasattr(a, "dtype") and not isinstance(a, np.generic):
                v = trace.input(i, dt.as_dtype(a.dtype, self.label), tuple(a.shape))
                values.append(v if wrap is None else wrap(v))
            else:
                self._check_scalar(i, a)
                values.append(trace.scalar(i, a))
        try:
            result = self.func(*values)
        except (TypeError, ValueError) as exc:  # an op refused a traced value: name the function
            if str(exc).startswith(self.label):
                raise
            try:
                new = type(exc)(f"{self.label}: {exc}")
            except Exception:
                raise exc from None
            raise new from exc
        outs = result if isinstance(result, tuple) else (result,)
        if wrap is not None:
            outs = tuple(getattr(o, "data", o) for o in outs)
        if not outs:
            raise TypeError(f"{self.label}: returns an empty tuple; expected traced arrays")
        for k, o in enumerate(outs):
            if not isinstance(o, Traced) or o._trace is not trace or o._node.weak is not None:
                what = "a Python number" if isinstance(o, Traced) else f"a {type(o).__name__}"
                raise TypeError(
                    f"{self.label}: result {k} is {what}; a fused function returns arrays "
                    "computed from its array arguments (one, or a tuple)"
                )
        indices = [o._index for o in outs]
        nodes = trace.nodes
        reduce = None
        if any(nodes[i].kind == "reduce" for i in indices):
            if len(indices) > 1:
                raise ValueError(
                    f"{self.label}: a function that ends with a reduction returns one array, "
                    f"got {len(indices)}"
                )
            reduce = nodes[indices[0]]
        roots = [reduce.args[0]] if reduce is not None else indices
        inputs = [i for i in live_nodes(trace, roots) if nodes[i].kind in ("input", "scalar")]
        if not any(nodes[i].kind == "input" for i in inputs):
            raise TypeError(f"{self.label}: the result depends on no array argument")
        shapes = {nodes[i].shape for i in indices}
        if len(shapes) > 1:
            raise ShapeError(
                f"{self.label}: results of shapes {sorted(shapes)}; a fused kernel writes "
                "results of one shape"
            )
        spec = Spec(inputs, roots, [nodes[i].dtype for i in indices], reduce)
        return Program(self, trace, spec)

    # --- backward (ignis_autograd calls these) ------------------------------------------------

    def differentiable(self, args: tuple[Any, ...], wrap: Any = None) -> bool:
        """Whether one fused backward kernel serves ``args``: one result, no trailing
        max/min (those are differentiated op by op)."""
        prog = self.program(args, wrap)
        r = prog.spec.reduce
        return prog.n_outputs == 1 and (r is None or r.op in ("sum", "mean"))

    def backward(
        self, args: tuple[Any, ...], grad: Any, wants: tuple[int, ...], wrap: Any = None
    ) -> list[Any]:
        """The gradients of the arguments at positions ``wants`` (arrays of the kernel's full
        shape, or None where no gradient reaches one) for the result's gradient ``grad``.

        On CUDA one fused kernel computes them all; on the CPU the backward trace runs op by op.
        """
        prog = self.program(args, wrap)
        g_dtype = dt.as_dtype(grad.dtype, self.label)
        entry = prog.backward(g_dtype, wants)
        bwd, spec, where_out, kernel = entry
        r = prog.spec.reduce
        if r is not None:  # the gradient of the reduced value, back over the reduced axes
            h = prog.trace.nodes[r.args[0]]
            keep = tuple(1 if d in r.params["axes"] else n for d, n in enumerate(h.shape))
            grad = grad.reshape(keep)
        values = prog.arguments(args) + [grad]
        if prog.count is not None:
            values.pop(-2)  # (the mean's count is a constant of the backward trace)
        if not spec.outputs:
            return [None] * len(wants)
        if grad.device.type == "cpu":
            outs = _evaluate(bwd, spec, values)
        else:
            if kernel is None:
                kernel = entry[3] = build(bwd, spec, self.kernel_name + "_backward")
            outs = kernel(*values)
            outs = list(outs) if isinstance(outs, tuple) else [outs]
        return [None if k is None else outs[k] for k in where_out]

    # --- inspection ---------------------------------------------------------------------------

    def source(self, *args: Any, grad: bool = False, nd: int = 0, tensors: bool = False) -> str:
        """The CUDA C++ of the kernel for ``args``: NvArrays, ``(shape, dtype)`` pairs or
        numbers, as a call would pass them (no GPU needed; compile it with
        :func:`ignis.compile`).

        ``grad=True``: the backward kernel (the gradient of every array argument, for a
        gradient of the result's dtype). ``nd``: the number of dimensions the element-wise
        kernel indexes (0: contiguous arrays; a strided or broadcast call uses more).
        ``tensors=True``: traced as a call with ``ignis_autograd`` Tensors is (a function
        written with ``ignis_autograd`` functions).

        Example: ``fused.source(((1024,), "float32"), 2.0)``.
        """
        args = tuple(ArgSpec(*a) if isinstance(a, tuple) else a for a in args)
        for i, a in enumerate(args):
            if not (hasattr(a, "shape") and hasattr(a, "dtype")) or isinstance(a, np.generic):
                self._check_scalar(i, a)
        wrap = _tensor_wrap[0] if tensors else None
        prog = self.program(args, wrap)
        if grad:
            wants = tuple(
                i
                for i, a in enumerate(args)
                if hasattr(a, "shape") and not isinstance(a, np.generic)
            )
            r = prog.spec.reduce
            g_dtype = prog.spec.out_dtypes[0] if r is None else r.dtype
            bwd, spec, _, _ = prog.backward(g_dtype, wants)
            kernel = build(bwd, spec, self.kernel_name + "_backward")
            return _kernel_source(kernel, bwd, spec, nd)
        return _kernel_source(prog.kernel, prog.trace, prog.spec, nd)


def _kernel_source(kernel: Any, trace: Trace, spec: Spec, nd: int) -> str:
    params = kernel.in_params + kernel.out_params
    types = {p.name: p.dtype for p in params}
    # outputs and array inputs are arrays; scalars (and a mean's count, after the inputs) not
    kinds = [trace.nodes[i].kind for i in spec.inputs]
    arrays = [p.is_output or (k < len(kinds) and kinds[k] == "input") for k, p in enumerate(params)]
    if spec.reduce is not None:
        return kernel.source(types, arrays)
    return kernel.source(types, arrays, nd)


def _evaluate(trace: Trace, spec: Spec, values: list[Any]) -> list[Any]:
    """Run a trace op by op with the ignis ops (the CPU backend's backward)."""
    from ._array import _ops
    from ._fuse_trace import _PY

    env: dict[int, Any] = dict(zip(spec.inputs, values, strict=True))
    nodes = trace.nodes
    for i in live_nodes(trace, spec.outputs):
        if i in env:
            continue
        n = nodes[i]
        args = [env[j] for j in n.args]
        if n.kind == "const":
            env[i] = n.value if n.weak is not None else n.dtype.numpy.type(n.value)
        elif n.weak is not None:  # Python numbers, as Python (or NumPy in float64) computes
            from ._array._op_table import ELEMENTWISE

            if len(args) == 2:
                env[i] = n.weak(_PY[n.op](*args))
            else:
                with np.errstate(all="ignore"):
                    env[i] = n.weak(ELEMENTWISE[n.op].numpy(np.float64(args[0]), **n.params))
        elif n.kind == "op":
            env[i] = getattr(_ops, n.op)(*args, **n.params)
        elif n.kind == "where":
            env[i] = _ops.where(*args)
        elif n.kind == "astype":
            env[i] = args[0].astype(n.dtype)
    shape = None
    outs = []
    for o, d in zip(spec.outputs, spec.out_dtypes, strict=True):
        v = env[o]
        shape = shape or _full_shape(trace, spec, values)
        if v.dtype is not d:
            v = v.astype(d)
        outs.append(v.broadcast_to(shape) if v.shape != shape else v)
    return outs


def _full_shape(trace: Trace, spec: Spec, values: list[Any]) -> tuple[int, ...]:
    from ._array._layout import broadcast_shapes

    return broadcast_shapes(*[v.shape for v in values if hasattr(v, "shape") and
                              not isinstance(v, np.generic)])  # fmt: skip


def fuse(func: Callable[..., Any] | None = None, *, kernel_name: str | None = None) -> Any:
    """Compile a function of element-wise ops (and an optional trailing ``sum``/``mean``/
    ``max``/``min``) into one CUDA kernel per argument signature (CuPy's ``cupy.fuse``).

    Use as ``@ignis.fuse`` or ``@ignis.fuse(kernel_name="my_gelu")``. Inside, use the ``ignis``
    element-wise functions (``ignis.exp``, ``ignis.where``, ...), operators, NvArray methods of
    those ops and ``astype``. Arguments are NvArrays (one device), Python numbers (kernel
    parameters) and NumPy scalars; results are one array or a tuple of arrays of one shape.
    The values match the unfused ops' (each op rounds to its result dtype as it would); on the
    CPU backend the function runs unfused. With ``ignis_autograd`` Tensors the call records one
    graph node whose backward is one fused kernel.

    Example::

        >>> @ignis.fuse
        ... def axpy(a, x, y):
        ...     return a * x + y
        >>> axpy(2.0, x, y)                                     # one kernel
        >>> print(axpy.source(((1024,), "float32"), 2.0, ((1024,), "float32")))
    """
    if func is None:
        return lambda f: Fused(f, kernel_name)
    return Fused(func, kernel_name)
