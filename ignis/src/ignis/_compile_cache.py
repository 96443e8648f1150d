"""The two compile caches: one in the process, one on disk.

A compilation is identified by a SHA-256 key over everything that can change its result: the
source, the NVRTC options (macros already sorted, so their order does not matter; the rest keep
their order because include-path order decides which header wins), the target architecture, the
NVRTC version, the contents of every local header the source includes (recursively), the
in-memory headers, the name expressions, the program name and :data:`SCHEMA_VERSION`.

1. In the process: key -> :class:`~ignis.ObjectCode`, thread-safe, least recently used entries
   dropped beyond :data:`MEMORY_CAPACITY`. The key contains the architecture, so devices of
   different architectures never share an entry. Computing the key reads the headers; that work
   is remembered while the headers and the folders searched for them keep their modification
   times, so a repeated compile costs a few file stats.
2. On disk: one file per key in :func:`cache_dir`. A file is a fixed header (magic, schema,
   payload length, SHA-256 of the payload) followed by the payload (a length-prefixed JSON
   description, then the code). Writes go to a temporary file in the same folder and are renamed
   into place, so readers never see a partial entry. A damaged entry is logged, deleted and
   recompiled; a folder that cannot be written (read-only, full) only costs a warning.

Environment (read at each use):
    ``IGNIS_CACHE_DIR``: the folder; empty disables the disk cache. Default:
    ``$XDG_CACHE_HOME/ignis``, else ``~/.cache/ignis``.
    ``IGNIS_DISABLE_DISK_CACHE=1``: disables the disk cache.
"""

from __future__ import annotations

import collections
import hashlib
import json
import logging
import os
import re
import struct
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from . import _caches
from ._bindings import nvrtc_version
from ._compiler import CompileOptions, ObjectCode, nvrtc_compile
from ._sources import cuda_src_dir, local_headers

__all__ = [
    "SCHEMA_VERSION",
    "CacheStats",
    "cache_dir",
    "cache_key",
    "cache_stats",
    "cached_compile",
    "clear_cache",
    "entry_path",
]

logger = logging.getLogger("ignis")

SCHEMA_VERSION = 1
"""Bumped whenever the key or the entry format changes; old entries are then never read."""

MEMORY_CAPACITY = 4096
"""Most programs kept in the in-process cache."""

_MAGIC = b"IGNISJIT"
_HEADER = struct.Struct("<8sIQ32s")  # magic, schema, payload length, sha256(payload)
_META_LEN = struct.Struct("<I")
_SUFFIX = ".ignis-jit"
_ENTRY_RE = re.compile(r"^[0-9a-f]{64}" + re.escape(_SUFFIX) + "$")
_TMP_PREFIX = ".tmp-"
_FALSE = ("", "0", "false", "no", "off")
# Compiles of one key are serialized so that concurrent callers compile it once; keys share a
# small fixed set of locks rather than owning one each.
_KEY_LOCKS = tuple(threading.Lock() for _ in range(64))


@dataclass(frozen=True)
class CacheStats:
    """Counters of the compile caches since the process started.

    Attributes:
        memory_hits: compilations answered by the in-process cache.
        disk_hits: compilations answered by the disk cache.
        misses: compilations NVRTC actually ran (including ones that failed).
        disk_writes: entries written to disk.
        disk_errors: disk reads or writes that failed (permissions, full disk...).
        corrupt_entries: damaged disk entries found (and deleted).
        compile_seconds: wall time spent in NVRTC, in seconds.
        memory_entries: programs held in the in-process cache now.
        directory: the disk cache folder now, or None when the disk cache is off.
    """

    memory_hits: int
    disk_hits: int
    misses: int
    disk_writes: int
    disk_errors: int
    corrupt_entries: int
    compile_seconds: float
    memory_entries: int
    directory: str | None

    def as_dict(self) -> dict[str, Any]:
        """The counters as a plain dict."""
        return asdict(self)


class _State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.memory: collections.OrderedDict[str, ObjectCode] = collections.OrderedDict()
        self.counts = dict.fromkeys(
            ("memory_hits", "disk_hits", "misses", "disk_writes", "disk_errors", "corrupt_entries"),
            0,
        )
        self.compile_seconds = 0.0
        self.warned_dirs: set[str] = set()
        # (inputs) -> (key, watched paths, their stamps); see _fast_key.
        self.keys: dict[tuple[Any, ...], tuple[str, list[str], tuple[Any, ...]]] = {}

    def bump(self, counter: str, by: int = 1) -> None:
        with self.lock:
            self.counts[counter] += by


