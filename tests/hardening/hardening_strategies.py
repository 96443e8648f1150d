"""Hypothesis strategies and reference helpers shared by the property-based tests."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
from hypothesis import strategies as st

import ignis

FLOATS = ("float16", "bfloat16", "float32", "float64")
INTS = ("int8", "uint8", "int32", "int64")
ALL = ("bool",) + INTS + FLOATS

# (rtol, atol) of a result rounded once to the dtype, compared with a float64 reference.
TOL = {
    "float16": (4e-3, 2e-3),
    "bfloat16": (3e-2, 2e-2),
    "float32": (1e-5, 1e-5),
    "float64": (1e-12, 1e-12),
}
INVALID = (ignis.IgnisError, ValueError, TypeError, IndexError)


def np_dtype(name: str) -> np.dtype:
    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


def tol(*dtypes: str) -> tuple[float, float]:
    """The loosest tolerance of the floating dtypes involved (exact for integers)."""
    pairs = [TOL[d] for d in dtypes if d in TOL]
    if not pairs:
        return 0.0, 0.0
    return max(p[0] for p in pairs), max(p[1] for p in pairs)


shapes = st.lists(st.integers(0, 5), min_size=0, max_size=4).map(tuple)
nonempty_shapes = st.lists(st.integers(1, 5), min_size=0, max_size=4).map(tuple)


def host_values(
    shape: tuple[int, ...], dtype: str, seed: int, positive: bool = False
) -> np.ndarray:
    """Random values exactly representable in ``dtype`` (small, never all zeros)."""
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype in INTS:
        lo = 1 if positive else (0 if dtype == "uint8" else -9)
        return rng.integers(lo, 10, size=shape).astype(dtype)
    x = rng.uniform(-3, 3, size=shape)
    if positive:
        x = np.abs(x) + 0.25
    return x.astype(np_dtype(dtype))


def make(host: np.ndarray, dtype: str, device: str) -> ignis.NvArray:
    return ignis.from_host(host, dtype=dtype, device=device)


def check_close(got: ignis.NvArray, expected: np.ndarray, rtol: float, atol: float) -> None:
    g = got.to_host()
    assert g.shape == np.shape(expected), (g.shape, np.shape(expected))
    np.testing.assert_allclose(
        g.astype(np.float64),
        np.asarray(expected, dtype=np.float64),
        rtol=rtol,
        atol=atol,
        equal_nan=True,
    )


def still_works(device: str) -> None:
    """A valid op after an invalid one gives the right answer (no error leaked into it)."""
    x = ignis.from_host(np.arange(7.0), dtype="float32", device=device)
    np.testing.assert_array_equal((x * 2 + 1).to_host(), np.arange(7.0) * 2 + 1)


@st.composite
def broadcastable_pair(draw: Any) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Two shapes that broadcast together (sizes 0..4, 0..4 dims)."""
    out = draw(st.lists(st.integers(0, 4), min_size=0, max_size=4))
    a, b = [], []
    for d in out:
        a.append(d if draw(st.booleans()) else 1)
        b.append(d if draw(st.booleans()) else 1)
    a = a[draw(st.integers(0, len(a))) :]
    b = b[draw(st.integers(0, len(b))) :]
    return tuple(a), tuple(b)


@st.composite
def incompatible_pair(draw: Any) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Two shapes that do not broadcast: one axis of sizes m != n, both > 1 ... or 0 vs 2+."""
    a, b = draw(broadcastable_pair())
    m = draw(st.integers(2, 5))
    n = draw(st.integers(0, 5).filter(lambda v: v not in (1, m)))
    return a + (m,), b + (n,)


@st.composite
def basic_index(draw: Any, shape: tuple[int, ...]) -> tuple[Any, ...]:
    """A basic index of ``shape``: slices with steps (negative too), ints, None, Ellipsis."""
    key: list[Any] = []
    for n in shape:
        kind = draw(st.sampled_from(["slice", "slice", "int", "all"]))
        if kind == "int" and n > 0:
            key.append(draw(st.integers(-n, n - 1)))
        elif kind == "slice":
            start = draw(st.none() | st.integers(-n - 2, n + 2))
            stop = draw(st.none() | st.integers(-n - 2, n + 2))
            step = draw(st.none() | st.integers(-3, 3).filter(lambda s: s != 0))
            key.append(slice(start, stop, step))
        else:
            key.append(slice(None))
    if key and draw(st.booleans()):
        key.insert(draw(st.integers(0, len(key))), None)
    if draw(st.booleans()) and key:
        cut = draw(st.integers(0, len(key)))
        key = key[:cut] + [Ellipsis]
    return tuple(key)
