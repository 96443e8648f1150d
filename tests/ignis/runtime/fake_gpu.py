"""A stand-in GPU for tests of the host side of ignis where no GPU exists.

:func:`install` makes device ``ordinal`` a fake sm_90 device and replaces the driver entry points
that memory, streams and kernel launches reach with recorders that return success (or a status
a test sets). Everything else is the real code. Kernels of the library are parsed from their
source (no compilation, no module load) and launch through the real ``Kernel.launch`` path.
All of it is undone by the ``monkeypatch`` fixture it is given.
"""

from __future__ import annotations

import ctypes
import functools
import gc
import threading
import types
from collections import defaultdict
from typing import Any

import ignis._bindings as bindings
import ignis._device as device_module
import ignis._kernel as kernel_module
import ignis._memory as memory_module
import ignis._stream as stream_module
import ignis._tensor_map as tensor_map_module
import pytest
from ignis._arg_packing import ArgPacker
from ignis._array import _backend
from ignis._array._cuda_backend import elementwise as ew
from ignis._array._cuda_backend import reduction
from ignis._array._cuda_backend._strided import StridedPacker
from ignis._bindings import cu, driver
from ignis._device import Device
from ignis._kernel import Kernel
from ignis._sources import read_source

SUCCESS = driver.CUresult.CUDA_SUCCESS

# The next address a fake hands out: live allocations never overlap (as on a device), and the
# planning caches that tell buffers apart by address see distinct, disjoint blocks.
_next_address = [0x7F00_0000_0000]
_allocated: dict[int, int] = {}  # address -> bytes, of every fake's live allocations

PROPERTIES = {
    "max_threads_per_block": 1024,
    "max_block_dim": (1024, 1024, 64),
    "max_grid_dim": (2**31 - 1, 65535, 65535),
    "max_shared_memory_per_block": 48 * 1024,
    "max_shared_memory_per_block_optin": 227 * 1024,
    "cooperative_launch": True,
    "multiprocessor_count": 132,
    "memory_pools_supported": True,
    "compute_capability_major": 9,
    "compute_capability_minor": 0,
}

_DRIVER_CALLS = (
    "cuMemAllocAsync",
    "cuMemFreeAsync",
    "cuDeviceGetDefaultMemPool",
    "cuMemPoolSetAttribute",
    "cuMemPoolGetAttribute",
    "cuMemGetInfo",
    "cuCtxSetCurrent",
    "cuMemsetD8Async",
    "cuMemsetD16Async",
    "cuMemsetD32Async",
    "cuMemcpyDtoDAsync",
    "cuTensorMapEncodeTiled",
)


