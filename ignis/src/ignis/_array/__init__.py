"""NvArray, its constructors and functions, and the backends that run them.

See :mod:`ignis._array.array` for the array, ``_semantics`` for the rules of every op,
``_backend`` for the interface a device backend implements and ``random`` for the seeded
Philox streams.
"""

from __future__ import annotations

from . import (
    _manipulation,
    _namespace,
    _ops,
    _sorting,
    fft,
    linalg,
    random,  # noqa: I001
)
from ._backend import Backend, get_backend, register_backend
from ._creation import (
    arange,
    asarray,
    empty,
    empty_like,
    from_host,
    full,
    full_like,
    ones,
    ones_like,
    zeros,
    zeros_like,
)
from ._device import ArrayDevice, get_default_device, set_default_device
from ._indexing import index_add, take
from ._interop import from_dlpack
from ._manipulation import *  # noqa: F403
from ._namespace import *  # noqa: F403
from ._op_table import ElementwiseOp, elementwise_ops
from ._ops import *  # noqa: F403  (the array functions; the op table's among them)
from ._reduction_table import ReductionOp, reduction_ops
from ._sorting import *  # noqa: F403
from .array import NvArray  # first: the modules below need the class

# What ``ignis`` re-exports (``get_backend`` and ``ArrayDevice`` stay here).
__all__ = [
    "NvArray",
    "Backend",
    "register_backend",
    "random",
    "linalg",
    "fft",
    "arange",
    "asarray",
    "empty",
    "empty_like",
    "from_host",
    "full",
    "full_like",
    "ones",
    "ones_like",
    "zeros",
    "zeros_like",
    "get_default_device",
    "set_default_device",
    "from_dlpack",
    "ElementwiseOp",
    "elementwise_ops",
    "ReductionOp",
    "reduction_ops",
    *_ops.__all__,
    "take",
    "index_add",
    *_manipulation.__all__,
    *_namespace.__all__,
    *_sorting.__all__,
]

# ``import ignis.random`` works like ``ignis.random`` (the module lives in this subpackage).
import sys as _sys  # noqa: E402

_sys.modules.setdefault(__package__.rpartition(".")[0] + ".random", random)
_sys.modules.setdefault(__package__.rpartition(".")[0] + ".linalg", linalg)
_sys.modules.setdefault(__package__.rpartition(".")[0] + ".fft", fft)
