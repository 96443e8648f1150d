"""Device and pinned host memory.

Allocation goes through a *memory resource* per device:

- :class:`AsyncMemoryResource` (the default): stream-ordered ``cuMemAllocAsync`` from the device's
  memory pool, with the pool's release threshold raised so freed memory stays in the pool and is
  reused instead of going back to the driver at each synchronization.
- :class:`PlainMemoryResource`: ``cuMemAlloc``/``cuMemFree`` (freeing waits for the device).

:class:`Buffer` owns one allocation: ``close()`` frees it, on the stream it was allocated on, and
so does the buffer's ``__del__`` when it is garbage-collected without having been closed.

Allocation and free are on the hot path of every array op (each result is a new buffer), so the
common case is kept lean: the device's resource is one dict lookup, the driver is called once,
and statistics are recorded without a lock (see ``_Stats``).

Example::

    >>> buf = ignis.alloc(1 << 20)                 # 1 MiB on the current device
    >>> buf.copy_from_host(numpy.arange(262144, dtype=numpy.float32))
    >>> buf.copy_to_host(numpy.empty(262144, numpy.float32))[:3]
    array([0., 1., 2.], dtype=float32)
    >>> buf.close()
"""

from __future__ import annotations

import ctypes
import sys
import threading
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import _caches, _stream
from ._bindings import _init_state, check, cu, driver, ensure_driver, is_out_of_memory
from ._codegen import flatten
from ._device import Device, activate, check_device_arg, current_device

# activate() keeps the thread's active device here; allocation and free read it inline to skip
# the call when the device is already active (the common case).
from ._device import _tls as _device_tls
from ._errors import CudaError, OutOfMemoryError
from ._stream import Stream, current_stream, default_stream

__all__ = [
    "MemoryResource",
    "AsyncMemoryResource",
    "PlainMemoryResource",
    "Buffer",
    "PinnedBuffer",
    "alloc",
    "pinned_empty",
    "memcpy",
    "memset",
    "memory_stats",
    "reset_peak_memory_stats",
    "get_memory_resource",
    "set_memory_resource",
]


# --- statistics ---------------------------------------------------------------------------------


@dataclass
class _Stats:
    current_bytes: int = 0
    peak_bytes: int = 0
    allocation_count: int = 0
    deallocation_count: int = 0
    allocated_bytes_total: int = 0
    active_allocations: int = 0


# Statistics stay exact without a lock on the hot path: an allocation appends ``+nbytes`` and a
# free ``-nbytes`` to its device's event log (``list.append`` is atomic), and pending events are
# folded into the device's _Stats, in append order, under ``_stats_lock``, when the statistics
# are read or the log has grown long. Append order is a valid order of the events, so
# ``peak_bytes`` is the exact maximum of the running total, as if every event had taken the lock.
_stats_lock = threading.Lock()
_stats: dict[int, _Stats] = {}
_logs: dict[int, list[int]] = {}
_FOLD_AT = 4096  # pending events past which an allocation folds them


def _log(ordinal: int) -> list[int]:
    """The event log of device ``ordinal`` (created on first use; setdefault is atomic)."""
    return _logs.setdefault(ordinal, [])


def _fold(ordinal: int) -> _Stats:
    """Fold the device's pending events into its _Stats and return it; the caller holds
    ``_stats_lock``."""
    s = _stats.get(ordinal)
    if s is None:
        s = _stats[ordinal] = _Stats()
    log = _logs.get(ordinal)
    if log:
        # Only the lock holder removes events, and only from the front; others only append. So
        # the first n events stay put between the copy and the delete (each one atomic).
        n = len(log)
        # In NumPy (int64: byte counts of a device are far from overflowing it): a log of
        # thousands of events folds in a third of the time of the built-ins, and every array
        # op pays its share of the folds (two events).
        events = np.fromiter(log, np.int64, n)
        del log[:n]
        grown = events > 0  # the allocations
        allocations = int(np.count_nonzero(grown))
        running = np.cumsum(events)
        peak = s.current_bytes + max(int(running.max()), 0)
        if peak > s.peak_bytes:
            s.peak_bytes = peak
        s.current_bytes += int(running[-1])
        s.allocation_count += allocations
        s.deallocation_count += n - allocations
        s.active_allocations += 2 * allocations - n
        s.allocated_bytes_total += int(events.sum(where=grown))
    return s


