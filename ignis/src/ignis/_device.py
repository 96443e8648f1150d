"""CUDA devices and their primary contexts.

ignis uses each device's *primary context*, the one the CUDA runtime (and therefore PyTorch, CuPy
and JAX) uses too, so pointers and streams can be shared with those libraries. The context is made
current on the calling thread lazily by :func:`activate`; users never handle contexts.

Example::

    >>> import ignis
    >>> d = ignis.Device(0)
    >>> d.name, d.arch, d.total_memory // 2**30
    ('NVIDIA H200', 'sm_90', 139)
"""

from __future__ import annotations

import os
import threading
from typing import Any

from ._bindings import cu, driver, driver_available, ensure_driver
from ._errors import CudaError

__all__ = [
    "Device",
    "is_available",
    "device_count",
    "current_device",
    "synchronize",
    "activate",
]

_tls = threading.local()
_devices_lock = threading.Lock()
_devices: dict[int, Device] = {}

# Friendly names for the attributes a user asks for most; every other CU_DEVICE_ATTRIBUTE_* is in
# Device.properties under its lower-cased name without the prefix.
_ALIASES = {
    "max_threads_per_block": "MAX_THREADS_PER_BLOCK",
    "max_threads_per_multiprocessor": "MAX_THREADS_PER_MULTIPROCESSOR",
    "warp_size": "WARP_SIZE",
    "multiprocessor_count": "MULTIPROCESSOR_COUNT",
    "clock_rate_khz": "CLOCK_RATE",
    "memory_clock_rate_khz": "MEMORY_CLOCK_RATE",
    "memory_bus_width_bits": "GLOBAL_MEMORY_BUS_WIDTH",
    "l2_cache_size": "L2_CACHE_SIZE",
    "max_shared_memory_per_block": "MAX_SHARED_MEMORY_PER_BLOCK",
    "max_shared_memory_per_block_optin": "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN",
    "max_shared_memory_per_multiprocessor": "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR",
    "max_registers_per_block": "MAX_REGISTERS_PER_BLOCK",
    "max_registers_per_multiprocessor": "MAX_REGISTERS_PER_MULTIPROCESSOR",
    "cooperative_launch": "COOPERATIVE_LAUNCH",
    "concurrent_kernels": "CONCURRENT_KERNELS",
    "ecc_enabled": "ECC_ENABLED",
    "managed_memory": "MANAGED_MEMORY",
    "unified_addressing": "UNIFIED_ADDRESSING",
    "memory_pools_supported": "MEMORY_POOLS_SUPPORTED",
    "async_engine_count": "ASYNC_ENGINE_COUNT",
    "integrated": "INTEGRATED",
    "pci_bus_id": "PCI_BUS_ID",
    "pci_device_id": "PCI_DEVICE_ID",
    "pci_domain_id": "PCI_DOMAIN_ID",
}
_BOOL_PROPERTIES = {
    "cooperative_launch",
    "concurrent_kernels",
    "ecc_enabled",
    "managed_memory",
    "unified_addressing",
    "memory_pools_supported",
    "integrated",
}


def is_available() -> bool:
    """True when a CUDA driver is loaded and at least one device exists. Never raises."""
    return driver_available()


def device_count() -> int:
    """The number of CUDA devices (0 without a GPU or driver). Never raises."""
    if not driver_available():
        return 0
    return int(cu.cuDeviceGetCount())


