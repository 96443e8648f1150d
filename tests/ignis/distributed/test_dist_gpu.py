"""World size 1 through real NCCL on one GPU: set-up from the environment, every collective
against NumPy, an async handle, and an all_reduce captured in a CUDA graph."""

from __future__ import annotations

import ignis.distributed as dist
import numpy as np
import pytest

import ignis

pytestmark = pytest.mark.gpu

RNG = np.random.default_rng(0)


@pytest.fixture(scope="module")
def group():
    if not ignis.is_available():
        pytest.skip("needs a CUDA GPU")
    from ignis.distributed import _nccl
    from ignis.distributed.run import free_port

    if _nccl.load() is None:
        pytest.skip(f"NCCL is not installed ({_nccl.unavailable_reason()})")
    mp = pytest.MonkeyPatch()
    for k, v in {
        "RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_RANK": "0",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
    }.items():
        mp.setenv(k, v)
    g = dist.init_process_group(timeout=60)
    yield g
    dist.destroy_process_group()
    ignis.set_default_device(None)
    mp.undo()


def test_init_reads_the_environment(group):
    import os

    assert dist.is_initialized()
    assert (dist.get_rank(), dist.get_world_size()) == (0, 1)
    assert group.device.ordinal == 0
    assert os.environ["NCCL_NVLS_ENABLE"] == "0"
    assert group.nccl_version >= (2, 10, 0)


@pytest.mark.parametrize(
    "dtype", ["float16", "bfloat16", "float32", "float64", "int32", "int64", "uint8"]
)
@pytest.mark.parametrize("op", list(dist.ReduceOp))
def test_all_reduce_of_one_rank_is_its_input(group, dtype, op):
    host = RNG.integers(1, 5, 1000) if "int" in dtype else RNG.standard_normal(1000)
    x = ignis.asarray(host, dtype=dtype)
    want = np.asarray(x.to_host(), dtype=np.float64)
    dist.all_reduce(x, op)
    np.testing.assert_array_equal(np.asarray(x.to_host(), dtype=np.float64), want)


def test_broadcast_gather_scatter(group):
    host = RNG.standard_normal(777)
    x = ignis.asarray(host)
    dist.broadcast(x, src=0)
    np.testing.assert_array_equal(x.to_host(), host)
    out = ignis.zeros((777,), dtype="float64")
    dist.all_gather(out, x)
    np.testing.assert_array_equal(out.to_host(), host)
    outs = [ignis.zeros((777,), dtype="float64")]
    dist.all_gather(outs, x)
    np.testing.assert_array_equal(outs[0].to_host(), host)
    rs = ignis.zeros((777,), dtype="float64")
    dist.reduce_scatter(rs, x * 2.0)
    np.testing.assert_allclose(rs.to_host(), host * 2.0)


def test_async_handle_orders_the_current_stream(group):
    x = ignis.asarray(RNG.standard_normal((64, 1024)), dtype="float32")
    want = x.to_host() * 3.0
    work = dist.all_reduce(x, async_op=True)
    assert isinstance(work, dist.Work)
    work.wait()
    y = x * 3.0  # after wait(): reads the reduced values
    np.testing.assert_allclose(y.to_host(), want, rtol=1e-6)
    work.synchronize()
    assert work.is_completed()


def test_all_reduce_captured_in_a_cuda_graph(group):
    host = RNG.standard_normal(4096).astype(np.float32)
    x = ignis.asarray(host)
    stream = ignis.Stream()
    stream.wait_stream(ignis.current_stream())
    with ignis.Graph.capture(stream) as graph:
        dist.all_reduce(x)
        x.copy_(x * 2.0)
    assert graph.num_nodes >= 2
    for _ in range(3):
        graph.launch(stream)
    stream.synchronize()
    np.testing.assert_allclose(x.to_host(), host * 8.0, rtol=1e-6)


def test_barrier_and_watchdog_drain(group):
    dist.barrier()
    ignis.synchronize()
    import time

    deadline = time.monotonic() + 5
    while group.outstanding and time.monotonic() < deadline:
        time.sleep(0.05)
    assert group.outstanding == 0


def test_bad_arrays_are_refused(group):
    with pytest.raises(TypeError, match="all_reduce: tensor must be an NvArray, got list"):
        dist.all_reduce([1.0])
    with pytest.raises(ignis.DeviceMismatchError, match="is on cpu"):
        dist.all_reduce(ignis.zeros((2,), device="cpu"))
    with pytest.raises(ValueError, match="must be contiguous"):
        dist.all_reduce(ignis.zeros((4, 4), dtype="float32").T)
    with pytest.raises(ignis.DTypeError, match="NCCL has no data type for bool"):
        dist.all_reduce(ignis.zeros((2,), dtype="bool"))
    with pytest.raises(ValueError, match=r"src must be a rank in \[0, 1\), got 3"):
        dist.broadcast(ignis.zeros((2,)), src=3)
    with pytest.raises(ignis.ShapeError, match="output has 3 elements"):
        dist.all_gather_into_tensor(ignis.zeros((3,)), ignis.zeros((2,)))
    with pytest.raises(dist.DistributedError, match="already initialized"):
        dist.init_process_group()


def test_ddp_of_one_rank_under_capture_step(group):
    from ignis_autograd.optim import AdamW
    from ignis_autograd.parallel import DistributedDataParallel

    import ignis_autograd as ag
    from ignis_autograd import Tensor, nn

    ignis.random.seed(0)
    ref = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4))
    ignis.random.seed(0)
    model = DistributedDataParallel(
        nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4)), bucket_cap_mb=0.001
    )
    xs = RNG.standard_normal((6, 8, 16)).astype(np.float32)
    ys = RNG.standard_normal((6, 8, 4)).astype(np.float32)

    def make_step(m, opt):
        def step(x, y):
            opt.zero_grad()
            d = m(x) - y
            loss = (d * d).mean()
            loss.backward()
            opt.step()
            return loss.detach()

        return step

    opt_ref, opt = AdamW(ref.parameters(), lr=1e-2), AdamW(model.parameters(), lr=1e-2)
    x0, y0 = Tensor(ignis.asarray(xs[0])), Tensor(ignis.asarray(ys[0]))
    captured = ag.capture_step(make_step(model, opt), x0, y0, warmup=2)
    eager = make_step(ref, opt_ref)
    eager(x0, y0)
    eager(x0, y0)
    for s in range(1, 6):
        x, y = Tensor(ignis.asarray(xs[s])), Tensor(ignis.asarray(ys[s]))
        captured(x, y)
        eager(x, y)
    for p, q in zip(model.module.parameters(), ref.parameters(), strict=True):
        np.testing.assert_allclose(p.data.to_host(), q.data.to_host(), rtol=1e-5, atol=1e-6)
