"""ignis_autograd.optim: SGD, Adam, AdamW, clip_grad_norm_ and the schedules against torch.optim
(CPU torch) on random parameters and gradients, on every device."""

from __future__ import annotations

import json
import math

import ml_dtypes
import numpy as np
import pytest
from ignis_autograd.optim import SGD, Adam, AdamW, LambdaLR, StepLR, WarmupCosine, clip_grad_norm_

import ignis
from ignis import DTypeError
from ignis_autograd import Tensor, optim

torch = pytest.importorskip("torch")

SHAPES = [(1,), (31,), (33, 5), (1000,)]
TOL = {"float32": dict(rtol=3e-5, atol=2e-6), "float64": dict(rtol=1e-10, atol=1e-12)}


def _pair(device, dtype="float32", shapes=SHAPES, seed=0):
    rng = np.random.default_rng(seed)
    host = [rng.standard_normal(s).astype(dtype) for s in shapes]
    ours = [Tensor(ignis.from_host(h, device=device), requires_grad=True) for h in host]
    theirs = [torch.tensor(h, requires_grad=True) for h in host]
    return ours, theirs, rng


def _set_grads(ours, theirs, rng, dtype="float32", skip=()):
    for i, (o, t) in enumerate(zip(ours, theirs, strict=True)):
        if i in skip:
            o.grad, t.grad = None, None
            continue
        g = rng.standard_normal(o.shape).astype(dtype)
        o.grad = ignis.from_host(g, device=o.device)
        t.grad = torch.tensor(g)


def _close(ours, theirs, dtype="float32"):
    for o, t in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(o.data.to_host(), t.detach().numpy(), **TOL[dtype])


CASES = [
    (SGD, dict(lr=0.1)),
    (SGD, dict(lr=0.1, weight_decay=0.05)),
    (SGD, dict(lr=0.05, momentum=0.9)),
    (SGD, dict(lr=0.05, momentum=0.9, dampening=0.5, weight_decay=0.01)),
    (SGD, dict(lr=0.05, momentum=0.7, nesterov=True)),
    (Adam, dict(lr=1e-2)),
    (Adam, dict(lr=1e-2, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1)),
    (Adam, dict(lr=1e-2, amsgrad=True)),
    (AdamW, dict(lr=1e-2)),
    (AdamW, dict(lr=1e-2, weight_decay=0.3, amsgrad=True)),
]
IDS = ["sgd", "sgd-wd", "momentum", "dampening", "nesterov", "adam", "adam-options",
       "amsgrad", "adamw", "adamw-amsgrad"]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("cls,kwargs", CASES, ids=IDS)
def test_matches_torch_over_several_steps(device, dtype, cls, kwargs):
    ours, theirs, rng = _pair(device, dtype)
    opt = cls(ours, **kwargs)
    topt = getattr(torch.optim, cls.__name__)(theirs, **kwargs)
    for step in range(5):
        # a parameter without a gradient is skipped, like torch (its state starts later)
        _set_grads(ours, theirs, rng, dtype, skip=(1,) if step < 2 else ())
        opt.step()
        topt.step()
    _close(ours, theirs, dtype)
    tstate = topt.state[theirs[0]]
    for key in ("exp_avg", "exp_avg_sq", "momentum_buffer"):
        if key in tstate and tstate[key] is not None:
            np.testing.assert_allclose(opt.state_of(ours[0])[key].to_host(),
                                       tstate[key].numpy(), **TOL[dtype])
    assert float(opt.state_of(ours[1])["step"].item()) == 3.0


