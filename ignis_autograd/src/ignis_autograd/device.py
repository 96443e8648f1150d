"""Device: GPU capability detection and memory-aware training configuration.

Queries every CUDA device once (name, compute capability, memory, SMs, ...) through
:class:`ignis.Device` and caches the answers; on a machine without a GPU or driver it reports no
devices instead of failing. :meth:`Device.recommend_config` turns a parameter count and the
device's memory into a batch size / sequence length suggestion.

Example::

    >>> from ignis_autograd import Device
    >>> Device.count()
    1
    >>> print(Device.summary())
    GPU devices (1):
      [0] NVIDIA H200 | 139.8 GB | CC 9.0 | 132 SMs
    >>> Device.recommend_config(124_000_000)["batch_size"]
    ...
"""

from __future__ import annotations

import logging
import math
import threading
from dataclasses import dataclass
from typing import Any

import ignis
from ignis import NoDeviceError

__all__ = ["Device", "DeviceProperties", "estimate_architecture"]

_log = logging.getLogger("ignis")
_GIB = 1024.0**3


@dataclass(frozen=True)
class DeviceProperties:
    """What :class:`Device` knows about one GPU. Memory in bytes (``_mb``/``_gb``: MiB/GiB),
    clocks in MHz, ``compute_capability`` as ``"9.0"``."""

    id: int
    name: str
    compute_capability: str
    total_memory_bytes: int
    total_memory_mb: int
    total_memory_gb: float
    sm_count: int
    max_threads_per_block: int
    max_threads_per_sm: int
    warp_size: int
    clock_rate_mhz: int
    memory_clock_mhz: int
    l2_cache_size: int
    shared_mem_per_block: int


def _query(device_id: int) -> DeviceProperties:
    props = ignis.Device(device_id).properties
    major, minor = props["compute_capability"]
    total = int(props["total_memory"])
    return DeviceProperties(
        id=device_id,
        name=str(props.get("name", f"CUDA device {device_id}")),
        compute_capability=f"{major}.{minor}",
        total_memory_bytes=total,
        total_memory_mb=total // (1024 * 1024),
        total_memory_gb=round(total / _GIB, 2),
        sm_count=int(props.get("multiprocessor_count", 0)),
        max_threads_per_block=int(props.get("max_threads_per_block", 1024)),
        max_threads_per_sm=int(props.get("max_threads_per_multiprocessor", 2048)),
        warp_size=int(props.get("warp_size", 32)),
        clock_rate_mhz=int(props.get("clock_rate_khz", 0)) // 1000,
        memory_clock_mhz=int(props.get("memory_clock_rate_khz", 0)) // 1000,
        l2_cache_size=int(props.get("l2_cache_size", 0)),
        shared_mem_per_block=int(props.get("max_shared_memory_per_block", 49152)),
    )


# Transformer shape heuristics (see estimate_architecture).
_ASPECT = 100  # hidden size / layers of GPT-3 and LLaMA-family models (about 64..128)
_PARAMS_PER_LAYER = 12  # attention 4 h^2 + MLP 8 h^2 per layer


def estimate_architecture(
    model_params: int, hidden_size: int | None = None, num_layers: int | None = None
) -> tuple[int, int]:
    """``(hidden_size, num_layers)`` of a transformer of ``model_params`` parameters.

    Uses ``params ~= 12 * layers * hidden^2``: with both hints it returns them; with one it
    solves for the other; with none it assumes ``hidden ~= 100 * layers`` (GPT-3 and LLaMA sizes
    lie between 64x and 128x), e.g. 7e9 -> (3867, 39) against LLaMA-7B's (4096, 32).
    (The original estimate always gave one layer.)
    """
    p = max(int(model_params), 1)
    if hidden_size and num_layers:
        return int(hidden_size), int(num_layers)
    if hidden_size:
        return int(hidden_size), max(1, round(p / (_PARAMS_PER_LAYER * hidden_size**2)))
    if num_layers:
        return max(1, round(math.sqrt(p / (_PARAMS_PER_LAYER * num_layers)))), int(num_layers)
    layers = max(1, round((p / (_PARAMS_PER_LAYER * _ASPECT**2)) ** (1 / 3)))
    hidden = max(1, round(math.sqrt(p / (_PARAMS_PER_LAYER * layers))))
    return hidden, layers


