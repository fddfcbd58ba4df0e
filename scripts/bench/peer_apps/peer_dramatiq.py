"""Dramatiq side of ``peers_cpu.py``; runs only inside Dramatiq's own venv.

The broker is Redis at ``$BENCH_BROKER``, with Dramatiq's default middleware. As a
module it is the worker's broker and actors (``dramatiq peer_dramatiq -p 2 -t 1``); as
a script it enqueues or probes:

    python peer_dramatiq.py enqueue cpu 2000 80000   # .send() each job
    python peer_dramatiq.py probe                    # where the one queued job is now
"""

from __future__ import annotations

import os

import bench_job
import dramatiq
from dramatiq.brokers.redis import RedisBroker

broker = RedisBroker(url=os.environ["BENCH_BROKER"])
dramatiq.set_broker(broker)


@dramatiq.actor(actor_name="cpu", max_retries=0)
def cpu(n: int) -> None:
    """``bench_job.cpu``: the CPU job every system runs."""
    bench_job.cpu(n)


@dramatiq.actor(actor_name="noop", max_retries=0)
def noop(_: int = 0) -> None:
    """``bench_job.noop``: the counted no-op."""
    bench_job.noop()


@dramatiq.actor(actor_name="long", max_retries=0)
def long(seconds: float) -> None:
    """``bench_job.long``: the job running when SIGTERM comes."""
    bench_job.long(seconds)


ACTORS = {"cpu": cpu, "noop": noop, "long": long}


def enqueue(kind: str, count: int, arg: float) -> None:
    """Send ``count`` jobs to the default queue."""
    actor = ACTORS[kind]
    value = int(arg) if kind != "long" else arg
    for _ in range(count):
        actor.send(value)


def probe() -> str:
    """Where Redis holds a job nobody runs now: queued, held (in a dead worker's
    unacknowledged set, requeued by maintenance once its heartbeat is stale) or gone."""
    client = broker.client
    if client.llen("dramatiq:default"):
        return "queued"
    # Redis drops empty collections, so any acks key left holds a message.
    return "held" if any(client.scan_iter("dramatiq:__acks__.*")) else "gone"


if __name__ == "__main__":
    bench_job.peer_main("peer_dramatiq.py", enqueue, probe)
