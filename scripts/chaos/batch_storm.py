"""A batch pipeline under a kill storm (issue 42's "the kill storms still hold with these
features used").

One queue (``fair = "batch"`` by default) holds, enqueued in this order:

* ``doomed``: a batch of short sleeps with a callback, cancelled by the driver
  (``shared.batches_actions.cancel``) once a share of its members is final;
* ``failing``: a batch whose members all fail by design (``chaos_fail``), with
  ``max_failures``: its budget aborts it;
* ``broken``: one plain job that fails by design, reached by ``allow_failure`` edges;
* ``parts``: the map step, a batch of ``chaos_part`` jobs (``i * i``) with a callback;
* ``merges``: one ``chaos_merge`` per group of parts, ``depends_on`` the group's parts by
  name and on ``broken`` with ``allow_failure``; each returns what it read along its
  edges (``current_job().dependencies()``);
* ``publish``: one ``chaos_merge`` that depends on every merge and reads their results.

Meanwhile the driver SIGKILLs a random busy child every ``child_kill_interval`` (about)
and a whole supervisor every ``supervisor_kill_interval``, starting a replacement each
time, until every job is final; then the supervisors get SIGTERM and must exit 0.

The checks (``StormReport.problems``):

* ``scripts.chaos.check``'s rules for every job: final, no run twice unless an
  interruption was charged for it (the start audit exempts only runs its supervisor's
  SIGKILL caught before their start was written), results as expected: every part's
  ``i * i``, every merge's reads equal to what its dependencies returned, every callback's
  summary closed and adding up. Only members of ``doomed`` and ``failing`` may end
  cancelled; nothing else may;
* the job count is what was enqueued plus one callback per batch (nothing lost, no second
  callback), and each batch's callback ran once, completed, and read its own batch with
  the stop it had (``cancelled``, ``aborted``, none);
* no member of ``doomed`` claimed after the cancel's first transaction committed (the
  stop mark: ``StampedConnection`` notes the moment that block returned, an upper bound
  of the commit) began at all. A member claimed before it and queued to a child (the
  supervisor's prefetch) may begin after it, until its supervisor hears of the cancel
  and recalls it: such runs are counted apart (``queued_late``, with the longest delay
  past the commit), never silently. ``CLAIM_AUDIT`` records when each attempt was
  claimed: a trigger that fires after the schema's claim guard let the row through;
* ``failing`` was aborted by its budget, its members' failed attempts at most
  ``max_failures`` plus what the supervisors held when the abort committed (per child,
  its running job and ``prefetch`` queued ones).

Usage: python scripts/chaos/batch_storm.py [--dsn DSN] [--parts 2000] [--seed 1]
       [--supervisor-kills 10] [--timeout 600] [--keep]
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

if __package__ in (None, ""):  # run as a script: make the project importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from scripts.chaos.check import CheckResult, SupervisorKill, check, install_start_audit
from scripts.chaos.procs import SupervisorProc, migrate
from scripts.chaos.runlog import read_runs
from shared import batches_actions
from shared.batches import Batch, Callback
from shared.enqueue import enqueue, enqueue_many
from shared.options import Dep

DATABASE = "supervisor_chaos_batches"
CALLBACK = "chaos_batch_done"

# When each attempt was claimed: fired after the schema's jobs_batch_claim_guard (BEFORE
# triggers fire in name order, and a row the guard drops fires no later one), so a row
# here passed the guard no later than ``at``.
CLAIM_AUDIT = """
CREATE SCHEMA IF NOT EXISTS chaos;
CREATE TABLE IF NOT EXISTS chaos.claims (
    job_id bigint NOT NULL, attempt int NOT NULL, at timestamptz NOT NULL);
CREATE OR REPLACE FUNCTION chaos.note_claim() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO chaos.claims VALUES (NEW.id, NEW.attempt, clock_timestamp());
    RETURN NEW;
END $$;
DROP TRIGGER IF EXISTS zz_chaos_claims ON supervisor.jobs;
CREATE TRIGGER zz_chaos_claims BEFORE UPDATE OF state ON supervisor.jobs
    FOR EACH ROW WHEN (NEW.state = 'running' AND OLD.state <> 'running')
    EXECUTE FUNCTION chaos.note_claim();
