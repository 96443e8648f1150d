"""Faults: CUDA in a forked child, a kernel that writes to an illegal address, and processes
sharing one compile cache directory. Each risky case runs in its own subprocess with a timeout,
so a hang or a poisoned context fails one test instead of the whole run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import ignis
from ignis import _compile_cache as cc

ROOT = Path(ignis.__file__).resolve().parents[1]


def run_python(
    script: str, timeout: float = 180, env: dict | None = None
) -> subprocess.CompletedProcess:
    full_env = dict(os.environ, **(env or {}))
    full_env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), str(ROOT.parents[1] / "ignis_autograd" / "src"), full_env.get("PYTHONPATH", "")]
    )
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def last_json(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --- fork ----------------------------------------------------------------------------------------

# The child reports what happened through its exit status and a JSON line on a pipe.
FORK_CHILD = """
import json, os, sys, numpy as np, ignis

def child(fn):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            out = fn()
        except BaseException as exc:
            out = {"error": type(exc).__name__, "message": str(exc),
                   "is_ignis": isinstance(exc, ignis.IgnisError)}
        os.write(w, json.dumps(out).encode())
        os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.waitpid(pid, 0)
    return json.loads(data)
"""


def test_fork_after_cuda_init_raises_a_clear_error_in_the_child():
    # Without a GPU, pretend the parent initialized the driver: the fork hook must then refuse
    # every driver call in the child, while CPU arrays keep working there.
    proc = run_python(
        FORK_CHILD
        + """
from ignis import _bindings
if not ignis.is_available():
    _bindings._init_state.update(done=True, ok=True, reason="")

def gpu():
    ignis.zeros(3, device="cuda:0")
    return {"error": None}

def cpu():
    x = ignis.arange(5, device="cpu") * 2
    return {"cpu": x.tolist(), "available": ignis.is_available(),
            "forked": _bindings.forked_child()}

def grandchild():
    return child(gpu)

print(json.dumps({"gpu": child(gpu), "cpu": child(cpu), "grandchild": child(grandchild),
                  "parent_forked": _bindings.forked_child()}))
""",
        timeout=120,
    )
    out = last_json(proc)
    gpu = out["gpu"]
    assert gpu["is_ignis"] and gpu["error"] == "NoDeviceError", gpu
    assert "forked child" in gpu["message"] and "'spawn'" in gpu["message"]
    assert out["grandchild"]["is_ignis"] and "forked child" in out["grandchild"]["message"]
    assert out["cpu"] == {"cpu": [0, 2, 4, 6, 8], "available": False, "forked": True}
    assert out["parent_forked"] is False


def test_fork_before_cuda_init_leaves_the_child_free():
    proc = run_python(
        FORK_CHILD
        + """
from ignis import _bindings
def probe():
    return {"forked": _bindings.forked_child(), "state": dict(_bindings._init_state)}
print(json.dumps(child(probe)))
"""
    )
    out = last_json(proc)
    assert out["forked"] is False and out["state"]["done"] is False


FORK_GPU_MAIN = """
import multiprocessing as mp

def spawn_worker(q):
    import numpy as np
    import ignis
    q.put(float((ignis.from_host(np.arange(4.0), device="cuda:0") * 3).sum().item()))

if __name__ == "__main__":  # a spawned child imports this file again: keep the work guarded
    a = ignis.from_host(np.arange(4.0), device="cuda:0")  # the parent initializes CUDA
    assert (a * 2).to_host().tolist() == [0, 2, 4, 6]

    def use_parent_array():
        return {"value": (a + 1).to_host().tolist()}

    def new_array():
        return {"value": ignis.ones(2, device="cuda:0").to_host().tolist()}

    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=spawn_worker, args=(q,))
    p.start()
    spawned = q.get(timeout=120)
    p.join(60)
    print(json.dumps({"parent_array": child(use_parent_array), "new_array": child(new_array),
                      "spawned": spawned, "parent_after": (a * 3).to_host().tolist()}))
"""


@pytest.mark.gpu
def test_fork_after_real_cuda_use_fails_fast_and_spawn_works(tmp_path):
    main = tmp_path / "fork_gpu_main.py"
    main.write_text(textwrap.dedent(FORK_CHILD) + textwrap.dedent(FORK_GPU_MAIN))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, str(main)], env=env, capture_output=True, text=True, timeout=300
    )
    out = last_json(proc)
    for case in ("parent_array", "new_array"):
        assert out[case]["is_ignis"], out[case]
        assert "forked child" in out[case]["message"] and "spawn" in out[case]["message"]
    assert out["spawned"] == 18.0  # the 'spawn' start method the message recommends works
    assert out["parent_after"] == [0, 3, 6, 9]  # the parent is unaffected by its children


# --- illegal address -----------------------------------------------------------------------------


@pytest.mark.gpu
def test_illegal_address_is_a_sticky_cuda_error_that_says_how_to_proceed():
    proc = run_python(
        """
