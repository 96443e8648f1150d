"""gradcheck itself: it passes correct rules, catches wrong ones and explains the failure."""

from __future__ import annotations

import numpy as np
import pytest

import ignis
from ignis_autograd import GradcheckError, Tape, Tensor, gradcheck


def leaf(
    shape: tuple[int, ...], device: str, rng: np.random.Generator, dtype: str = "float64"
) -> Tensor:
    return Tensor.from_host(
        rng.standard_normal(shape), dtype=dtype, device=device, requires_grad=True
    )


def wrong_exp(x: Tensor) -> Tensor:
    """exp with a derivative that is off by a factor of 1.01."""
    out = Tensor(ignis.exp(x.data))
    return Tape.record(out, [x], lambda g: g * out.data * 1.01, name="wrong_exp")


def test_passes_a_correct_function(device: str, rng: np.random.Generator) -> None:
    x, w = leaf((3, 4), device, rng), leaf((4, 2), device, rng)
    assert gradcheck(lambda a, b: (a @ b).tanh() * 2.0, [x, w])
    assert x.grad is None and w.grad is None  # the caller's tensors are untouched


def test_full_jacobian_failure_report(device: str, rng: np.random.Generator) -> None:
    x = leaf((2, 3), device, rng)
    with pytest.raises(GradcheckError) as info:
        gradcheck(wrong_exp, [x])
    msg = str(info.value)
    assert (
        "wrong_exp" in msg
        and "full Jacobian; worst entry: d output[" in msg
        and "/ d input 0[" in msg
    )
    assert "input 0: float64 shape (2, 3)" in msg
    assert "numeric" in msg and "analytic" in msg and "atol" in msg
    # the reported values really differ by the planted factor
    num = float(msg.split("numeric (central differences, eps=1e-06): ")[1].split()[0])
    ana = float(msg.split("analytic (backward): ")[1].split()[0])
    assert ana == pytest.approx(num * 1.01, rel=1e-6)


def test_directional_failure_report(device: str, rng: np.random.Generator) -> None:
    x = leaf((20, 20), device, rng)  # 400 elements: the random-direction mode
    with pytest.raises(GradcheckError, match=r"random direction #0(.|\n)*direction: input 0"):
        gradcheck(lambda a: wrong_exp(a * 0.1).sum(axis=0), [x])
    assert gradcheck(lambda a: (a * 0.1).exp().sum(axis=0), [x])


def test_raise_exception_false(device: str, rng: np.random.Generator) -> None:
    assert gradcheck(wrong_exp, [leaf((3,), device, rng)], raise_exception=False) is False


def test_lower_precision_inputs_are_checked_in_float64(
    device: str, rng: np.random.Generator
) -> None:
    x = leaf((3, 3), device, rng, dtype="float32")
    assert gradcheck(lambda a: a.sigmoid() * a, [x])
    assert x.dtype == "float32"


def test_non_tensor_arguments_pass_through(device: str, rng: np.random.Generator) -> None:
    x = leaf((3, 4), device, rng)
    targets = ignis.NvArray.from_host([0, 3, 1], device=device)
    from ignis_autograd import cross_entropy

    assert gradcheck(lambda z, t, k: cross_entropy(z * k, t), [x, targets, 2.0])


def test_bad_usage(device: str, rng: np.random.Generator) -> None:
    x = Tensor.from_host(rng.standard_normal(3), dtype="float64", device=device)
    with pytest.raises(ValueError, match="no input requires grad"):
        gradcheck(lambda a: a * 2.0, [x])
    y = leaf((3,), device, rng)
    with pytest.raises(TypeError, match="one Tensor"):
        gradcheck(lambda a: [a], [y])
    with pytest.raises(GradcheckError, match="does not require grad"):
        gradcheck(lambda a: a.detach() * 2.0, [y])
