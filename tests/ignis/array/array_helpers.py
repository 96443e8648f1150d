"""Shared helpers of the NvArray tests: random data per dtype, per-dtype tolerances, exact
comparisons, and the stand-in GPU of tests/ignis/runtime/fake_gpu.py for the CUDA host paths."""

from __future__ import annotations

import struct
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import ignis

FLOATS = ["float16", "bfloat16", "float32", "float64"]
INTS = ["int8", "uint8", "int32", "int64"]
ALL = ["bool"] + INTS + FLOATS

# (rtol, atol) for one elementwise result rounded to the dtype (inputs already exact in it).
TOL = {
    "float16": (2e-3, 1e-3),
    "bfloat16": (1.6e-2, 1e-2),
    "float32": (2e-6, 1e-6),
    "float64": (1e-12, 1e-12),
}


# Products and sums (matmul, linear), with S the sum of the magnitudes of the terms (see
# bound_check): largest |error| / S per element, output rounding (2^-11, 2^-8 relative for the
# 16-bit types) plus accumulation in float32 (float64 for float64).
PRODUCT_TOL = {"float16": 1e-3, "bfloat16": 8e-3, "float32": 1e-5, "float64": 1e-12}


def np_dtype(name: str) -> np.dtype:
    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


def random_array(
    rng: np.random.Generator,
    shape: tuple,
    dtype: str,
    low: float = -4.0,
    high: float = 4.0,
    positive: bool = False,
) -> np.ndarray:
    """Random host data exactly representable in ``dtype`` (never all zeros)."""
    if dtype == "bool":
        out = rng.random(shape) < 0.5
        if out.size > 1:
            out.flat[0], out.flat[-1] = True, False
        return out
    if dtype in INTS:
        info = np.iinfo(dtype)
        lo = max(int(low * 8), int(info.min)) if not positive else 1
        hi = min(int(high * 8), int(info.max))
        return rng.integers(lo, hi + 1, size=shape).astype(dtype)
    x = rng.uniform(low, high, size=shape)
    if positive:
        x = np.abs(x) + 0.1
    return x.astype(np_dtype(dtype))


def uniform_array(rng: np.random.Generator, shape: tuple, dtype: str) -> np.ndarray:
    """Random host data of any dtype, exactly representable in it: integers uniform in
    [-100, 100] (clipped to the dtype's range), floats uniform in [-4, 4), complex numbers with
    both parts so, bools a fair coin. Unlike :func:`random_array` it takes complex dtypes and
    may give all zeros or all one bool.

    Example: ``uniform_array(rng, (4, 5), "int8")``."""
    d = np_dtype(dtype)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if d.kind in "iu":
        info = np.iinfo(d)
        return rng.integers(max(info.min, -100), min(info.max, 100) + 1, size=shape).astype(d)
    if d.kind == "c":
        return (rng.uniform(-4, 4, shape) + 1j * rng.uniform(-4, 4, shape)).astype(d)
    return rng.uniform(-4, 4, size=shape).astype(d)


def nv(values: Any, device: str, dtype: str | None = None) -> ignis.NvArray:
    """``values`` copied into an NvArray on ``device`` (a copy: on the CPU ``asarray`` would
    share the NumPy array the test compares against)."""
    return ignis.asarray(np.asarray(values), dtype=dtype, device=device, copy=True)


def assert_same(got: ignis.NvArray, want: Any) -> None:
    """Exact equality with ``want`` (an array or a scalar), shape and dtype included: for the
    ops that move elements and compute nothing."""
    host = got.to_host()
    want = np.asarray(want)
    assert host.shape == want.shape, (host.shape, want.shape)
    assert host.dtype == want.dtype, (host.dtype, want.dtype)
    if host.dtype == np_dtype("bfloat16"):  # NumPy compares bfloat16 through float32, exactly
        host, want = host.astype(np.float32), want.astype(np.float32)
    np.testing.assert_array_equal(host, want)


def to64(x: np.ndarray) -> np.ndarray:
    """Host data as float64 (bool/int too) for reference computations."""
    return np.asarray(x).astype(np.float64)


