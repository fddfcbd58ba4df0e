"""Kill storm against pipelined children: short jobs, ``max_attempts=1``, children
SIGKILLed at random (with ``--drains``, the supervisor also drained by SIGTERM and
replaced; with ``--pauses``, the queue also paused and resumed) while
``supervisor run -n 2`` with default settings works through them.

A job queued in a child's pipe behind a killed job never started, so it must come back
unstarted and run elsewhere with its single attempt unspent. The checks at the end:

- every job ended (completed or discarded), none left available or running;
- no job ran twice (one attempt each: a second run would be a double execution);
- every discarded job was the running job of a child killed: its error names that
  child, and no child is named twice (the jobs queued behind it were not charged);
- at most one job discarded per child killed.

A discarded job with no run record of its own was killed between its START and its
handler's first line (it had started: its child said so); those are counted, not
failed.

With ``--hangs`` the supervisor reaches PostgreSQL through a proxy that now and then
stops answering for 0.5-4 s (sometimes longer than the lease) and then resumes, as a
hung server or a pooler holding queries does. With ``--partition`` a second supervisor
reaches the database directly while the first is cut off by the proxy for 2-9 s at a
time (silence, then the connections are gone). Both run with a 5 s lease, a 1.5 s
database deadline and a 1 s maintenance round. A supervisor that cannot renew fences
itself: its running job is interrupted, uncharged, and runs again; after a partition
longer than the lease the other supervisor's rescue may charge it (with one attempt:
discarded, ``lease expired``). So in these modes "ran twice" means two runs that both
reached their end, a run that began after another had ended, or two runs alive at
once; a run cut short followed by another is the fence working. With ``--partition`` a
job that finished on the cut-off supervisor and ran again on the other once its lease
was rescued is counted apart, not as a problem: it finished before its supervisor knew
it was cut off, and its outcome could not reach the database before the lease ran out
(at-least-once delivery; no fence can stop what already ended). Two runs at once are
always a problem.

With ``--batches`` (issue 42) the jobs are enqueued as four batches with a callback, in
a queue set ``fair = "batch"`` (their claims take turns), and the end also checks that
every batch closed with exactly one callback and that no other job was enqueued.

With ``--heavy-tail`` the stream is one heavy-tailed kind instead (issue 28): sleeps of
2 ms with one in 200 taking 3 s, so the jobs queued behind a long one are recalled (SKIP,
SKIPPED) and given to the other child while the kills go on.

Usage: python scripts/chaos/pipeline_storm.py [--dsn DSN] [--jobs 20000] [--seed 1]
       [--drains] [--pauses] [--hangs] [--partition] [--heavy-tail] [--batches]
       [--timeout 300]
       [--database NAME]
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import signal
import sys
import tempfile
import time
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from scripts.chaos import procs
from scripts.chaos.runlog import read_runs
from shared.batches import Callback
from shared.enqueue import enqueue_many
from supervisor.admin import set_paused

DATABASE = "supervisor_chaos_pipeline"


def scratch(dsn: str, name: str = DATABASE) -> str:
    """A fresh database ``name`` next to ``dsn``'s, migrated; its DSN."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    target = psycopg.conninfo.make_conninfo(dsn, dbname=name)
    procs.migrate(target)
    return target


def proxy_for(dsn: str):
    """A ``PartitionProxy`` (tests/netproxy.py) in front of ``dsn``'s server, and the DSN
    that goes through it."""
    tests_dir = str(Path(__file__).resolve().parents[2] / "tests")
    if tests_dir not in sys.path:
        sys.path.insert(0, tests_dir)
    from netproxy import PartitionProxy

    params = psycopg.conninfo.conninfo_to_dict(dsn)
    proxy = PartitionProxy((params.get("host") or "127.0.0.1",
                            int(params.get("port") or 5432)))
    return proxy, psycopg.conninfo.make_conninfo(dsn, host="127.0.0.1", port=proxy.port)


