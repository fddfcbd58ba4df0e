"""A queue under a pinned MVCC horizon (issue 40): what a held snapshot costs the claim.

Two modes:

``steady`` (default): a producer inserts no-op jobs at ``--rate`` jobs/s with plain SQL
(one small ``INSERT`` per 10 ms tick, one commit each) while ``supervisor run -n 2``
works them. Three phases: baseline, hold (a holder keeps the horizon back), recovery.
Per phase: completions against the offer, pickup p50/p99 (run_at to attempted_at),
index entries read per claimed job (``idx_tup_read`` of the claim index, and of every
index of supervisor.jobs, over the jobs started), a read-only probe of a claim scan from
the start of the index, dead tuples, table and index size, row versions and WAL bytes
per job.

``drain``: a backlog of ``--jobs`` no-op jobs drained by ``supervisor run --burst -n 2``,
once with the holder opened before the drain and once without, alternating
``--rounds`` times; the rate of each.

Holders (``--holder``): ``rr``, an idle REPEATABLE READ transaction that has read
supervisor.jobs (a dump, an analytics query); ``xid``, an idle transaction holding an
xid through ``txid_current()`` (a client left idle in transaction); ``query``, a
report's long statement (its snapshot lives as long as it runs); ``none``.

The guardrails of docs/operations.md, measured: ``--guard SETTING=VALUE`` makes a setting
on the holder's session before it begins, as ``ALTER ROLE ... SET`` would for its role
(``idle_in_transaction_session_timeout=60s`` for ``rr``/``xid``, ``statement_timeout=60s``
for ``query``); the hold's row then says when the server ended the holder.
``--elsewhere`` opens the holder in another database of the cluster (the base DSN's):
the guardrail "a database of the queue's own".

``--batch-size N`` (issue 42's "with these features used"): the jobs are enqueued as
batches of N with a callback each (``enqueue_many(..., then=...)``; the callbacks are
counted as offered jobs), so every completion also goes through the batch trigger and
each batch's last one enqueues its callback. ``--fair`` makes the queue ``fair =
"batch"``: its claims take turns between the batches.

``--probe-every S`` (default 5): seconds between two of the read-only probes above. Late
in a long hold each walks every entry the hold kept (225 ms a probe at 20 minutes and
1,000 jobs/s) on a machine of two cores, beside the supervisor it measures; its reads
are taken out of the counts, but not the CPU it takes.

``--minutes``: after the table, each phase minute by minute (jobs made due in that
minute, pickup p50/p99/max, how many of them were not started at the end): where a
recovery's tail sits, and whether the backlog after a hold was gone within two minutes,
as issue 40 asks.

The issue's full lengths: ``--baseline 300 --hold 1200 --recovery 600`` (and ``--rate
1000``); the defaults run in about three minutes. ``--cycles N`` repeats the hold and the
recovery N times after the baseline (the issue's six cycles: ``--baseline 600 --hold 600
--recovery 600 --cycles 6``, two hours and ten minutes); each phase's last column is its
floor, the fewest completions in any whole 10-second window.

Usage: python scripts/bench/horizon.py [--mode steady|drain] [--holder rr|xid|none]
       [--rate 500] [--baseline 40] [--hold 90] [--recovery 40] [--jobs 100000]
       [--batch-size 0] [--fair] [--probe-every 5] [--minutes]
       [--guard SETTING=VALUE ...] [--elsewhere] [--cycles 1]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from shared.batches import Callback
from shared.enqueue import enqueue_many

DB = "supervisor_bench_horizon"
QUEUE = "bench"
TICK = 0.01  # the producer's insert period, seconds

# One row of counters the phases are measured by; deltas between two give a phase.
_COUNTERS = """
SELECT now() AS at,
       (SELECT coalesce(sum(idx_tup_read), 0) FROM pg_stat_user_indexes
        WHERE schemaname = 'supervisor' AND indexrelname = 'jobs_available_idx') AS idx_read,
       (SELECT coalesce(sum(idx_tup_read), 0) FROM pg_stat_user_indexes
        WHERE schemaname = 'supervisor' AND relname = 'jobs') AS all_read,
       t.n_tup_ins AS ins, t.n_tup_upd AS upd, t.n_tup_hot_upd AS hot, t.n_tup_del AS del,
       t.n_dead_tup AS dead,
       pg_current_wal_lsn() AS lsn,
       pg_relation_size('supervisor.jobs') AS heap,
       pg_indexes_size('supervisor.jobs') AS indexes,
       (SELECT coalesce(sum(pg_total_relation_size(i.inhrelid)), 0) FROM pg_inherits i
        WHERE i.inhparent = 'supervisor.jobs'::regclass) AS archived
