"""Data-parallel training over :mod:`ignis.distributed`.

:class:`DistributedDataParallel` averages gradients over the ranks in buckets, overlapped with
backward; :class:`~ignis_autograd.optim.ZeroRedundancyOptimizer` shards optimizer state.

Example::

    >>> from ignis_autograd.parallel import DistributedDataParallel
    >>> model = DistributedDataParallel(model, bucket_cap_mb=25)
"""

from __future__ import annotations

from ._buckets import Bucket, assign_buckets
from ._ddp import DistributedDataParallel

__all__ = ["DistributedDataParallel", "Bucket", "assign_buckets"]
