"""Custom differentiable operations: ignis_autograd.Function, as torch.autograd.Function."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

import ignis
import ignis_autograd as ag
from ignis import DeviceMismatchError, DTypeError, NvArray, ShapeError
from ignis_autograd import (
    AutogradError,
    Function,
    GraphFreedError,
    Tape,
    Tensor,
    checkpoint,
    enable_grad,
    gradcheck,
    no_grad,
    once_differentiable,
)

TOL = dict(rtol=1e-12, atol=1e-14)


def leaf(v: np.ndarray, device: str, grad: bool = True, dtype: str = "float64") -> Tensor:
    return Tensor.from_host(v, dtype=dtype, device=device, requires_grad=grad)


def host(t: Tensor | NvArray) -> np.ndarray:
    return t.to_host()


# --- the custom functions under test ---------------------------------------------------------


class Exp(Function):
    """exp, saving its output."""

    @staticmethod
    def forward(ctx, x):
        y = x.exp()
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * y


class Linear(Function):
    """x @ w + b, saving its inputs; skips the gradients nobody needs."""

    calls: list[tuple[bool, ...]] = []

    @staticmethod
    def forward(ctx, x, w, b=None):
        ctx.save_for_backward(x, w)
        ctx.has_bias = b is not None
        out = x @ w
        return out + b if b is not None else out

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        Linear.calls.append(ctx.needs_input_grad)
        gx = grad @ w.mT if ctx.needs_input_grad[0] else None
        gw = x.mT @ grad if ctx.needs_input_grad[1] else None
        gb = grad.sum(axis=0) if ctx.has_bias and ctx.needs_input_grad[2] else None
        return gx, gw, gb


class Clamp(Function):
    """clip with Python bounds; backward on NvArrays, once-differentiable."""

    @staticmethod
    def forward(ctx, x, lo, hi):
        ctx.save_for_backward(x)
        ctx.lo, ctx.hi = lo, hi
        return ignis.clip(x.data, lo, hi)  # an NvArray result: apply makes it a Tensor

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        xd = x.data
        g = ignis.where(xd < ctx.lo, 0.0, grad.data)
        return ignis.where(xd > ctx.hi, 0.0, g), None, None


class SinCos(Function):
    """Two outputs; keeps the gradients its last backward received and counts the calls."""

    seen: list[tuple] = []
    calls = 0
    materialize = True

    @staticmethod
    def forward(ctx, x):
        ctx.set_materialize_grads(SinCos.materialize)
        ctx.save_for_backward(x)
        return x.sin(), x.cos()

    @staticmethod
    def backward(ctx, gs, gc_):
        SinCos.seen[:] = [(gs, gc_)]  # only the last: nothing kept across tests
        SinCos.calls += 1
        (x,) = ctx.saved_tensors
        total = None
        if gs is not None:
            total = gs * x.cos()
        if gc_ is not None:
            part = -(gc_ * x.sin())
            total = part if total is None else total + part
        return total


def _ref_sincos(x: np.ndarray, us: np.ndarray, uc: np.ndarray) -> np.ndarray:
    return us * np.cos(x) - uc * np.sin(x)


# --- values and gradients --------------------------------------------------------------------


def test_custom_exp_value_gradient_and_grad_fn(device: str, rng: np.random.Generator) -> None:
    v = rng.standard_normal((3, 4))
    x = leaf(v, device)
    y = Exp.apply(x)
    assert isinstance(y, Tensor) and y.requires_grad and not y.is_leaf
    assert y.grad_fn.name == "ExpBackward"
    assert "ExpBackward" in repr(y)
    np.testing.assert_allclose(host(y), np.exp(v), **TOL)
    u = rng.standard_normal((3, 4))
    (y * Tensor.from_host(u, dtype="float64", device=device)).sum().backward()
    np.testing.assert_allclose(host(x.grad), u * np.exp(v), **TOL)


def test_custom_linear_matches_the_built_in_ops(device: str, rng: np.random.Generator) -> None:
    xv, wv, bv = rng.standard_normal((5, 3)), rng.standard_normal((3, 4)), rng.standard_normal(4)
    x, w, b = leaf(xv, device), leaf(wv, device), leaf(bv, device)
    Linear.calls.clear()
    (Linear.apply(x, w, b).tanh() ** 2).sum().backward()
    ours = [host(t.grad) for t in (x, w, b)]
    x2, w2, b2 = leaf(xv, device), leaf(wv, device), leaf(bv, device)
    (((x2 @ w2) + b2).tanh() ** 2).sum().backward()
    for got, t in zip(ours, (x2, w2, b2), strict=True):
        np.testing.assert_allclose(got, host(t.grad), **TOL)
    assert Linear.calls == [(True, True, True)]


def test_needs_input_grad_one_bool_per_positional_input(device: str) -> None:
    seen = []

    class Probe(Function):
        @staticmethod
        def forward(ctx, *args, **kwargs):
            seen.append(ctx.needs_input_grad)
            return args[0] * 2.0

        @staticmethod
        def backward(ctx, grad):
            return (grad * 2.0,) + (None,) * (len(ctx.needs_input_grad) - 1)

    a = leaf(np.ones(3), device)
    b = leaf(np.ones(3), device, grad=False)
    c = ignis.ones((3,), dtype="float64", device=device)
    kw = leaf(np.ones(3), device)
    Probe.apply(a, b, c, 2.5, "text", scale=kw).sum().backward()
    assert seen[-1] == (True, False, False, False, False)
    assert kw.grad is None  # keyword arguments reach forward but get no gradient slot
    # as in PyTorch, the flags follow requires_grad also when recording is off
    with no_grad():
        out = Probe.apply(a, b)
    assert seen[-1] == (True, False) and not out.requires_grad


def test_linear_skips_unneeded_gradients(device: str, rng: np.random.Generator) -> None:
    x = leaf(rng.standard_normal((2, 3)), device, grad=False)
    w = leaf(rng.standard_normal((3, 2)), device)
    Linear.calls.clear()
    Linear.apply(x, w).sum().backward()  # b left out: forward's default
    assert Linear.calls == [(False, True)]
    assert x.grad is None
    np.testing.assert_allclose(host(w.grad), host(x).T @ np.ones((2, 2)), **TOL)


def test_non_tensor_arguments_in_any_position(device: str) -> None:
    class ScaleBy(Function):
        @staticmethod
        def forward(ctx, a, b):
            ctx.x_first = isinstance(a, Tensor)
            ctx.k = b if ctx.x_first else a
            return (a if ctx.x_first else b) * ctx.k

        @staticmethod
        def backward(ctx, grad):
            g = grad * ctx.k
            return (g, None) if ctx.x_first else (None, g)

    x = leaf(np.ones((2, 3)), device)
    ScaleBy.apply(x, 3.0).sum().backward()
    ScaleBy.apply(2.0, x).sum().backward()
    np.testing.assert_array_equal(host(x.grad), np.full((2, 3), 5.0))


def test_nvarray_inputs_are_constants_and_their_gradients_dropped(device: str) -> None:
    class Mul(Function):
        @staticmethod
        def forward(ctx, a, b):
            ctx.save_for_backward(a, b)
            return a * b

        @staticmethod
        def backward(ctx, grad):
            a, b = ctx.saved_tensors
            # a gradient for the NvArray input too, even a mis-shaped one: PyTorch does not
            # check gradients of inputs that need none, and neither does this
            return grad * b, ignis.zeros((7,), device=grad.device)

    x = leaf(np.array([1.0, 2.0]), device)
    c = ignis.asarray(np.array([3.0, 4.0]), device=device)
    y = Mul.apply(x, c)
    y.sum().backward()
    np.testing.assert_array_equal(host(x.grad), [3.0, 4.0])


def test_multiple_outputs_both_used(device: str, rng: np.random.Generator) -> None:
    v, us, uc = rng.standard_normal(6), rng.standard_normal(6), rng.standard_normal(6)
    x = leaf(v, device)
    s, c = SinCos.apply(x)
    assert s.grad_fn.name == c.grad_fn.name == "SinCosBackward"
    np.testing.assert_allclose(host(s), np.sin(v), **TOL)
    np.testing.assert_allclose(host(c), np.cos(v), **TOL)
    calls = SinCos.calls
    loss = (s * Tensor.from_host(us, dtype="float64", device=device)).sum() + (
        c * Tensor.from_host(uc, dtype="float64", device=device)
    ).sum()
    loss.backward()
    assert SinCos.calls == calls + 1  # one backward call with both gradients
    np.testing.assert_allclose(host(x.grad), _ref_sincos(v, us, uc), **TOL)


def test_multiple_outputs_one_used_gets_zeros_for_the_other(device: str) -> None:
    v = np.linspace(-1.0, 1.0, 5)
    x = leaf(v, device)
    SinCos.seen.clear()
    _, c = SinCos.apply(x)
    c.sum().backward()
    gs, gc_ = SinCos.seen[-1]
    assert isinstance(gs, Tensor) and isinstance(gc_, Tensor)
    np.testing.assert_array_equal(host(gs), np.zeros(5))  # materialized
    np.testing.assert_allclose(host(x.grad), -np.sin(v), **TOL)


def test_set_materialize_grads_false_gives_none(device: str) -> None:
    v = np.linspace(-1.0, 1.0, 5)
    x = leaf(v, device)
    SinCos.seen.clear()
    SinCos.materialize = False
    try:
        s, _ = SinCos.apply(x)
        s.sum().backward()
    finally:
        SinCos.materialize = True
    gs, gc_ = SinCos.seen[-1]
    assert gc_ is None and isinstance(gs, Tensor)
    np.testing.assert_allclose(host(x.grad), np.cos(v), **TOL)


def test_multiple_outputs_with_retain_graph_and_separate_backwards(device: str) -> None:
    v = np.linspace(-2.0, 2.0, 4)
    x = leaf(v, device)
    s, c = SinCos.apply(x)
    s.sum().backward(retain_graph=True)
    np.testing.assert_allclose(host(x.grad), np.cos(v), **TOL)
    x.zero_grad()
    c.sum().backward(retain_graph=True)
    np.testing.assert_allclose(host(x.grad), -np.sin(v), **TOL)
    x.zero_grad()
    (s + c).sum().backward()
    np.testing.assert_allclose(host(x.grad), np.cos(v) - np.sin(v), **TOL)
    with pytest.raises(GraphFreedError, match="SinCosBackward"):
        s.sum().backward()


def test_mark_non_differentiable_and_integer_outputs(device: str) -> None:
    seen = []

    class MaxWithIndex(Function):
        @staticmethod
        def forward(ctx, x):
            xd = x.data
            idx = ignis.argmax(xd, axis=1)
            where = idx.astype("float64")  # a float output, declared not differentiable
            ctx.mark_non_differentiable(where)
            ctx.save_for_backward(xd, idx)
            return ignis.max(xd, axis=1), where, idx

        @staticmethod
        def backward(ctx, g, g_where, g_idx):
            seen.append((g_where, g_idx))
            xd, idx = ctx.saved_tensors
            hot = ignis.arange(xd.shape[1], device=xd.device)[None, :] == idx[:, None]
            return ignis.where(hot, g.data[:, None], 0.0)

    v = np.array([[1.0, 5.0, 2.0], [7.0, 0.0, 3.0]])
    x = leaf(v, device)
    m, where, idx = MaxWithIndex.apply(x)
    assert m.requires_grad and not where.requires_grad and not idx.requires_grad
    assert where.grad_fn is None and idx.grad_fn is None
    np.testing.assert_array_equal(host(where), [1.0, 0.0])
    m.sum().backward()
    np.testing.assert_array_equal(host(x.grad), [[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    g_where, g_idx = seen[-1]
    np.testing.assert_array_equal(host(g_where), [0.0, 0.0])  # zeros for non-differentiable
    assert g_idx.dtype == idx.dtype


def test_mark_non_differentiable_refuses_a_value_forward_did_not_return(device: str) -> None:
    class Wrong(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.mark_non_differentiable(x)  # an input, not an output
            return x * 2.0

        @staticmethod
        def backward(ctx, g):
            return g

    with pytest.raises(ValueError, match="Wrong: mark_non_differentiable was given a value"):
        Wrong.apply(leaf(np.ones(2), device))


def test_forward_returning_its_input_gets_a_new_tensor(device: str) -> None:
    class Identity(Function):
        @staticmethod
        def forward(ctx, x):
            return x

        @staticmethod
        def backward(ctx, g):
            return g

    x = leaf(np.ones(3), device)
    y = Identity.apply(x)
    assert y is not x and x.is_leaf and y.grad_fn is not None
    (y * 3.0).sum().backward()
    np.testing.assert_array_equal(host(x.grad), [3.0, 3.0, 3.0])
    with no_grad():  # as in PyTorch, a new object also when nothing is recorded
        z = Identity.apply(x)
    assert z is not x and z.grad_fn is None and not z.requires_grad
    assert z.data is x.data  # the same array: no copy


def test_same_tensor_twice_and_non_leaf_inputs(device: str, rng: np.random.Generator) -> None:
    class Mul(Function):
        @staticmethod
        def forward(ctx, a, b):
            ctx.save_for_backward(a, b)
            return a * b

        @staticmethod
        def backward(ctx, g):
            a, b = ctx.saved_tensors
            return g * b, g * a

    v = rng.standard_normal(4)
    x = leaf(v, device)
    h = x.tanh()  # a non-leaf input
    y = Mul.apply(h, h)
    (y + Mul.apply(x, x)).sum().backward()
    t = np.tanh(v)
    np.testing.assert_allclose(host(x.grad), 2 * t * (1 - t**2) + 2 * v, **TOL)


def test_no_recording_under_no_grad_or_without_grad_inputs(device: str) -> None:
    x = leaf(np.ones(2), device)
    before = Tape.size()
    with no_grad():
        y = Exp.apply(x)
    assert not y.requires_grad and y.grad_fn is None
    z = Clamp.apply(leaf(np.ones(2), device, grad=False), 0.0, 0.5)
    assert isinstance(z, Tensor) and not z.requires_grad  # an NvArray output, wrapped
    assert Tape.size() == before


def test_forward_runs_without_recording(device: str) -> None:
    states = []

    class Probe(Function):
        @staticmethod
        def forward(ctx, x):
            h = x * 2.0
            states.append((Tape.no_grad_active(), h.requires_grad))
            return h

        @staticmethod
        def backward(ctx, g):
            states.append((Tape.no_grad_active(), g.requires_grad))
            return g * 2.0

    Probe.apply(leaf(np.ones(2), device)).sum().backward()
    assert states == [(True, False), (True, False)]


def test_graph_and_saved_tensors_freed_with_the_outputs(device: str) -> None:
    saved = []

    class Keep(Function):
        @staticmethod
        def forward(ctx, x):
            y = x * 3.0
            saved.append(weakref.ref(y))
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, g):
            return g * 3.0

    x = leaf(np.ones(4), device)
    before = Tape.size()
    a, b = Keep.apply(x), SinCos.apply(x)
    assert Tape.size() == before + 4  # Keep: one node; SinCos: its node and one per output
    del a, b
    assert Tape.size() == before  # reference counting alone, no collector
    assert saved[-1]() is None
    y = Keep.apply(x)
    y.sum().backward()  # a backward without retain_graph frees what the node saved
    assert saved[-1]() is None
    gc.collect()


def test_second_backward_without_retain_graph_names_the_function(device: str) -> None:
    x = leaf(np.ones(2), device)
    y = Exp.apply(x)
    y.backward(np.ones(2))
    with pytest.raises(GraphFreedError, match="ExpBackward"):
        y.backward(np.ones(2))


def test_retain_graph_runs_backward_again(device: str) -> None:
    x = leaf(np.array([0.0, 1.0]), device)
    y = Exp.apply(x).sum()
    y.backward(retain_graph=True)
    y.backward()
    np.testing.assert_allclose(host(x.grad), 2 * np.exp([0.0, 1.0]), **TOL)


def test_broadcast_gradient_is_summed_to_the_input_shape(device: str) -> None:
    # PyTorch sums a gradient of a shape the input broadcasts to (sum_to); so does this
    class Spread(Function):
        @staticmethod
        def forward(ctx, b, c):
            ctx.shape = (3, 4)
            return (b + c).sum()

        @staticmethod
        def backward(ctx, g):
            full = ignis.ones(ctx.shape, dtype="float64", device=g.device) * g.data
            return full, full

    b = leaf(np.zeros(4), device)  # leading axis added
    c = leaf(np.zeros((3, 1)), device)  # size-1 axis stretched
    Spread.apply(b, c).backward()
    np.testing.assert_array_equal(host(b.grad), np.full(4, 3.0))
    np.testing.assert_array_equal(host(c.grad), np.full((3, 1), 4.0))


def test_half_input_accepts_a_float32_gradient(device: str) -> None:
    class Twice(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2.0

        @staticmethod
        def backward(ctx, g):
            assert g.dtype == "float16"
            return g.astype("float32") * 2.0

    x = leaf(np.ones(3), device, dtype="float16")
    Twice.apply(x).sum().backward()
    assert x.grad.dtype == "float32"
    np.testing.assert_array_equal(host(x.grad), [2.0, 2.0, 2.0])


def test_function_with_other_ops_and_tape_record(device: str) -> None:
    x = leaf(np.array([0.5, -0.5]), device)
    y = Tensor(ignis.tanh(x.data))
    Tape.record(y, [x], lambda g: g * (1.0 - y.data * y.data), name="my_tanh")
    (Exp.apply(y) * x).sum().backward()
    t = np.tanh([0.5, -0.5])
    expected = np.exp(t) * (1 - t**2) * np.array([0.5, -0.5]) + np.exp(t)
    np.testing.assert_allclose(host(x.grad), expected, **TOL)


# --- gradcheck ---------------------------------------------------------------------------------


def test_gradcheck_of_custom_functions(device: str, rng: np.random.Generator) -> None:
    x = leaf(rng.standard_normal((3, 2)), device)
    w = leaf(rng.standard_normal((2, 4)), device)
    b = leaf(rng.standard_normal(4), device)
    assert gradcheck(lambda t: Exp.apply(t), [x])
    assert gradcheck(lambda a, m, c: Linear.apply(a, m, c), [x, w, b])
    assert gradcheck(lambda t: SinCos.apply(t)[0] * SinCos.apply(t)[1], [x])
    # away from the bounds: the kinks of clip have no central difference
    v = rng.uniform(-1.0, 1.0, (4, 3))
    v[np.abs(np.abs(v) - 0.5) < 0.05] = 0.0
    assert gradcheck(lambda t: Clamp.apply(t, -0.5, 0.5) * t, [leaf(v, device)])


def test_gradcheck_catches_a_wrong_backward(device: str) -> None:
    class WrongExp(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x.exp()

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * x  # should be g * exp(x)

    with pytest.raises(ag.GradcheckError, match="disagree"):
        gradcheck(lambda t: WrongExp.apply(t), [leaf(np.array([0.3, 1.2]), device)])


# --- checkpoint and capture_step -----------------------------------------------------------


def test_inside_checkpoint(device: str, rng: np.random.Generator) -> None:
    wv, xv = rng.standard_normal((3, 3)), rng.standard_normal((2, 3))
    w = leaf(wv, device)
    calls = []

    class MatmulW(Function):
        # w reaches forward only as a captured NvArray: checkpoint learns about it from apply
        @staticmethod
        def forward(ctx, x, w):
            calls.append(1)
            ctx.save_for_backward(x.data, w.data)
            return x.data @ w.data

        @staticmethod
        def backward(ctx, g):
            xd, wd = ctx.saved_tensors
            return g.data @ wd.mT, xd.mT @ g.data

    def block(h):
        return Exp.apply(MatmulW.apply(h, w)).tanh()

    x0 = leaf(xv, device, grad=False)
    block(x0).sum().backward()
    plain = host(w.grad)
    w.zero_grad()
    calls.clear()
    y = checkpoint(block, x0)
    assert y.requires_grad
    y.sum().backward()
    assert len(calls) == 2  # forward, then recomputed in backward
    np.testing.assert_allclose(host(w.grad), plain, **TOL)


def test_inside_a_captured_step(device: str) -> None:
    if not device.startswith("cuda"):
        pytest.skip("capture_step records CUDA graphs: this case runs on a GPU")

    class Tanh(Function):
        @staticmethod
        def forward(ctx, x):
            y = x.tanh()
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, g):
            (y,) = ctx.saved_tensors
            return g * (1.0 - y * y)

    rng = np.random.default_rng(5)

    def params() -> list[Tensor]:
        r = np.random.default_rng(3)
        return [
            Tensor.from_host(r.standard_normal(s) * 0.3, device=device, requires_grad=True)
            for s in [(16, 8), (8,), (8, 4)]
        ]

    def make_step(ps: list[Tensor]):
        w1, b1, w2 = ps

        def step(x, t):
            for p in ps:
                p.zero_grad()
            h = Tanh.apply(Linear.apply(ag.Tensor(x), w1, b1))
            s, c = SinCos.apply(h @ w2)
            loss = (((s + c) - t) ** 2).mean()
            loss.backward()
            for p in ps:
                p.data -= 0.05 * p.grad  # in place: the captured kernels keep their addresses
            return loss.detach()

        return step

    batches = [
        (
            ignis.asarray(rng.standard_normal((32, 16)).astype(np.float32), device=device),
            ignis.asarray(rng.standard_normal((32, 4)).astype(np.float32), device=device),
        )
        for _ in range(5)
    ]
    eager_ps, graph_ps = params(), params()
    eager = make_step(eager_ps)
    eager(*batches[0])
    eager_losses = [float(eager(x, t).item()) for x, t in batches[1:]]
    captured = ag.capture_step(make_step(graph_ps), *batches[0], warmup=1)
    graph_losses = [float(captured(x, t).item()) for x, t in batches[1:]]
    np.testing.assert_allclose(graph_losses, eager_losses, rtol=1e-5, atol=1e-7)
    for pe, pg in zip(eager_ps, graph_ps, strict=True):
        np.testing.assert_allclose(host(pg), host(pe), rtol=1e-5, atol=1e-6)
    SinCos.seen.clear()


# --- once_differentiable -------------------------------------------------------------------


def test_once_differentiable_backward_works_today(device: str) -> None:
    x = leaf(np.array([-1.0, 0.2, 0.4, 2.0]), device)
    Clamp.apply(x, 0.0, 1.0).sum().backward()
    np.testing.assert_array_equal(host(x.grad), [0.0, 1.0, 1.0, 0.0])
    assert Clamp.backward.once_differentiable is True
    assert Clamp.backward.__name__ == "backward"


def test_once_differentiable_refuses_a_second_differentiation(device: str) -> None:
    # A recorded backward pass (a higher-order gradient) calls backward with recording on and
    # gradients that require grad; that is what this test does by hand.
    kept = []

    class KeepCtx(Function):
        @staticmethod
        def forward(ctx, x):
            kept.append(ctx)
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        @once_differentiable
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * 2.0 * x

        @staticmethod
        def plain_backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * 2.0 * x

    x = leaf(np.array([1.0, 3.0]), device)
    KeepCtx.apply(x)
    ctx = kept[-1]
    g = leaf(np.ones(2), device)
    with enable_grad():
        gx = KeepCtx.backward(ctx, g)
        plain = KeepCtx.plain_backward(ctx, g)
    np.testing.assert_array_equal(host(gx), [2.0, 6.0])
    assert gx.requires_grad
    with pytest.raises(AutogradError, match="KeepCtx: trying to differentiate twice"):
        gx.sum().backward()
    # without the decorator, a backward written with Tensor ops is recorded like any code
    plain.sum().backward()
    np.testing.assert_array_equal(host(g.grad), [2.0, 6.0])


def test_once_differentiable_without_grad_inputs_returns_plain_results(device: str) -> None:
    kept = []

    class K(Function):
        @staticmethod
        def forward(ctx, x):
            kept.append(ctx)
            return x * 1.0

        @staticmethod
        @once_differentiable
        def backward(ctx, g):
            return g

    K.apply(leaf(np.ones(2), device))
    g = leaf(np.ones(2), device, grad=False)
    with enable_grad():
        out = K.backward(kept[-1], g)
    assert out is g


# --- errors ------------------------------------------------------------------------------------


def _returning(result, name: str = "Bad"):
    """A Function of one input (times 2) whose backward returns ``result(grad)``."""

    def forward(ctx, x, *rest):
        return x * 2.0

    def backward(ctx, g):
        return result(g)

    return type(
        name, (Function,), {"forward": staticmethod(forward), "backward": staticmethod(backward)}
    )


def test_wrong_number_of_gradients(device: str) -> None:
    x = leaf(np.ones(3), device)
    too_many = _returning(lambda g: (g, g))
    with pytest.raises(
        AutogradError,
        match=r"function BadBackward returned an incorrect number of gradients \(expected 1, "
        r"got 2\)",
    ):
        too_many.apply(x).sum().backward()
    too_few = _returning(lambda g: g, name="Few")
    with pytest.raises(AutogradError, match=r"FewBackward .* \(expected 2, got 1\)"):
        too_few.apply(x, x).sum().backward()
    # trailing Nones past the inputs are ignored, as PyTorch ignores them
    fine = _returning(lambda g: (g * 2.0, None, None))
    fine.apply(x).sum().backward()
    np.testing.assert_array_equal(host(x.grad), [2.0, 2.0, 2.0])  # (the failed walks wrote nothing)


def test_gradient_for_a_non_tensor_input(device: str) -> None:
    bad = _returning(lambda g: (g, g))
    with pytest.raises(
        AutogradError,
        match="function BadBackward returned a gradient different than None at index 1, but "
        "input 1 of Bad.apply is not a Tensor or an NvArray",
    ):
        bad.apply(leaf(np.ones(3), device), 2.0).sum().backward()


def test_gradient_of_the_wrong_type(device: str) -> None:
    bad = _returning(lambda g: [1.0, 2.0, 3.0])
    with pytest.raises(TypeError, match="BadBackward returned an invalid gradient at index 0"):
        bad.apply(leaf(np.ones(3), device)).sum().backward()


def test_gradient_of_the_wrong_shape(device: str) -> None:
    bad = _returning(lambda g: ignis.ones((2, 4), dtype="float64", device=g.device))
    with pytest.raises(
        ShapeError,
        match=r"function BadBackward returned an invalid gradient at index 0 - got shape "
        r"\(2, 4\) but expected shape compatible with \(3,\)",
    ):
        bad.apply(leaf(np.ones(3), device)).sum().backward()
    # an input that does not broadcast to the gradient's shape (PyTorch's case "input bigger")
    shrink = _returning(lambda g: ignis.ones((1, 3), dtype="float64", device=g.device))
    with pytest.raises(ShapeError, match=r"got shape \(1, 3\) but expected .* \(2, 3\)"):
        shrink.apply(leaf(np.ones((2, 3)), device)).sum().backward()


def test_gradient_of_the_wrong_dtype(device: str) -> None:
    f32 = _returning(lambda g: g.astype("float32"))
    with pytest.raises(
        DTypeError,
        match="BadBackward returned an invalid gradient at index 0 - expected dtype float64 "
        r"\(that of input 0\) but got float32",
    ):
        f32.apply(leaf(np.ones(3), device)).sum().backward()
    ints = _returning(lambda g: g.astype("int64"))
    with pytest.raises(DTypeError, match="expected dtype float16 or float32 .* got int64"):
        ints.apply(leaf(np.ones(3), device, dtype="float16")).sum().backward()


def test_gradient_on_the_wrong_device(device: str) -> None:
    if not device.startswith("cuda"):
        pytest.skip("needs a second device: runs on a GPU")
    bad = _returning(lambda g: g.to("cpu"))
    with pytest.raises(
        DeviceMismatchError,
        match="BadBackward returned an invalid gradient at index 0 - expected device cuda:0",
    ):
        bad.apply(leaf(np.ones(3), device)).sum().backward()


def test_misuse_of_the_class_and_ctx(device: str) -> None:
    with pytest.raises(TypeError, match=r"Exp is not instantiated: call Exp.apply"):
        Exp()

    class NoBackward(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1.0

    with pytest.raises(NotImplementedError, match="NoBackward must define backward"):
        NoBackward.apply(leaf(np.ones(2), device)).sum().backward()

    class NoForward(Function):
        pass

    with pytest.raises(NotImplementedError, match="NoForward must define forward"):
        NoForward.apply(leaf(np.ones(2), device))

    class SavesJunk(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x, 3)
            return x

    with pytest.raises(
        TypeError,
        match="SavesJunk: save_for_backward takes Tensors, NvArrays or None; argument 1 is a int",
    ):
        SavesJunk.apply(leaf(np.ones(2), device))


def test_an_error_in_backward_leaves_later_walks_correct(device: str) -> None:
    fail = [True]

    class Flaky(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x.sin(), x.cos()

        @staticmethod
        def backward(ctx, gs, gc_):
            if fail[0]:
                raise RuntimeError("boom")
            (x,) = ctx.saved_tensors
            return gs * x.cos() - gc_ * x.sin()

    v = np.array([0.1, 0.7])
    x = leaf(v, device)
    s, c = Flaky.apply(x)
    with pytest.raises(RuntimeError, match="boom"):
        (s + c).sum().backward(retain_graph=True)
    fail[0] = False
    x.zero_grad()
    s.sum().backward()  # only s this time: c's gradient from the failed walk must not linger
    np.testing.assert_allclose(host(x.grad), np.cos(v), **TOL)


# --- agreement with torch.autograd.Function ------------------------------------------------


def _torch_functions(torch):
    class TExp(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            y = x.exp()
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, g):
            (y,) = ctx.saved_tensors
            return g * y

    class TLinear(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w, b):
            ctx.save_for_backward(x, w)
            return x @ w + b

        @staticmethod
        def backward(ctx, g):
            x, w = ctx.saved_tensors
            return g @ w.mT, x.mT @ g, g.sum(0)

    class TSinCos(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x.sin(), x.cos()

        @staticmethod
        def backward(ctx, gs, gc_):
            (x,) = ctx.saved_tensors
            return gs * x.cos() - gc_ * x.sin()

    class TSpread(torch.autograd.Function):
        @staticmethod
        def forward(ctx, b):
            return b.sum() * 3.0

        @staticmethod
        def backward(ctx, g):
            return torch.ones(3, 4, dtype=g.dtype) * g * 3.0  # summed to b's shape (4,)

    return TExp, TLinear, TSinCos, TSpread


def test_agrees_with_torch_autograd_function(rng: np.random.Generator) -> None:
    torch = pytest.importorskip("torch")
    TExp, TLinear, TSinCos, TSpread = _torch_functions(torch)

    class Spread(Function):
        @staticmethod
        def forward(ctx, b):
            return b.sum() * 3.0

        @staticmethod
        def backward(ctx, g):
            return ignis.ones((3, 4), dtype="float64", device=g.device) * g.data * 3.0

    xv, wv, bv = rng.standard_normal((4, 3)), rng.standard_normal((3, 4)), rng.standard_normal(4)
    u = rng.standard_normal((4, 4))
    ours = [leaf(a, "cpu") for a in (xv, wv, bv)]
    theirs = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (xv, wv, bv)]
    ut = torch.tensor(u)
    uo = Tensor.from_host(u, dtype="float64", device="cpu")

    def loss_ours(x, w, b):
        h = Linear.apply(x, w, b)
        s, c = SinCos.apply(h)
        return (Exp.apply(s * c) * uo).sum() + Spread.apply(b)

    def loss_theirs(x, w, b):
        h = TLinear.apply(x, w, b)
        s, c = TSinCos.apply(h)
        return (TExp.apply(s * c) * ut).sum() + TSpread.apply(b)

    lo, lt = loss_ours(*ours), loss_theirs(*theirs)
    np.testing.assert_allclose(lo.item(), lt.item(), **TOL)
    lo.backward()
    lt.backward()
    for o, t in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(host(o.grad), t.grad.numpy(), rtol=1e-12, atol=1e-13)


def test_torch_refuses_the_same_mistakes() -> None:
    torch = pytest.importorskip("torch")

    def bad(result):
        class BadT(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, *rest):
                return x * 2.0

            @staticmethod
            def backward(ctx, g):
                return result(g)

        return BadT

    x = torch.ones(3, dtype=torch.float64, requires_grad=True)
    with pytest.raises(RuntimeError, match="incorrect number of gradients"):
        bad(lambda g: (g, g)).apply(x).sum().backward()
    with pytest.raises(RuntimeError, match="different than None"):
        bad(lambda g: (g, g)).apply(x, 2.0).sum().backward()
    with pytest.raises(RuntimeError, match="expected shape compatible with"):
        bad(lambda g: torch.ones(2, 4, dtype=torch.float64)).apply(x).sum().backward()
