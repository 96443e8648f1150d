"""Packing launch arguments into the kernelParams array (no GPU needed).

The packed bytes are read back through the void* array exactly as the driver reads them, and
compared with the expected value packed independently (``struct`` / NumPy / ml_dtypes).
"""

from __future__ import annotations

import ctypes
import enum
import gc
import math
import random
import struct
import weakref
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from ignis._arg_packing import ArgPacker, PackedArgs
from ignis._signature import Param, parse_kernel_params

from ignis import LaunchError

U64 = 2**64 - 1


def read_params(packed: PackedArgs, sizes: list[int]) -> list[bytes]:
    """What the driver copies: for each i, ``sizes[i]`` bytes at ``((void**)address)[i]``."""
    out = []
    for i, size in enumerate(sizes):
        slot = ctypes.c_uint64.from_address(packed.address + 8 * i).value
        out.append(ctypes.string_at(slot, size))
    return out


def pack_one(kind: str, ctype: str, size: int, value, name: str = "v") -> bytes:
    packer = ArgPacker([Param(name, kind, ctype, size)], "k", param_sizes=[size])
    return read_params(packer.pack([value]), [size])[0]


# --- device-pointer stand-ins --------------------------------------------------------------------


class FakeBuffer:
    """Like ignis.Buffer: an int .ptr, 0 once closed."""

    def __init__(self, ptr: int, closed: bool = False):
        self.ptr = ptr
        self.closed = closed


class FakeCAI:
    def __init__(self, ptr: int):
        self.__cuda_array_interface__ = {
            "data": (ptr, False),
            "shape": (4,),
            "typestr": "<f4",
            "version": 3,
        }


class FakeTorch:
    def __init__(self, ptr: int, is_cuda: bool = True):
        self._ptr = ptr
        self.is_cuda = is_cuda
        self.device = "cuda:0" if is_cuda else "cpu"

    def data_ptr(self) -> int:
        return self._ptr


class SubInt(int):
    """An int that is not exactly ``int``: it skips the generated fast path."""


class Color(enum.IntEnum):
    RED = 3


class Pair(ctypes.Structure):
    _fields_ = [("a", ctypes.c_float), ("b", ctypes.c_int32)]


# --- scalar conversions, one parameter at a time -------------------------------------------------

ADDR = 0x7F12_3456_7000

