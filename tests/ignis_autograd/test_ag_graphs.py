"""capture_step: a whole training step recorded into a CUDA graph equals the eager step."""

from __future__ import annotations

import numpy as np
import pytest

import ignis
import ignis_autograd as ag
from ignis_autograd import AutogradError, Tensor, capture_step

LR = 0.05


def _params(device: str, seed: int = 3) -> list[Tensor]:
    rng = np.random.default_rng(seed)
    shapes = [(64, 32), (32,), (32, 10), (10,)]
    return [
        Tensor.from_host(
            rng.standard_normal(s).astype(np.float32) * 0.3, device=device, requires_grad=True
        )
        for s in shapes
    ]


def _batches(device: str, n: int) -> list[tuple[ignis.NvArray, ignis.NvArray]]:
    rng = np.random.default_rng(11)
    return [
        (
            ignis.asarray(rng.standard_normal((128, 64)).astype(np.float32), device=device),
            ignis.asarray(rng.standard_normal((128, 10)).astype(np.float32), device=device),
        )
        for _ in range(n)
    ]


def _make_step(params: list[Tensor]):
    w1, b1, w2, b2 = params

    def train_step(x, t):
        for p in params:
            p.zero_grad()
        h = (ag.Tensor(x) @ w1).add_bias(b1).tanh()
        loss = (((h @ w2).add_bias(b2) - t) ** 2).mean()
        loss.backward()
        for p in params:
            p.data -= LR * p.grad  # in place: the captured kernels keep their addresses
        return loss.detach()

    return train_step


def test_capture_step_refuses_the_cpu_and_bad_arguments():
    x = ignis.zeros((2, 2), device="cpu")
    with pytest.raises(ValueError, match="capture_step: CUDA graphs need a CUDA device"):
        capture_step(lambda a: a, x)
    with pytest.raises(TypeError, match="capture_step: fn must be callable"):
        capture_step(3, x)
    with pytest.raises(ValueError, match="warmup must be >= 1, got 0: a first eager step"):
        capture_step(lambda a: a, x, warmup=0)
    with pytest.raises(ValueError, match="warmup must be >= 1, got -2"):
        capture_step(lambda a: a, x, warmup=-2)
    with pytest.raises(TypeError, match="capture_step: warmup must be an int .* got float 1.5"):
        capture_step(lambda a: a, x, warmup=1.5)
    with pytest.raises(TypeError, match="warmup must be an int .* got bool True"):
        capture_step(lambda a: a, x, warmup=True)
    with pytest.raises(TypeError, match="input 0 must be a Tensor or an NvArray"):
        capture_step(lambda a: a, [1.0, 2.0])


@pytest.mark.gpu
def test_captured_training_steps_equal_eager_steps():
    device = "cuda:0"
    batches = _batches(device, 6)
    eager_params, graph_params = _params(device), _params(device)
    eager = _make_step(eager_params)
    # The warm-up runs are real steps too: run them eagerly on the reference first.
    for x, t in batches[:2]:
        eager(x, t)
    eager_losses = [float(eager(x, t).item()) for x, t in batches[2:]]

    step = capture_step(_make_step(graph_params), *batches[0], warmup=1)
    step(*batches[1])  # the warm-up used batch 0; replay batch 1 to stay in lockstep
    graph_losses = []
    for x, t in batches[2:]:
        out = step(x, t)
        graph_losses.append(float(out.item()))
    assert step.num_nodes > 10
    np.testing.assert_allclose(graph_losses, eager_losses, rtol=1e-5, atol=1e-7)
    for pe, pg in zip(eager_params, graph_params, strict=False):
        np.testing.assert_allclose(pg.to_host(), pe.to_host(), rtol=1e-5, atol=1e-6)


@pytest.mark.gpu
def test_captured_step_output_is_the_same_object_rewritten():
    params = _params("cuda:0")
    x, t = _batches("cuda:0", 1)[0]
    step = capture_step(_make_step(params), x, t)
    first = step(x, t)
    v1 = float(first.item())
    second = step(x, t)
    assert second is first and float(second.item()) < v1  # it keeps learning the same batch


