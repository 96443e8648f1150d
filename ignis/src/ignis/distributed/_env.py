"""Environment variables of a distributed run (torchrun's conventions) and the NCCL settings
ignis forces.

A launcher (``python -m ignis.distributed.run`` or ``torchrun``) gives each process ``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT``.

NVLink multicast (NVLink SHARP, "NVLS") is switched off: :func:`force_nccl_settings` sets
``NCCL_NVLS_ENABLE=0`` in this process's environment before NCCL is loaded or initialized,
overriding any other value (a value already there is not trusted: NVLS allocates multicast
objects through ``cuMulticastCreate``, which some hosts do not support safely), and the
launcher puts it into every child's environment.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

__all__ = ["DistEnv", "FORCED_NCCL_ENV", "force_nccl_settings", "read_env"]

logger = logging.getLogger("ignis")

#: Set in every process that uses NCCL through ignis, replacing what was there.
FORCED_NCCL_ENV: dict[str, str] = {"NCCL_NVLS_ENABLE": "0"}


def force_nccl_settings(environ: dict[str, str] | None = None) -> None:
    """Write :data:`FORCED_NCCL_ENV` into ``environ`` (default: ``os.environ``, which also
    updates the C environment NCCL reads). A different value already set is replaced, with a
    warning in the log."""
    env = os.environ if environ is None else environ
    for key, value in FORCED_NCCL_ENV.items():
        old = env.get(key)
        if old is not None and old != value:
            logger.warning("ignis.distributed: %s=%s replaced by %s=%s", key, old, key, value)
        env[key] = value


@dataclass(frozen=True)
class DistEnv:
    """The launcher's view of this process: rank, world size, local rank, rendezvous address."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    master_addr: str
    master_port: int


def _int_var(env: dict[str, str] | os._Environ, name: str, default: int | None, op: str) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        if default is None:
            raise ValueError(
                f"{op}: the environment variable {name} is not set; start the processes with "
                "python -m ignis.distributed.run --nproc-per-node N (or torchrun), or pass "
                "rank= and world_size="
            )
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{op}: {name} must be an integer, got {raw!r}") from None


def read_env(
    op: str = "init_process_group",
    environ: dict[str, str] | None = None,
    rank: int | None = None,
    world_size: int | None = None,
) -> DistEnv:
    """The :class:`DistEnv` of this process from the environment (explicit ``rank`` /
    ``world_size`` win over ``RANK`` / ``WORLD_SIZE``).

    Raises:
        ValueError: for a missing or malformed variable, or ranks out of range.
    """
    env = os.environ if environ is None else environ
    r = _int_var(env, "RANK", None, op) if rank is None else int(rank)
    w = _int_var(env, "WORLD_SIZE", None, op) if world_size is None else int(world_size)
    if w < 1:
        raise ValueError(f"{op}: WORLD_SIZE must be >= 1, got {w}")
    if not 0 <= r < w:
        raise ValueError(f"{op}: RANK must be in [0, {w}), got {r}")
    local = _int_var(env, "LOCAL_RANK", r, op)
    local_world = _int_var(env, "LOCAL_WORLD_SIZE", w, op)
    if local < 0:
        raise ValueError(f"{op}: LOCAL_RANK must be >= 0, got {local}")
    addr = env.get("MASTER_ADDR") or "127.0.0.1"
    if w > 1 and not env.get("MASTER_PORT"):
        raise ValueError(
            f"{op}: the environment variable MASTER_PORT is not set (WORLD_SIZE is {w}); the "
            "launcher sets it"
        )
    port = _int_var(env, "MASTER_PORT", 0, op)
    if not 0 <= port < 65536:
        raise ValueError(f"{op}: MASTER_PORT must be in [0, 65535], got {port}")
    return DistEnv(r, w, local, local_world, addr, port)
