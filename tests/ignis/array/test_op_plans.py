"""Repeated ops: the remembered plans of the front end (binary, unary, reductions, reshape) give
the same results and the same errors as the first call, on every device."""

from __future__ import annotations

import numpy as np
import pytest
from array_helpers import TOL, FakeCudaBackend, host, random_array, to64
from ignis._array import _backend, _ops
from ignis._array.array import _reshapes

import ignis
from ignis import NvArray

REPEAT = 3  # the first call makes the plan, the others use it


def _check(got: NvArray, expected: np.ndarray, dtype: str) -> None:
    assert got.dtype == dtype and got.shape == expected.shape
    rtol, atol = TOL.get(dtype, (0, 0))
    np.testing.assert_allclose(to64(host(got)), expected, rtol=rtol, atol=atol)


@pytest.mark.parametrize(
    "shape_a,shape_b",
    [((3, 5), (3, 5)), ((3, 5), (5,)), ((3, 1), (1, 5)), ((), (4,)), ((7,), (7,))],
)
@pytest.mark.parametrize(
    "op,fn",
    [
        ("add", np.add),
        ("subtract", np.subtract),
        ("multiply", np.multiply),
        ("divide", np.divide),
        ("maximum", np.maximum),
    ],
)
def test_repeated_binary_ops_match_numpy(device, rng, op, fn, shape_a, shape_b) -> None:
    for _ in range(REPEAT):
        a_host = random_array(rng, shape_a, "float32")
        b_host = random_array(rng, shape_b, "float32", positive=op == "divide")
        a = ignis.asarray(a_host, device=device)
        b = ignis.asarray(b_host, device=device)
        _check(getattr(ignis, op)(a, b), fn(to64(a_host), to64(b_host)), "float32")
        if op in ("add", "subtract", "multiply", "divide"):
            sym = {"add": "+", "subtract": "-", "multiply": "*", "divide": "/"}[op]
            got = eval(f"b {sym} a")  # the reflected order, through the operators
            _check(got, fn(to64(b_host), to64(a_host)), "float32")


def test_mixed_dtypes_keep_their_promotion_on_repeat(device, rng) -> None:
    for _ in range(REPEAT):
        i = random_array(rng, (4, 3), "int32")
        f = random_array(rng, (3,), "float16")
        a, b = ignis.asarray(i, device=device), ignis.asarray(f, device=device)
        _check(a + b, to64(i) + to64(f), "float64")  # int32 with float16: float64
        _check(a / a, np.ones((4, 3)), "float64")  # int / int: float64
        _check(a < 2, to64(i) < 2, "bool")


def test_scalar_operands_on_either_side(device, rng) -> None:
    x = random_array(rng, (6,), "float16")
    n = random_array(rng, (6,), "int8")
    a, k = ignis.asarray(x, device=device), ignis.asarray(n, device=device)
    for _ in range(REPEAT):
        _check(a * 2.0, to64(x) * 2.0, "float16")  # a Python float is weak
        _check(2.5 - a, 2.5 - to64(x), "float16")
        _check(k + 3, to64(n) + 3, "int8")
        _check(5 - k, 5 - to64(n), "int8")
        _check(k * 1.5, to64(n) * 1.5, "float64")  # float with an integer array: float64
        _check(k + True, to64(n) + 1, "int8")


def test_python_ints_are_range_checked_on_every_call(device, rng) -> None:
    k = ignis.asarray(random_array(rng, (5,), "int8"), device=device)
    u = ignis.asarray(random_array(rng, (5,), "uint8", positive=True), device=device)
    for _ in range(REPEAT):
        k + 100  # noqa: B018 - makes (and then uses) the plan for int8 + int
        with pytest.raises(OverflowError, match="add: Python integer 300 is out of bounds for"):
            k + 300  # noqa: B018
        with pytest.raises(OverflowError, match="subtract: Python integer -129 is out of bounds"):
            -129 - k  # noqa: B018
        with pytest.raises(OverflowError, match="multiply: Python integer -1 is out of bounds"):
            u * -1  # noqa: B018
        _check(k * 2.0 + 1, to64(host(k)) * 2.0 + 1, "float64")


