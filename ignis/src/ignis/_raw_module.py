"""``ignis.RawModule``: a whole CUDA C++ program (or a compiled file) as one module (CuPy's API).

A module is compiled once and loaded once per device; every kernel taken from it with
:meth:`RawModule.get_function` and every variable taken with :meth:`RawModule.get_global`
come from that ONE loaded module, so a ``__constant__`` written through the module is the one
its kernels read:

    >>> mod = ignis.RawModule(code=r'''
    ... __constant__ float scale[1];
    ... template <class T> __global__ void mul(const T* x, T* y, int n) {
    ...     int i = blockIdx.x * blockDim.x + threadIdx.x;
    ...     if (i < n) y[i] = x[i] * (T)scale[0];
    ... }''', name_expressions=["mul<float>", "mul<double>"])
    >>> mod.get_global("scale").copy_(np.array([3.0], np.float32).view(np.uint8))
    >>> mul = mod.get_function("mul<float>")
    >>> mul((1,), (256,), (x, y, np.int32(x.size)))     # CuPy's call; mul.launch(...) too

The functions are :class:`~ignis.Kernel` objects: arguments are packed to the parameter types
the source declares. A module loaded from a compiled file (``path=`` a ``.cubin``, ``.ptx`` or
``.fatbin``) has no source to read the types from: its functions take arrays and buffers as
device pointers and everything else as raw bytes of the size the driver reports (NumPy
scalars such as ``np.int32(n)``; Python numbers are refused, since their exact type is
unknown and ignis never reinterprets bits).
"""

from __future__ import annotations

import dataclasses
import os
import re
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ._compiler import CompileOptions, ObjectCode, compile
from ._errors import LaunchError, NoDeviceError
from ._kernel import Kernel, ModuleImage

__all__ = ["RawModule"]

_BINARY_KINDS = {".cubin": "cubin", ".ptx": "ptx", ".fatbin": "fatbin"}


@dataclass(frozen=True)
class _FileCode:
    """A compiled file as the kernels see their object code (``ObjectCode``'s attributes)."""

    code: bytes = field(repr=False)
    kind: str
    arch: str
    lowered_names: dict[str, str] = field(default_factory=dict)


