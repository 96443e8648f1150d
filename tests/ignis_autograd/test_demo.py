"""The training demo (ignis_autograd.demo) end to end on the CPU with a tiny configuration:
data and batching, progress line, checkpoint encoding, flags and their errors, a run that
writes its outputs, and a resumed run that equals an uninterrupted one."""

from __future__ import annotations

import io
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
from ignis_autograd.demo import cli
from ignis_autograd.demo.checkpoint import decode_tree, encode_tree
from ignis_autograd.demo.config import DemoConfig, default_config
from ignis_autograd.demo.data import CharDataset, CharVocab, DemoError, load_text
from ignis_autograd.demo.progress import Progress, format_duration

import ignis

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# A small text with structure to learn: short sentences from a few words.
_WORDS = ["the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "to", "it"]


def _text(n_chars: int = 6000, seed: int = 0) -> str:
    rng = np.random.default_rng(seed)
    lines = []
    size = 0
    while size < n_chars:
        words = rng.choice(_WORDS, size=int(rng.integers(3, 8)))
        line = " ".join(words).capitalize() + "."
        lines.append(line)
        size += len(line) + 1
    return "\n".join(lines)


@pytest.fixture
def text_file(tmp_path):
    path = tmp_path / "text.txt"
    path.write_text(_text(), encoding="utf-8")
    return str(path)


def _has_model() -> bool:
    try:
        from ignis_autograd import nn, optim  # noqa: F401
    except ImportError:
        return False
    return hasattr(nn, "GPT") and hasattr(optim, "AdamW")


needs_model = pytest.mark.skipif(
    not _has_model(), reason="ignis_autograd.nn.GPT / ignis_autograd.optim not available"
)

# Every setting explicit: the CPU and GPU defaults differ, and the GPU tests compare the two.
# fmt: off
TINY = [
    "--device", "cpu", "--context", "16", "--dim", "16", "--layers", "1", "--heads", "2",
    "--batch-size", "4", "--eval-batches", "2", "--sample-tokens", "40", "--lr", "1e-2",
    "--min-lr", "1e-3", "--dropout", "0", "--warmup", "0", "--weight-decay", "0.1",
    "--grad-clip", "1.0", "--seed", "1337",
]
# fmt: on


# --- data --------------------------------------------------------------------------------------


def test_builtin_text_is_large_and_named():
    text, source = load_text(None)
    assert len(text) > 100_000
    assert source in ("pydoc topics", "standard-library sources")


def test_text_file_errors(tmp_path):
    with pytest.raises(DemoError, match="--text: no such file"):
        load_text(str(tmp_path / "missing.txt"))
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"\xff\xfe\xfa not utf-8")
    with pytest.raises(DemoError, match="not UTF-8"):
        load_text(str(bad))


def test_vocab_round_trip_and_unknown_character():
    vocab = CharVocab.from_text("hello, wörld\n")
    assert vocab.chars == "".join(sorted(set("hello, wörld\n")))
    ids = vocab.encode("world hello")
    assert ids.dtype == np.int64
    assert [vocab.chars[i] for i in ids] == list("world hello")
    assert vocab.decode(ids) == "world hello"
    with pytest.raises(DemoError, match="outside the vocabulary"):
        vocab.encode("xyz")
    with pytest.raises(DemoError, match="empty"):
        CharVocab.from_text("")


def test_dataset_split_and_batches():
    text = _text(3000)
    vocab = CharVocab.from_text(text)
    ids = vocab.encode(text)
    data = CharDataset(ids, context=8)
    train, val = data.splits["train"], data.splits["val"]
    assert len(val) == int(len(ids) * 0.1)
    np.testing.assert_array_equal(np.concatenate([train, val]), ids)
    g = ignis.random.Generator(5)
    x, y = data.batch("train", 7, g)
    assert x.shape == y.shape == (7, 8) and x.dtype == np.int64
    np.testing.assert_array_equal(x[:, 1:], y[:, :-1])  # targets are the next tokens
    # each row is a real window of the training part
    windows = np.lib.stride_tricks.sliding_window_view(train, 9)
    for row_x, row_y in zip(x, y, strict=True):
        window = np.concatenate([row_x, row_y[-1:]])
        assert (windows == window).all(axis=1).any()
    # the same generator state gives the same batch; the generator advanced
    assert g.get_state()[1] > 0
    x2, _ = data.batch("train", 7, ignis.random.Generator(5))
    np.testing.assert_array_equal(x, x2)
    x3, _ = data.batch("train", 7, g)
    assert not np.array_equal(x, x3)
    xv, _ = data.batch("val", 3, g)
    assert xv.shape == (3, 8)


def test_dataset_too_short_says_what_is_needed():
    ids = CharVocab.from_text("abcdefghij").encode("abcdefghij" * 5)
    with pytest.raises(DemoError, match=r"too short for --context 32.*held-out part has 5 tokens"):
        CharDataset(ids, context=32)


# --- progress and config -------------------------------------------------------------------------


def test_format_duration():
    assert format_duration(0) == "0:00"
    assert format_duration(61.4) == "1:01"
    assert format_duration(3725) == "1:02:05"
    assert format_duration(float("nan")) == "--:--"


def test_progress_line_draws_step_loss_speed_and_eta():
    out = io.StringIO()
    bar = Progress(total=10, start=2, stream=out, width=10, force=True)
    bar.update(3, 2.5, 100)
    bar.update(4, 2.25, 100)
    line = bar.line()
    assert "step 4/10" in line and "loss 2.2500" in line and "tok/s" in line and "ETA" in line
    assert line.startswith("[####......]")
    bar.close()
    assert out.getvalue().endswith("\n") and "\r" in out.getvalue()
    silent = io.StringIO()  # not a terminal: nothing drawn
    Progress(total=3, stream=silent).update(1, 1.0, 1)
    assert silent.getvalue() == ""


def test_default_configs_are_small_on_cpu_and_larger_on_gpu():
    cpu, gpu = default_config("cpu"), default_config("cuda")
    assert cpu.dim * cpu.n_layers * cpu.context < gpu.dim * gpu.n_layers * gpu.context
    assert gpu.dim % gpu.n_heads == 0 and cpu.dim % cpu.n_heads == 0
    assert DemoConfig.from_dict(cpu.to_dict() | {"unknown": 1}) == cpu


