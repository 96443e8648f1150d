"""Device and pinned host memory.

Allocation goes through a *memory resource* per device:

- :class:`AsyncMemoryResource` (the default): stream-ordered ``cuMemAllocAsync`` from the device's
  memory pool, with the pool's release threshold raised so freed memory stays in the pool and is
  reused instead of going back to the driver at each synchronization.
- :class:`PlainMemoryResource`: ``cuMemAlloc``/``cuMemFree`` (freeing waits for the device).

:class:`Buffer` owns one allocation: ``close()`` frees it, on the stream it was allocated on, and
a ``weakref.finalize`` fallback frees it when the buffer is garbage-collected.

Example::

    >>> buf = ignis.alloc(1 << 20)                 # 1 MiB on the current device
    >>> buf.copy_from_host(numpy.arange(262144, dtype=numpy.float32))
    >>> buf.copy_to_host(numpy.empty(262144, numpy.float32))[:3]
    array([0., 1., 2.], dtype=float32)
    >>> buf.close()
"""

from __future__ import annotations

import ctypes
import threading
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._bindings import cu, driver, ensure_driver, is_out_of_memory
from ._device import Device, activate, current_device
from ._errors import CudaError, OutOfMemoryError
from ._stream import Stream, current_stream

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


_stats_lock = threading.Lock()
_stats: dict[int, _Stats] = {}


def _record_alloc(ordinal: int, nbytes: int) -> None:
    with _stats_lock:
        s = _stats.setdefault(ordinal, _Stats())
        s.current_bytes += nbytes
        s.peak_bytes = max(s.peak_bytes, s.current_bytes)
        s.allocation_count += 1
        s.active_allocations += 1
        s.allocated_bytes_total += nbytes


def _record_free(ordinal: int, nbytes: int) -> None:
    with _stats_lock:
        s = _stats.setdefault(ordinal, _Stats())
        s.current_bytes -= nbytes
        s.deallocation_count += 1
        s.active_allocations -= 1


def memory_stats(device: int | Device | None = None) -> dict[str, int]:
    """Allocation statistics of ``device`` (default: current), in bytes and counts.

    Keys: ``current_bytes`` (live buffers), ``peak_bytes`` (max of current since the last reset),
    ``allocation_count``, ``deallocation_count``, ``active_allocations``,
    ``allocated_bytes_total`` (cumulative), and ``pool_reserved_bytes`` /
    ``pool_used_bytes`` (what the driver's memory pool holds and hands out) where a pool is in use.
    """
    dev = current_device() if device is None else Device(device)
    with _stats_lock:
        s = _stats.get(dev.ordinal, _Stats())
        out = dict(vars(s))
    resource = _resources.get(dev.ordinal)
    if isinstance(resource, AsyncMemoryResource):
        out.update(resource.pool_usage())
    return out


def reset_peak_memory_stats(device: int | Device | None = None) -> None:
    """Set ``peak_bytes`` to the current usage of ``device`` (default: current)."""
    dev = current_device() if device is None else Device(device)
    with _stats_lock:
        s = _stats.setdefault(dev.ordinal, _Stats())
        s.peak_bytes = s.current_bytes


# --- resources ----------------------------------------------------------------------------------


class MemoryResource:
    """Allocates and frees device memory for one device. Subclasses implement the two hooks."""

    device: Device

    def allocate(self, nbytes: int, stream: Stream | None = None) -> Buffer:
        """Allocate ``nbytes`` bytes (256-byte aligned) and return the owning :class:`Buffer`.

        Raises:
            OutOfMemoryError: when the device cannot satisfy the request; nothing is leaked and
                the process stays usable.
        """
        nbytes = _check_nbytes(nbytes, "allocate")
        if stream is None:
            stream = current_stream(self.device)
        elif stream.device is not self.device:
            raise ValueError(
                f"allocate: stream is on cuda:{stream.device.ordinal}, memory resource on "
                f"cuda:{self.device.ordinal}"
            )
        if nbytes == 0:
            return Buffer._adopt(0, 0, self.device, stream, None)
        activate(self.device)
        try:
            ptr = self._alloc(nbytes, stream)
        except CudaError as exc:
            if not is_out_of_memory(exc):
                raise
            free, total = self.device.mem_info()
            raise OutOfMemoryError(nbytes, free, total, self.device.ordinal, exc.call) from None
        _record_alloc(self.device.ordinal, nbytes)
        return Buffer._adopt(ptr, nbytes, self.device, stream, self)

    def _alloc(self, nbytes: int, stream: Stream) -> int:
        raise NotImplementedError

    def _free(self, ptr: int, stream: Stream) -> None:
        raise NotImplementedError


