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

A launch is on the hot path of every GPU program, so once a kernel is loaded on a device its
launch runs through a function generated for its signature (:func:`_build_launcher`): the
configuration check is remembered, the argument conversions are inlined and the
``kernelParams`` storage is reused, which keeps the Python work per launch small next to the
driver call itself.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from . import _profiler
from ._arg_packing import ArgPacker, block_lines
from ._bindings import check, cu, driver, driver_available, driver_unavailable_reason
from ._codegen import build_function
from ._compiler import CompileOptions, ObjectCode, compile
from ._device import Device, activate, check_device_arg, current_device

# activate() keeps the thread's active device here; the launch path reads it inline to skip the
# call when the device is already active (the common case).
from ._device import _tls as _device_tls
from ._errors import CudaError, LaunchError, NoDeviceError
from ._launch_config import LaunchConfig
from ._signature import parse_kernel_params
from ._stream import Stream, current_stream

__all__ = ["Kernel", "ModuleImage", "compile_kernel"]

# The driver's launch entry points. A device's launcher reads them once, when the kernel is loaded
# there; tests replace them (before loading) to run the whole launch path without a GPU.
_launch_kernel: Any = getattr(driver, "cuLaunchKernel", None)
_launch_cooperative_kernel: Any = getattr(driver, "cuLaunchCooperativeKernel", None)

# Validated configurations kept per kernel and device; past this many distinct ones (a grid
# computed from ever-changing sizes) the cache starts over rather than growing without bound.
_MAX_CACHED_CONFIGS = 4096

_NEVER = object()  # matches no launch argument: the empty memo


def _unload(device: Device, module: Any) -> None:
    activate(device)
    cu.cuModuleUnload(module)


class ModuleImage:
    """Object code (cubin, PTX or fatbin bytes) loaded as ONE module per device, shared by every
    kernel and global taken from it.

    A kernel of :func:`compile_kernel` has an image of its own; the functions of a
    :class:`~ignis.RawModule` share one, so that a ``__constant__`` written through the module
    is the one its kernels read. A module is loaded on a device at its first use there (in the
    device's primary context) and unloaded when the image is garbage-collected: the kernels'
    device states hold the image, so a module outlives every launcher that needs it.

    Example::

        >>> image = ModuleImage(ignis.compile(src).code, "my_module")
        >>> handle = image.module(ignis.current_device())   # loaded once, then remembered
    """

    __slots__ = ("data", "name", "_modules", "_lock", "__weakref__")

    def __init__(self, data: bytes, name: str = "module"):
        self.data = data
        self.name = name
        self._modules: dict[int, Any] = {}  # device ordinal -> CUmodule
        self._lock = threading.Lock()

    def module(self, device: Device) -> Any:
        """The module loaded on ``device`` (loaded now on first use)."""
        module = self._modules.get(device.ordinal)
        if module is None:
            with self._lock:
                module = self._modules.get(device.ordinal)
                if module is None:
                    activate(device)
                    module = cu.cuModuleLoadData(self.data)
                    # (the finalizer holds the handle, not the image: it runs when the image dies)
                    weakref.finalize(self, _unload, device, module)
                    self._modules[device.ordinal] = module
        return module

    def global_(self, device: Device, name: str) -> tuple[int, int]:
        """``(device address, size in bytes)`` of the ``__device__``/``__constant__`` variable
        ``name`` (its symbol) in the module on ``device``."""
        module = self.module(device)
        activate(device)
        ptr, nbytes = cu.cuModuleGetGlobal(module, name.encode())
        return int(ptr), int(nbytes)

    @property
    def loaded_on(self) -> tuple[int, ...]:
        """Ordinals of the devices the module is loaded on now."""
        return tuple(sorted(self._modules))

    def __repr__(self) -> str:
        size = len(self.data)
        return f"<ignis.ModuleImage {self.name!r} ({size} bytes, loaded on {self.loaded_on})>"