def test_plot_is_skipped_without_matplotlib(tmp_path, monkeypatch):
    from ignis_autograd.demo.plot import matplotlib_available, plot_losses

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails
    assert not matplotlib_available()
    assert plot_losses([(1, 3.0), (2, 2.5)], [(2, 2.6)], str(tmp_path / "loss.png")) is False
    assert not (tmp_path / "loss.png").exists()


def test_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    from ignis_autograd.demo.plot import plot_losses

    path = tmp_path / "loss.png"
    assert plot_losses([(1, 3.0), (2, 2.5), (3, 2.2)], [(3, 2.4)], str(path)) is True
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# --- checkpoint encoding -------------------------------------------------------------------------


def test_encode_tree_round_trips_tuples_int_keys_and_arrays():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = ignis.asarray(np.array([1.5, -2.0]), device="cpu")
    tree = {
        "state": {0: {"step": 3, "exp_avg": a}, 1: {"exp_avg": b}},
        "param_groups": [{"lr": 1e-3, "betas": (0.9, 0.95), "params": [0, 1]}],
        "flag": None,
        "n": np.int64(4),
    }
    doc, arrays = encode_tree(tree)
    text = json.dumps(doc)  # JSON-ready
    assert set(arrays) == {"state.0.exp_avg", "state.1.exp_avg"}
    back = decode_tree(json.loads(text), arrays)
    assert back["param_groups"][0]["betas"] == (0.9, 0.95)
    assert isinstance(back["param_groups"][0]["betas"], tuple)
    assert set(back["state"]) == {0, 1}
    assert back["state"][0]["exp_avg"] is a and back["state"][0]["step"] == 3
    assert back["n"] == 4 and back["flag"] is None


def test_decode_tree_names_a_missing_array():
    with pytest.raises(DemoError, match="'m.x' is missing"):
        decode_tree({"x": {"__tensor__": "m.x"}}, {})


# --- flags -----------------------------------------------------------------------------------


def _demo_env() -> dict[str, str]:
    env = dict(os.environ)
    paths = [os.path.join(_ROOT, "ignis", "src"), os.path.join(_ROOT, "ignis_autograd", "src")]
    env["PYTHONPATH"] = os.pathsep.join(paths + [env.get("PYTHONPATH", "")])
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _main(argv, capsys):
    code = cli.main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _bad_flag(argv, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 2
    return capsys.readouterr().err


@pytest.mark.skipif(ignis.is_available(), reason="a GPU is present")
def test_cuda_without_gpu_suggests_cpu(capsys):
    err = _bad_flag(["--device", "cuda"], capsys)
    assert "--device cuda" in err and "no CUDA GPU" in err and "--device cpu" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--steps", "0"], "--steps: must be at least 1, got 0"),
        (["--steps", "ten"], "--steps: expected an integer, got 'ten'"),
        (["--lr", "-1"], "--lr: must be > 0.0, got -1"),
        (["--dropout", "1.5"], "--dropout: must be >= 0.0 and <= 0.99, got 1.5"),
        (["--dtype", "float16"], "invalid choice: 'float16'"),
        (["--device", "tpu"], "invalid choice: 'tpu'"),
        (["--dim", "30", "--heads", "4"], "--heads 4 does not divide --dim 30"),
        (["--lr", "1e-3", "--min-lr", "1e-2"], "--min-lr 0.01 is larger than --lr 0.001"),
        (["--steps", "5", "--stop-at", "9"], "--stop-at 9 is after the last step (5)"),
        (["--steps", "5", "--warmup", "5"], "--warmup 5 must be less than --steps 5"),
    ],
)
def test_bad_flags_exit_2_with_a_clear_message(argv, message, capsys):
    err = _bad_flag(["--device", "cpu", *argv], capsys)
    assert "ignis-demo: error:" in err and message in err


def test_resume_without_checkpoint(tmp_path, capsys):
    code, _, err = _main(["--device", "cpu", "--out", str(tmp_path), "--resume"], capsys)
    assert code == 1
    assert "--resume: no checkpoint in" in err and "without --resume" in err


def test_missing_text_file(tmp_path, capsys):
    code, _, err = _main(
        ["--device", "cpu", "--text", str(tmp_path / "nope.txt"), "--out", str(tmp_path)], capsys
    )
    assert code == 1 and "--text: no such file" in err


def test_module_entry_point_help():
    proc = subprocess.run(
        [sys.executable, "-m", "ignis_autograd.demo", "--help"],
        capture_output=True,
        text=True,
        env=_demo_env(),
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    for flag in (
        "--device",
        "--steps",
        "--text",
        "--out",
        "--resume",
        "--seed",
        "--batch-size",
        "--context",
        "--dim",
        "--layers",
        "--heads",
        "--lr",
        "--dtype",
        "--sample-tokens",
        "--eval-interval",
        "--quiet",
    ):
        assert flag in proc.stdout


def test_console_script_is_declared():
    tomllib = pytest.importorskip("tomllib")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(root, "ignis_autograd", "pyproject.toml"), "rb") as f:
        scripts = tomllib.load(f)["project"]["scripts"]
    assert scripts["ignis-demo"] == "ignis_autograd.demo.cli:main"


def test_default_output_folder_is_ignored_by_git():
    # A first run from a checkout must leave `git status` clean.
    import shutil

    from ignis_autograd.demo.train import RunOptions

    if shutil.which("git") is None or not os.path.exists(os.path.join(_ROOT, ".git")):
        pytest.skip("not a git checkout (or no git)")
    out = cli.build_parser().get_default("out")
    assert out == RunOptions().out_dir  # one default, for the command line and for Python
    assert not os.path.isabs(out)
    # Run from the repository root, or from a folder inside it.
    for where in (out, os.path.join("ignis_autograd", out)):
        for name in ("checkpoint.json", "checkpoint.safetensors", "sample.txt", "loss.png"):
            path = os.path.join(where, name)
            proc = subprocess.run(
                ["git", "-C", _ROOT, "check-ignore", "-q", path], capture_output=True, text=True
            )
            if proc.returncode == 128:  # git refuses this checkout (ownership, ...)
                pytest.skip(f"git check-ignore failed: {proc.stderr.strip()}")
            assert proc.returncode == 0, f"{path} is not ignored by git: add {out}/ to .gitignore"


