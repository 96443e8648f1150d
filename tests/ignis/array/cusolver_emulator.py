"""A host emulation of the cuSOLVER functions and linalg.cu kernels that
``ignis._array._cuda_backend.linalg`` calls, so that its column-major bookkeeping (which
matrix cuSOLVER sees, leading dimensions, strides, the U / V^T placement of the SVD) is
checked against NumPy without a GPU.

Each routine works as LAPACK documents it, on column-major matrices at raw host addresses
(the CPU backend's arrays), independently of how the backend module reasons about row-major
storage, in the four precisions (S, D, C, Z). Routines are looked up by their C name
(``ignis._cusolver.c_name``), so a complex call that asks for a real-only name (``Zsyevd``
rather than ``Zheevd``) fails here as it would fail to resolve in cuSOLVER. The complex
routines are the Hermitian / unitary ones: ``heevd`` reads a Hermitian matrix from one
triangle, ``ungqr`` forms ``Q = H(1) ... H(k)`` with ``H = I - tau v v^H``, ``gesvd`` returns
``V^H``. ``install(monkeypatch)`` returns an ``EmulatedBackend`` and routes the module's
library, kernels and device activation here.
"""

from __future__ import annotations

import ctypes

import numpy as np
from ignis._array._cpu_backend import CpuBackend
from ignis._array._device import as_device

from ignis import _cusolver

_DT = {"S": np.float32, "D": np.float64, "C": np.complex64, "Z": np.complex128}


def _real(dtype) -> np.dtype:
    """The real dtype of matching precision (eigenvalues, singular values)."""
    return np.finfo(dtype).dtype


def _wide(dtype) -> type:
    """float64 or complex128: what the emulation computes in."""
    return np.complex128 if np.dtype(dtype).kind == "c" else np.float64


def _hermitian(m: np.ndarray, uplo: int) -> np.ndarray:
    """The Hermitian (real: symmetric) matrix LAPACK reads from one triangle of ``m``
    (uplo 0: lower, 1: upper); the diagonal's imaginary part is ignored, as LAPACK does."""
    m = m.astype(_wide(m.dtype))
    tri = np.tril(m, -1) if uplo == 0 else np.triu(m, 1)
    return tri + tri.conj().T + np.diag(np.diagonal(m).real)


def _mat(ptr: int, rows: int, cols: int, ld: int, dtype) -> np.ndarray:
    """The column-major rows x cols matrix at ``ptr`` with leading dimension ``ld``, as a
    writable NumPy view."""
    item = np.dtype(dtype).itemsize
    assert ptr, "null matrix pointer"
    assert ld >= max(1, rows), (ld, rows)
    nbytes = ((cols - 1) * ld + rows) * item if rows and cols else item
    buf = (ctypes.c_char * nbytes).from_address(ptr)
    return np.ndarray((rows, cols), dtype, buffer=buf, strides=(item, ld * item))


def _vec(ptr: int, n: int, dtype) -> np.ndarray:
    item = np.dtype(dtype).itemsize
    buf = (ctypes.c_char * max(item, n * item)).from_address(ptr)
    return np.ndarray((n,), dtype, buffer=buf)


def _set_info(ptr: int, value: int) -> None:
    _vec(ptr, 1, np.int32)[0] = value


def _householder_qr(a: np.ndarray, tau: np.ndarray) -> None:
    """LAPACK dgeqr2 / zgeqr2 in place: R in the upper triangle, reflectors v (v[0] = 1
    implied) below; H(j) = I - tau_j v v^H, and H(j)^H is applied to the columns on the right
    (zlarfg: H^H (alpha, x) = (beta, 0) with beta real)."""
    m, n = a.shape
    for j in range(min(m, n)):
        x = a[j:, j].copy()
        alpha, norm = x[0], np.linalg.norm(x[1:])
        if norm == 0 and alpha.imag == 0:
            tau[j] = 0
            continue
        beta = -np.copysign(np.sqrt(abs(alpha) ** 2 + norm**2), alpha.real)
        tau[j] = (beta - alpha) / beta  # real for real input
        v = x / (alpha - beta)
        v[0] = 1
        a[j + 1:, j] = v[1:]
        a[j, j] = beta
        if j + 1 < n:
            block = a[j:, j + 1:]
            block -= np.conj(tau[j]) * np.outer(v, v.conj() @ block)


def _orgqr(a: np.ndarray, k: int, tau: np.ndarray) -> None:
    """LAPACK dorg2r / zung2r in place: the first n columns of Q = H(1) ... H(k) from k
    reflectors (H(j) = I - tau_j v v^H)."""
    m, n = a.shape
    q = np.eye(m, n, dtype=a.dtype)
    for j in reversed(range(k)):
        v = np.zeros(m, a.dtype)
        v[j] = 1
        v[j + 1:] = a[j + 1:, j]
        q[j:, :] -= tau[j] * np.outer(v[j:], v[j:].conj() @ q[j:, :])
    a[...] = q


