"""Higher-order gradients: ``grad()``, ``backward(create_graph=True)``, custom Functions and
checkpoints under a recorded backward pass, once-differentiable errors, memory, and the
functional transforms (``ignis_autograd.functional``), against closed forms and NumPy."""

from __future__ import annotations

import gc

import numpy as np
import pytest
from ignis_autograd._graph import live_nodes

import ignis
import ignis_autograd as ag
from ignis_autograd import (
    AutogradError,
    Function,
    GraphFreedError,
    Tensor,
    grad,
    once_differentiable,
)
from ignis_autograd import functional as F


def leaf(v, device, grad_=True):
    return Tensor.from_host(
        np.asarray(v, dtype=np.float64), dtype="float64", device=device, requires_grad=grad_
    )


# --- grad() ------------------------------------------------------------------------------------


def test_grad_returns_gradients_and_leaves_dot_grad_alone(device, rng) -> None:
    xv, wv = rng.standard_normal(4), rng.standard_normal(4)
    x, w = leaf(xv, device), leaf(wv, device)
    y = (x * w).exp().sum()
    gx, gw = grad(y, [x, w])
    e = np.exp(xv * wv)
    np.testing.assert_allclose(gx.to_host(), e * wv, rtol=1e-13)
    np.testing.assert_allclose(gw.to_host(), e * xv, rtol=1e-13)
    assert x.grad is None and w.grad is None
    assert not gx.requires_grad  # without create_graph: plain values


def test_grad_of_an_intermediate_and_of_several_outputs(device, rng) -> None:
    xv = rng.standard_normal(3)
    x = leaf(xv, device)
    h = x.sin()
    y1, y2 = (h * h).sum(), (h * x).sum()
    (gh,) = grad(y1, h, retain_graph=True)
    np.testing.assert_allclose(gh.to_host(), 2 * np.sin(xv), rtol=1e-13)
    # both outputs at once, an input reached directly and through h
    gh2, gx = grad([y1, y2], [h, x])
    np.testing.assert_allclose(gh2.to_host(), 2 * np.sin(xv) + xv, rtol=1e-13)
    want = 2 * np.sin(xv) * np.cos(xv) + np.sin(xv) + xv * np.cos(xv)
    np.testing.assert_allclose(gx.to_host(), want, rtol=1e-13)


def test_grad_outputs_weights_each_output(device, rng) -> None:
    xv, u = rng.standard_normal((2, 3)), rng.standard_normal((2, 3))
    x = leaf(xv, device)
    (g,) = grad(x.tanh(), x, grad_outputs=ignis.asarray(u, device=device))
    np.testing.assert_allclose(g.to_host(), u * (1 - np.tanh(xv) ** 2), rtol=1e-13)


def test_grad_errors_name_the_argument(device) -> None:
    x, z = leaf([1.0, 2.0], device), leaf([3.0], device)
    y = (x * x).sum()
    with pytest.raises(AutogradError, match=r"grad: input 1 \(shape \(1,\)\) was not used"):
        grad(y, [x, z], retain_graph=True)
    gx, gz = grad(y, [x, z], allow_unused=True, retain_graph=True)
    assert gz is None and gx is not None
    with pytest.raises(AutogradError, match=r"inputs\[0\] does not require grad"):
        grad(y, leaf([1.0], device, grad_=False), retain_graph=True)
    with pytest.raises(
        ignis.ShapeError, match=r"grad: grad_outputs\[0\] is required for an output of shape \(2,\)"
    ):
        grad(x * 2.0, x)
    with pytest.raises(
        ignis.ShapeError, match=r"grad_outputs\[0\] has shape \(3,\), expected \(2,\)"
    ):
        grad(x * 2.0, x, [np.ones(3)])
    with pytest.raises(ValueError, match="2 grad_outputs for 1 outputs"):
        grad(x * 2.0, x, [np.ones(2), np.ones(2)])
    with pytest.raises(TypeError, match="grad: inputs must be a Tensor"):
        grad(y, "x")


def test_without_retain_graph_a_second_grad_raises(device) -> None:
    x = leaf([1.0, 2.0], device)
    y = (x.exp() * x).sum()
    grad(y, x)
    with pytest.raises(GraphFreedError):
        grad(y, x)


