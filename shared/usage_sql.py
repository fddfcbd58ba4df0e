"""Reading one figure of a job's ``usage`` (``{"cpu_seconds", "wall_seconds",
"max_rss_bytes"}``) in SQL without trusting it: the rollup and the dashboard's
percentiles read it from rows anyone may have written by hand, and one bad row must
not fail the statement (a failing rollup would never move its mark again).
"""

from __future__ import annotations

# Largest value taken as real: above this it is a hand-written row, not a measure
# (also keeps the sum inside float8 and the peak inside bigint).
USAGE_CEILING = 1e15

_KEYS = ("cpu_seconds", "wall_seconds", "max_rss_bytes")


def usage_number(key: str, column: str = "usage") -> str:
    """A SQL expression for ``column``'s ``key`` as numeric: NULL when the usage is
    missing, not an object, or the figure is not a number between 0 and
    ``USAGE_CEILING``."""
    if key not in _KEYS:
        raise ValueError(f"no usage figure named {key!r}")
    value = f"{column}->'{key}'"
    # CASE evaluates the cast only when the type check passed.
    return (f"CASE WHEN jsonb_typeof({value}) = 'number' THEN "
            f"CASE WHEN ({column}->>'{key}')::numeric BETWEEN 0 AND {USAGE_CEILING:.0f} "
            f"THEN ({column}->>'{key}')::numeric END END")
