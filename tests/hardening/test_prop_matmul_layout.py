"""Property-based tests of matmul (batch broadcasting, 1-D operands, transpose flags, empty
dimensions, strided operands) and of the layout ops (reshape, transpose, concatenate, stack),
against NumPy in float64; bad shapes and dtypes raise clear errors."""

from __future__ import annotations

import numpy as np
import pytest
from hardening_strategies import (
    FLOATS,
    INTS,
    check_close,
    host_values,
    make,
    shapes,
    still_works,
)
from hypothesis import given
from hypothesis import strategies as st

import ignis

# float16/bfloat16 accumulate in float32; the bound grows with k.
MM_RTOL = {"float16": 4e-3, "bfloat16": 3e-2, "float32": 1e-5, "float64": 1e-12}


@st.composite
def matmul_case(draw):
    m, n, k = (draw(st.integers(0, 9)) for _ in range(3))
    batch = draw(st.lists(st.integers(1, 3), max_size=2))
    a_batch = [d if draw(st.booleans()) else 1 for d in batch][draw(st.integers(0, len(batch))) :]
    b_batch = [d if draw(st.booleans()) else 1 for d in batch][draw(st.integers(0, len(batch))) :]
    a_vec, b_vec = (
        draw(st.booleans()) and draw(st.booleans()),
        draw(st.booleans()) and draw(st.booleans()),
    )
    sa = (k,) if a_vec else tuple(a_batch) + (m, k)
    sb = (k,) if b_vec else tuple(b_batch) + (k, n)
    return sa, sb


@given(
    case=matmul_case(),
    da=st.sampled_from(FLOATS),
    db=st.sampled_from(FLOATS),
    ta=st.booleans(),
    tb=st.booleans(),
    strided=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_matmul_matches_numpy(device, case, da, db, ta, tb, strided, seed):
    sa, sb = case
    ha, hb = host_values(sa, da, seed), host_values(sb, db, seed + 1)
    a, b = make(ha, da, device), make(hb, db, device)
    # The transpose flags act on stored transposes, so the product is the same one.
    if ta and len(sa) >= 2:
        a = make(np.swapaxes(ha, -1, -2).copy(), da, device)
    if tb and len(sb) >= 2:
        b = make(np.swapaxes(hb, -1, -2).copy(), db, device)
    if strided and len(sb) >= 2:  # a non-contiguous operand: every other column of a wider one
        wide = np.repeat(np.swapaxes(hb, -1, -2) if tb and len(sb) >= 2 else hb, 2, axis=-1)
        b = make(wide, db, device)[..., ::2]
    out = ignis.matmul(a, b, transpose_a=ta and len(sa) >= 2, transpose_b=tb and len(sb) >= 2)
    ref = np.matmul(ha.astype(np.float64), hb.astype(np.float64))
    assert out.shape == ref.shape
    dtype = ignis.promote_types(da, db)
    assert out.dtype is dtype
    k = sa[-1]
    rtol = MM_RTOL[dtype.name]
    check_close(out, ref, rtol * max(1, k) ** 0.5, rtol * max(1, k) * 3)


@given(m=st.integers(1, 5), k=st.integers(1, 5), k2=st.integers(1, 5), n=st.integers(1, 5))
def test_matmul_misaligned_raises(device, m, k, k2, n):
    if k == k2:
        k2 = k + 1
    a = make(host_values((m, k), "float32", 1), "float32", device)
    b = make(host_values((k2, n), "float32", 2), "float32", device)
    with pytest.raises(ignis.ShapeError, match=rf"matmul: .*\({k} != {k2}\)"):
        ignis.matmul(a, b)
    with pytest.raises(ignis.ShapeError, match="matmul"):
        ignis.matmul(make(np.float32(1.0), "float32", device), b)  # 0-d operand
    still_works(device)


@given(dtype=st.sampled_from(INTS))
def test_matmul_of_integers_is_exact_like_numpys(device, dtype):
    host = host_values((2, 3), dtype, 1)
    a = make(host, dtype, device)
    got = ignis.matmul(a, a.T)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got.to_host(), host @ host.T)


def test_matmul_of_bools_is_a_dtype_error(device):
    a = make(np.ones((2, 3), bool), "bool", device)
    with pytest.raises(ignis.DTypeError, match="matmul: operands must be numeric"):
        ignis.matmul(a, a.T)