# --- NumPy's BLAS threads ------------------------------------------------------------------------


def _openblas_or_skip():
    from ignis_autograd.demo.blas import current_threads

    if current_threads() is None:
        pytest.skip("NumPy's BLAS here is not an OpenBLAS the demo can find")


def test_blas_threads_sets_and_restores(monkeypatch):
    from ignis_autograd.demo.blas import THREAD_ENV, blas_threads, current_threads

    _openblas_or_skip()
    for name in THREAD_ENV:
        monkeypatch.delenv(name, raising=False)
    before = current_threads()
    with blas_threads(1) as n:
        assert n == 1 and current_threads() == 1
    assert current_threads() == before
    with pytest.raises(ValueError, match=r"blas_threads: n must be an integer >= 1, got 0"):
        with blas_threads(0):
            pass


def test_blas_threads_leave_the_users_setting(monkeypatch):
    from ignis_autograd.demo.blas import blas_threads, current_threads

    _openblas_or_skip()
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "2")
    before = current_threads()
    with blas_threads(1) as n:
        assert n == before and current_threads() == before


@needs_model
def test_a_cpu_run_trains_with_one_blas_thread(tmp_path, text_file, capsys, monkeypatch):
    # Multi-threaded OpenBLAS made the CPU demo 5 times slower on a busy two-core machine (its
    # threads spin, waiting for work): the run must use one thread, and give the count back.
    from ignis_autograd.demo import model as seam
    from ignis_autograd.demo.blas import THREAD_ENV, current_threads

    _openblas_or_skip()
    for name in THREAD_ENV:
        monkeypatch.delenv(name, raising=False)
    before = current_threads()
    seen = []
    clip = seam.clip_gradients

    def clip_and_look(model, max_norm):
        seen.append(current_threads())
        clip(model, max_norm)

    monkeypatch.setattr(seam, "clip_gradients", clip_and_look)
    code, stdout, err = _main(
        [*TINY, "--text", text_file, "--steps", "3", "--sample-tokens", "0", "--out",
         str(tmp_path)],
        capsys,
    )  # fmt: skip
    assert code == 0, err
    assert seen == [1, 1, 1]
    assert "cpu (1 BLAS thread), float32" in stdout
    assert current_threads() == before


# --- end to end ------------------------------------------------------------------------------


def _load_weights(path):
    from ignis_autograd import nn

    return {
        k: np.asarray(v.to_host() if hasattr(v, "to_host") else v)
        for k, v in nn.load(path, device="cpu").items()
    }


@needs_model
def test_run_writes_checkpoint_sample_and_summary(tmp_path, text_file, capsys):
    out = tmp_path / "run"
    code, stdout, err = _main(
        [
            *TINY,
            "--text",
            text_file,
            "--steps",
            "6",
            "--eval-interval",
            "3",
            "--log-interval",
            "2",
            "--out",
            str(out),
        ],
        capsys,
    )
    assert code == 0, err
    for name in (
        "checkpoint.safetensors",
        "checkpoint.json",
        "optimizer.safetensors",
        "sample.txt",
    ):
        assert (out / name).is_file(), name
    meta = json.loads((out / "checkpoint.json").read_text())
    assert meta["step"] == 6 and meta["config"]["dim"] == 16
    assert meta["vocab"] == "".join(sorted(set(_text())))
    assert [s for s, _ in meta["history"]["train"]] == [1, 2, 3, 4, 5, 6]
    assert [s for s, _ in meta["history"]["val"]] == [3, 6]
    first = meta["history"]["train"][0][1]
    assert abs(first - math.log(len(meta["vocab"]))) < 1.0  # an untrained model is near uniform
    sample = (out / "sample.txt").read_text(encoding="utf-8")
    assert sample.startswith("\n") and len(sample) == 41
    assert set(sample) <= set(meta["vocab"])
    assert "step      4/6 | loss" in stdout and "held-out loss" in stdout
    assert "done: step 6/6" in stdout and sample.strip() in stdout
    if (out / "loss.png").exists():
        assert (out / "loss.png").stat().st_size > 1000
    else:
        assert "no loss.png: matplotlib is not installed" in stdout
    weights = _load_weights(str(out / "checkpoint.safetensors"))
    assert "tok_emb.weight" in weights and all(np.isfinite(w).all() for w in weights.values())


@needs_model
def test_quiet_prints_only_the_summary(tmp_path, text_file, capsys):
    code, stdout, _ = _main(
        [
            *TINY,
            "--text",
            text_file,
            "--steps",
            "2",
            "--quiet",
            "--sample-tokens",
            "0",
            "--out",
            str(tmp_path),
        ],
        capsys,
    )
    assert code == 0
    lines = stdout.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("done: step 2/2")
    assert not (tmp_path / "sample.txt").exists()


@needs_model
def test_resume_equals_uninterrupted_run(tmp_path, text_file, capsys):
    common = [
        *TINY,
        "--text",
        text_file,
        "--steps",
        "8",
        "--eval-interval",
        "4",
        "--dropout",
        "0.1",
        "--sample-tokens",
        "0",
        "--quiet",
    ]
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    assert _main([*common, "--out", str(whole)], capsys)[0] == 0
    assert _main([*common, "--out", str(parts), "--stop-at", "3"], capsys)[0] == 0
    assert json.loads((parts / "checkpoint.json").read_text())["step"] == 3
    code, _, err = _main([*common, "--out", str(parts), "--resume"], capsys)
    assert code == 0, err
    a = json.loads((whole / "checkpoint.json").read_text())
    b = json.loads((parts / "checkpoint.json").read_text())
    assert b["step"] == a["step"] == 8
    assert b["history"]["train"] == a["history"]["train"]  # every step's loss, bit for bit
    assert b["rng"] == a["rng"] and b["scheduler"] == a["scheduler"]
    wa = _load_weights(str(whole / "checkpoint.safetensors"))
    wb = _load_weights(str(parts / "checkpoint.safetensors"))
    assert wa.keys() == wb.keys()
    for k in wa:
        np.testing.assert_array_equal(wa[k], wb[k], err_msg=k)
    oa = _load_weights(str(whole / "optimizer.safetensors"))
    ob = _load_weights(str(parts / "optimizer.safetensors"))
    assert oa.keys() == ob.keys() and len(oa) > 0
    for k in oa:
        np.testing.assert_array_equal(oa[k], ob[k], err_msg=k)
    # the resumed run really continued: its first half differs from a fresh start's weights
    assert a["history"]["train"][0][1] != a["history"]["train"][-1][1]


