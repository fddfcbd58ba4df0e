"""Handlers for ``test_run_long_pipe.py``: numpy jobs of 0.1-1 s, the length that gets a
pipe of two (``supervisor/engine/depth.py``). Each start and end is appended to the
file named by ``E2E_LOG`` (``e2e_handlers.record``), so the test counts what ran from
the jobs' side."""

import time

import numpy
from e2e_handlers import record

from workers import job


@job(queue="long_pipe")
def pipe_matmul(seconds: float) -> float:
    """BLAS work (matrix products, OpenBLAS threads) for about ``seconds``."""
    record("start")
    rng = numpy.random.default_rng(7)
    a = rng.random((160, 160))
    total = 0.0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        total += float(numpy.trace(a @ a))
    record("end")
    return total
