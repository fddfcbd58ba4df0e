"""Soak under chaos: many mixed jobs, several supervisors, and a driver that kills.

Usage::

    /work/venv/bin/python scripts/chaos/soak.py --jobs 200000 --supervisors 3 --children 2

What it does: starts a private embedded PostgreSQL (restarting it harms nobody), migrates,
enqueues ``--jobs`` jobs of mixed kinds (``scripts.chaos.handlers``: mostly no-ops, some
short CPU work, some 10-200 ms sleeps, some that fail on their first attempt, a few that
``Discard``, always fail, or ``os._exit`` on a chosen attempt), starts ``--supervisors``
``supervisor run -n CHILDREN`` processes with a short lease and fast maintenance, and
while they work:

* every ``--kill-interval`` seconds SIGKILLs a random busy child (found through
  ``/proc/<pid>/task/<pid>/children`` and its title ``supervisor: worker N job ...``);
* ``--supervisor-kills`` times SIGKILLs a whole supervisor and starts a replacement;
* ``--db-restarts`` times restarts PostgreSQL.

Kills and restarts are spread over the run by progress (share of jobs finished). When no
job is available, scheduled, retryable or running, the supervisors get SIGTERM and must
exit 0; then ``scripts.chaos.check`` checks every job against the run log the handlers
wrote. A summary table is printed; the exit status is 1 on any violation, 0 otherwise.
Every wait is bounded (``--timeout`` for the whole run, ``--stall`` without progress).
``--keep`` keeps the work directory (run log, supervisor logs) even when the run passed.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the project importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import psycopg

from scripts.chaos.check import CheckResult, SupervisorKill, check, install_start_audit
from scripts.chaos.procs import SupervisorProc, migrate, private_server
from shared.enqueue import enqueue_many

# kind -> (weight, max_attempts, args for the i-th job of that kind)
MIX: dict[str, tuple[float, int, object]] = {
    "chaos_noop": (0.81, 20, lambda r: {"n": r.randrange(1000)}),
    "chaos_cpu": (0.08, 20, lambda r: {"loops": r.randrange(200, 5000)}),
    "chaos_sleep": (0.01, 20, lambda r: {"ms": r.randrange(10, 201)}),
    "chaos_flaky": (0.05, 5, lambda r: {}),
    "chaos_fail": (0.02, 2, lambda r: {}),
    "chaos_discard": (0.02, 20, lambda r: {"reason": "discarded by design"}),
    "chaos_exit": (0.01, 5, lambda r: {"on_attempt": r.choice((1, 2))}),
}

MAX_SELF_EXITS = 3

_PROGRESS = """
SELECT count(*) FILTER (WHERE state IN ('completed', 'discarded', 'cancelled')),
       count(*) FILTER (WHERE state IN ('available', 'scheduled', 'retryable', 'running'))
