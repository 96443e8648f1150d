"""Weights in NumPy's ``.npz`` format.

NumPy has no bfloat16: such arrays are stored as their uint16 bit patterns, and a JSON entry
``__ignis__`` records which names to view back as bfloat16 together with the metadata, so the
file still opens with plain ``numpy.load`` (without pickles).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

import ignis
from ignis import DTypeError

_KEY = "__ignis__"
_ALLOWED = {np.dtype(t) for t in ("f8", "f4", "f2", "i8", "i4", "i1", "u1", "?")}


def write(path: Any, arrays: Mapping[str, np.ndarray], metadata: Mapping[str, str] | None) -> None:
    stored: dict[str, np.ndarray] = {}
    bf16 = []
    for name, arr in arrays.items():
        if name == _KEY:
            raise ValueError(f"save: '{_KEY}' is reserved and cannot name a tensor")
        if arr.dtype.name == "bfloat16":  # ml_dtypes' bfloat16
            stored[name] = np.ascontiguousarray(arr).view(np.uint16)
            bf16.append(name)
        elif arr.dtype in _ALLOWED:
            stored[name] = arr
        else:
            raise DTypeError(
                f"save: tensor '{name}' has dtype {arr.dtype}, which .npz files of "
                "ignis cannot store"
            )
    info = {"bfloat16": bf16, "metadata": {str(k): str(v) for k, v in (metadata or {}).items()}}
    stored[_KEY] = np.array(json.dumps(info))
    tmp = f"{os.fspath(path)}.tmp{os.getpid()}.npz"
    np.savez(tmp, **stored)
    os.replace(tmp, path)


def read(path: Any) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    out: dict[str, np.ndarray] = {}
    with np.load(path, allow_pickle=False) as z:
        info = json.loads(str(z[_KEY])) if _KEY in z.files else {}
        bf16 = set(info.get("bfloat16", ()))
        for name in z.files:
            if name == _KEY:
                continue
            arr = z[name]
            if name in bf16:
                arr = arr.view(ignis.bfloat16.numpy)
            elif arr.dtype not in _ALLOWED:
                raise DTypeError(
                    f"load: array '{name}' in {os.fspath(path)!r} has dtype {arr.dtype}, which "
                    "ignis does not support"
                )
            out[name] = arr
    return out, dict(info.get("metadata", {}))
