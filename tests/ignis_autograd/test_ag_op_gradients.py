"""Every differentiable op passes gradcheck (float64 central differences) on each device."""

from __future__ import annotations

import numpy as np
import pytest
from autograd_cases import CASE_IDS, CASES, Case, make_inputs

from ignis_autograd import gradcheck


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_gradcheck(case: Case, device: str, rng: np.random.Generator) -> None:
    inputs, _ = make_inputs(case, rng, device)
    assert gradcheck(case.ours, inputs, eps=1e-6, atol=1e-6, rtol=1e-4)


@pytest.mark.parametrize(
    "case",
    [
        c
        for c in CASES
        if c.id in ("mul", "matmul_batched", "layer_norm_affine", "cross_entropy", "softmax")
    ],
    ids=lambda c: c.id,
)
def test_gradcheck_directional_mode(case: Case, device: str, rng: np.random.Generator) -> None:
    # max_full=0 forces the random-direction check used for large inputs.
    inputs, _ = make_inputs(case, rng, device)
    assert gradcheck(case.ours, inputs, max_full=0, n_directions=4)