def _lu(a: np.ndarray) -> tuple[np.ndarray, int]:
    """LAPACK dgetrf in place (partial pivoting): 1-based pivots and info."""
    n = a.shape[0]
    ipiv = np.zeros(n, np.int32)
    info = 0
    for j in range(n):
        p = j + int(np.argmax(np.abs(a[j:, j])))
        ipiv[j] = p + 1
        if p != j:
            a[[j, p], :] = a[[p, j], :]
        if a[j, j] == 0:
            info = info or j + 1
            continue
        a[j + 1:, j] /= a[j, j]
        a[j + 1:, j + 1:] -= np.outer(a[j + 1:, j], a[j, j + 1:])
    return ipiv, info


class FakeCusolver:
    """The methods of ``ignis._cusolver.CusolverLibrary`` the backend module uses.

    ``calls`` records the routines by their real-case names (``"syevd"``), ``c_calls`` by the
    C names they resolve to (``"cusolverDnZheevd"``)."""

    def __init__(self, batched: bool = True):
        self.batched = batched
        self.calls: list[str] = []
        self.c_calls: list[str] = []

    def handle(self, device) -> int:
        return 1

    def bind(self, handle: int, stream: int) -> None:
        pass

    def has(self, name: str, prec: str = "D") -> bool:
        return self.batched

    def syevj_params(self) -> int:
        return 7 if self.batched else 0

    def buffer_size(self, name: str, prec: str, handle: int, *args, after=()) -> int:
        return 4

    def call(self, name: str, prec: str, handle: int, *args) -> None:
        full = _cusolver.c_name(name, prec)
        self.calls.append(name)
        self.c_calls.append(full)
        assert full.startswith(f"cusolverDn{prec}"), full
        getattr(self, "_" + full[len("cusolverDn") + 1:])(_DT[prec], *args)

    # --- the routines ---------------------------------------------------------------------

    def _potrf(self, dt, uplo, n, a, lda, work, lwork, info):
        m = _mat(a, n, n, lda, dt)
        sym = _hermitian(m, uplo)
        code = 0
        try:
            low = np.linalg.cholesky(sym)
        except np.linalg.LinAlgError:
            for k in range(1, n + 1):
                try:
                    np.linalg.cholesky(sym[:k, :k])
                except np.linalg.LinAlgError:
                    code = k
                    break
        if not code:
            if uplo == 0:  # A = L L^H
                m[np.tril_indices(n)] = low[np.tril_indices(n)]
            else:  # A = U^H U, U = L^H
                m[np.triu_indices(n)] = low.conj().T[np.triu_indices(n)]
        _set_info(info, code)

    def _potrfBatched(self, dt, uplo, n, ptrs, lda, info, batch):
        addresses = _vec(ptrs, batch, np.int64)
        for b in range(batch):
            self._potrf(dt, uplo, n, int(addresses[b]), lda, 0, 0, info + 4 * b)

    def _getrf(self, dt, m, n, a, lda, work, ipiv, info):
        assert m == n
        mat = _mat(a, n, n, lda, dt)
        work64 = mat.astype(_wide(dt))
        piv, code = _lu(work64)
        mat[...] = work64
        _vec(ipiv, n, np.int32)[...] = piv
        _set_info(info, code)

    def _getrs(self, dt, trans, n, nrhs, a, lda, ipiv, b, ldb, info):
        lu = _mat(a, n, n, lda, dt).astype(_wide(dt))
        piv = _vec(ipiv, n, np.int32)
        low, up = np.tril(lu, -1) + np.eye(n), np.triu(lu)
        perm = np.eye(n)
        for j in range(n):  # P A = L U with the row swaps of the pivots
            p = piv[j] - 1
            perm[[j, p], :] = perm[[p, j], :]
        orig = perm.T @ low @ up
        rhs = _mat(b, n, nrhs, ldb, dt)
        op = {0: orig, 1: orig.T, 2: orig.conj().T}[trans]  # N, T, C (conjugate transpose)
        rhs[...] = np.linalg.solve(op, rhs.astype(_wide(dt)))
        _set_info(info, 0)

    def _geqrf(self, dt, m, n, a, lda, tau, work, lwork, info):
        mat = _mat(a, m, n, lda, dt)
        work64 = mat.astype(_wide(dt))
        t = np.zeros(min(m, n), _wide(dt))
        _householder_qr(work64, t)
        mat[...] = work64
        _vec(tau, min(m, n), dt)[...] = t
        _set_info(info, 0)

    def _orgqr(self, dt, m, n, k, a, lda, tau, work, lwork, info):
        assert m >= n >= k, (m, n, k)
        mat = _mat(a, m, n, lda, dt)
        work64 = mat.astype(_wide(dt))
        _orgqr(work64, k, _vec(tau, k, dt).astype(_wide(dt)))
        mat[...] = work64
        _set_info(info, 0)

    def _ungqr(self, dt, *args):
        assert np.dtype(dt).kind == "c", "ungqr is complex-only"
        self._orgqr(dt, *args)

    def _syevd(self, dt, jobz, uplo, n, a, lda, w, work, lwork, info):
        m = _mat(a, n, n, lda, dt)
        vals, vecs = np.linalg.eigh(_hermitian(m, uplo))
        _vec(w, n, _real(dt))[...] = vals  # W is real (float / double) in every precision
        if jobz == 1:
            m[...] = vecs
        _set_info(info, 0)

    def _heevd(self, dt, *args):
        assert np.dtype(dt).kind == "c", "heevd is complex-only"
        self._syevd(dt, *args)

    def _syevjBatched(self, dt, jobz, uplo, n, a, lda, w, work, lwork, info, params, batch):
        assert params
        item, real_item = np.dtype(dt).itemsize, _real(dt).itemsize
        for b in range(batch):
            self._syevd(dt, jobz, uplo, n, a + b * lda * n * item, lda, w + b * n * real_item,
                        0, 0, info + 4 * b)

    def _heevjBatched(self, dt, *args):
        assert np.dtype(dt).kind == "c", "heevjBatched is complex-only"
        self._syevjBatched(dt, *args)

    def _gesvd(self, dt, jobu, jobvt, m, n, a, lda, s, u, ldu, vt, ldvt, work, lwork, rwork,
               info):
        assert m >= n, "gesvd needs m >= n"
        mat = _mat(a, m, n, lda, dt).astype(_wide(dt))
        jobu, jobvt = chr(jobu), chr(jobvt)
        if jobu == "N" and jobvt == "N":
            _vec(s, n, _real(dt))[...] = np.linalg.svd(mat, compute_uv=False)
        else:
            uu, ss, vv = np.linalg.svd(mat, full_matrices=True)  # vv is V^H
            _vec(s, n, _real(dt))[...] = ss
            cols = {"A": m, "S": n}[jobu]
            _mat(u, m, cols, ldu, dt)[...] = uu[:, :cols]
            assert jobvt == "A"
            _mat(vt, n, n, ldvt, dt)[...] = vv
        _set_info(info, 0)


