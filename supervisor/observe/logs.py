"""Log lines: readable text by default, one JSON object per line for collectors."""

from __future__ import annotations

import logging
import sys
import time

import orjson

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
        entry = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in JOB_FIELDS:
            value = record.__dict__.get(name)
            if value is not None:
                entry[name] = value
        if record.exc_info:
            entry["traceback"] = self.formatException(record.exc_info)
        return orjson.dumps(entry).decode()


class TextFormatter(logging.Formatter):
    """``TEXT_FORMAT`` with control characters in the message escaped: a job's error
    text or a queue name with ESC or a newline must neither drive the terminal nor
    forge a log line. A record's own traceback keeps its newlines."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        return printable(super().formatMessage(record))


_json_stream = False  # set by configure_logging: the CLI's own errors follow the format


def json_logging() -> bool:
    """Whether the supervisor's stderr is a stream of JSON objects (``--log-format
    json``): then even a one-line error at start-up is one."""
    return _json_stream


def error_line(message: str) -> str:
    """A one-line error for stderr, as JSON when the log format is JSON."""
    if not _json_stream:
        return f"supervisor: error: {message}"
    return orjson.dumps({"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                         "level": "error", "logger": "supervisor", "message": message}).decode()


def configure_logging(level: str = "info", fmt: str = "text") -> None:
    """Send the ``supervisor`` loggers to stderr at ``level`` in ``fmt`` (text|json)."""
    global _json_stream
    _json_stream = fmt == "json"
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter(TEXT_FORMAT))
    root = logging.getLogger("supervisor")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False
