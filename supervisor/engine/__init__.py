"""The engine room: the job flow between the queue table and the pool.

Door: ``Engine`` (``tick(now, pool)``, ``next_deadline(now, pool)``, ``dispatch``,
``drain``, ``close``). Inside: claim planning (``planner``, ``allotment``, ``ratelimit``),
the ``ledger`` of claimed and started jobs, the ``outbox`` that owns every pending write,
``claims``, ``reporting`` of the pool's outcomes, ``maintenance`` rounds and ``policy``
(where a job's settings come from).
"""

from supervisor.engine.engine import Engine

__all__ = ["Engine"]
