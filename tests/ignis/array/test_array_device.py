"""Array devices, the default device and the backend registry."""

from __future__ import annotations

import pickle

import pytest
from array_helpers import FakeCudaBackend
from ignis._array import _backend, _device
from ignis._array._device import ArrayDevice, as_device

import ignis
from ignis import _bindings


@pytest.fixture
def clean_default(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("IGNIS_DEVICE", raising=False)
    ignis.set_default_device(None)
    yield monkeypatch
    ignis.set_default_device(None)


@pytest.fixture
def fake_cuda():
    _backend.register_backend("cuda", FakeCudaBackend.create)
    yield
    _backend.register_backend("cuda", None)


@pytest.mark.parametrize(
    "spec,expected,kind,index",
    [
        ("cpu", "cpu", "cpu", None),
        ("CPU", "cpu", "cpu", None),
        ("cuda", "cuda:0", "cuda", 0),
        ("cuda:3", "cuda:3", "cuda", 3),
        (1, "cuda:1", "cuda", 1),
        ("gpu:2", "cuda:2", "cuda", 2),
    ],
)
def test_device_parsing(spec, expected, kind, index) -> None:
    d = as_device(spec)
    assert isinstance(d, ArrayDevice) and isinstance(d, str)
    assert d == expected and d.type == kind and d.index == index
    assert as_device(d) is d
    assert pickle.loads(pickle.dumps(d)) == d
    assert repr(d) == f"device('{expected}')"


@pytest.mark.parametrize("bad", ["tpu", "cuda:x", "cuda:-1", -1, True, ""])
def test_bad_devices(bad) -> None:
    with pytest.raises(ValueError, match="device"):
        as_device(bad)


def test_default_device_order(clean_default: pytest.MonkeyPatch) -> None:
    auto = ignis.get_default_device()
    assert auto == ("cuda:0" if _device._cuda_usable() else "cpu")
    clean_default.setenv("IGNIS_DEVICE", "cuda:1")
    assert ignis.get_default_device() == "cuda:1"
    ignis.set_default_device("cpu")
    assert ignis.get_default_device() == "cpu"  # explicit beats the environment
    ignis.set_default_device(None)
    clean_default.setenv("IGNIS_DEVICE", "bogus")
    with pytest.raises(ValueError, match="IGNIS_DEVICE: invalid device 'bogus'"):
        ignis.get_default_device()


def test_arrays_go_to_the_default_device(clean_default: pytest.MonkeyPatch) -> None:
    ignis.set_default_device("cpu")
    assert ignis.zeros(3).device == "cpu"
    assert ignis.NvArray.from_host([1, 2]).device == "cpu"


@pytest.mark.skipif(_bindings.driver_available(), reason="checks the no-GPU error")
def test_cuda_without_gpu_raises_no_device_error() -> None:
    with pytest.raises(ignis.NoDeviceError, match="no CUDA device is available"):
        ignis.zeros(3, device="cuda:0")
    with pytest.raises(ignis.NoDeviceError):
        _backend.get_backend("cuda")


def test_backend_registry_and_fake_cuda(fake_cuda) -> None:
    a = ignis.ones((2, 2), device="cuda:0")
    assert a.device == "cuda:0" and a.device.type == "cuda"
    assert _backend.get_backend("cuda:0") is a._backend
    assert _backend.get_backend("cpu").kind == "cpu"
    b = ignis.ones((2, 2), device="cpu")
    with pytest.raises(
        ignis.DeviceMismatchError,
        match=r"add: operands are on different devices \(cuda:0 and cpu\)",
    ):
        a + b
    with pytest.raises(ignis.DeviceMismatchError):
        ignis.matmul(a, b)
    with pytest.raises(ignis.DeviceMismatchError):
        ignis.where(a > 0, a, b)
    with pytest.raises(ignis.DeviceMismatchError):
        ignis.concatenate([a, b])
    with pytest.raises(ignis.DeviceMismatchError):
        ignis.accumulate(b, a)
    c = a.to("cpu") + b  # explicit moves work
    assert c.device == "cpu" and c.to_host().tolist() == [[2.0, 2.0], [2.0, 2.0]]
    b.copy_(a * 3)  # copy_ is the explicit cross-device transfer
    assert b.to_host().tolist() == [[3.0, 3.0], [3.0, 3.0]]
    assert a.__cuda_array_interface__["version"] == 3


def test_registered_factory_must_build_backends() -> None:
    class NotABackend:
        pass

    _backend.register_backend("cuda", lambda d: NotABackend())
    try:
        # the registry trusts registered factories; only the built-in cuda factory checks
        assert isinstance(_backend.get_backend("cuda:5"), NotABackend)
    finally:
        _backend.register_backend("cuda", None)
