"""Python functions generated from lines of source: the hot paths that must not pay for calls.

A call of a Python function costs an op on the GPU a few percent of its host time, and more
with the real driver than the numbers of a bare loop suggest: the driver's own work between two
launches evicts the caller's code and frames from the CPU caches. So the paths that every launch
or every array op runs (the launchers of a kernel, the argument packing, the one-call op
results) are written once as *lines* and assembled into one function per use, with the values
they need bound as its globals (see :func:`build_function`). Each piece of knowledge stays in
one place, the module that owns it (``_kernel``'s launch lines, ``_memory``'s result block,
``_array._creation``'s array fields), and runs inline wherever it is assembled.

Example::

    >>> _, add = build_function("add", "x", ["return x + k"], {"k": 2}, "<example>")
    >>> add(1)
    3
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from . import _caches

__all__ = ["build_function", "merged_names"]


@functools.lru_cache(maxsize=256)
def _compiled(source: str, filename: str) -> types.CodeType:
    # The same kernel loaded again (another device, another Kernel object) compiles once.
    return compile(source, filename, "exec")


_caches.register(
    "codegen.compiled",
    lambda: _compiled.cache_info().currsize,
    clear=_compiled.cache_clear,
    max_entries=256,
    description="generated source -> its Python code object",
    stats=lambda: (_compiled.cache_info().hits, _compiled.cache_info().misses),
)


def build_function(
    name: str, signature: str, body: Sequence[str], names: Mapping[str, Any], filename: str
) -> tuple[str, Callable[..., Any]]:
    """Compile ``def name(signature): body`` with ``names`` as its globals: ``(source, function)``.

    ``filename`` shows in tracebacks; the source is returned for them and for tests.
    """
    source = f"def {name}({signature}):\n" + "".join(f"    {line}\n" for line in body)
    namespace = dict(names)
    exec(_compiled(source, filename), namespace)  # noqa: S102 - generated above
    # Taken out of its own globals: a function there would keep itself (and whatever its
    # globals hold) alive until the cycle collector runs.
    return source, namespace.pop(name)


def merged_names(*parts: Mapping[str, Any]) -> dict[str, Any]:
    """The globals of lines assembled from several owners: every part's names, one dict.

    A name two parts bind must be bound to the same object in both (``device`` in the result
    block and in a kernel's launch lines, say); anything else raises ``ValueError`` rather
    than letting one part's code read the other's value.
    """
    merged: dict[str, Any] = {}
    for part in parts:
        for key, value in part.items():
            if merged.setdefault(key, value) is not value:
                raise ValueError(
                    f"merged_names: {key!r} is bound to two different objects "
                    f"({merged[key]!r} and {value!r})"
                )
    return merged
