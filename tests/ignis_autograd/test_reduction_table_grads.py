"""The derivative of every differentiable reduction of the reduction table, from its
declaration: gradcheck in float64 over each kind's axes, the Tensor method and the
``ignis_autograd`` function as one op, and the exports."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
from ignis._array._reduction_table import REDUCTIONS

import ignis
import ignis_autograd as ag
from ignis_autograd import Tensor, gradcheck

OPS = list(REDUCTIONS.values())
DIFFERENTIABLE = [op for op in OPS if op.grad is not None]
AXES = {"reduce": [None, 0, -1, (0, 2)], "softmax": [0, -1]}


def _ids(op):
    return op.name


def _cases():
    return [
        pytest.param(op, axis, keep, id=f"{op.name}-axis={axis}" + ("-keepdims" if keep else ""))
        for op in DIFFERENTIABLE
        for axis in AXES[op.kind]
        for keep in ((False, True) if op.kind == "reduce" else (False,))
    ]


def _options(op, axis, keepdims):
    if op.kind == "softmax":
        return {"axis": axis}
    out = {"axis": axis, "keepdims": keepdims}
    return {**out, "ddof": 1} if op.ddof else out


def _input(rng, device, shape=(3, 4, 2)):
    # distinct values: max/min have no ties, so the derivative exists where gradcheck probes
    host = rng.permutation(np.linspace(-2.0, 2.0, int(np.prod(shape)))).reshape(shape)
    return Tensor.from_host(host, dtype="float64", device=device, requires_grad=True)


@pytest.mark.parametrize(("op", "axis", "keepdims"), _cases())
def test_reduction_gradient_passes_gradcheck(device, op, axis, keepdims, rng) -> None:
    x = _input(rng, device)
    options = _options(op, axis, keepdims)
    fn = getattr(ag, op.name)
    assert gradcheck(lambda t: fn(t, **options), (x,))
    # the Tensor method is the same op, with the same gradient
    np.testing.assert_array_equal(
        getattr(x, op.name)(**options).to_host(), fn(x, **options).to_host()
    )
    y = getattr(x, op.name)(**options)
    u = Tensor.from_host(rng.standard_normal(y.shape), dtype="float64", device=device)
    y.backward(u)
    g_method = x.grad.to_host()
    x.grad = None
    fn(x, **options).backward(u)
    np.testing.assert_array_equal(x.grad.to_host(), g_method)


@pytest.mark.parametrize("op", [op for op in DIFFERENTIABLE if op.name in ("max", "min")], ids=_ids)
def test_ties_share_the_gradient(device, op) -> None:
    x = Tensor.from_host([1.0, 3.0, 3.0, 0.0], dtype="float64", device=device, requires_grad=True)
    if op.name == "min":
        x = Tensor.from_host([1.0, 0.0, 2.0, 0.0], dtype="float64", device=device)
        x.requires_grad = True
    getattr(x, op.name)().backward()
    want = [0.0, 0.5, 0.5, 0.0] if op.name == "max" else [0.0, 0.5, 0.0, 0.5]
    np.testing.assert_array_equal(x.grad.to_host(), want)


@pytest.mark.parametrize("op", [op for op in OPS if op.grad is None], ids=_ids)
def test_index_and_truth_reductions_are_outside_the_graph(device, op, rng) -> None:
    x = _input(rng, device)
    want = ignis.bool_ if op.kind == "reduce" else ignis.int64  # all/any; argmax/argmin
    for out in (getattr(x, op.name)(axis=1), getattr(ag, op.name)(x, 1)):
        assert out.dtype == want and not out.requires_grad and out.grad_fn is None
        np.testing.assert_array_equal(out.to_host(), getattr(x.data, op.name)(axis=1).to_host())


@pytest.mark.parametrize("op", OPS, ids=_ids)
def test_every_reduction_is_exported_once(op) -> None:
    assert ag.__all__.count(op.name) == 1
    fn = getattr(ag, op.name)
    assert fn.__doc__ == op.doc and getattr(Tensor, op.name).__doc__ == op.doc
    assert str(inspect.signature(fn)) == f"({op.signature})"
    assert str(inspect.signature(getattr(Tensor, op.name))) == f"({op.signature})"


def test_the_functions_take_nvarrays_and_name_the_op_for_anything_else(device) -> None:
    a = ignis.asarray(np.arange(6.0).reshape(2, 3), device=device)
    np.testing.assert_array_equal(ag.sum(a, 1).to_host(), [3.0, 12.0])
    with pytest.raises(TypeError, match="var: expected a Tensor or an NvArray, got list"):
        ag.var([1.0, 2.0])


def test_no_context_is_kept_without_a_gradient(device, rng) -> None:
    x = _input(rng, device)
    x.requires_grad = False
    for op in DIFFERENTIABLE:
        out = getattr(x, op.name)()
        assert out.grad_fn is None and not out.requires_grad
