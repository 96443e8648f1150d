"""Streams and events.

A :class:`Stream` is an ordered queue of device work; an :class:`Event` marks a point in a stream
that other streams or the host can wait for, and two timing events measure elapsed device time.

Each device has a default stream (:func:`default_stream`): the legacy NULL stream, the same one
PyTorch and CuPy use by default, so work handed between the libraries stays ordered.
``with stream:`` makes a stream the calling thread's current stream for that device
(:func:`current_stream`).

Example::

    >>> s = ignis.Stream()
    >>> start, end = ignis.Event(), ignis.Event()
    >>> start.record(s); ...; end.record(s)
    >>> end.synchronize(); start.elapsed_time(end)   # milliseconds
    0.012
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from ._bindings import check_ready, cu, driver
from ._codegen import flatten
from ._device import Device, activate, current_device

__all__ = ["Stream", "Event", "default_stream", "current_stream"]

_tls = threading.local()


def _destroy_stream(device: Device, handle: Any) -> None:
    activate(device)
    cu.cuStreamDestroy(handle)


def _destroy_event(device: Device, handle: Any) -> None:
    activate(device)
    cu.cuEventDestroy(handle)


class Stream:
    """A CUDA stream on one device.

    Args:
        device: the device (default: the current device).
        non_blocking: if True (default) the stream does not synchronize with the legacy default
            stream, like ``cudaStreamNonBlocking``.
        priority: lower numbers are higher priority; clamped to the device's range.

    ``close()`` destroys the stream (queued work still completes); a finalizer does it otherwise.
    """

    # ``_legacy``: the device's legacy default stream (handle 0), which is never destroyed or
    # captured (the memory resource caches blocks freed on it).
    __slots__ = ("device", "handle", "_owned", "_legacy", "_finalizer", "__weakref__")

    def __init__(
        self,
        device: int | Device | None = None,
        *,
        non_blocking: bool = True,
        priority: int = 0,
    ) -> None:
        dev = current_device() if device is None else Device(device)
        activate(dev)
        least, greatest = cu.cuCtxGetStreamPriorityRange()
        prio = min(max(int(priority), int(greatest)), int(least))
        flags = (
            driver.CUstream_flags.CU_STREAM_NON_BLOCKING
            if non_blocking
            else driver.CUstream_flags.CU_STREAM_DEFAULT
        )
        self.device = dev
        self.handle = cu.cuStreamCreateWithPriority(int(flags), prio)
        self._owned = True
        self._legacy = False
        self._finalizer = weakref.finalize(self, _destroy_stream, dev, self.handle)

    @classmethod
    def _wrap_legacy_default(cls, device: Device) -> Stream:
        self = object.__new__(cls)
        self.device = device
        self.handle = driver.CUstream(0)
        self._owned = False
        self._legacy = True
        self._finalizer = None
        return self

    @classmethod
    def from_handle(cls, handle: int, device: int | Device | None = None) -> Stream:
        """Wrap a stream created elsewhere (e.g. ``torch.cuda.current_stream().cuda_stream``).

        The stream is borrowed: ignis never destroys it.
        """
        dev = current_device() if device is None else Device(device)
        self = object.__new__(cls)
        self.device = dev
        self.handle = driver.CUstream(int(handle))
        self._owned = False
        self._legacy = int(handle) == 0
        self._finalizer = None
        return self

    @property
    def ptr(self) -> int:
        """The raw ``CUstream`` handle as an int (0 for the legacy default stream)."""
        return int(self.handle)

    @property
    def closed(self) -> bool:
        finalizer = getattr(self, "_finalizer", None)  # None: not ours to destroy (legacy, wrapped)
        return finalizer is not None and not finalizer.alive

    def close(self) -> None:
        """Destroy the stream. Work already queued still runs to completion."""
        if self._finalizer is not None:
            self._finalizer()

    def synchronize(self) -> None:
        """Block the host until all work queued on this stream has finished."""
        activate(self.device)
        cu.cuStreamSynchronize(self.handle)

    def query(self) -> bool:
        """True when all work queued on this stream has finished (never blocks)."""
        activate(self.device)
        return check_ready(driver.cuStreamQuery(self.handle), "cuStreamQuery")

    def wait(self, event: Event) -> None:
        """Make later work on this stream wait until ``event`` has completed (no host block)."""
        activate(self.device)
        cu.cuStreamWaitEvent(self.handle, event.handle, 0)

    def wait_stream(self, other: Stream) -> None:
        """Make later work on this stream wait for everything queued so far on ``other``."""
        event = Event(other.device, timing=False)
        event.record(other)
        self.wait(event)

    def record(self, event: Event | None = None) -> Event:
        """Record ``event`` (a new one if None) on this stream and return it."""
        if event is None:
            event = Event(self.device)
        event.record(self)
        return event

    def __enter__(self) -> Stream:
        stack = _stack()
        stack.append((self.device.ordinal, _current_streams().get(self.device.ordinal)))
        _current_streams()[self.device.ordinal] = self
        return self

    def __exit__(self, *exc: object) -> None:
        ordinal, previous = _stack().pop()
        if previous is None:
            _current_streams().pop(ordinal, None)
        else:
            _current_streams()[ordinal] = previous

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Stream) and other.device is self.device and other.ptr == self.ptr

    def __hash__(self) -> int:
        return hash((self.device.ordinal, self.ptr))

    def __repr__(self) -> str:
        kind = "default" if self.ptr == 0 else hex(self.ptr)
        return f"<ignis.Stream {kind} on cuda:{self.device.ordinal}>"

    def __cuda_stream__(self) -> tuple[int, int]:
        """The CUDA stream protocol (version 0, handle), understood by cuda.core and others."""
        return (0, self.ptr)


_default_streams: dict[int, Stream] = {}


def default_stream(device: int | Device | None = None) -> Stream:
    """The legacy default (NULL) stream of ``device``: synchronizes with other blocking streams."""
    dev = (
        device
        if device.__class__ is Device
        else (current_device() if device is None else Device(device))
    )
    stream = _default_streams.get(dev.ordinal)
    if stream is None:
        stream = _default_streams.setdefault(dev.ordinal, Stream._wrap_legacy_default(dev))
    return stream


def _stream_of(device: Device, ordinal: int) -> Stream:
    """:func:`current_stream` of a Device and its ordinal. It runs inline there and in the
    allocation of array results (see ignis._codegen): its returns stay where the inliner takes
    them."""
    try:
        stream = _tls.streams.get(ordinal)
    except AttributeError:  # this thread has not entered a stream yet
        stream = _current_streams().get(ordinal)
    if stream is None:
        stream = _default_streams.get(ordinal)
        if stream is None:
            stream = default_stream(device)
    return stream  # (one return of one local: inline, it is the caller's own)


@flatten(_stream_of)
def current_stream(device: int | Device | None = None) -> Stream:
    """The calling thread's current stream for ``device``: the innermost ``with stream:`` block's,
    else the device's default stream."""
    # Every array op asks this (to allocate, then to launch): flattened, a Device argument and
    # a thread that has its stream table take no call beyond two dict lookups.
    dev = (
        device
        if device.__class__ is Device
        else (current_device() if device is None else Device(device))
    )
    return _stream_of(dev, dev.ordinal)


