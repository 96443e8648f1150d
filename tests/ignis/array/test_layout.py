"""Shape/stride arithmetic (_layout): checked against NumPy's own views."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from ignis._array import _layout

import ignis


def strided_view(base: np.ndarray, offset_elems: int, shape, strides) -> np.ndarray:
    return np.lib.stride_tricks.as_strided(base[offset_elems:], shape=shape, strides=strides)


def test_contiguous_strides_and_numel() -> None:
    assert _layout.contiguous_strides((2, 3, 4), 4) == (48, 16, 4)
    assert _layout.contiguous_strides((), 8) == ()
    assert _layout.contiguous_strides((0, 3), 2) == (6, 2)
    assert _layout.numel((2, 0, 5)) == 0 and _layout.numel(()) == 1


@pytest.mark.parametrize("shape", [(2, 3), (1, 5), (4, 1, 3), (0, 2), ()])
def test_is_c_contiguous_agrees_with_numpy(shape) -> None:
    a = np.zeros(shape, np.float32)
    assert _layout.is_c_contiguous(a.shape, a.strides, 4)
    if a.ndim >= 2 and a.size > 1 and shape[0] != 1:
        t = a.T
        assert _layout.is_c_contiguous(t.shape, t.strides, 4) == t.flags.c_contiguous


def test_broadcast_shapes_and_errors() -> None:
    assert _layout.broadcast_shapes((3, 1), (4,)) == (3, 4)
    assert _layout.broadcast_shapes((), (2, 2)) == (2, 2)
    assert _layout.broadcast_shapes((0, 1), (1, 5)) == (0, 5)
    with pytest.raises(
        ignis.ShapeError, match=r"add: shapes \(2, 3\) and \(4,\) cannot be broadcast"
    ):
        _layout.broadcast_shapes((2, 3), (4,), op="add")
    assert _layout.broadcast_strides((3, 1), (8, 8), (2, 3, 5)) == (0, 8, 0)
    with pytest.raises(ignis.ShapeError, match="cannot broadcast shape"):
        _layout.broadcast_strides((3,), (4,), (4,))


RESHAPES = [
    ((2, 3, 4), (6, 4)),
    ((2, 3, 4), (24,)),
    ((2, 3, 4), (4, 6)),
    ((2, 3, 4), (2, 12)),
    ((6,), (1, 6, 1)),
    ((1, 1), (1,)),
    ((4, 1, 3), (12,)),
    ((4, 1, 3), (2, 2, 3)),
    ((3, 4), (3, 2, 2)),
]


@pytest.mark.parametrize("old,new", RESHAPES)
@pytest.mark.parametrize("layout", ["c", "transposed", "sliced", "reversed"])
def test_reshape_strides_view_exactly_when_numpy_views(old, new, layout) -> None:
    base = np.arange(4 * int(np.prod(old)), dtype=np.float64)
    a = base[: int(np.prod(old))].reshape(old)
    if layout == "transposed":
        a = base[: int(np.prod(old))].reshape(old[::-1]).T
    elif layout == "sliced":
        a = base.reshape((2,) + old + (2,))[1, ..., 0] if len(old) else a
    elif layout == "reversed":
        a = a[::-1]
    ref = a.reshape(new)
    numpy_views = np.shares_memory(ref, a)
    strides = _layout.reshape_strides(a.shape, a.strides, new, 8)
    assert (strides is not None) == numpy_views, (a.strides, new)
    if strides is not None:
        offset = (a.__array_interface__["data"][0] - base.__array_interface__["data"][0]) // 8
        view = strided_view(base, offset, new, strides)
        np.testing.assert_array_equal(view, ref)


def test_infer_reshape() -> None:
    assert _layout.infer_reshape(12, (3, -1), (12,), "reshape") == (3, 4)
    with pytest.raises(
        ignis.ShapeError,
        match=r"reshape: cannot reshape array of shape \(12,\) \(12 elements\) into \(5, -1\)",
    ):
        _layout.infer_reshape(12, (5, -1), (12,), "reshape")
    with pytest.raises(ignis.ShapeError, match="only one dimension can be -1"):
        _layout.infer_reshape(12, (-1, -1), (12,), "reshape")
    with pytest.raises(ignis.ShapeError, match=r"into \(5, 2\) \(10 elements\)"):
        _layout.infer_reshape(12, (5, 2), (12,), "reshape")


KEYS = [
    0,
    -1,
    slice(None),
    slice(1, None),
    slice(None, None, -1),
    slice(-2, 0, -1),
    slice(5, 1),
    (1, 2),
    (slice(None), 1),
    (Ellipsis, 0),
    (None, 1),
    (0, None, slice(None, None, 2)),
    (Ellipsis, None),
    (slice(1, 3), Ellipsis, slice(None, None, -2)),
    (),
    slice(10, 20),
    (slice(None, None, 3), -2, slice(2, None)),
]


@pytest.mark.parametrize("key", KEYS, ids=[repr(k) for k in KEYS])
def test_index_view_matches_numpy_basic_indexing(key) -> None:
    base = np.arange(60, dtype=np.int32)
    a = base.reshape(3, 4, 5)
    delta, shape, strides = _layout.index_view(a.shape, a.strides, key)
    ref = a[key]
    assert shape == ref.shape
    if ref.size:
        view = strided_view(base, delta // 4, shape, strides)
        np.testing.assert_array_equal(view, ref)


def test_index_errors() -> None:
    shape, strides = (3, 4), (16, 4)
    with pytest.raises(IndexError, match="index 3 is out of bounds for axis 0 with size 3"):
        _layout.index_view(shape, strides, 3)
    with pytest.raises(IndexError, match="too many indices"):
        _layout.index_view(shape, strides, (0, 0, 0))
    with pytest.raises(IndexError, match="advanced"):
        _layout.index_view(shape, strides, [0, 1])
    with pytest.raises(IndexError, match="advanced"):
        _layout.index_view(shape, strides, True)
    with pytest.raises(IndexError, match="single ellipsis"):
        _layout.index_view(shape, strides, (..., ...))
    with pytest.raises(ValueError, match="step cannot be zero"):
        _layout.index_view(shape, strides, slice(None, None, 0))


def test_byte_extent_and_overlap() -> None:
    assert _layout.byte_extent(100, (3, 4), (16, 4), 4) == (100, 148)
    assert _layout.byte_extent(100, (3,), (-8,), 4) == (84, 104)
    assert _layout.byte_extent(100, (0, 4), (16, 4), 4) == (100, 100)
    assert _layout.ranges_overlap((0, 10), (9, 20)) and not _layout.ranges_overlap(
        (0, 10), (10, 20)
    )


@pytest.mark.parametrize("shape", [3, (2, 3), [4], (0,), ()])
def test_normalize_shape(shape) -> None:
    expected = (shape,) if isinstance(shape, int) else tuple(shape)
    assert _layout.normalize_shape(shape, "zeros") == expected


@pytest.mark.parametrize("bad", [-1, (2, -3), "3", 2.5, (1.0,)])
def test_normalize_shape_errors(bad) -> None:
    with pytest.raises(ignis.ShapeError, match="zeros:"):
        _layout.normalize_shape(bad, "zeros")


def test_every_permutation_round_trips() -> None:
    a = np.arange(24).reshape(2, 3, 4)
    for perm in itertools.permutations(range(3)):
        t = a.transpose(perm)
        s = _layout.reshape_strides(t.shape, t.strides, (24,), 8)
        assert (s is not None) == np.shares_memory(t.reshape(24), a)