@pytest.mark.gpu
def test_a_host_synchronization_inside_the_step_is_a_clear_error():
    x = ignis.random.randn((256,), device="cuda:0")

    def syncing(a):
        return float((a * 2.0).sum().item())  # .item() waits for the host: not capturable

    with pytest.raises(AutogradError, match="host synchronization"):
        capture_step(syncing, x, warmup=1)
    assert float(ignis.ones((4,), device="cuda:0").sum().item()) == 4.0  # still usable


@pytest.mark.gpu
def test_replay_with_a_wrong_shape_is_refused():
    params = _params("cuda:0")
    x, t = _batches("cuda:0", 1)[0]
    step = capture_step(_make_step(params), x, t, warmup=1)
    with pytest.raises(ignis.ShapeError, match="captured with shape"):
        step(x[:64], t[:64])
    with pytest.raises(TypeError, match="expected 2 input"):
        step(x)


def _adamw_step(params: list[Tensor], calls: list[int], zero_first: bool = True):
    from ignis_autograd.optim import AdamW

    opt = AdamW(params, lr=1e-2, weight_decay=0.1)
    w1, b1, w2, b2 = params

    def train_step(x, t):
        calls.append(1)
        if zero_first:
            opt.zero_grad()  # in place; on the first run there is nothing to zero yet
        h = (ag.Tensor(x) @ w1).add_bias(b1).tanh()
        loss = (((h @ w2).add_bias(b2) - t) ** 2).mean()
        loss.backward()
        opt.step()
        if not zero_first:
            opt.zero_grad()  # the first run already zeroes: all one-time work in one run
        return loss.detach()

    return train_step, opt


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("warmup", "zero_first"),
    [(1, False), (2, True), (3, True), (3, False)],
)
def test_warmup_runs_are_exactly_warmup_real_steps(warmup, zero_first):
    # capture_step(..., warmup=k) leaves the model and the optimizer as k eager steps on the
    # example inputs do: the capture itself runs nothing. The first replay is step k + 1.
    device = "cuda:0"
    (x0, t0), (x1, t1) = _batches(device, 2)
    eager_params, graph_params = _params(device), _params(device)
    eager_calls, graph_calls = [], []
    eager, eager_opt = _adamw_step(eager_params, eager_calls, zero_first)
    fn, graph_opt = _adamw_step(graph_params, graph_calls, zero_first)
    eager_losses = [float(eager(x0, t0).item()) for _ in range(warmup)]

    step = capture_step(fn, x0, t0, warmup=warmup)
    assert step.warmup == warmup
    assert len(graph_calls) == warmup + 1  # k eager calls, then one recorded (not run)
    assert len(step.warmup_outputs) == warmup
    np.testing.assert_allclose(
        [float(v.item()) for v in step.warmup_outputs], eager_losses, rtol=1e-5, atol=1e-7
    )
    for pe, pg in zip(eager_params, graph_params, strict=True):
        np.testing.assert_allclose(pg.to_host(), pe.to_host(), rtol=1e-5, atol=1e-6)
        se, sg = eager_opt.state_of(pe), graph_opt.state_of(pg)
        assert float(sg["step"].to_host()) == float(se["step"].to_host()) == warmup
        for key in ("exp_avg", "exp_avg_sq"):
            np.testing.assert_allclose(
                sg[key].to_host(), se[key].to_host(), rtol=1e-5, atol=1e-7, err_msg=key
            )

    loss = step(x1, t1)  # one replay: step k + 1, on the new batch
    expected = float(eager(x1, t1).item())
    assert len(graph_calls) == warmup + 1  # a replay does not call fn
    np.testing.assert_allclose(float(loss.item()), expected, rtol=1e-5, atol=1e-7)
    for pe, pg in zip(eager_params, graph_params, strict=True):
        np.testing.assert_allclose(pg.to_host(), pe.to_host(), rtol=1e-5, atol=1e-6)
        assert float(graph_opt.state_of(pg)["step"].to_host()) == warmup + 1


# --- random numbers: each replay draws new ones, as eager steps do ----------------------------


