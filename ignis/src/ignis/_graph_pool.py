"""A private memory pool for CUDA-graph capture: allocations at fixed addresses that outlive it.

A captured graph replays its kernels on the addresses they saw during capture. Memory that a
graph allocates with ``cuMemAllocAsync`` must be freed before the graph may run again, which
does not fit arrays that outlive one step (a loss, gradients, optimizer state). A
:class:`GraphPool` instead hands out blocks of a few large ``cuMemAlloc`` chunks that it owns:
the addresses stay valid for as long as the pool (and the graphs that use it) live, and a
block freed during capture is reused by a later allocation of the same capture, in stream
order.

Everything that runs while the pool is active must be queued on one stream (the capture
stream): reuse of a freed block is safe because the work before and after the free is
ordered on that stream.

Example::

    >>> pool = ignis.GraphPool(0)
    >>> s = ignis.Stream()
    >>> with pool.active(), s:
    ...     step()                        # warm-up: the pool sizes itself
    ...     with ignis.Graph.capture(s) as g:
    ...         out = step()              # recorded; out's memory belongs to the pool
    >>> g.launch(s)                       # rewrites out in place
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from ._bindings import cu, driver
from ._device import Device, activate, current_device
from ._memory import MemoryResource, get_memory_resource, set_memory_resource
from ._stream import Stream

__all__ = ["GraphPool"]

_ALIGN = 256
_DEFAULT_CHUNK = 64 << 20


def _round_up(n: int, k: int) -> int:
    return (n + k - 1) // k * k


class _Spans:
    """First-fit allocation over address ranges, coalescing neighbours of the same chunk."""

    def __init__(self) -> None:
        self.chunks: list[tuple[int, int]] = []  # (base, nbytes)
        self.free: list[tuple[int, int]] = []  # sorted (ptr, nbytes)

    def add_chunk(self, base: int, nbytes: int) -> None:
        self.chunks.append((base, nbytes))
        self.release(base, nbytes)

    def take(self, size: int) -> int | None:
        for i, (ptr, span) in enumerate(self.free):
            if span >= size:
                if span == size:
                    del self.free[i]
                else:
                    self.free[i] = (ptr + size, span - size)
                return ptr
        return None

    def release(self, ptr: int, size: int) -> None:
        free = self.free
        i = bisect.bisect_left(free, (ptr, 0))
        # Merge with the following span, then with the preceding one, when they touch.
        if i < len(free) and ptr + size == free[i][0] and self._same_chunk(ptr, free[i][0]):
            size += free[i][1]
            del free[i]
        if i > 0:
            prev_ptr, prev_size = free[i - 1]
            if prev_ptr + prev_size == ptr and self._same_chunk(prev_ptr, ptr):
                free[i - 1] = (prev_ptr, prev_size + size)
                return
        free.insert(i, (ptr, size))

    def _same_chunk(self, a: int, b: int) -> bool:
        return any(base <= a < base + n and base <= b < base + n for base, n in self.chunks)


class GraphPool(MemoryResource):
    """A first-fit pool over device chunks that it never returns while it lives.

    Args:
        device: the device (default: current).
        chunk_bytes: minimum size of each chunk taken from the driver (bytes).
    """

    def __init__(self, device: int | Device | None = None, *, chunk_bytes: int = _DEFAULT_CHUNK):
        self.device = current_device() if device is None else Device(device)
        self.chunk_bytes = int(chunk_bytes)
        self._spans = _Spans()
        self._used: dict[int, int] = {}  # ptr -> rounded size of each live block
        self._lock = threading.Lock()
        self._closed = False

    # --- MemoryResource hooks -------------------------------------------------------------------

    def _alloc(self, nbytes: int, stream: Stream) -> int:
        size = _round_up(nbytes, _ALIGN)
        with self._lock:
            if self._closed:
                raise ValueError("GraphPool: the pool has been closed")
            ptr = self._spans.take(size)
            if ptr is None:
                self._grow(size)
                ptr = self._spans.take(size)
            self._used[ptr] = size
            return ptr

    def _free(self, ptr: int, stream: Stream) -> None:
        with self._lock:
            size = self._used.pop(ptr, None)
            if size is None or self._closed:
                return
            self._spans.release(ptr, size)

    def _grow(self, size: int) -> None:
        nbytes = max(self.chunk_bytes, _round_up(size, 2 << 20))
        activate(self.device)
        # cuMemAlloc is a capture-unsafe call; during a capture on this thread it is allowed
        # only after switching the thread to relaxed mode (the allocation is not recorded).
        relaxed = driver.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED
        previous = cu.cuThreadExchangeStreamCaptureMode(relaxed)
        try:
            ptr = int(cu.cuMemAlloc(nbytes))
        finally:
            cu.cuThreadExchangeStreamCaptureMode(previous)
        self._spans.add_chunk(ptr, nbytes)

    # --- public ---------------------------------------------------------------------------------

    @property
    def reserved_bytes(self) -> int:
        """Bytes taken from the driver (all chunks)."""
        return sum(n for _, n in self._spans.chunks)

    @property
    def used_bytes(self) -> int:
        """Bytes in live blocks."""
        return sum(self._used.values())

    @contextmanager
    def active(self) -> Iterator[GraphPool]:
        """Make this pool the allocator of its device inside the block (then restore the old one).

        The resource is per device, not per thread: other threads allocating on this device
        during the block also draw from the pool.
        """
        previous = get_memory_resource(self.device)
        set_memory_resource(self, self.device)
        try:
            yield self
        finally:
            set_memory_resource(previous, self.device)

    def close(self) -> None:
        """Return every chunk to the driver. Arrays still holding blocks must not be used after."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            chunks, self._spans = self._spans.chunks, _Spans()
        if chunks:
            activate(self.device)
            self.device.synchronize()
            for ptr, _ in chunks:
                cu.cuMemFree(ptr)

    def __del__(self) -> None:
        try:
            if not self._closed and self._spans.chunks:
                self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown or a dead context
            pass

    def __repr__(self) -> str:
        return (
            f"<ignis.GraphPool cuda:{self.device.ordinal} reserved={self.reserved_bytes} "
            f"used={self.used_bytes}>"
        )