def test_errors_keep_their_messages_after_plans(device, rng) -> None:
    a = ignis.asarray(random_array(rng, (3,), "float32"), device=device)
    b = ignis.asarray(random_array(rng, (4,), "float32"), device=device)
    t = ignis.asarray(np.array([True, False, True]), device=device)
    a + a  # noqa: B018 - a plan for float32 (3,) + float32 (3,)
    for _ in range(REPEAT):
        with pytest.raises(ignis.ShapeError, match=r"add: shapes \(3,\) and \(4,\) cannot be"):
            a + b  # noqa: B018
        with pytest.raises(ignis.DTypeError, match="subtract: not supported for two bool operands"):
            t - t  # noqa: B018
        with pytest.raises(ignis.DTypeError, match="negative: not supported for bool arrays"):
            -t  # noqa: B018
        with pytest.raises(TypeError, match="add: NumPy arrays are not converted implicitly"):
            a + np.ones(3)  # noqa: B018
        with pytest.raises(TypeError, match="at least one operand must be an NvArray"):
            ignis.add(1.0, 2.0)


def test_device_mismatch_is_refused_on_every_call(rng) -> None:
    _backend.register_backend("cuda", FakeCudaBackend.create)
    try:
        a = ignis.asarray(random_array(rng, (3,), "float32"), device="cpu")
        g = NvArray.from_host(random_array(rng, (3,), "float32"), device="cuda:0")
        a + a  # noqa: B018 - the plan for float32 (3,) + float32 (3,) exists now
        g + g  # noqa: B018
        for _ in range(REPEAT):
            with pytest.raises(ignis.DeviceMismatchError, match="add: operands are on different"):
                a + g  # noqa: B018
    finally:
        _backend.register_backend("cuda", None)


@pytest.mark.parametrize("dtype", ["float32", "int32", "float16"])
def test_repeated_unary_ops_match_numpy(device, rng, dtype) -> None:
    x = random_array(rng, (4, 5), dtype, positive=True)
    a = ignis.asarray(x, device=device)
    out_dtype = {"int32": "float64"}.get(dtype, dtype)
    for _ in range(REPEAT):
        _check(ignis.exp(a), np.exp(to64(x)), out_dtype)
        _check(ignis.sqrt(a), np.sqrt(to64(x)), out_dtype)
        _check(-a, -to64(x), dtype)
        _check(ignis.gelu(a.astype("float32"), approximate="tanh"), _gelu_tanh(to64(x)), "float32")


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


@pytest.mark.parametrize(
    "axis,keepdims", [(None, False), (0, False), (-1, True), (1, False), (None, True)]
)
def test_repeated_reductions_match_numpy(device, rng, axis, keepdims) -> None:
    x = random_array(rng, (4, 6), "float64")
    a = ignis.asarray(x, device=device)
    for _ in range(REPEAT):
        for name in ("sum", "mean", "max", "min"):
            got = getattr(a, name)(axis=axis, keepdims=keepdims)
            _check(got, getattr(np, name)(x, axis=axis, keepdims=keepdims), "float64")
        got = a.var(axis=axis, ddof=1, keepdims=keepdims)
        _check(got, np.var(x, axis=axis, ddof=1, keepdims=keepdims), "float64")
        _check(a.sum(axis=(0, 1)), np.sum(x, axis=(0, 1)), "float64")  # tuple axes: full path


def test_reduction_errors_keep_their_messages(device, rng) -> None:
    empty = NvArray.empty((0, 3), device=device)
    a = ignis.asarray(random_array(rng, (2, 3), "float32"), device=device)
    for _ in range(REPEAT):
        with pytest.raises(ignis.ShapeError, match="max: zero-size axis 0 of shape"):
            empty.max(axis=0)
        with pytest.raises(ignis.ShapeError, match="sum: axis 2 is out of range"):
            a.sum(axis=2)
        with pytest.raises(ignis.DTypeError, match="var: ddof must be a number"):
            a.var(ddof="1")
        assert a.sum(axis=1).dtype == "float32"


