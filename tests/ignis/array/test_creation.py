"""Constructors: empty/zeros/ones/full/arange/from_host/asarray and the *_like forms."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from array_helpers import ALL, np_dtype, random_array

import ignis
from ignis import NvArray


@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("shape", [(), (0,), (1,), (3, 4), (2, 0, 3), (2, 3, 4, 5)])
def test_zeros_ones_full_empty(device: str, dtype: str, shape) -> None:
    z = NvArray.zeros(shape, dtype=dtype, device=device)
    assert z.shape == shape and z.dtype == dtype and z.device == device
    assert z.is_contiguous and z.numel == int(np.prod(shape)) and z.size == z.numel
    assert z.nbytes == z.numel * np_dtype(dtype).itemsize
    np.testing.assert_array_equal(z.to_host(), np.zeros(shape, np_dtype(dtype)))
    o = ignis.ones(shape, dtype=dtype, device=device)
    np.testing.assert_array_equal(o.to_host(), np.ones(shape, np_dtype(dtype)))
    value = True if dtype == "bool" else 3
    f = NvArray.full(shape, value, dtype=dtype, device=device)
    np.testing.assert_array_equal(f.to_host(), np.full(shape, value, np_dtype(dtype)))
    e = NvArray.empty(shape, dtype=dtype, device=device)
    assert e.shape == shape and e.dtype == dtype
    if e.numel:
        assert e.strides == np.empty(shape, np_dtype(dtype)).strides


def test_creation_defaults_and_shape_forms(device: str) -> None:
    assert ignis.zeros(3, device=device).dtype == "float32"
    assert ignis.zeros([2, 3], device=device).shape == (2, 3)
    assert ignis.zeros(np.int64(4), device=device).shape == (4,)
    assert ignis.full((2,), 2.5, device=device).to_host().tolist() == [2.5, 2.5]
    assert ignis.full((2,), 1.0e10, dtype="float16", device=device).to_host()[0] == np.inf


def test_creation_errors(device: str) -> None:
    with pytest.raises(ignis.ShapeError, match=r"zeros: negative dimension in shape \(2, -1\)"):
        ignis.zeros((2, -1), device=device)
    with pytest.raises(ignis.DTypeError, match="ones: unsupported dtype 'complex32'"):
        ignis.ones(2, dtype="complex32", device=device)
    with pytest.raises(OverflowError, match="full: Python integer 300 is out of bounds for uint8"):
        ignis.full(2, 300, dtype="uint8", device=device)
    with pytest.raises(ignis.DTypeError, match="full: cannot store the complex value"):
        ignis.full(2, 1j, dtype="float32", device=device)
    with pytest.raises(TypeError, match="cannot be constructed directly"):
        NvArray([1, 2])


@pytest.mark.parametrize(
    "args,kwargs",
    [
        ((5,), {}),
        ((2, 9), {}),
        ((2, 9, 3), {}),
        ((9, 2, -2), {}),
        ((0.0, 1.0, 0.1), {}),
        ((1, -3), {}),
        ((-1.5, 2.0, 0.25), {}),
        ((5,), {"dtype": "float16"}),
        ((3, 10, 2), {"dtype": "int8"}),
        ((0, 1, 0.125), {"dtype": "bfloat16"}),
        ((10,), {"dtype": "float32"}),
    ],
)
def test_arange_matches_numpy(device: str, args, kwargs) -> None:
    a = NvArray.arange(*args, device=device, **kwargs)
    dtype = kwargs.get("dtype")
    ref = np.arange(*args, dtype=np.float64 if dtype and "float" in dtype else None)
    if dtype:
        ref = ref.astype(np_dtype(dtype))
    elif ref.dtype == np.float64:  # float bounds: the default float dtype, float32
        ref = np.arange(*args).astype(np.float32)
    assert a.dtype.numpy == ref.dtype and a.shape == ref.shape
    np.testing.assert_array_equal(a.to_host(), ref)


def test_arange_errors(device: str) -> None:
    with pytest.raises(ValueError, match="arange: step must not be zero"):
        ignis.arange(0, 5, 0, device=device)
    with pytest.raises(ignis.DTypeError, match="arange: stop must be an int or a float"):
        ignis.arange(0, "5", device=device)


@pytest.mark.parametrize("dtype", ALL)
def test_from_host_numpy_round_trip(device: str, dtype: str, rng) -> None:
    x = random_array(rng, (3, 5), dtype)
    a = NvArray.from_host(x, device=device)
    assert a.dtype == dtype and a.shape == (3, 5)
    np.testing.assert_array_equal(a.to_host(), x)
    x[0, 0] = x[1, 1]  # a copy: the source can change
    t = NvArray.from_host(x.T, device=device)  # non-contiguous source
    np.testing.assert_array_equal(t.to_host(), x.T)


def test_from_host_inference_shape_and_dtype(device: str) -> None:
    # Python floats: the default float (float32); NumPy's float64 values keep their dtype
    assert NvArray.from_host([1.0, 2.0], device=device).dtype == "float32"
    assert NvArray.from_host(np.array([1.0, 2.0]), device=device).dtype == "float64"
    assert NvArray.from_host([1, 2], device=device).dtype == "int64"
    assert NvArray.from_host([True], device=device).dtype == "bool"
    a = NvArray.from_host([1, 2, 3, 4, 5, 6], shape=(2, 3), dtype="float16", device=device)
    assert a.shape == (2, 3) and a.dtype == "float16"
    np.testing.assert_array_equal(a.to_host(), np.arange(1, 7, dtype=np.float16).reshape(2, 3))
    s = NvArray.from_host(2.5, device=device)
    assert s.shape == () and s.item() == 2.5
    b = NvArray.from_host([0.1, 0.2], dtype="bfloat16", device=device)
    assert b.to_host().dtype == np.dtype(ml_dtypes.bfloat16)
    c = NvArray.from_host(a, device=device)  # from another NvArray: a copy
    c.fill_(0)
    assert a.to_host()[0, 0] == 1


def test_from_host_errors(device: str) -> None:
    with pytest.raises(ignis.ShapeError, match=r"from_host: 4 values cannot take shape \(3,\)"):
        NvArray.from_host([1, 2, 3, 4], shape=(3,), device=device)
    with pytest.raises(ignis.ShapeError, match="from_host: cannot convert list"):
        NvArray.from_host([[1, 2], [3]], device=device)
    with pytest.raises(ignis.DTypeError, match="from_host: unsupported dtype"):
        NvArray.from_host(np.zeros(3, np.clongdouble), device=device)
    with pytest.raises(ignis.DTypeError, match="from_host: cannot convert values of NumPy dtype"):
        NvArray.from_host(["a", "b"], device=device)


def test_asarray_shares_numpy_memory_on_cpu() -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    a = ignis.asarray(x, device="cpu")
    assert a.dtype == "float32" and a.shape == (3, 4)
    x[1, 2] = 100.0
    assert a[1, 2].item() == 100.0  # zero-copy
    a[0, 0] = -5.0
    assert x[0, 0] == -5.0
    t = ignis.asarray(x.T[::2], device="cpu")  # strided sources are shared too
    np.testing.assert_array_equal(t.to_host(), x.T[::2])
    assert t.strides == x.T[::2].strides
    x[0, 0] = 7
    assert t[0, 0].item() == 7
    c = ignis.asarray(x, device="cpu", copy=True)
    x[0, 0] = 8
    assert c[0, 0].item() == 7


def test_asarray_copies_when_it_must() -> None:
    ro = np.arange(4.0)
    ro.flags.writeable = False
    a = ignis.asarray(ro, device="cpu")
    a[0] = 9.0
    assert ro[0] == 0.0
    with pytest.raises(ValueError, match="copy=False"):
        ignis.asarray([1, 2], device="cpu", copy=False)
    b = ignis.asarray(np.arange(3, dtype=np.int16), dtype="int32", device="cpu")
    assert b.dtype == "int32"
    s = ignis.asarray(3.5, device="cpu")
    assert s.shape == () and s.dtype == "float32"  # the default float
    assert ignis.asarray(np.float64(3.5), device="cpu").dtype == "float64"
    # full: a Python float gives the default float, a NumPy scalar keeps its dtype
    assert ignis.full(2, 1.5, device="cpu").dtype == "float32"
    assert ignis.full(2, np.float64(1.5), device="cpu").dtype == "float64"
    assert ignis.full(2, True, device="cpu").dtype == "bool"


def test_asarray_of_nvarray(device: str) -> None:
    a = ignis.arange(4, device=device)
    assert ignis.asarray(a) is a
    assert ignis.asarray(a, device=device) is a
    b = ignis.asarray(a, dtype="float32")
    assert b.dtype == "float32" and b is not a
    c = ignis.asarray(a, copy=True)
    c.fill_(0)
    assert a.to_host().tolist() == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="copy=False"):
        ignis.asarray(a, dtype="float32", copy=False)


def test_like_constructors(device: str, rng) -> None:
    a = NvArray.from_host(random_array(rng, (2, 3), "float16"), device=device)
    for fn, value in ((ignis.zeros_like, 0), (ignis.ones_like, 1)):
        b = fn(a)
        assert b.shape == a.shape and b.dtype == "float16" and b.device == device
        assert (b.to_host() == value).all()
    assert ignis.empty_like(a, dtype="int8").dtype == "int8"
    f = ignis.full_like(a, 4, dtype="int32")
    assert f.to_host().tolist() == [[4, 4, 4]] * 2
    with pytest.raises(TypeError, match="expected an NvArray"):
        ignis.zeros_like(np.zeros(3))


def test_adopt_sets_every_field_of_an_array(device: str) -> None:
    # adopt (and the direct functions of the CUDA backend, which run its body inline) must set
    # every slot of NvArray: a slot added later without a line there would be left unset.
    from ignis._array import _creation

    base = NvArray.zeros((2, 3), dtype="int32", device=device)
    fields = [name for name in NvArray.__slots__ if name != "__weakref__"]
    made = _creation.adopt(
        base._storage, (3, 2), (8, 4), base._dtype, base._device, base._backend, base._stream
    )
    for name in fields:
        getattr(made, name)  # raises AttributeError for a slot left unset
    assert (made.shape, made.strides, made.dtype, made.device) == ((3, 2), (8, 4), "int32", device)
    assert made._offset == 0 and made._storage is base._storage
