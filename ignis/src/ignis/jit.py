"""Run-time compilation of CUDA C++: options, compiled code and the compile caches.

Example::

    >>> from ignis import jit
    >>> src = 'extern "C" __global__ void twice(float* x) { x[threadIdx.x] *= 2.0f; }'
    >>> obj = jit.compile(src, jit.CompileOptions(arch="sm_90"))
    >>> obj.kind, jit.cache_stats().misses >= 1
    ('cubin', True)
    >>> jit.cache_dir()          # IGNIS_CACHE_DIR, or ~/.cache/ignis; None when disabled
    PosixPath('/home/me/.cache/ignis')
    >>> jit.default_arch()       # arch=None without a GPU: IGNIS_ARCH, else sm_90
    'sm_90'
    >>> 90 in jit.known_archs()  # what CompileOptions(arch=...) accepts
    True
"""

from __future__ import annotations

from ._compile_cache import CacheStats, cache_dir, cache_stats, clear_cache
from ._compiler import (
    CompileOptions,
    ObjectCode,
    compile,
    default_arch,
    known_archs,
    supported_archs,
)

__all__ = [
    "CompileOptions",
    "ObjectCode",
    "CacheStats",
    "compile",
    "cache_stats",
    "clear_cache",
    "cache_dir",
    "supported_archs",
    "known_archs",
    "default_arch",
]
