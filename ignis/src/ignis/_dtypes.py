"""The dtypes of ignis arrays and their promotion rules.

Fifteen dtypes exist: thirteen real ones, ``bool_`` (also ``ignis.bool``), ``int8``, ``int16``,
``int32``, ``int64``, ``uint8``, ``uint16``, ``uint32``, ``uint64``, ``float16``, ``bfloat16``,
``float32`` and ``float64`` (the tuple ``all_dtypes``), and two complex ones, ``complex64``
(two float32) and ``complex128`` (two float64) (the tuple ``complex_dtypes``; ``every_dtype``
holds all fifteen). Each is a singleton :class:`DType`; everywhere a dtype is accepted a name
(``"float32"``), a NumPy dtype or scalar type (``numpy.float32``) or a :class:`DType` works.

Promotion (:func:`result_type`) follows NumPy 2 (NEP 50), with ``bfloat16`` as ``ml_dtypes``
defines it, and two deliberate differences where NumPy has no answer:

* ``bfloat16`` with ``float16`` gives ``float32``; ``bfloat16`` with a 16-bit integer gives
  ``float32`` and with a wider one ``float64`` (``ml_dtypes`` refuses these; they are the
  smallest types that hold both operands, the answer JAX gives).
* A Python ``float`` with a ``bfloat16`` array stays ``bfloat16`` (``ml_dtypes`` does not mark
  bfloat16 as a float kind, so NumPy would give ``float64``).

Complex dtypes promote as NumPy 2's: ``float32`` with ``complex64`` gives ``complex64``,
``float64`` (or a 32/64-bit integer) with ``complex64`` gives ``complex128``.

Python scalars are *weak* (NEP 50): they take the array's dtype when their kind allows it, so
``float32 array + 2.0`` is ``float32`` and ``int8 array + 3`` is ``int8``. A Python ``float``
with an integer or bool array gives ``float64`` (what NumPy 2 does), a Python ``int`` with a bool
array gives ``int64``. A Python ``complex`` with a floating array gives the complex dtype of the
same precision (``float32`` or a 16-bit float -> ``complex64``, ``float64`` -> ``complex128``),
with an integer or bool array ``complex128``. Scalars alone give
``bool``/``int64``/``float64``/``complex128``.

Example::

    >>> result_type("float16", "float32")
    ignis.float32
    >>> result_type(int32, 2.0)
    ignis.float64
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from ._errors import DTypeError

__all__ = [
    "DType",
    "DTypeLike",
    "bool_",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "complex64",
    "complex128",
    "all_dtypes",
    "complex_dtypes",
    "every_dtype",
    "real_of",
    "complex_of",
    "floating_dtypes",
    "default_float",
    "default_complex",
    "default_int",
    "integer_dtypes",
    "as_dtype",
    "result_type",
    "promote_types",
    "can_cast",
]


class DType:
    """One ignis dtype. Compare with ``==`` against another DType, a name or a NumPy dtype.

    Attributes:
        name: the canonical name, e.g. ``"bfloat16"``.
        numpy: the matching :class:`numpy.dtype` (``ml_dtypes.bfloat16`` for bfloat16).
        itemsize: bytes per element.
        kind: ``"b"`` (bool), ``"i"`` (signed integer), ``"u"`` (unsigned), ``"f"`` (real
            floating) or ``"c"`` (complex floating).

    ``numpy.dtype(ignis.float32)`` works too (through the ``dtype`` attribute).

    bfloat16's NumPy dtype comes from ``ml_dtypes``, which takes several times as long to import
    as NumPy itself; it is imported the first time ``bfloat16.numpy`` is read, so that
    ``import ignis`` stays cheap for code that never touches bfloat16 on the host.
    """

    __slots__ = ("name", "numpy", "itemsize", "kind", "_rank")

    def __init__(self, name: str, np_dtype: Any, kind: str, rank: int, itemsize: int = 0):
        self.name = name
        if np_dtype is not None:  # None: filled in on first use by __getattr__ (bfloat16)
            self.numpy = np.dtype(np_dtype)
        self.itemsize = itemsize or self.numpy.itemsize
        self.kind = kind
        self._rank = rank

    def __getattr__(self, attr: str) -> Any:
        # Reached only while a slot is unset: bfloat16's ``numpy`` before its first use. A plain
        # slot read costs nothing extra once it is filled.
        if attr == "numpy" and self.name == "bfloat16":
            return _load_bfloat16()
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {attr!r}")

    @property
    def dtype(self) -> np.dtype:
        """The NumPy dtype; lets ``numpy.dtype(ignis.float32)`` and ``dtype=ignis.int8`` work."""
        return self.numpy

    @property
    def is_floating(self) -> bool:
        """True for float16, bfloat16, float32 and float64."""
        return self.kind == "f"

    @property
    def is_integer(self) -> bool:
        """True for the signed and unsigned integers (not bool)."""
        return self.kind in "iu"

    @property
    def is_signed(self) -> bool:
        """True for signed integers and floats."""
        return self.kind in "if"

    @property
    def is_complex(self) -> bool:
        """True for complex64 and complex128."""
        return self.kind == "c"

    @property
    def is_bool(self) -> bool:
        return self.kind == "b"

    @property
    def bits(self) -> int:
        """Bits per element."""
        return self.itemsize * 8

    def __repr__(self) -> str:
        return f"ignis.{self.name}"

    def __str__(self) -> str:
        return self.name

    def __eq__(self, other: object) -> bool:
        if isinstance(other, DType):
            return self is other
        try:
            return self is as_dtype(other)  # type: ignore[arg-type]
        except (DTypeError, TypeError):
            return False

    def __hash__(self) -> int:
        return hash(self.name)

    def __reduce__(self) -> str:
        # Singletons: unpickling returns the module-level object.
        return self.name if self.name != "bool" else "bool_"


bool_ = DType("bool", np.bool_, "b", 0)
int8 = DType("int8", np.int8, "i", 1)
int16 = DType("int16", np.int16, "i", 2)
int32 = DType("int32", np.int32, "i", 3)
int64 = DType("int64", np.int64, "i", 4)
uint8 = DType("uint8", np.uint8, "u", 1)
uint16 = DType("uint16", np.uint16, "u", 2)
uint32 = DType("uint32", np.uint32, "u", 3)
uint64 = DType("uint64", np.uint64, "u", 4)
float16 = DType("float16", np.float16, "f", 1)
bfloat16 = DType("bfloat16", None, "f", 1, itemsize=2)
float32 = DType("float32", np.float32, "f", 3)
float64 = DType("float64", np.float64, "f", 4)
complex64 = DType("complex64", np.complex64, "c", 3)
complex128 = DType("complex128", np.complex128, "c", 4)

all_dtypes: tuple[DType, ...] = (
    bool_,
    int8,
    int16,
    int32,
    int64,
    uint8,
    uint16,
    uint32,
    uint64,
    float16,
    bfloat16,
    float32,
    float64,
)
floating_dtypes: tuple[DType, ...] = (float16, bfloat16, float32, float64)
#: The complex dtypes; kept out of ``all_dtypes`` (the real dtypes, as before they existed) so
#: that code iterating it meets only dtypes it was written for.
complex_dtypes: tuple[DType, ...] = (complex64, complex128)
#: Every dtype: the real ones, then the complex ones.
every_dtype: tuple[DType, ...] = all_dtypes + complex_dtypes

#: The default dtypes (the Array API's choice left to the library, made once here): Python
#: floats and the creation functions give float32, as in PyTorch; Python ints give int64.
default_float: DType = float32
default_int: DType = int64
#: The default complex dtype: the complex of the default float (``asarray(1j)`` gives it).
default_complex: DType = complex64
integer_dtypes: tuple[DType, ...] = (int8, int16, int32, int64, uint8, uint16, uint32, uint64)

DTypeLike = DType | str | np.dtype | type

_BY_NAME: dict[str, DType] = {d.name: d for d in every_dtype}
_BY_NAME.update(
    {
        "bool_": bool_,
        "half": float16,
        "float": float32,
        "double": float64,
        "bf16": bfloat16,
        "int": int64,
        "long": int64,
        "cfloat": complex64,
        "cdouble": complex128,
    }
)
_BY_NUMPY: dict[np.dtype, DType] = {d.numpy: d for d in every_dtype if d is not bfloat16}
_BY_PYTYPE: dict[type, DType] = {bool: bool_, int: int64, float: float64, complex: complex128}

_SUPPORTED = ", ".join(d.name for d in every_dtype)

# complex <-> real of the same precision (the half floats widen to complex64, as NumPy's).
_REAL_OF = {"complex64": float32, "complex128": float64}
_COMPLEX_OF = {
    "float16": complex64,
    "bfloat16": complex64,
    "float32": complex64,
    "float64": complex128,
    "complex64": complex64,
    "complex128": complex128,
}


def real_of(dtype: DType) -> DType:
    """The real dtype of a complex one's parts (``complex64 -> float32``); other dtypes are
    returned as they are. Example: ``real_of(complex128) is float64``."""
    return _REAL_OF.get(dtype.name, dtype)


def complex_of(dtype: DType) -> DType:
    """The complex dtype whose parts hold ``dtype`` (``float32 -> complex64``; integers and
    bool give complex128). Example: ``complex_of(float64) is complex128``."""
    return _COMPLEX_OF.get(dtype.name, complex128)


def _load_bfloat16() -> np.dtype:
    """Import ``ml_dtypes``, set ``bfloat16.numpy`` and register it for lookups by NumPy dtype."""
    import ml_dtypes

    npd = np.dtype(ml_dtypes.bfloat16)
    bfloat16.numpy = npd
    _BY_NUMPY[npd] = bfloat16
    return npd


def as_dtype(dtype: DTypeLike, op: str = "dtype") -> DType:
    """Turn a name, NumPy dtype/scalar type or :class:`DType` into the :class:`DType`.

    ``op`` names the operation in the error message. Raises :class:`DTypeError` for anything
    outside the supported dtypes.

    Example: ``as_dtype("f4") is float32``; ``as_dtype(numpy.int8) is int8``.
    """
    if type(dtype) is DType:
        return dtype
    if isinstance(dtype, str):
        found = _BY_NAME.get(dtype)
        if found is not None:
            return found
    elif isinstance(dtype, type) and dtype in _BY_PYTYPE:
        return _BY_PYTYPE[dtype]
    elif dtype is None:  # NumPy would read None as float64; here it is a missing argument
        raise DTypeError(f"{op}: unsupported dtype None; expected one of {_SUPPORTED}")
    try:
        npd = np.dtype(dtype)
    except (TypeError, ValueError):
        npd = None
    if npd is not None:
        native = npd.newbyteorder("=") if npd.byteorder not in "=|" else npd
        found = _BY_NUMPY.get(native)
        if found is None and "ml_dtypes" in sys.modules:
            # A NumPy dtype from ml_dtypes exists only once ml_dtypes is imported; bfloat16 may
            # not be registered yet (see DType).
            _load_bfloat16()
            found = _BY_NUMPY.get(native)
        if found is not None:
            return found
    raise DTypeError(f"{op}: unsupported dtype {dtype!r}; expected one of {_SUPPORTED}")


# --- promotion between two array dtypes --------------------------------------------------------

# NumPy 2's table restricted to our dtypes, plus the documented completions for bfloat16.
# Indexed by name pairs; symmetric.
_PROMOTE: dict[tuple[str, str], DType] = {}


def _fill_promotion_table() -> None:
    order = [d.name for d in every_dtype]
    overrides = {("bfloat16", "float16"): float32}
    for d in integer_dtypes:
        if d.itemsize > 1:
            overrides[("bfloat16", d.name)] = float32 if d.itemsize == 2 else float64
    for a in order:
        for b in order:
            key = tuple(sorted((a, b)))
            if key in overrides:
                res = overrides[key]  # type: ignore[index]
            elif a == b:
                res = _BY_NAME[a]
            elif "bfloat16" in (a, b):
                other = b if a == "bfloat16" else a
                res = bfloat16 if other in ("bool", "int8", "uint8") else _BY_NAME[other]
            else:
                res = _BY_NUMPY[np.promote_types(_BY_NAME[a].numpy, _BY_NAME[b].numpy)]
            _PROMOTE[(a, b)] = res


_fill_promotion_table()


def promote_types(a: DTypeLike, b: DTypeLike) -> DType:
    """The dtype both ``a`` and ``b`` convert to (NumPy's rule; see the module notes)."""
    return _PROMOTE[(as_dtype(a).name, as_dtype(b).name)]


# --- weak Python scalars -----------------------------------------------------------------------


def _scalar_kind(value: Any) -> str | None:
    """'b', 'i', 'f', 'c' for a weak Python scalar, None if ``value`` is not one."""
    t = type(value)
    if t is bool:
        return "b"
    if t is int:
        return "i"
    if t is float:
        return "f"
    if t is complex:
        return "c"
    return None


def is_weak_scalar(value: Any) -> bool:
    """True for Python bool/int/float/complex (not NumPy scalars, which carry a dtype)."""
    return _scalar_kind(value) is not None


_KIND_ORDER = {"b": 0, "i": 1, "u": 1, "f": 2, "c": 3}
# NumPy's kind order for "same_kind" casting: bool < unsigned < signed < floating < complex.
_CAST_KIND = {"b": 0, "u": 1, "i": 2, "f": 3, "c": 4}


def result_type(*args: Any, op: str = "result_type") -> DType:
    """The dtype of an operation over ``args`` (dtypes, arrays or Python scalars).

    Arrays and dtypes are *strong*; Python ``bool``/``int``/``float``/``complex`` are *weak*
    and only raise the kind (bool < integer < floating < complex). NumPy scalars count as
    strong, as in NumPy 2.

    Example::

        >>> result_type(float16, 1.5), result_type(int8, 1000), result_type(uint8, 1.0)
        (ignis.float16, ignis.int8, ignis.float64)
        >>> result_type(float32, 1j), result_type(int8, 1j)
        (ignis.complex64, ignis.complex128)
    """
    strong: DType | None = None
    weak_kind = -1
    for arg in args:
        kind = _scalar_kind(arg)
        if kind is not None:
            weak_kind = max(weak_kind, _KIND_ORDER[kind])
            continue
        d = _dtype_of(arg, op)
        strong = d if strong is None else _PROMOTE[(strong.name, d.name)]
    if strong is None:
        if weak_kind < 0:
            raise DTypeError(f"{op}: needs at least one operand")
        return (bool_, int64, float64, complex128)[weak_kind]
    if weak_kind <= _KIND_ORDER[strong.kind]:
        return strong
    # The scalar's kind is higher: bool array with int -> int64; int/bool with float -> float64;
    # a complex with a float array -> the complex of its precision, with int/bool -> complex128.
    if weak_kind == 3:
        return _COMPLEX_OF.get(strong.name, complex128)
    return int64 if weak_kind == 1 else float64


def _dtype_of(arg: Any, op: str) -> DType:
    d = getattr(arg, "dtype", None)
    if type(d) is DType:  # arrays: the common case, kept cheap
        return d
    if d is not None and not isinstance(arg, (type, np.dtype)):
        return as_dtype(d, op)
    return as_dtype(arg, op)


def can_cast(from_: Any, to: DTypeLike, casting: str = "safe") -> bool:
    """Whether a value of ``from_`` (a dtype or an array) may be stored into ``to``.

    ``"safe"`` (the default, NumPy's and the Array API's meaning) allows only casts that keep
    every value; ``"same_kind"`` (the rule of in-place operators) allows any cast that does not
    go down in kind (float -> int, int -> bool).
    """
    f, t = _dtype_of(from_, "can_cast"), as_dtype(to, "can_cast")
    if casting == "unsafe":
        return True
    if casting == "safe":
        return promote_types(f, t) is t
    if casting == "same_kind":
        return promote_types(f, t) is t or _CAST_KIND[f.kind] <= _CAST_KIND[t.kind]
    raise ValueError(
        f"can_cast: unknown casting {casting!r}; expected 'safe', 'same_kind' or 'unsafe'"
    )


def scalar_fits(value: Any, dtype: DType) -> bool:
    """False only for a Python int outside integer ``dtype``'s range."""
    if type(value) is int and dtype.kind in "iu":
        info = np.iinfo(dtype.numpy)
        return info.min <= value <= info.max
    return True


def check_scalar_fits(value: Any, dtype: DType, op: str) -> None:
    """Raise OverflowError when a Python int cannot be represented in integer ``dtype``.

    NumPy 2 refuses ``uint8_array + 300`` the same way rather than wrapping silently.
    """
    # (the type test first: float scalars, the common case on the op path, make no call)
    if type(value) is int and dtype.kind in "iu" and not scalar_fits(value, dtype):
        info = np.iinfo(dtype.numpy)
        raise OverflowError(
            f"{op}: Python integer {value} is out of bounds for {dtype.name} "
            f"(range {info.min}..{info.max}); cast the array first"
        )
