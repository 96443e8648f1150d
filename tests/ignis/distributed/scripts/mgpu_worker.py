"""One rank of the multi-GPU checks (started by the launcher, or directly for "kill").

    python -m ignis.distributed.run --nproc-per-node N mgpu_worker.py MODE OUT_DIR

Each mode compares against NumPy (or a single-GPU run this rank does itself) and writes
OUT_DIR/rank<R>.json; a mismatch raises, so the rank exits non-zero.
"""

from __future__ import annotations

import json
import os
import sys
import time

import ignis.distributed as dist
import numpy as np

import ignis

DTYPES = [
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "int8",
    "uint8",
    "int32",
    "uint32",
    "int64",
    "uint64",
]
TOL = {"float16": 2e-3, "bfloat16": 2e-2, "float32": 1e-5, "float64": 1e-12}


def _data(rank: int, dtype: str, n: int) -> np.ndarray:
    rng = np.random.default_rng(1000 + rank)
    if dtype.startswith(("float", "bfloat")):
        return rng.standard_normal(n).astype(np.float64)
    return rng.integers(0, 4, n).astype(np.float64)  # small: no overflow in sums of 8 ranks


def _arr(host: np.ndarray, dtype: str) -> ignis.NvArray:
    return ignis.asarray(host, dtype=dtype)


def _close(got: np.ndarray, want: np.ndarray, dtype: str, what: str) -> None:
    got = np.asarray(got, dtype=np.float64)
    tol = TOL.get(dtype, 0.0)
    if not np.allclose(got, want, rtol=tol, atol=tol * 4):
        raise AssertionError(f"{what} {dtype}: max error {np.abs(got - want).max()}")


def collectives(rank: int, world: int) -> dict:
    n = 1 << 12
    for dtype in DTYPES:
        all_data = [_data(r, dtype, n) for r in range(world)]
        # values as this dtype rounds them
        rounded = [np.asarray(_arr(d, dtype).to_host(), dtype=np.float64) for d in all_data]
        stack = np.stack(rounded)
        for op, ref in [
            (dist.ReduceOp.SUM, stack.sum(0)),
            (dist.ReduceOp.MAX, stack.max(0)),
            (dist.ReduceOp.MIN, stack.min(0)),
        ]:
            x = _arr(all_data[rank], dtype)
            dist.all_reduce(x, op)
            _close(x.to_host(), ref, dtype, f"all_reduce {op.name}")
        if dtype.startswith(("float", "bfloat")):
            x = _arr(all_data[rank], dtype)
            work = dist.all_reduce(x, dist.ReduceOp.AVG, async_op=True)
            work.wait()
            _close(x.to_host(), stack.mean(0), dtype, "all_reduce AVG async")
        x = _arr(all_data[rank], dtype)
        dist.broadcast(x, src=world - 1)
        _close(x.to_host(), rounded[world - 1], dtype, "broadcast")
        out = ignis.zeros((world * n,), dtype=dtype)
        dist.all_gather(out, _arr(all_data[rank], dtype))
        _close(out.to_host(), np.concatenate(rounded), dtype, "all_gather_into_tensor")
        outs = [ignis.zeros((n,), dtype=dtype) for _ in range(world)]
        dist.all_gather(outs, _arr(all_data[rank], dtype))
        for r in range(world):
            _close(outs[r].to_host(), rounded[r], dtype, "all_gather list")
        m = n // world
        rs = ignis.zeros((m,), dtype=dtype)
        dist.reduce_scatter(rs, _arr(all_data[rank][: m * world], dtype))
        _close(rs.to_host(), stack[:, rank * m : (rank + 1) * m].sum(0), dtype, "reduce_scatter")
        # ring of send/recv: rank r sends to r+1, receives from r-1
        if world > 1:
            recv = ignis.zeros((n,), dtype=dtype)
            src, dst = (rank - 1) % world, (rank + 1) % world
            if rank % 2 == 0:
                dist.send(_arr(all_data[rank], dtype), dst)
                dist.recv(recv, src)
            else:
                dist.recv(recv, src)
                dist.send(_arr(all_data[rank], dtype), dst)
            _close(recv.to_host(), rounded[src], dtype, "send/recv")
    dist.barrier()
    return {"dtypes": DTYPES}


