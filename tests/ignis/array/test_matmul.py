"""matmul: batched, broadcast batch dims, transpose flags, alpha/beta, out=, every float dtype."""

from __future__ import annotations

import numpy as np
import pytest
from array_helpers import FLOATS, TOL, random_array, to64

import ignis
from ignis import NvArray

SHAPES = [
    ((3, 4), (4, 5)),
    ((1, 1), (1, 1)),
    ((4,), (4, 3)),
    ((3, 4), (4,)),
    ((4,), (4,)),
    ((2, 3, 4), (4, 5)),
    ((3, 4), (2, 4, 5)),
    ((2, 1, 3, 4), (5, 4, 2)),
    ((0, 4), (4, 3)),
    ((3, 0), (0, 2)),
    ((2, 0, 3), (3, 4)),
    ((7, 33), (33, 65)),
]


def check(out: NvArray, ref: np.ndarray, dtype: str, k: int) -> None:
    rtol, atol = TOL[dtype]
    got = out.to_host()
    assert got.shape == ref.shape
    # accumulation over k terms of magnitude <= 16
    np.testing.assert_allclose(
        got.astype(np.float64), ref, rtol=rtol * 4, atol=atol * 4 + 16 * k * atol * 0.01
    )


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shapes", SHAPES, ids=[f"{a}@{b}" for a, b in SHAPES])
def test_matmul_matches_numpy(device: str, dtype: str, shapes, rng) -> None:
    sa, sb = shapes
    x, y = random_array(rng, sa, dtype), random_array(rng, sb, dtype)
    a, b = NvArray.from_host(x, device=device), NvArray.from_host(y, device=device)
    out = a @ b
    ref = np.matmul(to64(x), to64(y))
    assert out.dtype == dtype and out.shape == ref.shape
    check(out, ref, dtype, sa[-1])
    np.testing.assert_array_equal(ignis.matmul(a, b).to_host(), out.to_host())
    np.testing.assert_array_equal(a.matmul(b).to_host(), out.to_host())


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
def test_transpose_flags_and_views(device: str, dtype: str, ta: bool, tb: bool, rng) -> None:
    m, k, n = 5, 6, 7
    x = random_array(rng, (2, k, m) if ta else (2, m, k), dtype)
    y = random_array(rng, (n, k) if tb else (k, n), dtype)
    a, b = NvArray.from_host(x, device=device), NvArray.from_host(y, device=device)
    out = ignis.matmul(a, b, transpose_a=ta, transpose_b=tb)
    xr = np.swapaxes(to64(x), -1, -2) if ta else to64(x)
    yr = to64(y).T if tb else to64(y)
    check(out, xr @ yr, dtype, k)
    # the same product through transposed views
    av = a.mT if ta else a
    bv = b.T if tb else b
    check(av @ bv, xr @ yr, dtype, k)


@pytest.mark.parametrize("dtype", FLOATS)
def test_alpha_beta_out(device: str, dtype: str, rng) -> None:
    x, y = random_array(rng, (3, 4), dtype), random_array(rng, (4, 5), dtype)
    c0 = random_array(rng, (3, 5), dtype)
    a, b = NvArray.from_host(x, device=device), NvArray.from_host(y, device=device)
    c = NvArray.from_host(c0, device=device)
    r = ignis.matmul(a, b, alpha=0.5, beta=2.0, out=c)
    assert r is c
    check(c, 0.5 * to64(x) @ to64(y) + 2.0 * to64(c0), dtype, 4)
    d = NvArray.from_host(np.full((3, 5), np.nan), dtype=dtype, device=device)
    ignis.matmul(a, b, out=d)  # beta = 0 ignores old contents, NaN included
    check(d, to64(x) @ to64(y), dtype, 4)
    # out may be a non-contiguous view
    big = ignis.zeros((5, 6), dtype=dtype, device=device)
    ignis.matmul(a, b, out=big.T[1:4])
    check(big.T[1:4], to64(x) @ to64(y), dtype, 4)
    assert (big.to_host()[:, 0] == 0).all()


def test_out_aliasing_an_operand(device: str, rng) -> None:
    x = random_array(rng, (4, 4), "float64")
    a = NvArray.from_host(x, device=device)
    ignis.matmul(a, a, out=a, beta=1.0)
    np.testing.assert_allclose(a.to_host(), x @ x + x, rtol=1e-12)


def test_vector_out(device: str, rng) -> None:
    x, y = random_array(rng, (2, 3, 4), "float32"), random_array(rng, (4,), "float32")
    out = ignis.zeros((2, 3), device=device)
    ignis.matmul(NvArray.from_host(x, device=device), NvArray.from_host(y, device=device), out=out)
    np.testing.assert_allclose(out.to_host(), x @ y, rtol=1e-5)


def test_mixed_float_dtypes_promote(device: str, rng) -> None:
    x, y = random_array(rng, (3, 4), "float16"), random_array(rng, (4, 2), "bfloat16")
    out = NvArray.from_host(x, device=device) @ NvArray.from_host(y, device=device)
    assert out.dtype == "float32"
    np.testing.assert_allclose(out.to_host(), to64(x) @ to64(y), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_matmul_accumulates_in_float32(device: str, dtype: str) -> None:
    k = 4096
    a = ignis.ones((1, k), dtype=dtype, device=device)
    b = ignis.ones((k, 1), dtype=dtype, device=device)
    assert (a @ b).item() == float(k)  # a half accumulator would stall at 2048 / 256


def test_matmul_errors(device: str) -> None:
    a, b = ignis.zeros((3, 4), device=device), ignis.zeros((5, 6), device=device)
    with pytest.raises(
        ignis.ShapeError, match=r"matmul: shapes \(3, 4\) and \(5, 6\) do not align \(4 != 5\)"
    ):
        a @ b
    with pytest.raises(ignis.ShapeError, match=r"\(transposed\)"):
        ignis.matmul(a, ignis.zeros((4, 3), device=device), transpose_b=True)
    with pytest.raises(ignis.ShapeError, match="batch dimensions"):
        ignis.zeros((2, 3, 4), device=device) @ ignis.zeros((3, 4, 5), device=device)
    with pytest.raises(ignis.ShapeError, match="0-dimensional"):
        ignis.zeros((), device=device) @ a
    with pytest.raises(
        ignis.DTypeError, match="matmul: operands must be numeric .* got bool and float32"
    ):
        ignis.zeros((3, 4), dtype="bool", device=device) @ ignis.zeros((4, 2), device=device)
    with pytest.raises(ValueError, match="matmul: beta != 0 needs out="):
        ignis.matmul(a, a.T, beta=1.0)
    with pytest.raises(
        ignis.ShapeError, match=r"matmul: out has shape \(3, 4\), expected \(3, 3\)"
    ):
        ignis.matmul(a, a.T, out=a)
    with pytest.raises(ignis.DTypeError, match="matmul: out has dtype float64, expected float32"):
        ignis.matmul(a, a.T, out=ignis.zeros((3, 3), dtype="float64", device=device))
    with pytest.raises(TypeError, match="matmul: expected an NvArray"):
        a @ np.zeros((4, 2))
