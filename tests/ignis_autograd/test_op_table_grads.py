"""The derivative of every differentiable op of the op table, from its declaration: gradcheck in
float64 (shapes that broadcast, Python scalars on either side), and values and gradients against
PyTorch where it is installed."""

from __future__ import annotations

import numpy as np
import pytest
from ignis._array._op_table import ELEMENTWISE

import ignis_autograd as ag
from ignis_autograd import Tensor, gradcheck

DIFFERENTIABLE = [op for op in ELEMENTWISE.values() if op.grad is not None]
UNARY = [op for op in DIFFERENTIABLE if op.arity == 1]
BINARY = [op for op in DIFFERENTIABLE if op.arity == 2]
# (shape of a, shape of b); None: a Python float
BINARY_SHAPES = {
    "same": ((3, 4), (3, 4)),
    "broadcast": ((3, 4), (4,)),
    "column": ((3, 1), (3, 4)),
    "scalar right": ((3, 4), None),
    "scalar left": (None, (3, 4)),
}


def _ids(op):
    return op.name


def _input(rng, op, shape, device, dtype="float64"):
    lo, hi = op.sample
    if shape is None:
        return float(rng.uniform(lo, hi))
    host = rng.uniform(lo, hi, size=shape)
    return Tensor.from_host(host, dtype=dtype, device=device, requires_grad=True)


def _option_values(op):
    return [dict()] + [{k: v} for k, values in op.params.items() for v in values[1:]]


@pytest.mark.parametrize("op", UNARY, ids=_ids)
def test_unary_gradient_passes_gradcheck(device, op, rng) -> None:
    for options in _option_values(op):
        x = _input(rng, op, (3, 4), device)
        fn = getattr(ag, op.name)
        assert gradcheck(lambda t, fn=fn, options=options: fn(t, **options), (x,))
        # the Tensor method is the same op
        method = getattr(x, op.methods[0]) if op.methods else None
        if method is not None:
            np.testing.assert_array_equal(method(**options).to_host(), fn(x, **options).to_host())


@pytest.mark.parametrize("shapes", BINARY_SHAPES, ids=str)
@pytest.mark.parametrize("op", BINARY, ids=_ids)
def test_binary_gradient_passes_gradcheck(device, op, shapes, rng) -> None:
    sa, sb = BINARY_SHAPES[shapes]
    a, b = _input(rng, op, sa, device), _input(rng, op, sb, device)
    fn = getattr(ag, op.name)
    tensors = [t for t in (a, b) if isinstance(t, Tensor)]
    if len(tensors) == 2:
        assert gradcheck(fn, (a, b))
    elif isinstance(a, Tensor):
        assert gradcheck(lambda t: fn(t, b), (a,))
    else:
        assert gradcheck(lambda t: fn(a, t), (b,))


@pytest.mark.parametrize("op", BINARY, ids=_ids)
def test_only_the_operand_that_wants_a_gradient_gets_one(device, op, rng) -> None:
    a = _input(rng, op, (3, 4), device)
    b = _input(rng, op, (3, 4), device)
    b.requires_grad = False
    getattr(ag, op.name)(a, b).sum().backward()
    assert a.grad is not None and a.grad.shape == (3, 4)
    assert b.grad is None


def _torch_fn(torch, op):
    fn = torch
    for part in (op.torch or op.name).split("."):
        fn = getattr(fn, part)
    return fn


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("op", DIFFERENTIABLE, ids=_ids)
def test_values_and_gradients_agree_with_pytorch(device, op, dtype, rng) -> None:
    torch = pytest.importorskip("torch")
    if op.torch == "":
        pytest.skip(f"{op.name}: PyTorch has no counterpart for real tensors")
    tol = dict(rtol=2e-5, atol=2e-6) if dtype == "float32" else dict(rtol=1e-10, atol=1e-12)
    shapes = [(3, 4), (4,)][: op.arity]
    for options in _option_values(op):
        ours = [_input(rng, op, s, device, dtype) for s in shapes]
        theirs = [
            torch.tensor(x.to_host(), dtype=getattr(torch, dtype), requires_grad=True)
            for x in ours
        ]
        y = getattr(ag, op.name)(*ours, **options)
        ty = _torch_fn(torch, op)(*theirs, **options)
        np.testing.assert_allclose(y.to_host(), ty.detach().numpy(), **tol)
        u = rng.standard_normal(y.shape)
        y.backward(Tensor.from_host(u, dtype=dtype, device=device))
        ty.backward(torch.tensor(u, dtype=getattr(torch, dtype)))
        for x, tx in zip(ours, theirs, strict=True):
            np.testing.assert_allclose(x.grad.to_host(), tx.grad.numpy(), **tol)


@pytest.mark.parametrize("op", DIFFERENTIABLE, ids=_ids)
def test_every_differentiable_op_is_exported_once(op) -> None:
    assert ag.__all__.count(op.name) == 1
    assert getattr(ag, op.name).__doc__ == op.doc


def test_power_gradient_at_zero_to_the_zero_is_zero(device) -> None:
    # d(a**b)/da = b * a**(b-1): 0 * inf at a == b == 0, whose limit (PyTorch's value) is 0
    a = Tensor.from_host([0.0, 0.0, 2.0, 0.0], dtype="float64", device=device)
    b = Tensor.from_host([0.0, 1.0, 0.0, 2.0], dtype="float64", device=device)
    a.requires_grad = True
    b.requires_grad = True
    (a**b).sum().backward()
    np.testing.assert_array_equal(a.grad.to_host(), [0.0, 1.0, 0.0, 0.0])
    np.testing.assert_array_equal(b.grad.to_host(), [0.0, 0.0, np.log(2.0), 0.0])
