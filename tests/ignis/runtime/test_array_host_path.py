"""NvArray ops on the CUDA backend over a fake driver: what one ``a + b`` hands the driver (one
allocation, one launch with the right kernel, arguments, grid and stream, one free), and that the
remembered plans and layouts stay right when views, scalars, dtypes and streams change."""

from __future__ import annotations

import math
import struct

import fake_gpu
import numpy as np
import pytest

import ignis
from ignis import NvArray

pytestmark = pytest.mark.skipif(
    ignis.is_available(), reason="fake driver tests: the GPU tests cover the real driver"
)

EW = "ignis::ew::"


@pytest.fixture
def gpu(monkeypatch: pytest.MonkeyPatch):
    g = fake_gpu.install(monkeypatch)
    yield g
    fake_gpu.uninstall()


def empty(shape, dtype="float32") -> NvArray:
    return NvArray.empty(shape, dtype=dtype, device="cuda:0")


def u64(v: bytes) -> int:
    return struct.unpack("<Q", v)[0]


def f32(v: bytes) -> float:
    return struct.unpack("<f", v)[0]


def i64(v: bytes) -> int:
    return struct.unpack("<q", v)[0]


def test_an_add_is_one_allocation_one_launch_one_free(gpu) -> None:
    a, b = empty(1000), empty(1000)
    before = ignis.memory_stats(0)
    gpu.launches.clear()
    c = a + b
    assert c.shape == (1000,) and c.dtype == "float32" and c.strides == (4,)
    assert c.device == "cuda:0" and c.stream is ignis.current_stream(gpu.device)
    ((name, grid, block, stream, args),) = gpu.launches
    assert name == f"{EW}binary_contig<{EW}op_add, float, float, float, float, 0, 4>"
    assert grid == (1, 1, 1) and block == (256, 1, 1) and stream == 0
    assert [u64(v) for v in args[:3]] == [c.data_ptr, a.data_ptr, b.data_ptr]
    assert (f32(args[3]), f32(args[4]), i64(args[5])) == (0.0, 0.0, 1000)
    assert gpu.calls["cuMemAllocAsync"][-1][0] == 4000
    after = ignis.memory_stats(0)
    assert after["allocation_count"] - before["allocation_count"] == 1
    assert after["current_bytes"] - before["current_bytes"] == 4000
    ptr = c.data_ptr
    del c
    assert (int(gpu.calls["cuMemFreeAsync"][-1][0]), int(gpu.calls["cuMemFreeAsync"][-1][1])) == (
        ptr,
        0,
    )
    assert ignis.memory_stats(0)["current_bytes"] == before["current_bytes"]


def test_repeated_ops_reuse_everything_and_free_everything(gpu) -> None:
    a, b = empty((20, 50)), empty((20, 50))
    base = ignis.memory_stats(0)
    gpu.launches.clear()
    for _ in range(100):
        a * b
        ignis.exp(a)
        a - 1.5
    assert len(gpu.launches) == 300
    assert len({name for name, *_ in gpu.launches}) == 3
    s = ignis.memory_stats(0)
    assert s["allocation_count"] - base["allocation_count"] == 300
    assert s["deallocation_count"] - base["deallocation_count"] == 300
    assert s["current_bytes"] == base["current_bytes"]
    assert s["peak_bytes"] - base["current_bytes"] == 4000  # one result alive at a time


