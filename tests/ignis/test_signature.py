"""Reading kernel parameter types from CUDA C++ source (no GPU, no compiler)."""

from __future__ import annotations

import ctypes
import pathlib
import platform
import re

import pytest
from ignis._signature import KINDS, Param, parse_kernel_params

from ignis import LaunchError

LONG = ctypes.sizeof(ctypes.c_long)
CHAR_KIND = (
    "uint"
    if platform.machine().lower().startswith(("arm", "aarch64", "ppc", "powerpc", "s390"))
    else "int"
)
CUDA_SRC = pathlib.Path(__file__).resolve().parents[2] / "cuda_src"


def sig(source: str, name: str) -> list[tuple]:
    return [(p.name, p.kind, p.ctype, p.size) for p in parse_kernel_params(source, name)]


# Each case: (source, name, expected [(name, kind, ctype, size), ...]).
CASES = [
    pytest.param(
        'extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) { }',
        "saxpy",
        [
            ("a", "float", "float", 4),
            ("x", "pointer", "const float*", 8),
            ("y", "pointer", "float*", 8),
            ("n", "int", "int", 4),
        ],
        id="saxpy",
    ),
    pytest.param(
        """
        // leading comment mentioning __global__ void saxpy(double a)
        /* a block comment:
           __global__ void saxpy(char c) */
        extern "C"
        __global__
        void
        saxpy(
            float a,                       // the scale
            const float * __restrict__ x,  /* input */
            float *__restrict__ y,
            long long n
        )
        {
            if (threadIdx.x < 2) { y[0] = a; }
        }
        """,
        "saxpy",
        [
            ("a", "float", "float", 4),
            ("x", "pointer", "const float* __restrict__", 8),
            ("y", "pointer", "float* __restrict__", 8),
            ("n", "int", "long long", 8),
        ],
        id="multiline-comments",
    ),
    pytest.param(
        """
        extern "C" __global__ void __launch_bounds__(256, 2) scale(double* out, double s,
                                                                  unsigned int n) {}
        """,
        "scale",
        [
            ("out", "pointer", "double*", 8),
            ("s", "float", "double", 8),
            ("n", "uint", "unsigned int", 4),
        ],
        id="launch-bounds",
    ),
    pytest.param(
        """
        #define BLOCK 128
        extern "C" __global__ __launch_bounds__(BLOCK) void k(int a) {}
        """,
        "k",
        [("a", "int", "int", 4)],
        id="launch-bounds-before-void",
    ),
    pytest.param(
        """
        extern "C" {
        __global__ void a(int x);
        __global__ void b(unsigned long long x, unsigned long y, long z, short s, unsigned char c,
                          signed char sc, char pc, unsigned short us, long int li, short int si,
                          unsigned u, signed s2, long unsigned int lui, bool flag) {}
        }
        """,
        "b",
        [
            ("x", "uint", "unsigned long long", 8),
            ("y", "uint", "unsigned long", LONG),
            ("z", "int", "long", LONG),
            ("s", "int", "short", 2),
            ("c", "uint", "unsigned char", 1),
            ("sc", "int", "signed char", 1),
            ("pc", CHAR_KIND, "char", 1),
            ("us", "uint", "unsigned short", 2),
            ("li", "int", "long int", LONG),
            ("si", "int", "short int", 2),
            ("u", "uint", "unsigned", 4),
            ("s2", "int", "signed", 4),
            ("lui", "uint", "long unsigned int", LONG),
            ("flag", "bool", "bool", 1),
        ],
        id="builtin-integers-extern-c-block",
    ),
    pytest.param(
        """
        #include "ignis_types.cuh"
        using namespace ignis;
        extern "C" __global__ void fixed(int8_t a, uint8_t b, int16_t c, uint16_t d, int32_t e,
            uint32_t f, int64_t g, uint64_t h, size_t i, ptrdiff_t j, std::int64_t k,
            ignis::int64 l, int64 m, ignis::uint8 n, uint32 o, intptr_t p, uintptr_t q) {}
        """,
        "fixed",
        [
            ("a", "int", "int8_t", 1),
            ("b", "uint", "uint8_t", 1),
            ("c", "int", "int16_t", 2),
            ("d", "uint", "uint16_t", 2),
            ("e", "int", "int32_t", 4),
            ("f", "uint", "uint32_t", 4),
            ("g", "int", "int64_t", 8),
            ("h", "uint", "uint64_t", 8),
            ("i", "uint", "size_t", 8),
            ("j", "int", "ptrdiff_t", 8),
            ("k", "int", "std::int64_t", 8),
            ("l", "int", "ignis::int64", 8),
            ("m", "int", "int64", 8),
            ("n", "uint", "ignis::uint8", 1),
            ("o", "uint", "uint32", 4),
            ("p", "int", "intptr_t", 8),
            ("q", "uint", "uintptr_t", 8),
        ],
        id="fixed-width-names",
    ),
    pytest.param(
        """
        extern "C" __global__ void f16(__half a, half b, ignis::half c, ignis::float16 d,
            float16 e, __nv_bfloat16 f, nv_bfloat16 g, ignis::bfloat16 h, bfloat16 i,
            const __half* p, __half2 two) {}
        """,
        "f16",
        [
            ("a", "half", "__half", 2),
            ("b", "half", "half", 2),
            ("c", "half", "ignis::half", 2),
            ("d", "half", "ignis::float16", 2),
            ("e", "half", "float16", 2),
            ("f", "bfloat16", "__nv_bfloat16", 2),
            ("g", "bfloat16", "nv_bfloat16", 2),
            ("h", "bfloat16", "ignis::bfloat16", 2),
            ("i", "bfloat16", "bfloat16", 2),
            ("p", "pointer", "const __half*", 8),
            ("two", "struct", "__half2", 4),
        ],
        id="16-bit-floats",
    ),
    pytest.param(
        """
        template <typename T, int N>
        __global__ void axpy(T alpha, const T* __restrict__ x, T* __restrict__ y, int n) {}
        """,
        "axpy<float, 128>",
        [
            ("alpha", "float", "float", 4),
            ("x", "pointer", "const float* __restrict__", 8),
            ("y", "pointer", "float* __restrict__", 8),
            ("n", "int", "int", 4),
        ],
        id="template-float",
    ),
    pytest.param(
        """
        template <typename T, int N>
        __global__ void axpy(T alpha, const T* __restrict__ x, T* __restrict__ y, int n) {}
        """,
        "axpy<double,4>",
        [
            ("alpha", "float", "double", 8),
            ("x", "pointer", "const double* __restrict__", 8),
            ("y", "pointer", "double* __restrict__", 8),
            ("n", "int", "int", 4),
        ],
        id="template-double-no-space",
    ),
    pytest.param(
        """
        namespace ns {
        template <class T>
        __global__ void k(T v, T* out) {}
        }  // namespace ns
        """,
        "ns::k<__half>",
        [("v", "half", "__half", 2), ("out", "pointer", "__half*", 8)],
        id="namespace-template-half",
    ),
    pytest.param(
        """
        namespace outer { namespace inner {
        template <typename T, typename Index = long long, int Block = 256>
        __global__ void __launch_bounds__(Block) gather(const T* src, const Index* idx, T* dst,
                                                        Index n, T fill = T(0)) {}
        } }
        """,
        "outer::inner::gather<unsigned short>",
        [
            ("src", "pointer", "const unsigned short*", 8),
            ("idx", "pointer", "const long long*", 8),
            ("dst", "pointer", "unsigned short*", 8),
            ("n", "int", "long long", 8),
            ("fill", "uint", "unsigned short", 2),
        ],
        id="template-defaults-nested-namespace",
    ),
    pytest.param(
        """
        namespace a::b {
        template <typename T> __global__ void k(T* p, T v) {}
        }
        """,
        "a::b::k<float*>",
        [("p", "pointer", "float**", 8), ("v", "pointer", "float*", 8)],
        id="pointer-template-argument",
    ),
    pytest.param(
        """
        template <typename T> __global__ void fill(T* out, T value, unsigned long long n);
        template <typename T> __global__ void fill(T* out, T value, unsigned long long n) {}
        template __global__ void fill<float>(float*, float, unsigned long long);
        template <> __global__ void fill<int>(int* out, int value, unsigned long long n) {}
        """,
        "fill<int>",
        [
            ("out", "pointer", "int*", 8),
            ("value", "int", "int", 4),
            ("n", "uint", "unsigned long long", 8),
        ],
        id="declaration-definition-instantiation",
    ),
    pytest.param(
        """
        template <typename T> __global__ void k(T*, int);
        template <typename T> __global__ void k(T* data, int count) {}
        """,
        "k<bool>",
        [("data", "pointer", "bool*", 8), ("count", "int", "int", 4)],
        id="prefers-named-declaration",
    ),
    pytest.param(
        'extern "C" __global__ void unnamed(float*, int, const double) {}',
        "unnamed",
        [
            (None, "pointer", "float*", 8),
            (None, "int", "int", 4),
            (None, "float", "const double", 8),
        ],
        id="unnamed-params",
    ),
    pytest.param(
        'extern "C" __global__ void noargs() {}\nextern "C" __global__ void voidargs(void) {}',
        "voidargs",
        [],
        id="void-params",
    ),
    pytest.param(
        """
        extern "C" __global__ void defaults(int n = 10, float s = (1 < 2) ? 1.f : 2.f,
                                            unsigned m = sizeof(int) * 2) {}
        """,
        "defaults",
        [("n", "int", "int", 4), ("s", "float", "float", 4), ("m", "uint", "unsigned", 4)],
        id="default-arguments",
    ),
    pytest.param(
        """
        extern "C" __global__ void qualifiers(const int n, volatile float* flag, float const* a,
            float* const b, const float* const __restrict__ c, int arr[], float mat[4][4],
            void (*callback)(int)) {}
        """,
        "qualifiers",
        [
            ("n", "int", "const int", 4),
            ("flag", "pointer", "volatile float*", 8),
            ("a", "pointer", "float const*", 8),
            ("b", "pointer", "float* const", 8),
            ("c", "pointer", "const float* const __restrict__", 8),
            ("arr", "pointer", "int*", 8),
            ("mat", "pointer", "float*", 8),
            ("callback", "pointer", "void(*)(int)", 8),
        ],
        id="qualifiers-arrays-function-pointer",
    ),
    pytest.param(
        """
        typedef float real;
        typedef unsigned long long u64_t;
        using index_t = long long;
        using fptr = float*;
        #define scalar_t double
        struct Params { float a; int b; };
        typedef struct { int x, y; } Point;
        class Opaque;
        enum Mode { ADD, MUL };
        enum class Small : unsigned char { X, Y };
        extern "C" __global__ void aliases(real a, u64_t b, index_t c, fptr d, scalar_t e,
            Params p, struct Params q, Point pt, Opaque o, Mode m, Small s,
            const __grid_constant__ Params gp, float4 v, int2 i2, double3 d3, dim3 g,
            Unknown u) {}
        """,
        "aliases",
        [
            ("a", "float", "real", 4),
            ("b", "uint", "u64_t", 8),
            ("c", "int", "index_t", 8),
            ("d", "pointer", "fptr", 8),
            ("e", "float", "scalar_t", 8),
            ("p", "struct", "Params", None),
            ("q", "struct", "struct Params", None),
            ("pt", "struct", "Point", None),
            ("o", "struct", "Opaque", None),
            ("m", "int", "Mode", 4),
            ("s", "uint", "Small", 1),
            ("gp", "struct", "const __grid_constant__ Params", None),
            ("v", "struct", "float4", 16),
            ("i2", "struct", "int2", 8),
            ("d3", "struct", "double3", 24),
            ("g", "struct", "dim3", 12),
            ("u", "unknown", "Unknown", None),
        ],
        id="aliases-records-enums-vectors",
    ),
    pytest.param(
        """
        template <typename T, int N> struct Vec { T v[N]; };
        template <typename T, int N>
        __global__ void vec(Vec<T, N> in, Vec<T, N>* out, T s) {}
        """,
        "vec<float, 4>",
        [
            ("in", "struct", "Vec<float, 4>", None),
            ("out", "pointer", "Vec<float, 4>*", 8),
            ("s", "float", "float", 4),
        ],
        id="template-struct-by-value",
    ),
    pytest.param(
        """
        namespace ns {
        extern "C" __global__ void c_linkage(int x) {}
        }
        """,
        "c_linkage",
        [("x", "int", "int", 4)],
        id="extern-c-inside-namespace-plain-name",
    ),
    pytest.param(
        """
        namespace ns { __global__ void k(int x); }
        __global__ void ns::k(int x) {}
        """,
        "ns::k",
        [("x", "int", "int", 4)],
        id="out-of-namespace-definition",
    ),
    pytest.param(
        """
        namespace only { __global__ void relative(double d) {} }
        """,
        "relative",
        [("d", "float", "double", 8)],
        id="unique-unqualified-name",
    ),
    pytest.param(
        """
        template <typename T> __global__ void k(T x) {}
        """,
        "&k<long long>",
        [("x", "int", "long long", 8)],
        id="address-of-name-expression",
    ),
    pytest.param(
        """
        #define KERNEL_ARGS float* out, int n
        extern "C" static __global__ void st(int a) {}
        extern "C" __global__ void other([[maybe_unused]] int a, __attribute__((unused)) float b) {}
        """,
        "other",
        [("a", "int", "int", 4), ("b", "float", "float", 4)],
        id="attributes",
    ),
    pytest.param(
        """
        template <typename T = float, int N = 128>
        __global__ void tdef(T x, int n) {}
        """,
        "tdef<>",
        [("x", "float", "float", 4), ("n", "int", "int", 4)],
        id="all-default-template-args",
    ),
]


