"""ignis.nn fused normalization and loss kernels: layer_norm, rms_norm, cross_entropy,
softmax_backward and their backward functions.

* On every device (the ``device`` fixture): values and gradients against float64 NumPy / PyTorch
  references on random data, per-dtype tolerances, odd sizes, leading dimensions,
  non-contiguous and empty inputs, ignore_index, label smoothing, out-of-range targets (NaN).
* Bad arguments: clear errors naming the operation.
* No GPU needed: the CUDA backend's planning runs against host memory with an emulator of the
  kernels' contracts (launch shapes, alignment, argument types against the parsed kernel
  signatures), and every kernel instance it asks for compiles for sm_90.
* On the GPU: long rows (the re-reading kernels), large offsets, misaligned views, determinism.
"""

from __future__ import annotations

import contextlib
import ctypes
import math

import ignis.nn as nn
import ml_dtypes
import numpy as np
import pytest
from array_helpers import FLOATS, np_dtype, random_array
from ignis._array._cpu_backend import CpuBackend
from ignis._array._cuda_backend import norm_loss
from ignis._array._device import as_device
from ignis._signature import parse_kernel_params

import ignis
from ignis import CompileOptions, NvArray, _sources

try:
    import torch
except ImportError:  # the torch comparisons skip; NumPy references still run
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed")

# Tolerances (rtol, atol) of normalized outputs and gradients (values of order 1..10) computed in
# float32 (float64) and rounded once into the dtype.
TOL = {
    "float16": (4e-3, 4e-3),
    "bfloat16": (2.5e-2, 2.5e-2),
    "float32": (3e-5, 3e-5),
    "float64": (1e-10, 1e-10),
}


def tol(dtype: str, scale: float = 1.0) -> dict:
    rtol, atol = TOL[dtype]
    return {"rtol": rtol * scale, "atol": atol * scale}


def arr(host: np.ndarray, device: str) -> NvArray:
    return NvArray.from_host(host, device=device)


def f64(a) -> np.ndarray:
    a = a.to_host() if isinstance(a, NvArray) else np.asarray(a)
    return a.astype(np.float64)


def stats_name(dtype: str) -> str:
    return "float64" if dtype == "float64" else "float32"


# --- float64 references ---------------------------------------------------------------------------


def ref_layer_norm(x, w, b, eps):
    x = f64(x)
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    r = 1.0 / np.sqrt(var + eps)
    y = (x - mu) * r
    if w is not None:
        y = y * f64(w)
    if b is not None:
        y = y + f64(b)
    return y, mu[..., 0], r[..., 0]


def ref_layer_norm_backward(g, x, w, eps, rms=False):
    """(gx, gw, gb) by PyTorch autograd in float64."""
    xt = torch.tensor(f64(x), requires_grad=True)
    wt = torch.tensor(f64(w), requires_grad=True) if w is not None else None
    n = xt.shape[-1]
    if rms:
        y = torch.nn.functional.rms_norm(xt, (n,), wt, eps=eps)
        bt = None
    else:
        bt = torch.zeros(n, dtype=torch.float64, requires_grad=True)
        y = torch.nn.functional.layer_norm(xt, (n,), wt, bt, eps=eps)
    y.backward(torch.tensor(f64(g)))
    gw = None if wt is None else wt.grad.numpy()
    gb = None if bt is None else bt.grad.numpy()
    return xt.grad.numpy(), gw, gb


def ref_rms_norm(x, w, eps):
    x = f64(x)
    r = 1.0 / np.sqrt((x * x).mean(-1, keepdims=True) + eps)
    y = x * r
    if w is not None:
        y = y * f64(w)
    return y, r[..., 0]


def ref_cross_entropy(z, t, ignore_index, ls, reduction, grad=None):
    """(loss, grad_logits) by PyTorch in float64; rows of t outside [0, C) and not ignored must not
    be present."""
    zt = torch.tensor(f64(z), requires_grad=True)
    c = zt.shape[-1]
    flat = zt.reshape(-1, c)
    tt = torch.tensor(np.asarray(t).astype(np.int64)).reshape(-1)
    kw = {"ignore_index": -100 if ignore_index is None else ignore_index}
    loss = torch.nn.functional.cross_entropy(
        flat, tt, label_smoothing=ls, reduction=reduction, **kw
    )
    if reduction == "none":
        loss = loss.reshape(zt.shape[:-1])
    g = torch.ones_like(loss) if grad is None else torch.tensor(f64(grad))
    loss.backward(g)
    return loss.detach().numpy(), zt.grad.numpy()


# ==================================================================================================
# Layer norm / RMS norm
# ==================================================================================================

NORM_SHAPES = [(1, 1), (3, 31), (2, 33), (4, 64), (2, 3, 1000), (3, 1030), (2, 4096), (1, 5003)]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", NORM_SHAPES)
def test_layer_norm_matches_float64(device, dtype, shape, rng):
    n = shape[-1]
    x = random_array(rng, shape, dtype) + np.asarray(1.5, np_dtype(dtype))
    w = random_array(rng, (n,), dtype)
    b = random_array(rng, (n,), dtype)
    y, mean, rstd = nn.layer_norm(arr(x, device), arr(w, device), arr(b, device), eps=1e-5)
    ry, rmu, rr = ref_layer_norm(x, w, b, 1e-5)
    assert y.dtype.name == dtype and y.shape == shape
    assert mean.dtype.name == rstd.dtype.name == stats_name(dtype)
    assert mean.shape == rstd.shape == shape[:-1]
    np.testing.assert_allclose(f64(y), ry, **tol(dtype, 4))
    np.testing.assert_allclose(f64(mean), rmu, **tol(stats_name(dtype)))
    np.testing.assert_allclose(f64(rstd), rr, rtol=TOL[stats_name(dtype)][0] * 10, atol=0)


@needs_torch
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", [(3, 31), (2, 3, 257), (5, 2048), (3, 4000)])
@pytest.mark.parametrize("affine", ["none", "weight", "both"])
def test_layer_norm_backward_matches_torch(device, dtype, shape, affine, rng):
    n = shape[-1]
    x = random_array(rng, shape, dtype)
    g = random_array(rng, shape, dtype)
    w = random_array(rng, (n,), dtype) if affine != "none" else None
    b = random_array(rng, (n,), dtype) if affine == "both" else None
    xd = arr(x, device)
    wd = None if w is None else arr(w, device)
    y, mean, rstd = nn.layer_norm(xd, wd, None if b is None else arr(b, device))
    gx, gw, gb = nn.layer_norm_backward(
        arr(g, device), xd, mean, rstd, wd, grad_weight=affine != "none", grad_bias=affine == "both"
    )
    rgx, rgw, rgb = ref_layer_norm_backward(g, x, w, 1e-5)
    assert gx.dtype.name == dtype and gx.shape == shape
    np.testing.assert_allclose(f64(gx), rgx, **tol(dtype, 8))
    if affine == "none":
        assert gw is None and gb is None
    else:
        rows = math.prod(shape[:-1])
        assert gw.dtype.name == stats_name(dtype) and gw.shape == (n,)
        np.testing.assert_allclose(f64(gw), rgw, **tol(stats_name(dtype), 4 * math.sqrt(rows)))
    if affine == "both":
        np.testing.assert_allclose(f64(gb), rgb, **tol(stats_name(dtype), 4 * math.sqrt(rows)))
    else:
        assert gb is None


@needs_torch
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_layer_norm_half_with_float32_params_and_grads(device, dtype, rng):
    shape = (6, 40)
    x = random_array(rng, shape, dtype)
    w = rng.standard_normal(40).astype(np.float32)
    b = rng.standard_normal(40).astype(np.float32)
    g = rng.standard_normal(shape).astype(np.float32)
    xd, wd = arr(x, device), arr(w, device)
    y, mean, rstd = nn.layer_norm(xd, wd, arr(b, device))
    np.testing.assert_allclose(f64(y), ref_layer_norm(x, w, b, 1e-5)[0], **tol(dtype, 4))
    gx, gw, gb = nn.layer_norm_backward(arr(g, device), xd, mean, rstd, wd)
    assert gx.dtype.name == "float32"  # the dtype of grad_y
    rgx, rgw, rgb = ref_layer_norm_backward(g, x, w, 1e-5)
    np.testing.assert_allclose(f64(gx), rgx, **tol("float32", 10))
    np.testing.assert_allclose(f64(gw), rgw, **tol("float32", 10))
    np.testing.assert_allclose(f64(gb), rgb, **tol("float32", 10))


