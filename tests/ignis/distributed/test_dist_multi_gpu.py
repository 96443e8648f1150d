"""Multi-GPU checks through the launcher: every collective on every dtype against NumPy, 50
DDP steps against single-GPU global-batch training, ZeRO-1 against AdamW, and a killed rank
making the survivor fail within the timeout. They need >= 2 GPUs and NCCL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import ignis

WORKER = Path(__file__).parent / "scripts" / "mgpu_worker.py"


def _gpus() -> int:
    return ignis.device_count() if ignis.is_available() else 0


def _needs_nccl() -> None:
    from ignis.distributed import _nccl

    if _nccl.load() is None:
        pytest.skip(f"NCCL is not installed ({_nccl.unavailable_reason()})")


pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(_gpus() < 2, reason="needs at least 2 CUDA GPUs"),
]


def _world() -> int:
    return min(_gpus(), 8)


def _launch(mode: str, out: Path, n: int) -> list[dict]:
    _needs_nccl()
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "ignis.distributed.run",
            "--nproc-per-node",
            str(n),
            str(WORKER),
            mode,
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(n)]


@pytest.mark.parametrize("n", sorted({2, _world()}))
def test_every_collective_on_every_dtype_matches_numpy(tmp_path, n):
    results = _launch("collectives", tmp_path, n)
    assert [r["rank"] for r in results] == list(range(n))
    assert all(r["nvls"] == "0" for r in results)
    assert len(results[0]["dtypes"]) == 10


def test_fifty_ddp_steps_equal_single_gpu_global_batch_training(tmp_path):
    results = _launch("ddp", tmp_path, _world())
    assert all(r["max_abs_diff"] < 1e-4 for r in results)
    assert results[0]["buckets"] > 1  # the reduction really was bucketed


def test_zero1_equals_adamw(tmp_path):
    results = _launch("zero", tmp_path, _world())
    assert all(r["ok"] for r in results)


def test_a_killed_rank_makes_the_other_fail_within_the_timeout(tmp_path):
    _needs_nccl()
    from ignis.distributed.run import free_port, rank_env

    timeout = 15.0
    port = free_port()
    base = dict(os.environ, IGNIS_TEST_TIMEOUT=str(timeout))
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), "kill", str(tmp_path)],
            env=rank_env(base, r, 2, "127.0.0.1", port),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r in range(2)
    ]
    t0 = time.monotonic()
    out0 = procs[0].communicate(timeout=timeout * 6)[0]
    procs[1].wait(timeout=30)
    took = time.monotonic() - t0
    assert procs[1].returncode == 9
    result = json.loads((tmp_path / "rank0.json").read_text())
    assert result["error"] in ("DistributedTimeoutError", "DistributedError"), out0[-2000:]
    assert "rank 0" in result["message"]
    if result["error"] == "DistributedTimeoutError":
        assert f"{timeout:g} s" in result["message"]
    assert result["seconds"] < timeout * 3
    assert took < timeout * 5


def test_the_demo_trains_on_several_gpus_and_resumes(tmp_path):
    _needs_nccl()
    n = 2
    common = [
        "--device",
        "cuda",
        "--layers",
        "1",
        "--dim",
        "32",
        "--heads",
        "2",
        "--context",
        "16",
        "--batch-size",
        "4",
        "--eval-interval",
        "10",
        "--eval-batches",
        "2",
        "--sample-tokens",
        "0",
        "--out",
        str(tmp_path),
        "--quiet",
    ]

    def demo(*extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "ignis.distributed.run",
                "--nproc-per-node",
                str(n),
                "-m",
                "ignis_autograd.demo",
                *common,
                *extra,
            ],
            capture_output=True,
            text=True,
            timeout=540,
        )

    first = demo("--steps", "20")
    assert first.returncode == 0, first.stderr[-3000:]
    meta = json.loads((tmp_path / "checkpoint.json").read_text())
    assert meta["step"] == 20
    assert first.stdout.count("done: step 20/20") == 1  # rank 0 alone prints
    again = demo("--steps", "30", "--resume")
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads((tmp_path / "checkpoint.json").read_text())["step"] == 30
