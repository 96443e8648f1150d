"""Zero-copy exchange with other array libraries: DLPack and the CUDA Array Interface.

* DLPack (both directions, CPU and CUDA): ``NvArray.__dlpack__`` / ``__dlpack_device__`` and
  :func:`from_dlpack`. Capsules are built and read with ``ctypes`` (no C extension); both the
  versioned (DLPack >= 1.0, ``"dltensor_versioned"``) and the legacy (``"dltensor"``) forms are
  produced and consumed. bfloat16 travels as ``kDLBfloat``, complex64 / complex128 as
  ``kDLComplex`` with 64 / 128 bits (two float32 / float64 parts, real first).
* ``__cuda_array_interface__`` v3: produced for arrays on a CUDA device (the attribute does not
  exist on CPU arrays, so libraries probing for it fall back to DLPack), consumed by
  :func:`ignis.asarray`.

Ownership: an exported capsule keeps the NvArray (and so its storage) alive until the consumer
calls the DLPack deleter, or until the capsule dies unconsumed. An imported tensor's deleter
is called when the last NvArray viewing it is gone.
"""

from __future__ import annotations

import ctypes
import weakref
from typing import Any

import numpy as np

from .. import _dtypes as dt
from .._errors import DTypeError
from . import _layout
from ._backend import get_backend
from ._device import ArrayDevice, as_device
from .array import NvArray

__all__ = ["to_dlpack", "from_dlpack", "cuda_array_interface", "import_foreign"]

# --- DLPack structures (dlpack.h) --------------------------------------------------------------

_KDL_CPU, _KDL_CUDA, _KDL_CUDA_HOST, _KDL_CUDA_MANAGED = 1, 2, 3, 13
_KDL_INT, _KDL_UINT, _KDL_FLOAT, _KDL_BFLOAT, _KDL_COMPLEX, _KDL_BOOL = 0, 1, 2, 4, 5, 6
_FLAG_READ_ONLY = 1
_FLAG_IS_COPIED = 2
_DLPACK_VERSION = (1, 0)


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


_Deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _Deleter)]


class _DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("version", _DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", _Deleter),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", _DLTensor),
    ]


_NAME = b"dltensor"
_NAME_VERSIONED = b"dltensor_versioned"
_USED = b"used_dltensor"
_USED_VERSIONED = b"used_dltensor_versioned"

_api = ctypes.pythonapi
_CapsuleDestructor = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_PyCapsule_New = ctypes.PYFUNCTYPE(
    ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, _CapsuleDestructor
)(("PyCapsule_New", _api))
_IsValid_obj = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_IsValid", _api)
)
_IsValid_raw = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_IsValid", _api)
)
_GetPointer_obj = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", _api)
)
_GetPointer_raw = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", _api)
)
_SetName = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_SetName", _api)
)

# Exported tensors still alive: address of the managed struct -> (struct, shape, strides, array).
_exports: dict[int, tuple[Any, ...]] = {}


def _release_export(address: int) -> None:
    _exports.pop(address, None)


@_Deleter
def _export_deleter(address: int) -> None:
    # Called by the consumer when it no longer needs the memory.
    _release_export(address)


@_CapsuleDestructor
def _capsule_destructor(capsule: int) -> None:
    # Called when a capsule dies; if nobody consumed (renamed) it, the export is released here.
    for name in (_NAME_VERSIONED, _NAME):
        if _IsValid_raw(capsule, name):
            _release_export(_GetPointer_raw(capsule, name))
            return


def _dl_dtype(dtype: dt.DType) -> tuple[int, int]:
    if dtype is dt.bool_:
        return _KDL_BOOL, 8
    if dtype is dt.bfloat16:
        return _KDL_BFLOAT, 16
    code = {"i": _KDL_INT, "u": _KDL_UINT, "f": _KDL_FLOAT, "c": _KDL_COMPLEX}[dtype.kind]
    return code, dtype.bits


def _from_dl_dtype(code: int, bits: int, lanes: int) -> dt.DType:
    if lanes != 1:
        raise DTypeError(f"from_dlpack: vector dtypes (lanes={lanes}) are not supported")
    table = {
        (_KDL_BOOL, 8): dt.bool_,
        (_KDL_INT, 8): dt.int8,
        (_KDL_INT, 32): dt.int32,
        (_KDL_INT, 64): dt.int64,
        (_KDL_UINT, 8): dt.uint8,
        (_KDL_FLOAT, 16): dt.float16,
        (_KDL_FLOAT, 32): dt.float32,
        (_KDL_FLOAT, 64): dt.float64,
        (_KDL_BFLOAT, 16): dt.bfloat16,
        (_KDL_COMPLEX, 64): dt.complex64,
        (_KDL_COMPLEX, 128): dt.complex128,
    }
    found = table.get((code, bits))
    if found is None:
        raise DTypeError(
            f"from_dlpack: unsupported DLPack dtype (code {code}, {bits} bits); ignis supports "
            + ", ".join(d.name for d in dt.every_dtype)
        )
    return found