class RawModule:
    """A CUDA C++ program or compiled file loaded as one module per device (CuPy's signature).

    Args:
        code: the CUDA C++ source (exactly one of ``code`` and ``path``).
        path: a file: ``.cu`` (source, compiled with its folder on the include path),
            ``.cubin``, ``.ptx`` or ``.fatbin`` (loaded as they are).
        options: a :class:`~ignis.CompileOptions`, or NVRTC flags as a tuple of strings (CuPy's
            form: ``("-std=c++17", "--use_fast_math")``).
        name_expressions: C++ names of template instances to compile and look up
            (``["kernel<float>", "kernel<double>", "table<int>"]``); :meth:`get_function` and
            :meth:`get_global` then take them by these names.
        backend: ``"nvrtc"`` (the only compiler ignis uses).
        jitify: must be False (Jitify is not supported).

    The source is compiled at the first :meth:`get_function`/:meth:`get_global` (or by
    :meth:`compile`), for the current device's architecture unless ``options.arch`` says
    otherwise, through the compile caches. Two RawModule objects never share globals: each
    loads its own module.

    Example::

        >>> mod = ignis.RawModule(code='extern "C" __global__ void one(float* x) { *x = 1; }')
        >>> mod.get_function("one").launch(1, 1, [x])
    """

    def __init__(
        self,
        code: str | None = None,
        path: str | os.PathLike[str] | None = None,
        options: CompileOptions | Sequence[str] | None = None,
        name_expressions: Iterable[str] | None = None,
        backend: str = "nvrtc",
        *,
        jitify: bool = False,
    ):
        if (code is None) == (path is None):
            raise TypeError("RawModule: give exactly one of code= (source) and path= (a file)")
        if backend != "nvrtc":
            raise ValueError(
                f"RawModule: backend {backend!r} is not supported; ignis compiles with 'nvrtc'"
            )
        if jitify:
            raise ValueError("RawModule: jitify=True is not supported (pass jitify=False)")
        self.options = _as_options(options)
        self.name_expressions: tuple[str, ...] = _name_list(name_expressions)
        self.path = None if path is None else os.fspath(path)
        self.code: str | None = code
        self._file: _FileCode | None = None
        if code is not None and not isinstance(code, str):
            raise TypeError(f"RawModule: code must be a str, got {type(code).__name__}")
        if self.path is not None:
            suffix = os.path.splitext(self.path)[1].lower()
            if suffix == ".cu":
                with open(self.path, encoding="utf-8") as f:
                    self.code = f.read()
                folder = os.path.dirname(os.path.abspath(self.path))
                self.options = dataclasses.replace(
                    self.options, include_paths=(folder, *self.options.include_paths)
                )
            elif suffix in _BINARY_KINDS:
                if self.name_expressions:
                    raise ValueError(
                        f"RawModule: name_expressions need source code; {self.path!r} is "
                        "compiled already (get its functions by their symbol names)"
                    )
                with open(self.path, "rb") as f:
                    data = f.read()
                self._file = _FileCode(data, _BINARY_KINDS[suffix], _file_arch(data, suffix))
            else:
                raise ValueError(
                    f"RawModule: cannot load {self.path!r}: expected a .cu, .cubin, .ptx or "
                    ".fatbin file"
                )
        self._object_code: Any = None
        self._image: ModuleImage | None = None
        self._functions: dict[str, Kernel] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        what = f"path={self.path!r}" if self.path is not None else f"{len(self.code or '')} chars"
        return f"<ignis.RawModule {what}>"

    # --- compiling ------------------------------------------------------------------------------

    def compile(self, arch: str | None = None) -> ObjectCode:
        """The compiled program (no GPU needed): for ``arch`` (``"sm_90a"``), else for the
        architecture the module's functions use (``options.arch``, the current device's, or
        :func:`ignis.jit.default_arch` where there is no GPU). Only the latter becomes the
        module's own code; compiling for another ``arch`` is for checks and shipping.

        Raises:
            CompileError: NVRTC rejected the source (the log says why).
            TypeError: the module was loaded from a compiled file.
        """
        if self.code is None or self._file is not None:
            raise TypeError(f"RawModule.compile: {self.path!r} is compiled already")
        if arch is not None:
            opts = dataclasses.replace(self.options, arch=arch)
            return compile(self.code, options=opts, name_expressions=self.name_expressions)
        return self._code()

    def _code(self) -> Any:
        """The module's object code (compiled once, at first use)."""
        if self._object_code is None:
            with self._lock:
                if self._object_code is None:
                    if self._file is not None:
                        self._object_code = self._file
                    else:
                        self._object_code = compile(
                            self.code,  # type: ignore[arg-type]
                            options=self._device_options(),
                            name_expressions=self.name_expressions,
                        )
        return self._object_code

    def _device_options(self) -> CompileOptions:
        from ._bindings import driver_available
        from ._device import current_device

        opts = self.options
        if opts.arch is None and driver_available():
            opts = opts._with_device_arch(current_device().arch)
        return opts

    def _module_image(self) -> ModuleImage:
        code = self._code()
        if self._image is None:
            with self._lock:
                if self._image is None:
                    self._image = ModuleImage(code.code, self.path or "RawModule")
        return self._image

    # --- what the module holds ------------------------------------------------------------------

    def get_function(self, name: str) -> Kernel:
        """The kernel ``name`` of this module: an ``extern "C"`` name, a name expression given
        in ``name_expressions`` (``"kernel<float>"``), or a symbol of a compiled file.

        The result is a :class:`~ignis.Kernel` (``fn.launch(grid, block, args, shared_mem=0,
        stream=None)``, or CuPy's ``fn(grid, block, args, shared_mem=0, stream=None)``) whose
        function comes from this module's one loaded module. The same object comes back for
        the same name.

        Raises:
            ValueError: a template name not listed in ``name_expressions``.
            LaunchError: the source declares no ``__global__`` function of that name.
            CudaError: the loaded module has no such function (CUDA_ERROR_NOT_FOUND).
            NoDeviceError: the program compiled, but there is no GPU to load it on.
        """
        if not isinstance(name, str) or not name:
            raise TypeError(f"RawModule.get_function: name must be a non-empty str, got {name!r}")
        kernel = self._functions.get(name)
        if kernel is not None:
            return kernel
        self._check_name(name, "get_function")
        code = self._code()
        image = self._module_image()
        try:
            if self._file is not None:
                kernel = _UntypedKernel.from_object_code(code, name, None, image=image)
            else:
                kernel = Kernel.from_object_code(code, name, self.code, image=image)
        except LaunchError as exc:
            raise LaunchError(f"RawModule.get_function({name!r}): {exc}") from None
        _require_gpu(f"RawModule.get_function({name!r})", code)
        from ._device import current_device

        kernel._state(current_device())  # the function is looked up now: a bad name fails here
        with self._lock:
            kernel = self._functions.setdefault(name, kernel)
        return kernel

    def get_global(self, name: str) -> Any:
        """The ``__device__`` or ``__constant__`` variable ``name`` (a name expression given in
        ``name_expressions`` for a template variable) on the current device, as an
        :class:`~ignis.NvArray` of uint8 of the variable's size in bytes that views its memory
        (no copy): write it with ``g.copy_(host_bytes)``, read it with ``g.to_host()``, hand
        it to other libraries through ``__cuda_array_interface__``. It keeps the module loaded.

        Example: ``mod.get_global("coeffs").copy_(np.arange(4, dtype=np.float32).view(np.uint8))``.

        Raises:
            ValueError: a template name not listed in ``name_expressions``.
            CudaError: the module has no variable of that name (CUDA_ERROR_NOT_FOUND).
            NoDeviceError: there is no GPU to load the module on.
        """
        if not isinstance(name, str) or not name:
            raise TypeError(f"RawModule.get_global: name must be a non-empty str, got {name!r}")
        self._check_name(name, "get_global")
        code = self._code()
        _require_gpu(f"RawModule.get_global({name!r})", code)
        from . import _dtypes as dt
        from ._array._backend import get_backend
        from ._array._device import as_device
        from ._array.array import NvArray
        from ._device import current_device

        device = current_device()
        image = self._module_image()
        ptr, nbytes = image.global_(device, code.lowered_names.get(name, name))
        dev = as_device(f"cuda:{device.ordinal}")
        backend = get_backend(dev)
        # The image owns the memory (a module's globals live until it is unloaded).
        storage = backend.wrap_external(ptr, nbytes, image)
        return NvArray._make(
            storage, 0, (nbytes,), (1,), dt.uint8, dev, backend, backend.default_stream()
        )

    def _check_name(self, name: str, what: str) -> None:
        if "<" in name and self._file is None and name not in self.name_expressions:
            raise ValueError(
                f"RawModule.{what}({name!r}): a template instance must be listed in "
                f"name_expressions (given: {list(self.name_expressions)})"
            )


