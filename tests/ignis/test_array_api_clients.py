"""Real clients of ignis as an Array API namespace: array-api-compat finds it, and scikit-learn
estimators that support the Array API fit on ignis arrays (CPU and GPU) with NumPy's results.

scikit-learn and SciPy read ``SCIPY_ARRAY_API`` when they are first imported, so each check runs
in a fresh interpreter with it set. Skipped where scikit-learn is absent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("sklearn")
array_api_compat = pytest.importorskip("array_api_compat")

import ignis  # noqa: E402

_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import sklearn
    from sklearn.decomposition import PCA
    from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
    from sklearn.linear_model import Ridge
    from sklearn.preprocessing import StandardScaler
    import ignis

    device = sys.argv[1]
    rng = np.random.default_rng(7)
    X = rng.normal(size=(80, 6)) @ rng.normal(size=(6, 6))
    y_class = (X[:, 0] + 0.3 * X[:, 1] > 0).astype(np.int64)
    y_reg = X @ rng.normal(size=6) + 0.1 * rng.normal(size=80)
    report = {}

    def fit_both(make, *data, attrs):
        ref = make().fit(*data)
        with sklearn.config_context(array_api_dispatch=True):
            ours = make().fit(*(ignis.asarray(d, device=device) for d in data))
        for a in attrs:
            got = getattr(ours, a)
            report[f"{type(ref).__name__}.{a}"] = {
                "namespace": type(got).__module__.split(".")[0],
                "device": str(getattr(got, "device", "")),
                "err": float(np.max(np.abs(np.asarray(got) - getattr(ref, a)))),
                "scale": float(np.max(np.abs(getattr(ref, a)))),
            }
        return ref, ours

    ref, ours = fit_both(lambda: PCA(n_components=3, svd_solver="full"), X,
                         attrs=["explained_variance_", "mean_"])
    with sklearn.config_context(array_api_dispatch=True):
        proj = np.asarray(ours.transform(ignis.asarray(X, device=device)))
    # components are defined up to sign: compare the projections' magnitudes
    report["PCA.transform"] = {
        "namespace": "ignis", "device": device,
        "err": float(np.max(np.abs(np.abs(proj) - np.abs(ref.transform(X))))),
        "scale": float(np.max(np.abs(ref.transform(X)))),
    }
    fit_both(lambda: Ridge(alpha=0.5, solver="svd"), X, y_reg, attrs=["coef_"])
    fit_both(LinearDiscriminantAnalysis, X, y_class, attrs=["coef_", "means_"])
    fit_both(StandardScaler, X, attrs=["mean_", "scale_"])
    print(json.dumps(report))
    """
)


def test_array_api_compat_returns_ignis_namespace(device) -> None:
    x = ignis.zeros((2, 3), device=device)
    assert array_api_compat.array_namespace(x) is ignis
    assert array_api_compat.is_array_api_obj(x)
    assert x.__array_namespace__() is ignis


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_scikit_learn_estimators_fit_on_ignis_arrays_like_numpy(device, dtype) -> None:
    script = _SCRIPT.replace(
        "report = {}", f"X = X.astype(np.{dtype}); y_reg = y_reg.astype(np.{dtype}); report = {{}}"
    )
    env = dict(os.environ, SCIPY_ARRAY_API="1")
    done = subprocess.run(
        [sys.executable, "-c", script, device], env=env, capture_output=True, text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    tol = 1e-4 if dtype == "float32" else 1e-9
    assert len(report) == 8
    for name, r in report.items():
        assert r["namespace"] == "ignis", name  # the estimator kept ignis arrays
        assert r["device"] == str(ignis.asarray([0.0], device=device).device), name
        assert r["err"] <= tol * max(1.0, r["scale"]), (name, r)
