"""ignis.nn.linear / linear_backward: against NumPy in float64 on random data, every floating
dtype, 2-D and 3-D inputs, odd sizes, with and without a bias, mixed dtypes (the unfused path),
each gradient on its own and all together (the fused weight-and-bias path), bad input; on the
GPU the fused cuBLASLt epilogues really run where cuBLASLt is installed."""

from __future__ import annotations

import ignis.nn
import numpy as np
import pytest
from array_helpers import FLOATS, PRODUCT_TOL, bound_check, np_dtype
from ignis._array._cuda_backend import matmul as cuda_matmul

import ignis
from ignis import DeviceMismatchError, ShapeError


def nv(values: np.ndarray, device: str) -> ignis.NvArray:
    return ignis.NvArray.from_host(values, device=device)


def data(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    return rng.uniform(-1, 1, shape).astype(np_dtype(dtype))


def check(got: ignis.NvArray, ref: np.ndarray, scale: np.ndarray, dtype: str, what: str) -> None:
    bound_check(got.to_host(), ref, scale, PRODUCT_TOL[dtype], what)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("lead", [(33,), (3, 7), (1,)])
@pytest.mark.parametrize("with_bias", [True, False])
def test_linear_forward_matches_numpy(device, dtype, lead, with_bias):
    rng = np.random.default_rng(len(lead) * 10 + with_bias)
    k, n = 31, 65
    x, w, b = data(rng, lead + (k,), dtype), data(rng, (n, k), dtype), data(rng, (n,), dtype)
    y = ignis.nn.linear(nv(x, device), nv(w, device), nv(b, device) if with_bias else None)
    x64, w64, b64 = (v.astype(np.float64) for v in (x, w, b))
    ref = x64 @ w64.T + (b64 if with_bias else 0.0)
    scale = np.abs(x64) @ np.abs(w64).T + (np.abs(b64) if with_bias else 0.0)
    assert y.dtype == getattr(ignis, dtype) and y.shape == lead + (n,)
    check(y, ref, scale, dtype, f"linear {dtype} {lead}")


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("need", [(True, True, True), (True, False, False), (False, True, False),
                                  (False, False, True), (False, True, True)])
def test_linear_backward_matches_numpy(device, dtype, need):
    rng = np.random.default_rng(sum(need) + 5)
    rows, k, n = (2, 37), 29, 48
    x, w, g = data(rng, rows + (k,), dtype), data(rng, (n, k), dtype), data(rng, rows + (n,), dtype)
    gx, gw, gb = ignis.nn.linear_backward(
        nv(g, device), nv(x, device) if need[1] else None, nv(w, device) if need[0] else None,
        need_x=need[0], need_weight=need[1], need_bias=need[2],
    )
    x64, w64, g64 = (v.astype(np.float64).reshape(-1, v.shape[-1]) for v in (x, w, g))
    for got, wanted, ref, scale, name in (
        (gx, need[0], g64 @ w64, np.abs(g64) @ np.abs(w64), "grad_x"),
        (gw, need[1], g64.T @ x64, np.abs(g64).T @ np.abs(x64), "grad_weight"),
        (gb, need[2], g64.sum(axis=0), np.abs(g64).sum(axis=0), "grad_bias"),
    ):
        if not wanted:
            assert got is None, name
            continue
        assert got.dtype == getattr(ignis, dtype), (name, got.dtype)
        if name == "grad_x":
            ref, scale = ref.reshape(rows + (k,)), scale.reshape(rows + (k,))
        check(got, ref, scale, dtype, f"{name} {dtype}")


def test_linear_mixed_dtypes_promote_like_matmul_and_add(device):
    rng = np.random.default_rng(3)
    x, w = data(rng, (5, 8), "float32"), data(rng, (4, 8), "bfloat16")
    b = data(rng, (4,), "float64")
    y = ignis.nn.linear(nv(x, device), nv(w, device), nv(b, device))
    assert y.dtype == ignis.float64
    x64, w64, b64 = (v.astype(np.float64) for v in (x, w, b))
    check(y, x64 @ w64.T + b64, np.abs(x64) @ np.abs(w64).T + np.abs(b64), "float32", "mixed")


def test_linear_empty_rows_and_empty_inner_dimension(device):
    y = ignis.nn.linear(ignis.zeros((0, 6), device=device), ignis.ones((3, 6), device=device),
                        ignis.ones(3, device=device))
    assert y.shape == (0, 3)
    b = np.array([1.5, -2.0, 0.25], np.float32)
    y = ignis.nn.linear(ignis.zeros((4, 0), device=device), ignis.zeros((3, 0), device=device),
                        nv(b, device))
    np.testing.assert_array_equal(y.to_host(), np.broadcast_to(b, (4, 3)))
    gx, gw, gb = ignis.nn.linear_backward(ignis.ones((0, 3), device=device),
                                          ignis.zeros((0, 6), device=device),
                                          ignis.ones((3, 6), device=device))
    assert gx.shape == (0, 6) and gw.shape == (3, 6) and gb.shape == (3,)
    assert not gw.to_host().any() and not gb.to_host().any()


def test_linear_rejects_bad_input(device):
    x, w = ignis.ones((4, 8), device=device), ignis.ones((3, 8), device=device)
    with pytest.raises(ShapeError, match=r"linear: x of shape \(4, 7\) does not end"):
        ignis.nn.linear(ignis.ones((4, 7), device=device), w)
    with pytest.raises(ShapeError, match=r"linear: weight must be 2-D"):
        ignis.nn.linear(x, ignis.ones(8, device=device))
    with pytest.raises(ShapeError, match=r"linear: bias has shape \(4,\), expected \(3,\)"):
        ignis.nn.linear(x, w, ignis.ones(4, device=device))
    with pytest.raises(TypeError, match="linear: weight must be an NvArray, got list"):
        ignis.nn.linear(x, [[1.0] * 8])
    with pytest.raises(ShapeError, match="linear_backward: x .* and grad .* same leading"):
        ignis.nn.linear_backward(ignis.ones((4, 3), device=device),
                                 ignis.ones((5, 8), device=device), w)
    with pytest.raises(ShapeError, match="linear_backward: grad of last dimension 2"):
        ignis.nn.linear_backward(ignis.ones((4, 2), device=device), x, w)


@pytest.mark.gpu
def test_linear_devices_must_match():
    x, w = ignis.ones((4, 8), device="cuda:0"), ignis.ones((3, 8), device="cuda:0")
    with pytest.raises(DeviceMismatchError, match="linear: bias is on cpu"):
        ignis.nn.linear(x, w, ignis.ones(3, device="cpu"))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_fused_epilogues_run_on_the_gpu(dtype):
    """With cuBLASLt present, the bias and the bias gradient ride in the product (the epilogue
    plans exist and are not refusals), and the results match NumPy."""
    if not cuda_matmul.cublas_available() or ignis._cublaslt.load() is None:
        pytest.skip("cuBLASLt is not installed")
    rng = np.random.default_rng(11)
    x, w, b = data(rng, (256, 384), dtype), data(rng, (1152, 384), dtype), data(rng, (1152,), dtype)
    g = data(rng, (256, 1152), dtype)
    ignis.clear_caches()  # (the plans looked at below are this test's)
    y = ignis.nn.linear(nv(x, "cuda:0"), nv(w, "cuda:0"), nv(b, "cuda:0"))
    _, gw, gb = ignis.nn.linear_backward(nv(g, "cuda:0"), nv(x, "cuda:0"), None, need_x=False)
    plans = list(cuda_matmul._epilogue_plans.values())
    assert len(plans) == 2 and all(p is not None for p in plans), plans
    x64, w64, b64, g64 = (v.astype(np.float64) for v in (x, w, b, g))
    check(y, x64 @ w64.T + b64, np.abs(x64) @ np.abs(w64).T + np.abs(b64), dtype, "bias")
    check(gw, g64.T @ x64, np.abs(g64).T @ np.abs(x64), dtype, "grad_weight")
    check(gb, g64.sum(0), np.abs(g64).sum(0), dtype, "grad_bias")
