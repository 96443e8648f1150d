"""Per-leaf hooks that run once a backward pass has finished accumulating a leaf's gradient,
and callbacks that run when the backward pass ends (what data-parallel training hooks into).

``Tensor.register_post_accumulate_grad_hook(hook)`` (PyTorch's name) calls ``hook(tensor)``
after the last contribution of a ``backward()`` to ``tensor.grad`` has been added: the walk
counts each hooked leaf's incoming edges before it starts, so the hook runs as soon as that
gradient is complete, while the rest of backward goes on. Where the count cannot be known in
advance (a graph with :func:`~ignis_autograd.checkpoint` nodes, whose recomputed subgraphs are
found during the walk) the hooks run when the walk ends. :func:`queue_callback` (called from a
hook) runs a function once the current outermost ``backward()`` has finished.

Hooks run under ``backward()`` without ``create_graph`` only; ``grad()`` and recorded backward
passes do not accumulate into ``.grad`` and run none.

Example::

    >>> w = Tensor.from_host([1.0, 2.0], requires_grad=True)
    >>> h = w.register_post_accumulate_grad_hook(lambda t: print("ready", t.grad.to_host()))
    >>> (w * w).sum().backward()
    ready [2. 4.]
    >>> h.remove()
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any

__all__ = ["RemovableHandle", "registry", "register", "queue_callback", "take_callbacks"]

#: id(leaf) -> (weak reference to the leaf, its hooks in registration order)
registry: dict[int, tuple[weakref.ref, list[Callable[[Any], None]]]] = {}
_lock = threading.Lock()
_local = threading.local()


class RemovableHandle:
    """What registering a hook returns: ``remove()`` unregisters it (idempotent)."""

    __slots__ = ("_key", "_hook")

    def __init__(self, key: int, hook: Callable[[Any], None]):
        self._key, self._hook = key, hook

    def remove(self) -> None:
        with _lock:
            entry = registry.get(self._key)
            if entry is None:
                return
            hooks = entry[1]
            if self._hook in hooks:
                hooks.remove(self._hook)
            if not hooks:
                del registry[self._key]


def register(tensor: Any, hook: Callable[[Any], None]) -> RemovableHandle:
    """Add ``hook`` to the leaf ``tensor``'s post-accumulate hooks (see the module notes)."""
    if not callable(hook):
        raise TypeError(
            f"register_post_accumulate_grad_hook: hook must be callable, got {type(hook).__name__}"
        )
    if tensor.grad_fn is not None or not tensor.requires_grad:
        raise ValueError(
            "register_post_accumulate_grad_hook: only a leaf tensor that requires grad "
            "accumulates a gradient"
        )
    key = id(tensor)
    with _lock:
        entry = registry.get(key)
        if entry is None or entry[0]() is not tensor:

            def forget(_ref: weakref.ref, key: int = key) -> None:
                with _lock:
                    current = registry.get(key)
                    if current is not None and current[0] is _ref:
                        del registry[key]

            entry = (weakref.ref(tensor, forget), [])
            registry[key] = entry
        entry[1].append(hook)
    return RemovableHandle(key, hook)


def run_hooks(leaf: Any) -> None:
    """Call ``leaf``'s hooks (a copy of the list: a hook may remove itself)."""
    entry = registry.get(id(leaf))
    if entry is not None and entry[0]() is leaf:
        for hook in list(entry[1]):
            hook(leaf)


def queue_callback(fn: Callable[[], None]) -> None:
    """Run ``fn()`` when the outermost ``backward()`` now running on this thread ends (after
    every gradient has been accumulated and every post-accumulate hook has run). It runs
    when the backward pass fails too, before its exception propagates."""
    pending = getattr(_local, "callbacks", None)
    if pending is None:
        pending = _local.callbacks = []
    pending.append(fn)


def take_callbacks() -> list[Callable[[], None]]:
    """The queued callbacks, removed from the queue."""
    pending = getattr(_local, "callbacks", None)
    if not pending:
        return []
    _local.callbacks = []
    return pending
