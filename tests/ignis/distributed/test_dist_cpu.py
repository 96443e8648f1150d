"""CPU-side parts of ignis.distributed: the NCCL loader's error without NCCL, the dtype and
op tables, the environment, the watchdog's deadline logic, the NVLS setting and the in-process
ThreadedWorld stand-in compared with NumPy."""

from __future__ import annotations

import os
import threading
import time

import ignis.distributed as dist
import numpy as np
import pytest
from ignis.distributed import _nccl
from ignis.distributed._env import force_nccl_settings, read_env
from ignis.distributed._work import Watchdog

import ignis


@pytest.fixture
def no_nccl(monkeypatch):
    def missing():
        raise OSError("libnccl.so.2: cannot open shared object file")

    monkeypatch.setattr(_nccl, "_find", missing)
    _nccl._lazy.reset()
    yield
    _nccl._lazy.reset()


def test_without_nccl_the_error_names_the_extra(no_nccl):
    assert _nccl.load() is None
    with pytest.raises(dist.NcclNotFoundError, match=r"all_reduce: .*nccl-cu12.*nccl-cu13"):
        _nccl.require("all_reduce")


def test_init_process_group_without_nccl_names_the_extra(no_nccl, monkeypatch):
    for k, v in {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"}.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(dist.NcclNotFoundError, match=r"init_process_group: .*ignis-cuda\[nccl"):
        dist.init_process_group()
    assert not dist.is_initialized()


def test_loading_forces_nvls_off(no_nccl, monkeypatch):
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "1")
    _nccl.load()
    assert os.environ["NCCL_NVLS_ENABLE"] == "0"


def test_force_nccl_settings_overrides_a_set_value():
    env = {"NCCL_NVLS_ENABLE": "1"}
    force_nccl_settings(env)
    assert env == {"NCCL_NVLS_ENABLE": "0"}
    env = {}
    force_nccl_settings(env)
    assert env == {"NCCL_NVLS_ENABLE": "0"}


def test_the_package_search_finds_libnccl_under_nvidia_nccl(tmp_path, monkeypatch):
    lib = tmp_path / "nvidia" / "nccl" / "lib"
    lib.mkdir(parents=True)
    (lib / "libnccl.so.2").write_bytes(b"")
    (tmp_path / "nvidia" / "nccl" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib

    importlib.invalidate_caches()
    for name in [m for m in list(__import__("sys").modules) if m.startswith("nvidia")]:
        monkeypatch.delitem(__import__("sys").modules, name)
    assert _nccl._package_library() == str(lib / "libnccl.so.2")


def test_status_check_names_the_call():
    _nccl.check(0, "ncclAllReduce")
    with pytest.raises(dist.NcclError, match=r"ncclInvalidArgument: .* \(in ncclAllReduce\)"):
        _nccl.check(4, "ncclAllReduce")
    with pytest.raises(dist.NcclError, match="ncclUnknownResult42"):
        _nccl.check(42, "ncclSend")


def test_version_codes_decode_both_schemes():
    assert _nccl._decode_version(22703) == (2, 27, 3)
    assert _nccl._decode_version(2804) == (2, 8, 4)


@pytest.mark.parametrize(
    "name,code",
    [
        ("int8", 0),
        ("uint8", 1),
        ("int32", 2),
        ("uint32", 3),
        ("int64", 4),
        ("uint64", 5),
        ("float16", 6),
        ("float32", 7),
        ("float64", 8),
        ("bfloat16", 9),
    ],
)
def test_dtype_table_matches_nccl_h(name, code):
    assert dist.nccl_dtype(name, "all_reduce") == code
    assert dist.nccl_dtype(getattr(ignis, name), "all_reduce") == code


@pytest.mark.parametrize("name", ["bool", "complex64", "int16"])
def test_unsupported_dtypes_are_refused_by_name(name):
    with pytest.raises(ignis.DTypeError, match=f"broadcast: NCCL has no data type for {name}"):
        dist.nccl_dtype(name, "broadcast")


def test_reduce_ops_are_ncclredop_values():
    assert [op.value for op in dist.ReduceOp] == [0, 1, 2, 3, 4]
    from ignis.distributed._types import reduce_op

    assert reduce_op("avg", "x") is dist.ReduceOp.AVG
    with pytest.raises(ValueError, match="op must be a ReduceOp"):
        reduce_op("mean", "all_reduce")


def test_read_env_follows_torchrun_conventions():
    env = read_env(
        environ={
            "RANK": "3",
            "WORLD_SIZE": "4",
            "LOCAL_RANK": "1",
            "LOCAL_WORLD_SIZE": "2",
            "MASTER_ADDR": "10.0.0.1",
            "MASTER_PORT": "29500",
        }
    )
    assert env == dist.DistEnv(3, 4, 1, 2, "10.0.0.1", 29500)
    one = read_env(environ={"RANK": "0", "WORLD_SIZE": "1"})
    assert (one.local_rank, one.master_addr, one.master_port) == (0, "127.0.0.1", 0)


@pytest.mark.parametrize(
    "environ,match",
    [
        ({"WORLD_SIZE": "2"}, "RANK is not set"),
        ({"RANK": "2", "WORLD_SIZE": "2", "MASTER_PORT": "1"}, r"RANK must be in \[0, 2\), got 2"),
        ({"RANK": "x", "WORLD_SIZE": "2"}, "RANK must be an integer, got 'x'"),
        ({"RANK": "0", "WORLD_SIZE": "2"}, "MASTER_PORT is not set"),
    ],
)
def test_read_env_errors(environ, match):
    with pytest.raises(ValueError, match=match):
        read_env(environ=environ)


def test_collectives_without_a_group_say_to_initialize():
    x = ignis.zeros((2,), device="cpu")
    with pytest.raises(
        dist.DistributedError, match="all_reduce: the default process group is not initialized"
    ):
        dist.all_reduce(x)
    with pytest.raises(dist.DistributedError, match="get_rank"):
        dist.get_rank()


class _Pending:
    def query(self):
        return False


class _Done:
    def query(self):
        return True


def test_watchdog_fails_a_collective_past_its_deadline():
    failed: list[Exception] = []
    got = threading.Event()

    def fail(exc):
        failed.append(exc)
        got.set()

    dog = Watchdog("test-watchdog", lambda: None, fail, interval=0.01)
    try:
        dog.track("all_reduce", _Done(), 0.05)
        dog.track("broadcast", _Pending(), 0.2)
        t0 = time.monotonic()
        assert got.wait(5)
        assert 0.15 < time.monotonic() - t0 < 3
        assert isinstance(failed[0], dist.DistributedTimeoutError)
        assert "broadcast did not finish within the process group's timeout of 0.2 s" in str(
            failed[0]
        )
    finally:
        dog.stop()


def test_watchdog_reports_nccl_async_errors():
    dog = Watchdog(
        "test-watchdog",
        lambda: "rank 1: NCCL reported ncclRemoteError",
        lambda exc: None,
        interval=10,
    )
    try:
        exc = dog.poll()
        assert isinstance(exc, dist.DistributedError)
        assert not isinstance(exc, dist.DistributedTimeoutError)
        assert "ncclRemoteError" in str(exc)
    finally:
        dog.stop()


def test_watchdog_forgets_finished_collectives():
    dog = Watchdog("test-watchdog", lambda: None, lambda exc: None, interval=10)
    try:
        dog.track("all_reduce", _Done(), 1.0)
        assert dog.outstanding == 1
        assert dog.poll() is None
        assert dog.outstanding == 0
    finally:
        dog.stop()


# --- the ThreadedWorld stand-in against NumPy --------------------------------------------------

RNG = np.random.default_rng(0)


def _data(world, dtype, shape=(5, 3)):
    if np.dtype(dtype).kind == "f":
        return [RNG.standard_normal(shape).astype(dtype) for _ in range(world)]
    return [RNG.integers(1, 9, shape).astype(dtype) for _ in range(world)]


@pytest.mark.parametrize(
    "op,ref",
    [
        (dist.ReduceOp.SUM, lambda a: a.sum(0)),
        (dist.ReduceOp.MAX, lambda a: a.max(0)),
        (dist.ReduceOp.MIN, lambda a: a.min(0)),
        (dist.ReduceOp.AVG, lambda a: a.mean(0)),
        (dist.ReduceOp.PRODUCT, lambda a: a.prod(0)),
    ],
)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_threaded_all_reduce_matches_numpy(op, ref, dtype):
    world = 3
    data = _data(world, dtype)

    def body(comm):
        x = ignis.asarray(data[comm.rank].copy(), device="cpu")
        assert dist.all_reduce(x, op, group=comm) is None
        return x.to_host()

    want = ref(np.stack(data).astype(np.float64))
    for got in dist.ThreadedWorld(world).run(body):
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_threaded_broadcast_gather_and_scatter_match_numpy():
    world = 4
    data = _data(world, "float64", (6,))

    def body(comm):
        r = comm.rank
        b = ignis.asarray(data[r].copy(), device="cpu")
        dist.broadcast(b, src=2, group=comm)
        out = ignis.zeros((world * 6,), dtype="float64", device="cpu")
        dist.all_gather(out, ignis.asarray(data[r].copy(), device="cpu"), group=comm)
        outs = [ignis.zeros((6,), dtype="float64", device="cpu") for _ in range(world)]
        dist.all_gather(outs, ignis.asarray(data[r].copy(), device="cpu"), group=comm)
        rs = ignis.zeros((2,), dtype="float64", device="cpu")
        w = dist.reduce_scatter(
            rs,
            ignis.asarray(np.concatenate(data[: world // 2]).copy()[: world * 2], device="cpu")
            * (r + 1),
            group=comm,
            async_op=True,
        )
        w.wait()
        assert w.is_completed()
        return b.to_host(), out.to_host(), [o.to_host() for o in outs], rs.to_host()

    flat = np.concatenate(data[: world // 2])[: world * 2]
    scale = sum(range(1, world + 1))
    for r, (b, out, outs, rs) in enumerate(dist.ThreadedWorld(world).run(body)):
        np.testing.assert_array_equal(b, data[2])
        np.testing.assert_array_equal(out, np.concatenate(data))
        for i in range(world):
            np.testing.assert_array_equal(outs[i], data[i])
        np.testing.assert_allclose(rs, flat[r * 2 : (r + 1) * 2] * scale, rtol=1e-12)


def test_threaded_world_reports_a_failing_rank():
    def body(comm):
        if comm.rank == 1:
            raise RuntimeError("rank 1 broke")
        comm.barrier()

    world = dist.ThreadedWorld(2, timeout=5)
    with pytest.raises(RuntimeError, match="rank 1 broke"):
        world.run(body)


def test_threaded_shapes_are_checked():
    comm = dist.ThreadedWorld(2).communicator(0)
    with pytest.raises(ignis.ShapeError, match="output has 3 elements"):
        comm.all_gather_into_tensor(
            ignis.zeros((3,), device="cpu"), ignis.zeros((2,), device="cpu")
        )
    with pytest.raises(ValueError, match="world_size must be an int >= 1"):
        dist.ThreadedWorld(0)


def test_process_group_satisfies_the_communicator_protocol():
    assert isinstance(dist.ThreadedWorld(1).communicator(0), dist.Communicator)
    for name in (
        "all_reduce",
        "broadcast",
        "all_gather_into_tensor",
        "reduce_scatter_tensor",
        "barrier",
    ):
        assert callable(getattr(dist.ProcessGroup, name))
    with pytest.raises(TypeError, match="use ignis.distributed.init_process_group"):
        dist.ProcessGroup()
