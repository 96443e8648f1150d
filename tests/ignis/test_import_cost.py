"""What `import ignis` and `import ignis_autograd` load, and that what they defer still works.

`benchmarks/import_time.py` measures the time; these tests pin down the cause of a slow import
that once cost most of it: ml_dtypes (several times NumPy's import time) is imported only when
bfloat16's NumPy dtype is first needed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

# Modules that a bare `import ignis_autograd` must not load: each costs as much as NumPy or more,
# and none is needed until a feature that uses it runs.
DEFERRED = ("ml_dtypes", "matplotlib", "torch", "cupy", "scipy", "hypothesis", "pytest")


def _run(code: str) -> str:
    env = dict(os.environ)
    env.pop("PYTHONSTARTUP", None)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.mark.parametrize("package", ["ignis", "ignis_autograd"])
def test_import_loads_none_of_the_heavy_optional_modules(package: str) -> None:
    loaded = json.loads(_run(f"import json, sys, {package}; print(json.dumps(list(sys.modules)))"))
    roots = {name.split(".")[0] for name in loaded}
    assert package in roots
    assert not roots & set(DEFERRED), f"import {package} loaded {sorted(roots & set(DEFERRED))}"


def test_bfloat16_numpy_dtype_is_ml_dtypes_once_asked_for() -> None:
    out = _run(
        "import sys, ignis\n"
        "assert 'ml_dtypes' not in sys.modules\n"
        "d = ignis.bfloat16.numpy\n"
        "import ml_dtypes, numpy as np\n"
        "assert d == np.dtype(ml_dtypes.bfloat16)\n"
        "assert ignis.bfloat16.itemsize == 2 and ignis.bfloat16.numpy is d\n"
        "print(ignis.asarray([1.0, 2.5], dtype='bfloat16', device='cpu').to_host().dtype)\n"
    )
    assert out.strip() == "bfloat16"


def test_an_ml_dtypes_array_imported_after_ignis_is_recognised() -> None:
    # The user imports ml_dtypes after ignis and hands over its dtype before ignis ever needed
    # bfloat16: the lookup by NumPy dtype must still find ignis.bfloat16.
    out = _run(
        "import ignis\n"
        "import ml_dtypes, numpy as np\n"
        "x = np.array([1.5, -2.0, 3.25], dtype=ml_dtypes.bfloat16)\n"
        "from ignis._dtypes import as_dtype\n"
        "assert as_dtype(x.dtype) is ignis.bfloat16\n"
        "assert as_dtype(ml_dtypes.bfloat16) is ignis.bfloat16\n"
        "a = ignis.asarray(x, device='cpu')\n"
        "print(a.dtype, (a * 2).to_host().astype(np.float64).tolist())\n"
    )
    assert out.strip() == "bfloat16 [3.0, -4.0, 6.5]"


def test_bfloat16_weights_save_and_load_in_a_process_that_never_imported_ml_dtypes(
    tmp_path,
) -> None:
    path = tmp_path / "w.safetensors"
    npz = tmp_path / "w.npz"
    out = _run(
        "import numpy as np, ignis, ignis_autograd as ag\n"
        "from ignis_autograd import nn\n"
        "lin = nn.Linear(3, 2, dtype='bfloat16', device='cpu')\n"
        f"for p in ({str(path)!r}, {str(npz)!r}):\n"
        "    nn.save(lin, p)\n"
        "    back = nn.load(p, device='cpu')\n"
        "    w = back['weight']\n"
        "    assert w.dtype == ignis.bfloat16, w.dtype\n"
        "    assert np.array_equal(w.to_host().view(np.uint16),\n"
        "                          lin.weight.data.to_host().view(np.uint16))\n"
        "print('ok')\n"
    )
    assert out.strip() == "ok"
