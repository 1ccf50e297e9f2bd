"""Loss curve from the trainer's own log history: no account needed. In a notebook it is shown as an image whose
text form (what papermill's log and a terminal show) is one line naming the file, not ``<Figure size ...>``."""

from __future__ import annotations


def loss_curve(log_history: list[dict], path: str | None = None):
    """Plot training loss per step and ``eval_loss`` at each evaluation.

    Args:
        log_history: ``state..log_history`` (a list of dicts with ``step`` and ``loss`` or
            ``eval_loss``).
        path: also save the figure there (PNG) when given.

    In a Jupyter or Colab kernel (papermill's too) the figure is displayed here, once, as a PNG whose text form is
    ``loss curve: N training steps, M evaluations (path)``; pyplot no longer holds it (it is not shown again).

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
    from ..machine.kernel import jupyter_kernel

    if jupyter_kernel() is not None:
        import base64
        import io

        from IPython.display import display

        png = io.BytesIO()
        fig.savefig(png, format="png", dpi=100)
        where = f" ({path})" if path is not None else ""
        counts = [
            f"{n} {what}{'s' * (n != 1)}" for n, what in ((len(train), "training step"), (len(evals), "evaluation"))
        ]
        text = f"loss curve: {', '.join(counts)}{where}"
        display({"image/png": base64.b64encode(png.getvalue()).decode("ascii"), "text/plain": text}, raw=True)
        plt.close(fig)  # the inline backend would show it again at the cell's end, as <Figure size 700x400 ...>
    return fig
