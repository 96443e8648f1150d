"""The code half of :func:`ignis.fuse`: a trace becomes one ElementwiseKernel or ReductionKernel.

The traced ops become the body of one ``__device__`` function placed in the kernel's preamble;
the kernel's operation (or map expression) calls it. Each op is the functor the CUDA backend
runs for it (``ignis::ew::<functor>`` of ``cuda_src/elementwise.cuh``, from the op table),
applied in the work type of the op's compute dtype (float for float16/bfloat16, as the backend)
and rounded to the op's result dtype, so that a fused chain gives what the chain of unfused ops
gives, without its intermediate arrays. Launching, broadcasting, strides, layouts and the
compile caches are :class:`~ignis.ElementwiseKernel`'s and :class:`~ignis.ReductionKernel`'s.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import Any

from . import _dtypes as dt
from ._array._op_table import ELEMENTWISE
from ._fuse_trace import Node, Trace

__all__ = ["Spec", "build"]

_WEAK_C = {bool: "bool", int: "long long", float: "double"}
_FN = "_ig_fused"


def _ctype(d: dt.DType) -> str:
    from ._array._cuda_backend._kernels import CTYPE

    return CTYPE[d]


def _work(d: dt.DType) -> str:
    """The C type an op computing in ``d`` works in (the CUDA backend's rule)."""
    return "float" if d in (dt.float16, dt.bfloat16) else _ctype(d)


def _ctype_of(n: Node) -> str:
    return _WEAK_C[n.weak] if n.weak is not None else _ctype(n.dtype)


def _literal(value: Any, ctype: str) -> str:
    """``value`` as a C++ expression of type ``ctype`` (exact: floats through their bits)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return f"(({ctype}){value}LL)" if value >= -(2**63) and value < 2**63 else (
            f"(({ctype}){value}ULL)")  # fmt: skip
    value = float(value)
    if math.isfinite(value):
        return f"(({ctype}){value!r})"
    bits = struct.unpack("<q", struct.pack("<d", value))[0]
    return f"(({ctype})__longlong_as_double({bits}LL))"


@dataclass
class Spec:
    """What a fused kernel takes and gives: ``inputs`` are node indices (inputs and scalars, in
    argument order), ``outputs`` node indices; ``grad`` the gradient's node (backward kernels)."""

    inputs: list[int]
    outputs: list[int]
    out_dtypes: list[dt.DType]
    reduce: Node | None = None  # the trailing reduction (then one output: its input's value)


def _functor(n: Node) -> str:
    entry = ELEMENTWISE[n.op]
    f = entry.functor
    if not isinstance(f, str):
        (key,) = entry.params
        f = f[n.params.get(key, entry.params[key][0])]
    return f"ignis::ew::{f}"


def body(trace: Trace, spec: Spec, names: dict[int, str]) -> tuple[list[str], dict[int, str]]:
    """The statements computing ``spec.outputs`` (``names``: the parameters' C names), and the
    C expression of each value they use."""
    nodes = trace.nodes
    live: set[int] = set()
    stack = list(spec.outputs)
    while stack:
        i = stack.pop()
        if i not in live:
            live.add(i)
            stack.extend(nodes[i].args)
    lines = []
    ref = dict(names)
    for i in sorted(live):
        n = nodes[i]
        if i in ref:
            continue
        if n.kind == "const":
            ref[i] = _literal(n.value, _ctype_of(n))
            continue
        if n.kind in ("input", "scalar"):
            raise AssertionError(f"fuse: parameter node {i} has no name")
        c = _ctype_of(n)
        if n.kind == "astype":
            expr = f"ignis::ew::cast<{c}>({ref[n.args[0]]})"
        elif n.kind == "where":
            w = _WEAK_C[n.weak] if n.weak is not None else _work(n.compute)
            cnd, a, b = (ref[j] for j in n.args)
            expr = (
                f"ignis::ew::cast<{c}>(ignis::ew::cast<bool>({cnd}) ? ignis::ew::cast<{w}>({a})"
                f" : ignis::ew::cast<{w}>({b}))"
            )
        elif n.kind == "op":
            if n.weak is not None:  # Python numbers: in double or 64-bit integers
                kinds = [nodes[j].weak for j in n.args]
                w = "double" if float in kinds or n.weak is float else (
                    "long long" if int in kinds else "bool")  # fmt: skip
            else:
                w = _work(n.compute)
            operands = ", ".join(f"ignis::ew::cast<{w}>({ref[j]})" for j in n.args)
            expr = f"ignis::ew::cast<{c}>({_functor(n)}::apply({operands}))"
        else:
            raise AssertionError(f"fuse: node kind {n.kind} inside a kernel body")
        lines.append(f"  const {c} _v{i} = {expr};")
        ref[i] = f"_v{i}"
    return lines, ref


def device_function(trace: Trace, spec: Spec, ret: bool) -> tuple[str, list[str]]:
    """The preamble's ``__device__`` function, and its parameter names in order.

    ``ret``: the single output is returned (a reduction's map); else outputs are references.
    """
    nodes = trace.nodes
    names = {i: f"in{k}" for k, i in enumerate(spec.inputs)}
    params = [f"const {_ctype_of(nodes[i])} {names[i]}" for i in spec.inputs]
    lines, ref = body(trace, spec, names)
    if ret:
        (o,) = spec.outputs
        c = _ctype(spec.out_dtypes[0])
        lines.append(f"  return ignis::ew::cast<{c}>({ref[o]});")
        head = f"__device__ __forceinline__ {c} {_FN}({', '.join(params)}) {{"
    else:
        for k, (o, d) in enumerate(zip(spec.outputs, spec.out_dtypes, strict=True)):
            params.append(f"{_ctype(d)}& out{k}")
            lines.append(f"  out{k} = ignis::ew::cast<{_ctype(d)}>({ref[o]});")
        head = f"__device__ __forceinline__ void {_FN}({', '.join(params)}) {{"
    src = "\n".join(['#include "elementwise.cuh"', head, *lines, "}", ""])
    return src, [names[i] for i in spec.inputs]


_WEAK_DTYPE = {bool: "bool", int: "int64", float: "float64"}


def _param_decl(n: Node, name: str) -> str:
    return f"{_WEAK_DTYPE[n.weak] if n.weak is not None else n.dtype.name} {name}"


def build(trace: Trace, spec: Spec, name: str) -> Any:
    """The kernel object of ``spec``: an ElementwiseKernel, or for a trailing reduction a
    ReductionKernel whose map is the element-wise part (``_fuse_count``: the reduced count,
    passed for a mean)."""
    nodes = trace.nodes
    if spec.reduce is None:
        pre, args = device_function(trace, spec, ret=False)
        in_params = ", ".join(_param_decl(nodes[i], a) for i, a in zip(spec.inputs, args,
                                                                      strict=True))  # fmt: skip
        outs = [f"{d.name} out{k}" for k, d in enumerate(spec.out_dtypes)]
        call = f"{_FN}({', '.join(args + [f'out{k}' for k in range(len(outs))])})"
        from ._elementwise_kernel import ElementwiseKernel

        return ElementwiseKernel(in_params, ", ".join(outs), call, name, preamble=pre)
    r = spec.reduce
    h = nodes[r.args[0]]
    inner = Spec(spec.inputs, spec.outputs, [h.dtype])
    pre, args = device_function(trace, inner, ret=True)
    decls = [_param_decl(nodes[i], a) for i, a in zip(spec.inputs, args, strict=True)]
    acc = r.compute
    if r.op == "mean":
        decls.append("float64 _fuse_count")
    mapped = f"ignis::ew::cast<_type_reduce>({_FN}({', '.join(args)}))"
    combine = {
        "sum": "a + b",
        "mean": "a + b",
        "max": "ignis::nan_max(a, b)",
        "min": "ignis::nan_min(a, b)",
    }[r.op]
    c_out = _ctype(r.dtype)
    if r.op == "mean":
        post = f"out0 = ignis::ew::cast<{c_out}>(a / (_type_reduce)_fuse_count)"
    else:
        post = f"out0 = ignis::ew::cast<{c_out}>(a)"
    identity = "0" if r.op in ("sum", "mean") else None
    from ._reduction_kernel import ReductionKernel

    return ReductionKernel(
        ", ".join(decls),
        f"{r.dtype.name} out0",
        mapped,
        combine,
        post,
        identity,
        name,
        reduce_type=acc.name,
        preamble=pre,
    )
