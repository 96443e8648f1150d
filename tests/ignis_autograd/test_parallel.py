"""DistributedDataParallel, its buckets and ZeroRedundancyOptimizer on the in-process stand-in
communicator (ignis.distributed.ThreadedWorld), on CPU arrays; the multi-GPU versions of these
checks are in tests/ignis/distributed/test_multi_gpu.py."""

from __future__ import annotations

import numpy as np
import pytest
from ignis.distributed import ReduceOp, ThreadedWorld
from ignis_autograd.optim import SGD, AdamW, ZeroRedundancyOptimizer
from ignis_autograd.parallel import DistributedDataParallel, assign_buckets

import ignis
import ignis_autograd as ag
from ignis_autograd import Tensor, nn

RNG = np.random.default_rng(0)
W1 = RNG.standard_normal((6, 8))
W2 = RNG.standard_normal((8, 3))
X = RNG.standard_normal((8, 6))
Y = RNG.standard_normal((8, 3))


class Net(nn.Module):
    def __init__(self, dtype: str = "float64"):
        super().__init__()
        self.w1 = nn.Parameter(ignis.asarray(W1.copy(), dtype=dtype, device="cpu"))
        self.w2 = nn.Parameter(ignis.asarray(W2.copy(), dtype=dtype, device="cpu"))

    def forward(self, x):
        return (x @ self.w1).tanh() @ self.w2


def _loss(model, x, y):
    d = model(x) - y
    return (d * d).mean()


def _t(a, dtype="float64"):
    return Tensor(ignis.asarray(np.array(a), dtype=dtype, device="cpu"))


class Recorder:
    """A communicator that forwards to a ThreadedCommunicator and logs what it is asked."""

    def __init__(self, inner, log):
        self.inner, self.log = inner, log
        self.rank, self.world_size = inner.rank, inner.world_size

    def all_reduce(self, x, op=ReduceOp.SUM, *, async_op=False):
        self.log.append(("all_reduce", x.numel, op))
        return self.inner.all_reduce(x, op, async_op=async_op)

    def broadcast(self, x, src=0, *, async_op=False):
        self.log.append(("broadcast", x.numel, src))
        return self.inner.broadcast(x, src, async_op=async_op)

    def all_gather_into_tensor(self, out, x, *, async_op=False):
        return self.inner.all_gather_into_tensor(out, x, async_op=async_op)

    def reduce_scatter_tensor(self, out, x, op=ReduceOp.SUM, *, async_op=False):
        return self.inner.reduce_scatter_tensor(out, x, op, async_op=async_op)

    def barrier(self):
        self.inner.barrier()


# --- buckets -----------------------------------------------------------------------------------


def test_buckets_take_parameters_in_reverse_order_up_to_the_cap():
    specs = [(10, 4, "float32", "cpu")] * 5  # 40 bytes each
    assert assign_buckets(specs, cap_bytes=80) == [[4, 3], [2, 1], [0]]
    assert assign_buckets(specs, cap_bytes=1000) == [[4, 3, 2, 1, 0]]


def test_a_parameter_above_the_cap_gets_its_own_bucket():
    specs = [(1, 4, "float32", "cpu"), (100, 4, "float32", "cpu"), (1, 4, "float32", "cpu")]
    assert assign_buckets(specs, cap_bytes=16) == [[2], [1], [0]]


def test_buckets_never_mix_dtypes_or_devices():
    specs = [
        (1, 4, "float32", "cpu"),
        (1, 8, "float64", "cpu"),
        (1, 4, "float32", "cpu"),
        (1, 4, "float32", "cuda:0"),
    ]
    buckets = assign_buckets(specs, cap_bytes=1 << 20)
    assert sorted(map(sorted, buckets)) == [[0, 2], [1], [3]]


def test_assign_buckets_refuses_a_cap_of_zero():
    with pytest.raises(ValueError, match="cap_bytes must be > 0"):
        assign_buckets([(1, 4, "float32", "cpu")], 0)


# --- DDP ---------------------------------------------------------------------------------------


