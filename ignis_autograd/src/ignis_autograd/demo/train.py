"""The training run: data, model, AdamW with warm-up and cosine decay, evaluation, checkpoints,
a generated sample and the loss plot.

Example::

    >>> from ignis_autograd.demo.config import default_config
    >>> from ignis_autograd.demo.train import RunOptions, run
    >>> result = run(default_config("cpu"), RunOptions(out_dir="out", device="cpu"))
    >>> result.val_loss          # held-out cross-entropy after training, nats per token

Reproducibility: the weights come from ``ignis.random`` seeded with ``seed``; the batches from
an ``ignis.random.Generator(seed + 1)``; dropout from the default ``ignis.random`` stream. A
checkpoint stores both streams' ``(seed, offset)`` with the optimizer and schedule state, so a
resumed run continues exactly where an uninterrupted one would be (on the same device).
Evaluation and sampling use streams of their own and never disturb training: an evaluation
after step ``s`` draws its batches of both splits from ``Generator(seed + 2)`` at block offset
``s * 2**32`` (fresh batches at every evaluation, the same ones for the same step, so a resumed
run evaluates on what the uninterrupted one did, with no state to store).

Metrics (``RunOptions.metrics_path``): a JSON file rewritten after every evaluation::

    {"evals": [{"step": 250, "train_loss": 1.98, "val_loss": 2.07, "seconds": 41.2}, ...],
     "ms_per_step_median": 20.5, ...}

``seconds``: training time up to that evaluation (evaluations and saves left out; summed over
resumed runs). ``ms_per_step_median``: the median time of one step in this run, in
milliseconds, measured between loss reads (on a GPU every few steps; a read waits for the
device, so the time is the device's, not only the host's).

Ctrl-C (SIGINT) asks the loop to stop after the current step: it evaluates, saves the
checkpoint, says so and raises :class:`DemoInterrupted` (no sample, no summary; the command
line exits with status 130). A second Ctrl-C stops at once, except during a save, which always
completes first: the files of a checkpoint are renamed into place one after the other, and a
save stopped between two renames would leave weights that do not match the JSON.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, TextIO

import numpy as np

import ignis

from ..tape import no_grad
from . import model as seam
from .blas import blas_threads
from .checkpoint import (
    META_FILE,
    OPTIMIZER_FILE,
    WEIGHTS_FILE,
    Checkpoint,
    checkpoint_exists,
    load_checkpoint,
    save_checkpoint,
)
from .config import MODEL_FIELDS, DemoConfig
from .data import CharDataset, CharVocab, DemoError, load_text, text_digest
from .distributed import DistRun, from_environment
from .plot import plot_losses
from .progress import Progress, format_duration

__all__ = [
    "RunOptions",
    "RunResult",
    "DemoInterrupted",
    "run",
    "DEFAULT_OUT_DIR",
    "SAMPLE_FILE",
    "PLOT_FILE",
    "EVAL_STRIDE",
]

# Relative: the outputs land where the demo is run, in sight (the repository's .gitignore
# lists the name, so a run from a checkout leaves `git status` clean).
DEFAULT_OUT_DIR = "ignis-demo-out"
SAMPLE_FILE = "sample.txt"
PLOT_FILE = "loss.png"
#: Philox blocks between the evaluation streams of consecutive steps (one evaluation of 200
#: batches of 64 from each split uses about 13,000).
EVAL_STRIDE = 2**32


@dataclass
class RunOptions:
    """How to run (as opposed to what to train, :class:`DemoConfig`).

    ``out_dir``: where the checkpoint, sample and plot go. ``device``: ``"cpu"`` or
    ``"cuda:N"``. ``resume``: continue from the checkpoint in ``out_dir``. ``text_path``: the
    training text (None: the built-in text, or the checkpoint's). ``sample_tokens``:
    characters to generate at the end (0: none). ``prompt`` (None: a newline),
    ``temperature``, ``top_k``: sampling. ``stop_at``: end this run after that step with a
    checkpoint, as an interruption would (the schedule still spans ``steps``). ``quiet``:
    print only the final summary. ``tf32``: let float32 matmuls on a GPU use TF32 tensor
    cores. ``read_every``: steps between reads of the training loss (None: 10 on a GPU, where
    a read waits for the device, 1 on the CPU). ``blas_threads``: threads of NumPy's BLAS
    (OpenBLAS) during a CPU run, restored afterwards (None: leave them; the environment's
    ``OPENBLAS_NUM_THREADS`` / ``OMP_NUM_THREADS`` win; see :mod:`.blas` for why one is the
    default). ``stream``: where lines go (stdout);
    ``progress_stream``: where the bar is drawn (stderr, terminals only). ``changed``: the
    config fields given explicitly (a resumed run checks them against the checkpoint).
    ``metrics_path``: a JSON file of the evaluations and step time (see the module notes;
    None: none).
    """

    out_dir: str = DEFAULT_OUT_DIR
    device: str = "cpu"
    resume: bool = False
    text_path: str | None = None
    sample_tokens: int = 300
    prompt: str | None = None
    temperature: float = 0.8
    top_k: int | None = 20
    stop_at: int | None = None
    quiet: bool = False
    tf32: bool = True
    read_every: int | None = None
    blas_threads: int | None = 1
    stream: TextIO | None = None
    progress_stream: TextIO | None = None
    changed: dict[str, Any] = field(default_factory=dict)
    metrics_path: str | None = None


@dataclass
class RunResult:
    """What a run did: the last ``step``, the loss curves (``(step, nats per token)``),
    the final held-out loss, the sample text, seconds spent training and tokens per second;
    ``evals``: every evaluation as in the metrics file; ``ms_per_step_median``: this run's
    median step time in milliseconds (None: no step was timed)."""

    step: int
    train_losses: list[tuple[int, float]]
    val_losses: list[tuple[int, float]]
    val_loss: float
    sample: str
    train_seconds: float
    tokens_per_second: float
    out_dir: str
    config: DemoConfig
    evals: list[dict[str, float]] = field(default_factory=list)
    ms_per_step_median: float | None = None


class _Printer:
    def __init__(self, opts: RunOptions, bar: Progress | None = None):
        self.stream = opts.stream if opts.stream is not None else sys.stdout
        self.quiet = opts.quiet
        self.bar = bar

    def __call__(self, text: str, always: bool = False) -> None:
        if self.quiet and not always:
            return
        if self.bar is not None:
            self.bar.clear()
        print(text, file=self.stream, flush=True)


@contextmanager
def _default_device(device: str) -> Iterator[None]:
    # Layers allocate on the default device; restore the caller's choice afterwards (an
    # automatic default stays automatic).
    before = ignis.get_default_device()
    ignis.set_default_device(device)
    try:
        yield
    finally:
        ignis.set_default_device(None)
        if ignis.get_default_device() != before:
            ignis.set_default_device(before)


@contextmanager
def _own_random_stream() -> Iterator[None]:
    # The run seeds the default ignis.random stream (weights, dropout); the caller's stream
    # continues afterwards as if the run had not happened.
    before = ignis.random.get_state()
    try:
        yield
    finally:
        ignis.random.set_state(before)


@contextmanager
def _tf32(enabled: bool) -> Iterator[None]:
    # float32 matmuls on TF32 tensor cores (10-bit mantissa products, float32 sums): several
    # times faster, and well inside the noise of training; restored afterwards.
    before = ignis.get_allow_tf32()
    ignis.set_allow_tf32(enabled)
    try:
        yield
    finally:
        ignis.set_allow_tf32(before)


class DemoInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped the run (after saving, unless it was pressed twice).

    ``step``: the step of the checkpoint this run left in ``out_dir`` (None: it saved none).
    A ``KeyboardInterrupt``, so code that stops on Ctrl-C stops here too; the command line
    turns it into exit status 130, the shell's status of a command ended by SIGINT.
    """

    def __init__(self, step: int | None, out_dir: str):
        super().__init__(step, out_dir)
        self.step = step
        self.out_dir = out_dir

    def __str__(self) -> str:
        if self.step is None:
            return f"interrupted before a checkpoint was saved in {self.out_dir}"
        return f"interrupted: the checkpoint in {self.out_dir} is at step {self.step}"


class _StopRequest:
    """Ctrl-C asks the loop to stop after the current step (and save); a second one aborts at
    once, except inside :meth:`saving`, which it lets finish (the run stops right after)."""

    def __init__(self) -> None:
        self.requested = False
        self._saving = False
        self._previous: Any = None

    def __enter__(self) -> _StopRequest:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        if not self.requested:
            self.requested = True
        elif not self._saving:
            raise KeyboardInterrupt
        # else: a second Ctrl-C during a save; the save completes, then the run stops (the
        # first one already asked for that)

    @contextmanager
    def saving(self) -> Iterator[None]:
        """A block that Ctrl-C does not cut short (a checkpoint save)."""
        self._saving = True
        try:
            yield
        finally:
            self._saving = False

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)


