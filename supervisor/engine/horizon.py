"""Telling the operator who pins the MVCC horizon (issue 40): a warning past a threshold
that names the holder and what it costs, repeated at most every ``REPEAT_EVERY`` while
the same holder stays, a line when it lets go, and the gauges ``/metrics`` shows.

A look is a ``supervisor.db.horizon.HorizonReport``; this module only decides what to
say. Each supervisor looks and warns on its own (every ``HORIZON_LOOK_EVERY``, so a fleet
of N says it N times per ``REPEAT_EVERY``): the holder is the database's, not one
supervisor's, and a lone supervisor must say it too.
"""

from __future__ import annotations

import logging

from shared.horizon import HorizonReport
from supervisor.observe import SupervisorMetrics

log = logging.getLogger("supervisor.horizon")

REPEAT_EVERY = 600.0  # seconds between two warnings about the same holder
# A pass from an index's start (the claim cursors' poll from the head, the leader's full
# rescue and prune scans) walks every entry a held horizon keeps, each one longer than
# the last, so while one is held such passes wait this many times the hold's age, at most
# HELD_SPACING_MAX: their reads stay near 1 / HELD_SPACING entries a job (a poll a minute
# through a 20-minute hold at 1,000 jobs/s walked 12.6 million entries for 1.2 million
# jobs). The price: what only such a pass finds waits up to that long during a hold.
HELD_SPACING = 4.0
HELD_SPACING_MAX = 1800.0
# Seconds such a pass still waits after a look finds the hold let go: the versions it
# kept stay until a vacuum has been by (autovacuum finished 1 min 45 s after a 20-minute
# hold at 1,000 jobs/s let go), and the first pass over them walks them all (the full
# rescue: 518 ms on the loop's connection).
AFTER_HOLD = 300.0


def spaced_by_hold(every: float, held: float) -> float:
    """Seconds between two passes from an index's start: ``every``, or longer while the
    MVCC horizon has been held ``held`` seconds."""
    return max(every, min(HELD_SPACING * held, HELD_SPACING_MAX))


class HeldPassPacing:
    """When the next pass from an index's start is due after the last one: ``every``
    seconds, spaced by the hold's age while the looks at the MVCC horizon find it held
    (``spaced_by_hold``), and not before ``AFTER_HOLD`` after the look that found it let
    go. The full rescue and prune passes (``ScanFloor``) and the claim's poll from the
    head (``ClaimCursors``) each keep one."""

    def __init__(self, every: float) -> None:
        self.every = every
        self.held = 0.0  # how long the horizon was held at the last look, seconds
        self._quiet_until = float("-inf")

    def looked(self, held: float, now: float) -> None:
        """A look at ``now`` found the horizon held ``held`` seconds (0: not held)."""
        if self.held > 0 and held == 0:
            self._quiet_until = now + AFTER_HOLD
        self.held = held

    def due(self, last: float) -> float:
        """When the pass after one at ``last`` is due."""
        return max(last + spaced_by_hold(self.every, self.held), self._quiet_until)


class HorizonWatch:
    """Warnings and gauges from each look at the horizon."""

    def __init__(self, warn_after: float, metrics: SupervisorMetrics | None = None) -> None:
        self.warn_after = warn_after  # 0: never warn
        self.metrics = metrics
        self._warned: tuple | None = None  # the holder last warned about
        self._warned_at = 0.0
        self._worst = 0.0  # longest hold seen of the holder warned about

    def looked(self, report: HorizonReport, now: float) -> None:
        """A look at ``now`` (monotonic)."""
        if self.metrics is not None:
            self.metrics.horizon(report.held_seconds, report.dead_rows)
        holder = report.holder
        held = report.held_seconds
        over = self.warn_after > 0 and holder is not None and (
            held >= self.warn_after
            # A slot has no clock: one that nobody consumes holds the horizon for good.
            or (holder.sort == "replication slot" and holder.state == "inactive"))
        identity = ((holder.sort, holder.pid, holder.application, holder.since)
                    if holder is not None else None)
        if self._warned is not None and (not over or identity != self._warned):
            log.info("the MVCC horizon is no longer held by the holder warned about "
                     "(held %.0f s at the last look); dead row versions in "
                     "supervisor.jobs can be vacuumed again: %d now",
                     self._worst, report.dead_rows)
            self._warned = None
        if not over or holder is None:
            return
        self._worst = held
        if identity == self._warned and now - self._warned_at < REPEAT_EVERY:
            return
        self._warned, self._warned_at = identity, now
        age = f"for {held:.0f} s" if holder.seconds is not None else "(a slot: no clock)"
        log.warning("the MVCC horizon is held %s by %s; %d dead row versions in "
                    "supervisor.jobs cannot be vacuumed until it lets go, and each job "
                    "adds 2-4 that claims must walk past (docs/operations.md, "
                    "'A pinned MVCC horizon')", age, holder.describe(), report.dead_rows)
