"""A kernel profiler: every launch ignis makes, with its configuration and device time.

Example::

    >>> with ignis.profile() as prof:
    ...     y = (x * 2.0 + 1.0).sum()
    >>> print(prof.table())              # one row per kernel, sorted by total device time
    >>> prof.export("trace.json")        # Chrome trace: open it in Perfetto (ui.perfetto.dev)
    >>> prof.events[0].name, prof.events[0].time_ms

While a profile records, each launch made through ignis (``Kernel.launch``, the prepared
launches of the kernel library and of the array ops' one-call paths, ``ElementwiseKernel``,
cooperative launches, and ``Graph.launch``) is issued between two CUDA events on its stream.
Nothing waits at launch time: the events are read when the times are first asked for
(:attr:`Profile.events`, :meth:`Profile.table`, :meth:`Profile.export`) or when the ``with``
block ends, with one ``cuEventSynchronize`` per stream.

The launch paths test one module attribute, :data:`active`, and do nothing else while it is
None: that is the whole cost of the profiler when it is off.

Behaviour this module defines:

* One profile records at a time, for the whole process: it sees the launches of every thread.
  Entering a second one (nested, or from another thread) raises ``RuntimeError``; so does
  entering a profile object a second time.
* A launch into a stream that is being captured into a CUDA graph runs nothing yet, so it has
  no device time: it is recorded with ``captured=True`` and ``time_ms=None`` (a row of its own
  in the table, left out of the trace). The graph's replays (``Graph.launch``) are timed, as one
  event each: the kernels inside a graph are not seen one by one.
* cuBLAS, cuBLASLt and cuFFT calls launch their kernels inside those libraries and are not
  recorded.
* On the CPU backend no kernel is launched, so a profile records nothing; ``table()`` says so.
"""

from __future__ import annotations

import json
import os
import threading
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ._bindings import check, cu, driver, driver_available
from ._device import activate
from ._errors import CudaError

__all__ = ["profile", "Profile", "KernelEvent", "KernelSummary"]

# The recording profile, or None. The launch paths read it inline (one attribute of this module):
# nothing else runs on a launch while it is None.
active: Profile | None = None
_active_lock = threading.Lock()

# Registers per thread of each loaded kernel (``_Loaded`` state -> count), asked of the driver
# once per function: it never changes after the module is loaded.
_registers: weakref.WeakKeyDictionary[Any, int | None] = weakref.WeakKeyDictionary()
_graph_nodes: weakref.WeakKeyDictionary[Any, int | None] = weakref.WeakKeyDictionary()

_SORT_KEYS = ("total", "mean", "min", "max", "calls", "name")
_GROUPS = ("name", "config")


class KernelEvent:
    """One recorded launch.

    Attributes:
        name: the kernel's name (``"saxpy"``, ``"ignis::ew::binary_contig<...>"``), or
            ``"Graph.launch"`` for the replay of a CUDA graph.
        kind: ``"kernel"``, ``"cooperative"`` or ``"graph"``.
        device: the device ordinal.
        stream: the stream's handle as an int (0: the legacy default stream).
        grid, block: ``(x, y, z)`` (None for a graph).
        shared_mem: dynamic shared memory in bytes (None for a graph).
        registers: registers per thread (None for a graph or where the driver cannot say).
        captured: launched into a stream under CUDA-graph capture (no device time then).
        host_us: host time of the launch call, microseconds since the profile started.
        time_ms: device time in milliseconds, from the events around the launch; None while
            not read yet (``Profile.events`` reads it) or for a captured launch.
        start_us: device start time in microseconds on the trace's time line (None as above).
        graph_nodes: the number of nodes of a replayed graph (None for a kernel).
    """

    __slots__ = (
        "name",
        "kind",
        "device",
        "stream",
        "grid",
        "block",
        "shared_mem",
        "registers",
        "captured",
        "host_us",
        "time_ms",
        "start_us",
        "graph_nodes",
        "_start",
        "_end",
    )

    def __init__(
        self,
        name: str,
        kind: str,
        device: int,
        stream: int,
        grid: tuple[int, int, int] | None,
        block: tuple[int, int, int] | None,
        shared_mem: int | None,
        registers: int | None,
        host_us: float,
        *,
        captured: bool = False,
        graph_nodes: int | None = None,
        start: Any = None,
        end: Any = None,
    ) -> None:
        self.name = name
        self.kind = kind
        self.device = device
        self.stream = stream
        self.grid = grid
        self.block = block
        self.shared_mem = shared_mem
        self.registers = registers
        self.captured = captured
        self.host_us = host_us
        self.time_ms: float | None = None
        self.start_us: float | None = None
        self.graph_nodes = graph_nodes
        self._start = start
        self._end = end

    def __repr__(self) -> str:
        time_text = "captured" if self.captured else f"{self.time_ms} ms"
        return (
            f"<KernelEvent {self.name!r} grid={self.grid} block={self.block} "
            f"smem={self.shared_mem} regs={self.registers} stream={self.stream:#x} {time_text}>"
        )


