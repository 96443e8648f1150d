"""The loss curve as a PNG, when matplotlib is installed (it is optional: no new dependency).

Example::

    >>> plot_losses([(1, 4.2), (2, 3.9)], [(2, 4.0)], "out/loss.png")
    True
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["plot_losses", "matplotlib_available"]


def matplotlib_available() -> bool:
    """True when matplotlib can be imported."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def plot_losses(
    train: Sequence[tuple[int, float]], held_out: Sequence[tuple[int, float]], path: str
) -> bool:
    """Draw training and held-out loss (nats per token) against the step; write ``path``.

    Returns False, writing nothing, when matplotlib is not installed.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display needed; must precede pyplot
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(7, 4), dpi=120)
    try:
        if train:
            ax.plot([s for s, _ in train], [v for _, v in train], lw=0.8, label="training")
        if held_out:
            ax.plot(
                [s for s, _ in held_out], [v for _, v in held_out], "o-", lw=1.5, label="held-out"
            )
        ax.set_xlabel("step")
        ax.set_ylabel("cross-entropy (nats / token)")
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(path)
    finally:
        plt.close(fig)
    return True
