"""ignis.linalg against NumPy in float64 on random well-conditioned data: every function, on
every device (cpu; cuda:0 where a GPU exists, through cuSOLVER), batched shapes, bad input.
The CUDA backend module's column-major bookkeeping is also checked on the CPU, against a host
emulation of cuSOLVER (cusolver_emulator.py), and the cuSOLVER loader without the library."""

from __future__ import annotations

import math

import ignis.linalg as la
import numpy as np
import pytest
from cusolver_emulator import FakeCusolver, install

import ignis
from ignis import _cusolver

TOL = {"float32": 2e-4, "float64": 1e-9}
BATCHES = [(), (3,), (2, 3)]


def general(rng, shape, dtype="float64"):
    """Random matrices with a strong diagonal (well-conditioned when square)."""
    a = rng.standard_normal(shape)
    m, n = shape[-2:]
    a[..., range(min(m, n)), range(min(m, n))] += 2 * max(m, n)
    return a.astype(dtype)


def spd(rng, shape, dtype="float64"):
    a = rng.standard_normal(shape)
    n = shape[-1]
    return (a @ np.swapaxes(a, -1, -2) + n * np.eye(n)).astype(dtype)


def arr(x, device):
    return ignis.asarray(np.ascontiguousarray(x), device=device)


def close(got, want, dtype="float64", scale=1.0):
    got = got.to_host() if isinstance(got, ignis.NvArray) else got
    want = np.asarray(want, np.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    tol = TOL[dtype] * scale
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol,
                               atol=tol * max(1.0, float(np.abs(want).max(initial=0))))


def mT(x):
    return np.swapaxes(x, -1, -2)


# --- factorizations ----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("upper", [False, True])
def test_cholesky(solver, rng, dtype, batch, upper):
    x = spd(rng, batch + (5, 5), dtype)
    got = la.cholesky(arr(x, solver), upper=upper)
    low = np.linalg.cholesky(x.astype(np.float64))
    assert got.dtype == dtype and got.shape == x.shape
    close(got, mT(low) if upper else low, dtype, scale=10)


def test_cholesky_reads_one_triangle(solver, rng):
    x = spd(rng, (4, 4))
    junk = x.copy()
    junk[np.triu_indices(4, 1)] = 99.0  # the lower factor reads the lower triangle only
    close(la.cholesky(arr(junk, solver)), np.linalg.cholesky(x))
    junk = x.copy()
    junk[np.tril_indices(4, -1)] = -7.0
    close(la.cholesky(arr(junk, solver), upper=True), np.linalg.cholesky(x).T)


def test_cholesky_not_positive_definite(solver, rng):
    x = spd(rng, (3, 4, 4))
    x[1] = -np.eye(4)
    x[1, 0, 0] = 1.0  # the leading minor of order 2 is the first bad one
    with pytest.raises(la.LinAlgError, match=r"linalg\.cholesky \(batch element \(1,\)\).*"
                       r"leading minor of order 2"):
        la.cholesky(arr(x, solver))
    assert issubclass(la.LinAlgError, np.linalg.LinAlgError)
    assert issubclass(la.LinAlgError, ValueError)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("batch", BATCHES)
def test_inv(solver, rng, dtype, batch):
    x = general(rng, batch + (6, 6), dtype)
    got = la.inv(arr(x, solver))
    assert got.dtype == dtype
    close(got, np.linalg.inv(x.astype(np.float64)), dtype, scale=10)


def test_inv_singular(solver):
    x = np.array([[1.0, 2.0], [2.0, 4.0]])
    with pytest.raises(la.LinAlgError, match=r"linalg\.inv: the input matrix is singular"):
        la.inv(arr(x, solver))
    with pytest.raises(np.linalg.LinAlgError):
        la.solve(arr(x, solver), arr(np.ones(2), solver))


