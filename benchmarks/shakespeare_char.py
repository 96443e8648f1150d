"""nanoGPT's ``shakespeare_char`` run, side by side: ignis (eager and ``capture_step``) and the
same model in plain PyTorch (eager under ``torch.autocast(bfloat16)``, and ``torch.compile``).

The config is the demo's ``--preset shakespeare_char`` (nanoGPT's
``config/train_shakespeare_char.py``): character level, 6 layers, 6 heads, width 384, context
256, batch 64, dropout 0.2, no biases, exact GELU, AdamW lr 1e-3 with betas (0.9, 0.99) and
weight decay 0.1 on the 2-D weights only, gradient clipping at 1.0, 100 warm-up steps then
cosine decay to 1e-4 over ``--steps``, an evaluation every 250 steps on 200 random batches of
each split (first 90% / last 10% of the text). nanoGPT reports a best held-out loss of 1.4697.

Every contender trains on the same batches: one seeded NumPy generator draws the window starts
of every training step and of every evaluation before the first contender starts. Each prints
one row: best held-out loss (nats per character), wall seconds from building the model to the
last evaluation (compilation, capture and evaluations included; the same evaluation work for
every contender), and the median milliseconds of a training step (host time between loss
reads, which wait for the device, over the steps in between; evaluations left out).

ignis: bfloat16 parameters with float32 master weights in AdamW, logits widened to float32
for the loss. PyTorch: float32 parameters under bfloat16 autocast, fused AdamW, TF32 allowed,
``torch.compile`` of the model only (as nanoGPT). The captured ignis step draws fresh dropout
masks at every replay (``ignis.random`` keeps its seed and offset in device memory).

Run on a GPU machine with torch installed::

    $ python benchmarks/shakespeare_char.py                        # 5000 steps each
    $ python benchmarks/shakespeare_char.py --steps 200 --eval-interval 100 --eval-batches 20
    $ python benchmarks/shakespeare_char.py --device cpu --steps 3 --layers 1 --dim 32 \\
          --heads 2 --context 16 --batch-size 4 --eval-batches 2 --eval-interval 3   # smoke
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_TEXT = os.path.join(ROOT, "..", "shared", "data", "tinyshakespeare.txt")
CONTENDERS = ("ignis-eager", "ignis-graph", "torch-eager", "torch-compile")
READ_EVERY = 10  # steps between loss reads (a read waits for the device)


# --- data: the text, its split and one shared batch plan ----------------------------------------


@dataclass
class Plan:
    """The token splits and every batch of the run, drawn once from ``np.random.default_rng``.

    ``train_starts[s]``: window starts of step ``s + 1`` (batch,). ``eval_starts[k][split]``:
    those of evaluation ``k`` ((eval_batches, batch) per split). ``eval_steps``: after which
    steps the evaluations come (every ``eval_interval`` and the last step).
    """

    splits: dict[str, np.ndarray]
    vocab_size: int
    context: int
    train_starts: np.ndarray
    eval_steps: list[int]
    eval_starts: list[dict[str, np.ndarray]]

    def batch(self, split: str, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Host int64 ``(inputs, targets)`` of shape (len(starts), context)."""
        rows = starts[:, None] + np.arange(self.context + 1)[None, :]
        window = self.splits[split][rows]
        return np.ascontiguousarray(window[:, :-1]), np.ascontiguousarray(window[:, 1:])


