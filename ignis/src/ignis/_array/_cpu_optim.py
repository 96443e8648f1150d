"""The multi-tensor optimizer hooks of the CPU backend, with NumPy.

The arithmetic is the CUDA kernels' (``cuda_src/optim.cu``): float32 for float32 and 16-bit
parameters (float64 for float64 ones), bias corrections in float64, 16-bit results rounded once.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ._cpu_backend import host_view

if TYPE_CHECKING:
    from .array import NvArray

__all__ = ["sgd", "adam", "prepare_sgd", "prepare_adam", "l2_norm", "scale", "update_scale"]


def _math(p: NvArray) -> np.dtype:
    return np.dtype(np.float64) if p.dtype.name == "float64" else np.dtype(np.float32)


def _skip(found_inf: NvArray | None) -> bool:
    return found_inf is not None and bool(host_view(found_inf).reshape(-1)[0] != 0)


def _count(steps: list[NvArray]) -> list[float]:
    """Adds one to every step counter; their new values."""
    out = []
    for s in steps:
        v = host_view(s)
        v[...] = v + np.float32(1)
        out.append(float(v.reshape(-1)[0]))
    return out


def _param_value(p: NvArray, master: NvArray | None, m: np.dtype) -> np.ndarray:
    return host_view(master).astype(m) if master is not None else host_view(p).astype(m)


def _write_param(p: NvArray, master: NvArray | None, x: np.ndarray) -> None:
    if master is not None:
        host_view(master)[...] = x
        x = host_view(master)
    host_view(p)[...] = x  # one rounding into the parameter's dtype


def sgd(
    params: list[NvArray],
    grads: list[NvArray],
    bufs: list[NvArray] | None,
    masters: list[NvArray | None] | None,
    steps: list[NvArray],
    lr: NvArray,
    found_inf: NvArray | None,
    hyper: dict[str, Any],
) -> None:
    if _skip(found_inf):
        return
    counts = _count(steps)
    for i, p in enumerate(params):
        m = _math(p)
        t = m.type
        lr_m = t(float(host_view(lr).reshape(-1)[0]))
        mom, damp, wd = t(hyper["momentum"]), t(hyper["dampening"]), t(hyper["weight_decay"])
        master = masters[i] if masters is not None else None
        with np.errstate(all="ignore"):
            x = _param_value(p, master, m)
            d = host_view(grads[i]).astype(m)
            if wd != 0:
                d = d + wd * x
            if bufs is not None:
                bv = host_view(bufs[i])
                b = d.copy() if counts[i] <= 1 else mom * bv.astype(m) + (t(1) - damp) * d
                bv[...] = b
                d = d + mom * b if hyper["nesterov"] else b
            x = x - lr_m * d
        _write_param(p, master, x)


def adam(
    params: list[NvArray],
    grads: list[NvArray],
    exp_avgs: list[NvArray],
    exp_avg_sqs: list[NvArray],
    vmaxes: list[NvArray] | None,
    masters: list[NvArray | None] | None,
    steps: list[NvArray],
    lr: NvArray,
    found_inf: NvArray | None,
    hyper: dict[str, Any],
) -> None:
    if _skip(found_inf):
        return
    counts = _count(steps)
    b1d, b2d = hyper["beta1"], hyper["beta2"]
    for i, p in enumerate(params):
        m = _math(p)
        t = m.type
        lr_m = t(float(host_view(lr).reshape(-1)[0]))
        b1, b2, eps, wd = t(b1d), t(b2d), t(hyper["eps"]), t(hyper["weight_decay"])
        bc1 = 1.0 - b1d ** counts[i]
        bc2 = 1.0 - b2d ** counts[i]
        step_size = lr_m / t(bc1)
        bc2_sqrt = t(np.sqrt(bc2))
        master = masters[i] if masters is not None else None
        with np.errstate(all="ignore"):
            x = _param_value(p, master, m)
            g = host_view(grads[i]).astype(m)
            if hyper["decoupled"]:
                x = x * (t(1) - lr_m * wd)
            elif wd != 0:
                g = g + wd * x
            mv, vv = host_view(exp_avgs[i]), host_view(exp_avg_sqs[i])
            a = b1 * mv.astype(m) + (t(1) - b1) * g
            s = b2 * vv.astype(m) + (t(1) - b2) * g * g
            mv[...] = a
            vv[...] = s
            second = s
            if vmaxes is not None:
                xv = host_view(vmaxes[i])
                second = np.maximum(xv.astype(m), s)
                xv[...] = second
            denom = np.sqrt(second) / bc2_sqrt + eps
            x = x - step_size * (a / denom)
        _write_param(p, master, x)


def _prepared(update: Callable[..., None]) -> Callable[..., Callable[[], None]]:
    """The family form of ``update`` (prepare now, apply later): NumPy has nothing to prepare,
    so the returned function runs the whole update."""

    @functools.wraps(update)
    def prepare(*args: Any) -> Callable[[], None]:
        return lambda: update(*args)

    return prepare


prepare_sgd = _prepared(sgd)  # the optim_sgd family
prepare_adam = _prepared(adam)  # the optim_adam family


def l2_norm(out: NvArray, tensors: list[NvArray]) -> None:
    total = 0.0
    for x in tensors:
        v = host_view(x)
        acc = np.float64 if v.dtype == np.float64 else np.float32
        w = v.astype(acc)
        total += float(np.sum(w * w, dtype=acc))
    host_view(out)[...] = out.dtype.numpy.type(np.sqrt(total))


def scale(
    tensors: list[NvArray], factor: NvArray, mode: int, max_norm: float, found_inf: NvArray | None
) -> None:
    f = host_view(factor).reshape(-1)[0]  # float32 or float64: f is computed in its precision
    one = f.dtype.type(1)
    with np.errstate(all="ignore"):
        if mode == 1:
            f = one / f
        elif mode == 2:
            f = np.minimum(one, f.dtype.type(max_norm) / (f + f.dtype.type(1e-6)))
        bad = False
        for x in tensors:
            v = host_view(x)
            m = np.float64 if v.dtype == np.float64 else np.float32
            w = v.astype(m)
            if found_inf is not None and not np.all(np.isfinite(w)):
                bad = True
            v[...] = w * m(f)
    if bad:
        host_view(found_inf)[...] = 1.0


def update_scale(
    scale_: NvArray,
    tracker: NvArray,
    found_inf: NvArray,
    growth_factor: float,
    backoff_factor: float,
    growth_interval: int,
) -> None:
    s, tr = host_view(scale_), host_view(tracker)
    with np.errstate(all="ignore"):
        if host_view(found_inf).reshape(-1)[0] != 0:
            s[...] = s * np.float32(backoff_factor)
            tr[...] = 0
            return
        clean = int(tr.reshape(-1)[0]) + 1
        if clean >= growth_interval:
            grown = s * np.float32(growth_factor)
            if np.all(np.isfinite(grown)):
                s[...] = grown
            clean = 0
        tr[...] = clean
