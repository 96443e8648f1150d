"""Graph semantics: independent graphs, lifetime, freeing, accumulation, threads, errors."""

from __future__ import annotations

import gc
import threading
import tracemalloc
import weakref

import numpy as np
import pytest

import ignis
import ignis_autograd as ag
from ignis_autograd import GraphFreedError, Tape, Tensor, no_grad


def leaf(v: np.ndarray, device: str, dtype: str = "float64", grad: bool = True) -> Tensor:
    return Tensor.from_host(v, dtype=dtype, device=device, requires_grad=grad)


# --- independent graphs ---------------------------------------------------------------------------


def test_independent_graphs_on_one_thread(device: str, rng: np.random.Generator) -> None:
    xv, wv = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    x, w = leaf(xv, device), leaf(wv, device)
    y1 = (x * w).sum()
    y2 = (x + w).exp().sum()
    y3 = (x * x).mean()
    y2.backward()  # the middle graph first: the others must be untouched
    np.testing.assert_allclose(x.grad.to_host(), np.exp(xv + wv), rtol=1e-12)
    np.testing.assert_allclose(w.grad.to_host(), np.exp(xv + wv), rtol=1e-12)
    x.zero_grad(), w.zero_grad()
    y1.backward()
    np.testing.assert_allclose(x.grad.to_host(), wv, rtol=1e-12)
    np.testing.assert_allclose(w.grad.to_host(), xv, rtol=1e-12)
    x.zero_grad(), w.zero_grad()
    y3.backward()
    np.testing.assert_allclose(x.grad.to_host(), 2 * xv / xv.size, rtol=1e-12)
    assert w.grad is None


def test_backward_of_one_output_keeps_unrelated_nodes_of_another(device: str) -> None:
    x = leaf(np.array([1.0, 2.0]), device)
    a = x * 3.0
    b = x * 5.0
    a.sum().backward()
    assert not b.grad_fn.released
    b.sum().backward()
    np.testing.assert_allclose(x.grad.to_host(), [8.0, 8.0])


# --- lifetime -------------------------------------------------------------------------------------


def test_graph_freed_by_reference_counting_when_outputs_die(
    device: str, rng: np.random.Generator
) -> None:
    x = leaf(rng.standard_normal(50), device)
    gc.collect()
    gc.disable()  # no cycles: reference counting alone must free the graph
    try:
        h = x.exp()
        saved = weakref.ref(h.data)  # exp saves its output for backward
        y = (h * 2.0).tanh().sum()
        nodes = [weakref.ref(y.grad_fn), weakref.ref(h.grad_fn)]
        del h
        assert saved() is not None and all(n() is not None for n in nodes)
        assert Tape.size() >= 4
        del y
        assert saved() is None
        assert all(n() is None for n in nodes)
        assert Tape.size() == 0
    finally:
        gc.enable()


WINDOW = 200  # forward passes per measured window
LEAK_LIMIT = 8 * 1024  # bytes a window may grow by; a leaked node per pass is > 100 bytes


def _window_growth(step, windows: int = 3) -> list[int]:
    """Traced host bytes gained over each of ``windows`` equal windows of ``step`` calls, after a
    warm-up of two windows; garbage is collected at each window's edges."""
    gc.collect()
    tracemalloc.start()
    try:
        for _ in range(2 * WINDOW):  # caches, free lists and hash tables fill up here
            step()
        growth = []
        for _ in range(windows):
            gc.collect()
            start = tracemalloc.get_traced_memory()[0]
            for _ in range(WINDOW):
                step()
            gc.collect()
            growth.append(tracemalloc.get_traced_memory()[0] - start)
    finally:
        tracemalloc.stop()
    return growth