def make_plan(text: str, cfg: Any, seed: int) -> Plan:
    chars = "".join(sorted(set(text)))
    table = np.frombuffer(chars.encode("utf-32-le"), dtype=np.uint32)
    codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    ids = np.searchsorted(table, codes).astype(np.int64)
    n_val = int(len(ids) * 0.1)
    splits = {"train": ids[: len(ids) - n_val], "val": ids[len(ids) - n_val :]}
    for name, part in splits.items():
        if len(part) < cfg.context + 1:
            raise SystemExit(f"shakespeare_char: the {name} split is shorter than the context")
    rng = np.random.default_rng(seed)
    high = {k: len(v) - cfg.context for k, v in splits.items()}
    train = rng.integers(0, high["train"], size=(cfg.steps, cfg.batch_size))
    eval_steps = sorted(
        set(range(cfg.eval_interval, cfg.steps + 1, cfg.eval_interval)) | {cfg.steps}
    )
    evals = [
        {k: rng.integers(0, high[k], size=(cfg.eval_batches, cfg.batch_size)) for k in splits}
        for _ in eval_steps
    ]
    return Plan(splits, len(chars), cfg.context, train, eval_steps, evals)


def lr_at(step: int, cfg: Any) -> float:
    """ignis' ``WarmupCosine`` at ``step`` (0-based), for the PyTorch contenders."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    if step >= cfg.steps:
        return cfg.min_lr
    progress = (step - cfg.warmup_steps) / (cfg.steps - cfg.warmup_steps)
    return cfg.min_lr + (cfg.lr - cfg.min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))


# --- the common loop ------------------------------------------------------------------------------


@dataclass
class Result:
    name: str
    best_val: float = float("nan")
    wall_s: float = float("nan")
    ms_per_step: float = float("nan")
    evals: list[dict[str, float]] = field(default_factory=list)
    note: str = ""


class Contender:
    """One way to train: ``build()``, ``step(x, y)`` (one optimizer step on host batches; the
    loss as a device scalar, not read), ``read(loss)``, ``evaluate(batches)`` (mean loss over
    host batches, float)."""

    name = ""
    note = ""

    def build(self) -> None:
        raise NotImplementedError

    def step(self, x: np.ndarray, y: np.ndarray, index: int) -> Any:
        raise NotImplementedError

    def read(self, loss: Any) -> float:
        return float(loss.item())

    def evaluate(self, batches: list[tuple[np.ndarray, np.ndarray]]) -> float:
        raise NotImplementedError


def train(c: Contender, plan: Plan, cfg: Any, quiet: bool) -> Result:
    t0 = time.perf_counter()
    c.build()
    step_ms: list[float] = []
    res = Result(c.name)
    mark, pending, loss = time.perf_counter(), 0, None
    evals = dict(zip(plan.eval_steps, plan.eval_starts, strict=True))
    for step in range(1, cfg.steps + 1):
        x, y = plan.batch("train", plan.train_starts[step - 1])
        loss = c.step(x, y, step - 1)
        pending += 1
        if step % READ_EVERY and step not in evals:
            continue
        value = c.read(loss)
        now = time.perf_counter()
        step_ms += [(now - mark) * 1e3 / pending] * pending
        pending = 0
        if not math.isfinite(value):
            res.note = f"diverged at step {step}"
            break
        if step in evals:
            starts = evals[step]
            losses = {
                k: c.evaluate([plan.batch(k, s) for s in starts[k]]) for k in ("train", "val")
            }
            seconds = time.perf_counter() - t0
            res.evals.append(
                {
                    "step": step,
                    "train_loss": losses["train"],
                    "val_loss": losses["val"],
                    "seconds": seconds,
                }
            )
            if not quiet:
                print(
                    f"  {c.name}: step {step} | train {losses['train']:.4f} | "
                    f"val {losses['val']:.4f} | {seconds:.1f} s",
                    file=sys.stderr,
                    flush=True,
                )
        mark = time.perf_counter()
    res.wall_s = time.perf_counter() - t0
    res.best_val = min((e["val_loss"] for e in res.evals), default=float("nan"))
    res.ms_per_step = statistics.median(step_ms) if step_ms else float("nan")
    res.note = "; ".join(n for n in (c.note, res.note) if n)
    return res


# --- ignis ----------------------------------------------------------------------------------------


class Ignis(Contender):
    """The demo's model and optimizer (``ignis_autograd.demo.model``) on ``device``."""

    def __init__(self, cfg: Any, plan: Plan, device: str, graph: bool):
        self.cfg, self.plan, self.device, self.graph = cfg, plan, device, graph
        self.name = "ignis-graph" if graph else "ignis-eager"
        self.captured: Any = None
        self.eval_step: Any = None  # the captured evaluation forward; False: eager

    def build(self) -> None:
        from ignis_autograd.demo import model as seam

        import ignis
        import ignis_autograd as ag
        from ignis_autograd import optim

        self.ignis, self.ag = ignis, ag
        ignis.set_default_device(self.device)
        ignis.random.seed(self.cfg.seed)
        if self.device.startswith("cuda"):
            ignis.set_allow_tf32(True)
        self.model = seam.build_model(self.cfg, self.plan.vocab_size, self.device)
        self.opt, self.sched = seam.build_optimizer(self.model, self.cfg)
        params = list(self.model.parameters())
        vocab, clip, widen = self.plan.vocab_size, self.cfg.grad_clip, self.cfg.dtype != "float32"

        def loss_of_ids(x: Any, y: Any) -> Any:
            """Mean cross-entropy of device ids (logits widened to float32 first)."""
            logits = self.model(x)
            if widen:
                logits = logits.astype("float32")
            return ag.cross_entropy(logits.reshape(-1, vocab), y.reshape(-1))

        def train_step(x: Any, y: Any) -> Any:
            self.opt.zero_grad()
            loss = loss_of_ids(x, y)
            loss.backward()
            if clip > 0:
                optim.clip_grad_norm_(params, clip)
            self.opt.step()
            return loss.detach()

        self.loss_of_ids, self.train_step = loss_of_ids, train_step

    def _ids(self, a: np.ndarray) -> Any:
        return self.ignis.from_host(a, dtype="int64", device=self.device)

    def step(self, x: np.ndarray, y: np.ndarray, index: int) -> Any:
        xd, yd = self._ids(x), self._ids(y)
        if not self.graph or index == 0:
            loss = self.train_step(xd, yd)  # the first step eagerly: it creates every buffer
        elif self.captured is None:
            # The capture's one warm-up step is this step, on this batch (the second run of
            # the step: zero_grad's first real work happens here, before the recording).
            self.captured = self.ag.capture_step(self.train_step, xd, yd, warmup=1)
            loss = self.captured.warmup_outputs[0]
        else:
            loss = self.captured(xd, yd)
        self.sched.step()  # outside the graph: it fills the device learning rate
        return loss

    def evaluate(self, batches: list[tuple[np.ndarray, np.ndarray]]) -> float:
        from ignis_autograd.demo import model as seam

        from ignis_autograd import no_grad

        self.model.eval()
        try:
            with no_grad():
                if self.graph and self.eval_step is not False:
                    losses = self._captured_losses(batches)
                else:
                    losses = [seam.loss_of(self.model, x, y, self.device).data for x, y in batches]
                host = np.asarray(self.ignis.stack(losses).to_host(), dtype=np.float64)
        finally:
            self.model.train()
        return float(host.mean())

    def _captured_losses(self, batches: list[tuple[np.ndarray, np.ndarray]]) -> list[Any]:
        """The graph contender evaluates with a captured forward too (eval mode, no dropout):
        one graph launch a batch instead of the forward's kernel launches."""
        from ignis_autograd.demo import model as seam

        if self.eval_step is None:

            def eval_loss(x: Any, y: Any) -> Any:
                return self.loss_of_ids(x, y).detach()

            try:
                x0, y0 = (self._ids(a) for a in batches[0])
                self.eval_step = self.ag.capture_step(eval_loss, x0, y0, warmup=1)
            except Exception as exc:  # report it and evaluate eagerly: the run goes on
                self.eval_step = False
                self.note = f"evaluations eager (capture failed: {type(exc).__name__}: {exc})"
                return [seam.loss_of(self.model, x, y, self.device).data for x, y in batches]
        # The captured step returns the same output array at every call: keep a copy of each.
        return [self.eval_step(self._ids(x), self._ids(y)).data.clone() for x, y in batches]


