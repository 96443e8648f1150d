"""The remembered plans of the host path: reduction recipes (launches with temporaries),
normalization plans, permutations and the unrolled contiguity test.

A remembered plan must give what planning from scratch gives, for new data at new addresses,
and must not be used when anything it depends on changes (strides, dtype, alignment, a tuning
knob). The CUDA planning runs on the CPU here: kernels are emulated on the host (the emulators
of ``test_cuda_reduction`` and ``test_nn_norm_loss``), so results are checked against NumPy.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from array_helpers import random_array, to64
from ignis._array import _layout
from ignis._array import _semantics as sem
from ignis._array._cpu_backend import CpuBackend
from ignis._array._cuda_backend import norm_loss, reduction
from ignis._array._device import as_device
from test_cuda_reduction import Emulator, check_against_numpy, split_name
from test_nn_norm_loss import Emulator as NormEmulator
from test_nn_norm_loss import planned_cpu

import ignis
from ignis import NvArray, ShapeError

# --- reduction recipes ------------------------------------------------------------------------


class _Kernel:
    """A library kernel whose launches run on the reduction emulator."""

    def __init__(self, em: Emulator, source: str, name: str):
        self.em, self.source, self.name = em, source, name

    def launch(self, grid, block, args, stream=None) -> None:
        self.em(None, self.source, self.name, grid, block, list(args))


class _PlanningBackend(CpuBackend):
    """A CPU backend that runs the CUDA reduction planning (``reduction.reduce``) through the
    real ``_launch`` (so calls are recorded and remembered), the kernels emulated."""

    gpu = None
    stream = None


@pytest.fixture
def planner(monkeypatch, tune):
    em = Emulator()
    kernels: dict[str, _Kernel] = {}

    def library_kernel(source, name, device):
        return kernels.setdefault(name, _Kernel(em, source, name))

    monkeypatch.setattr(reduction, "library_kernel", library_kernel)
    ignis.clear_caches()  # recipes of emulated kernels: none before, none kept after
    # Reach split partials on small inputs (both column kernels and the block kernel).
    tune(
        reduction=dict(
            min_chunk=256,
            target_blocks=64,
            cols_wide_min_bytes=64,
            cols_wide_min_rows=8,
            cols_wide_unit_cost=256,
        ),
    )
    planned = []
    plan = reduction._reduce_planned

    def counting(*args):
        planned.append(args[1])
        return plan(*args)

    monkeypatch.setattr(reduction, "_reduce_planned", counting)
    backend = _PlanningBackend(as_device("cpu"))
    backend.em, backend.planned = em, planned
    yield backend
    ignis.clear_caches()


def _reduce(backend, op: str, x: NvArray, axis, ddof=0) -> np.ndarray:
    spec = sem.reduction(op, x.shape, x.dtype, axis, True, ddof)
    out = NvArray.empty(spec.keep_shape, dtype=spec.dtype, device="cpu")
    reduction.reduce(backend, op, out, x, spec.axes, spec.accumulate, {"ddof": ddof})
    return out.to_host()


def _check(got: np.ndarray, op: str, x: NvArray, axis, ddof=0) -> None:
    spec = sem.reduction(op, x.shape, x.dtype, axis, True, ddof)
    check_against_numpy(got, op, x.to_host(), spec.axes, True, spec.dtype.name, ddof)


# (name, shape, view, axis, kernel that needs a temporary)
TEMP_CASES = [
    ("cols-wide-split", (600, 72), None, 0, "reduce_cols_wide"),
    ("cols-wide-outer", (3, 200, 80), None, 1, "reduce_cols_wide"),
    ("rows-block-split", (2, 1500), None, 1, "reduce_block"),
    ("full-split", (1600,), None, None, "reduce_block"),
    ("reversed-rows", (300, 72), lambda a: a[::-1], 0, "reduce_cols_wide"),
    ("offset-view", (601, 72), lambda a: a[1:], 0, "reduce_cols_wide"),
]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("op", ["sum", "mean", "max", "var"])
@pytest.mark.exhaustive
def test_recipes_with_temporaries_match_numpy_on_new_data(planner, op, dtype, rng):
    for name, shape, view, axis, kernel in TEMP_CASES:
        planner.planned.clear()
        for i in range(3):  # the first call plans, the others replay at new addresses
            base = NvArray.from_host(random_array(rng, shape, dtype), device="cpu")
            x = view(base) if view else base
            planner.em.names.clear()
            _check(_reduce(planner, op, x, axis), op, x, axis)
            assert any(split_name(n)[0] == kernel for n in planner.em.names), (name, i)
            assert len(planner.em.names) >= 2, (name, planner.em.names)  # partials + finish
        # Planned once, then replayed (at most: a layout met in an earlier case is replayed too)
        assert len(planner.planned) <= 1, (name, planner.planned)


@pytest.mark.parametrize("op", ["sum", "max"])
def test_single_launch_recipes_match_numpy_on_new_data(planner, op, rng):
    # One launch, no temporaries (the short form): the input slot moves with x's address
    # and its offset into the buffer.
    for shape, view, axis in [((70, 33), None, 1), ((72, 33), lambda a: a[2:], 1)]:
        planner.planned.clear()
        for _ in range(3):
            base = NvArray.from_host(random_array(rng, shape, "float32"), device="cpu")
            x = view(base) if view else base
            planner.em.names.clear()
            _check(_reduce(planner, op, x, axis), op, x, axis)
            assert len(planner.em.names) == 1, planner.em.names
        assert len(planner.planned) == 1, (shape, planner.planned)


def test_var_recipe_keeps_ddof_apart(planner, rng):
    x = NvArray.from_host(random_array(rng, (600, 72), "float32"), device="cpu")
    for _ in range(2):
        for ddof in (0, 1, 5):
            _check(_reduce(planner, "var", x, 0, ddof), "var", x, 0, ddof)
    assert len(planner.planned) == 3


def test_recipes_are_not_reused_across_strides_dtypes_or_knobs(planner, tune, rng):
    host = random_array(rng, (400, 72), "float32")
    x = NvArray.from_host(host, device="cpu")
    _reduce(planner, "sum", x, 0)
    _reduce(planner, "sum", x, 0)
    assert len(planner.planned) == 1
    # Other strides (a column slice of a wider array): planned anew, right result.
    wide = NvArray.from_host(random_array(rng, (400, 80), "float32"), device="cpu")[:, :72]
    _check(_reduce(planner, "sum", wide, 0), "sum", wide, 0)
    assert len(planner.planned) == 2
    # Another dtype of the same shape.
    xb = NvArray.from_host(host.astype(np.float64), device="cpu")
    _check(_reduce(planner, "sum", xb, 0), "sum", xb, 0)
    assert len(planner.planned) == 3
    # A tuning knob: the same call is planned again and follows the knob.
    tune(reduction=dict(cols_wide=False))
    planner.em.names.clear()
    _check(_reduce(planner, "sum", x, 0), "sum", x, 0)
    assert len(planner.planned) == 4
    assert {split_name(n)[0] for n in planner.em.names} >= {"reduce_cols"}
    assert not any(split_name(n)[0] == "reduce_cols_wide" for n in planner.em.names)


def test_misaligned_input_is_planned_apart(planner, rng):
    big = NvArray.from_host(random_array(rng, (4001,), "float32"), device="cpu")
    aligned, shifted = big[:4000], big[1:]  # same shape and strides, other alignment
    for x in (aligned, shifted, aligned, shifted):
        _check(_reduce(planner, "sum", x, None), "sum", x, None)
    assert len(planner.planned) == 2


def test_copying_reductions_are_not_remembered(planner, tune, rng):
    # Two reduced axes interleaved with kept ones and too large to read in place: a copy first.
    tune(reduction=dict(strided_max=16))
    x = NvArray.from_host(random_array(rng, (4, 6, 5, 7), "float32"), device="cpu")
    for _ in range(2):
        _check(_reduce(planner, "sum", x, (0, 2)), "sum", x, (0, 2))
    assert len(planner.planned) == 2


def test_recipe_refuses_addresses_that_coincide():
    # A stand-in allocator that returns one address for everything tells nothing apart.
    x = NvArray.from_host(np.zeros((8, 4), np.float32), device="cpu")
    out = NvArray.from_host(np.zeros((1, 4), np.float32), device="cpu")
    xp = x.data_ptr
    op = out.data_ptr
    launch = ("k", 1, 32, [xp, op, None, b"layout", 8, 4])
    assert reduction._recipe([launch], x, xp, out, op) is not None
    at_out, in_x = (16, op, None), (16, xp, None)  # temporaries at out's address, inside x
    assert reduction._recipe([at_out, launch], x, xp, out, op) is None
    assert reduction._recipe([in_x, launch], x, xp, out, op) is None
    # A temporary but no launch recorded (an emulated _launch records nothing): nothing to replay
    assert reduction._recipe([(16, xp + 4096, None)], x, xp, out, op) is None
    late = ("k", 1, 32, [xp, op, None, b"layout", op, 4])  # an address after the pointer slots
    assert reduction._recipe([late], x, xp, out, op) is None
    stray = ("k", 1, 32, [xp, op, 12345, b"layout", 8, 4])
    assert reduction._recipe([stray], x, xp, out, op) is None  # a pointer to nothing known
    inside = NvArray.from_host(np.zeros((1, 4), np.float32), device="cpu")
    assert reduction._recipe([launch], x, xp, inside, xp) is None  # output inside the input


# --- normalization plans ----------------------------------------------------------------------


@pytest.fixture
def norm_emu(monkeypatch):
    em = NormEmulator()
    monkeypatch.setattr(norm_loss, "_launch", em)
    ignis.clear_caches()  # plans of emulated launches: none before, none kept after
    yield em
    ignis.clear_caches()


def _norm_run(xd, w, b, g):
    y, mean, rstd = ignis.nn.layer_norm(xd, w, b)
    gx, gw, gb = ignis.nn.layer_norm_backward(g, xd, mean, rstd, w)
    yr, rr = ignis.nn.rms_norm(xd, w)
    gxr, gwr = ignis.nn.rms_norm_backward(g, xd, rr, w)
    return [a.to_host() for a in (y, mean, rstd, gx, gw, gb, yr, rr, gxr, gwr)]


def _norm_case(rng, dtype, shape, misalign=False):
    n = shape[-1]
    arrs = [random_array(rng, s, dtype) for s in (shape, (n,), (n,), shape)]
    xd, w, b, g = (NvArray.from_host(a, device="cpu") for a in arrs)
    if misalign:  # one element into a bigger buffer: no 16-byte packs
        flat = np.concatenate([arrs[0].reshape(-1)[:1], arrs[0].reshape(-1)])
        xd = NvArray.from_host(flat, device="cpu")[1:].reshape(shape)
    return xd, w, b, g


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_norm_plans_repeat_the_planned_results(norm_emu, dtype, rng):
    for shape, misalign in [((6, 64), False), ((6, 64), True), ((3, 2000), False)]:
        seed = int(rng.integers(1 << 30))
        want = _norm_run(*_norm_case(np.random.default_rng(seed), dtype, shape, misalign))
        with planned_cpu():
            ignis.clear_caches()
            first = _norm_run(*_norm_case(np.random.default_rng(seed), dtype, shape, misalign))
            again = _norm_run(*_norm_case(np.random.default_rng(seed), dtype, shape, misalign))
        plans = ignis.cache_info()["cuda.norm_loss.plans"]
        assert plans.entries and plans.hits, "the plans were not remembered"
        for k, (a, b, c) in enumerate(zip(want, first, again, strict=True)):
            tol = dict(rtol=2e-2, atol=2e-2) if dtype == "bfloat16" else dict(rtol=1e-4, atol=1e-5)
            np.testing.assert_allclose(to64(b), to64(a), err_msg=f"result {k}", **tol)
            np.testing.assert_array_equal(to64(c), to64(b), err_msg=f"result {k} repeated")


def test_norm_plans_follow_alignment_and_knobs(norm_emu, tune, rng):
    def fwd_vec() -> str:
        names = [split_name(n)[1] for _, n in norm_emu.names if split_name(n)[0] == "norm_fwd"]
        return names[-1][2]

    with planned_cpu():
        xd, w, b, _ = _norm_case(rng, "float32", (4, 64))
        ignis.nn.layer_norm(xd, w, b)
        assert fwd_vec() == "4"
        xm, *_ = _norm_case(rng, "float32", (4, 64), misalign=True)  # same shape, misaligned
        ignis.nn.layer_norm(xm, w, b)
        assert fwd_vec() == "1"
        ignis.nn.layer_norm(xd, w, b)
        assert fwd_vec() == "4"
        # A knob that changes the launch: rows of 64 go to blocks instead of warps.
        norm_emu.names.clear()
        ignis.nn.layer_norm(xd, w, b)
        warp = split_name(norm_emu.names[-1][1])[1][4]
        tune(norm_loss=dict(warp_max_n=32))
        ignis.nn.layer_norm(xd, w, b)
        assert (warp, split_name(norm_emu.names[-1][1])[1][4]) == ("true", "false")


# --- permutations and contiguity ---------------------------------------------------------------


@pytest.mark.parametrize("device", ["cpu"])
def test_remembered_permutations_stay_checked(device, rng):
    host = random_array(rng, (2, 3, 4), "float32")
    a = ignis.asarray(host, device=device)
    for _ in range(3):
        np.testing.assert_array_equal(a.permute(2, 0, 1).to_host(), host.transpose(2, 0, 1))
        np.testing.assert_array_equal(a.transpose(-1, 0, 1).to_host(), host.transpose(2, 0, 1))
        np.testing.assert_array_equal(
            a.permute(np.int64(1), 0, 2).to_host(), host.transpose(1, 0, 2)
        )
        with pytest.raises(ShapeError, match="permute: axes"):
            a.permute(0, 0, 1)
        with pytest.raises(ShapeError, match="transpose: axes"):
            a.transpose(0, 1)
        with pytest.raises(ShapeError, match="must be ints"):
            a.permute(2.0, 0, 1)
    b = ignis.asarray(random_array(rng, (3, 4, 2), "float32"), device=device)
    # The same request on an array of the same rank: same normalized permutation, own shape.
    assert b.permute(2, 0, 1).shape == (2, 3, 4)


def _contiguous_reference(shape, strides, itemsize) -> bool:
    if 0 in shape:
        return True
    step = itemsize
    for d, s in zip(reversed(shape), reversed(strides), strict=True):
        if d != 1:
            if s != step:
                return False
            step *= d
    return True


def test_unrolled_contiguity_matches_the_loop():
    sizes = [0, 1, 2, 3]
    seen = {True: 0, False: 0}
    for ndim in (1, 2, 3, 4):
        for shape in itertools.product(sizes, repeat=ndim):
            dense = _layout.contiguous_strides(shape, 4)
            candidates = {dense, tuple(2 * s for s in dense), tuple(reversed(dense))}
            candidates.add(tuple(0 for _ in shape))
            candidates.add(tuple(s if i else 7 for i, s in enumerate(dense)))
            for strides in candidates:
                want = _contiguous_reference(shape, strides, 4)
                assert _layout.is_c_contiguous(shape, strides, 4) == want, (shape, strides)
                seen[want] += 1
    assert seen[True] > 100 and seen[False] > 100


# --- reduction front end ----------------------------------------------------------------------


@pytest.mark.parametrize("device", ["cpu"])
def test_tuple_axis_reductions_repeat_and_keep_their_errors(device, rng):
    for _ in range(3):
        host = random_array(rng, (3, 4, 5), "float32")
        a = ignis.asarray(host, device=device)
        for axis, keepdims in [((0, 2), False), ((0, 2), True), ((-1, 0), False), ((), False)]:
            got = a.sum(axis=axis, keepdims=keepdims).to_host()
            want = to64(host).sum(axis=axis, keepdims=keepdims)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(
            a.mean(axis=(1,)).to_host(), to64(host).mean(axis=1), rtol=1e-5, atol=1e-6
        )
        with pytest.raises(ShapeError, match="sum"):
            a.sum(axis=(0, 0))
        with pytest.raises(ShapeError, match="sum"):
            a.sum(axis=(0, 3))
        i = ignis.asarray(rng.integers(-5, 5, (3, 4)).astype(np.int32), device=device)
        s = i.sum(axis=(0, 1))
        assert s.dtype == "int64" and s.to_host() == i.to_host().astype(np.int64).sum()
