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

Usage: python scripts/chaos/pipeline_storm.py [--dsn DSN] [--jobs 20000] [--seed 1]
       [--drains] [--pauses] [--timeout 300]
"""

from __future__ import annotations

import argparse
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
from shared.enqueue import enqueue_many
from supervisor.admin import set_paused

DATABASE = "supervisor_chaos_pipeline"


def scratch(dsn: str) -> str:
    """A fresh database next to ``dsn``'s, migrated; its DSN."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {DATABASE}")
    target = psycopg.conninfo.make_conninfo(dsn, dbname=DATABASE)
    procs.migrate(target)
    return target


def storm(dsn: str, jobs: int, seed: int, drains: bool, pauses: bool, timeout: float,
          workdir: Path):
    rng = random.Random(seed)
    kinds = [("chaos_cpu", {"loops": 20_000}), ("chaos_noop", {})]
    ids = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        for kind, args in kinds:
            ids += enqueue_many(kind, [args] * (jobs // len(kinds)), conn=conn,
                                max_attempts=1)
    runlog = workdir / "runs.log"
    kills = drained = paused = 0
    started = time.monotonic()
    generation = 0

    def launch() -> procs.SupervisorProc:
        nonlocal generation
        generation += 1
        return procs.SupervisorProc(dsn, runlog, workdir / f"sup{generation}.log",
                                    ["-n", "2", "--burst", "--grace", "10"])

    sup = launch()
    next_drain = time.monotonic() + rng.uniform(1.0, 2.0)
    next_pause = time.monotonic() + rng.uniform(0.2, 0.5)
    try:
        while time.monotonic() - started < timeout:
            if not sup.alive():
                code = sup.wait(1)
                if code != 0:
                    raise SystemExit(f"supervisor exited {code}:\n{sup.log_text()[-2000:]}")
                if not left(dsn):
                    break
                sup.close()
                sup = launch()
                continue
            time.sleep(rng.uniform(0.02, 0.1))  # the storm's own pace, not a wait
            children = sup.children()
            if children:
                os.kill(rng.choice(children), signal.SIGKILL)
                kills += 1
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
    finally:
        sup.close()
    return ids, runlog, kills, drained, paused, time.monotonic() - started


def left(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM supervisor.jobs WHERE state NOT IN "
                            "('completed', 'discarded')").fetchone()[0]


def check(dsn: str, ids: list[int], runlog: Path, kills: int) -> list[str]:
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
    twice = [i for i, r in runs.items() if len(r) > 1]
    discarded = [i for i, (state, _) in rows.items() if state == "discarded"]
    unrun = [i for i in discarded if i not in runs]
    if unfinished:
        problems.append(f"{len(unfinished)} jobs did not end: {unfinished[:10]}")
    if twice:
        problems.append(f"{len(twice)} jobs ran twice: {twice[:10]}")
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=os.environ.get(
        "SUPERVISOR_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"))
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--drains", action="store_true")
    parser.add_argument("--pauses", action="store_true")
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args()
    dsn = scratch(args.dsn)
    with tempfile.TemporaryDirectory(prefix="pipeline-storm-") as tmp:
        ids, runlog, kills, drained, paused, took = storm(
            dsn, args.jobs, args.seed, args.drains, args.pauses, args.timeout, Path(tmp))
        print(f"{took:.1f} s, {kills} children SIGKILLed, {drained} drains, {paused} pauses")
        problems = check(dsn, ids, runlog, kills)
    for problem in problems:
        print("PROBLEM:", problem)
    raise SystemExit(1 if problems else 0)


if __name__ == "__main__":
    main()
