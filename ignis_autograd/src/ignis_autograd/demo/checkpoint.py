"""The demo's checkpoint: weights, optimizer and schedule state, RNG state, vocabulary.

A checkpoint directory holds three files:

* ``checkpoint.safetensors`` -- the model's ``state_dict()`` (a plain weight file:
  ``ignis_autograd.nn.load`` reads it back, and so does any safetensors reader);
* ``optimizer.safetensors`` -- the arrays of the optimizer's ``state_dict()`` (moments, master
  weights), named by their path in that dict (``state.3.exp_avg``);
* ``checkpoint.json`` -- everything else: ``format``/``version``, ``step``, ``config``,
  ``vocab`` (the characters, in id order), ``text`` (source and digest), ``rng`` (``(seed,
  offset)`` of the batch generator and of the dropout stream), ``optimizer`` (its state dict
  with every array replaced by ``{"__tensor__": name}``), ``scheduler``, ``history`` (loss
  curves) and the SHA-256 of the two array files.

Example::

    >>> save_checkpoint("out", model_state=model.state_dict(), optimizer_state=opt.state_dict(),
    ...                 meta={"step": 100, ...}, save_tensors=nn.save)
    >>> ck = load_checkpoint("out", load_tensors=lambda p: nn.load(p, device="cpu"))
    >>> ck.meta["step"]
    100

Every file is written under a temporary name and renamed into place, the JSON last; the
digests let a load detect a save that was interrupted between two renames.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ignis import NvArray

from ..tensor import Tensor
from .data import DemoError

__all__ = [
    "Checkpoint",
    "save_checkpoint",
    "load_checkpoint",
    "checkpoint_exists",
    "encode_tree",
    "decode_tree",
    "META_FILE",
    "WEIGHTS_FILE",
    "OPTIMIZER_FILE",
    "FORMAT",
    "VERSION",
]

META_FILE = "checkpoint.json"
WEIGHTS_FILE = "checkpoint.safetensors"
OPTIMIZER_FILE = "optimizer.safetensors"
FORMAT = "ignis-demo-checkpoint"
VERSION = 1

SaveTensors = Callable[[dict[str, Any], str], Any]
LoadTensors = Callable[[str], dict[str, Any]]


@dataclass
class Checkpoint:
    """A loaded checkpoint: ``meta`` (the JSON), ``model_state`` (name -> array as loaded) and
    ``optimizer_state`` (the optimizer's state dict with its arrays restored)."""

    meta: dict[str, Any]
    model_state: dict[str, Any]
    optimizer_state: Any


def _is_array(x: Any) -> bool:
    return isinstance(x, (NvArray, Tensor, np.ndarray))


def encode_tree(tree: Any, prefix: str = "") -> tuple[Any, dict[str, Any]]:
    """``(json_tree, arrays)``: ``tree`` (dicts, lists, tuples, scalars, arrays) as JSON-ready
    values, with each array moved to ``arrays`` under its dotted path and replaced by
    ``{"__tensor__": path}``. Tuples and dicts with non-string keys are tagged so
    :func:`decode_tree` gives back the same types (JSON alone would make them lists and
    string keys)."""
    arrays: dict[str, Any] = {}

    def enc(x: Any, path: str) -> Any:
        if _is_array(x):
            if isinstance(x, np.ndarray) and x.ndim == 0:
                return enc(x.item(), path)
            arrays[path] = x.data if isinstance(x, Tensor) else x
            return {"__tensor__": path}
        if isinstance(x, dict):
            if all(isinstance(k, str) for k in x):
                return {k: enc(v, f"{path}.{k}" if path else k) for k, v in x.items()}
            return {
                "__items__": [
                    [enc(k, f"{path}.key{i}"), enc(v, f"{path}.{k}" if path else str(k))]
                    for i, (k, v) in enumerate(x.items())
                ]
            }
        if isinstance(x, tuple):
            return {"__tuple__": [enc(v, f"{path}.{i}") for i, v in enumerate(x)]}
        if isinstance(x, list):
            return [enc(v, f"{path}.{i}") for i, v in enumerate(x)]
        if isinstance(x, np.generic):
            return x.item()
        if x is None or isinstance(x, (bool, int, float, str)):
            return x
        raise DemoError(f"checkpoint: cannot store a {type(x).__name__} at {path or 'the top'}")

    return enc(tree, prefix), arrays


def decode_tree(tree: Any, arrays: dict[str, Any]) -> Any:
    """The inverse of :func:`encode_tree`, taking the arrays from ``arrays``."""
    if isinstance(tree, list):
        return [decode_tree(v, arrays) for v in tree]
    if isinstance(tree, dict):
        if set(tree) == {"__tensor__"}:
            name = tree["__tensor__"]
            if name not in arrays:
                raise DemoError(f"checkpoint: the array {name!r} is missing from {OPTIMIZER_FILE}")
            return arrays[name]
        if set(tree) == {"__tuple__"}:
            return tuple(decode_tree(v, arrays) for v in tree["__tuple__"])
        if set(tree) == {"__items__"}:
            return {decode_tree(k, arrays): decode_tree(v, arrays) for k, v in tree["__items__"]}
        return {k: decode_tree(v, arrays) for k, v in tree.items()}
    return tree


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def checkpoint_exists(out_dir: str) -> bool:
    return os.path.isfile(os.path.join(out_dir, META_FILE))


def save_checkpoint(
    out_dir: str,
    *,
    model_state: dict[str, Any],
    optimizer_state: Any,
    meta: dict[str, Any],
    save_tensors: SaveTensors,
) -> None:
    """Write the three checkpoint files into ``out_dir`` (created if needed).

    ``save_tensors(arrays, path)`` writes a name -> array dict as safetensors
    (``ignis_autograd.nn.save``). ``meta`` must be JSON-ready apart from tuples/arrays, which
    are encoded as described in the module notes.
    """
    os.makedirs(out_dir, exist_ok=True)
    opt_tree, opt_arrays = encode_tree(optimizer_state)
    doc, stray = encode_tree(meta)
    if stray:
        raise DemoError(f"checkpoint: arrays in the metadata: {sorted(stray)}")
    doc = {"format": FORMAT, "version": VERSION, **doc, "optimizer": opt_tree}
    final = {
        WEIGHTS_FILE: os.path.join(out_dir, WEIGHTS_FILE),
        OPTIMIZER_FILE: os.path.join(out_dir, OPTIMIZER_FILE),
        META_FILE: os.path.join(out_dir, META_FILE),
    }
    tmp = {k: v + ".tmp" for k, v in final.items()}
    save_tensors(dict(model_state), tmp[WEIGHTS_FILE])
    save_tensors(opt_arrays, tmp[OPTIMIZER_FILE])
    doc["digests"] = {name: _sha256(tmp[name]) for name in (WEIGHTS_FILE, OPTIMIZER_FILE)}
    with open(tmp[META_FILE], "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    # The JSON goes last: it names the digests of the files that belong to it.
    for name in (WEIGHTS_FILE, OPTIMIZER_FILE, META_FILE):
        os.replace(tmp[name], final[name])


def load_checkpoint(out_dir: str, *, load_tensors: LoadTensors) -> Checkpoint:
    """Read a checkpoint written by :func:`save_checkpoint`.

    ``load_tensors(path)`` reads a safetensors file into a name -> array dict
    (``ignis_autograd.nn.load``). Raises :class:`DemoError` when a file is missing, of another
    format or version, or does not match the digests recorded in the JSON.
    """
    meta_path = os.path.join(out_dir, META_FILE)
    if not os.path.isfile(meta_path):
        raise DemoError(
            f"--resume: no checkpoint in {out_dir} ({META_FILE} not found); run once without "
            "--resume to create one, or give its directory with --out"
        )
    try:
        with open(meta_path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, json.JSONDecodeError) as exc:
        raise DemoError(f"--resume: cannot read {meta_path}: {exc}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise DemoError(f"--resume: {meta_path} is not an ignis demo checkpoint")
    if doc.get("version") != VERSION:
        raise DemoError(
            f"--resume: {meta_path} has checkpoint version {doc.get('version')}, this demo "
            f"reads version {VERSION}"
        )
    digests = doc.pop("digests", {})
    paths = {name: os.path.join(out_dir, name) for name in (WEIGHTS_FILE, OPTIMIZER_FILE)}
    for name, path in paths.items():
        if not os.path.isfile(path):
            raise DemoError(f"--resume: {path} is missing (the checkpoint is incomplete)")
        if name in digests and _sha256(path) != digests[name]:
            raise DemoError(
                f"--resume: {path} does not match {META_FILE} (was a save interrupted?)"
            )
    model_state = load_tensors(paths[WEIGHTS_FILE])
    opt_arrays = load_tensors(paths[OPTIMIZER_FILE])
    opt_tree = doc.pop("optimizer", None)
    meta = decode_tree(doc, {})
    return Checkpoint(meta, dict(model_state), decode_tree(opt_tree, dict(opt_arrays)))
