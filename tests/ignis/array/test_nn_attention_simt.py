"""The scalar (float32 / float64) attention kernels: the register-tiled ones
(``flash_*_simt_tiled``) and the first ones (``flash_*_simt``), against a NumPy float64
reference. On the GPU every case runs both families (``SIMT_TILED`` True and False); without a
GPU the tiled kernels run on the host emulator of ``test_nn_attention`` and compile for sm_90."""

from __future__ import annotations

import math

import ignis.nn
import numpy as np
import pytest
import tc_emulator
from ignis._array._cuda_backend import attention as cuda_attention
from test_nn_attention import _i32, _u64, ref_attention
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
def test_switch_selects_the_family(tiled, monkeypatch):
    monkeypatch.setattr(cuda_attention, "SIMT_TILED", tiled)
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
def test_tiled_shared_memory_fits_sm80_and_sm90(dtype):
    # sm_80 lets a block opt in to 163 KiB, sm_90 to 227 KiB; with MINB = 2, two blocks must fit.
    for d in (64, 128):
        for kind, (rows, step, stages, minb) in cuda_attention.SIMT_TILES[(dtype, d)].items():
            smem = cuda_attention.tiled_smem(dtype, d, kind)
            assert smem <= 163 * 1024, (dtype, d, kind, smem)
            assert minb * (smem + 1024) <= 228 * 1024, (dtype, d, kind, smem)
            assert rows % 16 == 0 and step % 16 == 0 and stages in (1, 2)
    # float32, head dim 64, forward: Q (64 x 68), K and V two stages (4 x 64 x 68), P (64 x 68)
    assert cuda_attention.tiled_smem("float32", 64, "fwd") == (64 + 4 * 64 + 64) * 68 * 4


@pytest.mark.parametrize("dtype", ["float32", "float64"])
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
    from ignis._signature import parse_kernel_params

    src = _sources.read_source("attention.cu")
    for name in cuda_attention.tiled_kernel_names(dtype, 100, False).values():
        params = parse_kernel_params(src, name)
        assert params and all(p.kind in ("pointer", "int", "float") for p in params), (name, params)


# --- launches over the fake driver of tests/ignis/runtime (no GPU needed) ------------------------


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_tiled_launches_over_a_fake_driver(fake, dtype, monkeypatch):  # noqa: F811
    import struct

    monkeypatch.setattr(cuda_attention, "SIMT_TILED", True)
    q = ignis.empty((2, 3, 100, 80), dtype=dtype, device="cuda:0")
    k = ignis.empty((2, 3, 70, 80), dtype=dtype, device="cuda:0")
    t = {"float32": "float", "float64": "double"}[dtype]
    tiles = cuda_attention.SIMT_TILES[(dtype, 128)]
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


# --- the tiled kernels on the host emulator (no GPU needed) ---------------------------------------

