"""Jobs that wait for resources (issue 27), for ``status`` and the dashboard: those the
live supervisors hold back until their reservation fits (each says so in its heartbeat's
``info.admission``), and those beyond the budget of every live supervisor."""

from __future__ import annotations

from typing import Any

import orjson
import psycopg

from shared.units import format_size

# Available jobs that declare more than the largest budget of any live supervisor.
_BEYOND_EVERY_BUDGET = """
SELECT cpus, memory, resources::text FROM supervisor.jobs
WHERE state = 'available'
  AND (cpus > %(cpus)s OR memory > %(memory)s
       OR NOT supervisor.resources_fit(resources, %(resources)s::jsonb))
LIMIT 1000
"""


def waiting_for_resources(conn: psycopg.Connection,
                          supervisors: list[dict[str, Any]]) -> dict[str, Any]:
    """``{"count": n, "why": [...], "held": {...}}``: how many jobs wait for resources
    and the reasons in words (``needs 6 GiB, budget 4 GiB``, ``needs gpu=1, no
    supervisor has gpu``), at most five distinct ones; and, where supervisors declare
    counted resources (issue 45), how many of each they hold now of how many they have
    (``"held": {"gpu": {"held": 1, "total": 2}}``)."""
    count = 0
    why: list[str] = []
    budgets = []
    held: dict[str, dict[str, int]] = {}
    for sup in supervisors:
        info = sup.get("info")  # a row written by hand may hold anything
        admission = info.get("admission") if isinstance(info, dict) else None
        if isinstance(admission, dict):
            count += int(admission.get("waiting") or 0)
            why += [str(w) for w in admission.get("why") or ()]
            budgets.append((int(admission.get("cpus") or sup["children"] or 0),
                            admission.get("memory")))
            _add_held(held, admission.get("resources"))
        else:
            budgets.append((int(sup["children"] or 0), None))
    most_resources = {name: max(0, counts["most"]) for name, counts in held.items()}
    if budgets:
        most_cpus = max(c for c, _ in budgets)
        memories = [m for _, m in budgets]
        # A supervisor without a memory budget holds any memory: none is beyond it.
        most_memory = None if None in memories else max(int(m or 0) for m in memories)
        rows = conn.execute(_BEYOND_EVERY_BUDGET, {
            "cpus": most_cpus,
            "memory": most_memory if most_memory is not None else 1 << 62,
            "resources": orjson.dumps(most_resources).decode()}).fetchall()
        count += len(rows)
        for cpus, memory, resources in rows:
            if cpus is not None and cpus > most_cpus:
                why.append(f"needs {cpus} CPUs, budget {most_cpus}")
            elif (memory is not None and most_memory is not None
                  and memory > most_memory):
                why.append(f"needs {format_size(memory)}, budget {format_size(most_memory)}")
            elif resources is not None:
                why.append(_beyond_resources(orjson.loads(resources), most_resources))
    found: dict[str, Any] = {"count": count, "why": sorted(set(why))[:5]}
    if held:  # only where some supervisor declares counted resources
        found["held"] = {name: {"held": c["held"], "total": c["total"]}
                         for name, c in sorted(held.items())}
    return found


def _add_held(held: dict[str, dict[str, int]], reported: Any) -> None:
    """Add one supervisor's counted resources (its heartbeat's report) to ``held``."""
    if not isinstance(reported, dict):
        return
    for name, counts in reported.items():
        if not isinstance(counts, dict):
            continue
        total, now = int(counts.get("total") or 0), int(counts.get("held") or 0)
        entry = held.setdefault(str(name), {"held": 0, "total": 0, "most": 0})
        entry["held"] += now
        entry["total"] += total
        entry["most"] = max(entry["most"], total)


def _beyond_resources(needs: Any, most: dict[str, int]) -> str:
    """Why a job's counted resources fit no live supervisor, in words."""
    if isinstance(needs, dict):
        for name, n in sorted(needs.items()):
            have = most.get(name, 0)
            if not isinstance(n, int) or n > have:
                return (f"needs {name}={n}, " + (f"at most {name}={have} on a supervisor"
                                                 if have else f"no supervisor has {name}"))
    return "needs resources no supervisor has"


def describe_held(held: dict[str, Any]) -> str | None:
    """The status line of the counted resources held (``resources held: gpu 1/2``)."""
    if not held:
        return None
    return "resources held: " + ", ".join(
        f"{name} {c['held']}/{c['total']}" for name, c in sorted(held.items()))


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
