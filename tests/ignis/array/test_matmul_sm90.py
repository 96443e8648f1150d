"""The Hopper GEMM of float16 / bfloat16 / TF32 (``gemm_wgmma`` in cuda_src/gemm_sm90.cu, warpgroup
MMA fed by TMA, built for sm_90a): when the own-kernel path runs it (the ``matmul.wgmma``
setting, compute capability 9.0, operands TMA can read), how it is launched (pure planning and a
stand-in H200), that every instance builds within its registers, and on an H200 that it gives
NumPy's float64 products within the rounding bound and agrees with the mma.sync kernel."""

from __future__ import annotations

import math
import re
import struct
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from array_helpers import PRODUCT_TOL as TOL
from array_helpers import bound_check
from ignis._array._cuda_backend import matmul as mm
from ignis._array._cuda_backend import matmul_sm90 as sm90
from test_cuda_matmul import NP, TF32_TOL, check_out_views, dev, rand, reference

import ignis
from ignis import _dtypes as dt
from ignis import _sources

CXX = {"bfloat16": "ignis::bfloat16", "float16": "ignis::float16"}
SMEM_LIMIT = 227 * 1024  # opt-in shared memory of one block on compute capability 9.0


def mat(ptr=1 << 20, rs=64, cs=1, bs=()):
    return mm.Mat(ptr, rs, cs, bs)


def plan(
    dtype=dt.bfloat16,
    cc=(9, 0),
    batch=(),
    m=300,
    n=200,
    k=96,
    a=None,
    b=None,
    c=None,
    alpha=1.0,
    beta=0.0,
    tile_n=128,
    sm_count=None,
):
    a = a if a is not None else mat(1 << 20, k, 1)
    b = b if b is not None else mat(1 << 24, n, 1)
    c = c if c is not None else mat(1 << 28, n, 1)
    return sm90.plan_wgmma_gemm(dtype, cc, batch, m, n, k, a, b, c, alpha, beta, tile_n, sm_count)


def unpack(args: bytes) -> dict:
    names = (
        "m",
        "n",
        "k",
        "c_rs",
        "c_cs",
        "c_bs_in",
        "c_bs_out",
        "batch_inner",
        "batch",
        "alpha",
        "beta",
        "tiles_m",
        "tiles_n",
        "a_batched",
        "b_batched",
    )
    return dict(zip(names, struct.unpack("<9q2f4i", args), strict=True))


# --- planning (pure) ---------------------------------------------------------------------------


@pytest.mark.parametrize("tile_n", [128, 256])
def test_plan_of_row_major_operands(tile_n):
    m, n, k = 300, 520, 100  # partial tiles along every dim; rows of 200 and 1040 bytes
    launch = plan(
        m=m,
        n=n,
        k=k,
        a=mat(1 << 20, 104, 1),
        b=mat(1 << 24, 520, 1),
        c=mat(1 << 28, 530, 1),
        alpha=0.5,
        beta=2.0,
        tile_n=tile_n,
    )
    stages = {128: 6, 256: 4}[tile_n]
    assert launch.kernel == (
        f"ignis::gemm90::gemm_wgmma<ignis::bfloat16, {tile_n}, {stages}, true, false>"
    )
    tiles_m, tiles_n = math.ceil(m / 128), math.ceil(n / tile_n)
    assert launch.grid == (tiles_m * tiles_n, 1, 1)
    # the ring of A (128 x 64) and B (64 x tile_n) tiles, 2 mbarriers each, 1 KiB of alignment
    smem = 1024 + stages * (128 * 64 + 64 * tile_n) * 2 + stages * 16
    assert launch.shared_mem == sm90.wgmma_smem(tile_n) == smem and smem <= SMEM_LIMIT
    # A row-major: K innermost, one copy = 64 K x 128 rows; B row-major: N innermost, 64 x 64
    a, b = launch.a_map, launch.b_map
    assert (a.address, a.dtype, a.dims, a.box) == (
        1 << 20,
        "bfloat16",
        (k, m, 1, 1),
        (64, 128, 1, 1),
    )
    assert a.strides[0] == 104 * 2
    assert (b.address, b.dims, b.box) == (1 << 24, (n, k, 1, 1), (64, 64, 1, 1))
    assert b.strides[0] == 520 * 2
    # the one-element batch dims take valid strides (multiples of 16 bytes, never stepped)
    assert all(s % 16 == 0 and s > 0 for s in a.strides + b.strides)
    assert launch.c == 1 << 28
    assert unpack(launch.args) == dict(
        m=m,
        n=n,
        k=k,
        c_rs=530,
        c_cs=1,
        c_bs_in=0,
        c_bs_out=0,
        batch_inner=1,
        batch=1,
        alpha=0.5,
        beta=2.0,
        tiles_m=tiles_m,
        tiles_n=tiles_n,
        a_batched=0,
        b_batched=0,
    )


def test_plan_of_transposed_views():
    m, n, k = 130, 72, 256
    # A = X^T of a row-major (K, M) X: M innermost, read MN-major, copies of 64 M x 64 K
    launch = plan(m=m, n=n, k=k, a=mat(1 << 20, 1, 136), b=mat(1 << 24, 72, 1))
    assert launch.kernel.endswith(", false, false>")
    assert launch.a_map.dims == (m, k, 1, 1) and launch.a_map.strides[0] == 136 * 2
    assert launch.a_map.box == (64, 64, 1, 1)
    # B = W^T of a row-major (N, K) W (x @ w.T): K innermost, read K-major, 64 K x tile_n
    for tile_n in (128, 256):
        launch = plan(m=m, n=n, k=k, b=mat(1 << 24, 1, 256), tile_n=tile_n)
        assert launch.kernel.endswith(", true, true>")
        assert launch.b_map.dims == (k, n, 1, 1) and launch.b_map.strides[0] == 512
        assert launch.b_map.box == (64, tile_n, 1, 1)


