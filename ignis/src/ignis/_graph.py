"""CUDA graphs: record the work issued on a stream once, replay it with one launch.

Example::

    >>> s = ignis.Stream()
    >>> with ignis.Graph.capture(s) as g:
    ...     kernel.launch(grid=64, block=256, args=[x, n], stream=s)
    >>> for _ in range(100):
    ...     g.launch(s)
    >>> s.synchronize()

Inside the ``with`` block the captured stream is also the thread's current stream, so ignis
operations that take no explicit stream are captured too. Nothing runs during capture: the work
runs at each :meth:`Graph.launch`.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from . import _profiler
from ._bindings import cu, driver
from ._device import Device, activate
from ._errors import CudaError
from ._stream import Stream, current_stream

__all__ = ["Graph"]

_MODES = {
    "global": "CU_STREAM_CAPTURE_MODE_GLOBAL",
    "thread_local": "CU_STREAM_CAPTURE_MODE_THREAD_LOCAL",
    "relaxed": "CU_STREAM_CAPTURE_MODE_RELAXED",
}


def _destroy_graph(device: Device, graph: Any, graph_exec: Any) -> None:
    activate(device)
    try:
        if graph_exec is not None:
            cu.cuGraphExecDestroy(graph_exec)
    finally:
        cu.cuGraphDestroy(graph)


class Graph:
    """An instantiated CUDA graph. Create one with :meth:`Graph.capture`."""

    __slots__ = ("device", "_graph", "_exec", "_finalizer", "__weakref__")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("Graph cannot be constructed directly; use `with ignis.Graph.capture(stream) as g:`")

    @classmethod
    @contextmanager
    def capture(cls, stream: Stream | None = None, *, mode: str = "thread_local") -> Iterator[Graph]:
        """Capture the work issued on ``stream`` inside the ``with`` block into a graph.

        Args:
            stream: a stream created with ``ignis.Stream()`` (default: the current stream). The
                legacy default stream cannot be captured.
            mode: ``"thread_local"`` (default), ``"global"`` or ``"relaxed"``: which unsafe calls
                (such as a synchronous allocation) other threads may make during the capture.

        The graph is instantiated when the block exits; if the block raises, the capture is
        abandoned and the exception propagates.
        """
        if stream is None:
            stream = current_stream()
        if mode not in _MODES:
            raise ValueError(f"Graph.capture: mode must be one of {sorted(_MODES)}, got {mode!r}")
        if stream.ptr == 0:
            raise ValueError(
                "Graph.capture: the legacy default stream cannot be captured; "
                "capture on a stream made with ignis.Stream()"
            )
        self = object.__new__(cls)
        self.device = stream.device
        self._graph = None
        self._exec = None
        self._finalizer = None
        activate(self.device)
        cu.cuStreamBeginCapture(stream.handle, getattr(driver.CUstreamCaptureMode, _MODES[mode]))
        try:
            with stream:
                yield self
        except BaseException:
            try:
                graph = cu.cuStreamEndCapture(stream.handle)
                cu.cuGraphDestroy(graph)
            except CudaError:
                pass  # the capture was already invalidated; the original error matters
            raise
        graph = cu.cuStreamEndCapture(stream.handle)
        try:
            graph_exec = cu.cuGraphInstantiate(graph, 0)
        except BaseException:
            cu.cuGraphDestroy(graph)
            raise
        self._graph, self._exec = graph, graph_exec
        self._finalizer = weakref.finalize(self, _destroy_graph, self.device, graph, graph_exec)

    def _check(self, op: str) -> None:
        if self._exec is None:
            raise ValueError(f"Graph.{op}: the graph is not instantiated yet (still capturing)")
        if not self._finalizer.alive:
            raise ValueError(f"Graph.{op}: the graph has been closed")

    def launch(self, stream: Stream | None = None) -> None:
        """Replay the captured work on ``stream`` (default: the current stream); async."""
        self._check("launch")
        if stream is None:
            stream = current_stream(self.device)
        activate(self.device)
        profiler = _profiler.active
        if profiler is None:
            cu.cuGraphLaunch(self._exec, stream.handle)
        else:  # ignis.profile() is recording: the replay goes between its two events
            profiler.graph_launch(self, stream)

    def replay(self, stream: Stream | None = None) -> None:
        """Launch the graph and wait for it to finish."""
        if stream is None:
            stream = current_stream(self.device)
        self.launch(stream)
        stream.synchronize()

    @property
    def num_nodes(self) -> int:
        """Number of nodes (kernels, copies, memsets, ...) in the captured graph."""
        self._check("num_nodes")
        _, count = cu.cuGraphGetNodes(self._graph, 0)
        return int(count)

    def close(self) -> None:
        """Destroy the graph and its executable."""
        if self._finalizer is not None:
            self._finalizer()

    def __repr__(self) -> str:
        return f"<ignis.Graph on cuda:{self.device.ordinal}>"