def test_param_groups_lr_setter_and_schedules_follow_torch(device):
    ours, theirs, rng = _pair(device)
    opt = Adam([{"params": ours[:2]}, {"params": ours[2:], "lr": 1e-3, "weight_decay": 0.1}],
               lr=1e-2)
    topt = torch.optim.Adam([{"params": theirs[:2]},
                             {"params": theirs[2:], "lr": 1e-3, "weight_decay": 0.1}], lr=1e-2)
    sched = LambdaLR(opt, lambda s: 0.9**s)
    tsched = torch.optim.lr_scheduler.LambdaLR(topt, lambda s: 0.9**s)
    for _ in range(4):
        _set_grads(ours, theirs, rng)
        opt.step()
        topt.step()
        sched.step()
        tsched.step()
        assert sched.get_last_lr() == pytest.approx(tsched.get_last_lr(), rel=1e-12)
    opt.lr = 5e-3
    for g in topt.param_groups:
        g["lr"] = 5e-3
    _set_grads(ours, theirs, rng)
    opt.step()
    topt.step()
    _close(ours, theirs)
    assert opt.lr == 5e-3 and [g["lr"] for g in opt.param_groups] == [5e-3, 5e-3]


def test_bf16_params_with_master_weights_track_a_float32_run(device):
    rng = np.random.default_rng(1)
    host = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    ours = [Tensor(ignis.from_host(h, device=device).astype("bfloat16"), requires_grad=True)
            for h in host]
    # torch runs in float32 from the same (rounded) start
    theirs = [torch.tensor(o.data.astype("float32").to_host(), requires_grad=True) for o in ours]
    opt = AdamW(ours, lr=1e-3, weight_decay=0.1, master_weights=True)
    topt = torch.optim.AdamW(theirs, lr=1e-3, weight_decay=0.1)
    for _ in range(10):
        for o, t in zip(ours, theirs, strict=True):
            g = rng.standard_normal(o.shape).astype(np.float32)
            o.grad = ignis.from_host(g, device=device)  # float32, as autograd accumulates
            t.grad = torch.tensor(g)
        opt.step()
        topt.step()
    for o, t in zip(ours, theirs, strict=True):
        assert o.dtype is ignis.bfloat16
        want = t.detach().numpy()
        np.testing.assert_allclose(opt.state_of(o)["master"].to_host(), want, rtol=1e-5,
                                   atol=1e-6)
        np.testing.assert_allclose(o.data.astype("float32").to_host(), want, rtol=2**-8,
                                   atol=1e-6)
    # Without masters the 1e-3 steps would mostly vanish in bfloat16 rounding.
    lost = Tensor(ignis.from_host(host[3], device=device).astype("bfloat16"), requires_grad=True)
    start = lost.data.astype("float32").to_host()
    plain = SGD([lost], lr=1e-4, master_weights=False)
    lost.grad = ignis.ones(lost.shape, device=device)
    plain.step()
    unchanged = np.mean(lost.data.astype("float32").to_host() == start)
    assert unchanged > 0.5