def _fold_soon(ordinal: int) -> None:
    """Fold a long log unless the lock is taken: never wait for it here (its holder may be
    this very thread, when a garbage collection inside memory_stats() runs a finalizer that
    allocates). Events left over stay pending for the next fold; none is lost."""
    if _stats_lock.acquire(blocking=False):
        try:
            _fold(ordinal)
        finally:
            _stats_lock.release()


def _record_free(ordinal: int, nbytes: int) -> None:
    """Count a free of ``nbytes`` on device ``ordinal`` in the statistics (see _Stats)."""
    # (Allocations are recorded in _recorded_buffer, and fold a long log; frees never fold:
    # there are no more of them than allocations.)
    log = _logs.get(ordinal)
    if log is None:
        log = _log(ordinal)
    log.append(-nbytes)


def memory_stats(device: int | Device | None = None) -> dict[str, int]:
    """Allocation statistics of ``device`` (default: current), in bytes and counts.

    Keys: ``current_bytes`` (live buffers), ``peak_bytes`` (max of current since the last reset),
    ``allocation_count``, ``deallocation_count``, ``active_allocations``,
    ``allocated_bytes_total`` (cumulative), and ``pool_reserved_bytes`` /
    ``pool_used_bytes`` (what the driver's memory pool holds and hands out) where a pool is in use.
    """
    dev = current_device() if device is None else Device(device)
    with _stats_lock:
        out = dict(vars(_fold(dev.ordinal)))
    resource = _resources.get(dev.ordinal)
    if isinstance(resource, AsyncMemoryResource):
        out.update(resource.pool_usage())
    return out


def reset_peak_memory_stats(device: int | Device | None = None) -> None:
    """Set ``peak_bytes`` to the current usage of ``device`` (default: current)."""
    dev = current_device() if device is None else Device(device)
    with _stats_lock:
        s = _fold(dev.ordinal)
        s.peak_bytes = s.current_bytes


# --- resources ----------------------------------------------------------------------------------


class MemoryResource:
    """Allocates and frees device memory for one device. Subclasses implement the two hooks
    ``_alloc`` and ``_free``."""

    device: Device

    def allocate(self, nbytes: int, stream: Stream | None = None) -> Buffer:
        """Allocate ``nbytes`` bytes (256-byte aligned) and return the owning :class:`Buffer`.

        Raises:
            OutOfMemoryError: when the device cannot satisfy the request; nothing is leaked and
                the process stays usable.
        """
        if type(nbytes) is not int or nbytes <= 0:
            nbytes = _check_nbytes(nbytes, "allocate")
        device = self.device
        if stream is None:
            stream = current_stream(device)
        elif stream.device is not device:
            raise ValueError(
                f"allocate: stream is on cuda:{stream.device.ordinal}, memory resource on "
                f"cuda:{device.ordinal}"
            )
        if nbytes == 0:
            return Buffer._adopt(0, 0, device, stream, None)
        if not _init_state["ok"]:  # a forked child: say so, not what the driver would say
            ensure_driver()
        if getattr(_device_tls, "active", None) is not device:
            activate(device)
        try:
            ptr = self._alloc(nbytes, stream)
        except CudaError as exc:
            if not is_out_of_memory(exc):
                raise
            free, total = device.mem_info()
            raise OutOfMemoryError(nbytes, free, total, device.ordinal, exc.call) from None
        return _recorded_buffer(self, ptr, nbytes, device, stream)

    def _alloc(self, nbytes: int, stream: Stream) -> int:
        raise NotImplementedError

    def _free(self, ptr: int, stream: Stream) -> None:
        raise NotImplementedError

    def _release(self, ptr: int, nbytes: int, stream: Stream) -> None:
        """Free the block of a closed :class:`Buffer` (stream-ordered on ``stream``, where it
        was allocated) and count the free in the statistics, even when freeing fails. A
        resource that keeps freed blocks for reuse overrides it (AsyncMemoryResource)."""
        device = self.device
        try:
            if getattr(_device_tls, "active", None) is not device:
                activate(device)
            if stream.closed:
                # The buffer outlived its stream: a free queued on a destroyed stream is
                # undefined (it crashed the process). Wait for all queued work instead (the
                # destroyed stream's included), then free on the default stream.
                cu.cuCtxSynchronize()
                stream = default_stream(device)
            self._free(ptr, stream)
        finally:
            _record_free(device.ordinal, nbytes)