def test_repeated_reshapes(device, rng) -> None:
    x = random_array(rng, (20, 50), "float32")
    a = ignis.asarray(x, device=device)
    for _ in range(REPEAT):
        v = a.reshape(50, 20)
        assert v.shape == (50, 20) and v.strides == (80, 4) and v._storage is a._storage
        np.testing.assert_array_equal(host(v), x.reshape(50, 20))
        np.testing.assert_array_equal(host(a.reshape((-1,))), x.reshape(-1))
        np.testing.assert_array_equal(host(a.reshape([10, -1])), x.reshape(10, -1))
        np.testing.assert_array_equal(host(a.reshape(np.int64(1000))), x.reshape(1000))
        t = a.T.reshape(1000)  # needs a copy: never a view of the transposed layout
        assert t._storage is not a._storage
        np.testing.assert_array_equal(host(t), x.T.reshape(1000))
        with pytest.raises(ignis.ShapeError, match="reshape: shape must be an int or a sequence"):
            a.reshape(50.0, 20)
        with pytest.raises(ignis.ShapeError, match=r"cannot reshape array of shape \(20, 50\)"):
            a.reshape(3, -1)
        with pytest.raises(ignis.ShapeError, match="only one dimension can be -1"):
            a.reshape(-1, -1)
    assert any(k[0] == (50, 20) for k in _reshapes)


@pytest.mark.parametrize("shape", [(), (5,), (2, 3), (2, 3, 4)])
def test_transpose_views(device, rng, shape) -> None:
    x = random_array(rng, shape, "float32")
    a = ignis.asarray(x, device=device)
    for view in (a.T, a.transpose(), a.transpose(tuple(range(len(shape) - 1, -1, -1)))):
        assert view._storage is a._storage and view.strides == a.strides[::-1]
        np.testing.assert_array_equal(host(view), x.T)


def test_every_result_owns_its_memory(device, rng) -> None:
    x = random_array(rng, (100,), "float32")
    a = ignis.asarray(x, device=device)
    results = [a + float(i) for i in range(4)]
    assert len({id(r._storage) for r in results}) == 4
    for i, r in enumerate(results):
        np.testing.assert_allclose(host(r), x + np.float32(i), rtol=1e-6)
        assert r.stream == a.stream  # ordered on the stream new arrays get (None on the CPU)


def test_plans_stay_bounded(monkeypatch, device, rng) -> None:
    monkeypatch.setattr(_ops._binary_plans, "max_entries", 4)
    a = ignis.asarray(random_array(rng, (3,), "float32"), device=device)
    for n in range(1, 12):
        b = ignis.asarray(random_array(rng, (n, 3), "float32"), device=device)
        _check(a + b, to64(host(a)) + to64(host(b)), "float32")
        assert len(_ops._binary_plans) <= 4


