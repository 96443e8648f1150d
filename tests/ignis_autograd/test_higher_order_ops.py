"""Second derivatives of every differentiable op: gradgradcheck in float64, parametrized from the
op table and the reduction table, and the ops with their own rules (matrix products, shapes,
indexing, the fused neural-network kernels), on every device."""

from __future__ import annotations

import numpy as np
import pytest
from ignis._array._op_table import ELEMENTWISE
from ignis._array._reduction_table import REDUCTIONS

import ignis
import ignis_autograd as ag
from ignis_autograd import Tensor, gradgradcheck

UNARY = [op for op in ELEMENTWISE.values() if op.grad is not None and op.arity == 1]
BINARY = [op for op in ELEMENTWISE.values() if op.grad is not None and op.arity == 2]
REDUCING = [op for op in REDUCTIONS.values() if op.grad is not None]


def _ids(op):
    return op.name


def _leaf(rng, device, shape, lo=-2.0, hi=2.0):
    host = rng.uniform(lo, hi, size=shape)
    return Tensor.from_host(host, dtype="float64", device=device, requires_grad=True)


def _distinct(rng, device, shape):
    # distinct values: max/min have no ties where gradgradcheck probes
    host = rng.permutation(np.linspace(-2.0, 2.0, int(np.prod(shape)))).reshape(shape)
    return Tensor.from_host(host, dtype="float64", device=device, requires_grad=True)


# --- the tables -------------------------------------------------------------------------------


@pytest.mark.parametrize("op", UNARY, ids=_ids)
def test_unary_op_second_derivative(device, op, rng) -> None:
    fn = getattr(ag, op.name)
    for options in [{}] + [{k: v} for k, values in op.params.items() for v in values[1:]]:
        x = _leaf(rng, device, (2, 3), *op.sample)
        assert gradgradcheck(lambda t, o=options: fn(t, **o), [x], atol=1e-5, rtol=1e-3)


@pytest.mark.parametrize("broadcast", [False, True], ids=["same", "broadcast"])
@pytest.mark.parametrize("op", BINARY, ids=_ids)
def test_binary_op_second_derivative(device, op, broadcast, rng) -> None:
    fn = getattr(ag, op.name)
    a = _leaf(rng, device, (2, 3), *op.sample)
    b = _leaf(rng, device, (3,) if broadcast else (2, 3), *op.sample)
    assert gradgradcheck(fn, [a, b])
    # a Python scalar on either side
    s = float(rng.uniform(*op.sample))
    assert gradgradcheck(lambda t: fn(t, s), [a])
    assert gradgradcheck(lambda t: fn(s, t), [b])


def _reduction_cases():
    for op in REDUCING:
        axes = [-1, 0] if op.kind == "softmax" else [None, 1, (0, 2)]
        for axis in axes:
            yield pytest.param(op, axis, id=f"{op.name}-axis={axis}")


@pytest.mark.parametrize(("op", "axis"), list(_reduction_cases()))
def test_reduction_second_derivative(device, op, axis, rng) -> None:
    x = _distinct(rng, device, (2, 3, 2))
    options = {"axis": axis} if op.kind == "softmax" else {"axis": axis, "keepdims": False}
    if op.ddof:
        options["ddof"] = 1
    fn = getattr(ag, op.name)
    assert gradgradcheck(lambda t: fn(t, **options), [x])


def test_third_and_fourth_derivatives_of_a_composition(device) -> None:
    x = Tensor.from_host([0.3, -0.7, 1.1], dtype="float64", device=device, requires_grad=True)
    (g1,) = ag.grad((x.sin() * x.exp()).sum(), x, create_graph=True)
    (g2,) = ag.grad(g1.sum(), x, create_graph=True)
    (g3,) = ag.grad(g2.sum(), x, create_graph=True)
    (g4,) = ag.grad(g3.sum(), x)
    v = np.array([0.3, -0.7, 1.1])
    # d^n/dx^n (e^x sin x) = 2^(n/2) e^x sin(x + n pi / 4)
    for n, g in ((1, g1), (2, g2), (3, g3), (4, g4)):
        want = 2 ** (n / 2) * np.exp(v) * np.sin(v + n * np.pi / 4)
        np.testing.assert_allclose(g.to_host(), want, rtol=1e-12)


# --- the ops with their own rules ------------------------------------------------------------


@pytest.mark.parametrize(
    ("sa", "sb"),
    [
        ((3, 4), (4, 2)),
        ((4,), (4, 2)),
        ((3, 4), (4,)),
        ((4,), (4,)),
        ((2, 3, 4), (4, 2)),
        ((2, 3, 4), (2, 4, 2)),
    ],
    ids=str,
)
def test_matmul_second_derivative(device, sa, sb, rng) -> None:
    a, b = _leaf(rng, device, sa), _leaf(rng, device, sb)
    assert gradgradcheck(lambda x, y: (x @ y).tanh(), [a, b])


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("xshape", [(3, 4), (2, 3, 4), (4,)], ids=str)
def test_linear_second_derivative(device, bias, xshape, rng) -> None:
    x, w = _leaf(rng, device, xshape), _leaf(rng, device, (5, 4))
    inputs = [x, w] + ([_leaf(rng, device, (5,))] if bias else [])
    assert gradgradcheck(lambda *t: ag.linear(*t).tanh(), inputs)


