"""The kernel families (``_families``): one declaration each, the built-in CPU and CUDA
implementations it names, the backends' tables, and how another backend registers its own."""

from __future__ import annotations

import importlib
import inspect

import numpy as np
import pytest
from ignis._array import _backend, _families
from ignis._array._cpu_backend import CpuBackend
from ignis._array._device import as_device

import ignis


def _implementation(package: str, path: str):
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(f"{package}.{module}" if module else package), name)


@pytest.mark.parametrize("name", list(_families.FAMILIES))
def test_every_implementation_takes_the_declared_parameters(name: str) -> None:
    fam = _families.FAMILIES[name]
    assert fam.cpu or fam.portable, f"{name}: the CPU backend would have nothing to run"
    assert fam.cuda or fam.portable, f"{name}: the CUDA backend would have nothing to run"
    for package, path, bound in [
        ("ignis._array", fam.cpu, False),
        ("ignis._array._cuda_backend", fam.cuda, True),
        ("ignis._array._portable", fam.portable, True),
    ]:
        if path is not None:
            fn = _implementation(package, path)
            _families.check_arity(fam, fn, bound, f"{package}.{path}")
            n = len(inspect.signature(fn).parameters)
            assert n == len(fam.params) + bound or any(
                p.kind is p.VAR_POSITIONAL for p in inspect.signature(fn).parameters.values()
            ), f"{package}.{path} takes {n} parameters"


def test_the_backends_keep_no_family_methods() -> None:
    from ignis._array._cuda_backend import CudaBackend

    for cls in (_backend.Backend, CpuBackend, CudaBackend):
        left = [n for n in _families.FAMILIES if n in vars(cls)]
        assert left == [], f"{cls.__name__} still defines {left}"


def test_the_table_resolves_once_and_binds_the_backend() -> None:
    backend = CpuBackend(as_device("cpu"))
    fn = backend.kernels.layer_norm
    assert backend.kernels.layer_norm is fn  # kept: later calls look up an attribute
    from ignis._array import _cpu_nn_norm_loss

    assert fn is _cpu_nn_norm_loss.layer_norm  # the NumPy reference takes no backend
    assert "rope" in dir(backend.kernels)


def test_unknown_family_is_an_attribute_error_listing_the_families() -> None:
    with pytest.raises(AttributeError, match=r"no kernel family 'lyer_norm'.*layer_norm"):
        _ = ignis.zeros((1,), device="cpu")._backend.kernels.lyer_norm


class _Bare(CpuBackend):
    """The CPU primitives without the built-in family implementations: a third-party backend."""

    kind = "cpu"
    builtin_families = None


def test_a_missing_implementation_names_the_family_and_the_backend() -> None:
    backend = _Bare(as_device("cpu"))
    with pytest.raises(NotImplementedError, match=r"'attention_backward'.*cpu backend _Bare"):
        _ = backend.kernels.attention_backward


def test_portable_forms_serve_a_backend_without_its_own() -> None:
    backend = _Bare(as_device("cpu"))
    a = ignis.asarray(np.arange(6.0).reshape(2, 3), device="cpu")
    b = ignis.asarray(np.ones((3, 2)), device="cpu")
    bias = ignis.asarray(np.array([1.0, -1.0]), device="cpu")
    out = ignis.empty((2, 2), dtype="float64", device="cpu")
    backend.kernels.matmul_bias(out, a, b, bias)
    np.testing.assert_array_equal(out.to_host(), a.to_host() @ b.to_host() + [1.0, -1.0])
    backend.kernels.optim_zero([out])
    assert not out.to_host().any()


class _Registered(CpuBackend):
    """A backend class with a family implementation of its own."""


def test_a_registered_implementation_takes_precedence_and_gets_the_backend() -> None:
    calls = []

    def my_rms_norm(backend, y, rstd, x, weight, eps):
        calls.append((backend, eps))
        y.fill_(7.0)
        rstd.fill_(1.0)

    _Registered.implement("rms_norm", my_rms_norm)
    backend = _Registered(as_device("cpu"))
    x = ignis.ones((2, 4), device="cpu")
    y, rstd = ignis.empty((2, 4), device="cpu"), ignis.empty((2,), device="cpu")
    backend.kernels.rms_norm(y, rstd, x, None, 1e-5)
    assert calls == [(backend, 1e-5)]
    assert (y.to_host() == 7.0).all()
    assert backend.kernels.layer_norm is CpuBackend(as_device("cpu")).kernels.layer_norm


def test_registration_checks_the_family_and_the_parameters() -> None:
    with pytest.raises(AttributeError, match="_Registered.implement: no kernel family 'ropee'"):
        _Registered.implement("ropee", lambda backend, *a: None)
    with pytest.raises(TypeError, match=r"rope is called as \(backend, out, x, positions"):
        _Registered.implement("rope", lambda backend, out, x: None)
    with pytest.raises(TypeError, match="needs a callable"):
        _Registered.implement("rope", None)  # type: ignore[arg-type]


def test_a_built_backend_sees_a_later_registration() -> None:
    class _Late(CpuBackend):
        pass

    dev = as_device("cpu")
    old = _backend._instances.get(dev)
    _backend._instances[dev] = late = _Late(dev)
    try:
        x = ignis.asarray(np.linspace(-1, 1, 8).reshape(2, 4), device="cpu")
        ignis.nn.rms_norm(x)  # resolved the built-in one
        seen = []
        _Late.implement("rms_norm", lambda backend, *args: seen.append(backend))
        ignis.nn.rms_norm(x)
        assert seen == [late]
    finally:
        if old is None:
            _backend._instances.pop(dev, None)
        else:
            _backend._instances[dev] = old
