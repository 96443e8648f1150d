"""The CUDA backend's reductions, arg-reductions and softmax (``_cuda_backend/reduction.py``).

Two halves:

* Without a GPU: the host-side planning is run against an emulator of the kernels' contracts
  (NumPy on host memory, reading the kernels' arguments exactly as the C++ does: layouts,
  strides, splits, partial results), and every kernel instance the planner asks for is compiled
  with NVRTC for sm_90. This checks the index arithmetic of every path on small inputs.
* With a GPU (``gpu`` marker): the real kernels against NumPy in float64 and against the CPU
  backend, for every op and dtype, many axis patterns and layouts, NaN/Inf, sizes 1, 31, 33,
  1000003, empty axes, and bitwise determinism.
"""

from __future__ import annotations

import ctypes
import itertools
import re
import struct
import warnings

import ml_dtypes
import numpy as np
import pytest
from array_helpers import ALL, FLOATS, TOL, np_dtype, random_array, to64
from ignis._array import _semantics as sem
from ignis._array._backend import get_backend
from ignis._array._cpu_backend import CpuBackend
from ignis._array._cuda_backend import reduction
from ignis._array._device import as_device

import ignis
from ignis import CompileOptions, NvArray, _sources
from ignis import _dtypes as dt

# error per unit of sum(|x|) of one accumulated result
ACC_EPS = {"float16": 1e-3, "bfloat16": 8e-3, "float32": 2e-6, "float64": 1e-13}
OPS = ["sum", "mean", "max", "min", "var"]

# ==================================================================================================
# Emulator of the kernels' contracts (host memory; "device pointers" are host addresses)
# ==================================================================================================

_NP = {
    "bool": np.bool_,
    "ignis::int8": np.int8,
    "ignis::uint8": np.uint8,
    "ignis::int16": np.int16,
    "ignis::uint16": np.uint16,
    "ignis::uint32": np.uint32,
    "ignis::uint64": np.uint64,
    "ignis::int32": np.int32,
    "int": np.int32,
    "ignis::int64": np.int64,
    "long long": np.int64,
    "unsigned long long": np.uint64,
    "ignis::float16": np.float16,
    "ignis::bfloat16": ml_dtypes.bfloat16,
    "float": np.float32,
    "double": np.float64,
    "ignis::complex64": np.complex64,
    "ignis::complex128": np.complex128,
}
_OUTER = struct.Struct("<8q8qii")


def np_type(ctype: str) -> np.dtype:
    m = re.fullmatch(r"ignis::ArgPair<(.+)>", ctype)
    if m:
        return np.dtype([("v", np_type(m[1])), ("i", np.int64)], align=True)
    return np.dtype(_NP[ctype])


def split_name(name: str) -> tuple[str, list[str]]:
    """``"ignis::k<a, b<c, d>>"`` -> ``("k", ["a", "b<c, d>"])``."""
    head, _, rest = name.partition("<")
    assert rest.endswith(">"), name
    args, depth, cur = [], 0, ""
    for ch in rest[:-1]:
        if ch == "," and depth == 0:
            args.append(cur.strip())
            cur = ""
            continue
        depth += ch == "<"
        depth -= ch == ">"
        cur += ch
    args.append(cur.strip())
    return head.removeprefix("ignis::"), args


def _view(ptr: int, dtype: np.dtype, lo: int, count: int) -> np.ndarray:
    buf = (ctypes.c_uint8 * (count * dtype.itemsize)).from_address(ptr + lo * dtype.itemsize)
    return np.frombuffer(buf, dtype=dtype)


def read(ptr: int, dtype: np.dtype, offsets) -> np.ndarray:
    """Elements at element ``offsets`` from ``ptr``."""
    offsets = np.asarray(offsets, np.int64)
    if offsets.size == 0:
        return np.empty(0, dtype)
    lo, hi = int(offsets.min()), int(offsets.max())
    return _view(ptr, dtype, lo, hi - lo + 1)[offsets - lo].copy()


def write(ptr: int, dtype: np.dtype, offsets, values) -> None:
    offsets = np.asarray(offsets, np.int64)
    if offsets.size == 0:
        return
    lo, hi = int(offsets.min()), int(offsets.max())
    _view(ptr, dtype, lo, hi - lo + 1)[offsets - lo] = values


def row_offsets(layout: bytes, rows) -> np.ndarray:
    """offset_of(OuterLayout, row) for an array of rows (the C++ loop, innermost first)."""
    vals = _OUTER.unpack(layout)
    shape, stride, ndim = vals[:8], vals[8:16], vals[16]
    rows = np.asarray(rows, np.int64)
    if ndim == 1:
        return rows * stride[0]
    off = np.zeros_like(rows)
    for d in range(ndim):
        q = rows // shape[d]
        off += (rows - q * shape[d]) * stride[d]
        rows = q
    return off


class EmOp:
    """A reduction op of reduce.cuh: SumOp, SqDevOp, MaxOp, MinOp, ArgMaxOp, ArgMinOp, PartialOp."""

    def __init__(self, spec: str):
        self.partial = spec.startswith("ignis::PartialOp<")
        if self.partial:
            spec = spec[len("ignis::PartialOp<") : -1]
        kind, args = split_name(spec)
        self.kind, self.a = kind, args[0]
        if kind in ("SumOp", "SqDevOp"):
            self.acc = np.dtype(np.uint64) if self.a == "long long" else np_type(self.a)
        elif kind in ("MaxOp", "MinOp"):
            self.acc = np_type(self.a)
        else:
            assert kind in ("ArgMaxOp", "ArgMinOp"), kind
            self.acc = np_type(f"ignis::ArgPair<{self.a}>")

    def reduce(self, vals: np.ndarray, idx: np.ndarray, center) -> np.ndarray:
        """The accumulated value (a 0-d array of the acc dtype) of elements ``vals`` at ``idx``."""
        out = np.zeros((), self.acc)
        with np.errstate(all="ignore"):
            if self.kind in ("ArgMaxOp", "ArgMinOp"):
                if self.partial:
                    v, i = vals["v"], vals["i"]
                else:
                    v, i = (
                        vals.astype(np.float32).astype(self.acc["v"])
                        if vals.dtype == ml_dtypes.bfloat16
                        else vals.astype(self.acc["v"]),
                        idx,
                    )
                if v.size == 0:
                    out["v"] = -np.inf if self.kind == "ArgMaxOp" else np.inf
                    out["i"] = np.iinfo(np.int64).max
                    return out
                nan = np.isnan(v) if v.dtype.kind == "f" else np.zeros(v.shape, bool)
                if nan.any():
                    k = np.argmin(np.where(nan, i, np.iinfo(np.int64).max))
                else:
                    ext = v.max() if self.kind == "ArgMaxOp" else v.min()
                    k = np.argmin(np.where(v == ext, i, np.iinfo(np.int64).max))
                out["v"], out["i"] = v[k], i[k]
                return out
            if self.partial:
                w = vals
            elif self.acc.kind == "u":
                w = vals.astype(np.int64).astype(np.uint64)
            else:
                w = (vals.astype(np.float32) if vals.dtype == ml_dtypes.bfloat16 else vals).astype(
                    self.acc
                )
            if self.kind == "SumOp":
                wide = {"u": np.uint64, "c": np.complex128}.get(self.acc.kind, np.float64)
                out[()] = np.sum(w, dtype=wide)
            elif self.kind == "SqDevOp":
                d = w if self.partial else (w - self.acc.type(center)).astype(np.float64)
                out[()] = np.sum(d if self.partial else d * d, dtype=np.float64)
            else:
                if w.size == 0:
                    out[()] = -np.inf if self.kind == "MaxOp" else np.inf
                else:
                    out[()] = np.max(w) if self.kind == "MaxOp" else np.min(w)
        return out

    def finish(self, acc: np.ndarray, div: float, o: np.dtype):
        with np.errstate(all="ignore"):
            if self.kind in ("ArgMaxOp", "ArgMinOp"):
                return np.asarray(acc["i"]).astype(o)
            if self.kind in ("SumOp", "SqDevOp") and self.acc.kind in "fc":
                acc = acc / self.acc.type(div)
            elif self.acc.kind == "u":
                acc = acc.astype(np.int64)
            if o == np.bool_:
                return acc != 0
            if o == ml_dtypes.bfloat16:
                return np.asarray(acc).astype(np.float32).astype(o)
            return np.asarray(acc).astype(o)


def softmax_rows_ref(v: np.ndarray, o: np.dtype, log: bool) -> np.ndarray:
    """softmax of each row of ``v`` (2-D) the way the CPU backend computes it."""
    work = np.float64 if o == np.float64 else np.float32
    v = (v.astype(np.float32) if v.dtype == ml_dtypes.bfloat16 else v).astype(work)
    with np.errstate(all="ignore"):
        z = v - np.max(v, axis=1, keepdims=True)
        e = np.exp(z)
        s = np.sum(e, axis=1, keepdims=True)
        res = z - np.log(s) if log else e / s
    return res.astype(np.float32).astype(o) if o == ml_dtypes.bfloat16 else res.astype(o)


