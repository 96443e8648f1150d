"""ignis.linalg on complex64 / complex128 against NumPy in complex128 on random data (both
parts nonzero): every function of the Array API extension on every device (cpu; cuda:0 where a
GPU exists, through cuSOLVER's C / Z routines), batched, with reconstruction checks
(``Q @ R == A``, ``U @ diag(S) @ Vh == A``, ``A @ V == V @ diag(w)``, ``L @ L^H == A``), and the
standard's result dtypes (real eigenvalues, singular values and norms of matching precision).

The CUDA backend module's complex bookkeeping (which matrix cuSOLVER sees, where conjugations
do and do not happen, real-valued outputs' strides) is also checked on the CPU against the host
emulation of cuSOLVER (cusolver_emulator.py), as are the precision table of ``ignis._cusolver``
and its Hermitian / unitary name mapping.
"""

from __future__ import annotations

import math

import ignis.linalg as la
import numpy as np
import pytest
from cusolver_emulator import install

import ignis
from ignis import _cusolver
from ignis import _dtypes as dt

CDTYPES = ["complex64", "complex128"]
TOL = {"complex64": 2e-4, "complex128": 1e-9}
REAL = {"complex64": "float32", "complex128": "float64"}
BATCHES = [(), (3,), (2, 3)]


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(20250611)


# --- data and comparisons ----------------------------------------------------------------------


def crand(rng, shape, dtype="complex128"):
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)


def general(rng, shape, dtype="complex128"):
    """Random complex matrices with a strong diagonal (well-conditioned when square)."""
    a = crand(rng, shape)
    m, n = shape[-2:]
    a[..., range(min(m, n)), range(min(m, n))] += 2 * max(m, n)
    return a.astype(dtype)


def hpd(rng, shape, dtype="complex128"):
    """Hermitian positive-definite matrices."""
    a = crand(rng, shape)
    n = shape[-1]
    return (a @ mH(a) + n * np.eye(n)).astype(dtype)


def herm(rng, shape, dtype="complex128"):
    """Hermitian matrices with eigenvalues of both signs."""
    a = crand(rng, shape)
    return ((a + mH(a)) / 2).astype(dtype)


def mT(x):
    return np.swapaxes(x, -1, -2)


def mH(x):
    return np.conj(np.swapaxes(x, -1, -2))


def arr(x, device):
    return ignis.asarray(np.ascontiguousarray(x), device=device)


def host(x):
    return x.to_host() if isinstance(x, ignis.NvArray) else np.asarray(x)


def close(got, want, dtype, scale=1.0):
    """``got`` (an NvArray or ndarray) equals ``want`` to the tolerance of ``dtype``'s
    precision times ``scale``, relative to ``want``'s largest magnitude."""
    got = host(got)
    want = np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    tol = TOL[dtype] * scale
    wide = np.complex128 if got.dtype.kind == "c" or want.dtype.kind == "c" else np.float64
    np.testing.assert_allclose(
        got.astype(wide),
        want.astype(wide),
        rtol=tol,
        atol=tol * max(1.0, float(np.abs(want).max(initial=0))),
    )


def eye_like(q):
    """Identity matrices of q's batch shape, for q^H q of q (..., M, K)."""
    k = q.shape[-1]
    return np.broadcast_to(np.eye(k), q.shape[:-2] + (k, k))


# --- factorizations ----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", CDTYPES)
@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("upper", [False, True])
def test_cholesky(solver, rng, dtype, batch, upper):
    x = hpd(rng, batch + (5, 5), dtype)
    got = la.cholesky(arr(x, solver), upper=upper)
    assert got.dtype == dtype and got.shape == x.shape
    low = np.linalg.cholesky(x.astype(np.complex128))
    close(got, mH(low) if upper else low, dtype, scale=10)
    f = host(got).astype(np.complex128)
    np.testing.assert_array_equal(f, np.triu(f) if upper else np.tril(f))
    close(mH(f) @ f if upper else f @ mH(f), x, dtype, scale=10)  # x = U^H U = L L^H


def test_cholesky_reads_one_triangle(solver, rng):
    x = hpd(rng, (4, 4))
    junk = x.copy()
    junk[np.triu_indices(4, 1)] = 99.0 - 5j  # the lower factor reads the lower triangle only
    close(la.cholesky(arr(junk, solver)), np.linalg.cholesky(x), "complex128")
    junk = x.copy()
    junk[np.tril_indices(4, -1)] = -7.0 + 3j
    close(la.cholesky(arr(junk, solver), upper=True), mH(np.linalg.cholesky(x)), "complex128")