def test_forward_loop_without_backward_does_not_grow(device: str, rng: np.random.Generator) -> None:
    w1 = leaf(rng.standard_normal((16, 32)) * 0.1, device, "float32")
    w2 = leaf(rng.standard_normal((32, 4)) * 0.1, device, "float32")
    x = Tensor.from_host(rng.standard_normal((8, 16)), dtype="float32", device=device)

    def step() -> float:
        return ((x @ w1).relu() @ w2).tanh().mean().item()

    # A leak grows every window; a one-off allocation (a free list or a table growing once,
    # wherever other tests left it) lands in one window at most, so the smallest growth counts.
    growth = _window_growth(step)
    assert Tape.size() == 0  # every pass's graph died with its loss
    assert min(growth) < LEAK_LIMIT, f"host memory grew by {growth} bytes per {WINDOW} passes"

    # The same measure catches a real leak: one graph kept per pass.
    kept: list[Tensor] = []

    def leaky_step() -> None:
        kept.append(((x @ w1).relu() @ w2).tanh().mean())

    assert min(_window_growth(leaky_step)) > LEAK_LIMIT


@pytest.mark.gpu
def test_forward_loop_device_memory_is_flat_on_gpu(rng: np.random.Generator) -> None:
    device = "cuda:0"
    w = leaf(rng.standard_normal((256, 256)) * 0.05, device, "float32")
    x = Tensor.from_host(rng.standard_normal((64, 256)), dtype="float32", device=device)
    for _ in range(10):
        (x @ w).relu().sum().item()
    ignis.synchronize()
    start = ignis.memory_stats()["current_bytes"]
    for _ in range(1000):
        (x @ w).relu().sum().item()
    ignis.synchronize()
    assert ignis.memory_stats()["current_bytes"] - start <= 1 << 20
    assert Tape.size() == 0


def test_backward_frees_graph_and_second_backward_is_a_clear_error(device: str) -> None:
    x = leaf(np.array([1.0, 2.0, 3.0]), device)
    y = (x * x).sum()
    y.backward()
    assert y.grad_fn.released
    assert Tape.size() == 0
    with pytest.raises(GraphFreedError, match="retain_graph=True"):
        y.backward()
    np.testing.assert_allclose(x.grad.to_host(), [2.0, 4.0, 6.0])  # unchanged by the failed call


def test_retain_graph_allows_a_second_backward(device: str) -> None:
    x = leaf(np.array([1.0, -2.0]), device)
    y = (x * x * x).sum()
    y.backward(retain_graph=True)
    y.backward()
    np.testing.assert_allclose(x.grad.to_host(), 2 * 3 * np.array([1.0, 4.0]))
    with pytest.raises(GraphFreedError):
        y.backward()


def test_shared_subgraph_is_freed_by_the_first_backward(device: str) -> None:
    x = leaf(np.array([0.5, 1.5]), device)
    h = x.exp()
    z1, z2 = (h * 2.0).sum(), (h * 3.0).sum()
    z1.backward(retain_graph=True)
    z2.backward()  # h's node was retained
    np.testing.assert_allclose(x.grad.to_host(), 5 * np.exp([0.5, 1.5]))
    z3 = (h * 4.0).sum()
    with pytest.raises(GraphFreedError, match="exp"):
        z3.backward()


def test_tape_clear_frees_live_graphs(device: str) -> None:
    x = leaf(np.array([1.0, 2.0]), device)
    y = (x * 2.0).sum()
    assert Tape.size() == 2
    Tape.clear()
    assert Tape.size() == 0
    with pytest.raises(GraphFreedError):
        y.backward()


# --- accumulation -----------------------------------------------------------------------------


def test_gradients_accumulate_across_backward_calls_until_zero_grad(
    device: str, rng: np.random.Generator
) -> None:
    wv = rng.standard_normal((3, 2))
    w = leaf(wv, device)
    batches = [rng.standard_normal((4, 3)) for _ in range(3)]
    for b in batches:  # micro-batching
        (Tensor.from_host(b, dtype="float64", device=device) @ w).sum().backward()
    expected = sum(b.sum(axis=0)[:, None].repeat(2, axis=1) for b in batches)
    np.testing.assert_allclose(w.grad.to_host(), expected, rtol=1e-12)
    w.zero_grad()
    assert w.grad is None
    (Tensor.from_host(batches[0], dtype="float64", device=device) @ w).sum().backward()
    np.testing.assert_allclose(w.grad.to_host(), batches[0].sum(axis=0)[:, None].repeat(2, axis=1))


