"""The sweep's console lines: plain on a terminal, prefixed with time, logger and level where they are kept (a
pipe, a CI log); conf/hydra/job_logging/nnbench.yaml names it."""
from __future__ import annotations

import logging
import sys

PREFIXED = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"


class Formatter(logging.Formatter):
    """A record as its message on a terminal (a warning or error says so first), else with Hydra's prefix."""

    def __init__(self, prefixed: str = PREFIXED) -> None:
        super().__init__(prefixed)
        self.plain = sys.stdout.isatty()

    def format(self, record: logging.LogRecord) -> str:
        if not self.plain:
            return super().format(record)
        message = record.getMessage()
        return f"{record.levelname.lower()}: {message}" if record.levelno >= logging.WARNING else message
