"""Memory over a long run: parent and child RSS sampled while 1M no-op jobs go through
``supervisor run -n 2``. Flat is the goal: the parent must not grow with jobs done.

Usage: python scripts/bench/rss.py [--jobs 1000000] [--interval 2]
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common

from shared.enqueue import enqueue_many


def rss_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def children_of(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def sample_run(dsn: str, jobs: int, interval: float) -> list[tuple[float, int, int, int]]:
    """(seconds, jobs done, parent KiB, largest child KiB) samples over the run."""
    common.reset(dsn)
    for start in range(0, jobs, 100_000):
        enqueue_many("run_noop", [{}] * min(100_000, jobs - start), queue="bench", dsn=dsn)
    proc = subprocess.Popen(common.supervisor_cmd("-n", "2", "-q", "bench", "--burst",
                                                  "--prefetch", "64"),
                            env=common.supervisor_env(dsn), cwd=str(common.SCRIPTS),
                            stderr=subprocess.DEVNULL)
    samples = []
    t0 = time.monotonic()
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        while proc.poll() is None:
            time.sleep(interval)
            parent = rss_kib(proc.pid)
            kids = [k for k in (rss_kib(c) for c in children_of(proc.pid)) if k]
            done = conn.execute("SELECT count(*) FROM supervisor.jobs WHERE state = 'completed'"
                                ).fetchone()[0]
            if parent:
                samples.append((time.monotonic() - t0, done, parent, max(kids, default=0)))
    if proc.returncode != 0:
        raise SystemExit(f"supervisor run exited {proc.returncode}")
    return samples


def run(base_dsn: str = common.DEFAULT_DSN, jobs: int = 1_000_000,
        interval: float = 2.0) -> list[tuple[str, str]]:
    """Rows for the report."""
    dsn = common.scratch_database(base_dsn, "supervisor_bench_rss")
    try:
        samples = sample_run(dsn, jobs, interval)
    finally:
        common.drop_database(base_dsn, "supervisor_bench_rss")
    # After warm-up (10% of the jobs done) to the end: growth is what a leak shows.
    warm = next((s for s in samples if s[1] >= jobs // 10), samples[0])
    last = samples[-1]
    duration = last[0]
    return [
        (f"parent RSS over {jobs:,} no-op jobs ({len(samples)} samples, "
         f"{duration:.0f} s)", f"{warm[2] / 1024:.1f} MiB after 10%, {last[2] / 1024:.1f} MiB "
         f"at the end, max {max(s[2] for s in samples) / 1024:.1f} MiB"),
        ("parent RSS growth from 10% to the end", f"{(last[2] - warm[2]) / 1024:+.2f} MiB"),
        ("largest child RSS", f"{max(s[3] for s in samples) / 1024:.1f} MiB"),
    ]


if __name__ == "__main__":
    common.cli(run, __doc__.splitlines()[0], jobs=1_000_000, interval=2.0)
