"""Device: capability detection, no-GPU behaviour, configuration advice."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from ignis_autograd.device import estimate_architecture

import ignis
from ignis_autograd import Device, DeviceProperties


@pytest.fixture(autouse=True)
def fresh_cache() -> Iterator[None]:
    Device.reset()
    yield
    Device.reset()


def fake(i: int, cc: str, gb: int = 80) -> DeviceProperties:
    total = gb * 1024**3
    return DeviceProperties(
        id=i,
        name=f"Fake GPU {i}",
        compute_capability=cc,
        total_memory_bytes=total,
        total_memory_mb=total // 2**20,
        total_memory_gb=float(gb),
        sm_count=100,
        max_threads_per_block=1024,
        max_threads_per_sm=2048,
        warp_size=32,
        clock_rate_mhz=1500,
        memory_clock_mhz=2600,
        l2_cache_size=50 * 2**20,
        shared_mem_per_block=49152,
    )


def use_devices(monkeypatch: pytest.MonkeyPatch, devices: list[DeviceProperties]) -> None:
    monkeypatch.setattr(Device, "_enumerate", staticmethod(lambda: list(devices)))
    Device.reset()


def test_no_gpu_reports_no_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ignis, "device_count", lambda: 0)
    assert Device.all_devices() == []
    assert Device.count() == 0
    assert "GPU devices (0)" in Device.summary() and "none" in Device.summary()
    assert Device.multi_gpu_config() == {"multi_gpu": False, "device_ids": [], "strategy": "none"}
    with pytest.raises(ignis.NoDeviceError, match="no GPU 0; this machine has 0"):
        Device.properties(0)
    with pytest.raises(ignis.NoDeviceError):
        Device.free_memory()
    with pytest.raises(ignis.NoDeviceError):
        Device.recommend_config(1_000_000)
    # planning for a device that is not here still works
    assert Device.recommend_config(1_000_000, total_memory_bytes=16 * 2**30)["batch_size"] >= 1


def test_on_this_machine_it_never_fails() -> None:
    devices = Device.all_devices()
    assert Device.count() == len(devices) == ignis.device_count()
    assert Device.summary().startswith(f"GPU devices ({len(devices)})")


def test_cached_until_reset(monkeypatch: pytest.MonkeyPatch) -> None:
    use_devices(monkeypatch, [fake(0, "9.0")])
    assert Device.count() == 1
    monkeypatch.setattr(
        Device, "_enumerate", staticmethod(lambda: [fake(0, "9.0"), fake(1, "9.0")])
    )
    assert Device.count() == 1
    Device.reset()
    assert Device.count() == 2


def test_properties_and_summary(monkeypatch: pytest.MonkeyPatch) -> None:
    use_devices(monkeypatch, [fake(0, "9.0", 141), fake(1, "8.0", 40)])
    assert Device.properties(1).compute_capability == "8.0"
    assert Device.total_memory(0) == 141 * 1024**3
    summary = Device.summary()
    assert "[0] Fake GPU 0 | 141.0 GB | CC 9.0 | 100 SMs" in summary and "[1]" in summary
    with pytest.raises(ignis.NoDeviceError, match="no GPU 5"):
        Device.properties(5)


def test_multi_gpu_config(monkeypatch: pytest.MonkeyPatch) -> None:
    use_devices(monkeypatch, [fake(0, "9.0")])
    assert Device.multi_gpu_config() == {
        "multi_gpu": False,
        "device_ids": [0],
        "strategy": "single",
    }
    use_devices(monkeypatch, [fake(i, "9.0") for i in range(4)])
    assert Device.multi_gpu_config() == {
        "multi_gpu": True,
        "device_ids": [0, 1, 2, 3],
        "strategy": "data_parallel",
    }
    use_devices(
        monkeypatch,
        [fake(0, "8.6"), fake(1, "9.0"), fake(2, "9.0"), fake(3, "8.6"), fake(4, "9.0")],
    )
    cfg = Device.multi_gpu_config()
    assert cfg["device_ids"] == [1, 2, 4] and cfg["multi_gpu"] and "9.0" in cfg["warning"]
    use_devices(monkeypatch, [fake(0, "8.6"), fake(1, "9.0")])  # a tie: the newer capability
    cfg = Device.multi_gpu_config()
    assert cfg["device_ids"] == [1] and not cfg["multi_gpu"] and cfg["strategy"] == "single"


def test_estimate_architecture() -> None:
    # 12 * layers * hidden^2 ~= params, hidden ~= 100 * layers: more than one layer (unlike the
    # original estimate), within a factor of two of known models.
    hidden, layers = estimate_architecture(7_000_000_000)
    assert 16 <= layers <= 64 and 2048 <= hidden <= 8192
    hidden, layers = estimate_architecture(85_000_000)  # GPT-2 small without embeddings: 768 x 12
    assert 6 <= layers <= 24 and 384 <= hidden <= 1536
    assert estimate_architecture(10**9, hidden_size=2048, num_layers=20) == (2048, 20)
    h, n = estimate_architecture(12 * 24 * 1024**2, hidden_size=1024)
    assert (h, n) == (1024, 24)
    h, n = estimate_architecture(12 * 24 * 1024**2, num_layers=24)
    assert (h, n) == (1024, 24)


def test_recommend_config_keys_and_monotonicity() -> None:
    keys = {
        "batch_size",
        "seq_len",
        "use_flash_attention",
        "use_gradient_checkpointing",
        "estimated_vram_usage_gb",
        "available_vram_gb",
        "activation_budget_gb",
    }
    small = Device.recommend_config(124_000_000, total_memory_bytes=24 * 2**30)
    big = Device.recommend_config(124_000_000, total_memory_bytes=80 * 2**30)
    assert keys <= set(small)
    assert small["seq_len"] == 1024 and small["use_flash_attention"]
    assert big["batch_size"] > 2 * small["batch_size"]
    # weights + grads (4 B) + Adam moments (8 B) for float32
    assert small["estimated_vram_usage_gb"] == round(124_000_000 * 16 / 2**30, 2)
    # bf16 weights: float32 grads and master weights too
    half = Device.recommend_config(124_000_000, dtype_bytes=2, total_memory_bytes=24 * 2**30)
    assert half["estimated_vram_usage_gb"] == round(124_000_000 * (2 + 4 + 8 + 4) / 2**30, 2)
    # deeper models need more activation memory per token
    shallow = Device.recommend_config(
        10**9, total_memory_bytes=80 * 2**30, hidden_size=4096, num_layers=5
    )
    deep = Device.recommend_config(
        10**9, total_memory_bytes=80 * 2**30, hidden_size=2048, num_layers=20
    )
    assert deep["activation_bytes_per_token"] > shallow["activation_bytes_per_token"]


def test_recommend_config_tight_memory_and_too_large() -> None:
    tight = Device.recommend_config(1_300_000_000, dtype_bytes=2, total_memory_bytes=27 * 2**30)
    assert tight["use_gradient_checkpointing"] and tight["batch_size"] >= 1
    assert "warning" not in tight
    too_big = Device.recommend_config(20_000_000_000, dtype_bytes=2, total_memory_bytes=80 * 2**30)
    assert (
        too_big["batch_size"] == 1
        and "warning" in too_big
        and too_big["use_gradient_checkpointing"]
    )
    with pytest.raises(ValueError, match="model_params"):
        Device.recommend_config(0, total_memory_bytes=2**30)
    with pytest.raises(ValueError, match="target_utilization"):
        Device.recommend_config(10, target_utilization=1.5, total_memory_bytes=2**30)


@pytest.mark.gpu
def test_real_gpu_properties() -> None:
    props = Device.properties(0)
    assert props.total_memory_bytes > 2**30 and props.sm_count > 0 and props.warp_size == 32
    assert props.compute_capability.count(".") == 1 and props.name
    assert 0 < Device.free_memory(0) <= props.total_memory_bytes
    cfg = Device.recommend_config(124_000_000)
    assert cfg["available_vram_gb"] > 0
