"""Django's ``enqueue_on_commit``: enqueue once the caller's Django transaction commits.

``enqueue_on_commit`` is for Django code whose job must not run unless a transaction
commits but that cannot write the job inside it (the jobs live in another database, or
Django's connection is not PostgreSQL on psycopg 3). When the job can join the
transaction, prefer ``conn=django.db.connection`` inside ``transaction.atomic()``: the
job then exists exactly when the transaction commits. With ``enqueue_on_commit`` there
is a window: the transaction has committed and the enqueue, run by
``transaction.on_commit``, may still fail (database away); Django then raises its error
from the commit's exit, and the job is not stored.

It sits above ``shared.enqueue`` (it calls it), beside it rather than among the
producers' machinery (``shared.producers``) that ``shared.enqueue`` is built on, so
no two of them import each other.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any, Unpack

from shared.enqueue import enqueue
from shared.options import CALL_OPTIONS, CallOptions, check_names
from shared.producers.held import plan_dependent
from shared.producers.plans import plan_one
from shared.tracing import keep_current_context


def enqueue_on_commit(kind: str, args: Mapping[str, Any] | None = None, *,
                      using: str | None = None, **options: Unpack[CallOptions]) -> None:
    """Enqueue ``kind`` with ``args`` when the Django transaction on database ``using``
    (default: ``"default"``) commits; at once when no transaction is open; never if it
    rolls back. ``options`` as for ``shared.enqueue.enqueue`` (``conn``/``dsn`` choose
    where the job is written; a ``depends_on`` id naming no job is refused when the
    enqueue runs, after the commit). Bad input raises here, not after the commit."""
    from django.db import transaction

    check_names(options, CALL_OPTIONS, "enqueue_on_commit")
    # Checks everything; the plan itself is dropped.
    if options.get("depends_on") is not None:
        plan_dependent(kind, args, options)
    else:
        plan_one(kind, args, options)
    transaction.on_commit(keep_current_context(partial(enqueue, kind, args, **options)),
                          using=using)
