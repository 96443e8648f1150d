"""The launcher: N processes with the rank environment, fail-fast, signals, -m modules."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from ignis.distributed.run import build_parser, rank_env

SCRIPTS = Path(__file__).parent / "scripts"


def _launch(*args: str, env: dict | None = None, timeout: float = 120) -> Any:
    return subprocess.run(
        [sys.executable, "-m", "ignis.distributed.run", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def test_starts_n_processes_with_the_rank_environment(tmp_path):
    env = dict(os.environ, NCCL_NVLS_ENABLE="1")  # the launcher must override it
    res = _launch(
        "--nproc-per-node", "3", str(SCRIPTS / "dump_env.py"), str(tmp_path), "--flag", "x", env=env
    )
    assert res.returncode == 0, res.stderr
    dumps = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(3)]
    ports = {d["env"]["MASTER_PORT"] for d in dumps}
    assert len(ports) == 1 and int(ports.pop()) > 0
    for r, d in enumerate(dumps):
        e = d["env"]
        assert (e["RANK"], e["LOCAL_RANK"], e["WORLD_SIZE"], e["LOCAL_WORLD_SIZE"]) == (
            str(r),
            str(r),
            "3",
            "3",
        )
        assert e["MASTER_ADDR"] == "127.0.0.1"
        assert e["NCCL_NVLS_ENABLE"] == "0"
        assert d["argv"] == ["--flag", "x"]


def test_runs_a_module_with_dash_m(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(SCRIPTS) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    res = _launch(
        "--nproc-per-node", "2", "--master-port", "29123", "-m", "dump_env", str(tmp_path), env=env
    )
    assert res.returncode == 0, res.stderr
    for r in range(2):
        e = json.loads((tmp_path / f"rank{r}.json").read_text())["env"]
        assert e["MASTER_PORT"] == "29123" and e["RANK"] == str(r)


def test_a_dying_rank_stops_the_others_and_gives_its_code(tmp_path):
    marker = str(tmp_path / "alive")
    t0 = time.monotonic()
    res = _launch(
        "--nproc-per-node", "3", "--grace", "2", str(SCRIPTS / "die.py"), "1", "7", marker
    )
    took = time.monotonic() - t0
    assert res.returncode == 7
    assert "rank 1" in res.stderr and "exited with code 7" in res.stderr
    assert took < 30  # the survivors sleep 120 s: they were stopped
    for r in (0, 2):
        pid = int(Path(f"{marker}.{r}").read_text())
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_sigterm_is_forwarded_to_the_ranks(tmp_path):
    marker = str(tmp_path / "alive")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ignis.distributed.run",
            "--nproc-per-node",
            "2",
            str(SCRIPTS / "die.py"),
            "99",
            "0",
            marker,
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not all(Path(f"{marker}.{r}").exists() for r in range(2)):
        assert time.monotonic() < deadline, "the ranks did not start"
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(timeout=30)
    assert code == 128 + signal.SIGTERM  # the ranks died of the forwarded SIGTERM
    for r in range(2):
        with pytest.raises(ProcessLookupError):
            os.kill(int(Path(f"{marker}.{r}").read_text()), 0)


def test_bad_nproc_is_an_error():
    res = _launch("--nproc-per-node", "0", "x.py")
    assert res.returncode == 2 and "--nproc-per-node must be >= 1, got 0" in res.stderr


def test_rank_env_forces_nvls_off_and_keeps_the_rest():
    env = rank_env({"PATH": "/bin", "NCCL_NVLS_ENABLE": "1"}, 2, 4, "127.0.0.1", 1234)
    assert env["NCCL_NVLS_ENABLE"] == "0"
    assert env["PATH"] == "/bin"
    assert (env["RANK"], env["WORLD_SIZE"], env["MASTER_PORT"]) == ("2", "4", "1234")


def test_parser_accepts_torchrun_spellings():
    args = build_parser().parse_args(["--nproc_per_node", "2", "train.py", "--lr", "1"])
    assert args.nproc_per_node == 2 and args.target == "train.py" and args.args == ["--lr", "1"]
