"""Graph-safe random numbers (ignis.random.GraphDraws): draws recorded during a CUDA graph
capture read (seed, offset) from device memory, and each replay draws what the eager call at
that point of the stream would, bit for bit."""

from __future__ import annotations

import struct
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime"))
import fake_gpu  # noqa: E402  (the stand-in GPU of tests/ignis/runtime)
from ignis._array import _cpu_random
from ignis._array import random as rnd
from ignis._array._cuda_backend import indexing as cuda_indexing
from ignis._array._cuda_backend import random_state as cuda_random_state

import ignis
from ignis import CompileOptions, _sources

MASK64 = 2**64 - 1


def _state(seed: int, base: int, device: str = "cpu") -> ignis.NvArray:
    return ignis.asarray(np.array([seed, base], dtype=np.uint64), device=device)


# --- the from_state families equal the eager ones -----------------------------------------------


@pytest.mark.parametrize(
    ("kind", "dtype", "params"),
    [
        ("uniform", "float32", {}),
        ("uniform", "float64", {}),
        ("uniform", "bfloat16", {}),
        ("normal", "float32", {}),
        ("normal", "float64", {}),
        ("integers", "int64", {"low": -5, "high": 1000}),
        ("integers", "int64", {"low": 0, "high": 2**40}),
        ("integers", "uint8", {"low": 3, "high": 200}),
    ],
)
def test_random_from_state_equals_the_eager_stream(device: str, kind, dtype, params) -> None:
    seed, base, rel = 2**40 + 17, 1234, 56
    shape = (7, 13)
    eager = ignis.empty(shape, dtype=dtype, device=device)
    eager._backend.kernels.random(kind, eager, seed, base + rel, params)
    drawn = ignis.empty(shape, dtype=dtype, device=device)
    drawn._backend.kernels.random_from_state(kind, drawn, _state(seed, base, device), rel, params)
    a, b = eager.to_host(), drawn.to_host()
    np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_dropout_from_state_equals_eager_dropout(device: str, rng, dtype) -> None:
    x = ignis.asarray(rng.standard_normal(1001).astype(np.float32), device=device).astype(dtype)
    seed, base, rel = 99, 2**33 + 5, 7
    y0, m0 = ignis.nn.dropout(x, 0.3, seed=seed, offset=base + rel)
    y1 = ignis.empty(x.shape, dtype=dtype, device=device)
    m1 = ignis.empty(x.shape, dtype="bool", device=device)
    thr = ignis._array._nn_dropout_rope.keep_threshold(0.3)
    x._backend.kernels.dropout_from_state(y1, m1, x, thr, 1 / 0.7, _state(seed, base, device), rel)
    np.testing.assert_array_equal(m1.to_host(), m0.to_host())
    np.testing.assert_array_equal(y1.to_host().view(np.uint8), y0.to_host().view(np.uint8))


def test_store_state_writes_seed_and_offset(device: str) -> None:
    state = ignis.zeros((2,), dtype="uint64", device=device)
    state._backend.kernels.random_store_state(state, 2**64 - 3, 2**50 + 1)
    assert state.to_host().tolist() == [2**64 - 3, 2**50 + 1]


# --- the bookkeeping of a capture (device-independent; here on the CPU backend) ---------------


def test_capture_counts_blocks_and_leaves_the_generator_alone() -> None:
    g = ignis.random.Generator(5)
    g.set_state((5, 40))
    x = ignis.ones((37,), device="cpu")
    draws = ignis.random.GraphDraws("cpu")
    with draws.capturing():
        g.rand(10, device="cpu")  # 3 blocks
        ignis.nn.dropout(x, 0.3, generator=g)  # 10 blocks, from rel 3
        g.randn(5, dtype="float64", device="cpu")  # 3 pairs x 4 words: 3 blocks
        g.randint(0, 2**40, shape=(3,), device="cpu")  # 6 words: 2 blocks
    assert draws.blocks == {g: 18}
    assert g.get_state() == (5, 40)  # nothing ran: the replays advance it
    (slot,) = draws._slots.values()
    for replay in range(3):
        draws.advance()
        assert slot.state.to_host().tolist() == [5, 40 + 18 * replay]
    assert g.get_state() == (5, 40 + 3 * 18)
    g.set_state((8, 2))  # a new state takes effect at the next replay
    draws.advance()
    assert slot.state.to_host().tolist() == [8, 2] and g.get_state() == (8, 20)
    assert "1 generator" in repr(draws)


def test_only_the_capture_device_and_thread_are_recorded() -> None:
    g = ignis.random.Generator(1)
    draws = ignis.random.GraphDraws("cuda:0")  # no draw below is on the capture's device
    with draws.capturing():
        a = g.rand(8, device="cpu")  # eager: runs now, advances the generator
        results = []
        t = threading.Thread(target=lambda: results.append(g.rand(4, device="cpu")))
        t.start()
        t.join()
    assert draws.blocks == {} and g.get_state() == (1, 3)
    np.testing.assert_array_equal(a.to_host(), ignis.random.Generator(1).rand(8).to_host())
    draws.advance()  # nothing recorded: nothing to do
    assert rnd._capturing is None