@needs_torch
def test_layer_norm_bias_only_gradient(device, rng):
    x = rng.standard_normal((7, 9))
    g = rng.standard_normal((7, 9))
    xd = arr(x, device)
    y, mean, rstd = nn.layer_norm(xd, None, arr(rng.standard_normal(9), device))
    gx, gw, gb = nn.layer_norm_backward(
        arr(g, device), xd, mean, rstd, grad_weight=False, grad_bias=True
    )
    assert gw is None
    np.testing.assert_allclose(gb.to_host(), g.sum(0), rtol=1e-12)
    gx2, gw2, gb2 = nn.layer_norm_backward(
        arr(g, device), xd, mean, rstd, grad_input=False, grad_weight=True
    )
    assert gx2 is None and gb2 is not None  # grad_bias follows grad_weight by default
    np.testing.assert_allclose(
        gw2.to_host(), ref_layer_norm_backward(g, x, np.ones(9), 1e-5)[1], rtol=1e-10
    )


@needs_torch
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", [(1, 1), (3, 31), (2, 3, 1000), (2, 4096), (1, 5003)])
def test_rms_norm_and_backward(device, dtype, shape, rng):
    n = shape[-1]
    x = random_array(rng, shape, dtype)
    w = random_array(rng, (n,), dtype)
    g = random_array(rng, shape, dtype)
    xd, wd = arr(x, device), arr(w, device)
    y, rstd = nn.rms_norm(xd, wd, eps=1e-6)
    ry, rr = ref_rms_norm(x, w, 1e-6)
    assert y.dtype.name == dtype and rstd.shape == shape[:-1]
    np.testing.assert_allclose(f64(y), ry, **tol(dtype, 4))
    np.testing.assert_allclose(f64(rstd), rr, rtol=TOL[stats_name(dtype)][0] * 10, atol=0)
    gx, gw = nn.rms_norm_backward(arr(g, device), xd, rstd, wd)
    rgx, rgw, _ = ref_layer_norm_backward(g, x, w, 1e-6, rms=True)
    np.testing.assert_allclose(f64(gx), rgx, **tol(dtype, 8))
    rows = math.prod(shape[:-1])
    np.testing.assert_allclose(f64(gw), rgw, **tol(stats_name(dtype), 4 * math.sqrt(rows)))
    gx2, gw2 = nn.rms_norm_backward(arr(g, device), xd, rstd)
    assert gw2 is None
    rgx2 = ref_layer_norm_backward(g, x, None, 1e-6, rms=True)[0]
    np.testing.assert_allclose(f64(gx2), rgx2, **tol(dtype, 8))


@needs_torch
def test_norms_accept_non_contiguous_input(device, rng):
    base = rng.standard_normal((40, 12))
    x = arr(base, device).T  # (12, 40), column-major
    assert not x.is_contiguous
    y, mean, rstd = nn.layer_norm(x)
    np.testing.assert_allclose(
        y.to_host(), ref_layer_norm(base.T, None, None, 1e-5)[0], rtol=1e-10, atol=1e-10
    )
    g = arr(rng.standard_normal((40, 12)), device).T
    gx, _, _ = nn.layer_norm_backward(g, x, mean, rstd)
    np.testing.assert_allclose(
        gx.to_host(),
        ref_layer_norm_backward(g.to_host(), base.T, None, 1e-5)[0],
        rtol=1e-9,
        atol=1e-10,
    )
    y2, r2 = nn.rms_norm(x[:, ::2])
    np.testing.assert_allclose(
        y2.to_host(), ref_rms_norm(base.T[:, ::2], None, 1e-6)[0], rtol=1e-10
    )


def test_norms_of_empty_input(device):
    x = ignis.zeros((0, 8), dtype="float32", device=device)
    y, mean, rstd = nn.layer_norm(x, ignis.ones((8,), device=device, dtype="float32"))
    assert y.shape == (0, 8) and mean.shape == (0,) and rstd.shape == (0,)
    gx, gw, gb = nn.layer_norm_backward(
        x, x, mean, rstd, ignis.ones((8,), device=device, dtype="float32")
    )
    assert gx.shape == (0, 8)
    np.testing.assert_array_equal(gw.to_host(), np.zeros(8))
    np.testing.assert_array_equal(gb.to_host(), np.zeros(8))
    y, rstd = nn.rms_norm(x)
    gx, gw = nn.rms_norm_backward(x, x, rstd, grad_weight=True)
    assert gx.shape == (0, 8) and gw.shape == (8,)


def test_layer_norm_of_a_constant_row_and_nan(device):
    x = np.array([[3.0, 3.0, 3.0, 3.0], [1.0, np.nan, 2.0, 3.0]], np.float32)
    y, mean, rstd = nn.layer_norm(arr(x, device), eps=1e-5)
    out = y.to_host()
    np.testing.assert_array_equal(out[0], np.zeros(4))
    np.testing.assert_allclose(rstd.to_host()[0], 1 / math.sqrt(1e-5), rtol=1e-5)
    assert np.isnan(out[1]).all()


def test_norm_argument_errors(device):
    x = ignis.ones((3, 4), dtype="float32", device=device)
    with pytest.raises(
        ignis.ShapeError, match=r"layer_norm: weight has shape \(5,\), expected \(4,\)"
    ):
        nn.layer_norm(x, ignis.ones((5,), device=device))
    with pytest.raises(ignis.DTypeError, match=r"layer_norm: x must be floating .* got int32"):
        nn.layer_norm(ignis.ones((3, 4), dtype="int32", device=device))
    with pytest.raises(
        ignis.DTypeError, match=r"rms_norm: weight has dtype float64, expected float32"
    ):
        nn.rms_norm(x, ignis.ones((4,), dtype="float64", device=device))
    with pytest.raises(
        ignis.ShapeError, match=r"layer_norm: x of shape \(3, 0\) has no last dimension"
    ):
        nn.layer_norm(ignis.ones((3, 0), device=device))
    with pytest.raises(ignis.ShapeError, match=r"rms_norm: x of shape \(\) has no last"):
        nn.rms_norm(ignis.ones((), device=device))
    with pytest.raises(ValueError, match=r"layer_norm: eps must be a finite number >= 0, got -1"):
        nn.layer_norm(x, eps=-1)
    with pytest.raises(TypeError, match=r"layer_norm: x must be an NvArray, got list"):
        nn.layer_norm([[1.0]])
    h = ignis.ones((3, 4), dtype="bfloat16", device=device)
    with pytest.raises(ignis.DTypeError, match=r"weight \(bfloat16\) and bias \(float32\)"):
        nn.layer_norm(
            h,
            ignis.ones((4,), dtype="bfloat16", device=device),
            ignis.ones((4,), dtype="float32", device=device),
        )
    y, mean, rstd = nn.layer_norm(x)
    with pytest.raises(
        ignis.ShapeError, match=r"layer_norm_backward: grad_y has shape \(4, 3\), expected \(3, 4\)"
    ):
        nn.layer_norm_backward(ignis.ones((4, 3), device=device), x, mean, rstd)
    with pytest.raises(
        ignis.DTypeError, match=r"layer_norm_backward: mean has dtype float64, expected float32"
    ):
        nn.layer_norm_backward(x, x, mean.astype("float64"), rstd)
    with pytest.raises(
        ignis.ShapeError, match=r"rms_norm_backward: rstd has shape \(3, 4\), expected \(3,\)"
    ):
        nn.rms_norm_backward(x, x, x)


# ==================================================================================================
# Cross-entropy
# ==================================================================================================


def _targets(rng, shape, n_classes, ignore_frac=0.0, ignore_index=-100, dtype="int64"):
    t = rng.integers(0, n_classes, size=shape)
    if ignore_frac:
        t[rng.random(shape) < ignore_frac] = ignore_index
    return t.astype(dtype)


CE_TOL = {"float16": 4e-3, "bfloat16": 2.5e-2, "float32": 2e-5, "float64": 1e-10}


