"""Turning data into responses: the Jinja2 environment (autoescape on for every
template, so every value from a job reaches the page as text), its filters, and the
JSON response used by the API.

The navigation is one list, ``NAV``: a page added later (schedules, batches) is one
entry here, one route and one template.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlencode

from jinja2 import Environment, PackageLoader
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from shared.db import pg_text
from shared.jsontext import dumps
from shared.units import format_size
from shared.usage import Usage

# (label, path): the pages in the header, in order.
NAV: list[tuple[str, str]] = [
    ("Queues", "/"),
    ("Jobs", "/jobs"),
    ("Kinds", "/kinds"),
    ("Schedules", "/schedules"),
    ("Batches", "/batches"),
    ("Limits", "/limits"),
    ("Supervisors", "/supervisors"),
]

# Fixed texts for ?done= after an action: the URL names one, never carries the text.
NOTICES = {
    "retried": "Job put back to available: it runs again with a full set of attempts.",
    "cancelled": "Job cancelled.",
    "paused": "Queue paused: supervisors stop claiming from it.",
    "resumed": "Queue resumed: supervisors claim from it again.",
    "schedule-paused": "Schedule paused: it fires no more until resumed.",
    "schedule-resumed": "Schedule resumed: it fires from its next slot.",
    "schedule-run": "Schedule run now: its job was enqueued.",
    "batch-cancel": "Batch cancelled: no member starts; running ones were told to stop.",
    "batch-retry": "The batch's failed members run again with a full set of attempts.",
    "batch-pause": "Batch paused: no member starts until it is resumed.",
    "batch-resume": "Batch resumed: its held members are available again.",
    "batch-priority": "The members not started yet have the new priority.",
}


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if not math.isfinite(float(seconds)):  # a timeout of NaN or Infinity written by SQL
        return "not a number" if math.isnan(float(seconds)) else "infinite"
    seconds = max(float(seconds), 0.0)
    if seconds < 60:
        return f"{seconds:.0f}s" if seconds >= 10 else f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m {secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h {minutes:02d}m"
    return f"{hours // 24}d {hours % 24}h"


def _cpu(seconds: float | None) -> str:
    # CPU time is often well under a second a job: milliseconds read better than 0.0s.
    if seconds is None or not math.isfinite(float(seconds)):
        return "-"
    if 0 < float(seconds) < 1:
        return f"{float(seconds) * 1000:.0f}ms"
    return _age(seconds)


def _since(moment: datetime | None) -> str:
    if moment is None:
        return "-"
    if pg_text(moment) is not None:  # infinity, or past what Python holds
        return "never" if moment.year == datetime.max.year else "long ago"
    delta = (datetime.now(UTC) - moment).total_seconds()
    return f"{_age(delta)} ago" if delta >= 0 else f"in {_age(-delta)}"


def _stamp(moment: datetime | str | None) -> str:
    # Error entries carry their time as JSON text; show it like the columns when it
    # parses, as it is otherwise.
    if isinstance(moment, str):
        text = moment
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            return text
    if not isinstance(moment, datetime):
        return "" if moment is None else str(moment)
    odd = pg_text(moment)
    if odd is not None:
        return odd
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _pretty(value: Any) -> str:
    return dumps(value, indent=True).decode()


def _percent(progress: Any) -> float | None:
    if not isinstance(progress, dict):
        return None
    done, total = progress.get("done"), progress.get("total")
    if not isinstance(done, int | float) or not isinstance(total, int | float) or total <= 0:
        return None
    return max(0.0, min(100.0, 100.0 * done / total))


def _rate(per_second: float) -> str:
    return f"{per_second:.2f}/s" if per_second < 10 else f"{per_second:.0f}/s"


def _usage(value: Any) -> str:
    usage = Usage.from_json(value)
    return "-" if usage is None else usage.describe()


ENV = Environment(
    loader=PackageLoader("supervisor.dashboard", "templates"),
    autoescape=True,
    trim_blocks=True,
    lstrip_blocks=True,
)
ENV.filters.update(
    age=_age, since=_since, stamp=_stamp, pretty=_pretty, percent=_percent, rate=_rate,
    usage=_usage, cpu=_cpu,
    size=lambda n: "-" if not isinstance(n, int) or n < 0 else format_size(n),
    pathpart=lambda text: quote(str(text), safe=""),
    query=lambda params: urlencode({k: v for k, v in params.items() if v not in (None, "")}),
)


def page(request: Request, template: str, status_code: int = 200, **context: Any) -> Response:
    """Render ``template`` with ``context`` plus what every page shows (navigation,
    read-only or not, refresh period, a notice after an action)."""
    settings = request.app.state.settings
    done = request.query_params.get("done")
    notice = NOTICES.get(done or "")
    if done == "bulk":
        notice = _bulk_notice(request.query_params)
    html = ENV.get_template(template).render(
        nav=NAV, path=request.url.path, read_only=settings.token is None,
        refresh=settings.refresh, notice=notice, **context)
    return HTMLResponse(html, status_code=status_code)


def _bulk_notice(params: Any) -> str | None:
    # Numbers and one fixed word from the URL, never its text.
    action = params.get("bulk")
    changed, skipped = params.get("changed", ""), params.get("skipped", "")
    if action not in BULK_DONE or not changed.isdigit() or not skipped.isdigit():
        return None
    if int(changed) == 0 and int(skipped) == 0:
        return "No job matched: nothing changed."
    text = f"{BULK_DONE[action]}: {int(changed)} job{'s' if int(changed) != 1 else ''}."
    if int(skipped):
        text += f" {int(skipped)} left alone (changed meanwhile, or a unique key taken)."
    return text


BULK_DONE = {"retry": "Retried", "cancel": "Cancelled", "delete": "Deleted"}


class JSONResponse(Response):
    """JSON through orjson: datetimes as ISO 8601, jsonb values as they are stored."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return dumps(content)
