"""The basic layers against PyTorch (float64 forward and gradients with the same weights), their
initializations and their argument checks."""

from __future__ import annotations

import math

import numpy as np
import pytest
from nn_torch_helpers import TOL, assert_close, load_torch, needs_torch, randn, torch, tt

import ignis
import ignis_autograd as ag
from ignis import DTypeError, ShapeError
from ignis_autograd import nn


def _compare(layer, tlayer, shape, device, seed=0, dtype="float64"):
    """Forward and backward (with a random output gradient) of both; returns nothing, asserts."""
    load_torch(tlayer, layer)
    x = randn(shape, dtype=dtype, device=device, seed=seed, requires_grad=True)
    y = layer(x)
    tx = tt(x).requires_grad_(True)
    ty = tlayer(tx)
    tol = TOL[dtype]
    assert_close(y, ty, tol)
    g = np.random.default_rng(seed + 1).standard_normal(y.shape)
    y.backward(ag.Tensor.from_host(g, dtype=dtype, device=device))
    ty.backward(torch.from_numpy(g))
    assert_close(x.grad, tx.grad, tol)
    tparams = dict(tlayer.named_parameters())
    for name, p in layer.named_parameters():
        assert_close(p.grad, tparams[name].grad, tol)


@needs_torch
@pytest.mark.parametrize("shape", [(5, 7), (2, 3, 7), (7,), (1, 1, 1, 7), (1000, 7)])
@pytest.mark.parametrize("bias", [True, False])
def test_linear_matches_torch(device, shape, bias):
    layer = nn.Linear(7, 33, bias=bias, device=device, dtype="float64")
    _compare(layer, torch.nn.Linear(7, 33, bias=bias), shape, device)


@needs_torch
def test_linear_float32_and_noncontiguous(device):
    layer = nn.Linear(31, 9, device=device)
    x = randn((31, 6), dtype="float32", device=device).T  # a transposed view
    tlayer = torch.nn.Linear(31, 9)
    load_torch(tlayer, layer)
    assert_close(layer(x), tlayer(tt(x)), TOL["float32"])


def test_linear_bfloat16(device):
    layer = nn.Linear(16, 8, device=device)
    x = randn((4, 16), dtype="float32", device=device)
    ref = layer(x).to_host()
    layer.to(dtype="bfloat16")
    y = layer(x.astype("bfloat16"))
    assert y.dtype == ignis.bfloat16
    assert_close(y, ref, TOL["bfloat16"])


def test_linear_init_like_torch():
    ignis.random.seed(3)
    layer = nn.Linear(400, 300)
    w, b = layer.weight.to_host(), layer.bias.to_host()
    bound = 1 / math.sqrt(400)
    assert w.shape == (300, 400) and b.shape == (300,)
    assert w.min() >= -bound and w.max() < bound
    assert abs(w.std() - bound / math.sqrt(3)) < 0.02 * bound  # uniform's deviation
    assert abs(w.mean()) < 0.02 * bound
    assert b.min() >= -bound and b.max() < bound and b.std() > 0.3 * bound
    ignis.random.seed(3)
    np.testing.assert_array_equal(nn.Linear(400, 300).weight.to_host(), w)  # seeded


def test_linear_bad_input():
    layer = nn.Linear(4, 2)
    with pytest.raises(ShapeError, match=r"Linear: input of shape \(3, 5\).*in_features=4"):
        layer(ag.Tensor(ignis.ones((3, 5))))
    with pytest.raises(TypeError, match="Linear: expected a Tensor or an NvArray, got list"):
        layer([1.0, 2.0, 3.0, 4.0])
    with pytest.raises(ValueError, match="Linear: in_features must be a positive int, got 0"):
        nn.Linear(0, 2)
    with pytest.raises(DTypeError, match="Linear: parameters must have a floating dtype"):
        nn.Linear(2, 2, dtype="int32")


def test_linear_accepts_nvarray():
    layer = nn.Linear(3, 2, dtype="float64")
    x = ignis.asarray(np.arange(6.0).reshape(2, 3))
    expected = np.arange(6.0).reshape(2, 3) @ layer.weight.to_host().T + layer.bias.to_host()
    np.testing.assert_allclose(layer(x).to_host(), expected, rtol=1e-12)


@needs_torch
def test_embedding_matches_torch(device):
    emb = nn.Embedding(37, 5, device=device, dtype="float64")
    temb = torch.nn.Embedding(37, 5)
    load_torch(temb, emb)
    ids_np = np.array([[0, 36, 3, 3], [7, 3, 0, 1]])  # repeats: gradients add up
    ids = ignis.asarray(ids_np, device=device)
    y = emb(ids)
    ty = temb(torch.from_numpy(ids_np))
    assert_close(y, ty, 1e-12)
    g = np.random.default_rng(0).standard_normal(y.shape)
    y.backward(ag.Tensor.from_host(g, dtype="float64", device=device))
    ty.backward(torch.from_numpy(g))
    assert_close(emb.weight.grad, temb.weight.grad, 1e-12)


def test_embedding_init_and_errors():
    ignis.random.seed(5)
    w = nn.Embedding(200, 100).weight.to_host()
    assert abs(w.mean()) < 0.02 and abs(w.std() - 1.0) < 0.02
    emb = nn.Embedding(4, 3, check_ids=True)
    with pytest.raises((IndexError, ValueError), match="embedding"):
        emb(ignis.asarray([0, 4]))
    assert emb(ignis.asarray([3, 0])).shape == (2, 3)
    with pytest.raises(DTypeError, match="embedding: ids must be integer"):
        emb(ignis.asarray([0.0, 1.0]))
    assert repr(emb) == "Embedding(4, 3)"


