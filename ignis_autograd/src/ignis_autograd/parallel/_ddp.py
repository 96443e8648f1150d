"""DistributedDataParallel: data-parallel training with gradients averaged over the ranks.

Each rank holds a replica of the model and trains it on its own part of the global batch. At
wrap time every parameter and buffer is broadcast from rank 0, so all replicas start equal.
During ``backward()`` each parameter's gradient reports itself complete (a post-accumulate
hook, see :mod:`ignis_autograd._hooks`); when every gradient of a bucket is complete the
bucket's all-reduce (``ReduceOp.AVG``) is queued at once, buckets strictly in order so all ranks
issue the same collectives in the same order. With NCCL the all-reduces run on the process
group's side stream while the rest of backward runs on the current stream; when backward ends
the current stream waits for them, so the optimizer step that follows sees the averaged
gradients. Gradients are views of the buckets' flat buffers (PyTorch's
``gradient_as_bucket_view``): zero them in place (``zero_grad()``) to keep them so.

Example::

    >>> dist.init_process_group()
    >>> model = DistributedDataParallel(GPT(cfg))
    >>> opt = AdamW(model.parameters(), lr=3e-4)
    >>> loss = ag.cross_entropy(model(x_shard), y_shard)
    >>> loss.backward()            # gradients averaged over the ranks
    >>> opt.step(); opt.zero_grad()
    >>> with model.no_sync():      # gradient accumulation: no communication...
    ...     model(x1).sum().backward()
    >>> model(x2).sum().backward() # ...until this backward, which reduces the sum of both
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .. import _hooks
from .._errors import AutogradError
from ..nn.module import Module
from ._buckets import Bucket, make_buckets

__all__ = ["DistributedDataParallel"]


def _default_group(op: str) -> Any:
    import ignis.distributed as dist

    return dist.get_default_group(op)


def _avg() -> Any:
    from ignis.distributed import ReduceOp

    return ReduceOp.AVG


class DistributedDataParallel(Module):
    """Wrap ``model`` for data-parallel training (see the module notes).

    Args:
        model: the replica of this rank (a :class:`~ignis_autograd.nn.Module`).
        bucket_cap_mb: the most gradient megabytes (MiB) reduced in one collective (> 0).
        process_group: an :class:`ignis.distributed.Communicator` (default: the default NCCL
            process group).
        broadcast_buffers: also broadcast the module's buffers from rank 0 at wrap time.

    Attributes: ``module`` (the wrapped model; its ``state_dict()`` has no ``module.``
    prefix), ``process_group``, ``buckets``.

    Calling the wrapper calls the model; gradients are reduced whether the forward went
    through the wrapper or the model itself.
    """

    def __init__(
        self,
        model: Module,
        bucket_cap_mb: float = 25,
        process_group: Any = None,
        broadcast_buffers: bool = True,
    ):
        super().__init__()
        if not isinstance(model, Module):
            raise TypeError(
                f"DistributedDataParallel: model must be an ignis_autograd.nn.Module, got "
                f"{type(model).__name__}"
            )
        if (
            isinstance(bucket_cap_mb, bool)
            or not isinstance(bucket_cap_mb, (int, float))
            or not bucket_cap_mb > 0
        ):
            raise ValueError(
                f"DistributedDataParallel: bucket_cap_mb must be a number > 0, got "
                f"{bucket_cap_mb!r}"
            )
        comm = (
            process_group
            if process_group is not None
            else _default_group("DistributedDataParallel")
        )
        self.module = model
        object.__setattr__(self, "process_group", comm)
        seen: set[int] = set()
        params = []
        for p in model.parameters():
            if p.requires_grad and id(p) not in seen:  # a tied parameter counts once
                seen.add(id(p))
                params.append(p)
        if not params:
            raise ValueError("DistributedDataParallel: the model has no parameter requiring grad")
        for p in params:
            comm.broadcast(p.data, 0)
        if broadcast_buffers:
            for b in model.buffers():
                if b is not None:
                    comm.broadcast(b, 0)
        self._params = params
        self.buckets: list[Bucket] = make_buckets(params, int(bucket_cap_mb * 2**20))
        self._bucket_of = {id(p): b for b in self.buckets for p in b.params}
        self._require_sync = True
        self._in_backward = False
        self._next = 0
        self._works: list[Any] = []
        self._handles = [p.register_post_accumulate_grad_hook(self._grad_ready) for p in params]

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.module(*args, **kwargs)

    @contextmanager
    def no_sync(self) -> Iterator[None]:
        """Inside the block backward passes only accumulate gradients locally; the first
        backward after it reduces everything accumulated."""
        previous = self._require_sync
        self._require_sync = False
        try:
            yield
        finally:
            self._require_sync = previous

    # --- the backward side ---------------------------------------------------------------------

    def _grad_ready(self, p: Any) -> None:
        if not self._require_sync:
            return
        if not self._in_backward:
            self._in_backward = True
            _hooks.queue_callback(self._finish)
        bucket = self._bucket_of[id(p)]
        if bucket.launched:
            raise AutogradError(
                "DistributedDataParallel: a parameter received gradient after its bucket was "
                "reduced in this backward pass (is a parameter used in a way the backward "
                "walk reaches twice, such as in two separate backward calls?)"
            )
        bucket.ready.add(id(p))
        if len(bucket.ready) == len(bucket.params):
            self._launch_ready()

    def _launch_ready(self) -> None:
        buckets = self.buckets
        while self._next < len(buckets) and len(buckets[self._next].ready) == len(
            buckets[self._next].params
        ):
            self._launch(buckets[self._next])
            self._next += 1

    def _launch(self, bucket: Bucket) -> None:
        bucket.gather_grads()
        bucket.launched = True
        work = self.process_group.all_reduce(bucket.flat, _avg(), async_op=True)
        self._works.append(work)

    def _finish(self) -> None:
        """End of backward: reduce the buckets left (parameters without a gradient this pass
        reduce zeros), then order the current stream after every reduction."""
        try:
            for bucket in self.buckets[self._next :]:
                self._launch(bucket)
            for work in self._works:
                if work is not None:
                    work.wait()
        finally:
            self._works = []
            self._next = 0
            self._in_backward = False
            for bucket in self.buckets:
                bucket.ready.clear()
                bucket.launched = False

    def remove_hooks(self) -> None:
        """Unregister the gradient hooks (the model trains locally again)."""
        for h in self._handles:
            h.remove()
        self._handles = []

    def extra_repr(self) -> str:
        world = getattr(self.process_group, "world_size", "?")
        return f"world_size={world}, buckets={len(self.buckets)}"
