"""The kernel library's sources: every file compiles, ignis_types.cuh is self-contained and its
16-bit conversions are right, and the source helpers find and scan files. No GPU needed."""

from __future__ import annotations

import re
import shutil
import subprocess
import uuid

import ml_dtypes
import numpy as np
import pytest

import ignis
from ignis import CompileOptions, _sources, jit

ARCHS = ["sm_80", "sm_90"]
CU_FILES = _sources.list_sources(".cu")
HEADERS = _sources.list_sources(".cuh")
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.MULTILINE)


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("IGNIS_CACHE_DIR", str(tmp_path / "cache"))
    jit.clear_cache(memory=True)


# --- every file compiles -----------------------------------------------------------------------


def test_the_library_has_sources():
    assert "selfcheck.cu" in CU_FILES
    assert "ignis_types.cuh" in HEADERS


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("filename", CU_FILES)
def test_every_kernel_source_compiles(filename, arch):
    obj = ignis.compile(_sources.read_source(filename), CompileOptions(arch=arch), name=filename)
    assert obj.kind == "cubin" and obj.arch == arch
    assert obj.code.startswith(b"\x7fELF")
    assert obj.log == "", f"{filename} compiles with warnings:\n{obj.log}"


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("header", HEADERS)
def test_every_header_compiles_on_its_own(header, arch):
    # Each header includes what it needs: it compiles as the only thing in a program.
    src = f'#include "{header}"\n#include "{header}"\n'  # and twice: include guards work
    assert ignis.compile(src, CompileOptions(arch=arch), name=f"only_{header}.cu").kind == "cubin"


@pytest.mark.parametrize("filename", CU_FILES + HEADERS)
def test_sources_include_only_library_headers(filename):
    # NVRTC in the wheels has no CUDA or C++ standard headers: any <...> include would fail
    # on users' machines even where it works on a full toolkit install.
    text = _sources.read_source(filename)
    for bracket, name in INCLUDE_RE.findall(text):
        assert bracket == '"', f"{filename} includes <{name}>"
        assert name in HEADERS, f"{filename} includes {name!r}, which is not in the library"


def test_selfcheck_kernels_are_plain_c_symbols():
    obj = ignis.compile(_sources.read_source("selfcheck.cu"), CompileOptions(arch="sm_90"))
    for kernel in (
        "ignis_selfcheck_axpy",
        "ignis_selfcheck_convert",
        "ignis_selfcheck_warp_reduce",
    ):
        assert kernel.encode() + b"\0" in obj.code


# --- ignis_types.cuh ---------------------------------------------------------------------------

TYPES_PROGRAM = """
#include "ignis_types.cuh"
using namespace ignis;

static_assert(sizeof(int8) == 1 && sizeof(uint8) == 1 && sizeof(int16) == 2, "");
static_assert(sizeof(uint16) == 2 && sizeof(uint32) == 4 && sizeof(uint64) == 8, "");
static_assert(alignof(float16) == 2 && alignof(bfloat16) == 2, "");
static_assert(ceil_div(7, 2) == 4 && ceil_div(8, 2) == 4, "");
static_assert((int8)-1 < 0 && (uint8)-1 > 0 && (int64)-1 < 0 && (uint64)-1 > 0, "");

template <class T>
__global__ void square(const T* x, T* y, int64 n) {
    IGNIS_GRID_STRIDE_LOOP(i, n) {
        typename acc_type<T>::type v = to_acc(x[i]);
        y[i] = from_acc<T>(v * v);
    }
}

template <class T>
__global__ void reduce(const T* x, T* out) {
    T v = x[global_index()];
    T total = warp_sum(v) + warp_max(v) + warp_min(v);
    if ((threadIdx.x & (warp_size - 1)) == 0) out[global_index() / warp_size] = total;
}

extern "C" __global__ void convert(const float* x, float16* h, bfloat16* b, float* back, int64 n) {
    IGNIS_GRID_STRIDE_LOOP(i, n) {
        h[i] = float_to_half(x[i]);
        b[i] = float_to_bf16(x[i]);
        back[i] = to_float(h[i]) + to_float(b[i]);
    }
}
"""
ELEMENT_TYPES = [
    "ignis::float16",
    "ignis::bfloat16",
    "float",
    "double",
    "ignis::int8",
    "ignis::uint8",
    "ignis::int32",
    "ignis::int64",
]
REDUCE_TYPES = ["float", "double", "ignis::int32", "ignis::uint32", "ignis::int64", "ignis::uint64"]
EXPRESSIONS = [f"square<{t}>" for t in ELEMENT_TYPES] + [f"reduce<{t}>" for t in REDUCE_TYPES]


@pytest.mark.parametrize("arch", ["sm_75", "sm_80", "sm_90"])
def test_types_header_helpers_compile_for_every_type(arch):
    obj = ignis.compile(
        f"// {uuid.uuid4()}\n{TYPES_PROGRAM}",
        CompileOptions(arch=arch),
        name_expressions=EXPRESSIONS,
    )
    assert set(obj.lowered_names) == set(EXPRESSIONS)
    for mangled in obj.lowered_names.values():
        assert mangled.encode() in obj.code
    assert b"convert" in obj.code


def _ptx(arch: str) -> str:
    obj = ignis.compile(TYPES_PROGRAM, CompileOptions(arch=arch), name_expressions=EXPRESSIONS)
    assert obj.kind == "ptx"
    return obj.code.decode()


def test_half_conversions_use_the_hardware_instructions():
    ptx = _ptx("compute_80")
    assert "cvt.rn.f16.f32" in ptx and "cvt.f32.f16" in ptx
    assert "shfl.sync.bfly" in ptx