class Device:
    """A CUDA device, identified by its ordinal. ``Device(i)`` always returns the same object.

    Args:
        ordinal: 0-based device index: an int, a ``Device``, or a string ``"cuda"``,
            ``"cuda:1"`` (any CUDA spelling of ``ignis._array._device.DEVICE_SPELLINGS``).

    Raises:
        NoDeviceError: without a GPU or driver.
        ValueError: when the ordinal is out of range or the spelling is not a CUDA device;
            TypeError for an argument that is neither a str nor an int.
    """

    ordinal: int

    def __new__(cls, ordinal: int | str | Device = 0) -> Device:
        if isinstance(ordinal, Device):
            return ordinal
        index = _parse_ordinal(ordinal)
        dev = _devices.get(index)
        if dev is not None:
            return dev
        ensure_driver()
        count = device_count()
        if not 0 <= index < count:
            raise ValueError(
                f"Device: ordinal {index} is out of range; this machine has {count} device(s)"
            )
        with _devices_lock:
            dev = _devices.get(index)
            if dev is None:
                dev = object.__new__(cls)
                dev.ordinal = index
                dev._handle = cu.cuDeviceGet(index)
                dev._context = None
                dev._context_lock = threading.Lock()
                dev._properties = None
                _devices[index] = dev
        return dev

    # -- identity ---------------------------------------------------------------------------------
    def __repr__(self) -> str:
        return f"<ignis.Device {self.ordinal}: {self.name} ({self.arch})>"

    def __str__(self) -> str:
        return f"cuda:{self.ordinal}"

    def __int__(self) -> int:
        return self.ordinal

    def __index__(self) -> int:
        return self.ordinal

    def __reduce__(self) -> tuple[Any, tuple[int]]:
        return (Device, (self.ordinal,))

    # -- basic facts ---------------------------------------------------------------------------
    @property
    def name(self) -> str:
        """The marketing name, e.g. ``"NVIDIA H200"``."""
        raw = cu.cuDeviceGetName(256, self._handle)
        return raw.split(b"\0", 1)[0].decode()

    @property
    def compute_capability(self) -> tuple[int, int]:
        """``(major, minor)``, e.g. ``(9, 0)``."""
        props = self.properties
        return props["compute_capability_major"], props["compute_capability_minor"]

    @property
    def arch(self) -> str:
        """The NVRTC/SASS architecture name, e.g. ``"sm_90"``."""
        major, minor = self.compute_capability
        return f"sm_{major}{minor}"

    @property
    def total_memory(self) -> int:
        """Total device memory in bytes."""
        return self.properties["total_memory"]

    @property
    def multiprocessor_count(self) -> int:
        """Number of streaming multiprocessors (SMs)."""
        return self.properties["multiprocessor_count"]

    @property
    def uuid(self) -> str:
        """The device UUID as ``GPU-xxxxxxxx-...`` (the form nvidia-smi prints)."""
        raw = bytes(cu.cuDeviceGetUuid(self._handle).bytes)
        h = raw.hex()
        return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"

    @property
    def properties(self) -> dict[str, Any]:
        """Every device attribute the driver reports, plus friendly aliases.

        Keys include ``max_threads_per_block``, ``max_threads_per_multiprocessor``, ``warp_size``,
        ``multiprocessor_count``, ``clock_rate_khz``, ``memory_clock_rate_khz``, ``l2_cache_size``
        (bytes), ``max_shared_memory_per_block`` and ``..._optin`` (bytes), ``max_block_dim`` and
        ``max_grid_dim`` (3-tuples), ``cooperative_launch`` (bool), ``total_memory`` (bytes),
        ``name``, ``compute_capability``, and each ``CU_DEVICE_ATTRIBUTE_X`` as ``x``.
        The dict is computed once and a copy is returned.
        """
        if self._properties is None:
            self._properties = self._query_properties()
        return dict(self._properties)

    def _query_properties(self) -> dict[str, Any]:
        raw: dict[str, int] = {}
        prefix = "CU_DEVICE_ATTRIBUTE_"
        for member in driver.CUdevice_attribute:
            if not member.name.startswith(prefix) or member.name.endswith("_MAX"):
                continue
            try:
                raw[member.name[len(prefix) :]] = int(cu.cuDeviceGetAttribute(member, self._handle))
            except CudaError:  # attributes this driver does not know
                continue
        props: dict[str, Any] = {k.lower(): v for k, v in raw.items()}
        for alias, key in _ALIASES.items():
            if key in raw:
                props[alias] = bool(raw[key]) if alias in _BOOL_PROPERTIES else raw[key]
        props["max_block_dim"] = tuple(raw[f"MAX_BLOCK_DIM_{a}"] for a in "XYZ")
        props["max_grid_dim"] = tuple(raw[f"MAX_GRID_DIM_{a}"] for a in "XYZ")
        props["total_memory"] = int(cu.cuDeviceTotalMem(self._handle))
        props["name"] = self.name
        props["compute_capability"] = (
            raw["COMPUTE_CAPABILITY_MAJOR"],
            raw["COMPUTE_CAPABILITY_MINOR"],
        )
        props["arch"] = f"sm_{raw['COMPUTE_CAPABILITY_MAJOR']}{raw['COMPUTE_CAPABILITY_MINOR']}"
        props["ordinal"] = self.ordinal
        return props

    # -- context ----------------------------------------------------------------------------------
    @property
    def context(self) -> Any:
        """The driver handle of this device's primary context (retained on first use)."""
        ctx = self._context
        if ctx is None:
            with self._context_lock:
                if self._context is None:
                    self._context = cu.cuDevicePrimaryCtxRetain(self._handle)
                ctx = self._context
        return ctx

    def set_current(self) -> None:
        """Make this the current device of the calling thread (and its context current)."""
        _tls.device = self
        activate(self)

    def __enter__(self) -> Device:
        stack = getattr(_tls, "stack", None)
        if stack is None:
            stack = _tls.stack = []
        stack.append(getattr(_tls, "device", None))
        self.set_current()
        return self

    def __exit__(self, *exc: object) -> None:
        previous = _tls.stack.pop()
        _tls.device = previous
        if previous is not None:
            activate(previous)

    def mem_info(self) -> tuple[int, int]:
        """``(free, total)`` device memory in bytes, as the driver reports it now."""
        activate(self)
        free, total = cu.cuMemGetInfo()
        return int(free), int(total)

    def synchronize(self) -> None:
        """Block until all work queued on this device has finished."""
        activate(self)
        cu.cuCtxSynchronize()