def test_cholesky_not_positive_definite(solver, rng):
    x = hpd(rng, (3, 4, 4))
    x[1] = -np.eye(4)
    x[1, 0, 0] = 1.0  # the leading minor of order 2 is the first bad one
    with pytest.raises(
        la.LinAlgError,
        match=r"linalg\.cholesky \(batch element \(1,\)\).*"
        r"leading minor of order 2",
    ):
        la.cholesky(arr(x, solver))


@pytest.mark.parametrize("dtype", CDTYPES)
@pytest.mark.parametrize("batch", BATCHES)
def test_inv(solver, rng, dtype, batch):
    x = general(rng, batch + (6, 6), dtype)
    got = la.inv(arr(x, solver))
    assert got.dtype == dtype
    close(got, np.linalg.inv(x.astype(np.complex128)), dtype, scale=10)
    close(x.astype(np.complex128) @ host(got), np.broadcast_to(np.eye(6), x.shape), dtype, scale=10)


def test_inv_singular(solver):
    # A zero row: every LU meets an exact zero pivot. (A complex multiple of a row is singular
    # too, but complex division rounds: cuSOLVER's pivot comes out tiny, not zero.)
    x = np.array([[1.0 + 1j, 2.0 - 3j], [0, 0]])
    with pytest.raises(la.LinAlgError, match=r"linalg\.inv: the input matrix is singular"):
        la.inv(arr(x, solver))


@pytest.mark.parametrize("dtype", CDTYPES)
@pytest.mark.parametrize(
    "shapes",
    [
        ((4, 4), (4,)),
        ((3, 4, 4), (4,)),
        ((4, 4), (4, 2)),
        ((3, 4, 4), (3, 4, 2)),
        ((2, 1, 4, 4), (3, 4, 5)),
    ],
)
def test_solve(solver, rng, dtype, shapes):
    sa, sb = shapes
    a, b = general(rng, sa, dtype), crand(rng, sb, dtype)
    got = la.solve(arr(a, solver), arr(b, solver))
    assert got.dtype == dtype
    a128, b128 = a.astype(np.complex128), b.astype(np.complex128)
    want = (
        np.linalg.solve(a128, b128[:, None])[..., 0] if b.ndim == 1 else np.linalg.solve(a128, b128)
    )
    close(got, want, dtype, scale=10)


def test_solve_promotes(solver, rng):
    a, b = general(rng, (3, 3), "complex64"), rng.standard_normal((3, 2))  # with float64
    got = la.solve(arr(a, solver), arr(b, solver))
    assert got.dtype == "complex128"
    close(got, np.linalg.solve(a.astype(np.complex128), b), "complex64", scale=10)
    r = general(rng, (3, 3)).real.astype(np.float32)  # float32 matrix, complex64 right side
    c = crand(rng, (3,), "complex64")
    got = la.solve(arr(r, solver), arr(c, solver))
    assert got.dtype == "complex64"
    close(
        got, np.linalg.solve(r.astype(np.float64), c.astype(np.complex128)), "complex64", scale=10
    )


@pytest.mark.parametrize("dtype", CDTYPES)
@pytest.mark.parametrize("batch", BATCHES)
def test_det_and_slogdet(solver, rng, dtype, batch):
    x = general(rng, batch + (5, 5), dtype) * (0.1 + 0.05j)
    ref = x.astype(np.complex128)
    det = la.det(arr(x, solver))
    assert det.dtype == dtype
    close(det, np.linalg.det(ref), dtype, scale=10)
    sign, logabs = la.slogdet(arr(x, solver))
    assert sign.dtype == dtype and logabs.dtype == REAL[dtype]  # sign complex, log|det| real
    want_sign, want_logabs = np.linalg.slogdet(ref)
    close(sign, want_sign, dtype, scale=10)
    close(np.abs(host(sign)), np.ones(batch), dtype)  # a complex unit
    close(logabs, want_logabs, dtype, scale=10)


