"""One-call results: the CUDA backend's ``unary_direct`` / ``binary_direct`` / ``reduce_direct``.

The front end remembers a plan per (op, dtypes, shapes) and, when the backend offers one, keeps
a *direct* function with it (see ``Backend.binary_direct``). Here that function takes the
operands of a repeated dense op (``a + b`` on same-dtype arrays, ``a * 2.0``, ``exp(a)``,
``a.sum()``) straight to the two things that need doing: a block from ``CudaBackend.alloc``'s
one call, ``ignis._memory._result_block`` (on the current stream, which the block records),
and the kernel's prepared launch (``Kernel._prepared``). Everything the general path would
decide again is fixed when the function is made: the kernel family, the result's layout, the
scalar conversion, the keys of the alignment cases.

The front end keeps a direct function per backend and calls it with operands of that backend
only. It returns None, and the front end takes its general path, for operands whose strides
are not the ones it was made for (views).

Element-wise: the prepared launches are found in ``elementwise._kernels`` under the fast-path
keys (element count last), one per alignment case (every address on a 16-byte boundary:
vectors; or not), and kept at their first use. Until one exists (the first call of a size and
alignment), the function allocates and then runs ``elementwise.unary`` / ``binary``, which
launches through ``Kernel.launch`` (validating the configuration) and prepares the launch.
The three element-wise functions (binary, binary with a scalar, unary) repeat one short
prologue (strides check, allocation, adopt, alignment case) on purpose: a shared helper would
cost a Python call on every op, which is what these functions exist to save.

Full reductions (sum, mean, max, min over every axis of a dense array): the first call of an
alignment case runs ``reduction.reduce``, which plans (or replays) the reduction and returns
its recipe; a recipe of one launch becomes the case's prepared launch (``reduction.replay``),
kept with the tuning knobs it was planned under. Other recipes (split reductions, with
temporaries) keep taking ``reduction.reduce``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..._memory import _result_block
from .. import _creation, _layout
from . import elementwise as ew
from . import reduction

if TYPE_CHECKING:
    from ..._dtypes import DType
    from .._semantics import Reduction
    from ..array import NvArray

__all__ = ["binary_direct", "unary_direct", "reduce_direct"]


def _fast_launch(launches: list[Any], keys: tuple[Any, ...], aligned: bool) -> Any:
    """The prepared launch of alignment case ``aligned`` (False: ``keys[0]``, True:
    ``keys[1]``) from ``elementwise._kernels``, kept in ``launches`` once it exists; None
    before (the general path prepares it)."""
    launch = launches[aligned] = ew._kernels.get(keys[aligned])
    return launch


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
    """See ``Backend.binary_direct``; None for an op without a kernel or an empty result."""
    if op not in ew._BINARY_FUNCTOR or not nbytes:
        return None
    n = nbytes // dtype.itemsize
    ordinal = backend.gpu.ordinal
    cname = compute.name
    zero, scalar = ew._ZERO_N[cname], ew._PYTYPE_N[cname]
    # ew.binary's fast-path keys, [not aligned, aligned]: vectors where every address is on a
    # 16-byte boundary.
    keys = (
        (op, cname, dtype.name, form, 1, ordinal, n),
        (op, cname, dtype.name, form, 16 // dtype.itemsize, ordinal, n),
    )
    launches: list[Any] = [None, None]  # their prepared launches, once they exist
    alloc, gpu, general, adopt = _result_block, backend.gpu, ew.binary, _creation.adopt

    if form == 0:

        def direct(a: Any, b: Any) -> NvArray | None:
            if a._strides != strides or b._strides != strides:
                return None
            buffer = alloc(nbytes, gpu)
            stream = buffer.stream
            out = adopt(buffer, shape, strides, dtype, a._device, backend, stream)
            po, pa, pb = buffer.ptr, a._storage.ptr, b._storage.ptr
            if a._offset:  # (most operands start their storage: no big-int addition then)
                pa += a._offset
            if b._offset:
                pb += b._offset
            aligned = not (po | pa | pb) & 15
            launch = launches[aligned] or _fast_launch(launches, keys, aligned)
            if launch is None:
                general(backend, op, out, a, b, compute)
            else:
                launch(stream, po, pa, pb, zero, zero, n)
            return out

    else:
        scalar_first = form == 1  # the scalar is a (form 1) or b (form 2)

        def direct(a: Any, b: Any) -> NvArray | None:
            x, value = (b, a) if scalar_first else (a, b)
            if x._strides != strides:
                return None
            buffer = alloc(nbytes, gpu)
            stream = buffer.stream
            out = adopt(buffer, shape, strides, dtype, x._device, backend, stream)
            po, px = buffer.ptr, x._storage.ptr
            if x._offset:
                px += x._offset
            aligned = not (po | px) & 15
            launch = launches[aligned] or _fast_launch(launches, keys, aligned)
            if launch is None:
                general(backend, op, out, a, b, compute)
            elif scalar_first:
                launch(stream, po, 0, px, scalar(value), zero, n)
            else:
                launch(stream, po, px, 0, zero, scalar(value), n)
            return out

    return direct


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
    n = nbytes // dtype.itemsize
    ordinal = backend.gpu.ordinal
    keys = (  # ew.unary's fast-path keys, [not aligned, aligned]
        (functor, compute.name, dtype.name, x_dtype.name, 1, ordinal, n),
        (functor, compute.name, dtype.name, x_dtype.name, 16 // dtype.itemsize, ordinal, n),
    )
    launches: list[Any] = [None, None]
    alloc, gpu, general, adopt = _result_block, backend.gpu, ew.unary, _creation.adopt
    no_params: dict[str, Any] = {}

    def direct(x: Any) -> NvArray | None:
        if x._strides != strides:
            return None
        buffer = alloc(nbytes, gpu)
        stream = buffer.stream
        out = adopt(buffer, shape, strides, dtype, x._device, backend, stream)
        po, px = buffer.ptr, x._storage.ptr
        if x._offset:
            px += x._offset
        aligned = not (po | px) & 15
        launch = launches[aligned] or _fast_launch(launches, keys, aligned)
        if launch is None:
            general(backend, op, out, x, compute, no_params)
        else:
            launch(stream, po, px, n)
        return out

    return direct


_ONE_PASS = frozenset(("sum", "mean", "max", "min"))  # var: two passes and a temporary


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
    """See ``Backend.reduce_direct``; None but for sum, mean, max and min over every axis of a
    non-empty array."""
    axes = spec.axes
    if op not in _ONE_PASS or len(axes) != len(x_shape) or not _layout.numel(x_shape):
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