def _from_block_cache(resource: AsyncMemoryResource, nbytes: int, stream: Stream) -> Buffer:
    """``resource.allocate(nbytes, stream)`` for an int ``nbytes`` on the legacy default
    stream: a block of the size from the resource's cache if there is one, else the driver's.

    :meth:`AsyncMemoryResource.allocate` and the allocation of array results (_result_block)
    run it inline (see ignis._codegen): its returns stay where the inliner takes them.
    """
    blocks = resource._cache.get(nbytes)
    if blocks and stream.device is resource.device:
        try:
            ptr = blocks.pop()  # atomic: another thread may have taken the last one
        except IndexError:
            return MemoryResource.allocate(resource, nbytes, stream)
        resource._cached_bytes -= nbytes
        return _recorded_buffer(resource, ptr, nbytes, resource.device, stream)
    return MemoryResource.allocate(resource, nbytes, stream)


# Bytes of freed blocks an AsyncMemoryResource keeps for reuse by default (see the class).
CACHE_BYTES = 1 << 30
_CACHE_PER_SIZE = 64  # blocks of one size kept at most


class AsyncMemoryResource(MemoryResource):
    """Stream-ordered allocation from the device's default memory pool (``cuMemAllocAsync``).

    The pool's release threshold is set to ``release_threshold`` bytes (default: unlimited), so
    memory freed back to the pool is kept and reused rather than returned to the driver.

    Blocks freed on the device's legacy default stream are kept in a small cache, by exact size,
    and handed to the next allocation of that size on the same stream without a driver call
    (``cache_bytes`` bytes at most, default :data:`CACHE_BYTES`; 0 turns the cache off). That is
    what the pool itself would do, in stream order: the new owner's work is queued after
    everything queued before the free. Other streams (which may be destroyed or captured into a
    graph) always go to the driver. The cache is emptied when an allocation runs out of memory
    (and the allocation retried) and by :meth:`trim`; ``memory_stats`` counts cached blocks as
    freed, the pool as used.
    """

    def __init__(
        self,
        device: int | Device | None = None,
        *,
        release_threshold: int | None = None,
        cache_bytes: int | None = None,
    ):
        if cache_bytes is not None:
            cache_bytes = _check_nbytes(cache_bytes, "AsyncMemoryResource", "cache_bytes")
        if release_threshold is not None:
            release_threshold = _check_nbytes(
                release_threshold, "AsyncMemoryResource", "release_threshold"
            )
        check_device_arg(device, "AsyncMemoryResource")
        self._cache: dict[int, list[int]] = {}  # nbytes -> addresses of freed blocks
        self._cache_limit = CACHE_BYTES if cache_bytes is None else cache_bytes
        # What the cache holds, kept without a lock: threads updating it at once can make it
        # drift a little, so it only bounds the cache; cached_bytes counts the lists.
        self._cached_bytes = 0
        self.device = current_device() if device is None else Device(device)
        activate(self.device)
        self._pool = cu.cuDeviceGetDefaultMemPool(self.device._handle)
        threshold = (1 << 64) - 1 if release_threshold is None else int(release_threshold)
        cu.cuMemPoolSetAttribute(
            self._pool,
            driver.CUmemPool_attribute.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            driver.cuuint64_t(threshold),
        )

    @flatten(_from_block_cache)
    def allocate(self, nbytes: int, stream: Stream | None = None) -> Buffer:
        # A block from the cache needs neither the driver nor the device's context, so it skips
        # the general checks (which it has passed).
        if type(nbytes) is int and getattr(stream, "_legacy", False):  # (None: no _legacy)
            return _from_block_cache(self, nbytes, stream)
        return MemoryResource.allocate(self, nbytes, stream)

    # The driver is called directly (not through ``cu``): a resource exists, so the driver is
    # initialized, and these two calls are on the path of every array op.
    def _alloc(self, nbytes: int, stream: Stream) -> int:
        if getattr(stream, "_legacy", False):
            blocks = self._cache.get(nbytes)
            if blocks:
                try:
                    ptr = blocks.pop()  # atomic: another thread may have taken the last one
                except IndexError:
                    pass
                else:
                    self._cached_bytes -= nbytes
                    return ptr
        result = driver.cuMemAllocAsync(nbytes, stream.handle)
        if result[0] and any(self._cache.values()):  # out of memory, perhaps: retry uncached
            self.release_cached()
            result = driver.cuMemAllocAsync(nbytes, stream.handle)
        return int(check(result, "cuMemAllocAsync"))

    def _free(self, ptr: int, stream: Stream) -> None:
        check(driver.cuMemFreeAsync(ptr, stream.handle), "cuMemFreeAsync")

    @flatten(_record_free)  # most array results end here: the count of the free runs inline
    def _release(self, ptr: int, nbytes: int, stream: Stream) -> None:
        """Put a freed block into the cache if it fits, else free it (see the class notes)."""
        if getattr(stream, "_legacy", False) and self._cached_bytes + nbytes <= self._cache_limit:
            blocks = self._cache.get(nbytes)
            if blocks is None:
                blocks = self._cache.setdefault(nbytes, [])
            if len(blocks) < _CACHE_PER_SIZE:
                self._cached_bytes += nbytes
                blocks.append(ptr)
                _record_free(self.device.ordinal, nbytes)
                return
        MemoryResource._release(self, ptr, nbytes, stream)

    def release_cached(self) -> None:
        """Free every cached block (stream-ordered on the legacy default stream)."""
        legacy = default_stream(self.device)
        if getattr(_device_tls, "active", None) is not self.device:
            activate(self.device)
        for nbytes, blocks in list(self._cache.items()):
            while True:
                try:
                    ptr = blocks.pop()
                except IndexError:
                    break
                self._cached_bytes -= nbytes
                self._free(ptr, legacy)
        self._cached_bytes = 0

    @property
    def cached_bytes(self) -> int:
        """Bytes of freed blocks held for reuse (see the class notes)."""
        return sum(n * len(blocks) for n, blocks in list(self._cache.items()))

    def pool_usage(self) -> dict[str, int]:
        """Bytes the pool has reserved from the driver and bytes it has handed out."""
        attr = driver.CUmemPool_attribute
        reserved = cu.cuMemPoolGetAttribute(self._pool, attr.CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)
        used = cu.cuMemPoolGetAttribute(self._pool, attr.CU_MEMPOOL_ATTR_USED_MEM_CURRENT)
        return {"pool_reserved_bytes": int(reserved), "pool_used_bytes": int(used)}

    def trim(self, keep_bytes: int = 0) -> None:
        """Return unused pool memory to the driver, keeping at least ``keep_bytes`` reserved."""
        keep_bytes = _check_nbytes(keep_bytes, "AsyncMemoryResource.trim", "keep_bytes")
        self.release_cached()
        activate(self.device)
        cu.cuMemPoolTrimTo(self._pool, keep_bytes)

    def __repr__(self) -> str:
        return f"<ignis.AsyncMemoryResource cuda:{self.device.ordinal}>"