def test_slogdet_singular(solver):
    x = np.array([[[1 + 1j, 2 - 1j], [2 + 2j, 6 + 2j]], [[2j, 0], [0, -3]]])
    x[0, 1] = 0  # rank 1, exactly (a zero row; see test_inv_singular)
    sign, logabs = la.slogdet(arr(x, solver))
    assert sign.tolist()[0] == 0
    assert logabs.tolist()[0] == -math.inf
    close(sign[1], -1j, "complex128")  # det = -6j: sign -i, log|det| log 6
    close(logabs[1], math.log(6.0), "complex128")
    close(la.det(arr(x, solver)), [0, -6j], "complex128")


@pytest.mark.parametrize("dtype", CDTYPES)
@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (4, 4), (2, 6, 3), (2, 3, 3, 5)])
@pytest.mark.parametrize("mode", ["reduced", "complete"])
def test_qr(solver, rng, dtype, shape, mode):
    x = general(rng, shape, dtype)
    q, r = la.qr(arr(x, solver), mode=mode)
    assert q.dtype == dtype and r.dtype == dtype
    qn, rn = np.linalg.qr(x.astype(np.complex128), mode=mode)
    assert q.shape == qn.shape and r.shape == rn.shape
    q, r = host(q).astype(np.complex128), host(r).astype(np.complex128)
    np.testing.assert_array_equal(r, np.triu(r))
    close(q @ r, x, dtype, scale=10)  # Q @ R = A
    close(mH(q) @ q, eye_like(q), dtype, scale=10)  # Q^H Q = I
    # Unique up to a phase per column: compare with the phases of R's diagonal removed.
    k = min(shape[-2:])

    def phase(rr):
        d = np.diagonal(rr, axis1=-2, axis2=-1)[..., :k]
        return (d / np.abs(d))[..., None, :]

    close(q[..., :k] / phase(r), qn[..., :k] / phase(rn), dtype, scale=10)


@pytest.mark.parametrize("dtype", CDTYPES)
@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("n", [4, 40])  # (on the GPU: heevjBatched for small stacks, heevd)
def test_eigh(solver, rng, dtype, batch, n):
    x = herm(rng, batch + (n, n), dtype)
    w, v = la.eigh(arr(x, solver))
    assert w.dtype == REAL[dtype] and v.dtype == dtype  # real eigenvalues
    assert w.shape == batch + (n,) and v.shape == x.shape
    ref = np.linalg.eigvalsh(x.astype(np.complex128))
    close(w, ref, dtype, scale=10 * n)
    vv, ww = host(v).astype(np.complex128), host(w).astype(np.float64)
    a = x.astype(np.complex128)
    close(a @ vv, vv * ww[..., None, :], dtype, scale=10 * n)  # A @ V = V @ diag(w)
    close(mH(vv) @ vv, eye_like(vv), dtype, scale=10 * n)  # unitary
    vals = la.eigvalsh(arr(x, solver))
    assert vals.dtype == REAL[dtype]
    close(vals, ref, dtype, scale=10 * n)


def test_eigh_reads_the_lower_triangle(solver, rng):
    x = herm(rng, (2, 5, 5))
    junk = x.copy()
    junk[:, np.triu(np.ones((5, 5), bool), 1)] = 1e3 + 7j
    close(la.eigvalsh(arr(junk, solver)), np.linalg.eigvalsh(x), "complex128")
    w, v = la.eigh(arr(junk, solver))
    vv = host(v)
    close(x @ vv, vv * host(w)[..., None, :], "complex128", scale=10)


@pytest.mark.parametrize("dtype", CDTYPES)
@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (4, 4), (2, 6, 3), (2, 2, 3, 5)])
@pytest.mark.parametrize("full", [True, False])
def test_svd(solver, rng, dtype, shape, full):
    x = crand(rng, shape, dtype)
    u, s, vh = la.svd(arr(x, solver), full_matrices=full)
    assert u.dtype == dtype and vh.dtype == dtype and s.dtype == REAL[dtype]
    un, sn, vhn = np.linalg.svd(x.astype(np.complex128), full_matrices=full)
    u, s, vh = (
        host(u).astype(np.complex128),
        host(s).astype(np.float64),
        host(vh).astype(np.complex128),
    )
    assert u.shape == un.shape and s.shape == sn.shape and vh.shape == vhn.shape
    close(s, sn, dtype, scale=10)
    k = s.shape[-1]
    close((u[..., :k] * s[..., None, :]) @ vh[..., :k, :], x, dtype, scale=10)  # U S Vh = A
    close(mH(u) @ u, eye_like(u), dtype, scale=10)
    close(vh @ mH(vh), eye_like(mH(vh)), dtype, scale=10)
    vals = la.svdvals(arr(x, solver))
    assert vals.dtype == REAL[dtype]
    close(vals, sn, dtype, scale=10)


