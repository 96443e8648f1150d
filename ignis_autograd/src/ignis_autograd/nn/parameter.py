"""Parameter: a leaf Tensor that a :class:`~ignis_autograd.nn.Module` registers as learnable.

Example::

    >>> import ignis
    >>> from ignis_autograd.nn import Parameter
    >>> w = Parameter(ignis.zeros((3, 4)))
    >>> w.requires_grad
    True
"""

from __future__ import annotations

from typing import Any

from ignis import NvArray

from ..tensor import Tensor

__all__ = ["Parameter"]


class Parameter(Tensor):
    """A leaf :class:`Tensor` that requires a gradient by default.

    Assigning one to a Module attribute registers it (see :meth:`Module.named_parameters`).
    Optimizers hold Parameter objects, so code that moves or reloads weights changes
    ``param.data`` in place instead of replacing the object.

    Args:
        data: the values: an NvArray (kept, not copied) or a Tensor (its data is kept).
        requires_grad: default True (floating dtypes only).
    """

    __slots__ = ()

    def __init__(self, data: NvArray | Tensor, requires_grad: bool = True):
        if isinstance(data, Tensor):
            data = data.data
        super().__init__(data, requires_grad)

    def __repr__(self) -> str:
        body = repr(self.data)
        body = body[len("NvArray(") : -1] if body.startswith("NvArray(") else body
        return f"Parameter({body}, requires_grad={self.requires_grad})"

    def __reduce__(self) -> Any:
        return (Parameter, (self.data, self.requires_grad))