def test_leaf_used_many_times_gets_each_contribution_once(
    device: str, rng: np.random.Generator
) -> None:
    xv = rng.standard_normal(5)
    x = leaf(xv, device)
    y = x + x + x * x + (x * 2.0) * x - x
    y.backward(Tensor.from_host(np.ones(5), dtype="float64", device=device))
    np.testing.assert_allclose(x.grad.to_host(), 1 + 6 * xv, rtol=1e-12)


def test_passthrough_gradients_are_not_aliased(device: str) -> None:
    # add returns its incoming gradient to both inputs; the leaves must not share one buffer.
    a = leaf(np.array([1.0, 2.0]), device)
    b = leaf(np.array([3.0, 4.0]), device)
    g = ignis.NvArray.from_host([1.0, 1.0], dtype="float64", device=device)
    (a + b).backward(g)
    (a * 10.0).sum().backward()
    np.testing.assert_allclose(a.grad.to_host(), [11.0, 11.0])
    np.testing.assert_allclose(b.grad.to_host(), [1.0, 1.0])
    np.testing.assert_allclose(g.to_host(), [1.0, 1.0])  # the caller's grad_output is never written


def test_backward_on_a_leaf(device: str) -> None:
    x = leaf(np.array([1.0, 2.0]), device)
    x.backward(ignis.NvArray.from_host([3.0, 4.0], dtype="float64", device=device))
    np.testing.assert_allclose(x.grad.to_host(), [3.0, 4.0])


def test_accumulation_never_synchronizes_the_device(
    device: str, monkeypatch: pytest.MonkeyPatch, rng: np.random.Generator
) -> None:
    from ignis._array._backend import Backend

    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("backward synchronized the device")

    x = leaf(rng.standard_normal((4, 4)), device, "float32")
    w = leaf(rng.standard_normal((4, 4)), device, "float32")
    y = ((x @ w) * x + x).sum()
    monkeypatch.setattr(ignis, "synchronize", forbidden)
    monkeypatch.setattr(ignis.Device, "synchronize", forbidden)
    for cls in type(x.data._backend).__mro__:
        if cls is not object and "synchronize" in vars(cls) and issubclass(cls, Backend):
            monkeypatch.setattr(cls, "synchronize", forbidden)
    y.backward(retain_graph=True)
    y.backward()  # the second pass accumulates in place into existing .grad buffers
    monkeypatch.undo()
    assert x.grad is not None and w.grad is not None


def test_broadcast_gradients_sum_to_each_input_shape(device: str, rng: np.random.Generator) -> None:
    av, bv, cv = (
        rng.standard_normal((3, 1)),
        rng.standard_normal((4,)),
        rng.standard_normal((2, 1, 1)),
    )
    a, b, c = leaf(av, device), leaf(bv, device), leaf(cv, device)
    y = a * b + c  # (2, 3, 4)
    u = rng.standard_normal((2, 3, 4))
    y.backward(Tensor.from_host(u, dtype="float64", device=device))
    assert a.grad.shape == (3, 1) and b.grad.shape == (4,) and c.grad.shape == (2, 1, 1)
    np.testing.assert_allclose(a.grad.to_host(), (u * bv).sum(axis=(0, 2))[:, None], rtol=1e-12)
    np.testing.assert_allclose(b.grad.to_host(), (u * av).sum(axis=(0, 1)), rtol=1e-12)
    np.testing.assert_allclose(c.grad.to_host(), u.sum(axis=(1, 2))[:, None, None], rtol=1e-12)


def test_python_and_numpy_scalars_on_either_side(device: str) -> None:
    x = leaf(np.array([1.0, 2.0]), device)
    y = (2.0 * x + 1 - x / 4.0 + 3 / x - 2**x + x**2 + np.float64(0.5) * x).sum()
    y.backward()
    v = np.array([1.0, 2.0])
    expected = 2 - 0.25 - 3 / v**2 - np.log(2) * 2**v + 2 * v + 0.5
    np.testing.assert_allclose(x.grad.to_host(), expected, rtol=1e-12)


