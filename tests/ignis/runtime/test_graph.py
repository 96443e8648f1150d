"""CUDA graphs: captured work replays correctly; misuse is refused."""

from __future__ import annotations

import numpy as np
import pytest

import ignis

pytestmark = pytest.mark.gpu

AXPB = r"""
extern "C" __global__ void axpb(float* x, float a, float b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = a * x[i] + b;
}
"""


def test_captured_graph_replays_each_launch() -> None:
    k = ignis.compile_kernel(AXPB, "axpb")
    n = 10_000
    rng = np.random.default_rng(7)
    x0 = rng.standard_normal(n).astype(np.float32)
    s = ignis.Stream()
    buf = ignis.alloc(4 * n, stream=s)
    buf.copy_from_host(x0)
    with ignis.Graph.capture(s) as g:
        k.launch(grid=ignis.Kernel.calc_grid_size(n), block=256, args=[buf, 2.0, 1.0, n], stream=s)
        k.launch(grid=ignis.Kernel.calc_grid_size(n), block=256, args=[buf, 0.5, -0.25, n], stream=s)
    assert g.num_nodes == 2
    s.synchronize()
    # Capture ran nothing.
    np.testing.assert_array_equal(np.frombuffer(buf.copy_to_host(), np.float32), x0)
    expected = x0.astype(np.float64)
    for _ in range(3):
        g.launch(s)
        expected = 0.5 * (2.0 * expected + 1.0) - 0.25
    s.synchronize()
    got = np.frombuffer(buf.copy_to_host(), np.float32)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    g.close()
    with pytest.raises(ValueError, match="closed"):
        g.launch(s)


def test_capture_records_copies_and_memsets() -> None:
    s = ignis.Stream()
    src = ignis.alloc(4096, stream=s)
    dst = ignis.alloc(4096, stream=s)
    data = np.random.default_rng(3).integers(0, 256, 4096, dtype=np.uint8)
    src.copy_from_host(data)
    with ignis.Graph.capture(s) as g:
        ignis.memset(dst, 0, stream=s)
        ignis.memcpy(dst, src, 2048, stream=s)
    g.replay(s)
    out = dst.copy_to_host()
    np.testing.assert_array_equal(out[:2048], data[:2048])
    assert not out[2048:].any()


def test_capture_on_the_default_stream_is_refused() -> None:
    with pytest.raises(ValueError, match="legacy default stream"):
        with ignis.Graph.capture(ignis.default_stream()):
            pass


def test_an_exception_inside_capture_abandons_it_and_the_stream_stays_usable() -> None:
    s = ignis.Stream()
    with pytest.raises(RuntimeError, match="boom"):
        with ignis.Graph.capture(s):
            raise RuntimeError("boom")
    buf = ignis.alloc(16, stream=s)
    ignis.memset(buf, 3, stream=s)
    s.synchronize()
    assert (buf.copy_to_host() == 3).all()