PACK_CASES = [
    # pointers
    ("pointer", "float*", 8, ADDR, struct.pack("<Q", ADDR)),
    ("pointer", "float*", 8, 0, struct.pack("<Q", 0)),
    ("pointer", "float*", 8, U64, struct.pack("<Q", U64)),
    ("pointer", "float*", 8, None, struct.pack("<Q", 0)),
    ("pointer", "float*", 8, np.uint64(ADDR), struct.pack("<Q", ADDR)),
    ("pointer", "const float*", 8, FakeBuffer(ADDR + 16), struct.pack("<Q", ADDR + 16)),
    ("pointer", "const float*", 8, FakeBuffer(0), struct.pack("<Q", 0)),  # empty, not closed
    ("pointer", "double*", 8, FakeCAI(ADDR + 32), struct.pack("<Q", ADDR + 32)),
    ("pointer", "double*", 8, FakeTorch(ADDR + 48), struct.pack("<Q", ADDR + 48)),
    # float32
    ("float", "float", 4, 1.5, struct.pack("<f", 1.5)),
    ("float", "float", 4, 0.1, struct.pack("<f", 0.1)),
    ("float", "float", 4, -2.75e-3, struct.pack("<f", -2.75e-3)),
    ("float", "float", 4, 3, struct.pack("<f", 3.0)),
    ("float", "float", 4, 2**24 + 1, struct.pack("<f", 16777216.0)),  # rounds to nearest even
    ("float", "float", 4, np.float64(0.1), struct.pack("<f", 0.1)),
    ("float", "float", 4, np.float32(0.1), struct.pack("<f", float(np.float32(0.1)))),
    ("float", "float", 4, np.float16(0.1), struct.pack("<f", float(np.float16(0.1)))),
    (
        "float",
        "float",
        4,
        ml_dtypes.bfloat16(0.1),
        struct.pack("<f", float(ml_dtypes.bfloat16(0.1))),
    ),
    ("float", "float", 4, np.int32(-7), struct.pack("<f", -7.0)),
    ("float", "float", 4, np.uint64(2**40), struct.pack("<f", 2.0**40)),
    ("float", "float", 4, 3.4028234663852886e38, struct.pack("<f", 3.4028234663852886e38)),
    ("float", "float", 4, 3.4028235e38 * (1 + 2**-26), struct.pack("<f", 3.4028234663852886e38)),
    ("float", "float", 4, math.inf, struct.pack("<f", math.inf)),
    ("float", "float", 4, -math.inf, struct.pack("<f", -math.inf)),
    ("float", "float", 4, 1e-46, struct.pack("<f", 0.0)),  # underflow to zero is rounding
    ("float", "float", 4, -0.0, struct.pack("<f", -0.0)),
    # float64
    ("float", "double", 8, 0.1, struct.pack("<d", 0.1)),
    ("float", "double", 8, 1e300, struct.pack("<d", 1e300)),
    ("float", "double", 8, 2**60 + 1, struct.pack("<d", float(2**60))),
    ("float", "double", 8, np.float32(0.1), struct.pack("<d", float(np.float32(0.1)))),
    ("float", "double", 8, np.longdouble(0.5), struct.pack("<d", 0.5)),
    # half
    ("half", "__half", 2, 1.0, struct.pack("<H", 0x3C00)),
    ("half", "__half", 2, -2.0, struct.pack("<H", 0xC000)),
    ("half", "__half", 2, 65504.0, struct.pack("<H", 0x7BFF)),
    ("half", "__half", 2, 65519.99, struct.pack("<H", 0x7BFF)),
    ("half", "__half", 2, 2.0**-24, struct.pack("<H", 0x0001)),  # smallest subnormal
    ("half", "__half", 2, 2.0**-25, struct.pack("<H", 0x0000)),  # tie -> even (zero)
    ("half", "__half", 2, 3 * 2.0**-25, struct.pack("<H", 0x0002)),  # tie -> even
    ("half", "__half", 2, 1 + 2.0**-11, struct.pack("<H", 0x3C00)),  # tie -> even
    ("half", "__half", 2, 1 + 3 * 2.0**-11, struct.pack("<H", 0x3C02)),  # tie -> even
    ("half", "__half", 2, 1 / 3, np.float16(1 / 3).tobytes()),
    ("half", "__half", 2, 7, struct.pack("<H", 0x4700)),
    ("half", "__half", 2, np.float16(0.3), np.float16(0.3).tobytes()),
    ("half", "__half", 2, math.inf, struct.pack("<H", 0x7C00)),
    # bfloat16
    ("bfloat16", "__nv_bfloat16", 2, 1.0, struct.pack("<H", 0x3F80)),
    ("bfloat16", "__nv_bfloat16", 2, -1.5, struct.pack("<H", 0xBFC0)),
    ("bfloat16", "__nv_bfloat16", 2, 1 + 2.0**-8, struct.pack("<H", 0x3F80)),  # tie -> even
    ("bfloat16", "__nv_bfloat16", 2, 1 + 3 * 2.0**-8, struct.pack("<H", 0x3F82)),  # tie -> even
    # Just above the tie in float64 but exactly the tie in float32: must round up (single rounding).
    ("bfloat16", "__nv_bfloat16", 2, 1 + 2.0**-8 + 2.0**-40, struct.pack("<H", 0x3F81)),
    ("bfloat16", "__nv_bfloat16", 2, 2.0**-133, struct.pack("<H", 0x0001)),  # smallest subnormal
    ("bfloat16", "__nv_bfloat16", 2, 2.0**-134, struct.pack("<H", 0x0000)),  # tie -> even
    ("bfloat16", "__nv_bfloat16", 2, 3.3895313892515355e38, struct.pack("<H", 0x7F7F)),  # max
    ("bfloat16", "__nv_bfloat16", 2, -0.0, struct.pack("<H", 0x8000)),
    ("bfloat16", "__nv_bfloat16", 2, -math.inf, struct.pack("<H", 0xFF80)),
    ("bfloat16", "ignis::bfloat16", 2, ml_dtypes.bfloat16(3.140625), struct.pack("<H", 0x4049)),
    ("bfloat16", "ignis::bfloat16", 2, np.int16(-3), struct.pack("<H", 0xC040)),
    # integers
    ("int", "int", 4, 7, struct.pack("<i", 7)),
    ("int", "int", 4, -1, struct.pack("<i", -1)),
    ("int", "int", 4, 2**31 - 1, struct.pack("<i", 2**31 - 1)),
    ("int", "int", 4, -(2**31), struct.pack("<i", -(2**31))),
    ("int", "int", 4, np.int64(-5), struct.pack("<i", -5)),
    ("int", "int", 4, np.uint8(200), struct.pack("<i", 200)),
    ("int", "int", 4, Color.RED, struct.pack("<i", 3)),
    ("uint", "unsigned int", 4, 2**32 - 1, struct.pack("<I", 2**32 - 1)),
    ("uint", "unsigned int", 4, np.uint32(123456), struct.pack("<I", 123456)),
    ("int", "int8_t", 1, -128, struct.pack("<b", -128)),
    ("int", "int8_t", 1, 127, struct.pack("<b", 127)),
    ("uint", "uint8_t", 1, 255, struct.pack("<B", 255)),
    ("int", "short", 2, -32768, struct.pack("<h", -32768)),
    ("uint", "unsigned short", 2, 65535, struct.pack("<H", 65535)),
    ("int", "long long", 8, -(2**63), struct.pack("<q", -(2**63))),
    ("int", "int64", 8, np.int64(2**62), struct.pack("<q", 2**62)),
    ("uint", "size_t", 8, 2**64 - 1, struct.pack("<Q", 2**64 - 1)),
    ("uint", "unsigned long long", 8, np.uint64(2**63 + 5), struct.pack("<Q", 2**63 + 5)),
    ("int", "__int128", 16, -2, (-2).to_bytes(16, "little", signed=True)),
    # bool
    ("bool", "bool", 1, True, b"\x01"),
    ("bool", "bool", 1, False, b"\x00"),
    ("bool", "bool", 1, np.bool_(True), b"\x01"),
    ("bool", "bool", 1, 1, b"\x01"),
    ("bool", "bool", 1, 0, b"\x00"),
    ("bool", "bool", 1, np.int8(1), b"\x01"),
    # raw bytes
    ("struct", "float4", 16, struct.pack("<4f", 1, 2, 3, 4), struct.pack("<4f", 1, 2, 3, 4)),
    ("struct", "float4", 16, np.array([1, 2, 3, 4], np.float32), struct.pack("<4f", 1, 2, 3, 4)),
    ("struct", "Params", 8, Pair(1.5, -3), struct.pack("<fi", 1.5, -3)),
    ("struct", "Params", 8, bytearray(b"abcdefgh"), b"abcdefgh"),
    ("struct", "Params", 8, memoryview(b"01234567"), b"01234567"),
    (
        "struct",
        "Params",
        8,
        np.array((2.5, 9), dtype=[("a", "<f4"), ("b", "<i4")])[()],
        struct.pack("<fi", 2.5, 9),
    ),
    ("unknown", "my_int", 4, np.int32(-9), struct.pack("<i", -9)),
    ("unknown", "my_real", 8, np.float64(0.25), struct.pack("<d", 0.25)),
]


