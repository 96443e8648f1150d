"""One-call element-wise results: the CUDA backend's ``unary_direct`` / ``binary_direct``.

The front end remembers a plan per (op, dtypes, shapes) and, when the backend offers one, keeps
a *direct* function with it (see ``Backend.binary_direct``). Here that function takes the
operands of a repeated dense op (``a + b`` on same-dtype arrays, ``a * 2.0``, ``exp(a)``)
straight to the two things that need doing: a block from ``CudaBackend.alloc`` (on the current
stream, which the block records), and the kernel's prepared launch (``Kernel._prepared``, found
in ``elementwise._kernels`` under the fast-path key, element count last). Everything the general
path would decide again is fixed when the function is made: the kernel family, the result's
layout, the scalar conversion, both alignment cases' keys.

The front end keeps a direct function per backend and calls it with operands of that backend
only. It returns None, and the front end takes its general path, for operands whose strides
are not the result's (views).
When the prepared launch does not exist yet (the first call of a size and alignment), it
allocates and then runs ``elementwise.unary`` / ``binary``, which launches through
``Kernel.launch`` (validating the configuration) and prepares the launch for the next call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import _creation
from . import elementwise as ew

if TYPE_CHECKING:
    from ..._dtypes import DType
    from ..array import NvArray

__all__ = ["binary_direct", "unary_direct"]


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
    # ew.binary's fast-path keys: vectors where every address is on a 16-byte boundary.
    narrow = (op, cname, dtype.name, form, 1, ordinal, n)
    wide = (op, cname, dtype.name, form, 16 // dtype.itemsize, ordinal, n)
    kernels, general, adopt = ew._kernels, ew.binary, _creation.adopt

    if form == 0:

        def direct(a: Any, b: Any) -> NvArray | None:
            if a._strides != strides or b._strides != strides:
                return None
            buffer = backend.alloc(nbytes)
            stream = buffer.stream
            out = adopt(buffer, shape, strides, dtype, a._device, backend, stream)
            po, pa, pb = buffer.ptr, a._storage.ptr + a._offset, b._storage.ptr + b._offset
            launch = kernels.get(narrow if (po | pa | pb) & 15 else wide)
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
            buffer = backend.alloc(nbytes)
            stream = buffer.stream
            out = adopt(buffer, shape, strides, dtype, x._device, backend, stream)
            po, px = buffer.ptr, x._storage.ptr + x._offset
            launch = kernels.get(narrow if (po | px) & 15 else wide)
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
    narrow = (functor, compute.name, dtype.name, x_dtype.name, 1, ordinal, n)
    wide = (functor, compute.name, dtype.name, x_dtype.name, 16 // dtype.itemsize, ordinal, n)
    kernels, general, adopt = ew._kernels, ew.unary, _creation.adopt
    no_params: dict[str, Any] = {}

    def direct(x: Any) -> NvArray | None:
        if x._strides != strides:
            return None
        buffer = backend.alloc(nbytes)
        stream = buffer.stream
        out = adopt(buffer, shape, strides, dtype, x._device, backend, stream)
        po, px = buffer.ptr, x._storage.ptr + x._offset
        launch = kernels.get(narrow if (po | px) & 15 else wide)
        if launch is None:
            general(backend, op, out, x, compute, no_params)
        else:
            launch(stream, po, px, n)
        return out

    return direct
