"""DLPack (both directions) and the CUDA Array Interface."""

from __future__ import annotations

import gc
import weakref

import ml_dtypes
import numpy as np
import pytest
from array_helpers import ALL, FakeCudaBackend, np_dtype, random_array
from ignis._array import _backend, _interop

import ignis
from ignis import NvArray


class Exporter:
    """Hands over another object's DLPack capsule (forces the capsule path of from_dlpack)."""

    def __init__(self, arr, legacy: bool = False):
        self.arr = arr
        self.legacy = legacy

    def __dlpack__(self, stream=None, max_version=None, **kwargs):
        if self.legacy:
            return self.arr.__dlpack__(stream=stream)
        return self.arr.__dlpack__(stream=stream, max_version=max_version, **kwargs)

    def __dlpack_device__(self):
        return self.arr.__dlpack_device__()


@pytest.mark.parametrize("dtype", [d for d in ALL if d != "bfloat16"])
def test_numpy_consumes_cpu_arrays_zero_copy(dtype: str, rng) -> None:
    x = random_array(rng, (3, 4), dtype)
    a = NvArray.from_host(x, device="cpu")
    assert a.__dlpack_device__() == (1, 0)
    h = np.from_dlpack(a)
    np.testing.assert_array_equal(h, x)
    h[0, 0] = h[1, 1]
    x[0, 0] = x[1, 1]
    assert a[0, 0].item() == a[1, 1].item()  # same memory
    t = np.from_dlpack(a.T[::2])  # strided export
    np.testing.assert_array_equal(t, x.T[::2])


@pytest.mark.parametrize("dtype", [d for d in ALL if d != "bfloat16"])
def test_from_dlpack_of_numpy_zero_copy(dtype: str, rng) -> None:
    x = random_array(rng, (4, 6), dtype)
    a = ignis.from_dlpack(x)
    assert a.device == "cpu" and a.dtype == dtype
    np.testing.assert_array_equal(a.to_host(), x)
    view = x[::-1, 1::2]
    b = ignis.from_dlpack(view)
    np.testing.assert_array_equal(b.to_host(), view)
    x[3, 1] = x[0, 0]
    assert b[0, 0].item() == x[3, 1].item()


@pytest.mark.parametrize("legacy", [False, True])
@pytest.mark.parametrize("dtype", ALL)
def test_round_trip_through_capsules(dtype: str, legacy: bool, rng) -> None:
    x = random_array(rng, (5, 3), dtype)
    a = NvArray.from_host(x, device="cpu")
    b = ignis.from_dlpack(Exporter(a.T, legacy=legacy))
    assert b.dtype == dtype and b.shape == (3, 5) and b.strides == a.T.strides
    np.testing.assert_array_equal(b.to_host(), x.T)
    b.fill_(True if dtype == "bool" else 1)
    assert (a.to_host() == np.ones(1, np_dtype(dtype))).all()  # shared


def test_bfloat16_travels_as_kdlbfloat(rng) -> None:
    x = random_array(rng, (4,), "bfloat16")
    a = NvArray.from_host(x, device="cpu")
    b = ignis.from_dlpack(Exporter(a))
    assert b.dtype == "bfloat16" and b.to_host().dtype == np.dtype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(b.to_host(), x)


def test_export_lifetime() -> None:
    before = len(_interop._exports)
    a = ignis.arange(10.0, device="cpu")
    h = np.from_dlpack(a)
    assert len(_interop._exports) == before + 1
    del a
    gc.collect()
    np.testing.assert_array_equal(h, np.arange(10.0))  # the export keeps the memory alive
    del h
    gc.collect()
    assert len(_interop._exports) == before
    capsule = ignis.zeros(3, device="cpu").__dlpack__()
    assert len(_interop._exports) == before + 1
    del capsule  # never consumed: the capsule destructor releases it
    gc.collect()
    assert len(_interop._exports) == before


def test_import_lifetime_calls_the_producer_deleter() -> None:
    x = np.arange(6.0)
    ref = weakref.ref(x)
    a = ignis.from_dlpack(x)
    del x
    gc.collect()
    assert ref() is not None  # the producer's export holds the array while we view it
    v = a[2:]
    del a
    gc.collect()
    assert ref() is not None and v.to_host().tolist() == [2.0, 3.0, 4.0, 5.0]
    del v
    gc.collect()
    assert ref() is None


