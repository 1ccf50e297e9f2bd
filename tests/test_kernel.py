"""The notebook-kernel check (machine/kernel.py), with a stand-in IPython: written once, and the try-out box, the W&B
key prompt and the side-by-side table all ask it."""

from __future__ import annotations

import sys
import types

import pytest

from tinyllama_ft.machine import kernel


def _ipython(monkeypatch, shell):
    """Install a stand-in ``IPython`` whose ``get_ipython()`` returns ``shell``; returns what ``display`` got."""
    shown = []
    module = types.ModuleType("IPython")
    module.get_ipython = lambda: shell
    display = types.ModuleType("IPython.display")
    display.HTML = lambda text: ("HTML", text)
    display.display = shown.append
    module.display = display
    monkeypatch.setitem(sys.modules, "IPython", module)
    monkeypatch.setitem(sys.modules, "IPython.display", display)
    return shown


def _kernel_shell(allow_stdin: bool):
    return types.SimpleNamespace(kernel=types.SimpleNamespace(_allow_stdin=allow_stdin))


@pytest.fixture
def no_terminal(monkeypatch):
    monkeypatch.setattr(sys, "stdin", None)  # as under papermill or CI: nobody to type at a prompt


def test_no_ipython_a_terminal_ipython_and_a_script_are_no_kernel(monkeypatch, no_terminal):
    monkeypatch.setitem(sys.modules, "IPython", None)  # `import IPython` raises ImportError
    assert kernel.jupyter_kernel() is None
    assert not kernel.in_interactive_kernel() and not kernel.can_prompt()
    _ipython(monkeypatch, None)  # IPython installed, no shell running (a script)
    assert kernel.jupyter_kernel() is None and not kernel.can_prompt()
    _ipython(monkeypatch, types.SimpleNamespace())  # terminal IPython: a shell without a kernel
    assert kernel.jupyter_kernel() is None and not kernel.in_interactive_kernel()


def test_a_notebook_kernel_is_interactive_unless_papermill_started_it(monkeypatch, no_terminal):
    shell = _kernel_shell(allow_stdin=True)
    _ipython(monkeypatch, shell)
    monkeypatch.setattr(kernel, "parent_is_papermill", lambda: False)
    assert kernel.jupyter_kernel() is shell.kernel
    assert kernel.in_interactive_kernel() and kernel.can_prompt()
    monkeypatch.setattr(kernel, "parent_is_papermill", lambda: True)
    assert not kernel.in_interactive_kernel()
    _ipython(monkeypatch, _kernel_shell(allow_stdin=False))  # papermill's kernels run with stdin disabled
    assert kernel.jupyter_kernel() is not None and not kernel.can_prompt()
    monkeypatch.setattr(kernel, "parent_is_papermill", lambda: False)  # papermill's library, in another program
    assert not kernel.in_interactive_kernel()  # issue 40: its library bars stayed on, widgets kept at 0%


def test_a_terminal_can_always_prompt(monkeypatch):
    monkeypatch.setattr(sys, "stdin", types.SimpleNamespace(isatty=lambda: True))
    monkeypatch.setitem(sys.modules, "IPython", None)
    assert kernel.can_prompt()


def test_pytest_is_no_parent_papermill():
    assert not kernel.parent_is_papermill()


def test_the_three_callers_use_the_one_check():
    from tinyllama_ft.infer import tryout
    from tinyllama_ft.train import tracking

    assert tryout.in_interactive_kernel is kernel.in_interactive_kernel
    assert tracking.can_prompt is kernel.can_prompt


def test_show_answers_displays_html_in_any_kernel_and_prints_text_elsewhere(monkeypatch, capsys):
    from tinyllama_ft.evaluate.side_by_side import show_answers

    from tinyllama_ft.evaluate.side_by_side import answers_table

    rows = [{"instruction": "Say hi.", "base": "hello", "tuned": "Hi!"}]
    _ipython(monkeypatch, _kernel_shell(allow_stdin=False))  # papermill's kernel too
    calls = []
    monkeypatch.setattr(sys.modules["IPython.display"], "display", lambda obj, **kw: calls.append((obj, kw)))
    show_answers(rows)
    [(bundle, kwargs)] = calls  # one output: the HTML table, and as its text form the Markdown table (issue 28)
    assert kwargs == {"raw": True} and "<table>" in bundle["text/html"]
    assert bundle["text/plain"] == answers_table(rows)  # what papermill --log-output shows
    assert capsys.readouterr().out == ""
    shown = _ipython(monkeypatch, types.SimpleNamespace())  # terminal IPython: text, not an HTML object's repr
    show_answers(rows)
    assert shown == [] and "Say hi." in capsys.readouterr().out