def _dropout_step(params: list[Tensor], p: float = 0.2):
    from ignis_autograd.functional import dropout
    from ignis_autograd.optim import AdamW

    opt = AdamW(params, lr=1e-2, weight_decay=0.1)
    w1, b1, w2, b2 = params

    def train_step(x, t):
        opt.zero_grad()
        h = dropout((ag.Tensor(x) @ w1).add_bias(b1).tanh(), p)  # the default ignis.random
        loss = (((dropout(h, p) @ w2).add_bias(b2) - t) ** 2).mean()
        loss.backward()
        opt.step()
        return loss.detach()

    return train_step


def _bits(a: ignis.NvArray) -> np.ndarray:
    return a.to_host().view(np.uint32)


@pytest.mark.gpu
def test_captured_steps_with_dropout_equal_eager_steps_bit_for_bit():
    # Two eager warm-up steps (on the example batch), then 20 captured steps, against the same
    # 22 steps run eagerly from the same generator state: the same losses and parameters, bit
    # for bit, and the same final generator state.
    device = "cuda:0"
    batches = _batches(device, 21)
    batches = [batches[0], *batches]  # the warm-up trains on the example batch twice
    eager_params, graph_params = _params(device), _params(device)
    eager = _dropout_step(eager_params)
    ignis.random.set_state((1234, 5))
    eager_losses = [_bits(eager(x, t)) for x, t in batches]
    eager_state = ignis.random.get_state()

    ignis.random.set_state((1234, 5))
    step = capture_step(_dropout_step(graph_params), *batches[0], warmup=2)
    per_step = -(-128 * 32 // 4) * 2  # two dropouts of (128, 32): ceil(n / 4) blocks each
    assert ignis.random.get_state() == (1234, 5 + 2 * per_step)  # the capture drew nothing
    assert list(step.draws.blocks.values()) == [per_step]
    for out, ref in zip(step.warmup_outputs, eager_losses[:2], strict=True):
        np.testing.assert_array_equal(_bits(out), ref)
    graph_losses = [_bits(step(x, t)).copy() for x, t in batches[2:]]
    assert len(graph_losses) == 20
    assert ignis.random.get_state() == eager_state == (1234, 5 + 22 * per_step)
    np.testing.assert_array_equal(np.stack(graph_losses), np.stack(eager_losses[2:]))
    assert len({int(v[()]) for v in graph_losses}) > 1  # the masks (and losses) change
    for pe, pg in zip(eager_params, graph_params, strict=True):
        np.testing.assert_array_equal(_bits(pg.data), _bits(pe.data))


@pytest.mark.gpu
def test_captured_dropout_masks_follow_the_generator_state():
    # A step returning its masks: replay i draws what eager call i would; set_state between
    # calls takes effect at the next call; a generator given explicitly advances alone.
    device = "cuda:0"
    x = ignis.asarray(np.linspace(0.5, 1.5, 1000, dtype=np.float32), device=device)
    gen = ignis.random.Generator(77)

    def masks(a):
        _, m1 = ignis.nn.dropout(a, 0.5)  # the default generator
        _, m2 = ignis.nn.dropout(a, 0.1, generator=gen)
        return m1, m2

    ignis.random.set_state((9, 0))
    step = capture_step(masks, x, warmup=1)
    assert ignis.random.get_state() == (9, 250) and gen.get_state() == (77, 250)
    ref = ignis.random.Generator(9)
    ref.set_state((9, 250))
    ref_gen = ignis.random.Generator(77)
    ref_gen.set_state((77, 250))
    xc = x.to("cpu")
    for i in range(4):
        if i == 2:
            ignis.random.set_state((10, 3))
            ref.set_state((10, 3))
        m1, m2 = step(x)
        _, e1 = ignis.nn.dropout(xc, 0.5, generator=ref)
        _, e2 = ignis.nn.dropout(xc, 0.1, generator=ref_gen)
        np.testing.assert_array_equal(m1.to_host(), e1.to_host(), err_msg=f"call {i}")
        np.testing.assert_array_equal(m2.to_host(), e2.to_host(), err_msg=f"call {i}")
    assert ignis.random.get_state() == ref.get_state() == (10, 3 + 2 * 250)
    assert gen.get_state() == ref_gen.get_state() == (77, 250 + 4 * 250)