@pytest.mark.parametrize("shapes", [
    ((4, 4), (4,)),
    ((3, 4, 4), (4,)),
    ((4, 4), (4, 2)),
    ((3, 4, 4), (3, 4, 2)),
    ((2, 1, 4, 4), (3, 4, 5)),
    ((4, 4), (2, 4, 1)),
])
def test_solve(solver, rng, shapes):
    sa, sb = shapes
    a, b = general(rng, sa), rng.standard_normal(sb)
    got = la.solve(arr(a, solver), arr(b, solver))
    if b.ndim == 1:
        want = np.linalg.solve(a, b[:, None])[..., 0]
    else:
        want = np.linalg.solve(a, b)
    close(got, want)


def test_solve_promotes(solver, rng):
    a, b = general(rng, (3, 3), "float32"), rng.standard_normal((3, 2))
    got = la.solve(arr(a, solver), arr(b, solver))
    assert got.dtype == "float64"
    close(got, np.linalg.solve(a.astype(np.float64), b), "float32", scale=10)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("batch", BATCHES)
def test_det_and_slogdet(solver, rng, dtype, batch):
    x = general(rng, batch + (5, 5), dtype) * 0.3
    x[..., 0, :] *= -1  # negative determinants too
    ref = x.astype(np.float64)
    close(la.det(arr(x, solver)), np.linalg.det(ref), dtype, scale=10)
    res = la.slogdet(arr(x, solver))
    assert type(res).__name__ == "SlogdetResult" and res._fields == ("sign", "logabsdet")
    sign, logabs = np.linalg.slogdet(ref)
    close(res.sign, sign, dtype)
    close(res.logabsdet, logabs, dtype, scale=10)
    assert res.sign.dtype == dtype and res.logabsdet.dtype == dtype


def test_slogdet_singular(solver):
    x = arr(np.array([[[1.0, 2.0], [2.0, 4.0]], [[2.0, 0.0], [0.0, -3.0]]]), solver)
    sign, logabs = la.slogdet(x)
    assert sign.tolist() == [0.0, -1.0]
    assert logabs.tolist()[0] == -math.inf
    close(logabs[1], math.log(6.0))
    close(la.det(x), [0.0, -6.0])


@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (4, 4), (2, 6, 3), (2, 3, 3, 5)])
@pytest.mark.parametrize("mode", ["reduced", "complete"])
def test_qr(solver, rng, shape, mode):
    x = general(rng, shape)
    q, r = la.qr(arr(x, solver), mode=mode)
    qn, rn = np.linalg.qr(x, mode=mode)
    assert q.shape == qn.shape and r.shape == rn.shape
    q, r = q.to_host(), r.to_host()
    np.testing.assert_array_equal(r, np.triu(r))
    close(q @ r, x)
    eye = np.broadcast_to(np.eye(q.shape[-1]), q.shape[:-2] + (q.shape[-1],) * 2)
    close(mT(q) @ q, eye)
    # Unique up to the signs of R's diagonal: compare with those made positive.
    k = min(shape[-2:])
    d = np.sign(np.diagonal(r, axis1=-2, axis2=-1))[..., None, :]
    dn = np.sign(np.diagonal(rn, axis1=-2, axis2=-1))[..., None, :]
    close(q[..., :k] * d, qn[..., :k] * dn)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("n", [4, 40])
def test_eigh(solver, rng, dtype, batch, n):
    x = spd(rng, batch + (n, n), dtype) - 3 * n * np.eye(n, dtype=dtype)  # mixed signs
    res = la.eigh(arr(x, solver))
    assert type(res).__name__ == "EighResult"
    assert res._fields == ("eigenvalues", "eigenvectors")
    w, v = res
    ref = np.linalg.eigvalsh(x.astype(np.float64))
    close(w, ref, dtype, scale=10 * n)
    vv = v.to_host().astype(np.float64)
    close(vv @ (w.to_host()[..., None] * mT(vv)), x, dtype, scale=10 * n)
    close(la.eigvalsh(arr(x, solver)), ref, dtype, scale=10 * n)