class PlainMemoryResource(MemoryResource):
    """``cuMemAlloc``/``cuMemFree``: not stream-ordered; freeing waits for the device."""

    def __init__(self, device: int | Device | None = None):
        self.device = current_device() if device is None else Device(device)

    def _alloc(self, nbytes: int, stream: Stream) -> int:
        return int(cu.cuMemAlloc(nbytes))

    def _free(self, ptr: int, stream: Stream) -> None:
        cu.cuMemFree(ptr)

    def __repr__(self) -> str:
        return f"<ignis.PlainMemoryResource cuda:{self.device.ordinal}>"


_resources_lock = threading.Lock()
_resources: dict[int, MemoryResource] = {}


def _block_caches() -> list[AsyncMemoryResource]:
    return [mr for mr in list(_resources.values()) if isinstance(mr, AsyncMemoryResource)]


def _cached_blocks() -> int:
    return sum(len(blocks) for mr in _block_caches() for blocks in list(mr._cache.values()))


def _release_block_caches() -> None:
    for mr in _block_caches():
        mr.release_cached()


_caches.register(
    "memory.block_cache",
    _cached_blocks,
    clear=_release_block_caches,
    description="freed device blocks kept for the next allocation of their size (all devices)",
)


def get_memory_resource(device: int | Device | None = None) -> MemoryResource:
    """The memory resource ``device`` allocates from (an :class:`AsyncMemoryResource` unless
    set)."""
    dev = current_device() if device is None else Device(device)
    mr = _resources.get(dev.ordinal)
    if mr is None:
        with _resources_lock:
            mr = _resources.get(dev.ordinal)
            if mr is None:
                if dev.properties.get("memory_pools_supported", False):
                    mr = AsyncMemoryResource(dev)
                else:
                    mr = PlainMemoryResource(dev)
                _resources[dev.ordinal] = mr
    return mr


