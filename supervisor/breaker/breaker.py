"""One supervisor's side of the per-kind circuit breaker: it records its crashes (one
statement per batch of failures, only when there are crashes), and reads which kinds
are paused once per poll, so every supervisor stops starting a paused kind within a
poll interval. The statements are the store's (``Store.record_crashes``,
``Store.paused_kinds``), passed in by the engine."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from shared import defaults
from shared.validation import short_name

if TYPE_CHECKING:
    class Tripped(Protocol):
        """A kind the crashes just recorded paused (``supervisor.db.TrippedKind``)."""

        @property
        def kind(self) -> str: ...

        @property
        def crashes(self) -> int: ...

    class Pause(Protocol):
        """Why a kind is paused, for how long (``supervisor.db.KindPause``)."""

        @property
        def reason(self) -> str: ...

        @property
        def seconds_left(self) -> float | None: ...

    class Store(Protocol):
        """The two statements of ``supervisor.db.Store`` the breaker runs."""

        def record_crashes(self, kinds: Sequence[str],
                           limits: BreakerSettings) -> Sequence[Tripped]: ...

        def paused_kinds(self) -> Mapping[str, Pause]: ...

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
        # Seconds from the last read until the first timed pause ran out (None: none).
        self.first_expiry: float | None = None
        self.pending: list[str] = []  # kinds of crashes not yet recorded

    @property
    def on(self) -> bool:
        """Whether the breaker counts crashes at all."""
        return self.settings.failures > 0

    def crashed(self, kind: str) -> None:
        """An attempt of ``kind`` failed in a way its ``CrashRule`` counts. Kept
        under ``short_name(kind)``: a kind stored before schema 0022's length limit is
        counted and paused too, under a name the breaker's tables can key."""
        if self.on:
            self.pending.append(short_name(kind))

    def record(self, store: Store) -> Sequence[Tripped]:
        """Write the pending crashes; returns the kinds this tripped, with their count."""
        if not self.pending:
            return []
        kinds, self.pending = self.pending, []
        return store.record_crashes(kinds, self.settings)

    def refresh(self, store: Store) -> tuple[set[str], set[str]]:
        """Read the paused kinds; returns (newly paused, newly resumed) since last read."""
        pauses = store.paused_kinds()
        now_paused = {kind: f"{pause.reason}" + (
                          f", {pause.seconds_left:.0f} s left"
                          if pause.seconds_left is not None else ", until resumed")
                      for kind, pause in pauses.items()}
        self.first_expiry = min((pause.seconds_left for pause in pauses.values()
                                 if pause.seconds_left is not None), default=None)
        before = set(self.paused)
        self.paused = now_paused
        return set(now_paused) - before, before - set(now_paused)

    def active(self, kinds: Iterable[str]) -> list[str]:
        """``kinds`` less the paused ones."""
        paused = self.paused
        if not paused:
            return list(kinds)
        return [kind for kind in kinds if short_name(kind) not in paused]
