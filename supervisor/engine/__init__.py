"""The engine room: the job flow between the queue table and the pool.

Door: ``Engine`` (``tick(now, pool)``, ``next_deadline(now, pool)``, ``dispatch``,
``drain``, ``close``) and ``make_owner`` (a supervisor's lease-owner id).

Inside: claim planning (``planner``, ``allotment``, ``ratelimit``), the ``ledger`` of
claimed and started jobs, the ``outbox`` that owns every pending write, ``claims``,
``dispatcher`` (waiting jobs into children's pipes), ``reporting`` of the pool's
outcomes, ``fencing`` (lease keeping, outages, self-fencing), ``polling`` (polls and
pauses), ``housekeeping`` (``maintenance`` rounds, breaker, schedules, kind memory,
burst end), ``draining``, ``reads`` (the arbiter's reports), ``policy`` (where a
job's settings come from), and the limits that hold across supervisors: ``limits``
(this supervisor's slices, read and renewed each half second) with ``leases`` (their
arithmetic).

``Outbox`` and the policy functions are also at the door for ``supervisor.testing``, which
runs jobs in a user's test and writes their outcomes exactly as a supervisor would.
"""

from supervisor.engine.engine import Engine
from supervisor.engine.maintenance import make_owner
from supervisor.engine.outbox import Outbox
from supervisor.engine.policy import handler_max_attempts, resolve_timeout, retry_delay

__all__ = ["Engine", "Outbox", "handler_max_attempts", "make_owner", "resolve_timeout",
           "retry_delay"]