FROM pg_stat_user_tables t WHERE t.schemaname = 'supervisor' AND t.relname = 'jobs'
"""

# A read-only claim scan from the head of the index, as a claim without a cursor makes.
_PROBE = """
EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)
SELECT id FROM supervisor.jobs
WHERE state = 'available' AND queue = %s AND run_at <= now()
ORDER BY priority, run_at, id LIMIT 10
"""


@dataclass
class Counters:
    """The counters of ``_COUNTERS`` at one moment."""

    at: object
    idx_read: int
    all_read: int
    ins: int
    upd: int
    hot: int
    dele: int
    dead: int
    lsn: str
    heap: int  # the hot table's (finished jobs move to archives: schema 0032)
    indexes: int
    archived: int  # the archives', indexes included


def counters(conn: psycopg.Connection) -> Counters:
    # Statistics reach the views when backends flush them (at most a second late).
    conn.execute("SELECT pg_stat_clear_snapshot()")
    row = conn.execute(_COUNTERS).fetchone()
    return Counters(*row)


@dataclass
class Probe:
    """A read-only claim scan from the index's head: its time, and the index entries it
    read (taken out of the phase's counts: they are the bench's, not the queue's)."""

    ms: float
    claim_index_read: int
    all_read: int


def probe(conn: psycopg.Connection) -> Probe:
    with conn.transaction():
        plan = conn.execute(_PROBE, (QUEUE,)).fetchone()[0]
        # This transaction's own index reads, before they are flushed to the totals.
        claim_read, all_read = conn.execute(
            "SELECT coalesce(sum(pg_stat_get_xact_tuples_returned(indexrelid)) FILTER "
            "(WHERE indexrelname = 'jobs_available_idx'), 0), "
            "coalesce(sum(pg_stat_get_xact_tuples_returned(indexrelid)), 0) "
            "FROM pg_stat_user_indexes "
            "WHERE schemaname = 'supervisor' AND relname = 'jobs'").fetchone()
    return Probe(float(plan[0]["Execution Time"]), int(claim_read), int(all_read))


class Holder:
    """A session that keeps the MVCC horizon back until closed (or until a guardrail
    ends it: ``guard``, a setting made on its session as a role's setting would be).

    ``elsewhere``: the session is in another database of the cluster (the guardrail "a
    database of the queue's own"); an ``rr`` holder there reads a catalog instead."""

    def __init__(self, dsn: str, kind: str, guard: dict[str, str] | None = None,
                 elsewhere: str | None = None) -> None:
        self.kind = kind
        self.conn: psycopg.Connection | None = None
        self.pid: int | None = None
        self._query: threading.Thread | None = None
        if kind == "none":
            return
        self.conn = psycopg.connect(elsewhere or dsn, application_name=f"bench-holder-{kind}",
                                    autocommit=True)
        for name, value in (guard or {}).items():
            self.conn.execute("SELECT set_config(%s, %s, false)", (name, value))
        self.pid = self.conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        table = "pg_class" if elsewhere else "supervisor.jobs"
        if kind == "rr":
            self.conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            self.conn.execute(f"SELECT count(*) FROM {table} WHERE oid < 10" if elsewhere
                              else f"SELECT count(*) FROM {table} WHERE id < 10")
        elif kind == "xid":
            self.conn.execute("BEGIN")
            self.conn.execute("SELECT txid_current()")
        elif kind == "query":  # a report's long statement: its snapshot lives as it runs
            conn = self.conn

            def run() -> None:
                try:
                    conn.execute(f"SELECT pg_sleep(3600) FROM (SELECT count(*) FROM {table}) t")
                except psycopg.Error:
                    pass  # cancelled by the bench's close, or by a statement_timeout

            self._query = threading.Thread(target=run, daemon=True)
            self._query.start()
            time.sleep(0.2)  # the statement is running
        else:
            raise SystemExit(f"unknown holder {kind!r}: rr, xid, query or none")

    def holding(self, conn: psycopg.Connection) -> bool:
        """Whether the session still holds the horizon back, asked from ``conn``."""
        if self.pid is None:
            return False
        row = conn.execute("SELECT backend_xmin IS NOT NULL OR backend_xid IS NOT NULL "
                           "FROM pg_stat_activity WHERE pid = %s", (self.pid,)).fetchone()
        return bool(row and row[0])

    def close(self, conn: psycopg.Connection) -> None:
        """End the hold (``conn``: a session of the bench's, to cancel a running query)."""
        if self.conn is None:
            return
        if self._query is not None:
            conn.execute("SELECT pg_cancel_backend(%s)", (self.pid,))
            self._query.join(timeout=10)
        try:
            if self.kind != "query":
                self.conn.execute("ROLLBACK")  # the explicit BEGIN's transaction
        except psycopg.Error:
            pass  # a guardrail ended the session
        self.conn.close()
        self.conn = None


def enqueue_batches(conn: psycopg.Connection, jobs: int, size: int) -> int:
    """``jobs`` no-op jobs as batches of ``size`` with a callback each (the last batch
    may be smaller); the jobs this offers, callbacks included."""
    offered = 0
    for start in range(0, jobs, size):
        n = min(size, jobs - start)
        enqueue_many("run_noop", [{}] * n, queue=QUEUE, conn=conn,
                     then=Callback("run_noop", {}, queue=QUEUE))
        offered += n + 1
    return offered


class Producer(threading.Thread):
    """Inserts ``rate`` jobs/s with plain SQL, one statement and commit per tick; with
    ``batch_size``, as batches of that many with a callback each, a batch whenever that
    many are due."""

    def __init__(self, dsn: str, rate: float, batch_size: int = 0) -> None:
        super().__init__(daemon=True)
        self.dsn, self.rate, self.batch_size = dsn, rate, batch_size
        self.stopping = threading.Event()
        self.offered = 0
        self.produced = 0  # jobs the rate asked for (without the callbacks)

    def run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True,
                             application_name="bench-producer") as conn:
            started = time.monotonic()
            while not self.stopping.is_set():
                due = int((time.monotonic() - started) * self.rate) - self.produced
                if self.batch_size and due >= self.batch_size:
                    batches = due // self.batch_size
                    self.offered += enqueue_batches(conn, batches * self.batch_size,
                                                    self.batch_size)
                    self.produced += batches * self.batch_size
                elif not self.batch_size and due > 0:
                    conn.execute(
                        "INSERT INTO supervisor.jobs (kind, queue) "
                        "SELECT 'run_noop', %s FROM generate_series(1, %s)", (QUEUE, due))
                    self.offered += due
                    self.produced += due
                time.sleep(TICK)


