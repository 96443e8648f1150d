"""The Array API standard's indexing on NvArray (NumPy's rules, of which the standard's are a
subset): several integer arrays broadcast together and placed as NumPy places them, boolean
masks (n-d, 0-d, Python bools), None and Ellipsis among them, and ``__setitem__`` through all
of these with scalars and broadcast arrays. Against NumPy on random data, every dtype, each
device; the CUDA launches also on the stand-in GPU of tests/ignis/runtime."""

from __future__ import annotations

import numpy as np
import pytest
from array_helpers import arg_i64, arg_ptr, assert_same, nv, stand_in_gpu, uniform_array
from ignis._array import _indexing
from ignis._array._cuda_backend import indexing as cuda_indexing
from ignis._array.array import NvArray

import ignis
from ignis import CompileOptions, _sources

DTYPES = [d.name for d in ignis._dtypes.all_dtypes]


def device_key(key, device: str):
    """A NumPy key with its arrays moved to ``device``."""
    items = key if isinstance(key, tuple) else (key,)
    out = tuple(nv(k, device) if isinstance(k, np.ndarray) else k for k in items)
    return out if isinstance(key, tuple) else out[0]


IDX = np.array([0, 3, -1, 2])
JDX = np.array([[1], [-2], [0]])  # broadcasts with IDX to (3, 4)
Z = np.array(2)  # a 0-d index array

# Keys of a (4, 5, 6) array, with NumPy's placement: index axes in place when the advanced
# items (ints among them) are next to each other, first otherwise.
INT_KEYS = [
    (IDX,),
    (slice(None), IDX),
    (Ellipsis, IDX),
    (IDX, JDX),
    (slice(1, 3), IDX, JDX),
    (IDX, slice(None), JDX),  # apart: broadcast axes first
    (0, slice(None), IDX),  # an int counts as an advanced item: apart
    (slice(None), 0, IDX),  # together
    (IDX, 1),
    (None, IDX, None, JDX),
    (IDX, None, JDX),  # None splits them
    (IDX, Ellipsis, JDX),
    (Z, IDX),
    (Z, slice(None), Z),
    (np.array([[0, 1], [2, 3]]), slice(None, None, -2), np.array([5, -6])),
    (np.array([], dtype=np.int64),),
    (slice(None), np.array([], dtype=np.int64), 0),
]

MASK_KEYS = [
    "m3",  # the whole shape
    "m2",  # the first two axes
    (slice(None), "m1"),
    (Ellipsis, "m1"),
    ("m0", slice(1, 4)),
    ("m2", IDX[:1]),  # a mask with an integer array
    (True,),
    (False,),
    (slice(None), True),
    (0, True),
    (Ellipsis, False),
    (IDX, True),
]


def mask_key(key, rng: np.random.Generator, shape=(4, 5, 6)):
    masks = {
        "m3": rng.random(shape) < 0.4,
        "m2": rng.random(shape[:2]) < 0.5,
        "m1": rng.random(shape[1:]) < 0.5,
        "m0": rng.random(shape[:1]) < 0.5,
    }
    items = key if isinstance(key, tuple) else (key,)
    out = tuple(masks[k] if isinstance(k, str) else k for k in items)
    return out if isinstance(key, tuple) else out[0]


# --- __getitem__ ---------------------------------------------------------------------------------


@pytest.mark.parametrize("key", INT_KEYS, ids=range(len(INT_KEYS)))
def test_getitem_integer_arrays(device: str, key, rng) -> None:
    a = uniform_array(rng, (4, 5, 6), "float32")
    x = nv(a, device)
    out = x[device_key(key, device)]
    assert_same(out, a[key])
    if any(isinstance(k, np.ndarray) and k.ndim for k in key):
        assert out._storage is not x._storage  # a copy (0-d arrays alone index like ints)


@pytest.mark.parametrize("dtype", DTYPES)
def test_getitem_every_dtype(device: str, dtype: str, rng) -> None:
    a = uniform_array(rng, (4, 5, 6), dtype)
    x = nv(a, device)
    for key in [(IDX, slice(None), JDX), (slice(None), IDX), mask_key("m2", rng)]:
        assert_same(x[device_key(key, device)], a[key])


