"""ignis_autograd.amp.GradScaler: scaling, unscaling, skip-on-overflow on the device, growth and
back-off of the scale (compared with torch's GradScaler where CPU torch has one), state dicts."""

from __future__ import annotations

import numpy as np
import pytest
from ignis_autograd.amp import GradScaler
from ignis_autograd.optim import SGD, Adam, clip_grad_norm_

import ignis
from ignis_autograd import Tensor

torch = pytest.importorskip("torch")


def _model(device, seed=0, dtype="float32"):
    rng = np.random.default_rng(seed)
    w0 = rng.standard_normal((6, 4)).astype(np.float32)
    x0 = rng.standard_normal((5, 6)).astype(np.float32)
    w = Tensor(ignis.from_host(w0, device=device).astype(dtype), requires_grad=True)
    x = Tensor(ignis.from_host(x0, device=device).astype(dtype))
    return w, x, w0, x0


def _loss(w, x):
    y = x @ w
    return (y * y).mean()


def test_scale_multiplies_the_loss_and_so_the_gradients(device):
    w, x, *_ = _model(device)
    _loss(w, x).backward()
    plain = w.grad.to_host()
    w.grad = None
    scaler = GradScaler(init_scale=1024.0)
    scaled = scaler.scale(_loss(w, x))
    assert scaled.item() == pytest.approx(_loss(w, x).item() * 1024.0, rel=1e-6)
    scaled.backward()
    np.testing.assert_allclose(w.grad.to_host(), plain * 1024.0, rtol=1e-5)
    scaler.unscale_(Adam([w]))
    np.testing.assert_allclose(w.grad.to_host(), plain, rtol=1e-5)
    assert float(scaler.found_inf.item()) == 0.0


def _poison(w, value=np.inf):
    g = w.grad.to_host()
    g.flat[3] = value
    w.grad.copy_(g)


@pytest.mark.parametrize("bad", [np.inf, np.nan])
def test_an_overflow_skips_the_step_on_the_device_and_backs_off(device, bad):
    w, x, *_ = _model(device)
    opt = Adam([w], lr=0.1)
    scaler = GradScaler(init_scale=256.0, growth_interval=100)
    scaler.scale(_loss(w, x)).backward()
    scaler.step(opt)
    scaler.update()
    after_one = w.data.to_host()
    state = {k: v.to_host() for k, v in opt.state_of(w).items()}
    assert scaler.get_scale() == 256.0 and state["step"] == 1.0
    opt.zero_grad()
    scaler.scale(_loss(w, x)).backward()
    _poison(w, bad)
    scaler.step(opt)
    scaler.update()
    np.testing.assert_array_equal(w.data.to_host(), after_one)  # skipped
    for k, v in opt.state_of(w).items():
        np.testing.assert_array_equal(v.to_host(), state[k])  # moments and step too
    assert scaler.get_scale() == 128.0
    opt.zero_grad()
    scaler.scale(_loss(w, x)).backward()
    scaler.step(opt)
    scaler.update()
    assert not np.array_equal(w.data.to_host(), after_one)
    assert float(opt.state_of(w)["step"].item()) == 2.0