def scratch(base_dsn: str) -> str:
    """The scratch database, migrated by the checkout that runs (``BENCH_CODE``: another
    checkout's own schema, for a before/after comparison across a schema change)."""
    code = os.environ.get("BENCH_CODE")
    if code:
        return common.scratch_database_for(base_dsn, DB, code)
    return common.scratch_database(base_dsn, DB)


def fair_config(fair: bool) -> list[str]:
    """``--config`` arguments making the bench queue ``fair = "batch"``, or none."""
    if not fair:
        return []
    path = Path(tempfile.mkdtemp(prefix="horizon-")) / "fair.toml"
    path.write_text(f'[queues.{QUEUE}]\nfair = "batch"\n')
    return ["--config", str(path)]


def start_supervisor(dsn: str, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(common.supervisor_cmd("-n", "2", "-q", QUEUE, *extra),
                            env=common.supervisor_env(dsn), cwd=str(common.SCRIPTS),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _ms(interval) -> str:
    return f"{interval.total_seconds() * 1000:.0f}" if interval is not None else "-"


def phase_row(conn: psycopg.Connection, name: str, a: Counters, b: Counters, offered: int,
              probes: list[Probe]) -> str:
    """One report line for the phase between counters ``a`` and ``b``."""
    row = conn.execute(
        """SELECT count(*) FILTER (WHERE state = 'completed' AND finished_at <= %(b)s),
                  percentile_cont(0.5) WITHIN GROUP (ORDER BY attempted_at - run_at),
                  percentile_cont(0.99) WITHIN GROUP (ORDER BY attempted_at - run_at),
                  count(*) FILTER (WHERE attempted_at IS NULL)
           FROM supervisor.jobs WHERE run_at > %(a)s AND run_at <= %(b)s""",
        {"a": a.at, "b": b.at}).fetchone()
    done, p50, p99, waiting = row
    claimed = conn.execute(
        "SELECT count(*) FROM supervisor.jobs WHERE attempted_at > %s AND attempted_at <= %s",
        (a.at, b.at)).fetchone()[0]
    wal = conn.execute("SELECT pg_wal_lsn_diff(%s, %s)", (b.lsn, a.lsn)).fetchone()[0]
    jobs = max(claimed, 1)
    probe_ms = f"{common.median([p.ms for p in probes]):.2f}" if probes else "-"
    claim_read = b.idx_read - a.idx_read - sum(p.claim_index_read for p in probes)
    all_read = b.all_read - a.all_read - sum(p.all_read for p in probes)
    return (f"| {name} | {offered} | {done} ({100 * done / max(offered, 1):.0f}%) "
            f"| {_ms(p50)} / {_ms(p99)} | {waiting} "
            f"| {claim_read / jobs:.1f} | {all_read / jobs:.1f} "
            f"| {probe_ms} | {b.dead} "
            f"| {b.heap / 2**20:.1f} + {b.indexes / 2**20:.1f} | {b.archived / 2**20:.1f} "
            f"| {(b.upd - a.upd) / jobs:.2f} ({(b.hot - a.hot) / jobs:.2f} HOT) "
            f"| {float(wal) / jobs:.0f} | {floor_of(conn, a, b)} |")


def floor_of(conn: psycopg.Connection, a: Counters, b: Counters) -> int:
    """The fewest completions in any whole 10-second window of the phase between ``a``
    and ``b`` (issue 40's "no cycle's floor below the first's")."""
    row = conn.execute(
        """SELECT coalesce(min(n), 0) FROM (
               SELECT w, count(j.id) AS n
               FROM generate_series(0, floor(extract(epoch FROM %(b)s::timestamptz
                                                     - %(a)s::timestamptz) / 10)::int - 1)
                    AS w
               LEFT JOIN supervisor.jobs j
                 ON j.state = 'completed'
                AND j.finished_at >= %(a)s::timestamptz + w * interval '10 seconds'
                AND j.finished_at < %(a)s::timestamptz + (w + 1) * interval '10 seconds'
               GROUP BY w) AS windows""",
        {"a": a.at, "b": b.at}).fetchone()
    return int(row[0]) if row else 0


def minute_rows(conn: psycopg.Connection, name: str, a: Counters, b: Counters) -> list[str]:
    """The phase between ``a`` and ``b`` minute by minute, by when its jobs were due."""
    rows = conn.execute(
        """SELECT floor(extract(epoch FROM run_at - %(a)s) / 60)::int AS minute, count(*),
                  percentile_cont(0.5) WITHIN GROUP (ORDER BY attempted_at - run_at),
                  percentile_cont(0.99) WITHIN GROUP (ORDER BY attempted_at - run_at),
                  max(attempted_at - run_at),
                  count(*) FILTER (WHERE attempted_at IS NULL)
           FROM supervisor.jobs WHERE run_at > %(a)s AND run_at <= %(b)s
           GROUP BY 1 ORDER BY 1""",
        {"a": a.at, "b": b.at}).fetchall()
    return [f"| {name} | {minute + 1} | {jobs} | {_ms(p50)} / {_ms(p99)} / {_ms(longest)} "
            f"| {waiting} |" for minute, jobs, p50, p99, longest, waiting in rows]


def steady(base_dsn: str, holder: str, rate: float, baseline: float, hold: float,
           recovery: float, batch_size: int = 0, fair: bool = False,
           probe_every: float = 5.0, minutes: bool = False,
           guard: dict[str, str] | None = None, elsewhere: bool = False,
           cycles: int = 1) -> None:
    dsn = scratch(base_dsn)
    supervisor = start_supervisor(dsn, *fair_config(fair))
    producer = Producer(dsn, rate, batch_size)
    shape = (f"batches of {batch_size} with a callback{', fair queue' if fair else ''}"
             if batch_size else "plain jobs")
    where = " in another database" if elsewhere else ""
    guarded = "".join(f", {name} = {value}" for name, value in (guard or {}).items())
    repeated = f" ({cycles} cycles of hold and recovery)" if cycles > 1 else ""
    print(f"steady producer {rate:g} jobs/s ({shape}), holder {holder}{where}{guarded}, phases "
          f"{baseline:g}/{hold:g}/{recovery:g} s{repeated}, supervisor run -n 2 "
          f"(code {os.environ.get('BENCH_CODE', common.ROOT)})")
    print("| phase | offered | completed | pickup p50 / p99 ms | not started "
          "| claim index entries read / claimed job | all index entries read / claimed job "
          "| full-scan probe ms | dead tuples "
          "| hot heap + indexes MB | archives MB | updates / job | WAL bytes / job "
          "| lowest completions in 10 s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    try:
        time.sleep(2.0)  # children forked
        with psycopg.connect(dsn, autocommit=True, application_name="bench-stats") as conn:
            producer.start()
            time.sleep(3.0)  # warm-up, not measured
            phases = [("baseline", baseline, False)]
            for cycle in range(1, cycles + 1):
                mark = f" {cycle}" if cycles > 1 else ""
                phases += [(f"hold ({holder}){mark}", hold, True),
                           (f"recovery{mark}", recovery, False)]
            by_minute: list[str] = []
            for name, seconds, held in phases:
                opened = (Holder(dsn, holder, guard, base_dsn if elsewhere else None)
                          if held else None)
                a, offered_a, probes = counters(conn), producer.offered, []
                began = time.monotonic()
                end = began + seconds
                let_go: float | None = None  # when a guardrail ended the hold
                while time.monotonic() < end:
                    time.sleep(min(probe_every, max(0.0, end - time.monotonic())))
                    probes.append(probe(conn))
                    if opened is not None and let_go is None and not opened.holding(conn):
                        let_go = time.monotonic() - began
                if opened is not None:
                    opened.close(conn)
                if let_go is not None:
                    name += f", ended by the server after about {let_go:.0f} s"
                time.sleep(1.0)  # statistics flushed
                b = counters(conn)
                print(phase_row(conn, name, a, b, producer.offered - offered_a, probes),
                      flush=True)
                if minutes:
                    by_minute += minute_rows(conn, name, a, b)
            if minutes:
                print("\n| phase | minute | jobs due | pickup p50 / p99 / max ms "
                      "| not started at the end |")
                print("|---|---|---|---|---|")
                print("\n".join(by_minute), flush=True)
    finally:
        producer.stopping.set()
        supervisor.terminate()
        supervisor.wait(timeout=60)
        common.drop_database(base_dsn, DB)


# The oldest transaction holding an xid anywhere in the cluster, other than the bench's
# own holder: on a shared server another database's long transaction stops this
# database's index scans from marking dead entries (docs/benchmarks.md, issue 40).
_OUTSIDE_XID_AGE = """
SELECT coalesce(max(extract(epoch FROM now() - xact_start)), 0) FROM pg_stat_activity
WHERE backend_xid IS NOT NULL AND pid <> pg_backend_pid()
  AND application_name NOT LIKE 'bench-holder%%'
"""


def outside_xid_age(dsn: str) -> float:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return float(conn.execute(_OUTSIDE_XID_AGE).fetchone()[0])


def drain(base_dsn: str, holder: str, jobs: int, rounds: int, batch_size: int = 0,
          fair: bool = False) -> None:
    dsn = scratch(base_dsn)
    shape = (f" as batches of {batch_size} with a callback{', fair queue' if fair else ''}"
             if batch_size else "")
    print(f"backlog drain of {jobs} no-op jobs{shape}, supervisor run --burst -n 2, "
          f"holder {holder} "
          f"opened before the drain (code {os.environ.get('BENCH_CODE', common.ROOT)})")
    print("| round | without holder jobs/s | with holder jobs/s | ratio "
          "| oldest outside xid at the drains' ends, s |")
    print("|---|---|---|---|---|")
    try:
        for n in range(rounds):
            rates, outside = [], []
            for kind in ("none", holder):
                common.reset(dsn)
                with psycopg.connect(dsn, autocommit=True) as conn:
                    if batch_size:
                        offered = enqueue_batches(conn, jobs, batch_size)
                    else:
                        conn.execute("INSERT INTO supervisor.jobs (kind, queue) "
                                     "SELECT 'run_noop', %s FROM generate_series(1, %s)",
                                     (QUEUE, jobs))
                        offered = jobs
                    conn.execute("VACUUM ANALYZE supervisor.jobs")
                opened = Holder(dsn, kind)
                try:
                    seconds = common.run_burst(dsn, "-n", "2", "-q", QUEUE, *fair_config(fair))
                finally:
                    with psycopg.connect(dsn, autocommit=True) as conn:
                        opened.close(conn)
                rates.append(offered / seconds)
                outside.append(outside_xid_age(dsn))
            print(f"| {n + 1} | {rates[0]:.0f} | {rates[1]:.0f} | {rates[1] / rates[0]:.2f} "
                  f"| {outside[0]:.0f} / {outside[1]:.0f} |", flush=True)
    finally:
        common.drop_database(base_dsn, DB)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=common.DEFAULT_DSN)
    parser.add_argument("--mode", choices=("steady", "drain"), default="steady")
    parser.add_argument("--holder", choices=("rr", "xid", "query", "none"), default="rr")
    parser.add_argument("--guard", action="append", default=[], metavar="SETTING=VALUE",
                        help="a setting on the holder's session (a guardrail), repeatable")
    parser.add_argument("--cycles", type=int, default=1,
                        help="hold and recovery phases this many times after the baseline")
    parser.add_argument("--elsewhere", action="store_true",
                        help="the holder's session in another database of the cluster")
    parser.add_argument("--rate", type=float, default=500.0)
    parser.add_argument("--baseline", type=float, default=40.0)
    parser.add_argument("--hold", type=float, default=90.0)
    parser.add_argument("--recovery", type=float, default=40.0)
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=0,
                        help="enqueue the jobs as batches of this many with a callback")
    parser.add_argument("--fair", action="store_true",
                        help='the queue fair = "batch" (with --batch-size)')
    parser.add_argument("--probe-every", type=float, default=5.0,
                        help="seconds between two read-only probes from the index's head")
    parser.add_argument("--minutes", action="store_true",
                        help="each phase minute by minute after the table")
    args = parser.parse_args()
    # SIGTERM unwinds like Ctrl-C, so the supervisor is stopped: one left behind claims
    # from the next run's database of the same name (two supervisors, not one, measured).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.rate <= 0 or min(args.baseline, args.hold, args.recovery) <= 0 or args.jobs <= 0:
        raise SystemExit("horizon.py: --rate, phase lengths and --jobs must be positive")
    if args.probe_every <= 0:
        raise SystemExit("horizon.py: --probe-every must be positive")
    if args.batch_size < 0 or (args.fair and not args.batch_size):
        raise SystemExit("horizon.py: --batch-size must be positive, and --fair needs it")
    if args.mode == "steady":
        guard = dict(item.split("=", 1) for item in args.guard if "=" in item)
        if len(guard) != len(args.guard):
            raise SystemExit("horizon.py: --guard takes SETTING=VALUE")
        if args.cycles < 1:
            raise SystemExit("horizon.py: --cycles must be at least 1")
        steady(args.dsn, args.holder, args.rate, args.baseline, args.hold, args.recovery,
               args.batch_size, args.fair, args.probe_every, args.minutes, guard,
               args.elsewhere, args.cycles)
    else:
        drain(args.dsn, args.holder, args.jobs, args.rounds, args.batch_size, args.fair)


if __name__ == "__main__":
    main()
