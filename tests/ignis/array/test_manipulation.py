"""The Array API standard's manipulation, creation, difference and product functions
(``ignis._array._manipulation``) against NumPy on random data: every dtype, each device, views
where the functions promise them, copies where they do not, and the errors of bad input."""

from __future__ import annotations

import numpy as np
import pytest
from array_helpers import assert_same, np_dtype, nv, uniform_array
from ignis._array.array import NvArray

import ignis

DTYPES = [d.name for d in ignis._dtypes.all_dtypes]
FLOATS = [d.name for d in ignis._dtypes.all_dtypes if d.kind == "f"]
NUMERIC = [d for d in DTYPES if d != "bool"]
# float64 references of products and sums: (rtol, atol) per dtype
TOL = {"float16": (2e-3, 2e-3), "bfloat16": (1.6e-2, 2e-2), "float32": (2e-6, 2e-6),
       "float64": (1e-12, 1e-12)}


def close(got: NvArray, want: np.ndarray, dtype: str) -> None:
    host = got.to_host()
    assert host.shape == np.shape(want), (host.shape, np.shape(want))
    if dtype in TOL:
        rtol, atol = TOL[dtype]
        np.testing.assert_allclose(host.astype(np.float64), np.asarray(want, np.float64),
                                   rtol=rtol, atol=atol * max(1.0, np.abs(want).max(initial=0)))
    else:
        np.testing.assert_array_equal(host, np.asarray(want).astype(host.dtype))


def is_view(out: NvArray, x: NvArray) -> bool:
    return out._storage is x._storage


# --- views ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_views_every_dtype(device: str, dtype: str, rng) -> None:
    a = uniform_array(rng, (2, 3, 4), dtype)
    x = nv(a, device)
    checks = [
        (ignis.broadcast_to(x[:, :1], (5, 2, 3, 4)), np.broadcast_to(a[:, :1], (5, 2, 3, 4))),
        (ignis.expand_dims(x, axis=1), np.expand_dims(a, 1)),
        (ignis.expand_dims(x, axis=-1), np.expand_dims(a, -1)),
        (ignis.expand_dims(x, axis=(0, -1)), np.expand_dims(a, (0, -1))),
        (ignis.squeeze(x[:1, :, 1:2], axis=(0, 2)), np.squeeze(a[:1, :, 1:2], axis=(0, 2))),
        (ignis.squeeze(x[:, :1], axis=1), np.squeeze(a[:, :1], axis=1)),
        (ignis.permute_dims(x, (2, 0, 1)), np.transpose(a, (2, 0, 1))),
        (ignis.moveaxis(x, 0, -1), np.moveaxis(a, 0, -1)),
        (ignis.moveaxis(x, (0, 2), (2, 0)), np.moveaxis(a, (0, 2), (2, 0))),
        (ignis.matrix_transpose(x), np.swapaxes(a, -1, -2)),
        (ignis.flip(x), np.flip(a)),
        (ignis.flip(x, axis=1), np.flip(a, axis=1)),
        (ignis.flip(x, axis=(0, -1)), np.flip(a, axis=(0, -1))),
        (ignis.reshape(x, (4, -1)), a.reshape(4, -1)),
    ]
    for out, want in checks:
        assert_same(out, want)
        assert is_view(out, x)
    for i, u in enumerate(ignis.unstack(x, axis=1)):
        assert_same(u, a[:, i])
        assert is_view(u, x)
    b1, b2 = ignis.broadcast_arrays(x[:, :1], nv(uniform_array(rng, (4,), dtype), device))
    assert b1.shape == b2.shape == (2, 1, 4) and is_view(b1, x)


def test_flip_is_negative_strides(device: str, rng) -> None:
    a = uniform_array(rng, (3, 5), "float32")
    x = nv(a, device)
    f = ignis.flip(x, axis=1)
    assert f.strides == (20, -4)
    assert_same(f + 1, np.flip(a, 1) + 1)  # element-wise ops read it
    assert_same(ignis.flip(f, axis=1), a)  # flipped back: the original layout
    assert_same(ignis.flip(nv(np.zeros((0, 2)), device)), np.zeros((0, 2)))
    assert_same(ignis.flip(nv(np.float32(3.0), device)), np.float32(3.0))