def test_scale_sequence_matches_torch_grad_scaler(device):
    if not hasattr(torch.amp, "GradScaler"):
        pytest.skip("this torch has no torch.amp.GradScaler")
    try:
        tscaler = torch.amp.GradScaler("cpu", init_scale=64.0, growth_factor=2.0,
                                       backoff_factor=0.5, growth_interval=2)
    except Exception as exc:  # pragma: no cover - older torch without CPU scaling
        pytest.skip(f"torch GradScaler on the CPU is not available: {exc}")
    w, x, w0, x0 = _model(device)
    tw = torch.tensor(w0, requires_grad=True)
    tx = torch.tensor(x0)
    opt = SGD([w], lr=0.01)
    topt = torch.optim.SGD([tw], lr=0.01)
    scaler = GradScaler(init_scale=64.0, growth_factor=2.0, backoff_factor=0.5, growth_interval=2)
    pattern = [0, 0, 0, 1, 0, 1, 1, 0, 0, 0]
    ours, theirs = [], []
    for bad in pattern:
        opt.zero_grad()
        topt.zero_grad()
        scaler.scale(_loss(w, x)).backward()
        tscaler.scale(((tx @ tw) ** 2).mean()).backward()
        if bad:
            _poison(w)
            with torch.no_grad():
                tw.grad[0, 3] = float("inf")
        scaler.step(opt)
        tscaler.step(topt)
        scaler.update()
        tscaler.update()
        ours.append(scaler.get_scale())
        theirs.append(tscaler.get_scale())
    assert ours == theirs
    np.testing.assert_allclose(w.data.to_host(), tw.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_growth_after_clean_steps_and_unscale_then_clip(device):
    w, x, *_ = _model(device)
    opt = SGD([w], lr=0.01, momentum=0.9)
    scaler = GradScaler(init_scale=8.0, growth_factor=4.0, growth_interval=3)
    scales = []
    for _ in range(7):
        opt.zero_grad()
        scaler.scale(_loss(w, x)).backward()
        scaler.unscale_(opt)
        norm = clip_grad_norm_([w], 0.5)  # clipping sees the true gradients
        assert float(norm.item()) < 1e3
        with pytest.raises(RuntimeError, match="already called for this optimizer"):
            scaler.unscale_(opt)
        scaler.step(opt)  # does not unscale a second time
        scaler.update()
        scales.append(scaler.get_scale())
    assert scales == [8.0, 8.0, 32.0, 32.0, 32.0, 128.0, 128.0]


def test_float16_parameters_with_master_weights_train(device):
    w, x, w0, x0 = _model(device, dtype="float16")
    opt = Adam([w], lr=1e-3)
    scaler = GradScaler(init_scale=1024.0)  # float16 gradients of about 1e2 stay finite
    tw = torch.tensor(w.data.astype("float32").to_host(), requires_grad=True)
    topt = torch.optim.Adam([tw], lr=1e-3)
    tx = torch.tensor(x.data.astype("float32").to_host())
    for _ in range(5):
        opt.zero_grad()
        topt.zero_grad()
        scaler.scale(_loss(w, x)).backward()
        ((tx @ tw) ** 2).mean().backward()
        scaler.step(opt)
        topt.step()
        scaler.update()
    assert scaler.get_scale() == 1024.0  # no step was skipped
    master = opt.state_of(w)["master"].to_host()
    np.testing.assert_allclose(master, tw.detach().numpy(), rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(w.data.astype("float32").to_host(), master, rtol=2**-10, atol=1e-4)


def test_state_dict_round_trip_and_disabled_scaler(device):
    w, x, *_ = _model(device)
    scaler = GradScaler(init_scale=32.0, growth_interval=5)
    opt = SGD([w], lr=0.01)
    for _ in range(3):
        opt.zero_grad()
        scaler.scale(_loss(w, x)).backward()
        scaler.step(opt)
        scaler.update()
    sd = scaler.state_dict()
    assert sd["scale"] == 32.0 and sd["_growth_tracker"] == 3 and sd["growth_interval"] == 5
    other = GradScaler()
    other.load_state_dict(sd)
    assert other.get_scale() == 32.0
    for _ in range(2):
        opt.zero_grad()
        other.scale(_loss(w, x)).backward()
        other.step(opt)
        other.update()
    assert other.get_scale() == 64.0  # the tracker came along: 3 + 2 clean steps
    off = GradScaler(enabled=False)
    loss = _loss(w, x)
    assert off.scale(loss) is loss and off.get_scale() == 1.0 and off.state_dict() == {}


def test_bad_arguments_raise_clearly():
    with pytest.raises(ValueError, match=r"GradScaler: init_scale must be > 0, got 0"):
        GradScaler(init_scale=0)
    with pytest.raises(ValueError, match=r"GradScaler: growth_factor must be > 1"):
        GradScaler(growth_factor=1.0)
    with pytest.raises(ValueError, match=r"GradScaler: backoff_factor must be in \(0, 1\)"):
        GradScaler(backoff_factor=1.5)
    with pytest.raises(ValueError, match=r"GradScaler: growth_interval must be a positive int"):
        GradScaler(growth_interval=0)
    with pytest.raises(TypeError, match=r"GradScaler.scale: expected a Tensor, got float"):
        GradScaler().scale(1.0)
    w, _, *_ = _model("cpu")
    with pytest.raises(RuntimeError, match=r"scale\(\) has not been called yet"):
        GradScaler().unscale_(SGD([w]))
