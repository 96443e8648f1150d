"""The distributions' declared dependencies: what pip resolves from them.

pip takes a package's base dependencies before its extras' ones: a package named in both, with a
wider range in the base (`cuda-bindings>=12.6,<14` beside `[cu12]`'s `<13`), makes it download
the newest release for the base and then backtrack. These tests keep each CUDA package in the
extras only, and each extra on one CUDA major version.
"""

from __future__ import annotations

from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
requirements = pytest.importorskip("packaging.requirements")

ROOT = Path(__file__).resolve().parents[2]
CUDA_EXTRAS = {"cu12": 12, "cu13": 13, "cublas-cu12": 12, "cublas-cu13": 13,
               "cusolver-cu12": 12, "cusolver-cu13": 13, "cufft-cu12": 12, "cufft-cu13": 13,
               "nccl-cu12": 12, "nccl-cu13": 13}
# Wheels that number their releases on their own: CUDA major -> the wheel's major version
# (cuSOLVER 11.x ships with CUDA 12, 12.x with CUDA 13). Others carry the CUDA major.
WHEEL_MAJORS = {"nvidia-cusolver": {12: 11, 13: 12}, "nvidia-cufft": {12: 11, 13: 12}}


def _project(dist: str) -> dict:
    return tomllib.loads((ROOT / dist / "pyproject.toml").read_text())["project"]


def _names(reqs: list[str]) -> set[str]:
    return {requirements.Requirement(r).name.lower().replace("_", "-") for r in reqs}


def test_no_package_is_named_both_in_the_base_and_in_an_extra() -> None:
    project = _project("ignis")
    base = _names(project["dependencies"])
    for extra, reqs in project["optional-dependencies"].items():
        both = base & _names(reqs)
        assert not both, f"ignis[{extra}] names {sorted(both)}, which the base install names too"


def test_the_base_install_needs_no_cuda_package() -> None:
    # CPU arrays need numpy (and ml_dtypes for bfloat16); the GPU comes with [cu12] / [cu13].
    base = _names(_project("ignis")["dependencies"])
    assert not {n for n in base if n.startswith(("cuda-bindings", "nvidia-"))}


@pytest.mark.parametrize("extra", sorted(CUDA_EXTRAS))
def test_each_cuda_extra_admits_exactly_one_cuda_major_version(extra: str) -> None:
    major = CUDA_EXTRAS[extra]
    reqs = [requirements.Requirement(r) for r in _project("ignis")["optional-dependencies"][extra]]
    assert reqs, f"ignis[{extra}] is empty"
    for req in reqs:
        name = req.name.lower()
        if name.endswith(f"-cu{major}"):
            continue  # the wheel's name carries the major version
        # A bare name (cuda-bindings, nvidia-cuda-nvrtc, nvidia-cublas): its range must hold
        # only releases of this major version (of the wheel's own number for it).
        wanted = WHEEL_MAJORS.get(name, {}).get(major, major)
        admitted = {v for v in range(10, 20) if req.specifier.contains(f"{v}.9", prereleases=True)}
        assert admitted == {wanted}, (
            f"ignis[{extra}]: {req} admits versions {sorted(admitted)}, expected {wanted} "
            f"(CUDA {major})"
        )


@pytest.mark.parametrize("extra", ["cu12", "cu13"])
def test_the_gpu_extras_bring_cublas(extra: str) -> None:
    # The README's GPU command installs [cu12]: its matrix products must run on cuBLAS.
    names = _names(_project("ignis")["optional-dependencies"][extra])
    assert any(n.startswith("nvidia-cublas") for n in names), f"ignis[{extra}] lacks cuBLAS"


def test_every_extra_naming_a_cuda_package_is_checked() -> None:
    extras = _project("ignis")["optional-dependencies"]
    cuda = {e for e, reqs in extras.items()
            if any(n.startswith(("cuda-", "nvidia-")) for n in _names(reqs))}
    assert cuda <= set(CUDA_EXTRAS), f"add {sorted(cuda - set(CUDA_EXTRAS))} to CUDA_EXTRAS"


def test_autograd_depends_on_ignis_cuda_and_no_cuda_package() -> None:
    names = _names(_project("ignis_autograd")["dependencies"])
    assert "ignis-cuda" in names
    assert not {n for n in names if n.startswith(("cuda-", "nvidia-"))}
