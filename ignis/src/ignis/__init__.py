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

__version__ = "0.1.0"

logger = logging.getLogger("ignis")
"""The package logger. ignis never prints; configure this logger to see what it does."""
