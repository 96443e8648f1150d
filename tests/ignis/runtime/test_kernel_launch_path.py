"""The launch path of Kernel.launch, end to end, without a GPU.

The driver's launch functions are replaced by a fake that reads the ``kernelParams`` array the
way the driver does (entry i points at parameter i's bytes) while the call is in progress, and
records what it was given. Everything else (argument conversion, configuration checks and their
cache, storage reuse, device activation, error handling) is the real code.
"""

from __future__ import annotations

import ctypes
import gc
import random
import struct
import sys
import threading
import time
import types
import weakref

import ignis._device as device_module
import ignis._kernel as kernel_module
import numpy as np
import pytest
from ignis._arg_packing import ArgPacker
from ignis._bindings import driver
from ignis._device import Device
from ignis._kernel import Kernel, _Loaded
from ignis._stream import Stream

import ignis

LIMITS = {
    "max_threads_per_block": 1024,
    "max_block_dim": (1024, 1024, 64),
    "max_grid_dim": (2**31 - 1, 65535, 65535),
    "max_shared_memory_per_block": 48 * 1024,
    "max_shared_memory_per_block_optin": 227 * 1024,
    "cooperative_launch": True,
    "multiprocessor_count": 132,
    "kernel_max_threads_per_block": 1024,
    "kernel_static_shared_bytes": 0,
}

NOOP = 'extern "C" __global__ void noop(float* x, int n) {}'
AXPBY = (
    'extern "C" __global__ void axpby(float a, const float* x, double b, float* y, '
    "long long n, unsigned short flags, bool on, __half h) {}"
)
AXPBY_SIZES = [4, 8, 8, 8, 8, 2, 1, 2]
ADDR = 0x7F00_0000_0000


class FakeBuffer:
    """Like ignis.Buffer for the packer: an int .ptr (0 once closed)."""

    __slots__ = ("ptr", "closed")

    def __init__(self, ptr: int, closed: bool = False):
        self.ptr = ptr
        self.closed = closed


class FakeDriver:
    """Stands in for cuLaunchKernel / cuLaunchCooperativeKernel.

    ``sizes`` are the kernel's parameter sizes: each call reads the parameter bytes through the
    pointer array, as the driver does, and hands them to ``on_call`` (if set) before recording.
    """

    def __init__(self, sizes: list[int], cooperative: bool = False):
        self.sizes = sizes
        self.cooperative = cooperative
        self.calls: list[dict] = []
        self.status = driver.CUresult.CUDA_SUCCESS
        self.on_call = None

    def read(self, address: int) -> list[bytes]:
        if address == 0:
            return []
        slots = [
            ctypes.c_uint64.from_address(address + 8 * i).value for i in range(len(self.sizes))
        ]
        return [ctypes.string_at(slot, size) for slot, size in zip(slots, self.sizes, strict=True)]

    def __call__(self, function, gx, gy, gz, bx, by, bz, smem, stream, params, *extra):
        assert len(extra) == (0 if self.cooperative else 1)
        values = self.read(params)
        if self.on_call is not None:
            self.on_call(params, values)
        self.calls.append(
            {
                "function": function,
                "grid": (gx, gy, gz),
                "block": (bx, by, bz),
                "shared_mem": smem,
                "stream": stream,
                "values": values,
                "cooperative": self.cooperative,
            }
        )
        return (self.status,)


def fake_device(ordinal: int, **overrides) -> Device:
    dev = object.__new__(Device)
    dev.ordinal = ordinal
    dev._handle = None
    dev._context = object()
    dev._context_lock = threading.Lock()
    dev._properties = {**LIMITS, **overrides}
    return dev


def fake_stream(dev: Device, handle: int) -> Stream:
    stream = object.__new__(Stream)
    stream.device = dev
    stream.handle = driver.CUstream(handle)
    stream._owned = False
    stream._legacy = False
    stream._finalizer = None
    return stream


