"""Reading one figure of a job's ``usage`` (``{"cpu_seconds", "wall_seconds",
"max_rss_bytes"}``) in SQL. The supervisor writes numbers (``shared.usage``), but rows
may be written by hand, and one bad row must not fail a statement that reads many (a
failing rollup would never move its mark again).

Two readings: ``usage_figure`` is the plain cast, cheap, for a statement that keeps only
``in_range`` values and can be run again with ``usage_number`` when the cast fails;
``usage_number`` never fails, at about 2.5 µs a row more (three lookups and a numeric
comparison per figure; scripts/bench/rollup_usage_cost.py).
"""

from __future__ import annotations

# Largest value taken as real: above this it is a hand-written row, not a measure
# (also keeps a sum inside float8 and a peak inside bigint).
USAGE_CEILING = 1e15

_KEYS = ("cpu_seconds", "wall_seconds", "max_rss_bytes")


def _key(key: str) -> str:
    if key not in _KEYS:
        raise ValueError(f"no usage figure named {key!r}")
    return key


def usage_figure(key: str, column: str = "usage") -> str:
    """A SQL expression for ``column``'s ``key`` as float8: NULL when the usage or the
    figure is missing or the usage is not an object; an error (a ``DataError``) when
    the figure is not a number float8 can hold. Keep only ``in_range`` values."""
    return f"({column}->>'{_key(key)}')::float8"


def in_range(expression: str) -> str:
    """A SQL condition: ``expression`` is a measure (0 to ``USAGE_CEILING``)."""
    return f"{expression} BETWEEN 0 AND {USAGE_CEILING:.0f}"


def usage_number(key: str, column: str = "usage") -> str:
    """A SQL expression for ``column``'s ``key`` as float8 that never fails: NULL when
    the usage is missing, not an object, or the figure is not a number from 0 to
    ``USAGE_CEILING``."""
    value = f"{column}->'{_key(key)}'"
    # CASE evaluates the casts only when the checks before them passed.
    return (f"CASE WHEN jsonb_typeof({value}) = 'number' THEN "
            f"CASE WHEN ({value})::numeric BETWEEN 0 AND {USAGE_CEILING:.0f} "
            f"THEN ({value})::float8 END END")