FROM supervisor.jobs
"""


@dataclass
class SoakSettings:
    """What to run and how hard to shake it."""

    jobs: int = 200_000
    supervisors: int = 3
    children: int = 2
    lease_ttl: float = 5.0
    grace: float = 10.0
    kill_interval: float = 1.0  # seconds between child kills
    supervisor_kills: int = 2
    db_restarts: int = 1
    timeout: float = 3600.0  # the whole run
    stall: float = 180.0  # no job finished for this long: give up
    seed: int = 1
    mix: dict[str, float] | None = None  # kind -> weight, overriding MIX's weights
    # A session holding the MVCC horizon back for the whole run (issue 40): "rr", an idle
    # REPEATABLE READ snapshot that has read supervisor.jobs; "xid", an idle transaction
    # holding an xid; None: none.
    holder: str | None = None


@dataclass
class SoakReport:
    """What happened in a run, and what the checks found."""

    jobs: int = 0
    enqueued_by_kind: Counter = field(default_factory=Counter)
    enqueue_seconds: float = 0.0
    work_seconds: float = 0.0
    child_kills: int = 0
    supervisor_kills: int = 0
    kills: list[SupervisorKill] = field(default_factory=list)
    supervisor_starts: int = 0
    db_restarts: int = 0
    events: list[str] = field(default_factory=list)
    driver_violations: list[str] = field(default_factory=list)
    check: CheckResult | None = None

    @property
    def violations(self) -> list[str]:
        """Every violation, from the driver and from the checks."""
        return self.driver_violations + (self.check.violations if self.check else [])

    @property
    def passed(self) -> bool:
        """True when nothing was violated."""
        return not self.driver_violations and self.check is not None \
            and not self.check.violation_kinds


def enqueue_mix(dsn: str, jobs: int, seed: int, weights: dict[str, float] | None = None,
                chunk: int = 2000) -> Counter:
    """Enqueue ``jobs`` jobs drawn from ``MIX``, in chunks so kinds interleave in the
    queue's order; returns jobs per kind."""
    rng = random.Random(seed)
    kinds = list(MIX)
    weight_list = [(weights or {}).get(k, MIX[k][0]) for k in kinds]
    counts: Counter = Counter()
    with psycopg.connect(dsn, autocommit=True) as conn:
        for start in range(0, jobs, chunk):
            batch: dict[str, list[dict]] = {}
            for kind in rng.choices(kinds, weight_list, k=min(chunk, jobs - start)):
                batch.setdefault(kind, []).append(MIX[kind][2](rng))
            for kind, args in batch.items():
                enqueue_many(kind, args, max_attempts=MIX[kind][1], conn=conn)
                counts[kind] += len(args)
    return counts


def write_config(workdir: Path) -> Path:
    """The settings file for the soak's supervisors: fast maintenance so expired leases
    are rescued within a second or two of expiring, and a quick heartbeat because the
    child's heartbeat thread is what updates its title (stale by up to one interval), and
    the driver picks busy children by title. The soak's SIGKILLs of busy children are
    the infrastructure failing, not the jobs: the per-kind breaker (a dozen kills a
    minute of one kind would pause it for minutes) and poison detection (a job killed
    twice in a row) would rightly stop such jobs, so both are off here
    (docs/admission.md; their own tests are tests/test_breaker_run.py and
    tests/test_poison.py)."""
    path = workdir / "soak.toml"
    path.write_text("poll_interval = 0.2\nmaintenance_interval = 1.0\n"
                    "heartbeat_interval = 0.25\nheartbeat_timeout = 10.0\n"
                    "breaker_failures = 0\npoison_after = 0\n")
    return path


