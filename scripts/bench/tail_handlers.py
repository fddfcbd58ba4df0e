"""The heavy-tailed kind of ``scripts/bench/heavy_tail.py``, loaded with ``--app
tail_handlers`` (from this folder, whichever checkout's code runs it)."""

import os
import time

from workers import job


@job(queue="tail", max_attempts=1)
def tail_job(ms: float) -> dict:
    """Sleep ``ms`` milliseconds; the result is the wall time it started at (the
    benchmark subtracts the moment its claim committed), the child's pid and the wall
    time it ended (``--explain`` rebuilds each child's timeline from them)."""
    started = time.time()
    time.sleep(ms / 1000)
    return {"t": started, "pid": os.getpid(), "e": time.time()}