def test_one_capture_at_a_time() -> None:
    d1, d2 = ignis.random.GraphDraws("cpu"), ignis.random.GraphDraws("cpu")
    with d1.capturing():
        with pytest.raises(RuntimeError, match="GraphDraws.capturing: another capture"):
            with d2.capturing():
                pass
    with d2.capturing():  # the first one ended
        pass
    assert rnd._capturing is None


def test_cpu_state_helpers_wrap_modulo_2_64() -> None:
    state = ignis.empty((2,), dtype="uint64", device="cpu")
    _cpu_random.store_state(state, -1, 2**64 + 3)
    assert state.to_host().tolist() == [MASK64, 3]


# --- launches on the stand-in GPU ----------------------------------------------------------------


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch):
    g = fake_gpu.install(monkeypatch)
    monkeypatch.setattr(cuda_indexing, "library_kernel", fake_gpu._library_kernel)
    monkeypatch.setattr(cuda_random_state, "library_kernel", fake_gpu._library_kernel)
    yield g
    fake_gpu.uninstall()


def _u64(v: bytes) -> int:
    return struct.unpack("<Q", v)[0]


def test_fake_gpu_captured_draws_launch_the_state_kernels(fake) -> None:
    g = ignis.random.Generator(2**33 + 1)
    g.set_state((2**33 + 1, 100))
    x = ignis.empty((64,), dtype="float32", device="cuda:0")
    draws = ignis.random.GraphDraws("cuda:0")
    with draws.capturing():
        r = g.rand(6, device="cuda:0")  # blocks 0, 1
        y, mask = ignis.nn.dropout(x, 0.25, generator=g)  # from rel 2
        k = g.randint(0, 10, shape=(5,), device="cuda:0")  # from rel 18
    (slot,) = draws._slots.values()
    launches = [(name, args) for name, _, _, _, args in fake.launches]
    (uni, uargs), (drop, dargs), (ints, iargs) = launches
    assert uni == "ignis::rng::uniform_from_state<float>"
    assert [_u64(a) for a in uargs[:4]] == [r.data_ptr, 6, slot.state.data_ptr, 0]
    assert drop == "ignis::nn::dropout_forward_state<float, float, true>"
    assert [_u64(a) for a in dargs[:6]] == [
        x.data_ptr,
        y.data_ptr,
        mask.data_ptr,
        64,
        slot.state.data_ptr,
        2,
    ]
    assert ints == "ignis::rng::integers_from_state<ignis::int64, false>"
    assert [_u64(a) for a in iargs[:4]] == [k.data_ptr, 5, slot.state.data_ptr, 18]
    assert draws.blocks == {g: 20} and g.get_state() == (2**33 + 1, 100)
    fake.launches.clear()
    draws.advance()
    ((name, grid, block, _, args),) = fake.launches
    assert name == "ignis::rng::store_state" and grid == block == (1, 1, 1)
    assert [_u64(a) for a in args] == [slot.state.data_ptr, 2**33 + 1, 100]
    assert g.get_state() == (2**33 + 1, 120)
    fake.launches.clear()
    g.rand(6, device="cuda:0")  # eager again: the value kernel, from the host offset
    ((name, _, _, _, args),) = fake.launches
    assert name == "ignis::rng::uniform<float>" and _u64(args[4]) == 120


# --- every kernel instance compiles ------------------------------------------------------------


@pytest.mark.exhaustive
def test_every_state_kernel_compiles_for_sm90() -> None:
    names = cuda_random_state.kernel_names()
    obj = ignis.compile(
        _sources.read_source("random.cu"), CompileOptions(arch="sm_90"), name_expressions=names
    )
    assert obj.log == ""
    assert sorted(obj.lowered_names) == sorted(set(names))


# --- on the GPU: a captured graph draws new numbers at each replay ----------------------------


@pytest.mark.gpu
def test_gpu_graph_replays_draw_the_eager_sequence() -> None:
    device = "cuda:0"
    gen = ignis.random.Generator(31)
    gen.set_state((31, 7))
    ref = ignis.random.Generator(31)
    ref.set_state((31, 7))
    x = ignis.asarray(np.linspace(-1, 1, 4099, dtype=np.float32), device=device)
    s = ignis.Stream()
    pool = ignis.GraphPool(0)
    draws = ignis.random.GraphDraws(device)
    with pool.active(), s:
        with ignis.Graph.capture(s) as graph, draws.capturing():
            u = gen.rand(1001, device=device)
            z = gen.randn(333, dtype="float64", device=device)
            k = gen.randint(-3, 2**40, shape=(77,), device=device)
            y, m = ignis.nn.dropout(x, 0.4, generator=gen)
    assert gen.get_state() == (31, 7)
    for _ in range(5):
        with s:
            draws.advance()
            graph.launch(s)
        s.synchronize()
        eu, ez = ref.rand(1001, device="cpu"), ref.randn(333, dtype="float64", device="cpu")
        ek = ref.randint(-3, 2**40, shape=(77,), device="cpu")
        ey, em = ignis.nn.dropout(x.to("cpu"), 0.4, generator=ref)
        np.testing.assert_array_equal(u.to_host(), eu.to_host())
        np.testing.assert_allclose(z.to_host(), ez.to_host(), rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(k.to_host(), ek.to_host())
        np.testing.assert_array_equal(m.to_host(), em.to_host())
        np.testing.assert_array_equal(y.to_host(), ey.to_host())
        assert gen.get_state() == ref.get_state()