# --- PyTorch --------------------------------------------------------------------------------------


def torch_gpt(cfg: Any, vocab: int) -> Any:
    """nanoGPT's model (model.py) in plain PyTorch, for ``cfg``."""
    import torch
    import torch.nn as tnn
    import torch.nn.functional as F

    d, h, p, bias = cfg.dim, cfg.n_heads, cfg.dropout, cfg.bias
    approx = "tanh" if cfg.activation == "gelu_tanh" else "none"

    class Attention(tnn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c_attn, self.c_proj = tnn.Linear(d, 3 * d, bias=bias), tnn.Linear(d, d, bias=bias)
            self.resid_dropout = tnn.Dropout(p)

        def forward(self, x: Any) -> Any:
            b, t, _ = x.shape
            q, k, v = self.c_attn(x).split(d, dim=2)
            q, k, v = (z.view(b, t, h, d // h).transpose(1, 2) for z in (q, k, v))
            y = F.scaled_dot_product_attention(
                q, k, v, dropout_p=p if self.training else 0.0, is_causal=True
            )
            return self.resid_dropout(self.c_proj(y.transpose(1, 2).reshape(b, t, d)))

    class Block(tnn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln_1, self.ln_2 = tnn.LayerNorm(d, bias=bias), tnn.LayerNorm(d, bias=bias)
            self.attn = Attention()
            self.c_fc, self.c_proj = (
                tnn.Linear(d, 4 * d, bias=bias),
                tnn.Linear(4 * d, d, bias=bias),
            )
            self.dropout = tnn.Dropout(p)

        def forward(self, x: Any) -> Any:
            x = x + self.attn(self.ln_1(x))
            return x + self.dropout(
                self.c_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate=approx))
            )

    class GPT(tnn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wte, self.wpe = tnn.Embedding(vocab, d), tnn.Embedding(cfg.context, d)
            self.drop = tnn.Dropout(p)
            self.h = tnn.ModuleList(Block() for _ in range(cfg.n_layers))
            self.ln_f = tnn.LayerNorm(d, bias=bias)
            for name, w in self.named_parameters():
                if name.endswith("bias"):
                    tnn.init.zeros_(w)
                elif name.endswith("c_proj.weight"):
                    tnn.init.normal_(w, std=0.02 / math.sqrt(2 * cfg.n_layers))
                elif "ln_" not in name:
                    tnn.init.normal_(w, std=0.02)

        def forward(self, ids: Any) -> Any:
            pos = torch.arange(ids.shape[1], device=ids.device)
            x = self.drop(self.wte(ids) + self.wpe(pos))
            for blk in self.h:
                x = blk(x)
            return self.ln_f(x) @ self.wte.weight.T  # tied head, as nanoGPT

    return GPT()


class Torch(Contender):
    def __init__(self, cfg: Any, plan: Plan, device: str, compiled: bool):
        self.cfg, self.plan, self.compiled = cfg, plan, compiled
        self.device = "cuda" if device.startswith("cuda") else "cpu"
        self.name = "torch-compile" if compiled else "torch-eager"

    def build(self) -> None:
        import torch
        import torch.nn.functional as F

        self.torch = torch
        torch.manual_seed(self.cfg.seed)
        cuda = self.device == "cuda"
        if cuda:
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.backends.cudnn.allow_tf32 = True
        raw = torch_gpt(self.cfg, self.plan.vocab_size).to(self.device)
        params = [w for w in raw.parameters() if w.requires_grad]
        groups = [
            {"params": [w for w in params if w.dim() >= 2], "weight_decay": self.cfg.weight_decay},
            {"params": [w for w in params if w.dim() < 2], "weight_decay": 0.0},
        ]
        self.opt = torch.optim.AdamW(
            [g for g in groups if g["params"]],
            lr=lr_at(0, self.cfg),
            betas=(0.9, self.cfg.beta2),
            **({"fused": True} if cuda else {}),
        )
        self.params = params
        self.model = torch.compile(raw) if self.compiled else raw
        # bfloat16 autocast on the GPU (nanoGPT's dtype); plain float32 on the CPU smoke run.
        self.autocast = cuda and self.cfg.dtype == "bfloat16"
        self.F = F

    def _ids(self, a: np.ndarray) -> Any:
        t = self.torch.from_numpy(a)
        if self.device == "cuda":
            return t.pin_memory().to("cuda", non_blocking=True)
        return t

    def _loss(self, x: Any, y: Any) -> Any:
        with self.torch.autocast("cuda", dtype=self.torch.bfloat16, enabled=self.autocast):
            logits = self.model(x)
        v = self.plan.vocab_size
        return self.F.cross_entropy(logits.float().reshape(-1, v), y.reshape(-1))

    def step(self, x: np.ndarray, y: np.ndarray, index: int) -> Any:
        lr = lr_at(index, self.cfg)
        for g in self.opt.param_groups:
            g["lr"] = lr
        loss = self._loss(self._ids(x), self._ids(y))
        loss.backward()
        if self.cfg.grad_clip > 0:
            self.torch.nn.utils.clip_grad_norm_(self.params, self.cfg.grad_clip)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return loss.detach()

    def evaluate(self, batches: list[tuple[np.ndarray, np.ndarray]]) -> float:
        self.model.eval()
        try:
            with self.torch.no_grad():
                losses = [self._loss(self._ids(x), self._ids(y)) for x, y in batches]
                value = self.torch.stack(losses).double().mean().item()
        finally:
            self.model.train()
        return float(value)


# --- command line ---------------------------------------------------------------------------------


def profile_step(cfg: Any, plan: Plan, device: str) -> int:
    """One eager ignis step's kernels by device time, then one replay of the captured step.

    cuBLAS launches its own kernels, which the profiler does not see: the replay's time less
    the kernels' total is about what the matrix products take.
    """
    import ignis

    c = Ignis(cfg, plan, device, graph=device != "cpu")
    c.build()
    for i in range(4):  # eager, capture (+ its warm-up), replays: every first-time job done
        c.read(c.step(*plan.batch("train", plan.train_starts[i]), i))
    x, y = (c._ids(a) for a in plan.batch("train", plan.train_starts[4]))
    with ignis.profile() as prof:
        c.train_step(x, y)
    print(f"one eager ignis step ({cfg.dtype}, batch {cfg.batch_size}, context {cfg.context}):")
    print(prof.table(limit=40))
    if c.captured is not None:
        with ignis.profile() as replay:
            for _ in range(5):
                c.captured(x, y)
        times = [e.time_ms for e in replay.events if e.kind == "graph"]
        print(f"captured step: median {statistics.median(times):.3f} ms of device time a replay")
    return 0


def build_config(args: argparse.Namespace, device: str) -> Any:
    from ignis_autograd.demo.config import preset_config

    cfg = preset_config("shakespeare_char", "cuda" if device.startswith("cuda") else "cpu")
    changes = {
        "steps": args.steps,
        "eval_interval": args.eval_interval,
        "eval_batches": args.eval_batches,
        "n_layers": args.layers,
        "dim": args.dim,
        "n_heads": args.heads,
        "context": args.context,
        "batch_size": args.batch_size,
        "dropout": args.dropout,
        "dtype": args.dtype,
        "seed": args.seed,
    }
    cfg = dataclasses.replace(cfg, **{k: v for k, v in changes.items() if v is not None})
    if cfg.warmup_steps >= cfg.steps:  # a short smoke run: keep the schedule well-formed
        cfg = dataclasses.replace(cfg, warmup_steps=cfg.steps // 10)
    return cfg


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--text", default=DEFAULT_TEXT, help="UTF-8 training text (%(default)s)")
    p.add_argument("--steps", type=int, default=5000, help="optimizer steps per contender")
    p.add_argument("--eval-interval", type=int, help="steps between evaluations (250)")
    p.add_argument("--eval-batches", type=int, help="batches of each split per evaluation (200)")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument(
        "--contenders",
        default=",".join(CONTENDERS),
        help="comma-separated subset of " + ", ".join(CONTENDERS),
    )
    p.add_argument("--seed", type=int, help="seed of weights and of the batch plan (1337)")
    p.add_argument("--json", metavar="FILE", help="also write the rows (and every evaluation)")
    p.add_argument("--quiet", action="store_true", help="no per-evaluation lines on stderr")
    p.add_argument(
        "--profile",
        action="store_true",
        help="instead of training: where one ignis step's device time goes (ignis.profile())",
    )
    g = p.add_argument_group("smaller models (smoke runs)")
    for flag in ("layers", "dim", "heads", "context", "batch-size"):
        g.add_argument(f"--{flag}", type=int)
    g.add_argument("--dropout", type=float)
    g.add_argument("--dtype", choices=("float32", "bfloat16"))
    args = p.parse_args(argv)

    import ignis

    device = "cuda:0" if args.device == "cuda" else "cpu"
    if device != "cpu" and not ignis.is_available():
        print("shakespeare_char: no CUDA GPU here; use --device cpu for a smoke run")
        return 1
    names = [n.strip() for n in args.contenders.split(",") if n.strip()]
    unknown = sorted(set(names) - set(CONTENDERS))
    if unknown:
        p.error(f"--contenders: unknown {unknown}; expected some of {list(CONTENDERS)}")
    with open(args.text, encoding="utf-8") as f:
        text = f.read()
    cfg = build_config(args, device)
    plan = make_plan(text, cfg, cfg.seed)

    if args.profile:
        return profile_step(cfg, plan, device)
    rows: list[Result] = []
    for name in names:
        if name == "ignis-graph" and device == "cpu":
            rows.append(Result(name, note="skipped: CUDA graphs need a GPU"))
            continue
        if name.startswith("torch"):
            try:
                import torch  # noqa: F401
            except ImportError:
                rows.append(Result(name, note="skipped: torch is not installed"))
                continue
            if name == "torch-compile" and device == "cpu":
                rows.append(Result(name, note="skipped on the CPU"))
                continue
            c: Contender = Torch(cfg, plan, device, compiled=name == "torch-compile")
        else:
            c = Ignis(cfg, plan, device, graph=name == "ignis-graph")
        rows.append(train(c, plan, cfg, args.quiet))
        del c
        gc.collect()  # the previous contender's model, graph and optimizer state go first

    print(
        f"shakespeare_char: {len(text):,} characters, vocabulary {plan.vocab_size} | "
        f"{cfg.n_layers} layers, {cfg.n_heads} heads, width {cfg.dim}, context {cfg.context}, "
        f"batch {cfg.batch_size}, dropout {cfg.dropout}, {cfg.steps} steps, {cfg.dtype} | "
        f"eval every {cfg.eval_interval} on {cfg.eval_batches} batches per split | {device}"
    )
    print(
        "| contender | best held-out loss | wall s (incl. compilation) | median ms/step | notes |"
    )
    print("|---|---:|---:|---:|---|")
    for r in rows:
        cells = (f"{r.best_val:.4f}", f"{r.wall_s:.1f}", f"{r.ms_per_step:.2f}")
        cells = tuple("-" if "nan" in c else c for c in cells)  # skipped or diverged
        print(f"| {r.name} | {' | '.join(cells)} | {r.note} |")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(
                {
                    "config": cfg.to_dict(),
                    "device": device,
                    "rows": [dataclasses.asdict(r) for r in rows],
                },
                f,
                indent=1,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
