"""Command line of the demo: ``python -m ignis_autograd.demo`` or ``ignis-demo``.

Example::

    $ ignis-demo                         # GPU when present, else a small CPU run (~10 s)
    $ ignis-demo --device cpu --steps 50 --out /tmp/run
    $ ignis-demo --out /tmp/run --resume --steps 100
    $ ignis-demo --preset shakespeare_char --text tinyshakespeare.txt --metrics m.json
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from typing import Any

import ignis

from .config import PRESETS, DemoConfig, default_config, preset_config
from .data import DemoError
from .train import DEFAULT_OUT_DIR, DemoInterrupted, RunOptions, run

__all__ = ["main", "build_parser"]

# flag dest -> DemoConfig field
_CONFIG_FLAGS = {
    "context": "context",
    "dim": "dim",
    "layers": "n_layers",
    "heads": "n_heads",
    "dropout": "dropout",
    "batch_size": "batch_size",
    "steps": "steps",
    "lr": "lr",
    "min_lr": "min_lr",
    "warmup": "warmup_steps",
    "weight_decay": "weight_decay",
    "grad_clip": "grad_clip",
    "dtype": "dtype",
    "seed": "seed",
    "eval_interval": "eval_interval",
    "eval_batches": "eval_batches",
    "log_interval": "log_interval",
    "beta2": "beta2",
    "bias": "bias",
    "activation": "activation",
}


def _int_at_least(low: int) -> Any:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
        return value

    return parse


def _float_in(low: float, high: float | None = None, low_open: bool = False) -> Any:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if (
            value != value
            or (value <= low if low_open else value < low)
            or (high is not None and value > high)
        ):
            lo = f"> {low}" if low_open else f">= {low}"
            hi = f" and <= {high}" if high is not None else ""
            raise argparse.ArgumentTypeError(f"must be {lo}{hi}, got {text}")
        return value

    return parse


def _defaults_text() -> str:
    gpu, cpu = default_config("cuda"), default_config("cpu")
    rows = [
        (flag, getattr(gpu, f), getattr(cpu, f))
        for flag, f in (
            ("--context", "context"),
            ("--dim", "dim"),
            ("--layers", "n_layers"),
            ("--heads", "n_heads"),
            ("--dropout", "dropout"),
            ("--batch-size", "batch_size"),
            ("--steps", "steps"),
            ("--lr", "lr"),
            ("--min-lr", "min_lr"),
            ("--warmup", "warmup_steps"),
            ("--weight-decay", "weight_decay"),
            ("--beta2", "beta2"),
            ("--grad-clip", "grad_clip"),
            ("--dtype", "dtype"),
            ("--activation", "activation"),
            ("--seed", "seed"),
            ("--eval-interval", "eval_interval"),
            ("--eval-batches", "eval_batches"),
            ("--log-interval", "log_interval"),
        )
    ]
    lines = ["defaults (on a GPU / on the CPU):"]
    lines += [f"  {flag:<16} {g!s:>8} / {c!s}" for flag, g, c in rows]
    lines.append(
        "Biases are on (--no-bias drops them); weight decay applies to tensors of two or more\n"
        "dimensions only. --preset NAME starts from a named config instead of these defaults\n"
        f"(flags given beside it still apply): {', '.join(sorted(PRESETS))}."
    )
    lines.append(_preset_text())
    lines.append("With --resume the checkpoint's settings apply; --steps may extend the run.")
    lines.append(
        "Ctrl-C saves a checkpoint and exits with status 130; continue with --resume.\n"
        "On the CPU, NumPy's BLAS runs on one thread (the matrices are small; more threads\n"
        "cost more than they gain); OPENBLAS_NUM_THREADS=N in the environment overrides it."
    )
    return "\n".join(lines)


def _preset_text() -> str:
    cfg = PRESETS["shakespeare_char"]
    return (
        "  shakespeare_char: nanoGPT's config/train_shakespeare_char.py: "
        f"{cfg.n_layers} layers, {cfg.n_heads} heads,\n"
        f"    dim {cfg.dim}, context {cfg.context}, batch {cfg.batch_size}, dropout "
        f"{cfg.dropout}, no biases, exact GELU, AdamW lr {cfg.lr:g}\n"
        f"    betas (0.9, {cfg.beta2}), weight decay {cfg.weight_decay} on 2-D weights, clip "
        f"{cfg.grad_clip}, {cfg.warmup_steps} warm-up steps\n"
        f"    then cosine to {cfg.min_lr:g} over {cfg.steps} steps, evaluation every "
        f"{cfg.eval_interval} steps on {cfg.eval_batches} batches\n"
        "    of each split; bfloat16 on a GPU, float32 on the CPU (give the text with --text)"
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (defaults None mean: the device's default, or the checkpoint's)."""
    p = argparse.ArgumentParser(
        prog="ignis-demo",
        epilog=_defaults_text(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Train a small character-level GPT with ignis_autograd, evaluate it on held-out\n"
            "text, write a checkpoint and print a generated sample."
        ),
    )
    run_g = p.add_argument_group("run")
    run_g.add_argument(
        "--device",
        choices=("auto", "cpu", "cuda"),
        default="auto",
        help="where to train (default: cuda when a GPU is available, else cpu)",
    )
    run_g.add_argument(
        "--text",
        metavar="FILE",
        help="UTF-8 training text (default: the pydoc topics shipped with Python)",
    )
    run_g.add_argument(
        "--out",
        metavar="DIR",
        default=DEFAULT_OUT_DIR,
        help="output directory (checkpoint, sample, plot; default: %(default)s)",
    )
    run_g.add_argument(
        "--resume", action="store_true", help="continue from the checkpoint in --out"
    )
    run_g.add_argument(
        "--stop-at",
        type=_int_at_least(1),
        metavar="STEP",
        help="stop after STEP with a checkpoint, as an interruption would "
        "(the schedule still spans --steps)",
    )
    run_g.add_argument("--quiet", action="store_true", help="print only the final summary")
    run_g.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        help="start from a named config (see below) instead of the device's defaults",
    )

    m = p.add_argument_group("model")
    m.add_argument("--context", type=_int_at_least(2), help="tokens per sequence")
    m.add_argument("--dim", type=_int_at_least(1), help="embedding width")
    m.add_argument("--layers", type=_int_at_least(1), help="transformer blocks")
    m.add_argument("--heads", type=_int_at_least(1), help="attention heads (must divide --dim)")
    m.add_argument("--dropout", type=_float_in(0.0, 0.99), help="dropout probability")
    m.add_argument("--dtype", choices=("float32", "bfloat16"), help="parameter dtype")
    m.add_argument(
        "--no-bias",
        dest="bias",
        action="store_false",
        default=None,
        help="no biases in the linear layers and LayerNorms (nanoGPT's bias=False)",
    )
    m.add_argument(
        "--activation",
        choices=("gelu", "gelu_tanh"),
        help="the MLP's GELU: exact (erf, nanoGPT's) or GPT-2's tanh approximation",
    )
    m.add_argument(
        "--no-tf32",
        action="store_true",
        help="float32 matmuls on the GPU in full float32 (default: TF32 tensor cores)",
    )

    o = p.add_argument_group("optimization")
    o.add_argument("--steps", type=_int_at_least(1), help="total optimizer steps")
    o.add_argument("--batch-size", type=_int_at_least(1), help="sequences per step")
    o.add_argument("--lr", type=_float_in(0.0, low_open=True), help="peak learning rate")
    o.add_argument("--min-lr", type=_float_in(0.0), help="final learning rate of the cosine")
    o.add_argument("--warmup", type=_int_at_least(0), help="linear warm-up steps")
    o.add_argument(
        "--weight-decay",
        type=_float_in(0.0),
        help="AdamW decoupled weight decay, on tensors of 2 or more dimensions (embeddings, "
        "linear weights; not biases or norm weights)",
    )
    o.add_argument(
        "--beta2",
        type=_float_in(0.0, 1.0),
        help="AdamW's second-moment decay, in [0, 1) (beta1 is 0.9; nanoGPT uses 0.99)",
    )
    o.add_argument("--grad-clip", type=_float_in(0.0), help="max gradient norm (0: off)")
    o.add_argument("--seed", type=_int_at_least(0), help="seed of weights, batches, dropout")

    e = p.add_argument_group("evaluation and output")
    e.add_argument("--eval-interval", type=_int_at_least(1), help="steps between evaluations")
    e.add_argument(
        "--eval-batches",
        type=_int_at_least(1),
        help="random batches of each split (training, held-out) per evaluation, drawn anew "
        "each time",
    )
    e.add_argument(
        "--metrics",
        metavar="FILE",
        help="write a JSON of every evaluation (step, train_loss, val_loss, seconds) and the "
        "median ms per step; rewritten after each evaluation",
    )
    e.add_argument("--log-interval", type=_int_at_least(1), help="steps between loss lines")
    e.add_argument(
        "--sample-tokens",
        type=_int_at_least(0),
        default=300,
        help="characters to generate at the end (default: %(default)s)",
    )
    e.add_argument("--prompt", help="text the sample starts from (default: a newline)")
    e.add_argument(
        "--temperature",
        type=_float_in(0.0),
        default=0.8,
        help="sampling temperature (0: always the likeliest; default: %(default)s)",
    )
    e.add_argument(
        "--top-k",
        type=_int_at_least(0),
        default=20,
        help="sample among the k likeliest characters (0: all; default: %(default)s)",
    )
    return p


