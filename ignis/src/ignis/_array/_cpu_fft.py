"""The CPU implementations of the ``fft_*`` kernel families: ``numpy.fft`` on host views.

NumPy 2 transforms float32/complex64 in single precision (pocketfft), as cuFFT does on the GPU;
the results are written into the outputs' host views in their dtypes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ._cpu_backend import host_view

if TYPE_CHECKING:
    from .array import NvArray

__all__ = ["c2c", "r2c", "c2r"]


def c2c(out: NvArray, x: NvArray, forward: bool) -> None:
    h = host_view(x)
    # norm="forward" puts 1/n on the forward transform only: the inverse is left unscaled
    host_view(out)[...] = (
        np.fft.fft(h, axis=-1) if forward else np.fft.ifft(h, axis=-1, norm="forward")
    )


def r2c(out: NvArray, x: NvArray) -> None:
    host_view(out)[...] = np.fft.rfft(host_view(x), axis=-1)


def c2r(out: NvArray, x: NvArray) -> None:
    n = out.shape[-1]
    host_view(out)[...] = np.fft.irfft(host_view(x), n=n, axis=-1, norm="forward")
