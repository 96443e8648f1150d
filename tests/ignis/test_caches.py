"""ignis.cache_info() and ignis.clear_caches(): every cache by name, and one call that empties
them without changing any result."""

from __future__ import annotations

import importlib
import uuid

import numpy as np
import pytest

import ignis
from ignis import _caches

# Caches that `import ignis` brings (a module loaded later, such as the norm kernels' plans or
# the attention kernels' TMA maps, registers its caches when it is loaded): the op plans, the
# kernels, the compile cache and the device block cache.
EXPECTED = {
    "ops.unary_plans",
    "ops.binary_plans",
    "ops.reduce_plans",
    "ops.matmul_plans",
    "ops.inplace_plans",
    "semantics.binary_rules",
    "cuda.library_kernels",
    "cuda.elementwise.kernels",
    "cuda.reduction.recipes",
    "cuda.matmul.blas_plans",
    "jit.compiled",
    "codegen.compiled",
    "memory.block_cache",
}


def test_cache_info_lists_every_cache_by_name_sorted():
    info = ignis.cache_info()
    assert EXPECTED <= set(info)
    assert list(info) == sorted(info)
    importlib.import_module("ignis._array._cuda_backend.norm_loss")  # loaded on first use
    importlib.import_module("ignis._array._cuda_backend.attention")  # it brings the TMA maps
    assert {"cuda.norm_loss.plans", "tensor_maps"} <= set(ignis.cache_info())
    for name, entry in info.items():
        assert isinstance(entry, ignis.CacheInfo) and entry.name == name
        assert isinstance(entry.entries, int) and entry.entries >= 0
        assert entry.max_entries is None or entry.max_entries > 0
        assert entry.description


def test_ops_fill_their_plans_and_clear_caches_empties_every_cache(device):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((37, 19)).astype(np.float32)
    y = rng.standard_normal((19,)).astype(np.float32)
    a, b = ignis.asarray(x, device=device), ignis.asarray(y, device=device)
    for _ in range(2):
        first = (ignis.exp(a) * b + 1.5).sum(axis=0).to_host()
    info = ignis.cache_info()
    assert info["ops.binary_plans"].entries >= 2  # (a * b) and (+ 1.5)
    assert info["ops.unary_plans"].entries >= 1
    assert info["ops.reduce_plans"].entries >= 1

    ignis.clear_caches()
    assert {n: i.entries for n, i in ignis.cache_info().items() if i.entries} == {}
    # Nothing the program holds changed: the same ops give the same results, planned anew.
    again = (ignis.exp(a) * b + 1.5).sum(axis=0).to_host()
    np.testing.assert_array_equal(again, first)
    ref = (np.exp(x.astype(np.float64)) * y + 1.5).sum(axis=0)
    np.testing.assert_allclose(again, ref, rtol=1e-5, atol=1e-5)
    assert ignis.cache_info()["ops.binary_plans"].entries >= 2


def test_the_compile_cache_counts_hits_and_misses_and_keeps_its_disk_entries(tmp_path, monkeypatch):
    monkeypatch.setenv("IGNIS_CACHE_DIR", str(tmp_path))
    ignis.clear_caches()
    src = f'// {uuid.uuid4()}\nextern "C" __global__ void k(float* x) {{ x[0] = 1.0f; }}\n'
    opts = ignis.CompileOptions(arch="sm_90")
    before = ignis.cache_info()["jit.compiled"]
    ignis.compile(src, opts)
    ignis.compile(src, opts)
    after = ignis.cache_info()["jit.compiled"]
    assert after.entries == 1
    assert after.misses == before.misses + 1 and after.hits == before.hits + 1

    ignis.clear_caches()
    assert ignis.cache_info()["jit.compiled"].entries == 0
    disk_hits = ignis.jit.cache_stats().disk_hits
    ignis.compile(src, opts)  # from the disk cache, which clear_caches() keeps
    assert ignis.jit.cache_stats().disk_hits == disk_hits + 1


def test_register_counts_through_a_function_and_clears_through_the_one_given():
    held = {"a": 1, "b": 2}
    calls = []
    _caches.register(
        "test.probe",
        lambda: len(held),
        clear=lambda: (calls.append(1), held.clear()),
        max_entries=8,
        description="a probe",
        stats=lambda: (5, 6),
    )
    try:
        info = ignis.cache_info()["test.probe"]
        assert (info.entries, info.max_entries, info.hits, info.misses) == (2, 8, 5, 6)
        ignis.clear_caches()
        assert calls == [1] and held == {}
        assert ignis.cache_info()["test.probe"].entries == 0
    finally:
        del _caches._registry["test.probe"]


@pytest.mark.gpu
def test_clear_caches_gives_cached_device_blocks_back():
    a = ignis.ones((1 << 16,), device="cuda:0")
    for _ in range(3):
        (a + a).to_host()  # each result's block returns to the block cache
    ignis.synchronize()
    assert ignis.cache_info()["memory.block_cache"].entries >= 1
    ignis.clear_caches()
    assert ignis.cache_info()["memory.block_cache"].entries == 0
    assert ignis.get_memory_resource(0).cached_bytes == 0
    np.testing.assert_array_equal((a + a).to_host(), np.full(1 << 16, 2.0, np.float32))


def test_a_plan_cache_counts_starts_over_when_full_and_clears_by_name():
    from ignis._caches import PlanCache

    plans = PlanCache("test.plans", 2, "n -> n squared")
    try:
        for n in (1, 2, 3):
            assert plans.get(n) is None
            plans.remember(n, n * n)
        assert dict(plans) == {3: 9}  # full at the third plan: it started over
        plans.hits += 1  # what a caller does when it uses a found plan
        info = ignis.cache_info()["test.plans"]
        assert (info.entries, info.max_entries, info.hits, info.misses) == (1, 2, 1, 3)
        other = ignis.cache_info()["ops.binary_plans"]
        ignis.clear_caches("test.plans")
        assert len(plans) == 0 and plans.counts() == (0, 0)
        # the other caches were left alone
        assert ignis.cache_info()["ops.binary_plans"].entries == other.entries
        with pytest.raises(KeyError, match="clear_caches: no cache named 'no.such'"):
            ignis.clear_caches("no.such")
    finally:
        del _caches._registry["test.plans"]


def test_a_cache_that_does_not_count_hits_reports_none():
    from ignis._caches import PlanCache

    views = PlanCache("test.views", 4, "layouts", counts_hits=False)
    try:
        views.remember("k", "v")
        info = ignis.cache_info()["test.views"]
        assert info.hits is None and info.misses == 1
    finally:
        del _caches._registry["test.views"]


def test_op_plans_are_named_records():
    from ignis._array import _ops

    ignis.clear_caches("ops.binary_plans")
    a = ignis.ones((3, 4), device="cpu")
    a + a
    a + a
    (plan,) = _ops._binary_plans.values()
    assert plan.shape == (3, 4) and plan.dtype is ignis.float32 and plan.form == 0
    assert ignis.cache_info()["ops.binary_plans"].hits >= 1