@pytest.mark.parametrize("index_dtype", ["int8", "uint8", "int16", "int32", "int64", "uint64"])
def test_getitem_index_dtypes(device: str, index_dtype: str, rng) -> None:
    a = uniform_array(rng, (4, 5), "float64")
    x = nv(a, device)
    i = np.array([3, 0, 1]).astype(index_dtype)
    j = np.array([4, 4, 2]).astype(index_dtype)
    assert_same(x[nv(i, device), nv(j, device)], a[i, j])
    assert_same(x[:, nv(j, device)], a[:, j])


def test_getitem_lists_and_non_contiguous(device: str, rng) -> None:
    a = uniform_array(rng, (6, 5, 4), "int32")
    x = nv(a, device)
    assert_same(x[[0, 2], [1, 1]], a[[0, 2], [1, 1]])
    assert_same(x[:, [True, False, True, True, False]], a[:, [True, False, True, True, False]])
    t = x.transpose(2, 0, 1)[::2]  # a strided view
    at = a.transpose(2, 0, 1)[::2]
    i, j = np.array([1, 0, -1]), np.array([[4], [0]])
    assert_same(t[nv(i, device), :, nv(j, device)], at[i, :, j])
    assert_same(t[nv(at > 0, device)], at[at > 0])


@pytest.mark.parametrize("key", MASK_KEYS, ids=range(len(MASK_KEYS)))
def test_getitem_boolean_masks(device: str, key, rng) -> None:
    a = uniform_array(rng, (4, 5, 6), "float32")
    x = nv(a, device)
    k = mask_key(key, rng)
    assert_same(x[device_key(k, device)], a[k])


def test_getitem_mask_edge_cases(device: str, rng) -> None:
    a = uniform_array(rng, (3, 4), "int64")
    x = nv(a, device)
    none = np.zeros((3, 4), bool)
    assert_same(x[nv(none, device)], a[none])
    every = np.ones((3, 4), bool)
    assert_same(x[nv(every, device)], a[every])
    assert_same(x[nv(np.array(True), device)], a[np.array(True)])
    assert_same(x[nv(np.array(False), device)], a[np.array(False)])
    # the standard lets a mask axis of size 0 stand for any axis: nothing is selected
    assert x[nv(np.zeros((0, 4), bool), device)].shape == (0,)
    e = nv(np.zeros((0, 3)), device)
    assert e[nv(np.zeros((0, 3), bool), device)].shape == (0,)
    assert_same(x[np.True_], a[np.True_])


def test_getitem_mask_waits_for_the_device_once(device: str, rng, monkeypatch) -> None:
    a = uniform_array(rng, (50, 7), "float32")
    x = nv(a, device)
    mask = nv(a[:, 0] > 0, device)
    calls = []
    real = NvArray.item
    monkeypatch.setattr(NvArray, "item", lambda self: calls.append(1) or real(self))
    assert_same(x[mask], a[a[:, 0] > 0])
    assert len(calls) == 1


def test_getitem_fast_paths_are_kept(device: str, rng, monkeypatch) -> None:
    # x[idx] and x[idx, basic...] stay one take (the embedding lookups' path)
    a = uniform_array(rng, (6, 5), "float32")
    x = nv(a, device)
    monkeypatch.setattr(_indexing, "_select", None)  # the general path must not run
    assert_same(x[nv(IDX, device)], a[IDX])
    assert_same(x[nv(IDX, device), 1:3], a[IDX, 1:3])
    assert_same(x[[1, 2], None, ::-1], a[[1, 2], None, ::-1])
    assert_same(x[0], a[0])  # basic indexing: a view
    assert x[1:, None]._storage is x._storage


def test_getitem_errors(device: str) -> None:
    x = ignis.zeros((4, 3), device=device)
    with pytest.raises(IndexError, match="integer or bool dtype, got float32"):
        x[ignis.zeros(2, device=device), 0]
    with pytest.raises(IndexError, match=r"boolean index of shape \(4, 2\) does not match"):
        x[ignis.zeros((4, 2), dtype="bool", device=device)]
    with pytest.raises(IndexError, match="cannot be broadcast together"):
        x[[0, 1], [0, 1, 2]]
    with pytest.raises(IndexError, match="too many indices"):
        x[[0], 0, 0]
    with pytest.raises(IndexError, match="single ellipsis"):
        x[..., [0], ...]
    with pytest.raises(IndexError, match="must hold ints or bools"):
        x[[0.5, 1.0], 0]
    with pytest.raises(IndexError, match="out of bounds"):
        x[[0, 1], 7]


