"""Checking and encoding what a producer passes, before the database is touched.

Every check raises ``TypeError``/``ValueError`` with one line naming the problem, so bad
input never reaches the database and nothing is half-written.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import orjson

MAX_QUEUE_NAME = 255  # the schema's CHECK; keeps the name inside a NOTIFY payload


def check_options(
    kind: Any, queue: Any, priority: Any, max_attempts: Any, timeout: Any, run_at: Any,
    delay: Any,
) -> None:
    """Refuse options the schema would refuse (or silently misread)."""
    if not isinstance(kind, str) or not kind:
        raise TypeError(f"job kind must be a non-empty str, not {kind!r}")
    if not isinstance(queue, str) or not queue or len(queue) > MAX_QUEUE_NAME:
        raise ValueError(f"queue must be a str of 1 to {MAX_QUEUE_NAME} characters: {queue!r}")
    if not _is_int(priority) or not -(2**31) <= priority < 2**31:
        raise TypeError(f"priority must be a 32-bit int, not {priority!r}")
    if not _is_int(max_attempts) or not 1 <= max_attempts < 2**31:
        raise ValueError(f"max_attempts must be an int of at least 1, not {max_attempts!r}")
    if timeout is not None and (not _is_number(timeout) or not 0 < timeout < math.inf):
        raise ValueError(f"timeout must be a positive number of seconds, not {timeout!r}")
    if run_at is not None and delay is not None:
        raise ValueError("give either run_at or delay, not both")
    if run_at is not None and (not isinstance(run_at, datetime) or run_at.tzinfo is None):
        raise ValueError(f"run_at must be a timezone-aware datetime, not {run_at!r}")
    if delay is not None and (not _is_number(delay) or not 0 <= delay < math.inf):
        raise ValueError(f"delay must be a number of seconds >= 0, not {delay!r}")


def check_unique_key(key: Any) -> None:
    """A unique key is a non-empty str or None."""
    if key is not None and (not isinstance(key, str) or not key):
        raise TypeError(f"unique_key must be a non-empty str or None, not {key!r}")


def check_batch(
    args_list: Any, unique_key: str | None, unique_keys: Sequence[str | None] | None,
) -> list[str | None] | None:
    """The per-job keys of a batch (None when it has none), after checking their shape."""
    if not isinstance(args_list, Sequence) or isinstance(args_list, str | bytes | Mapping):
        raise TypeError("args_list must be a list of dicts, one per job")
    if unique_key is not None:
        if len(args_list) != 1 or unique_keys is not None:
            raise ValueError("unique_key names one job; pass unique_keys=[...] for a batch")
        unique_keys = [unique_key]
    if unique_keys is None:
        return None
    if len(unique_keys) != len(args_list):
        raise ValueError(f"unique_keys has {len(unique_keys)} entries for {len(args_list)} jobs")
    for key in unique_keys:
        check_unique_key(key)
    return list(unique_keys)


def encode_args(kind: str, args: Mapping[str, Any] | None) -> bytes:
    """``args`` as JSON object bytes, or a ``TypeError``/``ValueError`` that says why not."""
    if args is None:
        return b"{}"
    if type(args) is not dict:
        if not isinstance(args, Mapping):
            raise TypeError(
                f"args for job {kind!r} must be a dict (a JSON object), "
                f"not {type(args).__name__}"
            )
        args = dict(args)
    try:
        data = orjson.dumps(args)
    except TypeError as exc:  # orjson.JSONEncodeError is a TypeError
        bad_key = next((key for key in args if not isinstance(key, str)), None)
        if bad_key is not None:
            raise TypeError(f"args for job {kind!r} must have str keys, got {bad_key!r}") from None
        raise TypeError(f"args for job {kind!r} are not JSON-encodable: {exc}") from None
    if b"\\u0000" in data:
        # jsonb cannot store NUL in strings; fail here rather than in the database.
        raise ValueError(f"args for job {kind!r} contain a NUL character (\\u0000)")
    return data


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
