"""Celery side of ``peers_cpu.py``; runs only inside Celery's own venv.

The broker is ``$BENCH_BROKER`` (``redis://`` or ``amqp://``). ``$BENCH_SETTINGS=long``
applies Celery's documented advice for long tasks (docs, "Optimizing" and "Prefetch
limits"): ``worker_prefetch_multiplier = 1`` and ``task_acks_late = True`` (the worker is
also started with ``-O fair``); otherwise Celery's defaults. No result backend: results
are ignored, as with the other systems. As a module it is the worker's app
(``celery -A peer_celery worker ...``); as a script it enqueues or probes:

    python peer_celery.py enqueue cpu 2000 80000   # purge, then .delay() each job
    python peer_celery.py probe                    # where the one queued job is now
"""

from __future__ import annotations

import os

import bench_job
from celery import Celery

app = Celery("peer_celery", broker=os.environ["BENCH_BROKER"])
app.conf.task_ignore_result = True
app.conf.broker_connection_retry_on_startup = True
if os.environ.get("BENCH_SETTINGS") == "long":
    app.conf.worker_prefetch_multiplier = 1
    app.conf.task_acks_late = True


@app.task(name="cpu")
def cpu(n: int) -> None:
    """``bench_job.cpu``: the CPU job every system runs."""
    bench_job.cpu(n)


@app.task(name="noop")
def noop(_: int = 0) -> None:
    """``bench_job.noop``: the counted no-op."""
    bench_job.noop()


@app.task(name="long")
def long(seconds: float) -> None:
    """``bench_job.long``: the job running when SIGTERM comes."""
    bench_job.long(seconds)


TASKS = {"cpu": cpu, "noop": noop, "long": long}


def enqueue(kind: str, count: int, arg: float) -> None:
    """Empty the queue, then send ``count`` jobs on one connection."""
    app.control.purge()
    task = TASKS[kind]
    value = int(arg) if kind != "long" else arg
    with app.producer_or_acquire() as producer:
        for _ in range(count):
            task.apply_async((value,), producer=producer)


def probe() -> str:
    """Where the broker holds a job nobody runs now: queued, held (delivered but not
    acknowledged) or gone."""
    with app.connection_for_write() as conn:
        if os.environ["BENCH_BROKER"].startswith("redis"):
            client = conn.default_channel.client
            if client.llen("celery"):
                return "queued"
            return "held" if client.hlen("unacked") else "gone"
        ok = conn.default_channel.queue_declare("celery", passive=True)
        return "queued" if ok.message_count else "gone"


if __name__ == "__main__":
    bench_job.peer_main("peer_celery.py", enqueue, probe)
