"""``ignis.linalg``: the Array API standard's linear-algebra extension."""

from __future__ import annotations

__all__: list[str] = []