def test_bf16_uses_the_instruction_from_sm80_and_integer_rounding_before():
    assert "cvt.rn.bf16.f32" in _ptx("compute_80")
    older = _ptx("compute_75")
    assert "cvt.rn.bf16.f32" not in older
    assert "0x7fff" in older.lower() or "32767" in older  # the round-to-nearest-even bias


HOST_PROGRAM = r"""
#include <cstdio>
#include "ignis_types.cuh"
int main() {
    ignis::uint32 bits;
    while (std::fread(&bits, sizeof bits, 1, stdin) == 1) {
        ignis::uint16 out = ignis::detail::f32_bits_to_bf16_bits(bits);
        std::fwrite(&out, sizeof out, 1, stdout);
    }
    return 0;
}
"""


@pytest.mark.skipif(shutil.which("c++") is None, reason="needs a host C++ compiler")
def test_bf16_fallback_rounding_matches_ml_dtypes(tmp_path):
    # The pre-sm_80 path is plain integer code: compiled for the host, it can be checked here
    # bit for bit against ml_dtypes' round-to-nearest-even on random and special values.
    program = tmp_path / "bf16.cpp"
    program.write_text(HOST_PROGRAM)
    exe = tmp_path / "bf16"
    subprocess.run(
        ["c++", "-std=c++11", "-O1", f"-I{_sources.cuda_src_dir()}", str(program), "-o", str(exe)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    rng = np.random.default_rng(0)
    special = np.array(
        [
            0x00000000,
            0x80000000,
            0x7F800000,
            0xFF800000,  # zeros, infinities
            0x7FC00000,
            0xFFC00000,
            0x7F800001,
            0x7FBFFFFF,
            0xFFFFFFFF,  # NaNs, signalling too
            0x3F808000,
            0x3F818000,
            0x3F808001,
            0x3F807FFF,  # ties to even (down, up), near ties
            0x7F7FFFFF,
            0x7F7F7FFF,
            0x7F7F8000,
            0xFF7FFFFF,  # overflow to inf, largest finite
            0x00000001,
            0x00008000,
            0x00018000,
            0x007FFFFF,
            0x80008001,  # subnormals
        ],
        dtype=np.uint32,
    )
    bits = np.concatenate([special, rng.integers(0, 2**32, size=200_000, dtype=np.uint32)])
    out = subprocess.run(
        [str(exe)], input=bits.tobytes(), capture_output=True, check=True, timeout=120
    )
    got = np.frombuffer(out.stdout, dtype=np.uint16)
    assert got.shape == bits.shape
    with np.errstate(invalid="ignore"):  # NaN inputs; compared separately below
        want = bits.view(np.float32).astype(ml_dtypes.bfloat16).view(np.uint16)
    got_f = got.view(ml_dtypes.bfloat16).astype(np.float32)
    nan = np.isnan(bits.view(np.float32))
    assert np.array_equal(np.isnan(got_f), nan)
    assert np.array_equal(np.signbit(got_f[nan]), np.signbit(bits.view(np.float32)[nan]))
    mismatch = np.flatnonzero((got != want) & ~nan)
    assert mismatch.size == 0, [(hex(bits[i]), hex(got[i]), hex(want[i])) for i in mismatch[:5]]


# --- _sources ----------------------------------------------------------------------------------


def test_cuda_src_dir_is_the_packaged_folder():
    d = _sources.cuda_src_dir()
    assert d.is_dir() and d.name == "cuda_src" and (d / "ignis_types.cuh").is_file()


def test_read_source_rejects_paths_and_names_what_exists():
    with pytest.raises(ValueError, match="expected a file name"):
        _sources.read_source("../pyproject.toml")
    with pytest.raises(ValueError, match="expected a file name"):
        _sources.read_source("")
    with pytest.raises(FileNotFoundError, match=r"no kernel source named 'nope.cu'.*selfcheck.cu"):
        _sources.read_source("nope.cu")


def test_local_headers_follow_quoted_includes_recursively(tmp_path):
    inc, other = tmp_path / "inc", tmp_path / "other"
    inc.mkdir()
    other.mkdir()
    (inc / "a.cuh").write_text('#include "b.cuh"\n#include <system_header>\n')
    (inc / "b.cuh").write_text('#pragma once\n  #  include "a.cuh"\n#include "sub/c.cuh"\n')
    (inc / "sub").mkdir()
    (inc / "sub" / "c.cuh").write_text('#include "d.cuh"\n')  # next to c.cuh, not on the path
    (inc / "sub" / "d.cuh").write_text("// leaf\n")
    (other / "unused.cuh").write_text("")
    found = _sources.local_headers('#include "a.cuh"\n', [other, inc])
    names = sorted(p.rsplit("/", 1)[-1] for p in found)
    assert names == ["a.cuh", "b.cuh", "c.cuh", "d.cuh"]
    assert found[str((inc / "sub" / "d.cuh").resolve())] == b"// leaf\n"


def test_local_headers_search_order_and_memory_headers(tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    for d in (first, second):
        d.mkdir()
        (d / "h.cuh").write_text(f"// {d.name}\n")
    found = _sources.local_headers('#include "h.cuh"\n', [first, second], source_dir=tmp_path)
    assert list(found.values()) == [b"// first\n"]
    found = _sources.local_headers(
        '#include "h.cuh"\n#include "m.h"\n', [first], headers={"m.h": '#include "h.cuh"\n'}
    )
    assert found["<memory>/m.h"] == b'#include "h.cuh"\n'
    assert str((first / "h.cuh").resolve()) in found


def test_local_headers_of_the_library():
    src = _sources.read_source("selfcheck.cu")
    found = _sources.local_headers(src, [_sources.cuda_src_dir()])
    assert [p.rsplit("/", 1)[-1] for p in found] == ["ignis_types.cuh"]