def _single_process_grads():
    model = Net()
    _loss(model, _t(X), _t(Y)).backward()
    return model.w1.grad.to_host(), model.w2.grad.to_host()


@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_ddp_gradients_equal_the_global_batch_gradients(world_size):
    g1, g2 = _single_process_grads()
    n = len(X) // world_size

    def body(comm):
        model = DistributedDataParallel(Net(), bucket_cap_mb=1e-4, process_group=comm)
        r = comm.rank
        _loss(model, _t(X[r * n : (r + 1) * n]), _t(Y[r * n : (r + 1) * n])).backward()
        return model.module.w1.grad.to_host(), model.module.w2.grad.to_host()

    for a1, a2 in ThreadedWorld(world_size).run(body):
        np.testing.assert_allclose(a1, g1, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(a2, g2, rtol=1e-12, atol=1e-12)


def test_ddp_broadcasts_rank_0_parameters_at_wrap():
    def body(comm):
        net = Net()
        net.w1.data.fill_(float(comm.rank + 1))  # replicas differ before the wrap
        DistributedDataParallel(net, process_group=comm)
        return net.w1.data.to_host()

    a, b = ThreadedWorld(2).run(body)
    np.testing.assert_array_equal(a, np.ones_like(W1))
    np.testing.assert_array_equal(b, np.ones_like(W1))


def test_ddp_launches_a_bucket_before_backward_reaches_earlier_layers():
    # w2 (the last layer) is in the first bucket: its all-reduce must be issued while the
    # backward still has w1 to do, i.e. before w1's gradient is complete.
    def body(comm):
        log = []
        net = Net()
        net.w1.register_post_accumulate_grad_hook(lambda t: log.append(("w1 ready",)))
        ddp = DistributedDataParallel(net, bucket_cap_mb=1e-6, process_group=Recorder(comm, log))
        log.clear()
        _loss(ddp, _t(X), _t(Y)).backward()
        return log

    log = ThreadedWorld(2).run(body)[0]
    assert [e[0] for e in log] == ["all_reduce", "w1 ready", "all_reduce"]
    assert log[0][1] == W2.size and log[2][1] == W1.size
    assert log[0][2] is ReduceOp.AVG


def test_ddp_gradients_are_views_of_the_bucket_and_stay_after_zero_grad():
    def body(comm):
        net = Net()
        ddp = DistributedDataParallel(net, process_group=comm)
        opt = SGD(ddp.parameters(), lr=0.1)
        _loss(ddp, _t(X), _t(Y)).backward()
        first = net.w1.grad
        opt.zero_grad()
        _loss(ddp, _t(X), _t(Y)).backward()
        return first is net.w1.grad, len(ddp.buckets)

    assert ThreadedWorld(2).run(body) == [(True, 1), (True, 1)]


def test_no_sync_accumulates_locally_and_the_next_backward_reduces_the_sum():
    xa, xb = X[:4], X[4:]
    ya, yb = Y[:4], Y[4:]

    def local_sum(xs, ys):
        net = Net()
        for x, y in zip(xs, ys, strict=False):
            _loss(net, _t(x), _t(y)).backward()
        return net.w1.grad.to_host()

    # rank r: two micro-batches; expected: the average over ranks of each rank's local sum
    micro = {0: ([xa[:2], xa[2:]], [ya[:2], ya[2:]]), 1: ([xb[:2], xb[2:]], [yb[:2], yb[2:]])}
    want = (local_sum(*micro[0]) + local_sum(*micro[1])) / 2

    def body(comm):
        log = []
        net = Net()
        ddp = DistributedDataParallel(net, process_group=Recorder(comm, log))
        log.clear()
        xs, ys = micro[comm.rank]
        with ddp.no_sync():
            _loss(ddp, _t(xs[0]), _t(ys[0])).backward()
        inside = list(log)
        local = net.w1.grad.to_host()
        _loss(ddp, _t(xs[1]), _t(ys[1])).backward()
        return inside, local, net.w1.grad.to_host()

    results = ThreadedWorld(2).run(body)
    for inside, _, reduced in results:
        assert inside == []  # no communication under no_sync
        np.testing.assert_allclose(reduced, want, rtol=1e-12)
    assert not np.allclose(results[0][1], results[1][1])  # they did differ before the reduce


def test_ddp_reduces_zeros_for_a_parameter_without_gradient():
    class Partial(Net):
        def __init__(self):
            super().__init__()
            self.unused = nn.Parameter(ignis.asarray(np.ones(3), dtype="float64", device="cpu"))

    def body(comm):
        net = Partial()
        ddp = DistributedDataParallel(net, process_group=comm)
        _loss(ddp, _t(X), _t(Y)).backward()
        return net.unused.grad.to_host()

    for g in ThreadedWorld(2).run(body):
        np.testing.assert_array_equal(g, np.zeros(3))


def test_ddp_fifty_steps_equal_single_process_training():
    steps, world = 50, 2
    rng = np.random.default_rng(1)
    xs = rng.standard_normal((steps, 8, 6)).astype(np.float32)
    ys = rng.standard_normal((steps, 8, 3)).astype(np.float32)
    ref = Net("float32")
    opt = AdamW(ref.parameters(), lr=1e-2)
    for s in range(steps):
        opt.zero_grad()
        _loss(ref, _t(xs[s], "float32"), _t(ys[s], "float32")).backward()
        opt.step()

    def body(comm):
        net = Net("float32")
        ddp = DistributedDataParallel(net, process_group=comm)
        o = AdamW(ddp.parameters(), lr=1e-2)
        r = comm.rank
        for s in range(steps):
            o.zero_grad()
            x, y = xs[s][r::world], ys[s][r::world]  # rank-strided shard of the global batch
            _loss(ddp, _t(x, "float32"), _t(y, "float32")).backward()
            o.step()
        return net.w1.data.to_host(), net.w2.data.to_host()

    for w1, w2 in ThreadedWorld(world).run(body):
        np.testing.assert_allclose(w1, ref.w1.data.to_host(), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(w2, ref.w2.data.to_host(), rtol=1e-4, atol=1e-5)
    assert not np.allclose(ref.w1.data.to_host(), W1, atol=1e-3)  # it did train


def test_ddp_under_checkpointing_reduces_at_the_end_of_backward():
    g1, g2 = _single_process_grads()

    class Ck(Net):
        def forward(self, x):
            return ag.checkpoint(lambda h: (h @ self.w1).tanh(), x) @ self.w2

    def body(comm):
        net = Ck()
        ddp = DistributedDataParallel(net, bucket_cap_mb=1e-6, process_group=comm)
        r = comm.rank
        _loss(ddp, _t(X[r * 4 : (r + 1) * 4]), _t(Y[r * 4 : (r + 1) * 4])).backward()
        return net.w1.grad.to_host(), net.w2.grad.to_host()

    for a1, a2 in ThreadedWorld(2).run(body):
        np.testing.assert_allclose(a1, g1, rtol=1e-12)
        np.testing.assert_allclose(a2, g2, rtol=1e-12)


def test_ddp_errors_name_what_was_given():
    comm = ThreadedWorld(1).communicator(0)
    with pytest.raises(TypeError, match="must be an ignis_autograd.nn.Module, got int"):
        DistributedDataParallel(3, process_group=comm)
    with pytest.raises(ValueError, match="bucket_cap_mb must be a number > 0, got 0"):
        DistributedDataParallel(Net(), bucket_cap_mb=0, process_group=comm)


def test_ddp_without_a_process_group_says_to_initialize_one():
    from ignis.distributed import DistributedError, is_initialized

    assert not is_initialized()
    with pytest.raises(DistributedError, match="init_process_group"):
        DistributedDataParallel(Net())


# --- hooks -------------------------------------------------------------------------------------


def test_post_accumulate_hook_runs_once_with_the_complete_gradient():
    w = Tensor(ignis.asarray([1.0, 2.0], dtype="float64", device="cpu"), requires_grad=True)
    seen = []
    h = w.register_post_accumulate_grad_hook(lambda t: seen.append(t.grad.to_host().copy()))
    ((w * w).sum() + (w * 3.0).sum()).backward()  # two contributions to w
    assert len(seen) == 1
    np.testing.assert_array_equal(seen[0], [5.0, 7.0])
    h.remove()
    (w * w).sum().backward()
    assert len(seen) == 1


def test_post_accumulate_hook_refuses_a_non_leaf():
    w = Tensor(ignis.asarray([1.0], dtype="float64", device="cpu"), requires_grad=True)
    with pytest.raises(ValueError, match="only a leaf tensor"):
        (w * 2).register_post_accumulate_grad_hook(lambda t: None)
    with pytest.raises(TypeError, match="hook must be callable"):
        w.register_post_accumulate_grad_hook(3)


# --- ZeRO-1 ------------------------------------------------------------------------------------


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_zero1_equals_adamw_on_the_averaged_gradients(world_size):
    steps = 5
    rng = np.random.default_rng(2)
    grads = rng.standard_normal((steps, world_size, W1.size + W2.size))
    kw = dict(lr=1e-2, weight_decay=0.1, betas=(0.9, 0.99))

    def set_grads(net, flat):
        net.w1.grad = ignis.asarray(
            flat[: W1.size].reshape(W1.shape), dtype="float64", device="cpu"
        )
        net.w2.grad = ignis.asarray(
            flat[W1.size :].reshape(W2.shape), dtype="float64", device="cpu"
        )

    ref = Net()
    opt = AdamW(ref.parameters(), **kw)
    for s in range(steps):
        set_grads(ref, grads[s].mean(axis=0))
        opt.step()

    def body(comm):
        net = Net()
        zero = ZeroRedundancyOptimizer(
            net.parameters(), optimizer_class=AdamW, process_group=comm, **kw
        )
        for s in range(steps):
            set_grads(net, grads[s, comm.rank])
            zero.step()
        n_state = sum(
            v.numel
            for v in zero.optimizer.state_of(zero._shards[0].local).values()
            if v.ndim == 1 and v.numel > 1
        )
        return net.w1.data.to_host(), net.w2.data.to_host(), n_state

    total = W1.size + W2.size
    for w1, w2, n_state in ThreadedWorld(world_size).run(body):
        np.testing.assert_allclose(w1, ref.w1.data.to_host(), rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(w2, ref.w2.data.to_host(), rtol=1e-10, atol=1e-12)
        assert n_state == 2 * -(-total // world_size)  # two moments of one shard only


def test_zero1_refuses_mixed_dtypes_in_one_group():
    comm = ThreadedWorld(1).communicator(0)
    a = nn.Parameter(ignis.zeros((2,), dtype="float32", device="cpu"))
    b = nn.Parameter(ignis.zeros((2,), dtype="float64", device="cpu"))
    with pytest.raises(TypeError, match="must share dtype and device"):
        ZeroRedundancyOptimizer([a, b], process_group=comm)


def test_zero1_state_dict_is_tied_to_its_rank():
    def body(comm):
        z = ZeroRedundancyOptimizer(Net().parameters(), process_group=comm, lr=1e-3)
        return z, z.state_dict()

    (z0, s0), (z1, s1) = ThreadedWorld(2).run(body)
    z0.load_state_dict(s0)
    with pytest.raises(ValueError, match="state is of rank 1 of 2, this is rank 0 of 2"):
        z0.load_state_dict(s1)


def test_demo_ranks_draw_distinct_batches_that_depend_only_on_the_step():
    from ignis_autograd.demo.distributed import DistRun

    def batch(rank, step):
        g = ignis.random.Generator(5)
        DistRun(rank, 2, rank).position_batches(g, 4, step)
        return g.randint(0, 1000, shape=(8,), device="cpu").to_host()

    a0, a1 = batch(0, 3), batch(1, 3)
    assert not np.array_equal(a0, a1)
    np.testing.assert_array_equal(a0, batch(0, 3))  # a resumed run draws the same batch
    assert not np.array_equal(batch(0, 4), a0)
