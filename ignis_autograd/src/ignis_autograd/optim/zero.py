"""ZeRO stage 1: the optimizer state sharded over the ranks.

:class:`ZeroRedundancyOptimizer` lays each parameter group out in one flat buffer (the
parameters become views of it), padded to a multiple of the world size and cut into one
contiguous shard per rank. A step reduce-scatters the gradients (``ReduceOp.AVG``: each rank
receives the average of its shard), runs the wrapped optimizer (AdamW by default) on its shard
only, so each rank keeps ``1/world_size`` of the moments (and master weights), and all-gathers
the updated shards back into every rank's parameters. For element-wise optimizers (SGD, Adam,
AdamW) the result is the wrapped optimizer's on the averaged gradients.

Without :class:`~ignis_autograd.parallel.DistributedDataParallel` the gradients are averaged
here; under it they already are: pass ``reduce_gradients=False`` to skip the reduction (each
rank then takes its shard of its own, already averaged, gradient).

Example::

    >>> opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=AdamW, lr=3e-4)
    >>> loss.backward(); opt.step(); opt.zero_grad()
"""

from __future__ import annotations

from typing import Any

import ignis
from ignis import DTypeError, NvArray

from .._grads import gather_grads_into, zero_grads
from .._graph import grad_dtype
from ..tensor import Tensor
from .optimizers import AdamW

__all__ = ["ZeroRedundancyOptimizer"]


