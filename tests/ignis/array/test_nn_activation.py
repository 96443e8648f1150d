"""ignis.nn.gelu_backward / silu_backward / sigmoid_backward / tanh_backward / relu_backward:
against float64 derivatives written here from the textbook formulas (and PyTorch's autograd where
it is installed), every dtype pair, odd sizes, non-contiguous and empty input, NaN/Inf, bad input;
every kernel instance compiles for sm_90; launches on the stand-in GPU pick the vector path only
when the operands are aligned."""

from __future__ import annotations

import math
import struct
import sys
from pathlib import Path

import numpy as np
import pytest
from array_helpers import FLOATS, TOL, np_dtype, random_array

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime"))
import fake_gpu  # noqa: E402  (the stand-in GPU of tests/ignis/runtime)
import ignis.nn
from ignis._array._cuda_backend import activation as cuda_activation

import ignis
from ignis import CompileOptions, _sources

KINDS = ["gelu", "gelu_tanh", "silu", "sigmoid", "tanh", "relu"]
_erf = np.vectorize(math.erf, otypes=[np.float64])


def nv(values: np.ndarray, device: str, dtype: str | None = None) -> ignis.NvArray:
    return ignis.NvArray.from_host(values, dtype=dtype, device=device)


def forward64(kind: str, x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    if kind == "sigmoid":
        return 1.0 / (1.0 + np.exp(-x))
    if kind == "tanh":
        return np.tanh(x)
    if kind == "relu":
        return np.maximum(x, 0.0)
    raise AssertionError(kind)


def derivative64(kind: str, s: np.ndarray) -> np.ndarray:
    """f' in float64 from the saved array (x for gelu/silu, y for sigmoid/tanh/relu)."""
    s = s.astype(np.float64)
    with np.errstate(all="ignore"):
        if kind == "gelu":  # d/dx x Phi(x)
            return 0.5 * (1.0 + _erf(s / math.sqrt(2.0))) + s * np.exp(-s * s / 2) / math.sqrt(
                2 * math.pi
            )
        if kind == "gelu_tanh":  # d/dx 0.5 x (1 + tanh(u)), u = k (x + c x^3)
            k, c = math.sqrt(2 / math.pi), 0.044715
            u = k * (s + c * s**3)
            sech2 = 1.0 / np.cosh(u) ** 2
            return 0.5 * (1.0 + np.tanh(u)) + 0.5 * s * sech2 * k * (1.0 + 3 * c * s**2)
        if kind == "silu":  # d/dx x sig(x)
            sig = 1.0 / (1.0 + np.exp(-s))
            return sig + s * sig * (1.0 - sig)
        if kind == "sigmoid":
            return s * (1.0 - s)
        if kind == "tanh":
            return 1.0 - s * s
        if kind == "relu":
            return (s > 0).astype(np.float64)
    raise AssertionError(kind)


def call(kind: str, grad: ignis.NvArray, saved: ignis.NvArray) -> ignis.NvArray:
    if kind == "gelu":
        return ignis.nn.gelu_backward(grad, saved)
    if kind == "gelu_tanh":
        return ignis.nn.gelu_backward(grad, saved, approximate="tanh")
    return getattr(ignis.nn, f"{kind}_backward")(grad, saved)


def saved_host(rng: np.random.Generator, kind: str, shape: tuple, dtype: str) -> np.ndarray:
    """The saved array in ``dtype``: x for gelu/silu, y = f(x) rounded to dtype otherwise."""
    x = random_array(rng, shape, dtype)
    if kind in ("sigmoid", "tanh", "relu"):
        return forward64(kind, x).astype(np_dtype(dtype))
    return x


def check(got: ignis.NvArray, g: np.ndarray, s: np.ndarray, kind: str, out_dtype: str) -> None:
    assert got.dtype.name == out_dtype
    assert got.shape == g.shape
    want = g.astype(np.float64) * derivative64(kind, s)
    if kind == "relu":
        want = np.where(s.astype(np.float64) > 0, g.astype(np.float64), 0.0)
    rtol, atol = TOL[out_dtype]
    # A few units of the output's rounding, plus the device's float32 transcendentals (2 ulp
    # tanhf/erfcf/expf, amplified by the 1 - t*t cancellation of gelu_tanh) for float32.
    atol = max(atol * 8, 2e-5) if out_dtype == "float32" else atol * 8
    np.testing.assert_allclose(
        got.to_host().astype(np.float64), want, rtol=rtol * 4, atol=atol, equal_nan=True
    )


# --- values ------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", [(1,), (31,), (33,), (7, 149), (4099,)])
def test_matches_float64_derivative(
    device: str, rng: np.random.Generator, kind: str, dtype: str, shape: tuple
) -> None:
    s = saved_host(rng, kind, shape, dtype)
    g = random_array(rng, shape, dtype, -2.0, 2.0)
    got = call(kind, nv(g, device), nv(s, device))
    check(got, g, s, kind, dtype)
    assert got.numel < 31 or np.count_nonzero(got.to_host()) > got.numel // 4


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_float32_gradient_of_a_16bit_array(
    device: str, rng: np.random.Generator, kind: str, dtype: str
) -> None:
    s = saved_host(rng, kind, (5, 203), dtype)
    g = random_array(rng, (5, 203), "float32", -2.0, 2.0)
    got = call(kind, nv(g, device), nv(s, device))
    check(got, g, s, kind, "float32")  # one float32 rounding: float32 tolerances


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_non_contiguous_and_misaligned_inputs(
    device: str, rng: np.random.Generator, kind: str, dtype: str
) -> None:
    s = saved_host(rng, kind, (40, 66), dtype)
    g = random_array(rng, (66, 40), dtype, -2.0, 2.0)
    sv = nv(s, device)[:, 1::2]  # strided
    gv = nv(g, device).T[:, ::2]  # transposed and strided
    got = call(kind, gv, sv)
    check(got, g.T[:, ::2], s[:, 1::2], kind, dtype)
    # contiguous views that start one element past an aligned address (the scalar path)
    flat_s, flat_g = nv(s.reshape(-1), device), nv(g.reshape(-1), device)
    got = call(kind, flat_g[1:], flat_s[1:])
    check(got, g.reshape(-1)[1:], s.reshape(-1)[1:], kind, dtype)


@pytest.mark.parametrize("kind", KINDS)
def test_empty_input(device: str, kind: str) -> None:
    z = ignis.zeros((0, 5), dtype="float32", device=device)
    got = call(kind, z, z)
    assert got.shape == (0, 5) and got.dtype == ignis.float32


@pytest.mark.parametrize("dtype", FLOATS)
def test_nan_and_inf(device: str, dtype: str) -> None:
    inf, nan = math.inf, math.nan
    x = np.array([inf, -inf, nan, 0.0, -0.0, 2.0], dtype=np_dtype(dtype))
    g = np.full(x.shape, 1.5, dtype=np_dtype(dtype))
    gx, xx = nv(g, device), nv(x, device)
    # gelu/silu: the plain formulas give NaN at +-Inf (inf * 0) and for NaN, as PyTorch
    for kind in ("gelu", "gelu_tanh", "silu"):
        got = call(kind, gx, xx).to_host().astype(np.float64)
        assert np.isnan(got[:3]).all(), (kind, got)
        np.testing.assert_allclose(got[3:5], [0.75, 0.75], rtol=TOL[dtype][0])
    y = np.array([1.0, -1.0, nan, 0.0, 0.5, inf], dtype=np_dtype(dtype))
    yy = nv(y, device)
    got = ignis.nn.tanh_backward(gx, yy).to_host().astype(np.float64)
    np.testing.assert_allclose(got[[0, 1, 3, 4]], [0.0, 0.0, 1.5, 1.125], rtol=TOL[dtype][0])
    assert np.isnan(got[2]) and got[5] == -inf
    got = ignis.nn.sigmoid_backward(gx, yy).to_host().astype(np.float64)
    assert np.isnan(got[2]) and got[5] == -inf and got[0] == 0.0 and got[4] == 0.375
    got = ignis.nn.relu_backward(gx, yy).to_host().astype(np.float64)
    np.testing.assert_array_equal(got, [1.5, 0.0, 0.0, 0.0, 1.5, 1.5])  # NaN y gives 0


def test_agrees_with_torch_autograd(rng: np.random.Generator) -> None:
    torch = pytest.importorskip("torch")
    x = rng.uniform(-6, 6, size=(257,))
    g = rng.uniform(-2, 2, size=x.shape)
    xt = torch.tensor(x, requires_grad=True)
    fns = {
        "gelu": lambda t: torch.nn.functional.gelu(t),
        "gelu_tanh": lambda t: torch.nn.functional.gelu(t, approximate="tanh"),
        "silu": torch.nn.functional.silu,
        "sigmoid": torch.sigmoid,
        "tanh": torch.tanh,
        "relu": torch.relu,
    }
    for kind, fn in fns.items():
        y = fn(xt)
        (want,) = torch.autograd.grad(y, xt, torch.tensor(g))
        saved = x if kind in ("gelu", "gelu_tanh", "silu") else y.detach().numpy()
        got = call(kind, nv(g, "cpu"), nv(saved, "cpu")).to_host()
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-12, atol=1e-14, err_msg=kind)


