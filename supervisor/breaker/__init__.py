"""The circuit breaker per job kind: when more than ``breaker_failures`` attempts of a
kind crash, hang or time out within ``breaker_window`` seconds,
counted across every supervisor in the database, the kind is paused for
``breaker_cooldown``: no supervisor starts it until then (or until ``supervisor kinds
resume``). Ordinary handler exceptions and memory failures never count.

Door: ``Breaker`` (what the engine calls: record crashes, learn which kinds are
paused) and ``admin`` (``list_kinds``, ``pause_kind``, ``resume_kind`` for the CLI).
"""

from supervisor.breaker import admin
from supervisor.breaker.breaker import Breaker, BreakerSettings

__all__ = ["Breaker", "BreakerSettings", "admin"]
