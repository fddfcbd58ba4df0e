"""Schedules: cron and fixed-interval jobs, one fire per slot across every supervisor.

The door of this room. The supervisor's loop holds a ``Schedules`` (``next_due()``,
``fire_due(conn)``); ``run`` builds its definitions with ``specs_from_registry`` and
``parse_config_schedules`` (merged by ``merge_specs``); the CLI uses ``admin``.
"""

from shared.schedules import ScheduleError, ScheduleSpec, make_spec
from supervisor.schedules import admin
from supervisor.schedules.runner import Schedules
from supervisor.schedules.spec import merge_specs, parse_config_schedules, specs_from_registry

__all__ = ["ScheduleError", "ScheduleSpec", "Schedules", "admin", "make_spec", "merge_specs",
           "parse_config_schedules", "specs_from_registry"]
