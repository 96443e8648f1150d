"""TransformerBlock and GPT: against a PyTorch model with the same state dict, training on one
batch, incremental decoding with the KV cache, and generation."""

from __future__ import annotations

import numpy as np
import pytest
from nn_torch_helpers import (
    TorchBlock,
    TorchGPT,
    assert_close,
    load_torch,
    needs_torch,
    randn,
    torch,
    tt,
)

import ignis
import ignis_autograd as ag
from ignis import DTypeError, ShapeError
from ignis_autograd import nn

V, CTX, DIM, LAYERS, HEADS = 23, 16, 16, 2, 4


def _ids(shape, device=None, seed=0, vocab=V):
    rng = np.random.default_rng(seed)
    return ignis.asarray(rng.integers(0, vocab, size=shape), device=device)


def _gpt(device=None, dtype="float64", seed=0, **kw):
    ignis.random.seed(seed)
    return nn.GPT(V, CTX, DIM, LAYERS, HEADS, device=device, dtype=dtype, **kw)


@needs_torch
def test_block_matches_torch(device):
    blk = nn.TransformerBlock(16, 4, device=device, dtype="float64")
    for name, p in blk.named_parameters():  # norms away from ones/zeros
        if "norm" in name:
            p.data.copy_(randn(p.shape, seed=len(name)).data)
    tblk = TorchBlock(16, 4)
    load_torch(tblk, blk)
    x = randn((2, 7, 16), device=device, requires_grad=True)
    tx = tt(x).requires_grad_(True)
    y, ty = blk(x), tblk(tx)
    assert_close(y, ty, 1e-9)
    y.sum().backward()
    ty.sum().backward()
    assert_close(x.grad, tx.grad, 1e-9)
    tparams = dict(tblk.named_parameters())
    for name, p in blk.named_parameters():
        assert_close(p.grad, tparams[name].grad, 1e-9)


def test_block_rmsnorm_and_errors():
    blk = nn.TransformerBlock(8, 2, mlp_ratio=2, norm="rmsnorm")
    assert isinstance(blk.norm1, nn.RMSNorm) and blk.mlp.fc1.out_features == 16
    assert blk(randn((1, 3, 8), dtype="float32")).shape == (1, 3, 8)
    with pytest.raises(ValueError, match="norm must be 'layernorm' or 'rmsnorm', got 'batch'"):
        nn.TransformerBlock(8, 2, norm="batch")


@needs_torch
def test_gpt_matches_torch(device):
    model = _gpt(device)
    tmodel = TorchGPT(V, CTX, DIM, LAYERS, HEADS)
    load_torch(tmodel, model, strict=False)  # ours lists the tied weight once
    assert torch.equal(tmodel.lm_head.weight, tt(model.tok_emb.weight))
    ids_np = np.random.default_rng(1).integers(0, V, size=(3, 11))
    ids = ignis.asarray(ids_np, device=device)
    logits = model(ids)
    assert logits.shape == (3, 11, V) and logits.dtype == ignis.float64
    tlogits = tmodel(torch.from_numpy(ids_np))
    assert_close(logits, tlogits, 1e-9)
    targets = ids_np[:, 1:]
    loss = ag.cross_entropy(logits[:, :-1], ignis.asarray(targets, device=device))
    tloss = torch.nn.functional.cross_entropy(
        tlogits[:, :-1].reshape(-1, V), torch.from_numpy(targets).reshape(-1)
    )
    assert abs(loss.item() - tloss.item()) < 1e-9
    loss.backward()
    tloss.backward()
    tparams = dict(tmodel.named_parameters())
    names = [n for n, _ in model.named_parameters()]
    assert names == list(tparams)  # torch also lists the tied weight once
    for name, p in model.named_parameters():
        assert_close(p.grad, tparams[name].grad, 1e-8)
    # torch's state dict (which names the tied weight twice) loads back into ours
    other = _gpt(device, seed=9)
    other.load_state_dict({k: v.detach().numpy() for k, v in tmodel.state_dict().items()})
    assert_close(other(ids), tlogits, 1e-9)


