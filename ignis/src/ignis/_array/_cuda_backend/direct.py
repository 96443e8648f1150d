"""One-call results: the CUDA backend's ``unary_direct`` / ``binary_direct`` / ``reduce_direct``.

The front end remembers a plan per (op, dtypes, shapes) and, when the backend offers one, keeps
a *direct* function with it (see ``Backend.binary_direct``). Here that function takes the
operands of a repeated dense op (``a + b`` on same-dtype arrays, ``a * 2.0``, ``exp(a)``,
``a.sum()``) straight to the two things that need doing: a block for the result, on the
current stream (which the block records), and the kernel's launch. Everything the general path
would decide again is fixed when the function is made: the kernel, its grid, the result's
layout, the scalar conversion.

The front end keeps a direct function per backend and calls it with operands of that backend
only. It returns None, and the front end takes its general path, for operands whose strides
are not the ones it was made for (views).

Element-wise ops (binary, binary with a scalar, unary): the function is generated as one
Python function, because every call it would make costs the op a few percent of its host time
(more with the real driver than a bare loop shows). It runs the functions of the general path
inline, their bodies taken from their source (ignis._codegen.Inliner), so that the two paths
cannot drift apart: ``ignis._memory._result_block`` (the result's block), ``_creation.adopt``
(the result array) and the kernel's prepared launch (``Kernel._prepared``) for the case where
every address is on a 16-byte boundary (vectors: the case of blocks from the memory pool).
That kernel is compiled, if it is not yet, when the function is made. Operands off that
boundary (a view ``a[1:]``) take the prepared launch of the scalar kernel
(``elementwise._kernels``, kept once it exists) or, the first time, ``elementwise.unary`` /
``binary``, which launches through ``Kernel.launch`` (validating the configuration) and
prepares it. tests/ignis/runtime/test_fast_path_agreement.py checks, for every op of the op
table, that both paths hand the driver the same calls.

Full reductions (sum, mean, max, min over every axis of a dense array): the first call of an
alignment case runs ``reduction.reduce``, which plans (or replays) the reduction and returns
its recipe; a recipe of one launch becomes the case's prepared launch (``reduction.replay``),
kept with the tuning knobs it was planned under. Other recipes (split reductions, with
temporaries) keep taking ``reduction.reduce``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..._codegen import Inliner, NoSource
from ..._memory import _result_block
from .. import _creation, _layout
from .._reduction_table import REDUCTIONS
from . import elementwise as ew
from . import reduction

if TYPE_CHECKING:
    from ..._dtypes import DType
    from ..._kernel import Kernel
    from .._semantics import Reduction
    from ..array import NvArray

__all__ = ["binary_direct", "unary_direct", "reduce_direct"]


def _misaligned_case(
    key: tuple[Any, ...], general: Callable[[NvArray, Any, Any], None]
) -> Callable[..., NvArray]:
    """``misaligned(stream, out, a, b, values)``: the launch of operands off the 16-byte
    boundary, from ``elementwise._kernels[key]`` once it exists (kept), else through
    ``general(out, a, b)``, which prepares it. ``values``: the launch's converted values."""
    kept: list[Any] = [None]

    def misaligned(stream: Any, out: NvArray, a: Any, b: Any, values: tuple[Any, ...]) -> NvArray:
        launch = kept[0]
        if launch is None:
            launch = kept[0] = ew._kernels.get(key)
        if launch is None:
            general(out, a, b)
        else:
            launch(stream, *values)
        return out

    return misaligned


def _pointer_lines(operand: str, local: str) -> list[str]:
    """``local = operand``'s device address (most operands start their storage: no big-int
    addition of a zero offset then)."""
    return [
        f"{local} = {operand}._storage.ptr",
        f"if {operand}._offset:",
        f"    {local} += {operand}._offset",
    ]


# The locals of a direct function's own lines (the inlined code's globals are named around them).
_LOCALS = ("a", "b", "x", "s", "buffer", "stream", "ptr", "out", "pa", "pb", "px")


