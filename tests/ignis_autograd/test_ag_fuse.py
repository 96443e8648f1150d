"""ignis.fuse on Tensors: one recorded node whose backward is one fused kernel.

The backward is derived from the op table's derivative rules on the traced ops; on the CPU it
runs op by op, which gradcheck checks in float64. Gradients of broadcast inputs are summed back
to their shapes; trailing sums and means are differentiated in the same node; on a GPU the
gradients match the unfused autograd's and the backward is one launch (plus the sums over
broadcast dimensions).
"""

from __future__ import annotations

import numpy as np
import pytest

import ignis
import ignis_autograd as ag

GPU = pytest.mark.gpu


def gelu_chain(x):
    # (Tensor methods and ignis_autograd functions: the same function runs unfused on Tensors)
    return 0.5 * x * (1.0 + ag.tanh(0.79788456 * (x + 0.044715 * x * x * x)))


gelu = ag.fuse(gelu_chain)


@ignis.fuse
def mixed(x, y, s):
    # several rules at once: exp/log/sigmoid/where/maximum/power/divide, a scalar argument
    z = ag.exp(x * s) / (1.0 + y * y) + ag.log1p(y.sigmoid())
    return ag.where(x > 0.0, z, ag.maximum(x, y) ** 2) - x.sin() * ag.atan2(x, y)


@ignis.fuse
def row_loss(x, w):
    return ag.sum((x * w - 1.0) ** 2, axis=1)


@ignis.fuse
def mean_tanh(x):
    return x.tanh().mean(axis=0, keepdims=True)


def _t(rng, shape, grad=True, device="cpu", dtype="float64"):
    data = ignis.asarray(rng.standard_normal(shape), device=device).astype(dtype)
    return ag.Tensor(data, requires_grad=grad)


def test_one_node_is_recorded(rng) -> None:
    x = _t(rng, (3, 4))
    out = gelu(x)
    assert "FusedGeluChainBackward" in repr(out.grad_fn)
    # the node's inputs are the fused function's inputs: nothing in between was recorded
    unfused = gelu_chain(x)
    assert "FusedGeluChain" not in repr(unfused.grad_fn)
    np.testing.assert_allclose(out.data.to_host(), unfused.data.to_host(), rtol=1e-12)


def test_gradcheck_of_the_chain_and_of_many_rules(rng) -> None:
    x = _t(rng, (3, 5))
    assert ag.gradcheck(gelu, (x,))
    a, b = _t(rng, (4, 3)), _t(rng, (4, 3))
    assert ag.gradcheck(lambda p, q: mixed(p, q, 0.7), (a, b))


def test_broadcast_inputs_get_gradients_of_their_shapes(rng) -> None:
    x, w = _t(rng, (5, 6)), _t(rng, (6,))
    assert ag.gradcheck(row_loss, (x, w))
    row_loss(x, w).sum().backward()
    hx, hw = x.data.to_host(), w.data.to_host()
    assert w.grad.shape == (6,)
    np.testing.assert_allclose(w.grad.to_host(), (2 * (hx * hw - 1) * hx).sum(0), rtol=1e-12)
    np.testing.assert_allclose(x.grad.to_host(), 2 * (hx * hw - 1) * hw, rtol=1e-12)


def test_a_trailing_mean_and_inputs_without_gradients(rng) -> None:
    x = _t(rng, (4, 3))
    assert ag.gradcheck(mean_tanh, (x,))
    c = _t(rng, (4, 3), grad=False)
    y = _t(rng, (4, 3))
    out = mixed(c, y, 0.3)
    out.sum().backward()
    assert c.grad is None and y.grad is not None and y.grad.shape == (4, 3)


def test_fused_gradients_equal_the_unfused_ones(rng) -> None:
    a, b = _t(rng, (2, 7)), _t(rng, (1, 7))
    mixed(a, b, 1.3).sum().backward()
    ga, gb = a.grad.to_host(), b.grad.to_host()
    a2, b2 = ag.Tensor(a.data, requires_grad=True), ag.Tensor(b.data, requires_grad=True)
    mixed.func(a2, b2, 1.3).sum().backward()
    np.testing.assert_allclose(ga, a2.grad.to_host(), rtol=1e-10)
    np.testing.assert_allclose(gb, b2.grad.to_host(), rtol=1e-10)