def test_eigh_reads_the_lower_triangle(solver, rng):
    x = spd(rng, (5, 5))
    junk = x.copy()
    junk[np.triu_indices(5, 1)] = 1e3
    close(la.eigvalsh(arr(junk, solver)), np.linalg.eigvalsh(x))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (4, 4), (2, 6, 3), (2, 2, 3, 5)])
@pytest.mark.parametrize("full", [True, False])
def test_svd(solver, rng, dtype, shape, full):
    x = general(rng, shape, dtype)
    res = la.svd(arr(x, solver), full_matrices=full)
    assert type(res).__name__ == "SVDResult" and res._fields == ("U", "S", "Vh")
    un, sn, vhn = np.linalg.svd(x.astype(np.float64), full_matrices=full)
    u, s, vh = (a.to_host().astype(np.float64) for a in res)
    assert u.shape == un.shape and s.shape == sn.shape and vh.shape == vhn.shape
    assert res.U.dtype == dtype and res.S.dtype == dtype
    close(s, sn, dtype, scale=10)
    k = s.shape[-1]
    close((u[..., :k] * s[..., None, :]) @ vh[..., :k, :], x, dtype, scale=10)
    for q in (u, mT(vh)):
        eye = np.broadcast_to(np.eye(q.shape[-1]), q.shape[:-2] + (q.shape[-1],) * 2)
        close(mT(q) @ q, eye, dtype, scale=10)
    close(la.svdvals(arr(x, solver)), sn, dtype, scale=10)


def test_matrix_rank_and_pinv(solver, rng):
    a = rng.standard_normal((2, 6, 3)) @ rng.standard_normal((2, 3, 5))  # rank 3
    x = arr(a, solver)
    assert la.matrix_rank(x).tolist() == [3, 3]
    assert la.matrix_rank(x).dtype == "int64"
    assert la.matrix_rank(x, rtol=0.99).tolist() == [1, 1]
    rtol = arr(np.array([1e-3, 0.99]), solver)  # one per matrix
    assert la.matrix_rank(x, rtol=rtol).tolist() == [3, 1]
    close(la.pinv(x), np.linalg.pinv(a, rcond=max(6, 5) * np.finfo(np.float64).eps))
    g = general(rng, (3, 4, 2))
    close(la.pinv(arr(g, solver)), np.linalg.pinv(g))


@pytest.mark.parametrize("n", [-3, -1, 0, 1, 2, 5, 8])
def test_matrix_power(solver, rng, n):
    x = general(rng, (2, 3, 3)) / 6.0
    close(la.matrix_power(arr(x, solver), n), np.linalg.matrix_power(x, n), scale=100)


def test_non_contiguous_input(solver, rng):
    x = spd(rng, (3, 5, 5))
    view = arr(x, solver).swapaxes(-1, -2)[:, ::2, ::2]  # strided, transposed
    ref = np.swapaxes(x, -1, -2)[:, ::2, ::2]
    close(la.inv(view), np.linalg.inv(ref))
    close(la.svdvals(view), np.linalg.svd(ref, compute_uv=False))


@pytest.mark.parametrize("shape", [(0, 0), (2, 0, 0), (0, 3, 3)])
def test_empty_square(solver, shape):
    x = arr(np.zeros(shape), solver)
    n = shape[-1]
    assert la.inv(x).shape == shape and la.cholesky(x).shape == shape
    assert la.det(x).tolist() == np.linalg.det(np.zeros(shape)).tolist()
    sign, logabs = la.slogdet(x)
    assert sign.shape == shape[:-2] and logabs.shape == shape[:-2]
    w, v = la.eigh(x)
    assert w.shape == shape[:-1] and v.shape == shape
    assert la.solve(x, arr(np.zeros(shape[:-1] + (2,)), solver)).shape == shape[:-1] + (2,)
    del n