@pytest.mark.parametrize("dtype", CDTYPES)
def test_matrix_rank_and_pinv(solver, rng, dtype):
    a = (crand(rng, (2, 6, 3)) @ crand(rng, (2, 3, 5))).astype(dtype)  # rank 3
    x = arr(a, solver)
    rank = la.matrix_rank(x)
    assert rank.dtype == "int64" and rank.tolist() == [3, 3]
    assert la.matrix_rank(x, rtol=0.999).tolist() == [1, 1]
    eps = np.finfo(REAL[dtype]).eps
    p = la.pinv(x)
    assert p.dtype == dtype and p.shape == (2, 5, 6)
    close(p, np.linalg.pinv(a.astype(np.complex128), rcond=6 * eps), dtype, scale=100)
    g = general(rng, (3, 4, 2), dtype)
    pg = host(la.pinv(arr(g, solver))).astype(np.complex128)
    close(pg, np.linalg.pinv(g.astype(np.complex128)), dtype, scale=10)
    close(pg @ g.astype(np.complex128), eye_like(pg @ g.astype(np.complex128)), dtype, scale=10)


@pytest.mark.parametrize("dtype", CDTYPES)
@pytest.mark.parametrize("n", [-3, -1, 0, 1, 2, 5])
def test_matrix_power(solver, rng, dtype, n):
    x = (general(rng, (2, 3, 3)) / 6.0).astype(dtype)
    got = la.matrix_power(arr(x, solver), n)
    assert got.dtype == dtype
    close(got, np.linalg.matrix_power(x.astype(np.complex128), n), dtype, scale=100)


@pytest.mark.parametrize("dtype", CDTYPES)
@pytest.mark.parametrize("ord", ["fro", "nuc", 1, -1, 2, -2, math.inf, -math.inf])
@pytest.mark.parametrize("keepdims", [False, True])
def test_matrix_norm(solver, rng, dtype, ord, keepdims):
    x = crand(rng, (2, 3, 4, 5), dtype)
    got = la.matrix_norm(arr(x, solver), ord=ord, keepdims=keepdims)
    assert got.dtype == REAL[dtype]
    want = np.linalg.matrix_norm(x.astype(np.complex128), ord=ord, keepdims=keepdims)
    close(got, want, dtype, scale=10)


@pytest.mark.parametrize("dtype", CDTYPES)
@pytest.mark.parametrize("ord", [2, 1, 0, -1, 3, 0.5, math.inf, -math.inf])
@pytest.mark.parametrize("axis", [None, -1, (0, 2)])
def test_vector_norm(device, rng, dtype, ord, axis):
    x = crand(rng, (3, 4, 5), dtype)
    got = la.vector_norm(arr(x, device), axis=axis, ord=ord)
    assert got.dtype == REAL[dtype]
    want = np.linalg.vector_norm(x.astype(np.complex128), axis=axis, ord=ord)
    close(got, want, dtype, scale=10)


def test_non_contiguous_input(solver, rng):
    x = general(rng, (3, 5, 5))
    view = arr(x, solver).swapaxes(-1, -2)[:, ::2, ::2]  # strided, transposed
    ref = mT(x)[:, ::2, ::2]
    close(la.inv(view), np.linalg.inv(ref), "complex128")
    close(la.svdvals(view), np.linalg.svd(ref, compute_uv=False), "complex128")
    h = hpd(rng, (3, 5, 5))
    hv = arr(h, solver).swapaxes(-1, -2)  # the transpose of a Hermitian matrix is Hermitian
    close(la.eigvalsh(hv), np.linalg.eigvalsh(mT(h)), "complex128")
    close(la.cholesky(hv), np.linalg.cholesky(mT(h)), "complex128")


@pytest.mark.parametrize("shape", [(0, 0), (2, 0, 0), (0, 3, 3)])
def test_empty(solver, shape):
    x = arr(np.zeros(shape, np.complex64), solver)
    assert la.inv(x).shape == shape and la.inv(x).dtype == "complex64"
    det = la.det(x)
    assert (
        det.dtype == "complex64"
        and det.tolist() == np.linalg.det(np.zeros(shape, np.complex64)).tolist()
    )
    sign, logabs = la.slogdet(x)
    assert sign.dtype == "complex64" and logabs.dtype == "float32"
    w, v = la.eigh(x)
    assert w.dtype == "float32" and w.shape == shape[:-1] and v.dtype == "complex64"
    assert la.svdvals(x).dtype == "float32"


