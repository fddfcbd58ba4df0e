"""Batched writes that one refused row cannot stall (issue 50).

Every write of the parent is one statement for a whole batch. When PostgreSQL refuses
the data of one row in it (a value it cannot store, a CHECK, an index entry or a
tsvector past its size limit), the whole statement fails, and writing the same batch
again fails the same way: before this, one job whose errors outgrew the error search
index held back every failure written after it, for good.

``write_apart`` keeps the batched statement as the fast path. Only when it is refused
for its data (``refused``) does it split the batch in halves, and the halves again,
down to the rows that are refused on their own: every other row is written, in about
``2 log2(n)`` extra statements per refused row, and the refused ones come back to the
caller, which writes them in a reduced form or discards their job. A lost connection,
a timeout or a deadlock is not a refusal: it propagates unchanged, and the caller's
outage and retry handling keeps the batch.

The statements run on the store's autocommit connection, so a failed one leaves
nothing behind and a half written before an outage stays written (its rows are then
fenced off, harmlessly, when the batch is written again).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import psycopg

from shared.db import first_line

log = logging.getLogger("supervisor.store")

T = TypeVar("T")

# SQLSTATE classes that refuse a statement's data, whatever the connection's state:
# 22 data exception (a value out of range, NUL in text, a bad cast), 23 integrity
# constraint violation (a CHECK, NOT NULL, a unique key), 54 program limit exceeded (an
# index row or a tsvector too big; psycopg files this class under OperationalError).
REFUSING_CLASSES = ("22", "23", "54")


def refused(exc: BaseException) -> bool:
    """Whether ``exc`` is PostgreSQL refusing a statement's data: the same statement
    would fail the same way again. Never true for a lost connection, a timeout, a lock
    or a deadlock (those are worth a retry)."""
    if not isinstance(exc, psycopg.Error):
        return False
    sqlstate = getattr(exc, "sqlstate", None)
    if sqlstate is None:  # refused before it was sent (psycopg: NUL in text, a bad value)
        return isinstance(exc, psycopg.DataError | psycopg.IntegrityError)
    return sqlstate[:2] in REFUSING_CLASSES


def reason(exc: BaseException) -> str:
    """The first line of a database error, for a log line or an errors entry."""
    return first_line(exc)


@dataclass
class Apart(Generic[T]):
    """What ``write_apart`` did: the ids the statement fenced off, the rows refused on
    their own (each with its error), and how many statements it took."""

    fenced: list[int] = field(default_factory=list)
    refused: list[tuple[T, psycopg.Error]] = field(default_factory=list)
    statements: int = 0


def write_apart(items: Sequence[T], write: Callable[[Sequence[T]], list[int]]) -> Apart[T]:
    """``write(items)`` (it returns the fenced-off ids); if PostgreSQL refuses its data,
    the batch is split until the refused rows stand alone and every other row is
    written. Errors that are not refusals propagate."""
    apart: Apart[T] = Apart()
    _write_part(list(items), write, apart)
    return apart


def _write_part(items: list[T], write: Callable[[Sequence[T]], list[int]],
                apart: Apart[T]) -> None:
    if not items:
        return
    apart.statements += 1
    try:
        apart.fenced.extend(write(items))
        return
    except psycopg.Error as exc:
        if not refused(exc):
            raise
        if len(items) == 1:
            apart.refused.append((items[0], exc))
            return
    middle = len(items) // 2
    _write_part(items[:middle], write, apart)
    _write_part(items[middle:], write, apart)