def _current_streams() -> dict[int, Stream]:
    streams = getattr(_tls, "streams", None)
    if streams is None:
        streams = _tls.streams = {}
    return streams


def _stack() -> list[tuple[int, Stream | None]]:
    stack = getattr(_tls, "stack", None)
    if stack is None:
        stack = _tls.stack = []
    return stack


class Event:
    """A CUDA event: a marker in a stream.

    Args:
        device: the device (default: current).
        timing: record timestamps so :meth:`elapsed_time` works (default True).
        blocking: :meth:`synchronize` sleeps instead of spinning (default False).
    """

    __slots__ = ("device", "handle", "timing", "_finalizer", "__weakref__")

    def __init__(
        self, device: int | Device | None = None, *, timing: bool = True, blocking: bool = False
    ) -> None:
        dev = current_device() if device is None else Device(device)
        activate(dev)
        flags = 0
        if not timing:
            flags |= int(driver.CUevent_flags.CU_EVENT_DISABLE_TIMING)
        if blocking:
            flags |= int(driver.CUevent_flags.CU_EVENT_BLOCKING_SYNC)
        self.device = dev
        self.timing = timing
        self.handle = cu.cuEventCreate(flags)
        self._finalizer = weakref.finalize(self, _destroy_event, dev, self.handle)

    def record(self, stream: Stream | None = None) -> Event:
        """Record the event on ``stream`` (default: the current stream). Returns self."""
        if stream is None:
            stream = current_stream(self.device)
        activate(self.device)
        cu.cuEventRecord(self.handle, stream.handle)
        return self

    def synchronize(self) -> None:
        """Block the host until the work before the recorded event has finished."""
        activate(self.device)
        cu.cuEventSynchronize(self.handle)

    def query(self) -> bool:
        """True when the recorded work has finished (never blocks)."""
        activate(self.device)
        return check_ready(driver.cuEventQuery(self.handle), "cuEventQuery")

    def elapsed_time(self, end: Event) -> float:
        """Milliseconds of device time between this event and ``end`` (both recorded and done).

        Raises:
            ValueError: when either event was created with ``timing=False``.
        """
        if not (self.timing and end.timing):
            raise ValueError("Event.elapsed_time: both events must be created with timing=True")
        activate(self.device)
        return float(cu.cuEventElapsedTime(self.handle, end.handle))

    def close(self) -> None:
        """Destroy the event."""
        self._finalizer()

    def __repr__(self) -> str:
        return f"<ignis.Event on cuda:{self.device.ordinal}>"
