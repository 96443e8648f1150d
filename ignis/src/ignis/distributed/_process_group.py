"""The NCCL process group: set-up from the launcher's environment, collectives on NvArrays,
failure handling.

``init_process_group()`` reads ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and
``MASTER_PORT`` (torchrun's conventions), has rank 0 make the ``ncclUniqueId`` and serve it
through a :class:`~ignis.distributed.TCPStore`, forms the communicator on ``cuda:LOCAL_RANK``
and makes that device the default of new arrays. Collectives are queued on the caller's current
stream of that device (``async_op=True``: on the group's side stream, after the current
stream's queued work, returning a :class:`Work`); see :mod:`._work` for the timeout.
"""

from __future__ import annotations

import ctypes
import itertools
import logging
import threading
import time
from typing import Any

from .._array import NvArray
from .._array._device import set_default_device
from .._bindings import driver
from .._device import Device, activate, device_count
from .._errors import DeviceMismatchError, ShapeError
from .._stream import Event, Stream, current_stream
from . import _nccl
from ._env import force_nccl_settings, read_env
from ._errors import DistributedError, DistributedTimeoutError
from ._store import TCPStore, as_seconds
from ._types import ReduceOp, nccl_dtype, reduce_op
from ._work import Watchdog, Work

__all__ = [
    "DEFAULT_TIMEOUT",
    "ProcessGroup",
    "destroy_process_group",
    "get_default_group",
    "get_rank",
    "get_world_size",
    "init_process_group",
    "is_initialized",
]

logger = logging.getLogger("ignis")

#: Seconds a collective, the store or the communicator's set-up may take (PyTorch's 10 min).
DEFAULT_TIMEOUT = 600.0

_generation = itertools.count()
_CAPTURE_NONE = 0


def _is_capturing(stream: Stream) -> bool:
    if stream.ptr == 0:
        return False
    status, capture = driver.cuStreamIsCapturing(stream.handle)
    return int(status) == 0 and int(capture) != _CAPTURE_NONE


