"""gradcheck: compare backward's gradients with central differences, in float64.

For small problems (inputs and output of at most ``max_full`` elements each) the whole Jacobian
is compared entry by entry: one backward per output element against two evaluations per input
element. For larger ones, random directions: with a fixed random ``u`` over the output and a
random unit direction ``d`` over the inputs, the analytic ``<J^T u, d>`` (one backward) is compared
with ``(L(x + eps d) - L(x - eps d)) / (2 eps)`` where ``L(x) = <u, fn(x)>``.

:func:`gradgradcheck` checks second derivatives the same way: it runs gradcheck on the
function ``(inputs, u) -> grad(fn(inputs), inputs, u, create_graph=True)``, so both the
gradients' derivatives with respect to the inputs and with respect to the output gradient ``u``
are compared.

A failure says which inputs, which entry or direction, the numeric and analytic values and the
tolerance that was exceeded.

Example::

    >>> from ignis_autograd import Tensor, gradcheck
    >>> x = Tensor.randn((3, 4), dtype="float64", requires_grad=True)
    >>> gradcheck(lambda t: (t * t).tanh().sum(axis=0), [x])
    True
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import ignis
from ignis import NvArray

from ._errors import GradcheckError
from .tape import enable_grad, no_grad
from .tensor import Tensor

__all__ = ["gradcheck", "gradgradcheck"]

_F64 = ignis.float64


def gradcheck(
    fn: Callable[..., Tensor],
    inputs: Sequence[Any],
    eps: float = 1e-6,
    atol: float = 1e-5,
    rtol: float = 1e-3,
    *,
    max_full: int = 100,
    n_directions: int = 3,
    seed: int = 0,
    raise_exception: bool = True,
) -> bool:
    """Check ``fn``'s analytic gradients against numeric ones; True when they agree.

    Args:
        fn: maps the inputs to one floating Tensor (it is called many times and must be
            deterministic: seed any randomness inside it).
        inputs: Tensors (those with ``requires_grad`` are checked; they are copied to float64
            leaves) and any other arguments, passed through unchanged.
        eps: the central-difference step.
        atol, rtol: an entry passes when ``|numeric - analytic| <= atol + rtol * |numeric|``.
        max_full: the largest input and output element counts for the full-Jacobian check.
        n_directions: random directions checked in the directional mode.
        seed: seeds the random ``u`` and directions.
        raise_exception: raise :class:`GradcheckError` on a mismatch (else return False).
    """
    args = list(inputs)
    checked = [i for i, x in enumerate(args) if isinstance(x, Tensor) and x.requires_grad]
    if not checked:
        raise ValueError(
            "gradcheck: no input requires grad; mark the inputs to check with requires_grad=True"
        )
    for i in checked:
        x = args[i]
        if x.dtype.kind != "f":
            raise ignis.DTypeError(
                f"gradcheck: input {i} has dtype {x.dtype.name}; it must be floating"
            )
        args[i] = Tensor(x.data.astype(_F64), requires_grad=True)
    base = [args[i].to_host().astype(np.float64) for i in checked]
    devices = [args[i].device for i in checked]

    def evaluate(values: list[np.ndarray]) -> np.ndarray:
        call = list(args)
        for i, v, dev in zip(checked, values, devices, strict=True):
            call[i] = Tensor(NvArray.from_host(v, dtype=_F64, device=dev))
        with no_grad():
            out = fn(*call)
        return _host(out, "gradcheck")

    y = fn(*args)
    _host(y, "gradcheck")
    if not y.requires_grad:
        raise GradcheckError(
            "gradcheck: the output does not require grad; fn does not differentiably depend on "
            "the inputs that require grad"
        )
    leaves = [args[i] for i in checked]
    n_in = sum(v.size for v in base)
    n_out = y.numel()
    rng = np.random.default_rng(seed)
    if n_in <= max_full and n_out <= max_full:
        failure = _full_jacobian(y, leaves, base, evaluate, eps, atol, rtol, checked)
    else:
        failure = _directions(
            y, leaves, base, evaluate, eps, atol, rtol, n_directions, rng, checked
        )
    if failure is None:
        return True
    if not raise_exception:
        return False
    name = getattr(fn, "__qualname__", type(fn).__name__)
    lines = [f"gradcheck: analytic and numeric gradients of {name} disagree", "  inputs:"]
    for k, (i, v) in enumerate(zip(checked, base, strict=True)):
        lines.append(f"    input {i}: float64 shape {v.shape} on {devices[k]} = {_fmt(v)}")
    lines.extend("  " + line for line in failure)
    raise GradcheckError("\n".join(lines))


def _host(out: Any, op: str) -> np.ndarray:
    if not isinstance(out, Tensor):
        raise TypeError(f"{op}: fn must return one Tensor, got {type(out).__name__}")
    if out.dtype.kind != "f":
        raise ignis.DTypeError(f"{op}: fn must return a floating Tensor, got {out.dtype.name}")
    return out.to_host().astype(np.float64)


def _fmt(v: np.ndarray, limit: int = 24) -> str:
    if v.size <= limit:
        return np.array2string(v, precision=6, separator=", ").replace("\n", " ")
    flat = ", ".join(f"{e:.6g}" for e in v.reshape(-1)[:limit])
    return f"[{flat}, ...] ({v.size} elements)"


def _grads(leaves: list[Tensor], base: list[np.ndarray]) -> list[np.ndarray]:
    out = []
    for leaf, v in zip(leaves, base, strict=True):
        g = leaf.grad
        out.append(np.zeros_like(v) if g is None else g.to_host().astype(np.float64))
        leaf.grad = None
    return out


def _ok(num: float, ana: float, atol: float, rtol: float) -> bool:
    return bool(abs(num - ana) <= atol + rtol * abs(num))


def _full_jacobian(
    y: Tensor,
    leaves: list[Tensor],
    base: list[np.ndarray],
    evaluate: Callable[[list[np.ndarray]], np.ndarray],
    eps: float,
    atol: float,
    rtol: float,
    checked: list[int],
) -> list[str] | None:
    n_out = y.numel()
    analytic = []  # analytic[k][i]: d out[k] / d input i, shaped like input i
    for k in range(n_out):
        seed_ = np.zeros(n_out)
        seed_[k] = 1.0
        y.backward(
            NvArray.from_host(seed_.reshape(y.shape), dtype=y.dtype, device=y.device),
            retain_graph=k < n_out - 1,
        )
        analytic.append(_grads(leaves, base))
    worst: tuple[float, ...] | None = None
    for i, v in enumerate(base):
        for j in range(v.size):
            plus = [b.copy() for b in base]
            minus = [b.copy() for b in base]
            plus[i].reshape(-1)[j] += eps
            minus[i].reshape(-1)[j] -= eps
            column = (evaluate(plus) - evaluate(minus)).reshape(-1) / (2 * eps)
            for k in range(n_out):
                num, ana = float(column[k]), float(analytic[k][i].reshape(-1)[j])
                excess = abs(num - ana) - (atol + rtol * abs(num))
                if not _ok(num, ana, atol, rtol) and (worst is None or excess > worst[0]):
                    worst = (excess, i, j, k, num, ana)
    if worst is None:
        return None
    _, i, j, k, num, ana = worst
    in_idx = np.unravel_index(j, base[i].shape) if base[i].ndim else ()
    out_idx = np.unravel_index(k, y.shape) if y.ndim else ()
    return [
        f"check: full Jacobian; worst entry: d output{list(map(int, out_idx))} / "
        f"d input {checked[i]}{list(map(int, in_idx))}",
        f"numeric (central differences, eps={eps:g}): {num:.10g}",
        f"analytic (backward): {ana:.10g}",
        f"|difference| {abs(num - ana):.3g} > atol {atol:g} + rtol {rtol:g} * |numeric|",
    ]


def _directions(
    y: Tensor,
    leaves: list[Tensor],
    base: list[np.ndarray],
    evaluate: Callable[[list[np.ndarray]], np.ndarray],
    eps: float,
    atol: float,
    rtol: float,
    n_directions: int,
    rng: np.random.Generator,
    checked: list[int],
) -> list[str] | None:
    u = rng.standard_normal(y.shape)
    y.backward(NvArray.from_host(u, dtype=y.dtype, device=y.device))
    grads = _grads(leaves, base)
    for n in range(n_directions):
        d = [rng.standard_normal(v.shape) for v in base]
        norm = np.sqrt(sum(float((x * x).sum()) for x in d)) or 1.0
        d = [x / norm for x in d]
        plus = [b + eps * x for b, x in zip(base, d, strict=True)]
        minus = [b - eps * x for b, x in zip(base, d, strict=True)]
        num = float((u * (evaluate(plus) - evaluate(minus))).sum() / (2 * eps))
        ana = float(sum((g * x).sum() for g, x in zip(grads, d, strict=True)))
        if not _ok(num, ana, atol, rtol):
            return [
                f"check: random direction #{n} (seed-determined unit vector over all checked "
                "inputs) with a random grad_output u",
                "direction: " + "; ".join(f"input {checked[i]} {_fmt(x)}" for i, x in enumerate(d)),
                f"grad_output u: {_fmt(u)}",
                f"numeric <u, (fn(x + eps d) - fn(x - eps d)) / 2 eps> (eps={eps:g}): {num:.10g}",
                f"analytic <J^T u, d> (backward): {ana:.10g}",
                f"|difference| {abs(num - ana):.3g} > atol {atol:g} + rtol {rtol:g} * |numeric|",
            ]
    return None


def gradgradcheck(
    fn: Callable[..., Tensor],
    inputs: Sequence[Any],
    grad_outputs: Any = None,
    eps: float = 1e-6,
    atol: float = 1e-5,
    rtol: float = 1e-3,
    *,
    max_full: int = 100,
    n_directions: int = 3,
    seed: int = 0,
    raise_exception: bool = True,
) -> bool:
    """Check ``fn``'s second derivatives (those of its recorded backward pass) numerically.

    Args:
        fn, inputs, eps, atol, rtol, max_full, n_directions, seed, raise_exception: as for
            :func:`gradcheck`.
        grad_outputs: the output gradient ``u`` (a Tensor or NvArray of the output's shape);
            default: seeded random normal values. It is checked as an input too.

    Example::

        >>> x = Tensor.randn((3,), dtype="float64", requires_grad=True)
        >>> gradgradcheck(lambda t: (t * t.sin()).sum(), [x])
        True
    """
    from ._higher import grad
    from .functional import concatenate

    args = list(inputs)
    checked = [i for i, x in enumerate(args) if isinstance(x, Tensor) and x.requires_grad]
    if not checked:
        raise ValueError(
            "gradgradcheck: no input requires grad; mark the inputs to check with "
            "requires_grad=True"
        )
    with enable_grad():
        y = fn(*args)
    if not isinstance(y, Tensor):
        raise TypeError(f"gradgradcheck: fn must return one Tensor, got {type(y).__name__}")
    if grad_outputs is None:
        rng = np.random.default_rng(seed + 1)
        u = NvArray.from_host(rng.standard_normal(y.shape), dtype=_F64, device=y.device)
    else:
        u = grad_outputs.data if isinstance(grad_outputs, Tensor) else grad_outputs
        if not isinstance(u, NvArray) or u.shape != y.shape:
            got = u.shape if isinstance(u, NvArray) else type(u).__name__
            raise ignis.ShapeError(
                f"gradgradcheck: grad_outputs must have the output's shape {y.shape}, got {got}"
            )
    n = len(args)

    def gradient(*call: Any) -> Tensor:
        xs, v = list(call[:n]), call[n]
        with enable_grad():
            for i in checked:
                if not xs[i].requires_grad:  # (gradcheck's numeric evaluations pass constants)
                    xs[i] = Tensor(xs[i].data, requires_grad=True)
            out = fn(*xs)
            gs = grad(out, [xs[i] for i in checked], v, create_graph=True, allow_unused=True)
        parts = [
            (g if g is not None else Tensor(ignis.zeros_like(xs[i].data))).reshape(-1)
            for i, g in zip(checked, gs, strict=True)
        ]
        return concatenate(parts) if len(parts) > 1 else parts[0]

    name = getattr(fn, "__qualname__", type(fn).__name__)
    gradient.__qualname__ = f"the gradient of {name}"
    u_in = Tensor(u.astype(_F64), requires_grad=True)
    return gradcheck(
        gradient,
        [*args, u_in],
        eps,
        atol,
        rtol,
        max_full=max_full,
        n_directions=n_directions,
        seed=seed,
        raise_exception=raise_exception,
    )
