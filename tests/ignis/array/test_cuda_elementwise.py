"""The CUDA backend's elementwise family (unary, binary, where, copy/cast, fill, arange, random).

Three layers:

* CPU-side compile checks: every kernel template instance the Python side can ask for (every
  op and dtype, every scalar form, vector widths, strided and 64-bit-index variants, every cast
  pair, the random kernels) compiles with NVRTC for sm_90; the PTX uses 16-byte vector accesses
  and no local memory.
* CPU-side plumbing: the hooks run against an emulator of the kernels (host memory, the real
  argument packer, offsets decoded from the packed ``StridedArgs`` with the kernel's 32-bit
  magic division) through the public NvArray API and must agree exactly with the CPU backend,
  so argument order, scalar forms, vector widths and layouts are checked without a GPU.
* GPU tests (``gpu`` marker): the real kernels against the CPU backend / NumPy in float64 on
  random data: every op and dtype, non-contiguous and broadcast views, scalars, mixed dtypes,
  odd sizes, NaN/Inf, 64-bit indexing, and the random streams bit for bit.
"""

from __future__ import annotations

import bisect
import itertools
import re
import struct
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from ignis._arg_packing import ArgPacker
from ignis._array import _backend
from ignis._array import _semantics as sem
from ignis._array import random as ig_random
from ignis._array._cuda_backend import _strided
from ignis._array._cuda_backend import elementwise as ew
from ignis._array._op_table import ELEMENTWISE
from ignis._signature import parse_kernel_params

import ignis
from ignis import CompileOptions, NvArray, _sources
from ignis import _dtypes as dt

BF16 = np.dtype(ml_dtypes.bfloat16)
ALL_DTYPES = list(dt.all_dtypes)
CTYPE = dict(ew.CTYPE)
WORK = dict(ew._WORK)

# ==================================================================================================
# Compile checks (no GPU)
# ==================================================================================================


def _natural_v(*dtypes: dt.DType) -> int:
    return 16 // max(d.itemsize for d in dtypes)


def _unary_names() -> list[str]:
    """Every op on every dtype it takes (contiguous kernels), every op strided on one dtype,
    and the other variants (V = 1, 64-bit index) on a few."""
    names = []
    for op in sem.UNARY_OPS:
        functors = (
            list(ew._CHOSEN_FUNCTOR[op][1].values())
            if op in ew._CHOSEN_FUNCTOR
            else [ew._UNARY_FUNCTOR[op]]
        )
        for x in ALL_DTYPES:
            try:
                spec = sem.unary(op, (), x)
            except ignis.DTypeError:  # refused by the rule (bool for numeric ops, ...)
                continue
            for f in functors:
                args = (f, WORK[spec.compute], CTYPE[spec.dtype], CTYPE[x])
                names.append(ew.kernel_name("unary_contig", *args, _natural_v(spec.dtype, x)))
                if x in (dt.float32, dt.int32):
                    names.append(ew.kernel_name("unary_strided", *args, False))
    for x in (dt.float32, dt.bfloat16, dt.int8):
        args = (
            "ignis::ew::op_exp" if x.kind == "f" else "ignis::ew::op_neg",
            WORK[x],
            CTYPE[x],
            CTYPE[x],
        )
        names.append(ew.kernel_name("unary_contig", *args, 1))
        names.append(ew.kernel_name("unary_strided", *args, True))
    return names


class _Operand:
    """An array operand as the op rules see it: a dtype and a shape."""

    def __init__(self, dtype: dt.DType):
        self.dtype, self.shape = dtype, (4,)


def _binary_rule(op: str, d: dt.DType) -> tuple[dt.DType, dt.DType] | None:
    """(compute, result dtype) of ``op`` on two ``d`` arrays, from the op rules; None where the
    rule refuses the pair (two bools for subtract or power, floats for bitwise ops)."""
    try:
        spec = sem.binary(op, _Operand(d), _Operand(d))
    except ignis.DTypeError:
        return None
    return spec.compute, spec.dtype


def _binary_names() -> list[str]:
    """Every op on every dtype (contiguous, two arrays); strided, scalar forms and the other
    variants on a few dtypes; mixed operand dtypes and narrowing in-place outputs."""
    names = []
    for op in sem.BINARY_OPS:
        f = ew._BINARY_FUNCTOR[op]
        for d in ALL_DTYPES:
            rule = _binary_rule(op, d)
            if rule is None:
                continue
            compute, out = rule
            w = WORK[compute]
            base = (f, w, CTYPE[out], CTYPE[d], CTYPE[d])
            v = _natural_v(out, d)
            names.append(ew.kernel_name("binary_contig", *base, 0, v))
            if d in (dt.float32, dt.int32):
                names.append(ew.kernel_name("binary_strided", *base, 0, False))
            if d in (dt.bfloat16, dt.uint8):
                names.append(ew.kernel_name("binary_contig", f, w, CTYPE[out], w, CTYPE[d], 1, v))
                names.append(ew.kernel_name("binary_contig", f, w, CTYPE[out], CTYPE[d], w, 2, v))
                names.append(
                    ew.kernel_name("binary_strided", f, w, CTYPE[out], CTYPE[d], w, 2, True)
                )
                names.append(ew.kernel_name("binary_contig", *base, 0, 1))
    mixed = [
        ("add", dt.float32, dt.bfloat16, dt.bfloat16, dt.float32),  # bf16 += f32 (accumulate)
        ("add", dt.float32, dt.float16, dt.float32, dt.float32),
        ("multiply", dt.float64, dt.float64, dt.int32, dt.float32),
        ("divide", dt.float64, dt.float64, dt.int8, dt.uint8),
        ("less", dt.float32, dt.bool_, dt.float16, dt.float32),
        ("maximum", dt.int32, dt.int32, dt.int8, dt.uint8),
        ("add", dt.float64, dt.float16, dt.float16, dt.float64),  # f16 += f64
        ("power", dt.int64, dt.int64, dt.bool_, dt.int64),
    ]
    for op, compute, out, a, b in mixed:
        base = (ew._BINARY_FUNCTOR[op], WORK[compute], CTYPE[out], CTYPE[a], CTYPE[b])
        names.append(ew.kernel_name("binary_contig", *base, 0, _natural_v(out, a, b)))
        names.append(ew.kernel_name("binary_strided", *base, 0, False))
    return names


def _bcast_names() -> list[str]:
    """binary_bcast: every op on every dtype (b a row, vectors); every side, kind and width on a
    few dtypes; mixed operand dtypes (an in-place bfloat16 += float32 row among them)."""
    names = []
    for op in sem.BINARY_OPS:
        f = ew._BINARY_FUNCTOR[op]
        for d in ALL_DTYPES:
            rule = _binary_rule(op, d)
            if rule is None:
                continue
            compute, out = rule
            base = (f, WORK[compute], CTYPE[out], CTYPE[d], CTYPE[d])
            names.append(ew.kernel_name("binary_bcast", *base, 2, ew.ROW, _natural_v(out, d)))
            if d in (dt.float32, dt.bfloat16, dt.float16, dt.int8, dt.float64) and op in (
                "add",
                "multiply",
                "maximum",
                "less",
            ):
                for side, kind in itertools.product((1, 2), (ew.ROW, ew.COLUMN)):
                    for v in (_natural_v(out, d), 1):
                        names.append(ew.kernel_name("binary_bcast", *base, side, kind, v))
    mixed = [
        ("add", dt.float32, dt.bfloat16, dt.bfloat16, dt.float32),
        ("multiply", dt.float64, dt.float64, dt.int32, dt.float32),
        ("less", dt.float32, dt.bool_, dt.float16, dt.float32),
        ("power", dt.int64, dt.int64, dt.bool_, dt.int64),
    ]
    for op, compute, out, a, b in mixed:
        base = (ew._BINARY_FUNCTOR[op], WORK[compute], CTYPE[out], CTYPE[a], CTYPE[b])
        for side, kind in itertools.product((1, 2), (ew.ROW, ew.COLUMN)):
            names.append(ew.kernel_name("binary_bcast", *base, side, kind, _natural_v(out, a, b)))
    return names


def _where_names() -> list[str]:
    names = []
    for d in ALL_DTYPES:
        w = WORK[d]
        for forms in range(7):
            tc = "bool" if forms & 1 else "bool"
            ta = w if forms & 2 else CTYPE[d]
            tb = w if forms & 4 else CTYPE[d]
            names.append(
                ew.kernel_name("where_contig", w, CTYPE[d], tc, ta, tb, forms, _natural_v(d))
            )
        names.append(
            ew.kernel_name("where_strided", w, CTYPE[d], "bool", CTYPE[d], CTYPE[d], 0, False)
        )
    names.append(
        ew.kernel_name("where_contig", "float", "float", "float", "ignis::int8", "float", 4, 4)
    )
    names.append(
        ew.kernel_name(
            "where_strided", "double", "double", "ignis::bfloat16", "double", "double", 6, True
        )
    )
    return names


def _copy_names() -> list[str]:
    names = []
    for to, src in itertools.product(ALL_DTYPES, ALL_DTYPES):
        if to is not src:
            names.append(ew.kernel_name("copy_contig", CTYPE[to], CTYPE[src], _natural_v(to, src)))
        names.append(ew.kernel_name("copy_strided", CTYPE[to], CTYPE[src], False))
    names.append(ew.kernel_name("copy_contig", "float", "ignis::bfloat16", 1))
    names.append(ew.kernel_name("copy_strided", "float", "ignis::bfloat16", True))
    for to, src in [(d, d) for d in ALL_DTYPES] + [
        (dt.float32, dt.bfloat16),
        (dt.float16, dt.float64),
    ]:
        names.append(ew.kernel_name("copy_transpose", CTYPE[to], CTYPE[src]))
    for u in ew._UINT.values():
        names.append(ew.kernel_name("fill_strided", u, False))
        names.append(ew.kernel_name("fill_strided", u, True))
        names.append(ew.kernel_name("fill_contig", u))
    for d in ALL_DTYPES:
        names.append(ew.kernel_name("arange_int", CTYPE[d]))
        if d.kind == "f":
            names.append(ew.kernel_name("arange_float", CTYPE[d]))
    return names


def _random_names() -> list[str]:
    names = []
    for d in dt.floating_dtypes:
        names.append(ew.kernel_name("uniform", CTYPE[d]))
        names.append(ew.kernel_name("normal", CTYPE[d]))
    for d in dt.integer_dtypes:
        names.append(ew.kernel_name("integers", CTYPE[d], False))
        names.append(ew.kernel_name("integers", CTYPE[d], True))
    return names


NAME_SETS = {
    "unary": _unary_names,
    "binary": _binary_names,
    "binary_bcast": _bcast_names,
    "where": _where_names,
    "copy_fill_arange": _copy_names,
}


def _compile(
    names: list[str], source: str = ew.SOURCE, arch: str = "sm_90", extra=()
) -> ignis.ObjectCode:
    return ignis.compile(
        _sources.read_source(source), CompileOptions(arch=arch, extra=extra), name_expressions=names
    )