class Emulator:
    """Stands in for ``reduction._launch``: checks each launch and does its work on the host."""

    def __init__(self):
        self.names: list[str] = []
        self.wide: list[tuple] = []  # reduce_cols_wide launches: (vec, splits, tail, outer)

    def __call__(self, backend, source: str, name: str, grid, block, args) -> None:
        self.names.append(name)
        kernel, targs = split_name(name)
        assert isinstance(grid, int) and 1 <= grid < 2**31, (name, grid)
        bx, by = (block, 1) if isinstance(block, int) else block
        assert bx % 32 == 0 or by > 1 or kernel == "reduce_cols", (name, block)
        getattr(self, kernel)(targs, grid, bx, by, args)

    # --- reduction.cu ---------------------------------------------------------------------------

    def reduce_group(self, targs, grid, bx, by, args):
        o, op, vec = np_type(targs[1]), EmOp(targs[2]), int(targs[3])
        t = op.acc if op.partial else np_type(targs[0])
        x, out, center, layout, rows, n, rs, group, div = args
        assert bx <= 256 and bx % 32 == 0 and by == 1
        assert group in (1, 2, 4, 8, 16, 32)
        assert isinstance(div, float)
        if vec > 1:
            assert vec * t.itemsize == 16 and rs == 1 and group >= vec and x % t.itemsize == 0
        offs = row_offsets(layout, np.arange(rows))
        idx = np.arange(n, dtype=np.int64)
        for row in range(rows):
            c = read(center, op.acc, [row])[0] if center else None
            acc = op.reduce(read(x, t, offs[row] + idx * rs), idx, c)
            write(out, o, [row], op.finish(acc, div, o))

    def reduce_block(self, targs, grid, bx, by, args):
        t, o, op, vec = np_type(targs[0]), np_type(targs[1]), EmOp(targs[2]), int(targs[3])
        x, out, partials, center, layout, rows, n, splits, chunk, div = args
        assert bx in (256, 512) and by == 1 and bx >= vec
        assert vec == 1 or vec * t.itemsize == 16
        assert x % t.itemsize == 0
        assert (splits == 1) == (partials is None)
        assert (splits - 1) * chunk < n <= splits * chunk, (n, splits, chunk)
        assert splits == 1 or chunk % 16 == 0
        offs = row_offsets(layout, np.arange(rows))
        for unit in range(rows * splits):
            row, split = divmod(unit, splits)
            idx = np.arange(split * chunk, min(n, split * chunk + chunk), dtype=np.int64)
            c = read(center, op.acc, [row])[0] if center else None
            acc = op.reduce(read(x, t, offs[row] + idx), idx, c)
            if splits == 1:
                write(out, o, [row], op.finish(acc, div, o))
            else:
                write(partials, op.acc, [unit], acc)

    def reduce_cols(self, targs, grid, bx, by, args):
        t, o, op, vec = np_type(targs[0]), np_type(targs[1]), EmOp(targs[2]), int(targs[3])
        x, out, partials, center, layout, outer_rows, inner, n, rs, splits, chunk, div = args
        assert bx * by <= 256 and by & (by - 1) == 0 and bx <= 32
        assert (splits == 1) == (partials is None)
        assert (splits - 1) * chunk < n <= splits * chunk
        if vec > 1:
            assert vec * t.itemsize == 16 and x % 16 == 0 and inner % vec == 0 and rs % vec == 0
            assert np.all(row_offsets(layout, np.arange(outer_rows)) % vec == 0)
        offs = row_offsets(layout, np.arange(outer_rows))
        for o_row, i, split in itertools.product(range(outer_rows), range(inner), range(splits)):
            k = o_row * inner + i
            idx = np.arange(split * chunk, min(n, split * chunk + chunk), dtype=np.int64)
            c = read(center, op.acc, [k])[0] if center else None
            acc = op.reduce(read(x, t, offs[o_row] + i + idx * rs), idx, c)
            if splits == 1:
                write(out, o, [k], op.finish(acc, div, o))
            else:
                write(partials, op.acc, [k * splits + split], acc)

    def reduce_cols_wide(self, targs, grid, bx, by, args):
        t, o, op = np_type(targs[0]), np_type(targs[1]), EmOp(targs[2])
        vec, packs = int(targs[3]), int(targs[4])
        x, out, partials, center, layout, outer_rows, inner, n, rs, splits, chunk, div = args
        assert bx == 32 and by in (1, 2, 4, 8), (bx, by)
        assert packs == reduction.wide_packs(vec) and vec in (1, 16 // t.itemsize)
        assert not op.kind.startswith("Arg")
        assert (splits == 1) == (partials is None)
        assert (splits - 1) * chunk < n <= splits * chunk, (n, splits, chunk)
        strips = -(-inner // (32 * packs * vec))
        assert grid == min(reduction.MAX_GRID, outer_rows * splits * strips)
        # reduce_cols_wide's static tile: 8 rows of a strip's accumulators fit in 48 KiB
        assert 8 * 32 * packs * vec * op.acc.itemsize <= 48 * 1024
        offs = row_offsets(layout, np.arange(outer_rows))
        if vec > 1:
            # inner may leave a scalar tail; rows must start on 16-byte boundaries
            assert vec * t.itemsize == 16 and x % 16 == 0 and rs % vec == 0
            assert np.all(offs % vec == 0)
        self.wide.append((vec, splits, inner % (32 * packs * vec) != 0, outer_rows > 1))
        outputs = outer_rows * inner
        for o_row, i, split in itertools.product(range(outer_rows), range(inner), range(splits)):
            k = o_row * inner + i
            idx = np.arange(split * chunk, min(n, split * chunk + chunk), dtype=np.int64)
            c = read(center, op.acc, [k])[0] if center else None
            acc = op.reduce(read(x, t, offs[o_row] + i + idx * rs), idx, c)
            if splits == 1:
                write(out, o, [k], op.finish(acc, div, o))
            else:
                write(partials, op.acc, [split * outputs + k], acc)

    # --- softmax.cu -----------------------------------------------------------------------------

    def _softmax_rows(self, t, o, x, out, layout, rows, n, log):
        offs = row_offsets(layout, np.arange(rows))
        idx = np.arange(n, dtype=np.int64)
        v = read(x, t, (offs[:, None] + idx[None, :]).ravel()).reshape(rows, n)
        write(out, o, np.arange(rows * n), softmax_rows_ref(v, o, log).ravel())

    def softmax_warp(self, targs, grid, bx, by, args):
        t, o, items = np_type(targs[0]), np_type(targs[1]), int(targs[2])
        x, out, layout, rows, n, log = args
        assert bx == 128 and 32 * items >= n and items in (1, 2, 4, 8, 16, 32)
        self._softmax_rows(t, o, x, out, layout, rows, n, log)

    def softmax_block(self, targs, grid, bx, by, args):
        t, o, vec, items = np_type(targs[0]), np_type(targs[1]), int(targs[2]), int(targs[3])
        x, out, layout, rows, n, log = args
        assert bx <= 1024 and bx % 32 == 0 and bx * vec * items >= n
        wide = o == np.float64
        assert vec * items <= (32 if vec >= 4 and not wide else 8) or items == 1
        if vec > 1:
            assert vec * t.itemsize == 16 and n % vec == 0 and x % 16 == 0 and out % 16 == 0
            assert np.all(row_offsets(layout, np.arange(rows)) % vec == 0)
        self._softmax_rows(t, o, x, out, layout, rows, n, log)

    def softmax_packed(self, targs, grid, bx, by, args):
        t, items = np_type(targs[0]), int(targs[1])
        x, out, layout, rows, n, log = args
        assert t in (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))
        assert bx <= 512 and bx % 32 == 0 and bx * 8 * items >= n and items <= 8
        assert n % 8 == 0 and x % 16 == 0 and out % 16 == 0
        assert np.all(row_offsets(layout, np.arange(rows)) % 8 == 0)
        self._softmax_rows(t, t, x, out, layout, rows, n, log)

    def softmax_online(self, targs, grid, bx, by, args):
        t, o, vec = np_type(targs[0]), np_type(targs[1]), int(targs[2])
        x, out, layout, rows, n, log = args
        assert bx <= 1024 and bx % 32 == 0 and (vec == 1 or vec * t.itemsize == 16)
        self._softmax_rows(t, o, x, out, layout, rows, n, log)

    def softmax_cols(self, targs, grid, bx, by, args):
        t, o = np_type(targs[0]), np_type(targs[1])
        x, out, layout, outer_rows, n, rs, inner, log = args
        assert bx * by <= 256 and by & (by - 1) == 0
        offs = row_offsets(layout, np.arange(outer_rows))
        r = np.arange(n, dtype=np.int64)
        for o_row, i in itertools.product(range(outer_rows), range(inner)):
            v = read(x, t, offs[o_row] + i + r * rs)[None, :]
            write(out, o, (o_row * n + r) * inner + i, softmax_rows_ref(v, o, log)[0])


@pytest.fixture
def emu(monkeypatch):
    em = Emulator()
    monkeypatch.setattr(reduction, "_launch", em)
    return em


@pytest.fixture
def host_backend():
    """A CPU backend whose reductions are the cuda module's planning plus the emulator."""
    return CpuBackend(as_device("cpu"))


def _cpu(arr: np.ndarray, view=None) -> NvArray:
    a = NvArray.from_host(arr, device="cpu")
    return view(a) if view else a


def _planned_reduce(backend, op, x: NvArray, axis, ddof=0) -> np.ndarray:
    spec = sem.reduction(op, x.shape, x.dtype, axis, True, ddof)
    out = NvArray.empty(spec.keep_shape, dtype=spec.dtype, device="cpu")
    reduction.reduce(backend, op, out, x, spec.axes, spec.accumulate, {"ddof": ddof})
    return out.to_host()


def _reference_reduce(op, x: NvArray, axis, ddof=0) -> np.ndarray:
    spec = sem.reduction(op, x.shape, x.dtype, axis, True, ddof)
    out = NvArray.empty(spec.keep_shape, dtype=spec.dtype, device="cpu")
    get_backend("cpu").reduce(op, out, x, spec.axes, spec.accumulate, {"ddof": ddof})
    return out.to_host()


def _check_planned(got: np.ndarray, op: str, x: NvArray, axis) -> None:
    """A reduction result (keepdims) of CPU-device ``x``: exactly the CPU backend's where the
    result is exact (integer sums, max/min), else NumPy float64 within rounding."""
    spec = sem.reduction(op, x.shape, x.dtype, axis, True)
    if spec.dtype.name not in FLOATS or op in ("max", "min"):
        want = getattr(ignis, op)(x, axis=axis, keepdims=True).to_host()
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
    else:
        check_against_numpy(got, op, x.to_host(), spec.axes, True, spec.dtype.name)


# Layout cases for the planner: (name, base shape, view, axes, expected kernel kind).
def _t(a):
    return a.T


PLAN_CASES = [
    ("full-1", (1,), None, None, "reduce_group"),
    ("full-31", (31,), None, None, "reduce_group"),
    ("full-33", (33,), None, None, "reduce_group"),
    ("full-long-split", (5003,), None, None, "reduce_block"),
    ("rows-short", (70, 3), None, (1,), "reduce_group"),
    ("rows-long", (3, 2100), None, (1,), "reduce_block"),
    ("rows-4d-2axes", (3, 4, 5, 6), None, (2, 3), "reduce_group"),
    ("rows-packed-many", (40, 512), None, (1,), "reduce_group+vec"),
    ("rows-packed-misaligned", (40, 513), lambda a: a[:, 1:], (1,), "reduce_group+vec"),
    ("cols", (40, 33), None, (0,), "reduce_cols"),
    ("cols-split", (3000, 5), None, (0,), "reduce_cols"),
    ("cols-middle", (3, 7, 9), None, (1,), "reduce_cols"),
    ("cols-packed", (50, 64), None, (0,), "reduce_cols+vec"),
    ("cols-packed-split", (2000, 32), None, (0,), "reduce_cols+vec"),
    ("cols-packed-outer", (3, 20, 48), None, (1,), "reduce_cols+vec"),
    ("interleaved", (4, 3, 5, 2), None, (0, 2), "reduce_group"),
    ("transposed", (6, 7), _t, (1,), "reduce_cols"),
    ("transposed-full", (6, 7), _t, None, "reduce_group"),
    ("reversed", (5, 8), lambda a: a[::-1, ::-1], (1,), "reduce_group"),
    ("strided-rows", (6, 10), lambda a: a[:, ::3], (1,), "reduce_group"),
    ("broadcast", (1, 6), lambda a: a.broadcast_to((4, 6)), (0,), "reduce_cols"),
    ("offset-misaligned", (2501,), lambda a: a[1:], None, "reduce_block"),
    ("empty-axis", (3, 0), None, (1,), "reduce_group"),
    ("axes-none-kept", (4, 5), None, (), "reduce_group"),
    ("scalar", (), None, None, "reduce_group"),
    ("many-dims", (2, 1, 3, 2, 2, 2, 2, 2, 2, 2, 2), lambda a: a[:, :, ::-1], (3, 10), None),
]


def _vec_arg(name: str) -> str:
    """The elements-per-load template argument of kernel ``name`` ("1": single elements)."""
    kind, args = split_name(name)
    if kind == "reduce_cols_wide":
        return args[3]
    if kind == "softmax_packed":
        return "8"
    return args[-1]


def _uses(name: str, kernel: str) -> bool:
    """Whether launch ``name`` is ``kernel`` ("reduce_cols+vec": with 16-byte packs)."""
    base, _, packed = kernel.partition("+")
    kind, _ = split_name(name)
    return kind == base and (not packed or _vec_arg(name) != "1")


@pytest.fixture
def small_thresholds(tune):
    # Reach the block, split and cols-split paths on small inputs.
    tune(
        reduction=dict(
            group_max_n=64,
            group_wide_max_n=512,
            group_wide_min_rows=16,
            group_pack_min=1,
            min_chunk=256,
            target_blocks=64,
            strided_max=1 << 12,
        ),
        softmax=dict(warp_max_n=64),
    )
    # PLAN_CASES' column cases exercise reduce_cols; WIDE_CASES reduce_cols_wide.
    tune(reduction=dict(cols_wide_min_bytes=1 << 40))


@pytest.fixture
def wide_thresholds(small_thresholds, tune):
    # Reach reduce_cols_wide's strips, splits and tails on small inputs, on any device.
    tune(
        reduction=dict(
            cols_wide_min_bytes=64,
            cols_wide_min_rows=8,
            cols_wide_unit_cost=256,
            cols_wide_resident=12,
        )
    )


# Column reductions for reduce_cols_wide: (name, base shape, view, axes).
WIDE_CASES = [
    ("cols", (40, 300), None, (0,)),
    ("cols-odd-stride", (37, 301), None, (0,)),  # rows not 16-byte aligned: single columns
    ("cols-packed-tail", (30, 304), lambda a: a[:, :301], (0,)),  # 16-byte rows, a tail
    ("cols-leading-axes", (6, 7, 260), None, (0, 1)),
    ("cols-middle", (3, 50, 272), None, (1,)),  # several outer rows
    ("cols-split", (2000, 72), None, (0,)),
    ("cols-two-rows", (2, 1000), None, (0,)),
    ("cols-broadcast", (1, 300), lambda a: a.broadcast_to((50, 300)), (0,)),  # row stride 0
    ("cols-misaligned", (20, 261), lambda a: a[:, 1:], (0,)),
    ("cols-reversed-rows", (40, 300), lambda a: a[::-1], (0,)),
]


@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("op", OPS)
@pytest.mark.exhaustive
def test_planned_reductions_match_the_cpu_backend(
    emu, host_backend, small_thresholds, op, dtype, rng
):
    for name, shape, view, axis, kernel in PLAN_CASES:
        base = random_array(rng, shape, dtype)
        x = _cpu(base, view)
        if op in ("max", "min") and any(
            x.shape[a] == 0 for a in sem.normalize_axes(axis, x.ndim, op)
        ):
            continue
        emu.names.clear()
        _check_planned(_planned_reduce(host_backend, op, x, axis), op, x, axis)
        if kernel is not None:
            assert any(_uses(n, kernel) for n in emu.names), (name, emu.names)


def test_planned_var_ddof_and_count(emu, host_backend, small_thresholds, rng):
    x = _cpu(random_array(rng, (300, 7), "float32"))
    for ddof in (0, 1, 2.5, 400):
        for axis in (None, 0, 1):
            got = _planned_reduce(host_backend, "var", x, axis, ddof)
            want = _reference_reduce("var", x, axis, ddof)
            np.testing.assert_allclose(got, want, rtol=1e-5, equal_nan=True)


@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("op", OPS)
@pytest.mark.exhaustive
def test_planned_wide_column_reductions(emu, host_backend, wide_thresholds, op, dtype, rng):
    for name, shape, view, axis in WIDE_CASES:
        x = _cpu(random_array(rng, shape, dtype), view)
        emu.names.clear()
        _check_planned(_planned_reduce(host_backend, op, x, axis), op, x, axis)
        assert any(_uses(n, "reduce_cols_wide") for n in emu.names), (name, emu.names)
    vecs = {v for v, *_ in emu.wide}
    assert 1 in vecs and max(vecs) > 1
    assert any(splits > 1 for _, splits, _, _ in emu.wide)
    assert any(v > 1 and tail for v, _, tail, _ in emu.wide)  # a 16-byte strip with a tail
    assert any(outer for *_, outer in emu.wide)


def test_narrow_and_arg_column_reductions_keep_reduce_cols(emu, host_backend, rng):
    x = _cpu(random_array(rng, (50, 300), "float32"))
    _planned_reduce(host_backend, "sum", x, 0)
    assert emu.names == ["ignis::reduce_cols_wide<float, float, ignis::SumOp<float>, 4, 2>"]
    emu.names.clear()
    out = NvArray.empty((1, 300), dtype="int64", device="cpu")
    reduction.arg_reduce(host_backend, "argmax", out, x, 0)
    assert [split_name(n)[0] for n in emu.names] == ["reduce_cols"]
    np.testing.assert_array_equal(out.to_host()[0], np.argmax(x.to_host(), axis=0))
    emu.names.clear()
    _planned_reduce(host_backend, "max", _cpu(random_array(rng, (50, 100), "float32")), 0)
    assert [split_name(n)[0] for n in emu.names] == ["reduce_cols"]  # 400 bytes: narrow


def test_wide_columns_can_be_switched_off(emu, host_backend, tune, rng):
    tune(reduction=dict(cols_wide=False))
    x = _cpu(random_array(rng, (50, 300), "bfloat16"))
    got = _planned_reduce(host_backend, "sum", x, 0)
    assert [split_name(n)[0] for n in emu.names] == ["reduce_cols"]
    _check_planned(got, "sum", x, 0)


def test_wide_splits_model():
    ws = reduction.wide_splits
    # float32 16384 x 16384 over axis 0: 64 strips of 256 columns; 3 blocks on each of 132 SMs
    assert ws(64, 16384, 396, 1024, 16384 * 4) == 6  # one wave of 384 blocks
    assert ws(32, 16384, 396, 1024, 16384 * 4) == 12  # bfloat16: 512-column strips
    assert ws(396, 16384, 396, 1024, 4) == 1  # the strips alone fill a wave
    assert ws(4000, 16384, 396, 1024, 4) == 1
    assert ws(1, 100, 396, 1024, 4) == 1  # too few rows to split
    assert ws(1, 1 << 20, 396, 1024, 4) > 100  # one strip of many rows: spread over the GPU
    for units, n in ((1, 5000), (7, 300000), (100, 4099), (64, 16384)):
        s = ws(units, n, 396, 1024, 4096)
        assert 1 <= s <= max(1, n // ignis.tuning().reduction.cols_wide_min_rows)


def test_resident_blocks_without_a_device(host_backend):
    name = "ignis::reduce_cols_wide<float, float, ignis::SumOp<float>, 4, 2>"
    assert reduction._resident_blocks(host_backend, name, (32, 8)) == reduction.COLS_WIDE_RESIDENT


@pytest.mark.parametrize("dtype", ALL)
def test_planned_arg_reductions(emu, host_backend, small_thresholds, dtype, rng):
    for name, shape, view, axis, _ in PLAN_CASES:
        if axis is not None and (not isinstance(axis, tuple) or len(axis) != 1):
            continue
        base = random_array(rng, shape, dtype)
        if dtype in FLOATS and base.size > 4:
            base.flat[base.size // 2] = np.nan
            base.flat[base.size // 3] = np.nan
        x = _cpu(base, view)
        ax = None if axis is None else axis[0]
        if x.numel == 0:
            continue
        for op in ("argmax", "argmin"):
            keep = (
                tuple(1 for _ in x.shape)
                if ax is None
                else tuple(1 if d == ax else s for d, s in enumerate(x.shape))
            )
            out = NvArray.empty(keep, dtype="int64", device="cpu")
            reduction.arg_reduce(host_backend, op, out, x, ax)
            ref = NvArray.empty(keep, dtype="int64", device="cpu")
            get_backend("cpu").arg_reduce(op, ref, x, ax)
            np.testing.assert_array_equal(out.to_host(), ref.to_host(), err_msg=f"{name} {op}")


def test_planned_arg_reduction_ties_nan_and_split(emu, host_backend, tune):
    tune(reduction=dict(group_max_n=16, min_chunk=32))
    x = np.zeros(1000, np.float32)
    x[[100, 700]] = 5.0
    x[[300, 900]] = -5.0
    for data, want_max, want_min in ((x, 100, 300),):
        for op, want in (("argmax", want_max), ("argmin", want_min)):
            out = NvArray.empty((1,), dtype="int64", device="cpu")
            reduction.arg_reduce(host_backend, op, out, _cpu(data), None)
            assert out.to_host()[0] == want
    assert any("PartialOp" in n for n in emu.names)
    x[[500, 800]] = np.nan
    out = NvArray.empty((1,), dtype="int64", device="cpu")
    reduction.arg_reduce(host_backend, "argmin", out, _cpu(x), None)
    assert out.to_host()[0] == 500


SOFTMAX_CASES = [
    ((7, 5), None, 1, "softmax_warp"),
    ((3, 40), None, 1, "softmax_warp"),
    ((4, 200), None, 1, "softmax_block"),
    ((3, 203), None, 1, "softmax_block"),
    ((2, 20008), None, 1, "softmax_online"),
    ((3, 208), None, 1, "softmax_packed"),  # 16-bit floats (others: softmax_block)
    ((2, 3, 208), None, 2, "softmax_packed"),
    ((3, 209), lambda a: a[:, 1:], 1, "softmax_block"),  # misaligned rows: not packed
    ((2, 20009), lambda a: a[:, 1:], 1, "softmax_online"),
    ((6, 33), None, 0, "softmax_cols"),
    ((2, 9, 5), None, 1, "softmax_cols"),
    ((5, 6), _t, 1, "softmax_warp"),  # through a contiguous copy
    ((5, 6), _t, 0, "softmax_cols"),
    ((4, 9), lambda a: a[:, ::2], 1, "softmax_warp"),
    ((2, 3, 4), lambda a: a.permute(2, 0, 1), 1, None),
    ((1,), None, 0, "softmax_warp"),
    ((3, 1), None, 1, "softmax_warp"),
]


@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("log", [False, True])
def test_planned_softmax(emu, host_backend, small_thresholds, tune, dtype, log, rng):
    tune(softmax=dict(max_values=4, max_values_narrow=2, packed_min_n=200, packed_items=1))
    for shape, view, axis, kernel in SOFTMAX_CASES:
        x = _cpu(random_array(rng, shape, dtype), view)
        o = sem.float_result(x.dtype)
        if kernel == "softmax_packed" and dtype not in ("float16", "bfloat16"):
            kernel = "softmax_block"
        emu.names.clear()
        out = NvArray.empty(x.shape, dtype=o, device="cpu")
        reduction.softmax(host_backend, out, x, axis, log)
        ref = NvArray.empty(x.shape, dtype=o, device="cpu")
        get_backend("cpu").softmax(ref, x, axis, log)
        rtol, atol = TOL[o.name]
        np.testing.assert_allclose(
            out.to_host().astype(np.float64),
            ref.to_host().astype(np.float64),
            rtol=rtol,
            atol=atol,
            err_msg=f"{shape} {axis}",
        )
        if kernel is not None:
            assert any(kernel in n for n in emu.names), (shape, emu.names)


def test_planner_writes_non_contiguous_outputs_through_a_copy(emu, host_backend, rng):
    x = _cpu(random_array(rng, (6, 8), "float32"))
    out = NvArray.empty((8, 1), dtype="float32", device="cpu").T  # (1, 8), strides swapped
    assert not out.is_contiguous or out.strides != (32, 4)
    reduction.reduce(host_backend, "sum", out, x, (0,), dt.float32, {})
    np.testing.assert_allclose(out.to_host(), x.to_host().sum(axis=0, keepdims=True), rtol=1e-6)


def test_plan_shapes():
    b = CpuBackend(as_device("cpu"))
    x = _cpu(np.zeros((4, 5, 6), np.float32))
    p = reduction.plan_reduction(b, x, (2,), True)
    assert (p.kind, p.rows, p.n, p.rs, p.outer) == ("rows", 20, 6, 1, [(20, 6)])
    p = reduction.plan_reduction(b, x, (0,), True)
    assert (p.kind, p.rows, p.inner, p.n, p.rs) == ("cols", 1, 30, 4, 30)
    p = reduction.plan_reduction(b, x, (0, 1, 2), True)
    assert (p.kind, p.rows, p.n) == ("rows", 1, 120)
    p = reduction.plan_reduction(b, x.permute(2, 1, 0), (0, 1, 2), True)  # order free: merges back
    assert (p.kind, p.n, p.rs) == ("rows", 120, 1)
    assert reduction.merge_dims([(2, 20), (1, 5), (3, 4)]) == [(2, 20), (3, 4)]
    assert reduction.merge_dims([(2, 3), (3, 1)]) == [(6, 1)]
    assert len(reduction.pack_outer([(3, 1)])) == 136
    with pytest.raises(ValueError, match="at most 8"):
        reduction.pack_outer([(2, 1)] * 9)


def test_softmax_config():
    cfg = reduction.softmax_rows_config
    assert cfg(1, 4, True) == ("warp", 1, 1, 128)
    assert cfg(1000, 4, True) == ("warp", 1, 32, 128)
    assert cfg(4096, 4, True) == ("block", 4, 4, 256)
    assert cfg(4096, 2, True) == ("block", 8, 2, 256)
    assert cfg(32768, 4, True) == ("block", 4, 8, 1024)
    assert cfg(32768, 2, True) == ("block", 8, 4, 1024)
    assert cfg(32768, 1, True) == ("block", 16, 2, 1024)
    assert cfg(4097, 4, False) == ("block", 1, 8, 1024)
    assert cfg(8192, 4, False) == ("block", 1, 8, 1024)
    assert cfg(8193, 4, False)[0] == "online"
    assert cfg(8192, 8, True, wide=True) == ("block", 2, 4, 1024)
    assert cfg(8193, 8, True, wide=True)[0] == "online"
    assert cfg(40000, 4, True)[0] == "online"
    # float16/bfloat16 rows above 8192 elements: kept as loaded, 8 packs a thread
    assert cfg(32768, 2, True, half=True) == ("packed", 8, 8, 512)
    assert cfg(16384, 2, True, half=True) == ("packed", 8, 8, 256)
    assert cfg(8200, 2, True, half=True) == ("packed", 8, 8, 256)
    assert cfg(8192, 2, True, half=True) == ("block", 8, 4, 256)
    assert cfg(32776, 2, True, half=True)[0] == "online"
    assert cfg(32768, 2, False, half=True)[0] == "online"  # no 16-byte packs
    assert cfg(1000, 2, True, half=True)[0] == "warp"


def test_softmax_packed_can_be_switched_off(tune):
    tune(softmax=dict(packed=False))
    assert reduction.softmax_rows_config(32768, 2, True, half=True) == ("block", 8, 4, 1024)


def test_hooks_reject_unknown_ops(host_backend):
    x = _cpu(np.ones(3, np.float32))
    out = NvArray.empty((1,), dtype="float32", device="cpu")
    with pytest.raises(ValueError, match="reduce: unknown reduction 'median'; expected one of sum"):
        reduction.reduce(host_backend, "median", out, x, (0,), dt.float32, {})
    with pytest.raises(ValueError, match="arg_reduce: unknown op 'argfoo'"):
        reduction.arg_reduce(host_backend, "argfoo", out, x, 0)
    with pytest.raises(ValueError, match="sum: cannot accumulate in int8"):
        reduction.reduce(host_backend, "sum", out, x, (0,), dt.int8, {})
    with pytest.raises(ValueError, match="var: cannot accumulate in int64; expected float32 or"):
        reduction.reduce(host_backend, "var", out, x, (0,), dt.int64, {})


# --- every kernel instance the planner asks for compiles ------------------------------------------


def _planned_kernel_names(emu, backend, rng, tune) -> list[str]:
    """Every kernel name the planner launches over a sweep of ops x dtypes x layouts."""
    tune(softmax=dict(max_values=32), reduction=dict(cols_wide_min_bytes=64))
    layouts = [
        ((3, 100), (1,)),
        ((300,), None),
        ((2000,), None),
        ((50, 9), (0,)),
        ((50, 64), (0,)),
        ((40, 512), (1,)),
        ((20, 300), (0,)),  # reduce_cols_wide with 16-byte packs
        ((20, 301), (0,)),  # reduce_cols_wide with single columns
    ]
    for dtype in ALL:
        for shape, axis in layouts:
            x = _cpu(random_array(rng, shape, dtype))
            for op in OPS:
                _planned_reduce(backend, op, x, axis)
            for op in ("argmax", "argmin"):
                ax = None if axis is None else axis[0]
                keep = tuple(1 if ax is None or d == ax else s for d, s in enumerate(shape))
                reduction.arg_reduce(
                    backend, op, NvArray.empty(keep, dtype="int64", device="cpu"), x, ax
                )
        for shape in [(3, 10), (2, 200), (2, 208), (2, 100000), (7, 5), (2, 16384)]:
            x = _cpu(random_array(rng, shape, dtype))
            out = NvArray.empty(shape, dtype=sem.float_result(x.dtype), device="cpu")
            reduction.softmax(backend, out, x, 1, False)
            reduction.softmax(backend, out, x, 0, True)
    names = sorted(set(emu.names))
    kinds = {split_name(n)[0] for n in names}
    assert kinds == {
        "reduce_group",
        "reduce_block",
        "reduce_cols",
        "reduce_cols_wide",
        "softmax_warp",
        "softmax_block",
        "softmax_packed",
        "softmax_online",
        "softmax_cols",
    }, kinds
    return names


def _compile_all(names: list[str]) -> None:
    for source, prefix in (("reduction.cu", "ignis::reduce_"), ("softmax.cu", "ignis::softmax_")):
        exprs = [n for n in names if n.startswith(prefix)]
        obj = ignis.compile(
            _sources.read_source(source), CompileOptions(arch="sm_90"), name_expressions=exprs
        )
        assert set(obj.lowered_names) == set(exprs)
        assert obj.log == "", obj.log


def _covering(names: list[str]) -> list[str]:
    """A few names that between them use every kernel, every element and output type of each
    kernel family and every op."""

    def features(name):
        kernel, args = split_name(name)
        family = kernel.split("_")[0]
        packed = _vec_arg(name) != "1"
        return {
            ("kernel", kernel, packed),
            ("in", family, args[0]),
            ("out", family, args[0] if kernel == "softmax_packed" else args[1]),
            ("op", args[2] if family == "reduce" else ""),
        }

    need = set().union(*(features(n) for n in names))
    chosen = []
    while need:
        best = max(names, key=lambda n: len(features(n) & need))
        chosen.append(best)
        need -= features(best)
    return chosen


@pytest.mark.exhaustive
def test_planned_kernels_compile_for_sm90(emu, host_backend, small_thresholds, tune, rng):
    # A covering subset (the full set takes minutes): each kernel, type and op at least once.
    _compile_all(_covering(_planned_kernel_names(emu, host_backend, rng, tune)))


@pytest.mark.exhaustive
def test_every_planned_kernel_compiles_for_sm90(
    emu, host_backend, small_thresholds, tune, rng
):
    _compile_all(_planned_kernel_names(emu, host_backend, rng, tune))


def test_kernels_use_16_byte_accesses():
    def ptx(source, name):
        obj = ignis.compile(
            _sources.read_source(source), CompileOptions(arch="compute_90"), name_expressions=[name]
        )
        return obj.code.decode()

    for t, vec in (("float", 4), ("ignis::bfloat16", 8)):
        code = ptx("reduction.cu", f"ignis::reduce_block<{t}, {t}, ignis::SumOp<float>, {vec}>")
        assert "ld.global.nc.v4.u32" in code
        code = ptx("softmax.cu", f"ignis::softmax_block<{t}, {t}, {vec}, 2>")
        assert "ld.global.nc.v4.u32" in code and "st.global.v4.b32" in code
        assert "local_depot" not in code  # the row stays in registers
        code = ptx(
            "reduction.cu", f"ignis::reduce_cols_wide<{t}, {t}, ignis::SumOp<float>, {vec}, 2>"
        )
        assert "ld.global.nc.v4.u32" in code
    for t, pair in (("ignis::bfloat16", "bf16x2"), ("ignis::float16", "f16x2")):
        code = ptx("softmax.cu", f"ignis::softmax_packed<{t}, 8>")
        assert "ld.global.nc.v4.u32" in code and "st.global.v4.b32" in code
        assert f"max.{pair}" in code and "ex2.approx.ftz.f32" in code
        assert f"cvt.rn.{pair}.f32" in code
        assert "local_depot" not in code


# Kernels whose speed depends on keeping everything in registers at their launch bounds
# (reduce_cols_wide: 3 blocks of 256 threads an SM; softmax_packed: 2 blocks of 512).
NO_SPILL = {
    "reduction.cu": [
        "ignis::reduce_cols_wide<float, float, ignis::SumOp<float>, 4, 2>",
        "ignis::reduce_cols_wide<float, float, ignis::MaxOp<float>, 4, 2>",
        "ignis::reduce_cols_wide<float, float, ignis::SqDevOp<float>, 4, 2>",
        "ignis::reduce_cols_wide<float, float, ignis::SumOp<float>, 1, 4>",
        "ignis::reduce_cols_wide<ignis::bfloat16, ignis::bfloat16, ignis::SumOp<float>, 8, 2>",
        "ignis::reduce_cols_wide<ignis::bfloat16, ignis::bfloat16, ignis::MinOp<float>, 8, 2>",
        "ignis::reduce_cols_wide<ignis::bfloat16, ignis::bfloat16, ignis::SqDevOp<float>, 8, 2>",
        "ignis::reduce_cols_wide<ignis::float16, ignis::float16, ignis::SumOp<float>, 8, 2>",
        "ignis::reduce_cols_wide<double, double, ignis::SumOp<double>, 2, 2>",
        "ignis::reduce_cols_wide<ignis::int8, ignis::int64, ignis::SumOp<long long>, 16, 1>",
    ],
    "softmax.cu": [
        "ignis::softmax_packed<ignis::bfloat16, 8>",
        "ignis::softmax_packed<ignis::float16, 8>",
    ],
}


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.exhaustive
def test_register_resident_kernels_do_not_spill(arch):
    for source, names in NO_SPILL.items():
        obj = ignis.compile(
            _sources.read_source(source),
            CompileOptions(arch=arch, extra=("--ptxas-options=-v",)),
            name_expressions=names,
        )
        spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", obj.log)
        assert len(spills) == len(names), obj.log
        assert all(a == "0" and b == "0" for a, b in spills), obj.log


def test_kernel_parameters_are_parsed():
    from ignis._signature import parse_kernel_params

    params = parse_kernel_params(
        _sources.read_source("reduction.cu"),
        "ignis::reduce_block<float, float, ignis::SumOp<float>, 4>",
    )
    kinds = [p.kind for p in params]
    assert kinds[:4] == ["pointer"] * 4 and kinds[-1] == "float"
    assert [p.size for p in params[5:9]] == [8, 8, 8, 8]
    params = parse_kernel_params(
        _sources.read_source("softmax.cu"), "ignis::softmax_warp<float, float, 4>"
    )
    assert params[-1].kind == "bool"


# ==================================================================================================
# On the GPU: the real kernels
# ==================================================================================================

GPU = "cuda:0"


def _bcast(shape):
    return lambda a: a.broadcast_to(shape) if isinstance(a, NvArray) else np.broadcast_to(a, shape)


# (id, base shape, view applied to both the NvArray and the NumPy array, axis, keepdims)
GPU_CASES = [
    ("n1", (1,), None, None, False),
    ("n31", (31,), None, 0, True),
    ("n33", (33,), None, -1, False),
    ("n1000003", (1000003,), None, None, False),
    ("empty-kept", (3, 0), None, 0, False),
    ("empty-reduced", (3, 0), None, 1, True),
    ("rows-long", (4, 300001), None, -1, False),
    ("rows-short-many", (100003, 3), None, 1, False),
    ("rows-mid", (1000, 257), None, 1, True),
    ("rows-misaligned", (5, 5001), lambda a: a[:, 1:], 1, False),
    ("cols", (1000, 257), None, 0, False),
    ("cols-split", (100003, 3), None, 0, True),
    ("cols-middle", (30, 400, 20), None, 1, False),
    ("cols-packed", (1000, 256), None, 0, True),
    ("cols-packed-outer", (30, 400, 64), None, 1, False),
    ("tuple-interleaved", (8, 9, 10, 11), None, (1, 3), False),
    ("tuple-negative", (8, 9, 10), None, (-1, 0), True),
    ("transposed", (300, 500), lambda a: a.T, 1, False),
    ("reversed-strided", (70, 130), lambda a: a[::-1, ::-2], None, False),
    ("broadcast", (1, 1000), _bcast((64, 1000)), 0, False),
    ("no-axes", (5, 6), None, (), False),
]


def _reduce_ref(op, x64, axes, keepdims, ddof=0):
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # empty slices give NaN, as intended
        return {
            "sum": lambda: np.sum(x64, axis=axes, keepdims=keepdims),
            "mean": lambda: np.mean(x64, axis=axes, keepdims=keepdims),
            "max": lambda: np.max(x64, axis=axes, keepdims=keepdims),
            "min": lambda: np.min(x64, axis=axes, keepdims=keepdims),
            "var": lambda: np.var(x64, axis=axes, ddof=ddof, keepdims=keepdims),
        }[op]()


def check_against_numpy(
    got: np.ndarray, op: str, x: np.ndarray, axes, keepdims, out_dtype: str, ddof=0
):
    """``got`` against NumPy in float64 with the tolerance of ``out_dtype`` plus the accumulated
    rounding of the sum (proportional to sum |x| of the reduced elements)."""
    x64 = to64(x)
    ref = _reduce_ref(op, x64, axes, keepdims, ddof)
    assert got.shape == np.shape(ref), (got.shape, np.shape(ref))
    if out_dtype not in FLOATS:
        np.testing.assert_array_equal(got, np.asarray(ref).astype(got.dtype))
        return
    if op in ("max", "min"):
        np.testing.assert_array_equal(got.astype(np.float64), ref)
        return
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        if x.size == 0:
            scale = 0.0
        elif op == "sum":
            scale = np.sum(np.abs(x64), axis=axes, keepdims=keepdims)
        elif op == "mean":
            scale = np.mean(np.abs(x64), axis=axes, keepdims=keepdims)
        else:
            scale = 4 * np.mean(
                (x64 - np.mean(x64, axis=axes, keepdims=True)) ** 2, axis=axes, keepdims=keepdims
            )
    rtol, atol = TOL[out_dtype]
    g = got.astype(np.float64)
    ref = np.asarray(ref, np.float64)
    tol = atol + ACC_EPS[out_dtype] * np.asarray(scale) + rtol * np.abs(ref)
    with np.errstate(invalid="ignore"):
        ok = (np.abs(g - ref) <= tol) | (g == ref) | (np.isnan(g) & np.isnan(ref))
    bad = np.flatnonzero(~ok)
    assert bad.size == 0, (
        f"{op} in {out_dtype}: {bad.size} of {ok.size} results off, e.g. got "
        f"{g.ravel()[bad[:4]]} expected {ref.ravel()[bad[:4]]}"
    )


def _make(dtype, shape, view, rng, device=GPU):
    base = random_array(rng, shape, dtype)
    a = NvArray.from_host(base, device=device)
    return (view(a), view(base)) if view else (a, base)


@pytest.mark.gpu
@pytest.mark.parametrize("case", GPU_CASES, ids=[c[0] for c in GPU_CASES])
@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("op", OPS)
def test_gpu_reductions_match_numpy(op, dtype, case, rng):
    _, shape, view, axis, keepdims = case
    a, x = _make(dtype, shape, view, rng)
    axes = sem.normalize_axes(axis, x.ndim, op)
    if op in ("max", "min") and any(x.shape[d] == 0 for d in axes):
        with pytest.raises(ignis.ShapeError, match=f"{op}: zero-size axis"):
            getattr(ignis, op)(a, axis=axis, keepdims=keepdims)
        return
    out = getattr(ignis, op)(a, axis=axis, keepdims=keepdims)
    spec = sem.reduction(op, x.shape, dt.as_dtype(dtype), axis, keepdims)
    assert out.device == GPU and out.dtype is spec.dtype and out.shape == spec.shape
    check_against_numpy(out.to_host(), op, x, axes, keepdims, spec.dtype.name)


@pytest.mark.gpu
@pytest.mark.parametrize("case", GPU_CASES, ids=[c[0] for c in GPU_CASES])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "int8", "int64", "bool"])
def test_gpu_exact_results_equal_the_cpu_backend(dtype, case, rng):
    # Integer sums and every max/min are exact: the GPU must give the CPU backend's bits.
    _, shape, view, axis, keepdims = case
    a, x = _make(dtype, shape, view, rng)
    c = NvArray.from_host(np.ascontiguousarray(x), device="cpu")
    ops = ["max", "min"] + (["sum"] if dtype not in FLOATS else [])
    for op in ops:
        if op in ("max", "min") and any(
            x.shape[d] == 0 for d in sem.normalize_axes(axis, x.ndim, op)
        ):
            continue
        got = getattr(ignis, op)(a, axis=axis, keepdims=keepdims).to_host()
        want = getattr(ignis, op)(c, axis=axis, keepdims=keepdims).to_host()
        assert got.tobytes() == want.tobytes() or np.array_equal(got, want), op


@pytest.mark.gpu
@pytest.mark.parametrize("ddof", [0, 1, 3])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64", "int32", "uint8"])
def test_gpu_var_ddof(dtype, ddof, rng):
    for shape, axis in (((1000003,), None), ((300, 301), 0), ((300, 301), 1), ((5, 2), (0, 1))):
        a, x = _make(dtype, shape, None, rng)
        out = ignis.var(a, axis=axis, ddof=ddof)
        axes = sem.normalize_axes(axis, x.ndim, "var")
        check_against_numpy(out.to_host(), "var", x, axes, False, out.dtype.name, ddof)
    one = NvArray.from_host(np.array([3.0, 3.0], np.float32), device=GPU)
    assert np.isnan(ignis.var(one, ddof=2).item()) and ignis.var(one[:1], ddof=0).item() == 0.0


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", FLOATS)
def test_gpu_nan_and_inf_in_reductions(dtype):
    rows = np.array(
        [
            [1.0, np.nan, 3.0, 2.0],
            [4.0, 5.0, -np.inf, 1.0],
            [np.inf, -np.inf, 0.0, 1.0],
            [np.inf, 2.0, np.inf, 0.0],
        ]
    )
    a = NvArray.from_host(rows, dtype=dtype, device=GPU)
    for axis in (1, None):
        for op in OPS:
            got = getattr(ignis, op)(a, axis=axis).to_host().astype(np.float64)
            with np.errstate(all="ignore"):
                want = getattr(np, op)(rows.astype(np_dtype(dtype)).astype(np.float64), axis=axis)
            np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=op)
            fin = ~np.isnan(want)
            np.testing.assert_allclose(got[fin], want[fin], rtol=TOL[dtype][0], err_msg=op)
    assert ignis.argmax(a, axis=1).to_host().tolist() == [1, 1, 0, 0]
    assert ignis.argmin(a, axis=1).to_host().tolist() == [1, 2, 1, 3]
    big = np.zeros(1000003, np.float32)
    big[[7, 500000]] = np.nan
    b = NvArray.from_host(big, dtype=dtype, device=GPU)
    assert np.isnan(ignis.max(b).item()) and np.isnan(ignis.sum(b).item())
    assert ignis.argmax(b).item() == 7 and ignis.argmin(b).item() == 7


ARG_CASES = [
    ("n1", (1,), None, None),
    ("n33", (33,), None, 0),
    ("n1000003", (1000003,), None, None),
    ("rows-long", (4, 300001), None, 1),
    ("rows-short", (100003, 3), None, -1),
    ("cols", (1000, 257), None, 0),
    ("cols-split", (100003, 3), None, 0),
    ("3d-middle", (30, 400, 20), None, 1),
    ("transposed", (300, 500), lambda a: a.T, 1),
    ("transposed-flat", (300, 500), lambda a: a.T, None),
    ("reversed", (70, 130), lambda a: a[::-1, ::-2], 1),
    ("reversed-flat", (70, 130), lambda a: a[::-1, ::-2], None),
    ("misaligned", (5, 5001), lambda a: a[:, 1:], 1),
]


@pytest.mark.gpu
@pytest.mark.parametrize("case", ARG_CASES, ids=[c[0] for c in ARG_CASES])
@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("op", ["argmax", "argmin"])
def test_gpu_arg_reductions_match_numpy(op, dtype, case, rng):
    _, shape, view, axis = case
    base = random_array(rng, shape, dtype)
    if dtype in FLOATS and base.size > 10:
        flat = base.reshape(-1)
        flat[rng.integers(0, base.size, size=3)] = np.nan
        flat[rng.integers(0, base.size, size=3)] = 4.0  # ties at the maximum
    a = NvArray.from_host(base, device=GPU)
    a, x = (view(a), view(base)) if view else (a, base)
    for keepdims in (False, True):
        out = getattr(ignis, op)(a, axis=axis, keepdims=keepdims)
        want = getattr(np, op)(to64(x), axis=axis, keepdims=keepdims)
        assert out.dtype == "int64" and out.shape == np.shape(want)
        np.testing.assert_array_equal(out.to_host(), want)


SOFTMAX_GPU_CASES = [
    ("n1", (1,), None, 0),
    ("short-rows", (1000, 5), None, -1),
    ("warp-31", (77, 31), None, 1),
    ("warp-1000", (300, 1000), None, 1),
    ("block-odd", (64, 1025), None, 1),
    ("block-4096", (64, 4096), None, 1),
    ("block-32768", (4, 32768), None, 1),
    ("online-40000", (3, 40000), None, 1),
    ("online-odd", (2, 100003), None, 1),
    ("online-misaligned", (2, 50001), lambda a: a[:, 1:], 1),
    ("single-1000003", (1000003,), None, 0),
    ("cols", (33, 31), None, 0),
    ("cols-middle", (4, 50, 7), None, 1),
    ("cols-wide", (600, 700), None, 0),
    ("transposed", (40, 50), lambda a: a.T, 1),
    ("transposed-axis0", (40, 50), lambda a: a.T, 0),
    ("strided", (40, 50), lambda a: a[::2, ::3], 1),
    ("permuted", (6, 4, 5), lambda a: a.transpose(2, 0, 1), 2),
    ("broadcast", (1, 300), _bcast((8, 300)), 1),
]


def softmax_ref(x: np.ndarray, axis: int, log: bool) -> np.ndarray:
    x = to64(x)
    with np.errstate(all="ignore"):
        z = x - np.max(x, axis=axis, keepdims=True)
        lse = np.log(np.sum(np.exp(z), axis=axis, keepdims=True))
        return z - lse if log else np.exp(z - lse)


@pytest.mark.gpu
@pytest.mark.parametrize("case", SOFTMAX_GPU_CASES, ids=[c[0] for c in SOFTMAX_GPU_CASES])
@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
def test_gpu_softmax_matches_numpy(log, dtype, case, rng):
    _, shape, view, axis = case
    a, x = _make(dtype, shape, view, rng)
    out = (ignis.log_softmax if log else ignis.softmax)(a, axis=axis)
    o = sem.float_result(dt.as_dtype(dtype))
    assert out.dtype is o and out.shape == x.shape and out.device == GPU
    rtol, atol = TOL[o.name]
    got = out.to_host().astype(np.float64)
    np.testing.assert_allclose(got, softmax_ref(x, axis, log), rtol=rtol * 4, atol=atol * 4)
    if not log:
        n = x.shape[axis]
        np.testing.assert_allclose(
            got.sum(axis=axis), 1.0, rtol=0, atol=max(atol * 8, rtol * 8 * np.sqrt(n))
        )


@pytest.mark.gpu
@pytest.mark.parametrize("n", [5, 1000, 4096, 16384, 32768, 40000])
@pytest.mark.parametrize("dtype", FLOATS)
def test_gpu_softmax_nan_and_inf_rows_like_the_cpu(dtype, n, rng):
    x = rng.uniform(-3, 3, size=(6, n))
    x[0, n // 2] = np.nan  # NaN anywhere: the whole row is NaN
    x[1, n - 1] = np.inf  # +inf: NaN row (inf - inf)
    x[2, :] = -np.inf  # only -inf: NaN row
    x[3, 0] = -np.inf  # one -inf: probability 0, log-probability -inf
    x[4, :] = 1000.0  # large equal values: uniform, no overflow
    host = x.astype(np_dtype(dtype))
    for axis, data in ((1, host), (0, np.ascontiguousarray(host.T))):
        for log in (False, True):
            fn = ignis.log_softmax if log else ignis.softmax
            got = fn(NvArray.from_host(data, device=GPU), axis=axis).to_host().astype(np.float64)
            want = fn(NvArray.from_host(data, device="cpu"), axis=axis).to_host().astype(np.float64)
            np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
            np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
            rtol, atol = TOL[dtype]
            np.testing.assert_allclose(got, want, rtol=rtol * 4, atol=atol * 4, equal_nan=True)


@pytest.mark.gpu
def test_gpu_results_are_bitwise_reproducible(rng):
    x32 = NvArray.from_host(rng.standard_normal(1000003).astype(np.float32), device=GPU)
    m = NvArray.from_host(rng.standard_normal((100003, 3)).astype(np.float32), device=GPU)
    r = NvArray.from_host(rng.standard_normal((4, 300001)).astype(ml_dtypes.bfloat16), device=GPU)
    s = NvArray.from_host(rng.standard_normal((3, 40000)).astype(np.float32), device=GPU)
    calls = [
        lambda: ignis.sum(x32),
        lambda: ignis.mean(x32),
        lambda: ignis.var(x32),
        lambda: ignis.argmax(x32),
        lambda: ignis.sum(m, axis=0),
        lambda: ignis.var(m, axis=0),
        lambda: ignis.sum(m, axis=1),
        lambda: ignis.sum(r, axis=1),
        lambda: ignis.sum(r),
        lambda: ignis.max(r, axis=0),
        lambda: ignis.softmax(s, axis=1),
        lambda: ignis.log_softmax(s, axis=0),
        lambda: ignis.softmax(r, axis=1),
    ]
    for k, call in enumerate(calls):
        first, second = call().to_host(), call().to_host()
        assert first.tobytes() == second.tobytes(), k


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("op", OPS)
def test_gpu_every_path_on_small_inputs(small_thresholds, op, dtype, rng):
    # The planner's small-input thresholds send small arrays down the block, split and
    # cols-split paths.
    for _name, shape, view, axis, _ in PLAN_CASES:
        base = random_array(rng, shape, dtype)
        g = NvArray.from_host(base, device=GPU)
        c = NvArray.from_host(base, device="cpu")
        g, c = (view(g), view(c)) if view else (g, c)
        if op in ("max", "min") and any(
            c.shape[d] == 0 for d in sem.normalize_axes(axis, c.ndim, op)
        ):
            continue
        _check_planned(getattr(ignis, op)(g, axis=axis, keepdims=True).to_host(), op, c, axis)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ALL)
def test_gpu_arg_and_softmax_paths_on_small_inputs(small_thresholds, tune, dtype, rng):
    tune(softmax=dict(max_values=4, max_values_narrow=2, packed_min_n=200, packed_items=1))
    for name, shape, view, axis, _ in PLAN_CASES:
        if axis is not None and (not isinstance(axis, tuple) or len(axis) != 1):
            continue
        base = random_array(rng, shape, dtype)
        if base.size == 0:
            continue
        g, c = NvArray.from_host(base, device=GPU), NvArray.from_host(base, device="cpu")
        g, c = (view(g), view(c)) if view else (g, c)
        ax = None if axis is None else axis[0]
        for op in ("argmax", "argmin"):
            got = getattr(ignis, op)(g, axis=ax).to_host()
            np.testing.assert_array_equal(
                got, getattr(ignis, op)(c, axis=ax).to_host(), err_msg=name
            )
    for shape, view, axis, _ in SOFTMAX_CASES:
        base = random_array(rng, shape, dtype)
        g, c = NvArray.from_host(base, device=GPU), NvArray.from_host(base, device="cpu")
        g, c = (view(g), view(c)) if view else (g, c)
        for fn in (ignis.softmax, ignis.log_softmax):
            got, want = fn(g, axis=axis).to_host(), fn(c, axis=axis).to_host()
            o = sem.float_result(c.dtype).name
            np.testing.assert_allclose(
                got.astype(np.float64),
                want.astype(np.float64),
                rtol=TOL[o][0] * 2,
                atol=TOL[o][1] * 2,
                err_msg=f"{shape} {axis}",
            )


@pytest.mark.gpu
def test_gpu_hooks_write_non_contiguous_outputs(rng):
    backend = get_backend(GPU)
    x = NvArray.from_host(rng.standard_normal((6, 8)).astype(np.float32), device=GPU)
    out = NvArray.zeros((8, 1), dtype="float32", device=GPU).T
    backend.reduce("sum", out, x, (0,), dt.float32, {})
    np.testing.assert_allclose(out.to_host(), x.to_host().sum(axis=0, keepdims=True), rtol=1e-5)
    sm = NvArray.zeros((8, 6), dtype="float32", device=GPU).T
    backend.softmax(sm, x, 1, False)
    np.testing.assert_allclose(
        sm.to_host(), softmax_ref(x.to_host(), 1, False), rtol=1e-5, atol=1e-6
    )
    idx = NvArray.zeros((8, 1), dtype="int64", device=GPU).T
    backend.arg_reduce("argmax", idx, x, 0)
    np.testing.assert_array_equal(idx.to_host(), np.argmax(x.to_host(), axis=0)[None, :])


@pytest.mark.gpu
def test_gpu_work_follows_the_current_stream(rng):
    x = NvArray.from_host(rng.standard_normal((1000, 1000)).astype(np.float32), device=GPU)
    ignis.synchronize()
    with ignis.Stream() as s:
        total = ignis.sum(x, axis=1)
        probs = ignis.softmax(x, axis=1)
    s.synchronize()
    np.testing.assert_allclose(total.to_host(), x.to_host().sum(axis=1), rtol=1e-5, atol=1e-3)
    np.testing.assert_allclose(
        probs.to_host(), softmax_ref(x.to_host(), 1, False), rtol=1e-5, atol=1e-6
    )


# --- wide column reductions and long 16-bit softmax rows ------------------------------------------

COL_ROWS = [1, 2, 31, 4099]
COL_COLS = [1, 3, 8, 33, 4100, 16385]
# Every dtype on every (rows, cols); the 67-million-element shape only in the dtypes whose
# paths differ there (16-byte packs of 4, 8 and 16 elements), to keep the host reference quick.
AXIS0_CASES = [
    (dtype, (r, c))
    for dtype in ALL
    for r in COL_ROWS
    for c in COL_COLS
    if r * c < 20_000_000 or dtype in ("float32", "bfloat16", "float16", "int8")
]


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("dtype", "shape"), AXIS0_CASES, ids=[f"{d}-{s[0]}x{s[1]}" for d, s in AXIS0_CASES]
)
def test_gpu_axis0_reductions_every_dtype(dtype, shape, rng):
    a, x = _make(dtype, shape, None, rng)
    for op in OPS:
        out = getattr(ignis, op)(a, axis=0)
        spec = sem.reduction(op, x.shape, dt.as_dtype(dtype), 0, False)
        assert out.dtype is spec.dtype and out.shape == (shape[1],)
        check_against_numpy(out.to_host(), op, x, (0,), False, spec.dtype.name)


