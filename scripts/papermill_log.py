"""papermill's command line, each line the notebook prints logged once: what scripts/run_offline.sh runs.

``papermill --log-output`` logs each output message of the kernel as one log record, and its handler ends every record
with a newline: a printed line, which ends in one already, reached the terminal followed by an empty line (a blank
line after each step line), and a line the kernel sent in two messages (text, then its newline) as well. Here a filter
on papermill's logger (``LineEnds``) takes out the newlines the handler adds twice; the arguments, options and exit
status are papermill's (``python scripts/papermill_log.py --help``).
"""

from __future__ import annotations

import logging


class LineEnds(logging.Filter):
    """Make a run of log records, each ended with a newline by the handler, read as the text they hold.

    A message's own last newline is dropped (the handler writes one); a message without one gets the handler's, and
    a leading newline of the message after it is then dropped (the same line end, sent on its own), and with it a
    record left empty. Records with ``%`` arguments or no text pass unchanged.
    """

    def __init__(self) -> None:
        super().__init__()
        self.owed = False  # the last record had no newline of its own: the handler ended it

    def filter(self, record: logging.LogRecord) -> bool:
        if not isinstance(record.msg, str) or record.args:
            self.owed = False
            return True
        text = record.msg
        if self.owed and text.startswith("\n"):
            text = text[1:]
            if not text:  # only the line end the handler already wrote
                self.owed = False
                return False
        self.owed = not text.endswith("\n")
        record.msg = text if self.owed else text[:-1]
        return True


if __name__ == "__main__":
    from papermill.cli import papermill

    logging.getLogger("papermill").addFilter(LineEnds())
    papermill(prog_name="papermill")
