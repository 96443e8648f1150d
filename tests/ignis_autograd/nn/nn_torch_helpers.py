"""Helpers of the ignis_autograd.nn tests: moving weights and values between ignis and torch,
and small PyTorch reference models with the same structure (and so the same state-dict names)."""

from __future__ import annotations

import math

import numpy as np
import pytest

try:
    import torch
    import torch.nn.functional as F

    _Module = torch.nn.Module
except ImportError:  # the comparisons with PyTorch skip (needs_torch); the rest still runs
    torch = F = None
    _Module = object

import ignis
import ignis_autograd as ag

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed")

TOL = {"float64": 1e-10, "float32": 2e-4, "bfloat16": 6e-2, "float16": 8e-3}


def tt(x) -> torch.Tensor:
    """A float64 (or integer) torch tensor with the values of an NvArray/Tensor/NumPy array."""
    if isinstance(x, ag.Tensor):
        x = x.data
    if isinstance(x, ignis.NvArray):
        x = x.to_host()
    x = np.asarray(x)
    if x.dtype.kind == "f" or x.dtype.name == "bfloat16":
        x = x.astype(np.float64)
    return torch.from_numpy(np.ascontiguousarray(x))


def host(x) -> np.ndarray:
    if isinstance(x, ag.Tensor):
        x = x.data
    if isinstance(x, ignis.NvArray):
        x = x.to_host()
    if torch is not None and isinstance(x, torch.Tensor):
        x = x.detach().numpy()
    return np.asarray(x).astype(np.float64)


def load_torch(tmod: torch.nn.Module, module, strict: bool = True) -> None:
    """Copy an ignis module's state dict into a float64 torch module (same names)."""
    tmod.double()
    state = {k: tt(v) for k, v in module.state_dict().items()}
    tmod.load_state_dict(state, strict=strict)


def randn(shape, dtype="float64", device=None, seed=0, requires_grad=False) -> ag.Tensor:
    """Random normal values on `device` (default: ignis' default device, like the modules)."""
    rng = np.random.default_rng(seed)
    return ag.Tensor.from_host(
        rng.standard_normal(shape), dtype=dtype, device=device, requires_grad=requires_grad
    )


def assert_close(actual, expected, tol: float) -> None:
    a, e = host(actual), host(expected)
    assert a.shape == e.shape, (a.shape, e.shape)
    scale = max(1.0, float(np.max(np.abs(e)))) if e.size else 1.0
    np.testing.assert_allclose(a, e, rtol=tol, atol=tol * scale)


def rope_ref(x: torch.Tensor, start: int, base: float = 10000.0) -> torch.Tensor:
    """Rotate-half rotary embedding, written from its formula."""
    d = x.shape[-1]
    half = d // 2
    inv = base ** (-2.0 * torch.arange(half, dtype=torch.float64) / d)
    pos = torch.arange(start, start + x.shape[-2], dtype=torch.float64)
    ang = pos[:, None] * inv[None, :]
    cos, sin = torch.cos(ang), torch.sin(ang)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class TorchAttention(_Module):
    def __init__(self, dim: int, n_heads: int, bias: bool = True, rope: bool = False):
        super().__init__()
        self.n_heads, self.rope = n_heads, rope
        self.qkv = torch.nn.Linear(dim, 3 * dim, bias=bias)
        self.proj = torch.nn.Linear(dim, dim, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        h = self.n_heads
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (t.reshape(b, n, h, d // h).transpose(1, 2) for t in (q, k, v))
        if self.rope:
            q, k = rope_ref(q, 0), rope_ref(k, 0)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, n, d))


class TorchMLP(_Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.fc1 = torch.nn.Linear(dim, hidden)
        self.fc2 = torch.nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class TorchBlock(_Module):
    def __init__(self, dim: int, n_heads: int, rope: bool = False):
        super().__init__()
        self.norm1 = torch.nn.LayerNorm(dim)
        self.attn = TorchAttention(dim, n_heads, rope=rope)
        self.norm2 = torch.nn.LayerNorm(dim)
        self.mlp = TorchMLP(dim, 4 * dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class TorchGPT(_Module):
    def __init__(self, vocab: int, context: int, dim: int, n_layers: int, n_heads: int):
        super().__init__()
        self.tok_emb = torch.nn.Embedding(vocab, dim)
        self.pos_emb = torch.nn.Embedding(context, dim)
        self.blocks = torch.nn.ModuleList(TorchBlock(dim, n_heads) for _ in range(n_layers))
        self.norm = torch.nn.LayerNorm(dim)
        self.lm_head = torch.nn.Linear(dim, vocab, bias=False)
        self.lm_head.weight = self.tok_emb.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(ids.shape[1])
        x = self.tok_emb(ids) + self.pos_emb(pos)
        for blk in self.blocks:
            x = blk(x)
        return self.lm_head(self.norm(x))


def gelu_exact(x: float) -> float:
    return 0.5 * x * (1 + math.erf(x / math.sqrt(2)))