@given(
    shape=shapes,
    data=st.data(),
    dtype=st.sampled_from(("float32", "int64", "bfloat16", "bool")),
    seed=st.integers(0, 2**16),
)
def test_reshape_and_transpose_match_numpy(device, shape, data, dtype, seed):
    h = host_values(shape, dtype, seed)
    x = make(h, dtype, device)
    perm = tuple(data.draw(st.permutations(range(len(shape)))))
    t = x.transpose(perm) if shape else x.transpose()
    np.testing.assert_array_equal(t.to_host(), np.transpose(h, perm))
    # reshape to a random factorization of the size, with -1 somewhere when possible
    size = h.size
    dims = []
    rest = size
    for _ in range(data.draw(st.integers(0, 3))):
        divisors = [d for d in range(1, 7) if rest % d == 0] if rest else [0, 1, 2]
        d = data.draw(st.sampled_from(divisors))
        dims.append(d)
        rest = rest // d if d else rest
    if size == 0 and 0 not in dims:
        dims.append(0)
    elif size:
        dims.append(rest)
    target = tuple(dims) if dims else ()
    if not target and size != 1:
        target = (size,)
    if size and target and data.draw(st.booleans()):
        i = data.draw(st.integers(0, len(target) - 1))
        target = target[:i] + (-1,) + target[i + 1 :]
    r_ref = np.reshape(np.transpose(h, perm), target)
    r = t.reshape(target)  # reshaping a transposed view copies when it must
    assert r.shape == r_ref.shape
    np.testing.assert_array_equal(r.to_host(), r_ref)


@given(
    shape=st.lists(st.integers(1, 5), min_size=1, max_size=3).map(tuple), extra=st.integers(1, 4)
)
def test_bad_reshape_raises(device, shape, extra):
    x = make(host_values(shape, "float32", 0), "float32", device)
    size = int(np.prod(shape))
    with pytest.raises(ValueError, match="reshape"):
        x.reshape(size + extra)
    with pytest.raises(ValueError):
        x.reshape(-1, -1)
    with pytest.raises((ValueError, TypeError)):
        x.transpose((0,) * len(shape) + (0,))
    still_works(device)


@given(
    base=st.lists(st.integers(0, 4), min_size=1, max_size=3).map(tuple),
    data=st.data(),
    dtypes=st.lists(
        st.sampled_from(("float32", "float64", "int32", "bfloat16", "bool")), min_size=1, max_size=4
    ),
    seed=st.integers(0, 2**16),
)
def test_concatenate_and_stack_match_numpy(device, base, data, dtypes, seed):
    axis = data.draw(st.integers(-len(base), len(base) - 1))
    hosts = []
    for i, d in enumerate(dtypes):
        s = list(base)
        s[axis] = data.draw(st.integers(0, 3))
        hosts.append(host_values(tuple(s), d, seed + i))
    arrays = [make(h, d, device) for h, d in zip(hosts, dtypes, strict=True)]
    out = ignis.concatenate(arrays, axis=axis)
    ref = np.concatenate([h.astype(np.float64) for h in hosts], axis=axis)
    assert out.shape == ref.shape
    check_close(out.astype("float64"), ref, 0, 0)
    same = [make(host_values(base, d, seed + i), d, device) for i, d in enumerate(dtypes)]
    st_axis = data.draw(st.integers(-len(base) - 1, len(base)))
    stacked = ignis.stack(same, axis=st_axis)
    st_ref = np.stack([a.to_host().astype(np.float64) for a in same], axis=st_axis)
    check_close(stacked.astype("float64"), st_ref, 0, 0)


@given(
    base=st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple),
    bad=st.sampled_from(["ndim", "size", "axis", "none", "zero_d"]),
)
def test_bad_concatenate_raises(device, base, bad):
    a = make(host_values(base, "float32", 0), "float32", device)
    if bad == "ndim":
        args, kw = [a, a[None]], {}
    elif bad == "size":
        other = list(base)
        other[-1] += 1
        args, kw = (
            [a, make(host_values(tuple(other), "float32", 1), "float32", device)],
            {"axis": 0},
        )
        if len(base) == 1:
            args = [a[None], make(host_values((1, base[0] + 1), "float32", 1), "float32", device)]
    elif bad == "axis":
        args, kw = [a, a], {"axis": len(base)}
    elif bad == "none":
        args, kw = [], {}
    else:
        args, kw = [make(np.float32(1), "float32", device)] * 2, {}
    with pytest.raises(ValueError, match="concatenate"):
        ignis.concatenate(args, **kw)
    still_works(device)
