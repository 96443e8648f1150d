"""ignis::float16 / ignis::bfloat16 constructors (from float, double, integers) and their
conversion back to float, in cuda_src/ignis_types.cuh.

They compile in user kernels with NVRTC (no GPU needed); compiled as host C++ they round
bit for bit like NumPy / ml_dtypes and an exact rational reference; on a GPU (marked ``gpu``) the
device path does too, and equals the header's own conversion functions."""

from __future__ import annotations

import bisect
import math
import shutil
import subprocess
import uuid
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

import ignis
from ignis import CompileOptions, _sources, jit

USER_KERNEL = r"""
#include "ignis_types.cuh"

extern "C" __global__ void convert(const float* x, const double* d, const int* k,
                                   ignis::float16* h, ignis::bfloat16* b, float* back,
                                   long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i >= n) return;
    ignis::bfloat16 y(x[i]);                  // direct-initialization from float
    h[i] = ignis::float16(x[i]);              // functional cast
    ignis::float16 from_double = d[i];        // copy-initialization from double
    ignis::bfloat16 from_int(k[i]);
    ignis::float16 zero{};                    // value-initialized: +0
    b[i] = y;
    float sum = y + float(h[i]);              // back to float, implicitly and explicitly
    back[i] = sum + from_double + from_int + zero + ignis::bfloat16(2) + ignis::float16(0.5);
}
"""


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("IGNIS_CACHE_DIR", str(tmp_path / "cache"))
    jit.clear_cache(memory=True)


@pytest.mark.parametrize("arch", ["sm_75", "sm_80", "sm_90", "compute_90"])
def test_user_kernel_with_the_constructors_compiles(arch):
    obj = ignis.compile(f"// {uuid.uuid4()}\n{USER_KERNEL}", CompileOptions(arch=arch))
    assert obj.log == "", obj.log  # no warnings either
    assert b"convert" in obj.code


def test_the_bits_idiom_of_the_old_structs_is_an_error_not_a_value():
    # float16{bits} meant "these bits" when float16 was a plain struct; it must not quietly
    # become a conversion of the number.
    src = USER_KERNEL.replace(
        "ignis::float16 zero{};", "ignis::float16 zero{(ignis::uint16)(k[i] & 0xffff)};"
    )
    with pytest.raises(ignis.CompileError, match="deleted function"):
        ignis.compile(src, CompileOptions(arch="sm_90"))
    fixed = USER_KERNEL.replace(
        "ignis::float16 zero{};", "ignis::float16 zero = ignis::float16::from_bits(0);"
    )
    assert ignis.compile(fixed, CompileOptions(arch="sm_90")).kind == "cubin"


# --- references ---------------------------------------------------------------------------------


class Format:
    """Exact round-to-nearest-even into a 16-bit format, by bisection over all its values."""

    def __init__(self, dtype: np.dtype, max_bits: int, inf_bits: int, overflow: int) -> None:
        bits = np.arange(max_bits + 1, dtype=np.uint16)
        self.values = [Fraction(float(v)) for v in bits.view(dtype).astype(np.float64)]
        self.values.append(Fraction(overflow))  # the next binade's start: rounds to infinity
        self.bits = [*range(max_bits + 1), inf_bits]

    def nearest(self, x: float | int) -> int:
        """The bits nearest ``x`` (ties to even); the sign of a float's zero is kept."""
        sign = 0x8000 if (math.copysign(1.0, x) < 0 if isinstance(x, float) else x < 0) else 0
        a = abs(Fraction(x))
        i = bisect.bisect_left(self.values, a)
        if i == len(self.values):
            return sign | self.bits[-1]
        if self.values[i] == a or i == 0:
            return sign | self.bits[i]
        below, above = a - self.values[i - 1], self.values[i] - a
        if below != above:
            return sign | self.bits[i - 1 if below < above else i]
        return sign | self.bits[i - 1 if self.bits[i - 1] % 2 == 0 else i]  # tie: even


F16 = Format(np.dtype(np.float16), 0x7BFF, 0x7C00, 2**16)
BF16 = Format(np.dtype(ml_dtypes.bfloat16), 0x7F7F, 0x7F80, 2**128)