class ProcessGroup:
    """One NCCL communicator over ``world_size`` processes, one GPU each.

    Made by :func:`init_process_group`; direct construction is refused. Attributes: ``rank``,
    ``world_size``, ``local_rank``, ``device`` (the :class:`ignis.Device`), ``timeout``
    (seconds), ``backend`` (``"nccl"``), ``error`` (the exception that failed the group, or
    None), ``nccl_version``.
    """

    backend = "nccl"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError(
            "ProcessGroup cannot be constructed directly; use "
            "ignis.distributed.init_process_group()"
        )

    @classmethod
    def _create(
        cls,
        lib: Any,
        rank: int,
        world_size: int,
        local_rank: int,
        device: Device,
        uid: bytes,
        timeout: float,
        store: TCPStore | None,
    ) -> ProcessGroup:
        self = object.__new__(cls)
        self._lib = lib
        self.rank, self.world_size, self.local_rank = rank, world_size, local_rank
        self.device, self.timeout, self._store = device, timeout, store
        self.nccl_version = lib.version
        self.error: DistributedError | None = None
        self._comm = 0
        self._aborted = False
        self._closed = False
        self._abort_lock = threading.Lock()
        self._comm = self._init_comm(uid)
        activate(device)
        self._side = Stream(device)
        self._watchdog = Watchdog(f"ignis-nccl-watchdog-{rank}", self._async_error, self._fail)
        return self

    def _init_comm(self, uid: bytes) -> int:
        # ncclCommInitRank blocks until every rank has joined: run it in a thread so that a
        # rank that never comes makes this one fail after the timeout instead of hanging.
        lib, device = self._lib, self.device
        result: dict[str, Any] = {}
        uid_struct = _nccl.UniqueId()
        ctypes.memmove(ctypes.addressof(uid_struct), uid, _nccl.NCCL_UNIQUE_ID_BYTES)

        def init() -> None:
            try:
                activate(device)
                comm = ctypes.c_void_p()
                lib.call(
                    "ncclCommInitRank", ctypes.byref(comm), self.world_size, uid_struct, self.rank
                )
                result["comm"] = int(comm.value or 0)
            except BaseException as exc:  # handed to the caller's thread
                result["error"] = exc

        thread = threading.Thread(target=init, name=f"ignis-nccl-init-{self.rank}", daemon=True)
        thread.start()
        thread.join(self.timeout)
        if thread.is_alive():
            raise DistributedTimeoutError(
                f"init_process_group: rank {self.rank} could not form the NCCL communicator of "
                f"{self.world_size} ranks within {self.timeout:g} s (a rank did not start, or "
                "died)"
            )
        if "error" in result:
            raise DistributedError(
                f"init_process_group: rank {self.rank} of {self.world_size}: {result['error']}"
            ) from result["error"]
        return result["comm"]

    # --- failure -----------------------------------------------------------------------------

    def _async_error(self) -> str | None:
        if self._comm == 0 or self._aborted:
            return None
        code = ctypes.c_int(0)
        status = self._lib.raw("ncclCommGetAsyncError", self._comm, ctypes.byref(code))
        value = int(code.value) if status == _nccl.NCCL_SUCCESS else status
        if value in (_nccl.NCCL_SUCCESS, _nccl.NCCL_IN_PROGRESS):
            return None
        text = self._lib.last_error(self._comm) or self._lib.error_string(value)
        return (
            f"rank {self.rank}: NCCL reported an asynchronous error ({text}; a peer rank may "
            "have died); the communicator was aborted"
        )

    def _fail(self, exc: DistributedError) -> None:
        """Mark the group failed with ``exc`` (the first failure wins) and abort NCCL."""
        with self._abort_lock:
            if self.error is None:
                text = str(exc)
                if not text.startswith("rank "):
                    exc = type(exc)(f"rank {self.rank} of {self.world_size}: {text}")
                self.error = exc
                logger.error("ignis.distributed: %s", exc)
            if not self._aborted and self._comm:
                self._aborted = True
                self._lib.raw("ncclCommAbort", self._comm)

    def _check(self, op: str) -> None:
        if self._closed:
            raise DistributedError(f"{op}: the process group has been destroyed")
        error = self.error
        if error is not None:
            cls = DistributedTimeoutError if isinstance(error, TimeoutError) else DistributedError
            raise cls(f"{op}: the process group has failed: {error}") from error

    def _host_wait(self, event: Event, op: str) -> None:
        """Block until ``event`` has completed, at most :attr:`timeout` seconds."""
        deadline = time.monotonic() + self.timeout
        pause = 1e-5
        while not event.query():
            self._check(op)
            if time.monotonic() > deadline:
                self._fail(
                    DistributedTimeoutError(
                        f"{op} did not finish within the process group's timeout of "
                        f"{self.timeout:g} s (a peer rank hung or died); the communicator was "
                        "aborted"
                    )
                )
                self._check(op)
            time.sleep(pause)
            pause = min(pause * 2, 1e-3)

    # --- launching ---------------------------------------------------------------------------

    def _array(self, x: Any, op: str, what: str = "tensor") -> NvArray:
        if not isinstance(x, NvArray):
            raise TypeError(f"{op}: {what} must be an NvArray, got {type(x).__name__}")
        if x.device.type != "cuda" or x.device.index != self.device.ordinal:
            raise DeviceMismatchError(
                f"{op}: {what} is on {x.device}; this rank's process group works on "
                f"cuda:{self.device.ordinal}"
            )
        if not x.is_contiguous:
            raise ValueError(f"{op}: {what} must be contiguous (call .copy() first)")
        nccl_dtype(x.dtype, op)
        return x

    def _launch(self, op: str, arrays: tuple[Any, ...], call: Any, async_op: bool) -> Work | None:
        self._check(op)
        device = self.device
        activate(device)
        caller = current_stream(device)
        stream = caller
        if async_op:
            stream = self._side
            stream.wait(Event(device, timing=False).record(caller))
        call(stream.ptr)
        event = Event(device, timing=False).record(stream)
        if not _is_capturing(stream):
            self._watchdog.track(op, event, self.timeout)
        if async_op:
            return Work(op, self, event, arrays)
        return None

    # --- collectives -------------------------------------------------------------------------

    def all_reduce(
        self, tensor: NvArray, op: Any = ReduceOp.SUM, *, async_op: bool = False
    ) -> Work | None:
        """Reduce ``tensor`` over the ranks, in place (see :func:`ignis.distributed.all_reduce`)."""
        name = "all_reduce"
        x = self._array(tensor, name)
        red = self._op(op, name)
        dtype = nccl_dtype(x.dtype, name)

        def call(s: int) -> None:
            self._lib.call(
                "ncclAllReduce", x.data_ptr, x.data_ptr, x.numel, dtype, red, self._comm, s
            )

        return self._launch(name, (x,), call, async_op)

    def broadcast(self, tensor: NvArray, src: int = 0, *, async_op: bool = False) -> Work | None:
        """Copy rank ``src``'s ``tensor`` into every rank's, in place."""
        name = "broadcast"
        x = self._array(tensor, name)
        root = self._peer(src, name, "src")
        dtype = nccl_dtype(x.dtype, name)

        def call(s: int) -> None:
            self._lib.call(
                "ncclBroadcast", x.data_ptr, x.data_ptr, x.numel, dtype, root, self._comm, s
            )

        return self._launch(name, (x,), call, async_op)

    def all_gather_into_tensor(
        self, output: NvArray, input: NvArray, *, async_op: bool = False
    ) -> Work | None:
        """``output`` (``world_size * input.numel`` elements) gets every rank's ``input`` in
        rank order. ``input`` may be ``output``'s own slice of this rank (in place)."""
        name = "all_gather_into_tensor"
        out, x = self._array(output, name, "output"), self._array(input, name, "input")
        self._same_dtype(out, x, name)
        self._world_times(out, "output", x, "input", name)
        dtype = nccl_dtype(x.dtype, name)

        def call(s: int) -> None:
            self._lib.call("ncclAllGather", x.data_ptr, out.data_ptr, x.numel, dtype, self._comm, s)

        return self._launch(name, (out, x), call, async_op)

    def reduce_scatter_tensor(
        self, output: NvArray, input: NvArray, op: Any = ReduceOp.SUM, *, async_op: bool = False
    ) -> Work | None:
        """``output`` gets the reduction over the ranks of this rank's block of ``input``
        (``world_size * output.numel`` elements, block ``r`` for rank ``r``)."""
        name = "reduce_scatter_tensor"
        out, x = self._array(output, name, "output"), self._array(input, name, "input")
        self._same_dtype(out, x, name)
        self._world_times(x, "input", out, "output", name)
        red = self._op(op, name)
        dtype = nccl_dtype(x.dtype, name)

        def call(s: int) -> None:
            self._lib.call(
                "ncclReduceScatter", x.data_ptr, out.data_ptr, out.numel, dtype, red, self._comm, s
            )

        return self._launch(name, (out, x), call, async_op)

    def send(self, tensor: NvArray, dst: int, *, async_op: bool = False) -> Work | None:
        """Send ``tensor`` to rank ``dst`` (which calls :meth:`recv` with this rank as src)."""
        name = "send"
        x = self._array(tensor, name)
        peer = self._peer(dst, name, "dst")
        dtype = nccl_dtype(x.dtype, name)
        return self._launch(name, (x,), self._p2p("ncclSend", x, dtype, peer), async_op)

    def recv(self, tensor: NvArray, src: int, *, async_op: bool = False) -> Work | None:
        """Receive into ``tensor`` what rank ``src`` sends."""
        name = "recv"
        x = self._array(tensor, name)
        peer = self._peer(src, name, "src")
        dtype = nccl_dtype(x.dtype, name)
        return self._launch(name, (x,), self._p2p("ncclRecv", x, dtype, peer), async_op)

    def _p2p(self, fn: str, x: NvArray, dtype: int, peer: int) -> Any:
        def call(s: int) -> None:
            # One point-to-point call in its own group: NCCL then pairs it with the peer's.
            self._lib.call("ncclGroupStart")
            try:
                self._lib.call(fn, x.data_ptr, x.numel, dtype, peer, self._comm, s)
            finally:
                self._lib.call("ncclGroupEnd")

        return call

    def barrier(self) -> None:
        """Block the host until every rank has reached the barrier (at most :attr:`timeout`)."""
        name = "barrier"
        self._check(name)
        activate(self.device)
        flag = NvArray.zeros((1,), dtype="int32", device=f"cuda:{self.device.ordinal}")
        self.all_reduce(flag)
        stream = current_stream(self.device)
        event = Event(self.device, timing=False).record(stream)
        self._host_wait(event, name)

    # --- helpers -----------------------------------------------------------------------------

    def _op(self, op: Any, name: str) -> int:
        red = reduce_op(op, name)
        if red is ReduceOp.AVG and not self._lib.has_avg:
            raise DistributedError(
                f"{name}: ReduceOp.AVG needs NCCL >= 2.10, this is NCCL "
                f"{'.'.join(map(str, self._lib.version))}; use SUM and divide by the world size"
            )
        return red.value

    def _peer(self, r: Any, name: str, what: str) -> int:
        if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < self.world_size:
            raise ValueError(f"{name}: {what} must be a rank in [0, {self.world_size}), got {r!r}")
        return int(r)

    def _world_times(
        self, whole: NvArray, whole_name: str, part: NvArray, part_name: str, name: str
    ) -> None:
        """``whole`` must hold ``world_size`` blocks of ``part``'s size (gather / scatter)."""
        if whole.numel != part.numel * self.world_size:
            raise ShapeError(
                f"{name}: {whole_name} has {whole.numel} elements, expected world_size * "
                f"{part_name}.numel = {self.world_size} * {part.numel} = "
                f"{self.world_size * part.numel}"
            )

    @staticmethod
    def _same_dtype(a: NvArray, b: NvArray, name: str) -> None:
        if a.dtype != b.dtype:
            raise TypeError(
                f"{name}: output has dtype {a.dtype.name}, input {b.dtype.name}; they must match"
            )

    @property
    def outstanding(self) -> int:
        """Collectives queued and not yet seen finished by the watchdog."""
        return self._watchdog.outstanding

    def close(self) -> None:
        """Destroy the communicator (abort it when the group has failed) and close the store."""
        if self._closed:
            return
        self._closed = True
        self._watchdog.stop()
        if self._comm and not self._aborted:
            if self.error is None:
                activate(self.device)
                try:
                    current_stream(self.device).synchronize()
                except Exception:  # pragma: no cover - the destroy below still runs
                    pass
                self._lib.raw("ncclCommDestroy", self._comm)
            else:
                self._lib.raw("ncclCommAbort", self._comm)
        self._comm = 0
        if self._store is not None:
            self._store.close()

    def __repr__(self) -> str:
        state = "failed" if self.error else ("destroyed" if self._closed else "ready")
        return (
            f"<ignis.distributed.ProcessGroup nccl rank {self.rank}/{self.world_size} on "
            f"cuda:{self.device.ordinal}, {state}>"
        )