@pytest.mark.parametrize(("kind", "ctype", "size", "value", "expected"), PACK_CASES)
def test_pack_one_value(kind, ctype, size, value, expected):
    assert pack_one(kind, ctype, size, value) == expected


@pytest.mark.parametrize(
    "kind,ctype,size",
    [
        ("float", "float", 4),
        ("float", "double", 8),
        ("half", "__half", 2),
        ("bfloat16", "__nv_bfloat16", 2),
    ],
)
def test_nan_stays_nan(kind, ctype, size):
    raw = pack_one(kind, ctype, size, math.nan)
    dtype = {
        ("float", 4): np.float32,
        ("float", 8): np.float64,
        ("half", 2): np.float16,
        ("bfloat16", 2): ml_dtypes.bfloat16,
    }[(kind, size)]
    assert np.isnan(np.frombuffer(raw, dtype=dtype)[0].astype(np.float64))


# --- conversions on random data ------------------------------------------------------------------


def random_doubles(rng: np.random.Generator, n: int, max_exp: int) -> np.ndarray:
    mantissa = rng.uniform(-1, 1, n)
    exponent = rng.integers(-max_exp, max_exp, n)
    return np.ldexp(mantissa, exponent)


def test_float32_matches_numpy_on_random_doubles():
    rng = np.random.default_rng(0)
    xs = random_doubles(rng, 2000, 126)
    packer = ArgPacker([Param("x", "float", "float", 4)], "k", [4])
    for x in xs:
        assert read_params(packer.pack([float(x)]), [4])[0] == np.float32(x).tobytes()


def test_half_matches_numpy_on_random_doubles():
    rng = np.random.default_rng(1)
    xs = random_doubles(rng, 3000, 26)
    xs = xs[np.abs(xs) < 65504]
    packer = ArgPacker([Param("x", "half", "__half", 2)], "k", [2])
    for x in xs:
        assert read_params(packer.pack([float(x)]), [2])[0] == np.float16(x).tobytes()


def bfloat16_reference(x: float) -> bytes:
    """Nearest bfloat16 (ties to even), decided with exact rational arithmetic."""
    guess = int(np.array(x).astype(ml_dtypes.bfloat16).view(np.uint16))
    candidates = []
    for bits in (guess - 1, guess, guess + 1):
        if not 0 <= bits <= 0xFFFF:
            continue
        value = float(np.array(bits, np.uint16).view(ml_dtypes.bfloat16))
        if math.isfinite(value) and (value == 0 or math.copysign(1, value) == math.copysign(1, x)):
            candidates.append((abs(Fraction(value) - Fraction(x)), bits & 1, bits))
    return struct.pack("<H", min(candidates)[2])


def test_bfloat16_matches_exact_rounding_on_random_doubles():
    rng = np.random.default_rng(2)
    tiny = np.ldexp(rng.uniform(-1, 1, 300), rng.integers(-140, -120, 300))  # subnormal bfloat16
    xs = np.concatenate([random_doubles(rng, 3000, 127), tiny])
    packer = ArgPacker([Param("x", "bfloat16", "__nv_bfloat16", 2)], "k", [2])
    for x in xs:
        assert read_params(packer.pack([float(x)]), [2])[0] == bfloat16_reference(float(x)), x


