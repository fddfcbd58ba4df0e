"""One supervisor's side of the per-kind circuit breaker: it records its crashes (one
statement per batch of failures, only when there are crashes), and reads which kinds
are paused once per poll, so every supervisor stops starting a paused kind within a
poll interval."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

import psycopg

from shared import defaults
from supervisor.breaker import sql

log = logging.getLogger("supervisor.breaker")


@dataclass(frozen=True)
class BreakerSettings:
    """``failures`` crashes (more than) within ``window`` seconds pause a kind for
    ``cooldown`` seconds; ``failures = 0`` turns the breaker off."""

    failures: int = defaults.BREAKER_FAILURES
    window: float = defaults.BREAKER_WINDOW
    cooldown: float = defaults.BREAKER_COOLDOWN


class Breaker:
    """The kinds paused here now, and the crashes waiting to be recorded."""

    def __init__(self, settings: BreakerSettings) -> None:
        self.settings = settings
        self.paused: dict[str, str] = {}  # kind -> why, as last read
        self.pending: list[str] = []  # kinds of crashes not yet recorded

    @property
    def on(self) -> bool:
        """Whether the breaker counts crashes at all."""
        return self.settings.failures > 0

    def crashed(self, kind: str) -> None:
        """An attempt of ``kind`` crashed, hung, timed out or hit the memory cap."""
        if self.on:
            self.pending.append(kind)

    def record(self, conn: psycopg.Connection) -> list[tuple[str, int]]:
        """Write the pending crashes; returns the kinds this tripped, with their count."""
        if not self.pending:
            return []
        kinds, self.pending = self.pending, []
        s = self.settings
        tripped = [(kind, int(n)) for kind, n in conn.execute(sql.RECORD, {
            "kinds": kinds, "window": s.window, "cooldown": s.cooldown,
            "failures": s.failures}).fetchall()]
        if tripped:
            conn.execute(sql.CLEAR, {"kinds": [k for k, _ in tripped], "window": s.window})
        return tripped

    def refresh(self, conn: psycopg.Connection) -> tuple[set[str], set[str]]:
        """Read the paused kinds; returns (newly paused, newly resumed) since last read."""
        now_paused = {kind: f"{reason}" + (f", {left:.0f} s left" if left is not None else
                                           ", until resumed")
                      for kind, reason, left in conn.execute(sql.PAUSED)}
        before = set(self.paused)
        self.paused = now_paused
        return set(now_paused) - before, before - set(now_paused)

    def active(self, kinds: Iterable[str]) -> list[str]:
        """``kinds`` less the paused ones."""
        return [kind for kind in kinds if kind not in self.paused]
