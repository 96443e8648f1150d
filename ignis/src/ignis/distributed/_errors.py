"""The errors of :mod:`ignis.distributed`.

:class:`DistributedError` is the base; :class:`DistributedTimeoutError` is raised when a peer
does not answer in time (the TCP store, communicator set-up, a collective that the watchdog
aborted); :class:`NcclError` carries a failed ``ncclResult_t``; :class:`NcclNotFoundError` says
which extra installs NCCL.
"""

from __future__ import annotations

from .._errors import CudaError, IgnisError

__all__ = ["DistributedError", "DistributedTimeoutError", "NcclError", "NcclNotFoundError"]


class DistributedError(IgnisError, RuntimeError):
    """A collective, the process group or the store failed; the message names the op, the rank
    and (for a timeout) the time allowed."""


class DistributedTimeoutError(DistributedError, TimeoutError):
    """A peer did not take part in time: a store key that never came, a communicator that never
    formed, or a collective the watchdog aborted after the process group's timeout."""


class NcclError(DistributedError, CudaError):
    """An NCCL function returned a failure status.

    Attributes (as for :class:`~ignis.CudaError`): ``code`` (``"ncclInvalidArgument"``),
    ``description``, ``call`` (the NCCL function) and ``value`` (the numeric status).
    """


class NcclNotFoundError(DistributedError):
    """NCCL could not be loaded; the message names the extra that installs it."""