def _generated(
    backend: Any,
    kernel: Kernel,
    layout: tuple[tuple[int, ...], tuple[int, ...], DType, int],
    misaligned: Callable[..., NvArray],
    *,
    signature: str,
    general_args: str,
    checks: Sequence[str],
    operands: dict[str, str],
    values: Sequence[str],
    names: dict[str, Any] | None = None,
    label: str,
) -> Callable[..., NvArray | None] | None:
    """The direct function ``direct(<signature>)`` of one element-wise plan (see the module
    docstring); None where the kernel's launch cannot be prepared.

    ``layout``: the result's ``(shape, strides, dtype, nbytes)``; ``misaligned``: the launch
    of operands off the 16-byte boundary (:func:`_misaligned_case`). ``general_args``: what
    ``signature`` hands the general path (``a, b``; ``x, None``). ``checks``: lines that
    return None for operands the function does not take (and may bind locals the values use).
    ``operands``: each array operand's name -> the local of its address. ``values``: the
    launch's values, the result's address being ``ptr``. ``names``: the globals of ``checks``
    and ``values`` beyond the plan's own.
    """
    shape, strides, dtype, nbytes = layout
    n, v = nbytes // dtype.itemsize, 16 // dtype.itemsize
    gpu = backend.gpu
    grid = ew._contig_grid(backend, gpu.ordinal, n, v)
    launch = kernel._prepared(gpu, grid, ew.BLOCK)
    if launch is None:
        return None
    first = next(iter(operands))
    pointers = [
        line for operand, local in operands.items() for line in _pointer_lines(operand, local)
    ]
    addresses = " | ".join(["ptr", *operands.values()])
    plan = {"shape": shape, "strides": strides, "dtype": dtype, "nbytes": nbytes, "n": n}
    inliner = Inliner(
        {**(names or {}), **plan, "backend": backend, "device": gpu, "misaligned": misaligned},
        locals=_LOCALS,
    )
    result = ["buffer", "shape", "strides", "dtype", f"{first}._device", "backend", "stream"]
    try:
        body = [
            *checks,
            *inliner.inline(
                _result_block, ["nbytes", "device"], result="buffer", keep={"stream": "stream"}
            ),
            *inliner.inline(_creation.adopt, result, result="out"),
            "ptr = buffer.ptr",
            *pointers,
            f"if ({addresses}) & 15:  # off the 16-byte boundary: the scalar kernel",
            f"    return misaligned(stream, out, {general_args}, ({', '.join(values)},))",
            *inliner.inline(launch, ["stream", *values]),
            "return out",
        ]
    except NoSource:  # an installation without .py files: the general path
        return None
    filename = f"<ignis direct {label} on cuda:{gpu.ordinal}>"
    _, direct = inliner.build("direct", signature, body, filename)
    return direct


def binary_direct(
    backend: Any,
    op: str,
    compute: DType,
    dtype: DType,
    form: int,
    shape: tuple[int, ...],
    strides: tuple[int, ...],
    nbytes: int,
) -> Callable[[Any, Any], NvArray | None] | None:
    """See ``Backend.binary_direct``; None for an op without a kernel, an empty result or
    complex data (the prepared launches pack numbers, not complex structs)."""
    if op not in ew._BINARY_FUNCTOR or not nbytes or "c" in (compute.kind, dtype.kind):
        return None
    n = nbytes // dtype.itemsize
    cname = compute.name
    v = 16 // dtype.itemsize
    # The operands' dtypes for the kernel: arrays have the result's, the scalar (a in form 1,
    # b in form 2) is passed in the compute type.
    ta, tb = (None if form == 1 else dtype), (None if form == 2 else dtype)
    kernel = ew.binary_contig_kernel(backend, op, compute, dtype, ta, tb, form, v)
    key = (op, cname, dtype.name, form, 1, backend.gpu.ordinal, n)  # ew.binary's, misaligned

    def general(out: NvArray, a: Any, b: Any) -> None:
        ew.binary(backend, op, out, a, b, compute)

    names = {"zero": ew._ZERO_N[cname], "scalar": ew._SCALAR_N[cname]}
    if form == 0:
        checks = ["if a._strides != strides or b._strides != strides:", "    return None"]
        operands = {"a": "pa", "b": "pb"}
        values = ("ptr", "pa", "pb", "zero", "zero", "n")
    else:
        x, value = ("b", "a") if form == 1 else ("a", "b")
        # The scalar is converted before anything is allocated.
        checks = [f"if {x}._strides != strides:", "    return None", f"s = scalar({value})"]
        operands = {x: "px"}
        values = (
            ("ptr", "0", "px", "s", "zero", "n")
            if form == 1
            else ("ptr", "px", "0", "zero", "s", "n")
        )
    return _generated(
        backend,
        kernel,
        (shape, strides, dtype, nbytes),
        _misaligned_case(key, general),
        signature="a, b",
        general_args="a, b",
        checks=checks,
        operands=operands,
        values=values,
        names=names,
        label=f"{op} {dtype.name} form {form} n={n}",
    )


