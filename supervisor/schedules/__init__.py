"""Schedules: cron and fixed-interval jobs, one fire per slot across every supervisor.

The door of this room. The supervisor's loop holds a ``Schedules`` (``next_due()``,
``fire_due(conn)``); ``run`` builds its definitions with ``specs_from_registry`` and
``parse_config_schedules`` (merged by ``merge_specs``); the CLI uses ``admin``.

``Schedules`` and ``admin`` (with the firing statements, slot arithmetic and cronsim) are
loaded on first use: a supervisor without schedules, and every ``--burst`` run, never
needs them, and their import was on the way to the first job (issue 31).
"""

from typing import TYPE_CHECKING, Any

from shared.schedules import ScheduleError, ScheduleSpec, make_spec
from supervisor.schedules.spec import merge_specs, parse_config_schedules, specs_from_registry

if TYPE_CHECKING:
    from supervisor.schedules import admin
    from supervisor.schedules.runner import Schedules

__all__ = ["ScheduleError", "ScheduleSpec", "Schedules", "admin", "make_spec", "merge_specs",
           "parse_config_schedules", "specs_from_registry"]


def __getattr__(name: str) -> Any:
    if name == "Schedules":
        from supervisor.schedules.runner import Schedules

        return Schedules
    if name == "admin":
        import importlib

        return importlib.import_module("supervisor.schedules.admin")
    raise AttributeError(f"module 'supervisor.schedules' has no attribute {name!r}")
