"""Sorting, searching, set and cumulative functions of the Array API standard."""

from __future__ import annotations

__all__: list[str] = []
