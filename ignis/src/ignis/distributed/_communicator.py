"""What data-parallel training needs of a communicator, and an in-process stand-in.

:class:`Communicator` is the protocol that :class:`ignis_autograd.parallel.DistributedDataParallel`
and :class:`ignis_autograd.optim.ZeroRedundancyOptimizer` use: the NCCL :class:`ProcessGroup`
implements it, and so does :class:`ThreadedWorld`'s communicator, which runs N ranks as threads
of one process on any arrays (CPU ones included) by exchanging host copies. It is exact
rather than fast: a reduction is computed in float64 (int64 for integers) and rounded once, in
rank order. It exists to test distributed code without GPUs.

Example::

    >>> world = ThreadedWorld(2)
    >>> def body(comm):
    ...     x = ignis.NvArray.full((2,), comm.rank + 1.0, device="cpu")
    ...     comm.all_reduce(x)
    ...     return x.to_host()
    >>> world.run(body)
    [array([3., 3.], dtype=float32), array([3., 3.], dtype=float32)]
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import numpy as np

from .._array import NvArray
from .._errors import ShapeError
from ._errors import DistributedError, DistributedTimeoutError
from ._types import ReduceOp, reduce_op
from ._work import Work

__all__ = ["Communicator", "ThreadedCommunicator", "ThreadedWorld"]


@runtime_checkable
class Communicator(Protocol):
    """The collectives data-parallel training uses (all in place on NvArrays; ``async_op``
    returns a :class:`Work` whose ``wait()`` orders the caller's current stream after it)."""

    rank: int
    world_size: int

    def all_reduce(
        self, tensor: NvArray, op: Any = ReduceOp.SUM, *, async_op: bool = False
    ) -> Work | None: ...

    def broadcast(
        self, tensor: NvArray, src: int = 0, *, async_op: bool = False
    ) -> Work | None: ...

    def all_gather_into_tensor(
        self, output: NvArray, input: NvArray, *, async_op: bool = False
    ) -> Work | None: ...

    def reduce_scatter_tensor(
        self, output: NvArray, input: NvArray, op: Any = ReduceOp.SUM, *, async_op: bool = False
    ) -> Work | None: ...

    def barrier(self) -> None: ...


def _reduce(values: list[np.ndarray], op: ReduceOp, dtype: np.dtype) -> np.ndarray:
    wide = np.float64 if dtype.kind in "fV" or str(dtype) == "bfloat16" else np.int64
    if dtype.kind == "u":
        wide = np.uint64
    stack = np.stack([np.asarray(v, dtype=wide) for v in values])
    if op is ReduceOp.SUM:
        out = stack.sum(axis=0)
    elif op is ReduceOp.PRODUCT:
        out = stack.prod(axis=0)
    elif op is ReduceOp.MAX:
        out = stack.max(axis=0)
    elif op is ReduceOp.MIN:
        out = stack.min(axis=0)
    else:  # AVG
        out = stack.sum(axis=0) / len(values)
        if wide is not np.float64:
            out = np.trunc(out)
    return out.astype(dtype)


class ThreadedWorld:
    """``world_size`` ranks in one process, one thread each (see the module notes).

    Args:
        world_size: the number of ranks (>= 1).
        timeout: seconds a rank waits for the others at each collective before
            :class:`DistributedTimeoutError`.
    """

    def __init__(self, world_size: int, timeout: float = 60.0):
        if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
            raise ValueError(f"ThreadedWorld: world_size must be an int >= 1, got {world_size!r}")
        self.world_size = world_size
        self.timeout = float(timeout)
        self._barrier = threading.Barrier(world_size)
        self._slots: list[Any] = [None] * world_size
        self.calls: list[str] = []  # the collectives rank 0 issued, in order (for tests)

    def communicator(self, rank: int) -> ThreadedCommunicator:
        """The communicator of ``rank``."""
        if not 0 <= rank < self.world_size:
            raise ValueError(f"ThreadedWorld: rank must be in [0, {self.world_size}), got {rank}")
        return ThreadedCommunicator(self, rank)

    def run(self, fn: Callable[..., Any], *args: Any) -> list[Any]:
        """Call ``fn(communicator, *args)`` on every rank at once, each in its own thread;
        returns their results in rank order. The first exception of a rank is re-raised
        (the other ranks are released from their collectives)."""
        results: list[Any] = [None] * self.world_size
        errors: list[BaseException] = []  # in the order they happened

        def body(rank: int) -> None:
            try:
                results[rank] = fn(self.communicator(rank), *args)
            except BaseException as exc:
                errors.append(exc)
                self._barrier.abort()

        threads = [
            threading.Thread(target=body, args=(r,), name=f"rank-{r}")
            for r in range(self.world_size)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self._barrier.reset()
        if errors:
            raise errors[0]  # the cause; the others were released by it
        return results

    def _exchange(self, rank: int, value: Any, op: str) -> list[Any]:
        """Every rank's ``value``, in rank order (a collective: all ranks must call it)."""
        try:
            self._barrier.wait(self.timeout)
            self._slots[rank] = value
            self._barrier.wait(self.timeout)
            values = list(self._slots)
            self._barrier.wait(self.timeout)
        except threading.BrokenBarrierError:
            raise DistributedTimeoutError(
                f"{op}: rank {rank} of the ThreadedWorld: the other ranks did not join within "
                f"{self.timeout:g} s (or one of them failed)"
            ) from None
        if rank == 0:
            self.calls.append(op)
        return values


class ThreadedCommunicator:
    """One rank of a :class:`ThreadedWorld`; implements :class:`Communicator`.

    Every collective is synchronous on the host; ``async_op=True`` returns a completed
    :class:`Work`.
    """

    def __init__(self, world: ThreadedWorld, rank: int):
        self.world = world
        self.rank = rank
        self.world_size = world.world_size

    def __repr__(self) -> str:
        return f"<ThreadedCommunicator rank {self.rank}/{self.world_size}>"

    def _done(self, op: str, async_op: bool) -> Work | None:
        return Work.completed(op) if async_op else None

    @staticmethod
    def _array(x: Any, op: str, what: str = "tensor") -> NvArray:
        if not isinstance(x, NvArray):
            raise TypeError(f"{op}: {what} must be an NvArray, got {type(x).__name__}")
        return x

    def all_reduce(
        self, tensor: NvArray, op: Any = ReduceOp.SUM, *, async_op: bool = False
    ) -> Work | None:
        x = self._array(tensor, "all_reduce")
        red = reduce_op(op, "all_reduce")
        host = x.to_host()
        values = self.world._exchange(self.rank, host, "all_reduce")
        x.copy_(_reduce(values, red, host.dtype))
        return self._done("all_reduce", async_op)

    def broadcast(self, tensor: NvArray, src: int = 0, *, async_op: bool = False) -> Work | None:
        x = self._array(tensor, "broadcast")
        if not 0 <= src < self.world_size:
            raise ValueError(f"broadcast: src must be a rank in [0, {self.world_size}), got {src}")
        values = self.world._exchange(self.rank, x.to_host(), "broadcast")
        x.copy_(values[src])
        return self._done("broadcast", async_op)

    def all_gather_into_tensor(
        self, output: NvArray, input: NvArray, *, async_op: bool = False
    ) -> Work | None:
        out = self._array(output, "all_gather_into_tensor", "output")
        x = self._array(input, "all_gather_into_tensor", "input")
        if out.numel != x.numel * self.world_size:
            raise ShapeError(
                f"all_gather_into_tensor: output has {out.numel} elements, expected "
                f"world_size * input.numel = {self.world_size * x.numel}"
            )
        values = self.world._exchange(self.rank, x.to_host().reshape(-1), "all_gather_into_tensor")
        out.copy_(np.concatenate(values).reshape(out.shape))
        return self._done("all_gather_into_tensor", async_op)

    def reduce_scatter_tensor(
        self, output: NvArray, input: NvArray, op: Any = ReduceOp.SUM, *, async_op: bool = False
    ) -> Work | None:
        out = self._array(output, "reduce_scatter_tensor", "output")
        x = self._array(input, "reduce_scatter_tensor", "input")
        red = reduce_op(op, "reduce_scatter_tensor")
        if x.numel != out.numel * self.world_size:
            raise ShapeError(
                f"reduce_scatter_tensor: input has {x.numel} elements, expected "
                f"world_size * output.numel = {self.world_size * out.numel}"
            )
        host = x.to_host().reshape(-1)
        values = self.world._exchange(self.rank, host, "reduce_scatter_tensor")
        n = out.numel
        mine = [v[self.rank * n : (self.rank + 1) * n] for v in values]
        out.copy_(_reduce(mine, red, host.dtype).reshape(out.shape))
        return self._done("reduce_scatter_tensor", async_op)

    def barrier(self) -> None:
        self.world._exchange(self.rank, None, "barrier")

    def send(self, tensor: NvArray, dst: int, *, async_op: bool = False) -> Work | None:
        raise DistributedError("send: the ThreadedWorld stand-in has no point-to-point calls")

    def recv(self, tensor: NvArray, src: int, *, async_op: bool = False) -> Work | None:
        raise DistributedError("recv: the ThreadedWorld stand-in has no point-to-point calls")
