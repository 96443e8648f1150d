"""Vectorized float32 <-> float16 / bfloat16 conversions on raw 16-bit patterns.

The conversions work on the bits with integer arithmetic, the way the CUDA kernels do, and are
equal bit for bit to NumPy's ``float16`` and ``ml_dtypes``' ``bfloat16`` casts for every non-NaN
value:

* float32 -> 16 bits rounds to nearest, ties to even; values past the largest finite half
  become Inf; values below half the smallest subnormal become a signed zero; subnormal halves
  are produced exactly (float32 subnormals all round to zero in float16 and stay subnormal in
  bfloat16, whose exponent range is float32's).
* 16 bits -> float32 is exact for every pattern, including subnormals, Inf and NaN payloads.

NaN policy (float32 -> 16 bits): a NaN stays a NaN with its sign; it is made quiet (the top
mantissa bit is set) and keeps the top payload bits that fit (9 for float16, 6 for bfloat16).
This is what x86 F16C hardware does; NumPy's and ml_dtypes' software paths may pick another NaN
pattern, so only "NaN in, NaN out, same sign" is promised across implementations.

Example::

    >>> import numpy as np
    >>> bits = float32_to_float16_bits(np.array([1.0, 65520.0, 1e-8], np.float32))
    >>> [hex(b) for b in bits]
    ['0x3c00', '0x7c00', '0x0']
    >>> float16_bits_to_float32(bits)
    array([ 1., inf,  0.], dtype=float32)
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = [
    "float32_to_float16_bits",
    "float16_bits_to_float32",
    "float32_to_bfloat16_bits",
    "bfloat16_bits_to_float32",
    "to_bits",
    "from_bits",
]


def _f32_bits(x: Any) -> np.ndarray:
    """The uint32 patterns of ``x`` converted to float32 (as int64 so arithmetic cannot wrap)."""
    a = np.asarray(x, dtype=np.float32, order="C")
    return a.view(np.uint32).astype(np.int64)


def _shift_right_rne(value: np.ndarray, shift: np.ndarray | int) -> np.ndarray:
    """``value / 2**shift`` rounded to nearest, ties to even (value >= 0, shift >= 1)."""
    q = value >> shift
    rem = value - (q << shift)
    half = np.left_shift(1, shift) >> 1
    round_up = (rem > half) | ((rem == half) & ((q & 1) == 1))
    return q + round_up


def float32_to_float16_bits(x: Any) -> np.ndarray:
    """IEEE float16 bit patterns (uint16, same shape) of ``x`` rounded from float32.

    ``x`` is anything NumPy turns into an array; it is converted to float32 first.
    Example: ``float32_to_float16_bits([1.0, -2.0])`` -> ``array([0x3c00, 0xc000], uint16)``.
    """
    u = _f32_bits(x)
    sign = (u >> 16) & 0x8000
    exp = (u >> 23) & 0xFF
    man = u & 0x7FFFFF
    # Significand with the implicit bit; float32 subnormals (exp 0) have none.
    sig = np.where(exp != 0, man | 0x800000, man)
    # Normal halves (value >= 2**-14, exp >= 113): keep 10 mantissa bits; a rounding carry
    # moves into the exponent field, and up to 0x7c00 (Inf) when it overflows.
    normal = ((exp - 113) << 10) + _shift_right_rne(sig, 13)
    # Subnormal halves count in steps of 2**-24: value = sig * 2**(exp-150) -> sig >> (126-exp).
    # A shift of 25 or more leaves less than half a step: zero.
    sub_shift = np.clip(126 - np.maximum(exp, 1), 1, 25)
    subnormal = _shift_right_rne(sig, sub_shift)
    h = np.where(exp >= 113, normal, subnormal)
    h = np.where((exp >= 143) | (h >= 0x7C00), 0x7C00, h)
    nan = (exp == 0xFF) & (man != 0)
    h = np.where(nan, 0x7E00 | (man >> 13), h)
    return (sign | h).astype(np.uint16)


def float16_bits_to_float32(bits: Any) -> np.ndarray:
    """float32 values (same shape) of IEEE float16 bit patterns; exact for all 65536 patterns.

    Example: ``float16_bits_to_float32(np.uint16([0x3c00, 0x0001]))`` -> ``[1.0, 5.96e-08]``.
    """
    h = np.asarray(bits)
    if h.dtype != np.uint16:
        h = h.astype(np.uint16)
    h = h.astype(np.int64)
    sign = (h & 0x8000) << 16
    exp = (h >> 10) & 0x1F
    man = h & 0x3FF
    normal = ((exp + 112) << 23) | (man << 13)
    special = (0xFF << 23) | (man << 13)  # Inf and NaN keep their payload
    # Subnormal: value = man * 2**-24 with man in 1..1023; find the leading bit p (0..9).
    p = np.zeros_like(man)
    t = man.copy()
    for step in (8, 4, 2, 1):
        big = t >= (1 << step)
        p += np.where(big, step, 0)
        t = np.where(big, t >> step, t)
    subnormal = ((p + 103) << 23) | ((man << (23 - p)) & 0x7FFFFF)
    f = np.where(exp == 0x1F, special, normal)
    f = np.where(exp == 0, np.where(man == 0, 0, subnormal), f)
    return (sign | f).astype(np.uint32).view(np.float32)


def float32_to_bfloat16_bits(x: Any) -> np.ndarray:
    """bfloat16 bit patterns (uint16, same shape) of ``x`` rounded from float32.

    bfloat16 is the top half of a float32, so rounding is one add: the tie goes to the even
    upper half. Example: ``float32_to_bfloat16_bits([1.0])`` -> ``array([0x3f80], uint16)``.
    """
    u = _f32_bits(x)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    nan = ((u & 0x7F800000) == 0x7F800000) & ((u & 0x7FFFFF) != 0)
    return np.where(nan, (u >> 16) | 0x0040, rounded).astype(np.uint16)


def bfloat16_bits_to_float32(bits: Any) -> np.ndarray:
    """float32 values (same shape) of bfloat16 bit patterns (exact: a 16-bit shift)."""
    h = np.asarray(bits)
    if h.dtype != np.uint16:
        h = h.astype(np.uint16)
    return (h.astype(np.uint32) << 16).view(np.float32)


def to_bits(x: Any, dtype: str) -> np.ndarray:
    """``x`` rounded to ``dtype`` ("float16" or "bfloat16") as uint16 bit patterns."""
    name = str(dtype)
    if name == "float16":
        return float32_to_float16_bits(x)
    if name == "bfloat16":
        return float32_to_bfloat16_bits(x)
    raise ValueError(f"half.to_bits: dtype must be 'float16' or 'bfloat16', got {dtype!r}")


def from_bits(bits: Any, dtype: str) -> np.ndarray:
    """float32 values of ``dtype`` ("float16" or "bfloat16") bit patterns."""
    name = str(dtype)
    if name == "float16":
        return float16_bits_to_float32(bits)
    if name == "bfloat16":
        return bfloat16_bits_to_float32(bits)
    raise ValueError(f"half.from_bits: dtype must be 'float16' or 'bfloat16', got {dtype!r}")
