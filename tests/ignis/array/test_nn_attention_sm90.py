"""The Hopper kernels of float16 / bfloat16 attention (``flash_fwd_wgmma`` and
``flash_bwd_fused_wgmma`` in cuda_src/attention_sm90.cu, warpgroup MMA, built for sm_90a): when
they run, how they are launched, that they build within their registers, and on an H200 that
they give the reference's results."""

from __future__ import annotations

import math
import re
import struct

import ignis.nn
import numpy as np
import pytest
from ignis._array._cuda_backend import attention as cuda_attention
from test_nn_attention import assert_close, host, make, ref_attention
from test_nn_attention import fake as fake  # noqa: F401 (the fixture, used by name)

import ignis
from ignis import _sources

CTYPE = {"bfloat16": "ignis::bfloat16", "float16": "ignis::float16"}
# Bytes of spill stores a Hopper kernel may have: the forward spills none and the backward 64 at
# head dim 128 (dK and dV alone take 128 registers); their copies are the TMA unit's. A tile that
# no longer fits spills several hundred (three forward warpgroups at head dim 128: 336).
SPILL_LIMIT = {"fwd": 0, "bwd": 128}


def wgmma_name(dtype: str, d: int, causal: bool, n_q: int) -> str:
    groups, keys = cuda_attention.wgmma_fwd_tiles(d, causal, n_q)
    c = "true" if causal else "false"
    return f"ignis::attn::flash_fwd_wgmma<{CTYPE[dtype]}, {d}, {c}, {groups}, {keys}>"


# --- which forward runs, and its launch (fake driver: a stand-in H200) ---------------------------


def tensor_map_calls(fake):
    """(address, dims, byte strides, box, swizzle name) of each tensor map the fake driver built."""
    calls = []
    for args in fake.calls["cuTensorMapEncodeTiled"]:
        _, rank, address, dims, strides, box, elem, *_, swizzle, _, _ = args
        assert rank == len(dims) == len(box) == len(elem) == len(strides) + 1
        assert [int(x) for x in elem] == [1] * rank
        calls.append(
            (
                address,
                [int(x) for x in dims],
                [int(x) for x in strides],
                [int(x) for x in box],
                swizzle.name,
            )
        )
    return calls


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("e,d", [(64, 64), (40, 64), (128, 128), (120, 128)])
@pytest.mark.parametrize("causal", [False, True])
def test_hopper_forward_launch_over_a_fake_driver(fake, dtype, e, d, causal, tune):  # noqa: F811
    q = ignis.empty((2, 3, 300, e), dtype=dtype, device="cuda:0")
    k = ignis.empty((2, 3, 200, e), dtype=dtype, device="cuda:0")
    v = ignis.empty((2, 3, 200, e), dtype=dtype, device="cuda:0")
    fake.launches.clear()
    out, lse = ignis.nn.attention(q, k, v, causal=causal, scale=0.25)
    ((name, grid, block, _, args),) = fake.launches
    tiles = groups, keys = cuda_attention.wgmma_fwd_tiles(d, causal, 300)
    assert name == wgmma_name(dtype, d, causal, 300)
    # 64 queries per warpgroup; the Q tile, two K and three V tile buffers, 11 mbarriers (128
    # bytes), 1 KiB of alignment
    assert grid == (math.ceil(300 / (64 * groups)), 6, 1) and block == (128 * groups, 1, 1)
    smem = 1024 + (64 * groups + 5 * keys) * d * 2 + 128
    assert cuda_attention.wgmma_fwd_smem(d, tiles) == smem and smem <= 227 * 1024
    assert (name, smem) in fake.optin
    # q, k, v as tensor maps: dims (E, rows, H, B) with their byte strides; one copy is 64
    # columns of a query tile / key tile of one head, swizzled by 128 bytes.
    item = q.itemsize
    assert tensor_map_calls(fake) == [
        (
            ptr,
            [e, rows, 3, 2],
            [e * item, rows * e * item, 3 * rows * e * item],
            [64, box, 1, 1],
            "CU_TENSOR_MAP_SWIZZLE_128B",
        )
        for ptr, rows, box in (
            (q.data_ptr, 300, 64 * groups),
            (k.data_ptr, 200, keys),
            (v.data_ptr, 200, keys),
        )
    ]
    assert all(len(a) == 128 for a in args[:3])
    assert struct.unpack("<f", args[8])[0] == pytest.approx(0.25 * 1.4426950408889634)
    # The other arguments are the mma.sync forward's, without the 16-byte copy flag.
    tune(attention=dict(fwd_wgmma=False))
    fake.launches.clear()
    ignis.nn.attention(q, k, v, causal=causal, scale=0.25, out=out)
    ((other, _, _, _, other_args),) = fake.launches
    assert other.startswith("ignis::attn::flash_fwd_tc_m32<")
    assert struct.unpack("<i", other_args[9]) == (1,)  # vec
    mine = [a for i, a in enumerate(args) if i != 4]  # (the lse row of each call is its own)
    assert mine[3:] == [a for i, a in enumerate(other_args) if i not in (4, 9)][3:]


