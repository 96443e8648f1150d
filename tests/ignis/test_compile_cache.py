"""The compile caches: in-process and on disk (keys, integrity, failures). No GPU needed."""

from __future__ import annotations

import errno
import json
import logging
import os
import subprocess
import sys
import textwrap
import threading
import uuid
from pathlib import Path

import pytest

import ignis
from ignis import CompileOptions, jit
from ignis import _compile_cache as cc

KERNEL = (
    'extern "C" __global__ void k(float* x, float a) { x[threadIdx.x] = a * x[threadIdx.x]; }\n'
)
SM80 = CompileOptions(arch="sm_80")


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """An empty disk cache folder, set through the environment, and an empty memory cache."""
    directory = tmp_path / "cache"
    monkeypatch.setenv("IGNIS_CACHE_DIR", str(directory))
    monkeypatch.delenv("IGNIS_DISABLE_DISK_CACHE", raising=False)
    jit.clear_cache(memory=True)
    return directory


def unique(source: str = KERNEL) -> str:
    return f"// {uuid.uuid4()}\n{source}"


def delta(before: jit.CacheStats, after: jit.CacheStats) -> dict[str, float]:
    b, a = before.as_dict(), after.as_dict()
    return {k: a[k] - b[k] for k in a if isinstance(a[k], (int, float)) and k != "memory_entries"}


