"""The demo on several GPUs: one process per GPU, started by the launcher.

    python -m ignis.distributed.run --nproc-per-node 2 -m ignis_autograd.demo --steps 2000

When ``WORLD_SIZE`` > 1 each process forms the NCCL process group, trains on ``cuda:LOCAL_RANK``
and wraps its model in :class:`~ignis_autograd.parallel.DistributedDataParallel`. The global
batch of step ``s`` is ``WORLD_SIZE`` batches of ``--batch-size``: rank ``r`` draws batch
``s * WORLD_SIZE + r`` of the batch stream (each from its own offset of ``Generator(seed + 1)``,
so a resumed run draws the same ones). Every rank evaluates (the replicas are equal); rank 0
alone prints, writes the checkpoint, the metrics, the sample and the plot. ``--resume`` reads
the checkpoint on every rank. With one process nothing here is used: the single-GPU run is
unchanged.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

__all__ = ["DistRun", "BATCH_STRIDE", "from_environment"]

#: Philox blocks between two batches' draws in the strided stream (far more than one batch uses).
BATCH_STRIDE = 2**24


@dataclass
class DistRun:
    """This process's place in a multi-GPU demo run."""

    rank: int
    world_size: int
    local_rank: int

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def device(self) -> str:
        return f"cuda:{self.local_rank}"

    def wrap(self, model: Any) -> Any:
        """The model wrapped in DistributedDataParallel (parameters broadcast from rank 0)."""
        from ..parallel import DistributedDataParallel

        return DistributedDataParallel(model)

    def position_batches(self, generator: Any, seed: int, step: int) -> None:
        """Point the batch stream at this rank's batch of global step ``step`` (0-based)."""
        generator.set_state((seed + 1, (step * self.world_size + self.rank) * BATCH_STRIDE))

    def close(self) -> None:
        import ignis.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


def from_environment() -> DistRun | None:
    """Form the process group when the launcher started several processes; else None."""
    if int(os.environ.get("WORLD_SIZE", "1") or "1") <= 1:
        return None
    import ignis.distributed as dist

    group = dist.init_process_group()
    return DistRun(group.rank, group.world_size, group.local_rank)
