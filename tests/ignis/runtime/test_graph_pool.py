"""GraphPool: a private pool whose blocks keep fixed addresses across graph replays."""

from __future__ import annotations

import numpy as np
import pytest
from ignis._graph_pool import _Spans

import ignis

# --- the first-fit span list (no GPU needed) -----------------------------------------------------


def test_spans_first_fit_splits_and_reuses_the_lowest_address():
    spans = _Spans()
    spans.add_chunk(1000, 1000)
    a = spans.take(256)
    b = spans.take(256)
    assert (a, b) == (1000, 1256)
    spans.release(a, 256)
    assert spans.take(128) == 1000  # first fit: the freed hole, not the tail
    assert spans.free == [(1128, 128), (1512, 488)]


def test_spans_coalesce_neighbours_back_into_one_chunk():
    spans = _Spans()
    spans.add_chunk(0, 1024)
    blocks = [spans.take(256) for _ in range(4)]
    assert spans.take(1) is None
    for ptr in (blocks[1], blocks[3], blocks[0], blocks[2]):  # out of order
        spans.release(ptr, 256)
    assert spans.free == [(0, 1024)]


def test_spans_never_merge_across_chunks():
    spans = _Spans()
    spans.add_chunk(0, 512)
    spans.add_chunk(512, 512)  # adjacent addresses, different driver allocations
    assert spans.free == [(0, 512), (512, 512)]
    assert spans.take(1024) is None


def test_spans_random_churn_keeps_blocks_disjoint():
    rng = np.random.default_rng(7)
    spans = _Spans()
    spans.add_chunk(0, 1 << 16)
    live: dict[int, int] = {}
    for _ in range(2000):
        if live and rng.random() < 0.45:
            ptr = list(live)[rng.integers(len(live))]
            spans.release(ptr, live.pop(ptr))
        else:
            size = int(rng.integers(1, 64)) * 256
            ptr = spans.take(size)
            if ptr is not None:
                live[ptr] = size
        ranges = sorted(live.items())
        for (p0, s0), (p1, _) in zip(ranges, ranges[1:], strict=False):
            assert p0 + s0 <= p1
        assert sum(live.values()) + sum(n for _, n in spans.free) == 1 << 16
    for ptr, size in list(live.items()):
        spans.release(ptr, size)
    assert spans.free == [(0, 1 << 16)]


# --- on the GPU ----------------------------------------------------------------------------------


@pytest.mark.gpu
def test_pool_serves_arrays_and_reuses_freed_blocks(device):
    if device == "cpu":
        pytest.skip("GraphPool is a CUDA memory resource")
    pool = ignis.GraphPool(0, chunk_bytes=4 << 20)
    with pool.active():
        a = ignis.random.randn((1000,), device=device)
        ptr = a.__cuda_array_interface__["data"][0]
        assert pool.used_bytes >= 4000
        del a
        b = ignis.zeros((1000,), device=device)
        assert b.__cuda_array_interface__["data"][0] == ptr
    assert ignis.get_memory_resource(0) is not pool
    c = ignis.ones((10,), device=device)  # back on the default allocator
    assert np.all(c.to_host() == 1) and np.all(b.to_host() == 0)
    assert pool.reserved_bytes == 4 << 20


@pytest.mark.gpu
def test_arrays_made_during_capture_keep_their_address_across_replays(device):
    if device == "cpu":
        pytest.skip("graphs need CUDA")
    x = ignis.random.randn((4097,), device=device)
    pool = ignis.GraphPool(0)
    s = ignis.Stream(0)
    s.wait_stream(ignis.current_stream(0))
    with pool.active(), s:
        with ignis.Graph.capture(s) as g:
            y = (x * 2.0 + 1.0).sum()  # temporaries freed inside the capture
    for scale in (1.0, -3.0):
        x.copy_(ignis.asarray(np.full(4097, scale, np.float32), device=device))
        g.launch(ignis.current_stream(0))
        np.testing.assert_allclose(y.to_host(), 4097 * (2 * scale + 1), rtol=1e-6)