def set_memory_resource(resource: MemoryResource, device: int | Device | None = None) -> None:
    """Make ``resource`` the allocator of its device. Live buffers keep their own resource."""
    if not isinstance(resource, MemoryResource):
        raise TypeError(
            f"set_memory_resource: expected a MemoryResource, got {type(resource).__name__}"
        )
    dev = resource.device if device is None else Device(device)
    if dev is not resource.device:
        raise ValueError(
            f"set_memory_resource: resource is for cuda:{resource.device.ordinal}, "
            f"not cuda:{dev.ordinal}"
        )
    with _resources_lock:
        _resources[dev.ordinal] = resource


# --- buffers ------------------------------------------------------------------------------------


def _recorded_buffer(
    resource: MemoryResource, ptr: int, nbytes: int, device: Device, stream: Stream
) -> Buffer:
    """The Buffer owning a fresh allocation, counted in the memory statistics (see _Stats).
    (Array results from the block cache run it inline: _result_block.)"""
    log = _logs.get(device.ordinal)
    if log is None:
        log = _log(device.ordinal)
    log.append(nbytes)
    if len(log) > _FOLD_AT:
        _fold_soon(device.ordinal)
    buf = _new_object(Buffer)
    buf.ptr = ptr
    buf.nbytes = nbytes
    buf.device = device
    buf.stream = stream
    buf._resource = resource
    return buf


_new_object = object.__new__
_FREED: Any = object()  # Buffer._resource once the memory has been freed
_close_lock = threading.Lock()


class Buffer:
    """An owned block of device memory.

    Attributes:
        ptr: the device address (int; 0 for an empty buffer).
        nbytes: its size in bytes.
        device: the :class:`Device` it lives on.
        stream: the stream it was allocated on; ``close()`` frees it there, so work queued on that
            stream before the free is safe. Use :meth:`record_stream` to tell the buffer that
            another stream uses it.

    Buffers come from :func:`alloc` or :meth:`MemoryResource.allocate`; direct construction is
    refused. Memory not freed with :meth:`close` is freed when the buffer is garbage-collected.
    """

    # ``_resource``: the MemoryResource that frees the memory; None for an empty buffer (nothing
    # to free), _FREED once freed.
    __slots__ = ("ptr", "nbytes", "device", "stream", "_resource", "__weakref__")

    def __new__(cls, *args: Any, **kwargs: Any) -> Buffer:
        raise TypeError("Buffer cannot be constructed directly; use ignis.alloc(nbytes)")

    @classmethod
    def _adopt(
        cls, ptr: int, nbytes: int, device: Device, stream: Stream, resource: MemoryResource | None
    ) -> Buffer:
        self = _new_object(cls)
        self.ptr = ptr
        self.nbytes = nbytes
        self.device = device
        self.stream = stream
        self._resource = resource
        return self

    def __del__(self, _is_finalizing: Any = sys.is_finalizing) -> None:
        # Only the last reference can run this, so it never races with close(). (A cheaper
        # fallback than weakref.finalize, whose bookkeeping would cost as much as the rest of
        # an allocation.) The default argument survives module teardown at exit.
        try:
            resource = self._resource
        except AttributeError:  # never initialized (built with object.__new__ by hand)
            return
        if resource is not None and resource is not _FREED:
            self._resource = _FREED
            try:
                resource._release(self.ptr, self.nbytes, self.stream)
            except BaseException:
                if not _is_finalizing():  # at exit the driver may already be gone: say nothing
                    raise

    @property
    def closed(self) -> bool:
        """True once the memory has been freed."""
        return self._resource is _FREED

    def close(self) -> None:
        """Free the memory now (stream-ordered on :attr:`stream`). Idempotent."""
        with _close_lock:  # two threads closing at once: only one of them frees
            resource = self._resource
            if resource is not None and resource is not _FREED:
                self._resource = _FREED
            else:
                resource = None
        if resource is not None:
            resource._release(self.ptr, self.nbytes, self.stream)
        self.ptr = 0

    def record_stream(self, stream: Stream) -> None:
        """Declare that ``stream`` uses this buffer: the free is ordered after its queued work."""
        if stream is self.stream or stream == self.stream:
            return
        # Make the allocation stream wait for ``stream``: a later free on it then comes after.
        self.stream.wait_stream(stream)

    def _check_open(self, op: str) -> None:
        if self.closed:
            raise ValueError(f"{op}: the buffer has been closed")

    def copy_from_host(self, host: Any, *, stream: Stream | None = None) -> Buffer:
        """Copy a host array (or bytes-like) into this buffer. Sync unless ``stream`` is given."""
        self._check_open("Buffer.copy_from_host")
        memcpy(self, host, _host_nbytes(host), stream=stream)
        return self

    def copy_to_host(
        self, out: np.ndarray | None = None, *, stream: Stream | None = None
    ) -> np.ndarray:
        """Copy the buffer into ``out`` (default: a new uint8 array). Sync unless ``stream`` is
        given."""
        self._check_open("Buffer.copy_to_host")
        if out is None:
            out = np.empty(self.nbytes, dtype=np.uint8)
        memcpy(out, self, _host_nbytes(out), stream=stream)
        return out

    def copy_from(self, src: Buffer, *, stream: Stream | None = None) -> Buffer:
        """Copy another device buffer (same size or smaller) into this one."""
        self._check_open("Buffer.copy_from")
        memcpy(self, src, src.nbytes, stream=stream)
        return self

    def fill_bytes(self, value: int, *, stream: Stream | None = None) -> Buffer:
        """Set every byte to ``value`` (0..255)."""
        memset(self, value, self.nbytes, stream=stream)
        return self

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        """The buffer as a 1-D uint8 array (CUDA array interface v3)."""
        self._check_open("Buffer.__cuda_array_interface__")
        return {
            "shape": (self.nbytes,),
            "typestr": "|u1",
            "data": (self.ptr, False),
            "version": 3,
            "strides": None,
            "stream": self.stream.ptr or 1,
        }

    def __len__(self) -> int:
        return self.nbytes

    def __repr__(self) -> str:
        state = "closed" if self.closed else hex(self.ptr)
        return f"<ignis.Buffer {self.nbytes} bytes at {state} on cuda:{self.device.ordinal}>"