def test_short_causal_forwards_take_smaller_query_tiles(fake):  # noqa: F811
    tiles = cuda_attention.wgmma_fwd_tiles
    assert tiles(64, False, 1024) == tiles(64, True, 4096) == (3, 128)
    assert tiles(64, True, 1024) == tiles(64, True, 2048) == (2, 128)
    assert tiles(128, True, 1024) == tiles(128, False, 8192) == (2, 128)
    for n_q, groups in ((2048, 2), (2049, 3)):
        q = ignis.empty((1, 2, n_q, 64), dtype="bfloat16", device="cuda:0")
        fake.launches.clear()
        ignis.nn.attention(q, q, q, causal=True)
        ((name, grid, block, *_),) = fake.launches
        assert name == wgmma_name("bfloat16", 64, True, n_q) and f"64, true, {groups}, 128>" in name
        assert grid == (math.ceil(n_q / (64 * groups)), 2, 1) and block == (128 * groups, 1, 1)
        assert (name, cuda_attention.wgmma_fwd_smem(64, (groups, 128))) in fake.optin


def test_hopper_forward_reads_packed_heads_through_their_strides(fake):  # noqa: F811
    # Heads out of a packed (B, T, 3, H, E) projection: a row steps over 3 H E elements, a
    # head over E.
    b, n, h, e = 2, 70, 4, 64
    qkv = ignis.empty((b, n, 3, h, e), dtype="bfloat16", device="cuda:0")
    q, k, v = (qkv[:, :, i].permute(0, 2, 1, 3) for i in range(3))
    fake.calls["cuTensorMapEncodeTiled"].clear()
    ignis.nn.attention(q, k, v, causal=True)
    maps = tensor_map_calls(fake)
    assert [m[0] for m in maps] == [qkv.data_ptr + i * h * e * 2 for i in range(3)]
    assert all(
        list(m[1:3]) == [[e, n, h, b], [3 * h * e * 2, e * 2, n * 3 * h * e * 2]] for m in maps
    )


def test_forward_without_tensor_maps_takes_the_mma_sync_kernel(fake):  # noqa: F811
    # TMA reads 16-byte aligned bases and strides, and no broadcast (stride 0) dim.
    def forward_name(q, k, v):
        fake.launches.clear()
        fake.calls["cuTensorMapEncodeTiled"].clear()
        ignis.nn.attention(q, k, v)
        ((name, *_),) = fake.launches
        return name.split("<")[0], len(fake.calls["cuTensorMapEncodeTiled"])

    dense = ignis.empty((2, 3, 50, 64), dtype="bfloat16", device="cuda:0")
    # (q's map, and one for k and v: the same array, the same tile)
    assert forward_name(dense, dense, dense) == ("ignis::attn::flash_fwd_wgmma", 2)
    rows100 = ignis.empty((2, 3, 50, 100), dtype="bfloat16", device="cuda:0")  # 200-byte rows
    assert forward_name(rows100, rows100, rows100) == ("ignis::attn::flash_fwd_tc_m32", 0)
    wide = ignis.empty((2, 3, 50, 72), dtype="bfloat16", device="cuda:0")
    shifted = wide[..., 1:65]  # the base 2 bytes past an aligned address
    assert forward_name(shifted, dense, dense) == ("ignis::attn::flash_fwd_tc_m32", 0)
    one_head = ignis.empty((2, 1, 50, 64), dtype="bfloat16", device="cuda:0")
    shared = one_head.broadcast_to((2, 3, 50, 64))  # every head reads the same rows
    assert forward_name(dense, shared, shared) == ("ignis::attn::flash_fwd_tc_m32", 0)