class Faults:
    """The proxy's schedule: hangs that resume, or partitions that heal."""

    def __init__(self, rng: random.Random, proxy, partition: bool) -> None:
        self.rng = rng
        self.proxy = proxy
        self.partition = partition
        self.count = 0
        self.longest = 0.0
        self.cut_until: float | None = None
        self.next_at = time.monotonic() + rng.uniform(1.0, 2.0)

    def step(self, now: float) -> None:
        if self.cut_until is not None:
            if now >= self.cut_until:
                self.proxy.heal() if self.partition else self.proxy.thaw()
                self.cut_until = None
                self.next_at = now + self.rng.uniform(2.0, 4.0)
            return
        if now >= self.next_at:
            length = (self.rng.uniform(2.0, 9.0) if self.partition
                      else self.rng.choice([self.rng.uniform(0.5, 4.0), self.rng.uniform(6, 8)]))
            self.proxy.blackhole()
            self.count += 1
            self.longest = max(self.longest, length)
            self.cut_until = now + length


FAULT_SETTINGS = ("database_deadline = 1.5\nstatement_timeout = 1.0\n"
                  "maintenance_interval = 1.0\n")
# The storm's SIGKILLs are the infrastructure failing, not the jobs: the per-kind breaker
# (ten crashes within a minute pause the kind for five) and poison detection would
# rightly stop such jobs, so both are off here, as in soak.py. With the breaker on, the
# storm paused its kind within a second and ran 420 of 5,000 jobs in 90 s.
STORM_SETTINGS = "breaker_failures = 0\npoison_after = 0\n"
# --batches: the queue's claims take turns between the batches (issue 42).
FAIR_SETTINGS = '[queues.default]\nfair = "batch"\n'


