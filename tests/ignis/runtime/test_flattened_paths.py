"""The hot paths of memory and streams that run flattened (their calls inline, see
``ignis._codegen.flatten``) agree with the real functions they are made from (``__wrapped__``),
on the stand-in driver: the same buffers, streams, driver calls, statistics and errors. (This
runs the real functions too: the text the fast code is made of is tested as itself.)"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import fake_gpu
import numpy as np
import pytest
from ignis._bindings import driver

import ignis
from ignis import _memory as memory_module
from ignis import _stream as stream_module

pytestmark = pytest.mark.skipif(
    ignis.is_available(), reason="fake driver tests: the GPU tests cover the real driver"
)

SIDE = 0x6100


def _observe(
    monkeypatch: pytest.MonkeyPatch, setup: Callable[[fake_gpu.FakeGpu], Any], run: Callable
) -> dict[str, Any]:
    """On a fresh stand-in driver: ``setup(gpu)``, then ``run(gpu, state)``; what it gave (or
    raised), the driver calls and the statistics, addresses written by order of appearance."""
    with monkeypatch.context() as patch:  # (undone at its end: the next run starts afresh)
        return _observed(patch, setup, run)


def _observed(monkeypatch, setup: Callable, run: Callable) -> dict[str, Any]:
    gpu = fake_gpu.install(monkeypatch, cache_bytes=1 << 20)
    try:
        state = setup(gpu)
        for name in list(gpu.calls):
            gpu.calls[name].clear()
        base = ignis.memory_stats(0)
        addresses: dict[int, str] = {}

        def named(value: Any) -> Any:
            try:
                address = int(value)
            except (TypeError, ValueError):
                return value
            if address >= 0x7F00_0000_0000:
                return addresses.setdefault(address, f"block{len(addresses)}")
            return address

        try:
            out = run(gpu, state)
        except Exception as exc:  # noqa: BLE001 - the error is what is compared
            seen: Any = ("raised", type(exc), str(exc))
        else:
            seen = _describe(out, named)
        calls = {
            name: [tuple(named(v) for v in args) for args in every]
            for name, every in gpu.calls.items()
            if every and name != "cuMemPoolGetAttribute"  # (memory_stats' own)
        }
        after = ignis.memory_stats(0)
        stats = {k: after[k] - base.get(k, 0) for k in after}
        resource = memory_module._resources.get(0)
        cached = getattr(resource, "cached_bytes", None)
        return {"result": seen, "calls": calls, "stats": stats, "cached": cached}
    finally:
        fake_gpu.uninstall()


def _describe(out: Any, named: Callable[[Any], Any]) -> Any:
    if isinstance(out, memory_module.Buffer):
        stream = out.stream
        return (
            "buffer",
            named(out.ptr),
            out.nbytes,
            out.device.ordinal,
            _describe(stream, named),
            type(out._resource).__name__,
        )
    if isinstance(out, ignis.Stream):
        return ("stream", int(out.handle), out.device.ordinal, getattr(out, "_legacy", None))
    return out


def _agree(monkeypatch, flattened: Callable, setup: Callable, run: Callable) -> None:
    """``run(gpu, state, function)`` with the flattened function and with the original."""
    fast = _observe(monkeypatch, setup, lambda gpu, state: run(gpu, state, flattened))
    real = _observe(monkeypatch, setup, lambda gpu, state: run(gpu, state, flattened.__wrapped__))
    assert fast == real


def _cached(nbytes: int) -> Callable[[fake_gpu.FakeGpu], None]:
    def setup(gpu: fake_gpu.FakeGpu) -> None:
        ignis.alloc(nbytes).close()  # a block of the size in the cache

    return setup


def _nothing(gpu: fake_gpu.FakeGpu) -> None:
    return None


def _bare_stream(gpu: fake_gpu.FakeGpu) -> ignis.Stream:
    bare = object.__new__(ignis.Stream)  # no _legacy attribute: not the legacy stream
    bare.device, bare.handle = gpu.device, driver.CUstream(0x6500)
    return bare


class Counting(ignis.AsyncMemoryResource):
    """A resource class of the user's: its own allocate runs."""

    def allocate(self, nbytes, stream=None):
        return super().allocate(nbytes, stream)