_state = _State()


def _memory_stats() -> tuple[int, int]:
    with _state.lock:  # a miss in memory is a disk hit or a compile
        c = _state.counts
        return c["memory_hits"], c["disk_hits"] + c["misses"]


_caches.register(
    "jit.compiled",
    lambda: len(_state.memory),
    clear=lambda: clear_cache(memory=True),
    max_entries=MEMORY_CAPACITY,
    description="source, options, arch, NVRTC and headers -> compiled code (in memory)",
    stats=_memory_stats,
)


# --- location --------------------------------------------------------------------------------


def cache_dir() -> Path | None:
    """The disk cache folder, or None when the disk cache is disabled.

    ``IGNIS_CACHE_DIR`` if set (empty: disabled), else ``$XDG_CACHE_HOME/ignis``, else
    ``~/.cache/ignis``. ``IGNIS_DISABLE_DISK_CACHE=1`` disables it. Read at every call.
    """
    if os.environ.get("IGNIS_DISABLE_DISK_CACHE", "").strip().lower() not in _FALSE:
        return None
    explicit = os.environ.get("IGNIS_CACHE_DIR")
    if explicit is not None:
        return Path(explicit).expanduser() if explicit.strip() else None
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg:
        return Path(xdg).expanduser() / "ignis"
    if os.name == "nt" and os.environ.get("LOCALAPPDATA"):
        return Path(os.environ["LOCALAPPDATA"]) / "ignis" / "cache"
    try:
        return Path.home() / ".cache" / "ignis"
    except RuntimeError:  # no home directory: nowhere sensible to keep files
        return None


def entry_path(directory: Path, key: str) -> Path:
    """The file of ``key``'s entry in ``directory``."""
    return directory / f"{key}{_SUFFIX}"


# --- key -------------------------------------------------------------------------------------


def _include_dirs(options: CompileOptions) -> list[str]:
    """Header folders NVRTC searches, in order: the options', the library's, raw ``-I`` flags."""
    dirs = list(options.include_paths) + [str(cuda_src_dir())]
    extra = list(options.extra)
    for i, flag in enumerate(extra):
        if flag in ("-I", "--include-path") and i + 1 < len(extra):
            dirs.append(extra[i + 1])
        elif flag.startswith("--include-path="):
            dirs.append(flag.split("=", 1)[1])
        elif flag.startswith("-I") and len(flag) > 2:
            dirs.append(flag[2:])
    return dirs


def cache_key(
    source: str,
    options: CompileOptions,
    name_expressions: tuple[str, ...] = (),
    name: str = "kernel.cu",
    headers: Mapping[str, str] | None = None,
) -> str:
    """The cache key (64 hex digits) of a compilation; ``options.arch`` must be set."""
    return _key_and_headers(source, options, name_expressions, name, headers)[0]


def _key_and_headers(
    source: str,
    options: CompileOptions,
    name_expressions: tuple[str, ...],
    name: str,
    headers: Mapping[str, str] | None,
) -> tuple[str, list[str]]:
    """The key and the header files that went into it."""
    if options.arch is None:
        raise ValueError("cache_key: options.arch must be resolved first")
    headers = dict(headers or {})
    h = hashlib.sha256()

    def part(label: str, data: str | bytes) -> None:
        raw = data.encode("utf-8") if isinstance(data, str) else data
        # Length-prefixed fields: no two different inputs can produce the same byte stream.
        h.update(label.encode() + b"\0" + len(raw).to_bytes(8, "little") + raw)

    major, minor = nvrtc_version()
    part("schema", str(SCHEMA_VERSION))
    part("nvrtc", f"{major}.{minor}")
    part("arch", options.arch)
    part("options", "\0".join(options.nvrtc_options()))
    part("name", name)
    part("source", source)
    for expr in sorted(set(name_expressions)):
        part("name_expression", expr)
    for include_name in sorted(headers):
        part("header_name", include_name)
        part("header_source", headers[include_name])
    source_dir = os.path.dirname(os.path.abspath(name))
    found = local_headers(source, _include_dirs(options), source_dir=source_dir, headers=headers)
    for location, contents in found.items():
        part("include", location)
        part("include_contents", contents)
    return h.hexdigest(), [p for p in found if not p.startswith("<memory>")]


