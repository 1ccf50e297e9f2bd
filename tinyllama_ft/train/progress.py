"""One printed line per logging step during training: step, loss, learning rate, tokens/s.

A papermill run shows a notebook's output only when the cell ends (``--log-output`` forwards what a cell
prints as it prints it); a progress bar is one ``Executing: 69%`` line there. ``ProgressPrinter`` prints
plain lines instead, which reach the terminal under ``papermill --log-output`` and the command line alike.
"""

from __future__ import annotations

import time

from transformers import TrainerCallback


class ProgressPrinter(TrainerCallback):
    """Prints ``step N/M  loss X  lr Y  tokens/s Z`` at every logging step, and the eval loss when evaluated.

    tokens/s is over the time since the previous line (non-padding tokens fed to the model, transformers'
    ``num_input_tokens_seen``), evaluation time included when an evaluation ran in between; left out where the
    trainer counts no tokens (``include_num_input_tokens_seen="no"``: ORPO, whose batches hold no ``input_ids``).
    """

    def __init__(self) -> None:
        self._last: tuple[float, int] | None = None

    def on_train_begin(self, args, state, control, **kwargs):
        self._last = (time.perf_counter(), state.num_input_tokens_seen)

    def tokens_per_second(self, state) -> float:
        """Tokens (``state.num_input_tokens_seen``) per second since the previous call (or the start of training)."""
        now, tokens = time.perf_counter(), state.num_input_tokens_seen
        then, before = self._last or (now, tokens)
        self._last = (now, tokens)
        return (tokens - before) / (now - then) if now > then else 0.0

    def on_log(self, args, state, control, logs=None, **kwargs):
        logs = logs or {}
        if "loss" in logs:
            rate = self.tokens_per_second(state)
            counted = getattr(args, "include_num_input_tokens_seen", "no") not in ("no", False)
            print(
                f"step {state.global_step}/{state.max_steps}  loss {logs['loss']:.4f}  "
                f"lr {logs.get('learning_rate', 0.0):.3g}" + (f"  tokens/s {rate:,.0f}" if counted else ""),
                flush=True,
            )
        if "eval_loss" in logs:
            where = f"step {state.global_step}/{state.max_steps}" if state.global_step else "before training"
            print(f"{where}  eval_loss {logs['eval_loss']:.4f}", flush=True)