def test_empty_rectangular(solver):
    x = arr(np.zeros((3, 0)), solver)
    u, s, vh = la.svd(x)
    assert u.tolist() == np.eye(3).tolist() and s.shape == (0,) and vh.shape == (0, 0)
    u, s, vh = la.svd(x, full_matrices=False)
    assert u.shape == (3, 0) and vh.shape == (0, 0)
    q, r = la.qr(x, mode="complete")
    assert q.tolist() == np.eye(3).tolist() and r.shape == (3, 0)
    assert la.matrix_rank(x).tolist() == 0
    assert la.pinv(x).shape == (0, 3)


# --- compositions ------------------------------------------------------------------------------


@pytest.mark.parametrize("offset", [-5, -2, -1, 0, 1, 3, 7])
def test_diagonal_and_trace(device, rng, offset):
    x = rng.standard_normal((2, 4, 5))
    d = la.diagonal(arr(x, device), offset=offset)
    close(d, np.diagonal(x, offset=offset, axis1=-2, axis2=-1))
    close(la.trace(arr(x, device), offset=offset),
          np.trace(x, offset=offset, axis1=-2, axis2=-1))
    i = (rng.integers(-9, 9, (3, 3)).astype(np.int32))
    t = la.trace(arr(i, device), offset=offset)
    assert t.dtype == "int64" and t.tolist() == int(np.trace(i, offset=offset))
    assert la.trace(arr(i, device), dtype="float32").dtype == "float32"


def test_diagonal_is_a_view(device):
    x = ignis.zeros((3, 3), dtype="float64", device=device)
    la.diagonal(x).fill_(2.0)
    assert x.tolist() == (2 * np.eye(3)).tolist()


def test_outer(device, rng):
    a, b = rng.standard_normal(4), rng.standard_normal(3).astype(np.float32)
    got = la.outer(arr(a, device), arr(b, device))
    assert got.dtype == "float64"
    close(got, np.outer(a, b.astype(np.float64)))
    with pytest.raises(ignis.ShapeError, match="linalg.outer: expected two 1-D arrays"):
        la.outer(arr(np.ones((2, 2)), device), arr(a, device))


@pytest.mark.parametrize("shapes, axis", [
    (((3,), (3,)), -1),
    (((4, 3), (3,)), -1),
    (((2, 1, 3), (5, 3)), -1),
    (((3, 4), (2, 3, 4)), -2),
])
def test_cross(device, rng, shapes, axis):
    a, b = rng.standard_normal(shapes[0]), rng.standard_normal(shapes[1])
    close(la.cross(arr(a, device), arr(b, device), axis=axis), np.cross(a, b, axis=axis))
    ia, ib = (rng.integers(-5, 5, s).astype(np.int32) for s in shapes)
    got = la.cross(arr(ia, device), arr(ib, device), axis=axis)
    np.testing.assert_array_equal(got.to_host(), np.cross(ia, ib, axis=axis))


def test_cross_errors(device):
    with pytest.raises(ignis.ShapeError, match="size 3 along axis -1"):
        la.cross(arr(np.ones(4), device), arr(np.ones(4), device))
    with pytest.raises(IndexError, match=r"axis must be in \[-1, -1\]"):
        la.cross(arr(np.ones(3), device), arr(np.ones(3), device), axis=0)