# --- compositions ------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", CDTYPES)
def test_vecdot_conjugates_the_first_argument(device, rng, dtype):
    a, b = crand(rng, (2, 3, 5), dtype), crand(rng, (5,), dtype)
    got = la.vecdot(arr(a, device), arr(b, device))
    assert got.dtype == dtype
    close(got, np.sum(np.conj(a.astype(np.complex128)) * b, axis=-1), dtype)
    a2, b2 = crand(rng, (4, 3), dtype), crand(rng, (4, 1), dtype)
    got = la.vecdot(arr(a2, device), arr(b2, device), axis=0)
    close(got, np.sum(np.conj(a2.astype(np.complex128)) * b2, axis=0), dtype)
    # x2 real: the result is complex, conj(x1) . x2
    r = rng.standard_normal(5).astype(REAL[dtype])
    got = la.vecdot(arr(a, device), arr(r, device))
    assert got.dtype == dtype
    close(got, np.sum(np.conj(a.astype(np.complex128)) * r, axis=-1), dtype)


@pytest.mark.parametrize("dtype", CDTYPES)
def test_matmul_tensordot_outer(device, rng, dtype):
    a, b = crand(rng, (2, 4, 6), dtype), crand(rng, (6, 3), dtype)
    a128, b128 = a.astype(np.complex128), b.astype(np.complex128)
    got = la.matmul(arr(a, device), arr(b, device))
    assert got.dtype == dtype
    close(got, a128 @ b128, dtype, scale=10)
    got = la.tensordot(arr(a, device), arr(b, device), axes=1)
    close(got, np.tensordot(a128, b128, axes=1), dtype, scale=10)
    c = crand(rng, (4, 6), dtype)
    got = la.tensordot(arr(a, device), arr(c, device), axes=([1, 2], [0, 1]))
    close(got, np.tensordot(a128, c.astype(np.complex128), axes=([1, 2], [0, 1])), dtype, scale=10)
    u, w = crand(rng, 4, dtype), crand(rng, 3, dtype)
    got = la.outer(arr(u, device), arr(w, device))
    assert got.dtype == dtype
    close(got, np.outer(u.astype(np.complex128), w), dtype)


@pytest.mark.parametrize("dtype", CDTYPES)
@pytest.mark.parametrize("offset", [-2, 0, 1, 3])
def test_trace_and_diagonal(device, rng, dtype, offset):
    x = crand(rng, (2, 4, 5), dtype)
    d = la.diagonal(arr(x, device), offset=offset)
    assert d.dtype == dtype
    close(d, np.diagonal(x, offset=offset, axis1=-2, axis2=-1), dtype)
    t = la.trace(arr(x, device), offset=offset)
    assert t.dtype == dtype
    close(t, np.trace(x.astype(np.complex128), offset=offset, axis1=-2, axis2=-1), dtype)


@pytest.mark.parametrize("dtype", CDTYPES)
def test_cross(device, rng, dtype):
    a, b = crand(rng, (4, 3), dtype), crand(rng, (2, 1, 3), dtype)
    got = la.cross(arr(a, device), arr(b, device))
    assert got.dtype == dtype
    close(got, np.cross(a.astype(np.complex128), b.astype(np.complex128)), dtype, scale=10)
    a, b = crand(rng, (3, 4), dtype), crand(rng, (3, 4), dtype)
    got = la.cross(arr(a, device), arr(b, device), axis=-2)
    close(got, np.cross(a.astype(np.complex128), b.astype(np.complex128), axis=-2), dtype, scale=10)


# --- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize("fn", [la.cholesky, la.det, la.eigh, la.inv, la.qr, la.svd])
@pytest.mark.parametrize("dtype", ["float16", "int32", "bool"])
def test_factorizations_still_refuse_other_dtypes(device, fn, dtype):
    x = ignis.zeros((3, 3), dtype=dtype, device=device)
    wanted = (
        "is not supported"
        if dtype == "float16"
        else (r"expected a floating-point array \(float32, float64, complex64 or complex128\)")
    )
    with pytest.raises(ignis.DTypeError, match=rf"linalg\.{fn.__name__}: .*{wanted}"):
        fn(x)


