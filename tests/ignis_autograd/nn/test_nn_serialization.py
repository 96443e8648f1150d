"""Weight files: safetensors (own reader/writer, checked against the byte layout and, where
installed, the safetensors library) and .npz."""

from __future__ import annotations

import json
import struct

import ml_dtypes
import numpy as np
import pytest

import ignis
import ignis_autograd as ag
from ignis import DTypeError
from ignis_autograd import nn

BF16 = np.dtype(ml_dtypes.bfloat16)


def _arrays():
    rng = np.random.default_rng(0)
    return {
        "f64": rng.standard_normal((3, 5)),
        "f32": rng.standard_normal((1000,)).astype(np.float32),
        "f16": (rng.standard_normal((2, 3, 4)) * 100).astype(np.float16),
        "bf16": rng.standard_normal((7, 33)).astype(BF16),
        "i64": rng.integers(-(2**62), 2**62, size=(4,)),
        "i32": rng.integers(-(2**31), 2**31 - 1, size=(2, 2), dtype=np.int32),
        "i8": rng.integers(-128, 127, size=(5,), dtype=np.int8),
        "u8": rng.integers(0, 255, size=(31,), dtype=np.uint8),
        "bool": rng.random((3, 3)) > 0.5,
        "scalar": np.array(2.5, dtype=np.float32),
        "empty": np.zeros((0, 4), dtype=np.float32),
        "special": np.array([np.nan, np.inf, -np.inf, -0.0], dtype=np.float32),
    }


@pytest.mark.parametrize("suffix", [".safetensors", ".npz", ".bin"])
def test_round_trip_every_dtype(tmp_path, device, suffix):
    host = _arrays()
    state = {
        k: ignis.asarray(v, dtype=ignis._dtypes.as_dtype(v.dtype, "t"), device=device)
        for k, v in host.items()
    }
    path = tmp_path / f"w{suffix}"
    nn.save(state, path, metadata={"step": 12, "name": "tiny"})
    loaded = nn.load(path, device=device)
    assert list(loaded) == list(host)
    for k, v in host.items():
        got = loaded[k]
        assert isinstance(got, ignis.NvArray) and got.dtype.numpy == v.dtype, k
        assert got.shape == v.shape
        np.testing.assert_array_equal(  # bit for bit (NaN, -0.0 included)
            got.to_host().reshape(-1).view(np.uint8), v.reshape(-1).view(np.uint8), err_msg=k
        )
    assert nn.load_metadata(path) == {"step": "12", "name": "tiny"}
    assert not list(tmp_path.glob("*.tmp*"))


def test_safetensors_byte_layout(tmp_path):
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.array([1.0, -2.0], dtype=BF16)
    path = tmp_path / "x.safetensors"
    nn.save(
        {"a": a, "b": ag.Tensor(ignis.asarray(b, dtype="bfloat16"))},
        path,
        metadata={"format": "pt"},
    )
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    assert (8 + n) % 8 == 0  # data starts aligned
    header = json.loads(raw[8 : 8 + n])
    assert header == {
        "__metadata__": {"format": "pt"},
        "a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
        "b": {"dtype": "BF16", "shape": [2], "data_offsets": [24, 28]},
    }
    data = raw[8 + n :]
    assert data[:24] == struct.pack("<6f", *range(6))
    assert data[24:28] == struct.pack("<2H", 0x3F80, 0xC000)  # bf16 bits of 1.0 and -2.0
    assert len(data) == 28


def _write_raw(path, header: dict, data: bytes, pad: bool = True) -> None:
    text = json.dumps(header).encode()
    if pad:
        text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)


def test_load_hand_built_file(tmp_path):
    path = tmp_path / "hand.safetensors"
    header = {
        "w": {"dtype": "F64", "shape": [2], "data_offsets": [0, 16]},
        "n": {"dtype": "I32", "shape": [3], "data_offsets": [16, 28]},
        "f": {"dtype": "BOOL", "shape": [], "data_offsets": [28, 29]},
        "__metadata__": {"k": "v"},
    }
    _write_raw(path, header, struct.pack("<2d3iB", 1.5, -3.25, 7, -8, 9, 1), pad=False)
    loaded = nn.load(path)
    np.testing.assert_array_equal(loaded["w"].to_host(), [1.5, -3.25])
    assert loaded["n"].dtype == ignis.int32
    np.testing.assert_array_equal(loaded["n"].to_host(), [7, -8, 9])
    assert loaded["f"].shape == () and loaded["f"].item() is True
    assert nn.load_metadata(path) == {"k": "v"}


