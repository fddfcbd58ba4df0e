"""The many-children benchmark's sleeping job (``scripts/bench/many_children.py``), in a
folder of its own so that any checkout's ``supervisor run`` can load it beside its own
handlers (a before/after comparison runs the old checkout with this same job)."""

from __future__ import annotations

import os
import time

from workers import job


@job(queue="bench_sleep")
def sleep_timed(seconds: float) -> list:
    """Sleeps ``seconds``; returns [pid, start, end] (epoch seconds): the child is
    occupied without using a CPU, which leaves the CPUs to the parent and PostgreSQL
    as a many-core machine would."""
    started = time.time()
    time.sleep(seconds)
    return [os.getpid(), started, time.time()]
