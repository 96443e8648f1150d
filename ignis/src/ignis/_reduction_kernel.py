"""``ignis.ReductionKernel``: a reduction from C++ expressions (CuPy's API).

A kernel is declared by its parameters (CuPy's grammar, as :class:`~ignis.ElementwiseKernel`)
and four expressions:

    >>> l2norm = ignis.ReductionKernel(
    ...     "T x", "T y", "x * x", "a + b", "y = sqrt(a)", "0", "l2norm")
    >>> l2norm(x, axis=1)                    # x: a CUDA NvArray (or a CuPy / PyTorch array)

* ``map_expr``: the value of one element, from the inputs at that position (non-raw inputs
  broadcast together, NumPy's rules; any strides), scalars and raw parameters;
* ``reduce_expr``: two partial results ``a`` and ``b`` combined (associative and
  commutative, as CuPy requires);
* ``post_map_expr``: statements that set the outputs from the result ``a``;
* ``identity``: the C++ value a reduction starts from (``"0"``), or None: no identity (an
  empty reduction is then an error).

The partial results are of ``reduce_type`` (a dtype name, ``float``/``double``/``int``,
``long long``-style C names, or a type placeholder; default: the first output's type), which
the expressions know as ``_type_reduce``. The call is ``kernel(*inputs, [*outputs], axis=None,
keepdims=False, out=None, stream=None)``: ``axis`` an int, a tuple (negative allowed) or None
(all axes); outputs have the inputs' broadcast shape without the reduced axes (kept as 1 with
``keepdims``), and are allocated unless given.

The work is laid out as the library's own reductions (``cuda_src/reduce.cuh``: the
``OuterLayout`` of each output's row and its lane-group and block reductions, the reduction
settings of ``ignis.tuning``): short rows get a group of 1..32 lanes each, long rows a block
each, split over several blocks (and a second pass over the partial results, in split order)
when there are too few rows to fill the GPU. The order of combination depends only on the
shape and the settings: a call gives the same bits every time. The CPU backend cannot run
CUDA C++: a call with CPU arrays raises an error that says so.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from typing import Any

from . import _dtypes as dt
from ._errors import DTypeError, IgnisError, ShapeError
from ._user_kernel import (
    RAW_STRUCTS,
    argument_values,
    bind_types,
    broadcast_inputs,
    check_code,
    complete_arguments,
    declare,
    host_scalar,
    import_arrays,
    merge_dims,
    type_of,
)

__all__ = ["ReductionKernel"]

_RESERVED = frozenset({"a", "b", "_type_reduce", "_in_ind", "_out_ind"})
# C type names reduce_type may use besides dtype names and placeholders
_C_NAMES = {
    "char": dt.int8,
    "signed char": dt.int8,
    "unsigned char": dt.uint8,
    "short": dt.int16,
    "unsigned short": dt.uint16,
    "unsigned int": dt.uint32,
    "unsigned": dt.uint32,
    "long": dt.int64,
    "long long": dt.int64,
    "unsigned long": dt.uint64,
    "unsigned long long": dt.uint64,
}
_MAX_DIMS = 8  # an ignis::OuterLayout's
_GROUP_THREADS = 256
_MAX_GRID = 1 << 20


class ReductionKernel:
    """A CUDA reduction made of C++ expressions (module notes; CuPy's signature).

    Args:
        in_params: input parameters, e.g. ``"T x, T w"``.
        out_params: output parameters, e.g. ``"T y"``.
        map_expr: the value of one element, e.g. ``"x * w"``.
        reduce_expr: two partial results ``a`` and ``b`` combined, e.g. ``"a + b"``,
            ``"max(a, b)"``.
        post_map_expr: sets the outputs from the result ``a``, e.g. ``"y = sqrt(a)"``.
        identity: the starting value as C++ (``"0"``), or None (no identity).
        name: the kernel's name (in errors and in the compiled code).
        reduce_type: the partial results' type (default: the first output's).
        reduce_dims: merge dimensions the arrays step through evenly before indexing.
        preamble: C++ placed before the kernels (placeholders and ``_type_reduce`` are
            typedefs there already).
        options: a :class:`~ignis.CompileOptions` or NVRTC flags for the compiler.

    Example::

        >>> sum_sq = ignis.ReductionKernel("T x", "T y", "x * x", "a + b", "y = a", "0", "ss")
        >>> sum_sq(ignis.arange(4.0, device="cuda:0")).item()
        14.0
    """

    def __init__(
        self,
        in_params: str,
        out_params: str,
        map_expr: str,
        reduce_expr: str,
        post_map_expr: str,
        identity: str | None,
        name: str = "reduce_kernel",
        reduce_type: str | None = None,
        reduce_dims: bool = True,
        preamble: str = "",
        options: Any = None,
    ):
        label, self.in_params, self.out_params = declare(
            "ReductionKernel", name, in_params, out_params, _RESERVED, needs_input=True
        )
        self.name, self._label = name, label
        for what, expr in (
            ("map_expr", map_expr),
            ("reduce_expr", reduce_expr),
            ("post_map_expr", post_map_expr),
        ):
            check_code(label, what, expr)
        if identity is not None and (not isinstance(identity, str) or not identity.strip()):
            raise ValueError(
                f"{label}: identity must be a C++ expression string (e.g. '0') or None, got "
                f"{identity!r}"
            )
        self.map_expr = map_expr.strip().rstrip(";")
        self.reduce_expr = reduce_expr.strip().rstrip(";")
        self.post_map_expr = post_map_expr.strip().rstrip(";")
        self.identity = None if identity is None else identity.strip()
        self.preamble = preamble
        self.options = options
        self.reduce_dims = bool(reduce_dims)
        if reduce_type is None:
            first = self.out_params[0]
            reduce_type = first.placeholder or first.dtype.name  # type: ignore[union-attr]
        if not isinstance(reduce_type, str):
            raise TypeError(
                f"{label}: reduce_type must be a type name string, got {type(reduce_type).__name__}"
            )
        rtype = " ".join(reduce_type.split())
        placeholders = {p.placeholder for p in self.in_params + self.out_params if p.placeholder}
        self._reduce_dtype = _C_NAMES.get(rtype) or type_of(rtype)
        if self._reduce_dtype is None and rtype not in placeholders:
            raise ValueError(
                f"{label}: cannot resolve reduce_type {reduce_type!r}: it is neither a dtype "
                f"name, a C arithmetic type nor a type placeholder of the parameters "
                f"({', '.join(sorted(placeholders)) or 'none'})"
            )
        self.reduce_type = rtype
        self._modules: dict[tuple[Any, ...], Any] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<ignis.ReductionKernel {self.name!r}>"

    # --- a call ----------------------------------------------------------------------------

    def __call__(
        self,
        *args: Any,
        axis: Any = None,
        keepdims: bool = False,
        out: Any = None,
        stream: Any = None,
    ) -> Any:
        from ._array._semantics import normalize_axes
        from ._stream import current_stream

        label = self._label
        n_in, n_out = len(self.in_params), len(self.out_params)
        params, values = argument_values(label, self.in_params, self.out_params, args)
        if out is not None:
            if len(args) != n_in or n_out != 1:
                raise TypeError(
                    f"{label}: out= is for a kernel of one output whose outputs are not also "
                    "passed as arguments"
                )
            values[n_in] = out
        device = import_arrays(label, params, values)
        types, bound = bind_types(label, params, values)
        rdtype = self._reduce_dtype or bound.get(self.reduce_type)
        if rdtype is None:
            raise DTypeError(
                f"{label}: cannot resolve the reduce_type placeholder {self.reduce_type}: no "
                "argument gives it"
            )
        shape = broadcast_inputs(label, params, values)
        if shape is None:
            raise ValueError(
                f"{label}: no non-raw input array gives the shape to reduce (inputs "
                f"{[p.name for p in self.in_params]})"
            )
        axes = normalize_axes(axis, len(shape), label)
        kept_axes = [d for d in range(len(shape)) if d not in axes]
        out_shape = tuple(
            (1 if d in axes else shape[d]) for d in range(len(shape)) if keepdims or d not in axes
        )
        n = math.prod(shape[d] for d in axes)
        rows = math.prod(shape[d] for d in kept_axes)
        if n == 0 and self.identity is None and rows:
            raise ValueError(
                f"{label}: zero-size reduction over axis {axis!r} of shape {shape}, and the "
                "kernel has no identity"
            )
        complete_arguments(
            label,
            params,
            values,
            types,
            out_shape,
            device,
            shape_note=f"the inputs' shape {shape} reduced over axes {axes}, keepdims={keepdims}",
            allocate_raw_outputs=False,
        )
        outputs = [values[n_in + j] for j in range(n_out)]
        if rows > 0:
            self._launch(
                params,
                values,
                types,
                rdtype,
                shape,
                axes,
                kept_axes,
                keepdims,
                device,
                stream if stream is not None else current_stream(),
            )
        return outputs[0] if n_out == 1 else tuple(outputs)

    # --- launching -------------------------------------------------------------------------

    def _layouts(self, params, values, shape, axes, kept_axes, keepdims):
        """Each non-raw input's (kept, reduced) dimensions and each non-raw output's kept
        dimensions, as ``[(size, element stride), ...]`` outermost first, merged jointly."""
        from ._array.array import NvArray

        ins, outs = [], []
        for p, v in zip(params, values, strict=True):
            if not isinstance(v, NvArray) or p.raw:
                continue
            if p.is_output:
                st = [s // v.itemsize for s in v.strides]
                if keepdims:  # (the reduced axes are 1 there: their strides do not matter)
                    st = [st[d] for d in kept_axes]
                outs.append(tuple(st))
            else:
                b = v.broadcast_to(shape) if v.shape != shape else v
                ins.append(tuple(s // b.itemsize for s in b.strides))
        kept_shape = tuple(shape[d] for d in kept_axes)
        red_shape = tuple(shape[d] for d in axes)
        kept_st = [tuple(s[d] for d in kept_axes) for s in ins] + outs
        red_st = [tuple(s[d] for d in axes) for s in ins]
        if self.reduce_dims:
            kshape, kst = merge_dims(kept_shape, kept_st)
            rshape, rst = merge_dims(red_shape, red_st)
        else:
            kshape, kst, rshape, rst = kept_shape, kept_st, red_shape, red_st
        for what, dims in (("kept", kshape), ("reduced", rshape)):
            if len(dims) > _MAX_DIMS:
                raise ShapeError(
                    f"{self._label}: {len(dims)} {what} dimensions after merging; at most "
                    f"{_MAX_DIMS} are supported"
                )

        def dims(sizes, strides):
            return [(n, s) for n, s in zip(sizes, strides, strict=True)]

        n_in = len(ins)
        in_layouts = [(dims(kshape, kst[k]), dims(rshape, rst[k])) for k in range(n_in)]
        out_layouts = [dims(kshape, kst[n_in + k]) for k in range(len(outs))]
        return in_layouts, out_layouts

    def _launch(
        self, params, values, types, rdtype, shape, axes, kept_axes, keepdims, device, stream
    ) -> None:
        from ._array._creation import empty
        from ._array._cuda_backend.reduction import _group_size, _splits, pack_outer
        from ._array.array import NvArray
        from ._tuning import current

        tune = current.reduction
        n = math.prod(shape[d] for d in axes)
        rows = math.prod(shape[d] for d in kept_axes)
        for k, (p, v) in enumerate(zip(params, values, strict=True)):
            if p.raw and not v.is_contiguous:
                if p.is_output:
                    raise ShapeError(f"{self._label}: raw output {p.name!r} must be contiguous")
                values[k] = v.clone()
        in_layouts, out_layouts = self._layouts(params, values, shape, axes, kept_axes, keepdims)
        arrays = tuple(isinstance(v, NvArray) for v in values)
        module = self._module(types, rdtype, arrays, device)
        args: list[Any] = []
        for p, v in zip(params, values, strict=True):
            if isinstance(v, NvArray):
                args.append(int(v._backend.data_ptr(v)))
                if p.raw:
                    args.append(v.numel)
            elif types[p.name].kind == "c":
                z = complex(v)
                args += [z.real, z.imag]
            else:
                args.append(host_scalar(v, types[p.name]))
        for kept, red in in_layouts:
            args += [pack_outer(kept), pack_outer(red)]
        args += [pack_outer(o) for o in out_layouts]
        if n <= tune.group_max_n or (
            n <= tune.group_wide_max_n and rows >= tune.group_wide_min_rows
        ):
            group = _group_size(max(n, 1))
            grid = min(_MAX_GRID, -(-rows * group // _GROUP_THREADS))
            fn = module.get_function(self.name)
            fn.launch(grid, _GROUP_THREADS, [*args, rows, n, group, 1, n, None], stream=stream)
            return
        splits = _splits(rows, n, tune.min_chunk, tune)
        chunk = -(-n // splits)
        splits = -(-n // chunk)
        threads = 512 if chunk >= 2 * tune.min_chunk else 256
        partials = None
        if splits > 1:
            nbytes = rows * splits * _acc_bytes(rdtype, self.identity is None)
            partials = empty((nbytes,), dtype=dt.uint8, device=device)
        ptr = None if partials is None else int(partials._backend.data_ptr(partials))
        block = module.get_function(f"{self.name}_block")
        block.launch(
            min(_MAX_GRID, rows * splits),
            threads,
            [*args, rows, n, 0, splits, chunk, ptr],
            stream=stream,
        )
        if partials is not None:
            finish = module.get_function(f"{self.name}_finish")
            grid = min(_MAX_GRID, -(-rows // _GROUP_THREADS))
            finish.launch(
                grid, _GROUP_THREADS, [*args, rows, n, 0, splits, chunk, ptr], stream=stream
            )
            # the scratch is freed in its allocation stream's order: after this stream's work
            record = getattr(partials._storage, "record_stream", None)
            if record is not None:
                record(stream)

    def _module(self, types, rdtype, arrays, device) -> Any:
        from ._raw_module import RawModule

        key = (
            tuple(types[p.name].name for p in self.in_params + self.out_params),
            rdtype.name,
            arrays,
            device.index,
        )
        module = self._modules.get(key)
        if module is None:
            with self._lock:
                module = self._modules.get(key)
                if module is None:
                    module = RawModule(
                        code=self.source(types, arrays, rdtype), options=self.options
                    )
                    try:
                        module.compile()
                    except IgnisError as exc:
                        raise type(exc)(f"{self._label}: {exc}") from None
                    self._modules[key] = module
        return module

    # --- code ------------------------------------------------------------------------------

    def source(
        self,
        types: dict[str, dt.DType],
        values_are_arrays: Sequence[bool],
        reduce_dtype: dt.DType | None = None,
    ) -> str:
        """The CUDA C++ of one specialization: the kernels ``<name>`` (a lane group per row),
        ``<name>_block`` (a block per row or split of one) and ``<name>_finish`` (the splits'
        partial results combined), for inspection and the compile checks."""
        from ._array._cuda_backend._kernels import CTYPE

        params = self.in_params + self.out_params
        rdtype = reduce_dtype or self._reduce_dtype
        if rdtype is None:
            bound = {p.placeholder: types[p.name] for p in params if p.placeholder}
            rdtype = bound[self.reduce_type]
        lines = ['#include "reduce.cuh"']
        seen = set()
        for p in params:
            if p.placeholder and p.placeholder not in seen:
                seen.add(p.placeholder)
                lines.append(f"typedef {CTYPE[types[p.name]]} {p.placeholder};")
        lines.append(f"typedef {CTYPE[rdtype]} _type_reduce;")
        lines += [*RAW_STRUCTS, self.preamble]
        lines += self._op_lines(rdtype)
        sig, loads_in, loads_out = [], [], []
        k_in = k_out = 0
        for p, is_arr in zip(params, values_are_arrays, strict=True):
            c = CTYPE[types[p.name]]
            if p.raw:
                sig += [f"{c}* _rp_{p.name}", f"long long _rn_{p.name}"]
                decl = f"const IgnisRaw<{c}> {p.name} = {{_rp_{p.name}, _rn_{p.name}}};"
                loads_in.append(decl)
                loads_out.append(decl)
            elif is_arr and p.is_output:
                sig.append(f"{c}* _p_{p.name}")
                loads_out.append(
                    f"{c}& {p.name} = _p_{p.name}[ignis::offset_of(_ig_ol{k_out}, _ig_row)];"
                )
                k_out += 1
            elif is_arr:
                sig.append(f"const {c}* _p_{p.name}")
                loads_in.append(
                    f"const {c} {p.name} = _p_{p.name}[_ig_base{k_in} + "
                    f"ignis::offset_of(_ig_rl{k_in}, _ig_r)];"
                )
                k_in += 1
            elif types[p.name].kind == "c":
                part = "float" if types[p.name] is dt.complex64 else "double"
                sig += [f"const {part} _re_{p.name}", f"const {part} _im_{p.name}"]
                decl = f"const {c} {p.name}(_re_{p.name}, _im_{p.name});"
                loads_in.append(decl)
                loads_out.append(decl)
            else:
                sig.append(f"const {c} {p.name}")
        for k in range(k_in):
            sig += [f"const ignis::OuterLayout _ig_kl{k}", f"const ignis::OuterLayout _ig_rl{k}"]
        sig += [f"const ignis::OuterLayout _ig_ol{k}" for k in range(k_out)]
        sig += [
            "const long long _ig_rows",
            "const long long _ig_n",
            "const int _ig_group",
            "const long long _ig_splits",
            "const long long _ig_chunk",
            "_ig_acc* _ig_partials",
        ]
        signature = ", ".join(sig)
        bases = [
            f"const long long _ig_base{k} = ignis::offset_of(_ig_kl{k}, _ig_row);"
            for k in range(k_in)
        ]
        # one element: the inputs at reduced position _ig_r, mapped and combined into _ig_s
        element = [
            "{",
            *("  " + s for s in loads_in),
            # (cvt_in: reduce.cuh's conversions, which also take complex64 to complex128)
            f"  const _type_reduce _ig_m = ignis::cvt_in<_type_reduce>({self.map_expr});",
            "  _ig_s = _IgOp::combine(_ig_s, _IgOp::lift(_ig_m));",
            "}",
        ]
        post = [
            "{",
            *("  " + s for s in loads_out),
            "  const _type_reduce a = _IgOp::value(_ig_s);",
            f"  {self.post_map_expr};",
            "}",
        ]

        def indent(block: list[str], depth: int) -> list[str]:
            return [" " * depth + s for s in block]

        name = self.name
        lines += [
            "// A group of _ig_group lanes (a power of two <= 32) per output row.",
            f'extern "C" __global__ void __launch_bounds__(256) {name}({signature}) {{',
            "  const int _ig_lane = threadIdx.x & (_ig_group - 1);",
            "  const int _ig_rpw = ignis::warp_size / _ig_group;",
            "  const long long _ig_warp = ignis::global_index() / ignis::warp_size;",
            "  const long long _ig_warps = ignis::grid_stride() / ignis::warp_size;",
            "  const long long _ig_sub = (threadIdx.x & (ignis::warp_size - 1)) / _ig_group;",
            "  // (the loop bound is uniform over a warp: every lane reaches the shuffles)",
            "  for (long long _ig_first = _ig_warp * _ig_rpw; _ig_first < _ig_rows;",
            "       _ig_first += _ig_warps * _ig_rpw) {",
            "    const long long _ig_row = _ig_first + _ig_sub;",
            "    _ig_acc _ig_s = _IgOp::identity();",
            "    if (_ig_row < _ig_rows) {",
            *indent(bases, 6),
            "      for (long long _ig_r = _ig_lane; _ig_r < _ig_n; _ig_r += _ig_group)",
            *indent(element, 8),
            "    }",
            "    _ig_s = ignis::group_reduce<_IgOp>(_ig_s, _ig_group);",
            "    if (_ig_row < _ig_rows && _ig_lane == 0)",
            *indent(post, 6),
            "  }",
            "}",
            "// A block per (row, split): elements [split * chunk, (split + 1) * chunk).",
            f'extern "C" __global__ void __launch_bounds__(512) {name}_block({signature}) {{',
            "  IGNIS_SHARED_ARRAY(_ig_acc, _ig_scratch, ignis::warp_size);",
            "  const long long _ig_units = _ig_rows * _ig_splits;",
            "  for (long long _ig_unit = blockIdx.x; _ig_unit < _ig_units;",
            "       _ig_unit += gridDim.x) {",
            "    const long long _ig_row = _ig_unit / _ig_splits;",
            "    const long long _ig_split = _ig_unit - _ig_row * _ig_splits;",
            "    const long long _ig_begin = _ig_split * _ig_chunk;",
            "    const long long _ig_end =",
            "        _ig_begin + _ig_chunk < _ig_n ? _ig_begin + _ig_chunk : _ig_n;",
            *indent(bases, 4),
            "    _ig_acc _ig_s = _IgOp::identity();",
            "    for (long long _ig_r = _ig_begin + threadIdx.x; _ig_r < _ig_end;",
            "         _ig_r += blockDim.x)",
            *indent(element, 6),
            "    _ig_s = ignis::block_reduce<_IgOp>(_ig_s, _ig_scratch);",
            "    if (threadIdx.x == 0) {",
            "      if (_ig_splits == 1)",
            *indent(post, 8),
            "      else",
            "        _ig_partials[_ig_unit] = _ig_s;",
            "    }",
            "  }",
            "}",
            "// One thread per row: its splits' partial results combined in split order.",
            f'extern "C" __global__ void __launch_bounds__(256) {name}_finish({signature}) {{',
            "  for (long long _ig_row = ignis::global_index(); _ig_row < _ig_rows;",
            "       _ig_row += ignis::grid_stride()) {",
            "    _ig_acc _ig_s = _IgOp::identity();",
            "    for (long long _ig_k = 0; _ig_k < _ig_splits; ++_ig_k)",
            "      _ig_s = _IgOp::combine(_ig_s, _ig_partials[_ig_row * _ig_splits + _ig_k]);",
            *indent(post, 4),
            "  }",
            "}",
        ]
        return "\n".join(lines) + "\n"

    def _op_lines(self, rdtype: dt.DType) -> list[str]:
        """The combining op: ``identity``, ``combine`` (reduce_expr), ``lift`` (a mapped value
        as a partial result) and ``value`` (a partial result's value), in reduce.cuh's form."""
        dev = "static __device__ __forceinline__"
        if self.identity is not None:
            return [
                "typedef _type_reduce _ig_acc;",
                "struct _IgOp {",
                "  typedef _ig_acc acc_t;",
                f"  {dev} acc_t identity() {{ return static_cast<acc_t>({self.identity}); }}",
                f"  {dev} acc_t combine(const acc_t a, const acc_t b) {{",
                f"    return static_cast<acc_t>({self.reduce_expr});",
                "  }",
                f"  {dev} acc_t lift(const _type_reduce v) {{ return v; }}",
                f"  {dev} _type_reduce value(const acc_t s) {{ return s; }}",
                "};",
            ]
        # No identity: a partial result carries whether it has a value yet.
        limit = _acc_bytes(rdtype, True)
        return [
            "struct _ig_acc { _type_reduce v; int has; };",
            f'static_assert(sizeof(_ig_acc) <= {limit}, "partial result larger than allowed");',
            "__device__ __forceinline__ _ig_acc shfl_xor(_ig_acc p, int lane_mask) {",
            "  _ig_acc q;",
            "  q.v = ignis::shfl_xor(p.v, lane_mask);",
            "  q.has = __shfl_xor_sync(ignis::full_warp_mask, p.has, lane_mask);",
            "  return q;",
            "}",
            "struct _IgOp {",
            "  typedef _ig_acc acc_t;",
            f"  {dev} acc_t identity() {{ acc_t s; s.v = _type_reduce(); s.has = 0; return s; }}",
            f"  {dev} acc_t combine(const acc_t x, const acc_t y) {{",
            "    if (!x.has) return y;",
            "    if (!y.has) return x;",
            "    const _type_reduce a = x.v, b = y.v;",
            "    acc_t s;",
            f"    s.v = static_cast<_type_reduce>({self.reduce_expr});",
            "    s.has = 1;",
            "    return s;",
            "  }",
            f"  {dev} acc_t lift(const _type_reduce v) {{",
            "    acc_t s;",
            "    s.v = v;",
            "    s.has = 1;",
            "    return s;",
            "  }",
            f"  {dev} _type_reduce value(const acc_t s) {{ return s.v; }}",
            "};",
        ]


def _acc_bytes(rdtype: dt.DType, flagged: bool) -> int:
    """Bytes one partial result takes in the split scratch (a flagged one: value + int)."""
    size = rdtype.itemsize
    return 2 * max(size, 8) if flagged else size
