"""The backend interface of NvArray and the registry that maps devices to backends.

An :class:`~ignis.NvArray` is ``(storage, byte offset, shape, byte strides, dtype, device)``.
The front end (``array.py``, ``_ops.py``) applies the op's rules from ``_semantics.py``,
allocates outputs and then calls one hook of the array's backend. A backend only executes.

Contract of every hook:

* Array arguments are NvArrays of the backend's device. They may be non-contiguous, have
  negative strides, and have zero strides (broadcast dimensions). Hooks read them through
  ``arr._storage``, ``arr._offset``, ``arr.shape``, ``arr.strides`` and ``arr.dtype``.
* Elementwise hooks get operands already broadcast to ``out.shape`` (zero strides), in their
  own dtypes: the hook converts each operand to ``compute`` on the fly. Scalar operands arrive
  as Python ``bool``/``int``/``float`` values, already checked to fit ``compute``.
* ``out`` never partially overlaps an input: the front end passes a temporary instead. It may
  be the *identical* view of an elementwise input (in-place ops).
* Outputs are written with one rounding into ``out.dtype`` (float16/bfloat16 results are
  computed in float32 and rounded once).
* No hook raises for data values (NaN, Inf, overflow, integer division by zero): they follow
  IEEE and wrap-around integer arithmetic.

A CUDA backend implements the same hooks with kernels; its storage is an ignis device buffer
(an object with an int ``ptr``, ``nbytes`` and ``device``). To plug one in, provide the module
``ignis._array._cuda_backend`` with a ``create_backend(device) -> Backend`` function (it is found
lazily, after the driver check), or call :func:`register_backend`.

Beyond these primitives, the multi-argument ops (attention, norms, losses, indexing, dropout
and rope, optimizers, activations' backward, the linear layer's fused epilogues, random) are
*kernel families*, each declared once in ``_families`` with its parameters and contract. The
front end calls them through the backend's table, ``backend.kernels.<family>(...)``. A backend
class says which built-in implementations it runs (``builtin_families = "cpu"`` or ``"cuda"``;
subclasses inherit it) and may register its own, which take precedence::

    class MyBackend(Backend):
        kind = "cuda"
        ...  # the abstract hooks above

    def my_attention_forward(backend, out, lse, q, k, v, causal, scale): ...

    MyBackend.implement("attention_forward", my_attention_forward)
    register_backend("cuda", MyBackend)

An implementation is called with the backend first, then the family's parameters in the
declared order (``_families.FAMILIES[name].params``). Families with a portable form (made of
the primitives: the linear epilogues, ``optim_zero``, ``random``) work on every backend; any
other family a backend lacks raises ``NotImplementedError`` naming the family and the backend.
"""

from __future__ import annotations

import abc
import functools
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from .._errors import IgnisError, NoDeviceError
from . import _families
from ._device import ArrayDevice, as_device

if TYPE_CHECKING:
    from .._dtypes import DType
    from ._semantics import Reduction
    from .array import NvArray

__all__ = ["Backend", "get_backend", "register_backend"]

Scalar = Any  # a Python bool, int or float
Operand = Any  # an NvArray or a Scalar