def test_scalars_views_and_broadcasts_pick_their_kernels(gpu) -> None:
    a, b = empty(1000), empty(1000)
    gpu.launches.clear()
    c = a * 2.0
    d = 3.0 - a
    e = a[1:] + b[1:]  # 4 bytes past a 16-byte boundary: one element per access
    x, row, col = empty((3, 4)), empty(4), empty((3, 1))
    f = x + row  # a row broadcast: the broadcast kernel, 16-byte vectors
    g = col * x  # a column broadcast on the left
    h = x[:, 1:] + row[1:]  # rows with gaps: the strided kernel
    names = [name for name, *_ in gpu.launches]
    assert names[0] == f"{EW}binary_contig<{EW}op_multiply, float, float, float, float, 2, 4>"
    assert names[1] == f"{EW}binary_contig<{EW}op_subtract, float, float, float, float, 1, 4>"
    assert names[2] == f"{EW}binary_contig<{EW}op_add, float, float, float, float, 0, 1>"
    assert names[3] == f"{EW}binary_bcast<{EW}op_add, float, float, float, float, 2, 0, 4>"
    assert names[4] == f"{EW}binary_bcast<{EW}op_multiply, float, float, float, float, 1, 1, 4>"
    assert names[5] == f"{EW}binary_strided<{EW}op_add, float, float, float, float, 0, false>"
    args = [launch[4] for launch in gpu.launches]
    assert f32(args[0][4]) == 2.0 and f32(args[1][3]) == 3.0
    assert u64(args[2][1]) == a.data_ptr + 4 and i64(args[2][5]) == 999
    # binary_bcast(out, a, b, n, inner)
    assert [u64(v) for v in args[3][:3]] == [f.data_ptr, x.data_ptr, row.data_ptr]
    assert (i64(args[3][3]), i64(args[3][4])) == (12, 4)
    assert [u64(v) for v in args[4][:3]] == [g.data_ptr, col.data_ptr, x.data_ptr]
    assert (i64(args[4][3]), i64(args[4][4])) == (12, 4)
    assert u64(args[5][2]) == row.data_ptr + 4
    assert (c.shape, d.shape, e.shape, f.shape, g.shape, h.shape) == (
        (1000,),
        (1000,),
        (999,),
        (3, 4),
        (3, 4),
        (3, 3),
    )


def test_dtypes_are_converted_by_the_kernel(gpu) -> None:
    h, i = empty(64, "float16"), empty(64, "int32")
    gpu.launches.clear()
    r = h + i  # float16 with int32 gives float64, computed in double
    k = empty(64, "int8") + 3
    names = [name for name, *_ in gpu.launches]
    assert r.dtype == "float64" and k.dtype == "int8"
    assert names[0] == (
        f"{EW}binary_contig<{EW}op_add, double, double, ignis::float16, ignis::int32, 0, 2>"
    )
    assert names[1] == (
        f"{EW}binary_contig<{EW}op_add, ignis::int8, ignis::int8, ignis::int8, ignis::int8, 2, 16>"
    )
    assert gpu.launches[1][4][4] == b"\x03"  # the scalar, as an int8


def test_unary_and_reduction_launch_on_the_current_stream(gpu) -> None:
    a = empty((8, 128))
    stream = ignis.Stream.from_handle(0x6100, gpu.device)
    gpu.launches.clear()
    with stream:
        e = ignis.exp(a)
        s = a.sum()
        t = a.sum(axis=1, keepdims=True)
    assert e.stream is stream and s.stream is stream and t.stream is stream
    assert gpu.launches[0][0] == f"{EW}unary_contig<{EW}op_exp, float, float, float, 4>"
    assert all(launch[3] == 0x6100 for launch in gpu.launches)
    assert s.shape == () and t.shape == (8, 1)
    allocations = gpu.calls["cuMemAllocAsync"][-3:]
    assert [int(x[1]) for x in allocations] == [0x6100] * 3
    ptrs = [e.data_ptr, s.data_ptr, t.data_ptr]
    del e, s, t
    freed = {int(p): int(h) for p, h in gpu.calls["cuMemFreeAsync"]}
    assert all(freed[p] == 0x6100 for p in ptrs)  # freed on the stream they were allocated on


def test_errors_come_before_any_allocation(gpu) -> None:
    a = empty(5)
    c = ignis.asarray(np.ones(5, np.float32), device="cpu")
    a + a  # noqa: B018 - the plan exists
    calls = len(gpu.calls["cuMemAllocAsync"])
    with pytest.raises(ignis.DeviceMismatchError, match="add: operands are on different devices"):
        a + c  # noqa: B018
    with pytest.raises(ignis.ShapeError, match="multiply: shapes"):
        a * empty(6)  # noqa: B018
    with pytest.raises(OverflowError, match="add: Python integer 1000 is out of bounds for int8"):
        empty(5, "int8") + 1000  # noqa: B018
    assert len(gpu.calls["cuMemAllocAsync"]) == calls + 2  # the two empty() operands only


def test_empty_results_launch_nothing(gpu) -> None:
    a = empty((0, 4))
    gpu.launches.clear()
    (a + a, a * 2.0, ignis.exp(a))
    assert gpu.launches == []


