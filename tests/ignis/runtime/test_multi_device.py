"""Several devices: each has its own context, memory, streams and kernels; copies cross them."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import ignis

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(ignis.device_count() < 2, reason="needs two CUDA devices"),
]

FILL = r"""
extern "C" __global__ void fill_scaled(float* out, float scale, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = scale * i;
}
"""


def test_each_device_runs_the_same_kernel_on_its_own_memory() -> None:
    k = ignis.compile_kernel(FILL, "fill_scaled")
    n = 4099
    outs = []
    for ordinal in (0, 1):
        with ignis.Device(ordinal):
            s = ignis.Stream()
            assert s.device.ordinal == ordinal
            buf = ignis.alloc(4 * n, stream=s)
            assert buf.device.ordinal == ordinal
            k.launch(grid=ignis.Kernel.calc_grid_size(n), block=256, args=[buf, float(ordinal + 2), n], stream=s)
            out = np.empty(n, np.float32)
            ignis.memcpy(out, buf, 4 * n, stream=s)
            s.synchronize()
            outs.append(out)
    for ordinal, out in enumerate(outs):
        np.testing.assert_array_equal(out, (ordinal + 2) * np.arange(n, dtype=np.float32))


def test_copy_between_devices_and_per_device_stats() -> None:
    data = np.random.default_rng(11).integers(0, 256, 1 << 20, dtype=np.uint8)
    before = [ignis.memory_stats(d)["current_bytes"] for d in (0, 1)]
    a = ignis.alloc(data.nbytes, device=0)
    b = ignis.alloc(data.nbytes, device=1)
    assert ignis.memory_stats(1)["current_bytes"] == before[1] + data.nbytes
    a.copy_from_host(data)
    ignis.memcpy(b, a, data.nbytes)
    np.testing.assert_array_equal(b.copy_to_host(), data)
    a.close()
    assert ignis.memory_stats(0)["current_bytes"] == before[0]


def test_threads_each_on_their_own_device() -> None:
    k = ignis.compile_kernel(FILL, "fill_scaled")
    n = 1 << 16
    results: dict[int, np.ndarray] = {}
    errors: list[BaseException] = []

    def work(ordinal: int) -> None:
        try:
            ignis.Device(ordinal).set_current()
            s = ignis.Stream()
            buf = ignis.alloc(4 * n, stream=s)
            for _ in range(20):
                k.launch(grid=n // 256, block=256, args=[buf, float(ordinal + 1), n], stream=s)
            out = np.empty(n, np.float32)
            ignis.memcpy(out, buf, 4 * n, stream=s)
            s.synchronize()
            results[ordinal] = out
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(d,)) for d in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for ordinal in (0, 1):
        np.testing.assert_array_equal(results[ordinal], (ordinal + 1) * np.arange(n, dtype=np.float32))


def test_arrays_on_two_devices() -> None:
    x = ignis.random.Generator(3).rand(1000, device="cuda:0")
    y = x.to("cuda:1")
    assert y.device == "cuda:1"
    np.testing.assert_array_equal(y.to_host(), x.to_host())
    np.testing.assert_allclose((y * 2.0).to_host(), 2.0 * x.to_host(), rtol=0)
    with pytest.raises(ignis.DeviceMismatchError):
        _ = x + y
