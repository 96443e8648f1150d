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

Two ways to get the array. :meth:`ArgPacker.pack` returns a :class:`PackedArgs` with storage of
its own. The launch path uses :meth:`ArgPacker.acquire` and :meth:`ArgPacker.release` instead:
the driver copies the parameter values while ``cuLaunchKernel`` runs (the launch itself is
asynchronous, its arguments are not), so once the call has returned the storage can be reused.
Each packer keeps a small pool of storage blocks whose pointer tables are written once; a launch
takes a block from the pool, writes only the values (one precompiled ``struct`` call), launches
and gives the block back. Two threads, or a launch nested inside another (a ``data_ptr()`` that
launches, a finalizer run by the garbage collector), each hold a different block, so arguments
never mix.

The conversion code for one signature is generated once per packer (see :func:`_pack_lines`;
:meth:`ArgPacker.pack_code` hands it to callers that generate their own launch path): exact-type
fast paths for the values a launch usually sees (an ``int`` ``.ptr`` or an ``int`` address for
pointers, ``float`` for floating parameters, ``int`` for integers), each falling back to the
full converter for everything else. A value takes the fast path only when the converter would
give exactly the same bytes.
"""

from __future__ import annotations

import ctypes
import math
import struct
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ._codegen import build_function
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


def _is_ml_float(value: Any) -> bool:
    """True for an ml_dtypes float scalar (bfloat16, the float8 types): not np.floating subclasses.

    Such a scalar exists only once its user imported ml_dtypes; ignis does not import it here
    (see :class:`ignis.DType` on the import cost).
    """
    t = type(value)
    return t.__module__ == "ml_dtypes" and t.__name__.startswith(
        ("bfloat16", "float8_", "float6_", "float4_")
    )


# NumPy's scalar types, for exact-type checks ahead of the isinstance() chains.
_NUMPY_INTS = frozenset(np.dtype(c).type for c in np.typecodes["AllInteger"])
_NUMPY_FLOATS = frozenset(np.dtype(c).type for c in np.typecodes["Float"])

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
    """Where each value lives in one 8-byte-aligned block: the ``void*`` table, then the values.

    Each value starts 8-byte aligned (natural alignment for every scalar type). The table only
    depends on the block's address, so it is written once per block (:meth:`new_block`); a
    launch then writes the values alone, with :attr:`pack_values` at offset :attr:`table_bytes`.
    """

    __slots__ = ("offsets", "table_bytes", "words", "pack_values")

    def __init__(self, codes: Sequence[str], sizes: Sequence[int]):
        self.table_bytes = offset = len(sizes) * _POINTER_SIZE
        fmt = ["<"]
        offsets = []
        for code, size in zip(codes, sizes, strict=True):
            pad = -offset % 8
            fmt.append("x" * pad + code)
            offset += pad
            offsets.append(offset)
            offset += size
        self.offsets = tuple(offsets)
        self.words = max(1, -(-offset // 8))
        # Offsets in the format are relative to table_bytes, a multiple of 8: the pads still align.
        self.pack_values = struct.Struct("".join(fmt)).pack_into

    def new_block(self) -> tuple[Any, int]:
        """A zeroed block with its pointer table filled in: ``(storage, address)``."""
        # c_uint64 storage: 8-byte aligned, zero-initialised, writable through the buffer API.
        storage = (ctypes.c_uint64 * self.words)()
        base = ctypes.addressof(storage)
        for i, offset in enumerate(self.offsets):
            storage[i] = base + offset
        return storage, base


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
        self._pool: list[tuple[Any, int]] = []
        if self._layout is None:
            self.acquire = self._acquire_dynamic
            self.release = _keep
            self.source = ""
        elif not self._count:
            self.acquire = self._acquire_nothing
            self.release = _keep
            self.source = ""
        else:
            self.release = self._pool.append
            self._pool.append(self._layout.new_block())
            body, names = self.pack_code()
            self.source, self.acquire = build_function(
                "acquire",
                "args",
                [*body, "return packed"],
                names,
                f"<ignis args of {kernel_name!r}>",
            )

    acquire: Callable[[Sequence[Any]], tuple[Any, int]]
    """``acquire(args) -> (storage, address)``: convert ``args`` and write them into a block.

    ``address`` is the ``kernelParams`` array for the driver (0 when the kernel takes no
    parameters). The block belongs to the caller until it hands it to :attr:`release`, which
    it may do as soon as the launch call has returned; a block that is never released is
    simply freed. Raises :class:`LaunchError` like :meth:`pack`.

    Example::

        >>> block = packer.acquire([x, n])
        >>> try:
        ...     check(driver.cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, stream, block[1], 0), "...")
        ... finally:
        ...     packer.release(block)
    """

    release: Callable[[tuple[Any, int]], None]
    """``release(block)``: give a block from :attr:`acquire` back to the pool for reuse."""

    source: str
    """The generated source of :attr:`acquire` ("" where none is generated), for reading."""

    def pack_code(self) -> tuple[list[str], dict[str, Any]]:
        """Python lines that pack ``args``, for a caller generating its own fast path.

        Returns ``(lines, names)``: run with the local ``args`` bound, the lines leave a block,
        as :attr:`acquire` returns it, in the local ``packed``; they assign no other locals
        than ``args``, ``packed``, ``a<i>`` and ``v<i>``, and ``names`` are the globals they
        use (``names["release_block"]`` is :attr:`release`). The lines are unindented;
        :attr:`acquire` is built from them.
        """
        if self._layout is None or not self._count:
            return ["packed = acquire_block(args)"], {
                "acquire_block": self.acquire,
                "release_block": self.release,
            }
        names: dict[str, Any] = {
            "as_sequence": self._as_sequence,
            "count_error": self._count_error,
            "take_block": self._pool.pop,
            "new_block": self._layout.new_block,
            "pack_values": self._layout.pack_values,
            "release_block": self._pool.append,
            "struct_error": struct.error,
            "out_of_range": self._out_of_range,
        }
        names.update((f"c{i}", convert) for i, convert in enumerate(self._converters))
        return _pack_lines(self), names

    def pack(self, args: Sequence[Any]) -> PackedArgs:
        """Convert ``args`` (one value per parameter) and lay out the ``kernelParams`` array.

        The result owns its storage (it is never reused by a later call).

        Raises:
            LaunchError: wrong number of arguments, or a value that does not convert to its
                parameter's type; the message names the kernel, the argument index and name,
                what was given and what was expected.
        """
        if self._layout is None:
            return self._pack_dynamic(args)
        storage, address = self.acquire(args)  # not released: it now belongs to the result
        return PackedArgs(address, self._sizes or (), storage, args)

    def _acquire_nothing(self, args: Sequence[Any]) -> tuple[Any, int]:
        self._check_count(args)
        return _NO_BLOCK

    def _acquire_dynamic(self, args: Sequence[Any]) -> tuple[Any, int]:
        packed = self._pack_dynamic(args)
        return packed, packed.address

    def _pack_dynamic(self, args: Sequence[Any]) -> PackedArgs:
        """Pack where some parameter's size is only known from the value given (no driver sizes)."""
        args = self._check_count(args)
        values = [convert(a) for convert, a in zip(self._converters, args, strict=True)]
        sizes = tuple(
            p.size if p.size is not None else len(v)
            for p, v in zip(self.params, values, strict=True)
        )
        codes = [c if c else f"{s}s" for c, s in zip(self._codes, sizes, strict=True)]
        layout = _Layout(codes, sizes)
        storage, address = layout.new_block()
        layout.pack_values(storage, layout.table_bytes, *values)
        return PackedArgs(address, sizes, storage, args)

    def _check_count(self, args: Any) -> Sequence[Any]:
        """``args`` as a list or tuple of the right length, or a :class:`LaunchError`."""
        if type(args) is not list and type(args) is not tuple:
            args = self._as_sequence(args)
        if len(args) != self._count:
            raise self._count_error(args)
        return args

    def _out_of_range(self, args: Sequence[Any]) -> LaunchError:
        """The error for arguments that ``struct`` refused: the converters say precisely why."""
        for convert, value in zip(self._converters, args, strict=True):
            convert(value)  # raises LaunchError for the offending value
        return LaunchError(  # pragma: no cover - the converters refuse whatever struct refuses
            f"launch of {self.kernel_name!r}: cannot pack arguments {list(args)!r}"
        )

    def _count_error(self, args: Sequence[Any]) -> LaunchError:
        return LaunchError(
            f"launch of {self.kernel_name!r}: expected {self._count} argument(s) "
            f"({self._names}), got {len(args)}"
        )

    def _as_sequence(self, args: Any) -> Sequence[Any]:
        if isinstance(args, (str, bytes)) or not hasattr(args, "__iter__"):
            raise LaunchError(
                f"launch of {self.kernel_name!r}: args must be a list or tuple with one value per "
                f"parameter ({self._names}), got {type(args).__name__}"
            )
        return tuple(args)


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