# --- recorded backward passes --------------------------------------------------------------------


def test_backward_with_create_graph_gives_differentiable_grads(device, rng) -> None:
    xv = rng.uniform(0.5, 2.0, 3)
    x = leaf(xv, device)
    (x**3).sum().backward(create_graph=True)
    g = x.grad
    assert isinstance(g, Tensor) and g.requires_grad
    np.testing.assert_allclose(g.to_host(), 3 * xv**2, rtol=1e-13)
    x.grad = None
    g.sum().backward()
    np.testing.assert_allclose(x.grad.to_host(), 6 * xv, rtol=1e-13)


def test_a_plain_backward_adds_to_a_recorded_grad(device) -> None:
    x = leaf([1.0, 2.0], device)
    (x * x).sum().backward(create_graph=True)
    (x * 3.0).sum().backward()
    np.testing.assert_allclose(x.grad.to_host(), [5.0, 7.0])


def test_gradient_penalty_matches_the_closed_form(device, rng) -> None:
    # f(x) = sum(w * x^2): grad_x f = 2 w x; penalty = sum((2 w x)^2); d/dw = 8 w x^2
    wv, xv = rng.standard_normal(4), rng.standard_normal(4)
    w, x = leaf(wv, device), leaf(xv, device)
    (gx,) = grad((w * x * x).sum(), x, create_graph=True)
    (gx * gx).sum().backward()
    np.testing.assert_allclose(w.grad.to_host(), 8 * wv * xv**2, rtol=1e-12)
    np.testing.assert_allclose(x.grad.to_host(), 8 * wv**2 * xv, rtol=1e-12)


def test_the_recorded_graph_is_freed_with_its_gradients(device, rng) -> None:
    gc.collect()
    before = len(live_nodes())
    x = leaf(rng.standard_normal((3, 3)), device)
    y = (x @ x).tanh().sum()
    (g,) = grad(y, x, create_graph=True)
    assert len(live_nodes()) > before
    del y, g
    gc.collect()
    assert len(live_nodes()) == before


# --- custom Functions and checkpoints -------------------------------------------------------------