def test_reshape_copy_keyword(device: str, rng) -> None:
    a = uniform_array(rng, (3, 4), "int32")
    x = nv(a, device)
    assert is_view(ignis.reshape(x, (12,)), x)
    assert is_view(ignis.reshape(x, (2, 6), copy=False), x)
    c = ignis.reshape(x, (2, 6), copy=True)
    assert_same(c, a.reshape(2, 6))
    assert not is_view(c, x)
    t = x.T
    assert_same(ignis.reshape(t, (12,)), a.T.reshape(12))  # a copy where no view exists
    with pytest.raises(ValueError, match="copy=False"):
        ignis.reshape(t, (12,), copy=False)
    with pytest.raises(ValueError, match="cannot reshape"):
        ignis.reshape(x, (5, -1))


def test_view_errors(device: str) -> None:
    x = ignis.zeros((2, 3), device=device)
    with pytest.raises(IndexError, match="expand_dims: axis 3 is out of range"):
        ignis.expand_dims(x, axis=3)
    with pytest.raises(IndexError, match="expand_dims: axis -4"):
        ignis.expand_dims(x, axis=-4)
    with pytest.raises(ValueError, match="repeated axis"):
        ignis.expand_dims(x, axis=(0, 0))
    with pytest.raises(ValueError, match="squeeze: cannot remove axis 1 of size 3"):
        ignis.squeeze(x, axis=1)
    with pytest.raises(TypeError):
        ignis.squeeze(x)  # the standard makes axis required
    with pytest.raises(ValueError, match="not a permutation"):
        ignis.permute_dims(x, (0, 0))
    with pytest.raises(ValueError, match="same number of axes"):
        ignis.moveaxis(x, (0, 1), 0)
    with pytest.raises(ValueError, match="repeated axis"):
        ignis.moveaxis(x, (0, 0), (0, 1))
    with pytest.raises(ValueError, match="matrix_transpose: needs at least 2"):
        ignis.matrix_transpose(ignis.zeros(3, device=device))
    with pytest.raises(ValueError, match="cannot broadcast"):
        ignis.broadcast_to(x, (3, 3))
    with pytest.raises(ValueError, match="cannot be broadcast together"):
        ignis.broadcast_arrays(x, ignis.zeros(4, device=device))
    with pytest.raises(ValueError, match="unstack: axis 2 is out of range"):
        ignis.unstack(x, axis=2)
    with pytest.raises(TypeError, match="expected an NvArray"):
        ignis.flip(np.zeros(3))


# --- copies: concat, stack, roll, tile, repeat --------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_copies_every_dtype(device: str, dtype: str, rng) -> None:
    a = uniform_array(rng, (3, 4), dtype)
    b = uniform_array(rng, (3, 2), dtype)
    x, y = nv(a, device), nv(b, device)
    assert_same(ignis.concat([x, y], axis=1), np.concatenate([a, b], axis=1))
    assert_same(ignis.concat((x, y), axis=None), np.concatenate([a, b], axis=None))
    assert_same(ignis.stack((x, x), axis=-1), np.stack([a, a], axis=-1))
    assert_same(ignis.roll(x, 1), np.roll(a, 1))
    assert_same(ignis.roll(x, (1, -5), axis=(0, 1)), np.roll(a, (1, -5), axis=(0, 1)))
    assert_same(ignis.tile(x, (2, 1, 3)), np.tile(a, (2, 1, 3)))
    assert_same(ignis.repeat(x, 2, axis=1), np.repeat(a, 2, axis=1))
    counts = np.array([2, 0, 3])
    assert_same(ignis.repeat(x, nv(counts, device), axis=0), np.repeat(a, counts, axis=0))
    for out in (ignis.roll(x, 0), ignis.tile(x, (1, 1)), ignis.repeat(x, 1, axis=0)):
        assert not is_view(out, x)  # always new arrays


