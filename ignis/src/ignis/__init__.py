"""ignis: a GPU compute foundation over the raw CUDA driver."""

from __future__ import annotations

import logging

from ._errors import (
    CompileError,
    CudaError,
    DeviceMismatchError,
    DTypeError,
    IgnisError,
    LaunchError,
    NoDeviceError,
    OutOfMemoryError,
    ShapeError,
)

from ._device import Device, current_device, device_count, is_available, synchronize
from ._graph import Graph
from ._kernel import Kernel, compile_kernel
from ._memory import (
    AsyncMemoryResource,
    Buffer,
    MemoryResource,
    PinnedBuffer,
    PlainMemoryResource,
    alloc,
    get_memory_resource,
    memcpy,
    memory_stats,
    memset,
    pinned_empty,
    reset_peak_memory_stats,
    set_memory_resource,
)
from ._stream import Event, Stream, current_stream, default_stream
from . import jit
from ._compiler import CompileOptions, ObjectCode, compile


__version__ = "0.1.0"

logger = logging.getLogger("ignis")
"""The package logger. ignis never prints; configure this logger to see what it does."""
