"""scripts/sanitize and its kernel driver, without a GPU: the driver runs every family on the
device fixture, the dry mode reports, and a stand-in sanitizer checks the log parsing and the
summary (errors found, kernels launched, exit status)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "sanitize"
sys.path.insert(0, str(ROOT / "tests" / "sanitize"))

import exercise_kernels  # noqa: E402


def _env() -> dict[str, str]:
    env = dict(os.environ, PYTHON=sys.executable)
    src = f"{ROOT / 'ignis' / 'src'}{os.pathsep}{ROOT / 'ignis_autograd' / 'src'}"
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _run_driver(device: str) -> exercise_kernels.Driver:
    driver = exercise_kernels.Driver(device, "small")
    assert driver.exercise(), json.dumps(driver.results, indent=1)
    for family in exercise_kernels.Driver.CORE:
        assert driver.results[family]["status"] == "ok"
        assert driver.results[family]["ops"] > 10, family
    return driver


def test_driver_runs_every_family_on_the_cpu():
    _run_driver("cpu")


@pytest.mark.gpu
@pytest.mark.slow  # compiles several hundred kernel instances on a cold cache
def test_driver_runs_every_family_on_the_gpu(tmp_path):
    # As scripts/sanitize runs it: a process of its own, so that what earlier tests left in this
    # process (plans, caches, pool contents, settings) cannot change what the driver sees.
    report = tmp_path / "report.json"
    driver = ROOT / "tests" / "sanitize" / "exercise_kernels.py"
    cmd = [sys.executable, str(driver), "--device", "cuda:0", "--size", "small"]
    out = subprocess.run(
        [*cmd, "--report", str(report)],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-6000:]
    result = json.loads(report.read_text())
    for family in exercise_kernels.Driver.CORE:
        assert result["families"][family]["status"] == "ok", (family, result["families"][family])
        assert result["families"][family]["ops"] > 10, family
    kernels = result["kernels"]
    assert len(kernels) > 100, kernels  # every family launched its own kernels
    for fragment in ("binary_", "unary_", "copy", "gemm", "softmax", "reduce"):
        assert any(fragment in name for name in kernels), (fragment, sorted(kernels)[:20])


def test_launched_kernels_counts_each_name_over_devices_and_architectures(monkeypatch):
    # The library's kernel table is keyed by more than the name (the device, an arch such as
    # sm_90a): the report adds up each name's launches, whatever the key holds.
    from types import SimpleNamespace

    from ignis._array._cuda_backend import _kernels

    table = {
        ("attention_sm90.cu", "fwd<64>", 0, "sm_90a"): SimpleNamespace(
            name="fwd<64>", launch_count=2
        ),
        ("attention_sm90.cu", "fwd<64>", 1, "sm_90a"): SimpleNamespace(
            name="fwd<64>", launch_count=3
        ),
        ("reduction.cu", "sum<float>", 0, None): SimpleNamespace(name="sum<float>", launch_count=1),
        ("reduction.cu", "max<float>", 0, None): SimpleNamespace(name="max<float>", launch_count=0),
    }
    monkeypatch.setattr(_kernels, "_kernels", table)
    assert exercise_kernels.launched_kernels() == {"fwd<64>": 5, "sum<float>": 1}


def test_driver_reports_a_failing_family_and_goes_on(monkeypatch):
    driver = exercise_kernels.Driver("cpu", "small")

    def broken() -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(driver, "softmax", broken)
    assert driver.exercise(("softmax", "random")) is False
    assert driver.results["softmax"]["status"] == "FAILED: RuntimeError: boom"
    assert driver.results["random"]["status"] == "ok"


def test_driver_check_catches_a_wrong_result():
    driver = exercise_kernels.Driver("cpu", "small")
    import numpy as np

    with pytest.raises(AssertionError, match="differs from NumPy"):
        driver.check(np.ones(3), np.array([1.0, 1.0, 1.5]), 1e-6, "probe")


@pytest.mark.exhaustive
def test_dry_run_summary(tmp_path):
    logs = tmp_path / "logs"
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--dry", "--size", "small", str(logs)],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[-1] == "sanitize: PASS"
    assert any(line.startswith("| dry (no sanitizer) | 0 |") for line in lines)
    report = json.loads((logs / "dry.json").read_text())
    assert report["ok"] is True and report["device"] == "cpu" and report["ops"] > 1000
    assert (logs / "summary.txt").read_text().strip().endswith("sanitize: PASS")


FAKE_SANITIZER = """\
#!{python}
# Stands in for compute-sanitizer: runs the program, then writes a log with {errors} errors.
import subprocess, sys
args = sys.argv[1:]
opts = {{}}
while args and args[0].startswith("--"):
    opts[args[0]] = args[1]
    args = args[2:]
