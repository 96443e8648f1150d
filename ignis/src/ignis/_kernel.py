"""Launchable kernels: compiled code loaded per device, with validated launches.

Example (SAXPY in one call)::

    >>> src = r'''
    ... extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {
    ...     int i = blockIdx.x * blockDim.x + threadIdx.x;
    ...     if (i < n) y[i] = a * x[i] + y[i];
    ... }'''
    >>> k = ignis.compile_kernel(src, "saxpy")
    >>> k.launch(grid=ignis.Kernel.calc_grid_size(n), block=256, args=[2.0, x, y, n])

Arguments are packed to the parameter types the kernel declares (see :mod:`ignis._arg_packing`);
the grid, block and shared-memory size are checked against the device's limits before the
driver sees them.
"""

from __future__ import annotations

import dataclasses
import threading
import weakref
from collections.abc import Sequence
from typing import Any

from ._arg_packing import ArgPacker
from ._bindings import check, cu, driver
from ._compiler import CompileOptions, ObjectCode, compile
from ._device import Device, activate, current_device
from ._errors import CudaError, LaunchError
from ._launch_config import LaunchConfig
from ._signature import parse_kernel_params
from ._stream import Stream, current_stream

__all__ = ["Kernel", "compile_kernel"]

def _unload(device: Device, module: Any) -> None:
    activate(device)
    cu.cuModuleUnload(module)


class _Loaded:
    """A kernel's state on one device: module, function handle, packer, limits, config cache."""

    __slots__ = ("device", "module", "function", "packer", "limits", "configs", "dynamic_smem_set", "_finalizer", "__weakref__")

    def __init__(self, kernel: Kernel, device: Device):
        activate(device)
        self.device = device
        self.module = cu.cuModuleLoadData(kernel.object_code.code)
        self._finalizer = weakref.finalize(self, _unload, device, self.module)
        self.function = cu.cuModuleGetFunction(self.module, kernel.lowered_name.encode())
        sizes = _param_sizes(self.function)
        self.packer = ArgPacker(kernel.params, kernel.name, param_sizes=sizes)
        attrs = _function_attributes(self.function)
        self.limits = dict(device.properties)
        self.limits["kernel_max_threads_per_block"] = attrs["max_threads_per_block"]
        self.limits["kernel_static_shared_bytes"] = attrs["shared_size_bytes"]
        self.configs: dict[Any, LaunchConfig] = {}
        self.dynamic_smem_set = 0


