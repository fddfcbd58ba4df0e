"""RQ side of ``peers_cpu.py``; runs only inside RQ's own venv.

Jobs are ``bench_job.cpu`` / ``noop`` / ``long`` by dotted path on the ``default`` queue
of the Redis at ``$BENCH_BROKER``; the workers are ``rq worker --burst`` (the forking
``Worker`` or ``-w rq.worker.SimpleWorker``). As a script it enqueues or probes:

    python peer_rq.py enqueue cpu 2000 80000   # one enqueue_many
    python peer_rq.py probe                    # the status of the one job
"""

from __future__ import annotations

import os

import bench_job
from redis import Redis
from rq import Queue

connection = Redis.from_url(os.environ["BENCH_BROKER"])
queue = Queue("default", connection=connection)


def enqueue(kind: str, count: int, arg: float) -> None:
    """Enqueue ``count`` jobs in one ``enqueue_many``, each with a timeout well above its
    length (RQ's default 180 s would cut no job here either)."""
    func = f"bench_job.{kind}"
    args = () if kind == "noop" else ((int(arg) if kind == "cpu" else arg),)
    queue.enqueue_many([Queue.prepare_data(func, args=args, timeout=3600)
                        for _ in range(count)])


def probe() -> str:
    """The one job's status as RQ sees it: queued, held (``started`` by a worker that is
    gone, until RQ's cleanup moves it to the failed registry), failed, or gone."""
    ids = queue.get_job_ids() + queue.started_job_registry.get_job_ids()
    ids += queue.failed_job_registry.get_job_ids()
    if not ids:
        return "gone"
    status = queue.fetch_job(ids[0]).get_status(refresh=True)
    name = getattr(status, "value", str(status))
    return {"started": "held", "queued": "queued"}.get(name, name)


if __name__ == "__main__":
    bench_job.peer_main("peer_rq.py", enqueue, probe)
