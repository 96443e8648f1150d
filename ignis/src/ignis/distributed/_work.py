"""Handles of queued collectives (:class:`Work`) and the watchdog that fails a process group
whose collectives do not finish in time.

A collective is queued on a stream and returns at once; its end is marked by an event. The
watchdog, a daemon thread per process group, looks at the outstanding events every
``interval`` seconds and at ``ncclCommGetAsyncError``: when a collective has not finished
``timeout`` seconds after it was queued, or NCCL reports an error (a peer went away), it aborts
the communicator (``ncclCommAbort``, which also ends the kernels still waiting for the peer) and
marks the group failed. From then on every call on the group raises a
:class:`DistributedError` (:class:`DistributedTimeoutError` for a timeout) that names the
collective, the rank and the timeout. Work queued during CUDA-graph capture is not watched
(nothing runs then); its replays are not either.

Example::

    >>> work = dist.all_reduce(x, async_op=True)
    >>> ...                      # other work on the current stream overlaps the reduction
    >>> work.wait()              # later work on the current stream waits for it
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from .._errors import CudaError
from ._errors import DistributedError, DistributedTimeoutError

__all__ = ["Work", "Watchdog"]

logger = logging.getLogger("ignis")


class Work:
    """A collective queued with ``async_op=True``.

    ``wait()`` makes the caller's current stream wait for the collective (no host block, like
    PyTorch's NCCL work) and releases the arrays the collective uses; ``is_completed()`` asks
    whether it has finished on the device (never blocks); ``synchronize()`` blocks the host
    until it has, raising :class:`DistributedTimeoutError` after the group's timeout.

    Until ``wait()`` the handle keeps the collective's arrays alive: keep it, and wait on it
    before the arrays are used or dropped.
    """

    __slots__ = ("op", "_group", "_event", "_keep", "_waited")

    def __init__(self, op: str, group: Any, event: Any, keep: tuple[Any, ...] = ()):
        self.op = op
        self._group = group
        self._event = event  # None: finished when made (a stand-in communicator's work)
        self._keep = keep
        self._waited = False

    @classmethod
    def completed(cls, op: str) -> Work:
        """A handle of work already done (what a host-side communicator returns)."""
        return cls(op, None, None)

    def wait(self, timeout: float | None = None) -> bool:
        """Order the current stream after the collective; returns True.

        ``timeout`` is accepted for PyTorch compatibility; the group's own timeout (the
        watchdog's) applies.

        Raises:
            DistributedError: when the group has failed (timed out, aborted, a peer died).
        """
        group = self._group
        if group is not None:
            group._check(f"{self.op}.wait")
            if self._event is not None:
                from .._stream import current_stream

                current_stream(group.device).wait(self._event)
        self._keep = ()
        self._waited = True
        return True

    def is_completed(self) -> bool:
        """True when the collective has finished on the device (or the group failed)."""
        if self._event is None:
            return True
        if self._group is not None and self._group.error is not None:
            return True
        return bool(self._event.query())

    def synchronize(self) -> None:
        """Block the host until the collective has finished, at most the group's timeout.

        Raises:
            DistributedTimeoutError: when it has not finished within the timeout (the group is
                aborted then), DistributedError when the group has failed.
        """
        if self._event is not None and self._group is not None:
            self._group._host_wait(self._event, self.op)
        self.wait()

    def __repr__(self) -> str:
        state = "waited" if self._waited else ("done" if self.is_completed() else "pending")
        return f"<ignis.distributed.Work {self.op} {state}>"


class Watchdog:
    """Polls a process group's outstanding collectives and NCCL's asynchronous error.

    Args:
        name: the thread's name.
        poll_error: returns an error message when NCCL reports one, else None.
        fail: called once with the exception that marks the group failed (it aborts).
        interval: seconds between two looks.
    """

    def __init__(
        self,
        name: str,
        poll_error: Callable[[], str | None],
        fail: Callable[[DistributedError], None],
        interval: float = 0.05,
    ):
        self._poll_error, self._fail = poll_error, fail
        self.interval = float(interval)
        self._lock = threading.Lock()
        self._entries: list[tuple[str, Any, float, float]] = []  # op, event, deadline, timeout
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def track(self, op: str, event: Any, timeout: float) -> None:
        """Watch ``event`` (recorded after ``op`` was queued) for ``timeout`` seconds."""
        with self._lock:
            self._entries.append((op, event, time.monotonic() + timeout, timeout))

    @property
    def outstanding(self) -> int:
        """Collectives queued and not yet seen finished."""
        with self._lock:
            return len(self._entries)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            exc = self.poll()
            if exc is not None:
                self._fail(exc)
                return

    def poll(self) -> DistributedError | None:
        """One look; returns the error that fails the group, or None."""
        try:
            message = self._poll_error()
        except Exception as err:  # the communicator may be gone while closing
            message = str(err)
        if message:
            return DistributedError(message)
        now = time.monotonic()
        with self._lock:
            entries = list(self._entries)
        done = []
        for entry in entries:
            op, event, deadline, timeout = entry
            try:
                finished = event.query()
            except CudaError as err:
                return DistributedError(f"{op}: the device failed while it ran ({err})")
            if finished:
                done.append(entry)
            elif now > deadline:
                return DistributedTimeoutError(
                    f"{op} did not finish within the process group's timeout of {timeout:g} s "
                    "(a peer rank hung or died); the communicator was aborted"
                )
        if done:
            with self._lock:
                self._entries = [e for e in self._entries if e not in done]
        return None

    def stop(self) -> None:
        """End the thread (it finishes its current look)."""
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=5.0)