class _Loaded:
    """A kernel's state on one device: module, function handle, packer, limits, configurations.

    ``configs`` maps launch configurations to the validated
    ``(gx, gy, gz, bx, by, bz, shared_mem)``; ``memo`` is the last one resolved,
    ``(grid, block, shared_mem, cooperative, dims)``, checked by identity. Both only ever hold
    values of exact types (``int``, tuples of ``int``, ``bool``; see :meth:`dims`), so a cached
    entry never lets through a value that validation would refuse (``1.0 == 1``,
    ``True == 1``), and an identical immutable object is the same validated value.
    """

    __slots__ = (
        "device",
        "module",
        "function",
        "packer",
        "name",
        "limits",
        "configs",
        "memo",
        "launches",
        "dynamic_smem_set",
        "launch_kernel",
        "launch_cooperative_kernel",
        "image",
        "__weakref__",
    )

    def __init__(
        self,
        device: Device,
        function: Any,
        packer: ArgPacker,
        limits: dict[str, Any],
        *,
        name: str,
        module: Any = None,
        image: ModuleImage | None = None,
    ):
        self.device = device
        self.module = module
        self.image = image  # keeps the (shared) module loaded while this state lives
        self.function = function
        self.packer = packer
        self.name = name
        self.limits = limits
        self.configs: dict[Any, tuple[int, ...]] = {}
        self.memo: tuple[Any, ...] = (_NEVER, _NEVER, _NEVER, _NEVER, None)
        self.launches = 0
        self.dynamic_smem_set = 0
        self.launch_kernel = _launch_kernel
        self.launch_cooperative_kernel = _launch_cooperative_kernel

    @classmethod
    def load(cls, kernel: Kernel, device: Device) -> _Loaded:
        """Get ``kernel``'s function from its module image on ``device`` (the module is loaded
        there once per image, and shared by the image's kernels) and read its parameter sizes
        and attributes."""
        image = kernel._image
        if image is None:  # (called under the kernel's lock: made once)
            image = kernel._image = ModuleImage(kernel.object_code.code, kernel.name)
        module = image.module(device)
        activate(device)
        function = cu.cuModuleGetFunction(module, kernel.lowered_name.encode())
        packer = ArgPacker(kernel.params, kernel.name, param_sizes=_param_sizes(function))
        attrs = _function_attributes(function)
        limits = dict(device.properties)
        limits["kernel_max_threads_per_block"] = attrs["max_threads_per_block"]
        limits["kernel_static_shared_bytes"] = attrs["shared_size_bytes"]
        return cls(device, function, packer, limits, name=kernel.name, module=module, image=image)

    def dims(self, grid: Any, block: Any, shared_mem: Any, cooperative: Any) -> tuple[int, ...]:
        """The validated ``(gx, gy, gz, bx, by, bz, shared_mem)`` of a launch; updates the memo.

        Arguments of exact types are looked up as given; anything else (NumPy integers) goes
        through :class:`LaunchConfig`, which refuses what is not an int, and is looked up in
        normalised form. A configuration is checked against the limits once.
        """
        exact = (
            (type(grid) is int or _exact(grid))
            and (type(block) is int or _exact(block))
            and type(shared_mem) is int
            and (cooperative is False or cooperative is True)
        )
        key = (grid, block, shared_mem, cooperative) if exact else None
        dims = self.configs.get(key) if exact else None
        if dims is None:
            dims = self._resolve(grid, block, shared_mem, cooperative, key)
        if exact:
            self.memo = (grid, block, shared_mem, cooperative, dims)
        return dims

    def _resolve(
        self, grid: Any, block: Any, shared_mem: Any, cooperative: Any, key: Any
    ) -> tuple[int, ...]:
        """:meth:`dims` on a cache miss: normalise, validate, remember (also under ``key``)."""
        config = LaunchConfig(grid, block, shared_mem, cooperative, name=self.name)
        normal = (config.grid, config.block, config.shared_mem, config.cooperative)
        configs = self.configs
        dims = configs.get(normal)
        if dims is None:
            self._validate(config)
            dims = (*config.grid, *config.block, config.shared_mem)
        if len(configs) >= _MAX_CACHED_CONFIGS:
            configs.clear()  # cleared, never replaced: the launcher holds this dict
        configs[normal] = dims
        if key is not None:
            configs[key] = dims
        return dims

    def _validate(self, config: LaunchConfig) -> None:
        """Check ``config`` against the device and kernel limits; opt in to large shared memory."""
        needs_optin = config.validate(self.limits)
        shared_mem = config.shared_mem
        if config.cooperative:
            capacity = self.occupancy(config.block, shared_mem) * self.device.multiprocessor_count
            blocks = config.grid[0] * config.grid[1] * config.grid[2]
            if blocks > capacity:
                raise LaunchError(
                    f"cooperative launch of {self.name!r}: grid has {blocks} blocks but at most "
                    f"{capacity} can be resident at once on cuda:{self.device.ordinal}"
                )
        if needs_optin and shared_mem > self.dynamic_smem_set:
            activate(self.device)
            cu.cuFuncSetAttribute(
                self.function,
                driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                int(shared_mem),
            )
            self.dynamic_smem_set = int(shared_mem)

    def occupancy(self, block: int | Sequence[int], shared_mem: int) -> int:
        """Blocks of this size that fit on one SM at once."""
        threads = block if isinstance(block, int) else int(_prod(block))
        activate(self.device)
        return int(
            cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(self.function, threads, shared_mem)
        )