@needs_model
def test_resume_with_more_steps_extends_the_run(tmp_path, text_file, capsys):
    common = [*TINY, "--text", text_file, "--sample-tokens", "0", "--quiet", "--out", str(tmp_path)]
    assert _main([*common, "--steps", "3"], capsys)[0] == 0
    code, stdout, err = _main([*common, "--steps", "5", "--resume"], capsys)
    assert code == 0, err
    assert "done: step 5/5" in stdout
    meta = json.loads((tmp_path / "checkpoint.json").read_text())
    assert [s for s, _ in meta["history"]["train"]] == [1, 2, 3, 4, 5]
    assert meta["config"]["steps"] == 5 and meta["scheduler"]["total_steps"] == 5


@needs_model
def test_reading_losses_every_few_steps_changes_nothing(tmp_path, text_file):
    # The GPU path reads the training loss every few steps; the history must be the same.
    from ignis_autograd.demo.config import DemoConfig
    from ignis_autograd.demo.train import RunOptions, run

    cfg = DemoConfig(
        context=16,
        dim=16,
        n_layers=1,
        n_heads=2,
        batch_size=4,
        steps=9,
        warmup_steps=2,
        eval_interval=5,
        eval_batches=1,
        log_interval=3,
    )
    results = []
    for every in (1, 4):
        opts = RunOptions(
            out_dir=str(tmp_path / str(every)),
            device="cpu",
            text_path=text_file,
            sample_tokens=0,
            quiet=True,
            read_every=every,
            stream=io.StringIO(),
        )
        results.append(run(cfg, opts))
    a, b = results
    assert [s for s, _ in b.train_losses] == list(range(1, 10))
    assert a.train_losses == b.train_losses and a.val_losses == b.val_losses
    assert [s for s, _ in b.val_losses] == [5, 9]


@needs_model
def test_resume_refuses_a_different_model_or_text(tmp_path, text_file, capsys):
    common = [*TINY, "--text", text_file, "--steps", "2", "--sample-tokens", "0", "--quiet"]
    assert _main([*common, "--out", str(tmp_path)], capsys)[0] == 0
    code, _, err = _main([*common, "--out", str(tmp_path), "--resume", "--dim", "32"], capsys)
    assert code == 1 and "dim = 32 differs from the checkpoint's 16" in err
    other = tmp_path / "other.txt"
    other.write_text(_text(seed=1), encoding="utf-8")
    code, _, err = _main(
        [
            *TINY,
            "--text",
            str(other),
            "--steps",
            "2",
            "--quiet",
            "--out",
            str(tmp_path),
            "--resume",
        ],
        capsys,
    )
    assert code == 1 and "not the one the checkpoint was trained on" in err
    # a damaged weight file is detected, not silently loaded
    with open(tmp_path / "checkpoint.safetensors", "ab") as f:
        f.write(b"\0")
    code, _, err = _main([*common, "--out", str(tmp_path), "--resume"], capsys)
    assert code == 1 and "does not match checkpoint.json" in err


def _ctrl_c_in_step(monkeypatch, step: int, times: int = 1) -> list[int]:
    """Send SIGINT ``times`` times in the middle of training step ``step`` (from gradient
    clipping, between backward and the optimizer). Returns the list of steps clipped so far."""
    import signal

    from ignis_autograd.demo import model as seam

    calls: list[int] = []
    clip = seam.clip_gradients

    def clip_and_interrupt(model, max_norm):
        calls.append(len(calls) + 1)
        if len(calls) == step:
            for _ in range(times):
                os.kill(os.getpid(), signal.SIGINT)
        clip(model, max_norm)

    monkeypatch.setattr(seam, "clip_gradients", clip_and_interrupt)
    return calls


@needs_model
def test_ctrl_c_saves_a_checkpoint_and_stops(tmp_path, text_file, capsys, monkeypatch):
    import signal

    calls = _ctrl_c_in_step(monkeypatch, 3)
    code, stdout, err = _main(
        [*TINY, "--text", text_file, "--steps", "8", "--out", str(tmp_path)], capsys
    )
    assert code == 130, err  # 128 + SIGINT, as a shell reports a command SIGINT ended
    assert len(calls) == 3  # the step in flight finished; no step after it
    assert (
        f"interrupted: checkpoint of step 3 saved in {tmp_path}; continue with --resume" in stdout
    )
    # It stops: no sample, no summary, no sample file.
    assert "--- sample" not in stdout and "done:" not in stdout
    assert not (tmp_path / "sample.txt").exists()
    assert json.loads((tmp_path / "checkpoint.json").read_text())["step"] == 3
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored


@needs_model
def test_ctrl_c_is_said_even_when_quiet(tmp_path, text_file, capsys, monkeypatch):
    _ctrl_c_in_step(monkeypatch, 1)
    code, stdout, _ = _main(
        [*TINY, "--text", text_file, "--steps", "8", "--quiet", "--out", str(tmp_path)], capsys
    )
    assert code == 130
    assert stdout.strip().splitlines() == [
        f"interrupted: checkpoint of step 1 saved in {tmp_path}; "
        f"continue with --resume --out {tmp_path}"
    ]


