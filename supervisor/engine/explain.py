"""What the tuning table decides for each served queue right now, and which rule decided
it (issue 41): published on the heartbeat (``info["explain"]``, once a maintenance
round) for ``supervisor status --explain``, with a debug line whenever a value moved
since the last round.

Per queue: the children allotted now and the claim they call for (``claim``), the jobs
held per child (``depth``) and per pipe (``pipe``), the measured run time and claim
latency they come from, and the carry waits (how long finished jobs wait for a claim to
carry them); per kind seen in it, the overrun threshold of a head job and the pipe cap of
a tailed kind. Each value is ``{"value": ..., "rule": ...}``, the rule a field of
``supervisor.tuning.Tuning`` or ``prefetch`` (the queue's own setting), ``unmeasured``
(no run time yet) or ``no work`` (no child allotted).
"""

from __future__ import annotations

import logging
from typing import Any

from supervisor.engine.depth import Decided
from supervisor.engine.planner import Scheduler
from supervisor.pool import RunTimes

log = logging.getLogger("supervisor.engine")


def _said(value: Any, rule: str) -> dict[str, Any]:
    return {"value": value, "rule": rule}


def _seconds(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


class Explainer:
    """Builds each round's explanation and logs what moved since the last one."""

    def __init__(self, planner: Scheduler, run_times: RunTimes) -> None:
        self.planner = planner
        self.run_times = run_times
        self._last: dict[str, dict[str, Any]] = {}

    def publish(self, pool_size: int) -> dict[str, dict[str, Any]]:
        """Per served queue, what the rules decide now (JSON-ready); logs the changes."""
        explained = {queue: self.queue(queue, pool_size) for queue in self.planner.queues}
        for queue, now in explained.items():
            before = self._last.get(queue)
            if before is not None:
                for name, said, was in _changes(before, now):
                    log.debug("queue %s: %s is now %s (was %s)", queue, name, said, was)
        self._last = explained
        return explained

    def queue(self, queue: str, pool_size: int) -> dict[str, Any]:
        """What the rules decide for ``queue`` now."""
        planner, times = self.planner, self.run_times
        tuning = planner.tuning
        prefetch = planner.policies[queue].prefetch
        depth = planner.depth
        per_child = (Decided(prefetch, "prefetch") if prefetch is not None
                     else depth.decide_depth(queue))
        pipe = (Decided(max(1, prefetch), "prefetch") if prefetch is not None
                else depth.decide_pipeline(queue))
        children = planner.targets(pool_size).get(queue, 0)
        claim = (_said(children * per_child.value, per_child.rule) if children
                 else _said(0, "no work"))
        run_time = times.queue_average(queue)
        short = run_time is not None and run_time < tuning.long_job
        carry = {
            "claim_coming": (_said(tuning.claim_carry_wait, "claim_carry_wait") if short
                             else _said(None, "long_job" if run_time is not None
                                        else "unmeasured")),
            "claim_in_flight": _said(tuning.carry_limit, "carry_limit"),
            "start_hold": _said(tuning.start_hold, "start_hold"),
            "start_carry_age": _said(tuning.start_carry_age, "start_carry_age"),
        }
        kinds = {}
        for kind in times.kinds_of(queue):
            overrun = times.overrun_after(kind)
            cap = times.pipe_cap(kind)
            kinds[kind] = {
                "p95": _seconds(times.p95(kind)),
                "overrun_after": _said(_seconds(overrun),
                                       "min_overrun" if overrun <= tuning.min_overrun
                                       else "overrun_factor"),
                "pipe_cap": (_said(None, "no tail runs") if cap is None else
                             _said(cap, "long_job" if cap < tuning.min_tail_pipe
                                   else "min_tail_pipe" if cap == tuning.min_tail_pipe
                                   else "tail_share")),
            }
        return {
            "children": children,
            "claim": claim,
            "depth": _said(per_child.value, per_child.rule),
            "pipe": _said(pipe.value, pipe.rule),
            "run_time": _seconds(run_time),
            "typical_run_time": _seconds(times.queue_typical(queue)),
            "claim_latency": _seconds(depth.latency),
            "carry": carry,
            "kinds": kinds,
        }


def _changes(before: dict[str, Any], now: dict[str, Any],
             prefix: str = "") -> list[tuple[str, str, str]]:
    """The decided values (``{"value", "rule"}``) that differ: name, now, before."""
    moved = []
    for key, said in now.items():
        name = f"{prefix}{key}"
        old = before.get(key)
        if isinstance(said, dict) and "rule" in said:
            if old != said:
                moved.append((name, _shown(said), _shown(old)))
        elif isinstance(said, dict):
            moved += _changes(old if isinstance(old, dict) else {}, said, f"{name} ")
    return moved


def _shown(said: Any) -> str:
    if isinstance(said, dict) and "rule" in said:
        return f"{said['value']} ({said['rule']})"
    return "none"
