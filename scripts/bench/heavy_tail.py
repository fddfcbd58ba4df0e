"""Short jobs stuck behind a long one (issue 28): a heavy-tailed stream, ``supervisor run
-n 2 --burst`` at defaults, and the wait of each short job from its claim to its start.

The stream is one kind (``tail_handlers.tail_job``, a sleep): ``--jobs`` jobs of
``--short-ms`` with every ``--every``-th taking ``--long-ms`` instead, all enqueued before
the run. Three runs of the same stream, one after the other:

- ``recall``: this checkout (the jobs queued behind a head job that overran its kind's
  p95 are recalled and given to the other child);
- ``before``: the checkout at ``--before`` (default: a ``git archive`` of ``main`` made
  by this script), which leaves them behind the long job;
- ``no long jobs``: this checkout, the same stream with every job short, the baseline
  the issue compares against (p99 at most 3x this).

The claim's moment is taken by a trigger the script adds to its scratch database (the
commit time of the UPDATE that made the row running, ``clock_timestamp()``); the start's
moment is what the handler returns (``time.time()`` on its first line). Same machine,
same clock. Reported per run: wall time, p50 / p99 / max wait of the short jobs, how
many short jobs waited over 1 s, and the p99 of the jobs claimed after the first second
(the first claim is sent while the children still boot, so its jobs wait for them).

``--explain`` says, for each short job claimed after the first second that waited over
``EXPLAIN_OVER``, why, from each child's timeline (the handler returns its pid and the
wall times it started and ended): claimed again after a release; claimed while every
child ran a long job; left behind a long head (it started on that child right after the
long job ended); moved from behind a long head to another child (recalled: the time from
the long job's start to its own start is shown); or no long job ran meanwhile (the
parent, the pipe or the machine held it).

Usage: python scripts/bench/heavy_tail.py [--jobs 20000] [--every 200] [--short-ms 2]
       [--long-ms 3000] [--children 2] [--before PATH] [--rounds 1] [--explain]
"""

from __future__ import annotations

import argparse
import bisect
import itertools
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common

from shared.enqueue import enqueue_many

DATABASE = "supervisor_bench_heavy_tail"

CLAIM_TRIGGER = """
CREATE TABLE public.bench_claims (id bigint NOT NULL, claimed_at timestamptz NOT NULL);
CREATE FUNCTION public.bench_claimed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.bench_claims VALUES (NEW.id, clock_timestamp());
    RETURN NULL;
END $$;
CREATE TRIGGER bench_claimed AFTER UPDATE OF state ON supervisor.jobs FOR EACH ROW
    WHEN (NEW.state = 'running' AND OLD.state IS DISTINCT FROM 'running')
    EXECUTE FUNCTION public.bench_claimed();
"""

# A job claimed more than once (released by a drain, say) waited from its last claim.
WAITS = """
SELECT (j.result->>'t')::float8 - extract(epoch FROM c.claimed_at),
       c.claimed_at >= (SELECT min(claimed_at) FROM public.bench_claims)
                       + interval '1 second' AS steady
FROM supervisor.jobs j
JOIN (SELECT id, max(claimed_at) AS claimed_at FROM public.bench_claims GROUP BY id) c
     ON c.id = j.id
WHERE j.state = 'completed' AND (j.args->>'ms')::float8 = %(short)s
"""


EXPLAIN_OVER = 0.05  # seconds of wait past which --explain classifies a short job
CLAIM_GAP = 0.002  # claims further apart than this were two statements
BEHIND_GAP = 0.02  # started this soon after a long job ended on its child: it was behind it

TIMELINE = """
SELECT j.id, (j.args->>'ms')::float8 AS ms, (j.result->>'t')::float8 AS t,
       (j.result->>'e')::float8 AS e, (j.result->>'pid')::int AS pid,
       extract(epoch FROM c.claimed_at)::float8 AS claimed, c.claims,
       extract(epoch FROM c.claimed_at) >= extract(epoch FROM c.first) + 1 AS steady
FROM supervisor.jobs j
JOIN (SELECT id, max(claimed_at) AS claimed_at, count(*) AS claims,
             (SELECT min(claimed_at) FROM public.bench_claims) AS first
      FROM public.bench_claims GROUP BY id) c ON c.id = j.id
WHERE j.state = 'completed'
"""