def _activation_bytes_per_token(
    hidden: int, layers: int, act_bytes: int, seq_len: int, flash: bool, checkpointing: bool
) -> int:
    # Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer
    # Models"): one layer keeps about s*b*h*(34 + 5*a*s/h) bytes of 16-bit activations; the
    # 5*a*s/h term is the attention matrix, which FlashAttention never stores. Scaled from
    # 2-byte to ``act_bytes`` activations.
    heads = max(1, hidden // 64)
    per_layer = 34 * hidden + (0 if flash else 5 * heads * seq_len)
    per_layer = per_layer * act_bytes // 2
    if checkpointing:
        # Only each layer's input is kept; one layer at a time is recomputed in full.
        return layers * hidden * act_bytes + per_layer
    return layers * per_layer


class Device:
    """GPU capability detection; used through its class methods (the answers are cached)."""

    _lock = threading.Lock()
    _devices: list[DeviceProperties] | None = None

    def __init__(self) -> None:
        raise TypeError("Device is used through its class methods (Device.all_devices(), ...)")

    @classmethod
    def all_devices(cls) -> list[DeviceProperties]:
        """Every CUDA device's properties (an empty list without a GPU or driver)."""
        with cls._lock:
            if cls._devices is None:
                cls._devices = cls._enumerate()
            return list(cls._devices)

    @staticmethod
    def _enumerate() -> list[DeviceProperties]:
        try:
            n = ignis.device_count()
        except ignis.IgnisError as exc:
            _log.warning("Device: cannot count CUDA devices: %s", exc)
            return []
        found = []
        for i in range(n):
            try:
                found.append(_query(i))
            except ignis.IgnisError as exc:
                _log.warning("Device: failed to query GPU %d: %s", i, exc)
        return found

    @classmethod
    def properties(cls, device_id: int = 0) -> DeviceProperties:
        """Properties of GPU ``device_id``. Raises NoDeviceError when there is no such GPU."""
        for d in cls.all_devices():
            if d.id == device_id:
                return d
        n = cls.count()
        raise NoDeviceError(
            f"Device.properties: no GPU {device_id}; this machine has {n} usable CUDA device(s)"
        )

    @classmethod
    def total_memory(cls, device_id: int = 0) -> int:
        """Total memory of GPU ``device_id`` in bytes."""
        return cls.properties(device_id).total_memory_bytes

    @classmethod
    def free_memory(cls, device_id: int = 0) -> int:
        """Free memory of GPU ``device_id`` in bytes, as the driver reports it now."""
        cls.properties(device_id)  # a clear error for a missing device
        return ignis.Device(device_id).mem_info()[0]

    @classmethod
    def count(cls) -> int:
        """Number of usable GPUs (0 without a GPU or driver)."""
        return len(cls.all_devices())

    @classmethod
    def summary(cls) -> str:
        """One line per GPU, for logs."""
        devices = cls.all_devices()
        lines = [f"GPU devices ({len(devices)}):"]
        if not devices:
            lines.append("  none (no CUDA driver or device)")
        for d in devices:
            lines.append(
                f"  [{d.id}] {d.name} | {d.total_memory_gb} GB | "
                f"CC {d.compute_capability} | {d.sm_count} SMs"
            )
        return "\n".join(lines)

    @classmethod
    def recommend_config(
        cls,
        model_params: int,
        dtype_bytes: int = 4,
        device_id: int = 0,
        target_utilization: float = 0.85,
        *,
        hidden_size: int | None = None,
        num_layers: int | None = None,
        seq_len: int = 1024,
        total_memory_bytes: int | None = None,
    ) -> dict[str, Any]:
        """Suggest batch size, sequence length, FlashAttention and checkpointing for a
        transformer of ``model_params`` parameters trained with Adam on GPU ``device_id``.

        Memory: weights (``dtype_bytes`` each), gradients (float32 for 16-bit weights, since
        ignis_autograd accumulates them in float32), Adam's two float32 moments, and float32
        master weights for 16-bit training; what is left of ``target_utilization`` of the device
        holds activations, estimated per token from the architecture (``hidden_size`` and
        ``num_layers`` hints, else :func:`estimate_architecture`). Checkpointing is suggested
        when not even one sequence of ``seq_len`` tokens fits without it.
        ``total_memory_bytes`` plans for a device that is not present.

        Returns a dict with ``batch_size``, ``seq_len``, ``use_flash_attention``,
        ``use_gradient_checkpointing``, ``estimated_vram_usage_gb`` (weights, gradients,
        optimizer), ``available_vram_gb``, ``activation_budget_gb``, ``estimated_hidden_size``,
        ``estimated_layers``, ``activation_bytes_per_token`` and, when the model does not fit,
        ``warning``.
        """
        if model_params <= 0:
            raise ValueError(f"recommend_config: model_params must be positive, got {model_params}")
        if dtype_bytes not in (1, 2, 4, 8):
            raise ValueError(
                f"recommend_config: dtype_bytes must be 1, 2, 4 or 8, got {dtype_bytes}"
            )
        if not 0.0 < target_utilization <= 1.0:
            raise ValueError(
                f"recommend_config: target_utilization must be in (0, 1], got {target_utilization}"
            )
        total = (
            total_memory_bytes if total_memory_bytes is not None else cls.total_memory(device_id)
        )
        available = int(total * target_utilization)
        weight_bytes = model_params * dtype_bytes
        gradient_bytes = model_params * max(dtype_bytes, 4)
        optimizer_bytes = model_params * 8 + (model_params * 4 if dtype_bytes < 4 else 0)
        fixed = weight_bytes + gradient_bytes + optimizer_bytes
        budget = available - fixed
        hidden, layers = estimate_architecture(model_params, hidden_size, num_layers)
        result: dict[str, Any] = {
            "estimated_vram_usage_gb": round(fixed / _GIB, 2),
            "available_vram_gb": round(available / _GIB, 2),
            "activation_budget_gb": round(max(budget, 0) / _GIB, 2),
            "estimated_hidden_size": hidden,
            "estimated_layers": layers,
        }
        if budget <= 0:
            result.update(
                batch_size=1,
                seq_len=min(128, seq_len),
                use_flash_attention=True,
                use_gradient_checkpointing=True,
                activation_bytes_per_token=_activation_bytes_per_token(
                    hidden, layers, dtype_bytes, min(128, seq_len), True, True
                ),
                warning="Model too large for this GPU: weights, gradients and optimizer state "
                "alone exceed the memory target. Consider 16-bit weights, a sharded "
                "optimizer or model parallelism.",
            )
            return result
        flash = seq_len > 512
        checkpointing = False
        per_token = _activation_bytes_per_token(hidden, layers, dtype_bytes, seq_len, flash, False)
        tokens = budget // per_token
        if tokens < seq_len:
            checkpointing = True
            per_token = _activation_bytes_per_token(
                hidden, layers, dtype_bytes, seq_len, flash, True
            )
            tokens = budget // per_token
        seq = int(max(1, min(seq_len, tokens)))
        result.update(
            batch_size=int(max(1, tokens // seq)),
            seq_len=seq,
            use_flash_attention=seq > 512,
            use_gradient_checkpointing=checkpointing,
            activation_bytes_per_token=int(per_token),
        )
        return result

    @classmethod
    def multi_gpu_config(cls) -> dict[str, Any]:
        """Which GPUs to train on: ``multi_gpu``, ``device_ids``, ``strategy`` (``"none"``
        without a GPU, ``"single"`` or ``"data_parallel"``) and, for mixed compute
        capabilities, ``warning`` (only the most common capability is used)."""
        devices = cls.all_devices()
        if not devices:
            return {"multi_gpu": False, "device_ids": [], "strategy": "none"}
        if len(devices) == 1:
            return {"multi_gpu": False, "device_ids": [devices[0].id], "strategy": "single"}
        groups: dict[str, list[int]] = {}
        for d in devices:
            groups.setdefault(d.compute_capability, []).append(d.id)
        if len(groups) == 1:
            return {
                "multi_gpu": True,
                "device_ids": [d.id for d in devices],
                "strategy": "data_parallel",
            }
        # The most common capability; among equals the newest.
        cc, ids = max(
            groups.items(), key=lambda kv: (len(kv[1]), tuple(map(int, kv[0].split("."))))
        )
        return {
            "multi_gpu": len(ids) > 1,
            "device_ids": ids,
            "strategy": "data_parallel" if len(ids) > 1 else "single",
            "warning": f"Heterogeneous GPUs detected; using the {len(ids)} device(s) with compute "
            f"capability {cc}.",
        }

    @classmethod
    def reset(cls) -> None:
        """Forget the cached device list (after hardware or visibility changes)."""
        with cls._lock:
            cls._devices = None