def test_training_through_autograd_gives_torch_results(device):
    rng = np.random.default_rng(2)
    w0 = rng.standard_normal((5, 3)).astype(np.float32)
    x0 = rng.standard_normal((8, 5)).astype(np.float32)
    w = Tensor(ignis.from_host(w0, device=device), requires_grad=True)
    x = Tensor(ignis.from_host(x0, device=device))
    tw = torch.tensor(w0, requires_grad=True)
    tx = torch.tensor(x0)
    opt = SGD([w], lr=0.05, momentum=0.9)
    topt = torch.optim.SGD([tw], lr=0.05, momentum=0.9)
    for _ in range(4):
        opt.zero_grad()
        topt.zero_grad()
        ((x @ w) * (x @ w)).mean().backward()
        ((tx @ tw) ** 2).mean().backward()
        opt.step()
        topt.step()
    np.testing.assert_allclose(w.data.to_host(), tw.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_zero_grad_in_place_keeps_the_buffer(device):
    ours, _, _ = _pair(device)
    for o in ours:
        o.grad = ignis.ones(o.shape, device=device)
    buffers = [o.grad for o in ours]
    opt = SGD(ours, lr=0.1)
    opt.zero_grad()
    for o, b in zip(ours, buffers, strict=True):
        assert o.grad is b and not o.grad.to_host().any()
    opt.zero_grad(set_to_none=True)
    assert all(o.grad is None for o in ours)
    opt.step()  # no gradients: nothing happens


@pytest.mark.parametrize("owner", ["optimizer", "module"])
def test_zero_grad_overwrites_nan_and_reaches_every_kind_of_gradient(device, owner):
    # Contiguous float gradients are zeroed together, others one by one: all end at +0, NaN
    # and Inf included (zeroing is a store, not a multiply by 0), and each keeps its buffer.
    from ignis_autograd import nn

    rng = np.random.default_rng(3)
    model = nn.Sequential(nn.Linear(3, 4, device=device), nn.Linear(4, 2, device=device))
    params = list(model.parameters())
    grads = []
    for i, p in enumerate(params):
        host = rng.standard_normal(p.shape).astype(np.float32)
        host.flat[0] = [np.nan, np.inf, -np.inf, 5.0][i]
        if i == 1:  # a strided view as the gradient
            wide = ignis.asarray(np.repeat(host[:, None], 2, axis=1), device=device)
            grads.append(wide[:, 0])
        else:
            grads.append(ignis.asarray(host, device=device))
        p.grad = grads[-1]
    params[3].grad = grads[3] = grads[3].astype("float64")  # a second dtype
    if owner == "optimizer":
        SGD(params, lr=0.1).zero_grad()
    else:
        model.zero_grad()
    for p, g in zip(params, grads, strict=True):
        assert p.grad is g
        assert not np.asarray(g.to_host()).view(np.uint8).any()  # +0 bit patterns


# --- clipping -------------------------------------------------------------------------------------


@pytest.mark.parametrize("max_norm", [0.5, 1e3])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_clip_grad_norm_matches_torch(device, max_norm, dtype):
    ours, theirs, rng = _pair(device, dtype)
    _set_grads(ours, theirs, rng, dtype, skip=(2,))
    total = clip_grad_norm_(ours, max_norm)
    ttotal = torch.nn.utils.clip_grad_norm_(theirs, max_norm)
    # the norm and the coefficient at the gradients' precision, as PyTorch's
    assert isinstance(total, ignis.NvArray) and total.shape == () and total.dtype == dtype
    rtol = 1e-6 if dtype == "float32" else 1e-13
    assert float(total.item()) == pytest.approx(float(ttotal), rel=rtol)
    for i, (o, t) in enumerate(zip(ours, theirs, strict=True)):
        if i == 2:
            assert o.grad is None
            continue
        np.testing.assert_allclose(o.grad.to_host(), t.grad.numpy(), rtol=rtol, atol=1e-9 * rtol)


def test_clip_grad_norm_of_a_single_tensor_and_of_no_gradients(device):
    ours, theirs, rng = _pair(device, shapes=[(7, 3)])
    assert float(clip_grad_norm_(ours[0], 1.0).item()) == 0.0  # no grad yet
    _set_grads(ours, theirs, rng)
    total = clip_grad_norm_(ours[0], 1.0)
    ttotal = torch.nn.utils.clip_grad_norm_(theirs[0], 1.0)
    assert float(total.item()) == pytest.approx(float(ttotal), rel=1e-6)
    np.testing.assert_allclose(ours[0].grad.to_host(), theirs[0].grad.numpy(), rtol=1e-6)


# --- schedules ------------------------------------------------------------------------------------


def _lrs(sched, opt, n):
    out = [opt.lr]
    for _ in range(n):
        sched.step()
        out.append(opt.lr)
    return out


def test_warmup_cosine_closed_form_and_torch_lambda(device):
    ours, theirs, _ = _pair(device, shapes=[(3,)])
    base, warm, total, floor = 0.1, 5, 20, 0.01
    opt = SGD(ours, lr=base)
    got = _lrs(WarmupCosine(opt, warm, total, min_lr=floor), opt, 25)

    def closed(s):
        if s < warm:
            return base * (s + 1) / warm
        if s >= total:
            return floor
        return floor + (base - floor) * 0.5 * (1 + math.cos(math.pi * (s - warm) / (total - warm)))

    assert got == pytest.approx([closed(s) for s in range(26)], rel=1e-12)
    assert got[warm - 1] == pytest.approx(base) and got[-1] == floor
    # With min_lr = 0 it is torch's LambdaLR of the same factor.
    opt2 = SGD(ours, lr=base)
    topt = torch.optim.SGD(theirs, lr=base)
    floor = 0.0
    tsched = torch.optim.lr_scheduler.LambdaLR(topt, lambda s: closed(s) / base)
    got2 = _lrs(WarmupCosine(opt2, warm, total), opt2, 10)
    want2 = [topt.param_groups[0]["lr"]]
    for _ in range(10):
        topt.step()
        tsched.step()
        want2.append(topt.param_groups[0]["lr"])
    assert got2 == pytest.approx(want2, rel=1e-12)


def test_step_lr_matches_torch(device):
    ours, theirs, _ = _pair(device, shapes=[(3,)])
    opt = SGD(ours, lr=1.0)
    topt = torch.optim.SGD(theirs, lr=1.0)
    tsched = torch.optim.lr_scheduler.StepLR(topt, step_size=3, gamma=0.5)
    got = _lrs(StepLR(opt, step_size=3, gamma=0.5), opt, 10)
    want = [topt.param_groups[0]["lr"]]
    for _ in range(10):
        topt.step()
        tsched.step()
        want.append(topt.param_groups[0]["lr"])
    assert got == pytest.approx(want, rel=1e-12)


def test_the_schedule_reaches_the_device_scalar(device):
    ours, _, _ = _pair(device, shapes=[(4,)])
    opt = SGD(ours, lr=1.0)
    sched = StepLR(opt, step_size=1, gamma=0.5)
    sched.step()
    assert float(opt.param_groups[0].lr_array.item()) == 0.5
    start = ours[0].data.to_host()
    ours[0].grad = ignis.ones((4,), device=device)
    opt.step()
    np.testing.assert_allclose(ours[0].data.to_host(), start - 0.5)


def test_scheduler_state_dict_round_trip_is_json(device):
    ours, _, _ = _pair(device, shapes=[(3,)])
    opt = SGD(ours, lr=0.1)
    sched = WarmupCosine(opt, 3, 10)
    for _ in range(4):
        sched.step()
    state = json.loads(json.dumps(sched.state_dict()))
    opt2 = SGD(ours, lr=0.1)
    sched2 = WarmupCosine(opt2, 3, 10)
    sched2.load_state_dict(state)
    assert _lrs(sched2, opt2, 5)[1:] == _lrs(sched, opt, 5)[1:]


# --- state dicts ----------------------------------------------------------------------------------


@pytest.mark.parametrize("cls,kwargs", [(AdamW, dict(lr=1e-2, amsgrad=True)),
                                        (SGD, dict(lr=0.05, momentum=0.9))], ids=["adamw", "sgd"])
@pytest.mark.parametrize("as_numpy", [False, True])
def test_state_dict_round_trip_continues_identically(device, cls, kwargs, as_numpy):
    ours, _, rng = _pair(device, shapes=[(31,), (6, 7)], seed=3)
    opt = cls(ours, **kwargs)
    grads = [[rng.standard_normal(o.shape).astype(np.float32) for o in ours] for _ in range(6)]

    def run(params, o, gs):
        for g_list in gs:
            for p, g in zip(params, g_list, strict=True):
                p.grad = ignis.from_host(g, device=device)
            o.step()

    run(ours, opt, grads[:3])
    sd = opt.state_dict()
    saved = [o.data.clone() for o in ours]
    if as_numpy:  # what a checkpoint file gives back: host arrays, string keys, lists
        sd = {"state": {str(k): {n: v.to_host() for n, v in st.items()}
                        for k, st in sd["state"].items()},
              "param_groups": json.loads(json.dumps(sd["param_groups"]))}
    run(ours, opt, grads[3:])
    clones = [Tensor(s, requires_grad=True) for s in saved]
    opt2 = cls(clones, lr=123.0)
    opt2.load_state_dict(sd)
    assert opt2.lr == kwargs["lr"]
    run(clones, opt2, grads[3:])
    for a, b in zip(ours, clones, strict=True):
        np.testing.assert_array_equal(a.data.to_host(), b.data.to_host())


def test_load_state_dict_checks_the_groups(device):
    ours, _, _ = _pair(device)
    opt = Adam(ours)
    with pytest.raises(ValueError, match=r"expected 1 parameter groups, got 2"):
        opt.load_state_dict({"state": {}, "param_groups": [{"params": []}, {"params": []}]})
    with pytest.raises(ValueError, match=r"group 0 has 4 parameters, the saved one 1"):
        opt.load_state_dict({"state": {}, "param_groups": [{"params": [0]}]})


# --- bad input ------------------------------------------------------------------------------------


def test_bad_arguments_raise_clearly(device):
    ours, _, _ = _pair(device, shapes=[(3,)])
    with pytest.raises(TypeError, match=r"SGD: params\[1\] must be a Tensor, got ndarray"):
        SGD([ours[0], np.zeros(3)])
    with pytest.raises(TypeError, match=r"Adam: params must be an iterable"):
        Adam(ours[0].data)
    with pytest.raises(ValueError, match=r"AdamW: got an empty parameter list"):
        AdamW([])
    with pytest.raises(ValueError, match=r"SGD: lr must be a finite number >= 0, got -0.1"):
        SGD(ours, lr=-0.1)
    with pytest.raises(ValueError, match=r"Adam: betas\[0\] must be in \[0, 1\), got 1.0"):
        Adam(ours, betas=(1.0, 0.999))
    with pytest.raises(ValueError, match=r"Adam: betas\[1\] must be in \[0, 1\), got -0.5"):
        Adam(ours, betas=(0.9, -0.5))
    with pytest.raises(ValueError, match=r"Adam: eps must be a number >= 0"):
        Adam(ours, eps=-1e-8)
    with pytest.raises(ValueError, match=r"SGD: nesterov needs momentum > 0"):
        SGD(ours, nesterov=True)
    with pytest.raises(ValueError, match=r"SGD: weight_decay must be a number >= 0"):
        SGD(ours, weight_decay=-1)
    with pytest.raises(ValueError, match=r"appears more than once"):
        SGD([ours[0], ours[0]])
    with pytest.raises(ValueError, match=r"unknown hyperparameter\(s\) \['momentum'\]"):
        Adam([{"params": ours, "momentum": 0.9}])
    with pytest.raises(ValueError, match=r"is not a leaf tensor"):
        SGD([ours[0] * 2])
    with pytest.raises(DTypeError, match=r"params\[0\] has dtype int32"):
        SGD([Tensor(ignis.zeros((3,), dtype="int32", device=device))])
    opt = SGD(ours, lr=0.1)
    with pytest.raises(ValueError, match=r"SGD: lr must be a finite number >= 0, got -1"):
        opt.lr = -1
    with pytest.raises(ValueError, match=r"SGD: lr must be a finite number >= 0, got nan"):
        opt.param_groups[0]["lr"] = float("nan")
    assert opt.lr == 0.1
    with pytest.raises(ValueError, match=r"clip_grad_norm_: only norm_type=2"):
        clip_grad_norm_(ours, 1.0, norm_type=1)
    with pytest.raises(TypeError, match=r"clip_grad_norm_: params\[0\] must be a Tensor"):
        clip_grad_norm_([1.0], 1.0)
    with pytest.raises(ValueError, match=r"WarmupCosine: total_steps \(5\) must exceed"):
        WarmupCosine(opt, 5, 5)
    with pytest.raises(ValueError, match=r"StepLR: step_size must be a positive int"):
        StepLR(opt, 0)
    with pytest.raises(TypeError, match=r"LambdaLR: lr_lambda must be callable"):
        LambdaLR(opt, 0.5)


def test_public_names():
    for name in ("SGD", "Adam", "AdamW", "clip_grad_norm_", "WarmupCosine", "LambdaLR", "StepLR"):
        assert name in optim.__all__
    assert optim.lr_scheduler.WarmupCosine is WarmupCosine
    _ = ml_dtypes  # bfloat16 host arrays come from ml_dtypes
