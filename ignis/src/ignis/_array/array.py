"""NvArray: the ignis device array.

An NvArray is ``(storage, byte offset, shape, byte strides, dtype, device)``. Views
(``reshape``, ``transpose``, slicing, ...) share the storage; operations run on the backend of
the array's device (``cpu`` through NumPy, ``cuda`` through kernels). Operators broadcast like
NumPy and accept Python scalars, which are *weak* in dtype promotion: ``a_float16 * 2.0`` stays
float16.

Example::

    >>> import ignis
    >>> a = ignis.NvArray.from_host([[1.0, 2.0], [3.0, 4.0]], dtype="float32", device="cpu")
    >>> (a.T @ a + 1).to_host()
    array([[11., 15.],
           [15., 21.]], dtype=float32)
"""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import _dtypes as dt
from .._caches import PlanCache
from .._errors import ShapeError
from . import _layout
from ._device import ArrayDevice

if TYPE_CHECKING:
    from ._backend import Backend

__all__ = ["NvArray"]

Shape = tuple[int, ...]


class NvArray:
    """An n-dimensional array on a device ("cpu" or "cuda:N").

    Create one with :meth:`empty`, :meth:`zeros`, :meth:`ones`, :meth:`full`, :meth:`arange`,
    :meth:`from_host`, :func:`ignis.asarray` or :mod:`ignis.random`; direct construction is
    refused.

    Attributes: ``shape`` (tuple), ``dtype`` (:class:`ignis.DType`), ``ndim``, ``numel`` (also
    ``size``), ``nbytes``, ``itemsize``, ``strides`` (in bytes, as NumPy), ``device`` (a
    ``str`` such as ``"cuda:0"`` with ``.type`` and ``.index``), ``stream``.
    """

    __slots__ = (
        "_storage",
        "_offset",
        "_shape",
        "_strides",
        "_dtype",
        "_device",
        "_backend",
        "_stream",
        "__weakref__",
    )

    # NumPy must defer to our reflected operators instead of converting us to an ndarray.
    __array_ufunc__ = None
    __array_priority__ = 1000
    __hash__ = None  # type: ignore[assignment]  # == is elementwise

    def __init__(self, *args: Any, **kwargs: Any):
        raise TypeError(
            "NvArray cannot be constructed directly; use NvArray.empty/zeros/ones/full/arange/"
            "from_host, ignis.asarray or ignis.random"
        )

    @classmethod
    def _make(
        cls,
        storage: Any,
        offset: int,
        shape: Shape,
        strides: Shape,
        dtype: dt.DType,
        device: ArrayDevice,
        backend: Backend,
        stream: Any = None,
    ) -> NvArray:
        self = object.__new__(cls)
        self._storage = storage
        self._offset = offset
        self._shape = shape
        self._strides = strides
        self._dtype = dtype
        self._device = device
        self._backend = backend
        self._stream = stream
        return self

    def _view(self, offset: int, shape: Shape, strides: Shape) -> NvArray:
        view = _new_object(NvArray)
        view._storage = self._storage
        view._offset = offset
        view._shape = shape
        view._strides = strides
        view._dtype = self._dtype
        view._device = self._device
        view._backend = self._backend
        view._stream = self._stream
        return view

    # --- attributes ----------------------------------------------------------------------------

    @property
    def shape(self) -> Shape:
        """The size of each dimension, e.g. ``(2, 3)``."""
        return self._shape

    @property
    def dtype(self) -> dt.DType:
        """The element type, e.g. ``ignis.float32`` (compares equal to ``"float32"``)."""
        return self._dtype

    @property
    def ndim(self) -> int:
        return len(self._shape)

    @property
    def numel(self) -> int:
        """Number of elements (a property; ``size`` is the same)."""
        return _layout.numel(self._shape)

    size = numel

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return self._dtype.itemsize

    @property
    def nbytes(self) -> int:
        """Bytes the elements take (``numel * itemsize``), not the size of the storage."""
        return self.numel * self._dtype.itemsize

    @property
    def strides(self) -> Shape:
        """Bytes to step in each dimension (may be 0 for broadcast views, negative for reversed)."""
        return self._strides

    @property
    def device(self) -> ArrayDevice:
        """Where the memory lives: ``"cpu"`` or ``"cuda:N"`` (a ``str`` subclass)."""
        return self._device

    @property
    def stream(self) -> Any:
        """The stream this array's work is ordered on (None on the CPU)."""
        return self._stream

    @property
    def is_contiguous(self) -> bool:
        """True when the elements are dense in row-major order."""
        return _layout.is_c_contiguous(self._shape, self._strides, self._dtype.itemsize)

    @property
    def data_ptr(self) -> int:
        """Address of the first element (a device pointer on CUDA, a host address on the CPU)."""
        return self._backend.data_ptr(self)

    @property
    def T(self) -> NvArray:
        """The transpose (all axes reversed), a view."""
        return self._view(self._offset, self._shape[::-1], self._strides[::-1])

    @property
    def mT(self) -> NvArray:
        """The last two axes swapped (a stack of transposed matrices), a view."""
        if self.ndim < 2:
            raise ShapeError(f"mT: needs at least 2 dimensions, got shape {self._shape}")
        return self.swapaxes(-1, -2)

    # --- constructors (see _creation) -------------------------------------------------------------

    @classmethod
    def empty(cls, shape: Any, dtype: dt.DTypeLike | None = None, device: Any = None) -> NvArray:
        """An uninitialized array. Example: ``NvArray.empty((2, 3), dtype="float16")``."""
        return _creation.empty(shape, dtype=dtype, device=device)

    @classmethod
    def zeros(cls, shape: Any, dtype: dt.DTypeLike | None = None, device: Any = None) -> NvArray:
        """An array of zeros. Example: ``NvArray.zeros(4, device="cpu")``."""
        return _creation.zeros(shape, dtype=dtype, device=device)

    @classmethod
    def ones(cls, shape: Any, dtype: dt.DTypeLike | None = None, device: Any = None) -> NvArray:
        """An array of ones."""
        return _creation.ones(shape, dtype=dtype, device=device)

    @classmethod
    def full(
        cls, shape: Any, fill_value: Any, dtype: dt.DTypeLike | None = None, device: Any = None
    ) -> NvArray:
        """An array with every element ``fill_value``: ``NvArray.full((2,), 7, "int32")``."""
        return _creation.full(shape, fill_value, dtype=dtype, device=device)

    @classmethod
    def arange(
        cls,
        start: Any,
        stop: Any = None,
        step: Any = 1,
        dtype: dt.DTypeLike | None = None,
        device: Any = None,
    ) -> NvArray:
        """Evenly spaced values in ``[start, stop)`` (NumPy's arange)."""
        return _creation.arange(start, stop, step, dtype=dtype, device=device)

    @classmethod
    def from_host(
        cls, values: Any, shape: Any = None, dtype: dt.DTypeLike | None = None, device: Any = None
    ) -> NvArray:
        """A copy of host data (nested lists, NumPy arrays, scalars) on ``device``."""
        return _creation.from_host(values, shape=shape, dtype=dtype, device=device)

    # --- conversion ----------------------------------------------------------------------------

    def to_host(self) -> np.ndarray:
        """A NumPy copy (``ml_dtypes.bfloat16`` elements for bfloat16). Waits for pending work."""
        return self._backend.copyout(self)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        if self._device.type == "cpu" and copy is not True:
            from ._cpu_backend import host_view

            result = host_view(self)
        else:
            if copy is False:
                raise ValueError(
                    f"__array__: an array on {self._device} cannot become a NumPy array without "
                    "a copy (copy=False was requested)"
                )
            result = self.to_host()
        if dtype is not None and np.dtype(dtype) != result.dtype:
            if copy is False:
                raise ValueError(
                    f"__array__: converting {self._dtype.name} to {dtype} needs a copy"
                )
            result = result.astype(dtype)
        return result

    def tolist(self) -> Any:
        """Nested Python lists (floats, ints or bools); a 0-d array gives a scalar."""
        host = self.to_host()
        if self._dtype in (dt.float16, dt.bfloat16):
            host = host.astype(np.float32)
        return host.tolist()

    def item(self) -> Any:
        """The single element as a Python scalar (the array must have exactly one element)."""
        if self.numel != 1:
            raise ValueError(
                "item: only an array of one element converts to a Python scalar, got shape "
                f"{self._shape}"
            )
        value = self.to_host().reshape(-1)[0]
        if self._dtype.kind == "f":
            return float(value)
        if self._dtype.kind == "c":
            return complex(value)
        if self._dtype.kind == "b":
            return bool(value)
        return int(value)

    def __float__(self) -> float:
        return float(self.item())

    def __complex__(self) -> complex:
        return complex(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __bool__(self) -> bool:
        if self.numel != 1:
            raise ValueError(
                f"the truth value of an array with {self.numel} elements is ambiguous; use "
                "(a != 0).sum() or reductions"
            )
        return bool(self.item())

    def __index__(self) -> int:
        if self._dtype.kind not in "iu" or self.numel != 1 or self.ndim != 0:
            raise TypeError(
                "only 0-dimensional integer arrays can be used as an index, got "
                f"{self._dtype.name} array of shape {self._shape}"
            )
        return int(self.item())

    def __len__(self) -> int:
        if not self._shape:
            raise TypeError("len() of a 0-dimensional array")
        return self._shape[0]

    def __iter__(self) -> Any:
        if not self._shape:
            raise TypeError("iteration over a 0-dimensional array")
        return (self[i] for i in range(self._shape[0]))

    def __repr__(self) -> str:
        host = self.to_host()
        if self._dtype in (dt.float16, dt.bfloat16):
            host = host.astype(np.float32)
        body = np.array2string(host, separator=", ", prefix="NvArray(")
        return f"NvArray({body}, dtype={self._dtype.name}, device='{self._device}')"

    def __str__(self) -> str:
        host = self.to_host()
        if self._dtype in (dt.float16, dt.bfloat16):
            host = host.astype(np.float32)
        return str(host)

    def __reduce__(self) -> Any:
        # Pickles as host data; unpickling puts it back on the same device.
        return (_creation.from_host, (self.to_host(), None, self._dtype.name, str(self._device)))

    def __copy__(self) -> NvArray:
        return self.clone()

    def __deepcopy__(self, memo: Any) -> NvArray:
        return self.clone()

    # --- copies --------------------------------------------------------------------------------

    def clone(self) -> NvArray:
        """A contiguous copy on the same device."""
        out = _creation._new(self._shape, self._dtype, self._device)
        self._backend.copy(out, self)
        return out

    def contiguous(self) -> NvArray:
        """This array if it is row-major contiguous, otherwise a contiguous copy."""
        return self if self.is_contiguous else self.clone()

    def astype(self, dtype: dt.DTypeLike, copy: bool = True) -> NvArray:
        """A copy converted to ``dtype`` (this array when the dtype matches and ``copy=False``).

        Float to integer conversion of NaN, Inf or out-of-range values is undefined.
        """
        target = dt.as_dtype(dtype, "astype")
        if target is self._dtype and not copy:
            return self
        out = _creation._new(self._shape, target, self._device)
        self._backend.copy(out, self)
        return out

    def to(self, device: Any) -> NvArray:
        """This array on ``device`` (itself when already there, otherwise a copy)."""
        from ._device import as_device

        target = as_device(device)
        if target == self._device:
            return self
        out = _creation._new(self._shape, self._dtype, target)
        out._backend.copyin(out, self.to_host())
        return out

    def cpu(self) -> NvArray:
        """``self.to("cpu")``."""
        return self.to("cpu")

    def to_device(self, device: Any, /, *, stream: Any = None) -> NvArray:
        """The Array API's :meth:`to` (``stream`` is accepted and, as the copy synchronizes,
        not needed)."""
        return self.to(device)

    def __array_namespace__(self, /, *, api_version: str | None = None) -> Any:
        """The ``ignis`` module: the Array API namespace of this array (2024.12; 2023.12 and
        2022.12 are accepted too)."""
        if api_version not in (None, "2024.12", "2023.12", "2022.12"):
            raise ValueError(
                f"__array_namespace__: api_version {api_version!r} is not supported; "
                "expected '2024.12' (or '2023.12', '2022.12')"
            )
        import ignis

        return ignis

    def copy_(self, src: Any) -> NvArray:
        """Copy ``src`` (an NvArray on any device, host data or a scalar) into this array.

        ``src`` broadcasts to this array's shape and is converted to its dtype. Returns self.
        """
        return _ops._copy_into(self, src, "copy_")

    def fill_(self, value: Any) -> NvArray:
        """Set every element to the scalar ``value`` (converted to this dtype). Returns self."""
        return _ops._fill(self, value)

    # --- views ---------------------------------------------------------------------------------

    def reshape(self, *shape: Any) -> NvArray:
        """The same elements with a new shape (one dimension may be -1).

        A view when the layout allows, otherwise a copy. Example: ``a.reshape(2, -1)``.
        """
        if len(shape) == 1 and shape[0].__class__ is not int:
            if not isinstance(shape[0], (int, np.integer)):
                shape = shape[0]
        # Views of the same layout reshaped the same way are common (every layer of a model):
        # the outcome is remembered per (request, shape, strides, itemsize), for requests made
        # of plain ints only (a float or bool must still be refused by the full path; the
        # check is inlined: this runs for hundreds of views per training step).
        key = None
        if shape.__class__ is tuple:
            for v in shape:
                if v.__class__ is not int:
                    break
            else:
                key = (shape, self._shape, self._strides, self._dtype.itemsize)
                hit = _reshape_of(key)
                if hit is not None:
                    return self._view(self._offset, hit[0], hit[1])
        dims = _layout.normalize_shape_allow_unknown(shape, "reshape")
        new_shape = _layout.infer_reshape(self.numel, dims, self._shape, "reshape")
        if new_shape == self._shape:
            strides = self._strides
        else:
            strides = _layout.reshape_strides(self._shape, self._strides, new_shape, self.itemsize)
            if strides is None:
                base = self.clone()
                strides = _layout.contiguous_strides(new_shape, self.itemsize)
                return base._view(base._offset, new_shape, strides)
        if key is not None:
            _reshapes.remember(key, (new_shape, strides))
        return self._view(self._offset, new_shape, strides)

    def transpose(self, *axes: Any) -> NvArray:
        """Permute the axes (reverse them when none are given); a view.

        Example: ``a.transpose(1, 0, 2)`` or ``a.transpose((1, 0, 2))``.
        """
        if not axes:
            return self._view(self._offset, self._shape[::-1], self._strides[::-1])
        if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
            axes = tuple(axes[0])
        if not axes:
            perm = tuple(range(self.ndim - 1, -1, -1))
        else:
            perm = _permutation(axes, self.ndim, "transpose")
        return self._view(
            self._offset, tuple(self._shape[i] for i in perm), tuple(self._strides[i] for i in perm)
        )

    def permute(self, *dims: Any) -> NvArray:
        """Permute the axes to ``dims`` (all must be given); a view."""
        if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
            dims = tuple(dims[0])
        perm = _permutation(dims, self.ndim, "permute")
        return self._view(
            self._offset, tuple(self._shape[i] for i in perm), tuple(self._strides[i] for i in perm)
        )

    def swapaxes(self, axis1: int, axis2: int) -> NvArray:
        """Exchange two axes; a view."""
        from ._semantics import normalize_axis

        a = normalize_axis(axis1, self.ndim, "swapaxes")
        b = normalize_axis(axis2, self.ndim, "swapaxes")
        perm = list(range(self.ndim))
        perm[a], perm[b] = perm[b], perm[a]
        return self.transpose(perm)

    def squeeze(self, axis: Any = None) -> NvArray:
        """Drop size-1 axes (all of them, or those in ``axis``); a view."""
        from ._semantics import normalize_axes

        if axis is None:
            keep = [i for i, d in enumerate(self._shape) if d != 1]
        else:
            drop = normalize_axes(axis, self.ndim, "squeeze")
            for a in drop:
                if self._shape[a] != 1:
                    raise ShapeError(
                        f"squeeze: cannot remove axis {a} of size {self._shape[a]} from shape "
                        f"{self._shape}"
                    )
            keep = [i for i in range(self.ndim) if i not in drop]
        return self._view(
            self._offset, tuple(self._shape[i] for i in keep), tuple(self._strides[i] for i in keep)
        )

    def unsqueeze(self, axis: int) -> NvArray:
        """Insert a size-1 axis at ``axis`` (``-1`` appends); a view."""
        from ._semantics import normalize_axis

        a = normalize_axis(axis, self.ndim + 1, "unsqueeze")
        return self._view(
            self._offset,
            self._shape[:a] + (1,) + self._shape[a:],
            self._strides[:a] + (0,) + self._strides[a:],
        )

    expand_dims = unsqueeze

    def broadcast_to(self, shape: Any) -> NvArray:
        """A view with ``shape`` where broadcast axes have stride 0 (do not write through it)."""
        target = _layout.normalize_shape(shape, "broadcast_to")
        strides = _layout.broadcast_strides(self._shape, self._strides, target, "broadcast_to")
        return self._view(self._offset, target, strides)

    def __getitem__(self, key: Any) -> NvArray:
        """``self[key]``: basic indices (ints, slices, None, ``...``) give a view; integer
        arrays, boolean masks (n-d and 0-d, Python bools too) and lists of them give a copy,
        with NumPy's rules (:mod:`ignis._array._indexing`). A mask waits for the device once, to
        learn the result's size. Example: ``x[1:, None]``, ``x[idx, :, idx2]``, ``x[x > 0]``.
        """
        first = key[0] if key.__class__ is tuple and key else key
        if first.__class__ is list or (
            isinstance(first, NvArray) and (first.ndim or first._dtype.kind not in "iu")
        ):
            from . import _indexing  # an array (or list) first: a gather

            return _indexing.getitem(self, key)
        if key.__class__ is tuple:
            for k in key:
                c = k.__class__
                if c is int or c is slice or k is None:  # the common items, checked first
                    continue
                if c is list or c is bool or c is _np_bool or (
                    c is NvArray and (k.ndim or k._dtype.kind not in "iu")
                ):
                    from . import _indexing

                    return _indexing.getitem(self, key)
        elif key.__class__ is bool or key.__class__ is _np_bool:
            from . import _indexing

            return _indexing.getitem(self, key)
        delta, shape, strides = _layout.index_view(self._shape, self._strides, key)
        return self._view(self._offset + delta, shape, strides)

    def __setitem__(self, key: Any, value: Any) -> None:
        """``self[key] = value``; ``value`` (a scalar, host data or an NvArray) broadcasts to
        the shape of ``self[key]`` and is converted to this array's dtype. Through integer
        arrays and masks the elements are written in place (of repeated indices one assignment
        lands, which one is unspecified); a mask waits for the device once unless ``value`` is
        the same for every element it selects. Example: ``x[x < 0] = 0``, ``x[idx] = rows``.
        """
        for k in key if key.__class__ is tuple else (key,):
            c = k.__class__
            if c is int or c is slice or k is None:  # the common items, checked first
                continue
            if c is list or c is bool or c is _np_bool or (
                isinstance(k, NvArray) and (k.ndim or k._dtype.kind not in "iu")
            ):
                from . import _indexing

                _indexing.setitem(self, key, value)
                return
        _ops._copy_into(self[key], value, "__setitem__")

    # --- interop -------------------------------------------------------------------------------

    def __dlpack__(
        self,
        *,
        stream: Any = None,
        max_version: Any = None,
        dl_device: Any = None,
        copy: bool | None = None,
    ) -> Any:
        """Export as a DLPack capsule (zero-copy unless a copy or another device is asked)."""
        return _interop.to_dlpack(
            self, stream=stream, max_version=max_version, dl_device=dl_device, copy=copy
        )

    def __dlpack_device__(self) -> tuple[int, int]:
        return self._backend.dlpack_device()

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        """CUDA Array Interface v3 (only for arrays on a CUDA device)."""
        return _interop.cuda_array_interface(self)

    # --- operators -----------------------------------------------------------------------------

    # The element-wise operators (``+ - * / ** == != < <= > >=``, their reflected and in-place
    # forms, unary ``-`` and ``abs()``) and methods (``x.exp()``, ``x.maximum(y)``, ...) come from
    # the op table (``_op_table``; made in ``_ops``). A binary operator returns NotImplemented
    # for an operand of a foreign type (see ``_ops._foreign``), so that its own reflected method
    # runs: ``nvarray * tensor`` is ``Tensor.__rmul__``.

    def __matmul__(self, other: Any) -> NvArray:
        if _ops._foreign(other):
            return NotImplemented
        return _ops.matmul(self, other)

    def __rmatmul__(self, other: Any) -> NvArray:
        if _ops._foreign(other):
            return NotImplemented
        return _ops.matmul(other, self)

    # --- method forms of the functions ---------------------------------------------------------

    # The reductions and softmaxes (``x.sum()``, ``x.var(ddof=1)``, ``x.argmax()``,
    # ``x.softmax()``, ...) come from the reduction table (``_reduction_table``; made in
    # ``_ops``): each calls the functions' common body directly (``x.sum()`` is common).

    def clip(self, min: Any = None, max: Any = None) -> NvArray:
        return _ops.clip(self, min, max)

    def matmul(self, other: NvArray, **kwargs: Any) -> NvArray:
        return _ops.matmul(self, other, **kwargs)

    def repeat(self, repeats: Any, axis: int | None = None) -> NvArray:
        """Each element repeated ``repeats`` times along ``axis``: :func:`ignis.repeat`."""
        from . import _manipulation

        return _manipulation.repeat(self, repeats, axis=axis)

    # --- gather / scatter-add (see ignis.take, ignis.index_add) --------------------------------

    def take(self, indices: Any, axis: int = 0, *, check: bool = False) -> NvArray:
        """Elements picked along ``axis`` by integer ``indices``: :func:`ignis.take`."""
        from . import _indexing

        return _indexing.take(self, indices, axis, check=check)

    def index_add_(
        self,
        axis: int,
        indices: Any,
        src: NvArray,
        alpha: Any = 1,
        *,
        deterministic: bool = False,
        check: bool = False,
    ) -> NvArray:
        """``self[..., indices[j], ...] += alpha * src[..., j, ...]`` in place:
        :func:`ignis.index_add`. Returns self."""
        from . import _indexing

        return _indexing.index_add(
            self, axis, indices, src, alpha, deterministic=deterministic, check=check
        )


_new_object = object.__new__
_np_bool = np.bool_


_reshapes = PlanCache(
    "array.reshapes",
    4096,
    "reshape request and layout -> the view's shape and strides",
    counts_hits=False,
)
_permutations = PlanCache(
    "array.permutations",
    4096,
    "transpose/permute axes and ndim -> the normalized permutation",
    counts_hits=False,
)
# Their lookups, bound once: a method of a dict subclass is found through its type on each call.
_reshape_of = _reshapes.get
_permutation_of = _permutations.get


def _permutation(axes: Any, ndim: int, op: str) -> tuple[int, ...]:
    # The same few permutations recur (attention heads in and out of every layer): those given
    # as plain ints are remembered per (axes, ndim); anything else takes the checks below.
    key = None
    if axes.__class__ is tuple:
        for a in axes:
            if a.__class__ is not int:
                break
        else:
            key = (axes, ndim)
            hit = _permutation_of(key)
            if hit is not None:
                return hit
    norm = _check_permutation(axes, ndim, op)
    if key is not None:
        _permutations.remember(key, norm)
    return norm


def _check_permutation(axes: Any, ndim: int, op: str) -> tuple[int, ...]:
    try:
        perm = tuple(operator.index(a) for a in axes)
    except TypeError:
        raise ShapeError(f"{op}: axes must be ints, got {axes!r}") from None
    norm = tuple(a % ndim if -ndim <= a < ndim else -1 for a in perm) if ndim else perm
    if len(perm) != ndim or sorted(norm) != list(range(ndim)):
        raise ShapeError(f"{op}: axes {perm} are not a permutation of the {ndim} axes of the array")
    return norm


# Imported last: these modules use NvArray.
from . import _creation, _interop, _ops  # noqa: E402
