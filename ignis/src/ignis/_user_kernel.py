"""What the kernels written as C++ expressions share (``ElementwiseKernel``, ``ReductionKernel``).

CuPy's parameter grammar (``[raw] TYPE NAME``, comma separated; ``TYPE`` a dtype name, one of
``float``/``double``/``int``, or a type placeholder such as ``T``), the binding of placeholders
to the dtypes of the arguments, the checks every call makes on its arguments (arrays of one CUDA
device, or scalars; arrays of other libraries imported without a copy) and the merging of
dimensions that every array steps through evenly.

``label`` is how messages name the kernel, e.g. ``"ElementwiseKernel 'squared_diff'"``.

Example::

    >>> [p.name for p in parse_params("T x, raw float32 t", "k", "in_params", False)]
    ['x', 't']
"""

from __future__ import annotations

import keyword
import re
from typing import Any, NamedTuple

import numpy as np

from . import _dtypes as dt
from ._errors import DeviceMismatchError, DTypeError, IgnisError, ShapeError

__all__ = [
    "Param",
    "declare",
    "check_code",
    "parse_params",
    "check_name",
    "is_scalar",
    "scalar_dtype",
    "host_scalar",
    "merge_dims",
    "bind_types",
    "import_arrays",
]

_PARAM_RE = re.compile(r"^(?:(raw)\s+)?([A-Za-z_]\w*)\s+([A-Za-z_]\w*)$")
_C_ALIASES = {"float": dt.float32, "double": dt.float64, "int": dt.int32}


class Param(NamedTuple):
    """One declared parameter: ``dtype`` None for a placeholder (named by ``placeholder``)."""

    name: str
    dtype: dt.DType | None
    placeholder: str | None
    raw: bool
    is_output: bool


def check_name(kind: str, name: Any) -> None:
    """A kernel name must be a C identifier (it names the compiled function)."""
    if not isinstance(name, str) or not re.match(r"^[A-Za-z_]\w*$", name):
        raise ValueError(f"{kind}: name must be a C identifier, got {name!r}")


def type_of(type_name: str) -> dt.DType | None:
    """The dtype a TYPE of the grammar names; None for a placeholder."""
    dtype = _C_ALIASES.get(type_name)
    if dtype is None:
        try:
            dtype = dt.as_dtype(type_name)
        except (DTypeError, TypeError, ValueError):
            dtype = None
    return dtype


def parse_params(
    spec: Any,
    label: str,
    what: str,
    is_output: bool,
    reserved: frozenset[str] | set[str] = frozenset(),
) -> list[Param]:
    """The parameters ``spec`` declares (``what``: ``in_params``/``out_params``, for
    messages); ``reserved`` names are the kernel's own and refused."""
    if not isinstance(spec, str):
        raise TypeError(f"{label}: {what} must be a string, got {type(spec).__name__}")
    params = []
    for part in [p.strip() for p in spec.split(",")] if spec.strip() else []:
        m = _PARAM_RE.match(part)
        if m is None:
            raise ValueError(
                f"{label}: cannot parse the parameter {part!r} of {what} (expected "
                "'[raw] TYPE NAME', e.g. 'float32 x' or 'raw T y')"
            )
        raw, type_name, name = m.groups()
        if name in reserved or keyword.iskeyword(name):
            raise ValueError(
                f"{label}: the parameter name {name!r} of {what} is reserved "
                f"({', '.join(sorted(reserved))} are the kernel's own)"
            )
        dtype = type_of(type_name)
        params.append(Param(name, dtype, None if dtype else type_name, bool(raw), is_output))
    return params


def check_unique(label: str, params: list[Param]) -> None:
    names = [p.name for p in params]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise ValueError(f"{label}: parameter {sorted(dup)[0]!r} is declared twice")


def declare(
    kind: str,
    name: Any,
    in_params: Any,
    out_params: Any,
    reserved: frozenset[str],
    needs_input: bool = False,
) -> tuple[str, list[Param], list[Param]]:
    """The checks every user kernel's constructor makes: ``name`` a C identifier, both parameter
    strings parsed, at least one output (and one input where ``needs_input``), no name twice.
    Returns the label errors start with (``"ElementwiseKernel 'k'"``) and the parameters."""
    check_name(kind, name)
    label = f"{kind} {name!r}"
    ins = parse_params(in_params, label, "in_params", False, reserved)
    outs = parse_params(out_params, label, "out_params", True, reserved)
    if needs_input and not ins:
        raise ValueError(f"{label}: in_params declares no input")
    if not outs:
        raise ValueError(f"{label}: out_params declares no output")
    check_unique(label, ins + outs)
    return label, ins, outs


