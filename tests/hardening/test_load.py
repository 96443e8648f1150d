"""Load: many threads launching kernels and allocating on their own streams, allocation churn,
and host memory, each for ``IGNIS_LOAD_SECONDS`` (default 20) seconds, with every result checked.

GPU only and marked ``slow``: ``pytest -m "gpu and slow" tests/hardening/test_load.py``.
"""

from __future__ import annotations

import gc
import os
import threading
import time
import tracemalloc

import numpy as np
import pytest

import ignis

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

SECONDS = float(os.environ.get("IGNIS_LOAD_SECONDS", "20"))
THREADS = int(os.environ.get("IGNIS_LOAD_THREADS", "8"))


def rss_bytes() -> int:
    """Resident set size of this process (Linux), 0 where unknown."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _worker(index: int, deadline: float, counts: list[int], errors: list[BaseException]) -> None:
    rng = np.random.default_rng(index)
    try:
        stream = ignis.Stream("cuda:0")
        with stream:
            while time.monotonic() < deadline:
                n = int(rng.integers(1, 200_000))
                h = rng.standard_normal(n).astype(np.float32)
                x = ignis.from_host(h, device="cuda:0")
                y = (x * 2.0 + 1.0).astype("float64")  # elementwise + cast, on this stream
                total = ignis.sum(y).item()
                expected = float((h.astype(np.float64) * 2 + 1).sum())
                if abs(total - expected) > 1e-4 * max(1.0, abs(expected)) + 1e-3 * n**0.5:
                    raise AssertionError(f"thread {index}: sum {total} != {expected} (n={n})")
                m = int(rng.integers(1, 96))
                a = rng.standard_normal((m, 33)).astype(np.float32)
                b = rng.standard_normal((33, m)).astype(np.float32)
                got = ignis.matmul(
                    ignis.from_host(a, device="cuda:0"), ignis.from_host(b, device="cuda:0")
                ).to_host()
                np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)
                s = ignis.softmax(ignis.from_host(a, device="cuda:0"), axis=-1).to_host()
                np.testing.assert_allclose(s.sum(axis=-1), np.ones(m), rtol=1e-5)
                counts[index] += 1
            stream.synchronize()
        stream.close()
    except BaseException as exc:  # reported by the main thread
        errors.append(exc)


def test_many_threads_launch_and_allocate_on_their_own_streams():
    ignis.synchronize()
    counts = [0] * THREADS
    errors: list[BaseException] = []
    deadline = time.monotonic() + SECONDS
    threads = [
        threading.Thread(target=_worker, args=(i, deadline, counts, errors)) for i in range(THREADS)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(SECONDS + 300)
        assert not t.is_alive(), "a worker thread hangs"
    if errors:
        raise errors[0]
    assert all(c > 0 for c in counts), counts  # every thread made progress


def test_alloc_free_churn_returns_memory_stats_to_baseline():
    dev = ignis.Device(0)
    gc.collect()
    ignis.synchronize()
    base = ignis.memory_stats(dev)
    rng = np.random.default_rng(7)
    deadline = time.monotonic() + SECONDS
    live: list[ignis.Buffer] = []
    rounds = 0
    streams = [ignis.Stream(dev) for _ in range(4)]
    while time.monotonic() < deadline:
        for _ in range(64):
            size = int(rng.choice([1, 255, 256, 4097, 1 << 20, int(rng.integers(1, 64 << 20))]))
            stream = streams[int(rng.integers(len(streams)))]
            buf = ignis.alloc(size, device=dev, stream=stream)
            ignis.memset(buf, int(rng.integers(256)), stream=stream)
            live.append(buf)
        rng.shuffle(live)  # free in random order: some closed, some left to the garbage collector
        for buf in live[: len(live) * 3 // 4]:
            if rng.random() < 0.5:
                buf.close()
        live = live[len(live) * 3 // 4 :]
        rounds += 1
        mid = ignis.memory_stats(dev)
        assert mid["current_bytes"] >= base["current_bytes"]
    del live, buf
    gc.collect()
    for s in streams:
        s.synchronize()
    ignis.synchronize()
    end = ignis.memory_stats(dev)
    assert rounds > 0
    assert end["current_bytes"] == base["current_bytes"], (base, end)
    assert end["active_allocations"] == base["active_allocations"], (base, end)
    made = end["allocation_count"] - base["allocation_count"]
    freed = end["deallocation_count"] - base["deallocation_count"]
    assert made == freed and made >= rounds * 64, (made, freed, rounds)


def test_host_memory_stays_flat_under_repeated_work():
    """After a warm-up (compiles, caches, pools), the same work repeated must not grow host
    memory: Python allocations (tracemalloc) or the process's resident set."""
    rng = np.random.default_rng(3)
    h = rng.standard_normal((257, 129)).astype(np.float32)

    def work() -> None:
        x = ignis.from_host(h, device="cuda:0")
        y = ignis.softmax(x * 0.5 + 1.0, axis=-1)
        z = ignis.matmul(y, x.T)
        assert z.shape == (257, 257)
        ignis.sum(z, axis=0).to_host()

    warm_until = time.monotonic() + min(5.0, SECONDS / 4)
    while time.monotonic() < warm_until:
        work()
    gc.collect()
    tracemalloc.start()
    try:
        before_py = tracemalloc.get_traced_memory()[0]
        before_rss = rss_bytes()
        deadline = time.monotonic() + SECONDS
        iterations = 0
        while time.monotonic() < deadline:
            work()
            iterations += 1
        gc.collect()
        after_py = tracemalloc.get_traced_memory()[0]
        after_rss = rss_bytes()
        top = tracemalloc.take_snapshot().statistics("lineno")[:5]
    finally:
        tracemalloc.stop()
    assert iterations > 100
    assert after_py - before_py < 2 << 20, (after_py - before_py, [str(s) for s in top])
    if before_rss:
        assert after_rss - before_rss < 64 << 20, (before_rss, after_rss)
