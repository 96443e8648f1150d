"""The scalar (float32 / float64) attention kernels: the register-tiled ones
(``flash_*_simt_tiled``, with the two-pass and the fused backward) and the first ones
(``flash_*_simt``), against a NumPy float64 reference. On the GPU every case runs both families
(the ``attention`` settings' ``simt_tiled`` True and False) and the tiled backward both ways
(``simt_fused_dq`` True and False); without a GPU the tiled kernels run on the host emulator of
``test_nn_attention`` and compile for sm_90."""

from __future__ import annotations

import math

import ignis.nn
import numpy as np
import pytest
import tc_emulator
from ignis._array._cuda_backend import attention as cuda_attention
from test_nn_attention import (
    OPERANDS_CPP,
    _heads,
    _i32,
    _inject,
    _packed,
    _u64,
    assert_known_param_types,
    emulator_io,
    placements,
    ptxas_report,
    read_results,
    ref_attention,
    vec_flag,
)
from test_nn_attention import fake as fake  # noqa: F401 (the fixture, used by name)

import ignis
from ignis import _sources

# Errors relative to max(1, max |reference|): float32 sums of up to 257 products of O(1) terms.
TOL = {"float32": 3e-5, "float64": 1e-10}
NP = {"float32": np.float32, "float64": np.float64}


def assert_close(got, want, dtype, what):
    tol = TOL[dtype] * max(1.0, float(np.max(np.abs(want), initial=0.0)))
    finite = np.isfinite(want)
    assert np.array_equal(np.isfinite(got), finite), f"{what}: Inf/NaN pattern differs"
    err = float(np.max(np.abs(got[finite] - want[finite]), initial=0.0))
    assert err <= tol, f"{what}: max error {err:.3g} > {tol:.3g}"


def data(rng, shapes, dtype):
    """Random normal arrays rounded to ``dtype`` (returned as float64)."""
    return [rng.standard_normal(s).astype(NP[dtype]).astype(np.float64) for s in shapes]


# --- names, tiles and compilation (no GPU needed) -------------------------------------------------


def test_tiled_head_dims():
    assert [cuda_attention.tiled_head_dim(e) for e in (1, 16, 63, 64, 65, 100, 128)] == [
        64,
        64,
        64,
        64,
        128,
        128,
        128,
    ]
    with pytest.raises(ValueError, match="head dim 129 is larger than 128"):
        cuda_attention.tiled_head_dim(129)


@pytest.mark.parametrize("tiled", [True, False])
def test_switch_selects_the_family(tiled, tune):
    tune(attention=dict(simt_tiled=tiled))
    names = cuda_attention.kernel_names("float32", 100, True)
    chosen = {k: names[k].split("<")[0] for k in ("fwd", "dkdv", "dq")}
    other = {k: names[k + "_alt"].split("<")[0] for k in ("fwd", "dkdv", "dq")}
    new = {
        "fwd": "ignis::attn::flash_fwd_simt_tiled",
        "dkdv": "ignis::attn::flash_bwd_dkdv_simt_tiled",
        "dq": "ignis::attn::flash_bwd_dq_simt_tiled",
    }
    old = {k: v.removesuffix("_tiled") for k, v in new.items()}
    assert (chosen, other) == ((new, old) if tiled else (old, new))
    assert names["fwd" if tiled else "fwd_alt"] == (
        "ignis::attn::flash_fwd_simt_tiled<float, 128, true, 64, 32, 2, 2>"
    )


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_fused_backward_names(dtype, tune):
    t = {"float32": "float", "float64": "double"}[dtype]
    a, b, st, minb = ignis.tuning().attention.simt_tiles[(dtype, 64)]["fused"]
    tiled = cuda_attention.tiled_kernel_names(dtype, 33, True)
    assert tiled["fused"] == (
        f"ignis::attn::flash_bwd_fused_simt_tiled<{t}, 64, true, {a}, {b}, {st}, {minb}>"
    )
    # the sums are kept in the dtype itself: float64 gradients are summed in float64
    assert tiled["dq_finish"] == f"ignis::attn::attn_dq_finish<{t}, {t}>"
    for switch in (True, False):  # offered whichever scalar family SIMT_TILED selects
        tune(attention=dict(simt_tiled=switch))
        names = cuda_attention.kernel_names(dtype, 33, True)
        assert (names["bwd_fused"], names["dq_finish"]) == (tiled["fused"], tiled["dq_finish"])
    # the 16-bit fused backward keeps its float32 sums (the default accumulator type)
    assert cuda_attention.kernel_names("bfloat16", 64, False)["dq_finish"] == (
        "ignis::attn::attn_dq_finish<ignis::bfloat16>"
    )


