"""The CUDA implementations of the ``fft_*`` kernel families: cuFFT's batched 1-D plans.

Each call takes the calling thread's plan of ``(device, type, n, batch)`` (:mod:`ignis._cufft`
makes and keeps it), binds it to the backend's stream and executes out of place: the work is
ordered like every other op on that stream and nothing waits for the GPU.
"""

from __future__ import annotations

from typing import Any

from ... import _cufft
from ... import _dtypes as dt
from ..._device import activate
from ..array import NvArray
from .linalg import _cuda_major, _ptr

__all__ = ["c2c", "r2c", "c2r"]

_SINGLE = (dt.float32, dt.complex64)


def _execute(
    backend: Any, op: str, kind: int, n: int, batch: int, out: NvArray, x: NvArray, *direction: int
) -> None:
    lib = _cufft.require(op, _cuda_major())
    gpu = backend.gpu
    activate(gpu)
    plan, kept = lib.plan(gpu.ordinal, kind, n, batch)
    stream = backend.stream
    lib.call("cufftSetStream", plan, stream.ptr)
    lib.call(_cufft.EXEC[kind], plan, _ptr(x), _ptr(out), *direction)
    if not kept:  # a one-off plan: its work area must outlive the queued transform
        stream.synchronize()
        lib.release(plan)


def c2c(backend: Any, out: NvArray, x: NvArray, forward: bool) -> None:
    batch, n = x.shape
    kind = _cufft.C2C if x.dtype in _SINGLE else _cufft.Z2Z
    direction = _cufft.FORWARD if forward else _cufft.INVERSE
    _execute(backend, "fft", kind, n, batch, out, x, direction)


def r2c(backend: Any, out: NvArray, x: NvArray) -> None:
    batch, n = x.shape
    kind = _cufft.R2C if x.dtype in _SINGLE else _cufft.D2Z
    _execute(backend, "fft.rfft", kind, n, batch, out, x)


def c2r(backend: Any, out: NvArray, x: NvArray) -> None:
    batch, n = out.shape
    kind = _cufft.C2R if x.dtype in _SINGLE else _cufft.Z2D
    _execute(backend, "fft.irfft", kind, n, batch, out, x)
