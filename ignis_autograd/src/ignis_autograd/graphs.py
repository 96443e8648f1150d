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
    >>> step = ag.capture_step(train_step, x0, y0)  # 2 real steps on (x0, y0), then capture
    >>> [v.item() for v in step.warmup_outputs]  # the losses of those two steps
    >>> for x, y in batches:
    ...     loss = step(x, y)                    # copies x, y in; one graph launch: one step
    >>> loss.item()                              # the last step's loss (same object each time)

How many steps: ``capture_step(fn, x0, y0, warmup=k)`` calls ``fn`` ``k + 1`` times. The first
``k`` calls run eagerly, on the example inputs, and are real training steps: they update the
parameters and the optimizer state (moments, step counts) as any step does. The last call is
recorded, not run (nothing executes during stream capture, and the graph is not launched at
capture): after ``capture_step`` returns the model has taken exactly ``k`` steps, each call of
the captured step takes one more, and the outputs it returns hold no values until the first
call. This is PyTorch's CUDA-graph recipe (a few real iterations on a side stream, then the
capture) done for you: count the warm-up steps in a schedule or a step budget. Host-side
effects of ``fn`` (Python counters, logging) happen ``k + 1`` times.

Why the default is 2: the warm-up must do every first-time job of the step (create gradient
buffers and optimizer state, compile kernels, build and upload launch tables) so that the
capture records only the steady state. With the usual ``zero_grad()`` first, the first run has
no gradients to zero yet, so zero_grad's first real work comes in the second run. ``warmup=1``
suffices for a step whose first run does it all, e.g. one that zeroes gradients after
``opt.step()``; when a first-time job is left for the capture, the capture fails with an
:class:`AutogradError` that suggests a larger ``warmup``.

What a captured step may not do: synchronize with the host (``.item()``, ``to_host()``,
printing a value), depend on host values that change between steps (they are frozen at
capture), or allocate from another thread meanwhile. Learning rates and step counts of
:mod:`ignis_autograd.optim` live in device memory, so schedules keep working.

Random numbers (dropout, ``ignis.random``) are new at each call, as in eager steps: the capture
records its draws with :class:`ignis.random.GraphDraws`, so the captured kernels read each
generator's seed and offset from device memory, and each call first writes the generator's
current ``(seed, offset)`` there and advances it by what one step draws. N calls of the captured
step therefore draw, bit for bit, what N eager steps from the same generator state would, and
leave the generators where those steps would (``ignis.random.get_state()``); seeding or
``set_state`` between calls takes effect at the next call.
"""

from __future__ import annotations

import numbers
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

    Attributes: ``warmup`` (the number of eager steps taken before the capture),
    ``warmup_outputs`` (what ``fn`` returned in each of them, in order: e.g. their losses),
    ``outputs`` (the fixed outputs; no values before the first call), ``static_inputs``,
    ``draws`` (the step's random draws: ``draws.blocks`` maps each generator it uses to the
    Philox blocks one call takes).
    """

    def __init__(self, fn: Callable[..., Any], *example_inputs: Any, warmup: int = 2):
        if not callable(fn):
            raise TypeError(f"capture_step: fn must be callable, got {type(fn).__name__}")
        if isinstance(warmup, bool) or not isinstance(warmup, numbers.Integral):
            raise TypeError(
                f"capture_step: warmup must be an int (the number of eager steps before the "
                f"capture), got {type(warmup).__name__} {warmup!r}"
            )
        warmup = int(warmup)
        if warmup < 1:
            # Gradient buffers and optimizer state are created, zero-filled, on a step's first
            # run; created under capture, the zero fill would be part of the graph and reset
            # the optimizer's moments at every replay. Kernels are also compiled then.
            raise ValueError(
                f"capture_step: warmup must be >= 1, got {warmup}: a first eager step creates "
                "the gradient buffers and optimizer state that the captured step updates"
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
        self.warmup = warmup
        self.warmup_outputs: list[Any] = []
        with self.pool.active(), self.stream:
            for _ in range(warmup):
                # Real steps, on the example inputs: they update the parameters and optimizer.
                self.warmup_outputs.append(fn(*self.static_inputs))
            # The step's random draws read (seed, offset) from device memory written per call.
            self.draws = ignis.random.GraphDraws(device)
            try:
                with ignis.Graph.capture(self.stream) as graph, self.draws.capturing():
                    self.outputs = fn(*self.static_inputs)
            except CudaError as exc:
                if any(str(exc).startswith(code) for code in _CAPTURE_ERRORS):
                    raise AutogradError(
                        "capture_step: the step did something a CUDA graph cannot record — "
                        "usually a host synchronization (.item(), to_host(), a printed value), "
                        "work queued on another stream, or one-time work that the "
                        f"{warmup} warm-up run(s) did not reach, such as a first real "
                        "zero_grad() (try warmup="
                        f"{warmup + 1}) ({exc})"
                    ) from exc
                raise
        # The graph is not launched here: the capture recorded the step without running it.
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
        self.draws.advance()  # on the current stream, before the graph reads it
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
    """Run ``fn(*example_inputs)`` ``warmup`` times eagerly, then capture one call into a
    CUDA graph; calling the result replays the step.

    ``fn`` should zero gradients in place (``optimizer.zero_grad()`` / ``set_to_none=False``),
    run forward and backward, step the optimizer and return what you want to read after each
    step (e.g. ``loss.detach()``). See the module docs for what a captured step may not do.

    Args:
        fn: the training step.
        example_inputs: Tensors or NvArrays on one CUDA device; they fix the shapes and dtypes
            of every later call, and the warm-up steps train on them.
        warmup: eager calls before the capture (an int >= 1; default 2, see the module notes).
            Each is a real training step: it updates the parameters and the optimizer state.
            The capture itself runs nothing, so when this returns the model has taken exactly
            ``warmup`` steps, and each call of the result takes one more. Their outputs are
            kept, in order, in ``.warmup_outputs``.

    Example::

        >>> step = ag.capture_step(train_step, x0, y0, warmup=2)
        >>> [round(float(v.item()), 2) for v in step.warmup_outputs]  # steps 1 and 2
        [4.62, 4.41]
        >>> for x, y in batches:                                      # steps 3, 4, ...
        ...     loss = step(x, y)
    """
    return CapturedStep(fn, *example_inputs, warmup=warmup)
