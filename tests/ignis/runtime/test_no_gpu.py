"""Without a GPU or driver, ignis imports, reports no devices and raises NoDeviceError."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

import ignis

SCRIPT = textwrap.dedent(
    """
    import ignis
    assert ignis.is_available() is False, "is_available"
    assert ignis.device_count() == 0, "device_count"
    for call in (lambda: ignis.Device(0), lambda: ignis.alloc(16), ignis.Stream, ignis.Event,
                 lambda: ignis.synchronize(), lambda: ignis.current_device()):
        try:
            call()
        except ignis.NoDeviceError as exc:
            assert "no CUDA device" in str(exc), str(exc)
        else:
            raise AssertionError("no NoDeviceError")
    print("NO-GPU-OK")
    """
)


def test_no_device_behaviour_in_a_process_that_sees_no_gpu() -> None:
    # CUDA_VISIBLE_DEVICES="" hides every GPU, so this runs the no-GPU path on any machine.
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "NO-GPU-OK" in proc.stdout


def test_errors_form_one_hierarchy() -> None:
    for cls in (ignis.CudaError, ignis.CompileError, ignis.OutOfMemoryError, ignis.NoDeviceError,
                ignis.ShapeError, ignis.DTypeError, ignis.LaunchError, ignis.DeviceMismatchError):
        assert issubclass(cls, ignis.IgnisError)
    assert issubclass(ignis.ShapeError, ValueError)
    assert issubclass(ignis.DTypeError, TypeError)
    assert issubclass(ignis.OutOfMemoryError, MemoryError)


def test_cuda_error_names_code_description_and_call() -> None:
    err = ignis.CudaError("CUDA_ERROR_INVALID_VALUE", "invalid argument", "cuMemAlloc")
    assert str(err) == "CUDA_ERROR_INVALID_VALUE: invalid argument (in cuMemAlloc)"
    assert (err.code, err.description, err.call) == ("CUDA_ERROR_INVALID_VALUE", "invalid argument", "cuMemAlloc")
    assert not err.is_sticky
    sticky = ignis.CudaError("CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access", "cuCtxSynchronize")
    assert sticky.is_sticky and "restart the process" in str(sticky)


def test_out_of_memory_error_reports_sizes() -> None:
    err = ignis.OutOfMemoryError(3 * 2**40, 2**30, 2**37, 0, "cuMemAllocAsync")
    text = str(err)
    assert "3.00 TiB" in text and str(3 * 2**40) in text and "1.00 GiB free of 128.00 GiB" in text
    assert err.requested == 3 * 2**40 and err.free == 2**30 and err.total == 2**37


def test_check_turns_a_status_into_cuda_error() -> None:
    from ignis._bindings import check, driver

    assert check((driver.CUresult.CUDA_SUCCESS, 7), "cuFoo") == 7
    assert check((driver.CUresult.CUDA_SUCCESS, 1, 2), "cuFoo") == (1, 2)
    assert check((driver.CUresult.CUDA_SUCCESS,), "cuFoo") is None
    with pytest.raises(ignis.CudaError) as info:
        check((driver.CUresult.CUDA_ERROR_INVALID_VALUE,), "cuFoo")
    assert info.value.code == "CUDA_ERROR_INVALID_VALUE" and "(in cuFoo)" in str(info.value)


@pytest.mark.skipif(ignis.is_available(), reason="this machine has a GPU")
def test_in_this_process_gpu_calls_raise_no_device_error() -> None:
    assert ignis.device_count() == 0
    with pytest.raises(ignis.NoDeviceError, match="no CUDA device is available"):
        ignis.alloc(1)