def test_bfloat16_near_ties_round_once_from_float64():
    # x = a tie between two bfloat16 values, nudged by far less than a float32 ulp: rounding
    # through float32 would land on the tie and pick the even neighbour, whatever the nudge.
    rng = np.random.default_rng(4)
    packer = ArgPacker([Param("x", "bfloat16", "__nv_bfloat16", 2)], "k", [2])
    for bits in rng.integers(0x0080, 0x7F7F, 500):
        low = float(np.array(bits, np.uint16).view(ml_dtypes.bfloat16))
        high = float(np.array(bits + 1, np.uint16).view(ml_dtypes.bfloat16))
        tie = (low + high) / 2
        for x, want in ((tie * (1 + 2.0**-40), high), (tie * (1 - 2.0**-40), low)):
            got = read_params(packer.pack([x]), [2])[0]
            assert (
                got
                == bfloat16_reference(x)
                == np.array(want, np.float32).astype(ml_dtypes.bfloat16).tobytes()
            )


def test_bfloat16_matches_ml_dtypes_for_float32_values():
    # From float32 there is only one rounding, so ml_dtypes' cast is the reference.
    rng = np.random.default_rng(3)
    xs = random_doubles(rng, 2000, 127).astype(np.float32)
    packer = ArgPacker([Param("x", "bfloat16", "__nv_bfloat16", 2)], "k", [2])
    for x in xs:
        assert read_params(packer.pack([x]), [2])[0] == x.astype(ml_dtypes.bfloat16).tobytes()


@pytest.mark.parametrize(
    ("ctype", "size", "code"),
    [("int8_t", 1, "b"), ("short", 2, "h"), ("int", 4, "i"), ("long long", 8, "q")],
)
def test_signed_integers_on_random_values(ctype, size, code):
    rng = random.Random(size)
    packer = ArgPacker([Param("n", "int", ctype, size)], "k", [size])
    lo, hi = -(2 ** (8 * size - 1)), 2 ** (8 * size - 1) - 1
    for _ in range(300):
        v = rng.randint(lo, hi)
        assert read_params(packer.pack([v]), [size])[0] == struct.pack("<" + code, v)
    for bad in (lo - 1, hi + 1, hi + rng.randint(2, 2**70)):
        with pytest.raises(LaunchError, match=f"{bad} is out of range for {ctype}"):
            packer.pack([bad])


# --- whole argument lists ------------------------------------------------------------------------

SAXPY = (
    'extern "C" __global__ void saxpy(float a, const float* x, float* y, long long n, double s,'
    " bool flag, __half h, unsigned char c) {}"
)
SAXPY_SIZES = [4, 8, 8, 8, 8, 1, 2, 1]


def test_whole_argument_list_through_the_pointer_array():
    packer = ArgPacker(parse_kernel_params(SAXPY, "saxpy"), "saxpy", SAXPY_SIZES)
    x, y = FakeBuffer(ADDR), FakeCAI(ADDR + 4096)
    packed = packer.pack([2.5, x, y, 10**12, np.float32(0.1), True, 0.5, np.uint8(250)])
    assert len(packed) == 8 and packed.address != 0
    assert packed.sizes == tuple(SAXPY_SIZES)
    expected = [
        struct.pack("<f", 2.5),
        struct.pack("<Q", ADDR),
        struct.pack("<Q", ADDR + 4096),
        struct.pack("<q", 10**12),
        struct.pack("<d", float(np.float32(0.1))),
        b"\x01",
        struct.pack("<e", 0.5),
        b"\xfa",
    ]
    assert read_params(packed, SAXPY_SIZES) == expected
    assert [packed.param_bytes(i) for i in range(8)] == expected
    # Every value is 8-byte aligned and lives outside the pointer table.
    slots = [ctypes.c_uint64.from_address(packed.address + 8 * i).value for i in range(8)]
    assert all(s % 8 == 0 for s in slots)
    assert min(slots) >= packed.address + 8 * 8
    assert len(set(slots)) == 8


def test_tuple_generator_and_list_arguments():
    packer = ArgPacker([Param("a", "int", "int", 4), Param("b", "int", "int", 4)], "k", [4, 4])
    for args in ([1, 2], (1, 2), (v for v in (1, 2)), range(1, 3)):
        assert read_params(packer.pack(args), [4, 4]) == [
            struct.pack("<i", 1),
            struct.pack("<i", 2),
        ]


def test_each_pack_gets_new_storage():
    packer = ArgPacker([Param("n", "int", "int", 4)], "k", [4])
    first = packer.pack([1])
    second = packer.pack([2])
    assert first.address != second.address
    assert first.param_bytes(0) == struct.pack("<i", 1)
    assert second.param_bytes(0) == struct.pack("<i", 2)