@pytest.mark.parametrize("family", sorted(NAME_SETS))
@pytest.mark.exhaustive
def test_every_elementwise_instance_compiles(family: str) -> None:
    names = list(dict.fromkeys(NAME_SETS[family]()))
    # PTX only (the front end and the optimizer catch template errors); batches keep each
    # NVRTC program small.
    for i in range(0, len(names), 150):
        batch = names[i : i + 150]
        obj = _compile(batch, arch="compute_90")
        assert set(obj.lowered_names) == set(batch)


@pytest.mark.exhaustive
def test_kernels_keep_their_registers() -> None:
    # Machine code for a sample of every family: nothing spills, and nothing but sin/cos
    # (whose large-argument range reduction keeps a table on the stack) has a stack frame, so
    # the per-thread register arrays (U x V elements) really stay in registers.
    sample = []
    for make in NAME_SETS.values():
        names = list(dict.fromkeys(make()))
        sample += names[:: max(1, len(names) // 12)]
    obj = _compile(sample, extra=("--ptxas-options=-v",))
    reports = re.findall(
        r"Function properties for (\S+)\s*\n.*?(\d+) bytes stack frame, (\d+) bytes spill stores",
        obj.log,
    )
    assert len(reports) >= len(sample), obj.log[:2000]
    for symbol, frame, spills in reports:
        assert spills == "0", f"{symbol} spills registers"
        assert frame == "0" or re.search(r"op_(sin|cos)E", symbol), (
            f"{symbol} uses {frame} bytes of stack"
        )


def test_random_instances_compile() -> None:
    names = _random_names()
    obj = _compile(names, source=ew.RANDOM_SOURCE)
    assert set(obj.lowered_names) == set(names)


def test_the_kernel_names_the_hooks_build_are_the_ones_compiled() -> None:
    # kernel_name formats bools and namespaces the way the compile checks above assume.
    assert ew.kernel_name(
        "binary_strided", "ignis::ew::op_add", "float", "float", "float", "float", 0, True
    ) == ("ignis::ew::binary_strided<ignis::ew::op_add, float, float, float, float, 0, true>")
    assert (
        ew.kernel_name("integers", "ignis::int8", False)
        == "ignis::rng::integers<ignis::int8, false>"
    )


def _kernel_ptx(ptx: str, mangled: str) -> str:
    start = ptx.index(f".entry {mangled}(")
    end = ptx.index("\n}\n", start)
    return ptx[start:end]


@pytest.mark.parametrize(
    "ctype,v", [("float", 4), ("ignis::bfloat16", 8), ("ignis::float16", 8), ("double", 2)]
)
def test_contiguous_kernels_use_16_byte_accesses(ctype: str, v: int) -> None:
    w = "float" if "16" in ctype else ctype
    name = ew.kernel_name("binary_contig", "ignis::ew::op_add", w, ctype, ctype, ctype, 0, v)
    obj = _compile([name], arch="compute_90")
    body = _kernel_ptx(obj.code.decode(), obj.lowered_names[name])
    loads = re.findall(r"ld\.global\.v4\.\w+|ld\.global\.v2\.(?:f64|u64|b64)", body)
    stores = re.findall(r"st\.global\.v4\.\w+|st\.global\.v2\.(?:f64|u64|b64)", body)
    # two operands x two vectors in flight per iteration, plus the remainder loop
    assert len(loads) >= 4 and len(stores) >= 2, body[:3000]
    # both vector loads of an iteration are issued before the first store
    first_store = body.index(stores[0].split()[0])
    assert body.count("ld.global.v", 0, first_store) >= 4


@pytest.mark.parametrize("kind", [ew.ROW, ew.COLUMN])
@pytest.mark.parametrize("ctype,v", [("float", 4), ("ignis::bfloat16", 8)])
def test_broadcast_kernels_use_16_byte_accesses_and_no_division_in_the_loop(
    ctype: str, v: int, kind: int
) -> None:
    w = "float" if "16" in ctype else ctype
    name = ew.kernel_name("binary_bcast", "ignis::ew::op_add", w, ctype, ctype, ctype, 2, kind, v)
    obj = _compile([name], arch="compute_90")
    body = _kernel_ptx(obj.code.decode(), obj.lowered_names[name])
    loads = re.findall(r"ld\.global\.(?:v4\.\w+|v2\.(?:u64|b64))", body)  # 16 bytes each
    stores = re.findall(r"st\.global\.(?:v4\.\w+|v2\.(?:u64|b64))", body)
    # bcast_unroll dense vectors (and as many row vectors) in flight per iteration
    per_iteration = ew.BCAST_UNROLL * (2 if kind == ew.ROW else 1)
    assert len(loads) >= per_iteration and len(stores) >= ew.BCAST_UNROLL, body[:3000]
    first_store = body.index(stores[0].split()[0])
    assert len(re.findall(r"ld\.global\.v", body[:first_store])) >= per_iteration
    # The row/column position is walked, not divided: the two divisions of the set-up are
    # all (a 64-bit division is a call or a long inline sequence, before the loop only).
    loop = body[body.index("ld.global") :]
    assert "div.s64" not in loop and "rem.s64" not in loop and "div.u64" not in loop


def test_scalar_path_of_the_contiguous_kernels_has_no_vector_loads() -> None:
    name = ew.kernel_name(
        "binary_contig", "ignis::ew::op_add", "float", "float", "float", "float", 0, 1
    )
    obj = _compile([name], arch="compute_90")
    body = _kernel_ptx(obj.code.decode(), obj.lowered_names[name])
    assert "ld.global.v" not in body and "ld.global.f32" in body


def test_arange_has_no_fused_multiply_add() -> None:
    name = ew.kernel_name("arange_float", "double")
    obj = _compile([name], arch="compute_90")
    body = _kernel_ptx(obj.code.decode(), obj.lowered_names[name])
    assert "fma" not in body and "mul.rn.f64" in body and "add.rn.f64" in body


# ==================================================================================================
# _strided (no GPU)
# ==================================================================================================


def test_collapse_merges_contiguous_and_broadcast_dims() -> None:
    assert _strided.collapse((4, 5, 6), [(120, 24, 4), (0, 0, 4)]) == ((20, 6), [(24, 4), (0, 4)])
    assert _strided.collapse((2, 3), [(12, 4), (12, 4)]) == ((6,), [(4,), (4,)])
    assert _strided.collapse((2, 1, 3), [(12, 99, 4)]) == ((6,), [(4,)])
    assert _strided.collapse((1, 1), [(8, 8), (0, 0)]) == ((1,), [(0,), (0,)])
    # a transpose does not merge
    assert _strided.collapse((3, 4), [(16, 4), (4, 12)]) == ((3, 4), [(16, 4), (4, 12)])
    # negative strides merge when even
    assert _strided.collapse((2, 3), [(-12, -4)]) == ((6,), [(-4,)])


def test_sort_by_first_follows_the_first_operand() -> None:
    shape, strides = _strided.sort_by_first((3, 4), [(4, 12), (16, 4)])
    assert shape == (4, 3) and strides == [(12, 4), (4, 16)]
    same = _strided.sort_by_first((3, 4), [(16, 4), (4, 12)])
    assert same == ((3, 4), [(16, 4), (4, 12)])


def test_split_outer_covers_every_leading_index() -> None:
    shape = (2, 3, 1, 1, 1, 1, 1, 1, 5, 7)
    strides = [tuple(range(10, 0, -1)), tuple(range(100, 0, -10))]
    pieces = list(_strided.split_outer(shape, strides))
    assert len(pieces) == 6
    assert pieces[0][0] == [0, 0] and pieces[-1][0] == [1 * 10 + 2 * 9, 100 + 2 * 90]
    assert all(p[1] == shape[2:] and p[2] == [s[2:] for s in strides] for p in pieces)
    assert list(_strided.split_outer((3, 4), [(4, 1)])) == [([0], (3, 4), [(4, 1)])]


def test_fast_divider_matches_integer_division() -> None:
    rng = np.random.default_rng(0)
    divisors = list(range(1, 300)) + [2**k + e for k in range(9, 31) for e in (-1, 0, 1)] + [2**31]
    divisors += [int(x) for x in rng.integers(1, 2**31, size=300)]
    numerators = np.concatenate(
        [
            np.arange(0, 2000),
            rng.integers(0, 2**31, size=2000),
            np.array([2**31 - 1, 2**31 - 2, 2**30]),
        ]
    ).astype(np.uint64)
    for d in divisors:
        magic, shift = _strided.fast_divider(d)
        assert 0 <= magic < 2**32 and 0 <= shift <= 31
        hi = (numerators * np.uint64(magic)) >> np.uint64(32)  # __umulhi
        q = ((hi + numerators) & np.uint64(0xFFFFFFFF)) >> np.uint64(shift)
        np.testing.assert_array_equal(q, numerators // np.uint64(d), err_msg=f"divisor {d}")
    with pytest.raises(ValueError, match="divisor must be in"):
        _strided.fast_divider(0)


def test_strided_packer_layout() -> None:
    packer = _strided.StridedPacker(3)
    assert packer.size == 8 * 8 + 3 * 8 * 8 + 8 * 4 * 2 + 8 == 328
    raw = packer.pack((5, 7), [(28, 4), (0, 4), (-8, 0)])
    values = struct.unpack("<8q24q8I8Iii", raw)
    assert values[:8] == (7, 5, 1, 1, 1, 1, 1, 1)  # innermost first
    assert values[8:16] == (4, 28, 0, 0, 0, 0, 0, 0)
    assert values[16:24] == (4, 0, 0, 0, 0, 0, 0, 0)
    assert values[24:32] == (0, -8, 0, 0, 0, 0, 0, 0)
    assert values[32:40] == (
        _strided.fast_divider(7)[0],
        _strided.fast_divider(5)[0],
        1,
        1,
        1,
        1,
        1,
        1,
    )
    assert values[-2:] == (2, 0)
    with pytest.raises(ValueError, match="at most 8"):
        packer.pack((1,) * 9, [(0,) * 9] * 3)
    with pytest.raises(ValueError, match="expected 3 stride tuples"):
        packer.pack((2,), [(4,)])


@pytest.mark.parametrize("narg", [1, 2, 3, 4])
def test_strided_struct_size_matches_the_kernels(narg: int) -> None:
    # The C++ side static_asserts 200 + 64 * (narg - 1) bytes; the packer must agree.
    assert _strided.StridedPacker(narg).size == 136 + 64 * narg


def test_transpose_plan_recognizes_transposing_copies() -> None:
    # dst (64, 48) contiguous float32, src the transpose of a contiguous (48, 64) float16
    assert ew._transpose_plan((64, 48), (192, 4), (2, 128), 4, 2) == (64, 48, 1, 192, 128, 0, 0)
    # batched: (3, 40, 50) <- permute(0, 2, 1) of a contiguous (3, 50, 40)
    plan = ew._transpose_plan((3, 40, 50), (8000, 200, 4), (8000, 4, 160), 4, 4)
    assert plan == (40, 50, 3, 200, 160, 8000, 8000)
    assert ew._transpose_plan((64, 48), (192, 4), (192, 4), 4, 4) is None  # no transpose
    assert ew._transpose_plan((4, 48), (192, 4), (4, 16), 4, 4) is None  # too thin for tiles
    assert ew._transpose_plan((64, 48), (192, 4), (0, 4), 4, 4) is None  # broadcast source


def test_is_contiguous() -> None:
    assert _strided.is_contiguous((2, 3), (12, 4), 4)
    assert _strided.is_contiguous((2, 1, 3), (12, 0, 4), 4)
    assert not _strided.is_contiguous((2, 3), (4, 8), 4)
    assert not _strided.is_contiguous((3,), (0,), 4)
    assert _strided.is_contiguous((1,), (0,), 4)


@pytest.mark.parametrize(
    "shape,strides,itemsize,expected",
    [
        ((4, 3), (0, 4), 4, (ew.ROW, 3)),  # (3,) against (4, 3)
        ((5, 4, 3), (0, 12, 4), 4, (ew.ROW, 12)),  # (4, 3) against (5, 4, 3)
        ((5, 4, 3), (0, 0, 2), 2, (ew.ROW, 3)),  # (3,) against (5, 4, 3)
        ((5, 1, 3), (0, 99, 8), 8, (ew.ROW, 3)),  # size-1 dims take any stride
        ((4, 3), (4, 0), 4, (ew.COLUMN, 3)),  # (4, 1) against (4, 3)
        ((2, 4, 3), (16, 4, 0), 4, (ew.COLUMN, 3)),  # (2, 4, 1) against (2, 4, 3)
        ((2, 4, 3), (4, 0, 0), 4, (ew.COLUMN, 12)),  # (2, 1, 1) against (2, 4, 3)
        ((4, 3), (0, 0), 4, (ew.COLUMN, 12)),  # one value
        ((7,), (0,), 1, (ew.COLUMN, 7)),
        ((4, 3), (12, 4), 4, None),  # dense
        ((4, 3), (0, 8), 4, None),  # a strided row
        ((4, 3), (8, 0), 4, None),  # a strided column
        ((3, 4, 5), (0, 4, 0), 4, None),  # broadcast on both sides of a dense dim
        ((3, 4, 5), (20, 0, 4), 4, None),  # dense on both sides of a broadcast dim
        ((4, 3), (0, -4), 4, None),  # a reversed row
        ((1, 1), (0, 0), 4, None),  # one element: the contiguous kernels
    ],
)
def test_broadcast_kind_recognizes_rows_and_columns(shape, strides, itemsize, expected) -> None:
    assert ew.broadcast_kind(shape, strides, itemsize) == expected


# ==================================================================================================
# Emulated kernels: the hooks' plumbing checked on the CPU (no GPU)
# ==================================================================================================

NP_OF_CTYPE = {CTYPE[d]: d.numpy for d in ALL_DTYPES}
NP_OF_CTYPE.update(
    {
        "ignis::uint16": np.dtype(np.uint16),
        "ignis::uint32": np.dtype(np.uint32),
        "ignis::uint64": np.dtype(np.uint64),
    }
)
DT_OF_CTYPE = {CTYPE[d]: d for d in ALL_DTYPES}


class HostBuffer:
    """Host memory standing in for a device buffer (an int ``ptr`` like ignis buffers)."""

    def __init__(self, nbytes: int):
        self.array = np.zeros(max(nbytes, 8) + 8, np.uint8)
        self.ptr = self.array.__array_interface__["data"][0]
        self.nbytes = nbytes


class HostMemory:
    def __init__(self) -> None:
        self.bases: list[int] = []
        self.buffers: list[HostBuffer] = []

    def alloc(self, nbytes: int) -> HostBuffer:
        buf = HostBuffer(nbytes)
        i = bisect.bisect(self.bases, buf.ptr)
        self.bases.insert(i, buf.ptr)
        self.buffers.insert(i, buf)
        return buf

    def _find(self, addr: int) -> HostBuffer:
        i = bisect.bisect(self.bases, addr) - 1
        assert i >= 0, f"address {addr:#x} is not in any buffer"
        buf = self.buffers[i]
        assert buf.ptr <= addr < buf.ptr + buf.array.size, f"address {addr:#x} is not in any buffer"
        return buf

    def _index(
        self, addr: int, offsets: np.ndarray, dtype: np.dtype
    ) -> tuple[np.ndarray, np.ndarray]:
        buf = self._find(addr)
        rel = (addr - buf.ptr) + offsets.astype(np.int64)
        size = dtype.itemsize
        assert np.all(rel % size == 0), "misaligned element access"
        assert np.all((rel >= 0) & (rel + size <= buf.nbytes)), "access out of the buffer"
        usable = buf.array[: buf.array.size // size * size]
        return usable.view(dtype), rel // size

    def gather(self, addr: int, offsets: np.ndarray, dtype: np.dtype) -> np.ndarray:
        typed, idx = self._index(addr, offsets, np.dtype(dtype))
        return typed[idx]

    def scatter(self, addr: int, offsets: np.ndarray, values: np.ndarray, dtype: np.dtype) -> None:
        typed, idx = self._index(addr, offsets, np.dtype(dtype))
        assert len(np.unique(idx)) == len(idx), "two elements written to one address"
        typed[idx] = values

    def read(self, addr: int, nbytes: int) -> bytes:
        buf = self._find(addr)
        rel = addr - buf.ptr
        return buf.array[rel : rel + nbytes].tobytes()

    def write(self, addr: int, data: bytes) -> None:
        buf = self._find(addr)
        rel = addr - buf.ptr
        assert rel + len(data) <= buf.nbytes
        buf.array[rel : rel + len(data)] = np.frombuffer(data, np.uint8)


MEMORY = HostMemory()


def _split_template(name: str) -> tuple[str, list[str]]:
    m = re.fullmatch(r"ignis::(?:ew|rng)::(\w+)<(.*)>", name)
    assert m, name
    return m.group(1), [a.strip() for a in m.group(2).split(",")]


def _decode_offsets(packed: bytes, narg: int, n: int, wide: bool) -> list[np.ndarray]:
    values = struct.unpack(f"<8q{8 * narg}q8I8Iii", packed)
    sizes = values[:8]
    strides = [values[8 + 8 * a : 16 + 8 * a] for a in range(narg)]
    magic = values[8 + 8 * narg : 16 + 8 * narg]
    shift = values[16 + 8 * narg : 24 + 8 * narg]
    ndim = values[24 + 8 * narg]
    assert wide == (n >= 2**31)
    rest = np.arange(n, dtype=np.uint64)
    offs = [np.zeros(n, np.int64) for _ in range(narg)]
    for d in range(ndim):
        if wide:
            q = rest // np.uint64(sizes[d])
        else:  # the kernel's 32-bit magic division
            hi = (rest * np.uint64(magic[d])) >> np.uint64(32)
            q = ((hi + rest) & np.uint64(0xFFFFFFFF)) >> np.uint64(shift[d])
            np.testing.assert_array_equal(q, rest // np.uint64(sizes[d]))
        r = (rest - q * np.uint64(sizes[d])).astype(np.int64)
        for a in range(narg):
            offs[a] += r * strides[a][d]
        rest = q
    assert np.all(rest == 0), "the shape does not cover n elements"
    return offs


def _op_of_functor(functor: str) -> tuple[Any, dict[str, str]]:
    """The op table's entry computed by ``functor``, and the parameters that choose it."""
    name = functor.rsplit("::", 1)[1]
    for op in ELEMENTWISE.values():
        if op.functor == name:
            return op, {}
        if not isinstance(op.functor, str):
            for value, f in op.functor.items():
                if f == name:
                    return op, {next(iter(op.params)): value}
    raise KeyError(functor)


def _reference_unary(functor: str, v: np.ndarray) -> np.ndarray:
    op, params = _op_of_functor(functor)
    return op.numpy(v, **params)


def _reference_binary(functor: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return _op_of_functor(functor)[0].numpy(a, b)


def _as(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    values = np.asarray(values)
    if {values.dtype, np.dtype(dtype)} == {np.dtype(np.float16), BF16}:
        values = values.astype(np.float32)
    return values.astype(dtype)


class EmulatedKernel:
    """Stands in for an ignis.Kernel: packs the arguments with the real packer (types and count
    from the kernel source) and performs the kernel's work on host memory with NumPy."""

    launches: list[tuple[str, int, int]] = []

    def __init__(self, source_file: str, name: str):
        self.name = name
        self.family, self.targs = _split_template(name)
        self.packer = ArgPacker(parse_kernel_params(_sources.read_source(source_file), name), name)

    def launch(self, grid, block, args, *, shared_mem=0, stream=None):
        if self.family == "copy_transpose":
            assert block == ew.TRANSPOSE_BLOCK and len(grid) == 3 and min(grid) >= 1
            assert grid[1] <= 65535 and grid[2] <= 65535
        else:
            assert isinstance(grid, int) and grid >= 1 and block == ew.BLOCK
        self.packer.pack(list(args))  # raises on a wrong count or a value of the wrong type
        EmulatedKernel.launches.append((self.name, grid, block))
        getattr(self, "_" + self.family.replace("_contig", "").replace("_strided", ""))(list(args))

    def _prepared(self, device, grid, block, shared_mem=0):
        """Kernel._prepared: one configuration, converted values."""

        def launch(stream, *values):
            self.launch(grid, block, list(values), shared_mem=shared_mem, stream=stream)

        return launch

    # layout of operand elements: byte offsets for each array argument
    def _offsets(self, ptr_count: int, n: int, args: list, sizes: list[int]) -> list[np.ndarray]:
        if self.family.endswith("_strided"):
            wide = self.targs[-1] == "true"
            return _decode_offsets(args[-1], ptr_count, n, wide)
        v = int(self.targs[-1]) if self.family.endswith("_contig") else 1
        for p, size in zip(args[:ptr_count], sizes, strict=True):
            if p:
                assert p % (v * size) == 0, (
                    f"{self.name}: pointer {p:#x} is not aligned for {v} elements"
                )
        return [np.arange(n, dtype=np.int64) * size for size in sizes]

    def _load(self, ptr: int, off: np.ndarray, ctype: str, work: str | None = None) -> np.ndarray:
        values = MEMORY.gather(ptr, off, NP_OF_CTYPE[ctype])
        return (
            values
            if work is None
            else _as(values, NP_OF_CTYPE[work] if work != "float" else np.float32)
        )

    def _unary(self, args: list) -> None:
        functor, w, to, tx = self.targs[:4]
        n = args[2]
        off = self._offsets(2, n, args, [NP_OF_CTYPE[to].itemsize, NP_OF_CTYPE[tx].itemsize])
        x = self._load(args[1], off[1], tx, w)
        with np.errstate(all="ignore"):
            res = _as(_reference_unary(functor, x), NP_OF_CTYPE[to])
        MEMORY.scatter(args[0], off[0], res, NP_OF_CTYPE[to])

    def _binary(self, args: list) -> None:
        functor, w, to, ta, tb, form = self.targs[:6]
        form = int(form)
        n = args[5]
        off = self._offsets(3, n, args, [NP_OF_CTYPE[t].itemsize for t in (to, ta, tb)])
        wnp = np.dtype(np.float32) if w == "float" else NP_OF_CTYPE[w]
        a = np.full(n, args[3], wnp) if form == 1 else self._load(args[1], off[1], ta, w)
        b = np.full(n, args[4], wnp) if form == 2 else self._load(args[2], off[2], tb, w)
        if form != 1:
            assert args[3] == 0
        if form != 2:
            assert args[4] == 0
        with np.errstate(all="ignore"):
            res = _as(_reference_binary(functor, a, b), NP_OF_CTYPE[to])
        MEMORY.scatter(args[0], off[0], res, NP_OF_CTYPE[to])

    def _binary_bcast(self, args: list) -> None:
        # out and the dense operand: element i; the broadcast operand: i % inner (row) or
        # i // inner (column). Vector accesses need the run length and the vector-read pointers
        # aligned, as the kernel does.
        functor, w, to, ta, tb, side, kind, v = self.targs
        side, kind, v = int(side), int(kind), int(v)
        out, pa, pb, n, inner = args
        assert n >= 1 and inner >= 1 and n % inner == 0
        sizes = [NP_OF_CTYPE[t].itemsize for t in (to, ta, tb)]
        assert v == 1 or (inner % v == 0 and v * max(sizes) == 16)
        vector_read = [True, side == 2 or kind == 0, side == 1 or kind == 0]
        for p, size, vec in zip((out, pa, pb), sizes, vector_read, strict=True):
            assert p % ((v if vec else 1) * size) == 0, f"{self.name}: {p:#x} misaligned"
        i = np.arange(n, dtype=np.int64)
        index = i % inner if kind == 0 else i // inner
        a = self._load(pa, (index if side == 1 else i) * sizes[1], ta, w)
        b = self._load(pb, (index if side == 2 else i) * sizes[2], tb, w)
        with np.errstate(all="ignore"):
            res = _as(_reference_binary(functor, a, b), NP_OF_CTYPE[to])
        MEMORY.scatter(out, i * sizes[0], res, NP_OF_CTYPE[to])

    def _where(self, args: list) -> None:
        w, to, tc, ta, tb, forms = self.targs[:6]
        forms = int(forms)
        n = args[7]
        off = self._offsets(4, n, args, [NP_OF_CTYPE[t].itemsize for t in (to, tc, ta, tb)])
        wnp = np.dtype(np.float32) if w == "float" else NP_OF_CTYPE[w]
        c = np.full(n, args[4], bool) if forms & 1 else self._load(args[1], off[1], tc).astype(bool)
        a = np.full(n, args[5], wnp) if forms & 2 else self._load(args[2], off[2], ta, w)
        b = np.full(n, args[6], wnp) if forms & 4 else self._load(args[3], off[3], tb, w)
        MEMORY.scatter(args[0], off[0], _as(np.where(c, a, b), NP_OF_CTYPE[to]), NP_OF_CTYPE[to])

    def _copy(self, args: list) -> None:
        to, ts = self.targs[:2]
        n = args[2]
        off = self._offsets(2, n, args, [NP_OF_CTYPE[to].itemsize, NP_OF_CTYPE[ts].itemsize])
        with np.errstate(all="ignore"):
            res = _as(self._load(args[1], off[1], ts), NP_OF_CTYPE[to])
        MEMORY.scatter(args[0], off[0], res, NP_OF_CTYPE[to])

    def _copy_transpose(self, args: list) -> None:
        out, src, rows, cols, batches, out_row, src_col, out_batch, src_batch = args
        to, ts = (NP_OF_CTYPE[t] for t in self.targs)
        b, r, c = (
            x.reshape(-1)
            for x in np.meshgrid(
                np.arange(batches), np.arange(rows), np.arange(cols), indexing="ij"
            )
        )
        values = MEMORY.gather(src, b * src_batch + r * ts.itemsize + c * src_col, ts)
        with np.errstate(all="ignore"):
            MEMORY.scatter(out, b * out_batch + r * out_row + c * to.itemsize, _as(values, to), to)

    def _fill(self, args: list) -> None:
        u = NP_OF_CTYPE[self.targs[0]]
        n = args[2]
        if self.family == "fill_contig":
            off = [np.arange(n, dtype=np.int64) * u.itemsize]
        else:
            off = _decode_offsets(args[3], 1, n, self.targs[1] == "true")
        MEMORY.scatter(args[0], off[0], np.full(n, args[1], u), u)

    def _arange_float(self, args: list) -> None:
        out, start, step, n = args
        t = NP_OF_CTYPE[self.targs[0]]
        MEMORY.scatter(
            out, np.arange(n) * t.itemsize, _as(start + np.arange(n, dtype=np.float64) * step, t), t
        )

    def _arange_int(self, args: list) -> None:
        out, start, step, n = args
        t = NP_OF_CTYPE[self.targs[0]]
        with np.errstate(all="ignore"):
            vals = np.int64(start) + np.arange(n, dtype=np.int64) * np.int64(step)
        MEMORY.scatter(out, np.arange(n) * t.itemsize, vals.astype(t), t)

    def _random(self, kind: str, args: list) -> None:
        out, n, k0, k1, offset = args[:5]
        d = DT_OF_CTYPE[self.targs[0]]
        params = {}
        if kind == "integers":
            params = {"low": args[5], "high": args[5] + args[6] + 1}
            assert (self.targs[1] == "true") == (args[6] + 1 > 2**32)
        host = ig_random.generate_host(kind, (n,), d, k0 | (k1 << 32), offset, params)
        MEMORY.scatter(out, np.arange(n) * d.itemsize, host, d.numpy)

    def _uniform(self, args: list) -> None:
        self._random("uniform", args)

    def _normal(self, args: list) -> None:
        self._random("normal", args)

    def _integers(self, args: list) -> None:
        self._random("integers", args)


class EmulatedDriver:
    """The driver calls the hooks make directly (memset, memcpy), on host memory."""

    @staticmethod
    def _memset(ptr: int, value: int, n: int, dtype) -> None:
        MEMORY.write(ptr, np.full(n, value, dtype).tobytes())

    def cuMemsetD8Async(self, ptr, value, n, stream):
        self._memset(ptr, value, n, np.uint8)

    def cuMemsetD16Async(self, ptr, value, n, stream):
        self._memset(ptr, value, n, np.uint16)

    def cuMemsetD32Async(self, ptr, value, n, stream):
        self._memset(ptr, value, n, np.uint32)

    def cuMemcpyDtoDAsync(self, dst, src, nbytes, stream):
        MEMORY.write(dst, MEMORY.read(src, nbytes))


class _Gpu:
    ordinal = 97  # never a real device's ordinal: the hooks' kernel cache is keyed by it
    multiprocessor_count = 4


class _Stream:
    handle = 0


class EmulatedCudaBackend(_backend.Backend):
    """A "cuda" backend whose hooks are the real elementwise hooks over emulated kernels."""

    kind = "cuda"

    def __init__(self, device):
        super().__init__(device)
        self.gpu = _Gpu()
        self.stream = _Stream()

    def alloc(self, nbytes):
        return MEMORY.alloc(nbytes)

    def storage_nbytes(self, storage):
        return storage.nbytes

    def data_ptr(self, arr):
        return arr._storage.ptr + arr._offset

    def dlpack_device(self):
        return (2, 0)

    def copyin(self, dst, host):
        if dst.is_contiguous:
            MEMORY.write(self.data_ptr(dst), np.ascontiguousarray(host).tobytes())
        else:
            tmp = NvArray.empty(dst.shape, dtype=dst.dtype, device=dst.device)
            self.copyin(tmp, host)
            self.copy(dst, tmp)

    def copyout(self, src):
        if not src.is_contiguous:
            tmp = NvArray.empty(src.shape, dtype=src.dtype, device=src.device)
            self.copy(tmp, src)
            src = tmp
        data = MEMORY.read(self.data_ptr(src), src.nbytes) if src.numel else b""
        return np.frombuffer(data, src.dtype.numpy).reshape(src.shape).copy()

    def copy(self, dst, src):
        ew.copy(self, dst, src)

    def fill(self, dst, value):
        ew.fill(self, dst, value)

    def unary(self, op, out, x, compute, params):
        ew.unary(self, op, out, x, compute, params)

    def binary(self, op, out, a, b, compute):
        ew.binary(self, op, out, a, b, compute)

    def where(self, out, cond, a, b, compute):
        ew.where(self, out, cond, a, b, compute)

    def arange(self, out, start, step):
        ew.arange(self, out, start, step)

    def random(self, kind, out, seed, offset, params):
        ew.random(self, kind, out, seed, offset, params)

    def reduce(self, *args):  # pragma: no cover - not part of this family
        raise NotImplementedError

    def arg_reduce(self, *args):  # pragma: no cover
        raise NotImplementedError

    def softmax(self, *args):  # pragma: no cover
        raise NotImplementedError

    def matmul(self, *args):  # pragma: no cover
        raise NotImplementedError


@pytest.fixture
def emu(monkeypatch):
    """Device name of the emulated cuda backend; the hooks' caches are private to the test."""
    ignis.clear_caches()
    monkeypatch.setattr(
        ew, "library_kernel", lambda source, name, device: EmulatedKernel(source, name)
    )
    monkeypatch.setattr(ew, "cu", EmulatedDriver())
    monkeypatch.setattr(ew, "activate", lambda device: None)
    EmulatedKernel.launches = []
    _backend.register_backend("cuda", EmulatedCudaBackend)
    yield "cuda:0"
    _backend.register_backend("cuda", None)
    ignis.clear_caches()  # (the emulated kernels)


def _rand(rng, shape, d: dt.DType, positive=False) -> np.ndarray:
    if d is dt.bool_:
        return rng.random(shape) < 0.5
    if d.kind in "iu":
        lo = 1 if positive else (0 if d.kind == "u" else -20)
        return rng.integers(lo, 20, size=shape).astype(d.numpy)
    x = rng.uniform(-3, 3, size=shape)
    if positive:
        x = np.abs(x) + 0.25
    return x.astype(d.numpy)


def _pair(host: np.ndarray, device: str, layout: str) -> tuple[NvArray, NvArray]:
    """The same values on "cpu" and on ``device``, as a view of the given layout."""
    out = []
    for dev in ("cpu", device):
        if layout == "transposed":
            a = NvArray.from_host(np.ascontiguousarray(host.T), device=dev).T
        elif layout == "sliced":
            big = np.zeros((host.shape[0], host.shape[1] * 2 + 1), host.dtype)
            big[:, 1::2] = host
            a = NvArray.from_host(big, device=dev)[:, 1::2]
        elif layout == "offset":  # contiguous but misaligned for vector access
            flat = np.concatenate([np.zeros(1, host.dtype), host.reshape(-1)])
            a = NvArray.from_host(flat, device=dev)[1:].reshape(host.shape)
        else:
            a = NvArray.from_host(host, device=dev)
        out.append(a)
    return out[0], out[1]


def _same(cpu: NvArray, other: NvArray) -> None:
    assert other.dtype == cpu.dtype and other.shape == cpu.shape
    x, y = cpu.to_host(), other.to_host()
    if x.dtype.kind == "f" or x.dtype == BF16:
        np.testing.assert_array_equal(x.astype(np.float64), y.astype(np.float64))
    else:
        np.testing.assert_array_equal(x, y)


UNARY_CALLS = {
    "exp": ignis.exp,
    "log": ignis.log,
    "sqrt": ignis.sqrt,
    "rsqrt": ignis.rsqrt,
    "sin": ignis.sin,
    "cos": ignis.cos,
    "tanh": ignis.tanh,
    "sigmoid": ignis.sigmoid,
    "relu": ignis.relu,
    "silu": ignis.silu,
    "erf": ignis.erf,
    "gelu": ignis.gelu,
    "gelu_tanh": lambda x: ignis.gelu(x, approximate="tanh"),
    "negative": ignis.negative,
    "abs": ignis.abs,
}


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "offset"])
@pytest.mark.parametrize("d", ALL_DTYPES, ids=str)
@pytest.mark.exhaustive
def test_emulated_unary_matches_cpu(emu, d, layout, rng) -> None:
    for name, fn in UNARY_CALLS.items():
        op = "gelu" if name.startswith("gelu") else name
        if sem.UNARY_OPS[op] == "numeric" and d is dt.bool_:
            continue
        host = _rand(rng, (6, 5), d, positive=op in ("log", "sqrt", "rsqrt"))
        c, g = _pair(host, emu, layout)
        _same(fn(c), fn(g))


BINARY_CALLS = {op: getattr(ignis, op) for op in sem.BINARY_OPS}


@pytest.mark.parametrize("layout", ["contiguous", "sliced", "offset"])
@pytest.mark.parametrize("d", ALL_DTYPES, ids=str)
@pytest.mark.exhaustive
def test_emulated_binary_matches_cpu(emu, d, layout, rng) -> None:
    for op, fn in BINARY_CALLS.items():
        if _binary_rule(op, d) is None:  # refused (bitwise ops: integers only)
            continue
        a_host = _rand(rng, (4, 7), d)
        b_host = _rand(rng, (4, 7), d, positive=op == "power" and d.kind == "f")
        ac, ag = _pair(a_host, emu, layout)
        bc, bg = _pair(b_host, emu, "contiguous")
        _same(fn(ac, bc), fn(ag, bg))
        _same(fn(bc, ac), fn(bg, ag))
        scalar = True if d is dt.bool_ else (2 if d.kind in "iu" else 1.5)
        _same(fn(ac, scalar), fn(ag, scalar))
        _same(fn(scalar, ac), fn(scalar, ag))


@pytest.mark.parametrize(
    "pair",
    [
        ("float32", "bfloat16"),
        ("int8", "uint8"),
        ("float16", "int32"),
        ("bool", "float64"),
        ("int64", "float32"),
    ],
)
def test_emulated_mixed_dtypes_and_broadcasting(emu, pair, rng) -> None:
    da, db = (dt.as_dtype(p) for p in pair)
    a_host = _rand(rng, (3, 1, 5), da)
    b_host = _rand(rng, (4, 1), db)
    ac, ag = _pair(a_host, emu, "contiguous")
    bc, bg = _pair(b_host, emu, "contiguous")
    for fn in (ignis.add, ignis.multiply, ignis.maximum, ignis.less, ignis.divide):
        _same(fn(ac, bc), fn(ag, bg))
    _same(ignis.where(bc > 0, ac, bc), ignis.where(bg > 0, ag, bg))


def _bcast_launches() -> list[str]:
    return [name for name, _, _ in EmulatedKernel.launches if "binary_bcast" in name]


@pytest.mark.parametrize("d", ALL_DTYPES, ids=str)
@pytest.mark.exhaustive
def test_emulated_broadcast_kernels_match_cpu(emu, d, rng) -> None:
    # Rows and columns on either side, vector and scalar widths, every op the dtype takes.
    for op, fn in BINARY_CALLS.items():
        if _binary_rule(op, d) is None:  # refused (bitwise ops: integers only)
            continue
        full = _rand(rng, (3, 16), d, positive=op == "power" and d.kind == "f")
        for small_shape in ((16,), (3, 1), (1, 16), (1, 1)):
            small = _rand(rng, small_shape, d, positive=op == "power" and d.kind == "f")
            fc, fg = _pair(full, emu, "contiguous")
            sc, sg = _pair(small, emu, "contiguous")
            EmulatedKernel.launches.clear()
            _same(fn(fc, sc), fn(fg, sg))
            _same(fn(sc, fc), fn(sg, fg))
            assert len(_bcast_launches()) == 2, (op, small_shape, EmulatedKernel.launches)


@pytest.mark.parametrize(
    "full_shape,small_shape,side,kind,v",
    [
        ((4, 8), (8,), 2, ew.ROW, 4),
        ((4, 7), (7,), 2, ew.ROW, 1),  # 7 floats: rows are not whole vectors
        ((2, 3, 8), (3, 8), 2, ew.ROW, 4),
        ((5, 12), (5, 1), 2, ew.COLUMN, 4),
        ((5, 6), (5, 1), 2, ew.COLUMN, 1),
        ((3, 2, 4), (3, 2, 1), 1, ew.COLUMN, 4),
        ((6, 4), (1, 1), 1, ew.COLUMN, 4),  # one value: a column as long as the output
        ((4, 33), (33,), 1, ew.ROW, 1),
    ],
)
def test_emulated_broadcast_dispatch_picks_side_kind_and_width(
    emu, rng, full_shape, small_shape, side, kind, v
) -> None:
    full = rng.standard_normal(full_shape).astype(np.float32)
    small = rng.standard_normal(small_shape).astype(np.float32)
    fc, fg = _pair(full, emu, "contiguous")
    sc, sg = _pair(small, emu, "contiguous")
    EmulatedKernel.launches.clear()
    if side == 2:
        _same(fc - sc, fg - sg)
    else:
        _same(sc - fc, sg - fg)
    assert _bcast_launches() == [
        ew.kernel_name(
            "binary_bcast",
            "ignis::ew::op_subtract",
            "float",
            "float",
            "float",
            "float",
            side,
            kind,
            v,
        )
    ]


def test_emulated_broadcast_alignment_and_layout_fallbacks(emu, rng) -> None:
    def name(kind: int, v: int) -> str:
        return ew.kernel_name(
            "binary_bcast", "ignis::ew::op_add", "float", "float", "float", "float", 2, kind, v
        )

    # Dense views starting one element in: rows of 8 floats, but the dense operand or the row
    # off a 16-byte boundary -> the same kernel, one element per access. A column is read one
    # value at a time, so its alignment does not matter.
    full8 = rng.standard_normal((6, 8)).astype(np.float32)
    row8 = rng.standard_normal(8).astype(np.float32)
    col = rng.standard_normal((6, 1)).astype(np.float32)
    EmulatedKernel.launches.clear()
    for full_layout, small, small_layout in (
        ("offset", row8, "contiguous"),
        ("contiguous", row8, "offset"),
        ("contiguous", row8, "contiguous"),
        ("offset", col, "contiguous"),
        ("contiguous", col, "offset"),
    ):
        fc, fg = _pair(full8, emu, full_layout)
        sc, sg = _pair(small, emu, small_layout)
        _same(fc + sc, fg + sg)
    assert _bcast_launches() == [
        name(ew.ROW, 1),
        name(ew.ROW, 1),
        name(ew.ROW, 4),
        name(ew.COLUMN, 1),
        name(ew.COLUMN, 4),
    ]
    full = rng.standard_normal((6, 9)).astype(np.float32)
    row = rng.standard_normal(9).astype(np.float32)
    fc, fg = _pair(full, emu, "contiguous")
    rc, rg = _pair(row, emu, "contiguous")
    # A non-contiguous dense operand, a strided row or a strided output: the strided kernel.
    EmulatedKernel.launches.clear()
    _same(fc[:, 1:] + rc[1:], fg[:, 1:] + rg[1:])  # a[:, 1:]: rows with gaps
    _same(fc[:, ::2] + rc[::2], fg[:, ::2] + rg[::2])
    _same(fc.T * rc.reshape(9, 1), fg.T * rg.reshape(9, 1))  # a transposed dense side
    _same(fc[:, ::3] + rc[:3], fg[:, ::3] + rg[:3])
    assert _bcast_launches() == []
    assert all("binary_strided" in name for name, _, _ in EmulatedKernel.launches)
    # In place into a non-contiguous output: strided; into a dense one: the broadcast kernel.
    EmulatedKernel.launches.clear()
    gc_, gg = fc.clone(), fg.clone()
    gc_[:, ::2] += rc[:5]
    gg[:, ::2] += rg[:5]
    _same(gc_, gg)
    gc_ += rc
    gg += rg
    _same(gc_, gg)
    binary = [n for n, _, _ in EmulatedKernel.launches if "binary" in n]
    assert ["binary_bcast" in n for n in binary] == [False, True]


def test_emulated_broadcast_mixed_dtypes_and_empty(emu, rng) -> None:
    for da, db in (("bfloat16", "float32"), ("int8", "float16"), ("float64", "int32")):
        a = _rand(rng, (5, 24), dt.as_dtype(da))
        b = _rand(rng, (24,), dt.as_dtype(db))
        c = _rand(rng, (5, 1), dt.as_dtype(db))
        (ac, ag), (bc, bg), (cc, cg) = (_pair(x, emu, "contiguous") for x in (a, b, c))
        EmulatedKernel.launches.clear()
        for fn in (ignis.add, ignis.multiply, ignis.less):
            _same(fn(ac, bc), fn(ag, bg))
            _same(fn(cc, ac), fn(cg, ag))
        assert len(_bcast_launches()) == 6
    # bfloat16 accumulating a float32 row in place (gradient of a bias)
    acc_c, acc_g = _pair(_rand(rng, (4, 16), dt.bfloat16), emu, "contiguous")
    row_c, row_g = _pair(_rand(rng, (16,), dt.float32), emu, "contiguous")
    ignis.accumulate(acc_c, row_c)
    ignis.accumulate(acc_g, row_g)
    _same(acc_c, acc_g)
    empty = NvArray.empty((0, 8), device=emu)
    EmulatedKernel.launches.clear()
    empty + NvArray.zeros((8,), device=emu)
    NvArray.zeros((0, 1), device=emu) * empty
    assert EmulatedKernel.launches == [] or all("fill" in n for n, _, _ in EmulatedKernel.launches)


def test_emulated_where_forms(emu, rng) -> None:
    cond = rng.random((5, 6)) < 0.5
    a = rng.standard_normal((5, 6)).astype(np.float32)
    b = rng.standard_normal((1, 6)).astype(np.float16)
    cc, cg = _pair(cond, emu, "contiguous")
    ac, ag = _pair(a, emu, "sliced")
    bc, bg = _pair(b, emu, "contiguous")
    for args_c, args_g in [
        ((cc, ac, bc), (cg, ag, bg)),
        ((cc, 1.0, ac), (cg, 1.0, ag)),
        ((cc, ac, -2.5), (cg, ag, -2.5)),
        ((cc, 3, 4), (cg, 3, 4)),
        ((True, ac, bc), (True, ag, bg)),
        ((ac, 0.0, 1.0), (ag, 0.0, 1.0)),
    ]:
        _same(ignis.where(*args_c), ignis.where(*args_g))


@pytest.mark.parametrize("src", ALL_DTYPES, ids=str)
def test_emulated_astype_every_pair(emu, src, rng) -> None:
    host = _rand(rng, (3, 8), src)
    for layout in ("contiguous", "transposed"):
        c, g = _pair(host, emu, layout)
        for to in ALL_DTYPES:
            _same(c.astype(to), g.astype(to))


def test_emulated_copies_views_and_fill(emu, rng) -> None:
    host = rng.standard_normal((4, 6, 5)).astype(np.float32)
    c, g = _pair(host, emu, "contiguous")
    for view in (
        lambda x: x.T,
        lambda x: x[:, ::2, 1:],
        lambda x: x[::-1],
        lambda x: x.permute(1, 0, 2),
    ):
        _same(view(c).contiguous(), view(g).contiguous())
    # copy into a view, with broadcasting
    for dev_arr, dev in ((c, "cpu"), (g, emu)):
        dev_arr.T[1:3].copy_(NvArray.from_host(np.arange(4.0, dtype=np.float16), device=dev))
    _same(c, g)
    for value, dtype in (
        (2.5, "float32"),
        (-0.0, "float64"),
        (7, "int8"),
        (True, "bool"),
        (0.1, "bfloat16"),
        (1e-8, "float16"),
        (-3, "int64"),
        (2**40 + 1, "int64"),
        (float("nan"), "float32"),
    ):
        fc = NvArray.full((3, 5), value, dtype=dtype, device="cpu")
        fg = NvArray.full((3, 5), value, dtype=dtype, device=emu)
        np.testing.assert_array_equal(fc.to_host().view(np.uint8), fg.to_host().view(np.uint8))
        fg.T[::2].fill_(value)
        fc.T[::2].fill_(value)
        np.testing.assert_array_equal(fc.to_host().view(np.uint8), fg.to_host().view(np.uint8))


@pytest.mark.parametrize(
    "shape,perm",
    [
        ((40, 70), (1, 0)),
        ((3, 33, 65), (0, 2, 1)),
        ((17, 20, 31), (2, 1, 0)),
        ((64, 5, 48), (2, 1, 0)),
    ],
)
def test_emulated_transposing_copies(emu, rng, shape, perm) -> None:
    host = rng.standard_normal(shape).astype(np.float32)
    c, g = _pair(host, emu, "contiguous")
    before = len(EmulatedKernel.launches)
    _same(c.permute(*perm).contiguous(), g.permute(*perm).contiguous())
    _same(c.permute(*perm).astype("bfloat16"), g.permute(*perm).astype("bfloat16"))
    _same(c.permute(*perm)[::-1].contiguous(), g.permute(*perm)[::-1].contiguous())
    names = [name for name, _, _ in EmulatedKernel.launches[before:]]
    assert any("copy_transpose" in name for name in names), names


def test_emulated_more_than_8_dims_are_split(emu, rng) -> None:
    host = rng.standard_normal((2,) * 10).astype(np.float32)
    c, g = _pair(host, emu, "contiguous")
    perm = (9, 0, 8, 1, 7, 2, 6, 3, 5, 4)
    before = len(EmulatedKernel.launches)
    _same(c.permute(*perm).contiguous(), g.permute(*perm).contiguous())
    assert len(EmulatedKernel.launches) - before == 4  # 2 leading dims over 8-dim launches


def test_emulated_arange_and_random(emu) -> None:
    for args, dtype in (
        ((0, 10, 1), "int32"),
        ((0.5, 7.3, 0.7), "float32"),
        ((1, 2, 0.1), "float64"),
        ((3, 100, 7), "uint8"),
        ((0, 5), "bool"),
        ((-2.0, 2.0, 0.25), "bfloat16"),
    ):
        _same(
            NvArray.arange(*args, dtype=dtype, device="cpu"),
            NvArray.arange(*args, dtype=dtype, device=emu),
        )
    for gen_args in (
        (ig_random.Generator.rand, (7,), {"dtype": "float32"}),
        (ig_random.Generator.randn, (9,), {"dtype": "float64"}),
        (ig_random.Generator.randint, (-5, 5), {"shape": (11,), "dtype": "int8"}),
        (ig_random.Generator.randint, (0, 2**40), {"shape": (5,), "dtype": "int64"}),
    ):
        fn, args, kw = gen_args
        _same(
            fn(ig_random.Generator(3), *args, device="cpu", **kw),
            fn(ig_random.Generator(3), *args, device=emu, **kw),
        )


def test_emulated_launches_once_per_op_and_reuses_kernels(emu, rng) -> None:
    a = NvArray.from_host(rng.standard_normal(1000).astype(np.float32), device=emu)
    b = NvArray.from_host(rng.standard_normal(1000).astype(np.float32), device=emu)
    EmulatedKernel.launches.clear()

    def compiled() -> int:  # distinct kernels (the fast paths also keep prepared launches)
        return len({id(k) for k in ew._kernels.values() if isinstance(k, EmulatedKernel)})

    before = compiled()
    for _ in range(3):
        a + b
    assert len(EmulatedKernel.launches) == 3
    assert compiled() == before + 1
    name, grid, block = EmulatedKernel.launches[0]
    assert name.endswith("0, 4>") and grid == 1 and block == 256


def test_emulated_empty_arrays_launch_nothing(emu) -> None:
    a = NvArray.empty((0, 3), device=emu)
    EmulatedKernel.launches.clear()
    a + 1.0
    ignis.exp(a)
    ignis.where(a > 0, a, 0.0)
    a.astype("int8")
    a.fill_(2.0)
    a.T.contiguous()
    assert EmulatedKernel.launches == []


def test_bad_hook_arguments_name_the_operation(emu) -> None:
    backend = _backend.get_backend(emu)
    a = NvArray.zeros((3,), device=emu)
    with pytest.raises(ValueError, match="binary: unknown op 'mod'.*expected one of"):
        ew.binary(backend, "mod", a, a, a, dt.float32)
    with pytest.raises(ValueError, match="unary: unknown op 'cbrt'"):
        ew.unary(backend, "cbrt", a, a, dt.float32, {})
    with pytest.raises(ValueError, match="gelu: approximate must be 'none' or 'tanh', got 'fast'"):
        ew.unary(backend, "gelu", a, a, dt.float32, {"approximate": "fast"})
    with pytest.raises(
        ignis.ShapeError, match=r"copy: source shape \(2,\) differs from destination shape \(3,\)"
    ):
        ew.copy(backend, a, NvArray.zeros((2,), device=emu))
    with pytest.raises(ValueError, match="random: unknown kind 'poisson'"):
        ew.random(backend, "poisson", a, 0, 0, {})
    with pytest.raises(
        ignis.DTypeError, match="random: integers need an integer dtype, got float32"
    ):
        ew.random(backend, "integers", a, 0, 0, {"low": 0, "high": 3})
    with pytest.raises(
        ignis.DTypeError, match="fill: expected a Python bool, int or float, got str"
    ):
        ew.fill(backend, a, "x")


def test_repeated_dense_ops_launch_through_a_prepared_launch(monkeypatch, emu) -> None:
    # The first dense add / exp of a size goes through Kernel.launch (which validates the
    # configuration); later ones of the same size, dtype and alignment call the kernel's
    # prepared launch for that grid with the same argument values, on the current stream.
    class Recorder:
        def __init__(self):
            self.calls = []

        def launch(self, grid, block, args, *, shared_mem=0, stream=None):
            self.calls.append(("launch", grid, block, list(args), stream))

        def _prepared(self, device, grid, block, shared_mem=0):
            def launch(stream, *values):
                self.calls.append(("prepared", grid, block, list(values), stream))

            return launch

    kernels = []

    def library_kernel(*args):
        kernels.append(Recorder())
        return kernels[-1]

    monkeypatch.setattr(ew, "library_kernel", library_kernel)
    backend = _backend.get_backend(emu)
    a = NvArray.zeros((1000,), device=emu)
    b = NvArray.zeros((1000,), device=emu)
    out = NvArray.zeros((1000,), device=emu)
    for _ in range(3):
        ew.binary(backend, "add", out, a, b, dt.float32)
    ew.binary(backend, "add", out[:999], a[:999], b[:999], dt.float32)  # another size
    for _ in range(2):
        ew.unary(backend, "exp", out, a, dt.float32, {})
    add, exp = kernels
    ptrs = [x._storage.ptr for x in (out, a, b)]
    first = ("launch", 1, ew.BLOCK, [*ptrs, 0.0, 0.0, 1000], backend.stream)
    again = ("prepared", 1, ew.BLOCK, [*ptrs, 0.0, 0.0, 1000], backend.stream)
    other = ("launch", 1, ew.BLOCK, [*ptrs, 0.0, 0.0, 999], backend.stream)
    assert add.calls == [first, again, again, other]
    assert [c[0] for c in exp.calls] == ["launch", "prepared"]
    assert exp.calls[1][3] == [ptrs[0], ptrs[1], 1000]


def test_prepared_launches_are_bounded(monkeypatch, emu) -> None:
    monkeypatch.setattr(ew, "_FAST_LIMIT", 3)
    monkeypatch.setattr(ew, "_fast_keys", [])
    backend = _backend.get_backend(emu)
    for n in range(1, 6):
        a = NvArray.zeros((n,), device=emu)
        ew.binary(backend, "add", a, a, a, dt.float32)
    fast = [k for k in ew._kernels if k[-1] in range(1, 6) and k[0] == "add"]
    assert 1 <= len(fast) <= 3 and fast == ew._fast_keys


# ==================================================================================================
# GPU: the real kernels against the CPU backend (same arithmetic) and NumPy
# ==================================================================================================

CUDA = "cuda:0"
gpu = pytest.mark.gpu

# Ops whose result is one correctly rounded IEEE operation (or exact): bit-equal to the CPU.
EXACT_UNARY = {"negative", "abs", "relu", "sqrt", "rsqrt"}
# Correctly rounded everywhere: arithmetic, comparisons, maximum/minimum, copysign; power and
# the floating functions (atan2, hypot) come from two math libraries.
EXACT_BINARY = {n for n, rule in sem.BINARY_OPS.items() if rule != "float"} - {"power"}
EXACT_BINARY.add("copysign")
# (rtol, atol) between two implementations of a function: a few ulps in float32/float64
# (CUDA's math library vs NumPy's), one ulp of the 16-bit types after rounding.
APPROX = {
    "float16": (1e-3, 1e-6),
    "bfloat16": (8e-3, 1e-6),
    "float32": (4e-6, 1e-6),
    "float64": (1e-13, 1e-14),
}


def _gpu_backend():
    return _backend.get_backend(CUDA)


def _check(cpu: NvArray, got: NvArray, exact: bool, what: str = "") -> None:
    assert got.device == CUDA
    assert got.dtype == cpu.dtype and got.shape == cpu.shape, (
        got.dtype,
        cpu.dtype,
        got.shape,
        cpu.shape,
    )
    x, y = cpu.to_host(), got.to_host()
    name = cpu.dtype.name
    if cpu.dtype.kind != "f":
        np.testing.assert_array_equal(y, x, err_msg=what)
        return
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    if exact:
        np.testing.assert_array_equal(y64, x64, err_msg=what)  # NaN where NaN
    else:
        rtol, atol = APPROX[name]
        np.testing.assert_allclose(y64, x64, rtol=rtol, atol=atol, equal_nan=True, err_msg=what)


def _data(rng, shape, d: dt.DType, op: str = "") -> np.ndarray:
    """Random values for ``op`` in dtype ``d`` (full integer range where it wraps)."""
    if d is dt.bool_:
        out = rng.random(shape) < 0.5
        out.flat[0] = True
        return out
    if d.kind in "iu":
        info = np.iinfo(d.numpy)
        if op == "power":
            return rng.integers(max(-4, info.min), 5, size=shape).astype(d.numpy)
        if op in ("log", "sqrt", "rsqrt"):
            return rng.integers(1, min(100, info.max), size=shape).astype(d.numpy)
        if sem.BINARY_OPS.get(op) == "shift":  # counts inside and outside [0, bits)
            return rng.integers(max(info.min, -2), info.bits + 2, size=shape).astype(d.numpy)
        return rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=d.numpy)
    x = rng.uniform(-3, 3, size=shape)
    if op in ("log", "sqrt", "rsqrt", "power"):
        x = np.abs(x) + 0.25
    return x.astype(d.numpy)


def _views(host: np.ndarray, layout: str) -> tuple[NvArray, NvArray]:
    return _pair(host, CUDA, layout)


def _refused(fn: Any, cpu_args: tuple, gpu_args: tuple) -> bool:
    """Whether the semantics refuse these operands' dtypes, on both devices alike."""
    try:
        fn(*cpu_args)
    except ignis.DTypeError:
        with pytest.raises(ignis.DTypeError):
            fn(*gpu_args)
        return True
    return False


UNARY_GPU = UNARY_CALLS


@gpu
@pytest.mark.parametrize("d", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("name", sorted(UNARY_GPU))
def test_gpu_unary_every_op_and_dtype(name: str, d: dt.DType, rng) -> None:
    op = "gelu" if name.startswith("gelu") else name
    fn = UNARY_GPU[name]
    host = _data(rng, (33, 31), d, op)  # odd size: vector body and scalar tail
    c, g = _views(host, "contiguous")
    if _refused(fn, (c,), (g,)):
        pytest.skip(f"{name} refuses {d} (the semantics)")
    _check(fn(c), fn(g), op in EXACT_UNARY, f"{name} {d}")
    if d in (dt.float32, dt.bfloat16, dt.int32):
        for layout in ("transposed", "offset"):
            c, g = _views(host, layout)
            _check(fn(c), fn(g), op in EXACT_UNARY, f"{name} {d} {layout}")


@gpu
@pytest.mark.parametrize("d", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("op", sem.BINARY_OPS)
def test_gpu_binary_every_op_and_dtype(op: str, d: dt.DType, rng) -> None:
    fn = BINARY_CALLS[op]
    exact = op in EXACT_BINARY or (d.kind != "f" and sem.BINARY_OPS[op] != "float")
    a = _data(rng, (33, 31), d, op)
    b = _data(rng, (33, 31), d, op)
    if op == "power" and d.kind == "i":
        b = rng.integers(-3, 6, size=(33, 31)).astype(d.numpy)  # negative exponents too
    elif op == "power" and d.kind == "f":
        b = rng.uniform(-3, 3, size=(33, 31)).astype(d.numpy)
    ac, ag = _views(a, "contiguous")
    bc, bg = _views(b, "contiguous")
    if _refused(fn, (ac, bc), (ag, bg)):
        pytest.skip(f"{op} refuses {d} (the semantics)")
    _check(fn(ac, bc), fn(ag, bg), exact, f"{op} {d}")
    if d in (dt.float32, dt.bfloat16, dt.int8, dt.bool_, dt.float64):
        scalar = True if d is dt.bool_ else (3 if d.kind in "iu" else 1.75)
        _check(fn(ac, scalar), fn(ag, scalar), exact, f"{op} {d} array-scalar")
        _check(fn(scalar, bc), fn(scalar, bg), exact, f"{op} {d} scalar-array")
    if d in (dt.float32, dt.bfloat16, dt.int32):
        # strided (transposed and sliced) and misaligned (scalar access) operands
        for la, lb in (
            ("transposed", "contiguous"),
            ("sliced", "transposed"),
            ("offset", "contiguous"),
        ):
            ac, ag = _views(a, la)
            bc, bg = _views(b, lb)
            _check(fn(ac, bc), fn(ag, bg), exact, f"{op} {d} {la}/{lb}")


@gpu
def test_gpu_binary_broadcasting_shapes(rng) -> None:
    a = rng.standard_normal((7, 1, 33)).astype(np.float32)
    b = rng.standard_normal((5, 1)).astype(ml_dtypes.bfloat16)
    ac, ag = _views(a, "contiguous")
    bc, bg = _views(b, "contiguous")
    for fn in (ignis.add, ignis.multiply, ignis.maximum, ignis.less):
        _check(fn(ac, bc), fn(ag, bg), True)
        _check(fn(bc, ac), fn(bg, ag), True)
    # a 0-d array on the device, and size-1 arrays
    s_c, s_g = (
        NvArray.from_host(np.float32(2.5), device="cpu"),
        NvArray.from_host(np.float32(2.5), device=CUDA),
    )
    _check(ac * s_c, ag * s_g, True)
    one_c, one_g = _views(np.array([4.0], np.float32), "contiguous")
    _check(one_c - 1.0, one_g - 1.0, True)
    _check(one_c + ac, one_g + ag, True)


MIXED = [
    ("float32", "bfloat16"),
    ("bfloat16", "float16"),
    ("float16", "float64"),
    ("int8", "uint8"),
    ("int32", "float16"),
    ("bool", "float32"),
    ("int64", "float32"),
    ("uint8", "bfloat16"),
    ("bool", "int8"),
    ("int32", "int64"),
]


@gpu
@pytest.mark.parametrize("pair", MIXED, ids="-".join)
def test_gpu_mixed_operand_dtypes(pair, rng) -> None:
    da, db = (dt.as_dtype(p) for p in pair)
    a = _data(rng, (9, 17), da, "small")
    b = _data(rng, (9, 17), db, "small")
    if da.kind in "iu":
        a = rng.integers(0 if da.kind == "u" else -50, 50, size=a.shape).astype(da.numpy)
    if db.kind in "iu":
        b = rng.integers(1, 50, size=b.shape).astype(db.numpy)
    ac, ag = _views(a, "contiguous")
    bc, bg = _views(b, "contiguous")
    for fn in (ignis.add, ignis.multiply, ignis.divide, ignis.maximum, ignis.less_equal):
        _check(fn(ac, bc), fn(ag, bg), True, f"{fn.__name__} {pair}")
    ac_s, ag_s = _views(a, "sliced")  # strided, mixed
    _check(ignis.add(ac_s, bc), ignis.add(ag_s, bg), True, f"strided {pair}")


@gpu
def test_gpu_in_place_ops_round_once_into_the_destination(rng) -> None:
    acc_host = rng.standard_normal((64, 33)).astype(ml_dtypes.bfloat16)
    g_host = rng.standard_normal((64, 33)).astype(np.float32)
    acc_c, acc_g = _views(acc_host, "contiguous")
    gc, gg = _views(g_host, "contiguous")
    ignis.accumulate(acc_c, gc)
    ignis.accumulate(acc_g, gg)
    _check(acc_c, acc_g, True)
    acc_c += gc[::-1]  # strided source
    acc_g += gg[::-1]
    _check(acc_c, acc_g, True)
    h_c, h_g = _views(rng.standard_normal(100).astype(np.float16), "contiguous")
    d_c, d_g = _views(rng.standard_normal(100), "contiguous")  # float64 into float16
    h_c += d_c
    h_g += d_g
    _check(h_c, h_g, True)


@gpu
def test_gpu_nan_inf_propagation() -> None:
    vals = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -2.5, 3e38], np.float32)
    a_host, b_host = np.meshgrid(vals, vals)
    for d in (dt.float32, dt.float16, dt.bfloat16, dt.float64):
        with np.errstate(all="ignore"):
            ah, bh = a_host.astype(d.numpy), b_host.astype(d.numpy)
        ac, ag = _views(ah, "contiguous")
        bc, bg = _views(bh, "contiguous")
        for op in sem.BINARY_OPS:
            fn = BINARY_CALLS[op]
            if not _refused(fn, (ac, bc), (ag, bg)):
                _check(fn(ac, bc), fn(ag, bg), op in EXACT_BINARY, f"{op} {d}")
        for name, fn in UNARY_GPU.items():
            op = "gelu" if name.startswith("gelu") else name
            if not _refused(fn, (ac,), (ag,)):
                _check(fn(ac), fn(ag), op in EXACT_UNARY, f"{name} {d}")
        _check(ignis.where(ac, bc, 0.0), ignis.where(ag, bg, 0.0), True)  # NaN condition is true
    m = NvArray.from_host(np.float32([np.nan, 1.0, 2.0]), device=CUDA)
    assert np.isnan(ignis.maximum(m, 5.0).to_host()[0]) and np.isnan(
        ignis.minimum(5.0, m).to_host()[0]
    )


@gpu
@pytest.mark.parametrize("n", [1, 31, 33, 1000003, 2**24 + 3])
def test_gpu_odd_and_large_sizes(n: int, rng) -> None:
    # 2**24 + 3 elements need more blocks than the grid cap: the grid-stride loops run.
    a = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(ml_dtypes.bfloat16)
    ac, ag = _views(a, "contiguous")
    bc, bg = _views(b, "contiguous")
    _check(ac + bc, ag + bg, True)
    _check(bc * 3.0, bg * 3.0, True)
    _check(ignis.where(ac > 0, ac, bc), ignis.where(ag > 0, ag, bg), True)
    _check(bc.astype("float32"), bg.astype("float32"), True)
    if n > 1:
        # strided: every other element, reversed (negative stride)
        _check(
            ac[::-2] - bc[1::2][::-1] if n % 2 == 0 else ac[::-2] - bc[::2][::-1],
            ag[::-2] - bg[1::2][::-1] if n % 2 == 0 else ag[::-2] - bg[::2][::-1],
            True,
        )


@gpu
def test_gpu_strided_grid_stride_and_many_dims(rng) -> None:
    a = rng.standard_normal((64, 80, 1000)).astype(np.float32)  # 5.1M elements > cap * 1024
    ac, ag = _views(a, "contiguous")
    _check(ac.permute(2, 0, 1).contiguous(), ag.permute(2, 0, 1).contiguous(), True)
    _check(ignis.exp(ac[:, ::3, ::-1]), ignis.exp(ag[:, ::3, ::-1]), False)
    # ten dimensions that do not merge: the layout is split over several launches
    h = rng.standard_normal((2, 3, 2, 3, 2, 3, 2, 3, 2, 3)).astype(np.float16)
    hc, hg = _views(h, "contiguous")
    perm = (9, 0, 8, 1, 7, 2, 6, 3, 5, 4)
    _check(hc.permute(*perm) * 2.0, hg.permute(*perm) * 2.0, True)
    _check(hc.permute(*perm).contiguous(), hg.permute(*perm).contiguous(), True)


@gpu
@pytest.mark.parametrize(
    "shape,perm,dtype",
    [
        ((4096, 4100), (1, 0), "float32"),
        ((33, 65), (1, 0), "int8"),
        ((6, 129, 31), (0, 2, 1), "bfloat16"),
        ((50, 3, 70), (2, 1, 0), "float64"),
        ((2, 3, 40, 50), (0, 1, 3, 2), "bool"),
    ],
)
def test_gpu_transposing_copies(shape, perm, dtype, rng) -> None:
    host = _data(rng, shape, dt.as_dtype(dtype))
    c, g = _views(host, "contiguous")
    _check(c.permute(*perm).contiguous(), g.permute(*perm).contiguous(), True)
    _check(c.permute(*perm).astype("float32"), g.permute(*perm).astype("float32"), True)
    _check(c.permute(*perm)[::-1].contiguous(), g.permute(*perm)[::-1].contiguous(), True)


@gpu
def test_gpu_where_every_form(rng) -> None:
    cond = rng.random((17, 9)) < 0.4
    a = rng.standard_normal((17, 9)).astype(np.float32)
    b = rng.standard_normal((1, 9)).astype(np.float16)
    cc, cg = _views(cond, "contiguous")
    ac, ag = _views(a, "contiguous")
    bc, bg = _views(b, "contiguous")
    at_c, at_g = _views(a, "transposed")
    forms = [
        ((cc, ac, bc), (cg, ag, bg)),
        ((cc, 1.5, ac), (cg, 1.5, ag)),
        ((cc, ac, -2.0), (cg, ag, -2.0)),
        ((cc, 3, 4), (cg, 3, 4)),
        ((True, ac, bc), (True, ag, bg)),
        ((ac, 0.0, 1.0), (ag, 0.0, 1.0)),
        ((cc, at_c, ac), (cg, at_g, ag)),
        ((ac > 0, at_c, 7), (ag > 0, at_g, 7)),
    ]
    for args_c, args_g in forms:
        _check(ignis.where(*args_c), ignis.where(*args_g), True)
    ints_c, ints_g = _views(rng.integers(-3, 3, size=(17, 9)).astype(np.int64), "contiguous")
    _check(ignis.where(ints_c, ints_c, 0), ignis.where(ints_g, ints_g, 0), True)


def _cast_source(rng, d: dt.DType) -> np.ndarray:
    if d is dt.bool_:
        return rng.random(257) < 0.5
    if d.kind in "iu":
        info = np.iinfo(d.numpy)
        return rng.integers(info.min, info.max, size=257, endpoint=True, dtype=d.numpy)
    # non-negative and inside every integer range, with fractions (truncation) and specials
    x = rng.uniform(0, 120, size=257)
    x[:6] = [0.0, -0.0, 0.5, 1.5, 2.5, 127.75]
    return x.astype(d.numpy)


@gpu
@pytest.mark.parametrize("src", ALL_DTYPES, ids=str)
def test_gpu_astype_every_pair(src: dt.DType, rng) -> None:
    host = _cast_source(rng, src)
    c, g = _views(host, "contiguous")
    ct, gt = _views(host[:256].reshape(16, 16), "transposed")
    for to in ALL_DTYPES:  # float sources are inside every integer range (see _cast_source)
        _check(c.astype(to), g.astype(to), True, f"{src} -> {to}")
        _check(ct.astype(to), gt.astype(to), True, f"{src} -> {to} strided")


@gpu
def test_gpu_casts_round_once_like_numpy() -> None:
    # float64 -> float16 rounds directly (NumPy); float64 -> bfloat16 goes through float32
    # (ml_dtypes); both differ from the other way on these values.
    x = np.array(
        [
            1 + 2**-11 + 2**-40,
            1 + 2**-8 + 2**-30,
            -(1 + 2**-11 + 2**-40),
            65519.99,
            65520.0,
            2.0**-25 + 2**-60,
            1e300,
            -1e300,
            np.nan,
        ],
        np.float64,
    )
    c, g = _views(x, "contiguous")
    for to in ("float16", "bfloat16", "float32"):
        with np.errstate(all="ignore"):
            _check(c.astype(to), g.astype(to), True, to)
    assert g.astype("float16").to_host()[0] == np.float16(1 + 2**-10)
    assert g.astype("bfloat16").to_host()[1] == 1.0
    f = NvArray.from_host(np.float32([-1.5, 2.99, -127.9, 255.5]), device=CUDA)
    np.testing.assert_array_equal(f.astype("int8").to_host(), [-1, 2, -127, -1])  # 255 wraps


@gpu
def test_gpu_fill_every_dtype_and_layout() -> None:
    cases = [
        (True, "bool"),
        (-7, "int8"),
        (200, "uint8"),
        (-123456, "int32"),
        (2**40 + 3, "int64"),
        (-1, "int64"),
        (0.1, "float16"),
        (0.1, "bfloat16"),
        (float("nan"), "float32"),
        (-0.0, "float64"),
        (float("inf"), "float64"),
        (1 / 3, "float64"),
    ]
    for value, dtype in cases:
        fc = NvArray.full((37, 11), value, dtype=dtype, device="cpu")
        fg = NvArray.full((37, 11), value, dtype=dtype, device=CUDA)
        np.testing.assert_array_equal(
            fg.to_host().view(np.uint8), fc.to_host().view(np.uint8), err_msg=dtype
        )
        fc.T[::3].fill_(0 if dtype != "bool" else False)
        fg.T[::3].fill_(0 if dtype != "bool" else False)
        np.testing.assert_array_equal(
            fg.to_host().view(np.uint8), fc.to_host().view(np.uint8), err_msg=dtype
        )
        fc[5:9].fill_(value)
        fg[5:9].fill_(value)
        np.testing.assert_array_equal(
            fg.to_host().view(np.uint8), fc.to_host().view(np.uint8), err_msg=dtype
        )


@gpu
def test_gpu_copy_into_views_and_concatenate(rng) -> None:
    x = rng.standard_normal((20, 30)).astype(np.float32)
    xc, xg = _views(x, "contiguous")
    yc, yg = (
        NvArray.zeros((30, 20), dtype="float64", device="cpu"),
        NvArray.zeros((30, 20), dtype="float64", device=CUDA),
    )
    yc[::2].copy_(xc.T[::2])
    yg[::2].copy_(xg.T[::2])
    _check(yc, yg, True)
    row_c, row_g = _views(x[0], "contiguous")
    yc.copy_(row_c[:20].astype("float16"))  # broadcast source with a cast
    yg.copy_(row_g[:20].astype("float16"))
    _check(yc, yg, True)
    _check(
        ignis.concatenate([xc, xc.astype("bfloat16")], axis=1),
        ignis.concatenate([xg, xg.astype("bfloat16")], axis=1),
        True,
    )
    _check(ignis.stack([xc, xc * 2], axis=-1), ignis.stack([xg, xg * 2], axis=-1), True)


@gpu
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_gpu_arange_kernel_matches_the_host_reference(dtype: dt.DType) -> None:
    backend = _gpu_backend()
    cpu = _backend.get_backend("cpu")
    cases = [(0, 0.001, 60001) if dtype in (dt.float16, dt.bfloat16) else (0, 1, 1000003)]
    if dtype.kind == "f":
        cases += [(0.5, 0.1, 1001), (-3.0, 0.25, 33)]
        if dtype.itemsize >= 4:
            cases.append((1e6, -0.3, 4097))
    else:
        cases += [(-5, 3, 1001), (2**40, -7, 65)] if dtype.itemsize == 8 else [(-5, 3, 1001)]
    for start, step, n in cases:
        out_c = NvArray.empty((n,), dtype=dtype, device="cpu")
        out_g = NvArray.empty((n,), dtype=dtype, device=CUDA)
        cpu.arange(out_c, start, step)
        ew.arange(backend, out_g, start, step)
        _check(out_c, out_g, True, f"arange({start}, step {step}) {dtype}")


RANDOM_CASES = [
    ("uniform", "float32", {}),
    ("uniform", "float16", {}),
    ("uniform", "bfloat16", {}),
    ("uniform", "float64", {}),
    ("normal", "float32", {}),
    ("normal", "float16", {}),
    ("normal", "bfloat16", {}),
    ("normal", "float64", {}),
    ("integers", "int64", {"low": -1000, "high": 1000}),
    ("integers", "uint8", {"low": 0, "high": 256}),
    ("integers", "int8", {"low": -128, "high": 128}),
    ("integers", "int32", {"low": -(2**31), "high": 2**31}),
    ("integers", "int64", {"low": -(2**63), "high": 2**63}),
    ("integers", "int64", {"low": 5, "high": 2**40}),
]


@gpu
@pytest.mark.parametrize("kind,dtype,params", RANDOM_CASES)
def test_gpu_random_kernels_reproduce_the_host_stream(kind, dtype, params) -> None:
    backend = _gpu_backend()
    d = dt.as_dtype(dtype)
    for n, seed, offset in (
        (1, 0, 0),
        (5, 7, 3),
        (1001, 2**40 + 17, 2**33 + 5),
        (100003, 12345, 0),
    ):
        out = NvArray.empty((n,), dtype=d, device=CUDA)
        ew.random(backend, kind, out, seed, offset, params)
        got = out.to_host()
        want = ig_random.generate_host(kind, (n,), d, seed, offset, params)
        if kind != "normal":
            np.testing.assert_array_equal(
                got.view(np.uint8), want.view(np.uint8), err_msg=f"{kind} {dtype} n={n}"
            )
        elif d is dt.float64:
            np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)
        else:
            # equal after rounding to float32 except where the device's log/cos/sin land on
            # the other side of a rounding boundary: rare, and then one ulp apart
            diff = got.astype(np.float64) != want.astype(np.float64)
            assert diff.mean() < 1e-3, f"{diff.sum()} of {n} differ"
            np.testing.assert_allclose(
                got.astype(np.float64),
                want.astype(np.float64),
                rtol=APPROX[dtype][0],
                atol=APPROX[dtype][1],
            )


@gpu
def test_gpu_64bit_indexing() -> None:
    # Beyond 2**31 elements: contiguous kernels index in 64 bits, strided kernels divide in 64
    # bits (WIDE); spot-checked where 32-bit indices would wrap.
    backend = _gpu_backend()
    n = 2**31 + 38
    idx = np.array([0, 1, 2**31 - 2, 2**31 - 1, 2**31, 2**31 + 1, n - 1], np.int64)
    a = NvArray.empty((n,), dtype="uint8", device=CUDA)
    ew.arange(backend, a, 0, 1)  # a[i] = i mod 256
    c = a + 3  # contiguous, 16 per access
    for i in idx:
        assert c[int(i)].item() == (i + 3) % 256, i
    del c
    half = n // 2
    x = a.reshape(2, half)
    y = NvArray.from_host(np.array([[10], [20]], np.uint8), device=CUDA)
    s = x + y  # broadcast: strided path with 64-bit division
    for i in idx:
        r, k = divmod(int(i), half)
        assert s[r, k].item() == (i + (10, 20)[r]) % 256, i
    del s
    rev = a[::-1].contiguous()  # strided copy with a negative stride
    for i in idx:
        assert rev[int(i)].item() == (n - 1 - i) % 256, i
    del rev
    h = a.astype("float16")  # contiguous cast kernel
    assert h[n - 1].item() == (n - 1) % 256 and h[2**31].item() == 2**31 % 256
