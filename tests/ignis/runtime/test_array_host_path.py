"""NvArray ops on the CUDA backend over a fake driver: what one ``a + b`` hands the driver (one
allocation, one launch with the right kernel, arguments, grid and stream, one free), and that the
remembered plans and layouts stay right when views, scalars, dtypes and streams change."""

from __future__ import annotations

import struct

import fake_gpu
import numpy as np
import pytest

import ignis
from ignis import NvArray

pytestmark = pytest.mark.skipif(
    ignis.is_available(), reason="fake driver tests: the GPU tests cover the real driver"
)

EW = "ignis::ew::"


@pytest.fixture
def gpu(monkeypatch: pytest.MonkeyPatch):
    g = fake_gpu.install(monkeypatch)
    yield g
    fake_gpu.uninstall()


def empty(shape, dtype="float32") -> NvArray:
    return NvArray.empty(shape, dtype=dtype, device="cuda:0")


def u64(v: bytes) -> int:
    return struct.unpack("<Q", v)[0]


def f32(v: bytes) -> float:
    return struct.unpack("<f", v)[0]


def i64(v: bytes) -> int:
    return struct.unpack("<q", v)[0]


def test_an_add_is_one_allocation_one_launch_one_free(gpu) -> None:
    a, b = empty(1000), empty(1000)
    before = ignis.memory_stats(0)
    gpu.launches.clear()
    c = a + b
    assert c.shape == (1000,) and c.dtype == "float32" and c.strides == (4,)
    assert c.device == "cuda:0" and c.stream is ignis.current_stream(gpu.device)
    ((name, grid, block, stream, args),) = gpu.launches
    assert name == f"{EW}binary_contig<{EW}op_add, float, float, float, float, 0, 4>"
    assert grid == (1, 1, 1) and block == (256, 1, 1) and stream == 0
    assert [u64(v) for v in args[:3]] == [c.data_ptr, a.data_ptr, b.data_ptr]
    assert (f32(args[3]), f32(args[4]), i64(args[5])) == (0.0, 0.0, 1000)
    assert gpu.calls["cuMemAllocAsync"][-1][0] == 4000
    after = ignis.memory_stats(0)
    assert after["allocation_count"] - before["allocation_count"] == 1
    assert after["current_bytes"] - before["current_bytes"] == 4000
    ptr = c.data_ptr
    del c
    assert (int(gpu.calls["cuMemFreeAsync"][-1][0]), int(gpu.calls["cuMemFreeAsync"][-1][1])) == (
        ptr,
        0,
    )
    assert ignis.memory_stats(0)["current_bytes"] == before["current_bytes"]


def test_repeated_ops_reuse_everything_and_free_everything(gpu) -> None:
    a, b = empty((20, 50)), empty((20, 50))
    base = ignis.memory_stats(0)
    gpu.launches.clear()
    for _ in range(100):
        a * b
        ignis.exp(a)
        a - 1.5
    assert len(gpu.launches) == 300
    assert len({name for name, *_ in gpu.launches}) == 3
    s = ignis.memory_stats(0)
    assert s["allocation_count"] - base["allocation_count"] == 300
    assert s["deallocation_count"] - base["deallocation_count"] == 300
    assert s["current_bytes"] == base["current_bytes"]
    assert s["peak_bytes"] - base["current_bytes"] == 4000  # one result alive at a time


def test_scalars_views_and_broadcasts_pick_their_kernels(gpu) -> None:
    a, b = empty(1000), empty(1000)
    gpu.launches.clear()
    c = a * 2.0
    d = 3.0 - a
    e = a[1:] + b[1:]  # 4 bytes past a 16-byte boundary: one element per access
    x, row = empty((3, 4)), empty(4)
    f = x + row  # broadcast: the strided kernel
    names = [name for name, *_ in gpu.launches]
    assert names[0] == f"{EW}binary_contig<{EW}op_multiply, float, float, float, float, 2, 4>"
    assert names[1] == f"{EW}binary_contig<{EW}op_subtract, float, float, float, float, 1, 4>"
    assert names[2] == f"{EW}binary_contig<{EW}op_add, float, float, float, float, 0, 1>"
    assert names[3] == f"{EW}binary_strided<{EW}op_add, float, float, float, float, 0, false>"
    args = [launch[4] for launch in gpu.launches]
    assert f32(args[0][4]) == 2.0 and f32(args[1][3]) == 3.0
    assert u64(args[2][1]) == a.data_ptr + 4 and i64(args[2][5]) == 999
    assert u64(args[3][2]) == row.data_ptr
    assert (c.shape, d.shape, e.shape, f.shape) == ((1000,), (1000,), (999,), (3, 4))


def test_dtypes_are_converted_by_the_kernel(gpu) -> None:
    h, i = empty(64, "float16"), empty(64, "int32")
    gpu.launches.clear()
    r = h + i  # float16 with int32 gives float64, computed in double
    k = empty(64, "int8") + 3
    names = [name for name, *_ in gpu.launches]
    assert r.dtype == "float64" and k.dtype == "int8"
    assert names[0] == (
        f"{EW}binary_contig<{EW}op_add, double, double, ignis::float16, ignis::int32, 0, 2>"
    )
    assert names[1] == (
        f"{EW}binary_contig<{EW}op_add, ignis::int8, ignis::int8, ignis::int8, ignis::int8, 2, 16>"
    )
    assert gpu.launches[1][4][4] == b"\x03"  # the scalar, as an int8


