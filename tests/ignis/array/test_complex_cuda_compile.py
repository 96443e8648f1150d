"""complex64/complex128 in the CUDA kernel library, checked without a GPU.

* Every element-wise instance the Python side can ask for with complex operands (each op the op
  table marks as taking complex numbers, contiguous and strided, scalar forms, the broadcast
  kernels, mixed real/complex operands, where, every cast to and from complex, fill, transposing
  copies) compiles with NVRTC (PTX for sm_90).
* The reductions' complex instances (sum, prod, mean) and the own-kernel complex matmul compile.
* The special cases of ``cuda_src/complex.cuh`` (C99 Annex G) are checked on the host: the header
  compiles as plain C++, and a small program built with the system compiler evaluates every
  function on signed zeros, infinities, NaNs and random values against NumPy in float64.
"""

from __future__ import annotations

import itertools
import shutil
import subprocess
import warnings
from pathlib import Path

import numpy as np
import pytest
from ignis._array import _semantics as sem
from ignis._array._cuda_backend import elementwise as ew
from ignis._array._op_table import ELEMENTWISE

import ignis
from ignis import CompileOptions, _sources
from ignis import _dtypes as dt

CTYPE = dict(ew.CTYPE)
WORK = dict(ew._WORK)
COMPLEX = list(dt.complex_dtypes)
REAL = list(dt.all_dtypes)


class _Operand:
    def __init__(self, dtype: dt.DType):
        self.dtype, self.shape = dtype, (4,)


def _v(*dtypes: dt.DType) -> int:
    return 16 // max(d.itemsize for d in dtypes)


def _unary_names() -> list[str]:
    names = []
    for op, entry in ELEMENTWISE.items():
        if entry.arity != 1 or not entry.complex:
            continue
        f = ew._UNARY_FUNCTOR[op]
        for x in COMPLEX:
            spec = sem.unary(op, (), x)
            args = (f, WORK[spec.compute], CTYPE[spec.dtype], CTYPE[x])
            names.append(ew.kernel_name("unary_contig", *args, _v(spec.dtype, x)))
            names.append(ew.kernel_name("unary_contig", *args, 1))
            names.append(ew.kernel_name("unary_strided", *args, False))
            names.append(ew.kernel_name("unary_strided", *args, True))
    return names


def _binary_names() -> list[str]:
    names = []
    for op, entry in ELEMENTWISE.items():
        if entry.arity != 2 or not entry.complex:
            continue
        f = ew._BINARY_FUNCTOR[op]
        for d in COMPLEX:
            spec = sem.binary(op, _Operand(d), _Operand(d))
            w, out = WORK[spec.compute], CTYPE[spec.dtype]
            base = (f, w, out, CTYPE[d], CTYPE[d])
            v = _v(spec.dtype, d)
            names.append(ew.kernel_name("binary_contig", *base, 0, v))
            names.append(ew.kernel_name("binary_strided", *base, 0, False))
            names.append(ew.kernel_name("binary_contig", f, w, out, w, CTYPE[d], 1, v))
            names.append(ew.kernel_name("binary_contig", f, w, out, CTYPE[d], w, 2, v))
            names.append(ew.kernel_name("binary_strided", f, w, out, CTYPE[d], w, 2, True))
            for side, kind in itertools.product((1, 2), (ew.ROW, ew.COLUMN)):
                names.append(ew.kernel_name("binary_bcast", *base, side, kind, v))
    # real and complex operands together (float32 array + complex64 array, ...)
    for op in ("add", "multiply", "divide", "power", "equal"):
        f = ew._BINARY_FUNCTOR[op]
        for c, r in itertools.product(COMPLEX, (dt.float32, dt.float64, dt.int32, dt.bool_)):
            spec = sem.binary(op, _Operand(c), _Operand(r))
            base = (f, WORK[spec.compute], CTYPE[spec.dtype], CTYPE[c], CTYPE[r])
            names.append(ew.kernel_name("binary_contig", *base, 0, _v(spec.dtype, c, r)))
            names.append(ew.kernel_name("binary_strided", *base, 0, False))
    return names


def _where_copy_fill_names() -> list[str]:
    names = []
    for d in COMPLEX:
        w = WORK[d]
        for forms in (0, 2, 4, 6):
            ta = w if forms & 2 else CTYPE[d]
            tb = w if forms & 4 else CTYPE[d]
            names.append(ew.kernel_name("where_contig", w, CTYPE[d], "bool", ta, tb, forms, _v(d)))
        names.append(
            ew.kernel_name("where_strided", w, CTYPE[d], "bool", CTYPE[d], CTYPE[d], 0, True)
        )
        names.append(ew.kernel_name("copy_transpose", CTYPE[d], CTYPE[d]))
    for to, src in itertools.product(COMPLEX + REAL, COMPLEX + REAL):
        if to.kind != "c" and src.kind != "c":
            continue
        if to is not src:
            names.append(ew.kernel_name("copy_contig", CTYPE[to], CTYPE[src], _v(to, src)))
        names.append(ew.kernel_name("copy_strided", CTYPE[to], CTYPE[src], False))
    names.append(ew.kernel_name("fill_contig", "ignis::complex128"))
    names.append(ew.kernel_name("fill_strided", "ignis::complex128", False))
    names.append(ew.kernel_name("fill_strided", "ignis::complex128", True))
    return names