def test_plan_of_batches():
    m, n, k = 64, 64, 64
    # (3, M, K) @ (K, N): B is shared (broadcast): one element along its batch dim
    launch = plan(
        batch=(3,),
        m=m,
        n=n,
        k=k,
        a=mat(bs=(m * k,)),
        b=mat(1 << 24, n, 1, (0,)),
        c=mat(1 << 28, n, 1, (m * n,)),
    )
    args = unpack(launch.args)
    assert launch.grid == (3, 1, 1)  # one block a tile (no sm_count): 1 tile x 3 matrices
    assert (args["batch"], args["batch_inner"], args["a_batched"], args["b_batched"]) == (
        3,
        3,
        1,
        0,
    )
    assert args["c_bs_in"] == m * n
    assert launch.a_map.dims == (k, m, 3, 1) and launch.a_map.strides[1] == m * k * 2
    assert launch.b_map.dims == (n, k, 1, 1)
    # (2, 1, M, K) @ (1, 3, K, N): two batch dims that do not merge, each broadcast by one
    launch = plan(
        batch=(2, 3),
        m=m,
        n=n,
        k=k,
        a=mat(bs=(m * k, 0)),
        b=mat(1 << 24, n, 1, (0, k * n)),
        c=mat(1 << 28, n, 1, (3 * m * n, m * n)),
    )
    args = unpack(launch.args)
    assert launch.grid == (6, 1, 1)
    assert (args["batch"], args["batch_inner"], args["a_batched"], args["b_batched"]) == (
        6,
        3,
        2,
        1,
    )
    assert (args["c_bs_in"], args["c_bs_out"]) == (m * n, 3 * m * n)
    assert launch.a_map.dims == (k, m, 1, 2) and launch.a_map.strides[2] == m * k * 2
    assert launch.b_map.dims == (n, k, 3, 1) and launch.b_map.strides[1] == k * n * 2
    # a contiguous stack merges into one batch dim; a huge batch is one long grid
    launch = plan(
        batch=(4, 5),
        m=m,
        n=n,
        k=k,
        a=mat(bs=(5 * m * k, m * k)),
        b=mat(1 << 24, n, 1, (5 * k * n, k * n)),
        c=mat(1 << 28, n, 1, (5 * m * n, m * n)),
    )
    assert unpack(launch.args)["batch_inner"] == 20 and launch.a_map.dims[2:] == (20, 1)
    big = plan(
        batch=(200_000,),
        m=m,
        n=n,
        k=k,
        a=mat(bs=(m * k,)),
        b=mat(1 << 24, n, 1, (0,)),
        c=mat(1 << 28, n, 1, (m * n,)),
    )
    assert big.grid == (200_000, 1, 1)


def test_tf32_plans_take_k_major_float32_operands_only():
    m, n, k = 300, 200, 96
    a = mat(1 << 20, k, 1)  # row-major: K-major
    b_t = mat(1 << 24, 1, k)  # B = W^T of a row-major (n, k) W: K-major
    b_row = mat(1 << 24, n, 1)  # row-major B: N innermost
    c = mat(1 << 28, n, 1)
    launch = sm90.plan_wgmma_gemm(
        dt.float32, (9, 0), (), m, n, k, a, b_t, c, 1.0, 0.0, 256, None, True
    )
    assert launch.kernel == "ignis::gemm90::gemm_wgmma<float, 256, 4, true, true>"
    # a copy moves one 128-byte row of K: 32 float32 elements
    assert launch.a_map.box == (32, 128, 1, 1) and launch.b_map.box == (32, 256, 1, 1)
    assert launch.a_map.dims == (k, m, 1, 1) and launch.b_map.dims == (k, n, 1, 1)
    assert launch.a_map.dtype == "float32" and launch.shared_mem == sm90.wgmma_smem(256)
    # B with N innermost, or A a transposed view: TF32's wgmma cannot read them
    for a_, b_ in ((a, b_row), (mat(1 << 20, 1, m), b_t)):
        assert (
            sm90.plan_wgmma_gemm(
                dt.float32, (9, 0), (), m, n, k, a_, b_, c, 1.0, 0.0, 128, None, True
            )
            is None
        )
    # float32 without TF32 allowed never takes it
    assert sm90.plan_wgmma_gemm(dt.float32, (9, 0), (), m, n, k, a, b_t, c, 1.0, 0.0) is None
    assert sm90.k_major(m, k, a, True, 4) and not sm90.k_major(k, n, b_row, False, 4)
    assert sm90.k_major(k, n, b_t, False, 4)
    # K of one element: N is then the inner dim, a 4-byte stride TMA cannot take (copied)
    assert not sm90.k_major(1, n, b_row, False, 4)
    # K-major but not readable by TMA: rows of 129 float32 (516 bytes), a base off 16 bytes
    assert not sm90.k_major(m, 129, mat(1 << 20, 129, 1), True, 4)
    assert not sm90.k_major(m, k, mat((1 << 20) + 4, k, 1), True, 4)


def test_persistent_plans_launch_at_most_one_block_a_multiprocessor():
    m, n, k = 1000, 1000, 64  # 8 x 4 tiles of 128 x 256 a matrix
    kwargs = dict(m=m, n=n, k=k, a=mat(1 << 20, k, 1), b=mat(1 << 24, n, 1), c=mat(1 << 28, n, 1))
    assert plan(tile_n=256, **kwargs).grid == (32, 1, 1)
    assert plan(tile_n=256, sm_count=132, **kwargs).grid == (32, 1, 1)  # fewer tiles than SMs
    assert plan(tile_n=256, sm_count=20, **kwargs).grid == (20, 1, 1)
    # batches count: 5 matrices x 32 tiles over 132 blocks, the same arguments otherwise
    batched = dict(
        kwargs,
        a=mat(1 << 20, k, 1, (m * k,)),
        b=mat(1 << 24, n, 1, (0,)),
        c=mat(1 << 28, n, 1, (m * n,)),
    )
    one = plan(batch=(5,), tile_n=256, **batched)
    many = plan(batch=(5,), tile_n=256, sm_count=132, **batched)
    assert one.grid == (160, 1, 1) and many.grid == (132, 1, 1)
    assert one.args == many.args and one.kernel == many.kernel