def test_fused_shared_memory_adds_the_ds_tile():
    # float32, head dim 64, fused: the dK/dV kernel's tiles plus dS (32 queries x 68)
    a, b, st, _ = ignis.tuning().attention.simt_tiles[("float32", 64)]["fused"]
    assert (a, b) == (64, 32)
    dkdv = (2 * 64 * 68 + 2 * st * 32 * 68 + 2 * 64 * 36 + 2 * st * 32) * 4
    assert cuda_attention.tiled_smem("float32", 64, "fused") == dkdv + 32 * 68 * 4
    if ignis.tuning().attention.simt_tiles[("float32", 64)]["dkdv"] == (a, b, st, 2):
        assert cuda_attention.tiled_smem("float32", 64, "dkdv") == dkdv


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_tiled_shared_memory_fits_sm80_and_sm90(dtype):
    # sm_80 lets a block opt in to 163 KiB, sm_90 to 227 KiB; with MINB = 2, two blocks must fit.
    for d in (64, 128):
        tiles = ignis.tuning().attention.simt_tiles[(dtype, d)]
        for kind, (rows, step, stages, minb) in tiles.items():
            smem = cuda_attention.tiled_smem(dtype, d, kind)
            assert smem <= 163 * 1024, (dtype, d, kind, smem)
            assert minb * (smem + 1024) <= 228 * 1024, (dtype, d, kind, smem)
            assert rows % 16 == 0 and step % 16 == 0 and stages in (1, 2)
    # float32, head dim 64, forward: Q (64 x 68), K and V two stages (4 x 64 x 68), P (64 x 68)
    assert cuda_attention.tiled_smem("float32", 64, "fwd") == (64 + 4 * 64 + 64) * 68 * 4


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.exhaustive
def test_every_tiled_instantiation_compiles(dtype):
    names = set()
    for e in (64, 128):
        for causal in (False, True):
            names.update(cuda_attention.tiled_kernel_names(dtype, e, causal).values())
    obj = ignis.compile(
        _sources.read_source("attention.cu"),
        ignis.CompileOptions(arch="sm_90"),
        name_expressions=sorted(names),
    )
    assert set(obj.lowered_names) == names and obj.log == ""


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_tiled_kernel_parameters_have_known_types(dtype):
    assert_known_param_types(cuda_attention.tiled_kernel_names(dtype, 100, False).values())


