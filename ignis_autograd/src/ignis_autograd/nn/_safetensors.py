"""The safetensors file format: read and write, in pure Python and NumPy.

Layout: an 8-byte little-endian unsigned header length ``N``; ``N`` bytes of UTF-8 JSON
mapping each tensor name to ``{"dtype", "shape", "data_offsets": [begin, end]}`` (byte offsets
into the data that follows) plus an optional ``"__metadata__"`` of string to string; then the
raw little-endian, row-major tensor bytes. The header is padded with spaces to a multiple of 8
so every tensor starts 8-byte aligned.
"""

from __future__ import annotations

import json
import math
import os
import struct
from collections.abc import Mapping
from typing import Any

import numpy as np

import ignis
from ignis import DTypeError

# safetensors dtype code -> little-endian NumPy dtype.
CODES: dict[str, np.dtype | None] = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "BF16": None,  # ignis.bfloat16.numpy, read on first use: ml_dtypes is slow to import
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "I8": np.dtype("i1"),
    "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}
_BY_NUMPY = {v: k for k, v in CODES.items() if v is not None}


def numpy_dtype(code: str) -> np.dtype:
    """The NumPy dtype of a safetensors dtype code (``code`` must be one of :data:`CODES`)."""
    found = CODES[code]
    return ignis.bfloat16.numpy if found is None else found


# A header larger than this is not a weight file (the reference implementation's limit).
_MAX_HEADER = 100 * 1024 * 1024


def code_of(arr: np.ndarray, name: str, path: Any) -> str:
    code = _BY_NUMPY.get(arr.dtype.newbyteorder("<") if arr.dtype.byteorder == ">" else arr.dtype)
    if code is None and arr.dtype.name == "bfloat16":  # ml_dtypes' (not imported before)
        code = "BF16"
    if code is None:
        raise DTypeError(
            f"save: tensor '{name}' has dtype {arr.dtype}, which {os.fspath(path)!r} cannot "
            f"store (supported: {', '.join(CODES)})"
        )
    return code


def write(path: Any, arrays: Mapping[str, np.ndarray], metadata: Mapping[str, str] | None) -> None:
    """Write host ``arrays`` (contiguous in any order) and string ``metadata`` to ``path``."""
    header: dict[str, Any] = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    offset = 0
    blobs = []
    for name, arr in arrays.items():
        if name == "__metadata__":
            raise ValueError("save: '__metadata__' is reserved and cannot name a tensor")
        code = code_of(arr, name, path)
        data = np.ascontiguousarray(arr).astype(numpy_dtype(code), copy=False).tobytes()
        header[name] = {
            "dtype": code,
            "shape": list(arr.shape),
            "data_offsets": [offset, offset + len(data)],
        }
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    tmp = f"{os.fspath(path)}.tmp{os.getpid()}"
    # Written beside the target and renamed: a crash never leaves a half-written weight file.
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)
    os.replace(tmp, path)


def _bad(path: Any, why: str) -> ValueError:
    return ValueError(f"load: {os.fspath(path)!r} is not a valid safetensors file: {why}")


def read(path: Any) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """``({name: host array}, metadata)`` from the safetensors file at ``path``."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise _bad(path, f"{len(raw)} bytes, shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", raw[:8])
    if n > _MAX_HEADER or 8 + n > len(raw):
        raise _bad(path, f"header length {n} does not fit the file of {len(raw)} bytes")
    try:
        header = json.loads(raw[8 : 8 + n].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _bad(path, f"header is not JSON ({exc})") from None
    if not isinstance(header, dict):
        raise _bad(path, "header is not a JSON object")
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
    ):
        raise _bad(path, "__metadata__ must map strings to strings")
    data = memoryview(raw)[8 + n :]
    out: dict[str, np.ndarray] = {}
    for name, entry in header.items():
        out[name] = _tensor(path, name, entry, data)
    return out, metadata


def _tensor(path: Any, name: str, entry: Any, data: memoryview) -> np.ndarray:
    if not isinstance(entry, dict) or not {"dtype", "shape", "data_offsets"} <= entry.keys():
        raise _bad(path, f"entry '{name}' lacks dtype/shape/data_offsets")
    code = entry["dtype"]
    if code not in CODES:
        raise DTypeError(
            f"load: tensor '{name}' in {os.fspath(path)!r} has dtype {code!r}, which ignis does "
            f"not support (supported: {', '.join(CODES)})"
        )
    shape = entry["shape"]
    if not isinstance(shape, list) or not all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
    ):
        raise _bad(path, f"entry '{name}' has shape {shape!r}")
    offsets = entry["data_offsets"]
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
    ):
        raise _bad(path, f"entry '{name}' has data_offsets {offsets!r}")
    begin, end = offsets
    dtype = numpy_dtype(code)
    want = math.prod(shape) * dtype.itemsize
    if not 0 <= begin <= end <= len(data) or end - begin != want:
        raise _bad(
            path,
            f"entry '{name}' ({code}, shape {tuple(shape)}: {want} bytes) has data_offsets "
            f"[{begin}, {end}] in a data section of {len(data)} bytes",
        )
    arr = np.frombuffer(data[begin:end], dtype=dtype).reshape(shape)
    return arr.astype(dtype.newbyteorder("="), copy=True)
