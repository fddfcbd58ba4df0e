"""Reading sizes and durations the way the docs write them: ``512MB``, ``1GiB``,
``250ms``, ``30s``, ``5m``, ``2h``, ``7d``; plain numbers are bytes and seconds.

Both raise ``ValueError`` with a message naming the setting and what it expects, so a
config file's mistake is one line before anything starts, never a crash later.
"""

from __future__ import annotations

import math
import re
from typing import Any

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?\s*$", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "b": 1, "k": 1000, "m": 1000**2, "g": 1000**3, "t": 1000**4,
               "ki": 1024, "mi": 1024**2, "gi": 1024**3, "ti": 1024**4}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$", re.IGNORECASE)
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def parse_size(value: Any, what: str = "size") -> int:
    """Bytes from a whole number or a string like ``512MB`` or ``1GiB``."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    match = _SIZE.match(value) if isinstance(value, str) else None
    if not match:
        raise ValueError(f"{what}: expected a size like 512MB or 1GiB, got {value!r}")
    unit = (match.group(2) or "").lower().rstrip("b")
    return int(float(match.group(1)) * _SIZE_UNITS[unit])


def format_size(size: int) -> str:
    """``size`` bytes for a person: MiB (whole from 100 MiB, else one decimal), KiB
    below one MiB, so a small cap never reads as ``0 MiB``."""
    mib = 1024**2
    if size < mib:
        return f"{size / 1024:.1f} KiB"
    if size % mib == 0 or size >= 100 * mib:
        return f"{round(size / mib)} MiB"
    return f"{size / mib:.1f} MiB"


def parse_duration(value: Any, what: str = "duration") -> float:
    """Seconds from a number or a string like ``250ms``, ``30s``, ``5m``, ``2h``, ``7d``."""
    if _is_number(value):
        seconds = float(value)
    else:
        match = _DURATION.match(value) if isinstance(value, str) else None
        if not match:
            raise ValueError(f"{what}: expected seconds or a duration like 30s, 5m or 7d, "
                             f"got {value!r}")
        seconds = float(match.group(1)) * _DURATION_UNITS[(match.group(2) or "s").lower()]
    if seconds < 0 or not math.isfinite(seconds):
        raise ValueError(f"{what}: expected a duration of 0 or more, got {value!r}")
    return seconds


def parse_whole(value: Any, what: str) -> int:
    """A whole number, refusing strings (a quoted "4" is a mistake worth naming)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise ValueError(f"{what}: expected a whole number, got {value!r}")


def parse_number(value: Any, what: str) -> float:
    """A number (int or float), refusing strings and booleans."""
    if _is_number(value) and math.isfinite(value):
        return float(value)
    raise ValueError(f"{what}: expected a number, got {value!r}")
