"""The one list of device spellings: each spelling works in every parser of a device argument
(device=, NvArray.to, set_default_device, IGNIS_DEVICE, ignis.Device), and an unknown one is an
error that quotes exactly that list. No GPU needed."""

from __future__ import annotations

import re

import pytest
from ignis._array import _device
from ignis._array._device import DEVICE_SPELLINGS, as_device, expected_devices

import ignis
from ignis import _bindings

SPELLINGS = [spelling for spelling, _, _ in DEVICE_SPELLINGS]


def test_the_list():
    # Changing what ignis accepts is a decision: it changes this test, the README and every
    # message together. "gpu" stays as an alias because ignis has always accepted it.
    assert SPELLINGS == ["cpu", "cuda", "cuda:N", "gpu", "gpu:N", "N", "ignis.Device"]
    assert {kind for _, kind, _ in DEVICE_SPELLINGS} == {"cpu", "cuda"}


def _examples(spelling: str) -> list[tuple[object, str]]:
    """(argument, the ArrayDevice it names) for one spelling of the list."""
    if spelling == "N":
        return [(0, "cuda:0"), (3, "cuda:3")]
    if spelling == "ignis.Device":
        fake = object.__new__(ignis.Device)  # a Device object without a GPU (never used as one)
        fake.ordinal = 2
        return [(fake, "cuda:2")]
    if spelling.endswith(":N"):
        prefix = spelling[:-1]
        return [
            (f"{prefix}0", "cuda:0"),
            (f"{prefix}12", "cuda:12"),
            (f" {prefix.upper()}1 ", "cuda:1"),
        ]
    expected = "cpu" if spelling == "cpu" else "cuda:0"
    return [(spelling, expected), (spelling.upper(), expected), (f" {spelling}\t", expected)]


CASES = [(s, arg, want) for s in SPELLINGS for arg, want in _examples(s)]
BAD = ["tpu", "cuda:", "cuda:-1", "cuda:x", "cuda:1.0", "gpu:", "cuda0", "cuda:²", "", "cpu:0", -1]


@pytest.fixture
def clean_default(monkeypatch):
    monkeypatch.delenv("IGNIS_DEVICE", raising=False)
    ignis.set_default_device(None)
    yield monkeypatch
    ignis.set_default_device(None)


@pytest.mark.parametrize("spelling, arg, want", CASES)
def test_each_spelling_names_its_device(spelling, arg, want, clean_default):
    assert as_device(arg) == want
    ignis.set_default_device(arg)
    assert ignis.get_default_device() == want
    ignis.set_default_device(None)
    if isinstance(arg, str):
        clean_default.setenv("IGNIS_DEVICE", arg)
        assert ignis.get_default_device() == want


@pytest.mark.parametrize("spelling, arg, want", [c for c in CASES if c[2] == "cpu"])
def test_cpu_spellings_in_device_arguments_and_to(spelling, arg, want):
    a = ignis.zeros(2, device=arg)
    assert a.device == "cpu"
    assert a.to(arg).device == "cpu"
    assert ignis.from_host([1.0], device=arg).device == "cpu"


@pytest.mark.parametrize("spelling, arg, want", [c for c in CASES if c[2] != "cpu"])
def test_cuda_spellings_reach_the_device_without_a_gpu(spelling, arg, want, monkeypatch):
    # The spelling is accepted: what stops these calls is the missing GPU, not the argument.
    if ignis.is_available():
        pytest.skip("checks the no-GPU error (a GPU's devices and backends are already built)")
    monkeypatch.setattr(
        _bindings, "_init_state", {"done": True, "ok": False, "reason": "no GPU (test)"}
    )
    a = ignis.zeros(2, device="cpu")
    for call in (lambda: ignis.zeros(2, device=arg), lambda: a.to(arg)):
        with pytest.raises(ignis.NoDeviceError):
            call()
    if not isinstance(arg, ignis.Device):
        with pytest.raises(ignis.NoDeviceError):
            ignis.Device(arg)


def _quoted_list(message: str) -> str:
    return message.split("expected ", 1)[1]


@pytest.mark.parametrize("bad", BAD)
def test_an_unknown_spelling_lists_exactly_the_list(bad, clean_default):
    a = ignis.zeros(2, device="cpu")
    calls = [
        lambda: as_device(bad),
        lambda: ignis.set_default_device(bad),
        lambda: ignis.zeros(2, device=bad),
        lambda: a.to(bad),
    ]
    for call in calls:
        with pytest.raises(ValueError) as info:
            call()
        assert re.search(rf"invalid device {re.escape(repr(bad))}", str(info.value))
        assert _quoted_list(str(info.value)) == expected_devices()
    if isinstance(bad, str) and bad:
        clean_default.setenv("IGNIS_DEVICE", bad)
        with pytest.raises(
            ValueError, match=f"^IGNIS_DEVICE: invalid device {re.escape(repr(bad))}"
        ):
            ignis.get_default_device()


@pytest.mark.parametrize("bad", BAD)
def test_an_unknown_spelling_for_ignis_device_lists_the_cuda_ones(bad):
    with pytest.raises(ValueError) as info:
        ignis.Device(bad)
    message = str(info.value)
    assert message.startswith("Device: ")
    assert _quoted_list(message) == expected_devices("cuda")


def test_the_quoted_list_is_built_from_the_table():
    text = expected_devices()
    for spelling, _, meaning in DEVICE_SPELLINGS:
        shown = spelling if spelling in ("N", "ignis.Device") else repr(spelling)
        assert f"{shown} ({meaning})" in text
    cuda_only = expected_devices("cuda")
    assert "'cpu'" not in cuda_only and "'cuda:N'" in cuda_only and "'gpu'" in cuda_only


def test_cpu_is_not_a_cuda_device():
    with pytest.raises(ValueError, match="^Device: 'cpu' is not a CUDA device; expected one of"):
        ignis.Device("cpu")


def test_non_strings():
    with pytest.raises(ValueError, match="invalid device True"):
        as_device(True)
    with pytest.raises(TypeError, match="^Device: expected one of .*got 1.5 of type float$"):
        ignis.Device(1.5)  # type: ignore[arg-type]
    import numpy as np

    assert as_device(np.int64(1)) == "cuda:1"  # NumPy integers are ints too
    assert _device.parse_device_spec("GPU:7") == ("cuda", 7)