# --- reductions: remembered launches -----------------------------------------------------------


@pytest.mark.parametrize(
    "shape,view,op,axis",
    [
        ((1000,), None, "sum", None),
        ((1000,), "offset", "sum", None),  # 4 bytes past alignment: one element per load
        ((8, 128), None, "mean", 1),
        ((64, 48), None, "max", 0),  # the reduced axis outside the contiguous one (cols)
        ((6, 4, 5), "flip", "min", 1),  # a reversed view read from its last element
        ((0, 4), None, "sum", 0),  # nothing to read: the empty results
    ],
)
def test_a_repeated_reduction_repeats_the_planned_launch(gpu, shape, view, op, axis) -> None:
    def operand() -> NvArray:
        x = empty(shape if view != "offset" else (shape[0] + 1,))
        if view == "offset":
            return x[1:]
        if view == "flip":
            return x[:, ::-1]
        return x

    launches, pointers = [], []
    for _ in range(3):  # planned, then remembered twice, each time on new memory
        x = operand()
        gpu.launches.clear()
        out = getattr(x, op)(axis=axis)
        ((name, grid, block, _stream, args),) = gpu.launches
        launches.append((name, grid, block, args[2:]))
        pointers.append((u64(args[0]) - x.data_ptr, u64(args[1]) - out.data_ptr))
    assert launches[0] == launches[1] == launches[2]
    assert pointers[0] == pointers[1] == pointers[2]
    assert pointers[0][1] == 0
    if view == "flip":  # starts at the last element of the reversed axis
        assert pointers[0][0] == 3 * x.strides[1]


def test_reductions_that_need_temporaries_are_planned_every_time(gpu) -> None:
    x = empty((4, 6, 8))
    for _ in range(3):
        gpu.launches.clear()
        x.sum(axis=(0, 2))  # reduced axes 0 and 2 do not merge: a copy first
        assert [name.split("<")[0] for name, *_ in gpu.launches] == [
            f"{EW}copy_strided",
            "ignis::reduce_group",
        ]
        gpu.launches.clear()
        x.var()  # two passes and a temporary of means
        assert ["SqDevOp" in name for name, *_ in gpu.launches] == [False, True]


def test_a_remembered_reduction_follows_the_current_stream(gpu) -> None:
    a = empty(1000)
    a.sum()
    stream = ignis.Stream.from_handle(0x6200, gpu.device)
    gpu.launches.clear()
    with stream:
        s = a.sum()
    assert [launch[3] for launch in gpu.launches] == [0x6200] and s.stream is stream


# --- operators and foreign operands -------------------------------------------------------------


class _Other:
    """A foreign operand type with reflected operators, like a Tensor."""

    def __radd__(self, other):
        return ("radd", other)

    def __rmul__(self, other):
        return ("rmul", other)

    def __rmatmul__(self, other):
        return ("rmatmul", other)

    def __gt__(self, other):  # the reflection of other < self
        return ("gt", other)


def test_operators_leave_foreign_operands_to_their_reflected_methods(gpu) -> None:
    a = empty(4)
    o = _Other()
    assert a + o == ("radd", a) and a * o == ("rmul", a) and a @ o == ("rmatmul", a)
    assert (a < o) == ("gt", a)
    b = a
    b += o  # no in-place form: Python falls back to b = b + o
    assert b == ("radd", a)
    with pytest.raises(TypeError, match="unsupported operand"):
        a - object()
    # Types the array knows keep their explanations.
    with pytest.raises(TypeError, match="NumPy arrays are not converted implicitly"):
        a + np.ones(4, np.float32)
    with pytest.raises(TypeError, match="convert sequences with ignis.asarray"):
        a * [1.0, 2.0]
    assert (a + 1j).dtype.kind == "c"  # complex scalars are values the array knows
    with pytest.raises(TypeError, match="add: expected an NvArray or a Python/NumPy scalar"):
        ignis.add(a, o)  # the functions never defer


# --- the fast paths of ``a + b`` keep the general path's semantics -------------------------------


def _launches_of(gpu, fn) -> list:
    gpu.launches.clear()
    fn()
    return [(name, grid, block, stream, args) for name, grid, block, stream, args in gpu.launches]


