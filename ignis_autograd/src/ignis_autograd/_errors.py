"""Errors of ignis_autograd, under ignis's :class:`ignis.IgnisError`.

Shape and dtype problems raise ignis's own :class:`ignis.ShapeError` / :class:`ignis.DTypeError`;
the classes here cover what only autograd can get wrong.
"""

from __future__ import annotations

from ignis import IgnisError

__all__ = ["AutogradError", "GraphFreedError", "GradcheckError"]


class AutogradError(IgnisError, RuntimeError):
    """Base class of the errors autograd itself raises (a misuse of the graph, not of an op)."""


class GraphFreedError(AutogradError):
    """Backward reached a part of a graph that an earlier backward (or ``Tape.clear``) freed.

    Pass ``retain_graph=True`` to the earlier backward to differentiate a graph more than once.
    """


class GradcheckError(AutogradError, AssertionError):
    """Analytic and numeric gradients disagree; the message shows inputs, direction and values."""
