"""``supervisor status``: per queue counts by state, throughput, oldest waiting job and
pause flag; then queues nobody serves and the live supervisors. ``--json`` for
machines, ``--watch`` to redraw in place until Ctrl-C."""

from __future__ import annotations

import time
from typing import Any

import click

from shared.shmspace import shm_warning
from shared.units import format_size
from shared.validation import printable
from supervisor import admin
from supervisor.cli.common import dsn_option, open_database, reports_errors
from supervisor.cli.format import age, describe_limits, job_seconds, json_text, table

# Column order follows a job's life: waiting, in flight, then the finished states. RUN
# counts started jobs only; CLAIM those a supervisor took and has not started yet.
_SHORT = {"available": "AVAIL", "scheduled": "SCHED", "claimed": "CLAIM", "running": "RUN",
          "retryable": "RETRY", "completed": "DONE", "discarded": "DISC", "cancelled": "CANC",
          "expired": "EXP"}
STATES = tuple(_SHORT)
_CLEAR = "\x1b[H\x1b[2J"  # cursor home, clear screen


@click.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--watch", is_flag=True, help="Redraw every --interval seconds until Ctrl-C.")
@click.option("--interval", type=click.FloatRange(min=0.1), default=2.0, show_default=True,
              metavar="SECONDS", help="Refresh period of --watch.")
@click.option("--kinds", is_flag=True,
              help="Also what each kind costs over the last hour's finished jobs (at most "
                   "the newest 10,000): count, failure rate, p50/p95 of wall time, CPU "
                   "time and peak memory.")
@click.option("--keys", is_flag=True,
              help="Also what each concurrency key's jobs cost over the last day's "
                   "finished jobs, every attempt counted: CPU-seconds, wall-seconds, "
                   "peak memory p95, attempts and retries.")
@click.option("--explain", is_flag=True,
              help="Also, per live supervisor and queue it serves, what its tuning rules "
                   "decide now (claim, depth, pipe, its cap, overrun threshold, carry "
                   "waits) and which rule of supervisor/tuning.py set each, as of its "
                   "last heartbeat.")
@click.option("--count-finished", is_flag=True,
              help="Count the finished jobs however long it takes (by default the count "
                   f"gives up after {admin.FINISHED_COUNT_BUDGET:g} s, and DONE, DISC, CANC "
                   "and EXP show ?).")
@dsn_option
@reports_errors
def status_command(as_json: bool, watch: bool, interval: float, kinds: bool, keys: bool,
                   explain: bool, count_finished: bool,
                   dsn: str | None) -> None:
    """Queues (jobs by state, RUN counting started jobs and CLAIM those claimed but not
    started yet; completed per second over the last minute; age of the oldest available
    job; DRAIN, when the waiting jobs would be done at that pace; paused), queues with
    waiting jobs that no live supervisor serves, the live supervisors (heartbeat
    within 15 s: three maintenance rounds), and those presumed dead (silent longer,
    with when they were last seen and when the jobs they held are rescued)."""
    finished = FinishedPacer(None if count_finished else admin.FINISHED_COUNT_BUDGET)
    with open_database(dsn) as conn:
        if not watch:
            click.echo(_render(_snapshot(conn, finished.tally(conn), kinds, keys, explain),
                               as_json))
            return
        try:
            while True:
                text = _render(_snapshot(conn, finished.tally(conn), kinds, keys, explain),
                               as_json)
                # JSON watchers get one object per line (a stream); people get a redraw.
                click.echo(text if as_json else _CLEAR + text + f"\n\nevery {interval:g}s, "
                           "Ctrl-C to stop")
                time.sleep(interval)
        except KeyboardInterrupt:
            return


class FinishedPacer:
    """The finished jobs' counts for ``status`` and each redraw of ``--watch``: counted
    within ``budget`` seconds (None: however long), and on a watch counted again only
    once the count has rested ``1 / admin.FINISHED_COUNT_SHARE`` times as long as it
    took, so a slow count takes at most that share of a backend (a count that ran out of
    its 2 s budget is tried every 20 s; one of a few milliseconds, at every redraw)."""

    def __init__(self, budget: float | None) -> None:
        self.budget = budget
        self._last: admin.FinishedTally | None = None
        self._began = 0.0  # time.monotonic() of the last count
        self._took = 0.0  # its seconds

    def tally(self, conn) -> admin.FinishedTally:
        """The finished counts, counted now or reused from the last count."""
        began = time.monotonic()
        rest = self._took / admin.FINISHED_COUNT_SHARE
        if self._last is None or began - self._began >= rest:
            self._last = admin.finished_counts(conn, self.budget)
            self._began, self._took = began, time.monotonic() - began
        return self._last