def _device(choice: str) -> str:
    available = ignis.is_available()
    if choice == "cuda" and not available:
        raise DemoError(
            "--device cuda: no CUDA GPU is available here (ignis.is_available() is False); "
            "use --device cpu"
        )
    if choice == "cuda" or (choice == "auto" and available):
        return "cuda:0"
    return "cpu"


def _config(args: argparse.Namespace, device: str) -> tuple[DemoConfig, dict[str, Any]]:
    changed = {
        field: getattr(args, dest)
        for dest, field in _CONFIG_FLAGS.items()
        if getattr(args, dest) is not None
    }
    device_type = "cuda" if device.startswith("cuda") else "cpu"
    base = preset_config(args.preset, device_type) if args.preset else default_config(device_type)
    cfg = replace(base, **changed)
    if "steps" in changed:
        # Fit the derived intervals to a short run unless they were given.
        steps = changed["steps"]
        if "eval_interval" not in changed:
            cfg = replace(cfg, eval_interval=max(1, min(cfg.eval_interval, steps)))
        if "log_interval" not in changed:
            cfg = replace(cfg, log_interval=max(1, min(cfg.log_interval, steps)))
        if "warmup_steps" not in changed:
            cfg = replace(cfg, warmup_steps=min(cfg.warmup_steps, steps // 10))
    if cfg.dim % cfg.n_heads:
        suggestion = cfg.n_heads * max(1, cfg.dim // cfg.n_heads)
        raise DemoError(
            f"--heads {cfg.n_heads} does not divide --dim {cfg.dim}; choose a dim that is a "
            f"multiple of the head count (e.g. --dim {suggestion})"
        )
    if cfg.warmup_steps >= cfg.steps:
        raise DemoError(
            f"--warmup {cfg.warmup_steps} must be less than --steps {cfg.steps} (the cosine "
            "decay follows the warm-up)"
        )
    if cfg.beta2 >= 1.0:
        raise DemoError(
            f"--beta2 must be less than 1 (AdamW's betas are in [0, 1)), got {cfg.beta2}"
        )
    if cfg.min_lr > cfg.lr:
        raise DemoError(f"--min-lr {cfg.min_lr} is larger than --lr {cfg.lr}")
    return cfg, changed


def main(argv: list[str] | None = None) -> int:
    """Run the demo with ``argv`` (default: ``sys.argv[1:]``); returns the exit status.

    Bad flags exit with status 2 and a one-line message (argparse's convention); a problem
    with the text or checkpoint exits with status 1; Ctrl-C exits with status 130 (128 +
    SIGINT, what a shell reports for a command that SIGINT ended, so ``ignis-demo && next``
    does not go on as if training had finished), after saving a checkpoint.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        device = _device(args.device)
        cfg, changed = _config(args, device)
    except DemoError as exc:
        parser.error(str(exc))
    if args.stop_at is not None and args.stop_at > cfg.steps and not args.resume:
        parser.error(f"--stop-at {args.stop_at} is after the last step ({cfg.steps})")
    opts = RunOptions(
        out_dir=args.out,
        device=device,
        resume=args.resume,
        text_path=args.text,
        sample_tokens=args.sample_tokens,
        prompt=args.prompt,
        temperature=args.temperature,
        top_k=args.top_k or None,
        stop_at=args.stop_at,
        quiet=args.quiet,
        tf32=not args.no_tf32,
        changed=changed,
        metrics_path=args.metrics,
    )
    try:
        run(cfg, opts)
    except DemoError as exc:
        print(f"ignis-demo: error: {exc}", file=sys.stderr)
        return 1
    except DemoInterrupted:
        return 130  # the run said where its checkpoint is
    except KeyboardInterrupt:
        print("ignis-demo: interrupted", file=sys.stderr)
        return 130
    return 0
