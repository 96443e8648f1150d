"""Device memory: every copy path preserves random data; stats, OOM recovery, bad input."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import ignis

pytestmark = pytest.mark.gpu

rng = np.random.default_rng(1234)


def random_bytes(n: int) -> np.ndarray:
    return rng.integers(0, 256, size=n, dtype=np.uint8)


@pytest.mark.parametrize("resource", ["async", "plain"])
@pytest.mark.parametrize("nbytes", [1, 1000, 4096, 3 * 2**20 + 7])
def test_host_device_host_round_trip(resource: str, nbytes: int) -> None:
    mr = ignis.AsyncMemoryResource(0) if resource == "async" else ignis.PlainMemoryResource(0)
    data = random_bytes(nbytes)
    buf = mr.allocate(nbytes)
    assert buf.ptr % 256 == 0
    buf.copy_from_host(data)
    out = buf.copy_to_host()
    np.testing.assert_array_equal(out, data)
    buf.close()
    assert buf.closed


def test_device_to_device_and_async_on_streams_with_pinned_memory() -> None:
    n = 1 << 22
    data = random_bytes(n)
    s = ignis.Stream()
    pinned_in = ignis.pinned_empty(n, np.uint8)
    pinned_in[:] = data
    a = ignis.alloc(n, stream=s)
    b = ignis.alloc(n, stream=s)
    ignis.memcpy(a, pinned_in, n, stream=s)
    ignis.memcpy(b, a, n, stream=s)
    pinned_out = ignis.pinned_empty(n, np.uint8)
    pinned_out[:] = 0
    ignis.memcpy(pinned_out, b, n, stream=s)
    s.synchronize()
    np.testing.assert_array_equal(pinned_out, data)
    c = ignis.alloc(n)
    c.copy_from(b)
    np.testing.assert_array_equal(c.copy_to_host(), data)


def test_typed_round_trip_and_partial_copy() -> None:
    x = rng.standard_normal(1000).astype(np.float32)
    buf = ignis.alloc(x.nbytes)
    buf.copy_from_host(x)
    out = np.empty_like(x)
    buf.copy_to_host(out)
    np.testing.assert_array_equal(out, x)
    head = np.zeros(10, np.float32)
    ignis.memcpy(head, buf, head.nbytes)
    np.testing.assert_array_equal(head, x[:10])


def test_memset() -> None:
    buf = ignis.alloc(4097)
    buf.copy_from_host(random_bytes(4097))
    ignis.memset(buf, 0xAB, 100)
    out = buf.copy_to_host()
    assert (out[:100] == 0xAB).all() and not (out[100:] == 0xAB).all()
    with pytest.raises(ValueError, match="byte 0..255"):
        ignis.memset(buf, 256)


def test_memory_stats_track_current_and_peak() -> None:
    ignis.synchronize()
    gc.collect()
    ignis.reset_peak_memory_stats()
    before = ignis.memory_stats()
    bufs = [ignis.alloc(1 << 20) for _ in range(3)]
    mid = ignis.memory_stats()
    assert mid["current_bytes"] - before["current_bytes"] == 3 << 20
    assert mid["allocation_count"] - before["allocation_count"] == 3
    assert mid["peak_bytes"] >= mid["current_bytes"]
    for b in bufs:
        b.close()
    after = ignis.memory_stats()
    assert after["current_bytes"] == before["current_bytes"]
    assert after["deallocation_count"] - before["deallocation_count"] == 3
    assert after["peak_bytes"] == mid["peak_bytes"]
    ignis.reset_peak_memory_stats()
    assert ignis.memory_stats()["peak_bytes"] == after["current_bytes"]
    assert "pool_reserved_bytes" in after


def test_finalizer_frees_unreferenced_buffers() -> None:
    gc.collect()
    before = ignis.memory_stats()["current_bytes"]
    buf = ignis.alloc(1 << 20)
    assert ignis.memory_stats()["current_bytes"] == before + (1 << 20)
    del buf
    gc.collect()
    assert ignis.memory_stats()["current_bytes"] == before


def test_pool_keeps_freed_memory_for_reuse() -> None:
    mr = ignis.get_memory_resource(0)
    if not isinstance(mr, ignis.AsyncMemoryResource):
        pytest.skip("device has no memory pools")
    from cuda.bindings import driver

    # The promise: memory freed to the pool is kept (an unlimited release threshold), not
    # returned to the driver at each synchronization. The pool is the device's default pool,
    # which other libraries in the process may trim, so the attribute is what is checked.
    threshold = ignis._bindings.cu.cuMemPoolGetAttribute(
        mr._pool, driver.CUmemPool_attribute.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD
    )
    assert int(threshold) == (1 << 64) - 1
    # And a freed block is handed out again: same size, same stream, same address.
    uncached = ignis.AsyncMemoryResource(0, cache_bytes=0)
    buf = uncached.allocate(64 << 20)
    ptr = buf.ptr
    buf.close()
    ignis.synchronize()
    again = uncached.allocate(64 << 20)
    assert again.ptr == ptr
    again.close()


@pytest.mark.parametrize("resource", ["async", "plain"])
def test_impossible_allocation_raises_and_process_stays_usable(resource: str) -> None:
    mr = ignis.AsyncMemoryResource(0) if resource == "async" else ignis.PlainMemoryResource(0)
    free, total = ignis.Device(0).mem_info()
    with pytest.raises(ignis.OutOfMemoryError) as info:
        mr.allocate(total * 4)
    err = info.value
    assert err.requested == total * 4 and err.total == total and "out of memory on cuda:0" in str(err)
    data = random_bytes(1 << 16)
    buf = ignis.alloc(1 << 16)
    buf.copy_from_host(data)
    np.testing.assert_array_equal(buf.copy_to_host(), data)


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="nbytes must be >= 0"):
        ignis.alloc(-1)
    with pytest.raises(TypeError, match="nbytes must be an int"):
        ignis.alloc(1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="cannot be constructed directly"):
        ignis.Buffer()
    buf = ignis.alloc(16)
    with pytest.raises(ValueError, match="holds only 16"):
        ignis.memcpy(buf, np.zeros(32, np.uint8), 32)
    with pytest.raises(ValueError, match="C-contiguous"):
        buf.copy_from_host(np.zeros((4, 8), np.uint8)[:, ::2])
    buf.close()
    with pytest.raises(ValueError, match="closed"):
        buf.copy_to_host()
    empty = ignis.alloc(0)
    assert empty.ptr == 0 and empty.nbytes == 0


def test_buffer_exposes_cuda_array_interface_to_torch() -> None:
    torch = pytest.importorskip("torch")
    data = random_bytes(1000)
    buf = ignis.alloc(1000)
    buf.copy_from_host(data)
    t = torch.as_tensor(buf, device="cuda")
    assert t.data_ptr() == buf.ptr
    np.testing.assert_array_equal(t.cpu().numpy(), data)


def test_cached_blocks_are_reused_in_stream_order() -> None:
    mr = ignis.get_memory_resource(0)
    if not isinstance(mr, ignis.AsyncMemoryResource):
        pytest.skip("device has no memory pools")
    buf = ignis.alloc(4000)
    ptr = buf.ptr
    buf.close()
    again = ignis.alloc(4000)  # the legacy default stream: the cached block, no driver call
    assert again.ptr == ptr
    again.close()
    # Results written into reused blocks, queued back to back without a synchronization.
    a_host = rng.standard_normal(1000).astype(np.float32)
    b_host = rng.standard_normal(1000).astype(np.float32)
    a, b = ignis.asarray(a_host, device="cuda:0"), ignis.asarray(b_host, device="cuda:0")
    total = ignis.zeros(1000, device="cuda:0")
    for i in range(200):
        total += (a * float(i)) + b  # two temporaries a step, their blocks reused
    expected = np.zeros(1000, np.float32)
    for i in range(200):
        expected += (a_host * np.float32(i)) + b_host
    np.testing.assert_allclose(total.to_host(), expected, rtol=1e-5, atol=1e-3)
    cached = mr.cached_bytes
    mr.trim()  # frees the cached blocks too
    assert mr.cached_bytes == 0 and cached >= 4000


def test_a_buffer_outliving_its_closed_stream_is_freed_safely() -> None:
    # A free queued on a destroyed stream is undefined behaviour (it crashed a threaded load
    # test): the buffer waits for the device and frees on the default stream instead.
    stream = ignis.Stream(0)
    buf = ignis.alloc(1 << 20, stream=stream)
    ignis.memset(buf, 7, stream=stream)
    gc.collect()
    before = ignis.memory_stats()["current_bytes"]
    stream.close()
    assert stream.closed and not buf.closed
    del buf
    gc.collect()
    assert ignis.memory_stats()["current_bytes"] == before - (1 << 20)
    x = ignis.ones((1000,), device="cuda:0")
    assert float(ignis.sum(x).item()) == 1000.0  # the device is still fine
