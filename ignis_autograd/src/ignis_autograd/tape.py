"""Tape: the recording context and API of autograd (thread-local).

There is no global list of operations: each recorded op is a node hanging off its output tensor
(see :mod:`._graph`), so independent graphs never interfere and a graph dies with its outputs.
``Tape`` gathers the controls: recording on/off (:class:`no_grad`), custom ops
(:meth:`Tape.record`), backward, checkpointing, and the number of live nodes for debugging.

Example::

    >>> from ignis_autograd import Tape, Tensor, no_grad
    >>> x = Tensor.from_host([1.0, 2.0], requires_grad=True)
    >>> with no_grad():
    ...     y = x * 2          # not recorded: y.requires_grad is False
    >>> @no_grad()
    ... def evaluate(t):
    ...     return (t * t).sum()
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from ignis import DTypeError, NvArray

from ._graph import Node, live_nodes, release, state
from .tensor import Tensor, _observe, connect

__all__ = ["Tape", "no_grad", "enable_grad"]

F = TypeVar("F", bound=Callable[..., Any])


class _GradMode:
    _enabled = True

    def __new__(cls, fn: Any = None) -> Any:
        if fn is not None:  # used bare, as ``@no_grad``
            if not callable(fn):
                raise TypeError(f"{cls.__name__}: expected a function to wrap, got {fn!r}")
            return cls()(fn)
        return super().__new__(cls)

    def __init__(self, fn: Any = None) -> None:
        self._saved: list[bool] = []  # a stack: the same object may be entered recursively

    def __enter__(self) -> _GradMode:
        self._saved.append(state.grad_enabled)
        state.grad_enabled = self._enabled
        return self

    def __exit__(self, *exc: object) -> None:
        state.grad_enabled = self._saved.pop()

    def __call__(self, fn: F) -> F:
        mode = type(self)

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with mode():
                return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]


class no_grad(_GradMode):  # noqa: N801 - reads like the statement it is
    """Turn recording off on this thread: a context manager or a decorator (``@no_grad()`` or
    ``@no_grad``).

    Ops still compute; results simply do not require grad and no graph is kept (inference).
    """

    _enabled = False


class enable_grad(_GradMode):  # noqa: N801
    """Turn recording back on inside a ``no_grad`` region (context manager or decorator)."""

    _enabled = True


def _custom_vjp(grad: NvArray, need: tuple[bool, ...], backward_fn: Callable[..., Any]) -> Any:
    return backward_fn(grad)


class Tape:
    """The autograd controls of the calling thread. Used through its static methods."""

    def __init__(self) -> None:
        raise TypeError(
            "Tape is not instantiated; use its static methods (Tape.record, Tape.backward, ...)"
        )

    @staticmethod
    def record(
        output: Tensor,
        inputs: Sequence[Any],
        backward_fn: Callable[[NvArray], Any],
        name: str = "custom",
    ) -> Tensor:
        """Record a custom op: ``output`` was computed from ``inputs`` outside autograd.

        ``backward_fn(grad)`` receives the gradient of ``output`` (an NvArray of its shape) and
        returns one NvArray (or None) per input, each of that input's shape; a wrong count or
        shape raises an error naming ``name``. Nothing is recorded under ``no_grad`` or when no
        input requires grad. Returns ``output`` (now requiring grad when recorded).

        Example::

            y = Tensor(ignis.exp(x.data))
            Tape.record(y, [x], lambda g: g * y.data, name="my_exp")
        """
        if not isinstance(output, Tensor):
            raise TypeError(
                f"Tape.record '{name}': output must be a Tensor, got {type(output).__name__}"
            )
        inputs = tuple(inputs)
        if not state.grad_enabled:
            if state.observers:
                _observe(inputs)
            return output
        edges = connect(inputs)
        if edges is None:
            return output
        if output.grad_fn is not None:
            raise ValueError(
                f"Tape.record '{name}': output already belongs to a graph (recorded by "
                f"'{output.grad_fn.name}'); record a fresh Tensor"
            )
        if output.dtype.kind != "f":
            raise DTypeError(
                f"Tape.record '{name}': output has dtype {output.dtype.name}; only floating "
                "outputs can carry gradients"
            )
        output.grad_fn = Node(
            name, _custom_vjp, (backward_fn,), edges, output.data, fresh=False, custom=True
        )
        output._requires_grad = True
        return output

    @staticmethod
    def backward(tensor: Tensor, grad_output: Any = None, retain_graph: bool = False) -> None:
        """``tensor.backward(grad_output, retain_graph)``."""
        tensor.backward(grad_output, retain_graph=retain_graph)

    @staticmethod
    def no_grad() -> no_grad:
        """A :class:`no_grad` context manager / decorator."""
        return no_grad()

    @staticmethod
    def no_grad_active() -> bool:
        """True when recording is off on this thread."""
        return not state.grad_enabled

    @staticmethod
    def gradient_checkpoint(inputs: Sequence[Any], fn: Callable[..., Tensor]) -> Tensor:
        """``checkpoint(fn, *inputs)``: keep only the inputs; recompute ``fn`` during backward."""
        from .checkpoint import checkpoint

        return checkpoint(fn, *inputs)

    @staticmethod
    def size() -> int:
        """Number of graph nodes recorded by this thread that are alive and not yet freed."""
        return len(live_nodes())

    @staticmethod
    def clear() -> None:
        """Free every graph recorded by this thread: saved values are dropped and a later
        backward through those graphs raises :class:`GraphFreedError`. Tensors keep their values.
        """
        for node in live_nodes():
            release(node)
