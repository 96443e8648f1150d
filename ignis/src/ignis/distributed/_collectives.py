"""The collectives as functions of the default process group (PyTorch's ``torch.distributed``
names and argument order).

Each takes ``group=`` (a :class:`ProcessGroup`, or any :class:`Communicator`; default: the
default group) and ``async_op=`` (return a :class:`Work` instead of None). Arrays must be
contiguous CUDA NvArrays on the group's device, of a dtype in ``NCCL_DTYPES``.

``all_gather`` and ``reduce_scatter`` take either form: a list of ``world_size`` arrays
(``torch.distributed.all_gather`` / ``reduce_scatter``) or one array of ``world_size`` blocks
(``all_gather_into_tensor`` / ``reduce_scatter_tensor``, the forms without extra copies).
"""

from __future__ import annotations

from typing import Any

from .._array import NvArray
from .._errors import ShapeError
from ._process_group import get_default_group
from ._types import ReduceOp
from ._work import Work

__all__ = [
    "all_gather",
    "all_gather_into_tensor",
    "all_reduce",
    "barrier",
    "broadcast",
    "irecv",
    "isend",
    "recv",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "send",
]


def _group(group: Any, op: str) -> Any:
    return group if group is not None else get_default_group(op)


def all_reduce(
    tensor: NvArray, op: ReduceOp = ReduceOp.SUM, group: Any = None, async_op: bool = False
) -> Work | None:
    """Reduce ``tensor`` over every rank, in place: afterwards each rank holds the sum (or
    product, max, min, average) of all ranks' values.

    Example: with 2 ranks holding ``[1, 2]`` and ``[3, 4]``, ``all_reduce(x)`` leaves
    ``[4, 6]`` on both and ``all_reduce(x, ReduceOp.AVG)`` ``[2, 3]``.
    """
    return _group(group, "all_reduce").all_reduce(tensor, op, async_op=async_op)


def broadcast(
    tensor: NvArray, src: int = 0, group: Any = None, async_op: bool = False
) -> Work | None:
    """Copy rank ``src``'s ``tensor`` into ``tensor`` on every rank."""
    return _group(group, "broadcast").broadcast(tensor, src, async_op=async_op)


def all_gather_into_tensor(
    output: NvArray, input: NvArray, group: Any = None, async_op: bool = False
) -> Work | None:
    """``output`` (``world_size * input.numel`` elements, any shape) gets every rank's
    ``input``, rank 0's first. In place when ``input`` is this rank's block of ``output``."""
    return _group(group, "all_gather_into_tensor").all_gather_into_tensor(
        output, input, async_op=async_op
    )


def all_gather(
    output: list[NvArray] | NvArray, input: NvArray, group: Any = None, async_op: bool = False
) -> Work | None:
    """Every rank's ``input`` into ``output``: a list of ``world_size`` arrays of ``input``'s
    shape (``output[r]`` is rank r's), or one array as :func:`all_gather_into_tensor`.

    The list form gathers into one temporary array and copies each block out (on the stream,
    after the gather).
    """
    g = _group(group, "all_gather")
    if isinstance(output, NvArray):
        return g.all_gather_into_tensor(output, input, async_op=async_op)
    outs = _check_list(output, input, g.world_size, "all_gather", "output")
    flat = NvArray.empty((g.world_size * input.numel,), dtype=input.dtype, device=input.device)
    work = g.all_gather_into_tensor(
        flat, input.reshape(-1) if input.is_contiguous else input, async_op=async_op
    )
    if work is not None:
        work.wait()  # the copies below run on the current stream, after the gather
    n = input.numel
    for r, out in enumerate(outs):
        out.copy_(flat[r * n : (r + 1) * n].reshape(input.shape))
    return Work.completed("all_gather") if async_op else None


def reduce_scatter_tensor(
    output: NvArray,
    input: NvArray,
    op: ReduceOp = ReduceOp.SUM,
    group: Any = None,
    async_op: bool = False,
) -> Work | None:
    """``output`` gets the reduction over the ranks of block ``rank`` of ``input``
    (``world_size * output.numel`` elements)."""
    return _group(group, "reduce_scatter_tensor").reduce_scatter_tensor(
        output, input, op, async_op=async_op
    )


def reduce_scatter(
    output: NvArray,
    input: list[NvArray] | NvArray,
    op: ReduceOp = ReduceOp.SUM,
    group: Any = None,
    async_op: bool = False,
) -> Work | None:
    """``output`` gets the reduction over the ranks of ``input[rank]`` (a list of
    ``world_size`` arrays of ``output``'s shape), or of block ``rank`` of one array as
    :func:`reduce_scatter_tensor`."""
    g = _group(group, "reduce_scatter")
    if isinstance(input, NvArray):
        return g.reduce_scatter_tensor(output, input, op, async_op=async_op)
    ins = _check_list(input, output, g.world_size, "reduce_scatter", "input")
    from .. import concatenate

    flat = concatenate([x.reshape(-1) for x in ins])
    return g.reduce_scatter_tensor(output, flat, op, async_op=async_op)


def send(tensor: NvArray, dst: int, group: Any = None) -> None:
    """Send ``tensor`` to rank ``dst`` (queued on the current stream)."""
    _group(group, "send").send(tensor, dst)


def recv(tensor: NvArray, src: int, group: Any = None) -> None:
    """Receive into ``tensor`` what rank ``src`` sends (queued on the current stream)."""
    _group(group, "recv").recv(tensor, src)


def isend(tensor: NvArray, dst: int, group: Any = None) -> Work:
    """:func:`send` on the group's side stream; returns its :class:`Work`."""
    return _group(group, "isend").send(tensor, dst, async_op=True)


def irecv(tensor: NvArray, src: int, group: Any = None) -> Work:
    """:func:`recv` on the group's side stream; returns its :class:`Work`."""
    return _group(group, "irecv").recv(tensor, src, async_op=True)


def barrier(group: Any = None) -> None:
    """Block until every rank has called ``barrier`` (at most the group's timeout)."""
    _group(group, "barrier").barrier()


def _check_list(arrays: Any, like: NvArray, world: int, op: str, what: str) -> list[NvArray]:
    if not isinstance(arrays, (list, tuple)):
        raise TypeError(
            f"{op}: {what} must be a list of {world} NvArrays or one NvArray, got "
            f"{type(arrays).__name__}"
        )
    if len(arrays) != world:
        raise ValueError(f"{op}: {what} has {len(arrays)} arrays, expected world_size = {world}")
    for i, a in enumerate(arrays):
        if not isinstance(a, NvArray):
            raise TypeError(f"{op}: {what}[{i}] must be an NvArray, got {type(a).__name__}")
        if a.shape != like.shape or a.dtype != like.dtype:
            raise ShapeError(
                f"{op}: {what}[{i}] has shape {a.shape} and dtype {a.dtype.name}, expected "
                f"{like.shape} and {like.dtype.name}"
            )
    return list(arrays)
