"""Where schedule definitions come from: ``@job(cron=...)`` handlers and the config's
``[tool.supervisor.schedules.NAME]`` tables. The definition itself and its validation
are ``shared.schedules`` (``@job`` needs them at import, without the supervisor)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from shared.schedules import ScheduleError, ScheduleSpec, make_spec

CONFIG_KEYS = frozenset({"kind", "cron", "every", "timezone", "args", "queue", "priority",
                         "catch_up", "overlap"})


def specs_from_registry(handles: Iterable[Any]) -> list[ScheduleSpec]:
    """The schedules declared by ``@job(cron=...)`` / ``@job(every=...)`` on these
    handles (``workers.registry.REGISTRY.values()``), validated when they were declared."""
    return sorted((h.schedule for h in handles if getattr(h, "schedule", None) is not None),
                  key=lambda s: s.name)


def parse_config_schedules(tables: Mapping[str, Any],
                           handles: Mapping[str, Any] | None = None) -> list[ScheduleSpec]:
    """Validate ``[tool.supervisor.schedules]`` (a mapping of NAME to its table) and
    return its schedules; raises ``ScheduleError`` with one line naming the schedule.

    ``handles`` (kind to handle) lends a loaded handler's queue and priority to a table
    that names neither.
    """
    if not isinstance(tables, Mapping):
        raise ScheduleError("[tool.supervisor.schedules] must be a table of tables")
    specs = []
    for name, table in tables.items():
        if not isinstance(table, Mapping):
            raise ScheduleError(f"schedule {name!r}: expected a table, got {table!r}")
        unknown = set(table) - CONFIG_KEYS
        if unknown:
            raise ScheduleError(f"schedule {name!r}: unknown key(s) {', '.join(sorted(unknown))}"
                                f" (known: {', '.join(sorted(CONFIG_KEYS))})")
        kind = table.get("kind")
        if kind is None:
            raise ScheduleError(f"schedule {name!r}: kind is required")
        handle = (handles or {}).get(kind)
        queue = table.get("queue", handle.defaults.queue if handle is not None else None)
        priority = table.get("priority",
                             handle.defaults.priority if handle is not None else None)
        specs.append(make_spec(name, kind, cron=table.get("cron"), every=table.get("every"),
                               timezone=table.get("timezone"), args=table.get("args"),
                               queue=queue, priority=priority,
                               catch_up=table.get("catch_up", False),
                               overlap=table.get("overlap", True), source="config"))
    return specs


def merge_specs(*groups: Iterable[ScheduleSpec]) -> list[ScheduleSpec]:
    """One list of schedules; two definitions under one name is an error (which one
    fires would be a guess)."""
    seen: dict[str, ScheduleSpec] = {}
    for spec in (s for group in groups for s in group):
        other = seen.get(spec.name)
        if other is not None and other != spec:
            raise ScheduleError(f"schedule {spec.name!r} is defined twice ({other.source} and "
                                f"{spec.source}); rename one")
        seen[spec.name] = spec
    return [seen[name] for name in sorted(seen)]
