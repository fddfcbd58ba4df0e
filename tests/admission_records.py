"""Reading the admission tests' handler records: each job's [start, end] interval and
how many jobs ran beside one another (from the handlers' own clocks, not the
supervisor's account)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Span:
    """One attempt of one job as its handler recorded it."""

    id: int
    start: float
    end: float


def spans(records: list[dict]) -> dict[int, Span]:
    """Each job's span (jobs that recorded both a start and an end)."""
    starts = {r["id"]: r["t"] for r in records if r["event"] == "start"}
    ends = {r["id"]: r["t"] for r in records if r["event"] == "end"}
    return {i: Span(i, starts[i], ends[i]) for i in starts if i in ends}


def overlaps(a: Span, b: Span) -> bool:
    """Whether ``a`` and ``b`` ran at the same moment."""
    return a.start < b.end and b.start < a.end


def most_beside(span: Span, others: list[Span]) -> int:
    """The most of ``others`` running at one moment during ``span``."""
    moments = [span.start] + [o.start for o in others if span.start <= o.start < span.end]
    return max(sum(1 for o in others if o.start <= t < o.end) for t in moments)
