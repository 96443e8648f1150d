"""Containers: :class:`Sequential` (a chain) and :class:`ModuleList` (an indexable list).

Their children are named ``"0"``, ``"1"``, ... as in PyTorch, so ``blocks.3.attn.qkv.weight``
names the same weight in both libraries.

Example::

    >>> from ignis_autograd import nn
    >>> net = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 1))
    >>> blocks = nn.ModuleList([nn.Linear(8, 8) for _ in range(3)])
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from .module import Module

__all__ = ["Sequential", "ModuleList"]


def _check(m: Any, owner: str) -> Module:
    if not isinstance(m, Module):
        raise TypeError(f"{owner}: items must be Modules, got {type(m).__name__}")
    return m


class ModuleList(Module):
    """A list of modules, registered as children ``"0"``, ``"1"``, ... (no forward)."""

    def __init__(self, modules: Iterable[Module] = ()):
        super().__init__()
        self.extend(modules)

    def append(self, module: Module) -> ModuleList:
        self.add_module(str(len(self._modules)), _check(module, type(self).__name__))
        return self

    def extend(self, modules: Iterable[Module]) -> ModuleList:
        for m in modules:
            self.append(m)
        return self

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())

    def __getitem__(self, index: int | slice) -> Any:
        items = list(self._modules.values())
        if isinstance(index, slice):
            return type(self)(items[index])
        n = len(items)
        if not -n <= index < n:
            raise IndexError(f"{type(self).__name__}: index {index} out of range for length {n}")
        return items[index]

    def __setitem__(self, index: int, module: Module) -> None:
        n = len(self)
        if not -n <= index < n:
            raise IndexError(f"{type(self).__name__}: index {index} out of range for length {n}")
        self.add_module(str(index % n), _check(module, type(self).__name__))


class Sequential(ModuleList):
    """Modules applied in order: ``Sequential(a, b, c)(x) == c(b(a(x)))``."""

    def __init__(self, *modules: Module):
        super().__init__(modules)

    def forward(self, x: Any) -> Any:
        for m in self._modules.values():
            x = m(x)
        return x
