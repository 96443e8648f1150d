"""The AsyncMemoryResource block cache on a fake driver: blocks freed on the legacy default stream
are reused by the next allocation of the same size there without a driver call; other streams,
the limits, out-of-memory and trim() still reach the driver, and statistics stay exact."""

from __future__ import annotations

import fake_gpu
import pytest
from ignis import _memory as memory_module
from ignis._bindings import driver

import ignis

pytestmark = pytest.mark.skipif(
    ignis.is_available(), reason="fake driver tests: the GPU tests cover the real driver"
)


@pytest.fixture
def gpu(monkeypatch: pytest.MonkeyPatch):
    g = fake_gpu.install(monkeypatch, cache_bytes=1 << 20)
    yield g
    fake_gpu.uninstall()


def calls(gpu, name: str) -> int:
    return len(gpu.calls[name])


def test_a_freed_block_is_reused_on_the_legacy_stream_without_the_driver(gpu) -> None:
    buf = ignis.alloc(4000)
    ptr = buf.ptr
    buf.close()
    assert calls(gpu, "cuMemFreeAsync") == 0
    assert ignis.get_memory_resource(0).cached_bytes == 4000
    again = ignis.alloc(4000)
    assert again.ptr == ptr and calls(gpu, "cuMemAllocAsync") == 1
    other = ignis.alloc(4001)  # another size: a new block
    assert other.ptr != ptr and calls(gpu, "cuMemAllocAsync") == 2
    s = ignis.memory_stats(0)
    assert (s["allocation_count"], s["deallocation_count"]) == (3, 1)
    assert s["current_bytes"] == 8001


def test_array_ops_in_a_loop_allocate_once(gpu) -> None:
    a = ignis.empty(1000, device="cuda:0")
    b = ignis.empty(1000, device="cuda:0")
    base = calls(gpu, "cuMemAllocAsync")
    for _ in range(50):
        a + b  # noqa: B018 - the result is dropped at once
    assert calls(gpu, "cuMemAllocAsync") == base + 1
    assert calls(gpu, "cuMemFreeAsync") == 0
    assert ignis.memory_stats(0)["current_bytes"] == 8000


def test_other_streams_always_go_to_the_driver(gpu) -> None:
    stream = ignis.Stream.from_handle(0x6100, gpu.device)
    buf = ignis.alloc(512, stream=stream)
    ptr = buf.ptr
    del buf
    assert [(int(p), int(h)) for p, h in gpu.calls["cuMemFreeAsync"]] == [(ptr, 0x6100)]
    with stream:
        x = ignis.alloc(512, stream=ignis.current_stream(gpu.device))
    assert x.ptr != ptr and calls(gpu, "cuMemAllocAsync") == 2
    legacy = ignis.Stream.from_handle(0, gpu.device)  # a wrapper of handle 0 is the legacy one
    y = ignis.alloc(64, stream=legacy)
    py = y.ptr
    y.close()
    assert ignis.alloc(64).ptr == py


def test_limits_bound_what_is_kept(gpu) -> None:
    big = ignis.alloc((1 << 20) + 1)  # over the cache's bytes: freed at once
    big.close()
    assert calls(gpu, "cuMemFreeAsync") == 1
    per_size = memory_module._CACHE_PER_SIZE
    bufs = [ignis.alloc(256) for _ in range(per_size + 2)]
    for b in bufs:
        b.close()
    assert calls(gpu, "cuMemFreeAsync") == 1 + 2  # per_size blocks of one size kept, 2 freed
    assert ignis.get_memory_resource(0).cached_bytes == per_size * 256


def test_out_of_memory_empties_the_cache_and_retries(gpu, monkeypatch) -> None:
    kept = [ignis.alloc(1000) for _ in range(3)]
    ptrs = {b.ptr for b in kept}
    del kept
    real = driver.cuMemAllocAsync
    failures = [driver.CUresult.CUDA_ERROR_OUT_OF_MEMORY]

    def flaky(nbytes, stream):
        if failures:
            return (failures.pop(),)
        return real(nbytes, stream)

    monkeypatch.setattr(driver, "cuMemAllocAsync", flaky)
    buf = ignis.alloc(5000)  # fails once, frees the cached blocks, succeeds
    assert buf.nbytes == 5000
    assert {int(p) for p, _ in gpu.calls["cuMemFreeAsync"]} == ptrs
    assert ignis.get_memory_resource(0).cached_bytes == 0


