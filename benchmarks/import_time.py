"""Wall time of `import numpy`, `import ignis` and `import ignis_autograd` in fresh processes.

Each import runs in a new interpreter (``python -X importtime -c "import NAME"``; the total is the
top-level module's cumulative time, so interpreter start-up is left out), the three take turns,
and each row is the median over the rounds. Byte code is written and used, as after a normal
``pip install``: one untimed run of each comes first. No GPU needed; on a GPU machine the
imports are the same (nothing touches the driver at import).

Run: ``python benchmarks/import_time.py [--rounds N]`` (with the packages installed, or
``PYTHONPATH=ignis/src:ignis_autograd/src``). Prints a Markdown table, ratios to NumPy.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys

MODULES = ("numpy", "ignis", "ignis_autograd")


def import_ms(module: str, env: dict[str, str]) -> float:
    """Milliseconds the import of ``module`` took in a fresh interpreter (``-X importtime``)."""
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"import {module}"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    pattern = re.compile(rf"^import time:\s+\d+ \|\s+(\d+) \| {re.escape(module)}$", re.M)
    found = pattern.findall(out.stderr)
    if not found:
        tail = out.stderr[-2000:]
        raise RuntimeError(f"import_time: no -X importtime line for {module}:\n{tail}")
    return int(found[-1]) / 1000.0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=15, help="fresh processes per module")
    args = parser.parse_args(argv)
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # measure what an installed package costs
    for m in MODULES:  # write the byte code once
        import_ms(m, env)
    times: dict[str, list[float]] = {m: [] for m in MODULES}
    for _ in range(args.rounds):
        for m in MODULES:
            times[m].append(import_ms(m, env))
    base = statistics.median(times["numpy"])
    print(f"import time, median of {args.rounds} fresh processes, Python {sys.version.split()[0]}")
    print()
    print("| import | ms (median) | min-max ms | / numpy |")
    print("|---|---:|---:|---:|")
    for m in MODULES:
        med, lo, hi = statistics.median(times[m]), min(times[m]), max(times[m])
        print(f"| `{m}` | {med:.0f} | {lo:.0f}-{hi:.0f} | {med / base:.2f}x |")


if __name__ == "__main__":
    main()
