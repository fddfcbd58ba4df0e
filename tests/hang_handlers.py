"""Handlers for the hang and partition tests, loaded with ``--app hang_handlers``.

A run records its start, a beat every 0.1 s while it sleeps, and its end (wall clock,
pid) in the file named by ``E2E_LOG``: a run that is killed leaves its last beat, so
the tests know from the handlers themselves how long each run really ran."""

import os
import time

import orjson

from workers import current_job, job


def record(event: str) -> None:
    ctx = current_job()
    line = orjson.dumps({"id": ctx.id, "attempt": ctx.attempt, "queue": ctx.queue,
                         "pid": os.getpid(), "ppid": os.getppid(), "event": event,
                         "t": time.time()}) + b"\n"
    fd = os.open(os.environ["E2E_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def beating(seconds: float) -> None:
    record("start")
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        time.sleep(min(0.1, left))
        record("beat")
    record("end")


@job(queue="limited", max_attempts=10)
def hang_limited(seconds: float) -> None:
    beating(seconds)


@job(queue="plain", max_attempts=10)
def hang_plain(seconds: float) -> None:
    beating(seconds)