# --- bad input ---------------------------------------------------------------------------------


def test_bad_input_names_the_operation() -> None:
    f32 = ignis.ones((3, 4), dtype="float32")
    with pytest.raises(TypeError, match=r"gelu_backward: grad must be an NvArray, got list"):
        ignis.nn.gelu_backward([1.0], f32)
    with pytest.raises(TypeError, match=r"silu_backward: x must be an NvArray, got float"):
        ignis.nn.silu_backward(f32, 1.0)
    with pytest.raises(ignis.ShapeError, match=r"tanh_backward: grad has shape \(3, 4\), "
                       r"expected y's shape \(4, 3\)"):
        ignis.nn.tanh_backward(f32, ignis.ones((4, 3), dtype="float32"))
    with pytest.raises(ignis.DTypeError, match=r"sigmoid_backward: y must be a floating array, "
                       r"got int32"):
        ignis.nn.sigmoid_backward(f32, ignis.ones((3, 4), dtype="int32"))
    with pytest.raises(ignis.DTypeError, match=r"relu_backward: grad has dtype float64, "
                       r"expected float32 \(for y float32\)"):
        ignis.nn.relu_backward(ignis.ones((3, 4), dtype="float64"), f32)
    with pytest.raises(ignis.DTypeError, match=r"expected bfloat16 or float32 \(for x bfloat16\)"):
        ignis.nn.gelu_backward(ignis.ones((3, 4), dtype="float16"),
                               ignis.ones((3, 4), dtype="bfloat16"))
    with pytest.raises(ValueError, match=r"gelu_backward: approximate must be 'none' or 'tanh', "
                       r"got 'fast'"):
        ignis.nn.gelu_backward(f32, f32, approximate="fast")