class _Shard:
    """One parameter group laid out flat: the full buffers and this rank's shard of them."""

    def __init__(self, params: list[Tensor], comm: Any, name: str):
        first = params[0].data
        for i, p in enumerate(params):
            d = p.data
            if d.dtype != first.dtype or d.device != first.device:
                raise DTypeError(
                    f"{name}: the parameters of one group must share dtype and device; "
                    f"params[{i}] is {d.dtype.name} on {d.device}, params[0] "
                    f"{first.dtype.name} on {first.device} (put them in separate groups)"
                )
        world, rank = comm.world_size, comm.rank
        total = sum(p.data.numel for p in params)
        self.shard_numel = -(-total // world) if total else 0
        padded = self.shard_numel * world
        device = first.device
        self.params = params
        self.flat_param = ignis.zeros((padded,), dtype=first.dtype, device=device)
        gdt = grad_dtype(first.dtype)
        self.flat_grad = ignis.zeros((padded,), dtype=gdt, device=device)
        self.param_views: list[NvArray] = []
        self.grad_views: list[NvArray] = []
        offset = 0
        for p in params:
            n, shape = p.data.numel, p.data.shape
            pv = self.flat_param[offset : offset + n].reshape(shape)
            pv.copy_(p.data)
            p.data = pv  # the parameter now lives in the flat buffer (same values)
            self.param_views.append(pv)
            self.grad_views.append(self.flat_grad[offset : offset + n].reshape(shape))
            offset += n
        lo, hi = rank * self.shard_numel, (rank + 1) * self.shard_numel
        self.local = Tensor(self.flat_param[lo:hi], requires_grad=True)
        self.local.grad = ignis.zeros((self.shard_numel,), dtype=gdt, device=device)
        self._grad_slice = self.flat_grad[lo:hi]

    def gather_grads(self) -> None:
        gather_grads_into(self.params, self.grad_views)

    def local_grad_from_own(self) -> None:
        self.local.grad.copy_(self._grad_slice)


class ZeroRedundancyOptimizer:
    """Shard ``optimizer_class``'s state over the ranks (ZeRO-1, see the module notes).

    Args:
        params: Tensors or parameter-group dicts, as for any optimizer; a group's parameters
            must share dtype and device.
        optimizer_class: the element-wise optimizer run on each shard (default AdamW).
        process_group: an :class:`ignis.distributed.Communicator` (default: the default group).
        reduce_gradients: average the gradients over the ranks in :meth:`step` (default);
            False when they are averaged already (under DistributedDataParallel).
        **defaults: the optimizer's hyperparameters (``lr``, ``weight_decay``, ...).

    Attributes: ``optimizer`` (the wrapped optimizer over this rank's shards),
    ``param_groups`` (its groups: schedulers and ``lr`` work through them), ``process_group``.
    At construction rank 0's parameter values are broadcast to every rank.
    """

    def __init__(
        self,
        params: Any,
        optimizer_class: type = AdamW,
        process_group: Any = None,
        reduce_gradients: bool = True,
        **defaults: Any,
    ):
        name = "ZeroRedundancyOptimizer"
        if process_group is None:
            import ignis.distributed as dist

            process_group = dist.get_default_group(name)
        self.process_group = comm = process_group
        self.reduce_gradients = bool(reduce_gradients)
        if isinstance(params, (Tensor, NvArray)):
            raise TypeError(f"{name}: params must be an iterable of Tensors or of groups")
        groups = list(params)
        if not groups:
            raise ValueError(f"{name}: got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        seen: set[int] = set()
        self._shards: list[_Shard] = []
        local_groups = []
        for g in groups:
            ps = g["params"]
            ps = [ps] if isinstance(ps, Tensor) else list(ps)
            ps = [p for p in ps if not (id(p) in seen or seen.add(id(p)))]
            for i, p in enumerate(ps):
                if not isinstance(p, Tensor) or not p.is_leaf:
                    raise TypeError(f"{name}: params[{i}] must be a leaf Tensor")
            if not ps:
                continue
            shard = _Shard(ps, comm, name)
            comm.broadcast(shard.flat_param, 0)
            self._shards.append(shard)
            local_groups.append(
                {**{k: v for k, v in g.items() if k != "params"}, "params": [shard.local]}
            )
        self.optimizer = optimizer_class(local_groups, **defaults)

    @property
    def param_groups(self) -> list[Any]:
        return self.optimizer.param_groups

    @property
    def lr(self) -> float:
        return self.optimizer.lr

    @lr.setter
    def lr(self, value: float) -> None:
        self.optimizer.lr = value

    def step(self, found_inf: NvArray | None = None) -> None:
        """Average the gradients shard-wise, update this rank's shards, gather the parameters."""
        from ignis.distributed import ReduceOp

        comm = self.process_group
        for shard in self._shards:
            shard.gather_grads()
            if self.reduce_gradients:
                comm.reduce_scatter_tensor(shard.local.grad, shard.flat_grad, ReduceOp.AVG)
            else:
                shard.local_grad_from_own()
        self.optimizer.step(found_inf)
        for shard in self._shards:
            comm.all_gather_into_tensor(shard.flat_param, shard.local.data)

    def zero_grad(self, set_to_none: bool = False) -> None:
        """Zero (in place, by default) or drop the gradients of the wrapped parameters."""
        zero_grads((p for s in self._shards for p in s.params), set_to_none)

    def state_dict(self) -> dict[str, Any]:
        """This rank's shard of the state (load it on the same rank of the same world size)."""
        return {
            "zero": {"rank": self.process_group.rank, "world_size": self.process_group.world_size},
            "optimizer": self.optimizer.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Load what :meth:`state_dict` returned on this rank."""
        meta = state.get("zero", {}) if isinstance(state, dict) else {}
        here = (self.process_group.rank, self.process_group.world_size)
        there = (meta.get("rank"), meta.get("world_size"))
        if there != here:
            raise ValueError(
                f"ZeroRedundancyOptimizer.load_state_dict: the state is of rank {there[0]} of "
                f"{there[1]}, this is rank {here[0]} of {here[1]}"
            )
        self.optimizer.load_state_dict(state["optimizer"])

    def __repr__(self) -> str:
        return (
            f"<ZeroRedundancyOptimizer {type(self.optimizer).__name__} rank "
            f"{self.process_group.rank}/{self.process_group.world_size}, "
            f"{len(self._shards)} group(s)>"
        )
