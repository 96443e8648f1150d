"""The training demo: a small character-level GPT trained with ignis_autograd.

Run it with ``python -m ignis_autograd.demo`` (or the ``ignis-demo`` console script)::

    $ python -m ignis_autograd.demo                      # GPU if present, else a small CPU run
    $ python -m ignis_autograd.demo --device cpu --steps 100 --out run1
    $ python -m ignis_autograd.demo --out run1 --resume --steps 200

It trains on the help texts shipped with Python (or ``--text FILE``), prints progress, the
held-out loss and a generated sample, and writes ``checkpoint.safetensors``,
``checkpoint.json``, ``optimizer.safetensors``, ``sample.txt`` and (with matplotlib)
``loss.png`` into ``--out``. From Python: ``main(["--steps", "10"])`` returns the exit status.

Modules: :mod:`.cli` (flags), :mod:`.config` (settings and per-device defaults), :mod:`.data`
(text, vocabulary, batches), :mod:`.model` (the seam to ``nn`` and ``optim``), :mod:`.train`
(the loop), :mod:`.checkpoint`, :mod:`.progress`, :mod:`.plot`, :mod:`.blas` (NumPy's BLAS
on one thread during a CPU run).
"""

from __future__ import annotations

from .cli import main

__all__ = ["main"]