def _snapshot(conn, finished: admin.FinishedTally, kinds: bool = False, keys: bool = False,
              explain: bool = False) -> dict[str, Any]:
    """The queue's status (the finished jobs' counts as ``finished`` has them) and the
    next schedule fires (empty without schedules); with ``kinds``, what each kind cost
    recently; with ``keys``, each concurrency key; with ``explain``, what each
    supervisor's tuning rules decide."""
    from supervisor.schedules import admin as schedules_admin

    snapshot = admin.status(conn, finished) | {
        "next_fires": schedules_admin.upcoming(conn, limit=5), "horizon": admin.horizon(conn),
        "storage": admin.storage(conn)}
    if kinds:
        snapshot["kinds"] = admin.kind_usage(conn)
    if keys:
        snapshot["keys"] = admin.key_usage(conn)
    if explain:
        snapshot["explain"] = admin.explain(conn)
    return snapshot


def _render(snapshot: dict[str, Any], as_json: bool) -> str:
    if as_json:
        return json_text(snapshot)
    return render_text(snapshot)


def render_text(snapshot: dict[str, Any]) -> str:
    """The status snapshot as the table a person reads."""
    parts = [_queues_table(snapshot["queues"])]
    uncounted = finished_note(snapshot.get("finished"))
    if uncounted:
        parts.append(uncounted)
    deps = [q for q in snapshot["queues"] if q.get("waiting_for_dependencies")]
    if deps:
        parts.append("waiting for their dependencies, not for a time (counted in SCHED): "
                     + ", ".join(f"{printable(q['name'])} {q['waiting_for_dependencies']}"
                                 for q in deps))
    if snapshot["unserved"]:
        parts.append("waiting with no live supervisor serving the queue: "
                     + ", ".join(printable(name) for name in snapshot["unserved"]))
    if snapshot["unhandled"]:
        parts.append("waiting with no handler in any live supervisor: " + ", ".join(
            f"{printable(u['kind'])} (queue {printable(u['queue'])})"
            for u in snapshot["unhandled"]))
    waiting = snapshot.get("waiting_for_resources") or {}
    resources = admin.describe_waiting(waiting)
    if resources:
        parts.append(resources)
    counted = admin.describe_resources_held(waiting.get("held") or {})
    if counted:
        parts.append(counted)
    for paused in snapshot.get("paused_kinds") or ():
        until = paused["until"] or "resumed by hand"
        parts.append(f"kind {printable(paused['kind'])} paused until {until}: "
                     f"{printable(paused['reason'])}")
    held = admin.describe_horizon(snapshot.get("horizon"))
    if held:
        parts.append(held)
    swollen = admin.describe_storage(snapshot.get("storage"))
    if swollen:
        parts.append(swollen)
    parts.append(_supervisors_table(snapshot["supervisors"], snapshot["stale_supervisors"]))
    dead = presumed_dead_lines(snapshot.get("presumed_dead") or [])
    if dead:
        parts.append("\n".join(dead))
    native = native_lines(snapshot["supervisors"])
    if native:
        parts.append("\n".join(native))
    memory = memory_lines(snapshot["supervisors"])
    if memory:
        parts.append("\n".join(memory))
    if "kinds" in snapshot:
        parts.append(kinds_table(snapshot["kinds"]))
    if "keys" in snapshot:
        parts.append(keys_table(snapshot["keys"]))
    if "explain" in snapshot:
        parts.append(explain_text(snapshot["explain"]))
    if snapshot.get("next_fires"):
        rows = [[printable(f["name"]), printable(f["expression"]), str(f["next_fire"])]
                for f in snapshot["next_fires"]]
        parts.append("next schedule fires\n" + table(["SCHEDULE", "EVERY", "NEXT"], rows))
    parts.extend(filter(None, [shm_warning()]))  # this machine's /dev/shm near full
    return "\n\n".join(parts)


