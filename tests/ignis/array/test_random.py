"""ignis.random: Philox-4x32-10 known answers, the documented stream layout, reproducibility."""

from __future__ import annotations

import numpy as np
import pytest
from ignis._array import random as rnd

import ignis
from ignis import _dtypes as dt

# Random123's kat_vectors for philox4x32 with 10 rounds: counter, key, expected output.
KAT = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF, 0xFFFFFFFF), (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    (
        (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
        (0xA4093822, 0x299F31D0),
        (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
    ),
]


@pytest.mark.parametrize("counter,key,expected", KAT)
def test_philox_known_answers(counter, key, expected) -> None:
    out = rnd.philox4x32(np.array([counter], np.uint32), key)
    assert out.dtype == np.uint32
    assert tuple(int(v) for v in out[0]) == expected


def test_stream_layout_words() -> None:
    seed = 0x0123456789ABCDEF
    key = (seed & 0xFFFFFFFF, seed >> 32)
    words = rnd._words(seed, 5, 10)
    blocks = [rnd.philox4x32(np.array([[b, 0, 0, 0]], np.uint32), key)[0] for b in (5, 6, 7)]
    np.testing.assert_array_equal(words, np.concatenate(blocks)[:10])
    high = rnd._words(7, 2**32 + 1, 4)  # the block number's high half goes to counter word 1
    np.testing.assert_array_equal(
        high, rnd.philox4x32(np.array([[1, 1, 0, 0]], np.uint32), (7, 0))[0]
    )


def test_uniform_float32_follows_the_documented_formula(device: str) -> None:
    g = ignis.random.Generator(42)
    x = g.rand(3, 5, device=device)
    w = rnd._words(42, 0, 15)
    np.testing.assert_array_equal(
        x.to_host().reshape(-1), ((w >> 8).astype(np.float64) * 2.0**-24).astype(np.float32)
    )
    assert g.offset == 4  # ceil(15 / 4) blocks
    y = g.rand(2, device=device)
    np.testing.assert_array_equal(
        y.to_host(), ((rnd._words(42, 4, 2) >> 8) * 2.0**-24).astype(np.float32)
    )


def test_float64_uniform_and_integers_formulas(device: str) -> None:
    g = ignis.random.Generator(9)
    x = g.rand(3, dtype="float64", device=device).to_host()
    w = rnd._words(9, 0, 6)
    u = (((w[0::2] >> 5) << 26) + (w[1::2] >> 6)).astype(np.float64) * 2.0**-53
    np.testing.assert_array_equal(x, u)
    g2 = ignis.random.Generator(9)
    k = g2.randint(-5, 7, shape=(6,), device=device).to_host()
    np.testing.assert_array_equal(k, ((w * np.uint64(12)) >> np.uint64(32)).astype(np.int64) - 5)
    g3 = ignis.random.Generator(9)
    big = g3.randint(-(2**62), 2**62, shape=(3,), device=device).to_host()
    x64 = (w[0::2] << np.uint64(32)) | w[1::2]
    np.testing.assert_array_equal(big, (x64 % np.uint64(2**63)).astype(np.int64) - 2**62)


def test_normal_box_muller_formula(device: str) -> None:
    z = ignis.random.Generator(3).randn(5, device=device).to_host()
    w = rnd._words(3, 0, 6)
    u1 = ((w[0::2] >> 8).astype(np.float64) + 1) * 2.0**-24
    u2 = (w[1::2] >> 8).astype(np.float64) * 2.0**-24
    r = np.sqrt(-2 * np.log(u1))
    ref = np.stack([r * np.cos(2 * np.pi * u2), r * np.sin(2 * np.pi * u2)], -1).reshape(-1)[:5]
    np.testing.assert_array_equal(z, ref.astype(np.float32))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_reproducible_and_continuing(device: str, dtype: str) -> None:
    a = ignis.random.Generator(123).rand(1000, dtype=dtype, device=device).to_host()
    b = ignis.random.Generator(123).rand(1000, dtype=dtype, device=device).to_host()
    np.testing.assert_array_equal(a, b)
    # calls that use whole blocks (multiples of 4 words) continue one stream exactly
    g = ignis.random.Generator(123)
    words = 2 if dtype == "float64" else 1
    parts = [g.rand(400 // words, dtype=dtype, device=device).to_host() for _ in range(2)]
    np.testing.assert_array_equal(np.concatenate(parts), a[: 800 // words])
    c = ignis.random.Generator(124).rand(1000, dtype=dtype, device=device).to_host()
    assert (a != c).mean() > 0.9
    # the cpu reference of a device call is the same stream; normal values go through
    # log/sin/cos, whose last bit may differ between the device and NumPy (a few ulp at most)
    g = ignis.random.Generator(5)
    n1 = g.randn(64, dtype=dtype, device=device).to_host().astype(np.float64)
    ref = rnd.generate_host("normal", (64,), dt.as_dtype(dtype), 5, 0, {}).astype(np.float64)
    eps = float(np.finfo(np.float64).eps) if dtype == "float64" else 0.0
    np.testing.assert_allclose(n1, ref, rtol=4 * eps, atol=0)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_distributions(device: str, dtype: str) -> None:
    g = ignis.random.Generator(2024)
    u = g.rand(200_000, dtype=dtype, device=device).to_host().astype(np.float64)
    assert u.min() >= 0.0 and u.max() < 1.0
    assert abs(u.mean() - 0.5) < 0.01 and abs(u.var() - 1 / 12) < 0.01
    z = g.randn(200_000, dtype=dtype, device=device).to_host().astype(np.float64)
    assert abs(z.mean()) < 0.02 and abs(z.std() - 1) < 0.02
    assert np.isfinite(z).all()


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int32", "int64"])
def test_randint_range_and_coverage(device: str, dtype: str) -> None:
    low, high = (0, 7) if dtype == "uint8" else (-3, 4)
    k = ignis.random.Generator(1).randint(low, high, shape=(50_000,), dtype=dtype, device=device)
    assert k.dtype == dtype
    h = k.to_host()
    assert h.min() == low and h.max() == high - 1
    counts = np.bincount(h.astype(np.int64) - low)
    assert counts.min() > 50_000 / 7 * 0.9
    full = (
        ignis.random.Generator(1)
        .randint(-128, 128, shape=(10_000,), dtype="int8", device=device)
        .to_host()
    )
    assert full.min() == -128 and full.max() == 127
    whole = ignis.random.Generator(1).randint(-(2**63), 2**63, shape=(8,), device=device)
    assert whole.dtype == "int64"


def test_module_level_default_generator(device: str) -> None:
    ignis.random.seed(77)
    a = ignis.random.rand(4, device=device).to_host()
    state = ignis.random.get_state()
    b = ignis.random.rand(4, device=device).to_host()
    ignis.random.set_state(state)
    np.testing.assert_array_equal(ignis.random.rand(4, device=device).to_host(), b)
    ignis.random.seed(77)
    np.testing.assert_array_equal(ignis.random.rand((4,), device=device).to_host(), a)
    assert ignis.random.randn(2, 3, device=device).shape == (2, 3)
    assert ignis.random.randint(5, shape=(3,), device=device).to_host().max() < 5
    assert ignis.random.rand(0, device=device).shape == (0,)
    import ignis.random as imported  # the submodule is importable by name too

    assert imported is ignis.random


def test_random_errors() -> None:
    g = ignis.random.Generator(0)
    with pytest.raises(ignis.DTypeError, match="rand: dtype must be floating, got int32"):
        g.rand(3, dtype="int32")
    with pytest.raises(ignis.DTypeError, match="randint: dtype must be an integer type"):
        g.randint(0, 3, dtype="float32")
    with pytest.raises(ValueError, match=r"randint: high \(3\) must be greater than low \(3\)"):
        g.randint(3, 3)
    with pytest.raises(ValueError, match=r"randint: \[0, 300\) does not fit uint8"):
        g.randint(0, 300, dtype="uint8")
    with pytest.raises(ValueError, match="seed must be in"):
        ignis.random.Generator(-1)
    with pytest.raises(ignis.ShapeError, match="rand:"):
        g.rand(-2)
    with pytest.raises(
        ignis.ShapeError, match="philox4x32: counter must have a last axis of 4 words"
    ):
        rnd.philox4x32(np.zeros((2, 3), np.uint32), (0, 0))
