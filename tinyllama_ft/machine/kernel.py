"""Which front end runs this process: a Jupyter/Colab kernel (a person at it, or papermill), or a terminal.

It answers whether the try-out box is shown (``in_interactive_kernel``), a W&B key may be asked for
(``can_prompt``) and HTML is displayed (``jupyter_kernel``). IPython is imported when installed, never required.
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
    """True in a Jupyter/Colab kernel a person can interact with (not in a terminal IPython or under papermill)."""
    return jupyter_kernel() is not None and not parent_is_papermill()


def can_prompt() -> bool:
    """True when a person can answer a prompt: stdin is a terminal, or a notebook front end that
    allows input (Colab, Jupyter), but not papermill (its kernels run with stdin disabled)."""
    if sys.stdin is not None and sys.stdin.isatty():
        return True
    kernel = jupyter_kernel()
    return bool(kernel is not None and getattr(kernel, "_allow_stdin", False))
