"""The launcher: ``python -m ignis.distributed.run --nproc-per-node N script.py args...``.

Starts N copies of ``script.py`` (or, with ``-m module``, of ``python -m module``) with the
environment of a rank each: ``RANK`` and ``LOCAL_RANK`` (0..N-1), ``WORLD_SIZE`` and
``LOCAL_WORLD_SIZE`` (N), ``MASTER_ADDR`` (127.0.0.1 unless ``--master-addr``), ``MASTER_PORT``
(a free port unless ``--master-port``) and ``NCCL_NVLS_ENABLE=0`` (forced: NVLink multicast
off). SIGINT and SIGTERM are passed on to every rank. When a rank exits with a failure the
others are stopped (SIGTERM, then SIGKILL after ``--grace`` seconds) and the launcher exits
with that rank's code (128 + N for a rank killed by signal N), naming the rank on stderr.

Example::

    $ python -m ignis.distributed.run --nproc-per-node 2 -m ignis_autograd.demo --steps 200
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence

from ._env import FORCED_NCCL_ENV

__all__ = ["build_parser", "free_port", "main", "rank_env"]

_PREFIX = "ignis.distributed.run"


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on ``host`` a moment ago (the OS's pick for port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def rank_env(base: dict[str, str], rank: int, nproc: int, addr: str, port: int) -> dict[str, str]:
    """The environment of local rank ``rank`` of ``nproc`` (one node): ``base`` plus the
    rendezvous variables and :data:`FORCED_NCCL_ENV`."""
    env = dict(base)
    env.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(nproc),
        LOCAL_WORLD_SIZE=str(nproc),
        GROUP_RANK="0",
        MASTER_ADDR=addr,
        MASTER_PORT=str(port),
    )
    env.update(FORCED_NCCL_ENV)
    return env


def build_parser() -> argparse.ArgumentParser:
    """The launcher's argument parser."""
    p = argparse.ArgumentParser(
        prog=f"python -m {_PREFIX}",
        description="Start one process per GPU for ignis.distributed (torchrun's environment).",
    )
    p.add_argument(
        "--nproc-per-node",
        "--nproc_per_node",
        type=int,
        default=1,
        metavar="N",
        help="processes to start (one per GPU; default 1)",
    )
    p.add_argument(
        "--master-addr",
        "--master_addr",
        default="127.0.0.1",
        help="address of rank 0's store (default 127.0.0.1)",
    )
    p.add_argument(
        "--master-port",
        "--master_port",
        type=int,
        default=None,
        help="port of rank 0's store (default: a free one)",
    )
    p.add_argument(
        "--grace",
        type=float,
        default=5.0,
        help="seconds between SIGTERM and SIGKILL when stopping ranks (default 5)",
    )
    p.add_argument(
        "-m",
        dest="module",
        action="store_true",
        help="run the target as a module (python -m target)",
    )
    p.add_argument("target", help="the script (or, with -m, the module) to run")
    p.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")
    return p


def _code_of(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def _stop(procs: list[subprocess.Popen], grace: float, sig: int = signal.SIGTERM) -> None:
    for p in procs:
        if p.poll() is None:
            try:
                p.send_signal(sig)
            except ProcessLookupError:  # pragma: no cover - exited meanwhile
                pass
    deadline = time.monotonic() + grace
    for p in procs:
        left = deadline - time.monotonic()
        try:
            p.wait(timeout=max(left, 0.01))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the launcher; returns the exit code (0 when every rank succeeded)."""
    args = build_parser().parse_args(argv)
    n = args.nproc_per_node
    if n < 1:
        print(f"{_PREFIX}: --nproc-per-node must be >= 1, got {n}", file=sys.stderr)
        return 2
    port = args.master_port if args.master_port is not None else free_port(args.master_addr)
    cmd = [sys.executable, "-m", args.target] if args.module else [sys.executable, args.target]
    cmd += list(args.args)
    procs: list[subprocess.Popen] = []
    received: list[int] = []

    def forward(signum: int, frame: object) -> None:
        received.append(signum)
        for p in procs:
            if p.poll() is None:
                try:
                    p.send_signal(signum)
                except ProcessLookupError:  # pragma: no cover
                    pass

    old = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        for rank in range(n):
            # Each rank in its own session: a terminal's Ctrl-C reaches the launcher alone,
            # which passes it on once.
            procs.append(
                subprocess.Popen(
                    cmd,
                    env=rank_env(dict(os.environ), rank, n, args.master_addr, port),
                    start_new_session=True,
                )
            )
        while True:
            running = False
            for rank, p in enumerate(procs):
                code = p.poll()
                if code is None:
                    running = True
                elif code != 0:
                    others = [q for q in procs if q is not p]
                    if not received:
                        print(
                            f"{_PREFIX}: rank {rank} (pid {p.pid}) exited with code "
                            f"{_code_of(code)}"
                            + (f" (signal {-code})" if code < 0 else "")
                            + f"; stopping the other {len(others)} rank(s)",
                            file=sys.stderr,
                            flush=True,
                        )
                    _stop(others, args.grace)
                    return _code_of(code)
            if not running:
                return 0
            time.sleep(0.05)
    finally:
        _stop(procs, args.grace)
        for s, h in old.items():
            signal.signal(s, h)


if __name__ == "__main__":
    sys.exit(main())