class Driver:
    """Runs the supervisors and the chaos until every job is final."""

    def __init__(self, settings: SoakSettings, server, workdir: Path, report: SoakReport,
                 say=print) -> None:
        self.s = settings
        self.server = server
        self.workdir = workdir
        self.report = report
        self.say = say
        self.rng = random.Random(settings.seed + 1)
        self.runlog = workdir / "runs.log"
        self.config = write_config(workdir)
        self.sups: list[SupervisorProc] = []
        self.retired: list[SupervisorProc] = []
        # (progress fraction, action): kills spread over 15-75 %, restarts in the middle.
        plan = [(0.15 + 0.6 * (i + 0.5) / max(settings.supervisor_kills, 1), "kill_supervisor")
                for i in range(settings.supervisor_kills)]
        plan += [(0.3 + 0.4 * (i + 0.5) / max(settings.db_restarts, 1), "restart_db")
                 for i in range(settings.db_restarts)]
        self.plan = sorted(plan)
        self.started = time.monotonic()
        self.holder: psycopg.Connection | None = None

    def event(self, text: str, show: bool = True) -> None:
        """Note what the driver did, stamped with seconds since the supervisors started."""
        self.report.events.append(f"{time.monotonic() - self.started:7.1f} s  {text}")
        if show:
            self.say(self.report.events[-1])

    def hold_horizon(self) -> None:
        """Open the session of ``settings.holder`` (again after a restart cut it)."""
        if self.s.holder is None:
            return
        if self.holder is not None:
            self.holder.close()
        self.holder = psycopg.connect(self.server.dsn, application_name="soak-holder")
        if self.s.holder == "rr":
            self.holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            self.holder.execute("SELECT count(*) FROM supervisor.jobs").fetchone()
        else:
            self.holder.execute("SELECT txid_current()")
        self.event(f"holding the horizon ({self.s.holder})")

    def start_supervisor(self) -> None:
        """Start one more ``supervisor run``."""
        n = self.report.supervisor_starts
        sup = SupervisorProc(self.server.dsn, self.runlog, self.workdir / f"supervisor-{n}.log",
                             ["-n", str(self.s.children), "--lease-ttl", str(self.s.lease_ttl),
                              "--grace", str(self.s.grace), "--config", str(self.config)])
        self.sups.append(sup)
        self.report.supervisor_starts += 1

    def progress(self) -> tuple[int, int] | None:
        """(finished, unfinished) jobs, or None while the database is unreachable."""
        try:
            with psycopg.connect(self.server.dsn, autocommit=True, connect_timeout=5) as conn:
                return conn.execute(_PROGRESS).fetchone()
        except psycopg.OperationalError:
            return None

    def run(self) -> None:
        """Start the supervisors, shake them until the work is done, then stop them."""
        for _ in range(self.s.supervisors):
            self.start_supervisor()
        started = self.started = time.monotonic()
        self.hold_horizon()
        next_kill = started + self.s.kill_interval
        last_finished, last_change = -1, started
        quiet_polls = 0
        next_count = started
        unfinished = self.report.jobs
        while True:
            now = time.monotonic()
            if now - started > self.s.timeout:
                self.report.driver_violations.append(f"timeout: not done after {self.s.timeout} s")
                break
            if not self._watch_supervisors():
                self.report.driver_violations.append("gave up: supervisors keep exiting")
                break
            # Counting a big table costs the database; once a second is plenty.
            state = self.progress() if now >= next_count else None
            if state is not None:
                next_count = now + 1.0
                finished, unfinished = state
                if finished != last_finished:
                    last_finished, last_change = finished, now
                elif now - last_change > self.s.stall:
                    self.report.driver_violations.append(
                        f"stalled: no job finished for {self.s.stall} s ({unfinished} unfinished)")
                    break
                fraction = finished / max(self.report.jobs, 1)
                if self.plan and (fraction >= self.plan[0][0] or unfinished == 0):
                    _, action = self.plan.pop(0)
                    getattr(self, action)(fraction)
                    continue
                quiet_polls = quiet_polls + 1 if unfinished == 0 else 0
                if quiet_polls >= 3:  # three polls apart: nothing is about to be retried
                    break
            # No busy child at this instant (short jobs): try again next tick. The last few
            # jobs are spared: with child titles now exact, every kill would find the same
            # last job and spend all its attempts (a harness artefact, not a fault).
            spare = 2 * self.s.supervisors * self.s.children
            if now >= next_kill and unfinished > spare and self.kill_child():
                next_kill = now + self.s.kill_interval * self.rng.uniform(0.5, 1.5)
            time.sleep(0.2)
        self.report.work_seconds = time.monotonic() - started
        self.stop_all()

    def _watch_supervisors(self) -> bool:
        """Replace supervisors that exited on their own (each one a violation); False
        once too many did, as a supervisor that cannot start would be replaced forever."""
        for sup in list(self.sups):
            if not sup.alive():
                lines = sup.log_text().strip().splitlines() or ["(no output)"]
                if self._refused_at_start(sup, lines[-1]):
                    # Started while the server was restarting: `run` refuses an unreachable
                    # database at start (one line, exit 1), as documented. Not a fault.
                    self.event(f"supervisor {sup.pid} could not connect at start (PostgreSQL"
                               " restarting); started another")
                    self.sups.remove(sup)
                    self.retired.append(sup)
                    self.start_supervisor()
                    continue
                self.report.driver_violations.append(
                    f"supervisor {sup.pid} exited by itself with {sup.proc.returncode}: "
                    f"{lines[-1][:200]} (log {sup.log_path})")
                self.sups.remove(sup)
                self.retired.append(sup)
                if len(self.report.driver_violations) > MAX_SELF_EXITS:
                    return False
                self.start_supervisor()
        return True

    def _refused_at_start(self, sup, last_line: str) -> bool:
        restarted = getattr(self, "db_restarted_at", None)
        return (sup.proc.returncode == 1 and "cannot connect to PostgreSQL" in last_line
                and restarted is not None and time.monotonic() - restarted < 30.0)

    def kill_child(self) -> bool:
        """SIGKILL one random busy child; False if no child was busy right now."""
        candidates = [(sup, pid, title) for sup in self.sups for pid, title in sup.busy_children()]
        if not candidates:
            return False
        _sup, pid, title = self.rng.choice(candidates)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return False
        self.report.child_kills += 1
        if self.report.child_kills <= 3:
            self.event(f"SIGKILLed child {pid}: {title}", show=False)
        return True

    def kill_supervisor(self, fraction: float) -> None:
        """SIGKILL a random supervisor and start a replacement."""
        sup = self.rng.choice(self.sups)
        busy, pids = len(sup.busy_children()), sup.children()
        children = len(pids)
        killed_at = time.time()
        sup.kill()
        self.report.kills.append(SupervisorKill(killed_at, frozenset(pids), sup.pid))
        self.sups.remove(sup)
        self.retired.append(sup)
        self.report.supervisor_kills += 1
        self.start_supervisor()
        self.event(f"at {fraction:.0%} done: SIGKILLed supervisor {sup.pid} ({children} "
                   f"children, {busy} busy), started a replacement")

    def restart_db(self, fraction: float) -> None:
        """Restart PostgreSQL (fast shutdown: every session is cut)."""
        began = time.monotonic()
        self.server.restart()
        self.db_restarted_at = time.monotonic()
        self.report.db_restarts += 1
        if self.holder is not None:
            self.hold_horizon()
        self.event(f"at {fraction:.0%} done: restarted PostgreSQL "
                   f"({time.monotonic() - began:.1f} s)")

    def stop_all(self) -> None:
        """SIGTERM every supervisor; each must drain and exit 0 within its grace."""
        for sup in self.sups:
            sup.terminate()
        for sup in self.sups:
            code = sup.wait(self.s.grace + 30)
            if code != 0:
                self.report.driver_violations.append(
                    f"supervisor {sup.pid} exited with {code} after SIGTERM; see {sup.log_path}")

    def close(self) -> None:
        """Kill whatever is left (after a failure) and close the logs."""
        if self.holder is not None:
            self.holder.close()
        for sup in self.sups + self.retired:
            sup.close()


