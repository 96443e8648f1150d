"""Vectorized math functions NumPy lacks (erf, sigmoid, gelu, silu), for the CPU backend, and
the complex ``expm1`` / ``tanh`` with the Array API standard's special cases where NumPy's
differ (complex input only: the op table keeps NumPy's functions for real input).

``erf`` is computed in float64 to about 1 ulp: a positive-term series
``erf(x) = 2/sqrt(pi) * exp(-x^2) * sum_n (2x^2)^n x / (1*3*...*(2n+1))`` for ``|x| <= 3`` (no
cancellation), the Laplace continued fraction of ``erfc`` for ``3 < |x| < 6``, and 1 beyond
(``erfc(6) < 2.2e-17``, below half an ulp of 1).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["erf", "sigmoid", "silu", "gelu", "complex_expm1", "complex_tanh"]

_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
_ONE_OVER_SQRT_PI = 1.0 / math.sqrt(math.pi)
_SERIES_TERMS = 60  # enough for |x| <= 3: the last term is below 1e-25 of the sum
_FRACTION_TERMS = 80  # enough for |x| > 3 to 1e-12 relative in erfc, itself < 2.3e-5


def erf(x: np.ndarray) -> np.ndarray:
    """The error function of ``x`` in float64 (NaN stays NaN, +-Inf give +-1)."""
    x = np.asarray(x, dtype=np.float64)
    ax = np.abs(x)
    out = np.ones_like(ax)
    small = ax <= 3.0
    if small.any():
        xs = ax[small]
        x2 = xs * xs
        term = xs.copy()
        total = xs.copy()
        for n in range(1, _SERIES_TERMS):
            term *= (2.0 * x2) / (2 * n + 1)
            total += term
        out[small] = _TWO_OVER_SQRT_PI * np.exp(-x2) * total
    mid = (ax > 3.0) & (ax < 6.0)
    if mid.any():
        xm = ax[mid]
        frac = np.zeros_like(xm)
        for k in range(_FRACTION_TERMS, 0, -1):
            frac = (0.5 * k) / (xm + frac)
        out[mid] = 1.0 - np.exp(-xm * xm) * _ONE_OVER_SQRT_PI / (xm + frac)
    out = np.where(np.isnan(x), np.nan, out)
    return np.copysign(out, x)


def sigmoid(x: np.ndarray) -> np.ndarray:
    """``1 / (1 + exp(-x))`` without overflow for large ``|x|`` (same dtype as ``x``)."""
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype, copy=False)


def silu(x: np.ndarray) -> np.ndarray:
    return x * sigmoid(x)


_GELU_C = math.sqrt(2.0 / math.pi)


def gelu(x: np.ndarray, approximate: str) -> np.ndarray:
    """GELU: ``x * Phi(x)`` exactly (``approximate="none"``) or with the tanh formula."""
    if approximate == "tanh":
        c = x.dtype.type(_GELU_C)
        inner = c * (x + x.dtype.type(0.044715) * x * x * x)
        return (x.dtype.type(0.5) * x * (1 + np.tanh(inner))).astype(x.dtype, copy=False)
    phi = 0.5 * (1.0 + erf(x.astype(np.float64) / math.sqrt(2.0)))
    return (x * phi).astype(x.dtype, copy=False)


# --- complex expm1 and tanh: the standard's special cases ----------------------------------------


def complex_expm1(x: np.ndarray) -> np.ndarray:
    """``e ** x - 1`` of complex ``x``, accurate near 0 and with the standard's special cases
    (``expm1(+-0 + 0j) = 0 + 0j``, ``expm1(+inf + 0j) = +inf + 0j``, ``expm1(-inf + i y) = -1 + 0j``
    for infinite or NaN ``y``, ...), where NumPy gives NaN parts.

    Example: ``complex_expm1(numpy.array([complex(inf, 0)]))`` is ``[inf + 0j]``.
    """
    z = np.asarray(x)
    re, im = z.real, z.imag
    with np.errstate(all="ignore"):
        out = np.expm1(z)
        # |z| < 1: expm1(re) cos(im) - 2 sin^2(im / 2) + i exp(re) sin(im), no cancellation
        half = np.sin(im * 0.5)
        small_re = np.expm1(re) * np.cos(im) - 2 * half * half
        small = (np.abs(re) < 1) & (np.abs(im) < 1)
        out_re = np.where(small, small_re, out.real)
        out_im = np.where(small, np.exp(re) * np.sin(im), out.imag)
        on_axis = im == 0  # the real axis: expm1(re) with im's signed zero (+-0 gives +0)
        out_re = np.where(on_axis, np.where(re == 0, 0.0, np.expm1(re)), out_re)
        out_im = np.where(on_axis, im, out_im)
        wild = ~np.isfinite(im)  # im infinite or NaN
        out_re = np.where(wild, np.where(re == -np.inf, -1.0, np.where(re == np.inf, re, np.nan)),
                          out_re)
        out_im = np.where(wild, np.where(re == -np.inf, 0.0, np.nan), out_im)
    res = np.empty(z.shape, z.dtype)
    res.real, res.imag = out_re, out_im
    return res


def complex_tanh(x: np.ndarray) -> np.ndarray:
    """Hyperbolic tangent of complex ``x``; an infinite real part gives ``+-1 + 0j`` signed by
    the imaginary part (the standard's), where NumPy may give ``-0j`` or NaN.

    Example: ``complex_tanh(numpy.array([complex(inf, 2.0)]))`` is ``[1 + 0j]``.
    """
    z = np.asarray(x)
    with np.errstate(all="ignore"):
        out = np.tanh(z)
        inf = np.isinf(z.real)
        if inf.any():
            out = np.array(out, copy=True)
            out.real = np.where(inf, np.copysign(1.0, z.real), out.real)
            out.imag = np.where(inf, np.copysign(0.0, z.imag), out.imag)
    return out
