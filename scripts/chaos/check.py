"""The end checks of a chaos run, from the jobs table and the handlers' run log.

A job passes when:

* it is final: ``completed``, or ``discarded`` for its own reason (its handler discards
  or always fails by design, or it spent all its attempts), never left running or waiting;
* every failed attempt in ``errors`` is either designed (the kind raises on purpose) or
  an interruption (``crashed``, ``lease_expired``, ``shutdown``, ``timeout``, ``hung``);
* it ran once per attempt, except where the attempt was interrupted: for each attempt,
  the runs in the log are at most the errors entries for that attempt, plus one for the
  attempt that completed it. A run cut short (no end record) needs an interruption entry;
* a completed job's final attempt has a run that reached its end, with the expected result.

One exception, by design: a supervisor records a start after its child has begun the job
(a child takes the next job from its own pipe without waiting for the parent), and the
record waits up to ``start_hold`` (0.5 s) so that a short job's outcome carries it. A
run that began in that window before its supervisor was SIGKILLed is given back as never
started: its attempt is not spent and no errors entry is written, so it runs again under
the same attempt number. The same holds for a short job that began and even ended in
that window, and for a run whose child died first (killed by the driver, or
``os._exit``): its completion or crash was not written either, and with its start
unwritten the rerun keeps the attempt number. Such a run is allowed only

* in a child of a killed supervisor: the parent pid the child itself wrote in the run
  log, not the children the driver saw at the kill (a child that died just before is
  not among them, and its run is exactly such a case);
* whose start the database shows was never written under that supervisor's lease:
  ``install_start_audit`` (called by the soak after migrating) records every write of
  an attempt's start, so the exemption rests on evidence, not on timing alone;
* begun at most ``START_WINDOW`` before the kill: ``start_hold`` plus a write on a
  loaded machine. A start unwritten for longer is the product's fault, and its rerun is
  reported like any other. Without the audit, the window alone is the evidence, and it
  stays as narrow as it was (``UNAUDITED_WINDOW``).

Such runs are counted apart (``uncharged_at_kill``), never silently.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import psycopg

from scripts.chaos.runlog import Run, read_runs

INTERRUPTIONS = frozenset({"crashed", "lease_expired", "shutdown", "timeout", "hung"})
FINAL = frozenset({"completed", "discarded"})

# How long before a supervisor's SIGKILL a run may have begun and still not be recorded
# as started: start_hold (0.5 s, supervisor.tuning) plus flush_interval and a write round
# trip on a loaded 2-core machine. A run begun earlier than this must have been charged.
START_WINDOW = 1.5
# Without the start audit the window is the only evidence, and it stays as narrow as it
# always was.
UNAUDITED_WINDOW = 0.5

AUDIT = """
CREATE SCHEMA IF NOT EXISTS chaos;
CREATE TABLE IF NOT EXISTS chaos.starts_written (
    job_id bigint NOT NULL, attempt int NOT NULL, owner text, at timestamptz DEFAULT now());
CREATE OR REPLACE FUNCTION chaos.note_start() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO chaos.starts_written (job_id, attempt, owner)
    VALUES (NEW.id, NEW.attempt, coalesce(OLD.lease_owner, NEW.lease_owner));
    RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS chaos_starts_written ON supervisor.jobs;
CREATE TRIGGER chaos_starts_written AFTER UPDATE OF attempted_at ON supervisor.jobs
    FOR EACH ROW WHEN (OLD.attempted_at IS NULL AND NEW.attempted_at IS NOT NULL)
    EXECUTE FUNCTION chaos.note_start();
"""

_STARTS_WRITTEN = "SELECT job_id, attempt, owner FROM chaos.starts_written"


def install_start_audit(dsn: str) -> None:
    """Record, in ``chaos.starts_written``, every write of an attempt's start (by the
    start itself, or carried by the attempt's outcome) and the lease it was written
    under: the evidence ``check`` needs to tell a start never written from one lost."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(AUDIT)


@dataclass(frozen=True)
class SupervisorKill:
    """A supervisor SIGKILLed by the driver: when (``time.time()``), its pid, and the
    children it had then."""

    at: float
    children: frozenset[int]
    pid: int = 0  # 0: not recorded (only ``children`` identify its runs)

    def parent_of(self, run: Run) -> bool:
        """Whether ``run`` was in a child of this supervisor."""
        if self.pid and run.ppid:
            return run.ppid == self.pid
        return run.pid in self.children

    def owns(self, owner: str | None) -> bool:
        """Whether lease owner name ``owner`` (``host:pid:random``) is this supervisor."""
        parts = (owner or "").rsplit(":", 2)
        return bool(self.pid) and len(parts) == 3 and parts[1] == str(self.pid)

    def covers(self, run: Run, window: float = UNAUDITED_WINDOW) -> bool:
        """Whether ``run`` may have begun too shortly before this kill to be recorded."""
        return (self.parent_of(run)
                and self.at - window <= run.start <= self.at + UNAUDITED_WINDOW)