NAME_SETS = {
    "unary": _unary_names,
    "binary": _binary_names,
    "where_copy_fill": _where_copy_fill_names,
}


def _compile(names: list[str], source: str) -> ignis.ObjectCode:
    return ignis.compile(
        _sources.read_source(source),
        CompileOptions(arch="compute_90"),
        name_expressions=names,
    )


@pytest.mark.parametrize("family", sorted(NAME_SETS))
def test_complex_elementwise_instances_compile(family: str) -> None:
    names = list(dict.fromkeys(NAME_SETS[family]()))
    assert names
    for i in range(0, len(names), 150):
        batch = names[i : i + 150]
        obj = _compile(batch, ew.SOURCE)
        assert set(obj.lowered_names) == set(batch)


def test_complex_scalars_are_packed_as_their_bytes() -> None:
    # A complex W parameter is a struct: the scalar goes as a NumPy scalar of its 8/16 bytes.
    assert ew._SCALAR_N["complex64"](1 + 2j).tobytes() == np.complex64(1 + 2j).tobytes()
    assert ew._SCALAR_N["complex128"](2.0).tobytes() == np.complex128(2).tobytes()
    assert complex in ew._SCALARS


# --- the special cases of complex.cuh on the host -------------------------------------------------

_HOST_PROGRAM = r"""
#include "complex.cuh"
#include <cstdio>
#include <cstring>
using namespace ignis;
template <class R> complex<R> apply(const char* f, complex<R> a, complex<R> b) {
#define U(N) if (!strcmp(f, #N)) return c_##N(a);
  U(exp) U(expm1) U(log) U(log1p) U(log2) U(log10) U(sqrt) U(sin) U(cos) U(tan) U(sinh) U(cosh)
  U(tanh) U(asin) U(acos) U(atan) U(asinh) U(acosh) U(atanh) U(sign) U(round)
  if (!strcmp(f, "abs")) return complex<R>(c_abs(a), 0);
  if (!strcmp(f, "multiply")) return a * b;
  if (!strcmp(f, "divide")) return a / b;
  if (!strcmp(f, "power")) return c_pow(a, b);
  return complex<R>(-999, -999);
}
int main(int argc, char** argv) {
  const char* f = argv[1];
  bool single = argv[2][0] == 'f';
  double ar, ai, br, bi;
  while (scanf("%lf %lf %lf %lf", &ar, &ai, &br, &bi) == 4) {
    if (single) {
      complex<float> r = apply<float>(f, complex<float>(ar, ai), complex<float>(br, bi));
      printf("%.9g %.9g\n", (double)r.re, (double)r.im);
    } else {
      complex<double> r = apply<double>(f, complex<double>(ar, ai), complex<double>(br, bi));
      printf("%.17g %.17g\n", r.re, r.im);
    }
  }
}
"""


@pytest.fixture(scope="module")
def host_program(tmp_path_factory) -> Path:
    cxx = shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")
    if cxx is None:
        pytest.skip("no host C++ compiler")
    d = tmp_path_factory.mktemp("complex_host")
    (d / "main.cpp").write_text(_HOST_PROGRAM)
    exe = d / "complex_host"
    subprocess.run(
        [
            cxx,
            "-std=c++17",
            "-O1",
            f"-I{_sources.cuda_src_dir()}",
            str(d / "main.cpp"),
            "-o",
            str(exe),
        ],
        check=True,
        capture_output=True,
    )
    return exe