# --- __setitem__ ---------------------------------------------------------------------------------


def check_setitem(device: str, a: np.ndarray, key, values: list) -> None:
    """``x[key] = value`` on ``device`` for each value (an array or a scalar), each into a fresh
    copy of ``a``, against NumPy's ``a[key] = value``."""
    for value in values:
        want = a.copy()
        want[key] = value
        x = nv(a, device)
        x[device_key(key, device)] = nv(value, device) if isinstance(value, np.ndarray) else value
        assert_same(x, want)


@pytest.mark.parametrize("key", INT_KEYS, ids=range(len(INT_KEYS)))
def test_setitem_integer_arrays(device: str, key, rng) -> None:
    a = uniform_array(rng, (4, 5, 6), "float64")
    # unique targets (repeated ones land in an unspecified order)
    key = tuple(np.array([0, 3, 2]) if k is IDX else np.array([[1], [4]]) if k is JDX else k
                for k in key)
    shape = a[key].shape
    values = [uniform_array(rng, shape, "float64"), uniform_array(rng, shape[-1:], "float64"), 2.5]
    check_setitem(device, a, key, values)


@pytest.mark.parametrize("key", MASK_KEYS, ids=range(len(MASK_KEYS)))
def test_setitem_boolean_masks(device: str, key, rng) -> None:
    a = uniform_array(rng, (4, 5, 6), "float32")
    if isinstance(key, tuple):  # unique targets (IDX repeats a row: which write lands is open)
        key = tuple(np.array([0, 3, 2]) if k is IDX else k for k in key)
    k = mask_key(key, rng)
    shape = a[k].shape
    values = [-7.0, uniform_array(rng, shape, "float32"), uniform_array(rng, shape[1:], "float32")]
    if len(shape) > 1:
        values.append(uniform_array(rng, (1,) + shape[1:], "float32"))
    check_setitem(device, a, k, values)


@pytest.mark.parametrize("dtype", DTYPES)
def test_setitem_every_dtype(device: str, dtype: str, rng) -> None:
    a = uniform_array(rng, (4, 5, 6), dtype)
    fill = uniform_array(rng, (), dtype).item()
    for key in [(np.array([0, 2]), slice(None), np.array([1, 5])), mask_key("m2", rng)]:
        want = a.copy()
        value = uniform_array(rng, a[key].shape, dtype)
        want[key] = value
        x = nv(a, device)
        x[device_key(key, device)] = nv(value, device)
        assert_same(x, want)
        want[key] = fill
        x[device_key(key, device)] = fill
        assert_same(x, want)


def test_setitem_mask_with_a_scalar_does_not_wait(device: str, rng, monkeypatch) -> None:
    a = uniform_array(rng, (30, 4), "float32")
    x = nv(a, device)
    mask = nv(a > 0, device)
    row_mask = nv(a[:, 0] > 0, device)
    monkeypatch.setattr(NvArray, "item", None)  # any host read would fail
    x[mask] = 0.0
    x[row_mask] = nv(np.arange(4.0, dtype=np.float32), device)  # one row for all of them
    want = a.copy()
    want[a > 0] = 0.0
    want[a[:, 0] > 0] = np.arange(4.0)
    assert_same(x, want)


def test_setitem_into_views_and_conversions(device: str, rng) -> None:
    a = uniform_array(rng, (6, 4), "float32")
    x = nv(a, device)
    view = x.T[::2]  # (2, 6), strided: written through a contiguous copy
    want = a.copy()
    want.T[::2][[0, 1], [5, 0]] = [1.0, 2.0]
    view[[0, 1], [5, 0]] = nv(np.array([1, 2], dtype=np.int64), device)  # converted
    assert_same(x, want)
    # a value that is a view of the array written
    want[[1, 3]] = want[0]
    x[[1, 3]] = x[0]
    assert_same(x, want)
    want[want[:, 0] > 1] = want[0][::-1]
    x[x[:, 0] > 1] = x[0][::-1]
    assert_same(x, want)
    rows = want[:, 0] > 0
    want[rows] = want[rows][::-1]  # one value per row: the general path, from a copy
    x[x[:, 0] > 0] = x[x[:, 0] > 0][::-1]
    assert_same(x, want)
    # host data as the value
    want[[0, 5], 1:3] = [[9.0, 8.0]]
    x[[0, 5], 1:3] = [[9.0, 8.0]]
    assert_same(x, want)