rc = subprocess.run(args).returncode
with open(opts["--log-file"], "w") as f:
    f.write("========= COMPUTE-SANITIZER\\n")
    if {errors}:
        f.write("========= Invalid __global__ write of size 4 bytes\\n")
        f.write("=========     at ignis::fill_kernel<float>+0x1b0 in elementwise.cu:12\\n")
    f.write("========= ERROR SUMMARY: {errors} errors\\n")
sys.exit(86 if {errors} else rc)
"""


@pytest.mark.parametrize("errors", [0, 3])
@pytest.mark.exhaustive
def test_summary_counts_sanitizer_errors(tmp_path, errors):
    fake = tmp_path / "compute-sanitizer"
    fake.write_text(FAKE_SANITIZER.format(python=sys.executable, errors=errors))
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    logs = tmp_path / "logs"
    env = dict(_env(), COMPUTE_SANITIZER=str(fake))
    out = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--tools",
            "memcheck,synccheck",
            "--device",
            "cpu",
            "--size",
            "small",
            "--families",
            "random,softmax,nn",
            str(logs),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    text = out.stdout
    assert f"| memcheck | {errors} |" in text, text + out.stderr
    assert f"| synccheck | {errors} |" in text
    if errors:
        assert out.returncode == 1 and text.strip().endswith("sanitize: FAIL")
        assert "memcheck: fault in ignis::fill_kernel<float>" in text
    else:
        assert out.returncode == 0 and text.strip().endswith("sanitize: PASS"), text
    for tool in ("memcheck", "synccheck"):
        assert (logs / f"{tool}.log").exists() and (logs / f"{tool}.out").exists()
        report = json.loads((logs / f"{tool}.json").read_text())
        assert set(report["families"]) == {"random", "softmax", "nn"} and report["ops"] > 100


def test_unknown_tool_and_missing_sanitizer(tmp_path):
    bad = subprocess.run(
        [sys.executable, str(SCRIPT), "--tools", "leakcheck", str(tmp_path)],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "unknown tool" in bad.stderr
    env = dict(_env(), COMPUTE_SANITIZER="", PATH="/nonexistent", CUDA_HOME=str(tmp_path))
    missing = subprocess.run(
        [sys.executable, "-S", str(SCRIPT), str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if missing.returncode == 2:  # no sanitizer anywhere on this machine
        assert "compute-sanitizer not found" in missing.stderr


def test_log_parser_reads_racecheck_summaries():
    ns: dict = {"__file__": str(SCRIPT), "__name__": "sanitize_script"}
    exec(compile(SCRIPT.read_text(), str(SCRIPT), "exec"), ns)  # the script is not a module
    parsed = ns["parse_log"](
        textwrap.dedent("""\
        ========= RACECHECK SUMMARY: 2 hazards displayed (2 errors, 0 warnings)
        ========= ERROR SUMMARY: 2 errors
        """)
    )
    assert parsed["errors"] == 2 and parsed["hazards"] == 2
    # What racecheck prints on a clean run: its own summary line only.
    clean = ns["parse_log"](
        "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)\n"
    )
    assert clean["errors"] == 0 and clean["hazards"] == 0
    found = ns["parse_log"](
        "========= RACECHECK SUMMARY: 3 hazards displayed (1 errors, 2 warnings)\n"
    )
    assert found["errors"] == 1 and found["hazards"] == 3
    assert ns["parse_log"]("python crashed")["errors"] is None
