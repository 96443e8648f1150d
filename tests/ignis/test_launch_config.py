"""LaunchConfig normalisation and validation against device limits (no GPU needed)."""

from __future__ import annotations

import dataclasses
import math
import random
import types

import numpy as np
import pytest
from ignis._launch_config import DEFAULT_SHARED_MEMORY_PER_BLOCK, LaunchConfig, grid_for

from ignis import LaunchError

# An H100/H200-like device.
LIMITS = {
    "max_threads_per_block": 1024,
    "max_block_dim": (1024, 1024, 64),
    "max_grid_dim": (2**31 - 1, 65535, 65535),
    "max_shared_memory_per_block": 48 * 1024,
    "max_shared_memory_per_block_optin": 227 * 1024,
    "cooperative_launch": True,
    "multiprocessor_count": 132,
}


# --- construction -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("grid", "block", "want_grid", "want_block"),
    [
        (1, 1, (1, 1, 1), (1, 1, 1)),
        (7, 256, (7, 1, 1), (256, 1, 1)),
        ((7,), (32,), (7, 1, 1), (32, 1, 1)),
        ((7, 3), (32, 8), (7, 3, 1), (32, 8, 1)),
        ((7, 3, 2), (8, 8, 4), (7, 3, 2), (8, 8, 4)),
        ([5, 6], [16, 16], (5, 6, 1), (16, 16, 1)),
        (np.int64(9), np.int32(128), (9, 1, 1), (128, 1, 1)),
        ((np.uint32(2), np.int16(3)), (np.uint64(64),), (2, 3, 1), (64, 1, 1)),
        (0, 1, (0, 1, 1), (1, 1, 1)),  # accepted here; validate() refuses it
    ],
)
def test_dims_are_normalised_to_int_triples(grid, block, want_grid, want_block):
    cfg = LaunchConfig(grid, block)
    assert cfg.grid == want_grid and cfg.block == want_block
    assert all(type(v) is int for v in cfg.grid + cfg.block)


def test_defaults_properties_and_repr():
    cfg = LaunchConfig((4, 2, 3), (32, 4, 2), shared_mem=np.int64(1024), cooperative=np.bool_(True))
    assert cfg.shared_mem == 1024 and type(cfg.shared_mem) is int
    assert cfg.cooperative is True
    assert cfg.threads_per_block == 256
    assert cfg.num_blocks == 24
    assert not cfg.is_empty
    assert LaunchConfig((4, 0), 1).is_empty and LaunchConfig(1, (1, 0)).is_empty
    assert repr(LaunchConfig(2, 3)) == (
        "LaunchConfig(grid=(2, 1, 1), block=(3, 1, 1), shared_mem=0, cooperative=False)"
    )


def test_frozen_hashable_and_name_not_compared():
    a = LaunchConfig(4, 128, name="k1")
    b = LaunchConfig((4, 1, 1), (128, 1), name="k2")
    assert a == b and hash(a) == hash(b)
    assert a != LaunchConfig(4, 128, shared_mem=16)
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.grid = (1, 1, 1)  # type: ignore[misc]


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"grid": 2.0, "block": 1}, "grid must be an int, got float 2.0; pass int(x)"),
        ({"grid": np.float32(2), "block": 1}, "grid must be an int, got float32"),
        ({"grid": True, "block": 1}, "grid must be an int, got bool True"),
        ({"grid": 1, "block": np.bool_(True)}, "block must be an int, got bool"),
        ({"grid": -1, "block": 1}, "grid must be >= 0, got -1"),
        ({"grid": (2, -3), "block": 1}, "grid.y must be >= 0, got -3"),
        ({"grid": 1, "block": (32, 2.5)}, "block.y must be an int, got float 2.5"),
        (
            {"grid": (), "block": 1},
            "grid must be an int or a tuple of 1 to 3 ints, got a tuple of length 0",
        ),
        ({"grid": (1, 2, 3, 4), "block": 1}, "got a tuple of length 4: (1, 2, 3, 4)"),
        ({"grid": "4", "block": 1}, "grid must be an int, got str '4'"),
        ({"grid": None, "block": 1}, "grid must be an int, got NoneType None"),
        ({"grid": 1, "block": 1, "shared_mem": -8}, "shared_mem must be >= 0, got -8"),
        ({"grid": 1, "block": 1, "shared_mem": 1.0}, "shared_mem must be an int, got float 1.0"),
        ({"grid": 1, "block": 1, "shared_mem": False}, "shared_mem must be an int, got bool False"),
        ({"grid": 1, "block": 1, "cooperative": 1}, "cooperative must be a bool, got int 1"),
    ],
)
def test_construction_refuses_bad_values(kwargs, fragment):
    with pytest.raises(LaunchError) as info:
        LaunchConfig(**kwargs)
    assert fragment in str(info.value)
    assert str(info.value).startswith("LaunchConfig: ")


def test_construction_error_names_the_kernel_when_given():
    with pytest.raises(LaunchError, match=r"^launch of 'saxpy': grid must be an int, got float"):
        LaunchConfig(1.5, 256, name="saxpy")


