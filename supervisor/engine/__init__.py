"""The engine room: the job flow between the queue table and the pool.

Door: ``Engine`` (``tick(now, pool)``, ``next_deadline(now, pool)``, ``dispatch``,
``drain``, ``close``) and ``make_owner`` (a supervisor's lease-owner id).

Inside: claim planning (``planner``, ``allotment``, ``ratelimit``), the ``ledger`` of
claimed and started jobs, the ``outbox`` that owns every pending write, ``claims``,
``reporting`` of the pool's outcomes, ``maintenance`` rounds, ``policy`` (where a
job's settings come from), and the limits that hold across supervisors: ``limits``
(this supervisor's slices, read and renewed each half second) with ``leases`` (their
arithmetic).
"""

from supervisor.engine.engine import Engine
from supervisor.engine.maintenance import make_owner

__all__ = ["Engine", "make_owner"]