def finished_note(finished: dict[str, Any] | None) -> str:
    """Why DONE, DISC, CANC and EXP show ``?``: the count passed its budget; empty when
    they were counted."""
    if not finished or finished.get("counted", True):
        return ""
    rows = finished.get("estimated_rows")
    size = f"{rows:,} rows by the planner's estimate" if isinstance(rows, int) else "its rows"
    budget = finished.get("budget")
    if budget is None:  # --count-finished, cancelled by the role's or server's own timeout
        return (f"finished jobs not counted: the count was cancelled by the server's "
                f"statement_timeout (supervisor.jobs holds {size}); the index "
                "jobs_state_queue_idx of docs/dashboard.md makes it quicker.")
    return (f"finished jobs not counted: counting them took over {budget:g} s "
            f"(supervisor.jobs holds {size}). --count-finished waits for the count; the "
            "index jobs_state_queue_idx of docs/dashboard.md makes it quicker.")


def _decided(said: Any) -> str:
    """``{"value", "rule"}`` as ``value (rule)``; ``-`` for no value."""
    if not isinstance(said, dict):
        return "?"
    value = said.get("value")
    shown = "-" if value is None else f"{value:g}" if isinstance(value, float) else str(value)
    return f"{shown} ({printable(str(said.get('rule')))})"


def _ms(seconds: Any) -> str:
    return "-" if not isinstance(seconds, int | float) else f"{seconds * 1000:.1f}ms"


def explain_text(supervisors: list[dict[str, Any]]) -> str:
    """``status --explain``: per live supervisor, what its tuning rules decide for each
    queue it serves and, per kind seen there, its overrun threshold and pipe cap."""
    if not supervisors:
        return "tuning: no live supervisor"
    parts = []
    for sup in supervisors:
        head = (f"tuning of {printable(sup['id'])} (pid {sup['pid']}, as of its heartbeat "
                f"{age(sup['heartbeat_age'])} ago; rules: supervisor/tuning.py)")
        queues = sup["queues"]
        if not queues:
            parts.append(head + "\n  publishes no tuning (an older version)")
            continue
        rows = [[printable(name), str(q.get("children", "?")), _decided(q.get("claim")),
                 _decided(q.get("depth")), _decided(q.get("pipe")), _ms(q.get("run_time")),
                 _ms(q.get("claim_latency")),
                 _decided((q.get("carry") or {}).get("claim_coming"))]
                for name, q in sorted(queues.items())]
        text = head + "\n" + table(["QUEUE", "CHILDREN", "CLAIM", "DEPTH/CHILD", "PIPE",
                                     "RUN TIME", "CLAIM RTT", "CARRY WAIT"], rows)
        kinds = [[printable(kind), printable(name), _ms(k.get("p95")),
                  _decided(k.get("overrun_after")), _decided(k.get("pipe_cap"))]
                 for name, q in sorted(queues.items())
                 for kind, k in sorted((q.get("kinds") or {}).items())
                 if isinstance(k, dict)]
        if kinds:
            text += "\n" + table(["KIND", "QUEUE", "P95", "OVERRUN AFTER", "PIPE CAP"], kinds)
        parts.append(text)
    return "\n\n".join(parts)


def _queues_table(queues: list[dict[str, Any]]) -> str:
    if not queues:
        return "no queues: no jobs yet"
    headers = ["QUEUE", *(_SHORT[s] for s in STATES), "RATE/s", "OLDEST", "DRAIN", "LIMITS",
               "PAUSED"]
    rows = [[q["name"], *(_count(q["counts"][s]) for s in STATES), f"{q['rate']:.2f}",
             age(q["oldest_available"]), _drain(q), describe_limits(q.get("limits")),
             "paused" if q["paused"] else "-"] for q in queues]
    return table(headers, rows, right=range(1, len(STATES) + 4))


def _count(n: int | None) -> int | str:
    return "?" if n is None else n  # None: a finished state not counted (finished_note)


def _drain(queue: dict[str, Any]) -> str:
    # When the queue's jobs would be done (admin.status.drain_seconds).
    seconds = queue["drain_seconds"]
    if seconds is None:
        return "never"  # paused, unserved, or jobs wait and nothing is measured
    return "-" if seconds == 0 else age(seconds)