@pytest.mark.parametrize("e,d", [(64, 64), (128, 128), (120, 128)])
@pytest.mark.parametrize("causal", [False, True])
def test_hopper_backward_launch_over_a_fake_driver(fake, e, d, causal, tune):  # noqa: F811
    b, h, n_q, n_k = 2, 3, 100, 300
    q = ignis.empty((b, h, n_q, e), dtype="bfloat16", device="cuda:0")
    k = ignis.empty((b, h, n_k, e), dtype="bfloat16", device="cuda:0")
    lse = ignis.empty((b, h, n_q), dtype="float32", device="cuda:0")
    fake.launches.clear()
    fake.calls["cuTensorMapEncodeTiled"].clear()
    ignis.nn.attention_backward(q, q, k, k, q, lse, causal=causal, scale=0.5)
    names = [n for n, *_ in fake.launches]
    c = "true" if causal else "false"
    name = f"ignis::attn::flash_bwd_fused_wgmma<ignis::bfloat16, {d}, {c}, 64>"
    assert [n.split("<")[0] for n in names] == [
        "ignis::attn::attn_row_dot",
        "ignis::attn::flash_bwd_fused_wgmma",
        "ignis::attn::attn_dq_finish",
    ]
    ((_, grid, block, _, args),) = [x for x in fake.launches if x[0] == name]
    assert grid == (3, b * h, 1) and block == (256, 1, 1)  # 300 keys: 3 blocks of 128
    # K and V (128 keys), Q and dO (64 queries) two buffers each, dS^T (128 x 64), 16-bit;
    # lse and D rows two buffers each, float32; three mbarriers (64 bytes); 1 KiB of alignment
    smem = 1024 + (2 * 128 * d + 4 * 64 * d + 128 * 64) * 2 + 4 * 64 * 4 + 64
    assert cuda_attention.wgmma_bwd_smem(d) == smem and smem <= 227 * 1024
    assert (name, smem) in fake.optin
    # q, k, v, grad_out as tensor maps: a copy is one 64-query or 128-key tile. (v is k and
    # grad_out is q here: their maps are the ones just built, kept.)
    item = 2
    assert tensor_map_calls(fake) == [
        (
            a.data_ptr,
            [e, rows, h, b],
            [e * item, rows * e * item, h * rows * e * item],
            [64, box, 1, 1],
            "CU_TENSOR_MAP_SWIZZLE_128B",
        )
        for a, rows, box in ((q, n_q, 64), (k, n_k, 128))
    ]
    assert all(len(a) == 128 for a in args[:4])
    # The other arguments are the mma.sync fused backward's without the 16-byte copy flag (the
    # scratch D rows and dQ sums, and dk and dv, are new each call).
    tune(attention=dict(bwd_wgmma=False))
    fake.launches.clear()
    ignis.nn.attention_backward(q, q, k, k, q, lse, causal=causal, scale=0.5)
    ((other_args),) = [a for n, _, _, _, a in fake.launches if "flash_bwd_fused_tc" in n]
    fresh = (5, 6, 7, 8)
    assert struct.unpack("<i", other_args[14]) == (1,)  # vec
    mine = [a for i, a in enumerate(args) if i not in fresh][4:]
    assert mine == [a for i, a in enumerate(other_args) if i not in (*fresh, 14)][4:]