@needs_model
def test_a_second_ctrl_c_during_the_save_leaves_a_whole_checkpoint(
    tmp_path, text_file, capsys, monkeypatch
):
    # The worst moment: between the renames that put the new files in place (new weights, old
    # JSON). The save must complete, and the checkpoint load as the step it says.
    import signal

    from ignis_autograd.demo import checkpoint as ck_module
    from ignis_autograd.demo import model as seam
    from ignis_autograd.demo.checkpoint import WEIGHTS_FILE, load_checkpoint

    calls = _ctrl_c_in_step(monkeypatch, 3)  # the first Ctrl-C
    replace = os.replace
    renames = []

    def replace_and_interrupt(src, dst):
        replace(src, dst)
        renames.append(os.path.basename(dst))
        if len(calls) == 3 and os.path.basename(dst) == WEIGHTS_FILE:
            os.kill(os.getpid(), signal.SIGINT)  # the second Ctrl-C, mid-save

    monkeypatch.setattr(ck_module.os, "replace", replace_and_interrupt)
    code, stdout, err = _main(
        [
            *TINY, "--text", text_file, "--steps", "8", "--eval-interval", "2",
            "--sample-tokens", "0", "--out", str(tmp_path),
        ],
        capsys,
    )  # fmt: skip
    assert code == 130, err
    assert renames.count(WEIGHTS_FILE) == 2 and renames[-1] == "checkpoint.json"
    assert "interrupted: checkpoint of step 3 saved" in stdout and "done:" not in stdout
    monkeypatch.undo()
    ck = load_checkpoint(
        str(tmp_path), load_tensors=lambda p: seam.load_tensors(p, "cpu")
    )  # the digests of checkpoint.json match the weight and optimizer files
    assert ck.meta["step"] == 3
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]


@needs_model
def test_a_second_ctrl_c_outside_a_save_stops_at_once(tmp_path, text_file, capsys, monkeypatch):
    _ctrl_c_in_step(monkeypatch, 3, times=2)  # the second one stops step 3 itself
    code, stdout, err = _main(
        [
            *TINY, "--text", text_file, "--steps", "8", "--eval-interval", "2",
            "--out", str(tmp_path),
        ],
        capsys,
    )  # fmt: skip
    assert code == 130, err
    said = f"interrupted again: stopped after step 2; the checkpoint in {tmp_path} is at step 2"
    assert said in stdout
    assert "done:" not in stdout and "--- sample" not in stdout
    assert json.loads((tmp_path / "checkpoint.json").read_text())["step"] == 2


@needs_model
@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a child process is POSIX")
def test_ctrl_c_in_a_terminal_run_saves_stops_and_resumes(tmp_path, text_file, capsys):
    # What a user does: start the demo, press Ctrl-C after the first progress line, resume.
    import re
    import signal

    out = tmp_path / "run"
    argv = [*TINY, "--text", text_file, "--steps", "100000", "--log-interval", "1", "--out"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "ignis_autograd.demo", *argv, str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_demo_env(),
    )
    try:
        lines = []
        for line in proc.stdout:  # the header, then the first progress line
            lines.append(line)
            if line.startswith("step "):
                break
        assert lines and lines[-1].startswith("step "), "".join(lines) + proc.stderr.read()
        proc.send_signal(signal.SIGINT)
        rest, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stdout = "".join(lines) + rest
    assert proc.returncode == 130, (stdout, err)
    assert "Traceback" not in err, err
    found = re.search(r"interrupted: checkpoint of step (\d+) saved in (.+); continue with", rest)
    assert found, stdout
    step = int(found.group(1))
    assert found.group(2) == str(out)
    assert "done:" not in rest and "--- sample" not in rest
    assert not (out / "sample.txt").exists()
    meta = json.loads((out / "checkpoint.json").read_text())
    assert meta["step"] == step and [s for s, _ in meta["history"]["train"]] == list(
        range(1, step + 1)
    )
    # --resume continues from there
    code, stdout, err = _main(
        [*TINY, "--text", text_file, "--out", str(out), "--resume", "--steps", str(step + 2)],
        capsys,
    )
    assert code == 0, err
    assert f"resuming from step {step} in {out}" in stdout
    assert f"done: step {step + 2}/{step + 2}" in stdout
    meta = json.loads((out / "checkpoint.json").read_text())
    assert [s for s, _ in meta["history"]["train"]] == list(range(1, step + 3))


@needs_model
def test_prompt_outside_vocabulary_fails_before_training(tmp_path, text_file, capsys):
    code, stdout, err = _main(
        [*TINY, "--text", text_file, "--steps", "2", "--prompt", "Zebra!", "--out", str(tmp_path)],
        capsys,
    )
    assert code == 1 and "--prompt" in err and "not in the text's vocabulary" in err
    assert not (tmp_path / "checkpoint.json").exists()


@needs_model
def test_a_longer_run_learns_the_text(tmp_path, text_file, capsys):
    code, _, err = _main(
        [
            *TINY,
            "--text",
            text_file,
            "--steps",
            "60",
            "--dim",
            "32",
            "--eval-interval",
            "60",
            "--sample-tokens",
            "0",
            "--quiet",
            "--out",
            str(tmp_path),
        ],
        capsys,
    )
    assert code == 0, err
    meta = json.loads((tmp_path / "checkpoint.json").read_text())
    uniform = math.log(len(meta["vocab"]))
    val = meta["history"]["val"][-1][1]
    # the words repeat: far below a uniform guess (about 2.9 nats here)
    assert val < uniform - 0.8, (val, uniform)


# --- on the GPU ----------------------------------------------------------------------------------

GPU_TINY = [a if a != "cpu" else "cuda" for a in TINY]


@needs_model
@pytest.mark.gpu
def test_gpu_run_agrees_with_the_cpu_run(tmp_path, text_file, capsys):
    # The same seed gives the same initial weights and batches on both devices (the Philox
    # streams are device independent), so the loss curves agree up to rounding.
    common = ["--text", text_file, "--steps", "6", "--sample-tokens", "20", "--quiet", "--no-tf32"]
    assert _main([*TINY, *common, "--out", str(tmp_path / "cpu")], capsys)[0] == 0
    code, _, err = _main([*GPU_TINY, *common, "--out", str(tmp_path / "gpu")], capsys)
    assert code == 0, err
    a = json.loads((tmp_path / "cpu" / "checkpoint.json").read_text())
    b = json.loads((tmp_path / "gpu" / "checkpoint.json").read_text())
    la = np.array([v for _, v in a["history"]["train"]])
    lb = np.array([v for _, v in b["history"]["train"]])
    np.testing.assert_allclose(lb, la, rtol=2e-3, atol=2e-3)
    assert b["device"] == "cuda:0"
    assert len((tmp_path / "gpu" / "sample.txt").read_text(encoding="utf-8")) == 21