def test_bad_files(tmp_path):
    path = tmp_path / "bad.safetensors"
    _write_raw(path, {"x": {"dtype": "C64", "shape": [1], "data_offsets": [0, 8]}}, bytes(8))
    with pytest.raises(DTypeError, match=r"tensor 'x' .* has dtype 'C64'.*supported: F64"):
        nn.load(path)
    _write_raw(path, {"x": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, bytes(8))
    with pytest.raises(ValueError, match=r"entry 'x' \(F32, shape \(3,\): 12 bytes\)"):
        nn.load(path)
    _write_raw(path, {"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, bytes(8))
    with pytest.raises(ValueError, match="data section of 8 bytes"):
        nn.load(path)
    _write_raw(path, {"x": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}, bytes(4))
    with pytest.raises(ValueError, match="has shape"):
        nn.load(path)
    path.write_bytes(struct.pack("<Q", 1000) + b"{}")
    with pytest.raises(ValueError, match="header length 1000 does not fit"):
        nn.load(path)
    path.write_bytes(b"abc")
    with pytest.raises(ValueError, match="shorter than the 8-byte header length"):
        nn.load(path)
    path.write_bytes(struct.pack("<Q", 4) + b"{x:1")
    with pytest.raises(ValueError, match="header is not JSON"):
        nn.load(path)


def test_save_errors(tmp_path):
    with pytest.raises(DTypeError, match="save: tensor 'c' has dtype complex64"):
        nn.save({"c": np.zeros(2, dtype=np.complex64)}, tmp_path / "c.safetensors")
    with pytest.raises(DTypeError, match="save: tensor 'c' has dtype complex64"):
        nn.save({"c": np.zeros(2, dtype=np.complex64)}, tmp_path / "c.npz")
    with pytest.raises(TypeError, match="save: 'x' is a list"):
        nn.save({"x": [1, 2]}, tmp_path / "x.safetensors")
    with pytest.raises(TypeError, match="save: expected a Module or a mapping"):
        nn.save([1], tmp_path / "x.safetensors")
    with pytest.raises(ValueError, match="'__metadata__' is reserved"):
        nn.save({"__metadata__": np.zeros(1)}, tmp_path / "x.safetensors")
    assert not list(tmp_path.iterdir())


def test_npz_is_plain_numpy(tmp_path):
    path = tmp_path / "w.npz"
    b = np.array([0.5, 3.0], dtype=BF16)
    nn.save({"b": b, "f": np.ones(3, np.float32)}, path)
    with np.load(path, allow_pickle=False) as z:
        assert z["b"].dtype == np.uint16
        np.testing.assert_array_equal(z["b"], b.view(np.uint16))
        np.testing.assert_array_equal(z["f"], np.ones(3))
    # an .npz written by NumPy itself loads too
    np.savez(tmp_path / "plain.npz", w=np.arange(4.0))
    np.testing.assert_array_equal(nn.load(tmp_path / "plain.npz")["w"].to_host(), np.arange(4.0))
    np.savez(tmp_path / "odd.npz", s=np.array(["text"]))
    with pytest.raises(DTypeError, match="array 's' .* has dtype <U4"):
        nn.load(tmp_path / "odd.npz")


@pytest.mark.parametrize("suffix", [".safetensors", ".npz"])
def test_module_round_trip(tmp_path, device, suffix):
    ignis.random.seed(1)
    model = nn.GPT(11, 8, 16, 1, 2, device=device, dtype="bfloat16")
    path = tmp_path / f"gpt{suffix}"
    nn.save(model, path)
    ignis.random.seed(2)
    other = nn.GPT(11, 8, 16, 1, 2, device=device, dtype="bfloat16")
    ids = ignis.asarray([[1, 2, 3, 10]], device=device)
    assert not np.array_equal(model(ids).to_host(), other(ids).to_host())
    other.load_state_dict(nn.load(path, device=device))
    np.testing.assert_array_equal(model(ids).to_host(), other(ids).to_host())
    assert list(nn.load(path)) == list(model.state_dict())


def test_interop_with_safetensors_library(tmp_path):
    st_torch = pytest.importorskip("safetensors.torch")
    import torch

    ours = tmp_path / "ours.safetensors"
    host = {k: v for k, v in _arrays().items() if k != "special"}
    nn.save(host, ours, metadata={"a": "b"})
    back = st_torch.load_file(str(ours))
    for k, v in host.items():
        t = back[k]
        got = t.view(torch.int16).numpy().view(BF16) if v.dtype == BF16 else t.numpy()
        np.testing.assert_array_equal(got, v, err_msg=k)
    theirs = tmp_path / "theirs.safetensors"
    tensors = {"w": torch.randn(3, 4, dtype=torch.bfloat16), "i": torch.arange(5)}
    st_torch.save_file(tensors, str(theirs), metadata={"x": "y"})
    loaded = nn.load(theirs)
    np.testing.assert_array_equal(
        loaded["w"].to_host().view(np.uint16),
        tensors["w"].view(torch.int16).numpy().view(np.uint16),
    )
    np.testing.assert_array_equal(loaded["i"].to_host(), np.arange(5))
    assert nn.load_metadata(theirs) == {"x": "y"}