# --- export ------------------------------------------------------------------------------------


def to_dlpack(
    arr: NvArray,
    *,
    stream: Any = None,
    max_version: Any = None,
    dl_device: Any = None,
    copy: bool | None = None,
) -> Any:
    """The DLPack capsule of ``arr`` (see ``__dlpack__`` in the Python array API standard)."""
    copied = False
    own_device = arr._backend.dlpack_device()
    if dl_device is not None and tuple(dl_device) != own_device:
        if copy is False:
            raise BufferError(f"__dlpack__: exporting to device {tuple(dl_device)} needs a copy")
        if tuple(dl_device) != (_KDL_CPU, 0):
            raise BufferError(f"__dlpack__: cannot export to DLPack device {tuple(dl_device)}")
        arr = arr.to("cpu")
        copied = True
    if copy:
        arr = arr.clone()
        copied = True
    arr._backend.dlpack_export_sync(arr, stream)

    ndim = arr.ndim
    itemsize = arr.itemsize
    shape = (ctypes.c_int64 * max(ndim, 1))(*arr.shape)
    strides = (ctypes.c_int64 * max(ndim, 1))(*(s // itemsize for s in arr.strides))
    code, bits = _dl_dtype(arr.dtype)
    versioned = max_version is not None and tuple(max_version)[0] >= 1
    managed: Any = _DLManagedTensorVersioned() if versioned else _DLManagedTensor()
    t = managed.dl_tensor
    t.data = arr.data_ptr
    dev_type, dev_id = arr._backend.dlpack_device()
    t.device = _DLDevice(dev_type, dev_id)
    t.ndim = ndim
    t.dtype = _DLDataType(code, bits, 1)
    t.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
    t.strides = ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64))
    t.byte_offset = 0
    managed.manager_ctx = None
    managed.deleter = _export_deleter
    if versioned:
        managed.version = _DLPackVersion(*_DLPACK_VERSION)
        managed.flags = _FLAG_IS_COPIED if copied else 0
    address = ctypes.addressof(managed)
    _exports[address] = (managed, shape, strides, arr)
    return _PyCapsule_New(address, _NAME_VERSIONED if versioned else _NAME, _capsule_destructor)


# --- import ------------------------------------------------------------------------------------


class _ImportedTensor:
    """Owns a consumed DLPack tensor: calls its deleter when the last view is gone."""

    def __init__(self, address: int, deleter: Any):
        self.address = address
        self._finalizer = weakref.finalize(self, _call_deleter, deleter, address)


def _call_deleter(deleter: Any, address: int) -> None:
    if deleter:
        deleter(address)


def _device_of(dev_type: int, dev_id: int) -> ArrayDevice:
    if dev_type in (_KDL_CPU, _KDL_CUDA_HOST):
        return as_device("cpu")
    if dev_type in (_KDL_CUDA, _KDL_CUDA_MANAGED):
        return as_device(f"cuda:{dev_id}")
    raise BufferError(f"from_dlpack: unsupported DLPack device type {dev_type}")


def from_dlpack(obj: Any, *, device: Any = None, copy: bool | None = None) -> NvArray:
    """An NvArray sharing the memory of ``obj`` (a PyTorch tensor, CuPy/NumPy/JAX array, ...).

    ``obj`` must implement ``__dlpack__`` and ``__dlpack_device__``. ``copy=True`` copies;
    ``device`` moves the result (a copy) when it differs from the source's device.
    Example: ``ignis.from_dlpack(torch.arange(4.0, device="cuda"))``.
    """
    if isinstance(obj, NvArray):
        from ._creation import asarray

        return asarray(obj, device=device, copy=copy)
    if not hasattr(obj, "__dlpack__") or not hasattr(obj, "__dlpack_device__"):
        raise TypeError(
            f"from_dlpack: {type(obj).__name__} does not implement __dlpack__/__dlpack_device__"
        )
    src_device = _device_of(*(int(v) for v in obj.__dlpack_device__()))
    backend = get_backend(src_device)
    stream = backend.dlpack_import_stream()
    try:
        capsule = obj.__dlpack__(stream=stream, max_version=_DLPACK_VERSION)
    except TypeError:  # a producer that predates DLPack 1.0 keywords
        capsule = obj.__dlpack__(stream=stream) if stream is not None else obj.__dlpack__()
    arr = _consume(capsule, src_device, copy)
    if device is not None and as_device(device) != arr.device:
        if copy is False:
            raise ValueError(f"from_dlpack: moving from {arr.device} to {device} needs a copy")
        arr = arr.to(device)
    return arr


