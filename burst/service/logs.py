"""Log lines of the running service: JSON, one object a line, in a container (no terminal);
readable text on a terminal.

python-json-logger writes the lines; each carries the reconcile pass it was written in (`pass`,
from a context variable the loop sets) and whatever the call names in `extra` (`workload`,
`pool`, `target`, `reason`), so that one workload's or one pool's story can be read back with
a JSON filter.
"""

from __future__ import annotations

import logging
import sys
from contextvars import ContextVar

from pythonjsonlogger.json import JsonFormatter

PASS: ContextVar[int | None] = ContextVar("burst_pass", default=None)


class _PassFilter(logging.Filter):
    """Puts the current pass on every record written while one runs."""

    def filter(self, record: logging.LogRecord) -> bool:
        current = PASS.get()
        if current is not None and not hasattr(record, "pass"):
            setattr(record, "pass", current)
        return True


def configure(level: int = logging.INFO, json_lines: bool | None = None) -> None:
    """Route every logger to stderr: JSON lines unless stderr is a terminal (or as told)."""
    handler = logging.StreamHandler(sys.stderr)
    if json_lines if json_lines is not None else not sys.stderr.isatty():
        handler.setFormatter(
            JsonFormatter(
                "{asctime}{levelname}{name}{message}",
                style="{",
                rename_fields={"asctime": "time", "levelname": "level", "name": "logger"},
                datefmt="%Y-%m-%dT%H:%M:%S%z",
            )
        )
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(_PassFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # The libraries' own chatter (schema checks, each HTTP retry) is not the service's story:
    # burst logs what a failure means for its work where it handles it.
    for noisy in ("alembic", "kubernetes", "azure", "botocore", "google", "httpx", "uvicorn"):
        logging.getLogger(noisy).setLevel(max(level, logging.WARNING))
    logging.getLogger("urllib3").setLevel(max(level, logging.ERROR))