LEADING_CASES = [
    ("3x1367x4100-first-two", (3, 1367, 4100), (0, 1)),
    ("7x5x33-first-two", (7, 5, 33), (0, 1)),
    ("2x3x4x16385-first-three", (2, 3, 4, 16385), (0, 1, 2)),
    ("31x2x8-first-two", (31, 2, 8), (0, 1)),
    ("3x31x4100-middle", (3, 31, 4100), (1,)),  # 3 outer rows
    ("2x4099x3x1000-middle-two", (2, 4099, 3, 1000), (1, 2)),
]


@pytest.mark.gpu
@pytest.mark.parametrize("case", LEADING_CASES, ids=[c[0] for c in LEADING_CASES])
@pytest.mark.parametrize("dtype", ALL)
def test_gpu_leading_axes_reductions_every_dtype(dtype, case, rng):
    _, shape, axes = case
    a, x = _make(dtype, shape, None, rng)
    for op in OPS:
        for keepdims in (False, True):
            out = getattr(ignis, op)(a, axis=axes, keepdims=keepdims)
            spec = sem.reduction(op, x.shape, dt.as_dtype(dtype), axes, keepdims)
            assert out.dtype is spec.dtype and out.shape == spec.shape
            check_against_numpy(out.to_host(), op, x, axes, keepdims, spec.dtype.name)