def test_the_fast_path_launches_what_the_general_path_launched(gpu) -> None:
    # The first call of a layout takes the general path (and compiles); later ones take the
    # binary hook's fast path. Both must hand the driver the same launch.
    base, other = empty(1000), empty(1000)
    m = empty((20, 50))
    i8 = empty(64, "int8")
    calls = [
        (lambda: base + other, 0, 4),
        (lambda: base[1:] + base[:-1], 0, 1),  # 4 bytes off a 16-byte boundary
        (lambda: m * m, 0, 4),
        (lambda: base * 2.5, 2, 4),
        (lambda: 3.0 - base[1:], 1, 1),
        (lambda: i8 + 3, 2, 16),
        (lambda: 7 * i8[1:], 1, 1),
    ]
    for fn, form, v in calls:
        first = _launches_of(gpu, fn)
        again = _launches_of(gpu, fn)
        ((name, grid, block, stream, args),) = first
        ((name2, grid2, block2, stream2, args2),) = again
        assert name.endswith(f", {form}, {v}>"), name
        assert (name, grid, block, stream) == (name2, grid2, block2, stream2)
        assert args[1:] == args2[1:]  # operands, scalars and size; args[0] is each new result
    # the scalars reach the kernel converted to the compute type (float, int8)
    assert f32(_launches_of(gpu, lambda: base * 2.5)[0][4][4]) == 2.5
    assert _launches_of(gpu, lambda: 7 * i8[1:])[0][4][3] == b"\x07"
    # two scalars are still refused by the hook
    from ignis._array._cuda_backend import elementwise as ew

    with pytest.raises(TypeError, match="add: at least one operand must be an array"):
        ew.binary(base._backend, "add", base, 1.0, 2.0, base.dtype)
    # Operands of another dtype or layout than the output's never take it.
    h = empty(1000, "float16")
    ((name, *_),) = _launches_of(gpu, lambda: h + base)
    assert "ignis::float16" in name


def test_the_backend_follows_each_threads_current_stream(gpu) -> None:
    import threading

    a = empty(1000)
    backend = a._backend
    stream = ignis.Stream.from_handle(0x6200, gpu.device)
    default = ignis.default_stream(gpu.device)
    seen = {}

    def worker() -> None:  # a new thread: no stream table yet
        seen["before"] = backend.stream
        seen["first op"] = (a + 1.0).stream
        with stream:
            seen["inside"] = backend.stream
            seen["op inside"] = (a * 2.0).stream
        seen["after"] = backend.stream

    gpu.launches.clear()
    with stream:  # this thread's stream is not the worker's
        t = threading.Thread(target=worker)
        t.start()
        t.join()
        assert backend.stream is stream is ignis.current_stream(gpu.device)
    assert seen == {
        "before": default,
        "first op": default,
        "inside": stream,
        "op inside": stream,
        "after": default,
    }
    assert [launch[3] for launch in gpu.launches] == [0, 0x6200]
    assert backend.stream is default is ignis.current_stream(gpu.device)
    allocations = gpu.calls["cuMemAllocAsync"][-2:]
    assert [int(x[1]) for x in allocations] == [0, 0x6200]  # each result on its stream


def test_allocation_reads_the_tables_in_force_not_the_ones_seen_at_import(monkeypatch) -> None:
    # A memory resource (and a default stream) of another Device object for ordinal 0 sits in
    # the tables when the fake device replaces them, as a real device's would on a GPU machine.
    # The backend must allocate from the resource of the tables in force: a table bound at
    # import would hand a stream of one Device object to a resource of another
    # ("allocate: stream is on cuda:0, memory resource on cuda:0").
    import ignis._device as device_module
    import ignis._memory as memory_module
    import ignis._stream as stream_module

    other = object.__new__(device_module.Device)
    other.ordinal = 0
    stale = object.__new__(memory_module.PlainMemoryResource)
    stale.device = other
    monkeypatch.setitem(memory_module._resources, 0, stale)
    monkeypatch.setitem(stream_module._default_streams, 0, object())
    gpu = fake_gpu.install(monkeypatch)
    try:
        a = empty(1000)
        c = a + a
        assert c._storage.device is gpu.device and c._storage._resource is not stale
        assert c.stream is ignis.current_stream(gpu.device) and c.stream.device is gpu.device
        assert ignis.get_memory_resource(0).device is gpu.device
    finally:
        del a, c
        fake_gpu.uninstall()