def test_several_results_and_a_trailing_max_are_differentiated_op_by_op(rng) -> None:
    x = _t(rng, (3, 4))
    pair = ignis.fuse(lambda a: (a * 2.0, ag.exp(a)))
    p, q = pair(x)
    (p.sum() + q.sum()).backward()
    np.testing.assert_allclose(x.grad.to_host(), 2.0 + np.exp(x.data.to_host()), rtol=1e-12)
    top = ignis.fuse(lambda a: ag.max(a * a, axis=1))
    assert ag.gradcheck(top, (_t(rng, (3, 4)),))


def test_without_recording_the_result_is_a_plain_tensor(rng) -> None:
    x = _t(rng, (3,))
    with ag.no_grad():
        out = gelu(x)
    assert isinstance(out, ag.Tensor) and out.grad_fn is None and not out.requires_grad


def test_the_backward_source_compiles_for_every_float_dtype() -> None:
    for dtype in ("float32", "float64", "float16", "bfloat16"):
        for arch in ("sm_80", "sm_90a"):
            src = mixed.source(((8, 4), dtype), ((1, 4), dtype), 0.5, grad=True, nd=2,
                               tensors=True)  # fmt: skip
            assert ignis.compile(src, ignis.CompileOptions(arch=arch)).kind == "cubin"


def test_errors_name_the_fused_function_with_tensors(rng) -> None:
    x = _t(rng, (3,))
    with pytest.raises(TypeError, match=r"fuse\(.*\): argument 1 is a list"):
        row_loss(x, [1.0, 2.0, 3.0])
    with pytest.raises(TypeError, match=r"fuse\(.*\): reshape cannot be fused"):
        ignis.fuse(lambda a: a.reshape(3))(x)


# --- GPU -----------------------------------------------------------------------------------------


def _needs_gpu() -> None:
    if not ignis.is_available():
        pytest.skip("needs a CUDA GPU")


@GPU
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_gpu_gradients_match_the_unfused_autograd(rng, dtype) -> None:
    _needs_gpu()
    tol = 1e-10 if dtype == "float64" else 2e-5
    a, b = _t(rng, (64, 33), device="cuda:0", dtype=dtype), _t(rng, (1, 33), device="cuda:0",
                                                                dtype=dtype)  # fmt: skip
    mixed(a, b, 0.9).sum().backward()
    a2 = ag.Tensor(a.data, requires_grad=True)
    b2 = ag.Tensor(b.data, requires_grad=True)
    mixed.func(a2, b2, 0.9).sum().backward()
    np.testing.assert_allclose(a.grad.to_host(), a2.grad.to_host(), rtol=tol, atol=tol)
    np.testing.assert_allclose(b.grad.to_host(), b2.grad.to_host(), rtol=tol, atol=tol * 64)
    x, w = _t(rng, (50, 20), device="cuda:0", dtype=dtype), _t(rng, (20,), device="cuda:0",
                                                               dtype=dtype)  # fmt: skip
    row_loss(x, w).sum().backward()
    hx, hw = x.data.to_host().astype(np.float64), w.data.to_host().astype(np.float64)
    np.testing.assert_allclose(w.grad.to_host(), (2 * (hx * hw - 1) * hx).sum(0), rtol=tol * 10)


@GPU
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_gpu_half_gradients_are_float32_and_close(rng, dtype) -> None:
    _needs_gpu()
    x = _t(rng, (256,), device="cuda:0", dtype=dtype)
    gelu(x).sum().backward()
    hx = x.data.astype("float64").to_host()
    t = np.tanh(0.79788456 * (hx + 0.044715 * hx**3))
    want = 0.5 * (1 + t) + 0.5 * hx * (1 - t * t) * 0.79788456 * (1 + 3 * 0.044715 * hx * hx)
    assert x.grad.dtype == ignis.float32
    np.testing.assert_allclose(x.grad.to_host(), want, rtol=3e-2, atol=3e-2)


@GPU
def test_gpu_backward_of_the_chain_is_one_launch(rng) -> None:
    _needs_gpu()
    x = _t(rng, (1 << 14,), device="cuda:0", dtype="float32")
    g = ag.Tensor(ignis.ones((1 << 14,), device="cuda:0"))
    gelu(x).backward(g)  # compiled outside the profile
    x.grad = None
    out = gelu(x)
    with ignis.profile() as prof:
        out.backward(g)
    ignis.synchronize()
    assert [e.name for e in prof.events if "fused" in e.name] == ["fused_gelu_chain_backward"]
    assert len([e for e in prof.events if e.kind == "kernel"]) == 1
