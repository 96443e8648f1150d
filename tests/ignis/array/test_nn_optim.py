"""ignis.nn multi-tensor optimizer kernels: SGD, Adam/AdamW, global norm, scale, clip, zero and
the loss-scale update, against float64 NumPy references written here, on every device."""

from __future__ import annotations

import math

import ignis.nn as nn
import ml_dtypes
import numpy as np
import pytest
from ignis._array._cuda_backend import optim as cuda_optim

import ignis
from ignis import CompileOptions, DeviceMismatchError, DTypeError, ShapeError, _sources

SHAPES = [(1,), (31,), (33, 5), (1000,), (70001,)]  # 70001 > one chunk of 65536 elements
TOL = {"float32": (2e-5, 1e-6), "float64": (1e-12, 1e-14)}


def _np_dtype(name: str) -> np.dtype:
    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


def _arr(host: np.ndarray, device: str, dtype: str | None = None) -> ignis.NvArray:
    dtype = dtype or host.dtype.name
    return ignis.from_host(host.astype(_np_dtype(dtype)), dtype=dtype, device=device)


def _host(a: ignis.NvArray) -> np.ndarray:
    return np.asarray(a.to_host(), dtype=np.float64)


def _rand(rng: np.random.Generator, shapes: list, scale: float = 1.0) -> list[np.ndarray]:
    return [rng.standard_normal(s) * scale for s in shapes]


# --- float64 references ------------------------------------------------------------------------


def ref_adam(p, g, m, v, vmax, t, lr, b1, b2, eps, wd, decoupled):
    if decoupled:
        p = p * (1 - lr * wd)
    elif wd:
        g = g + wd * p
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    second = v
    if vmax is not None:
        vmax = np.maximum(vmax, v)
        second = vmax
    denom = np.sqrt(second) / math.sqrt(1 - b2**t) + eps
    p = p - lr / (1 - b1**t) * m / denom
    return p, m, v, vmax


def ref_sgd(p, g, buf, t, lr, momentum, dampening, nesterov, wd):
    if wd:
        g = g + wd * p
    if momentum:
        buf = g.copy() if t == 1 else momentum * buf + (1 - dampening) * g
        g = g + momentum * buf if nesterov else buf
    return p - lr * g, buf


class Lists:
    """Device lists of one optimizer call plus their float64 host mirrors."""

    def __init__(self, device, shapes, pdtype="float32", gdtype=None, seed=0, master=False,
                 n_state=2):
        rng = np.random.default_rng(seed)
        self.device, self.rng, self.shapes = device, rng, shapes
        sdtype = "float64" if pdtype == "float64" else "float32"
        host = _rand(rng, shapes)
        self.p = [_arr(h, device, pdtype) for h in host]
        # the reference starts from the parameter as stored (rounded for 16-bit types)
        self.ref_p = [_host(a) for a in self.p]
        self.masters = [a.astype("float32") for a in self.p] if master else None
        self.state = [[ignis.zeros(s, dtype=sdtype, device=device) for s in shapes]
                      for _ in range(n_state)]
        self.ref_state = [[np.zeros(s) for s in shapes] for _ in range(n_state)]
        self.steps = [ignis.zeros((), dtype="float32", device=device) for _ in shapes]
        self.gdtype = gdtype or pdtype

    def grads(self):
        host = _rand(self.rng, self.shapes)
        dev = [_arr(h, self.device, self.gdtype) for h in host]
        return dev, [_host(a) for a in dev]  # the reference sees the stored (rounded) values


@pytest.mark.parametrize("pdtype", ["float32", "float64"])
@pytest.mark.parametrize(
    "variant",
    [
        dict(),
        dict(weight_decay=0.1),
        dict(weight_decay=0.1, decoupled_weight_decay=True),
        dict(amsgrad=True, beta1=0.8, beta2=0.99, eps=1e-6),
    ],
    ids=["adam", "adam-wd", "adamw", "amsgrad"],
)
def test_adam_matches_reference(device, pdtype, variant):
    variant = dict(variant)
    amsgrad = variant.pop("amsgrad", False)
    b1, b2 = variant.get("beta1", 0.9), variant.get("beta2", 0.999)
    eps, wd = variant.get("eps", 1e-8), variant.get("weight_decay", 0.0)
    dec = variant.get("decoupled_weight_decay", False)
    L = Lists(device, SHAPES, pdtype, n_state=3 if amsgrad else 2)
    lr = ignis.full((), 1e-2, dtype="float32", device=device)
    lr_ref = float(np.float32(1e-2))
    for t in range(1, 4):
        g, g_ref = L.grads()
        nn.multi_tensor_adam_(L.p, g, L.state[0], L.state[1], L.steps, lr,
                              max_exp_avg_sqs=L.state[2] if amsgrad else None, **variant)
        for i in range(len(SHAPES)):
            vm = L.ref_state[2][i] if amsgrad else None
            L.ref_p[i], L.ref_state[0][i], L.ref_state[1][i], vm = ref_adam(
                L.ref_p[i], g_ref[i], L.ref_state[0][i], L.ref_state[1][i], vm, t, lr_ref,
                b1, b2, eps, wd, dec)
            if amsgrad:
                L.ref_state[2][i] = vm
    rtol, atol = TOL[pdtype]
    for i in range(len(SHAPES)):
        np.testing.assert_allclose(_host(L.p[i]), L.ref_p[i], rtol=rtol, atol=atol)
        np.testing.assert_allclose(_host(L.state[0][i]), L.ref_state[0][i], rtol=rtol, atol=atol)
        np.testing.assert_allclose(_host(L.state[1][i]), L.ref_state[1][i], rtol=rtol, atol=atol)
        assert float(L.steps[i].item()) == 3.0