def test_where_clip_and_bias_second_derivatives(device, rng) -> None:
    a, b = _leaf(rng, device, (3, 4)), _leaf(rng, device, (3, 4))
    cond = ignis.asarray(rng.uniform(size=(3, 4)) > 0.5, device=device)
    assert gradgradcheck(lambda x, y: ag.where(cond, x * x, y.sin()), [a, b])
    assert gradgradcheck(lambda x: (x * x).clip(0.2, 2.0) * x, [a])
    bias = _leaf(rng, device, (4,))
    assert gradgradcheck(lambda x, c: x.add_bias(c) ** 2, [a, bias])


def test_shape_ops_second_derivatives(device, rng) -> None:
    x = _leaf(rng, device, (2, 3, 4))
    assert gradgradcheck(lambda t: (t.reshape(6, 4) ** 2).permute(1, 0), [x])
    assert gradgradcheck(
        lambda t: (
            t.transpose().sin() * t.sum(axis=0, keepdims=True).broadcast_to((2, 3, 4)).transpose()
        ),
        [x],
    )
    y = _leaf(rng, device, (2, 3, 4))
    assert gradgradcheck(lambda a, b: ag.concatenate([a * b, a], axis=1) ** 2, [x, y])
    assert gradgradcheck(lambda a, b: ag.stack([a * b, b], axis=0).exp(), [x, y])
    assert gradgradcheck(lambda t: t.clone() * t, [x])


def test_indexing_second_derivatives(device, rng) -> None:
    x = _leaf(rng, device, (5, 3))
    rows = ignis.asarray(np.array([4, 0, 4, 2]), device=device)  # a repeated row adds up
    mask = ignis.asarray(rng.uniform(size=(5, 3)) > 0.4, device=device)
    assert gradgradcheck(lambda t: t[1:4, ::2] ** 2, [x])
    assert gradgradcheck(lambda t: t[rows] ** 3, [x])
    assert gradgradcheck(lambda t: t[rows, 1:] * t[rows, :2], [x])
    assert gradgradcheck(lambda t: t[mask].sin(), [x])


def test_embedding_second_derivative(device, rng) -> None:
    w = _leaf(rng, device, (6, 3))
    ids = ignis.asarray(np.array([[1, 5], [1, 0]]), device=device)
    assert gradgradcheck(lambda t: ag.embedding(ids, t) ** 2, [w])


def test_dropout_second_derivative(device, rng) -> None:
    x = _leaf(rng, device, (4, 5))

    def fn(t):
        return ag.dropout(t * t, 0.3, generator=ignis.random.Generator(7))

    assert gradgradcheck(fn, [x])


def test_rope_second_derivative(device, rng) -> None:
    x = _leaf(rng, device, (2, 3, 4))
    assert gradgradcheck(lambda t: ag.rope(t * t, offset=2), [x])


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "composite"])
@pytest.mark.parametrize("norm", ["layer_norm", "rms_norm"])
def test_norm_second_derivatives(device, norm, fused, rng) -> None:
    fn = getattr(ag, norm)
    if fused:
        x, shape = _leaf(rng, device, (3, 2, 4)), (4,)

        def view(t):
            return t

    else:  # two normalized axes of a transposed view are not one contiguous run
        x, shape = _leaf(rng, device, (3, 3, 2)), (3, 2)

        def view(t):
            return t.permute(1, 0, 2)

    inputs = [x, _leaf(rng, device, shape)]
    if norm == "layer_norm":
        inputs.append(_leaf(rng, device, shape))
    out = fn(view(x), shape, *inputs[1:])
    assert out.grad_fn.name == norm and out.grad_fn.ctx[0] == ("fused" if fused else "composite")
    assert gradgradcheck(lambda t, *p: fn(view(t), shape, *p).tanh(), inputs)


def test_layer_norm_with_a_bias_and_no_weight_second_derivative(device, rng) -> None:
    x, b = _leaf(rng, device, (3, 4)), _leaf(rng, device, (4,))
    assert gradgradcheck(lambda t, c: ag.layer_norm(t, 4, None, c).tanh(), [x, b])


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"reduction": "sum"},
        {"reduction": "none"},
        {"ignore_index": 2},
        {"label_smoothing": 0.2, "ignore_index": 0},
    ],
    ids=str,
)
def test_cross_entropy_second_derivative(device, options, rng) -> None:
    z = _leaf(rng, device, (4, 5))
    t = ignis.asarray(np.array([2, 0, 4, 2]), device=device)
    assert gradgradcheck(lambda a: ag.cross_entropy(a * 1.5, t, **options), [z])


@pytest.mark.parametrize("causal", [False, True])
def test_attention_second_derivatives(device, causal, rng) -> None:
    q, k, v = (_leaf(rng, device, (1, 2, 3, 4)) for _ in range(3))
    sdpa = ag.scaled_dot_product_attention
    assert gradgradcheck(lambda a, b, c: sdpa(a, b, c, causal=causal), [q, k, v])
    qkv = _leaf(rng, device, (1, 3, 12))
    assert gradgradcheck(lambda t: ag.packed_attention(t, 2, causal=causal), [qkv])


def test_attention_fused_nodes_take_the_composite_second_derivative(device, rng) -> None:
    # float64 inputs run the fused kernels: the recorded backward must come from the composite
    q = _leaf(rng, device, (1, 2, 3, 4))
    out = ag.scaled_dot_product_attention(q, q, q)
    assert out.grad_fn.name == "scaled_dot_product_attention"
    (g,) = ag.grad(out.sum(), q, create_graph=True)
    assert g.requires_grad and g.grad_fn is not None
