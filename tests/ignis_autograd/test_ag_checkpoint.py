"""Gradient checkpointing returns exactly the un-checkpointed gradients and keeps less."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import ignis
import ignis_autograd as ag
from ignis_autograd import Tape, Tensor, checkpoint, no_grad


def leaf(v: np.ndarray, device: str, grad: bool = True, dtype: str = "float64") -> Tensor:
    return Tensor.from_host(v, dtype=dtype, device=device, requires_grad=grad)


def grads_of(
    build: Callable[[], Tensor], leaves: list[Tensor]
) -> tuple[np.ndarray, list[np.ndarray | None]]:
    for t in leaves:
        t.zero_grad()
    out = build()
    value = out.to_host()
    out.backward()
    return value, [None if t.grad is None else t.grad.to_host() for t in leaves]


def assert_same(a: tuple, b: tuple) -> None:
    np.testing.assert_array_equal(a[0], b[0])
    for x, y in zip(a[1], b[1], strict=True):
        assert (x is None) == (y is None)
        if x is not None:
            np.testing.assert_allclose(x, y, rtol=1e-13, atol=1e-15)


class Counter:
    def __init__(self, fn: Callable[..., Tensor]):
        self.fn, self.calls = fn, 0

    def __call__(self, *args: Tensor) -> Tensor:
        self.calls += 1
        return self.fn(*args)


def test_explicit_inputs(device: str, rng: np.random.Generator) -> None:
    x, y = leaf(rng.standard_normal((3, 4)), device), leaf(rng.standard_normal((4,)), device)
    f = Counter(lambda a, b: ((a * b).tanh() * a).exp())
    plain = grads_of(lambda: f(x, y).sum(), [x, y])
    f.calls = 0
    ck = grads_of(lambda: checkpoint(f, x, y).sum(), [x, y])
    assert f.calls == 2  # forward once, recomputed once during backward
    assert_same(plain, ck)


def test_captured_parameters_with_input_not_requiring_grad(
    device: str, rng: np.random.Generator
) -> None:
    w1, w2 = leaf(rng.standard_normal((4, 6)), device), leaf(rng.standard_normal((6, 2)), device)
    x = leaf(rng.standard_normal((5, 4)), device, grad=False)  # data: no gradient wanted

    def block(h: Tensor) -> Tensor:
        return (h @ w1).gelu() @ w2

    plain = grads_of(lambda: (block(x) ** 2).mean(), [w1, w2])
    ck = grads_of(lambda: (checkpoint(block, x) ** 2).mean(), [w1, w2])
    assert_same(plain, ck)
    assert x.grad is None


def test_non_leaf_input_and_captured_non_leaf(device: str, rng: np.random.Generator) -> None:
    p, q = leaf(rng.standard_normal((3,)), device), leaf(rng.standard_normal((3,)), device)

    def build(use_checkpoint: bool) -> Tensor:
        h = p.exp()  # non-leaf explicit input
        c = q * 2.0 + p  # non-leaf captured by the function
        fn = lambda a: (a * c).tanh() * a  # noqa: E731
        out = checkpoint(fn, h) if use_checkpoint else fn(h)
        return (out + h * c).sum()  # h and c are also used outside the checkpoint

    assert_same(grads_of(lambda: build(False), [p, q]), grads_of(lambda: build(True), [p, q]))


def test_nested_checkpoints(device: str, rng: np.random.Generator) -> None:
    w = leaf(rng.standard_normal((4, 4)) * 0.5, device)
    x = leaf(rng.standard_normal((2, 4)), device)
    inner = Counter(lambda h: (h @ w).tanh())
    outer_plain = lambda h: inner(inner(h)) * h  # noqa: E731
    outer_ck = lambda h: checkpoint(inner, checkpoint(inner, h)) * h  # noqa: E731
    plain = grads_of(lambda: (outer_plain(x) @ w).sum(), [w, x])
    ck = grads_of(lambda: (checkpoint(outer_ck, x) @ w).sum(), [w, x])
    assert_same(plain, ck)


def test_deep_chain_of_checkpoints_and_fewer_live_nodes(
    device: str, rng: np.random.Generator
) -> None:
    ws = [leaf(rng.standard_normal((8, 8)) * 0.3, device) for _ in range(6)]
    x = leaf(rng.standard_normal((4, 8)), device)

    def block(h: Tensor, w: Tensor) -> Tensor:
        return ((h @ w).tanh() + h).layer_norm()

    def net(use_checkpoint: bool) -> Tensor:
        h = x
        for w in ws:
            h = checkpoint(block, h, w) if use_checkpoint else block(h, w)
        return (h * h).mean()

    out = net(False)
    kept_plain = Tape.size()
    del out
    out = net(True)
    kept_ck = Tape.size()
    del out
    assert kept_ck < kept_plain / 2  # one node per block instead of the block's whole graph
    assert_same(grads_of(lambda: net(False), ws + [x]), grads_of(lambda: net(True), ws + [x]))


def test_dropout_inside_draws_the_same_mask(device: str, rng: np.random.Generator) -> None:
    x = leaf(rng.standard_normal((6, 5)), device)
    w = leaf(rng.standard_normal((5, 5)), device)
    fn = lambda h: ag.dropout(h @ w, 0.5).tanh()  # noqa: E731 - default random stream
    ignis.random.seed(11)
    plain = grads_of(lambda: fn(x).sum(), [x, w])
    ignis.random.seed(11)
    ck = grads_of(lambda: checkpoint(fn, x).sum(), [x, w])
    assert_same(plain, ck)
    # The recomputation does not consume the stream: the next draw is unaffected.
    ignis.random.seed(11)
    fn(x)
    expected_next = ignis.random.rand(3, device=device).to_host()
    ignis.random.seed(11)
    checkpoint(fn, x).sum().backward()
    np.testing.assert_array_equal(ignis.random.rand(3, device=device).to_host(), expected_next)


def test_retain_graph_recomputes_again(device: str) -> None:
    x = leaf(np.array([0.3, -0.7]), device)
    y = checkpoint(lambda a: (a * a).exp(), x).sum()
    y.backward(retain_graph=True)
    y.backward()
    np.testing.assert_allclose(
        x.grad.to_host(), 2 * 2 * np.array([0.3, -0.7]) * np.exp([0.09, 0.49])
    )


def test_identity_and_gradient_checkpoint_alias(device: str) -> None:
    x = leaf(np.array([1.0, 2.0]), device)
    out = Tape.gradient_checkpoint([x], lambda a: a)
    assert out is not x and x.is_leaf and x.grad_fn is None
    (out * 3.0).sum().backward()
    np.testing.assert_allclose(x.grad.to_host(), [3.0, 3.0])


def test_no_grad_and_no_requires_grad_give_plain_results(device: str) -> None:
    x = leaf(np.array([1.0, 2.0]), device)
    with no_grad():
        assert not checkpoint(lambda a: a * 2.0, x).requires_grad
    c = leaf(np.array([1.0, 2.0]), device, grad=False)
    assert not checkpoint(lambda a: a * 2.0, c).requires_grad


def test_bad_functions(device: str) -> None:
    x = leaf(np.array([1.0, 2.0]), device)
    with pytest.raises(TypeError, match="one Tensor"):
        checkpoint(lambda a: (a, a), x)
    calls = []

    def changing(a: Tensor) -> Tensor:
        calls.append(1)
        return a * 2.0 if len(calls) == 1 else a[:1] * 2.0

    y = checkpoint(changing, x).sum()
    with pytest.raises(ignis.ShapeError, match="deterministic"):
        y.backward()


def test_checkpoint_gradcheck(device: str, rng: np.random.Generator) -> None:
    w = leaf(rng.standard_normal((3, 3)), device)
    x = leaf(rng.standard_normal((2, 3)), device)
    assert ag.gradcheck(
        lambda a, b: checkpoint(lambda h: checkpoint(lambda g: (g @ b).tanh(), h) @ b, a), [x, w]
    )


@pytest.mark.gpu
def test_checkpoint_lowers_peak_memory_on_gpu(rng: np.random.Generator) -> None:
    device = "cuda:0"
    width, depth = 1024, 16
    ws = [
        Tensor.from_host(
            rng.standard_normal((width, width)) / np.sqrt(width),
            dtype="float32",
            device=device,
            requires_grad=True,
        )
        for _ in range(depth)
    ]
    x = Tensor.from_host(rng.standard_normal((2048, width)), dtype="float32", device=device)

    def block(h: Tensor, w: Tensor) -> Tensor:
        # keeps 3 activations of 8 MiB (gelu's input, tanh's and sigmoid's outputs) for backward
        return (h @ w).gelu().tanh().sigmoid() + h

    def peak(use_checkpoint: bool) -> tuple[int, list[np.ndarray]]:
        for w in ws:
            w.zero_grad()
        ignis.synchronize()
        ignis.reset_peak_memory_stats()
        start = ignis.memory_stats()["current_bytes"]
        h = x
        for w in ws:
            h = checkpoint(block, h, w) if use_checkpoint else block(h, w)
        h.mean().backward()
        del h
        ignis.synchronize()
        used = ignis.memory_stats()["peak_bytes"] - start
        return used, [w.grad.to_host() for w in ws]

    plain_peak, plain_grads = peak(False)
    ck_peak, ck_grads = peak(True)
    for a, b in zip(plain_grads, ck_grads, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    # 16 blocks keep 3 x 8 MiB each without checkpointing; with it only their 8 MiB inputs
    # plus one block's recomputation during backward.
    assert ck_peak < 0.6 * plain_peak, (ck_peak, plain_peak)