@pytest.mark.parametrize("ord", [2, 1, 0, -1, -2, 3, 0.5, math.inf, -math.inf])
@pytest.mark.parametrize("axis", [None, -1, (0, 2), 1])
@pytest.mark.parametrize("keepdims", [False, True])
def test_vector_norm(device, rng, ord, axis, keepdims):
    x = rng.standard_normal((3, 4, 5))
    x[0, 0, 0] = 0.0
    got = la.vector_norm(arr(x, device), axis=axis, keepdims=keepdims, ord=ord)
    with np.errstate(divide="ignore"):  # negative orders of the zero element
        want = np.linalg.vector_norm(x, axis=axis, keepdims=keepdims, ord=ord)
    close(got, want, scale=10)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_vector_norm_low_precision(device, rng, dtype):
    from array_helpers import np_dtype

    x = rng.standard_normal((6, 7)).astype(np_dtype(dtype))
    got = la.vector_norm(arr(x, device), axis=-1)
    assert got.dtype == dtype  # computed in float32, rounded once
    want = np.linalg.vector_norm(x.astype(np.float64), axis=-1)
    np.testing.assert_allclose(got.to_host().astype(np.float64), want,
                               rtol={"float16": 1e-3, "bfloat16": 8e-3, "float32": 1e-6}[dtype])


@pytest.mark.parametrize("ord", ["fro", "nuc", 1, -1, 2, -2, math.inf, -math.inf])
@pytest.mark.parametrize("keepdims", [False, True])
def test_matrix_norm(solver, rng, ord, keepdims):
    x = rng.standard_normal((2, 3, 4, 5))
    got = la.matrix_norm(arr(x, solver), ord=ord, keepdims=keepdims)
    close(got, np.linalg.matrix_norm(x, ord=ord, keepdims=keepdims), scale=10)


def test_matrix_norm_half_and_bad_ord(device, rng):
    x = rng.standard_normal((4, 4)).astype(np.float16)
    got = la.matrix_norm(arr(x, device))
    assert got.dtype == "float16"
    np.testing.assert_allclose(float(got.to_host()), np.linalg.norm(x.astype(np.float64)),
                               rtol=1e-3)
    with pytest.raises(ignis.DTypeError, match="linalg.svdvals: float16 is not supported"):
        la.matrix_norm(arr(x, device), ord=2)
    with pytest.raises(ValueError, match="linalg.matrix_norm: ord must be"):
        la.matrix_norm(arr(x, device), ord=3)


def test_aliases_are_the_main_namespace_functions():
    assert la.matmul is ignis.matmul
    for name in ("tensordot", "vecdot", "matrix_transpose"):
        if hasattr(ignis, name):
            assert getattr(la, name) is getattr(ignis, name)
    assert set(la.__all__) >= {
        "cholesky", "cross", "det", "diagonal", "eigh", "eigvalsh", "inv", "matmul",
        "matrix_norm", "matrix_power", "matrix_rank", "matrix_transpose", "outer", "pinv", "qr",
        "slogdet", "solve", "svd", "svdvals", "tensordot", "trace", "vecdot", "vector_norm",
    }
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        la.nope  # noqa: B018


# --- bad input ---------------------------------------------------------------------------------

FACTORIZATIONS = [la.cholesky, la.det, la.eigh, la.eigvalsh, la.inv, la.slogdet]


@pytest.mark.parametrize("fn", FACTORIZATIONS)
def test_non_square(device, fn):
    with pytest.raises(ignis.ShapeError, match=rf"linalg\.{fn.__name__}: expected square "
                       r"matrices \(\.\.\., M, M\), got shape \(2, 3\)"):
        fn(ignis.zeros((2, 3), dtype="float64", device=device))


@pytest.mark.parametrize("fn", FACTORIZATIONS + [la.qr, la.svd, la.svdvals, la.pinv,
                                                 la.matrix_rank, la.matrix_norm, la.diagonal,
                                                 la.trace])
def test_wrong_ndim(device, fn):
    with pytest.raises(ignis.ShapeError, match=r"at least 2 dimensions\), got shape \(3,\)"):
        fn(ignis.zeros((3,), dtype="float64", device=device))


