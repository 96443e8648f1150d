"""Streams and events order work; timing events measure it."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import ignis

pytestmark = pytest.mark.gpu

SPIN = r"""
extern "C" __global__ void spin_then_write(unsigned long long cycles, int* flag, int value) {
    unsigned long long start = clock64();
    while (clock64() - start < cycles) { }
    *flag = value;
}
"""


def test_event_records_and_times_work() -> None:
    k = ignis.compile_kernel(SPIN, "spin_then_write")
    s = ignis.Stream()
    flag = ignis.alloc(4, stream=s)
    start, end = ignis.Event(), ignis.Event()
    start.record(s)
    k.launch(grid=1, block=1, args=[50_000_000, flag, 5], stream=s)
    end.record(s)
    end.synchronize()
    assert end.query() and s.query()
    ms = start.elapsed_time(end)
    assert 0.5 < ms < 5_000
    assert np.frombuffer(flag.copy_to_host(), np.int32)[0] == 5


def test_stream_wait_event_orders_two_streams() -> None:
    k = ignis.compile_kernel(SPIN, "spin_then_write")
    producer, consumer = ignis.Stream(), ignis.Stream()
    flag = ignis.alloc(4, stream=producer)
    ignis.memset(flag, 0, stream=producer)
    k.launch(grid=1, block=1, args=[100_000_000, flag, 11], stream=producer)
    done = producer.record()
    consumer.wait(done)
    out = np.zeros(4, np.uint8)
    ignis.memcpy(out, flag, 4, stream=consumer)
    consumer.synchronize()
    assert np.frombuffer(out, np.int32)[0] == 11  # without the wait it would read 0


def test_query_reports_running_work() -> None:
    k = ignis.compile_kernel(SPIN, "spin_then_write")
    s = ignis.Stream()
    flag = ignis.alloc(4, stream=s)
    k.launch(grid=1, block=1, args=[2_000_000_000, flag, 1], stream=s)
    assert s.query() is False
    s.synchronize()
    assert s.query() is True


def test_timing_disabled_events_refuse_elapsed_time() -> None:
    a, b = ignis.Event(timing=False), ignis.Event(timing=False)
    a.record()
    b.record()
    b.synchronize()
    with pytest.raises(ValueError, match="timing=True"):
        a.elapsed_time(b)


def test_current_stream_context_manager() -> None:
    default = ignis.default_stream()
    assert default.ptr == 0 and ignis.current_stream() == default
    s = ignis.Stream()
    with s:
        assert ignis.current_stream() is s
        inner = ignis.Stream()
        with inner:
            assert ignis.current_stream() is inner
        assert ignis.current_stream() is s
    assert ignis.current_stream() == default


def test_two_threads_launch_on_their_own_streams() -> None:
    src = r"""
    extern "C" __global__ void fill_index(float* out, float scale, int n) {
        for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
            out[i] = scale * i;
    }"""
    k = ignis.compile_kernel(src, "fill_index")
    n = 1 << 20
    errors: list[BaseException] = []
    results: dict[int, np.ndarray] = {}

    def work(tid: int) -> None:
        try:
            s = ignis.Stream()
            buf = ignis.alloc(4 * n, stream=s)
            for _ in range(50):
                k.launch(grid=256, block=256, args=[buf, float(tid + 1), n], stream=s)
            out = np.empty(n, np.float32)
            ignis.memcpy(out, buf, 4 * n, stream=s)
            s.synchronize()
            results[tid] = out
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for tid in range(2):
        np.testing.assert_array_equal(results[tid], (tid + 1) * np.arange(n, dtype=np.float32))
