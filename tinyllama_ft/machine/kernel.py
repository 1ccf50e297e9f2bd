"""Which front end runs this process: a Jupyter/Colab kernel (a person at it, or papermill), or a terminal.

It answers whether the try-out box is shown (``in_interactive_kernel``), a W&B key may be asked for
(``can_prompt``), HTML is displayed (``jupyter_kernel``) and the libraries' progress bars are shown
(``quiet_library_bars``). IPython is imported when installed, never required.
"""

from __future__ import annotations

import os
import sys


def jupyter_kernel():
    """The kernel this code runs in (Jupyter, Colab, a kernel papermill started), or None: no IPython installed,
    a plain script, a terminal IPython (it has a shell but no kernel)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    return getattr(get_ipython(), "kernel", None)


def parent_is_papermill() -> bool:
    """True when this process's parent is the ``papermill`` command (Linux ``/proc``; else False)."""
    try:
        with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
            return b"papermill" in f.read()
    except OSError:
        return False


def in_interactive_kernel() -> bool:
    """True in a Jupyter/Colab kernel a person can interact with: not a terminal IPython, not a kernel the papermill
    command started, nor one that runs cells with stdin disabled (nbclient's, as papermill's library runs a notebook
    from another program); a kernel that does not say is taken as interactive."""
    kernel = jupyter_kernel()
    return kernel is not None and not parent_is_papermill() and getattr(kernel, "_allow_stdin", True)


def can_prompt() -> bool:
    """True when a person can answer a prompt: stdin is a terminal, or a notebook front end that
    allows input (Colab, Jupyter), but not papermill (its kernels run with stdin disabled)."""
    if sys.stdin is not None and sys.stdin.isatty():
        return True
    kernel = jupyter_kernel()
    return bool(kernel is not None and getattr(kernel, "_allow_stdin", False))


def quiet_library_bars() -> None:
    """Turn off datasets' bars (``Map``, ``Packing train dataset``) and transformers' (``Loading weights``) in this
    process, outside an interactive notebook: a command or a papermill run prints its own lines (rows kept and
    dropped, one line per step), and there a bar's ``\\r`` redraws garble a pipe or a log, or, under papermill, a
    widget bar is kept stuck at 0%. A person's notebook keeps them; Hub downloads keep their bars, and
    ``HF_DATASETS_DISABLE_PROGRESS_BARS=0`` keeps datasets' (datasets gives that variable the last word).
    datasets is not imported for this (it brings pandas and pyarrow, seconds the data cell pays when it needs them):
    until it is, that variable, set to 1 where unset, turns its bars off as it imports.
    """
    if in_interactive_kernel():
        return
    import huggingface_hub.utils
    from transformers.utils import logging

    hub_bars = not huggingface_hub.utils.are_progress_bars_disabled()
    logging.disable_progress_bar()  # transformers' own bars; it turns off the Hub's too
    if hub_bars:
        huggingface_hub.utils.enable_progress_bars()
    if os.environ.get("HF_DATASETS_DISABLE_PROGRESS_BARS", "").strip() != "0":
        if "datasets" in sys.modules:
            sys.modules["datasets"].disable_progress_bars()
        else:
            os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
