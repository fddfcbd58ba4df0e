"""A schedule's definition and its validation, shared by ``@job`` and the supervisor.

It lives in ``shared`` because ``@job(cron=...)`` must reject a bad expression when the
handler module is imported (in the producer as much as in the parent), and ``workers``
may not import ``supervisor``. Firing schedules is the supervisor's business
(``supervisor.schedules``); this module only says what a valid schedule is.

Cron expressions are parsed by cronsim: 5 fields, or 6 with seconds first. ``every`` is a
whole number of seconds; its slots are multiples of it since the Unix epoch, so every
supervisor computes the same slots without talking to the others.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import orjson

from shared.options import DEFAULTS
from shared.validation import MAX_KIND, MAX_SCHEDULE_NAME
from shared.validation import MAX_QUEUE as MAX_QUEUE

MAX_NAME = MAX_SCHEDULE_NAME


class ScheduleError(ValueError):
    """A schedule that cannot be used; the message is one line naming the schedule."""


@dataclass(frozen=True)
class ScheduleSpec:
    """One schedule: fire a job of ``kind`` on ``queue`` with ``args`` at each slot.

    Exactly one of ``cron`` (in ``timezone``) and ``every`` (seconds) is set.
    ``catch_up`` replays slots missed while no supervisor ran (capped) instead of
    coalescing them into one fire; ``overlap = False`` skips a slot while the previous
    fire's job is still live. ``source`` says where it was defined ("code" or "config").
    Of a job's options (``shared.options.JobOptions``) a schedule stores the queue and
    the priority; its jobs' attempts and timeout are their handler's, read at claim.
    """

    name: str
    kind: str
    cron: str | None = None
    every: int | None = None
    timezone: str = "UTC"
    args: dict[str, Any] = field(default_factory=dict)
    queue: str = DEFAULTS["queue"]
    priority: int = DEFAULTS["priority"]
    catch_up: bool = False
    overlap: bool = True
    source: str = "code"

    @property
    def expression(self) -> str:
        """The schedule as a person would write it: the cron text or ``every N s``."""
        return self.cron if self.cron is not None else f"every {self.every}s"

    @property
    def zone(self) -> ZoneInfo:
        """The timezone cron fields are read in."""
        return ZoneInfo(self.timezone)

    def args_json(self) -> str:
        """The args as the JSON text stored on each fired job."""
        return orjson.dumps(self.args).decode()


def make_spec(name: str, kind: str, *, cron: Any = None, every: Any = None,
              timezone: Any = None, args: Any = None, queue: Any = None,
              priority: Any = None, catch_up: Any = False, overlap: Any = True,
              source: str = "code") -> ScheduleSpec:
    """A validated ``ScheduleSpec``; raises ``ScheduleError`` with a one-line message
    that names the schedule."""
    def bad(what: str) -> ScheduleError:
        return ScheduleError(f"schedule {name!r}: {what}")

    if not isinstance(name, str) or not name or len(name) > MAX_NAME:
        raise ScheduleError(f"schedule name must be 1 to {MAX_NAME} characters, got {name!r}")
    if not isinstance(kind, str) or not kind:
        raise bad("kind must be a non-empty string")
    if len(kind) > MAX_KIND:  # schema 0022: every job it fires would be refused
        raise bad(f"kind is {len(kind)} characters long, more than the {MAX_KIND} allowed")
    if (cron is None) == (every is None):
        raise bad("give exactly one of cron or every")
    tz_name = "UTC" if timezone is None else timezone
    if not isinstance(tz_name, str) or not _known_zone(tz_name):
        raise bad(f"unknown timezone {tz_name!r}")
    if cron is not None:
        cron = _checked_cron(cron, tz_name, bad)
    else:
        every = _checked_every(every, bad)
        if timezone is not None and tz_name != "UTC":
            raise bad("timezone applies to cron schedules only")
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise bad(f"args must be a table/object, got {type(args).__name__}")
    try:
        orjson.dumps(args)
    except TypeError as exc:
        raise bad(f"args are not JSON: {exc}") from None
    queue = DEFAULTS["queue"] if queue is None else queue
    if not isinstance(queue, str) or not 1 <= len(queue) <= MAX_QUEUE:
        raise bad(f"queue must be 1 to {MAX_QUEUE} characters, got {queue!r}")
    priority = DEFAULTS["priority"] if priority is None else priority
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise bad(f"priority must be an integer, got {priority!r}")
    for option, value in (("catch_up", catch_up), ("overlap", overlap)):
        if not isinstance(value, bool):
            raise bad(f"{option} must be true or false, got {value!r}")
    return ScheduleSpec(name=name, kind=kind, cron=cron, every=every, timezone=tz_name,
                        args=dict(args), queue=queue, priority=priority, catch_up=catch_up,
                        overlap=overlap, source=source)


def _known_zone(name: str) -> bool:
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):  # ValueError: a path-like or empty key
        return False
    return True


def _checked_cron(cron: Any, tz_name: str, bad) -> str:
    if not isinstance(cron, str):
        raise bad(f"cron must be a string, got {cron!r}")
    text = " ".join(cron.split())
    if len(text.split()) not in (5, 6):
        raise bad(f"invalid cron expression {cron!r}: need 5 fields, or 6 with seconds first")
    from cronsim import CronSim, CronSimError  # only where a cron schedule is declared

    try:
        # Asking for one slot also catches expressions that parse but never fire (Feb 30).
        next(CronSim(text, datetime.now(UTC).astimezone(ZoneInfo(tz_name))))
    except CronSimError as exc:
        raise bad(f"invalid cron expression {cron!r}: {exc}") from None
    except StopIteration:
        raise bad(f"cron expression {cron!r} never fires") from None
    return text


def _checked_every(every: Any, bad) -> int:
    if isinstance(every, bool) or not isinstance(every, int | float):
        raise bad(f"every must be a number of seconds, got {every!r}")
    if not math.isfinite(every) or every != int(every) or every < 1:
        raise bad(f"every must be a whole number of seconds, at least 1, got {every!r}")
    return int(every)