"""
_CLAIMED_AT = """SELECT job_id, attempt, max(extract(epoch FROM at))::float8
                 FROM chaos.claims WHERE job_id = ANY(%s) GROUP BY 1, 2"""


@dataclass
class StormSettings:
    """What to enqueue and how hard to shake it."""

    parts: int = 240
    part_ms: int = 50  # a part's mean sleep: long enough for kills to find it running
    group: int = 8  # parts per merge
    failing: int = 80
    max_failures: int = 5
    doomed: int = 300
    cancel_at: float = 0.2  # share of ``doomed`` final when the driver cancels it
    supervisors: int = 2
    children: int = 2
    prefetch: int = 1  # jobs queued per child beyond its running one: the budget's bound
    lease_ttl: float = 3.0
    grace: float = 5.0
    child_kill_interval: float = 0.3
    supervisor_kill_interval: float = 2.5
    supervisor_kills: int = 4
    fair: bool = True  # the queue's claims take turns between the batches
    timeout: float = 120.0
    seed: int = 1


@dataclass(frozen=True)
class Pipeline:
    """What was enqueued: the three batches, the plain failing job the merges reach with
    ``allow_failure``, the merges and the job that publishes them."""

    doomed: Batch
    failing: Batch
    parts: Batch
    broken: int
    merges: list[int]
    publish: int

    @property
    def batches(self) -> dict[str, Batch]:
        """Each batch by the tag its callback carries."""
        return {"doomed": self.doomed, "failing": self.failing, "parts": self.parts}

    @property
    def jobs(self) -> int:
        """Every job the run must end with: the enqueued ones and a callback per batch."""
        members = sum(len(b.ids) for b in self.batches.values())
        return members + 1 + len(self.merges) + 1 + len(self.batches)


@dataclass
class StormReport:
    """What the driver did and what the checks found."""

    jobs: int = 0
    child_kills: int = 0
    kills: list[SupervisorKill] = field(default_factory=list)
    supervisor_starts: int = 0
    cancel_committed_at: float | None = None  # time.time() the stop mark was committed by
    cancel_seconds: float = 0.0  # the whole cancel, its chunks included
    cancel_changed: int = 0
    work_seconds: float = 0.0
    failing_attempts: int = 0  # failed attempts of ``failing``'s members, from ``errors``
    failing_bound: int = 0
    late_doomed_runs: int = 0  # doomed members claimed and begun after the stop mark
    queued_late: int = 0  # doomed members claimed before the stop mark, begun after it
    queued_late_delay: float = 0.0  # the longest of those delays past the commit, s
    check: CheckResult | None = None
    problems: list[str] = field(default_factory=list)  # the driver's and the batch checks'

    @property
    def violations(self) -> list[str]:
        """Every problem, from the driver, the batch checks and the job checks."""
        return self.problems + (self.check.violations if self.check else [])

    @property
    def passed(self) -> bool:
        """True when nothing was violated."""
        return not self.problems and self.check is not None and not self.check.violation_kinds


class StampedConnection(psycopg.Connection):
    """A connection that notes when its first ``transaction()`` block committed: the
    cancel's first block is the stop mark, from whose commit no member may start."""

    first_commit: float | None = None

    @contextmanager
    def transaction(self, *args: Any, **kwargs: Any) -> Iterator[Any]:  # type: ignore[override]
        """As ``psycopg.Connection.transaction``; the first to commit stamps the time."""
        with super().transaction(*args, **kwargs) as tx:
            yield tx
        if self.first_commit is None:
            self.first_commit = time.time()


