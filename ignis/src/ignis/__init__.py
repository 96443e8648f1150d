"""ignis: a GPU compute foundation over the raw CUDA driver."""

from __future__ import annotations

import logging

from . import (
    half,
    jit,
    nn,  # noqa: E402  (after NvArray: the nn kernels build on it)
)
from ._array import *  # noqa: F403  (NvArray, its constructors and functions)
from ._array._cuda_backend.matmul import (
    cublas_available,
    get_allow_tf32,
    get_cublas_enabled,
    set_allow_tf32,
    set_cublas_enabled,
)
from ._caches import CacheInfo, cache_info, clear_caches
from ._compiler import CompileOptions, ObjectCode, compile
from ._device import Device, current_device, device_count, is_available, synchronize
from ._dtypes import (
    DType,
    bfloat16,
    bool_,
    can_cast,
    complex64,
    complex128,
    float16,
    float32,
    float64,
    int8,
    int16,
    int32,
    int64,
    promote_types,
    result_type,
    uint8,
    uint16,
    uint32,
    uint64,
)
from ._dtypes import (
    bool_ as bool,  # noqa: A004 (the Array API's name; shadows the builtin only in ignis)
)
from ._elementwise_kernel import ElementwiseKernel
from ._errors import (
    CompileError,
    CudaError,
    DeviceMismatchError,
    DTypeError,
    IgnisError,
    LaunchError,
    NoDeviceError,
    NvrtcNotFoundError,
    OutOfMemoryError,
    ShapeError,
)
from ._fuse import Fused, fuse
from ._graph import Graph
from ._graph_pool import GraphPool
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
from ._profiler import KernelEvent, KernelSummary, Profile, profile
from ._raw_module import RawModule
from ._reduction_kernel import ReductionKernel
from ._stream import Event, Stream, current_stream, default_stream
from ._tuning import tuning

__version__ = "0.1.0"

logger = logging.getLogger("ignis")
"""The package logger. ignis never prints; configure this logger to see what it does."""
