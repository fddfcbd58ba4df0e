"""Handlers for the global-limits tests, loaded with ``--app limits_handlers``.

Each run appends its own start and end (wall clock, pid, concurrency key) to the file
named by ``E2E_LOG``, so the tests judge the limits from what the handlers saw, not
from the supervisors' accounts."""

import os
import time

import orjson

from workers import current_job, job


def record(event: str, key: str | None) -> None:
    ctx = current_job()
    line = orjson.dumps({"id": ctx.id, "queue": ctx.queue, "pid": os.getpid(),
                         "key": key, "event": event, "t": time.time()}) + b"\n"
    fd = os.open(os.environ["E2E_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


@job(queue="limited")
def lim_work(seconds: float = 0.0, key: str | None = None) -> None:
    record("start", key)
    if seconds:
        time.sleep(seconds)
    record("end", key)


@job(queue="other")
def lim_other(seconds: float = 0.0) -> None:
    record("start", None)
    if seconds:
        time.sleep(seconds)
    record("end", None)
