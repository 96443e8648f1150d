"""The kernel library's CUDA sources and the local headers a program includes.

The ``.cu``/``.cuh`` files ship inside the package as ``ignis/cuda_src`` (a real folder in a wheel,
a link to the repository's ``cuda_src/`` in a source checkout). They are found through
:mod:`importlib.resources`, never through the checkout.

Example::

    >>> from ignis import _sources
    >>> "selfcheck.cu" in _sources.list_sources()
    True
    >>> src = _sources.read_source("selfcheck.cu")
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterable, Mapping
from importlib import resources
from pathlib import Path

__all__ = ["cuda_src_dir", "read_source", "list_sources", "local_headers"]

# `#include "x"` or `#include <x>` at the start of a line (after optional blanks).
_INCLUDE_RE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*(?:"([^"\n]+)"|<([^>\n]+)>)', re.MULTILINE)


@functools.lru_cache(maxsize=1)
def cuda_src_dir() -> Path:
    """The directory holding the kernel library's sources, as a real filesystem path.

    NVRTC reads headers from disk through ``-I``, so a package imported from a zip archive
    cannot be used and is reported as an error.
    """
    root = resources.files("ignis") / "cuda_src"
    path = Path(str(root))
    if not path.is_dir():
        raise FileNotFoundError(
            f"ignis: the kernel sources folder {str(root)!r} is missing or not on the filesystem; "
            "reinstall ignis-cuda (its wheel ships ignis/cuda_src)"
        )
    # Resolve the source-tree link so logs and include paths show the real location.
    return path.resolve()


def list_sources(suffix: str = ".cu") -> list[str]:
    """The names of the kernel library's files ending in ``suffix``, sorted.

    Example: ``list_sources()`` -> ``["selfcheck.cu", ...]``; ``list_sources(".cuh")`` for headers.
    """
    return sorted(
        p.name for p in cuda_src_dir().iterdir() if p.is_file() and p.name.endswith(suffix)
    )


def read_source(name: str) -> str:
    """The text of the kernel library file ``name`` (e.g. ``"selfcheck.cu"``).

    Only plain file names inside the kernel folder are accepted.
    """
    if not isinstance(name, str) or not name or Path(name).name != name or name in (".", ".."):
        raise ValueError(
            f"read_source: expected a file name inside the kernel sources folder such as "
            f"'selfcheck.cu', got {name!r}"
        )
    path = cuda_src_dir() / name
    if not path.is_file():
        available = ", ".join(list_sources(".cu") + list_sources(".cuh"))
        raise FileNotFoundError(
            f"read_source: no kernel source named {name!r}; available: {available}"
        )
    return path.read_text(encoding="utf-8")


def _includes(text: str) -> list[tuple[str, bool]]:
    """``(name, quoted)`` for every include directive in ``text``."""
    out = []
    for m in _INCLUDE_RE.finditer(text):
        if m.group(1) is not None:
            out.append((m.group(1), True))
        else:
            out.append((m.group(2), False))
    return out


def local_headers(
    source: str,
    include_paths: Iterable[str | os.PathLike[str]] = (),
    *,
    source_dir: str | os.PathLike[str] | None = None,
    headers: Mapping[str, str] | None = None,
) -> dict[str, bytes]:
    """Every local header ``source`` includes, recursively: ``{location: contents}``.

    This is what the compile cache hashes, so that editing a header invalidates the programs that
    use it. The search follows NVRTC: a name given in ``headers`` (in-memory headers) wins; a quoted
    include then looks next to the including file (``source_dir`` for the program itself, default
    the working directory); both forms then look in ``include_paths`` in order. Includes that
    resolve nowhere (NVRTC's built-in headers) are skipped. Conditional compilation is ignored,
    so the set can only be larger than what the compiler reads, never smaller.

    Locations are absolute paths, or ``"<memory>/name"`` for in-memory headers.
    """
    headers = dict(headers or {})
    search = [Path(p).resolve() for p in include_paths]
    top_dir = Path(source_dir).resolve() if source_dir is not None else Path.cwd()
    found: dict[str, bytes] = {}
    # (text, directory of the including file); in-memory headers have no directory of their own.
    pending: list[tuple[str, Path | None]] = [(source, top_dir)]
    while pending:
        text, here = pending.pop()
        for inc, quoted in _includes(text):
            if inc in headers:
                key = f"<memory>/{inc}"
                if key not in found:
                    found[key] = headers[inc].encode("utf-8")
                    pending.append((headers[inc], None))
                continue
            candidates = ([here] if quoted and here is not None else []) + search
            for base in candidates:
                path = base / inc
                if path.is_file():
                    resolved = path.resolve()
                    key = str(resolved)
                    if key not in found:
                        data = resolved.read_bytes()
                        found[key] = data
                        # Nested quoted includes look next to the file as NVRTC opened it.
                        pending.append((data.decode("utf-8", errors="replace"), path.parent))
                    break
    return dict(sorted(found.items()))