# The launcher of one kernel on one device. Between the two halves go the lines that pack
# ``args`` (ArgPacker.pack_code). Every name not assigned here is bound by _build_launcher.
_LAUNCH_HEAD = (
    "if stream is None:",
    "    stream = current_stream()",
    "if stream.device is not device:",
    "    return elsewhere(grid, block, args, shared_mem, stream, cooperative)",
    "memo = state.memo",
    "if (grid is memo[0] and block is memo[1] and shared_mem is memo[2]",
    "        and cooperative is memo[3]):  # the same objects as last time",
    "    gx, gy, gz, bx, by, bz, smem = memo[4]",
    "else:",
    "    dims = None",
    "    if (type(grid) is int and type(block) is int and type(shared_mem) is int",
    "            and cooperative is False):  # the common case, as state.dims keys it",
    "        dims = configs.get((grid, block, shared_mem, False))",
    "    if dims is None:",
    "        dims = state.dims(grid, block, shared_mem, cooperative)",
    "    gx, gy, gz, bx, by, bz, smem = dims",
)
_ACTIVATE = (
    "try:",
    "    active = device_tls.active",
    "except AttributeError:  # this thread has not activated any device yet",
    "    active = None",
    "if active is not device:",
    "    activate(device)",
)
# ``profiling.active`` is the recording ignis.profile() (ignis._profiler), None when there is
# none: the only work the profiler adds to a launch while it is off.
_LAUNCH_PLAIN = (
    "profiler = profiling.active",
    "if profiler is None:",
    "    result = launch_kernel(",
    "        function, gx, gy, gz, bx, by, bz, smem, stream.handle, packed[1], 0)",
    "else:  # recording: the launch goes between the profiler's two events",
    "    result = profiler.launch(state, launch_kernel, stream, (",
    "        function, gx, gy, gz, bx, by, bz, smem, stream.handle, packed[1], 0))",
    "release_block(packed)  # the driver has copied the values: the block is free again",
    "if result[0]:  # a status other than success (0): check() raises its CudaError",
    "    check(result, 'cuLaunchKernel')",
)
_LAUNCH_TAIL = (
    *_ACTIVATE,
    "if cooperative:",
    "    profiler = profiling.active",
    "    if profiler is None:",
    "        result = launch_cooperative_kernel(",
    "            function, gx, gy, gz, bx, by, bz, smem, stream.handle, packed[1])",
    "    else:",
    "        result = profiler.launch(state, launch_cooperative_kernel, stream, (",
    "            function, gx, gy, gz, bx, by, bz, smem, stream.handle, packed[1]))",
    "    release_block(packed)",
    "    check(result, 'cuLaunchCooperativeKernel')",
    "else:",
    *(f"    {line}" for line in _LAUNCH_PLAIN),
    "state.launches += 1",
)
_LAUNCH_SIGNATURE = "grid, block, args=(), *, shared_mem=0, stream=None, cooperative=False"


