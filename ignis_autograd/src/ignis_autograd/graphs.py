"""Capture a whole training step (forward, backward, optimizer) into a CUDA graph and replay it.

For small models the host's cost of launching each kernel dominates a step. A captured step is
one graph launch: the same kernels on the same addresses, with the new batch copied into fixed
input arrays first. Results equal the eager step's.

Example::

    >>> def train_step(x, y):
    ...     opt.zero_grad()                      # in place: gradient buffers keep their address
    ...     loss = ag.cross_entropy(model(x), y)
    ...     loss.backward()
    ...     opt.step()
    ...     return loss.detach()
    >>> step = ag.capture_step(train_step, x0, y0)   # warm-up runs, then capture
    >>> for x, y in batches:
    ...     loss = step(x, y)                    # copies x, y in; one graph launch
    >>> loss.item()                              # the last step's loss (same object each time)

What a captured step may not do: synchronize with the host (``.item()``, ``to_host()``,
printing a value), depend on host values that change between steps (they are frozen at
capture), or allocate from another thread meanwhile. Random ops (dropout) replay the masks drawn
at capture. Learning rates and step counts of :mod:`ignis_autograd.optim` live in device memory,
so schedules keep working.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ignis
from ignis import CudaError, NvArray

from ._errors import AutogradError
from .tensor import Tensor

__all__ = ["CapturedStep", "capture_step"]

_CAPTURE_ERRORS = (
    "CUDA_ERROR_STREAM_CAPTURE",
    "CUDA_ERROR_CAPTURED_EVENT",
    "CUDA_ERROR_NOT_PERMITTED",
    "CUDA_ERROR_NOT_SUPPORTED",
)


def _data(x: Any, what: str) -> NvArray:
    if isinstance(x, Tensor):
        return x.data
    if isinstance(x, NvArray):
        return x
    raise TypeError(f"capture_step: {what} must be a Tensor or an NvArray, got {type(x).__name__}")


class CapturedStep:
    """A step function recorded into a CUDA graph; call it like the function.

    Build one with :func:`capture_step`. Calling it copies the arguments into the fixed input
    arrays (same shapes and dtypes as at capture), launches the graph on the current stream and
    returns the fixed outputs (the objects ``fn`` returned during capture, rewritten in place).
    """

    def __init__(self, fn: Callable[..., Any], *example_inputs: Any, warmup: int = 2):
        if not callable(fn):
            raise TypeError(f"capture_step: fn must be callable, got {type(fn).__name__}")
        if warmup < 1:
            raise ValueError(
                f"capture_step: warmup must be >= 1 (a first run creates state), got {warmup}"
            )
        if not example_inputs:
            raise ValueError(
                "capture_step: give at least one example input (it fixes shapes and device)"
            )
        datas = [_data(x, f"input {i}") for i, x in enumerate(example_inputs)]
        device = datas[0].device
        if device.type != "cuda":
            raise ValueError(
                f"capture_step: CUDA graphs need a CUDA device, got inputs on {device}; on the "
                "CPU call the step function directly"
            )
        for i, d in enumerate(datas):
            if d.device != device:
                raise ignis.DeviceMismatchError(
                    f"capture_step: input {i} is on {d.device}, input 0 on {device}"
                )
        gpu = ignis.Device(device.index or 0)
        self.fn = fn
        self.device = device
        # The fixed inputs are ordinary arrays; the step reads them wherever they live.
        self.static_inputs = [
            Tensor(d.clone()) if isinstance(x, Tensor) else d.clone()
            for x, d in zip(example_inputs, datas, strict=True)
        ]
        self.pool = ignis.GraphPool(gpu)
        self.stream = ignis.Stream(gpu)
        caller = ignis.current_stream(gpu)
        self.stream.wait_stream(caller)
        with self.pool.active(), self.stream:
            for _ in range(warmup):
                out = fn(*self.static_inputs)
                del out
            try:
                with ignis.Graph.capture(self.stream) as graph:
                    self.outputs = fn(*self.static_inputs)
            except CudaError as exc:
                if any(str(exc).startswith(code) for code in _CAPTURE_ERRORS):
                    raise AutogradError(
                        "capture_step: the step did something a CUDA graph cannot record — "
                        "usually a host synchronization (.item(), to_host(), a printed value) "
                        f"or work queued on another stream ({exc})"
                    ) from exc
                raise
        self.graph = graph
        caller.wait_stream(self.stream)

    def __call__(self, *inputs: Any) -> Any:
        if len(inputs) != len(self.static_inputs):
            raise TypeError(
                f"CapturedStep: expected {len(self.static_inputs)} input(s) as at capture, "
                f"got {len(inputs)}"
            )
        for i, (dst, src) in enumerate(zip(self.static_inputs, inputs, strict=True)):
            dd, sd = _data(dst, f"input {i}"), _data(src, f"input {i}")
            if sd.shape != dd.shape or sd.dtype != dd.dtype:
                raise ignis.ShapeError(
                    f"CapturedStep: input {i} has shape {sd.shape} and dtype {sd.dtype.name}; the "
                    f"step was captured with shape {dd.shape} and dtype {dd.dtype.name}"
                )
            if sd is not dd:
                dd.copy_(sd)
        self.graph.launch(ignis.current_stream(self.graph.device))
        return self.outputs

    @property
    def num_nodes(self) -> int:
        """Kernels, copies and memsets in the captured graph."""
        return self.graph.num_nodes

    def close(self) -> None:
        """Destroy the graph. The pool's memory returns to the driver when its arrays are gone."""
        self.graph.close()

    def __repr__(self) -> str:
        name = getattr(self.fn, "__name__", "fn")
        return f"<CapturedStep {name} on {self.device}: {self.num_nodes} nodes>"


def capture_step(fn: Callable[..., Any], *example_inputs: Any, warmup: int = 2) -> CapturedStep:
    """Run ``fn(*example_inputs)`` ``warmup`` times, then capture one call into a CUDA graph.

    ``fn`` should zero gradients in place (``optimizer.zero_grad()`` / ``set_to_none=False``),
    run forward and backward, step the optimizer and return what you want to read after each
    step (e.g. ``loss.detach()``). See the module docs for what a captured step may not do.
    """
    return CapturedStep(fn, *example_inputs, warmup=warmup)