def test_plan_of_single_rows_and_columns():
    # M = 1 and K = 1: the dim of one element is never stepped, any stride serves
    launch = plan(m=1, n=64, k=8, a=mat(rs=3, cs=1))
    assert launch is not None and launch.a_map.dims[:2] == (8, 1)
    launch = plan(m=64, n=1, k=1, a=mat(rs=8, cs=5), b=mat(1 << 24, 7, 3), c=mat(1 << 28, 1, 1))
    assert launch is not None and launch.a_map.dims[:2] == (1, 64)


@pytest.mark.parametrize(
    "case,changes",
    [
        ("another architecture", dict(cc=(8, 0))),
        ("a later architecture", dict(cc=(10, 0))),
        ("float32", dict(dtype=dt.float32)),
        ("float64", dict(dtype=dt.float64)),
        ("k = 0", dict(k=0)),
        ("A's base not 16-byte aligned", dict(a=mat((1 << 20) + 2, 96, 1))),
        ("B's base not 16-byte aligned", dict(b=mat((1 << 24) + 8, 200, 1))),
        ("A's rows 17 elements apart", dict(k=17, a=mat(rs=17, cs=1))),
        ("B's rows 100 elements apart", dict(n=100, b=mat(1 << 24, 100, 1))),
        ("A strided in both dims", dict(a=mat(rs=192, cs=2))),
        ("B strided in both dims", dict(b=mat(1 << 24, 400, 2))),
        ("a negative row stride", dict(a=mat(rs=-96, cs=1))),
        (
            "an unaligned batch stride",
            dict(
                batch=(2,),
                a=mat(bs=(300 * 96 + 1,)),
                b=mat(1 << 24, 200, 1, (0,)),
                c=mat(1 << 28, 200, 1, (300 * 200,)),
            ),
        ),
        (
            "a negative batch stride",
            dict(
                batch=(2,),
                a=mat(bs=(-300 * 96,)),
                b=mat(1 << 24, 200, 1, (0,)),
                c=mat(1 << 28, 200, 1, (300 * 200,)),
            ),
        ),
        (
            "three batch dims",
            dict(
                batch=(2, 2, 2),
                a=mat(bs=(0, 96 * 300, 0)),
                b=mat(1 << 24, 200, 1, (96 * 200, 0, 96 * 200)),
                c=mat(1 << 28, 200, 1, (4 * 60000, 2 * 60000, 60000)),
            ),
        ),
        ("an unknown tile", dict(tile_n=64)),
    ],
)
def test_plan_declines_what_it_cannot_take(case, changes):
    assert plan() is not None  # (the defaults are a product it takes)
    assert plan(**changes) is None, case


# --- a model of the kernel's shared-memory traffic ------------------------------------------------
# The TMA copies and the wgmma descriptors of gemm_wgmma, replayed on the host for one output
# tile: each copy writes its box into a byte-addressed shared memory with the 128-byte swizzle
# (the 16-byte chunk at bits 4-6 of an address XORed with bits 7-9, tma.cuh), and each wgmma
# reads its operands where the PTX ISA's canonical 128-byte-swizzled layouts put them for the
# kernel's descriptor start addresses, LBO and SBO (wgmma.cuh). The product of what was read
# must be the tile of A @ B: this checks the kernel's boxes, panel offsets and K steps.


def swizzle(addr: int) -> int:
    return addr ^ (((addr >> 7) & 7) << 4)


def tma_box(
    smem: dict, dst: int, mat: np.ndarray, inner0: int, outer0: int, box_inner: int, box_outer: int
) -> None:
    """Copy mat[outer0 + r, inner0 + c] (zeros outside) to row r, element c of a swizzled tile."""
    for r in range(box_outer):
        for c in range(box_inner):
            i, j = outer0 + r, inner0 + c
            v = mat[i, j] if i < mat.shape[0] and j < mat.shape[1] else 0.0
            smem[swizzle(dst + r * 128 + c * 2)] = v