def test_backward_without_tensor_maps_takes_the_mma_sync_kernel(fake):  # noqa: F811
    q = ignis.empty((2, 3, 100, 100), dtype="bfloat16", device="cuda:0")  # 200-byte rows
    lse = ignis.empty((2, 3, 100), dtype="float32", device="cuda:0")
    fake.launches.clear()
    fake.calls["cuTensorMapEncodeTiled"].clear()
    ignis.nn.attention_backward(q, q, q, q, q, lse, causal=True)
    assert [n.split("<")[0] for n, *_ in fake.launches][1] == "ignis::attn::flash_bwd_fused_tc"
    assert fake.calls["cuTensorMapEncodeTiled"] == []


def test_other_cases_keep_the_mma_sync_forward(fake, monkeypatch):  # noqa: F811
    def forward_name(e, dtype="bfloat16"):
        q = ignis.empty((1, 2, 50, e), dtype=dtype, device="cuda:0")
        fake.launches.clear()
        ignis.nn.attention(q, q, q)
        ((name, *_),) = fake.launches
        return name.split("<")[0]

    assert forward_name(32) == forward_name(96) == "ignis::attn::flash_fwd_tc_m32"
    assert forward_name(64, "float32") == "ignis::attn::flash_fwd_simt_tiled"
    assert forward_name(64) == "ignis::attn::flash_fwd_wgmma"
    # another architecture (the sm_90a build runs on compute capability 9.0 only)
    gpu = ignis.Device(0)
    monkeypatch.setitem(gpu._properties, "compute_capability_major", 10)
    assert forward_name(64) == "ignis::attn::flash_fwd_tc_m32"
    assert not cuda_attention.uses_wgmma_forward("bfloat16", 64, gpu)


# --- builds --------------------------------------------------------------------------------------


def all_wgmma_names() -> list[str]:
    """The Hopper forward of every (dtype, head dim, causal) with its tiles (and the short causal
    ones), and the Hopper backward of each."""
    forwards = [
        cuda_attention.wgmma_fwd_name(dtype, d, causal, tiles)
        for dtype in CTYPE
        for d in ignis.tuning().attention.wgmma_tiles
        for causal in (False, True)
        for tiles in {
            cuda_attention.wgmma_fwd_tiles(d, causal, 2**31),  # long: the wgmma_tiles setting
            cuda_attention.wgmma_fwd_tiles(d, causal, 1),  # short
        }
    ]
    return forwards + [
        cuda_attention.kernel_names(dtype, d, causal)["bwd_fused_wgmma"]
        for dtype in CTYPE
        for d in ignis.tuning().attention.wgmma_tiles
        for causal in (False, True)
    ]


@pytest.mark.exhaustive
def test_every_hopper_forward_compiles_for_sm90a():
    from ignis._signature import parse_kernel_params

    names = all_wgmma_names()
    source = _sources.read_source(cuda_attention.SOURCE_SM90)
    obj = ignis.compile(
        source,
        ignis.CompileOptions(arch="sm_90a"),
        name_expressions=names,
        name="attention_sm90.cu",
    )
    assert set(obj.lowered_names) == set(names) and obj.log == ""
    for name in names:  # the arguments the launches pack
        *plain, last = parse_kernel_params(source, name)
        if "fwd" in name:  # q, k, v tensor maps (by value), then as the mma.sync forward's
            assert [(p.ctype.split()[-1], p.name) for p in plain[:3]] == [
                ("tma::TensorMap", "qmap"),
                ("tma::TensorMap", "kmap"),
                ("tma::TensorMap", "vmap"),
            ], name
            plain = plain[3:]
            kinds = ["pointer"] * 2 + ["int"] * 3 + ["float", "int"]
        else:  # q, k, v, dout tensor maps, then as the mma.sync backward's
            assert [p.ctype.split()[-1] for p in plain[:4]] == ["tma::TensorMap"] * 4, name
            plain = plain[4:]
            kinds = ["pointer"] * 5 + ["int"] * 3 + ["float", "float", "int"]
        assert [p.kind for p in plain] == kinds, name
        # Layout is declared in the included attention.cu, which the signature reader does not
        # follow: "unknown" then, packed like a struct (its bytes, at the driver's size).
        assert last.kind in ("struct", "unknown"), (name, last)
        assert (last.ctype, last.name) == ("Layout", "lay"), (name, last)


