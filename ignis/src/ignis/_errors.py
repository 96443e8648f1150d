"""The exception hierarchy of ignis.

Every error the library raises on purpose derives from :class:`IgnisError`. Messages name the
operation, what was given and what was expected, e.g.
``matmul: shapes (3, 4) and (5, 6) do not align (4 != 5)``.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "IgnisError",
    "CudaError",
    "CompileError",
    "OutOfMemoryError",
    "NoDeviceError",
    "NvrtcNotFoundError",
    "ShapeError",
    "DTypeError",
    "DeviceMismatchError",
    "LaunchError",
]

# Errors after which the CUDA context is unusable: every later call in this process fails too.
_STICKY_ERRORS = frozenset(
    {
        "CUDA_ERROR_ILLEGAL_ADDRESS",
        "CUDA_ERROR_ILLEGAL_INSTRUCTION",
        "CUDA_ERROR_MISALIGNED_ADDRESS",
        "CUDA_ERROR_INVALID_ADDRESS_SPACE",
        "CUDA_ERROR_INVALID_PC",
        "CUDA_ERROR_LAUNCH_FAILED",
        "CUDA_ERROR_HARDWARE_STACK_ERROR",
        "CUDA_ERROR_ASSERT",
        "CUDA_ERROR_ECC_UNCORRECTABLE",
        "CUDA_ERROR_CONTEXT_IS_DESTROYED",
    }
)


class IgnisError(Exception):
    """Base class of every error raised by ignis."""


class CudaError(IgnisError, RuntimeError):
    """A CUDA driver or NVRTC call returned a failure status.

    Attributes:
        code: the status name, e.g. ``"CUDA_ERROR_INVALID_VALUE"``.
        description: the driver's own explanation of the status.
        call: the API function that failed, e.g. ``"cuMemAlloc"``.
    """

    def __init__(self, code: str, description: str, call: str, value: int | None = None):
        self.code = code
        self.description = description
        self.call = call
        self.value = value
        message = f"{code}: {description} (in {call})"
        if code in _STICKY_ERRORS:
            message += (
                ". This error is sticky: the CUDA context of this process is now unusable and "
                "every later GPU call will fail. Save what you need from host memory and restart "
                "the process; run the failing kernel under compute-sanitizer to find the bad "
                "access."
            )
        super().__init__(message)

    @property
    def is_sticky(self) -> bool:
        """True when the error leaves the context unusable (illegal address, kernel trap...)."""
        return self.code in _STICKY_ERRORS


class OutOfMemoryError(CudaError, MemoryError):
    """A device allocation could not be satisfied.

    Attributes:
        requested: bytes asked for.
        free, total: the device's free and total memory in bytes when the request failed.
        device: the ordinal of the device.
    """

    def __init__(self, requested: int, free: int, total: int, device: int, call: str):
        self.requested = requested
        self.free = free
        self.total = total
        self.device = device
        IgnisError.__init__(self)
        self.code = "CUDA_ERROR_OUT_OF_MEMORY"
        self.description = "out of memory"
        self.call = call
        self.value = None
        self.args = (
            f"out of memory on cuda:{device}: tried to allocate {_fmt_bytes(requested)} "
            f"({requested} bytes); {_fmt_bytes(free)} free of {_fmt_bytes(total)} total "
            f"(in {call})",
        )

    def __str__(self) -> str:
        return self.args[0]


class NoDeviceError(IgnisError, RuntimeError):
    """A GPU operation was requested but no usable CUDA device or driver exists."""


class NvrtcNotFoundError(IgnisError, RuntimeError):
    """NVRTC, the CUDA run-time compiler, cannot be used: its library (``libnvrtc``) or
    cuda-bindings is not installed. The message says which package installs it.

    Not a :class:`CompileError`: nothing is wrong with the program being compiled, so a handler
    that shows the NVRTC log and the numbered source would mislead; like :class:`NoDeviceError`
    it reports a missing part of the installation.
    """


class LaunchError(IgnisError, ValueError):
    """A kernel launch was refused before reaching the driver: bad configuration or arguments."""


class ShapeError(IgnisError, ValueError):
    """Operand shapes are incompatible with the operation."""


class DTypeError(IgnisError, TypeError):
    """An operand's dtype is not supported by the operation."""


class DeviceMismatchError(IgnisError, ValueError):
    """Operands live on different devices."""


class CompileError(IgnisError, RuntimeError):
    """NVRTC rejected a program.

    Attributes:
        log: the NVRTC compilation log.
        source: the program source.
        name: the program's file name as shown in the log.
        options: the NVRTC options used.
    """

    def __init__(self, log: str, source: str, name: str, options: Sequence[str]):
        self.log = log
        self.source = source
        self.name = name
        self.options = tuple(options)
        super().__init__(
            f"NVRTC failed to compile {name!r} with options {' '.join(self.options)}:\n"
            f"{log.strip()}\n(source with line numbers: CompileError.numbered_source())"
        )

    def numbered_source(self) -> str:
        """The source with 1-based line numbers, to read alongside :attr:`log`."""
        lines = self.source.splitlines()
        width = len(str(len(lines)))
        return "\n".join(f"{i:>{width}} | {line}" for i, line in enumerate(lines, 1))


def _fmt_bytes(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.2f} {unit}" if unit != "B" else f"{int(value)} B"
        value /= 1024
    raise AssertionError("unreachable")