def entries(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.ignis-jit"))


# --- the two layers ----------------------------------------------------------------------------


def test_memory_hit_returns_the_same_object(cache):
    src = unique()
    before = jit.cache_stats()
    a = ignis.compile(src, SM80)
    b = ignis.compile(src, SM80)
    d = delta(before, jit.cache_stats())
    assert a is b
    assert d["misses"] == 1 and d["memory_hits"] == 1 and d["disk_hits"] == 0
    assert d["compile_seconds"] > 0


def test_miss_writes_one_disk_entry(cache):
    before = jit.cache_stats()
    ignis.compile(unique(), SM80)
    assert delta(before, jit.cache_stats())["disk_writes"] == 1
    assert len(entries(cache)) == 1
    assert not [p for p in cache.iterdir() if p.name.startswith(".tmp-")]  # no temp file left


def test_disk_hit_after_the_memory_cache_is_cleared(cache):
    src = unique("template <class T> __global__ void f(T* x) { x[0] = T(1); }\n")
    first = ignis.compile(src, SM80, name_expressions=["f<float>"], name="f.cu")
    jit.clear_cache(memory=True)
    before = jit.cache_stats()
    second = ignis.compile(src, SM80, name_expressions=["f<float>"], name="f.cu")
    d = delta(before, jit.cache_stats())
    assert d["disk_hits"] == 1 and d["misses"] == 0
    assert second is not first and second == first  # every field, code included
    assert dict(second.lowered_names) == dict(first.lowered_names)


def test_disk_hit_from_a_fresh_process(cache):
    src = unique()
    here = ignis.compile(src, SM80)
    script = textwrap.dedent(
        """
        import hashlib, json, sys
        import ignis
        obj = ignis.compile(sys.stdin.read(), ignis.CompileOptions(arch="sm_80"))
        stats = ignis.jit.cache_stats().as_dict()
        stats["sha"] = hashlib.sha256(obj.code).hexdigest()
        print(json.dumps(stats))
        """
    )
    env = dict(os.environ, PYTHONPATH=str(Path(ignis.__file__).resolve().parents[1]))
    out = subprocess.run(
        [sys.executable, "-c", script],
        input=src,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    stats = json.loads(out.stdout.strip().splitlines()[-1])
    assert stats["disk_hits"] == 1 and stats["misses"] == 0
    assert stats["directory"] == str(cache)
    import hashlib

    assert stats["sha"] == hashlib.sha256(here.code).hexdigest()


def test_concurrent_compiles_of_one_program_compile_once(cache):
    src = unique()
    before = jit.cache_stats()
    results: list[object] = []
    barrier = threading.Barrier(8)

    def work() -> None:
        barrier.wait()
        results.append(ignis.compile(src, SM80))

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    d = delta(before, jit.cache_stats())
    assert len(results) == 8 and all(r is results[0] for r in results)
    assert d["misses"] == 1 and d["memory_hits"] == 7


def test_failed_compiles_count_as_misses_and_are_not_cached(cache):
    before = jit.cache_stats()
    for _ in range(2):
        with pytest.raises(ignis.CompileError):
            ignis.compile("not C++ at all", SM80)
    assert delta(before, jit.cache_stats())["misses"] == 2
    assert entries(cache) == []


# --- integrity ---------------------------------------------------------------------------------


def _flip_payload(data: bytes) -> bytes:
    i = len(data) - 20
    return data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1 :]


CORRUPTIONS = {
    "flipped payload byte": _flip_payload,
    "flipped magic": lambda d: b"X" + d[1:],
    "truncated payload": lambda d: d[: len(d) // 2],
    "truncated header": lambda d: d[:10],
    "empty file": lambda d: b"",
    "appended bytes": lambda d: d + b"garbage",
    "other schema": lambda d: d[:8] + (99).to_bytes(4, "little") + d[12:],
}


@pytest.mark.parametrize("damage", list(CORRUPTIONS), ids=list(CORRUPTIONS))
def test_corrupt_entry_is_logged_deleted_and_recompiled(cache, caplog, damage):
    src = unique()
    good = ignis.compile(src, SM80)
    (path,) = entries(cache)
    path.write_bytes(CORRUPTIONS[damage](path.read_bytes()))
    jit.clear_cache(memory=True)
    before = jit.cache_stats()
    with caplog.at_level(logging.WARNING, logger="ignis"):
        again = ignis.compile(src, SM80)
    d = delta(before, jit.cache_stats())
    assert d["corrupt_entries"] == 1 and d["misses"] == 1 and d["disk_hits"] == 0
    assert d["disk_writes"] == 1
    assert again.code == good.code
    assert any("damaged" in r.getMessage() and path.name in r.getMessage() for r in caplog.records)
    # The rewritten entry is whole again: the next process-level lookup is a disk hit.
    jit.clear_cache(memory=True)
    before = jit.cache_stats()
    ignis.compile(src, SM80)
    assert delta(before, jit.cache_stats())["disk_hits"] == 1


def test_entry_of_another_key_is_rejected(cache):
    obj = ignis.compile(unique(), SM80)
    blob = cc.encode_entry("0" * 64, obj)
    with pytest.raises(cc._CorruptEntry, match="another key"):
        cc.decode_entry(blob, "1" * 64)
    assert cc.decode_entry(blob, "0" * 64) == obj


def test_entry_format_is_not_pickle(cache):
    ignis.compile(unique(), SM80)
    data = entries(cache)[0].read_bytes()
    assert data.startswith(b"IGNISJIT")
    assert b"\x80\x04" not in data[:16]  # no pickle protocol header


# --- the key -----------------------------------------------------------------------------------


def key(source=KERNEL, options=SM80, exprs=(), name="kernel.cu", headers=None) -> str:
    return cc.cache_key(source, options, exprs, name, headers)


def test_key_is_stable_and_ignores_what_does_not_matter():
    assert key() == key()
    assert len(key()) == 64
    a = CompileOptions(arch="sm_80", defines={"A": 1, "B": 2})
    b = CompileOptions(arch="sm_80", defines=[("B", 2), ("A", 1)])
    assert key(options=a) == key(options=b)
    assert key(exprs=("f<int>", "f<float>")) == key(exprs=("f<float>", "f<int>"))


@pytest.mark.parametrize(
    "change",
    [
        {"source": KERNEL + "// edit\n"},
        {"options": CompileOptions(arch="sm_90")},
        {"options": CompileOptions(arch="compute_80")},
        {"options": CompileOptions(arch="sm_80", fast_math=True)},
        {"options": CompileOptions(arch="sm_80", defines={"X": 1})},
        {"options": CompileOptions(arch="sm_80", max_registers=32)},
        {"exprs": ("f<float>",)},
        {"name": "other.cu"},
        {"headers": {"a.h": "#define A 1\n"}},
    ],
    ids=[
        "source",
        "arch",
        "ptx-arch",
        "fast_math",
        "define",
        "max_registers",
        "name_expr",
        "name",
        "memory-header",
    ],
)
def test_key_changes_with_each_input(change):
    assert key(**change) != key()


def test_key_changes_with_nvrtc_version(monkeypatch):
    k = key()
    monkeypatch.setattr(cc, "nvrtc_version", lambda: (99, 9))
    assert key() != k


def test_key_changes_with_schema(monkeypatch):
    k = key()
    monkeypatch.setattr(cc, "SCHEMA_VERSION", cc.SCHEMA_VERSION + 1)
    assert key() != k


def test_key_changes_with_in_memory_header_contents():
    src = '#include "a.h"\n' + KERNEL
    assert key(src, headers={"a.h": "#define A 1\n"}) != key(src, headers={"a.h": "#define A 2\n"})


def test_key_follows_included_headers_recursively(tmp_path):
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "outer.cuh").write_text('#include "inner.cuh"\n')
    (inc / "inner.cuh").write_text("#define SCALE 2.0f\n")
    options = CompileOptions(arch="sm_80", include_paths=(str(inc),))
    src = '#include "outer.cuh"\n' + KERNEL
    k1 = key(src, options)
    (inc / "inner.cuh").write_text("#define SCALE 3.0f\n")
    k2 = key(src, options)
    (inc / "unrelated.cuh").write_text("#define NOTHING\n")
    assert k1 != k2 and key(src, options) == k2


def test_key_follows_raw_include_flags(tmp_path):
    (tmp_path / "h.cuh").write_text("#define V 1\n")
    options = CompileOptions(arch="sm_80", extra=("-I", str(tmp_path)))
    src = '#include "h.cuh"\n' + KERNEL
    k1 = key(src, options)
    (tmp_path / "h.cuh").write_text("#define V 2\n")
    assert key(src, options) != k1


def test_key_covers_the_library_headers(monkeypatch):
    src = '#include "ignis_types.cuh"\n' + KERNEL
    k = key(src)
    real = cc.local_headers

    def edited(*args, **kwargs):
        found = real(*args, **kwargs)
        return {p: data + b"// edited\n" for p, data in found.items()}

    monkeypatch.setattr(cc, "local_headers", edited)
    assert key(src) != k


def test_editing_an_included_header_recompiles(cache, tmp_path):
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "value.cuh").write_text("#define VALUE 1234567\n")
    src = unique('#include "value.cuh"\nextern "C" __global__ void k(int* x) { x[0] = VALUE; }\n')
    options = CompileOptions(arch="sm_80", include_paths=(str(inc),))
    first = ignis.compile(src, options)
    (inc / "value.cuh").write_text("#define VALUE 7654321\n")
    before = jit.cache_stats()
    second = ignis.compile(src, options)
    d = delta(before, jit.cache_stats())
    assert d["misses"] == 1 and d["memory_hits"] == 0
    assert first.code != second.code