@pytest.mark.exhaustive  # about 10 s of NVRTC
def test_hopper_kernels_fit_their_registers():
    # One block per SM of 128 * groups threads: 65536 / threads registers each at most, and few
    # spilled words (SPILL_LIMIT).
    names = all_wgmma_names()
    obj = ignis.compile(
        _sources.read_source(cuda_attention.SOURCE_SM90),
        ignis.CompileOptions(arch="sm_90a", extra=("--ptxas-options=-v",)),
        name_expressions=names,
        name="attention_sm90.cu",
    )
    by_symbol = {m: n for n, m in obj.lowered_names.items()}
    found = re.findall(
        r"Function properties for (\S+)\s*\n.*?(\d+) bytes spill stores.*?\n"
        r"ptxas info\s*: Used (\d+) registers",
        obj.log,
    )
    report = {by_symbol[sym]: (int(regs), int(spills)) for sym, spills, regs in found}
    assert set(report) == set(names)
    for name, (regs, spills) in report.items():
        kind = "fwd" if "fwd" in name else "bwd"
        groups = int(name.split(", ")[3]) if kind == "fwd" else 2  # (the backward: 2 groups)
        assert regs <= min(255, 65536 // (128 * groups)), (name, regs)
        assert spills <= SPILL_LIMIT[kind], (name, spills)


# --- on the GPU ----------------------------------------------------------------------------------


def _needs_hopper():
    if not ignis.is_available() or ignis.Device(0).compute_capability != (9, 0):
        pytest.skip("needs a GPU of compute capability 9.0")


@pytest.fixture
def launched(monkeypatch):
    """The name expressions of the attention kernels launched, in order."""
    names = []
    real_launch = cuda_attention._launch

    def spy(backend, name, *args, **kwargs):
        names.append(name)
        return real_launch(backend, name, *args, **kwargs)

    monkeypatch.setattr(cuda_attention, "_launch", spy)
    return names


HOPPER_SHAPES = [  # (B, H, L, S, E): partial tiles, L != S, a block with no visible key
    (2, 3, 300, 300, 64),
    (1, 2, 257, 511, 128),
    (1, 2, 513, 129, 128),
    (2, 2, 130, 70, 64),
    (1, 2, 1, 77, 64),
    (2, 2, 100, 140, 40),
    (1, 2, 200, 333, 100),
]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", HOPPER_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_hopper_forward_matches_reference(dtype, causal, shape, launched, tune):
    _needs_hopper()
    b, h, n_q, n_k, e = shape
    rng = np.random.default_rng(n_q * 1000 + n_k + e)
    qh, q = make(rng, (b, h, n_q, e), dtype, "cuda:0")
    kh, k = make(rng, (b, h, n_k, e), dtype, "cuda:0")
    vh, v = make(rng, (b, h, n_k, e), dtype, "cuda:0")
    out, lse = ignis.nn.attention(q, k, v, causal=causal)
    if e % 8 == 0:
        assert launched == [wgmma_name(dtype, 64 if e <= 64 else 128, causal, n_q)]
    else:  # rows of E = 100 elements are 200 bytes: no tensor maps (TMA steps by 16 bytes)
        assert launched[0].startswith("ignis::attn::flash_fwd_tc_m32<")
    want_out, want_lse, _ = ref_attention(qh, kh, vh, causal, 1 / math.sqrt(e))
    assert_close(host(out), want_out, dtype, "out")
    assert_close(host(lse), want_lse, "float32", "lse")
    # The mma.sync forward agrees up to float32 summation order and one rounding.
    tune(attention=dict(fwd_wgmma=False))
    out2, lse2 = ignis.nn.attention(q, k, v, causal=causal)
    assert launched[-1].startswith("ignis::attn::flash_fwd_tc_m32<")
    assert_close(host(out2), host(out), dtype, "out of the two forwards")
    assert_close(host(lse2), host(lse), "float32", "lse of the two forwards")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", HOPPER_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_hopper_backward_matches_reference(dtype, causal, shape, launched, tune):
    _needs_hopper()
    b, h, n_q, n_k, e = shape
    rng = np.random.default_rng(n_q * 1000 + n_k + e + 1)
    qh, q = make(rng, (b, h, n_q, e), dtype, "cuda:0")
    kh, k = make(rng, (b, h, n_k, e), dtype, "cuda:0")
    vh, v = make(rng, (b, h, n_k, e), dtype, "cuda:0")
    gh, g = make(rng, (b, h, n_q, e), dtype, "cuda:0")
    out, lse = ignis.nn.attention(q, k, v, causal=causal)
    grads = ignis.nn.attention_backward(g, q, k, v, out, lse, causal=causal)
    # (rows of E = 100 elements are 200 bytes: no tensor maps, the mma.sync backward)
    hopper = any(n.startswith("ignis::attn::flash_bwd_fused_wgmma<") for n in launched)
    assert hopper == (e % 8 == 0)
    _, _, want = ref_attention(qh, kh, vh, causal, 1 / math.sqrt(e), grad=gh)
    for name, got, ref in zip(("dq", "dk", "dv"), grads, want, strict=True):
        assert_close(host(got), ref, dtype, name)
    # The mma.sync backward agrees up to the order of dQ's float32 atomics and one rounding.
    tune(attention=dict(bwd_wgmma=False))
    other = ignis.nn.attention_backward(g, q, k, v, out, lse, causal=causal)
    assert launched[-2].startswith("ignis::attn::flash_bwd_fused_tc<")
    for name, got, ref in zip(("dq", "dk", "dv"), other, grads, strict=True):
        assert_close(host(got), host(ref), dtype, f"{name} of the two backwards")


@pytest.mark.gpu
@pytest.mark.parametrize("e", [64, 128])
def test_hopper_kernels_on_packed_and_unaligned_views(e):
    _needs_hopper()
    # Heads read in place from a packed (B, T, 3, H, E) projection, and an odd offset that
    # turns the 16-byte copies off; the output written into a merged (B, T, H, E) buffer and
    # the gradients into the q, k, v slots of one packed buffer.
    b, n, h, dtype = 2, 193, 3, "bfloat16"
    rng = np.random.default_rng(e)
    packed, qkv = make(rng, (b, n, 3 * h * e + 8), dtype, "cuda:0")  # rows 16-byte aligned
    for offset in (0, 1):
        heads = qkv[:, :, offset : offset + 3 * h * e].reshape(b, n, 3, h, e)
        q, k, v = (heads[:, :, i].permute(0, 2, 1, 3) for i in range(3))
        merged = ignis.empty((b, n, h, e), dtype=dtype, device="cuda:0")
        out, lse = ignis.nn.attention(q, k, v, causal=True, out=merged.permute(0, 2, 1, 3))
        grad = ignis.empty((b, n, 3, h, e), dtype=dtype, device="cuda:0")
        dq, dk, dv = (grad[:, :, i].permute(0, 2, 1, 3) for i in range(3))
        ignis.nn.attention_backward(out, q, k, v, out, lse, causal=True, dq=dq, dk=dk, dv=dv)
        ph = packed[:, :, offset : offset + 3 * h * e].reshape(b, n, 3, h, e)
        qh, kh, vh = (ph[:, :, i].transpose(0, 2, 1, 3) for i in range(3))
        want_out, want_lse, _ = ref_attention(qh, kh, vh, True, 1 / math.sqrt(e))
        assert_close(host(merged).transpose(0, 2, 1, 3), want_out, dtype, f"out, offset {offset}")
        assert_close(host(lse), want_lse, "float32", f"lse, offset {offset}")
        gout = host(out)  # the rounded output is the gradient seed
        _, _, want = ref_attention(qh, kh, vh, True, 1 / math.sqrt(e), grad=gout)
        got = host(grad)
        for i, name in enumerate(("dq", "dk", "dv")):
            assert_close(got[:, :, i].transpose(0, 2, 1, 3), want[i], dtype, f"{name}, {offset}")