def test_setitem_repeated_indices_land_one_value(device: str) -> None:
    x = ignis.zeros(3, dtype="int32", device=device)
    x[[1, 1, 1]] = nv(np.array([4, 5, 6], dtype=np.int32), device)
    got = x.to_host()
    assert got[0] == got[2] == 0 and got[1] in (4, 5, 6)


def test_setitem_errors(device: str) -> None:
    x = ignis.zeros((4, 3), dtype="int32", device=device)
    with pytest.raises(ignis.ShapeError, match="cannot assign an array of shape"):
        x[[0, 1]] = ignis.zeros((3, 3), dtype="int32", device=device)
    with pytest.raises(ignis.ShapeError, match="cannot assign an array of shape"):
        x[ignis.ones((4, 3), dtype="bool", device=device)] = ignis.zeros(5, device=device)
    with pytest.raises(ignis.ShapeError):
        x[x > 0] = ignis.zeros((2, 3), device=device)
    with pytest.raises(IndexError, match="does not match"):
        x[ignis.ones(3, dtype="bool", device=device)] = 1


def test_add_at_accumulates_repeats(device: str, rng) -> None:
    a = uniform_array(rng, (5, 4), "float64")
    src = uniform_array(rng, (5, 3), "float64")
    want = a.copy()
    np.add.at(want, (slice(None), [1, 1, 3]), src)
    x = nv(a, device)
    _indexing.add_at(x, (slice(None), [1, 1, 3]), nv(src, device))
    np.testing.assert_allclose(x.to_host(), want, rtol=1e-12)


def test_flat_nonzero(device: str, rng) -> None:
    for shape in [(0,), (7,), (33, 130), (3, 0, 2)]:
        m = rng.random(shape) < 0.3
        assert_same(_indexing.flat_nonzero(nv(m, device)), np.flatnonzero(m))


def test_take_axis_none_and_index_dtypes(device: str, rng) -> None:
    a = uniform_array(rng, (3, 4), "float32")
    x = nv(a, device)
    assert_same(ignis.take(x, nv(np.array([11, 0, -1]), device), axis=None),
                np.take(a, [11, 0, -1]))
    assert_same(ignis.take(x, nv(np.array([2, 0], np.uint8), device), axis=1),
                np.take(a, [2, 0], 1))


# --- the CUDA kernels: every new instance compiles; launches on the stand-in GPU -------------


def test_new_kernel_instances_compile_for_sm90() -> None:
    names = [
        n for n in cuda_indexing.kernel_names()["indexing.cu"]
        if "put_rows" in n or "scan" in n or "repeat_search" in n
    ]
    assert len(names) > 30
    obj = ignis.compile(
        _sources.read_source("indexing.cu"), CompileOptions(arch="sm_90"), name_expressions=names
    )
    assert obj.log == "" and sorted(obj.lowered_names) == sorted(names)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch):
    yield from stand_in_gpu(monkeypatch, cuda_indexing)


def test_fake_gpu_put_launch(fake) -> None:
    x = ignis.empty((6, 10), dtype="float32", device="cuda:0")
    idx = ignis.empty((3,), dtype="int64", device="cuda:0")
    x[idx] = ignis.empty((3, 10), dtype="float32", device="cuda:0")
    ((name, grid, block, _, args),) = [v for v in fake.launches if "put_rows" in v[0]]
    assert name == "ignis::idx::put_rows<4, ignis::int64, 2>"  # 10 floats: 8-byte moves
    assert block == (8, 32, 1) and grid == (1, 1, 1)
    assert arg_ptr(args[0]) == x.data_ptr and arg_ptr(args[1]) == idx.data_ptr
    assert [arg_i64(v) for v in args[3:]] == [3, 3, 6, 5]
    fake.launches.clear()
    # bool data, int32 indices along axis 1: rows of (outer=6, m=2, inner=1)
    b = ignis.empty((6, 9), dtype="bool", device="cuda:0")
    b[:, ignis.empty((2,), dtype="int32", device="cuda:0")] = True
    ((name, _, block, _, args),) = [v for v in fake.launches if "put_rows" in v[0]]
    assert name == "ignis::idx::put_rows<1, ignis::int32, 1>" and block == (1, 256, 1)
    assert [arg_i64(v) for v in args[3:]] == [12, 2, 9, 1]


