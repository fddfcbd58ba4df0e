"""Handlers for ``test_run_long_pipe.py``: numpy jobs of 0.1-1 s, the length that gets a
pipe of two (``supervisor/engine/depth.py``). Each start and end is appended to the
file named by ``E2E_LOG``, so the test counts what ran from the jobs' side."""

import os
import time

import numpy
import orjson

from workers import current_job, job


def _record(event: str) -> None:
    ctx = current_job()
    line = orjson.dumps({"id": ctx.id, "attempt": ctx.attempt, "pid": os.getpid(),
                         "event": event, "t": time.time()}) + b"\n"
    fd = os.open(os.environ["E2E_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


@job(queue="long_pipe")
def pipe_matmul(seconds: float) -> float:
    """BLAS work (matrix products, OpenBLAS threads) for about ``seconds``."""
    _record("start")
    rng = numpy.random.default_rng(7)
    a = rng.random((160, 160))
    total = 0.0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        total += float(numpy.trace(a @ a))
    _record("end")
    return total