def run_soak(settings: SoakSettings, server, workdir: Path, say=print) -> SoakReport:
    """One full soak on ``server`` (a started ``EmbeddedServer``-like object)."""
    report = SoakReport(jobs=settings.jobs)
    migrate(server.dsn)
    install_start_audit(server.dsn)  # the evidence for runs a SIGKILL left uncharged
    began = time.monotonic()
    report.enqueued_by_kind = enqueue_mix(server.dsn, settings.jobs, settings.seed, settings.mix)
    report.enqueue_seconds = time.monotonic() - began
    say(f"enqueued {settings.jobs} jobs in {report.enqueue_seconds:.1f} s")
    driver = Driver(settings, server, workdir, report, say)
    try:
        driver.run()
    finally:
        driver.close()
    report.check = check(server.dsn, driver.runlog, expected_jobs=settings.jobs,
                         kills=report.kills)
    return report


def summary(report: SoakReport, settings: SoakSettings) -> str:
    """The report as a plain-text table."""
    c = report.check or CheckResult()
    rate = report.jobs / report.work_seconds if report.work_seconds else 0.0
    by_kind = ", ".join(f"{k.removeprefix('chaos_')} {v}"
                        for k, v in sorted(report.enqueued_by_kind.items()))
    rows = [
        ("jobs", f"{report.jobs} ({by_kind})"),
        ("supervisors x children", f"{settings.supervisors} x {settings.children}"),
        ("enqueue", f"{report.enqueue_seconds:.1f} s"),
        ("work duration", f"{report.work_seconds:.1f} s"),
        ("throughput", f"{rate:.0f} jobs/s (chaos included)"),
        ("final states", ", ".join(f"{k} {v}" for k, v in sorted(c.states.items()))),
        ("child kills (SIGKILL busy child)", str(report.child_kills)),
        ("supervisor kills (SIGKILL parent)", str(report.supervisor_kills)),
        ("supervisor starts", str(report.supervisor_starts)),
        ("PostgreSQL restarts", str(report.db_restarts)),
        ("handler runs", str(c.runs)),
        ("reruns explained", f"{sum(c.reruns.values())} ("
         + ", ".join(f"{k} {v}" for k, v in sorted(c.reruns.items()) if v) + ")"),
        ("failed attempts that never ran", ", ".join(
            f"{k} {v}" for k, v in sorted(c.lost_claims.items())) or "0"),
        ("discarded, by reason", "; ".join(
            f"{k}: {v}" for k, v in sorted(c.discarded.items())) or "0"),
        ("unexplained double runs", str(c.unexplained_reruns)),
        ("runs begun just before a SIGKILL of their supervisor, not charged",
         str(c.uncharged_at_kill)),
        ("violations", str(len(report.driver_violations) + sum(c.violation_kinds.values()))),
    ]
    width = max(len(k) for k, _ in rows)
    lines = [f"{k:<{width}}  {v}" for k, v in rows]
    lines += ["events (first child kills, every supervisor kill and restart):"]
    lines += [f"  {e}" for e in report.events]
    lines += [f"  ! {v}" for v in report.violations[:30]]
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> tuple[SoakSettings, argparse.Namespace]:
    """Settings from the command line."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    d = SoakSettings()
    p.add_argument("--jobs", type=int, default=d.jobs)
    p.add_argument("--supervisors", type=int, default=d.supervisors)
    p.add_argument("--children", type=int, default=d.children)
    p.add_argument("--lease-ttl", type=float, default=d.lease_ttl)
    p.add_argument("--grace", type=float, default=d.grace)
    p.add_argument("--kill-interval", type=float, default=d.kill_interval,
                   help="seconds between child kills (0 disables them)")
    p.add_argument("--supervisor-kills", type=int, default=d.supervisor_kills)
    p.add_argument("--db-restarts", type=int, default=d.db_restarts)
    p.add_argument("--timeout", type=float, default=d.timeout)
    p.add_argument("--stall", type=float, default=d.stall)
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--workdir", type=Path, help="default: a new temporary directory")
    p.add_argument("--keep", action="store_true", help="keep the work directory on success")
    ns = p.parse_args(argv)
    settings = SoakSettings(
        jobs=ns.jobs, supervisors=ns.supervisors, children=ns.children, lease_ttl=ns.lease_ttl,
        grace=ns.grace, kill_interval=ns.kill_interval or float("inf"),
        supervisor_kills=ns.supervisor_kills, db_restarts=ns.db_restarts, timeout=ns.timeout,
        stall=ns.stall, seed=ns.seed)
    return settings, ns


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    settings, ns = parse_args(argv)
    workdir = ns.workdir or Path(tempfile.mkdtemp(prefix="chaos-soak-"))
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"work directory: {workdir}")
    server = private_server()
    try:
        report = run_soak(settings, server, workdir)
    finally:
        server.close()
    print(summary(report, settings))
    if report.passed and not ns.keep and ns.workdir is None:
        shutil.rmtree(workdir, ignore_errors=True)
    elif not report.passed:
        print(f"logs kept in {workdir}")
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())