def test_dlpack_copy_and_device_arguments() -> None:
    a = ignis.arange(4.0, device="cpu")
    c = np.from_dlpack(a, copy=True)
    c[0] = 99
    assert a[0].item() == 0.0
    cap = a.__dlpack__(dl_device=(1, 0), copy=False)
    assert cap is not None
    with pytest.raises(BufferError, match="cannot export to DLPack device"):
        a.__dlpack__(dl_device=(2, 0))
    with pytest.raises(BufferError, match="needs a copy"):
        a.__dlpack__(dl_device=(2, 0), copy=False)
    b = ignis.from_dlpack(np.arange(3.0), copy=True)
    assert b.to_host().tolist() == [0.0, 1.0, 2.0]
    with pytest.raises(TypeError, match="from_dlpack: list does not implement __dlpack__"):
        ignis.from_dlpack([1, 2])
    with pytest.raises(ignis.DTypeError, match="from_dlpack: unsupported DLPack dtype"):
        ignis.from_dlpack(np.zeros(3, np.int16))
    capsule = a.__dlpack__()
    np.from_dlpack(
        Exporter(
            type(
                "C",
                (),
                {"__dlpack__": lambda self, **k: capsule, "__dlpack_device__": lambda self: (1, 0)},
            )()
        )
    )
    with pytest.raises(BufferError, match="already consumed"):
        _interop._consume(capsule, ignis.get_default_device(), None)


def test_read_only_producers_are_copied() -> None:
    x = np.arange(4.0)
    x.flags.writeable = False
    a = ignis.from_dlpack(x)
    a[0] = 5.0
    assert x[0] == 0.0 and a.to_host().tolist() == [5.0, 1.0, 2.0, 3.0]
    with pytest.raises(BufferError, match="read-only and copy=False"):
        ignis.from_dlpack(x, copy=False)


def test_asarray_imports_dlpack_objects() -> None:
    a = ignis.arange(5.0, device="cpu")
    b = ignis.asarray(Exporter(a))
    b[0] = 42.0
    assert a[0].item() == 42.0


def test_cpu_arrays_have_no_cuda_array_interface() -> None:
    a = ignis.zeros(3, device="cpu")
    assert not hasattr(a, "__cuda_array_interface__")
    with pytest.raises(
        AttributeError, match="exists only for arrays on a CUDA device; this array is on cpu"
    ):
        _ = a.__cuda_array_interface__


@pytest.fixture
def fake_cuda():
    _backend.register_backend("cuda", FakeCudaBackend.create)
    yield
    _backend.register_backend("cuda", None)


def test_cuda_array_interface_export_and_import(fake_cuda, rng) -> None:
    x = random_array(rng, (3, 4), "float32")
    a = NvArray.from_host(x, device="cuda:0")
    cai = a.__cuda_array_interface__
    assert cai["shape"] == (3, 4) and cai["typestr"] == "<f4" and cai["version"] == 3
    assert cai["strides"] is None and cai["data"] == (a.data_ptr, False) and cai["stream"] == 1
    t = a.T.__cuda_array_interface__
    assert t["strides"] == (4, 16)
    with pytest.raises(AttributeError, match="bfloat16"):
        _ = a.astype("bfloat16").__cuda_array_interface__

    class Foreign:
        def __init__(self, iface):
            self.__cuda_array_interface__ = iface

    b = ignis.asarray(Foreign(t), device="cuda:0")  # zero-copy import of the transposed view
    assert b.shape == (4, 3) and b.device == "cuda:0"
    np.testing.assert_array_equal(b.to_host(), x.T)
    b[0, 0] = -1.0
    assert a[0, 0].item() == -1.0
    e = ignis.asarray(Foreign(ignis.zeros((0, 2), device="cuda:0").__cuda_array_interface__))
    assert e.shape == (0, 2)
    with pytest.raises(BufferError, match="masked"):
        ignis.asarray(Foreign({**cai, "mask": object()}))


# --- with PyTorch and CuPy (where installed; on the GPU machine for cuda) -------------------------


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int64", "bool"])
def test_torch_round_trip(device: str, dtype: str) -> None:
    torch = pytest.importorskip("torch")
    tdev = "cpu" if device == "cpu" else device
    t = torch.arange(12, device=tdev).reshape(3, 4).to(getattr(torch, dtype))
    a = ignis.from_dlpack(t)
    assert a.device == device and a.dtype == dtype and a.shape == (3, 4)
    b = ignis.from_dlpack(t.t())
    assert b.strides == (a.itemsize, 4 * a.itemsize)
    a[0, 0] = True if dtype == "bool" else 7
    a._backend.synchronize()  # ignis wrote on its stream; torch reads on its own
    assert bool(t[0, 0].item() == (True if dtype == "bool" else 7))  # shared memory
    back = torch.from_dlpack(a.T)
    assert back.shape == (4, 3) and back.data_ptr() == t.data_ptr()
    assert torch.equal(back, t.t())


@pytest.mark.gpu
def test_cupy_cuda_array_interface(device: str) -> None:
    if device == "cpu":
        pytest.skip("the CUDA Array Interface is for cuda arrays")
    cupy = pytest.importorskip("cupy")
    c = cupy.arange(10, dtype=cupy.float32)[::2]
    a = ignis.asarray(c, device=device)
    assert a.shape == (5,) and a.strides == (8,) and a.data_ptr == c.data.ptr
    np.testing.assert_array_equal(a.to_host(), cupy.asnumpy(c))
    back = cupy.asarray(a)
    assert back.data.ptr == a.data_ptr
    back[0] = 42
    assert a[0].item() == 42.0