@needs_torch
@pytest.mark.parametrize("shape", [(4, 33), (2, 3, 33), (1, 33)])
def test_layer_norm_matches_torch(device, shape):
    ln = nn.LayerNorm(33, device=device, dtype="float64")
    ln.weight.data.copy_(randn((33,), seed=7).data)  # not the trivial ones/zeros
    ln.bias.data.copy_(randn((33,), seed=8).data)
    _compare(ln, torch.nn.LayerNorm(33), shape, device)


@needs_torch
def test_layer_norm_without_bias_and_init(device):
    ln = nn.LayerNorm(6, eps=1e-3, bias=False, device=device, dtype="float64")
    assert ln.bias is None and [n for n, _ in ln.named_parameters()] == ["weight"]
    np.testing.assert_array_equal(ln.weight.to_host(), np.ones(6))
    _compare(ln, torch.nn.LayerNorm(6, eps=1e-3, bias=False), (3, 6), device)
    with pytest.raises(ShapeError, match="layer_norm"):
        ln(randn((3, 5), device=device))


@needs_torch
def test_rms_norm_matches_torch(device):
    rms = nn.RMSNorm(31, device=device, dtype="float64")
    np.testing.assert_array_equal(rms.weight.to_host(), np.ones(31))
    rms.weight.data.copy_(randn((31,), seed=9).data)
    _compare(rms, torch.nn.RMSNorm(31, eps=1e-6), (2, 5, 31), device)
    with pytest.raises(ShapeError, match="rms_norm"):
        rms(randn((3, 5), device=device))


def test_dropout(device):
    x = ag.Tensor(ignis.ones((100, 100), dtype="float32", device=device), requires_grad=True)
    drop = nn.Dropout(0.25)
    y = drop(x).to_host()
    kept = y != 0
    assert 0.7 < kept.mean() < 0.8
    np.testing.assert_allclose(y[kept], 1 / 0.75, rtol=1e-6)
    drop.eval()
    assert drop(x) is x  # identity in eval
    drop.train()
    assert not np.any(nn.Dropout(1.0)(x).to_host())
    g1 = ignis.random.Generator(11)
    g2 = ignis.random.Generator(11)
    a = nn.Dropout(0.5, generator=g1)(x).to_host()
    b = nn.Dropout(0.5, generator=g2)(x).to_host()
    np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match=r"Dropout: dropout probability must be in \[0, 1\]"):
        nn.Dropout(1.5)


@needs_torch
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_matches_torch(device, approximate):
    _compare(nn.GELU(approximate), torch.nn.GELU(approximate), (3, 17), device)
    with pytest.raises(ValueError, match="GELU: approximate must be"):
        nn.GELU("fast")


@needs_torch
def test_relu_silu(device):
    _compare(nn.ReLU(), torch.nn.ReLU(), (4, 9), device)
    _compare(nn.SiLU(), torch.nn.SiLU(), (4, 9), device)


@needs_torch
def test_mlp_matches_torch(device):
    mlp = nn.MLP(12, 40, device=device, dtype="float64")
    assert [n for n, _ in mlp.named_parameters()] == [
        "fc1.weight",
        "fc1.bias",
        "fc2.weight",
        "fc2.bias",
    ]
    tmlp = torch.nn.Sequential(torch.nn.Linear(12, 40), torch.nn.GELU(), torch.nn.Linear(40, 12))
    tmlp.double()
    names = {
        "fc1.weight": "0.weight",
        "fc1.bias": "0.bias",
        "fc2.weight": "2.weight",
        "fc2.bias": "2.bias",
    }
    tmlp.load_state_dict({names[k]: tt(v) for k, v in mlp.state_dict().items()})
    x = randn((2, 5, 12), device=device, requires_grad=True)
    tx = tt(x).requires_grad_(True)
    y, ty = mlp(x), tmlp(tx)
    assert_close(y, ty, 1e-10)
    y.sum().backward()
    ty.sum().backward()
    assert_close(x.grad, tx.grad, 1e-10)
    assert_close(mlp.fc1.weight.grad, tmlp[0].weight.grad, 1e-10)


@pytest.mark.parametrize("activation", ["relu", "silu", "gelu_tanh"])
def test_mlp_activations(activation):
    mlp = nn.MLP(4, 8, activation=activation, dtype="float64")
    x = randn((3, 4))
    h = mlp.fc1(x)
    act = {"relu": h.relu(), "silu": h.silu(), "gelu_tanh": h.gelu("tanh")}[activation]
    np.testing.assert_allclose(mlp(x).to_host(), mlp.fc2(act).to_host(), rtol=1e-12)


def test_mlp_errors_and_dropout():
    with pytest.raises(ValueError, match="MLP: unknown activation 'tanh'"):
        nn.MLP(4, 8, activation="tanh")
    mlp = nn.MLP(4, 8, dropout=0.5)
    x = randn((64, 4), dtype="float32")
    assert np.mean(mlp(x).to_host() == 0) > 0.3
    mlp.eval()
    assert not np.any(mlp(x).to_host() == 0)
