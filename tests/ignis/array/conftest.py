"""Fixtures of the NvArray tests (the ``device`` fixture is shared, in tests/conftest.py)."""

from __future__ import annotations

import numpy as np
import pytest

from ignis import _cusolver


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(20240531)


@pytest.fixture
def solver(device):
    """The device of a linalg test; GPU runs skip where cuSOLVER is not installed (the error
    itself is tested in test_linalg.py)."""
    if device != "cpu" and _cusolver.load() is None:
        pytest.skip(f"cuSOLVER is not installed ({_cusolver.unavailable_reason()})")
    return device
