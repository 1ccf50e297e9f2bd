"""scripts/papermill_log.py (issue 40, item 7): papermill's ``--log-output`` records, each ended with a newline by the
handler, read in the terminal as the text the notebook printed: no empty line after each printed line, nor after a
line the kernel sent in two messages; a genuine empty line stays."""

from __future__ import annotations

import io
import logging
import runpy

from conftest import REPO

LineEnds = runpy.run_path(str(REPO / "scripts" / "papermill_log.py"))["LineEnds"]


def logged(*messages: str) -> str:
    """What papermill's handler (``logging.basicConfig(format="%(message)s")``) writes for ``messages``, filtered."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger = logging.getLogger("papermill-log-test")
    logger.propagate, logger.level, logger.handlers, logger.filters = False, logging.INFO, [handler], [LineEnds()]
    for message in messages:
        logger.info(message)
    return out.getvalue()


def test_printed_lines_reach_the_terminal_without_empty_lines_between():
    steps = [f"step {i}/3  loss 1.{i}000\n" for i in (1, 2, 3)]
    assert logged("Executing Cell 25----", *steps, "Ending Cell 25----") == (
        "Executing Cell 25----\n" + "".join(steps) + "Ending Cell 25----\n"
    )


def test_a_line_sent_in_two_messages_and_a_genuine_empty_line():
    # print(..., flush=True) may reach papermill as the text and then its newline; print() is an empty line
    assert logged("held-out check: ...", "\n", "before: 4.5\n", "\n", "| a | b |", "after: 4.4\n") == (
        "held-out check: ...\nbefore: 4.5\n\n| a | b |\nafter: 4.4\n"
    )
    assert logged("answer ends\n\n", "Ending Cell 3") == "answer ends\n\nEnding Cell 3\n"


def test_run_offline_runs_papermill_through_it():
    script = (REPO / "scripts" / "run_offline.sh").read_text(encoding="utf-8")
    assert '"$VENV/bin/python" scripts/papermill_log.py notebooks/finetune_tinyllama.ipynb' in script
    assert "--log-output" in script and '"$VENV/bin/papermill"' not in script
