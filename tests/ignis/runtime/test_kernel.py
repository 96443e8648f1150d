"""Kernels: compile and launch user code; arguments and configuration are checked."""

from __future__ import annotations

import numpy as np
import pytest

import ignis

pytestmark = pytest.mark.gpu

SAXPY = r"""
extern "C" __global__ void saxpy(float a, const float* __restrict__ x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""

TEMPLATED = r"""
template <typename T, int Scale>
__global__ void scaled_copy(const T* in, T* out, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x)
        out[i] = in[i] * T(Scale);
}
"""


def to_device(a: np.ndarray) -> ignis.Buffer:
    buf = ignis.alloc(a.nbytes)
    buf.copy_from_host(np.ascontiguousarray(a))
    return buf


def from_device(buf: ignis.Buffer, dtype: type, n: int) -> np.ndarray:
    out = np.empty(n, dtype)
    buf.copy_to_host(out)
    return out


@pytest.mark.parametrize("n", [1, 1000, 1 << 20])
def test_saxpy_matches_numpy(n: int) -> None:
    rng = np.random.default_rng(n)
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    k = ignis.compile_kernel(SAXPY, "saxpy")
    bx, by = to_device(x), to_device(y)
    k.launch(grid=ignis.Kernel.calc_grid_size(n, 256), block=256, args=[np.float32(1.5), bx, by, n])
    got = from_device(by, np.float32, n)
    np.testing.assert_allclose(got, 1.5 * x.astype(np.float64) + y, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype,expr", [(np.float32, "scaled_copy<float, 3>"), (np.float64, "scaled_copy<double, 3>"),
                                         (np.int32, "scaled_copy<int, 3>")])
def test_templated_kernel_through_name_expressions(dtype: type, expr: str) -> None:
    n = 50_001
    rng = np.random.default_rng(5)
    x = (rng.standard_normal(n) * 100).astype(dtype)
    k = ignis.compile_kernel(TEMPLATED, expr)
    bin_, bout = to_device(x), ignis.alloc(x.nbytes)
    k.launch(grid=64, block=128, args=[bin_, bout, n])
    np.testing.assert_array_equal(from_device(bout, dtype, n), x * dtype(3))


def test_kernel_attributes_and_occupancy() -> None:
    k = ignis.compile_kernel(SAXPY, "saxpy")
    attrs = k.attributes()
    assert attrs["num_regs"] > 0 and attrs["max_threads_per_block"] >= 256
    assert k.max_active_blocks_per_multiprocessor(256) >= 1
    assert k.object_code.kind == "cubin"


def test_launch_validation_errors_name_the_kernel_and_limit() -> None:
    k = ignis.compile_kernel(SAXPY, "saxpy")
    buf = ignis.alloc(16)
    args = [1.0, buf, buf, 4]
    with pytest.raises(ignis.LaunchError, match="saxpy"):
        k.launch(grid=1, block=2048, args=args)
    with pytest.raises(ignis.LaunchError):
        k.launch(grid=(1, 1 << 17, 1), block=32, args=args)
    with pytest.raises(ignis.LaunchError):
        k.launch(grid=1, block=32, args=args, shared_mem=10 << 20)
    with pytest.raises(ignis.LaunchError, match="4"):
        k.launch(grid=1, block=32, args=args[:3])
    with pytest.raises(ignis.LaunchError):
        k.launch(grid=1, block=32, args=[1.0, buf, buf, 2**40])
    with pytest.raises(ignis.LaunchError):
        k.launch(grid=1, block=32, args=[1.0, "not a pointer", buf, 4])
    # The kernel and the context still work after the refusals.
    y = np.ones(4, np.float32)
    by = to_device(y)
    k.launch(grid=1, block=32, args=[2.0, by, by, 4])
    np.testing.assert_array_equal(from_device(by, np.float32, 4), np.full(4, 3.0, np.float32))


def test_dynamic_shared_memory_above_48k() -> None:
    src = r"""
    extern "C" __global__ void reverse_block(const float* in, float* out, int n) {
        extern __shared__ float tile[];
        for (int i = threadIdx.x; i < n; i += blockDim.x) tile[i] = in[i];
        __syncthreads();
        for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = tile[n - 1 - i];
    }"""
    k = ignis.compile_kernel(src, "reverse_block")
    optin = ignis.Device(0).properties["max_shared_memory_per_block_optin"]
    n = min(optin, 200 * 1024) // 4
    x = np.random.default_rng(1).standard_normal(n).astype(np.float32)
    bin_, bout = to_device(x), ignis.alloc(x.nbytes)
    k.launch(grid=1, block=1024, args=[bin_, bout, n], shared_mem=4 * n)
    np.testing.assert_array_equal(from_device(bout, np.float32, n), x[::-1])


def test_cooperative_launch_with_grid_sync() -> None:
    # A hand-rolled grid barrier: correct only when every block is resident, which is what a
    # cooperative launch guarantees.
    barrier = r"""
    extern "C" __global__ void two_phase(int* data, int* out, unsigned int* counter, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) data[i] = i;
        __threadfence();
        __syncthreads();
        if (threadIdx.x == 0) {
            atomicAdd(counter, 1u);
            while (atomicAdd(counter, 0u) < gridDim.x) { }
        }
        __syncthreads();
        if (i < n) out[i] = data[n - 1 - i];
    }"""
    k = ignis.compile_kernel(barrier, "two_phase")
    sms = ignis.Device(0).multiprocessor_count
    n = sms * 128
    data, out, counter = ignis.alloc(4 * n), ignis.alloc(4 * n), ignis.alloc(4)
    ignis.memset(counter, 0)
    k.launch(grid=sms, block=128, args=[data, out, counter, n], cooperative=True)
    np.testing.assert_array_equal(from_device(out, np.int32, n), np.arange(n, dtype=np.int32)[::-1])
    too_many = k.max_active_blocks_per_multiprocessor(128) * sms + 1
    with pytest.raises(ignis.LaunchError, match="resident"):
        k.launch(grid=too_many, block=128, args=[data, out, counter, n], cooperative=True)


def test_compile_errors_surface_with_the_log() -> None:
    with pytest.raises(ignis.CompileError) as info:
        ignis.compile_kernel('extern "C" __global__ void bad(float* x) { x[0] = undefined_name; }', "bad")
    assert "undefined_name" in info.value.log