def presumed_dead_lines(silent: list[dict[str, Any]]) -> list[str]:
    """One line per supervisor presumed dead: when it was last seen, what it was doing,
    and when the jobs it still holds go back."""
    lines = []
    for s in silent:
        line = (f"presumed dead: {printable(str(s['host']))} pid {s['pid']} (queues "
                f"{printable(','.join(s['queues'] or [])) or '-'}), last seen "
                f"{age(s['heartbeat_age'])} ago, {s['busy']}/{s['children']} busy then; "
                f"no heartbeat for {admin.LIVE_AFTER_SECONDS:g} s counts as dead")
        held = s.get("jobs_held") or 0
        if held:
            expires = s.get("leases_expire_in")
            when = ("at the next maintenance round" if expires is None or expires <= 0
                    else f"once its leases expire, in {age(expires)}, at the next "
                         "maintenance round")
            line += (f". Its {held} job{'s go' if held != 1 else ' goes'} back {when} "
                     "(lease_ttl after its last renewal)")
        lines.append(line)
    return lines


def _supervisors_table(sups: list[dict[str, Any]], stale: int) -> str:
    note = f" ({stale} presumed dead, below)" if stale else ""
    if not sups:
        return f"no live supervisors{note}"
    rows = [[s["host"], s["pid"], f"{s['busy']}/{s['children']}", age(s["heartbeat_age"]),
             age(s["uptime"]), ",".join(s["queues"]) or "-"] for s in sups]
    heading = f"{len(sups)} live supervisor{'s' if len(sups) != 1 else ''}{note}"
    return heading + "\n" + table(["HOST", "PID", "BUSY", "BEAT", "UP", "QUEUES"], rows,
                                  right=(1, 2, 3, 4))


def native_lines(sups: list[dict[str, Any]]) -> list[str]:
    """One line per child busy in native code (silent, CPU time moving) at its
    supervisor's last beat."""
    return [f"busy in native code: job {n['job']} {printable(str(n['kind']))} in worker "
            f"{n['worker']} (pid {n['pid']}) of {printable(s['host'])}:{s['pid']}, "
            f"silent for {age(n['seconds'])}"
            for s in sups for n in s.get("native") or ()]


def memory_lines(sups: list[dict[str, Any]]) -> list[str]:
    """One line per supervisor with a memory budget: the budget, its source, what its
    jobs hold, the container's usage, and how a job's memory is measured."""
    lines = []
    for s in sups:
        memory = s.get("memory")
        if not memory or memory.get("budget") is None:
            continue
        line = (f"memory of {printable(s['host'])}:{s['pid']}: budget "
                f"{format_size(memory['budget'])} ({printable(str(memory['source']))}), "
                f"{format_size(memory.get('held') or 0)} held")
        container = memory.get("container")
        if container and container.get("usage") is not None:
            line += (f"; container {format_size(container['usage'])} in use of "
                     f"{format_size(container['limit'])}")
        if memory.get("measure"):
            line += f"; a job's memory: {printable(str(memory['measure']))}"
        lines.append(line)
    return lines


def keys_table(keys: list[dict[str, Any]]) -> str:
    """What each concurrency key's jobs cost over the last day, every attempt counted."""
    if not keys:
        return "no job with a concurrency key finished in the last day"

    def size(value: int | None) -> str:
        return "-" if value is None else format_size(value)

    rows = [[printable(k["key"]), k["jobs"], k["attempts"], k["retries"],
             f"{k['cpu_seconds']:.1f}", f"{k['wall_seconds']:.1f}", size(k["peak_rss_p95"]),
             size(k["peak_rss_max"])] for k in keys]
    return "concurrency keys, last day's finished jobs (every attempt)\n" + table(
        ["KEY", "JOBS", "ATTEMPTS", "RETRIES", "CPU-s", "WALL-s", "MEM p95", "MAX"],
        rows, right=range(1, 8))


def kinds_table(kinds: list[dict[str, Any]]) -> str:
    """What each kind cost over recent finished jobs."""
    if not kinds:
        return "no finished jobs in the last hour"

    def pair(value: dict[str, Any] | None, show) -> list[str]:
        return ["-", "-"] if value is None else [show(value["p50"]), show(value["p95"])]

    rows = [[printable(k["kind"]), k["jobs"], f"{100 * k['failure_rate']:.1f}%",
             *pair(k["wall_seconds"], job_seconds), *pair(k["cpu_seconds"], job_seconds),
             *pair(k["max_rss_bytes"], format_size)] for k in kinds]
    return "kinds, last hour's finished jobs\n" + table(
        ["KIND", "JOBS", "FAILED", "WALL p50", "p95", "CPU p50", "p95", "MEM p50", "p95"],
        rows, right=range(1, 9))