# --- validation ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("grid", "block"),
    [
        (1, 1),
        (2**31 - 1, 1024),
        ((1, 65535, 65535), (1, 1, 64)),
        ((100, 100), (32, 32)),
        (1, (1, 1024)),
        (1, (16, 1, 64)),
    ],
)
def test_valid_configurations_pass(grid, block):
    assert LaunchConfig(grid, block).validate(LIMITS, name="k") is False


@pytest.mark.parametrize(
    ("grid", "block", "message"),
    [
        (
            1,
            2048,
            "launch of 'saxpy': block (2048, 1, 1) has 2048 threads; this device allows at most "
            "1024 per block",
        ),
        (
            1,
            (64, 32),
            "launch of 'saxpy': block (64, 32, 1) has 2048 threads; this device allows at most "
            "1024 per block",
        ),
        (
            1,
            (1, 1, 128),
            "launch of 'saxpy': block (1, 1, 128) has 128 threads along z; this device allows at "
            "most 64 (max block dimensions (1024, 1024, 64))",
        ),
        (
            (1, 65536),
            1,
            "launch of 'saxpy': grid (1, 65536, 1) has 65536 blocks along y; this device allows "
            "at most 65535 (max grid dimensions (2147483647, 65535, 65535))",
        ),
        (
            2**31,
            1,
            "launch of 'saxpy': grid (2147483648, 1, 1) has 2147483648 blocks along x",
        ),
        (
            (4, 0),
            256,
            "launch of 'saxpy': grid (4, 0, 1) has a zero dimension, so there is no work to "
            "launch; skip the launch when the problem is empty",
        ),
        (
            4,
            (256, 0),
            "launch of 'saxpy': block (256, 0, 1) has a zero dimension; every block dimension "
            "must be at least 1",
        ),
    ],
)
def test_limit_violations_are_named(grid, block, message):
    with pytest.raises(LaunchError) as info:
        LaunchConfig(grid, block).validate(LIMITS, name="saxpy")
    assert message in str(info.value)


def test_name_defaults_to_the_construction_name_then_kernel():
    with pytest.raises(LaunchError, match=r"^launch of 'gemm': block"):
        LaunchConfig(1, 4096, name="gemm").validate(LIMITS)
    with pytest.raises(LaunchError, match=r"^launch of 'kernel': block"):
        LaunchConfig(1, 4096).validate(LIMITS)
    with pytest.raises(LaunchError, match=r"^launch of 'other': block"):
        LaunchConfig(1, 4096, name="gemm").validate(LIMITS, name="other")


def test_kernel_thread_limit_from_argument_or_limits_mapping():
    cfg = LaunchConfig(1, 512)
    assert cfg.validate(LIMITS, kernel_max_threads_per_block=512) is False
    expected = (
        "launch of 'k': block (512, 1, 1) has 512 threads; this kernel allows at most 256 per "
        "block (its register use or __launch_bounds__ limit it)"
    )
    with pytest.raises(LaunchError) as info:
        cfg.validate(LIMITS, name="k", kernel_max_threads_per_block=256)
    assert expected in str(info.value)
    with pytest.raises(LaunchError) as info:
        cfg.validate({**LIMITS, "kernel_max_threads_per_block": 256}, name="k")
    assert expected in str(info.value)
    # The keyword overrides the mapping.
    assert (
        cfg.validate(
            {**LIMITS, "kernel_max_threads_per_block": 256}, kernel_max_threads_per_block=1024
        )
        is False
    )


@pytest.mark.parametrize(
    ("dynamic", "static", "needs_optin"),
    [
        (0, 0, False),
        (48 * 1024, 0, False),
        (48 * 1024 + 1, 0, True),
        (40 * 1024, 8 * 1024, False),
        (40 * 1024, 8 * 1024 + 1, True),
        (227 * 1024, 0, True),
        (200 * 1024, 27 * 1024, True),
    ],
)
def test_shared_memory_budget_and_optin(dynamic, static, needs_optin):
    cfg = LaunchConfig(1, 128, shared_mem=dynamic)
    assert cfg.validate(LIMITS, kernel_static_shared_bytes=static) is needs_optin
    assert cfg.validate({**LIMITS, "kernel_static_shared_bytes": static}) is needs_optin


def test_shared_memory_beyond_optin_limit():
    with pytest.raises(LaunchError) as info:
        LaunchConfig(1, 128, shared_mem=227 * 1024 + 1).validate(LIMITS, name="tile")
    assert str(info.value) == (
        "launch of 'tile': shared_mem=232449 bytes makes 232449 bytes of shared memory per "
        "block; this device allows at most 232448 (227 KiB) per block with opt-in (49152 without)"
    )
    with pytest.raises(LaunchError) as info:
        LaunchConfig(1, 128, shared_mem=200 * 1024).validate(
            LIMITS, name="tile", kernel_static_shared_bytes=30 * 1024
        )
    assert (
        "shared_mem=204800 bytes plus 30720 bytes of static __shared__ memory makes 235520"
        in str(info.value)
    )


