"""Fixtures of the autograd tests: ``device`` runs a test on every available device."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from ignis import _bindings


def _devices() -> list:
    params = ["cpu"]
    if _bindings.driver_available():
        params.append(pytest.param("cuda:0", marks=pytest.mark.gpu))
    return params


@pytest.fixture(params=_devices())
def device(request: pytest.FixtureRequest) -> str:
    """Each available device: "cpu" always, "cuda:0" (marked gpu) where a driver exists."""
    if (
        request.param.startswith("cuda")
        and importlib.util.find_spec("ignis._array._cuda_backend") is None
    ):
        pytest.skip("this installation has no cuda array backend yet")
    return request.param


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(20240607)
