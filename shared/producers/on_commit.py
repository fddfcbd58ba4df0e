"""Django: enqueue a job once a transaction commits, for code whose job must not run
unless that transaction commits but cannot write the job inside it (the jobs live in
another database, or Django's connection is not PostgreSQL on psycopg 3).

When the job can join the transaction itself, prefer ``conn=django.db.connection``
inside ``transaction.atomic()``: the job then exists exactly when the transaction
commits. Here there is a window: the transaction has committed and the enqueue, run by
``transaction.on_commit``, may still fail (database away); Django then raises its error
from the commit's exit, and the job is not stored.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any

from shared.producers.plans import plan_one

_PLAN_OPTIONS = ("queue", "priority", "max_attempts", "timeout", "run_at", "delay",
                 "unique_key")


def enqueue_on_commit(
    kind: str,
    args: Mapping[str, Any] | None = None,
    *,
    using: str | None = None,
    **options: Any,
) -> None:
    """Enqueue ``kind`` with ``args`` when the Django transaction on database ``using``
    (default: ``"default"``) commits; at once when no transaction is open; never if it
    rolls back. ``options`` as for ``shared.enqueue.enqueue`` (``conn``/``dsn`` choose
    where the job is written). Bad input raises here, not after the commit."""
    from django.db import transaction

    from shared.enqueue import enqueue

    unknown = set(options) - {*_PLAN_OPTIONS, "conn", "dsn"}
    if unknown:
        raise TypeError(f"unknown enqueue option(s): {', '.join(sorted(unknown))}")
    plan_one(kind, args, **{k: v for k, v in options.items() if k in _PLAN_OPTIONS})
    transaction.on_commit(partial(enqueue, kind, args, **options), using=using)