class Rig:
    """A fake device (or two), fake launch functions and kernels installed on them."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.monkeypatch = monkeypatch
        self.activations: list[tuple[str, int]] = []
        self.dev = fake_device(0)
        self.stream = fake_stream(self.dev, 0x5000)
        self.current = self.stream
        # The thread's active device: restored when the test ends.
        monkeypatch.setattr(device_module._tls, "active", None, raising=False)

        def activate(device: Device) -> None:
            self.activations.append((threading.current_thread().name, device.ordinal))
            device_module._tls.active = device

        monkeypatch.setattr(kernel_module, "activate", activate)
        monkeypatch.setattr(kernel_module, "current_stream", lambda: self.current)
        self.set_attribute_calls: list[int] = []
        self.occupancy = 2
        fake_cu = types.SimpleNamespace(
            cuFuncSetAttribute=lambda f, attr, value: self.set_attribute_calls.append(value),
            cuOccupancyMaxActiveBlocksPerMultiprocessor=lambda f, threads, smem: self.occupancy,
        )
        monkeypatch.setattr(kernel_module, "cu", fake_cu)

    def kernel(
        self,
        source: str = NOOP,
        name: str = "noop",
        sizes: list[int] | None = None,
        devices: list[Device] | None = None,
        driver_knows_sizes: bool = True,
        **limits,
    ) -> tuple[Kernel, dict[int, tuple[FakeDriver, FakeDriver]]]:
        sizes = [8, 4] if sizes is None else sizes
        code = types.SimpleNamespace(lowered_names={}, kind="cubin", arch="sm_90")
        k = Kernel.from_object_code(code, name, source)
        drivers = {}
        for dev in devices or [self.dev]:
            plain, coop = FakeDriver(sizes), FakeDriver(sizes, cooperative=True)
            self.monkeypatch.setattr(kernel_module, "_launch_kernel", plain)
            self.monkeypatch.setattr(kernel_module, "_launch_cooperative_kernel", coop)
            packer = ArgPacker(k.params, name, param_sizes=sizes if driver_knows_sizes else None)
            state = _Loaded(
                dev, f"function-{name}-{dev.ordinal}", packer, {**LIMITS, **limits}, name=name
            )
            k._install(state)
            drivers[dev.ordinal] = (plain, coop)
        return k, drivers


@pytest.fixture
def rig(monkeypatch: pytest.MonkeyPatch) -> Rig:
    return Rig(monkeypatch)


def noop_values(ptr: int, n: int) -> list[bytes]:
    return [struct.pack("<Q", ptr), struct.pack("<i", n)]


# --- what reaches the driver ---------------------------------------------------------------------


def test_launch_hands_the_driver_the_configuration_and_the_packed_arguments(rig: Rig) -> None:
    k, drivers = rig.kernel()
    plain, coop = drivers[0]
    rng = random.Random(1)
    expected = []
    for _ in range(50):
        ptr, n = rng.randrange(1, 2**64), rng.randrange(-(2**31), 2**31)
        k.launch(grid=3, block=128, args=[FakeBuffer(ptr), n], stream=rig.stream)
        expected.append(noop_values(ptr, n))
    assert [c["values"] for c in plain.calls] == expected
    call = plain.calls[0]
    assert call["function"] == "function-noop-0"
    assert (call["grid"], call["block"], call["shared_mem"]) == ((3, 1, 1), (128, 1, 1), 0)
    assert int(call["stream"]) == 0x5000
    assert not coop.calls
    assert k.launch_count == 50


def test_tuple_and_numpy_configurations_are_normalised(rig: Rig) -> None:
    k, drivers = rig.kernel()
    plain = drivers[0][0]
    k.launch(grid=(4, 2), block=(8, 4, 2), args=[ADDR, 7], stream=rig.stream)
    k.launch(
        grid=np.int64(5),
        block=np.uint16(64),
        args=[ADDR, 7],
        stream=rig.stream,
        shared_mem=np.int32(16),
    )
    k.launch(grid=[6, 1, 2], block=32, args=(ADDR, 7), stream=rig.stream)
    got = [(c["grid"], c["block"], c["shared_mem"]) for c in plain.calls]
    assert got == [
        ((4, 2, 1), (8, 4, 2), 0),
        ((5, 1, 1), (64, 1, 1), 16),
        ((6, 1, 2), (32, 1, 1), 0),
    ]
    assert all(
        type(v) is int for c in plain.calls for v in (*c["grid"], *c["block"], c["shared_mem"])
    )


def test_many_argument_kinds_match_an_independent_packing(rig: Rig) -> None:
    k, drivers = rig.kernel(AXPBY, "axpby", AXPBY_SIZES)
    plain = drivers[0][0]
    rng = np.random.default_rng(7)
    expected = []
    for i in range(300):
        a = float(rng.standard_normal() * 10.0 ** rng.integers(-30, 30))
        b = float(rng.standard_normal() * 10.0 ** rng.integers(-300, 300))
        x, y = int(rng.integers(1, 2**63)), int(rng.integers(1, 2**63))
        n, flags = int(rng.integers(-(2**63), 2**63 - 1)), int(rng.integers(0, 2**16))
        h = float(rng.uniform(-60000, 60000))
        on = bool(i % 2)
        # Alternate exact Python types (the fast path) with NumPy scalars and other accepted
        # values (the converters), which must give the same bytes.
        if i % 3 == 0:
            args = [a, FakeBuffer(x), b, y, n, flags, on, h]
        elif i % 3 == 1:
            args = [
                np.float64(a),
                x,
                np.float64(b),
                FakeBuffer(y),
                np.int64(n),
                np.uint16(flags),
                np.bool_(on),
                np.float64(h),
            ]
        else:
            args = [a, np.uint64(x), b, y, n, flags, int(on), h]
        k.launch(grid=1, block=32, args=args, stream=rig.stream)
        expected.append(
            [
                struct.pack("<f", a),
                struct.pack("<Q", x),
                struct.pack("<d", b),
                struct.pack("<Q", y),
                struct.pack("<q", n),
                struct.pack("<H", flags),
                struct.pack("<?", on),
                np.float16(h).tobytes(),
            ]
        )
    assert [c["values"] for c in plain.calls] == expected


def test_kernel_without_parameters_passes_null(rig: Rig) -> None:
    k, drivers = rig.kernel('extern "C" __global__ void empty() {}', "empty", [])
    k.launch(grid=1, block=1, stream=rig.stream)
    k.launch(grid=1, block=1, args=(), stream=rig.stream)
    assert len(drivers[0][0].calls) == 2
    with pytest.raises(
        ignis.LaunchError, match=r"launch of 'empty': expected 0 argument\(s\) \(none\), got 1"
    ):
        k.launch(grid=1, block=1, args=[1], stream=rig.stream)


def test_sizes_known_only_from_the_values_still_launch(rig: Rig) -> None:
    # A driver without cuFuncGetParamInfo: a struct parameter takes the size of the bytes given.
    source = 'struct P { double d; int i; };\nextern "C" __global__ void s(int a, P p, float* x) {}'
    k, drivers = rig.kernel(source, "s", [4, 16, 8], driver_knows_sizes=False)
    for i in range(3):
        raw = struct.pack("<di4x", 0.5 * i, -i)
        k.launch(grid=1, block=32, args=[i, raw, FakeBuffer(ADDR + i)], stream=rig.stream)
    assert [c["values"] for c in drivers[0][0].calls] == [
        [struct.pack("<i", i), struct.pack("<di4x", 0.5 * i, -i), struct.pack("<Q", ADDR + i)]
        for i in range(3)
    ]
    with pytest.raises(ignis.LaunchError, match=r"expected 3 argument\(s\) \(a, p, x\), got 2"):
        k.launch(grid=1, block=32, args=[1, b"12345678"], stream=rig.stream)


def test_default_stream_comes_from_current_stream(rig: Rig) -> None:
    k, drivers = rig.kernel()
    rig.current = fake_stream(rig.dev, 0x6000)
    k.launch(grid=1, block=32, args=[ADDR, 1])
    assert int(drivers[0][0].calls[-1]["stream"]) == 0x6000


def test_class_level_call_and_call_operator_take_the_same_path(rig: Rig) -> None:
    k, drivers = rig.kernel()
    Kernel.launch(k, 2, 64, [ADDR, 5], stream=rig.stream)
    k(2, 64, [ADDR, 6], stream=rig.stream)
    assert [c["values"] for c in drivers[0][0].calls] == [
        noop_values(ADDR, 5),
        noop_values(ADDR, 6),
    ]
    assert k.launch_count == 2


def test_launcher_is_generated_readable_source(rig: Rig) -> None:
    k, _ = rig.kernel(AXPBY, "axpby", AXPBY_SIZES)
    source = k.launch.source
    assert source.startswith(
        "def launch(grid, block, args=(), *, shared_mem=0, stream=None, cooperative=False):"
    )
    assert "# args[1] (x: const float*)" in source and "# args[7] (h: __half)" in source
    assert k.launch.__doc__ == Kernel.launch.__doc__
    assert k.launch.__qualname__ == "Kernel.launch"


# --- errors --------------------------------------------------------------------------------------


def test_argument_errors_name_the_kernel_and_reach_no_driver(rig: Rig) -> None:
    k, drivers = rig.kernel()
    plain = drivers[0][0]
    cases = [
        ([ADDR], r"^launch of 'noop': expected 2 argument\(s\) \(x, n\), got 1$"),
        ([ADDR, 1, 2], r"expected 2 argument\(s\) \(x, n\), got 3"),
        ([ADDR, 1.0], r"args\[1\] \(n: int\) expects an integer for int, got float 1.0"),
        ([ADDR, True], r"got bool True; pass int\(x\) if you mean 0/1"),
        ([ADDR, 2**31], r"args\[1\] \(n: int\): 2147483648 is out of range for int"),
        ([-8, 1], r"args\[0\] \(x: float\*\): address -8 is not a valid 64-bit pointer"),
        ([FakeBuffer(2**64), 1], r"address 18446744073709551616 is not a valid 64-bit pointer"),
        ([FakeBuffer(0, closed=True), 1], "FakeBuffer is closed; its memory was freed"),
        ([np.zeros(2, np.float32), 1], "NumPy array, which is in host memory"),
        ("ab", r"args must be a list or tuple with one value per parameter \(x, n\), got str"),
    ]
    pool = k._loaded[0].packer._pool
    blocks = len(pool)
    for args, pattern in cases:
        with pytest.raises(ignis.LaunchError, match=pattern):
            k.launch(grid=1, block=32, args=args, stream=rig.stream)
        assert len(pool) == blocks  # no storage lost to a refused launch
    assert not plain.calls and k.launch_count == 0
    k.launch(grid=1, block=32, args=[ADDR, 3], stream=rig.stream)
    assert plain.calls[-1]["values"] == noop_values(ADDR, 3)


def test_configuration_errors_reach_no_driver(rig: Rig) -> None:
    k, drivers = rig.kernel()
    args = [ADDR, 1]
    cases = [
        (
            {"grid": 1, "block": 2048},
            r"launch of 'noop': block \(2048, 1, 1\) has 2048 threads; "
            "this device allows at most 1024",
        ),
        ({"grid": (1, 1 << 17), "block": 32}, "65535"),
        ({"grid": 0, "block": 32}, "zero dimension"),
        ({"grid": 1, "block": 32, "shared_mem": 300 * 1024}, "at most 232448"),
        ({"grid": 1.0, "block": 32}, "grid must be an int, got float 1.0"),
        ({"grid": 1, "block": 32, "shared_mem": -1}, "shared_mem must be >= 0"),
        ({"grid": (1, 2, 3, 4), "block": 32}, "tuple of 1 to 3 ints"),
    ]
    for config, pattern in cases:
        with pytest.raises(ignis.LaunchError, match=pattern):
            k.launch(args=args, stream=rig.stream, **config)
    assert not drivers[0][0].calls


def test_a_cached_configuration_never_admits_an_equal_value_of_another_type(rig: Rig) -> None:
    # 1.0 == 1 and True == 1 (and hash alike): the cache must not let them through.
    k, drivers = rig.kernel()
    args = [ADDR, 1]
    k.launch(grid=1, block=32, args=args, stream=rig.stream)
    k.launch(grid=(1, 1), block=32, args=args, stream=rig.stream, cooperative=True)
    for config, pattern in [
        ({"grid": 1.0, "block": 32}, "grid must be an int, got float"),
        ({"grid": True, "block": 32}, "grid must be an int, got bool"),
        ({"grid": 1, "block": 32.0}, "block must be an int, got float"),
        ({"grid": (True, 1), "block": 32, "cooperative": True}, "grid.x must be an int, got bool"),
        ({"grid": 1, "block": 32, "shared_mem": 0.0}, "shared_mem must be an int, got float"),
        ({"grid": 1, "block": 32, "shared_mem": False}, "shared_mem must be an int, got bool"),
        ({"grid": 1, "block": 32, "cooperative": 0}, "cooperative must be a bool, got int 0"),
        ({"grid": (1, 1), "block": 32, "cooperative": 1}, "cooperative must be a bool, got int 1"),
    ]:
        with pytest.raises(ignis.LaunchError, match=pattern):
            k.launch(args=args, stream=rig.stream, **config)
    assert len(drivers[0][0].calls) == 1 and len(drivers[0][1].calls) == 1


def test_each_configuration_is_validated_once(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    k, drivers = rig.kernel()
    validated = []
    original = _Loaded._validate
    monkeypatch.setattr(
        _Loaded,
        "_validate",
        lambda self, config: (validated.append(config), original(self, config))[1],
    )
    big = 100_000
    for i in range(200):
        # Fresh int objects every time (not the memo), NumPy ints, tuples: one check each.
        k.launch(grid=big + 0, block=256, args=[ADDR, i], stream=rig.stream)
        k.launch(grid=np.int64(7), block=np.int32(64), args=[ADDR, i], stream=rig.stream)
        k.launch(grid=(2, 3), block=(16, 16), args=[ADDR, i], stream=rig.stream)
    assert [(c.grid, c.block) for c in validated] == [
        ((big, 1, 1), (256, 1, 1)),
        ((7, 1, 1), (64, 1, 1)),
        ((2, 3, 1), (16, 16, 1)),
    ]
    # A tuple with the same value is the normalised form of another spelling: no new check.
    k.launch(grid=(2, 3, 1), block=(16, 16, 1), args=[ADDR, 0], stream=rig.stream)
    assert len(validated) == 3
    assert len(drivers[0][0].calls) == 601


def test_the_configuration_cache_is_bounded(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernel_module, "_MAX_CACHED_CONFIGS", 16)
    k, drivers = rig.kernel()
    for grid in range(1, 200):
        k.launch(grid=grid, block=32, args=[ADDR, grid], stream=rig.stream)
        assert len(k._loaded[0].configs) <= 16
    assert [c["grid"][0] for c in drivers[0][0].calls] == list(range(1, 200))


def test_driver_errors_raise_cuda_error_and_keep_the_storage(rig: Rig) -> None:
    k, drivers = rig.kernel()
    plain = drivers[0][0]
    pool = k._loaded[0].packer._pool
    blocks = len(pool)
    plain.status = driver.CUresult.CUDA_ERROR_INVALID_VALUE
    with pytest.raises(ignis.CudaError, match="CUDA_ERROR_INVALID_VALUE.*cuLaunchKernel"):
        k.launch(grid=1, block=32, args=[ADDR, 1], stream=rig.stream)
    assert len(pool) == blocks
    assert k.launch_count == 0
    plain.status = driver.CUresult.CUDA_SUCCESS
    k.launch(grid=1, block=32, args=[ADDR, 2], stream=rig.stream)
    assert plain.calls[-1]["values"] == noop_values(ADDR, 2)


# --- shared memory and cooperative launches ------------------------------------------------------


def test_dynamic_shared_memory_opt_in_is_raised_once_per_new_maximum(rig: Rig) -> None:
    k, drivers = rig.kernel(kernel_static_shared_bytes=1024)
    args = [ADDR, 1]
    k.launch(grid=1, block=32, args=args, stream=rig.stream, shared_mem=40 * 1024)
    assert rig.set_attribute_calls == []  # 41 KiB in all: no opt-in needed
    k.launch(grid=1, block=32, args=args, stream=rig.stream, shared_mem=100 * 1024)
    k.launch(grid=1, block=32, args=args, stream=rig.stream, shared_mem=100 * 1024)
    k.launch(grid=1, block=32, args=args, stream=rig.stream, shared_mem=60 * 1024)
    assert rig.set_attribute_calls == [100 * 1024]
    k.launch(grid=1, block=32, args=args, stream=rig.stream, shared_mem=150 * 1024)
    assert rig.set_attribute_calls == [100 * 1024, 150 * 1024]
    with pytest.raises(ignis.LaunchError, match="plus 1024 bytes of static __shared__ memory"):
        k.launch(grid=1, block=32, args=args, stream=rig.stream, shared_mem=227 * 1024)
    assert [c["shared_mem"] for c in drivers[0][0].calls] == [
        x * 1024 for x in (40, 100, 100, 60, 150)
    ]


def test_cooperative_launches_use_the_cooperative_entry_point(rig: Rig) -> None:
    k, drivers = rig.kernel()
    plain, coop = drivers[0]
    rig.occupancy = 3
    k.launch(grid=3 * 132, block=128, args=[ADDR, 9], stream=rig.stream, cooperative=True)
    k.launch(
        grid=3 * 132, block=128, args=[ADDR, 10], stream=rig.stream, cooperative=np.bool_(True)
    )
    assert [c["values"] for c in coop.calls] == [noop_values(ADDR, 9), noop_values(ADDR, 10)]
    assert coop.calls[0]["grid"] == (396, 1, 1) and not plain.calls
    with pytest.raises(
        ignis.LaunchError, match="grid has 397 blocks but at most 396 can be resident"
    ):
        k.launch(grid=3 * 132 + 1, block=128, args=[ADDR, 9], stream=rig.stream, cooperative=True)
    k.launch(grid=3 * 132 + 1, block=128, args=[ADDR, 11], stream=rig.stream)  # fine when not
    assert plain.calls[-1]["values"] == noop_values(ADDR, 11)


def test_cooperative_launch_needs_device_support(rig: Rig) -> None:
    k, drivers = rig.kernel(cooperative_launch=False)
    with pytest.raises(
        ignis.LaunchError, match="cooperative launch requested; this device does not support it"
    ):
        k.launch(grid=1, block=32, args=[ADDR, 1], stream=rig.stream, cooperative=True)
    assert not drivers[0][1].calls


# --- devices -------------------------------------------------------------------------------------


def test_device_is_activated_only_when_the_thread_has_another_one_active(rig: Rig) -> None:
    k, _ = rig.kernel()
    for _ in range(5):
        k.launch(grid=1, block=32, args=[ADDR, 1], stream=rig.stream)
    assert rig.activations == [("MainThread", 0)]
    device_module._tls.active = None  # something else made another context current
    k.launch(grid=1, block=32, args=[ADDR, 1], stream=rig.stream)
    assert len(rig.activations) == 2

    def worker() -> None:
        for _ in range(3):
            k.launch(grid=1, block=32, args=[ADDR, 1], stream=rig.stream)

    thread = threading.Thread(target=worker, name="worker")
    thread.start()
    thread.join()
    assert rig.activations[2:] == [("worker", 0)]


def test_launches_go_to_the_device_of_the_stream(rig: Rig) -> None:
    dev1 = fake_device(1)
    stream1 = fake_stream(dev1, 0x7000)
    k, drivers = rig.kernel(devices=[rig.dev, dev1])
    for i in range(4):
        stream = rig.stream if i % 2 == 0 else stream1
        k.launch(grid=1, block=32, args=[ADDR, i], stream=stream)
    calls0, calls1 = drivers[0][0].calls, drivers[1][0].calls
    assert [c["values"] for c in calls0] == [noop_values(ADDR, 0), noop_values(ADDR, 2)]
    assert [c["values"] for c in calls1] == [noop_values(ADDR, 1), noop_values(ADDR, 3)]
    assert {c["function"] for c in calls1} == {"function-noop-1"}
    assert {int(c["stream"]) for c in calls1} == {0x7000}
    assert k.launch_count == 4
    assert {("MainThread", 0), ("MainThread", 1)} <= set(rig.activations)


def test_a_kernel_is_freed_with_its_last_reference(rig: Rig) -> None:
    # The launcher must not keep the kernel (or its module) alive through a reference cycle.
    k, _ = rig.kernel()
    k.launch(grid=1, block=32, args=[ADDR, 1], stream=rig.stream)
    unloaded = []
    weakref.finalize(k._loaded[0], unloaded.append, True)
    launch = k.launch
    ref = weakref.ref(k)
    gc.disable()
    try:
        del k
        assert ref() is None
        # Its launcher still works on its own device; another device needs the kernel.
        launch(grid=1, block=32, args=[ADDR, 2], stream=rig.stream)
        with pytest.raises(ignis.LaunchError, match="the Kernel object this launch function"):
            launch(grid=1, block=32, args=[ADDR, 3], stream=fake_stream(fake_device(1), 0x10))
        assert unloaded == []
        del launch
        assert unloaded == [True]
    finally:
        gc.enable()


# --- storage reuse: threads and nested launches --------------------------------------------------


def test_threads_launching_the_same_kernel_never_mix_arguments(rig: Rig) -> None:
    k, drivers = rig.kernel()
    plain = drivers[0][0]
    expected = threading.local()
    mismatches = []

    def on_call(address: int, values: list[bytes]) -> None:
        time.sleep(0)  # let another thread run while this "driver call" is in progress
        again = plain.read(address)
        if values != expected.values or again != expected.values:
            mismatches.append((threading.current_thread().name, expected.values, values, again))

    plain.on_call = on_call
    threads, launches = 8, 400

    def worker(tid: int) -> None:
        device_module._tls.active = rig.dev
        for i in range(launches):
            buf = FakeBuffer(ADDR + (tid << 20) + 8 * i)
            n = tid * 1_000_000 + i
            expected.values = noop_values(buf.ptr, n)
            k.launch(grid=1, block=32, args=[buf, n], stream=rig.stream)

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        workers = [threading.Thread(target=worker, args=(t,), name=f"t{t}") for t in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    finally:
        sys.setswitchinterval(old)
    assert mismatches == []
    assert len(plain.calls) == threads * launches
    seen = {c["values"][1] for c in plain.calls}
    assert len(seen) == threads * launches  # every launch arrived, none twice
    # Storage is reused: at most one block per launch in flight at once.
    assert 1 <= len(k._loaded[0].packer._pool) <= threads + 1


class LaunchesOnAccess:
    """A device array whose address lookup itself launches the kernel (e.g. a lazy copy)."""

    def __init__(self, kernel: Kernel, stream: Stream, ptr: int):
        self.kernel, self.stream, self.ptr_value = kernel, stream, ptr

    @property
    def __cuda_array_interface__(self) -> dict:
        self.kernel.launch(grid=1, block=32, args=[ADDR + 64, 111], stream=self.stream)
        return {"data": (self.ptr_value, False), "shape": (1,), "typestr": "<f4", "version": 3}


def test_a_launch_nested_in_argument_conversion_keeps_both_argument_lists(rig: Rig) -> None:
    k, drivers = rig.kernel()
    k.launch(
        grid=1, block=32, args=[LaunchesOnAccess(k, rig.stream, ADDR + 128), 222], stream=rig.stream
    )
    assert [c["values"] for c in drivers[0][0].calls] == [
        noop_values(ADDR + 64, 111),
        noop_values(ADDR + 128, 222),
    ]


def test_a_launch_nested_in_the_driver_call_does_not_overwrite_the_outer_one(rig: Rig) -> None:
    # E.g. a finalizer run by the garbage collector while the outer call is in progress.
    k, drivers = rig.kernel()
    plain = drivers[0][0]
    after = []

    def on_call(address: int, values: list[bytes]) -> None:
        if len(after) == 0:
            after.append(None)
            k.launch(grid=1, block=32, args=[ADDR + 8, 2], stream=rig.stream)
            after[0] = plain.read(address)

    plain.on_call = on_call
    k.launch(grid=1, block=32, args=[ADDR, 1], stream=rig.stream)
    assert after == [noop_values(ADDR, 1)]
    assert [c["values"] for c in plain.calls] == [noop_values(ADDR + 8, 2), noop_values(ADDR, 1)]


# --- prepared launches (the kernel library's hot paths) ------------------------------------------


def test_a_prepared_launch_hands_the_driver_what_launch_would(rig: Rig) -> None:
    k, drivers = rig.kernel(AXPBY, "axpby", AXPBY_SIZES)
    plain = drivers[0][0]
    go = k._prepared(rig.dev, 7, 96, 128)
    assert k._prepared(rig.dev, 7, 96, 128) is go  # one per configuration
    rng = np.random.default_rng(3)
    for _ in range(20):
        values = [
            float(rng.standard_normal()),
            int(rng.integers(1, 2**63)),
            float(rng.standard_normal() * 1e100),
            int(rng.integers(1, 2**63)),
            int(rng.integers(-(2**63), 2**63 - 1)),
            int(rng.integers(0, 2**16)),
            bool(rng.integers(2)),
            float(rng.uniform(-60000, 60000)),
        ]
        k.launch(grid=7, block=96, shared_mem=128, args=values, stream=rig.stream)
        go(rig.stream, *values)
        by_launch, by_prepared = plain.calls[-2], plain.calls[-1]
        assert by_prepared == by_launch
    assert by_prepared["grid"] == (7, 1, 1) and by_prepared["block"] == (96, 1, 1)
    assert by_prepared["shared_mem"] == 128 and int(by_prepared["stream"]) == 0x5000
    assert k.launch_count == 40


def test_a_prepared_configuration_is_validated_when_prepared(rig: Rig) -> None:
    k, drivers = rig.kernel()
    with pytest.raises(ignis.LaunchError, match="block"):
        k._prepared(rig.dev, 1, 4096)
    assert not drivers[0][0].calls


def test_prepared_launch_errors_name_the_kernel_and_keep_the_storage(rig: Rig) -> None:
    k, drivers = rig.kernel()
    plain = drivers[0][0]
    go = k._prepared(rig.dev, 1, 32)
    go(rig.stream, ADDR, 1)
    pool = k._loaded[0].packer._pool
    blocks = len(pool)
    with pytest.raises(ignis.LaunchError, match=r"\(n: int\): 2147483648 is out of range"):
        go(rig.stream, ADDR, 2**31)
    with pytest.raises(ignis.LaunchError, match=r"expects an integer for int, got float"):
        go(rig.stream, ADDR, 1.5)
    other = fake_stream(fake_device(1), 0x10)
    with pytest.raises(
        ignis.LaunchError, match=r"'noop' on cuda:0: expected a stream of cuda:0, got one of cuda:1"
    ):
        go(other, ADDR, 1)
    assert len(pool) == blocks and len(plain.calls) == 1
    plain.status = driver.CUresult.CUDA_ERROR_INVALID_VALUE
    with pytest.raises(ignis.CudaError, match="cuLaunchKernel"):
        go(rig.stream, ADDR, 2)
    assert len(pool) == blocks and k.launch_count == 1


def test_a_prepared_launch_activates_the_device_when_another_is_active(rig: Rig) -> None:
    k, _ = rig.kernel()
    go = k._prepared(rig.dev, 1, 32)
    device_module._tls.active = fake_device(3)
    go(rig.stream, ADDR, 1)
    go(rig.stream, ADDR, 2)
    assert rig.activations == [("MainThread", 0)]