def test_a_new_header_that_shadows_the_old_one_recompiles(cache, tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    (second / "value.cuh").write_text("#define VALUE 1111111\n")
    src = unique('#include "value.cuh"\nextern "C" __global__ void k(int* x) { x[0] = VALUE; }\n')
    options = CompileOptions(arch="sm_80", include_paths=(str(first), str(second)))
    old = ignis.compile(src, options)
    assert ignis.compile(src, options) is old
    (first / "value.cuh").write_text("#define VALUE 2222222\n")  # found first from now on
    new = ignis.compile(src, options)
    assert new.code != old.code


def test_cache_key_needs_a_resolved_arch():
    with pytest.raises(ValueError, match="arch must be resolved"):
        cc.cache_key(KERNEL, CompileOptions())


# --- failing and disabled disk -----------------------------------------------------------------


def test_unwritable_cache_location_still_compiles(tmp_path, monkeypatch, caplog):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("IGNIS_CACHE_DIR", str(blocker / "cache"))
    before = jit.cache_stats()
    with caplog.at_level(logging.WARNING, logger="ignis"):
        obj = ignis.compile(unique(), SM80)
    assert obj.kind == "cubin"
    d = delta(before, jit.cache_stats())
    assert d["disk_errors"] >= 1 and d["disk_writes"] == 0
    assert any("cannot write the compile cache" in r.getMessage() for r in caplog.records)


@pytest.mark.skipif(
    os.name != "posix" or os.geteuid() == 0, reason="needs POSIX permissions that bind the user"
)
def test_read_only_cache_dir_still_compiles(cache):
    cache.mkdir()
    cache.chmod(0o500)
    try:
        before = jit.cache_stats()
        assert ignis.compile(unique(), SM80).kind == "cubin"
        assert delta(before, jit.cache_stats())["disk_errors"] == 1
    finally:
        cache.chmod(0o700)


def test_permission_denied_still_compiles(cache, monkeypatch, caplog):
    # The same failure a read-only folder gives, for users whom permissions do not bind (root).
    def denied(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(cc.tempfile, "mkstemp", denied)
    before = jit.cache_stats()
    with caplog.at_level(logging.WARNING, logger="ignis"):
        assert ignis.compile(unique(), SM80).kind == "cubin"
        ignis.compile(unique(), SM80)
    d = delta(before, jit.cache_stats())
    assert d["disk_errors"] == 2 and d["disk_writes"] == 0 and d["misses"] == 2
    warnings = [r for r in caplog.records if "cannot write the compile cache" in r.getMessage()]
    assert len(warnings) == 1  # once per folder, not on every compile


def test_full_disk_still_compiles_and_leaves_no_temp_file(cache, monkeypatch):
    def no_space(src, dst):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(cc.os, "replace", no_space)
    before = jit.cache_stats()
    assert ignis.compile(unique(), SM80).kind == "cubin"
    d = delta(before, jit.cache_stats())
    assert d["disk_errors"] == 1 and d["disk_writes"] == 0
    assert list(cache.iterdir()) == []


def test_unreadable_entry_is_an_error_not_corruption(cache, monkeypatch):
    src = unique()
    ignis.compile(src, SM80)
    jit.clear_cache(memory=True)
    real = Path.read_bytes

    def failing(self):
        if self.suffix == ".ignis-jit":
            raise PermissionError(errno.EACCES, "Permission denied")
        return real(self)

    monkeypatch.setattr(Path, "read_bytes", failing)
    before = jit.cache_stats()
    ignis.compile(src, SM80)
    d = delta(before, jit.cache_stats())
    assert d["disk_errors"] == 1 and d["corrupt_entries"] == 0 and d["misses"] == 1
    assert len(entries(cache)) == 1  # not deleted


@pytest.mark.parametrize("env", [{"IGNIS_CACHE_DIR": ""}, {"IGNIS_DISABLE_DISK_CACHE": "1"}])
def test_disk_cache_can_be_disabled(cache, monkeypatch, env):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert jit.cache_dir() is None
    before = jit.cache_stats()
    ignis.compile(unique(), SM80)
    after = jit.cache_stats()
    assert after.directory is None
    assert delta(before, after)["disk_writes"] == 0
    assert not cache.exists()


def test_disable_flag_false_values_keep_the_cache(cache, monkeypatch):
    monkeypatch.setenv("IGNIS_DISABLE_DISK_CACHE", "0")
    assert jit.cache_dir() == cache


def test_default_location_follows_xdg_then_home(monkeypatch, tmp_path):
    monkeypatch.delenv("IGNIS_CACHE_DIR", raising=False)
    monkeypatch.delenv("IGNIS_DISABLE_DISK_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert jit.cache_dir() == tmp_path / "xdg" / "ignis"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    if os.name == "posix":
        assert jit.cache_dir() == tmp_path / "home" / ".cache" / "ignis"


def test_environment_is_read_at_use_time(cache, monkeypatch, tmp_path):
    ignis.compile(unique(), SM80)
    other = tmp_path / "other"
    monkeypatch.setenv("IGNIS_CACHE_DIR", str(other))
    assert jit.cache_dir() == other
    ignis.compile(unique(), SM80)
    assert len(entries(cache)) == 1 and len(entries(other)) == 1


# --- stats and clearing ------------------------------------------------------------------------


def test_cache_stats_fields(cache):
    ignis.compile(unique(), SM80)
    stats = jit.cache_stats()
    assert isinstance(stats, jit.CacheStats)
    assert set(stats.as_dict()) == {
        "memory_hits",
        "disk_hits",
        "misses",
        "disk_writes",
        "disk_errors",
        "corrupt_entries",
        "compile_seconds",
        "memory_entries",
        "directory",
    }
    assert stats.memory_entries >= 1 and stats.directory == str(cache)


def test_clear_cache_memory_and_disk(cache):
    ignis.compile(unique(), SM80)
    foreign = cache / "notes.txt"
    foreign.write_text("keep me")
    assert jit.cache_stats().memory_entries >= 1
    jit.clear_cache(memory=True, disk=False)
    assert jit.cache_stats().memory_entries == 0 and len(entries(cache)) == 1
    jit.clear_cache(memory=False, disk=True)
    assert entries(cache) == [] and foreign.exists()


def test_memory_cache_is_bounded(cache, monkeypatch):
    monkeypatch.setattr(cc, "MEMORY_CAPACITY", 2)
    monkeypatch.setenv("IGNIS_CACHE_DIR", "")
    sources = [unique() for _ in range(3)]
    for s in sources:
        ignis.compile(s, SM80)
    assert jit.cache_stats().memory_entries == 2
    before = jit.cache_stats()
    ignis.compile(sources[0], SM80)  # the oldest was dropped
    assert delta(before, jit.cache_stats())["misses"] == 1