@dataclass(frozen=True)
class KernelSummary:
    """One row of :meth:`Profile.summary`: the launches of one kernel (or one configuration).

    Times are device times: ``total_ms`` in milliseconds, ``mean_us``/``min_us``/``max_us`` in
    microseconds (None for a row of captured launches, which have no time). ``grid``, ``block``,
    ``shared_mem`` and ``registers`` are None where the row's launches differ in them.
    """

    name: str
    calls: int
    total_ms: float | None
    mean_us: float | None
    min_us: float | None
    max_us: float | None
    grid: tuple[int, int, int] | None
    block: tuple[int, int, int] | None
    shared_mem: int | None
    registers: int | None
    captured: bool


class Profile:
    """Records the kernel launches made inside a ``with`` block; see :func:`profile`."""

    def __init__(self) -> None:
        self._state = "new"  # -> "recording" -> "done"
        self._lock = threading.Lock()
        self._records: list[KernelEvent] = []
        self._pending: list[KernelEvent] = []  # timed records whose events are not read yet
        self._devices: dict[int, Any] = {}  # ordinal -> Device, of every device launched on
        self._free: dict[int, list[Any]] = {}  # ordinal -> events ready for reuse
        self._origin: dict[int, tuple[Any, float]] = {}  # ordinal -> (event, host us)
        self._t0_ns = 0
        self._unread = 0  # records whose events could not be read (a failed device)

    # --- the context manager ---------------------------------------------------------------

    def __enter__(self) -> Profile:
        global active
        with _active_lock:
            if self._state != "new":
                raise RuntimeError(
                    "ignis.profile: this profile has already recorded; "
                    "use a new ignis.profile() for another recording"
                )
            if active is not None:
                raise RuntimeError(
                    "ignis.profile: another profile is already recording; profiles do not nest "
                    "(one profile records the launches of every thread)"
                )
            self._t0_ns = time.perf_counter_ns()
            self._state = "recording"
            active = self
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        global active
        with _active_lock:
            if active is self:
                active = None
            self._state = "done"
        try:
            self._resolve()
        except CudaError:
            if exc_type is None:
                raise
            # The block's own error is the one to see (it may be what broke the device).
        finally:
            self._release()

    # --- the launch hooks (called only while this profile is the active one) ----------------

    def launch(self, state: Any, entry: Any, stream: Any, args: tuple[Any, ...]) -> tuple:
        """Issue ``entry(*args)`` (``cuLaunchKernel``'s arguments, or those of
        ``cuLaunchCooperativeKernel``) between two events on ``stream``; return its result.

        ``state`` is the kernel's per-device state (``ignis._kernel._Loaded``).
        """
        host_us = (time.perf_counter_ns() - self._t0_ns) / 1e3
        device = state.device
        registers = _registers.get(state, _UNKNOWN)
        if registers is _UNKNOWN:
            registers = _registers[state] = _num_regs(state.function)
        # cuLaunchKernel takes 11 arguments, cuLaunchCooperativeKernel 10 (no ``extra``).
        kind = "kernel" if len(args) == 11 else "cooperative"

        def make(start: Any = None, end: Any = None, captured: bool = False) -> KernelEvent:
            return KernelEvent(
                state.name,
                kind,
                device.ordinal,
                stream.ptr,
                (args[1], args[2], args[3]),
                (args[4], args[5], args[6]),
                args[7],
                registers,
                host_us,
                captured=captured,
                start=start,
                end=end,
            )

        return self._timed(device, stream, lambda: entry(*args), make)

    def graph_launch(self, graph: Any, stream: Any) -> None:
        """``Graph.launch`` while recording: ``cuGraphLaunch`` between two events."""
        host_us = (time.perf_counter_ns() - self._t0_ns) / 1e3
        nodes = _graph_nodes.get(graph, _UNKNOWN)
        if nodes is _UNKNOWN:
            nodes = _graph_nodes[graph] = graph.num_nodes

        def make(start: Any = None, end: Any = None, captured: bool = False) -> KernelEvent:
            return KernelEvent(
                "Graph.launch",
                "graph",
                graph.device.ordinal,
                stream.ptr,
                None,
                None,
                None,
                None,
                host_us,
                captured=captured,
                graph_nodes=nodes,
                start=start,
                end=end,
            )

        def run() -> tuple:
            return driver.cuGraphLaunch(graph._exec, stream.handle)

        result = self._timed(graph.device, stream, run, make)
        if result[0]:
            check(result, "cuGraphLaunch")

    def _timed(self, device: Any, stream: Any, run: Any, make: Any) -> tuple:
        """Run ``run()`` (a driver call returning its status tuple) between two events on
        ``stream`` and keep ``make(start, end)``; a capturing stream gets no events."""
        handle = stream.handle
        capture = driver.cuStreamIsCapturing(handle)
        if capture[0]:  # the stream cannot be used now (the launch reports why): no record
            return run()
        if capture[1] != _CAPTURE_NONE:
            # Under capture an event would become a node of the graph, not a time stamp.
            result = run()
            if not result[0]:
                self._records.append(make(captured=True))
            return result
        ordinal = device.ordinal
        if ordinal not in self._origin:
            self._start_device(device, handle)
        free = self._free[ordinal]
        try:
            start = free.pop()
        except IndexError:
            start = cu.cuEventCreate(0)
        try:
            end = free.pop()
        except IndexError:
            end = cu.cuEventCreate(0)
        cu.cuEventRecord(start, handle)
        result = run()
        if result[0]:  # refused: nothing ran, nothing to keep
            free.extend((start, end))
            return result
        cu.cuEventRecord(end, handle)
        record = make(start, end)
        self._records.append(record)
        self._pending.append(record)
        return result

    def _start_device(self, device: Any, handle: Any) -> None:
        """The first launch on ``device``: the event its trace times are measured from."""
        with self._lock:
            if device.ordinal in self._origin:
                return
            origin = cu.cuEventCreate(0)
            host_us = (time.perf_counter_ns() - self._t0_ns) / 1e3
            cu.cuEventRecord(origin, handle)
            self._devices[device.ordinal] = device
            self._free[device.ordinal] = []
            self._origin[device.ordinal] = (origin, host_us)

    # --- reading the events ---------------------------------------------------------------

    def _resolve(self) -> None:
        """Read the events of the records not read yet: one synchronize per stream."""
        with self._lock:
            pending, self._pending = self._pending, []
        if not pending:
            return
        last: dict[tuple[int, int], KernelEvent] = {}
        for record in pending:
            last[(record.device, record.stream)] = record
        try:
            for record in last.values():
                activate(self._devices[record.device])
                cu.cuEventSynchronize(record._end)
            for record in pending:
                origin, origin_us = self._origin[record.device]
                activate(self._devices[record.device])
                record.time_ms = float(cu.cuEventElapsedTime(record._start, record._end))
                offset_ms = float(cu.cuEventElapsedTime(origin, record._start))
                record.start_us = origin_us + offset_ms * 1e3
                self._free[record.device].extend((record._start, record._end))
                record._start = record._end = None
        except CudaError:
            unread = [r for r in pending if r._start is not None]
            self._unread += len(unread)
            for record in unread:  # their events are destroyed with the others
                self._free[record.device].extend((record._start, record._end))
                record._start = record._end = None
            raise

    def _release(self) -> None:
        """Destroy every event of the profile (after the times are read)."""
        for ordinal, device in self._devices.items():
            events = self._free.pop(ordinal, [])
            origin = self._origin.pop(ordinal, None)
            if origin is not None:
                events.append(origin[0])
            try:
                activate(device)
                for event in events:
                    cu.cuEventDestroy(event)
            except CudaError:
                pass  # a broken context frees its events with itself

    @property
    def events(self) -> list[KernelEvent]:
        """Every recorded launch, in launch order, with its device time read."""
        self._resolve()
        return list(self._records)

    def summary(self, sort_by: str = "total", group_by: str = "name") -> list[KernelSummary]:
        """The launches aggregated per kernel name (``group_by="name"``) or per kernel and
        launch configuration (``"config"``: name, grid, block, shared memory), sorted by
        ``sort_by``: ``"total"`` (device time, the default), ``"mean"``, ``"min"``, ``"max"``,
        ``"calls"`` (all descending) or ``"name"`` (ascending). Captured launches form rows of
        their own, after the timed ones.

        Example: ``prof.summary()[0].name`` is the kernel that took the most device time.
        """
        if sort_by not in _SORT_KEYS:
            raise ValueError(
                f"Profile.summary: sort_by must be one of {', '.join(_SORT_KEYS)}; got {sort_by!r}"
            )
        if group_by not in _GROUPS:
            raise ValueError(
                f"Profile.summary: group_by must be one of {', '.join(_GROUPS)}; got {group_by!r}"
            )
        groups: dict[tuple[Any, ...], list[KernelEvent]] = {}
        for record in self.events:
            key: tuple[Any, ...] = (record.name, record.captured)
            if group_by == "config":
                key += (record.grid, record.block, record.shared_mem)
            groups.setdefault(key, []).append(record)
        rows = [_summarize(records) for records in groups.values()]
        if sort_by == "name":
            rows.sort(key=lambda r: (r.captured, r.name))
        else:
            field = {"total": "total_ms", "mean": "mean_us", "min": "min_us", "max": "max_us"}
            attr = field.get(sort_by, "calls")
            rows.sort(key=lambda r: (r.captured, -(getattr(r, attr) or 0.0), r.name))
        return rows

    def table(
        self, sort_by: str = "total", limit: int | None = None, group_by: str = "name"
    ) -> str:
        """The :meth:`summary` as a text table, one row per kernel: name, calls, total ms,
        mean/min/max us (device time), grid, block, dynamic shared memory (bytes), registers
        per thread. ``limit``: at most this many rows (None: all). ``print`` it.

        Example: ``print(prof.table(sort_by="calls", limit=10))``.
        """
        if limit is not None and (type(limit) is not int or limit < 1):
            raise ValueError(f"Profile.table: limit must be a positive int or None; got {limit!r}")
        rows = self.summary(sort_by, group_by)
        shown = rows if limit is None else rows[:limit]
        header = ("name", "calls", "total ms", "mean us", "min us", "max us")
        header += ("grid", "block", "smem", "regs")
        cells = [header] + [_cells(row) for row in shown]
        width = [max(len(line[i]) for line in cells) for i in range(len(header))]
        lines = []
        for line in cells:
            name = line[0].ljust(width[0])
            rest = [cell.rjust(w) for cell, w in zip(line[1:], width[1:], strict=True)]
            lines.append("  ".join([name, *rest]).rstrip())
        lines.insert(1, "-" * len(lines[0]))
        lines.extend(self._notes(rows, shown))
        return "\n".join(lines)

    def _notes(self, rows: Sequence[KernelSummary], shown: Sequence[KernelSummary]) -> list[str]:
        notes = []
        if not rows:
            if driver_available():
                notes.append("no kernel launches recorded")
            else:
                notes.append(
                    "no kernel launches recorded (no GPU: the CPU backend runs NumPy, "
                    "which launches no kernels)"
                )
            return notes
        timed = [r for r in self._records if r.time_ms is not None]
        total = sum(r.time_ms for r in timed)  # type: ignore[misc]
        notes.append(f"{len(self._records)} launches, {total:.3f} ms of device time")
        if len(shown) < len(rows):
            notes.append(f"({len(rows) - len(shown)} more rows not shown)")
        captured = sum(r.calls for r in rows if r.captured)
        if captured:
            notes.append(
                f"{captured} launches were made under CUDA-graph capture: recorded without time "
                "(they run at Graph.launch, timed as 'Graph.launch' rows)"
            )
        if self._unread:
            notes.append(f"{self._unread} launches have no time: their events could not be read")
        return notes

    def export(self, path: str | os.PathLike[str]) -> None:
        """Write the recorded launches as a Chrome trace (JSON) to ``path``: one process per
        device, one track per stream, an ``"X"`` event per timed launch (``ts`` and ``dur`` in
        microseconds of device time) with grid, block, shared memory and registers in its
        ``args``. Open it in Perfetto (ui.perfetto.dev) or ``chrome://tracing``.

        Example: ``prof.export("trace.json")``.
        """
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(
                f"Profile.export: path must be a str or os.PathLike; got {type(path).__name__}"
            )
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.trace(), f)

    def trace(self) -> dict[str, Any]:
        """The Chrome trace :meth:`export` writes, as a dict."""
        records = self.events
        timed = [r for r in records if r.start_us is not None]
        shift = min((r.start_us for r in timed), default=0.0)  # type: ignore[type-var]
        shift = min(shift, 0.0)  # trace times start at 0 or later
        tracks: dict[tuple[int, int], int] = {}
        events: list[dict[str, Any]] = []
        for record in timed:
            key = (record.device, record.stream)
            if key not in tracks:
                tracks[key] = len([k for k in tracks if k[0] == record.device])
            args: dict[str, Any] = {"stream": hex(record.stream), "kind": record.kind}
            if record.kind == "graph":
                args["graph_nodes"] = record.graph_nodes
            else:
                args.update(
                    grid=list(record.grid),  # type: ignore[arg-type]
                    block=list(record.block),  # type: ignore[arg-type]
                    shared_mem=record.shared_mem,
                    registers=record.registers,
                )
            events.append(
                {
                    "name": record.name,
                    "cat": record.kind,
                    "ph": "X",
                    "ts": record.start_us - shift,  # type: ignore[operator]
                    "dur": record.time_ms * 1e3,  # type: ignore[operator]
                    "pid": record.device,
                    "tid": tracks[key],
                    "args": args,
                }
            )
        meta: list[dict[str, Any]] = []
        for device in sorted({d for d, _ in tracks}):
            meta.append(_metadata("process_name", device, 0, f"cuda:{device}"))
        for (device, stream), tid in tracks.items():
            label = "legacy default stream" if stream == 0 else f"stream {stream:#x}"
            meta.append(_metadata("thread_name", device, tid, label))
        captured = sum(1 for r in records if r.captured)
        return {
            "traceEvents": meta + events,
            "displayTimeUnit": "ms",
            "otherData": {"producer": "ignis.profile", "captured_launches": captured},
        }

    def __repr__(self) -> str:
        return f"<ignis.Profile {self._state}, {len(self._records)} launches>"