@needs_torch
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", [(1, 1), (5, 7), (33, 33), (4, 1000), (3, 5003), (2, 3, 40)])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_matches_torch(device, dtype, shape, reduction, rng):
    z = random_array(rng, shape, dtype)
    t = _targets(rng, shape[:-1], shape[-1])
    loss, lse = nn.cross_entropy(arr(z, device), arr(t, device), reduction=reduction)
    want, want_grad = ref_cross_entropy(z, t, None, 0.0, reduction)
    assert loss.dtype.name == dtype and loss.shape == want.shape
    assert lse.dtype.name == stats_name(dtype) and lse.shape == shape[:-1]
    r = CE_TOL[dtype]
    np.testing.assert_allclose(f64(loss), want, rtol=r, atol=r)
    np.testing.assert_allclose(
        f64(lse), torch.logsumexp(torch.tensor(f64(z)), -1).numpy(), rtol=CE_TOL[stats_name(dtype)]
    )
    g = np.ones(()) if reduction != "none" else rng.standard_normal(shape[:-1])
    if reduction != "none":
        g = np.asarray(1.7)
    _, want_grad = ref_cross_entropy(z, t, None, 0.0, reduction, grad=g)
    grad = nn.cross_entropy_backward(
        arr(g, device), arr(z, device), arr(t, device), lse, reduction=reduction
    )
    assert grad.dtype.name == dtype and grad.shape == shape
    np.testing.assert_allclose(
        f64(grad), want_grad, rtol=r, atol=r * (2.0 if reduction == "none" else 1.0)
    )


@needs_torch
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float64"])
@pytest.mark.parametrize("ls", [0.0, 0.1, 1.0])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_ignore_index_and_label_smoothing(device, dtype, ls, reduction, rng):
    shape = (37, 19)
    z = random_array(rng, shape, dtype)
    t = _targets(rng, shape[:-1], shape[-1], ignore_frac=0.3, ignore_index=3)
    g = np.asarray(0.5) if reduction != "none" else rng.standard_normal(shape[:-1])
    loss, lse = nn.cross_entropy(arr(z, device), arr(t, device), 3, ls, reduction)
    want, want_grad = ref_cross_entropy(z, t, 3, ls, reduction, grad=g)
    r = CE_TOL[dtype]
    np.testing.assert_allclose(f64(loss), want, rtol=r, atol=r)
    grad = nn.cross_entropy_backward(
        arr(g, device), arr(z, device), arr(t, device), lse, 3, ls, reduction
    )
    np.testing.assert_allclose(f64(grad), want_grad, rtol=r, atol=r)
    assert not np.any(f64(grad)[t == 3])  # ignored rows: exactly zero


@needs_torch
def test_cross_entropy_default_ignore_index_int32_targets(device, rng):
    z = rng.standard_normal((9, 6)).astype(np.float32)
    t = _targets(rng, (9,), 6, ignore_frac=0.4, dtype="int32")
    t[0] = -100
    loss, lse = nn.cross_entropy(arr(z, device), arr(t, device))
    want, want_grad = ref_cross_entropy(z, t, -100, 0.0, "mean")
    np.testing.assert_allclose(loss.to_host(), want, rtol=2e-6)
    grad = nn.cross_entropy_backward(
        ignis.ones((), device=device), arr(z, device), arr(t, device), lse
    )
    np.testing.assert_allclose(grad.to_host(), want_grad, rtol=2e-5, atol=2e-6)
    # ignore_index=None: nothing is ignored, and -100 is then out of range (NaN)
    loss, _ = nn.cross_entropy(arr(z, device), arr(np.abs(t) % 6, device), ignore_index=None)
    want, _ = ref_cross_entropy(z, np.abs(t) % 6, None, 0.0, "mean")
    np.testing.assert_allclose(loss.to_host(), want, rtol=2e-6)


@needs_torch
def test_cross_entropy_out_of_range_target_is_nan(device, rng):
    z = rng.standard_normal((4, 5))
    t = np.array([0, 5, -1, 2])  # 5 and -1 are not class indices, -100 would be ignored
    loss, lse = nn.cross_entropy(arr(z, device), arr(t, device), reduction="none")
    out = loss.to_host()
    assert np.isnan(out[1]) and np.isnan(out[2])
    good, _ = ref_cross_entropy(z[[0, 3]], t[[0, 3]], None, 0.0, "none")
    np.testing.assert_allclose(out[[0, 3]], good, rtol=1e-12)
    mean, _ = nn.cross_entropy(arr(z, device), arr(t, device))
    assert np.isnan(mean.item())
    grad = nn.cross_entropy_backward(
        ignis.ones((4,), dtype="float64", device=device),
        arr(z, device),
        arr(t, device),
        lse,
        reduction="none",
    ).to_host()
    assert np.isnan(grad[1]).all() and np.isnan(grad[2]).all() and np.isfinite(grad[[0, 3]]).all()


@needs_torch
def test_cross_entropy_all_ignored_and_empty(device, rng):
    z = rng.standard_normal((3, 4)).astype(np.float32)
    t = np.full(3, -100)
    loss, lse = nn.cross_entropy(arr(z, device), arr(t, device))
    assert np.isnan(loss.item())  # mean over no targets, as torch
    loss, lse = nn.cross_entropy(arr(z, device), arr(t, device), reduction="sum")
    assert loss.item() == 0.0
    grad = nn.cross_entropy_backward(
        ignis.ones((), device=device), arr(z, device), arr(t, device), lse, reduction="sum"
    )
    np.testing.assert_array_equal(grad.to_host(), np.zeros((3, 4)))
    e = ignis.zeros((0, 4), dtype="float32", device=device)
    et = ignis.zeros((0,), dtype="int64", device=device)
    assert np.isnan(nn.cross_entropy(e, et)[0].item())
    assert nn.cross_entropy(e, et, reduction="sum")[0].item() == 0.0
    loss, lse = nn.cross_entropy(e, et, reduction="none")
    assert loss.shape == (0,) and lse.shape == (0,)
    assert nn.cross_entropy_backward(ignis.ones((), device=device), e, et, lse).shape == (0, 4)


@needs_torch
def test_cross_entropy_non_contiguous_logits_and_inf(device, rng):
    base = rng.standard_normal((11, 8)).astype(np.float32)
    z = arr(base, device).T  # (8, 11)
    t = _targets(rng, (8,), 11)
    loss, lse = nn.cross_entropy(z, arr(t, device), reduction="none")
    want, want_grad = ref_cross_entropy(base.T, t, None, 0.0, "none")
    np.testing.assert_allclose(loss.to_host(), want, rtol=2e-5)
    zi = base.T.copy()
    zi[0, 1] = -np.inf  # a -inf logit is a zero probability
    zi[1, :] = -np.inf  # a row of -inf has no log-sum-exp: NaN
    loss, lse = nn.cross_entropy(arr(zi, device), arr(t, device), reduction="none")
    out = loss.to_host()
    assert np.isnan(out[1]) and np.isnan(lse.to_host()[1])
    want0, _ = ref_cross_entropy(zi[[0]], t[[0]], None, 0.0, "none")
    np.testing.assert_allclose(out[0], want0[0], rtol=2e-5)


def test_cross_entropy_argument_errors(device):
    z = ignis.ones((3, 4), dtype="float32", device=device)
    t = ignis.zeros((3,), dtype="int64", device=device)
    with pytest.raises(
        ignis.ShapeError,
        match=r"cross_entropy: targets of shape \(5,\) do not match logits of shape \(3, 4\)",
    ):
        nn.cross_entropy(z, ignis.zeros((5,), dtype="int64", device=device))
    with pytest.raises(
        ignis.DTypeError,
        match=r"cross_entropy: targets must be integer class indices \(int32/int64\), got float32",
    ):
        nn.cross_entropy(z, ignis.zeros((3,), dtype="float32", device=device))
    with pytest.raises(ignis.DTypeError, match=r"cross_entropy: logits must be floating"):
        nn.cross_entropy(ignis.ones((3, 4), dtype="int32", device=device), t)
    with pytest.raises(
        ValueError, match=r"cross_entropy: reduction must be 'mean', 'sum' or 'none', got 'max'"
    ):
        nn.cross_entropy(z, t, reduction="max")
    with pytest.raises(ValueError, match=r"label_smoothing must be a number in \[0, 1\], got 1.5"):
        nn.cross_entropy(z, t, label_smoothing=1.5)
    with pytest.raises(TypeError, match=r"ignore_index must be an int or None, got float"):
        nn.cross_entropy(z, t, ignore_index=1.5)
    with pytest.raises(ignis.ShapeError, match=r"logits of shape \(3, 0\) have no classes"):
        nn.cross_entropy(ignis.ones((3, 0), device=device), t)
    loss, lse = nn.cross_entropy(z, t)
    with pytest.raises(
        ignis.ShapeError, match=r"cross_entropy_backward: grad_loss has shape \(3,\), expected \(\)"
    ):
        nn.cross_entropy_backward(ignis.ones((3,), device=device), z, t, lse)
    with pytest.raises(
        ignis.DTypeError, match=r"cross_entropy_backward: lse has dtype float64, expected float32"
    ):
        nn.cross_entropy_backward(ignis.ones((), device=device), z, t, lse.astype("float64"))