class Kernel:
    """A compiled ``__global__`` function, launchable on every device of a compatible arch.

    Get one from :func:`compile_kernel` (or :meth:`Kernel.from_object_code` for code compiled
    with :func:`ignis.compile`). The module is loaded on a device at its first launch there.

    Attributes:
        name: the kernel name or name expression (``"saxpy"``, ``"axpy<float>"``).
        lowered_name: the symbol in the object code.
        object_code: the :class:`~ignis.ObjectCode` it was loaded from.
        launch_count: launches made through this object.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("Kernel cannot be constructed directly; use ignis.compile_kernel(source, name)")

    @classmethod
    def from_object_code(cls, object_code: ObjectCode, name: str, source: str) -> Kernel:
        """Wrap compiled code. ``source`` is the CUDA C++ text, used for the parameter types."""
        lowered = object_code.lowered_names.get(name, name)
        self = object.__new__(cls)
        self.name = name
        self.lowered_name = lowered
        self.object_code = object_code
        self.params = parse_kernel_params(source, name)
        self.launch_count = 0
        self._loaded: dict[int, _Loaded] = {}
        self._lock = threading.Lock()
        return self

    def _state(self, device: Device) -> _Loaded:
        state = self._loaded.get(device.ordinal)
        if state is None:
            with self._lock:
                state = self._loaded.get(device.ordinal)
                if state is None:
                    state = _Loaded(self, device)
                    self._loaded[device.ordinal] = state
        return state

    def launch(
        self,
        grid: int | Sequence[int],
        block: int | Sequence[int],
        args: Sequence[Any] = (),
        *,
        shared_mem: int = 0,
        stream: Stream | None = None,
        cooperative: bool = False,
    ) -> None:
        """Queue one launch of the kernel.

        Args:
            grid: blocks per grid, an int or a tuple of up to 3 ints.
            block: threads per block, an int or a tuple of up to 3 ints.
            args: one value per kernel parameter: buffers/arrays (passed as device pointers), Python
                or NumPy scalars (converted exactly to the declared type), or ints for raw pointers.
            shared_mem: dynamic shared memory in bytes (above 48 KiB the kernel's limit is raised
                automatically, up to the device's opt-in maximum).
            stream: the stream (default: the current stream of the current device).
            cooperative: launch with ``cuLaunchCooperativeKernel`` (grid-wide sync); the whole grid
                must be resident at once.

        Raises:
            LaunchError: bad configuration or arguments, before anything reaches the driver.
            CudaError: the driver rejected the launch.
        """
        if stream is None:
            stream = current_stream()
        device = stream.device
        state = self._loaded.get(device.ordinal) or self._state(device)
        key = (grid if isinstance(grid, int) else tuple(grid), block if isinstance(block, int) else tuple(block), shared_mem, cooperative)
        try:
            config = state.configs.get(key)
        except TypeError:  # unhashable (a list inside): validate every time
            config = None
            key = None
        if config is None:
            config = self._validate(state, grid, block, shared_mem, cooperative)
            if key is not None:
                state.configs[key] = config
        packed = state.packer.pack(args)
        activate(device)
        gx, gy, gz = config.grid
        bx, by, bz = config.block
        if cooperative:
            result = driver.cuLaunchCooperativeKernel(
                state.function, gx, gy, gz, bx, by, bz, config.shared_mem, stream.handle, packed.address
            )
            check(result, "cuLaunchCooperativeKernel")
        else:
            result = driver.cuLaunchKernel(
                state.function, gx, gy, gz, bx, by, bz, config.shared_mem, stream.handle, packed.address, 0
            )
            check(result, "cuLaunchKernel")
        self.launch_count += 1

    __call__ = launch

    def _validate(self, state: _Loaded, grid: Any, block: Any, shared_mem: int, cooperative: bool) -> LaunchConfig:
        config = LaunchConfig(grid, block, shared_mem, cooperative, name=self.name)
        needs_optin = config.validate(state.limits)
        if cooperative:
            per_sm = self.max_active_blocks_per_multiprocessor(config.block, shared_mem, state.device)
            capacity = per_sm * state.device.multiprocessor_count
            blocks = config.grid[0] * config.grid[1] * config.grid[2]
            if blocks > capacity:
                raise LaunchError(
                    f"cooperative launch of {self.name!r}: grid has {blocks} blocks but at most "
                    f"{capacity} can be resident at once on cuda:{state.device.ordinal}"
                )
        if needs_optin and shared_mem > state.dynamic_smem_set:
            activate(state.device)
            cu.cuFuncSetAttribute(
                state.function,
                driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                int(shared_mem),
            )
            state.dynamic_smem_set = int(shared_mem)
        return config

    def attributes(self, device: int | Device | None = None) -> dict[str, int]:
        """The compiled function's attributes on ``device``: ``num_regs``, ``max_threads_per_block``,
        ``shared_size_bytes`` (static), ``local_size_bytes``, ``const_size_bytes``, ``ptx_version``,
        ``binary_version``."""
        dev = current_device() if device is None else Device(device)
        return _function_attributes(self._state(dev).function)

    def max_active_blocks_per_multiprocessor(
        self, block: int | Sequence[int], shared_mem: int = 0, device: int | Device | None = None
    ) -> int:
        """Occupancy: how many blocks of this size fit on one SM at once."""
        dev = current_device() if device is None else Device(device)
        state = self._state(dev)
        threads = block if isinstance(block, int) else int(_prod(block))
        activate(dev)
        return int(cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(state.function, threads, shared_mem))

    @staticmethod
    def calc_grid_size(n: int, block_size: int = 256) -> int:
        """Blocks needed to give one thread to each of ``n`` items (at least 1)."""
        return max(1, -(-int(n) // int(block_size)))

    def __repr__(self) -> str:
        return f"<ignis.Kernel {self.name!r} ({self.object_code.kind} for {self.object_code.arch})>"


def compile_kernel(
    source: str,
    name: str,
    *,
    options: CompileOptions | None = None,
    device: int | Device | None = None,
) -> Kernel:
    """Compile CUDA C++ ``source`` and return the kernel ``name``, ready to launch.

    ``name`` is the kernel's name or a C++ name expression for a template instance
    (``"axpy<float>"``). Compilation targets ``device``'s architecture (default: current device)
    unless ``options.arch`` says otherwise, and goes through the in-memory and disk caches.

    Example: ``k = ignis.compile_kernel(src, "saxpy"); k.launch(grid=g, block=256, args=[...])``.
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"compile_kernel: name must be a non-empty string, got {name!r}")
    opts = options or CompileOptions()
    if opts.arch is None:
        dev = current_device() if device is None else Device(device)
        opts = dataclasses.replace(opts, arch=dev.arch)
    code = compile(source, options=opts, name_expressions=(name,))
    return Kernel.from_object_code(code, name, source)


def _param_sizes(function: Any) -> list[int] | None:
    """Byte size of each kernel parameter, from the driver (None where it cannot tell)."""
    sizes: list[int] = []
    try:
        while True:
            _offset, size = cu.cuFuncGetParamInfo(function, len(sizes))
            sizes.append(int(size))
    except CudaError as exc:
        if exc.code == "CUDA_ERROR_INVALID_VALUE":  # past the last parameter
            return sizes
        return None  # a driver without cuFuncGetParamInfo


def _function_attributes(function: Any) -> dict[str, int]:
    a = driver.CUfunction_attribute
    names = {
        "max_threads_per_block": a.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
        "shared_size_bytes": a.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES,
        "const_size_bytes": a.CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES,
        "local_size_bytes": a.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES,
        "num_regs": a.CU_FUNC_ATTRIBUTE_NUM_REGS,
        "ptx_version": a.CU_FUNC_ATTRIBUTE_PTX_VERSION,
        "binary_version": a.CU_FUNC_ATTRIBUTE_BINARY_VERSION,
        "max_dynamic_shared_size_bytes": a.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
    }
    return {k: int(cu.cuFuncGetAttribute(v, function)) for k, v in names.items()}


def _prod(values: Sequence[int]) -> int:
    out = 1
    for v in values:
        out *= int(v)
    return out
