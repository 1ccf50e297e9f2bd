"""Loss curve from the trainer's own log history: no account needed."""

from __future__ import annotations


def loss_curve(log_history: list[dict], path: str | None = None):
    """Plot training loss per step and ``eval_loss`` at each evaluation.

    Args:
        log_history: ``state..log_history`` (a list of dicts with ``step`` and ``loss`` or
            ``eval_loss``).
        path: also save the figure there (PNG) when given.

    Returns:
        The matplotlib ``Figure``.

    Raises:
        ValueError: the history holds no loss at all.
    """
    import matplotlib.pyplot as plt

    train = [(h["step"], h["loss"]) for h in log_history if "loss" in h and "step" in h]
    evals = [(h["step"], h["eval_loss"]) for h in log_history if "eval_loss" in h and "step" in h]
    if not train and not evals:
        raise ValueError("log_history has no 'loss' or 'eval_loss' entries to plot")
    fig, ax = plt.subplots(figsize=(7, 4))
    if train:
        ax.plot(*zip(*train), label="train loss", lw=1)
    if evals:
        ax.plot(*zip(*evals), "o-", label="eval_loss")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("cross-entropy loss (nats/token)")
    ax.set_title("Fine-tuning loss")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    if path is not None:
        from ..machine.paths import expand_path

        fig.savefig(expand_path(path), dpi=100)
    return fig
