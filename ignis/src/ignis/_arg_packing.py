"""Packing launch arguments into the ``kernelParams`` array of ``cuLaunchKernel``.

``cuLaunchKernel`` takes ``void** kernelParams``: entry ``i`` points at the bytes of parameter
``i``, and the driver copies as many bytes as the parameter's type has. :class:`ArgPacker` turns
Python values into those bytes, converting each value to the parameter's declared type (from
:func:`ignis._signature.parse_kernel_params`) and refusing what does not convert exactly — it
never reinterprets bits::

    packer = ArgPacker(parse_kernel_params(src, "saxpy"), "saxpy", param_sizes=[4, 8, 8, 4])
    packed = packer.pack([2.0, x, y, n])
    driver.cuLaunchKernel(f, gx, 1, 1, bx, 1, 1, 0, stream, packed.address, 0)

Accepted values per parameter kind:

* ``pointer``: an ``int`` (a raw device address), ``None`` (NULL), or an object exposing its
  device address: an ``int`` ``.ptr`` attribute (ignis buffers and arrays), the
  ``__cuda_array_interface__`` (CuPy, Numba, PyTorch), or ``data_ptr()`` (PyTorch). A NumPy
  array is refused: it lives in host memory.
* ``float`` (``float``/``double``), ``half``, ``bfloat16``: Python ``int``/``float`` and NumPy
  integer/floating scalars, rounded to nearest-even in the target type. A finite value that
  rounds to infinity is an error; ``inf`` and ``nan`` pass through. ``bool`` is refused.
* ``int``/``uint`` (any width): Python ``int`` and NumPy integer scalars, range-checked. Floats
  are refused even when integral (pass ``int(x)``), and so is ``bool``: ``True`` for an ``int``
  parameter is almost always a mistake.
* ``bool``: ``True``/``False``, NumPy ``bool_``, or the integers 0 and 1 (C flags).
* ``struct``/``unknown``: the raw bytes of the value — ``bytes``, ``bytearray``, ``memoryview``,
  a NumPy scalar or array, a ``ctypes`` object — of exactly the parameter's size.

Each :meth:`ArgPacker.pack` call returns new storage. The driver copies the parameter values
when ``cuLaunchKernel`` is called, before it returns, even though the launch itself runs
asynchronously; so a :class:`PackedArgs` only needs to live until the launch call has returned,
and reusing or dropping it afterwards is safe.
"""

from __future__ import annotations

import ctypes
import math
import struct
from collections.abc import Callable, Sequence
from typing import Any

import ml_dtypes
import numpy as np

from ._errors import LaunchError
from ._signature import Param

__all__ = ["ArgPacker", "PackedArgs"]

_POINTER_SIZE = ctypes.sizeof(ctypes.c_void_p)
_U64_MAX = 2**64 - 1

# Finite values at or beyond these magnitudes round to infinity (round to nearest even): they are
# halfway between the largest finite value and the next power of two.
_F32_OVERFLOW = 2.0**128 - 2.0**103
_F16_OVERFLOW = 65520.0
_BF16_OVERFLOW = 2.0**128 - 2.0**119

# ml_dtypes' scalars (bfloat16, the float8 types) are not np.floating subclasses.
_ML_FLOAT_TYPES = frozenset(
    getattr(ml_dtypes, name)
    for name in dir(ml_dtypes)
    if name.startswith(("bfloat16", "float8_", "float6_", "float4_"))
    and isinstance(getattr(ml_dtypes, name), type)
)

_INT_CODES = {1: "b", 2: "h", 4: "i", 8: "q"}
_UINT_CODES = {1: "B", 2: "H", 4: "I", 8: "Q"}

Converter = Callable[[Any], Any]


class PackedArgs:
    """The ``kernelParams`` array of one launch and the storage it points into.

    Attributes:
        address: the address of the ``void*`` array, as an int, for ``cuLaunchKernel``
            (0, i.e. NULL, when the kernel takes no parameters).
        sizes: the byte size of each parameter value.

    Keep it alive until the launch call returns (see the module docstring); it also holds
    references to the arguments so that objects owning device memory outlive the call.
    """

    __slots__ = ("address", "sizes", "_storage", "_args")

    def __init__(self, address: int, sizes: tuple[int, ...], storage: Any, args: Any):
        self.address = address
        self.sizes = sizes
        self._storage = storage
        self._args = args

    def __len__(self) -> int:
        return len(self.sizes)

    def param_bytes(self, index: int) -> bytes:
        """The bytes the driver will copy for parameter ``index``, read through the array."""
        if not 0 <= index < len(self.sizes):
            raise IndexError(
                f"PackedArgs.param_bytes: index {index} out of range 0..{len(self) - 1}"
            )
        slot = ctypes.c_void_p.from_address(self.address + index * _POINTER_SIZE).value or 0
        return ctypes.string_at(slot, self.sizes[index])

    def __repr__(self) -> str:
        return f"<PackedArgs {len(self)} params at {self.address:#x}>"