def _mlp(seed: int):
    from ignis_autograd import nn

    ignis.random.seed(seed)
    return nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 8))


def _batches(steps: int, batch: int):
    rng = np.random.default_rng(7)
    return (
        rng.standard_normal((steps, batch, 32)).astype(np.float32),
        rng.standard_normal((steps, batch, 8)).astype(np.float32),
    )


def _mse(model, x, y):
    from ignis_autograd import Tensor

    d = model(Tensor(ignis.asarray(x))) - Tensor(ignis.asarray(y))
    return (d * d).mean()


def ddp(rank: int, world: int) -> dict:
    from ignis_autograd.optim import AdamW
    from ignis_autograd.parallel import DistributedDataParallel

    steps, batch = 50, 8 * world
    xs, ys = _batches(steps, batch)
    ref = _mlp(0)
    opt = AdamW(ref.parameters(), lr=1e-3)
    for s in range(steps):  # single-GPU training on the global batch
        opt.zero_grad()
        _mse(ref, xs[s], ys[s]).backward()
        opt.step()
    model = DistributedDataParallel(_mlp(rank), bucket_cap_mb=0.01)  # rank 0's init wins
    opt = AdamW(model.parameters(), lr=1e-3)
    for s in range(steps):
        opt.zero_grad()
        _mse(model, xs[s][rank::world], ys[s][rank::world]).backward()
        opt.step()
    worst = 0.0
    for (name, p), q in zip(model.module.named_parameters(), ref.parameters(), strict=True):
        a, b = p.data.to_host(), q.data.to_host()
        worst = max(worst, float(np.abs(a - b).max()))
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=2e-5, err_msg=name)
    return {"max_abs_diff": worst, "buckets": len(model.buckets)}


def zero(rank: int, world: int) -> dict:
    from ignis_autograd.optim import AdamW, ZeroRedundancyOptimizer

    steps, batch = 20, 8 * world
    xs, ys = _batches(steps, batch)
    ref = _mlp(0)
    opt = AdamW(ref.parameters(), lr=1e-3, weight_decay=0.1)
    for s in range(steps):
        opt.zero_grad()
        _mse(ref, xs[s], ys[s]).backward()
        opt.step()
    model = _mlp(0)
    zopt = ZeroRedundancyOptimizer(
        model.parameters(), optimizer_class=AdamW, lr=1e-3, weight_decay=0.1
    )
    for s in range(steps):
        zopt.zero_grad()
        _mse(model, xs[s][rank::world], ys[s][rank::world]).backward()
        zopt.step()
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        np.testing.assert_allclose(p.data.to_host(), q.data.to_host(), rtol=1e-4, atol=2e-5)
    return {"ok": True}


def kill(rank: int, world: int) -> dict:
    if rank == 1:
        os._exit(9)  # dies without a word, after the communicator formed
    x = ignis.ones((1 << 20,), dtype="float32")
    t0 = time.monotonic()
    try:
        for _ in range(10_000):
            dist.all_reduce(x)
            ignis.synchronize()
            time.sleep(0.01)
    except dist.DistributedError as exc:
        return {"error": type(exc).__name__, "message": str(exc), "seconds": time.monotonic() - t0}
    return {"error": None, "seconds": time.monotonic() - t0}


def main() -> None:
    mode, out = sys.argv[1], sys.argv[2]
    timeout = float(os.environ.get("IGNIS_TEST_TIMEOUT", "120"))
    dist.init_process_group(timeout=timeout)
    rank, world = dist.get_rank(), dist.get_world_size()
    result = {"collectives": collectives, "ddp": ddp, "zero": zero, "kill": kill}[mode](rank, world)
    result.update(rank=rank, world=world, nvls=os.environ.get("NCCL_NVLS_ENABLE"))
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)
    if mode != "kill":
        dist.destroy_process_group()
    else:
        os._exit(0)  # the aborted communicator is not destroyed


if __name__ == "__main__":
    main()