def test_concat_promotes_and_matches_concatenate(device: str, rng) -> None:
    a, b = uniform_array(rng, (2, 3), "int8"), uniform_array(rng, (2, 3), "float32")
    x, y = nv(a, device), nv(b, device)
    assert_same(ignis.concat([x, y], axis=-1), np.concatenate([a, b], axis=-1))
    assert_same(ignis.concat([x, y]), ignis.concatenate([x, y]).to_host())
    z = nv(np.float32(2.0), device)
    assert_same(ignis.concat([z, z], axis=None), np.array([2.0, 2.0], np.float32))
    with pytest.raises(ValueError, match="concatenate: sizes must match"):
        ignis.concat([x, y.T], axis=0)
    with pytest.raises(TypeError, match="tuple or list"):
        ignis.concat(x)


@pytest.mark.parametrize(
    "shift, axis",
    [(3, None), (-7, None), (2, 0), ((1, 2), (0, 2)), (1, (0, 0)), ((4, -1, 2), (1, 2, 1)),
     (0, 1), (13, -1)],
)
def test_roll(device: str, shift, axis, rng) -> None:
    a = uniform_array(rng, (3, 4, 5), "float32")
    x = nv(a, device)
    assert_same(ignis.roll(x, shift, axis=axis), np.roll(a, shift, axis=axis))
    assert_same(ignis.roll(x.T, shift, axis=axis), np.roll(a.T, shift, axis=axis))


def test_roll_edge_cases_and_errors(device: str) -> None:
    assert_same(ignis.roll(nv(np.zeros((0, 3)), device), 2, axis=1), np.zeros((0, 3)))
    assert_same(ignis.roll(nv(np.float64(1.5), device), 3), np.roll(np.float64(1.5), 3))
    x = ignis.zeros((2, 3), device=device)
    with pytest.raises(ValueError, match="same number of entries"):
        ignis.roll(x, (1, 2), axis=0)
    with pytest.raises(ValueError, match="tuple axis"):
        ignis.roll(x, (1, 2))
    with pytest.raises(TypeError, match="shift must be an int"):
        ignis.roll(x, 1.5)


@pytest.mark.parametrize("reps", [(2,), (1, 3), (2, 1, 2), (0, 2), (3, 1, 1, 1), ()])
def test_tile(device: str, reps, rng) -> None:
    a = uniform_array(rng, (2, 3), "int64")
    assert_same(ignis.tile(nv(a, device), reps), np.tile(a, reps))
    assert_same(ignis.tile(nv(a[0, 0], device), reps), np.tile(a[0, 0], reps))
    with pytest.raises(ValueError, match="repetitions must be >= 0"):
        ignis.tile(nv(a, device), (2, -1))


def test_repeat(device: str, rng) -> None:
    a = uniform_array(rng, (3, 4), "float32")
    x = nv(a, device)
    assert_same(ignis.repeat(x, 3), np.repeat(a, 3))
    assert_same(ignis.repeat(x, 0, axis=1), np.repeat(a, 0, axis=1))
    counts = rng.integers(0, 4, 12)
    assert_same(ignis.repeat(x, nv(counts, device)), np.repeat(a, counts))
    assert_same(ignis.repeat(x, nv(counts[:4].astype(np.int32), device), axis=-1),
                np.repeat(a, counts[:4], axis=-1))
    assert_same(ignis.repeat(x, nv(np.array([2], np.uint8), device), axis=0),
                np.repeat(a, 2, axis=0))
    assert_same(ignis.repeat(x, [1, 0, 2], axis=0), np.repeat(a, [1, 0, 2], axis=0))
    assert_same(ignis.repeat(x, nv(np.zeros(3, np.int64), device), axis=0),
                np.zeros((0, 4), a.dtype))
    assert_same(x.repeat(2, axis=0), np.repeat(a, 2, axis=0))  # the NvArray method
    # a long run of one element and many short ones: every output finds its source
    counts = np.ones(5000, np.int64)
    counts[17] = 9000
    big = uniform_array(rng, (5000,), "int32")
    assert_same(ignis.repeat(nv(big, device), nv(counts, device)), np.repeat(big, counts))


def test_repeat_waits_for_the_device_once(device: str, rng, monkeypatch) -> None:
    x = nv(uniform_array(rng, (6,), "float32"), device)
    counts = nv(np.array([1, 2, 0, 1, 3, 1]), device)
    reads = []
    real = NvArray.to_host
    monkeypatch.setattr(NvArray, "to_host", lambda self: reads.append(1) or real(self))
    monkeypatch.setattr(NvArray, "item", None)
    out = ignis.repeat(x, counts)
    assert len(reads) == 1 and out.shape == (8,)