class Backend(abc.ABC):
    """Executes array ops on one device. Subclasses implement the abstract hooks."""

    #: "cpu" or "cuda"
    kind: str = ""

    def __init__(self, device: ArrayDevice):
        self.device = device

    # --- memory --------------------------------------------------------------------------------

    @abc.abstractmethod
    def alloc(self, nbytes: int) -> Any:
        """New uninitialized storage of ``nbytes`` bytes (``nbytes`` may be 0)."""

    @abc.abstractmethod
    def storage_nbytes(self, storage: Any) -> int:
        """Size in bytes of a storage object."""

    @abc.abstractmethod
    def copyin(self, dst: NvArray, host: np.ndarray) -> None:
        """Write host data into ``dst``; ``host`` is C-contiguous with ``dst``'s shape and dtype."""

    @abc.abstractmethod
    def copyout(self, src: NvArray) -> np.ndarray:
        """A new C-contiguous host array (numpy dtype of ``src``) holding ``src``'s elements."""

    @abc.abstractmethod
    def copy(self, dst: NvArray, src: NvArray) -> None:
        """``dst[...] = src`` for equal shapes (``src`` may be broadcast), converting the dtype."""

    @abc.abstractmethod
    def fill(self, dst: NvArray, value: Scalar) -> None:
        """Set every element of ``dst`` to ``value`` (already checked to fit ``dst.dtype``)."""

    # --- elementwise ---------------------------------------------------------------------------

    @abc.abstractmethod
    def unary(
        self, op: str, out: NvArray, x: NvArray, compute: DType, params: dict[str, Any]
    ) -> None:
        """``out = op(x)`` for an op in ``_semantics.UNARY_OPS``.

        ``params`` carries op options, e.g. ``{"approximate": "tanh"}`` for gelu.
        """

    @abc.abstractmethod
    def binary(self, op: str, out: NvArray, a: Operand, b: Operand, compute: DType) -> None:
        """``out = op(a, b)`` for an op in ``_semantics.BINARY_OPS`` (at least one array)."""

    # Optional one-call paths for the front end's remembered element-wise and reduction plans:
    # a backend may return a function that allocates the result and computes it with nothing in
    # between, for the operands it takes (it returns None for others, and the front end then
    # allocates and calls unary / binary / reduce). The front end asks once per plan and
    # backend, and calls it with operands of this backend only. The defaults offer none.

    def unary_direct(
        self, op: str, compute: DType, dtype: DType, x_dtype: DType, shape: tuple[int, ...],
        strides: tuple[int, ...], nbytes: int,
    ) -> Callable[[NvArray], NvArray | None] | None:
        """``direct(x)``: ``op(x)`` for ``x`` of ``x_dtype`` and ``shape`` into a new array of
        ``dtype`` with the contiguous ``strides`` / ``nbytes``, or None for an ``x`` it does not
        take; None: no such function for this plan."""
        return None

    def binary_direct(
        self, op: str, compute: DType, dtype: DType, form: int, shape: tuple[int, ...],
        strides: tuple[int, ...], nbytes: int,
    ) -> Callable[[Operand, Operand], NvArray | None] | None:
        """``direct(a, b)``: ``op(a, b)`` into a new array of ``dtype`` with the contiguous
        ``strides`` / ``nbytes``, for array operands of ``dtype`` and ``shape`` and (``form``
        1: ``a``, 2: ``b``; 0: none) a Python scalar of the plan's type; None for operands it
        does not take. None: no such function for this plan."""
        return None

    def reduce_direct(
        self, op: str, spec: Reduction, x_dtype: DType, x_shape: tuple[int, ...],
        keep_strides: tuple[int, ...], strides: tuple[int, ...], nbytes: int,
    ) -> Callable[[NvArray], NvArray | None] | None:
        """``direct(x)``: reduction ``op`` (a plan of the front end's ``_reduce``, whose rule
        gave ``spec``) of ``x`` of ``x_dtype`` and ``x_shape`` into a new array of
        ``spec.dtype`` and ``spec.shape`` (contiguous ``strides``; ``keep_strides`` of the
        keepdims shape; ``nbytes``), or None for an ``x`` it does not take; None: no such
        function for this plan."""
        return None

    @abc.abstractmethod
    def where(self, out: NvArray, cond: Operand, a: Operand, b: Operand, compute: DType) -> None:
        """``out = cond ? a : b`` where ``cond`` is any dtype (nonzero is true)."""

    # --- reductions ----------------------------------------------------------------------------

    @abc.abstractmethod
    def reduce(
        self,
        op: str,
        out: NvArray,
        x: NvArray,
        axes: tuple[int, ...],
        accumulate: DType,
        params: dict[str, Any],
    ) -> None:
        """Reduce ``x`` over ``axes`` (sorted, may be empty) into ``out``.

        ``op`` is one of sum, mean, max, min, var; ``out`` has ``x``'s ndim with the reduced
        axes of size 1. ``accumulate`` is the dtype sums run in; ``params`` has ``ddof`` for var.
        max/min propagate NaN. Results must not depend on anything but the shape (deterministic).
        """

    @abc.abstractmethod
    def arg_reduce(self, op: str, out: NvArray, x: NvArray, axis: int | None) -> None:
        """argmax/argmin of ``x`` along ``axis`` into int64 ``out`` (keepdims shape; for
        ``axis=None`` the index into the row-major flattening, ``out`` of shape ``(1,)*ndim``).
        Ties and NaN: the first occurrence wins; a NaN counts as the extreme."""

    @abc.abstractmethod
    def softmax(self, out: NvArray, x: NvArray, axis: int, log: bool) -> None:
        """Softmax (or log-softmax) of ``x`` along ``axis`` into ``out`` of the same shape."""

    @abc.abstractmethod
    def matmul(self, out: NvArray, a: NvArray, b: NvArray, alpha: float, beta: float) -> None:
        """``out = alpha * a @ b + beta * out`` over stacks of matrices.

        ``a`` is ``(*batch, m, k)``, ``b`` is ``(*batch, k, n)``, ``out`` is ``(*batch, m, n)``,
        all with the same batch shape (broadcast batch dims have stride 0) and the same floating
        dtype. Transposes arrive as strides (a transposed matrix is column-major). When beta is
        0, ``out``'s old contents are ignored (even NaN).
        """

    # --- with portable defaults ----------------------------------------------------------------

    def arange(self, out: NvArray, start: float, step: float) -> None:
        """``out[i] = start + i * step`` computed in float64 (int64 for integer dtypes)."""
        n = out.shape[0]
        if out.dtype.kind == "f":
            host = start + np.arange(n, dtype=np.float64) * step
        else:
            host = int(start) + np.arange(n, dtype=np.int64) * int(step)
        self.copyin(out, host.astype(out.dtype.numpy))

    def synchronize(self) -> None:
        """Wait for all work queued on this backend (nothing to wait for on the CPU)."""
        return None

    def data_ptr(self, arr: NvArray) -> int:
        """The address of ``arr``'s first element (host address on the CPU)."""
        raise NotImplementedError

    def default_stream(self) -> Any:
        """The stream new arrays are ordered on (None: the device's default)."""
        return None

    def dlpack_device(self) -> tuple[int, int]:
        """``(DLDeviceType, device id)`` for DLPack: ``(1, 0)`` CPU, ``(2, N)`` CUDA."""
        raise NotImplementedError

    def wrap_external(self, ptr: int, nbytes: int, owner: Any) -> Any:
        """Storage over foreign memory ``[ptr, ptr + nbytes)`` kept alive by ``owner``."""
        raise NotImplementedError

    # --- kernel families (declared in _families) ------------------------------------------------

    #: The built-in family implementations this backend class runs: "cpu" (the NumPy
    #: references), "cuda" (the kernels of _cuda_backend), or None (only those registered with
    #: :meth:`implement` and the portable forms).
    builtin_families: str | None = None

    @classmethod
    def implement(cls, family: str, fn: Callable[..., Any]) -> None:
        """Make ``fn(backend, *params)`` run kernel family ``family`` on backends of this class
        and its subclasses, ahead of any built-in implementation.

        ``fn`` must take the family's parameters positionally (``TypeError`` otherwise); an
        unknown family is an ``AttributeError``. Backends already built pick it up on their next
        call. Example: ``MyBackend.implement("rope", my_rope)``.
        """
        _families.register(cls, family, fn)
        for backend in list(_instances.values()):
            if isinstance(backend, cls):
                backend.__dict__.pop("kernels", None)  # resolved anew on next use

    @functools.cached_property
    def kernels(self) -> _families.Kernels:
        """This backend's kernel-family implementations by name (``self.kernels.rope(...)``),
        each resolved on first use."""
        return _families.Kernels(self)


    # --- interop stream hand-off (no-ops where there are no streams) ----------------------------

    def cai_stream(self, arr: NvArray) -> int | None:
        """The ``stream`` entry of ``__cuda_array_interface__`` (None: no synchronization)."""
        return None

    def dlpack_export_sync(self, arr: NvArray, consumer_stream: Any) -> None:
        """Make ``consumer_stream`` (the ``stream`` a DLPack consumer passed) wait for ``arr``."""
        return None

    def dlpack_import_stream(self) -> Any:
        """The ``stream`` argument to pass to a foreign ``__dlpack__`` (None on the CPU)."""
        return None

    def cai_import_sync(self, stream: Any) -> None:
        """Wait for a foreign ``__cuda_array_interface__`` producer's ``stream`` before use."""
        return None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.device}>"


