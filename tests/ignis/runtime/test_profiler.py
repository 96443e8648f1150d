"""ignis.profile(): what it records of each launch path, its table and Chrome trace, its errors.

The first part runs on the stand-in driver (tests/ignis/runtime/fake_gpu.py) with fake CUDA
events whose clock the fake launches advance by a duration set per kernel; the GPU part checks
the real events, registers and graph capture.
"""

from __future__ import annotations

import json
import threading
import types
import weakref
from typing import Any

import fake_gpu
import ignis._kernel as kernel_module
import ignis._profiler as profiler_module
import numpy as np
import pytest
from ignis._bindings import cu, driver
from ignis._graph import Graph
from ignis._kernel import Kernel

import ignis
from ignis import NvArray

SUCCESS = driver.CUresult.CUDA_SUCCESS
CAPTURING = driver.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_ACTIVE
NOT_CAPTURING = driver.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE

SCALE = r"""
extern "C" __global__ void scale(float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}
"""
SHIFT = r"""
extern "C" __global__ void shift(float* x, float b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += b;
}
"""


class FakeEvents:
    """Fake CUDA events: a device clock (ms) that each launch advances by ``durations[name]``
    (default 0.001 ms); an event records the clock at its ``cuEventRecord``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, gpu: fake_gpu.FakeGpu) -> None:
        self.clock = 0.0
        self.durations: dict[str, float] = {}
        self.recorded: dict[int, float] = {}  # event -> clock at its record
        self.created: list[int] = []
        self.destroyed: list[int] = []
        self.records: list[tuple[int, int]] = []  # (event, stream handle)
        self.synchronized: list[int] = []
        self.capturing: set[int] = set()  # stream handles under capture
        self.capture_queries = 0
        self.register_queries: list[Any] = []
        self.registers = 32
        self.launch_status = SUCCESS
        self.graph_launches: list[tuple[Any, int]] = []
        recorder = kernel_module._launch_kernel  # fake_gpu's recorder

        def launch(function: Any, *args: Any) -> tuple:
            if self.launch_status is not SUCCESS:
                return (self.launch_status,)
            result = recorder(function, *args)
            self.clock += self.durations.get(function.name, 0.001)
            return result

        def cooperative(function: Any, *args: Any) -> tuple:
            return launch(function, *args, 0)

        monkeypatch.setattr(kernel_module, "_launch_kernel", launch)
        monkeypatch.setattr(kernel_module, "_launch_cooperative_kernel", cooperative)
        fakes = {
            "cuEventCreate": self.create,
            "cuEventRecord": self.record,
            "cuEventSynchronize": self.synchronized.append,
            "cuEventElapsedTime": lambda a, b: self.recorded[b] - self.recorded[a],
            "cuEventDestroy": self.destroyed.append,
            "cuFuncGetAttribute": self.attribute,
            "cuOccupancyMaxActiveBlocksPerMultiprocessor": lambda f, threads, smem: 8,
            "cuGraphGetNodes": lambda graph, n: (None, 3),
        }
        for name, fn in fakes.items():
            monkeypatch.setattr(cu, name, fn, raising=False)
        monkeypatch.setattr(driver, "cuStreamIsCapturing", self.is_capturing)
        monkeypatch.setattr(driver, "cuGraphLaunch", self.graph_launch)

    def create(self, flags: int) -> int:
        assert flags == 0  # timing events
        handle = 0xE000 + len(self.created)
        self.created.append(handle)
        return handle

    def record(self, event: int, stream: Any) -> None:
        self.recorded[event] = self.clock
        self.records.append((event, int(stream)))

    def attribute(self, attribute: Any, function: Any) -> int:
        assert attribute == driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NUM_REGS
        self.register_queries.append(function)
        return self.registers

    def is_capturing(self, stream: Any) -> tuple:
        self.capture_queries += 1
        return (SUCCESS, CAPTURING if int(stream) in self.capturing else NOT_CAPTURING)

    def graph_launch(self, graph_exec: Any, stream: Any) -> tuple:
        self.graph_launches.append((graph_exec, int(stream)))
        self.clock += 0.5
        return (SUCCESS,)


@pytest.fixture
def gpu(monkeypatch: pytest.MonkeyPatch):
    g = fake_gpu.install(monkeypatch)
    g.events = FakeEvents(monkeypatch, g)
    yield g
    fake_gpu.uninstall()


def user_kernel(source: str, name: str) -> Kernel:
    """A kernel of the given source, "loaded" on the fake device (no compilation)."""
    code = types.SimpleNamespace(lowered_names={}, kind="cubin", arch="sm_90")
    return Kernel.from_object_code(code, name, source)


def buffer(n: int) -> NvArray:
    return NvArray.empty((n,), dtype="float32", device="cuda:0")


# --- what a launch records (stand-in driver) ----------------------------------------------------


def test_user_kernel_launches_are_recorded_with_their_configuration(gpu) -> None:
    k = user_kernel(SCALE, "scale")
    x = buffer(1000)
    stream = ignis.Stream.from_handle(0x6400, gpu.device)
    gpu.events.durations["scale"] = 0.25
    with ignis.profile() as prof:
        k.launch(grid=4, block=256, args=[x, 2.0, 1000], stream=stream)
        k.launch(grid=(2, 3), block=(32, 4), args=[x, 2.0, 1000], shared_mem=512, stream=stream)
    a, b = prof.events
    assert (a.name, a.kind, a.device, a.stream) == ("scale", "kernel", 0, 0x6400)
    assert (a.grid, a.block, a.shared_mem, a.registers) == ((4, 1, 1), (256, 1, 1), 0, 32)
    assert (b.grid, b.block, b.shared_mem) == ((2, 3, 1), (32, 4, 1), 512)
    assert a.time_ms == pytest.approx(0.25) and b.time_ms == pytest.approx(0.25)
    assert not a.captured and a.start_us is not None and b.start_us > a.start_us
    assert 0 <= a.host_us <= b.host_us
    # The launches themselves reached the driver unchanged.
    assert [launch[:4] for launch in gpu.launches[-2:]] == [
        ("scale", (4, 1, 1), (256, 1, 1), 0x6400),
        ("scale", (2, 3, 1), (32, 4, 1), 0x6400),
    ]
    # Each launch sat between its own two events, on its stream.
    assert all(handle == 0x6400 for _, handle in gpu.events.records)


def test_library_kernels_of_array_ops_are_recorded_on_every_path(gpu) -> None:
    # a + b: the general path the first time, the plan's direct function (the prepared launch
    # run inline) afterwards; x.sum(): the reduction's own launch path.
    a, b = buffer(1000), buffer(1000)
    with ignis.profile() as prof:
        for _ in range(3):
            a + b
        a.sum()
    names = [e.name for e in prof.events]
    launched = [launch[0] for launch in gpu.launches[-len(names) :]]
    assert names == launched and len(names) >= 4
    adds = [e for e in prof.events if "op_add" in e.name]
    assert len(adds) == 3 and all(e.grid == (1, 1, 1) and e.block == (256, 1, 1) for e in adds)
    assert any(name.startswith("ignis::reduce_") for name in names)


def test_prepared_launches_are_recorded(gpu) -> None:
    k = user_kernel(SCALE, "scale")
    x = buffer(100)
    prepared = k._prepared(gpu.device, 3, 128)
    stream = ignis.current_stream(gpu.device)
    with ignis.profile() as prof:
        prepared(stream, x.data_ptr, 1.5, 100)
    (event,) = prof.events
    assert (event.name, event.grid, event.block, event.shared_mem) == (
        "scale",
        (3, 1, 1),
        (128, 1, 1),
        0,
    )


def test_cooperative_launches_are_recorded_as_such(gpu) -> None:
    k = user_kernel(SCALE, "scale")
    x = buffer(100)
    with ignis.profile() as prof:
        k.launch(grid=2, block=64, args=[x, 1.0, 100], cooperative=True)
    (event,) = prof.events
    assert (event.name, event.kind, event.grid) == ("scale", "cooperative", (2, 1, 1))


def test_graph_replays_are_recorded_as_one_timed_event(gpu) -> None:
    graph = object.__new__(Graph)
    graph.device, graph._graph, graph._exec = gpu.device, "graph", "graph-exec"
    graph._finalizer = weakref.finalize(graph, lambda: None)
    stream = ignis.Stream.from_handle(0x6400, gpu.device)
    with ignis.profile() as prof:
        graph.launch(stream)
        graph.launch(stream)
    assert gpu.events.graph_launches == [("graph-exec", 0x6400)] * 2
    first, _ = prof.events
    assert (first.name, first.kind, first.graph_nodes, first.grid) == (
        "Graph.launch",
        "graph",
        3,
        None,
    )
    assert first.time_ms == pytest.approx(0.5)
    (row,) = prof.summary()
    assert row.calls == 2 and row.total_ms == pytest.approx(1.0)
    graph._finalizer.detach()


def test_launches_under_capture_are_recorded_without_time(gpu) -> None:
    k = user_kernel(SCALE, "scale")
    x = buffer(100)
    captured = ignis.Stream.from_handle(0x7100, gpu.device)
    gpu.events.capturing.add(0x7100)
    with ignis.profile() as prof:
        k.launch(grid=1, block=128, args=[x, 1.0, 100], stream=captured)
        k.launch(grid=1, block=128, args=[x, 1.0, 100])
    during, after = prof.events
    assert during.captured and during.time_ms is None and during.start_us is None
    assert not after.captured and after.time_ms == pytest.approx(0.001)
    assert all(handle != 0x7100 for _, handle in gpu.events.records)  # no event on it
    timed, untimed = prof.summary()
    assert (timed.captured, untimed.captured, untimed.calls, untimed.total_ms) == (
        False,
        True,
        1,
        None,
    )
    text = prof.table()
    assert "scale [captured]" in text and "1 launches were made under CUDA-graph capture" in text
    trace = prof.trace()
    assert len([e for e in trace["traceEvents"] if e["ph"] == "X"]) == 1
    assert trace["otherData"]["captured_launches"] == 1


def test_registers_are_asked_once_per_function(gpu) -> None:
    k = user_kernel(SCALE, "scale")
    x = buffer(100)
    with ignis.profile():
        for _ in range(5):
            k.launch(grid=1, block=128, args=[x, 1.0, 100])
    with ignis.profile() as prof:
        k.launch(grid=1, block=128, args=[x, 1.0, 100])
    assert len(gpu.events.register_queries) == 1
    assert prof.events[0].registers == 32


def test_launches_of_other_threads_are_recorded(gpu) -> None:
    k = user_kernel(SCALE, "scale")
    x = buffer(100)

    def work() -> None:
        ignis._device._tls.active = gpu.device  # the fake device, as on the main thread
        ignis._device._tls.device = gpu.device
        k.launch(grid=1, block=64, args=[x, 1.0, 100], stream=ignis.current_stream(gpu.device))

    with ignis.profile() as prof:
        thread = threading.Thread(target=work)
        thread.start()
        thread.join()
    assert [e.block for e in prof.events] == [(64, 1, 1)]


def test_a_refused_launch_is_not_recorded_and_its_events_are_reused(gpu) -> None:
    k = user_kernel(SCALE, "scale")
    x = buffer(100)
    with ignis.profile() as prof:
        gpu.events.launch_status = driver.CUresult.CUDA_ERROR_INVALID_VALUE
        with pytest.raises(ignis.CudaError, match="CUDA_ERROR_INVALID_VALUE"):
            k.launch(grid=1, block=64, args=[x, 1.0, 100])
        gpu.events.launch_status = SUCCESS
        k.launch(grid=1, block=64, args=[x, 1.0, 100])
    assert len(prof.events) == 1
    assert len(gpu.events.created) == 3  # the device's origin and one pair, used twice


# --- off: nothing recorded, nothing created --------------------------------------------------


def test_without_a_profile_nothing_is_recorded_or_created(gpu) -> None:
    k = user_kernel(SCALE, "scale")
    x = a = buffer(1000)
    for _ in range(3):
        k.launch(grid=1, block=64, args=[x, 1.0, 100])
        a + a
    with ignis.profile() as prof:
        pass
    for _ in range(3):  # after the profile: off again
        k.launch(grid=1, block=64, args=[x, 1.0, 100])
        a + a
    events = gpu.events
    assert prof.events == [] and profiler_module.active is None
    assert events.created == [] and events.records == [] and events.capture_queries == 0
    assert events.register_queries == []


def test_every_event_is_destroyed_when_the_profile_ends(gpu) -> None:
    k = user_kernel(SCALE, "scale")
    x = buffer(100)
    s1 = ignis.Stream.from_handle(0x6400, gpu.device)
    s2 = ignis.Stream.from_handle(0x6500, gpu.device)
    with ignis.profile() as prof:
        for _ in range(3):
            k.launch(grid=1, block=64, args=[x, 1.0, 100], stream=s1)
            k.launch(grid=1, block=64, args=[x, 1.0, 100], stream=s2)
        prof.table()  # read in the middle: these events are reused for the next launches
        k.launch(grid=1, block=64, args=[x, 1.0, 100], stream=s1)
    assert sorted(gpu.events.destroyed) == sorted(gpu.events.created)
    assert len(gpu.events.created) == 1 + 2 * 6  # the origin, and no more pairs than at once
    # One synchronize per stream each time the times are read (the last event of each).
    assert len(gpu.events.synchronized) == 3
    assert len(prof.events) == 7


# --- the table and the trace ---------------------------------------------------------------


def _two_kernels(gpu) -> ignis.Profile:
    scale, shift = user_kernel(SCALE, "scale"), user_kernel(SHIFT, "shift")
    gpu.events.durations.update(scale=0.010, shift=0.100)
    x = buffer(1000)
    s1 = ignis.Stream.from_handle(0x6400, gpu.device)
    s2 = ignis.Stream.from_handle(0x6500, gpu.device)
    with ignis.profile() as prof:
        for i in range(5):
            scale.launch(grid=4 + i % 2, block=256, args=[x, 2.0, 1000], stream=s1)
        for _ in range(2):
            shift.launch(grid=8, block=128, args=[x, 1.0, 1000], shared_mem=64, stream=s2)
    return prof


def test_summary_rows_aggregate_and_sort(gpu) -> None:
    prof = _two_kernels(gpu)
    by_total = prof.summary()
    assert [r.name for r in by_total] == ["shift", "scale"]  # 0.2 ms before 0.05 ms
    shift, scale = by_total
    assert (shift.calls, shift.grid, shift.block) == (2, (8, 1, 1), (128, 1, 1))
    assert shift.shared_mem == 64
    assert shift.total_ms == pytest.approx(0.2) and shift.mean_us == pytest.approx(100.0)
    assert shift.min_us == pytest.approx(100.0) and shift.max_us == pytest.approx(100.0)
    assert scale.calls == 5 and scale.total_ms == pytest.approx(0.05)
    assert scale.grid is None and scale.block == (256, 1, 1)  # grids 4 and 5: mixed
    assert [r.name for r in prof.summary(sort_by="calls")] == ["scale", "shift"]
    assert [r.name for r in prof.summary(sort_by="name")] == ["scale", "shift"]
    config = prof.summary(group_by="config")
    assert [(r.name, r.grid, r.calls) for r in config] == [
        ("shift", (8, 1, 1), 2),
        ("scale", (4, 1, 1), 3),
        ("scale", (5, 1, 1), 2),
    ]


def test_table_lists_rows_in_order_with_every_column(gpu) -> None:
    prof = _two_kernels(gpu)
    lines = prof.table().splitlines()
    assert lines[0].split() == [
        "name", "calls", "total", "ms", "mean", "us", "min", "us", "max", "us",
        "grid", "block", "smem", "regs",
    ]  # fmt: skip
    assert set(lines[1]) == {"-"}
    assert lines[2].split() == [
        "shift", "2", "0.200", "100.00", "100.00", "100.00", "8x1x1", "128x1x1", "64", "32",
    ]  # fmt: skip
    assert lines[3].split() == [
        "scale", "5", "0.050", "10.00", "10.00", "10.00", "mixed", "256x1x1", "0", "32",
    ]  # fmt: skip
    assert lines[4] == "7 launches, 0.250 ms of device time"
    limited = prof.table(sort_by="calls", limit=1).splitlines()
    assert limited[2].split()[0] == "scale" and "(1 more rows not shown)" in limited


def test_table_and_summary_refuse_bad_arguments(gpu) -> None:
    prof = _two_kernels(gpu)
    with pytest.raises(ValueError, match="sort_by must be one of total, mean.*got 'time'"):
        prof.table(sort_by="time")
    with pytest.raises(ValueError, match="limit must be a positive int or None; got 0"):
        prof.table(limit=0)
    with pytest.raises(ValueError, match="limit must be a positive int or None; got 2.0"):
        prof.table(limit=2.0)
    with pytest.raises(ValueError, match="group_by must be one of name, config; got 'stream'"):
        prof.summary(group_by="stream")
    with pytest.raises(TypeError, match="path must be a str or os.PathLike; got int"):
        prof.export(3)


def test_export_writes_a_chrome_trace_with_one_track_per_stream(gpu, tmp_path) -> None:
    prof = _two_kernels(gpu)
    path = tmp_path / "trace.json"
    prof.export(path)
    with open(path, encoding="utf-8") as f:
        trace = json.load(f)
    assert trace["displayTimeUnit"] == "ms"
    events = trace["traceEvents"]
    slices = [e for e in events if e["ph"] == "X"]
    assert len(slices) == 7
    for e in slices:
        assert {"name", "ph", "ts", "dur", "pid", "tid", "args", "cat"} <= e.keys()
        assert e["pid"] == 0 and e["ts"] >= 0
        assert {"grid", "block", "shared_mem", "registers", "stream"} <= e["args"].keys()
    shift = [e for e in slices if e["name"] == "shift"]
    assert all(e["dur"] == pytest.approx(100.0) for e in shift)  # microseconds
    assert shift[0]["args"]["grid"] == [8, 1, 1] and shift[0]["args"]["shared_mem"] == 64
    assert shift[0]["args"]["stream"] == "0x6500"
    tracks = {e["tid"] for e in slices}
    assert len(tracks) == 2 and {e["tid"] for e in shift} != {
        e["tid"] for e in slices if e["name"] == "scale"
    }
    # Within a track the slices follow one another in launch order.
    for tid in tracks:
        ts = [(e["ts"], e["dur"]) for e in slices if e["tid"] == tid]
        assert all(t0 + d0 <= t1 + 1e-6 for (t0, d0), (t1, _) in zip(ts, ts[1:], strict=False))
    names = {(e["name"], e["tid"]): e["args"]["name"] for e in events if e["ph"] == "M"}
    assert names[("process_name", 0)] == "cuda:0"
    assert sorted(v for (k, _), v in names.items() if k == "thread_name") == [
        "stream 0x6400",
        "stream 0x6500",
    ]


# --- nesting and reuse ---------------------------------------------------------------------


def test_profiles_do_not_nest_and_do_not_record_twice(gpu) -> None:
    with ignis.profile() as outer:
        with pytest.raises(RuntimeError, match="another profile is already recording"):
            with ignis.profile():
                pass
        assert profiler_module.active is outer  # the outer one still records
    assert profiler_module.active is None
    with pytest.raises(RuntimeError, match="has already recorded; use a new ignis.profile"):
        with outer:
            pass


def test_a_profile_started_in_another_thread_is_refused(gpu) -> None:
    errors = []

    def start() -> None:
        try:
            with ignis.profile():
                pass
        except RuntimeError as exc:
            errors.append(str(exc))

    with ignis.profile():
        thread = threading.Thread(target=start)
        thread.start()
        thread.join()
    assert len(errors) == 1 and "already recording" in errors[0]


def test_an_error_in_the_block_stops_recording(gpu) -> None:
    k = user_kernel(SCALE, "scale")
    x = buffer(100)
    with pytest.raises(KeyError):
        with ignis.profile() as prof:
            k.launch(grid=1, block=64, args=[x, 1.0, 100])
            raise KeyError("boom")
    assert profiler_module.active is None and len(prof.events) == 1
    assert sorted(gpu.events.destroyed) == sorted(gpu.events.created)


# --- the CPU backend -----------------------------------------------------------------------


def test_on_the_cpu_backend_nothing_is_recorded() -> None:
    x = ignis.asarray(np.arange(6.0), device="cpu")
    with ignis.profile() as prof:
        y = (x * 2.0).sum()
    assert y.item() == 30.0
    assert prof.events == [] and prof.summary() == []
    assert "no kernel launches recorded" in prof.table()
    assert prof.trace()["traceEvents"] == []


# --- the GPU -------------------------------------------------------------------------------


@pytest.mark.gpu
def test_real_device_times_registers_and_order_per_stream(tmp_path) -> None:
    scale = ignis.compile_kernel(SCALE, "scale")
    shift = ignis.compile_kernel(SHIFT, "shift")
    n = 1 << 22
    rng = np.random.default_rng(5)
    host = rng.standard_normal(n).astype(np.float32)
    s1, s2 = ignis.Stream(), ignis.Stream()
    x = ignis.alloc(4 * n, stream=s1)
    y = ignis.alloc(4 * n, stream=s2)
    x.copy_from_host(host)
    y.copy_from_host(host)
    grid = ignis.Kernel.calc_grid_size(n)
    with ignis.profile() as prof:
        for _ in range(4):
            scale.launch(grid=grid, block=256, args=[x, 2.0, n], stream=s1)
            shift.launch(grid=grid, block=256, args=[y, 1.0, n], stream=s2)
    s1.synchronize()
    s2.synchronize()
    # The profiled launches computed what they would have without the profiler.
    np.testing.assert_allclose(
        np.frombuffer(x.copy_to_host(), np.float32), host.astype(np.float64) * 16, rtol=1e-6
    )
    np.testing.assert_allclose(
        np.frombuffer(y.copy_to_host(), np.float32), host.astype(np.float64) + 4, rtol=1e-6
    )
    events = prof.events
    assert len(events) == 8
    for e in events:
        assert e.time_ms > 0 and e.registers > 0 and e.grid == (grid, 1, 1)
        assert e.registers == scale.attributes()["num_regs"] or e.name == "shift"
    for stream in (s1, s2):
        mine = [e for e in events if e.stream == stream.ptr]
        assert len(mine) == 4
        for a, b in zip(mine, mine[1:], strict=False):
            assert a.start_us + a.time_ms * 1e3 <= b.start_us + 1.0  # (event resolution)
    path = tmp_path / "trace.json"
    prof.export(path)
    with open(path, encoding="utf-8") as f:
        slices = [e for e in json.load(f)["traceEvents"] if e["ph"] == "X"]
    assert len(slices) == 8 and len({e["tid"] for e in slices}) == 2
    assert prof.summary()[0].calls == 4


@pytest.mark.gpu
def test_array_ops_and_elementwise_kernels_are_recorded_on_the_gpu() -> None:
    rng = np.random.default_rng(6)
    a = ignis.asarray(rng.standard_normal(10_000).astype(np.float32), device="cuda:0")
    double = ignis.ElementwiseKernel("float32 x", "float32 y", "y = x * 2", "double_it")
    for _ in range(2):  # plans and direct functions made before recording
        (a + a).sum()
    with ignis.profile() as prof:
        total = (a + a).sum()
        out = double(a)
    np.testing.assert_allclose(total.item(), float(np.sum(a.to_host().astype(np.float64) * 2)),
                               rtol=1e-4)  # fmt: skip
    np.testing.assert_allclose(out.to_host(), a.to_host() * 2)
    names = [e.name for e in prof.events]
    assert any("op_add" in name for name in names)
    assert any(name.startswith("ignis::reduce") for name in names)
    assert any("double_it" in name for name in names)
    assert all(e.time_ms > 0 for e in prof.events)


@pytest.mark.gpu
def test_nested_profiles_are_refused_on_the_gpu() -> None:
    with ignis.profile():
        with pytest.raises(RuntimeError, match="already recording"):
            ignis.profile().__enter__()


@pytest.mark.gpu
def test_capture_records_launches_without_time_and_times_the_replays() -> None:
    k = ignis.compile_kernel(SCALE, "scale")
    n = 1 << 16
    s = ignis.Stream()
    x = ignis.alloc(4 * n, stream=s)
    host = np.random.default_rng(8).standard_normal(n).astype(np.float32)
    x.copy_from_host(host)
    grid = ignis.Kernel.calc_grid_size(n)
    with ignis.profile() as prof:
        with ignis.Graph.capture(s) as g:
            k.launch(grid=grid, block=256, args=[x, 2.0, n], stream=s)
            k.launch(grid=grid, block=256, args=[x, 0.5, n], stream=s)
        for _ in range(3):
            g.launch(s)
    s.synchronize()
    np.testing.assert_allclose(np.frombuffer(x.copy_to_host(), np.float32), host, rtol=1e-6)
    captured = [e for e in prof.events if e.captured]
    replays = [e for e in prof.events if e.kind == "graph"]
    assert len(captured) == 2 and all(e.time_ms is None for e in captured)
    assert len(replays) == 3 and all(e.time_ms > 0 and e.graph_nodes == 2 for e in replays)
    assert "under CUDA-graph capture" in prof.table()
