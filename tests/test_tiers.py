"""The two test tiers (README, "Test tiers"): what each selects.

A plain `python -m pytest` must stay quick on a two-core machine without a GPU, so the tests that
build kernels as host C++ for the emulator, sweep NVRTC over every kernel instance or read
register reports belong to `-m exhaustive`; that tier also reruns the property-based tests.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# A part of the suite with tests of every kind: collecting it all three ways costs seconds.
SAMPLE = (
    "tests/hardening",
    "tests/ignis/array/test_cuda_matmul.py",
    "tests/ignis/array/test_nn_attention.py",
)


def _collect(*args: str) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "HYPOTHESIS_PROFILE"}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            *SAMPLE,
            *args,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return [line for line in out.stdout.splitlines() if "::" in line]


def _name(node_id: str) -> str:
    return node_id.split("::")[-1].split("[")[0]


def test_the_two_tiers_cover_the_suite_and_share_only_the_property_tests() -> None:
    default = set(_collect())
    exhaustive = set(_collect("-m", "exhaustive"))
    everything = set(_collect("-m", ""))
    assert len(default) > 100 and exhaustive
    assert default | exhaustive == everything
    shared = default & exhaustive
    assert shared and all(i.startswith("tests/hardening/test_prop_") for i in shared)
    # The heaviest sweeps (minutes each on two cores) stay out of the default tier.
    heavy = ("test_every_instance_compiles", "test_backward_tile_variants_fit_their_registers")
    assert not {i for i in default if _name(i) in heavy}


def test_the_exhaustive_tier_has_the_sweeps_and_the_property_tests() -> None:
    exhaustive = _collect("-m", "exhaustive")
    names = {_name(i) for i in exhaustive}
    assert "test_every_instance_compiles" in names
    assert "test_kernels_on_the_host_emulator" in names
    assert any(i.startswith("tests/hardening/test_prop_") for i in exhaustive)
    assert not any(i.startswith("tests/ignis_autograd/test_demo.py") for i in exhaustive)