@pytest.mark.parametrize(("source", "name", "expected"), CASES)
def test_parse(source, name, expected):
    assert sig(source, name) == expected


def test_result_is_a_list_of_params():
    params = parse_kernel_params('extern "C" __global__ void k(float a) {}', "k")
    assert params == [Param("a", "float", "float", 4)]
    assert all(p.kind in KINDS for p in params)


def test_many_kernels_in_one_source_are_told_apart():
    source = """
    extern "C" __global__ void first(float a) {}
    extern "C" __global__ void first_second(double a) {}
    template <typename T> __global__ void third(T* p) {}
    namespace ns { extern "C" __global__ void fourth(short s) {} }
    """
    assert sig(source, "first") == [("a", "float", "float", 4)]
    assert sig(source, "first_second") == [("a", "float", "double", 8)]
    assert sig(source, "third<int>") == [("p", "pointer", "int*", 8)]
    assert sig(source, "fourth") == [("s", "int", "short", 2)]
    assert sig(source, "ns::fourth") == [("s", "int", "short", 2)]


@pytest.mark.parametrize(
    ("source", "name", "fragments"),
    [
        (
            'extern "C" __global__ void a(int x) {}\nextern "C" __global__ void b(int x) {}',
            "c",
            [
                "kernel 'c': no __global__ function of that name in the source",
                "kernels found: a, b",
            ],
        ),
        (
            "__device__ void helper(int x) {}",
            "helper",
            ["kernel 'helper': no __global__ function", "(it declares no kernels)"],
        ),
        (
            "#define K(name) __global__ void name(int x) {}\nK(made)",
            "made",
            ["no __global__ function of that name", "declared through a macro"],
        ),
        (
            "__global__ void ov(float* x) {}\n__global__ void ov(double* x) {}",
            "ov",
            [
                "kernel 'ov' is overloaded (2 declarations with different parameters",
                "line 1: ov(float*)",
                "line 2: ov(double*)",
            ],
        ),
        (
            "__global__ void r(float& x) {}",
            "r",
            ["parameter 0 'x' of r (line 1) is a reference (float&)", "cannot be references"],
        ),
        (
            "template <typename T> __global__ void r(T&& x) {}",
            "r<int>",
            ["is a reference (int&&)"],
        ),
        (
            "__global__ void va(int n, ...) {}",
            "va",
            ["parameter 1 of va (line 1) is variadic"],
        ),
        (
            "template <typename... Ts> __global__ void vt(Ts... xs) {}",
            "vt<int, float>",
            ["is a variadic template"],
        ),
        (
            "template <typename T, int N> __global__ void t(T x) {}",
            "t",
            ["kernel 't' is a template (line 1: template parameters T, N)", "e.g. t<float, 128>"],
        ),
        (
            'extern "C" __global__ void p(int x) {}',
            "p<float>",
            ["kernel 'p<float>': p (line 1) is not a template"],
        ),
        (
            "template <typename T> __global__ void t(T x) {}",
            "t<float, int>",
            ["takes 1 template argument(s) (T), the name gives 2"],
        ),
        (
            "template <typename T, typename U> __global__ void t(T x, U y) {}",
            "t<float>",
            ["needs a value for template parameter 'U' (T, U); the name gives 1 argument(s)"],
        ),
        (
            "template <typename T, int N = 128> __global__ void t(T x) {}",
            "t<>",
            ["needs a value for template parameter 'T' (T, N); the name gives 0 argument(s)"],
        ),
        (
            "namespace a { __global__ void k(int x) {} }\n"
            "namespace b { __global__ void k(int x) {} }",
            "k",
            ["kernel 'k' is ambiguous: it could be a::k, b::k; qualify the name"],
        ),
        ("__global__ void k() {}", "k<float", ["unbalanced '<'"]),
        ("__global__ void k() {}", "k(int)", ["is not a kernel name or a name expression"]),
        ("__global__ void k() {}", "", ["is not a kernel name"]),
    ],
)
def test_errors(source, name, fragments):
    with pytest.raises(LaunchError) as info:
        parse_kernel_params(source, name)
    for fragment in fragments:
        assert fragment in str(info.value)