class _Kernel:
    def __init__(self, name: str):
        self.name = name

    def launch(self, grid, block, args, stream=None):
        name = self.name
        ctype = name[name.index("<") + 1:].split(",")[0].rstrip(">").strip()
        dt = {"float": np.float32, "double": np.float64, "ignis::complex64": np.complex64,
              "ignis::complex128": np.complex128}[ctype]
        if "zero_triangle" in name:
            a, rows, cols, total = args
            view = _vec(a, total, dt).reshape(-1, rows, cols)
            i, j = np.indices((rows, cols))
            mask = (j > i) if "true>" in name else (j < i)
            view[:, mask] = 0
        else:
            lu, ipiv, sign, logabs, det, n, batch = args
            mats = _vec(lu, batch * n * n, dt).reshape(batch, n, n)
            piv = _vec(ipiv, batch * n, np.int32).reshape(batch, n)
            for b in range(batch):
                d = np.diagonal(mats[b]).astype(_wide(dt))
                swaps = int(np.sum(piv[b] != np.arange(1, n + 1)))
                zero = np.any(d == 0)
                sg = 0.0 if zero else (-1.0) ** swaps * np.prod(d / np.abs(d))  # the phases
                la = -np.inf if zero else float(np.sum(np.log(np.abs(d))))
                for ptr, value, kind in ((sign, sg, dt), (logabs, la, _real(dt)),
                                         (det, sg * np.exp(la), dt)):
                    if ptr:
                        _vec(ptr, batch, kind)[b] = value


class _HostBuffer:
    def __init__(self, nbytes: int):
        self.data = np.empty(max(1, nbytes), np.uint8)
        self.ptr = int(self.data.ctypes.data)


class _Stream:
    ptr = 0


class _Gpu:
    ordinal = 0


class EmulatedBackend(CpuBackend):
    """A CPU backend with what the CUDA module reads of a CUDA one (gpu, stream, buffers with
    a ``ptr``); arrays stay ordinary CPU arrays."""

    def __init__(self):
        super().__init__(as_device("cpu"))
        self.gpu = _Gpu()
        self.stream = _Stream()

    def alloc(self, nbytes: int):
        return _HostBuffer(nbytes)


def install(monkeypatch, batched: bool = True):
    """Route the CUDA linalg module to the emulation; returns (module, backend, library)."""
    from ignis._array._cuda_backend import linalg as cuda_linalg

    lib = FakeCusolver(batched)
    monkeypatch.setattr(cuda_linalg._cusolver, "require", lambda op, major=None: lib)
    monkeypatch.setattr(cuda_linalg, "library_kernel", lambda src, name, gpu: _Kernel(name))
    monkeypatch.setattr(cuda_linalg, "activate", lambda gpu: None)
    return cuda_linalg, EmulatedBackend(), lib