_EMU_PART = r"""
// The register-tiled scalar attention kernels of attention.cu on the emulator of tc_emulator.py.
// Build: -DEMU_T=<float|double> -DEMU_D=<64|128> -DEMU_CAUSAL=<0|1> and the tiles
//        -D{FWD,KV,DQ}_{A,B,ST} (rows per block, rows per streamed tile, stages)
// Run:   emulator <in> <out> bh L S E scale vec smem_fwd smem_kv smem_q   (input: q, k, v, dout;
//        output: out, lse, dq, dk, dv, all raw little-endian)
#define IGNIS_ATTN_HOST_EMULATION 1

namespace ignis {
namespace attn {
inline unsigned char* dynamic_smem() { return ::emu::dyn_smem; }
inline void require_smem(unsigned bytes) {
  if (bytes > ::emu::dyn_smem_size) ::emu::die("kernel trapped: not enough dynamic shared memory");
}
}  // namespace attn
}  // namespace ignis

#include "attention.cu"

template <class P> P* aligned(size_t n) {
  return (P*)std::aligned_alloc(256, ((n * sizeof(P) + 255) / 256) * 256 + 256);
}

int main(int argc, char** argv) {
  using namespace ignis;
  using namespace ignis::attn;
  typedef EMU_T T;
  if (argc != 12) emu::die("usage: emulator <in> <out> bh L S E scale vec smem_fwd smem_kv smem_q");
  const int bh = std::atoi(argv[3]), L = std::atoi(argv[4]), S = std::atoi(argv[5]);
  const int E = std::atoi(argv[6]), vec = std::atoi(argv[8]);
  const double scale = std::atof(argv[7]);
  const size_t smem_fwd = std::atol(argv[9]), smem_kv = std::atol(argv[10]);
  const size_t smem_q = std::atol(argv[11]);
  const size_t nq = (size_t)bh * L * E, nk = (size_t)bh * S * E;
  T *q = aligned<T>(nq), *k = aligned<T>(nk), *v = aligned<T>(nk), *dout = aligned<T>(nq);
  FILE* in = std::fopen(argv[1], "rb");
  if (!in || std::fread(q, sizeof(T), nq, in) != nq || std::fread(k, sizeof(T), nk, in) != nk ||
      std::fread(v, sizeof(T), nk, in) != nk || std::fread(dout, sizeof(T), nq, in) != nq)
    emu::die("short input");
  std::fclose(in);
  for (auto* p : {(const void*)q, (const void*)dout})
    emu::readable.push_back({(const unsigned char*)p, (const unsigned char*)p + nq * sizeof(T)});
  for (auto* p : {(const void*)k, (const void*)v})
    emu::readable.push_back({(const unsigned char*)p, (const unsigned char*)p + nk * sizeof(T)});
  T *out = aligned<T>(nq), *dq = aligned<T>(nq), *dk = aligned<T>(nk), *dv = aligned<T>(nk);
  T *lse = aligned<T>((size_t)bh * L), *dvec = aligned<T>((size_t)bh * L);
  std::mt19937 rng(4321);
  constexpr int D = EMU_D;
  constexpr bool C = EMU_CAUSAL != 0;
  auto cdiv = [](int a, int b) { return (unsigned)((a + b - 1) / b); };
  const T sl2 = (T)(scale * 1.4426950408889634);
  emu::launch(cdiv(L, FWD_A), bh, kTiledThreads, smem_fwd, [&] {
    flash_fwd_simt_tiled<T, D, C, FWD_A, FWD_B, FWD_ST, 1>(q, k, v, out, lse, L, S, E, sl2, vec,
                                                          0);
  }, rng);
  emu::launch(cdiv(bh * L, 8), 1, 256, 0,
              [&] { attn_row_dot<T, T>(dout, out, dvec, (int64)bh * L, E); }, rng);
  emu::launch(cdiv(S, KV_A), bh, kTiledThreads, smem_kv, [&] {
    flash_bwd_dkdv_simt_tiled<T, D, C, KV_A, KV_B, KV_ST, 1>(q, k, v, dout, lse, dvec, dk, dv, L,
                                                            S, E, (T)scale, sl2, vec, 0);
  }, rng);
  emu::launch(cdiv(L, DQ_A), bh, kTiledThreads, smem_q, [&] {
    flash_bwd_dq_simt_tiled<T, D, C, DQ_A, DQ_B, DQ_ST, 1>(q, k, v, dout, lse, dvec, dq, L, S, E,
                                                          (T)scale, sl2, vec, 0);
  }, rng);
  FILE* o = std::fopen(argv[2], "wb");
  std::fwrite(out, sizeof(T), nq, o);
  std::fwrite(lse, sizeof(T), (size_t)bh * L, o);
  std::fwrite(dq, sizeof(T), nq, o);
  std::fwrite(dk, sizeof(T), nk, o);
  std::fwrite(dv, sizeof(T), nk, o);
  std::fclose(o);
  return 0;
}
"""

# (dtype, padded head dim, causal) and runs (batch*heads, L, S, E, vec): partial tiles on both
# sides, L != S both ways (causal rows without keys when L > S), E below the padded head dim,
# element copies (vec 0) and 16-byte asynchronous copies (vec 1), several tiles per block so
# the double buffer turns over.
EMULATED = [
    (("float32", 64, 1), [(2, 70, 100, 48, 1), (1, 45, 9, 63, 0), (1, 130, 130, 64, 1)]),
    (("float32", 64, 0), [(1, 33, 140, 17, 0), (2, 65, 7, 64, 1)]),
    (("float32", 128, 1), [(1, 70, 100, 128, 1), (1, 40, 33, 100, 0)]),
    (("float64", 64, 1), [(1, 50, 70, 64, 1), (1, 20, 17, 5, 0)]),
    (("float64", 128, 0), [(1, 33, 40, 100, 1)]),
]


@pytest.fixture(scope="module")
def tiled_emulator(tmp_path_factory):
    """A builder of the tiled-kernel harness (each configuration compiled once per module)."""
    return tc_emulator.Builder(tmp_path_factory.mktemp("attention-tiled"), "attn_tiled", _EMU_PART)