def test_unary_and_reduction_launch_on_the_current_stream(gpu) -> None:
    a = empty((8, 128))
    stream = ignis.Stream.from_handle(0x6100, gpu.device)
    gpu.launches.clear()
    with stream:
        e = ignis.exp(a)
        s = a.sum()
        t = a.sum(axis=1, keepdims=True)
    assert e.stream is stream and s.stream is stream and t.stream is stream
    assert gpu.launches[0][0] == f"{EW}unary_contig<{EW}op_exp, float, float, float, 4>"
    assert all(launch[3] == 0x6100 for launch in gpu.launches)
    assert s.shape == () and t.shape == (8, 1)
    allocations = gpu.calls["cuMemAllocAsync"][-3:]
    assert [int(x[1]) for x in allocations] == [0x6100] * 3
    ptrs = [e.data_ptr, s.data_ptr, t.data_ptr]
    del e, s, t
    freed = {int(p): int(h) for p, h in gpu.calls["cuMemFreeAsync"]}
    assert all(freed[p] == 0x6100 for p in ptrs)  # freed on the stream they were allocated on


def test_errors_come_before_any_allocation(gpu) -> None:
    a = empty(5)
    c = ignis.asarray(np.ones(5, np.float32), device="cpu")
    a + a  # noqa: B018 - the plan exists
    calls = len(gpu.calls["cuMemAllocAsync"])
    with pytest.raises(ignis.DeviceMismatchError, match="add: operands are on different devices"):
        a + c  # noqa: B018
    with pytest.raises(ignis.ShapeError, match="multiply: shapes"):
        a * empty(6)  # noqa: B018
    with pytest.raises(OverflowError, match="add: Python integer 1000 is out of bounds for int8"):
        empty(5, "int8") + 1000  # noqa: B018
    assert len(gpu.calls["cuMemAllocAsync"]) == calls + 2  # the two empty() operands only


def test_empty_results_launch_nothing(gpu) -> None:
    a = empty((0, 4))
    gpu.launches.clear()
    (a + a, a * 2.0, ignis.exp(a))
    assert gpu.launches == []


# --- reductions: remembered launches -----------------------------------------------------------


@pytest.mark.parametrize(
    "shape,view,op,axis",
    [
        ((1000,), None, "sum", None),
        ((1000,), "offset", "sum", None),  # 4 bytes past alignment: one element per load
        ((8, 128), None, "mean", 1),
        ((64, 48), None, "max", 0),  # the reduced axis outside the contiguous one (cols)
        ((6, 4, 5), "flip", "min", 1),  # a reversed view read from its last element
        ((0, 4), None, "sum", 0),  # nothing to read: the empty results
    ],
)
def test_a_repeated_reduction_repeats_the_planned_launch(gpu, shape, view, op, axis) -> None:
    def operand() -> NvArray:
        x = empty(shape if view != "offset" else (shape[0] + 1,))
        if view == "offset":
            return x[1:]
        if view == "flip":
            return x[:, ::-1]
        return x

    launches, pointers = [], []
    for _ in range(3):  # planned, then remembered twice, each time on new memory
        x = operand()
        gpu.launches.clear()
        out = getattr(x, op)(axis=axis)
        ((name, grid, block, _stream, args),) = gpu.launches
        launches.append((name, grid, block, args[2:]))
        pointers.append((u64(args[0]) - x.data_ptr, u64(args[1]) - out.data_ptr))
    assert launches[0] == launches[1] == launches[2]
    assert pointers[0] == pointers[1] == pointers[2]
    assert pointers[0][1] == 0
    if view == "flip":  # starts at the last element of the reversed axis
        assert pointers[0][0] == 3 * x.strides[1]


def test_reductions_that_need_temporaries_are_planned_every_time(gpu) -> None:
    x = empty((4, 6, 8))
    for _ in range(3):
        gpu.launches.clear()
        x.sum(axis=(0, 2))  # reduced axes 0 and 2 do not merge: a copy first
        assert [name.split("<")[0] for name, *_ in gpu.launches] == [
            f"{EW}copy_strided",
            "ignis::reduce_group",
        ]
        gpu.launches.clear()
        x.var()  # two passes and a temporary of means
        assert ["SqDevOp" in name for name, *_ in gpu.launches] == [False, True]


def test_a_remembered_reduction_follows_the_current_stream(gpu) -> None:
    a = empty(1000)
    a.sum()
    stream = ignis.Stream.from_handle(0x6200, gpu.device)
    gpu.launches.clear()
    with stream:
        s = a.sum()
    assert [launch[3] for launch in gpu.launches] == [0x6200] and s.stream is stream


# --- operators and foreign operands -------------------------------------------------------------


class _Other:
    """A foreign operand type with reflected operators, like a Tensor."""

    def __radd__(self, other):
        return ("radd", other)

    def __rmul__(self, other):
        return ("rmul", other)

    def __rmatmul__(self, other):
        return ("rmatmul", other)

    def __gt__(self, other):  # the reflection of other < self
        return ("gt", other)


def test_operators_leave_foreign_operands_to_their_reflected_methods(gpu) -> None:
    a = empty(4)
    o = _Other()
    assert a + o == ("radd", a) and a * o == ("rmul", a) and a @ o == ("rmatmul", a)
    assert (a < o) == ("gt", a)
    b = a
    b += o  # no in-place form: Python falls back to b = b + o
    assert b == ("radd", a)
    with pytest.raises(TypeError, match="unsupported operand"):
        a - object()
    # Types the array knows keep their explanations.
    with pytest.raises(TypeError, match="NumPy arrays are not converted implicitly"):
        a + np.ones(4, np.float32)
    with pytest.raises(TypeError, match="convert sequences with ignis.asarray"):
        a * [1.0, 2.0]
    with pytest.raises(ignis.DTypeError, match="complex values are not supported"):
        a + 1j
    with pytest.raises(TypeError, match="add: expected an NvArray or a Python/NumPy scalar"):
        ignis.add(a, o)  # the functions never defer
