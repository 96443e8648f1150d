"""concatenate and stack against NumPy."""

from __future__ import annotations

import numpy as np
import pytest
from array_helpers import ALL, np_dtype, random_array

import ignis
from ignis import NvArray


@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concatenate_matches_numpy(device: str, dtype: str, axis: int, rng) -> None:
    xs = [
        random_array(rng, (2, 3, 4), dtype),
        random_array(rng, (2, 3, 4), dtype)[:, ::-1],
        random_array(rng, (2, 3, 4), dtype),
    ]
    arrays = [
        NvArray.from_host(xs[0], device=device),
        NvArray.from_host(xs[1][:, ::-1], device=device)[:, ::-1],
        NvArray.from_host(xs[2], device=device).T.T,
    ]
    out = ignis.concatenate(arrays, axis=axis)
    ref = np.concatenate(xs, axis=axis)
    assert out.dtype == dtype and out.shape == ref.shape
    np.testing.assert_array_equal(out.to_host(), ref)


def test_concatenate_uneven_empty_and_promotion(device: str, rng) -> None:
    a = NvArray.from_host(random_array(rng, (2, 3), "int8"), device=device)
    b = NvArray.from_host(random_array(rng, (4, 3), "float16"), device=device)
    e = ignis.zeros((0, 3), dtype="bool", device=device)
    out = ignis.concatenate([a, e, b])
    assert out.dtype == "float16" and out.shape == (6, 3)
    np.testing.assert_array_equal(
        out.to_host(), np.concatenate([a.to_host(), b.to_host()]).astype(np.float16)
    )
    assert ignis.concatenate([e, e]).shape == (0, 3)
    assert ignis.concatenate((a,)).to_host().tolist() == a.to_host().tolist()


@pytest.mark.parametrize("dtype", ["bool", "int64", "bfloat16", "float32"])
@pytest.mark.parametrize("axis", [0, 1, 2, -1, -3])
def test_stack_matches_numpy(device: str, dtype: str, axis: int, rng) -> None:
    xs = [random_array(rng, (3, 4), dtype) for _ in range(3)]
    out = ignis.stack([NvArray.from_host(x, device=device) for x in xs], axis=axis)
    ref = np.stack(xs, axis=axis)
    assert out.shape == ref.shape and out.dtype.numpy == np_dtype(dtype)
    np.testing.assert_array_equal(out.to_host(), ref)


def test_joining_errors(device: str) -> None:
    a, b = ignis.zeros((2, 3), device=device), ignis.zeros((2, 4), device=device)
    with pytest.raises(
        ignis.ShapeError,
        match=r"concatenate: sizes must match except along axis 0; array 0 has shape \(2, 3\) "
        r"and array 1 has shape \(2, 4\)",
    ):
        ignis.concatenate([a, b])
    assert ignis.concatenate([a, b], axis=1).shape == (2, 7)
    with pytest.raises(ignis.ShapeError, match="same number of dimensions"):
        ignis.concatenate([a, ignis.zeros(3, device=device)])
    with pytest.raises(ignis.ShapeError, match="concatenate: needs at least one array"):
        ignis.concatenate([])
    with pytest.raises(ignis.ShapeError, match="zero-dimensional arrays cannot be concatenated"):
        ignis.concatenate([ignis.zeros((), device=device)])
    with pytest.raises(ignis.ShapeError, match="concatenate: axis 2 is out of range"):
        ignis.concatenate([a, a], axis=2)
    with pytest.raises(
        ignis.ShapeError,
        match=r"stack: all arrays must have the same shape; array 0 has shape \(2, 3\) and "
        r"array 1 has shape \(2, 4\)",
    ):
        ignis.stack([a, b])
    with pytest.raises(ignis.ShapeError, match="stack: axis 3 is out of range"):
        ignis.stack([a, a], axis=3)
    with pytest.raises(TypeError, match="concatenate: expected an NvArray"):
        ignis.concatenate([a, np.zeros((2, 3))])