def _stamp(paths: list[str]) -> tuple[tuple[int, int, int] | None, ...]:
    out: list[tuple[int, int, int] | None] = []
    for path in paths:
        try:
            st = os.stat(path)
            out.append((st.st_mtime_ns, st.st_size, st.st_ino))
        except OSError:
            out.append(None)
    return tuple(out)


def _fast_key(
    source: str,
    options: CompileOptions,
    name_expressions: tuple[str, ...],
    name: str,
    headers: Mapping[str, str] | None,
) -> str:
    """:func:`cache_key`, remembered while the headers it read and the folders searched for them
    are unchanged (same size, modification time and inode), so a repeated compile() does not
    re-read and re-hash its headers."""
    source_dir = os.path.dirname(os.path.abspath(name))
    memo_key = (
        source,
        options,
        tuple(sorted(set(name_expressions))),
        name,
        tuple(sorted((headers or {}).items())),
        os.getcwd(),  # relative names and include folders are relative to it
    )
    with _state.lock:
        memo = _state.keys.get(memo_key)
    if memo is not None and _stamp(memo[1]) == memo[2]:
        return memo[0]
    key, files = _key_and_headers(source, options, name_expressions, name, headers)
    # Watch the headers, the folders they are in and every folder searched: a new file there
    # could shadow one of them.
    watched = sorted(
        set(files)
        | {os.path.dirname(f) for f in files}
        | set(_include_dirs(options))
        | {source_dir}
    )
    stamp = _stamp(watched)
    # Remember only if nothing changed while the key was computed (a header edited meanwhile
    # would otherwise pair the old contents with the new stamp).
    if _key_and_headers(source, options, name_expressions, name, headers)[0] == key:
        with _state.lock:
            if len(_state.keys) >= MEMORY_CAPACITY:
                _state.keys.clear()
            _state.keys[memo_key] = (key, watched, stamp)
    return key


# --- entry format ----------------------------------------------------------------------------


class _CorruptEntry(Exception):
    pass


def encode_entry(key: str, obj: ObjectCode) -> bytes:
    """The bytes of the disk entry holding ``obj`` under ``key``."""
    meta = {
        "key": key,
        "kind": obj.kind,
        "arch": obj.arch,
        "lowered_names": dict(obj.lowered_names),
        "log": obj.log,
        "options": list(obj.options),
        "name": obj.name,
    }
    meta_bytes = json.dumps(meta, sort_keys=True).encode("utf-8")
    payload = _META_LEN.pack(len(meta_bytes)) + meta_bytes + obj.code
    digest = hashlib.sha256(payload).digest()
    return _HEADER.pack(_MAGIC, SCHEMA_VERSION, len(payload), digest) + payload


def decode_entry(data: bytes, key: str) -> ObjectCode:
    """The ObjectCode in entry bytes ``data``; raises _CorruptEntry saying what is wrong."""
    if len(data) < _HEADER.size:
        raise _CorruptEntry(f"truncated header ({len(data)} of {_HEADER.size} bytes)")
    magic, schema, length, digest = _HEADER.unpack_from(data)
    if magic != _MAGIC:
        raise _CorruptEntry("bad magic")
    if schema != SCHEMA_VERSION:
        raise _CorruptEntry(f"schema {schema}, expected {SCHEMA_VERSION}")
    payload = data[_HEADER.size :]
    if len(payload) != length:
        raise _CorruptEntry(f"payload is {len(payload)} bytes, header says {length}")
    if hashlib.sha256(payload).digest() != digest:
        raise _CorruptEntry("checksum mismatch")
    try:
        (meta_len,) = _META_LEN.unpack_from(payload)
        meta = json.loads(payload[_META_LEN.size : _META_LEN.size + meta_len].decode("utf-8"))
        code = payload[_META_LEN.size + meta_len :]
        if meta["key"] != key:
            raise _CorruptEntry("entry belongs to another key")
        return ObjectCode(
            code=code,
            kind=meta["kind"],
            arch=meta["arch"],
            lowered_names=meta["lowered_names"],
            log=meta["log"],
            options=tuple(meta["options"]),
            name=meta["name"],
        )
    except (struct.error, ValueError, KeyError, TypeError) as exc:
        raise _CorruptEntry(f"unreadable description ({exc})") from exc


# --- disk layer ------------------------------------------------------------------------------


def _warn_once(directory: Path, what: str, message: str, *args: Any) -> None:
    # One warning per folder and direction: a read-only cache would otherwise warn on every compile.
    key = f"{what}:{directory}"
    with _state.lock:
        first = key not in _state.warned_dirs
        _state.warned_dirs.add(key)
    (logger.warning if first else logger.debug)(message, *args)


