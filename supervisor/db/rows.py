"""The rows the store's maintenance and breaker statements read back, as typed records
instead of positional tuples."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(slots=True, frozen=True)
class Rescued:
    """A running job whose lease had expired, put back by the maintenance leader."""

    id: int
    lost_owner: str
    never_started: bool  # given back without spending its attempt


@dataclass(slots=True, frozen=True)
class LeadRound:
    """A maintenance round this supervisor led: what its rescue put back, the server's
    clock when the round began (epoch seconds), and whether a rescue could run (not in
    the first lease TTL after the server started, when every lease looks expired)."""

    rescued: list[Rescued]
    began_at: float
    rescue_open: bool


@dataclass(slots=True, frozen=True)
class TrippedKind:
    """A kind the breaker just paused, with the crashes that tripped it."""

    kind: str
    crashes: int


@dataclass(slots=True, frozen=True)
class KindPause:
    """Why a kind is paused now, and for how many more seconds (None: until resumed)."""

    reason: str
    seconds_left: float | None


@dataclass(slots=True, frozen=True)
class LaterWork:
    """Scheduled or retrying jobs not yet due: how many, and the earliest run_at."""

    count: int = 0
    earliest: datetime | None = None