def test_acquire_reuses_released_storage_and_writes_only_the_values():
    packer = ArgPacker(parse_kernel_params(SAXPY, "saxpy"), "saxpy", SAXPY_SIZES)
    args = [2.5, ADDR, ADDR + 8, 10**12, 0.25, False, 1.5, 7]
    storage, address = first = packer.acquire(args)
    table = ctypes.string_at(address, 8 * 8)
    packer.release(first)
    second = packer.acquire([-1.0, ADDR + 16, 0, -5, 3.0, True, -2.0, 255])
    assert second == first  # the same block, pointer table untouched
    assert ctypes.string_at(address, 8 * 8) == table
    assert read_params(PackedArgs(address, tuple(SAXPY_SIZES), storage, None), SAXPY_SIZES) == [
        struct.pack("<f", -1.0),
        struct.pack("<Q", ADDR + 16),
        struct.pack("<Q", 0),
        struct.pack("<q", -5),
        struct.pack("<d", 3.0),
        b"\x01",
        struct.pack("<e", -2.0),
        b"\xff",
    ]
    # A block in use is never handed out again; pack() results own their storage.
    third = packer.acquire(args)
    assert third[1] != address
    packed = packer.pack(args)
    assert packed.address not in (address, third[1])
    packer.release(second)
    packer.release(third)
    assert packer.acquire(args)[1] in (address, third[1])


def test_a_refused_value_leaves_the_pool_whole():
    packer = ArgPacker([Param("n", "int", "int", 4), Param("x", "float", "float", 4)], "k", [4, 4])
    pool = packer._pool
    assert len(pool) == 1
    for bad, fragment in (
        ([2**31, 1.0], "2147483648 is out of range for int"),
        ([1, 1e39], r"1e\+39 is out of range for float"),
        ([1, "x"], "expects a real number"),
    ):
        with pytest.raises(LaunchError, match=fragment):
            packer.acquire(bad)
        assert len(pool) == 1
    block = packer.acquire([3, 0.5])
    assert len(pool) == 0
    assert read_params(PackedArgs(block[1], (4, 4), block[0], None), [4, 4]) == [
        struct.pack("<i", 3),
        struct.pack("<f", 0.5),
    ]


FAST_AND_SLOW = [
    # (kind, ctype, size, draw(rng) -> exact Python value, [other types of the same value])
    ("int", "int8_t", 1, lambda r: r.randint(-128, 127), [np.int8, np.int64]),
    ("uint", "unsigned short", 2, lambda r: r.randint(0, 2**16 - 1), [np.uint16, np.int32]),
    ("int", "int", 4, lambda r: r.randint(-(2**31), 2**31 - 1), [np.int32, np.int64]),
    ("uint", "unsigned int", 4, lambda r: r.randint(0, 2**32 - 1), [np.uint32, np.uint64]),
    ("int", "long long", 8, lambda r: r.randint(-(2**63), 2**63 - 1), [np.int64]),
    ("uint", "size_t", 8, lambda r: r.randint(0, 2**64 - 1), [np.uint64]),
    ("float", "float", 4, lambda r: r.uniform(-1, 1) * 2.0 ** r.randint(-160, 127), [np.float64]),
    (
        "float",
        "double",
        8,
        lambda r: r.uniform(-1, 1) * 2.0 ** r.randint(-1000, 1000),
        [np.float64],
    ),
    ("half", "__half", 2, lambda r: r.uniform(-1, 1) * 2.0 ** r.randint(-26, 15), [np.float64]),
    ("pointer", "float*", 8, lambda r: r.randint(0, 2**64 - 1), [np.uint64, FakeBuffer]),
]


@pytest.mark.parametrize(("kind", "ctype", "size", "draw", "others"), FAST_AND_SLOW)
def test_fast_path_and_converters_agree_on_random_values(kind, ctype, size, draw, others):
    # Exact Python types take the generated fast path; the same value as a NumPy scalar (or a
    # buffer) goes through the converter. Both must give the same bytes, and the expected
    # bytes come from struct/NumPy directly.
    rng = random.Random(size * 31 + len(ctype))
    packer = ArgPacker([Param("v", kind, ctype, size)], "k", [size])
    code = {"pointer": "Q", "float": "f" if size == 4 else "d", "half": "e"}.get(kind)
    if code is None:
        code = {1: "b", 2: "h", 4: "i", 8: "q"}[size]
        code = code.upper() if kind == "uint" else code
    for _ in range(400):
        value = draw(rng)
        want = struct.pack("<" + code, value)
        assert read_params(packer.pack([value]), [size])[0] == want, value
        for other in others:
            if other is FakeBuffer and value == 0:
                continue  # a zero .ptr is checked for a closed buffer: covered elsewhere
            assert read_params(packer.pack([other(value)]), [size])[0] == want, (other, value)


@pytest.mark.parametrize(
    ("kind", "ctype", "size", "edges"),
    [
        ("int", "short", 2, [-(2**15) - 1, 2**15, 2**70, -(2**70)]),
        ("uint", "unsigned char", 1, [-1, 256]),
        ("uint", "unsigned long long", 8, [-1, 2**64]),
        ("float", "float", 4, [3.4028235677973366e38, -3.4028235677973366e38, 1e300]),
        ("half", "__half", 2, [65520.0, -65520.0, 1e10]),
        ("pointer", "void*", 8, [-1, 2**64]),
    ],
)
def test_values_just_out_of_range_are_refused_the_same_way_on_both_paths(kind, ctype, size, edges):
    packer = ArgPacker([Param("v", kind, ctype, size)], "k", [size])
    for value in edges:
        with pytest.raises(LaunchError) as fast:
            packer.pack([value])
        if isinstance(value, float):
            slow_value = np.float64(value)
        else:
            slow_value = FakeBuffer(value) if kind == "pointer" else SubInt(value)
        with pytest.raises(LaunchError) as slow:
            packer.pack([slow_value])
        assert "out of range" in str(fast.value) or "not a valid 64-bit pointer" in str(fast.value)
        assert str(fast.value) == str(slow.value)