# --- the generated acquire() -----------------------------------------------------------------

_NO_BLOCK: tuple[Any, int] = (None, 0)  # a kernel without parameters: kernelParams is NULL


def _keep(block: tuple[Any, int]) -> None:
    """``release`` where blocks are not pooled: the block is freed with its last reference."""


def _fast_path(p: Param, i: int) -> list[str]:
    """Lines converting ``a{i}`` to ``v{i}``: an exact-type check, else the converter ``c{i}``.

    The fast branch only checks the type; the range check is left to ``struct``, which refuses
    a value that does not fit its format (an int out of range, a float that would round to
    infinity) with ``struct.error``/``OverflowError``, and the generated code then converts
    every value again through the converters to raise the precise :class:`LaunchError`. For
    the types let through (``int`` for integers and pointers, ``float`` for floating
    parameters, ``True``/``False`` for bools) ``struct`` packs exactly what the converter
    would return, so both paths agree on every input.
    """
    a, v, c = f"a{i}", f"v{i}", f"c{i}"
    kind, size = p.kind, p.size
    if kind == "pointer":
        # Raw int addresses, then ignis buffers and arrays (an int .ptr). A .ptr of 0 may mean
        # a closed buffer, and other objects (__cuda_array_interface__...): the converter.
        return [
            f"if type({a}) is int:",
            f"    {v} = {a}",
            "else:",
            "    try:",
            f"        {v} = {a}.ptr",
            "    except AttributeError:",
            f"        {v} = None",
            f"    if type({v}) is not int or not {v}:",
            f"        {v} = {c}({a})",
        ]
    if (kind, size) in (("float", 4), ("float", 8), ("half", 2)):
        return [f"{v} = {a} if type({a}) is float else {c}({a})"]
    if kind in ("int", "uint") and size in _INT_CODES:
        return [f"{v} = {a} if type({a}) is int else {c}({a})"]
    if kind == "bool":
        return [f"{v} = {a} if {a} is True or {a} is False else {c}({a})"]
    return [f"{v} = {c}({a})"]  # bfloat16 (needs encoding), raw bytes, unusual widths


