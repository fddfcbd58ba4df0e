"""Soak of schedules under chaos: ten every-second schedules, three supervisors, SIGKILLs.

Usage::

    .venv/bin/python scripts/chaos/schedules_soak.py --duration 150

It starts a private embedded PostgreSQL, migrates, and starts ``--supervisors``
``supervisor run -n 1 --app scripts.chaos.schedules_soak`` processes (this module is
also the app: importing it defines the ten schedules). Every few seconds (random,
``--kill-every`` on average) it SIGKILLs a random supervisor and starts a replacement
after a short random pause; once, mid-run, it kills all of them and leaves the database
without a supervisor for ``--outage`` seconds. Then every supervisor gets SIGTERM and the
fires are counted against the slots:

* twice: two jobs of one schedule with the same ``run_at`` (the key makes two fire rows
  for one slot impossible; this checks the jobs themselves);
* lost (or overcounted): a slot between two fires that no fire row accounts for (or
  two do); each fire row stands for ``coalesced`` slots: its own and the missed ones
  just before it;
* missed while alive: a slot folded into a coalesced fire although a ready supervisor
  was alive from the slot to the end of its grace (ready = its log says it declared its
  schedules).

It prints a summary (JSON with ``--json``) and exits 1 if any count above is not zero.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the project importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from workers import job

SCHEDULES = [f"soak_tick_{i}" for i in range(10)]


def _noop() -> None:
    """A scheduled job that does nothing: the soak counts fires, not work."""


for _name in SCHEDULES:
    job(name=_name, every=1)(_noop)


@dataclass
class Proc:
    """One supervisor process and when it was alive and ready."""

    popen: subprocess.Popen
    log_path: Path
    started: float
    ready: float | None = None
    ended: float | None = None

    def check_ready(self) -> None:
        """Note the moment its log first says it declared its schedules."""
        if self.ready is None and "schedules: " in self.log_path.read_text(errors="replace"):
            self.ready = time.time()


@dataclass
class Run:
    """Everything the driver did, for the check."""

    procs: list[Proc] = field(default_factory=list)
    kills: int = 0
    bad_exits: int = 0  # non-zero exits after the final SIGTERM
    outage: tuple[float, float] | None = None


def start(dsn: str, workdir: Path, run: Run) -> Proc:
    """Start one ``supervisor run -n 1`` on this module's schedules."""
    from scripts.chaos.procs import child_env, supervisor_command

    log_path = workdir / f"supervisor-{len(run.procs)}.log"
    with log_path.open("ab") as log:
        popen = subprocess.Popen(
            supervisor_command("run", "-n", "1", "--app", "scripts.chaos.schedules_soak"),
            env=child_env(dsn), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
            cwd=str(workdir))
    proc = Proc(popen, log_path, time.time())
    run.procs.append(proc)
    return proc


def kill(proc: Proc) -> None:
    """SIGKILL a supervisor and note when it died."""
    proc.popen.send_signal(signal.SIGKILL)
    proc.popen.wait(timeout=30)
    proc.ended = time.time()


def drive(dsn: str, workdir: Path, args: argparse.Namespace) -> Run:
    """Run the supervisors for ``--duration`` seconds with kills, restarts and one outage."""
    run = Run()
    live = [start(dsn, workdir, run) for _ in range(args.supervisors)]
    t0 = time.time()
    end = t0 + args.duration
    next_kill = t0 + random.expovariate(1 / args.kill_every)
    outage_at = t0 + args.duration / 2
    restart_at: list[float] = []
    while time.time() < end:
        time.sleep(0.1)
        now = time.time()
        for proc in live:
            proc.check_ready()
        if args.outage and run.outage is None and now >= outage_at:
            for proc in live:
                kill(proc)
            run.kills += len(live)
            live = []
            time.sleep(args.outage)
            run.outage = (now, time.time())
            live = [start(dsn, workdir, run) for _ in range(args.supervisors)]
            restart_at.clear()
            next_kill = time.time() + random.expovariate(1 / args.kill_every)
            continue
        if now >= next_kill and live:
            victim = random.choice(live)
            kill(victim)
            run.kills += 1
            live.remove(victim)
            restart_at.append(now + random.uniform(0, 3))
            next_kill = now + random.expovariate(1 / args.kill_every)
        for when in [w for w in restart_at if w <= now]:
            restart_at.remove(when)
            live.append(start(dsn, workdir, run))
    # A parent that gets SIGTERM before it installed its handlers dies of it (-15): that
    # start-up window is not what this soak is about, so let the last ones get ready.
    deadline = time.time() + 30
    while time.time() < deadline and any(p.ready is None for p in live):
        time.sleep(0.1)
        for proc in live:
            proc.check_ready()
    for proc in live:
        proc.popen.send_signal(signal.SIGTERM)
    for proc in live:
        code = proc.popen.wait(timeout=60)
        proc.ended = time.time()
        if code != 0:
            run.bad_exits += 1
            print(f"supervisor {proc.popen.pid} exited {code}: see {proc.log_path}")
    return run


