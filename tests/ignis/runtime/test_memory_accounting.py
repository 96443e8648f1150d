"""Buffers and memory statistics on a fake driver: exact counts (also across threads and log
folds), one free per buffer on its own stream, at close() or at garbage collection."""

from __future__ import annotations

import gc
import random
import sys
import threading

import fake_gpu
import ignis._memory as memory
import numpy as np
import pytest
from ignis._bindings import driver

import ignis

pytestmark = pytest.mark.skipif(
    ignis.is_available(), reason="fake driver tests: the GPU tests cover the real driver"
)


@pytest.fixture
def gpu(monkeypatch: pytest.MonkeyPatch):
    g = fake_gpu.install(monkeypatch, ordinals=(0, 1))
    yield g
    fake_gpu.uninstall()


def frees(gpu) -> list[tuple[int, int]]:
    """(address, stream handle) of every cuMemFreeAsync so far."""
    return [(int(ptr), int(stream)) for ptr, stream in gpu.calls["cuMemFreeAsync"]]


def stats(device: int = 0) -> dict[str, int]:
    s = ignis.memory_stats(device)
    return {k: v for k, v in s.items() if not k.startswith("pool_")}


def test_statistics_follow_every_allocation_and_free(gpu) -> None:
    sizes = [1000, 1 << 20, 7, 4096]
    bufs = [ignis.alloc(n) for n in sizes]
    assert stats() == {
        "current_bytes": sum(sizes),
        "peak_bytes": sum(sizes),
        "allocation_count": 4,
        "deallocation_count": 0,
        "allocated_bytes_total": sum(sizes),
        "active_allocations": 4,
    }
    bufs[1].close()
    del bufs[0]  # freed by garbage collection (here: at once, by reference counting)
    assert stats() == {
        "current_bytes": 7 + 4096,
        "peak_bytes": sum(sizes),
        "allocation_count": 4,
        "deallocation_count": 2,
        "allocated_bytes_total": sum(sizes),
        "active_allocations": 2,
    }
    ignis.reset_peak_memory_stats()
    extra = ignis.alloc(100)
    assert stats()["peak_bytes"] == 7 + 4096 + 100
    del extra, bufs
    assert stats()["current_bytes"] == 0 and stats()["active_allocations"] == 0
    assert stats(1)["allocation_count"] == 0  # the other device saw nothing
    assert not gpu.live  # every fake allocation was freed


def test_peak_is_exact_through_many_folds(monkeypatch, gpu) -> None:
    monkeypatch.setattr(memory, "_FOLD_AT", 8)
    rng = random.Random(5)
    live: list[ignis.Buffer] = []
    current = peak = total = count = frees_in_a_row = 0
    for _ in range(500):
        if live and rng.random() < 0.45:
            b = live.pop(rng.randrange(len(live)))
            current -= b.nbytes
            b.close()
            frees_in_a_row += 1
        else:
            n = rng.randrange(1, 5000)
            live.append(ignis.alloc(n))
            current += n
            total += n
            count += 1
            peak = max(peak, current)
            frees_in_a_row = 0
        # an allocation folds a log longer than 8; frees only append
        assert len(memory._logs[0]) <= 8 + frees_in_a_row
    s = stats()
    assert (s["current_bytes"], s["peak_bytes"]) == (current, peak)
    assert (s["allocation_count"], s["allocated_bytes_total"]) == (count, total)
    assert s["deallocation_count"] == count - len(live) == count - s["active_allocations"]


def test_counts_stay_exact_across_threads(monkeypatch, gpu) -> None:
    monkeypatch.setattr(memory, "_FOLD_AT", 64)
    kept: list[list[ignis.Buffer]] = [[] for _ in range(4)]
    errors: list[BaseException] = []

    def work(k: int) -> None:
        try:
            fake_gpu.device_module._tls.active = gpu.device  # this thread's active device
            rng = random.Random(k)
            for _ in range(400):
                b = ignis.alloc(rng.randrange(1, 3000), device=gpu.device)
                if rng.random() < 0.5:
                    kept[k].append(b)
                elif rng.random() < 0.5:
                    b.close()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def read() -> None:
        for _ in range(200):
            ignis.memory_stats(0)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    threads.append(threading.Thread(target=read))
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert not errors
    s = stats()
    live = [b for bs in kept for b in bs]
    assert s["allocation_count"] == 1600
    assert s["active_allocations"] == len(live) == len(gpu.live)
    assert s["current_bytes"] == sum(b.nbytes for b in live) == sum(gpu.live.values())
    assert s["peak_bytes"] >= s["current_bytes"]


def test_close_frees_once_on_the_allocation_stream(gpu) -> None:
    stream = ignis.Stream.from_handle(0x5100, gpu.device)
    buf = ignis.alloc(4096, stream=stream)
    ptr = buf.ptr
    assert not buf.closed and buf.stream is stream
    buf.close()
    buf.close()
    assert buf.closed and buf.ptr == 0
    del buf
    gc.collect()
    assert frees(gpu) == [(ptr, 0x5100)]
    with pytest.raises(ValueError, match="Buffer.copy_to_host: the buffer has been closed"):
        b2 = ignis.alloc(8)
        b2.close()
        b2.copy_to_host()


