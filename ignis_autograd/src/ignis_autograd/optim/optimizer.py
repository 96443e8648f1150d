"""The optimizer base class: parameter groups, lazily created state, device-side learning rate.

Each parameter group keeps its learning rate twice: as the Python float ``group["lr"]`` and as a
float64 device scalar that the update kernels read. Assigning ``group["lr"] = x`` (or
``optimizer.lr = x``, or a scheduler's ``step()``) queues a fill of that scalar on the stream:
no host synchronization, and a captured CUDA graph that replays the update picks up the new
value. The other hyperparameters are kernel arguments, fixed in a captured graph.

Per-parameter state lives in ``optimizer.state[param]``-like dicts (reach them with
:meth:`Optimizer.state_of`) and is created on a parameter's first update: a float32 ``step``
counter (a device scalar the kernels increment), the optimizer's moments (float32, float64 for
float64 parameters) and, for float16/bfloat16 parameters with ``master_weights=True``, a
float32 ``master`` copy that is updated and rounded into the parameter in the same pass.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np

import ignis
from ignis import DeviceMismatchError, DTypeError, NvArray, ShapeError

from .._grads import zero_grads
from ..tensor import Tensor

__all__ = ["Optimizer", "ParamGroup"]

_HALF = ("float16", "bfloat16")


class ParamGroup(dict):
    """A parameter group: a dict of ``params`` and hyperparameters.

    Setting ``"lr"`` checks the value and writes the group's device scalar as well.
    """

    def __init__(self, owner: str, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._owner = owner
        self.lr_array: NvArray | None = None

    def __setitem__(self, key: str, value: Any) -> None:
        if key == "lr":
            value = _check_lr(value, self._owner)
            if self.lr_array is not None:
                self.lr_array.fill_(value)  # a kernel on the stream: no synchronization
        super().__setitem__(key, value)


def _check_lr(value: Any, owner: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise TypeError(f"{owner}: lr must be a number, got {type(value).__name__}")
    lr = float(value)
    if not (lr >= 0.0 and math.isfinite(lr)):
        raise ValueError(f"{owner}: lr must be a finite number >= 0, got {value!r}")
    return lr


class Optimizer:
    """Base of :class:`SGD`, :class:`Adam` and :class:`AdamW`.

    Args:
        params: an iterable of Tensors, or of dicts ``{"params": [...], "lr": ..., ...}``
            (parameter groups with their own hyperparameters; missing ones take the defaults).
        defaults: the hyperparameters of every group.

    Subclasses define :meth:`_check_group`, :meth:`_new_state` and :meth:`_update`.
    """

    #: state entries besides ``step`` and ``master`` (moments), in order
    _STATE_KEYS: tuple[str, ...] = ()

    def __init__(self, params: Any, defaults: dict[str, Any]):
        name = type(self).__name__
        if isinstance(params, (Tensor, NvArray)) or not isinstance(params, Iterable):
            raise TypeError(
                f"{name}: params must be an iterable of Tensors or of parameter-group dicts, "
                f"got {type(params).__name__}"
            )
        self.defaults = dict(defaults)
        self.param_groups: list[ParamGroup] = []
        self._state: dict[int, dict[str, NvArray]] = {}
        groups = list(params)
        if not groups:
            raise ValueError(f"{name}: got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for g in groups:
            self.add_param_group(g)

    # --- groups -----------------------------------------------------------------------------------

    def add_param_group(self, group: dict[str, Any]) -> None:
        """Add a group ``{"params": [...], hyperparameter: value, ...}``; the defaults fill
        in the missing hyperparameters."""
        name = type(self).__name__
        if not isinstance(group, dict):
            raise TypeError(f"{name}: a parameter group must be a dict, got {type(group).__name__}")
        if "params" not in group:
            raise ValueError(f"{name}: a parameter group needs a 'params' entry")
        params = group["params"]
        params = [params] if isinstance(params, Tensor) else list(params)
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        for i, p in enumerate(params):
            if not isinstance(p, Tensor):
                raise TypeError(
                    f"{name}: params[{i}] must be a Tensor, got {type(p).__name__}"
                )
            if not p.is_leaf:
                raise ValueError(
                    f"{name}: params[{i}] is not a leaf tensor (computed by '{p.grad_fn.name}'); "
                    "only leaves can be optimized"
                )
            if p.dtype.kind != "f":
                raise DTypeError(
                    f"{name}: params[{i}] has dtype {p.dtype.name}; expected a floating dtype"
                )
            if id(p) in seen:
                raise ValueError(f"{name}: params[{i}] appears more than once among the parameters")
            seen.add(id(p))
        unknown = set(group) - set(self.defaults) - {"params", "initial_lr"}
        if unknown:
            raise ValueError(
                f"{name}: unknown hyperparameter(s) {sorted(unknown)}; expected some of "
                f"{sorted(self.defaults)}"
            )
        pg = ParamGroup(name)
        for k, v in self.defaults.items():
            pg[k] = group.get(k, v)
        if "initial_lr" in group:
            pg["initial_lr"] = group["initial_lr"]
        pg["params"] = params
        self._check_group(pg)
        if params:
            device = params[0].device
            for i, p in enumerate(params):
                if p.device != device:
                    raise DeviceMismatchError(
                        f"{name}: all parameters of a group must be on one device; params[{i}] "
                        f"is on {p.device}, params[0] on {device}"
                    )
            pg.lr_array = ignis.full((), pg["lr"], dtype="float64", device=device)
        self.param_groups.append(pg)

    def _check_group(self, group: ParamGroup) -> None:
        _check_nonneg(group, "weight_decay", type(self).__name__)

    @property
    def lr(self) -> float:
        """The learning rate of the first group; setting it sets every group's."""
        return float(self.param_groups[0]["lr"])

    @lr.setter
    def lr(self, value: float) -> None:
        for g in self.param_groups:
            g["lr"] = value

    # --- state ------------------------------------------------------------------------------------

    def state_of(self, param: Tensor) -> dict[str, NvArray]:
        """The state dict of ``param`` (empty before its first update)."""
        return self._state.get(id(param), {})

    def _state_dtype(self, p: Tensor) -> str:
        return "float64" if p.dtype.name == "float64" else "float32"

    def _uses_master(self, p: Tensor, group: ParamGroup) -> bool:
        return bool(group.get("master_weights", False)) and p.dtype.name in _HALF

    def _new_state(self, p: Tensor, group: ParamGroup) -> dict[str, NvArray]:
        st: dict[str, NvArray] = {"step": ignis.zeros((), dtype="float32", device=p.device)}
        for key in self._state_keys(group):
            st[key] = ignis.zeros(p.shape, dtype=self._state_dtype(p), device=p.device)
        if self._uses_master(p, group):
            st["master"] = p.data.astype("float32")
        return st

    def _state_keys(self, group: ParamGroup) -> tuple[str, ...]:
        return self._STATE_KEYS

    def _prepared_state(
        self, p: Tensor, group: ParamGroup, keys: tuple[str, ...] | None = None
    ) -> dict[str, NvArray]:
        """The state ``p``'s update will use: its own, completed with any missing (zero)
        entries (e.g. momentum switched on later), or a new one; stored by the caller.
        ``keys``: ``self._state_keys(group)`` when the caller has it already."""
        st = self._state.get(id(p))
        if st is None:
            return self._new_state(p, group)
        if keys is None:
            keys = self._state_keys(group)
        missing = [key for key in keys if key not in st]
        if missing:
            st = dict(st)
            for key in missing:
                st[key] = ignis.zeros(p.shape, dtype=self._state_dtype(p), device=p.device)
        return st

    # --- the step ---------------------------------------------------------------------------------

    def step(self, found_inf: NvArray | None = None) -> None:
        """Update every parameter that has a gradient (``grad is None``: skipped, like PyTorch).

        One multi-tensor launch per group and dtype combination, queued on the stream; nothing
        is synchronized. ``found_inf`` (a float32 device scalar, see :mod:`ignis_autograd.amp`)
        skips the update on the device when nonzero.

        All or nothing: every check and allocation (new state, launch tables) of every group
        comes before the first launch, so an error such as running out of device memory leaves
        the parameters and the state as they were.
        """
        work = []
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            for p in params:
                if p.grad.shape != p.data._shape:
                    raise ShapeError(
                        f"{type(self).__name__}.step: a gradient has shape {p.grad.shape}, its "
                        f"parameter {p.shape}"
                    )
            work.append((group, params))
        prepared = []
        for group, params in work:  # state for every group first
            keys = self._state_keys(group)
            states = [self._prepared_state(p, group, keys) for p in params]
            masters = [st.get("master") for st in states]
            prepared.append((group, params, states,
                             masters if any(m is not None for m in masters) else None))
        with ignis.nn.multi_tensor_batch():  # the updates launch together at the end, or not
            for group, params, states, masters in prepared:
                self._update(group, params, states, masters, found_inf)
            for _, params, states, _ in prepared:  # everything is ready: keep the new state
                for p, st in zip(params, states, strict=True):
                    self._state[id(p)] = st

    def _update(self, group: ParamGroup, params: list[Tensor], states: list[dict[str, NvArray]],
                masters: list[NvArray | None] | None, found_inf: NvArray | None) -> None:
        raise NotImplementedError

    def zero_grad(self, set_to_none: bool = False) -> None:
        """Clear the gradients: in place by default (the buffers stay where they are, which a
        captured CUDA graph needs), or drop them with ``set_to_none=True``. In place, the
        contiguous floating-point gradients are zeroed together (one launch per device and
        dtype on a GPU)."""
        zero_grads((p for group in self.param_groups for p in group["params"]), set_to_none)

    # --- saving and loading -----------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """A snapshot: ``{"state": {index: {name: NvArray}}, "param_groups": [...]}``.

        Parameters are numbered across the groups in order; a group lists its indices under
        ``"params"`` next to its hyperparameters (plain Python values). The state arrays are
        copies on the parameters' device (``step`` is a float32 scalar; moments and ``master``
        have the parameter's shape).
        """
        index: dict[int, int] = {}
        groups = []
        for group in self.param_groups:
            entry = {k: v for k, v in group.items() if k != "params"}
            ids = []
            for p in group["params"]:
                index.setdefault(id(p), len(index))
                ids.append(index[id(p)])
            entry["params"] = ids
            groups.append(entry)
        state = {}
        for group in self.param_groups:
            for p in group["params"]:
                st = self._state.get(id(p))
                if st:
                    state[index[id(p)]] = {k: v.clone() for k, v in st.items()}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict` (arrays may be NvArrays on any device or NumPy arrays;
        index keys may be ints or their strings). The groups must match this optimizer's in
        number and size."""
        name = f"{type(self).__name__}.load_state_dict"
        groups = state_dict.get("param_groups")
        if not isinstance(groups, (list, tuple)) or len(groups) != len(self.param_groups):
            got = len(groups) if isinstance(groups, (list, tuple)) else type(groups).__name__
            raise ValueError(
                f"{name}: expected {len(self.param_groups)} parameter groups, got {got}"
            )
        by_index: dict[int, tuple[Tensor, ParamGroup]] = {}
        for i, (saved, group) in enumerate(zip(groups, self.param_groups, strict=True)):
            if len(saved["params"]) != len(group["params"]):
                raise ValueError(
                    f"{name}: group {i} has {len(group['params'])} parameters, the saved one "
                    f"{len(saved['params'])}"
                )
            for k, p in zip(saved["params"], group["params"], strict=True):
                by_index[int(k)] = (p, group)
        for saved, group in zip(groups, self.param_groups, strict=True):
            for k, v in saved.items():
                if k == "params":
                    continue
                group[k] = tuple(v) if isinstance(v, list) else v
            self._check_group(group)
        new_state: dict[int, dict[str, NvArray]] = {}
        for k, entries in state_dict.get("state", {}).items():
            if int(k) not in by_index:
                raise ValueError(f"{name}: state for parameter {k}, which no group lists")
            p, group = by_index[int(k)]
            st = {}
            for key, value in entries.items():
                st[key] = _restore(value, p, key, self._state_dtype(p), name)
            new_state[id(p)] = st
        self._state = new_state

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__} ("]
        for i, g in enumerate(self.param_groups):
            hyper = ", ".join(f"{k}={v}" for k, v in g.items() if k != "params")
            lines.append(f"  group {i}: {len(g['params'])} params, {hyper}")
        return "\n".join(lines + [")"])


def _restore(value: Any, p: Tensor, key: str, state_dtype: str, op: str) -> NvArray:
    if key == "step":
        shape, dtype = (), "float32"
    elif key == "master":
        shape, dtype = p.shape, "float32"
    else:
        shape, dtype = p.shape, state_dtype
    if isinstance(value, Tensor):
        value = value.data
    if isinstance(value, NvArray):
        arr = value.to(p.device).astype(dtype)
    else:
        arr = ignis.from_host(np.asarray(value), dtype=dtype, device=p.device)
    if arr.numel != math.prod(shape):
        raise ShapeError(f"{op}: state '{key}' has shape {arr.shape}, expected {shape}")
    arr = arr.reshape(shape)
    return arr if arr.is_contiguous else arr.contiguous()


def _check_nonneg(group: dict[str, Any], key: str, owner: str) -> None:
    v = group[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0:
        raise ValueError(f"{owner}: {key} must be a number >= 0, got {v!r}")