def read_kmajor(smem: dict, start: int, rows: int) -> np.ndarray:
    """(rows x 16) operand of a K-major descriptor: 8-row groups SBO = 1024 bytes apart."""
    return np.array(
        [
            [smem[swizzle(start + (i // 8) * 1024 + (i % 8) * 128 + j * 2)] for j in range(16)]
            for i in range(rows)
        ]
    )


def read_mnmajor(smem: dict, start: int, rows: int, lbo: int) -> np.ndarray:
    """(rows x 16) operand (MN x K) of an MN-major descriptor: 64-element panels of MN ``lbo``
    bytes apart, 8-row groups of K SBO = 1024 bytes apart."""
    return np.array(
        [
            [
                smem[
                    swizzle(
                        start + (i // 64) * lbo + (j // 8) * 1024 + (j % 8) * 128 + (i % 64) * 2
                    )
                ]
                for j in range(16)
            ]
            for i in range(rows)
        ]
    )


def model_tile(
    a: np.ndarray, b: np.ndarray, m0: int, n0: int, tile_n: int, a_kmajor: bool, b_kmajor: bool
) -> np.ndarray:
    """The 128 x tile_n tile at (m0, n0) as gemm_wgmma computes it (one buffer, every K step)."""
    k = a.shape[1]
    a_bytes, panel = 128 * 64 * 2, 64 * 64 * 2
    acc = np.zeros((128, tile_n))
    for k0 in range(0, k, 64):
        smem: dict = {}
        a_dst, b_dst = 0, a_bytes
        if a_kmajor:  # map (K, M): box 64 x 128 at (k0, m0)
            tma_box(smem, a_dst, a, k0, m0, 64, 128)
        else:  # map (M, K) of A^T: boxes 64 x 64 at (m0 + 64 q, k0)
            for q in range(2):
                tma_box(smem, a_dst + q * panel, a.T, m0 + 64 * q, k0, 64, 64)
        if b_kmajor:  # map (K, N) of B^T: box 64 x tile_n at (k0, n0)
            tma_box(smem, b_dst, b.T, k0, n0, 64, tile_n)
        else:  # map (N, K): boxes 64 x 64 at (n0 + 64 q, k0)
            for q in range(tile_n // 64):
                tma_box(smem, b_dst + q * panel, b, n0 + 64 * q, k0, 64, 64)
        for cg in range(2):
            for kk in range(4):
                if a_kmajor:
                    op_a = read_kmajor(smem, a_dst + cg * 64 * 128 + kk * 32, 64)
                else:
                    op_a = read_mnmajor(smem, a_dst + cg * panel + kk * 16 * 128, 64, panel)
                for h in range(tile_n // 128):
                    if b_kmajor:
                        op_b = read_kmajor(smem, b_dst + h * 128 * 128 + kk * 32, 128)
                    else:
                        op_b = read_mnmajor(smem, b_dst + h * 2 * panel + kk * 16 * 128, 128, panel)
                    acc[64 * cg : 64 * cg + 64, 128 * h : 128 * h + 128] += op_a @ op_b.T
    return acc


@pytest.mark.parametrize("tile_n", [128, 256])
@pytest.mark.parametrize("a_kmajor", [True, False], ids=["a-kmajor", "a-mnmajor"])
@pytest.mark.parametrize("b_kmajor", [True, False], ids=["b-kmajor", "b-mnmajor"])
def test_the_copies_and_descriptors_model_the_product(tile_n, a_kmajor, b_kmajor):
    rng = np.random.default_rng(tile_n + 2 * a_kmajor + b_kmajor)
    m, k, n = 200, 100, 300  # the last tile is partial along every dim
    a = rng.integers(-8, 8, (m, k)).astype(np.float64)
    b = rng.integers(-8, 8, (k, n)).astype(np.float64)
    m0, n0 = 128, tile_n  # the tile at (1, 1)
    got = model_tile(a, b, m0, n0, tile_n, a_kmajor, b_kmajor)
    want = np.zeros((128, tile_n))
    part = a[m0:] @ b[:, n0 : n0 + tile_n]
    want[: part.shape[0], : part.shape[1]] = part
    np.testing.assert_array_equal(got, want)


# --- the dispatch over a fake driver (a stand-in H200) -------------------------------------------


@pytest.fixture
def fake(monkeypatch):
    runtime = str(Path(__file__).resolve().parents[1] / "runtime")
    monkeypatch.syspath_prepend(runtime)
    fake_gpu = __import__("fake_gpu")
    g = fake_gpu.install(monkeypatch)  # (skips where a real GPU is present)
    monkeypatch.setattr(mm, "library_kernel", fake_gpu._library_kernel)
    monkeypatch.setattr(sm90, "library_kernel", fake_gpu._library_kernel)
    sizes = fake_gpu._struct_size
    own_sizes = {"WgmmaArgs": sm90._ARGS.size, "GemmArgs": mm._ARGS.size}
    monkeypatch.setattr(
        fake_gpu,
        "_struct_size",
        lambda ctype: own_sizes[ctype] if ctype in own_sizes else sizes(ctype),
    )
    monkeypatch.setattr(mm, "_cublas_enabled", False)  # the own kernels
    monkeypatch.setattr(mm, "_force_family", None)
    fake_gpu.record_optin(monkeypatch, g)
    yield g
    fake_gpu.uninstall()
    sys.modules.pop("fake_gpu", None)


def tensor_map_calls(fake):
    """(address, dims, byte strides, box, swizzle name) of each tensor map the fake built."""
    calls = []
    for args in fake.calls["cuTensorMapEncodeTiled"]:
        _, rank, address, dims, strides, box, elem, *_, swizzle, _, _ = args
        assert rank == len(dims) == len(box) == len(elem) == len(strides) + 1 == 4
        assert [int(x) for x in elem] == [1] * rank
        calls.append(
            (
                address,
                tuple(int(x) for x in dims),
                tuple(int(x) for x in strides),
                tuple(int(x) for x in box),
                swizzle.name,
            )
        )
    return calls


def product(fake, a, b, **kwargs):
    """The launches (name, grid, block, args) and tensor maps of one ``a @ b``."""
    fake.launches.clear()
    fake.calls["cuTensorMapEncodeTiled"].clear()
    out = ignis.matmul(a, b, **kwargs)
    launches = [(name, grid, block, args) for name, grid, block, _, args in fake.launches]
    return out, launches, tensor_map_calls(fake)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("tile_n", [128, 256])
def test_the_switch_picks_the_hopper_kernel(fake, tune, dtype, tile_n):
    m, k, n = 300, 136, 200
    a = ignis.empty((m, k), dtype=dtype, device="cuda:0")
    b = ignis.empty((k, n), dtype=dtype, device="cuda:0")
    # off: the mma.sync kernel, no tensor map
    tune(matmul=dict(wgmma=False))
    _, launches, maps = product(fake, a, b)
    ((name, *_),) = launches
    assert name == f"ignis::gemm::gemm_tc<{CXX[dtype]}, 0, 0>" and maps == []
    tune(matmul=dict(wgmma=True, wgmma_tile_n=tile_n))
    out, launches, maps = product(fake, a, b)
    ((name, grid, block, args),) = launches
    stages = sm90.STAGES[tile_n]
    assert name == f"ignis::gemm90::gemm_wgmma<{CXX[dtype]}, {tile_n}, {stages}, true, false>"
    # persistent by default: at most one block a multiprocessor (the fake GPU has 132)
    tiles = math.ceil(m / 128) * math.ceil(n / tile_n)
    assert grid == (min(tiles, 132), 1, 1) and block == (384, 1, 1)
    smem = sm90.wgmma_smem(tile_n)
    assert (name, smem) in fake.optin and smem <= SMEM_LIMIT
    item = 2
    assert [m_[:4] for m_ in maps] == [
        (
            a.data_ptr,
            (k, m, 1, 1),
            (k * item, 16 * math.ceil(m * k * item / 16), 16 * math.ceil(m * k * item / 16)),
            (64, 128, 1, 1),
        ),
        (b.data_ptr, (n, k, 1, 1), (n * item, k * n * item, k * n * item), (64, 64, 1, 1)),
    ]
    assert {m_[4] for m_ in maps} == {"CU_TENSOR_MAP_SWIZZLE_128B"}
    assert [len(x) for x in args] == [128, 128, 8, 96]
    assert int.from_bytes(args[2], "little") == out.data_ptr
    fields = unpack(args[3])
    assert (fields["m"], fields["n"], fields["k"], fields["c_rs"], fields["c_cs"]) == (
        m,
        n,
        k,
        n,
        1,
    )


def test_transposed_views_and_batches_take_the_hopper_kernel(fake, tune):
    tune(matmul=dict(wgmma=True, wgmma_tile_n=128))
    x = ignis.empty((96, 136), dtype="bfloat16", device="cuda:0")  # A = x.T: (136, 96)
    w = ignis.empty((72, 96), dtype="bfloat16", device="cuda:0")  # B = w.T: (96, 72)
    _, launches, maps = product(fake, x.T, w.T)
    ((name, *_),) = launches
    assert name.endswith(", false, true>")  # A MN-major, B K-major
    assert [m_[1] for m_ in maps] == [(136, 96, 1, 1), (96, 72, 1, 1)]
    assert [m_[3] for m_ in maps] == [(64, 64, 1, 1), (64, 128, 1, 1)]
    # a stack times one shared matrix: the tiles of all matrices, B one element along it
    s = ignis.empty((2, 3, 40, 96), dtype="bfloat16", device="cuda:0")
    _, launches, maps = product(fake, s, w.T)
    ((name, grid, _, args),) = launches
    assert grid == (6, 1, 1) and name.endswith(", true, true>")
    assert [m_[1] for m_ in maps] == [(96, 40, 6, 1)]  # (B's map: the one above, kept)
    fields = unpack(args[3])
    assert (fields["batch"], fields["a_batched"], fields["b_batched"]) == (6, 1, 0)


def test_other_cases_keep_the_existing_kernels(fake, tune, monkeypatch):
    tune(matmul=dict(wgmma=True, wgmma_tile_n=128))

    def kernel(a, b):
        _, launches, maps = product(fake, a, b)
        ((name, *_),) = launches
        return name.split("<")[0], len(maps)

    tc, hopper = "ignis::gemm::gemm_tc", "ignis::gemm90::gemm_wgmma"
    a = ignis.empty((64, 64), dtype="bfloat16", device="cuda:0")
    assert kernel(a, a) == (hopper, 2)
    odd = ignis.empty((64, 17), dtype="bfloat16", device="cuda:0")  # rows of 34 bytes
    assert kernel(odd, ignis.empty((17, 64), dtype="bfloat16", device="cuda:0")) == (tc, 0)
    wide = ignis.empty((64, 72), dtype="bfloat16", device="cuda:0")
    assert kernel(wide[:, 1:65], a) == (tc, 0)  # a base 2 bytes past an aligned address
    assert kernel(wide[:, ::2][:, :32], a[:32]) == (tc, 0)  # strided in both dims
    f32 = ignis.empty((64, 64), dtype="float32", device="cuda:0")
    assert kernel(f32, f32) == ("ignis::gemm::gemm_simt", 0)
    # a forced family keeps its kernels
    monkeypatch.setattr(mm, "_force_family", "tc")
    assert kernel(a, a) == (tc, 0)
    monkeypatch.setattr(mm, "_force_family", None)
    # another architecture (the sm_90a build runs on compute capability 9.0 only)
    gpu = ignis.Device(0)
    monkeypatch.setitem(gpu._properties, "compute_capability_major", 10)
    assert kernel(a, a) == (tc, 0)
    monkeypatch.setitem(gpu._properties, "compute_capability_major", 9)
    assert kernel(a, a) == (hopper, 0)  # (its two maps: those of the first product, kept)


def test_tf32_products_take_the_hopper_kernel_with_k_major_copies(fake, tune, monkeypatch):
    tune(matmul=dict(wgmma=True, wgmma_tile_n=128))
    m, k, n = 200, 96, 136
    x = ignis.empty((m, k), dtype="float32", device="cuda:0")
    w = ignis.empty((n, k), dtype="float32", device="cuda:0")  # a linear layer's weight
    y = ignis.empty((k, n), dtype="float32", device="cuda:0")
    name = "ignis::gemm90::gemm_wgmma<float, 128, 6, true, true>"
    # TF32 off: the float32 SIMT kernel, as before
    _, launches, maps = product(fake, x, w.T)
    assert [n_.split("<")[0] for n_, *_ in launches] == ["ignis::gemm::gemm_simt"] and not maps
    monkeypatch.setattr(mm, "_allow_tf32", True)
    # x @ w.T: both operands K-major already, no copy
    _, launches, maps = product(fake, x, w.T)
    assert [n_ for n_, *_ in launches] == [name]
    assert [m_[1] for m_ in maps] == [(k, m, 1, 1), (k, n, 1, 1)]
    assert [m_[3] for m_ in maps] == [(32, 128, 1, 1), (32, 128, 1, 1)]
    # x @ y (y row-major) and x.T-stored A: copied K-major first, one copy each
    _, launches, maps = product(fake, x, y)
    assert len(launches) == 2 and launches[-1][0] == name
    assert [m_[1] for m_ in maps] == [(k, n, 1, 1)]  # (the copy's map; x's is kept)
    xt = ignis.empty((k, m), dtype="float32", device="cuda:0")
    _, launches, _ = product(fake, xt.T, y)
    assert len(launches) == 3 and launches[-1][0] == name
    # rows of 129 float32 (516 bytes, which TMA cannot step): both operands are copied K-major
    # into rows padded to 132 elements (528 bytes)
    x2 = ignis.empty((m, 129), dtype="float32", device="cuda:0")
    y2 = ignis.empty((129, n), dtype="float32", device="cuda:0")
    _, launches, maps = product(fake, x2, y2)
    assert len(launches) == 3 and launches[-1][0] == name
    assert [(m_[1], m_[2][0]) for m_ in maps] == [((129, m, 1, 1), 528), ((129, n, 1, 1), 528)]
    # the setting, or another architecture, keeps the mma.sync TF32 kernel
    tune(matmul=dict(wgmma=True, wgmma_tile_n=128, wgmma_tf32=False))
    _, launches, _ = product(fake, x, w.T)
    assert [n_.split("<")[0] for n_, *_ in launches] == ["ignis::gemm::gemm_tc"]


def test_the_setting_is_checked_and_read_from_the_environment():
    from ignis import _tuning

    # on by default, with the wider tile (the faster of the two on an H200)
    assert ignis.tuning.defaults().matmul.wgmma is True
    assert ignis.tuning.defaults().matmul.wgmma_tile_n == 256
    env = _tuning.from_environ(
        {"IGNIS_TUNE_MATMUL_WGMMA": "1", "IGNIS_TUNE_MATMUL_WGMMA_TILE_N": "256"}
    )
    assert env.matmul.wgmma is True and env.matmul.wgmma_tile_n == 256
    with pytest.raises(ValueError, match=r"matmul\.wgmma_tile_n is 64"):
        ignis.tuning(matmul=dict(wgmma_tile_n=64))
    with pytest.raises(TypeError, match=r"matmul\.wgmma is 1; expected True or False"):
        ignis.tuning(matmul=dict(wgmma=1))


# --- builds --------------------------------------------------------------------------------------


def all_names() -> list[str]:
    return [
        sm90.wgmma_name(d, tile_n, ak, bk)
        for d in (dt.bfloat16, dt.float16)
        for tile_n in sm90.TILE_N
        for ak in (True, False)
        for bk in (True, False)
    ] + [sm90.wgmma_name(dt.float32, tile_n, True, True) for tile_n in sm90.TILE_N]


def compile_names(names, extra=()):
    return ignis.compile(
        _sources.read_source(sm90.SOURCE),
        ignis.CompileOptions(arch="sm_90a", extra=extra),
        name_expressions=names,
        name=sm90.SOURCE,
    )


@pytest.fixture
def isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("IGNIS_CACHE_DIR", str(tmp_path / "cache"))
    ignis.jit.clear_cache(memory=True)


def test_the_default_instances_compile_for_sm90a(isolated_cache):
    from ignis._signature import parse_kernel_params

    names = [
        sm90.wgmma_name(dt.bfloat16, 128, ak, bk) for ak in (True, False) for bk in (True, False)
    ]
    obj = compile_names(names)
    assert obj.kind == "cubin" and obj.log == "", obj.log
    assert set(obj.lowered_names) == set(names)
    for name in names:  # the arguments launch_wgmma packs
        params = parse_kernel_params(_sources.read_source(sm90.SOURCE), name)
        assert [(p.ctype.split()[-1], p.name) for p in params] == [
            ("tma::TensorMap", "amap"),
            ("tma::TensorMap", "bmap"),
            ("__restrict__", "c"),
            ("WgmmaArgs", "p"),
        ], name
        assert params[2].kind == "pointer" and params[3].kind == "struct"


def test_the_kernel_uses_wgmma_tma_and_mbarriers(isolated_cache):
    ptx = ignis.compile(
        _sources.read_source(sm90.SOURCE),
        ignis.CompileOptions(arch="compute_90a"),
        name_expressions=[sm90.wgmma_name(dt.bfloat16, 256, True, False)],
        name=sm90.SOURCE,
    )
    assert ptx.kind == "ptx"
    text = ptx.code.decode()
    assert "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16" in text
    assert (
        "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes" in text
    )
    assert "mbarrier.try_wait.parity.shared::cta.b64" in text
    assert "wgmma.wait_group.sync.aligned 1" in text
    assert "setmaxnreg.dec.sync.aligned.u32 40" in text
    assert "setmaxnreg.inc.sync.aligned.u32 232" in text


@pytest.mark.exhaustive  # about 10 s of NVRTC
def test_every_instance_compiles_without_spilling(isolated_cache):
    names = all_names()
    obj = compile_names(names, extra=("--ptxas-options=-v",))
    assert set(obj.lowered_names) == set(names)
    by_symbol = {mangled: name for name, mangled in obj.lowered_names.items()}
    found = re.findall(
        r"Function properties for (\S+)\s*\n.*?(\d+) bytes spill stores.*?\n"
        r"ptxas info\s*: Used (\d+) registers",
        obj.log,
    )
    report = {by_symbol[sym]: (int(regs), int(spills)) for sym, spills, regs in found}
    assert set(report) == set(names)
    assert not re.search(r"warning|serializ", obj.log, re.IGNORECASE), obj.log
    for name, (regs, spills) in report.items():
        # one block of 384 threads per SM: 168 registers each (the 256-column tile moves more
        # to the consumers with setmaxnreg, which ptxas then reports as the 168 it starts with)
        assert regs <= 168 and spills == 0, (name, regs, spills)


# --- on the GPU ----------------------------------------------------------------------------------


def _needs_hopper():
    if not ignis.is_available() or ignis.Device(0).compute_capability != (9, 0):
        pytest.skip("needs a GPU of compute capability 9.0")


@pytest.fixture
def own(monkeypatch):
    """The own kernels (cuBLAS off, no forced family) and the names of the wgmma launches."""
    _needs_hopper()
    monkeypatch.setattr(mm, "_cublas_enabled", False)
    monkeypatch.setattr(mm, "_force_family", None)
    names = []
    real = sm90.launch_wgmma

    def spy(backend, stream, launch):
        names.append(launch.kernel)
        return real(backend, stream, launch)

    monkeypatch.setattr(sm90, "launch_wgmma", spy)
    return names


def padded(rng, rows: int, cols: int, dtype: str) -> tuple[np.ndarray, ignis.NvArray]:
    """A rows x cols operand (host copy, device view) inside storage whose rows are padded to
    a multiple of 8 elements (16 bytes), so that TMA can read any column count."""
    host = rand(rng, (rows, -(-cols // 8) * 8), dtype)
    return host[:, :cols], dev(host, dtype)[:, :cols]


def check_both_kernels(tune, a, b, ah, bh, dtype, what, own, tile_n=128):
    """a @ b on gemm_wgmma against NumPy in float64, and against gemm_tc's product."""
    tune(matmul=dict(wgmma=True, wgmma_tile_n=tile_n))
    before = len(own)
    got = (a @ b).to_host()
    assert len(own) == before + 1, f"{what}: gemm_wgmma did not run"
    assert got.dtype == NP[dtype] and got.shape == np.broadcast_shapes(
        ah.shape[:-2], bh.shape[:-2]
    ) + (ah.shape[-2], bh.shape[-1])
    ref, scale = reference(ah, bh)
    # a result in the output dtype's subnormal range is rounded to that range's fixed spacing
    scale = scale + float(ml_dtypes.finfo(NP[dtype]).smallest_subnormal) / TOL[dtype]
    bound_check(got, ref, scale, TOL[dtype], f"wgmma {what}")
    tune(matmul=dict(wgmma=False))
    theirs = (a @ b).to_host()
    assert len(own) == before + 1  # (the mma.sync kernel this time)
    bound_check(got, np.asarray(theirs, np.float64), scale, 2 * TOL[dtype], f"wgmma vs tc {what}")


SHAPES = [
    (1, 17, 1),
    (17, 129, 1000),
    (129, 1000, 17),
    (1000, 4096, 129),
    (4096, 1, 1000),
    (4096, 256, 4096),
    (257, 64, 130),
]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("tile_n", [128, 256])
@pytest.mark.parametrize("mkn", SHAPES, ids=[f"{m}x{k}x{n}" for m, k, n in SHAPES])
def test_products_match_float64(own, tune, dtype, tile_n, mkn):
    m, k, n = mkn
    rng = np.random.default_rng(m * 7919 + k * 31 + n)
    ah, a = padded(rng, m, k, dtype)
    bh, b = padded(rng, k, n, dtype)
    check_both_kernels(tune, a, b, ah, bh, dtype, f"{dtype} {mkn}", own, tile_n)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("tile_n", [128, 256])
def test_every_operand_layout(own, tune, dtype, tile_n):
    rng = np.random.default_rng(7)
    m, k, n = 300, 200, 264
    xa, xat = rand(rng, (m, k), dtype), rand(rng, (k, m + 4), dtype)  # A, A^T storage
    xb, xbt = rand(rng, (k, n), dtype), rand(rng, (n, k), dtype)  # B, B^T storage
    a_views = {"row": (dev(xa, dtype), xa), "col": (dev(xat, dtype).T[:m], xat.T[:m])}
    b_views = {"row": (dev(xb, dtype), xb), "col": (dev(xbt, dtype).T, xbt.T)}
    for an, (a, ah) in a_views.items():
        for bn, (b, bh) in b_views.items():
            check_both_kernels(tune, a, b, ah, bh, dtype, f"{dtype} a={an} b={bn}", own, tile_n)
    names = {tuple(name[:-1].split(", ")[-2:]) for name in own}  # (A K-major, B K-major)
    assert names == {("true", "false"), ("true", "true"), ("false", "false"), ("false", "true")}


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_batches_with_broadcast_dims(own, tune, dtype):
    rng = np.random.default_rng(5)
    cases = [
        ((3, 130, 72), (3, 72, 264)),
        ((2, 3, 129, 64), (64, 136)),
        ((2, 1, 70, 40), (1, 3, 40, 200)),
        ((5, 64, 64), (1, 64, 64)),
    ]
    for sa, sb in cases:
        x, y = rand(rng, sa, dtype), rand(rng, sb, dtype)
        check_both_kernels(tune, dev(x, dtype), dev(y, dtype), x, y, dtype, f"{sa} @ {sb}", own)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("tile_n", [128, 256])
def test_alpha_beta_and_out_views(own, tune, dtype, tile_n):
    rng = np.random.default_rng(3)
    m, k, n = 200, 136, 296  # (rows of B: a multiple of 16 bytes, so that TMA reads it)
    x, y, c0 = rand(rng, (m, k), dtype), rand(rng, (k, n), dtype), rand(rng, (m, n), dtype)
    a, b = dev(x, dtype), dev(y, dtype)
    tune(matmul=dict(wgmma=True, wgmma_tile_n=tile_n))
    c = dev(c0, dtype)
    assert ignis.matmul(a, b, alpha=-0.75, beta=1.5, out=c) is c
    ref, scale = reference(x, y, -0.75, 1.5, c0)
    bound_check(c.to_host(), ref, scale, TOL[dtype], f"{dtype} alpha/beta")
    d = dev(np.full((m, n), np.nan), dtype)  # beta = 0 never reads the old contents
    ignis.matmul(a, b, alpha=2.0, out=d)
    ref, scale = reference(x, y, 2.0)
    bound_check(d.to_host(), ref, scale, TOL[dtype], f"{dtype} beta=0 over NaN")
    # out as a column-major view with an offset (element stores) and a row-major view with an
    # odd offset (no paired stores); nothing outside the view changes
    picks = {
        "T": ((n + 3, m + 2), lambda arr: arr.T[1 : m + 1, 2 : n + 2]),
        "odd": ((m + 1, n + 3), lambda arr: arr[1:, 3:]),
    }
    check_out_views(a, b, x, y, dtype, picks, dtype, rng)
    assert len(own) == 4


@pytest.mark.gpu
def test_nan_and_inf_propagate(own, tune):
    tune(matmul=dict(wgmma=True, wgmma_tile_n=128))
    x = np.ones((130, 64), np.float32)
    x[3, 5] = np.nan
    x[100, 0] = np.inf
    y = np.ones((64, 136), np.float32)
    got = ignis.matmul(dev(x, "bfloat16"), dev(y, "bfloat16")).to_host().astype(np.float64)
    assert np.isnan(got[3]).all() and np.isinf(got[100]).all()
    assert (got[np.r_[0:3, 4:100, 101:130]] == 64).all()
    assert len(own) == 1


@pytest.mark.gpu
@pytest.mark.parametrize("tile_n", [128, 256])
@pytest.mark.parametrize("mkn", SHAPES, ids=[f"{m}x{k}x{n}" for m, k, n in SHAPES])
def test_tf32_products_match_float64(own, tune, monkeypatch, tile_n, mkn):
    m, k, n = mkn
    rng = np.random.default_rng(m * 7919 + k * 31 + n + 1)
    monkeypatch.setattr(mm, "_allow_tf32", True)
    ah, a = padded(rng, m, k, "float32")
    bh, b = padded(rng, k, n, "float32")
    check_tf32(tune, a, b, ah, bh, f"{mkn}", own, tile_n)


@pytest.mark.gpu
def test_tf32_operand_layouts_and_batches(own, tune, monkeypatch):
    rng = np.random.default_rng(11)
    monkeypatch.setattr(mm, "_allow_tf32", True)
    m, k, n = 300, 200, 264
    xa, xat = rand(rng, (m, k), "float32"), rand(rng, (k, m + 4), "float32")
    xb, xbt = rand(rng, (k, n), "float32"), rand(rng, (n, k), "float32")
    a_views = {"row": (dev(xa, "float32"), xa), "col": (dev(xat, "float32").T[:m], xat.T[:m])}
    b_views = {"row": (dev(xb, "float32"), xb), "col": (dev(xbt, "float32").T, xbt.T)}
    for an, (a, ah) in a_views.items():
        for bn, (b, bh) in b_views.items():
            check_tf32(tune, a, b, ah, bh, f"a={an} b={bn}", own, 256)
    for sa, sb in (((3, 130, 72), (3, 72, 264)), ((2, 1, 70, 40), (1, 3, 40, 200))):
        x, y = rand(rng, sa, "float32"), rand(rng, sb, "float32")
        check_tf32(tune, dev(x, "float32"), dev(y, "float32"), x, y, f"{sa} @ {sb}", own)
    assert {name for name in own} == {
        f"ignis::gemm90::gemm_wgmma<float, {t}, {sm90.STAGES[t]}, true, true>" for t in (128, 256)
    }
    # alpha, beta and an odd out view (element stores)
    x, y, c0 = rand(rng, (200, 136), "float32"), rand(rng, (136, 296), "float32"), None
    tune(matmul=dict(wgmma=True, wgmma_tile_n=256))
    big0 = rand(rng, (201, 299), "float32")
    big = dev(big0, "float32")
    c0 = big0[1:, 3:]
    ignis.matmul(dev(x, "float32"), dev(y, "float32"), alpha=-0.5, beta=2.0, out=big[1:, 3:])
    ref, scale = reference(x, y, -0.5, 2.0, c0)
    got = big.to_host()
    bound_check(got[1:, 3:], ref, scale, TF32_TOL, "tf32 alpha/beta into a view")
    assert np.array_equal(got[0], big0[0]) and np.array_equal(got[:, :3], big0[:, :3])


def check_tf32(tune, a, b, ah, bh, what, own, tile_n=128):
    """a @ b (float32, TF32 allowed) on gemm_wgmma against NumPy in float64 and against the
    mma.sync TF32 kernel."""
    tune(matmul=dict(wgmma=True, wgmma_tile_n=tile_n))
    before = len(own)
    got = (a @ b).to_host()
    assert len(own) == before + 1, f"{what}: gemm_wgmma did not run"
    ref, scale = reference(ah, bh)
    bound_check(got, ref, scale, TF32_TOL, f"wgmma tf32 {what}")
    tune(matmul=dict(wgmma=False))
    theirs = (a @ b).to_host()
    bound_check(got, np.asarray(theirs, np.float64), scale, 2 * TF32_TOL, f"vs tc tf32 {what}")
