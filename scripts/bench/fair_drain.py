"""What the weighted overflow costs on short jobs: ``supervisor run -n 2 --burst``
draining no-op jobs from three queues (weights 3:1:1, a minimum of 1 on the third),
start-up included, at prefetch 1 and 64. ``--code DIR`` runs another checkout's
``supervisor`` package (to compare with the code before a change); runs alternate when
several are given.

Usage: python scripts/bench/fair_drain.py [--jobs 3000] [--runs 3] [--code DIR ...]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common

from shared.enqueue import enqueue_many

QUEUES = {"fair_a": "weight = 3", "fair_b": "weight = 1",
          "fair_c": "weight = 1\nmin_workers = 1"}


def drain(dsn: str, jobs: int, prefetch: int, code: str, config: str) -> float:
    """Jobs/s draining ``jobs`` per queue with the ``supervisor`` package under ``code``."""
    common.reset(dsn)
    for queue in QUEUES:
        enqueue_many("run_noop", [{}] * jobs, queue=queue, dsn=dsn)
    cmd = common.supervisor_cmd("-n", "2", "--burst", "--prefetch", str(prefetch),
                                "--config", config, *(a for q in QUEUES for a in ("-q", q)))
    env = common.supervisor_env(dsn)
    env["PYTHONPATH"] = os.pathsep.join([code, env["PYTHONPATH"]])
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=str(common.SCRIPTS), capture_output=True,
                          text=True, timeout=600)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"supervisor exited {proc.returncode}: {proc.stderr[-1000:]}")
    done = common.count_state(dsn, "completed")
    if done != jobs * len(QUEUES):
        raise SystemExit(f"{done} of {jobs * len(QUEUES)} completed")
    return done / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=common.DEFAULT_DSN)
    parser.add_argument("--jobs", type=int, default=3000, help="per queue")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--code", action="append", help="a checkout's root (default: this one)")
    args = parser.parse_args()
    codes = args.code or [str(common.ROOT)]
    # One database per checkout, migrated by that checkout: a checkout refuses a schema
    # newer than its own.
    names = {code: f"bench_fair_drain_{i}" for i, code in enumerate(codes)}
    dsns = {code: common.scratch_database_for(args.dsn, names[code], code) for code in codes}
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
        f.write("".join(f"[queues.{q}]\n{body}\n" for q, body in QUEUES.items()))
    try:
        for prefetch in (1, 64):
            rates: dict[str, list[float]] = {code: [] for code in codes}
            for _ in range(args.runs):
                for code in codes:
                    rates[code].append(drain(dsns[code], args.jobs, prefetch, code, f.name))
            for code, values in rates.items():
                print(f"prefetch {prefetch:2d} {code}: median {common.median(values):7.0f} jobs/s "
                      f"({', '.join(f'{v:.0f}' for v in values)})")
    finally:
        os.unlink(f.name)
        for name in names.values():
            common.drop_database(args.dsn, name)


if __name__ == "__main__":
    main()