@contextmanager
def _cpu_threads(device: str, n: int | None) -> Iterator[int | None]:
    # BLAS threads matter only where the CPU backend does the products.
    if device != "cpu" or n is None:
        yield None
        return
    with blas_threads(n) as in_effect:
        yield in_effect


def _resolve_text(opts: RunOptions, ck: Checkpoint | None) -> tuple[str, str]:
    path = opts.text_path
    if ck is not None and path is None:
        source = ck.meta["text"]["source"]
        path = source if os.path.isabs(source) else None
    text, source = load_text(path)
    if ck is not None and text_digest(text) != ck.meta["text"]["digest"]:
        raise DemoError(
            f"--resume: the text ({source}) is not the one the checkpoint was trained on "
            f"({ck.meta['text']['source']}); give that text with --text"
        )
    return text, source


def _resume_config(saved: DemoConfig, changed: dict[str, Any]) -> DemoConfig:
    """The checkpoint's config, with what a continuation may change taken from ``changed``
    (the flags given on this command line)."""
    for name in MODEL_FIELDS + (
        "batch_size",
        "lr",
        "min_lr",
        "warmup_steps",
        "weight_decay",
        "seed",
        "dropout",
        "grad_clip",
        "beta2",
        "decay_1d",
    ):
        if name in changed and changed[name] != getattr(saved, name):
            raise DemoError(
                f"--resume: {name} = {changed[name]!r} differs from the checkpoint's "
                f"{getattr(saved, name)!r}; leave it out to continue, or start a new run in "
                "another --out directory"
            )
    allowed = {
        k: v
        for k, v in changed.items()
        if k in ("steps", "eval_interval", "eval_batches", "log_interval")
    }
    return replace(saved, **allowed)


