"""Property-based tests of ignis_autograd: forward values of random op chains against NumPy in
float64, gradients of simple ops on random small shapes (broadcasting, reductions over random
axes, matmul, reshape/transpose) through gradcheck, and bad input raising clear errors."""

from __future__ import annotations

import numpy as np
import pytest
from hardening_strategies import broadcastable_pair, host_values, incompatible_pair, still_works
from hypothesis import given, settings
from hypothesis import strategies as st

import ignis
import ignis_autograd as ag
from ignis_autograd import Tensor, gradcheck

# gradcheck runs the function many times: two fifths of the profile's examples.
AUTOGRAD = settings(max_examples=max(20, settings.default.max_examples * 2 // 5))

small_shapes = st.lists(st.integers(1, 3), min_size=0, max_size=3).map(tuple)


def leaf(h: np.ndarray, device: str, grad: bool = True) -> Tensor:
    return Tensor.from_host(
        h.astype(np.float64), dtype="float64", device=device, requires_grad=grad
    )


BINARY = {
    "add": (lambda a, b: a + b, np.add),
    "subtract": (lambda a, b: a - b, np.subtract),
    "multiply": (lambda a, b: a * b, np.multiply),
    "divide": (lambda a, b: a / b, np.divide),
    "maximum": (ag.maximum, np.maximum),
    "minimum": (ag.minimum, np.minimum),
}
UNARY = {
    "exp": (lambda x: x.exp(), np.exp),
    "tanh": (lambda x: x.tanh(), np.tanh),
    "sigmoid": (lambda x: x.sigmoid(), lambda v: 1 / (1 + np.exp(-v))),
    "log": (lambda x: x.abs().log(), lambda v: np.log(np.abs(v))),
    "sqrt": (lambda x: x.abs().sqrt(), lambda v: np.sqrt(np.abs(v))),
    "neg": (lambda x: -x, np.negative),
    "square": (lambda x: x * x, np.square),
}


@AUTOGRAD
@given(
    pair=broadcastable_pair(),
    op=st.sampled_from(sorted(BINARY)),
    seed=st.integers(0, 2**16),
)
def test_broadcast_binary_values_and_gradients(device, pair, op, seed):
    sa, sb = pair
    if 0 in sa or 0 in sb:  # empty: values only (there is nothing to differentiate)
        sa, sb = tuple(max(d, 1) for d in sa), tuple(max(d, 1) for d in sb)
    ha = host_values(sa, "float64", seed)
    hb = host_values(sb, "float64", seed + 1, positive=True)
    if op in ("maximum", "minimum"):  # keep away from ties, where the derivative jumps
        ha = ha + 0.05 * np.sign(ha - hb + 1e-9) if ha.shape == np.broadcast_shapes(sa, sb) else ha
    fn, ref = BINARY[op]
    a, b = leaf(ha, device), leaf(hb, device)
    out = fn(a, b)
    np.testing.assert_allclose(out.to_host(), ref(ha, hb), rtol=1e-12, atol=1e-12)
    if op in ("maximum", "minimum") and np.any(np.isclose(*np.broadcast_arrays(ha, hb), atol=1e-3)):
        return
    assert gradcheck(lambda x, y: fn(x, y).sum() if out.ndim == 0 else fn(x, y), [a, b])


@AUTOGRAD
@given(shape=small_shapes, op=st.sampled_from(sorted(UNARY)), seed=st.integers(0, 2**16))
def test_unary_values_and_gradients(device, shape, op, seed):
    h = host_values(shape, "float64", seed)
    fn, ref = UNARY[op]
    x = leaf(h, device)
    np.testing.assert_allclose(fn(x).to_host(), ref(h), rtol=1e-12, atol=1e-12)
    assert gradcheck(fn, [x])


@st.composite
def reduce_case(draw):
    shape = draw(st.lists(st.integers(1, 3), min_size=1, max_size=3).map(tuple))
    n = len(shape)
    axis = draw(
        st.none()
        | st.integers(-n, n - 1)
        | st.lists(st.integers(0, n - 1), unique=True, min_size=1, max_size=n).map(tuple)
    )
    return shape, axis


@AUTOGRAD
@given(
    case=reduce_case(),
    op=st.sampled_from(["sum", "mean", "var", "max", "softmax", "log_softmax"]),
    keepdims=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_reduction_values_and_gradients(device, case, op, keepdims, seed):
    shape, axis = case
    h = host_values(shape, "float64", seed)
    x = leaf(h, device)
    if op in ("softmax", "log_softmax"):
        ax = axis if isinstance(axis, int) else -1
        fn = lambda t: getattr(ag, op)(t, axis=ax)  # noqa: E731
        s = h - h.max(axis=ax, keepdims=True)
        lse = np.log(np.exp(s).sum(axis=ax, keepdims=True))
        ref = s - lse if op == "log_softmax" else np.exp(s - lse)
    else:
        fn = lambda t: getattr(ag, op)(t, axis=axis, keepdims=keepdims)  # noqa: E731
        ref = getattr(np, op)(h, axis=axis, keepdims=keepdims)
    np.testing.assert_allclose(fn(x).to_host(), ref, rtol=1e-10, atol=1e-12)
    assert gradcheck(fn, [x])


@AUTOGRAD
@given(
    m=st.integers(1, 4),
    k=st.integers(1, 4),
    n=st.integers(1, 4),
    batch=st.lists(st.integers(1, 2), max_size=1).map(tuple),
    seed=st.integers(0, 2**16),
)
def test_matmul_values_and_gradients(device, m, k, n, batch, seed):
    ha, hb = host_values(batch + (m, k), "float64", seed), host_values((k, n), "float64", seed + 1)
    a, b = leaf(ha, device), leaf(hb, device)
    np.testing.assert_allclose((a @ b).to_host(), ha @ hb, rtol=1e-12, atol=1e-12)
    assert gradcheck(lambda x, y: (x @ y).tanh(), [a, b])


@AUTOGRAD
@given(
    shape=st.lists(st.integers(1, 3), min_size=1, max_size=3).map(tuple),
    data=st.data(),
    seed=st.integers(0, 2**16),
)
def test_layout_gradients(device, shape, data, seed):
    h = host_values(shape, "float64", seed)
    x = leaf(h, device)
    perm = tuple(data.draw(st.permutations(range(len(shape)))))
    w = host_values((int(np.prod(shape)),), "float64", seed + 5)
    weights = Tensor.from_host(
        w.reshape(np.transpose(h, perm).shape), dtype="float64", device=device
    )

    def fn(t: Tensor) -> Tensor:
        return (ag.permute(t, *perm) * weights).reshape(-1)

    np.testing.assert_allclose(
        fn(x).to_host(), (np.transpose(h, perm) * weights.to_host()).reshape(-1)
    )
    assert gradcheck(fn, [x])
    other = leaf(host_values(shape, "float64", seed + 9), device)
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    assert gradcheck(lambda p, q: ag.concatenate([p, q * 2.0], axis=axis), [x, other])


@AUTOGRAD
@given(pair=incompatible_pair(), op=st.sampled_from(sorted(BINARY)))
def test_autograd_bad_shapes_raise_and_leave_no_graph(device, pair, op):
    sa, sb = pair
    a = leaf(host_values(sa, "float64", 0), device)
    b = leaf(host_values(sb, "float64", 1), device)
    with pytest.raises(ValueError):
        BINARY[op][0](a, b)
    assert a.grad is None and b.grad is None
    ok = leaf(host_values((3,), "float64", 2), device)
    (ok * 2.0).sum().backward()  # the failed op left nothing behind that breaks a backward
    np.testing.assert_array_equal(ok.grad.to_host(), np.full(3, 2.0))
    still_works(device)


def test_backward_of_a_non_scalar_needs_a_gradient(device):
    x = leaf(host_values((2, 3), "float64", 0), device)
    with pytest.raises((ValueError, ignis.IgnisError, RuntimeError), match="backward|scalar|grad"):
        (x * 2.0).backward()