def test_vector_width_agrees_with_the_general_layout_check(rng) -> None:
    # elementwise._width (the unary/binary path) against elementwise._plan (every other hook)
    # on random layouts: dense, sliced, transposed, broadcast, offset, mixed element sizes.
    from types import SimpleNamespace

    from ignis._array._cuda_backend import elementwise as ew
    from ignis._array._layout import contiguous_strides

    def operand(shape, size, out_strides):
        kind = rng.integers(5)
        strides = contiguous_strides(shape, size)
        if kind == 1 and shape:
            strides = tuple(s * 2 for s in strides)  # every other element
        elif kind == 2 and len(shape) > 1:
            strides = strides[:-2] + (strides[-1], strides[-2] * shape[-1] // shape[-2])
        elif kind == 3 and shape:
            strides = (0,) + strides[1:]  # broadcast along the first axis
        elif kind == 4 and out_strides is not None and size == 4:
            strides = out_strides  # the output's own layout, whatever it is
        dtype = SimpleNamespace(itemsize=size)
        offset = int(rng.choice([0, size, 16, 3 * size]))
        return SimpleNamespace(
            _shape=shape, _strides=strides, _dtype=dtype, _offset=offset,
            _storage=SimpleNamespace(ptr=1 << 20),
        )

    for _ in range(2000):
        shape = tuple(int(d) for d in rng.integers(1, 5, size=rng.integers(0, 4)))
        out = operand(shape, 4, None)
        x = operand(shape, int(rng.choice([1, 2, 4, 8])), out._strides)
        y = operand(shape, int(rng.choice([1, 2, 4, 8])), out._strides)
        ptr = lambda a: a._storage.ptr + a._offset  # noqa: E731
        assert ew._width(out, ptr(out), x, ptr(x), y, ptr(y)) == ew._plan([out, x, y])
        assert ew._width(out, ptr(out), x, ptr(x), None, 0) == ew._plan([out, x])


@pytest.mark.parametrize(
    "shape_a,shape_b,ta,tb",
    [
        ((5, 7), (7, 3), False, False),
        ((7, 5), (3, 7), True, True),
        ((2, 4, 5, 6), (6, 3), False, False),  # batch broadcast
        ((6,), (6, 4), False, False),  # vector operands drop their axis
        ((4, 6), (6,), False, False),
        ((6,), (6,), False, False),
    ],
)
def test_repeated_matmuls_match_numpy(device, rng, shape_a, shape_b, ta, tb) -> None:
    for i in range(REPEAT):
        a_host = random_array(rng, shape_a, "float64")
        b_host = random_array(rng, shape_b, "float64")
        a, b = ignis.asarray(a_host, device=device), ignis.asarray(b_host, device=device)
        ah = np.swapaxes(a_host, -1, -2) if ta else a_host
        bh = np.swapaxes(b_host, -1, -2) if tb else b_host
        got = ignis.matmul(a, b, transpose_a=ta, transpose_b=tb, alpha=float(i + 1))
        _check(got, (i + 1) * np.matmul(ah, bh), "float64")


def test_repeated_matmuls_of_views_and_mixed_dtypes(device, rng) -> None:
    for _ in range(REPEAT):
        base = random_array(rng, (9, 8), "float32")
        x = ignis.asarray(base, device=device)
        w = ignis.asarray(random_array(rng, (8, 5), "float64"), device=device)
        got = x[1:, ::2] @ w[::2]  # offset and strided views; float32 @ float64
        _check(got, to64(base[1:, ::2]) @ to64(host(w))[::2], "float64")
        acc = ignis.zeros((8, 5), dtype="float64", device=device)
        ignis.matmul(x[1:], w, beta=1.0, out=acc)  # out= and beta: never from a plan
        ignis.matmul(x[1:], w, beta=1.0, out=acc)
        _check(acc, 2 * (to64(base[1:]) @ to64(host(w))), "float64")
    with pytest.raises(ignis.ShapeError, match="matmul: shapes"):
        x @ x
    with pytest.raises(ignis.ShapeError, match="matmul: shapes"):
        x @ x


def test_repeated_inplace_ops_match_numpy(device, rng) -> None:
    for _ in range(REPEAT):
        d_host = random_array(rng, (4, 5), "float32")
        row = random_array(rng, (5,), "float64")
        d = ignis.asarray(d_host.copy(), device=device)
        d += ignis.asarray(row, device=device)  # broadcast, float64 into float32
        ignis.accumulate(d, ignis.asarray(row, device=device))
        expected = d_host.astype(np.float64) + row
        expected = expected.astype(np.float32).astype(np.float64) + row
        _check(d, expected.astype(np.float32).astype(np.float64), "float32")
        # Overlap is checked on every call, plan or not: a reversed view of the same memory.
        v_host = random_array(rng, (6,), "float64")
        v = ignis.asarray(v_host.copy(), device=device)
        v *= v[::-1]
        _check(v, v_host * v_host[::-1], "float64")
        w = ignis.asarray(v_host.copy(), device=device)
        w -= w  # the identical view: allowed in place
        _check(w, np.zeros(6), "float64")
    i = ignis.zeros(3, dtype="int32", device=device)
    f = ignis.ones(3, dtype="float32", device=device)
    for _ in range(REPEAT):
        with pytest.raises(ignis.DTypeError, match="__iadd__: cannot store a float64 result"):
            i += f
        with pytest.raises(ignis.ShapeError, match="__iadd__: the result of shape"):
            f += ignis.ones((2, 3), device=device)
