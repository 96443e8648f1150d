"""ignis.fft: every function against numpy.fft in float64 on random data, on every device; dtypes,
norms, cropping and padding, axes, and the errors."""

from __future__ import annotations

import ignis.fft as F
import numpy as np
import pytest

import ignis
from ignis import DTypeError, ShapeError

NORMS = ["backward", "ortho", "forward"]
TOL = {
    "complex64": dict(rtol=2e-5, atol=2e-5),
    "complex128": dict(rtol=1e-12, atol=1e-12),
    "float32": dict(rtol=2e-5, atol=2e-5),
    "float64": dict(rtol=1e-12, atol=1e-12),
}
REAL_OF = {"complex64": "float32", "complex128": "float64"}
COMPLEX_OF = {"float32": "complex64", "float64": "complex128"}


def _complex(rng, shape, dtype):
    v = rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
    return v.astype(dtype)


def _close(got, want, dtype):
    np.testing.assert_allclose(got.to_host(), want, **TOL[dtype])


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
@pytest.mark.parametrize("name", ["fft", "ifft"])
def test_complex_transform_matches_numpy(device, rng, name, dtype, norm) -> None:
    v = _complex(rng, (3, 10, 4), dtype)
    x = ignis.asarray(v, device=device)
    for axis, n in ((-1, None), (1, None), (1, 7), (0, 6), (-2, 16)):
        got = getattr(F, name)(x, n=n, axis=axis, norm=norm)
        want = getattr(np.fft, name)(v.astype(np.complex128), n=n, axis=axis, norm=norm)
        assert got.dtype == dtype and got.shape == want.shape and got.device == x.device
        _close(got, want, dtype)


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_real_transforms_match_numpy(device, rng, dtype, norm) -> None:
    v = rng.standard_normal((5, 9)).astype(dtype)
    x = ignis.asarray(v, device=device)
    cdt = COMPLEX_OF[dtype]
    for axis, n in ((-1, None), (0, None), (-1, 12), (-1, 4), (0, 3)):
        got = F.rfft(x, n=n, axis=axis, norm=norm)
        want = np.fft.rfft(v.astype(np.float64), n=n, axis=axis, norm=norm)
        assert got.dtype == cdt and got.shape == want.shape
        _close(got, want, cdt)
        spec = np.fft.rfft(v.astype(np.float64), axis=axis)
        s = ignis.asarray(spec.astype(cdt), device=device)
        for m in (None, 2 * (spec.shape[axis] - 1) + 1, 5):
            back = F.irfft(s, n=m, axis=axis, norm=norm)
            assert back.dtype == dtype
            _close(back, np.fft.irfft(spec, n=m, axis=axis, norm=norm), dtype)


@pytest.mark.parametrize("norm", NORMS)
def test_hermitian_transforms_match_numpy(device, rng, norm) -> None:
    c = _complex(rng, (4, 6), "complex128")
    r = rng.standard_normal((4, 7))
    _close(F.hfft(ignis.asarray(c, device=device), norm=norm), np.fft.hfft(c, norm=norm), "float64")
    _close(
        F.hfft(ignis.asarray(c, device=device), n=9, axis=0, norm=norm),
        np.fft.hfft(c, n=9, axis=0, norm=norm),
        "float64",
    )
    _close(
        F.ihfft(ignis.asarray(r, device=device), norm=norm),
        np.fft.ihfft(r, norm=norm),
        "complex128",
    )


@pytest.mark.parametrize("norm", NORMS)
def test_n_dimensional_transforms_match_numpy(device, rng, norm) -> None:
    v = _complex(rng, (3, 4, 5), "complex128")
    x = ignis.asarray(v, device=device)
    for s, axes in ((None, None), (None, (0, 2)), ((6, 3), (2, 0)), ((2, 8), (-2, -1))):
        _close(
            F.fftn(x, s=s, axes=axes, norm=norm),
            np.fft.fftn(v, s=s, axes=axes, norm=norm),
            "complex128",
        )
        _close(
            F.ifftn(x, s=s, axes=axes, norm=norm),
            np.fft.ifftn(v, s=s, axes=axes, norm=norm),
            "complex128",
        )
    r = rng.standard_normal((3, 4, 6))
    xr = ignis.asarray(r, device=device)
    for s, axes in ((None, None), (None, (0, 1)), ((5, 4), (1, 2))):
        spec = np.fft.rfftn(r, s=s, axes=axes, norm=norm)
        _close(F.rfftn(xr, s=s, axes=axes, norm=norm), spec, "complex128")
        back_axes = axes if axes is not None else (0, 1, 2)
        out_s = s if s is not None else tuple(r.shape[a] for a in back_axes)
        _close(
            F.irfftn(ignis.asarray(spec, device=device), s=out_s, axes=back_axes, norm=norm),
            np.fft.irfftn(spec, s=out_s, axes=back_axes, norm=norm),
            "float64",
        )