import json, numpy as np, ignis
src = 'extern "C" __global__ void poke(float* p, long long n) { p[n] = 1.0f; }'
k = ignis.compile_kernel(src, "poke")
x = ignis.zeros(4, device="cuda:0")
ok = x.to_host().tolist()
report = {"before": ok}
k.launch(1, 1, [x, 1 << 40])  # far outside any allocation
try:
    ignis.synchronize()
    report["first"] = None
except ignis.CudaError as exc:
    report["first"] = {"code": exc.code, "sticky": exc.is_sticky, "message": str(exc)}
try:  # every later call fails too, with a CudaError (never a hang or a wrong answer)
    report["later"] = ignis.ones(3, device="cuda:0").to_host().tolist()
except ignis.CudaError as exc:
    report["later"] = {"code": exc.code, "sticky": exc.is_sticky}
# host-only work still runs, so the process can save its state before it exits
report["cpu"] = (ignis.arange(3, device="cpu") + 1).tolist()
print(json.dumps(report), flush=True)
""",
        timeout=300,
    )
    assert proc.stdout.strip(), proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    first = out["first"]
    assert first is not None, "the illegal write went unnoticed"
    assert first["code"] in ("CUDA_ERROR_ILLEGAL_ADDRESS", "CUDA_ERROR_LAUNCH_FAILED"), first
    assert first["sticky"]
    msg = first["message"]
    assert "unusable" in msg and "restart the process" in msg and "compute-sanitizer" in msg
    assert isinstance(out["later"], dict) and out["later"]["sticky"], out["later"]
    assert out["cpu"] == [1, 2, 3]
    # and the process still exits normally (finalizers of the dead context stay quiet)
    assert proc.returncode == 0, proc.stderr[-2000:]


# --- concurrent processes on one compile cache -------------------------------------------------

CACHE_WORKER = """
import hashlib, json, os, sys, time
import ignis
from ignis import jit
index, go = int(sys.argv[1]), sys.argv[2]
shared = [f'extern "C" __global__ void s{i}(float* x) {{ x[threadIdx.x] *= {i + 2}.0f; }}'
          for i in range(4)]
mine = [f'extern "C" __global__ void p{index}_{i}(int* x) {{ x[threadIdx.x] += {index * 10 + i}; }}'
        for i in range(2)]
while not os.path.exists(go):  # start together, so that writes and reads overlap
    time.sleep(0.001)
digests = {}
for round in range(4):
    jit.clear_cache(memory=True)  # every round goes to the disk layer again
    for n, src in enumerate(shared + mine):
        arch = ("sm_80", "sm_90")[(n + round) % 2]
        obj = ignis.compile(src, ignis.CompileOptions(arch=arch))
        key = f"{'shared' if n < 4 else 'own'}{n}-{arch}"
        digests.setdefault(key, set()).add(hashlib.sha256(obj.code).hexdigest())
stats = jit.cache_stats().as_dict()
print(json.dumps({"stats": stats, "digests": {k: sorted(v) for k, v in digests.items()}}))
"""


def test_concurrent_processes_share_one_cache_directory_without_torn_entries(tmp_path):
    cache = tmp_path / "cache"
    go = tmp_path / "go"
    env = dict(os.environ, IGNIS_CACHE_DIR=str(cache))
    env.pop("IGNIS_DISABLE_DISK_CACHE", None)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CACHE_WORKER, str(i), str(go)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(6)
    ]
    time.sleep(0.5)  # let every interpreter reach its wait loop
    go.touch()
    results = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    shared_digests: dict[str, set[str]] = {}
    for r in results:
        assert r["stats"]["corrupt_entries"] == 0, r["stats"]
        assert r["stats"]["disk_errors"] == 0, r["stats"]
        assert r["stats"]["disk_hits"] > 0  # later rounds read what the processes wrote
        for key, digests in r["digests"].items():
            assert len(digests) == 1, (key, digests)  # one program, one binary, every round
            if key.startswith("shared"):
                shared_digests.setdefault(key, set()).update(digests)
    assert all(len(d) == 1 for d in shared_digests.values()), shared_digests
    # Every entry on disk is whole and belongs to the key its name says; no temp file is left.
    files = sorted(cache.iterdir())
    entries = [f for f in files if f.name.endswith(".ignis-jit")]
    assert [f for f in files if f not in entries] == []
    assert len(entries) == 2 * (4 + 2 * 6)  # (shared + own programs) x 2 architectures
    for f in entries:
        key = f.name[: -len(".ignis-jit")]
        obj = cc.decode_entry(f.read_bytes(), key)
        assert obj.code and obj.arch in ("sm_80", "sm_90")
