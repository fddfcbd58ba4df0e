"""Row versions and WAL bytes per job of a no-op drain, for storage settings of
supervisor.jobs (issue 40: fillfactor, autovacuum), one private server, one run.

Each round enqueues ``--jobs`` no-op jobs into a fresh table of each variant's database
(plain SQL, one statement) and drains them with ``supervisor run -n 2 --burst``. A
private embedded PostgreSQL keeps the WAL and the statistics ours alone: the shared
server's WAL position moves with every other session's writes. Per variant, the median
over rounds (alternating) of, per job drained: row versions written to supervisor.jobs
(n_tup_ins/upd/hot_upd/del of pg_stat_user_tables), WAL bytes of the drain (and of the
enqueue), the table and its indexes' size after the drain, the drain rate.

With ``--history N`` each database first holds N completed jobs (what retention keeps
for days) and rounds do not empty the table: the drained jobs join the history, as in a
queue that lives for months. That is where autovacuum's defaults (a scale factor of 0.2
of the whole table) wait longest, so the variants compared there are autovacuum
settings; the table then adds dead row versions left, autovacuum runs so far, and the
claim index's size after each round.

Usage: python scripts/bench/row_versions.py [--jobs 20000] [--rounds 3] [--history 0]
       [--variant NAME=RELOPTIONS ...]   (e.g. ff80='fillfactor=80')
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from dataclasses import dataclass

import common
import psycopg
from pgharness import EmbeddedServer
from psycopg.conninfo import make_conninfo

QUEUE = "bench"
_COUNTERS = """
SELECT t.n_tup_ins, t.n_tup_upd, t.n_tup_hot_upd, t.n_tup_del, pg_current_wal_lsn()::text,
       t.n_dead_tup, t.autovacuum_count
FROM pg_stat_user_tables t WHERE t.schemaname = 'supervisor' AND t.relname = 'jobs'
"""


@dataclass(frozen=True, slots=True)
class Counters:
    """Cumulative counters of supervisor.jobs and the server's WAL position."""

    inserted: int
    updated: int
    hot_updated: int
    deleted: int
    lsn: str
    dead: int
    autovacuums: int


@dataclass(frozen=True, slots=True)
class Round:
    """One drain of one variant, per job."""

    updates: float
    hot_updates: float
    versions: float  # inserts + updates + deletes, the enqueue's insert included
    drain_wal: float
    enqueue_wal: float
    heap_bytes: float
    index_bytes: float
    rate: float
    dead_left: int  # dead row versions in supervisor.jobs after the drain
    autovacuums: int  # autovacuum runs on supervisor.jobs so far (cumulative)
    claim_index_bytes: int  # jobs_available_idx after the drain


def counters(conn: psycopg.Connection) -> Counters:
    """The counters now, after the statistics pending in other backends are flushed
    (PostgreSQL 15 flushes a backend's at most once a second, at idle)."""
    time.sleep(1.5)
    conn.execute("SELECT pg_stat_clear_snapshot()")
    row = conn.execute(_COUNTERS).fetchone()
    assert row is not None
    return Counters(*row)


def wal_between(conn: psycopg.Connection, before: Counters, after: Counters) -> int:
    """WAL bytes written between two counters."""
    row = conn.execute("SELECT pg_wal_lsn_diff(%s, %s)::bigint", (after.lsn, before.lsn)
                       ).fetchone()
    assert row is not None
    return int(row[0])