class Trainer:
    """The model, optimizer, schedule and random streams of one run: one training step,
    evaluation, sampling, and the checkpoint's contents.

    Construction seeds ``ignis.random`` with ``cfg.seed`` and builds the model from it; the
    batches come from ``Generator(seed + 1)``, evaluation batches from ``seed + 2`` (at an
    offset given by the step: fresh batches at each evaluation) and samples from ``seed + 3``.

    ``history``: ``"train"`` (step, training loss) per step, ``"val"`` (step, held-out loss)
    and ``"eval"`` (step, train-split loss, held-out loss, training seconds) per evaluation.
    ``step_ms``: one entry per timed step of this run (milliseconds). ``train_seconds``:
    training time so far, over resumed runs too.
    """

    def __init__(
        self,
        cfg: DemoConfig,
        vocab: CharVocab,
        data: CharDataset,
        device: str,
        text_info: dict[str, str],
        dist: DistRun | None = None,
    ):
        self.cfg, self.vocab, self.data, self.device = cfg, vocab, data, device
        self.text_info = text_info
        self.dist = dist
        ignis.random.seed(cfg.seed)
        self.model = seam.build_model(cfg, vocab.size, device)
        # Several GPUs: gradients are averaged over the ranks (the hooks live on the
        # parameters, so the model itself is still what the step calls and saves).
        self.ddp = dist.wrap(self.model) if dist is not None else None
        self.opt, self.sched = seam.build_optimizer(self.model, cfg)
        self.batches = ignis.random.Generator(cfg.seed + 1)
        self.step = 0
        self.history: dict[str, list[tuple[Any, ...]]] = {"train": [], "val": [], "eval": []}
        self.n_params = int(self.model.num_parameters())
        self.step_ms: list[float] = []
        self.train_seconds = 0.0

    def restore(self, ck: Checkpoint) -> None:
        """Continue from ``ck``: weights, optimizer and schedule state, both random streams."""
        self.model.load_state_dict(ck.model_state)
        self.opt.load_state_dict(ck.optimizer_state)
        self.sched.load_state_dict(ck.meta["scheduler"])
        if self.cfg.steps != int(ck.meta["config"]["steps"]):
            # The schedule's length is part of its state: a new total re-targets the decay.
            self.sched.total_steps = self.cfg.steps
        self.batches.set_state(tuple(ck.meta["rng"]["batches"]))
        ignis.random.set_state(tuple(ck.meta["rng"]["dropout"]))
        self.step = int(ck.meta["step"])
        saved = ck.meta["history"]
        self.history = {k: [(int(s), float(v)) for s, v in saved[k]] for k in ("train", "val")}
        # Checkpoints from before the train-split evaluation have no "eval" entries.
        self.history["eval"] = [
            (int(s), float(t), float(v), float(sec)) for s, t, v, sec in saved.get("eval", [])
        ]
        self.train_seconds = float(ck.meta.get("train_seconds", 0.0))

    def train_step(self) -> Any:
        """One optimizer step on a fresh batch; returns its loss, a device scalar (nats per
        token) that is not read here, so the host can queue the next step before this one has
        finished. Record it with :meth:`record` once read."""
        if self.dist is not None:  # this rank's batch of the global step
            self.dist.position_batches(self.batches, self.cfg.seed, self.step)
        x, y = self.data.batch("train", self.cfg.batch_size, self.batches)
        loss = seam.loss_of(self.model, x, y, self.device)
        self.opt.zero_grad()
        loss.backward()
        seam.clip_gradients(self.model, self.cfg.grad_clip)
        self.opt.step()
        self.sched.step()
        self.step += 1
        return loss.data

    def record(self, step: int, value: float) -> None:
        """Add a training loss to the history."""
        self.history["train"].append((step, value))

    def evaluate(self, seconds: float | None = None) -> float:
        """Mean losses over ``eval_batches`` fresh random batches of each split (nanoGPT's
        ``estimate_loss``), recorded in the history with ``seconds`` (training time so far;
        None: :attr:`train_seconds`); returns the held-out one (nats per token).

        Each batch's loss is a float32 device scalar; a split's losses are read back together
        (one wait for the device) and averaged in float64.
        """
        cfg = self.cfg
        gen = ignis.random.Generator(cfg.seed + 2)
        gen.set_state((cfg.seed + 2, self.step * EVAL_STRIDE))
        means = {}
        self.model.eval()
        try:
            with no_grad():
                for split in ("train", "val"):
                    losses = []
                    for _ in range(cfg.eval_batches):
                        x, y = self.data.batch(split, cfg.batch_size, gen)
                        losses.append(seam.loss_of(self.model, x, y, self.device).data)
                    host = np.asarray(ignis.stack(losses).to_host(), dtype=np.float64)
                    means[split] = float(host.mean())
        finally:
            self.model.train()
        if seconds is None:
            seconds = self.train_seconds
        self.history["val"].append((self.step, means["val"]))
        self.history["eval"].append((self.step, means["train"], means["val"], float(seconds)))
        return means["val"]

    @property
    def ms_per_step_median(self) -> float | None:
        """The median of :attr:`step_ms` (None before the first timed step)."""
        return float(np.median(self.step_ms)) if self.step_ms else None

    def evals(self) -> list[dict[str, float]]:
        """The evaluations as the metrics file lists them."""
        return [
            {"step": s, "train_loss": t, "val_loss": v, "seconds": sec}
            for s, t, v, sec in self.history["eval"]
        ]

    def write_metrics(self, path: str) -> None:
        """Write the metrics JSON (module notes) to ``path``, replacing it in one rename."""
        doc = {
            "evals": self.evals(),
            "ms_per_step_median": self.ms_per_step_median,
            "steps_timed": len(self.step_ms),
            "step": self.step,
            "n_parameters": self.n_params,
            "device": self.device,
            "config": self.cfg.to_dict(),
        }
        folder = os.path.dirname(os.path.abspath(path))
        if self.dist is not None and not self.dist.is_main:
            return
        os.makedirs(folder, exist_ok=True)
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
        os.replace(tmp, path)

    def sample(self, prompt_ids: np.ndarray, n: int, temperature: float, top_k: int | None) -> str:
        """The prompt and ``n`` generated characters."""
        gen = ignis.random.Generator(self.cfg.seed + 3)
        if top_k is not None:
            top_k = min(top_k, self.vocab.size)  # "the k likeliest" of fewer than k is all
        ids = seam.generate(self.model, prompt_ids, n, self.device, temperature, top_k, gen)
        return self.vocab.decode(ids)

    def save(self, out_dir: str) -> None:
        """Write the checkpoint of the current step into ``out_dir`` (rank 0 only)."""
        if self.dist is not None and not self.dist.is_main:
            return
        meta = {
            "step": self.step,
            "config": self.cfg.to_dict(),
            "vocab": self.vocab.chars,
            "text": self.text_info,
            "rng": {
                "batches": list(self.batches.get_state()),
                "dropout": list(ignis.random.get_state()),
            },
            "scheduler": self.sched.state_dict(),
            "history": {k: [list(p) for p in v] for k, v in self.history.items()},
            "train_seconds": self.train_seconds,
            "n_parameters": self.n_params,
            "device": self.device,
        }
        save_checkpoint(
            out_dir,
            model_state=self.model.state_dict(),
            optimizer_state=self.opt.state_dict(),
            meta=meta,
            save_tensors=seam.save_tensors,
        )


