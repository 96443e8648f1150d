"""A one-line progress bar for training: step, loss, tokens per second and time left.

Example::

    >>> bar = Progress(total=100, stream=sys.stderr)
    >>> for step in range(1, 101):
    ...     bar.update(step, loss=2.5, tokens=8192)
    >>> bar.close()

On a terminal the line redraws in place (at most ten times a second); elsewhere (a log file, a
pipe) the bar stays silent and the trainer's periodic loss lines carry the same numbers.
"""

from __future__ import annotations

import time
from typing import TextIO

__all__ = ["Progress", "format_duration"]


def format_duration(seconds: float) -> str:
    """``"1:02:03"``, ``"2:03"`` or ``"--:--"`` for an unknown duration (seconds, float)."""
    if seconds != seconds or seconds < 0 or seconds == float("inf"):
        return "--:--"
    s = int(round(seconds))
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class Progress:
    """Progress of ``total`` steps (the run may start at a later step, after a resume).

    Args:
        total: the last step number.
        start: the step the run starts from (0 for a fresh run).
        stream: where to draw; nothing is drawn when None or not a terminal (unless ``force``).
        width: characters of the bar itself.
        force: draw even when ``stream`` is not a terminal (tests).
    """

    def __init__(
        self,
        total: int,
        start: int = 0,
        stream: TextIO | None = None,
        width: int = 24,
        force: bool = False,
    ):
        self.total = total
        self.start = start
        self.step = start
        self.width = width
        self.stream = stream
        self.enabled = stream is not None and (force or _isatty(stream))
        self.t0 = time.perf_counter()
        self.tokens = 0
        self.loss = float("nan")
        self._last_draw = 0.0
        self._drawn = False

    @property
    def elapsed(self) -> float:
        """Seconds since the bar was created."""
        return time.perf_counter() - self.t0

    @property
    def tokens_per_second(self) -> float:
        e = self.elapsed
        return self.tokens / e if e > 0 else 0.0

    @property
    def eta(self) -> float:
        """Seconds left at the average pace of this run so far."""
        done = self.step - self.start
        if done <= 0:
            return float("nan")
        return self.elapsed / done * (self.total - self.step)

    def update(self, step: int, loss: float, tokens: int) -> None:
        """Record that ``step`` finished with training ``loss`` after ``tokens`` more tokens."""
        self.step = step
        self.loss = loss
        self.tokens += tokens
        now = time.perf_counter()
        if self.enabled and (now - self._last_draw >= 0.1 or step >= self.total):
            self._last_draw = now
            self._draw()

    def line(self) -> str:
        """The bar's text, e.g.
        ``[#####.....] step 50/100 loss 2.3141 | 12,345 tok/s | ETA 0:41``."""
        frac = 0.0 if self.total <= 0 else min(1.0, self.step / self.total)
        filled = int(frac * self.width)
        bar = "#" * filled + "." * (self.width - filled)
        return (
            f"[{bar}] step {self.step}/{self.total} loss {self.loss:.4f} | "
            f"{self.tokens_per_second:,.0f} tok/s | ETA {format_duration(self.eta)}"
        )

    def _draw(self) -> None:
        assert self.stream is not None
        # Clear to the end of the line: a shorter line must not leave old characters behind.
        self.stream.write("\r" + self.line() + "\x1b[K")
        self.stream.flush()
        self._drawn = True

    def clear(self) -> None:
        """Erase the bar so a log line can be printed; the next update draws it again."""
        if self.enabled and self._drawn:
            assert self.stream is not None
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self._drawn = False

    def close(self) -> None:
        """Leave the last state of the bar on its own line."""
        if self.enabled and self._drawn:
            assert self.stream is not None
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False


def _isatty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False