@pytest.mark.parametrize("pdtype", ["float32", "float64"])
@pytest.mark.parametrize(
    "variant",
    [
        dict(),
        dict(weight_decay=0.05),
        dict(momentum=0.9),
        dict(momentum=0.9, dampening=0.3, weight_decay=0.01),
        dict(momentum=0.8, nesterov=True),
    ],
    ids=["plain", "wd", "momentum", "dampening", "nesterov"],
)
def test_sgd_matches_reference(device, pdtype, variant):
    mom = variant.get("momentum", 0.0)
    L = Lists(device, SHAPES, pdtype, n_state=1)
    lr = ignis.full((), 0.1, dtype="float32", device=device)
    lr_ref = float(np.float32(0.1))
    for t in range(1, 4):
        g, g_ref = L.grads()
        nn.multi_tensor_sgd_(L.p, g, L.state[0] if mom else None, L.steps, lr, **variant)
        for i in range(len(SHAPES)):
            L.ref_p[i], L.ref_state[0][i] = ref_sgd(
                L.ref_p[i], g_ref[i], L.ref_state[0][i], t, lr_ref, mom,
                variant.get("dampening", 0.0), variant.get("nesterov", False),
                variant.get("weight_decay", 0.0))
    rtol, atol = TOL[pdtype]
    for i in range(len(SHAPES)):
        np.testing.assert_allclose(_host(L.p[i]), L.ref_p[i], rtol=rtol, atol=atol)
        if mom:
            np.testing.assert_allclose(_host(L.state[0][i]), L.ref_state[0][i], rtol=rtol,
                                       atol=atol)


