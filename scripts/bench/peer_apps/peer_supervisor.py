"""pg-supervisor side of ``peers_cpu.py``: the shared jobs as handlers
(``supervisor run --app peer_supervisor`` with this folder on the path)."""

from __future__ import annotations

import bench_job

from workers import job


@job(queue="peers")
def peer_cpu(n: int) -> None:
    """``bench_job.cpu``: the CPU job every system runs."""
    bench_job.cpu(n)


@job(queue="peers")
def peer_noop() -> None:
    """``bench_job.noop``: the counted no-op."""
    bench_job.noop()


@job(queue="peers")
def peer_long(seconds: float) -> None:
    """``bench_job.long``: the job running when SIGTERM comes."""
    bench_job.long(seconds)
