"""Log lines: readable text by default, one JSON object per line for collectors.

The format is set here for the whole process (``shared.logformat``), so the children
forked after it write their own lines in the same format."""

from __future__ import annotations

import logging
import sys

from shared import logformat
from shared.validation import printable

TEXT_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"
# Attributes a log call may attach with ``extra=``; the JSON format makes each a key, so
# a collector can filter on a job without parsing the message.
JOB_FIELDS = ("job_id", "kind", "queue", "attempt", "failure", "verdict")


def job_fields(job, **more) -> dict:
    """``extra=`` for a log line about ``job`` (a ``ClaimedJob``)."""
    return {"job_id": job.id, "kind": job.kind, "queue": job.queue, "attempt": job.attempt,
            **more}


class JsonFormatter(logging.Formatter):
    """One orjson object per record: time, level, logger, message (and the traceback)."""

    def format(self, record: logging.LogRecord) -> str:
        fields = {name: record.__dict__.get(name) for name in JOB_FIELDS}
        if record.exc_info:
            fields["traceback"] = self.formatException(record.exc_info)
        return logformat.json_line(record.levelname.lower(), record.name, record.getMessage(),
                                   at=record.created, **fields).decode()


class TextFormatter(logging.Formatter):
    """``TEXT_FORMAT`` with control characters in the message escaped: a job's error
    text or a queue name with ESC or a newline must neither drive the terminal nor
    forge a log line. A record's own traceback keeps its newlines."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        return printable(super().formatMessage(record))


def error_line(message: str) -> str:
    """A one-line error for stderr, as JSON when the log format is JSON (``--log-format
    json``: then even a one-line error at start-up is one)."""
    if logformat.current_format() != "json":
        return f"supervisor: error: {message}"
    return logformat.json_line("error", "supervisor", message).decode()


def configure_logging(level: str = "info", fmt: logformat.LogFormat = "text") -> None:
    """Send the ``supervisor`` loggers to stderr at ``level`` in ``fmt`` (text|json),
    the format of this process and of the children it forks from now on."""
    logformat.set_format(fmt)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter(TEXT_FORMAT))
    root = logging.getLogger("supervisor")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False
