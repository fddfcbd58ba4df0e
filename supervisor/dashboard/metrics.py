"""``GET /metrics`` of the dashboard: the queue gauges an autoscaler reads, once per
cluster (however many supervisors run, one dashboard answers for the whole database),
in the Prometheus text format.

- ``supervisor_queue_jobs{queue,state}``: jobs per queue and state, ``running`` counting
  started jobs and ``claimed`` those taken but not started (as the queues page);
- ``supervisor_queue_oldest_seconds{queue}``: how long the oldest available job has
  waited past its run_at (0 when none waits);
- ``supervisor_queue_drain_seconds{queue}``: when the queue's work would be done (see
  ``admin.status.drain_seconds``): its available, claimed and running jobs times its
  mean run time over the last hour, divided by the children serving it; without a
  measured run time, the available jobs at the last minute's pace (0 with nothing
  left; +Inf when it cannot drain: paused, unserved, or nothing measured).

The finished counts come from the dashboard's shared, periodically refreshed count
(``counts.FinishedCounts``), so a scrape every few seconds costs what a page refresh
costs.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from supervisor import admin

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    if value == float("inf"):
        return "+Inf"
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def _infinite(value: float | None) -> float:
    return float("inf") if value is None else value


def render(queues: list[dict[str, Any]]) -> str:
    """The gauges of ``queues`` (as ``admin.queue_stats`` returns them) as text."""
    lines = [
        "# HELP supervisor_queue_jobs Jobs per queue and state (running: started; "
        "claimed: taken by a supervisor, not started).",
        "# TYPE supervisor_queue_jobs gauge",
    ]
    for q in queues:
        for state in admin.COUNTED:
            if q["counts"][state] is None:
                continue  # a finished state not counted yet (past its budget): no sample
            lines.append(f'supervisor_queue_jobs{{queue="{_label(q["name"])}",'
                         f'state="{state}"}} {q["counts"][state]}')
    lines += ["# HELP supervisor_queue_oldest_seconds Seconds the oldest available job "
              "has waited past its run_at (0: none waits).",
              "# TYPE supervisor_queue_oldest_seconds gauge"]
    for q in queues:
        lines.append(f'supervisor_queue_oldest_seconds{{queue="{_label(q["name"])}"}} '
                     f'{_number(float(q["oldest_available"] or 0.0))}')
    lines += ["# HELP supervisor_queue_drain_seconds Seconds until the queue's jobs are "
              "done: jobs left times mean run time over the children serving it "
              "(+Inf: paused, unserved or unmeasured).",
              "# TYPE supervisor_queue_drain_seconds gauge"]
    for q in queues:
        lines.append(f'supervisor_queue_drain_seconds{{queue="{_label(q["name"])}"}} '
                     f'{_number(_infinite(q["drain_seconds"]))}')
    return "\n".join(lines) + "\n"


async def metrics(request: Request) -> Response:
    """``GET /metrics``: the queue gauges in the Prometheus text format."""
    finished, _age = await request.app.state.finished.get(request.app.state.db)
    queues = await request.app.state.db.run(admin.queue_stats, finished)
    return Response(render(queues), media_type=CONTENT_TYPE)


ROUTES = [Route("/metrics", metrics)]