def test_gpt_structure_and_init():
    model = _gpt(dtype="float32")
    assert model.lm_head.weight is model.tok_emb.weight
    sd = model.state_dict()
    assert "lm_head.weight" not in sd and "tok_emb.weight" in sd
    per_block = (
        2 * 2 * DIM + (3 * DIM * DIM + 3 * DIM) + (DIM * DIM + DIM) + 2 * (4 * DIM * DIM) + 5 * DIM
    )
    assert model.num_parameters() == V * DIM + CTX * DIM + LAYERS * per_block + 2 * DIM
    w = model.blocks[0].attn.qkv.weight.to_host()
    assert 0.015 < w.std() < 0.025  # GPT-2's N(0, 0.02)
    proj = model.blocks[0].mlp.fc2.weight.to_host()
    assert proj.std() < 0.6 * w.std()  # residual projections scaled by 1/sqrt(2 * n_layers)
    assert not np.any(model.blocks[1].attn.qkv.bias.to_host())
    np.testing.assert_array_equal(model.norm.weight.to_host(), np.ones(DIM))
    untied = _gpt(dtype="float32", tie_weights=False)
    assert untied.lm_head.weight is not untied.tok_emb.weight
    assert "lm_head.weight" in untied.state_dict()
    assert untied.num_parameters() == model.num_parameters() + V * DIM
    assert "tie_weights=True" in repr(model) and "(blocks): ModuleList(" in repr(model)


def test_gpt_bad_input():
    model = _gpt(dtype="float32")
    with pytest.raises(DTypeError, match="GPT: ids must be integer token ids, got float32"):
        model(ignis.zeros((1, 3)))
    with pytest.raises(ShapeError, match=r"GPT: ids must be \(batch, T\), got shape \(3,\)"):
        model(_ids((3,)))
    with pytest.raises(ShapeError, match="positions 0..16 exceed the context of 16"):
        model(_ids((1, CTX + 1)))
    with pytest.raises(TypeError, match="GPT: ids must be an NvArray or Tensor, got list"):
        model([[1, 2]])
    with pytest.raises(ValueError, match="GPT: got 1 KV caches for 2 blocks"):
        model(_ids((1, 2)), kv_caches=model.new_caches(1)[:1])


def _sgd_steps(model, x, y, steps, lr):
    try:
        from ignis_autograd import optim
    except ImportError:
        optim = None
    params = list(model.parameters())
    opt = optim.SGD(params, lr=lr, momentum=0.9) if optim is not None else None
    velocity = [None] * len(params)
    losses = []
    for _ in range(steps):
        loss = ag.cross_entropy(model(x), y)
        losses.append(loss.item())
        model.zero_grad(set_to_none=True)
        loss.backward()
        if opt is not None:
            opt.step()
            continue
        for i, p in enumerate(params):  # plain momentum SGD
            velocity[i] = p.grad if velocity[i] is None else velocity[i] * 0.9 + p.grad
            p.data -= lr * velocity[i]
    return losses


@pytest.mark.parametrize("rope", [False, True])
def test_tiny_gpt_overfits_one_batch(device, rope):
    model = _gpt(device, dtype="float32", rope=rope)
    ids = _ids((4, 13), device, seed=3)
    x, y = ids[:, :-1], ids[:, 1:]
    losses = _sgd_steps(model, x, y, steps=100, lr=0.1)
    assert losses[0] > 2.5  # about log(23) at the start
    assert losses[-1] < 0.25 * losses[0], losses[::10]


def test_dropout_model_trains_and_eval_is_deterministic(device):
    model = _gpt(device, dtype="float32", dropout=0.2)
    ids = _ids((2, 9), device)
    model.eval()
    a, b = model(ids).to_host(), model(ids).to_host()
    np.testing.assert_array_equal(a, b)
    model.train()
    assert not np.array_equal(model(ids).to_host(), a)
    losses = _sgd_steps(model, ids[:, :-1], ids[:, 1:], steps=3, lr=0.05)
    assert all(np.isfinite(losses))


@pytest.mark.parametrize("rope", [False, True])
def test_incremental_decoding_equals_full_forward(device, rope):
    model = _gpt(device, rope=rope)
    model.eval()
    ids = _ids((2, 12), device, seed=4)
    full = model(ids).to_host()
    for grad_mode in (ag.enable_grad, ag.no_grad):
        with grad_mode():
            caches = model.new_caches(2, 12)
            steps = [model(ids[:, :5], kv_caches=caches).to_host()]
            for t in range(5, 12):
                steps.append(model(ids[:, t : t + 1], kv_caches=caches).to_host())
        got = np.concatenate(steps, axis=1)
        np.testing.assert_allclose(got, full, rtol=1e-9, atol=1e-10)
        np.testing.assert_allclose(got[:, -1], full[:, -1], rtol=1e-9, atol=1e-10)