@needs_model
@pytest.mark.gpu
def test_gpu_resume_continues_the_run(tmp_path, text_file, capsys):
    common = [
        *GPU_TINY,
        "--text",
        text_file,
        "--steps",
        "8",
        "--dropout",
        "0.1",
        "--sample-tokens",
        "0",
        "--quiet",
    ]
    assert _main([*common, "--out", str(tmp_path / "whole")], capsys)[0] == 0
    assert _main([*common, "--out", str(tmp_path / "parts"), "--stop-at", "4"], capsys)[0] == 0
    code, _, err = _main([*common, "--out", str(tmp_path / "parts"), "--resume"], capsys)
    assert code == 0, err
    a = json.loads((tmp_path / "whole" / "checkpoint.json").read_text())
    b = json.loads((tmp_path / "parts" / "checkpoint.json").read_text())
    assert a["rng"] == b["rng"] and a["step"] == b["step"] == 8
    # GPU reductions may use atomics: equal up to rounding rather than bit for bit
    np.testing.assert_allclose(
        [v for _, v in b["history"]["train"]],
        [v for _, v in a["history"]["train"]],
        rtol=1e-4,
        atol=1e-5,
    )
    wa = _load_weights(str(tmp_path / "whole" / "checkpoint.safetensors"))
    wb = _load_weights(str(tmp_path / "parts" / "checkpoint.safetensors"))
    for k in wa:
        np.testing.assert_allclose(wb[k], wa[k], rtol=1e-4, atol=1e-5, err_msg=k)


@needs_model
@pytest.mark.gpu
def test_gpu_bfloat16_run(tmp_path, text_file, capsys):
    code, stdout, err = _main(
        [
            *GPU_TINY,
            "--text",
            text_file,
            "--steps",
            "30",
            "--dim",
            "32",
            "--dtype",
            "bfloat16",
            "--sample-tokens",
            "30",
            "--out",
            str(tmp_path),
        ],
        capsys,
    )
    assert code == 0, err
    assert "cuda:0, bfloat16" in stdout
    meta = json.loads((tmp_path / "checkpoint.json").read_text())
    losses = [v for _, v in meta["history"]["train"]]
    assert all(math.isfinite(v) for v in losses)
    assert np.mean(losses[-5:]) < losses[0] - 0.3  # it learns in bfloat16 too
    from ignis_autograd import nn

    weights = nn.load(str(tmp_path / "checkpoint.safetensors"), device="cpu")
    assert weights["tok_emb.weight"].dtype.name == "bfloat16"


# --- nanoGPT's settings: beta2, 2-D weight decay, no biases, exact GELU, evaluation, metrics ---


def _cfg(argv):
    args = cli.build_parser().parse_args(["--device", "cpu", *argv])
    return cli._config(args, "cpu")[0]


def test_new_flags_default_to_todays_run():
    cfg = _cfg([])
    assert cfg.beta2 == 0.999 and cfg.bias is True and cfg.activation == "gelu_tanh"
    assert cfg.decay_1d is False  # decay on 2-D tensors only is the default
    cfg = _cfg(["--beta2", "0.99", "--no-bias", "--activation", "gelu", "--weight-decay", "0.2"])
    assert (cfg.beta2, cfg.bias, cfg.activation, cfg.weight_decay) == (0.99, False, "gelu", 0.2)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--beta2", "1"], "--beta2 must be less than 1"),
        (["--beta2", "-0.5"], "--beta2: must be >= 0.0 and <= 1.0, got -0.5"),
        (["--activation", "relu"], "invalid choice: 'relu'"),
        (["--preset", "gpt2"], "invalid choice: 'gpt2'"),
    ],
)
def test_new_bad_flags_exit_2(argv, message, capsys):
    err = _bad_flag(["--device", "cpu", *argv], capsys)
    assert "ignis-demo: error:" in err and message in err


def test_preset_shakespeare_char_is_nanogpts_config():
    cfg = _cfg(["--preset", "shakespeare_char"])
    assert (cfg.n_layers, cfg.n_heads, cfg.dim, cfg.context, cfg.batch_size) == (6, 6, 384, 256, 64)
    assert (cfg.dropout, cfg.bias, cfg.activation) == (0.2, False, "gelu")
    assert (cfg.lr, cfg.min_lr, cfg.beta2, cfg.weight_decay, cfg.grad_clip) == (
        1e-3,
        1e-4,
        0.99,
        0.1,
        1.0,
    )
    assert (cfg.warmup_steps, cfg.steps, cfg.eval_interval, cfg.eval_batches) == (
        100,
        5000,
        250,
        200,
    )
    assert cfg.decay_1d is False and cfg.dtype == "float32"  # float32 on the CPU
    from ignis_autograd.demo.config import preset_config

    assert preset_config("shakespeare_char", "cuda").dtype == "bfloat16"
    with pytest.raises(ValueError, match="unknown preset 'x'"):
        preset_config("x", "cpu")
    # flags beside the preset win; a shorter run fits warm-up and intervals to its length
    cfg = _cfg(["--preset", "shakespeare_char", "--layers", "2", "--steps", "100"])
    assert cfg.n_layers == 2 and cfg.warmup_steps == 10 and cfg.eval_interval == 100
    assert cfg.dim == 384


@needs_model
def test_model_and_optimizer_follow_the_flags():
    from ignis_autograd.demo import model as seam

    cfg = _cfg(["--dim", "16", "--heads", "2", "--layers", "1", "--context", "8"])
    ignis.random.seed(0)
    m = seam.build_model(cfg, 11, "cpu")
    names = [n for n, _ in m.named_parameters()]
    assert any(n.endswith(".bias") for n in names)
    assert m.blocks[0].mlp.act.approximate == "tanh"
    opt, _ = seam.build_optimizer(m, cfg)
    decay, rest = opt.param_groups
    assert decay["weight_decay"] == cfg.weight_decay and rest["weight_decay"] == 0.0
    assert all(p.ndim >= 2 for p in decay["params"]) and all(p.ndim < 2 for p in rest["params"])
    assert len(decay["params"]) + len(rest["params"]) == len(names)
    assert decay["betas"] == (0.9, 0.999)

    cfg = _cfg(
        [
            "--dim",
            "16",
            "--heads",
            "2",
            "--layers",
            "1",
            "--context",
            "8",
            "--no-bias",
            "--activation",
            "gelu",
            "--beta2",
            "0.99",
        ]
    )
    m = seam.build_model(cfg, 11, "cpu")
    names = [n for n, _ in m.named_parameters()]
    assert not any(n.endswith(".bias") for n in names)  # linear layers and LayerNorms
    assert m.blocks[0].mlp.act.approximate == "none"
    opt, _ = seam.build_optimizer(m, cfg)
    assert [g["betas"] for g in opt.param_groups] == [(0.9, 0.99)] * 2
    # decay_1d (how checkpoints from before the split were trained): one group decays all
    from dataclasses import replace

    opt, _ = seam.build_optimizer(m, replace(cfg, decay_1d=True))
    assert len(opt.param_groups) == 1 and opt.param_groups[0]["weight_decay"] == 0.1