def test_statistics_and_frees_are_the_same_through_the_block_cache(monkeypatch) -> None:
    gpu = fake_gpu.install(monkeypatch, cache_bytes=1 << 20)
    try:
        a = empty(1000)
        base = ignis.memory_stats(0)
        for _ in range(50):
            a + a  # the first result's block comes back to the cache; the others reuse it
        s = ignis.memory_stats(0)
        assert s["allocation_count"] - base["allocation_count"] == 50
        assert s["deallocation_count"] - base["deallocation_count"] == 50
        assert s["current_bytes"] == base["current_bytes"]
        assert s["peak_bytes"] - base["current_bytes"] == 4000
        assert s["allocated_bytes_total"] - base["allocated_bytes_total"] == 50 * 4000
        assert len(gpu.calls["cuMemAllocAsync"]) == 2  # a, then the first result only
        assert gpu.calls["cuMemFreeAsync"] == []
        resource = ignis.get_memory_resource(0)
        assert resource.cached_bytes == 4000
        # A result on another stream is never cached: it goes back to the driver, on its stream.
        with ignis.Stream.from_handle(0x6300, gpu.device):
            d = a + a
        ptr = d.data_ptr
        del d
        assert [(int(p), int(h)) for p, h in gpu.calls["cuMemFreeAsync"]] == [(ptr, 0x6300)]
        assert ignis.memory_stats(0)["current_bytes"] == base["current_bytes"]
    finally:
        fake_gpu.uninstall()


def test_a_failed_launch_still_raises_its_cuda_error(gpu, monkeypatch) -> None:
    import ignis._kernel as kernel_module
    from ignis._bindings import driver

    failing = (driver.CUresult.CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES,)
    # Read when a kernel is loaded: every kernel of this test launches into a failing driver.
    monkeypatch.setattr(kernel_module, "_launch_kernel", lambda *args: failing)
    a = empty(1000)
    base = ignis.memory_stats(0)["current_bytes"]
    for _ in range(2):  # the general path (which loads the kernel), then the fast path
        with pytest.raises(
            ignis.CudaError, match="CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES.*cuLaunchKernel"
        ):
            a + a  # noqa: B018
    assert ignis.memory_stats(0)["current_bytes"] == base  # the results were freed


def test_repeated_dense_ops_allocate_and_launch_in_one_call(gpu, monkeypatch) -> None:
    # Once a plan and its prepared launch exist, a dense op of the result's dtype goes straight
    # from the front end's plan to an allocation and the prepared launch: the general
    # allocation step is not called, and the driver sees what the general path gave it.
    from ignis._array import _creation

    general = []
    allocate = _creation._allocate
    monkeypatch.setattr(
        _creation, "_allocate", lambda *args: general.append(args[0]) or allocate(*args)
    )
    base, other = empty(1000), empty(1000)
    cases = {
        "a + b": lambda: base + other,
        "a * 2.5": lambda: base * 2.5,
        "3.0 - a": lambda: 3.0 - base,
        "misaligned": lambda: base[1:] + other[1:],
        "exp": lambda: ignis.exp(base),
    }
    for label, fn in cases.items():
        first = _launches_of(gpu, fn)
        general.clear()
        again = _launches_of(gpu, fn)
        assert general == [], label  # no general allocation: the direct function ran
        ((name, grid, block, stream, args),) = first
        ((name2, grid2, block2, stream2, args2),) = again
        assert (name, grid, block, stream) == (name2, grid2, block2, stream2), label
        assert args[1:] == args2[1:], label
    out = base * 2.5
    assert (out.shape, out.strides, out.dtype, out.device) == ((1000,), (4,), base.dtype, "cuda:0")
    assert out.stream is ignis.current_stream(gpu.device)
    # Operands the direct function does not take go the general way: a strided view of the
    # same shape and dtype, and arrays of another device under the same plan.
    strided = empty((1000, 2))[:, 0]
    general.clear()
    ((name, *_),) = _launches_of(gpu, lambda: strided + other)
    assert general == [(1000,)] and "strided" in name
    rng = np.random.default_rng(0)
    x, y = (
        rng.standard_normal(1000).astype(np.float32),
        rng.standard_normal(1000).astype(np.float32),
    )
    on_cpu = NvArray.from_host(x, device="cpu") + NvArray.from_host(y, device="cpu")
    np.testing.assert_array_equal(on_cpu.to_host(), x + y)
    # Inside a stream block the result and its launch are on that stream.
    stream = ignis.Stream.from_handle(0x6300, gpu.device)
    with stream:
        gpu.launches.clear()
        inside = base + other
    assert inside.stream is stream and gpu.launches[-1][3] == 0x6300
    assert int(gpu.calls["cuMemAllocAsync"][-1][1]) == 0x6300