class FakeGpu:
    """What the fake driver saw: ``calls[name]`` lists each call's arguments; ``launches``
    lists ``(kernel name, grid, block, stream handle, argument values)``."""

    def __init__(self, devices: list[Device]):
        self.devices = devices
        self.calls: dict[str, list[tuple[Any, ...]]] = defaultdict(list)
        self.launches: list[tuple[str, Any, Any, int, list[bytes]]] = []
        self.status: dict[str, Any] = {}  # driver call name -> status it returns instead
        self.live: dict[int, int] = {}  # address -> bytes, of this fake's live allocations
        self._lock = threading.Lock()

    @property
    def device(self) -> Device:
        return self.devices[0]

    def _driver(self, name: str, *args: Any) -> tuple[Any, ...]:
        with self._lock:
            self.calls[name].append(args)
            status = self.status.get(name, SUCCESS)
            if status is not SUCCESS:
                return (status,)
            if name == "cuMemAllocAsync":
                ptr = _next_address[0]  # distinct over all fakes: 512-byte aligned
                _next_address[0] += -(-max(int(args[0]), 1) // 512) * 512
                self.live[ptr] = _allocated[ptr] = args[0]
                return (SUCCESS, driver.CUdeviceptr(ptr))
            if name == "cuMemFreeAsync":
                ptr = int(args[0])
                assert _allocated.pop(ptr, 0) > 0, f"{ptr:#x} freed twice, or never allocated"
                self.live.pop(ptr, None)  # (a buffer a failed test kept can come back later)
            if name == "cuDeviceGetDefaultMemPool":
                return (SUCCESS, driver.CUmemoryPool(0x1000))
            if name == "cuMemPoolGetAttribute":
                return (SUCCESS, driver.cuuint64_t(0))
            if name == "cuMemGetInfo":
                return (SUCCESS, 1 << 30, 141 << 30)
            if name == "cuTensorMapEncodeTiled":  # opaque bytes: the call's arguments say it all
                return (SUCCESS, driver.CUtensorMap())
            return (SUCCESS,)


def install(
    monkeypatch: pytest.MonkeyPatch, ordinals: tuple[int, ...] = (0,), cache_bytes: int = 0
) -> FakeGpu:
    """Fake devices ``ordinals`` (the first one current) and driver; undone by ``monkeypatch``.

    ``cache_bytes``: the memory resources' block cache (off by default, so that every free
    reaches the fake driver where tests look for it).

    Skips the calling test where a real GPU is present: a fake driver swapped into a process
    that also drives the real GPU leaves it broken for the tests after it (kernels compiled
    meanwhile would keep fake handles, frees would be swallowed); the GPU tests cover the real
    driver there."""
    import ignis

    if ignis.is_available():
        pytest.skip("fake driver tests: the GPU tests cover the real driver")
    devices = []
    for ordinal in ordinals:
        dev = object.__new__(Device)
        dev.ordinal = ordinal
        dev._handle = None
        dev._context = object()
        dev._context_lock = threading.Lock()
        dev._properties = dict(PROPERTIES, ordinal=ordinal)
        monkeypatch.setitem(device_module._devices, ordinal, dev)
        devices.append(dev)
    gpu = FakeGpu(devices)
    monkeypatch.setitem(bindings._init_state, "done", True)
    monkeypatch.setitem(bindings._init_state, "ok", True)
    monkeypatch.setattr(device_module._tls, "device", devices[0], raising=False)
    monkeypatch.setattr(device_module._tls, "active", devices[0], raising=False)
    for name in _DRIVER_CALLS:
        fake = functools.partial(gpu._driver, name)
        monkeypatch.setattr(driver, name, fake)
        # ``cu``'s checked wrapper of the call, around the fake (and removed again afterwards)
        checked = functools.partial(_checked, fake, name)
        monkeypatch.setattr(cu, name, checked, raising=False)
    # Fresh per-device state of the modules under test, dropped again afterwards.
    monkeypatch.setattr(memory_module, "_resources", {})
    monkeypatch.setattr(memory_module, "_stats", {})
    monkeypatch.setattr(memory_module, "_logs", {})
    monkeypatch.setattr(memory_module, "CACHE_BYTES", cache_bytes)
    monkeypatch.setattr(tensor_map_module, "_cache", {})  # maps of earlier fakes' addresses
    monkeypatch.setattr(stream_module, "_default_streams", {})
    monkeypatch.setattr(stream_module._tls, "streams", {}, raising=False)
    # Kernels: parsed from the library source, "loaded" without a driver, launched into a recorder.
    monkeypatch.setattr(ew, "library_kernel", _library_kernel)
    monkeypatch.setattr(reduction, "library_kernel", _library_kernel)
    # The caches start empty (and uninstall empties them again: they hold kernels and plans of
    # the fake). There is no real GPU here, and the memory state above is the fake's own.
    ignis.clear_caches()

    def launch(function: Any, gx, gy, gz, bx, by, bz, smem, stream, params, extra) -> tuple:
        state = function
        values = _read_params(params, state.sizes)
        gpu.launches.append((state.name, (gx, gy, gz), (bx, by, bz), int(stream), values))
        return (SUCCESS,)

    monkeypatch.setattr(kernel_module, "_launch_kernel", launch)
    monkeypatch.setattr(kernel_module._Loaded, "load", classmethod(_load))
    _backend.register_backend("cuda", None)  # the cuda backend is built anew, on the fake device
    return gpu


def record_optin(monkeypatch: pytest.MonkeyPatch, gpu: FakeGpu) -> None:
    """Record each kernel's shared-memory opt-in (``cuFuncSetAttribute``: kernels above 48 KiB
    opt in per function) as ``(kernel name, bytes)`` in ``gpu.optin``."""
    gpu.optin = []
    monkeypatch.setattr(
        cu,
        "cuFuncSetAttribute",
        lambda fn, attr, value: gpu.optin.append((fn.name, value)),
        raising=False,
    )


def uninstall() -> None:
    """Free what the test left and drop the cuda backends built on the fake devices; call it
    before the monkeypatch undo (a fixture's teardown, after ``yield``)."""
    gc.collect()
    _backend.register_backend("cuda", None)
    import ignis

    ignis.clear_caches()  # kernels and plans of the fake device


def _checked(fn: Any, name: str, *args: Any) -> Any:
    bindings.ensure_driver()
    return bindings.check(fn(*args), name)


def _library_kernel(source_file: str, name: str, device: Device, arch: str | None = None) -> Kernel:
    code = types.SimpleNamespace(lowered_names={}, kind="cubin", arch=arch or "sm_90")
    return Kernel.from_object_code(code, name, read_source(source_file))


def _struct_size(ctype: str) -> int:
    """What the driver would report for the library's by-value structs."""
    if ctype.startswith("StridedArgs<"):
        return StridedPacker(int(ctype[len("StridedArgs<") : -1])).size
    if ctype.endswith("OuterLayout"):
        return 8 * 8 + 8 * 8 + 4 + 4  # int64 sizes[8], strides[8]; int32 ndim, reserved
    if ctype == "Layout":  # the attention kernels' strides
        from ignis._array._cuda_backend.attention import LAYOUT

        return LAYOUT.size
    if ctype in ("ignis::complex64", "complex64"):  # cuda_src/complex.cuh: float2 / double2
        return 8
    if ctype in ("ignis::complex128", "complex128"):
        return 16
    if ctype.endswith("tma::TensorMap"):  # a CUtensorMap
        from ignis._tensor_map import MAP_BYTES

        return MAP_BYTES
    raise AssertionError(f"fake_gpu: unknown struct parameter {ctype!r}")


def _load(cls: type, kernel: Kernel, device: Device) -> Any:
    sizes = [p.size if p.size is not None else _struct_size(p.ctype) for p in kernel.params]
    packer = ArgPacker(kernel.params, kernel.name, param_sizes=sizes)
    limits = dict(device.properties)
    limits["kernel_max_threads_per_block"] = 1024
    limits["kernel_static_shared_bytes"] = 0
    function = types.SimpleNamespace(name=kernel.name, sizes=sizes)
    return cls(device, function, packer, limits, name=kernel.name)


def _read_params(address: int, sizes: list[int]) -> list[bytes]:
    slots = [ctypes.c_uint64.from_address(address + 8 * i).value for i in range(len(sizes))]
    return [ctypes.string_at(slot, size) for slot, size in zip(slots, sizes, strict=True)]