@needs_model
def test_weight_decay_leaves_1d_parameters_alone():
    # With zero gradients Adam's step is zero: only the decay, p *= 1 - lr * wd, moves one.
    from ignis_autograd.demo import model as seam

    cfg = _cfg(
        [
            "--dim",
            "16",
            "--heads",
            "2",
            "--layers",
            "1",
            "--context",
            "8",
            "--weight-decay",
            "0.5",
            "--lr",
            "0.1",
            "--min-lr",
            "0.1",
        ]
    )
    ignis.random.seed(0)
    m = seam.build_model(cfg, 11, "cpu")
    opt, _ = seam.build_optimizer(m, cfg)
    params = dict(m.named_parameters())
    before = {n: np.array(p.data.to_host()) for n, p in params.items()}
    for p in params.values():
        p.grad = ignis.zeros(p.shape, dtype=p.dtype, device="cpu")
    lr = opt.param_groups[0]["lr"]  # the schedule's first (warm-up) value
    assert lr > 0
    opt.step()
    for n, p in params.items():
        after = np.asarray(p.data.to_host())
        if p.ndim >= 2:
            np.testing.assert_allclose(after, before[n] * (1 - lr * 0.5), rtol=1e-6, err_msg=n)
        else:
            np.testing.assert_array_equal(after, before[n], err_msg=n)


@needs_model
def test_bfloat16_loss_is_float32():
    from dataclasses import replace

    from ignis_autograd.demo import model as seam

    cfg = replace(
        _cfg(["--dim", "16", "--heads", "2", "--layers", "1", "--context", "8"]), dtype="bfloat16"
    )
    ignis.random.seed(0)
    m = seam.build_model(cfg, 11, "cpu")
    ids = np.random.default_rng(0).integers(0, 11, size=(2, 9))
    loss = seam.loss_of(m, ids[:, :-1], ids[:, 1:], "cpu")
    assert loss.dtype == ignis.float32 and m.tok_emb.weight.dtype == ignis.bfloat16
    loss.backward()
    assert np.isfinite(np.asarray(m.tok_emb.weight.grad.to_host(), dtype=np.float64)).all()


@needs_model
def test_evaluation_draws_fresh_batches_of_both_splits(text_file, monkeypatch):
    from ignis_autograd.demo import data as data_mod
    from ignis_autograd.demo.train import Trainer

    cfg = _cfg(
        [
            "--dim",
            "16",
            "--heads",
            "2",
            "--layers",
            "1",
            "--context",
            "8",
            "--eval-batches",
            "3",
            "--batch-size",
            "2",
        ]
    )
    text = _text()
    vocab = CharVocab.from_text(text)
    ds = CharDataset(vocab.encode(text), cfg.context)
    tr = Trainer(cfg, vocab, ds, "cpu", {"source": "t", "digest": "d"})
    drawn = []
    batch = data_mod.CharDataset.batch

    def spy(self, split, n, gen):
        x, y = batch(self, split, n, gen)
        drawn.append((split, x.tobytes()))
        return x, y

    monkeypatch.setattr(data_mod.CharDataset, "batch", spy)
    val0 = tr.evaluate(seconds=1.5)
    first = list(drawn)
    assert [s for s, _ in first] == ["train"] * 3 + ["val"] * 3
    drawn.clear()
    assert tr.evaluate() == val0 and drawn == first  # the same step: the same batches
    drawn.clear()
    tr.step = 1
    tr.evaluate()
    assert all(a != b for a, b in zip(drawn, first, strict=True))  # another step: fresh ones
    (s0, t0, v0, sec0), _, (s1, _, _, _) = tr.history["eval"]
    assert (s0, s1, sec0, v0) == (0, 1, 1.5, val0) and math.isfinite(t0)
    assert [s for s, _ in tr.history["val"]] == [0, 0, 1]
    assert tr.batches.get_state() == (cfg.seed + 1, 0)  # training's stream untouched


@needs_model
def test_metrics_file_lists_every_evaluation(tmp_path, text_file, capsys):
    metrics = tmp_path / "m" / "metrics.json"
    argv = [
        *TINY,
        "--text",
        text_file,
        "--steps",
        "6",
        "--eval-interval",
        "3",
        "--sample-tokens",
        "0",
        "--out",
        str(tmp_path / "run"),
        "--metrics",
        str(metrics),
    ]
    code, stdout, err = _main(argv, capsys)
    assert code == 0, err
    doc = json.loads(metrics.read_text())
    assert [e["step"] for e in doc["evals"]] == [3, 6]
    for e in doc["evals"]:
        assert set(e) == {"step", "train_loss", "val_loss", "seconds"}
        assert math.isfinite(e["train_loss"]) and math.isfinite(e["val_loss"])
        assert e["seconds"] > 0
    assert doc["evals"][0]["seconds"] < doc["evals"][1]["seconds"]
    assert doc["ms_per_step_median"] > 0 and doc["steps_timed"] == 6
    assert "train-split loss" in stdout and "held-out loss" in stdout
    assert f"metrics in {metrics}" in stdout
    meta = json.loads((tmp_path / "run" / "checkpoint.json").read_text())
    assert meta["history"]["val"][-1][1] == doc["evals"][-1]["val_loss"]
    # a resumed run continues the list and the training time
    code, _, err = _main([*argv, "--steps", "9", "--resume"], capsys)
    assert code == 0, err
    doc2 = json.loads(metrics.read_text())
    assert [e["step"] for e in doc2["evals"]] == [3, 6, 9]
    assert doc2["evals"][:2] == doc["evals"]
    assert doc2["evals"][2]["seconds"] > doc["evals"][1]["seconds"]


