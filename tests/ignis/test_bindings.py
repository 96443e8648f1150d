"""A missing NVRTC library or cuda-bindings: clear ignis errors that say what installs it, an
environment report without a traceback, and CPU arrays that keep working. No GPU needed.

In this process the NVRTC library is made to fail where ignis loads it (``_bindings._load_nvrtc``,
the one place); in subprocesses, cuda.bindings is blocked before ignis is imported and NVRTC is
hidden from cuda.pathfinder, the way a base ``pip install ./ignis`` without an extra leaves them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid

import numpy as np
import pytest
from cuda.pathfinder import DynamicLibNotFoundError
from ignis.__main__ import main

import ignis
from ignis import CompileOptions, _bindings, jit

MISSING = 'Failure finding "libnvrtc.so.13 or libnvrtc.so.12"'
HINTS = ('pip install "ignis-cuda[cu12]"', '"ignis-cuda[cu13]"', 'pip install "./ignis[cu12]"')
SCALE = 'extern "C" __global__ void scale(float* x, float a) { x[threadIdx.x] *= a; }\n'


@pytest.fixture
def nvrtc_missing(monkeypatch, tmp_path):
    """The NVRTC library cannot be found, as cuda.pathfinder reports it."""

    def load() -> None:
        raise DynamicLibNotFoundError(MISSING)

    monkeypatch.setattr(_bindings, "_load_nvrtc", load)
    monkeypatch.setitem(_bindings._nvrtc_state, "ok", False)
    monkeypatch.setenv("IGNIS_CACHE_DIR", str(tmp_path / "cache"))
    jit.clear_cache(memory=True)


def unique(source: str) -> str:
    return f"// {uuid.uuid4()}\n{source}"


def test_compile_says_nvrtc_is_missing_and_what_installs_it(nvrtc_missing):
    with pytest.raises(ignis.NvrtcNotFoundError) as info:
        ignis.compile(unique(SCALE), CompileOptions(arch="sm_90"))
    err = info.value
    assert isinstance(err, ignis.IgnisError) and not isinstance(err, ignis.CompileError)
    message = str(err)
    assert "NVRTC" in message and "was not found" in message and MISSING in message
    for hint in HINTS:
        assert hint in message
    with pytest.raises(ignis.NvrtcNotFoundError):
        _bindings.nvrtc_version()
    assert not _bindings.nvrtc_available()
    assert _bindings.nvrtc_unavailable_reason() == message


def test_nvrtc_works_again_once_it_can_be_loaded(nvrtc_missing, monkeypatch):
    with pytest.raises(ignis.NvrtcNotFoundError):
        ignis.compile(unique(SCALE), CompileOptions(arch="sm_90"))
    monkeypatch.undo()  # the library is back: a failed load is not remembered
    assert ignis.compile(unique(SCALE), CompileOptions(arch="sm_90")).kind == "cubin"


def test_cpu_arrays_do_not_need_nvrtc(nvrtc_missing):
    a = ignis.NvArray.from_host([1.0, 2.0], device="cpu") + 1
    assert a.to_host().tolist() == [2.0, 3.0]
    assert ignis.exp(ignis.zeros(3, device="cpu")).to_host().tolist() == [1.0, 1.0, 1.0]


def test_the_report_prints_the_missing_nvrtc_without_a_traceback(nvrtc_missing, capsys):
    code = main(["--no-self-check"])
    out = capsys.readouterr().out
    nvrtc_line = next(line for line in out.splitlines() if line.strip().startswith("NVRTC"))
    assert "was not found" in nvrtc_line and all(hint in nvrtc_line for hint in HINTS)
    if not ignis.is_available():
        assert code == 0
        assert "kernels compile once NVRTC is installed" in out


def test_the_report_says_which_gemm_path_and_libraries_are_in_use(capsys, monkeypatch):
    from ignis import _cublas, _cufft

    main(["--no-self-check"])
    lines = capsys.readouterr().out.splitlines()
    cublas = next(line for line in lines if line.strip().startswith("cuBLAS"))
    if _cublas.load() is not None:
        version = ".".join(map(str, _cublas.load().version))
        assert f"{version} (matrix products on cuBLAS)" in cublas
    else:
        assert "own GEMM kernels" in cublas and "cublas-cu1" in cublas
    assert any(line.strip().startswith(("cuSOLVER", "cuFFT")) for line in lines)
    # a library that is missing is a line naming the extra, not an error
    monkeypatch.setattr(_cufft, "load", lambda: None)
    main(["--no-self-check"])
    out = capsys.readouterr().out.splitlines()
    cufft = next(line for line in out if line.strip().startswith("cuFFT"))
    assert "not installed" in cufft and "cufft-cu1" in cufft


def test_the_report_fails_the_self_check_on_a_gpu_without_nvrtc(nvrtc_missing, capsys):
    if not ignis.is_available():
        pytest.skip("needs a GPU: without one the report exits 0")
    assert main([]) == 1
    assert "self-check FAILED: NVRTC was not found" in capsys.readouterr().out


# --- in a fresh process ------------------------------------------------------------------------

BLOCK_BINDINGS = "import sys\nsys.modules['cuda.bindings'] = None  # import cuda.bindings fails\n"
HIDE_NVRTC = textwrap.dedent(
    """
    import cuda.pathfinder as pf
    _real = pf.load_nvidia_dynamic_lib

    def _load(name, *args, **kwargs):
        if name == "nvrtc":
            raise pf.DynamicLibNotFoundError(
                'Failure finding "libnvrtc.so.13 or libnvrtc.so.12" (hidden by the test)')
        return _real(name, *args, **kwargs)

    pf.load_nvidia_dynamic_lib = _load
    """
)
REPORT = "import runpy\nrunpy.run_module('ignis', run_name='__main__')\n"


def _run(script: str) -> subprocess.CompletedProcess:
    # CUDA_VISIBLE_DEVICES="" hides every GPU: the no-GPU report, whatever the machine has.
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    return subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )


def test_the_report_without_cuda_bindings():
    proc = _run(BLOCK_BINDINGS + REPORT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stdout.splitlines()
    bindings_line = next(line for line in lines if line.strip().startswith("cuda-bindings"))
    assert "cuda-bindings is not importable" in bindings_line
    assert all(hint in bindings_line for hint in HINTS)
    assert any(line.strip().startswith("NVRTC") and "cuda-bindings" in line for line in lines)
    assert "no GPU: cuda-bindings is not installed" in proc.stdout


def test_ignis_and_cpu_arrays_work_without_cuda_bindings():
    script = BLOCK_BINDINGS + textwrap.dedent(
        """
        import ignis
        a = ignis.NvArray.from_host([1.0], device="cpu") + 1
        assert a.to_host().tolist() == [2.0], a
        assert ignis.is_available() is False and ignis.device_count() == 0
        try:
            ignis.compile("__global__ void k() {}", ignis.CompileOptions(arch="sm_90"))
        except ignis.NvrtcNotFoundError as exc:
            assert "cuda-bindings is not importable" in str(exc), exc
            assert 'ignis-cuda[cu12]' in str(exc), exc
        else:
            raise AssertionError("compile without cuda-bindings did not raise")
        try:
            ignis.alloc(16)
        except ignis.NoDeviceError as exc:
            assert 'ignis-cuda[cu12]' in str(exc), exc
        else:
            raise AssertionError("alloc without cuda-bindings did not raise")
        print("OK")
        """
    )
    proc = _run(script)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stdout + proc.stderr


def test_the_report_without_the_nvrtc_library():
    proc = _run(HIDE_NVRTC + REPORT)
    if "NVRTC           1" in proc.stdout:
        pytest.skip("this cuda-bindings does not load NVRTC through load_nvidia_dynamic_lib")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    nvrtc_line = next(line for line in proc.stdout.splitlines() if line.startswith("  NVRTC"))
    assert "libnvrtc" in nvrtc_line and "hidden by the test" in nvrtc_line
    assert all(hint in nvrtc_line for hint in HINTS)


def test_compile_without_the_nvrtc_library_in_a_fresh_process():
    script = HIDE_NVRTC + textwrap.dedent(
        """
        import ignis
        try:
            ignis.compile("__global__ void k() {}", ignis.CompileOptions(arch="sm_90"))
        except ignis.NvrtcNotFoundError as exc:
            print("RAISED", exc)
        else:
            print("COMPILED")
        print(ignis.asarray([1.0, 2.0], device="cpu").sum().to_host())
        """
    )
    proc = _run(script)
    assert proc.returncode == 0, proc.stderr
    if "COMPILED" in proc.stdout:
        pytest.skip("this cuda-bindings does not load NVRTC through load_nvidia_dynamic_lib")
    assert "RAISED NVRTC (the CUDA run-time compiler, libnvrtc) was not found" in proc.stdout
    assert np.isclose(float(proc.stdout.split()[-1]), 3.0)
