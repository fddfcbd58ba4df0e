"""The per-job rows the parent writes for its jobs, one frozen record per statement's
row (a start or release names an ``Attempt``; a completion, failure, snooze or lease
renewal carries what its statement stores).

Their own module because both the store (which writes them alone) and the claim (which
carries completions in its statement) take them, and neither should import the other
for a record.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from shared.usage import Usage


class FencedRow(Protocol):
    """What every per-job write below names, and the fence checks: the job, and the
    attempt its row must still be on."""

    @property
    def id(self) -> int:
        """The job's id."""

    @property
    def attempt(self) -> int:
        """The attempt the write is for."""


_Row = TypeVar("_Row", bound=FencedRow)


def in_id_order(rows: Sequence[_Row]) -> list[_Row]:
    """``rows`` sorted by job id: the order every fenced write's batch is sent in, since
    each row finds its values by binary search among the batch's ids (``sql.py``)."""
    return sorted(rows, key=_job_id)


def _job_id(row: FencedRow) -> int:
    return row.id


@dataclass(slots=True, frozen=True)
class Attempt:
    """One attempt of a job, as a fenced write names it: the row is written only while
    its ``attempt`` and lease are still this supervisor's."""

    id: int
    attempt: int


@dataclass(slots=True, frozen=True)
class Renewal:
    """One running job's lease renewal, with what rides on it: ``progress`` (the latest
    report, stored as JSON) and ``checkpoint`` (its state, already JSON text); None
    leaves the stored one as it is."""

    id: int
    attempt: int
    progress: dict | None = None
    checkpoint: str | None = None


@dataclass(slots=True, frozen=True)
class Snooze:
    """A job whose handler raised ``workers.Snooze``: due again ``delay`` seconds from
    now (a negative or missing delay: at once), the attempt not counted."""

    id: int
    attempt: int
    delay: float | None


@dataclass(slots=True, frozen=True)
class Completion:
    """A job whose handler returned; ``result_json`` is already JSON text (or None).
    ``usage``: what the attempt cost, ``output``: the tail of what it printed; None
    when unknown or empty. ``ran``: seconds since its start when that start was not
    written (the write sets the attempt's start from it), else None."""

    id: int
    attempt: int
    result_json: str | None
    usage: Usage | None = None
    output: str | None = None
    ran: float | None = None


@dataclass(slots=True, frozen=True)
class Failure:
    """A failed attempt. ``kind`` is one of ``shared.jobs.FAIL_*``. ``terminal`` (or the
    last allowed attempt) discards the job; otherwise it becomes retryable after
    ``retry_delay`` seconds, or the store's backoff when None."""

    id: int
    attempt: int
    kind: str
    message: str
    traceback: str | None = None
    retry_delay: float | None = None
    terminal: bool = False
    usage: Usage | None = None  # as for Completion: kept in the attempt's errors entry too
    output: str | None = None
    ran: float | None = None  # as Completion.ran
    job_kind: str = ""  # the job's kind, for its poison_after setting


@dataclass(slots=True, frozen=True)
class FailuresWritten:
    """What one write of failed attempts decided: of ``items``, the ids ``written`` (the
    rest were fenced off) and those the row discarded as ``poisoned`` (the same crash as
    its last attempts: only the row knows that)."""

    items: Sequence[Failure]
    written: frozenset[int]
    poisoned: frozenset[int]

    @property
    def fenced(self) -> list[int]:
        """The ids of ``items`` that were not written (their lease had moved on)."""
        return [f.id for f in self.items if f.id not in self.written]
