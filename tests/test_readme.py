"""The README's code blocks do what the README says they do.

Convention (stated once in README.md, under "Quick start"): a ```python block runs as pasted,
on the CPU when there is no GPU, unless its first line is ``# Needs a CUDA GPU.`` (it runs as
pasted on a machine with one) or ``# Fragment: <what it assumes>`` (it is not run).

Each block is one test case, named after the heading above it and its index under that heading
and the device it runs on (``quick-start-1-cpu``). It runs in a fresh interpreter, in a
temporary directory, from a file named README.md padded so that a traceback's
``README.md", line N`` is the README's own line N:

- an unmarked block runs with ``IGNIS_DEVICE=cpu``, and again on the default device (the GPU)
  where one is available (that case carries the ``gpu`` marker);
- a ``# Needs a CUDA GPU.`` block runs on the default device, only where a GPU is available;
- a fragment is only compiled (syntax), then skipped.

A block with neither marker that does not run fails, so the convention stays true. The
```bash blocks are checked cheaply: the demo's flags parse, and the paths, requirement files
and extras that ``pip install`` names exist.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import ignis
import ignis_autograd

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

GPU_MARKER = "# Needs a CUDA GPU."
FRAGMENT_MARKER = "# Fragment:"
BLOCK_TIMEOUT_S = 300

_FENCE_OPEN = re.compile(r"^(?P<indent> *)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`\s]*)[^`]*$")
_HEADING = re.compile(r"^#{1,6}\s+(?P<title>.+?)\s*#*\s*$")
# A first line that looks like an attempt at a marker but is not exactly one.
_MARKER_LIKE = re.compile(r"^#\s*(needs\b|fragment\b|requires\b|gpu\b)", re.IGNORECASE)


@dataclass(frozen=True)
class Block:
    lang: str
    code: str  # with the fence's indentation removed
    line: int  # README line (1-based) of the block's first code line
    end_line: int  # README line of the closing fence
    heading: str
    index: int  # 1-based, among the blocks of this language under the same heading

    @property
    def first_line(self) -> str:
        for ln in self.code.splitlines():
            if ln.strip():
                return ln.strip()
        return ""

    @property
    def kind(self) -> str:
        """'runnable', 'gpu', 'fragment', or 'malformed' (a marker spelt wrong)."""
        first = self.first_line
        if first == GPU_MARKER:
            return "gpu"
        if first.startswith(FRAGMENT_MARKER) and first[len(FRAGMENT_MARKER) :].strip():
            return "fragment"
        if _MARKER_LIKE.match(first):
            return "malformed"
        return "runnable"

    @property
    def id(self) -> str:
        slug = re.sub(r"[^a-z0-9._]+", "-", self.heading.lower()).strip("-") or "top"
        return f"{slug}-{self.index}"

    def where(self) -> str:
        return f"README.md lines {self.line}-{self.end_line - 1} (under {self.heading!r})"


def parse_blocks(text: str) -> list[Block]:
    """Fenced code blocks of a Markdown text, with the heading each one sits under."""
    blocks: list[Block] = []
    counts: dict[tuple[str, str], int] = {}
    heading = "top"
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = _FENCE_OPEN.match(lines[i])
        if m is None:
            h = _HEADING.match(lines[i])
            if h is not None:
                heading = h.group("title").replace("`", "")
            i += 1
            continue
        indent, fence, lang = len(m.group("indent")), m.group("fence"), m.group("info").lower()
        close = re.compile(rf"^ *{re.escape(fence[0])}{{{len(fence)},}}\s*$")
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not close.match(lines[j]):
            ln = lines[j]
            body.append(ln[min(indent, len(ln) - len(ln.lstrip(" "))) :])
            j += 1
        key = (heading, lang)
        counts[key] = counts.get(key, 0) + 1
        blocks.append(Block(lang, "\n".join(body) + "\n", i + 2, j + 1, heading, counts[key]))
        i = j + 1
    return blocks


BLOCKS = parse_blocks(README.read_text(encoding="utf-8"))
PYTHON_BLOCKS = [b for b in BLOCKS if b.lang in ("python", "py", "python3")]
BASH_BLOCKS = [b for b in BLOCKS if b.lang in ("bash", "sh", "shell", "console")]


def _python_cases() -> list:
    cases = []
    for b in PYTHON_BLOCKS:
        if b.kind == "runnable":
            cases.append(pytest.param(b, "cpu", id=f"{b.id}-cpu"))
            cases.append(pytest.param(b, "default", id=f"{b.id}-gpu", marks=pytest.mark.gpu))
        elif b.kind == "gpu":
            cases.append(pytest.param(b, "default", id=f"{b.id}-gpu", marks=pytest.mark.gpu))
        else:
            cases.append(pytest.param(b, b.kind, id=f"{b.id}-{b.kind}"))
    return cases


def _subprocess_env(device: str) -> dict[str, str]:
    env = dict(os.environ)
    # The packages as this test imported them (a source tree or an install), with absolute paths:
    # the block runs in a temporary directory.
    paths = [str(Path(m.__file__).resolve().parents[1]) for m in (ignis, ignis_autograd)]
    paths += [str(Path(p).resolve()) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    if device == "cpu":
        env["IGNIS_DEVICE"] = "cpu"
    else:
        env.pop("IGNIS_DEVICE", None)
    return env


def _run_block(block: Block, device: str, tmp_path: Path) -> None:
    # Blank lines in front keep the README's line numbers in tracebacks.
    script = tmp_path / "README.md"
    script.write_text("\n" * (block.line - 1) + block.code, encoding="utf-8")
    try:
        proc = subprocess.run(
            [sys.executable, str(script)],
            cwd=tmp_path,
            env=_subprocess_env(device),
            capture_output=True,
            text=True,
            timeout=BLOCK_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{block.where()} ran longer than {BLOCK_TIMEOUT_S} s on device {device!r}")
    if proc.returncode != 0:
        pytest.fail(
            f"{block.where()} failed on device {device!r} (exit status {proc.returncode}).\n"
            "A block that cannot run as pasted must start with "
            f"{GPU_MARKER!r} or {FRAGMENT_MARKER!r} (see the README's Quick start).\n"
            f"--- stderr ---\n{proc.stderr[-6000:]}\n--- stdout ---\n{proc.stdout[-2000:]}",
            pytrace=False,
        )


def test_readme_states_the_convention() -> None:
    text = README.read_text(encoding="utf-8")
    assert f"`{GPU_MARKER}`" in text and f"`{FRAGMENT_MARKER}" in text, (
        "README.md must state the code-block convention (the two markers) once"
    )
    assert "tests/test_readme.py" in text
    assert len(PYTHON_BLOCKS) >= 10, f"found only {len(PYTHON_BLOCKS)} python blocks"
    quick = [b for b in PYTHON_BLOCKS if b.heading == "Quick start"]
    assert quick and all(b.kind == "runnable" for b in quick), "Quick start must run anywhere"


def test_every_python_block_compiles() -> None:
    """Syntax of every block, GPU-only ones and fragments included (cheap, needs no GPU)."""
    errors = []
    for b in PYTHON_BLOCKS:
        try:
            compile("\n" * (b.line - 1) + b.code, "README.md", "exec")
        except SyntaxError as e:
            errors.append(f"{b.id} ({b.where()}): {e}")
    assert not errors, "\n".join(errors)


@pytest.mark.parametrize(("block", "device"), _python_cases())
def test_python_block(block: Block, device: str, tmp_path: Path) -> None:
    if block.kind == "malformed":
        pytest.fail(
            f"{block.where()}: first line {block.first_line!r} looks like a marker but is "
            f"neither {GPU_MARKER!r} nor {FRAGMENT_MARKER!r} followed by what it assumes",
            pytrace=False,
        )
    if block.kind == "fragment":
        pytest.skip(f"fragment: {block.first_line[len(FRAGMENT_MARKER) :].strip()}")
    _run_block(block, device, tmp_path)


# --- bash blocks ----------------------------------------------------------------------------


def _commands(code: str) -> list[list[str]]:
    """Simple commands of a shell snippet: split on newlines, &&, ||, ; and |; comments dropped."""
    out: list[list[str]] = []
    for line in code.splitlines():
        lex = shlex.shlex(line, posix=True, punctuation_chars=True)
        lex.whitespace_split = True
        cmd: list[str] = []
        for tok in lex:
            if tok in ("&&", "||", ";", "|", "&"):
                if cmd:
                    out.append(cmd)
                cmd = []
            else:
                cmd.append(tok)
        if cmd:
            out.append(cmd)
    return out


def _check_demo_args(argv: list[str]) -> str | None:
    from ignis_autograd.demo.cli import build_parser

    parser = build_parser()
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            parser.parse_args(argv)
    except SystemExit as e:
        if e.code not in (0, None):
            return f"ignis-demo {' '.join(argv)}: {buf.getvalue().strip()}"
    return None


def _extras(project_dir: Path) -> set[str] | None:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        return None
    data = tomllib.loads((project_dir / "pyproject.toml").read_text(encoding="utf-8"))
    return set(data.get("project", {}).get("optional-dependencies", {}))


def _check_pip_install(args: list[str]) -> list[str]:
    problems = []
    it = iter(args)
    for a in it:
        if a in ("-r", "--requirement"):
            req = next(it, "")
            if not (ROOT / req).is_file():
                problems.append(f"pip install -r {req}: no such file in the repository")
        elif a.startswith("."):
            m = re.fullmatch(r"(?P<path>[^\[]+)(\[(?P<extras>[^\]]*)\])?", a)
            assert m is not None
            path = ROOT / m.group("path")
            if not (path / "pyproject.toml").is_file():
                problems.append(f"pip install {a}: {m.group('path')} is not a project folder")
                continue
            known = _extras(path)
            for extra in filter(None, (m.group("extras") or "").split(",")):
                if known is not None and extra.strip() not in known:
                    problems.append(f"pip install {a}: {path.name} has no extra {extra!r}")
    return problems


@pytest.mark.parametrize("block", [pytest.param(b, id=b.id) for b in BASH_BLOCKS])
def test_bash_block(block: Block) -> None:
    problems: list[str] = []
    for cmd in _commands(block.code):
        if cmd[0] == "ignis-demo":
            problems.append(_check_demo_args(cmd[1:]))
        elif cmd[0].startswith("python") and cmd[1:3] == ["-m", "ignis_autograd.demo"]:
            problems.append(_check_demo_args(cmd[3:]))
        elif cmd[0] == "pip" and cmd[1:2] == ["install"]:
            problems += _check_pip_install(cmd[2:])
        elif cmd[0].startswith("scripts/"):
            if not (ROOT / cmd[0]).is_file():
                problems.append(f"{cmd[0]}: no such script")
    problems = [p for p in problems if p]
    assert not problems, f"{block.where()}:\n" + "\n".join(problems)


def test_parse_blocks_reads_indented_fences_and_headings() -> None:
    text = (
        "# A\n```python\nx = 1\n```\n## B `c`\n- item\n\n  ```python\n  # Fragment: y\n"
        "  y + 1\n  ```\n"
    )
    a, b = parse_blocks(text)
    assert (a.heading, a.index, a.line, a.kind, a.code) == ("A", 1, 3, "runnable", "x = 1\n")
    assert (b.heading, b.id, b.line, b.kind) == ("B c", "b-c-1", 9, "fragment")
    assert b.code == "# Fragment: y\ny + 1\n"
    assert Block("python", "# needs a gpu\n", 1, 2, "h", 1).kind == "malformed"