def test_values_at_the_edge_of_the_range_are_accepted_exactly():
    cases = [
        ("int", "short", 2, -(2**15), struct.pack("<h", -(2**15))),
        ("int", "short", 2, 2**15 - 1, struct.pack("<h", 2**15 - 1)),
        ("uint", "unsigned long long", 8, 2**64 - 1, struct.pack("<Q", 2**64 - 1)),
        ("float", "float", 4, 3.4028235677973362e38, struct.pack("<f", 3.4028234663852886e38)),
        ("float", "float", 4, math.nan, struct.pack("<f", math.nan)),
        ("float", "float", 4, -math.inf, struct.pack("<f", -math.inf)),
        ("half", "__half", 2, 65519.99, struct.pack("<H", 0x7BFF)),
        ("half", "__half", 2, -math.inf, struct.pack("<H", 0xFC00)),
        ("bool", "bool", 1, False, b"\x00"),
    ]
    for kind, ctype, size, value, want in cases:
        assert pack_one(kind, ctype, size, value) == want, (ctype, value)


def test_generated_code_is_readable_and_shared_with_callers():
    packer = ArgPacker(parse_kernel_params(SAXPY, "saxpy"), "saxpy", SAXPY_SIZES)
    assert packer.source.startswith("def acquire(args):\n")
    assert "# args[3] (n: long long)" in packer.source
    lines, names = packer.pack_code()
    assert names["release_block"] == packer.release
    assert not any(line.startswith(" ") for line in lines[:1])
    # The lines run anywhere the names are bound: here, in a function of our own.
    namespace = dict(names)
    body = "".join(f"    {line}\n" for line in lines)
    exec(f"def mine(args):\n{body}    return packed\n", namespace)
    storage, address = namespace["mine"]([1.0, ADDR, 0, 3, 2.0, True, 0.5, 9])
    assert read_params(PackedArgs(address, (), storage, None), SAXPY_SIZES)[3] == struct.pack(
        "<q", 3
    )
    # Unpooled packers (no parameters, or sizes only known from the values) still have one.
    for p in (
        ArgPacker([], "k", []),
        ArgPacker(
            parse_kernel_params('struct P { int a; };\nextern "C" __global__ void s(P p) {}', "s"),
            "s",
            None,
        ),
    ):
        assert p.source == "" and p.pack_code()[0] == ["packed = acquire_block(args)"]


def test_packed_args_keep_the_arguments_alive():
    packer = ArgPacker([Param("p", "pointer", "float*", 8)], "k", [8])
    buffer = FakeBuffer(ADDR)
    ref = weakref.ref(buffer)
    packed = packer.pack([buffer])
    del buffer
    gc.collect()
    assert ref() is not None
    del packed
    gc.collect()
    assert ref() is None


def test_kernel_without_parameters():
    packer = ArgPacker([], "k", [])
    packed = packer.pack([])
    assert packed.address == 0 and len(packed) == 0
    with pytest.raises(LaunchError, match=r"expected 0 argument\(s\) \(none\), got 1"):
        packer.pack([1])


def test_param_bytes_index_check():
    packed = ArgPacker([Param("n", "int", "int", 4)], "k", [4]).pack([1])
    with pytest.raises(IndexError, match="index 1 out of range 0..0"):
        packed.param_bytes(1)


# --- errors --------------------------------------------------------------------------------------