@dataclass(frozen=True)
class StartAudit:
    """The starts written, by (job id, attempt): the lease owners they were written
    under. ``None`` as a whole when the database has no audit (it was not installed)."""

    owners: dict[tuple[int, int], list[str | None]]

    def unwritten_under(self, job_id: int, run: Run, kill: SupervisorKill) -> bool:
        """Whether no start of ``run``'s attempt was written under ``kill``'s lease."""
        return not any(kill.owns(owner) for owner in self.owners.get((job_id, run.attempt), ()))


def read_start_audit(conn: psycopg.Connection) -> StartAudit | None:
    """The audit ``install_start_audit`` keeps, or None without one."""
    if conn.execute("SELECT to_regclass('chaos.starts_written')").fetchone()[0] is None:
        return None
    owners: dict[tuple[int, int], list[str | None]] = {}
    for job_id, attempt, owner in conn.execute(_STARTS_WRITTEN):
        owners.setdefault((job_id, attempt), []).append(owner)
    return StartAudit(owners)


_ROWS = """
SELECT id, kind, state, attempt, max_attempts, args::text, result::text,
       (SELECT coalesce(jsonb_agg(e - 'traceback'), '[]') FROM jsonb_array_elements(errors) e)::text
FROM supervisor.jobs
"""


@dataclass
class CheckResult:
    """Figures of the checks; ``violations`` empty means the run passed."""

    jobs: int = 0
    states: Counter = field(default_factory=Counter)
    runs: int = 0
    reruns: Counter = field(default_factory=Counter)  # cause -> reruns it explains
    lost_claims: Counter = field(default_factory=Counter)  # failed attempts that never ran
    discarded: Counter = field(default_factory=Counter)  # reason -> jobs
    uncharged_at_kill: int = 0  # runs begun just before their supervisor's SIGKILL
    audited: bool = False  # the exemption rested on the start audit, not on timing alone
    violations: list[str] = field(default_factory=list)
    violation_kinds: Counter = field(default_factory=Counter)
    bad_log_lines: int = 0

    def fail(self, what: str, detail: str) -> None:
        """Record one violation (details kept for the first 50)."""
        self.violation_kinds[what] += 1
        if len(self.violations) < 50:
            self.violations.append(f"{what}: {detail}")

    @property
    def unexplained_reruns(self) -> int:
        """Runs no errors entry accounts for."""
        return self.violation_kinds["unexplained double run"]


def _designed(kind: str, entry: dict, args: dict) -> bool:
    """Whether the handler of ``kind`` fails this way on purpose."""
    what, attempt = entry.get("kind"), entry.get("attempt")
    if kind == "chaos_flaky":
        return what == "error" and attempt == 1
    if kind == "chaos_fail":
        return what == "error"
    if kind == "chaos_discard":
        return what == "discard"
    if kind == "chaos_exit":
        return what == "crashed" and attempt == args.get("on_attempt", 1)
    return False


def _expected_result(kind: str, args: dict, result: object) -> bool:
    if kind == "chaos_noop":
        return result == args.get("n", 0)
    if kind == "chaos_sleep":
        return result == args["ms"]
    if kind == "chaos_flaky":
        return result == "ok"
    if kind == "chaos_exit":
        return result == "survived"
    if kind == "chaos_cpu":
        return isinstance(result, int)
    if kind == "chaos_part":
        return result == args["i"] * args["i"]
    if kind == "chaos_merge":  # what it read along its edges (batch_storm.py)
        return result == {"seen": args["parts"], "failed": sorted(args.get("failed") or [])}
    if kind == "chaos_batch_done":  # a callback reads its batch closed
        return (isinstance(result, dict) and result.get("tag") == args["tag"]
                and result.get("finished") is True
                and result["completed"] + result["discarded"] + result["cancelled"]
                == result["total"])
    return False  # chaos_fail and chaos_discard never complete


def check(dsn: str, runlog: Path, expected_jobs: int | None = None,
          kills: list[SupervisorKill] = (), may_cancel: frozenset[int] = frozenset(),
          ) -> CheckResult:
    """Run every check; never raises for a violation, only records it. ``kills`` are the
    supervisors the driver SIGKILLed (see the module's docstring). ``may_cancel``: the
    jobs a run stopped on purpose (members of a batch cancelled or aborted): each may end
    ``cancelled``, its last attempt cut short by the stop without an errors entry."""
    out = CheckResult()
    runs_by_job, out.bad_log_lines = read_runs(runlog)
    if out.bad_log_lines:
        out.fail("run log", f"{out.bad_log_lines} unreadable or unmatched lines")
    seen = set()
    with psycopg.connect(dsn) as conn:
        audit = read_start_audit(conn)
        out.audited = audit is not None
        with conn.cursor(name="rows") as cur:
            cur.itersize = 5000
            cur.execute(_ROWS)
            for job_id, kind, state, attempt, max_attempts, args, result, errors in cur:
                seen.add(job_id)
                _check_job(out, job_id, kind, state, attempt, max_attempts,
                           orjson.loads(args), None if result is None else orjson.loads(result),
                           orjson.loads(errors), runs_by_job.get(job_id, []), kills, audit,
                           job_id in may_cancel)
    out.jobs = len(seen)
    if expected_jobs is not None and out.jobs != expected_jobs:
        out.fail("job count", f"{out.jobs} rows, {expected_jobs} enqueued")
    strays = set(runs_by_job) - seen
    if strays:
        out.fail("run of an unknown job", f"{len(strays)} ids, e.g. {sorted(strays)[:5]}")
    return out