NONCONTIG_COL_CASES = [
    ("sliced-tail", (300, 4104), lambda a: a[:, :4097], 0),  # 16-byte rows, a scalar tail
    ("misaligned", (300, 4101), lambda a: a[:, 1:], 0),
    ("strided-cols", (300, 4100), lambda a: a[:, ::2], 0),  # the kept axis is not contiguous
    ("every-other-row", (600, 4100), lambda a: a[::2], 0),
    ("reversed-rows", (301, 4100), lambda a: a[::-1], 0),
    ("transposed", (4100, 300), lambda a: a.T, 1),
    ("broadcast-rows", (1, 4100), _bcast((300, 4100)), 0),
    ("permuted-3d", (40, 30, 520), lambda a: a.transpose(1, 0, 2), (0, 1)),
]


@pytest.mark.gpu
@pytest.mark.parametrize("case", NONCONTIG_COL_CASES, ids=[c[0] for c in NONCONTIG_COL_CASES])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32", "float64", "int32", "uint8"])
def test_gpu_non_contiguous_column_reductions(dtype, case, rng):
    _, shape, view, axis = case
    a, x = _make(dtype, shape, view, rng)
    axes = sem.normalize_axes(axis, x.ndim, "sum")
    for op in OPS:
        out = getattr(ignis, op)(a, axis=axis)
        check_against_numpy(out.to_host(), op, x, axes, False, out.dtype.name)