def test_repeat_errors(device: str) -> None:
    x = ignis.zeros((2, 3), device=device)
    with pytest.raises(ValueError, match="repeats must be >= 0, got -1"):
        ignis.repeat(x, -1)
    with pytest.raises(ValueError, match="got a count of -2"):
        ignis.repeat(x, nv(np.array([1, -2]), device), axis=0)
    with pytest.raises(ignis.DTypeError, match="integer dtype, got float32"):
        ignis.repeat(x, ignis.ones(2, device=device), axis=0)
    with pytest.raises(ValueError, match=r"does not broadcast to \(3,\)"):
        ignis.repeat(x, nv(np.array([1, 2]), device), axis=1)
    with pytest.raises(TypeError, match="repeats must be an int"):
        ignis.repeat(x, 1.5)
    with pytest.raises(ValueError, match="axis 2 is out of range"):
        ignis.repeat(x, 2, axis=2)


# --- creation ------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(0, None), (1, None), (3, None), (3, 5), (5, 2), (4, 0)])
def test_eye(device: str, shape) -> None:
    rows, cols = shape
    width = rows if cols is None else cols
    for k in range(-rows - 1, width + 2):
        out = ignis.eye(rows, cols, k=k, device=device)
        assert out.dtype == ignis.zeros(1).dtype  # the default floating dtype
        assert_same(out, np.eye(rows, cols, k=k, dtype=out.dtype.numpy))


@pytest.mark.parametrize("dtype", DTYPES)
def test_eye_dtypes(device: str, dtype: str) -> None:
    want = np.eye(3, 4, k=-1, dtype=np_dtype(dtype))
    assert_same(ignis.eye(3, 4, k=-1, dtype=dtype, device=device), want)


def test_eye_errors() -> None:
    with pytest.raises(ValueError, match="n_rows and n_cols must be >= 0"):
        ignis.eye(-1)
    with pytest.raises(TypeError, match="n_rows must be an int"):
        ignis.eye(2.0)


@pytest.mark.parametrize("dtype", [None, *FLOATS, "int32"])
@pytest.mark.parametrize("endpoint", [True, False])
def test_linspace(device: str, dtype, endpoint: bool) -> None:
    for start, stop, num in [(0, 1, 5), (-3.5, 7.25, 33), (2, 2, 4), (5, -1, 1), (0, 1, 0),
                             (1e3, -1e3, 257)]:
        out = ignis.linspace(start, stop, num, dtype=dtype, device=device, endpoint=endpoint)
        want_dtype = ignis.zeros(1).dtype.name if dtype is None else dtype
        assert out.dtype == want_dtype
        want = np.linspace(start, stop, num, endpoint=endpoint)
        if dtype == "int32":
            assert_same(out, want.astype(np.int32))
            continue
        close(out, want, want_dtype)
        if endpoint and num > 1:
            assert out.to_host()[-1].astype(np.float64) == np.asarray(stop, np_dtype(want_dtype))


def test_linspace_errors() -> None:
    with pytest.raises(ValueError, match="num must be >= 0"):
        ignis.linspace(0, 1, -1)
    with pytest.raises(ignis.DTypeError, match="linspace: complex start or stop needs a complex"):
        ignis.linspace(0j, 1, 3, dtype="float32")
    with pytest.raises(TypeError, match="start must be an int or a float"):
        ignis.linspace("0", 1, 3)
    with pytest.raises(ignis.DTypeError, match="numeric"):
        ignis.linspace(0, 1, 3, dtype="bool")


@pytest.mark.parametrize("indexing", ["xy", "ij"])
@pytest.mark.parametrize("dtype", ["bool", "int16", "float32", "bfloat16"])
def test_meshgrid(device: str, indexing: str, dtype: str, rng) -> None:
    for lengths in [(), (3,), (3, 4), (2, 0), (2, 3, 4)]:
        arrays = [uniform_array(rng, (n,), dtype) for n in lengths]
        got = ignis.meshgrid(*(nv(a, device) for a in arrays), indexing=indexing)
        want = np.meshgrid(*arrays, indexing=indexing)
        assert isinstance(got, list) and len(got) == len(want)
        for g, w, a in zip(got, want, arrays, strict=True):
            assert_same(g, w)
            assert g.is_contiguous and g.dtype == a.dtype