ERROR_CASES = [
    # integers
    (
        "int",
        "int",
        4,
        3.0,
        "launch of 'k': args[0] (v: int) expects an integer for int, got float 3.0; floats are "
        "not converted implicitly, pass int(x)",
    ),
    ("int", "int", 4, np.float32(3), "expects an integer for int, got float32 3.0"),
    (
        "int",
        "int",
        4,
        True,
        "expects an integer for int, got bool True; pass int(x) if you mean 0/1",
    ),
    ("int", "int", 4, np.bool_(False), " False; pass int(x) if you mean 0/1"),
    (
        "int",
        "int",
        4,
        2**31,
        "launch of 'k': args[0] (v: int): 2147483648 is out of range for int (32-bit signed: "
        "-2147483648..2147483647)",
    ),
    ("int", "int", 4, np.int64(-(2**31) - 1), "-2147483649 is out of range for int"),
    (
        "uint",
        "unsigned int",
        4,
        -1,
        "-1 is out of range for unsigned int (32-bit unsigned: 0..4294967295)",
    ),
    ("uint", "uint8_t", 1, 256, "256 is out of range for uint8_t (8-bit unsigned: 0..255)"),
    (
        "int",
        "int",
        4,
        "7",
        "expects an integer for int (a Python int or a NumPy integer scalar), got str '7'",
    ),
    ("int", "int", 4, None, "got NoneType None"),
    ("int", "int", 4, np.array([1]), "got ndarray array([1])"),
    # floats
    (
        "float",
        "float",
        4,
        True,
        "args[0] (v: float) expects a real number for float, got bool True",
    ),
    ("float", "float", 4, 1e39, "1e+39 is out of range for float (it would round to infinity)"),
    ("float", "float", 4, -3.4028235677973366e38, "is out of range for float"),
    ("float", "float", 4, 10**39, "1e+39 is out of range for float"),
    ("float", "double", 8, 10**400, "is too large for double (it overflows to infinity)"),
    (
        "float",
        "float",
        4,
        1 + 2j,
        "expects a real number for float (a Python int or float, or a NumPy integer or floating "
        "scalar), got complex (1+2j)",
    ),
    ("float", "float", 4, np.complex64(1), "got complex64"),
    ("float", "float", 4, "1.0", "got str '1.0'"),
    (
        "half",
        "__half",
        2,
        65520.0,
        "65520.0 is out of range for __half (it would round to infinity)",
    ),
    ("half", "__half", 2, -1e5, "-100000.0 is out of range for __half"),
    ("bfloat16", "__nv_bfloat16", 2, 3.4e38, "3.4e+38 is out of range for __nv_bfloat16"),
    # bools
    ("bool", "bool", 1, 2, "args[0] (v: bool) expects a bool (or 0 or 1), got int 2"),
    ("bool", "bool", 1, 1.0, "expects a bool (True/False, a NumPy bool, or 0/1), got float 1.0"),
    # pointers
    (
        "pointer",
        "const float*",
        8,
        1.5,
        "args[0] (v: const float*) expects a device pointer: an object with an int .ptr (ignis "
        "buffers and arrays), __cuda_array_interface__ or data_ptr(), an int address, or None; "
        "got float 1.5; pass int(x) for a raw address",
    ),
    ("pointer", "float*", 8, -4, "address -4 is not a valid 64-bit pointer"),
    ("pointer", "float*", 8, 2**64, "address 18446744073709551616 is not a valid 64-bit pointer"),
    ("pointer", "float*", 8, True, "expects a device pointer"),
    (
        "pointer",
        "float*",
        8,
        np.zeros(3, np.float32),
        "got a NumPy array, which is in host memory: copy it to device memory first",
    ),
    (
        "pointer",
        "float*",
        8,
        FakeBuffer(0, closed=True),
        "FakeBuffer is closed; its memory was freed",
    ),
    (
        "pointer",
        "float*",
        8,
        FakeTorch(ADDR, is_cuda=False),
        "got FakeTorch in host memory (device cpu): move it to the GPU first",
    ),
    ("pointer", "float*", 8, "0x1000", "got str '0x1000'"),
    ("pointer", "float*", 8, object(), "got object <object object at"),
    # raw bytes
    (
        "struct",
        "float4",
        16,
        b"12345678",
        "args[0] (v: float4): expects 16 bytes for float4, got 8 bytes (bytes)",
    ),
    ("struct", "Params", 8, np.float32(1), "expects 8 bytes for Params, got 4 bytes (float32)"),
    (
        "unknown",
        "my_int",
        4,
        5,
        "ignis cannot convert to my_int; it expects its raw bytes (bytes, bytearray, memoryview, "
        "a NumPy scalar or array, or a ctypes object) of 4 bytes, got int 5; wrap the value in "
        "the matching NumPy scalar (e.g. np.int32(x))",
    ),
    ("unknown", "my_int", 4, "abcd", "got str 'abcd'"),
    ("unknown", "my_int", 4, [1, 2], "got list [1, 2]"),
]


@pytest.mark.parametrize(("kind", "ctype", "size", "value", "fragment"), ERROR_CASES)
def test_bad_values_are_refused_with_a_clear_message(kind, ctype, size, value, fragment):
    packer = ArgPacker([Param("v", kind, ctype, size)], "k", param_sizes=[size])
    with pytest.raises(LaunchError) as info:
        packer.pack([value])
    assert fragment in str(info.value)


def test_error_names_the_argument_index_and_parameter():
    packer = ArgPacker(parse_kernel_params(SAXPY, "saxpy"), "saxpy", SAXPY_SIZES)
    args = [2.0, ADDR, ADDR, 3.0, 1.0, True, 0.5, 1]
    with pytest.raises(LaunchError) as info:
        packer.pack(args)
    assert str(info.value).startswith(
        "launch of 'saxpy': args[3] (n: long long) expects an integer"
    )


def test_unnamed_parameters_are_labelled_by_type():
    packer = ArgPacker(
        parse_kernel_params('extern "C" __global__ void u(float*, int) {}', "u"), "u", [8, 4]
    )
    with pytest.raises(LaunchError, match=r"args\[1\] \(int\) expects an integer"):
        packer.pack([0, 1.0])
    with pytest.raises(LaunchError, match=r"expected 2 argument\(s\) \(<0>, <1>\), got 1"):
        packer.pack([0])