@pytest.mark.parametrize("fn", FACTORIZATIONS + [la.qr, la.svd, la.svdvals, la.pinv])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "int32", "bool"])
def test_wrong_dtype(device, fn, dtype):
    x = ignis.zeros((3, 3), dtype=dtype, device=device)
    pattern = "is not supported" if dtype.startswith(("float", "bfloat")) else (
        "expected a floating-point array")
    with pytest.raises(ignis.DTypeError, match=rf"linalg\.{fn.__name__}: .*{pattern}"):
        fn(x)


def test_other_bad_arguments(device):
    x = ignis.asarray(np.eye(3), device=device)
    with pytest.raises(TypeError, match="expected an NvArray, got ndarray"):
        la.inv(np.eye(3))
    with pytest.raises(ValueError, match="mode must be 'reduced' or 'complete', got 'r'"):
        la.qr(x, mode="r")
    with pytest.raises(TypeError, match="n must be an integer, got float"):
        la.matrix_power(x, 2.0)
    with pytest.raises(ignis.ShapeError, match=r"x2 must have shape \(3,\) or \(\.\.\., 3, K\)"):
        la.solve(x, ignis.asarray(np.ones(4), device=device))
    with pytest.raises(ignis.DTypeError, match="vector_norm: expected a floating-point array"):
        la.vector_norm(ignis.asarray(np.arange(3), device=device))
    with pytest.raises(ignis.DTypeError, match="linalg.cross: expected a numeric array"):
        la.cross(ignis.asarray(np.ones(3, bool), device=device), x[0])
    with pytest.raises(TypeError, match="upper must be True or False"):
        la.cholesky(x, upper=1)


# --- the CUDA module on a host emulation of cuSOLVER --------------------------------------------


def _emu_case(monkeypatch, batched=True):
    return install(monkeypatch, batched)


def _cpu(a):
    return ignis.asarray(np.ascontiguousarray(a), device="cpu")


def _out(shape, dtype="float64"):
    return ignis.empty(shape, dtype=dtype, device="cpu")


@pytest.mark.parametrize("batched", [True, False])
@pytest.mark.parametrize("upper", [False, True])
def test_emulated_cuda_cholesky(monkeypatch, rng, batched, upper):
    mod, backend, lib = _emu_case(monkeypatch, batched)
    x = spd(rng, (3, 4, 4))
    out, info = _out(x.shape), _out((3,), "int32")
    mod.cholesky(backend, out, info, _cpu(x), upper)
    low = np.linalg.cholesky(x)
    close(out, mT(low) if upper else low)
    assert info.tolist() == [0, 0, 0]
    assert ("potrfBatched" in lib.calls) == batched
    bad = x.copy()
    bad[2] = -np.eye(4)
    mod.cholesky(backend, out, info, _cpu(bad), upper)
    assert info.tolist() == [0, 0, 1]


def test_emulated_cuda_solve_and_slogdet(monkeypatch, rng):
    mod, backend, _ = _emu_case(monkeypatch)
    a, b = general(rng, (2, 4, 4)), rng.standard_normal((2, 4, 3))
    a[1, 0] *= -1
    out, info = _out(b.shape), _out((2,), "int32")
    mod.solve(backend, out, info, _cpu(a), _cpu(b))
    close(out, np.linalg.solve(a, b))
    sign, logabs, det = _out((2,)), _out((2,)), _out((2,))
    mod.slogdet(backend, sign, logabs, det, _cpu(a))
    ref_sign, ref_logabs = np.linalg.slogdet(a)
    close(sign, ref_sign)
    close(logabs, ref_logabs)
    close(det, np.linalg.det(a))


@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (4, 4)])
@pytest.mark.parametrize("complete", [False, True])
def test_emulated_cuda_qr(monkeypatch, rng, shape, complete):
    mod, backend, _ = _emu_case(monkeypatch)
    x = general(rng, (2,) + shape)
    m, n = shape
    mq = m if complete else min(m, n)
    q, r = _out((2, m, mq)), _out((2, mq, n))
    mod.qr(backend, q, r, _cpu(x), complete)
    q, r = q.to_host(), r.to_host()
    np.testing.assert_array_equal(r, np.triu(r))
    close(q @ r, x)
    close(mT(q) @ q, np.broadcast_to(np.eye(mq), (2, mq, mq)))


