"""Argument errors of the memory entry points come before device errors: a bad size is a
TypeError/ValueError naming the call, what was given and what was expected, on any machine
(no GPU needed; the checks run before the driver is asked)."""

from __future__ import annotations

import numpy as np
import pytest

import ignis
from ignis import _bindings

# (call, exception, message pattern): every public entry point that takes a size or a shape.
BAD_SIZES = [
    (
        lambda: ignis.alloc(-1),
        ValueError,
        r"^alloc: nbytes must be >= 0, got -1; expected a size in bytes$",
    ),
    (
        lambda: ignis.alloc("10"),
        TypeError,
        r"^alloc: nbytes must be an int, got str '10'; expected a size in bytes >= 0$",
    ),
    (
        lambda: ignis.alloc(True),
        TypeError,
        r"^alloc: nbytes must be an int, got bool True; expected a size",
    ),
    (
        lambda: ignis.alloc(4.0),
        TypeError,
        r"^alloc: nbytes must be an int, got float 4.0; expected a size",
    ),
    (
        lambda: ignis.alloc(np.int64(-8)),
        ValueError,
        r"^alloc: nbytes must be >= 0, got -8; expected a size in bytes$",
    ),
    (
        lambda: ignis.alloc(16, device="tpu"),
        ValueError,
        r"^alloc: invalid device 'tpu'; expected one of 'cuda'",
    ),
    (lambda: ignis.alloc(16, device="cpu"), ValueError, r"^alloc: 'cpu' is not a CUDA device"),
    (
        lambda: ignis.alloc(16, device=1.5),
        TypeError,
        r"^alloc: expected one of 'cuda'.*got 1.5 of type float$",
    ),
    (
        lambda: ignis.alloc(16, stream="s"),
        TypeError,
        r"^alloc: stream must be an ignis.Stream or None, got str$",
    ),
    (
        lambda: ignis.PinnedBuffer(-1),
        ValueError,
        r"^PinnedBuffer: nbytes must be >= 0, got -1; expected a size",
    ),
    (
        lambda: ignis.PinnedBuffer("1"),
        TypeError,
        r"^PinnedBuffer: nbytes must be an int, got str '1'; expected",
    ),
    (
        lambda: ignis.PinnedBuffer(8, device="gpu:x"),
        ValueError,
        r"^PinnedBuffer: invalid device 'gpu:x'",
    ),
    (
        lambda: ignis.pinned_empty(-1),
        ignis.ShapeError,
        r"^pinned_empty: negative dimension in shape -1$",
    ),
    (
        lambda: ignis.pinned_empty((2, -3)),
        ignis.ShapeError,
        r"^pinned_empty: negative dimension in shape \(2, -3\)$",
    ),
    (
        lambda: ignis.pinned_empty("a"),
        ignis.ShapeError,
        r"^pinned_empty: shape must be an int or a sequence of ints, got 'a'$",
    ),
    (
        lambda: ignis.pinned_empty(4, "nope"),
        TypeError,
        r"^pinned_empty: dtype must be a NumPy dtype .*got 'nope'$",
    ),
    (
        lambda: ignis.memcpy(bytearray(4), b"abcd", -1),
        ValueError,
        r"^memcpy: nbytes must be >= 0, got -1; expected a size in bytes$",
    ),
    (
        lambda: ignis.memcpy(bytearray(4), b"abcd", "4"),
        TypeError,
        r"^memcpy: nbytes must be an int, got str '4'; expected",
    ),
    (
        lambda: ignis.memcpy(bytearray(4), b"abcd", 5),
        ValueError,
        r"^memcpy: copying 5 bytes but the destination holds only 4$",
    ),
    (lambda: ignis.memset(b"x", 0), TypeError, r"^memset: expected a Buffer, got bytes$"),
    (
        lambda: ignis.AsyncMemoryResource(0, cache_bytes=-1),
        ValueError,
        r"^AsyncMemoryResource: cache_bytes must be >= 0, got -1; expected",
    ),
    (
        lambda: ignis.AsyncMemoryResource(0, release_threshold="x"),
        TypeError,
        r"^AsyncMemoryResource: release_threshold must be an int",
    ),
    # Array creation on a CUDA device: the shape is checked first.
    (
        lambda: ignis.empty((-1,), device="cuda:0"),
        ignis.ShapeError,
        r"^empty: negative dimension in shape \(-1,\)$",
    ),
    (
        lambda: ignis.zeros(-2, device="cuda:0"),
        ignis.ShapeError,
        r"^zeros: negative dimension in shape -2$",
    ),
    (
        lambda: ignis.ones((2, "3"), device="cuda:0"),
        ignis.ShapeError,
        r"^ones: shape must be an int or a sequence of ints",
    ),
    (
        lambda: ignis.full((-1,), 2.0, device="cuda:0"),
        ignis.ShapeError,
        r"^full: negative dimension",
    ),
    (
        lambda: ignis.full((2,), "x", device="cuda:0"),
        TypeError,
        r"^full: ",
    ),
    (
        lambda: ignis.full((2,), 300, dtype="int8", device="cuda:0"),
        (OverflowError, ValueError),
        r"^full: ",
    ),
    (
        lambda: ignis.empty(2.5, device="cuda:0"),
        ignis.ShapeError,
        r"^empty: shape must be an int or a sequence of ints, got 2.5$",
    ),
    (
        lambda: ignis.empty(3, dtype="nope", device="cuda:0"),
        ignis.DTypeError,
        r"^empty: unsupported dtype 'nope'",
    ),
    (
        lambda: ignis.empty(3, device="cuda:x"),
        ValueError,
        r"^invalid device 'cuda:x'; expected one of 'cpu'",
    ),
    (
        lambda: ignis.random.randn(-1, device="cuda:0"),
        ignis.ShapeError,
        r"^randn: negative dimension",
    ),
    (
        lambda: ignis.arange(0, 4, 0, device="cuda:0"),
        ValueError,
        r"^arange: step must not be zero$",
    ),
]