def activate(device: Device) -> None:
    """Make ``device``'s primary context current on this thread, if it is not already.

    The per-thread cache keeps this to one attribute lookup on the hot path.
    """
    if getattr(_tls, "active", None) is device:
        return
    cu.cuCtxSetCurrent(device.context)
    _tls.active = device


def current_device() -> Device:
    """The calling thread's current device (device 0 until ``set_current`` says otherwise).

    Raises:
        NoDeviceError: without a GPU or driver.
    """
    dev = getattr(_tls, "device", None)
    if dev is None:
        dev = Device(0)
        _tls.device = dev
    return dev


def synchronize(device: int | Device | None = None) -> None:
    """Wait for all work on ``device`` (default: every device this process has used)."""
    if device is not None:
        Device(device).synchronize()
        return
    ensure_driver()
    used = [d for d in list(_devices.values()) if d._context is not None]
    for dev in used or [current_device()]:
        dev.synchronize()


def _after_fork_in_child() -> None:
    """Forget, in a forked child, the contexts this process's parent made current.

    The forking thread's cached active device would let the launch and allocation fast paths
    skip :func:`activate` and hand the parent's context handles to the driver; clearing it sends
    the first GPU call through :func:`activate`, which raises the clear fork error from the
    bindings seam (see ``_bindings.FORK_MESSAGE``). Locks are renewed because a thread of the
    parent may have held them at fork time.
    """
    global _devices_lock
    _devices_lock = threading.Lock()
    _tls.__dict__.pop("active", None)
    for dev in list(_devices.values()):
        dev._context = None
        dev._context_lock = threading.Lock()


if hasattr(os, "register_at_fork"):  # POSIX only
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _parse_ordinal(value: int | str, op: str = "Device") -> int:
    """The CUDA ordinal of a device argument, in any CUDA spelling of the one list of device
    spellings (``ignis._array._device.DEVICE_SPELLINGS``); errors name ``op``. Needs no GPU."""
    # Imported here: the array package imports this module.
    from ._array._device import expected_devices, parse_device_spec

    if not isinstance(value, str) and not hasattr(value, "__index__"):
        raise TypeError(
            f"{op}: expected {expected_devices('cuda')}; got {value!r} "
            f"of type {type(value).__name__}"
        )
    try:
        kind, index = parse_device_spec(value)
    except ValueError:
        kind, index = "", None
    if kind != "cuda" or index is None:
        what = "'cpu' is not a CUDA device" if kind == "cpu" else f"invalid device {value!r}"
        raise ValueError(f"{op}: {what}; expected {expected_devices('cuda')}")
    return index


def check_device_arg(device: Any, op: str = "Device") -> None:
    """Raise TypeError/ValueError (naming ``op``) for a ``device`` argument that names no CUDA
    device; None and Device objects pass. Needs no GPU, so callers run it before the driver is
    asked: a bad argument is reported as such, GPU or not."""
    if device is not None and not isinstance(device, Device):
        _parse_ordinal(device, op)