def _prompt_ids(vocab: CharVocab, prompt: str | None) -> np.ndarray:
    if not prompt:
        # A newline starts a paragraph; a text without one starts from its first character.
        return vocab.encode("\n" if "\n" in vocab.chars else vocab.chars[0])
    try:
        return vocab.encode(prompt)
    except DemoError:
        unknown = sorted(set(prompt) - set(vocab.chars))
        raise DemoError(
            f"--prompt: the characters {''.join(unknown)!r} are not in the text's vocabulary"
        ) from None


def _train(
    tr: Trainer, end: int, opts: RunOptions, bar: Progress, say: _Printer, stop: _StopRequest
) -> tuple[float, int]:
    """Step until ``end``, logging, evaluating and saving on the way; returns (seconds spent
    training, not counting evaluations and saves; tokens trained on).

    On a GPU the losses are read every few steps rather than after each one: reading one
    waits for its step to finish, and the host would then sit idle while the device runs. The
    time between two reads, over the steps read, is each of those steps' time
    (``tr.step_ms``); the stretch after an evaluation starts at its end.

    Ctrl-C (``stop``): the step in flight finishes, is evaluated and saved, and
    :class:`DemoInterrupted` is raised; see the module notes.
    """
    cfg = tr.cfg
    read_every = opts.read_every or (10 if tr.device.startswith("cuda") else 1)
    pending: list[tuple[int, Any]] = []
    t_start = time.perf_counter()
    aside = 0.0  # seconds of evaluation and saving, left out of the training time
    tokens = 0
    saved = tr.step if opts.resume else None  # step of the checkpoint this run stands on
    seconds_before = tr.train_seconds
    mark = t_start  # the start of the stretch of steps the next read times

    def read_losses() -> float:
        nonlocal mark
        value = float("nan")
        for step, loss in pending:
            value = float(loss.item())
            tr.record(step, value)
            if not math.isfinite(value):
                bar.close()
                raise DemoError(
                    f"training diverged at step {step} (loss {value}); try a smaller --lr"
                )
            bar.update(step, value, cfg.tokens_per_step)
        if pending:
            now = time.perf_counter()
            tr.step_ms.extend([(now - mark) * 1e3 / len(pending)] * len(pending))
            mark = now
        pending.clear()
        return value

    try:
        while tr.step < end:
            pending.append((tr.step + 1, tr.train_step()))
            tokens += cfg.tokens_per_step
            step = tr.step
            interrupted = stop.requested
            log = step % cfg.log_interval == 0 or step == end
            evaluate = step % cfg.eval_interval == 0 or step == end or interrupted
            if not (log or evaluate or step % read_every == 0):
                continue
            value = read_losses()
            if log:
                say(
                    f"step {step:>6}/{cfg.steps} | loss {value:.4f} | "
                    f"lr {seam.current_lr(tr.opt):.2e} | {bar.tokens_per_second:,.0f} tok/s"
                    f" | ETA {format_duration(bar.eta)}"
                )
            if evaluate:
                t0 = time.perf_counter()
                tr.train_seconds = seconds_before + (t0 - t_start - aside)
                val = tr.evaluate()
                train_split = tr.history["eval"][-1][1]
                say(
                    f"step {step:>6}/{cfg.steps} | train-split loss {train_split:.4f} | "
                    f"held-out loss {val:.4f}"
                )
                with stop.saving():
                    tr.save(opts.out_dir)
                if opts.metrics_path:
                    tr.write_metrics(opts.metrics_path)
                saved = step
                mark = time.perf_counter()
                aside += mark - t0
                if stop.requested:  # Ctrl-C before or during this evaluation and save
                    _say_interrupted(say, step, opts.out_dir)
                    raise DemoInterrupted(step, opts.out_dir)
    except DemoInterrupted:
        raise
    except KeyboardInterrupt:
        # A second Ctrl-C outside a save: stop now; the last checkpoint is whole.
        where = (
            f"the checkpoint in {opts.out_dir} is at step {saved}"
            if saved is not None
            else "this run saved no checkpoint"
        )
        say(f"interrupted again: stopped after step {tr.step}; {where}", always=True)
        raise DemoInterrupted(saved, opts.out_dir) from None
    train_time = time.perf_counter() - t_start - aside
    tr.train_seconds = seconds_before + train_time
    return train_time, tokens