def test_argument_types_are_checked():
    with pytest.raises(TypeError, match="source must be str, got bytes"):
        parse_kernel_params(b"__global__ void k() {}", "k")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="name must be str, got int"):
        parse_kernel_params("__global__ void k() {}", 3)  # type: ignore[arg-type]


def test_string_literals_and_preprocessor_do_not_confuse_the_scanner():
    source = r"""
    #if 0
    __global__ void hidden_only_by_preprocessor(double x) {}
    #endif
    #define MSG "__global__ void fake(int) {"
    __device__ const char* note = "}} __global__ void s(int x) {";
    extern "C" __global__ void s(float y) { printf("%d }\n", 1); }
    """
    assert sig(source, "s") == [("y", "float", "float", 4)]


def test_line_continuation_in_directives():
    source = (
        "#define LONG_MACRO(a) \\\n"
        "   __global__ void lm(int a) \\\n"
        "   {}\n"
        'extern "C" __global__ void real(int b) {}\n'
    )
    assert sig(source, "real") == [("b", "int", "int", 4)]
    with pytest.raises(LaunchError, match="no __global__ function"):
        parse_kernel_params(source, "lm")


def _extern_c_kernels(text: str) -> list[str]:
    text = re.sub(r"//[^\n]*|/\*.*?\*/", " ", text, flags=re.S)
    return re.findall(
        r'extern\s+"C"\s+__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?void\s+'
        r"(?:__launch_bounds__\s*\([^)]*\)\s*)?(\w+)\s*\(",
        text,
    )


KERNEL_FILES = sorted(CUDA_SRC.glob("*.cu")) if CUDA_SRC.is_dir() else []


@pytest.mark.parametrize("path", KERNEL_FILES, ids=lambda p: p.name)
def test_every_extern_c_kernel_of_the_library_parses_to_known_types(path):
    text = path.read_text()
    header = (
        (CUDA_SRC / "ignis_types.cuh").read_text()
        if (CUDA_SRC / "ignis_types.cuh").exists()
        else ""
    )
    for name in _extern_c_kernels(text):
        params = parse_kernel_params(text, name)
        unknown = [p for p in params if p.kind == "unknown"]
        assert not unknown, f"{path.name}: {name}: parameters of unknown type {unknown}"
        # The same result when the header's text is part of the translation unit.
        assert parse_kernel_params(header + "\n" + text, name) == params
