"""The activation family of the CUDA backend: fused activation backward passes (kernels in
``cuda_src/activation.cu``).

The front end (``_nn_activation.py``) hands over contiguous arrays of one shape, so a launch is
one flat pass over ``n`` elements. The kernel moves 16-byte vectors when every operand is aligned
to its vector, else takes its scalar path. The grid cap is the ``activation`` settings'
``blocks_per_sm`` (``ignis.tuning``). Nothing here synchronizes the host.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from ... import _dtypes as dt
from ... import _tuning
from ..._caches import PlanCache
from ._kernels import CTYPE, library_kernel

if TYPE_CHECKING:
    from ..array import NvArray

__all__ = ["KINDS", "activation_backward", "kernel_name", "kernel_names"]

THREADS = 256  # threads per block (activation.cu's act::threads: its launch bound)

#: activation.cu's KIND numbering
KINDS = {"gelu": 0, "gelu_tanh": 1, "silu": 2, "sigmoid": 3, "tanh": 4, "relu": 5}

FLOAT_TYPES = (dt.float16, dt.bfloat16, dt.float32, dt.float64)
# (saved dtype, grad dtype) pairs: equal, or float32 gradients of 16-bit arrays
TYPE_PAIRS = tuple((d, d) for d in FLOAT_TYPES) + (
    (dt.float16, dt.float32),
    (dt.bfloat16, dt.float32),
)

_grid_caps = PlanCache(
    "cuda.activation.grid_caps", 64, "(device, activation settings) -> grid cap"
)
_names = PlanCache("cuda.activation.kernel_names", 1024, "kind and dtypes -> kernel name")


def kernel_name(kind: str, saved: dt.DType, grad: dt.DType, vec: bool) -> str:
    key = (kind, saved, grad, vec)
    name = _names.get(key)
    if name is not None:
        _names.hits += 1
    else:
        name = _names.remember(
            key,
            f"ignis::act::activation_backward<{CTYPE[saved]}, {CTYPE[grad]}, {KINDS[kind]}, "
            f"{'true' if vec else 'false'}>",
        )
    return name  # type: ignore[no-any-return]


def kernel_names() -> list[str]:
    """Every name expression this module can launch (the CPU tests compile each one)."""
    return [
        kernel_name(k, s, g, v) for k in KINDS for s, g in TYPE_PAIRS for v in (False, True)
    ]


def _cap(backend: Any) -> int:
    """The grid cap of the backend's device: its multiprocessors times ``blocks_per_sm``."""
    tune = _tuning.current.activation
    key = (backend.gpu.ordinal, tune)
    cap = _grid_caps.get(key)
    if cap is not None:
        _grid_caps.hits += 1
    else:
        sms = max(1, int(backend.gpu.multiprocessor_count))
        cap = _grid_caps.remember(key, sms * tune.blocks_per_sm)
    return cap  # type: ignore[no-any-return]


def activation_backward(
    backend: Any, out: NvArray, grad: NvArray, saved: NvArray, kind: str
) -> None:
    n = out.numel
    gd, sd = grad._dtype, saved._dtype
    width = 16 // max(gd.itemsize, sd.itemsize)  # elements per vector step
    pg = grad._storage.ptr + grad._offset
    ps = saved._storage.ptr + saved._offset
    po = out._storage.ptr + out._offset
    vec = (
        n >= width
        and pg % (width * gd.itemsize) == 0
        and po % (width * gd.itemsize) == 0
        and ps % (width * sd.itemsize) == 0
    )
    per_thread = width if vec else 1
    grid = max(1, min(-(-n // (THREADS * per_thread)), _cap(backend)))
    kernel = library_kernel("activation.cu", kernel_name(kind, sd, gd, vec), backend.gpu)
    kernel.launch(grid, THREADS, [pg, ps, po, n], stream=backend.stream)


# The module global this setting replaced keeps reading and setting it (deprecated).
_tuning.keep_module_names(sys.modules[__name__], "activation")
