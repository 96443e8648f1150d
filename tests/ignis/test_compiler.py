"""NVRTC compilation: options, cubin/PTX selection, name expressions, errors. No GPU needed."""

from __future__ import annotations

import logging
import uuid

import pytest

import ignis
from ignis import CompileError, CompileOptions, ObjectCode, _bindings, _compiler, _sources, jit

ELF_MAGIC = b"\x7fELF"

AXPY = """
template <typename T>
__global__ void axpy(T a, const T* x, T* y, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""

SCALE = 'extern "C" __global__ void scale(float* x, float a) { x[threadIdx.x] *= a; }\n'


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("IGNIS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("IGNIS_DISABLE_DISK_CACHE", raising=False)
    jit.clear_cache(memory=True)


def unique(source: str) -> str:
    """The source with a unique comment, so no cache can answer for it."""
    return f"// {uuid.uuid4()}\n{source}"


# --- CompileOptions ----------------------------------------------------------------------------


def test_default_options_list():
    opts = CompileOptions(arch="sm_80").nvrtc_options()
    assert opts[0] == "--gpu-architecture=sm_80"
    assert "--std=c++17" in opts
    assert "--fmad=true" in opts
    assert "-default-device" in opts
    assert f"-I{_sources.cuda_src_dir()}" in opts
    for absent in ("--use_fast_math", "--generate-line-info", "--device-debug"):
        assert absent not in opts


def test_every_option_maps_to_its_flag(tmp_path):
    options = CompileOptions(
        arch="sm_90",
        std="c++20",
        fmad=False,
        fast_math=True,
        lineinfo=True,
        debug=True,
        max_registers=64,
        defines={"BLOCK": 256, "NDEBUG": None, "USE_X": True, "SCALE": 0.5},
        include_paths=(str(tmp_path),),
        extra=("--extra-device-vectorization",),
        relocatable=True,
    )
    opts = options.nvrtc_options()
    for flag in (
        "--std=c++20",
        "--fmad=false",
        "--use_fast_math",
        "--generate-line-info",
        "--device-debug",
        "--maxrregcount=64",
        "--relocatable-device-code=true",
        "-DBLOCK=256",
        "-DNDEBUG",
        "-DUSE_X=1",
        "-DSCALE=0.5",
        f"-I{tmp_path}",
    ):
        assert flag in opts, flag
    assert opts[-1] == "--extra-device-vectorization"
    # The caller's include folders come before the library's: their headers win.
    assert opts.index(f"-I{tmp_path}") < opts.index(f"-I{_sources.cuda_src_dir()}")


def test_defines_are_order_independent():
    a = CompileOptions(arch="sm_80", defines={"A": 1, "B": 2})
    b = CompileOptions(arch="sm_80", defines=[("B", 2), ("A", 1)])
    assert a == b and hash(a) == hash(b)
    assert a.nvrtc_options() == b.nvrtc_options()
    assert a.defines == (("A", "1"), ("B", "2"))


def test_include_paths_are_absolute_and_single_strings_accepted(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    options = CompileOptions(arch="sm_80", include_paths="inc", extra="--restrict")
    assert options.include_paths == (str(tmp_path / "inc"),)
    assert options.extra == ("--restrict",)


@pytest.mark.parametrize("arch", ["sm90", "gfx90a", "sm_", "SM_90", "sm_9", 90, "sm_90 "])
def test_malformed_arch_is_rejected(arch):
    with pytest.raises(ValueError, match=r"arch must name a GPU architecture.*got"):
        CompileOptions(arch=arch)


@pytest.mark.parametrize(
    "kwargs, error, text",
    [
        ({"fmad": "false"}, TypeError, "fmad must be True or False"),
        ({"fast_math": 1}, TypeError, "fast_math must be True or False"),
        ({"max_registers": 0}, ValueError, "max_registers must be a positive int"),
        ({"max_registers": -8}, ValueError, "max_registers must be a positive int"),
        ({"max_registers": True}, ValueError, "max_registers must be a positive int"),
        ({"defines": {"1BAD": 1}}, ValueError, "not a valid macro name"),
        ({"defines": [("A", 1), ("A", 2)]}, ValueError, "defined twice"),
        ({"defines": {"A": [1, 2]}}, TypeError, "define 'A' must have"),
        ({"defines": [("A", 1, 2)]}, TypeError, "mapping or \\(name, value\\) pairs"),
        ({"include_paths": (3,)}, TypeError, "include_paths must be strings"),
        ({"std": 17}, TypeError, "std must be a string"),
    ],
)
def test_bad_option_values_are_clear_errors(kwargs, error, text):
    with pytest.raises(error, match=text):
        CompileOptions(arch="sm_80", **kwargs)


def test_options_are_frozen():
    with pytest.raises(AttributeError):
        CompileOptions(arch="sm_80").arch = "sm_90"  # type: ignore[misc]


# --- compile: cubin ----------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_compile_gives_a_cubin_for_the_target(arch):
    obj = ignis.compile(unique(SCALE), CompileOptions(arch=arch))
    assert isinstance(obj, ObjectCode)
    assert obj.kind == "cubin" and obj.arch == arch
    assert obj.code.startswith(ELF_MAGIC)
    assert b"scale" in obj.code  # the kernel's symbol is in the cubin's symbol table
    assert f"--gpu-architecture={arch}" in obj.options
    assert obj.name == "kernel.cu"
    assert obj.log == ""


def test_different_archs_give_different_code():
    src = unique(SCALE)
    a = ignis.compile(src, CompileOptions(arch="sm_80"))
    b = ignis.compile(src, CompileOptions(arch="sm_90"))
    assert a.code != b.code


def test_defines_reach_the_program():
    src = unique('extern "C" __global__ void k(int* x) { x[0] = VALUE; }\n')
    ignis.compile(src, CompileOptions(arch="sm_80", defines={"VALUE": 7}))
    with pytest.raises(CompileError, match="VALUE"):
        ignis.compile(src, CompileOptions(arch="sm_80"))


def test_in_memory_headers():
    src = unique(
        '#include "my_const.h"\nextern "C" __global__ void k(int* x) { x[0] = MY_CONST; }\n'
    )
    obj = ignis.compile(
        src, CompileOptions(arch="sm_80"), headers={"my_const.h": "#define MY_CONST 5\n"}
    )
    assert obj.kind == "cubin"


def test_library_headers_resolve_without_options():
    src = unique(
        '#include "ignis_types.cuh"\n'
        'extern "C" __global__ void k(ignis::int64* x) { x[0] = ignis::ceil_div(7, 2); }\n'
    )
    assert ignis.compile(src, CompileOptions(arch="sm_90")).kind == "cubin"


def test_warnings_come_back_in_the_log():
    src = unique('extern "C" __global__ void k(int* x) { int unused = 3; x[0] = 1; }\n')
    obj = ignis.compile(src, CompileOptions(arch="sm_80"))
    # NVRTC reports the unused variable as a warning; compilation still succeeds.
    assert obj.kind == "cubin"
    assert "warning" in obj.log and "unused" in obj.log


def test_input_types_are_checked():
    with pytest.raises(TypeError, match="source must be a str"):
        ignis.compile(b"__global__ void k() {}", CompileOptions(arch="sm_80"))
    with pytest.raises(TypeError, match="options must be a CompileOptions"):
        ignis.compile(SCALE, {"arch": "sm_80"})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="name must be a non-empty str"):
        ignis.compile(SCALE, CompileOptions(arch="sm_80"), name="")
    with pytest.raises(TypeError, match="headers must map"):
        ignis.compile(SCALE, CompileOptions(arch="sm_80"), headers={"a.h": 3})  # type: ignore[dict-item]


# --- name expressions --------------------------------------------------------------------------


def test_name_expressions_give_mangled_names():
    obj = ignis.compile(
        unique(AXPY), CompileOptions(arch="sm_90"), name_expressions=["axpy<float>", "axpy<double>"]
    )
    lf, ld = obj.lowered_names["axpy<float>"], obj.lowered_names["axpy<double>"]
    assert lf.startswith("_Z4axpyIf") and ld.startswith("_Z4axpyId")
    assert lf.encode() in obj.code and ld.encode() in obj.code
    assert obj.symbol("axpy<float>") == lf
    assert obj.symbol("plain_c_name") == "plain_c_name"


def test_a_single_name_expression_string_is_one_expression():
    obj = ignis.compile(unique(AXPY), CompileOptions(arch="sm_80"), name_expressions="axpy<int>")
    assert list(obj.lowered_names) == ["axpy<int>"]


def test_bad_name_expression_is_a_compile_error():
    with pytest.raises(CompileError):
        ignis.compile(
            unique(AXPY), CompileOptions(arch="sm_80"), name_expressions=["axpy<nosuchtype>"]
        )


def test_object_code_is_read_only():
    obj = ignis.compile(
        unique(AXPY), CompileOptions(arch="sm_80"), name_expressions=["axpy<float>"]
    )
    with pytest.raises(TypeError):
        obj.lowered_names["axpy<float>"] = "x"  # type: ignore[index]
    with pytest.raises(AttributeError):
        obj.kind = "ptx"  # type: ignore[misc]
    assert "cubin" in repr(obj) and "bytes" in repr(obj)


# --- errors ------------------------------------------------------------------------------------


def test_compile_error_carries_log_source_and_options():
    src = (
        'extern "C" __global__ void k(float* x) {\n'
        "    x[0] = 1.0f;\n"
        "    x[1] = undefined_thing;\n"
        "}\n"
    )
    options = CompileOptions(arch="sm_80")
    with pytest.raises(CompileError) as info:
        ignis.compile(src, options, name="broken.cu")
    err = info.value
    assert "broken.cu(3)" in err.log and "undefined_thing" in err.log
    assert err.source == src and err.name == "broken.cu"
    assert "--gpu-architecture=sm_80" in err.options
    message = str(err)
    assert "broken.cu" in message and "--gpu-architecture=sm_80" in message
    assert "undefined_thing" in message
    numbered = err.numbered_source().splitlines()
    assert numbered[2].startswith("3 |") and "undefined_thing" in numbered[2]


def test_missing_header_is_a_compile_error():
    with pytest.raises(CompileError, match="no_such_header.cuh"):
        ignis.compile(unique('#include "no_such_header.cuh"\n'), CompileOptions(arch="sm_80"))


def test_unknown_raw_flag_is_a_clear_error():
    with pytest.raises(CompileError, match="unrecognized option --bogus-flag") as info:
        ignis.compile(unique(SCALE), CompileOptions(arch="sm_80", extra=("--bogus-flag",)))
    assert "--bogus-flag" in info.value.options


def test_bad_std_is_a_clear_error():
    with pytest.raises(CompileError, match="std"):
        ignis.compile(unique(SCALE), CompileOptions(arch="sm_80", std="c++99"))


def test_program_is_destroyed_on_success_and_failure(monkeypatch):
    created, destroyed = [], []
    real_create, real_destroy = _compiler.nv.nvrtcCreateProgram, _compiler.nv.nvrtcDestroyProgram

    def create(*args):
        prog = real_create(*args)
        created.append(prog)
        return prog

    def destroy(prog):
        destroyed.append(prog)
        return real_destroy(prog)

    monkeypatch.setattr(_compiler.nv, "nvrtcCreateProgram", create)
    monkeypatch.setattr(_compiler.nv, "nvrtcDestroyProgram", destroy)
    options = CompileOptions(arch="sm_80")
    _compiler.nvrtc_compile(SCALE, options)
    with pytest.raises(CompileError):
        _compiler.nvrtc_compile("this is not C++", options)
    with pytest.raises(CompileError):
        _compiler.nvrtc_compile(AXPY, options, name_expressions=("axpy<nosuchtype>",))
    assert len(created) == 3 and destroyed == created


# --- architecture selection and PTX fallback --------------------------------------------------


def test_supported_archs_come_from_nvrtc():
    archs = jit.supported_archs()
    assert archs == tuple(sorted(archs)) and 80 in archs and 90 in archs


def test_ptx_when_nvrtc_is_older_than_the_target(monkeypatch):
    monkeypatch.setattr(_compiler, "supported_archs", lambda: (75, 80, 86))
    obj = ignis.compile(unique(SCALE), CompileOptions(arch="sm_90"))
    assert obj.kind == "ptx" and obj.arch == "compute_86"
    text = obj.code.decode()
    assert ".target sm_86" in text and ".entry scale" in text
    assert not obj.code.endswith(b"\0")
    assert "--gpu-architecture=compute_86" in obj.options


@pytest.mark.parametrize("arch", ["sm_999", "sm_900", "compute_809", "sm_91", "sm_119a"])
def test_unknown_arch_is_an_error_naming_the_known_ones(arch):
    # sm_900 is a typo of sm_90: it used to become PTX for the newest architecture silently.
    with pytest.raises(ValueError, match="is not a known NVIDIA GPU architecture") as info:
        CompileOptions(arch=arch)
    message = str(info.value)
    assert repr(arch) in message
    assert ", ".join(str(cc) for cc in jit.known_archs()) in message


def test_every_known_arch_is_accepted_with_its_suffixes():
    for cc in jit.known_archs():
        for arch in (f"sm_{cc}", f"compute_{cc}", f"sm_{cc}a", f"sm_{cc}f"):
            assert CompileOptions(arch=arch).arch == arch


def test_nvrtc_supports_only_known_archs():
    # The table of known architectures against NVRTC's own list: an NVRTC that generates code
    # for an architecture the table lacks means the table needs that architecture.
    assert set(jit.supported_archs()) <= set(jit.known_archs())
    assert jit.known_archs() == tuple(sorted(set(jit.known_archs())))


@pytest.fixture
def fresh_warnings(monkeypatch):
    """The PTX fallback warns once per architecture and process: start with none warned."""
    monkeypatch.setattr(_compiler, "_warned_fallbacks", set())


def test_known_arch_newer_than_nvrtc_gives_ptx_and_a_warning(monkeypatch, caplog, fresh_warnings):
    monkeypatch.setattr(_compiler, "supported_archs", lambda: (75, 80, 86))
    with caplog.at_level(logging.WARNING, logger="ignis"):
        obj = ignis.compile(unique(SCALE), CompileOptions(arch="sm_90"))
        ignis.compile(unique(SCALE), CompileOptions(arch="sm_90"))  # warned once, not again
    assert obj.kind == "ptx" and obj.arch == "compute_86"
    warnings = [r for r in caplog.records if r.name == "ignis" and r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "sm_90" in warnings[0].getMessage() and "compute_86" in warnings[0].getMessage()


def test_a_known_arch_this_nvrtc_lacks_gives_ptx_for_the_newest_older(caplog, fresh_warnings):
    # Real NVRTC, no stand-in: e.g. NVRTC 12.9 has no sm_110 (CUDA 13) and no sm_88.
    supported = jit.supported_archs()
    missing = [cc for cc in jit.known_archs() if cc > supported[0] and cc not in supported]
    if not missing:
        pytest.skip(f"this NVRTC supports every known architecture from {supported[0]} on")
    cc = missing[-1]
    older = max(a for a in supported if a < cc)
    with caplog.at_level(logging.WARNING, logger="ignis"):
        obj = ignis.compile(unique(SCALE), CompileOptions(arch=f"sm_{cc}"))
    assert obj.kind == "ptx" and obj.arch == f"compute_{older}"
    assert f".target sm_{older}" in obj.code.decode()
    assert any(
        r.levelno == logging.WARNING and f"sm_{cc}" in r.getMessage() for r in caplog.records
    )


def test_supported_arch_gives_no_warning(caplog, fresh_warnings):
    with caplog.at_level(logging.DEBUG, logger="ignis"):
        ignis.compile(unique(SCALE), CompileOptions(arch="sm_90"))
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_select_target_rules(monkeypatch):
    monkeypatch.setattr(_compiler, "supported_archs", lambda: (75, 80, 86, 90))
    assert _compiler.select_target("sm_90") == ("cubin", "sm_90")
    assert _compiler.select_target("sm_90a") == ("cubin", "sm_90a")
    assert _compiler.select_target("compute_80") == ("ptx", "compute_80")
    assert _compiler.select_target("sm_89") == ("ptx", "compute_86")
    assert _compiler.select_target("sm_100a") == ("ptx", "compute_90")
    with pytest.raises(ValueError, match="older than every architecture"):
        _compiler.select_target("sm_70")


def test_arch_older_than_nvrtc_supports_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(_compiler, "supported_archs", lambda: (75, 80, 90))
    with pytest.raises(CompileError, match=r"'sm_70' is older than every architecture.*75, 80, 90"):
        ignis.compile(unique(SCALE), CompileOptions(arch="sm_70"))


def test_explicit_compute_arch_gives_ptx():
    obj = ignis.compile(unique(SCALE), CompileOptions(arch="compute_80"))
    assert obj.kind == "ptx" and obj.arch == "compute_80"
    assert ".target sm_80" in obj.code.decode()


# --- the current device's architecture, or the default without a GPU -------------------------


class _FakeDevice:
    arch = "sm_86"
    compute_capability = (8, 6)
    ordinal = 0


@pytest.fixture
def no_gpu(monkeypatch):
    """This process sees no GPU (whatever the machine has), as the bindings seam reports it."""
    monkeypatch.setattr(
        _bindings, "_init_state", {"done": True, "ok": False, "reason": "no GPU (test)"}
    )
    monkeypatch.delenv("IGNIS_ARCH", raising=False)


@pytest.fixture
def fake_gpu(monkeypatch):
    """A driver with one device of ``_FakeDevice.arch``; nothing is loaded on it."""
    import ignis._device

    monkeypatch.setattr(_bindings, "_init_state", {"done": True, "ok": True, "reason": ""})
    monkeypatch.setattr(ignis._device, "current_device", lambda: _FakeDevice())
    monkeypatch.delenv("IGNIS_ARCH", raising=False)


def test_arch_none_uses_the_current_device(fake_gpu):
    obj = ignis.compile(unique(SCALE))
    assert obj.kind == "cubin" and obj.arch == "sm_86"


def test_ignis_arch_does_not_override_a_real_device(fake_gpu, monkeypatch):
    # The code is for the GPU that is there: a stale IGNIS_ARCH must not make it unloadable.
    monkeypatch.setenv("IGNIS_ARCH", "sm_80")
    assert ignis.compile(unique(SCALE)).arch == "sm_86"


def test_a_device_arch_newer_than_the_known_table_is_trusted(fake_gpu, monkeypatch, caplog):
    # A GPU newer than this ignis: its own arch compiles (PTX for the newest NVRTC target).
    monkeypatch.setattr(_FakeDevice, "arch", "sm_130")
    monkeypatch.setattr(_compiler, "_warned_fallbacks", set())
    with caplog.at_level(logging.WARNING, logger="ignis"):
        obj = ignis.compile(unique(SCALE))
    assert obj.kind == "ptx" and obj.arch == f"compute_{jit.supported_archs()[-1]}"
    assert any("sm_130" in r.getMessage() for r in caplog.records)


def test_arch_none_without_a_gpu_compiles_for_the_default(no_gpu):
    assert jit.default_arch() == _compiler.DEFAULT_ARCH == "sm_90"
    obj = ignis.compile(unique(SCALE))
    assert obj.kind == "cubin" and obj.arch == "sm_90"
    assert obj.code.startswith(ELF_MAGIC)


def test_ignis_arch_sets_the_default_without_a_gpu(no_gpu, monkeypatch):
    monkeypatch.setenv("IGNIS_ARCH", "sm_80")
    assert jit.default_arch() == "sm_80"
    assert ignis.compile(unique(SCALE)).arch == "sm_80"
    monkeypatch.setenv("IGNIS_ARCH", "compute_75")
    obj = ignis.compile(unique(SCALE))
    assert obj.kind == "ptx" and obj.arch == "compute_75"


@pytest.mark.parametrize(
    "value, pattern",
    [
        ("sm_900", r"^IGNIS_ARCH: CompileOptions: 'sm_900' is not a known NVIDIA GPU architecture"),
        ("ampere", r"^IGNIS_ARCH: CompileOptions: arch must name a GPU architecture.*'ampere'"),
    ],
)
def test_ignis_arch_is_validated_like_arch(no_gpu, monkeypatch, value, pattern):
    monkeypatch.setenv("IGNIS_ARCH", value)
    with pytest.raises(ValueError, match=pattern):
        ignis.compile(unique(SCALE))
    with pytest.raises(ValueError, match=pattern):
        jit.default_arch()


SYNTAX_ERROR = 'extern "C" __global__ void k(float* x) { x[0] = 1.0f }\n'  # no ';'


def test_a_syntax_error_is_a_compile_error_without_a_gpu(no_gpu):
    with pytest.raises(CompileError, match='expected a ";"') as info:
        ignis.compile(unique(SYNTAX_ERROR))
    assert "--gpu-architecture=sm_90" in info.value.options


def test_a_syntax_error_is_a_compile_error_with_a_gpu(fake_gpu):
    with pytest.raises(CompileError, match='expected a ";"') as info:
        ignis.compile(unique(SYNTAX_ERROR))
    assert "--gpu-architecture=sm_86" in info.value.options


def test_a_syntax_error_is_a_compile_error_on_this_machine(monkeypatch):
    # Whatever this machine has (GPU or not), without any stand-in.
    monkeypatch.delenv("IGNIS_ARCH", raising=False)
    with pytest.raises(CompileError, match='expected a ";"'):
        ignis.compile(unique(SYNTAX_ERROR))