def check(dsn: str, run: Run, grace: float) -> dict:
    """Count the fires against the slots; returns the summary."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        fires = conn.execute(
            "SELECT schedule, extract(epoch FROM slot), coalesced,"
            " extract(epoch FROM fired_at - slot) FROM supervisor.schedule_fires"
            " ORDER BY schedule, slot").fetchall()
        twice = conn.execute(
            "SELECT count(*) FROM (SELECT kind, run_at FROM supervisor.jobs"
            " GROUP BY kind, run_at HAVING count(*) > 1) d").fetchone()[0]
        jobs = conn.execute("SELECT count(*) FROM supervisor.jobs").fetchone()[0]
    alive = [(p.ready, p.ended or time.time()) for p in run.procs if p.ready is not None]

    def alive_over(a: float, b: float) -> bool:
        return any(start <= a and b <= end for start, end in alive)

    lost = overcounted = missed_alive = coalesced_slots = own = 0
    delays: list[float] = []
    by_schedule: dict[str, list[tuple[float, int, float]]] = {}
    for name, slot, coalesced, delay in fires:
        by_schedule.setdefault(name, []).append((float(slot), coalesced, float(delay)))
    for rows in by_schedule.values():
        for (prev, _, _), (slot, coalesced, _) in pairwise(rows):
            span = round(slot - prev)
            lost += max(0, span - coalesced)
            overcounted += max(0, coalesced - span)
            for missed in range(1, coalesced):
                missed_slot = slot - missed
                coalesced_slots += 1
                if alive_over(missed_slot, missed_slot + grace):
                    missed_alive += 1
        own += len(rows)
        # Delay of on-time fires while a supervisor was ready (not the catch-up after an outage).
        delays.extend(d for slot, c, d in rows if c == 1 and alive_over(slot, slot))
    delays.sort()

    def pct(p: float) -> float:
        return round(delays[min(len(delays) - 1, int(p * len(delays)))] * 1000, 1) if delays else 0

    return {"schedules": len(by_schedule), "fires": own, "jobs": jobs, "twice": twice,
            "lost": lost, "overcounted": overcounted, "coalesced_slots": coalesced_slots,
            "missed_while_alive": missed_alive,
            "supervisor_kills": run.kills, "supervisors_started": len(run.procs),
            "bad_exits": run.bad_exits,
            "outage_s": round(run.outage[1] - run.outage[0], 1) if run.outage else 0,
            "fire_delay_ms": {"p50": pct(0.5), "p99": pct(0.99), "max": pct(1.0)}}


def main() -> int:
    """Parse flags, soak, check, print; 1 on any violation."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=150.0, help="seconds of chaos")
    parser.add_argument("--supervisors", type=int, default=3)
    parser.add_argument("--kill-every", type=float, default=8.0,
                        help="mean seconds between SIGKILLs of one supervisor")
    parser.add_argument("--outage", type=float, default=6.0,
                        help="seconds with no supervisor at all, once mid-run (0: never)")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    random.seed(args.seed)
    from scripts.chaos.procs import migrate, private_server
    from supervisor.schedules.firing import GRACE

    workdir = Path(tempfile.mkdtemp(prefix="schedules-soak-"))
    server = private_server()
    try:
        migrate(server.dsn)
        run = drive(server.dsn, workdir, args)
        summary = check(server.dsn, run, GRACE)
    finally:
        server.close()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    if args.json:
        import orjson
        print(orjson.dumps(summary).decode())
    else:
        for key, value in summary.items():
            print(f"{key:22} {value}")
    bad = (summary["twice"] or summary["lost"] or summary["overcounted"]
           or summary["missed_while_alive"] or summary["bad_exits"])
    return 1 if bad else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
