"""Shared test configuration: the ``gpu`` marker skips itself where no CUDA device exists."""

from __future__ import annotations

import os
import tempfile

import pytest

import ignis

# Tests never touch the user's compile cache.
os.environ.setdefault("IGNIS_CACHE_DIR", tempfile.mkdtemp(prefix="ignis-test-cache-"))

HAS_GPU = ignis.is_available()

requires_gpu = pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA GPU (ignis.is_available() is False)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if HAS_GPU:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (ignis.is_available() is False)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def _devices() -> list:
    params: list = ["cpu"]
    if HAS_GPU:
        params.append(pytest.param("cuda:0", marks=pytest.mark.gpu))
    return params


@pytest.fixture(params=_devices())
def device(request: pytest.FixtureRequest) -> str:
    """Each available array device: "cpu" always, "cuda:0" (marked gpu) where a GPU exists."""
    return request.param
