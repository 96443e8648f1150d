"""NvArray itself: attributes, views sharing memory, indexing, copies and conversions."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest
from array_helpers import ALL, FLOATS, np_dtype, random_array

import ignis
from ignis import NvArray


def make(rng, shape, dtype, device):
    x = random_array(rng, shape, dtype)
    return x, NvArray.from_host(x, device=device)


def test_attributes(device: str) -> None:
    a = ignis.zeros((2, 3, 4), dtype="float16", device=device)
    assert a.shape == (2, 3, 4) and a.ndim == 3 and a.numel == 24 and a.size == 24
    assert a.itemsize == 2 and a.nbytes == 48 and a.strides == (24, 8, 2)
    assert a.dtype is ignis.float16 and a.dtype == "float16"
    assert a.device == device and str(a.device) == device
    assert a.stream is None or device != "cpu"
    assert a.is_contiguous and isinstance(a.data_ptr, int)
    assert len(a) == 2


@pytest.mark.parametrize("dtype", ALL)
def test_views_share_memory_and_match_numpy(device: str, dtype: str, rng) -> None:
    x, a = make(rng, (4, 5, 6), dtype, device)
    cases = [
        (a.reshape(20, 6), x.reshape(20, 6)),
        (a.reshape(-1), x.reshape(-1)),
        (a.transpose(), x.transpose()),
        (a.transpose(1, 0, 2), x.transpose(1, 0, 2)),
        (a.permute(2, 0, 1), x.transpose(2, 0, 1)),
        (a.T, x.T),
        (a.mT, np.swapaxes(x, -1, -2)),
        (a.swapaxes(0, 2), np.swapaxes(x, 0, 2)),
        (a[1], x[1]),
        (a[-1, 2:, ::-2], x[-1, 2:, ::-2]),
        (a[..., 3], x[..., 3]),
        (a[:, None, 1:4], x[:, None, 1:4]),
        (a[::2, ::-1][1:, :2], x[::2, ::-1][1:, :2]),
        (a[1:3].unsqueeze(1), np.expand_dims(x[1:3], 1)),
        (a[:, :1].squeeze(1), x[:, :1].squeeze(1)),
        (a[:, 2:3, :1].squeeze(), x[:, 2:3, :1].squeeze()),
        (a[0, :1].broadcast_to((3, 1, 6)), np.broadcast_to(x[0, :1], (3, 1, 6))),
    ]
    for view, ref in cases:
        assert view.shape == ref.shape
        np.testing.assert_array_equal(view.to_host(), ref)
    # write through views is visible in the base (and in NumPy's mirror of it)
    value = True if dtype == "bool" else 7
    for writer, mirror in (
        (a[1], x[1]),
        (a.T[2, 1:3], x.T[2, 1:3]),
        (a[:, ::-2, 0], x[:, ::-2, 0]),
    ):
        writer.fill_(value)
        mirror[...] = value
        np.testing.assert_array_equal(a.to_host(), x)
    r = a.reshape(5, 4, 6)
    r[0, 0, 0] = 0
    x.reshape(5, 4, 6)[0, 0, 0] = 0
    np.testing.assert_array_equal(a.to_host(), x)


def test_reshape_copies_only_when_needed(device: str, rng) -> None:
    x, a = make(rng, (3, 4), "float32", device)
    t = a.T
    flat = t.reshape(-1)  # needs a copy
    np.testing.assert_array_equal(flat.to_host(), x.T.reshape(-1))
    flat.fill_(0)
    np.testing.assert_array_equal(a.to_host(), x)  # the copy is independent
    v = a.reshape((2, 6))
    v.fill_(1)
    assert (a.to_host() == 1).all()
    assert a.reshape(3, 4).shape == (3, 4)
    with pytest.raises(ignis.ShapeError, match=r"reshape: cannot reshape array of shape \(3, 4\)"):
        a.reshape(5, -1)


def test_view_errors(device: str) -> None:
    a = ignis.zeros((2, 3), device=device)
    with pytest.raises(ignis.ShapeError, match=r"transpose: axes \(0, 0\) are not a permutation"):
        a.transpose(0, 0)
    with pytest.raises(ignis.ShapeError, match="permute"):
        a.permute(0)
    with pytest.raises(ignis.ShapeError, match="squeeze: cannot remove axis 1 of size 3"):
        a.squeeze(1)
    with pytest.raises(ignis.ShapeError, match="unsqueeze: axis 4 is out of range"):
        a.unsqueeze(4)
    with pytest.raises(
        ignis.ShapeError, match=r"broadcast_to: cannot broadcast shape \(2, 3\) to \(3, 3\)"
    ):
        a.broadcast_to((3, 3))
    with pytest.raises(IndexError, match=r"boolean index of shape \(3,\) does not match"):
        a[ignis.zeros(3, dtype="bool", device=device)]
    with pytest.raises(IndexError, match="integer or bool dtype, got float32"):
        a[ignis.zeros(2, device=device)] = 1.0
    with pytest.raises(IndexError, match="cannot be broadcast together"):
        a[ignis.asarray([1, 0], device=device), ignis.asarray([0, 1, 2], device=device)] = 0.0
    with pytest.raises(IndexError, match="out of bounds"):
        a[2]
    with pytest.raises(ignis.ShapeError, match="mT: needs at least 2 dimensions"):
        _ = ignis.zeros(3, device=device).mT
    with pytest.raises(TypeError, match="0-dimensional"):
        len(ignis.zeros((), device=device))


def test_setitem(device: str, rng) -> None:
    x, a = make(rng, (3, 4), "float32", device)
    a[0] = 1.5
    x[0] = 1.5
    a[1:, 1] = np.array([10.0, 20.0])
    x[1:, 1] = [10.0, 20.0]
    a[2] = ignis.arange(4, device=device)  # int array converted to float32
    x[2] = np.arange(4)
    a[:, 3] = a[:, 0]
    x[:, 3] = x[:, 0]
    a[..., :2] = [[-1.0, -2.0]]  # broadcast host data
    x[..., :2] = [[-1.0, -2.0]]
    np.testing.assert_array_equal(a.to_host(), x)
    with pytest.raises(
        ignis.ShapeError,
        match=r"__setitem__: cannot copy an array of shape \(4,\) into shape \(3,\)",
    ):
        a[:, 0] = ignis.zeros(4, device=device)
    with pytest.raises(ignis.ShapeError, match="__setitem__: cannot copy values of shape"):
        a[0] = [1.0, 2.0]


def test_overlapping_copy_is_safe(device: str) -> None:
    x = np.arange(10.0)
    a = NvArray.from_host(x, device=device)
    a[1:] = a[:-1]
    x[1:] = x[:-1].copy()
    np.testing.assert_array_equal(a.to_host(), x)
    a[:-2] = a[2:]
    x[:-2] = x[2:].copy()
    np.testing.assert_array_equal(a.to_host(), x)


@pytest.mark.parametrize("src", ALL)
@pytest.mark.parametrize("dst", ALL)
def test_astype_matches_numpy(device: str, src: str, dst: str, rng) -> None:
    x, a = make(rng, (4, 3), src, device)
    b = a.T.astype(dst)
    assert b.dtype == dst and b.shape == (3, 4) and b.is_contiguous
    with np.errstate(all="ignore"):
        ref = (
            x.T.astype(np.float32).astype(np_dtype(dst))
            if {src, dst} == {"float16", "bfloat16"}
            else x.T.astype(np_dtype(dst))
        )
    np.testing.assert_array_equal(b.to_host(), ref)


def test_astype_copy_flag(device: str) -> None:
    a = ignis.zeros(3, device=device)
    assert a.astype("float32", copy=False) is a
    assert a.astype("float32") is not a


def test_clone_contiguous_copy_fill(device: str, rng) -> None:
    x, a = make(rng, (3, 4), "float64", device)
    c = a.clone()
    c.fill_(2.0)
    np.testing.assert_array_equal(a.to_host(), x)
    assert a.contiguous() is a
    t = a.T.contiguous()
    assert t.is_contiguous and t.strides == (24, 8)
    np.testing.assert_array_equal(t.to_host(), x.T)
    assert a.copy_(c) is a
    assert (a.to_host() == 2.0).all()
    a.copy_(x.T.T * 3)
    np.testing.assert_array_equal(a.to_host(), x * 3)
    a.copy_(ignis.arange(4, device=device))  # broadcast + int -> float
    np.testing.assert_array_equal(a.to_host(), np.broadcast_to(np.arange(4.0), (3, 4)))
    a.copy_(np.float32(1.25))
    assert (a.to_host() == 1.25).all()
    assert copy.copy(a) is not a and copy.deepcopy(a).to_host().tolist() == a.to_host().tolist()
    with pytest.raises(
        ignis.ShapeError, match=r"copy_: cannot copy an array of shape \(5,\) into shape \(3, 4\)"
    ):
        a.copy_(ignis.zeros(5, device=device))
    with pytest.raises(ignis.ShapeError, match="fill_: the fill value must be a scalar"):
        a.fill_(ignis.zeros(2, device=device))
    i = ignis.zeros(2, dtype="uint8", device=device)
    with pytest.raises(OverflowError, match="fill_: Python integer -1 is out of bounds for uint8"):
        i.fill_(-1)
    i.fill_(2.7)  # floats convert like NumPy's fill (truncation)
    assert i.to_host().tolist() == [2, 2]


def test_to_device_returns_self_on_same_device(device: str) -> None:
    a = ignis.ones(3, device=device)
    assert a.to(device) is a
    b = a.to("cpu")
    assert b.device == "cpu" and b.to_host().tolist() == [1.0, 1.0, 1.0]
    assert a.cpu().device == "cpu"


@pytest.mark.parametrize("dtype", ALL)
def test_host_conversions(device: str, dtype: str, rng) -> None:
    x, a = make(rng, (2, 3), dtype, device)
    np.testing.assert_array_equal(np.asarray(a), x)
    np.testing.assert_array_equal(np.array(a, copy=True), x)
    h = a.to_host()
    assert h.dtype == np_dtype(dtype) and h.flags.c_contiguous
    listed = a.tolist()
    assert np.array(listed).shape == (2, 3)
    one = a[1, 2]
    assert one.shape == ()
    item = one.item()
    assert isinstance(item, {"bool": bool}.get(dtype, float if dtype in FLOATS else int))
    assert item == (float(x[1, 2]) if dtype in FLOATS else x[1, 2].item())
    assert float(one) == float(x[1, 2])
    if dtype != "bool":
        assert bool(one) == bool(x[1, 2])
    with pytest.raises(
        ValueError, match=r"item: only an array of one element .* got shape \(2, 3\)"
    ):
        a.item()
    with pytest.raises(ValueError, match="ambiguous"):
        bool(a)
    assert [r.shape for r in a] == [(3,), (3,)]


def test_numpy_view_on_cpu_is_zero_copy() -> None:
    a = ignis.zeros(4, device="cpu")
    view = np.asarray(a)
    view[1] = 5.0
    assert a[1].item() == 5.0
    with pytest.raises(ValueError, match="copy"):
        np.asarray(a, dtype=np.float64, copy=False)
    assert np.asarray(a, dtype=np.float64).dtype == np.float64


def test_index_dunder(device: str) -> None:
    i = NvArray.from_host(2, device=device)
    assert [10, 20, 30][i] == 30
    assert ignis.arange(5, device=device)[i].item() == 2
    with pytest.raises(TypeError, match="only 0-dimensional integer arrays"):
        [1, 2][ignis.ones((), device=device)]


def test_repr_str_and_pickle(device: str) -> None:
    a = NvArray.from_host([[1.5, 2.0]], dtype="bfloat16", device=device)
    r = repr(a)
    assert (
        r.startswith("NvArray([[1.5, 2. ]]") and "dtype=bfloat16" in r and f"device='{device}'" in r
    )
    assert "1.5" in str(a)
    b = pickle.loads(pickle.dumps(a))
    assert (
        b.dtype == "bfloat16"
        and b.device == device
        and b.to_host().tolist() == a.to_host().tolist()
    )


def test_views_of_empty_arrays(device: str) -> None:
    a = ignis.zeros((3, 0, 2), device=device)
    assert a[1:].shape == (2, 0, 2) and a.T.shape == (2, 0, 3) and a.reshape(0, 5).shape == (0, 5)
    assert a[5:].shape == (0, 0, 2)
    b = ignis.arange(5, device=device)
    assert b[10:].shape == (0,) and b[-10::-1].shape == (0,)
    assert b[10:].to_host().shape == (0,)
    b[3:3] = 7
    assert b.to_host().tolist() == [0, 1, 2, 3, 4]