def test_collected_buffers_are_freed_on_their_stream_and_device(gpu) -> None:
    other = gpu.devices[1]
    s1 = ignis.Stream.from_handle(0x5200, other)
    a = ignis.alloc(100)
    b = ignis.alloc(200, stream=s1)
    assert b.device is other
    pa, pb = a.ptr, b.ptr
    cycle: list = [b]
    cycle.append(cycle)  # only the cycle collector can free b
    del a, b, cycle
    assert frees(gpu) == [(pa, 0)]
    gc.collect()
    assert frees(gpu) == [(pa, 0), (pb, 0x5200)]
    assert stats(0)["current_bytes"] == 0 and stats(1)["current_bytes"] == 0
    assert stats(1)["deallocation_count"] == 1
    # the free made the buffer's device current first
    assert fake_gpu.device_module._tls.active is other


def test_concurrent_close_frees_once(gpu) -> None:
    for _ in range(20):
        buf = ignis.alloc(64)
        barrier = threading.Barrier(6)

        def close(b: ignis.Buffer = buf, barrier: threading.Barrier = barrier) -> None:
            fake_gpu.device_module._tls.active = gpu.device
            barrier.wait()
            b.close()

        threads = [threading.Thread(target=close) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert len(gpu.calls["cuMemFreeAsync"]) == 20
    assert stats()["deallocation_count"] == 20


def test_empty_buffers_need_no_driver(gpu) -> None:
    empty = ignis.alloc(0)
    assert empty.ptr == 0 and empty.nbytes == 0 and not empty.closed
    empty.close()
    assert not empty.closed  # nothing was ever allocated, so nothing was freed
    del empty
    assert not gpu.calls["cuMemAllocAsync"] and not gpu.calls["cuMemFreeAsync"]
    assert stats()["allocation_count"] == 0


def test_construction_refused_and_bare_objects_are_harmless(gpu) -> None:
    with pytest.raises(TypeError, match=r"cannot be constructed directly; use ignis.alloc"):
        ignis.Buffer()
    seen: list = []
    old = sys.unraisablehook
    sys.unraisablehook = seen.append
    try:
        bare = object.__new__(ignis.Buffer)
        del bare
        gc.collect()
    finally:
        sys.unraisablehook = old
    assert seen == []


def test_bad_requests_are_refused(gpu) -> None:
    with pytest.raises(TypeError, match="allocate: nbytes must be an int, got float"):
        ignis.get_memory_resource(0).allocate(1.5)
    with pytest.raises(TypeError, match="nbytes must be an int, got bool"):
        ignis.alloc(True)
    with pytest.raises(ValueError, match="allocate: nbytes must be >= 0, got -3"):
        ignis.get_memory_resource(0).allocate(-3)
    s1 = ignis.Stream.from_handle(0x5300, gpu.devices[1])
    with pytest.raises(ValueError, match="allocate: stream is on cuda:1, memory resource on"):
        ignis.get_memory_resource(0).allocate(16, s1)
    assert ignis.alloc(np.int64(24)).nbytes == 24  # NumPy integers are accepted
    assert not gpu.live


def test_out_of_memory_changes_no_statistics(gpu) -> None:
    keep = ignis.alloc(10)
    before = stats()
    gpu.status["cuMemAllocAsync"] = driver.CUresult.CUDA_ERROR_OUT_OF_MEMORY
    with pytest.raises(ignis.OutOfMemoryError, match="out of memory on cuda:0") as info:
        ignis.alloc(1 << 40)
    assert info.value.requested == 1 << 40
    del gpu.status["cuMemAllocAsync"]
    assert stats() == before
    assert ignis.alloc(20).nbytes == 20 and keep.nbytes == 10


def test_a_failing_free_is_reported_and_still_counted(gpu) -> None:
    buf = ignis.alloc(256)
    gpu.status["cuMemFreeAsync"] = driver.CUresult.CUDA_ERROR_INVALID_VALUE
    seen: list = []
    old = sys.unraisablehook
    sys.unraisablehook = seen.append
    try:
        del buf
    finally:
        sys.unraisablehook = old
    del gpu.status["cuMemFreeAsync"]
    assert len(seen) == 1 and isinstance(seen[0].exc_value, ignis.CudaError)
    assert "CUDA_ERROR_INVALID_VALUE" in str(seen[0].exc_value)
    assert stats()["current_bytes"] == 0 and stats()["deallocation_count"] == 1
    buf = ignis.alloc(8)
    gpu.status["cuMemFreeAsync"] = driver.CUresult.CUDA_ERROR_INVALID_VALUE
    with pytest.raises(ignis.CudaError, match="cuMemFreeAsync"):
        buf.close()
    del gpu.status["cuMemFreeAsync"]
    assert buf.closed  # not freed twice later
    gpu.live.clear()