# --- host-side logic: the precision table and cuSOLVER names -------------------------------------


def test_precision_table_covers_the_factor_dtypes():
    assert _cusolver.PRECISION == {
        dt.float32: "S",
        dt.float64: "D",
        dt.complex64: "C",
        dt.complex128: "Z",
    }
    assert set(la._FACTOR_DTYPES) == set(_cusolver.PRECISION)


@pytest.mark.parametrize(
    "name, prec, want",
    [
        ("potrf", "S", "cusolverDnSpotrf"),
        ("potrf", "Z", "cusolverDnZpotrf"),
        ("potrf_bufferSize", "C", "cusolverDnCpotrf_bufferSize"),
        ("potrfBatched", "C", "cusolverDnCpotrfBatched"),
        ("getrs", "Z", "cusolverDnZgetrs"),
        ("geqrf", "C", "cusolverDnCgeqrf"),
        ("orgqr", "D", "cusolverDnDorgqr"),
        ("orgqr", "C", "cusolverDnCungqr"),
        ("orgqr_bufferSize", "Z", "cusolverDnZungqr_bufferSize"),
        ("syevd", "S", "cusolverDnSsyevd"),
        ("syevd", "Z", "cusolverDnZheevd"),
        ("syevd_bufferSize", "C", "cusolverDnCheevd_bufferSize"),
        ("syevjBatched", "D", "cusolverDnDsyevjBatched"),
        ("syevjBatched", "C", "cusolverDnCheevjBatched"),
        ("syevjBatched_bufferSize", "Z", "cusolverDnZheevjBatched_bufferSize"),
        ("gesvd", "Z", "cusolverDnZgesvd"),
    ],
)
def test_c_names(name, prec, want):
    assert _cusolver.c_name(name, prec) == want


def _fake_cdll(skip=()):
    class Fn:
        def __init__(self, name, log):
            self.name, self.log = name, log

        def __call__(self, *args):
            self.log.append((self.name, args))
            if self.name == "cusolverGetProperty":
                args[1]._obj.value = {0: 12, 1: 0, 2: 4}[args[0]]
            if self.name.endswith("_bufferSize"):
                args[-1]._obj.value = 32
            return 0

    class Cdll:
        def __init__(self):
            self.log = []

        def __getattr__(self, name):
            if name in skip:
                raise AttributeError(name)
            return Fn(name, self.log)

    return Cdll()


def test_the_library_binds_the_complex_routines():
    cdll = _fake_cdll()
    lib = _cusolver.CusolverLibrary(cdll, "/x/libcusolver.so.12")
    bound = set(lib._fns)
    for prec in "CZ":
        for name in ("potrf", "getrf", "getrs", "geqrf", "ungqr", "heevd", "gesvd"):
            assert f"cusolverDn{prec}{name}" in bound
        assert f"cusolverDn{prec}syevd" not in bound  # no such C function
        assert f"cusolverDn{prec}orgqr" not in bound
    lib.call("syevd", "Z", 1, 1, 0, 4, 0x1000, 4, 0x2000, 0x3000, 32, 0x4000)
    assert cdll.log[-1] == ("cusolverDnZheevd", (1, 1, 0, 4, 0x1000, 4, 0x2000, 0x3000, 32, 0x4000))
    assert lib.buffer_size("orgqr", "C", 1, 5, 3, 3, 0x1000, 5, 0x2000) == 32
    assert cdll.log[-1][0] == "cusolverDnCungqr_bufferSize"
    assert lib.has("syevjBatched", "C")
    with pytest.raises(OSError, match="has no function cusolverDnZungqr"):
        _cusolver.CusolverLibrary(_fake_cdll(skip={"cusolverDnZungqr"}), "/x/libcusolver.so")
    lib2 = _cusolver.CusolverLibrary(_fake_cdll(skip={"cusolverDnCheevjBatched"}), "/x/l.so")
    assert not lib2.has("syevjBatched", "C") and lib2.has("syevjBatched", "Z")


def test_backend_module_refuses_other_dtypes_before_loading(monkeypatch):
    from ignis._array._cuda_backend import linalg as cuda_linalg

    def never(op, major=None):
        raise AssertionError("the library must not be asked for")

    monkeypatch.setattr(cuda_linalg._cusolver, "require", never)
    x = ignis.zeros((1, 2, 2), dtype="float16")
    with pytest.raises(
        ignis.DTypeError,
        match=r"linalg\.inv: cuSOLVER factors float32, "
        r"float64, complex64 and complex128 matrices, got float16",
    ):
        cuda_linalg._Call(object(), "linalg.inv", x.dtype)


