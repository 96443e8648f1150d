"""The kernel library's kernels, compiled lazily per (source file, name expression, device).

Every kernel of the library lives in a file of ``cuda_src/`` and is reached by a C++ name
expression (``"ignis::binary_contig<float, ignis::op_add>"``). :func:`library_kernel` compiles
the file for the device's architecture on first use (through the JIT's memory and disk caches)
and keeps the loaded :class:`~ignis.Kernel`; later calls are one dict lookup.
"""

from __future__ import annotations

import threading

from ... import _caches
from ... import _dtypes as dt
from ..._compiler import CompileOptions
from ..._device import Device
from ..._kernel import Kernel, compile_kernel
from ..._sources import read_source

__all__ = ["CTYPE", "library_kernel"]

# The C++ element type of each dtype in the kernel library (cuda_src/ignis_types.cuh), keyed by
# the DType and by its name.
_PAIRS = [
    (dt.bool_, "bool"),
    (dt.int8, "ignis::int8"),
    (dt.int16, "ignis::int16"),
    (dt.int32, "ignis::int32"),
    (dt.int64, "ignis::int64"),
    (dt.uint8, "ignis::uint8"),
    (dt.uint16, "ignis::uint16"),
    (dt.uint32, "ignis::uint32"),
    (dt.uint64, "ignis::uint64"),
    (dt.float16, "ignis::float16"),
    (dt.bfloat16, "ignis::bfloat16"),
    (dt.float32, "float"),
    (dt.float64, "double"),
    (dt.complex64, "ignis::complex64"),  # cuda_src/complex.cuh: float2 / double2 layouts
    (dt.complex128, "ignis::complex128"),
]
CTYPE: dict = {**{d: c for d, c in _PAIRS}, **{d.name: c for d, c in _PAIRS}}

_lock = threading.Lock()
_kernels: dict[tuple[str, str, int, str | None], Kernel] = {}
_caches.register(
    "cuda.library_kernels",
    _kernels,
    description="(source, name expression, device, arch) -> the loaded kernel of cuda_src/",
)


def library_kernel(
    source_file: str, name_expression: str, device: Device, arch: str | None = None
) -> Kernel:
    """The kernel ``name_expression`` of ``cuda_src/<source_file>``, compiled for ``device``:
    for its own architecture, or for ``arch`` (e.g. ``"sm_90a"``, which wgmma needs)."""
    key = (source_file, name_expression, device.ordinal, arch)
    kernel = _kernels.get(key)
    if kernel is None:
        with _lock:
            kernel = _kernels.get(key)
            if kernel is None:
                options = CompileOptions(arch=arch) if arch is not None else None
                source = read_source(source_file)
                kernel = compile_kernel(source, name_expression, options=options, device=device)
                _kernels[key] = kernel
    return kernel
