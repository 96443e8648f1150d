"""A module's exports, read from what it defines: no list of names to keep beside the code.

Example::

    >>> def area(w, h): return w * h
    >>> defined_here({"__name__": "shapes", "area": area, "_helper": area})  # doctest: +SKIP
    ['area']
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

__all__ = ["defined_here"]


def defined_here(namespace: Mapping[str, Any]) -> list[str]:
    """The public functions the module whose globals are ``namespace`` defines itself (not the
    ones it imports), in definition order: call it as ``defined_here(globals())`` at the end of
    the module, for its ``__all__``."""
    module = namespace["__name__"]
    return [
        name
        for name, value in namespace.items()
        if not name.startswith("_") and inspect.isfunction(value) and value.__module__ == module
    ]