def _say_interrupted(say: _Printer, step: int, out_dir: str) -> None:
    say(
        f"interrupted: checkpoint of step {step} saved in {out_dir}; "
        f"continue with --resume --out {out_dir}",
        always=True,
    )


def run(cfg: DemoConfig, opts: RunOptions) -> RunResult:
    """Train (or continue training) the character-level GPT and write the outputs.

    Raises :class:`DemoError` for bad input (text, checkpoint, settings) and
    :class:`DemoInterrupted` after Ctrl-C (with the checkpoint saved; see the module notes).
    """
    ck = None
    if opts.resume:
        ck = load_checkpoint(opts.out_dir, load_tensors=lambda p: seam.load_tensors(p, opts.device))
        cfg = _resume_config(DemoConfig.from_dict(ck.meta["config"]), opts.changed)
    text, source = _resolve_text(opts, ck)
    vocab = CharVocab(ck.meta["vocab"]) if ck is not None else CharVocab.from_text(text)
    data = CharDataset(vocab.encode(text), cfg.context)
    prompt_ids = _prompt_ids(vocab, opts.prompt)  # a bad prompt fails before training
    dist = from_environment()
    try:
        return _run(cfg, opts, ck, text, source, vocab, data, prompt_ids, dist)
    finally:
        if dist is not None:
            dist.close()


