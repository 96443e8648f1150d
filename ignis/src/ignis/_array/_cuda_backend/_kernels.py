"""The kernel library's kernels, compiled lazily per (source file, name expression, device).

Every kernel of the library lives in a file of ``cuda_src/`` and is reached by a C++ name
expression (``"ignis::binary_contig<float, ignis::op_add>"``). :func:`library_kernel` compiles
the file for the device's architecture on first use (through the JIT's memory and disk caches)
and keeps the loaded :class:`~ignis.Kernel`; later calls are one dict lookup.
"""

from __future__ import annotations

import threading

from ..._device import Device
from ..._kernel import Kernel, compile_kernel
from ..._sources import read_source

__all__ = ["library_kernel"]

_lock = threading.Lock()
_kernels: dict[tuple[str, str, int], Kernel] = {}


def library_kernel(source_file: str, name_expression: str, device: Device) -> Kernel:
    """The kernel ``name_expression`` of ``cuda_src/<source_file>``, compiled for ``device``."""
    key = (source_file, name_expression, device.ordinal)
    kernel = _kernels.get(key)
    if kernel is None:
        with _lock:
            kernel = _kernels.get(key)
            if kernel is None:
                kernel = compile_kernel(read_source(source_file), name_expression, device=device)
                _kernels[key] = kernel
    return kernel