def _run(exe: Path, f: str, a: np.ndarray, b: np.ndarray, single: bool) -> np.ndarray:
    lines = "\n".join(
        f"{float(x.real)!r} {float(x.imag)!r} {float(y.real)!r} {float(y.imag)!r}"
        for x, y in zip(a, b, strict=True)
    )
    out = subprocess.run(
        [str(exe), f, "f" if single else "d"],
        input=lines,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    v = np.array(out, float).reshape(-1, 2)
    r = np.empty(len(v), complex)
    r.real, r.imag = v[:, 0], v[:, 1]
    return r


_SPECIAL = [0.0, -0.0, 1.0, -1.0, 0.5, 2.0, np.inf, -np.inf, np.nan, 1e300, -1e-300]
_UNARY = {
    "exp": np.exp,
    "expm1": np.expm1,
    "log": np.log,
    "log2": np.log2,
    "log10": np.log10,
    "sqrt": np.sqrt,
    "sin": np.sin,
    "cos": np.cos,
    "tan": np.tan,
    "sinh": np.sinh,
    "cosh": np.cosh,
    "tanh": np.tanh,
    "asin": np.arcsin,
    "acos": np.arccos,
    "atan": np.arctan,
    "asinh": np.arcsinh,
    "acosh": np.arccosh,
    "atanh": np.arctanh,
    "round": np.round,
    "abs": lambda z: np.abs(z) + 0j,
    "log1p": np.log1p,
    "sign": np.sign,
}
# Where complex.cuh follows the Array API standard's special cases and NumPy does not, or is
# more accurate than NumPy's formula: (function, input) -> the standard's value.
_STANDARD: dict = {}


def _agree(got: np.ndarray, want: np.ndarray, tol: float) -> np.ndarray:
    ok = np.ones(got.shape, bool)
    for part in ("real", "imag"):
        g, w = getattr(got, part), getattr(want, part)
        with np.errstate(all="ignore"):
            mag = np.abs(want)
            scale = np.where(np.isfinite(mag), mag, np.abs(w))  # (a NaN part: its own size)
            close = np.abs(g - w) <= tol * np.maximum(scale, 1e-300)
        ok &= (g == w) | (np.isnan(g) & np.isnan(w)) | close
    return ok


@pytest.mark.parametrize("single", [False, True], ids=["complex128", "complex64"])
@pytest.mark.parametrize("name", sorted(_UNARY))
def test_complex_functions_match_numpy_on_the_host(host_program, name, single, rng) -> None:
    special = np.empty(len(_SPECIAL) ** 2, complex)
    special.real = np.repeat(_SPECIAL, len(_SPECIAL))
    special.imag = np.tile(_SPECIAL, len(_SPECIAL))
    rand = rng.uniform(-4, 4, 400) + 1j * rng.uniform(-4, 4, 400)
    cdt = np.complex64 if single else np.complex128
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if name in ("log1p", "sign", "expm1"):
            # NumPy's log1p loses digits; its sign and expm1 differ from the standard's special
            # cases (checked below): random values here
            z = rand.astype(cdt)
            want = np.log(1 + z.astype(np.complex128)) if name == "log1p" else _UNARY[name](z)
        else:
            z = np.concatenate([special, rand]).astype(cdt)
            want = _UNARY[name](z)
    got = _run(host_program, name, z.astype(complex), z.astype(complex), single)
    for i, x in enumerate(z):
        if (name, complex(x)) in _STANDARD:
            want[i] = _STANDARD[(name, complex(x))]
    ok = _agree(got, want.astype(complex), 3e-5 if single else 1e-11)
    bad = np.flatnonzero(~ok)
    assert bad.size == 0, [(z[i], got[i], want[i]) for i in bad[:5]]


@pytest.mark.parametrize("name", ["multiply", "divide", "power"])
def test_complex_arithmetic_matches_numpy_on_the_host(host_program, name, rng) -> None:
    a = rng.uniform(-4, 4, 400) + 1j * rng.uniform(-4, 4, 400)
    b = rng.uniform(-4, 4, 400) + 1j * rng.uniform(-4, 4, 400)
    got = _run(host_program, name, a, b, False)
    want = getattr(np, name)(a, b)
    assert _agree(got, want, 1e-11).all()


def test_annex_g_cases_numpy_shares(host_program) -> None:
    cases = {
        "sqrt": [
            (complex(-0.0, 0.0), complex(0.0, 0.0)),
            (complex(-np.inf, 1.0), complex(0.0, np.inf)),
        ],
        "exp": [(complex(-np.inf, np.inf), complex(0.0, 0.0))],
        "log": [(complex(-0.0, 0.0), complex(-np.inf, np.pi))],
        "acos": [(complex(0.0, np.nan), complex(np.pi / 2, np.nan))],
        "atanh": [(complex(1.0, 0.0), complex(np.inf, 0.0))],
        "tanh": [(complex(np.inf, 1.0), complex(1.0, 0.0))],
        # the Array API standard's expm1 and sign, where NumPy differs
        "expm1": [
            (complex(np.inf, 0.0), complex(np.inf, 0.0)),
            (complex(-np.inf, np.inf), complex(-1.0, 0.0)),
            (complex(np.inf, np.nan), complex(np.inf, np.nan)),
        ],
        "sign": [(complex(np.inf, np.nan), complex(np.nan, np.nan)), (0j, 0j)],
    }
    for name, pairs in cases.items():
        z = np.array([p[0] for p in pairs])
        got = _run(host_program, name, z, z, False)
        want = np.array([p[1] for p in pairs])
        assert _agree(got, want, 1e-15).all(), (name, got, want)


# --- reductions -----------------------------------------------------------------------------------


def _reduction_names() -> list[str]:
    names = []
    for d in COMPLEX:
        t = CTYPE[d]
        vec = 16 // d.itemsize
        for op, o in (
            (f"ignis::SumOp<{t}>", t),
            (f"ignis::ProdOp<{t}>", t),
            (f"ignis::AllOp<{t}>", "bool"),
            (f"ignis::AnyOp<{t}>", "bool"),
        ):
            for v in sorted({1, vec}):
                names.append(f"ignis::reduce_group<{t}, {o}, {op}, {v}>")
                names.append(f"ignis::reduce_block<{t}, {o}, {op}, {v}>")
                names.append(f"ignis::reduce_cols<{t}, {o}, {op}, {v}>")
                names.append(f"ignis::reduce_cols_wide<{t}, {o}, {op}, {v}, 2>")
            # the second pass of a split reduction reads partial results (acc_t) back
            acc = "int" if "AllOp" in op or "AnyOp" in op else t
            names.append(f"ignis::reduce_group<{acc}, {o}, ignis::PartialOp<{op}>, 1>")
    # sum(x, dtype=) across precisions: complex64 accumulated in complex128 and back
    for t, o in (("ignis::complex64", "ignis::complex128"), ("ignis::complex128", "ignis::complex64")):
        names.append(f"ignis::reduce_group<{t}, {o}, ignis::SumOp<{o}>, 1>")
    return names


def test_complex_reduction_instances_compile() -> None:
    names = _reduction_names()
    obj = _compile(names, "reduction.cu")
    assert set(obj.lowered_names) == set(names)


# --- the CUDA reduction planner on complex input, through the kernels' emulator -------------------

from test_cuda_reduction import (  # noqa: E402  (the emulator's fixtures)
    PLAN_CASES,
    _cpu,
    _planned_reduce,
    emu,  # noqa: F401
    host_backend,  # noqa: F401
    small_thresholds,  # noqa: F401
)


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
@pytest.mark.parametrize("op", ["sum", "mean"])
def test_planned_complex_reductions_match_numpy(
    emu, host_backend, small_thresholds, op, dtype, rng  # noqa: F811 (the imported fixtures)
):
    tol = 2e-5 if dtype == "complex64" else 1e-12
    for name, shape, view, axis, _ in PLAN_CASES:
        base = (rng.uniform(-4, 4, shape) + 1j * rng.uniform(-4, 4, shape)).astype(dtype)
        x = _cpu(base, view)
        got = _planned_reduce(host_backend, op, x, axis)
        host = x.to_host().astype(np.complex128)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            want = getattr(np, op)(host, axis=axis, keepdims=True)
        assert got.dtype == np.dtype(dtype), name
        scale = np.sum(np.abs(host), axis=axis, keepdims=True) + 1
        assert np.all(np.abs(got - want) <= tol * scale) or np.allclose(
            got, want, equal_nan=True
        ), name


# --- matmul ---------------------------------------------------------------------------------------


def test_complex_gemm_compiles_and_is_planned() -> None:
    from ignis._array._cuda_backend import matmul as cuda_matmul

    names = [f"ignis::gemm::gemm_complex<{CTYPE[d]}>" for d in COMPLEX]
    obj = _compile(names, "matmul.cu")
    assert set(obj.lowered_names) == set(names)
    for d in COMPLEX:
        for family in (None, "simt", "tc"):
            (launch,) = cuda_matmul.plan_own_gemm(
                d,
                (9, 0),
                True,
                (),
                33,
                5,
                5,
                cuda_matmul.Mat(0, 5, 1, ()),
                cuda_matmul.Mat(0, 5, 1, ()),
                cuda_matmul.Mat(0, 5, 1, ()),
                1.0,
                0.0,
                family=family,
            )
            assert launch.kernel == f"ignis::gemm::gemm_complex<{CTYPE[d]}>"
            assert launch.grid[0] == 3 * 1  # 16 x 16 tiles over 33 x 5
    # cuBLAS takes complex data as CUDA_C_32F / CUDA_C_64F with complex scale types
    code, _, scale = cuda_matmul._BLAS_TYPES[dt.complex64]
    assert code == 4 and ctypes_size(scale) == 8
    assert cuda_matmul._BLAS_TYPES[dt.complex128][0] == 5


def ctypes_size(t) -> int:
    import ctypes

    return ctypes.sizeof(t)


def test_complex_indexing_instances_compile() -> None:
    # take_rows moves complex elements as they are; put_rows by size (8 and 16 bytes)
    from ignis._array._cuda_backend import indexing as ix

    names = [n for n in ix.kernel_names()["indexing.cu"] if "complex" in n]
    assert any("complex128" in n for n in names) and any("complex64" in n for n in names)
    obj = _compile(names, "indexing.cu")
    assert set(obj.lowered_names) == set(names)
