"""ignis dtypes: names, conversions and NumPy 2 promotion (bfloat16 as ml_dtypes does)."""

from __future__ import annotations

import pickle

import ml_dtypes
import numpy as np
import pytest

import ignis
from ignis import _dtypes as dt

NAMES = [
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "bfloat16", "float32", "float64",
]
INTEGERS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")


def np_of(name: str) -> np.dtype:
    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


@pytest.mark.parametrize("name", NAMES)
def test_dtype_attributes_and_lookup(name: str) -> None:
    d = dt.as_dtype(name)
    assert d.name == name
    assert d.numpy == np_of(name)
    assert d.itemsize == np_of(name).itemsize
    assert d.is_floating == (name in ("float16", "bfloat16", "float32", "float64"))
    assert d.is_integer == (name in INTEGERS)
    # every spelling resolves to the same singleton
    assert dt.as_dtype(np_of(name)) is d
    assert dt.as_dtype(np_of(name).type) is d
    assert dt.as_dtype(d) is d
    assert d == name and d == np_of(name)
    assert np.dtype(d) == np_of(name)  # NumPy accepts our dtype objects
    assert pickle.loads(pickle.dumps(d)) is d
    assert repr(d) == f"ignis.{name}"


def test_public_dtype_names() -> None:
    assert ignis.bool_ is dt.bool_ and ignis.bfloat16.name == "bfloat16"
    for name in NAMES:
        attr = "bool_" if name == "bool" else name
        assert getattr(ignis, attr) is dt.as_dtype(name)
    assert dt.as_dtype("f4") is dt.float32
    assert (
        dt.as_dtype(float) is dt.float64
        and dt.as_dtype(int) is dt.int64
        and dt.as_dtype(bool) is dt.bool_
    )
    assert hash(dt.float32) == hash(dt.as_dtype("float32"))


@pytest.mark.parametrize("bad", ["complex32", np.clongdouble, "nonsense", object, None])
def test_unsupported_dtypes_raise_dtype_error(bad) -> None:
    with pytest.raises(ignis.DTypeError, match=r"zeros: unsupported dtype .* expected one of bool"):
        dt.as_dtype(bad, "zeros")
    assert dt.float32 != bad


def test_dtype_compares_false_to_unrelated_objects() -> None:
    assert dt.float32 != "float64"
    assert dt.float32 != 3
    assert dt.int8 != dt.uint8


@pytest.mark.parametrize("a", NAMES)
@pytest.mark.parametrize("b", NAMES)
def test_promotion_matches_numpy_where_numpy_answers(a: str, b: str) -> None:
    ours = dt.promote_types(a, b)
    assert ours is dt.promote_types(b, a)
    assert dt.result_type(dt.as_dtype(a), dt.as_dtype(b)) is ours
    try:
        expected = np.promote_types(np_of(a), np_of(b))
    except TypeError:
        expected = None  # ml_dtypes refuses bfloat16 with float16/int32/int64
    documented = {frozenset({"bfloat16", "float16"}): "float32"}
    for i in INTEGERS[1:4] + INTEGERS[5:]:  # wider than 8 bits: the smallest float holding both
        documented[frozenset({"bfloat16", i})] = "float32" if "16" in i else "float64"
    key = frozenset({a, b})
    if key in documented:
        assert ours.name == documented[key]
    else:
        assert expected is not None
        assert ours.numpy == expected


@pytest.mark.parametrize("a", NAMES)
@pytest.mark.parametrize("scalar", [True, 3, -2, 2.5])
def test_weak_python_scalars_follow_nep50(a: str, scalar) -> None:
    ours = dt.result_type(dt.as_dtype(a), scalar)
    if a == "bfloat16" and isinstance(scalar, float):
        assert ours is dt.bfloat16  # documented: ml_dtypes' bfloat16 is not a NEP 50 float kind
        return
    expected = np.result_type(np_of(a), scalar)
    assert ours.numpy == expected, (a, scalar, ours, expected)


def test_result_type_examples_from_the_docs() -> None:
    assert dt.result_type(dt.float32, 2.0) is dt.float32
    assert dt.result_type(dt.int32, 2.0) is dt.float64
    assert dt.result_type(dt.bool_, 2) is dt.int64
    assert dt.result_type(dt.int8, 100) is dt.int8
    assert dt.result_type(1, 2.0) is dt.float64 and dt.result_type(True) is dt.bool_
    assert dt.result_type(np.float32(1.0), dt.float16) is dt.float32  # NumPy scalars are strong
    assert dt.result_type(dt.float32, 1j) is dt.complex64  # weak complex scalars
    with pytest.raises(ignis.DTypeError, match="at least one"):
        dt.result_type()


@pytest.mark.parametrize("a", NAMES)
@pytest.mark.parametrize("b", NAMES)
def test_can_cast_matches_numpy(a: str, b: str) -> None:
    if "bfloat16" in (a, b):
        # ml_dtypes' casting table is its own; check the kind rule instead
        ka, kb = dt.as_dtype(a).kind, dt.as_dtype(b).kind
        order = {"b": 0, "u": 1, "i": 2, "f": 3}
        assert dt.can_cast(a, b, "same_kind") == (
            dt.promote_types(a, b).name == b or order[ka] <= order[kb]
        )
        return
    for casting in ("safe", "same_kind"):
        expected = np.can_cast(np_of(a), np_of(b), casting)
        if casting == "same_kind" and dt.as_dtype(b).kind == "b" and a != "bool":
            expected = False  # ignis does not let numbers narrow into bool in place
        assert dt.can_cast(a, b, casting) == expected, (a, b, casting)


def test_scalar_overflow_is_refused_like_numpy2() -> None:
    dt.check_scalar_fits(255, dt.uint8, "add")
    with pytest.raises(OverflowError, match=r"add: Python integer 256 is out of bounds for uint8"):
        dt.check_scalar_fits(256, dt.uint8, "add")
    with pytest.raises(OverflowError, match="int8"):
        dt.check_scalar_fits(-129, dt.int8, "add")
    dt.check_scalar_fits(10**30, dt.float32, "add")  # floats take any int