def profile() -> Profile:
    """A kernel profiler: ``with ignis.profile() as prof:`` records every kernel launch ignis
    makes inside the block (name, grid, block, dynamic shared memory, registers per thread,
    stream, device time), from every thread.

    Device times come from a pair of CUDA events around each launch, read once when first
    asked for (``prof.events``, ``prof.table()``, ``prof.export(path)``) or at the end of the
    block. One profile records at a time: entering another raises ``RuntimeError``. On the CPU
    backend nothing is launched, so nothing is recorded.

    Example::

        >>> with ignis.profile() as prof:
        ...     k.launch(grid=64, block=256, args=[x, n])
        >>> print(prof.table())
        >>> prof.export("trace.json")
    """
    return Profile()


_UNKNOWN = object()
_CAPTURE_NONE: Any = (
    driver.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE if driver is not None else 0
)


def _num_regs(function: Any) -> int | None:
    """Registers per thread of a loaded function (None where the driver cannot say)."""
    try:
        return int(
            cu.cuFuncGetAttribute(driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NUM_REGS, function)
        )
    except CudaError:
        return None


def _same(values: Sequence[Any]) -> Any:
    """The value every item has, or None where they differ."""
    first = values[0]
    return first if all(v == first for v in values) else None


def _summarize(records: Sequence[KernelEvent]) -> KernelSummary:
    times = [r.time_ms for r in records if r.time_ms is not None]
    total = sum(times) if times else None
    return KernelSummary(
        name=records[0].name,
        calls=len(records),
        total_ms=total,
        mean_us=total / len(times) * 1e3 if total is not None else None,
        min_us=min(times) * 1e3 if times else None,
        max_us=max(times) * 1e3 if times else None,
        grid=_same([r.grid for r in records]),
        block=_same([r.block for r in records]),
        shared_mem=_same([r.shared_mem for r in records]),
        registers=_same([r.registers for r in records]),
        captured=records[0].captured,
    )


def _dims(dims: tuple[int, int, int] | None, kind_graph: bool) -> str:
    if dims is None:
        return "-" if kind_graph else "mixed"
    return "x".join(str(d) for d in dims)


def _cells(row: KernelSummary) -> tuple[str, ...]:
    graph = row.name == "Graph.launch"
    name = f"{row.name} [captured]" if row.captured else row.name
    if len(name) > 80:  # template instances: keep the head and the distinguishing tail
        name = f"{name[:50]}...{name[-27:]}"

    def num(value: float | None, fmt: str) -> str:
        return "-" if value is None else format(value, fmt)

    return (
        name,
        str(row.calls),
        num(row.total_ms, ".3f"),
        num(row.mean_us, ".2f"),
        num(row.min_us, ".2f"),
        num(row.max_us, ".2f"),
        _dims(row.grid, graph),
        _dims(row.block, graph),
        "-" if graph else ("mixed" if row.shared_mem is None else str(row.shared_mem)),
        "-" if row.registers is None else str(row.registers),
    )


def _metadata(name: str, pid: int, tid: int, label: str) -> dict[str, Any]:
    return {"name": name, "ph": "M", "pid": pid, "tid": tid, "args": {"name": label}}
