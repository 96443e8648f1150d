"""ignis_autograd: reverse-mode automatic differentiation on the ignis GPU foundation."""

from __future__ import annotations

__version__ = "0.1.0"