def unary_direct(
    backend: Any,
    op: str,
    compute: DType,
    dtype: DType,
    x_dtype: DType,
    shape: tuple[int, ...],
    strides: tuple[int, ...],
    nbytes: int,
) -> Callable[[Any], NvArray | None] | None:
    """See ``Backend.unary_direct``; None for gelu (its kernel depends on a parameter the plan
    does not hold), an op without a kernel, an empty result or an operand of another element
    size (its strides differ from the result's)."""
    functor = ew._UNARY_FUNCTOR.get(op)
    if functor is None or not nbytes or x_dtype.itemsize != dtype.itemsize:
        return None
    if "c" in (compute.kind, dtype.kind, x_dtype.kind):  # (see binary_direct)
        return None
    n = nbytes // dtype.itemsize
    v = 16 // dtype.itemsize
    kernel = ew.unary_contig_kernel(backend, functor, compute, dtype, x_dtype, v)
    key = (functor, compute.name, dtype.name, x_dtype.name, 1, backend.gpu.ordinal, n)
    no_params: dict[str, Any] = {}

    def general(out: NvArray, x: Any, _: Any) -> None:
        ew.unary(backend, op, out, x, compute, no_params)

    return _generated(
        backend,
        kernel,
        (shape, strides, dtype, nbytes),
        _misaligned_case(key, general),
        signature="x",
        general_args="x, None",
        checks=["if x._strides != strides:", "    return None"],
        operands={"x": "px"},
        values=("ptr", "px", "n"),
        label=f"{op} {dtype.name} n={n}",
    )


# The reductions of one pass (var and std take two and a temporary).
_ONE_PASS = frozenset(
    n for n, op in REDUCTIONS.items() if op.cuda is not None and op.cuda.finish != "deviations"
)


def reduce_direct(
    backend: Any,
    op: str,
    spec: Reduction,
    x_dtype: DType,
    x_shape: tuple[int, ...],
    keep_strides: tuple[int, ...],
    strides: tuple[int, ...],
    nbytes: int,
) -> Callable[[Any], NvArray | None] | None:
    """See ``Backend.reduce_direct``; None but for the one-pass reductions (sum, mean, max, ...)
    over every axis of a non-empty array."""
    axes = spec.axes
    if op not in _ONE_PASS or len(axes) != len(x_shape) or not _layout.numel(x_shape):
        return None
    if x_dtype.kind == "c":  # (see binary_direct)
        return None
    x_strides = _layout.contiguous_strides(x_shape, x_dtype.itemsize)
    shape, keep_shape, dtype, accumulate = spec.shape, spec.keep_shape, spec.dtype, spec.accumulate
    params = {"ddof": 0}  # what the front end passes (only var reads it)
    # Alignment case ((x address % 16) | (out address % 16) << 4) -> (launch, arguments, the
    # tuning knobs it was planned under), or False: the case's recipe is not one launch.
    replays: dict[int, Any] = {}
    alloc, general, adopt = _result_block, reduction.reduce, _creation.adopt
    knobs, device = reduction._knobs, backend.gpu

    def direct(x: Any) -> NvArray | None:
        if x._strides != x_strides:
            return None
        buffer = alloc(nbytes, device)
        stream = buffer.stream
        px, po = x._storage.ptr, buffer.ptr
        if x._offset:
            px += x._offset
        case = (px & 15) | (po & 15) << 4
        replay = replays.get(case)
        if replay and replay[2] == knobs():
            out = adopt(buffer, shape, strides, dtype, x._device, backend, stream)
            replay[0](stream, px, po, *replay[1])
            return out
        # The general path, as the front end's: the keepdims result, seen without the axes.
        out = adopt(buffer, keep_shape, keep_strides, dtype, x._device, backend, stream)
        recipe = general(backend, op, out, x, axes, accumulate, params)
        if replay is not False:
            found = reduction.replay(recipe, device)
            replays[case] = False if found is None else (*found, knobs())
        return out if keep_shape == shape else out._view(0, shape, strides)

    return direct