# ==================================================================================================
# softmax backward
# ==================================================================================================


@needs_torch
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", [(1, 1), (3, 31), (2, 3, 1000), (3, 1030), (2, 4096), (1, 5003)])
@pytest.mark.parametrize("log", [False, True])
def test_softmax_backward_matches_torch(device, dtype, shape, log, rng):
    x = random_array(rng, shape, dtype)
    g = random_array(rng, shape, dtype)
    y = (ignis.log_softmax if log else ignis.softmax)(arr(x, device), axis=-1)
    gx = nn.softmax_backward(arr(g, device), y, axis=-1, log=log)
    assert gx.dtype.name == dtype and gx.shape == shape
    # torch differentiates the forward from x; ignis works from the saved output y
    xt = torch.tensor(f64(x), requires_grad=True)
    (torch.log_softmax if log else torch.softmax)(xt, -1).backward(torch.tensor(f64(g)))
    np.testing.assert_allclose(f64(gx), xt.grad.numpy(), **tol(dtype, 8))


@needs_torch
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("log", [False, True])
def test_softmax_backward_any_axis_and_mixed_dtype(device, axis, log, rng):
    x = rng.standard_normal((5, 6, 7))
    g = rng.standard_normal((5, 6, 7))
    y = (ignis.log_softmax if log else ignis.softmax)(arr(x, device), axis=axis)
    gx = nn.softmax_backward(arr(g, device), y, axis=axis, log=log)
    xt = torch.tensor(x, requires_grad=True)
    (torch.log_softmax if log else torch.softmax)(xt, axis).backward(torch.tensor(g))
    np.testing.assert_allclose(gx.to_host(), xt.grad.numpy(), rtol=1e-10, atol=1e-12)
    assert gx.is_contiguous
    # bfloat16 output with a float32 incoming gradient: the gradient comes back in float32
    yb = (ignis.log_softmax if log else ignis.softmax)(
        arr(x.astype(ml_dtypes.bfloat16), device), axis=-1
    )
    gx = nn.softmax_backward(arr(g.astype(np.float32), device), yb, axis=-1, log=log)
    assert gx.dtype.name == "float32"
    yf = f64(yb)
    gg = g.astype(np.float32).astype(np.float64)
    want = (
        gg - np.exp(yf) * gg.sum(-1, keepdims=True)
        if log
        else yf * (gg - (gg * yf).sum(-1, keepdims=True))
    )
    np.testing.assert_allclose(gx.to_host(), want, rtol=1e-5, atol=1e-5)


def test_softmax_backward_errors_and_empty(device):
    y = ignis.ones((3, 4), dtype="float32", device=device)
    with pytest.raises(
        ignis.ShapeError, match=r"softmax_backward: grad_y has shape \(4,\), expected \(3, 4\)"
    ):
        nn.softmax_backward(ignis.ones((4,), device=device), y)
    with pytest.raises(
        ignis.DTypeError, match=r"softmax_backward: grad_y has dtype float64, expected float32"
    ):
        nn.softmax_backward(ignis.ones((3, 4), dtype="float64", device=device), y)
    with pytest.raises(ValueError, match=r"softmax_backward"):
        nn.softmax_backward(y, y, axis=2)
    e = ignis.zeros((0, 3), dtype="float32", device=device)
    assert nn.softmax_backward(e, e).shape == (0, 3)


# ==================================================================================================
# The autograd rules built on the fused kernels (ignis_autograd)
# ==================================================================================================


def _leaf(v, device, dtype="float64"):
    import ignis_autograd as ag

    return ag.Tensor.from_host(np.asarray(v), dtype=dtype, device=device, requires_grad=True)


def test_autograd_rules_pass_gradcheck(device, rng):
    import ignis_autograd as ag
    from ignis_autograd import gradcheck

    x = _leaf(rng.standard_normal((3, 5)), device)
    w = _leaf(rng.standard_normal(5), device)
    b = _leaf(rng.standard_normal(5), device)
    assert gradcheck(lambda a, c, d: ag.layer_norm(a, None, c, d) * ag.layer_norm(a), [x, w, b])
    assert gradcheck(lambda a, c: ag.rms_norm(a, weight=c).tanh(), [x, w])
    x3 = _leaf(rng.standard_normal((2, 3, 4)), device)
    w2 = _leaf(rng.standard_normal((3, 4)), device)
    assert gradcheck(lambda a, c: ag.layer_norm(a, (3, 4), c).tanh(), [x3, w2])  # flattened
    assert gradcheck(lambda a, c: ag.rms_norm(a, (3, 4), c).tanh(), [x3, w2])
    for axis in (0, -1):
        assert gradcheck(lambda a, ax=axis: ag.softmax(a, ax).tanh(), [x3])
        assert gradcheck(lambda a, ax=axis: ag.log_softmax(a, ax).tanh(), [x3])
    z = _leaf(rng.standard_normal((6, 4)), device)
    t = NvArray.from_host(np.array([1, 3, -100, 0, 2, 3]), device=device)
    for red in ("mean", "sum", "none"):
        for ls in (0.0, 0.2):
            assert gradcheck(lambda a, r=red, e=ls: ag.cross_entropy(a, t, r, -100, e).tanh(), [z])


