"""Jobs that wait for resources (issue 27), for ``status`` and the dashboard: those the
live supervisors hold back until their reservation fits (each says so in its heartbeat's
``info.admission``), and those beyond the budget of every live supervisor."""

from __future__ import annotations

from typing import Any

import psycopg

from shared.units import format_size

# Available jobs that declare more than the largest budget of any live supervisor.
_BEYOND_EVERY_BUDGET = """
SELECT cpus, memory FROM supervisor.jobs
WHERE state = 'available'
  AND (cpus > %(cpus)s OR memory > %(memory)s)
LIMIT 1000
"""


def waiting_for_resources(conn: psycopg.Connection,
                          supervisors: list[dict[str, Any]]) -> dict[str, Any]:
    """``{"count": n, "why": [...]}``: how many jobs wait for resources and the reasons
    in words (``needs 6 GiB, budget 4 GiB``), at most five distinct ones."""
    count = 0
    why: list[str] = []
    budgets = []
    for sup in supervisors:
        info = sup.get("info")  # a row written by hand may hold anything
        admission = info.get("admission") if isinstance(info, dict) else None
        if isinstance(admission, dict):
            count += int(admission.get("waiting") or 0)
            why += [str(w) for w in admission.get("why") or ()]
            budgets.append((int(admission.get("cpus") or sup["children"] or 0),
                            admission.get("memory")))
        else:
            budgets.append((int(sup["children"] or 0), None))
    if budgets:
        most_cpus = max(c for c, _ in budgets)
        memories = [m for _, m in budgets]
        # A supervisor without a memory budget holds any memory: none is beyond it.
        most_memory = None if None in memories else max(int(m or 0) for m in memories)
        rows = conn.execute(_BEYOND_EVERY_BUDGET, {
            "cpus": most_cpus,
            "memory": most_memory if most_memory is not None else 1 << 62}).fetchall()
        count += len(rows)
        for cpus, memory in rows:
            if cpus is not None and cpus > most_cpus:
                why.append(f"needs {cpus} CPUs, budget {most_cpus}")
            elif memory is not None and most_memory is not None:
                why.append(f"needs {format_size(memory)}, budget {format_size(most_memory)}")
    return {"count": count, "why": sorted(set(why))[:5]}


_PAUSED_KINDS = """
SELECT kind, reason, paused_until FROM supervisor.kind_pauses
WHERE paused_until IS NULL OR paused_until > now()
ORDER BY kind
"""


def paused_kinds(conn: psycopg.Connection) -> list[dict[str, Any]]:
    """Kinds no supervisor starts now (circuit breaker or ``supervisor kinds pause``)."""
    return [{"kind": kind, "reason": reason, "until": until}
            for kind, reason, until in conn.execute(_PAUSED_KINDS)]


def describe(waiting: dict[str, Any]) -> str | None:
    """The status line for ``waiting_for_resources``'s answer (None: nothing waits)."""
    if not waiting.get("count"):
        return None
    reasons = "; ".join(waiting.get("why") or ())
    n = waiting["count"]
    return f"waiting for resources: {n} job{'s' if n != 1 else ''}" + (
        f" ({reasons})" if reasons else "")