@pytest.mark.parametrize("args", [[1.0, ADDR], [1.0, ADDR, ADDR, 4, 1.0, True, 0.5, 1, 9]])
def test_wrong_argument_count(args):
    packer = ArgPacker(parse_kernel_params(SAXPY, "saxpy"), "saxpy", SAXPY_SIZES)
    with pytest.raises(LaunchError) as info:
        packer.pack(args)
    assert str(info.value) == (
        f"launch of 'saxpy': expected 8 argument(s) (a, x, y, n, s, flag, h, c), got {len(args)}"
    )


@pytest.mark.parametrize("args", ["ab", 5, None])
def test_args_must_be_a_sequence(args):
    packer = ArgPacker([Param("n", "int", "int", 4)], "k", [4])
    with pytest.raises(
        LaunchError, match=r"args must be a list or tuple with one value per parameter \(n\)"
    ):
        packer.pack(args)


# --- source versus driver ------------------------------------------------------------------------


def test_driver_sizes_must_match_the_source():
    params = parse_kernel_params(SAXPY, "saxpy")
    with pytest.raises(LaunchError) as info:
        ArgPacker(params, "saxpy", [4, 8, 8])
    assert str(info.value) == (
        "kernel 'saxpy': the source declares 8 parameter(s) (a, x, y, n, s, flag, h, c) but the "
        "compiled kernel has 3 (sizes in bytes: 4, 8, 8); the source does not match the "
        "compiled code"
    )
    with pytest.raises(LaunchError) as info:
        ArgPacker(params, "saxpy", [4, 8, 8, 4, 8, 1, 2, 1])
    assert str(info.value) == (
        "kernel 'saxpy': parameter 3 (n: long long) is 8 bytes according to the source but 4 "
        "bytes in the compiled kernel; the source does not match the compiled code"
    )


def test_driver_sizes_fill_in_struct_and_unknown_sizes():
    source = 'struct P { float a; int b; };\nextern "C" __global__ void s(P p, Mystery m, int n) {}'
    params = parse_kernel_params(source, "s")
    assert [(p.kind, p.size) for p in params] == [("struct", None), ("unknown", None), ("int", 4)]
    packer = ArgPacker(params, "s", [8, 2, 4])
    assert [p.size for p in packer.params] == [8, 2, 4]
    packed = packer.pack([Pair(0.5, 7), np.uint16(513), 3])
    assert read_params(packed, [8, 2, 4]) == [
        struct.pack("<fi", 0.5, 7),
        struct.pack("<H", 513),
        struct.pack("<i", 3),
    ]
    with pytest.raises(
        LaunchError, match=r"args\[1\] \(m: Mystery\): expects 2 bytes for Mystery, got 4 bytes"
    ):
        packer.pack([Pair(0.5, 7), np.uint32(1), 3])


def test_without_driver_sizes_raw_values_take_their_own_size():
    params = parse_kernel_params(
        'struct P { double d; };\nextern "C" __global__ void s(int a, P p, float b) {}', "s"
    )
    packer = ArgPacker(params, "s", None)
    packed = packer.pack([1, struct.pack("<d", 2.5), 3.0])
    assert packed.sizes == (4, 8, 4)
    assert read_params(packed, [4, 8, 4]) == [
        struct.pack("<i", 1),
        struct.pack("<d", 2.5),
        struct.pack("<f", 3.0),
    ]


def test_types_unknown_to_the_source_use_driver_sizes_only():
    packer = ArgPacker(None, "opaque", [8, 4])
    assert [(p.kind, p.size) for p in packer.params] == [("unknown", 8), ("unknown", 4)]
    packed = packer.pack([np.uint64(ADDR), np.float32(1.25)])
    assert read_params(packed, [8, 4]) == [struct.pack("<Q", ADDR), struct.pack("<f", 1.25)]
    with pytest.raises(
        LaunchError, match="neither the parameter types nor the driver's parameter sizes are known"
    ):
        ArgPacker(None, "opaque", None)


def test_block_lines_write_the_given_value_expressions():
    # The lines a generated hot path runs inline: the values it names, in parameter order, and
    # exactly one expression per parameter.
    from ignis._arg_packing import block_lines
    from ignis._codegen import build_function

    packer = ArgPacker(
        [Param("x", "pointer", "float*", 8), Param("n", "int", "int", 4)], "k", [8, 4]
    )
    lines = block_lines(packer, "(ptr, count)", ["ptr", "count"])
    _, names = packer.pack_code()
    _, write = build_function(
        "write", "ptr, count", [*lines, "return packed"], names, "<test block_lines>"
    )
    block = write(0x7F00_0000_1000, 37)
    try:
        table = (ctypes.c_uint64 * 2).from_address(block[1])
        assert ctypes.c_uint64.from_address(table[0]).value == 0x7F00_0000_1000
        assert ctypes.c_int32.from_address(table[1]).value == 37
    finally:
        packer.release(block)
    with pytest.raises(LaunchError, match=r"kernel 'k': 1 values for 2 parameters"):
        block_lines(packer, "(ptr,)", ["ptr"])