@needs_torch
@pytest.mark.parametrize("ls", [0.0, 0.25])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_autograd_cross_entropy_matches_torch(device, ls, reduction, rng):
    import ignis_autograd as ag

    z = rng.standard_normal((3, 7, 5))
    t = rng.integers(0, 5, (3, 7))
    t[rng.random((3, 7)) < 0.3] = 2
    g = rng.standard_normal((3, 7)) if reduction == "none" else np.asarray(0.7)
    zt = _leaf(z, device)
    loss = ag.cross_entropy(zt, NvArray.from_host(t, device=device), reduction, 2, ls)
    loss.backward(ag.Tensor.from_host(g, dtype="float64", device=device))
    tz = torch.tensor(z, requires_grad=True)
    tl = torch.nn.functional.cross_entropy(
        tz.permute(0, 2, 1),
        torch.tensor(t),
        ignore_index=2,
        label_smoothing=ls,
        reduction=reduction,
    )
    tl.backward(torch.tensor(g))
    np.testing.assert_allclose(loss.to_host(), tl.detach().numpy(), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(zt.grad.to_host(), tz.grad.numpy(), rtol=1e-10, atol=1e-14)


@needs_torch
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_autograd_norms_match_torch(device, dtype, rng):
    import ignis_autograd as ag

    x = rng.standard_normal((4, 3, 6)).astype(np.float32)
    w = rng.standard_normal((3, 6)).astype(np.float32)
    b = rng.standard_normal((3, 6)).astype(np.float32)
    g = rng.standard_normal((4, 3, 6)).astype(np.float32)
    xt, wt, bt = _leaf(x, device, dtype), _leaf(w, device, "float32"), _leaf(b, device, "float32")
    y = ag.layer_norm(xt, (3, 6), wt, bt) + ag.rms_norm(xt, 6, eps=1e-6)
    y.backward(ag.Tensor.from_host(g, dtype=dtype, device=device))
    xr = f64(xt.data)
    tx = torch.tensor(xr, requires_grad=True)
    tw = torch.tensor(w.astype(np.float64), requires_grad=True)
    tb = torch.tensor(b.astype(np.float64), requires_grad=True)
    ty = torch.nn.functional.layer_norm(tx, (3, 6), tw, tb) + torch.nn.functional.rms_norm(
        tx, (6,), eps=1e-6
    )
    ty.backward(torch.tensor(f64(ag.Tensor.from_host(g, dtype=dtype, device=device).data)))
    k = 1.0 if dtype == "float32" else 200.0
    # bfloat16: y is the sum of two outputs rounded to bfloat16, then rounded again
    np.testing.assert_allclose(f64(y.data), ty.detach().numpy(), rtol=2e-5 * k, atol=2e-5 * k * 10)
    assert xt.grad.dtype == "float32" and wt.grad.dtype == "float32"
    np.testing.assert_allclose(xt.grad.to_host(), tx.grad.numpy(), rtol=1e-4 * k, atol=1e-4 * k)
    np.testing.assert_allclose(wt.grad.to_host(), tw.grad.numpy(), rtol=1e-4 * k, atol=1e-4 * k)
    np.testing.assert_allclose(bt.grad.to_host(), tb.grad.numpy(), rtol=1e-4 * k, atol=1e-4 * k)


@needs_torch
def test_autograd_layer_norm_non_contiguous_trailing_dims_use_the_composite_path(device, rng):
    import ignis_autograd as ag

    x = rng.standard_normal((3, 4, 5))
    xt = _leaf(x, device)
    y = ag.layer_norm(xt.permute(0, 2, 1), (5, 4))  # (3, 5, 4): the last two do not merge
    assert y.grad_fn.ctx[0] == "composite"
    y.tanh().sum().backward()
    tx = torch.tensor(x, requires_grad=True)
    torch.nn.functional.layer_norm(tx.permute(0, 2, 1), (5, 4)).tanh().sum().backward()
    np.testing.assert_allclose(xt.grad.to_host(), tx.grad.numpy(), rtol=1e-10, atol=1e-12)
    assert ag.layer_norm(_leaf(x, device), (4, 5)).grad_fn.ctx[0] == "fused"


# ==================================================================================================
# The CUDA planning without a GPU: kernels emulated on host memory
# ==================================================================================================

_NP = {
    "float": np.dtype(np.float32),
    "double": np.dtype(np.float64),
    "ignis::float16": np.dtype(np.float16),
    "ignis::bfloat16": np.dtype(ml_dtypes.bfloat16),
    "ignis::int32": np.dtype(np.int32),
    "ignis::int64": np.dtype(np.int64),
}


def split_name(name: str) -> tuple[str, list[str]]:
    head, _, rest = name.partition("<")
    args, depth, cur = [], 0, ""
    for ch in rest[:-1]:
        if ch == "," and depth == 0:
            args.append(cur.strip())
            cur = ""
            continue
        depth += ch == "<"
        depth -= ch == ">"
        cur += ch
    args.append(cur.strip())
    return head.removeprefix("ignis::"), args


def mem(ptr: int, dtype: np.dtype, count: int) -> np.ndarray:
    """A writable NumPy view of ``count`` elements at host address ``ptr``."""
    assert ptr, "null pointer"
    assert ptr % dtype.itemsize == 0, "misaligned pointer"
    buf = (ctypes.c_uint8 * (count * dtype.itemsize)).from_address(ptr)
    return np.frombuffer(buf, dtype=dtype)


class Emulator:
    """Stands in for ``norm_loss._launch``: checks each launch against the kernel's signature and
    contract, then does its work on the host in the kernel's arithmetic."""

    def __init__(self):
        self.names: list[tuple[str, str]] = []

    def __call__(self, backend, source, name, grid, block, args):
        self.names.append((source, name))
        params = parse_kernel_params(_sources.read_source(source), name)
        assert len(params) == len(args), (name, params, args)
        for p, a in zip(params, args, strict=True):
            if p.kind == "pointer":
                assert a is None or (isinstance(a, int) and not isinstance(a, bool)), (name, p, a)
            elif p.kind == "bool":
                assert isinstance(a, bool), (name, p, a)
            elif p.kind == "float":
                assert isinstance(a, float), (name, p, a)
            else:
                assert p.kind == "int" and isinstance(a, int) and not isinstance(a, bool), (
                    name,
                    p,
                    a,
                )
        kernel, targs = split_name(name)
        gx, gy = (grid, 1) if isinstance(grid, int) else grid
        bx, by = (block, 1) if isinstance(block, int) else block
        assert 1 <= gx < 2**31 and 1 <= gy < 65536 and 1 <= bx * by <= 1024, (name, grid, block)
        getattr(self, kernel)(targs, (gx, gy), (bx, by), args)

    # --- helpers ----------------------------------------------------------------------------------

    @staticmethod
    def _row_contract(targs_vec, items, warp, block, grid, rows, n, ptrs):
        bx = block[0]
        threads = 32 if warp else bx
        assert bx % 32 == 0 and (bx == 128 if warp else 64 <= bx <= 1024)
        per_block = bx // 32 if warp else 1
        assert grid[0] * per_block >= rows or grid[0] == norm_loss.MAX_GRID
        if targs_vec > 1:
            assert n % targs_vec == 0 and all(p % 16 == 0 for p in ptrs if p)
        if items:
            assert n <= threads * targs_vec * items, (
                "row does not fit the cache",
                n,
                threads,
                items,
            )

    # --- norm.cu ----------------------------------------------------------------------------------

    def norm_fwd(self, targs, grid, block, args):
        t, p, vec, items, warp, rms = targs
        T, P = _NP[t], _NP[p]
        vec, items, warp, rms = int(vec), int(items), warp == "true", rms == "true"
        x, w, b, y, mean, rstd, rows, n, eps = args
        self._row_contract(vec, items, warp, block, grid, rows, n, [x, y, w, b])
        W = np.dtype(np.float64) if T == np.float64 else np.dtype(np.float32)
        xv = mem(x, T, rows * n).reshape(rows, n).astype(W)
        if items:
            mu = np.zeros(rows, W) if rms else xv.mean(1, dtype=W)
            var = ((xv - mu[:, None]) ** 2).mean(1, dtype=W)
        else:  # the shifted sums of the re-reading kernel
            shift = np.zeros(rows, W) if rms else xv[:, 0].copy()
            d = xv - shift[:, None]
            m1 = d.sum(1, dtype=W) / W.type(n)
            m2 = (d * d).sum(1, dtype=W) / W.type(n)
            mu = shift + (0 if rms else m1)
            var = m2 if rms else np.maximum(m2 - m1 * m1, 0)
        r = W.type(1) / np.sqrt(var + W.type(eps))
        out = (xv - mu[:, None]) * r[:, None]
        if w:
            out = out * mem(w, P, n).astype(W)
        if b and not rms:
            out = out + mem(b, P, n).astype(W)
        mem(y, T, rows * n)[:] = out.reshape(-1).astype(T)
        if not rms:
            mem(mean, W, rows)[:] = mu
        else:
            assert mean is None
        mem(rstd, W, rows)[:] = r

    def norm_bwd(self, targs, grid, block, args):
        t, g_t, p, vec, items, warp, rms = targs
        T, G, P = _NP[t], _NP[g_t], _NP[p]
        vec, items, warp, rms = int(vec), int(items), warp == "true", rms == "true"
        g, x, w, mean, rstd, gx, rows, n = args
        self._row_contract(vec, items, warp, block, grid, rows, n, [g, x, gx, w])
        W = np.dtype(np.float64) if T == np.float64 else np.dtype(np.float32)
        xv = mem(x, T, rows * n).reshape(rows, n).astype(W)
        gv = mem(g, G, rows * n).reshape(rows, n).astype(W)
        r = mem(rstd, W, rows)[:, None]
        h = xv * r if rms else (xv - mem(mean, W, rows)[:, None]) * r
        gh = gv * mem(w, P, n).astype(W) if w else gv
        inner = gh - h * (gh * h).mean(1, keepdims=True, dtype=W)
        if not rms:
            inner = inner - gh.mean(1, keepdims=True, dtype=W)
        mem(gx, G, rows * n)[:] = (r * inner).reshape(-1).astype(G)

    def norm_param_partials(self, targs, grid, block, args):
        t, g_t, vec, rms = targs
        T, G, vec, rms = _NP[t], _NP[g_t], int(vec), rms == "true"
        g, x, mean, rstd, pw, pb, rows, n, per_split = args
        assert block == (32, ignis.tuning().norm_loss.param_block_y) and block[1] <= 8
        if vec > 1:  # 16-byte loads of the data type: aligned rows of whole packs
            assert vec * T.itemsize == 16 and n % vec == 0 and g % 16 == 0 and x % 16 == 0
        splits = grid[1]
        assert (
            grid[0] == -(-n // (32 * vec)) and (splits - 1) * per_split < rows <= splits * per_split
        )
        W = np.dtype(np.float64) if T == np.float64 else np.dtype(np.float32)
        xv = mem(x, T, rows * n).reshape(rows, n).astype(W)
        gv = mem(g, G, rows * n).reshape(rows, n).astype(W)
        r = mem(rstd, W, rows)[:, None]
        h = xv * r if rms else (xv - mem(mean, W, rows)[:, None]) * r
        out_w = mem(pw, W, splits * n).reshape(splits, n)
        out_b = mem(pb, W, splits * n).reshape(splits, n) if pb else None
        for s in range(splits):
            part = slice(s * per_split, min(rows, (s + 1) * per_split))
            out_w[s] = (gv[part] * h[part]).sum(0, dtype=W)
            if out_b is not None:
                out_b[s] = gv[part].sum(0, dtype=W)

    def norm_param_finish(self, targs, grid, block, args):
        W, OUT = _NP[targs[0]], _NP[targs[1]]
        pw, pb, gw, gb, splits, n = args
        assert (pb is None) == (gb is None)
        assert grid[0] * block[0] >= n or grid[0] == norm_loss.MAX_GRID
        mem(gw, OUT, n)[:] = mem(pw, W, splits * n).reshape(splits, n).sum(0, dtype=W).astype(OUT)
        if pb:
            mem(gb, OUT, n)[:] = (
                mem(pb, W, splits * n).reshape(splits, n).sum(0, dtype=W).astype(OUT)
            )

    def softmax_bwd(self, targs, grid, block, args):
        t, g_t, vec, items, warp = targs
        T, G = _NP[t], _NP[g_t]
        g, y, gx, rows, n, log = args
        self._row_contract(int(vec), int(items), warp == "true", block, grid, rows, n, [g, y, gx])
        W = np.dtype(np.float64) if T == np.float64 else np.dtype(np.float32)
        yv = mem(y, T, rows * n).reshape(rows, n).astype(W)
        gv = mem(g, G, rows * n).reshape(rows, n).astype(W)
        if log:
            out = gv - np.exp(yv) * gv.sum(1, keepdims=True, dtype=W)
        else:
            out = yv * (gv - (gv * yv).sum(1, keepdims=True, dtype=W))
        mem(gx, G, rows * n)[:] = out.reshape(-1).astype(G)

    # --- cross_entropy.cu -------------------------------------------------------------------------

    def ce_fwd(self, targs, grid, block, args):
        T, IDX, vec = _NP[targs[0]], _NP[targs[1]], int(targs[2])
        z, t, loss_rows, lse, rows, c, ig, has_ignore, ls = args
        assert vec * T.itemsize == 16 and block[0] % 32 == 0 and block[1] == 1
        assert grid[0] >= rows or grid[0] == norm_loss.MAX_GRID
        W = np.dtype(np.float64) if T == np.float64 else np.dtype(np.float32)
        zv = mem(z, T, rows * c).reshape(rows, c).astype(W)
        tv = mem(t, IDX, rows).astype(np.int64)
        m = zv.max(1)
        with np.errstate(all="ignore"):
            lse_v = np.where(
                np.isfinite(m), m + np.log(np.exp(zv - m[:, None]).sum(1, dtype=W)), np.nan
            ).astype(W)
            counted = ~(has_ignore & (tv == ig))
            bad = counted & ((tv < 0) | (tv >= c))
            loss = lse_v - zv[np.arange(rows), np.clip(tv, 0, c - 1)]
            if ls > 0:
                loss = W.type(1 - ls) * loss + W.type(ls) * (lse_v - zv.sum(1, dtype=W) / W.type(c))
        loss = np.where(bad, np.nan, np.where(counted, loss, 0)).astype(W)
        mem(loss_rows, W, rows)[:] = loss
        mem(lse, W, rows)[:] = lse_v

    def ce_reduce(self, targs, grid, block, args):
        W, OUT, IDX = _NP[targs[0]], _NP[targs[1]], _NP[targs[2]]
        loss_rows, t, out, count, rows, ig, has_ignore, mean = args
        assert grid == (1, 1) and block[0] % 32 == 0
        tv = mem(t, IDX, rows).astype(np.int64) if rows else np.zeros(0, np.int64)
        k = int(np.count_nonzero(~(has_ignore & (tv == ig))))
        if count:
            mem(count, np.dtype(np.int64), 1)[0] = k
        if out:
            s = mem(loss_rows, W, rows).sum(dtype=W)
            with np.errstate(all="ignore"):
                mem(out, OUT, 1)[0] = (s / W.type(k) if mean else s).astype(OUT)

    def ce_bwd(self, targs, grid, block, args):
        T, IDX, vec = _NP[targs[0]], _NP[targs[1]], int(targs[2])
        gl, count, z, t, lse, grad, rows, c, ig, has_ignore, ls, per_row = args
        assert vec == 1 or ((grad - z) % 16 == 0 and vec * T.itemsize == 16)
        W = np.dtype(np.float64) if T == np.float64 else np.dtype(np.float32)
        zv = mem(z, T, rows * c).reshape(rows, c).astype(W)
        tv = mem(t, IDX, rows).astype(np.int64)
        scale = mem(gl, W, rows if per_row else 1).copy()
        scale = scale if per_row else np.full(rows, scale[0], W)
        if count:
            scale = scale / W.type(mem(count, np.dtype(np.int64), 1)[0])
        counted = ~(has_ignore & (tv == ig))
        bad = counted & ((tv < 0) | (tv >= c))
        with np.errstate(all="ignore"):
            d = np.exp(zv - mem(lse, W, rows)[:, None]) - W.type(ls / c)
            ok = counted & ~bad
            d[np.nonzero(ok)[0], tv[ok]] -= W.type(1 - ls)
            d = d * scale[:, None]
        d[~counted] = 0
        d[bad] = np.nan
        mem(grad, T, rows * c)[:] = d.reshape(-1).astype(T)


@pytest.fixture
def emu(monkeypatch):
    em = Emulator()
    monkeypatch.setattr(norm_loss, "_launch", em)
    return em


@pytest.fixture
def small_thresholds(tune):
    # Reach warp rows, block rows, the re-reading kernels and row splits on small inputs.
    tune(
        norm_loss=dict(
            warp_max_n=64,
            block_min_threads=64,
            block_bytes=16,
            param_target_blocks=16,
            param_min_rows=2,
        ),
    )


class _PlannedBackend(CpuBackend):
    """The CPU backend with the CUDA module's planning (kernels emulated) for this family."""


for _name in ("layer_norm", "layer_norm_backward", "rms_norm", "rms_norm_backward",
              "cross_entropy", "cross_entropy_backward", "softmax_backward"):
    _PlannedBackend.implement(_name, getattr(norm_loss, _name))


@contextlib.contextmanager
def planned_cpu():
    """Arrays made on device "cpu" inside the block run this family's planned kernels."""
    from ignis._array import _backend

    dev = as_device("cpu")
    old = _backend._instances.get(dev)
    _backend._instances[dev] = _PlannedBackend(dev)
    try:
        yield
    finally:
        if old is None:
            _backend._instances.pop(dev, None)
        else:
            _backend._instances[dev] = old


PLAN_SHAPES = [
    (3, 8),
    (5, 40),
    (2, 3, 64),
    (4, 100),
    (3, 256),
    (2, 1000),
    (1, 3001),
    (2, 5000),
    (130, 24),
]


def _run_family(rng, dtype, shape, misalign=False):
    """Every function of the family on cpu arrays (the planned backend when installed); returns
    the host results in a list."""
    n = shape[-1]
    x = random_array(rng, shape, dtype) + np.asarray(0.5, np_dtype(dtype))
    g = random_array(rng, shape, dtype)
    w = random_array(rng, (n,), dtype)
    b = random_array(rng, (n,), dtype)
    xd = arr(x, "cpu")
    if misalign:  # a view one element into a bigger buffer: no 16-byte packs
        big = arr(np.concatenate([x.reshape(-1)[:1], x.reshape(-1)]), "cpu")
        xd = big[1:].reshape(shape)
    res = []
    y, mean, rstd = nn.layer_norm(xd, arr(w, "cpu"), arr(b, "cpu"))
    res += [y, mean, rstd]
    res += list(nn.layer_norm_backward(arr(g, "cpu"), xd, mean, rstd, arr(w, "cpu")))
    res += list(
        nn.layer_norm_backward(arr(g, "cpu"), xd, mean, rstd, grad_weight=False, grad_bias=True)
    )[::2]
    y, rstd = nn.rms_norm(xd, arr(w, "cpu"))
    res += [y, rstd]
    res += list(nn.rms_norm_backward(arr(g, "cpu"), xd, rstd, arr(w, "cpu")))
    s = ignis.softmax(xd, axis=-1)
    res.append(nn.softmax_backward(arr(g, "cpu"), s, log=False))
    res.append(
        nn.softmax_backward(
            arr(g.astype(np.float32), "cpu") if dtype in ("float16", "bfloat16") else arr(g, "cpu"),
            s,
            log=True,
        )
    )
    t = _targets(rng, shape[:-1], n, ignore_frac=0.2, dtype="int32" if n % 2 else "int64")
    if t.size > 1:
        t.reshape(-1)[1] = n + 3  # out of range: NaN row
    for red in ("mean", "sum", "none"):
        loss, lse = nn.cross_entropy(xd, arr(t, "cpu"), label_smoothing=0.1, reduction=red)
        gl = np.asarray(1.3) if red != "none" else rng.standard_normal(shape[:-1])
        res += [loss, lse]
        res.append(
            nn.cross_entropy_backward(
                arr(gl, "cpu"), xd, arr(t, "cpu"), lse, label_smoothing=0.1, reduction=red
            )
        )
    return [None if r is None else r.to_host() for r in res]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.exhaustive
def test_planned_kernels_match_the_cpu_backend(emu, small_thresholds, dtype):
    for i, shape in enumerate(PLAN_SHAPES):
        for misalign in (False, True):
            want = _run_family(np.random.default_rng(1000 + i), dtype, shape, misalign)
            emu.names.clear()
            with planned_cpu():
                got = _run_family(np.random.default_rng(1000 + i), dtype, shape, misalign)
            assert emu.names, "the planned backend was not used"
            for k, (a, b) in enumerate(zip(got, want, strict=True)):
                assert (a is None) == (b is None), k
                if a is None:
                    continue
                assert a.dtype == b.dtype and a.shape == b.shape, (k, a.dtype, b.dtype)
                np.testing.assert_allclose(
                    a.astype(np.float64),
                    b.astype(np.float64),
                    equal_nan=True,
                    err_msg=f"result {k} of {shape} misalign={misalign}",
                    **tol(dtype, 8 * math.sqrt(shape[0])),
                )


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_planned_norms_with_a_misaligned_weight(emu, dtype, rng):
    # The weight and bias are read in packs like the rows: a view one element into a bigger
    # buffer (not 16-byte aligned) must take single loads, and give the same results.
    x = random_array(rng, (5, 64), dtype)
    g = random_array(rng, (5, 64), dtype)
    w, b = random_array(rng, (65,), dtype), random_array(rng, (65,), dtype)

    def run():
        wd, bd = arr(w, "cpu")[1:], arr(b, "cpu")[1:]
        xd = arr(x, "cpu")
        y, mean, rstd = nn.layer_norm(xd, wd, bd)
        gx, gw, gb = nn.layer_norm_backward(arr(g, "cpu"), xd, mean, rstd, wd)
        yr, rr = nn.rms_norm(xd, wd)
        gxr, gwr = nn.rms_norm_backward(arr(g, "cpu"), xd, rr, wd)
        return [a.to_host() for a in (y, mean, rstd, gx, gw, gb, yr, rr, gxr, gwr)]

    want = run()
    with planned_cpu():
        got = run()
    rows = {split_name(n)[0]: split_name(n)[1] for _, n in emu.names}
    assert rows["norm_fwd"][2] == "1" and rows["norm_bwd"][3] == "1", rows
    assert int(rows["norm_param_partials"][2]) > 1  # the column sums do not read the weight
    for k, (a, b_) in enumerate(zip(got, want, strict=True)):
        np.testing.assert_allclose(f64(a), f64(b_), err_msg=f"result {k}", **tol(dtype, 8))


@pytest.mark.parametrize("tuned", [True, False])
def test_planned_bfloat16_rows_of_4096_and_the_switches(emu, tune, tuned, rng):
    # Tuned: 4 packs of 8 per thread forward, 2 backward, 16-byte lanes in the column sums;
    # the switches restore the first plan (2 and 1 packs, one element per lane). Same results.
    tune(norm_loss=dict(block_bytes_of_data=tuned, param_vector_loads=tuned))
    x = random_array(rng, (3, 4096), "bfloat16")
    g = random_array(rng, (3, 4096), "bfloat16")
    w, b = random_array(rng, (4096,), "bfloat16"), random_array(rng, (4096,), "bfloat16")

    def run():
        xd, wd = arr(x, "cpu"), arr(w, "cpu")
        y, mean, rstd = nn.layer_norm(xd, wd, arr(b, "cpu"))
        gx, gw, gb = nn.layer_norm_backward(arr(g, "cpu"), xd, mean, rstd, wd)
        return [a.to_host() for a in (y, mean, rstd, gx, gw, gb)]

    want = run()
    with planned_cpu():
        got = run()
    plan = {split_name(n)[0]: split_name(n)[1] for _, n in emu.names}
    assert plan["norm_fwd"][2:4] == (["8", "4"] if tuned else ["8", "2"]), plan
    assert plan["norm_bwd"][3:5] == (["8", "2"] if tuned else ["8", "1"]), plan
    assert plan["norm_param_partials"][2] == ("8" if tuned else "1"), plan
    for k, (a, b_) in enumerate(zip(got, want, strict=True)):
        np.testing.assert_allclose(f64(a), f64(b_), err_msg=f"result {k}", **tol("bfloat16", 8))


def _planned_names(rng) -> list[tuple[str, str]]:
    em = Emulator()
    with pytest.MonkeyPatch.context() as mp, planned_cpu():
        mp.setattr(norm_loss, "_launch", em)
        for dtype in FLOATS:
            for shape in [(3, 8), (2, 40), (5, 1000), (2, 4096), (1, 20000), (2, 513), (3, 50257)]:
                _run_family(rng, dtype, shape)
            _run_family(rng, dtype, (2, 64), misalign=True)
    return sorted(set(em.names))


def _compile_all(names: list[tuple[str, str]]) -> None:
    for source in ("norm.cu", "cross_entropy.cu"):
        exprs = [n for s, n in names if s == source]
        obj = ignis.compile(
            _sources.read_source(source), CompileOptions(arch="sm_90"), name_expressions=exprs
        )
        assert set(obj.lowered_names) == set(exprs)
        assert obj.log == "", obj.log


def _covering(names: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """A few names that between them use every kernel with each of its type combinations and
    each of its shapes (warp or block rows, cached or re-read rows, packed or single loads)."""

    def features(item):
        kernel, targs = split_name(item[1])
        types = tuple(a for a in targs if not a.isdigit() and a not in ("true", "false"))
        shape = tuple(
            "0" if a == "0" else ("v" if a.isdigit() and a != "1" else a)
            for a in targs
            if a.isdigit() or a in ("true", "false")
        )
        return {(kernel, "types", types), (kernel, "shape", shape)}

    need = set().union(*(features(n) for n in names))
    chosen = []
    while need:
        best = max(names, key=lambda n: len(features(n) & need))
        chosen.append(best)
        need -= features(best)
    return chosen


@pytest.mark.exhaustive
def test_planned_kernels_compile_for_sm90(rng):
    names = _planned_names(rng)
    kinds = {split_name(n)[0] for _, n in names}
    assert kinds == {
        "norm_fwd",
        "norm_bwd",
        "norm_param_partials",
        "norm_param_finish",
        "softmax_bwd",
        "ce_fwd",
        "ce_reduce",
        "ce_bwd",
    }, kinds
    # every path of the row kernels is planned somewhere: warp rows, cached and re-read rows
    fwd = [split_name(n)[1] for _, n in names if split_name(n)[0] == "norm_fwd"]
    assert {a[4] for a in fwd} == {"true", "false"} and "0" in {a[3] for a in fwd}
    _compile_all(_covering(names))


@pytest.mark.exhaustive
def test_every_planned_kernel_compiles_for_sm90(rng):
    _compile_all(_planned_names(rng))


def test_row_config():
    assert norm_loss.row_config(4096, 4, 4, 1) == (False, 4, 256)
    # bfloat16: 16-byte packs of 8; the cache limit counts bytes of the data type, so a thread
    # takes twice the packs of a float32 row (64 bytes in flight) and the row half the threads
    assert norm_loss.row_config(4096, 8, 4, 1, itemsize=2) == (False, 4, 128)
    assert norm_loss.row_config(4096, 8, 4, 2, itemsize=2) == (False, 2, 256)  # two arrays
    assert norm_loss.row_config(4096, 8, 4, 1) == (False, 2, 256)  # sized in the compute type
    assert norm_loss.row_config(4096, 4, 4, 2) == (False, 2, 512)  # float32 backward
    assert norm_loss.row_config(2048, 4, 4, 1) == (False, 4, 128)  # more packs, fewer threads
    # single loads: the cache is sized in the compute type whatever the data type
    assert norm_loss.row_config(1500, 1, 4, 1, itemsize=2) == (False, 16, 128)
    assert norm_loss.row_config(768, 4, 4, 1) == (True, 8, 128)  # a warp per row
    # two cached arrays: too big for a warp
    assert norm_loss.row_config(1024, 4, 4, 2) == (False, 2, 128)
    assert norm_loss.row_config(8192, 4, 4, 2) == (False, 2, 1024)
    assert norm_loss.row_config(50000, 4, 4, 1) == (False, 0, 1024)  # re-read per pass
    for n in (1, 31, 33, 1000, 1030, 4096, 5003, 16384, 16385, 100000):
        for vec, w, arrays, size in (
            (1, 4, 1, 4),
            (4, 4, 1, 4),
            (8, 4, 2, 2),
            (8, 4, 1, 2),
            (1, 4, 2, 2),
            (2, 8, 2, 8),
            (1, 8, 1, 8),
        ):
            warp, items, threads = norm_loss.row_config(n, vec, w, arrays, size)
            lanes = 32 if warp else threads
            assert items == 0 or n <= lanes * vec * items, (n, vec, w, arrays)
            assert threads % 32 == 0 and threads <= 1024
            if not warp:  # cached values stay within the register budget
                data = size if vec > 1 else w
                assert items * vec * data * arrays <= max(
                    ignis.tuning().norm_loss.block_bytes, vec * data * arrays
                )
                assert items * vec * w * arrays <= 128


# ==================================================================================================
# GPU only
# ==================================================================================================

GPU = "cuda:0"


@needs_torch
@pytest.mark.gpu
@pytest.mark.parametrize(
    ("dtype", "offset", "spread"), [("float32", 300.0, 0.01), ("bfloat16", 30.0, 2.0)]
)
def test_gpu_long_rows_and_large_offsets(dtype, offset, spread, rng):
    # 20000 and 40000 elements exceed the register cache: the re-reading kernels with shifted sums.
    for n in (20000, 40000):
        x = (rng.standard_normal((3, n)) * spread + offset).astype(np_dtype(dtype))
        y, mean, rstd = nn.layer_norm(arr(x, GPU))
        ry, rmu, rr = ref_layer_norm(x, None, None, 1e-5)
        np.testing.assert_allclose(f64(rstd), rr, rtol=2e-3)
        np.testing.assert_allclose(f64(y), ry, **tol(dtype, 40 if dtype == "float32" else 2))
        g = rng.standard_normal((3, n)).astype(np_dtype(dtype))
        gx, _, _ = nn.layer_norm_backward(arr(g, GPU), arr(x, GPU), mean, rstd)
        want = ref_layer_norm_backward(g, x, None, 1e-5)[0]
        np.testing.assert_allclose(f64(gx), want, rtol=5e-2, atol=5e-2 * np.abs(want).max())
        s = ignis.softmax(arr(x, GPU), axis=-1)
        gs = nn.softmax_backward(arr(g, GPU), s)
        sv, gv = f64(s), f64(g)
        np.testing.assert_allclose(
            f64(gs), sv * (gv - (gv * sv).sum(-1, keepdims=True)), rtol=2e-2, atol=1e-6
        )


@needs_torch
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_gpu_cross_entropy_large_vocab_misaligned(dtype, rng):
    c = 50257
    z = (rng.standard_normal((9, c)) * 3).astype(np_dtype(dtype))
    t = _targets(rng, (9,), c, ignore_frac=0.2)
    big = arr(np.concatenate([z.reshape(-1)[:1], z.reshape(-1)]), GPU)
    for zd in (arr(z, GPU), big[1:].reshape(9, c)):  # aligned rows and a view one element in
        loss, lse = nn.cross_entropy(zd, arr(t, GPU), label_smoothing=0.1)
        want, want_grad = ref_cross_entropy(z, t, -100, 0.1, "mean")
        np.testing.assert_allclose(f64(loss), want, rtol=CE_TOL[dtype])
        grad = nn.cross_entropy_backward(
            ignis.ones((), device=GPU), zd, arr(t, GPU), lse, label_smoothing=0.1
        )
        np.testing.assert_allclose(f64(grad), want_grad, rtol=CE_TOL[dtype], atol=CE_TOL[dtype] / 9)


@pytest.mark.gpu
def test_gpu_parameter_gradients_are_deterministic(rng):
    x = arr(rng.standard_normal((3000, 777)).astype(np.float32), GPU)
    g = arr(rng.standard_normal((3000, 777)).astype(np.float32), GPU)
    w = arr(rng.standard_normal(777).astype(np.float32), GPU)
    _, mean, rstd = nn.layer_norm(x, w)
    runs = [nn.layer_norm_backward(g, x, mean, rstd, w) for _ in range(3)]
    for gx, gw, gb in runs[1:]:
        np.testing.assert_array_equal(gw.to_host(), runs[0][1].to_host())
        np.testing.assert_array_equal(gb.to_host(), runs[0][2].to_host())
        np.testing.assert_array_equal(gx.to_host(), runs[0][0].to_host())
    z = arr(rng.standard_normal((5000, 100)).astype(np.float32), GPU)
    t = arr(_targets(rng, (5000,), 100, ignore_frac=0.1), GPU)
    first = nn.cross_entropy(z, t)[0].to_host()
    for _ in range(2):
        np.testing.assert_array_equal(nn.cross_entropy(z, t)[0].to_host(), first)


@needs_torch
@pytest.mark.gpu
def test_gpu_no_host_synchronization_in_cross_entropy(rng):
    # The whole forward and backward can be captured in a CUDA graph: nothing reads back.
    z = arr(rng.standard_normal((64, 1000)).astype(np.float32), GPU)
    t = arr(_targets(rng, (64,), 1000, ignore_frac=0.2), GPU)
    ignis.current_stream().synchronize()  # the set-up above ran on the default stream
    pool = ignis.GraphPool(0)
    s = ignis.Stream()

    def step():
        one = ignis.ones((), device=GPU)
        loss, lse = nn.cross_entropy(z, t, label_smoothing=0.1)
        return loss, nn.cross_entropy_backward(one, z, t, lse, label_smoothing=0.1)

    with pool.active(), s:
        step()  # warm-up: compiles, and the pool sizes itself
        with ignis.Graph.capture(s) as graph:
            loss, grad = step()
    graph.launch(s)
    s.synchronize()
    want, want_grad = ref_cross_entropy(z.to_host(), t.to_host(), -100, 0.1, "mean")
    np.testing.assert_allclose(loss.to_host(), want, rtol=2e-5)
    np.testing.assert_allclose(grad.to_host(), want_grad, rtol=2e-4, atol=1e-7)


@needs_torch
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("n", [2048, 4096, 4104, 777, 12288])
def test_gpu_norms_many_rows_against_float64(dtype, n, rng):
    # 16-bit rows of 2048..12288 take the 16-byte-pack block configurations (4 packs per thread
    # forward, 2 per array backward); 700 rows split the weight/bias column sums (16-byte loads
    # per lane when n allows: 777 does not); float32 grad_y with 16-bit x mixes load widths.
    rows = 700
    x = random_array(rng, (rows, n), dtype) + np.asarray(0.25, np_dtype(dtype))
    w, b = random_array(rng, (n,), dtype), random_array(rng, (n,), dtype)
    xd, wd, bd = arr(x, GPU), arr(w, GPU), arr(b, GPU)
    grads = [random_array(rng, (rows, n), dtype)]
    if dtype != "float32":
        grads.append(rng.standard_normal((rows, n)).astype(np.float32))
    sums = tol("float32", 4 * math.sqrt(rows))
    y, mean, rstd = nn.layer_norm(xd, wd, bd)
    ry, rmu, rr = ref_layer_norm(x, w, b, 1e-5)
    np.testing.assert_allclose(f64(y), ry, **tol(dtype, 4))
    np.testing.assert_allclose(f64(rstd), rr, rtol=3e-4)
    for g in grads:
        runs = [nn.layer_norm_backward(arr(g, GPU), xd, mean, rstd, wd) for _ in range(2)]
        gx, gw, gb = runs[0]
        rgx, rgw, rgb = ref_layer_norm_backward(g, x, w, 1e-5)
        assert gx.dtype.name == ("float32" if g.dtype == np.float32 else dtype)
        np.testing.assert_allclose(f64(gx), rgx, **tol(dtype, 8))
        np.testing.assert_allclose(f64(gw), rgw, **sums)
        np.testing.assert_allclose(f64(gb), rgb, **sums)
        np.testing.assert_array_equal(runs[1][1].to_host(), gw.to_host())  # deterministic
        np.testing.assert_array_equal(runs[1][2].to_host(), gb.to_host())
    yr, rrstd = nn.rms_norm(xd, wd, eps=1e-6)
    np.testing.assert_allclose(f64(yr), ref_rms_norm(x, w, 1e-6)[0], **tol(dtype, 4))
    for g in grads:
        gx, gw = nn.rms_norm_backward(arr(g, GPU), xd, rrstd, wd)
        rgx, rgw, _ = ref_layer_norm_backward(g, x, w, 1e-6, rms=True)
        np.testing.assert_allclose(f64(gx), rgx, **tol(dtype, 8))
        np.testing.assert_allclose(f64(gw), rgw, **sums)
