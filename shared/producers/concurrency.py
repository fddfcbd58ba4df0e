"""Concurrency keys at enqueue: jobs sharing a key run at most their queue's per-key
limit at once (``supervisor queues limit QUEUE --per-key-max-running K``). The checks
at enqueue; ``shared.producers.copyrows`` writes the column for ``enqueue_many``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from shared.validation import MAX_CONCURRENCY_KEY, check_length


def check_concurrency_key(key: Any) -> None:
    """A concurrency key (jobs sharing one run at most a queue's per-key limit at once)
    is a non-empty str of at most ``MAX_CONCURRENCY_KEY`` characters, or None."""
    if key is not None and (not isinstance(key, str) or not key):
        raise TypeError(f"concurrency_key must be a non-empty str or None, not {key!r}")
    if key is not None:
        check_length("concurrency_key", key, MAX_CONCURRENCY_KEY)


def check_concurrency_keys(count: int, key: str | None,
                           keys: Sequence[str | None] | None) -> list[str | None] | None:
    """Per-job concurrency keys of a batch of ``count`` (None: no job has one), from one
    key for all (``key``) or one per job (``keys``)."""
    if key is not None and keys is not None:
        raise ValueError("give concurrency_key (one for all) or concurrency_keys, not both")
    if key is not None:
        check_concurrency_key(key)
        return [key] * count
    if keys is None:
        return None
    if isinstance(keys, str) or not isinstance(keys, Sequence):
        raise TypeError("concurrency_keys must be a list with one key (or None) per job")
    if len(keys) != count:
        raise ValueError(f"concurrency_keys has {len(keys)} entries for {count} jobs")
    for one in keys:
        check_concurrency_key(one)
    return list(keys)