@pytest.mark.gpu
@pytest.mark.parametrize("wide", [False, True], ids=["reduce_cols", "reduce_cols_wide"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float32", "float64", "int8"])
def test_gpu_both_column_kernels_match_numpy(tune, wide, dtype, rng):
    tune(reduction=dict(cols_wide=wide))  # (recipes are keyed on the settings)
    for shape in ((4099, 4100), (2, 16385), (31, 4096)):
        a, x = _make(dtype, shape, None, rng)
        for op in OPS:
            out = getattr(ignis, op)(a, axis=0)
            check_against_numpy(out.to_host(), op, x, (0,), False, out.dtype.name)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("op", OPS)
def test_gpu_wide_column_paths_on_small_inputs(wide_thresholds, op, dtype, rng):
    # Small inputs down every reduce_cols_wide path: splits, tails, single columns, outer rows.
    for _name, shape, view, axis in WIDE_CASES:
        base = random_array(rng, shape, dtype)
        g = NvArray.from_host(base, device=GPU)
        c = NvArray.from_host(base, device="cpu")
        g, c = (view(g), view(c)) if view else (g, c)
        _check_planned(getattr(ignis, op)(g, axis=axis, keepdims=True).to_host(), op, c, axis)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(300, 4100), (4099, 1000), (31, 16385), (2, 4104)])