def alloc(
    nbytes: int, device: int | str | Device | None = None, stream: Stream | None = None
) -> Buffer:
    """Allocate ``nbytes`` bytes on ``device`` (default: current) from its memory resource.

    Raises:
        TypeError: ``nbytes`` is not an int (a bool is not a size), or ``stream`` not a Stream.
        ValueError: ``nbytes`` is negative, or ``device`` is not a device spelling.
        NoDeviceError: without a GPU; the arguments are checked first, anywhere.
        OutOfMemoryError: the device cannot satisfy the request.

    Example: ``buf = ignis.alloc(4 * n)``.
    """
    if type(nbytes) is not int or nbytes < 0:
        nbytes = _check_nbytes(nbytes, "alloc")
    check_device_arg(device, "alloc")
    if stream is not None and not isinstance(stream, Stream):
        raise TypeError(
            f"alloc: stream must be an ignis.Stream or None, got {type(stream).__name__}"
        )
    ensure_driver()
    if device is None and stream is not None:
        device = stream.device
    resource = _resources.get(device.ordinal) if type(device) is Device else None
    if resource is None:
        resource = get_memory_resource(device)
    return resource.allocate(nbytes, stream)


@flatten(_stream._stream_of, _from_block_cache, _recorded_buffer)
def _result_block(nbytes: int, device: Device) -> Buffer:
    """``alloc(nbytes, device, current_stream(device))``: the block of an array op's result.

    Every array op on a GPU allocates its result here (``CudaBackend.alloc``), or runs this
    function inline (the CUDA backend's direct functions). Flattened (see ignis._codegen): the
    common case, a block of the size from the block cache of the device's AsyncMemoryResource
    on the legacy default stream, makes no call. Anything else takes the resource's
    ``allocate`` (``alloc`` where the device has no resource yet or the driver is not ready),
    with all its checks. The tables (resources, streams, statistics) are read at each call:
    tests and device switches replace them. Its local ``stream`` is the block's stream on
    every path (the direct functions read it where they run this function inline).

    Example: ``_result_block(4000, ignis.Device(0))`` -> a Buffer of 4000 bytes on cuda:0.
    """
    ordinal = device.ordinal
    stream = _stream._stream_of(device, ordinal)  # current_stream(device)
    resource = _resources.get(ordinal)
    if resource.__class__ is AsyncMemoryResource and getattr(stream, "_legacy", False):
        buffer = _from_block_cache(resource, nbytes, stream)  # (nbytes: the plan's int)
    elif resource is None or not _init_state["ok"]:  # alloc makes the resource, or says why not
        buffer = alloc(nbytes, device=device, stream=stream)
    else:
        buffer = resource.allocate(nbytes, stream)
    return buffer  # (one return of one local: inline, it is the caller's own)


