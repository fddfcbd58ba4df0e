"""The producer's memory in ``enqueue_many`` (issue 24): what one call allocates beyond
the caller's own ``args_list``, against the size of its encoded args.

Each size runs in a subprocess of its own (so one run's heap never inflates the next's
``ru_maxrss``), which builds ``args_list`` (``{"n": i, "name": "job-<i>"}``: about 30
bytes of JSON a job), then calls ``enqueue_many`` through COPY, and reports:

  * traced: the peak of ``tracemalloc`` during the call (what the call allocated, the
    caller's list excluded), per job and over the encoded args;
  * rss: the subprocess's peak resident size (``ru_maxrss``), interpreter and the
    caller's list included, and its growth during the call.

Usage: python scripts/bench/enqueue_memory.py [--dsn DSN] [--jobs 200000 1000000]
       [--no-trace]   (tracemalloc slows the call; rss alone with --no-trace)
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tracemalloc

import common
import orjson
import psycopg

from shared.enqueue import enqueue_many


def child(dsn: str, jobs: int, trace: bool) -> None:
    args_list = [{"n": i, "name": f"job-{i}"} for i in range(jobs)]
    encoded = sum(len(orjson.dumps(a)) for a in args_list)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if trace:
        tracemalloc.start()
    ids = enqueue_many("bench_noop", args_list, queue="memory", dsn=dsn)
    peak = tracemalloc.get_traced_memory()[1] if trace else None
    tracemalloc.stop()
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert len(ids) == jobs
    print(json.dumps({"jobs": jobs, "encoded": encoded, "traced_peak": peak,
                      "rss_before_kb": before, "rss_peak_kb": after}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=common.DEFAULT_DSN)
    parser.add_argument("--jobs", type=int, nargs="+", default=[200_000, 1_000_000])
    parser.add_argument("--no-trace", action="store_true")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child:
        child(options.dsn, options.child, not options.no_trace)
        return
    dsn = common.scratch_database(options.dsn, "bench_enqueue_memory")
    try:
        print(f"{'jobs':>9} {'encoded MB':>10} {'traced MB':>9} {'x encoded':>9} "
              f"{'B/job':>6} {'rss MB':>7} {'rss growth MB':>13}")
        for jobs in options.jobs:
            out = subprocess.run(
                [sys.executable, __file__, "--dsn", dsn, "--child", str(jobs),
                 *(["--no-trace"] if options.no_trace else [])],
                capture_output=True, text=True, check=True).stdout
            r = json.loads(out.strip().splitlines()[-1])
            traced = r["traced_peak"]
            mb = 1024 * 1024
            print(f"{jobs:>9} {r['encoded'] / mb:>10.1f} "
                  f"{(traced or 0) / mb:>9.1f} {(traced or 0) / r['encoded']:>9.2f} "
                  f"{(traced or 0) / jobs:>6.0f} {r['rss_peak_kb'] / 1024:>7.0f} "
                  f"{(r['rss_peak_kb'] - r['rss_before_kb']) / 1024:>13.0f}")
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("TRUNCATE supervisor.jobs")
    finally:
        common.drop_database(options.dsn, "bench_enqueue_memory")


if __name__ == "__main__":
    main()
