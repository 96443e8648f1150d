"""Multi-GPU data parallelism over NCCL: process groups, collectives, a launcher.

Start one process per GPU with the launcher (or ``torchrun``; both set ``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``)::

    python -m ignis.distributed.run --nproc-per-node 2 train.py --steps 100

and in ``train.py``::

    import ignis, ignis.distributed as dist
    dist.init_process_group()              # cuda:LOCAL_RANK becomes the default device
    x = ignis.ones(1024) * (dist.get_rank() + 1)
    dist.all_reduce(x, op=dist.ReduceOp.AVG)
    dist.destroy_process_group()

NCCL comes from NVIDIA's wheels (``pip install "ignis-cuda[nccl-cu12]"`` or ``[nccl-cu13]``) or
PyTorch's; it is loaded on first use. ``NCCL_NVLS_ENABLE=0`` (NVLink multicast off) is forced
in every process before NCCL reads its environment. A collective that does not finish within
the group's ``timeout`` (default 600 s) aborts the communicator, and every later call raises
:class:`DistributedTimeoutError`.

:class:`ThreadedWorld` runs N ranks as threads of one process on any arrays, to test
distributed code without GPUs (see :class:`Communicator`).
"""

from __future__ import annotations

from ._collectives import (
    all_gather,
    all_gather_into_tensor,
    all_reduce,
    barrier,
    broadcast,
    irecv,
    isend,
    recv,
    reduce_scatter,
    reduce_scatter_tensor,
    send,
)
from ._communicator import Communicator, ThreadedCommunicator, ThreadedWorld
from ._env import FORCED_NCCL_ENV, DistEnv, read_env
from ._errors import DistributedError, DistributedTimeoutError, NcclError, NcclNotFoundError
from ._process_group import (
    DEFAULT_TIMEOUT,
    ProcessGroup,
    destroy_process_group,
    get_default_group,
    get_rank,
    get_world_size,
    init_process_group,
    is_initialized,
)
from ._store import TCPStore
from ._types import NCCL_DTYPES, ReduceOp, nccl_dtype
from ._work import Work

__all__ = [
    "init_process_group",
    "destroy_process_group",
    "is_initialized",
    "get_rank",
    "get_world_size",
    "get_default_group",
    "ProcessGroup",
    "DEFAULT_TIMEOUT",
    "ReduceOp",
    "NCCL_DTYPES",
    "nccl_dtype",
    "all_reduce",
    "broadcast",
    "all_gather",
    "all_gather_into_tensor",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "send",
    "recv",
    "isend",
    "irecv",
    "barrier",
    "Work",
    "TCPStore",
    "Communicator",
    "ThreadedWorld",
    "ThreadedCommunicator",
    "DistEnv",
    "read_env",
    "FORCED_NCCL_ENV",
    "DistributedError",
    "DistributedTimeoutError",
    "NcclError",
    "NcclNotFoundError",
]