@pytest.mark.parametrize("batched", [True, False])
@pytest.mark.parametrize("vectors", [True, False])
def test_emulated_cuda_eigh(monkeypatch, rng, batched, vectors):
    mod, backend, lib = _emu_case(monkeypatch, batched)
    x = spd(rng, (3, 5, 5))
    junk = x.copy()
    junk[:, np.triu(np.ones((5, 5), bool), 1)] = 50.0  # only the lower triangle counts
    w, info = _out((3, 5)), _out((3,), "int32")
    v = _out((3, 5, 5)) if vectors else None
    mod.eigh(backend, w, v, info, _cpu(junk))
    ref_w, _ = np.linalg.eigh(x)
    close(w, ref_w)
    if vectors:
        vv = v.to_host()
        close(vv @ (ref_w[..., None] * mT(vv)), x)
    assert ("syevjBatched" in lib.calls) == batched


@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (4, 4)])
@pytest.mark.parametrize("full", [False, True])
@pytest.mark.parametrize("vectors", [True, False])
def test_emulated_cuda_svd(monkeypatch, rng, shape, full, vectors):
    mod, backend, _ = _emu_case(monkeypatch)
    x = general(rng, (2,) + shape)
    m, n = shape
    k = min(m, n)
    s, info = _out((2, k)), _out((2,), "int32")
    u = _out((2, m, m if full else k)) if vectors else None
    vh = _out((2, n if full else k, n)) if vectors else None
    mod.svd(backend, u, s, vh, info, _cpu(x), full)
    un, sn, vhn = np.linalg.svd(x, full_matrices=full)
    close(s, sn)
    if vectors:
        uu, vv = u.to_host(), vh.to_host()
        close((uu[..., :k] * sn[..., None, :]) @ vv[..., :k, :], x)
        # The singular vectors are NumPy's up to signs (the singular values are distinct).
        cu, cv = uu.shape[-1], vv.shape[-2]
        close(np.abs(mT(uu[..., :k]) @ un[..., :k]), np.broadcast_to(np.eye(k), (2, k, k)),
              scale=1e3)
        close(np.abs(vv[..., :k, :] @ mT(vhn[..., :k, :])), np.broadcast_to(np.eye(k), (2, k, k)),
              scale=1e3)
        close(mT(uu) @ uu, np.broadcast_to(np.eye(cu), (2, cu, cu)))
        close(vv @ mT(vv), np.broadcast_to(np.eye(cv), (2, cv, cv)))


def test_cuda_kernels_compile():
    from ignis._array._cuda_backend import linalg as cuda_linalg

    from ignis import CompileOptions, _sources

    for source, names in cuda_linalg.kernel_names().items():
        obj = ignis.compile(_sources.read_source(source), CompileOptions(arch="sm_90"),
                            name_expressions=names)
        assert set(obj.lowered_names) == set(names)
        assert obj.log == "", obj.log


# --- the cuSOLVER loader -----------------------------------------------------------------------


def test_missing_cusolver_names_the_extra(monkeypatch):
    def missing():
        raise OSError("libcusolver.so.12: cannot open shared object file")

    monkeypatch.setattr(_cusolver, "_library", _cusolver.LazyLibrary(missing, "cuSOLVER", ""))
    monkeypatch.setattr(_cusolver, "load", _cusolver._library.get)
    assert _cusolver.load() is None
    assert "cannot open shared object file" in _cusolver.unavailable_reason()
    with pytest.raises(_cusolver.CusolverNotFoundError,
                       match=r'linalg\.inv on a GPU array needs cuSOLVER.*cannot open shared '
                             r'object file.*pip install "ignis-cuda\[cusolver-cu12\]"'):
        _cusolver.require("linalg.inv", 12)
    with pytest.raises(_cusolver.CusolverNotFoundError, match=r"cusolver-cu13"):
        _cusolver.require("linalg.svd", 13)
    # The CUDA backend module asks for the library before it touches the device.
    from ignis._array._cuda_backend import linalg as cuda_linalg

    with pytest.raises(_cusolver.CusolverNotFoundError, match="linalg.cholesky on a GPU"):
        cuda_linalg.cholesky(object(), None, None, ignis.zeros((1, 2, 2)), False)


