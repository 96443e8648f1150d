"""An optimizer step is all or nothing: an error while any group is being prepared leaves every
parameter and every piece of optimizer state as it was (the GPU version, with out-of-memory
errors injected at each allocation of a training step, is tests/hardening/test_training_faults.py)."""

from __future__ import annotations

import ignis.nn
import numpy as np
import pytest
from ignis_autograd.optim import SGD, AdamW

import ignis
from ignis_autograd import Tensor


def _groups(device):
    rng = np.random.default_rng(5)
    ps = [Tensor(ignis.from_host(rng.standard_normal(s).astype(np.float32), device=device),
                 requires_grad=True) for s in [(7, 3), (3,), (5,)]]
    for p in ps:
        p.grad = ignis.from_host(rng.standard_normal(p.shape).astype(np.float32), device=device)
    return ps


def _host_state(opt):
    return {(i, k): v.to_host() for i, st in opt.state_dict()["state"].items()
            for k, v in st.items()}


@pytest.mark.parametrize("cls, fn", [(AdamW, "multi_tensor_adam_"), (SGD, "multi_tensor_sgd_")])
def test_a_failure_in_a_later_group_changes_nothing(device, monkeypatch, cls, fn):
    ps = _groups(device)
    kwargs = {"momentum": 0.9} if cls is SGD else {}
    opt = cls([{"params": ps[:2]}, {"params": ps[2:], "lr": 0.5}], lr=0.1, **kwargs)
    opt.step()  # a first, clean step: state exists from here on
    real = getattr(ignis.nn, fn)
    for failing_call in (1, 2):  # the first group's preparation, then the second's
        before = [p.data.to_host() for p in ps]
        state = _host_state(opt)
        calls = []

        def flaky(*args, _failing=failing_call, **kw):
            calls.append(1)
            if len(calls) == _failing:
                raise ignis.OutOfMemoryError(1 << 20, 0, 1 << 30, 0, "an injected failure")
            return real(*args, **kw)

        monkeypatch.setattr(ignis.nn, fn, flaky)
        with pytest.raises(ignis.OutOfMemoryError):
            opt.step()
        monkeypatch.setattr(ignis.nn, fn, real)
        for p, b in zip(ps, before, strict=True):
            np.testing.assert_array_equal(p.data.to_host(), b)
        after = _host_state(opt)
        assert after.keys() == state.keys()
        for key in state:
            np.testing.assert_array_equal(after[key], state[key], err_msg=str(key))
    opt.step()  # and the optimizer still works
    assert not np.array_equal(ps[0].data.to_host(), before[0])


def test_a_failed_first_step_creates_no_state(device, monkeypatch):
    ps = _groups(device)
    opt = AdamW([{"params": ps[:2]}, {"params": ps[2:]}], lr=0.1)
    real = ignis.nn.multi_tensor_adam_
    calls = []

    def flaky(*args, **kw):
        calls.append(1)
        if len(calls) == 2:
            raise ignis.OutOfMemoryError(1 << 20, 0, 1 << 30, 0, "an injected failure")
        return real(*args, **kw)

    before = [p.data.to_host() for p in ps]
    monkeypatch.setattr(ignis.nn, "multi_tensor_adam_", flaky)
    with pytest.raises(ignis.OutOfMemoryError):
        opt.step()
    assert opt.state_dict()["state"] == {}
    for p, b in zip(ps, before, strict=True):
        np.testing.assert_array_equal(p.data.to_host(), b)