def _free_pinned(device: Device, ptr: int) -> None:
    activate(device)
    cu.cuMemFreeHost(ptr)


class PinnedBuffer:
    """Page-locked host memory: copies from and to it run at full bus speed and can be async.

    Use :meth:`numpy` (or :func:`pinned_empty`) for a NumPy view of it.
    """

    __slots__ = ("ptr", "nbytes", "device", "_finalizer", "__weakref__")

    def __init__(self, nbytes: int, device: int | str | Device | None = None):
        # Arguments first: a bad size is reported as such, with or without a GPU.
        nbytes = _check_nbytes(nbytes, "PinnedBuffer")
        check_device_arg(device, "PinnedBuffer")
        ensure_driver()
        self.device = current_device() if device is None else Device(device)
        self.nbytes = nbytes
        if nbytes == 0:
            self.ptr, self._finalizer = 0, None
            return
        activate(self.device)
        flags = int(driver.CU_MEMHOSTALLOC_PORTABLE)
        try:
            self.ptr = int(cu.cuMemHostAlloc(nbytes, flags))
        except CudaError as exc:
            if not is_out_of_memory(exc):
                raise
            raise MemoryError(
                f"PinnedBuffer: could not pin {nbytes} bytes of host memory"
            ) from None
        self._finalizer = weakref.finalize(self, _free_pinned, self.device, self.ptr)

    def numpy(self, dtype: Any = np.uint8, shape: tuple[int, ...] | None = None) -> np.ndarray:
        """A NumPy array viewing this memory (it keeps the buffer alive)."""
        dtype = np.dtype(dtype)
        count = self.nbytes // dtype.itemsize
        if shape is None:
            shape = (count,)
        if int(np.prod(shape)) * dtype.itemsize > self.nbytes:
            raise ValueError(
                f"PinnedBuffer.numpy: shape {shape} of {dtype} needs more than {self.nbytes} bytes"
            )
        if self.nbytes == 0:
            return np.empty(shape, dtype)
        raw = (ctypes.c_char * self.nbytes).from_address(self.ptr)
        raw.owner = self  # the array's base is ``raw``; it keeps the pinned memory alive
        arr = np.frombuffer(raw, dtype=np.uint8)
        return arr[: int(np.prod(shape)) * dtype.itemsize].view(dtype).reshape(shape)

    def close(self) -> None:
        """Unpin and free the memory. Arrays from :meth:`numpy` must not be used afterwards."""
        if self._finalizer is not None:
            self._finalizer()

    def __repr__(self) -> str:
        return f"<ignis.PinnedBuffer {self.nbytes} bytes>"


def pinned_empty(shape: int | tuple[int, ...], dtype: Any = np.float32) -> np.ndarray:
    """A new NumPy array in pinned host memory, for fast (and async) transfers.

    ``shape`` is an int or a sequence of ints >= 0 (``ignis.ShapeError`` otherwise, a
    ValueError) and ``dtype`` a NumPy dtype (TypeError otherwise); both are checked before
    the GPU is needed.

    Example: ``host = ignis.pinned_empty((1024, 1024), "float32")``.
    """
    # The arrays' shape rules, in their one place (imported here: the array package needs this
    # module first).
    from ._array._layout import normalize_shape

    shape = normalize_shape(shape, "pinned_empty")
    try:
        dtype = np.dtype(dtype)
    except TypeError:
        raise TypeError(
            f"pinned_empty: dtype must be a NumPy dtype such as 'float32', got {dtype!r}"
        ) from None
    nbytes = dtype.itemsize
    for n in shape:
        nbytes *= n  # Python ints: no overflow for huge shapes (the allocation then fails)
    buf = PinnedBuffer(nbytes)
    return buf.numpy(dtype, shape)


# --- copies -------------------------------------------------------------------------------------


def _host_nbytes(host: Any) -> int:
    if isinstance(host, np.ndarray):
        return host.nbytes
    return memoryview(host).nbytes