def test_a_real_input_of_the_complex_transforms_is_taken_as_complex(device, rng) -> None:
    v = rng.standard_normal((2, 8)).astype(np.float32)
    got = F.fft(ignis.asarray(v, device=device))
    assert got.dtype == ignis.complex64
    _close(got, np.fft.fft(v.astype(np.float64)), "complex64")


def test_round_trips(device, rng) -> None:
    v = _complex(rng, (64, 33), "complex64")
    x = ignis.asarray(v, device=device)
    _close(F.ifft(F.fft(x, axis=0), axis=0), v, "complex64")
    r = ignis.asarray(rng.standard_normal((3, 50)), device=device)
    _close(F.irfft(F.rfft(r), n=50), r.to_host(), "float64")


def test_strided_and_empty_inputs(device, rng) -> None:
    v = _complex(rng, (6, 8), "complex128")
    x = ignis.asarray(v, device=device)[::2, 1::2]  # a strided view
    _close(F.fft(x, axis=0), np.fft.fft(v[::2, 1::2], axis=0), "complex128")
    e = ignis.zeros((0, 4), dtype="complex64", device=device)
    assert F.fft(e).shape == (0, 4) and F.rfft(ignis.zeros((3, 0, 8), device=device)).shape == (
        3,
        0,
        5,
    )


def test_frequencies_and_shifts(device) -> None:
    for n, d in ((8, 0.1), (7, 1.0), (1, 2.0)):
        f = F.fftfreq(n, d=d, device=device)
        assert f.dtype == ignis.float32 and f.device == ignis.asarray(0, device=device).device
        np.testing.assert_allclose(f.to_host(), np.fft.fftfreq(n, d=d), rtol=1e-6)
        np.testing.assert_allclose(
            F.rfftfreq(n, d=d, dtype="float64", device=device).to_host(),
            np.fft.rfftfreq(n, d=d),
            rtol=1e-15,
        )
    a = np.arange(30.0).reshape(5, 6)
    x = ignis.asarray(a, device=device)
    for axes in (None, 0, (1,), (0, 1)):
        np.testing.assert_array_equal(
            F.fftshift(x, axes=axes).to_host(), np.fft.fftshift(a, axes=axes)
        )
        np.testing.assert_array_equal(
            F.ifftshift(x, axes=axes).to_host(), np.fft.ifftshift(a, axes=axes)
        )


def test_bad_input_names_the_function(device) -> None:
    x = ignis.asarray(np.ones(4, dtype=np.complex64), device=device)
    with pytest.raises(ValueError, match="fft.fft: norm must be one of"):
        F.fft(x, norm="unitary")
    with pytest.raises(ValueError, match="fft.ifft: n must be at least 1, got 0"):
        F.ifft(x, n=0)
    with pytest.raises(ValueError, match="fft.fft: axis 3 is out of range"):
        F.fft(x, axis=3)
    with pytest.raises(DTypeError, match="fft.rfft: x has dtype complex64; expected a real"):
        F.rfft(x)
    with pytest.raises(DTypeError, match="fft.fft: x has dtype int32"):
        F.fft(ignis.asarray(np.ones(4, dtype=np.int32), device=device))
    with pytest.raises(DTypeError, match="fft.fft: x has dtype float16"):
        F.fft(ignis.asarray(np.ones(4), dtype="float16", device=device))
    with pytest.raises(ShapeError, match="fft.fft: x must have at least one dimension"):
        F.fft(ignis.asarray(1j, device=device))
    with pytest.raises(TypeError, match="fft.fft: x must be an NvArray, got list"):
        F.fft([1.0, 2.0])
    with pytest.raises(ValueError, match="fft.fftn: axes must be distinct"):
        F.fftn(ignis.asarray(np.ones((2, 2), dtype=np.complex64), device=device), axes=(0, 0))
    with pytest.raises(
        ValueError, match="fft.irfft: the output length 2 \\* \\(m - 1\\) must be at least 1"
    ):
        F.irfft(ignis.asarray(np.ones(1, dtype=np.complex64), device=device))
    with pytest.raises(DTypeError, match="fft.fftfreq: dtype must be float32 or float64"):
        F.fftfreq(4, dtype="int32")


@pytest.mark.gpu
def test_without_cufft_a_gpu_call_names_the_extra(monkeypatch) -> None:
    if not ignis.is_available():
        pytest.skip("needs a CUDA GPU")
    from ignis import _cufft

    monkeypatch.setattr(_cufft, "load", lambda: None)
    monkeypatch.setattr(_cufft, "unavailable_reason", lambda: "not found")
    x = ignis.asarray(np.ones(8, dtype=np.complex64), device="cuda:0")
    with pytest.raises(_cufft.CufftNotFoundError, match=r"cufft-cu1[23]"):
        F.fft(x)


def test_cufft_status_errors_are_explained() -> None:
    from ignis import CudaError, _cufft

    with pytest.raises(
        CudaError,
        match=r"CUFFT_INVALID_SIZE: the transform size is not supported \(in cufftPlanMany\)",
    ):
        _cufft.check(8, "cufftPlanMany")
    _cufft.check(0, "cufftExecC2C")  # success: nothing raised