class _Layout:
    """One ``struct`` format writing the pointer table and then every value into one buffer.

    The table entries are ``base + offset_i``. Rather than building a list of n ints per launch,
    the whole table is computed as one integer, ``base * R + C`` with ``R = sum(2**(64 i))`` and
    ``C = sum(offset_i * 2**(64 i))``, and written as its little-endian bytes: each 64-bit word
    is then ``base + offset_i`` (no word overflows into the next, addresses being < 2**64).
    """

    __slots__ = ("offsets", "pack_into", "storage_type", "table_bytes", "_r", "_c")

    def __init__(self, codes: Sequence[str], sizes: Sequence[int]):
        n = len(sizes)
        offset = n * _POINTER_SIZE
        fmt = ["<", f"{offset}s"]
        offsets = []
        for code, size in zip(codes, sizes, strict=True):
            # Each value starts 8-byte aligned: natural alignment for every scalar type.
            pad = -offset % 8
            fmt.append("x" * pad + code)
            offset += pad
            offsets.append(offset)
            offset += size
        words = max(1, -(-offset // 8))
        self.offsets = tuple(offsets)
        self.table_bytes = n * _POINTER_SIZE
        self._r = sum(1 << (64 * i) for i in range(n))
        self._c = sum(o << (64 * i) for i, o in enumerate(offsets))
        self.pack_into = struct.Struct("".join(fmt)).pack_into
        # c_uint64 storage: 8-byte aligned, zero-initialised, writable through the buffer API.
        self.storage_type = ctypes.c_uint64 * words

    def table(self, base: int) -> bytes:
        """The ``void*`` array for storage at address ``base``, as bytes."""
        return (base * self._r + self._c).to_bytes(self.table_bytes, "little")


class ArgPacker:
    """Converts launch arguments to a kernel's parameter types; build once per kernel.

    Args:
        params: the kernel's parameters (from :func:`~ignis._signature.parse_kernel_params`),
            or ``None`` to treat every parameter as raw bytes of the driver-reported size.
        kernel_name: the kernel's name, for messages.
        param_sizes: the byte size of each parameter according to the driver
            (``cuFuncGetParamInfo``), or ``None`` where the driver cannot tell. When given, it
            must agree with ``params`` (count, and size of every parameter whose size the
            source determines) and supplies the size of ``struct``/``unknown`` parameters.

    Raises:
        LaunchError: the source and the driver disagree.

    Example::

        >>> packer = ArgPacker([Param("n", "int", "int", 4)], "fill", param_sizes=[4])
        >>> packer.pack([7]).param_bytes(0)
        b'\\x07\\x00\\x00\\x00'
    """

    def __init__(
        self,
        params: Sequence[Param] | None,
        kernel_name: str,
        param_sizes: Sequence[int] | None = None,
    ):
        self.kernel_name = kernel_name
        where = f"kernel {kernel_name!r}"
        if params is None:
            if param_sizes is None:
                raise LaunchError(
                    f"{where}: neither the parameter types nor the driver's parameter sizes "
                    "are known; arguments cannot be packed"
                )
            params = [Param(None, "unknown", "?", int(s)) for s in param_sizes]
        params = list(params)
        if param_sizes is not None:
            sizes = [int(s) for s in param_sizes]
            if len(sizes) != len(params):
                raise LaunchError(
                    f"{where}: the source declares {len(params)} parameter(s) "
                    f"({_names(params)}) but the compiled kernel has {len(sizes)} (sizes in "
                    f"bytes: {', '.join(map(str, sizes)) or 'none'}); the source does not match "
                    "the compiled code"
                )
            checked = []
            for i, (p, size) in enumerate(zip(params, sizes, strict=True)):
                if p.size is not None and p.size != size:
                    raise LaunchError(
                        f"{where}: parameter {i} ({_label(p)}) is {p.size} bytes according to "
                        f"the source but {size} bytes in the compiled kernel; the source does "
                        "not match the compiled code"
                    )
                checked.append(p if p.size is not None else _with_size(p, size))
            params = checked
        self.params: tuple[Param, ...] = tuple(params)
        self._names = _names(self.params)
        self._converters: tuple[Converter, ...] = tuple(
            _converter(p, f"launch of {kernel_name!r}: args[{i}] ({_label(p)})")
            for i, p in enumerate(self.params)
        )
        self._count = len(self.params)
        self._codes = [_code(p) for p in self.params]
        known = all(p.size is not None for p in self.params)
        self._layout = _Layout(self._codes, [p.size for p in self.params]) if known else None
        self._sizes = tuple(p.size for p in self.params) if known else None

    def pack(self, args: Sequence[Any]) -> PackedArgs:
        """Convert ``args`` (one value per parameter) and lay out the ``kernelParams`` array.

        Raises:
            LaunchError: wrong number of arguments, or a value that does not convert to its
                parameter's type; the message names the kernel, the argument index and name,
                what was given and what was expected.
        """
        if type(args) is not list and type(args) is not tuple:
            args = self._as_sequence(args)
        if len(args) != self._count:
            raise LaunchError(
                f"launch of {self.kernel_name!r}: expected {self._count} argument(s) "
                f"({self._names}), got {len(args)}"
            )
        if not self._count:
            return PackedArgs(0, (), None, args)
        values = [convert(a) for convert, a in zip(self._converters, args, strict=True)]
        layout = self._layout
        sizes = self._sizes
        if layout is None:
            layout, sizes = self._dynamic_layout(values)
        storage = layout.storage_type()
        base = ctypes.addressof(storage)
        try:
            layout.pack_into(storage, 0, layout.table(base), *values)
        except (struct.error, OverflowError) as exc:  # pragma: no cover - converters check first
            raise LaunchError(
                f"launch of {self.kernel_name!r}: cannot pack arguments: {exc}"
            ) from exc
        return PackedArgs(base, sizes, storage, args)

    def _as_sequence(self, args: Any) -> Sequence[Any]:
        if isinstance(args, (str, bytes)) or not hasattr(args, "__iter__"):
            raise LaunchError(
                f"launch of {self.kernel_name!r}: args must be a list or tuple with one value per "
                f"parameter ({self._names}), got {type(args).__name__}"
            )
        return tuple(args)

    def _dynamic_layout(self, values: list[Any]) -> tuple[_Layout, tuple[int, ...]]:
        """Layout for parameters whose size is only known from the value given (no driver sizes)."""
        sizes = tuple(
            p.size if p.size is not None else len(v)
            for p, v in zip(self.params, values, strict=True)
        )
        codes = [c if c else f"{s}s" for c, s in zip(self._codes, sizes, strict=True)]
        return _Layout(codes, sizes), sizes


def _names(params: Sequence[Param]) -> str:
    return ", ".join(p.name or f"<{i}>" for i, p in enumerate(params)) or "none"


def _label(p: Param) -> str:
    return f"{p.name}: {p.ctype}" if p.name else p.ctype


def _with_size(p: Param, size: int) -> Param:
    return Param(p.name, p.kind, p.ctype, size)


def _code(p: Param) -> str:
    """The ``struct`` code of a parameter's value ('' when its size is not known yet)."""
    if p.kind == "pointer":
        return "Q"
    if p.kind == "float":
        return {4: "f", 8: "d"}[p.size] if p.size in (4, 8) else f"{p.size}s"
    if p.kind == "half":
        return "e"
    if p.kind == "bfloat16":
        return "H"
    if p.kind == "bool":
        return "?"
    if p.kind in ("int", "uint") and p.size in _INT_CODES:
        return (_INT_CODES if p.kind == "int" else _UINT_CODES)[p.size]
    return f"{p.size}s" if p.size is not None else ""


def _converter(p: Param, label: str) -> Converter:
    kind, size = p.kind, p.size
    if kind == "pointer":
        return _pointer_converter(label)
    if kind == "float" and size in (4, 8):
        return _float_converter(label, p.ctype, _F32_OVERFLOW if size == 4 else None, None)
    if kind == "half":
        return _float_converter(label, p.ctype, _F16_OVERFLOW, None)
    if kind == "bfloat16":
        return _float_converter(label, p.ctype, _BF16_OVERFLOW, _bfloat16_bits)
    if kind == "bool":
        return _bool_converter(label)
    if kind in ("int", "uint") and size is not None:
        return _int_converter(label, p.ctype, kind == "int", size)
    return _bytes_converter(label, p.ctype, size)


def _describe(value: Any) -> str:
    # str() for NumPy scalars: "float32 3.0" reads better than "float32 np.float32(3.0)".
    text = str(value) if isinstance(value, np.generic) else repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}"


# --- pointers ---------------------------------------------------------------------------------


def _pointer_converter(label: str) -> Converter:
    def convert(value: Any) -> int:
        if type(value) is int and 0 <= value <= _U64_MAX:
            return value
        # ignis buffers and arrays: a non-zero int .ptr (0 may mean closed: checked below)
        ptr = getattr(value, "ptr", None)
        if type(ptr) is int and 0 < ptr <= _U64_MAX:
            return ptr
        return _pointer_slow(value, label)

    return convert


def _pointer_slow(value: Any, label: str) -> int:
    expected = (
        "expects a device pointer: an object with an int .ptr (ignis buffers and arrays), "
        "__cuda_array_interface__ or data_ptr(), an int address, or None"
    )
    if value is None:
        return 0
    if isinstance(value, (bool, np.bool_)):
        raise LaunchError(f"{label} {expected}; got {_describe(value)}")
    if isinstance(value, (int, np.integer)):
        address = int(value)
        if not 0 <= address <= _U64_MAX:
            raise LaunchError(f"{label}: address {address} is not a valid 64-bit pointer")
        return address
    if isinstance(value, np.ndarray):
        raise LaunchError(
            f"{label} {expected}; got a NumPy array, which is in host memory: copy it to device "
            "memory first"
        )
    ptr = getattr(value, "ptr", None)
    if isinstance(ptr, (int, np.integer)) and not isinstance(ptr, (bool, np.bool_)):
        if getattr(value, "closed", False) is True:
            raise LaunchError(f"{label}: {type(value).__name__} is closed; its memory was freed")
        return _pointer_slow(int(ptr), label)
    interface = getattr(value, "__cuda_array_interface__", None)
    if isinstance(interface, dict) and "data" in interface:
        return _pointer_slow(int(interface["data"][0]), label)
    data_ptr = getattr(value, "data_ptr", None)
    if callable(data_ptr):
        if getattr(value, "is_cuda", True) is False:
            raise LaunchError(
                f"{label} {expected}; got {type(value).__name__} in host memory "
                f"(device {getattr(value, 'device', '?')}): move it to the GPU first"
            )
        return _pointer_slow(int(data_ptr()), label)
    hint = "; pass int(x) for a raw address" if isinstance(value, (float, np.floating)) else ""
    raise LaunchError(f"{label} {expected}; got {_describe(value)}{hint}")


# --- floating point ---------------------------------------------------------------------------


def _float_converter(
    label: str, ctype: str, overflow: float | None, encode: Callable[[float], int] | None
) -> Converter:
    def slow(value: Any) -> float:
        if isinstance(value, (bool, np.bool_)):
            raise LaunchError(
                f"{label} expects a real number for {ctype}, got {_describe(value)}; "
                "pass float(x) if you mean 0.0/1.0"
            )
        if isinstance(value, (int, np.integer)):
            try:
                return float(int(value))
            except OverflowError:
                raise LaunchError(
                    f"{label}: {int(value)} is too large for {ctype} (it overflows to infinity)"
                ) from None
        if isinstance(value, (float, np.floating)) or type(value) in _ML_FLOAT_TYPES:
            return float(value)  # exact: every narrower float is a double
        raise LaunchError(
            f"{label} expects a real number for {ctype} (a Python int or float, or a NumPy "
            f"integer or floating scalar), got {_describe(value)}"
        )

    def overflow_error(x: float) -> LaunchError:
        return LaunchError(
            f"{label}: {x!r} is out of range for {ctype} (it would round to infinity)"
        )

    if overflow is None:  # double: every float fits

        def convert(value: Any) -> float:
            if type(value) is float:
                return value
            return slow(value)

        return convert

    limit = overflow
    if encode is None:

        def convert(value: Any) -> float:
            x = value if type(value) is float else slow(value)
            if -limit < x < limit or x != x or math.isinf(x):
                return x
            raise overflow_error(x)

        return convert

    def convert_encoded(value: Any) -> int:
        x = value if type(value) is float else slow(value)
        if -limit < x < limit or x != x or math.isinf(x):
            return encode(x)
        raise overflow_error(x)

    return convert_encoded


def _bfloat16_bits(x: float) -> int:
    """bfloat16 bits of ``x``, correctly rounded (nearest, ties to even) from the float64 value.

    Rounding once from float64 matters: going through float32 first rounds twice and can land
    on the wrong side of a tie.
    """
    sign = 0x8000 if math.copysign(1.0, x) < 0 else 0
    if x != x:
        return sign | 0x7FC0
    a = abs(x)
    if math.isinf(a):
        return sign | 0x7F80
    if a == 0.0:
        return sign
    _, e = math.frexp(a)  # a = m * 2**e with 0.5 <= m < 1: the leading bit is 2**(e-1)
    # bfloat16 keeps 8 significant bits; below 2**-126 its step is fixed at 2**-133.
    step = max(e - 8, -133)
    rounded = math.ldexp(round(math.ldexp(a, -step)), step)  # round(): ties to even
    bits = struct.unpack("<I", struct.pack("<f", rounded))[0]  # exact: rounded is a bfloat16
    return sign | (bits >> 16)


# --- integers ---------------------------------------------------------------------------------


def _int_converter(label: str, ctype: str, signed: bool, size: int) -> Converter:
    bits = 8 * size
    lo, hi = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
    kind = f"{bits}-bit {'signed' if signed else 'unsigned'}"
    to_bytes = size not in _INT_CODES  # e.g. __int128: packed as raw little-endian bytes

    def slow(value: Any) -> int:
        if isinstance(value, (bool, np.bool_)):
            raise LaunchError(
                f"{label} expects an integer for {ctype}, got {_describe(value)}; pass int(x) "
                "if you mean 0/1"
            )
        if isinstance(value, (int, np.integer)):
            return int(value)
        if isinstance(value, (float, np.floating)):
            raise LaunchError(
                f"{label} expects an integer for {ctype}, got {_describe(value)}; floats are "
                "not converted implicitly, pass int(x)"
            )
        raise LaunchError(
            f"{label} expects an integer for {ctype} (a Python int or a NumPy integer scalar), "
            f"got {_describe(value)}"
        )

    def convert(value: Any) -> Any:
        v = value if type(value) is int else slow(value)
        if lo <= v <= hi:
            return v.to_bytes(size, "little", signed=signed) if to_bytes else v
        raise LaunchError(f"{label}: {v} is out of range for {ctype} ({kind}: {lo}..{hi})")

    return convert


def _bool_converter(label: str) -> Converter:
    def convert(value: Any) -> bool:
        if value is True or value is False:
            return value
        if isinstance(value, np.bool_):
            return bool(value)
        if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
            if value == 0 or value == 1:
                return bool(value)
            raise LaunchError(f"{label} expects a bool (or 0 or 1), got {_describe(value)}")
        raise LaunchError(
            f"{label} expects a bool (True/False, a NumPy bool, or 0/1), got {_describe(value)}"
        )

    return convert


# --- raw bytes --------------------------------------------------------------------------------


def _bytes_converter(label: str, ctype: str, size: int | None) -> Converter:
    expected = (
        "its raw bytes (bytes, bytearray, memoryview, a NumPy scalar or array, or a ctypes object)"
    )
    what = f"{size} bytes" if size is not None else "bytes"

    def convert(value: Any) -> bytes:
        # Python scalars have no fixed byte layout (np.float64 subclasses float but has one).
        plain = isinstance(value, (str, int, float)) and not isinstance(value, np.generic)
        if plain or value is None:
            hint = (
                f"; wrap the value in the matching NumPy scalar (e.g. np.int32(x)) or build "
                f"the {ctype} with ctypes or NumPy"
                if isinstance(value, (int, float))
                else ""
            )
            raise LaunchError(
                f"{label}: ignis cannot convert to {ctype}; it expects {expected} of {what}, got "
                f"{_describe(value)}{hint}"
            )
        try:
            view = memoryview(value)
        except TypeError:
            raise LaunchError(
                f"{label}: ignis cannot convert to {ctype}; it expects {expected} of {what}, got "
                f"{_describe(value)}"
            ) from None
        with view:
            if size is not None and view.nbytes != size:
                raise LaunchError(
                    f"{label}: expects {size} bytes for {ctype}, got {view.nbytes} bytes "
                    f"({type(value).__name__})"
                )
            return view.tobytes()

    return convert