def _consume(capsule: Any, device: ArrayDevice, copy: bool | None) -> NvArray:
    if _IsValid_obj(capsule, _NAME_VERSIONED):
        address = _GetPointer_obj(capsule, _NAME_VERSIONED)
        managed: Any = _DLManagedTensorVersioned.from_address(address)
        read_only = bool(managed.flags & _FLAG_READ_ONLY)
        used = _USED_VERSIONED
    elif _IsValid_obj(capsule, _NAME):
        address = _GetPointer_obj(capsule, _NAME)
        managed = _DLManagedTensor.from_address(address)
        read_only = False
        used = _USED
    else:
        raise BufferError("from_dlpack: not a DLPack capsule, or one that was already consumed")
    t = managed.dl_tensor
    dtype = _from_dl_dtype(t.dtype.code, t.dtype.bits, t.dtype.lanes)
    ndim = int(t.ndim)
    shape = tuple(int(t.shape[i]) for i in range(ndim))
    itemsize = dtype.itemsize
    if t.strides:
        strides = tuple(int(t.strides[i]) * itemsize for i in range(ndim))
    else:
        strides = _layout.contiguous_strides(shape, itemsize)
    data = int(t.data or 0) + int(t.byte_offset)
    # Taking ownership: from here on the producer's capsule destructor must not free it.
    _SetName(capsule, used)
    owner = _ImportedTensor(address, managed.deleter)
    if read_only and copy is False:
        raise BufferError("from_dlpack: the tensor is read-only and copy=False was requested")
    backend = get_backend(device)
    if _layout.numel(shape) == 0:
        from ._creation import _new

        return _new(shape, dtype, device)
    lo, hi = _layout.byte_extent(data, shape, strides, itemsize)
    storage = backend.wrap_external(lo, hi - lo, owner)
    arr = NvArray._make(
        storage, data - lo, shape, strides, dtype, device, backend, backend.default_stream()
    )
    return arr.clone() if (copy or read_only) else arr


# --- CUDA Array Interface ----------------------------------------------------------------------


def cuda_array_interface(arr: NvArray) -> dict[str, Any]:
    """The ``__cuda_array_interface__`` (v3) dict of a CUDA array; AttributeError otherwise."""
    if arr.device.type != "cuda":
        raise AttributeError(
            f"__cuda_array_interface__ exists only for arrays on a CUDA device; this array is on "
            f"{arr.device} (use __dlpack__ or to_host())"
        )
    if arr.dtype is dt.bfloat16:
        raise AttributeError(
            "__cuda_array_interface__ has no type string for bfloat16; exchange it with DLPack"
        )
    typestr = arr.dtype.numpy.str
    return {
        "shape": arr.shape,
        "typestr": typestr,
        "descr": [("", typestr)],
        "data": (arr.data_ptr if arr.numel else 0, False),
        "strides": None if arr.is_contiguous else arr.strides,
        "version": 3,
        "stream": arr._backend.cai_stream(arr),
    }


def _from_cai(obj: Any, cai: dict[str, Any], device: ArrayDevice | None) -> NvArray:
    dev = device if device is not None and device.type == "cuda" else as_device("cuda:0")
    backend = get_backend(dev)
    if cai.get("mask") is not None:
        raise BufferError("asarray: masked __cuda_array_interface__ arrays are not supported")
    dtype = dt.as_dtype(np.dtype(cai["typestr"]), "asarray")
    shape = tuple(int(d) for d in cai["shape"])
    strides = cai.get("strides")
    strides = (
        _layout.contiguous_strides(shape, dtype.itemsize)
        if strides is None
        else tuple(int(s) for s in strides)
    )
    ptr, _read_only = cai["data"]
    backend.cai_import_sync(cai.get("stream"))
    if _layout.numel(shape) == 0:
        from ._creation import _new

        return _new(shape, dtype, dev)
    lo, hi = _layout.byte_extent(int(ptr), shape, strides, dtype.itemsize)
    storage = backend.wrap_external(lo, hi - lo, obj)
    return NvArray._make(
        storage, int(ptr) - lo, shape, strides, dtype, dev, backend, backend.default_stream()
    )


def import_foreign(obj: Any, device: ArrayDevice | None) -> NvArray | None:
    """Zero-copy import of a DLPack or CUDA-Array-Interface object, or None if it is neither."""
    if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):
        return from_dlpack(obj)
    try:
        cai = obj.__cuda_array_interface__
    except AttributeError:
        return None
    return _from_cai(obj, cai, device)