def _disk_load(directory: Path, key: str) -> ObjectCode | None:
    path = entry_path(directory, key)
    try:
        data = path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):  # no entry (or no folder) yet
        return None
    except OSError as exc:
        _state.bump("disk_errors")
        _warn_once(
            directory, "read", "ignis: cannot read the compile cache in %s (%s)", directory, exc
        )
        return None
    try:
        obj = decode_entry(data, key)
    except _CorruptEntry as exc:
        _state.bump("corrupt_entries")
        logger.warning(
            "ignis: compile cache entry %s is damaged (%s); deleting it and recompiling", path, exc
        )
        try:
            path.unlink()
        except OSError:  # gone already, or not ours to delete: it is rewritten below anyway
            pass
        return None
    _state.bump("disk_hits")
    return obj


def _disk_store(directory: Path, key: str, obj: ObjectCode) -> None:
    blob = encode_entry(key, obj)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=_TMP_PREFIX, dir=directory)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(blob)
            os.replace(tmp, entry_path(directory, key))
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
    except OSError as exc:
        _state.bump("disk_errors")
        _warn_once(
            directory,
            "write",
            "ignis: cannot write the compile cache in %s (%s); compiling without it. Set "
            "IGNIS_CACHE_DIR to a writable folder, or IGNIS_DISABLE_DISK_CACHE=1",
            directory,
            exc,
        )
        return
    _state.bump("disk_writes")


# --- public ----------------------------------------------------------------------------------


def _remember(key: str, obj: ObjectCode) -> None:
    with _state.lock:
        _state.memory[key] = obj
        _state.memory.move_to_end(key)
        while len(_state.memory) > MEMORY_CAPACITY:
            _state.memory.popitem(last=False)


def _from_memory(key: str) -> ObjectCode | None:
    with _state.lock:
        obj = _state.memory.get(key)
        if obj is not None:
            _state.memory.move_to_end(key)
            _state.counts["memory_hits"] += 1
        return obj


def cached_compile(
    source: str,
    options: CompileOptions,
    name_expressions: tuple[str, ...] = (),
    name: str = "kernel.cu",
    headers: Mapping[str, str] | None = None,
) -> ObjectCode:
    """:func:`~ignis._compiler.nvrtc_compile` behind the memory and disk caches.

    ``options.arch`` must be set (the caller resolves the current device's).
    """
    key = _fast_key(source, options, name_expressions, name, headers)
    obj = _from_memory(key)
    if obj is not None:
        return obj
    with _KEY_LOCKS[int(key[:8], 16) % len(_KEY_LOCKS)]:
        obj = _from_memory(key)  # another thread may have compiled it while this one waited
        if obj is not None:
            return obj
        directory = cache_dir()
        if directory is not None:
            obj = _disk_load(directory, key)
        if obj is None:
            start = time.perf_counter()
            try:
                obj = nvrtc_compile(source, options, name_expressions, name, headers)
            finally:
                elapsed = time.perf_counter() - start
                with _state.lock:
                    _state.counts["misses"] += 1
                    _state.compile_seconds += elapsed
            if directory is not None:
                _disk_store(directory, key, obj)
        _remember(key, obj)
        return obj


def cache_stats() -> CacheStats:
    """A snapshot of the compile-cache counters (see :class:`CacheStats`).

    Example::

        >>> ignis.jit.cache_stats().misses
        3
    """
    directory = cache_dir()
    with _state.lock:
        return CacheStats(
            compile_seconds=_state.compile_seconds,
            memory_entries=len(_state.memory),
            directory=None if directory is None else str(directory),
            **_state.counts,
        )


def clear_cache(memory: bool = True, disk: bool = False) -> None:
    """Empty the in-process cache and, with ``disk=True``, delete the disk entries.

    Only files the cache itself wrote are removed from the folder. Counters are kept.
    """
    if memory:
        with _state.lock:
            _state.memory.clear()
            _state.keys.clear()
    if not disk:
        return
    directory = cache_dir()
    if directory is None or not directory.is_dir():
        return
    for path in directory.iterdir():
        if _ENTRY_RE.match(path.name) or path.name.startswith(_TMP_PREFIX):
            try:
                path.unlink()
            except OSError as exc:
                logger.warning("ignis: cannot delete compile cache entry %s (%s)", path, exc)