def test_meshgrid_errors(device: str) -> None:
    with pytest.raises(ValueError, match="indexing must be 'xy' or 'ij'"):
        ignis.meshgrid(ignis.zeros(2, device=device), indexing="yx")
    with pytest.raises(ValueError, match="array 1 must be 1-D"):
        ignis.meshgrid(ignis.zeros(2, device=device), ignis.zeros((2, 2), device=device))


@pytest.mark.parametrize("dtype", DTYPES)
def test_tril_triu(device: str, dtype: str, rng) -> None:
    for shape in [(4, 4), (3, 5), (2, 5, 3), (0, 3)]:
        a = uniform_array(rng, shape, dtype)
        x = nv(a, device)
        for k in (-6, -1, 0, 2, 7):
            assert_same(ignis.tril(x, k=k), np.tril(a, k=k))
            assert_same(ignis.triu(x, k=k), np.triu(a, k=k))
    with pytest.raises(ValueError, match="tril: needs at least 2 dimensions"):
        ignis.tril(ignis.zeros(3, device=device))
    with pytest.raises(TypeError, match="k must be an int"):
        ignis.triu(ignis.zeros((2, 2), device=device), k=0.5)


# --- take_along_axis, diff -----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_take_along_axis(device: str, dtype: str, rng) -> None:
    a = uniform_array(rng, (3, 4, 5), dtype)
    x = nv(a, device)
    for axis in (0, 1, -1):
        n = a.shape[axis]
        shape = list(a.shape)
        shape[axis] = 6
        idx = rng.integers(-n, n, size=shape)
        assert_same(ignis.take_along_axis(x, nv(idx, device), axis=axis),
                    np.take_along_axis(a, idx, axis=axis))
    # the other axes broadcast
    idx = rng.integers(0, 5, size=(1, 4, 2)).astype(np.int32)
    assert_same(ignis.take_along_axis(x, nv(idx, device), axis=2),
                np.take_along_axis(a, np.broadcast_to(idx, (3, 4, 2)), axis=2))


def test_take_along_axis_sorts_and_errors(device: str, rng) -> None:
    a = uniform_array(rng, (4, 7), "float64")
    x = nv(a, device)
    order = np.argsort(a, axis=1)
    assert_same(ignis.take_along_axis(x, nv(order, device), axis=1), np.sort(a, axis=1))
    assert_same(ignis.take_along_axis(x, nv(np.zeros((4, 0), np.int64), device), axis=1),
                np.zeros((4, 0)))
    empty = ignis.take_along_axis(nv(np.zeros((3, 0)), device), nv(np.zeros((3, 2), int), device))
    assert np.isnan(empty.to_host()).all()  # out of range: NaN, as take
    with pytest.raises(ValueError, match="same number of dimensions"):
        ignis.take_along_axis(x, nv(np.zeros(3, np.int64), device))
    with pytest.raises(ignis.DTypeError, match="integer dtype"):
        ignis.take_along_axis(x, ignis.zeros((4, 1), device=device))
    with pytest.raises(ValueError, match="cannot be broadcast"):
        ignis.take_along_axis(x, nv(np.zeros((3, 1), np.int64), device), axis=1)


@pytest.mark.parametrize("dtype", DTYPES)
def test_diff(device: str, dtype: str, rng) -> None:
    a = uniform_array(rng, (4, 6), dtype)
    x = nv(a, device)
    for axis in (0, -1):
        for n in (0, 1, 2, 5, 7):
            assert_same(ignis.diff(x, axis=axis, n=n), np.diff(a, axis=axis, n=n))
    p, q = uniform_array(rng, (4, 2), dtype), uniform_array(rng, (4, 1), dtype)
    assert_same(ignis.diff(x, prepend=nv(p, device), append=nv(q, device)),
                np.diff(a, prepend=p, append=q))
    assert not is_view(ignis.diff(x, n=0), x)


