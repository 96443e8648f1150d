"""``ignis.ElementwiseKernel``: a kernel from a C++ expression per element (CuPy's API).

A kernel is declared by its input and output parameters and a C++ ``operation`` run once per
element of the broadcast shape:

    >>> squared_diff = ignis.ElementwiseKernel(
    ...     "float32 x, float32 y", "float32 z", "z = (x - y) * (x - y)", "squared_diff")
    >>> z = squared_diff(x, y)                 # x, y: CUDA NvArrays (or CuPy / PyTorch arrays)

Parameters (CuPy's grammar): ``[raw] TYPE NAME`` separated by commas. ``TYPE`` is a dtype name
(``float32``, ``int64``, ``bool``, ``complex64``, ``bfloat16``, ...; ``float``, ``double`` and
``int`` are read as float32, float64 and int32) or a *type placeholder*, any other identifier
(``T``), bound to the dtype of the arguments given for it; placeholders are ``typedef``'d
before ``preamble``, so it can use them. In ``operation``:

* a non-raw array parameter is the element at the current index (inputs ``const``, outputs
  writable references); broadcasting follows NumPy's rules, and arrays of any strides work;
* a scalar argument (a Python or NumPy number) is its value, of the parameter's type;
* a ``raw`` parameter is the whole array, indexed by flat C-order position (``x[i + 1]``) and
  sized by ``x.size()``;
* ``i`` is the flat index of the element and ``_ind.size()`` the number of elements.

Call with the inputs, optionally followed by the outputs (else they are allocated with the
broadcast shape on the inputs' device); ``size=`` gives the element count when no non-raw array
is passed; ``stream=`` the stream (default: the current one). One output is returned as an
array, several as a tuple. Each combination of argument dtypes, number of dimensions and
layout kind compiles once (through the compile caches) and is kept on the kernel object.

The CPU backend cannot run CUDA C++: a call with CPU arrays raises an error that says so.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import _dtypes as dt
from ._errors import IgnisError, ShapeError
from ._user_kernel import (
    RAW_STRUCTS,
    argument_values,
    bind_types,
    broadcast_inputs,
    check_code,
    complete_arguments,
    declare,
    default_cuda_device,
    host_scalar,
    import_arrays,
    merge_dims,
)

__all__ = ["ElementwiseKernel"]

_RESERVED = frozenset({"i", "_ind", "_n"})
_MAX_DIMS = 16
_BLOCK = 256
# Elements per thread of the contiguous kernels: a thread loads the inputs of _UNROLL elements
# (a block's are _UNROLL coalesced rows of _BLOCK) before it computes and stores any, so more
# loads are in flight than with one element per thread (about 1.7 TB/s on an H200 at one).
_UNROLL = 4


def _unrolled_loop(early: list[str], preloads: list[str], body: list[str]) -> list[str]:
    """The grid-stride loop of the contiguous form: each thread declares the registers
    ``early`` for its _UNROLL elements (``i``, ``i + blockDim.x``, ...), fills them
    (``preloads``), then runs ``body`` (bindings and the operation) on each. An output that is
    also an input (``k(x, x)``) stays correct: element ``i`` is loaded before element ``i`` is
    stored, and no other element is stored meanwhile."""
    u, step = _UNROLL, "(long long)blockDim.x"

    def each_element(lines: list[str]) -> list[str]:  # ``lines`` for the thread's elements
        return [
            "#pragma unroll",
            f"    for (int _u = 0; _u < {u}; ++_u) {{",
            f"      long long i = _b + _u * {step};",
            "      if (i < _n) {",
            *("        " + line for line in lines),
            "      }",
            "    }",
        ]

    return [
        f"  for (long long _b = (long long)blockIdx.x * {step} * {u} + threadIdx.x; _b < _n;",
        f"       _b += (long long)gridDim.x * {step} * {u}) {{",
        *("    " + e for e in early),
        *each_element(preloads),
        *each_element(body),
        "  }",
    ]


def _unrolled(params: Sequence[Any], nd: int) -> bool:
    """Whether a specialization takes the unrolled form: contiguous arrays, no raw parameter
    (a raw array is indexed by the operation, which the early loads must not reorder)."""
    return nd == 0 and not any(p.raw for p in params)


class ElementwiseKernel:
    """A CUDA kernel applying ``operation`` to each element (module notes; CuPy's signature).

    Args:
        in_params: input parameters, e.g. ``"float32 x, T y, raw T table"``.
        out_params: output parameters, e.g. ``"T z"``.
        operation: C++ statements for one element, e.g. ``"z = x * y + table[i % 4]"``.
        name: the kernel's name (in errors and in the compiled code).
        preamble: C++ placed before the kernel (helper functions; placeholders are typedefs).
        options: a :class:`~ignis.CompileOptions` for NVRTC (default: the library's).
        reduce_dims: merge dimensions the arrays step through evenly before indexing.

    Example::

        >>> add = ignis.ElementwiseKernel("T x, T y", "T z", "z = x + y", "my_add")
        >>> add(ignis.ones(4, device="cuda:0"), 2.0).tolist()
        [3.0, 3.0, 3.0, 3.0]
    """

    def __init__(
        self,
        in_params: str,
        out_params: str,
        operation: str,
        name: str = "kernel",
        preamble: str = "",
        options: Any = None,
        reduce_dims: bool = True,
    ):
        label, self.in_params, self.out_params = declare(
            "ElementwiseKernel", name, in_params, out_params, _RESERVED
        )
        self.name, self._label = name, label
        self.operation = check_code(label, "operation", operation)
        self.preamble = preamble
        self.options = options
        self.reduce_dims = bool(reduce_dims)
        self._kernels: dict[tuple[Any, ...], Any] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<ignis.ElementwiseKernel {self.name!r}>"

    # --- a call ----------------------------------------------------------------------------

    def __call__(self, *args: Any, size: int | None = None, stream: Any = None) -> Any:
        from ._array.array import NvArray
        from ._stream import current_stream

        n_in, n_out = len(self.in_params), len(self.out_params)
        params, values = argument_values(self._label, self.in_params, self.out_params, args)
        # arrays from other libraries imported (no copy); one CUDA device
        device = import_arrays(self._label, params, values)
        types, _ = bind_types(self._label, params, values)
        shape = broadcast_inputs(self._label, params, values)
        given_out = [
            v
            for p, v in zip(params, values, strict=True)
            if isinstance(v, NvArray) and not p.raw and p.is_output
        ]
        if shape is not None:
            if size is not None:
                raise ValueError(
                    f"ElementwiseKernel {self.name!r}: size= is only for calls without non-raw "
                    "array arguments"
                )
        elif given_out:
            shape = given_out[0].shape
        elif size is not None:
            shape = (int(size),)
        else:
            raise ValueError(
                f"ElementwiseKernel {self.name!r}: no array argument gives the shape; pass size="
            )
        if device is None:
            device = default_cuda_device(self._label)
        # outputs checked or allocated; inputs of another dtype than their parameter converted
        complete_arguments(
            self._label,
            params,
            values,
            types,
            shape,
            device,
            shape_note="the inputs' broadcast shape",
            allocate_raw_outputs=True,
        )
        outputs = [values[n_in + j] for j in range(n_out)]
        n = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if n > 0:
            self._launch(
                params,
                values,
                types,
                shape,
                n,
                device,
                stream if stream is not None else current_stream(),
            )
        return outputs[0] if n_out == 1 else tuple(outputs)

    # --- code ------------------------------------------------------------------------------

    def _launch(self, params, values, types, shape, n, device, stream) -> None:
        from ._array.array import NvArray

        arrays = [
            (p, v)
            for p, v in zip(params, values, strict=True)
            if isinstance(v, NvArray) and not p.raw
        ]
        raws = []
        for k, (p, v) in enumerate(zip(params, values, strict=True)):
            if p.raw and not v.is_contiguous:
                if p.is_output:
                    raise ShapeError(
                        f"ElementwiseKernel {self.name!r}: raw output {p.name!r} must be contiguous"
                    )
                values[k] = v = v.clone()
            if p.raw:
                raws.append(p.name)
        # element strides of each non-raw array over the broadcast shape
        strides = []
        for _, v in arrays:
            b = v.broadcast_to(shape) if v.shape != shape else v
            strides.append(tuple(s // b.itemsize for s in b.strides))
        if self.reduce_dims:
            kshape, kstrides = merge_dims(tuple(shape), strides)
        else:
            kshape, kstrides = tuple(shape), strides
        contiguous = len(kshape) <= 1 and all(st in ((), (1,)) for st in kstrides)
        nd = 0 if contiguous else len(kshape)
        if nd > _MAX_DIMS:
            raise ShapeError(
                f"ElementwiseKernel {self.name!r}: {nd} dimensions after merging; at most "
                f"{_MAX_DIMS} are supported"
            )
        key = (
            tuple(types[p.name].name for p in params),
            nd,
            tuple(isinstance(v, NvArray) for v in values),
        )
        kernel = self._kernels.get(key)
        if kernel is None:
            with self._lock:
                kernel = self._kernels.get(key)
                if kernel is None:
                    kernel = self._compile(params, values, types, nd, device)
                    self._kernels[key] = kernel
        args: list[Any] = []
        for p, v in zip(params, values, strict=True):
            if isinstance(v, NvArray):
                # the element's address (bfloat16 arrays have no __cuda_array_interface__)
                args.append(int(v._backend.data_ptr(v)))
                if p.raw:
                    args.append(v.numel)
            elif types[p.name].kind == "c":  # (passed as its two parts)
                z = complex(v)
                args += [z.real, z.imag]
            else:
                args.append(host_scalar(v, types[p.name]))
        args.append(n)
        if nd:  # the merged shape, then each array's element strides, as scalars
            args += [*kshape] + [s for st in kstrides for s in st]
        per_block = _BLOCK * (_UNROLL if _unrolled(params, nd) else 1)
        grid = min(-(-n // per_block), 65535 * 8)
        kernel.launch(grid, _BLOCK, args, stream=stream)

    def source(self, types: dict[str, dt.DType], values_are_arrays: Sequence[bool], nd: int) -> str:
        """The CUDA C++ of one specialization (for inspection and the compile checks)."""
        from ._array._cuda_backend._kernels import CTYPE

        params = self.in_params + self.out_params
        lines = ['#include "ignis_types.cuh"']
        if any(types[p.name].kind == "c" for p in params):
            lines.append('#include "complex.cuh"')
        seen = set()
        for p in params:
            if p.placeholder and p.placeholder not in seen:
                seen.add(p.placeholder)
                lines.append(f"typedef {CTYPE[types[p.name]]} {p.placeholder};")
        lines += [
            *RAW_STRUCTS,
            self.preamble,
        ]
        unrolled = _unrolled(params, nd)
        sig, loads = [], []
        early, preloads = [], []  # the unrolled form's input registers, filled before computing
        arr_k = 0
        for p, is_arr in zip(params, values_are_arrays, strict=True):
            c = CTYPE[types[p.name]]
            if p.raw:
                sig += [f"{c}* _rp_{p.name}", f"long long _rn_{p.name}"]
                loads.append(f"const IgnisRaw<{c}> {p.name} = {{_rp_{p.name}, _rn_{p.name}}};")
            elif is_arr:
                const = "" if p.is_output else "const "
                # (no __restrict__: an output may be an input too, as in k(x, x))
                sig.append(f"{const}{c}* _p_{p.name}")
                off = "i" if nd == 0 else f"_o{arr_k}"
                if p.is_output:
                    loads.append(f"{c}& {p.name} = _p_{p.name}[{off}];")
                elif unrolled:
                    early.append(f"{c} _v_{p.name}[{_UNROLL}];")
                    preloads.append(f"_v_{p.name}[_u] = _p_{p.name}[i];")
                    loads.append(f"const {c} {p.name} = _v_{p.name}[_u];")
                else:
                    loads.append(f"const {c} {p.name} = _p_{p.name}[{off}];")
                arr_k += 1
            elif types[p.name].kind == "c":
                part = "float" if types[p.name] is dt.complex64 else "double"
                sig += [f"const {part} _re_{p.name}", f"const {part} _im_{p.name}"]
                loads.append(f"const {c} {p.name}(_re_{p.name}, _im_{p.name});")
            else:
                sig.append(f"const {c} {p.name}")
        sig.append("const long long _n")
        sig += [f"const long long _s{d}" for d in range(nd)]
        sig += [f"const long long _t{k}_{d}" for k in range(arr_k) for d in range(nd)]
        operation = self.operation.rstrip().rstrip(";") + ";"
        if unrolled:
            loop = _unrolled_loop(early, preloads, [*loads, operation])
        else:
            body = []
            if nd:  # the flat index unravelled over the merged shape, last dimension fastest
                body.append("long long _r = i, _c;")
                for k in range(arr_k):
                    body.append(f"long long _o{k} = 0;")
                for d in range(nd - 1, -1, -1):
                    body.append(f"_c = _r % _s{d}; _r /= _s{d};" if d else "_c = _r;")
                    for k in range(arr_k):
                        body.append(f"_o{k} += _c * _t{k}_{d};")
            loop = [
                "  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < _n;",
                "       i += (long long)gridDim.x * blockDim.x) {",
                *("    " + b for b in [*body, *loads, operation]),
                "  }",
            ]
        lines += [
            f'extern "C" __global__ void {self.name}({", ".join(sig)}) {{',
            "  const IgnisIndex _ind = {_n};",
            "  (void)_ind;",
            *loop,
            "}",
        ]
        return "\n".join(lines) + "\n"

    def _compile(self, params, values, types, nd, device):
        from ._array.array import NvArray
        from ._kernel import compile_kernel

        src = self.source(types, [isinstance(v, NvArray) for v in values], nd)
        try:
            return compile_kernel(src, self.name, options=self.options, device=device.index)
        except IgnisError as exc:
            raise type(exc)(f"ElementwiseKernel {self.name!r}: {exc}") from None
