"""Module, Parameter and the containers: registration, traversal, modes, gradients, devices and
dtypes, state dicts."""

from __future__ import annotations

import numpy as np
import pytest
from nn_torch_helpers import randn

import ignis
import ignis_autograd as ag
from ignis import DTypeError, ShapeError
from ignis_autograd import nn


class Net(nn.Module):
    def __init__(self, device="cpu", dtype="float32"):
        super().__init__()
        self.fc1 = nn.Linear(3, 5, device=device, dtype=dtype)
        self.fc2 = nn.Linear(5, 2, bias=False, device=device, dtype=dtype)
        self.scale = nn.Parameter(ignis.full((2,), 0.5, dtype=dtype, device=device))
        self.register_buffer("steps", ignis.zeros((1,), dtype="int64", device=device))
        self.register_buffer("cache", ignis.ones((4,), device=device), persistent=False)
        self.note = "plain attribute"

    def forward(self, x):
        return self.fc2(self.fc1(x).relu()) * self.scale


def test_registration_and_names():
    net = Net()
    names = [n for n, _ in net.named_parameters()]
    assert names == ["scale", "fc1.weight", "fc1.bias", "fc2.weight"]
    assert [n for n, _ in net.named_modules()] == ["", "fc1", "fc2"]
    assert [n for n, _ in net.named_children()] == ["fc1", "fc2"]
    assert list(net.children()) == [net.fc1, net.fc2]
    assert [n for n, _ in net.named_buffers()] == ["steps", "cache"]
    assert net.note == "plain attribute"
    assert "note" not in dict(net.named_parameters())
    assert net.fc2.bias is None
    assert net.num_parameters() == 3 * 5 + 5 + 5 * 2 + 2
    assert all(isinstance(p, nn.Parameter) and p.requires_grad for p in net.parameters())
    assert [n for n, _ in net.named_parameters(recurse=False)] == ["scale"]


def test_reassign_and_delete():
    net = Net()
    net.fc1 = nn.Linear(3, 5, device="cpu")  # replacing a submodule keeps one registration
    assert [n for n, _ in net.named_modules()] == ["", "fc1", "fc2"]
    with pytest.raises(TypeError, match="parameter 'scale'.*expected a Parameter"):
        net.scale = ag.Tensor(ignis.ones((2,)))
    with pytest.raises(TypeError, match="submodule 'fc1'"):
        net.fc1 = 3
    with pytest.raises(TypeError, match="buffer 'steps'"):
        net.steps = [1, 2]
    del net.fc2
    assert [n for n, _ in net.named_modules()] == ["", "fc1"]
    with pytest.raises(AttributeError, match="has no attribute 'fc2'"):
        _ = net.fc2


def test_super_init_missing_is_clear():
    class Broken(nn.Module):
        def __init__(self):
            self.w = nn.Parameter(ignis.ones((2,)))

    with pytest.raises(AttributeError, match="super\\(\\).__init__\\(\\)"):
        Broken()


def test_forward_required():
    with pytest.raises(NotImplementedError, match="Module does not define forward"):
        nn.Module()(1)


def test_shared_parameter_listed_once():
    a, b = nn.Linear(4, 4, device="cpu"), nn.Linear(4, 4, device="cpu")
    b.weight = a.weight
    seq = nn.Sequential(a, b)
    assert [n for n, _ in seq.named_parameters()] == ["0.weight", "0.bias", "1.bias"]
    assert seq.num_parameters() == 16 + 4 + 4
    # the second name of a tied weight is accepted by load_state_dict (PyTorch lists both)
    state = {k: v.clone() for k, v in seq.state_dict().items()}
    state["1.weight"] = state["0.weight"]
    assert seq.load_state_dict(state) == ([], [])


def test_train_eval_recursive():
    net = nn.Sequential(nn.Linear(2, 2, device="cpu"), nn.Dropout(0.5))
    assert net.training and net[1].training
    assert net.eval() is net
    assert not net.training and not net[0].training and not net[1].training
    net.train()
    assert all(m.training for m in net.modules())


def test_zero_grad_and_requires_grad(device):
    net = Net(device=device, dtype="float64")
    x = randn((4, 3), device=device)
    net(x).sum().backward()
    assert all(p.grad is not None for p in net.parameters())
    assert any(np.abs(p.grad.to_host()).sum() > 0 for p in net.parameters())
    net.zero_grad()
    for p in net.parameters():
        assert p.grad is not None and not np.any(p.grad.to_host())
    net.zero_grad(set_to_none=True)
    assert all(p.grad is None for p in net.parameters())
    net.requires_grad_(False)
    assert not net(x).requires_grad


def test_to_dtype_keeps_parameter_objects(device):
    net = Net(device=device)
    before = {n: p for n, p in net.named_parameters()}
    w = net.fc1.weight.to_host()
    net(randn((2, 3), dtype="float32", device=device)).sum().backward()
    assert net.to(dtype="float64") is net
    for n, p in net.named_parameters():
        assert p is before[n] and p.dtype == ignis.float64
        assert p.grad.dtype == ignis.float64
    np.testing.assert_array_equal(net.fc1.weight.to_host(), w.astype(np.float64))
    assert net.steps.dtype == ignis.int64  # integer state keeps its dtype
    assert net.cache.dtype == ignis.float64
    net.to(dtype="bfloat16")
    assert net.fc1.weight.dtype == ignis.bfloat16 and net.fc1.weight.grad.dtype == ignis.float32
    net.to(device=device)
    assert str(net.fc1.weight.device) == str(ignis.zeros(1, device=device).device)
    with pytest.raises(DTypeError, match="Module.to: dtype must be floating, got int32"):
        net.to(dtype="int32")


