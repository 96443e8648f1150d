"""The ``linalg_*`` kernel families of the CUDA backend: cuSOLVER's dense factorizations
(:mod:`ignis._cusolver`) plus the small kernels of ``cuda_src/linalg.cu``.

Storage order: NvArrays are row-major and cuSOLVER is column-major. A contiguous row-major
matrix ``X`` (m x n) is, read column-major, ``X^T`` (n x m, leading dimension n), so each
routine is set up on whichever of the two it needs, and the conversions are copies between
device arrays (a transposed view copied into a contiguous one), never round trips through the
host:

* Cholesky factors ``X^T = X`` in place: the column-major lower factor is the row-major upper
  one, so ``upper=True`` asks cuSOLVER for its lower triangle and ``upper=False`` for its upper.
* LU factors ``X^T``; ``getrs`` with the transpose flag then solves ``X Y = B`` for a
  column-major ``B`` (the row-major ``B^T``); the determinant of ``X^T`` is that of ``X``.
* QR, eigh and tall SVD factor a transposed copy, so cuSOLVER sees ``X`` itself; a wide or
  square SVD factors ``X^T`` (tall, as ``gesvd`` needs) directly: ``X^T = U S V^T`` makes
  ``X = V S U^T``, and cuSOLVER's column-major ``U`` and ``V^T`` are, in memory, exactly the
  row-major ``Vh`` and ``U`` of ``X`` (no copy at all).

Complex matrices (complex64, complex128) take the same paths with cuSOLVER's C / Z routines
(:data:`ignis._cusolver.PRECISION`; ``heevd``, ``heevjBatched`` and ``ungqr`` for the real
``syevd``, ``syevjBatched`` and ``orgqr``). Storage order changes are plain transposes, never
conjugations, and the reasoning above carries over with ``^H`` where the factorization has a
transpose:

* Cholesky: the column-major reading of a Hermitian ``X`` is ``X^T = conj(X)``; its factor
  ``conj(X) = L' L'^H`` read row-major is ``U = L'^T`` with ``X = U^H U`` (and likewise for
  the lower factor), so the real-case triangle flags are right as they are.
* LU: ``getrs``' flag is the plain transpose (``OP_T``), which is what turns ``X^T`` back
  into ``X``; ``det(X^T) = det(X)``.
* eigh factors ``X`` itself (transposed copy, lower triangle, as NumPy reads it), so the
  eigenvectors need no conjugation.
* SVD: with ``X^T = U S V^H``, ``X = conj(V) S U^T``, and the column-major ``V^H`` read
  row-major is exactly ``conj(V)``: no conjugation either.

Eigenvalues and singular values are real (float32 / float64 for complex64 / complex128), so
their per-matrix steps use the real item size.

Stacks run as one batched call where cuSOLVER has one (``potrfBatched``; ``syevjBatched`` for
eigh of many matrices up to 32 x 32), else as one call per matrix, all queued on the backend's
stream with one workspace. Every call writes its ``devInfo`` into the family's ``info`` array
on the device; nothing here synchronizes the host (the front end reads ``info`` once).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ... import _bindings, _cusolver
from ... import _dtypes as dt
from ..._device import activate
from ..._errors import DTypeError
from .. import _creation
from ._kernels import CTYPE, library_kernel

if TYPE_CHECKING:
    from ..array import NvArray

__all__ = ["cholesky", "solve", "slogdet", "qr", "eigh", "svd", "kernel_names"]

SOURCE = "linalg.cu"
THREADS = 256
# The dtypes the factorizations take and their cuSOLVER precision letters: one table, in
# _cusolver.
_PREC = _cusolver.PRECISION
# syevjBatched's limit on the matrix size (cuSOLVER documents n <= 32).
SYEVJ_BATCHED_MAX_N = 32
_INT32 = 4


# --- kernel names (pure: the CPU tests compile every one of them) -------------------------------


def zero_triangle_name(dtype: dt.DType, keep_lower: bool) -> str:
    return f"ignis::linalg::zero_triangle<{CTYPE[dtype]}, {'true' if keep_lower else 'false'}>"


def slogdet_name(dtype: dt.DType) -> str:
    """The ``lu_slogdet`` kernel of ``dtype``: for complex input its ``sign`` and ``det`` are
    complex, ``logabsdet`` is of the real dtype of matching precision."""
    return f"ignis::linalg::lu_slogdet<{CTYPE[dtype]}>"


def kernel_names() -> dict[str, list[str]]:
    """Every name expression this module can launch, by source file."""
    return {
        SOURCE: [zero_triangle_name(d, k) for d in _PREC for k in (True, False)]
        + [slogdet_name(d) for d in _PREC]
    }


# --- helpers -----------------------------------------------------------------------------------


class _Call:
    """What every routine needs: the library, the precision letter, the handle bound to the
    backend's stream, and the temporaries to keep alive until all the work is queued.

    ``item`` is the byte size of the matrices' elements (and of the workspace's), ``real_item``
    that of the real results (eigenvalues, singular values): they differ for complex dtypes.
    """

    def __init__(self, backend: Any, op: str, dtype: dt.DType):
        prec = _PREC.get(dtype)
        if prec is None:  # the front end refuses these first; a direct call gets this
            raise DTypeError(
                f"{op}: cuSOLVER factors float32, float64, complex64 and complex128 matrices, "
                f"got {dtype.name}"
            )
        self.lib = _cusolver.require(op, _cuda_major())
        self.backend = backend
        self.prec = prec
        self.item = dtype.itemsize
        self.real_item = dt.real_of(dtype).itemsize
        activate(backend.gpu)
        self.stream = backend.stream
        self.handle = self.lib.handle(backend.gpu)
        self.lib.bind(self.handle, self.stream.ptr)
        self.keep: list[Any] = []

    def __call__(self, name: str, *args: Any) -> None:
        self.lib.call(name, self.prec, self.handle, *args)

    def lwork(self, name: str, *args: Any, after: tuple[Any, ...] = ()) -> int:
        return self.lib.buffer_size(name, self.prec, self.handle, *args, after=after)

    def workspace(self, elements: int) -> int:
        """Device scratch of ``elements`` values, allocated on the stream (freed after the
        queued work in stream order once the last reference goes)."""
        buf = self.backend.alloc(max(1, elements) * self.item)
        self.keep.append(buf)
        return int(buf.ptr)

    def new(self, shape: tuple[int, ...], dtype: dt.DType) -> NvArray:
        arr = _creation._new(shape, dtype, self.backend.device)
        self.keep.append(arr)
        return arr

    def copy_of(self, src: NvArray) -> NvArray:
        """A contiguous copy of ``src`` (any strides: a transposed view is transposed here)."""
        arr = self.new(src.shape, src.dtype)
        self.backend.copy(arr, src)
        return arr


def _cuda_major() -> int | None:
    try:
        return _bindings.bindings_major()
    except Exception:  # pragma: no cover - no bindings: the extra cannot be told
        return None


def _ptr(arr: NvArray) -> int:
    return int(arr._backend.data_ptr(arr))


def _t(arr: NvArray) -> NvArray:
    return arr.swapaxes(-1, -2)


def _launch(backend: Any, name: str, count: int, args: list[Any]) -> None:
    grid = max(1, min(-(-count // THREADS), 65535 * 8))
    library_kernel(SOURCE, name, backend.gpu).launch(grid, THREADS, args, stream=backend.stream)


def _zero_triangle(backend: Any, a: NvArray, keep_lower: bool) -> None:
    batch, rows, cols = a.shape
    total = batch * rows * cols
    if total:
        _launch(backend, zero_triangle_name(a.dtype, keep_lower), total,
                [_ptr(a), rows, cols, total])


def _pointer_array(c: _Call, base: NvArray, batch: int, stride_bytes: int) -> int:
    """A device array of the ``batch`` matrix addresses ``base + i * stride_bytes`` (made on
    the device by arange: no host copy)."""
    ptrs = c.new((batch,), dt.int64)
    c.backend.arange(ptrs, _ptr(base), stride_bytes)
    return _ptr(ptrs)


# --- the families ------------------------------------------------------------------------------


def cholesky(backend: Any, out: NvArray, info: NvArray, x: NvArray, upper: bool) -> None:
    batch, n, _ = x.shape
    c = _Call(backend, "linalg.cholesky", x.dtype)
    backend.copy(out, x)  # factored in place
    uplo = _cusolver.FILL_LOWER if upper else _cusolver.FILL_UPPER
    step = n * n * c.item
    if batch > 1 and c.lib.has("potrfBatched", c.prec):
        c("potrfBatched", uplo, n, _pointer_array(c, out, batch, step), n, _ptr(info), batch)
    else:
        base = _ptr(out)
        lwork = c.lwork("potrf", uplo, n, base, n)
        work = c.workspace(lwork)
        for b in range(batch):
            c("potrf", uplo, n, base + b * step, n, work, lwork, _ptr(info) + b * _INT32)
    _zero_triangle(backend, out, keep_lower=not upper)


def _lu(c: _Call, a: NvArray, ipiv: NvArray, info: NvArray) -> None:
    """LU factorizations (getrf) in place of the column-major matrices of contiguous ``a``
    (batch, n, n); pivots into ``ipiv`` (batch, n), devInfo into ``info`` (batch,)."""
    batch, n, _ = a.shape
    base = _ptr(a)
    lwork = c.lwork("getrf", n, n, base, n)
    work = c.workspace(lwork)
    step = n * n * c.item
    for b in range(batch):
        c("getrf", n, n, base + b * step, n, work, _ptr(ipiv) + b * n * _INT32,
          _ptr(info) + b * _INT32)


def solve(backend: Any, out: NvArray, info: NvArray, a: NvArray, b: NvArray) -> None:
    batch, n, k = b.shape
    c = _Call(backend, "linalg.solve", a.dtype)
    lu = c.copy_of(a)  # column-major a^T
    ipiv = c.new((batch, n), dt.int32)
    _lu(c, lu, ipiv, info)
    rhs = c.copy_of(_t(b))  # (batch, k, n) row-major: column-major b (n x k)
    scratch_info = c.new((batch,), dt.int32)  # getrs only reports bad arguments
    step_a, step_b = n * n * c.item, n * k * c.item
    for i in range(batch):
        # (a^T)^T y = b: the transpose flag turns the factored a^T back into a.
        c("getrs", _cusolver.OP_T, n, k, _ptr(lu) + i * step_a, n,
          _ptr(ipiv) + i * n * _INT32, _ptr(rhs) + i * step_b, n,
          _ptr(scratch_info) + i * _INT32)
    backend.copy(out, _t(rhs))


def slogdet(backend: Any, sign: NvArray | None, logabsdet: NvArray | None,
            det: NvArray | None, x: NvArray) -> None:
    batch, n, _ = x.shape
    c = _Call(backend, "linalg.slogdet", x.dtype)
    lu = c.copy_of(x)
    ipiv = c.new((batch, n), dt.int32)
    info = c.new((batch,), dt.int32)  # a zero pivot shows on U's diagonal
    _lu(c, lu, ipiv, info)
    outs = [0 if o is None else _ptr(o) for o in (sign, logabsdet, det)]
    _launch(backend, slogdet_name(x.dtype), batch, [_ptr(lu), _ptr(ipiv), *outs, n, batch])


def qr(backend: Any, q: NvArray, r: NvArray, x: NvArray, complete: bool) -> None:
    batch, m, n = x.shape
    k = min(m, n)
    mq = q.shape[-1]  # m for complete, k for reduced
    c = _Call(backend, "linalg.qr", x.dtype)
    a = c.copy_of(_t(x))  # (batch, n, m) row-major: x column-major (m x n, lda m)
    tau = c.new((batch, k), x.dtype)
    scratch_info = c.new((batch,), dt.int32)  # geqrf / orgqr only report bad arguments
    base, step = _ptr(a), m * n * c.item
    lwork = c.lwork("geqrf", m, n, base, m)
    work = c.workspace(lwork)
    for b in range(batch):
        c("geqrf", m, n, base + b * step, m, _ptr(tau) + b * k * c.item, work, lwork,
          _ptr(scratch_info) + b * _INT32)
    # R: the upper triangle of the first mq rows of the factored column-major matrix.
    backend.copy(r, _t(a)[:, :mq, :])
    _zero_triangle(backend, r, keep_lower=False)
    # Q: orgqr (ungqr for complex) expands the k reflectors (the first k columns) into mq
    # columns of m rows.
    qc = c.new((batch, mq, m), x.dtype)  # column-major (m x mq)
    if mq > k:
        backend.fill(qc, 0)  # orgqr sets the extra columns itself; no stale NaN to meet
    backend.copy(qc[:, :k, :], a[:, :k, :])
    qbase, qstep = _ptr(qc), m * mq * c.item
    lwork = c.lwork("orgqr", m, mq, k, qbase, m, _ptr(tau))
    work = c.workspace(lwork)
    for b in range(batch):
        c("orgqr", m, mq, k, qbase + b * qstep, m, _ptr(tau) + b * k * c.item, work, lwork,
          _ptr(scratch_info) + b * _INT32)
    backend.copy(q, _t(qc))


def eigh(backend: Any, w: NvArray, v: NvArray | None, info: NvArray, x: NvArray) -> None:
    batch, n, _ = x.shape
    c = _Call(backend, "linalg.eigh", x.dtype)
    # x itself, column-major, read from its lower triangle as NumPy reads it. (Not x^T: for a
    # Hermitian x that is conj(x), whose eigenvectors are the conjugates of x's.)
    a = c.copy_of(_t(x))
    jobz = _cusolver.EIG_NOVECTOR if v is None else _cusolver.EIG_VECTOR
    uplo = _cusolver.FILL_LOWER
    base, wbase = _ptr(a), _ptr(w)
    params = c.lib.syevj_params() if batch > 1 and n <= SYEVJ_BATCHED_MAX_N else 0
    if params and c.lib.has("syevjBatched", c.prec):
        lwork = c.lwork("syevjBatched", jobz, uplo, n, base, n, wbase, after=(params, batch))
        work = c.workspace(lwork)
        c("syevjBatched", jobz, uplo, n, base, n, wbase, work, lwork, _ptr(info), params, batch)
    else:
        lwork = c.lwork("syevd", jobz, uplo, n, base, n, wbase)
        work = c.workspace(lwork)
        step = n * n * c.item
        for b in range(batch):
            c("syevd", jobz, uplo, n, base + b * step, n, wbase + b * n * c.real_item, work,
              lwork, _ptr(info) + b * _INT32)
    if v is not None:
        backend.copy(v, _t(a))  # eigenvectors: cuSOLVER's columns, x's columns again here


def svd(backend: Any, u: NvArray | None, s: NvArray, vh: NvArray | None, info: NvArray,
        x: NvArray, full_matrices: bool) -> None:
    batch, m, n = x.shape
    k = min(m, n)
    c = _Call(backend, "linalg.svd", x.dtype)
    vectors = u is not None
    wide = m <= n
    # cuSOLVER's matrix A (rows x cols, rows >= cols, column-major, lda = rows).
    if wide:
        a = c.copy_of(x)  # A = x^T
        rows, cols = n, m
    else:
        a = c.copy_of(_t(x))  # A = x
        rows, cols = m, n
    ku = rows if full_matrices else cols  # columns of cuSOLVER's U
    if not vectors:
        jobu = jobvt = ord("N")
        u_dst = vt_dst = None
    else:
        jobu, jobvt = ord("A" if full_matrices else "S"), ord("A")
        if wide:  # U of A is Vh of x, V^T of A is U of x, both as they lie in memory
            u_dst, vt_dst = vh, u
        else:  # transposed back below
            u_dst, vt_dst = c.new((batch, ku, rows), x.dtype), c.new((batch, cols, cols), x.dtype)
    base, sbase = _ptr(a), _ptr(s)
    lwork = c.lwork("gesvd", rows, cols)
    work = c.workspace(lwork)
    step = rows * cols * c.item
    u_step, vt_step = rows * ku * c.item, cols * cols * c.item
    for b in range(batch):
        pu = 0 if u_dst is None else _ptr(u_dst) + b * u_step
        pvt = 0 if vt_dst is None else _ptr(vt_dst) + b * vt_step
        c("gesvd", jobu, jobvt, rows, cols, base + b * step, rows, sbase + b * k * c.real_item,
          pu, rows, pvt, cols, work, lwork, 0, _ptr(info) + b * _INT32)
    if vectors and not wide:
        backend.copy(u, _t(u_dst))
        backend.copy(vh, _t(vt_dst))
