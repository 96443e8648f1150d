"""compile_kernel where no GPU exists: the source is compiled first (a mistake in it is a
CompileError), and only then is the missing GPU a NoDeviceError that says the code compiled.

The bindings seam is told there is no GPU, so this runs the same on any machine."""

from __future__ import annotations

import uuid

import pytest

import ignis
from ignis import CompileOptions, _bindings, jit

GOOD = 'extern "C" __global__ void fill(float* x, float v) { x[threadIdx.x] = v; }\n'
BAD = 'extern "C" __global__ void fill(float* x, float v) { x[threadIdx.x] = w; }\n'
REASON = "the NVIDIA driver library could not be loaded (test)"


@pytest.fixture(autouse=True)
def no_gpu(monkeypatch, tmp_path):
    monkeypatch.setattr(_bindings, "_init_state", {"done": True, "ok": False, "reason": REASON})
    monkeypatch.delenv("IGNIS_ARCH", raising=False)
    monkeypatch.setenv("IGNIS_CACHE_DIR", str(tmp_path / "cache"))
    jit.clear_cache(memory=True)


def unique(source: str) -> str:
    return f"// {uuid.uuid4()}\n{source}"


def test_a_mistake_in_the_source_is_a_compile_error():
    with pytest.raises(ignis.CompileError, match='identifier "w" is undefined') as info:
        ignis.compile_kernel(unique(BAD), "fill")
    assert "--gpu-architecture=sm_90" in info.value.options


def test_good_source_compiles_then_says_there_is_no_gpu():
    before = jit.cache_stats().misses
    with pytest.raises(ignis.NoDeviceError) as info:
        ignis.compile_kernel(unique(GOOD), "fill")
    message = str(info.value)
    assert message.startswith("compile_kernel: 'fill' compiled fine for sm_90, but there is no GPU")
    assert REASON in message
    assert jit.cache_stats().misses == before + 1  # it did compile (and the cache has it now)


def test_the_no_gpu_arch_comes_from_ignis_arch_or_the_options(monkeypatch):
    monkeypatch.setenv("IGNIS_ARCH", "sm_80")
    with pytest.raises(ignis.NoDeviceError, match="compiled fine for sm_80,"):
        ignis.compile_kernel(unique(GOOD), "fill")
    with pytest.raises(ignis.NoDeviceError, match="compiled fine for compute_75,"):
        ignis.compile_kernel(unique(GOOD), "fill", options=CompileOptions(arch="compute_75"))


def test_a_device_argument_is_checked_before_anything_else():
    with pytest.raises(ValueError, match="Device: invalid device 'tpu:0'; expected one of"):
        ignis.compile_kernel(unique(GOOD), "fill", device="tpu:0")
    # A valid device argument: compiled, then no GPU.
    with pytest.raises(ignis.NoDeviceError, match="compiled fine"):
        ignis.compile_kernel(unique(GOOD), "fill", device="cuda:1")


def test_bad_arguments_are_type_errors():
    with pytest.raises(TypeError, match="compile_kernel: name must be a non-empty string"):
        ignis.compile_kernel(GOOD, "")
    with pytest.raises(TypeError, match="compile_kernel: options must be a CompileOptions"):
        ignis.compile_kernel(GOOD, "fill", options={"arch": "sm_90"})  # type: ignore[arg-type]