def _build_tiled(emulator, dtype, dim, causal):
    ctype = {"float32": "float", "float64": "double"}[dtype]
    tiles = {}
    for kind, prefix in (("fwd", "FWD"), ("dkdv", "KV"), ("dq", "DQ")):
        a, b, st, _ = cuda_attention.SIMT_TILES[(dtype, dim)][kind]
        tiles.update({f"{prefix}_A": a, f"{prefix}_B": b, f"{prefix}_ST": st})
    return emulator.build(
        f"tiled_{dtype}_{dim}_{causal}", EMU_T=ctype, EMU_D=dim, EMU_CAUSAL=causal, **tiles
    )


@pytest.mark.parametrize("build,runs", EMULATED, ids=lambda x: "-".join(map(str, x)))
def test_tiled_kernels_on_the_host_emulator(tiled_emulator, tmp_path, build, runs):
    dtype, dim, causal = build
    exe = _build_tiled(tiled_emulator, dtype, dim, causal)
    for run in runs:
        _run_case(exe, tmp_path, dtype, dim, causal, run)


def _run_case(exe, tmp_path, dtype, dim, causal, run):
    """One emulator run on random inputs, every output compared with the reference."""
    bh, n_q, n_k, e, vec = run
    assert cuda_attention.tiled_head_dim(e) == dim
    assert not vec or e * np.dtype(NP[dtype]).itemsize % 16 == 0
    smem = [cuda_attention.tiled_smem(dtype, dim, kind) for kind in ("fwd", "dkdv", "dq")]
    rng = np.random.default_rng(n_q * 1000 + n_k + e)
    shapes = [(bh, n_q, e), (bh, n_k, e), (bh, n_k, e), (bh, n_q, e)]
    q, k, v, g = data(rng, shapes, dtype)
    inp, outp = tmp_path / "in.bin", tmp_path / "out.bin"
    inp.write_bytes(b"".join(a.astype(NP[dtype]).tobytes() for a in (q, k, v, g)))
    scale = 1 / math.sqrt(e)
    what = f"{dtype} D={dim} causal={causal} {run}"
    tc_emulator.run(exe, [inp, outp, bh, n_q, n_k, e, repr(scale), vec, *smem], what)
    raw, parts, offset = outp.read_bytes(), [], 0
    for shape in (shapes[0], shapes[0][:2], shapes[0], shapes[1], shapes[1]):
        n = int(np.prod(shape))
        parts.append(np.frombuffer(raw, NP[dtype], n, offset).astype(np.float64).reshape(shape))
        offset += n * np.dtype(NP[dtype]).itemsize
    assert offset == len(raw)
    want_out, want_lse, grads = ref_attention(q, k, v, bool(causal), scale, grad=g)
    for name, got, want in zip(
        ("out", "lse", "dq", "dk", "dv"), parts, (want_out, want_lse, *grads), strict=True
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
def test_a_faulty_tiled_kernel_is_caught(tmp_path, fault):
    import shutil

    src = tmp_path / "cuda_src"
    shutil.copytree(_sources.cuda_src_dir(), src)
    old, new = FAULTS[fault]
    text = (src / "attention.cu").read_text()
    assert old in text
    (src / "attention.cu").write_text(text.replace(old, new))
    builder = tc_emulator.Builder(tmp_path, "attn_tiled", _EMU_PART, cuda_src=src)
    exe = _build_tiled(builder, "float32", 64, 1)
    with pytest.raises(AssertionError, match=r"max error|pattern differs"):
        _run_case(exe, tmp_path, "float32", 64, 1, (1, 130, 130, 64, 1))


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
def test_scalar_kernels_on_gpu(tiled, dtype, causal, e, seqs, monkeypatch):
    monkeypatch.setattr(cuda_attention, "SIMT_TILED", tiled)
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
def test_scalar_kernels_non_contiguous_and_unaligned_on_gpu(tiled, e, monkeypatch):
    # Transposed views (copied by the front end) and a base 4 bytes past a 16-byte boundary
    # (the tiled kernels then copy element by element).
    monkeypatch.setattr(cuda_attention, "SIMT_TILED", tiled)
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
def test_scalar_kernels_nan_inf_and_empty_on_gpu(tiled, monkeypatch):
    monkeypatch.setattr(cuda_attention, "SIMT_TILED", tiled)
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