def _build_launcher(state: _Loaded, elsewhere: Callable[..., None]) -> Callable[..., None]:
    """Generate ``launch(grid, block, args=(), *, shared_mem=0, stream=None, cooperative=False)``
    for ``state``: :meth:`Kernel.launch` specialised to one device and one signature.

    ``elsewhere(grid, block, args, shared_mem, stream, cooperative)`` takes launches on a stream
    of another device. The driver's launch functions, :func:`current_stream` and
    :func:`activate` are bound now, from this module's globals.
    """
    pack, names = state.packer.pack_code()
    names = _launch_names(state, names)
    names.update(
        configs=state.configs,
        elsewhere=elsewhere,
        current_stream=current_stream,
        launch_cooperative_kernel=state.launch_cooperative_kernel,
    )
    body = [*_LAUNCH_HEAD, *pack, *_LAUNCH_TAIL]
    filename = f"<ignis launch of {state.name!r} on cuda:{state.device.ordinal}>"
    source, launch = build_function("launch", _LAUNCH_SIGNATURE, body, names, filename)
    launch.__qualname__ = "Kernel.launch"
    launch.__doc__ = Kernel.launch.__doc__
    launch.source = source  # type: ignore[attr-defined]
    return launch


def _launch_names(state: _Loaded, names: dict[str, Any]) -> dict[str, Any]:
    """``names`` plus what the launch lines bind from the kernel's state and this module."""
    names.update(
        state=state,
        device=state.device,
        function=state.function,
        device_tls=_device_tls,
        activate=activate,
        check=check,
        launch_kernel=state.launch_kernel,
        profiling=_profiler,
    )
    return names


def _build_prepared(state: _Loaded, dims: tuple[int, ...]) -> Callable[..., None] | None:
    """Generate ``launch(stream, v0, .., v<n-1>)`` for one validated configuration ``dims``
    (see :meth:`Kernel._prepared`); None for a kernel whose layout depends on its values.

    Called with a stream of the kernel's device (anything else raises a LaunchError), it writes
    the converted values into a pooled block and launches. Generated hot paths run it inline
    (ignis._codegen.Inliner: the CUDA backend's direct functions).
    """
    packer = state.packer
    if packer._layout is None or not packer._count:
        return None
    _, names = packer.pack_code()
    gx, gy, gz, bx, by, bz, smem = dims
    names = _launch_names(state, names)
    ordinal = state.device.ordinal

    def wrong_stream(stream: Stream) -> LaunchError:
        return LaunchError(
            f"prepared launch of {state.name!r} on cuda:{ordinal}: expected a stream of "
            f"cuda:{ordinal}, got one of cuda:{stream.device.ordinal}"
        )

    names.update(gx=gx, gy=gy, gz=gz, bx=bx, by=by, bz=bz, smem=smem, wrong_stream=wrong_stream)
    values = [f"v{i}" for i in range(packer._count)]
    lines = [
        "if stream.device is not device:",
        "    raise wrong_stream(stream)",
        *block_lines(packer, f"({', '.join(values)},)", values),
        *_ACTIVATE,
        *_LAUNCH_PLAIN,
        "state.launches += 1",
    ]
    filename = f"<ignis prepared launch of {state.name!r} on cuda:{ordinal}>"
    _, launch = build_function("launch", ", ".join(["stream", *values]), lines, names, filename)
    return launch


def _elsewhere(kernel: Kernel) -> Callable[..., None]:
    """Where a device's launcher sends launches on another device's stream.

    It holds the kernel weakly: the kernel's ``launch`` attribute holds the launcher.
    """
    ref = weakref.ref(kernel)
    name = kernel.name

    def elsewhere(
        grid: Any, block: Any, args: Any, shared_mem: Any, stream: Stream, cooperative: Any
    ) -> None:
        owner = ref()
        if owner is None:
            raise LaunchError(
                f"launch of {name!r} on cuda:{stream.device.ordinal}: the Kernel object this "
                "launch function came from no longer exists; keep the kernel, not its launch"
            )
        launch = owner._launcher(stream.device)
        owner.launch = launch  # the device launched on last gets the direct path
        launch(grid, block, args, shared_mem=shared_mem, stream=stream, cooperative=cooperative)

    return elsewhere