@pytest.fixture(params=["no GPU", "this machine"])
def machine(request, monkeypatch):
    """Each case runs as if there were no GPU (the seam says so), and as this machine is."""
    if request.param == "no GPU":
        monkeypatch.setattr(
            _bindings, "_init_state", {"done": True, "ok": False, "reason": "no GPU (test)"}
        )
    return request.param


@pytest.mark.parametrize("call, error, pattern", BAD_SIZES)
def test_argument_errors_come_first(machine, call, error, pattern):
    with pytest.raises(error, match=pattern) as info:
        call()
    assert not isinstance(info.value, ignis.NoDeviceError)


@pytest.mark.parametrize(
    "call",
    [
        lambda: ignis.alloc(16),
        lambda: ignis.alloc(np.int64(16), device="cuda:0"),
        lambda: ignis.PinnedBuffer(16),
        lambda: ignis.pinned_empty((2, 3), "float32"),
        pytest.param(
            lambda: ignis.empty((2,), device="cuda:0"),
            # Where a GPU exists the array backend of cuda:0 is already made, so the stand-in
            # "no GPU" state of the seam cannot reach it.
            marks=pytest.mark.skipif(
                ignis.is_available(), reason="simulates a machine without a GPU"
            ),
        ),
    ],
)
def test_good_arguments_without_a_gpu_are_a_no_device_error(monkeypatch, call):
    monkeypatch.setattr(
        _bindings, "_init_state", {"done": True, "ok": False, "reason": "no GPU (test)"}
    )
    with pytest.raises(ignis.NoDeviceError, match="no GPU \\(test\\)"):
        call()


def test_host_to_host_memcpy_needs_no_gpu():
    dst = bytearray(4)
    ignis.memcpy(dst, b"abcd", 3)
    assert bytes(dst) == b"abc\0"
