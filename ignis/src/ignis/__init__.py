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
    NvrtcNotFoundError,
    OutOfMemoryError,
    ShapeError,
)

from ._device import Device, current_device, device_count, is_available, synchronize
from ._array._cuda_backend.matmul import (
    cublas_available,
    get_allow_tf32,
    get_cublas_enabled,
    set_allow_tf32,
    set_cublas_enabled,
)
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
from ._stream import Event, Stream, current_stream, default_stream
from . import jit
from ._caches import CacheInfo, cache_info, clear_caches
from ._compiler import CompileOptions, ObjectCode, compile

from . import half
from ._dtypes import (
    DType,
    bfloat16,
    bool_,
    can_cast,
    float16,
    float32,
    float64,
    int8,
    int32,
    int64,
    promote_types,
    result_type,
    uint8,
)
from ._array import (
    NvArray,
    abs,
    accumulate,
    add,
    arange,
    argmax,
    argmin,
    asarray,
    clip,
    concatenate,
    cos,
    divide,
    empty,
    empty_like,
    equal,
    erf,
    exp,
    from_dlpack,
    from_host,
    full,
    full_like,
    gelu,
    get_default_device,
    greater,
    greater_equal,
    index_add,
    less,
    less_equal,
    log,
    log_softmax,
    matmul,
    max,
    maximum,
    mean,
    min,
    minimum,
    multiply,
    negative,
    not_equal,
    ones,
    ones_like,
    power,
    random,
    relu,
    rsqrt,
    set_default_device,
    sigmoid,
    silu,
    sin,
    softmax,
    sqrt,
    stack,
    subtract,
    sum,
    take,
    tanh,
    var,
    where,
    zeros,
    zeros_like,
)

from . import nn  # noqa: E402  (after NvArray: the nn kernels build on it)

__version__ = "0.1.0"

logger = logging.getLogger("ignis")
"""The package logger. ignis never prints; configure this logger to see what it does."""