def test_repeated_full_reductions_allocate_and_launch_in_one_call(gpu, monkeypatch, tune) -> None:
    # A sum, mean, max or min over every axis of a dense array, once planned as one launch,
    # goes from the front end's plan to an allocation and the kernel's prepared launch: neither
    # the general allocation step nor the reduction hook runs, and the driver sees what the
    # general path gave it.
    from ignis._array import _creation
    from ignis._array._cuda_backend import reduction

    general, planned = [], []
    allocate, reduce = _creation._allocate, reduction.reduce
    monkeypatch.setattr(
        _creation, "_allocate", lambda *args: general.append(args[0]) or allocate(*args)
    )
    monkeypatch.setattr(reduction, "reduce", lambda *args: planned.append(args[1]) or reduce(*args))
    base, m = empty(1001), empty((20, 50))
    i32, flags = empty(300, "int32"), empty((7, 3), "bool")
    cases = {
        "sum": lambda: base[:1000].sum(),
        "mean keepdims": lambda: m.mean(keepdims=True),
        "max": lambda: m.max(),
        "min over both axes": lambda: ignis.min(m, axis=(0, 1)),
        "misaligned": lambda: base[1:].sum(),  # 4 bytes past a 16-byte boundary
        "int32 sum": lambda: i32.sum(),
        "bool mean": lambda: flags.mean(),
    }
    for label, fn in cases.items():
        first = _launches_of(gpu, fn)
        general.clear()
        planned.clear()
        again = _launches_of(gpu, fn)
        assert general == [] and planned == [], label  # the direct function's prepared launch
        ((name, grid, block, stream, args),) = first
        ((name2, grid2, block2, stream2, args2),) = again
        assert (name, grid, block, stream) == (name2, grid2, block2, stream2), label
        assert args[0] == args2[0] and args[2:] == args2[2:], label  # args[1]: each new result
    s, k, t = m.sum(), m.mean(keepdims=True), i32.sum()
    assert (s.shape, s.strides, s.dtype, s.device) == ((), (), m.dtype, "cuda:0")
    assert (k.shape, k.strides, t.shape, t.dtype) == ((1, 1), (4, 4), (), "int64")
    assert s.stream is ignis.current_stream(gpu.device)
    assert u64(_launches_of(gpu, lambda: m.max(keepdims=True))[0][4][0]) == m.data_ptr
    # Not taken, the hook runs on every call: a strided view, var (two passes), a reduction over
    # some axes, and a reduction split over blocks (two launches and a temporary).
    others = {
        "strided": lambda: m[:, ::2].sum(),
        "var": lambda: m.var(),
        "axis": lambda: m.sum(axis=1),
        "split": lambda: empty(100_000).sum(),
    }
    for label, fn in others.items():
        first = _launches_of(gpu, fn)
        planned.clear()
        again = _launches_of(gpu, fn)
        assert planned, label
        assert [launch[:4] for launch in first] == [launch[:4] for launch in again], label
    # A tuning knob changed after the launch was learned: planned again, under the new knob.
    x = empty(1000)
    ((name, *_),) = _launches_of(gpu, lambda: x.sum())
    ((name, *_),) = _launches_of(gpu, lambda: x.sum())
    assert name.startswith("ignis::reduce_group<")
    # 1000 elements: a block reduction
    tune(reduction=dict(group_max_n=64))
    planned.clear()
    ((name, *_),) = _launches_of(gpu, lambda: x.sum())
    ((name2, *_),) = _launches_of(gpu, lambda: x.sum())
    assert name.startswith("ignis::reduce_block<") and name2 == name and planned == ["sum"]
    # Inside a stream block the result and its launch are on that stream.
    stream = ignis.Stream.from_handle(0x6400, gpu.device)
    with stream:
        gpu.launches.clear()
        inside = x.sum()
    assert inside.stream is stream and gpu.launches[-1][3] == 0x6400
    on_cpu = NvArray.from_host(np.arange(6.0, dtype=np.float32), device="cpu")
    assert on_cpu.sum().item() == 15.0 and on_cpu.sum().item() == 15.0


