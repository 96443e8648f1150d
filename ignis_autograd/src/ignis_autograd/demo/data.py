"""Training text, its character vocabulary, and seeded random batches.

Example::

    >>> import ignis
    >>> text, source = load_text(None)            # the pydoc topics shipped with Python
    >>> vocab = CharVocab.from_text(text)
    >>> data = CharDataset(vocab.encode(text), context=64)
    >>> g = ignis.random.Generator(0)
    >>> x, y = data.batch("train", 8, g)          # host int64 arrays of shape (8, 64)

Batches are drawn on the host: the window starts come from an ``ignis.random.Generator`` (so a
run is reproduced from ``(seed, offset)`` alone, on any device) and the windows are gathered
from the token array with NumPy; only the (batch, context) ids travel to the device.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["DemoError", "load_text", "CharVocab", "CharDataset", "text_digest"]

# Modules whose source stands in for the pydoc topics on an installation without pydoc_data.
_FALLBACK_MODULES = ("textwrap", "string", "argparse", "dataclasses", "functools", "inspect")


class DemoError(Exception):
    """A problem with the demo's input (flags, text, checkpoint), reported as one clear line."""


def load_text(path: str | None) -> tuple[str, str]:
    """``(text, source)``: the file ``path`` (UTF-8), or the built-in text when ``path`` is None.

    The built-in text is the help topics shipped with Python (``pydoc_data.topics``, about
    half a megabyte), joined in key order; without them, the source of a few standard-library
    modules. ``source`` names where the text came from (``"pydoc topics"``, the path, ...).
    """
    if path is not None:
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except FileNotFoundError:
            raise DemoError(f"--text: no such file: {path}") from None
        except UnicodeDecodeError as exc:
            raise DemoError(f"--text: {path} is not UTF-8 text ({exc.reason})") from None
        except OSError as exc:
            raise DemoError(f"--text: cannot read {path}: {exc.strerror}") from None
        return text, os.path.abspath(path)
    try:
        from pydoc_data.topics import topics
    except ImportError:
        return _stdlib_sources(), "standard-library sources"
    return "\n\n".join(topics[k] for k in sorted(topics)), "pydoc topics"


def _stdlib_sources() -> str:
    parts = []
    for name in _FALLBACK_MODULES:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin and spec.origin.endswith(".py"):
            with open(spec.origin, encoding="utf-8") as f:
                parts.append(f.read())
    if not parts:
        raise DemoError(
            "no built-in text found (no pydoc_data, no stdlib sources); use --text FILE"
        )
    return "\n\n".join(parts)


def text_digest(text: str) -> str:
    """A short SHA-256 of the text, stored in checkpoints so a resume sees the same data."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True)
class CharVocab:
    """The sorted set of characters of a text; token id ``i`` is ``chars[i]``."""

    chars: str

    @classmethod
    def from_text(cls, text: str) -> CharVocab:
        if not text:
            raise DemoError("the training text is empty")
        return cls("".join(sorted(set(text))))

    @property
    def size(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> np.ndarray:
        """The int64 token ids of ``text``; a character outside the vocabulary is an error."""
        codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
        table = np.frombuffer(self.chars.encode("utf-32-le"), dtype=np.uint32)
        ids = np.searchsorted(table, codes)
        ids_c = np.minimum(ids, len(table) - 1)
        bad = table[ids_c] != codes
        if bad.any():
            missing = sorted({chr(c) for c in codes[bad][:1000]})
            raise DemoError(
                f"the text has {int(bad.sum())} character(s) outside the vocabulary "
                f"(e.g. {''.join(missing[:10])!r})"
            )
        return ids_c.astype(np.int64)

    def decode(self, ids: Any) -> str:
        """The text of a sequence of token ids."""
        return "".join(self.chars[int(i)] for i in np.asarray(ids).reshape(-1))


class CharDataset:
    """Token ids split 90/10 into a training and a held-out part, with random windows.

    Args:
        ids: the whole text's token ids (1-D int64).
        context: the window length (tokens per sequence).
        held_out: the fraction at the end kept for evaluation.
    """

    def __init__(self, ids: np.ndarray, context: int, held_out: float = 0.1):
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        n_val = int(len(ids) * held_out)
        self.context = int(context)
        self.splits = {"train": ids[: len(ids) - n_val], "val": ids[len(ids) - n_val :]}
        for name, part in self.splits.items():
            # A window needs context + 1 tokens: the inputs and the next-token targets.
            if len(part) < self.context + 1:
                need = int(
                    np.ceil((self.context + 1) / (held_out if name == "val" else 1 - held_out))
                )
                raise DemoError(
                    f"the text is too short for --context {self.context}: its "
                    f"{'held-out' if name == 'val' else 'training'} part has {len(part)} tokens, "
                    f"needs at least {self.context + 1} (a text of about {need} characters or a "
                    f"smaller --context)"
                )

    def batch(self, split: str, batch_size: int, generator: Any) -> tuple[np.ndarray, np.ndarray]:
        """``(inputs, targets)``, host int64 arrays of shape ``(batch_size, context)``; the
        targets are the inputs shifted by one token. Advances ``generator``."""
        part = self.splits[split]
        starts = generator.randint(
            0, len(part) - self.context, shape=(batch_size,), device="cpu"
        ).to_host()
        rows = starts[:, None] + np.arange(self.context + 1)[None, :]
        window = part[rows]
        return window[:, :-1], window[:, 1:]
