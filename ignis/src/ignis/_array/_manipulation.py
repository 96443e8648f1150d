"""Array manipulation and creation functions of the Array API standard."""

from __future__ import annotations

__all__: list[str] = []