def _check_job(out: CheckResult, job_id: int, kind: str, state: str, attempt: int,
               max_attempts: int, args: dict, result: object, errors: list[dict],
               runs: list[Run], kills: list[SupervisorKill],
               audit: StartAudit | None = None, may_cancel: bool = False) -> None:
    out.states[state] += 1
    out.runs += len(runs)
    where = f"job {job_id} {kind} ({state}, attempt {attempt})"
    # Runs a SIGKILL caught before their start was written (module docstring): they may
    # account for a rerun or a cut-short run, and nothing else.
    uncharged = [run for run in runs
                 if any(_uncharged(job_id, run, kill, audit) for kill in kills)]
    spare_at = Counter(run.attempt for run in uncharged)
    stopped = state == "cancelled" and may_cancel
    if state not in FINAL and not stopped:
        out.fail("not final", where)
        return
    # A stop's own entry ("cancelled") is not a failed attempt; one naming a supervisor
    # caught that attempt running (schema 0025's batch_drain), which may have a run.
    caught_running = {e.get("attempt") for e in errors if stopped
                      and e.get("kind") == "cancelled" and e.get("supervisor")}
    if stopped:
        errors = [e for e in errors if e.get("kind") != "cancelled"]
    for entry in errors:
        if entry.get("kind") not in INTERRUPTIONS and not _designed(kind, entry, args):
            out.fail("unexpected failure", f"{where}: {entry.get('kind')}: {entry.get('message')}")
    if state == "discarded":
        _check_discard(out, where, kind, attempt, max_attempts, args, errors)
    elif state == "completed" and not _expected_result(kind, args, result):
        out.fail("wrong result", f"{where}: {result!r}")

    entries_at = Counter(e.get("attempt") for e in errors)
    interrupted_at = {e.get("attempt") for e in errors if e.get("kind") in INTERRUPTIONS}
    runs_at = Counter(r.attempt for r in runs)
    for n, count in runs_at.items():
        # The attempt that completed it, or the one a batch's stop caught running.
        allowed = entries_at[n] + (1 if (state == "completed" and n == attempt)
                                   or n in caught_running else 0)
        spared = min(max(count - allowed, 0), spare_at[n])
        out.uncharged_at_kill += spared
        if count - spared > allowed:
            out.fail("unexplained double run",
                     f"{where}: attempt {n} ran {count} times, {entries_at[n]} errors entries")
    for run in runs:
        if run.end is None and run.attempt not in interrupted_at and run not in uncharged \
                and run.attempt not in caught_running:
            out.fail("run cut short without an interruption recorded",
                     f"{where}: attempt {run.attempt} in pid {run.pid}")
    if state == "completed" and not any(r.attempt == attempt and r.end for r in runs):
        out.fail("completed without a finished run", where)
    for entry in errors:
        n = entry.get("attempt")
        if runs_at[n] == 0:
            out.lost_claims[entry.get("kind")] += 1
        else:
            cause = "designed" if _designed(kind, entry, args) else entry.get("kind")
            out.reruns[cause] += 1
    # The last attempt's failure did not lead to another run: it is not a rerun.
    if state == "discarded" and errors and runs_at[errors[-1].get("attempt")]:
        last = errors[-1]
        out.reruns["designed" if _designed(kind, last, args) else last.get("kind")] -= 1


def _uncharged(job_id: int, run: Run, kill: SupervisorKill, audit: StartAudit | None) -> bool:
    """Whether ``run`` is one ``kill`` caught before its start was written."""
    if audit is None or not kill.pid:  # no evidence, or no lease to match it to
        return kill.covers(run)
    return (kill.covers(run, window=START_WINDOW)
            and audit.unwritten_under(job_id, run, kill))


def _check_discard(out: CheckResult, where: str, kind: str, attempt: int, max_attempts: int,
                   args: dict, errors: list[dict]) -> None:
    last = errors[-1] if errors else None
    if last is None:
        out.fail("discarded without a reason", where)
    elif kind == "chaos_discard" and last.get("kind") == "discard":
        out.discarded["Discard raised by design"] += 1
    elif attempt >= max_attempts and kind == "chaos_fail":
        out.discarded["attempts spent, failing by design"] += 1
    elif attempt >= max_attempts:
        out.discarded[f"attempts spent, last {last.get('kind')}"] += 1
    else:
        out.fail("discarded for no reason of its own", f"{where}: {last}")