def test_out_of_memory_with_an_empty_cache_is_still_an_error(gpu) -> None:
    gpu.status["cuMemAllocAsync"] = driver.CUresult.CUDA_ERROR_OUT_OF_MEMORY
    with pytest.raises(ignis.OutOfMemoryError):
        ignis.alloc(1 << 40)
    del gpu.status["cuMemAllocAsync"]


def test_trim_and_release_free_every_cached_block(gpu, monkeypatch) -> None:
    mr = ignis.get_memory_resource(0)
    for n in (100, 200, 200):
        ignis.alloc(n)
    bufs = [ignis.alloc(n) for n in (300, 300)]
    del bufs
    assert mr.cached_bytes == 100 + 200 + 600
    monkeypatch.setattr(driver, "cuMemPoolTrimTo", lambda pool, keep: (driver.CUresult(0),))
    monkeypatch.delattr(ignis._bindings.cu, "cuMemPoolTrimTo", raising=False)
    mr.trim()
    assert mr.cached_bytes == 0 and calls(gpu, "cuMemFreeAsync") == 4
    assert not gpu.live


def test_a_resource_without_cache_frees_at_once(gpu) -> None:
    mr = ignis.AsyncMemoryResource(0, cache_bytes=0)
    buf = mr.allocate(64)
    buf.close()
    assert calls(gpu, "cuMemFreeAsync") == 1 and mr.cached_bytes == 0


def test_a_hand_built_stream_object_is_not_taken_for_the_legacy_stream(gpu) -> None:
    bare = object.__new__(ignis.Stream)  # as other code builds wrappers: no _legacy attribute
    bare.device, bare.handle = gpu.device, driver.CUstream(0x6300)
    buf = ignis.alloc(128, stream=bare)
    buf.close()
    assert [int(h) for _, h in gpu.calls["cuMemFreeAsync"]] == [0x6300]


# --- _result_block: the allocation of every array op's result ------------------------------------


def test_a_result_block_comes_from_the_cache_on_the_current_legacy_stream(gpu) -> None:
    buf = ignis.alloc(4000)
    ptr = buf.ptr
    buf.close()
    before = ignis.memory_stats(0)
    result = memory_module._result_block(4000, gpu.device)
    assert result.ptr == ptr and result.nbytes == 4000
    assert result.stream is ignis.default_stream(gpu.device) and result.device is gpu.device
    assert calls(gpu, "cuMemAllocAsync") == 1  # the first block only
    after = ignis.memory_stats(0)
    assert after["allocation_count"] == before["allocation_count"] + 1
    assert after["current_bytes"] == before["current_bytes"] + 4000
    assert ignis.get_memory_resource(0).cached_bytes == 0
    result.close()  # back to the cache, not the driver
    assert calls(gpu, "cuMemFreeAsync") == 0 and ignis.memory_stats(0)["current_bytes"] == 0


def test_a_result_block_on_another_stream_comes_from_the_driver_there(gpu) -> None:
    ignis.alloc(4000).close()  # a cached block of the size, for the legacy stream only
    stream = ignis.Stream.from_handle(0x6400, gpu.device)
    with stream:
        result = memory_module._result_block(4000, gpu.device)
    assert result.stream is stream
    assert [int(h) for _, h in gpu.calls["cuMemAllocAsync"]] == [0, 0x6400]
    assert ignis.get_memory_resource(0).cached_bytes == 4000  # left for the legacy stream


def test_a_result_block_under_a_hand_built_stream_goes_to_the_driver(gpu) -> None:
    ignis.alloc(256).close()
    bare = object.__new__(ignis.Stream)  # no _legacy attribute: not taken for the legacy stream
    bare.device, bare.handle = gpu.device, driver.CUstream(0x6500)
    with bare:
        result = memory_module._result_block(256, gpu.device)
    assert result.stream is bare
    assert [int(h) for _, h in gpu.calls["cuMemAllocAsync"]] == [0, 0x6500]


def test_a_result_block_comes_from_the_resource_set_for_the_device(gpu) -> None:
    ignis.alloc(512).close()  # a cached block of the default resource

    class Counting(ignis.AsyncMemoryResource):  # a resource class of the user's: its allocate
        sizes: list[int] = []

        def allocate(self, nbytes, stream=None):
            self.sizes.append(nbytes)
            return super().allocate(nbytes, stream)

    mine = Counting(0)
    ignis.set_memory_resource(mine, 0)
    result = memory_module._result_block(512, gpu.device)
    assert result._resource is mine and Counting.sizes == [512]
    assert calls(gpu, "cuMemAllocAsync") == 2  # from the driver: the old cache is not its own
