"""The supervisor's log format, known to both sides: text for people, or one JSON object
per line for collectors (``supervisor run --log-format``).

A collector reads the supervisor's stderr as one stream, so whatever a child writes there
(a handler's ``print``, the child runtime's own messages) must come in the parent's
format. The format is a setting of the process: the parent sets it once, when it
configures its logging and before it forks; each child inherits it through the fork and
reads it here, never from the parent's modules. The JSON objects of both sides share
one shape: ``time`` (UTC, milliseconds), ``level``, ``logger``, ``message``, then fields.
"""

from __future__ import annotations

import time
from typing import Any, Literal

import orjson

LogFormat = Literal["text", "json"]
FORMATS: tuple[LogFormat, ...] = ("text", "json")

_current: LogFormat = "text"


def set_format(fmt: LogFormat) -> None:
    """Make ``fmt`` this process's log format (and that of every child forked after)."""
    global _current
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    _current = fmt


def current_format() -> LogFormat:
    """This process's log format: ``text`` unless the supervisor set ``json``."""
    return _current


def json_time(epoch: float) -> str:
    """``epoch`` (seconds) as the ``time`` of a JSON line: ``2024-05-01T12:00:00.123Z``."""
    return (time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch))
            + f".{int(epoch * 1000) % 1000:03d}Z")


def json_line(level: str, logger: str, message: str, *, at: float | None = None,
              **fields: Any) -> bytes:
    """One JSON log object (without its newline); ``fields`` whose value is None are
    left out. ``at`` is the event's time (default: now)."""
    entry: dict[str, Any] = {"time": json_time(time.time() if at is None else at),
                             "level": level, "logger": logger, "message": message}
    entry.update((name, value) for name, value in fields.items() if value is not None)
    return orjson.dumps(entry)