def test_missing_cusolver_names_the_extra_for_complex(monkeypatch):
    def missing():
        raise OSError("libcusolver.so.12: cannot open shared object file")

    monkeypatch.setattr(_cusolver, "_library", _cusolver.LazyLibrary(missing, "cuSOLVER", ""))
    monkeypatch.setattr(_cusolver, "load", _cusolver._library.get)
    from ignis._array._cuda_backend import linalg as cuda_linalg

    x = ignis.zeros((1, 2, 2), dtype="complex64")
    with pytest.raises(
        _cusolver.CusolverNotFoundError,
        match=r"linalg\.eigh on a GPU array needs cuSOLVER.*pip install "
        r'"ignis-cuda\[cusolver-cu1[23]\]"',
    ):
        cuda_linalg.eigh(object(), None, None, None, x)


def test_complex_kernels_compile_for_both_architectures():
    from ignis._array._cuda_backend import linalg as cuda_linalg

    from ignis import CompileOptions, _sources

    names = cuda_linalg.kernel_names()["linalg.cu"]
    for t in ("ignis::complex64", "ignis::complex128"):
        assert f"ignis::linalg::lu_slogdet<{t}>" in names
        assert f"ignis::linalg::zero_triangle<{t}, true>" in names
    src = _sources.read_source("linalg.cu")
    for arch in ("sm_80", "sm_90a"):
        obj = ignis.compile(src, CompileOptions(arch=arch), name_expressions=names)
        assert set(obj.lowered_names) == set(names)
        assert obj.log == "", obj.log


# --- the CUDA module on the host emulation of cuSOLVER, complex -----------------------------------


def _cpu(a):
    return ignis.asarray(np.ascontiguousarray(a), device="cpu")


def _out(shape, dtype):
    return ignis.empty(shape, dtype=dtype, device="cpu")


@pytest.mark.parametrize("dtype", CDTYPES)
@pytest.mark.parametrize("batched", [True, False])
@pytest.mark.parametrize("upper", [False, True])
def test_emulated_cuda_cholesky(monkeypatch, rng, dtype, batched, upper):
    mod, backend, lib = install(monkeypatch, batched)
    x = hpd(rng, (3, 4, 4), dtype)
    out, info = _out(x.shape, dtype), _out((3,), "int32")
    mod.cholesky(backend, out, info, _cpu(x), upper)
    low = np.linalg.cholesky(x.astype(np.complex128))
    close(out, mH(low) if upper else low, dtype, scale=10)
    assert info.tolist() == [0, 0, 0]
    prec = "C" if dtype == "complex64" else "Z"
    assert f"cusolverDn{prec}potrf{'Batched' if batched else ''}" in lib.c_calls


@pytest.mark.parametrize("dtype", CDTYPES)
def test_emulated_cuda_solve_and_slogdet(monkeypatch, rng, dtype):
    mod, backend, lib = install(monkeypatch)
    a, b = general(rng, (2, 4, 4), dtype), crand(rng, (2, 4, 3), dtype)
    a[1, 0] *= -1j
    out, info = _out(b.shape, dtype), _out((2,), "int32")
    mod.solve(backend, out, info, _cpu(a), _cpu(b))
    a128 = a.astype(np.complex128)
    close(out, np.linalg.solve(a128, b.astype(np.complex128)), dtype, scale=10)
    sign, logabs, det = _out((2,), dtype), _out((2,), REAL[dtype]), _out((2,), dtype)
    mod.slogdet(backend, sign, logabs, det, _cpu(a))
    ref_sign, ref_logabs = np.linalg.slogdet(a128)
    close(sign, ref_sign, dtype, scale=10)
    close(logabs, ref_logabs, dtype, scale=10)
    close(det, np.linalg.det(a128), dtype, scale=10)
    prec = "C" if dtype == "complex64" else "Z"
    assert {c[len("cusolverDn")] for c in lib.c_calls} == {prec}  # no real routine was called