def host(a: ignis.NvArray) -> np.ndarray:
    return a.to_host()


def assert_close(
    actual: ignis.NvArray, expected: np.ndarray, dtype: str, scale: float = 1.0
) -> None:
    """Compare an NvArray to a float64 (or exact) reference with the tolerance of ``dtype``."""
    assert isinstance(actual, ignis.NvArray), type(actual)
    got = actual.to_host()
    assert got.shape == np.shape(expected), (got.shape, np.shape(expected))
    if dtype in FLOATS:
        rtol, atol = TOL[dtype]
        np.testing.assert_allclose(
            got.astype(np.float64),
            np.asarray(expected, np.float64),
            rtol=rtol * scale,
            atol=atol * scale,
            equal_nan=True,
        )
    else:
        np.testing.assert_array_equal(got, np.asarray(expected).astype(got.dtype))


class FakeCudaBackend:
    """Factory of a host-memory backend that calls itself "cuda" (tests of device handling
    and of __cuda_array_interface__ without a GPU)."""

    @staticmethod
    def create(device):
        from ignis._array._cpu_backend import CpuBackend

        class _Fake(CpuBackend):
            kind = "cuda"

            def dlpack_device(self):
                return (2, device.index)

            def cai_stream(self, arr):
                return 1

        return _Fake(device)


def bound_check(got: np.ndarray, ref: np.ndarray, scale: np.ndarray, tol: float,
                what: str = "") -> float:
    """Assert |got - ref| <= tol * scale elementwise (NaN where ref is NaN); return max err/S."""
    got = np.asarray(got, np.float64)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    nan = np.isnan(ref)
    assert np.array_equal(np.isnan(got), nan), f"{what}: NaN pattern differs"
    ok = ~nan
    err = np.abs(got[ok] - ref[ok])
    lim = tol * scale[ok]
    with np.errstate(invalid="ignore"):
        same_inf = np.isinf(ref[ok]) & (got[ok] == ref[ok])
    bad = ~((err <= lim) | same_inf)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise AssertionError(
            f"{what}: {int(bad.sum())} of {err.size} elements off; first: got {got[ok][i]!r}, "
            f"want {ref[ok][i]!r}, error {err[i]:.3g} > {tol} * S = {lim[i]:.3g}"
        )
    with np.errstate(invalid="ignore", divide="ignore"):
        rel = np.where(scale[ok] > 0, err / np.where(scale[ok] > 0, scale[ok], 1), 0)
    return float(rel.max()) if rel.size else 0.0


# --- the stand-in GPU ----------------------------------------------------------------------------

_RUNTIME_TESTS = str(Path(__file__).resolve().parents[1] / "runtime")  # fake_gpu.py lives there


def stand_in_gpu(monkeypatch: pytest.MonkeyPatch, *backend_modules: Any) -> Iterator[Any]:
    """The body of a fixture that runs a test on the stand-in GPU of
    tests/ignis/runtime/fake_gpu.py: its devices and driver installed (the test skips where a
    real GPU is present), and the library kernels of each CUDA backend module in
    ``backend_modules`` parsed from cuda_src/ instead of compiled, so that their launches are
    recorded, not run. Yields the stand-in (its ``launches``); uninstalls it afterwards.

    Example::

        @pytest.fixture
        def fake(monkeypatch):
            yield from stand_in_gpu(monkeypatch, cuda_sorting)
    """
    if _RUNTIME_TESTS not in sys.path:
        sys.path.insert(0, _RUNTIME_TESTS)
    import fake_gpu

    gpu = fake_gpu.install(monkeypatch)
    for module in backend_modules:
        monkeypatch.setattr(module, "library_kernel", fake_gpu._library_kernel)
    yield gpu
    fake_gpu.uninstall()


def arg_i64(v: bytes) -> int:
    """A recorded kernel argument (its bytes) as an int64."""
    return struct.unpack("<q", v)[0]


def arg_ptr(v: bytes) -> int:
    """A recorded kernel argument (its bytes) as a device pointer."""
    return struct.unpack("<Q", v)[0]