def _run(
    cfg: DemoConfig,
    opts: RunOptions,
    ck: Checkpoint | None,
    text: str,
    source: str,
    vocab: CharVocab,
    data: CharDataset,
    prompt_ids: np.ndarray,
    dist: DistRun | None,
) -> RunResult:
    device = opts.device
    main = dist is None or dist.is_main
    if dist is not None:
        device = dist.device  # cuda:LOCAL_RANK
        if not main:  # rank 0 alone prints (a sink for the lines printed even when quiet)
            opts = replace(opts, quiet=True, stream=open(os.devnull, "w"))  # noqa: SIM115
    end = cfg.steps if opts.stop_at is None else min(cfg.steps, opts.stop_at)
    say = _Printer(opts)

    with (
        _default_device(device),
        _own_random_stream(),
        _tf32(opts.tf32 and device.startswith("cuda")),
        _cpu_threads(device, opts.blas_threads) as threads,
    ):
        tr = Trainer(
            cfg, vocab, data, device, {"source": source, "digest": text_digest(text)}, dist
        )
        if ck is not None:
            tr.restore(ck)
        say(
            f"ignis demo: {tr.n_params:,} parameters | {cfg.n_layers} layers, dim {cfg.dim}, "
            f"{cfg.n_heads} heads, context {cfg.context} | vocabulary {vocab.size} | "
            f"{len(data.splits['train']):,} training / {len(data.splits['val']):,} held-out "
            f"characters ({source}) | {device}"
            + (f" ({threads} BLAS thread{'s' if threads != 1 else ''})" if threads else "")
            + f", {cfg.dtype}"
            + (f" | {dist.world_size} GPUs, data parallel" if dist is not None else "")
        )
        if ck is not None:
            say(f"resuming from step {tr.step} in {opts.out_dir}")
        elif checkpoint_exists(opts.out_dir):
            say(
                f"a new run: the checkpoint in {opts.out_dir} will be replaced "
                "(--resume continues it)"
            )
        if tr.step >= end:
            say(f"nothing to train: the checkpoint is at step {tr.step}, --steps is {cfg.steps}")
        progress_stream = (
            None
            if opts.quiet
            else (opts.progress_stream if opts.progress_stream is not None else sys.stderr)
        )
        bar = Progress(end, start=tr.step, stream=progress_stream)
        say.bar = bar
        with _StopRequest() as stop:
            try:
                train_time, tokens = _train(tr, end, opts, bar, say, stop)
            finally:
                bar.close()
            if not tr.history["val"] or tr.history["val"][-1][0] != tr.step:
                tr.evaluate()  # nothing was trained: evaluate the checkpoint as it is
                with stop.saving():
                    tr.save(opts.out_dir)
                if opts.metrics_path:
                    tr.write_metrics(opts.metrics_path)
                if stop.requested:
                    _say_interrupted(say, tr.step, opts.out_dir)
                    raise DemoInterrupted(tr.step, opts.out_dir)
        # From here on Ctrl-C is Python's KeyboardInterrupt again: the checkpoint is complete.
        val_loss = tr.history["val"][-1][1]
        sample = ""
        if opts.sample_tokens > 0 and main:
            sample = tr.sample(prompt_ids, opts.sample_tokens, opts.temperature, opts.top_k)
            with open(os.path.join(opts.out_dir, SAMPLE_FILE), "w", encoding="utf-8") as f:
                f.write(sample)
            say("--- sample " + "-" * 60)
            say(sample)
            say("-" * 71)

    if opts.metrics_path:
        tr.write_metrics(opts.metrics_path)  # with the last step times
    history = tr.history
    step = tr.step
    tps = tokens / train_time if train_time > 0 else 0.0
    plotted = main and plot_losses(
        history["train"], history["val"], os.path.join(opts.out_dir, PLOT_FILE)
    )
    say(
        f"done: step {step}/{cfg.steps} | held-out loss {val_loss:.4f} "
        f"({val_loss / math.log(2):.3f} bits/char) | {tps:,.0f} tok/s | "
        f"trained {format_duration(train_time)}",
        always=True,
    )
    say(
        f"wrote {os.path.join(opts.out_dir, WEIGHTS_FILE)}, {META_FILE}, {OPTIMIZER_FILE}"
        + (f", {SAMPLE_FILE}" if sample else "")
        + (f", {PLOT_FILE}" if plotted else " (no loss.png: matplotlib is not installed)")
        + (f"; metrics in {opts.metrics_path}" if opts.metrics_path else ""),
        always=True,
    )
    return RunResult(
        step=step,
        train_losses=history["train"],
        val_losses=history["val"],
        val_loss=val_loss,
        sample=sample,
        train_seconds=train_time,
        tokens_per_second=tps,
        out_dir=opts.out_dir,
        config=cfg,
        evals=tr.evals(),
        ms_per_step_median=tr.ms_per_step_median,
    )
