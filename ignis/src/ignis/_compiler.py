"""Run-time compilation of CUDA C++ with NVRTC.

:func:`compile` turns a CUDA C++ source into an :class:`ObjectCode`: a cubin for the target
architecture, or PTX where this NVRTC is older than the target (the driver then finishes the job).
Results go through two caches (see :mod:`ignis._compile_cache`): one in the process and one on disk.

Example::

    >>> import ignis
    >>> src = 'extern "C" __global__ void scale(float* x, float a) { x[threadIdx.x] *= a; }'
    >>> obj = ignis.compile(src, ignis.CompileOptions(arch="sm_90"))
    >>> obj.kind, obj.arch
    ('cubin', 'sm_90')

Without ``arch``, code is compiled for the current device; where there is no GPU, for
:func:`default_arch` (``IGNIS_ARCH``, else ``sm_90``), so that compiling, and its errors, never
need a GPU.

Headers of the kernel library (``#include "ignis_types.cuh"``) are found through an include path
that every compilation gets. NVRTC here has no CUDA toolkit headers (no ``cuda_fp16.h``, no
``<cstdint>``); ``ignis_types.cuh`` provides what kernels need instead.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import logging
import os
import re
import types
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ._bindings import driver_available, nv
from ._errors import CompileError, CudaError, IgnisError
from ._sources import cuda_src_dir

__all__ = [
    "CompileOptions",
    "ObjectCode",
    "compile",
    "nvrtc_compile",
    "supported_archs",
    "known_archs",
    "default_arch",
    "DEFAULT_ARCH",
]

logger = logging.getLogger("ignis")

# sm_90, sm_90a, sm_100f (real GPU code) or compute_90 (PTX for a virtual architecture).
_ARCH_RE = re.compile(r"^(sm|compute)_(\d{2,3})([af]?)$")
# A macro name, optionally function-like: NAME or NAME(a,b).
_MACRO_RE = re.compile(r"^[A-Za-z_]\w*(\([\w\s,.]*\))?$")

# Every compute capability NVIDIA has defined a PTX target for (major * 10 + minor): Fermi 2.x
# to Blackwell 12.x, as LLVM's NVPTX backend lists them; NVRTC 13.0 added 88 and 110 (and
# dropped everything before 75). An architecture a user names must be one of these, so that a
# typo (sm_900, sm_809) is an error instead of quietly becoming PTX for the newest one. Update
# it when NVIDIA announces an architecture; a device's own architecture is trusted even where
# this table does not know it yet (a GPU newer than this ignis).
KNOWN_COMPUTE_CAPABILITIES: tuple[int, ...] = (
    20, 21, 30, 32, 35, 37, 50, 52, 53, 60, 61, 62, 70, 72, 75,
    80, 86, 87, 88, 89, 90, 100, 101, 103, 110, 120, 121,
)  # fmt: skip

# The architecture to compile for where CompileOptions.arch is None and there is no GPU (CI,
# ahead-of-time compilation, checking a kernel on a laptop). sm_90 (Hopper: H100/H200) because
# it is the GPU ignis is built and benchmarked on, every NVRTC ignis supports (12.6 and later,
# 13.x) can generate it, and the kernel library needs sm_80 or newer features (bfloat16
# instructions, cp.async) with some kernels written for sm_90 (wgmma, TMA): an older default
# would compile a subset of the library differently from where it runs. IGNIS_ARCH overrides it.
DEFAULT_ARCH = "sm_90"
ARCH_ENV = "IGNIS_ARCH"


def known_archs() -> tuple[int, ...]:
    """The compute capabilities ignis accepts in an ``arch`` (``sm_XX`` / ``compute_XX``,
    with an ``a`` or ``f`` suffix where NVIDIA defines one), ascending: ``(20, ..., 90, ...)``."""
    return KNOWN_COMPUTE_CAPABILITIES


def parse_arch(arch: str, *, known: bool = True) -> tuple[str, int, str]:
    """Split ``"sm_90a"`` into ``("sm", 90, "a")``.

    Raises ValueError for anything else, and (``known=True``) for an architecture NVIDIA has
    not defined (``"sm_999"``); ``known=False`` checks the form only (for a device's own arch).
    """
    m = _ARCH_RE.match(arch) if isinstance(arch, str) else None
    if m is None:
        raise ValueError(
            f"CompileOptions: arch must name a GPU architecture such as 'sm_90' (cubin) or "
            f"'compute_90' (PTX), got {arch!r}"
        )
    prefix, number, suffix = m.group(1), int(m.group(2)), m.group(3)
    if known and number not in KNOWN_COMPUTE_CAPABILITIES:
        raise ValueError(
            f"CompileOptions: {arch!r} is not a known NVIDIA GPU architecture; expected sm_XX "
            f"(cubin) or compute_XX (PTX) with XX one of "
            f"{', '.join(map(str, KNOWN_COMPUTE_CAPABILITIES))} (e.g. 'sm_90' for H100/H200). "
            "For the current GPU's own architecture leave arch=None"
        )
    return prefix, number, suffix


def default_arch() -> str:
    """The architecture :func:`compile` targets when ``CompileOptions.arch`` is None and no
    GPU exists: the ``IGNIS_ARCH`` environment variable (validated like ``arch``), else
    ``"sm_90"``. Where a GPU exists its own architecture is used instead, and ``IGNIS_ARCH``
    is ignored: the code must load on that GPU.

    Example: ``IGNIS_ARCH=sm_80 python -m pytest`` compiles for A100 on a machine without a GPU.
    """
    value = os.environ.get(ARCH_ENV)
    if not value:
        return DEFAULT_ARCH
    try:
        parse_arch(value)
    except ValueError as exc:
        raise ValueError(f"{ARCH_ENV}: {exc}") from None
    return value


@functools.lru_cache(maxsize=1)
def _nvrtc_supported_archs() -> tuple[int, ...]:
    return tuple(sorted(int(a) for a in nv.nvrtcGetSupportedArchs()))


def supported_archs() -> tuple[int, ...]:
    """Compute capabilities this NVRTC can generate code for, ascending, e.g. ``(75, 80, 90)``."""
    return _nvrtc_supported_archs()


def select_target(arch: str) -> tuple[str, str]:
    """``(kind, target)`` that NVRTC should build for ``arch``.

    ``"sm_90"`` gives ``("cubin", "sm_90")`` when NVRTC supports 90. When it does not (the
    device is newer than the NVRTC), the result is PTX for the newest architecture NVRTC supports
    that is not newer than the target, e.g. ``("ptx", "compute_120")``; the driver compiles that
    PTX for the device when the module is loaded, and the ``ignis`` logger warns (once per
    architecture). ``"compute_XX"`` always asks for PTX.
    Raises ValueError when every supported architecture is newer than ``arch``.
    """
    # The form only: options were validated when made, and a device's own architecture is
    # real even where the table of known ones is older than the device.
    prefix, number, suffix = parse_arch(arch, known=False)
    supported = supported_archs()
    if number in supported:
        return ("cubin" if prefix == "sm" else "ptx"), f"{prefix}_{number}{suffix}"
    older = [a for a in supported if a <= number]
    if not older:
        raise ValueError(
            f"compile: architecture {arch!r} is older than every architecture this NVRTC "
            f"{_version_text()} supports ({', '.join(map(str, supported))}); install an older "
            "NVRTC or compile for a newer GPU"
        )
    # Architecture-specific suffixes (sm_90a) do not carry over to another architecture.
    target = f"compute_{older[-1]}"
    _warn_ptx_fallback(arch, target)
    return "ptx", target


_warned_fallbacks: set[tuple[str, str]] = set()


def _warn_ptx_fallback(arch: str, target: str) -> None:
    # A warning, not a debug message: PTX is compiled by the driver at every module load (slower
    # first launches) and misses what the newer architecture adds. Once per architecture and
    # process: every kernel of the library would repeat it.
    if (arch, target) in _warned_fallbacks:
        return
    _warned_fallbacks.add((arch, target))
    logger.warning(
        "NVRTC %s cannot generate code for %s; generating PTX for %s instead, which the driver "
        "compiles for the GPU when the module is loaded. A newer NVRTC (no newer than the "
        "driver's CUDA version) generates native code.",
        _version_text(),
        arch,
        target,
    )


def _version_text() -> str:
    try:
        major, minor = nv.nvrtcVersion()
        return f"{major}.{minor}"
    except IgnisError:  # pragma: no cover - only for messages
        return "(unknown version)"


def _flag(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"CompileOptions: {what} must be True or False, got {value!r}")
    return value


def _strings(value: Any, what: str) -> tuple[str, ...]:
    # A lone string is one item, not a sequence of characters.
    items = [value] if isinstance(value, (str, os.PathLike)) else list(value)
    out = []
    for item in items:
        if not isinstance(item, (str, os.PathLike)):
            raise TypeError(f"CompileOptions: {what} must be strings, got {item!r}")
        out.append(os.fspath(item))
    return tuple(out)


def _define_value(name: str, value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):  # C has no True/False; a macro gets 1 or 0
        return "1" if value else "0"
    if isinstance(value, (int, float, str)):
        return str(value)
    raise TypeError(
        f"CompileOptions: define {name!r} must have a str, int, float, bool or None value, "
        f"got {type(value).__name__}"
    )


def _normalize_defines(defines: Any) -> tuple[tuple[str, str | None], ...]:
    pairs = list(defines.items()) if isinstance(defines, Mapping) else list(defines)
    out: dict[str, str | None] = {}
    for pair in pairs:
        if isinstance(pair, str):  # ("NDEBUG",) style: a define with no value
            pair = (pair, None)
        if not isinstance(pair, tuple | list) or len(pair) != 2:
            raise TypeError(
                f"CompileOptions: defines must be a mapping or (name, value) pairs, got {pair!r}"
            )
        name, value = pair
        if not isinstance(name, str) or not _MACRO_RE.match(name):
            raise ValueError(f"CompileOptions: {name!r} is not a valid macro name")
        if name in out:
            raise ValueError(f"CompileOptions: macro {name!r} is defined twice")
        out[name] = _define_value(name, value)
    # Order-independent: the same set of macros always gives the same options (and cache key).
    return tuple(sorted(out.items()))


@dataclass(frozen=True)
class CompileOptions:
    """NVRTC options for :func:`compile`.

    Attributes:
        arch: target architecture, ``"sm_90"`` for a cubin or ``"compute_90"`` for PTX, one NVIDIA
            has defined (:func:`known_archs`; ValueError otherwise); None means the architecture
            of the current device, or :func:`default_arch` where there is no GPU.
        std: C++ dialect (``--std``).
        fmad: contract multiply-add into FMA (``--fmad``).
        fast_math: ``--use_fast_math`` (approximate division, sqrt, transcendentals; flush to zero).
        lineinfo: keep source line information for profilers (``--generate-line-info``).
        debug: device debug information, optimizations off (``--device-debug``).
        max_registers: upper bound on registers per thread (``--maxrregcount``).
        defines: macros, as a mapping ``{"N": 4, "NDEBUG": None}`` or ``(name, value)`` pairs;
            the order does not matter.
        include_paths: extra header folders, searched in order before the kernel library's.
        extra: further raw NVRTC flags, passed last and unchanged.
        relocatable: relocatable device code (``--relocatable-device-code=true``), for linking.

    Example::

        >>> CompileOptions(arch="sm_80", defines={"BLOCK": 256}).nvrtc_options()[:2]
        ('--gpu-architecture=sm_80', '--std=c++17')
    """

    arch: str | None = None
    std: str = "c++17"
    fmad: bool = True
    fast_math: bool = False
    lineinfo: bool = False
    debug: bool = False
    max_registers: int | None = None
    defines: Any = ()
    include_paths: tuple[str, ...] = ()
    extra: tuple[str, ...] = ()
    relocatable: bool = False

    def __post_init__(self) -> None:
        if self.arch is not None:
            parse_arch(self.arch)
        if not isinstance(self.std, str) or not self.std:
            raise TypeError(
                f"CompileOptions: std must be a string such as 'c++17', got {self.std!r}"
            )
        for what in ("fmad", "fast_math", "lineinfo", "debug", "relocatable"):
            _flag(getattr(self, what), what)
        mr = self.max_registers
        if mr is not None and (isinstance(mr, bool) or not isinstance(mr, int) or mr <= 0):
            raise ValueError(
                f"CompileOptions: max_registers must be a positive int or None, got {mr!r}"
            )
        set_ = object.__setattr__  # frozen: normalize once, here
        set_(self, "defines", _normalize_defines(self.defines))
        paths = _strings(self.include_paths, "include_paths")
        set_(self, "include_paths", tuple(os.path.abspath(p) for p in paths))
        set_(self, "extra", _strings(self.extra, "extra"))

    def resolved_arch(self) -> str:
        """:attr:`arch`; when it is None, the current device's architecture, or where there is
        no GPU :func:`default_arch` (``IGNIS_ARCH``, else ``"sm_90"``)."""
        if self.arch is not None:
            return self.arch
        if not driver_available():  # compiling needs no GPU: compile for the default
            return default_arch()
        from ._device import current_device  # imported late: the device module needs a GPU

        return current_device().arch

    def resolved(self) -> CompileOptions:
        """A copy with :attr:`arch` set to :meth:`resolved_arch` (itself when it is set)."""
        if self.arch is not None:
            return self
        return self._with_device_arch(self.resolved_arch())

    def _with_device_arch(self, arch: str) -> CompileOptions:
        """A copy for a device's own ``arch``: checked for its form only, since a GPU newer than
        this ignis has an architecture the table of known ones does not list yet."""
        parse_arch(arch, known=False)
        out = copy.copy(self)
        object.__setattr__(out, "arch", arch)  # frozen; every other field is validated already
        return out

    def target(self) -> tuple[str, str]:
        """``(kind, target)``: what NVRTC builds, e.g. ``("cubin", "sm_90")``; see select_target."""
        return select_target(self.resolved_arch())

    def nvrtc_options(self) -> tuple[str, ...]:
        """The NVRTC command-line options these settings stand for, as passed to NVRTC."""
        _, target = self.target()
        opts = [
            f"--gpu-architecture={target}",
            f"--std={self.std}",
            f"--fmad={'true' if self.fmad else 'false'}",
        ]
        if self.fast_math:
            opts.append("--use_fast_math")
        if self.lineinfo:
            opts.append("--generate-line-info")
        if self.debug:
            opts.append("--device-debug")
        if self.max_registers is not None:
            opts.append(f"--maxrregcount={self.max_registers}")
        if self.relocatable:
            opts.append("--relocatable-device-code=true")
        # Functions without __host__/__device__ are device functions: kernels need no annotations.
        opts.append("-default-device")
        opts.extend(f"-D{n}" if v is None else f"-D{n}={v}" for n, v in self.defines)
        opts.extend(f"-I{p}" for p in self.include_paths)
        opts.append(f"-I{cuda_src_dir()}")
        opts.extend(self.extra)
        return tuple(opts)

    def with_arch(self, arch: str) -> CompileOptions:
        """A copy with :attr:`arch` set."""
        return dataclasses.replace(self, arch=arch)


@dataclass(frozen=True)
class ObjectCode:
    """A compiled program: cubin or PTX, ready to be loaded as a module.

    Attributes:
        code: the cubin bytes, or the PTX text (UTF-8, without a trailing NUL).
        kind: ``"cubin"`` or ``"ptx"``.
        arch: what the code was built for: ``"sm_90"`` (cubin) or ``"compute_90"`` (PTX).
        lowered_names: name expression (``"axpy<float>"``) -> mangled symbol in the module.
        log: NVRTC's messages (warnings); empty when there were none.
        options: the NVRTC options used.
        name: the program's file name, as NVRTC saw it.
    """

    code: bytes = field(repr=False)
    kind: str
    arch: str
    lowered_names: Mapping[str, str] = field(default_factory=dict, hash=False)
    log: str = ""
    options: tuple[str, ...] = ()
    name: str = "kernel.cu"

    def __post_init__(self) -> None:
        if self.kind not in ("cubin", "ptx"):
            raise ValueError(f"ObjectCode: kind must be 'cubin' or 'ptx', got {self.kind!r}")
        # Read-only: one ObjectCode is shared by every caller that hits the cache.
        object.__setattr__(self, "lowered_names", types.MappingProxyType(dict(self.lowered_names)))
        object.__setattr__(self, "options", tuple(self.options))

    def symbol(self, name: str) -> str:
        """The symbol to look up in the module: the lowered name of a name expression, or
        ``name`` itself (an ``extern "C"`` function)."""
        return self.lowered_names.get(name, name)

    def __repr__(self) -> str:
        return (
            f"ObjectCode(kind={self.kind!r}, arch={self.arch!r}, name={self.name!r}, "
            f"{len(self.code)} bytes, lowered_names={dict(self.lowered_names)!r})"
        )


def _check_inputs(
    source: Any, options: Any, name_expressions: Any, name: Any, headers: Any
) -> tuple[str, CompileOptions, tuple[str, ...], str, dict[str, str]]:
    if not isinstance(source, str):
        raise TypeError(f"compile: source must be a str of CUDA C++, got {type(source).__name__}")
    if options is None:
        options = CompileOptions()
    elif not isinstance(options, CompileOptions):
        raise TypeError(
            f"compile: options must be a CompileOptions or None, got {type(options).__name__}"
        )
    if not isinstance(name, str) or not name:
        raise TypeError(f"compile: name must be a non-empty str such as 'kernel.cu', got {name!r}")
    if isinstance(name_expressions, str):  # one expression, not its characters
        name_expressions = (name_expressions,)
    exprs = tuple(dict.fromkeys(name_expressions))  # unique, in order
    for e in exprs:
        if not isinstance(e, str) or not e:
            raise TypeError(f"compile: name expressions must be non-empty strings, got {e!r}")
    if headers is None:
        headers = {}
    if not isinstance(headers, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
    ):
        raise TypeError("compile: headers must map include names to header source strings")
    return source, options, exprs, name, dict(headers)


def compile(  # noqa: A001 - the natural name for the operation; shadows the builtin only here
    source: str,
    options: CompileOptions | None = None,
    name_expressions: Iterable[str] = (),
    name: str = "kernel.cu",
    headers: Mapping[str, str] | None = None,
) -> ObjectCode:
    """Compile CUDA C++ ``source`` with NVRTC, through the in-process and on-disk caches.

    Args:
        source: the program text.
        options: :class:`CompileOptions`; default: the current device's architecture, or
            where there is no GPU :func:`default_arch` (``IGNIS_ARCH``, else ``"sm_90"``).
        name_expressions: C++ names to look up after compilation, e.g. ``"axpy<float>"`` for a
            template instantiation; their mangled names come back in ``lowered_names``.
        name: the file name NVRTC reports in messages.
        headers: in-memory headers, ``{include name: source}``.

    Raises:
        CompileError: NVRTC rejected the program or its options (the log says why), or NVRTC
            supports no architecture old enough for ``options.arch``.
        NvrtcNotFoundError: the NVRTC library or cuda-bindings is not installed (the message
            says which extra installs it).
        ValueError: ``IGNIS_ARCH`` is set to something that is not a known architecture.

    Example::

        >>> src = "template <class T> __global__ void fill(T* x, T v) { x[threadIdx.x] = v; }"
        >>> obj = compile(src, CompileOptions(arch="sm_80"), name_expressions=["fill<float>"])
        >>> obj.lowered_names["fill<float>"]
        '_Z4fillIfEvPT_S0_'
    """
    from . import _compile_cache  # the cache module imports this one

    source, options, exprs, name, headers = _check_inputs(
        source, options, name_expressions, name, headers
    )
    options = options.resolved()
    _target_or_error(options, source, name)  # before the cache key, which needs the target
    return _compile_cache.cached_compile(source, options, exprs, name, headers)


def nvrtc_compile(
    source: str,
    options: CompileOptions,
    name_expressions: tuple[str, ...] = (),
    name: str = "kernel.cu",
    headers: Mapping[str, str] | None = None,
) -> ObjectCode:
    """Compile with NVRTC now, bypassing the caches; ``options.arch`` None means the device's
    (or :func:`default_arch` without a GPU)."""
    headers = dict(headers or {})
    kind, target = _target_or_error(options, source, name)
    opts = options.nvrtc_options()
    prog = nv.nvrtcCreateProgram(
        source.encode("utf-8"),
        name.encode("utf-8"),
        len(headers),
        [v.encode("utf-8") for v in headers.values()],
        [k.encode("utf-8") for k in headers],
    )
    try:
        for expr in name_expressions:
            nv.nvrtcAddNameExpression(prog, expr.encode("utf-8"))
        try:
            nv.nvrtcCompileProgram(prog, len(opts), [o.encode("utf-8") for o in opts])
        except CudaError as exc:
            log = _program_log(prog)
            raise CompileError(log or str(exc), source, name, opts) from exc
        log = _program_log(prog)
        if kind == "cubin":
            code = _read_buffer(prog, nv.nvrtcGetCUBINSize, nv.nvrtcGetCUBIN)
        else:
            code = _read_buffer(prog, nv.nvrtcGetPTXSize, nv.nvrtcGetPTX).rstrip(b"\0")
        lowered = {
            expr: _text(nv.nvrtcGetLoweredName(prog, expr.encode("utf-8")))
            for expr in name_expressions
        }
    finally:
        nv.nvrtcDestroyProgram(prog)
    if log:
        logger.debug("NVRTC messages for %s:\n%s", name, log)
    return ObjectCode(code, kind, target, lowered, log, opts, name)


def _target_or_error(options: CompileOptions, source: str, name: str) -> tuple[str, str]:
    try:
        return options.target()
    except ValueError as exc:  # no architecture NVRTC can build for: a compile failure
        raise CompileError(str(exc), source, name, ()) from exc


def _read_buffer(prog: Any, size_fn: Any, get_fn: Any) -> bytes:
    # A fresh mutable buffer: the bindings write into it. (Never `b" " * n`: CPython shares
    # short bytes objects, and writing into one would corrupt it for the whole process.)
    buf = bytearray(int(size_fn(prog)))
    get_fn(prog, buf)
    return bytes(buf)


def _program_log(prog: Any) -> str:
    return _text(_read_buffer(prog, nv.nvrtcGetProgramLogSize, nv.nvrtcGetProgramLog)).strip()


def _text(value: bytes | str) -> str:
    if isinstance(value, bytes):
        return value.rstrip(b"\0").decode("utf-8", errors="replace")
    return str(value)
