"""The shortcuts of the eager training step: the activations' fused backward rules, the
single-op linear layer and packed attention, and the backward walk's one-kernel sums of 16-bit
gradients. Each gives what the longer path gives (bit for bit where the claim is exactness)."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

import ignis
import ignis_autograd as ag
from ignis_autograd import Tensor, _graph, _rules, gradcheck, nn


def np_dtype(name: str) -> np.dtype:
    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


def _t(values: np.ndarray, dtype: str, device: str | None = None, grad: bool = True) -> Tensor:
    return Tensor.from_host(values, dtype=dtype, device=device, requires_grad=grad)


# --- activations ----------------------------------------------------------------------------------

ACTS = {
    "gelu": lambda x: ag.gelu(x),
    "gelu_tanh": lambda x: ag.gelu(x, approximate="tanh"),
    "silu": ag.silu,
    "sigmoid": ag.sigmoid,
    "tanh": ag.tanh,
    "relu": ag.relu,
}


@pytest.mark.parametrize("name", list(ACTS))
def test_activation_rules_pass_gradcheck(device: str, name: str) -> None:
    x = np.random.default_rng(1).uniform(-3, 3, size=(4, 7))
    if name == "relu":
        x = np.where(np.abs(x) < 0.1, 0.5, x)  # away from the kink
    assert gradcheck(ACTS[name], [_t(x, "float64", device)])


@pytest.mark.parametrize("name", list(ACTS))
def test_activation_rules_use_one_fused_call(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    calls = []
    kernels = ignis.zeros((1,), device="cpu")._backend.kernels
    original = kernels.activation_backward

    def spy(out, grad, saved, kind):
        calls.append(kind)
        return original(out, grad, saved, kind)

    monkeypatch.setattr(kernels, "activation_backward", spy)
    x = _t(np.linspace(-2, 2, 9), "float32", "cpu")  # the backend spied on is the CPU's
    ACTS[name](x).sum().backward()
    assert calls == [name]


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_16bit_activation_gradient_is_rounded_once(dtype: str) -> None:
    # float32 gradients of a 16-bit tensor: the derivative is not rounded to 16 bits first
    x = np.random.default_rng(2).uniform(-3, 3, size=(64,))
    xt = _t(x, dtype)
    xs = xt.data.to_host().astype(np.float64)
    y = ag.gelu(xt, approximate="tanh")
    y.backward(ignis.full((64,), 0.37, dtype=dtype))
    g = float(ignis.full((1,), 0.37, dtype=dtype).to_host()[0])
    k, c = math.sqrt(2 / math.pi), 0.044715
    t = np.tanh(k * (xs + c * xs**3))
    d = 0.5 * (1 + t) + 0.5 * xs * (1 - t * t) * k * (1 + 3 * c * xs * xs)
    assert xt.grad.dtype == ignis.float32
    # one rounding of g * gelu'(x) into the 16-bit dtype: within half an ulp
    rtol = 2.0**-8 if dtype == "bfloat16" else 2.0**-11
    np.testing.assert_allclose(xt.grad.to_host(), g * d, rtol=rtol, atol=1e-30)


def test_mixed_gradient_dtype_keeps_the_composite_formula() -> None:
    # a float64 gradient of a float32 output is not a fused pair: the formula runs, promoted
    x = np.random.default_rng(3).uniform(-2, 2, size=(5,))
    y = ignis.asarray(x, dtype="float32")
    g = ignis.asarray(np.full(5, 0.5), dtype="float64")
    out = ignis.tanh(y)
    (got,) = _rules.RULES["tanh"].vjp(g, (True,), out)
    assert got.dtype == ignis.float64
    y32 = out.to_host()  # the composite: 1 - y*y in float32, then times the float64 gradient
    want = 0.5 * (np.float32(1) - y32 * y32).astype(np.float64)
    np.testing.assert_allclose(got.to_host(), want, rtol=1e-14)


# --- linear and packed attention ------------------------------------------------------------------


def test_linear_layer_is_one_op_with_weight_gradient_in_its_layout() -> None:
    layer = nn.Linear(4, 6)
    x = _t(np.random.default_rng(4).standard_normal((2, 3, 4)), "float32")
    y = layer(x)
    assert y.shape == (2, 3, 6) and y.grad_fn.name == "linear"
    assert all(isinstance(e, Tensor) for e in y.grad_fn.next_functions())  # leaves only
    (y * y).sum().backward()
    assert layer.weight.grad.is_contiguous and layer.weight.grad.shape == (6, 4)
    w, b, xv = (t.data.to_host().astype(np.float64) for t in (layer.weight, layer.bias, x))
    yv = xv @ w.T + b
    np.testing.assert_allclose(layer.weight.grad.to_host(), (2 * yv).reshape(-1, 6).T
                               @ xv.reshape(-1, 4), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(layer.bias.grad.to_host(), (2 * yv).sum(axis=(0, 1)), rtol=1e-5)
    np.testing.assert_allclose(x.grad.to_host(), (2 * yv) @ w, rtol=1e-5, atol=1e-5)


def test_linear_bad_input_names_the_operation() -> None:
    w = _t(np.ones((5, 4)), "float32")
    with pytest.raises(ignis.ShapeError, match=r"linear: x of shape \(3, 3\) does not end in "
                       r"weight's in-dimension 4"):
        ag.linear(_t(np.ones((3, 3)), "float32"), w)
    with pytest.raises(ignis.ShapeError, match=r"linear: bias has shape \(4,\), expected \(5,\)"):
        ag.linear(_t(np.ones((3, 4)), "float32"), w, _t(np.ones(4), "float32"))
    with pytest.raises(ignis.ShapeError, match=r"linear: weight must be 2-D"):
        ag.linear(_t(np.ones((3, 4)), "float32"), _t(np.ones(4), "float32"))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_packed_attention_matches_the_split_heads_path(device: str, dtype: str) -> None:
    rng = np.random.default_rng(5)
    qkv_host = rng.standard_normal((2, 9, 3 * 8))
    g_host = rng.standard_normal((2, 9, 8))
    a = _t(qkv_host, dtype, device)
    out_a = ag.packed_attention(a, 2, causal=True)
    assert out_a.grad_fn.name == "packed_attention"
    b = _t(qkv_host, dtype, device)
    heads = b.reshape(2, 9, 3, 2, 4).permute(2, 0, 3, 1, 4)
    out_b = ag.scaled_dot_product_attention(heads[0], heads[1], heads[2], causal=True)
    out_b = out_b.permute(0, 2, 1, 3).reshape(2, 9, 8)
    np.testing.assert_array_equal(out_a.data.to_host(), out_b.data.to_host())
    g = ignis.asarray(g_host, dtype=dtype, device=device)
    out_a.backward(g)
    out_b.backward(g)
    if device == "cpu":
        np.testing.assert_array_equal(a.grad.to_host(), b.grad.to_host())
    else:  # the GPU backward kernels may sum partial results in a run-dependent order
        tol = 1e-5 if dtype == "float32" else 2e-2
        np.testing.assert_allclose(a.grad.to_host(), b.grad.to_host(), rtol=tol, atol=tol)
    assert np.any(a.grad.to_host() != 0)


def test_packed_attention_bad_input() -> None:
    with pytest.raises(ignis.ShapeError, match=r"packed_attention: qkv must be \(batch, T, 3 \* "
                       r"dim\), got \(2, 5, 7\)"):
        ag.packed_attention(_t(np.ones((2, 5, 7)), "float32"), 1)
    with pytest.raises(ValueError, match=r"n_heads must be a positive divisor of dim=8, got 3"):
        ag.packed_attention(_t(np.ones((2, 5, 24)), "float32"), 3)


def test_attention_module_takes_the_packed_path_and_keeps_its_values() -> None:
    ignis.random.seed(0)
    attn = nn.CausalSelfAttention(16, 4)
    attn.eval()
    x = _t(np.random.default_rng(6).standard_normal((2, 5, 16)), "float32")
    y = attn(x)
    # the same weights through the split path (a KV cache-free composite of the pieces)
    q, k, v = (
        t.permute(0, 2, 1, 3)
        for t in attn.qkv(x).reshape(2, 5, 3, 4, 4).permute(2, 0, 1, 3, 4)
    )
    ref = ag.scaled_dot_product_attention(q, k, v, causal=True).permute(0, 2, 1, 3)
    ref = attn.proj(ref.reshape(2, 5, 16))
    np.testing.assert_allclose(y.data.to_host(), ref.data.to_host(), rtol=1e-6, atol=1e-6)


# --- the backward walk's 16-bit sums -------------------------------------------------------------


def _grads_with_and_without_counts(monkeypatch: pytest.MonkeyPatch, fn, x_host, dtype):
    def run():
        x = _t(x_host, dtype)
        fn(x).astype("float32").sum().backward()
        return x.grad.to_host()

    fast = run()
    plain_scan = _graph._Run.scan

    def scan_without_counts(self, root):
        plain_scan(self, root)
        self.pending = None  # every sum takes the general float32 path

    monkeypatch.setattr(_graph._Run, "scan", scan_without_counts)
    slow = run()
    return fast, slow


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("uses", [2, 3, 4])
def test_16bit_sums_are_bit_identical_to_the_float32_path(
    monkeypatch: pytest.MonkeyPatch, dtype: str, uses: int
) -> None:
    # h receives `uses` contributions of its own dtype: 1 first (the walk runs the newest op
    # first), then halves of an ulp of 1, which a 16-bit running sum would round away
    e = 2.0**-8 if dtype == "bfloat16" else 2.0**-11
    scales = [e] * (uses - 1) + [1.0]

    def fn(x):
        h = x * 1.7
        out = h * scales[0]
        for s in scales[1:]:
            out = out + h * s
        return out

    x_host = np.random.default_rng(7).uniform(-2, 2, size=(257,))
    fast, slow = _grads_with_and_without_counts(monkeypatch, fn, x_host, dtype)
    np.testing.assert_array_equal(fast, slow)
    # h's gradient is the float32 sum of its contributions, rounded once to the 16-bit dtype
    np16 = np_dtype(dtype)
    g_h = np.float32(1.0 + (uses - 1) * e).astype(np16)
    want = (np.float32(g_h) * np.float32(1.7)).astype(np16)  # x's rule: g * 1.7 in float32
    np.testing.assert_array_equal(fast, np.full(x_host.shape, np.float32(want)))


def test_walk_counts_contributions_per_node() -> None:
    x = _t(np.ones(3), "float32")
    h = x * 2.0
    y = h * h + h  # h: three contributions (two from the product, one from the sum)
    run = _graph._Run(retain=True)
    run.scan(y.grad_fn)
    assert run.pending[h.grad_fn] == 3
    assert run.pending[y.grad_fn] == 1


def test_checkpoint_inside_the_walk_drops_the_counts() -> None:
    rng = np.random.default_rng(8)
    x_host = rng.standard_normal((4, 6))
    w_host = rng.standard_normal((6, 6))

    def run(use_checkpoint: bool):
        x = _t(x_host, "bfloat16")
        w = _t(w_host, "bfloat16")
        h = x * 1.5
        def block(t):
            return (t @ w).tanh() + t

        z = ag.checkpoint(block, h) if use_checkpoint else block(h)
        (z + h).astype("float32").sum().backward()
        return x.grad.to_host(), w.grad.to_host()

    got, want = run(True), run(False)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-2, atol=1e-2)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-2, atol=1e-2)
    assert np.any(got[0] != 0) and np.any(got[1] != 0)