def test_shared_memory_without_optin_information():
    limits = {k: v for k, v in LIMITS.items() if not k.startswith("max_shared")}
    assert LaunchConfig(1, 1, shared_mem=DEFAULT_SHARED_MEMORY_PER_BLOCK).validate(limits) is False
    with pytest.raises(LaunchError) as info:
        LaunchConfig(1, 1, shared_mem=DEFAULT_SHARED_MEMORY_PER_BLOCK + 1).validate(
            limits, name="k"
        )
    assert (
        "makes 49153 bytes of shared memory per block; this device allows at most 49152 (48 KiB)"
        in str(info.value)
    )
    assert "opt-in" not in str(info.value)


def test_cooperative_launch_checks():
    cfg = LaunchConfig(264, 256, cooperative=True)
    assert cfg.validate(LIMITS) is False
    assert cfg.validate(LIMITS, max_active_blocks_per_multiprocessor=2) is False
    with pytest.raises(LaunchError) as info:
        LaunchConfig(265, 256, cooperative=True).validate(
            LIMITS, name="reduce", max_active_blocks_per_multiprocessor=2
        )
    assert str(info.value) == (
        "launch of 'reduce': cooperative grid (265, 1, 1) has 265 blocks; at most 264 can be "
        "resident at once (2 per multiprocessor x 132 multiprocessors), which a cooperative "
        "launch requires"
    )
    with pytest.raises(
        LaunchError, match="cooperative launch requested; this device does not support it"
    ):
        cfg.validate({**LIMITS, "cooperative_launch": False}, name="reduce")
    # A non-cooperative launch ignores the occupancy bound.
    assert (
        LaunchConfig(10**6, 256).validate(LIMITS, max_active_blocks_per_multiprocessor=2) is False
    )


def test_limits_may_be_an_object_with_attributes():
    limits = types.SimpleNamespace(**LIMITS)
    assert LaunchConfig(8, 256).validate(limits) is False
    with pytest.raises(LaunchError, match="has 2048 threads; this device allows at most 1024"):
        LaunchConfig(8, 2048).validate(limits)


def test_missing_limit_is_reported():
    limits = {k: v for k, v in LIMITS.items() if k != "max_grid_dim"}
    with pytest.raises(
        LaunchError, match="LaunchConfig.validate: the device limits lack 'max_grid_dim'"
    ):
        LaunchConfig(1, 1).validate(limits)


def test_random_configurations_agree_with_a_direct_check():
    rng = random.Random(1234)
    for _ in range(500):
        block = tuple(rng.choice([1, 2, 8, 32, 64, 128, 256, 1024, 2048]) for _ in range(3))
        grid = tuple(rng.choice([1, 7, 65535, 65536, 2**31 - 1]) for _ in range(3))
        ok = (
            math.prod(block) <= 1024
            and all(b <= m for b, m in zip(block, LIMITS["max_block_dim"], strict=True))
            and all(g <= m for g, m in zip(grid, LIMITS["max_grid_dim"], strict=True))
        )
        cfg = LaunchConfig(grid, block)
        if ok:
            assert cfg.validate(LIMITS) is False
        else:
            with pytest.raises(LaunchError):
                cfg.validate(LIMITS)


# --- grid_for -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "block", "kwargs", "expected"),
    [
        (0, 256, {}, 0),
        (1, 256, {}, 1),
        (255, 256, {}, 1),
        (256, 256, {}, 1),
        (257, 256, {}, 2),
        (1000, 256, {}, 4),
        (10**9, 256, {}, 3906250),
        (10**9, 1000, {}, 10**6),
        (2**40, 1, {}, 2**31 - 1),
        (10**9, 256, {"multiprocessor_count": 132}, 132 * 32),
        (10**9, 256, {"multiprocessor_count": 132, "blocks_per_multiprocessor": 4}, 528),
        (1000, 256, {"multiprocessor_count": 132}, 4),
        (10**6, 128, {"multiprocessor_count": 0}, 1),
        (np.int64(513), np.int32(256), {}, 3),
    ],
)
def test_grid_for(n, block, kwargs, expected):
    got = grid_for(n, block, **kwargs)
    assert got == expected and type(got) is int


def test_grid_for_matches_ceil_division_on_random_sizes():
    rng = random.Random(7)
    for _ in range(1000):
        n = rng.randrange(0, 10**12)
        block = rng.choice([1, 32, 64, 100, 128, 256, 512, 1000, 1024])
        assert grid_for(n, block) == min(
            math.ceil(n / block) if n < 2**52 else -(-n // block), 2**31 - 1
        )
        assert grid_for(n, block) * block >= min(n, (2**31 - 1) * block)


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        ((10, 0), "grid_for: block must be at least 1 thread, got 0"),
        ((10.0, 256), "grid_for: n must be an int, got float 10.0; pass int(x)"),
        ((-1, 256), "grid_for: n must be >= 0, got -1"),
        ((10, True), "grid_for: block must be an int, got bool True"),
    ],
)
def test_grid_for_refuses_bad_input(args, fragment):
    with pytest.raises(LaunchError) as info:
        grid_for(*args)
    assert fragment in str(info.value)
