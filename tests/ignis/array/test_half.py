"""ignis.half: bit-exact float32 <-> float16/bfloat16 conversion with integer arithmetic."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from ignis import half

ALL16 = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)


def bits32(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, np.float32).view(np.uint32)


def test_float16_to_float32_is_exact_for_all_65536_patterns() -> None:
    ours = half.float16_bits_to_float32(ALL16)
    ref = ALL16.view(np.float16).astype(np.float32)
    finite = ~np.isnan(ref)
    np.testing.assert_array_equal(bits32(ours)[finite], bits32(ref)[finite])
    # NaN patterns stay NaN with the payload moved up unchanged (exact widening)
    nan = ~finite
    assert np.isnan(ours[nan]).all()
    np.testing.assert_array_equal(bits32(ours)[nan] >> 13 & 0x3FF, ALL16[nan] & 0x3FF)
    np.testing.assert_array_equal(bits32(ours)[nan] >> 31, ALL16[nan] >> 15)


def test_bfloat16_to_float32_is_exact_for_all_65536_patterns() -> None:
    ours = half.bfloat16_bits_to_float32(ALL16)
    ref = ALL16.view(ml_dtypes.bfloat16).astype(np.float32)
    np.testing.assert_array_equal(bits32(ours), bits32(ref).astype(np.uint32))
    np.testing.assert_array_equal(bits32(ours) >> 16, ALL16)


def _edge_float32() -> np.ndarray:
    f16 = ALL16.view(np.float16)
    finite = f16[np.isfinite(f16)].astype(np.float64)
    with np.errstate(all="ignore"):
        nxt = np.nextafter(f16[np.isfinite(f16)], np.float16(np.inf)).astype(np.float64)
    mid = ((finite + nxt) / 2).astype(np.float32)  # exact ties of float16 rounding
    bf = ALL16.view(ml_dtypes.bfloat16).astype(np.float32)
    bf = bf[np.isfinite(bf)]
    bf_mid = (bf.view(np.uint32) + np.uint32(0x8000)).view(np.float32)  # bfloat16 ties
    specials = np.array(
        [
            0.0,
            -0.0,
            np.inf,
            -np.inf,
            65504.0,
            65519.99,
            65520.0,
            6e-8,
            2.98e-8,
            2.9802322e-08,
            1e-45,
            -1e-45,
            1.17549435e-38,
            3.4028235e38,
            -3.4028235e38,
        ],
        np.float32,
    )
    parts = [mid, bf, bf_mid, specials, finite.astype(np.float32)]
    for p in (mid, bf_mid):
        parts += [np.nextafter(p, np.float32(np.inf)), np.nextafter(p, np.float32(-np.inf))]
    return np.concatenate(parts)


def _random_float32(n: int) -> np.ndarray:
    rng = np.random.default_rng(7)
    raw = rng.integers(0, 1 << 32, size=n, dtype=np.uint64).astype(np.uint32).view(np.float32)
    scaled = (rng.standard_normal(n) * np.exp2(rng.uniform(-30, 20, n))).astype(np.float32)
    return np.concatenate([raw, scaled])


@pytest.mark.parametrize("source", ["edges", "random"])
def test_float32_to_float16_matches_numpy_bit_for_bit(source: str) -> None:
    x = _edge_float32() if source == "edges" else _random_float32(1_000_000)
    ours = half.float32_to_float16_bits(x)
    with np.errstate(all="ignore"):
        ref = x.astype(np.float16).view(np.uint16)
    keep = ~np.isnan(x)
    mismatch = np.flatnonzero(ours[keep] != ref[keep])
    assert mismatch.size == 0, [
        (hex(bits32(x[keep][i])), hex(ours[keep][i]), hex(ref[keep][i])) for i in mismatch[:5]
    ]


@pytest.mark.parametrize("source", ["edges", "random"])
def test_float32_to_bfloat16_matches_ml_dtypes_bit_for_bit(source: str) -> None:
    x = _edge_float32() if source == "edges" else _random_float32(1_000_000)
    ours = half.float32_to_bfloat16_bits(x)
    with np.errstate(all="ignore"):
        ref = x.astype(ml_dtypes.bfloat16).view(np.uint16)
    keep = ~np.isnan(x)
    np.testing.assert_array_equal(ours[keep], ref[keep])


def test_nan_stays_nan_quiet_with_sign_and_top_payload() -> None:
    rng = np.random.default_rng(3)
    payload = rng.integers(1, 1 << 23, size=10_000, dtype=np.uint32)
    sign = rng.integers(0, 2, size=10_000, dtype=np.uint32) << 31
    x = (sign | np.uint32(0x7F800000) | payload).view(np.float32)
    assert np.isnan(x).all()
    h = half.float32_to_float16_bits(x)
    assert np.isnan(half.float16_bits_to_float32(h)).all()
    np.testing.assert_array_equal(h >> 15, sign >> 31)
    np.testing.assert_array_equal(h & 0x7E00, 0x7E00)  # exponent all ones and quiet bit set
    np.testing.assert_array_equal(h & 0x1FF, (payload >> 13) & 0x1FF)
    b = half.float32_to_bfloat16_bits(x)
    assert np.isnan(half.bfloat16_bits_to_float32(b)).all()
    np.testing.assert_array_equal(b >> 15, sign >> 31)
    np.testing.assert_array_equal(b & 0x7FC0, 0x7FC0)


def test_rounding_examples_and_subnormals() -> None:
    cases = {
        1.0: 0x3C00,
        -2.0: 0xC000,
        65504.0: 0x7BFF,
        65520.0: 0x7C00,
        65519.0: 0x7BFF,
        2.0**-24: 0x0001,
        2.0**-25: 0x0000,
        1.5 * 2.0**-25: 0x0001,
        2.0**-14: 0x0400,
        1.0 + 2.0**-11: 0x3C00,
        1.0 + 3 * 2.0**-11: 0x3C02,
        float("inf"): 0x7C00,
    }
    for value, bits in cases.items():
        assert int(half.float32_to_float16_bits(np.float32(value))) == bits, value
    assert int(half.float32_to_bfloat16_bits(np.float32(1.0 + 2.0**-8))) == 0x3F80  # tie to even
    assert int(half.float32_to_bfloat16_bits(np.float32(1.0 + 3 * 2.0**-8))) == 0x3F82
    assert int(half.float32_to_bfloat16_bits(np.float32(3.4028235e38))) == 0x7F80  # rounds to inf


def test_shapes_and_generic_helpers() -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
    for name in ("float16", "bfloat16"):
        bits = half.to_bits(x, name)
        assert bits.shape == (3, 4) and bits.dtype == np.uint16
        back = half.from_bits(bits, name)
        assert back.shape == (3, 4) and back.dtype == np.float32
        np.testing.assert_allclose(back, x, rtol=1e-2)
    assert half.float32_to_float16_bits(np.float32(1.0)).shape == ()
    with pytest.raises(
        ValueError, match="to_bits: dtype must be 'float16' or 'bfloat16', got 'float32'"
    ):
        half.to_bits(x, "float32")
    with pytest.raises(ValueError, match="from_bits"):
        half.from_bits(x, "int8")
