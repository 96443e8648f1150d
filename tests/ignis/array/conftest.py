"""Fixtures of the NvArray tests (the ``device`` fixture is shared, in tests/conftest.py)."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(20240531)