def _pack_lines(packer: ArgPacker) -> list[str]:
    """The generated lines of :meth:`ArgPacker.pack_code` for a fixed layout.

    For ``noop(float* x, int n)`` they read::

        if type(args) is not list and type(args) is not tuple:
            args = as_sequence(args)
        try:
            a0, a1 = args
        except ValueError:
            raise count_error(args) from None
        # args[0] (x: float*)
        if type(a0) is int:
            v0 = a0
        else:
            try:
                v0 = a0.ptr
            except AttributeError:
                v0 = None
            if type(v0) is not int or not v0:
                v0 = c0(a0)
        # args[1] (n: int)
        v1 = a1 if type(a1) is int else c1(a1)
        try:
            packed = take_block()
        except IndexError:
            packed = new_block()
        try:
            pack_values(packed[0], 16, v0, v1)
        except (struct_error, OverflowError):
            release_block(packed)
            raise out_of_range(args) from None

    Every value is converted before a block is taken, so a converter that raises (or that runs
    user code, which may itself launch) never leaves a block half written or out of the pool.
    """
    layout = packer._layout
    assert layout is not None and packer._count
    n = packer._count
    names = ", ".join(f"a{i}" for i in range(n))
    lines = [
        "if type(args) is not list and type(args) is not tuple:",
        "    args = as_sequence(args)",
        "try:",
        f"    {names}{',' if n == 1 else ''} = args",
        "except ValueError:",
        "    raise count_error(args) from None",
    ]
    for i, p in enumerate(packer.params):
        label = "".join(ch if ch.isprintable() else "?" for ch in _label(p))
        lines.append(f"# args[{i}] ({label})")
        lines.extend(_fast_path(p, i))
    return lines + block_lines(packer, "args")


def block_lines(packer: ArgPacker, args: str, values: Sequence[str] | None = None) -> list[str]:
    """The lines of :func:`_pack_lines` that take a block and write the converted values into
    it (``packed``): ``values``, one expression per parameter (default ``v0 .. v<n-1>``);
    ``args`` is the expression an out-of-range error reports. Shared with launches whose
    caller passes converted values (see ``Kernel._prepared``)."""
    layout = packer._layout
    assert layout is not None and packer._count
    if values is None:
        values = [f"v{i}" for i in range(packer._count)]
    elif len(values) != packer._count:
        raise LaunchError(
            f"kernel {packer.kernel_name!r}: {len(values)} values for {packer._count} parameters"
        )
    listed = ", ".join(values)
    return [
        "try:",
        "    packed = take_block()",
        "except IndexError:  # every pooled block is in use (other threads, nested launches)",
        "    packed = new_block()",
        "try:",
        f"    pack_values(packed[0], {layout.table_bytes}, {listed})",
        "except (struct_error, OverflowError):  # a value out of its type's range",
        "    release_block(packed)",
        f"    raise out_of_range({args}) from None",
    ]


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
        if type(value) in _NUMPY_FLOATS:  # the common case here, ahead of the isinstance chain
            return float(value)
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
        if isinstance(value, (float, np.floating)) or _is_ml_float(value):
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
        if type(value) in _NUMPY_INTS:  # the common case here, ahead of the isinstance chain
            return int(value)
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