def test_incremental_decoding_float32(device):
    model = _gpt(device, dtype="float32")
    ids = _ids((3, 16), device, seed=5)
    full = model(ids).to_host()
    with ag.no_grad():
        caches = model.new_caches(3)
        model(ids[:, :13], kv_caches=caches)
        for t in range(13, 16):
            last = model(ids[:, t : t + 1], kv_caches=caches).to_host()[:, 0]
            np.testing.assert_allclose(last, full[:, t], rtol=1e-4, atol=1e-4)


def _greedy_reference(model, ids, n):
    """Greedy decoding by re-running the whole sequence each step (no cache)."""
    seq = ids.to_host()
    for _ in range(n):
        logits = model(ignis.asarray(seq, device=ids.device)).to_host()[:, -1]
        seq = np.concatenate([seq, logits.argmax(-1)[:, None]], axis=1)
    return seq


def test_generate_greedy_matches_full_recompute(device):
    model = _gpt(device, dtype="float32", seed=2)
    ids = _ids((2, 4), device, seed=6)
    out = model.generate(ids, 8, temperature=0)
    assert out.shape == (2, 12) and out.dtype == ignis.int64
    np.testing.assert_array_equal(out.to_host(), _greedy_reference(model, ids, 8))
    np.testing.assert_array_equal(model.generate(ids, 8, top_k=1).to_host(), out.to_host())


def test_generate_sampling(device):
    model = _gpt(device, dtype="float32", seed=2)
    ids = _ids((3, 2), device, seed=7)
    a = model.generate(ids, 10, generator=ignis.random.Generator(5)).to_host()
    b = model.generate(ids, 10, generator=ignis.random.Generator(5)).to_host()
    np.testing.assert_array_equal(a, b)  # reproducible with a generator
    np.testing.assert_array_equal(a[:, :2], ids.to_host())
    assert a.min() >= 0 and a.max() < V
    c = model.generate(ids, 10, temperature=1.5, top_k=3, generator=ignis.random.Generator(6))
    assert c.shape == (3, 12)
    assert model.training  # restored after generation
    assert model.generate(ids, 0).shape == (3, 2)


def test_sampling_distribution():
    from ignis_autograd.nn._sampling import sample

    probs = np.array([0.1, 0.6, 0.3, 0.0])
    with np.errstate(divide="ignore"):
        logits = ignis.asarray(np.tile(np.log(probs), (4000, 1)).astype(np.float32))
    drawn = sample(logits, generator=ignis.random.Generator(1)).to_host()
    freq = np.bincount(drawn, minlength=4) / drawn.size
    np.testing.assert_allclose(freq, probs, atol=0.03)
    top = sample(logits, top_k=2, generator=ignis.random.Generator(2)).to_host()
    freq2 = np.bincount(top, minlength=4) / top.size
    np.testing.assert_allclose(freq2, [0.0, 2 / 3, 1 / 3, 0.0], atol=0.03)
    cold = sample(logits, temperature=0.05, generator=ignis.random.Generator(3)).to_host()
    assert (cold == 1).mean() > 0.99


def test_generate_errors():
    model = _gpt(dtype="float32")
    ids = _ids((1, 10))
    with pytest.raises(ValueError, match="prompt of 10 \\+ 7 new tokens exceeds the context of 16"):
        model.generate(ids, 7)
    with pytest.raises(ValueError, match="temperature must be >= 0"):
        model.generate(ids, 1, temperature=-1.0)
    with pytest.raises(ValueError, match="top_k must be a positive int"):
        model.generate(ids, 1, top_k=0)
    with pytest.raises(ShapeError, match="generate: ids must be a \\(batch, T\\)"):
        model.generate(_ids((5,)), 1)
    with pytest.raises(TypeError, match="max_new_tokens must be an int"):
        model.generate(ids, 2.0)


def test_gpt_bfloat16(device):
    model = _gpt(device, dtype="float32")
    ids = _ids((2, 8), device)
    ref = model(ids).to_host()
    model.to(dtype="bfloat16")
    logits = model(ids)
    assert logits.dtype == ignis.bfloat16
    assert_close(logits, ref, 5e-2)
    assert model.generate(ids[:, :3], 4, temperature=0).shape == (2, 7)
