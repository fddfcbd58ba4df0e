"""Pickup latency: from an enqueue's commit to its handler starting, p50/p95/p99.

Probes are single ``enqueue`` calls (one commit each), spaced apart, into their own
queue. The time after ``enqueue`` returns (the commit is done) is compared with the
time the handler recorded at its first line. Idle: the supervisor has nothing else to
do. Under load: it is working through a backlog of no-op jobs in another queue at full
speed at the same time.

Usage: python scripts/bench/latency.py [--probes 300]
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common

from shared.enqueue import enqueue, enqueue_many


def measure(dsn: str, probes: int, gap: float, backlog: int) -> list[float]:
    """Latencies in ms of ``probes`` probes, with ``backlog`` no-op jobs behind them."""
    common.reset(dsn)
    if backlog:
        enqueue_many("run_noop", [{}] * backlog, queue="bench", dsn=dsn)
    log = Path(tempfile.mkstemp(prefix="probe-", suffix=".log")[1])
    proc = subprocess.Popen(
        common.supervisor_cmd("-n", "2", "-q", "probe", "-q", "bench",
                              "--queue-setting", "bench.prefetch=64"),
        env=common.supervisor_env(dsn, BENCH_PROBE_LOG=str(log)), cwd=str(common.SCRIPTS),
        stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(1.5)  # children forked and idle: measure pickup, not start-up
        committed: dict[int, float] = {}
        for _ in range(probes):
            job_id = enqueue("run_probe", {}, queue="probe", dsn=dsn)
            committed[job_id] = time.time()
            time.sleep(gap)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            started = dict(line.split() for line in log.read_text().splitlines())
            if len(started) >= probes:
                break
            time.sleep(0.05)
        else:
            raise SystemExit("probes did not all run within 60 s")
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    log.unlink()
    return [(float(started[str(i)]) - t) * 1000 for i, t in committed.items()]


def run(base_dsn: str = common.DEFAULT_DSN, probes: int = 300) -> list[tuple[str, str]]:
    """Rows for the report."""
    dsn = common.scratch_database(base_dsn, "supervisor_bench_latency")
    rows = []
    try:
        for label, backlog in (("idle", 0), ("under load (no-op backlog in another queue)",
                                              200_000)):
            ms = measure(dsn, probes, 0.02, backlog)
            rows.append((f"pickup latency, {label}, {probes} probes",
                         f"p50 {common.percentile(ms, 50):.1f} ms, "
                         f"p95 {common.percentile(ms, 95):.1f} ms, "
                         f"p99 {common.percentile(ms, 99):.1f} ms"))
    finally:
        common.drop_database(base_dsn, "supervisor_bench_latency")
    return rows


if __name__ == "__main__":
    common.cli(run, __doc__.splitlines()[0], probes=300)