def storm(dsn: str, jobs: int, seed: int, drains: bool, pauses: bool, timeout: float,
          workdir: Path, hangs: bool = False, partition: bool = False,
          heavy_tail: bool = False, loops: int = 20_000, batches: bool = False):
    rng = random.Random(seed)
    kinds = [("chaos_cpu", {"loops": loops}), ("chaos_noop", {})]
    ids = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        if heavy_tail:
            ids += enqueue_many("chaos_sleep", [{"ms": 3000 if i % 200 == 199 else 2}
                                                for i in range(jobs)],
                                conn=conn, max_attempts=1)
        else:
            for kind, args in kinds:
                if not batches:
                    ids += enqueue_many(kind, [args] * (jobs // len(kinds)), conn=conn,
                                        max_attempts=1)
                    continue
                for _ in range(2):  # two batches of each kind, taking turns
                    ids += enqueue_many(kind, [args] * (jobs // len(kinds) // 2), conn=conn,
                                        max_attempts=1,
                                        then=Callback("chaos_noop", {})).ids
    runlog = workdir / "runs.log"
    kills = drained = paused = 0
    started = time.monotonic()
    generation = 0
    faults = None
    cut_side: set[int] = set()  # pids of the supervisors behind the proxy
    settings = workdir / "storm.toml"
    settings.write_text(STORM_SETTINGS + (FAIR_SETTINGS if batches else ""))
    extra: list[str] = ["--config", str(settings)]
    sup_dsn = dsn
    if hangs or partition:
        proxy, sup_dsn = proxy_for(dsn)
        faults = Faults(rng, proxy, partition)
        settings.write_text(STORM_SETTINGS + FAULT_SETTINGS
                            + (FAIR_SETTINGS if batches else ""))
        extra = ["--lease-ttl", "5", "--config", str(settings)]

    def launch(through: str = sup_dsn) -> procs.SupervisorProc:
        nonlocal generation
        generation += 1
        proc = procs.SupervisorProc(through, runlog, workdir / f"sup{generation}.log",
                                    ["-n", "2", "--burst", "--discards-ok", "--grace", "10",
                                     *extra])  # its discards are judged by the checks
        if through != dsn:
            cut_side.add(proc.pid)
        return proc

    sup = launch()
    # --partition: a second supervisor that always reaches the database.
    direct = launch(dsn) if partition else None
    next_drain = time.monotonic() + rng.uniform(1.0, 2.0)
    next_pause = time.monotonic() + rng.uniform(0.2, 0.5)
    try:
        while time.monotonic() - started < timeout:
            if faults is not None:
                faults.step(time.monotonic())
            if direct is not None and not direct.alive():
                code = direct.wait(1)
                if code != 0:
                    raise SystemExit(f"supervisor exited {code}:\n{direct.log_text()[-2000:]}")
                if left(dsn):
                    direct.close()
                    direct = launch(dsn)
            if not sup.alive():
                code = sup.wait(1)
                # A start during a fault may fail to reach the database: start again.
                unreachable = "error: cannot connect" in sup.log_text() or \
                    "while connecting" in sup.log_text()
                if code != 0 and not (faults is not None and unreachable):
                    raise SystemExit(f"supervisor exited {code}:\n{sup.log_text()[-2000:]}")
                if not left(dsn):
                    break
                sup.close()
                sup = launch()
                continue
            time.sleep(rng.uniform(0.02, 0.1))  # the storm's own pace, not a wait
            children = sup.children() + (direct.children() if direct is not None else [])
            if children:
                try:
                    os.kill(rng.choice(children), signal.SIGKILL)
                    kills += 1
                except ProcessLookupError:  # it exited between the listing and the kill
                    pass
            if pauses and time.monotonic() >= next_pause:
                # Paused for a moment: the children give back what they hold queued of
                # it (or run what they took first); then work goes on.
                with psycopg.connect(dsn, autocommit=True) as conn:
                    set_paused(conn, "default", True)
                    time.sleep(rng.uniform(0.01, 0.1))  # the storm's pace
                    set_paused(conn, "default", False)
                paused += 1
                next_pause = time.monotonic() + rng.uniform(0.2, 0.5)
            if drains and time.monotonic() >= next_drain:
                sup.terminate()
                sup.wait(30)
                drained += 1
                sup.close()
                sup = launch()
                next_drain = time.monotonic() + rng.uniform(1.0, 2.0)
        if direct is not None:
            direct.wait(30)
    finally:
        sup.close()
        if direct is not None:
            direct.close()
        if faults is not None:
            faults.proxy.close()
    fences = sum(path.read_text(errors="replace").count("interrupting")
                 for path in workdir.glob("sup*.log"))
    recalls = sum(path.read_text(errors="replace").count("jobs recalled")
                  for path in workdir.glob("sup*.log"))
    if heavy_tail:
        print(f"{recalls} recalls of jobs queued behind a long one")
    if faults is not None:
        print(f"{faults.count} {'partitions' if partition else 'hangs'} (longest "
              f"{faults.longest:.1f} s), {fences} self-fences")
    return ids, runlog, kills, drained, paused, time.monotonic() - started, cut_side


def left(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM supervisor.jobs WHERE state NOT IN "
                            "('completed', 'discarded')").fetchone()[0]


def ran_twice(runs: list) -> bool:
    """Two runs of one job that both ended, one that began after another ended, or two
    alive at once (a run without an end was cut short: its end is unknown)."""
    ended = [r for r in runs if r.end is not None]
    if len(ended) > 1:
        return True
    for first in runs:
        for second in runs:
            if second is not first and first.end is not None and \
                    first.start <= second.start <= first.end:
                return True
            if second is not first and first.end is not None and second.start > first.end:
                return True
    return False


def finished_then_rescued(runs: list, cut_side: set[int]) -> bool:
    """Runs one after another, never at once: the first ended on the supervisor that was
    cut off, the next ran on the other. The at-least-once case a fence cannot prevent: a
    job that finished before its supervisor knew it was cut off, whose outcome could not
    be written before its lease was rescued."""
    ordered = sorted(runs, key=lambda r: r.start)
    for first, second in itertools.pairwise(ordered):
        if first.end is None or second.start < first.end:
            return False
    return ordered[0].ppid in cut_side and all(r.ppid not in cut_side for r in ordered[1:])


def check(dsn: str, ids: list[int], runlog: Path, kills: int,
          fenced: bool = False, cut_side: set[int] | None = None) -> list[str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = {r[0]: (r[1], r[2]) for r in conn.execute(
            "SELECT id, state, attempt FROM supervisor.jobs WHERE id = ANY(%s)", (ids,))}
        charged = [r[0] for r in conn.execute(
            "SELECT errors->-1->>'message' FROM supervisor.jobs WHERE id = ANY(%s) "
            "AND state = 'discarded'", (ids,))]
    runs, bad = read_runs(runlog)
    problems = []
    unfinished = [i for i, (state, _) in rows.items() if state not in ("completed",
                                                                       "discarded")]
    twice = [i for i, r in runs.items() if (ran_twice(r) if fenced else len(r) > 1)]
    if cut_side:
        rerun = [i for i in twice if finished_then_rescued(runs[i], cut_side)]
        if rerun:
            print(f"{len(rerun)} jobs finished on the cut-off side and ran again on the other "
                  f"after their lease was rescued: {rerun[:10]}")
        twice = [i for i in twice if i not in rerun]
    discarded = [i for i, (state, _) in rows.items() if state == "discarded"]
    unrun = [i for i in discarded if i not in runs]
    if unfinished:
        problems.append(f"{len(unfinished)} jobs did not end: {unfinished[:10]}")
    if twice:
        problems.append(f"{len(twice)} jobs ran twice: {twice[:10]}")
    # After a partition longer than the lease, the other supervisor's rescue charges
    # the fenced job (one attempt: discarded) as it would a dead supervisor's.
    rescued = [m for m in charged if fenced and (m or "").startswith("lease of supervisor")]
    charged = [m for m in charged if m not in rescued]
    if rescued:
        print(f"{len(rescued)} jobs charged by a rescue after a partition")
    by_child = [m for m in charged if not (m or "").startswith("child ")]
    if by_child:
        problems.append(f"{len(by_child)} discarded jobs not charged to a killed child: "
                        f"{by_child[:5]}")
    if len(set(charged)) != len(charged):
        problems.append("a killed child cost more than its running job: "
                        f"{sorted(m for m in set(charged) if charged.count(m) > 1)[:5]}")
    if len(discarded) > kills:
        problems.append(f"{len(discarded)} discarded for {kills} children killed")
    if bad:
        problems.append(f"{bad} unreadable run-log lines")
    completed = sum(1 for state, _ in rows.values() if state == "completed")
    print(f"jobs {len(ids)}: completed {completed}, discarded {len(discarded)} "
          f"({len(unrun)} killed between START and the handler's first line), "
          f"runs logged {len(runs)}")
    return problems


def check_batches(dsn: str) -> list[str]:
    """--batches: every batch closed, with exactly one callback, and no other job than
    the members and their callbacks exists."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        open_ = conn.execute("SELECT count(*) FROM supervisor.batches "
                             "WHERE finished_at IS NULL OR callback_id IS NULL").fetchone()[0]
        total = conn.execute("SELECT count(*) FROM supervisor.batches").fetchone()[0]
        strays = conn.execute("SELECT count(*) FROM supervisor.jobs WHERE batch_id IS NULL "
                              "AND id NOT IN (SELECT callback_id FROM supervisor.batches)"
                              ).fetchone()[0]
        callbacks = conn.execute("SELECT count(*) FROM supervisor.jobs WHERE id IN "
                                 "(SELECT callback_id FROM supervisor.batches)").fetchone()[0]
    problems = []
    if open_:
        problems.append(f"{open_} of {total} batches did not close with a callback")
    if strays:
        problems.append(f"{strays} jobs that are neither a member nor a batch's callback "
                        "(a second callback?)")
    print(f"batches {total}: {callbacks} callbacks, {open_} open")
    return problems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=os.environ.get(
        "SUPERVISOR_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"))
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--drains", action="store_true")
    parser.add_argument("--pauses", action="store_true")
    parser.add_argument("--hangs", action="store_true",
                        help="the database stops answering now and then, then resumes")
    parser.add_argument("--partition", action="store_true",
                        help="a second supervisor; the first is cut off now and then")
    parser.add_argument("--heavy-tail", action="store_true",
                        help="2 ms sleeps with one in 200 taking 3 s (issue 28's recall)")
    parser.add_argument("--loops", type=int, default=20_000,
                        help="iterations of each CPU job's loop (200000: about 10-20 ms, "
                             "jobs held 0.1 s deep per child, and the end-of-queue "
                             "rebalance of issue 31)")
    parser.add_argument("--batches", action="store_true",
                        help="the jobs as four batches with callbacks in a fair queue")
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--database", default=DATABASE,
                        help="the scratch database's name (dropped and created)")
    args = parser.parse_args()
    dsn = scratch(args.dsn, args.database)
    with tempfile.TemporaryDirectory(prefix="pipeline-storm-") as tmp:
        ids, runlog, kills, drained, paused, took, cut_side = storm(
            dsn, args.jobs, args.seed, args.drains, args.pauses, args.timeout, Path(tmp),
            args.hangs, args.partition, args.heavy_tail, args.loops, args.batches)
        print(f"{took:.1f} s, {kills} children SIGKILLed, {drained} drains, {paused} pauses")
        problems = check(dsn, ids, runlog, kills, args.hangs or args.partition,
                         cut_side if args.partition else None)
        if args.batches:
            problems += check_batches(dsn)
    for problem in problems:
        print("PROBLEM:", problem)
    raise SystemExit(1 if problems else 0)


if __name__ == "__main__":
    main()
