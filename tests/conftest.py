"""Shared test configuration: the ``gpu`` marker skips itself where no CUDA device exists."""

from __future__ import annotations

import os
import tempfile

import pytest

import ignis

# Tests never touch the user's compile cache.
os.environ.setdefault("IGNIS_CACHE_DIR", tempfile.mkdtemp(prefix="ignis-test-cache-"))

HAS_GPU = ignis.is_available()

requires_gpu = pytest.mark.skipif(
    not HAS_GPU, reason="needs a CUDA GPU (ignis.is_available() is False)"
)


EXHAUSTIVE = "exhaustive"


def pytest_configure(config: pytest.Config) -> None:
    # The exhaustive tier (`python -m pytest -m exhaustive`) runs the property-based tests again
    # with ten times the examples (tests/hardening/conftest.py reads the profile at import).
    if config.option.markexpr == EXHAUSTIVE:
        os.environ.setdefault("HYPOTHESIS_PROFILE", "slow")


@pytest.hookimpl(tryfirst=True)  # before -m deselects: the markers added here must count
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.option.markexpr == EXHAUSTIVE:
        for item in items:
            if hasattr(getattr(item, "obj", None), "hypothesis"):  # a @given test
                item.add_marker(EXHAUSTIVE)
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


@pytest.fixture
def tune():
    """``tune(reduction=dict(group_max_n=64), ...)``: ``ignis.tuning.set`` for the rest of the
    test; the settings in force before it are put back afterwards."""
    saved = ignis.tuning()
    yield ignis.tuning.set
    ignis.tuning.set(saved)


@pytest.fixture(autouse=True, scope="module")
def _give_device_memory_back_between_files():
    """Under pytest-xdist, return each file's device memory to the driver when the file ends.

    The memory pool keeps what it once held (its release threshold is raised, see
    ``AsyncMemoryResource``), and so does PyTorch's caching allocator. One test process may keep
    its peak; eight of them on one GPU (``scripts/gpu-check``) together can hold more than the
    card has, and the next large allocation of another process fails.
    """
    yield
    if not (HAS_GPU and os.environ.get("PYTEST_XDIST_WORKER")):
        return
    import sys

    from ignis._memory import AsyncMemoryResource, _resources

    ignis.synchronize()
    for resource in list(_resources.values()):
        if isinstance(resource, AsyncMemoryResource):
            resource.trim()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.empty_cache()
