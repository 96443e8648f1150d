"""dtypes: float32/float64 gradients keep their dtype; float16/bfloat16 accumulate in float32."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import ignis
import ignis_autograd as ag
from ignis_autograd import Tensor

HALF_TOL = {"float16": 5e-3, "bfloat16": 4e-2}


def rounded(v: np.ndarray, dtype: str) -> np.ndarray:
    """``v`` rounded to ``dtype`` and back to float64: the exact values a half tensor holds."""
    np_dt = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    return v.astype(np_dt).astype(np.float64)


def mlp_loss(x: Tensor, w1: Tensor, b1: Tensor, w2: Tensor, t: ignis.NvArray) -> Tensor:
    h = (x @ w1).add_bias(b1).gelu()
    h = ag.layer_norm(h)
    return ag.cross_entropy(h @ w2, t)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_training_step(dtype: str, device: str, rng: np.random.Generator) -> None:
    shapes = [(8, 16), (16, 32), (32,), (32, 5)]
    values = [rounded(rng.standard_normal(s) * 0.5, dtype) for s in shapes]
    t = ignis.NvArray.from_host(rng.integers(0, 5, 8), device=device)
    half = [Tensor.from_host(v, dtype=dtype, device=device, requires_grad=True) for v in values]
    ref = [Tensor.from_host(v, dtype="float32", device=device, requires_grad=True) for v in values]
    loss_h = mlp_loss(*half, t)
    loss_r = mlp_loss(*ref, t)
    assert loss_h.dtype == dtype
    assert loss_h.item() == pytest.approx(loss_r.item(), rel=HALF_TOL[dtype] * 2)
    loss_h.backward()
    loss_r.backward()
    for h, r in zip(half, ref, strict=True):
        assert h.grad.dtype == "float32"  # gradients of half tensors are kept in float32
        g, gr = h.grad.to_host(), r.grad.to_host()
        scale = np.abs(gr).max()
        np.testing.assert_allclose(g, gr, atol=HALF_TOL[dtype] * 4 * scale)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_gradients_accumulate_in_float32(dtype: str, device: str) -> None:
    x = Tensor.from_host(np.ones(4), dtype=dtype, device=device, requires_grad=True)
    step = float(rounded(np.array(1e-3), dtype))
    for _ in range(200):
        (x * 1e-3).sum().backward()
    # In the half type itself the sum would stall once 1e-3 drops below half an ulp.
    np.testing.assert_allclose(x.grad.to_host(), np.full(4, 200 * step), rtol=1e-5)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_non_leaf_with_several_consumers(
    dtype: str, device: str, rng: np.random.Generator
) -> None:
    v = rounded(rng.standard_normal(6), dtype)
    x = Tensor.from_host(v, dtype=dtype, device=device, requires_grad=True)
    h = x * 2.0
    (h * h + h * 3.0 + h.exp()).sum().backward()
    h64 = rounded(2 * v, dtype)
    expected = 2 * (2 * h64 + 3 + np.exp(h64))
    np.testing.assert_allclose(
        x.grad.to_host(), expected, rtol=HALF_TOL[dtype] * 2, atol=HALF_TOL[dtype]
    )


def test_mixed_dtypes_get_gradients_in_their_own_dtype(
    device: str, rng: np.random.Generator
) -> None:
    av, bv = rng.standard_normal(3), rng.standard_normal(3)
    a = Tensor.from_host(av, dtype="float32", device=device, requires_grad=True)
    b = Tensor.from_host(bv, dtype="float64", device=device, requires_grad=True)
    y = (a * b).sum()
    assert y.dtype == "float64"
    y.backward()
    assert a.grad.dtype == "float32" and b.grad.dtype == "float64"
    np.testing.assert_allclose(a.grad.to_host(), bv, rtol=1e-6)
    np.testing.assert_allclose(b.grad.to_host(), av.astype(np.float32), rtol=1e-12)


def test_astype_is_differentiable(device: str, rng: np.random.Generator) -> None:
    v = rng.standard_normal(5)
    x = Tensor.from_host(v, dtype="float64", device=device, requires_grad=True)
    y = x.astype("float32") * 3.0
    assert y.dtype == "float32" and y.requires_grad
    y.sum().backward()
    assert x.grad.dtype == "float64"
    np.testing.assert_allclose(x.grad.to_host(), np.full(5, 3.0))
    assert not x.astype("int32").requires_grad


def test_default_dtype_is_float32(device: str) -> None:
    x = Tensor.from_host([1.0, 2.0], device=device, requires_grad=True)
    (x * x).sum().backward()
    assert x.dtype == "float32" and x.grad.dtype == "float32"


@pytest.mark.gpu
def test_to_device_is_differentiable(rng: np.random.Generator) -> None:
    v = rng.standard_normal(4)
    x = Tensor.from_host(v, dtype="float64", device="cpu", requires_grad=True)
    y = x.to("cuda:0")
    assert y.device == "cuda:0"
    (y * y).sum().backward()
    assert x.grad.device == "cpu"
    np.testing.assert_allclose(x.grad.to_host(), 2 * v, rtol=1e-12)
