"""The differentiable ops under test: one case per op and form, shared by the gradcheck and the
PyTorch agreement tests.

A case has our function (over Tensors; integer arguments arrive as NvArrays), the PyTorch
equivalent (None when there is none) and its arguments: random host data of a kind chosen so
that central differences are well defined (no ties, no kinks within ``eps``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

import ignis
import ignis_autograd as ag
from ignis_autograd import Tensor


@dataclass(frozen=True)
class Arg:
    """One argument: ``kind`` is normal|pos|unique|away0|int:HIGH; ``grad`` marks it checked."""

    shape: tuple[int, ...]
    kind: str = "normal"
    grad: bool = True


@dataclass(frozen=True)
class Case:
    id: str
    ours: Callable[..., Any]
    theirs: Callable[..., Any] | None
    args: tuple[Arg, ...]


def host_value(arg: Arg, rng: np.random.Generator) -> np.ndarray:
    shape = arg.shape
    n = int(np.prod(shape)) if shape else 1
    if arg.kind == "normal":
        v = rng.standard_normal(shape)
    elif arg.kind == "pos":
        v = rng.uniform(0.5, 2.0, shape)
    elif arg.kind == "unique":  # distinct values at least 0.05 apart: max/min/maximum without ties
        v = ((rng.permutation(n) - n / 2) * 0.11 + rng.uniform(-0.02, 0.02, n)).reshape(shape)
    elif arg.kind == "away0":  # |v| >= 0.1: abs/relu/clip away from their kinks
        v = rng.choice([-1.0, 1.0], shape) * rng.uniform(0.1, 2.0, shape)
    elif arg.kind.startswith("int:"):
        return rng.integers(0, int(arg.kind[4:]), shape).astype(np.int64)
    else:
        raise ValueError(arg.kind)
    return np.asarray(v, dtype=np.float64)


def make_inputs(
    case: Case, rng: np.random.Generator, device: str, dtype: str = "float64"
) -> tuple[list[Any], list[np.ndarray]]:
    """Our arguments (Tensors requiring grad, or int NvArrays) and their host values."""
    ours, hosts = [], []
    for a in case.args:
        v = host_value(a, rng)
        hosts.append(v)
        if a.kind.startswith("int:"):
            ours.append(ignis.NvArray.from_host(v, dtype="int64", device=device))
        else:
            ours.append(Tensor.from_host(v, dtype=dtype, device=device, requires_grad=a.grad))
    return ours, hosts


def _gen(seed: int) -> ignis.random.Generator:
    return ignis.random.Generator(seed)


def _tt():  # torch, imported lazily so the cases load without it
    import torch

    return torch


def _torch_dropout_mask(x: Any, p: float, seed: int) -> Any:
    torch = _tt()
    u = ignis.random.Generator(seed).rand(tuple(x.shape), dtype="float32", device="cpu").to_host()
    return torch.from_numpy(u >= p)


def _torch_rope(x: Any, offset: int, base: float = 10000.0) -> Any:
    t = _tt()
    d, s = x.shape[-1], x.shape[-2]
    inv = base ** (-t.arange(0, d, 2, dtype=t.float64) / d)
    ang = (t.arange(s, dtype=t.float64) + offset)[:, None] * inv
    c, sn = ang.cos(), ang.sin()
    x0, x1 = x[..., : d // 2], x[..., d // 2 :]
    return t.cat([x0 * c - x1 * sn, x1 * c + x0 * sn], -1)


def _torch_sdpa(q: Any, k: Any, v: Any, causal: bool) -> Any:
    t = _tt()
    n_q, n_k = q.shape[-2], k.shape[-2]
    mask = t.ones(n_q, n_k, dtype=t.bool).tril(n_k - n_q) if causal else None
    return t.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def _torch_packed(qkv: Any, heads: int, causal: bool) -> Any:
    b, n, d3 = qkv.shape
    d = d3 // 3
    t = qkv.reshape(b, n, 3, heads, d // heads).permute(2, 0, 3, 1, 4)
    return _torch_sdpa(t[0], t[1], t[2], causal).permute(0, 2, 1, 3).reshape(b, n, d)


S = (3, 4)
CASES: list[Case] = [
    # arithmetic, broadcasting, scalars on either side
    Case("add", lambda a, b: a + b, lambda a, b: a + b, (Arg(S), Arg(S))),
    Case("add_broadcast_row", lambda a, b: a + b, lambda a, b: a + b, (Arg(S), Arg((4,)))),
    Case(
        "add_broadcast_col", lambda a, b: a + b, lambda a, b: a + b, (Arg((3, 1)), Arg((2, 1, 4)))
    ),
    Case("add_scalar_both_sides", lambda a: 2.5 + a + 1.0, lambda a: 2.5 + a + 1.0, (Arg(S),)),
    Case("sub", lambda a, b: a - b, lambda a, b: a - b, (Arg(S), Arg((1, 4)))),
    Case("rsub_scalar", lambda a: 3.0 - a, lambda a: 3.0 - a, (Arg(S),)),
    Case("mul", lambda a, b: a * b, lambda a, b: a * b, (Arg(S), Arg((3, 1)))),
    Case("mul_scalar", lambda a: a * 3.0 * -0.5, lambda a: a * 3.0 * -0.5, (Arg(S),)),
    Case(
        "mul_constant_operand", lambda a, b: a * b, lambda a, b: a * b, (Arg(S), Arg(S, grad=False))
    ),
    Case("div", lambda a, b: a / b, lambda a, b: a / b, (Arg(S), Arg((4,), "pos"))),
    Case("rdiv_scalar", lambda a: 2.0 / a, lambda a: 2.0 / a, (Arg(S, "pos"),)),
    Case("pow_tensor", lambda a, b: a**b, lambda a, b: a**b, (Arg(S, "pos"), Arg(S))),
    Case("pow_scalar", lambda a: a**2.5, lambda a: a**2.5, (Arg(S, "pos"),)),
    Case("pow_int", lambda a: a**3, lambda a: a**3, (Arg(S),)),
    Case("pow_square", lambda a: a**2, lambda a: a**2, (Arg(S),)),
    Case("pow_one_and_zero", lambda a: a**1 + a**0, lambda a: a**1 + a**0, (Arg(S),)),
    Case("rpow_scalar", lambda a: 2.0**a, lambda a: 2.0**a, (Arg(S),)),
    Case("neg", lambda a: -a, lambda a: -a, (Arg(S),)),
    Case("abs", lambda a: abs(a), lambda a: abs(a), (Arg(S, "away0"),)),
    # functions
    Case("exp", lambda a: a.exp(), lambda a: a.exp(), (Arg(S),)),
    Case("log", lambda a: a.log(), lambda a: a.log(), (Arg(S, "pos"),)),
    Case("sqrt", lambda a: a.sqrt(), lambda a: a.sqrt(), (Arg(S, "pos"),)),
    Case("tanh", lambda a: a.tanh(), lambda a: a.tanh(), (Arg(S),)),
    Case("sigmoid", lambda a: a.sigmoid(), lambda a: a.sigmoid(), (Arg(S),)),
    Case("relu", lambda a: a.relu(), lambda a: a.relu(), (Arg(S, "away0"),)),
    Case("gelu", lambda a: a.gelu(), lambda a: _tt().nn.functional.gelu(a), (Arg(S),)),
    Case(
        "gelu_tanh",
        lambda a: a.gelu("tanh"),
        lambda a: _tt().nn.functional.gelu(a, approximate="tanh"),
        (Arg(S),),
    ),
    Case("silu", lambda a: a.silu(), lambda a: _tt().nn.functional.silu(a), (Arg(S),)),
    Case(
        "maximum",
        lambda a, b: ag.maximum(a, b),
        lambda a, b: _tt().maximum(a, b),
        (Arg((12,), "unique"), Arg((12,), "unique")),
    ),
    Case(
        "maximum_broadcast_scalar",
        lambda a: ag.maximum(a, 0.05),
        lambda a: a.clamp(min=0.05),
        (Arg(S, "unique"),),
    ),
    Case(
        "minimum",
        lambda a, b: ag.minimum(a, b),
        lambda a, b: _tt().minimum(a, b),
        (Arg(S, "unique"), Arg((4,), "unique")),
    ),
    Case(
        "where",
        lambda a, b: ag.where(a > 0, a, b),
        lambda a, b: _tt().where(a > 0, a, b),
        (Arg(S, "away0"), Arg((4,))),
    ),
    Case(
        "where_scalar",
        lambda a: ag.where(a > 0, a * 2.0, 0.5),
        lambda a: _tt().where(a > 0, a * 2.0, 0.5),
        (Arg(S, "away0"),),
    ),
    Case(
        "clip", lambda a: a.clip(-0.5, 0.7), lambda a: a.clamp(-0.5, 0.7), (Arg((20,), "unique"),)
    ),
    Case(
        "clip_min_only",
        lambda a: ag.clip(a, min=0.0),
        lambda a: a.clamp(min=0.0),
        (Arg(S, "away0"),),
    ),
    # reductions
    Case("sum_all", lambda a: a.sum(), lambda a: a.sum(), (Arg((2, 3, 4)),)),
    Case("sum_axis", lambda a: a.sum(axis=1), lambda a: a.sum(axis=1), (Arg((2, 3, 4)),)),
    Case(
        "sum_axes_keepdims",
        lambda a: a.sum(axis=(0, -1), keepdims=True),
        lambda a: a.sum(axis=(0, -1), keepdims=True),
        (Arg((2, 3, 4)),),
    ),
    Case("mean_all", lambda a: a.mean(), lambda a: a.mean(), (Arg((2, 3, 4)),)),
    Case(
        "mean_axis_keepdims",
        lambda a: a.mean(axis=-1, keepdims=True),
        lambda a: a.mean(axis=-1, keepdims=True),
        (Arg((2, 3, 4)),),
    ),
    Case("max_all", lambda a: a.max(), lambda a: a.amax(), (Arg((2, 3, 4), "unique"),)),
    Case("max_axis", lambda a: a.max(axis=1), lambda a: a.amax(dim=1), (Arg((2, 3, 4), "unique"),)),
    Case(
        "min_axes_keepdims",
        lambda a: ag.min(a, axis=(0, 2), keepdims=True),
        lambda a: a.amin(dim=(0, 2), keepdim=True),
        (Arg((2, 3, 4), "unique"),),
    ),
    Case("var_all", lambda a: a.var(), lambda a: a.var(unbiased=False), (Arg((3, 5)),)),
    Case(
        "var_axis_ddof1",
        lambda a: a.var(axis=0, ddof=1),
        lambda a: a.var(dim=0, unbiased=True),
        (Arg((4, 5)),),
    ),
    Case(
        "var_keepdims",
        lambda a: ag.var(a, axis=-1, keepdims=True),
        lambda a: a.var(dim=-1, unbiased=False, keepdim=True),
        (Arg((4, 5)),),
    ),
    Case(
        "std_axis_correction1",
        lambda a: a.std(axis=0, correction=1),
        lambda a: a.std(dim=0, correction=1),
        (Arg((4, 5)),),
    ),
    Case("std_all", lambda a: ag.std(a), lambda a: a.std(correction=0), (Arg((3, 5)),)),
    Case(
        "prod_axis",
        lambda a: a.prod(axis=1),
        lambda a: a.prod(dim=1),
        (Arg((3, 4), "away0"),),  # the rule divides by each element
    ),
    Case("softmax", lambda a: a.softmax(), lambda a: a.softmax(-1), (Arg((3, 5)),)),
    Case("softmax_axis0", lambda a: ag.softmax(a, axis=0), lambda a: a.softmax(0), (Arg((3, 5)),)),
    Case("log_softmax", lambda a: a.log_softmax(), lambda a: a.log_softmax(-1), (Arg((3, 5)),)),
    Case(
        "log_softmax_axis0",
        lambda a: ag.log_softmax(a, axis=0),
        lambda a: a.log_softmax(0),
        (Arg((2, 3, 5)),),
    ),
    # linear algebra
    Case("matmul", lambda a, b: a @ b, lambda a, b: a @ b, (Arg((3, 4)), Arg((4, 5)))),
    Case(
        "matmul_batched", lambda a, b: a @ b, lambda a, b: a @ b, (Arg((2, 3, 4)), Arg((2, 4, 5)))
    ),
    Case(
        "matmul_batch_broadcast",
        lambda a, b: a.matmul(b),
        lambda a, b: a @ b,
        (Arg((2, 1, 3, 4)), Arg((3, 4, 2))),
    ),
    Case(
        "matmul_linear_3d_2d", lambda a, b: a @ b, lambda a, b: a @ b, (Arg((2, 3, 4)), Arg((4, 5)))
    ),
    Case("matmul_vec_mat", lambda a, b: a @ b, lambda a, b: a @ b, (Arg((4,)), Arg((4, 5)))),
    Case(
        "matmul_mat_vec", lambda a, b: ag.matmul(a, b), lambda a, b: a @ b, (Arg((3, 4)), Arg((4,)))
    ),
    Case("matmul_vec_vec", lambda a, b: a @ b, lambda a, b: a @ b, (Arg((4,)), Arg((4,)))),
    Case("matmul_vec_batched", lambda a, b: a @ b, lambda a, b: a @ b, (Arg((4,)), Arg((2, 4, 3)))),
    Case("add_bias", lambda a, b: a.add_bias(b), lambda a, b: a + b, (Arg((2, 3, 4)), Arg((4,)))),
    Case(
        "linear",
        lambda x, w, b: ag.linear(x, w, b),
        lambda x, w, b: _tt().nn.functional.linear(x, w, b),
        (Arg((2, 3, 4)), Arg((5, 4)), Arg((5,))),
    ),
    Case(
        "linear_no_bias_1d",
        lambda x, w: ag.linear(x, w),
        lambda x, w: _tt().nn.functional.linear(x, w),
        (Arg((4,)), Arg((5, 4))),
    ),
    Case(
        "linear_2d_frozen_weight",
        lambda x, w, b: ag.linear(x, w, b),
        lambda x, w, b: _tt().nn.functional.linear(x, w, b),
        (Arg((3, 4)), Arg((5, 4), grad=False), Arg((5,))),
    ),
    # shape
    Case("reshape", lambda a: a.reshape(4, 3) * 1.5, lambda a: a.reshape(4, 3) * 1.5, (Arg(S),)),
    Case("clone", lambda a: a.clone() * a, lambda a: a.clone() * a, (Arg(S),)),
    Case(
        "reshape_infer",
        lambda a: ag.reshape(a, (-1,)).exp(),
        lambda a: a.reshape(-1).exp(),
        (Arg((2, 3, 2)),),
    ),
    Case(
        "transpose",
        lambda a: a.transpose() * a.transpose(),
        lambda a: a.permute(2, 1, 0) ** 2,
        (Arg((2, 3, 4)),),
    ),
    Case(
        "transpose_axes",
        lambda a: ag.transpose(a, 1, 0, 2).exp(),
        lambda a: a.permute(1, 0, 2).exp(),
        (Arg((2, 3, 4)),),
    ),
    Case(
        "permute",
        lambda a: a.permute(2, 0, 1).tanh(),
        lambda a: a.permute(2, 0, 1).tanh(),
        (Arg((2, 3, 4)),),
    ),
    Case("T", lambda a, b: a.T @ b, lambda a, b: a.T @ b, (Arg((4, 3)), Arg((4, 2)))),
    Case("mT", lambda a: a.mT.exp(), lambda a: a.mT.exp(), (Arg((2, 3, 4)),)),
    Case(
        "squeeze_unsqueeze",
        lambda a: a.unsqueeze(0).squeeze(2).exp(),
        lambda a: a.unsqueeze(0).squeeze(2).exp(),
        (Arg((3, 1, 4)),),
    ),
    Case(
        "flatten",
        lambda a: a.flatten().sigmoid(),
        lambda a: a.flatten().sigmoid(),
        (Arg((2, 3, 2)),),
    ),
    Case(
        "broadcast_to",
        lambda a: a.broadcast_to((2, 3, 4)) * 2.0,
        lambda a: a.expand(2, 3, 4) * 2.0,
        (Arg((3, 1)),),
    ),
    Case("getitem_slice", lambda a: a[1:, ::2], lambda a: a[1:, ::2], (Arg((4, 5)),)),
    Case("getitem_int", lambda a: a[2] * a[0], lambda a: a[2] * a[0], (Arg((4, 5)),)),
    Case(
        "getitem_negative_step",
        lambda a: a[::-1, 1].exp(),
        lambda a: a.flip(0)[:, 1].exp(),
        (Arg((4, 5)),),
    ),
    Case(
        "getitem_none_ellipsis",
        lambda a: a[None, ..., 1:3],
        lambda a: a[None, ..., 1:3],
        (Arg((2, 3, 4)),),
    ),
    Case(
        "concatenate",
        lambda a, b: ag.concatenate([a, b, a], axis=1),
        lambda a, b: _tt().cat([a, b, a], dim=1),
        (Arg((2, 3)), Arg((2, 4))),
    ),
    Case(
        "concatenate_axis0",
        lambda a, b: ag.concatenate([a, b]),
        lambda a, b: _tt().cat([a, b]),
        (Arg((2, 3)), Arg((1, 3))),
    ),
    Case(
        "stack", lambda a, b: ag.stack([a, b]), lambda a, b: _tt().stack([a, b]), (Arg(S), Arg(S))
    ),
    Case(
        "stack_last",
        lambda a, b: ag.stack([a, b, b], axis=-1),
        lambda a, b: _tt().stack([a, b, b], dim=-1),
        (Arg(S), Arg(S)),
    ),
    # neural-network functions
    Case(
        "cross_entropy",
        lambda z, t: ag.cross_entropy(z, t),
        lambda z, t: _tt().nn.functional.cross_entropy(z, t),
        (Arg((5, 4)), Arg((5,), "int:4")),
    ),
    Case(
        "cross_entropy_sum",
        lambda z, t: ag.cross_entropy(z, Tensor(t), reduction="sum"),
        lambda z, t: _tt().nn.functional.cross_entropy(z, t, reduction="sum"),
        (Arg((5, 4)), Arg((5,), "int:4")),
    ),
    Case(
        "cross_entropy_none_3d",
        lambda z, t: ag.cross_entropy(z, t, reduction="none"),
        lambda z, t: _tt().nn.functional.cross_entropy(z.permute(0, 2, 1), t, reduction="none"),
        (Arg((2, 3, 4)), Arg((2, 3), "int:4")),
    ),
    Case(
        "cross_entropy_ignore_index",
        lambda z, t: ag.cross_entropy(z, t, ignore_index=1),
        lambda z, t: _tt().nn.functional.cross_entropy(z, t, ignore_index=1),
        (Arg((8, 3)), Arg((8,), "int:3")),
    ),
    Case(
        "layer_norm",
        lambda x: ag.layer_norm(x),
        lambda x: _tt().nn.functional.layer_norm(x, (5,)),
        (Arg((3, 5)),),
    ),
    Case(
        "layer_norm_affine",
        lambda x, w, b: ag.layer_norm(x, 5, w, b),
        lambda x, w, b: _tt().nn.functional.layer_norm(x, (5,), w, b),
        (Arg((2, 3, 5)), Arg((5,)), Arg((5,))),
    ),
    Case(
        "layer_norm_2d_shape",
        lambda x, w: x.layer_norm((3, 4), weight=w),
        lambda x, w: _tt().nn.functional.layer_norm(x, (3, 4), w),
        (Arg((2, 3, 4)), Arg((3, 4))),
    ),
    Case(
        "layer_norm_bias_only",
        lambda x, b: ag.layer_norm(x, bias=b),
        lambda x, b: _tt().nn.functional.layer_norm(x, (4,), None, b),
        (Arg((3, 4)), Arg((4,))),
    ),
    Case(
        "rms_norm",
        lambda x: ag.rms_norm(x),
        lambda x: _tt().nn.functional.rms_norm(x, (5,), eps=1e-6),
        (Arg((3, 5)),),
    ),
    Case(
        "rms_norm_weight",
        lambda x, w: x.rms_norm(weight=w),
        lambda x, w: _tt().nn.functional.rms_norm(x, (5,), w, eps=1e-6),
        (Arg((2, 3, 5)), Arg((5,))),
    ),
    Case(
        "embedding",
        lambda i, w: ag.embedding(i, w) * 1.5,
        lambda i, w: _tt().nn.functional.embedding(i, w) * 1.5,
        (Arg((2, 6), "int:5"), Arg((5, 3))),
    ),
    Case(
        "dropout",
        lambda x: ag.dropout(x, 0.4, generator=_gen(7)),
        lambda x: _tt().where(_torch_dropout_mask(x, 0.4, 7), x / 0.6, 0.0),
        (Arg((6, 5)),),
    ),
    Case(
        "take_index_array",
        lambda w, i: w[i, 1:] * 1.5,
        lambda w, i: w[i, 1:] * 1.5,
        (Arg((5, 3)), Arg((2, 4), "int:5")),
    ),
    Case(
        "rope",
        lambda x: ag.rope(x, offset=2),
        lambda x: _torch_rope(x, 2),
        (Arg((2, 4, 6)),),
    ),
    Case(
        "scaled_dot_product_attention",
        lambda q, k, v: ag.scaled_dot_product_attention(q, k, v),
        lambda q, k, v: _torch_sdpa(q, k, v, False),
        (Arg((2, 5, 8)), Arg((2, 7, 8)), Arg((2, 7, 8))),
    ),
    Case(
        "scaled_dot_product_attention_causal",
        lambda q, k, v: ag.scaled_dot_product_attention(q, k, v, causal=True),
        lambda q, k, v: _torch_sdpa(q, k, v, True),
        (Arg((1, 2, 5, 8)), Arg((1, 2, 7, 8)), Arg((1, 2, 7, 8))),
    ),
    Case(
        "packed_attention_causal",
        lambda qkv: ag.packed_attention(qkv, 2, causal=True),
        lambda qkv: _torch_packed(qkv, 2, True),
        (Arg((2, 5, 24)),),
    ),
    Case(
        "packed_attention",
        lambda qkv: ag.packed_attention(qkv, 3),
        lambda qkv: _torch_packed(qkv, 3, False),
        (Arg((1, 4, 18)),),
    ),
    # composites: a leaf used many times; a checkpointed block
    Case(
        "reuse",
        lambda x: (x * x + x * 3.0 - x.exp() * x).sum(axis=0) + x[0],
        lambda x: (x * x + x * 3.0 - x.exp() * x).sum(axis=0) + x[0],
        (Arg(S),),
    ),
    Case(
        "checkpoint",
        lambda x, w: ag.checkpoint(lambda h: (h @ w).tanh() @ w.T, x),
        lambda x, w: (x @ w).tanh() @ w.T,
        (Arg((3, 4)), Arg((4, 5))),
    ),
]

CASE_IDS = [c.id for c in CASES]