class _UntypedKernel(Kernel):
    """A kernel of a compiled file: no source gives its parameter types. Arrays and buffers
    are passed as device pointers (8-byte parameters); every other argument is raw bytes of
    the driver-reported size (NumPy scalars, bytes, ctypes objects)."""

    def _install(self, state: Any) -> None:
        super()._install(state)
        ordinal = state.device.ordinal
        inner = self._launchers[ordinal]

        def launch(
            grid: Any,
            block: Any,
            args: Sequence[Any] = (),
            *,
            shared_mem: int = 0,
            stream: Any = None,
            cooperative: bool = False,
        ) -> None:
            inner(
                grid,
                block,
                [_untyped_arg(v) for v in args],
                shared_mem=shared_mem,
                stream=stream,
                cooperative=cooperative,
            )

        launch.__doc__ = Kernel.launch.__doc__
        self._launchers[ordinal] = launch
        if self.__dict__.get("launch") is inner:
            self.launch = launch  # type: ignore[method-assign]


def _untyped_arg(value: Any) -> Any:
    """An argument of an untyped kernel: a device array or buffer as its 8-byte address."""
    if isinstance(value, (bytes, bytearray, memoryview, np.generic, np.ndarray)):
        return value
    ptr = getattr(value, "ptr", None)
    if isinstance(ptr, int) and not isinstance(ptr, bool):
        return np.uint64(ptr)
    cai = getattr(value, "__cuda_array_interface__", None)
    if isinstance(cai, dict):
        return np.uint64(int(cai["data"][0]))
    data_ptr = getattr(value, "data_ptr", None)
    if callable(data_ptr):
        return np.uint64(int(data_ptr()))
    return value


def _require_gpu(what: str, code: Any) -> None:
    from ._bindings import driver_available, driver_unavailable_reason

    if not driver_available():
        raise NoDeviceError(
            f"{what}: the module ({code.kind} for {code.arch}) needs a GPU to load on "
            f"({driver_unavailable_reason()}); RawModule.compile() compiles without one"
        )


def _as_options(options: Any) -> CompileOptions:
    if options is None:
        return CompileOptions()
    if isinstance(options, CompileOptions):
        return options
    if isinstance(options, str):
        options = (options,)
    if isinstance(options, (tuple, list)) and all(isinstance(o, str) for o in options):
        return CompileOptions(extra=tuple(options))
    raise TypeError(
        "RawModule: options must be a CompileOptions or a tuple of NVRTC flags, got "
        f"{type(options).__name__}"
    )


def _name_list(names: Iterable[str] | None) -> tuple[str, ...]:
    if names is None:
        return ()
    if isinstance(names, str):
        raise TypeError(
            f"RawModule: name_expressions must be a list of names, got the string {names!r}"
        )
    out = tuple(names)
    bad = [n for n in out if not isinstance(n, str) or not n]
    if bad:
        raise TypeError(f"RawModule: name_expressions must be non-empty strings, got {bad[0]!r}")
    return out


def _file_arch(data: bytes, suffix: str) -> str:
    """The architecture a PTX file targets (``.target sm_90``); ``"unknown"`` for binaries."""
    if suffix == ".ptx":
        m = re.search(rb"^\s*\.target\s+(\w+)", data, re.MULTILINE)
        if m:
            return m.group(1).decode()
    return "unknown"
