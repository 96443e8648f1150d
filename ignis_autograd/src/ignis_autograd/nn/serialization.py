"""Save and load weights: safetensors files (default) or NumPy ``.npz`` (path ends in .npz).

Both formats hold named arrays of dtype float64/32/16, bfloat16, int64/32/8, uint8 and bool,
plus string metadata. The safetensors reader and writer are this package's own; the files
interoperate with the ``safetensors`` library and the PyTorch/Hugging Face ecosystem.

Example::

    >>> from ignis_autograd import nn
    >>> model = nn.GPT(vocab_size=256, context=64, dim=64, n_layers=2, n_heads=4)
    >>> nn.save(model, "gpt.safetensors", metadata={"step": "1000"})
    >>> model.load_state_dict(nn.load("gpt.safetensors", device="cuda:0"))
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import numpy as np
from ignis._dtypes import as_dtype

from ignis import NvArray

from ..tensor import Tensor
from . import _npz, _safetensors
from .module import Module

__all__ = ["save", "load", "load_metadata"]


def _format(path: Any) -> Any:
    return _npz if os.fspath(path).lower().endswith(".npz") else _safetensors


def _host(value: Any, name: str) -> np.ndarray:
    if isinstance(value, Tensor):
        value = value.data
    if isinstance(value, NvArray):
        return value.to_host()
    if isinstance(value, np.ndarray):
        return value
    raise TypeError(
        f"save: '{name}' is a {type(value).__name__}; expected an NvArray, Tensor or NumPy array"
    )


def save(
    module_or_state_dict: Module | Mapping[str, Any],
    path: str | os.PathLike,
    metadata: Mapping[str, str] | None = None,
) -> None:
    """Write a module's :meth:`~Module.state_dict` (or a mapping of name to array) to ``path``.

    The format follows the suffix: ``.npz`` for NumPy, anything else safetensors. ``metadata``
    is a small mapping of strings (step, configuration, ...). Device arrays are copied to the
    host first. The file is written beside ``path`` and renamed, so it is never half-written.
    """
    if isinstance(module_or_state_dict, Module):
        state: Mapping[str, Any] = module_or_state_dict.state_dict()
    elif isinstance(module_or_state_dict, Mapping):
        state = module_or_state_dict
    else:
        raise TypeError(
            f"save: expected a Module or a mapping of name to array, got "
            f"{type(module_or_state_dict).__name__}"
        )
    arrays = OrderedDict()
    for name, value in state.items():
        if not isinstance(name, str):
            raise TypeError(f"save: names must be strings, got {name!r}")
        arrays[name] = _host(value, name)
    _format(path).write(path, arrays, metadata)


def load(path: str | os.PathLike, device: Any = None) -> OrderedDict[str, NvArray]:
    """The arrays of the weight file at ``path`` as ``{name: NvArray}`` on ``device``
    (default: the default device), in file order; feed it to :meth:`Module.load_state_dict`.

    Raises DTypeError for a dtype ignis does not support and ValueError for a corrupt file.
    """
    arrays, _ = _format(path).read(path)
    out: OrderedDict[str, NvArray] = OrderedDict()
    for name, arr in arrays.items():
        out[name] = NvArray.from_host(arr, dtype=as_dtype(arr.dtype, "load"), device=device)
    return out


def load_metadata(path: str | os.PathLike) -> dict[str, str]:
    """The string metadata stored with :func:`save` (empty when there is none)."""
    return _format(path).read(path)[1]