def test_constants_get_no_gradient(device: str) -> None:
    x = leaf(np.array([1.0, 2.0]), device)
    c = Tensor.from_host([3.0, 4.0], dtype="float64", device=device)  # requires_grad False
    n = ignis.NvArray.from_host([5.0, 6.0], dtype="float64", device=device)
    (x * c + x * n).sum().backward()
    np.testing.assert_allclose(x.grad.to_host(), [8.0, 10.0])
    assert c.grad is None


def test_non_leaf_grads_are_not_kept(device: str) -> None:
    x = leaf(np.array([1.0, 2.0]), device)
    h = x * 2.0
    h.sum().backward()
    assert h.grad is None and not h.is_leaf and x.is_leaf


# --- recording ------------------------------------------------------------------------------------


def test_no_grad_context_and_decorator(device: str) -> None:
    x = leaf(np.array([1.0, 2.0]), device)
    with no_grad():
        assert Tape.no_grad_active()
        y = x * 2.0
        with ag.enable_grad():
            z = x * 3.0
        with Tape.no_grad():  # nested
            pass
        assert Tape.no_grad_active()
    assert not Tape.no_grad_active()
    assert not y.requires_grad and y.grad_fn is None
    assert z.requires_grad

    @no_grad()
    def infer(t: Tensor) -> Tensor:
        return (t * t).sum()

    @no_grad
    def infer_bare(t: Tensor) -> Tensor:
        return t * 2.0

    out = infer(x)
    assert not out.requires_grad and not Tape.no_grad_active()
    assert not infer_bare(x).requires_grad and infer_bare.__name__ == "infer_bare"
    np.testing.assert_allclose(y.to_host(), [2.0, 4.0])


def test_no_grad_restores_on_exception(device: str) -> None:
    with pytest.raises(RuntimeError):
        with no_grad():
            raise RuntimeError("boom")
    assert not Tape.no_grad_active()


def test_recording_is_thread_local(device: str) -> None:
    x = leaf(np.array([1.0, 2.0]), device)
    seen = {}

    def other() -> None:
        seen["active"] = Tape.no_grad_active()
        seen["requires_grad"] = (x * 2.0).requires_grad

    with no_grad():
        t = threading.Thread(target=other)
        t.start()
        t.join()
    assert seen == {"active": False, "requires_grad": True}


def test_two_threads_train_separate_graphs(device: str) -> None:
    # Two threads each fit their own linear model by gradient descent, interleaving op by op.
    barrier = threading.Barrier(2)
    results: dict[int, np.ndarray] = {}
    errors: list[BaseException] = []

    def train(k: int) -> None:
        try:
            r = np.random.default_rng(k)
            xv = r.standard_normal((32, 3))
            true_w = np.array([[1.0], [-2.0], [0.5]]) * (k + 1)
            yv = xv @ true_w
            x = Tensor.from_host(xv, dtype="float64", device=device)
            y = Tensor.from_host(yv, dtype="float64", device=device)
            w = Tensor.zeros((3, 1), dtype="float64", device=device, requires_grad=True)
            for _ in range(60):
                barrier.wait()
                loss = ((x @ w - y) ** 2).mean()
                loss.backward()
                w = Tensor(w.data - w.grad * 0.3, requires_grad=True)
            results[k] = w.to_host()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=train, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for k in range(2):
        np.testing.assert_allclose(
            results[k], np.array([[1.0], [-2.0], [0.5]]) * (k + 1), atol=1e-3
        )


# --- custom ops -------------------------------------------------------------------------------


def test_tape_record_custom_op(device: str, rng: np.random.Generator) -> None:
    xv, wv = rng.standard_normal(4), rng.standard_normal(4)
    x, w = leaf(xv, device), leaf(wv, device)
    out = Tensor(ignis.exp(x.data) * w.data)
    assert (
        Tape.record(out, [x, w], lambda g: (g * out.data, g * ignis.exp(x.data)), name="expmul")
        is out
    )
    assert out.requires_grad and out.grad_fn.name == "expmul"
    (out * 2.0).sum().backward()
    np.testing.assert_allclose(x.grad.to_host(), 2 * np.exp(xv) * wv, rtol=1e-12)
    np.testing.assert_allclose(w.grad.to_host(), 2 * np.exp(xv), rtol=1e-12)
    assert ag.gradcheck(lambda a: _custom_square(a), [leaf(xv, device)])