def test_fake_gpu_scans(fake) -> None:
    backend = ignis._array.get_backend("cuda:0")
    n = 10_000
    mask = ignis.empty((n,), dtype="bool", device="cuda:0")
    out = ignis.empty((17,), dtype="int64", device="cuda:0")
    backend.kernels.nonzero_flat(out, mask)
    (first, totals, write) = [v for v in fake.launches if "ignis::idx::scan" in v[0]]
    assert first[0] == "ignis::idx::scan_block_totals<bool, true>"
    assert write[0] == "ignis::idx::scan_write<bool, true>"
    # 3 chunks of at least 4096 elements, balanced and rounded up to the block size
    assert first[1] == write[1] == (3, 1, 1) and first[2] == (256, 1, 1)
    assert [arg_i64(v) for v in first[4][1:3]] == [n, 3584]
    assert totals[0] == "ignis::idx::scan_totals" and totals[1] == (1, 1, 1)
    assert arg_i64(totals[4][1]) == 3 and arg_ptr(write[4][4]) == out.data_ptr
    fake.launches.clear()
    repeats = ignis.empty((5,), dtype="int64", device="cuda:0")
    index = ignis.empty((40,), dtype="int64", device="cuda:0")
    backend.kernels.repeat_index(index, repeats)
    names = [v[0] for v in fake.launches]
    assert names == [
        "ignis::idx::scan_block_totals<ignis::int64, false>",
        "ignis::idx::scan_totals",
        "ignis::idx::scan_write<ignis::int64, false>",
        "ignis::idx::repeat_search",
    ]
    search = fake.launches[-1]
    assert [arg_i64(v) for v in search[4][1:3]] == [5, 40]
    assert arg_ptr(search[4][3]) == index.data_ptr


def test_fake_gpu_scan_chunks_grow_past_the_grid_cap(fake) -> None:
    backend = ignis._array.get_backend("cuda:0")
    blocks, chunk = cuda_indexing._scan_layout(backend, 10**9)
    cap = cuda_indexing._caps(backend, ignis.tuning().indexing)[0]
    assert blocks <= cap and chunk % 256 == 0 and blocks * chunk >= 10**9
    assert cuda_indexing._scan_layout(backend, 1) == (1, 256)


def test_fake_gpu_mask_assignment_is_one_where_launch(fake) -> None:
    x = ignis.empty((6, 5), dtype="float32", device="cuda:0")
    mask = ignis.empty((6,), dtype="bool", device="cuda:0")
    x[mask] = 1.5  # no host read (the stand-in has none to give): one where kernel in place
    (launch,) = fake.launches
    assert "where" in launch[0] and arg_ptr(launch[4][0]) == x.data_ptr
    assert not fake.calls.get("cuMemcpyDtoH") and not fake.calls.get("cuMemcpyDtoHAsync")


@pytest.mark.parametrize(
    "key",
    [
        (slice(None), [0, 0, 2]),  # a repeated column: its gradients add
        ([1, 1], [2, 2]),
        ([True, False, True, True],),
        (np.array([3, 0]), slice(1, 3)),  # the gather-along-axis-0 path
        (np.array([[0], [2]]), slice(None), np.array([1, 1])),
    ],
    ids=range(5),
)
def test_autograd_gradients_through_advanced_keys(device: str, key, rng) -> None:
    ag = pytest.importorskip("ignis_autograd")
    a = uniform_array(rng, (4, 5, 3), "float64")
    x = ag.Tensor(nv(a, device), requires_grad=True)
    y = x[device_key(key, device)]
    (y * y).sum().backward()
    want = np.zeros_like(a)
    np.add.at(want, key, 2 * a[key])
    np.testing.assert_allclose(x.grad.to_host(), want, rtol=1e-12)
