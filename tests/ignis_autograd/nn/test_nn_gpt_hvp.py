"""The small GPT's loss: Hessian-vector products agree with PyTorch's in float64 (skipped where
PyTorch is absent), and agree with central differences of the gradient everywhere."""

from __future__ import annotations

import numpy as np
from nn_torch_helpers import TorchGPT, assert_close, load_torch, needs_torch, torch

import ignis
import ignis_autograd as ag
from ignis_autograd import Tensor, nn

V, CTX, DIM, LAYERS, HEADS = 13, 8, 8, 1, 2


def _setup(device):
    ignis.random.seed(3)
    model = nn.GPT(V, CTX, DIM, LAYERS, HEADS, device=device, dtype="float64")
    for name, p in model.named_parameters():  # norms away from ones and zeros
        if "norm" in name:
            p.data.copy_(ignis.asarray(np.random.default_rng(len(name)).normal(1.0, 0.3, p.shape)))
    rng = np.random.default_rng(5)
    ids = rng.integers(0, V, size=(2, 7))
    vs = {name: rng.standard_normal(p.shape) for name, p in model.named_parameters()}
    return model, ids, vs


def _loss(model, ids, device):
    logits = model(ignis.asarray(ids[:, :-1], device=device))
    return ag.cross_entropy(logits, ignis.asarray(ids[:, 1:], device=device))


def _hvp(model, ids, vs, device):
    params = [p for _, p in model.named_parameters()]
    gs = ag.grad(_loss(model, ids, device), params, create_graph=True)
    dot = sum(
        (
            (g * Tensor.from_host(vs[n], dtype="float64", device=device)).sum()
            for (n, _), g in zip(model.named_parameters(), gs, strict=True)
        ),
        Tensor.from_host(0.0, dtype="float64", device=device),
    )
    return ag.grad(dot, params)


def test_gpt_hvp_matches_central_differences_of_the_gradient(device):
    model, ids, vs = _setup(device)
    hv = _hvp(model, ids, vs, device)
    params = [p for _, p in model.named_parameters()]
    base = [p.data.to_host() for p in params]
    eps = 1e-6  # (the error of central differences falls as eps**2: 1e-5 at 1e-5)

    def gradient_at(sign):
        for p, b, (n, _) in zip(params, base, model.named_parameters(), strict=True):
            p.data.copy_(ignis.asarray(b + sign * eps * vs[n], device=device))
        gs = ag.grad(_loss(model, ids, device), params)
        return [g.to_host() for g in gs]

    plus, minus = gradient_at(1.0), gradient_at(-1.0)
    for h, gp, gm in zip(hv, plus, minus, strict=True):
        np.testing.assert_allclose(h.to_host(), (gp - gm) / (2 * eps), rtol=1e-5, atol=1e-6)


@needs_torch
def test_gpt_hvp_matches_torch(device):
    model, ids, vs = _setup(device)
    tmodel = TorchGPT(V, CTX, DIM, LAYERS, HEADS)
    load_torch(tmodel, model, strict=False)
    hv = _hvp(model, ids, vs, device)
    tparams = dict(tmodel.named_parameters())
    names = [n for n, _ in model.named_parameters()]
    # (PyTorch's CPU attention kernels have no double backward; its math path has)
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        tlogits = tmodel(torch.from_numpy(ids[:, :-1]))
        tloss = torch.nn.functional.cross_entropy(
            tlogits.reshape(-1, V), torch.from_numpy(ids[:, 1:]).reshape(-1)
        )
        tg = torch.autograd.grad(tloss, [tparams[n] for n in names], create_graph=True)
        dot = sum((g * torch.from_numpy(vs[n])).sum() for n, g in zip(names, tg, strict=True))
        thv = torch.autograd.grad(dot, [tparams[n] for n in names])
    for n, mine, theirs in zip(names, hv, thv, strict=True):
        assert_close(mine, theirs, 1e-8), n
