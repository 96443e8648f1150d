"""Launch configuration: grid, block, dynamic shared memory, and its validation.

:class:`LaunchConfig` is pure Python so that every check runs without a GPU. A launch is checked
against the device's limits (and the kernel's own) before the driver sees it, so that a bad
configuration fails with a message that says what was asked and what is allowed instead of a bare
``CUDA_ERROR_INVALID_VALUE``::

    cfg = LaunchConfig(grid=grid_for(n, 256), block=256)
    raise_smem = cfg.validate(device_limits, name="saxpy")
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ._errors import LaunchError

__all__ = ["LaunchConfig", "grid_for", "DEFAULT_SHARED_MEMORY_PER_BLOCK", "Dim3"]

Dim3 = int | tuple[int] | tuple[int, int] | tuple[int, int, int]

# Without opting in (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) a block may use this much
# shared memory, static plus dynamic, on every architecture since Kepler.
DEFAULT_SHARED_MEMORY_PER_BLOCK = 48 * 1024

# Largest grid.x of every architecture since compute capability 3.0.
_MAX_GRID_X = 2**31 - 1

_AXES = ("x", "y", "z")


def _as_count(value: Any, what: str, op: str) -> int:
    """``value`` as a non-negative Python int; bools, floats and negatives are refused."""
    if isinstance(value, (bool, np.bool_)):
        raise LaunchError(f"{op}: {what} must be an int, got bool {value!r}")
    try:
        count = operator.index(value)
    except TypeError:
        hint = (
            "; pass int(x) (or a ceil division)" if isinstance(value, (float, np.floating)) else ""
        )
        raise LaunchError(
            f"{op}: {what} must be an int, got {type(value).__name__} {value!r}{hint}"
        ) from None
    if count < 0:
        raise LaunchError(f"{op}: {what} must be >= 0, got {count}")
    return count


def _as_dim3(value: Any, what: str, op: str) -> tuple[int, int, int]:
    if isinstance(value, (tuple, list)):
        if not 1 <= len(value) <= 3:
            raise LaunchError(
                f"{op}: {what} must be an int or a tuple of 1 to 3 ints, "
                f"got a {type(value).__name__} of length {len(value)}: {tuple(value)!r}"
            )
        dims = [_as_count(v, f"{what}.{axis}", op) for v, axis in zip(value, _AXES, strict=False)]
        dims += [1] * (3 - len(dims))
        return (dims[0], dims[1], dims[2])
    return (_as_count(value, what, op), 1, 1)


@dataclass(frozen=True)
class LaunchConfig:
    """The geometry of one kernel launch.

    Attributes:
        grid: blocks per grid, normalised to ``(x, y, z)``; an int ``n`` means ``(n, 1, 1)``.
        block: threads per block, normalised the same way.
        shared_mem: dynamic shared memory per block, in bytes.
        cooperative: launch with ``cuLaunchCooperativeKernel`` semantics (grid-wide sync); every
            block of the grid must then be resident at once.

    Construction checks types (ints only; NumPy integers are accepted, bools and floats are not)
    and signs. Limits are checked by :meth:`validate`, which needs the device's numbers.

    Example::

        >>> LaunchConfig(grid=(4, 2), block=128)
        LaunchConfig(grid=(4, 2, 1), block=(128, 1, 1), shared_mem=0, cooperative=False)
    """

    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_mem: int = 0
    cooperative: bool = False
    name: str | None = field(default=None, compare=False, repr=False)

    def __init__(
        self,
        grid: Dim3,
        block: Dim3,
        shared_mem: int = 0,
        cooperative: bool = False,
        *,
        name: str | None = None,
    ) -> None:
        op = "LaunchConfig" if name is None else f"launch of {name!r}"
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "grid", _as_dim3(grid, "grid", op))
        object.__setattr__(self, "block", _as_dim3(block, "block", op))
        object.__setattr__(self, "shared_mem", _as_count(shared_mem, "shared_mem", op))
        if not isinstance(cooperative, (bool, np.bool_)):
            raise LaunchError(
                f"{op}: cooperative must be a bool, got {type(cooperative).__name__} "
                f"{cooperative!r}"
            )
        object.__setattr__(self, "cooperative", bool(cooperative))

    @property
    def threads_per_block(self) -> int:
        """Threads in one block: ``block.x * block.y * block.z``."""
        bx, by, bz = self.block
        return bx * by * bz

    @property
    def num_blocks(self) -> int:
        """Blocks in the grid: ``grid.x * grid.y * grid.z``."""
        gx, gy, gz = self.grid
        return gx * gy * gz

    @property
    def is_empty(self) -> bool:
        """True when a grid or block dimension is 0: there is no work, skip the launch."""
        return 0 in self.grid or 0 in self.block

    def validate(
        self,
        limits: Mapping[str, Any] | Any,
        *,
        name: str | None = None,
        kernel_max_threads_per_block: int | None = None,
        kernel_static_shared_bytes: int | None = None,
        max_active_blocks_per_multiprocessor: int | None = None,
    ) -> bool:
        """Check this configuration against the device and kernel limits.

        Args:
            limits: the device's limits: a mapping (or an object with the same attributes) with
                ``max_threads_per_block``, ``max_block_dim`` (3 ints), ``max_grid_dim`` (3 ints)
                and optionally ``max_shared_memory_per_block`` (bytes without opt-in, default
                48 KiB), ``max_shared_memory_per_block_optin`` (bytes with opt-in, default: no
                opt-in), ``cooperative_launch`` (bool, default False), ``multiprocessor_count``.
                It may also carry the per-kernel entries below under the same names.
            name: the kernel's name, for messages (default: the one given at construction).
            kernel_max_threads_per_block: the kernel's own limit
                (``CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK``: registers and
                ``__launch_bounds__`` can make it lower than the device's).
            kernel_static_shared_bytes: the kernel's ``__shared__`` arrays, in bytes
                (``CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES``); they count against the same budget as
                :attr:`shared_mem`.
            max_active_blocks_per_multiprocessor: for cooperative launches, the occupancy of
                this kernel at this block size (``cuOccupancyMaxActiveBlocksPerMultiprocessor``);
                with ``multiprocessor_count`` it bounds the grid.

        Returns:
            True when the launch needs more shared memory than the default 48 KiB budget
            (static plus dynamic), so the caller must first raise the kernel's
            ``CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`` to :attr:`shared_mem`;
            False otherwise.

        Raises:
            LaunchError: naming the kernel, the value given and the limit, e.g.
                ``launch of 'saxpy': block (2048, 1, 1) has 2048 threads; this device allows at
                most 1024 per block``.

        Example::

            >>> limits = {"max_threads_per_block": 1024, "max_block_dim": (1024, 1024, 64),
            ...           "max_grid_dim": (2**31 - 1, 65535, 65535)}
            >>> LaunchConfig(4, 256).validate(limits, name="saxpy")
            False
        """
        label = name if name is not None else self.name if self.name is not None else "kernel"
        where = f"launch of {label!r}"
        if kernel_max_threads_per_block is None:
            kernel_max_threads_per_block = _limit(limits, "kernel_max_threads_per_block", None)
        if kernel_static_shared_bytes is None:
            kernel_static_shared_bytes = _limit(limits, "kernel_static_shared_bytes", 0)
        if max_active_blocks_per_multiprocessor is None:
            max_active_blocks_per_multiprocessor = _limit(
                limits, "max_active_blocks_per_multiprocessor", None
            )

        if 0 in self.grid:
            raise LaunchError(
                f"{where}: grid {self.grid} has a zero dimension, so there is no work to launch; "
                "skip the launch when the problem is empty (the driver rejects a zero-sized grid)"
            )
        if 0 in self.block:
            raise LaunchError(
                f"{where}: block {self.block} has a zero dimension; every block dimension must "
                "be at least 1"
            )

        threads = self.threads_per_block
        device_threads = int(_limit(limits, "max_threads_per_block"))
        if threads > device_threads:
            raise LaunchError(
                f"{where}: block {self.block} has {threads} threads; this device allows at most "
                f"{device_threads} per block"
            )
        max_block_dim = _dim3_limit(limits, "max_block_dim")
        for axis, got, most in zip(_AXES, self.block, max_block_dim, strict=True):
            if got > most:
                raise LaunchError(
                    f"{where}: block {self.block} has {got} threads along {axis}; this device "
                    f"allows at most {most} (max block dimensions {max_block_dim})"
                )
        if kernel_max_threads_per_block is not None and threads > kernel_max_threads_per_block:
            raise LaunchError(
                f"{where}: block {self.block} has {threads} threads; this kernel allows at most "
                f"{kernel_max_threads_per_block} per block (its register use or "
                "__launch_bounds__ limit it); use a smaller block"
            )

        max_grid_dim = _dim3_limit(limits, "max_grid_dim")
        for axis, got, most in zip(_AXES, self.grid, max_grid_dim, strict=True):
            if got > most:
                raise LaunchError(
                    f"{where}: grid {self.grid} has {got} blocks along {axis}; this device "
                    f"allows at most {most} (max grid dimensions {max_grid_dim})"
                )

        needs_optin = self._check_shared_memory(limits, where, int(kernel_static_shared_bytes))
        if self.cooperative:
            self._check_cooperative(limits, where, max_active_blocks_per_multiprocessor)
        return needs_optin

    def _check_shared_memory(self, limits: Any, where: str, static: int) -> bool:
        total = static + self.shared_mem
        default = int(
            _limit(limits, "max_shared_memory_per_block", DEFAULT_SHARED_MEMORY_PER_BLOCK)
        )
        if total <= default:
            return False
        optin = _limit(limits, "max_shared_memory_per_block_optin", None)
        optin = default if optin is None else int(optin)
        if total > optin:
            static_part = f" plus {static} bytes of static __shared__ memory" if static else ""
            raise LaunchError(
                f"{where}: shared_mem={self.shared_mem} bytes{static_part} makes {total} bytes "
                f"of shared memory per block; this device allows at most {optin} "
                f"({optin / 1024:g} KiB) per block"
                + ("" if optin == default else f" with opt-in ({default} without)")
            )
        return True

    def _check_cooperative(self, limits: Any, where: str, blocks_per_sm: int | None) -> None:
        if not _limit(limits, "cooperative_launch", False):
            raise LaunchError(
                f"{where}: cooperative launch requested; this device does not support it"
            )
        sm_count = _limit(limits, "multiprocessor_count", None)
        if blocks_per_sm is None or sm_count is None:
            return
        most = int(blocks_per_sm) * int(sm_count)
        if self.num_blocks > most:
            raise LaunchError(
                f"{where}: cooperative grid {self.grid} has {self.num_blocks} blocks; at most "
                f"{most} can be resident at once ({blocks_per_sm} per multiprocessor x "
                f"{sm_count} multiprocessors), which a cooperative launch requires"
            )


_MISSING = object()


def _limit(limits: Any, key: str, default: Any = _MISSING) -> Any:
    if isinstance(limits, Mapping):
        value = limits.get(key, default)
    else:
        value = getattr(limits, key, default)
    if value is _MISSING:
        raise LaunchError(f"LaunchConfig.validate: the device limits lack {key!r}")
    return value


def _dim3_limit(limits: Any, key: str) -> tuple[int, int, int]:
    value = tuple(int(v) for v in _limit(limits, key))
    if len(value) != 3:
        raise LaunchError(f"LaunchConfig.validate: limit {key!r} must have 3 entries, got {value}")
    return (value[0], value[1], value[2])


def grid_for(
    n: int,
    block: int = 256,
    *,
    multiprocessor_count: int | None = None,
    blocks_per_multiprocessor: int = 32,
) -> int:
    """Blocks needed to cover ``n`` items with ``block`` threads each: ``ceil(n / block)``.

    With ``multiprocessor_count`` the result is capped at
    ``multiprocessor_count * blocks_per_multiprocessor``: enough blocks to fill the device several
    times over, for grid-stride kernels (``for (i = tid; i < n; i += gridDim.x * blockDim.x)``),
    which cover any ``n`` with any grid. Without it, the cap is the largest legal ``grid.x``,
    which a plain one-thread-per-item kernel must not exceed anyway.

    Returns 0 for ``n == 0``: there is no work, and the caller should skip the launch.

    Example::

        >>> grid_for(1000, 256)
        4
        >>> grid_for(10**9, 256, multiprocessor_count=132)
        4224
    """
    count = _as_count(n, "n", "grid_for")
    threads = _as_count(block, "block", "grid_for")
    if threads == 0:
        raise LaunchError("grid_for: block must be at least 1 thread, got 0")
    blocks = -(-count // threads)
    cap = _MAX_GRID_X
    if multiprocessor_count is not None:
        sms = _as_count(multiprocessor_count, "multiprocessor_count", "grid_for")
        per_sm = _as_count(blocks_per_multiprocessor, "blocks_per_multiprocessor", "grid_for")
        cap = max(1, min(cap, sms * per_sm))
    return min(blocks, cap)
