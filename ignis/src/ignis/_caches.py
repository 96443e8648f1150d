"""The process's caches by name: what each one holds, and one call that empties them all.

ignis remembers work so that doing it again is cheap: compiled programs (in memory, and on disk),
library kernels loaded per device, the plans of array ops (result dtype, shape, strides, the
generated fast function), launch layouts, tensor maps, and freed device blocks kept for reuse.
Each cache lives next to the code that uses it and registers here under a dotted name, so that
:func:`cache_info` lists them all and :func:`clear_caches` empties them: to start a measurement
or a test from a known state, or to let go of what the caches hold. Clearing never changes a
result; what was cached is made again on next use. The on-disk compile cache is shared between
processes and is left alone (``ignis.jit.clear_cache(disk=True)`` empties it).

Example::

    >>> import ignis
    >>> a = ignis.ones(1000, device="cpu"); b = a + a
    >>> ignis.cache_info()["ops.binary_plans"].entries
    1
    >>> ignis.clear_caches()
    >>> ignis.cache_info()["ops.binary_plans"].entries
    0
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sized
from dataclasses import dataclass

__all__ = ["CacheInfo", "PlanCache", "cache_info", "clear_caches", "register"]


@dataclass(frozen=True)
class CacheInfo:
    """One cache's state.

    Attributes:
        name: the dotted name it is registered under, e.g. ``"ops.binary_plans"``.
        entries: entries it holds now.
        max_entries: the bound past which it starts over or drops its oldest entries (None: it
            holds one entry per device or per kernel, a number the program bounds).
        description: what it maps to what.
        hits, misses: lookup counts, where the cache keeps them (None where counting would cost
            a hot path its speed).
    """

    name: str
    entries: int
    max_entries: int | None
    description: str
    hits: int | None = None
    misses: int | None = None


@dataclass(frozen=True)
class _Entry:
    size: Callable[[], int]
    clear: Callable[[], None]
    max_entries: int | None
    description: str
    stats: Callable[[], tuple[int | None, int | None]] | None


_lock = threading.Lock()
_registry: dict[str, _Entry] = {}


def register(
    name: str,
    cache: Sized | Callable[[], int],
    *,
    description: str,
    max_entries: int | None = None,
    clear: Callable[[], None] | None = None,
    stats: Callable[[], tuple[int | None, int | None]] | None = None,
) -> None:
    """Make a cache known by ``name`` (internal: each cache registers itself at import).

    ``cache`` is the container (a dict, list, ...: its ``len`` counts the entries, its
    ``clear()`` empties it) or a function that counts the entries; ``clear`` replaces the
    container's own ``clear`` where emptying it must also empty something beside it;
    ``stats`` returns ``(hits, misses)``. Registering a name twice replaces the first entry
    (a module imported again, in tests).
    """
    size = cache if callable(cache) and not isinstance(cache, Sized) else cache.__len__
    if clear is None:
        clear = cache.clear  # type: ignore[union-attr]
    with _lock:
        _registry[name] = _Entry(size, clear, max_entries, description, stats)


class PlanCache(dict):  # type: ignore[type-arg]
    """A bounded, named cache of plans: a dict that registers itself, counts, and starts over.

    Lookups are the dict's own (``cache.get(key)``, a C call: hot paths keep their speed); a
    caller counts a hit with ``cache.hits += 1`` where it uses a found plan, and stores a new one
    with :meth:`remember`, which counts the miss and empties the cache first when it is full
    (plans are cheap to make again; a cache that starts over needs no eviction order). A cache
    made with ``counts_hits=False`` reports no hit count: its lookups are too cheap to pay for
    one (a view's layout).

    Example::

        >>> plans = PlanCache("example.plans", 2, "x -> x squared")
        >>> plans.remember(3, 9)
        9
        >>> plans.get(3), plans.misses
        (9, 1)
    """

    __slots__ = ("name", "max_entries", "description", "hits", "misses", "counts_hits")

    def __init__(self, name: str, max_entries: int, description: str, counts_hits: bool = True):
        super().__init__()
        self.name = name
        self.max_entries = max_entries
        self.description = description
        self.hits = 0
        self.misses = 0
        self.counts_hits = counts_hits
        register(
            name,
            self,
            description=description,
            max_entries=max_entries,
            clear=self.reset,
            stats=self.counts,
        )

    def remember(self, key: object, plan: object) -> object:
        """Store ``plan`` under ``key`` (a miss), emptying the cache first when it is full;
        returns ``plan``."""
        if len(self) >= self.max_entries:
            dict.clear(self)
        self.misses += 1
        self[key] = plan
        return plan

    def counts(self) -> tuple[int | None, int]:
        """``(hits, misses)`` since the last :meth:`reset` (hits None: not counted)."""
        return (self.hits if self.counts_hits else None), self.misses

    def reset(self) -> None:
        """Empty the cache and zero its counts."""
        dict.clear(self)
        self.hits = 0
        self.misses = 0

    def __repr__(self) -> str:
        return (
            f"PlanCache({self.name!r}, entries={len(self)}, max_entries={self.max_entries}, "
            f"hits={self.hits}, misses={self.misses})"
        )


def cache_info() -> dict[str, CacheInfo]:
    """Every registered cache's :class:`CacheInfo`, by name, sorted by name: the caches of the
    parts of ignis loaded so far (a kernel family's module registers its own when first used).

    Example: ``{n: i.entries for n, i in ignis.cache_info().items() if i.entries}``.
    """
    with _lock:
        items = sorted(_registry.items())
    out = {}
    for name, e in items:
        hits, misses = e.stats() if e.stats is not None else (None, None)
        out[name] = CacheInfo(name, int(e.size()), e.max_entries, e.description, hits, misses)
    return out


def clear_caches(*names: str) -> None:
    """Empty every registered cache of this process (the on-disk compile cache is kept), or only
    the caches ``names`` (as :func:`cache_info` lists them; an unknown name is a KeyError).

    Freed device blocks held for reuse go back to the device's memory pool, in stream order.
    Arrays, streams and kernels the program holds keep working: only what ignis remembered for
    itself is forgotten. Not meant to run while another thread is inside an ignis call.

    Example: ``ignis.clear_caches("ops.binary_plans")``.
    """
    if names:
        with _lock:
            unknown = [n for n in names if n not in _registry]
            if unknown:
                raise KeyError(
                    f"clear_caches: no cache named {', '.join(map(repr, unknown))}; "
                    f"the caches are {sorted(_registry)}"
                )
            chosen = [_registry[n] for n in names]
        for e in chosen:
            e.clear()
        return
    with _lock:
        entries = list(_registry.values())
    for e in entries:
        e.clear()
