"""NumPy's BLAS on one thread during a CPU run.

The CPU backend's matrix products go to NumPy, hence to the BLAS NumPy was built with. The
demo's products are small (at most 1024 x 256 times 256 x 64 with the CPU defaults): a second
BLAS thread gains nothing on them (the demo trained about 10% faster on one thread of a
lightly loaded two-core machine) and costs a lot when the cores are busy. OpenBLAS threads wait
for work by spinning, so on a two-core machine with other work running, its products took
10-25 times longer with the default thread count than on one thread, and the CPU demo trained
in 60-80 s instead of 12-14 s.

Example::

    >>> with blas_threads(1) as n:
    ...     train_on_the_cpu()          # n: the thread count in effect (None: unknown)

Only OpenBLAS is handled (the BLAS of NumPy's wheels on Linux, Windows and Intel macOS),
through its ``*_set_num_threads`` entry point; elsewhere (Accelerate, MKL) nothing changes.
The user's choice wins: with ``OPENBLAS_NUM_THREADS`` or ``OMP_NUM_THREADS`` set in the
environment, the count is left as it is.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["blas_threads", "current_threads", "THREAD_ENV"]

#: Environment variables through which a user sets OpenBLAS's thread count themselves.
THREAD_ENV = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")

# Symbol prefixes and suffixes of OpenBLAS builds: scipy-openblas (NumPy >= 2 wheels) prefixes
# its symbols; 64-bit-integer builds append "64_".
_PREFIXES = ("scipy_openblas", "openblas")
_SUFFIXES = ("64_", "")

_Controls = tuple[Callable[[], int], Callable[[int], None]]
_found: list[_Controls | None] = []  # the lookup's result, once made


def _loaded_libraries() -> list[str]:
    """Paths of the OpenBLAS libraries this process may have loaded: from the memory map on
    Linux, and those bundled with NumPy (``numpy.libs`` on Linux and Windows, ``.dylibs`` on
    macOS), which importing NumPy loaded."""
    paths: list[str] = []
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            for line in f:
                parts = line.split(maxsplit=5)
                if len(parts) == 6 and "openblas" in os.path.basename(parts[5]).lower():
                    paths.append(parts[5].strip())
    except OSError:
        pass  # not Linux
    try:
        import numpy

        base = os.path.dirname(numpy.__file__)
        for folder in (os.path.join(base, os.pardir, "numpy.libs"), os.path.join(base, ".dylibs")):
            if os.path.isdir(folder):
                paths += [
                    os.path.join(folder, name)
                    for name in sorted(os.listdir(folder))
                    if "openblas" in name.lower()
                ]
    except ImportError:
        pass
    unique: dict[str, str] = {}
    for path in paths:
        unique.setdefault(os.path.realpath(path), path)
    return list(unique.values())


def _controls_of(lib: ctypes.CDLL) -> _Controls | None:
    for prefix in _PREFIXES:
        for suffix in _SUFFIXES:
            get = getattr(lib, f"{prefix}_get_num_threads{suffix}", None)
            put = getattr(lib, f"{prefix}_set_num_threads{suffix}", None)
            if get is not None and put is not None:
                get.argtypes, get.restype = [], ctypes.c_int
                put.argtypes, put.restype = [ctypes.c_int], None
                return get, put
    return None


def _openblas() -> _Controls | None:
    """``(get_num_threads, set_num_threads)`` of the loaded OpenBLAS, or None."""
    if not _found:
        controls = None
        for path in _loaded_libraries():
            try:
                lib = ctypes.CDLL(path)  # already loaded: the same library, not a second copy
            except OSError:
                continue
            controls = _controls_of(lib)
            if controls is not None:
                break
        _found.append(controls)
    return _found[0]


def current_threads() -> int | None:
    """OpenBLAS's thread count now, or None when no OpenBLAS is found."""
    controls = _openblas()
    return None if controls is None else int(controls[0]())


@contextmanager
def blas_threads(n: int) -> Iterator[int | None]:
    """Run the block with OpenBLAS on ``n`` threads (``n`` >= 1), restoring the count after.

    Yields the thread count in effect: ``n``; the user's when ``OPENBLAS_NUM_THREADS`` or
    ``OMP_NUM_THREADS`` is set (then nothing changes); None when no OpenBLAS is found.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"blas_threads: n must be an integer >= 1, got {n!r}")
    controls = _openblas()
    if controls is None:
        yield None
        return
    get, put = controls
    before = int(get())
    if any(os.environ.get(name) for name in THREAD_ENV):
        yield before
        return
    put(n)
    try:
        yield n
    finally:
        put(before)