def scratch(dsn: str, name: str = DATABASE) -> str:
    """A fresh database ``name`` next to ``dsn``'s, migrated; its DSN."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    target = psycopg.conninfo.make_conninfo(dsn, dbname=name)
    migrate(target)
    return target


def expected_merge(parts: dict[str, int]) -> dict[str, Any]:
    """What a merge over ``parts`` (name -> result) must return: every part read, and
    ``broken`` reached through its ``allow_failure`` edge, failed."""
    return {"seen": parts, "failed": ["broken"]}


def enqueue_pipeline(dsn: str, s: StormSettings) -> Pipeline:
    """Enqueue the batches and the edges between them (see the module's docstring)."""
    rng = random.Random(s.seed)

    def callback(tag: str) -> Callback:
        return Callback(CALLBACK, {"tag": tag})

    with psycopg.connect(dsn, autocommit=True) as conn:
        doomed = enqueue_many("chaos_sleep", [{"ms": rng.randrange(20, 61)}
                                              for _ in range(s.doomed)],
                              then=callback("doomed"), max_attempts=20, conn=conn)
        failing = enqueue_many("chaos_fail", [{}] * s.failing, then=callback("failing"),
                               max_failures=s.max_failures, conn=conn)
        broken = enqueue("chaos_fail", {}, conn=conn)
        low, high = s.part_ms // 2, s.part_ms * 3 // 2
        parts = enqueue_many("chaos_part", [{"i": i, "ms": rng.randrange(low, high)}
                                            for i in range(s.parts)],
                             then=callback("parts"), conn=conn)
        merges, published = [], {}
        for k, start in enumerate(range(0, s.parts, s.group)):
            group = range(start, min(start + s.group, s.parts))
            edges: dict[str, int | Dep] = {f"p{i}": parts.ids[i] for i in group}
            edges["broken"] = Dep(broken, allow_failure=True)
            expected = {f"p{i}": i * i for i in group}
            merges.append(enqueue("chaos_merge", {"parts": expected, "failed": ["broken"]},
                                  depends_on=edges, conn=conn))
            published[f"m{k}"] = expected_merge(expected)
        publish = enqueue("chaos_merge", {"parts": published},
                          depends_on={f"m{k}": m for k, m in enumerate(merges)}, conn=conn)
    return Pipeline(doomed, failing, parts, broken, merges, publish)


def write_config(workdir: Path, fair: bool) -> Path:
    """The supervisors' settings: fast maintenance (rescues within a second or two of a
    lease's expiry), a quick heartbeat (the child's title, by which the driver finds busy
    children), the breaker and poison detection off (the SIGKILLs are the infrastructure
    failing, not the jobs; scripts/chaos/soak.py says the same), and the fair queue."""
    path = workdir / "storm.toml"
    text = ("poll_interval = 0.2\nmaintenance_interval = 1.0\nheartbeat_interval = 0.25\n"
            "heartbeat_timeout = 10.0\nbreaker_failures = 0\npoison_after = 0\n")
    if fair:
        text += '[queues.default]\nfair = "batch"\n'
    path.write_text(text)
    return path


_PROGRESS = """SELECT count(*) FILTER (WHERE state IN ('available', 'scheduled', 'retryable',
                                                    'running')),
                      count(*) FILTER (WHERE batch_id = %s AND state IN
                                       ('completed', 'discarded', 'cancelled'))
               FROM supervisor.jobs"""


class Driver:
    """Runs the supervisors and the storm until every job is final."""

    def __init__(self, s: StormSettings, dsn: str, workdir: Path, pipeline: Pipeline,
                 report: StormReport, say=print) -> None:
        self.s = s
        self.dsn = dsn
        self.workdir = workdir
        self.pipeline = pipeline
        self.report = report
        self.say = say
        self.rng = random.Random(s.seed + 1)
        self.runlog = workdir / "runs.log"
        self.config = write_config(workdir, s.fair)
        self.sups: list[SupervisorProc] = []
        self.retired: list[SupervisorProc] = []

    def start_supervisor(self) -> None:
        """Start one more ``supervisor run``."""
        n = self.report.supervisor_starts
        self.sups.append(SupervisorProc(
            self.dsn, self.runlog, self.workdir / f"supervisor-{n}.log",
            ["-n", str(self.s.children), "--prefetch", str(self.s.prefetch),
             "--lease-ttl", str(self.s.lease_ttl), "--grace", str(self.s.grace),
             "--config", str(self.config)]))
        self.report.supervisor_starts += 1

    def run(self) -> None:
        """Start the supervisors, shake them until the work is done, then stop them."""
        for _ in range(self.s.supervisors):
            self.start_supervisor()
        started = time.monotonic()
        next_child_kill = started + self.s.child_kill_interval
        next_sup_kill = started + self.s.supervisor_kill_interval
        quiet = 0
        cancelled = False
        while True:
            now = time.monotonic()
            if now - started > self.s.timeout:
                self.report.problems.append(f"timeout: not done after {self.s.timeout} s")
                break
            self._watch_supervisors()
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                unfinished, doomed_final = conn.execute(
                    _PROGRESS, (self.pipeline.doomed.id,)).fetchone()
            quiet = quiet + 1 if unfinished == 0 else 0
            if quiet >= 3:  # three polls apart: nothing is about to be retried
                break
            if not cancelled and doomed_final >= self.s.cancel_at * self.s.doomed:
                self.cancel_doomed()
                cancelled = True
            # The last few jobs are spared the kills: every kill would find the same last
            # job and spend its attempts (a harness artefact, as in soak.py).
            spare = 2 * self.s.supervisors * self.s.children
            if unfinished > spare and now >= next_child_kill:
                self.kill_child()
                next_child_kill = now + self.s.child_kill_interval * self.rng.uniform(0.5, 1.5)
            if (unfinished > spare and now >= next_sup_kill
                    and len(self.report.kills) < self.s.supervisor_kills):
                self.kill_supervisor()
                next_sup_kill = now + self.s.supervisor_kill_interval
            time.sleep(0.1)  # the storm's pace
        self.report.work_seconds = time.monotonic() - started
        if not cancelled:
            self.report.problems.append("the doomed batch was never cancelled")
        self.stop_all()

    def cancel_doomed(self) -> None:
        """Cancel ``doomed`` mid-run, noting when its stop mark committed."""
        began = time.monotonic()
        with StampedConnection.connect(self.dsn, autocommit=True) as conn:
            try:
                result = batches_actions.cancel(conn, self.pipeline.doomed.id)
            except batches_actions.BatchActionRefused as refused:
                self.report.problems.append(f"cancel refused: {refused}")
                return
            self.report.cancel_committed_at = conn.first_commit
        self.report.cancel_seconds = time.monotonic() - began
        self.report.cancel_changed = result.changed
        self.say(f"cancelled batch {self.pipeline.doomed.id}: {result.changed} members "
                 f"in {self.report.cancel_seconds:.2f} s")

    def _watch_supervisors(self) -> None:
        """A supervisor that exited by itself is a problem; it is replaced."""
        for sup in list(self.sups):
            if not sup.alive():
                lines = sup.log_text().strip().splitlines() or ["(no output)"]
                self.report.problems.append(
                    f"supervisor {sup.pid} exited by itself with {sup.proc.returncode}: "
                    f"{lines[-1][:200]}")
                self.sups.remove(sup)
                self.retired.append(sup)
                self.start_supervisor()

    def kill_child(self) -> None:
        """SIGKILL a random busy child (any child if none is busy by its title)."""
        busy = [pid for sup in self.sups for pid, _ in sup.busy_children()]
        pids = busy or [pid for sup in self.sups for pid in sup.children()]
        if not pids:
            return
        try:
            os.kill(self.rng.choice(pids), signal.SIGKILL)
            self.report.child_kills += 1
        except ProcessLookupError:  # it exited between the listing and the kill
            pass

    def kill_supervisor(self) -> None:
        """SIGKILL a random supervisor (its children follow) and start a replacement."""
        sup = self.rng.choice(self.sups)
        pids = sup.children()
        killed_at = time.time()
        sup.kill()
        self.report.kills.append(SupervisorKill(killed_at, frozenset(pids), sup.pid))
        self.sups.remove(sup)
        self.retired.append(sup)
        self.start_supervisor()

    def stop_all(self) -> None:
        """SIGTERM every supervisor; each must drain and exit 0 within its grace."""
        for sup in self.sups:
            sup.terminate()
        for sup in self.sups:
            code = sup.wait(self.s.grace + 30)
            if code != 0:
                self.report.problems.append(
                    f"supervisor {sup.pid} exited with {code} after SIGTERM; see {sup.log_path}")

    def close(self) -> None:
        """Kill whatever is left (after a failure) and close the logs."""
        for sup in self.sups + self.retired:
            sup.close()


_CALLBACKS = """
SELECT b.id, b.finished_at IS NOT NULL, b.callback_id, b.stop_kind,
       (SELECT count(*) FROM supervisor.jobs c
        WHERE c.kind = %(kind)s AND c.args->>'tag' = %(tag)s),
       (SELECT c.result FROM supervisor.jobs c WHERE c.id = b.callback_id)
FROM supervisor.batches b WHERE b.id = %(batch)s
"""
_STATES = "SELECT id, state FROM supervisor.jobs WHERE id = ANY(%s)"
_FAILED_ATTEMPTS = """SELECT count(*)::int FROM supervisor.jobs j,
                             jsonb_array_elements(j.errors) e
                      WHERE j.batch_id = %s AND e->>'kind' <> 'cancelled'"""
STOPS = {"doomed": "cancelled", "failing": "aborted", "parts": None}


def check_pipeline(dsn: str, s: StormSettings, pipeline: Pipeline, report: StormReport,
                   runlog: Path) -> None:
    """The batch checks of the module's docstring, into ``report.problems``."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for tag, batch in pipeline.batches.items():
            row = conn.execute(_CALLBACKS, {"kind": CALLBACK, "tag": tag,
                                            "batch": batch.id}).fetchone()
            _, finished, callback_id, stop, callbacks, result = row
            if not finished or callback_id is None:
                report.problems.append(f"batch {tag} did not close with a callback")
            if callbacks != 1:
                report.problems.append(f"batch {tag}: {callbacks} callbacks enqueued, not 1")
            if stop != STOPS[tag]:
                report.problems.append(f"batch {tag} stopped {stop!r}, not {STOPS[tag]!r}")
            if result is None or result.get("batch") != batch.id \
                    or result.get("stopped") != STOPS[tag]:
                report.problems.append(f"batch {tag}'s callback read {result!r}")
        must_complete = [*pipeline.parts.ids, *pipeline.merges, pipeline.publish]
        states = dict(conn.execute(_STATES, (must_complete,)).fetchall())
        lost = [i for i in must_complete if states.get(i) != "completed"]
        if lost:
            report.problems.append(f"{len(lost)} parts or merges did not complete: {lost[:10]}")
        report.failing_attempts = conn.execute(
            _FAILED_ATTEMPTS, (pipeline.failing.id,)).fetchone()[0]
    alive = s.supervisors  # the kills replace supervisors one for one
    report.failing_bound = s.max_failures + alive * s.children * (1 + s.prefetch)
    if report.failing_attempts > report.failing_bound:
        report.problems.append(
            f"the failing batch spent {report.failing_attempts} failed attempts, over "
            f"max_failures={s.max_failures} plus what {alive} supervisors held")
    if report.cancel_committed_at is not None:
        check_cancel(dsn, pipeline, report, runlog, report.cancel_committed_at)


def check_cancel(dsn: str, pipeline: Pipeline, report: StormReport, runlog: Path,
                 committed_at: float) -> None:
    """No member of ``doomed`` claimed after the stop mark committed began; those
    claimed before it and begun after are counted apart (module docstring)."""
    runs, _ = read_runs(runlog)
    doomed = set(pipeline.doomed.ids)
    after = {(job_id, r.attempt): r.start for job_id, job_runs in runs.items()
             if job_id in doomed for r in job_runs if r.start > committed_at}
    with psycopg.connect(dsn, autocommit=True) as conn:
        claimed = {(j, a): at for j, a, at in conn.execute(
            _CLAIMED_AT, (sorted({j for j, _ in after}),))}
    late = sorted(j for (j, a) in after if claimed.get((j, a), committed_at) >= committed_at)
    queued = [start - committed_at for key, start in after.items()
              if claimed.get(key, committed_at) < committed_at]
    report.late_doomed_runs = len(late)
    report.queued_late = len(queued)
    report.queued_late_delay = max(queued, default=0.0)
    if late:
        report.problems.append(f"{len(late)} doomed members claimed after the cancel "
                               f"committed began: {late[:10]}")


def run_storm(s: StormSettings, dsn: str, workdir: Path, say=print) -> StormReport:
    """One storm in the (fresh, migrated) database at ``dsn``."""
    install_start_audit(dsn)  # the evidence for runs a supervisor's SIGKILL left uncharged
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(CLAIM_AUDIT)
    pipeline = enqueue_pipeline(dsn, s)
    report = StormReport(jobs=pipeline.jobs)
    driver = Driver(s, dsn, workdir, pipeline, report, say)
    try:
        driver.run()
    finally:
        driver.close()
    stopped = frozenset(pipeline.doomed.ids) | frozenset(pipeline.failing.ids)
    report.check = check(dsn, driver.runlog, expected_jobs=pipeline.jobs,
                         kills=report.kills, may_cancel=stopped)
    check_pipeline(dsn, s, pipeline, report, driver.runlog)
    return report


def summary(report: StormReport, s: StormSettings) -> str:
    """The report as a plain-text table."""
    c = report.check or CheckResult()
    rows = [
        ("jobs", f"{report.jobs} ({s.parts} parts, {s.failing} failing, {s.doomed} doomed)"),
        ("work duration", f"{report.work_seconds:.1f} s"),
        ("final states", ", ".join(f"{k} {v}" for k, v in sorted(c.states.items()))),
        ("child kills", str(report.child_kills)),
        ("supervisor kills", f"{len(report.kills)} ({report.supervisor_starts} starts)"),
        ("cancel", f"{report.cancel_changed} members in {report.cancel_seconds:.2f} s; "
                   f"{report.late_doomed_runs} claimed after its commit began, "
                   f"{report.queued_late} queued before it began after it (longest "
                   f"{report.queued_late_delay * 1000:.0f} ms past it)"),
        ("failing batch", f"{report.failing_attempts} failed attempts "
                          f"(bound {report.failing_bound})"),
        ("handler runs", str(c.runs)),
        ("reruns explained", ", ".join(f"{k} {v}" for k, v in sorted(c.reruns.items()) if v)
         or "0"),
        ("runs uncharged at a supervisor's SIGKILL", str(c.uncharged_at_kill)),
        ("violations", str(len(report.violations))),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join([f"{k:<{width}}  {v}" for k, v in rows]
                     + [f"  ! {v}" for v in report.violations[:30]])


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (the soak: more parts, more kills); the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    d = StormSettings()
    parser.add_argument("--dsn", default=os.environ.get(
        "SUPERVISOR_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"))
    parser.add_argument("--database", default=DATABASE,
                        help="the scratch database's name (dropped and created)")
    parser.add_argument("--parts", type=int, default=2000)
    parser.add_argument("--failing", type=int, default=d.failing)
    parser.add_argument("--doomed", type=int, default=2000)
    parser.add_argument("--supervisor-kills", type=int, default=10)
    parser.add_argument("--seed", type=int, default=d.seed)
    parser.add_argument("--not-fair", action="store_true", help="a plain queue, not fair")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    ns = parser.parse_args(argv)
    s = StormSettings(parts=ns.parts, failing=ns.failing, doomed=ns.doomed,
                      supervisor_kills=ns.supervisor_kills, seed=ns.seed,
                      fair=not ns.not_fair, timeout=ns.timeout)
    dsn = scratch(ns.dsn, ns.database)
    workdir = Path(tempfile.mkdtemp(prefix="batch-storm-"))
    report = run_storm(s, dsn, workdir)
    print(summary(report, s))
    print(f"work directory: {workdir}" if ns.keep or not report.passed else "")
    if report.passed and not ns.keep:
        import shutil

        shutil.rmtree(workdir, ignore_errors=True)
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())