def check_code(label: str, what: str, code: Any) -> str:
    """``code`` (a piece of C++ a user kernel is built from) as a non-empty string."""
    if not isinstance(code, str) or not code.strip():
        raise ValueError(f"{label}: {what} must be a non-empty string, got {code!r}")
    return code


def scalar_dtype(v: Any) -> dt.DType:
    """The dtype a scalar argument binds a placeholder to (NumPy's for Python numbers)."""
    if isinstance(v, (bool, np.bool_)):
        return dt.bool_
    if isinstance(v, np.generic):
        return dt.as_dtype(v.dtype)
    if isinstance(v, int):
        return dt.int64
    if isinstance(v, float):
        return dt.float64
    if isinstance(v, complex):
        return dt.complex128
    raise TypeError(type(v).__name__)


def is_scalar(v: Any) -> bool:
    return isinstance(v, (bool, int, float, complex, np.generic))


def host_scalar(v: Any, dtype: dt.DType) -> Any:
    """A scalar argument as the launch packs it for its parameter's type."""
    if dtype.kind == "c":
        return complex(v)
    return dtype.numpy.type(v) if dtype.kind in "biuf" else v


def merge_dims(
    shape: tuple[int, ...], strides: list[tuple[int, ...]]
) -> tuple[tuple[int, ...], list[tuple[int, ...]]]:
    """Drop size-1 dimensions and merge neighbours that every array steps through evenly
    (CuPy's ``reduce_dims``): the same elements in fewer dimensions.

    Example: ``merge_dims((2, 3), [(3, 1)]) == ((6,), [(1,)])``.
    """
    dims = [(n, [s[d] for s in strides]) for d, n in enumerate(shape) if n != 1]
    if not dims:
        return (), [() for _ in strides]
    merged = [dims[0]]
    for n, st in dims[1:]:
        pn, pst = merged[-1]
        if all(a == b * n for a, b in zip(pst, st, strict=True)):
            merged[-1] = (pn * n, st)
        else:
            merged.append((n, st))
    out_shape = tuple(n for n, _ in merged)
    out_strides = [tuple(m[1][k] for m in merged) for k in range(len(strides))]
    return out_shape, out_strides


def import_arrays(label: str, params: list[Param], values: list[Any]) -> Any:
    """Check the arguments in place: arrays of other libraries become NvArrays (no copy);
    every array must be on one CUDA device; outputs and raw parameters must be arrays.
    Returns that device (None when no array was given)."""
    from ._array._creation import asarray
    from ._array.array import NvArray

    for k, (p, v) in enumerate(zip(params, values, strict=True)):
        if v is None or isinstance(v, NvArray) or is_scalar(v):
            continue
        if hasattr(v, "__cuda_array_interface__") or hasattr(v, "__dlpack__"):
            values[k] = asarray(v)
        else:
            raise TypeError(
                f"{label}: argument {p.name!r} must be an array or a scalar, got {type(v).__name__}"
            )
    kind = label.split(" ", 1)[0]
    article = "an" if kind[:1] in "AEIOU" else "a"
    device = None
    for p, v in zip(params, values, strict=True):
        if isinstance(v, NvArray):
            if v.device.type != "cuda":
                raise IgnisError(
                    f"{label}: argument {p.name!r} is on {v.device}; {article} {kind} is CUDA C++ "
                    "and needs arrays on a CUDA device (move them with .to('cuda:0'))"
                )
            if device is None:
                device = v.device
            elif v.device != device:
                raise DeviceMismatchError(
                    f"{label}: arguments are on {device} and {v.device} (argument {p.name!r}); "
                    "put them on one device"
                )
        elif p.is_output and v is not None:
            raise TypeError(f"{label}: output {p.name!r} must be an array, got {type(v).__name__}")
        elif p.raw and v is not None:
            raise TypeError(
                f"{label}: raw parameter {p.name!r} needs an array, got {type(v).__name__}"
            )
    return device


def argument_values(
    label: str, in_params: list[Param], out_params: list[Param], args: tuple[Any, ...]
) -> tuple[list[Param], list[Any]]:
    """``(parameters, the call's value of each)``: the inputs, then the outputs, None for an
    output not given."""
    n_in, n_out = len(in_params), len(out_params)
    if len(args) not in (n_in, n_in + n_out):
        raise TypeError(
            f"{label}: takes {n_in} inputs (and optionally its {n_out} outputs), got "
            f"{len(args)} arguments"
        )
    return in_params + out_params, list(args) + [None] * (n_in + n_out - len(args))