def one_round(dsn: str, jobs: int, keep: bool) -> Round:
    """Enqueue and drain ``jobs`` no-op jobs on a just-emptied table (``keep``: on the
    table as the last round left it)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        if not keep:
            conn.execute("TRUNCATE supervisor.jobs, supervisor.supervisors, "
                         "supervisor.queues")
        conn.execute("CHECKPOINT")  # full-page images start over alike in every round
        start = counters(conn)
        conn.execute("INSERT INTO supervisor.jobs (kind, queue) SELECT 'run_noop', %s "
                     "FROM generate_series(1, %s)", (QUEUE, jobs))
        conn.execute("ANALYZE supervisor.jobs")
        enqueued = counters(conn)
        seconds = common.run_burst(dsn, "-q", QUEUE, "-n", "2")
        drained = counters(conn)
        done = conn.execute("SELECT count(*) FROM supervisor.jobs WHERE state <> 'completed'"
                            ).fetchone()
        assert done is not None and done[0] == 0, done
        sizes = conn.execute("SELECT pg_relation_size('supervisor.jobs'), "
                             "pg_indexes_size('supervisor.jobs'), "
                             "pg_relation_size('supervisor.jobs_available_idx')").fetchone()
        assert sizes is not None
        return Round(
            updates=(drained.updated - enqueued.updated) / jobs,
            hot_updates=(drained.hot_updated - enqueued.hot_updated) / jobs,
            versions=(drained.inserted + drained.updated + drained.deleted
                      - start.inserted - start.updated - start.deleted) / jobs,
            drain_wal=wal_between(conn, enqueued, drained) / jobs,
            enqueue_wal=wal_between(conn, start, enqueued) / jobs,
            heap_bytes=sizes[0] / jobs, index_bytes=sizes[1] / jobs, rate=jobs / seconds,
            dead_left=drained.dead, autovacuums=drained.autovacuums,
            claim_index_bytes=sizes[2])


def variant_database(base_dsn: str, name: str, reloptions: str, history: int) -> str:
    """A migrated database whose supervisor.jobs has ``reloptions`` (none: defaults)
    and ``history`` completed jobs."""
    dsn = common.scratch_database(base_dsn, f"row_versions_{name}")
    with psycopg.connect(dsn, autocommit=True) as conn:
        if reloptions:
            conn.execute(f"ALTER TABLE supervisor.jobs SET ({reloptions})")
        conn.execute("INSERT INTO supervisor.jobs (kind, queue, state, attempt, "
                     "attempted_at, finished_at) SELECT 'run_noop', %s, 'completed', 1, "
                     "now(), now() FROM generate_series(1, %s)", (QUEUE, history))
        conn.execute("VACUUM ANALYZE supervisor.jobs")
    return dsn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--history", type=int, default=0,
                        help="completed jobs each table starts with; rounds then keep rows")
    parser.add_argument("--variant", action="append", default=[],
                        help="NAME=RELOPTIONS for supervisor.jobs (repeatable)")
    args = parser.parse_args()
    variants = {"default": ""}
    variants.update(v.split("=", 1) for v in args.variant)
    print(f"load before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    server = EmbeddedServer()
    try:
        base = make_conninfo(server.dsn)
        dsns = {name: variant_database(base, name, opts, args.history)
                for name, opts in variants.items()}
        results: dict[str, list[Round]] = {name: [] for name in variants}
        for _ in range(args.rounds):
            for name, dsn in dsns.items():
                results[name].append(one_round(dsn, args.jobs, keep=args.history > 0))
        print(f"load after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print("| variant | reloptions | updates/job | HOT/job | versions/job | "
              "drain WAL B/job | enqueue WAL B/job | heap B/job | index B/job | jobs/s |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for name, rounds in results.items():
            def med(field: str, rounds: list[Round] = rounds) -> float:
                return statistics.median(getattr(r, field) for r in rounds)
            print(f"| {name} | {variants[name] or '-'} | {med('updates'):.2f} | "
                  f"{med('hot_updates'):.2f} | {med('versions'):.2f} | "
                  f"{med('drain_wal'):.0f} | {med('enqueue_wal'):.0f} | "
                  f"{med('heap_bytes'):.0f} | {med('index_bytes'):.0f} | "
                  f"{med('rate'):.0f} |")
        print("\nper round: drain WAL B/job / heap B/job")
        for name, rounds in results.items():
            print(f"{name}: " + ", ".join(f"{r.drain_wal:.0f}/{r.heap_bytes:.0f}"
                                          for r in rounds))
        if args.history:
            print("\nper round (history mode): dead versions left / autovacuums so far / "
                  "claim index KiB / jobs/s")
            for name, rounds in results.items():
                print(f"{name}: " + ", ".join(
                    f"{r.dead_left}/{r.autovacuums}/{r.claim_index_bytes // 1024}/"
                    f"{r.rate:.0f}" for r in rounds))
    finally:
        server.close()


if __name__ == "__main__":
    main()
