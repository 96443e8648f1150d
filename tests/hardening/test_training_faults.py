"""Faults inside a training step and long training runs (GPU).

* An out-of-memory error at *any* allocation of a training step (forward, backward, gradient
  clipping, the optimizer creating its state or updating) leaves the parameters and the
  optimizer state exactly as they were, and the step tried again gives exactly the result of a
  run where it never failed.
* A long training loop (``IGNIS_LOAD_STEPS`` steps, default 10,000; marked ``slow``) keeps the
  device memory in use (``ignis.memory_stats``) and the host memory flat.
"""

from __future__ import annotations

import gc
import os

import numpy as np
import pytest

import ignis
import ignis_autograd as ag
from ignis_autograd import nn, optim
from test_load import rss_bytes

pytestmark = pytest.mark.gpu

STEPS = int(os.environ.get("IGNIS_LOAD_STEPS", "10000"))


class FailingResource(ignis.AsyncMemoryResource):
    """The device's pool, failing the ``fail_at``-th allocation with an OutOfMemoryError."""

    def __init__(self) -> None:
        super().__init__(0)
        self.calls = 0
        self.fail_at: int | None = None

    def allocate(self, nbytes: int, stream: ignis.Stream | None = None) -> ignis.Buffer:
        self.calls += 1
        if self.calls == self.fail_at:
            free, total = self.device.mem_info()
            raise ignis.OutOfMemoryError(nbytes, free, total, 0, "an injected failure")
        return super().allocate(nbytes, stream)


def build(seed: int = 0):
    ignis.random.seed(seed)
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8)).to("cuda:0")
    weights = [p for name, p in model.named_parameters() if name.endswith("weight")]
    biases = [p for name, p in model.named_parameters() if name.endswith("bias")]
    opt = optim.AdamW(
        [{"params": weights, "weight_decay": 0.1}, {"params": biases, "weight_decay": 0.0}],
        lr=1e-2,
    )
    rng = np.random.default_rng(seed)
    x = ignis.asarray(rng.standard_normal((64, 16)).astype(np.float32), device="cuda:0")
    y = ignis.asarray(rng.integers(0, 8, size=64), device="cuda:0")
    return model, opt, x, y


def train_step(model, opt, x, y) -> None:
    opt.zero_grad()
    loss = ag.cross_entropy(model(ag.Tensor(x)), y)
    loss.backward()
    optim.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()


def snapshot(model, opt) -> dict[str, np.ndarray]:
    out = {f"param {n}": p.data.to_host() for n, p in model.named_parameters()}
    for i, st in opt.state_dict()["state"].items():
        out.update({f"state {i} {k}": v.to_host() for k, v in st.items()})
    return out


def assert_same(got: dict[str, np.ndarray], want: dict[str, np.ndarray], context: str) -> None:
    assert got.keys() == want.keys(), context
    for key in want:
        np.testing.assert_array_equal(got[key], want[key], err_msg=f"{key} ({context})")


def test_oom_at_any_allocation_of_a_step_leaves_parameters_and_optimizer_state_intact():
    failing = FailingResource()
    previous = ignis.get_memory_resource(0)
    ignis.set_memory_resource(failing)
    try:
        model, opt, x, y = build()
        clean_model, clean_opt, _, _ = build()
        for step in range(3):  # the first step creates the optimizer state; later ones reuse it
            injected = 0
            while True:
                before = snapshot(model, opt)
                failing.calls, failing.fail_at = 0, injected + 1
                try:
                    train_step(model, opt, x, y)
                except ignis.OutOfMemoryError:
                    failing.fail_at = None
                    ignis.synchronize()
                    assert_same(snapshot(model, opt), before,
                                f"step {step}, allocation {injected + 1} failed")
                    injected += 1
                    continue
                failing.fail_at = None
                break  # every allocation of the step has failed once; this try succeeded
            assert injected > 10, "the step made too few allocations through the resource"
            train_step(clean_model, clean_opt, x, y)
            ignis.synchronize()
            assert_same(snapshot(model, opt), snapshot(clean_model, clean_opt),
                        f"step {step} after {injected} failed tries vs a clean run")
    finally:
        ignis.set_memory_resource(previous)


@pytest.mark.slow
def test_a_long_training_loop_keeps_device_and_host_memory_flat():
    model, opt, x, y = build(1)
    warmup = 200
    for _ in range(warmup):  # compiles, launch tables, pools
        train_step(model, opt, x, y)
    ignis.synchronize()
    gc.collect()
    base = ignis.memory_stats()["current_bytes"]
    rss = rss_bytes()
    for i in range(STEPS):
        train_step(model, opt, x, y)
        if i % 1000 == 999:
            assert ignis.memory_stats()["current_bytes"] == base, f"device memory grew by step {i}"
    ignis.synchronize()
    gc.collect()
    assert ignis.memory_stats()["current_bytes"] == base
    if rss:
        assert rss_bytes() - rss < 32 << 20, (rss, rss_bytes())