# --- launches over the fake driver of tests/ignis/runtime (no GPU needed) ------------------------


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_tiled_launches_over_a_fake_driver(fake, dtype, tune):  # noqa: F811
    import struct

    tune(attention=dict(simt_tiled=True, simt_fused_dq=False))
    q = ignis.empty((2, 3, 100, 80), dtype=dtype, device="cuda:0")
    k = ignis.empty((2, 3, 70, 80), dtype=dtype, device="cuda:0")
    t = {"float32": "float", "float64": "double"}[dtype]
    tiles = ignis.tuning().attention.simt_tiles[(dtype, 128)]
    fake.launches.clear()
    out, lse = ignis.nn.attention(q, k, k, causal=True, scale=0.5)
    ((name, grid, block, _, args),) = fake.launches
    bm, bn, st, minb = tiles["fwd"]
    assert name == f"ignis::attn::flash_fwd_simt_tiled<{t}, 128, true, {bm}, {bn}, {st}, {minb}>"
    assert grid == (-(-100 // bm), 6, 1) and block == (256, 1, 1)
    ptrs = [q.data_ptr, k.data_ptr, k.data_ptr, out.data_ptr, lse.data_ptr]
    assert [_u64(a) for a in args[:5]] == ptrs
    assert [_i32(a) for a in args[5:8]] == [100, 70, 80]
    fmt = "<d" if dtype == "float64" else "<f"
    assert struct.unpack(fmt, args[8])[0] == pytest.approx(0.5 * 1.4426950408889634, rel=1e-7)
    assert _i32(args[9]) == 1  # 80 elements are whole 16-byte pieces; the buffers are aligned
    # (head dim 128: above 48 KiB of shared memory, opted in exactly)
    assert (name, cuda_attention.tiled_smem(dtype, 80, "fwd")) in fake.optin
    fake.launches.clear()
    ignis.nn.attention_backward(out, q, k, k, out, lse, causal=True, scale=0.5)
    launched = [(n.split("<")[0], g) for n, g, *_ in fake.launches]
    assert launched == [
        ("ignis::attn::attn_row_dot", launched[0][1]),
        ("ignis::attn::flash_bwd_dkdv_simt_tiled", (-(-70 // tiles["dkdv"][0]), 6, 1)),
        ("ignis::attn::flash_bwd_dq_simt_tiled", (-(-100 // tiles["dq"][0]), 6, 1)),
    ]
    dkdv_args = fake.launches[1][4]
    assert [_u64(a) for a in dkdv_args[6:8]] != [0, 0]
    assert struct.unpack(fmt, dkdv_args[11])[0] == 0.5  # scale, then scale * log2(e)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_fused_backward_launches_over_a_fake_driver(fake, dtype, tune):  # noqa: F811
    import struct

    tune(attention=dict(simt_tiled=True, simt_fused_dq=True))
    b, h, n_q, n_k, e = 2, 3, 100, 70, 80
    t = {"float32": "float", "float64": "double"}[dtype]
    item, fmt = (8, "<d") if dtype == "float64" else (4, "<f")
    # dq, dk, dv in the slots of one (B, T, 3, H, E) gradient: strided, written in place
    q = ignis.empty((b, h, n_q, e), dtype=dtype, device="cuda:0")
    k = ignis.empty((b, h, n_k, e), dtype=dtype, device="cuda:0")
    out = ignis.empty((b, h, n_q, e), dtype=dtype, device="cuda:0")
    lse = ignis.empty((b, h, n_q), dtype=dtype, device="cuda:0")
    grad = ignis.empty((b, n_q, 3, h, e), dtype=dtype, device="cuda:0")
    dq = grad[:, :, 0].permute(0, 2, 1, 3)
    dk = ignis.empty((b, h, n_k, e), dtype=dtype, device="cuda:0")
    dv = ignis.empty((b, h, n_k, e), dtype=dtype, device="cuda:0")
    fake.launches.clear()
    fake.calls.clear()
    ignis.nn.attention_backward(out, q, k, k, out, lse, causal=True, scale=0.5, dq=dq, dk=dk, dv=dv)
    names = [n for n, *_ in fake.launches]
    a, bn, st, minb = ignis.tuning().attention.simt_tiles[(dtype, 128)]["fused"]
    fused_name = f"ignis::attn::flash_bwd_fused_simt_tiled<{t}, 128, true, {a}, {bn}, {st}, {minb}>"
    assert names[0].startswith("ignis::attn::attn_row_dot<")
    assert names[1:] == [fused_name, f"ignis::attn::attn_dq_finish<{t}, {t}>"]
    (_, grid, block, _, args), (_, fgrid, fblock, _, fin) = fake.launches[1:]
    assert grid == (-(-n_k // a), b * h, 1) and block == (256, 1, 1)
    assert [_u64(x) for x in args[6:8]] == [dk.data_ptr, dv.data_ptr]
    acc = _u64(args[8])  # the dQ sums: a scratch buffer of the input dtype, zeroed first
    assert acc not in (q.data_ptr, k.data_ptr, out.data_ptr, dq.data_ptr, dk.data_ptr)
    zeroed = [c for c in fake.calls["cuMemsetD32Async"] if int(c[0]) == acc]
    assert [(int(c[1]), int(c[2])) for c in zeroed] == [(0, b * h * n_q * e * item // 4)]
    assert [_i32(x) for x in args[9:12]] == [n_q, n_k, e]
    assert struct.unpack(fmt, args[12])[0] == 0.5
    assert struct.unpack(fmt, args[13])[0] == pytest.approx(0.5 * 1.4426950408889634, rel=1e-7)
    assert (fused_name, cuda_attention.tiled_smem(dtype, e, "fused")) in fake.optin
    # the finish: the sums scaled (in the dtype) into dq's strided rows
    assert _u64(fin[0]) == acc and _u64(fin[1]) == dq.data_ptr
    assert fblock == (256, 1, 1) and fgrid == (-(-(b * h * n_q) // 8), 1, 1)
    assert int.from_bytes(fin[2], "little") == b * h * n_q and [_i32(x) for x in fin[3:5]] == [
        n_q,
        e,
    ]
    assert struct.unpack(fmt, fin[5])[0] == 0.5
    lay = cuda_attention.LAYOUT.unpack(fin[-1])
    assert lay[16:19] == (n_q * 3 * h * e, e, 3 * h * e)  # dq's (batch, head, row) strides


# --- the tiled kernels on the host emulator (no GPU needed) ---------------------------------------

_EMU_PART = (
    r"""
// The register-tiled scalar attention kernels of attention.cu on the emulator of tc_emulator.py.
// Build: -DEMU_T=<float|double> -DEMU_D=<64|128> -DEMU_CAUSAL=<0|1> and the tiles
//        -D{FWD,KV,DQ,FU}_{A,B,ST} (rows per block, rows per streamed tile, stages)
// Run:   emulator <in> <out> B H L S E scale vec fused smem_fwd smem_kv smem_q <operands: 8 x 5>
//        (operands as in test_nn_attention.OPERANDS_CPP; input: the q, k, v, dout buffers;
//        output: the out buffer, lse, the dq, dk, dv buffers, all raw little-endian).
//        fused 0: the dK/dV and dQ passes; 1: the fused pass (smem_kv its shared memory) into a
//        zero-filled dQ accumulator, then attn_dq_finish.
#define IGNIS_ATTN_HOST_EMULATION 1

// Threads run one at a time (they switch only at barriers and warp-collective operations): an
// atomic add is a plain add. (The prelude has the float one.)
inline double atomicAdd(double* p, double v) {
  const double old = *p;
  *p = old + v;
  return old;
}

namespace ignis {
namespace attn {
inline unsigned char* dynamic_smem() { return ::emu::dyn_smem; }
inline void require_smem(unsigned bytes) {
  if (bytes > ::emu::dyn_smem_size) ::emu::die("kernel trapped: not enough dynamic shared memory");
}
}  // namespace attn
}  // namespace ignis

#include "attention.cu"
"""
    + OPERANDS_CPP
    + r"""
int main(int argc, char** argv) {
  using namespace ignis;
  using namespace ignis::attn;
  typedef EMU_T T;
  if (argc != 14 + kOperandArgs) emu::die("usage: emulator <in> <out> B H L S E scale vec ...");
  const int B = std::atoi(argv[3]), H = std::atoi(argv[4]), L = std::atoi(argv[5]);
  const int S = std::atoi(argv[6]), E = std::atoi(argv[7]), vec = std::atoi(argv[9]);
  const double scale = std::atof(argv[8]);
  const bool fused = std::atoi(argv[10]) != 0;
  const size_t smem_fwd = std::atol(argv[11]), smem_kv = std::atol(argv[12]);
  const size_t smem_q = std::atol(argv[13]);
  const int bh = B * H;
  Operands<T> x(argv, 14);
  x.read(argv[1]);
  const Layout lay = x.layout(H);
  T *q = x.q.ptr(), *k = x.k.ptr(), *v = x.v.ptr(), *dout = x.dout.ptr();
  T *out = x.out.ptr(), *dq = x.dq.ptr(), *dk = x.dk.ptr(), *dv = x.dv.ptr();
  T *lse = aligned<T>((size_t)bh * L), *dvec = aligned<T>((size_t)bh * L);
  std::mt19937 rng(4321);
  constexpr int D = EMU_D;
  constexpr bool C = EMU_CAUSAL != 0;
  auto cdiv = [](int a, int b) { return (unsigned)((a + b - 1) / b); };
  const T sl2 = (T)(scale * 1.4426950408889634);
  emu::launch(cdiv(L, FWD_A), bh, kTiledThreads, smem_fwd, [&] {
    flash_fwd_simt_tiled<T, D, C, FWD_A, FWD_B, FWD_ST, 1>(q, k, v, out, lse, L, S, E, sl2, vec,
                                                          0, lay);
  }, rng);
  emu::launch(cdiv(bh * L, 8), 1, 256, 0,
              [&] { attn_row_dot<T, T>(dout, out, dvec, (int64)bh * L, L, E, lay); }, rng);
  if (fused) {
    const size_t n = (size_t)bh * L * E;
    T* acc = aligned<T>(n);
    for (size_t i = 0; i < n; ++i) acc[i] = T(0);
    emu::launch(cdiv(S, FU_A), bh, kTiledThreads, smem_kv, [&] {
      flash_bwd_fused_simt_tiled<T, D, C, FU_A, FU_B, FU_ST, 1>(
          q, k, v, dout, lse, dvec, dk, dv, acc, L, S, E, (T)scale, sl2, vec, 0, lay);
    }, rng);
    emu::launch(cdiv(bh * L, 8), 1, 256, 0, [&] {
      attn_dq_finish<T, T>(acc, dq, (int64)bh * L, L, E, (T)scale, lay);
    }, rng);
  } else {
    emu::launch(cdiv(S, KV_A), bh, kTiledThreads, smem_kv, [&] {
      flash_bwd_dkdv_simt_tiled<T, D, C, KV_A, KV_B, KV_ST, 1>(q, k, v, dout, lse, dvec, dk, dv,
                                                              L, S, E, (T)scale, sl2, vec, 0, lay);
    }, rng);
    emu::launch(cdiv(L, DQ_A), bh, kTiledThreads, smem_q, [&] {
      flash_bwd_dq_simt_tiled<T, D, C, DQ_A, DQ_B, DQ_ST, 1>(q, k, v, dout, lse, dvec, dq, L, S,
                                                            E, (T)scale, sl2, vec, 0, lay);
    }, rng);
  }
  FILE* o = std::fopen(argv[2], "wb");
  std::fwrite(x.out.buf, sizeof(T), x.out.size, o);
  std::fwrite(lse, sizeof(T), (size_t)bh * L, o);
  std::fwrite(x.dq.buf, sizeof(T), x.dq.size, o);
  std::fwrite(x.dk.buf, sizeof(T), x.dk.size, o);
  std::fwrite(x.dv.buf, sizeof(T), x.dv.size, o);
  std::fclose(o);
  return 0;
}
"""
)

# (dtype, padded head dim, causal) and runs (B, H, L, S, E, vec, layout scheme of
# test_nn_attention.LAYOUTS): partial tiles on both sides, L != S both ways (causal rows without
# keys when L > S), E below the padded head dim, element copies (vec 0) and 16-byte asynchronous
# copies (vec 1), several tiles per block so the double buffer turns over, and strided operands
# (heads of packed projections, padded rows, reversed heads and rows).
EMULATED = [
    (
        ("float32", 64, 1),
        [
            (1, 2, 70, 100, 48, 1, "dense"),
            (1, 1, 45, 9, 63, 0, "dense"),
            (1, 1, 130, 130, 64, 1, "dense"),
            (2, 3, 40, 40, 64, 1, "packed"),
        ],
    ),
    (
        ("float32", 64, 0),
        [
            (1, 1, 33, 140, 17, 0, "dense"),
            (1, 2, 65, 7, 64, 1, "dense"),
            (2, 2, 31, 33, 36, 0, "mixed"),
        ],
    ),
    (
        ("float32", 128, 1),
        [
            (1, 1, 70, 100, 128, 1, "dense"),
            (1, 1, 40, 33, 100, 0, "dense"),
            (2, 2, 33, 33, 96, 1, "packed"),
        ],
    ),
    (
        ("float64", 64, 1),
        [
            (1, 1, 50, 70, 64, 1, "dense"),
            (1, 1, 20, 17, 5, 0, "dense"),
            (3, 2, 17, 17, 64, 1, "reversed"),
        ],
    ),
    (("float64", 128, 0), [(1, 1, 33, 40, 100, 1, "dense"), (2, 2, 20, 31, 128, 0, "mixed")]),
]


@pytest.fixture(scope="module")
def tiled_emulator(tmp_path_factory):
    """A builder of the tiled-kernel harness (each configuration compiled once per module)."""
    return tc_emulator.Builder(tmp_path_factory.mktemp("attention-tiled"), "attn_tiled", _EMU_PART)


def _build_tiled(emulator, dtype, dim, causal):
    ctype = {"float32": "float", "float64": "double"}[dtype]
    tiles = {}
    for kind, prefix in (("fwd", "FWD"), ("dkdv", "KV"), ("dq", "DQ"), ("fused", "FU")):
        a, b, st, _ = ignis.tuning().attention.simt_tiles[(dtype, dim)][kind]
        tiles.update({f"{prefix}_A": a, f"{prefix}_B": b, f"{prefix}_ST": st})
    return emulator.build(
        f"tiled_{dtype}_{dim}_{causal}", EMU_T=ctype, EMU_D=dim, EMU_CAUSAL=causal, **tiles
    )


@pytest.mark.parametrize("build,runs", EMULATED, ids=lambda x: "-".join(map(str, x)))
@pytest.mark.exhaustive
def test_tiled_kernels_on_the_host_emulator(tiled_emulator, tmp_path, build, runs):
    dtype, dim, causal = build
    exe = _build_tiled(tiled_emulator, dtype, dim, causal)
    for run in runs:
        _run_case(exe, tmp_path, dtype, dim, causal, run)


def _run_case(exe, tmp_path, dtype, dim, causal, run, fused=False):
    """One emulator run on random inputs in strided placements, every output compared with the
    reference (and nothing written outside the output views); ``fused``: the backward is the
    fused pass and attn_dq_finish."""
    b, h, n_q, n_k, e, vec, scheme = run
    item = np.dtype(NP[dtype]).itemsize
    assert cuda_attention.tiled_head_dim(e) == dim
    placed = placements(scheme, b, h, n_q, n_k, e)
    # (element copies are always allowed; 16-byte copies only where the host would choose them)
    assert not vec or vec_flag(placed, e, item), "16-byte copies of unaligned rows"
    kinds = ("fwd", "fused" if fused else "dkdv", "dq")
    smem = [cuda_attention.tiled_smem(dtype, dim, kind) for kind in kinds]
    rng = np.random.default_rng(n_q * 1000 + n_k + e)
    shapes = [(b, h, n_q, e), (b, h, n_k, e), (b, h, n_k, e), (b, h, n_q, e)]
    q, k, v, g = data(rng, shapes, dtype)
    inp, outp = tmp_path / "in.bin", tmp_path / "out.bin"
    inp.write_bytes(emulator_io(placed, (q, k, v, g), dtype))
    scale = 1 / math.sqrt(e)
    what = f"{dtype} D={dim} causal={causal} {run}" + (" fused" if fused else "")
    ops = [x for p in placed for x in p.args()]
    args = [inp, outp, b, h, n_q, n_k, e, repr(scale), vec, int(fused), *smem, *ops]
    tc_emulator.run(exe, args, what)
    raw = outp.read_bytes()
    (out,), offset = read_results(raw, 0, placed[4:5], NP[dtype], [f"{what} out"])
    n = b * h * n_q
    lse = np.frombuffer(raw, NP[dtype], n, offset).astype(np.float64).reshape(b, h, n_q)
    offset += n * item
    grads, offset = read_results(
        raw, offset, placed[5:], NP[dtype], [f"{what} {x}" for x in ("dq", "dk", "dv")]
    )
    assert offset == len(raw)
    want_out, want_lse, want_grads = ref_attention(q, k, v, bool(causal), scale, grad=g)
    for name, got, want in zip(
        ("out", "lse", "dq", "dk", "dv"),
        (out, lse, *grads),
        (want_out, want_lse, *want_grads),
        strict=True,
    ):
        assert_close(got, want, dtype, f"{what} {name}")


# The emulator comparisons can fail: kernels with a fault built in are caught.
FAULTS = {
    # the last 4 keys (or queries) of every tile left out of P V, dS K, P^T dO and dS^T Q
    "short_pv": ("for (int c = 0; c < KC; c += 4) {", "for (int c = 0; c < KC - 4; c += 4) {"),
    # the next tile copied over the one in use (the double buffer's stages confused)
    "one_stage": (
        "T* nk = kvs + ((t + 1) % ST) * 2 * BN * LD;",
        "T* nk = kvs + (t % ST) * 2 * BN * LD;",
    ),
    # the causal mask one key too generous
    "mask": (
        "return i < L && j < S && (!CAUSAL || j <= i + S - L);",
        "return i < L && j < S && (!CAUSAL || j <= i + 1 + S - L);",
    ),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
@pytest.mark.exhaustive
def test_a_faulty_tiled_kernel_is_caught(tmp_path, fault):
    import shutil

    src = tmp_path / "cuda_src"
    shutil.copytree(_sources.cuda_src_dir(), src)
    old, new = FAULTS[fault]
    _inject(src, old, new, fault, once=False)
    builder = tc_emulator.Builder(tmp_path, "attn_tiled", _EMU_PART, cuda_src=src)
    exe = _build_tiled(builder, "float32", 64, 1)
    with pytest.raises(AssertionError, match=r"max error|pattern differs"):
        _run_case(exe, tmp_path, "float32", 64, 1, (1, 1, 130, 130, 64, 1, "dense"))


# --- both families on the GPU ---------------------------------------------------------------------

GPU_SEQS = [(1, 1), (7, 7), (64, 64), (65, 65), (200, 200), (257, 257), (7, 65), (257, 64)]
GPU_SEQS += [(65, 200), (200, 7), (1, 257), (64, 1)]
HEAD_DIMS = [1, 16, 63, 64, 100, 128]
_REFERENCES: dict = {}


@pytest.mark.gpu
@pytest.mark.parametrize("tiled", [True, False], ids=["tiled", "first"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("e", HEAD_DIMS)
@pytest.mark.parametrize("seqs", GPU_SEQS, ids=lambda s: f"L{s[0]}-S{s[1]}")
def test_scalar_kernels_on_gpu(tiled, dtype, causal, e, seqs, tune):
    tune(attention=dict(simt_tiled=tiled))
    n_q, n_k = seqs
    b, h = 2, 3
    rng = np.random.default_rng(hash((seqs, e, causal)) % 2**32)
    shapes = [(b, h, n_q, e), (b, h, n_k, e), (b, h, n_k, e), (b, h, n_q, e)]
    qh, kh, vh, gh = data(rng, shapes, dtype)
    q, k, v, g = (ignis.asarray(x.astype(NP[dtype]), device="cuda:0") for x in (qh, kh, vh, gh))
    scale = 1 / math.sqrt(e)
    out, lse = ignis.nn.attention(q, k, v, causal=causal)
    dq, dk, dv = ignis.nn.attention_backward(g, q, k, v, out, lse, causal=causal)
    key = (dtype, causal, e, seqs)  # both kernel families compare with one reference
    if key not in _REFERENCES:
        _REFERENCES[key] = ref_attention(qh, kh, vh, causal, scale, grad=gh)
    want_out, want_lse, grads = _REFERENCES[key]
    got = [np.asarray(a.to_host(), np.float64) for a in (out, lse, dq, dk, dv)]
    for name, x, want in zip(
        ("out", "lse", "dq", "dk", "dv"), got, (want_out, want_lse, *grads), strict=True
    ):
        assert_close(x, want, dtype, name)


@pytest.mark.gpu
@pytest.mark.parametrize("tiled", [True, False], ids=["tiled", "first"])
@pytest.mark.parametrize("e", [64, 128])
def test_scalar_kernels_non_contiguous_and_unaligned_on_gpu(tiled, e, tune):
    # Transposed views (copied by the front end) and a base 4 bytes past a 16-byte boundary
    # (the tiled kernels then copy element by element).
    tune(attention=dict(simt_tiled=tiled))
    rng = np.random.default_rng(e)
    # (B, L, H, E) storage viewed as (B, H, L, E)
    base = ignis.asarray(rng.standard_normal((1, 150, 2, e)), dtype="float32", device="cuda:0")
    q = base.transpose(0, 2, 1, 3)
    flat = ignis.asarray(rng.standard_normal(1 + 2 * 90 * e), dtype="float32", device="cuda:0")
    k = flat[1:].reshape(1, 2, 90, e)  # one element into its buffer: not 16-byte aligned
    v, g = (
        ignis.asarray(rng.standard_normal(s), dtype="float32", device="cuda:0")
        for s in ((1, 2, 90, e), (1, 2, 150, e))
    )
    qh, kh, vh, gh = (np.asarray(a.to_host(), np.float64) for a in (q, k, v, g))
    assert not q.is_contiguous
    out, lse = ignis.nn.attention(q, k, v, causal=True)
    dq, dk, dv = ignis.nn.attention_backward(g, q, k, v, out, lse, causal=True)
    want_out, want_lse, grads = ref_attention(qh, kh, vh, True, 1 / math.sqrt(e), grad=gh)
    got = [np.asarray(a.to_host(), np.float64) for a in (out, lse, dq, dk, dv)]
    for name, x, want in zip(
        ("out", "lse", "dq", "dk", "dv"), got, (want_out, want_lse, *grads), strict=True
    ):
        assert_close(x, want, "float32", name)


@pytest.mark.gpu
@pytest.mark.parametrize("tiled", [True, False], ids=["tiled", "first"])
def test_scalar_kernels_nan_inf_and_empty_on_gpu(tiled, tune):
    tune(attention=dict(simt_tiled=tiled))
    rng = np.random.default_rng(7)
    qh = rng.standard_normal((1, 2, 70, 64))
    qh[0, 0, 5, 3] = np.nan
    q = ignis.asarray(qh.astype(np.float32), device="cuda:0")
    k = ignis.asarray(rng.standard_normal((1, 2, 70, 64)).astype(np.float32), device="cuda:0")
    out, lse = ignis.nn.attention(q, k, k)
    o = np.asarray(out.to_host())
    assert np.all(np.isnan(o[0, 0, 5])) and np.all(np.isfinite(o[0, 1]))
    assert np.all(np.isfinite(np.delete(o[0, 0], 5, axis=0)))
    # Huge scores: the running maximum keeps every exponent finite.
    big = ignis.asarray(1e3 * rng.standard_normal((1, 1, 40, 64)), dtype="float32", device="cuda:0")
    out, lse = ignis.nn.attention(big, big, big, causal=True)
    assert np.all(np.isfinite(np.asarray(out.to_host())))
    assert np.all(np.isfinite(np.asarray(lse.to_host())))
    # Causal with L > S: the first L - S queries see no key (zero rows, lse -inf).
    q = ignis.asarray(rng.standard_normal((1, 1, 50, 64)).astype(np.float32), device="cuda:0")
    k = ignis.asarray(rng.standard_normal((1, 1, 20, 64)).astype(np.float32), device="cuda:0")
    out, lse = ignis.nn.attention(q, k, k, causal=True)
    assert np.all(np.asarray(out.to_host())[0, 0, :30] == 0)
    assert np.all(np.isneginf(np.asarray(lse.to_host())[0, 0, :30]))
    assert np.all(np.isfinite(np.asarray(lse.to_host())[0, 0, 30:]))
    empty = ignis.asarray(np.zeros((1, 1, 0, 64), np.float32), device="cuda:0")
    out, lse = ignis.nn.attention(empty, k, k)
    assert out.shape == (1, 1, 0, 64) and lse.shape == (1, 1, 0)


# --- the fused backward on the host emulator (no GPU needed) --------------------------------------


def _fused_runs(dim):
    """(B, H, L, S, E, vec, scheme): self-attention of T in {1, 31, 33, 100} on the packed
    views of (B, T, 3, H, E) projections, at both head dims of the build; L != S both ways
    (causal queries without keys when L > S) on mixed strided views with element copies and an
    E that is not a multiple of 4 (scalar atomics)."""
    small, full = (32, 64) if dim == 64 else (96, 128)
    odd = 63 if dim == 64 else 99
    return [
        (2, 3, 1, 1, small, 1, "packed"),
        (1, 2, 31, 31, small, 1, "packed"),
        (2, 2, 33, 33, full, 1, "packed"),
        (1, 1, 100, 100, full, 1, "packed"),
        (1, 2, 33, 100, odd, 0, "mixed"),
        (2, 1, 100, 31, full, 0, "mixed"),
    ]


FUSED_BUILDS = [(d, dim, c) for d in ("float32", "float64") for dim in (64, 128) for c in (0, 1)]


@pytest.mark.parametrize("build", FUSED_BUILDS, ids=lambda b: "-".join(map(str, b)))
@pytest.mark.exhaustive
def test_fused_backward_on_the_host_emulator(tiled_emulator, tmp_path, build):
    dtype, dim, causal = build
    exe = _build_tiled(tiled_emulator, dtype, dim, causal)
    for run in _fused_runs(dim):
        _run_case(exe, tmp_path, dtype, dim, causal, run, fused=True)


# The fused emulator comparisons can fail: faults in its dQ path are caught. fault -> (text,
# replacement, build (dtype, head dim, causal), run)
FUSED_FAULTS = {
    # dQ = dS V instead of dS K
    "dq_operand": (
        "tile_pv<T, CM, G, BN, LDQ, LD>(dqa, dss, ks, ty, tx);",
        "tile_pv<T, CM, G, BN, LDQ, LD>(dqa, dss, vs, ty, tx);",
        ("float32", 64, 0),
        (1, 1, 33, 33, 64, 1, "dense"),
    ),
    # P instead of dS in the dQ tile
    "dq_tile": (
        "if constexpr (DQ) dss[qry * LDQ + key] = ds;",
        "if constexpr (DQ) dss[qry * LDQ + key] = p;",
        ("float64", 128, 1),
        (1, 1, 31, 31, 96, 1, "packed"),
    ),
    # the first query that sees a key block's first key left out of its dQ sums
    "dq_first_row": (
        "tile_atomic_add<T, CM, G>(dqb, dqa, m0, q_first, L, E, vec4, ty, tx);",
        "tile_atomic_add<T, CM, G>(dqb, dqa, m0, q_first + 1, L, E, vec4, ty, tx);",
        ("float32", 64, 1),
        (1, 1, 100, 100, 64, 1, "dense"),
    ),
    # the last column of the scalar atomics (E not a multiple of 4) left out
    "dq_tail": (
        "if (col + w < E) atomicAdd(dst + col + w, a[w]);",
        "if (col + w < E - 1) atomicAdd(dst + col + w, a[w]);",
        ("float32", 64, 0),
        (1, 2, 33, 100, 63, 0, "mixed"),
    ),
}


@pytest.mark.parametrize("fault", sorted(FUSED_FAULTS))
@pytest.mark.exhaustive
def test_a_faulty_fused_backward_is_caught(tmp_path, fault):
    import shutil

    src = tmp_path / "cuda_src"
    shutil.copytree(_sources.cuda_src_dir(), src)
    old, new, (dtype, dim, causal), run = FUSED_FAULTS[fault]
    text = (src / "attention.cu").read_text()
    assert text.count(old) == 1, fault
    (src / "attention.cu").write_text(text.replace(old, new))
    builder = tc_emulator.Builder(tmp_path, "attn_tiled", _EMU_PART, cuda_src=src)
    exe = _build_tiled(builder, dtype, dim, causal)
    with pytest.raises(AssertionError, match=r"dq: max error"):
        _run_case(exe, tmp_path, dtype, dim, causal, run, fused=True)
    _run_case(exe, tmp_path, dtype, dim, causal, run, fused=False)  # (the two passes: intact)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.exhaustive
def test_fused_backward_registers_within_its_launch_bounds(dtype, tmp_path, monkeypatch):
    # The fused kernel keeps the dK/dV kernel's launch bounds: registers within them, and no
    # more spilled than the two-pass dK/dV kernel of the same tiles spills.
    monkeypatch.setenv("IGNIS_CACHE_DIR", str(tmp_path / "cache"))
    ignis.jit.clear_cache(memory=True)
    pairs = []
    for e in (64, 128):
        for causal in (False, True):
            names = cuda_attention.tiled_kernel_names(dtype, e, causal)
            pairs.append((names["fused"], names["dkdv"], e))
    report = ptxas_report({n for fused, dkdv, _ in pairs for n in (fused, dkdv)})
    assert len(report) == 2 * len(pairs), report
    for fused, dkdv, e in pairs:
        minb = ignis.tuning().attention.simt_tiles[(dtype, e)]["fused"][3]
        regs, spills = report[fused]
        assert regs <= min(255, 65536 // (256 * minb)), (fused, report[fused])
        if (
            ignis.tuning().attention.simt_tiles[(dtype, e)]["fused"]
            == ignis.tuning().attention.simt_tiles[(dtype, e)]["dkdv"]
        ):
            assert spills <= report[dkdv][1], (fused, report[fused], dkdv, report[dkdv])


# --- the fused and the two-pass backward on the GPU -----------------------------------------------


def _only_path(monkeypatch, tune, fused):
    """Select the tiled backward ``fused`` (or the two passes) and make the other one fail, so
    that a switch that is not honoured cannot pass unnoticed."""

    def not_this_one(*args, **kwargs):
        raise AssertionError("the backward ran the path simt_fused_dq did not select")

    tune(attention=dict(simt_tiled=True, simt_fused_dq=fused))
    other = "_backward_tiled" if fused else "_backward_tiled_fused"
    monkeypatch.setattr(cuda_attention, other, not_this_one)


@pytest.mark.gpu
@pytest.mark.parametrize("fused", [True, False], ids=["fused", "two-pass"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n", [1, 31, 33, 100, 257])
@pytest.mark.parametrize("e", [32, 64, 96, 128])
def test_tiled_backward_on_packed_views_on_gpu(fused, dtype, causal, n, e, monkeypatch, tune):
    # packed_attention's layouts: q, k, v and dq, dk, dv are slots of (B, T, 3, H, E) arrays
    # (dq written by the finish launch through its strides), grad_out a (B, T, H, E) buffer;
    # the spare slot next to the gradients keeps its values.
    _only_path(monkeypatch, tune, fused)
    b, h = 2, 3
    rng = np.random.default_rng(n * 1000 + e + causal)
    packed, qkv = _packed(rng, b, n, h, e, dtype, "cuda:0")
    q, k, v = _heads(qkv)
    out, lse = ignis.nn.attention(q, k, v, causal=causal)
    g_merged = data(rng, [(b, n, h, e)], dtype)[0]
    g = ignis.asarray(g_merged.astype(NP[dtype]), device="cuda:0").permute(0, 2, 1, 3)
    grad = ignis.full((b, n, 4, h, e), 7.0, dtype=dtype, device="cuda:0")  # slot 3 is spare
    slots = list(grad.permute(2, 0, 3, 1, 4)[:3])
    ignis.nn.attention_backward(
        g, q, k, v, out, lse, causal=causal, dq=slots[0], dk=slots[1], dv=slots[2]
    )
    qh, kh, vh = _heads(packed)
    gh = g_merged.transpose(0, 2, 1, 3)
    _, _, grads = ref_attention(qh, kh, vh, causal, 1 / math.sqrt(e), grad=gh)
    got = np.asarray(grad.to_host(), np.float64)
    assert np.all(got[:, :, 3] == 7), "a gradient was written into the spare slot"
    for i, (name, want) in enumerate(zip(("dq", "dk", "dv"), grads, strict=True)):
        assert_close(got[:, :, i].transpose(0, 2, 1, 3), want, dtype, name)


@pytest.mark.gpu
@pytest.mark.parametrize("fused", [True, False], ids=["fused", "two-pass"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("e", [17, 63, 100])
@pytest.mark.parametrize(
    "seqs",
    [(33, 100), (100, 31), (1, 257), (257, 1), (65, 200), (200, 7)],
    ids=lambda s: f"L{s[0]}-S{s[1]}",
)
def test_tiled_backward_with_l_not_s_on_gpu(fused, dtype, causal, e, seqs, monkeypatch, tune):
    # L != S both ways (causal queries without keys when L > S), head dims that are not a
    # multiple of 4 (scalar atomics) or of 16 bytes (element copies).
    _only_path(monkeypatch, tune, fused)
    n_q, n_k = seqs
    b, h = 2, 2
    rng = np.random.default_rng(n_q * 1000 + n_k + e)
    shapes = [(b, h, n_q, e), (b, h, n_k, e), (b, h, n_k, e), (b, h, n_q, e)]
    qh, kh, vh, gh = data(rng, shapes, dtype)
    q, k, v, g = (ignis.asarray(x.astype(NP[dtype]), device="cuda:0") for x in (qh, kh, vh, gh))
    out, lse = ignis.nn.attention(q, k, v, causal=causal)
    dq, dk, dv = ignis.nn.attention_backward(g, q, k, v, out, lse, causal=causal)
    _, _, grads = ref_attention(qh, kh, vh, causal, 1 / math.sqrt(e), grad=gh)
    for name, x, want in zip(("dq", "dk", "dv"), (dq, dk, dv), grads, strict=True):
        assert_close(np.asarray(x.to_host(), np.float64), want, dtype, name)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_fused_backward_at_a_training_shape_on_gpu(dtype, monkeypatch, tune):
    # A GPT step's shape (T = 256, E = 64, causal, on fewer heads): many key blocks add into
    # every dQ row. Both paths against the reference, and two fused runs agree to rounding
    # (the order of the atomics may differ between them).
    b, h, n, e = 2, 6, 256, 64
    rng = np.random.default_rng(256)
    shapes = [(b, h, n, e)] * 4
    qh, kh, vh, gh = data(rng, shapes, dtype)
    q, k, v, g = (ignis.asarray(x.astype(NP[dtype]), device="cuda:0") for x in (qh, kh, vh, gh))
    out, lse = ignis.nn.attention(q, k, v, causal=True)
    _, _, grads = ref_attention(qh, kh, vh, True, 1 / math.sqrt(e), grad=gh)
    results = {}
    for fused in (True, False, True):
        with monkeypatch.context() as m:
            _only_path(m, tune, fused)
            got = ignis.nn.attention_backward(g, q, k, v, out, lse, causal=True)
        got = [np.asarray(x.to_host(), np.float64) for x in got]
        for name, x, want in zip(("dq", "dk", "dv"), got, grads, strict=True):
            assert_close(x, want, dtype, f"{name} ({'fused' if fused else 'two-pass'})")
        if fused in results:
            for name, x, y in zip(("dq", "dk", "dv"), got, results[fused], strict=True):
                assert_close(x, y, dtype, f"{name} (a second fused run)")
        results[fused] = got
    # With the same tiles, dK and dV come from the same arithmetic in both paths.
    tiles = ignis.tuning().attention.simt_tiles[(dtype, 64)]
    if tiles["fused"] == tiles["dkdv"]:
        for name, x, y in zip(("dk", "dv"), results[True][1:], results[False][1:], strict=True):
            assert np.array_equal(x, y), f"{name}: the fused pass and the dK/dV pass differ"