def test_diff_errors(device: str) -> None:
    x = ignis.zeros((2, 3), device=device)
    with pytest.raises(ValueError, match="n must be >= 0"):
        ignis.diff(x, n=-1)
    with pytest.raises(ValueError, match="needs at least 1 dimension"):
        ignis.diff(ignis.zeros((), device=device))
    with pytest.raises(ValueError, match="sizes must match except along axis"):
        ignis.diff(x, axis=1, prepend=ignis.zeros((3, 1), device=device))


# --- products: tensordot, vecdot -----------------------------------------------------------------


@pytest.mark.parametrize("dtype", NUMERIC + ["bool"])
def test_tensordot(device: str, dtype: str, rng) -> None:
    a, b = uniform_array(rng, (3, 4, 5), dtype), uniform_array(rng, (4, 5, 2), dtype)
    x, y = nv(a, device), nv(b, device)
    cases = [(2, a, b), (1, a, uniform_array(rng, (5, 3), dtype)), (0, a[0], b[0]),
             (([1, 0], [0, 1]), a, uniform_array(rng, (4, 3, 2), dtype)), (([-1], [1]), a, b)]
    for axes, p, q in cases:
        want = np.tensordot(p.astype(np.float64) if dtype in TOL else p,
                            q.astype(np.float64) if dtype in TOL else q, axes=axes)
        got = ignis.tensordot(nv(p, device), nv(q, device), axes=axes)
        assert got.dtype == dtype
        close(got, want.astype(np_dtype(dtype)) if dtype not in TOL else want, dtype)
    assert ignis.tensordot(x, y).shape == (3, 2)


def test_tensordot_promotes_and_errors(device: str, rng) -> None:
    a, b = uniform_array(rng, (2, 3), "int8"), uniform_array(rng, (3, 2), "float32")
    got = ignis.tensordot(nv(a, device), nv(b, device), axes=1)
    assert got.dtype == "float32"
    close(got, np.tensordot(a.astype(np.float64), b.astype(np.float64), axes=1), "float32")
    x = ignis.zeros((2, 3), device=device)
    with pytest.raises(ValueError, match="are contracted but differ"):
        ignis.tensordot(x, x, axes=1)
    with pytest.raises(ValueError, match=r"axes=3 must be in \[0, 2\]"):
        ignis.tensordot(x, x, axes=3)
    with pytest.raises(ValueError, match="differ in length"):
        ignis.tensordot(x, x, axes=([0], [0, 1]))
    with pytest.raises(ValueError, match="repeated axis"):
        ignis.tensordot(x, x.T, axes=([0, 0], [1, 1]))


@pytest.mark.parametrize("dtype", NUMERIC)
def test_vecdot(device: str, dtype: str, rng) -> None:
    for s1, s2, axis in [((4,), (4,), -1), ((3, 4), (4,), -1), ((2, 1, 5), (3, 5), -1),
                         ((4, 3), (2, 4, 3), -2), ((5, 0), (5, 0), -1)]:
        a, b = uniform_array(rng, s1, dtype), uniform_array(rng, s2, dtype)
        got = ignis.vecdot(nv(a, device), nv(b, device), axis=axis)
        wide = np.float64 if dtype in TOL else np.int64
        want = np.sum(np.moveaxis(a.astype(wide), axis, -1)[..., None, :]
                      * np.moveaxis(b.astype(wide), axis, -1)[..., None, :], axis=-1)[..., 0]
        assert got.dtype == dtype and got.shape == want.shape
        close(got, want if dtype in TOL else want.astype(np_dtype(dtype)), dtype)


def test_vecdot_errors(device: str) -> None:
    x = ignis.zeros((2, 3), device=device)
    with pytest.raises(ValueError, match="vectors differ in length"):
        ignis.vecdot(x, ignis.zeros(4, device=device))
    with pytest.raises(ValueError, match="axis -3 is out of range"):
        ignis.vecdot(x, x, axis=-3)
    with pytest.raises(ValueError, match="cannot be broadcast"):
        ignis.vecdot(x, ignis.zeros((3, 3), device=device), axis=-1)


def test_public_names() -> None:
    from ignis._array import _manipulation

    for name in _manipulation.__all__:
        assert getattr(ignis, name) is getattr(_manipulation, name)