def _address(obj: Any, op: str, writable: bool) -> tuple[int, Device | None, Any]:
    """(address, device or None for host memory, keep-alive) of a copy operand."""
    if isinstance(obj, Buffer):
        obj._check_open(op)
        return obj.ptr, obj.device, obj
    if isinstance(obj, PinnedBuffer):
        return obj.ptr, None, obj
    if isinstance(obj, np.ndarray):
        if not obj.flags.c_contiguous:
            raise ValueError(
                f"{op}: host arrays must be C-contiguous (use numpy.ascontiguousarray)"
            )
        if writable and not obj.flags.writeable:
            raise ValueError(f"{op}: the destination array is read-only")
        return obj.ctypes.data, None, obj
    if hasattr(obj, "ptr") and hasattr(obj, "device") and isinstance(obj.ptr, int):
        dev = obj.device
        return obj.ptr, dev if isinstance(dev, Device) else None, obj
    if isinstance(obj, (bytes, bytearray, memoryview)):
        if writable and (isinstance(obj, bytes) or memoryview(obj).readonly):
            raise ValueError(f"{op}: the destination is read-only")
        arr = np.frombuffer(obj, dtype=np.uint8)
        return arr.ctypes.data, None, arr
    raise TypeError(
        f"{op}: expected a Buffer, PinnedBuffer, NumPy array or bytes-like object, "
        f"got {type(obj).__name__}"
    )


def memcpy(dst: Any, src: Any, nbytes: int, *, stream: Stream | None = None) -> None:
    """Copy ``nbytes`` bytes from ``src`` to ``dst`` (device or host memory, any direction).

    With ``stream=None`` the copy is synchronous: it has finished when the call returns. With a
    stream it is queued there; host memory must then stay alive (and, for true overlap, be pinned)
    until the stream has reached the copy.
    """
    nbytes = _check_nbytes(nbytes, "memcpy")
    dst_ptr, dst_dev, _keep_dst = _address(dst, "memcpy", writable=True)
    src_ptr, src_dev, _keep_src = _address(src, "memcpy", writable=False)
    for name, obj in (("destination", dst), ("source", src)):
        size = obj.nbytes if hasattr(obj, "nbytes") else _host_nbytes(obj)
        if nbytes > size:
            raise ValueError(f"memcpy: copying {nbytes} bytes but the {name} holds only {size}")
    if nbytes == 0:
        return
    device = dst_dev or src_dev
    if device is None:  # host to host
        ctypes.memmove(dst_ptr, src_ptr, nbytes)
        return
    sync = stream is None
    if stream is None:
        stream = current_stream(device)
    activate(device)
    if dst_dev is not None and src_dev is not None and dst_dev is not src_dev:
        cu.cuMemcpyPeerAsync(
            dst_ptr, dst_dev.context, src_ptr, src_dev.context, nbytes, stream.handle
        )
    else:
        cu.cuMemcpyAsync(dst_ptr, src_ptr, nbytes, stream.handle)
    if sync:
        stream.synchronize()


def memset(
    dst: Buffer, value: int, nbytes: int | None = None, *, stream: Stream | None = None
) -> None:
    """Set ``nbytes`` bytes (default: all) of ``dst`` to the byte ``value``. Sync unless
    ``stream``."""
    if not isinstance(dst, Buffer):
        raise TypeError(f"memset: expected a Buffer, got {type(dst).__name__}")
    dst._check_open("memset")
    if not isinstance(value, (int, np.integer)) or not 0 <= int(value) <= 255:
        raise ValueError(f"memset: value must be a byte 0..255, got {value!r}")
    nbytes = dst.nbytes if nbytes is None else _check_nbytes(nbytes, "memset")
    if nbytes > dst.nbytes:
        raise ValueError(f"memset: {nbytes} bytes requested but the buffer holds {dst.nbytes}")
    if nbytes == 0:
        return
    sync = stream is None
    if stream is None:
        stream = current_stream(dst.device)
    activate(dst.device)
    cu.cuMemsetD8Async(dst.ptr, int(value), nbytes, stream.handle)
    if sync:
        stream.synchronize()


def _check_nbytes(nbytes: Any, op: str, what: str = "nbytes") -> int:
    """``nbytes`` as an int: a Python or NumPy integer >= 0 (a byte count); TypeError or
    ValueError naming ``op``, what was given and what was expected."""
    if isinstance(nbytes, (bool, np.bool_)) or not isinstance(nbytes, (int, np.integer)):
        raise TypeError(
            f"{op}: {what} must be an int, got {type(nbytes).__name__} {nbytes!r}; "
            "expected a size in bytes >= 0"
        )
    if nbytes < 0:
        raise ValueError(f"{op}: {what} must be >= 0, got {nbytes}; expected a size in bytes")
    return int(nbytes)