@pytest.mark.parametrize("dtype", CDTYPES)
@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (4, 4)])
@pytest.mark.parametrize("complete", [False, True])
def test_emulated_cuda_qr(monkeypatch, rng, dtype, shape, complete):
    mod, backend, lib = install(monkeypatch)
    x = general(rng, (2,) + shape, dtype)
    m, n = shape
    mq = m if complete else min(m, n)
    q, r = _out((2, m, mq), dtype), _out((2, mq, n), dtype)
    mod.qr(backend, q, r, _cpu(x), complete)
    q, r = host(q).astype(np.complex128), host(r).astype(np.complex128)
    np.testing.assert_array_equal(r, np.triu(r))
    close(q @ r, x, dtype, scale=10)
    close(mH(q) @ q, eye_like(q), dtype, scale=10)
    assert "ungqr" in "".join(lib.c_calls) and "orgqr" not in "".join(lib.c_calls)


@pytest.mark.parametrize("dtype", CDTYPES)
@pytest.mark.parametrize("batched", [True, False])
@pytest.mark.parametrize("vectors", [True, False])
def test_emulated_cuda_eigh(monkeypatch, rng, dtype, batched, vectors):
    mod, backend, lib = install(monkeypatch, batched)
    x = herm(rng, (3, 5, 5), dtype)
    junk = x.copy()
    junk[:, np.triu(np.ones((5, 5), bool), 1)] = 50.0 - 3j  # only the lower triangle counts
    w, info = _out((3, 5), REAL[dtype]), _out((3,), "int32")
    v = _out((3, 5, 5), dtype) if vectors else None
    mod.eigh(backend, w, v, info, _cpu(junk))
    a = x.astype(np.complex128)
    ref_w = np.linalg.eigvalsh(a)
    close(w, ref_w, dtype, scale=10)
    if vectors:
        vv = host(v).astype(np.complex128)
        close(a @ vv, vv * ref_w[..., None, :], dtype, scale=10)  # not conj(V): x's own
        close(mH(vv) @ vv, eye_like(vv), dtype, scale=10)
    name = "heevjBatched" if batched else "heevd"
    assert any(c.endswith(name) for c in lib.c_calls)


@pytest.mark.parametrize("dtype", CDTYPES)
@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (4, 4)])
@pytest.mark.parametrize("full", [False, True])
@pytest.mark.parametrize("vectors", [True, False])
def test_emulated_cuda_svd(monkeypatch, rng, dtype, shape, full, vectors):
    mod, backend, _ = install(monkeypatch)
    x = crand(rng, (2,) + shape, dtype)
    m, n = shape
    k = min(m, n)
    s, info = _out((2, k), REAL[dtype]), _out((2,), "int32")
    u = _out((2, m, m if full else k), dtype) if vectors else None
    vh = _out((2, n if full else k, n), dtype) if vectors else None
    mod.svd(backend, u, s, vh, info, _cpu(x), full)
    sn = np.linalg.svd(x.astype(np.complex128), compute_uv=False)
    close(s, sn, dtype, scale=10)
    if vectors:
        uu, vv = host(u).astype(np.complex128), host(vh).astype(np.complex128)
        close((uu[..., :k] * sn[..., None, :]) @ vv[..., :k, :], x, dtype, scale=10)
        close(mH(uu) @ uu, eye_like(uu), dtype, scale=10)
        close(vv @ mH(vv), eye_like(mH(vv)), dtype, scale=10)


# --- CUDA: many small matrices (the batched cuSOLVER paths) and CPU agreement --------------------


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", CDTYPES)
def test_cuda_batched_paths_match_numpy(rng, dtype):
    if _cusolver.load() is None:
        pytest.skip(f"cuSOLVER is not installed ({_cusolver.unavailable_reason()})")
    many = hpd(rng, (300, 8, 8), dtype)  # potrfBatched, heevjBatched
    g = arr(many, "cuda:0")
    ref = many.astype(np.complex128)
    low = la.cholesky(g)
    assert low.device == "cuda:0" and low.dtype == dtype
    close(low, np.linalg.cholesky(ref), dtype, scale=10)
    w, v = la.eigh(g)
    assert w.dtype == REAL[dtype]
    close(w, np.linalg.eigvalsh(ref), dtype, scale=100)
    vv = host(v).astype(np.complex128)
    close(ref @ vv, vv * host(w).astype(np.float64)[..., None, :], dtype, scale=100)
    c = arr(many, "cpu")
    for fn in (la.inv, la.det, la.svdvals, la.matrix_rank):
        got, want = host(fn(g)), host(fn(c))
        assert got.dtype == want.dtype
        close(got, want, dtype, scale=100)