def test_the_library_wrapper_binds_every_function():
    class Fn:
        def __init__(self, name, log):
            self.name, self.log = name, log

        def __call__(self, *args):
            self.log.append((self.name, args))
            if self.name == "cusolverGetProperty":
                args[1]._obj.value = {0: 12, 1: 0, 2: 4}[args[0]]
            if self.name.endswith("_bufferSize"):
                args[-1]._obj.value = 64  # gesvd_bufferSize: *Lwork is last
            return 0

    class Cdll:
        def __init__(self, skip=()):
            self.log, self.skip = [], skip

        def __getattr__(self, name):
            if name in self.skip:
                raise AttributeError(name)
            return Fn(name, self.log)

    cdll = Cdll(skip={"cusolverDnSpotrfBatched", "cusolverDnDpotrfBatched"})
    lib = _cusolver.CusolverLibrary(cdll, "/x/libcusolver.so.12")
    assert lib.version == (12, 0, 4)
    assert not lib.has("potrfBatched", "D") and lib.has("syevjBatched", "S")
    assert lib.buffer_size("gesvd", "D", 1, 5, 3) == 64
    lib.call("potrf", "S", 1, 0, 3, 0x1000, 3, 0x2000, 64, 0x3000)
    assert cdll.log[-1] == ("cusolverDnSpotrf", (1, 0, 3, 0x1000, 3, 0x2000, 64, 0x3000))
    with pytest.raises(OSError, match="has no function cusolverDnDgesvd"):
        _cusolver.CusolverLibrary(Cdll(skip={"cusolverDnDgesvd"}), "/x/libcusolver.so.12")


def test_status_check():
    _cusolver.check(0, "cusolverDnDpotrf")
    with pytest.raises(_cusolver.CusolverError,
                       match=r"CUSOLVER_STATUS_INVALID_VALUE: .* \(in cusolverDnDpotrf\)"):
        _cusolver.check(3, "cusolverDnDpotrf")
    assert issubclass(_cusolver.CusolverError, ignis.CudaError)


def test_fake_library_matches_the_real_interface():
    real = {n for n in dir(_cusolver.CusolverLibrary) if not n.startswith("_")}
    fake = {n for n in dir(FakeCusolver) if not n.startswith("_")} - {"batched", "calls"}
    assert fake <= real


# --- CUDA: results equal the CPU's ---------------------------------------------------------------


@pytest.mark.gpu
def test_cuda_matches_cpu(rng):
    if _cusolver.load() is None:
        pytest.skip(f"cuSOLVER is not installed ({_cusolver.unavailable_reason()})")
    x = spd(rng, (4, 6, 6))
    g, c = arr(x, "cuda:0"), arr(x, "cpu")
    for fn in (la.cholesky, la.inv, la.det, la.eigvalsh, la.svdvals, la.matrix_rank):
        got, want = fn(g), fn(c)
        assert got.device == "cuda:0"
        np.testing.assert_allclose(got.to_host(), want.to_host(), rtol=1e-9, atol=1e-9)
    # Many small matrices: the batched cuSOLVER paths (potrfBatched, syevjBatched).
    many = spd(rng, (300, 8, 8))
    close(la.cholesky(arr(many, "cuda:0")), np.linalg.cholesky(many))
    close(la.eigvalsh(arr(many, "cuda:0")), np.linalg.eigvalsh(many), scale=100)
