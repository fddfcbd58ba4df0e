"""Handlers for ``test_writer_refused_rows_run`` (loaded with ``--app``): a job that fails
every attempt with 65,000 characters of distinct words, beside ordinary and failing
jobs, all retried at once. Each run appends a line to ``E2E_LOG``, so the test counts
what really ran. No tests here."""

import os
import random
import string

import orjson

from shared.jobs import Backoff
from workers import current_job, job

QUICK = Backoff(base=0.05, factor=1.0, jitter=0.0)


def _record() -> None:
    path = os.environ.get("E2E_LOG")
    if not path:
        return
    ctx = current_job()
    line = orjson.dumps({"id": ctx.id, "attempt": ctx.attempt, "kind": ctx.kind}) + b"\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def words(count: int, seed: int) -> str:
    """``count`` characters of random lowercase words (distinct, as a search index sees
    them)."""
    rng = random.Random(seed)
    out: list[str] = []
    size = 0
    while size < count:
        word = "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(3, 10)))
        out.append(word)
        size += len(word) + 1
    return " ".join(out)[:count]


@job(max_attempts=20, backoff=QUICK)
def refused_wordy() -> None:
    _record()
    raise ValueError(words(65000, current_job().attempt))


@job(backoff=QUICK)
def refused_noop(n: int = 0) -> int:
    _record()
    return n


@job(max_attempts=3, backoff=QUICK)
def refused_fail(n: int = 0) -> None:
    _record()
    raise RuntimeError(f"failing job {n}")