def broadcast_inputs(label: str, params: list[Param], values: list[Any]) -> tuple[int, ...] | None:
    """The broadcast shape of the non-raw input arrays (None when there is none)."""
    from ._array._layout import broadcast_shapes
    from ._array.array import NvArray

    shapes = [
        v.shape
        for p, v in zip(params, values, strict=True)
        if isinstance(v, NvArray) and not p.raw and not p.is_output
    ]
    if not shapes:
        return None
    try:
        return broadcast_shapes(*shapes)
    except ShapeError:
        raise ShapeError(f"{label}: the input shapes {shapes} do not broadcast together") from None


def complete_arguments(
    label: str,
    params: list[Param],
    values: list[Any],
    types: dict[str, dt.DType],
    out_shape: tuple[int, ...],
    device: Any,
    *,
    shape_note: str,
    allocate_raw_outputs: bool,
) -> None:
    """Check the given non-raw outputs against ``out_shape`` (``shape_note`` says where it comes
    from) and their dtypes against their parameters'; allocate the outputs not given (of
    ``out_shape``; a raw one only with ``allocate_raw_outputs``, else a TypeError); convert
    input arrays of another dtype than their parameter's. In place, in ``values``."""
    from ._array._creation import empty
    from ._array.array import NvArray

    for p, v in zip(params, values, strict=True):
        if p.is_output and isinstance(v, NvArray) and not p.raw and v.shape != out_shape:
            raise ShapeError(
                f"{label}: output {p.name!r} has shape {v.shape}, expected {out_shape} "
                f"({shape_note})"
            )
    for k, (p, v) in enumerate(zip(params, values, strict=True)):
        want = types[p.name]
        if v is None:
            if p.raw and not allocate_raw_outputs:
                raise TypeError(f"{label}: raw output {p.name!r} must be given")
            values[k] = empty(out_shape, dtype=want, device=device)
        elif isinstance(v, NvArray) and v.dtype is not want:
            if p.is_output:
                raise DTypeError(
                    f"{label}: output {p.name!r} has dtype {v.dtype.name}, expected {want.name}"
                )
            values[k] = v.astype(want)


def default_cuda_device(label: str) -> Any:
    """The default device, which must be a CUDA one (a call with no array argument)."""
    from ._array._device import get_default_device

    device = get_default_device()
    if device.type != "cuda":
        raise IgnisError(f"{label}: needs a CUDA device, and the default device is {device}")
    return device


def bind_types(
    label: str, params: list[Param], values: list[Any], extra: dict[str, dt.DType] | None = None
) -> tuple[dict[str, dt.DType], dict[str, dt.DType]]:
    """``(dtype of each parameter, dtype of each placeholder)``: declared, or the placeholder's,
    bound by the arrays given for it (then by scalars; ``extra`` binds what neither binds); an
    unbound placeholder is an error."""
    from ._array.array import NvArray

    bound: dict[str, dt.DType] = {}
    for p, v in zip(params, values, strict=True):
        if p.placeholder is None or not isinstance(v, NvArray):
            continue
        have = bound.get(p.placeholder)
        if have is None:
            bound[p.placeholder] = v.dtype
        elif have is not v.dtype:
            raise DTypeError(
                f"{label}: type placeholder {p.placeholder} is {have.name} from an earlier "
                f"argument but {v.dtype.name} for {p.name!r}"
            )
    for p, v in zip(params, values, strict=True):
        if p.placeholder is not None and p.placeholder not in bound and is_scalar(v):
            bound[p.placeholder] = scalar_dtype(v)
    for name, dtype in (extra or {}).items():
        bound.setdefault(name, dtype)
    types = {}
    for p in params:
        if p.dtype is not None:
            types[p.name] = p.dtype
        elif p.placeholder in bound:
            types[p.name] = bound[p.placeholder]
        else:
            raise DTypeError(
                f"{label}: cannot resolve the type placeholder {p.placeholder} of {p.name!r}: "
                "no argument gives it (pass an array for it or for another parameter of that "
                "type)"
            )
    return types, bound


RAW_STRUCTS = (
    "template <typename V> struct IgnisRaw {",
    "  V* p; long long n;",
    "  __device__ __forceinline__ V& operator[](long long k) const { return p[k]; }",
    "  __device__ __forceinline__ long long size() const { return n; }",
    "};",
    "struct IgnisIndex { long long n;",
    "  __device__ __forceinline__ long long size() const { return n; } };",
)
"""The C++ of ``raw`` parameters (``x[k]``, ``x.size()``) and of ``_ind.size()``."""