# --- registry ----------------------------------------------------------------------------------

_factories: dict[str, Callable[[ArrayDevice], Backend]] = {}
_instances: dict[ArrayDevice, Backend] = {}
_lock = threading.Lock()


def register_backend(kind: str, factory: Callable[[ArrayDevice], Backend] | None) -> None:
    """Make ``factory(device)`` build the backend of every device of ``kind`` ("cpu", "cuda").

    Backends already built for that kind are dropped. ``None`` restores the built-in factory.
    """
    with _lock:
        if factory is None:
            _factories.pop(kind, None)
        else:
            _factories[kind] = factory
        for dev in [d for d in _instances if d.type == kind]:
            del _instances[dev]


def get_backend(device: Any) -> Backend:
    """The backend of ``device`` (built on first use).

    For ``"cuda:N"`` without a usable GPU this raises :class:`~ignis.NoDeviceError` with the
    driver's reason.
    """
    dev = as_device(device)
    backend = _instances.get(dev)
    if backend is not None:
        return backend
    with _lock:
        backend = _instances.get(dev)
        if backend is None:
            factory = _factories.get(dev.type) or _BUILTIN[dev.type]
            backend = factory(dev)
            _instances[dev] = backend
    return backend


def _cpu_factory(device: ArrayDevice) -> Backend:
    from ._cpu_backend import CpuBackend

    return CpuBackend(device)


def _cuda_factory(device: ArrayDevice) -> Backend:
    from .. import _bindings

    _bindings.ensure_driver()  # NoDeviceError with the driver's reason
    try:
        from . import _cuda_backend  # type: ignore[attr-defined]
    except ImportError as exc:
        raise NoDeviceError(
            f"device {device!r}: this installation of ignis has no cuda array backend ({exc}); "
            "use device='cpu'"
        ) from None
    backend = _cuda_backend.create_backend(device)
    if not isinstance(backend, Backend):
        raise IgnisError(f"cuda backend factory returned {type(backend).__name__}, not a Backend")
    return backend


_BUILTIN: dict[str, Callable[[ArrayDevice], Backend]] = {"cpu": _cpu_factory, "cuda": _cuda_factory}
