"""Module: the base class of layers and models.

A Module owns parameters (:class:`Parameter`), buffers (NvArrays that are state but not learned)
and submodules, all registered by attribute assignment, and names them with dotted paths
(``"blocks.0.attn.qkv.weight"``) that match PyTorch's for the same structure.

Example::

    >>> from ignis_autograd import nn
    >>> class TwoLayer(nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.fc1 = nn.Linear(4, 8)
    ...         self.fc2 = nn.Linear(8, 2)
    ...     def forward(self, x):
    ...         return self.fc2(self.fc1(x).relu())
    >>> m = TwoLayer()
    >>> [name for name, _ in m.named_parameters()]
    ['fc1.weight', 'fc1.bias', 'fc2.weight', 'fc2.bias']
    >>> m.num_parameters()
    58
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
from ignis._dtypes import as_dtype

from ignis import DTypeError, NvArray, ShapeError

from .._grads import zero_grads
from ..tensor import Tensor
from .parameter import Parameter

__all__ = ["Module"]

_HALF = ("float16", "bfloat16")


class Module:
    """Base class: subclass it, assign parameters/submodules in ``__init__``, define ``forward``.

    Calling the module calls :meth:`forward`. :attr:`training` (default True) is switched by
    :meth:`train` / :meth:`eval` for the whole tree; layers such as Dropout read it.
    """

    training: bool

    def __init__(self) -> None:
        # object.__setattr__: our own __setattr__ needs these dictionaries to exist.
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_non_persistent", set())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "training", True)

    # --- registration ------------------------------------------------------------------------

    def _registries(self) -> tuple[dict, dict, dict]:
        try:
            return self._parameters, self._buffers, self._modules
        except AttributeError:
            raise AttributeError(
                f"{type(self).__name__}: call super().__init__() before assigning attributes"
            ) from None

    def __setattr__(self, name: str, value: Any) -> None:
        params, buffers, modules = self._registries()
        # Replacing an entry of the same kind keeps its place in the order (and in state dicts).
        if isinstance(value, Parameter):
            if name not in params:
                self._forget(name)
            params[name] = value
        elif isinstance(value, Module):
            if name not in modules:
                self._forget(name)
            modules[name] = value
        elif name in params:
            if value is not None:
                raise TypeError(
                    f"{type(self).__name__}: cannot assign {type(value).__name__} to parameter "
                    f"'{name}' (expected a Parameter or None)"
                )
            params[name] = None
        elif name in modules:
            if value is not None:
                raise TypeError(
                    f"{type(self).__name__}: cannot assign {type(value).__name__} to submodule "
                    f"'{name}' (expected a Module or None)"
                )
            modules[name] = None
        elif name in buffers:
            buffers[name] = _buffer_value(value, name, type(self).__name__)
        else:
            object.__setattr__(self, name, value)

    def _forget(self, name: str) -> None:
        self.__dict__.pop(name, None)
        self._parameters.pop(name, None)
        self._buffers.pop(name, None)
        self._non_persistent.discard(name)
        self._modules.pop(name, None)

    def __getattr__(self, name: str) -> Any:
        # Only called when normal lookup fails: the registered names live in the registries.
        d = self.__dict__
        for reg in ("_parameters", "_buffers", "_modules"):
            if reg in d and name in d[reg]:
                return d[reg][name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name: str) -> None:
        for reg in (self._parameters, self._buffers, self._modules):
            if name in reg:
                del reg[name]
                self._non_persistent.discard(name)
                return
        object.__delattr__(self, name)

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        """Register ``param`` (or a None placeholder, e.g. an absent bias) under ``name``."""
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(
                f"register_parameter: '{name}' must be a Parameter or None, got "
                f"{type(param).__name__}"
            )
        self._forget(name)
        self._parameters[name] = param

    def register_buffer(self, name: str, value: Any, persistent: bool = True) -> None:
        """Register state that is not learned (an NvArray, a Tensor's data, or None).

        Persistent buffers are part of :meth:`state_dict`; others (e.g. caches that can be
        recomputed) are not. Buffers move with :meth:`to`.
        """
        self._forget(name)
        self._buffers[name] = _buffer_value(value, name, type(self).__name__)
        if not persistent:
            self._non_persistent.add(name)

    def add_module(self, name: str, module: Module | None) -> None:
        """Register ``module`` under ``name`` (what attribute assignment does)."""
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"add_module: '{name}' must be a Module, got {type(module).__name__}")
        self._forget(name)
        self._modules[name] = module

    # --- traversal ---------------------------------------------------------------------------

    def named_modules(self, prefix: str = "") -> Iterator[tuple[str, Module]]:
        """``(dotted name, module)`` for this module (name ``prefix``) and every descendant,
        each module once even when it is reachable under two names."""
        seen: set[int] = set()
        stack = [(prefix, self)]
        while stack:
            name, mod = stack.pop()
            if id(mod) in seen:
                continue
            seen.add(id(mod))
            yield name, mod
            kids = [
                (f"{name}.{k}" if name else k, m) for k, m in mod._modules.items() if m is not None
            ]
            stack.extend(reversed(kids))

    def modules(self) -> Iterator[Module]:
        for _, m in self.named_modules():
            yield m

    def named_children(self) -> Iterator[tuple[str, Module]]:
        """The direct submodules with their attribute names."""
        for name, m in self._modules.items():
            if m is not None:
                yield name, m

    def children(self) -> Iterator[Module]:
        for _, m in self.named_children():
            yield m

    def named_parameters(
        self, prefix: str = "", recurse: bool = True
    ) -> Iterator[tuple[str, Parameter]]:
        """``(dotted name, Parameter)`` pairs; a parameter shared by two modules (tied weights)
        is listed once, under its first name."""
        seen: set[int] = set()
        mods = self.named_modules(prefix) if recurse else iter([(prefix, self)])
        for mname, mod in mods:
            for pname, p in mod._parameters.items():
                if p is None or id(p) in seen:
                    continue
                seen.add(id(p))
                yield (f"{mname}.{pname}" if mname else pname), p

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        """The parameters of :meth:`named_parameters`, in its order, without their names."""
        cls = type(self)
        if not recurse or (
            cls.named_parameters is not Module.named_parameters
            or cls.named_modules is not Module.named_modules
        ):
            for _, p in self.named_parameters(recurse=recurse):
                yield p
            return
        # The walk of named_modules/named_parameters without building the dotted names: a
        # training loop asks for the parameters every step (gradient clipping).
        seen_modules: set[int] = set()
        seen: set[int] = set()
        stack = [self]
        while stack:
            mod = stack.pop()
            if id(mod) in seen_modules:
                continue
            seen_modules.add(id(mod))
            for p in mod._parameters.values():
                if p is None or id(p) in seen:
                    continue
                seen.add(id(p))
                yield p
            stack.extend(reversed([m for m in mod._modules.values() if m is not None]))

    def named_buffers(
        self, prefix: str = "", recurse: bool = True
    ) -> Iterator[tuple[str, NvArray]]:
        mods = self.named_modules(prefix) if recurse else iter([(prefix, self)])
        for mname, mod in mods:
            for bname, b in mod._buffers.items():
                if b is not None:
                    yield (f"{mname}.{bname}" if mname else bname), b

    def buffers(self, recurse: bool = True) -> Iterator[NvArray]:
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def num_parameters(self, trainable_only: bool = False) -> int:
        """The number of parameter elements (shared parameters counted once)."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad or not trainable_only)

    # --- modes and gradients -----------------------------------------------------------------

    def train(self, mode: bool = True) -> Module:
        """Set :attr:`training` on this module and all descendants; returns self."""
        for m in self.modules():
            object.__setattr__(m, "training", bool(mode))
        return self

    def eval(self) -> Module:
        """``train(False)``: Dropout becomes the identity. Returns self."""
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> Module:
        """Set ``requires_grad`` on every parameter (freeze with False); returns self."""
        for p in self.parameters():
            p.requires_grad = requires_grad
        return self

    def zero_grad(self, set_to_none: bool = False) -> None:
        """Reset the gradients: fill them with zeros, or drop them (``set_to_none=True``). The
        contiguous floating-point gradients are zeroed together (one launch per device and
        dtype on a GPU)."""
        zero_grads(self.parameters(), set_to_none)

    # --- device and dtype --------------------------------------------------------------------

    def to(self, device: Any = None, dtype: Any = None) -> Module:
        """Move parameters and buffers to ``device`` and/or cast floating ones to ``dtype``.

        In place: every Parameter object stays the same (only its ``data`` and ``grad`` change),
        so an optimizer built before the call keeps working. Integer and bool state keeps its
        dtype. Returns self. Example: ``model.to("cuda:0", dtype="bfloat16")``.
        """
        target = as_dtype(dtype, "Module.to") if dtype is not None else None
        if target is not None and target.kind != "f":
            raise DTypeError(f"Module.to: dtype must be floating, got {target.name}")
        for p in self.parameters():
            p.data = _convert(p.data, device, target)
            if p.grad is not None:
                grad_dtype = None
                if target is not None:
                    grad_dtype = as_dtype("float32" if target.name in _HALF else target, "to")
                p.grad = _convert(p.grad, device, grad_dtype)
        for mod in self.modules():
            for name, b in list(mod._buffers.items()):
                if b is not None:
                    mod._buffers[name] = _convert(b, device, target)
        return self

    # --- state -------------------------------------------------------------------------------

    def state_dict(self) -> OrderedDict[str, NvArray]:
        """``{dotted name: NvArray}`` of every parameter and persistent buffer.

        The arrays are the module's own (not copies): save them or copy them before changing
        the model if a snapshot is wanted. Names match PyTorch's for Linear, Embedding and
        LayerNorm (``weight``, ``bias``).
        """
        out: OrderedDict[str, NvArray] = OrderedDict()
        for name, p in self.named_parameters():
            out[name] = p.data
        for mname, mod in self.named_modules():
            for bname, b in mod._buffers.items():
                if b is not None and bname not in mod._non_persistent:
                    out[f"{mname}.{bname}" if mname else bname] = b
        return out

    def load_state_dict(self, state: Mapping[str, Any], strict: bool = True) -> tuple[list, list]:
        """Copy the values of ``state`` into this module's parameters and buffers, in place.

        Values may be NvArrays (any device), Tensors or NumPy arrays; they are converted to
        each parameter's dtype and device. With ``strict`` (default) missing or unexpected keys
        raise KeyError listing them; a shape mismatch always raises ShapeError, before anything
        is copied. Returns ``(missing_keys, unexpected_keys)``.
        """
        own = self.state_dict()
        aliases = self._tied_aliases(own)
        missing = [k for k in own if k not in state]
        unexpected = [k for k in state if k not in own and k not in aliases]
        if strict and (missing or unexpected):
            parts = []
            if missing:
                parts.append(f"missing keys {missing}")
            if unexpected:
                parts.append(f"unexpected keys {unexpected}")
            raise KeyError(
                f"load_state_dict: state dict does not match {type(self).__name__}: "
                + "; ".join(parts)
            )
        plan = []
        for key, dst in own.items():
            if key not in state:
                continue
            src = state[key]
            src_d = src.data if isinstance(src, Tensor) else src
            shape = tuple(src_d.shape) if hasattr(src_d, "shape") else np.shape(src_d)
            if shape != dst.shape:
                raise ShapeError(
                    f"load_state_dict: '{key}' has shape {shape} in the state dict, expected "
                    f"{dst.shape} (the shape in {type(self).__name__})"
                )
            plan.append((dst, src_d))
        for dst, src in plan:
            if src is not dst:
                dst.copy_(src)
        return missing, unexpected

    def _tied_aliases(self, canonical: Mapping[str, NvArray]) -> set[str]:
        # A parameter shared by two modules has a second name; PyTorch's state dicts list both,
        # so that name is accepted (and skipped: it is the same array) rather than unexpected.
        names = set()
        for mname, mod in self.named_modules():
            for pname, p in mod._parameters.items():
                key = f"{mname}.{pname}" if mname else pname
                if p is not None and key not in canonical:
                    names.add(key)
        return names

    # --- calling and printing ----------------------------------------------------------------

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not define forward()")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(*args, **kwargs)

    def extra_repr(self) -> str:
        """The text inside the parentheses of this module's repr line (override in layers)."""
        return ""

    def __repr__(self) -> str:
        extra = self.extra_repr()
        kids = [(n, m) for n, m in self._modules.items() if m is not None]
        if not kids:
            return f"{type(self).__name__}({extra})"
        lines = [f"{type(self).__name__}("]
        if extra:
            lines.append("  " + extra.replace("\n", "\n  "))
        for name, m in kids:
            sub = repr(m).replace("\n", "\n  ")
            lines.append(f"  ({name}): {sub}")
        return "\n".join(lines) + "\n)"

    def __dir__(self) -> list[str]:
        return sorted(
            set(super().__dir__()) | set(self._parameters) | set(self._buffers) | set(self._modules)
        )


def _buffer_value(value: Any, name: str, owner: str) -> NvArray | None:
    if value is None or isinstance(value, NvArray):
        return value
    if isinstance(value, Tensor):
        return value.data
    raise TypeError(
        f"{owner}: buffer '{name}' must be an NvArray, a Tensor or None, got {type(value).__name__}"
    )


def _convert(arr: NvArray, device: Any, dtype: Any) -> NvArray:
    out = arr.to(device) if device is not None else arr
    if dtype is not None and out.dtype.kind == "f" and out.dtype != dtype:
        out = out.astype(dtype)
    return out