_default: ProcessGroup | None = None


def init_process_group(
    backend: str = "nccl",
    *,
    timeout: Any = DEFAULT_TIMEOUT,
    rank: int | None = None,
    world_size: int | None = None,
    device: Any = None,
    set_device: bool = True,
) -> ProcessGroup:
    """Form the default process group from the launcher's environment.

    Args:
        backend: ``"nccl"`` (the only one).
        timeout: seconds (or a ``datetime.timedelta``) for the rendezvous, the communicator's
            set-up and each collective (default 600, PyTorch's); see :mod:`._work`.
        rank, world_size: override ``RANK`` / ``WORLD_SIZE``.
        device: this rank's GPU (default ``cuda:LOCAL_RANK``).
        set_device: make that device the default of new arrays and the current device.

    Sets ``NCCL_NVLS_ENABLE=0`` in this process first (NVLink multicast off; a different value
    is replaced). Returns the group (also the default one, used when ``group`` is None).

    Example::

        # python -m ignis.distributed.run --nproc-per-node 2 train.py
        import ignis.distributed as dist
        dist.init_process_group()
        x = ignis.ones(4) * (dist.get_rank() + 1)
        dist.all_reduce(x)           # 3.0 everywhere with 2 ranks

    Raises:
        ValueError: for a bad environment or argument; NcclNotFoundError without NCCL;
        DistributedTimeoutError when the other ranks do not join in time.
    """
    global _default
    op = "init_process_group"
    if backend != "nccl":
        raise ValueError(f"{op}: backend must be 'nccl', got {backend!r}")
    if _default is not None:
        raise DistributedError(
            f"{op}: the default process group is already initialized; call "
            "destroy_process_group() first"
        )
    seconds = as_seconds(timeout, op)
    force_nccl_settings()
    env = read_env(op, rank=rank, world_size=world_size)
    lib = _nccl.require(op)
    if device is None:
        count = device_count()
        if env.local_rank >= count:
            raise ValueError(
                f"{op}: LOCAL_RANK is {env.local_rank} but this machine has {count} CUDA "
                "device(s); start at most that many processes per node"
            )
        dev = Device(env.local_rank)
    else:
        dev = device if isinstance(device, Device) else Device(device)
    activate(dev)
    store = None
    key = f"ignis/nccl_unique_id/{next(_generation)}"
    if env.world_size > 1:
        store = TCPStore(env.master_addr, env.master_port, is_master=env.rank == 0, timeout=seconds)
    try:
        if env.rank == 0:
            uid = lib.unique_id()
            if store is not None:
                store.set(key, uid)
        else:
            assert store is not None
            uid = store.get(key)
        group = ProcessGroup._create(
            lib, env.rank, env.world_size, env.local_rank, dev, uid, seconds, store
        )
    except BaseException:
        if store is not None:
            store.close()
        raise
    if set_device:
        set_default_device(f"cuda:{dev.ordinal}")
        dev.set_current()
    _default = group
    logger.info("ignis.distributed: %r (NCCL %s)", group, ".".join(map(str, lib.version)))
    return group


def get_default_group(op: str = "ignis.distributed") -> ProcessGroup:
    """The default process group; DistributedError when none is initialized."""
    if _default is None:
        raise DistributedError(
            f"{op}: the default process group is not initialized; call "
            "ignis.distributed.init_process_group() first"
        )
    return _default


def destroy_process_group(group: ProcessGroup | None = None) -> None:
    """Destroy ``group`` (default: the default group, which is then uninitialized)."""
    global _default
    target = group if group is not None else get_default_group("destroy_process_group")
    target.close()
    if target is _default:
        _default = None


def is_initialized() -> bool:
    """True between :func:`init_process_group` and :func:`destroy_process_group`."""
    return _default is not None


def get_rank(group: Any = None) -> int:
    """This process's rank in ``group`` (default: the default group)."""
    return (group or get_default_group("get_rank")).rank


def get_world_size(group: Any = None) -> int:
    """The number of ranks of ``group`` (default: the default group)."""
    return (group or get_default_group("get_world_size")).world_size