class Cube(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.data * x.data * x.data

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * x * x * 3.0  # Tensor ops: differentiable again


class OnceCube(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.data * x.data * x.data

    @staticmethod
    @once_differentiable
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g.data * x.data * x.data * 3.0


def test_a_function_with_a_differentiable_backward_has_second_derivatives(device, rng) -> None:
    xv = rng.standard_normal(3)
    x = leaf(xv, device)
    (g,) = grad(Cube.apply(x).sum(), x, create_graph=True)
    np.testing.assert_allclose(g.to_host(), 3 * xv**2, rtol=1e-13)
    (h,) = grad(g.sum(), x)
    np.testing.assert_allclose(h.to_host(), 6 * xv, rtol=1e-13)
    assert ag.gradgradcheck(Cube.apply, [leaf(xv, device)])


class SavedOutputExp(Function):
    @staticmethod
    def forward(ctx, x):
        y = x.exp()
        ctx.save_for_backward(y)  # an output: a recorded pass sees it on the graph
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return g * y


def test_a_function_that_saves_its_output_differentiates_twice(device, rng) -> None:
    xv = rng.standard_normal(3)
    x = leaf(xv, device)
    (g,) = grad(SavedOutputExp.apply(x).sum(), x, create_graph=True)
    (h,) = grad(g.sum(), x)
    np.testing.assert_allclose(h.to_host(), np.exp(xv), rtol=1e-13)
    assert ag.gradgradcheck(SavedOutputExp.apply, [leaf(xv, device)])


def test_double_backward_through_once_differentiable_raises_naming_it(device) -> None:
    x = leaf([1.0, 2.0], device)
    (g,) = grad(OnceCube.apply(x).sum(), x, create_graph=True)  # first order works
    np.testing.assert_allclose(g.to_host(), [3.0, 12.0])
    with pytest.raises(AutogradError, match="OnceCube.*once differentiable"):
        g.sum().backward()


def test_double_backward_through_tape_record_raises_naming_it(device) -> None:
    x = leaf([1.0, 2.0], device)
    y = ag.Tape.record(Tensor(x.data * x.data), [x], lambda g: (g * x.data * 2.0,), name="square")
    (g,) = grad(y.sum(), x, create_graph=True)
    np.testing.assert_allclose(g.to_host(), [2.0, 4.0])
    with pytest.raises(AutogradError, match=r"square \(Tape.record\).*once differentiable"):
        g.sum().backward()


def test_checkpoint_under_a_recorded_backward(device, rng) -> None:
    xv = rng.standard_normal(4)
    x = leaf(xv, device)
    y = ag.checkpoint(lambda t: (t.sin() * t).sum(), x)
    (g,) = grad(y, x, create_graph=True)
    np.testing.assert_allclose(g.to_host(), np.sin(xv) + xv * np.cos(xv), rtol=1e-13)
    (h,) = grad(g.sum(), x)
    np.testing.assert_allclose(h.to_host(), 2 * np.cos(xv) - xv * np.sin(xv), rtol=1e-13)


def test_a_function_inside_checkpoint_differentiates_twice(device, rng) -> None:
    xv = rng.standard_normal(3)
    x = leaf(xv, device)
    y = ag.checkpoint(lambda t: Cube.apply(t).sum(), x)
    (g,) = grad(y, x, create_graph=True)
    (h,) = grad(g.sum(), x)
    np.testing.assert_allclose(h.to_host(), 6 * xv, rtol=1e-13)


@pytest.mark.gpu
def test_a_function_inside_capture_step_matches_eager() -> None:
    if not ignis.is_available():
        pytest.skip("needs a CUDA GPU")
    rng = np.random.default_rng(3)
    w0 = rng.standard_normal((8, 4)).astype(np.float32)
    xs = [rng.standard_normal((5, 8)).astype(np.float32) for _ in range(3)]

    class Scale(Function):
        @staticmethod
        def forward(ctx, h):
            return h.data * 2.0

        @staticmethod
        def backward(ctx, g):
            return g * 2.0

    def run(captured):
        w = Tensor(ignis.asarray(w0, device="cuda:0"), requires_grad=True)
        opt = ag.optim.SGD([w], lr=0.1)

        def step(x):
            opt.zero_grad()
            loss = (Scale.apply(Tensor(x) @ w) ** 2).mean()
            loss.backward()
            opt.step()
            return loss.detach()

        x0 = ignis.asarray(xs[0], device="cuda:0")
        if captured:
            fn = ag.capture_step(step, x0)  # two eager steps on x0, then the capture
        else:
            step(x0)
            step(x0)
            fn = step
        for xv in xs[1:]:
            fn(ignis.asarray(xv, device="cuda:0"))
        return w.to_host()

    np.testing.assert_allclose(run(True), run(False), rtol=1e-6, atol=1e-7)


# --- functional transforms -----------------------------------------------------------------------


def test_vjp_and_jvp_against_the_jacobian(device, rng) -> None:
    xv = rng.standard_normal(3)
    x = leaf(xv, device, grad_=False)
    A = rng.standard_normal((4, 3))
    a = ignis.asarray(A, device=device)

    def f(t):
        return (a @ t).tanh()

    J = (1 - np.tanh(A @ xv) ** 2)[:, None] * A
    u, v = rng.standard_normal(4), rng.standard_normal(3)
    out, g = F.vjp(f, x, Tensor(ignis.asarray(u, device=device)))
    np.testing.assert_allclose(out.to_host(), np.tanh(A @ xv), rtol=1e-13)
    np.testing.assert_allclose(g.to_host(), J.T @ u, rtol=1e-12)
    _, jv = F.jvp(f, x, Tensor(ignis.asarray(v, device=device)))
    np.testing.assert_allclose(jv.to_host(), J @ v, rtol=1e-12)
    for strategy in ("reverse-mode", "forward-mode"):
        np.testing.assert_allclose(F.jacobian(f, x, strategy=strategy).to_host(), J, rtol=1e-12)


def test_tuple_structures_follow_pytorch(device, rng) -> None:
    av, bv = rng.standard_normal(2), rng.standard_normal(3)
    a, b = leaf(av, device, False), leaf(bv, device, False)

    def f(p, q):
        return (p * p).sum() * q, q.exp()

    jac = F.jacobian(f, (a, b))
    assert len(jac) == 2 and all(len(row) == 2 for row in jac)
    assert jac[0][0].shape == (3, 2) and jac[0][1].shape == (3, 3) and jac[1][0].shape == (3, 2)
    np.testing.assert_allclose(jac[0][0].to_host(), np.outer(bv, 2 * av), rtol=1e-13)
    np.testing.assert_allclose(jac[0][1].to_host(), np.eye(3) * (av @ av), rtol=1e-13)
    np.testing.assert_array_equal(jac[1][0].to_host(), np.zeros((3, 2)))
    np.testing.assert_allclose(jac[1][1].to_host(), np.diag(np.exp(bv)), rtol=1e-13)
    with pytest.raises(AutogradError, match="jacobian: the output is independent of input 0"):
        F.jacobian(lambda p, q: q.exp(), (a, b), strict=True)


def test_hessian_hvp_vhp_of_a_quartic(device, rng) -> None:
    # f(x) = (x^T A x)^2 / 4 + sum(sin x): H = (x^T A x) A + (A x)(A x)^T * 2 ... with A symmetric
    n = 4
    M = rng.standard_normal((n, n))
    A = M + M.T
    xv, v = rng.standard_normal(n), rng.standard_normal(n)
    a = ignis.asarray(A, device=device)
    x = leaf(xv, device, False)

    def f(t):
        q = (t * (a @ t)).sum()
        return q * q * 0.25 + t.sin().sum()

    q, ax = xv @ A @ xv, A @ xv
    H = q * A + 2 * np.outer(ax, ax) - np.diag(np.sin(xv))
    np.testing.assert_allclose(F.hessian(f, x).to_host(), H, rtol=1e-11, atol=1e-12)
    vt = Tensor(ignis.asarray(v, device=device))
    out, hv = F.hvp(f, x, vt)
    np.testing.assert_allclose(out.to_host(), 0.25 * q * q + np.sin(xv).sum(), rtol=1e-13)
    np.testing.assert_allclose(hv.to_host(), H @ v, rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(F.vhp(f, x, vt)[1].to_host(), v @ H, rtol=1e-11, atol=1e-12)


def test_create_graph_transforms_differentiate_back_to_their_inputs(device, rng) -> None:
    xv = rng.standard_normal(3)
    x = leaf(xv, device)
    _, g = F.vjp(lambda t: (t**3).sum(), x, create_graph=True)
    assert g.requires_grad
    (h,) = grad(g.sum(), x)
    np.testing.assert_allclose(h.to_host(), 6 * xv, rtol=1e-13)


def test_transforms_check_their_arguments(device) -> None:
    x = leaf([1.0, 2.0], device, False)
    with pytest.raises(ValueError, match="v may be omitted only"):
        F.vjp(lambda t: t * 2.0, x)
    with pytest.raises(ignis.ShapeError, match=r"jvp: v\[0\] has shape \(3,\), expected \(2,\)"):
        F.jvp(lambda t: t * 2.0, x, leaf([1.0, 2.0, 3.0], device, False))
    with pytest.raises(ValueError, match="hessian: func must return a single-element Tensor"):
        F.hessian(lambda t: t * 2.0, x)
    with pytest.raises(TypeError, match=r"vjp: inputs\[0\] must be a Tensor, got list"):
        F.vjp(lambda t: t, [[1.0]])


def test_optimizers_take_the_grads_a_recorded_backward_leaves(device, rng) -> None:
    wv = rng.standard_normal(3)
    w = leaf(wv, device)
    opt = ag.optim.SGD([w], lr=0.5)
    (w**2).sum().backward(create_graph=True)
    assert isinstance(w.grad, Tensor)
    ag.optim.clip_grad_norm_([w], 1e9)
    opt.step()
    np.testing.assert_allclose(w.to_host(), wv - 0.5 * 2 * wv, rtol=1e-13)
    opt.zero_grad(set_to_none=False)
    assert not isinstance(w.grad, Tensor) and not np.any(w.grad.to_host())


def test_a_complex_result_of_a_recorded_op_is_refused(device) -> None:
    x = leaf([1.0, 2.0], device)
    with pytest.raises(ignis.DTypeError, match="multiply: the result is complex128, and autograd"):
        x * 1j
    assert (x.detach() * 1j).dtype == ignis.complex128  # outside the graph it is an array op