SPECIAL_F32 = np.array(
    [
        0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7F800001,
        0x3F808000, 0x3F818000, 0x3F808001, 0x3F807FFF,  # bfloat16 ties and near ties
        0x3F801000, 0x3F803000, 0x3F801001, 0x3F800FFF,  # float16 ties and near ties
        0x477FEFFF, 0x477FF000, 0x477FF001, 0x7F7FFFFF, 0xFF7FFFFF,  # float16 overflow edge
        0x33000000, 0x33000001, 0x33800000, 0x33C00000, 0x387FC000, 0x387FE000,  # f16 subnormals
        0x00000001, 0x00008000, 0x00018000, 0x007FFFFF, 0x80008001,  # bfloat16 subnormals
    ],
    dtype=np.uint32,
)  # fmt: skip


def random_f32(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    bits = np.concatenate([SPECIAL_F32, rng.integers(0, 2**32, size=n, dtype=np.uint32)])
    # Also values where float16 lives (|x| in [2^-26, 2^17]), where random bits rarely land.
    small = rng.uniform(-1, 1, n) * np.exp2(rng.integers(-26, 17, n))
    return np.concatenate([bits, small.astype(np.float32).view(np.uint32)])


def near_ties(fmt: Format, dtype: np.dtype, n: int, seed: int) -> np.ndarray:
    """Doubles at, and a hair (2^-40 relative) off, the midpoints between neighbours of a
    16-bit format: rounding through float32 first would decide these wrongly."""
    rng = np.random.default_rng(seed)
    lo_bits = rng.integers(1, fmt.bits[-2], n)
    lo = lo_bits.astype(np.uint16).view(dtype).astype(np.float64)
    hi = (lo_bits + 1).astype(np.uint16).view(dtype).astype(np.float64)
    mid = (lo + hi) / 2
    out = np.concatenate([mid, mid * (1 + 2.0**-40), mid * (1 - 2.0**-40)])
    return np.concatenate([out, -out])


def random_f64(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    wide = rng.uniform(-1, 1, n) * np.exp2(rng.integers(-160, 140, n).astype(np.float64))
    special = np.array(
        [
            0.0,
            -0.0,
            np.inf,
            -np.inf,
            np.nan,
            65504.0,
            65519.99,
            65520.0,
            2.0**-25,
            2.0**-25 * (1 + 2**-50),
            5e-324,
            1e308,
            -1e-300,
            3.3895313892515355e38,
        ]
    )
    return np.concatenate([special, wide, near_ties(F16, np.float16, 2000, seed),
                           near_ties(BF16, ml_dtypes.bfloat16, 2000, seed + 1)])  # fmt: skip


INT_SPECIAL = [0, 1, -1, 2047, 2048, 2049, 2050, 2051, 4097, 65504, 65519, 65520, -65520,
               2**24 + 1, 2**31 - 1, -(2**31), 2**53 + 1, 2**62 + 2**54 + 1, 2**63 - 1, -(2**63),
               (2**8 + 1) << 20, ((2**8 + 1) << 20) + 1, ((2**8 + 1) << 20) - 1]  # fmt: skip


def random_i64(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    mags = rng.integers(0, 2**62, n, dtype=np.int64) >> rng.integers(0, 62, n)
    signs = np.where(rng.integers(0, 2, n) == 1, -1, 1)
    return np.concatenate([np.array(INT_SPECIAL, dtype=np.int64), mags * signs])


def assert_same_bits(got: np.ndarray, want: np.ndarray, inputs: np.ndarray, nan: np.ndarray):
    """Equal bits where the input is not NaN (NaN payloads differ between implementations;
    callers check that a NaN stays a NaN)."""
    got, want = got.astype(np.uint16), want.astype(np.uint16)
    bad = np.flatnonzero((got != want) & ~nan)
    assert bad.size == 0, [(inputs[i], hex(got[i]), hex(want[i])) for i in bad[:5]]


def f16_ref_from_f32(bits: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", over="ignore"):
        return bits.view(np.float32).astype(np.float16).view(np.uint16)


def bf16_ref_from_f32(bits: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", over="ignore"):
        return bits.view(np.float32).astype(ml_dtypes.bfloat16).view(np.uint16)


def exact_ref(values, fmt: Format) -> np.ndarray:
    return np.array([fmt.nearest(v) for v in values])


def bf16_ref_from_f64(d: np.ndarray) -> np.ndarray:
    """bfloat16 bits of doubles, rounded once (the rational reference; NaN gives 0, for the
    callers to mask). Not ml_dtypes: some of its releases cast a double through float32, which
    rounds twice and decides values near a midpoint wrongly."""
    out = np.zeros(d.shape, np.uint16)
    finite = np.isfinite(d)
    out[finite] = exact_ref([float(v) for v in d[finite]], BF16)
    inf = np.isinf(d)
    out[inf] = np.where(d[inf] > 0, 0x7F80, 0xFF80)
    return out


def test_the_exact_reference_agrees_with_numpy_and_ml_dtypes():
    # The rational reference used for integers is itself checked against the libraries.
    bits = random_f32(3000, 11)
    finite = bits[np.isfinite(bits.view(np.float32))]
    values = [float(v) for v in finite.view(np.float32)]
    assert np.array_equal(exact_ref(values, F16), f16_ref_from_f32(finite))
    assert np.array_equal(exact_ref(values, BF16), bf16_ref_from_f32(finite))
    doubles = random_f64(1000, 12)
    doubles = doubles[np.isfinite(doubles)]
    with np.errstate(over="ignore"):  # NumPy rounds a double to float16 once
        assert np.array_equal(
            exact_ref(list(doubles), F16), doubles.astype(np.float16).view(np.uint16)
        )
    # bfloat16 from a double has no library reference to check against: ml_dtypes releases
    # differ (some round through float32). The tests use the rational reference for it.


# --- host C++: the header's integer path --------------------------------------------------------

HOST_PROGRAM = r"""
#include <cstdio>
#include <cstring>
#include <string>
#include "ignis_types.cuh"
using ignis::float16;
using ignis::bfloat16;

template <class In, class F> static int run(F convert) {
  In v;
  while (std::fread(&v, sizeof v, 1, stdin) == 1) {
    auto out = convert(v);
    std::fwrite(&out, sizeof out, 1, stdout);
  }
  return 0;
}
static float f32(ignis::uint32 u) { float f; std::memcpy(&f, &u, 4); return f; }
static double f64(ignis::uint64 u) { double d; std::memcpy(&d, &u, 8); return d; }

int main(int argc, char** argv) {
  static_assert(sizeof(float16) == 2 && alignof(bfloat16) == 2, "");
  float16 zero{};
  if (zero.bits != 0 || float16::from_bits(0x3c00).bits != 0x3c00) return 3;
  const std::string mode = argc > 1 ? argv[1] : "";
  typedef ignis::uint16 u16;
  typedef ignis::uint32 u32;
  typedef ignis::uint64 u64;
  if (mode == "f32_f16") return run<u32>([](u32 u) { float16 h(f32(u)); return h.bits; });
  if (mode == "f32_bf16") return run<u32>([](u32 u) { bfloat16 b = f32(u); return b.bits; });
  if (mode == "f64_f16") return run<u64>([](u64 u) { return float16(f64(u)).bits; });
  if (mode == "f64_bf16") return run<u64>([](u64 u) { return bfloat16(f64(u)).bits; });
  if (mode == "i64") return run<long long>([](long long v) {
    // Every integer constructor whose type holds v gives the same bits.
    u16 h = float16(v).bits, b = bfloat16(v).bits;
    if (v == (int)v && (float16((int)v).bits != h || bfloat16((int)v).bits != b)) h = b = 1;
    if (v == (long)v && (float16((long)v).bits != h || bfloat16((long)v).bits != b)) h = b = 1;
    if (v == (short)v && (float16((short)v).bits != h || bfloat16((short)v).bits != b)) h = b = 1;
    if (v >= 0) {
      const unsigned long long w = (unsigned long long)v;
      if (float16(w).bits != h || bfloat16(w).bits != b) h = b = 1;
      const unsigned w32 = (unsigned)w;
      if (w == w32 && (float16(w32).bits != h || bfloat16(w32).bits != b)) h = b = 1;
      if (float16((unsigned long)w).bits != h || bfloat16((unsigned long)w).bits != b) h = b = 1;
    }
    return (ignis::uint32)h | ((ignis::uint32)b << 16);
  });
  if (mode == "u64") return run<unsigned long long>([](unsigned long long v) {
    return (ignis::uint32)float16(v).bits | ((ignis::uint32)bfloat16(v).bits << 16);
  });
  if (mode == "back") return run<u16>([](u16 bits) {
    float a = float16::from_bits(bits), b = bfloat16::from_bits(bits);
    ignis::uint32 ua, ub;
    std::memcpy(&ua, &a, 4);
    std::memcpy(&ub, &b, 4);
    return (ignis::uint64)ua | ((ignis::uint64)ub << 32);
  });
  return 2;
}
"""


@pytest.fixture(scope="module")
def host_exe(tmp_path_factory):
    cxx = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if cxx is None:
        pytest.skip("needs a host C++ compiler")
    d = tmp_path_factory.mktemp("ignis-types-host")
    (d / "types.cpp").write_text(HOST_PROGRAM)
    exe = d / "types"
    proc = subprocess.run(
        [cxx, "-std=c++11", "-O1", "-Wall", "-Wextra", "-Werror", f"-I{_sources.cuda_src_dir()}",
         str(d / "types.cpp"), "-o", str(exe)],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return exe


def host(exe, mode: str, data: np.ndarray, out_dtype) -> np.ndarray:
    proc = subprocess.run(
        [str(exe), mode], input=data.tobytes(), capture_output=True, check=True, timeout=120
    )
    out = np.frombuffer(proc.stdout, dtype=out_dtype)
    assert out.shape == data.shape
    return out


def test_host_from_float(host_exe):
    bits = random_f32(200_000, 1)
    nan = np.isnan(bits.view(np.float32))
    h = host(host_exe, "f32_f16", bits, np.uint16)
    b = host(host_exe, "f32_bf16", bits, np.uint16)
    assert_same_bits(h, f16_ref_from_f32(bits), bits, nan)
    assert_same_bits(b, bf16_ref_from_f32(bits), bits, nan)
    assert np.all(np.isnan(h[nan].view(np.float16))) and np.all(
        np.isnan(b[nan].view(ml_dtypes.bfloat16))
    )


def test_host_from_double(host_exe):
    d = random_f64(20_000, 2)
    nan = np.isnan(d)
    h = host(host_exe, "f64_f16", d.view(np.uint64), np.uint16)
    b = host(host_exe, "f64_bf16", d.view(np.uint64), np.uint16)
    with np.errstate(over="ignore", invalid="ignore"):
        assert_same_bits(h, d.astype(np.float16).view(np.uint16), d, nan)
    assert_same_bits(b, bf16_ref_from_f64(d), d, nan)
    finite = np.flatnonzero(np.isfinite(d))[:3000]
    assert np.array_equal(h[finite], exact_ref([float(d[i]) for i in finite], F16))


def test_host_from_integers(host_exe):
    v = random_i64(3000, 3)
    out = host(host_exe, "i64", v, np.uint32)
    assert not np.any(out == 0x00010001), "the integer constructors disagree with each other"
    assert np.array_equal(out & 0xFFFF, exact_ref([int(x) for x in v], F16))
    assert np.array_equal(out >> 16, exact_ref([int(x) for x in v], BF16))
    u = np.array([0, 1, 2**64 - 1, 2**63, 2**63 + 2**55, 2**63 + 2**55 + 1, 65520], np.uint64)
    out = host(host_exe, "u64", u, np.uint32)
    assert np.array_equal(out & 0xFFFF, exact_ref([int(x) for x in u], F16))
    assert np.array_equal(out >> 16, exact_ref([int(x) for x in u], BF16))


def test_host_back_to_float_is_exact_for_every_bit_pattern(host_exe):
    bits = np.arange(2**16, dtype=np.uint16)
    out = host(host_exe, "back", bits, np.uint64)
    as_f16 = (out & 0xFFFFFFFF).astype(np.uint32).view(np.float32)
    as_bf16 = (out >> 32).astype(np.uint32).view(np.float32)
    want_f16 = bits.view(np.float16).astype(np.float32)
    want_bf16 = bits.view(ml_dtypes.bfloat16).astype(np.float32)
    nan16, nanb = np.isnan(want_f16), np.isnan(want_bf16)
    assert np.array_equal(np.isnan(as_f16), nan16) and np.array_equal(np.isnan(as_bf16), nanb)
    assert np.array_equal(as_f16[~nan16].view(np.uint32), want_f16[~nan16].view(np.uint32))
    assert np.array_equal(as_bf16[~nanb].view(np.uint32), want_bf16[~nanb].view(np.uint32))


# --- on the GPU: the device path ------------------------------------------------------------------

GPU_KERNELS = r"""
#include "ignis_types.cuh"
using namespace ignis;

extern "C" __global__ void from_float(const float* x, uint16* h, uint16* b, uint16* h_fn,
                                      uint16* b_fn, float* h_back, float* b_back, long long n) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i >= n) return;
  float16 y(x[i]);
  bfloat16 z = x[i];
  h[i] = y.bits;
  b[i] = z.bits;
  h_fn[i] = float_to_half(x[i]).bits;  // the header's conversion functions: the same bits
  b_fn[i] = float_to_bf16(x[i]).bits;
  h_back[i] = y;
  b_back[i] = float(z);
}

extern "C" __global__ void from_double(const double* x, uint16* h, uint16* b, long long n) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i >= n) return;
  h[i] = float16(x[i]).bits;
  b[i] = bfloat16(x[i]).bits;
}

extern "C" __global__ void from_int64(const long long* x, uint16* h, uint16* b, long long n) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i >= n) return;
  h[i] = float16(x[i]).bits;
  b[i] = bfloat16(x[i]).bits;
}

extern "C" __global__ void back(const uint16* bits, float* h, float* b, long long n) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i >= n) return;
  h[i] = float16::from_bits(bits[i]);
  b[i] = bfloat16::from_bits(bits[i]);
}
"""


def _launch(name: str, arch: str | None, inputs: list[np.ndarray], outputs: list[np.dtype]):
    options = CompileOptions(arch=arch) if arch else None
    kernel = ignis.compile_kernel(GPU_KERNELS, name, options=options)
    n = inputs[0].size
    bufs = [ignis.alloc(a.nbytes).copy_from_host(np.ascontiguousarray(a)) for a in inputs]
    outs = [ignis.alloc(n * np.dtype(dt).itemsize) for dt in outputs]
    kernel.launch(grid=ignis.Kernel.calc_grid_size(n), block=256, args=[*bufs, *outs, n])
    return [o.copy_to_host(np.empty(n, dt)) for o, dt in zip(outs, outputs, strict=True)]


# compute_75: PTX the driver compiles for this GPU, with the pre-sm_80 bfloat16 rounding code.
ARCHS = [None, "compute_75"]


@pytest.mark.gpu
@pytest.mark.parametrize("arch", ARCHS)
def test_gpu_from_float(arch):
    bits = random_f32(500_000, 5)
    x = bits.view(np.float32)
    nan = np.isnan(x)
    h, b, h_fn, b_fn, h_back, b_back = _launch(
        "from_float", arch, [x], [np.uint16] * 4 + [np.float32] * 2
    )
    assert_same_bits(h, f16_ref_from_f32(bits), bits, nan)
    assert_same_bits(b, bf16_ref_from_f32(bits), bits, nan)
    assert np.array_equal(h, h_fn) and np.array_equal(b, b_fn)
    assert np.all(np.isnan(h[nan].view(np.float16))) and np.all(
        np.isnan(b[nan].view(ml_dtypes.bfloat16))
    )
    ok = ~nan
    assert np.array_equal(h_back[ok], h[ok].view(np.float16).astype(np.float32))
    assert np.array_equal(b_back[ok], b[ok].view(ml_dtypes.bfloat16).astype(np.float32))


@pytest.mark.gpu
@pytest.mark.parametrize("arch", ARCHS)
def test_gpu_from_double_and_integers(arch):
    d = random_f64(100_000, 6)
    nan = np.isnan(d)
    h, b = _launch("from_double", arch, [d], [np.uint16, np.uint16])
    with np.errstate(over="ignore", invalid="ignore"):
        assert_same_bits(h, d.astype(np.float16).view(np.uint16), d, nan)
    assert_same_bits(b, bf16_ref_from_f64(d), d, nan)
    v = random_i64(3000, 7)
    h, b = _launch("from_int64", arch, [v], [np.uint16, np.uint16])
    assert np.array_equal(h, exact_ref([int(x) for x in v], F16))
    assert np.array_equal(b, exact_ref([int(x) for x in v], BF16))


@pytest.mark.gpu
@pytest.mark.parametrize("arch", ARCHS)
def test_gpu_back_to_float_for_every_bit_pattern(arch):
    bits = np.arange(2**16, dtype=np.uint16)
    h, b = _launch("back", arch, [bits], [np.float32, np.float32])
    want_h = bits.view(np.float16).astype(np.float32)
    want_b = bits.view(ml_dtypes.bfloat16).astype(np.float32)
    for got, want in ((h, want_h), (b, want_b)):
        nan = np.isnan(want)
        assert np.array_equal(np.isnan(got), nan)
        assert np.array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))