# --- kernels -----------------------------------------------------------------------------------


@pytest.mark.exhaustive
def test_every_kernel_instance_compiles_for_sm90() -> None:
    names = cuda_activation.kernel_names()
    assert len(names) == len(set(names)) == 6 * 6 * 2
    obj = ignis.compile(
        _sources.read_source("activation.cu"), CompileOptions(arch="sm_90"), name_expressions=names
    )
    assert obj.log == ""
    assert sorted(obj.lowered_names) == sorted(names)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch):
    g = fake_gpu.install(monkeypatch)
    monkeypatch.setattr(cuda_activation, "library_kernel", fake_gpu._library_kernel)
    yield g
    fake_gpu.uninstall()


def _launches(gpu: fake_gpu.FakeGpu) -> list:
    return [launch for launch in gpu.launches if launch[0].startswith("ignis::act::")]


@pytest.mark.parametrize(
    ("saved", "grad", "n", "types", "grid"),
    [
        ("float32", "float32", 2**24, "float, float", 132 * 16),  # capped grid
        ("bfloat16", "bfloat16", 8 * 256 * 3, "ignis::bfloat16, ignis::bfloat16", 3),
        ("bfloat16", "float32", 4 * 256 * 5, "ignis::bfloat16, float", 5),  # 4 per step
        ("float64", "float64", 2 * 256 + 1, "double, double", 2),
    ],
)
def test_fake_gpu_vector_launches(fake, saved: str, grad: str, n: int, types: str,
                                  grid: int) -> None:
    x = ignis.empty((n,), dtype=saved, device="cuda:0")
    g = ignis.empty((n,), dtype=grad, device="cuda:0")
    out = ignis.nn.gelu_backward(g, x)
    ((name, grd, block, _, args),) = _launches(fake)
    assert name == f"ignis::act::activation_backward<{types}, 0, true>"
    assert grd == (grid, 1, 1) and block == (256, 1, 1)
    ptrs = [struct.unpack("<Q", v)[0] for v in args[:3]]
    assert ptrs == [g.data_ptr, x.data_ptr, out.data_ptr]
    assert struct.unpack("<q", args[3])[0] == n


def test_fake_gpu_scalar_path_when_misaligned(fake) -> None:
    base = ignis.empty((1001,), dtype="float32", device="cuda:0")
    ignis.nn.tanh_backward(base[:1000], base[1:])  # y one element past a 16-byte boundary
    ((name, grid, _, _, _),) = _launches(fake)
    assert name == "ignis::act::activation_backward<float, float, 4, false>"
    assert grid == (4, 1, 1)