class AsyncMemoryResource(MemoryResource):
    """Stream-ordered allocation from the device's default memory pool (``cuMemAllocAsync``).

    The pool's release threshold is set to ``release_threshold`` bytes (default: unlimited), so
    memory freed back to the pool is kept and reused rather than returned to the driver.
    """

    def __init__(self, device: int | Device | None = None, *, release_threshold: int | None = None):
        self.device = current_device() if device is None else Device(device)
        activate(self.device)
        self._pool = cu.cuDeviceGetDefaultMemPool(self.device._handle)
        threshold = (1 << 64) - 1 if release_threshold is None else int(release_threshold)
        cu.cuMemPoolSetAttribute(
            self._pool,
            driver.CUmemPool_attribute.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            driver.cuuint64_t(threshold),
        )

    def _alloc(self, nbytes: int, stream: Stream) -> int:
        return int(cu.cuMemAllocAsync(nbytes, stream.handle))

    def _free(self, ptr: int, stream: Stream) -> None:
        cu.cuMemFreeAsync(ptr, stream.handle)

    def pool_usage(self) -> dict[str, int]:
        """Bytes the pool has reserved from the driver and bytes it has handed out."""
        attr = driver.CUmemPool_attribute
        reserved = cu.cuMemPoolGetAttribute(self._pool, attr.CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)
        used = cu.cuMemPoolGetAttribute(self._pool, attr.CU_MEMPOOL_ATTR_USED_MEM_CURRENT)
        return {"pool_reserved_bytes": int(reserved), "pool_used_bytes": int(used)}

    def trim(self, keep_bytes: int = 0) -> None:
        """Return unused pool memory to the driver, keeping at least ``keep_bytes`` reserved."""
        activate(self.device)
        cu.cuMemPoolTrimTo(self._pool, int(keep_bytes))

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


def get_memory_resource(device: int | Device | None = None) -> MemoryResource:
    """The memory resource ``device`` allocates from (an :class:`AsyncMemoryResource` unless set)."""
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
            f"set_memory_resource: resource is for cuda:{resource.device.ordinal}, not cuda:{dev.ordinal}"
        )
    with _resources_lock:
        _resources[dev.ordinal] = resource


# --- buffers ------------------------------------------------------------------------------------