def _custom_square(a: Tensor) -> Tensor:
    out = Tensor(a.data * a.data)
    return Tape.record(out, [a], lambda g: g * a.data * 2.0, name="square")


def test_tape_record_single_gradient_none_and_no_grad(device: str) -> None:
    x = leaf(np.array([1.0, 2.0]), device)
    c = leaf(np.array([5.0, 5.0]), device)
    out = Tape.record(Tensor(x.data + c.data), (x, c), lambda g: (g, None), name="half_known")
    out.sum().backward()
    np.testing.assert_allclose(x.grad.to_host(), [1.0, 1.0])
    assert c.grad is None
    with no_grad():
        plain = Tape.record(Tensor(x.data * 2.0), [x], lambda g: g)
    assert not plain.requires_grad and plain.grad_fn is None


def test_tape_record_wrong_shape_names_the_op(device: str) -> None:
    x = leaf(np.ones((2, 3)), device)
    out = Tape.record(Tensor(x.data.sum(axis=0)), [x], lambda g: g, name="my_colsum")
    with pytest.raises(ignis.ShapeError, match=r"my_colsum.*\(3,\).*\(2, 3\)"):
        out.sum().backward()


def test_tape_record_wrong_count_and_type(device: str) -> None:
    x = leaf(np.ones(3), device)
    out = Tape.record(Tensor(x.data * 2.0), [x], lambda g: (g, g), name="two_grads")
    with pytest.raises(ValueError, match="two_grads.*2 gradients for 1 inputs"):
        out.sum().backward()
    out = Tape.record(Tensor(x.data * 2.0), [x], lambda g: [1.0, 2.0, 3.0], name="host_list")
    with pytest.raises((TypeError, ValueError), match="host_list"):
        out.sum().backward()
    with pytest.raises(ValueError, match="already belongs to a graph"):
        Tape.record(x * 2.0, [x], lambda g: g)


# --- errors -----------------------------------------------------------------------------------


def test_backward_on_non_scalar_needs_grad_output(device: str) -> None:
    x = leaf(np.ones((2, 3)), device)
    with pytest.raises(ignis.ShapeError, match=r"grad_output is required.*\(2, 3\)"):
        (x * 2.0).backward()
    with pytest.raises(ignis.ShapeError, match=r"grad_output has shape \(3,\), expected \(2, 3\)"):
        (x * 2.0).backward(ignis.NvArray.ones((3,), dtype="float64", device=device))


def test_backward_without_grad_is_an_error(device: str) -> None:
    x = Tensor.from_host([1.0], device=device)
    with pytest.raises(ag.AutogradError, match="does not require grad"):
        (x * 2.0).backward()


def test_shape_mismatch_names_op_and_shapes(device: str) -> None:
    a = leaf(np.ones((3, 4)), device)
    b = leaf(np.ones((5,)), device)
    with pytest.raises(ignis.ShapeError, match=r"add.*\(3, 4\).*\(5,\)"):
        a + b
    with pytest.raises(ignis.ShapeError, match=r"matmul: shapes \(3, 4\) and \(5,\)"):
        a @ b
    with pytest.raises(ignis.ShapeError, match=r"add_bias.*\(5,\).*\(3, 4\)"):
        a.add_bias(b)
    with pytest.raises(
        ignis.ShapeError, match=r"layer_norm: weight has shape \(5,\), expected \(4,\)"
    ):
        ag.layer_norm(a, weight=b)
    with pytest.raises(ignis.ShapeError, match=r"cross_entropy.*\(5,\).*\(3, 4\)"):
        ag.cross_entropy(a, ignis.zeros((5,), dtype="int64", device=device))