@pytest.mark.parametrize("dtype", FLOATS)
def test_gpu_column_reductions_propagate_nan_and_inf(dtype, shape, rng):
    r, c = shape
    x = rng.uniform(-3, 3, size=shape)
    x[r // 2, 5] = np.nan
    x[r - 1, 7] = np.inf
    x[0, 9] = -np.inf
    x[0, 11], x[r - 1, 11] = np.inf, -np.inf  # sum and mean NaN, max +inf, min -inf
    x[r // 3, c - 1] = np.nan  # in the last column (a strip's tail where c is odd)
    x[:, c - 2] = -np.inf
    host = x.astype(np_dtype(dtype))
    a = NvArray.from_host(host, device=GPU)
    ref = to64(host)
    for op in ("sum", "mean", "max", "min"):
        got = getattr(ignis, op)(a, axis=0).to_host().astype(np.float64)
        with np.errstate(all="ignore"):
            want = getattr(np, op)(ref, axis=0)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=op)
        np.testing.assert_array_equal(np.isposinf(got), np.isposinf(want), err_msg=op)
        np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want), err_msg=op)
        assert np.isnan(want[[5, c - 1]]).all() and np.isinf(want[c - 2])
        fin = np.isfinite(want)
        check_against_numpy(got[fin].astype(host.dtype), op, host[:, fin], (0,), False, dtype)