def _free_buffer(resource: MemoryResource, ptr: int, nbytes: int, stream: Stream) -> None:
    try:
        activate(resource.device)
        resource._free(ptr, stream)
    finally:
        _record_free(resource.device.ordinal, nbytes)


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
    refused.
    """

    __slots__ = ("ptr", "nbytes", "device", "stream", "_finalizer", "__weakref__")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("Buffer cannot be constructed directly; use ignis.alloc(nbytes)")

    @classmethod
    def _adopt(
        cls, ptr: int, nbytes: int, device: Device, stream: Stream, resource: MemoryResource | None
    ) -> Buffer:
        self = object.__new__(cls)
        self.ptr = ptr
        self.nbytes = nbytes
        self.device = device
        self.stream = stream
        if resource is None:
            self._finalizer = None
        else:
            self._finalizer = weakref.finalize(self, _free_buffer, resource, ptr, nbytes, stream)
        return self

    @property
    def closed(self) -> bool:
        """True once the memory has been freed."""
        return self._finalizer is not None and not self._finalizer.alive

    def close(self) -> None:
        """Free the memory now (stream-ordered on :attr:`stream`). Idempotent."""
        if self._finalizer is not None:
            self._finalizer()
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

    def copy_to_host(self, out: np.ndarray | None = None, *, stream: Stream | None = None) -> np.ndarray:
        """Copy the buffer into ``out`` (default: a new uint8 array). Sync unless ``stream`` is given."""
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


def alloc(nbytes: int, device: int | Device | None = None, stream: Stream | None = None) -> Buffer:
    """Allocate ``nbytes`` bytes on ``device`` (default: current) from its memory resource.

    Example: ``buf = ignis.alloc(4 * n)``.
    """
    ensure_driver()
    if device is None and stream is not None:
        device = stream.device
    return get_memory_resource(device).allocate(nbytes, stream)


def _free_pinned(device: Device, ptr: int) -> None:
    activate(device)
    cu.cuMemFreeHost(ptr)


class PinnedBuffer:
    """Page-locked host memory: copies from and to it run at full bus speed and can be async.

    Use :meth:`numpy` (or :func:`pinned_empty`) for a NumPy view of it.
    """

    __slots__ = ("ptr", "nbytes", "device", "_finalizer", "__weakref__")

    def __init__(self, nbytes: int, device: int | Device | None = None):
        ensure_driver()
        nbytes = _check_nbytes(nbytes, "PinnedBuffer")
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
            raise MemoryError(f"PinnedBuffer: could not pin {nbytes} bytes of host memory") from None
        self._finalizer = weakref.finalize(self, _free_pinned, self.device, self.ptr)

    def numpy(self, dtype: Any = np.uint8, shape: tuple[int, ...] | None = None) -> np.ndarray:
        """A NumPy array viewing this memory (it keeps the buffer alive)."""
        dtype = np.dtype(dtype)
        count = self.nbytes // dtype.itemsize
        if shape is None:
            shape = (count,)
        if int(np.prod(shape)) * dtype.itemsize > self.nbytes:
            raise ValueError(f"PinnedBuffer.numpy: shape {shape} of {dtype} needs more than {self.nbytes} bytes")
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
    """A new NumPy array in pinned host memory, for fast (and async) transfers."""
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    dtype = np.dtype(dtype)
    buf = PinnedBuffer(int(np.prod(shape)) * dtype.itemsize)
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
            raise ValueError(f"{op}: host arrays must be C-contiguous (use numpy.ascontiguousarray)")
        if writable and not obj.flags.writeable:
            raise ValueError(f"{op}: the destination array is read-only")
        return obj.ctypes.data, None, obj
    if hasattr(obj, "ptr") and hasattr(obj, "device") and isinstance(getattr(obj, "ptr"), int):
        dev = obj.device
        return obj.ptr, dev if isinstance(dev, Device) else None, obj
    if isinstance(obj, (bytes, bytearray, memoryview)):
        if writable and (isinstance(obj, bytes) or memoryview(obj).readonly):
            raise ValueError(f"{op}: the destination is read-only")
        arr = np.frombuffer(obj, dtype=np.uint8)
        return arr.ctypes.data, None, arr
    raise TypeError(
        f"{op}: expected a Buffer, PinnedBuffer, NumPy array or bytes-like object, got {type(obj).__name__}"
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


def memset(dst: Buffer, value: int, nbytes: int | None = None, *, stream: Stream | None = None) -> None:
    """Set ``nbytes`` bytes (default: all) of ``dst`` to the byte ``value``. Sync unless ``stream``."""
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


def _check_nbytes(nbytes: Any, op: str) -> int:
    if isinstance(nbytes, bool) or not isinstance(nbytes, (int, np.integer)):
        raise TypeError(f"{op}: nbytes must be an int, got {type(nbytes).__name__}")
    if nbytes < 0:
        raise ValueError(f"{op}: nbytes must be >= 0, got {nbytes}")
    return int(nbytes)