class Kernel:
    """A compiled ``__global__`` function, launchable on every device of a compatible arch.

    Get one from :func:`compile_kernel` (or :meth:`Kernel.from_object_code` for code compiled
    with :func:`ignis.compile`). The module is loaded on a device at its first launch there.

    Attributes:
        name: the kernel name or name expression (``"saxpy"``, ``"axpy<float>"``).
        lowered_name: the symbol in the object code.
        object_code: the :class:`~ignis.ObjectCode` it was loaded from.
        launch_count: launches made through this object (approximate while several threads
            launch it at once).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError(
            "Kernel cannot be constructed directly; use ignis.compile_kernel(source, name)"
        )

    @classmethod
    def from_object_code(
        cls,
        object_code: ObjectCode,
        name: str,
        source: str | None,
        *,
        image: ModuleImage | None = None,
    ) -> Kernel:
        """Wrap compiled code. ``source`` is the CUDA C++ text, used for the parameter types
        (None: unknown; the arguments are then packed as raw bytes of the sizes the driver
        reports). ``image``: the :class:`ModuleImage` to take the function from, shared with
        other kernels of one module (default: one of this kernel's own)."""
        lowered = object_code.lowered_names.get(name, name)
        self = object.__new__(cls)
        self.name = name
        self.lowered_name = lowered
        self.object_code = object_code
        self._image = image  # None: one of its own, made at the first load
        self.params = parse_kernel_params(source, name) if source is not None else None
        self._loaded: dict[int, _Loaded] = {}
        self._launchers: dict[int, Callable[..., None]] = {}
        self._prepared_launches: dict[tuple[int, ...], Callable[..., None] | None] = {}
        self._lock = threading.Lock()
        return self

    @property
    def launch_count(self) -> int:
        """Launches made through this object, on every device, that the driver accepted."""
        return sum(state.launches for state in list(self._loaded.values()))

    def _state(self, device: Device) -> _Loaded:
        state = self._loaded.get(device.ordinal)
        if state is None:
            with self._lock:
                state = self._loaded.get(device.ordinal)
                if state is None:
                    state = _Loaded.load(self, device)
                    self._install(state)
        return state

    def _install(self, state: _Loaded) -> None:
        """Adopt ``state`` as this kernel's state on its device, with its launcher.

        The first device's launcher becomes this object's ``launch`` attribute, so that
        ``kernel.launch(...)`` calls it directly.
        """
        ordinal = state.device.ordinal
        launcher = _build_launcher(state, _elsewhere(self))
        self._launchers[ordinal] = launcher
        self._loaded[ordinal] = state
        if "launch" not in self.__dict__:
            self.launch = launcher

    def _launcher(self, device: Device) -> Callable[..., None]:
        launcher = self._launchers.get(device.ordinal)
        if launcher is None:
            self._state(device)
            launcher = self._launchers[device.ordinal]
        return launcher

    def _prepared(
        self, device: Device, grid: int, block: int, shared_mem: int = 0
    ) -> Callable[..., None] | None:
        """A launch of one configuration on ``device``: ``launch(stream, v0, .., v<n-1>)``.

        For the kernel library's hot paths. The configuration is validated here, once; the
        caller passes a stream of ``device`` and values already converted to the parameter
        types (ints for pointers and integers, floats for floating-point parameters): no
        conversion runs, and a value of another type fails in the packing with a LaunchError.
        Remembered per configuration (at most ``_MAX_CACHED_CONFIGS``); None for a kernel whose
        argument layout depends on its values.
        """
        # Kept here, not in the device state, which the launches themselves hold.
        key = (device.ordinal, grid, block, shared_mem)
        prepared = self._prepared_launches.get(key, _NEVER)
        if prepared is _NEVER:
            state = self._state(device)
            prepared = _build_prepared(state, state.dims(grid, block, shared_mem, False))
            if len(self._prepared_launches) >= _MAX_CACHED_CONFIGS:
                self._prepared_launches.clear()
            self._prepared_launches[key] = prepared
        return prepared

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

        Each configuration is validated once per device and then remembered. The cheapest
        launch passes an explicit ``stream`` and plain ints (or tuples of ints) for ``grid``
        and ``block``; reusing the same objects from one launch to the next is cheaper still.

        Raises:
            LaunchError: bad configuration or arguments, before anything reaches the driver.
            CudaError: the driver rejected the launch.

        Example::

            >>> k.launch(grid=ignis.Kernel.calc_grid_size(n), block=256, args=[2.0, x, y, n])
        """
        # Reached before the first launch on a device, or as Kernel.launch(k, ...); afterwards
        # k.launch is the device's generated launcher.
        if stream is None:
            stream = current_stream()
        self._launcher(stream.device)(
            grid, block, args, shared_mem=shared_mem, stream=stream, cooperative=cooperative
        )

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        """Same as :meth:`launch`."""
        self.launch(*args, **kwargs)

    def attributes(self, device: int | Device | None = None) -> dict[str, int]:
        """The compiled function's attributes on ``device``: ``num_regs``,
        ``max_threads_per_block``, ``shared_size_bytes`` (static), ``local_size_bytes``,
        ``const_size_bytes``, ``ptx_version``, ``binary_version``."""
        dev = current_device() if device is None else Device(device)
        return _function_attributes(self._state(dev).function)

    def max_active_blocks_per_multiprocessor(
        self, block: int | Sequence[int], shared_mem: int = 0, device: int | Device | None = None
    ) -> int:
        """Occupancy: how many blocks of this size fit on one SM at once."""
        dev = current_device() if device is None else Device(device)
        return self._state(dev).occupancy(block, shared_mem)

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
    device: int | str | Device | None = None,
) -> Kernel:
    """Compile CUDA C++ ``source`` and return the kernel ``name``, ready to launch.

    ``name`` is the kernel's name or a C++ name expression for a template instance
    (``"axpy<float>"``). Compilation targets ``device``'s architecture (default: the current
    device) unless ``options.arch`` says otherwise, and goes through the in-memory and disk
    caches. The module is loaded on a device at the kernel's first launch there.

    ``IGNIS_ARCH`` does not apply here where a GPU exists: the kernel must load on that GPU,
    so its own architecture is used. Without a GPU the source is still compiled, for
    ``options.arch`` or :func:`ignis.jit.default_arch` (``IGNIS_ARCH``, else ``"sm_90"``),
    so that a mistake in it is reported as a :class:`CompileError` anywhere; only then does
    the missing GPU raise :class:`NoDeviceError`. (:func:`ignis.compile` compiles without a
    GPU and returns the code.)

    Raises:
        CompileError: NVRTC rejected the source (the log says why).
        NvrtcNotFoundError: the NVRTC library or cuda-bindings is not installed.
        NoDeviceError: the source compiled, but there is no GPU to load the kernel on.

    Example: ``k = ignis.compile_kernel(src, "saxpy"); k.launch(grid=g, block=256, args=[...])``.
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"compile_kernel: name must be a non-empty string, got {name!r}")
    if options is not None and not isinstance(options, CompileOptions):
        raise TypeError(
            "compile_kernel: options must be a CompileOptions or None, "
            f"got {type(options).__name__}"
        )
    opts = options or CompileOptions()
    gpu = driver_available()
    if not gpu:
        check_device_arg(device)
    elif opts.arch is None:
        dev = current_device() if device is None else Device(device)
        opts = opts._with_device_arch(dev.arch)
    code = compile(source, options=opts, name_expressions=(name,))
    if not gpu:
        raise NoDeviceError(
            f"compile_kernel: {name!r} compiled fine for {code.arch}, but there is no GPU to "
            f"load it on ({driver_unavailable_reason()}). Launching a kernel needs an NVIDIA GPU "
            "and driver; ignis.compile() compiles without one."
        )
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


def _exact(dim: Any) -> bool:
    """True for an ``int`` or a tuple of ``int`` (exactly those types: no bool, no NumPy)."""
    if type(dim) is int:
        return True
    return type(dim) is tuple and all(type(v) is int for v in dim)


def _prod(values: Sequence[int]) -> int:
    out = 1
    for v in values:
        out *= int(v)
    return out