@pytest.mark.parametrize("pdtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("gdtype", ["float32", "same"])
@pytest.mark.parametrize("opt", ["adamw", "sgd"])
def test_half_params_with_float32_masters(device, pdtype, gdtype, opt):
    gd = pdtype if gdtype == "same" else gdtype
    L = Lists(device, SHAPES, pdtype, gd, master=True, n_state=2)
    lr = ignis.full((), 1e-3, dtype="float32", device=device)
    lr_ref = float(np.float32(1e-3))
    for t in range(1, 4):
        g, g_ref = L.grads()
        if opt == "adamw":
            nn.multi_tensor_adam_(L.p, g, L.state[0], L.state[1], L.steps, lr, weight_decay=0.1,
                                  decoupled_weight_decay=True, masters=L.masters)
        else:
            nn.multi_tensor_sgd_(L.p, g, L.state[0], L.steps, lr, momentum=0.9,
                                 masters=L.masters)
        for i in range(len(SHAPES)):
            if opt == "adamw":
                L.ref_p[i], L.ref_state[0][i], L.ref_state[1][i], _ = ref_adam(
                    L.ref_p[i], g_ref[i], L.ref_state[0][i], L.ref_state[1][i], None, t,
                    lr_ref, 0.9, 0.999, 1e-8, 0.1, True)
            else:
                L.ref_p[i], L.ref_state[0][i] = ref_sgd(
                    L.ref_p[i], g_ref[i], L.ref_state[0][i], t, lr_ref, 0.9, 0.0, False, 0.0)
    half_eps = 2.0**-8 if pdtype == "bfloat16" else 2.0**-11
    for i in range(len(SHAPES)):
        # The master carries the float32 trajectory; updates of ~1e-3 are far below the
        # 16-bit resolution of the parameters and would be lost without it.
        np.testing.assert_allclose(_host(L.masters[i]), L.ref_p[i], rtol=1e-5, atol=1e-6)
        # The parameter is the master rounded once.
        want = _host(L.masters[i]).astype(np.float32).astype(_np_dtype(pdtype))
        np.testing.assert_array_equal(_host(L.p[i]), want.astype(np.float64))
        np.testing.assert_allclose(_host(L.p[i]), L.ref_p[i], rtol=half_eps, atol=1e-6)


def test_half_params_without_masters_update_the_rounded_values(device):
    shapes = [(33,), (5, 7)]
    L = Lists(device, shapes, "bfloat16", "float32", n_state=1)
    lr = ignis.full((), 0.5, dtype="float32", device=device)
    g, g_ref = L.grads()
    nn.multi_tensor_sgd_(L.p, g, None, L.steps, lr)
    for i in range(len(shapes)):
        want = (L.ref_p[i] - 0.5 * g_ref[i]).astype(np.float32).astype(ml_dtypes.bfloat16)
        np.testing.assert_allclose(_host(L.p[i]), want.astype(np.float64), rtol=2.0**-8)


def test_found_inf_skips_the_whole_update_on_the_device(device):
    L = Lists(device, [(31,), (1000,)], n_state=2)
    lr = ignis.full((), 1e-2, dtype="float32", device=device)
    flag = ignis.full((), 1.0, dtype="float32", device=device)
    before = [_host(p) for p in L.p]
    g, _ = L.grads()
    nn.multi_tensor_adam_(L.p, g, L.state[0], L.state[1], L.steps, lr, found_inf=flag)
    nn.multi_tensor_sgd_(L.p, g, L.state[0], L.steps, lr, momentum=0.9, found_inf=flag)
    for i, p in enumerate(L.p):
        np.testing.assert_array_equal(_host(p), before[i])
        assert not _host(L.state[0][i]).any() and float(L.steps[i].item()) == 0.0
    flag.fill_(0)
    nn.multi_tensor_adam_(L.p, g, L.state[0], L.state[1], L.steps, lr, found_inf=flag)
    for i, p in enumerate(L.p):
        assert not np.array_equal(_host(p), before[i])
        assert float(L.steps[i].item()) == 1.0


def test_a_batch_applies_every_update_at_its_end_or_none(device):
    L = Lists(device, [(31,), (1000,)], n_state=2)
    lr = ignis.full((), 1e-2, dtype="float32", device=device)
    before = [_host(p) for p in L.p]
    g, g_ref = L.grads()
    # An error after the first update was prepared: nothing changes, counters included.
    with pytest.raises(RuntimeError, match="later failure"):
        with nn.multi_tensor_batch():
            nn.multi_tensor_sgd_(L.p[:1], g[:1], None, L.steps[:1], lr)
            nn.multi_tensor_adam_(L.p[1:], g[1:], L.state[0][1:], L.state[1][1:], L.steps[1:], lr)
            raise RuntimeError("later failure")
    for i, p in enumerate(L.p):
        np.testing.assert_array_equal(_host(p), before[i])
        assert float(L.steps[i].item()) == 0.0 and not _host(L.state[0][i]).any()
    # Without an error: the updates land when the block ends, in order, as unbatched calls.
    with nn.multi_tensor_batch():
        nn.multi_tensor_sgd_(L.p[:1], g[:1], None, L.steps[:1], lr)
        with nn.multi_tensor_batch():  # nested batches join the outer one
            nn.multi_tensor_adam_(L.p[1:], g[1:], L.state[0][1:], L.state[1][1:], L.steps[1:], lr)
        np.testing.assert_array_equal(_host(L.p[0]), before[0])  # not yet
        np.testing.assert_array_equal(_host(L.p[1]), before[1])
    np.testing.assert_allclose(_host(L.p[0]), before[0] - 1e-2 * g_ref[0], rtol=1e-5, atol=1e-7)
    p1, *_ = ref_adam(before[1], g_ref[1], 0.0, 0.0, None, 1, 1e-2, 0.9, 0.999, 1e-8, 0.0, False)
    np.testing.assert_allclose(_host(L.p[1]), p1, rtol=1e-5, atol=1e-6)
    assert [float(s.item()) for s in L.steps] == [1.0, 1.0]


def test_learning_rate_is_read_from_the_device_scalar(device):
    L = Lists(device, [(33,)], n_state=1)
    lr = ignis.zeros((1,), dtype="float32", device=device)
    before = _host(L.p[0])
    g, g_ref = L.grads()
    nn.multi_tensor_sgd_(L.p, g, None, L.steps, lr)
    np.testing.assert_array_equal(_host(L.p[0]), before)
    lr.fill_(0.25)
    nn.multi_tensor_sgd_(L.p, g, None, L.steps, lr)
    np.testing.assert_allclose(_host(L.p[0]), before - 0.25 * g_ref[0], rtol=1e-6, atol=1e-7)


def test_non_contiguous_gradients_are_read_through_their_strides(device):
    rng = np.random.default_rng(3)
    p_host = rng.standard_normal((7, 9))
    g_host = rng.standard_normal((9, 7))
    p = _arr(p_host, device, "float32")
    g = _arr(g_host, device, "float32").T  # a transposed view
    assert not g.is_contiguous
    steps = [ignis.zeros((), device=device)]
    lr = ignis.full((), 0.5, device=device)
    nn.multi_tensor_sgd_([p], [g], None, steps, lr)
    want = p_host.astype(np.float32) - np.float32(0.5) * g_host.T.astype(np.float32)
    np.testing.assert_allclose(_host(p), want, rtol=1e-6, atol=1e-7)


def test_empty_tensors_count_their_step_and_others_update(device):
    shapes = [(0,), (31,), (0, 4)]
    L = Lists(device, shapes, n_state=2)
    lr = ignis.full((), 1e-2, device=device)
    g, g_ref = L.grads()
    nn.multi_tensor_adam_(L.p, g, L.state[0], L.state[1], L.steps, lr)
    assert [float(s.item()) for s in L.steps] == [1.0, 1.0, 1.0]
    want, *_ = ref_adam(L.ref_p[1], g_ref[1], 0, 0, None, 1, float(np.float32(1e-2)), 0.9,
                        0.999, 1e-8, 0.0, False)
    np.testing.assert_allclose(_host(L.p[1]), want, rtol=2e-5, atol=1e-6)
    nn.multi_tensor_adam_([], [], [], [], [], lr)  # nothing to do


# --- norm, scale, clip ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16", "float16"])
def test_l2_norm_matches_numpy_and_is_deterministic(device, dtype):
    rng = np.random.default_rng(1)
    xs = [_arr(h, device, dtype) for h in _rand(rng, SHAPES + [(0,)])]
    want = math.sqrt(sum(float(np.sum(_host(x) ** 2)) for x in xs))
    out = nn.multi_tensor_l2_norm(xs)
    assert out.shape == () and out.dtype == ("float64" if dtype == "float64" else "float32")
    assert float(out.item()) == pytest.approx(want, rel=1e-5 if dtype != "float64" else 1e-13)
    assert float(nn.multi_tensor_l2_norm(xs).item()) == float(out.item())  # same bits


def test_l2_norm_of_mixed_dtypes_and_strided_views_and_nothing(device):
    rng = np.random.default_rng(2)
    a = _arr(rng.standard_normal((40, 30)), device, "float32")[:, ::3]  # strided view
    b = _arr(rng.standard_normal(1001), device, "bfloat16")
    want = math.sqrt(float(np.sum(_host(a) ** 2) + np.sum(_host(b) ** 2)))
    assert float(nn.multi_tensor_l2_norm([a, b]).item()) == pytest.approx(want, rel=1e-5)
    zero = nn.multi_tensor_l2_norm([], device=device)
    assert zero.device == ignis.NvArray.zeros((), device=device).device
    assert float(zero.item()) == 0.0


def test_l2_norm_propagates_inf_and_nan(device):
    x = _arr(np.array([1.0, np.inf, 2.0]), device, "float32")
    y = _arr(np.array([1.0, np.nan]), device, "float32")
    assert math.isinf(float(nn.multi_tensor_l2_norm([x]).item()))
    assert math.isnan(float(nn.multi_tensor_l2_norm([x, y]).item()))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16", "float64"])
def test_scale_inverse_unscales_and_flags_non_finite_inputs(device, dtype):
    rng = np.random.default_rng(4)
    hosts = _rand(rng, [(31,), (1000,), (70001,)], scale=100.0)
    xs = [_arr(h, device, dtype) for h in hosts]
    before = [_host(x) for x in xs]
    scale = ignis.full((), 8.0, device=device)
    flag = ignis.zeros((), device=device)
    nn.multi_tensor_scale_(xs, scale, inverse=True, found_inf=flag)
    for x, b in zip(xs, before, strict=True):
        # a power of two: exact, except where float16 results become subnormal
        np.testing.assert_allclose(_host(x), b / 8.0, rtol=1e-7, atol=1e-7)
    assert float(flag.item()) == 0.0
    bad = np.array([1.0, 2.0, np.nan, 4.0]) if dtype != "float64" else np.array([np.inf, 1.0])
    xs.append(_arr(bad, device, dtype))
    nn.multi_tensor_scale_(xs, scale, found_inf=flag)
    assert float(flag.item()) == 1.0
    np.testing.assert_allclose(_host(xs[0]), before[0], rtol=1e-7)  # x / 8 * 8


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16", "float64"])
def test_zero_stores_positive_zeros_over_everything_including_nan_and_inf(device, dtype):
    rng = np.random.default_rng(5)
    hosts = _rand(rng, [(31,), (0,), (33, 5), (70001,)], scale=100.0)
    hosts[0][[1, 7, 20]] = [np.nan, np.inf, -np.inf]
    hosts[2][0, 0] = -0.0
    xs = [_arr(h, device, dtype) for h in hosts]
    other = _arr(hosts[3], device, dtype)  # not in the list: untouched
    nn.multi_tensor_zero_(xs)
    for x, h in zip(xs, hosts, strict=True):
        bits = np.asarray(x.to_host()).view(np.uint8)
        assert x.shape == h.shape and not bits.any()  # +0 everywhere (a NaN * 0 would stay)
    np.testing.assert_array_equal(_host(other), _host(_arr(hosts[3], "cpu", dtype)))
    nn.multi_tensor_zero_([])  # nothing to do


def test_zero_of_mixed_dtypes_zeroes_each(device):
    rng = np.random.default_rng(6)
    xs = [_arr(rng.standard_normal(s), device, d)
          for s, d in [((9,), "float32"), ((5, 3), "bfloat16"), ((70,), "float32")]]
    nn.multi_tensor_zero_(xs)
    assert all(not np.asarray(x.to_host()).view(np.uint8).any() for x in xs)


def test_float64_gradients_are_clipped_at_their_precision(device, rng):
    # the norm and the coefficient in float64, as torch.nn.utils.clip_grad_norm_ computes them
    # for float64 gradients (float32 arithmetic gave relative errors of about 4e-9)
    hosts = [rng.standard_normal(n) * 3.0 for n in (1000, 37)]
    xs = [ignis.asarray(h, device=device, copy=True) for h in hosts]  # (clipped in place)
    norm = nn.multi_tensor_l2_norm(xs)
    want = math.sqrt(sum(float(np.sum(h * h)) for h in hosts))
    assert norm.dtype is ignis.float64
    assert float(norm.item()) == pytest.approx(want, rel=1e-14)
    nn.multi_tensor_clip_(xs, norm, max_norm=1.0)
    coef = 1.0 / (want + 1e-6)
    for x, h in zip(xs, hosts, strict=True):
        np.testing.assert_allclose(x.to_host(), h * coef, rtol=1e-14)
    mixed = [ignis.asarray(hosts[0], device=device), ignis.asarray(hosts[1], dtype="float32",
                                                                   device=device)]
    assert nn.multi_tensor_l2_norm(mixed).dtype is ignis.float64  # the widest precision
    assert nn.multi_tensor_l2_norm(mixed[1:]).dtype is ignis.float32


def test_clip_scales_by_min_one_max_norm_over_norm(device):
    rng = np.random.default_rng(5)
    hosts = _rand(rng, [(33,), (1000,)])
    xs = [_arr(h, device, "float32") for h in hosts]
    ref = [_host(x) for x in xs]
    norm = nn.multi_tensor_l2_norm(xs)
    n = float(norm.item())
    nn.multi_tensor_clip_(xs, norm, max_norm=1.0)
    coef = np.float32(1.0) / (np.float32(n) + np.float32(1e-6))
    for x, r in zip(xs, ref, strict=True):
        np.testing.assert_allclose(_host(x), r * float(coef), rtol=1e-6)
    # Below max_norm the coefficient is 1: nothing changes.
    before = [_host(x) for x in xs]
    nn.multi_tensor_clip_(xs, nn.multi_tensor_l2_norm(xs), max_norm=10.0)
    for x, b in zip(xs, before, strict=True):
        np.testing.assert_array_equal(_host(x), b)


def test_update_scale_backs_off_grows_and_counts(device):
    scale = ignis.full((), 1024.0, device=device)
    tracker = ignis.zeros((), dtype="int32", device=device)
    flag = ignis.zeros((), device=device)
    seen = []
    for inf in [0, 0, 1, 0, 0, 0]:
        flag.fill_(inf)
        nn.amp_update_scale_(scale, tracker, flag, growth_factor=2.0, backoff_factor=0.25,
                             growth_interval=3)
        seen.append((float(scale.item()), int(tracker.item())))
    assert seen == [(1024.0, 1), (1024.0, 2), (256.0, 0), (256.0, 1), (256.0, 2), (512.0, 0)]
    big = ignis.full((), 3e38, device=device)
    flag.fill_(0)
    nn.amp_update_scale_(big, tracker, flag, growth_interval=1)
    assert float(big.item()) == pytest.approx(3e38)  # growing would overflow: kept


# --- bad input -----------------------------------------------------------------------------------


def test_bad_input_raises_clearly(device):
    p = [ignis.zeros((3,), device=device)]
    g = [ignis.ones((3,), device=device)]
    st = [ignis.zeros((), device=device)]
    m = [ignis.zeros((3,), device=device)]
    lr = ignis.full((), 0.1, device=device)
    with pytest.raises(TypeError, match=r"multi_tensor_sgd_: params must be a list"):
        nn.multi_tensor_sgd_(p[0], g, None, st, lr)
    with pytest.raises(TypeError, match=r"params\[0\] must be an NvArray, got ndarray"):
        nn.multi_tensor_sgd_([np.zeros(3)], g, None, st, lr)
    with pytest.raises(ShapeError, match=r"grads has 2 arrays, expected 1"):
        nn.multi_tensor_sgd_(p, g * 2, None, st, lr)
    with pytest.raises(ShapeError, match=r"grads\[0\] has shape \(4,\), expected \(3,\)"):
        nn.multi_tensor_sgd_(p, [ignis.ones((4,), device=device)], None, st, lr)
    with pytest.raises(DTypeError, match=r"params\[0\] has dtype int32"):
        nn.multi_tensor_sgd_([ignis.zeros((3,), dtype="int32", device=device)], g, None, st, lr)
    with pytest.raises(DTypeError, match=r"grads\[0\] has dtype float64; expected float32"):
        nn.multi_tensor_sgd_(p, [ignis.ones((3,), dtype="float64", device=device)], None, st, lr)
    with pytest.raises(ShapeError, match=r"lr must hold one float32 or float64 element, got sh"):
        nn.multi_tensor_sgd_(p, g, None, st, ignis.zeros((2,), device=device))
    with pytest.raises(TypeError, match=r"lr must be a float32 or float64 device scalar"):
        nn.multi_tensor_sgd_(p, g, None, st, 0.1)
    with pytest.raises(ValueError, match=r"momentum=0.9 needs momentum_buffers\[0\]"):
        nn.multi_tensor_sgd_(p, g, None, st, lr, momentum=0.9)
    with pytest.raises(ValueError, match=r"nesterov needs momentum > 0"):
        nn.multi_tensor_sgd_(p, g, None, st, lr, nesterov=True)
    with pytest.raises(ValueError, match=r"beta1 must be in \[0.0, 1.0\), got 1.0"):
        nn.multi_tensor_adam_(p, g, m, m, st, lr, beta1=1.0)
    with pytest.raises(ValueError, match=r"eps must be >= 0.0, got -1"):
        nn.multi_tensor_adam_(p, g, m, m, st, lr, eps=-1)
    with pytest.raises(DTypeError, match=r"masters\[0\] is given for a float32 parameter"):
        nn.multi_tensor_adam_(p, g, m, m, st, lr, masters=m)
    with pytest.raises(DTypeError, match=r"exp_avgs\[0\] has dtype float16, expected float32"):
        nn.multi_tensor_adam_(p, g, [ignis.zeros((3,), dtype="float16", device=device)], m, st, lr)
    with pytest.raises(ShapeError, match=r"params\[0\] \(shape \(3,\)\) must be contiguous"):
        nn.multi_tensor_sgd_([ignis.zeros((6,), device=device)[::2]], g, None, st, lr)
    with pytest.raises(ShapeError, match=r"tensors\[0\] .* must be contiguous"):
        nn.multi_tensor_scale_([ignis.zeros((6,), device=device)[::2]], lr)
    with pytest.raises(ShapeError, match=r"multi_tensor_zero_: tensors\[1\] .* must be contig"):
        nn.multi_tensor_zero_([g[0], ignis.zeros((6,), device=device)[::2]])
    with pytest.raises(DTypeError, match=r"multi_tensor_zero_: tensors\[0\] has dtype int32"):
        nn.multi_tensor_zero_([ignis.ones((3,), dtype="int32", device=device)])
    with pytest.raises(TypeError, match=r"multi_tensor_zero_: tensors must be a list"):
        nn.multi_tensor_zero_(g[0])
    assert _host(g[0]).tolist() == [1.0, 1.0, 1.0]  # a refused call changes nothing
    with pytest.raises(ValueError, match=r"max_norm must be >= 0"):
        nn.multi_tensor_clip_(g, lr, max_norm=-1.0)
    with pytest.raises(ValueError, match=r"backoff_factor must be in \(0, 1\)"):
        nn.amp_update_scale_(lr, ignis.zeros((), dtype="int32", device=device), lr,
                             backoff_factor=2.0)
    with pytest.raises(ShapeError, match=r"growth_tracker must hold one int32 element"):
        nn.amp_update_scale_(lr, lr, lr)


@pytest.mark.gpu
def test_arrays_on_two_devices_are_refused():
    p = [ignis.zeros((3,), device="cuda:0")]
    g = [ignis.ones((3,), device="cpu")]
    with pytest.raises(DeviceMismatchError, match="one device"):
        nn.multi_tensor_sgd_(p, g, None, [ignis.zeros((), device="cuda:0")],
                             ignis.full((), 0.1, device="cuda:0"))


# --- kernels: compile here, layout, GPU-only paths ------------------------------------------------


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_every_launched_instantiation_compiles(arch):
    names = cuda_optim.name_expressions()
    obj = ignis.compile(_sources.read_source("optim.cu"), CompileOptions(arch=arch),
                        name_expressions=names)
    assert set(obj.lowered_names) == set(names)
    assert obj.log == ""


def test_launch_table_layout():
    table = cuda_optim.pack_table([[10, 20, 30], [0, 5, 0]], [9, 0, 4], 4)
    k, t = 2, 3
    assert list(table[: k * t]) == [10, 20, 30, 0, 5, 0]
    assert list(table[k * t: k * t + t]) == [9, 0, 4]
    blocks = (len(table) - (k + 1) * t) // 2
    assert blocks == 4  # 3 chunks of the 9-element tensor, none for the empty one, 1 more
    assert list(table[(k + 1) * t:(k + 1) * t + blocks]) == [0, 0, 0, 2]
    assert list(table[(k + 1) * t + blocks:]) == [0, 1, 2, 0]


@pytest.mark.gpu
def test_small_chunks_and_unaligned_views_take_every_path(tune):
    # Chunks of 8 elements: many blocks per tensor, a ragged last chunk; views that start one
    # element in are not 16-byte aligned and take the one-element path.
    tune(optim=dict(chunk=8))
    dev = "cuda:0"
    rng = np.random.default_rng(6)
    hosts = _rand(rng, [(37,), (64,), (9,)])
    bases = [_arr(np.concatenate([[0.0], h]), dev, "float32") for h in hosts]
    ps = [b[1:] if i != 1 else _arr(hosts[1], dev, "float32") for i, b in enumerate(bases)]
    cpu = [_arr(h, "cpu", "float32") for h in hosts]
    gh = _rand(rng, [(37,), (64,), (9,)])
    for params, d in ((ps, dev), (cpu, "cpu")):
        g = [_arr(h, d, "float32") for h in gh]
        m = [ignis.zeros(h.shape, device=d) for h in hosts]
        v = [ignis.zeros(h.shape, device=d) for h in hosts]
        st = [ignis.zeros((), device=d) for _ in hosts]
        lr = ignis.full((), 1e-2, device=d)
        for _ in range(2):
            nn.multi_tensor_adam_(params, g, m, v, st, lr, weight_decay=0.1,
                                  decoupled_weight_decay=True)
    for a, b in zip(ps, cpu, strict=True):
        np.testing.assert_allclose(_host(a), _host(b), rtol=1e-6, atol=1e-7)
    norm = nn.multi_tensor_l2_norm(ps)
    assert float(norm.item()) == pytest.approx(float(nn.multi_tensor_l2_norm(cpu).item()),
                                               rel=1e-6)


@pytest.mark.gpu
def test_a_captured_step_replays_like_eager_steps():
    dev = "cuda:0"
    shapes = [(1000,), (33, 5), (70001,)]
    eager = Lists(dev, shapes, n_state=2, seed=7)
    graphed = Lists(dev, shapes, n_state=2, seed=7)
    g, _ = eager.grads()
    lr_e = ignis.full((), 1e-2, device=dev)
    lr_g = ignis.full((), 1e-2, device=dev)
    ignis.current_stream().synchronize()  # the set-up above ran on the default stream
    s = ignis.Stream()
    with s:
        flag = ignis.zeros((), device=dev)

        def step(L, lr):
            nn.multi_tensor_scale_(g, ignis_one, found_inf=flag)
            nn.multi_tensor_adam_(L.p, g, L.state[0], L.state[1], L.steps, lr, weight_decay=0.1,
                                  decoupled_weight_decay=True, found_inf=flag)

        ignis_one = ignis.full((), 1.0, device=dev)
        step(graphed, lr_g)  # warm-up: builds the launch tables
        with ignis.Graph.capture(s) as graph:
            step(graphed, lr_g)
        for k in range(3):
            lr_g.fill_(1e-2 / (k + 1))  # the graph reads the new value
            graph.launch(s)
        s.synchronize()
    for k in range(4):
        lr_e.fill_(1e-2 if k == 0 else 1e-2 / k)
        nn.multi_tensor_adam_(eager.p, g, eager.state[0], eager.state[1], eager.steps, lr_e,
                              weight_decay=0.1, decoupled_weight_decay=True)
    for a, b in zip(graphed.p, eager.p, strict=True):
        np.testing.assert_array_equal(_host(a), _host(b))
    assert [float(x.item()) for x in graphed.steps] == [4.0] * 3


@pytest.mark.gpu
def test_launch_tables_are_cached_by_address():
    dev = "cuda:0"
    L = Lists(dev, [(31,), (1000,)], n_state=2)
    lr = ignis.full((), 1e-3, device=dev)
    g, _ = L.grads()
    backend = ignis._array._backend.get_backend(dev)
    nn.multi_tensor_adam_(L.p, g, L.state[0], L.state[1], L.steps, lr)
    n = len(backend._optim_tables.entries)
    nn.multi_tensor_adam_(L.p, g, L.state[0], L.state[1], L.steps, lr)
    assert len(backend._optim_tables.entries) == n


class _RecordingKernel:
    def __init__(self, log: list, name: str):
        self.log, self.name = log, name

    def launch(self, grid, block, args, stream=None):
        self.log.append((self.name, grid, block, list(args)))


def test_cuda_hooks_launch_compiled_kernels_with_matching_arguments(monkeypatch):
    # The CUDA backend's hooks driven on host memory: kernel launches are recorded instead of
    # run, the launch table is copied with a plain memmove. Every launched name must be one of
    # the compiled instantiations, with arguments of the kinds its declaration expects, and
    # the table in memory must describe the arrays.
    import ctypes
    from types import SimpleNamespace

    from ignis._array._cpu_backend import CpuBackend
    from ignis._array._device import as_device
    from ignis._signature import parse_kernel_params

    log: list = []
    monkeypatch.setattr(cuda_optim, "library_kernel",
                        lambda src, name, dev: _RecordingKernel(log, name))
    def host_copy(dst, src, n, stream=None):
        ctypes.memmove(dst.ptr, src.ctypes.data, n)

    monkeypatch.setattr(cuda_optim, "memcpy", host_copy)
    fake = CpuBackend(as_device("cpu"))
    fake.gpu, fake.stream = SimpleNamespace(ordinal=0), None
    shapes = [(5,), (0,), (70001,)]
    L = Lists("cpu", shapes, "bfloat16", "float32", master=True, n_state=3)
    g, _ = L.grads()
    lr = ignis.full((), 1e-3, dtype="float64", device="cpu")
    flag = ignis.zeros((), device="cpu")
    hyper = dict(beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.1, decoupled=True)
    adam = cuda_optim.adam(fake, L.p, g, L.state[0], L.state[1], L.state[2], L.masters, L.steps,
                           lr, flag, hyper)
    assert log == []  # the hooks prepare; the returned functions launch
    adam()
    cuda_optim.sgd(fake, L.p, g, L.state[0], None, L.steps, lr, None,
                   dict(momentum=0.9, dampening=0.0, weight_decay=0.0, nesterov=False))()
    norm = ignis.zeros((), device="cpu")
    cuda_optim.l2_norm(fake, norm, g)
    cuda_optim.scale(fake, g, flag, 2, 1.0, flag)
    cuda_optim.update_scale(fake, flag, ignis.zeros((), dtype="int32", device="cpu"), flag, 2.0, 0.5, 10)
    cuda_optim.zero(fake, g)
    names = [entry[0] for entry in log]
    assert names == [
        "ignis::ignis_optim_step_count", "ignis::optim_adam<ignis::bfloat16, float, float>",
        "ignis::ignis_optim_step_count", "ignis::optim_sgd<ignis::bfloat16, float, float>",
        "ignis::optim_sumsq_partial<float>", "ignis::optim_norm_final<float>",
        "ignis::optim_scale<float, float>", "ignis::ignis_optim_update_scale",
        "ignis::optim_zero<float>",
    ]
    src = _sources.read_source("optim.cu")
    compiled = set(cuda_optim.name_expressions())
    for name, grid, block, args in log:
        assert name in compiled  # every launched name is one the compile test covers
        params = parse_kernel_params(src, name)
        assert len(args) == len(params), name
        for p, a in zip(params, args, strict=True):
            want = float if p.kind == "float" else int
            assert isinstance(a, want) and not isinstance(a, bool), (name, p.name, a)
        assert grid >= 1 and 1 <= block <= 1024
    # the Adam table: 7 slots x 3 tensors, sizes, then blocks (1 + 0 + 2 chunks of 65536)
    _, grid, _, args = log[1]
    assert grid == 3 and args[1:4] == [3, 7, 3] and args[6] == 1  # float64 lr
    table = np.ctypeslib.as_array((ctypes.c_int64 * (8 * 3 + 6)).from_address(args[0]))
    ptr = fake.data_ptr
    chunk = ignis.tuning().optim.chunk
    want = cuda_optim.pack_table(
        [[ptr(a) for a in L.p], [ptr(a) for a in g], [ptr(a) for a in L.state[0]],
         [ptr(a) for a in L.state[1]], [ptr(a) for a in L.state[2]],
         [ptr(a) for a in L.masters], [ptr(a) for a in L.steps]],
        [5, 0, 70001], chunk)
    np.testing.assert_array_equal(table, want)
    assert log[0][3][4] == 6 and log[0][3][5] == ptr(flag)  # step slot, found_inf
    # the SGD call passed no masters: its slot 3 holds null addresses
    sgd_table = np.ctypeslib.as_array((ctypes.c_int64 * 15).from_address(log[3][3][0]))
    assert list(sgd_table[9:12]) == [0, 0, 0]  # slot 3 (masters) empty
    # zero: one slot (the gradients), the same sizes, one block per chunk
    _, grid, block, args = log[-1]
    assert grid == 3 and args[1:] == [3, 1, 3, chunk]
    zero_table = np.ctypeslib.as_array((ctypes.c_int64 * (2 * 3 + 6)).from_address(args[0]))
    np.testing.assert_array_equal(
        zero_table, cuda_optim.pack_table([[ptr(a) for a in g]], [5, 0, 70001], chunk)
    )
