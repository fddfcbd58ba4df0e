"""How long one /metrics render takes in the parent's loop with many job kinds, and how
large the scrape is, with the default kind cap and with no cap.

Usage: python scripts/bench/metrics_render.py [--kinds 2000] [--queues 5]
"""

from __future__ import annotations

import argparse
import time

import common  # noqa: F401  (puts the project on sys.path)

from shared.defaults import METRICS_MAX_KINDS
from shared.jobs import FAIL_ERROR, ClaimedJob
from supervisor.observe import SupervisorMetrics


def measure(kinds: int, queues: int, cap: int) -> tuple[float, int]:
    metrics = SupervisorMetrics("bench", version="1", max_kinds=cap)
    for i in range(kinds):
        job = ClaimedJob(i, f"kind_{i}", f"queue_{i % queues}", 1, 5, 0, None, "{}")
        metrics.job_done(job, 0.02)
        metrics.job_failed(job, FAIL_ERROR, retried=True, discarded=False, duration=0.5)
    runs = []
    for _ in range(5):
        started = time.perf_counter()
        body = metrics.render()
        runs.append(time.perf_counter() - started)
    return sorted(runs)[len(runs) // 2], len(body)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kinds", type=int, default=2000)
    parser.add_argument("--queues", type=int, default=5)
    args = parser.parse_args()
    for cap in (METRICS_MAX_KINDS, args.kinds):
        seconds, size = measure(args.kinds, args.queues, cap)
        print(f"{args.kinds} kinds, cap {cap}: render {seconds * 1000:.1f} ms, "
              f"{size / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