@pytest.mark.gpu
def test_to_moves_between_devices():
    net = Net(device="cpu")
    ref = net(randn((2, 3), dtype="float32", device="cpu")).to_host()
    p = net.fc1.weight
    net.to("cuda:0")
    assert net.fc1.weight is p and net.fc1.weight.device.index == 0
    assert net.steps.device.index == 0
    out = net(randn((2, 3), dtype="float32", device="cuda:0")).to_host()
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)


def test_state_dict_round_trip(device):
    ignis.random.seed(1)
    a = Net(device=device, dtype="float64")
    ignis.random.seed(2)
    b = Net(device=device, dtype="float64")
    x = randn((3, 3), device=device)
    assert not np.allclose(a(x).to_host(), b(x).to_host())
    sd = a.state_dict()
    assert list(sd) == ["scale", "fc1.weight", "fc1.bias", "fc2.weight", "steps"]
    assert sd["fc1.weight"] is a.fc1.weight.data  # the module's own arrays, not copies
    p = b.fc1.weight
    assert b.load_state_dict(sd) == ([], [])
    assert b.fc1.weight is p  # copied in place
    np.testing.assert_array_equal(a(x).to_host(), b(x).to_host())
    # values may be NumPy arrays or Tensors of another dtype: converted to the parameter's
    state = {k: v.to_host().astype(np.float32) for k, v in sd.items()}
    state["scale"] = ag.Tensor.from_host([3.0, 4.0], dtype="float32")
    b.load_state_dict(state)
    np.testing.assert_array_equal(b.scale.to_host(), [3.0, 4.0])
    assert b.scale.dtype == ignis.float64


def test_load_state_dict_errors():
    net = Net()
    sd = {k: v.clone() for k, v in net.state_dict().items()}
    missing = dict(sd)
    del missing["fc1.bias"]
    with pytest.raises(KeyError, match=r"missing keys \['fc1.bias'\]"):
        net.load_state_dict(missing)
    extra = dict(sd, **{"fc3.weight": ignis.ones((2, 2))})
    with pytest.raises(KeyError, match=r"unexpected keys \['fc3.weight'\]"):
        net.load_state_dict(extra)
    assert net.load_state_dict(missing, strict=False) == (["fc1.bias"], [])
    assert net.load_state_dict(extra, strict=False) == ([], ["fc3.weight"])
    bad = dict(sd)
    bad["fc1.weight"] = ignis.ones((5, 4))
    bad["scale"] = ignis.full((2,), 9.0)
    before = net.scale.to_host()
    with pytest.raises(ShapeError, match=r"'fc1.weight' has shape \(5, 4\).*expected \(5, 3\)"):
        net.load_state_dict(bad)
    np.testing.assert_array_equal(net.scale.to_host(), before)  # nothing copied


def test_non_persistent_buffer_not_saved():
    net = Net()
    assert "cache" not in net.state_dict() and "steps" in net.state_dict()


def test_repr():
    text = repr(Net())
    assert text.startswith("Net(\n")
    assert "(fc1): Linear(in_features=3, out_features=5, bias=True)" in text
    assert "(fc2): Linear(in_features=5, out_features=2, bias=False)" in text
    assert repr(nn.Dropout(0.25)) == "Dropout(p=0.25)"


def test_parameter():
    p = nn.Parameter(ignis.ones((2, 2)))
    assert p.requires_grad and p.is_leaf and isinstance(p, ag.Tensor)
    assert repr(p).startswith("Parameter(") and "requires_grad=True" in repr(p)
    q = nn.Parameter(ag.Tensor(ignis.zeros((3,))))
    assert q.shape == (3,)
    assert not nn.Parameter(ignis.zeros((3,), dtype="int64"), requires_grad=False).requires_grad
    with pytest.raises(DTypeError, match="only floating tensors"):
        nn.Parameter(ignis.zeros((3,), dtype="int64"))
    # ops on a Parameter give plain Tensors
    assert type(p * 2) is ag.Tensor


def test_register_errors():
    m = nn.Module()
    with pytest.raises(TypeError, match="register_parameter: 'w' must be a Parameter"):
        m.register_parameter("w", ignis.ones(2))
    with pytest.raises(TypeError, match="add_module: 'c' must be a Module"):
        m.add_module("c", 3)


def test_sequential_and_module_list(device):
    l1 = nn.Linear(3, 4, device=device, dtype="float64")
    l2 = nn.Linear(4, 2, device=device, dtype="float64")
    seq = nn.Sequential(l1, nn.GELU(), l2)
    x = randn((5, 3), device=device)
    np.testing.assert_allclose(seq(x).to_host(), l2(l1(x).gelu()).to_host(), rtol=1e-12)
    assert len(seq) == 3 and seq[0] is l1 and seq[-1] is l2
    assert list(seq.state_dict()) == ["0.weight", "0.bias", "2.weight", "2.bias"]
    ml = nn.ModuleList([l1])
    ml.append(l2).extend([nn.ReLU()])
    assert [type(m).__name__ for m in ml] == ["Linear", "Linear", "ReLU"]
    assert len(ml[1:]) == 2 and ml[1:][0] is l2
    ml[2] = nn.SiLU()
    assert isinstance(ml[2], nn.SiLU)
    with pytest.raises(IndexError, match="index 3 out of range for length 3"):
        ml[3]
    with pytest.raises(TypeError, match="items must be Modules, got int"):
        ml.append(5)