def _own_resource(gpu: fake_gpu.FakeGpu) -> None:
    ignis.alloc(512).close()
    ignis.set_memory_resource(Counting(0), 0)


@pytest.mark.parametrize(
    "case,setup,within",
    [
        ("a cached block", _cached(4000), None),
        ("another size", _cached(4096), None),
        ("a side stream", _cached(4000), "side"),
        ("a hand-built stream", _bare_stream, "bare"),
        ("a user's resource", _own_resource, None),
        ("no resource yet", _nothing, None),
    ],
)
def test_the_result_block_agrees_with_its_original(monkeypatch, case, setup, within) -> None:
    def run(gpu, state, result_block):
        if within == "side":
            with ignis.Stream.from_handle(SIDE, gpu.device):
                return result_block(4000, gpu.device)
        if within == "bare":
            with state:
                return result_block(4000, gpu.device)
        return result_block(4000, gpu.device)

    _agree(monkeypatch, memory_module._result_block, setup, run)


def test_the_result_block_without_a_driver_agrees_with_its_original(monkeypatch) -> None:
    def run(gpu, state, result_block):
        init = memory_module._init_state
        saved = dict(init)
        init.update(ok=False, reason="no driver (test)")
        try:
            return result_block(4000, gpu.device)
        finally:
            init.update(saved)

    _agree(monkeypatch, memory_module._result_block, _cached(4000), run)


@pytest.mark.parametrize(
    "case,nbytes,stream",
    [
        ("a cached block", 4000, None),
        ("another size", 4096, None),
        ("a side stream", 4000, "side"),
        ("a NumPy size", np.int64(4000), None),
        ("a bad size", -1, None),
        ("no size", 0, None),
    ],
)
def test_allocate_agrees_with_its_original(monkeypatch, case, nbytes, stream) -> None:
    def run(gpu, state, allocate):
        resource = ignis.get_memory_resource(0)
        on = ignis.Stream.from_handle(SIDE, gpu.device) if stream else ignis.default_stream()
        return allocate(resource, nbytes, on)

    _agree(monkeypatch, memory_module.AsyncMemoryResource.allocate, _cached(4000), run)


@pytest.mark.parametrize(
    "case,nbytes,stream,limit",
    [
        ("into the cache", 4000, None, None),
        ("over the cache's bound", 4000, None, 1000),
        ("from a side stream", 4000, "side", None),
    ],
)
def test_release_agrees_with_its_original(monkeypatch, case, nbytes, stream, limit) -> None:
    def run(gpu, state, release):
        resource = ignis.get_memory_resource(0)
        if limit is not None:
            resource._cache_limit = limit
        on = ignis.Stream.from_handle(SIDE, gpu.device) if stream else ignis.default_stream()
        block = ignis.alloc(nbytes, stream=on)
        ptr, block._resource = block.ptr, None  # released by hand, below
        release(resource, ptr, nbytes, on)
        return resource.cached_bytes

    _agree(monkeypatch, memory_module.AsyncMemoryResource._release, _nothing, run)


@pytest.mark.parametrize("device", [None, 0, "cuda:0", "device"])
@pytest.mark.parametrize("where", ["default", "in a stream block", "a new thread"])
def test_current_stream_agrees_with_its_original(monkeypatch, device, where) -> None:
    def run(gpu, state, current_stream):
        arg = gpu.device if device == "device" else device
        if where == "in a stream block":
            with ignis.Stream.from_handle(SIDE, gpu.device):
                return current_stream(arg)
        if where == "a new thread":  # no stream table yet
            seen = []
            thread = threading.Thread(target=lambda: seen.append(current_stream(arg)))
            thread.start()
            thread.join()
            return seen[0]
        return current_stream(arg)

    _agree(monkeypatch, stream_module.current_stream, _nothing, run)
