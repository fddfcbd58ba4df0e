"""Handlers for the run benchmarks (``--app bench_handlers`` with scripts/ on the path)."""

import os
import time

from workers import current_job, job


def spin(n: int) -> int:
    """Pure-Python CPU work: about n * 60 ns here. Shared by both sides of the CPU
    benchmark so they do exactly the same work."""
    total = 0
    for i in range(n):
        total = (total + i * i) % 1_000_003
    return total


@job(queue="bench")
def run_noop() -> None:
    """Does nothing: measures the queue's own overhead per job."""
    return None


@job(queue="bench_cpu")
def run_cpu(n: int) -> int:
    """CPU-bound job of ``n`` loop iterations."""
    return spin(n)


def timed_spin(n: int) -> list:
    """``spin(n)``, reporting [thread CPU seconds, wall seconds, pid, start, end] (epoch
    seconds): what the job cost where it ran, and when. Shared by both sides of
    ``scripts/bench/job_timeline.py``."""
    started = time.time()
    cpu, wall = time.thread_time(), time.perf_counter()
    spin(n)
    return [time.thread_time() - cpu, time.perf_counter() - wall, os.getpid(), started,
            time.time()]


@job(queue="bench_timed")
def run_cpu_timed(n: int) -> list:
    """``timed_spin`` as a job: its result is the record."""
    return timed_spin(n)


@job(queue="probe")
def run_probe() -> None:
    """Records when it started (for pickup latency), to the file in BENCH_PROBE_LOG."""
    started = time.time()
    ctx = current_job()
    with open(os.environ["BENCH_PROBE_LOG"], "a") as log:
        log.write(f"{ctx.id} {started!r}\n")


@job(queue="rescue")
def run_hold(seconds: float) -> None:
    """Holds a child for a while (the rescue benchmark kills its supervisor meanwhile)."""
    time.sleep(seconds)


def _probe(event: str) -> None:
    with open(os.environ["BENCH_PROBE_LOG"], "a") as log:
        log.write(f"{current_job().id} {event} {time.time()!r}\n")


@job(queue="stopnote", on_stop="raise")
def run_until_told(busy: bool = False, seconds: float = 60.0) -> None:
    """Sleeps (or spins in Python) until a stop notice raises Stopping; records when it
    started and when Stopping came (``scripts/bench/stop_notice.py``)."""
    from workers import Stopping

    _probe("start")
    end = time.monotonic() + seconds
    try:
        if busy:
            while time.monotonic() < end:
                pass
        else:
            time.sleep(seconds)
    except Stopping:
        _probe("stopping")
        raise


@job
def mixed_job(iterations: int, megabytes: int) -> int:
    """A job of a mixed pipeline (scripts/bench/mixed_pipeline.py): holds ``megabytes``
    of touched memory while it spins ``iterations``."""
    ballast = bytearray(megabytes << 20)
    for i in range(0, len(ballast), 4096):
        ballast[i] = 1
    return spin(iterations) + len(ballast) % 7
