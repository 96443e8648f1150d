"""The basic layers: Linear, Embedding, LayerNorm, RMSNorm, Dropout, activations and MLP.

Parameter names and shapes match PyTorch's (``Linear.weight`` is ``(out, in)``), so state dicts
move between the two libraries key for key. Every layer takes ``device`` and ``dtype`` for its
parameters (default: the default device, float32).

Example::

    >>> import ignis_autograd as ag
    >>> from ignis_autograd import nn
    >>> mlp = nn.MLP(64, 256)
    >>> y = mlp(ag.Tensor.randn((8, 10, 64)))     # (8, 10, 64)
"""

from __future__ import annotations

import math
from typing import Any

from ..functional import dropout, embedding, layer_norm, linear, rms_norm
from ..tensor import Tensor
from . import init
from ._util import as_tensor, check_last_dim, check_probability, new_parameter, positive_int
from .module import Module

__all__ = ["Linear", "Embedding", "LayerNorm", "RMSNorm", "Dropout", "GELU", "ReLU", "SiLU", "MLP"]


class Linear(Module):
    """``y = x @ weight.T + bias`` over the last dimension of ``x`` (any leading dimensions).

    ``weight`` is ``(out_features, in_features)`` and, like ``bias``, starts uniform in
    ``[-1/sqrt(in_features), 1/sqrt(in_features))`` (PyTorch's default).
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        device: Any = None,
        dtype: Any = "float32",
    ):
        super().__init__()
        self.in_features = positive_int(in_features, "Linear", "in_features")
        self.out_features = positive_int(out_features, "Linear", "out_features")
        bound = 1.0 / math.sqrt(in_features)
        self.weight = new_parameter((out_features, in_features), dtype, device, "Linear")
        init.uniform_(self.weight, -bound, bound)
        if bias:
            self.bias = new_parameter((out_features,), dtype, device, "Linear")
            init.uniform_(self.bias, -bound, bound)
        else:
            self.register_parameter("bias", None)

    def forward(self, x: Any) -> Tensor:
        xt = as_tensor(x, "Linear")
        check_last_dim(xt, self.in_features, "Linear", "in_features")
        # One recorded op: the batch dimensions fold into the rows of a single GEMM.
        return linear(xt, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"bias={self.bias is not None}"
        )


class Embedding(Module):
    """Rows of ``weight`` (num_embeddings, embedding_dim) picked by integer ids; starts N(0, 1).

    ``Embedding(V, D)(ids)`` has shape ``ids.shape + (D,)``. Ids must lie in ``[0, V)``; with
    ``check_ids=True`` others raise (this waits for the device to count them), otherwise they
    are not checked (see :func:`ignis_autograd.embedding`).
    """

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        device: Any = None,
        dtype: Any = "float32",
        check_ids: bool = False,
    ):
        super().__init__()
        self.check_ids = bool(check_ids)
        self.num_embeddings = positive_int(num_embeddings, "Embedding", "num_embeddings")
        self.embedding_dim = positive_int(embedding_dim, "Embedding", "embedding_dim")
        self.weight = new_parameter((num_embeddings, embedding_dim), dtype, device, "Embedding")
        init.normal_(self.weight)

    def forward(self, ids: Any) -> Tensor:
        if self.check_ids:
            return embedding(ids, self.weight, check=True)
        return embedding(ids, self.weight)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}"


def _normalized_shape(dim: Any, op: str) -> tuple[int, ...]:
    shape = (dim,) if isinstance(dim, int) else tuple(dim)
    for d in shape:
        positive_int(d, op, "normalized_shape")
    if not shape:
        raise ValueError(f"{op}: normalized_shape must not be empty")
    return shape


class LayerNorm(Module):
    """Layer normalization over the trailing ``dim`` (an int or a shape), biased variance;
    ``weight`` starts at ones and ``bias`` at zeros (``bias=False`` drops it)."""

    def __init__(
        self,
        dim: int | tuple[int, ...],
        eps: float = 1e-5,
        bias: bool = True,
        device: Any = None,
        dtype: Any = "float32",
    ):
        super().__init__()
        self.normalized_shape = _normalized_shape(dim, "LayerNorm")
        self.eps = float(eps)
        self.weight = init.ones_(new_parameter(self.normalized_shape, dtype, device, "LayerNorm"))
        if bias:
            self.bias = init.zeros_(
                new_parameter(self.normalized_shape, dtype, device, "LayerNorm")
            )
        else:
            self.register_parameter("bias", None)

    def forward(self, x: Any) -> Tensor:
        return layer_norm(
            as_tensor(x, "LayerNorm"), self.normalized_shape, self.weight, self.bias, self.eps
        )

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}"


class RMSNorm(Module):
    """``x / sqrt(mean(x^2) + eps) * weight`` over the trailing ``dim``; ``weight`` starts at 1."""

    def __init__(
        self,
        dim: int | tuple[int, ...],
        eps: float = 1e-6,
        device: Any = None,
        dtype: Any = "float32",
    ):
        super().__init__()
        self.normalized_shape = _normalized_shape(dim, "RMSNorm")
        self.eps = float(eps)
        self.weight = init.ones_(new_parameter(self.normalized_shape, dtype, device, "RMSNorm"))

    def forward(self, x: Any) -> Tensor:
        return rms_norm(as_tensor(x, "RMSNorm"), self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}"


class Dropout(Module):
    """Zero elements with probability ``p`` and scale the rest by ``1/(1-p)`` while training;
    the identity in eval mode. The mask comes from ``generator`` or ``ignis.random``."""

    def __init__(self, p: float = 0.5, generator: Any = None):
        super().__init__()
        self.p = check_probability(p, "Dropout")
        self.generator = generator

    def forward(self, x: Any) -> Tensor:
        xt = as_tensor(x, "Dropout")
        if not self.training or self.p == 0.0:
            return xt
        return dropout(xt, self.p, True, self.generator)

    def extra_repr(self) -> str:
        return f"p={self.p}"


class GELU(Module):
    """GELU, exact (``approximate="none"``) or the tanh approximation (``"tanh"``)."""

    def __init__(self, approximate: str = "none"):
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ValueError(f"GELU: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, x: Any) -> Tensor:
        return as_tensor(x, "GELU").gelu(self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}" if self.approximate != "none" else ""


class ReLU(Module):
    """``max(x, 0)``."""

    def forward(self, x: Any) -> Tensor:
        return as_tensor(x, "ReLU").relu()


class SiLU(Module):
    """``x * sigmoid(x)``."""

    def forward(self, x: Any) -> Tensor:
        return as_tensor(x, "SiLU").silu()


_ACTIVATIONS = {
    "gelu": lambda: GELU(),
    "gelu_tanh": lambda: GELU("tanh"),
    "relu": ReLU,
    "silu": SiLU,
}


class MLP(Module):
    """``fc2(activation(fc1(x)))`` then dropout: ``dim -> hidden -> dim``.

    ``activation``: ``"gelu"`` (exact), ``"gelu_tanh"``, ``"relu"`` or ``"silu"``.
    """

    def __init__(
        self,
        dim: int,
        hidden: int,
        activation: str = "gelu",
        dropout: float = 0.0,
        bias: bool = True,
        device: Any = None,
        dtype: Any = "float32",
    ):
        super().__init__()
        if activation not in _ACTIVATIONS:
            raise ValueError(
                f"MLP: unknown activation {activation!r}; expected one of {sorted(_ACTIVATIONS)}"
            )
        self.fc1 = Linear(dim, hidden, bias=bias, device=device, dtype=dtype)
        self.act = _ACTIVATIONS[activation]()
        self.fc2 = Linear(hidden, dim, bias=bias, device=device, dtype=dtype)
        self.drop = Dropout(dropout)

    def forward(self, x: Any) -> Tensor:
        return self.drop(self.fc2(self.act(self.fc1(x))))