def test_bad_arguments_of_nn_functions(device: str) -> None:
    z = leaf(np.ones((2, 3)), device)
    with pytest.raises(ignis.DTypeError, match="integer class indices"):
        ag.cross_entropy(z, ignis.zeros((2,), dtype="float32", device=device))
    # A target outside [0, C) is not checked on the host (that would stop for a read-back): its
    # row's loss is NaN, and so is the mean.
    bad = ag.cross_entropy(z, ignis.NvArray.from_host([0, 3], device=device), reduction="none")
    assert np.isnan(bad.to_host()[1]) and np.isfinite(bad.to_host()[0])
    assert np.isnan(ag.cross_entropy(z, ignis.NvArray.from_host([0, 3], device=device)).item())
    with pytest.raises(IndexError, match=r"embedding: 1 index\(es\) outside \[-4, 4\)"):
        ids = ignis.NvArray.from_host([0, 7], device=device)
        ag.embedding(ids, leaf(np.ones((4, 2)), device), check=True)
    with pytest.raises(ValueError, match="p must be in"):
        ag.dropout(z, 1.5)


def test_requires_grad_rules(device: str) -> None:
    with pytest.raises(ignis.DTypeError, match="int64"):
        Tensor(ignis.zeros((2,), dtype="int64", device=device), requires_grad=True)
    x = leaf(np.ones(2), device)
    y = x * 2.0
    with pytest.raises(ag.AutogradError, match="leaf"):
        y.requires_grad = False
    d = y.detach()
    assert d.is_leaf and not d.requires_grad
    d.requires_grad_()
    assert d.requires_grad


# --- Tensor basics -----------------------------------------------------------------------------


def test_tensor_constructors_and_attributes(device: str) -> None:
    x = Tensor.from_host([1.0, 2.0, 3.0], shape=[3], device=device, requires_grad=True)
    assert x.dtype == "float32" and x.shape == (3,) and x.ndim == 1 and x.numel() == 3
    assert x.device == device and x.is_leaf and x.grad is None and x.grad_fn is None
    assert x.device_id == (None if device == "cpu" else 0)
    (x * x).sum().backward()
    np.testing.assert_array_equal(x.grad.to_host(), [2.0, 4.0, 6.0])
    assert Tensor.zeros((2, 2), device=device).to_host().sum() == 0
    assert Tensor.ones((2, 2), dtype="float64", device=device).numpy().sum() == 4
    assert Tensor.full((2,), 7.0, device=device).tolist() == [7.0, 7.0]
    r = Tensor.rand((100,), device=device, generator=ignis.random.Generator(1)).to_host()
    assert 0 <= r.min() and r.max() < 1 and r.std() > 0.1
    n = Tensor.randn((2, 50), dtype="float64", device=device, requires_grad=True)
    assert n.requires_grad and abs(float(n.to_host().mean())) < 0.5
    assert Tensor.from_nv_array(x.data).data is x.data
    assert (x * 2.0).sum().item() == 12.0
    assert "grad_fn" in repr(x * 2.0) and "requires_grad=True" in repr(x)
    with pytest.raises(TypeError, match="from_host"):
        Tensor([1.0, 2.0])


def test_comparisons_give_plain_bool_tensors(device: str) -> None:
    x = leaf(np.array([1.0, -1.0]), device)
    m = x > 0
    assert m.dtype == "bool" and not m.requires_grad
    assert (x == x).to_host().all()
    assert {x: 1}[x] == 1  # tensors are hashable by identity


def test_ops_keep_only_what_their_gradient_needs(device: str) -> None:
    x = leaf(np.array([1.0, 2.0]), device)
    h = x + 1.0  # add keeps no values
    y = h * 0.5  # the gradient of h needs only the constant 0.5, not h
    kept = weakref.ref(h.data)
    del h
    assert kept() is None
    y.sum().backward()
    np.testing.assert_allclose(x.grad.to_host(), [0.5, 0.5])


# --- NvArray operands on the left -----------------------------------------------------------------


def test_an_nvarray_on_the_left_defers_to_the_tensor(device: str, rng: np.random.Generator) -> None:
    cv, xv = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    c = ignis.asarray(cv, device=device)  # a constant
    x = leaf(xv, device)
    y = c * x + c - x / c
    assert isinstance(y, Tensor) and y.requires_grad
    np.testing.assert_allclose(y.to_host(), cv * xv + cv - xv / cv, rtol=1e-12)
    (c @ x.T).sum().backward()  # d/dx of sum(c @ x.T) is the column sums of c, per row of x
    np.testing.assert_allclose(x.grad.to_host(), np.tile(cv.sum(axis=0), (3, 1)), rtol=1e-12)