@pytest.mark.gpu
def test_gpu_column_reductions_are_bitwise_reproducible(rng):
    f32 = rng.standard_normal((4099, 16385)).astype(np.float32)
    bf16 = rng.standard_normal((4099, 4100)).astype(ml_dtypes.bfloat16)
    f16 = rng.standard_normal((2, 3, 4, 16385)).astype(np.float16)
    soft = rng.standard_normal((64, 32768)).astype(ml_dtypes.bfloat16)
    calls = [
        (f32, lambda a: ignis.sum(a, axis=0)),
        (f32, lambda a: ignis.mean(a, axis=0)),
        (f32, lambda a: ignis.var(a, axis=0)),
        (f32, lambda a: ignis.max(a, axis=0)),
        (bf16, lambda a: ignis.sum(a, axis=0)),
        (bf16, lambda a: ignis.var(a, axis=0)),
        (f16, lambda a: ignis.sum(a, axis=(0, 1, 2))),
        (soft, lambda a: ignis.softmax(a, axis=1)),
        (soft, lambda a: ignis.log_softmax(a, axis=1)),
        (soft.astype(np.float16), lambda a: ignis.softmax(a, axis=1)),
    ]
    for k, (data, call) in enumerate(calls):
        first = NvArray.from_host(data, device=GPU)
        again = NvArray.from_host(data, device=GPU)  # the same values at another address
        results = [call(first).to_host(), call(first).to_host(), call(again).to_host()]
        assert results[0].tobytes() == results[1].tobytes() == results[2].tobytes(), k


