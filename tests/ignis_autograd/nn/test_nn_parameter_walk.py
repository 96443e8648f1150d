"""Module.parameters() walks the module tree without building names: it must list exactly what
named_parameters() lists, in the same order, and follow a subclass's own named_parameters."""

from __future__ import annotations

import ignis
from ignis_autograd import nn


def _ids(params) -> list[int]:
    return [id(p) for p in params]


def test_parameters_follow_named_parameters_on_a_gpt():
    model = nn.GPT(50, 16, 32, 2, 4, device="cpu")  # tied embedding and output weights
    named = [p for _, p in model.named_parameters()]
    assert len(named) == len({id(p) for p in named})  # the tied weight is listed once
    assert _ids(model.parameters()) == _ids(named)
    assert _ids(model.blocks[1].parameters()) == _ids(
        p for _, p in model.blocks[1].named_parameters()
    )
    assert _ids(model.parameters(recurse=False)) == _ids(
        p for _, p in model.named_parameters(recurse=False)
    )


class _Shared(nn.Module):
    """One layer reachable under two names, a None placeholder, a parameter on the root."""

    def __init__(self):
        super().__init__()
        self.first = nn.Linear(3, 4, device="cpu")
        self.inner = nn.Sequential(nn.Linear(4, 4, bias=False, device="cpu"), self.first)
        self.again = self.first
        self.scale = nn.Parameter(ignis.ones((4,), device="cpu"))
        self.register_parameter("missing", None)


def test_parameters_with_shared_modules_and_placeholders():
    m = _Shared()
    named = [p for _, p in m.named_parameters()]
    assert _ids(m.parameters()) == _ids(named)
    assert len(named) == 4  # scale, first.weight, first.bias, inner.0.weight: each once
    # Registration changes are seen by the next walk (nothing is remembered between walks).
    m.extra = nn.Linear(2, 2, device="cpu")
    assert _ids(m.parameters()) == _ids(p for _, p in m.named_parameters())
    assert len(list(m.parameters())) == 6
    del m.extra
    m.first.bias = None
    assert _ids(m.parameters()) == _ids(p for _, p in m.named_parameters())
    assert len(list(m.parameters())) == 3


class _Filtered(nn.Module):
    """A subclass that hides some parameters from named_parameters (parameters must agree)."""

    def __init__(self):
        super().__init__()
        self.keep = nn.Linear(2, 2, device="cpu")
        self.hide = nn.Linear(2, 2, device="cpu")

    def named_parameters(self, prefix="", recurse=True):
        for name, p in super().named_parameters(prefix, recurse):
            if not name.startswith("hide"):
                yield name, p


def test_parameters_honour_an_overridden_named_parameters():
    m = _Filtered()
    assert _ids(m.parameters()) == _ids([m.keep.weight, m.keep.bias])