def explain(rows: list[tuple], short_ms: float, children: int) -> dict[str, list[float]]:
    """Why each short job claimed after the first second waited over ``EXPLAIN_OVER``:
    its wait (and, for a recalled one, the time from the long head's start to its own
    start) per cause."""
    longs = [(pid, t, e) for _, ms, t, e, pid, *_ in rows if ms != short_ms]
    causes: dict[str, list[float]] = {}

    def note(cause: str, value: float) -> None:
        causes.setdefault(cause, []).append(value)

    starts: dict[int, list[float]] = {}
    for _, _ms, t, _e, pid, *_ in rows:
        starts.setdefault(pid, []).append(t)
    for ts in starts.values():
        ts.sort()
    runs: dict[int, list[tuple[float, float]]] = {}
    for _, _ms, t, e, pid, *_ in rows:
        runs.setdefault(pid, []).append((t, e))
    for spans in runs.values():
        spans.sort()
        for (_, end), (start, _) in itertools.pairwise(spans):
            if 0 <= start - end < 1.0:  # idle stretches of a burst's end are no gap
                note("a child's idle gap between two jobs", start - end)
    claimed_at = sorted(row[5] for row in rows)
    batch_of: dict[float, int] = {}  # a claim's moment -> how many its statement took
    first = 0
    for i in range(1, len(claimed_at) + 1):
        if i == len(claimed_at) or claimed_at[i] - claimed_at[i - 1] > CLAIM_GAP:
            for at in claimed_at[first:i]:
                batch_of[at] = i - first
            first = i
    for _, ms, t, _e, pid, claimed, claims, steady in rows:
        wait = t - claimed
        if ms != short_ms or not steady:
            continue
        note("claim size, jobs (every steady short job)", batch_of[claimed])
        if wait <= EXPLAIN_OVER:
            continue
        ts = starts[pid]
        ahead = bisect.bisect_left(ts, t) - bisect.bisect_left(ts, claimed)
        note("jobs its child started between its claim and its start, jobs", ahead)
        note("claim size, jobs", batch_of[claimed])
        if claims > 1:
            note("claimed again after a release", wait)
            continue
        stuck = {lpid for lpid, lt, le in longs if lt <= claimed <= le}
        if len(stuck) >= children:
            note("claimed while every child ran a long job", wait)
            continue
        behind = [(lt, le) for lpid, lt, le in longs
                  if lpid == pid and claimed <= le <= t and t - le <= BEHIND_GAP]
        if behind:
            note("left behind a long head on its child", wait)
            continue
        during = [lt for lpid, lt, le in longs if lpid != pid and lt < t and le > claimed]
        if during:
            note("moved from behind a long head (wait)", wait)
            note("moved from behind a long head (its start - long start)",
                 t - max(during))
            continue
        note("no long job ran meanwhile (parent, pipe, machine)", wait)
    return causes