def _check_softmax_relative(got, x, axis, log, dtype):
    """softmax against float64 with a tolerance relative to each value (tiny probabilities
    of long rows are checked too, not hidden under an absolute tolerance)."""
    ref = softmax_ref(x, axis, log)
    rtol = TOL[dtype][0] * 4
    # float16 probabilities below its smallest normal (6.1e-5) are rounded absolutely
    atol = {"float16": 6e-8, "bfloat16": 1e-38, "float32": 1e-38}[dtype]
    if log:
        atol = rtol * 4  # log-probabilities near zero
    err = np.abs(got - ref)
    bad = np.flatnonzero(~(err <= atol + rtol * np.abs(ref)))
    assert bad.size == 0, (
        f"{bad.size} of {ref.size} off, e.g. got {got.ravel()[bad[:4]]} "
        f"expected {ref.ravel()[bad[:4]]}"
    )


@pytest.mark.gpu
@pytest.mark.parametrize("packed", [True, False], ids=["packed", "not-packed"])
@pytest.mark.parametrize("n", [1, 33, 4096, 16384, 32768, 40000])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
def test_gpu_softmax_long_rows(tune, log, dtype, n, packed, rng):
    tune(softmax=dict(packed=packed))
    a, x = _make(dtype, (5, n), None, rng)
    out = (ignis.log_softmax if log else ignis.softmax)(a, axis=-1)
    assert out.dtype == dtype and out.shape == (5, n)
    got = out.to_host().astype(np.float64)
    _check_softmax_relative(got, x, 1, log, dtype)
    if not log:
        rtol = TOL[dtype][0]
        np.testing.assert_allclose(got.sum(axis=1), 1.0, rtol=0, atol=rtol * 2 + 1e-6)
    # a row that is a strided view (every other row) and a 3-D batch take the same path
    a3, x3 = _make(dtype, (2, 6, n), lambda v: v[:, ::2], rng)
    got3 = (ignis.log_softmax if log else ignis.softmax)(a3, axis=2).to_host().astype(np.float64)
    _check_softmax_relative(got3, x3, 2, log, dtype)