def test_a_repeated_add_runs_in_three_python_frames(monkeypatch) -> None:
    # The host path's design: once the plan and its direct function exist and the block cache
    # holds a block of the size, ``a + b`` enters the operator, the front end's plan lookup and
    # the direct function, which allocates, builds the result and launches inline. (The only
    # other frame is the fake driver's launch, which is not ignis code.)
    import os
    import sys

    gpu = fake_gpu.install(monkeypatch, cache_bytes=1 << 20)
    try:
        a, b = empty(1000), empty(1000)
        kept = [a + b for _ in range(3)]  # the plan, its direct function, then blocks to cache
        del kept
        package = os.path.dirname(ignis.__file__)
        entered = []

        def profile(frame, event, arg) -> None:
            code = frame.f_code
            if event == "call" and (code.co_filename.startswith(("<ignis", package))):
                entered.append(code.co_name)

        launches = len(gpu.launches)
        sys.setprofile(profile)
        try:
            c = a + b
        finally:
            sys.setprofile(None)
        assert entered == ["__add__", "_binary", "direct"]
        assert len(gpu.launches) == launches + 1 and gpu.launches[-1][0].endswith(", 0, 4>")
        assert c.stream is ignis.current_stream(gpu.device) and c.shape == (1000,)
    finally:
        fake_gpu.uninstall()


def test_a_direct_function_takes_misaligned_operands_through_the_scalar_kernel(
    gpu, monkeypatch
) -> None:
    # The direct function of a plan launches the vector kernel inline; operands of the same
    # plan off the 16-byte boundary take the scalar kernel: through the general path the first
    # time (which prepares its launch), then through that launch. No general allocation.
    from ignis._array import _creation

    general = []
    allocate = _creation._allocate
    x, y = empty(1000), empty(1000)
    for _ in range(2):
        x[:999] + y[:999]  # the plan of (999,) float32 + float32 and its direct function
    monkeypatch.setattr(
        _creation, "_allocate", lambda *args: general.append(args[0]) or allocate(*args)
    )
    for _ in range(3):
        ((name, grid, block, stream, args),) = _launches_of(gpu, lambda: x[1:] + y[1:])
        assert name.endswith(", 0, 1>") and (grid, block, stream) == ((2, 1, 1), (256, 1, 1), 0)
        assert (u64(args[1]), u64(args[2]), i64(args[5])) == (x.data_ptr + 4, y.data_ptr + 4, 999)
        assert u64(args[0]) % 16 == 0  # the result's own block
    ((name, *_),) = _launches_of(gpu, lambda: x[:999] + y[:999])
    assert name.endswith(", 0, 4>")
    assert general == []


def test_python_floats_beyond_float32_range_reach_the_kernel_as_infinity(gpu) -> None:
    # The kernel's ``float`` scalar gets what NumPy's float32() gives (the CPU backend's
    # semantics), on the general path (first call) and the direct function's (later ones);
    # the argument packer alone would refuse a finite value that overflows.
    a, h, d = empty(1000), empty(1000, "float16"), empty(10, "float64")
    cases = [
        (lambda: a * 1e39, 4, math.inf),
        (lambda: -1e39 + a, 3, -math.inf),
        (lambda: h * -1e39, 4, -math.inf),
        (lambda: a * 3.0e38, 4, 3.0e38),  # in range: rounded to nearest-even, finite
    ]
    for fn, index, want in cases:
        for _ in range(3):
            ((*_, args),) = _launches_of(gpu, fn)
            assert f32(args[index]) == float(np.float32(want))
    ((*_, args),) = _launches_of(gpu, lambda: d * 1e300)  # float64: passed as it is
    assert struct.unpack("<d", args[4])[0] == 1e300