def archive_main(into: Path) -> Path:
    """This repository's ``main`` as files (read from git, no checkout touched)."""
    into.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", str(common.ROOT), "archive", "main"],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def one_run(base_dsn: str, code: Path, jobs: int, every: int, short_ms: float,
            long_ms: float, children: int, explaining: bool = False) -> dict:
    dsn = common.scratch_database_for(base_dsn, DATABASE, str(code))
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(CLAIM_TRIGGER)
        args = [{"ms": long_ms if every and i % every == every - 1 else short_ms}
                for i in range(jobs)]
        enqueue_many("tail_job", args, conn=conn, queue="tail", max_attempts=1)
        conn.execute("VACUUM ANALYZE supervisor.jobs")
    os.environ["BENCH_CODE"] = str(code)
    env = common.supervisor_env(dsn)
    # The handler module lives beside this script, whichever checkout runs.
    env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], str(common.BENCH)])
    started = time.perf_counter()
    proc = subprocess.run(common.supervisor_cmd("--burst", "-n", str(children), "--app",
                                                "tail_handlers", "-q", "tail"),
                          env=env, cwd=str(code), capture_output=True, text=True,
                          timeout=3600)
    took = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"supervisor run failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ANALYZE public.bench_claims")  # else a nested loop over both tables
        conn.execute("ANALYZE supervisor.jobs")
        rows = conn.execute(WAITS, {"short": short_ms}).fetchall()
        waits = [wait for wait, _ in rows]
        # Past the first second: without the jobs claimed while the children still boot.
        steady = [wait for wait, later in rows if later] or [0.0]
        causes = (explain(conn.execute(TIMELINE).fetchall(), short_ms, children)
                  if explaining else {})
        left = conn.execute("SELECT count(*) FROM supervisor.jobs WHERE state <> "
                            "'completed'").fetchone()[0]
    if not waits:
        raise SystemExit(f"no short job completed:\n{proc.stderr[-2000:]}")
    common.drop_database(base_dsn, DATABASE)
    return {"took": took, "n": len(waits), "left": left,
            "p50": common.percentile(waits, 50), "p99": common.percentile(waits, 99),
            "max": max(waits), "over_1s": sum(w > 1.0 for w in waits),
            "p99_steady": common.percentile(steady, 99), "causes": causes,
            "steady_n": len(steady)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=common.DEFAULT_DSN)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--every", type=int, default=200)
    parser.add_argument("--short-ms", type=float, default=2.0)
    parser.add_argument("--long-ms", type=float, default=3000.0)
    parser.add_argument("--children", type=int, default=2)
    parser.add_argument("--before", default=None,
                        help="the checkout to compare with (default: main, archived)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--explain", action="store_true",
                        help="say why each short job past the first second waited long")
    parser.add_argument("--only", nargs="*", default=None,
                        help="run only these: recall, before, no-long")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="heavy-tail-") as tmp:
        before = Path(args.before) if args.before else archive_main(Path(tmp) / "main")
        variants = [("recall", common.ROOT, args.every), ("before", before, args.every),
                    ("no long jobs", common.ROOT, 0)]
        if args.only:
            variants = [v for v in variants if v[0].replace(" jobs", "").replace(" ", "-")
                        in args.only]
        print(f"load average before: {os.getloadavg()}", flush=True)
        print("| run | wall s | short jobs | p50 wait ms | p99 wait ms | max wait ms | "
              "waited > 1 s | p99 past the first second, ms |", flush=True)
        print("|---|---|---|---|---|---|---|---|", flush=True)
        for round_no in range(args.rounds):
            for label, code, every in variants:
                r = one_run(args.dsn, code, args.jobs, every, args.short_ms, args.long_ms,
                            args.children, args.explain)
                assert r["left"] == 0, r
                print(f"| {label} (round {round_no + 1}) | {r['took']:.1f} | {r['n']} | "
                      f"{r['p50'] * 1000:.1f} | {r['p99'] * 1000:.1f} | "
                      f"{r['max'] * 1000:.0f} | {r['over_1s']} | "
                      f"{r['p99_steady'] * 1000:.1f} |", flush=True)
                for cause, values in sorted(r["causes"].items()):
                    # Counts are printed as they are, durations in ms.
                    scale, unit = (1, "") if cause.endswith("jobs") or ", jobs " in cause \
                        else (1000, " ms")
                    print(f"    {cause}: {len(values)} jobs of {r['steady_n']}, p50 "
                          f"{common.percentile(values, 50) * scale:.1f}{unit}, p90 "
                          f"{common.percentile(values, 90) * scale:.1f}{unit}, max "
                          f"{max(values) * scale:.0f}{unit}", flush=True)
        print(f"load average after: {os.getloadavg()}", flush=True)


if __name__ == "__main__":
    main()
