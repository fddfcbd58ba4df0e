"""JSON text for people and scripts: orjson, with a fallback for what jsonb holds and
orjson refuses.

PostgreSQL's jsonb keeps integers of any size, and a producer writing plain SQL may
store one past 64 bits; orjson refuses those. The standard library writes them exactly,
so the slow path only runs for such values. Both the CLI and the dashboard print stored
args and results through here.
"""

from __future__ import annotations

import json
import math
from datetime import datetime
from typing import Any

import orjson


def dumps(value: Any, *, indent: bool = False) -> bytes:
    """``value`` as JSON bytes; datetimes as ISO 8601, non-finite floats as null."""
    option = orjson.OPT_NON_STR_KEYS | (orjson.OPT_INDENT_2 if indent else 0)
    try:
        return orjson.dumps(value, option=option)
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        return json.dumps(_finite(value), indent=2 if indent else None, default=_iso,
                          ensure_ascii=False, allow_nan=False,
                          separators=None if indent else (",", ":")).encode()


def _iso(value: Any) -> str:
    return value.isoformat() if isinstance(value, datetime) else str(value)


def _finite(value: Any) -> Any:
    # JSON has no infinity; orjson writes null for it, and so does the fallback.
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value
