"""Plain-text presentation for the operator commands: aligned columns (numbers to the
right), humanised ages, one-line messages. Pure functions, so any terminal and any
``grep`` can read the output.

Text that came from the database (queue and kind names, error messages, tracebacks)
may hold control characters: rows inserted by plain SQL skip the enqueue checks. Every
such string is printed through ``shared.validation.printable`` (``table`` and
``one_line`` do it themselves), and JSON output through ``json_text``, so nothing we
print can drive the terminal."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from shared.db import pg_text
from shared.jsontext import dumps
from shared.usage import Usage
from shared.validation import printable


def age(seconds: float | None) -> str:
    """``3s``, ``4m12s``, ``2h05m``, ``3d04h``; ``-`` for None. Negative means future:
    ``in 30s``."""
    if seconds is None:
        return "-"
    if seconds < 0:
        return f"in {age(-seconds)}"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def job_seconds(value: float) -> str:
    """A job's duration or CPU time: ``12ms`` under a second, else ``1.25s``."""
    return f"{value * 1000:.0f}ms" if value < 1 else f"{value:.2f}s"


def usage_text(usage: Any) -> str:
    """An attempt's stored usage for a person: ``wall 1.25 s, CPU 1.20 s, peak 310.0
    MiB``; ``-`` when there is none (or it is not the object the supervisor writes)."""
    value = Usage.from_json(usage)
    return "-" if value is None else value.describe()


def since(when: datetime | None, now: datetime | None = None) -> str:
    """How long ago ``when`` was (``4m12s ago``) or how far ahead (``in 30s``); a
    timestamp past what Python holds (``infinity``, after 9999) is ``never``."""
    if when is None:
        return "-"
    if pg_text(when) is not None:
        return "never" if when.year == datetime.max.year else "long ago"
    now = now or datetime.now(UTC)
    delta = (now - when).total_seconds()
    return f"{age(delta)} ago" if delta >= 0 else age(delta)


def stamp(when: datetime) -> str:
    """``when`` in ISO form to the second, or PostgreSQL's own text for a timestamp past
    what Python holds (``infinity``, ``12000-01-01 00:00:00+00``)."""
    return pg_text(when) or when.isoformat(timespec="seconds")


def one_line(text: str | None, width: int = 60) -> str:
    """The first line of ``text``, cut to ``width`` characters with an ellipsis."""
    if not text:
        return ""
    first = printable(text.strip().splitlines()[0]) if text.strip() else ""
    return first if len(first) <= width else first[: width - 1] + "…"


def table(headers: Sequence[str], rows: Sequence[Sequence[object]],
          right: Sequence[int] = ()) -> str:
    """Columns separated by two spaces, padded to the widest cell; the column numbers
    in ``right`` are right-aligned (numbers). The last column is not padded. Control
    characters in cells are escaped."""
    cells = [[str(h) for h in headers], *[[printable(str(c)) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = []
    for row in cells:
        parts = []
        for i, cell in enumerate(row):
            if i in right:
                parts.append(cell.rjust(widths[i]))
            elif i == len(row) - 1:
                parts.append(cell)
            else:
                parts.append(cell.ljust(widths[i]))
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def describe_limits(limits: dict[str, Any] | None) -> str:
    """Limits as one word, for a table column: ``running<=5,rate<=20/s,burst=5,
    per-key<=1``; "-" for none."""
    if not limits:
        return "-"
    parts = []
    if limits.get("max_running") is not None:
        parts.append(f"running<={limits['max_running']}")
    if limits.get("max_rate") is not None:
        burst = limits.get("burst")
        parts.append(f"rate<={limits['max_rate']:g}/s" + (f",burst={burst}" if burst else ""))
    if limits.get("per_key_max_running") is not None:
        parts.append(f"per-key<={limits['per_key_max_running']}")
    return ",".join(parts) or "-"


def to_json(value: object) -> str:
    """``value`` as indented JSON text (datetimes become ISO 8601), terminal-safe
    as ``json_text``."""
    return _json_safe(dumps(value, indent=True))


def json_text(value: object) -> str:
    """``value`` as one line of JSON. orjson escapes C0 control characters but writes
    C1 controls and bidi overrides raw; they can only occur inside JSON strings, where
    ``\\uXXXX`` means the same, so they are escaped that way."""
    return _json_safe(dumps(value))


def _json_safe(data: bytes) -> str:
    text = data.decode()
    return _UNSAFE_IN_JSON.sub(lambda m: f"\\u{ord(m.group(0)):04x}", text)


_UNSAFE_IN_JSON = re.compile("[\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