@needs_model
def test_no_bias_gelu_beta2_run_and_resume(tmp_path, text_file, capsys):
    common = [
        *TINY,
        "--text",
        text_file,
        "--sample-tokens",
        "0",
        "--quiet",
        "--out",
        str(tmp_path),
        "--no-bias",
        "--activation",
        "gelu",
        "--beta2",
        "0.99",
    ]
    assert _main([*common, "--steps", "3"], capsys)[0] == 0
    meta = json.loads((tmp_path / "checkpoint.json").read_text())
    assert meta["config"]["bias"] is False and meta["config"]["activation"] == "gelu"
    weights = _load_weights(str(tmp_path / "checkpoint.safetensors"))
    assert not any(k.endswith(".bias") for k in weights)
    code, stdout, err = _main([*common, "--steps", "5", "--resume"], capsys)
    assert code == 0 and "done: step 5/5" in stdout, err
    code, _, err = _main(
        [
            *TINY,
            "--text",
            text_file,
            "--quiet",
            "--out",
            str(tmp_path),
            "--resume",
            "--steps",
            "6",
            "--activation",
            "gelu_tanh",
        ],
        capsys,
    )
    assert code == 1 and "activation = 'gelu_tanh' differs from the checkpoint's 'gelu'" in err


@needs_model
def test_a_checkpoint_from_before_the_new_fields_resumes(tmp_path, text_file, capsys):
    # Such a checkpoint lacks beta2/bias/activation/decay_1d, the train-split evaluations and
    # the training time, and its optimizer has one group that decays every parameter.
    from ignis_autograd.demo.config import DemoConfig
    from ignis_autograd.demo.train import RunOptions, run

    cfg = DemoConfig(
        context=16,
        dim=16,
        n_layers=1,
        n_heads=2,
        batch_size=4,
        steps=3,
        warmup_steps=0,
        eval_interval=3,
        eval_batches=1,
        decay_1d=True,
    )
    run(
        cfg,
        RunOptions(
            out_dir=str(tmp_path),
            device="cpu",
            text_path=text_file,
            sample_tokens=0,
            quiet=True,
            stream=io.StringIO(),
        ),
    )
    path = tmp_path / "checkpoint.json"
    meta = json.loads(path.read_text())
    assert len(meta["optimizer"]["param_groups"]) == 1
    for key in ("beta2", "bias", "activation", "decay_1d"):
        del meta["config"][key]
    del meta["history"]["eval"], meta["train_seconds"]
    path.write_text(json.dumps(meta))
    metrics = tmp_path / "m.json"
    code, stdout, err = _main(
        [
            "--device",
            "cpu",
            "--text",
            text_file,
            "--out",
            str(tmp_path),
            "--resume",
            "--steps",
            "5",
            "--quiet",
            "--sample-tokens",
            "0",
            "--metrics",
            str(metrics),
        ],
        capsys,
    )
    assert code == 0 and "done: step 5/5" in stdout, err
    meta = json.loads(path.read_text())
    assert meta["config"]["decay_1d"] is True and meta["config"]["activation"] == "gelu_tanh"
    assert [e["step"] for e in json.loads(metrics.read_text())["evals"]] == [5]


# --- the side-by-side benchmark (benchmarks/shakespeare_char.py): its CPU paths -----------------


@needs_model
def test_shakespeare_char_benchmark_smoke_on_the_cpu(tmp_path, capsys, monkeypatch):
    import importlib.util

    path = os.path.join(_ROOT, "benchmarks", "shakespeare_char.py")
    spec = importlib.util.spec_from_file_location("shakespeare_char_bench", path)
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, bench)  # its dataclasses look themselves up
    spec.loader.exec_module(bench)
    text = tmp_path / "text.txt"
    text.write_text(_text(), encoding="utf-8")
    out = tmp_path / "rows.json"
    before = ignis.get_default_device()
    try:
        code = bench.main(
            [
                "--device",
                "cpu",
                "--text",
                str(text),
                "--steps",
                "4",
                "--layers",
                "1",
                "--dim",
                "16",
                "--heads",
                "2",
                "--context",
                "8",
                "--batch-size",
                "2",
                "--eval-batches",
                "2",
                "--eval-interval",
                "2",
                "--json",
                str(out),
                "--quiet",
            ]
        )
    finally:
        ignis.set_default_device(None)
        if ignis.get_default_device() != before:
            ignis.set_default_device(before)
    assert code == 0
    stdout = capsys.readouterr().out
    assert (
        "| contender | best held-out loss | wall s (incl. compilation) | median ms/step |" in stdout
    )
    rows = {r["name"]: r for r in json.loads(out.read_text())["rows"]}
    assert list(rows) == list(bench.CONTENDERS)
    eager = rows["ignis-eager"]
    assert [e["step"] for e in eager["evals"]] == [2, 4]
    assert math.isfinite(eager["best_val"]) and eager["ms_per_step"] > 0
    assert "CUDA graphs need a GPU" in rows["ignis-graph"]["note"]
    # the plan is shared: the same seed gives the same batches; lr_at is WarmupCosine's
    cfg = bench.build_config(SimpleArgs(steps=10), "cpu")
    plan_a, plan_b = bench.make_plan(_text(), cfg, 1), bench.make_plan(_text(), cfg, 1)
    np.testing.assert_array_equal(plan_a.train_starts, plan_b.train_starts)
    assert plan_a.eval_steps == [10] and cfg.dropout == 0.2 and cfg.dtype == "float32"
    assert bench.lr_at(0, cfg) == pytest.approx(cfg.lr / cfg.warmup_steps)
    assert bench.lr_at(cfg.steps, cfg) == cfg.min_lr


class SimpleArgs:
    """The benchmark's flags, all left out except those given."""

    def __init__(self, **given):
        for name in (
            "steps",
            "eval_interval",
            "eval_batches",
            "layers",
            "dim",
            "heads",
            "context",
            "batch_size",
            "dropout",
            "dtype",
            "seed",
        ):
            setattr(self, name, given.get(name))
