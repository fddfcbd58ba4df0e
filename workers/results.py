"""Checks on a handler's result that orjson does not make: it writes NaN and the
infinities as ``null``, so a result would be stored changed without a word."""

from __future__ import annotations

import dataclasses
import math
from typing import Any


def non_finite(value: Any, where: str = "result") -> str | None:
    """Where in ``value`` a NaN or infinite float sits (e.g. ``result['a'][2]``, with the
    value), or None when there is none. orjson refuses depths over 255 before this runs,
    so the recursion is bounded."""
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{where} = {value!r}"
    if isinstance(value, dict):
        for key, item in value.items():
            found = non_finite(item, f"{where}[{key!r}]")
            if found is not None:
                return found
        return None
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found = non_finite(item, f"{where}[{index}]")
            if found is not None:
                return found
        return None
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            found = non_finite(getattr(value, f.name, None), f"{where}.{f.name}")
            if found is not None:
                return found
    return None
